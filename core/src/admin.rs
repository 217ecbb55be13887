//! Admin HTTP: `/healthz`, `/readyz`, `/metrics` (Prometheus text format),
//! `GET /v1/budgets[?tenant=T]` (current usage and limits as JSON) and
//! `POST /v1/archive/flush` (write out what the archive buffers; see `archive::write::flush`) and
//! `GET /v1/archive/buffered` (copies of what the archive buffers; see `archive::write::snapshot`).
//!
//! `/healthz` answers 200 while the process serves at all; `/readyz` answers 200 only while
//! the daemon accepts data (not during start-up or shutdown), so a load balancer can drain it.

use std::sync::Arc;

use axum::extract::{ConnectInfo, Query, State};
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::Router;

use std::collections::BTreeMap;
use std::sync::PoisonError;

use serde::Deserialize;
use serde_json::{json, Value};

use std::time::Duration;

use crate::archive::write::flush::FlushPoint;
use crate::budget::evaluate::{BudgetEvaluator, BudgetUsage};
use crate::budget::SharedEvaluator;
use crate::journal::head::JournalHead;
use crate::metrics::Metrics;

/// Content type of the exposition `prometheus-client` writes.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// What the admin handlers read.
#[derive(Clone)]
pub struct AdminState {
    /// Metrics and readiness.
    pub metrics: Arc<Metrics>,
    /// The budget evaluator.
    pub budgets: SharedEvaluator,
    /// The archive writers' flush points (none: flush answers 404).
    pub flush: Option<FlushPoints>,
    /// Who may use which endpoint (replaced on SIGHUP).
    pub access: SharedAdminAccess,
}

/// The flush points of the daemon's archive writers.
#[derive(Clone)]
pub struct FlushPoints {
    /// Spans and logs: one per archive writer thread.
    pub archive: Vec<Arc<FlushPoint>>,
    /// Request summaries.
    pub requests: Arc<FlushPoint>,
    /// Alarms.
    pub alarms: Arc<FlushPoint>,
    /// The journal, for the records committed when a flush is asked.
    pub head: Arc<JournalHead>,
}

impl FlushPoints {
    /// Copies of every archive writer's buffers, once each has read the records committed
    /// now; the name of a writer that did not answer within 10 s. For readers inside the
    /// daemon (the console) and for `GET /v1/archive/buffered`.
    pub async fn copies(&self) -> Result<crate::archive::write::snapshot::BufferedSet, String> {
        let records = self.head.committed();
        let all = self.all();
        let asked: Vec<_> = all.iter().map(|p| p.want_copies(records)).collect();
        self.head.nudge();
        let deadline = tokio::time::Instant::now() + FLUSH_TIMEOUT;
        let mut files = Vec::new();
        for (p, rx) in all.into_iter().zip(asked) {
            match tokio::time::timeout_at(deadline, rx).await {
                Ok(Ok(copies)) => files.extend(copies),
                _ => return Err(p.name.to_string()),
            }
        }
        Ok(crate::archive::write::snapshot::BufferedSet { records, files })
    }

    /// Every writer's point.
    fn all(&self) -> Vec<&Arc<FlushPoint>> {
        self.archive
            .iter()
            .chain([&self.requests, &self.alarms])
            .collect()
    }
}

/// How long a flush request waits for the writers.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(10);

/// Asks every archive writer to write out the records committed so far and waits for them:
/// 200 when all did, 504 when one did not within 10 s (the rows are safe in the journal and
/// will be written as usual). The answer names no data, only journal positions.
async fn flush(State(state): State<AdminState>) -> axum::response::Response {
    let Some(points) = state.flush else {
        return json_response(StatusCode::NOT_FOUND, json!({"error": "no archive here"}));
    };
    let asked_at = std::time::Instant::now();
    let records = points.head.committed();
    let all = points.all();
    let asked: Vec<u64> = all.iter().map(|p| p.want(records)).collect();
    // An idle daemon's consumers are waiting for records: they look at the request now.
    points.head.nudge();
    // One deadline for all: the answer comes within FLUSH_TIMEOUT, before the client gives up.
    let deadline = tokio::time::Instant::now() + FLUSH_TIMEOUT;
    let mut writers = Vec::new();
    let mut ok = true;
    for (p, n) in all.into_iter().zip(asked) {
        let done = p.wait(n, deadline).await;
        ok &= done;
        writers.push(json!({"writer": p.name, "flushed": done}));
    }
    state
        .metrics
        .reader_flush(ok, asked_at.elapsed().as_secs_f64());
    let status = if ok {
        StatusCode::OK
    } else {
        StatusCode::GATEWAY_TIMEOUT
    };
    json_response(
        status,
        json!({"flushed": ok, "records": records, "writers": writers}),
    )
}

/// Content type of the buffered rows' body (see `archive::write::snapshot`).
pub const BUFFERED_CONTENT_TYPE: &str = "application/vnd.toolwatch.buffered-rows";

/// Copies of every archive writer's buffers once each has read the records committed now:
/// 200 with the body of `archive::write::snapshot::BufferedSet`, 504 when a writer did not answer
/// within 10 s. The rows are protected, as in the files. Only a caller on this host (a
/// loopback peer) gets them, 403 otherwise: the admin port may be opened for scrapers, and
/// the readers the copies are for read the data directory on this host anyway.
async fn buffered(
    State(state): State<AdminState>,
    ConnectInfo(peer): ConnectInfo<crate::receive::tls::Peer>,
) -> axum::response::Response {
    if !peer.addr.ip().is_loopback() {
        state.metrics.reader_copy_refused();
        return json_response(
            StatusCode::FORBIDDEN,
            json!({"error": "buffered rows are served to readers on this host only (a loopback address)"}),
        );
    }
    let Some(points) = state.flush else {
        return json_response(StatusCode::NOT_FOUND, json!({"error": "no archive here"}));
    };
    let asked_at = std::time::Instant::now();
    let set = match points.copies().await {
        Ok(set) => set,
        Err(writer) => {
            state
                .metrics
                .reader_copy(false, asked_at.elapsed().as_secs_f64());
            return json_response(
                StatusCode::GATEWAY_TIMEOUT,
                json!({"error": "an archive writer did not answer", "writer": writer}),
            );
        }
    };
    state
        .metrics
        .reader_copy(true, asked_at.elapsed().as_secs_f64());
    let body = set.encode();
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, BUFFERED_CONTENT_TYPE)],
        body,
    )
        .into_response()
}

fn json_response(status: StatusCode, v: Value) -> axum::response::Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        format!("{v}\n"),
    )
        .into_response()
}

/// The admin routes, and `pages` (the console, built by the binary) beside them, all behind
/// the admin token where `[admin]` and `[auth]` ask for one.
pub fn router(state: AdminState, pages: Option<Router>) -> Router {
    let routes = Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .route("/v1/budgets", get(budgets))
        .route("/v1/archive/flush", post(flush))
        .route("/v1/archive/buffered", get(buffered))
        .with_state(state.clone());
    let routes = match pages {
        Some(p) => routes.merge(p),
        None => routes,
    };
    guarded(routes, state.access, state.metrics)
}

/// Who may get in, and where refusals are counted.
#[derive(Clone)]
struct Guard {
    access: SharedAdminAccess,
    metrics: Arc<Metrics>,
}

/// The admin access, replaced on SIGHUP.
pub type SharedAdminAccess = Arc<std::sync::RwLock<Arc<crate::receive::auth::AdminAccess>>>;

/// `routes` behind the admin access: each admitted request carries its
/// [`AdminGrant`](crate::receive::auth::AdminGrant) as an extension (what the console may
/// show it); a refused one gets 401, or on the console a redirect to its login page.
pub fn guarded(routes: Router, access: SharedAdminAccess, metrics: Arc<Metrics>) -> Router {
    routes.layer(axum::middleware::from_fn_with_state(
        Guard { access, metrics },
        admit,
    ))
}

/// Answers 401 to a request the admin access does not let in (nothing of it is read).
async fn admit(
    State(s): State<Guard>,
    mut req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let access = Arc::clone(&s.access.read().unwrap_or_else(PoisonError::into_inner));
    let path = req.uri().path().to_string();
    match access.admit(&path, req.headers()) {
        Ok(grant) => {
            req.extensions_mut().insert(grant);
            next.run(req).await
        }
        Err(why) if crate::receive::auth::is_console(&path) => {
            s.metrics.auth_refused_on("admin", why.as_str());
            (
                StatusCode::SEE_OTHER,
                [(header::LOCATION, "/ui/login")],
                "sign in at /ui/login\n",
            )
                .into_response()
        }
        Err(why) => {
            s.metrics.auth_refused_on("admin", why.as_str());
            let mut resp = json_response(
                StatusCode::UNAUTHORIZED,
                json!({"error": why.to_string().replace("<token>", "<admin token>")}),
            );
            resp.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Bearer realm=\"toolwatch admin\""),
            );
            resp
        }
    }
}

async fn readyz(State(s): State<AdminState>) -> impl IntoResponse {
    if s.metrics.is_ready() {
        (StatusCode::OK, "ready\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
    }
}

async fn metrics_text(State(s): State<AdminState>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, OPENMETRICS)], s.metrics.render())
}

/// `?tenant=T`.
#[derive(Debug, Deserialize)]
struct BudgetQuery {
    tenant: Option<String>,
}

async fn budgets(
    State(s): State<AdminState>,
    Query(q): Query<BudgetQuery>,
) -> axum::response::Response {
    match budget_reports(Arc::clone(&s.budgets), vec![q.tenant]).await {
        Some(mut v) if !v.is_empty() => json_response(StatusCode::OK, v.swap_remove(0)),
        _ => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "budget state unavailable\n",
        )
            .into_response(),
    }
}

/// [`budget_report`] for each of `tenants` (`None`: every tenant with usage), read off the
/// async workers (the evaluator's lock is shared with the budget thread); `None` if the
/// state could not be read.
pub async fn budget_reports(
    evaluator: SharedEvaluator,
    tenants: Vec<Option<String>>,
) -> Option<Vec<Value>> {
    tokio::task::spawn_blocking(move || {
        let mut e = evaluator.lock().unwrap_or_else(PoisonError::into_inner);
        let now = crate::clock::now_ns();
        tenants
            .iter()
            .map(|t| budget_report(&mut e, t.as_deref(), now))
            .collect()
    })
    .await
    .ok()
}

/// Usage and limits, by tenant: every tenant with usage, or the one asked for (with its
/// limits even when it has used nothing yet).
pub fn budget_report(e: &mut BudgetEvaluator, tenant: Option<&str>, now_ns: i64) -> Value {
    let mut by_tenant: BTreeMap<String, Vec<BudgetUsage>> = BTreeMap::new();
    if let Some(t) = tenant {
        by_tenant.insert(t.to_string(), Vec::new());
    }
    // Every request of one tenant; across tenants only the requests with an active alarm.
    for (t, u) in e.usage(tenant, tenant.is_some(), now_ns) {
        by_tenant.entry(t).or_default().push(u);
    }
    let config = e.config();
    let tenants: Vec<Value> = by_tenant
        .into_iter()
        .map(|(t, usage)| {
            json!({
                "tenant": t,
                "warning_ratio": config.warning_ratio_for(&t),
                "limits": {
                    "request": config.request_for(&t),
                    "tenant": config.tenant_for(&t),
                    "principal": config.principal_for(&t),
                },
                "usage": usage,
            })
        })
        .collect();
    json!({
        "time_unix_nano": now_ns,
        "warning_ratio": config.warning_ratio,
        "tenants": tenants,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt;

    fn state() -> AdminState {
        let e = BudgetEvaluator::new(Default::default(), Default::default());
        AdminState {
            metrics: Arc::new(Metrics::new()),
            budgets: Arc::new(std::sync::Mutex::new(e)),
            flush: None,
            access: Arc::default(),
        }
    }

    async fn buffered_from(peer: &str) -> (StatusCode, String) {
        let mut req = Request::get("/v1/archive/buffered")
            .body(Body::empty())
            .expect("request");
        let addr: std::net::SocketAddr = peer.parse().expect("addr");
        req.extensions_mut()
            .insert(ConnectInfo(crate::receive::tls::Peer {
                addr,
                client_names: Arc::from(Vec::new()),
            }));
        let resp = router(state(), None).oneshot(req).await.expect("answer");
        let status = resp.status();
        let body = axum::body::to_bytes(resp.into_body(), 1 << 20)
            .await
            .expect("body");
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test]
    async fn buffered_rows_go_to_local_readers_only() {
        for peer in ["192.0.2.7:5000", "[2001:db8::1]:5000", "10.0.0.1:1"] {
            let (status, body) = buffered_from(peer).await;
            assert_eq!(status, StatusCode::FORBIDDEN, "{peer}");
            assert!(body.contains("this host only"), "{body}");
        }
        // A local caller passes the check (and meets a daemon without an archive here).
        for peer in ["127.0.0.1:5000", "[::1]:5000"] {
            let (status, body) = buffered_from(peer).await;
            assert_eq!(status, StatusCode::NOT_FOUND, "{peer}: {body}");
        }
    }
}
