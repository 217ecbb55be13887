//! One request's page: its newest summary, the tree `toolwatch trace` prints (agent, model
//! turns, tool calls, downstream calls) with durations on a time axis and each span's columns
//! on demand, the findings with their evidence spans marked, the alarms it raised, and its
//! summary versions.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use axum::extract::Path;
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Map, Value};

use super::html::{self, esc, Section};
use super::{failed, html_page, not_found, Reader};
use crate::query::sql_string;
use crate::query::trace::{self, int, marks, rows, status_word, text, Node, RequestView};

/// Everything the page shows.
struct RequestPage {
    view: RequestView,
    alarms: Vec<Map<String, Value>>,
    versions: Vec<Map<String, Value>>,
}

/// `GET /ui/requests/{tenant}/{request_id}`.
pub async fn page(
    Reader(console): Reader,
    Path((tenant, request_id)): Path<(String, String)>,
) -> Response {
    // Out of scope reads as missing: the same answer, so a guess learns nothing.
    if !console.scope.admits_tenant(&tenant) {
        return not_found(Section::Requests);
    }
    let read = console
        .read(|ctx| {
            let (tenant, request_id) = (tenant.clone(), request_id.clone());
            async move {
                let view = trace::find(&ctx, &request_id, Some(&tenant)).await?;
                let ids = format!(
                    "tenant = {} AND request_id = {}",
                    sql_string(&tenant),
                    sql_string(&view.request_id)
                );
                let alarms = rows(
                    &ctx,
                    &format!(
                        "SELECT CAST(time AS BIGINT) AS time_ns, alarm_id, scope, budget, level, \
                         reason, observed, limit_value FROM alarms WHERE {ids} \
                         ORDER BY time_ns, alarm_id"
                    ),
                )
                .await?;
                let versions = rows(
                    &ctx,
                    &format!(
                        "SELECT summary_version, completeness, CAST(end_time AS BIGINT) AS end_ns, \
                         span_count, tool_calls, model_turns, outcome, findings \
                         FROM requests WHERE {ids} ORDER BY summary_version"
                    ),
                )
                .await?;
                Ok(RequestPage {
                    view,
                    alarms,
                    versions,
                })
            }
        })
        .await;
    match read {
        Ok((p, notice)) => {
            let title = format!("Request {}", p.view.request_id);
            let page = format!("{}{}", notice.html(), body(&tenant, &p));
            html_page(StatusCode::OK, Section::Requests, &title, &page)
        }
        Err(e) => failed(Section::Requests, e),
    }
}

fn body(tenant: &str, p: &RequestPage) -> String {
    let mut out = facts(tenant, &p.view);
    let marked = marks(&p.view.findings);
    let end_ns = p
        .view
        .roots
        .iter()
        .map(latest_end)
        .max()
        .unwrap_or(p.view.start_ns);
    let span_ns = (end_ns - p.view.start_ns).max(1);
    out.push_str("<h2 id=\"spans\">Spans</h2>");
    if p.view.roots.is_empty() {
        out.push_str("<p>No span of this request is in the archive.</p>");
    } else {
        out.push_str(
            "<p class=\"muted\">Each bar places the span on the request's time axis. \
             Open a span for its columns.</p><ol class=\"tree\">",
        );
        for n in &p.view.roots {
            node(&mut out, n, p.view.start_ns, span_ns, &marked);
        }
        out.push_str("</ol>");
    }
    out.push_str(&findings(tenant, &p.view));
    out.push_str(&alarms(&p.alarms));
    out.push_str(&versions(&p.versions));
    out
}

/// The request's newest summary as a list of facts.
fn facts(tenant: &str, v: &RequestView) -> String {
    let mut out = String::from("<dl class=\"facts\">");
    let mut fact = |k: &str, v: String| {
        let _ = write!(out, "<dt>{}</dt><dd>{v}</dd>", esc(k));
    };
    fact("Tenant", esc(tenant));
    fact("Traces", esc(&v.trace_ids.join(", ")));
    match &v.summary {
        Some(s) => {
            let n = |k: &str| html::count(int(s, k).unwrap_or(0));
            fact(
                "Principal",
                esc(&text(s, "principal_id").unwrap_or_default()),
            );
            fact("Start (UTC)", html::time(int(s, "start_ns").unwrap_or(0)));
            fact(
                "Duration",
                html::duration(int(s, "duration_ns").unwrap_or(0)),
            );
            let outcome = text(s, "outcome").unwrap_or_default();
            let class = if outcome == "ok" {
                ""
            } else {
                " class=\"bad\""
            };
            fact("Outcome", format!("<span{class}>{}</span>", esc(&outcome)));
            fact("Model turns", n("model_turns"));
            fact("Tool calls", n("tool_calls"));
            fact("Downstream calls", n("downstream_calls"));
            fact(
                "Tokens in / out",
                format!("{} / {}", n("input_tokens"), n("output_tokens")),
            );
            fact(
                "Cost",
                html::usd(s.get("cost_usd").and_then(Value::as_f64).unwrap_or(0.0)),
            );
            fact("Denials", n("denials"));
            fact("Errors", n("errors"));
            if let Some(stop) = text(s, "stop_reason") {
                fact("Stop reason", esc(&stop));
            }
            fact(
                "Summary",
                format!(
                    "version {}, {}",
                    int(s, "summary_version").unwrap_or(0),
                    esc(&text(s, "completeness").unwrap_or_default())
                ),
            );
        }
        None => fact("Summary", "not yet: the request is still open".into()),
    }
    out.push_str("</dl>");
    out
}

fn latest_end(n: &Node) -> i64 {
    let own = int(&n.span, "start_ns").unwrap_or(0) + int(&n.span, "duration_ns").unwrap_or(0);
    n.children
        .iter()
        .map(latest_end)
        .max()
        .map_or(own, |c| c.max(own))
}

/// One span and, under it, its children.
fn node(
    out: &mut String,
    n: &Node,
    start_ns: i64,
    span_ns: i64,
    marked: &BTreeMap<String, Vec<String>>,
) {
    let s = &n.span;
    let id = text(s, "span_id").unwrap_or_default();
    let rules = marked.get(&id);
    let class = if rules.is_some() {
        " class=\"marked\""
    } else {
        ""
    };
    let begin = int(s, "start_ns").unwrap_or(start_ns) - start_ns;
    let dur = int(s, "duration_ns").unwrap_or(0);
    // Per mille of the request's span, at least one so a short call still shows.
    let x = (begin.max(0) as f64 * 1000.0 / span_ns as f64).clamp(0.0, 999.0) as i64;
    let w = ((dur as f64 * 1000.0 / span_ns as f64) as i64).clamp(1, 1000 - x);
    let _ = write!(
        out,
        "<li id=\"span-{}\"{class}><details><summary><span>{}</span>\
         <span class=\"num\">{}</span>\
         <svg viewBox=\"0 0 1000 10\" preserveAspectRatio=\"none\" role=\"img\" \
         aria-label=\"from {} to {}\"><rect x=\"{x}\" y=\"0\" width=\"{w}\" height=\"10\"/></svg>\
         </summary>",
        esc(&id),
        label(s, rules),
        html::duration(dur),
        html::duration(begin),
        html::duration(begin + dur),
    );
    columns(out, s);
    if !n.logs.is_empty() {
        out.push_str("<p>Log records:</p><ul>");
        for l in &n.logs {
            let _ = write!(
                out,
                "<li>+{} {} {} <pre>{}</pre></li>",
                html::duration(int(l, "time_ns").unwrap_or(start_ns) - start_ns),
                esc(&text(l, "severity_text").unwrap_or_default()),
                esc(&text(l, "event_name").unwrap_or_default()),
                esc(&text(l, "body").unwrap_or_default()),
            );
        }
        out.push_str("</ul>");
    }
    out.push_str("</details>");
    if !n.children.is_empty() {
        out.push_str("<ol>");
        for c in &n.children {
            node(out, c, start_ns, span_ns, marked);
        }
        out.push_str("</ol>");
    }
    out.push_str("</li>");
}

/// The span's line: its class, what it is (tool, model or name), and what it says.
fn label(s: &Map<String, Value>, rules: Option<&Vec<String>>) -> String {
    let class = text(s, "span_class").unwrap_or_default();
    let what = match class.as_str() {
        "tool" => text(s, "tool_name").or_else(|| text(s, "name")),
        "model" => text(s, "model")
            .map(|m| format!("{} {m}", text(s, "provider").unwrap_or_default()))
            .or_else(|| text(s, "name")),
        _ => text(s, "name"),
    }
    .unwrap_or_default();
    let mut out = format!(
        "<span class=\"class\">{}</span> {}",
        esc(&class),
        esc(what.trim())
    );
    if let Some(d) = text(s, "policy_decision") {
        let _ = write!(out, " <span class=\"muted\">policy: {}</span>", esc(&d));
    }
    if let Some(st) = status_word(
        text(s, "status_code").as_deref(),
        text(s, "status_message").as_deref(),
    ) {
        let c = if st == "ok" { "muted" } else { "bad" };
        let _ = write!(out, " <span class=\"{c}\">{}</span>", esc(&st));
    }
    if let Some(rules) = rules {
        let _ = write!(
            out,
            " <span class=\"warn\">finding: {}</span>",
            esc(&rules.join(", "))
        );
    }
    out
}

/// Every column the view read, non-empty ones only.
fn columns(out: &mut String, s: &Map<String, Value>) {
    out.push_str("<dl class=\"facts\">");
    for (k, v) in s {
        let shown = match (k.as_str(), v) {
            (_, Value::Null) => continue,
            (_, Value::String(t)) if t.is_empty() => continue,
            // What nobody set says nothing; a span with no redactions has an empty map.
            ("status_code", Value::String(t)) if t == "unset" => continue,
            ("redactions", Value::String(t)) if t == "{}" => continue,
            ("redactions", Value::Object(m)) if m.is_empty() => continue,
            ("start_ns", Value::Number(n)) => html::time(n.as_i64().unwrap_or(0)),
            (_, Value::String(t)) => t.clone(),
            (_, other) => other.to_string(),
        };
        let _ = write!(
            out,
            "<dt>{}</dt><dd><pre>{}</pre></dd>",
            esc(k),
            esc(&shown)
        );
    }
    out.push_str("</dl>");
}

fn findings(tenant: &str, v: &RequestView) -> String {
    let mut out = String::from("<h2 id=\"findings\">Findings</h2>");
    if v.findings.is_empty() {
        out.push_str("<p>None.</p>");
        return out;
    }
    let rows: Vec<Vec<String>> = v
        .findings
        .iter()
        .map(|f| {
            let spans: Vec<String> = f
                .get("span_ids")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(|s| format!("<a href=\"#span-{0}\">{0}</a>", esc(s)))
                .collect();
            vec![
                esc(&text(f, "rule").unwrap_or_default()),
                esc(&text(f, "severity").unwrap_or_default()),
                esc(&text(f, "reason").unwrap_or_default()),
                spans.join(" "),
            ]
        })
        .collect();
    out.push_str(&html::table(
        &format!("Open findings of this request (tenant {tenant})"),
        &["Rule", "Severity", "Reason", "Evidence spans"],
        &rows,
    ));
    out
}

fn alarms(alarms: &[Map<String, Value>]) -> String {
    let mut out = String::from("<h2 id=\"alarms\">Alarms</h2>");
    if alarms.is_empty() {
        out.push_str("<p>None.</p>");
        return out;
    }
    let rows: Vec<Vec<String>> = alarms
        .iter()
        .map(|a| {
            let f = |k: &str| a.get(k).and_then(Value::as_f64).unwrap_or(0.0);
            vec![
                html::time(int(a, "time_ns").unwrap_or(0)),
                esc(&text(a, "budget").unwrap_or_default()),
                esc(&text(a, "level").unwrap_or_default()),
                esc(&text(a, "reason").unwrap_or_default()),
                format!("{} of {}", f("observed"), f("limit_value")),
            ]
        })
        .collect();
    out.push_str(&html::table(
        "Alarms this request raised",
        &["Time (UTC)", "Budget", "Level", "Reason", "Observed"],
        &rows,
    ));
    out
}

fn versions(versions: &[Map<String, Value>]) -> String {
    let mut out = String::from("<h2 id=\"versions\">Summary versions</h2>");
    if versions.is_empty() {
        out.push_str("<p>None yet.</p>");
        return out;
    }
    let rows: Vec<Vec<String>> = versions
        .iter()
        .map(|v| {
            let n = |k: &str| html::count(int(v, k).unwrap_or(0));
            vec![
                n("summary_version"),
                esc(&text(v, "completeness").unwrap_or_default()),
                html::time(int(v, "end_ns").unwrap_or(0)),
                n("span_count"),
                n("model_turns"),
                n("tool_calls"),
                esc(&text(v, "outcome").unwrap_or_default()),
                n("findings"),
            ]
        })
        .collect();
    out.push_str(&html::table(
        "Each version of the request's summary",
        &[
            "Version",
            "Completeness",
            "End (UTC)",
            "Spans",
            "Turns",
            "Tool calls",
            "Outcome",
            "Findings",
        ],
        &rows,
    ));
    out
}
