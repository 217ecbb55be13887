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

use crate::event::{hex_id, EventBatch, SpanId, TraceId};
use prices::PriceTable;
use summary::{summarize, Completeness, LogFacts, RequestFacts, RequestSummary, SpanFacts};

/// The `[assemble]` section of the config.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AssembleConfig {
    /// Quiet time after the root span ended before a request is summarized.
    #[serde(with = "humantime_serde_compat")]
    pub quiet_period: Duration,
    /// Age (since the first span arrived) after which a request is summarized as `timed_out`.
    #[serde(with = "humantime_serde_compat")]
    pub max_age: Duration,
    /// How long a summarized request is remembered so late spans amend it.
    #[serde(with = "humantime_serde_compat")]
    pub amend_window: Duration,
    /// Most requests held (open and remembered); beyond it the oldest goes.
    pub max_requests: usize,
    /// Most span facts held; beyond it the oldest request goes.
    pub max_spans: usize,
}

impl Default for AssembleConfig {
    fn default() -> Self {
        AssembleConfig {
            quiet_period: Duration::from_secs(5),
            max_age: Duration::from_secs(15 * 60),
            amend_window: Duration::from_secs(15 * 60),
            max_requests: 100_000,
            max_spans: 2_000_000,
        }
    }
}

/// Durations as humantime strings ("5s", "15m") in the config.
mod humantime_serde_compat {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&humantime::format_duration(*d).to_string())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(d)?;
        humantime::parse_duration(&text).map_err(serde::de::Error::custom)
    }
}

/// Which request a trace belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum RequestKey {
    /// Named by `executor.request_id` (per tenant).
    Named(String, String),
    /// Not (yet) named: the trace alone.
    Trace(TraceId),
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
        }
    }

    fn root_ended(&self) -> bool {
        self.spans.values().any(|s| s.parent.is_none())
    }

    fn absorb(&mut self, other: Pending) {
        self.spans.extend(other.spans);
        self.logs.extend(other.logs);
        self.first_arrival_ms = self.first_arrival_ms.min(other.first_arrival_ms);
        self.last_arrival_ms = self.last_arrival_ms.max(other.last_arrival_ms);
        self.versions = self.versions.max(other.versions);
        self.dirty |= other.dirty;
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
    traces: HashMap<TraceId, RequestKey>,
    requests: HashMap<RequestKey, Pending>,
    /// Keys in order of first arrival (stale entries are skipped when popped).
    order: VecDeque<(u64, RequestKey)>,
    spans_held: usize,
    stats: AssembleStats,
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
        for span in &batch.spans {
            let key = self.key_for(
                &span.tenant,
                span.trace_id,
                span.audit.request_id.as_deref(),
                now_ms,
            );
            let facts = SpanFacts::of(span);
            let Some(p) = self.requests.get_mut(&key) else {
                continue;
            };
            p.last_arrival_ms = now_ms;
            if p.spans.insert(facts.span_id, facts).is_some() {
                self.stats.duplicate_spans += 1;
            } else {
                self.spans_held += 1;
                p.dirty = true;
            }
        }
        for log in &batch.logs {
            let Some(facts) = LogFacts::of(log) else {
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
            if p.logs.insert(facts.key, facts).is_none() {
                p.dirty = true;
            }
        }
        self.enforce_limits()
    }

    /// Summaries due at `now_ms`: requests whose root ended and that were quiet long
    /// enough, those past the maximum age, and amendments. Forgets remembered requests whose
    /// amend window passed.
    pub fn due(&mut self, now_ms: u64) -> Vec<RequestSummary> {
        let quiet = self.config.quiet_period.as_millis() as u64;
        let max_age = self.config.max_age.as_millis() as u64;
        let window = self.config.amend_window.as_millis() as u64;
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
            } else if p.root_ended() && idle >= quiet {
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
        out.sort_by(|a, b| (a.start_ns, &a.request_id).cmp(&(b.start_ns, &b.request_id)));
        out
    }

    /// Summaries of everything still open or changed (at shutdown: open requests are
    /// written as `timed_out`, since their end was not seen).
    pub fn drain(&mut self) -> Vec<RequestSummary> {
        let mut out = Vec::new();
        for (key, p) in &mut self.requests {
            let c = match (p.versions, p.dirty) {
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
        out.sort_by(|a, b| (a.start_ns, &a.request_id).cmp(&(b.start_ns, &b.request_id)));
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
        let current = self.traces.get(&trace).cloned();
        let key = match (current, named) {
            (Some(k), None) => k,
            (Some(k), Some(n)) if k == n => k,
            (Some(RequestKey::Trace(t)), Some(n)) => {
                // The trace learned its request: fold what it held into the request.
                if let Some(p) = self.requests.remove(&RequestKey::Trace(t)) {
                    self.entry(&n, tenant, now_ms).absorb(p);
                }
                n
            }
            // A trace already named differently keeps its first request.
            (Some(k), Some(_)) => k,
            (None, Some(n)) => n,
            (None, None) => RequestKey::Trace(trace),
        };
        self.traces.insert(trace, key.clone());
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
            self.spans_held = self.spans_held.saturating_sub(p.spans.len());
            let traces: Vec<TraceId> = p.spans.values().map(|s| s.trace_id).collect();
            for t in traces.iter().chain(p.logs.values().map(|l| &l.trace_id)) {
                if self.traces.get(t) == Some(key) {
                    self.traces.remove(t);
                }
            }
            if let RequestKey::Trace(t) = key {
                self.traces.remove(t);
            }
        }
    }

    /// Makes room: remembered (already summarized) requests go first, oldest first; then
    /// the oldest open request, summarized as `evicted`.
    fn enforce_limits(&mut self) -> Vec<RequestSummary> {
        let mut out = Vec::new();
        while self.requests.len() > self.config.max_requests
            || self.spans_held > self.config.max_spans
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

fn summary_of(
    key: &RequestKey,
    p: &mut Pending,
    prices: &PriceTable,
    completeness: Completeness,
) -> RequestSummary {
    p.versions += 1;
    p.dirty = false;
    let request_id = match key {
        RequestKey::Named(_, r) => r.clone(),
        RequestKey::Trace(t) => hex_id(t),
    };
    let facts = RequestFacts {
        request_id: &request_id,
        tenant: &p.tenant,
        spans: &p.spans,
        logs: &p.logs,
    };
    summarize(&facts, prices, completeness, p.versions)
}

#[cfg(test)]
mod tests;
