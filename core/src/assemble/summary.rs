//! One request's summary, computed from the facts assembly keeps of its spans and logs.
//!
//! `summarize` is a pure function of the sets of span and log facts: the order they arrived
//! in, duplicates and the batches they came in cannot change it (a property test checks).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::prices::{disagrees, PriceTable, TokenCounts};
use crate::event::{
    hex_id, LogRecord, McpCallKey, McpSide, SpanClass, SpanId, SpanKind, SpanRecord, StatusCode,
    TraceId,
};

/// A short repeated string (model, tool, principal, decision), shared between the span facts
/// that hold it.
pub type Text = Arc<str>;

/// Shares equal short strings between span facts: a held span costs a pointer per field
/// rather than an allocation. Bounded: past `LIMIT` distinct strings it starts over (strings
/// already shared stay valid).
#[derive(Debug, Default)]
pub struct Interner(crate::maps::FastSet<Arc<str>>);

impl Interner {
    const LIMIT: usize = 65_536;

    /// The shared copy of `s`.
    pub fn text(&mut self, s: &str) -> Text {
        if let Some(t) = self.0.get(s) {
            return Arc::clone(t);
        }
        if self.0.len() >= Self::LIMIT {
            self.0.clear();
        }
        let t: Arc<str> = Arc::from(s);
        self.0.insert(Arc::clone(&t));
        t
    }

    fn opt(&mut self, s: &Option<String>) -> Option<Text> {
        s.as_deref().map(|s| self.text(s))
    }
}

/// What assembly keeps of a span: the fields a summary needs, not its attributes or text.
#[derive(Debug, Clone, PartialEq)]
pub struct SpanFacts {
    /// Trace id.
    pub trace_id: TraceId,
    /// Span id.
    pub span_id: SpanId,
    /// Parent span id.
    pub parent: Option<SpanId>,
    /// Audit class.
    pub class: SpanClass,
    /// OTLP span kind: a `SERVER` or `CONSUMER` span of another service is a downstream call
    /// seen from its callee's side.
    pub kind: SpanKind,
    /// `service.name` of the span's resource (shared: a request has few services), to tell a
    /// call into another service from dispatch within one.
    pub service: Text,
    /// Start, ns.
    pub start_ns: i64,
    /// End, ns.
    pub end_ns: i64,
    /// The span ended in error.
    pub error: bool,
    /// Principal, if the span names one.
    pub principal: Option<Text>,
    /// Provider and model (response model, else request model) of a model call.
    pub provider: Option<Text>,
    /// See `provider`.
    pub model: Option<Text>,
    /// Token counts of a model call.
    pub tokens: TokenCounts,
    /// Cache-creation input tokens.
    pub cache_creation: i64,
    /// Tool name of a tool call.
    pub tool: Option<Text>,
    /// `executor.*` facts.
    pub decision: Decision,
    /// Retry attempt (0 or absent: first attempt).
    pub retry_attempt: i64,
    /// Result code.
    pub result_code: Option<Text>,
    /// Stop reason.
    pub stop_reason: Option<Text>,
    /// Cost the executor claims.
    pub claimed_cost_usd: Option<f64>,
    /// The executor says the work was cancelled.
    pub cancelled: bool,
    /// What only a tool call has (boxed: most spans are not calls).
    pub call: Option<Box<CallFacts>>,
    /// Fingerprints of the credentials protect removed from what this span sends out.
    pub secrets_sent: Box<[u64]>,
}

/// What assembly keeps of a tool call beyond what every span has.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CallFacts {
    /// `executor.effect_class`.
    pub effect: Option<Text>,
    /// `executor.idempotency_key_hash` (the keyed hash `protect` made).
    pub idempotency_key: Option<Text>,
    /// `executor.resource_id`.
    pub resource_id: Option<Text>,
    /// Tool name and canonical arguments, digested (after redaction).
    pub call_digest: Option<crate::budget::digest::CallDigest>,
    /// `executor.resource_tenant_id`.
    pub resource_tenant: Option<Text>,
    /// `executor.tool_schema_version`.
    pub tool_schema_version: Option<Text>,
    /// Fingerprints of the credentials protect removed from its result.
    pub secrets_returned: Vec<u64>,
    /// Whether its `executor.confirmation_digest` is the digest protect computed from its
    /// arguments before redaction (none: no confirmation digest sent).
    pub digest_matches: Option<bool>,
    /// The side and identity of the MCP `tools/call` it records (see `SpanRecord::mcp_call`).
    pub mcp_call: Option<(McpSide, McpCallKey)>,
}

/// The call facts of a span that is not a call: all absent.
static NO_CALL: CallFacts = CallFacts {
    effect: None,
    idempotency_key: None,
    resource_id: None,
    call_digest: None,
    resource_tenant: None,
    tool_schema_version: None,
    secrets_returned: Vec::new(),
    digest_matches: None,
    mcp_call: None,
};

/// Policy and confirmation facts, from a span, its events or a log record.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Decision {
    /// `executor.policy_decision`.
    pub policy: Option<Text>,
    /// `executor.confirmation_status`.
    pub confirmation: Option<Text>,
}

impl Decision {
    pub(crate) fn merge(&mut self, other: &Decision) {
        if self.policy.is_none() {
            self.policy.clone_from(&other.policy);
        }
        if self.confirmation.is_none() {
            self.confirmation.clone_from(&other.confirmation);
        }
    }
}

/// What assembly keeps of a log record that carries trace context.
#[derive(Debug, Clone, PartialEq)]
pub struct LogFacts {
    /// Identity for de-duplication: time, span and a digest of the body and attributes.
    pub key: (i64, Option<SpanId>, u64),
    /// Trace id.
    pub trace_id: TraceId,
    /// Span the record belongs to, if any.
    pub span_id: Option<SpanId>,
    /// Time, ns.
    pub time_ns: i64,
    /// Policy and confirmation facts.
    pub decision: Decision,
    /// Severity is ERROR or worse.
    pub error: bool,
    /// Claimed cost, stop reason and cancellation carried by the record.
    pub claimed_cost_usd: Option<f64>,
    /// See `claimed_cost_usd`.
    pub stop_reason: Option<Text>,
    /// See `claimed_cost_usd`.
    pub cancelled: bool,
}

impl SpanFacts {
    /// Its call facts (all absent when it is not a tool call).
    pub fn call(&self) -> &CallFacts {
        self.call.as_deref().unwrap_or(&NO_CALL)
    }

    /// The facts of a (protected) span.
    pub fn of(span: &SpanRecord, strings: &mut Interner) -> SpanFacts {
        let g = &span.gen_ai;
        let a = &span.audit;
        let tool = span.class == SpanClass::Tool;
        let mut decision = Decision {
            policy: strings.opt(&a.policy_decision),
            confirmation: strings.opt(&a.confirmation_status),
        };
        for e in &span.events {
            for (k, v) in &e.attributes.0 {
                let slot = match k.as_str() {
                    "executor.policy_decision" => &mut decision.policy,
                    "executor.confirmation_status" => &mut decision.confirmation,
                    _ => continue,
                };
                if slot.is_none() {
                    *slot = v.as_str().map(|s| strings.text(s));
                }
            }
        }
        SpanFacts {
            trace_id: span.trace_id,
            span_id: span.span_id,
            parent: span.parent_span_id,
            class: span.class,
            kind: span.kind,
            service: strings.text(&span.resource.service_name),
            start_ns: span.start_ns,
            end_ns: span.end_ns,
            error: span.status_code == StatusCode::Error,
            principal: strings.opt(&a.principal_id),
            provider: strings.opt(&g.provider),
            model: g
                .response_model
                .as_deref()
                .or(g.request_model.as_deref())
                .map(|m| strings.text(m)),
            tokens: TokenCounts {
                input: g.input_tokens.unwrap_or(0),
                output: g.output_tokens.unwrap_or(0),
                cache_read: g.cache_read_input_tokens.unwrap_or(0),
            },
            cache_creation: g.cache_creation_input_tokens.unwrap_or(0),
            tool: strings.opt(&g.tool_name),
            decision,
            retry_attempt: a.retry_attempt.unwrap_or(0),
            result_code: strings.opt(&a.result_code),
            stop_reason: strings.opt(&a.stop_reason),
            claimed_cost_usd: a.claimed_cost_usd,
            cancelled: a.cancelled.unwrap_or(false),
            call: tool.then(|| {
                Box::new(CallFacts {
                    effect: strings.opt(&a.effect_class),
                    idempotency_key: strings.opt(&a.idempotency_key_hash),
                    resource_id: strings.opt(&a.resource_id),
                    call_digest: retry_evidence(span).then(|| span.call_digest()),
                    resource_tenant: resource_tenant(span).map(|t| strings.text(&t)),
                    secrets_returned: trail_of(span, crate::protect::confirmation::RETURNED_KEY)
                        .into_vec(),
                    tool_schema_version: strings.opt(&a.tool_schema_version),
                    digest_matches: digest_matches(span),
                    mcp_call: span.mcp_call(),
                })
            }),
            secrets_sent: trail_of(span, crate::protect::confirmation::SENT_KEY),
        }
    }
}

impl RequestFacts<'_> {
    /// Tool spans that are the server's side of an MCP call whose client side is a tool span
    /// of the request too: the same call seen twice, counted (and judged) once, as the
    /// client's. A client pairs with one server span (the earliest); another server span of
    /// the same call is a call of its own, as the budget evaluator counts it.
    pub fn mcp_echoes(&self) -> BTreeSet<SpanId> {
        let sides = || {
            self.spans.values().filter_map(|s| {
                s.call()
                    .mcp_call
                    .map(|(side, key)| (s.start_ns, s.span_id, side, key))
            })
        };
        let mut unpaired: BTreeSet<McpCallKey> = sides()
            .filter(|(_, _, side, _)| *side == McpSide::Client)
            .map(|(_, _, _, key)| key)
            .collect();
        let mut servers: Vec<_> = sides()
            .filter(|(_, _, side, _)| *side == McpSide::Server)
            .collect();
        servers.sort_unstable_by_key(|(start, id, _, _)| (*start, *id));
        servers
            .into_iter()
            .filter(|(_, _, _, key)| unpaired.remove(key))
            .map(|(_, id, _, _)| id)
            .collect()
    }

    /// Downstream calls, each counted once whichever side traced it: the request's spans of
    /// class `downstream` (the caller's client or producer span), plus the callee-side spans
    /// (see [`RequestFacts::callee_of`]) that no client span of the request accounts for. A
    /// client span pairs with one callee span, its earliest child (the server of the call it
    /// made); another callee span under it (a message delivered to a second consumer) is a
    /// call of its own, as it would be if only the callees were traced.
    pub fn downstream_calls(&self) -> u64 {
        let clients = self
            .spans
            .values()
            .filter(|s| s.class == SpanClass::Downstream)
            .count();
        let mut callees: Vec<(i64, SpanId, SpanId, bool)> = self
            .spans
            .values()
            .filter_map(|s| {
                let caller = self.callee_of(s)?;
                let by_client = caller.class == SpanClass::Downstream;
                Some((s.start_ns, s.span_id, caller.span_id, by_client))
            })
            .collect();
        // Earliest first, so which callee pairs does not depend on arrival order.
        callees.sort_unstable();
        let mut paired: BTreeSet<SpanId> = BTreeSet::new();
        let unpaired = callees
            .into_iter()
            .filter(|&(_, _, caller, by_client)| !(by_client && paired.insert(caller)))
            .count();
        (clients + unpaired) as u64
    }

    /// The span that called `span` from another service, when `span` is the callee's side of
    /// a downstream call: a `SERVER` or `CONSUMER` span of class `other` whose parent is a
    /// span of the request with a different `service.name`. A server span whose parent is in
    /// its own service is dispatch within a process, not a call; a `model`, `tool` or `agent`
    /// span keeps its class (an MCP server's `tools/call` is a tool call, paired by
    /// [`RequestFacts::mcp_echoes`]).
    fn callee_of(&self, span: &SpanFacts) -> Option<&SpanFacts> {
        if span.class != SpanClass::Other
            || !matches!(span.kind, SpanKind::Server | SpanKind::Consumer)
        {
            return None;
        }
        let parent = self.spans.get(&span.parent?)?;
        (parent.trace_id == span.trace_id && parent.service != span.service).then_some(parent)
    }
}

/// Protect's verdict on the call's confirmation digest (computed before redaction).
fn digest_matches(span: &SpanRecord) -> Option<bool> {
    match span
        .attributes
        .get(crate::protect::confirmation::DIGEST_MATCHES_KEY)?
    {
        crate::event::AttrValue::Bool(b) => Some(*b),
        _ => None,
    }
}

/// A secret-trail attribute's fingerprints (none when absent).
fn trail_of(span: &SpanRecord, key: &str) -> Box<[u64]> {
    span.attributes
        .get(key)
        .and_then(|v| v.as_str())
        .map(crate::protect::trail::from_text)
        .unwrap_or_default()
}

/// `executor.resource_tenant_id` as text, whether sent as a string or a number.
fn resource_tenant(span: &SpanRecord) -> Option<String> {
    match span.attributes.get("executor.resource_tenant_id")? {
        crate::event::AttrValue::Str(s) => Some(s.clone()),
        crate::event::AttrValue::Int(i) => Some(i.to_string()),
        _ => None,
    }
}

/// Whether a tool call's arguments digest can matter to a finding: a write or high-impact
/// call (an ambiguous write tried again), or a denied one (tried again after the denial).
/// The digest is shared with the budget stage's (one parse per span when both need it), but
/// kept only for these: most calls' digests never matter here.
fn retry_evidence(span: &SpanRecord) -> bool {
    let a = &span.audit;
    span.gen_ai.tool_name.is_some()
        && (matches!(a.effect_class.as_deref(), Some("write" | "high_impact"))
            || a.policy_decision.as_deref() == Some("deny")
            || a.result_code.as_deref() == Some("denied"))
}

impl LogFacts {
    /// The facts of a (protected) log record, if it carries a trace id.
    pub fn of(log: &LogRecord, strings: &mut Interner) -> Option<LogFacts> {
        use std::hash::{Hash, Hasher};
        let trace_id = log.trace_id?;
        let mut h = std::collections::hash_map::DefaultHasher::new();
        serde_json::to_string(&log.body)
            .unwrap_or_default()
            .hash(&mut h);
        log.event_name.hash(&mut h);
        serde_json::to_string(&log.attributes)
            .unwrap_or_default()
            .hash(&mut h);
        let a = &log.audit;
        Some(LogFacts {
            key: (log.time_ns, log.span_id, h.finish()),
            trace_id,
            span_id: log.span_id,
            time_ns: log.time_ns,
            decision: Decision {
                policy: strings.opt(&a.policy_decision),
                confirmation: strings.opt(&a.confirmation_status),
            },
            error: log.severity_number >= 17,
            claimed_cost_usd: a.claimed_cost_usd,
            stop_reason: strings.opt(&a.stop_reason),
            cancelled: a.cancelled.unwrap_or(false),
        })
    }
}

/// How a request's summary came to be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Completeness {
    /// The root span ended and nothing arrived for the quiet period.
    Complete,
    /// The maximum age passed first.
    TimedOut,
    /// Memory limits forced it out early.
    Evicted,
    /// A later version, after spans arrived for a request already summarized.
    Amended,
}

impl Completeness {
    /// The name stored in the `completeness` column.
    pub fn as_str(self) -> &'static str {
        match self {
            Completeness::Complete => "complete",
            Completeness::TimedOut => "timed_out",
            Completeness::Evicted => "evicted",
            Completeness::Amended => "amended",
        }
    }
}

/// One version of one request's summary: a row of the `requests` table.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestSummary {
    /// `executor.request_id`, or the trace id when no span named a request.
    pub request_id: String,
    /// The first journal record with an item new in this summary (not archived; it keeps
    /// the journal until the summary is in a completed file).
    pub first_record: u64,
    /// Traces of the request, sorted.
    pub trace_ids: Vec<String>,
    /// Tenant.
    pub tenant: String,
    /// Principal (the first one named, by span start).
    pub principal_id: Option<String>,
    /// Earliest start, ns.
    pub start_ns: i64,
    /// Latest end, ns.
    pub end_ns: i64,
    /// How this version came to be written.
    pub completeness: Completeness,
    /// 1 for the first summary of the request, then 2, 3… for amendments.
    pub summary_version: u32,
    /// Distinct spans.
    pub span_count: u64,
    /// Spans whose parent is not among the request's spans.
    pub orphan_count: u64,
    /// Model calls.
    pub model_turns: u64,
    /// Tool calls.
    pub tool_calls: u64,
    /// Tool calls per tool name.
    pub tool_calls_by_tool: BTreeMap<String, u64>,
    /// Downstream calls (HTTP, database, RPC, messaging), each once whether its client, its
    /// server or both traced it (see [`RequestFacts::downstream_calls`]).
    pub downstream_calls: u64,
    /// Input tokens.
    pub input_tokens: i64,
    /// Output tokens.
    pub output_tokens: i64,
    /// Input tokens read from a cache.
    pub cache_read_tokens: i64,
    /// Input tokens written to a cache.
    pub cache_creation_tokens: i64,
    /// Cost computed by toolwatch from the price table (model calls without a price add 0).
    pub cost_usd: f64,
    /// Model calls with no price in the table.
    pub unpriced_model_turns: u64,
    /// Cost the executor claimed, summed over what it sent.
    pub claimed_cost_usd: Option<f64>,
    /// The claim disagrees with the computed cost.
    pub cost_disagrees: bool,
    /// Calls the policy denied.
    pub denials: u64,
    /// Confirmations requested.
    pub confirmations_requested: u64,
    /// Confirmations approved.
    pub confirmations_approved: u64,
    /// Retry attempts (spans with `executor.retry_attempt` > 0).
    pub retries: u64,
    /// Calls that timed out (`executor.result_code` = `timeout`).
    pub timeouts: u64,
    /// Spans in error and log records of severity ERROR or worse.
    pub errors: u64,
    /// The stop reason (of the root span, else the latest one sent).
    pub stop_reason: Option<String>,
    /// `ok`, `error`, `denied` or `cancelled`.
    pub outcome: &'static str,
    /// Findings this version shows (the `findings` column).
    pub findings: u64,
    /// The `findings` rows this version raises or withdraws (not a column).
    pub finding_rows: Vec<crate::findings::rows::FindingRow>,
}

/// Everything known of one request, for [`summarize`].
pub struct RequestFacts<'a> {
    /// Request id.
    pub request_id: &'a str,
    /// Tenant.
    pub tenant: &'a str,
    /// Distinct spans.
    pub spans: &'a BTreeMap<SpanId, SpanFacts>,
    /// Distinct log records.
    pub logs: &'a BTreeMap<(i64, Option<SpanId>, u64), LogFacts>,
}

/// The summary of a request.
pub fn summarize(
    facts: &RequestFacts<'_>,
    prices: &PriceTable,
    completeness: Completeness,
    summary_version: u32,
) -> RequestSummary {
    let spans = facts.spans;
    let mut s = RequestSummary {
        request_id: facts.request_id.to_string(),
        first_record: 0,
        trace_ids: Vec::new(),
        tenant: facts.tenant.to_string(),
        principal_id: None,
        start_ns: i64::MAX,
        end_ns: i64::MIN,
        completeness,
        summary_version,
        span_count: spans.len() as u64,
        orphan_count: 0,
        model_turns: 0,
        tool_calls: 0,
        tool_calls_by_tool: BTreeMap::new(),
        downstream_calls: 0,
        input_tokens: 0,
        output_tokens: 0,
        cache_read_tokens: 0,
        cache_creation_tokens: 0,
        cost_usd: 0.0,
        unpriced_model_turns: 0,
        claimed_cost_usd: None,
        cost_disagrees: false,
        denials: 0,
        confirmations_requested: 0,
        confirmations_approved: 0,
        retries: 0,
        timeouts: 0,
        errors: 0,
        stop_reason: None,
        outcome: "ok",
        findings: 0,
        finding_rows: Vec::new(),
    };
    let mut traces = BTreeSet::new();
    let echoes = facts.mcp_echoes();
    s.downstream_calls = facts.downstream_calls();
    // Decisions per span (its own, its events', its logs'), and per span-less log record.
    // One span is one decision however many places repeat it (the span, its events, log
    // records about it); a log record about no span of the request stands alone.
    let mut span_decisions: BTreeMap<SpanId, Decision> = BTreeMap::new();
    let mut loose_decisions: Vec<&Decision> = Vec::new();
    let mut first_principal: Option<(i64, &str)> = None;
    let mut root_stop: Option<&str> = None;
    let mut latest_stop: Option<(i64, &str)> = None;
    let mut claimed: Option<f64> = None;
    let mut cancelled = false;
    let mut root_error = false;
    for f in spans.values() {
        traces.insert(f.trace_id);
        s.start_ns = s.start_ns.min(f.start_ns);
        s.end_ns = s.end_ns.max(f.end_ns);
        let is_root = f.parent.is_none();
        if f.parent.is_some_and(|p| !spans.contains_key(&p)) {
            s.orphan_count += 1;
        }
        match f.class {
            SpanClass::Model => {
                s.model_turns += 1;
                // Counts come from the wire: negative ones add nothing, huge ones saturate.
                s.input_tokens = s.input_tokens.saturating_add(f.tokens.input.max(0));
                s.output_tokens = s.output_tokens.saturating_add(f.tokens.output.max(0));
                s.cache_read_tokens = s
                    .cache_read_tokens
                    .saturating_add(f.tokens.cache_read.max(0));
                s.cache_creation_tokens = s
                    .cache_creation_tokens
                    .saturating_add(f.cache_creation.max(0));
                let cost = f
                    .provider
                    .as_deref()
                    .zip(f.model.as_deref())
                    .and_then(|(provider, model)| prices.cost(provider, model, f.tokens));
                match cost {
                    Some(c) => s.cost_usd += c,
                    None => s.unpriced_model_turns += 1,
                }
            }
            SpanClass::Tool if echoes.contains(&f.span_id) => {}
            SpanClass::Tool => {
                s.tool_calls += 1;
                let tool = f.tool.as_deref().unwrap_or("unknown").to_string();
                *s.tool_calls_by_tool.entry(tool).or_default() += 1;
            }
            // Downstream calls are counted over the whole request above: a callee's span
            // counts only when no client span of the request already did.
            SpanClass::Downstream | SpanClass::Agent | SpanClass::Other => {}
        }
        if f.retry_attempt > 0 {
            s.retries += 1;
        }
        if f.result_code.as_deref() == Some("timeout") {
            s.timeouts += 1;
        }
        if f.error {
            s.errors += 1;
            root_error |= is_root;
        }
        if let Some(p) = &f.principal {
            if first_principal.is_none_or(|(t, q)| (f.start_ns, &**p) < (t, q)) {
                first_principal = Some((f.start_ns, p));
            }
        }
        if let Some(r) = &f.stop_reason {
            if is_root {
                root_stop = Some(r);
            }
            if latest_stop.is_none_or(|(t, q)| (f.end_ns, &**r) > (t, q)) {
                latest_stop = Some((f.end_ns, r));
            }
        }
        if let Some(c) = f.claimed_cost_usd {
            *claimed.get_or_insert(0.0) += c;
        }
        cancelled |= f.cancelled;
        span_decisions
            .entry(f.span_id)
            .or_default()
            .merge(&f.decision);
    }
    for l in facts.logs.values() {
        traces.insert(l.trace_id);
        if l.error {
            s.errors += 1;
        }
        match l.span_id.filter(|id| spans.contains_key(id)) {
            Some(id) => span_decisions.entry(id).or_default().merge(&l.decision),
            None => loose_decisions.push(&l.decision),
        }
        if let Some(r) = &l.stop_reason {
            if latest_stop.is_none_or(|(t, q)| (l.time_ns, &**r) > (t, q)) {
                latest_stop = Some((l.time_ns, r));
            }
        }
        if let Some(c) = l.claimed_cost_usd {
            *claimed.get_or_insert(0.0) += c;
        }
        cancelled |= l.cancelled;
    }
    for d in span_decisions.values().chain(loose_decisions) {
        match d.policy.as_deref() {
            Some("deny") => s.denials += 1,
            Some("require_confirmation") => s.confirmations_requested += 1,
            _ => {}
        }
        if d.confirmation.as_deref() == Some("approved") {
            s.confirmations_approved += 1;
        }
    }
    if s.start_ns == i64::MAX {
        s.start_ns = facts.logs.values().map(|l| l.time_ns).min().unwrap_or(0);
        s.end_ns = facts.logs.values().map(|l| l.time_ns).max().unwrap_or(0);
    }
    s.trace_ids = traces.iter().map(|t| hex_id(t)).collect();
    s.principal_id = first_principal.map(|(_, p)| p.to_string());
    s.stop_reason = root_stop
        .or(latest_stop.map(|(_, r)| r))
        .map(str::to_string);
    s.claimed_cost_usd = claimed;
    s.cost_disagrees = claimed.is_some_and(|c| disagrees(s.cost_usd, c));
    s.outcome = if cancelled {
        "cancelled"
    } else if root_error {
        "error"
    } else if s.denials > 0 && s.tool_calls == s.denials {
        "denied"
    } else {
        "ok"
    };
    s
}

impl RequestSummary {
    /// Wall time from the earliest start to the latest end, ns.
    pub fn duration_ns(&self) -> i64 {
        self.end_ns.saturating_sub(self.start_ns).max(0)
    }
}
