//! Streaming evaluation: usage is updated as each span arrives, and a budget's alarm fires the
//! moment usage crosses its warning threshold or its limit, while the request is still running.
//!
//! Each (scope, budget) moves through levels none → warning → limit. Every level fires once per
//! episode; a window budget resolves when its usage falls back under the warning threshold, a
//! request budget when the request has been idle for `request_idle` (its counters only grow).
//! The resolution carries the episode's `alarm_id`, so receivers can pair them.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::sync::Arc;

use sha2::{Digest, Sha256};

use super::config::{BudgetConfig, Measure, RequestBudgets, WindowBudget as WindowSpec};
use super::digest::CallDigest;
use super::window::RollingWindow;
use crate::assemble::prices::{PriceTable, TokenCounts};
use crate::event::{
    hex_id, EventBatch, McpCallKey, McpSide, SpanClass, SpanId, SpanRecord, TraceId,
};
use crate::maps::{FastMap, FastSet};
use crate::memory::{Holder, MemoryBudget};

/// What an alarm is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scope {
    /// One request.
    Request,
    /// A tenant over a window.
    Tenant,
    /// An authenticated sender (a tenant-binding alarm).
    Sender,
    /// A principal over a window.
    Principal,
}

impl Scope {
    /// The name stored in the `scope` column.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Request => "request",
            Scope::Tenant => "tenant",
            Scope::Principal => "principal",
            Scope::Sender => "sender",
        }
    }
}

/// How far a budget is used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Level {
    /// At or above the warning threshold.
    Warning,
    /// At or above the limit.
    Limit,
    /// Back under the warning threshold (or the request is over).
    Resolved,
}

impl Level {
    /// The name stored in the `level` column.
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Warning => "warning",
            Level::Limit => "limit",
            Level::Resolved => "resolved",
        }
    }
}

/// One alarm or resolution.
#[derive(Debug, Clone, PartialEq)]
pub struct Alarm {
    /// When it fired (wall clock, ns).
    pub time_ns: i64,
    /// Shared by the warning, limit and resolution of one episode.
    pub alarm_id: String,
    /// Request, tenant or principal.
    pub scope: Scope,
    /// The request id, tenant id or principal id.
    pub scope_id: String,
    /// The tenant.
    pub tenant: String,
    /// Budget name: `tool_calls`, `tool_calls:search_orders`, `repeated_calls`, `wall_time`,
    /// `tokens_per_hour`, …
    pub budget: String,
    /// Warning, limit or resolved.
    pub level: Level,
    /// Structured reason: `budget_exhausted:<budget>`, `repeated_call`, `wall_time_exceeded`,
    /// `warning:<budget>`, `resolved:<budget>`.
    pub reason: String,
    /// Usage when it fired.
    pub observed: f64,
    /// The limit.
    pub limit: f64,
    /// The request that crossed it (for window budgets, the request of the span that did).
    pub request_id: Option<String>,
    /// A trace of that request.
    pub trace_id: Option<String>,
    /// Set when the alarm carries a finding (`budget` is `finding:<rule>`), not a budget.
    pub finding: Option<Box<FindingEvidence>>,
}

/// What an alarm that carries a finding adds: its rule, severity and evidence ids.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FindingEvidence {
    /// The rule id.
    pub rule: &'static str,
    /// `low`, `medium` or `high`.
    pub severity: &'static str,
    /// Evidence spans (hex), in the rule's order.
    pub span_ids: Vec<String>,
    /// Their traces (hex).
    pub trace_ids: Vec<String>,
}

/// The pseudo-budget of tenant-binding alarms: a sender's items claimed a tenant it may not
/// write.
pub const TENANT_BINDING: &str = "tenant_binding";

/// A tenant-binding episode resolves after this long without another mismatch.
const MISMATCH_QUIET_NS: i64 = 10 * 60 * 1_000_000_000;

fn reason(budget: &str, level: Level) -> String {
    match level {
        Level::Limit if budget == TENANT_BINDING => "tenant_mismatch".into(),
        Level::Limit if budget == "repeated_calls" => "repeated_call".into(),
        Level::Limit if budget == "wall_time" => "wall_time_exceeded".into(),
        Level::Limit => format!("budget_exhausted:{budget}"),
        Level::Warning => format!("warning:{budget}"),
        Level::Resolved => format!("resolved:{budget}"),
    }
}

/// An episode resolves once usage is under this fraction of its warning threshold.
const RESOLVE_BELOW: f64 = 0.9;

/// The level a usage reaches.
fn level_of(observed: f64, limit: f64, warning_ratio: f64) -> Option<Level> {
    if limit <= 0.0 {
        None
    } else if observed >= limit {
        Some(Level::Limit)
    } else if warning_ratio < 1.0 && observed >= warning_ratio * limit {
        Some(Level::Warning)
    } else {
        None
    }
}

/// The state of one budget of one scope: its level and its episode's id.
#[derive(Debug, Clone, Default)]
struct Track {
    level: Option<Level>,
    alarm_id: String,
}

/// Who crossed a budget, for the alarm.
struct Context<'a> {
    scope: Scope,
    scope_id: &'a str,
    tenant: &'a str,
    request_id: Option<&'a str>,
    trace_id: Option<&'a str>,
    now_ns: i64,
}

impl<'a> Context<'a> {
    /// A window's, when no span is being counted (time passing, a restart).
    fn of_window(scope: Scope, scope_id: &'a str, tenant: &'a str, now_ns: i64) -> Context<'a> {
        Context {
            scope,
            scope_id,
            tenant,
            request_id: None,
            trace_id: None,
            now_ns,
        }
    }

    /// The alarm of `level` for this scope.
    fn alarm(&self, id: &str, budget: &str, level: Level, observed: f64, limit: f64) -> Alarm {
        Alarm {
            time_ns: self.now_ns,
            alarm_id: id.to_string(),
            scope: self.scope,
            scope_id: self.scope_id.to_string(),
            tenant: self.tenant.to_string(),
            budget: budget.to_string(),
            level,
            reason: reason(budget, level),
            observed,
            limit,
            request_id: self.request_id.map(str::to_string),
            trace_id: self.trace_id.map(str::to_string),
            finding: None,
        }
    }
}

impl Track {
    /// Moves to the level `observed` reaches; the alarms that fire on the way.
    fn update(
        &mut self,
        budget: &str,
        observed: f64,
        limit: f64,
        ratio: f64,
        ctx: &Context<'_>,
        out: &mut Vec<Alarm>,
    ) {
        let new = level_of(observed, limit, ratio);
        let fire = |level: Level, id: &str, out: &mut Vec<Alarm>| {
            out.push(ctx.alarm(id, budget, level, observed, limit))
        };
        match (self.level, new) {
            // Resolve only clearly under the threshold, so a window hovering at it does not
            // fire and resolve on every bucket step.
            (Some(_), None) if observed >= RESOLVE_BELOW * ratio * limit => {}
            (Some(_), None) => {
                fire(Level::Resolved, &self.alarm_id, out);
                self.level = None;
            }
            (prev, Some(next)) if prev.is_none_or(|p| next > p) => {
                if prev.is_none() {
                    self.alarm_id = alarm_id(ctx, budget);
                }
                // Jumping straight to the limit still tells the warning first.
                if prev.is_none() && next == Level::Limit && ratio < 1.0 {
                    fire(Level::Warning, &self.alarm_id, out);
                }
                fire(next, &self.alarm_id, out);
                self.level = Some(next);
            }
            _ => {}
        }
    }

    /// Moves to the level `observed` reaches against a limit that just changed: as
    /// [`Track::update`], and also down: an episode above the new level is resolved at once
    /// (no hysteresis: the limit moved, not the usage), and one starts again at the new level
    /// if usage is still over its warning threshold.
    fn relimit(
        &mut self,
        budget: &str,
        observed: f64,
        limit: f64,
        ratio: f64,
        ctx: &Context<'_>,
        out: &mut Vec<Alarm>,
    ) {
        let new = level_of(observed, limit, ratio);
        if self.level.is_some_and(|now| new.is_none_or(|n| n < now)) {
            out.push(ctx.alarm(&self.alarm_id, budget, Level::Resolved, observed, limit));
            self.level = None;
        }
        self.update(budget, observed, limit, ratio, ctx, out);
    }

    /// Resolves an active episode (the request is over).
    fn resolve(
        &mut self,
        spec: &RequestSpec,
        observed: f64,
        ctx: &Context<'_>,
        out: &mut Vec<Alarm>,
    ) {
        if self.level.take().is_some() {
            let id = &self.alarm_id;
            out.push(ctx.alarm(id, &spec.name, Level::Resolved, observed, spec.limit));
        }
    }
}

fn alarm_id(ctx: &Context<'_>, budget: &str) -> String {
    let mut h = Sha256::new();
    for part in [ctx.scope.as_str(), ctx.tenant, ctx.scope_id, budget] {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part.as_bytes());
    }
    h.update(ctx.now_ns.to_le_bytes());
    hex::encode(&h.finalize()[..8])
}

/// What one tenant spent since the last [`BudgetEvaluator::take_totals`], for counters.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct TenantTotals {
    /// Input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Cost in US dollars from the price table.
    pub cost_usd: f64,
    /// Model calls.
    pub model_turns: u64,
    /// Tool calls by tool name.
    pub tool_calls: FastMap<String, u64>,
}

/// One budget's usage and limit, as `/metrics` and `/v1/budgets` show it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct BudgetUsage {
    /// `request`, `tenant` or `principal`.
    pub scope: &'static str,
    /// The request, tenant or principal id.
    pub id: String,
    /// Budget name.
    pub budget: String,
    /// Usage now.
    pub usage: f64,
    /// The limit.
    pub limit: f64,
    /// The warning threshold.
    pub warning_at: f64,
    /// `warning` or `limit` while an episode is active.
    pub level: Option<&'static str>,
}

/// A window's state, saved so a restart does not reset a tenant's spend.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SavedWindow {
    /// `tenant` or `principal`.
    pub scope: String,
    /// The tenant.
    pub tenant: String,
    /// The tenant or principal id.
    pub id: String,
    /// Budget name (`tokens_per_day`, …).
    pub budget: String,
    /// (bucket start ns, amount).
    pub buckets: Vec<(i64, f64)>,
    /// The active level, if an episode is active.
    pub level: Option<String>,
    /// The active episode's id.
    pub alarm_id: String,
}

/// A request budget: what it counts.
#[derive(Debug, Clone, PartialEq)]
enum RequestMeasure {
    ModelTurns,
    ToolCalls,
    ToolCallsOf(String),
    RepeatedCalls,
    WallTime,
    InputTokens,
    OutputTokens,
    Cost,
    ResultBytes,
}

/// One request budget that is on: its name, what it counts, its limit.
#[derive(Debug, Clone)]
struct RequestSpec {
    name: String,
    measure: RequestMeasure,
    limit: f64,
}

/// What one request has used so far.
#[derive(Debug, Default)]
struct RequestUsage {
    request_id: String,
    trace_id: String,
    seen: FastSet<SpanId>,
    /// Traces mapped to this request in its tenant's trace map, forgotten with it.
    traces: Vec<TraceId>,
    model_turns: u64,
    tool_calls: u64,
    by_tool: FastMap<String, u64>,
    repeats: FastMap<CallDigest, u64>,
    most_repeated: u64,
    input_tokens: u64,
    output_tokens: u64,
    cost_usd: f64,
    result_bytes: u64,
    start_ns: i64,
    end_ns: i64,
    last_arrival_ns: i64,
    /// Parallel to the tenant's request specs.
    tracks: Vec<Track>,
}

/// One window of one tenant or principal.
#[derive(Debug)]
struct WindowUsage {
    window: RollingWindow,
    track: Track,
}

impl WindowUsage {
    /// Holds spend or an active episode.
    fn is_live(&self) -> bool {
        self.track.level.is_some() || self.window.buckets().next().is_some()
    }

    fn new(spec: &WindowSpec) -> WindowUsage {
        WindowUsage {
            window: RollingWindow::new(spec.span, buckets_for(spec.span.as_secs())),
            track: Track::default(),
        }
    }
}

/// Everything tracked for one tenant. Its budgets are resolved once, so once a tenant, request
/// and principal are known a span costs no configuration lookups and no key allocations.
struct TenantState {
    /// Fraction of a limit at which warnings fire for this tenant.
    ratio: f64,
    request_specs: Arc<[RequestSpec]>,
    /// A repeated-call budget is on: tool calls' arguments must be digested.
    digest_calls: bool,
    tenant_specs: Arc<[WindowSpec]>,
    principal_specs: Arc<[WindowSpec]>,
    /// Parallel to `tenant_specs`.
    windows: Vec<WindowUsage>,
    /// By principal id; each parallel to `principal_specs`.
    principals: FastMap<String, Vec<WindowUsage>>,
    /// By request id.
    requests: FastMap<String, RequestUsage>,
    /// Trace → request, so spans without `executor.request_id` (a downstream service's) count
    /// for the request their trace belongs to. Forgotten with the request.
    traces: FastMap<TraceId, String>,
    /// When each request may have gone idle (earliest first): `tick` looks only at the
    /// requests due, not at every live one. An entry whose request was active since is pushed
    /// back to its new time; one whose request is gone is dropped.
    idle_at: BinaryHeap<Reverse<(i64, String)>>,
}

impl TenantState {
    fn new(config: &BudgetConfig, tenant: &str) -> TenantState {
        let tenant_specs: Arc<[WindowSpec]> = config.tenant_for(tenant).active().into();
        let request_specs = request_specs(config.request_for(tenant));
        TenantState {
            ratio: config.warning_ratio_for(tenant),
            digest_calls: request_specs
                .iter()
                .any(|s| s.measure == RequestMeasure::RepeatedCalls),
            request_specs,
            windows: tenant_specs.iter().map(WindowUsage::new).collect(),
            tenant_specs,
            principal_specs: config.principal_for(tenant).active().into(),
            principals: FastMap::default(),
            requests: FastMap::default(),
            traces: FastMap::default(),
            idle_at: BinaryHeap::new(),
        }
    }

    /// The request a span belongs to: the one it names, else the one its trace is known to
    /// belong to, else its trace (hex). When a trace first names its request, the usage its
    /// earlier spans gathered under the trace's own name is handed back, to be folded in.
    /// The third value says whether the span's trace was mapped to its request just now (the
    /// request then remembers the trace, to forget the mapping with it).
    fn request_of(&mut self, span: &SpanRecord) -> (String, Option<RequestUsage>, bool) {
        match span.audit.request_id.as_deref().filter(|r| !r.is_empty()) {
            Some(r) => {
                let mut earlier = None;
                let mut mapped = false;
                if let std::collections::hash_map::Entry::Vacant(v) =
                    self.traces.entry(span.trace_id)
                {
                    v.insert(r.to_string());
                    let by_trace = hex_id(&span.trace_id);
                    if by_trace != r {
                        earlier = self.requests.remove(&by_trace);
                    }
                    mapped = true;
                }
                (r.to_string(), earlier, mapped)
            }
            None => {
                let r = self
                    .traces
                    .get(&span.trace_id)
                    .cloned()
                    .unwrap_or_else(|| hex_id(&span.trace_id));
                (r, None, false)
            }
        }
    }

    /// Takes `config`'s budgets for this tenant, keeping the usage and open episode of every
    /// budget that stays (the same name; a window also of the same length) and moving each to
    /// the level its new limit gives now; the episodes of budgets that go are resolved.
    fn reconfigure(
        &mut self,
        config: &BudgetConfig,
        tenant: &str,
        now_ns: i64,
        out: &mut Vec<Alarm>,
    ) {
        let fresh = TenantState::new(config, tenant);
        let ratio = fresh.ratio;
        for usage in self.requests.values_mut() {
            let mut old: Vec<(RequestSpec, Track)> = self
                .request_specs
                .iter()
                .cloned()
                .zip(std::mem::take(&mut usage.tracks))
                .collect();
            let mut tracks: Vec<Track> = fresh
                .request_specs
                .iter()
                .map(|spec| take_track(&mut old, |s| s.name == spec.name))
                .collect();
            let ctx = usage.context(Scope::Request, &usage.request_id, tenant, now_ns);
            for (spec, mut track) in old {
                track.resolve(&spec, usage.observed(&spec.measure), &ctx, out);
            }
            for (spec, track) in fresh.request_specs.iter().zip(&mut tracks) {
                let observed = usage.observed(&spec.measure);
                track.relimit(&spec.name, observed, spec.limit, ratio, &ctx, out);
            }
            usage.tracks = tracks;
        }
        let windows = std::mem::take(&mut self.windows);
        self.windows = remap_windows(
            (&self.tenant_specs, windows),
            &fresh.tenant_specs,
            ratio,
            &Context::of_window(Scope::Tenant, tenant, tenant, now_ns),
            out,
        );
        for (principal, ws) in self.principals.iter_mut() {
            let old = std::mem::take(ws);
            *ws = remap_windows(
                (&self.principal_specs, old),
                &fresh.principal_specs,
                ratio,
                &Context::of_window(Scope::Principal, principal, tenant, now_ns),
                out,
            );
        }
        self.ratio = ratio;
        self.digest_calls = fresh.digest_calls;
        self.request_specs = fresh.request_specs;
        self.tenant_specs = fresh.tenant_specs;
        self.principal_specs = fresh.principal_specs;
    }

    /// Every window of the tenant, then of each of its principals: (scope, id, budget, window).
    fn windows_mut<'a>(
        &'a mut self,
        tenant: &'a str,
    ) -> impl Iterator<Item = (Scope, &'a str, &'a WindowSpec, &'a mut WindowUsage)> + 'a {
        let principal_specs = &self.principal_specs;
        let own = self
            .tenant_specs
            .iter()
            .zip(self.windows.iter_mut())
            .map(move |(spec, w)| (Scope::Tenant, tenant, spec, w));
        let principals = self.principals.iter_mut().flat_map(move |(p, ws)| {
            principal_specs
                .iter()
                .zip(ws.iter_mut())
                .map(move |(spec, w)| (Scope::Principal, p.as_str(), spec, w))
        });
        own.chain(principals)
    }

    /// Removes and returns the requests idle for `idle` ns at `now_ns`, with their trace
    /// mappings. Costs the requests that came due, not the requests held.
    fn take_idle(&mut self, now_ns: i64, idle: i64) -> Vec<RequestUsage> {
        let mut done = Vec::new();
        while let Some(Reverse((at, _))) = self.idle_at.peek() {
            if *at > now_ns {
                break;
            }
            let Some(Reverse((_, id))) = self.idle_at.pop() else {
                break;
            };
            let Some(u) = self.requests.get(&id) else {
                continue; // resolved or evicted already
            };
            let idle_from = u.last_arrival_ns.saturating_add(idle);
            if idle_from > now_ns {
                self.idle_at.push(Reverse((idle_from, id)));
                continue;
            }
            if let Some(u) = self.requests.remove(&id) {
                self.forget_traces(&u);
                done.push(u);
            }
        }
        done
    }

    /// Drops the trace mappings that point at `u`.
    fn forget_traces(&mut self, u: &RequestUsage) {
        for t in &u.traces {
            if self.traces.get(t) == Some(&u.request_id) {
                self.traces.remove(t);
            }
        }
    }

    fn is_idle(&self) -> bool {
        self.requests.is_empty()
            && self.principals.is_empty()
            && !self.windows.iter().any(WindowUsage::is_live)
    }
}

/// The track of the first old budget `same` picks, taken out; a fresh one if none.
fn take_track<S>(old: &mut Vec<(S, Track)>, same: impl Fn(&S) -> bool) -> Track {
    match old.iter().position(|(s, _)| same(s)) {
        Some(i) => old.swap_remove(i).1,
        None => Track::default(),
    }
}

/// Windows for `new` specs: an old window of the same name and length goes on with its
/// usage and episode (moved to the level its new limit gives), another starts empty; the
/// episodes of the old windows left over are resolved.
fn remap_windows(
    (old_specs, old_windows): (&[WindowSpec], Vec<WindowUsage>),
    new: &[WindowSpec],
    ratio: f64,
    ctx: &Context<'_>,
    out: &mut Vec<Alarm>,
) -> Vec<WindowUsage> {
    let mut old: Vec<(&WindowSpec, WindowUsage)> = old_specs.iter().zip(old_windows).collect();
    let mut windows = Vec::with_capacity(new.len());
    for spec in new {
        let kept = old
            .iter()
            .position(|(s, _)| s.name == spec.name && s.span == spec.span)
            .map(|i| old.swap_remove(i).1);
        let mut w = kept.unwrap_or_else(|| WindowUsage::new(spec));
        let observed = w.window.total(ctx.now_ns);
        w.track
            .relimit(spec.name, observed, spec.limit, ratio, ctx, out);
        windows.push(w);
    }
    for (spec, mut w) in old {
        if w.track.level.take().is_some() {
            let observed = w.window.total(ctx.now_ns);
            out.push(ctx.alarm(
                &w.track.alarm_id,
                spec.name,
                Level::Resolved,
                observed,
                spec.limit,
            ));
        }
    }
    windows
}

/// Usage against budgets, for every request, tenant and principal seen.
pub struct BudgetEvaluator {
    config: BudgetConfig,
    prices: PriceTable,
    tenants: FastMap<String, TenantState>,
    totals: FastMap<String, TenantTotals>,
    evicted: u64,
    mismatches: FastMap<std::sync::Arc<str>, MismatchEpisode>,
    mcp_sides: UnmatchedMcpSides,
    /// A reloaded configuration waiting for the budget stage.
    pending: Option<BudgetConfig>,
    /// Where the tracked requests' memory is counted; over its allowance, the least recently
    /// active go as past `max_requests`.
    memory: std::sync::Arc<MemoryBudget>,
}

/// Memory of one tracked request, about (see `[budget] max_requests`).
const TRACKED_REQUEST_BYTES: usize = 3 << 10;

/// MCP tool calls seen from one side so far, so that the other side, when it comes, counts as
/// the same call (whichever comes first counts). Bounded: the oldest unmatched sides are
/// forgotten first (a client whose server is not traced never sees its match).
#[derive(Default)]
struct UnmatchedMcpSides {
    sides: FastMap<McpCallKey, McpSide>,
    /// Insertion order; may still hold keys matched since (skipped when evicting).
    order: std::collections::VecDeque<McpCallKey>,
}

impl UnmatchedMcpSides {
    /// Unmatched sides kept at most (about 4 MB).
    const CAPACITY: usize = 65_536;

    /// True when the other side of `key`'s call was counted already; the pair is then
    /// complete and forgotten. A side seen again (a second span of the same side) is a call
    /// of its own, as the request summary counts it.
    fn is_echo(&mut self, side: McpSide, key: McpCallKey) -> bool {
        match self.sides.get(&key) {
            Some(&seen) if seen != side => {
                self.sides.remove(&key);
                return true;
            }
            Some(_) => return false,
            None => {}
        }
        while self.order.len() >= Self::CAPACITY {
            if let Some(old) = self.order.pop_front() {
                self.sides.remove(&old);
            }
        }
        self.sides.insert(key, side);
        self.order.push_back(key);
        false
    }
}

/// An open tenant-binding episode of one sender.
struct MismatchEpisode {
    alarm_id: String,
    tenant: String,
    items: u64,
    last_ns: i64,
}

/// Buckets per window: minute windows move in seconds, hour windows in minutes, day windows in
/// 15-minute steps.
fn buckets_for(span_secs: u64) -> u32 {
    if span_secs <= 3600 {
        60
    } else {
        96
    }
}

/// What a span adds to windows.
#[derive(Default, Clone, Copy)]
struct SpanAmounts {
    input: u64,
    output: u64,
    cost: f64,
    tool_call: bool,
    end_ns: i64,
}

impl SpanAmounts {
    /// What a span adds: tokens and cost (from the price table) of a model call, one tool call.
    fn of_span(span: &SpanRecord, prices: &PriceTable) -> SpanAmounts {
        let g = &span.gen_ai;
        let mut a = SpanAmounts {
            end_ns: span.end_ns,
            ..Default::default()
        };
        match span.class {
            SpanClass::Model => {
                a.input = g.input_tokens.unwrap_or(0).max(0) as u64;
                a.output = g.output_tokens.unwrap_or(0).max(0) as u64;
                let model = g.response_model.as_deref().or(g.request_model.as_deref());
                if let (Some(provider), Some(model)) = (g.provider.as_deref(), model) {
                    let counts = TokenCounts {
                        input: a.input as i64,
                        output: a.output as i64,
                        cache_read: g.cache_read_input_tokens.unwrap_or(0),
                    };
                    a.cost = prices.cost(provider, model, counts).unwrap_or(0.0);
                }
            }
            SpanClass::Tool => a.tool_call = true,
            _ => {}
        }
        a
    }

    fn of(&self, m: Measure) -> f64 {
        match m {
            Measure::Tokens => self.input.saturating_add(self.output) as f64,
            Measure::Cost => self.cost,
            Measure::ToolCalls => f64::from(u8::from(self.tool_call)),
        }
    }
}

/// Adds a span to windows and moves their levels.
fn update_windows(
    specs: &[WindowSpec],
    windows: &mut [WindowUsage],
    amounts: SpanAmounts,
    ratio: f64,
    ctx: &Context<'_>,
    out: &mut Vec<Alarm>,
) {
    for (spec, w) in specs.iter().zip(windows) {
        let amount = amounts.of(spec.measure);
        if amount > 0.0 {
            // Too old to count: the span ended before the window began.
            let _ = w.window.add(amounts.end_ns, amount, ctx.now_ns);
        }
        let observed = w.window.total(ctx.now_ns);
        w.track
            .update(spec.name, observed, spec.limit, ratio, ctx, out);
    }
}

impl BudgetEvaluator {
    /// An evaluator with the configured budgets and prices.
    pub fn new(config: BudgetConfig, prices: PriceTable) -> BudgetEvaluator {
        BudgetEvaluator {
            config,
            prices,
            tenants: FastMap::default(),
            totals: FastMap::default(),
            evicted: 0,
            mismatches: FastMap::default(),
            mcp_sides: UnmatchedMcpSides::default(),
            pending: None,
            memory: MemoryBudget::unbounded(),
        }
    }

    /// The same, tracking at most its allowance of `memory` (see [`crate::memory`]).
    pub fn with_memory(mut self, memory: std::sync::Arc<MemoryBudget>) -> BudgetEvaluator {
        self.memory = memory;
        self
    }

    /// The configuration in force.
    pub fn config(&self) -> &BudgetConfig {
        &self.config
    }

    /// Puts `config`'s budgets in force at `now_ns` (a reload): usage so far is kept, every
    /// budget that stays moves to the level its new limit gives, the episodes of budgets that
    /// go are resolved; returns the alarms that makes. The price table stays.
    pub fn reconfigure(&mut self, config: BudgetConfig, now_ns: i64) -> Vec<Alarm> {
        let mut out = Vec::new();
        for (tenant, state) in &mut self.tenants {
            state.reconfigure(&config, tenant, now_ns, &mut out);
        }
        self.config = config;
        out
    }

    /// Hands over a configuration for the budget stage to put in force before the next
    /// record it takes (see [`BudgetEvaluator::take_pending`]).
    pub fn schedule(&mut self, config: BudgetConfig) {
        self.pending = Some(config);
    }

    /// The configuration [`BudgetEvaluator::schedule`] handed over, if any.
    pub fn take_pending(&mut self) -> Option<BudgetConfig> {
        self.pending.take()
    }

    /// What each tenant spent since the last call.
    pub fn take_totals(&mut self) -> FastMap<String, TenantTotals> {
        std::mem::take(&mut self.totals)
    }

    /// Requests being tracked.
    pub fn requests_tracked(&self) -> usize {
        self.tenants.values().map(|t| t.requests.len()).sum()
    }

    /// Takes in a protected batch at wall-clock `now_ns`; returns the alarms it fires.
    pub fn observe(&mut self, batch: &EventBatch, now_ns: i64) -> Vec<Alarm> {
        let mut out = Vec::new();
        for span in &batch.spans {
            self.observe_span(span, now_ns, &mut out);
            if span.tenant_mismatch {
                let trace = hex_id(&span.trace_id);
                let request = span.audit.request_id.as_deref();
                self.observe_mismatch(
                    &span.sender,
                    &span.tenant,
                    request,
                    Some(&trace),
                    now_ns,
                    &mut out,
                );
            }
        }
        for log in batch.logs.iter().filter(|l| l.tenant_mismatch) {
            let trace = log.trace_id.map(|t| hex_id(&t));
            let request = log.audit.request_id.as_deref();
            self.observe_mismatch(
                &log.sender,
                &log.tenant,
                request,
                trace.as_deref(),
                now_ns,
                &mut out,
            );
        }
        out
    }

    /// An item of `sender` claimed a tenant it may not write (filed under `tenant`): the
    /// first opens the sender's episode with an alarm; later ones extend it.
    fn observe_mismatch(
        &mut self,
        sender: &Option<std::sync::Arc<crate::event::Sender>>,
        tenant: &str,
        request_id: Option<&str>,
        trace_id: Option<&str>,
        now_ns: i64,
        out: &mut Vec<Alarm>,
    ) {
        let Some(sender) = sender else { return };
        if let Some(e) = self.mismatches.get_mut(&sender.name) {
            e.items += 1;
            e.last_ns = now_ns;
            return;
        }
        let ctx = Context {
            scope: Scope::Sender,
            scope_id: &sender.name,
            tenant,
            request_id,
            trace_id,
            now_ns,
        };
        let alarm_id = alarm_id(&ctx, TENANT_BINDING);
        out.push(ctx.alarm(&alarm_id, TENANT_BINDING, Level::Limit, 1.0, 0.0));
        self.mismatches.insert(
            std::sync::Arc::clone(&sender.name),
            MismatchEpisode {
                alarm_id,
                tenant: tenant.to_string(),
                items: 1,
                last_ns: now_ns,
            },
        );
    }

    /// Tenant-binding episodes quiet for [`MISMATCH_QUIET_NS`] resolve.
    fn resolve_quiet_mismatches(&mut self, now_ns: i64, out: &mut Vec<Alarm>) {
        self.mismatches.retain(|sender, e| {
            if now_ns.saturating_sub(e.last_ns) < MISMATCH_QUIET_NS {
                return true;
            }
            let ctx = Context::of_window(Scope::Sender, sender, &e.tenant, now_ns);
            out.push(ctx.alarm(
                &e.alarm_id,
                TENANT_BINDING,
                Level::Resolved,
                e.items as f64,
                0.0,
            ));
            false
        });
    }

    fn observe_span(&mut self, span: &SpanRecord, now_ns: i64, out: &mut Vec<Alarm>) {
        let BudgetEvaluator {
            config,
            prices,
            tenants,
            totals,
            mcp_sides,
            ..
        } = self;
        let state = entry_of(tenants, &span.tenant, || {
            TenantState::new(config, &span.tenant)
        });
        let mut amounts = SpanAmounts::of_span(span, prices);
        // The second side of an MCP call traced on both sides is not a call of its own.
        let mut echo = |amounts: &mut SpanAmounts| {
            if let Some((side, key)) = span.mcp_call() {
                amounts.tool_call &= !mcp_sides.is_echo(side, key);
            }
        };
        if state.request_specs.is_empty()
            && state.tenant_specs.is_empty()
            && state.principal_specs.is_empty()
        {
            // No budget for this tenant: only the spend counters.
            echo(&mut amounts);
            add_spend(totals, span, &amounts);
            return;
        }
        let ratio = state.ratio;
        let (request_id, earlier, mapped) = state.request_of(span);
        let idle = idle_ns(config);
        let TenantState {
            request_specs,
            digest_calls,
            tenant_specs,
            principal_specs,
            windows,
            principals,
            requests,
            idle_at,
            ..
        } = state;
        let usage = requests.entry(request_id).or_insert_with_key(|id| {
            idle_at.push(Reverse((now_ns.saturating_add(idle), id.clone())));
            RequestUsage {
                request_id: id.clone(),
                trace_id: hex_id(&span.trace_id),
                start_ns: span.start_ns,
                end_ns: span.end_ns,
                tracks: vec![Track::default(); request_specs.len()],
                ..Default::default()
            }
        });
        usage.last_arrival_ns = now_ns;
        if mapped {
            usage.traces.push(span.trace_id);
        }
        if let Some(mut earlier) = earlier {
            // Spans of this trace that came before it named its request (a downstream
            // service's, exported first): their episodes end, their usage moves over.
            let tracks = std::mem::take(&mut earlier.tracks);
            let ctx = earlier.context(Scope::Request, &earlier.request_id, &span.tenant, now_ns);
            for (spec, mut track) in request_specs.iter().zip(tracks) {
                track.resolve(spec, earlier.observed(&spec.measure), &ctx, out);
            }
            usage.absorb(earlier);
        }
        if !usage.seen.insert(span.span_id) {
            return; // the same span again: counted once
        }
        echo(&mut amounts);
        add_spend(totals, span, &amounts);
        usage.add(span, amounts, *digest_calls);
        let mut tracks = std::mem::take(&mut usage.tracks);
        let ctx = usage.context(Scope::Request, &usage.request_id, &span.tenant, now_ns);
        for (spec, track) in request_specs.iter().zip(&mut tracks) {
            let observed = usage.observed(&spec.measure);
            track.update(&spec.name, observed, spec.limit, ratio, &ctx, out);
        }
        let ctx = usage.context(Scope::Tenant, &span.tenant, &span.tenant, now_ns);
        update_windows(tenant_specs, windows, amounts, ratio, &ctx, out);
        if let Some(principal) = span.audit.principal_id.as_deref() {
            if !principal_specs.is_empty() {
                let p = entry_of(principals, principal, || {
                    principal_specs.iter().map(WindowUsage::new).collect()
                });
                let ctx = usage.context(Scope::Principal, principal, &span.tenant, now_ns);
                update_windows(principal_specs, p, amounts, ratio, &ctx, out);
            }
        }
        usage.tracks = tracks;
    }

    /// Time passes: windows that fell back under their thresholds resolve, requests idle for
    /// `request_idle` resolve and are forgotten, and so are windows that are empty and quiet.
    pub fn tick(&mut self, now_ns: i64) -> Vec<Alarm> {
        let mut out = Vec::new();
        let idle = idle_ns(&self.config);
        for (tenant, state) in &mut self.tenants {
            let ratio = state.ratio;
            for (scope, id, spec, w) in state.windows_mut(tenant) {
                let observed = w.window.total(now_ns);
                let ctx = Context::of_window(scope, id, tenant, now_ns);
                w.track
                    .update(spec.name, observed, spec.limit, ratio, &ctx, &mut out);
            }
            state
                .principals
                .retain(|_, ws| ws.iter().any(WindowUsage::is_live));
            for u in state.take_idle(now_ns, idle) {
                resolve_request(u, &state.request_specs, tenant, now_ns, &mut out);
            }
        }
        self.evict_over_limit(now_ns, &mut out);
        self.tenants.retain(|_, t| !t.is_idle());
        self.resolve_quiet_mismatches(now_ns, &mut out);
        out
    }

    /// Requests forgotten early because more than `max_requests` were tracked.
    pub fn evicted_requests(&self) -> u64 {
        self.evicted
    }

    /// Past `max_requests`, or the memory budget's allowance, the least recently active
    /// requests resolve and are forgotten (down to 90% of the limit, so this sort does not
    /// run on every tick).
    fn evict_over_limit(&mut self, now_ns: i64, out: &mut Vec<Alarm>) {
        let tracked = self.report_memory();
        let by_memory = self.memory.allowance(Holder::Budgets) / TRACKED_REQUEST_BYTES;
        let max = self.config.max_requests.min(by_memory).max(1);
        if tracked <= max {
            return;
        }
        let mut by_age: Vec<(i64, &String, &String)> = self
            .tenants
            .iter()
            .flat_map(|(t, s)| {
                s.requests
                    .iter()
                    .map(move |(r, u)| (u.last_arrival_ns, t, r))
            })
            .collect();
        by_age.sort_unstable();
        let excess = tracked - max * 9 / 10;
        let mut victims: HashMap<String, HashSet<String>> = HashMap::new();
        for (_, t, r) in by_age.into_iter().take(excess) {
            victims.entry(t.clone()).or_default().insert(r.clone());
        }
        for (tenant, requests) in victims {
            let Some(state) = self.tenants.get_mut(&tenant) else {
                continue;
            };
            for request in requests {
                let Some(u) = state.requests.remove(&request) else {
                    continue;
                };
                state.forget_traces(&u);
                resolve_request(u, &state.request_specs, &tenant, now_ns, out);
                self.evicted += 1;
            }
        }
        self.report_memory();
    }

    /// Tells the memory budget what the tracked requests take; returns how many there are.
    fn report_memory(&self) -> usize {
        let tracked = self.requests_tracked();
        self.memory
            .set(Holder::Budgets, tracked * TRACKED_REQUEST_BYTES);
        tracked
    }

    /// Resolves every active request episode and forgets every request (at shutdown: request
    /// usage does not survive a restart).
    pub fn resolve_requests(&mut self, now_ns: i64) -> Vec<Alarm> {
        let mut out = Vec::new();
        for (tenant, state) in &mut self.tenants {
            state.traces.clear();
            state.idle_at.clear();
            for (_, u) in state.requests.drain() {
                resolve_request(u, &state.request_specs, tenant, now_ns, &mut out);
            }
        }
        out
    }

    /// Current usage and limits of one tenant's windows, principals and active requests, or of
    /// every tenant's; sorted by tenant, then scope, id and budget. With `all_requests` false,
    /// only requests with an active episode are listed (there may be tens of thousands).
    pub fn usage(
        &mut self,
        tenant: Option<&str>,
        all_requests: bool,
        now_ns: i64,
    ) -> Vec<(String, BudgetUsage)> {
        let mut out = Vec::new();
        for (t, state) in &mut self.tenants {
            if tenant.is_some_and(|want| want != t) {
                continue;
            }
            let ratio = state.ratio;
            let row =
                |scope: Scope, id: &str, spec_name: &str, usage: f64, limit: f64, track: &Track| {
                    (
                        t.clone(),
                        BudgetUsage {
                            scope: scope.as_str(),
                            id: id.to_string(),
                            budget: spec_name.to_string(),
                            usage,
                            limit,
                            warning_at: limit * ratio,
                            level: track.level.map(Level::as_str),
                        },
                    )
                };
            for (scope, id, spec, w) in state.windows_mut(t) {
                let usage = w.window.total(now_ns);
                out.push(row(scope, id, spec.name, usage, spec.limit, &w.track));
            }
            for u in state.requests.values() {
                if !all_requests && u.tracks.iter().all(|t| t.level.is_none()) {
                    continue;
                }
                for (spec, track) in state.request_specs.iter().zip(&u.tracks) {
                    let usage = u.observed(&spec.measure);
                    out.push(row(
                        Scope::Request,
                        &u.request_id,
                        &spec.name,
                        usage,
                        spec.limit,
                        track,
                    ));
                }
            }
        }
        out.sort_by(|(ta, a), (tb, b)| {
            (ta, a.scope, &a.id, &a.budget).cmp(&(tb, b.scope, &b.id, &b.budget))
        });
        out
    }

    /// For gauges: per (tenant, scope, budget) the usage (a tenant's window; the highest among
    /// the tenant's principals or active requests) and the limit. Costs one pass, no sorting
    /// and no per-request allocations.
    pub fn highest_usage(&mut self, now_ns: i64) -> Vec<(String, &'static str, String, f64, f64)> {
        let mut out = Vec::new();
        for (t, state) in &mut self.tenants {
            let tenant_usage: Vec<f64> = state
                .windows
                .iter_mut()
                .map(|w| w.window.total(now_ns))
                .collect();
            let mut principal_max = vec![0.0f64; state.principal_specs.len()];
            for windows in state.principals.values_mut() {
                for (max, w) in principal_max.iter_mut().zip(windows.iter_mut()) {
                    *max = max.max(w.window.total(now_ns));
                }
            }
            let mut request_max = vec![0.0f64; state.request_specs.len()];
            for u in state.requests.values() {
                for (max, spec) in request_max.iter_mut().zip(state.request_specs.iter()) {
                    *max = max.max(u.observed(&spec.measure));
                }
            }
            let windows = |specs: &[WindowSpec]| -> Vec<(String, f64)> {
                specs
                    .iter()
                    .map(|s| (s.name.to_string(), s.limit))
                    .collect()
            };
            let request_specs: Vec<(String, f64)> = state
                .request_specs
                .iter()
                .map(|s| (s.name.clone(), s.limit))
                .collect();
            let groups = [
                (Scope::Tenant, windows(&state.tenant_specs), tenant_usage),
                (
                    Scope::Principal,
                    windows(&state.principal_specs),
                    principal_max,
                ),
                (Scope::Request, request_specs, request_max),
            ];
            for (scope, specs, usage) in groups {
                for ((name, limit), usage) in specs.into_iter().zip(usage) {
                    out.push((t.clone(), scope.as_str(), name, usage, limit));
                }
            }
        }
        out
    }

    /// The warning and limit alarms of every active window episode, as of now (after a restart,
    /// so delivery targets that keep firing alerts alive, like Alertmanager, go on doing so).
    pub fn active_window_alarms(&mut self, now_ns: i64) -> Vec<Alarm> {
        let mut out = Vec::new();
        for (tenant, state) in &mut self.tenants {
            for (scope, id, spec, w) in state.windows_mut(tenant) {
                let Some(level) = w.track.level else { continue };
                let ctx = Context::of_window(scope, id, tenant, now_ns);
                let observed = w.window.total(now_ns);
                for fired in [Level::Warning, Level::Limit] {
                    if fired <= level {
                        let id = &w.track.alarm_id;
                        out.push(ctx.alarm(id, spec.name, fired, observed, spec.limit));
                    }
                }
            }
        }
        out
    }

    /// Window state worth saving (windows that hold spend or an active episode).
    pub fn saved_windows(&mut self) -> Vec<SavedWindow> {
        let mut out = Vec::new();
        for (tenant, state) in &mut self.tenants {
            for (scope, id, spec, w) in state.windows_mut(tenant) {
                if !w.is_live() {
                    continue;
                }
                out.push(SavedWindow {
                    scope: scope.as_str().to_string(),
                    tenant: tenant.clone(),
                    id: id.to_string(),
                    budget: spec.name.to_string(),
                    buckets: w.window.buckets().collect(),
                    level: w.track.level.map(|l| l.as_str().to_string()),
                    alarm_id: w.track.alarm_id.clone(),
                });
            }
        }
        out
    }

    /// Restores saved windows whose budget is still configured, with their active episodes
    /// (so an alarm that fired before a restart does not fire again). Returns how many were
    /// restored.
    pub fn restore_windows(&mut self, saved: Vec<SavedWindow>) -> usize {
        let mut restored = 0;
        for w in saved {
            let config = &self.config;
            let state = entry_of(&mut self.tenants, &w.tenant, || {
                TenantState::new(config, &w.tenant)
            });
            let (specs, windows) = match w.scope.as_str() {
                "tenant" => (&state.tenant_specs, &mut state.windows),
                "principal" => {
                    let specs = &state.principal_specs;
                    let ws = state
                        .principals
                        .entry(w.id.clone())
                        .or_insert_with(|| specs.iter().map(WindowUsage::new).collect());
                    (specs, ws)
                }
                _ => continue,
            };
            let Some(i) = specs.iter().position(|s| s.name == w.budget) else {
                continue; // that budget is no longer configured
            };
            let Some(slot) = windows.get_mut(i) else {
                continue;
            };
            slot.window.restore(w.buckets);
            slot.track = Track {
                level: match w.level.as_deref() {
                    Some("warning") => Some(Level::Warning),
                    Some("limit") => Some(Level::Limit),
                    _ => None,
                },
                alarm_id: w.alarm_id,
            };
            restored += 1;
        }
        restored
    }
}

/// Ends a request's active episodes.
fn resolve_request(
    mut u: RequestUsage,
    specs: &[RequestSpec],
    tenant: &str,
    now_ns: i64,
    out: &mut Vec<Alarm>,
) {
    let mut tracks = std::mem::take(&mut u.tracks);
    let ctx = u.context(Scope::Request, &u.request_id, tenant, now_ns);
    for (spec, track) in specs.iter().zip(&mut tracks) {
        track.resolve(spec, u.observed(&spec.measure), &ctx, out);
    }
}

/// `request_idle` in ns: how long a request with nothing new stays tracked.
fn idle_ns(config: &BudgetConfig) -> i64 {
    i64::try_from(config.request_idle.0.as_nanos()).unwrap_or(i64::MAX)
}

/// The value under `key`, made by `make` if there is none; the key is copied only then.
fn entry_of<'a, V>(
    map: &'a mut FastMap<String, V>,
    key: &str,
    make: impl FnOnce() -> V,
) -> &'a mut V {
    if !map.contains_key(key) {
        map.insert(key.to_string(), make());
    }
    map.get_mut(key)
        .unwrap_or_else(|| unreachable!("inserted above"))
}

/// Adds a counted span to its tenant's spend totals.
fn add_spend(totals: &mut FastMap<String, TenantTotals>, span: &SpanRecord, a: &SpanAmounts) {
    let t = entry_of(totals, &span.tenant, TenantTotals::default);
    match span.class {
        SpanClass::Model => {
            t.model_turns += 1;
            t.input_tokens = t.input_tokens.saturating_add(a.input);
            t.output_tokens = t.output_tokens.saturating_add(a.output);
            t.cost_usd += a.cost;
        }
        SpanClass::Tool if a.tool_call => {
            let tool = span.gen_ai.tool_name.as_deref().unwrap_or("unknown");
            *entry_of(&mut t.tool_calls, tool, || 0) += 1;
        }
        _ => {}
    }
}

impl RequestUsage {
    /// Counts a span that is new to the request; `digest` when a repeated-call budget needs
    /// the arguments' digest (the costliest part of a tool span).
    fn add(&mut self, span: &SpanRecord, a: SpanAmounts, digest: bool) {
        self.start_ns = self.start_ns.min(span.start_ns);
        self.end_ns = self.end_ns.max(span.end_ns);
        match span.class {
            SpanClass::Model => {
                self.model_turns += 1;
                self.input_tokens = self.input_tokens.saturating_add(a.input);
                self.output_tokens = self.output_tokens.saturating_add(a.output);
                self.cost_usd += a.cost;
            }
            SpanClass::Tool if a.tool_call => {
                self.tool_calls += 1;
                let g = &span.gen_ai;
                let tool = g.tool_name.as_deref().unwrap_or("unknown");
                *entry_of(&mut self.by_tool, tool, || 0) += 1;
                if digest {
                    let d = span.call_digest();
                    let n = self.repeats.entry(d).or_default();
                    *n += 1;
                    self.most_repeated = self.most_repeated.max(*n);
                }
            }
            _ => {}
        }
        if let Some(b) = span.audit.result_bytes {
            self.result_bytes = self.result_bytes.saturating_add(b.max(0) as u64);
        }
    }

    /// Adds the usage of spans first counted under another name (their trace's).
    fn absorb(&mut self, other: RequestUsage) {
        self.seen.extend(other.seen);
        self.traces.extend(other.traces);
        self.model_turns += other.model_turns;
        self.tool_calls += other.tool_calls;
        for (tool, n) in other.by_tool {
            *self.by_tool.entry(tool).or_default() += n;
        }
        for (digest, n) in other.repeats {
            let mine = self.repeats.entry(digest).or_default();
            *mine += n;
            self.most_repeated = self.most_repeated.max(*mine);
        }
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.cost_usd += other.cost_usd;
        self.result_bytes = self.result_bytes.saturating_add(other.result_bytes);
        self.start_ns = self.start_ns.min(other.start_ns);
        self.end_ns = self.end_ns.max(other.end_ns);
        self.last_arrival_ns = self.last_arrival_ns.max(other.last_arrival_ns);
    }

    /// Usage of one request budget.
    fn observed(&self, m: &RequestMeasure) -> f64 {
        match m {
            RequestMeasure::ModelTurns => self.model_turns as f64,
            RequestMeasure::ToolCalls => self.tool_calls as f64,
            RequestMeasure::ToolCallsOf(tool) => self.by_tool.get(tool).map_or(0.0, |n| *n as f64),
            RequestMeasure::RepeatedCalls => self.most_repeated as f64,
            RequestMeasure::WallTime => {
                self.end_ns.saturating_sub(self.start_ns).max(0) as f64 / 1e9
            }
            RequestMeasure::InputTokens => self.input_tokens as f64,
            RequestMeasure::OutputTokens => self.output_tokens as f64,
            RequestMeasure::Cost => self.cost_usd,
            RequestMeasure::ResultBytes => self.result_bytes as f64,
        }
    }

    /// Who an alarm raised while this request's span was counted names.
    fn context<'a>(
        &'a self,
        scope: Scope,
        scope_id: &'a str,
        tenant: &'a str,
        now_ns: i64,
    ) -> Context<'a> {
        Context {
            scope,
            scope_id,
            tenant,
            request_id: Some(&self.request_id),
            trace_id: Some(&self.trace_id),
            now_ns,
        }
    }
}

/// The request budgets that are on, with their limits.
fn request_specs(limits: &RequestBudgets) -> Arc<[RequestSpec]> {
    use RequestMeasure as M;
    let fixed = [
        ("model_turns", M::ModelTurns, limits.model_turns as f64),
        ("tool_calls", M::ToolCalls, limits.tool_calls as f64),
        (
            "repeated_calls",
            M::RepeatedCalls,
            limits.repeated_calls as f64,
        ),
        ("input_tokens", M::InputTokens, limits.input_tokens as f64),
        (
            "output_tokens",
            M::OutputTokens,
            limits.output_tokens as f64,
        ),
        ("cost_usd", M::Cost, limits.cost_usd),
        ("result_bytes", M::ResultBytes, limits.result_bytes as f64),
        ("wall_time", M::WallTime, limits.wall_time.0.as_secs_f64()),
    ];
    fixed
        .into_iter()
        .map(|(name, measure, limit)| RequestSpec {
            name: name.to_string(),
            measure,
            limit,
        })
        .chain(
            limits
                .tool_calls_by_tool
                .iter()
                .map(|(tool, limit)| RequestSpec {
                    name: format!("tool_calls:{tool}"),
                    measure: M::ToolCallsOf(tool.clone()),
                    limit: *limit as f64,
                }),
        )
        .filter(|s| s.limit > 0.0)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::config::{TenantBudgets, WindowBudgets};
    use super::*;
    use crate::event::fixtures;
    use crate::units::HumanDuration;
    use std::collections::BTreeMap;
    use std::time::Duration;

    const SEC: i64 = 1_000_000_000;

    fn tool_span(id: u32, args: &str) -> SpanRecord {
        let mut s = fixtures::span();
        s.tenant = "acme".into();
        s.span_id = u64::from(id).to_be_bytes();
        s.class = SpanClass::Tool;
        s.start_ns = 1_000 * SEC + i64::from(id) * SEC;
        s.end_ns = s.start_ns + SEC / 2;
        s.audit.request_id = Some("req-loop".into());
        s.audit.principal_id = Some("user-1".into());
        s.gen_ai.tool_name = Some("search_orders".into());
        s.gen_ai.tool_arguments = Some(args.into());
        s
    }

    /// A downstream service's span in `of`'s trace: no request id.
    fn downstream_of(of: &SpanRecord, start_ns: i64, end_ns: i64) -> SpanRecord {
        let mut s = fixtures::span();
        s.tenant = of.tenant.clone();
        s.trace_id = of.trace_id;
        s.span_id = [9; 8];
        s.class = SpanClass::Downstream;
        s.audit.request_id = None;
        s.start_ns = start_ns;
        s.end_ns = end_ns;
        s
    }

    fn batch(spans: Vec<SpanRecord>) -> EventBatch {
        EventBatch {
            spans,
            logs: vec![],
        }
    }

    fn fired(alarms: &[Alarm]) -> Vec<(String, &'static str, String)> {
        alarms
            .iter()
            .map(|a| (a.budget.clone(), a.level.as_str(), a.reason.clone()))
            .collect()
    }

    #[test]
    fn a_sender_claiming_outside_its_tenants_opens_one_episode_that_resolves_when_quiet() {
        let mut e = BudgetEvaluator::new(BudgetConfig::default(), PriceTable::default());
        let sender = Some(std::sync::Arc::new(crate::event::Sender {
            name: "executor-eu".into(),
            tenants: crate::event::SenderTenants::Listed(vec!["acme".into()]),
        }));
        let mut bad = tool_span(1, "{}");
        bad.sender = sender.clone();
        bad.tenant_mismatch = true;
        let mut fine = tool_span(2, "{}");
        fine.sender = sender.clone();
        let out = e.observe(&batch(vec![fine.clone(), bad.clone()]), 2_000 * SEC);
        assert_eq!(
            fired(&out),
            [(
                TENANT_BINDING.to_string(),
                "limit",
                "tenant_mismatch".to_string()
            )]
        );
        let a = &out[0];
        assert_eq!(
            (
                a.scope,
                a.scope_id.as_str(),
                a.tenant.as_str(),
                a.request_id.as_deref()
            ),
            (Scope::Sender, "executor-eu", "acme", Some("req-loop"))
        );
        assert_eq!(a.trace_id.as_deref(), Some(hex_id(&bad.trace_id).as_str()));
        let mut log = fixtures::log();
        log.sender = sender;
        log.tenant_mismatch = true;
        let more = EventBatch {
            spans: vec![bad.clone()],
            logs: vec![log],
        };
        assert!(e.observe(&more, 2_100 * SEC).is_empty(), "one episode");
        assert!(e.tick(2_100 * SEC + MISMATCH_QUIET_NS - 1).is_empty());
        let resolved = e.tick(2_100 * SEC + MISMATCH_QUIET_NS);
        assert_eq!(
            fired(&resolved),
            [(
                TENANT_BINDING.to_string(),
                "resolved",
                "resolved:tenant_binding".to_string()
            )]
        );
        assert_eq!(
            (resolved[0].alarm_id.as_str(), resolved[0].observed),
            (a.alarm_id.as_str(), 3.0)
        );
        assert_eq!(
            fired(&e.observe(&batch(vec![bad]), 9_000 * SEC)).len(),
            1,
            "a new episode"
        );
    }

    #[test]
    fn a_loop_fires_each_alarm_once_while_it_runs() {
        let mut config = BudgetConfig::default();
        config
            .request
            .tool_calls_by_tool
            .insert("search_orders".into(), 20);
        let mut e = BudgetEvaluator::new(config, PriceTable::default());
        let mut all = Vec::new();
        for i in 0..60u32 {
            // The same call with keys in another order every other time.
            let args = if i % 2 == 0 {
                r#"{"q":"late","page":1}"#
            } else {
                r#"{ "page": 1, "q": "late" }"#
            };
            let out = e.observe(&batch(vec![tool_span(i, args)]), 2_000 * SEC + i64::from(i));
            for a in &out {
                assert_eq!(a.request_id.as_deref(), Some("req-loop"));
                all.push((i, a.clone()));
            }
        }
        let at = |budget: &str, level: Level| {
            all.iter()
                .filter(|(_, a)| a.budget == budget && a.level == level)
                .map(|(i, _)| *i)
                .collect::<Vec<_>>()
        };
        // Fired on the call that crossed, exactly once each (call i is the (i+1)th).
        assert_eq!(at("repeated_calls", Level::Warning), [3]);
        assert_eq!(at("repeated_calls", Level::Limit), [4]);
        assert_eq!(at("tool_calls:search_orders", Level::Warning), [15]);
        assert_eq!(at("tool_calls:search_orders", Level::Limit), [19]);
        assert_eq!(at("tool_calls", Level::Warning), [39]);
        assert_eq!(at("tool_calls", Level::Limit), [49]);
        assert_eq!(all.len(), 6);
        let limit = all
            .iter()
            .find(|(_, a)| a.budget == "repeated_calls" && a.level == Level::Limit)
            .map(|(_, a)| a)
            .expect("repeated call alarm");
        assert_eq!(limit.reason, "repeated_call");
        assert_eq!((limit.observed, limit.limit), (5.0, 5.0));
        assert_eq!(
            all.iter()
                .find(|(_, a)| a.budget == "tool_calls" && a.level == Level::Limit)
                .map(|(_, a)| a.reason.as_str()),
            Some("budget_exhausted:tool_calls")
        );
        // A duplicate span changes nothing.
        assert!(e
            .observe(&batch(vec![tool_span(59, "{}")]), 2_100 * SEC)
            .is_empty());
        // Idle: every active request alarm resolves, with its episode's id.
        assert!(e.tick(2_100 * SEC + 299 * SEC).is_empty());
        let resolved = e.tick(2_100 * SEC + 300 * SEC);
        assert_eq!(resolved.len(), 3, "{:?}", fired(&resolved));
        for r in &resolved {
            assert_eq!(r.level, Level::Resolved);
            let first = all
                .iter()
                .find(|(_, a)| a.budget == r.budget)
                .map(|(_, a)| a.alarm_id.clone());
            assert_eq!(Some(r.alarm_id.clone()), first);
        }
        assert_eq!(e.requests_tracked(), 0);
    }

    #[test]
    fn a_span_without_a_request_id_counts_for_its_traces_request() {
        let mut e = BudgetEvaluator::new(BudgetConfig::default(), PriceTable::default());
        let tool = tool_span(1, "{}");
        // A downstream service's span: same trace, no request id, ends 11 minutes later.
        let downstream = downstream_of(&tool, tool.start_ns, tool.start_ns + 660 * SEC);
        let out = e.observe(&batch(vec![tool, downstream]), 2_000 * SEC);
        assert_eq!(e.requests_tracked(), 1);
        assert_eq!(
            fired(&out),
            [
                ("wall_time".into(), "warning", "warning:wall_time".into()),
                ("wall_time".into(), "limit", "wall_time_exceeded".into()),
            ]
        );
        assert_eq!(out[0].request_id.as_deref(), Some("req-loop"));
    }

    #[test]
    fn past_max_requests_the_least_recently_active_resolve_and_are_forgotten() {
        let config = BudgetConfig {
            max_requests: 10,
            ..Default::default()
        };
        let mut e = BudgetEvaluator::new(config, PriceTable::default());
        let mut fired_for = Vec::new();
        for r in 0..12u8 {
            // Each request breaks its repeated-call budget (five identical calls).
            for i in 0..5u32 {
                let mut s = tool_span(i, "{}");
                s.trace_id = [r + 1; 16];
                s.audit.request_id = Some(format!("req-{r:02}"));
                let out = e.observe(&batch(vec![s]), 3_000 * SEC + i64::from(r) * SEC);
                fired_for.extend(out.into_iter().map(|a| a.scope_id));
            }
        }
        assert_eq!(fired_for.len(), 24, "warning and limit per request");
        assert_eq!(e.requests_tracked(), 12);
        let resolved = e.tick(3_020 * SEC);
        // Down to 9 (90% of 10): the three oldest go, each resolving its episode.
        assert_eq!(e.requests_tracked(), 9);
        assert_eq!(e.evicted_requests(), 3);
        let mut gone: Vec<&str> = resolved.iter().map(|a| a.scope_id.as_str()).collect();
        gone.sort_unstable();
        gone.dedup();
        assert_eq!(gone, ["req-00", "req-01", "req-02"]);
        assert!(resolved.iter().all(|a| a.level == Level::Resolved));
    }

    #[test]
    fn past_the_memory_allowance_the_least_recently_active_resolve_and_are_forgotten_too() {
        // 240 KiB: the budget stage's share is 30 KiB, ten tracked requests; the archive holds
        // the rest of the pool, so there is nothing to borrow.
        let memory = MemoryBudget::new(240 << 10);
        memory.set(Holder::Archive, 210 << 10);
        assert_eq!(
            memory.allowance(Holder::Budgets),
            10 * TRACKED_REQUEST_BYTES
        );
        let mut e = BudgetEvaluator::new(BudgetConfig::default(), PriceTable::default())
            .with_memory(std::sync::Arc::clone(&memory));
        for r in 0..12u8 {
            let mut s = tool_span(1, "{}");
            s.trace_id = [r + 1; 16];
            s.audit.request_id = Some(format!("req-{r:02}"));
            e.observe(&batch(vec![s]), 3_000 * SEC + i64::from(r) * SEC);
        }
        assert_eq!(e.requests_tracked(), 12);
        e.tick(3_020 * SEC);
        // Down to 9 (90% of what the memory allows): the three oldest go.
        assert_eq!(e.requests_tracked(), 9);
        assert_eq!(e.evicted_requests(), 3);
        assert_eq!(memory.held(Holder::Budgets), 9 * TRACKED_REQUEST_BYTES);
        // With the archive's share back to the pool, nothing more goes.
        memory.set(Holder::Archive, 0);
        e.tick(3_021 * SEC);
        assert_eq!(e.requests_tracked(), 9);
        assert_eq!(e.evicted_requests(), 3);
    }

    /// One side of an MCP `tools/call` traced on both sides (span `id`, JSON-RPC id `rpc`).
    fn mcp_side(id: u32, parent: u32, kind: crate::event::SpanKind, rpc: &str) -> SpanRecord {
        let mut s = tool_span(id, r#"{"city":"Oslo"}"#);
        s.kind = kind;
        s.parent_span_id = Some(u64::from(parent).to_be_bytes());
        s.gen_ai.mcp_method = Some("tools/call".into());
        s.attributes.0.push((
            "jsonrpc.request.id".into(),
            crate::event::AttrValue::Str(rpc.into()),
        ));
        s
    }

    #[test]
    fn an_mcp_call_traced_on_both_sides_counts_once_in_either_order() {
        use crate::event::SpanKind::{Client, Server};
        let both = || {
            let mut calls = Vec::new();
            for i in 0..6u32 {
                let client = 10 + 2 * i;
                calls.push(mcp_side(client, 1, Client, &i.to_string()));
                calls.push(mcp_side(client + 1, client, Server, &i.to_string()));
            }
            calls
        };
        let mut reversed = both();
        reversed.reverse();
        for (spans, budgets) in [(both(), true), (reversed, true), (both(), false)] {
            let mut config = BudgetConfig::default();
            if !budgets {
                config.request = RequestBudgets {
                    model_turns: 0,
                    tool_calls: 0,
                    repeated_calls: 0,
                    wall_time: super::super::config::LimitDuration(Duration::ZERO),
                    ..Default::default()
                };
            }
            if budgets {
                // Six calls warn (at 5.6) and stay under both limits; twelve would not.
                config.request.repeated_calls = 10;
                config
                    .request
                    .tool_calls_by_tool
                    .insert("search_orders".into(), 7);
            }
            let mut e = BudgetEvaluator::new(config, PriceTable::default());
            let mut alarms = Vec::new();
            for (i, s) in spans.into_iter().enumerate() {
                alarms.extend(e.observe(&batch(vec![s]), 2_000 * SEC + i as i64));
            }
            let fired: Vec<_> = fired(&alarms)
                .into_iter()
                .map(|(budget, level, _)| (budget, level))
                .collect();
            if budgets {
                let warning = ("tool_calls:search_orders".to_string(), "warning");
                assert_eq!(fired, [warning]);
            } else {
                assert!(fired.is_empty());
            }
            assert_eq!(e.take_totals()["acme"].tool_calls["search_orders"], 6);
        }
    }

    #[test]
    fn a_reload_keeps_usage_and_moves_each_budget_to_its_new_limit() {
        let mut config = BudgetConfig::default();
        config.request.tool_calls = 50;
        config.tenant.tool_calls_per_minute = 100;
        let mut e = BudgetEvaluator::new(config.clone(), PriceTable::default());
        // Just after the calls (they end at 1,000.5 s to 1,009.5 s): inside the minute window.
        let now = 1_010 * SEC;
        // Ten distinct calls: under every limit.
        let spans = (0..10)
            .map(|i| tool_span(i, &format!("{{\"q\":{i}}}")))
            .collect();
        assert!(fired(&e.observe(&batch(spans), now)).is_empty());
        // Lower limits: the request and the tenant's window are over them at once.
        config.request.tool_calls = 8;
        config.tenant.tool_calls_per_minute = 5;
        let alarms = e.reconfigure(config.clone(), now + SEC);
        let got: Vec<_> = alarms
            .iter()
            .map(|a| (a.budget.as_str(), a.level.as_str(), a.observed, a.limit))
            .collect();
        assert_eq!(
            got,
            [
                ("tool_calls", "warning", 10.0, 8.0),
                ("tool_calls", "limit", 10.0, 8.0),
                ("tool_calls_per_minute", "warning", 10.0, 5.0),
                ("tool_calls_per_minute", "limit", 10.0, 5.0),
            ]
        );
        assert_eq!(alarms[0].request_id.as_deref(), Some("req-loop"));
        // The usage went on: the next call is the eleventh, and fires nothing new.
        let out = e.observe(&batch(vec![tool_span(10, "{}")]), now + 2 * SEC);
        assert!(fired(&out).is_empty(), "{:?}", fired(&out));
        let usage = e
            .usage(Some("acme"), true, now + 2 * SEC)
            .into_iter()
            .map(|(_, u)| u)
            .find(|u| u.scope == "request" && u.budget == "tool_calls")
            .expect("the request's tool calls");
        assert_eq!((usage.usage, usage.limit), (11.0, 8.0));
        // Raised so the request is in the warning band: the limit episode ends and a warning
        // one starts; raised past it, that one ends too.
        config.request.tool_calls = 12;
        let alarms = e.reconfigure(config.clone(), now + 3 * SEC);
        let got: Vec<_> = alarms
            .iter()
            .filter(|a| a.budget == "tool_calls")
            .map(|a| (a.level.as_str(), a.observed, a.limit))
            .collect();
        assert_eq!(got, [("resolved", 11.0, 12.0), ("warning", 11.0, 12.0)]);
        assert_ne!(alarms[0].alarm_id, alarms[1].alarm_id, "a new episode");
        config.request.tool_calls = 100;
        let alarms = e.reconfigure(config.clone(), now + 3 * SEC);
        let got: Vec<_> = alarms
            .iter()
            .filter(|a| a.budget == "tool_calls")
            .map(|a| a.level.as_str())
            .collect();
        assert_eq!(got, ["resolved"]);
        config.request.tool_calls = 8;
        e.reconfigure(config.clone(), now + 3 * SEC);
        // Budgets switched off: their episodes end.
        config.request.tool_calls = 0;
        config.tenant.tool_calls_per_minute = 0;
        let alarms = e.reconfigure(config, now + 3 * SEC);
        let got: Vec<_> = alarms
            .iter()
            .map(|a| (a.budget.as_str(), a.level.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                ("tool_calls", "resolved"),
                ("tool_calls_per_minute", "resolved")
            ]
        );
    }

    #[test]
    fn with_every_budget_off_only_spend_is_counted() {
        let config = BudgetConfig {
            request: RequestBudgets {
                model_turns: 0,
                tool_calls: 0,
                repeated_calls: 0,
                wall_time: super::super::config::LimitDuration(std::time::Duration::ZERO),
                ..Default::default()
            },
            ..Default::default()
        };
        let mut e = BudgetEvaluator::new(config, PriceTable::default());
        let spans = (0..60).map(|i| tool_span(i, "{}")).collect();
        assert!(e.observe(&batch(spans), 2_000 * SEC).is_empty());
        assert_eq!(e.requests_tracked(), 0);
        let totals = e.take_totals();
        assert_eq!(totals["acme"].tool_calls["search_orders"], 60);
    }

    #[test]
    fn a_window_hovering_at_its_threshold_does_not_flap() {
        let config = BudgetConfig {
            tenant: WindowBudgets {
                tool_calls_per_minute: 100,
                ..Default::default()
            },
            request: RequestBudgets {
                tool_calls: 0,
                repeated_calls: 0,
                wall_time: super::super::config::LimitDuration(std::time::Duration::ZERO),
                ..Default::default()
            },
            ..Default::default()
        };
        let mut e = BudgetEvaluator::new(config, PriceTable::default());
        let now = 10_000 * SEC;
        let calls = |ids: std::ops::Range<u32>, end: i64| -> EventBatch {
            batch(
                ids.map(|i| {
                    let mut s = tool_span(i, "{}");
                    s.end_ns = end;
                    s
                })
                .collect(),
            )
        };
        // A steady 80 calls a minute (one every 750 ms) for five minutes: usage hovers at the
        // warning threshold, 79 or 80 as buckets roll, and must not fire and resolve each time.
        let mut all = Vec::new();
        let mut t = now;
        for i in 0..400u32 {
            all.extend(e.observe(&calls(i..i + 1, t), t));
            all.extend(e.tick(t));
            t += 750_000_000;
        }
        let levels: Vec<&str> = all.iter().map(|a| a.level.as_str()).collect();
        assert_eq!(levels, ["warning"], "one episode, no flapping");
        let out = e.tick(t + 125 * SEC);
        assert_eq!(
            fired(&out),
            [(
                "tool_calls_per_minute".into(),
                "resolved",
                "resolved:tool_calls_per_minute".into()
            )]
        );
    }

    #[test]
    fn a_tenant_can_have_its_own_warning_ratio() {
        let mut config = BudgetConfig::default();
        config.tenants.insert(
            "acme".into(),
            TenantBudgets {
                warning_ratio: Some(0.5),
                ..Default::default()
            },
        );
        assert!(config.validate().is_ok());
        let mut e = BudgetEvaluator::new(config, PriceTable::default());
        // Distinct arguments: only the tool_calls budget (50) moves; 0.5 warns at call 25.
        let mut warned_at = None;
        for i in 0..30u32 {
            let out = e.observe(
                &batch(vec![tool_span(i, &format!("{{\"n\":{i}}}"))]),
                2_000 * SEC,
            );
            if out
                .iter()
                .any(|a| a.budget == "tool_calls" && a.level == Level::Warning)
            {
                warned_at = Some(i + 1);
            }
        }
        assert_eq!(warned_at, Some(25));
    }

    #[test]
    fn spans_that_arrive_before_their_trace_names_its_request_are_folded_into_it() {
        let mut e = BudgetEvaluator::new(BudgetConfig::default(), PriceTable::default());
        let tool = tool_span(1, "{}");
        // A downstream service's span of the same trace arrives first, with no request id.
        let start = tool.start_ns - 700 * SEC;
        let downstream = downstream_of(&tool, start, start + SEC);
        let first = e.observe(&batch(vec![downstream.clone()]), 2_000 * SEC);
        assert!(first.is_empty());
        assert_eq!(e.requests_tracked(), 1, "tracked under the trace for now");
        let out = e.observe(&batch(vec![tool]), 2_001 * SEC);
        assert_eq!(e.requests_tracked(), 1, "folded into req-loop");
        // The downstream span's start now counts for req-loop's wall time (700.5 s).
        assert_eq!(
            fired(&out),
            [
                ("wall_time".into(), "warning", "warning:wall_time".into()),
                ("wall_time".into(), "limit", "wall_time_exceeded".into()),
            ]
        );
        assert_eq!(out[1].scope_id, "req-loop");
        // The same downstream span again is a duplicate of the folded request.
        assert!(e.observe(&batch(vec![downstream]), 2_002 * SEC).is_empty());
        assert_eq!(e.requests_tracked(), 1);
    }

    #[test]
    fn wall_time_is_exceeded_by_a_long_request() {
        let mut e = BudgetEvaluator::new(BudgetConfig::default(), PriceTable::default());
        let mut first = tool_span(1, "{}");
        first.start_ns = 0;
        first.end_ns = SEC;
        let mut late = tool_span(2, "{\"x\":1}");
        late.start_ns = 500 * SEC;
        late.end_ns = 601 * SEC;
        let out = e.observe(&batch(vec![first, late]), 700 * SEC);
        assert_eq!(
            fired(&out),
            [
                ("wall_time".into(), "warning", "warning:wall_time".into()),
                ("wall_time".into(), "limit", "wall_time_exceeded".into()),
            ]
        );
        assert_eq!(out[1].observed, 601.0);
    }

    #[test]
    fn a_tenant_window_fires_and_resolves_as_time_passes() {
        let config = BudgetConfig {
            tenants: BTreeMap::from([(
                "acme".to_string(),
                TenantBudgets {
                    tenant: Some(WindowBudgets {
                        tokens_per_minute: 1_000,
                        ..Default::default()
                    }),
                    ..Default::default()
                },
            )]),
            request_idle: HumanDuration(Duration::from_secs(3600)),
            ..Default::default()
        };
        let mut e = BudgetEvaluator::new(config, PriceTable::default());
        let now = 10_000 * SEC;
        let model = |id: u32, tokens: i64, end: i64| {
            let mut s = fixtures::span();
            s.tenant = "acme".into();
            s.span_id = u64::from(id).to_be_bytes();
            // A request of its own each, so only the tenant window adds them up.
            s.trace_id = [id as u8; 16];
            s.class = SpanClass::Model;
            s.start_ns = end - SEC;
            s.end_ns = end;
            s.gen_ai.input_tokens = Some(tokens);
            s.gen_ai.output_tokens = Some(0);
            s
        };
        assert!(e.observe(&batch(vec![model(1, 500, now)]), now).is_empty());
        let out = e.observe(&batch(vec![model(2, 400, now + SEC)]), now + SEC);
        assert_eq!(
            fired(&out),
            [(
                "tokens_per_minute".into(),
                "warning",
                "warning:tokens_per_minute".into()
            )]
        );
        assert_eq!(out[0].scope, Scope::Tenant);
        assert_eq!(out[0].scope_id, "acme");
        // A span that ended long ago (out of order) lands in its own, expired, bucket.
        assert!(e
            .observe(
                &batch(vec![model(3, 5_000, now - 600 * SEC)]),
                now + 2 * SEC
            )
            .is_empty());
        let out = e.observe(&batch(vec![model(4, 100, now + 3 * SEC)]), now + 3 * SEC);
        assert_eq!(
            fired(&out),
            [(
                "tokens_per_minute".into(),
                "limit",
                "budget_exhausted:tokens_per_minute".into()
            )]
        );
        let usage = e.usage(Some("acme"), true, now + 3 * SEC);
        let window = usage
            .iter()
            .find(|(_, u)| u.scope == "tenant")
            .map(|(_, u)| u.clone())
            .expect("the tenant window");
        assert_eq!(
            (window.usage, window.limit, window.level),
            (1_000.0, 1_000.0, Some("limit"))
        );
        // A restart in the middle: the saved window carries its spend and its episode.
        let mut restarted = BudgetEvaluator::new(e.config().clone(), PriceTable::default());
        assert_eq!(restarted.restore_windows(e.saved_windows()), 1);
        assert!(restarted
            .observe(&batch(vec![model(5, 10, now + 4 * SEC)]), now + 4 * SEC)
            .is_empty());
        // Its active episode is handed to delivery again, under the same id.
        let active = restarted.active_window_alarms(now + 4 * SEC);
        let levels: Vec<(Level, &str)> = active
            .iter()
            .map(|a| (a.level, a.alarm_id.as_str()))
            .collect();
        let id = out[0].alarm_id.as_str();
        assert_eq!(levels, [(Level::Warning, id), (Level::Limit, id)]);
        let r = restarted.usage(Some("acme"), true, now + 4 * SEC);
        let window = r
            .iter()
            .find(|(_, u)| u.scope == "tenant")
            .map(|(_, u)| u.usage);
        assert_eq!(window, Some(1_010.0));
        // Still over after 30 s; once the first two spans' buckets leave, back under: resolved.
        assert!(e.tick(now + 30 * SEC).is_empty());
        let out = e.tick(now + 62 * SEC);
        assert_eq!(
            fired(&out),
            [(
                "tokens_per_minute".into(),
                "resolved",
                "resolved:tokens_per_minute".into()
            )]
        );
        assert!(e.tick(now + 200 * SEC).is_empty(), "resolves once");
    }
}
