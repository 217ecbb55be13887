//! The findings and alarms pages: newest first, filtered by rule or budget, tenant and time,
//! each row linking to its request and, for a finding, to its evidence spans there.

use std::fmt::Write as _;

use axum::extract::Query;
use axum::http::StatusCode;
use axum::response::Response;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::html::{self, esc, Section};
use super::requests::time_bound;
use super::{failed, field, html_page, kept_filters, Console, Reader};
use crate::query::sql_string;
use crate::query::trace::{int, rows, text};

/// Rows to a page.
const PAGE_ROWS: usize = 100;

/// The filters of both lists (`rule` is the budget on the alarms page).
#[derive(Debug, Default, Deserialize)]
pub struct ListFilter {
    tenant: Option<String>,
    rule: Option<String>,
    since: Option<String>,
    until: Option<String>,
    page: Option<usize>,
}

/// Conditions on the table's `tenant`, `date` and `time`, and on `column` = the rule.
fn conditions(f: &ListFilter, column: &str, now_ns: i64) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    if let Some(t) = field(&f.tenant) {
        out.push(format!("tenant = {}", sql_string(t)));
    }
    if let Some(r) = field(&f.rule) {
        out.push(format!("{column} = {}", sql_string(r)));
    }
    if let Some(s) = field(&f.since) {
        let ns = time_bound(s, now_ns).map_err(|e| format!("From: {e}"))?;
        out.push(format!("date >= '{}'", html::day(ns)));
        out.push(format!("CAST(time AS BIGINT) >= {ns}"));
    }
    if let Some(u) = field(&f.until) {
        let ns = time_bound(u, now_ns).map_err(|e| format!("To: {e}"))?;
        out.push(format!("date <= '{}'", html::day(ns)));
        out.push(format!("CAST(time AS BIGINT) <= {ns}"));
    }
    Ok(out)
}

fn where_clause(c: &[String]) -> String {
    if c.is_empty() {
        String::new()
    } else {
        format!(" WHERE {}", c.join(" AND "))
    }
}

fn form(action: &str, rule_label: &str, f: &ListFilter) -> String {
    let value = |v: &Option<String>| esc(field(v).unwrap_or(""));
    format!(
        "<form class=\"filters\" method=\"get\" action=\"{action}\">\
         <label>Tenant<input name=\"tenant\" value=\"{}\"></label>\
         <label>{rule_label}<input name=\"rule\" value=\"{}\"></label>\
         <label>From<input name=\"since\" value=\"{}\" placeholder=\"24h or 2026-12-07 04:30\"></label>\
         <label>To<input name=\"until\" value=\"{}\" placeholder=\"UTC\"></label>\
         <button type=\"submit\">Filter</button></form>",
        value(&f.tenant),
        value(&f.rule),
        value(&f.since),
        value(&f.until),
    )
}

fn pager(action: &str, f: &ListFilter, page: usize, more: bool) -> String {
    let keep = esc(&kept_filters(&[
        ("tenant", &f.tenant),
        ("rule", &f.rule),
        ("since", &f.since),
        ("until", &f.until),
    ]));
    let mut out = String::from("<nav class=\"pager\" aria-label=\"Pages\">");
    if page > 0 {
        let _ = write!(
            out,
            "<a rel=\"prev\" href=\"{action}?{keep}page={}\">Newer</a>",
            page - 1
        );
    }
    let _ = write!(out, "<span class=\"muted\">Page {}</span>", page + 1);
    if more {
        let _ = write!(
            out,
            "<a rel=\"next\" href=\"{action}?{keep}page={}\">Older</a>",
            page + 1
        );
    }
    out.push_str("</nav>");
    out
}

/// Reads one page of `sql` (which selects one row more than a page) and renders it.
async fn list(
    console: &Console,
    section: Section,
    title: &str,
    (action, rule_label): (&str, &str),
    f: &ListFilter,
    sql: Result<String, String>,
    render: fn(&[Map<String, Value>]) -> String,
) -> Response {
    let page = f.page.unwrap_or(0).min(100_000);
    let sql = match sql {
        Ok(s) => format!("{s} LIMIT {} OFFSET {}", PAGE_ROWS + 1, page * PAGE_ROWS),
        Err(why) => {
            let body = format!(
                "{}<p class=\"bad\" role=\"alert\">{}</p>",
                form(action, rule_label, f),
                esc(&why)
            );
            return html_page(StatusCode::BAD_REQUEST, section, title, &body);
        }
    };
    let read = console
        .read(|ctx| {
            let sql = sql.clone();
            async move { rows(&ctx, &sql).await }
        })
        .await;
    let (mut shown, notice) = match read {
        Ok(r) => r,
        Err(e) => return failed(section, e),
    };
    let more = shown.len() > PAGE_ROWS;
    shown.truncate(PAGE_ROWS);
    let body = format!(
        "{}{}{}{}",
        notice.html(),
        form(action, rule_label, f),
        render(&shown),
        pager(action, f, page, more)
    );
    html_page(StatusCode::OK, section, title, &body)
}

/// `GET /ui/findings`: the newest row of each finding.
pub async fn findings(Reader(console): Reader, Query(f): Query<ListFilter>) -> Response {
    let sql = conditions(&f, "rule", crate::clock::now_ns()).map(|c| {
        format!(
            "SELECT * FROM (SELECT tenant, CAST(time AS BIGINT) AS time_ns, finding_id, rule, \
             severity, status, request_id, span_ids, reason, row_number() OVER \
             (PARTITION BY tenant, finding_id ORDER BY summary_version DESC, time DESC) AS newest \
             FROM findings{}) WHERE newest = 1 ORDER BY time_ns DESC, tenant, finding_id",
            where_clause(&c)
        )
    });
    list(
        &console,
        Section::Findings,
        "Findings",
        ("/ui/findings", "Rule"),
        &f,
        sql,
        findings_table,
    )
    .await
}

fn findings_table(shown: &[Map<String, Value>]) -> String {
    if shown.is_empty() {
        return "<p>No finding matches.</p>".into();
    }
    let rows: Vec<Vec<String>> = shown
        .iter()
        .map(|r| {
            let tenant = text(r, "tenant").unwrap_or_default();
            let id = text(r, "request_id").unwrap_or_default();
            let href = html::request_href(&tenant, &id);
            let spans: Vec<String> = r
                .get("span_ids")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(|s| format!("<a href=\"{}#span-{1}\">{1}</a>", esc(&href), esc(s)))
                .collect();
            vec![
                html::time(int(r, "time_ns").unwrap_or(0)),
                esc(&tenant),
                esc(&text(r, "rule").unwrap_or_default()),
                esc(&text(r, "severity").unwrap_or_default()),
                esc(&text(r, "status").unwrap_or_default()),
                format!("<a href=\"{}\">{}</a>", esc(&href), esc(&id)),
                spans.join(" "),
                esc(&text(r, "reason").unwrap_or_default()),
            ]
        })
        .collect();
    html::table(
        "Newest first; each finding's newest row",
        &[
            "Time (UTC)",
            "Tenant",
            "Rule",
            "Severity",
            "Status",
            "Request",
            "Evidence",
            "Reason",
        ],
        &rows,
    )
}

/// `GET /ui/alarms`: every alarm row (warnings, limits, resolutions).
pub async fn alarms(Reader(console): Reader, Query(f): Query<ListFilter>) -> Response {
    let sql = conditions(&f, "budget", crate::clock::now_ns()).map(|c| {
        format!(
            "SELECT tenant, CAST(time AS BIGINT) AS time_ns, alarm_id, scope, scope_id, budget, \
             level, reason, observed, limit_value, request_id FROM alarms{} \
             ORDER BY time_ns DESC, tenant, alarm_id, level",
            where_clause(&c)
        )
    });
    list(
        &console,
        Section::Alarms,
        "Alarms",
        ("/ui/alarms", "Budget"),
        &f,
        sql,
        alarms_table,
    )
    .await
}

fn alarms_table(shown: &[Map<String, Value>]) -> String {
    if shown.is_empty() {
        return "<p>No alarm matches.</p>".into();
    }
    let rows: Vec<Vec<String>> = shown
        .iter()
        .map(|r| {
            let tenant = text(r, "tenant").unwrap_or_default();
            let f = |k: &str| r.get(k).and_then(Value::as_f64).unwrap_or(0.0);
            let request = match text(r, "request_id").filter(|s| !s.is_empty()) {
                Some(id) => format!(
                    "<a href=\"{}\">{}</a>",
                    esc(&html::request_href(&tenant, &id)),
                    esc(&id)
                ),
                None => String::new(),
            };
            let level = text(r, "level").unwrap_or_default();
            let class = match level.as_str() {
                "limit" => " class=\"bad\"",
                "warning" => " class=\"warn\"",
                _ => "",
            };
            vec![
                html::time(int(r, "time_ns").unwrap_or(0)),
                esc(&tenant),
                esc(&text(r, "budget").unwrap_or_default()),
                format!("<span{class}>{}</span>", esc(&level)),
                format!(
                    "{} {}",
                    esc(&text(r, "scope").unwrap_or_default()),
                    esc(&text(r, "scope_id").unwrap_or_default())
                ),
                format!("{} of {}", f("observed"), f("limit_value")),
                request,
            ]
        })
        .collect();
    html::table(
        "Newest first",
        &[
            "Time (UTC)",
            "Tenant",
            "Budget",
            "Level",
            "Scope",
            "Observed",
            "Request",
        ],
        &rows,
    )
}
