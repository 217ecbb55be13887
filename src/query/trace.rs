//! `toolwatch trace`: one request as a tree of agent, model turns, tool calls and downstream
//! calls, with the request's summary as a header.
//!
//! Lookup goes from small to large: a trace id is found in `spans` by its bloom filter; the
//! request's newest summary in `requests` (bloom filter on `request_id`) gives its tenant and
//! time range, so the span scan then reads only that tenant's partitions for those days.

use std::collections::{BTreeMap, BTreeSet};

use datafusion::execution::context::SessionContext;
use serde_json::{json, Map, Value};

use super::{run, sql_string, QueryError};

/// Longest tool-argument text kept per node.
const ARGUMENT_CHARS: usize = 160;

/// What `toolwatch trace` shows.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestView {
    /// The newest summary row of the request, if it has been summarized.
    pub summary: Option<Map<String, Value>>,
    /// Request id (or the trace id for a request with none).
    pub request_id: String,
    /// Traces of the request.
    pub trace_ids: Vec<String>,
    /// Root nodes (spans whose parent is not in the request), in start order.
    pub roots: Vec<Node>,
    /// Earliest span start, ns.
    pub start_ns: i64,
    /// Findings the request's newest summary shows (`findings` rows still open), rule order.
    pub findings: Vec<Map<String, Value>>,
}

/// One span in the tree.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    /// The span's columns that the view shows.
    pub span: Map<String, Value>,
    /// Log records about this span (time, severity, policy decision, body).
    pub logs: Vec<Map<String, Value>>,
    /// Child spans in start order.
    pub children: Vec<Node>,
}

pub(crate) async fn rows(
    ctx: &SessionContext,
    sql: &str,
) -> Result<Vec<Map<String, Value>>, QueryError> {
    let (_, batches) = run(ctx, sql, |_| {}).await?;
    let values: Vec<Value> = serde_json::from_slice(&super::output::json_array(&batches)?)
        .map_err(|e| QueryError::Output(e.to_string()))?;
    Ok(values
        .into_iter()
        .filter_map(|v| match v {
            Value::Object(m) => Some(m),
            _ => None,
        })
        .collect())
}

pub(crate) fn is_trace_id(id: &str) -> bool {
    id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit())
}

pub(crate) fn text(row: &Map<String, Value>, key: &str) -> Option<String> {
    row.get(key).and_then(Value::as_str).map(str::to_string)
}

pub(crate) fn int(row: &Map<String, Value>, key: &str) -> Option<i64> {
    row.get(key).and_then(Value::as_i64)
}

/// Days (`YYYY-MM-DD`) from a day before `start_ns` to a day after `end_ns`: spans of other
/// services may carry skewed clocks, and partitions follow each span's own start.
fn days_around(start_ns: i64, end_ns: i64) -> Vec<String> {
    const DAY: i64 = 86_400_000_000_000;
    let mut out = Vec::new();
    let mut t = start_ns.saturating_sub(DAY);
    while t <= end_ns.saturating_add(DAY) && out.len() < 64 {
        let day = chrono::DateTime::from_timestamp_nanos(t)
            .format("%Y-%m-%d")
            .to_string();
        out.push(day);
        t = t.saturating_add(DAY);
    }
    out
}

/// Finds a request by request id or trace id and assembles its view.
/// Request ids are per tenant: with `tenant`, only that tenant's request is looked at;
/// without it, a trace id names its tenant, and a request id takes the newest summary found.
pub async fn find(
    ctx: &SessionContext,
    id: &str,
    tenant: Option<&str>,
) -> Result<RequestView, QueryError> {
    let mut request_id = id.to_string();
    let mut tenant = tenant.map(str::to_string);
    let only = |tenant: &Option<String>| {
        tenant
            .as_deref()
            .map_or_else(String::new, |t| format!(" AND tenant = {}", sql_string(t)))
    };
    if is_trace_id(id) {
        let hit = rows(
            ctx,
            &format!(
                "SELECT request_id, tenant FROM spans WHERE trace_id = {}{} \
                 ORDER BY (request_id IS NULL OR request_id = ''), request_id LIMIT 1",
                sql_string(&id.to_ascii_lowercase()),
                only(&tenant)
            ),
        )
        .await?;
        // The id is a trace: its request, or the trace itself (a request named by its
        // lowercase hex id) when no span of it names one.
        if let Some(row) = hit.first() {
            tenant = text(row, "tenant");
            request_id = text(row, "request_id")
                .filter(|r| !r.is_empty())
                .unwrap_or_else(|| id.to_ascii_lowercase());
        }
    }
    let summary = rows(
        ctx,
        &format!(
            "SELECT *, CAST(start_time AS BIGINT) AS start_ns, CAST(end_time AS BIGINT) AS end_ns \
             FROM requests WHERE request_id = {}{} ORDER BY summary_version DESC, start_time DESC \
             LIMIT 1",
            sql_string(&request_id),
            only(&tenant)
        ),
    )
    .await?
    .into_iter()
    .next();

    // Which traces, and where to look for their spans.
    let (trace_ids, prune) = match &summary {
        Some(s) => {
            let traces: Vec<String> = s
                .get("trace_ids")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default();
            let tenant = text(s, "tenant").unwrap_or_default();
            let days = days_around(
                int(s, "start_ns").unwrap_or(0),
                int(s, "end_ns").unwrap_or(0),
            );
            let days: Vec<String> = days.iter().map(|d| sql_string(d)).collect();
            let prune = format!(
                " AND tenant = {} AND date IN ({})",
                sql_string(&tenant),
                days.join(", ")
            );
            (traces, prune)
        }
        None => {
            // Not summarized yet (still open, or written by an older version): find the
            // traces from the spans themselves.
            let mut traces: BTreeSet<String> = rows(
                ctx,
                &format!(
                    "SELECT DISTINCT trace_id FROM spans WHERE request_id = {}{}",
                    sql_string(&request_id),
                    only(&tenant)
                ),
            )
            .await?
            .iter()
            .filter_map(|r| text(r, "trace_id"))
            .collect();
            if traces.is_empty() && is_trace_id(id) {
                traces.insert(id.to_ascii_lowercase());
            }
            (traces.into_iter().collect(), only(&tenant))
        }
    };
    if trace_ids.is_empty() {
        return Err(QueryError::NotFound(id.to_string()));
    }
    let in_traces: Vec<String> = trace_ids.iter().map(|t| sql_string(t)).collect();
    let in_traces = in_traces.join(", ");
    let spans = rows(
        ctx,
        &format!(
            "SELECT trace_id, span_id, parent_span_id, service_name, span_class, name, \
             CAST(start_time AS BIGINT) AS start_ns, duration_ns, status_code, status_message, \
             provider, COALESCE(response_model, request_model) AS model, input_tokens, \
             output_tokens, cache_read_input_tokens, tool_name, tool_call_id, tool_arguments, \
             policy_decision, policy_reason, confirmation_status, result_code, retry_attempt, \
             principal_id, idempotency_key_hash, redactions \
             FROM spans WHERE trace_id IN ({in_traces}){prune} ORDER BY start_ns, span_id"
        ),
    )
    .await?;
    if spans.is_empty() && summary.is_none() {
        return Err(QueryError::NotFound(id.to_string()));
    }
    let logs = rows(
        ctx,
        &format!(
            "SELECT span_id, CAST(time AS BIGINT) AS time_ns, severity_text, event_name, \
             policy_decision, confirmation_status, body \
             FROM logs WHERE trace_id IN ({in_traces}){prune} ORDER BY time_ns"
        ),
    )
    .await?;
    let start_ns = spans
        .iter()
        .filter_map(|s| int(s, "start_ns"))
        .min()
        .unwrap_or(0);
    let findings = match summary.as_ref().and_then(|s| text(s, "tenant")) {
        Some(t) => open_findings(ctx, &request_id, &t).await?,
        None => Vec::new(),
    };
    Ok(RequestView {
        summary,
        request_id,
        trace_ids,
        roots: tree(spans, logs),
        start_ns,
        findings,
    })
}

/// The request's findings still open: the newest row of each finding id, if `open`.
async fn open_findings(
    ctx: &SessionContext,
    request_id: &str,
    tenant: &str,
) -> Result<Vec<Map<String, Value>>, QueryError> {
    let all = rows(
        ctx,
        &format!(
            "SELECT finding_id, rule, severity, status, span_ids, reason, summary_version \
             FROM findings WHERE request_id = {} AND tenant = {} \
             ORDER BY summary_version, finding_id",
            sql_string(request_id),
            sql_string(tenant)
        ),
    )
    .await?;
    let mut newest: BTreeMap<String, Map<String, Value>> = BTreeMap::new();
    for f in all {
        if let Some(id) = text(&f, "finding_id") {
            newest.insert(id, f);
        }
    }
    let mut open: Vec<Map<String, Value>> = newest
        .into_values()
        .filter(|f| text(f, "status").as_deref() == Some("open"))
        .collect();
    open.sort_by_key(|f| (text(f, "rule"), f.get("span_ids").map(Value::to_string)));
    Ok(open)
}

/// Span id → the rules whose evidence names it.
pub(crate) fn marks(findings: &[Map<String, Value>]) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for f in findings {
        let rule = text(f, "rule").unwrap_or_default();
        for span in f
            .get("span_ids")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            out.entry(span.to_string()).or_default().push(rule.clone());
        }
    }
    out
}

/// Builds the tree: children under parents, a span whose parent is absent is a root.
fn tree(spans: Vec<Map<String, Value>>, logs: Vec<Map<String, Value>>) -> Vec<Node> {
    let ids: BTreeSet<String> = spans.iter().filter_map(|s| text(s, "span_id")).collect();
    let mut logs_by_span: BTreeMap<String, Vec<Map<String, Value>>> = BTreeMap::new();
    for l in logs {
        if let Some(span) = text(&l, "span_id") {
            logs_by_span.entry(span).or_default().push(l);
        }
    }
    let mut children: BTreeMap<String, Vec<Map<String, Value>>> = BTreeMap::new();
    let mut roots = Vec::new();
    for s in spans {
        match text(&s, "parent_span_id").filter(|p| ids.contains(p)) {
            Some(p) => children.entry(p).or_default().push(s),
            None => roots.push(s),
        }
    }
    fn build(
        span: Map<String, Value>,
        children: &mut BTreeMap<String, Vec<Map<String, Value>>>,
        logs: &mut BTreeMap<String, Vec<Map<String, Value>>>,
        depth: usize,
    ) -> Node {
        let id = text(&span, "span_id").unwrap_or_default();
        // A cycle of parent ids cannot recurse forever: its spans were never roots, and depth
        // is bounded by the number of spans anyway; stop at a generous limit.
        let kids = if depth < 256 {
            children.remove(&id).unwrap_or_default()
        } else {
            Vec::new()
        };
        Node {
            logs: logs.remove(&id).unwrap_or_default(),
            children: kids
                .into_iter()
                .map(|k| build(k, children, logs, depth + 1))
                .collect(),
            span,
        }
    }
    let mut out: Vec<Node> = roots
        .into_iter()
        .map(|r| build(r, &mut children, &mut logs_by_span, 0))
        .collect();
    // Spans in a parent cycle never hang under a root: show them at the top level.
    let stranded: Vec<Map<String, Value>> = children.into_values().flatten().collect();
    out.extend(stranded.into_iter().map(|s| Node {
        span: s,
        logs: Vec::new(),
        children: Vec::new(),
    }));
    out
}

/// Shortens text to `max` characters, marking the cut.
fn shorten(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let kept: String = s.chars().take(max.saturating_sub(1)).collect();
    format!("{kept}…")
}

fn node_json(n: &Node, start_ns: i64) -> Value {
    let s = &n.span;
    let offset = int(s, "start_ns").map(|t| t - start_ns);
    let mut v = json!({
        "span_id": s.get("span_id"),
        "parent_span_id": s.get("parent_span_id"),
        "trace_id": s.get("trace_id"),
        "service": s.get("service_name"),
        "class": s.get("span_class"),
        "name": s.get("name"),
        "start_offset_ns": offset,
        "duration_ns": s.get("duration_ns"),
        "status": s.get("status_code"),
        "status_message": s.get("status_message"),
        "policy_decision": s.get("policy_decision"),
        "policy_reason": s.get("policy_reason"),
        "confirmation_status": s.get("confirmation_status"),
        "result_code": s.get("result_code"),
        "retry_attempt": s.get("retry_attempt"),
    });
    if let Value::Object(m) = &mut v {
        if s.get("span_class").and_then(Value::as_str) == Some("model") {
            m.insert(
                "provider".into(),
                s.get("provider").cloned().unwrap_or(Value::Null),
            );
            m.insert(
                "model".into(),
                s.get("model").cloned().unwrap_or(Value::Null),
            );
            m.insert(
                "input_tokens".into(),
                s.get("input_tokens").cloned().unwrap_or(Value::Null),
            );
            m.insert(
                "output_tokens".into(),
                s.get("output_tokens").cloned().unwrap_or(Value::Null),
            );
        }
        if let Some(tool) = s.get("tool_name") {
            m.insert("tool_name".into(), tool.clone());
            m.insert(
                "tool_call_id".into(),
                s.get("tool_call_id").cloned().unwrap_or(Value::Null),
            );
            let args = text(s, "tool_arguments").unwrap_or_default();
            m.insert(
                "tool_arguments".into(),
                Value::String(shorten(&args, ARGUMENT_CHARS)),
            );
            m.insert("tool_arguments_bytes".into(), Value::from(args.len()));
        }
        m.retain(|_, v| !v.is_null());
        m.insert(
            "logs".into(),
            Value::Array(
                n.logs
                    .iter()
                    .map(|l| {
                        json!({
                            "time_offset_ns": int(l, "time_ns").map(|t| t - start_ns),
                            "severity": l.get("severity_text"),
                            "event_name": l.get("event_name"),
                            "policy_decision": l.get("policy_decision"),
                            "body": text(l, "body").map(|b| shorten(&b, ARGUMENT_CHARS)),
                        })
                    })
                    .collect(),
            ),
        );
        m.insert(
            "children".into(),
            Value::Array(n.children.iter().map(|c| node_json(c, start_ns)).collect()),
        );
    }
    v
}

impl RequestView {
    /// The view as one JSON document: `{request_id, trace_ids, summary, spans: [tree]}`.
    pub fn to_json(&self) -> Value {
        let mut summary = self.summary.clone();
        if let Some(s) = &mut summary {
            s.remove("start_ns");
            s.remove("end_ns");
        }
        json!({
            "request_id": self.request_id,
            "trace_ids": self.trace_ids,
            "summary": summary,
            "findings": self.findings,
            "spans": self.roots.iter().map(|n| node_json(n, self.start_ns)).collect::<Vec<_>>(),
        })
    }

    /// The view as text: a header with the summary, then one line per span.
    pub fn to_text(&self, width: usize) -> String {
        let mut out = String::new();
        out.push_str(&format!("request {}\n", self.request_id));
        out.push_str(&format!("  traces   {}\n", self.trace_ids.join(", ")));
        match &self.summary {
            Some(s) => out.push_str(&summary_text(s)),
            None => out.push_str(
                "  summary  (none yet: the request is still open or was never summarized)\n",
            ),
        }
        for f in &self.findings {
            let spans: Vec<&str> = f
                .get("span_ids")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            out.push_str(&format!(
                "  finding  {} {} · {} · spans {}\n",
                text(f, "severity").unwrap_or_default(),
                text(f, "rule").unwrap_or_default(),
                text(f, "reason").unwrap_or_default(),
                spans.join(", ")
            ));
        }
        out.push('\n');
        let marks = marks(&self.findings);
        let mut lines = Vec::new();
        for (i, n) in self.roots.iter().enumerate() {
            node_lines(
                n,
                self.start_ns,
                "",
                i + 1 == self.roots.len(),
                true,
                &marks,
                &mut lines,
            );
        }
        for l in lines {
            out.push_str(&shorten(&l, width.max(40)));
            out.push('\n');
        }
        out
    }
}

fn summary_text(s: &Map<String, Value>) -> String {
    let n = |k: &str| int(s, k).unwrap_or(0);
    let t = |k: &str| text(s, k).unwrap_or_else(|| "-".into());
    let tools = s
        .get("tool_calls_by_tool")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k} {}", v.as_i64().unwrap_or(0)))
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default();
    let cost = s.get("cost_usd").and_then(Value::as_f64).unwrap_or(0.0);
    let claimed = s
        .get("claimed_cost_usd")
        .and_then(Value::as_f64)
        .map(|c| {
            let flag = if s.get("cost_disagrees") == Some(&Value::Bool(true)) {
                ", DISAGREES"
            } else {
                ""
            };
            format!(" (claimed ${c:.4}{flag})")
        })
        .unwrap_or_default();
    format!(
        "  tenant   {}  principal {}  {} (version {})\n  \
         time     {}  duration {:.3}s\n  \
         spans    {} (orphans {})  model turns {}  tool calls {} ({})  downstream {}\n  \
         tokens   in {} out {} (cache read {})  cost ${:.4}{}\n  \
         policy   denials {}  confirmations {}/{}  retries {}  timeouts {}  errors {}\n  \
         end      stop {}  outcome {}\n",
        t("tenant"),
        t("principal_id"),
        t("completeness"),
        n("summary_version"),
        t("start_time"),
        n("duration_ns") as f64 / 1e9,
        n("span_count"),
        n("orphan_count"),
        n("model_turns"),
        n("tool_calls"),
        tools,
        n("downstream_calls"),
        n("input_tokens"),
        n("output_tokens"),
        n("cache_read_tokens"),
        cost,
        claimed,
        n("denials"),
        n("confirmations_approved"),
        n("confirmations_requested"),
        n("retries"),
        n("timeouts"),
        n("errors"),
        t("stop_reason"),
        t("outcome"),
    )
}

/// A span's status where it says something: `error` (with its message), or `ok` when the
/// sender set it. `unset`, what a span has when nobody set one, says nothing.
pub(crate) fn status_word(code: Option<&str>, message: Option<&str>) -> Option<String> {
    match code? {
        "error" => Some(match message.filter(|m| !m.is_empty()) {
            Some(m) => format!("error: {}", shorten(m, 60)),
            None => "error".to_string(),
        }),
        "ok" => Some("ok".to_string()),
        _ => None,
    }
}

fn node_lines(
    n: &Node,
    start_ns: i64,
    prefix: &str,
    last: bool,
    top: bool,
    marks: &BTreeMap<String, Vec<String>>,
    out: &mut Vec<String>,
) {
    let s = &n.span;
    let offset_ms = (int(s, "start_ns").unwrap_or(start_ns) - start_ns) as f64 / 1e6;
    let dur_ms = int(s, "duration_ns").unwrap_or(0) as f64 / 1e6;
    let class = text(s, "span_class").unwrap_or_default();
    let mut detail = Vec::new();
    if class == "model" {
        detail.push(format!(
            "{} in {} out {}",
            text(s, "model").unwrap_or_default(),
            int(s, "input_tokens").unwrap_or(0),
            int(s, "output_tokens").unwrap_or(0)
        ));
    }
    for key in ["policy_decision", "confirmation_status", "result_code"] {
        if let Some(v) = text(s, key) {
            detail.push(v);
        }
    }
    if let Some(r) = int(s, "retry_attempt").filter(|r| *r > 0) {
        detail.push(format!("retry {r}"));
    }
    let status = status_word(
        text(s, "status_code").as_deref(),
        text(s, "status_message").as_deref(),
    )
    .map(|w| format!(" {w}"))
    .unwrap_or_default();
    let branch = match (top, last) {
        (true, _) => "",
        (false, true) => "└─ ",
        (false, false) => "├─ ",
    };
    let mut line = format!(
        "{prefix}{branch}{} +{offset_ms:.1}ms {dur_ms:.1}ms [{class}] {}{status}",
        text(s, "service_name").unwrap_or_default(),
        text(s, "name").unwrap_or_default(),
    );
    if !detail.is_empty() {
        line.push_str(&format!(" · {}", detail.join(" · ")));
    }
    // Before the arguments: a narrow terminal cuts lines at their end.
    if let Some(rules) = text(s, "span_id").and_then(|id| marks.get(&id)) {
        line.push_str(&format!(" ◀ {}", rules.join(", ")));
    }
    if let Some(args) = text(s, "tool_arguments") {
        line.push_str(&format!(" · args {}", shorten(&args, 60)));
    }
    out.push(line);
    let child_prefix = match (top, last) {
        (true, _) => prefix.to_string(),
        (false, true) => format!("{prefix}   "),
        (false, false) => format!("{prefix}│  "),
    };
    for l in &n.logs {
        out.push(format!(
            "{child_prefix}   log {} {}{}",
            text(l, "severity_text").unwrap_or_default(),
            text(l, "event_name").unwrap_or_default(),
            text(l, "policy_decision")
                .map(|d| format!(" · {d}"))
                .unwrap_or_default()
        ));
    }
    for (i, c) in n.children.iter().enumerate() {
        node_lines(
            c,
            start_ns,
            &child_prefix,
            i + 1 == n.children.len(),
            false,
            marks,
            out,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::status_word;

    #[test]
    fn a_status_is_shown_only_where_it_says_something() {
        assert_eq!(status_word(Some("unset"), None), None);
        assert_eq!(status_word(None, None), None);
        assert_eq!(status_word(Some("ok"), Some("")), Some("ok".to_string()));
        assert_eq!(status_word(Some("error"), None), Some("error".to_string()));
        assert_eq!(
            status_word(Some("error"), Some("upstream timed out")),
            Some("error: upstream timed out".to_string())
        );
    }
}
