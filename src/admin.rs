//! Admin HTTP: `/healthz`, `/readyz`, `/metrics` (Prometheus text format),
//! `GET /v1/budgets[?tenant=T]` (current usage and limits as JSON) and
//! `GET /v1/live/{table}` (the rows the archive holds in memory, with the completed files;
//! see [`live_ipc`]).
//!
//! `/healthz` answers 200 while the process serves at all; `/readyz` answers 200 only while
//! the daemon accepts data (not during start-up or shutdown), so a load balancer can drain it.

use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;

use std::collections::BTreeMap;
use std::sync::PoisonError;

use serde::Deserialize;
use serde_json::{json, Value};

use crate::archive::live::{LiveSnapshot, LiveTables};
use crate::archive::partition::Table;
use crate::budget::evaluate::{BudgetEvaluator, BudgetUsage};
use crate::budget::SharedEvaluator;
use crate::metrics::Metrics;

/// Content type of an Arrow IPC stream.
pub const ARROW_STREAM: &str = "application/vnd.apache.arrow.stream";
/// Schema metadata of `/v1/live/{table}`: the completed files (JSON array of paths relative to
/// the table's folder) at the moment of the rows.
pub const META_FILES: &str = "toolwatch.completed_files";
/// Schema metadata of `/v1/live/{table}`: the daemon's data directory (canonical).
pub const META_DATA_DIR: &str = "toolwatch.data_dir";
/// Schema metadata of `/v1/live/{table}`: the writer's publication counter.
pub const META_GENERATION: &str = "toolwatch.generation";

/// Content type of the exposition `prometheus-client` writes.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// What the admin handlers read.
#[derive(Clone)]
pub struct AdminState {
    /// Metrics and readiness.
    pub metrics: Arc<Metrics>,
    /// The budget evaluator.
    pub budgets: SharedEvaluator,
    /// What the archive writers hold and have not completed into files.
    pub live: LiveTables,
}

/// The admin routes.
pub fn router(state: AdminState) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .route("/v1/budgets", get(budgets))
        .route("/v1/live/{table}", get(live))
        .with_state(state)
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
    let evaluator = Arc::clone(&s.budgets);
    let tenant = q.tenant;
    // The evaluator's lock is shared with the budget thread: take it off the async workers.
    let body = tokio::task::spawn_blocking(move || {
        let mut e = evaluator.lock().unwrap_or_else(PoisonError::into_inner);
        budget_report(&mut e, tenant.as_deref(), crate::budget::now_ns())
    })
    .await;
    match body {
        Ok(v) => (
            [(header::CONTENT_TYPE, "application/json")],
            format!("{v}\n"),
        )
            .into_response(),
        Err(_) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "budget state unavailable\n",
        )
            .into_response(),
    }
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

async fn live(
    State(s): State<AdminState>,
    axum::extract::Path(table): axum::extract::Path<String>,
) -> axum::response::Response {
    let Some(table) = crate::query::TABLES
        .iter()
        .copied()
        .find(|t| t.as_str() == table)
    else {
        return (
            StatusCode::NOT_FOUND,
            "unknown table (spans, logs, requests or alarms)\n",
        )
            .into_response();
    };
    let Some(cell) = s.live.cell(table).cloned() else {
        return (StatusCode::NOT_FOUND, "no archive writer for this table\n").into_response();
    };
    // Listing the files is file-system work: off the async workers.
    let body = tokio::task::spawn_blocking(move || {
        let snapshot = cell.snapshot(table).map_err(|e| e.to_string())?;
        live_ipc(&snapshot).map_err(|e| e.to_string())
    })
    .await;
    match body {
        Ok(Ok(bytes)) => ([(header::CONTENT_TYPE, ARROW_STREAM)], bytes).into_response(),
        Ok(Err(e)) => {
            tracing::warn!(table = table.as_str(), error = %e, "live rows unavailable");
            (StatusCode::INTERNAL_SERVER_ERROR, "live rows unavailable\n").into_response()
        }
        Err(_) => (StatusCode::INTERNAL_SERVER_ERROR, "live rows unavailable\n").into_response(),
    }
}

/// The table's schema with the partition columns `tenant`, `date` and `hour` (as a reader of
/// the partition folders sees them) appended.
pub fn live_schema(table: Table) -> arrow::datatypes::SchemaRef {
    use arrow::datatypes::{DataType, Field, Schema};
    let schema = crate::archive::table_schema(table);
    let mut fields: Vec<_> = schema.fields().iter().cloned().collect();
    for name in ["tenant", "date", "hour"] {
        fields.push(Arc::new(Field::new(name, DataType::Utf8, false)));
    }
    Arc::new(Schema::new(fields))
}

/// An Arrow IPC stream of `snapshot`'s rows of its table, in [`live_schema`]; the schema's
/// metadata names the completed files at that moment ([`META_FILES`]), so a reader that
/// reads exactly those files and these rows sees every row once.
pub fn live_ipc(snapshot: &LiveSnapshot) -> Result<Vec<u8>, arrow::error::ArrowError> {
    use arrow::array::{ArrayRef, StringArray};
    let base = live_schema(snapshot.table);
    let mut metadata = std::collections::HashMap::new();
    metadata.insert(
        META_FILES.to_string(),
        serde_json::to_string(&snapshot.files).unwrap_or_else(|_| "[]".to_string()),
    );
    metadata.insert(
        META_DATA_DIR.to_string(),
        snapshot.data_dir.display().to_string(),
    );
    metadata.insert(
        META_GENERATION.to_string(),
        snapshot.rows.generation.to_string(),
    );
    let schema = Arc::new(base.as_ref().clone().with_metadata(metadata));
    let mut out = Vec::new();
    let mut writer = arrow::ipc::writer::StreamWriter::try_new(&mut out, &schema)?;
    for part in snapshot
        .rows
        .partitions
        .iter()
        .filter(|p| p.table == snapshot.table)
    {
        for batch in &part.batches {
            let n = batch.num_rows();
            let mut columns: Vec<ArrayRef> = batch.columns().to_vec();
            for v in [&part.tenant, &part.date, &part.hour] {
                columns.push(Arc::new(StringArray::from_iter_values(
                    std::iter::repeat_n(v.as_str(), n),
                )));
            }
            let with_parts =
                arrow::record_batch::RecordBatch::try_new(Arc::clone(&schema), columns)?;
            writer.write(&with_parts)?;
        }
    }
    writer.finish()?;
    drop(writer);
    Ok(out)
}
