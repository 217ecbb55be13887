//! Assemble: each request rebuilt from the spans and logs that stream in, and summarized.
//!
//! Spans are grouped by trace; traces that carry the same `executor.request_id` are one
//! request. Arrival order, duplicates (kept once, by span id) and clock skew between services
//! do not change a summary. A request is summarized when its root span has ended and nothing
//! arrived for `quiet_period` (`complete`), or when `max_age` passes first (`timed_out`), or
//! when the memory limits need its room (`evicted`: its spans are archived anyway). A span that
//! arrives after its request was summarized yields a new version marked `amended`. Assembly
//! keeps only the facts a summary needs, never attribute values or text, and never holds up
//! the archive: it reads protected batches after they were queued for writing.

pub mod prices;
pub mod summary;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::config::{HumanDuration, PositiveUsize};
use crate::event::{hex_id, EventBatch, SpanId, TraceId};
use prices::PriceTable;
use summary::{summarize, Completeness, LogFacts, RequestFacts, RequestSummary, SpanFacts};

/// The `[assemble]` section of the config.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AssembleConfig {
    /// Quiet time after the root span ended before a request is summarized.
    pub quiet_period: HumanDuration,
    /// Age (since the first item arrived) after which a request is summarized as `timed_out`.
    pub max_age: HumanDuration,
    /// How long a summarized request is remembered so that late spans amend it.
    pub amend_window: HumanDuration,
    /// Most requests held (open and remembered); beyond it the oldest goes.
    pub max_requests: PositiveUsize,
    /// Most span and log facts held; beyond it the oldest request goes.
    pub max_spans: PositiveUsize,
    /// TOML file of model prices (see `config/prices.toml`); empty: the built-in sample.
    pub prices_file: String,
}

impl Default for AssembleConfig {
    fn default() -> Self {
        AssembleConfig {
            quiet_period: HumanDuration(Duration::from_secs(5)),
            max_age: HumanDuration(Duration::from_secs(15 * 60)),
            amend_window: HumanDuration(Duration::from_secs(15 * 60)),
            max_requests: PositiveUsize(50_000),
            max_spans: PositiveUsize(500_000),
            prices_file: String::new(),
        }
    }
}

/// The sample price table built into the binary.
pub const SAMPLE_PRICES: &str = include_str!("../../config/prices.toml");

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PricesFile {
    #[serde(default)]
    price: Vec<prices::ModelPrice>,
}

/// Why the price table could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum PricesError {
    /// The file could not be read.
    #[error("prices file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The error.
        source: std::io::Error,
    },
    /// The file is not a valid price table.
    #[error("prices file {origin}: {message}")]
    Invalid {
        /// The file (or "built-in sample").
        origin: String,
        /// What is wrong.
        message: String,
    },
}

impl AssembleConfig {
    /// The price table: `prices_file`, or the built-in sample.
    pub fn prices(&self) -> Result<PriceTable, PricesError> {
        let (text, origin) = if self.prices_file.is_empty() {
            (SAMPLE_PRICES.to_string(), "built-in sample".to_string())
        } else {
            let text =
                std::fs::read_to_string(&self.prices_file).map_err(|source| PricesError::Read {
                    path: self.prices_file.clone(),
                    source,
                })?;
            (text, self.prices_file.clone())
        };
        let file: PricesFile = toml::from_str(&text).map_err(|e| PricesError::Invalid {
            origin: origin.clone(),
            message: e.to_string().trim_end().to_string(),
        })?;
        let table = PriceTable(file.price);
        table.validate().map_err(|e| PricesError::Invalid {
            origin,
            message: e.to_string(),
        })?;
        Ok(table)
    }
}

/// Which request a trace belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum RequestKey {
    /// Named by `executor.request_id` (per tenant).
    Named(String, String),
    /// Not (yet) named: the trace alone (per tenant: trace context crosses tenants).
    Trace(String, TraceId),
}

/// One request being assembled, or remembered after its summary for amendments.
struct Pending {
    tenant: String,
    request_id: Option<String>,
    spans: BTreeMap<SpanId, SpanFacts>,
    logs: BTreeMap<(i64, Option<SpanId>, u64), LogFacts>,
    first_arrival_ms: u64,
    last_arrival_ms: u64,
    /// Summaries written so far (0: still open).
    versions: u32,
    /// Something arrived since the last summary.
    dirty: bool,
    /// A span without a parent (the root) has arrived; kept here so the per-tick check does
    /// not walk every span.
    root_ended: bool,
    /// The first journal record with an item not yet in a summary (`u64::MAX`: none).
    unsummarized_from: u64,
}

impl Pending {
    fn new(tenant: &str, now_ms: u64) -> Pending {
        Pending {
            tenant: tenant.to_string(),
            request_id: None,
            spans: BTreeMap::new(),
            logs: BTreeMap::new(),
            first_arrival_ms: now_ms,
            last_arrival_ms: now_ms,
            versions: 0,
            dirty: false,
            root_ended: false,
            unsummarized_from: u64::MAX,
        }
    }

    fn absorb(&mut self, other: Pending) {
        self.spans.extend(other.spans);
        self.logs.extend(other.logs);
        self.first_arrival_ms = self.first_arrival_ms.min(other.first_arrival_ms);
        self.last_arrival_ms = self.last_arrival_ms.max(other.last_arrival_ms);
        self.versions = self.versions.max(other.versions);
        self.dirty |= other.dirty;
        self.root_ended |= other.root_ended;
        self.unsummarized_from = self.unsummarized_from.min(other.unsummarized_from);
    }
}

/// Counters of what assembly did, for `/metrics`.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct AssembleStats {
    /// Spans that were already held (same request, same span id).
    pub duplicate_spans: u64,
    /// Requests forced out by the memory limits.
    pub evicted_requests: u64,
}

/// Rebuilds requests from protected batches.
pub struct Assembler {
    config: AssembleConfig,
    prices: PriceTable,
    traces: HashMap<(String, TraceId), RequestKey>,
    requests: HashMap<RequestKey, Pending>,
    /// Keys in order of first arrival (stale entries are skipped when popped).
    order: VecDeque<(u64, RequestKey)>,
    spans_held: usize,
    stats: AssembleStats,
    strings: summary::Interner,
}

impl Assembler {
    /// An assembler with the given limits and prices.
    pub fn new(config: AssembleConfig, prices: PriceTable) -> Assembler {
        Assembler {
            config,
            prices,
            traces: HashMap::new(),
            requests: HashMap::new(),
            order: VecDeque::new(),
            spans_held: 0,
            stats: AssembleStats::default(),
            strings: summary::Interner::default(),
        }
    }

    /// What assembly did so far.
    pub fn stats(&self) -> &AssembleStats {
        &self.stats
    }

    /// Requests held (open or remembered).
    pub fn requests_held(&self) -> usize {
        self.requests.len()
    }

    /// Span facts held.
    pub fn spans_held(&self) -> usize {
        self.spans_held
    }

    /// Takes in a protected batch at `now_ms` (a monotonic clock in ms); returns summaries
    /// forced out by the memory limits.
    pub fn ingest(&mut self, batch: &EventBatch, now_ms: u64) -> Vec<RequestSummary> {
        self.ingest_record(batch, now_ms, 0)
    }

    /// The first journal record with an item of a request not yet summarized: replaying from
    /// there rebuilds every open request.
    pub fn oldest_unsummarized_record(&self) -> Option<u64> {
        self.requests
            .values()
            .map(|p| p.unsummarized_from)
            .filter(|&s| s != u64::MAX)
            .min()
    }

    /// [`Assembler::ingest`] for journal record `seq`.
    pub fn ingest_record(
        &mut self,
        batch: &EventBatch,
        now_ms: u64,
        seq: u64,
    ) -> Vec<RequestSummary> {
        for span in &batch.spans {
            let key = self.key_for(
                &span.tenant,
                span.trace_id,
                span.audit.request_id.as_deref(),
                now_ms,
            );
            let facts = SpanFacts::of(span, &mut self.strings);
            let Some(p) = self.requests.get_mut(&key) else {
                continue;
            };
            p.last_arrival_ms = now_ms;
            p.unsummarized_from = p.unsummarized_from.min(seq);
            p.root_ended |= facts.parent.is_none();
            if p.spans.insert(facts.span_id, facts).is_some() {
                self.stats.duplicate_spans += 1;
            } else {
                self.spans_held += 1;
                p.dirty = true;
            }
        }
        for log in &batch.logs {
            let Some(facts) = LogFacts::of(log, &mut self.strings) else {
                continue;
            };
            let key = self.key_for(
                &log.tenant,
                facts.trace_id,
                log.audit.request_id.as_deref(),
                now_ms,
            );
            let Some(p) = self.requests.get_mut(&key) else {
                continue;
            };
            p.last_arrival_ms = now_ms;
            p.unsummarized_from = p.unsummarized_from.min(seq);
            if p.logs.insert(facts.key, facts).is_none() {
                // Log facts count against the same bound as span facts.
                self.spans_held += 1;
                p.dirty = true;
            }
        }
        self.enforce_limits()
    }

    /// Summaries due at `now_ms`: requests whose root ended and that were quiet long
    /// enough, those past the maximum age, and amendments. Forgets remembered requests whose
    /// amend window passed.
    pub fn due(&mut self, now_ms: u64) -> Vec<RequestSummary> {
        let quiet = millis(self.config.quiet_period.0);
        let max_age = millis(self.config.max_age.0);
        let window = millis(self.config.amend_window.0);
        let mut out = Vec::new();
        let mut forget = Vec::new();
        for (key, p) in &mut self.requests {
            let idle = now_ms.saturating_sub(p.last_arrival_ms);
            let age = now_ms.saturating_sub(p.first_arrival_ms);
            let completeness = if p.versions > 0 {
                if p.dirty && idle >= quiet {
                    Some(Completeness::Amended)
                } else {
                    if !p.dirty && idle >= window {
                        forget.push(key.clone());
                    }
                    None
                }
            } else if p.root_ended && idle >= quiet {
                Some(Completeness::Complete)
            } else if age >= max_age {
                Some(Completeness::TimedOut)
            } else {
                None
            };
            if let Some(c) = completeness {
                out.push(summary_of(key, p, &self.prices, c));
            }
        }
        for key in forget {
            self.forget(&key);
        }
        // Keys forgotten or folded into another request leave stale entries behind; sweep
        // them once they are as many as the live ones, not on every tick.
        if self.order.len() > 2 * self.requests.len() {
            let requests = &self.requests;
            self.order.retain(|(_, k)| requests.contains_key(k));
        }
        sort_summaries(&mut out);
        out
    }

    /// Summaries of everything still open or changed, at shutdown: a request whose root
    /// ended is `complete`, one whose root was not seen `timed_out`.
    pub fn drain(&mut self) -> Vec<RequestSummary> {
        let mut out = Vec::new();
        for (key, p) in &mut self.requests {
            let c = match (p.versions, p.dirty) {
                // Shutdown comes before the quiet period could pass: an ended root is enough.
                (0, _) if p.root_ended => Completeness::Complete,
                (0, _) => Completeness::TimedOut,
                (_, true) => Completeness::Amended,
                (_, false) => continue,
            };
            out.push(summary_of(key, p, &self.prices, c));
        }
        self.requests.clear();
        self.traces.clear();
        self.order.clear();
        self.spans_held = 0;
        sort_summaries(&mut out);
        out
    }

    /// The request a trace's item belongs to, creating or merging as needed.
    fn key_for(
        &mut self,
        tenant: &str,
        trace: TraceId,
        request_id: Option<&str>,
        now_ms: u64,
    ) -> RequestKey {
        let named = request_id
            .filter(|r| !r.is_empty())
            .map(|r| RequestKey::Named(tenant.to_string(), r.to_string()));
        let trace_key = (tenant.to_string(), trace);
        let current = self.traces.get(&trace_key).cloned();
        let key = match (current, named) {
            (Some(k), None) => k,
            (Some(k), Some(n)) if k == n => k,
            (Some(RequestKey::Trace(tn, t)), Some(n)) => {
                // The trace learned its request: fold what it held into the request.
                if let Some(p) = self.requests.remove(&RequestKey::Trace(tn, t)) {
                    self.entry(&n, tenant, now_ms).absorb(p);
                }
                n
            }
            // A trace already named differently keeps its first request.
            (Some(k), Some(_)) => k,
            (None, Some(n)) => n,
            (None, None) => RequestKey::Trace(tenant.to_string(), trace),
        };
        self.traces.insert(trace_key, key.clone());
        let p = self.entry(&key, tenant, now_ms);
        if let RequestKey::Named(_, r) = &key {
            p.request_id = Some(r.clone());
        }
        key
    }

    fn entry(&mut self, key: &RequestKey, tenant: &str, now_ms: u64) -> &mut Pending {
        if !self.requests.contains_key(key) {
            self.order.push_back((now_ms, key.clone()));
        }
        self.requests
            .entry(key.clone())
            .or_insert_with(|| Pending::new(tenant, now_ms))
    }

    fn forget(&mut self, key: &RequestKey) {
        if let Some(p) = self.requests.remove(key) {
            self.spans_held = self.spans_held.saturating_sub(p.spans.len() + p.logs.len());
            let traces: Vec<(String, TraceId)> = p
                .spans
                .values()
                .map(|s| s.trace_id)
                .chain(p.logs.values().map(|l| l.trace_id))
                .map(|t| (p.tenant.clone(), t))
                .collect();
            for t in &traces {
                if self.traces.get(t) == Some(key) {
                    self.traces.remove(t);
                }
            }
            if let RequestKey::Trace(tenant, t) = key {
                self.traces.remove(&(tenant.clone(), *t));
            }
        }
    }

    /// Makes room: remembered (already summarized) requests go first, oldest first; then
    /// the oldest open request, summarized as `evicted`.
    fn enforce_limits(&mut self) -> Vec<RequestSummary> {
        let mut out = Vec::new();
        while self.requests.len() > self.config.max_requests.0
            || self.spans_held > self.config.max_spans.0
        {
            let victim = self
                .order
                .iter()
                .position(|(_, k)| {
                    self.requests
                        .get(k)
                        .is_some_and(|p| p.versions > 0 && !p.dirty)
                })
                .or_else(|| (!self.order.is_empty()).then_some(0));
            let Some(i) = victim else {
                break;
            };
            let Some((_, key)) = self.order.remove(i) else {
                break;
            };
            let Some(p) = self.requests.get_mut(&key) else {
                continue;
            };
            if p.versions == 0 || p.dirty {
                let c = if p.versions == 0 {
                    Completeness::Evicted
                } else {
                    Completeness::Amended
                };
                out.push(summary_of(&key, p, &self.prices, c));
                self.stats.evicted_requests += 1;
            }
            self.forget(&key);
        }
        out
    }
}

/// What the assembly thread wrote, reported when it stops.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AssembleTotals {
    /// Summaries handed to the `requests` table.
    pub summaries: u64,
    /// Request rows in completed files.
    pub request_rows: u64,
    /// Completed `requests` files.
    pub files: u64,
}

/// Assembly as a journal consumer: summaries go to the `requests` table through its own
/// archive. Its checkpoint is the first record with an item that is neither summarized into a
/// completed `requests` file nor past, so a restart rebuilds every open request.
pub struct AssembleConsumer {
    assembler: Assembler,
    archive: crate::archive::Archive,
    metrics: std::sync::Arc<crate::metrics::Metrics>,
    started: std::time::Instant,
    last_pressure: std::time::Instant,
    totals: AssembleTotals,
}

impl AssembleConsumer {
    /// Assembly writing through `archive`.
    pub fn new(
        assembler: Assembler,
        archive: crate::archive::Archive,
        metrics: std::sync::Arc<crate::metrics::Metrics>,
    ) -> AssembleConsumer {
        AssembleConsumer {
            assembler,
            archive,
            metrics,
            started: std::time::Instant::now(),
            last_pressure: std::time::Instant::now(),
            totals: AssembleTotals::default(),
        }
    }

    fn now_ms(&self) -> u64 {
        millis(self.started.elapsed())
    }

    fn write(&mut self, out: Vec<RequestSummary>) {
        for s in &out {
            self.metrics.request_summary(s.completeness.as_str());
        }
        self.totals.summaries += out.len() as u64;
        self.archive.append_summaries(&out);
    }
}

impl crate::journal::consume::Consumer for AssembleConsumer {
    type Totals = AssembleTotals;

    fn record(&mut self, seq: u64, entry: &crate::journal::codec::JournalEntry) {
        if let crate::journal::codec::JournalEntry::Events(batch) = entry {
            let now = self.now_ms();
            let out = self.assembler.ingest_record(batch, now, seq);
            self.write(out);
        }
    }

    fn tick(&mut self, next_seq: u64, head: &crate::journal::head::JournalHead) -> u64 {
        let out = self.assembler.due(self.now_ms());
        self.write(out);
        self.archive.complete_due(std::time::Instant::now());
        self.archive
            .relieve_journal(head, "assemble", next_seq, &mut self.last_pressure);
        self.metrics.assemble_state(
            self.assembler.requests_held(),
            self.assembler.spans_held(),
            self.assembler.stats().duplicate_spans,
        );
        // Open requests hold the journal back until they are summarized (a request that never
        // gets its root span: until `max_age`). When the journal fills up, assembly lets go of
        // them rather than make receivers refuse data: a crash then loses those requests'
        // earlier spans for their summaries (the spans themselves are archived).
        let open = if head.fill() > crate::archive::PRESSURE {
            None
        } else {
            self.assembler.oldest_unsummarized_record()
        };
        [open, self.archive.pinned_record()]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(next_seq)
            .min(next_seq)
    }

    fn finish(mut self, next_seq: u64) -> (u64, AssembleTotals) {
        let out = self.assembler.drain();
        self.write(out);
        self.metrics
            .assemble_state(0, 0, self.assembler.stats().duplicate_spans);
        let closed = self.archive.close();
        self.totals.request_rows = closed.request_rows;
        self.totals.files = closed.files;
        (
            self.archive.pinned_record().unwrap_or(next_seq),
            self.totals,
        )
    }
}

/// Summaries in the order they are written: by start, then request id.
fn sort_summaries(out: &mut [RequestSummary]) {
    out.sort_by(|a, b| (a.start_ns, &a.request_id).cmp(&(b.start_ns, &b.request_id)));
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn summary_of(
    key: &RequestKey,
    p: &mut Pending,
    prices: &PriceTable,
    completeness: Completeness,
) -> RequestSummary {
    p.versions += 1;
    p.dirty = false;
    let first_record = std::mem::replace(&mut p.unsummarized_from, u64::MAX);
    let request_id = match key {
        RequestKey::Named(_, r) => r.clone(),
        RequestKey::Trace(_, t) => hex_id(t),
    };
    let facts = RequestFacts {
        request_id: &request_id,
        tenant: &p.tenant,
        spans: &p.spans,
        logs: &p.logs,
    };
    let mut summary = summarize(&facts, prices, completeness, p.versions);
    summary.first_record = first_record;
    summary
}

#[cfg(test)]
mod tests;
