//! Applies the rules everywhere a string can hide in an event.
//!
//! Strings at any depth of arrays and key-value lists; JSON inside strings (read in place,
//! with key rules applied to its object keys, what is removed replaced where it stands and
//! every other byte kept, nested JSON-in-JSON to the depth limit); percent-encoded text
//! (matched in decoded form);
//! integers (a card number sent as a number); bytes (examined as UTF-8, and removed whole when
//! they are not text, since they cannot be examined). Anything deeper than the depth limit is
//! removed whole rather than passed through unexamined.

use serde_json::Value;

use super::attention::Attention;
use super::engine::{KeyRuleDecision, KeyVerdict, Redactor};
use super::json_text::{self, Decoded, Escape};
use super::key_context::{classify_key, plural_member_name, singular_credential, KeyClass};
use super::rules::Action;
use super::{lanes, validators};
use crate::event::{AttrValue, Attributes, Redactions};

/// Rule id recorded when a structure is deeper than `redaction.max_depth`.
pub const MAX_DEPTH_RULE: &str = "max_depth_exceeded";
/// The rule id of a JSON Web Key's private members.
pub const JWK_RULE: &str = "jwk_private_key";

/// Members that name a setting whose value a sibling holds (Kubernetes and ECS environment
/// variables, CloudFormation parameters, SSM parameters, name/value lists).
const NAME_MEMBERS: &[&str] = &[
    "name",
    "Name",
    "NAME",
    "key",
    "Key",
    "ParameterKey",
    "parameterKey",
];

/// The credential an object's name member names (`{"name": "DB_PASSWORD", …}`), if it names
/// one: its value member is read under that name.
fn named_credential(map: &serde_json::Map<String, Value>) -> Option<&str> {
    NAME_MEMBERS
        .iter()
        .filter_map(|m| map.get(*m).and_then(Value::as_str))
        .find(|name| names_a_credential(name))
}

/// True when a name member's text names a credential or secret material, so that its
/// sibling value member is read under it.
fn names_a_credential(name: &str) -> bool {
    classify_key(name) != KeyClass::Other
}

/// Members that hold the value a sibling in [`NAME_MEMBERS`] names.
const VALUE_MEMBERS: &[&str] = &[
    "value",
    "Value",
    "VALUE",
    "ParameterValue",
    "parameterValue",
];

/// Members that hold a JSON Web Key's private or symmetric key material (RFC 7518 section
/// 6.3.2 for RSA, 6.2.2 for EC and OKP's `d`, 6.4.1 for `oct`'s `k`).
const JWK_PRIVATE_MEMBERS: &[&str] = &["d", "p", "q", "dp", "dq", "qi", "k", "oth"];

/// True when the object is a JSON Web Key: it names its key type (`kty`).
fn is_jwk(map: &serde_json::Map<String, Value>) -> bool {
    map.get("kty").is_some_and(Value::is_string)
}

/// True when `key` of a JSON Web Key holds key material: these one- and two-letter names mean
/// that only in an object naming its key type ([`is_jwk`]).
fn jwk_private_member(key: &str, value: &Value) -> bool {
    JWK_PRIVATE_MEMBERS.contains(&key)
        && !(value.is_null() || value.as_str().is_some_and(str::is_empty))
}
/// Rule id recorded when a bytes value is not UTF-8 text and is removed.
pub const BINARY_RULE: &str = "unexaminable_bytes";
/// Rule id recorded when a value is cut at `redaction.max_value_bytes`.
pub const TRUNCATED_RULE: &str = "truncated";

/// Cuts a (redacted) string longer than the limit, recording its original size and SHA-256
/// in the marker that ends it; true if it was cut.
pub fn limit(r: &Redactor, s: &mut String, hits: &mut Redactions) -> bool {
    cut(s, r.max_value_bytes, hits)
}

/// Cuts `s` at `max` bytes (on a character boundary) with the size-and-digest marker.
fn cut(s: &mut String, max: usize, hits: &mut Redactions) -> bool {
    if s.len() <= max {
        return false;
    }
    use sha2::{Digest, Sha256};
    let digest = hex::encode(Sha256::digest(s.as_bytes()));
    let original = s.len();
    let mut at = max;
    while !s.is_char_boundary(at) {
        at -= 1;
    }
    s.truncate(at);
    s.push_str(&format!(
        "…[TRUNCATED:original_bytes={original},sha256={digest}]"
    ));
    count(hits, TRUNCATED_RULE);
    true
}

fn count(hits: &mut Redactions, rule: &str) {
    *hits.entry(rule.to_string()).or_insert(0) += 1;
}

/// Rule id recorded when a base64 token decoded to text holding a finding.
pub const BASE64_RULE: &str = "base64_encoded";

/// Rule id of an Atlassian Data Center personal access token (Jira, Confluence, Bitbucket).
pub const ATLASSIAN_DC_PAT_RULE: &str = "atlassian_data_center_pat";

/// True for an Atlassian Data Center personal access token: 44 characters of standard base64
/// that decode to 33 bytes, a numeric token id (12 digits as issued; 8 to 16 accepted), `:`
/// and random secret bytes (the token has no prefix; its structure is what tells it from other
/// base64). Text that happens to start with digits and a colon (`09:15:02 nightly backup`)
/// is no token: its "secret" is all printable.
fn atlassian_dc_pat(token: &str) -> bool {
    use base64::Engine;
    if token.len() != 44 || !token.starts_with(['M', 'N', 'O']) {
        return false;
    }
    let Ok(bytes) = base64::engine::general_purpose::STANDARD_NO_PAD.decode(token) else {
        return false;
    };
    let id = bytes.iter().take_while(|b| b.is_ascii_digit()).count();
    let Some(secret) = bytes.get(id + 1..).filter(|_| bytes.get(id) == Some(&b':')) else {
        return false;
    };
    (8..=16).contains(&id)
        && secret.len() >= 16
        && !secret.iter().all(|b| (b' '..=b'~').contains(b))
}

/// The Atlassian Data Center tokens in the base64 run `run` of `s`: the run itself, or, in a
/// URL path (`/rest/token/<pat>`), 44 characters that start at the run's start or just after
/// a `/` and end at the run's end or just before one (a token may hold `/` itself).
fn atlassian_dc_pats(s: &str, run: std::ops::Range<usize>) -> Vec<std::ops::Range<usize>> {
    const LEN: usize = 44;
    let b = s.as_bytes();
    if run.len() < LEN {
        return Vec::new();
    }
    let starts_ok = |i: usize| i == run.start || b[i - 1] == b'/';
    let ends_ok = |e: usize| e == run.end || b[e] == b'/';
    let mut out: Vec<std::ops::Range<usize>> = Vec::new();
    for start in run.start..=run.end - LEN {
        let end = start + LEN;
        if out.last().is_some_and(|r| start < r.end) {
            continue;
        }
        if starts_ok(start) && ends_ok(end) && atlassian_dc_pat(&s[start..end]) {
            out.push(start..end);
        }
    }
    out
}

/// How many base64 layers are decoded (base64 of base64 of a secret is still found).
const BASE64_LAYERS: usize = 2;

/// Decodes a base64 token (standard or URL-safe, padded or not) that holds readable text.
fn base64_text(token: &str) -> Option<String> {
    use base64::Engine;
    // Hex (ids, digests) and plain words are valid base64 but never encode text: skip them
    // without decoding. Base64 of text mixes cases and digits.
    if hex_or_one_case(token.as_bytes()) {
        return None;
    }
    let t = token.trim_end_matches('=');
    let bytes = base64::engine::general_purpose::STANDARD_NO_PAD
        .decode(t)
        .or_else(|_| base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(t))
        .ok()?;
    let text = String::from_utf8(bytes).ok()?;
    let readable = text.chars().all(|c| !c.is_control() || c.is_whitespace());
    readable.then_some(text)
}

/// True when `b` is all hex digits, or holds no capital or no small letter: in one pass,
/// eight bytes at a time (every hex id of a document was scanned three times here).
fn hex_or_one_case(b: &[u8]) -> bool {
    let (mut not_hex, mut upper, mut lower) = (0u64, 0u64, 0u64);
    let chunks = b.chunks_exact(8);
    let tail = chunks.remainder();
    for chunk in chunks {
        let x = lanes::load(chunk, 0).unwrap_or(0);
        let hex = lanes::within(x, b'0', b'9') | lanes::within(lanes::fold_ascii(x), b'a', b'f');
        not_hex |= !hex & lanes::HIGH;
        upper |= lanes::within(x, b'A', b'Z');
        lower |= lanes::within(x, b'a', b'z');
    }
    let (mut not_hex, mut upper, mut lower) = (not_hex != 0, upper != 0, lower != 0);
    for &c in tail {
        not_hex |= !c.is_ascii_hexdigit();
        upper |= c.is_ascii_uppercase();
        lower |= c.is_ascii_lowercase();
    }
    !(not_hex && upper && lower)
}

/// Replaces base64 tokens whose decoded text holds a finding; true if any was replaced.
fn redact_base64(
    r: &Redactor,
    s: &mut String,
    hits: &mut Redactions,
    depth: usize,
    key: Option<&str>,
    layers: usize,
) -> bool {
    if layers == 0 {
        return false;
    }
    // What goes, in order: Atlassian tokens found by their structure, and tokens whose
    // decoded text holds a finding.
    let mut cuts: Vec<(std::ops::Range<usize>, &'static str)> = Vec::new();
    // Tokens that decoded to text with nothing in it: a value a later token teaches may be
    // in them (`base64("the value is X")`, then `base64("password=X")`).
    let mut kept: Vec<(std::ops::Range<usize>, String)> = Vec::new();
    let learned_before = super::learned::learned_in_scope();
    for m in validators::token_runs(s) {
        let pats = atlassian_dc_pats(s, m.clone());
        if !pats.is_empty() {
            for p in pats {
                super::learned::learn_in_scope(ATLASSIAN_DC_PAT_RULE, &s[p.clone()]);
                cuts.push((p, ATLASSIAN_DC_PAT_RULE));
            }
            continue;
        }
        let Some(mut text) = base64_text(&s[m.clone()]) else {
            continue;
        };
        let mut inner = Redactions::new();
        if redact_layer(r, &mut text, &mut inner, depth + 1, key, layers - 1) {
            super::add_hits(hits, &inner);
            cuts.push((m, BASE64_RULE));
        } else {
            // Unchanged: nothing was removed from it.
            kept.push((m, text));
        }
    }
    // Once more over the kept ones, only when a token taught something: at most twice
    // over the tokens, so linear still.
    if super::learned::learned_in_scope() != learned_before {
        for (m, mut text) in kept {
            let mut inner = Redactions::new();
            if redact_layer(r, &mut text, &mut inner, depth + 1, key, layers - 1) {
                super::add_hits(hits, &inner);
                cuts.push((m, BASE64_RULE));
            }
        }
        cuts.sort_by_key(|(range, _)| range.start);
    }
    if cuts.is_empty() {
        return false;
    }
    let mut out = String::with_capacity(s.len());
    let mut last = 0;
    for (range, rule) in cuts {
        out.push_str(&s[last..range.start]);
        out.push_str(&format!("[REDACTED:{rule}]"));
        last = range.end;
        count(hits, rule);
    }
    out.push_str(&s[last..]);
    *s = out;
    true
}

/// True when some base64 token in `s` decodes to text holding a finding.
fn base64_hides_finding(r: &Redactor, s: &str, key: Option<&str>) -> bool {
    validators::token_runs(s)
        .into_iter()
        .any(|m| base64_token_reading(r, s, &m, key) == TokenReading::HidesFinding)
}

/// What a base64 token is, read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TokenReading {
    /// It decodes to nothing readable and is no Atlassian token: nothing can hide behind it.
    Opaque,
    /// It decodes to readable text that holds no finding (now: a value learned later may).
    Text,
    /// An Atlassian token, or readable text that holds a finding.
    HidesFinding,
}

/// What the base64 token `m` of `s` is: an Atlassian token, or readable text holding a
/// finding or not, or opaque.
fn base64_token_reading(
    r: &Redactor,
    s: &str,
    m: &std::ops::Range<usize>,
    key: Option<&str>,
) -> TokenReading {
    if !atlassian_dc_pats(s, m.clone()).is_empty() {
        return TokenReading::HidesFinding;
    }
    let Some(mut text) = base64_text(&s[m.clone()]) else {
        return TokenReading::Opaque;
    };
    let layers = BASE64_LAYERS - 1;
    match redact_layer(r, &mut text, &mut Redactions::new(), 1, key, layers) {
        true => TokenReading::HidesFinding,
        false => TokenReading::Text,
    }
}

/// Redacts a string in place; true if it changed.
pub fn redact_string(r: &Redactor, s: &mut String, hits: &mut Redactions, depth: usize) -> bool {
    redact_layer(r, s, hits, depth, None, BASE64_LAYERS)
}

/// Redacts the string value of attribute or JSON key `key` in place; detectors scoped to
/// other keys skip it.
pub fn redact_string_under(
    r: &Redactor,
    s: &mut String,
    hits: &mut Redactions,
    depth: usize,
    key: Option<&str>,
) -> bool {
    redact_layer(r, s, hits, depth, key, BASE64_LAYERS)
}

fn redact_layer(
    r: &Redactor,
    s: &mut String,
    hits: &mut Redactions,
    depth: usize,
    key: Option<&str>,
    base64_layers: usize,
) -> bool {
    if depth > r.max_depth {
        // Fail closed: text too deep to examine (e.g. base64 inside JSON at the limit) goes.
        *s = format!("[REDACTED:{MAX_DEPTH_RULE}]");
        count(hits, MAX_DEPTH_RULE);
        return true;
    }
    match redact_plain_and_structured(r, s, hits, depth, key) {
        // The clean-JSON test already found no base64 token worth removing (it decodes them
        // one level down; at the depth limit, decoding fails closed, which it does not model).
        Pass::Clean if depth < r.max_depth => false,
        // The survey found no token that decodes to anything: none can hide a finding
        // whatever is learned since, and the values scanned decoded their own.
        Pass::Surveyed {
            changed,
            base64_text: false,
        } if depth < r.max_depth => changed,
        Pass::Changed | Pass::Surveyed { changed: true, .. } => {
            redact_base64(r, s, hits, depth, key, base64_layers);
            true
        }
        Pass::Clean | Pass::Unchanged | Pass::Surveyed { changed: false, .. } => {
            redact_base64(r, s, hits, depth, key, base64_layers)
        }
    }
}

/// What the plain and structured pass did to a string.
enum Pass {
    /// Nothing to remove, base64 tokens included (the clean-JSON test covers them).
    Clean,
    /// Something was removed.
    Changed,
    /// Nothing removed; base64 tokens not examined yet.
    Unchanged,
    /// A JSON document surveyed and read value by value: whether anything was removed, and
    /// whether the survey met a base64 token that decodes to text (or is an Atlassian token).
    Surveyed { changed: bool, base64_text: bool },
}

fn redact_plain_and_structured(
    r: &Redactor,
    s: &mut String,
    hits: &mut Redactions,
    depth: usize,
    key: Option<&str>,
) -> Pass {
    let trimmed = s.trim_start();
    if trimmed.starts_with('{') || trimmed.starts_with('[') {
        // Most payloads hold nothing to remove: then the document is not read value by
        // value. When it holds something, the survey says which values to scan.
        let Survey::Scan {
            attention,
            base64_text,
        } = survey(r, s, key)
        else {
            return Pass::Clean;
        };
        if let Ok(protected) = json_in_place(r, s, hits, depth + 1, &attention) {
            let changed = protected.is_some();
            if let Some(new) = protected {
                *s = new;
            }
            return Pass::Surveyed {
                changed,
                base64_text,
            };
        }
    }
    // JSON escaped into plain text (a log line quoting tool arguments): match the unescaped
    // text, where the detectors' quotes and line breaks are real, and replace what it finds
    // where it was written, escapes and all.
    if let Some(layers) = json_unescaped(s) {
        if let Some(new) = r.redact_decoded_under(layers.text(), key, hits, s, |f| layers.to_raw(f))
        {
            *s = new;
            return Pass::Changed;
        }
    }
    if let Some(new) = r.redact_text_under(s, key, hits) {
        *s = new;
        return Pass::Changed;
    }
    // Secrets in URLs are often percent-encoded; match the decoded text and replace what it
    // finds (that the encoded form hid) where it was written, still encoded around it.
    if s.contains('%') {
        if let Some(decoded) = percent_decoded(s) {
            let to_raw = |f| decoded.range_to_raw(f);
            if let Some(new) = r.redact_decoded_under(&decoded.text, key, hits, s, to_raw) {
                *s = new;
                return Pass::Changed;
            }
        }
    }
    Pass::Unchanged
}

/// `text` read as a JSON document and protected in place, its root at `depth`: what is
/// removed is replaced where it stands, everything else (key order, spacing, escapes, every
/// member of a repeated key) stays as sent. `Ok(None)` when nothing is removed; an error
/// when `text` is not one JSON value.
fn json_in_place(
    r: &Redactor,
    text: &str,
    hits: &mut Redactions,
    depth: usize,
    attention: &Attention,
) -> Result<Option<String>, json_text::JsonTextError> {
    let doc = json_text::read(text, usize::MAX)?;
    let edits = json_edits(r, text, &doc, hits, depth, attention);
    Ok((!edits.is_empty()).then(|| json_text::splice(text, edits)))
}

/// What one pass over a JSON document (the value of `key`) says before it is read value by
/// value.
enum Survey {
    /// Nothing in it to remove: no value of it holds a finding, decoded or not, and no key
    /// of it can be one a key rule covers.
    Clean,
    /// Read it, scanning the values `Attention` points at.
    Scan {
        /// Where values need their own scan.
        attention: Attention,
        /// Some base64 token of it is an Atlassian token or decodes to readable text (when
        /// none does, no token of it can hide a finding, whatever is learned later).
        base64_text: bool,
    },
}

/// The survey of `text`: the detectors and learned values over the whole text (and over
/// its unescaped form, which also covers JSON nested in JSON, and its percent-decoded
/// form), its base64 tokens decoded, and where its values need their own scan: the rules'
/// marks and every base64 token whose text holds a finding (a value with an escape or a `%`
/// is scanned decoded whatever the marks say: [`Attention::needs_scan`]).
fn survey(r: &Redactor, text: &str, key: Option<&str>) -> Survey {
    // The base64 test first: what it learns, the learned values' marks then show.
    let Base64Survey {
        mut marks,
        readable,
    } = base64_marks(r, text, key);
    let base64_text = !(marks.is_empty() && readable.is_empty());
    let learned_at = super::learned::learned_in_scope();
    // Keys can hide behind escapes too (`"p\u0061ssword"`): the unescaped text must hold no
    // key-rule literal either.
    // So can findings behind percent-encoding (`jane.doe%40example.com`), which a value's
    // own scan decodes.
    let clean_text = |t: &str| r.finds_unless_rule_key(t, key) == Some(false);
    let unescaped_clean = || {
        json_unescaped(text).is_none_or(|u| clean_text(u.text()))
            && (!text.contains('%') || percent_decoded(text).is_none_or(|d| clean_text(&d.text)))
    };
    // A string that is a flag (`"--password"`, `"-a"`) may head a value in the next item of
    // an array read as a command line ([`argv_edits`]), which no scan of the text sees.
    // Asked only of a document otherwise clean.
    let flags = || holds_flag_string(text);
    let Some(scan) = r.scan_document(text) else {
        let clean = !r.has_key_scoped_detectors()
            && marks.is_empty()
            && !flags()
            && clean_text(text)
            && unescaped_clean();
        return match clean {
            true => Survey::Clean,
            false => Survey::Scan {
                attention: Attention::everywhere(),
                base64_text,
            },
        };
    };
    if scan.clean && marks.is_empty() && !flags() && unescaped_clean() {
        return Survey::Clean;
    }
    marks.extend(scan.marks);
    Survey::Scan {
        attention: Attention::with_readable_base64(marks, learned_at, readable)
            .with_keyword_hits(scan.keyword_hits, scan.shape_completions),
        base64_text,
    }
}

/// What the base64 tokens of a document say before its values are read.
struct Base64Survey {
    /// Tokens whose decoded text holds a finding.
    marks: Vec<std::ops::Range<usize>>,
    /// Tokens that decode to readable text holding none (yet), in order.
    readable: Vec<std::ops::Range<usize>>,
}

/// The base64 tokens of `text`, read. A token read before a later one taught the value it
/// holds is read again (until nothing more is learned): its value's own scan would find it,
/// so it is marked.
fn base64_marks(r: &Redactor, text: &str, key: Option<&str>) -> Base64Survey {
    use super::learned::learned_in_scope;
    let mut marks = Vec::new();
    let mut readable = Vec::new();
    let mut seen = learned_in_scope();
    for m in validators::token_runs(text) {
        match base64_token_reading(r, text, &m, key) {
            TokenReading::Opaque => {}
            TokenReading::Text => readable.push(m),
            TokenReading::HidesFinding => marks.push(m),
        }
    }
    while !readable.is_empty() && learned_in_scope() != seen {
        seen = learned_in_scope();
        readable.retain(|m| {
            let hides = base64_token_reading(r, text, m, key) == TokenReading::HidesFinding;
            if hides {
                marks.push(m.clone());
            }
            !hides
        });
    }
    Base64Survey { marks, readable }
}

/// Distinct keys of a document kept in a list before the rest go to a map.
const FEW_KEYS: usize = 16;

/// What one document's keys were found to be, by their text. Keys repeat (every record of a
/// list has the same ones): each distinct key's verdict is asked of the rules once, and one
/// found clean is not scanned again. (A value learned later in the document could match a
/// key seen clean before it; its first sighting was kept then anyway, so no new text gets
/// through.)
#[derive(Default)]
struct DocumentKeys<'k> {
    /// The first few distinct keys, compared in turn: cheaper than hashing for the handful
    /// most documents have.
    few: Vec<(&'k str, KeyFacts)>,
    /// The keys past those (a map keyed by ids), by hash: the walk stays linear in the
    /// document's size.
    many: crate::maps::FastMap<&'k str, KeyFacts>,
}

/// What is known of one key of a document.
struct KeyFacts {
    /// What the key rules say of the key.
    verdict: KeyVerdict,
    /// The key's own text was found to hold nothing.
    clean: bool,
}

impl<'k> DocumentKeys<'k> {
    /// The facts of `key`, its verdict asked of `r` the first time.
    fn facts(&mut self, r: &Redactor, key: &'k str) -> &mut KeyFacts {
        let fresh = || KeyFacts {
            verdict: r.key_verdict(key),
            clean: false,
        };
        if let Some(at) = self.few.iter().position(|(k, _)| *k == key) {
            return &mut self.few[at].1;
        }
        if self.few.len() < FEW_KEYS {
            self.few.push((key, fresh()));
            let last = self.few.len() - 1;
            return &mut self.few[last].1;
        }
        self.many.entry(key).or_insert_with(fresh)
    }
}

/// The edits that protect a JSON document read in place (`doc`, of `text`) whose root
/// stands at `depth`, as byte ranges of the text and what replaces them: key rules and JSON
/// Web Key members by their key, values (strings, numbers) under their innermost key,
/// object keys as text, anything past the depth limit whole. Keys and values are scanned
/// where `attention` says a scan could find something.
fn json_edits(
    r: &Redactor,
    text: &str,
    doc: &json_text::Document,
    hits: &mut Redactions,
    depth: usize,
    attention: &Attention,
) -> Vec<(std::ops::Range<usize>, String)> {
    use json_text::Kind;
    let values = &doc.values;
    // The objects that are JSON Web Keys: they name their key type (`kty`) with a string.
    let mut jwk = vec![false; values.len()];
    // The objects that name a credential in a name member and hold its value in a value
    // member (`{"name": "DB_PASSWORD", "value": "…"}`): the name, by object. Few documents
    // have any, so nothing is allocated until one does.
    let mut named: crate::maps::FastMap<usize, std::borrow::Cow<'_, str>> = crate::maps::map();
    // The maps under a credential name's plural: the singular, by map.
    let mut plural: crate::maps::FastMap<usize, String> = crate::maps::map();
    // Each value's own key, decoded once.
    let mut own_key: Vec<Option<std::borrow::Cow<'_, str>>> = Vec::with_capacity(values.len());
    for v in values {
        let k = v.key.clone().map(|k| json_text::decode_string(&text[k]));
        if let (Some(k), Some(p), Kind::String) = (&k, v.parent, v.kind) {
            if k == "kty" {
                jwk[p] = true;
            }
            if NAME_MEMBERS.contains(&k.as_ref()) {
                let name = json_text::decode_string(&text[v.range.clone()]);
                if names_a_credential(&name) {
                    named.insert(p, name);
                }
            }
        }
        if let (Some(k), Kind::Object) = (&k, v.kind) {
            if let Some(one) = singular_credential(k) {
                plural.insert(own_key.len(), one.to_string());
            }
        }
        own_key.push(k);
    }
    if !plural.is_empty() {
        for v in values {
            if let (Some(p), false) = (v.parent, v.kind == Kind::String) {
                plural.remove(&p);
            }
        }
    }
    // The value whose key a value is read under: its own, or through arrays its container's.
    let mut key_from: Vec<Option<usize>> = Vec::with_capacity(values.len());
    let mut edits = Vec::new();
    let mut key_edits = Vec::new();
    let mut dropped = Vec::new();
    let mut keys = DocumentKeys::default();
    // Values before this byte are inside a value already replaced, dropped or kept whole.
    let mut skip_until = 0;
    for (i, v) in values.iter().enumerate() {
        let from = match (&own_key[i], v.parent) {
            (Some(_), _) => Some(i),
            (None, Some(p)) if values[p].kind == Kind::Array => key_from[p],
            _ => None,
        };
        key_from.push(from);
        if v.range.start < skip_until {
            continue;
        }
        let at = depth + v.depth;
        // A key is text too: a secret written as a key (`{"AKIA…": 1}`, an e-mail address
        // naming a map entry) goes as one in a value would.
        // The detectors and learned values only: a key holds no nested document or base64
        // worth a pass of its own. One found clean is not scanned again ([`DocumentKeys`]).
        let verdict = match (&v.key, own_key[i].as_deref()) {
            (Some(range), Some(k)) => {
                let facts = keys.facts(r, k);
                if !facts.clean {
                    let found = if attention.needs_scan(text, range.clone()) {
                        let as_written = reads_as_written(own_key[i].as_ref());
                        with_survey_hits(r, text, range, as_written, attention, || {
                            r.redact_text_under(k, None, hits)
                        })
                    } else {
                        None
                    };
                    match found {
                        Some(name) => {
                            let written = json_text::replace_string(&text[range.clone()], &name);
                            key_edits.push((i, range.clone(), written));
                        }
                        None => facts.clean = true,
                    }
                }
                Some(facts.verdict)
            }
            _ => None,
        };
        let raw = &text[v.range.clone()];
        let replace_whole = |edits: &mut Vec<_>, with: String, skip_until: &mut usize| {
            edits.push((v.range.clone(), json_text::encode_string(&with)));
            *skip_until = v.range.end;
        };
        if at > r.max_depth {
            count(hits, MAX_DEPTH_RULE);
            replace_whole(
                &mut edits,
                format!("[REDACTED:{MAX_DEPTH_RULE}]"),
                &mut skip_until,
            );
            continue;
        }
        let string = (v.kind == Kind::String).then(|| json_text::decode_string(raw));
        // The value member of an object that names a credential is read under that name.
        let under_name = match (own_key[i].as_deref(), v.parent) {
            (Some(k), Some(p)) if VALUE_MEMBERS.contains(&k) => named.get(&p).map(|n| n.as_ref()),
            (Some(k), Some(p)) if v.kind == Kind::String => plural
                .get(&p)
                .and_then(|one| plural_member_name(one, k, string.as_deref().unwrap_or_default())),
            _ => None,
        };
        let (own, verdict) = match under_name {
            Some(name) => (Some(name), Some(keys.facts(r, name).verdict)),
            None => (own_key[i].as_deref(), verdict),
        };
        // A value with its own key has its key's verdict from above.
        if let (Some(k), Some(p), Some(verdict)) = (own, v.parent, verdict) {
            let empty = v.kind == Kind::Literal && raw == "null"
                || string.as_deref().is_some_and(str::is_empty);
            if jwk[p] && JWK_PRIVATE_MEMBERS.contains(&k) && !empty {
                if let Some(t) = &string {
                    super::learned::learn_in_scope(JWK_RULE, t);
                }
                count(hits, JWK_RULE);
                replace_whole(
                    &mut edits,
                    format!("[REDACTED:{JWK_RULE}]"),
                    &mut skip_until,
                );
                continue;
            }
            let original = || match &string {
                Some(t) => t.to_string(),
                None => raw.to_string(),
            };
            // Key rules read at the depth of the object that holds the member.
            let object_at = depth + values[p].depth;
            let value = string.as_deref();
            match key_rule_outcome(r, (k, verdict), value, empty, original, hits, object_at) {
                KeyRuleOutcome::Scan => {}
                KeyRuleOutcome::Keep => {
                    skip_until = v.range.end;
                    continue;
                }
                KeyRuleOutcome::Drop => {
                    dropped.push(i);
                    skip_until = v.range.end;
                    continue;
                }
                KeyRuleOutcome::Replace(with) => {
                    replace_whole(&mut edits, with, &mut skip_until);
                    continue;
                }
            }
        }
        let key = from.and_then(|f| own_key[f].as_deref());
        match v.kind {
            Kind::String => {
                // Nested JSON and text near the depth limit (where base64 inside fails
                // closed) are scanned whatever the marks say.
                let must_scan = at + BASE64_LAYERS + 2 >= r.max_depth
                    || string.as_deref().is_some_and(|t| {
                        let t = t.trim_start();
                        t.starts_with('{') || t.starts_with('[')
                    });
                if !must_scan && !attention.needs_scan(text, v.range.clone()) {
                    continue;
                }
                let as_written = reads_as_written(string.as_ref());
                let mut t = string.map(std::borrow::Cow::into_owned).unwrap_or_default();
                let changed = with_survey_hits(r, text, &v.range, as_written, attention, || {
                    redact_string_under(r, &mut t, hits, at, key)
                });
                if changed {
                    edits.push((v.range.clone(), json_text::replace_string(raw, &t)));
                }
            }
            // Five characters at most (`-9999`): shorter than anything a rule or learned value
            // finds.
            Kind::Number if raw.len() <= 5 => {}
            Kind::Number if !attention.needs_scan(text, v.range.clone()) => {}
            Kind::Number => {
                if let Some(new) = r.redact_text_under(raw, key, hits) {
                    edits.push((v.range.clone(), json_text::encode_string(&new)));
                }
            }
            Kind::Literal | Kind::Object | Kind::Array => {}
        }
    }
    argv_edits(r, text, doc, hits, &mut edits);
    // A dropped member's key goes with it: no edit of its own inside the removal.
    let gone: std::collections::HashSet<usize> = dropped.iter().copied().collect();
    edits.extend(
        key_edits
            .into_iter()
            .filter(|(i, _, _)| !gone.contains(i))
            .map(|(_, range, with)| (range, with)),
    );
    edits.extend(
        doc.member_removals(&dropped)
            .into_iter()
            .map(|r| (r, String::new())),
    );
    edits
}

/// True when a JSON string token's decoded text ([`json_text::decode_string`]) reads as
/// written: it borrowed the token's inside, which it does exactly when no escape is there.
fn reads_as_written(decoded: Option<&std::borrow::Cow<'_, str>>) -> bool {
    matches!(decoded, Some(std::borrow::Cow::Borrowed(_)))
}

/// Runs `f`, a scan of the JSON string at `raw` of `text` (quotes included), with the
/// survey's keyword hits and shapes inside it known to the scans
/// ([`super::engine::with_known_keyword_hits`]) where the string reads as written
/// (`as_written`: the hits of the text as written are then the decoded text's).
fn with_survey_hits<R>(
    r: &Redactor,
    text: &str,
    raw: &std::ops::Range<usize>,
    as_written: bool,
    attention: &Attention,
    f: impl FnOnce() -> R,
) -> R {
    let inner = raw.start + 1..raw.end.saturating_sub(1);
    match (
        as_written,
        text.get(inner.clone()),
        attention.keyword_hits_within(inner.clone()),
    ) {
        (true, Some(t), Some(known)) => {
            let shapes = attention.shapes_within(inner, t);
            super::engine::with_known_keyword_hits(r, t, known, shapes, f)
        }
        _ => f(),
    }
}

/// True when a JSON string in `text` starts with a flag: `"-` and a letter or `-`.
fn holds_flag_string(text: &str) -> bool {
    // A vector search: `str::match_indices` (two-way, a byte at a time) cost a tenth of
    // the order records' protection.
    let b = text.as_bytes();
    memchr::memmem::find_iter(b, b"\"-").any(|at| {
        b.get(at + 2)
            .is_some_and(|c| c.is_ascii_alphabetic() || *c == b'-')
    })
}

/// Bytes of a command line read from an array's strings: longer arrays are data, not argv.
const ARGV_MAX_BYTES: usize = 4096;

/// The arrays of strings in `doc` that read as a command's arguments, one of them a flag
/// (`["psql", "-U", "app", "--password", "…"]`, `["mysql", "-p…"]`, an MCP server's `args`):
/// each is read as one command line, its items joined by blanks, so that a flag and its value
/// in items of their own are read together, as a shell would pass them. What is found inside
/// one item replaces its bytes there; an array an edit already touched is left to it.
fn argv_edits(
    r: &Redactor,
    text: &str,
    doc: &json_text::Document,
    hits: &mut Redactions,
    edits: &mut Vec<(std::ops::Range<usize>, String)>,
) {
    use json_text::Kind;
    let values = &doc.values;
    // The raw string's first bytes after its quote (an escape there is no flag).
    let flag = |v: &json_text::Value| {
        v.kind == Kind::String
            && text
                .get(v.range.start + 1..v.range.end)
                .is_some_and(is_flag)
    };
    // Most documents hold no flag: nothing is gathered for them.
    if !values.iter().any(flag) {
        return;
    }
    let mut items: crate::maps::FastMap<usize, Vec<usize>> = crate::maps::map();
    for (i, v) in values.iter().enumerate() {
        if let Some(p) = v.parent.filter(|p| values[*p].kind == Kind::Array) {
            items.entry(p).or_default().push(i);
        }
    }
    // An item decodes to a flag only from `"-` or an escape (`"\u002d…`): arrays with
    // neither are not decoded.
    let may_be_flag = |i: &usize| {
        matches!(
            text.as_bytes().get(values[*i].range.start + 1),
            Some(b'-' | b'\\')
        )
    };
    let mut arrays: Vec<(usize, Vec<usize>)> = items
        .into_iter()
        .filter(|(_, its)| {
            its.iter().all(|i| values[*i].kind == Kind::String) && its.iter().any(may_be_flag)
        })
        .collect();
    arrays.sort_unstable_by_key(|(a, _)| *a);
    for (a, its) in arrays {
        let span = &values[a].range;
        if edits
            .iter()
            .any(|(e, _)| e.start < span.end && span.start < e.end)
        {
            continue;
        }
        let decoded: Vec<std::borrow::Cow<'_, str>> = its
            .iter()
            .map(|i| json_text::decode_string(&text[values[*i].range.clone()]))
            .collect();
        if !reads_as_argv(&decoded) {
            continue;
        }
        for (n, new) in argv_redacted(r, &decoded, hits) {
            let range = values[its[n]].range.clone();
            let written = json_text::replace_string(&text[range.clone()], &new);
            edits.push((range, written));
        }
    }
}

/// True when `item` is a command-line flag (`-a`, `--password`, `-pX`).
fn is_flag(item: &str) -> bool {
    let b = item.as_bytes();
    b.first() == Some(&b'-')
        && b.get(1)
            .is_some_and(|c| c.is_ascii_alphabetic() || *c == b'-')
}

/// True when strings `items` read as a command's arguments: two or more, one a flag, and
/// the command line they make [`ARGV_MAX_BYTES`] at most (longer lists are data).
fn reads_as_argv<S: AsRef<str>>(items: &[S]) -> bool {
    items.len() >= 2
        && items.iter().any(|t| is_flag(t.as_ref()))
        && items.iter().map(|t| t.as_ref().len() + 1).sum::<usize>() <= ARGV_MAX_BYTES + 1
}

/// What a scan of `items` read as one command line (joined by blanks) finds inside each
/// item, by position, in the item's own offsets. A finding across two items (none of the
/// catalogue's captures a blank) is left to their own scans.
fn argv_findings<S: AsRef<str>>(
    r: &Redactor,
    items: &[S],
) -> Vec<(usize, Vec<super::engine::Finding>)> {
    let line = items
        .iter()
        .map(AsRef::as_ref)
        .collect::<Vec<&str>>()
        .join(" ");
    let findings = r.scan(&line);
    let mut out = Vec::new();
    let mut from = 0;
    for (n, t) in items.iter().enumerate() {
        let to = from + t.as_ref().len();
        let inside: Vec<super::engine::Finding> = findings
            .iter()
            .filter(|f| from <= f.start && f.end <= to)
            .map(|f| {
                let mut f = f.clone();
                (f.start, f.end) = (f.start - from, f.end - from);
                f
            })
            .collect();
        if !inside.is_empty() {
            out.push((n, inside));
        }
        from = to + 1;
    }
    out
}

/// `items` read as one command line ([`argv_findings`]): each item that holds a finding, by
/// position, with its findings replaced (learned and counted as a string's are).
fn argv_redacted<S: AsRef<str>>(
    r: &Redactor,
    items: &[S],
    hits: &mut Redactions,
) -> Vec<(usize, String)> {
    argv_findings(r, items)
        .into_iter()
        .filter_map(|(n, found)| {
            let t = items[n].as_ref();
            r.apply_findings(t, &found, hits, t, |r| r)
                .map(|new| (n, new))
        })
        .collect()
}

/// Text decoded in one or more layers (JSON escaped more than once), innermost last.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Layers(Vec<Decoded>);

impl Layers {
    /// The decoded text, all layers undone.
    fn text(&self) -> &str {
        self.0.last().map_or("", |d| d.text.as_str())
    }

    /// The raw bytes a range of the decoded text came from.
    fn to_raw(&self, r: std::ops::Range<usize>) -> std::ops::Range<usize> {
        self.0
            .iter()
            .rev()
            .fold(r, |r, layer| layer.range_to_raw(r))
    }
}

/// Undoes JSON string escapes (`\"`, `\\`, `\n`, `\t`, `\r`, `\/`, `\uXXXX`), applied
/// repeatedly (three layers at most) for text escaped more than once; `None` if there are none.
fn json_unescaped(s: &str) -> Option<Layers> {
    if !s.contains('\\') {
        return None;
    }
    let mut layers: Vec<Decoded> = Vec::new();
    for _ in 0..3 {
        let current = layers.last().map_or(s, |d| d.text.as_str());
        let Some(next) = unescape_once(current) else {
            break;
        };
        layers.push(next);
    }
    (!layers.is_empty()).then_some(Layers(layers))
}

/// One layer of JSON escapes undone; `None` when there is none to undo.
fn unescape_once(s: &str) -> Option<Decoded> {
    let b = s.as_bytes();
    let mut d = Decoded::with_capacity(s.len());
    let mut plain_from = 0;
    let mut i = 0;
    while let Some(p) = b[i..].iter().position(|&c| c == b'\\') {
        let at = i + p;
        let (ch, len) = match b.get(at + 1) {
            Some(&c @ (b'"' | b'\\' | b'/')) => (char::from(c), 2),
            Some(b'n') => ('\n', 2),
            Some(b't') => ('\t', 2),
            Some(b'r') => ('\r', 2),
            Some(b'u') => match s
                .get(at + 2..at + 6)
                .filter(|h| h.bytes().all(|c| c.is_ascii_hexdigit()))
                .and_then(|h| u32::from_str_radix(h, 16).ok())
                .and_then(char::from_u32)
            {
                Some(ch) => (ch, 6),
                None => {
                    i = at + 1;
                    continue;
                }
            },
            _ => {
                i = at + 1;
                continue;
            }
        };
        d.push_escape(s, plain_from, at, len, ch);
        i = at + len;
        plain_from = i;
    }
    if d.escapes.is_empty() {
        return None;
    }
    d.text.push_str(&s[plain_from..]);
    Some(d)
}

/// Decodes `%XX` escapes; `None` if there are none or the result is not UTF-8.
fn percent_decoded(s: &str) -> Option<Decoded> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut escapes = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            let hex = std::str::from_utf8(&b[i + 1..i + 3]).ok();
            if let Some(v) = hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                escapes.push(Escape {
                    decoded: out.len(),
                    decoded_len: 1,
                    raw: i,
                    raw_len: 3,
                });
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    if escapes.is_empty() {
        return None;
    }
    let text = String::from_utf8(out).ok()?;
    Some(Decoded { text, escapes })
}

/// What the key rules do with the value of one attribute or JSON key.
enum KeyRuleOutcome {
    /// No rule fires: scan the value as usual.
    Scan,
    /// Leave the value as it is: the key is allowed, or a rule fires on an empty value.
    Keep,
    /// Remove the key.
    Drop,
    /// Put this in the value's place.
    Replace(String),
}

/// Applies the key rule that covers `key`, if one fires on `value` (its text, when it is a
/// string); `original` renders the whole value for rules that replace it.
fn key_rule_outcome(
    r: &Redactor,
    (key, verdict): (&str, KeyVerdict),
    value: Option<&str>,
    empty: bool,
    original: impl FnOnce() -> String,
    hits: &mut Redactions,
    depth: usize,
) -> KeyRuleOutcome {
    // One verdict says both whether the key is allowed and which rule covers it.
    let rule = match r.key_rule_decision_given(verdict, key, value) {
        // An allowed key's value is never touched.
        KeyRuleDecision::Allowed => return KeyRuleOutcome::Keep,
        KeyRuleDecision::Fires(rule, _) => rule,
        KeyRuleDecision::Kept(_) | KeyRuleDecision::None => return KeyRuleOutcome::Scan,
    };
    if empty {
        return KeyRuleOutcome::Keep;
    }
    count(hits, &rule.id);
    if let Some(v) = value {
        super::trail::scanning_under(Some(key));
        super::learned::learn_in_scope(&rule.id, v);
    }
    match rule.action {
        Action::Drop => KeyRuleOutcome::Drop,
        action => KeyRuleOutcome::Replace(key_rule_value(r, rule, action, original(), hits, depth)),
    }
}

/// The value a key rule leaves in place of `original`.
fn key_rule_value(
    r: &Redactor,
    rule: &super::engine::KeyRule,
    action: Action,
    mut original: String,
    hits: &mut Redactions,
    depth: usize,
) -> String {
    match action {
        Action::Truncate => {
            // What is kept is redacted first: a prefix must not carry a secret either.
            redact_string(r, &mut original, hits, depth + 1);
            cut(&mut original, rule.keep_bytes, hits);
            original
        }
        _ => r.replacement(&rule.id, action, &original),
    }
}

/// Redacts an attribute list in place (key rules, allowlist, values at any depth).
pub fn redact_attributes(
    r: &Redactor,
    attrs: &mut Attributes,
    hits: &mut Redactions,
    depth: usize,
) {
    let mut dropped = Vec::new();
    for (i, (key, value)) in attrs.0.iter_mut().enumerate() {
        let empty = matches!(value, AttrValue::Empty) || value.as_str().is_some_and(str::is_empty);
        let original = || match &*value {
            AttrValue::Str(s) => s.clone(),
            other => serde_json::to_string(other).unwrap_or_default(),
        };
        // The strings of an array a key rule removes whole (request headers are string
        // arrays) are credentials on the secret trail, as a single string's would be.
        let items: Vec<String> = match &*value {
            AttrValue::Array(items) => items
                .iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect(),
            _ => Vec::new(),
        };
        let verdict = r.key_verdict(key);
        let outcome = key_rule_outcome(
            r,
            (key, verdict),
            value.as_str(),
            empty,
            original,
            hits,
            depth,
        );
        if matches!(outcome, KeyRuleOutcome::Drop | KeyRuleOutcome::Replace(_)) {
            for item in &items {
                super::trail::scanning_under(Some(key));
                super::trail::note(item);
            }
        }
        match outcome {
            KeyRuleOutcome::Scan => redact_value_under(r, value, hits, depth + 1, Some(key)),
            KeyRuleOutcome::Keep => {}
            KeyRuleOutcome::Drop => dropped.push(i),
            KeyRuleOutcome::Replace(text) => *value = AttrValue::Str(text),
        }
    }
    for i in dropped.into_iter().rev() {
        attrs.0.remove(i);
    }
}

/// Redacts one attribute value in place.
pub fn redact_value(r: &Redactor, v: &mut AttrValue, hits: &mut Redactions, depth: usize) {
    redact_value_under(r, v, hits, depth, None)
}

/// Redacts the value of attribute `key` in place.
fn redact_value_under(
    r: &Redactor,
    v: &mut AttrValue,
    hits: &mut Redactions,
    depth: usize,
    key: Option<&str>,
) {
    if depth > r.max_depth {
        *v = AttrValue::Str(format!("[REDACTED:{MAX_DEPTH_RULE}]"));
        count(hits, MAX_DEPTH_RULE);
        return;
    }
    match v {
        AttrValue::Str(s) => {
            redact_string_under(r, s, hits, depth, key);
            limit(r, s, hits);
        }
        // Only numbers long enough to be a card or phone number are worth a scan.
        AttrValue::Int(i) if i.unsigned_abs() >= 10_000_000 => {
            if let Some(new) = r.redact_text_under(&i.to_string(), key, hits) {
                *v = AttrValue::Str(new);
            }
        }
        AttrValue::Int(_) => {}
        AttrValue::Array(items) => {
            for item in items.iter_mut() {
                redact_value_under(r, item, hits, depth + 1, key);
            }
            redact_argv_attribute(r, items, hits);
        }
        AttrValue::Map(attrs) => redact_attributes(r, attrs, hits, depth + 1),
        AttrValue::Bytes(b) => match std::str::from_utf8(b) {
            Ok(text) => {
                let mut s = text.to_string();
                if redact_string_under(r, &mut s, hits, depth, key) {
                    *v = AttrValue::Str(s);
                }
            }
            Err(_) => {
                *v = AttrValue::Str(format!("[REDACTED:{BINARY_RULE}] {} bytes", b.len()));
                count(hits, BINARY_RULE);
            }
        },
        AttrValue::Bool(_) | AttrValue::Double(_) | AttrValue::Empty => {}
    }
}

/// An array attribute of strings one of which is a flag (`process.command_args`), read as
/// one command line as well ([`argv_redacted`]), after each item's own scan.
fn redact_argv_attribute(r: &Redactor, items: &mut [AttrValue], hits: &mut Redactions) {
    let strings: Option<Vec<&str>> = items
        .iter()
        .map(|i| match i {
            AttrValue::Str(s) => Some(s.as_str()),
            _ => None,
        })
        .collect();
    let Some(strings) = strings.filter(|s| reads_as_argv(s)) else {
        return;
    };
    for (n, new) in argv_redacted(r, &strings, hits) {
        items[n] = AttrValue::Str(new);
    }
}

/// Redacts an optional free-text field.
pub fn redact_field(r: &Redactor, field: &mut Option<String>, hits: &mut Redactions) {
    if let Some(s) = field {
        redact_string(r, s, hits, 0);
        limit(r, s, hits);
    }
}

/// One decision, for `toolwatch redact --explain`: where, which rule, which bytes, and why;
/// values under credential names that were kept are listed too, with the reason.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Explanation {
    /// JSON path of the string (`$` for plain text), e.g. `$.arguments.token`.
    pub path: String,
    /// The rule (for a kept value, the rule that judged it).
    pub rule: String,
    /// Byte range in that string (the whole value for key rules).
    pub start: usize,
    /// End of the byte range.
    pub end: usize,
    /// False for a candidate the key-context judgment kept.
    pub removed: bool,
    /// Why: the judgment's score and terms, or how a pattern rule matched.
    pub why: String,
}

/// What reading `items` as one command line finds inside an item ([`argv_edits`]), under
/// the item's path.
fn explain_argv(r: &Redactor, items: &[Value], path: &str, out: &mut Vec<Explanation>) {
    let strings: Option<Vec<&str>> = items.iter().map(Value::as_str).collect();
    let Some(strings) = strings.filter(|s| reads_as_argv(s)) else {
        return;
    };
    for (i, found) in argv_findings(r, &strings) {
        out.extend(found.into_iter().map(|f| Explanation {
            path: format!("{path}[{i}]"),
            rule: f.rule.to_string(),
            start: f.start,
            end: f.end,
            removed: true,
            why: "matched the rule's pattern in the array read as one command line".into(),
        }));
    }
}

/// A judgment as one line: `score +1.2 (removed at 0 or more): key names a credential (+5.3); …`
/// (the features that weighed most, with their share), or the one reason that kept the value.
fn judgment_line(j: &super::key_context::Judgment) -> String {
    let terms = j.reasons().join("; ");
    if j.decided_by.is_some() {
        terms
    } else {
        let model = &*super::judgment::MODEL;
        format!(
            "score {:+.1} (removed at 0 or more; baseline {:+.1}): {terms}",
            j.score,
            model.bias - model.threshold
        )
    }
}

/// Lists what the rules would remove from `text` (parsed as JSON when it is JSON).
pub fn explain(r: &Redactor, text: &str) -> Vec<Explanation> {
    let mut out = Vec::new();
    match serde_json::from_str::<Value>(text) {
        Ok(v) if v.is_object() || v.is_array() => {
            let at = Place {
                path: "$".to_string(),
                key: None,
                depth: 0,
            };
            explain_json(r, &v, at, &mut out)
        }
        _ => explain_text(r, text, "$", None, &mut out),
    }
    out
}

/// The base64 tokens of `text` that go: Atlassian Data Center tokens, and tokens whose
/// decoded text holds a finding.
fn explain_base64(
    r: &Redactor,
    text: &str,
    path: &str,
    key: Option<&str>,
    out: &mut Vec<Explanation>,
) {
    for m in validators::token_runs(text) {
        let pats = atlassian_dc_pats(text, m.clone());
        for p in &pats {
            out.push(Explanation {
                path: path.to_string(),
                rule: ATLASSIAN_DC_PAT_RULE.into(),
                start: p.start,
                end: p.end,
                removed: true,
                why: "base64 of a numeric token id, ':' and a secret: an Atlassian Data Center personal access token".into(),
            });
        }
        if pats.is_empty() && base64_hides_finding(r, &text[m.clone()], key) {
            out.push(Explanation {
                path: path.to_string(),
                rule: BASE64_RULE.into(),
                start: m.start,
                end: m.end,
                removed: true,
                why: "decodes to text that holds a finding".into(),
            });
        }
    }
}

fn explain_text(
    r: &Redactor,
    text: &str,
    path: &str,
    key: Option<&str>,
    out: &mut Vec<Explanation>,
) {
    let judged = r.judged_rule_id();
    let candidates = match judged {
        Some(_) => super::key_context::candidates(text, &super::key_context::keyword_hits(text)),
        None => Vec::new(),
    };
    for f in r.scan_under(text, key) {
        let why = if Some(&*f.rule) == judged {
            candidates
                .iter()
                .find(|c| c.judgment.removed && c.value.start >= f.start && c.value.end <= f.end)
                .map_or_else(
                    || "the same value was removed elsewhere in this text".to_string(),
                    |c| judgment_line(&c.judgment),
                )
        } else {
            "matched the rule's pattern".to_string()
        };
        out.push(Explanation {
            path: path.to_string(),
            rule: f.rule.to_string(),
            start: f.start,
            end: f.end,
            removed: true,
            why,
        });
    }
    explain_base64(r, text, path, key, out);
    for c in candidates.iter().filter(|c| !c.judgment.removed) {
        out.push(Explanation {
            path: path.to_string(),
            rule: judged.unwrap_or_default().to_string(),
            start: c.value.start,
            end: c.value.end,
            removed: false,
            why: judgment_line(&c.judgment),
        });
    }
}

/// Where a JSON value sits: its path for the report and the key it is the value of.
struct Place<'a> {
    path: String,
    key: Option<&'a str>,
    depth: usize,
}

fn explain_json(r: &Redactor, v: &Value, at: Place<'_>, out: &mut Vec<Explanation>) {
    let Place { path, key, depth } = at;
    if depth > r.max_depth {
        out.push(Explanation {
            path,
            rule: MAX_DEPTH_RULE.into(),
            start: 0,
            end: 0,
            removed: true,
            why: format!("deeper than redaction.max_depth ({})", r.max_depth),
        });
        return;
    }
    match v {
        Value::String(s) => match serde_json::from_str::<Value>(s) {
            Ok(inner) if inner.is_object() || inner.is_array() => {
                let path = format!("{path}<json>");
                explain_json(
                    r,
                    &inner,
                    Place {
                        path,
                        key,
                        depth: depth + 1,
                    },
                    out,
                )
            }
            _ => explain_text(r, s, &path, key, out),
        },
        Value::Number(n) => explain_text(r, &n.to_string(), &path, key, out),
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                let path = format!("{path}[{i}]");
                explain_json(
                    r,
                    item,
                    Place {
                        path: path.clone(),
                        key,
                        depth: depth + 1,
                    },
                    out,
                );
            }
            explain_argv(r, items, &path, out);
        }
        Value::Object(map) => {
            let jwk = is_jwk(map);
            let named = named_credential(map);
            let plural = key
                .and_then(singular_credential)
                .filter(|_| map.values().all(Value::is_string));
            for (k, val) in map {
                let p = format!("{path}.{k}");
                // The value member of an object that names a credential: read under the name;
                // a string in a map under a credential name's plural, under the singular.
                let k = match (named, plural) {
                    (Some(name), _) if VALUE_MEMBERS.contains(&k.as_str()) => name,
                    (_, Some(one))
                        if plural_member_name(one, k, val.as_str().unwrap_or_default())
                            .is_some() =>
                    {
                        one
                    }
                    _ => k.as_str(),
                };
                if jwk && jwk_private_member(k, val) {
                    let len = val.as_str().map_or_else(|| val.to_string().len(), str::len);
                    out.push(Explanation {
                        path: p,
                        rule: JWK_RULE.into(),
                        start: 0,
                        end: len,
                        removed: true,
                        why: "a private member of a JSON Web Key (the object has kty)".into(),
                    });
                    continue;
                }
                if r.is_allowed_key(k) {
                    continue;
                }
                let len = val.as_str().map_or_else(|| val.to_string().len(), str::len);
                match r.key_rule_decision(k, val.as_str()) {
                    KeyRuleDecision::Fires(rule, judgment) => {
                        out.push(Explanation {
                            path: p,
                            rule: rule.id.to_string(),
                            start: 0,
                            end: len,
                            removed: true,
                            why: judgment.map_or_else(
                                || "a key rule covers the key".to_string(),
                                |j| judgment_line(&j),
                            ),
                        });
                        continue;
                    }
                    KeyRuleDecision::Kept(j) => out.push(Explanation {
                        path: p.clone(),
                        rule: "key_context".to_string(),
                        start: 0,
                        end: len,
                        removed: false,
                        why: judgment_line(&j),
                    }),
                    KeyRuleDecision::None | KeyRuleDecision::Allowed => {}
                }
                let at = Place {
                    path: p,
                    key: Some(k),
                    depth: depth + 1,
                };
                explain_json(r, val, at, out);
            }
        }
        Value::Bool(_) | Value::Null => {}
    }
}

/// Applies the rules to text or JSON, as `toolwatch redact` does: a JSON document comes out
/// as it went in, less what was removed.
pub fn redact_document(r: &Redactor, text: &str, hits: &mut Redactions) -> String {
    let trimmed = text.trim_start();
    if trimmed.starts_with('{') || trimmed.starts_with('[') {
        let attention = match survey(r, text, None) {
            Survey::Clean => return text.to_string(),
            Survey::Scan { attention, .. } => attention,
        };
        if let Ok(protected) = json_in_place(r, text, hits, 0, &attention) {
            return protected.unwrap_or_else(|| text.to_string());
        }
    }
    let mut s = text.to_string();
    redact_string(r, &mut s, hits, 0);
    s
}

#[cfg(test)]
mod base64_token_properties {
    use super::hex_or_one_case;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        /// The eight-bytes-at-a-time test says what the three byte loops say.
        #[test]
        fn hex_or_one_case_is_the_byte_loops(
            s in prop_oneof!["[0-9a-f]{0,40}", "[0-9a-fA-F]{0,40}", "[0-9a-fA-Fg-zG-Z+/=é]{0,40}"]
        ) {
            let b = s.as_bytes();
            let hex = b.iter().all(u8::is_ascii_hexdigit);
            let mixed = b.iter().any(u8::is_ascii_uppercase) && b.iter().any(u8::is_ascii_lowercase);
            prop_assert_eq!(hex_or_one_case(b), hex || !mixed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protect::rules::RedactionConfig;
    use crate::protect::KeyedHasher;

    fn redactor(max_value_bytes: usize) -> Redactor {
        let cfg = RedactionConfig {
            max_value_bytes,
            ..Default::default()
        };
        Redactor::new(&cfg, KeyedHasher::new(b"k")).expect("rules")
    }

    fn redactor_at_depth(max_depth: usize) -> Redactor {
        let cfg = RedactionConfig {
            max_depth,
            ..Default::default()
        };
        Redactor::new(&cfg, KeyedHasher::new(b"k")).expect("rules")
    }

    #[test]
    fn a_json_web_key_in_a_string_value_is_parsed_and_its_private_member_goes() {
        let r = redactor(4096);
        let mut hits = Redactions::new();
        let mut s =
            r#"{"keys":[{"kty":"oct","kid":"hmac-1","k":"GawgguFyGrWKav7AX4VKUg"}]}"#.to_string();
        assert!(redact_string(&r, &mut s, &mut hits, 0));
        assert!(!s.contains("GawgguFyGrWKav7AX4VKUg"), "{s}");
        assert!(s.contains("hmac-1"), "{s}");
        assert_eq!(hits.get(JWK_RULE).copied(), Some(1));
    }

    #[test]
    fn atlassian_data_center_tokens_go_and_other_base64_stays() {
        let r = redactor(4096);
        // base64 of a 12-digit id, ':' and 20 random bytes (the last one holds a '/').
        for pat in [
            "OTI2NjA3NjU1NTI2Oh2DOnASdOHoIhEGyqIuYrdkYaQZ",
            "MTIzNDU2Nzg5MDEyOsjJysvMzc7P0NHS09TV1tfY2drb",
            "OTI2NjA3NjU1NTI2OgjaE2YKba2qe99vI37OUwT/pwyN",
        ] {
            for text in [
                format!("jira for ci: {pat} (expires in 90 days)"),
                format!("{{\"jira\": {{\"pat\": \"{pat}\"}}}}"),
                format!("https://example.com/token/{pat}"),
                format!("https://jira.example.com/rest/token/{pat}/revoke"),
            ] {
                let mut s = text.clone();
                let mut hits = Redactions::new();
                assert!(redact_string(&r, &mut s, &mut hits, 0), "{text}");
                assert!(!s.contains(pat), "{s}");
                assert!(hits.contains_key(ATLASSIAN_DC_PAT_RULE), "{text}: {hits:?}");
            }
        }
        // 44 characters of base64 that are no such token: digits without ':', hex text, text
        // that starts with a time, an id whose "secret" is printable text.
        for kept in [
            "digest MTIzNDU2Nzg5MDEyMzQ1Njc4OTAxMjM0NTY3ODkwMTIz here",
            "sha MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWZh end",
            "ZmFrZWtleW1hdGVyaWFsMTIzNDU2Nzg5MDEyMzQ1Njc4OTA",
            "log MDk6MTU6MDIgbmlnaHRseSBiYWNrdXAgY29tcGxldGVk",
            "MTIzNDU2Nzg5MDEyOjEyMzQ1Njc4OTAxMjM0NTY3ODkw",
        ] {
            let mut s = kept.to_string();
            let mut hits = Redactions::new();
            redact_string(&r, &mut s, &mut hits, 0);
            assert!(!hits.contains_key(ATLASSIAN_DC_PAT_RULE), "{kept}: {s}");
        }
        let e = explain(
            &r,
            "jira for ci: OTI2NjA3NjU1NTI2Oh2DOnASdOHoIhEGyqIuYrdkYaQZ",
        );
        assert_eq!(
            e.iter()
                .map(|e| (e.rule.as_str(), e.start, e.end))
                .collect::<Vec<_>>(),
            [(ATLASSIAN_DC_PAT_RULE, 13, 57)]
        );
    }

    #[test]
    fn the_smallest_integer_is_examined_without_overflow() {
        let r = redactor(4096);
        let mut hits = Redactions::new();
        let text = r#"{"n": -9223372036854775808, "m": 12}"#;
        assert_eq!(redact_document(&r, text, &mut hits), text);
        assert!(hits.is_empty());
    }

    #[test]
    fn at_the_depth_limit_base64_text_still_fails_closed() {
        // The e-mail makes the outer document be parsed; its "a" string then sits at the
        // limit, so the base64 inside it, one level deeper, cannot be examined and goes.
        let r = redactor_at_depth(2);
        let mut hits = Redactions::new();
        let mut s =
            r#"{"c":"jane@example.com","a":"{\"b\":\"aGVsbG8gd29ybGQgdGhpcyBpcyBwbGFpbg==\"}"}"#
                .to_string();
        redact_string(&r, &mut s, &mut hits, 0);
        assert!(!s.contains("aGVsbG8gd29ybGQgdGhpcyBpcyBwbGFpbg"), "{s}");
        assert!(hits.contains_key(MAX_DEPTH_RULE), "{hits:?}");
    }

    #[test]
    fn private_members_of_json_web_keys_go_and_public_ones_stay() {
        let r = redactor(4096);
        let mut hits = Redactions::new();
        let text = r#"{"keys":[{"kty":"RSA","kid":"k1","n":"0vx7agoebGcQSuuPiLJXZptN9nndrQmbXEps2aiAFbWhM78LhWx4cbbfAAtVT86zwu1RK7aPFFxuhDR1L6tSoc_BJECPebWKRXjBZCiFV4n3oknjhMstn64tZ_2W-5JsGY4Hc5n9yBXArwl93lqt7_RN5w6Cf0h4QyQ5v-65YGjQR0_FDW2QvzqY368QQMicAtaSqzs8KJZgnYb9c7d0zgdAZHzu6qMQvRL5hajrn1n91CbOpbISD08qNLyrdkt-bFTWhAI4vMQFh6WeZu0fM4lFd2NcRwr3XPksINHaQ-G_xBniIqbw0Ls1jF44-csFCur-kEgU8awapJzKnqDKgw","e":"AQAB","d":"X4cTteJY_gn4FYPsXB8rdXix5vwsg1FLN5E3EaG6RJoVH-HLLKD9M7dx5oo7GURknchnrRweUkC7hT5fJLM0WbFAKNLWY2vv7B6NqXSzUvxT0_YSfqijwp3RTzlBaCxWp4doFk5N2o8Gy_nHNKroADIkJ46pRUohsXywbReAdYaMwFs9tv8d_cPVY3i07a3t8MN6TNwm0dSawm9v47UiCl3Sk5ZiG7xojPLu4sbg1U2jx4IBTNBznbJSzFHK66jT8bgkuqsk0GjskDJk19Z4qwjwbsnn4j2WBii3RL-Us2lGVkY8fkFzme1z0HbIkfz0Y6mqnOYtqc0X4jfcKoAC8Q","p":"83i-7IvMGXoMXCskv73TKr8637FiO7Z27zv8oj6pbWUQyLPQBQxtPVnwD20R-60eTDmD2ujnMt5PoqMrm8RfmNhVWDtjjMmCMjOpSXicFHj7XOuVIYQyqVWlWEh6dN36GVZYk93N8Bc9vY41xy8B9RzzOGVQzXvNEvn7O0nVbfs","q":"3dfOR9cuYq-0S-mkFLzgItgMEfFzB2q3hWehMuG0oCuqnb3vobLyumqjVZQO1dIrdwgTnCdpYzBcOfW5r370AFXjiWft_NGEiovonizhKpo9VVS78TzFgxkIdrecRezsZ-1kYd_s1qDbxtkDEgfAITAG9LUnADun4vIcb6yelxk","dp":"G4sPXkc6Ya9y8oJW9_ILj4xuppu0lzi_H7VTkS8xj5SdX3coE0oimYwxIi2emTAue0UOa5dpgFGyBJ4c8tQ2VF402XRugKDTP8akYhFo5tAA77Qe_NmtuYZc3C3m3I24G2GvR5sSDxUyAN2zq8Lfn9EUms6rY3Ob8YeiKkTiBj0","dq":"s9lAH9fggBsoFR8Oac2R_E2gw282rT2kGOAhvIllETE1efrA6huUUvMfBcMpn8lqeW6vzznYY5SSQF7pMdC_agI3nG8Ibp1BUb0JUiraRNqUfLhcQb_d9GF4Dh7e74WbRsobRonujTYN1xCaP6TO61jvWrX-L18txXw494Q_cgk","qi":"GyM_p6JrXySiz1toFgKbWV-JdI3jQ4ypu9rbMWx3rQJBfmt0FoYzgUIZEVFEcOqwemRN81zoDAaa-Bk0KWNGDjJHZDdDmFhW3AN7lI-puxk_mHZGJ11rxyR8O55XLSe3SPmRfKwZI6yU24ZxvQKFYItdldUKGzO6Ia6zTKhAVRU"},{"kty":"oct","k":"GawgguFyGrWKav7AX4VKUg"},{"kid":"k3","d":"not-a-jwk-member"}]}"#;
        let out = redact_document(&r, text, &mut hits);
        let v: Value = serde_json::from_str(&out).expect("JSON");
        let keys = v["keys"].as_array().expect("keys");
        for m in ["d", "p", "q", "dp", "dq", "qi"] {
            assert_eq!(keys[0][m], "[REDACTED:jwk_private_key]", "{m}");
        }
        assert_eq!(keys[0]["e"], "AQAB");
        assert_eq!(keys[0]["kid"], "k1");
        assert!(keys[0]["n"].as_str().is_some_and(|n| n.starts_with("0vx7")));
        assert_eq!(keys[1]["k"], "[REDACTED:jwk_private_key]");
        assert_eq!(keys[2]["d"], "not-a-jwk-member");
        assert_eq!(hits.get(JWK_RULE).copied(), Some(7));
        let explained = explain(&r, text);
        assert_eq!(
            explained.iter().filter(|e| e.rule == JWK_RULE).count(),
            7,
            "{explained:?}"
        );
    }

    #[test]
    fn long_values_are_cut_after_redaction_with_size_and_digest() {
        let r = redactor(100);
        let mut s = format!("{} jane@example.com {}", "a".repeat(80), "é".repeat(60));
        let mut hits = Redactions::new();
        redact_string(&r, &mut s, &mut hits, 0);
        let redacted = s.clone();
        assert!(limit(&r, &mut s, &mut hits));
        use sha2::{Digest, Sha256};
        let digest = hex::encode(Sha256::digest(redacted.as_bytes()));
        assert!(s.ends_with(&format!(
            "…[TRUNCATED:original_bytes={},sha256={digest}]",
            redacted.len()
        )));
        assert!(!s.contains("jane@example.com"));
        assert_eq!(hits.get(TRUNCATED_RULE), Some(&1));
        assert_eq!(hits.get("email_address"), Some(&1));
        let mut short = "short".to_string();
        assert!(!limit(&r, &mut short, &mut hits));
    }

    #[test]
    fn key_rules_apply_inside_json_strings_and_clean_json_keeps_its_bytes() {
        let r = redactor(65536);
        let mut hits = Redactions::new();
        let mut s = "{\"user\": \"a\", \"api_key\": \"abc\", \"n\": [1, 2]}".to_string();
        assert!(redact_string(&r, &mut s, &mut hits, 0));
        // Key order and spacing as sent: only the value is replaced.
        assert_eq!(
            s,
            "{\"user\": \"a\", \"api_key\": \"[REDACTED:credential_key]\", \"n\": [1, 2]}"
        );
        let mut clean = "{\"user\": \"a\",  \"n\": [1, 2]}".to_string();
        assert!(!redact_string(&r, &mut clean, &mut hits, 0));
        assert_eq!(clean, "{\"user\": \"a\",  \"n\": [1, 2]}");
    }

    #[test]
    fn keys_past_the_first_few_are_judged_and_scanned_as_the_first_are() {
        // Records of more distinct keys than the walk keeps in its list: a key rule's key, a
        // key that is an e-mail address and a clean key come past them, in every record.
        let r = redactor(65536);
        let record = |secret: &str| {
            let mut members: Vec<String> = (0..FEW_KEYS + 2)
                .map(|k| format!("\"k{k}\": \"v{k}\""))
                .collect();
            members.push("\"jane.doe@example.com\": 1".to_string());
            members.push(format!("\"api_key\": \"{secret}\""));
            members.push("\"note\": \"plain\"".to_string());
            format!("{{{}}}", members.join(", "))
        };
        let records = |secret: &str| (0..3).map(|_| record(secret)).collect::<Vec<_>>();
        let mut s = format!("[{}]", records("abc").join(","));
        let expected = format!("[{}]", records("[REDACTED:credential_key]").join(","))
            .replace("jane.doe@example.com", "[REDACTED:email_address]");
        let mut hits = Redactions::new();
        assert!(redact_string(&r, &mut s, &mut hits, 0));
        assert_eq!(s, expected);
        assert_eq!(hits.get("credential_key"), Some(&3));
        assert_eq!(hits.get("email_address"), Some(&3));
    }

    #[test]
    fn tool_arguments_are_kept_as_sent_less_the_secrets() {
        let r = redactor(65536);
        let mut hits = Redactions::new();
        // Spacing, key order, an escaped slash and a non-ASCII escape as the executor wrote
        // them; only the e-mail address and the connection string's password go.
        let mut s = concat!(
            r#"{"to": "ana.silva@example.org",  "subject": "Q3 \/ refund \u00e9t\u00e9", "#,
            r#""amount_cents": 1200, "body": "db at postgres://app:Vq8#mZ2pL9x@db.internal:5432/orders"}"#
        )
        .to_string();
        assert!(redact_string(&r, &mut s, &mut hits, 0));
        assert_eq!(
            s,
            concat!(
                r#"{"to": "[REDACTED:email_address]",  "subject": "Q3 \/ refund \u00e9t\u00e9", "#,
                r#""amount_cents": 1200, "body": "db at postgres://app:[REDACTED:url_userinfo_password]@db.internal:5432/orders"}"#
            )
        );
        // A string that changes keeps its escapes before and after the change.
        let mut s = r#"{"log": "a\/b \u00e9 password=Vq8mZ2pL9xQ7 \/c"}"#.to_string();
        assert!(redact_string(&r, &mut s, &mut hits, 0));
        assert_eq!(
            s,
            r#"{"log": "a\/b \u00e9 password=[REDACTED:secret_key_assignment] \/c"}"#
        );
    }

    #[test]
    fn escaped_and_percent_encoded_text_keeps_its_encoding_around_what_goes() {
        let r = redactor(65536);
        let mut hits = Redactions::new();
        // A log line quoting a tool's arguments, JSON-escaped: matched unescaped, replaced
        // where it was written.
        let mut s = r#"calling tool with {\"password\": \"Vq8mZ2pL9xQ7\", \"path\": \"\/tmp\/x\"}"#
            .to_string();
        assert!(redact_string(&r, &mut s, &mut hits, 0));
        assert_eq!(
            s,
            r#"calling tool with {\"password\": \"[REDACTED:secret_key_assignment]\", \"path\": \"\/tmp\/x\"}"#
        );
        // Escaped twice: the raw text keeps both layers.
        let mut s = r#"log: {\\\"to\\\": \\\"ana.silva@example.org\\\"} \/ done"#.to_string();
        assert!(redact_string(&r, &mut s, &mut hits, 0));
        assert_eq!(
            s,
            r#"log: {\\\"to\\\": \\\"[REDACTED:email_address]\\\"} \/ done"#
        );
        // Percent-encoded: what the encoding hid goes, the rest stays encoded.
        let mut s = "next=%2Fhome&contact=ana.silva%40example.org&x=%2F".to_string();
        assert!(redact_string(&r, &mut s, &mut hits, 0));
        assert_eq!(s, "next=%2Fhome&contact=[REDACTED:email_address]&x=%2F");
    }

    #[test]
    fn a_secret_written_as_a_key_goes_as_one_in_a_value() {
        let r = redactor(65536);
        let mut hits = Redactions::new();
        let mut s = r#"{"AKIAZ3KQ9MX2PL7VR4TY": 1, "note": "x"}"#.to_string();
        assert!(redact_string(&r, &mut s, &mut hits, 0));
        assert_eq!(s, r#"{"[REDACTED:aws_access_key_id]": 1, "note": "x"}"#);
        let mut s = r#"{"by_user": {"ana.silva@example.org": {"visits": 3}}}"#.to_string();
        assert!(redact_string(&r, &mut s, &mut hits, 0));
        assert_eq!(
            s,
            r#"{"by_user": {"[REDACTED:email_address]": {"visits": 3}}}"#
        );
        let mut out = Redactions::new();
        assert_eq!(
            redact_document(&r, r#"[{"AKIAZ3KQ9MX2PL7VR4TY": true}]"#, &mut out),
            r#"[{"[REDACTED:aws_access_key_id]": true}]"#
        );
    }

    #[test]
    fn every_member_of_a_repeated_key_is_protected_where_it_stands() {
        let r = redactor(65536);
        let mut hits = Redactions::new();
        // A parser keeps the last "x"; read in place, the first is seen and protected too.
        let mut s = r#"{"x":"AKIAZ3KQ9MX2PL7VR4TY","x":"a","tokenizer":"cl100k"}"#.to_string();
        assert!(redact_string(&r, &mut s, &mut hits, 0));
        assert_eq!(
            s,
            r#"{"x":"[REDACTED:aws_access_key_id]","x":"a","tokenizer":"cl100k"}"#
        );
    }

    #[test]
    fn a_value_is_read_under_the_credential_its_sibling_names() {
        let r = redactor(65536);
        for (sent, kept) in [
            // Kubernetes and ECS environments, either member first.
            (
                r#"{"env":[{"name":"DB_PASSWORD","value":"Vd8kLm2Zqr"},{"name":"LOG_LEVEL","value":"debug"}]}"#,
                r#"{"env":[{"name":"DB_PASSWORD","value":"[REDACTED:credential_key]"},{"name":"LOG_LEVEL","value":"debug"}]}"#,
            ),
            (
                r#"[{"value": "Vd8kLm2Zqr", "name": "API_TOKEN"}]"#,
                r#"[{"value": "[REDACTED:credential_key]", "name": "API_TOKEN"}]"#,
            ),
            // CloudFormation parameters.
            (
                r#"{"Parameters":[{"ParameterKey":"MasterUserPassword","ParameterValue":"Vd8kLm2Zqr"}]}"#,
                r#"{"Parameters":[{"ParameterKey":"MasterUserPassword","ParameterValue":"[REDACTED:credential_key]"}]}"#,
            ),
            // Judged as under the name itself: a reference and a setting stay.
            (
                r#"{"name":"API_TOKEN","value":"${API_TOKEN}"}"#,
                r#"{"name":"API_TOKEN","value":"${API_TOKEN}"}"#,
            ),
            (
                r#"{"name":"password_policy","value":"Vd8kLm2Zqr"}"#,
                r#"{"name":"password_policy","value":"Vd8kLm2Zqr"}"#,
            ),
        ] {
            let mut s = sent.to_string();
            let mut hits = Redactions::new();
            redact_string(&r, &mut s, &mut hits, 0);
            assert_eq!(s, kept, "{sent}");
        }
    }

    #[test]
    fn a_plural_s_member_as_a_dotted_key_is_judged_under_the_plural() {
        let r = redactor(65536);
        let mut hits = Redactions::new();
        let mut s = r#"{"app.secrets.db": "Qz8vL2mTx9Kp4Rw7Yb3Nc6Jd", "app.secrets.enabled": "true", "app.tokens.backend": "kubernetes-vault", "app.items.db": "Qz8vL2mTx9Kp4Rw7Yb3Nc6Jd", "secrets.prod.stripe": "Vd8kLm2Zqr5Tx9Wb3Nc6", "items.prod.sku": "Vd8kLm2Zqr5Tx9Wb3Nc6"}"#.to_string();
        redact_string(&r, &mut s, &mut hits, 0);
        assert_eq!(
            s,
            r#"{"app.secrets.db": "[REDACTED:credential_key]", "app.secrets.enabled": "true", "app.tokens.backend": "kubernetes-vault", "app.items.db": "Qz8vL2mTx9Kp4Rw7Yb3Nc6Jd", "secrets.prod.stripe": "[REDACTED:credential_key]", "items.prod.sku": "Vd8kLm2Zqr5Tx9Wb3Nc6"}"#
        );
        let mut attrs = Attributes(vec![
            (
                "config.api_keys.openai".into(),
                AttrValue::Str("Qz8vL2mTx9Kp4Rw7Yb3Nc6Jd".into()),
            ),
            (
                "config.credentials.profile".into(),
                AttrValue::Str("production-eu-west".into()),
            ),
            ("gen_ai.usage.input_tokens".into(), AttrValue::Int(1234)),
            (
                "llm.tokens.model".into(),
                AttrValue::Str("gpt-4o-mini-2024-07-18".into()),
            ),
        ]);
        redact_attributes(&r, &mut attrs, &mut hits, 0);
        assert_eq!(
            attrs.0[0].1,
            AttrValue::Str("[REDACTED:credential_key]".into())
        );
        assert_eq!(attrs.0[1].1, AttrValue::Str("production-eu-west".into()));
        assert_eq!(attrs.0[2].1, AttrValue::Int(1234));
        assert_eq!(
            attrs.0[3].1,
            AttrValue::Str("gpt-4o-mini-2024-07-18".into())
        );
    }

    #[test]
    fn a_map_under_a_credential_names_plural_is_read_member_by_member() {
        let r = redactor(65536);
        for (sent, kept) in [
            // Credentials by service, environment or user.
            (
                r#"{"api_keys": {"openai": "Zr8kq2LmVx9wTz4Vb7Nc1Qd5", "serp": "3f9a1c7e5b2d8046"}}"#,
                r#"{"api_keys": {"openai": "[REDACTED:credential_key]", "serp": "[REDACTED:credential_key]"}}"#,
            ),
            (
                r#"{"tokens":{"github":"Xk9mP2qLw8rTz4Vb7Nc1","slack":"Vd8kLm2Zqr4T"}}"#,
                r#"{"tokens":{"github":"[REDACTED:credential_key]","slack":"[REDACTED:credential_key]"}}"#,
            ),
            (
                r#"{"apiKeys": {"stripe": "Vd8kLm2Zqr4T"}, "access_tokens": {"prod": "Vd8kLm2Zqr4T"}}"#,
                r#"{"apiKeys": {"stripe": "[REDACTED:credential_key]"}, "access_tokens": {"prod": "[REDACTED:credential_key]"}}"#,
            ),
            // A model's usage and a token's description are no map of credentials.
            (
                r#"{"tokens": {"input": 1234, "output": 567, "total": 1801}}"#,
                r#"{"tokens": {"input": 1234, "output": 567, "total": 1801}}"#,
            ),
            (
                r#"{"tokens": {"input": "1234", "output": "567"}}"#,
                r#"{"tokens": {"input": "1234", "output": "567"}}"#,
            ),
            (
                r#"{"tokens": {"model": "gpt-4o", "unit": "count", "kind": "prompt"}}"#,
                r#"{"tokens": {"model": "gpt-4o", "unit": "count", "kind": "prompt"}}"#,
            ),
            (
                r#"{"tokens": {"type": "bearer", "expires_in": 3600}}"#,
                r#"{"tokens": {"type": "bearer", "expires_in": 3600}}"#,
            ),
            // Design tokens and labels: short values, or words.
            (
                r##"{"tokens": {"primary": "blue", "spacing": "4px"}, "design_tokens": {"color": "#ff0000"}}"##,
                r##"{"tokens": {"primary": "blue", "spacing": "4px"}, "design_tokens": {"color": "#ff0000"}}"##,
            ),
            (
                r#"{"tokens": {"en": "Sign in", "fr": "Se connecter"}}"#,
                r#"{"tokens": {"en": "Sign in", "fr": "Se connecter"}}"#,
            ),
            // Settings' words, a colour and a font stack: short of the margin or the
            // length such members need.
            (
                r##"{"api_keys": {"backend": "kubernetes", "store": "aws-secretsmanager", "colorPrimary": "#0055ffcc", "fontFamily": "Inter,sans-serif"}}"##,
                r##"{"api_keys": {"backend": "kubernetes", "store": "aws-secretsmanager", "colorPrimary": "#0055ffcc", "fontFamily": "Inter,sans-serif"}}"##,
            ),
            // Neither is a plain `keys` map: a key is no credential by its name.
            (
                r#"{"keys": {"a": "b", "prod": "Zr8kq2LmVx9w"}}"#,
                r#"{"keys": {"a": "b", "prod": "Zr8kq2LmVx9w"}}"#,
            ),
        ] {
            let mut s = sent.to_string();
            let mut hits = Redactions::new();
            redact_string(&r, &mut s, &mut hits, 0);
            assert_eq!(s, kept, "{sent}");
        }
        let e = explain(
            &r,
            r#"{"api_keys": {"openai": "Zr8kq2LmVx9wTz4Vb7Nc1Qd5", "model": "gpt-4o"}}"#,
        );
        let removed: Vec<&str> = e
            .iter()
            .filter(|x| x.removed)
            .map(|x| x.path.as_str())
            .collect();
        assert_eq!(removed, ["$.api_keys.openai"]);
    }

    #[test]
    fn an_array_of_arguments_is_read_as_the_command_line_it_is() {
        let r = redactor(65536);
        for (sent, kept) in [
            // A flag and its value in items of their own, as subprocess calls, MCP servers'
            // `args` and container commands write them.
            (
                r#"{"command":"psql","args":["-h","db","-U","app","--password","Vd8kLm2Zqr"]}"#,
                r#"{"command":"psql","args":["-h","db","-U","app","--password","[REDACTED:cli_secret_flag]"]}"#,
            ),
            (
                r#"{"cmd": ["redis-cli", "-a", "Vd8kLm2Zqr", "ping"]}"#,
                r#"{"cmd": ["redis-cli", "-a", "[REDACTED:cli_password_client_flag]", "ping"]}"#,
            ),
            (
                r#"["mysql", "-u", "root", "-pVd8kLm2Zqr"]"#,
                r#"["mysql", "-u", "root", "-p[REDACTED:cli_password_short_flag]"]"#,
            ),
            // No keyword of the rule stands in the JSON text (`zip"`, not `zip `): the
            // document is read because a string in it is a flag.
            (
                r#"{"a":{"b":["zip","-r","x.zip","d","-P","Vd8kLm2Zqr"]}}"#,
                r#"{"a":{"b":["zip","-r","x.zip","d","-P","[REDACTED:cli_password_client_flag]"]}}"#,
            ),
            // Flags without secrets, and lists that are data, stay byte for byte.
            (
                r#"{"args": ["--verbose", "--output", "out.txt"], "tags": ["-x", "alpha"]}"#,
                r#"{"args": ["--verbose", "--output", "out.txt"], "tags": ["-x", "alpha"]}"#,
            ),
            (
                r#"{"words": ["password", "Vd8kLm2Zqr"]}"#,
                r#"{"words": ["password", "Vd8kLm2Zqr"]}"#,
            ),
        ] {
            let mut s = sent.to_string();
            let mut hits = Redactions::new();
            redact_string(&r, &mut s, &mut hits, 0);
            assert_eq!(s, kept, "{sent}");
        }
        // An attribute holding a process's arguments (`process.command_args`).
        let mut v = AttrValue::Array(
            ["sshpass", "-p", "Vd8kLm2Zqr", "ssh", "host"]
                .map(|t| AttrValue::Str(t.to_string()))
                .to_vec(),
        );
        let mut hits = Redactions::new();
        redact_value(&r, &mut v, &mut hits, 0);
        assert_eq!(
            v,
            AttrValue::Array(
                [
                    "sshpass",
                    "-p",
                    "[REDACTED:cli_password_short_flag]",
                    "ssh",
                    "host"
                ]
                .map(|t| AttrValue::Str(t.to_string()))
                .to_vec()
            )
        );
        assert_eq!(hits.get("cli_password_short_flag"), Some(&1));
        // --explain says where, under the item's path.
        let why = explain(&r, r#"{"args": ["-h", "db", "--password", "Vd8kLm2Zqr"]}"#);
        let found: Vec<(&str, &str, usize, usize)> = why
            .iter()
            .filter(|e| e.removed)
            .map(|e| (e.path.as_str(), e.rule.as_str(), e.start, e.end))
            .collect();
        assert_eq!(found, [("$.args[3]", "cli_secret_flag", 0, 10)]);
    }

    #[test]
    fn escaped_keys_and_repeated_keys_do_not_hide_credentials() {
        let r = redactor(65536);
        let mut hits = Redactions::new();
        let mut s = r#"{"p\u0061ssword":"correct horse battery staple"}"#.to_string();
        assert!(redact_string(&r, &mut s, &mut hits, 0));
        assert_eq!(s, r#"{"p\u0061ssword":"[REDACTED:credential_key]"}"#);
        let mut s = r#"{"a":{"password":"correct horse"},"a":1}"#.to_string();
        assert!(redact_string(&r, &mut s, &mut hits, 0));
        assert_eq!(s, r#"{"a":{"password":"[REDACTED:credential_key]"},"a":1}"#);
        // A document with nothing to remove is left as sent.
        let mut s = r#"{"a":{"b":1},"c":[{"b":2},{"b":3}]}"#.to_string();
        assert!(!redact_string(&r, &mut s, &mut hits, 0));
        assert_eq!(s, r#"{"a":{"b":1},"c":[{"b":2},{"b":3}]}"#);
    }

    #[test]
    fn credential_named_keys_take_literals_but_not_counts_names_references_or_prose() {
        let r = redactor(65536);
        let mut hits = Redactions::new();
        let mut s = concat!(
            "{\"adafruit_token\": \"ebasw54jg6ue6lljjutg6sinj8cu9nlt\", ",
            "\"token_url\": \"https://auth.example.com/oauth/token\", ",
            "\"tokenizer\": \"cl100k_base\", \"db_pwd\": \"${DB_PWD}\", ",
            "\"refreshTokenNote\": \"rotate it every week\", \"input_tokens\": 1200}"
        )
        .to_string();
        assert!(redact_string(&r, &mut s, &mut hits, 0));
        let v: Value = serde_json::from_str(&s).expect("json");
        assert_eq!(v["adafruit_token"], "[REDACTED:credential_key]");
        assert_eq!(v["token_url"], "https://auth.example.com/oauth/token");
        assert_eq!(v["tokenizer"], "cl100k_base");
        assert_eq!(v["db_pwd"], "${DB_PWD}");
        assert_eq!(v["refreshTokenNote"], "rotate it every week");
        assert_eq!(v["input_tokens"], 1200);
        assert_eq!(hits.get("credential_key"), Some(&1));
    }

    #[test]
    fn detectors_scoped_to_keys_scan_only_those_values() {
        let cfg = RedactionConfig {
            detectors: vec![crate::protect::rules::DetectorSpec {
                id: "order_ref".into(),
                description: "order references in tool results only".into(),
                regex: r"\bORD-\d{6}\b".into(),
                keywords: vec!["ord-".into()],
                group: 0,
                alternate_groups: Vec::new(),
                validator: None,
                action: Action::Mask,
                skip_placeholders: false,
                min_digits: 0,
                signals: Vec::new(),
                keys: vec!["*result".into()],
                except_keys: vec!["tool.debug.result".into()],
                except_context: Vec::new(),
                judged: false,
                gate: None,
            }],
            ..Default::default()
        };
        let r = Redactor::new(&cfg, KeyedHasher::new(b"k")).expect("rules");
        let mut hits = Redactions::new();
        let mut s =
            "{\"tool\": {\"result\": \"ORD-123456\", \"note\": \"ORD-123456\"}}".to_string();
        assert!(redact_string(&r, &mut s, &mut hits, 0));
        assert_eq!(
            s,
            "{\"tool\": {\"result\": \"[REDACTED:order_ref]\", \"note\": \"ORD-123456\"}}"
        );
        let mut attrs = Attributes(vec![
            ("tool.result".into(), AttrValue::Str("ORD-123456".into())),
            (
                "tool.debug.result".into(),
                AttrValue::Str("ORD-123456".into()),
            ),
        ]);
        redact_attributes(&r, &mut attrs, &mut hits, 0);
        assert_eq!(attrs.0[0].1, AttrValue::Str("[REDACTED:order_ref]".into()));
        assert_eq!(attrs.0[1].1, AttrValue::Str("ORD-123456".into()));
        let mut free = "see ORD-123456".to_string();
        assert!(!redact_string(&r, &mut free, &mut hits, 0));
    }

    #[test]
    fn escaped_and_percent_encoded_secrets_are_found() {
        let r = redactor(65536);
        let mut hits = Redactions::new();
        let mut s = "args={\\\"password\\\": \\\"c0rrect-h0rse\\\"}".to_string();
        assert!(redact_string(&r, &mut s, &mut hits, 0));
        assert!(!s.contains("c0rrect-h0rse"), "{s}");
        let mut url = "https://x.example/cb?next=%2Fhome%3Ftoken%3DZk3q9XbT2mLw8RvN".to_string();
        assert!(redact_string(&r, &mut url, &mut hits, 0));
        assert!(!url.contains("Zk3q9XbT2mLw8RvN"), "{url}");
    }

    #[test]
    fn base64_wrapped_secrets_are_found_and_plain_base64_is_kept() {
        use base64::Engine;
        let r = redactor(65536);
        let enc = |t: &str| base64::engine::general_purpose::STANDARD.encode(t);
        let mut hits = Redactions::new();
        let mut s = format!("blob {} end", enc("db password: c0rrect-h0rse-battery"));
        assert!(redact_string(&r, &mut s, &mut hits, 0));
        assert_eq!(s, format!("blob [REDACTED:{BASE64_RULE}] end"));
        assert_eq!(hits.get("secret_key_assignment"), Some(&1));
        // Twice encoded, inside JSON.
        let mut j =
            serde_json::json!({ "payload": enc(&enc("mail jane@example.com please")) }).to_string();
        assert!(redact_string(&r, &mut j, &mut hits, 0));
        assert!(j.contains(BASE64_RULE), "{j}");
        let mut ordinary = format!("data {}", enc("hello world, this is ordinary text"));
        let before = ordinary.clone();
        assert!(!redact_string(&r, &mut ordinary, &mut hits, 0));
        assert_eq!(ordinary, before);
    }

    #[test]
    fn truncate_key_rule_keeps_a_redacted_prefix() {
        let cfg: RedactionConfig = toml::from_str(
            "[[key_rules]]\nid = \"big_output\"\nkeys = [\"tool.output\"]\naction = \"truncate\"\nkeep_bytes = 40\n",
        )
        .expect("config");
        let r = Redactor::new(&cfg, KeyedHasher::new(b"k")).expect("rules");
        let mut attrs = Attributes(vec![(
            "tool.output".into(),
            AttrValue::Str(format!("mail jane@example.com {}", "x ".repeat(100))),
        )]);
        let mut hits = Redactions::new();
        redact_attributes(&r, &mut attrs, &mut hits, 0);
        let AttrValue::Str(out) = &attrs.0[0].1 else {
            panic!("string expected");
        };
        assert!(
            out.starts_with("mail [REDACTED:email_address] x x"),
            "{out}"
        );
        assert!(out.contains("…[TRUNCATED:original_bytes="), "{out}");
        assert_eq!(hits.get("big_output"), Some(&1));
        assert_eq!(hits.get(TRUNCATED_RULE), Some(&1));
        let bad: RedactionConfig =
            toml::from_str("[[detectors]]\nid = \"d\"\nregex = \"x\"\naction = \"truncate\"\n")
                .expect("config");
        assert!(Redactor::new(&bad, KeyedHasher::new(b"k")).is_err());
    }

    #[test]
    fn too_deep_and_binary_values_are_removed_whole() {
        let r = redactor_at_depth(3);
        let mut hits = Redactions::new();
        let mut deep = AttrValue::Str("x".into());
        for _ in 0..6 {
            deep = AttrValue::Array(vec![deep]);
        }
        redact_value(&r, &mut deep, &mut hits, 0);
        assert!(serde_json::to_string(&deep)
            .unwrap_or_default()
            .contains(MAX_DEPTH_RULE));
        let mut bin = AttrValue::Bytes(vec![0xff, 0xfe, 0x00]);
        redact_value(&r, &mut bin, &mut hits, 0);
        assert_eq!(
            bin,
            AttrValue::Str(format!("[REDACTED:{BINARY_RULE}] 3 bytes"))
        );
        let mut text = AttrValue::Bytes(b"mail jane@example.com".to_vec());
        redact_value(&r, &mut text, &mut hits, 0);
        assert_eq!(text, AttrValue::Str("mail [REDACTED:email_address]".into()));
    }

    #[test]
    fn every_value_of_a_list_goes_not_every_second_one() {
        // The byte after one value is the byte before the next: each detector whose regex
        // reads it on both sides kept the second value of `a,b` (and of every pair after).
        let r = redactor(4096);
        let lists = [
            ("jane@example.com", "bob@example.org", "email_address"),
            (
                "AKIAZ3KQ9MX2PL7VR4TY",
                "AKIAQW7RT2YU4IO6PA3S",
                "aws_access_key_id",
            ),
            (
                "4111 1111 1111 1111",
                "5500 0000 0000 0004",
                "payment_card_number",
            ),
            ("10.20.30.40", "10.20.30.41", "ipv4_address"),
            (
                "415-555-0132",
                "415-555-0199",
                "phone_number_north_american",
            ),
            (
                "+44 20 7946 0958",
                "+44 20 7946 0959",
                "phone_number_international",
            ),
            ("536-22-8741", "536-22-8742", "us_social_security_number"),
            ("GB82WEST12345698765432", "DE89370400440532013000", "iban"),
        ];
        for (a, b, rule) in lists {
            for sep in [",", ";", "|"] {
                let mut hits = Redactions::new();
                let mut s = format!("{a}{sep}{b}{sep}{a}");
                redact_string(&r, &mut s, &mut hits, 0);
                let gone = format!("[REDACTED:{rule}]");
                assert_eq!(s, [gone.as_str(); 3].join(sep), "{a}{sep}{b}");
                assert_eq!(hits.get(rule), Some(&3), "{a}{sep}{b}");
            }
        }
        // Numbers in a JSON array are separated by a comma alone.
        let mut hits = Redactions::new();
        let doc = "[4111111111111111,5500000000000004]";
        assert_eq!(
            redact_document(&r, doc, &mut hits),
            "[\"[REDACTED:payment_card_number]\",\"[REDACTED:payment_card_number]\"]"
        );
    }

    #[test]
    fn a_secret_learned_in_a_document_goes_where_it_is_seen_bare_later_in_it() {
        // The survey's marks are made before the first value is read: a value learned while
        // reading (the password of the first member) is looked up in every later value.
        use crate::protect::learned::{self, LearnedConfig, LearnedValues};
        let r = redactor(4096);
        let store = LearnedValues::new(LearnedConfig::default());
        let doc = r#"{"cmd": "login password=Zx9qLm2Vb7wQ", "note": "it was Zx9qLm2Vb7wQ"}"#;
        let (out, _) = learned::with_scope(store.scope("t"), || {
            redact_document(&r, doc, &mut Redactions::new())
        });
        assert_eq!(
            out,
            r#"{"cmd": "login password=[REDACTED:secret_key_assignment]", "note": "it was [REDACTED:learned:secret_key_assignment]"}"#
        );
    }

    #[test]
    fn base64_text_of_a_secret_learned_after_it_goes_too() {
        // The first value is base64 of readable text that holds the password only once the
        // second value has taught it: no survey mark points at it, and the second base64
        // pass over the document (kept because the survey met readable base64) removes it.
        use crate::protect::learned::{self, LearnedConfig, LearnedValues};
        let r = redactor(4096);
        let store = LearnedValues::new(LearnedConfig::default());
        let doc = r#"{"a": "dGhlIHZhbHVlIGlzIFp4OXFMbTJWYjd3UQ", "b": "password=Zx9qLm2Vb7wQ"}"#;
        let (out, _) = learned::with_scope(store.scope("t"), || {
            let mut s = doc.to_string();
            redact_string(&r, &mut s, &mut Redactions::new(), 0);
            s
        });
        assert_eq!(
            out,
            r#"{"a": "[REDACTED:base64_encoded]", "b": "password=[REDACTED:secret_key_assignment]"}"#
        );
    }

    #[test]
    fn a_document_whose_only_finding_ends_a_sentence_or_is_percent_encoded_is_not_clean() {
        // The survey that finds a document clean reads the same findings as a scan of each
        // string: a dotted quad or phone number before the closing quote (as at the end of
        // the string), and what percent-encoding hides. Both were kept when alone.
        let r = redactor(4096);
        let cases = [
            (
                r#"{"ip": "at 10.20.30.40."}"#,
                r#"{"ip": "at [REDACTED:ipv4_address]."}"#,
            ),
            (
                r#"{"call": "415-555-0132."}"#,
                r#"{"call": "[REDACTED:phone_number_north_american]."}"#,
            ),
            (
                r#"{"to": "jane.doe%40example.com"}"#,
                r#"{"to": "[REDACTED:email_address]"}"#,
            ),
        ];
        for (doc, want) in cases {
            let mut hits = Redactions::new();
            assert_eq!(redact_document(&r, doc, &mut hits), want);
            let mut s = doc.to_string();
            assert!(redact_string(&r, &mut s, &mut Redactions::new(), 0));
            assert_eq!(s, want);
        }
    }
}

#[cfg(test)]
mod json_in_place_properties {
    use super::*;
    use crate::protect::rules::RedactionConfig;
    use crate::protect::KeyedHasher;
    use proptest::prelude::*;

    /// Documents of harmless keys and values (no rule's keyword, shape or key name), with
    /// secrets planted in some strings: `None` leaves, `Some(i)` the i-th secret.
    fn document() -> impl Strategy<Value = serde_json::Value> {
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::Bool),
            (-99_999i64..99_999).prop_map(|n| serde_json::json!(n)),
            "[a-z /é\n]{0,10}".prop_map(serde_json::Value::String),
            (
                prop_oneof![
                    Just("AKIAZ3KQ9MX2PL7VR4TY"),
                    Just("AKIAQW7RT2YU4IO6PA3S"),
                    Just("AKIA5J6K7L2M3N4B5V6C")
                ],
                "[a-z/é]{0,6}"
            )
                .prop_map(|(key, word)| {
                    serde_json::Value::String(format!("{word} {key} {word}"))
                }),
        ];
        leaf.prop_recursive(4, 40, 5, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..5).prop_map(serde_json::Value::Array),
                proptest::collection::btree_map(
                    prop_oneof![
                        Just("name"),
                        Just("city"),
                        Just("note"),
                        Just("items"),
                        Just("n"),
                        // A secret as a key.
                        Just("AKIAQW7RT2YU4IO6PA3S")
                    ],
                    inner,
                    0..5
                )
                .prop_map(|m| serde_json::Value::Object(
                    m.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
                )),
            ]
        })
    }

    /// Text of every kind a value's scan acts on: secrets with and without keywords,
    /// personal data of every gated shape (a dotted quad ending a sentence, digits that are
    /// not ASCII, separators that are), assignments the key-context judgment reads, a
    /// password seen bare again, base64 and percent-encoded findings, harmless ids, dates
    /// and hex.
    const FRAGMENTS: &[&str] = &[
        "order",
        "status ok",
        "2026-11-30T05:17:14.133Z",
        "ORD-00012345",
        "9e3779b97f4a7c15f39cc0605cedc834",
        "v1.2.3",
        "12:30:45",
        "AKIAZ3KQ9MX2PL7VR4TY",
        "ghp_T3stOnlyT0ken7f3a9c2e1d5b8a4c6e0f2d9",
        "sk-proj-T3stOnlyN0tAR3alK3yAbCdEfGhIjKlMnOpQrStUvWxYz012345",
        "jane.doe@example.com",
        "jane.doe%40example.com",
        "+1 415 555 0132",
        "415-555-0132",
        "4111 1111 1111 1111",
        "DE89 3704 0044 0532 0130 00",
        "536-22-8741",
        "10.20.30.40.",
        "fe80::1ff:fe23:4567:890a",
        "+١ ٤١٥ ٥٥٥ ٠١٣٢",
        "415\u{2009}555\u{2009}0132",
        "password=Zx9qLm2Vb7wQ",
        "Zx9qLm2Vb7wQ",
        "token: Rt5yU8iO1pA3sD6fG7hJ",
        "cGFzc3dvcmQ9Wng5cUxtMlZiN3dRIGFuZCBtb3Jl",
        // Readable text holding the password above bare: a finding only once it is learned.
        "dGhlIHZhbHVlIGlzIFp4OXFMbTJWYjd3UQ",
        "q8Zr2LmX4vT9wK1pq8Zr2LmX4vT9wK1p",
        "Authorization: Bearer abcDEF123456ghiJKL789mno",
        "tel",
        "--password",
        "-v",
        "ghp_ and sk- are prefixes",
        "é ü",
    ];

    /// Documents whose strings join one to three [`FRAGMENTS`], under harmless, credential
    /// and secret keys, with long numbers (a card number) among them.
    fn busy_document() -> impl Strategy<Value = serde_json::Value> {
        let fragment = proptest::sample::select(FRAGMENTS);
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            prop_oneof![
                Just(4111111111111111i64),
                Just(5360000),
                Just(-12),
                Just(4_155_550_132)
            ]
            .prop_map(|n| serde_json::json!(n)),
            (
                proptest::collection::vec(fragment, 1..4),
                prop_oneof![Just(" "), Just(""), Just("="), Just(": "), Just(",")]
            )
                .prop_map(|(parts, sep)| serde_json::Value::String(parts.join(sep))),
        ];
        leaf.prop_recursive(3, 40, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..6).prop_map(serde_json::Value::Array),
                proptest::collection::btree_map(
                    prop_oneof![
                        Just("note"),
                        Just("n"),
                        Just("token"),
                        Just("password"),
                        Just("data"),
                        Just("AKIAQW7RT2YU4IO6PA3S"),
                        Just("jane.doe@example.com"),
                    ],
                    inner,
                    0..6
                )
                .prop_map(|m| serde_json::Value::Object(
                    m.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
                )),
            ]
        })
    }

    /// `text` protected in place with a fresh learning scope, as the survey says (`marked`:
    /// not at all when clean, else the values its marks overlap) or scanning every value: the
    /// text out, the counts, how many values were learned.
    /// With `hits_known` false, the values' scans pass over their text for keywords and
    /// shapes instead of replaying the survey's.
    fn protect_knowing(
        r: &Redactor,
        text: &str,
        marked: bool,
        hits_known: bool,
    ) -> (String, Redactions, u64) {
        in_fresh_scope(|hits| {
            let Ok(doc) = json_text::read(text, usize::MAX) else {
                return String::new();
            };
            // Both ways survey the document: what the base64 test learns, both have learned.
            // Marked, a document the survey finds clean is not read at all.
            let attention = match survey(r, text, None) {
                Survey::Clean if marked => return text.to_string(),
                Survey::Scan { attention: a, .. } if marked && hits_known => a,
                Survey::Scan { attention: a, .. } if marked => a.without_keyword_hits(),
                _ => Attention::everywhere(),
            };
            let edits = json_edits(r, text, &doc, hits, 1, &attention);
            json_text::splice(text, edits)
        })
    }

    #[test]
    fn a_base64_token_before_the_one_that_teaches_its_secret_goes_too() {
        let r = &*REDACTOR;
        let b64 = |t: &str| {
            use base64::Engine;
            base64::engine::general_purpose::STANDARD_NO_PAD.encode(t)
        };
        let text = format!(
            "{} {}",
            b64("the value is Zx9qLm2Vb7wQ"),
            b64("password=Zx9qLm2Vb7wQ and more")
        );
        let (out, _, learned) = in_fresh_scope(|hits| {
            let mut s = text.clone();
            redact_string(r, &mut s, hits, 0);
            s
        });
        assert_eq!(out, "[REDACTED:base64_encoded] [REDACTED:base64_encoded]");
        assert_eq!(learned, 1);
    }

    /// What `protect` makes of a text in a learning scope of its own: the text, the counts it
    /// made, how many values the scope learned.
    fn in_fresh_scope(
        protect: impl FnOnce(&mut Redactions) -> String,
    ) -> (String, Redactions, u64) {
        use crate::protect::learned::{self, LearnedConfig, LearnedValues};
        let store = LearnedValues::new(LearnedConfig::default());
        let (out, _) = learned::with_scope(store.scope("t"), || {
            let mut hits = Redactions::new();
            let text = protect(&mut hits);
            (text, hits, learned::learned_in_scope())
        });
        out
    }

    /// One redactor for every case: building the catalogue is most of a case's time.
    static REDACTOR: std::sync::LazyLock<Redactor> = std::sync::LazyLock::new(|| {
        Redactor::new(&RedactionConfig::default(), KeyedHasher::new(b"k")).expect("rules")
    });

    fn written(v: &serde_json::Value, style: u8) -> String {
        let text = match style % 3 {
            0 => v.to_string(),
            1 => serde_json::to_string_pretty(v).unwrap_or_default(),
            _ => v
                .to_string()
                .replace(',', " ,\n  ")
                .replace("\":", "\" :  "),
        };
        if style >= 3 {
            text.replace('/', "\\/").replace('é', "\\u00e9")
        } else {
            text
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// Any range of unescaped text maps back to the raw bytes that unescape to it, one
        /// layer or two.
        #[test]
        fn a_decoded_range_maps_to_the_raw_bytes_it_came_from(
            parts in proptest::collection::vec(
                prop_oneof!["[a-zé ]{1,4}", Just("\\n".to_string()), Just("\\\"".to_string()),
                    Just("\\u00e9".to_string()), Just("\\\\".to_string()), Just("\\/".to_string()),
                    Just("\\\\\\\"".to_string()), Just("%41".to_string())],
                1..24,
            ),
            cut in any::<(usize, usize)>(),
        ) {
            let raw: String = parts.concat();
            if let Some(layers) = json_unescaped(&raw) {
                let text = layers.text();
                let bounds: Vec<usize> = (0..=text.len()).filter(|&i| text.is_char_boundary(i)).collect();
                let (a, b) = (bounds[cut.0 % bounds.len()], bounds[cut.1 % bounds.len()]);
                let range = a.min(b)..a.max(b);
                let back = layers.to_raw(range.clone());
                let again = json_unescaped(&raw[back.clone()])
                    .map_or_else(|| raw[back.clone()].to_string(), |l| l.text().to_string());
                prop_assert_eq!(&again, &text[range], "{:?} {:?}", raw, back);
            }
            if let Some(d) = percent_decoded(&raw) {
                let bounds: Vec<usize> = (0..=d.text.len()).filter(|&i| d.text.is_char_boundary(i)).collect();
                let (a, b) = (bounds[cut.0 % bounds.len()], bounds[cut.1 % bounds.len()]);
                let back = d.range_to_raw(a.min(b)..a.max(b));
                let again = percent_decoded(&raw[back.clone()]).map_or_else(|| raw[back.clone()].to_string(), |x| x.text);
                prop_assert_eq!(&again, &d.text[a.min(b)..a.max(b)]);
            }
        }

        /// A JSON document comes out byte for byte as it went in, less exactly the planted
        /// secrets, each replaced where it stood.
        #[test]
        fn only_the_removed_bytes_change(v in document(), style in 0u8..6) {
            let r = &*REDACTOR;
            let text = written(&serde_json::json!({ "items": [v] }), style);
            let mut out = text.clone();
            let mut hits = Redactions::new();
            let changed = redact_string(r, &mut out, &mut hits, 0);
            let secrets: Vec<&str> = text
                .match_indices("AKIA")
                .map(|(at, _)| &text[at..at + 20])
                .collect();
            let mut want = text.clone();
            for s in &secrets {
                want = want.replace(s, "[REDACTED:aws_access_key_id]");
            }
            prop_assert_eq!(changed, !secrets.is_empty());
            prop_assert_eq!(&out, &want);
            prop_assert!(serde_json::from_str::<serde_json::Value>(&out).is_ok());
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(3000))]

        /// Leaving a document the survey finds clean as it is, and else scanning only the
        /// values its marks overlap, protects every document exactly as scanning every
        /// value: the same bytes out, the same counts, the same values learned (a secret
        /// removed early in the document and seen bare later in it included), whatever the
        /// fragments, keys, escapes and layout. So does a marked value's scan that replays
        /// the survey's keyword hits and shapes inside it instead of passing over it again.
        #[test]
        fn values_left_unmarked_hold_nothing_a_scan_would_find(
            v in busy_document(),
            style in 0u8..6,
        ) {
            let r = &*REDACTOR;
            let text = written(&v, style);
            let every = protect_knowing(r, &text, false, false);
            let marked = protect_knowing(r, &text, true, false);
            let replayed = protect_knowing(r, &text, true, true);
            prop_assert_eq!(&marked, &every, "{}", text);
            prop_assert_eq!(&replayed, &every, "replayed: {}", text);
        }
    }

    /// `text` protected whole with a fresh learning scope: by [`redact_string`], or (`always`)
    /// with the document's base64 tokens read again after its values, as before the survey
    /// said when none can hide anything.
    fn protect_whole(r: &Redactor, text: &str, always: bool) -> (String, Redactions, u64) {
        in_fresh_scope(|hits| {
            let mut s = text.to_string();
            if always {
                redact_plain_and_structured(r, &mut s, hits, 0, None);
                redact_base64(r, &mut s, hits, 0, None, BASE64_LAYERS);
            } else {
                redact_string(r, &mut s, hits, 0);
            }
            s
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1000))]

        /// Skipping the document's second base64 pass when its survey met no token that
        /// decodes to anything changes nothing: the same bytes, counts and learned values.
        #[test]
        fn a_document_without_readable_base64_needs_no_second_base64_pass(
            v in busy_document(),
            style in 0u8..6,
        ) {
            let r = &*REDACTOR;
            let text = written(&v, style);
            let (skipped, skipped_hits, skipped_learned) = protect_whole(r, &text, false);
            let (read, read_hits, read_learned) = protect_whole(r, &text, true);
            prop_assert_eq!(&skipped, &read, "{}", text);
            prop_assert_eq!(skipped_hits, read_hits);
            prop_assert_eq!(skipped_learned, read_learned);
        }
    }
}
