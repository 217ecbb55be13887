//! The learned judgment of a key-context candidate: is this value, under this key, written
//! this way, a credential?
//!
//! Each candidate is described by a fixed vector of [`Feature`]s (its key's class and words, the
//! syntax around it, and its value's shape, read in one pass: character classes, dictionary
//! words, scripts, code and format-string shapes), and scored by a logistic model whose
//! weights are trained by `scripts/train-judgment` (see [`super::training`]) and committed in
//! `judgment_weights.json`. The weights start from the hand-set scores this judgment used
//! before (as a prior the training pulls toward), so where the data says nothing the old
//! judgment stands. Precise facts (an empty value, a reference, a placeholder) keep a value
//! before the model is asked; see [`super::key_context::judge`].

use std::sync::LazyLock;

use super::key_context::{KeyClass, Syntax};

/// Defines [`Feature`] from one table: each feature's variant, its name in the weights file,
/// what it says in words (its doc and `--explain`'s text) and its hand-set weight (the prior).
macro_rules! features {
    ($($variant:ident = $id:literal, $words:literal, $prior:literal;)*) => {
        /// One input of the model. The order is the weight vector's order.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
        #[repr(usize)]
        pub enum Feature {
            $(#[doc = $words] $variant,)*
        }

        /// How many features there are.
        pub const FEATURE_COUNT: usize = [$($id),*].len();

        impl Feature {
            /// Every feature, in the weight vector's order.
            pub const ALL: [Feature; FEATURE_COUNT] = [$(Feature::$variant),*];

            fn about(self) -> (&'static str, &'static str, i32) {
                match self {
                    $(Feature::$variant => ($id, $words, $prior),)*
                }
            }
        }
    };
}

features! {
    ClassCredential = "class_credential", "key names a credential", 3;
    ClassMaterial = "class_material", "key names secret material", 2;
    ClassKey = "class_key", "key is a plain key", 1;
    SyntaxStructured = "syntax_structured", "a data value", 2;
    SyntaxQuoted = "syntax_quoted", "a quoted literal", 2;
    SyntaxConfig = "syntax_config", "a bare value in configuration syntax", 1;
    SyntaxFlag = "syntax_flag", "a bare value after a flag", 1;
    SyntaxArgument = "syntax_argument", "a literal argument of a credential-named call", 1;
    SyntaxCode = "syntax_code", "a bare word in code syntax", -1;
    SyntaxProse = "syntax_prose", "a word in a sentence (the password is …)", 1;
    IdentifierInCode = "identifier_in_code", "shaped like an identifier, bare in code", -2;
    IdentifierNamed = "identifier_named", "a name (camelCase, PascalCase, snake_case) under a key that is not a credential name", -1;
    Symbols = "symbols", "mixes in symbols", 1;
    LettersAndDigits = "letters_and_digits", "mixes letters and digits", 1;
    InterleavedBare = "interleaved_bare", "letters and digits interleaved, unlike a name", 1;
    LongAndVaried = "long_and_varied", "long and varied: 16 or more characters, 3 bits each", 1;
    ShortLowercaseNotCredential = "short_lowercase_not_credential", "a short lowercase word under a key that is not a credential name", -1;
    Spaces = "spaces", "holds spaces", -1;
    SeveralWords = "several_words", "three words or more", 0;
    FunctionWord = "function_word", "holds a word a sentence needs (the, is, your, must…)", -1;
    Passphrase = "passphrase", "three to six lowercase words, none a function word (a passphrase)", 1;
    DictionaryShare = "dictionary_share", "share of its words found in a dictionary", 0;
    DictionaryWord = "dictionary_word", "one dictionary word", 0;
    Sentence = "sentence", "written like a sentence", 0;
    EndsLikeProse = "ends_like_prose", "ends like prose (. ? ! :)", 0;
    NonAsciiLetters = "non_ascii_letters", "letters of a script other than Latin ASCII", 0;
    CredentialWordInValue = "credential_word_in_value", "names a credential itself (a label or placeholder)", 0;
    CodeCall = "code_call", "a call or a parenthesized expression", 0;
    CodeOperator = "code_operator", "code operators (== != && || => -> ::)", 0;
    CodeVariable = "code_variable", "starts like a variable ($x, this., self., @x)", 0;
    Concatenation = "concatenation", "a string concatenation", 0;
    FormatString = "format_string", "a format string (%s, {}, {0})", 0;
    Markup = "markup", "markup (<…>) or an HTML entity", 0;
    HexOnly = "hex_only", "hex digits only", 0;
    DigitsOnly = "digits_only", "digits only", 0;
    LongNumber = "long_number", "twelve digits or more and nothing else (a numeric key, not a count or a port)", 1;
    HexConstant = "hex_constant", "a hex constant (0x…)", 0;
    UuidShaped = "uuid_shaped", "shaped like a UUID", 0;
    UrlShaped = "url_shaped", "a URL", 0;
    PathShaped = "path_shaped", "a path (segments between slashes)", 0;
    DottedName = "dotted_name", "lowercase names joined by dots (an attribute's or a setting's name)", 0;
    EmailShaped = "email_shaped", "an e-mail address", 0;
    UpperAndLower = "upper_and_lower", "upper- and lowercase letters", 0;
    AllUpper = "all_upper", "its letters all uppercase", 0;
    LengthLog = "length_log", "its length (log scale)", 0;
    Short = "short", "five characters or fewer", 0;
    Long = "long", "32 characters or more", 0;
    Entropy = "entropy", "bits per character", 0;
    RepeatedRun = "repeated_run", "one character four times running", 0;
    SequentialRun = "sequential_run", "a run like abcd or 1234", 0;
    Base64Alphabet = "base64_alphabet", "base64 of 16 characters or more, mixed case and digits", 0;
    Unpronounceable = "unpronounceable", "letters no language strings together (few vowels, or four consonants running)", 0;
    InnerAssignment = "inner_assignment", "holds an assignment of its own (= or : )", 0;
    KeyTestWord = "key_test_word", "key says test, example, sample, dummy, fake, mock or demo", 0;
    KeyConstant = "key_constant", "key is an environment-style CONSTANT", 0;
    KeyManyWords = "key_many_words", "key of three words or more", 0;
    KeyQuoted = "key_quoted", "a plain key with a quoted literal", 0;
    KeyConfig = "key_config", "a plain key in configuration syntax", 0;
    KeyStructured = "key_structured", "a plain key with a data value", 0;
    MaterialConfig = "material_config", "secret material in configuration syntax", 0;
    CredentialCode = "credential_code", "a credential name with a bare word in code", 0;
}

/// The hand-set scores scaled to the model's logit: a score of 4 (removed) is +1, 3 is -1.
const PRIOR_SCALE: f64 = 2.0;

impl Feature {
    /// The name the weights file gives it.
    pub fn id(self) -> &'static str {
        self.about().0
    }

    /// What it says, in words (`toolwatch redact --explain`).
    pub fn words(self) -> &'static str {
        self.about().1
    }

    /// The weight the hand-set judgment gave it (the training's prior), in logit units.
    pub fn prior(self) -> f64 {
        PRIOR_SCALE * f64::from(self.about().2)
    }
}

/// A candidate's features, in [`Feature::ALL`]'s order.
pub type FeatureVector = [f32; FEATURE_COUNT];

/// What the judgment knows about where a candidate stands.
#[derive(Debug, Clone, Copy)]
pub struct Context<'a> {
    /// The key's class (never [`KeyClass::Other`] here).
    pub class: KeyClass,
    /// The key as written.
    pub key: &'a str,
    /// How the value is written.
    pub syntax: Syntax,
}

/// The model: a weight per feature, a bias, and the logit at which a value is removed.
#[derive(Debug, Clone)]
pub struct JudgmentModel {
    /// Weights in [`Feature::ALL`]'s order.
    pub weights: [f64; FEATURE_COUNT],
    /// The intercept.
    pub bias: f64,
    /// A value whose logit reaches this is removed.
    pub threshold: f64,
}

/// The weights file as committed (written by the training).
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub struct WeightsFile {
    /// What wrote it and from what (informational).
    pub about: String,
    /// The intercept.
    pub bias: f64,
    /// The removal threshold on the logit.
    pub threshold: f64,
    /// Each feature's weight by [`Feature::id`].
    pub weights: std::collections::BTreeMap<String, f64>,
}

/// Why a weights file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum WeightsError {
    /// Not the JSON of a [`WeightsFile`].
    #[error("judgment weights are not valid: {0}")]
    Json(#[from] serde_json::Error),
    /// A feature has no weight.
    #[error("judgment weights lack the feature {0}")]
    Missing(&'static str),
    /// A weight names no feature.
    #[error("judgment weights name an unknown feature {0}")]
    Unknown(String),
}

impl JudgmentModel {
    /// The model the hand-set scores make (the training's starting point).
    pub fn prior() -> JudgmentModel {
        let mut weights = [0.0; FEATURE_COUNT];
        for f in Feature::ALL {
            weights[f as usize] = f.prior();
        }
        JudgmentModel {
            weights,
            bias: -3.5 * PRIOR_SCALE,
            threshold: 0.0,
        }
    }

    /// Reads a weights file's JSON.
    pub fn from_json(text: &str) -> Result<JudgmentModel, WeightsError> {
        let file: WeightsFile = serde_json::from_str(text)?;
        let mut weights = [0.0; FEATURE_COUNT];
        for f in Feature::ALL {
            weights[f as usize] = *file
                .weights
                .get(f.id())
                .ok_or(WeightsError::Missing(f.id()))?;
        }
        if let Some(k) = file
            .weights
            .keys()
            .find(|k| !Feature::ALL.iter().any(|f| f.id() == k.as_str()))
        {
            return Err(WeightsError::Unknown(k.clone()));
        }
        Ok(JudgmentModel {
            weights,
            bias: file.bias,
            threshold: file.threshold,
        })
    }

    /// The weights file for this model.
    pub fn to_file(&self, about: &str) -> WeightsFile {
        WeightsFile {
            about: about.to_string(),
            bias: self.bias,
            threshold: self.threshold,
            weights: Feature::ALL
                .iter()
                .map(|f| (f.id().to_string(), self.weights[*f as usize]))
                .collect(),
        }
    }

    /// The logit of a feature vector.
    pub fn score(&self, x: &FeatureVector) -> f64 {
        let mut z = self.bias;
        for (w, v) in self.weights.iter().zip(x) {
            z += w * f64::from(*v);
        }
        z
    }

    /// The logit less the threshold: a value is removed at 0 or more.
    pub fn margin(&self, x: &FeatureVector) -> f64 {
        self.score(x) - self.threshold
    }

    /// Each present feature's contribution to the logit, largest first.
    pub fn contributions(&self, x: &FeatureVector) -> Vec<(Feature, f64)> {
        let mut out: Vec<(Feature, f64)> = Feature::ALL
            .iter()
            .filter(|f| x[**f as usize] != 0.0)
            .map(|f| (*f, self.weights[*f as usize] * f64::from(x[*f as usize])))
            .filter(|(_, c)| c.abs() >= 0.05)
            .collect();
        out.sort_by(|a, b| b.1.abs().total_cmp(&a.1.abs()));
        out
    }
}

/// The committed model.
pub static MODEL: LazyLock<JudgmentModel> = LazyLock::new(|| {
    JudgmentModel::from_json(include_str!("judgment_weights.json"))
        .expect("the committed judgment weights are checked by a unit test")
});

/// The dictionary: common English words as code comments write them, one per line.
static DICTIONARY: LazyLock<crate::maps::FastSet<&'static str>> = LazyLock::new(|| {
    include_str!("judgment_words.txt")
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect()
});

/// True when `w` (lowercase ASCII letters) is a dictionary word.
pub fn is_dictionary_word(w: &str) -> bool {
    DICTIONARY.contains(w)
}

/// Words that name a credential when a value holds them (labels, placeholders).
const CREDENTIAL_WORDS_IN_VALUES: &[&str] = &[
    "password",
    "passwd",
    "passphrase",
    "secret",
    "token",
    "credential",
    "credentials",
    "apikey",
];

/// Key words that say the value is an example.
const TEST_WORDS: &[&str] = &[
    "test", "tests", "testing", "example", "sample", "dummy", "fake", "mock", "demo",
];

/// The value's shape, read in one pass over its bytes.
#[derive(Debug, Default)]
struct ValueShape {
    lower: u32,
    upper: u32,
    digits: u32,
    /// `' '` and tabs.
    spaces: u32,
    /// Bytes that are neither ASCII letters, digits nor `_ - . ` (a space): symbols, tabs and
    /// the bytes of non-ASCII characters.
    marks: u32,
    non_ascii: u32,
    underscores: u32,
    slashes: u32,
    hex_letters: u32,
    base64_other: u32,
    turns: u32,
    /// Lowercase letters followed by a capital (camelCase humps).
    humps: u32,
    max_run: u32,
    max_sequence: u32,
    vowels: u32,
    max_consonants: u32,
    /// Words between whitespace, as `str::split_whitespace` counts them (ASCII text only;
    /// [`features`] counts others with it).
    blank_words: u32,
    words: u32,
    dictionary_words: u32,
    credential_words: bool,
    operator: bool,
    format: bool,
    url: bool,
    open_paren: bool,
    close_paren: bool,
    angles: (bool, bool),
    ampersand: bool,
    plus: bool,
    dot: bool,
    quote: bool,
    at_sign: bool,
    colon_space: bool,
    first_equals: Option<usize>,
    last_not_equals: Option<usize>,
    entropy: f64,
}

/// The value's shape: counts, runs, words and code marks in one pass (plus the entropy's).
fn value_shape(v: &str) -> ValueShape {
    let b = v.as_bytes();
    let mut s = ValueShape::default();
    let (mut run, mut seq, mut consonants) = (0u32, 0u32, 0u32);
    let mut word_start: Option<usize> = None;
    let mut in_blank_word = false;
    for (i, &c) in b.iter().enumerate() {
        match c {
            b'a'..=b'z' => s.lower += 1,
            b'A'..=b'Z' => s.upper += 1,
            b'0'..=b'9' => s.digits += 1,
            b' ' | b'\t' => s.spaces += 1,
            0x80.. => s.non_ascii += 1,
            _ => {}
        }
        if !c.is_ascii_alphanumeric() && !matches!(c, b'_' | b'-' | b'.' | b' ') {
            s.marks += 1;
        }
        match c {
            b'_' => s.underscores += 1,
            b'/' => s.slashes += 1,
            b'(' => s.open_paren = true,
            b')' => s.close_paren = true,
            b'<' => s.angles.0 = true,
            b'>' => s.angles.1 = true,
            b'&' => s.ampersand = true,
            b'+' => s.plus = true,
            b'.' => s.dot = true,
            b'"' | b'\'' => s.quote = true,
            b'@' => s.at_sign = true,
            b'=' => {
                s.first_equals.get_or_insert(i);
            }
            _ => {}
        }
        if c != b'=' {
            s.last_not_equals = Some(i);
        }
        // `char::is_whitespace` on ASCII, as `split_whitespace` splits.
        let blank = matches!(c, b' ' | b'\t' | b'\n' | b'\x0B' | b'\x0C' | b'\r');
        if !blank && !in_blank_word {
            s.blank_words += 1;
        }
        in_blank_word = !blank;
        if matches!(c, b'a'..=b'f' | b'A'..=b'F') {
            s.hex_letters += 1;
        }
        if matches!(c.to_ascii_lowercase(), b'a' | b'e' | b'i' | b'o' | b'u') {
            s.vowels += 1;
            consonants = 0;
        } else if c.is_ascii_alphabetic() {
            consonants += 1;
            s.max_consonants = s.max_consonants.max(consonants);
        } else {
            consonants = 0;
        }
        if matches!(c, b'+' | b'/' | b'=' | b'-' | b'_') {
            s.base64_other += 1;
        }
        let prev = if i > 0 { b[i - 1] } else { 0 };
        if i > 0 {
            if (prev.is_ascii_alphabetic() && c.is_ascii_digit())
                || (prev.is_ascii_digit() && c.is_ascii_alphabetic())
            {
                s.turns += 1;
            }
            run = if c == prev { run + 1 } else { 1 };
            seq = if c.is_ascii_alphanumeric() && c == prev.wrapping_add(1) {
                seq + 1
            } else {
                1
            };
            match (prev, c) {
                (b'=', b'=')
                | (b'!', b'=')
                | (b'&', b'&')
                | (b'|', b'|')
                | (b'=', b'>')
                | (b'-', b'>')
                | (b':', b':') => s.operator = true,
                (b'%', b's' | b'd' | b'v' | b'(') | (b'{', b'}' | b'0'..=b'9') => s.format = true,
                (b':', b'/') if b.get(i + 1) == Some(&b'/') => s.url = true,
                (b':', b' ') => s.colon_space = true,
                _ => {}
            }
        } else {
            run = 1;
            seq = 1;
        }
        s.max_run = s.max_run.max(run);
        s.max_sequence = s.max_sequence.max(seq);
        // Words: runs of letters, split at camelCase humps.
        let hump = c.is_ascii_uppercase() && prev.is_ascii_lowercase();
        s.humps += u32::from(hump);
        if c.is_ascii_alphabetic() && !hump {
            word_start.get_or_insert(i);
        } else {
            if let Some(ws) = word_start.take() {
                s.count_word(&b[ws..i]);
            }
            if hump {
                word_start = Some(i);
            }
        }
    }
    if let Some(ws) = word_start {
        s.count_word(&b[ws..]);
    }
    s.entropy = super::validators::shannon_entropy(v);
    s
}

impl ValueShape {
    /// Counts a word of letters (three or more) and looks it up.
    fn count_word(&mut self, w: &[u8]) {
        if w.len() < 3 || w.len() > 24 {
            return;
        }
        let mut buf = [0u8; 24];
        for (d, c) in buf.iter_mut().zip(w) {
            *d = c.to_ascii_lowercase();
        }
        let Ok(word) = std::str::from_utf8(&buf[..w.len()]) else {
            return;
        };
        self.words += 1;
        if is_dictionary_word(word) {
            self.dictionary_words += 1;
        }
        if CREDENTIAL_WORDS_IN_VALUES.contains(&word) {
            self.credential_words = true;
        }
    }

    /// camelCase, PascalCase with two humps or more, snake_case: how code names things
    /// (`first` is the value's first byte, `len` its length).
    fn identifier_shaped(&self, first: u8, len: u32) -> bool {
        if first.is_ascii_digit() || self.lower + self.upper + self.digits + self.underscores != len
        {
            return false;
        }
        let lower_then_upper = self.humps > 0;
        let camel = first.is_ascii_lowercase() && lower_then_upper;
        let pascal = first.is_ascii_uppercase()
            && lower_then_upper
            && self.upper >= 2
            && self.upper * 3 <= len;
        let snake = self.underscores > 0 && self.lower + self.upper > 0;
        // Digits among letters are not how code names things (`p4ssW0rd`, `gn201md`).
        (camel || pascal || snake) && self.turns < 2
    }

    /// Holds an `=` before any it ends with, or `: `.
    fn inner_assignment(&self) -> bool {
        let inner_equals = match (self.first_equals, self.last_not_equals) {
            (Some(e), Some(n)) => e <= n,
            _ => false,
        };
        inner_equals || self.colon_space
    }
}

/// Letters no language strings together: four or more with under a fifth vowels, or four
/// consonants running.
pub(crate) fn unpronounceable(letters: u32, vowels: u32, max_consonants: u32) -> bool {
    letters >= 4 && (vowels * 5 < letters || max_consonants >= 4)
}

/// [`unpronounceable`] of the ASCII letters of `word` (other bytes end a consonant run).
pub(crate) fn unpronounceable_word(word: &[u8]) -> bool {
    let (mut letters, mut vowels, mut run, mut max_run) = (0, 0, 0, 0);
    for c in word {
        if matches!(c.to_ascii_lowercase(), b'a' | b'e' | b'i' | b'o' | b'u') {
            vowels += 1;
            run = 0;
        } else if c.is_ascii_alphabetic() {
            run += 1;
            max_run = max_run.max(run);
        } else {
            run = 0;
        }
        letters += u32::from(c.is_ascii_alphabetic());
    }
    unpronounceable(letters, vowels, max_run)
}

fn uuid_shaped(v: &[u8]) -> bool {
    v.len() == 36
        && v.iter().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => *c == b'-',
            _ => c.is_ascii_hexdigit(),
        })
}

/// `"a" + b`, `'a' . $b`: the patterns are looked for only where their characters are.
/// Digits that read as a moment: `YYYYMMDDhhmmss` (years 1970-2099), or seconds since 1970
/// in milli-, micro- or nanoseconds between 2001 and 2039. A long number that is a time is
/// not a numeric key.
fn time_shaped(digits: &[u8]) -> bool {
    let n = |r: std::ops::Range<usize>| {
        digits[r]
            .iter()
            .fold(0u64, |a, d| a * 10 + u64::from(d - b'0'))
    };
    match digits.len() {
        14 => {
            (1970..=2099).contains(&n(0..4))
                && (1..=12).contains(&n(4..6))
                && (1..=31).contains(&n(6..8))
                && n(8..10) < 24
                && n(10..12) < 60
                && n(12..14) < 60
        }
        13 | 16 | 19 => (1_000_000_000..2_200_000_000).contains(&n(0..10)),
        _ => false,
    }
}

/// Words a sentence needs and a chosen passphrase does without: a label or a message
/// ("must be at least eight characters", "enter your password") holds one.
const FUNCTION_WORDS: &[&str] = &[
    "a", "am", "an", "and", "are", "as", "at", "be", "been", "but", "by", "can", "cannot", "could",
    "did", "do", "does", "for", "from", "had", "has", "have", "if", "in", "is", "it", "its",
    "least", "may", "might", "must", "my", "no", "nor", "not", "of", "on", "or", "our", "please",
    "should", "so", "than", "that", "the", "their", "then", "these", "this", "those", "to", "too",
    "was", "were", "when", "will", "with", "would", "you", "your",
];

/// `w` in any case is one of [`FUNCTION_WORDS`] (six letters at most): folded on the stack,
/// as every judged value with a blank asks.
fn is_function_word(w: &str) -> bool {
    let mut buf = [0u8; 6];
    if w.is_empty() || w.len() > buf.len() {
        return false;
    }
    for (d, c) in buf.iter_mut().zip(w.bytes()) {
        *d = c.to_ascii_lowercase();
    }
    std::str::from_utf8(&buf[..w.len()]).is_ok_and(|w| FUNCTION_WORDS.binary_search(&w).is_ok())
}

/// Single-spaced lowercase words, none a function word: `correct horse battery staple`.
fn passphrase_words(v: &str) -> bool {
    v.split(' ')
        .all(|w| w.len() >= 2 && w.bytes().all(|c| c.is_ascii_lowercase()) && !is_function_word(w))
}

/// `gen_ai.request.seed`, `llm.watsonx.random_seed`: segments of lowercase letters and `_`,
/// each starting with a letter, no digits.
fn dotted_name(b: &[u8]) -> bool {
    b.split(|c| *c == b'.').all(|seg| {
        seg.first().is_some_and(u8::is_ascii_lowercase)
            && seg.iter().all(|c| c.is_ascii_lowercase() || *c == b'_')
    })
}

fn concatenation(v: &str, s: &ValueShape) -> bool {
    (s.plus || (s.dot && s.quote))
        && ["\" +", "+ \"", "' +", "+ '", "\" .", ". \"", " + "]
            .iter()
            .any(|p| v.contains(p))
}

fn markup(v: &str, s: &ValueShape) -> bool {
    (s.angles.0 && s.angles.1) || (s.ampersand && (v.contains("&amp") || v.contains("&quot")))
}

fn email_shaped(v: &str, s: &ValueShape) -> bool {
    s.at_sign
        && s.spaces == 0
        && v.split_once('@')
            .is_some_and(|(u, d)| !u.is_empty() && d.contains('.') && !d.ends_with('.'))
}

fn set(x: &mut FeatureVector, f: Feature, on: bool) {
    if on {
        x[f as usize] = 1.0;
    }
}

/// The features of `value` (trimmed, not empty) in its context.
pub fn features(ctx: &Context<'_>, v: &str) -> FeatureVector {
    use Feature::*;
    let mut x = [0f32; FEATURE_COUNT];
    let s = value_shape(v);
    let b = v.as_bytes();
    let len = b.len() as u32;
    let class = ctx.class;
    let syntax = ctx.syntax;
    let bare = syntax.is_bare();
    set(&mut x, ClassCredential, class == KeyClass::Credential);
    set(&mut x, ClassMaterial, class == KeyClass::Material);
    set(&mut x, ClassKey, class == KeyClass::Key);
    set(&mut x, SyntaxStructured, syntax == Syntax::Structured);
    set(&mut x, SyntaxQuoted, syntax == Syntax::Quoted);
    set(&mut x, SyntaxConfig, syntax == Syntax::Config);
    set(&mut x, SyntaxFlag, syntax == Syntax::Flag);
    set(&mut x, SyntaxArgument, syntax == Syntax::Argument);
    set(&mut x, SyntaxCode, syntax == Syntax::Code);
    set(&mut x, SyntaxProse, syntax == Syntax::Prose);
    let identifier = b.first().is_some_and(|f| s.identifier_shaped(*f, len));
    set(
        &mut x,
        IdentifierInCode,
        identifier && syntax == Syntax::Code,
    );
    set(
        &mut x,
        IdentifierNamed,
        identifier && !bare && class < KeyClass::Credential,
    );
    let symbols = s.marks > 0;
    set(&mut x, Symbols, symbols);
    let letters = s.lower + s.upper > 0;
    set(&mut x, LettersAndDigits, letters && s.digits > 0);
    set(&mut x, InterleavedBare, bare && !symbols && s.turns >= 2);
    set(&mut x, LongAndVaried, len >= 16 && s.entropy >= 3.0);
    set(
        &mut x,
        ShortLowercaseNotCredential,
        class != KeyClass::Credential && len <= 8 && s.lower == len,
    );
    set(&mut x, Spaces, s.spaces > 0);
    // Words as prose has them (Unicode blanks counted by the standard library).
    let blank_words = if s.non_ascii == 0 {
        s.blank_words as usize
    } else {
        v.split_whitespace().count()
    };
    set(&mut x, SeveralWords, blank_words >= 3);
    set(
        &mut x,
        FunctionWord,
        s.spaces > 0
            && v.split(|c: char| !c.is_ascii_alphabetic())
                .any(is_function_word),
    );
    set(
        &mut x,
        Passphrase,
        (3..=6).contains(&blank_words) && s.lower + s.spaces == len && passphrase_words(v),
    );
    if s.words > 0 {
        x[DictionaryShare as usize] = s.dictionary_words as f32 / s.words as f32;
    }
    set(
        &mut x,
        DictionaryWord,
        s.words == 1 && s.dictionary_words == 1 && s.lower + s.upper == len,
    );
    let first_upper = b.first().is_some_and(u8::is_ascii_uppercase);
    set(
        &mut x,
        Sentence,
        first_upper && blank_words >= 3 && s.lower > s.upper,
    );
    set(
        &mut x,
        EndsLikeProse,
        s.spaces > 0
            && b.last()
                .is_some_and(|c| matches!(c, b'.' | b'?' | b'!' | b':')),
    );
    set(
        &mut x,
        NonAsciiLetters,
        s.non_ascii > 0 && v.chars().any(|c| !c.is_ascii() && c.is_alphabetic()),
    );
    set(&mut x, CredentialWordInValue, s.credential_words);
    set(&mut x, CodeCall, s.open_paren && s.close_paren);
    set(&mut x, CodeOperator, s.operator);
    set(
        &mut x,
        CodeVariable,
        (b.first() == Some(&b'$') && b.get(1).is_some_and(|c| c.is_ascii_alphabetic()))
            || v.starts_with("this.")
            || v.starts_with("self.")
            || (b.first() == Some(&b'@') && b.get(1).is_some_and(|c| c.is_ascii_alphabetic())),
    );
    set(&mut x, Concatenation, concatenation(v, &s));
    set(&mut x, FormatString, s.format);
    set(&mut x, Markup, markup(v, &s));
    set(
        &mut x,
        HexOnly,
        len >= 8 && s.digits > 0 && s.hex_letters > 0 && s.digits + s.hex_letters == len,
    );
    set(&mut x, DigitsOnly, s.digits == len);
    set(
        &mut x,
        LongNumber,
        len >= 12 && s.digits == len && !time_shaped(b),
    );
    set(
        &mut x,
        HexConstant,
        len >= 3
            && (v.starts_with("0x") || v.starts_with("0X"))
            && b[2..].iter().all(u8::is_ascii_hexdigit),
    );
    set(&mut x, UuidShaped, uuid_shaped(b));
    set(&mut x, UrlShaped, s.url);
    set(
        &mut x,
        PathShaped,
        !s.url && s.spaces == 0 && s.slashes >= 2 && letters,
    );
    set(&mut x, DottedName, s.dot && dotted_name(b));
    set(&mut x, EmailShaped, email_shaped(v, &s));
    set(&mut x, UpperAndLower, s.upper > 0 && s.lower > 0);
    set(&mut x, AllUpper, s.upper > 0 && s.lower == 0);
    x[LengthLog as usize] = ((f64::from(len.max(1))).log2() / 6.0).min(1.5) as f32;
    set(&mut x, Short, len <= 5);
    set(&mut x, Long, len >= 32);
    x[Entropy as usize] = (s.entropy / 6.0) as f32;
    set(&mut x, RepeatedRun, s.max_run >= 4);
    set(&mut x, SequentialRun, s.max_sequence >= 4);
    set(
        &mut x,
        Base64Alphabet,
        len >= 16
            && s.upper > 0
            && s.lower > 0
            && s.digits > 0
            && s.spaces == 0
            && s.non_ascii == 0
            && s.lower + s.upper + s.digits + s.base64_other == len,
    );
    let letters_n = s.lower + s.upper;
    set(
        &mut x,
        Unpronounceable,
        unpronounceable(letters_n, s.vowels, s.max_consonants),
    );
    set(&mut x, InnerAssignment, s.inner_assignment());
    // The key.
    let mut key_words = 0;
    let mut test_word = false;
    super::key_context::each_key_word(ctx.key, |w| {
        key_words += 1;
        test_word |= TEST_WORDS.contains(&w);
        true
    });
    set(&mut x, KeyTestWord, test_word);
    let kb = ctx.key.as_bytes();
    set(
        &mut x,
        KeyConstant,
        kb.iter().any(u8::is_ascii_uppercase)
            && kb
                .iter()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == b'_'),
    );
    set(&mut x, KeyManyWords, key_words >= 3);
    set(
        &mut x,
        KeyQuoted,
        class == KeyClass::Key && matches!(syntax, Syntax::Quoted | Syntax::Argument),
    );
    set(
        &mut x,
        KeyConfig,
        class == KeyClass::Key && syntax == Syntax::Config,
    );
    set(
        &mut x,
        KeyStructured,
        class == KeyClass::Key && syntax == Syntax::Structured,
    );
    set(
        &mut x,
        MaterialConfig,
        class == KeyClass::Material && matches!(syntax, Syntax::Config | Syntax::Flag),
    );
    set(
        &mut x,
        CredentialCode,
        class == KeyClass::Credential && syntax == Syntax::Code,
    );
    x
}

#[cfg(test)]
mod tests {
    use super::time_shaped;

    #[test]
    fn long_numbers_that_read_as_a_moment_are_times() {
        for t in [
            "20261206093000",
            "19991231235959",
            "1733480123456",
            "1733480123456789",
            "1733480123456789012",
        ] {
            assert!(time_shaped(t.as_bytes()), "{t}");
        }
        for k in [
            "6502241089672483",
            "20261306093000",
            "65022410896724",
            "9733480123456",
            "123456789012",
        ] {
            assert!(!time_shaped(k.as_bytes()), "{k}");
        }
    }

    use super::*;

    #[test]
    fn function_words_are_sorted_and_tell_a_message_from_a_passphrase() {
        assert!(FUNCTION_WORDS.windows(2).all(|w| w[0] < w[1]));
        assert!(FUNCTION_WORDS.iter().all(|w| w.len() <= 6));
        assert!(is_function_word("The") && is_function_word("MUST") && !is_function_word(""));
        assert!(passphrase_words("correct horse battery staple"));
        assert!(!passphrase_words("must be at least eight characters"));
        assert!(!passphrase_words("enter your password"));
        assert!(!passphrase_words("two  spaces here"));
    }

    #[test]
    fn dotted_names_are_lowercase_segments() {
        assert!(dotted_name(b"gen_ai.request.seed"));
        assert!(!dotted_name(b"abc.def1"));
        assert!(!dotted_name(b"a..b"));
        assert!(!dotted_name(b".hidden"));
        assert!(!dotted_name(b"My.Secret"));
    }

    #[test]
    fn committed_weights_name_every_feature() {
        let m = JudgmentModel::from_json(include_str!("judgment_weights.json")).expect("weights");
        assert!(m.weights.iter().all(|w| w.is_finite()));
        assert_eq!(Feature::ALL.len(), FEATURE_COUNT);
        for (i, f) in Feature::ALL.iter().enumerate() {
            assert_eq!(*f as usize, i, "{f:?} out of order");
        }
    }

    #[test]
    fn the_prior_is_the_hand_set_score() {
        // `password: qzva` in config scored 3 + 1 = 4 by hand: removed, by a margin of 1.
        let m = JudgmentModel::prior();
        let ctx = Context {
            class: KeyClass::Credential,
            key: "password",
            syntax: Syntax::Config,
        };
        let z = m.score(&features(&ctx, "qzva"));
        assert!((z - PRIOR_SCALE * 0.5).abs() < 1e-9, "{z}");
    }

    #[test]
    fn shapes_read_in_one_pass() {
        let s = value_shape("getSupportedToken() == x1");
        assert_eq!((s.words, s.turns), (3, 1));
        assert!(s.operator && s.credential_words);
        let s = value_shape("aaaa1234");
        assert_eq!((s.max_run, s.max_sequence, s.turns), (4, 4, 1));
    }

    /// camelCase, PascalCase, snake_case read off the text (the definition the one-pass
    /// shape must agree with).
    fn identifier_shaped_by_text(v: &str) -> bool {
        let b = v.as_bytes();
        if b.is_empty()
            || b[0].is_ascii_digit()
            || !b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_')
        {
            return false;
        }
        let lower_then_upper = b
            .windows(2)
            .any(|w| w[0].is_ascii_lowercase() && w[1].is_ascii_uppercase());
        let humps = b.iter().filter(|c| c.is_ascii_uppercase()).count();
        let camel = b[0].is_ascii_lowercase() && lower_then_upper;
        let pascal =
            b[0].is_ascii_uppercase() && lower_then_upper && humps >= 2 && humps * 3 <= b.len();
        let snake = v.contains('_') && v.bytes().any(|c| c.is_ascii_alphabetic());
        let turns = b
            .windows(2)
            .filter(|w| {
                (w[0].is_ascii_alphabetic() && w[1].is_ascii_digit())
                    || (w[0].is_ascii_digit() && w[1].is_ascii_alphabetic())
            })
            .count();
        (camel || pascal || snake) && turns < 2
    }

    /// The facts the one pass reads, as it reads them.
    fn facts_by_shape(v: &str) -> Vec<(&'static str, usize)> {
        let s = value_shape(v);
        let b = v.as_bytes();
        let ascii = s.non_ascii == 0;
        vec![
            ("symbols", usize::from(s.marks > 0)),
            (
                "blank words",
                if ascii { s.blank_words as usize } else { 0 },
            ),
            ("call", usize::from(s.open_paren && s.close_paren)),
            ("concatenation", usize::from(concatenation(v, &s))),
            ("markup", usize::from(markup(v, &s))),
            ("assignment", usize::from(s.inner_assignment())),
            ("slashes", s.slashes as usize),
            ("e-mail", usize::from(email_shaped(v, &s))),
            (
                "identifier",
                usize::from(
                    b.first()
                        .is_some_and(|f| s.identifier_shaped(*f, b.len() as u32)),
                ),
            ),
        ]
    }

    /// The same facts read off the text by their definitions.
    fn facts_by_text(v: &str) -> Vec<(&'static str, usize)> {
        let b = v.as_bytes();
        let ascii = v.is_ascii();
        vec![
            (
                "symbols",
                usize::from(
                    b.iter()
                        .any(|c| !c.is_ascii_alphanumeric() && !b"_-. ".contains(c)),
                ),
            ),
            (
                "blank words",
                if ascii {
                    v.split_whitespace().count()
                } else {
                    0
                },
            ),
            (
                "call",
                usize::from((v.contains('(') && v.contains(')')) || v.ends_with("()")),
            ),
            (
                "concatenation",
                usize::from(
                    ["\" +", "+ \"", "' +", "+ '", "\" .", ". \"", " + "]
                        .iter()
                        .any(|p| v.contains(p)),
                ),
            ),
            (
                "markup",
                usize::from(
                    (v.contains('<') && v.contains('>'))
                        || v.contains("&amp")
                        || v.contains("&quot"),
                ),
            ),
            (
                "assignment",
                usize::from(v.trim_end_matches('=').contains('=') || v.contains(": ")),
            ),
            ("slashes", v.matches('/').count()),
            (
                "e-mail",
                usize::from(
                    !v.contains([' ', '\t'])
                        && v.split_once('@').is_some_and(|(u, d)| {
                            !u.is_empty() && d.contains('.') && !d.ends_with('.')
                        }),
                ),
            ),
            ("identifier", usize::from(identifier_shaped_by_text(v))),
        ]
    }

    /// Edges random strings rarely reach: each fact's pattern just there and just not.
    #[test]
    fn the_one_pass_shape_agrees_with_the_text_at_its_edges() {
        for v in [
            "BZaeqa",
            "BZaeq",
            "BaZe",
            "a0B",
            "aB",
            "Ab_",
            "_a",
            "7a",
            "x\" . $y",
            "'a' . b",
            "\"a\" +b",
            "a+b",
            "a + b",
            "a.b\"c",
            "&amp;x",
            "&ampx",
            "&quo",
            "<b",
            "b>",
            "<b>",
            "a=b==",
            "==",
            "a=",
            "=a",
            "a: b",
            "a:b",
            "u@d.c",
            "@d.c",
            "u@d.",
            "u@dc",
            "u @d.c",
            "p/q/r",
            "f()",
            "(x",
            "x)",
            "a\u{b}b c",
            "a\u{c}b",
            "\tx\n",
            "\tx",
            "a\tb",
            "  ",
            "a-b.c d",
        ] {
            assert_eq!(facts_by_shape(v), facts_by_text(v), "{v:?}");
        }
    }

    proptest::proptest! {
        /// What the one pass counts agrees with the same facts read off the text, on strings
        /// dense in the characters that decide them.
        #[test]
        fn the_one_pass_shape_agrees_with_the_text(
            chars in proptest::collection::vec(
                proptest::sample::select(vec![
                    'a', 'B', 'q', 'Z', 'e', '0', '7', '_', '-', '.', ' ', '\t', '\n', '\u{b}',
                    '=', ':', '/', '(', ')', '<', '>', '&', ';', '+', '"', '\'', '@', '$', '%',
                    '{', '}', 'é', '\u{a0}', '語',
                ]),
                1..24,
            )
        ) {
            let v: String = chars.into_iter().collect();
            proptest::prop_assert_eq!(facts_by_shape(&v), facts_by_text(&v));
        }

        /// The same for the identifier shape, on strings of the characters names are made of
        /// (rarely drawn above).
        #[test]
        fn the_one_pass_identifier_shape_agrees_with_the_text(
            chars in proptest::collection::vec(
                proptest::sample::select(vec!['a', 'q', 'e', 'B', 'Z', 'Q', '0', '7', '_']),
                1..12,
            )
        ) {
            let v: String = chars.into_iter().collect();
            proptest::prop_assert_eq!(facts_by_shape(&v), facts_by_text(&v));
        }
    }
}
