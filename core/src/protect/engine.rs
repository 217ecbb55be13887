//! The compiled rules: one Aho-Corasick pass picks the detectors worth running on a string,
//! then only those regexes run. Overlapping findings are merged into one span, so the union of
//! everything any rule matched is removed; the merged span is named after the rule that
//! starts first (at one start, the rule listed first: specific rules precede generic ones).

use std::collections::HashSet;
use std::ops::Range;
use std::sync::Arc;

use regex::Regex;

use super::catalogue;
use super::group_place::GroupPlace;
use super::key_context::{self, Judgment, KeyClass, Syntax};
use super::keywords::KeywordSearch;
use super::learned;
use super::rules::{Action, DetectorSpec, KeyGlob, KeyRuleSpec, RedactionConfig};
use super::shape::{ShapeCompletion, ShapeGate, Shapes};
use super::validators::Validator;
use super::KeyedHasher;
use crate::event::Redactions;

/// A rule that cannot be used; the daemon refuses to start with it.
#[derive(Debug, thiserror::Error)]
pub enum RuleError {
    /// The regex does not compile.
    #[error("redaction rule {id}: invalid regex: {source}")]
    Regex {
        /// Rule id.
        id: String,
        /// The regex error.
        source: Box<regex::Error>,
    },
    /// The capture group does not exist in the regex.
    #[error("redaction rule {id}: group {group} does not exist (the regex has {groups})")]
    Group {
        /// Rule id.
        id: String,
        /// Configured group.
        group: usize,
        /// Groups in the regex, including 0.
        groups: usize,
    },
    /// Two rules share an id.
    #[error("redaction rule id {0} is used twice")]
    DuplicateId(String),
    /// `drop` and `truncate` are for key rules.
    #[error("redaction rule {0}: a detector can mask or hash its match; drop and truncate are for key rules")]
    DropOnDetector(String),
    /// The keyword search could not be built.
    #[error("redaction keywords: {0}")]
    Keywords(String),
    /// A tenant's override does not compile.
    #[error("redaction.tenants.{tenant}: {source}")]
    Tenant {
        /// The tenant.
        tenant: String,
        /// What is wrong.
        source: Box<RuleError>,
    },
    /// A disabled rule id names no built-in rule.
    #[error("redaction.disabled_rules: {0} is not a built-in rule id")]
    UnknownDisabled(String),
}

#[derive(Clone)]
struct Detector {
    /// Digits the text must hold before this detector is worth running (cards, phones…).
    min_digits: usize,
    /// The run of token characters the text must hold before its regex runs (0: none; else
    /// [`super::validators::TOKEN_RUN_BYTES`], a run [`super::validators::token_runs`] finds;
    /// [`catalogue::min_token_run`]).
    min_token_run: usize,
    rank: usize,
    id: Arc<str>,
    regex: Regex,
    group: usize,
    alternate_groups: Vec<usize>,
    validator: Option<Validator>,
    action: Action,
    skip_placeholders: bool,
    /// Keys whose values this detector scans (empty: all, and keyless text too).
    keys: Vec<KeyGlob>,
    /// Keys whose values it never scans.
    except_keys: Vec<KeyGlob>,
    /// Contexts (the text before the group) that cancel a match.
    except_context: Vec<KeyGlob>,
    /// The key-context judgment over keyword hits, not the regex.
    judged: bool,
    /// A shape the text must hold before the regex runs (built-in personal data).
    gate: Option<ShapeGate>,
    /// What it removes is a secret worth learning (not personal data).
    learnable: bool,
    /// The rule (id, rank) that its matches the validator turns down are found under: a
    /// later detector the same in all but its id and validator, which has none (a token's
    /// shape without its checksum). That twin is not run on its own ([`Detector::shadowed`]):
    /// one regex search serves both.
    unverified_twin: Option<(Arc<str>, usize)>,
    /// An earlier detector finds this one's matches as its unverified twin.
    shadowed: bool,
    /// How the group is found in a match (without the capture pass where the shape allows).
    place: GroupPlace,
    /// A byte every match holds and some keyword of the detector may lack: a text without it
    /// is not searched ([`super::required_byte`]).
    required_byte: Option<u8>,
}

/// A key rule, compiled.
pub struct KeyRule {
    /// Rule id.
    pub id: Arc<str>,
    globs: Vec<KeyGlob>,
    except: Vec<KeyGlob>,
    /// What to do with the value.
    pub action: Action,
    /// Bytes kept by `truncate`.
    pub keep_bytes: usize,
    /// The rule fires only on string values this accepts.
    pub when: Option<Validator>,
}

impl KeyRule {
    fn covers(&self, lower_key: &str) -> bool {
        self.globs.iter().any(|g| g.matches_lowercase(lower_key))
            && !self.except.iter().any(|g| g.matches_lowercase(lower_key))
    }

    /// True when the rule applies to this value under a key it covers: always for an
    /// unconditional rule, else only for a string the `when` validator accepts.
    fn fires_on(&self, value: Option<&str>) -> bool {
        match (self.when, value) {
            (None, _) => true,
            (Some(v), Some(s)) => v.accepts(s),
            (Some(_), None) => false,
        }
    }
}

/// Why a key rule fired or did not on one value.
#[derive(Clone)]
pub enum KeyRuleDecision<'a> {
    /// The rule fires.
    Fires(&'a KeyRule, Option<Judgment>),
    /// A judged rule covers the key but keeps this value, for these reasons.
    Kept(Judgment),
    /// No rule covers the key (or its validator refuses the value).
    None,
    /// The key is on the allowlist: its value is never touched.
    Allowed,
}

/// One thing a detector found in a string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The rule.
    pub rule: Arc<str>,
    /// Byte range in the string.
    pub start: usize,
    /// End of the byte range.
    pub end: usize,
    /// Position of the rule in the rule list (lower names a merged span).
    rank: usize,
}

/// The compiled redaction rules.
pub struct Redactor {
    detectors: Vec<Detector>,
    keywords: Option<KeywordSearch>,
    /// Prefilter pattern index to detector index.
    keyword_owner: Vec<usize>,
    /// Detectors without keywords: they run on every string.
    unfiltered: Vec<usize>,
    key_rules: Vec<KeyRule>,
    allow_keys: Vec<KeyGlob>,
    allow_values: HashSet<String>,
    hasher: KeyedHasher,
    /// Deepest nesting examined.
    pub max_depth: usize,
    /// Longest string kept after redaction.
    pub max_value_bytes: usize,
    /// Some key-rule glob has no literal part, so any text may hold a key it covers.
    every_text_may_hold_rule_key: bool,
    /// Some detector runs only under certain keys.
    key_scoped_detectors: bool,
    /// Every detector either has keywords or a shape gate, and none is scoped to keys: then
    /// one pass over a whole document says which of its strings a scan can find anything
    /// in ([`Redactor::scan_document`]).
    localizable: bool,
    /// Some detector runs only under certain keys or not under some: only then does a scan
    /// need the key (lowercased, once per string).
    detectors_read_keys: bool,
    /// Names this redactor's verdicts in each thread's [`KeyVerdicts`] (never reused).
    generation: u64,
    /// The key-context detector, whose keyword hits it reads.
    judged_detector: Option<usize>,
    /// The judged key rules: for credential names, and for secret material and plain keys.
    judged_rules: [Option<usize>; 2],
}

/// What one pass over a whole JSON document says ([`Redactor::scan_document`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DocumentScan {
    /// No value of the document can hold a finding of the detectors or a learned value.
    pub clean: bool,
    /// Where a value's own scan could find something: every keyword hit, every learned
    /// value, and every place a shape gate opens ([`Shapes::marks`]). A value that none of
    /// them overlaps, written between quotes and with no escape, holds no finding of a
    /// detector or learned value.
    pub marks: Vec<Range<usize>>,
    /// Every keyword hit of a document that is not clean, in the pass's order (by start): a
    /// value's own scan replays those inside it ([`with_known_keyword_hits`]) instead of
    /// passing over it again. `None` for a clean document: not kept (a document may be clean
    /// here and still be read value by value, for its base64 tokens, escapes or flags).
    pub keyword_hits: Option<Vec<KeywordHit>>,
    /// Where each shape of a document that is not clean was completed, and its gate
    /// ([`Shapes::marks`]); `None` for a clean one, or when no detector has a shape gate.
    pub shape_completions: Option<Vec<ShapeCompletion>>,
}

/// How far a detector pass goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Until {
    /// Every finding.
    All,
    /// The first finding (whether there is one is the question).
    First,
}

/// What the flagged detectors of one text read besides the text ([`Redactor::run_flagged`]).
struct Flagged<'a> {
    /// ASCII digits in the text.
    digits: usize,
    /// The key the text is the value of, lowercased, where some detector reads keys.
    lower_key: Option<&'a str>,
    /// Where the key-context keywords start.
    judged_hits: &'a [usize],
}

/// One bit per detector, on the stack for any realistic rule count.
struct DetectorBits {
    stack: [u64; 4],
    heap: Vec<u64>,
    words: usize,
}

impl DetectorBits {
    fn new(detectors: usize) -> DetectorBits {
        let words = detectors.div_ceil(64);
        DetectorBits {
            stack: [0; 4],
            heap: if words > 4 {
                vec![0; words]
            } else {
                Vec::new()
            },
            words,
        }
    }

    fn as_mut(&mut self) -> &mut [u64] {
        if self.words <= self.stack.len() {
            &mut self.stack[..self.words]
        } else {
            &mut self.heap
        }
    }
}

/// What the key rules say about one key, whatever its value ([`Redactor::key_verdict`]).
#[derive(Clone, Copy)]
pub enum KeyVerdict {
    /// On the allowlist: the value is never touched.
    Allowed,
    /// A configured key rule covers it (by index).
    Rule(usize),
    /// A judged rule covers the key, which is of this class.
    Judged(usize, KeyClass),
    /// A judged rule covers the plural the key is a member of, written as a dotted path
    /// (`app.secrets.db`, `config.api_keys.openai`): judged under the plural's name, of this
    /// class, with the margin a plural's members need.
    PluralMember(usize, KeyClass),
    /// No key rule covers it.
    Free,
}

/// Shorter strings are not scanned: `a@b.io` and `1.1.1.1` are the shortest findings.
const MIN_FINDING_BYTES: usize = 6;

/// Most distinct keys cached per redactor and thread; beyond this, keys are matched
/// without caching.
const KEY_CACHE_LIMIT: usize = 8192;

/// Redactors whose verdicts one thread keeps at once (the daemon has two: traces, logs).
const KEY_VERDICT_SLOTS: usize = 4;

/// The generation of the next redactor built.
static NEXT_GENERATION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

thread_local! {
    /// The keyword hits of one text, known before its scan (see [`with_known_keyword_hits`]).
    static KNOWN_HITS: std::cell::RefCell<KnownHits> = const {
        std::cell::RefCell::new(KnownHits {
            generation: None,
            text: String::new(),
            hits: Vec::new(),
            shapes: None,
        })
    };
}

/// The keyword hits (pattern, range) of `text` under the redactor of `generation`, in the
/// keyword pass's order; `generation` is `None` when nothing is known.
struct KnownHits {
    generation: Option<u64>,
    text: String,
    hits: Vec<(usize, Range<usize>)>,
    shapes: Option<Shapes>,
}

thread_local! {
    /// A clean document's keyword hits and shape completions, emptied, for the next
    /// document's survey to fill ([`Redactor::scan_document`]).
    static SURVEY_BUFFERS: std::cell::RefCell<SurveyBuffers> =
        const { std::cell::RefCell::new((Vec::new(), Vec::new())) };
}

/// A survey's keyword hits and shape completions ([`DocumentScan`]).
type SurveyBuffers = (Vec<KeywordHit>, Vec<ShapeCompletion>);

/// A keyword hit of a surveyed document: the keyword's pattern index and where it stands.
pub type KeywordHit = (usize, Range<usize>);

/// Runs `f` with the keyword hits of `text` known to `r`'s scans: `hits` (pattern, range in
/// `text`, in the pass's order) are what `r`'s keyword pass over `text` reports, taken from the
/// pass over the document `text` stands in (a keyword inside a substring is a keyword inside
/// the document, and the document's hits inside it are all the substring's). A scan of a
/// text equal to `text` replays them instead of passing over it again, and takes `shapes`,
/// where known, as the text's [`Shapes`]; any other text is passed as always. What is known
/// is forgotten when `f` returns.
pub fn with_known_keyword_hits<R>(
    r: &Redactor,
    text: &str,
    hits: impl Iterator<Item = KeywordHit>,
    shapes: Option<Shapes>,
    f: impl FnOnce() -> R,
) -> R {
    KNOWN_HITS.with(|k| {
        let mut k = k.borrow_mut();
        k.generation = Some(r.generation);
        k.text.clear();
        k.text.push_str(text);
        k.hits.clear();
        k.hits.extend(hits);
        k.shapes = shapes;
    });
    let out = f();
    KNOWN_HITS.with(|k| k.borrow_mut().generation = None);
    out
}

thread_local! {
    /// Verdicts for keys seen before (keys repeat across items; globs are costly per key),
    /// per thread: a cache shared by all threads behind a lock cost a lock per JSON member,
    /// and the lock's line moving between cores.
    static KEY_VERDICTS: std::cell::RefCell<KeyVerdicts> = const {
        std::cell::RefCell::new(KeyVerdicts {
            slots: [const { (None, None) }; KEY_VERDICT_SLOTS],
            last: 0,
        })
    };
}

/// One redactor's verdicts by key.
type VerdictMap = crate::maps::FastMap<Box<str>, KeyVerdict>;

/// One thread's cached key verdicts, for the few redactors it used last.
struct KeyVerdicts {
    /// Each slot's redactor generation and verdicts (made on first use).
    slots: [(Option<u64>, Option<VerdictMap>); KEY_VERDICT_SLOTS],
    /// The slot used last: asked first, and the one after it is the next taken.
    last: usize,
}

impl KeyVerdicts {
    /// The verdicts of the redactor of `generation`, empty where it has no slot yet.
    fn of(&mut self, generation: u64) -> &mut VerdictMap {
        let at = if self.slots[self.last].0 == Some(generation) {
            self.last
        } else if let Some(at) = self.slots.iter().position(|(g, _)| *g == Some(generation)) {
            at
        } else {
            // Taken over: the slot after the last one used.
            let at = (self.last + 1) % KEY_VERDICT_SLOTS;
            self.slots[at].0 = Some(generation);
            if let Some(map) = &mut self.slots[at].1 {
                map.clear();
            }
            at
        };
        self.last = at;
        self.slots[at].1.get_or_insert_with(crate::maps::map)
    }
}

impl Redactor {
    /// Compiles the configured rules (plus the catalogue unless switched off).
    pub fn new(config: &RedactionConfig, hasher: KeyedHasher) -> Result<Redactor, RuleError> {
        let (mut detector_specs, mut key_specs) = if config.default_rules {
            (
                catalogue::default_detectors(),
                catalogue::default_key_rules(),
            )
        } else {
            (Vec::new(), Vec::new())
        };
        for id in &config.disabled_rules {
            let known =
                detector_specs.iter().any(|d| &d.id == id) || key_specs.iter().any(|k| &k.id == id);
            if !known && config.default_rules {
                return Err(RuleError::UnknownDisabled(id.clone()));
            }
        }
        detector_specs.retain(|d| !config.disabled_rules.contains(&d.id));
        key_specs.retain(|k| !config.disabled_rules.contains(&k.id));
        detector_specs.extend(config.detectors.iter().cloned());
        key_specs.extend(config.key_rules.iter().cloned());

        let mut seen = HashSet::new();
        for id in detector_specs
            .iter()
            .map(|d| &d.id)
            .chain(key_specs.iter().map(|k| &k.id))
        {
            if !seen.insert(id.clone()) {
                return Err(RuleError::DuplicateId(id.clone()));
            }
        }

        let mut detectors = Vec::with_capacity(detector_specs.len());
        let mut keywords: Vec<String> = Vec::new();
        let mut keyword_owner = Vec::new();
        let mut unfiltered = Vec::new();
        for (i, spec) in detector_specs.iter().enumerate() {
            let mut d = compile_detector(spec, i)?;
            d.shadowed = detector_specs[..i]
                .iter()
                .any(|v| unverified_twins(v, spec));
            d.unverified_twin = detector_specs[i + 1..]
                .iter()
                .position(|u| unverified_twins(spec, u))
                .map(|k| (Arc::from(detector_specs[i + 1 + k].id.as_str()), i + 1 + k));
            detectors.push(d);
            // An empty keyword stands in every text: the detector runs on every one.
            if spec.keywords.is_empty() || spec.keywords.iter().any(String::is_empty) {
                unfiltered.push(i);
                continue;
            }
            for k in &spec.keywords {
                keywords.push(k.to_ascii_lowercase());
                keyword_owner.push(i);
            }
        }
        let key_rules: Vec<KeyRule> = key_specs.iter().map(compile_key_rule).collect();
        // Key-rule literals ride in the same automaton: the clean-JSON test then costs no pass
        // of its own.
        let key_literals = key_literals(&key_rules);
        // So does `kty`: a JSON Web Key's private members are known by their object, so a
        // document naming a key type must be parsed.
        keywords.push("kty".to_string());
        keyword_owner.push(KEY_LITERAL);
        if let Some(literals) = &key_literals {
            for l in literals {
                keywords.push(l.to_ascii_lowercase());
                keyword_owner.push(KEY_LITERAL);
            }
        }
        let keyword_search = if keywords.is_empty() {
            None
        } else {
            Some(KeywordSearch::new(&keywords).map_err(|e| RuleError::Keywords(e.to_string()))?)
        };
        let judged_detector = detector_specs.iter().position(|d| d.judged);
        let key_scoped_detectors = detectors.iter().any(|d| !d.keys.is_empty());
        let judged_rule = |class: KeyClass| key_specs.iter().position(|k| k.judged == Some(class));
        let judged_rules = [
            judged_rule(KeyClass::Credential),
            judged_rule(KeyClass::Material),
        ];
        Ok(Redactor {
            judged_detector,
            judged_rules,
            // No literal for some glob (`*`): any text may hold a key that rule covers.
            every_text_may_hold_rule_key: key_literals.is_none()
                && key_rules.iter().any(|r| !r.globs.is_empty()),
            key_scoped_detectors,
            localizable: !key_scoped_detectors
                && unfiltered.iter().all(|&i| detectors[i].gate.is_some()),
            detectors_read_keys: detectors
                .iter()
                .any(|d| !d.keys.is_empty() || !d.except_keys.is_empty()),
            detectors,
            keywords: keyword_search,
            keyword_owner,
            unfiltered,
            key_rules,
            allow_keys: config.allow_keys.iter().map(|k| KeyGlob::new(k)).collect(),
            allow_values: config.allow_values.iter().cloned().collect(),
            hasher,
            max_depth: config.max_depth,
            max_value_bytes: config.max_value_bytes.max(64),
            generation: NEXT_GENERATION.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        })
    }

    /// The hasher used by `hash` actions.
    pub fn hasher(&self) -> &KeyedHasher {
        &self.hasher
    }

    /// Ids of every compiled rule (detectors, then key rules).
    pub fn rule_ids(&self) -> Vec<&str> {
        self.detectors
            .iter()
            .map(|d| &*d.id)
            .chain(self.key_rules.iter().map(|k| &*k.id))
            .collect()
    }

    /// What the rules say of `key` alone, cached per thread: for a caller that meets one key
    /// many times (a JSON document's records) and asks [`Redactor::key_rule_decision_given`]
    /// with it.
    pub fn key_verdict(&self, key: &str) -> KeyVerdict {
        KEY_VERDICTS.with(|cache| {
            let Ok(mut cache) = cache.try_borrow_mut() else {
                return self.verdict_uncached(key);
            };
            let map = cache.of(self.generation);
            if let Some(v) = map.get(key) {
                return *v;
            }
            let verdict = self.verdict_uncached(key);
            if map.len() < KEY_CACHE_LIMIT {
                map.insert(key.into(), verdict);
            }
            verdict
        })
    }

    /// What the rules say of `key`, without the cache.
    fn verdict_uncached(&self, key: &str) -> KeyVerdict {
        let lower = lowercase(key);
        let verdict = if self.allow_keys.iter().any(|g| g.matches_lowercase(&lower)) {
            KeyVerdict::Allowed
        } else {
            match self.key_rules.iter().position(|r| r.covers(&lower)) {
                Some(i) => KeyVerdict::Rule(i),
                None => self.judged_verdict(key),
            }
        };
        verdict
    }

    /// The judged rule that covers `key`, by the key's class.
    fn judged_verdict(&self, key: &str) -> KeyVerdict {
        if self.judged_rules.iter().all(Option::is_none) {
            return KeyVerdict::Free;
        }
        let rule_of = |class| match class {
            KeyClass::Credential => self.judged_rules[0],
            KeyClass::Material | KeyClass::Key => self.judged_rules[1],
            KeyClass::Other => None,
        };
        let class = key_context::classify_key(key);
        if class == KeyClass::Other {
            if let Some(name) = key_context::dotted_plural_name(key) {
                let class = key_context::classify_key(name);
                return rule_of(class)
                    .map_or(KeyVerdict::Free, |i| KeyVerdict::PluralMember(i, class));
            }
        }
        rule_of(class).map_or(KeyVerdict::Free, |i| KeyVerdict::Judged(i, class))
    }

    /// For the clean-JSON test: `None` when `text` may hold a key a key rule covers (it must
    /// be parsed), else whether it holds a finding — one keyword pass answers both.
    pub fn finds_unless_rule_key(&self, text: &str, key: Option<&str>) -> Option<bool> {
        if self.every_text_may_hold_rule_key {
            return None;
        }
        self.scan_impl(text, key, true, Until::First)
            .map(|found| !found.is_empty())
    }

    /// True when some detector runs only under certain keys (then JSON text must be parsed
    /// to know which values those are).
    pub fn has_key_scoped_detectors(&self) -> bool {
        self.key_scoped_detectors
    }

    /// True when the key is on the allowlist and its value is never touched.
    pub fn is_allowed_key(&self, key: &str) -> bool {
        matches!(self.key_verdict(key), KeyVerdict::Allowed)
    }

    /// What the key rules do with `value` (its text, when it is a string) under `key`: a
    /// configured rule fires on the keys its globs cover; a judged one on the values the
    /// key-context judgment removes (and, for credential names, on any value that is not a
    /// string: a map or list under `credentials` goes whole).
    pub fn key_rule_decision(&self, key: &str, value: Option<&str>) -> KeyRuleDecision<'_> {
        self.key_rule_decision_given(self.key_verdict(key), key, value)
    }

    /// As [`Redactor::key_rule_decision`], with `verdict`, what
    /// [`Redactor::key_verdict`] said of `key`.
    pub fn key_rule_decision_given(
        &self,
        verdict: KeyVerdict,
        key: &str,
        value: Option<&str>,
    ) -> KeyRuleDecision<'_> {
        match verdict {
            KeyVerdict::Rule(i) => match self.key_rules.get(i) {
                Some(rule) if rule.fires_on(value) => KeyRuleDecision::Fires(rule, None),
                _ => KeyRuleDecision::None,
            },
            KeyVerdict::Judged(i, class) => {
                let Some(rule) = self.key_rules.get(i) else {
                    return KeyRuleDecision::None;
                };
                match value {
                    Some(v) => {
                        let j = key_context::judge(class, key, v, Syntax::Structured, "");
                        if j.removed {
                            KeyRuleDecision::Fires(rule, Some(j))
                        } else {
                            KeyRuleDecision::Kept(j)
                        }
                    }
                    None if class == KeyClass::Credential => KeyRuleDecision::Fires(rule, None),
                    None => KeyRuleDecision::None,
                }
            }
            KeyVerdict::PluralMember(i, class) => {
                let (Some(rule), Some(v)) = (self.key_rules.get(i), value) else {
                    return KeyRuleDecision::None;
                };
                match key_context::judge_dotted_plural_member(class, key, v) {
                    Some(j) if j.removed => KeyRuleDecision::Fires(rule, Some(j)),
                    Some(j) => KeyRuleDecision::Kept(j),
                    None => KeyRuleDecision::None,
                }
            }
            KeyVerdict::Allowed => KeyRuleDecision::Allowed,
            KeyVerdict::Free => KeyRuleDecision::None,
        }
    }

    /// The key rule that fires on `value` under `key`, if any (an allowed key has none).
    pub fn key_rule(&self, key: &str, value: Option<&str>) -> Option<&KeyRule> {
        match self.key_rule_decision(key, value) {
            KeyRuleDecision::Fires(rule, _) => Some(rule),
            KeyRuleDecision::Kept(_) | KeyRuleDecision::None | KeyRuleDecision::Allowed => None,
        }
    }

    /// The id of the key-context detector, if it is on.
    pub fn judged_rule_id(&self) -> Option<&str> {
        self.judged_detector
            .and_then(|i| self.detectors.get(i))
            .map(|d| &*d.id)
    }

    /// Every finding in `text`, non-overlapping, in order.
    pub fn scan(&self, text: &str) -> Vec<Finding> {
        self.scan_under(text, None)
    }

    /// Every finding in `text`, the value of attribute or JSON key `key` (`None` for free
    /// text), non-overlapping, in order. Detectors scoped to other keys do not run.
    pub fn scan_under(&self, text: &str, key: Option<&str>) -> Vec<Finding> {
        self.scan_impl(text, key, false, Until::All)
            .unwrap_or_default()
    }

    /// The scan; with `stop_on_rule_key`, `None` as soon as a key-rule literal shows up.
    fn scan_impl(
        &self,
        text: &str,
        key: Option<&str>,
        stop_on_rule_key: bool,
        until: Until,
    ) -> Option<Vec<Finding>> {
        // Nothing any rule looks for fits in fewer bytes (the shortest is an e-mail address).
        if text.len() < MIN_FINDING_BYTES {
            return Some(Vec::new());
        }
        let mut bits = DetectorBits::new(self.detectors.len());
        let run = bits.as_mut();
        self.flag_unfiltered(run);
        // Where the key-context keywords start: the judgment reads the text around them.
        let mut judged_hits: Vec<usize> = Vec::new();
        let (went_through, known_shapes) =
            self.keyword_pass(text, run, &mut judged_hits, None, |owner, _| {
                !(stop_on_rule_key && self.hit_may_be_rule_key(owner))
            });
        if !went_through {
            return None;
        }
        // Values the item's tenant learned (none outside the daemon's protect), after the
        // keyword pass: JSON that pass sends to be parsed is matched leaf by leaf instead.
        let mut learned_hits = Vec::new();
        learned::find_in_scope(text, &mut learned_hits);
        let mut found: Vec<Finding> = learned_hits
            .into_iter()
            .map(|h| Finding {
                rule: h.rule,
                start: h.range.start,
                end: h.range.end,
                rank: LEARNED_RANK,
            })
            .collect();
        if until == Until::First && !found.is_empty() {
            return Some(found);
        }
        if run.iter().any(|&w| w != 0) {
            let digits = super::validators::ascii_digits(text);
            let lower_key = key.filter(|_| self.detectors_read_keys).map(lowercase);
            let mut shapes = known_shapes;
            let flagged = Flagged {
                digits,
                lower_key: lower_key.as_deref(),
                judged_hits: &judged_hits,
            };
            self.run_flagged(text, run, &flagged, &mut shapes, &mut found, until);
        }
        Some(merged(self.without_straddling_personal_data(found)))
    }

    /// One pass over a whole JSON document whose values would otherwise each be scanned on
    /// their own: whether none of them can hold a finding (no key-rule literal or word a
    /// judged key rule reads, no learned value, no detector's finding in the document, as
    /// the clean-JSON test always asked), and the marks of [`DocumentScan::marks`]. `None`
    /// when the rules cannot say where (some detector runs under certain keys only, or on
    /// every string without a shape gate).
    pub fn scan_document(&self, text: &str) -> Option<DocumentScan> {
        if !self.localizable {
            return None;
        }
        let mut marks = Vec::new();
        let mut clean = !self.every_text_may_hold_rule_key;
        let mut bits = DetectorBits::new(self.detectors.len());
        let run = bits.as_mut();
        let mut judged_hits: Vec<usize> = Vec::new();
        // Kept for a document that is not clean (its values' scans replay them); a clean
        // one's buffers go back for the next document, so most documents allocate none.
        let (mut keyword_hits, mut shape_completions) =
            SURVEY_BUFFERS.with(|b| std::mem::take(&mut *b.borrow_mut()));
        self.keyword_pass(
            text,
            run,
            &mut judged_hits,
            Some(&mut keyword_hits),
            |owner, at| {
                if self.hit_may_be_rule_key(owner) {
                    clean = false;
                }
                if owner != KEY_LITERAL {
                    marks.push(at);
                }
                true
            },
        );
        let mut learned_hits = Vec::new();
        learned::find_in_scope(text, &mut learned_hits);
        clean &= learned_hits.is_empty();
        marks.extend(learned_hits.into_iter().map(|h| h.range));
        // The detectors without keywords each have a shape gate: where their shapes are
        // completed is where they can find something.
        let mut shapes = (!self.unfiltered.is_empty())
            .then(|| Shapes::marks(text, &mut marks, &mut shape_completions));
        // Whether the document is clean, as the clean-JSON test always told: every detector
        // a keyword flagged, and every gated one, over the whole text (no need once a key
        // word or learned value said it is not).
        if clean {
            self.flag_unfiltered(run);
            let flagged = Flagged {
                digits: super::validators::ascii_digits(text),
                lower_key: None,
                judged_hits: &judged_hits,
            };
            let mut found = Vec::new();
            // Clean or not is all it asks: the first finding answers.
            self.run_flagged(text, run, &flagged, &mut shapes, &mut found, Until::First);
            clean = found.is_empty();
        }
        if clean {
            keyword_hits.clear();
            shape_completions.clear();
            SURVEY_BUFFERS.with(|b| *b.borrow_mut() = (keyword_hits, shape_completions));
            return Some(DocumentScan {
                clean,
                marks,
                keyword_hits: None,
                shape_completions: None,
            });
        }
        Some(DocumentScan {
            clean,
            marks,
            keyword_hits: Some(keyword_hits),
            shape_completions: shapes.is_some().then_some(shape_completions),
        })
    }

    /// True when the keyword hit of `owner` is a key-rule literal, or a word that may be a
    /// key the judged key rules cover: JSON holding it must be read key by key.
    fn hit_may_be_rule_key(&self, owner: usize) -> bool {
        owner == KEY_LITERAL
            || (Some(owner) == self.judged_detector
                && self.judged_rules.iter().any(Option::is_some))
    }

    /// Sets in `run` the detectors without keywords: they run on every text their gate lets
    /// through.
    fn flag_unfiltered(&self, run: &mut [u64]) {
        for &i in &self.unfiltered {
            run[i / 64] |= 1 << (i % 64);
        }
    }

    /// The keyword pass over `text`: sets in `run` each detector a keyword flags, notes in
    /// `judged_hits` where the key-context keywords start, adds each hit (pattern, range) to
    /// `record`, and calls `on_hit` with each hit's owner (`KEY_LITERAL` for a key-rule
    /// literal) and range first; false, and the pass stopped, as soon as `on_hit` says false.
    /// A text whose hits are known ([`with_known_keyword_hits`]) has them replayed, and its
    /// shapes, where known, come back with them.
    fn keyword_pass(
        &self,
        text: &str,
        run: &mut [u64],
        judged_hits: &mut Vec<usize>,
        mut record: Option<&mut Vec<KeywordHit>>,
        mut on_hit: impl FnMut(usize, Range<usize>) -> bool,
    ) -> (bool, Option<Shapes>) {
        let Some(keywords) = &self.keywords else {
            return (true, None);
        };
        let mut hit = |p: usize, range: Range<usize>| {
            if let Some(hits) = record.as_deref_mut() {
                hits.push((p, range.clone()));
            }
            let i = self.keyword_owner[p];
            if !on_hit(i, range.clone()) {
                return false;
            }
            if i != KEY_LITERAL {
                if Some(i) == self.judged_detector {
                    judged_hits.push(range.start);
                }
                run[i / 64] |= 1 << (i % 64);
            }
            true
        };
        // A value of a surveyed document: its hits are the document's, replayed.
        let replayed = KNOWN_HITS.with(|k| {
            let k = k.borrow();
            (k.generation == Some(self.generation) && k.text == text).then(|| {
                let went_through = k.hits.iter().all(|(p, range)| hit(*p, range.clone()));
                (went_through, k.shapes)
            })
        });
        match replayed {
            Some(known) => known,
            None => (keywords.each(text, hit), None),
        }
    }

    /// Runs the detectors set in `run` that `text` can hold a finding of (enough digits, a
    /// key they apply under, their shape gate open), adding what they find to `found`.
    fn run_flagged(
        &self,
        text: &str,
        run: &mut [u64],
        flagged: &Flagged<'_>,
        shapes: &mut Option<Shapes>,
        found: &mut Vec<Finding>,
        until: Until,
    ) {
        // Only the flagged detectors are visited (a few of ~95 for most strings): walking the
        // whole catalogue per string was 5% of the daemon's CPU under load. The candidates
        // stay in the bitset (cleared where they drop out): no allocation per string.
        let mut candidates = 0usize;
        for (w, word) in run.iter_mut().enumerate() {
            let mut bits = *word;
            while bits != 0 {
                let bit = bits.trailing_zeros();
                bits &= bits - 1;
                let d = &self.detectors[w * 64 + bit as usize];
                if flagged.digits >= d.min_digits
                    && d.required_byte
                        .is_none_or(|b| memchr::memchr(b, text.as_bytes()).is_some())
                    && d.applies_under(flagged.lower_key)
                    && d.gate
                        .is_none_or(|g| shapes.get_or_insert_with(|| Shapes::of(text)).has(g))
                {
                    candidates += 1;
                } else {
                    *word &= !(1u64 << bit);
                }
            }
        }
        if candidates == 0 {
            return;
        }
        // Each candidate's own regex, one after the other. One pass of all detectors combined
        // (a `RegexSet`) was tried first and dropped: on high-entropy text (base64, encrypted
        // blobs) its lazy DFA thrashes and falls back to the NFA, 0.2 MiB/s on fresh 1-4 KiB
        // strings and 0.3 MiB/s on 1 MiB, 20-200 times slower than the regexes one by one
        // (BENCHMARKS.md, "Protect on adversarial inputs").
        let chosen = run.iter().enumerate().flat_map(|(w, &word)| {
            let mut bits = word;
            std::iter::from_fn(move || {
                (bits != 0).then(|| {
                    let i = w * 64 + bits.trailing_zeros() as usize;
                    bits &= bits - 1;
                    i
                })
            })
        });
        for i in chosen {
            let d = &self.detectors[i];
            if d.shadowed || (d.min_token_run > 0 && !self.token_run_unsettled(text, d, found)) {
                continue;
            }
            if d.judged {
                d.find_judged(text, flagged.judged_hits, &self.allow_values, found);
            } else {
                d.find_all(text, &self.allow_values, found, until);
            }
            if until == Until::First && !found.is_empty() {
                return;
            }
        }
    }

    /// True when `text` holds a run of token characters long enough for `d`
    /// ([`Detector::min_token_run`]) outside every secret an earlier rule found. A run inside
    /// one (`token ghp_…`, which the GitHub rule removes) would give a finding that merges
    /// into that one, under that rule's name: with no other run, `d` need not run.
    fn token_run_unsettled(&self, text: &str, d: &Detector, found: &[Finding]) -> bool {
        let mut earlier: Vec<Range<usize>> = found
            .iter()
            .filter(|f| f.rank < d.rank && self.detectors.get(f.rank).is_some_and(|e| e.learnable))
            .map(|f| f.start..f.end)
            .collect();
        let settled = key_context::Settled::merge(&mut earlier);
        super::validators::token_run_outside(text, |r| settled.covers(r))
    }

    /// `found` less the personal-data findings that begin inside a secret's finding and end
    /// past it. There the secret was read as the start of personal data (the password of
    /// `postgres://app:<password>@db.internal` as the user of an e-mail address): once the
    /// secret is removed, no personal data is left, and merging the two would remove the host
    /// too and learn the password with the host after it, so the password seen alone again
    /// would not be recognized.
    fn without_straddling_personal_data(&self, mut found: Vec<Finding>) -> Vec<Finding> {
        let personal = |f: &Finding| self.detectors.get(f.rank).is_some_and(|d| !d.learnable);
        // Most strings have no personal data among their findings: nothing to sort then
        // (`merged` sorts anyway).
        if found.len() < 2 || !found.iter().any(personal) {
            return found;
        }
        // At one start, secrets first: their end is known before the personal data there.
        found.sort_by_key(|f| (f.start, personal(f), f.rank));
        let mut secret_end = 0;
        found.retain(|f| {
            if !personal(f) {
                secret_end = secret_end.max(f.end);
                true
            } else {
                !(f.start < secret_end && f.end > secret_end)
            }
        });
        found
    }

    /// `text` with every finding replaced, or `None` when nothing was found. Counts each
    /// finding under its rule id in `hits`.
    pub fn redact_text(&self, text: &str, hits: &mut Redactions) -> Option<String> {
        self.redact_text_under(text, None, hits)
    }

    /// As [`Redactor::redact_text`], for the value of key `key`.
    pub fn redact_text_under(
        &self,
        text: &str,
        key: Option<&str>,
        hits: &mut Redactions,
    ) -> Option<String> {
        self.redact_decoded_under(text, key, hits, text, |r| r)
    }

    /// As [`Redactor::redact_text_under`], for `text` decoded from `raw` (JSON escapes or
    /// percent-encoding undone): each finding in `text` replaces the bytes of `raw` it was
    /// decoded from (`to_raw` maps its range), and every other byte of `raw` stays as it was.
    pub fn redact_decoded_under(
        &self,
        text: &str,
        key: Option<&str>,
        hits: &mut Redactions,
        raw: &str,
        to_raw: impl Fn(Range<usize>) -> Range<usize>,
    ) -> Option<String> {
        super::trail::scanning_under(key);
        let findings = self.scan_under(text, key);
        self.apply_findings(text, &findings, hits, raw, to_raw)
    }

    /// `raw` with each of `findings` (ranges of `text`, decoded from `raw`; sorted and apart)
    /// replaced, learned and counted as [`Redactor::redact_decoded_under`] does; `None` when
    /// there are none.
    pub fn apply_findings(
        &self,
        text: &str,
        findings: &[Finding],
        hits: &mut Redactions,
        raw: &str,
        to_raw: impl Fn(Range<usize>) -> Range<usize>,
    ) -> Option<String> {
        if findings.is_empty() {
            return None;
        }
        let mut out = String::with_capacity(raw.len());
        let mut pos = 0;
        for f in findings {
            if self.detectors.get(f.rank).is_some_and(|d| d.learnable) {
                learned::learn_in_scope(&f.rule, &text[f.start..f.end]);
            } else if f.rule.starts_with(learned::LEARNED_PREFIX) {
                super::trail::note(&text[f.start..f.end]);
            }
            let at = to_raw(f.start..f.end);
            // Findings are sorted and apart, and the map keeps order: this never goes back.
            let at = at.start.max(pos)..at.end.max(pos);
            out.push_str(&raw[pos..at.start]);
            // A finding carries its detector's position, so its action needs no lookup.
            let action = self
                .detectors
                .get(f.rank)
                .map_or(Action::Mask, |d| d.action);
            self.write_replacement(&mut out, &f.rule, action, &text[f.start..f.end]);
            match hits.get_mut(&*f.rule) {
                Some(n) => *n += 1,
                None => {
                    hits.insert(f.rule.to_string(), 1);
                }
            }
            pos = at.end;
        }
        out.push_str(&raw[pos..]);
        Some(out)
    }

    /// The text that replaces `original` under `action`.
    pub fn replacement(&self, rule: &str, action: Action, original: &str) -> String {
        let mut out = String::new();
        self.write_replacement(&mut out, rule, action, original);
        out
    }

    /// Appends the text that replaces `original` under `action` to `out` (in place: a dump
    /// of credentials has a finding every few bytes).
    fn write_replacement(&self, out: &mut String, rule: &str, action: Action, original: &str) {
        match action {
            Action::Hash => out.push_str(&self.hasher.hash(original)),
            Action::Mask | Action::Drop | Action::Truncate => {
                out.push_str("[REDACTED:");
                out.push_str(rule);
                out.push(']');
            }
        }
    }
}

impl Detector {
    /// False when the detector is scoped away from this key (lowercased; `None` for text
    /// that is no key's value).
    fn applies_under(&self, lower_key: Option<&str>) -> bool {
        match lower_key {
            None => self.keys.is_empty(),
            Some(k) => {
                (self.keys.is_empty() || self.keys.iter().any(|g| g.matches_lowercase(k)))
                    && !self.except_keys.iter().any(|g| g.matches_lowercase(k))
            }
        }
    }

    /// The key-context judgment's removals around the keyword hits.
    fn find_judged(
        &self,
        text: &str,
        hits: &[usize],
        allow: &HashSet<String>,
        out: &mut Vec<Finding>,
    ) {
        // What a format rule ranked before the judgment already found is not judged again.
        let mut settled: Vec<Range<usize>> = out
            .iter()
            .filter(|f| f.rank < self.rank)
            .map(|f| f.start..f.end)
            .collect();
        let settled = key_context::Settled::merge(&mut settled);
        for r in key_context::removals_outside(text, hits, settled) {
            if !allow.contains(&text[r.clone()]) {
                out.push(Finding {
                    rule: Arc::clone(&self.id),
                    start: r.start,
                    end: r.end,
                    rank: self.rank,
                });
            }
        }
    }

    fn find_all(&self, text: &str, allow: &HashSet<String>, out: &mut Vec<Finding>, until: Until) {
        // True when the pass has gone far enough.
        let mut accept = |start: usize, end: usize| {
            let m = &text[start..end];
            if allow.contains(m) || (self.skip_placeholders && super::validators::is_placeholder(m))
            {
                return false;
            }
            let (rule, rank) = if self.validator.is_none_or(|v| v.accepts(m)) {
                (&self.id, self.rank)
            } else if let Some((id, rank)) = &self.unverified_twin {
                (id, *rank)
            } else {
                return false;
            };
            out.push(Finding {
                rule: Arc::clone(rule),
                start,
                end,
                rank,
            });
            until == Until::First
        };
        if self.group == 0 {
            for m in self.regex.find_iter(text) {
                if accept(m.start(), m.end()) {
                    return;
                }
            }
        } else {
            // The next match is looked for from the end of the group, not of the whole
            // match: the context after one value (`,` in `a@x.io,b@y.io`) is the context
            // before the next, and a search from the match's end skipped every second value
            // of a list. One set of group locations serves every match.
            let mut caps = None;
            let mut from = 0;
            while let Some((all, m)) = self.next_match(text, from, &mut caps) {
                // Only a few bytes of context after the group are read again: a rule whose
                // match runs on long after its group (a user's `(key)[^\n]*`) resumes after
                // the whole match, so no text is searched more than twice.
                let next = match m {
                    Some((_, end)) if all.end - end <= CONTEXT_AFTER_GROUP => end,
                    _ => all.end,
                }
                .max(all.start + 1);
                if let Some((start, end)) = m {
                    if !self.context_excepted(&text[all.start..start]) && accept(start, end) {
                        return;
                    }
                }
                // Past the start of this match at least, on a character boundary.
                from = next;
                while from < text.len() && !text.is_char_boundary(from) {
                    from += 1;
                }
                if from > text.len() {
                    break;
                }
            }
        }
    }

    /// The next match from `from` and its group's bytes: placed from the match alone where the
    /// rule's shape allows ([`GroupPlace`]), else by the capture pass (`caps`, made once).
    fn next_match(
        &self,
        text: &str,
        mut from: usize,
        caps: &mut Option<regex::CaptureLocations>,
    ) -> Option<MatchAndGroup> {
        if self.place != GroupPlace::Captured {
            let all = self.regex.find_at(text, from)?.range();
            if let Some(g) = self.place.group(text, all.clone()) {
                return Some((all, Some((g.start, g.end))));
            }
            // The match alone does not tell where its group is: the capture pass from its
            // start finds the same match (the text before it still read for look-behind).
            from = all.start;
        }
        let caps = caps.get_or_insert_with(|| self.regex.capture_locations());
        let all = self.regex.captures_read_at(caps, text, from)?.range();
        // A group left out of an alternation gives way to its configured stand-ins.
        let group = caps
            .get(self.group)
            .or_else(|| self.alternate_groups.iter().find_map(|&g| caps.get(g)));
        Some((all, group))
    }

    /// True when the text before the group (trimmed of quotes, spaces and operators) matches
    /// an `except_context` glob.
    fn context_excepted(&self, before: &str) -> bool {
        if self.except_context.is_empty() {
            return false;
        }
        let trimmed = before.trim_end_matches(|c: char| {
            c.is_whitespace()
                || matches!(
                    c,
                    '"' | '\'' | '`' | '=' | ':' | '?' | '.' | '+' | '>' | ',' | '<'
                )
        });
        let key = lowercase(trimmed);
        self.except_context
            .iter()
            .any(|g| g.matches_lowercase(&key))
    }
}

/// The longest literal part of every key-rule glob, or `None` when some glob has none.
fn key_literals(rules: &[KeyRule]) -> Option<Vec<String>> {
    let mut literals = Vec::new();
    for g in rules.iter().flat_map(|r| &r.globs) {
        let longest = g.literals().iter().max_by_key(|l| l.len())?;
        // A glob with no literal (`*`) may cover any key.
        if longest.is_empty() {
            return None;
        }
        literals.push(longest.clone());
    }
    Some(literals)
}

/// A match's bytes and its group's (start, end), when the group took part.
type MatchAndGroup = (Range<usize>, Option<(usize, usize)>);

/// Most bytes after a detector's group that the next search reads again as its context.
const CONTEXT_AFTER_GROUP: usize = 4;

/// Owner of a keyword-automaton pattern that is a key-rule literal, not a detector keyword.
const KEY_LITERAL: usize = usize::MAX;

/// The rank of a learned value's finding: after every rule at the same start.
const LEARNED_RANK: usize = usize::MAX;

/// Findings in order, overlapping ones merged into one span named after the one that starts
/// first (at one start, the lower rank).
fn merged(mut found: Vec<Finding>) -> Vec<Finding> {
    if found.len() < 2 {
        return found;
    }
    found.sort_by(|a, b| a.start.cmp(&b.start).then(a.rank.cmp(&b.rank)));
    let mut out: Vec<Finding> = Vec::with_capacity(found.len());
    for f in found {
        match out.last_mut() {
            Some(last) if f.start < last.end => last.end = last.end.max(f.end),
            _ => out.push(f),
        }
    }
    out
}

/// ASCII-lowercases a key without allocating when it already is lowercase.
fn lowercase(key: &str) -> std::borrow::Cow<'_, str> {
    if key.bytes().any(|b| b.is_ascii_uppercase()) {
        std::borrow::Cow::Owned(key.to_ascii_lowercase())
    } else {
        std::borrow::Cow::Borrowed(key)
    }
}

fn compile_detector(spec: &DetectorSpec, rank: usize) -> Result<Detector, RuleError> {
    if matches!(spec.action, Action::Drop | Action::Truncate) {
        return Err(RuleError::DropOnDetector(spec.id.clone()));
    }
    let regex = regex::RegexBuilder::new(&spec.regex)
        .size_limit(1 << 22)
        .build()
        .map_err(|e| RuleError::Regex {
            id: spec.id.clone(),
            source: Box::new(e),
        })?;
    let groups = regex.captures_len();
    if let Some(&group) = std::iter::once(&spec.group)
        .chain(&spec.alternate_groups)
        .find(|&&g| g >= groups)
    {
        return Err(RuleError::Group {
            id: spec.id.clone(),
            group,
            groups,
        });
    }
    Ok(Detector {
        min_digits: spec.min_digits,
        min_token_run: catalogue::min_token_run(&spec.id, &spec.regex),
        rank,
        id: Arc::from(spec.id.as_str()),
        regex,
        group: spec.group,
        alternate_groups: spec.alternate_groups.clone(),
        validator: spec.validator,
        action: spec.action,
        skip_placeholders: spec.skip_placeholders,
        keys: globs(&spec.keys),
        except_keys: globs(&spec.except_keys),
        except_context: globs(&spec.except_context),
        judged: spec.judged,
        gate: spec.gate,
        learnable: !catalogue::PERSONAL_DATA.contains(&spec.id.as_str()),
        unverified_twin: None,
        shadowed: false,
        // A rule with stand-in groups needs the capture pass to know which took part.
        place: if spec.alternate_groups.is_empty() {
            GroupPlace::of(&spec.regex, spec.group)
        } else {
            GroupPlace::Captured
        },
        // The judgment does not search with the regex. A byte each keyword holds is there
        // whenever the detector is flagged: no need to look for it again. (A detector without
        // keywords keeps none either: the catalogue's all have shape gates that read it.)
        required_byte: super::required_byte::of(&spec.regex)
            .filter(|&b| !spec.judged && !spec.keywords.iter().all(|k| k.as_bytes().contains(&b))),
    })
}

/// True when `unverified` finds what `verified` does, less its validator: every field that
/// decides a match the same, `verified` validated and `unverified` not.
fn unverified_twins(verified: &DetectorSpec, unverified: &DetectorSpec) -> bool {
    verified.validator.is_some()
        && unverified.validator.is_none()
        && !verified.judged
        && !unverified.judged
        && verified.regex == unverified.regex
        && verified.keywords == unverified.keywords
        && verified.group == unverified.group
        && verified.alternate_groups == unverified.alternate_groups
        && verified.skip_placeholders == unverified.skip_placeholders
        && verified.min_digits == unverified.min_digits
        && verified.keys == unverified.keys
        && verified.except_keys == unverified.except_keys
        && verified.except_context == unverified.except_context
        && verified.gate == unverified.gate
        && verified.action == unverified.action
}

fn compile_key_rule(spec: &KeyRuleSpec) -> KeyRule {
    KeyRule {
        id: Arc::from(spec.id.as_str()),
        globs: globs(&spec.keys),
        except: globs(&spec.except_keys),
        action: spec.action,
        keep_bytes: spec.keep_bytes,
        when: spec.when,
    }
}

fn globs(patterns: &[String]) -> Vec<KeyGlob> {
    patterns.iter().map(|k| KeyGlob::new(k)).collect()
}

#[cfg(test)]
mod token_run_gate {
    use super::*;
    use proptest::prelude::*;

    /// Built once: compiling the catalogue is most of a case's time.
    static REDACTORS: std::sync::LazyLock<(Redactor, Redactor)> =
        std::sync::LazyLock::new(redactors);

    fn redactors() -> (Redactor, Redactor) {
        let config = RedactionConfig::default();
        let gated = Redactor::new(&config, KeyedHasher::new(b"k")).expect("compiles");
        let mut ungated = Redactor::new(&config, KeyedHasher::new(b"k")).expect("compiles");
        for d in &mut ungated.detectors {
            d.min_token_run = 0;
        }
        assert!(gated.detectors.iter().any(|d| d.min_token_run > 0));
        (gated, ungated)
    }

    fn scanned(r: &Redactor, text: &str) -> Vec<(String, Range<usize>)> {
        r.scan(text)
            .into_iter()
            .map(|f| (f.rule.to_string(), f.start..f.end))
            .collect()
    }

    #[test]
    fn a_token_inside_a_format_finding_is_not_looked_at_again() {
        let (gated, ungated) = &*REDACTORS;
        let token = "ghp_T3stOnlyT0ken7f3a9c2e1d5b8a4c6e0f2d9";
        for text in [
            format!("card 4111 1111 1111 1111, token {token}"),
            format!("token {token}=="),
            format!("token {token}Zq9xW2vB7nK4mL8pR3tY6uI1oE5aS0dF"),
            format!("token {token} and secret Zq9xW2vB7nK4mL8pR3tY6uI1oE5aS0dF"),
        ] {
            assert_eq!(scanned(gated, &text), scanned(ungated, &text), "{text}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1000))]
        /// Skipping the detector where every long run is inside an earlier secret finding
        /// changes no scan.
        #[test]
        fn the_settled_run_gate_changes_no_scan(
            parts in proptest::collection::vec(prop_oneof![
                Just("token ".to_string()),
                Just("secret=".to_string()),
                Just("ghp_T3stOnlyT0ken7f3a9c2e1d5b8a4c6e0f2d9".to_string()),
                Just("sk-proj-T3stOnlyN0tAR3alK3yAbCdEfGhIjKlMnOpQrStUvWxYz012345".to_string()),
                Just("AKIAIOSFODNN7EXAMPLE".to_string()),
                Just("=".to_string()),
                "[A-Za-z0-9+/_-]{1,30}",
                "[ ,.:\"é]{1,2}",
            ], 0..10),
        ) {
            let (gated, ungated) = &*REDACTORS;
            let text = parts.concat();
            prop_assert_eq!(scanned(gated, &text), scanned(ungated, &text), "{:?}", text);
        }
    }
}

#[cfg(test)]
mod known_hits_tests {
    use super::*;

    fn redactor() -> Redactor {
        Redactor::new(&RedactionConfig::default(), KeyedHasher::new(b"k")).expect("compiles")
    }

    /// A clean document's hits are not kept: such a document may still be read value by
    /// value (a flag, a base64 token, an escape), and its values must then be passed, not
    /// handed an empty list. A document with a finding keeps every hit, in order.
    #[test]
    fn only_a_document_that_is_not_clean_keeps_its_hits() {
        let r = redactor();
        let clean = r#"{"args": ["--verbose", "-n"], "note": "ghp_ and sk- are prefixes"}"#;
        let scan = r.scan_document(clean).expect("localizable");
        assert!(scan.clean);
        assert_eq!(scan.keyword_hits, None);
        assert_eq!(scan.shape_completions, None);
        let found = r#"{"note": "export DB_PASSWORD=Zx9qLm2Vb7wQ", "token": "x"}"#;
        let scan = r.scan_document(found).expect("localizable");
        assert!(!scan.clean);
        let hits = scan.keyword_hits.expect("kept");
        assert!(!hits.is_empty());
        assert!(
            hits.windows(2).all(|w| w[0].1.start <= w[1].1.start),
            "{hits:?}"
        );
    }

    /// Known hits stand in for the keyword pass of an equal text under the same redactor, and
    /// of nothing else: with none known (a deliberately wrong list), a keyword-led finding is
    /// not looked for; another text, another redactor, or after `f` returns, it is.
    #[test]
    fn known_hits_replace_the_pass_over_an_equal_text_only() {
        let (r, other) = (redactor(), redactor());
        let text = "export DB_PASSWORD=Zx9qLm2Vb7wQ";
        let rules = |r: &Redactor, t: &str| -> Vec<String> {
            r.scan_under(t, None)
                .iter()
                .map(|f| f.rule.to_string())
                .collect()
        };
        assert_eq!(rules(&r, text), ["secret_key_assignment"]);
        let (during, beside, elsewhere) =
            with_known_keyword_hits(&r, text, std::iter::empty(), None, || {
                (
                    rules(&r, text),
                    rules(&other, text),
                    rules(&r, "export DB_PASSWORD=Zx9qLm2Vb7wQ "),
                )
            });
        assert!(during.is_empty(), "{during:?}");
        assert_eq!(beside, ["secret_key_assignment"]);
        assert_eq!(elsewhere, ["secret_key_assignment"]);
        assert_eq!(rules(&r, text), ["secret_key_assignment"]);
    }
}

#[cfg(test)]
mod group_place_properties {
    use super::*;
    use proptest::prelude::*;

    /// Each detector's true positives: rule, line, secret.
    type Positives = Vec<(&'static str, String, String)>;

    /// The catalogue compiled, and each detector's true positives.
    static CATALOGUE: std::sync::LazyLock<(Redactor, Positives)> = std::sync::LazyLock::new(|| {
        let r =
            Redactor::new(&RedactionConfig::default(), KeyedHasher::new(b"k")).expect("compiles");
        (r, super::super::catalogue::tests::true_positives())
    });

    /// What `d` finds in `text`, its group placed as `place` says.
    fn found(d: &Detector, place: GroupPlace, text: &str) -> Vec<(usize, usize)> {
        let mut d = d.clone();
        d.place = place;
        d.skip_placeholders = false;
        let mut out = Vec::new();
        d.find_all(text, &HashSet::new(), &mut out, Until::All);
        out.into_iter().map(|f| (f.start, f.end)).collect()
    }

    #[test]
    fn most_catalogue_rules_need_no_capture_pass() {
        let (r, _) = &*CATALOGUE;
        let placed = r
            .detectors
            .iter()
            .filter(|d| d.place != GroupPlace::Captured)
            .count();
        let grouped = r.detectors.iter().filter(|d| d.group != 0).count();
        // Exact, so that a rule changed to a shape the placement cannot read is noticed.
        assert_eq!((placed, grouped), (149, 173));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(3000))]
        /// Placed from the match alone, each rule's group is where the capture pass puts it:
        /// on its own true positives cut, joined and wrapped in context characters.
        #[test]
        fn a_placed_group_is_the_captured_group(
            pick in 0usize..1000,
            parts in proptest::collection::vec(prop_oneof![
                Just(0usize), Just(1), Just(2), Just(3),
            ], 1..6),
            context in proptest::collection::vec("[ a-zA-Z0-9_\\-.:/=+@é٣()\"'\n]{0,3}", 6),
            cut in 0usize..8,
        ) {
            let (r, positives) = &*CATALOGUE;
            let placed: Vec<&Detector> = r.detectors.iter().filter(|d| d.place != GroupPlace::Captured).collect();
            let d = placed[pick % placed.len()];
            let own: Vec<&(&str, String, String)> = positives.iter().filter(|(id, _, _)| *id == &*d.id).collect();
            prop_assume!(!own.is_empty());
            let (_, line, secret) = own[pick % own.len()];
            let mut text = String::new();
            for (n, p) in parts.iter().enumerate() {
                text.push_str(&context[n % context.len()]);
                let piece: &str = match p {
                    0 => line,
                    1 => secret,
                    2 => secret.get(cut.min(secret.len())..).unwrap_or(secret),
                    _ => secret.get(..secret.len().saturating_sub(cut)).unwrap_or(secret),
                };
                text.push_str(piece);
            }
            text.push_str(&context[parts.len() % context.len()]);
            prop_assert_eq!(
                found(d, d.place.clone(), &text),
                found(d, GroupPlace::Captured, &text),
                "{} on {:?}", d.id, text
            );
        }
    }
}

#[cfg(test)]
mod key_verdict_cache {
    use super::*;

    /// Redactor `i` allows key `k{i}` only.
    fn redactors(n: usize) -> Vec<Redactor> {
        (0..n)
            .map(|i| {
                let config = RedactionConfig {
                    allow_keys: vec![format!("k{i}")],
                    ..Default::default()
                };
                Redactor::new(&config, KeyedHasher::new(b"k")).expect("compiles")
            })
            .collect()
    }

    #[test]
    fn each_redactor_keeps_its_own_verdicts_on_one_thread() {
        // More redactors than a thread keeps slots for, used in turn: each is evicted and
        // comes back, and must never read another's verdicts.
        let redactors = redactors(KEY_VERDICT_SLOTS + 2);
        for _round in 0..3 {
            for (i, r) in redactors.iter().enumerate() {
                for j in 0..redactors.len() {
                    let key = format!("k{j}");
                    let allowed = matches!(r.key_verdict(&key), KeyVerdict::Allowed);
                    assert_eq!(allowed, i == j, "redactor {i}, key {key}");
                    assert_eq!(
                        std::mem::discriminant(&r.key_verdict(&key)),
                        std::mem::discriminant(&r.verdict_uncached(&key))
                    );
                }
                assert!(matches!(r.key_verdict("password"), KeyVerdict::Judged(..)));
            }
        }
    }

    #[test]
    fn each_thread_keeps_its_own_verdicts() {
        let redactors = redactors(2);
        std::thread::scope(|s| {
            for t in 0..4 {
                let redactors = &redactors;
                s.spawn(move || {
                    for n in 0..200 {
                        let i = (n + t) % 2;
                        let allowed = matches!(redactors[i].key_verdict("k0"), KeyVerdict::Allowed);
                        assert_eq!(allowed, i == 0);
                    }
                });
            }
        });
    }
}
