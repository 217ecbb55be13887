//! The requests page: newest first, each request's newest summary, filtered by tenant, time,
//! principal, tool, outcome, "has findings" and "has alarms", fifty to a page.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use axum::extract::Query;
use axum::http::StatusCode;
use axum::response::Response;
use datafusion::execution::context::SessionContext;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::html::{self, esc, url_part, Section};
use super::{failed, field, html_page, kept_filters, Reader};
use crate::query::trace::{int, rows, text};
use crate::query::{sql_string, QueryError};

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
    /// The page's number, shown only: where it starts is the cursor below.
    page: Option<usize>,
    after_ns: Option<i64>,
    after_tenant: Option<String>,
    after_id: Option<String>,
}

/// Where an older page starts: after this row of the page before it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    start_ns: i64,
    tenant: String,
    request_id: String,
}

impl Cursor {
    /// The cursor of a request filter's `after_*` fields, when all three are there.
    fn of(f: &RequestFilter) -> Option<Cursor> {
        Some(Cursor {
            start_ns: f.after_ns?,
            tenant: f.after_tenant.clone()?,
            request_id: f.after_id.clone()?,
        })
    }

    /// The cursor after `row` (a page's last).
    fn after(row: &Map<String, Value>) -> Option<Cursor> {
        Some(Cursor {
            start_ns: int(row, "start_ns")?,
            tenant: text(row, "tenant")?,
            request_id: text(row, "request_id")?,
        })
    }

    /// The SQL condition on `requests` aliased `r`: rows the list puts after this one.
    #[cfg(test)]
    fn condition(&self) -> String {
        let (t, i) = (sql_string(&self.tenant), sql_string(&self.request_id));
        format!(
            "(CAST(r.start_time AS BIGINT) < {ns} OR (CAST(r.start_time AS BIGINT) = {ns} \
             AND (r.tenant > {t} OR (r.tenant = {t} AND r.request_id > {i}))))",
            ns = self.start_ns
        )
    }

    /// Where the cursor's row is in the list's order.
    fn key(&self) -> ListKey {
        (
            std::cmp::Reverse(Some(self.start_ns)),
            Some(self.tenant.clone()),
            Some(self.request_id.clone()),
        )
    }
}

/// The list's order: newest start first, then tenant and request id.
type ListKey = (
    std::cmp::Reverse<Option<i64>>,
    Option<String>,
    Option<String>,
);

fn list_key(r: &Map<String, Value>) -> ListKey {
    (
        std::cmp::Reverse(int(r, "start_ns")),
        text(r, "tenant"),
        text(r, "request_id"),
    )
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
        pruning.push(format!("date >= '{}'", html::day(ns)));
        pruning.push(format!("CAST(start_time AS BIGINT) >= {ns}"));
    }
    if let Some(u) = field(&f.until) {
        let ns = time_bound(u, now_ns).map_err(|e| format!("To: {e}"))?;
        pruning.push(format!("date <= '{}'", html::day(ns)));
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

/// What the tests hold [`page_rows`] to: a window over every version picks each request's
/// newest summary, which must meet the conditions; one row more than a page.
#[cfg(test)]
fn page_sql(pruning: &[String], newest: &[String], after: Option<&Cursor>) -> String {
    let mut outer = vec!["r.newest = 1".to_string()];
    outer.extend(newest.iter().cloned());
    outer.extend(after.map(Cursor::condition));
    format!(
        "SELECT {COLUMNS} \
         FROM (SELECT *, row_number() OVER (PARTITION BY tenant, request_id \
         ORDER BY summary_version DESC) AS newest FROM requests{}) r \
         WHERE {} ORDER BY start_ns DESC, r.tenant, r.request_id LIMIT {}",
        where_clause(pruning, None),
        outer.join(" AND "),
        PAGE_ROWS + 1,
    )
}

/// The columns a page shows, of `requests` aliased `r`.
const COLUMNS: &str = "r.tenant, r.request_id, r.principal_id, \
    CAST(r.start_time AS BIGINT) AS start_ns, r.duration_ns, r.span_count, r.model_turns, \
    r.tool_calls, r.input_tokens, r.output_tokens, r.cost_usd, r.outcome, r.findings, \
    r.completeness";

fn where_clause(conditions: &[String], extra: Option<String>) -> String {
    let mut all = conditions.to_vec();
    all.extend(extra);
    if all.is_empty() {
        String::new()
    } else {
        format!(" WHERE {}", all.join(" AND "))
    }
}

/// One page's rows (those after `after`, or the newest), and one more to know whether
/// another follows: each request's newest summary, where it meets the `newest` conditions.
/// The newest rows by start time that meet them in any version are read (a top-k read, not a
/// sort of every request), then those requests' versions: a page costs the same however
/// deep it is and however many requests the archive holds.
async fn page_rows(
    ctx: &SessionContext,
    pruning: &[String],
    newest: &[String],
    after: Option<&Cursor>,
) -> Result<Vec<Map<String, Value>>, QueryError> {
    let need = PAGE_ROWS + 1;
    let mut k = need * 2;
    let mut top_conditions = pruning.to_vec();
    // Nothing the page can show starts after the cursor's row.
    top_conditions.extend(after.map(|c| format!("CAST(start_time AS BIGINT) <= {}", c.start_ns)));
    // A request whose newest summary meets the conditions has a row that does.
    top_conditions.extend(newest.iter().cloned());
    let after_key = after.map(Cursor::key);
    loop {
        let top = rows(
            ctx,
            &format!(
                "SELECT r.tenant, r.request_id, CAST(r.start_time AS BIGINT) AS start_ns \
                 FROM requests r{} ORDER BY start_ns DESC LIMIT {k}",
                where_clause(&top_conditions, None)
            ),
        )
        .await?;
        let everything = top.len() < k;
        // A request's newer version may start earlier (a late span that began before the
        // rest): only what starts after the last row read is surely complete.
        let bound = if everything {
            None
        } else {
            top.last().and_then(|r| int(r, "start_ns"))
        };
        let keys: BTreeSet<(String, String)> = top
            .iter()
            .filter_map(|r| Some((text(r, "tenant")?, text(r, "request_id")?)))
            .collect();
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let ids: BTreeSet<String> = keys.iter().map(|(_, id)| sql_string(id)).collect();
        let ids: Vec<String> = ids.into_iter().collect();
        let of_ids = format!("r.request_id IN ({})", ids.join(", "));
        let versions = rows(
            ctx,
            &format!(
                "SELECT {COLUMNS}, r.summary_version FROM requests r{}",
                where_clause(pruning, Some(of_ids.clone()))
            ),
        )
        .await?;
        // The versions that meet the conditions: a request is shown if its newest does.
        let meeting: Option<BTreeSet<(String, String, i64)>> = if newest.is_empty() {
            None
        } else {
            let mut c = pruning.to_vec();
            c.extend(newest.iter().cloned());
            let met = rows(
                ctx,
                &format!(
                    "SELECT r.tenant, r.request_id, r.summary_version FROM requests r{}",
                    where_clause(&c, Some(of_ids))
                ),
            )
            .await?;
            Some(
                met.iter()
                    .filter_map(|r| {
                        Some((
                            text(r, "tenant")?,
                            text(r, "request_id")?,
                            int(r, "summary_version")?,
                        ))
                    })
                    .collect(),
            )
        };
        let mut newest_rows: BTreeMap<(String, String), Map<String, Value>> = BTreeMap::new();
        for v in versions {
            let key = (
                text(&v, "tenant").unwrap_or_default(),
                text(&v, "request_id").unwrap_or_default(),
            );
            if !keys.contains(&key) {
                continue;
            }
            let version = int(&v, "summary_version");
            let newer = newest_rows
                .get(&key)
                .is_none_or(|held| int(held, "summary_version") < version);
            if newer {
                newest_rows.insert(key, v);
            }
        }
        let mut out: Vec<Map<String, Value>> = newest_rows
            .into_iter()
            .filter(|((t, id), r)| {
                meeting.as_ref().is_none_or(|m| {
                    int(r, "summary_version")
                        .is_some_and(|v| m.contains(&(t.clone(), id.clone(), v)))
                })
            })
            .map(|(_, r)| r)
            .filter(|r| bound.is_none_or(|b| int(r, "start_ns").unwrap_or(i64::MIN) > b))
            .filter(|r| after_key.as_ref().is_none_or(|a| list_key(r) > *a))
            .collect();
        out.sort_by_key(list_key);
        if out.len() >= need || everything {
            out.truncate(need);
            return Ok(out);
        }
        k = k.saturating_mul(4);
    }
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
    let page = f.page.unwrap_or(0).min(1_000_000);
    let after = Cursor::of(&f);
    let read = console
        .read(|ctx| {
            let (pruning, newest, after) = (pruning.clone(), newest.clone(), after.clone());
            async move {
                let shown = page_rows(&ctx, &pruning, &newest, after.as_ref()).await?;
                let alarms = match alarms_sql(&shown) {
                    Some(q) => rows(&ctx, &q).await?,
                    None => Vec::new(),
                };
                Ok((shown, alarms))
            }
        })
        .await;
    let ((mut shown, alarm_rows), notice) = match read {
        Ok(r) => r,
        Err(e) => return failed(Section::Requests, e),
    };
    let more = shown.len() > PAGE_ROWS;
    shown.truncate(PAGE_ROWS);
    let next = more.then(|| shown.last().and_then(Cursor::after)).flatten();
    let mut alarms: BTreeMap<(String, String), i64> = BTreeMap::new();
    for a in alarm_rows {
        if let (Some(t), Some(r)) = (text(&a, "tenant"), text(&a, "request_id")) {
            alarms.insert((t, r), int(&a, "n").unwrap_or(0));
        }
    }
    let mut body = notice.html();
    body.push_str(&filter_form(&f));
    body.push_str(&table(&shown, &alarms));
    body.push_str(&pager(&f, page, next.as_ref()));
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

/// Links to the newest page and the next older one, keeping the filters.
fn pager(f: &RequestFilter, page: usize, next: Option<&Cursor>) -> String {
    let keep = kept_filters(&[
        ("tenant", &f.tenant),
        ("since", &f.since),
        ("until", &f.until),
        ("principal", &f.principal),
        ("tool", &f.tool),
        ("outcome", &f.outcome),
        ("findings", &f.findings),
        ("alarms", &f.alarms),
    ]);
    let mut out = String::from("<nav class=\"pager\" aria-label=\"Pages\">");
    if page > 0 {
        let _ = write!(
            out,
            "<a rel=\"first\" href=\"/ui/?{}\">Newest</a>",
            esc(keep.trim_end_matches('&'))
        );
    }
    let _ = write!(out, "<span class=\"muted\">Page {}</span>", page + 1);
    if let Some(c) = next {
        let _ = write!(
            out,
            "<a rel=\"next\" href=\"/ui/?{}page={}&after_ns={}&after_tenant={}&after_id={}\">Older</a>",
            esc(&keep),
            page + 1,
            c.start_ns,
            esc(&url_part(&c.tenant)),
            esc(&url_part(&c.request_id))
        );
    }
    out.push_str("</nav>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::sync::Arc;

    use datafusion::arrow::array::{
        ArrayRef, Float64Array, Int32Array, Int64Array, StringArray, TimestampNanosecondArray,
    };
    use datafusion::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    use datafusion::arrow::record_batch::RecordBatch;
    use datafusion::datasource::MemTable;

    /// One summary version: (tenant, request, version, start, outcome is `error`).
    type Version = (u8, u8, i32, i64, bool);

    /// A row of a page as compared: tenant, request, start, version shown.
    type Shown = (Option<String>, Option<String>, Option<i64>, Option<i64>);

    /// A session whose `requests` holds `versions`.
    fn session(versions: &[Version]) -> SessionContext {
        let n = versions.len();
        let text = |f: &dyn Fn(&Version) -> String| -> ArrayRef {
            Arc::new(StringArray::from(
                versions.iter().map(f).collect::<Vec<_>>(),
            ))
        };
        let ints = |v: i64| -> ArrayRef { Arc::new(Int64Array::from(vec![v; n])) };
        let schema = Arc::new(Schema::new(vec![
            Field::new("tenant", DataType::Utf8, false),
            Field::new("request_id", DataType::Utf8, false),
            Field::new("summary_version", DataType::Int32, false),
            Field::new(
                "start_time",
                DataType::Timestamp(TimeUnit::Nanosecond, Some("UTC".into())),
                false,
            ),
            Field::new("principal_id", DataType::Utf8, true),
            Field::new("duration_ns", DataType::Int64, false),
            Field::new("span_count", DataType::Int64, false),
            Field::new("model_turns", DataType::Int64, false),
            Field::new("tool_calls", DataType::Int64, false),
            Field::new("input_tokens", DataType::Int64, false),
            Field::new("output_tokens", DataType::Int64, false),
            Field::new("cost_usd", DataType::Float64, false),
            Field::new("outcome", DataType::Utf8, false),
            Field::new("findings", DataType::Int64, true),
            Field::new("completeness", DataType::Utf8, false),
        ]));
        let batch = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![
                text(&|v| format!("t{}", v.0)),
                text(&|v| format!("r{}", v.1)),
                Arc::new(Int32Array::from(
                    versions.iter().map(|v| v.2).collect::<Vec<_>>(),
                )),
                Arc::new(
                    TimestampNanosecondArray::from(
                        versions.iter().map(|v| v.3).collect::<Vec<_>>(),
                    )
                    .with_timezone("UTC"),
                ),
                text(&|v| format!("p{}", v.2)),
                ints(1),
                // The version, to tell which one a page shows.
                Arc::new(Int64Array::from(
                    versions.iter().map(|v| i64::from(v.2)).collect::<Vec<_>>(),
                )),
                ints(0),
                ints(0),
                ints(0),
                ints(0),
                Arc::new(Float64Array::from(vec![0.0; n])),
                text(&|v| if v.4 { "error".into() } else { "ok".into() }),
                ints(0),
                text(&|_| "complete".into()),
            ],
        )
        .expect("batch");
        let ctx = SessionContext::new();
        let table = MemTable::try_new(schema, vec![vec![batch]]).expect("table");
        ctx.register_table("requests", Arc::new(table))
            .expect("register");
        ctx
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        /// The top-k read gives every page exactly what the window over every version gives,
        /// whatever the versions, their starts (a newer version may start earlier; starts
        /// tie often here) and outcomes, with and without a condition on the newest summary
        /// (`error` that an older version may have had and the newest not, or the reverse).
        #[test]
        fn newest_first_pages_equal_the_window_over_every_version(
            requests in proptest::collection::vec(
                (0u8..3, 1i32..4, proptest::collection::vec((0i64..40, proptest::bool::ANY), 3)),
                1..130,
            ),
            page in 0usize..3,
            errors_only in proptest::bool::ANY,
        ) {
            let newest: Vec<String> = if errors_only {
                vec!["r.outcome = 'error'".into()]
            } else {
                Vec::new()
            };
            let mut versions = Vec::new();
            let mut seen = BTreeSet::new();
            for (i, (tenant, count, starts)) in requests.iter().enumerate() {
                let id = (i % 120) as u8;
                if !seen.insert((*tenant, id)) {
                    continue;
                }
                for v in 1..=*count {
                    let (start, error) = starts[(v - 1) as usize];
                    versions.push((*tenant, id, v, start * 1_000_000_000, error));
                }
            }
            let ctx = session(&versions);
            let rt = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
            let (fast, window, by_cursor) = rt.block_on(async {
                // Page `page` reached by following each page's cursor, both ways.
                // Past the last page, both are empty.
                let mut after: Option<Cursor> = None;
                let mut fast = Vec::new();
                let mut by_cursor = Vec::new();
                for step in 0..=page {
                    if step > 0 && after.is_none() {
                        fast.clear();
                        by_cursor.clear();
                        break;
                    }
                    fast = page_rows(&ctx, &[], &newest, after.as_ref()).await.expect("fast");
                    by_cursor = rows(&ctx, &page_sql(&[], &newest, after.as_ref())).await.expect("cursor");
                    after = (fast.len() > PAGE_ROWS)
                        .then(|| fast.get(PAGE_ROWS - 1).and_then(Cursor::after))
                        .flatten();
                }
                // The reference: the window over every version, by offset.
                let offset = page_sql(&[], &newest, None).replace(
                    &format!("LIMIT {}", PAGE_ROWS + 1),
                    &format!("LIMIT {} OFFSET {}", PAGE_ROWS + 1, page * PAGE_ROWS),
                );
                let window = rows(&ctx, &offset).await.expect("window");
                (fast, window, by_cursor)
            });

            let ids = |rs: &[Map<String, Value>]| -> Vec<Shown> {
                rs.iter()
                    .map(|r| (text(r, "tenant"), text(r, "request_id"), int(r, "start_ns"), int(r, "span_count")))
                    .collect()
            };
            prop_assert_eq!(ids(&fast), ids(&by_cursor));
            prop_assert_eq!(ids(&fast), ids(&window));
        }
    }

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
