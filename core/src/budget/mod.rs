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
//! OTLP log records ([`record`]), alarms as rows of the `alarms` table ([`rows`]) and the
//! saved window state ([`state`]).

pub mod config;
pub mod deliver;
pub mod digest;
pub mod evaluate;
pub mod record;
pub mod rows;
pub mod state;
pub mod window;

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::archive::Archive;
use crate::clock::now_ns;
use crate::metrics::{Metrics, Spend};
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

/// Where alarms are journalled for the export: the journal's writer, and the runtime its
/// `append` runs on (the budget stage is a plain thread).
pub struct AlarmJournal {
    /// The journal writer.
    pub writer: crate::journal::writer::JournalWriter,
    /// The runtime.
    pub runtime: tokio::runtime::Handle,
}

impl AlarmJournal {
    /// Journals alarms (budget alarms or findings) as OTLP log records for the export; a
    /// failure is counted and logged, never waited out.
    pub fn append(&self, alarms: &[Alarm], metrics: &Metrics) {
        use prost::Message;
        let request = record::export_request(alarms).encode_to_vec();
        let payload = crate::journal::codec::encode_alarms(&request);
        if let Err(e) = self.runtime.block_on(self.writer.append(payload)) {
            metrics.budget.alarm_export_dropped(alarms.len());
            tracing::warn!(error = %e, alarms = alarms.len(), "alarms not journalled for the export");
        }
    }
}

/// The budget stage as a journal consumer. Window state is saved together with the first
/// record it does not include, only while every alarm raised so far is in a completed file; a
/// restart skips the records the saved windows include and replays the rest.
pub struct BudgetConsumer {
    stage: BudgetStage,
    /// Records before this are counted in the restored windows.
    skip_before: u64,
    /// Appends alarm log records to the journal for the export (none without endpoints).
    export: Option<AlarmJournal>,
    totals: BudgetTotals,
    save_every: Duration,
    last_tick: Instant,
    last_gauges: Instant,
    last_save: Instant,
}

impl BudgetConsumer {
    /// The stage, skipping records before `skip_before`; alarms are journalled for the
    /// export when `export` is given.
    pub fn new(
        stage: BudgetStage,
        skip_before: u64,
        export: Option<AlarmJournal>,
    ) -> BudgetConsumer {
        let save_every = lock(&stage.evaluator).config().save_interval.0;
        let now = Instant::now();
        BudgetConsumer {
            stage,
            skip_before,
            export,
            totals: BudgetTotals::default(),
            save_every,
            last_tick: now,
            last_gauges: now,
            last_save: now,
        }
    }

    /// Puts a reloaded configuration in force before journal record `seq`, and raises what
    /// that changes.
    fn apply_reload(&mut self, seq: Option<u64>) {
        let alarms = {
            let mut e = lock(&self.stage.evaluator);
            let Some(config) = e.take_pending() else {
                return;
            };
            e.reconfigure(config, now_ns())
        };
        tracing::info!(
            first_record_under_new_budgets = seq,
            alarms = alarms.len(),
            "SIGHUP: budgets reloaded (usage so far kept)"
        );
        self.raise(&alarms);
    }

    fn raise(&mut self, alarms: &[Alarm]) {
        if alarms.is_empty() {
            return;
        }
        raise(&mut self.stage, alarms, &mut self.totals);
        if let Some(export) = &self.export {
            export.append(alarms, &self.stage.metrics);
        }
    }
}

impl crate::journal::consume::Consumer for BudgetConsumer {
    type Totals = BudgetTotals;

    fn record(&mut self, seq: u64, entry: &std::sync::Arc<crate::journal::codec::JournalEntry>) {
        let crate::journal::codec::JournalEntry::Events(batch) = &**entry else {
            return;
        };
        if seq < self.skip_before {
            return;
        }
        self.apply_reload(Some(seq));
        let alarms = lock(&self.stage.evaluator).observe(batch, now_ns());
        self.raise(&alarms);
    }

    fn flush_due_in(&self) -> Option<std::time::Duration> {
        self.stage.archive.flush_due_in(Instant::now())
    }

    fn tick(&mut self, next_seq: u64, head: &crate::journal::head::JournalHead) -> u64 {
        self.apply_reload(Some(next_seq));
        let now = Instant::now();
        if now.duration_since(self.last_tick) >= TICK {
            self.last_tick = now;
            let alarms = lock(&self.stage.evaluator).tick(now_ns());
            self.raise(&alarms);
        }
        // Alarms come from no journal record, so the archive's tick never writes them out for
        // journal pressure: what holds the journal here is the saved state (below).
        let level = head.pressure();
        let pressure = level != crate::journal::head::Pressure::None;
        self.stage.archive.tick(now, next_seq, level);
        if now.duration_since(self.last_gauges) >= GAUGES_EVERY {
            self.last_gauges = now;
            refresh_metrics(&self.stage);
        }
        // Saved only while no alarm waits in an open file: a restart replays from here, and
        // an alarm raised before it must already be durable. When the journal fills up, the
        // alarm files are completed early so the stage can save and let go of it.
        if pressure
            && self.stage.archive.open_files() > 0
            && now.duration_since(self.last_save) >= self.save_every
        {
            self.stage.archive.complete_all();
        }
        let settled = self.stage.archive.open_files() == 0;
        if settled && now.duration_since(self.last_save) >= self.save_every {
            self.last_save = now;
            let next = next_seq.max(self.skip_before);
            if save(&self.stage, next) {
                return next;
            }
        }
        0
    }

    fn finish(mut self, next_seq: u64) -> (u64, BudgetTotals) {
        // Request usage is not kept across a restart: end their episodes now, so every alarm
        // in the archive and at the webhooks has its resolution.
        let alarms = lock(&self.stage.evaluator).resolve_requests(now_ns());
        self.raise(&alarms);
        refresh_metrics(&self.stage);
        // Alarms durable first: the saved state says they need not be raised again.
        let closed = self.stage.archive.close();
        let next = next_seq.max(self.skip_before);
        let saved = save(&self.stage, next);
        self.totals.alarm_rows = closed.alarm_rows;
        self.totals.files = closed.files;
        (if saved { next } else { 0 }, self.totals)
    }
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
    stage.archive.append_rows(alarms);
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
        let spent = Spend {
            input_tokens: t.input_tokens,
            output_tokens: t.output_tokens,
            cost_usd: t.cost_usd,
            model_turns: t.model_turns,
        };
        let tools = t.tool_calls.iter().map(|(tool, n)| (tool.as_str(), *n));
        stage.metrics.budget.spend(tenant, spent, tools);
    }
}

/// Saves the windows as of journal record `next_record`; false if that failed.
fn save(stage: &BudgetStage, next_record: u64) -> bool {
    let saved = lock(&stage.evaluator).saved_windows();
    match state::save(&stage.state_file, &saved, next_record) {
        Ok(()) => true,
        Err(e) => {
            tracing::error!(error = %e, "cannot save budget window state");
            false
        }
    }
}
