//! Search: a request id, a trace id, a span id, or a raw idempotency key. The form is posted,
//! so what is searched never lands in a URL, a browser's history or an access log; a raw key
//! is hashed here under every key the daemon knows (as `toolwatch hash-key` does) and only
//! its hashes are looked up. No answer repeats what was searched.

use std::fmt::Write as _;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::Form;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::html::{self, esc, Section};
use super::{failed, html_page, Reader};
use crate::query::sql_string;
use crate::query::trace::{is_trace_id, rows, text};
use crate::query::QueryError;

/// The posted form.
#[derive(Debug, Default, Deserialize)]
pub struct SearchForm {
    q: Option<String>,
}

/// What a search found.
#[derive(Debug, PartialEq)]
enum Found {
    /// Spans or requests, each `(tenant, request id, span id)`.
    Matches {
        /// What the matches are, for the heading.
        what: &'static str,
        rows: Vec<(String, String, Option<String>)>,
    },
    Nothing,
}

fn is_span_id(s: &str) -> bool {
    s.len() == 16 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// `(tenant, request id or else trace id, span id)` of a spans row.
fn span_match(r: &Map<String, Value>) -> (String, String, Option<String>) {
    let request = text(r, "request_id")
        .filter(|s| !s.is_empty())
        .or_else(|| text(r, "trace_id"))
        .unwrap_or_default();
    (
        text(r, "tenant").unwrap_or_default(),
        request,
        text(r, "span_id"),
    )
}

/// `GET /ui/search`: the form alone.
pub async fn form() -> Response {
    html_page(
        StatusCode::OK,
        Section::Search,
        "Search",
        "<form method=\"post\" action=\"/ui/search\">\
         <label for=\"q2\">Request id, trace id (32 hex digits), span id (16 hex digits) or a raw \
         idempotency key</label> <input id=\"q2\" name=\"q\" autocomplete=\"off\" size=\"60\"> \
         <button type=\"submit\">Find</button></form>\
         <p class=\"muted\">A raw idempotency key is hashed on the server under every key the \
         daemon knows and only its hashes are looked up; it is never stored or logged.</p>",
    )
}

/// `POST /ui/search`.
pub async fn find(Reader(console): Reader, Form(f): Form<SearchForm>) -> Response {
    let q = f.q.as_deref().map(str::trim).unwrap_or("").to_string();
    if q.is_empty() {
        return Redirect::to("/ui/search").into_response();
    }
    let hashes: Vec<String> = console.hashers.iter().map(|h| h.hash(&q)).collect();
    let read = console
        .read(|ctx| {
            let (q, hashes) = (q.clone(), hashes.clone());
            async move { look_up(&ctx, &q, &hashes).await }
        })
        .await;
    match read {
        Ok((Found::Matches { rows, .. }, _)) if rows.len() == 1 => {
            let (tenant, request, span) = &rows[0];
            let mut href = html::request_href(tenant, request);
            if let Some(s) = span {
                let _ = write!(href, "#span-{s}");
            }
            Redirect::to(&href).into_response()
        }
        Ok((Found::Matches { what, rows }, notice)) => {
            let list: Vec<Vec<String>> = rows
                .iter()
                .map(|(t, r, s)| {
                    let mut href = html::request_href(t, r);
                    if let Some(s) = s {
                        let _ = write!(href, "#span-{s}");
                    }
                    vec![
                        esc(t),
                        format!("<a href=\"{}\">{}</a>", esc(&href), esc(r)),
                        esc(s.as_deref().unwrap_or("")),
                    ]
                })
                .collect();
            let body = format!(
                "{}{}",
                notice.html(),
                html::table(what, &["Tenant", "Request", "Span"], &list)
            );
            html_page(StatusCode::OK, Section::Search, "Search results", &body)
        }
        Ok((Found::Nothing, _)) => html_page(
            StatusCode::NOT_FOUND,
            Section::Search,
            "Nothing found",
            "<p>Nothing in the archive matches what you searched for: no request, trace or \
             span with that id, and no call whose idempotency key hashes to it.</p>",
        ),
        Err(QueryError::NotFound(_)) => html_page(
            StatusCode::NOT_FOUND,
            Section::Search,
            "Nothing found",
            "<p>Nothing in the archive matches what you searched for.</p>",
        ),
        Err(e) => failed(Section::Search, e),
    }
}

/// Looks `q` up as a trace id, a span id, a request id, then by its key `hashes`.
async fn look_up(
    ctx: &datafusion::execution::context::SessionContext,
    q: &str,
    hashes: &[String],
) -> Result<Found, QueryError> {
    if is_trace_id(q) {
        let hit = rows(
            ctx,
            &format!(
                "SELECT tenant, request_id, trace_id FROM spans WHERE trace_id = {} \
                 ORDER BY (request_id IS NULL OR request_id = ''), request_id LIMIT 1",
                sql_string(&q.to_ascii_lowercase())
            ),
        )
        .await?;
        if let Some(found) = distinct_requests("Requests of this trace", &hit) {
            return Ok(found);
        }
    }
    if is_span_id(q) {
        let hit = rows(
            ctx,
            &format!(
                "SELECT tenant, request_id, trace_id, span_id FROM spans WHERE span_id = {} \
                 LIMIT 20",
                sql_string(&q.to_ascii_lowercase())
            ),
        )
        .await?;
        if !hit.is_empty() {
            return Ok(Found::Matches {
                what: "Spans with this id",
                rows: hit.iter().map(span_match).collect(),
            });
        }
    }
    for table in ["requests", "spans"] {
        let hit = rows(
            ctx,
            &format!(
                "SELECT DISTINCT tenant, request_id FROM {table} WHERE request_id = {} \
                 ORDER BY tenant LIMIT 50",
                sql_string(q)
            ),
        )
        .await?;
        if let Some(found) = distinct_requests("Requests with this id", &hit) {
            return Ok(found);
        }
    }
    if !hashes.is_empty() {
        let list: Vec<String> = hashes.iter().map(|h| sql_string(h)).collect();
        let hit = rows(
            ctx,
            &format!(
                "SELECT tenant, request_id, trace_id, span_id, CAST(start_time AS BIGINT) AS \
                 start_ns FROM spans WHERE idempotency_key_hash IN ({}) \
                 ORDER BY start_ns, span_id LIMIT 100",
                list.join(", ")
            ),
        )
        .await?;
        if !hit.is_empty() {
            return Ok(Found::Matches {
                what: "Calls whose idempotency key is the one searched for (matched by its hash)",
                rows: hit.iter().map(span_match).collect(),
            });
        }
    }
    Ok(Found::Nothing)
}

/// The distinct requests of `hit` (spans or requests rows), if any.
fn distinct_requests(what: &'static str, hit: &[Map<String, Value>]) -> Option<Found> {
    let mut rows: Vec<(String, String, Option<String>)> = hit
        .iter()
        .map(|r| {
            let (t, req, _) = span_match(r);
            (t, req, None)
        })
        .collect();
    rows.sort();
    rows.dedup();
    (!rows.is_empty()).then_some(Found::Matches { what, rows })
}
