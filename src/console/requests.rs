//! The requests page: newest first, each request's newest summary, filtered by tenant, time,
//! principal, tool, outcome, "has findings" and "has alarms", fifty to a page.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use axum::extract::Query;
use axum::http::StatusCode;
use axum::response::Response;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::html::{self, esc, url_part, Section};
use super::{failed, field, html_page, Reader};
use crate::query::sql_string;
use crate::query::trace::{int, rows, text};

/// Rows to a page.
const PAGE_ROWS: usize = 50;

/// Outcomes a summary can have (`requests.outcome`).
const OUTCOMES: &[&str] = &["ok", "error", "denied", "cancelled"];

/// The filters, as the page's form sends them (blank fields are no filter).
#[derive(Debug, Default, Deserialize)]
pub struct RequestFilter {
    tenant: Option<String>,
    principal: Option<String>,
    tool: Option<String>,
    outcome: Option<String>,
    since: Option<String>,
    until: Option<String>,
    findings: Option<String>,
    alarms: Option<String>,
    page: Option<usize>,
}

/// A time bound of the form: an age (`90m`, `24h`, `7d`: that long before now) or a UTC time
/// (`2026-12-07`, `2026-12-07 04:30`, RFC 3339); ns since the epoch.
pub fn time_bound(text: &str, now_ns: i64) -> Result<i64, String> {
    if let Ok(d) = humantime::parse_duration(text) {
        let ns = i64::try_from(d.as_nanos()).unwrap_or(i64::MAX);
        return Ok(now_ns.saturating_sub(ns));
    }
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(text) {
        return t
            .timestamp_nanos_opt()
            .ok_or_else(|| format!("{text:?} is out of range"));
    }
    for f in ["%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%dT%H:%M"] {
        if let Ok(t) = chrono::NaiveDateTime::parse_from_str(text, f) {
            return t
                .and_utc()
                .timestamp_nanos_opt()
                .ok_or_else(|| format!("{text:?} is out of range"));
        }
    }
    if let Ok(d) = chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d") {
        if let Some(t) = d.and_hms_opt(0, 0, 0) {
            return t
                .and_utc()
                .timestamp_nanos_opt()
                .ok_or_else(|| format!("{text:?} is out of range"));
        }
    }
    Err(format!(
        "{text:?} is neither an age (90m, 24h, 7d) nor a UTC time (2026-12-07 04:30)"
    ))
}

/// The `date` partition (UTC day) of `ns`.
fn day(ns: i64) -> String {
    html::time(ns)[..10].to_string()
}

/// The SQL conditions the filter makes on `requests` (aliased `r`), or what is wrong with it:
/// those on its partitions and times first (they prune files), then those on the newest
/// summary.
fn conditions(f: &RequestFilter, now_ns: i64) -> Result<(Vec<String>, Vec<String>), String> {
    let mut pruning = Vec::new();
    let mut newest = Vec::new();
    if let Some(t) = field(&f.tenant) {
        pruning.push(format!("tenant = {}", sql_string(t)));
    }
    if let Some(s) = field(&f.since) {
        let ns = time_bound(s, now_ns).map_err(|e| format!("From: {e}"))?;
        pruning.push(format!("date >= '{}'", day(ns)));
        pruning.push(format!("CAST(start_time AS BIGINT) >= {ns}"));
    }
    if let Some(u) = field(&f.until) {
        let ns = time_bound(u, now_ns).map_err(|e| format!("To: {e}"))?;
        pruning.push(format!("date <= '{}'", day(ns)));
        pruning.push(format!("CAST(start_time AS BIGINT) <= {ns}"));
    }
    if let Some(p) = field(&f.principal) {
        newest.push(format!("r.principal_id = {}", sql_string(p)));
    }
    if let Some(t) = field(&f.tool) {
        newest.push(format!(
            "map_extract(r.tool_calls_by_tool, {})[1] > 0",
            sql_string(t)
        ));
    }
    if let Some(o) = field(&f.outcome) {
        if !OUTCOMES.contains(&o) {
            return Err(format!("Outcome: one of {}", OUTCOMES.join(", ")));
        }
        newest.push(format!("r.outcome = {}", sql_string(o)));
    }
    if field(&f.findings).is_some() {
        newest.push("COALESCE(r.findings, 0) > 0".into());
    }
    if field(&f.alarms).is_some() {
        newest.push(
            "EXISTS (SELECT 1 FROM alarms a WHERE a.tenant = r.tenant \
             AND a.request_id = r.request_id)"
                .into(),
        );
    }
    Ok((pruning, newest))
}

/// The SQL of one page: the newest summary of each request, newest first; one row more than
/// a page, to know whether another follows.
fn page_sql(pruning: &[String], newest: &[String], page: usize) -> String {
    let inner_where = if pruning.is_empty() {
        String::new()
    } else {
        format!(" WHERE {}", pruning.join(" AND "))
    };
    let mut outer = vec!["r.newest = 1".to_string()];
    outer.extend(newest.iter().cloned());
    format!(
        "SELECT r.tenant, r.request_id, r.principal_id, CAST(r.start_time AS BIGINT) AS start_ns, \
         r.duration_ns, r.span_count, r.model_turns, r.tool_calls, r.input_tokens, \
         r.output_tokens, r.cost_usd, r.outcome, r.findings, r.completeness \
         FROM (SELECT *, row_number() OVER (PARTITION BY tenant, request_id \
         ORDER BY summary_version DESC) AS newest FROM requests{inner_where}) r \
         WHERE {} ORDER BY start_ns DESC, r.tenant, r.request_id LIMIT {} OFFSET {}",
        outer.join(" AND "),
        PAGE_ROWS + 1,
        page * PAGE_ROWS
    )
}

/// Alarms raised (not resolutions) per (tenant, request) of the rows shown.
fn alarms_sql(shown: &[Map<String, Value>]) -> Option<String> {
    let ids: Vec<String> = shown
        .iter()
        .filter_map(|r| text(r, "request_id"))
        .map(|id| sql_string(&id))
        .collect();
    if ids.is_empty() {
        return None;
    }
    Some(format!(
        "SELECT tenant, request_id, count(*) AS n FROM alarms \
         WHERE level <> 'resolved' AND request_id IN ({}) GROUP BY tenant, request_id",
        ids.join(", ")
    ))
}

/// `GET /ui/`.
pub async fn page(Reader(console): Reader, Query(f): Query<RequestFilter>) -> Response {
    let now_ns = crate::clock::now_ns();
    let (pruning, newest) = match conditions(&f, now_ns) {
        Ok(c) => c,
        Err(why) => {
            let body = format!(
                "{}<p class=\"bad\" role=\"alert\">{}</p>",
                filter_form(&f),
                esc(&why)
            );
            return html_page(
                StatusCode::BAD_REQUEST,
                Section::Requests,
                "Requests",
                &body,
            );
        }
    };
    let page = f.page.unwrap_or(0).min(100_000);
    let sql = page_sql(&pruning, &newest, page);
    let read = console
        .read(|ctx| {
            let sql = sql.clone();
            async move {
                let shown = rows(&ctx, &sql).await?;
                let alarms = match alarms_sql(&shown) {
                    Some(q) => rows(&ctx, &q).await?,
                    None => Vec::new(),
                };
                Ok((shown, alarms))
            }
        })
        .await;
    let (mut shown, alarm_rows) = match read {
        Ok(r) => r,
        Err(e) => return failed(Section::Requests, e),
    };
    let more = shown.len() > PAGE_ROWS;
    shown.truncate(PAGE_ROWS);
    let mut alarms: BTreeMap<(String, String), i64> = BTreeMap::new();
    for a in alarm_rows {
        if let (Some(t), Some(r)) = (text(&a, "tenant"), text(&a, "request_id")) {
            alarms.insert((t, r), int(&a, "n").unwrap_or(0));
        }
    }
    let mut body = filter_form(&f);
    body.push_str(&table(&shown, &alarms));
    body.push_str(&pager(&f, page, more));
    html_page(StatusCode::OK, Section::Requests, "Requests", &body)
}

fn filter_form(f: &RequestFilter) -> String {
    let value = |v: &Option<String>| esc(field(v).unwrap_or(""));
    let checked = |v: &Option<String>| {
        if field(v).is_some() {
            " checked"
        } else {
            ""
        }
    };
    let mut outcomes = String::from("<option value=\"\">any</option>");
    for o in OUTCOMES {
        let sel = if field(&f.outcome) == Some(o) {
            " selected"
        } else {
            ""
        };
        let _ = write!(outcomes, "<option{sel}>{o}</option>");
    }
    format!(
        "<form class=\"filters\" method=\"get\" action=\"/ui/\">\
         <label>Tenant<input name=\"tenant\" value=\"{}\"></label>\
         <label>From<input name=\"since\" value=\"{}\" placeholder=\"24h or 2026-12-07 04:30\"></label>\
         <label>To<input name=\"until\" value=\"{}\" placeholder=\"UTC\"></label>\
         <label>Principal<input name=\"principal\" value=\"{}\"></label>\
         <label>Tool<input name=\"tool\" value=\"{}\"></label>\
         <label>Outcome<select name=\"outcome\">{outcomes}</select></label>\
         <label><span><input type=\"checkbox\" name=\"findings\" value=\"1\"{}> has findings</span></label>\
         <label><span><input type=\"checkbox\" name=\"alarms\" value=\"1\"{}> has alarms</span></label>\
         <button type=\"submit\">Filter</button></form>",
        value(&f.tenant),
        value(&f.since),
        value(&f.until),
        value(&f.principal),
        value(&f.tool),
        checked(&f.findings),
        checked(&f.alarms),
    )
}

fn table(shown: &[Map<String, Value>], alarms: &BTreeMap<(String, String), i64>) -> String {
    if shown.is_empty() {
        return "<p>No request matches.</p>".into();
    }
    let n = |r: &Map<String, Value>, k: &str| html::count(int(r, k).unwrap_or(0));
    let rows: Vec<Vec<String>> = shown
        .iter()
        .map(|r| {
            let tenant = text(r, "tenant").unwrap_or_default();
            let id = text(r, "request_id").unwrap_or_default();
            let href = html::request_href(&tenant, &id);
            let alarm_count = alarms
                .get(&(tenant.clone(), id.clone()))
                .copied()
                .unwrap_or(0);
            let outcome = text(r, "outcome").unwrap_or_default();
            let outcome_class = if outcome == "ok" {
                ""
            } else {
                " class=\"bad\""
            };
            vec![
                html::time(int(r, "start_ns").unwrap_or(0)),
                esc(&tenant),
                format!("<a href=\"{}\">{}</a>", esc(&href), esc(&id)),
                esc(&text(r, "principal_id").unwrap_or_default()),
                html::duration(int(r, "duration_ns").unwrap_or(0)),
                n(r, "model_turns"),
                n(r, "tool_calls"),
                format!("{} / {}", n(r, "input_tokens"), n(r, "output_tokens")),
                html::usd(r.get("cost_usd").and_then(Value::as_f64).unwrap_or(0.0)),
                format!("<span{outcome_class}>{}</span>", esc(&outcome)),
                n(r, "findings"),
                html::count(alarm_count),
            ]
        })
        .collect();
    html::table(
        "Newest first; each request's newest summary",
        &[
            "Start (UTC)",
            "Tenant",
            "Request",
            "Principal",
            "Duration",
            "Turns",
            "Tool calls",
            "Tokens in / out",
            "Cost",
            "Outcome",
            "Findings",
            "Alarms",
        ],
        &rows,
    )
}

/// Links to the pages before and after, keeping the filters.
fn pager(f: &RequestFilter, page: usize, more: bool) -> String {
    let mut keep = String::new();
    for (k, v) in [
        ("tenant", &f.tenant),
        ("since", &f.since),
        ("until", &f.until),
        ("principal", &f.principal),
        ("tool", &f.tool),
        ("outcome", &f.outcome),
        ("findings", &f.findings),
        ("alarms", &f.alarms),
    ] {
        if let Some(v) = field(v) {
            let _ = write!(keep, "{k}={}&", url_part(v));
        }
    }
    let mut out = String::from("<nav class=\"pager\" aria-label=\"Pages\">");
    if page > 0 {
        let _ = write!(
            out,
            "<a rel=\"prev\" href=\"/ui/?{}page={}\">Newer</a>",
            esc(&keep),
            page - 1
        );
    }
    let _ = write!(out, "<span class=\"muted\">Page {}</span>", page + 1);
    if more {
        let _ = write!(
            out,
            "<a rel=\"next\" href=\"/ui/?{}page={}\">Older</a>",
            esc(&keep),
            page + 1
        );
    }
    out.push_str("</nav>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_767_225_600_000_000_000; // 2026-01-01 00:00 UTC

    #[test]
    fn a_time_bound_is_an_age_or_a_utc_time() {
        assert_eq!(time_bound("24h", NOW), Ok(NOW - 86_400_000_000_000));
        assert_eq!(time_bound("90m", NOW), Ok(NOW - 5_400_000_000_000));
        assert_eq!(
            time_bound("2026-01-01 00:30", NOW),
            Ok(NOW + 1_800_000_000_000)
        );
        assert_eq!(time_bound("2025-12-31", NOW), Ok(NOW - 86_400_000_000_000));
        assert_eq!(
            time_bound("2026-01-01T00:00:01Z", NOW),
            Ok(NOW + 1_000_000_000)
        );
        assert!(time_bound("yesterday", NOW)
            .unwrap_err()
            .contains("neither an age"));
    }

    #[test]
    fn filters_become_conditions_quoted_as_sql_strings() {
        let f = RequestFilter {
            tenant: Some("t'1".into()),
            since: Some("24h".into()),
            tool: Some("refund".into()),
            outcome: Some("error".into()),
            findings: Some("1".into()),
            principal: Some("  ".into()),
            ..Default::default()
        };
        let (pruning, newest) = conditions(&f, NOW).expect("valid");
        assert_eq!(
            pruning,
            [
                "tenant = 't''1'".to_string(),
                "date >= '2025-12-31'".into(),
                format!("CAST(start_time AS BIGINT) >= {}", NOW - 86_400_000_000_000),
            ]
        );
        assert_eq!(
            newest,
            [
                "map_extract(r.tool_calls_by_tool, 'refund')[1] > 0".to_string(),
                "r.outcome = 'error'".into(),
                "COALESCE(r.findings, 0) > 0".into(),
            ]
        );
        let bad = RequestFilter {
            outcome: Some("'; DROP".into()),
            ..Default::default()
        };
        assert_eq!(
            conditions(&bad, NOW).unwrap_err(),
            "Outcome: one of ok, error, denied, cancelled"
        );
    }
}
