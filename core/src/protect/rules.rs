//! Redaction rules as configured: the `[redaction]` section of the config.

use serde::{Deserialize, Serialize};

use super::validators::Validator;

/// What to do with what a rule found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Replace with `[REDACTED:<rule-id>]`.
    #[default]
    Mask,
    /// Replace with `hmac:<key-id>:<hex>` under toolwatch's key (joinable, not readable).
    Hash,
    /// Remove the attribute (key rules only).
    Drop,
    /// Keep the first `keep_bytes` of the (redacted) value and record its original size and
    /// SHA-256 (key rules only), for large values that are useful but need not be whole.
    Truncate,
}

/// A value detector.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DetectorSpec {
    /// Stable id: it appears in archive rows and metric labels.
    pub id: String,
    /// One line saying what it finds.
    #[serde(default)]
    pub description: String,
    /// The regex (Rust `regex` syntax).
    pub regex: String,
    /// Keywords (case-insensitive); the detector runs only on text containing one. Empty:
    /// always runs.
    #[serde(default)]
    pub keywords: Vec<String>,
    /// Capture group to replace (0 = the whole match).
    #[serde(default)]
    pub group: usize,
    /// Groups that stand in for `group` when it takes no part in a match (the other sides of
    /// an alternation, each with its own group): the first of them that does is replaced.
    /// Empty: a match without `group` is skipped.
    #[serde(default)]
    pub alternate_groups: Vec<usize>,
    /// Optional check of the matched text.
    #[serde(default)]
    pub validator: Option<Validator>,
    /// What to do with a match.
    #[serde(default)]
    pub action: Action,
    /// Skip matches that are placeholders (`xxxx…`, `${TOKEN}`, `<password>`); off for
    /// personal data, where a repeated digit is still a number.
    #[serde(default = "yes")]
    pub skip_placeholders: bool,
    /// Run only on text holding at least this many digits (a cheap gate for numeric rules
    /// without keywords).
    #[serde(default)]
    pub min_digits: usize,
    /// Signals the detector applies to (`traces`, `logs`); empty: both.
    #[serde(default)]
    pub signals: Vec<SignalName>,
    /// Attribute or JSON keys (globs) whose values the detector scans; empty: every value.
    /// Inside JSON the key is the innermost object key above the value. Free text with no
    /// key (span names, log bodies) is scanned only when this is empty.
    #[serde(default)]
    pub keys: Vec<String>,
    /// Keys (globs) whose values the detector never scans.
    #[serde(default)]
    pub except_keys: Vec<String>,
    /// Globs over the matched text before the capture group (for `key = value` rules: the
    /// key, with trailing quotes, spaces and operators trimmed) that cancel a match, so
    /// `credentialsId = …` or `token_url = …` is not taken for a credential.
    #[serde(default)]
    pub except_context: Vec<String>,
    /// Built in only: the detector is the key-context judgment ([`super::key_context`]) over
    /// its keywords' hits, not its regex (which only names the keywords).
    #[serde(skip)]
    pub judged: bool,
    /// Built in only: a cheap shape the text must hold before the regex runs
    /// ([`super::shape`]), for personal data without keywords.
    #[serde(skip)]
    pub gate: Option<super::shape::ShapeGate>,
}

/// A signal a rule can be scoped to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SignalName {
    /// Spans, their events and links.
    Traces,
    /// Log records.
    Logs,
}

/// Rules added to (or removed from) the defaults for one tenant.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TenantOverride {
    /// Rule ids switched off for this tenant (built-in or configured).
    pub disabled_rules: Vec<String>,
    /// Extra detectors for this tenant.
    pub detectors: Vec<DetectorSpec>,
    /// Extra key rules for this tenant.
    pub key_rules: Vec<KeyRuleSpec>,
    /// Extra allowed keys for this tenant.
    pub allow_keys: Vec<String>,
    /// Extra allowed values for this tenant.
    pub allow_values: Vec<String>,
}

fn yes() -> bool {
    true
}

/// A key rule: attribute (or JSON object) keys whose whole value is removed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyRuleSpec {
    /// Stable id.
    pub id: String,
    /// One line saying what it covers.
    #[serde(default)]
    pub description: String,
    /// Key names or globs (`*` matches any run of characters), case-insensitive.
    pub keys: Vec<String>,
    /// What to do with the value.
    #[serde(default)]
    pub action: Action,
    /// Bytes kept by the `truncate` action.
    #[serde(default = "default_keep_bytes")]
    pub keep_bytes: usize,
    /// Keys (globs) the rule does not cover although `keys` matches them
    /// (`*token*` but not `*_url`).
    #[serde(default)]
    pub except_keys: Vec<String>,
    /// Fire only when a string value passes this validator (`secret_like` for keys that
    /// only sometimes hold credentials); other values are scanned by the detectors as usual.
    #[serde(default)]
    pub when: Option<Validator>,
    /// Built in only: the rule covers the keys [`super::key_context::classify_key`] puts in
    /// this class (its `keys` are empty) and fires on the values the judgment removes.
    #[serde(skip)]
    pub judged: Option<super::key_context::KeyClass>,
}

fn default_keep_bytes() -> usize {
    256
}

/// The `[redaction]` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RedactionConfig {
    /// Use the built-in catalogue of detectors and key rules.
    pub default_rules: bool,
    /// Ids of built-in rules to switch off (e.g. `ipv4_address`).
    pub disabled_rules: Vec<String>,
    /// Extra detectors.
    pub detectors: Vec<DetectorSpec>,
    /// Extra key rules.
    pub key_rules: Vec<KeyRuleSpec>,
    /// Keys never touched (globs): ids, codes, counters.
    pub allow_keys: Vec<String>,
    /// Exact values never redacted (known false positives).
    pub allow_values: Vec<String>,
    /// Deepest nesting examined (attribute lists, JSON); anything deeper is removed whole.
    pub max_depth: usize,
    /// Longest string kept, in bytes, after redaction; longer values (tool arguments and
    /// results above all) are cut there and end with their original size and SHA-256.
    pub max_value_bytes: usize,
    /// Per-tenant changes to the rules, by tenant id.
    pub tenants: std::collections::BTreeMap<String, TenantOverride>,
    /// Values removed once and removed wherever they come again (per tenant, bounded).
    pub learned: super::learned::LearnedConfig,
}

impl RedactionConfig {
    /// The rules for one tenant: the defaults with the tenant's override applied.
    pub fn for_tenant(&self, tenant: &str) -> RedactionConfig {
        let mut c = self.clone();
        c.tenants.clear();
        if let Some(o) = self.tenants.get(tenant) {
            c.detectors.extend(o.detectors.iter().cloned());
            c.key_rules.extend(o.key_rules.iter().cloned());
            c.allow_keys.extend(o.allow_keys.iter().cloned());
            c.allow_values.extend(o.allow_values.iter().cloned());
            // Switching off a configured (not built-in) rule removes it here.
            c.detectors.retain(|d| !o.disabled_rules.contains(&d.id));
            c.key_rules.retain(|k| !o.disabled_rules.contains(&k.id));
            c.disabled_rules.extend(
                o.disabled_rules
                    .iter()
                    .filter(|id| {
                        !self.detectors.iter().any(|d| &d.id == *id)
                            && !self.key_rules.iter().any(|k| &k.id == *id)
                            && !o.detectors.iter().any(|d| &d.id == *id)
                    })
                    .cloned(),
            );
        }
        c
    }

    /// The rules that apply to one signal.
    pub fn for_signal(&self, signal: SignalName) -> RedactionConfig {
        let mut c = self.clone();
        c.detectors
            .retain(|d| d.signals.is_empty() || d.signals.contains(&signal));
        c
    }
}

impl Default for RedactionConfig {
    fn default() -> Self {
        RedactionConfig {
            default_rules: true,
            disabled_rules: Vec::new(),
            detectors: Vec::new(),
            key_rules: Vec::new(),
            allow_keys: [
                "executor.effect_class",
                "executor.policy_decision",
                "executor.policy_reason",
                "executor.result_code",
                "executor.stop_reason",
                "executor.confirmation_status",
                "executor.retry_attempt",
                "executor.timeout_ms",
                "executor.result_bytes",
                "gen_ai.usage.*",
                "gen_ai.operation.name",
                "gen_ai.provider.name",
                "gen_ai.system",
                "gen_ai.request.model",
                "gen_ai.response.model",
                "gen_ai.tool.name",
                "service.name",
                "service.version",
                "telemetry.sdk.*",
                // Alarm ids are toolwatch's own hashes (16 hex digits): one that happens to be
                // all decimal and pass Luhn read as a card number in a second toolwatch.
                "toolwatch.alarm.id",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect(),
            allow_values: Vec::new(),
            max_depth: 16,
            max_value_bytes: 65536,
            tenants: Default::default(),
            learned: Default::default(),
        }
    }
}

/// A glob over keys: `*` matches any run of characters; matching ignores ASCII case.
#[derive(Debug, Clone)]
pub struct KeyGlob {
    parts: Vec<String>,
    anchored_start: bool,
    anchored_end: bool,
}

impl KeyGlob {
    /// Compiles a glob.
    pub fn new(pattern: &str) -> KeyGlob {
        let lower = pattern.to_ascii_lowercase();
        KeyGlob {
            anchored_start: !lower.starts_with('*'),
            anchored_end: !lower.ends_with('*'),
            parts: lower
                .split('*')
                .filter(|p| !p.is_empty())
                .map(str::to_string)
                .collect(),
        }
    }

    /// The literal parts a matching key must contain; empty for `*`, which matches anything.
    pub fn literals(&self) -> &[String] {
        &self.parts
    }

    /// True when `key` matches.
    pub fn matches(&self, key: &str) -> bool {
        self.matches_lowercase(&key.to_ascii_lowercase())
    }

    /// True when `key`, already ASCII-lowercased, matches (callers lowercase once for many
    /// globs).
    pub fn matches_lowercase(&self, key: &str) -> bool {
        let mut rest = key;
        if self.parts.is_empty() {
            // "*" matches anything; "" matches only "".
            return !self.anchored_start || key.is_empty();
        }
        for (i, part) in self.parts.iter().enumerate() {
            let first = i == 0;
            let last = i == self.parts.len() - 1;
            if first && self.anchored_start {
                if !rest.starts_with(part.as_str()) {
                    return false;
                }
                rest = &rest[part.len()..];
                if last && self.anchored_end {
                    return rest.is_empty();
                }
                continue;
            }
            if last && self.anchored_end {
                return rest.ends_with(part.as_str());
            }
            match find_short(rest.as_bytes(), part.as_bytes()) {
                Some(pos) => rest = &rest[pos + part.len()..],
                None => return false,
            }
        }
        !self.anchored_end || rest.is_empty()
    }
}

/// Substring search for the short needles of key globs; `str::find` builds a two-way
/// searcher per call, which costs more than the search itself on keys this short.
fn find_short(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.len() > hay.len() {
        return None;
    }
    let first = needle[0];
    (0..=hay.len() - needle.len()).find(|&i| hay[i] == first && &hay[i..i + needle.len()] == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        let g = |p: &str, k: &str| KeyGlob::new(p).matches(k);
        assert!(g("*password*", "db.PASSWORD.value"));
        assert!(g("*password*", "password"));
        assert!(!g("*password*", "passwd"));
        assert!(g("*.api_key", "openai.api_key"));
        assert!(!g("*.api_key", "api_key"));
        assert!(g("set-cookie", "Set-Cookie"));
        assert!(!g("set-cookie", "set-cookie2"));
        assert!(g("gen_ai.usage.*", "gen_ai.usage.input_tokens"));
        assert!(g("a*b*c", "axxbyyc"));
        assert!(!g("a*b*c", "axxbyy"));
        assert!(g("*", "anything"));
        assert!(g("token", "TOKEN"));
        assert!(!g("token", "input_tokens"));
    }
}
