//! JSON text read in place: every value's byte range in the text as it was sent, each scalar
//! with the key of the object member that holds it, without building a value tree.
//!
//! Protect edits a JSON document by replacing exactly the byte ranges of the values it removes
//! ([`splice`]): key order, spacing, number spelling and the escapes of untouched strings stay
//! as the sender wrote them. A string that changes keeps its escapes outside the changed part
//! ([`replace_string`]).

use std::borrow::Cow;
use std::ops::Range;

/// Why a text is not one JSON value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JsonTextError {
    /// A byte that cannot stand where it stands.
    #[error("unexpected {found} at byte {at}")]
    Unexpected {
        /// What was found (a quoted character, or "end of text").
        found: String,
        /// Byte offset.
        at: usize,
    },
    /// A string with a bad escape or a raw control character.
    #[error("bad string at byte {at}")]
    BadString {
        /// Byte offset of the string's opening quote.
        at: usize,
    },
    /// Containers nested deeper than the limit.
    #[error("nested deeper than {limit} levels at byte {at}")]
    TooDeep {
        /// The limit.
        limit: usize,
        /// Byte offset of the container that went past it.
        at: usize,
    },
}

/// What a value is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `{…}`.
    Object,
    /// `[…]`.
    Array,
    /// `"…"` (the range includes the quotes).
    String,
    /// A number as written.
    Number,
    /// `true`, `false` or `null`.
    Literal,
}

/// One value of the document, in document order (a container before what it holds).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Value {
    /// What it is.
    pub kind: Kind,
    /// Its bytes in the text (a container from its bracket to its closing bracket).
    pub range: Range<usize>,
    /// Containers above it (0 for the document itself).
    pub depth: usize,
    /// The index in [`Document::values`] of the container that holds it.
    pub parent: Option<usize>,
    /// When an object member: the key's string token (with its quotes).
    pub key: Option<Range<usize>>,
}

/// A JSON text's values, in document order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Document {
    /// Every value; the first is the document itself.
    pub values: Vec<Value>,
}

impl Document {
    /// The byte ranges to delete so that the members `dropped` (indices of values whose
    /// parent is one object) are gone and the object is still valid JSON, every other member
    /// as it was written: a run of dropped members goes up to the next kept member's key,
    /// or, at the end, from the end of the kept member before it.
    pub fn member_removals(&self, dropped: &[usize]) -> Vec<Range<usize>> {
        // The objects concerned, with their members in order, in one pass over the values
        // (linear however many objects and members are dropped).
        let gone: std::collections::HashSet<usize> = dropped
            .iter()
            .copied()
            .filter(|&d| self.key_of(d).is_some())
            .collect();
        let mut members: std::collections::BTreeMap<usize, Vec<usize>> = gone
            .iter()
            .filter_map(|&d| self.values[d].parent)
            .map(|p| (p, Vec::new()))
            .collect();
        for (i, v) in self.values.iter().enumerate() {
            if let Some(list) = v.parent.and_then(|p| members.get_mut(&p)) {
                list.push(i);
            }
        }
        let mut out = Vec::new();
        for members in members.values() {
            let mut i = 0;
            while i < members.len() {
                if !gone.contains(&members[i]) {
                    i += 1;
                    continue;
                }
                let mut j = i;
                while j + 1 < members.len() && gone.contains(&members[j + 1]) {
                    j += 1;
                }
                let first_key = self.key_of(members[i]).map_or(0, |k| k.start);
                let range = match (members.get(j + 1), i.checked_sub(1)) {
                    (Some(&next), _) => first_key..self.key_of(next).map_or(0, |k| k.start),
                    (None, Some(before)) => {
                        self.values[members[before]].range.end..self.values[members[j]].range.end
                    }
                    (None, None) => first_key..self.values[members[j]].range.end,
                };
                out.push(range);
                i = j + 1;
            }
        }
        out
    }

    fn key_of(&self, i: usize) -> Option<&Range<usize>> {
        self.values.get(i).and_then(|v| v.key.as_ref())
    }
}

/// Reads `text` as one JSON value (surrounding whitespace allowed); containers nested more
/// than `max_depth` levels are an error. Linear in the text's length; nesting costs no
/// native stack.
pub fn read(text: &str, max_depth: usize) -> Result<Document, JsonTextError> {
    let mut r = Reader {
        b: text.as_bytes(),
        at: 0,
        // About one value in 32 bytes of tool payloads: most documents need no regrowth.
        values: Vec::with_capacity(text.len() / 32 + 4),
    };
    // The containers open around the cursor, innermost last (indices into `values`).
    let mut open: Vec<usize> = Vec::new();
    r.skip_blanks();
    let mut key = None;
    loop {
        // A value at the cursor.
        let start = r.at;
        let parent = open.last().copied();
        let depth = open.len();
        match r.b.get(r.at) {
            Some(&c @ (b'{' | b'[')) => {
                if depth >= max_depth {
                    return Err(JsonTextError::TooDeep {
                        limit: max_depth,
                        at: start,
                    });
                }
                r.at += 1;
                r.values.push(Value {
                    kind: if c == b'{' { Kind::Object } else { Kind::Array },
                    range: start..start,
                    depth,
                    parent,
                    key: key.take(),
                });
                open.push(r.values.len() - 1);
                r.skip_blanks();
                if !matches!(r.b.get(r.at), Some(b'}' | b']')) {
                    key = r.item_key(&open)?;
                    continue;
                }
            }
            _ => {
                let kind = r.scalar()?;
                r.values.push(Value {
                    kind,
                    range: start..r.at,
                    depth,
                    parent,
                    key: key.take(),
                });
            }
        }
        // After a value: close what ends here, then a comma and the next item, or the end.
        loop {
            let Some(&innermost) = open.last() else {
                r.skip_blanks();
                if r.at < r.b.len() {
                    return Err(r.unexpected());
                }
                return Ok(Document { values: r.values });
            };
            r.skip_blanks();
            let close = if r.values[innermost].kind == Kind::Object {
                b'}'
            } else {
                b']'
            };
            match r.b.get(r.at) {
                Some(&c) if c == close => {
                    r.at += 1;
                    r.values[innermost].range.end = r.at;
                    open.pop();
                }
                Some(b',') => {
                    r.at += 1;
                    r.skip_blanks();
                    key = r.item_key(&open)?;
                    break;
                }
                _ => return Err(r.unexpected()),
            }
        }
    }
}

struct Reader<'t> {
    b: &'t [u8],
    at: usize,
    values: Vec<Value>,
}

impl Reader<'_> {
    fn skip_blanks(&mut self) {
        while self
            .b
            .get(self.at)
            .is_some_and(|c| matches!(c, b' ' | b'\t' | b'\n' | b'\r'))
        {
            self.at += 1;
        }
    }

    fn unexpected(&self) -> JsonTextError {
        JsonTextError::Unexpected {
            found: match self.b.get(self.at) {
                None => "end of text".to_string(),
                Some(&c) if c.is_ascii_graphic() => format!("'{}'", char::from(c)),
                Some(&c) => format!("byte 0x{c:02x}"),
            },
            at: self.at,
        }
    }

    /// In an object, reads the next member's key and its colon (the cursor then on the
    /// value); in an array, nothing.
    fn item_key(&mut self, open: &[usize]) -> Result<Option<Range<usize>>, JsonTextError> {
        let in_object = open
            .last()
            .is_some_and(|&i| self.values[i].kind == Kind::Object);
        if !in_object {
            return Ok(None);
        }
        if self.b.get(self.at) != Some(&b'"') {
            return Err(self.unexpected());
        }
        let start = self.at;
        self.string()?;
        let key = start..self.at;
        self.skip_blanks();
        if self.b.get(self.at) != Some(&b':') {
            return Err(self.unexpected());
        }
        self.at += 1;
        self.skip_blanks();
        Ok(Some(key))
    }

    fn scalar(&mut self) -> Result<Kind, JsonTextError> {
        match self.b.get(self.at) {
            Some(b'"') => {
                self.string()?;
                Ok(Kind::String)
            }
            Some(b't') => self.word(b"true"),
            Some(b'f') => self.word(b"false"),
            Some(b'n') => self.word(b"null"),
            Some(b'-' | b'0'..=b'9') => self.number(),
            _ => Err(self.unexpected()),
        }
    }

    fn word(&mut self, w: &[u8]) -> Result<Kind, JsonTextError> {
        if self.b[self.at..].starts_with(w) {
            self.at += w.len();
            Ok(Kind::Literal)
        } else {
            Err(self.unexpected())
        }
    }

    fn number(&mut self) -> Result<Kind, JsonTextError> {
        let digits = |r: &mut Self| {
            let s = r.at;
            while r.b.get(r.at).is_some_and(u8::is_ascii_digit) {
                r.at += 1;
            }
            r.at > s
        };
        if self.b.get(self.at) == Some(&b'-') {
            self.at += 1;
        }
        match self.b.get(self.at) {
            Some(b'0') => self.at += 1,
            Some(b'1'..=b'9') => {
                digits(self);
            }
            _ => return Err(self.unexpected()),
        }
        if self.b.get(self.at) == Some(&b'.') {
            self.at += 1;
            if !digits(self) {
                return Err(self.unexpected());
            }
        }
        if matches!(self.b.get(self.at), Some(b'e' | b'E')) {
            self.at += 1;
            if matches!(self.b.get(self.at), Some(b'+' | b'-')) {
                self.at += 1;
            }
            if !digits(self) {
                return Err(self.unexpected());
            }
        }
        Ok(Kind::Number)
    }

    /// Reads a string token (cursor on its opening quote) and checks its escapes.
    fn string(&mut self) -> Result<(), JsonTextError> {
        let start = self.at;
        let bad = JsonTextError::BadString { at: start };
        self.at += 1;
        loop {
            // The bytes up to the next quote, backslash or control character are plain.
            let Some(p) = plain_bytes(&self.b[self.at..]) else {
                return Err(bad);
            };
            self.at += p;
            match self.b[self.at] {
                b'"' => {
                    self.at += 1;
                    return Ok(());
                }
                b'\\' => match self.b.get(self.at + 1) {
                    Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => self.at += 2,
                    Some(b'u') => {
                        let hex = self.b.get(self.at + 2..self.at + 6).ok_or(bad.clone())?;
                        if !hex.iter().all(u8::is_ascii_hexdigit) {
                            return Err(bad);
                        }
                        self.at += 6;
                    }
                    _ => return Err(bad),
                },
                _ => return Err(bad),
            }
        }
    }
}

/// Where the first quote, backslash or control character of `b` stands: the plain bytes of
/// a string end there. Eight bytes at a time (strings of JSON documents are mostly longer).
fn plain_bytes(b: &[u8]) -> Option<usize> {
    use super::lanes;
    let mut i = 0;
    while let Some(x) = lanes::load(b, i) {
        let stop = lanes::equal(x, b'"') | lanes::equal(x, b'\\') | lanes::within(x, 0, 0x1f);
        if let Some(k) = lanes::positions(stop).next() {
            return Some(i + k);
        }
        i += 8;
    }
    b[i..]
        .iter()
        .position(|&c| c == b'"' || c == b'\\' || c < 0x20)
        .map(|k| i + k)
}

/// The text of a string token (with its quotes), escapes undone; a lone surrogate escape
/// becomes U+FFFD, as serde_json's lossy readers do.
pub fn decode_string(token: &str) -> Cow<'_, str> {
    let inner = token_inside(token);
    if !inner.contains('\\') {
        return Cow::Borrowed(inner);
    }
    Cow::Owned(unescape_token(inner).text)
}

/// A string token without its quotes.
fn token_inside(token: &str) -> &str {
    token
        .strip_prefix('"')
        .and_then(|t| t.strip_suffix('"'))
        .unwrap_or(token)
}

/// The inside of a string token with every escape undone, and where each was written.
fn unescape_token(inner: &str) -> Decoded {
    let b = inner.as_bytes();
    let unit = |at: usize| {
        inner
            .get(at..at + 4)
            .and_then(|h| u16::from_str_radix(h, 16).ok())
    };
    let mut d = Decoded::with_capacity(inner.len());
    let (mut i, mut plain_from) = (0, 0);
    while let Some(p) = b[i..].iter().position(|&c| c == b'\\') {
        let at = i + p;
        let (ch, len) = match b.get(at + 1) {
            None => break,
            Some(b'b') => ('\u{8}', 2),
            Some(b'f') => ('\u{c}', 2),
            Some(b'n') => ('\n', 2),
            Some(b'r') => ('\r', 2),
            Some(b't') => ('\t', 2),
            Some(b'u') => match unit(at + 2) {
                None => ('\u{fffd}', 2),
                Some(hi) => {
                    let lo = ((0xD800..0xDC00).contains(&hi)
                        && inner.get(at + 6..at + 8) == Some("\\u"))
                    .then(|| unit(at + 8))
                    .flatten()
                    .filter(|lo| (0xDC00..0xE000).contains(lo));
                    match lo {
                        Some(lo) => {
                            let c = 0x10000
                                + ((u32::from(hi) - 0xD800) << 10)
                                + (u32::from(lo) - 0xDC00);
                            (char::from_u32(c).unwrap_or('\u{fffd}'), 12)
                        }
                        None => (char::from_u32(u32::from(hi)).unwrap_or('\u{fffd}'), 6),
                    }
                }
            },
            // `\"`, `\\`, `\/` (and, in text no reader checked, any other character as itself).
            Some(_) => {
                let c = inner[at + 1..].chars().next().unwrap_or('\u{fffd}');
                (c, 1 + c.len_utf8())
            }
        };
        d.push_escape(inner, plain_from, at, len, ch);
        i = at + len;
        plain_from = i;
    }
    d.text.push_str(&inner[plain_from..]);
    d
}

/// `s` as a JSON string token: quotes, backslashes and control characters escaped, nothing
/// else.
pub fn encode_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    encode_into(s, &mut out);
    out.push('"');
    out
}

fn encode_into(s: &str, out: &mut String) {
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
}

/// The string token that holds `new` in place of the token `old` held: the bytes of `old`
/// before the first changed character and after the last are kept as written (their escapes
/// included); only the changed middle is written anew.
pub fn replace_string(old: &str, new: &str) -> String {
    let inner = token_inside(old);
    let d = unescape_token(inner);
    let was = d.text.as_str();
    // The common start and end, in whole characters, not overlapping in either text.
    let prefix: usize = was
        .chars()
        .zip(new.chars())
        .take_while(|(a, b)| a == b)
        .map(|(a, _)| a.len_utf8())
        .sum();
    let room = was.len().min(new.len()) - prefix;
    let mut suffix = 0;
    for (a, b) in was.chars().rev().zip(new.chars().rev()) {
        if a != b || suffix + a.len_utf8() > room {
            break;
        }
        suffix += a.len_utf8();
    }
    let raw_prefix_end = d.to_raw(prefix, false);
    let raw_suffix_start = d.to_raw(was.len() - suffix, false);
    let mut out = String::with_capacity(old.len() + new.len());
    out.push('"');
    out.push_str(&inner[..raw_prefix_end]);
    encode_into(&new[prefix..new.len() - suffix], &mut out);
    out.push_str(&inner[raw_suffix_start..]);
    out.push('"');
    out
}

/// One escape undone: where its text is in the decoded string and where it was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Escape {
    pub(crate) decoded: usize,
    pub(crate) decoded_len: usize,
    pub(crate) raw: usize,
    pub(crate) raw_len: usize,
}

/// Text decoded from a raw string, with the escapes undone in order, so a range of the
/// decoded text maps back to the raw bytes it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Decoded {
    pub(crate) text: String,
    pub(crate) escapes: Vec<Escape>,
}

impl Decoded {
    /// Nothing decoded yet, with room for `raw_len` bytes.
    pub(crate) fn with_capacity(raw_len: usize) -> Decoded {
        Decoded {
            text: String::with_capacity(raw_len),
            escapes: Vec::new(),
        }
    }

    /// Appends `raw[plain_from..at]` as it is, then `ch`, undone from the `len` bytes of the
    /// escape at `at`.
    pub(crate) fn push_escape(
        &mut self,
        raw: &str,
        plain_from: usize,
        at: usize,
        len: usize,
        ch: char,
    ) {
        self.text.push_str(&raw[plain_from..at]);
        self.escapes.push(Escape {
            decoded: self.text.len(),
            decoded_len: ch.len_utf8(),
            raw: at,
            raw_len: len,
        });
        self.text.push(ch);
    }

    /// The raw offset of decoded offset `d` (a character boundary); inside an escape's
    /// decoded text, its raw start, or its raw end for the end of a range.
    pub(crate) fn to_raw(&self, d: usize, end: bool) -> usize {
        let i = self.escapes.partition_point(|e| e.decoded <= d);
        let Some(e) = i.checked_sub(1).map(|i| self.escapes[i]) else {
            return d;
        };
        if d >= e.decoded + e.decoded_len {
            e.raw + e.raw_len + (d - e.decoded - e.decoded_len)
        } else if d == e.decoded || !end {
            e.raw
        } else {
            e.raw + e.raw_len
        }
    }

    /// The raw bytes a range of the decoded text came from.
    pub(crate) fn range_to_raw(&self, r: Range<usize>) -> Range<usize> {
        self.to_raw(r.start, false)..self.to_raw(r.end, true)
    }
}

/// `text` with each of `edits` (ranges that do not overlap) replaced by its text; nothing
/// else changes. Should two overlap, the bytes of both go (the later one's text with them):
/// an edit removes what it covers whatever else happened.
pub fn splice(text: &str, mut edits: Vec<(Range<usize>, String)>) -> String {
    edits.sort_by_key(|(r, _)| r.start);
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for (r, with) in edits {
        if r.start < at {
            at = at.max(r.end);
            continue;
        }
        out.push_str(&text[at..r.start]);
        out.push_str(&with);
        at = r.end;
    }
    out.push_str(&text[at..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Strings (keys included) of the document as serde_json reads them, with their keys.
    fn strings_by_serde(
        v: &serde_json::Value,
        key: Option<&str>,
        out: &mut Vec<(Option<String>, String)>,
    ) {
        match v {
            serde_json::Value::String(s) => out.push((key.map(str::to_string), s.clone())),
            serde_json::Value::Array(items) => {
                for i in items {
                    strings_by_serde(i, key, out);
                }
            }
            serde_json::Value::Object(m) => {
                for (k, v) in m {
                    strings_by_serde(v, Some(k), out);
                }
            }
            _ => {}
        }
    }

    /// The same, from the values read in place: each string with its innermost key.
    fn strings_in_place(text: &str, doc: &Document) -> Vec<(Option<String>, String)> {
        let key_of = |mut i: usize| loop {
            let v = &doc.values[i];
            if let Some(k) = &v.key {
                return Some(decode_string(&text[k.clone()]).into_owned());
            }
            match v.parent {
                Some(p) if doc.values[p].kind == Kind::Array => i = p,
                _ => return None,
            }
        };
        doc.values
            .iter()
            .enumerate()
            .filter(|(_, v)| v.kind == Kind::String)
            .map(|(i, v)| {
                (
                    key_of(i),
                    decode_string(&text[v.range.clone()]).into_owned(),
                )
            })
            .collect()
    }

    fn json_value() -> impl Strategy<Value = serde_json::Value> {
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::Bool),
            any::<i64>().prop_map(|n| serde_json::json!(n)),
            (-1e6f64..1e6).prop_map(|f| serde_json::json!(f)),
            "[a-z\"\\\\/\n\té€😀\u{1}]{0,12}".prop_map(serde_json::Value::String),
        ];
        leaf.prop_recursive(5, 48, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..5).prop_map(serde_json::Value::Array),
                proptest::collection::btree_map("[a-z_\"]{0,6}", inner, 0..5)
                    .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// Writes a value the ways senders do: compact, pretty, or with odd blanks, and strings
    /// with escapes where none are needed (`\/`, `\u00e9`).
    fn written(v: &serde_json::Value, style: u8) -> String {
        let text = match style % 3 {
            0 => v.to_string(),
            1 => serde_json::to_string_pretty(v).unwrap_or_default(),
            _ => v.to_string().replace(',', " ,\n\t").replace(':', " : "),
        };
        if style >= 3 {
            text.replace('/', "\\/")
                .replace('é', "\\u00e9")
                .replace('😀', "\\ud83d\\ude00")
        } else {
            text
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(400))]

        /// Every string of any document, written any way, is read in place with the key
        /// serde_json gives it, and decodes to serde_json's text.
        #[test]
        fn strings_and_keys_are_serde_json_s(v in json_value(), style in 0u8..6) {
            let text = written(&v, style);
            let doc = read(&text, 128).expect("valid JSON");
            let lead = text.len() - text.trim_start().len();
            prop_assert_eq!(doc.values[0].range.clone(), lead..text.trim_end().len());
            let mut by_serde = Vec::new();
            // Duplicate keys cannot arise from a map; serde_json keeps key order (preserve_order
            // or sorted alike for a BTreeMap's keys).
            strings_by_serde(&serde_json::from_str(&text).expect("serde reads it"), None, &mut by_serde);
            prop_assert_eq!(strings_in_place(&text, &doc), by_serde);
        }

        /// Splicing no edits gives the text back; splicing edits changes exactly their bytes.
        #[test]
        fn a_splice_changes_only_its_ranges(v in json_value(), style in 0u8..6, pick in any::<u64>()) {
            let text = written(&v, style);
            prop_assert_eq!(splice(&text, Vec::new()), text.clone());
            let doc = read(&text, 128).expect("valid JSON");
            // Replace every other scalar (by a bit of `pick`) with a marker string.
            let edits: Vec<(Range<usize>, String)> = doc.values.iter().enumerate()
                .filter(|(i, v)| v.kind != Kind::Object && v.kind != Kind::Array && pick >> (i % 64) & 1 == 1)
                .map(|(_, v)| (v.range.clone(), "\"[REDACTED:x]\"".to_string()))
                .collect();
            let out = splice(&text, edits.clone());
            // Rebuild by hand: the text between edits is the input's.
            let mut want = String::new();
            let mut at = 0;
            for (r, w) in &edits {
                want.push_str(&text[at..r.start]);
                want.push_str(w);
                at = r.end;
            }
            want.push_str(&text[at..]);
            prop_assert_eq!(&out, &want);
            prop_assert!(serde_json::from_str::<serde_json::Value>(&out).is_ok());
        }

        /// Dropping any members leaves valid JSON whose other members are byte for byte
        /// where they were.
        #[test]
        fn dropped_members_leave_the_others_as_written(v in json_value(), style in 0u8..6, pick in any::<u64>()) {
            let text = written(&v, style);
            let doc = read(&text, 128).expect("valid JSON");
            let dropped: Vec<usize> = (0..doc.values.len())
                .filter(|&i| doc.values[i].key.is_some() && pick >> (i % 64) & 1 == 1)
                .collect();
            let cuts = doc.member_removals(&dropped);
            let out = splice(&text, cuts.iter().map(|r| (r.clone(), String::new())).collect());
            let parsed: serde_json::Value = serde_json::from_str(&out).expect("still JSON");
            let mut want = serde_json::from_str::<serde_json::Value>(&text).expect("JSON");
            // The same members removed from the parsed document, deepest first.
            drop_members(&mut want, &text, &doc, &dropped);
            prop_assert_eq!(parsed, want);
        }

        /// A changed string keeps the escapes written before and after the change.
        #[test]
        fn a_changed_string_keeps_its_escapes_around_the_change(
            head in "[a-z/é]{0,6}", secret in "[A-Z0-9]{4,8}", tail in "[a-z/é\n]{0,6}"
        ) {
            let escape = |s: &str| s.replace('/', "\\/").replace('é', "\\u00e9").replace('\n', "\\n");
            let old = format!("\"{}{}{}\"", escape(&head), secret, escape(&tail));
            let new = format!("{head}[REDACTED:x]{tail}");
            let out = replace_string(&old, &new);
            prop_assert_eq!(out, format!("\"{}[REDACTED:x]{}\"", escape(&head), escape(&tail)));
        }
    }

    fn drop_members(v: &mut serde_json::Value, text: &str, doc: &Document, dropped: &[usize]) {
        // Each dropped member by its path of keys and array positions from the root.
        let mut paths: Vec<Vec<Step>> = dropped.iter().map(|&i| path(text, doc, i)).collect();
        paths.sort_by_key(|p| std::cmp::Reverse(p.len()));
        for p in paths {
            remove_at(v, &p);
        }
    }

    #[derive(Clone)]
    enum Step {
        Key(String),
        Index(usize),
    }

    fn path(text: &str, doc: &Document, mut i: usize) -> Vec<Step> {
        let mut out = Vec::new();
        while let Some(p) = doc.values[i].parent {
            match &doc.values[i].key {
                Some(k) => out.push(Step::Key(decode_string(&text[k.clone()]).into_owned())),
                None => {
                    let n = (p + 1..i)
                        .filter(|&j| doc.values[j].parent == Some(p))
                        .count();
                    out.push(Step::Index(n));
                }
            }
            i = p;
        }
        out.reverse();
        out
    }

    fn remove_at(v: &mut serde_json::Value, p: &[Step]) {
        match (p, v) {
            ([Step::Key(k)], serde_json::Value::Object(m)) => {
                m.remove(k);
            }
            ([Step::Key(k), rest @ ..], serde_json::Value::Object(m)) => {
                if let Some(inner) = m.get_mut(k) {
                    remove_at(inner, rest);
                }
            }
            ([Step::Index(n), rest @ ..], serde_json::Value::Array(a)) => {
                if let Some(inner) = a.get_mut(*n) {
                    remove_at(inner, rest);
                }
            }
            _ => {}
        }
    }

    #[test]
    fn errors_say_what_and_where() {
        assert_eq!(
            read("{\"a\": 1,}", 8),
            Err(JsonTextError::Unexpected {
                found: "'}'".into(),
                at: 8
            })
        );
        assert_eq!(
            read("[1, 2", 8).map(|_| ()).unwrap_err().to_string(),
            "unexpected end of text at byte 5"
        );
        assert_eq!(
            read("\"a\\qb\"", 8),
            Err(JsonTextError::BadString { at: 0 })
        );
        assert_eq!(
            read("[[[1]]]", 2),
            Err(JsonTextError::TooDeep { limit: 2, at: 2 })
        );
        assert_eq!(
            read("{} x", 8),
            Err(JsonTextError::Unexpected {
                found: "'x'".into(),
                at: 3
            })
        );
    }

    #[test]
    fn deep_nesting_uses_no_native_stack() {
        let text = format!("{}{}", "[".repeat(200_000), "]".repeat(200_000));
        let doc = read(&text, 1_000_000).expect("valid");
        assert_eq!(doc.values.len(), 200_000);
        assert_eq!(doc.values[199_999].depth, 199_999);
    }
}
