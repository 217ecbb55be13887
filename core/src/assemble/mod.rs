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
//!
//! Assembly owns the `requests` table's rows and schema ([`rows`]) and writes them through an
//! archive sink of its own (`archive::Archive::append_rows`).

pub mod prices;
pub mod rows;
pub mod summary;

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::event::{hex_id, EventBatch, SpanId, TraceId};
use crate::maps::FastMap;
use crate::memory::{Holder, MemoryBudget};
use crate::units::{HumanDuration, PositiveUsize};
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
pub const SAMPLE_PRICES: &str = include_str!("../../../config/prices.toml");

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

/// A request's number inside the assembler (never reused).
type RequestNo = u64;

/// Requests with more spans than this get their call findings at the summary only.
const EARLY_FINDINGS_MAX_SPANS: usize = 256;

/// No deadline scheduled, no record unsummarized.
const NEVER: u64 = u64::MAX;

/// One request being assembled, or remembered after its summary for amendments.
struct Pending {
    key: RequestKey,
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
    /// The first journal record with an item not yet in a summary ([`NEVER`]: none).
    unsummarized_from: u64,
    /// The deadline this request has in the assembler's timer heap ([`NEVER`]: none).
    scheduled_ms: u64,
    /// The findings its last summary showed, by finding id.
    reported: BTreeMap<String, crate::findings::Finding>,
}

impl Pending {
    fn new(key: RequestKey, tenant: &str, now_ms: u64) -> Pending {
        Pending {
            key,
            tenant: tenant.to_string(),
            request_id: None,
            spans: BTreeMap::new(),
            logs: BTreeMap::new(),
            first_arrival_ms: now_ms,
            last_arrival_ms: now_ms,
            versions: 0,
            dirty: false,
            root_ended: false,
            unsummarized_from: NEVER,
            scheduled_ms: NEVER,
            reported: BTreeMap::new(),
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
        self.reported.extend(other.reported);
    }

    /// The earliest moment something may be due for this request, given its state now.
    fn next_deadline(&self, limits: &Limits) -> u64 {
        let after = |t: u64, d: u64| t.saturating_add(d);
        if self.versions > 0 {
            if self.dirty {
                after(self.last_arrival_ms, limits.quiet)
            } else {
                after(self.last_arrival_ms, limits.window)
            }
        } else {
            let timed_out = after(self.first_arrival_ms, limits.max_age);
            if self.root_ended {
                timed_out.min(after(self.last_arrival_ms, limits.quiet))
            } else {
                timed_out
            }
        }
    }

    /// What is due for this request at `now_ms`.
    fn due(&self, now_ms: u64, limits: &Limits) -> Due {
        let idle = now_ms.saturating_sub(self.last_arrival_ms);
        let age = now_ms.saturating_sub(self.first_arrival_ms);
        if self.versions > 0 {
            if self.dirty && idle >= limits.quiet {
                Due::Summary(Completeness::Amended)
            } else if !self.dirty && idle >= limits.window {
                Due::Forget
            } else {
                Due::Nothing
            }
        } else if self.root_ended && idle >= limits.quiet {
            Due::Summary(Completeness::Complete)
        } else if age >= limits.max_age {
            Due::Summary(Completeness::TimedOut)
        } else {
            Due::Nothing
        }
    }
}

/// What a request's deadline brings.
enum Due {
    Summary(Completeness),
    Forget,
    Nothing,
}

/// The configured periods, in ms.
struct Limits {
    quiet: u64,
    max_age: u64,
    window: u64,
}

/// The requests of one tenant, found by name or by trace without building a key.
#[derive(Default)]
struct TenantRequests {
    by_name: FastMap<Box<str>, RequestNo>,
    /// Trace → the request it belongs to (named, or the trace's own).
    by_trace: FastMap<TraceId, RequestNo>,
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
///
/// Per item the work does not grow with the requests held: requests are found through
/// per-tenant maps by borrowed name or trace id, deadlines wait in a timer heap (a tick
/// handles the requests that came due, not every request), and the oldest unsummarized
/// journal record is kept in an ordered count.
pub struct Assembler {
    config: AssembleConfig,
    limits: Limits,
    prices: PriceTable,
    tenants: FastMap<Box<str>, TenantRequests>,
    requests: FastMap<RequestNo, Pending>,
    next_no: RequestNo,
    /// (deadline ms, request); an entry whose deadline is not the request's `scheduled_ms`
    /// is stale and skipped.
    deadlines: BinaryHeap<Reverse<(u64, RequestNo)>>,
    /// Requests in order of first arrival (stale entries are skipped when popped).
    order: VecDeque<RequestNo>,
    /// Requests in the order they were summarized: the first to make room.
    remembered: VecDeque<RequestNo>,
    /// How many requests hold each first unsummarized journal record.
    unsummarized: BTreeMap<u64, usize>,
    spans_held: usize,
    stats: AssembleStats,
    strings: summary::Interner,
    findings: crate::findings::FindingsConfig,
    /// Findings raised as their calls arrived, not yet taken by the writer.
    early_findings: Vec<crate::findings::rows::FindingRow>,
    /// Where what is held is counted; over its allowance, requests go as over the limits.
    memory: Arc<MemoryBudget>,
}

/// Memory of one span's or log record's facts, measured (see `[assemble] max_spans`).
const FACT_BYTES: usize = 530;
/// Memory of one request held, besides its facts' (its entry, summary state and order).
const REQUEST_BYTES: usize = 400;

impl Assembler {
    /// An assembler with the given limits and prices.
    pub fn new(config: AssembleConfig, prices: PriceTable) -> Assembler {
        Assembler {
            limits: Limits {
                quiet: millis(config.quiet_period.0),
                max_age: millis(config.max_age.0),
                window: millis(config.amend_window.0),
            },
            config,
            prices,
            tenants: FastMap::default(),
            requests: FastMap::default(),
            next_no: 0,
            deadlines: BinaryHeap::new(),
            order: VecDeque::new(),
            remembered: VecDeque::new(),
            unsummarized: BTreeMap::new(),
            spans_held: 0,
            stats: AssembleStats::default(),
            strings: summary::Interner::default(),
            findings: crate::findings::FindingsConfig::default(),
            early_findings: Vec::new(),
            memory: MemoryBudget::unbounded(),
        }
    }

    /// The same, holding at most its allowance of `memory` (see [`crate::memory`]).
    pub fn with_memory(mut self, memory: Arc<MemoryBudget>) -> Assembler {
        self.memory = memory;
        self
    }

    /// About how much memory the requests held take.
    fn held_bytes(&self) -> usize {
        self.spans_held * FACT_BYTES + self.requests.len() * REQUEST_BYTES
    }

    /// True when what is held is over the memory budget's allowance (and says what it is).
    fn over_memory(&self) -> bool {
        self.memory.set(Holder::Assembly, self.held_bytes());
        self.memory.over(Holder::Assembly)
    }

    /// The same, with which findings rules run for which tenant and how much they matter.
    pub fn with_findings(mut self, findings: crate::findings::FindingsConfig) -> Assembler {
        self.findings = findings;
        self
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

    /// The findings raised as their calls arrived since the last call (`open` rows, before or
    /// between summary versions).
    pub fn take_early_findings(&mut self) -> Vec<crate::findings::rows::FindingRow> {
        std::mem::take(&mut self.early_findings)
    }

    /// The first journal record with an item of a request not yet summarized: replaying from
    /// there rebuilds every open request.
    pub fn oldest_unsummarized_record(&self) -> Option<u64> {
        self.unsummarized.keys().next().copied()
    }

    /// [`Assembler::ingest`] for journal record `seq`.
    pub fn ingest_record(
        &mut self,
        batch: &EventBatch,
        now_ms: u64,
        seq: u64,
    ) -> Vec<RequestSummary> {
        // Requests that took a call this record: their call findings are decided now.
        let mut calls_arrived: Vec<RequestNo> = Vec::new();
        for span in &batch.spans {
            let no = self.request_for(
                &span.tenant,
                span.trace_id,
                span.audit.request_id.as_deref(),
                now_ms,
            );
            let facts = SpanFacts::of(span, &mut self.strings);
            let root = facts.parent.is_none();
            let call =
                facts.class == crate::event::SpanClass::Tool || !facts.secrets_sent.is_empty();
            let Some(p) = self.requests.get_mut(&no) else {
                continue;
            };
            p.root_ended |= root;
            if p.spans.insert(facts.span_id, facts).is_some() {
                self.stats.duplicate_spans += 1;
            } else {
                self.spans_held += 1;
                p.dirty = true;
                if call && calls_arrived.last() != Some(&no) {
                    calls_arrived.push(no);
                }
            }
            self.arrived(no, now_ms, seq);
        }
        for log in &batch.logs {
            let Some(facts) = LogFacts::of(log, &mut self.strings) else {
                continue;
            };
            let no = self.request_for(
                &log.tenant,
                facts.trace_id,
                log.audit.request_id.as_deref(),
                now_ms,
            );
            let Some(p) = self.requests.get_mut(&no) else {
                continue;
            };
            if p.logs.insert(facts.key, facts).is_none() {
                // Log facts count against the same bound as span facts.
                self.spans_held += 1;
                p.dirty = true;
            }
            self.arrived(no, now_ms, seq);
        }
        // After the record's logs too: a decision may come in a log record beside its call.
        calls_arrived.sort_unstable();
        calls_arrived.dedup();
        for no in calls_arrived {
            if let Some(p) = self.requests.get_mut(&no) {
                self.early_findings
                    .extend(early_findings(p, &self.findings, seq));
            }
        }
        self.enforce_limits()
    }

    /// Something of request `no` arrived in record `seq`: its times, its unsummarized record
    /// and, when that makes it due sooner, its deadline.
    fn arrived(&mut self, no: RequestNo, now_ms: u64, seq: u64) {
        let Some(p) = self.requests.get_mut(&no) else {
            return;
        };
        p.last_arrival_ms = now_ms;
        if seq < p.unsummarized_from {
            count_down(&mut self.unsummarized, p.unsummarized_from);
            p.unsummarized_from = seq;
            *self.unsummarized.entry(seq).or_default() += 1;
        }
        let next = p.next_deadline(&self.limits);
        if next < p.scheduled_ms {
            p.scheduled_ms = next;
            self.deadlines.push(Reverse((next, no)));
        }
    }

    /// The earliest deadline in the timer heap (ms on the assembler's clock; it may be a stale
    /// one, which only wakes a tick early).
    pub fn next_deadline_ms(&self) -> Option<u64> {
        self.deadlines.peek().map(|Reverse((at, _))| *at)
    }

    /// Summaries due at `now_ms`: requests whose root ended and that were quiet long
    /// enough, those past the maximum age, and amendments. Forgets remembered requests whose
    /// amend window passed.
    pub fn due(&mut self, now_ms: u64) -> Vec<RequestSummary> {
        let mut out = Vec::new();
        while let Some(&Reverse((at, no))) = self.deadlines.peek() {
            if at > now_ms {
                break;
            }
            self.deadlines.pop();
            let Some(p) = self.requests.get_mut(&no) else {
                continue;
            };
            if p.scheduled_ms != at {
                continue; // a stale entry: the request was rescheduled
            }
            match p.due(now_ms, &self.limits) {
                Due::Forget => {
                    self.forget(no);
                    continue;
                }
                Due::Summary(c) => {
                    count_down(&mut self.unsummarized, p.unsummarized_from);
                    out.push(summary_of(p, &self.prices, &self.findings, c));
                    self.remembered.push_back(no);
                }
                Due::Nothing => {}
            }
            p.scheduled_ms = p.next_deadline(&self.limits);
            self.deadlines.push(Reverse((p.scheduled_ms, no)));
        }
        // Requests forgotten or folded into another leave stale entries behind; sweep them
        // once they are as many as the live ones, not on every tick.
        let requests = &self.requests;
        if self.order.len() > 2 * requests.len() {
            self.order.retain(|k| requests.contains_key(k));
        }
        if self.remembered.len() > 2 * requests.len() {
            self.remembered.retain(|k| requests.contains_key(k));
        }
        if self.deadlines.len() > 2 * requests.len() + 64 {
            self.deadlines
                .retain(|Reverse((at, k))| requests.get(k).is_some_and(|p| p.scheduled_ms == *at));
        }
        // What was forgotten is counted now, and a stage that came back for its share of
        // the memory budget need not wait for the next record to have it.
        out.extend(self.enforce_limits());
        sort_summaries(&mut out);
        out
    }

    /// Summaries of everything still open or changed, at shutdown: a request whose root
    /// ended is `complete`, one whose root was not seen `timed_out`.
    pub fn drain(&mut self) -> Vec<RequestSummary> {
        let mut out = Vec::new();
        for p in self.requests.values_mut() {
            let c = match (p.versions, p.dirty) {
                // Shutdown comes before the quiet period could pass: an ended root is enough.
                (0, _) if p.root_ended => Completeness::Complete,
                (0, _) => Completeness::TimedOut,
                (_, true) => Completeness::Amended,
                (_, false) => continue,
            };
            out.push(summary_of(p, &self.prices, &self.findings, c));
        }
        self.requests.clear();
        self.tenants.clear();
        self.deadlines.clear();
        self.order.clear();
        self.remembered.clear();
        self.unsummarized.clear();
        self.spans_held = 0;
        sort_summaries(&mut out);
        out
    }

    /// The request a trace's item belongs to, creating or merging as needed.
    fn request_for(
        &mut self,
        tenant: &str,
        trace: TraceId,
        request_id: Option<&str>,
        now_ms: u64,
    ) -> RequestNo {
        let named = request_id.filter(|r| !r.is_empty());
        if !self.tenants.contains_key(tenant) {
            self.tenants
                .insert(tenant.into(), TenantRequests::default());
        }
        let Some(t) = self.tenants.get_mut(tenant) else {
            unreachable!("inserted above")
        };
        let current = t.by_trace.get(&trace).copied();
        let by_name = |t: &TenantRequests, r: &str| t.by_name.get(r).copied();
        match (current, named) {
            (Some(no), None) => no,
            (Some(no), Some(r)) => {
                let by_trace_only = self
                    .requests
                    .get(&no)
                    .is_some_and(|p| matches!(p.key, RequestKey::Trace(..)));
                match by_trace_only {
                    // A trace already named keeps its first request.
                    false => no,
                    true => {
                        // The trace learned its request: fold what it held into the request.
                        let target = match by_name(t, r) {
                            Some(n) => n,
                            None => self.create(
                                RequestKey::Named(tenant.into(), r.into()),
                                tenant,
                                now_ms,
                            ),
                        };
                        self.fold(no, target, trace, tenant);
                        target
                    }
                }
            }
            (None, Some(r)) => {
                let no = match by_name(t, r) {
                    Some(n) => n,
                    None => self.create(RequestKey::Named(tenant.into(), r.into()), tenant, now_ms),
                };
                self.map_trace(tenant, trace, no);
                no
            }
            (None, None) => {
                let no = self.create(RequestKey::Trace(tenant.into(), trace), tenant, now_ms);
                self.map_trace(tenant, trace, no);
                no
            }
        }
    }

    fn map_trace(&mut self, tenant: &str, trace: TraceId, no: RequestNo) {
        if let Some(t) = self.tenants.get_mut(tenant) {
            t.by_trace.insert(trace, no);
        }
    }

    fn create(&mut self, key: RequestKey, tenant: &str, now_ms: u64) -> RequestNo {
        let no = self.next_no;
        self.next_no += 1;
        let mut p = Pending::new(key, tenant, now_ms);
        if let RequestKey::Named(_, r) = &p.key {
            p.request_id = Some(r.clone());
            if let Some(t) = self.tenants.get_mut(tenant) {
                t.by_name.insert(r.as_str().into(), no);
            }
        }
        p.scheduled_ms = p.next_deadline(&self.limits);
        self.deadlines.push(Reverse((p.scheduled_ms, no)));
        self.requests.insert(no, p);
        self.order.push_back(no);
        no
    }

    /// Moves what trace-keyed request `from` held into `into`, and the trace with it.
    fn fold(&mut self, from: RequestNo, into: RequestNo, trace: TraceId, tenant: &str) {
        self.map_trace(tenant, trace, into);
        let Some(p) = self.requests.remove(&from) else {
            return;
        };
        count_down(&mut self.unsummarized, p.unsummarized_from);
        let Some(target) = self.requests.get_mut(&into) else {
            return;
        };
        let before = target.unsummarized_from;
        target.absorb(p);
        if target.unsummarized_from != before {
            count_down(&mut self.unsummarized, before);
            *self
                .unsummarized
                .entry(target.unsummarized_from)
                .or_default() += 1;
        }
        let next = target.next_deadline(&self.limits);
        if next < target.scheduled_ms {
            target.scheduled_ms = next;
            self.deadlines.push(Reverse((next, into)));
        }
    }

    fn forget(&mut self, no: RequestNo) {
        let Some(p) = self.requests.remove(&no) else {
            return;
        };
        self.spans_held = self.spans_held.saturating_sub(p.spans.len() + p.logs.len());
        count_down(&mut self.unsummarized, p.unsummarized_from);
        let Some(t) = self.tenants.get_mut(p.tenant.as_str()) else {
            return;
        };
        let traces = p.spans.values().map(|s| s.trace_id);
        for trace in traces.chain(p.logs.values().map(|l| l.trace_id)) {
            if t.by_trace.get(&trace) == Some(&no) {
                t.by_trace.remove(&trace);
            }
        }
        match &p.key {
            RequestKey::Trace(_, trace) => {
                if t.by_trace.get(trace) == Some(&no) {
                    t.by_trace.remove(trace);
                }
            }
            RequestKey::Named(_, r) => {
                if t.by_name.get(r.as_str()) == Some(&no) {
                    t.by_name.remove(r.as_str());
                }
            }
        }
        if t.by_name.is_empty() && t.by_trace.is_empty() {
            self.tenants.remove(p.tenant.as_str());
        }
    }

    /// The next request to make room: a remembered (summarized, unchanged) one first, oldest
    /// summary first; else the oldest open one.
    fn victim(&mut self) -> Option<RequestNo> {
        while let Some(&no) = self.remembered.front() {
            self.remembered.pop_front();
            if self
                .requests
                .get(&no)
                .is_some_and(|p| p.versions > 0 && !p.dirty)
            {
                return Some(no);
            }
        }
        while let Some(no) = self.order.pop_front() {
            if self.requests.contains_key(&no) {
                return Some(no);
            }
        }
        None
    }

    /// Makes room: remembered (already summarized) requests go first, oldest first; then
    /// the oldest open request, summarized as `evicted`. The same while what is held is over
    /// the memory budget's allowance.
    fn enforce_limits(&mut self) -> Vec<RequestSummary> {
        let mut out = Vec::new();
        while self.requests.len() > self.config.max_requests.0
            || self.spans_held > self.config.max_spans.0
            || self.over_memory()
        {
            let Some(no) = self.victim() else {
                break;
            };
            let Some(p) = self.requests.get_mut(&no) else {
                continue;
            };
            if p.versions == 0 || p.dirty {
                let c = if p.versions == 0 {
                    Completeness::Evicted
                } else {
                    Completeness::Amended
                };
                count_down(&mut self.unsummarized, p.unsummarized_from);
                out.push(summary_of(p, &self.prices, &self.findings, c));
                self.stats.evicted_requests += 1;
            }
            self.forget(no);
        }
        self.memory.set(Holder::Assembly, self.held_bytes());
        out
    }
}

/// One fewer request holds record `seq` as its first unsummarized one.
fn count_down(counts: &mut BTreeMap<u64, usize>, seq: u64) {
    if seq == NEVER {
        return;
    }
    if let Some(n) = counts.get_mut(&seq) {
        *n -= 1;
        if *n == 0 {
            counts.remove(&seq);
        }
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
    totals: AssembleTotals,
    /// Where findings go besides the table: the alarm targets, and the journal for the
    /// export endpoints.
    alarms: Option<FindingAlarms>,
}

/// The alarm targets findings are sent to.
pub struct FindingAlarms {
    /// Webhook and Alertmanager targets (shared with the budget stage).
    pub delivery: crate::budget::deliver::Delivery,
    /// The journal, for OTLP log records to the export endpoints (none without endpoints).
    pub export: Option<crate::budget::AlarmJournal>,
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
            archive: archive.for_consumer("assemble"),
            metrics,
            started: std::time::Instant::now(),
            totals: AssembleTotals::default(),
            alarms: None,
        }
    }

    /// The same, sending findings to the alarm targets too.
    pub fn with_alarms(mut self, alarms: FindingAlarms) -> AssembleConsumer {
        self.alarms = Some(alarms);
        self
    }

    fn send_findings(&self, rows: &[crate::findings::rows::FindingRow]) {
        let Some(FindingAlarms { delivery, export }) = &self.alarms else {
            return;
        };
        let now = crate::clock::now_ns();
        let alarms: Vec<_> = rows
            .iter()
            .map(|r| crate::findings::notice::alarm_of(r, now))
            .collect();
        delivery.offer(&alarms);
        if let Some(export) = export {
            export.append(&alarms, &self.metrics);
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
        self.archive.append_rows(&out);
        let mut findings = self.assembler.take_early_findings();
        findings.extend(out.into_iter().flat_map(|s| s.finding_rows));
        for f in &findings {
            if f.status == crate::findings::rows::FindingStatus::Open {
                self.metrics.finding(
                    &f.finding.tenant,
                    f.finding.rule.id(),
                    f.finding.severity.as_str(),
                );
            }
        }
        if !findings.is_empty() {
            self.archive.append_rows(&findings);
            self.send_findings(&findings);
        }
    }
}

impl crate::journal::consume::Consumer for AssembleConsumer {
    type Totals = AssembleTotals;

    fn record(&mut self, seq: u64, entry: &std::sync::Arc<crate::journal::codec::JournalEntry>) {
        if let crate::journal::codec::JournalEntry::Events(batch) = &**entry {
            let now = self.now_ms();
            let out = self.assembler.ingest_record(batch, now, seq);
            self.write(out);
        }
    }

    fn flush_due_in(&self) -> Option<std::time::Duration> {
        self.archive.flush_due_in(std::time::Instant::now())
    }

    fn tick_due_in(&self) -> Option<std::time::Duration> {
        let flush = self.flush_due_in();
        // The next summary due: an idle daemon writes it when its quiet period ends, so the
        // next reader's flush finds it.
        let summary = self
            .assembler
            .next_deadline_ms()
            .map(|at| std::time::Duration::from_millis(at.saturating_sub(self.now_ms())));
        match (flush, summary) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn tick(&mut self, next_seq: u64, head: &crate::journal::head::JournalHead) -> u64 {
        let out = self.assembler.due(self.now_ms());
        self.write(out);
        let level = head.pressure();
        let pressure = level != crate::journal::head::Pressure::None;
        let pinned = self
            .archive
            .tick(std::time::Instant::now(), next_seq, level);
        self.metrics.assemble_state(
            self.assembler.requests_held(),
            self.assembler.spans_held(),
            self.assembler.stats().duplicate_spans,
        );
        // Open requests hold the journal back until they are summarized (a request that never
        // gets its root span: until `max_age`). When the journal fills up, assembly lets go of
        // them rather than make receivers refuse data: a crash then loses those requests'
        // earlier spans for their summaries (the spans themselves are archived).
        let open = if pressure {
            None
        } else {
            self.assembler.oldest_unsummarized_record()
        };
        [open, pinned]
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
    p: &mut Pending,
    prices: &PriceTable,
    findings: &crate::findings::FindingsConfig,
    completeness: Completeness,
) -> RequestSummary {
    p.versions += 1;
    p.dirty = false;
    let first_record = std::mem::replace(&mut p.unsummarized_from, NEVER);
    let request_id = match &p.key {
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
    let registry = findings.registry_for(&p.tenant);
    let shown = findings.apply(
        &p.tenant,
        crate::findings::evaluate(&facts, &summary, registry),
    );
    findings_of(p, shown, &mut summary);
    summary
}

/// Call findings a request shows before its summary (or between versions): raised at once
/// as `open` rows. Only requests known by their `executor.request_id` (a request known by
/// its trace alone may still be folded into a named one, which would change the finding's
/// id). Nothing is withdrawn here: a finding a later span takes back is withdrawn by the
/// next summary version, which sees the whole request.
fn early_findings(
    p: &mut Pending,
    findings: &crate::findings::FindingsConfig,
    seq: u64,
) -> Vec<crate::findings::rows::FindingRow> {
    use crate::findings::rows::{finding_id, FindingRow, FindingStatus};
    let RequestKey::Named(_, request_id) = &p.key else {
        return Vec::new();
    };
    // Each evaluation walks the whole request (pairs of calls for retries and overlaps): a
    // request this large is left to its summary rather than re-walked per record.
    if p.spans.len() > EARLY_FINDINGS_MAX_SPANS {
        return Vec::new();
    }
    let facts = RequestFacts {
        request_id,
        tenant: &p.tenant,
        spans: &p.spans,
        logs: &p.logs,
    };
    let found = findings.apply(
        &p.tenant,
        crate::findings::evaluate_calls(&facts, findings.registry_for(&p.tenant)),
    );
    let end_ns = p.spans.values().map(|s| s.end_ns).max().unwrap_or(0);
    let mut rows = Vec::new();
    for f in found {
        let id = finding_id(&f);
        if p.reported.contains_key(&id) {
            continue;
        }
        rows.push(FindingRow {
            finding: f.clone(),
            finding_id: id.clone(),
            status: FindingStatus::Open,
            time_ns: end_ns,
            // The version that will first show it.
            summary_version: p.versions + 1,
            first_record: seq,
        });
        p.reported.insert(id, f);
    }
    rows
}

/// The findings rows of a new summary version: those it shows that the last did not
/// (`open`), and those the last showed that it does not (`withdrawn`); unchanged ones are not
/// written again.
fn findings_of(p: &mut Pending, shown: Vec<crate::findings::Finding>, s: &mut RequestSummary) {
    use crate::findings::rows::{finding_id, FindingRow, FindingStatus};
    // Event time, not the clock: the same request gives the same rows, in its summary's
    // partition day.
    let now = s.end_ns;
    let shown: BTreeMap<String, crate::findings::Finding> =
        shown.into_iter().map(|f| (finding_id(&f), f)).collect();
    let row = |id: &String, f: &crate::findings::Finding, status| FindingRow {
        finding: f.clone(),
        finding_id: id.clone(),
        status,
        time_ns: now,
        summary_version: s.summary_version,
        first_record: s.first_record,
    };
    let mut rows: Vec<FindingRow> = shown
        .iter()
        .filter(|(id, _)| !p.reported.contains_key(*id))
        .map(|(id, f)| row(id, f, FindingStatus::Open))
        .collect();
    rows.extend(
        p.reported
            .iter()
            .filter(|(id, _)| !shown.contains_key(*id))
            .map(|(id, f)| row(id, f, FindingStatus::Withdrawn)),
    );
    s.findings = shown.len() as u64;
    s.finding_rows = rows;
    p.reported = shown;
}

#[cfg(test)]
mod tests;
