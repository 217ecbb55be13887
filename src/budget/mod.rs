//! Budget: limits on what requests, tenants and principals spend, evaluated as spans arrive.
//!
//! Owns `alarms/` in the archive and `state/budget-windows.json`. Promises: every protected
//! batch the archive takes is evaluated on arrival, so an alarm fires while the request that
//! crosses a budget is still running; each (scope, budget, level) fires once per episode and
//! resolves once; every alarm goes to the `alarms` table, to `/metrics`, and to each webhook
//! target's queue without waiting on it; tenant and principal windows survive a restart.
//!
//! Parts: the `[budget]` configuration ([`config`]), rolling windows over event time
//! ([`window`]), the canonical digest of a tool call's arguments ([`digest`]), the streaming
//! evaluator ([`evaluate`]), delivery to webhooks and Alertmanager ([`deliver`]), alarms as
//! OTLP log records ([`record`]) and the saved window state ([`state`]).

pub mod config;
pub mod deliver;
pub mod digest;
pub mod evaluate;
pub mod record;
pub mod state;
pub mod window;

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::archive::Archive;
use crate::event::EventBatch;
use crate::metrics::Metrics;
use deliver::Delivery;
use evaluate::{Alarm, BudgetEvaluator};

/// How often idle requests and windows are re-evaluated.
const TICK: Duration = Duration::from_millis(250);
/// How often the usage gauges are refreshed.
const GAUGES_EVERY: Duration = Duration::from_secs(1);

/// The evaluator, shared with the admin server's `GET /v1/budgets`.
pub type SharedEvaluator = Arc<Mutex<BudgetEvaluator>>;

/// What the budget stage did, reported when it stops.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BudgetTotals {
    /// Alarms and resolutions raised.
    pub alarms: u64,
    /// Alarm rows in completed archive files.
    pub alarm_rows: u64,
    /// Completed `alarms` files.
    pub files: u64,
}

/// Wall-clock time in ns since the epoch.
pub fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

/// Everything the budget thread needs.
pub struct BudgetStage {
    /// The evaluator (restored from saved state already).
    pub evaluator: SharedEvaluator,
    /// Writes the `alarms` table.
    pub archive: Archive,
    /// Webhook targets.
    pub delivery: Delivery,
    /// Where window state is saved.
    pub state_file: PathBuf,
    /// Metrics.
    pub metrics: Arc<Metrics>,
}

/// Runs the budget stage on its own thread until every sender of `rx` is gone; then saves the
/// window state and completes the alarm files.
pub fn spawn(
    stage: BudgetStage,
    rx: std::sync::mpsc::Receiver<Arc<EventBatch>>,
) -> std::io::Result<std::thread::JoinHandle<BudgetTotals>> {
    std::thread::Builder::new()
        .name("toolwatch-budget".into())
        .spawn(move || run(stage, rx))
}

fn run(mut stage: BudgetStage, rx: std::sync::mpsc::Receiver<Arc<EventBatch>>) -> BudgetTotals {
    let mut totals = BudgetTotals::default();
    let save_every = lock(&stage.evaluator).config().save_interval.0;
    let mut last_tick = Instant::now();
    let mut last_gauges = Instant::now();
    let mut last_save = Instant::now();
    loop {
        match rx.recv_timeout(TICK) {
            Ok(batch) => {
                let alarms = lock(&stage.evaluator).observe(&batch, now_ns());
                raise(&mut stage, &alarms, &mut totals);
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
        }
        let now = Instant::now();
        if now.duration_since(last_tick) >= TICK {
            last_tick = now;
            let alarms = lock(&stage.evaluator).tick(now_ns());
            raise(&mut stage, &alarms, &mut totals);
            stage.archive.complete_due(now);
        }
        if now.duration_since(last_gauges) >= GAUGES_EVERY {
            last_gauges = now;
            refresh_metrics(&stage);
        }
        if now.duration_since(last_save) >= save_every {
            last_save = now;
            save(&stage);
        }
    }
    // Request usage is not kept across a restart: end their episodes now, so every alarm in
    // the archive and at the webhooks has its resolution.
    let alarms = lock(&stage.evaluator).resolve_requests(now_ns());
    raise(&mut stage, &alarms, &mut totals);
    refresh_metrics(&stage);
    save(&stage);
    let closed = stage.archive.close();
    totals.alarm_rows = closed.alarm_rows;
    totals.files = closed.files;
    totals
}

fn lock(e: &SharedEvaluator) -> std::sync::MutexGuard<'_, BudgetEvaluator> {
    // A panic elsewhere while holding the lock leaves counters that are still counters.
    e.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Sends alarms to the archive, the metrics and the webhook queues.
fn raise(stage: &mut BudgetStage, alarms: &[Alarm], totals: &mut BudgetTotals) {
    if alarms.is_empty() {
        return;
    }
    for a in alarms {
        stage
            .metrics
            .budget
            .alarm(&a.tenant, a.scope.as_str(), &a.budget, a.level.as_str());
        // Debug, not info: every alarm is in the archive, the metrics and the webhooks, and an
        // alarm storm must not turn into a log storm.
        tracing::debug!(
            alarm_id = %a.alarm_id,
            scope = a.scope.as_str(),
            budget = %a.budget,
            level = a.level.as_str(),
            reason = %a.reason,
            "budget alarm"
        );
    }
    totals.alarms += alarms.len() as u64;
    stage.archive.append_alarms(alarms);
    stage.delivery.offer(alarms);
}

/// Usage and limit gauges, and the spend counters.
fn refresh_metrics(stage: &BudgetStage) {
    let (rows, tracked, spend, evicted) = {
        let mut e = lock(&stage.evaluator);
        let rows = e.highest_usage(now_ns());
        (
            rows,
            e.requests_tracked(),
            e.take_totals(),
            e.evicted_requests(),
        )
    };
    stage.metrics.budget.set_usage(&rows, tracked);
    stage.metrics.budget.set_evicted_total(evicted);
    for (tenant, t) in &spend {
        stage.metrics.budget.spend(tenant, t);
    }
}

fn save(stage: &BudgetStage) {
    let saved = lock(&stage.evaluator).saved_windows();
    if let Err(e) = state::save(&stage.state_file, &saved) {
        tracing::error!(error = %e, "cannot save budget window state");
    }
}
