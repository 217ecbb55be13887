//! Learned values: a value removed as a secret once is removed wherever it comes again.
//!
//! A rule that removes a secret where it stands in context (`aws_secret_access_key=…`, a
//! password under its key, a bearer token) teaches its tenant that value; the raw idempotency
//! key is taught the same way. From then on the value is removed verbatim from any string of
//! that tenant (spans, events, links, logs, resources), later in the same batch and in later
//! batches, under the rule id `learned:<rule>`. Tenants never share what they learned.
//!
//! Memory is bounded per tenant and in all (count, bytes, time to live). Values live in
//! memory only: a restart forgets them, and nothing learned is written anywhere.
//!
//! Matching costs one byte loop per string: at each word start, one bit test (the first two
//! bytes) and, rarely, a hash lookup (the first eight bytes). A learned value starts with a
//! letter or digit and is found where it starts a word. Each tenant's values sit in two immutable indexes, a large one folded
//! from a small recent one every [`FOLD_AT`] values, so a batch takes one snapshot (two `Arc`
//! clones) and never locks per string.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::maps::FastMap;
use crate::units::{ByteSize, HumanDuration};

/// Prefix of the rule id a learned match is recorded under.
pub const LEARNED_PREFIX: &str = "learned:";

/// The rule id under which raw idempotency keys are learned.
pub const IDEMPOTENCY_RULE: &str = "idempotency_key";

/// Recent values are folded into a tenant's large index when this many have gathered.
pub const FOLD_AT: usize = 256;

/// Recent values are folded in when they hold this many bytes.
const FOLD_BYTES: usize = 64 << 10;

/// Bytes of a value used as its lookup key; shorter values are never learned.
const PREFIX_BYTES: usize = 8;

/// Most values of a tenant that share their first [`PREFIX_BYTES`] bytes; more are not
/// learned. Every lookup at a word start compares the values of one such group, so the bound
/// keeps matching (and learning) linear in the text, however many learned values share a
/// prefix (`password=Xq0000000001z`, `…0002z`, …: 1 MiB of them took 1.5 s). The price: a
/// tenant remembers at most this many values of one such group at a time (JSON Web Tokens
/// with one header share theirs), until older ones expire or give way to the limits.
const MAX_SHARING_PREFIX: usize = 256;

/// Longest value learned (a private key block is learned whole up to this).
const MAX_VALUE_BYTES: usize = 4096;

/// The `[redaction.learned]` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LearnedConfig {
    /// Learn values at all.
    pub enabled: bool,
    /// Shortest value learned, in bytes (at least 8: shorter values would match too much).
    pub min_bytes: usize,
    /// Most values kept per tenant; the oldest go first.
    pub max_values_per_tenant: usize,
    /// Most bytes of values kept per tenant.
    pub max_bytes_per_tenant: ByteSize,
    /// Most values kept in all tenants together.
    pub max_values: usize,
    /// Most bytes of values kept in all tenants together.
    pub max_bytes: ByteSize,
    /// How long a value is remembered after it was last learned.
    pub ttl: HumanDuration,
}

impl Default for LearnedConfig {
    fn default() -> Self {
        LearnedConfig {
            enabled: true,
            min_bytes: 8,
            max_values_per_tenant: 10_000,
            max_bytes_per_tenant: ByteSize(1 << 20),
            max_values: 100_000,
            max_bytes: ByteSize(16 << 20),
            ttl: HumanDuration(Duration::from_secs(24 * 3600)),
        }
    }
}

/// One learned value.
#[derive(Debug)]
struct Entry {
    text: Box<str>,
    /// `learned:<rule>`.
    rule: Arc<str>,
    at: Instant,
}

/// Values by their first eight bytes, in the order they were learned.
#[derive(Debug, Clone, Default)]
struct Index {
    by_prefix: FastMap<u64, Vec<Arc<Entry>>>,
    order: VecDeque<Arc<Entry>>,
    bytes: usize,
    /// Where its values may start: most word starts are ruled out by one bit test before
    /// any hashing (512 bytes inline: an empty index allocates nothing).
    starts: StartBits,
    /// No value of it is shorter (values taken out leave it as it was: a bound, not the
    /// length); `usize::MAX` while it never held one.
    shortest: Shortest,
}

/// The length of a collection's shortest value, at most: a text shorter than it holds none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Shortest(usize);

impl Default for Shortest {
    fn default() -> Self {
        Shortest(usize::MAX)
    }
}

impl Shortest {
    fn note(&mut self, len: usize) {
        self.0 = self.0.min(len);
    }
}

/// One bit per hash of the first two bytes of a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct StartBits([u64; 64]);

impl Default for StartBits {
    fn default() -> Self {
        StartBits([0; 64])
    }
}

impl StartBits {
    fn bit(b: &[u8]) -> usize {
        ((usize::from(b[0]) << 5) ^ usize::from(b[1])) & 4095
    }

    fn set(&mut self, b: &[u8]) {
        let bit = StartBits::bit(b);
        self.0[bit / 64] |= 1 << (bit % 64);
    }

    /// False when no value whose first two bytes are `b`'s was set (`b` holds two or more).
    fn may_start(&self, b: &[u8]) -> bool {
        let bit = StartBits::bit(b);
        self.0[bit / 64] & (1 << (bit % 64)) != 0
    }

    /// The bits of both.
    fn union(&self, other: &StartBits) -> StartBits {
        StartBits(std::array::from_fn(|i| self.0[i] | other.0[i]))
    }
}

/// Calls `at` with each word start of `b` but its last byte: an ASCII letter or digit with
/// none before it. 64 bytes at a step, their letters and digits one mask
/// ([`block_classes::alphanumeric_at`]): a branch per word, each time mispredicted where it
/// ended, was most of the pass, and eight bytes a step still cost four instructions a byte.
#[inline]
fn each_word_start(b: &[u8], mut at: impl FnMut(usize)) {
    use super::block_classes;
    let end = b.len().saturating_sub(1);
    // Bit 0 set where the byte before the block is a letter or digit.
    let mut before = 0u64;
    let mut i = 0;
    while i < end {
        let alnum = block_classes::alphanumeric_at(b, i);
        let mut starts = alnum & !((alnum << 1) | before);
        before = alnum >> 63;
        while starts != 0 {
            let k = i + starts.trailing_zeros() as usize;
            if k >= end {
                return;
            }
            at(k);
            starts &= starts - 1;
        }
        i += 64;
    }
}

fn prefix_key(b: &[u8]) -> Option<u64> {
    let p: [u8; PREFIX_BYTES] = b.get(..PREFIX_BYTES)?.try_into().ok()?;
    Some(u64::from_le_bytes(p))
}

impl Index {
    fn len(&self) -> usize {
        self.order.len()
    }

    fn contains(&self, text: &str) -> bool {
        self.sharing_prefix(text).iter().any(|e| &*e.text == text)
    }

    /// The values that share `text`'s first [`PREFIX_BYTES`] bytes.
    fn sharing_prefix(&self, text: &str) -> &[Arc<Entry>] {
        prefix_key(text.as_bytes())
            .and_then(|k| self.by_prefix.get(&k))
            .map_or(&[], Vec::as_slice)
    }

    fn push(&mut self, e: Arc<Entry>) {
        let Some(k) = prefix_key(e.text.as_bytes()) else {
            return;
        };
        self.bytes += e.text.len();
        self.starts.set(e.text.as_bytes());
        self.shortest.note(e.text.len());
        self.by_prefix.entry(k).or_default().push(Arc::clone(&e));
        self.order.push_back(e);
    }

    fn pop_oldest(&mut self) -> Option<Arc<Entry>> {
        let e = self.order.pop_front()?;
        self.bytes -= e.text.len();
        if let Some(k) = prefix_key(e.text.as_bytes()) {
            if let Some(bucket) = self.by_prefix.get_mut(&k) {
                bucket.retain(|x| !Arc::ptr_eq(x, &e));
                if bucket.is_empty() {
                    self.by_prefix.remove(&k);
                }
            }
        }
        Some(e)
    }

    fn may_start(&self, b: &[u8]) -> bool {
        self.starts.may_start(b)
    }

    /// The values of this index that stand at `b[i..]`.
    fn find_at(
        &self,
        text: &str,
        i: usize,
        ttl: Duration,
        now: &mut Option<Instant>,
        out: &mut Vec<Hit>,
    ) {
        let b = text.as_bytes();
        if !self.may_start(&b[i..]) {
            return;
        }
        let Some(bucket) = prefix_key(&b[i..]).and_then(|k| self.by_prefix.get(&k)) else {
            return;
        };
        for e in bucket {
            let end = i + e.text.len();
            if b[i..].starts_with(e.text.as_bytes()) && text.is_char_boundary(end) {
                let t = *now.get_or_insert_with(Instant::now);
                if t.duration_since(e.at) < ttl {
                    out.push(Hit {
                        range: i..end,
                        rule: Arc::clone(&e.rule),
                    });
                }
            }
        }
    }
}

/// One place a learned value stands in a string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hit {
    /// Byte range.
    pub range: Range<usize>,
    /// `learned:<rule>`.
    pub rule: Arc<str>,
}

/// One tenant's values: a large index and a small recent one, each immutable once shared.
#[derive(Debug, Default, Clone)]
struct TenantValues {
    base: Arc<Index>,
    recent: Arc<Index>,
}

impl TenantValues {
    fn len(&self) -> usize {
        self.base.len() + self.recent.len()
    }

    fn bytes(&self) -> usize {
        self.base.bytes + self.recent.bytes
    }
}

/// What a batch sees of one tenant's values: a snapshot, plus what the batch learned itself.
#[derive(Debug, Default)]
pub struct TenantScope {
    tenant: String,
    snapshot: TenantValues,
    /// Where the snapshot's values and the batch's may start: all three indexes' bits, kept
    /// as one so that a string's pass tests one table (most strings are short values).
    starts: StartBits,
    /// Shorter than every value of the snapshot and of the batch: a string shorter than this
    /// is not passed at all (most attribute values are).
    shortest: Shortest,
    fresh: Index,
    min_bytes: usize,
    /// Most values (and their bytes) one batch learns: what a tenant keeps at most, since
    /// merging more would only push the batch's own values out again.
    max_fresh: (usize, usize),
    ttl: Duration,
    enabled: bool,
}

impl TenantScope {
    /// Every place a value this tenant learned stands in `text`: one pass over the word
    /// starts, each looked up in the indexes that hold anything.
    pub fn find(&self, text: &str, out: &mut Vec<Hit>) {
        // Shorter than every value (and than none held: the bound is then the largest).
        if !self.enabled || text.len() < PREFIX_BYTES.max(self.shortest.0) {
            return;
        }
        let all = [&*self.snapshot.base, &*self.snapshot.recent, &self.fresh];
        let mut indexes = [&self.fresh; 3];
        let mut n = 0;
        for x in all.into_iter().filter(|x| x.len() > 0) {
            indexes[n] = x;
            n += 1;
        }
        let indexes = &indexes[..n];
        let b = text.as_bytes();
        if indexes.is_empty() {
            return;
        }
        let mut now = None;
        // One bit test rules out most word starts for all three indexes at once; the few
        // left are looked up out of line, so the loop over word starts stays small.
        let starts = &self.starts;
        let last = b.len() - PREFIX_BYTES;
        each_word_start(&b[..last + 2], |i| {
            if starts.may_start(&b[i..]) {
                self.find_at(indexes, text, i, &mut now, out);
            }
        });
    }

    /// The values of `indexes` that stand at `text[i..]`.
    #[inline(never)]
    fn find_at(
        &self,
        indexes: &[&Index],
        text: &str,
        i: usize,
        now: &mut Option<Instant>,
        out: &mut Vec<Hit>,
    ) {
        for x in indexes {
            x.find_at(text, i, self.ttl, now, out);
        }
    }

    /// Learns `value`, removed by `rule`, for the rest of the batch and (when the batch is
    /// merged) for later ones. A private key block is learned whole, line by line and as its
    /// body joined: each is the secret when it is seen again on its own.
    pub fn learn(&mut self, rule: &str, value: &str) {
        self.learn_one(rule, value);
        if let Some(lines) = key_block_lines(value) {
            for line in &lines {
                self.learn_one(rule, line);
            }
            if lines.len() > 1 {
                self.learn_one(rule, &lines.concat());
            }
        }
    }

    fn learn_one(&mut self, rule: &str, value: &str) {
        if !self.enabled
            || value.len() < self.min_bytes
            || value.len() > MAX_VALUE_BYTES
            || rule.starts_with(LEARNED_PREFIX)
            || self.fresh.len() >= self.max_fresh.0
            || self.fresh.bytes + value.len() > self.max_fresh.1
            || value.trim().len() < value.len()
            || !value.as_bytes()[0].is_ascii_alphanumeric()
        {
            return;
        }
        // One look-up per index says both whether the value is known and how many share its
        // prefix.
        let groups = [
            self.fresh.sharing_prefix(value),
            self.snapshot.recent.sharing_prefix(value),
            self.snapshot.base.sharing_prefix(value),
        ];
        if groups.iter().map(|g| g.len()).sum::<usize>() >= MAX_SHARING_PREFIX
            || groups
                .iter()
                .flat_map(|g| g.iter())
                .any(|e| &*e.text == value)
        {
            return;
        }
        self.fresh.push(Arc::new(Entry {
            text: value.into(),
            rule: Arc::from(format!("{LEARNED_PREFIX}{rule}")),
            at: Instant::now(),
        }));
        self.starts.set(value.as_bytes());
        self.shortest.note(value.len());
    }
}

/// The body lines of a private key block (PEM, OpenSSH, PGP armour), in order: the lines of
/// base64 between its armour and headers, split at newlines or at the `\n` escapes of a block
/// written inside a JSON or log string. `None` for anything else.
fn key_block_lines(value: &str) -> Option<Vec<&str>> {
    let first = value.split(['\n', '\\']).next().unwrap_or_default();
    if !(first.starts_with("-----BEGIN") && first.contains("PRIVATE KEY")) {
        return None;
    }
    let base64 = |l: &str| {
        l.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'='))
    };
    let lines = value
        .split(['\n', '\r'])
        .flat_map(|l| l.split("\\n"))
        .map(|l| l.trim().trim_end_matches("\\r"))
        .filter(|l| !l.is_empty() && base64(l))
        .collect();
    Some(lines)
}

/// Counts for `/metrics`.
#[derive(Debug, Default)]
pub struct LearnedStats {
    /// Values held, all tenants.
    pub values: AtomicUsize,
    /// Bytes of values held, all tenants.
    pub bytes: AtomicUsize,
    /// Values forgotten to stay within a limit.
    pub evicted_limit: AtomicU64,
    /// Values forgotten when their time to live ran out.
    pub expired: AtomicU64,
}

/// Every tenant's learned values, shared by the workers that protect batches.
#[derive(Debug, Default)]
pub struct LearnedValues {
    config: LearnedConfig,
    tenants: RwLock<FastMap<String, Arc<Mutex<TenantValues>>>>,
    /// Counts for `/metrics` (read by the daemon's gauge refresher).
    pub stats: Arc<LearnedStats>,
}

impl LearnedValues {
    /// An empty store with these limits.
    pub fn new(config: LearnedConfig) -> LearnedValues {
        LearnedValues {
            config,
            tenants: RwLock::default(),
            stats: Arc::default(),
        }
    }

    fn slot(&self, tenant: &str) -> Option<Arc<Mutex<TenantValues>>> {
        self.tenants.read().ok()?.get(tenant).cloned()
    }

    /// What a batch sees of `tenant`'s values.
    pub fn scope(&self, tenant: &str) -> TenantScope {
        let snapshot = self
            .slot(tenant)
            .and_then(|s| s.lock().ok().map(|t| t.clone()))
            .unwrap_or_default();
        TenantScope {
            tenant: tenant.to_string(),
            starts: snapshot.base.starts.union(&snapshot.recent.starts),
            shortest: Shortest(snapshot.base.shortest.0.min(snapshot.recent.shortest.0)),
            snapshot,
            fresh: Index::default(),
            min_bytes: self.config.min_bytes.max(PREFIX_BYTES),
            max_fresh: (
                self.config.max_values_per_tenant,
                self.config.max_bytes_per_tenant.as_usize(),
            ),
            ttl: self.config.ttl.0,
            enabled: self.config.enabled,
        }
    }

    /// Keeps what a batch learned for later batches of its tenant.
    pub fn merge(&self, scope: TenantScope) {
        let TenantScope {
            tenant,
            snapshot,
            fresh,
            ..
        } = scope;
        // The batch's own snapshot goes first: the tenant's indexes are then copied below only
        // while another batch of the tenant holds them.
        drop(snapshot);
        if fresh.len() == 0 {
            return;
        }
        let slot = match self.slot(&tenant) {
            Some(s) => s,
            None => {
                let Ok(mut map) = self.tenants.write() else {
                    return;
                };
                Arc::clone(map.entry(tenant).or_default())
            }
        };
        let Ok(mut guard) = slot.lock() else {
            return;
        };
        let t: &mut TenantValues = &mut guard;
        let (before_len, before_bytes) = (t.len(), t.bytes());
        let recent = Arc::make_mut(&mut t.recent);
        for e in fresh.order {
            if !recent.contains(&e.text) && !t.base.contains(&e.text) {
                recent.push(e);
            }
        }
        let c = &self.config;
        let grown = (recent.len() + t.base.len()).saturating_sub(before_len);
        let grown_bytes = (recent.bytes + t.base.bytes).saturating_sub(before_bytes);
        // The global limits, with an eighth to spare: past that every merge folds (and
        // trims) until the tenants are back under them.
        let over_all = self.stats.values.load(Ordering::Relaxed) + grown
            > c.max_values + c.max_values / 8
            || self.stats.bytes.load(Ordering::Relaxed) + grown_bytes
                > c.max_bytes.as_usize() + c.max_bytes.as_usize() / 8;
        // Folding copies the large index when a batch holds it, so it waits for FOLD_AT values
        // or FOLD_BYTES of them (limits are applied then: a tenant may be that much over its
        // own until the fold).
        if recent.len() >= FOLD_AT || recent.bytes >= FOLD_BYTES || over_all {
            let base = Arc::make_mut(&mut t.base);
            while let Some(e) = recent.order.pop_front() {
                base.push(e);
            }
            *recent = Index::default();
            let others = (
                self.stats
                    .values
                    .load(Ordering::Relaxed)
                    .saturating_sub(before_len),
                self.stats
                    .bytes
                    .load(Ordering::Relaxed)
                    .saturating_sub(before_bytes),
            );
            self.trim(base, others);
        }
        let (after_len, after_bytes) = (t.len(), t.bytes());
        drop(guard);
        account(before_len, after_len, &self.stats.values);
        account(before_bytes, after_bytes, &self.stats.bytes);
    }

    /// Drops expired values, then the oldest until the tenant's limits hold and, with the
    /// other tenants' `others` (values, bytes), the global ones.
    fn trim(&self, base: &mut Index, others: (usize, usize)) {
        let ttl = self.config.ttl.0;
        let now = Instant::now();
        while base
            .order
            .front()
            .is_some_and(|e| now.duration_since(e.at) >= ttl)
        {
            base.pop_oldest();
            self.stats.expired.fetch_add(1, Ordering::Relaxed);
        }
        let c = &self.config;
        let over = |b: &Index| {
            b.len() > c.max_values_per_tenant
                || b.bytes > c.max_bytes_per_tenant.as_usize()
                || others.0 + b.len() > c.max_values
                || others.1 + b.bytes > c.max_bytes.as_usize()
        };
        while over(base) && base.pop_oldest().is_some() {
            self.stats.evicted_limit.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Moves `total` by the change from `before` to `after`.
fn account(before: usize, after: usize, total: &AtomicUsize) {
    if after >= before {
        total.fetch_add(after - before, Ordering::Relaxed);
    } else {
        total.fetch_sub(before - after, Ordering::Relaxed);
    }
}

thread_local! {
    /// The tenant scope of the item being protected on this thread, if learning is on.
    static SCOPE: RefCell<Option<TenantScope>> = const { RefCell::new(None) };
}

/// Runs `f` with `scope` as this thread's learning scope and gives the scope back.
pub fn with_scope<R>(scope: TenantScope, f: impl FnOnce() -> R) -> (R, TenantScope) {
    SCOPE.with(|s| *s.borrow_mut() = Some(scope));
    let out = f();
    let scope = SCOPE.with(|s| s.borrow_mut().take()).unwrap_or_default();
    (out, scope)
}

/// Every place a value learned by the current scope's tenant stands in `text` (none when no
/// scope is set: `toolwatch redact`, benchmarks of one stage).
pub fn find_in_scope(text: &str, out: &mut Vec<Hit>) {
    SCOPE.with(|s| {
        if let Ok(s) = s.try_borrow() {
            if let Some(scope) = s.as_ref() {
                scope.find(text, out);
            }
        }
    });
}

/// How many values the current scope has learned so far (0 when no scope is set; a batch
/// never lets go of what it learned): when it has not moved, [`find_in_scope`] finds what it
/// found before.
pub fn learned_in_scope() -> u64 {
    SCOPE.with(|s| {
        s.try_borrow()
            .ok()
            .and_then(|s| s.as_ref().map(|scope| scope.fresh.len() as u64))
            .unwrap_or(0)
    })
}

/// Teaches the current scope's tenant `value`, removed by `rule`.
pub fn learn_in_scope(rule: &str, value: &str) {
    // Every credential a rule removes passes here: the secret trail notes it too.
    super::trail::note(value);
    SCOPE.with(|s| {
        if let Ok(mut s) = s.try_borrow_mut() {
            if let Some(scope) = s.as_mut() {
                scope.learn(rule, value);
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(config: LearnedConfig) -> LearnedValues {
        LearnedValues::new(config)
    }

    fn found(scope: &TenantScope, text: &str) -> Vec<String> {
        let mut out = Vec::new();
        scope.find(text, &mut out);
        out.iter()
            .map(|h| text[h.range.clone()].to_string())
            .collect()
    }

    proptest::proptest! {
        /// Every word start where a value learned earlier (folded into the tenant's
        /// indexes) or in this batch stands is found, and nothing else: the word-skipping
        /// pass and its two bit tests against a look at every byte.
        #[test]
        fn the_pass_finds_each_value_at_each_word_start_it_stands_at(
            earlier in proptest::collection::vec("[a-c0-2]{8,11}", 0..6),
            now in proptest::collection::vec("[a-c0-2]{8,11}", 0..6),
            parts in proptest::collection::vec("([a-c0-2]{1,6}|[ ._=\"-]|[A-Cé]|[a-c0-2]{8,11})", 0..30),
        ) {
            let s = store(LearnedConfig::default());
            let mut before = s.scope("t");
            for v in &earlier {
                before.learn("r", v);
            }
            s.merge(before);
            let mut scope = s.scope("t");
            for v in &now {
                scope.learn("r", v);
            }
            let mut text: String = parts.concat();
            // Some of the values themselves, where words start and where they do not.
            for (i, v) in earlier.iter().chain(&now).enumerate() {
                text.push_str(if i % 2 == 0 { " " } else { "x" });
                text.push_str(v);
            }
            let mut hits = Vec::new();
            scope.find(&text, &mut hits);
            let mut got: Vec<std::ops::Range<usize>> = hits.into_iter().map(|h| h.range).collect();
            got.sort_by_key(|r| (r.start, r.end));
            let b = text.as_bytes();
            let mut values: Vec<&String> = earlier.iter().chain(&now).collect();
            values.sort();
            values.dedup();
            let mut want = Vec::new();
            for i in 0..b.len() {
                let starts_word = b[i].is_ascii_alphanumeric() && (i == 0 || !b[i - 1].is_ascii_alphanumeric());
                for v in values.iter().filter(|_| starts_word) {
                    if text[i..].starts_with(v.as_str()) {
                        want.push(i..i + v.len());
                    }
                }
            }
            want.sort_by_key(|r| (r.start, r.end));
            proptest::prop_assert_eq!(got, want, "{:?}", text);
        }
    }

    #[test]
    fn a_value_learned_in_a_batch_is_found_later_in_it_and_in_later_batches() {
        let s = store(LearnedConfig::default());
        let mut a = s.scope("acme");
        a.learn("aws_secret_access_key", "wJalrXUtnFEMI/K7MDENG");
        assert_eq!(
            found(&a, "{\"k\": \"wJalrXUtnFEMI/K7MDENG\"}"),
            ["wJalrXUtnFEMI/K7MDENG"]
        );
        s.merge(a);
        let later = s.scope("acme");
        let mut hits = Vec::new();
        later.find("again wJalrXUtnFEMI/K7MDENG.", &mut hits);
        assert_eq!(hits.len(), 1);
        assert_eq!(&*hits[0].rule, "learned:aws_secret_access_key");
        // Another tenant learned nothing.
        assert!(found(&s.scope("globex"), "wJalrXUtnFEMI/K7MDENG").is_empty());
        assert_eq!(s.stats.values.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn short_values_and_learned_matches_are_not_learned() {
        let s = store(LearnedConfig::default());
        let mut a = s.scope("t");
        a.learn("secret_key_assignment", "qzva");
        a.learn("learned:x", "abcdefgh12345");
        assert_eq!(a.fresh.len(), 0);
    }

    #[test]
    fn a_value_inside_a_longer_word_is_not_found_at_its_middle() {
        let s = store(LearnedConfig::default());
        let mut a = s.scope("t");
        a.learn("r", "Zk3q9XbT2mLw");
        assert_eq!(found(&a, "xZk3q9XbT2mLw"), Vec::<String>::new());
        assert_eq!(found(&a, "x=Zk3q9XbT2mLw;"), ["Zk3q9XbT2mLw"]);
    }

    #[test]
    fn limits_keep_the_newest_values_per_tenant() {
        let s = store(LearnedConfig {
            max_values_per_tenant: 300,
            ..Default::default()
        });
        for batch in 0..4 {
            let mut a = s.scope("t");
            for i in 0..200 {
                a.learn("r", &format!("{i:05}-value-{batch}-x"));
            }
            s.merge(a);
        }
        let a = s.scope("t");
        assert!(a.snapshot.len() <= 300 + FOLD_AT, "{}", a.snapshot.len());
        assert_eq!(found(&a, "00199-value-3-x"), ["00199-value-3-x"]);
        assert!(found(&a, "00000-value-0-x").is_empty());
        assert!(s.stats.evicted_limit.load(Ordering::Relaxed) >= 400);
        assert_eq!(s.stats.values.load(Ordering::Relaxed), a.snapshot.len());
    }

    #[test]
    fn at_most_a_bounded_group_of_values_shares_a_prefix() {
        let s = store(LearnedConfig::default());
        let mut a = s.scope("t");
        for i in 0..MAX_SHARING_PREFIX + 10 {
            a.learn("r", &format!("Xq000000-{i:06}"));
        }
        assert_eq!(a.fresh.len(), MAX_SHARING_PREFIX);
        let last = format!("Xq000000-{:06}", MAX_SHARING_PREFIX - 1);
        assert_eq!(found(&a, &last), std::slice::from_ref(&last));
        assert!(found(&a, &format!("Xq000000-{:06}", MAX_SHARING_PREFIX)).is_empty());
        // Values with other prefixes are learned as before.
        a.learn("r", "Yz000000-000001");
        assert_eq!(found(&a, "Yz000000-000001"), ["Yz000000-000001"]);
    }

    #[test]
    fn values_expire_after_their_time_to_live() {
        let s = store(LearnedConfig {
            ttl: HumanDuration(Duration::ZERO),
            ..Default::default()
        });
        let mut a = s.scope("t");
        a.learn("r", "Zk3q9XbT2mLw");
        // A value is remembered while younger than the ttl: with 0, never.
        assert!(found(&a, "Zk3q9XbT2mLw").is_empty());
        assert_eq!(a.fresh.len(), 1, "learned, then expired");
    }

    #[test]
    fn the_thread_scope_is_given_back() {
        let s = store(LearnedConfig::default());
        let ((), scope) = with_scope(s.scope("t"), || learn_in_scope("r", "Zk3q9XbT2mLw"));
        let mut hits = Vec::new();
        find_in_scope("Zk3q9XbT2mLw", &mut hits);
        assert!(hits.is_empty(), "no scope outside with_scope");
        assert_eq!(found(&scope, "Zk3q9XbT2mLw"), ["Zk3q9XbT2mLw"]);
    }
}
