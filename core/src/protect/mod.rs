//! Protect: what must never be stored, forwarded or logged is removed here.
//!
//! Every event passes through [`Protector::protect`] after normalization and before any
//! other stage sees it. It replaces idempotency keys with a keyed HMAC (`hmac:<key-id>:<hex>`,
//! equal keys stay joinable without being readable), and applies the redaction rules
//! ([`engine::Redactor`]: key rules, value detectors, allowlists) to every string of the item:
//! resource, scope, span and log attributes at any depth, span names, status messages, event
//! and link attributes, log bodies, the free-text typed fields, and JSON inside strings. Each
//! item records which rules fired and how often, never what they removed.

pub mod attention;
pub mod block_classes;
pub mod catalogue;
pub mod confirmation;
pub mod engine;
pub mod group_place;
pub mod json_text;
pub mod judgment;
pub mod key_context;
pub mod keywords;
pub mod lanes;
pub mod learned;
pub mod required_byte;
pub mod rules;
pub mod shape;
pub mod trail;
pub mod training;
pub mod validators;
pub mod walk;

use std::io::Write;
use std::path::{Path, PathBuf};

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;

use crate::event::{
    AttrValue, Attributes, AuditFields, EventBatch, GenAiFields, LogRecord, Redactions, Resource,
    Scope, SpanRecord,
};
use engine::Redactor;
use learned::{LearnedValues, TenantScope};

/// The attribute that carries an idempotency key on the wire.
const IDEMPOTENCY_KEY: &str = "executor.idempotency_key";

/// Why the protection key could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The key file could not be read or created.
    #[error("hash key file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The key does not hold 64 hex digits.
    #[error("hash key {path} must hold 64 hex digits (a 32-byte key)")]
    Malformed {
        /// The file.
        path: PathBuf,
    },
}

/// Where the hashing key comes from: the `[hashing]` section of the config.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HashingConfig {
    /// Environment variable holding the key (64 hex digits); used when set and not empty.
    pub key_env: String,
    /// File holding the key (64 hex digits); must exist when named. Empty: the key is
    /// `<data_dir>/state/hash.key`, created (mode 0600) on first start and reused.
    pub key_file: String,
    /// Files of keys used before a rotation, so `toolwatch hash-key` can still produce the
    /// hashes they made.
    pub previous_key_files: Vec<String>,
}

impl HashingConfig {
    /// The current key.
    pub fn current(&self, data_dir: &Path) -> Result<KeyedHasher, KeyError> {
        if !self.key_env.is_empty() {
            if let Ok(v) = std::env::var(&self.key_env) {
                if !v.is_empty() {
                    return KeyedHasher::from_hex(&v, &format!("${}", self.key_env));
                }
            }
        }
        if !self.key_file.is_empty() {
            return KeyedHasher::load(Path::new(&self.key_file));
        }
        KeyedHasher::load_or_create(&default_key_file(data_dir))
    }

    /// The current key, never created: for commands that must hash as the daemon did (a
    /// new key would make hashes the archive cannot hold). `Ok(None)` when no key is
    /// configured and none is at the daemon's default place under `data_dir`.
    pub fn existing(&self, data_dir: &Path) -> Result<Option<KeyedHasher>, KeyError> {
        let configured = !self.key_env.is_empty() || !self.key_file.is_empty();
        if !configured && !default_key_file(data_dir).exists() {
            return Ok(None);
        }
        self.current(data_dir).map(Some)
    }

    /// The keys used before a rotation.
    pub fn previous(&self) -> Result<Vec<KeyedHasher>, KeyError> {
        self.previous_key_files
            .iter()
            .map(|f| KeyedHasher::load(Path::new(f)))
            .collect()
    }
}

/// Where the daemon keeps its key when none is configured.
pub fn default_key_file(data_dir: &Path) -> PathBuf {
    data_dir.join("state").join("hash.key")
}

/// HMAC-SHA256 under toolwatch's own key.
#[derive(Clone)]
pub struct KeyedHasher {
    key: Vec<u8>,
    key_id: String,
    /// The MAC keyed and fed the secret trail's domain: each fingerprint starts from a copy
    /// (keying hashes two blocks, more than a short secret costs).
    trail: Option<Hmac<Sha256>>,
}

impl KeyedHasher {
    /// A hasher with the given key; the key id is derived from the key, so a rotated key is
    /// visible in every hash it produced.
    pub fn new(key: &[u8]) -> KeyedHasher {
        let digest = Sha256::digest(key);
        let trail = Hmac::<Sha256>::new_from_slice(key).ok().map(|mut mac| {
            mac.update(b"toolwatch.secret-trail\0");
            mac
        });
        KeyedHasher {
            key: key.to_vec(),
            key_id: hex::encode(&digest[..4]),
            trail,
        }
    }

    /// A key given as 64 hex digits; `origin` names where it came from in errors.
    pub fn from_hex(text: &str, origin: &str) -> Result<KeyedHasher, KeyError> {
        hex::decode(text.trim())
            .ok()
            .filter(|k| k.len() == 32)
            .map(|k| KeyedHasher::new(&k))
            .ok_or_else(|| KeyError::Malformed {
                path: PathBuf::from(origin),
            })
    }

    /// Loads the key from `path`, which must exist.
    pub fn load(path: &Path) -> Result<KeyedHasher, KeyError> {
        let text = std::fs::read_to_string(path).map_err(|source| KeyError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        KeyedHasher::from_hex(&text, &path.display().to_string())
    }

    /// The key id that prefixes every hash.
    pub fn key_id(&self) -> &str {
        &self.key_id
    }

    /// Loads the key from `path`, creating a random one (mode 0600) if the file is absent.
    pub fn load_or_create(path: &Path) -> Result<KeyedHasher, KeyError> {
        let io = |source| KeyError::Io {
            path: path.to_path_buf(),
            source,
        };
        match std::fs::read_to_string(path) {
            Ok(text) => {
                let key = hex::decode(text.trim())
                    .ok()
                    .filter(|k| k.len() == 32)
                    .ok_or_else(|| KeyError::Malformed {
                        path: path.to_path_buf(),
                    })?;
                Ok(KeyedHasher::new(&key))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if let Some(dir) = path.parent() {
                    std::fs::create_dir_all(dir).map_err(io)?;
                }
                let key: [u8; 32] = rand::random();
                let mut opts = std::fs::OpenOptions::new();
                opts.write(true).create_new(true);
                #[cfg(unix)]
                {
                    use std::os::unix::fs::OpenOptionsExt;
                    opts.mode(0o600);
                }
                let mut f = opts.open(path).map_err(io)?;
                f.write_all(hex::encode(key).as_bytes()).map_err(io)?;
                f.sync_all().map_err(io)?;
                Ok(KeyedHasher::new(&key))
            }
            Err(e) => Err(io(e)),
        }
    }

    /// A 64-bit keyed fingerprint of a removed secret, for matching the same secret across
    /// the spans of one request (`schemas/findings.md`, `secret_in_outbound_call`); domain
    /// separated from [`KeyedHasher::hash`], so it never equals part of an idempotency hash.
    pub fn fingerprint(&self, value: &str) -> u64 {
        let Some(mut mac) = self.trail.clone() else {
            return 0;
        };
        mac.update(value.as_bytes());
        let b = mac.finalize().into_bytes();
        u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]])
    }

    /// `hmac:<key-id>:<hex>` of `value`.
    pub fn hash(&self, value: &str) -> String {
        let mut mac = match Hmac::<Sha256>::new_from_slice(&self.key) {
            Ok(m) => m,
            // HMAC accepts keys of any length; this branch cannot be taken.
            Err(_) => return format!("hmac:{}:unavailable", self.key_id),
        };
        mac.update(value.as_bytes());
        format!(
            "hmac:{}:{}",
            self.key_id,
            hex::encode(mac.finalize().into_bytes())
        )
    }
}

/// The compiled rules for the two signals.
#[derive(Clone)]
struct RuleSet {
    traces: Arc<Redactor>,
    logs: Arc<Redactor>,
}

impl RuleSet {
    fn compile(
        config: &rules::RedactionConfig,
        hasher: &KeyedHasher,
    ) -> Result<RuleSet, engine::RuleError> {
        use rules::SignalName;
        let (for_traces, for_logs) = (
            config.for_signal(SignalName::Traces),
            config.for_signal(SignalName::Logs),
        );
        let traces = Arc::new(Redactor::new(&for_traces, hasher.clone())?);
        // Unless some detector is limited to one signal, both signals have the same rules:
        // compiled once (a third of a second of start-up each), one redactor for both.
        let logs = if for_logs == for_traces {
            Arc::clone(&traces)
        } else {
            Arc::new(Redactor::new(&for_logs, hasher.clone())?)
        };
        Ok(RuleSet { traces, logs })
    }
}

/// The protect stage.
#[derive(Clone)]
pub struct Protector {
    default: RuleSet,
    tenants: Arc<HashMap<String, RuleSet>>,
    /// What each tenant learned (shared by every clone of the protector).
    learned: Arc<LearnedValues>,
}

/// Redacted copies of the resources and scopes of one batch, shared by its items (per rule
/// set: items of different tenants may share a resource).
#[derive(Default)]
struct SharedParts {
    // Keyed by addresses, looked up once per item: foldhash, not SipHash.
    resources: crate::maps::FastMap<
        (*const Resource, *const Redactor, usize),
        (Arc<Resource>, Redactions),
    >,
    scopes: crate::maps::FastMap<(*const Scope, *const Redactor, usize), (Arc<Scope>, Redactions)>,
    /// The learning scope of the item being protected (its index in [`BatchScopes`]): a
    /// resource shared by two tenants is protected once for each, so learned values never
    /// cross tenants.
    scope: usize,
}

/// The learning scopes of one batch, one per tenant named in it.
struct BatchScopes {
    scopes: Vec<Option<TenantScope>>,
    /// Tenant names come from payloads: the project's fast seeded map, not SipHash.
    by_tenant: crate::maps::FastMap<String, usize>,
}

impl BatchScopes {
    fn index(&mut self, learned: &LearnedValues, tenant: &str) -> usize {
        if let Some(&i) = self.by_tenant.get(tenant) {
            return i;
        }
        self.scopes.push(Some(learned.scope(tenant)));
        self.by_tenant
            .insert(tenant.to_string(), self.scopes.len() - 1);
        self.scopes.len() - 1
    }

    /// Learns the raw idempotency keys of an item before anything of the batch is examined.
    fn learn_keys<'a>(
        &mut self,
        i: usize,
        audit: &AuditFields,
        attrs: impl IntoIterator<Item = &'a Attributes>,
    ) {
        let Some(Some(scope)) = self.scopes.get_mut(i) else {
            return;
        };
        if let Some(raw) = &audit.idempotency_key {
            scope.learn(learned::IDEMPOTENCY_RULE, raw);
        }
        for a in attrs {
            for (key, value) in &a.0 {
                if key == IDEMPOTENCY_KEY {
                    if let AttrValue::Str(raw) = value {
                        scope.learn(learned::IDEMPOTENCY_RULE, raw);
                    }
                }
            }
        }
    }

    /// Runs `f` with scope `i` as the thread's learning scope.
    fn run<R>(&mut self, i: usize, f: impl FnOnce() -> R) -> R {
        let scope = self
            .scopes
            .get_mut(i)
            .and_then(Option::take)
            .unwrap_or_default();
        let (out, scope) = learned::with_scope(scope, f);
        if let Some(slot) = self.scopes.get_mut(i) {
            *slot = Some(scope);
        }
        out
    }
}

/// What protecting one batch did.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ProtectReport {
    /// How often each rule fired, across the batch.
    pub hits: Redactions,
    /// Items quarantined, by (signal, reason).
    pub quarantined: std::collections::BTreeMap<(&'static str, &'static str), u64>,
}

impl ProtectReport {
    /// Records one item's outcome (`None`: protection failed); true to keep the item.
    fn settle(
        &mut self,
        signal: &'static str,
        outcome: Option<Redactions>,
        keep: impl FnOnce(Redactions),
    ) -> bool {
        let Some(hits) = outcome else {
            *self
                .quarantined
                .entry((signal, QUARANTINE_FAILED))
                .or_default() += 1;
            return false;
        };
        for reason in [walk::MAX_DEPTH_RULE, walk::BINARY_RULE] {
            if hits.contains_key(reason) {
                *self.quarantined.entry((signal, reason)).or_default() += 1;
            }
        }
        add_hits(&mut self.hits, &hits);
        keep(hits);
        true
    }
}

/// Quarantine reason of an item whose protection failed; it is dropped, never stored raw.
pub const QUARANTINE_FAILED: &str = "protect_failed";

/// Adds one item's rule counts to a running total.
pub(crate) fn add_hits(into: &mut Redactions, from: &Redactions) {
    for (rule, n) in from {
        *into.entry(rule.clone()).or_insert(0) += n;
    }
}

impl Protector {
    /// A protector applying `redactor`'s rules to every tenant and signal.
    pub fn new(redactor: Redactor) -> Protector {
        let r = Arc::new(redactor);
        Protector {
            default: RuleSet {
                traces: Arc::clone(&r),
                logs: r,
            },
            tenants: Arc::default(),
            learned: Arc::new(LearnedValues::new(learned::LearnedConfig::default())),
        }
    }

    /// A protector with the configured rules: per signal, and per tenant where the config
    /// overrides them. Refuses rules that do not compile, naming the rule (and tenant).
    pub fn from_config(
        config: &rules::RedactionConfig,
        hasher: KeyedHasher,
    ) -> Result<Protector, engine::RuleError> {
        let default = RuleSet::compile(config, &hasher)?;
        let mut tenants = HashMap::new();
        for tenant in config.tenants.keys() {
            let set = RuleSet::compile(&config.for_tenant(tenant), &hasher).map_err(|e| {
                engine::RuleError::Tenant {
                    tenant: tenant.clone(),
                    source: Box::new(e),
                }
            })?;
            tenants.insert(tenant.clone(), set);
        }
        Ok(Protector {
            default,
            tenants: Arc::new(tenants),
            learned: Arc::new(LearnedValues::new(config.learned.clone())),
        })
    }

    /// A protector with `config`'s rules and `hasher`'s key that keeps what this one's
    /// tenants learned (and its learning settings, which change only at a restart).
    pub fn reconfigured(
        &self,
        config: &rules::RedactionConfig,
        hasher: KeyedHasher,
    ) -> Result<Protector, engine::RuleError> {
        let fresh = Protector::from_config(config, hasher)?;
        Ok(Protector {
            learned: Arc::clone(&self.learned),
            ..fresh
        })
    }

    /// What the tenants have learned, in counts (for `/metrics`).
    pub fn learned_stats(&self) -> Arc<learned::LearnedStats> {
        Arc::clone(&self.learned.stats)
    }

    fn rules_for(&self, tenant: &str) -> &RuleSet {
        self.tenants.get(tenant).unwrap_or(&self.default)
    }

    /// Protects a batch in place; returns how often each rule fired across the batch and
    /// which items were quarantined.
    ///
    /// Fail closed: a value the stage cannot examine (nested past `max_depth`, bytes that are
    /// not text) is replaced where it stands and its item counted as quarantined under that
    /// reason; an item whose protection fails outright (a bug: a panic inside the rules) is
    /// removed from the batch, counted under `protect_failed`, and never stored or forwarded.
    pub fn protect(&self, batch: &mut EventBatch) -> ProtectReport {
        let mut shared = SharedParts::default();
        let mut report = ProtectReport::default();
        let mut scopes = BatchScopes {
            scopes: Vec::new(),
            by_tenant: crate::maps::map(),
        };
        // Each item's scope, by the tenant it names before protect; raw idempotency keys are
        // learned first, so an echo anywhere in the batch is caught.
        let span_scopes: Vec<usize> = batch
            .spans
            .iter()
            .map(|s| {
                let i = scopes.index(&self.learned, &s.tenant);
                // Chained, not collected: this runs for every span of every batch.
                let attrs = [&s.attributes, &s.resource.attributes]
                    .into_iter()
                    .chain(s.events.iter().map(|e| &e.attributes))
                    .chain(s.links.iter().map(|l| &l.attributes));
                scopes.learn_keys(i, &s.audit, attrs);
                i
            })
            .collect();
        let log_scopes: Vec<usize> = batch
            .logs
            .iter()
            .map(|l| {
                let i = scopes.index(&self.learned, &l.tenant);
                scopes.learn_keys(i, &l.audit, [&l.attributes, &l.resource.attributes]);
                i
            })
            .collect();
        let mut next = span_scopes.into_iter();
        batch.spans.retain_mut(|span| {
            let r = &*self.rules_for(&span.tenant).traces;
            shared.scope = next.next().unwrap_or_default();
            let outcome = scopes.run(shared.scope, || {
                catch_unwind(AssertUnwindSafe(|| self.protect_span(r, span, &mut shared)))
            });
            report.settle("traces", outcome.ok(), |hits| span.redactions = hits)
        });
        let mut next = log_scopes.into_iter();
        batch.logs.retain_mut(|log| {
            let r = &*self.rules_for(&log.tenant).logs;
            shared.scope = next.next().unwrap_or_default();
            let outcome = scopes.run(shared.scope, || {
                catch_unwind(AssertUnwindSafe(|| self.protect_log(r, log, &mut shared)))
            });
            report.settle("logs", outcome.ok(), |hits| log.redactions = hits)
        });
        for scope in scopes.scopes.into_iter().flatten() {
            self.learned.merge(scope);
        }
        report
    }

    fn protect_span(
        &self,
        r: &Redactor,
        span: &mut SpanRecord,
        shared: &mut SharedParts,
    ) -> Redactions {
        let mut hits = Redactions::new();
        // Before anything is removed: the digest a confirmation should bind, and values that
        // earlier tool results of the request taught.
        let mut derived = confirmation::Derived::before(span);
        // The tenant names folders, metric labels and alarms: it is scanned like any field.
        walk::redact_string(r, &mut span.tenant, &mut hits, 0);
        self.protect_audit(r, &mut span.audit, &mut hits);
        self.protect_attributes(r, &mut span.attributes);
        // URLs and request headers are what a span sends out: on the secret trail.
        let (_, sent) = trail::collect(trail::Side::SentInAttributes, r.hasher(), || {
            walk::redact_attributes(r, &mut span.attributes, &mut hits, 0)
        });
        derived.add(trail::Side::Sent, sent);
        for text in [&mut span.name, &mut span.status_message] {
            walk::redact_string(r, text, &mut hits, 0);
            walk::limit(r, text, &mut hits);
        }
        let tool = span.class == crate::event::SpanClass::Tool;
        protect_gen_ai(r, &mut span.gen_ai, &mut hits, tool.then_some(&mut derived));
        for e in &mut span.events {
            self.protect_attributes(r, &mut e.attributes);
            walk::redact_string(r, &mut e.name, &mut hits, 0);
            walk::redact_attributes(r, &mut e.attributes, &mut hits, 0);
        }
        for l in &mut span.links {
            self.protect_attributes(r, &mut l.attributes);
            walk::redact_attributes(r, &mut l.attributes, &mut hits, 0);
        }
        self.protect_shared(r, &mut span.resource, &mut span.scope, shared, &mut hits);
        derived.after(&mut span.attributes);
        hits
    }

    fn protect_log(
        &self,
        r: &Redactor,
        log: &mut LogRecord,
        shared: &mut SharedParts,
    ) -> Redactions {
        let mut hits = Redactions::new();
        walk::redact_string(r, &mut log.tenant, &mut hits, 0);
        self.protect_audit(r, &mut log.audit, &mut hits);
        self.protect_attributes(r, &mut log.attributes);
        walk::redact_attributes(r, &mut log.attributes, &mut hits, 0);
        walk::redact_value(r, &mut log.body, &mut hits, 0);
        walk::redact_string(r, &mut log.event_name, &mut hits, 0);
        self.protect_shared(r, &mut log.resource, &mut log.scope, shared, &mut hits);
        hits
    }

    fn protect_audit(&self, r: &Redactor, audit: &mut AuditFields, hits: &mut Redactions) {
        if let Some(raw) = audit.idempotency_key.take() {
            audit.idempotency_key_hash = Some(r.hasher().hash(&raw));
        }
        // Codes (effect class, decisions, result codes, stop reasons) are not free text.
        for field in [
            &mut audit.request_id,
            &mut audit.claimed_tenant,
            &mut audit.principal_id,
            &mut audit.resource_id,
            &mut audit.resource_version,
            &mut audit.tool_version,
            &mut audit.tool_schema_version,
            &mut audit.prompt_version,
            &mut audit.confirmation_digest,
        ] {
            walk::redact_field(r, field, hits);
        }
    }

    /// An idempotency key that did not land in the typed field (repeated, not text, or on
    /// an event, link or resource) is hashed where it stands.
    fn protect_attributes(&self, r: &Redactor, attrs: &mut Attributes) {
        for (key, value) in &mut attrs.0 {
            if key == IDEMPOTENCY_KEY {
                let raw = match &*value {
                    AttrValue::Str(s) => s.clone(),
                    other => serde_json::to_string(other).unwrap_or_default(),
                };
                *value = AttrValue::Str(r.hasher().hash(&raw));
            }
        }
    }

    /// Resources and scopes are shared by the items of a batch: each is protected once, and
    /// its findings are counted on every item that carries it.
    fn protect_shared(
        &self,
        r: &Redactor,
        resource: &mut Arc<Resource>,
        scope: &mut Arc<Scope>,
        shared: &mut SharedParts,
        hits: &mut Redactions,
    ) {
        let key = (Arc::as_ptr(resource), r as *const Redactor, shared.scope);
        let (protected, found) = shared.resources.entry(key).or_insert_with(|| {
            let mut res = (**resource).clone();
            let mut found = Redactions::new();
            self.protect_attributes(r, &mut res.attributes);
            walk::redact_attributes(r, &mut res.attributes, &mut found, 0);
            walk::redact_string(r, &mut res.service_name, &mut found, 0);
            (Arc::new(res), found)
        });
        *resource = Arc::clone(protected);
        add_hits(hits, found);
        let key = (Arc::as_ptr(scope), r as *const Redactor, shared.scope);
        let (protected, found) = shared.scopes.entry(key).or_insert_with(|| {
            let mut sc = (**scope).clone();
            let mut found = Redactions::new();
            walk::redact_attributes(r, &mut sc.attributes, &mut found, 0);
            (Arc::new(sc), found)
        });
        *scope = Arc::clone(protected);
        add_hits(hits, found);
    }
}

/// The GenAI fields as sent. Identifiers (models, provider, tool name) are scanned too: they
/// become metric labels and alarm budget names, and an executor can put anything in them; a
/// real model or tool name matches no rule. A tool call's arguments and result are protected
/// with the secret trail collected (`derived`: tool spans only).
fn protect_gen_ai(
    r: &Redactor,
    g: &mut GenAiFields,
    hits: &mut Redactions,
    derived: Option<&mut confirmation::Derived>,
) {
    for field in [
        &mut g.operation,
        &mut g.provider,
        &mut g.request_model,
        &mut g.response_model,
        &mut g.tool_name,
        &mut g.tool_type,
        &mut g.finish_reasons,
        &mut g.mcp_method,
        &mut g.response_id,
        &mut g.conversation_id,
        &mut g.agent_id,
        &mut g.agent_name,
        &mut g.tool_call_id,
        &mut g.mcp_session_id,
    ] {
        walk::redact_field(r, field, hits);
    }
    match derived {
        Some(d) => {
            for (side, field) in [
                (trail::Side::Sent, &mut g.tool_arguments),
                (trail::Side::Returned, &mut g.tool_result),
            ] {
                let (_, fps) =
                    trail::collect(side, r.hasher(), || walk::redact_field(r, field, hits));
                d.add(side, fps);
            }
        }
        None => {
            walk::redact_field(r, &mut g.tool_arguments, hits);
            walk::redact_field(r, &mut g.tool_result, hits);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_item_whose_protection_fails_is_dropped_and_counted() {
        let mut report = ProtectReport::default();
        assert!(!report.settle("logs", None, |_| panic!("a failed item is not kept")));
        let mut kept = None;
        let hits = Redactions::from([(walk::MAX_DEPTH_RULE.to_string(), 2)]);
        assert!(report.settle("traces", Some(hits), |h| kept = Some(h)));
        assert_eq!(
            report.quarantined.get(&("logs", QUARANTINE_FAILED)),
            Some(&1)
        );
        assert_eq!(
            report.quarantined.get(&("traces", walk::MAX_DEPTH_RULE)),
            Some(&1)
        );
        assert_eq!(report.hits.get(walk::MAX_DEPTH_RULE), Some(&2));
        assert!(kept.is_some());
    }

    #[test]
    fn a_fingerprint_is_the_hmac_of_the_trail_domain_and_the_value() {
        let h = KeyedHasher::new(b"k1");
        let mut mac = Hmac::<Sha256>::new_from_slice(b"k1").expect("any key length");
        mac.update(b"toolwatch.secret-trail\0hunter22");
        let b = mac.finalize().into_bytes();
        let want = u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]);
        assert_eq!(h.fingerprint("hunter22"), want);
        assert_eq!(h.clone().fingerprint("hunter22"), want);
        assert_ne!(KeyedHasher::new(b"k2").fingerprint("hunter22"), want);
    }

    #[test]
    fn hash_is_keyed_stable_and_hides_the_value() {
        let a = KeyedHasher::new(b"k1");
        let b = KeyedHasher::new(b"k2");
        let h = a.hash("order-123");
        assert_eq!(h, a.hash("order-123"));
        assert_ne!(h, b.hash("order-123"));
        assert!(h.starts_with(&format!("hmac:{}:", a.key_id)));
        assert!(!h.contains("order-123"));
        assert_eq!(h.len(), "hmac:".len() + 8 + 1 + 64);
    }

    #[test]
    fn idempotency_keys_are_hashed_wherever_they_stand() {
        use crate::event::{SpanEventRecord, SpanRecord};
        let raw = |v: &str| {
            (
                "executor.idempotency_key".to_string(),
                AttrValue::Str(v.into()),
            )
        };
        let hasher = KeyedHasher::new(b"k");
        let resource = Arc::new(Resource {
            service_name: "s".into(),
            attributes: Attributes(vec![raw("idem-res")]),
        });
        let span = SpanRecord {
            resource: Arc::clone(&resource),
            class: crate::event::SpanClass::Tool,
            audit: AuditFields {
                idempotency_key: Some("idem-typed".into()),
                ..Default::default()
            },
            attributes: Attributes(vec![
                raw("idem-repeated"),
                ("executor.idempotency_key".into(), AttrValue::Int(42)),
            ]),
            events: vec![SpanEventRecord {
                time_ns: 0,
                name: "e".into(),
                attributes: Attributes(vec![raw("idem-event")]),
            }],
            ..crate::event::fixtures::span()
        };
        let mut batch = EventBatch {
            spans: vec![span.clone(), span],
            logs: vec![],
        };
        let redactor = Redactor::new(&rules::RedactionConfig::default(), hasher.clone())
            .expect("default rules compile");
        Protector::new(redactor).protect(&mut batch);
        let s = &batch.spans[1];
        assert_eq!(s.audit.idempotency_key, None);
        assert_eq!(
            s.audit.idempotency_key_hash,
            Some(hasher.hash("idem-typed"))
        );
        assert_eq!(
            s.attributes.0[0].1,
            AttrValue::Str(hasher.hash("idem-repeated"))
        );
        assert_eq!(s.attributes.0[1].1, AttrValue::Str(hasher.hash("42")));
        assert_eq!(
            s.events[0].attributes.0[0].1,
            AttrValue::Str(hasher.hash("idem-event"))
        );
        for s in &batch.spans {
            assert_eq!(
                s.resource.attributes.0[0].1,
                AttrValue::Str(hasher.hash("idem-res"))
            );
        }
    }

    /// Rules the same for both signals are compiled once and shared; a detector limited to
    /// one signal gives each its own.
    #[test]
    fn both_signals_share_one_redactor_unless_their_rules_differ() {
        let shared =
            Protector::from_config(&rules::RedactionConfig::default(), KeyedHasher::new(b"k"))
                .expect("compiles");
        assert!(Arc::ptr_eq(&shared.default.traces, &shared.default.logs));
        let cfg: rules::RedactionConfig = toml::from_str(
            "[[detectors]]\nid = \"order_ref\"\nregex = 'ORD-\\d{8}'\nsignals = [\"logs\"]\n",
        )
        .expect("config");
        let apart = Protector::from_config(&cfg, KeyedHasher::new(b"k")).expect("compiles");
        assert!(!Arc::ptr_eq(&apart.default.traces, &apart.default.logs));
    }

    #[test]
    fn tenant_overrides_and_signal_scopes_pick_the_rules() {
        use crate::event::{LogRecord, SpanRecord};
        let toml_text = r#"
            [[detectors]]
            id = "order_ref"
            regex = 'ORD-\d{8}'
            keywords = ["ord-"]
            signals = ["logs"]
            [tenants.quiet]
            disabled_rules = ["email_address", "order_ref"]
            [tenants.strict]
            key_rules = [{ id = "customer_field", keys = ["customer.*"], action = "hash" }]
        "#;
        let cfg: rules::RedactionConfig = toml::from_str(toml_text).expect("config");
        let p = Protector::from_config(&cfg, KeyedHasher::new(b"k")).expect("compiles");
        let text = "mail a.b@example.com about ORD-12345678";
        let span = |tenant: &str| {
            let mut s: SpanRecord = crate::event::fixtures::span();
            s.tenant = tenant.into();
            s.name = text.into();
            s.attributes = Attributes(vec![("customer.id".into(), AttrValue::Str("c-991".into()))]);
            s
        };
        let log = |tenant: &str| {
            let mut l: LogRecord = crate::event::fixtures::log();
            l.tenant = tenant.into();
            l.body = AttrValue::Str(text.into());
            l
        };
        let mut batch = EventBatch {
            spans: vec![span("other"), span("quiet"), span("strict")],
            logs: vec![log("other"), log("quiet")],
        };
        p.protect(&mut batch);
        // The logs-only detector does not touch spans; e-mail is masked except for "quiet".
        assert_eq!(
            batch.spans[0].name,
            "mail [REDACTED:email_address] about ORD-12345678"
        );
        assert_eq!(batch.spans[1].name, text);
        assert_eq!(
            batch.logs[0].body,
            AttrValue::Str("mail [REDACTED:email_address] about [REDACTED:order_ref]".into())
        );
        assert_eq!(batch.logs[1].body, AttrValue::Str(text.into()));
        // "strict" hashes customer fields; others keep them.
        assert_eq!(
            batch.spans[0].attributes.0[0].1,
            AttrValue::Str("c-991".into())
        );
        assert_eq!(
            batch.spans[2].attributes.0[0].1,
            AttrValue::Str(KeyedHasher::new(b"k").hash("c-991"))
        );
        let bad: rules::RedactionConfig =
            toml::from_str("[tenants.x]\ndetectors = [{ id = \"b\", regex = \"(\" }]")
                .expect("config");
        let err = Protector::from_config(&bad, KeyedHasher::new(b"k"))
            .err()
            .expect("refused");
        assert!(
            err.to_string()
                .starts_with("redaction.tenants.x: redaction rule b: invalid regex"),
            "{err}"
        );
    }

    #[test]
    fn an_alarm_id_that_looks_like_a_card_number_stays() {
        use crate::event::LogRecord;
        let p = Protector::from_config(&rules::RedactionConfig::default(), KeyedHasher::new(b"k"))
            .expect("default rules");
        // 16 hex digits, all decimal, passing Luhn: an alarm id a downstream toolwatch got.
        let id = "6366334376982110";
        let mut l: LogRecord = crate::event::fixtures::log();
        l.attributes = Attributes(vec![
            ("toolwatch.alarm.id".into(), AttrValue::Str(id.into())),
            ("note".into(), AttrValue::Str(id.into())),
        ]);
        let mut batch = EventBatch {
            spans: vec![],
            logs: vec![l],
        };
        p.protect(&mut batch);
        let attrs = &batch.logs[0].attributes.0;
        assert_eq!(attrs[0].1, AttrValue::Str(id.into()));
        assert_eq!(
            attrs[1].1,
            AttrValue::Str("[REDACTED:payment_card_number]".into()),
            "the same digits elsewhere are a card number"
        );
    }

    /// A private key block of five distinct base64 lines, and its lines.
    fn key_block() -> (String, Vec<String>) {
        let lines: Vec<String> = (0..5)
            .map(|i| {
                let line: String = (0..64)
                    .map(|j| {
                        let k = (i * 131 + j * 29 + 7) % 64;
                        char::from(
                            b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"[k],
                        )
                    })
                    .collect();
                format!("M{}", &line[1..])
            })
            .collect();
        let block = format!(
            "-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----",
            lines.join("\n")
        );
        (block, lines)
    }

    fn log_of(tenant: &str, body: &str) -> LogRecord {
        let mut l = crate::event::fixtures::log();
        l.tenant = tenant.into();
        l.body = AttrValue::Str(body.into());
        l
    }

    /// A log, a span event and a resource attribute of `tenant` that hold `value` bare.
    fn bare_sightings(tenant: &str, value: &str) -> EventBatch {
        let mut span = crate::event::fixtures::span();
        span.tenant = tenant.into();
        span.events.push(crate::event::SpanEventRecord {
            time_ns: 0,
            name: "retry".into(),
            attributes: Attributes(vec![(
                "note".into(),
                AttrValue::Str(format!("got {value}")),
            )]),
        });
        span.resource = Arc::new(Resource {
            service_name: "executor".into(),
            attributes: Attributes(vec![("deploy.note".into(), AttrValue::Str(value.into()))]),
        });
        EventBatch {
            spans: vec![span],
            logs: vec![log_of(tenant, &format!("{{\"k\": \"{value}\"}}"))],
        }
    }

    #[test]
    fn the_secret_itself_is_learned_and_removed_bare_in_any_signal_of_its_tenant() {
        let (block, lines) = key_block();
        let escaped = block.replace('\n', "\\n");
        // (where the secret first stands, what is kept of it, what it must teach)
        let kinds: Vec<(String, String, Vec<String>)> = vec![
            (
                "db at postgres://app:Pg7vQ2xLm9Zt@db.internal:5432/orders".into(),
                "db at postgres://app:[REDACTED:url_userinfo_password]@db.internal:5432/orders"
                    .into(),
                vec!["Pg7vQ2xLm9Zt".into()],
            ),
            (
                "cloning https://deploy:Hx4kW8pQ2nVr@git.example.com/repo.git".into(),
                "cloning https://deploy:[REDACTED:url_userinfo_password]@git.example.com/repo.git"
                    .into(),
                vec!["Hx4kW8pQ2nVr".into()],
            ),
            (
                "Authorization: Bearer tK9mQ2vX7pL4wR8zN3bC6d".into(),
                "Authorization: Bearer [REDACTED:bearer_token]".into(),
                vec!["tK9mQ2vX7pL4wR8zN3bC6d".into()],
            ),
            (
                "Server=db;User Id=sa;Password=Wq8rT3yU6iO9;".into(),
                "Server=db;User Id=sa;Password=[REDACTED:connection_string_password];".into(),
                vec!["Wq8rT3yU6iO9".into()],
            ),
            (
                format!("key:\n{block}\n"),
                "key:\n[REDACTED:private_key]\n".into(),
                lines.iter().cloned().chain([lines.concat()]).collect(),
            ),
            (
                format!("{{\"pem\": \"{escaped}\"}} in a log line"),
                "{\"pem\": \"[REDACTED:private_key]\"} in a log line".into(),
                lines.iter().cloned().chain([lines.concat()]).collect(),
            ),
        ];
        for (context, kept, secrets) in kinds {
            // A fresh store per kind: what one kind teaches cannot cover another.
            let p =
                Protector::from_config(&rules::RedactionConfig::default(), KeyedHasher::new(b"k"))
                    .expect("default rules");
            let mut first = EventBatch {
                spans: vec![],
                logs: vec![log_of("acme", &context)],
            };
            p.protect(&mut first);
            assert_eq!(first.logs[0].body, AttrValue::Str(kept), "{context}");
            for secret in &secrets {
                let mut later = bare_sightings("acme", secret);
                later.spans.extend(bare_sightings("globex", secret).spans);
                later.logs.extend(bare_sightings("globex", secret).logs);
                p.protect(&mut later);
                let text = |v: &AttrValue| serde_json::to_string(v).expect("json");
                let acme = [
                    text(&later.logs[0].body),
                    text(&later.spans[0].events[0].attributes.0[0].1),
                    text(&later.spans[0].resource.attributes.0[0].1),
                ];
                for (what, t) in ["log body", "span event", "resource"].iter().zip(&acme) {
                    assert!(
                        !t.contains(secret.as_str()),
                        "{context}: {secret} in acme's {what}: {t}"
                    );
                    assert!(t.contains("[REDACTED:learned:"), "{context}: {what}: {t}");
                }
                assert_eq!(
                    later.logs[1].body,
                    AttrValue::Str(format!("{{\"k\": \"{secret}\"}}")),
                    "another tenant's record is kept"
                );
                assert_eq!(
                    later.spans[1].resource.attributes.0[0].1,
                    AttrValue::Str(secret.clone())
                );
            }
        }
    }

    #[test]
    fn key_file_is_created_once_and_reused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("state/hash.key");
        let a = KeyedHasher::load_or_create(&path).expect("create");
        let b = KeyedHasher::load_or_create(&path).expect("load");
        assert_eq!(a.hash("x"), b.hash("x"));
        std::fs::write(&path, "zz").expect("write");
        assert!(matches!(
            KeyedHasher::load_or_create(&path),
            Err(KeyError::Malformed { .. })
        ));
    }
}

#[cfg(test)]
mod canary_properties {
    use super::*;
    use crate::event::{LogRecord, SpanRecord};
    use proptest::prelude::*;

    const CANARIES: &[&str] = &[
        "AKIAZ3KQ9MX2PL7VR4TY",
        "sk-proj-Zk3q9XbT2mLw8RvNc1dF5gH0jKaQ7uYe4Wp6",
        "ghp_aZ3kQ9mX2pL7vR4tY8wN6bC1dF5gH0jKaZ3k",
        "jane.roe@example.org",
        "4242 4242 4242 4242",
        "xoxb-2401234567-2409876543210-AbCdEfGhIjKlMnOpQrStUvWx",
        "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
        "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----",
    ];

    /// A leaf: ordinary words, or a canary wrapped in one of the ways payloads carry text.
    #[derive(Debug, Clone)]
    enum Leaf {
        Words(String),
        Canary { which: usize, wrap: u8 },
    }

    fn leaf() -> impl Strategy<Value = Leaf> {
        prop_oneof![
            "[a-z]{1,8}( [a-z]{1,8}){0,4}".prop_map(Leaf::Words),
            (0..CANARIES.len(), 0u8..5).prop_map(|(which, wrap)| Leaf::Canary { which, wrap }),
        ]
    }

    fn render(leaf: &Leaf) -> AttrValue {
        match leaf {
            Leaf::Words(w) => AttrValue::Str(w.clone()),
            Leaf::Canary { which, wrap } => {
                let c = CANARIES[*which];
                let one = serde_json::json!({ "note": format!("see {c} here") }).to_string();
                AttrValue::Str(match wrap {
                    0 => c.to_string(),
                    1 => format!("before {c} after"),
                    // JSON inside a string, as tool arguments arrive.
                    2 => one,
                    // JSON escaped twice: a JSON document holding JSON text.
                    3 => serde_json::json!({ "arguments": one }).to_string(),
                    // JSON-escaped text inside a plain log line.
                    _ => format!(
                        "retry failed: args={}",
                        serde_json::to_string(&one).unwrap_or_default()
                    ),
                })
            }
        }
    }

    fn tree() -> impl Strategy<Value = AttrValue> {
        leaf()
            .prop_map(|l| render(&l))
            .prop_recursive(4, 32, 5, |inner| {
                prop_oneof![
                    prop::collection::vec(inner.clone(), 1..5).prop_map(AttrValue::Array),
                    prop::collection::vec(("[a-z]{1,8}", inner), 1..5)
                        .prop_map(|kvs| AttrValue::Map(Attributes(kvs))),
                ]
            })
    }

    fn contains_canary(text: &str) -> Option<&'static str> {
        CANARIES.iter().copied().find(|c| {
            let once = serde_json::to_string(c).unwrap_or_default();
            let once = &once[1..once.len() - 1];
            let twice = serde_json::to_string(once).unwrap_or_default();
            let twice = &twice[1..twice.len() - 1];
            text.contains(c) || text.contains(once) || text.contains(twice)
        })
    }

    fn protector() -> Protector {
        let r = Redactor::new(&rules::RedactionConfig::default(), KeyedHasher::new(b"p"))
            .expect("rules");
        Protector::new(r)
    }

    fn span_with(value: AttrValue, planted: &str) -> SpanRecord {
        SpanRecord {
            tenant: "t".into(),
            resource: Arc::new(Resource {
                service_name: "svc".into(),
                attributes: Attributes(vec![("deployment.note".into(), value.clone())]),
            }),
            name: format!("execute_tool {planted}"),
            class: crate::event::SpanClass::Tool,
            status_code: crate::event::StatusCode::Error,
            status_message: format!("failed for {planted}"),
            gen_ai: GenAiFields {
                tool_arguments: Some(serde_json::to_string(&value).unwrap_or_default()),
                ..Default::default()
            },
            attributes: Attributes(vec![("payload".into(), value.clone())]),
            events: vec![crate::event::SpanEventRecord {
                time_ns: 0,
                name: "exception".into(),
                attributes: Attributes(vec![("exception.message".into(), value)]),
            }],
            ..crate::event::fixtures::span()
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]
        /// A canary planted anywhere — any depth, any field, inside JSON in a string, escaped
        /// once or twice — never survives protect, in spans or in log bodies.
        #[test]
        fn planted_canaries_never_survive(value in tree(), which in 0..CANARIES.len()) {
            let planted = CANARIES[which].replace('\n', " ");
            let span = span_with(value.clone(), &planted);
            let log = LogRecord {
                resource: Arc::clone(&span.resource),
                body: value,
                ..crate::event::fixtures::log()
            };
            let mut batch = EventBatch { spans: vec![span], logs: vec![log] };
            protector().protect(&mut batch);
            let s = &batch.spans[0];
            let l = &batch.logs[0];
            let texts = [
                serde_json::to_string(&s.attributes).unwrap_or_default(),
                serde_json::to_string(&s.resource.attributes).unwrap_or_default(),
                serde_json::to_string(&s.events[0].attributes).unwrap_or_default(),
                s.gen_ai.tool_arguments.clone().unwrap_or_default(),
                s.name.clone(),
                s.status_message.clone(),
                serde_json::to_string(&l.body).unwrap_or_default(),
            ];
            for t in &texts {
                prop_assert!(contains_canary(t).is_none(), "canary survived in {}", t);
            }
        }
    }
}
