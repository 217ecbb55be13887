//! Streaming evaluation: usage is updated as each span arrives, and a budget's alarm fires the
//! moment usage crosses its warning threshold or its limit, while the request is still running.
//!
//! Each (scope, budget) moves through levels none → warning → limit. Every level fires once per
//! episode; a window budget resolves when its usage falls back under the warning threshold, a
//! request budget when the request has been idle for `request_idle` (its counters only grow).
//! The resolution carries the episode's `alarm_id`, so receivers can pair them.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, HashSet};

use sha2::{Digest, Sha256};

use super::config::{BudgetConfig, Measure, RequestBudgets};
use super::digest::call_digest;
use super::window::RollingWindow;
use crate::assemble::prices::{PriceTable, TokenCounts};
use crate::event::{hex_id, EventBatch, SpanClass, SpanId, SpanRecord};

/// What an alarm is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scope {
    /// One request.
    Request,
    /// A tenant over a window.
    Tenant,
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
}

fn reason(budget: &str, level: Level) -> String {
    match level {
        Level::Limit if budget == "repeated_calls" => "repeated_call".into(),
        Level::Limit if budget == "wall_time" => "wall_time_exceeded".into(),
        Level::Limit => format!("budget_exhausted:{budget}"),
        Level::Warning => format!("warning:{budget}"),
        Level::Resolved => format!("resolved:{budget}"),
    }
}

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
    limit: f64,
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

impl Context<'_> {
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
            (Some(_), None) => {
                fire(Level::Resolved, &self.alarm_id, out);
                self.level = None;
            }
            (prev, Some(next)) if prev.is_none_or(|p| next > p) => {
                if prev.is_none() {
                    self.alarm_id = alarm_id(ctx, budget);
                    self.limit = limit;
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

    /// Resolves an active episode (the request is over).
    fn resolve(&mut self, budget: &str, observed: f64, ctx: &Context<'_>, out: &mut Vec<Alarm>) {
        if self.level.take().is_some() {
            out.push(ctx.alarm(
                &self.alarm_id,
                budget,
                Level::Resolved,
                observed,
                self.limit,
            ));
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

/// What one request has used so far.
#[derive(Debug, Default)]
struct RequestUsage {
    tenant: String,
    request_id: String,
    trace_id: String,
    seen: HashSet<SpanId>,
    model_turns: u64,
    tool_calls: u64,
    by_tool: HashMap<String, u64>,
    repeats: HashMap<String, u64>,
    input_tokens: u64,
    output_tokens: u64,
    cost_usd: f64,
    result_bytes: u64,
    start_ns: i64,
    end_ns: i64,
    last_arrival_ns: i64,
    tracks: BTreeMap<String, Track>,
}

/// One window of one tenant or principal.
#[derive(Debug)]
struct WindowUsage {
    window: RollingWindow,
    limit: f64,
    track: Track,
    tenant: String,
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
    pub tool_calls: HashMap<String, u64>,
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

/// Usage against budgets, for every request, tenant and principal seen.
pub struct BudgetEvaluator {
    config: BudgetConfig,
    prices: PriceTable,
    requests: HashMap<(String, String), RequestUsage>,
    windows: BTreeMap<(Scope, String, String, String), WindowUsage>,
    totals: HashMap<String, TenantTotals>,
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

impl BudgetEvaluator {
    /// An evaluator with the configured budgets and prices.
    pub fn new(config: BudgetConfig, prices: PriceTable) -> BudgetEvaluator {
        BudgetEvaluator {
            config,
            prices,
            requests: HashMap::new(),
            windows: BTreeMap::new(),
            totals: HashMap::new(),
        }
    }

    /// The configuration in force.
    pub fn config(&self) -> &BudgetConfig {
        &self.config
    }

    /// What each tenant spent since the last call.
    pub fn take_totals(&mut self) -> HashMap<String, TenantTotals> {
        std::mem::take(&mut self.totals)
    }

    /// Requests being tracked.
    pub fn requests_tracked(&self) -> usize {
        self.requests.len()
    }

    /// Takes in a protected batch at wall-clock `now_ns`; returns the alarms it fires.
    pub fn observe(&mut self, batch: &EventBatch, now_ns: i64) -> Vec<Alarm> {
        let mut out = Vec::new();
        for span in &batch.spans {
            self.observe_span(span, now_ns, &mut out);
        }
        out
    }

    fn observe_span(&mut self, span: &SpanRecord, now_ns: i64, out: &mut Vec<Alarm>) {
        let trace = hex_id(&span.trace_id);
        let request_id = span
            .audit
            .request_id
            .clone()
            .unwrap_or_else(|| trace.clone());
        let key = (span.tenant.clone(), request_id.clone());
        let usage = self.requests.entry(key).or_insert_with(|| RequestUsage {
            tenant: span.tenant.clone(),
            request_id: request_id.clone(),
            trace_id: trace.clone(),
            start_ns: span.start_ns,
            end_ns: span.end_ns,
            ..Default::default()
        });
        usage.last_arrival_ns = now_ns;
        if !usage.seen.insert(span.span_id) {
            return; // the same span again: counted once
        }
        usage.start_ns = usage.start_ns.min(span.start_ns);
        usage.end_ns = usage.end_ns.max(span.end_ns);
        let g = &span.gen_ai;
        let mut tokens = 0u64;
        let mut cost = 0.0;
        let mut tool_call = false;
        match span.class {
            SpanClass::Model => {
                usage.model_turns += 1;
                let input = g.input_tokens.unwrap_or(0).max(0) as u64;
                let output = g.output_tokens.unwrap_or(0).max(0) as u64;
                usage.input_tokens = usage.input_tokens.saturating_add(input);
                usage.output_tokens = usage.output_tokens.saturating_add(output);
                tokens = input.saturating_add(output);
                let model = g.response_model.as_deref().or(g.request_model.as_deref());
                if let (Some(provider), Some(model)) = (g.provider.as_deref(), model) {
                    let counts = TokenCounts {
                        input: input as i64,
                        output: output as i64,
                        cache_read: g.cache_read_input_tokens.unwrap_or(0),
                    };
                    cost = self.prices.cost(provider, model, counts).unwrap_or(0.0);
                    usage.cost_usd += cost;
                }
                let t = self.totals.entry(span.tenant.clone()).or_default();
                t.model_turns += 1;
                t.input_tokens = t.input_tokens.saturating_add(input);
                t.output_tokens = t.output_tokens.saturating_add(output);
                t.cost_usd += cost;
            }
            SpanClass::Tool => {
                tool_call = true;
                usage.tool_calls += 1;
                let tool = g.tool_name.clone().unwrap_or_else(|| "unknown".into());
                let digest = call_digest(&tool, g.tool_arguments.as_deref().unwrap_or(""));
                let t = self.totals.entry(span.tenant.clone()).or_default();
                *t.tool_calls.entry(tool.clone()).or_default() += 1;
                *usage.by_tool.entry(tool).or_default() += 1;
                *usage.repeats.entry(digest).or_default() += 1;
            }
            _ => {}
        }
        if let Some(b) = span.audit.result_bytes {
            usage.result_bytes = usage.result_bytes.saturating_add(b.max(0) as u64);
        }
        let limits = self.config.request_for(&span.tenant);
        check_request(usage, limits, self.config.warning_ratio, now_ns, out);

        // Windows of the tenant and the principal, at the span's end time.
        let principal = span.audit.principal_id.clone();
        let scopes = [
            (Scope::Tenant, Some(span.tenant.clone())),
            (Scope::Principal, principal),
        ];
        for (scope, id) in scopes {
            let Some(id) = id else { continue };
            let budgets = match scope {
                Scope::Tenant => self.config.tenant_for(&span.tenant).active(),
                _ => self.config.principal_for(&span.tenant).active(),
            };
            for (name, measure, span_len, limit) in budgets {
                let amount = match measure {
                    Measure::Tokens => tokens as f64,
                    Measure::Cost => cost,
                    Measure::ToolCalls => f64::from(u8::from(tool_call)),
                };
                let w = self
                    .windows
                    .entry((scope, span.tenant.clone(), id.clone(), name.clone()))
                    .or_insert_with(|| WindowUsage {
                        window: RollingWindow::new(span_len, buckets_for(span_len.as_secs())),
                        limit,
                        track: Track::default(),
                        tenant: span.tenant.clone(),
                    });
                if amount > 0.0 {
                    // Too old to count: the span ended before the window began.
                    let _ = w.window.add(span.end_ns, amount, now_ns);
                }
                let observed = w.window.total(now_ns);
                let ctx = Context {
                    scope,
                    scope_id: &id,
                    tenant: &span.tenant,
                    request_id: Some(&request_id),
                    trace_id: Some(&trace),
                    now_ns,
                };
                w.track.update(
                    &name,
                    observed,
                    w.limit,
                    self.config.warning_ratio,
                    &ctx,
                    out,
                );
            }
        }
    }

    /// Time passes: windows that fell back under their thresholds resolve, requests idle for
    /// `request_idle` resolve and are forgotten, and so are windows that are empty and quiet.
    pub fn tick(&mut self, now_ns: i64) -> Vec<Alarm> {
        let mut out = Vec::new();
        let ratio = self.config.warning_ratio;
        for ((scope, _, id, name), w) in &mut self.windows {
            let observed = w.window.total(now_ns);
            let ctx = Context {
                scope: *scope,
                scope_id: id,
                tenant: &w.tenant,
                request_id: None,
                trace_id: None,
                now_ns,
            };
            w.track
                .update(name, observed, w.limit, ratio, &ctx, &mut out);
        }
        self.windows
            .retain(|_, w| w.track.level.is_some() || w.window.buckets().next().is_some());
        let idle = i64::try_from(self.config.request_idle.0.as_nanos()).unwrap_or(i64::MAX);
        let done: Vec<(String, String)> = self
            .requests
            .iter()
            .filter(|(_, u)| now_ns.saturating_sub(u.last_arrival_ns) >= idle)
            .map(|(k, _)| k.clone())
            .collect();
        for key in done {
            if let Some(mut u) = self.requests.remove(&key) {
                let mut tracks = std::mem::take(&mut u.tracks);
                let ctx = u.context(now_ns);
                for (budget, track) in &mut tracks {
                    track.resolve(budget, u.observed(budget), &ctx, &mut out);
                }
            }
        }
        out
    }

    /// Current usage and limits of one tenant's windows, principals and active requests, or of
    /// every tenant's; sorted by tenant, then scope, id and budget.
    pub fn usage(&mut self, tenant: Option<&str>, now_ns: i64) -> Vec<(String, BudgetUsage)> {
        let ratio = self.config.warning_ratio;
        let mut out = Vec::new();
        for ((scope, t, id, name), w) in &mut self.windows {
            if tenant.is_some_and(|want| want != t) {
                continue;
            }
            out.push((
                t.clone(),
                BudgetUsage {
                    scope: scope.as_str(),
                    id: id.clone(),
                    budget: name.clone(),
                    usage: w.window.total(now_ns),
                    limit: w.limit,
                    warning_at: w.limit * ratio,
                    level: w.track.level.map(Level::as_str),
                },
            ));
        }
        for ((t, _), u) in &self.requests {
            if tenant.is_some_and(|want| want != t) {
                continue;
            }
            for (budget, limit) in request_limits(self.config.request_for(t)) {
                out.push((
                    t.clone(),
                    BudgetUsage {
                        scope: Scope::Request.as_str(),
                        id: u.request_id.clone(),
                        budget: budget.to_string(),
                        usage: u.observed(&budget),
                        limit,
                        warning_at: limit * ratio,
                        level: u
                            .tracks
                            .get(&*budget)
                            .and_then(|t| t.level)
                            .map(Level::as_str),
                    },
                ));
            }
        }
        out.sort_by(|(ta, a), (tb, b)| {
            (ta, a.scope, &a.id, &a.budget).cmp(&(tb, b.scope, &b.id, &b.budget))
        });
        out
    }

    /// Window state worth saving (windows that hold spend or an active episode).
    pub fn saved_windows(&self) -> Vec<SavedWindow> {
        self.windows
            .iter()
            .map(|((scope, tenant, id, budget), w)| SavedWindow {
                scope: scope.as_str().to_string(),
                tenant: tenant.clone(),
                id: id.clone(),
                budget: budget.clone(),
                buckets: w.window.buckets().collect(),
                level: w.track.level.map(|l| l.as_str().to_string()),
                alarm_id: w.track.alarm_id.clone(),
            })
            .collect()
    }

    /// Restores saved windows whose budget is still configured, with their active episodes
    /// (so an alarm that fired before a restart does not fire again). Returns how many were
    /// restored.
    pub fn restore_windows(&mut self, saved: Vec<SavedWindow>) -> usize {
        let mut restored = 0;
        for w in saved {
            let scope = match w.scope.as_str() {
                "tenant" => Scope::Tenant,
                "principal" => Scope::Principal,
                _ => continue,
            };
            let budgets = match scope {
                Scope::Tenant => self.config.tenant_for(&w.tenant).active(),
                _ => self.config.principal_for(&w.tenant).active(),
            };
            let Some((_, _, span_len, limit)) = budgets.into_iter().find(|b| b.0 == w.budget)
            else {
                continue; // that budget is no longer configured
            };
            let mut window = RollingWindow::new(span_len, buckets_for(span_len.as_secs()));
            window.restore(w.buckets);
            let level = match w.level.as_deref() {
                Some("warning") => Some(Level::Warning),
                Some("limit") => Some(Level::Limit),
                _ => None,
            };
            let track = Track {
                level,
                alarm_id: w.alarm_id,
                limit,
            };
            self.windows.insert(
                (scope, w.tenant.clone(), w.id, w.budget),
                WindowUsage {
                    window,
                    limit,
                    track,
                    tenant: w.tenant,
                },
            );
            restored += 1;
        }
        restored
    }
}

impl RequestUsage {
    /// Usage of one request budget, by name (`tool_calls:<tool>` for one tool).
    fn observed(&self, budget: &str) -> f64 {
        match budget {
            "model_turns" => self.model_turns as f64,
            "tool_calls" => self.tool_calls as f64,
            "input_tokens" => self.input_tokens as f64,
            "output_tokens" => self.output_tokens as f64,
            "cost_usd" => self.cost_usd,
            "result_bytes" => self.result_bytes as f64,
            "repeated_calls" => self.repeats.values().copied().max().unwrap_or(0) as f64,
            "wall_time" => self.end_ns.saturating_sub(self.start_ns).max(0) as f64 / 1e9,
            other => other
                .strip_prefix("tool_calls:")
                .and_then(|tool| self.by_tool.get(tool))
                .map_or(0.0, |n| *n as f64),
        }
    }

    /// Who an alarm about this request names.
    fn context(&self, now_ns: i64) -> Context<'_> {
        Context {
            scope: Scope::Request,
            scope_id: &self.request_id,
            tenant: &self.tenant,
            request_id: Some(&self.request_id),
            trace_id: Some(&self.trace_id),
            now_ns,
        }
    }
}

/// The request budgets that are on, by name, with their limits.
fn request_limits(limits: &RequestBudgets) -> Vec<(Cow<'static, str>, f64)> {
    let fixed = [
        ("model_turns", limits.model_turns as f64),
        ("tool_calls", limits.tool_calls as f64),
        ("repeated_calls", limits.repeated_calls as f64),
        ("input_tokens", limits.input_tokens as f64),
        ("output_tokens", limits.output_tokens as f64),
        ("cost_usd", limits.cost_usd),
        ("result_bytes", limits.result_bytes as f64),
        (
            "wall_time",
            limits.wall_time.map_or(0.0, |w| w.0.as_secs_f64()),
        ),
    ];
    fixed
        .into_iter()
        .map(|(name, limit)| (Cow::Borrowed(name), limit))
        .chain(
            limits
                .tool_calls_by_tool
                .iter()
                .map(|(tool, limit)| (Cow::Owned(format!("tool_calls:{tool}")), *limit as f64)),
        )
        .filter(|(_, limit)| *limit > 0.0)
        .collect()
}

fn check_request(
    u: &mut RequestUsage,
    limits: &RequestBudgets,
    ratio: f64,
    now_ns: i64,
    out: &mut Vec<Alarm>,
) {
    let mut tracks = std::mem::take(&mut u.tracks);
    let ctx = u.context(now_ns);
    for (budget, limit) in request_limits(limits) {
        let value = u.observed(&budget);
        if !tracks.contains_key(&*budget) {
            tracks.insert(budget.to_string(), Track::default());
        }
        if let Some(track) = tracks.get_mut(&*budget) {
            track.update(&budget, value, limit, ratio, &ctx, out);
        }
    }
    u.tracks = tracks;
}

#[cfg(test)]
mod tests {
    use super::super::config::{TenantBudgets, WindowBudgets};
    use super::*;
    use crate::config::HumanDuration;
    use crate::event::fixtures;
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
        let usage = e.usage(Some("acme"), now + 3 * SEC);
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
        let r = restarted.usage(Some("acme"), now + 4 * SEC);
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
