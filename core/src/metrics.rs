//! The daemon's own Prometheus metrics.
//!
//! Label values are fixed sets (transport, signal and reject reason spelled in this file; table
//! names and journal refusal reasons handed in as `&'static str` by the archive and the
//! journal, which own them), rule ids from the configuration, configured webhook target and
//! export endpoint names, and, for budgets, the three payload values the design allows:
//! tenant, tool name and budget name (after `protect`, so a secret in them is already
//! redacted), each capped in how many distinct series it can make. This module depends on no
//! stage: stages report plain numbers and labels (or the small structs defined here).

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::clock::now_ns;

/// OTLP transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// OTLP/gRPC.
    Grpc,
    /// OTLP/HTTP.
    Http,
}

impl Transport {
    /// Label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Grpc => "grpc",
            Transport::Http => "http",
        }
    }
}

/// OTLP signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// Traces.
    Traces,
    /// Logs.
    Logs,
}

impl Signal {
    /// Label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Signal::Traces => "traces",
            Signal::Logs => "logs",
        }
    }
}

/// Why a request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RejectReason {
    /// Not valid protobuf, JSON or gzip.
    Malformed,
    /// Decoded, but ids or timestamps are invalid.
    InvalidData,
    /// Over the size limit.
    TooLarge,
    /// Unsupported content type.
    UnsupportedMediaType,
    /// Unsupported content or gRPC encoding.
    UnsupportedEncoding,
    /// The pipeline is full.
    Overloaded,
    /// The intake is over its share of `pipeline.memory_limit`.
    Memory,
    /// The daemon is stopping.
    ShuttingDown,
    /// The journal cannot be written.
    StorageFailed,
    /// No known credential (see `toolwatch_auth_refused_total` for why).
    Unauthenticated,
    /// A tenant or sender over its rate (`toolwatch_rate_limited_total`).
    RateLimited,
    /// A span or record over a structural limit (`toolwatch_structure_refused_total`).
    StructureLimit,
}

impl RejectReason {
    /// Label value.
    pub fn as_str(self) -> &'static str {
        match self {
            RejectReason::Malformed => "malformed",
            RejectReason::InvalidData => "invalid_data",
            RejectReason::TooLarge => "too_large",
            RejectReason::UnsupportedMediaType => "unsupported_media_type",
            RejectReason::UnsupportedEncoding => "unsupported_encoding",
            RejectReason::Overloaded => "overloaded",
            RejectReason::Memory => "memory",
            RejectReason::ShuttingDown => "shutting_down",
            RejectReason::StorageFailed => "storage_failed",
            RejectReason::Unauthenticated => "unauthenticated",
            RejectReason::RateLimited => "rate_limited",
            RejectReason::StructureLimit => "structure_limit",
        }
    }
}

type Labels2 = [(&'static str, &'static str); 2];
type Labels3 = [(&'static str, &'static str); 3];
type Labels1 = [(&'static str, &'static str); 1];

/// Seconds, by one label, in [`flush_buckets`].
type FlushSeconds = Family<Labels1, Histogram, fn() -> Histogram>;

/// Buckets for a reader's flush: from a hundredth of a second to the flush timeout.
fn flush_buckets() -> Histogram {
    Histogram::new([0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0])
}

/// All metrics, registered once at start.
pub struct Metrics {
    registry: Registry,
    ready: AtomicBool,
    /// Data is being refused until this time (ns since the epoch).
    refusing_until: std::sync::atomic::AtomicI64,
    requests: Family<Labels2, Counter>,
    rejected: Family<Labels3, Counter>,
    auth_refused: Family<Labels2, Counter>,
    tls_failed: Family<Labels2, Counter>,
    rate_limited: Family<Owned2, Counter>,
    structure_refused: Family<Owned2, Counter>,
    received_bytes: Family<Labels2, Counter>,
    received_items: Family<Labels1, Counter>,
    archive_rows: Family<Labels1, Counter>,
    archive_files: Family<Labels1, Counter>,
    archive_bytes: Family<Labels1, Counter>,
    archive_failed_rows: Family<Labels1, Counter>,
    archive_abandoned: Family<Labels1, Counter>,
    manifest_failed: Counter,
    /// The archive's uploads to object storage (see `archive::store::upload`).
    uploaded_files: Counter,
    uploaded_bytes: Counter,
    uploaded_segments: Counter,
    upload_failures: Family<Labels1, Counter>,
    upload_pending_bytes: Gauge,
    upload_stuck: Gauge,
    remote_deleted: Counter,
    open_files: Family<Labels1, Gauge>,
    archive_buffered: Gauge,
    /// The pipeline's memory budget, read at each scrape, and what it shows.
    memory: std::sync::OnceLock<std::sync::Arc<crate::memory::MemoryBudget>>,
    memory_held: Family<Labels1, Gauge>,
    memory_limit: Gauge,
    memory_pool: Gauge,
    memory_resident: Gauge,
    /// Compactions by table; files and bytes merged (`in`) and written (`out`).
    compactions: Family<Labels1, Counter>,
    /// Readers' flushes: from the request to every writer done (by outcome), and each
    /// writer's writing out (by writer).
    reader_flush: FlushSeconds,
    reader_flush_write: FlushSeconds,
    reader_copy: FlushSeconds,
    reader_copy_refused: Counter,
    compaction_files: Family<Labels2, Counter>,
    compaction_bytes: Family<Labels2, Counter>,
    summaries: Family<Labels1, Counter>,
    findings: Family<Owned3, Counter>,
    assemble_duplicates: Counter,
    assemble_requests: Gauge,
    assemble_spans: Gauge,
    redactions: Family<[(&'static str, String); 1], Counter>,
    learned_values: Gauge,
    learned_bytes: Gauge,
    learned_forgotten: Family<Labels1, Counter>,
    /// Tenancy metrics.
    pub tenancy: TenancyMetrics,
    quarantined: Family<Labels2, Counter>,
    /// Budget usage, alarms and spend.
    pub budget: BudgetMetrics,
    /// The journal and its consumers.
    pub journal: JournalMetrics,
    /// Forwarding to downstream OTLP endpoints.
    pub export: ExportMetrics,
}

/// The journal's state for [`JournalMetrics::observe`] (numbers, so the metrics need not
/// know the journal).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JournalState {
    /// Bytes on disk.
    pub disk_bytes: u64,
    /// The configured bound.
    pub max_bytes: u64,
    /// Records made durable since start.
    pub records: u64,
    /// Commits since start.
    pub commits: u64,
    /// The first sequence number not yet durable.
    pub committed: u64,
    /// Each consumer's checkpoint.
    pub positions: Vec<(String, u64)>,
}

/// The journal's metrics: size, commits, refusals, each consumer's lag, recovery.
#[derive(Default)]
pub struct JournalMetrics {
    bytes: Gauge,
    max_bytes: Gauge,
    records: Counter,
    commits: Counter,
    refused: Family<Labels1, Counter>,
    lag: Family<Owned1, Gauge>,
    cut_bytes: Counter,
    undecodable: Family<Owned1, Counter>,
    consumer_records: Family<[(&'static str, String); 2], Counter>,
    failed_consumers: Family<Owned1, Gauge>,
    repeated_spans: Counter,
    replayed_rows: Counter,
}

impl JournalMetrics {
    fn register(&self, r: &mut Registry) {
        r.register(
            "journal_bytes",
            "Bytes of the write-ahead journal on disk",
            self.bytes.clone(),
        );
        r.register(
            "journal_max_bytes",
            "The journal's configured bound; receivers refuse data beyond it",
            self.max_bytes.clone(),
        );
        r.register(
            "journal_records",
            "Records (accepted batches and alarm batches) made durable in the journal",
            self.records.clone(),
        );
        r.register(
            "journal_commits",
            "Journal commits (each one fsync)",
            self.commits.clone(),
        );
        r.register(
            "journal_refused_batches",
            "Batches the journal refused, by reason: full (a consumer is behind), busy (writer queue full), failed (write error), closed",
            self.refused.clone(),
        );
        r.register(
            "journal_consumer_lag_records",
            "Journal records a consumer has not yet made durable on its side, by consumer",
            self.lag.clone(),
        );
        r.register(
            "journal_recovered_cut_bytes",
            "Bytes of a torn or corrupt journal tail cut off at start",
            self.cut_bytes.clone(),
        );
        r.register(
            "journal_undecodable_records",
            "Journal records a consumer could not decode and skipped, by consumer",
            self.undecodable.clone(),
        );
        r.register(
            "journal_consumer_records",
            "Journal records a consumer took, by consumer and source: published (the intake's batch as journalled, nothing decoded), shared (decoded by another consumer), decoded (decoded by this one)",
            self.consumer_records.clone(),
        );
        r.register(
            "journal_consumer_failed",
            "1 when a consumer stopped reading the journal after an error (the journal no longer shrinks; see the daemon's log), by consumer",
            self.failed_consumers.clone(),
        );
        r.register(
            "archive_repeated_spans",
            "Spans not archived because the same tenant, trace and span id was archived recently (a client resending)",
            self.repeated_spans.clone(),
        );
        r.register(
            "archive_replayed_rows",
            "Rows replayed from the journal after a restart and skipped because a completed file already held them",
            self.replayed_rows.clone(),
        );
    }

    /// Counts a refused append, by the journal's reason (`full`, `busy`, `failed`, `closed`).
    pub fn refused(&self, reason: &'static str) {
        self.refused.get_or_create(&[("reason", reason)]).inc();
    }

    /// Size, totals and lags as the journal's head reports them.
    pub fn observe(&self, head: JournalState) {
        let to_i64 = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        self.bytes.set(to_i64(head.disk_bytes));
        self.max_bytes.set(to_i64(head.max_bytes));
        self.records
            .inc_by(head.records.saturating_sub(self.records.get()));
        self.commits
            .inc_by(head.commits.saturating_sub(self.commits.get()));
        for (consumer, position) in head.positions {
            self.lag
                .get_or_create(&[("consumer", consumer)])
                .set(to_i64(head.committed.saturating_sub(position)));
        }
    }

    /// Counts spans dropped as sent again.
    pub fn repeated_spans(&self, n: u64) {
        self.repeated_spans.inc_by(n);
    }

    /// Counts rows replayed and skipped as already archived.
    pub fn replayed_rows(&self, n: u64) {
        self.replayed_rows.inc_by(n);
    }

    /// Counts a damaged tail cut at start.
    pub fn cut(&self, bytes: u64) {
        self.cut_bytes.inc_by(bytes);
    }

    /// Marks a consumer that stopped after a read error.
    pub fn consumer_failed(&self, consumer: &str) {
        self.failed_consumers
            .get_or_create(&[("consumer", consumer.to_string())])
            .set(1);
    }

    /// The counters of the records `consumer` takes from each of `sources` (`published`,
    /// `shared`, `decoded`), looked up once: a consumer counts every record it reads.
    pub fn consumer_records<const N: usize>(
        &self,
        consumer: &str,
        sources: [&'static str; N],
    ) -> [Counter; N] {
        sources.map(|source| {
            self.consumer_records
                .get_or_create(&[
                    ("consumer", consumer.to_string()),
                    ("source", source.to_string()),
                ])
                .clone()
        })
    }

    /// Counts a record `consumer` could not decode.
    pub fn undecodable(&self, consumer: &str) {
        self.undecodable
            .get_or_create(&[("consumer", consumer.to_string())])
            .inc();
    }
}

/// Tenancy: items filed under their trace's tenant (see the `tenancy` module). Labels are
/// consumer names and fixed reasons.
#[derive(Default)]
pub struct TenancyMetrics {
    conflicts: Counter,
    mismatched: Family<Owned1, Counter>,
    held: Family<Owned1, Gauge>,
    unresolved: Family<[(&'static str, String); 2], Counter>,
}

impl TenancyMetrics {
    fn register(&self, r: &mut Registry) {
        r.register(
            "tenant_conflicts",
            "Spans and log records that named another tenant than their trace's (filed under the trace's, their claim kept in claimed_tenant)",
            self.conflicts.clone(),
        );
        r.register(
            "tenant_mismatch",
            "Spans and log records that claimed a tenant their authenticated sender may not write (filed under the sender's first tenant, the claim kept in claimed_tenant), by sender",
            self.mismatched.clone(),
        );
        r.register(
            "tenant_held_items",
            "Spans and log records a consumer holds back until their trace names its tenant, by consumer",
            self.held.clone(),
        );
        r.register(
            "tenant_unresolved_items",
            "Held spans and log records that went on under \"default\" because their trace named no tenant in time, by consumer and reason (wait, capacity, shutdown)",
            self.unresolved.clone(),
        );
    }

    /// Counts items whose claim disagreed with their trace's tenant.
    pub fn conflicts(&self, n: u64) {
        if n > 0 {
            self.conflicts.inc_by(n);
        }
    }

    /// Counts items of `sender` filed under its home tenant because of their claim.
    pub fn mismatched(&self, sender: &str, n: u64) {
        if n > 0 {
            self.mismatched
                .get_or_create(&[("sender", sender.to_string())])
                .inc_by(n);
        }
    }

    /// Items `consumer` holds now.
    pub fn set_held(&self, consumer: &str, n: usize) {
        self.held
            .get_or_create(&[("consumer", consumer.to_string())])
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// Counts items `consumer` let go without a tenant, by reason.
    pub fn unresolved(&self, consumer: &str, reason: &'static str, n: u64) {
        self.unresolved
            .get_or_create(&[
                ("consumer", consumer.to_string()),
                ("reason", reason.to_string()),
            ])
            .inc_by(n);
    }
}

type Owned1 = [(&'static str, String); 1];
type Owned2 = [(&'static str, String); 2];
type Owned3 = [(&'static str, String); 3];
type Owned4 = [(&'static str, String); 4];
type FloatGauge = Gauge<f64, AtomicU64>;

/// Distinct (tenant, tool) label pairs before further tools are counted as `_other`: a tool
/// name comes from the payload, and a label set per name must not grow without bound.
const MAX_TOOL_SERIES: usize = 10_000;

/// Distinct tenants with budget and spend series; later tenants are counted as `_other` (and
/// get no usage gauges): a tenant id is a claim in the payload.
const MAX_TENANT_SERIES: usize = 5_000;

/// What a tenant spent, for [`BudgetMetrics::spend`].
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Spend {
    /// Input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Cost in US dollars from the price table.
    pub cost_usd: f64,
    /// Model calls.
    pub model_turns: u64,
}

/// The budget stage's metrics. Labels carry only tenant, tool and budget names (and the
/// configured names of delivery targets), never other payload values.
#[derive(Default)]
pub struct BudgetMetrics {
    usage: Family<Owned3, FloatGauge>,
    limit: Family<Owned3, FloatGauge>,
    /// Usage series set by the last refresh, so series that went quiet drop to 0.
    usage_series: Mutex<HashSet<Owned3>>,
    alarms: Family<Owned4, Counter>,
    export_dropped: Counter,
    tracked: Gauge,
    tokens: Family<Owned2, Counter>,
    cost: Family<Owned1, Counter<f64, AtomicU64>>,
    turns: Family<Owned1, Counter>,
    tool_calls: Family<Owned2, Counter>,
    tool_series: Mutex<HashSet<(String, String)>>,
    tenant_series: Mutex<HashSet<String>>,
    deliveries: Family<Owned2, Counter>,
    delivery_queue: Family<Owned1, Gauge>,
    evicted: Counter,
}

impl BudgetMetrics {
    fn register(&self, registry: &mut Registry) {
        registry.register(
            "budget_usage",
            "Usage of a budget by tenant, scope and budget: a tenant's window; for scope request (principal), the highest among the tenant's active requests (principals)",
            self.usage.clone(),
        );
        registry.register(
            "budget_limit",
            "Limit of a budget by tenant, scope and budget",
            self.limit.clone(),
        );
        registry.register(
            "budget_alarms",
            "Budget alarms raised, by tenant, scope, budget and level (warning, limit, resolved)",
            self.alarms.clone(),
        );
        registry.register(
            "alarm_export_dropped",
            "Alarms not journalled for the OTLP export because the journal refused them (they are in the archive and at the webhooks)",
            self.export_dropped.clone(),
        );
        registry.register(
            "budget_evicted_requests",
            "Requests the budget stage forgot early because more than budget.max_requests were tracked (their alarms resolved)",
            self.evicted.clone(),
        );
        registry.register(
            "budget_tracked_requests",
            "Requests whose budgets are being evaluated",
            self.tracked.clone(),
        );
        registry.register(
            "tenant_tokens",
            "Model tokens by tenant and kind (input, output)",
            self.tokens.clone(),
        );
        registry.register(
            "tenant_cost_usd",
            "Cost in US dollars computed from the price table, by tenant",
            self.cost.clone(),
        );
        registry.register(
            "tenant_model_turns",
            "Model calls, by tenant",
            self.turns.clone(),
        );
        registry.register(
            "tool_calls",
            "Tool calls by tenant and tool (tools past the series limit count as _other)",
            self.tool_calls.clone(),
        );
        registry.register(
            "alarm_deliveries",
            "Alarm batches sent to a delivery target, by target and outcome (delivered, retried, failed, dropped)",
            self.deliveries.clone(),
        );
        registry.register(
            "alarm_delivery_queue",
            "Alarms waiting for a delivery target",
            self.delivery_queue.clone(),
        );
    }

    /// Alarms the journal refused for the export.
    pub fn alarm_export_dropped(&self, n: usize) {
        self.export_dropped.inc_by(n as u64);
    }

    /// Whether the tenant has series of its own (the first [`MAX_TENANT_SERIES`] tenants do).
    fn admits(&self, tenant: &str) -> bool {
        let mut seen = self
            .tenant_series
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if seen.contains(tenant) {
            return true;
        }
        seen.len() < MAX_TENANT_SERIES && seen.insert(tenant.to_string())
    }

    /// The tenant's label: itself, or `_other` past [`MAX_TENANT_SERIES`] tenants.
    pub(crate) fn tenant_label(&self, tenant: &str) -> String {
        if self.admits(tenant) {
            tenant.to_string()
        } else {
            "_other".to_string()
        }
    }

    /// An alarm was raised.
    pub fn alarm(&self, tenant: &str, scope: &str, budget: &str, level: &str) {
        self.alarms
            .get_or_create(&[
                ("tenant", self.tenant_label(tenant)),
                ("scope", scope.to_string()),
                ("budget", budget.to_string()),
                ("level", level.to_string()),
            ])
            .inc();
    }

    /// Replaces the usage and limit gauges: `rows` are (tenant, scope, budget, usage, limit).
    /// A series missing from `rows` that was set before is removed (its tenant went quiet);
    /// tenants past the series limit get none.
    pub fn set_usage(&self, rows: &[(String, &'static str, String, f64, f64)], tracked: usize) {
        let mut fresh = HashSet::with_capacity(rows.len());
        for (tenant, scope, budget, usage, limit) in rows {
            if !self.admits(tenant) {
                continue;
            }
            let labels = [
                ("tenant", tenant.clone()),
                ("scope", (*scope).to_string()),
                ("budget", budget.clone()),
            ];
            self.usage.get_or_create(&labels).set(*usage);
            self.limit.get_or_create(&labels).set(*limit);
            fresh.insert(labels);
        }
        let mut last = self
            .usage_series
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for gone in last.difference(&fresh) {
            self.usage.remove(gone);
            self.limit.remove(gone);
        }
        *last = fresh;
        self.tracked.set(tracked as i64);
    }

    /// Brings the evicted-requests counter up to the evaluator's running total.
    pub fn set_evicted_total(&self, total: u64) {
        let seen = self.evicted.get();
        if total > seen {
            self.evicted.inc_by(total - seen);
        }
    }

    /// What a tenant spent since the last call, and its tool calls by tool name.
    pub fn spend<'a>(
        &self,
        tenant: &str,
        t: Spend,
        tool_calls: impl IntoIterator<Item = (&'a str, u64)>,
    ) {
        let tenant = self.tenant_label(tenant);
        let tenant = tenant.as_str();
        let tenant_label = || [("tenant", tenant.to_string())];
        for (kind, n) in [("input", t.input_tokens), ("output", t.output_tokens)] {
            if n > 0 {
                self.tokens
                    .get_or_create(&[("tenant", tenant.to_string()), ("kind", kind.to_string())])
                    .inc_by(n);
            }
        }
        if t.cost_usd > 0.0 {
            self.cost.get_or_create(&tenant_label()).inc_by(t.cost_usd);
        }
        if t.model_turns > 0 {
            self.turns
                .get_or_create(&tenant_label())
                .inc_by(t.model_turns);
        }
        let mut series = self
            .tool_series
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for (tool, n) in tool_calls {
            let key = (tenant.to_string(), tool.to_string());
            let label = if series.contains(&key) || series.len() < MAX_TOOL_SERIES {
                series.insert(key);
                tool.to_string()
            } else {
                "_other".to_string()
            };
            self.tool_calls
                .get_or_create(&[("tenant", tenant.to_string()), ("tool", label)])
                .inc_by(n);
        }
    }

    /// A delivery outcome for a target (by its configured name).
    pub fn delivery(&self, target: &str, outcome: &'static str, n: u64) {
        self.deliveries
            .get_or_create(&[
                ("target", target.to_string()),
                ("outcome", outcome.to_string()),
            ])
            .inc_by(n);
    }

    /// Alarms waiting for a target.
    pub fn set_delivery_queue(&self, target: &str, n: usize) {
        self.delivery_queue
            .get_or_create(&[("target", target.to_string())])
            .set(n as i64);
    }
}

/// The export stage's metrics, by configured endpoint name (a bounded set from the
/// configuration, never a payload value).
#[derive(Default)]
pub struct ExportMetrics {
    items: Family<[(&'static str, String); 3], Counter>,
    requests: Family<Owned2, Counter>,
    sent_bytes: Family<Owned1, Counter>,
    lag_records: Family<Owned1, Gauge>,
    lag_seconds: Family<Owned1, FloatGauge>,
}

impl ExportMetrics {
    fn register(&self, registry: &mut Registry) {
        registry.register(
            "export_items",
            "Spans and log records forwarded to an export endpoint, by endpoint, signal and outcome (sent; failed: refused by the endpoint, whole or as a partial success)",
            self.items.clone(),
        );
        registry.register(
            "export_requests",
            "Export requests to an endpoint, by outcome (sent, failed: refused and not retried, retried: each attempt that will be tried again)",
            self.requests.clone(),
        );
        registry.register(
            "export_sent_bytes",
            "Bytes of export request bodies put on the wire, every attempt (HTTP: after compression; gRPC: the protobuf message before gRPC compression)",
            self.sent_bytes.clone(),
        );
        registry.register(
            "export_lag_records",
            "Journal records an export endpoint has still to forward",
            self.lag_records.clone(),
        );
        registry.register(
            "export_lag_seconds",
            "Age of the oldest journal record an export endpoint has still to forward",
            self.lag_seconds.clone(),
        );
    }

    /// Items of one signal that reached (`"sent"`) or were refused by (`"failed"`) an endpoint.
    pub fn items(&self, endpoint: &str, signal: Signal, outcome: &'static str, n: u64) {
        if n > 0 {
            self.items
                .get_or_create(&[
                    ("endpoint", endpoint.to_string()),
                    ("signal", signal.as_str().to_string()),
                    ("outcome", outcome.to_string()),
                ])
                .inc_by(n);
        }
    }

    /// One request's outcome: `"sent"`, `"failed"` or `"retried"`.
    pub fn request(&self, endpoint: &str, outcome: &'static str) {
        self.requests
            .get_or_create(&[
                ("endpoint", endpoint.to_string()),
                ("outcome", outcome.to_string()),
            ])
            .inc();
    }

    /// Bytes of one attempt's body.
    pub fn sent_bytes(&self, endpoint: &str, bytes: usize) {
        self.sent_bytes
            .get_or_create(&[("endpoint", endpoint.to_string())])
            .inc_by(bytes as u64);
    }

    /// How far an endpoint is behind the journal: records still to forward, and the age in
    /// seconds of the oldest of them (0 when caught up).
    pub fn set_lag(&self, endpoint: &str, records: u64, seconds: f64) {
        let l = [("endpoint", endpoint.to_string())];
        self.lag_records
            .get_or_create(&l)
            .set(i64::try_from(records).unwrap_or(i64::MAX));
        self.lag_seconds.get_or_create(&l).set(seconds);
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// Registers every metric.
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("toolwatch");
        let m = Metrics {
            registry: Registry::default(),
            ready: AtomicBool::new(false),
            refusing_until: std::sync::atomic::AtomicI64::new(0),
            requests: Family::default(),
            rejected: Family::default(),
            auth_refused: Family::default(),
            tls_failed: Family::default(),
            rate_limited: Family::default(),
            structure_refused: Family::default(),
            received_bytes: Family::default(),
            received_items: Family::default(),
            archive_rows: Family::default(),
            archive_files: Family::default(),
            archive_bytes: Family::default(),
            archive_failed_rows: Family::default(),
            archive_abandoned: Family::default(),
            manifest_failed: Counter::default(),
            uploaded_files: Counter::default(),
            uploaded_bytes: Counter::default(),
            uploaded_segments: Counter::default(),
            upload_failures: Family::default(),
            upload_pending_bytes: Gauge::default(),
            upload_stuck: Gauge::default(),
            remote_deleted: Counter::default(),
            open_files: Family::default(),
            archive_buffered: Gauge::default(),
            memory: std::sync::OnceLock::new(),
            memory_held: Family::default(),
            memory_limit: Gauge::default(),
            memory_pool: Gauge::default(),
            memory_resident: Gauge::default(),
            compactions: Family::default(),
            reader_flush: Family::new_with_constructor(flush_buckets),
            reader_flush_write: Family::new_with_constructor(flush_buckets),
            reader_copy: Family::new_with_constructor(flush_buckets),
            reader_copy_refused: Counter::default(),
            compaction_files: Family::default(),
            compaction_bytes: Family::default(),
            summaries: Family::default(),
            findings: Family::default(),
            assemble_duplicates: Counter::default(),
            assemble_requests: Gauge::default(),
            assemble_spans: Gauge::default(),
            redactions: Family::default(),
            learned_values: Gauge::default(),
            learned_bytes: Gauge::default(),
            learned_forgotten: Family::default(),
            quarantined: Family::default(),
            budget: BudgetMetrics::default(),
            journal: JournalMetrics::default(),
            export: ExportMetrics::default(),
            tenancy: TenancyMetrics::default(),
        };
        m.budget.register(&mut registry);
        m.journal.register(&mut registry);
        m.export.register(&mut registry);
        m.tenancy.register(&mut registry);
        registry.register(
            "quarantined_items",
            "Items protect could not fully examine, by signal and reason: max_depth_exceeded and unexaminable_bytes (the value was replaced, the item kept), protect_failed (the item was dropped)",
            m.quarantined.clone(),
        );
        registry.register(
            "redactions",
            "Values removed by protect, by rule id (never what was removed)",
            m.redactions.clone(),
        );
        registry.register(
            "protect_learned_values",
            "Values the tenants learned and still remove wherever they come again (never what they are)",
            m.learned_values.clone(),
        );
        registry.register(
            "protect_learned_bytes",
            "Bytes of the learned values held in memory",
            m.learned_bytes.clone(),
        );
        registry.register(
            "protect_learned_forgotten",
            "Learned values forgotten, by reason: limit (a count or byte limit) or ttl",
            m.learned_forgotten.clone(),
        );
        registry.register(
            "otlp_requests",
            "OTLP export requests accepted, by transport and signal",
            m.requests.clone(),
        );
        registry.register(
            "otlp_rejected_requests",
            "OTLP export requests refused, by transport, signal and reason",
            m.rejected.clone(),
        );
        registry.register(
            "auth_refused",
            "OTLP requests refused for their credential, by transport and reason (missing, malformed, unknown_token); the token is never recorded",
            m.auth_refused.clone(),
        );
        registry.register(
            "rate_limited",
            "OTLP requests refused because a tenant or sender was over its rate (limits.rate), by scope and name (tenants past the series limit as _other)",
            m.rate_limited.clone(),
        );
        registry.register(
            "structure_refused",
            "OTLP requests refused for a span or record over limits.structure, by limit and tenant (the sender's first tenant; unknown without one)",
            m.structure_refused.clone(),
        );
        registry.register(
            "tls_handshake_failures",
            "TLS handshakes that failed, by listener and reason (no_client_certificate, bad_certificate, protocol, timeout)",
            m.tls_failed.clone(),
        );
        registry.register(
            "otlp_received_bytes",
            "Bytes of accepted OTLP request bodies as sent (before decompression)",
            m.received_bytes.clone(),
        );
        registry.register(
            "received_items",
            "Spans and log records accepted, by signal",
            m.received_items.clone(),
        );
        registry.register(
            "archive_rows",
            "Rows in completed archive files, by table",
            m.archive_rows.clone(),
        );
        registry.register(
            "archive_files",
            "Completed archive files, by table",
            m.archive_files.clone(),
        );
        registry.register(
            "archive_bytes",
            "Bytes of completed archive files, by table",
            m.archive_bytes.clone(),
        );
        registry.register(
            "archive_failed_rows",
            "Rows that could not be written to the archive, by table",
            m.archive_failed_rows.clone(),
        );
        registry.register(
            "archive_manifest_failed_entries",
            "Completed archive files that could not be recorded in the manifest (verify reports them as extra)",
            m.manifest_failed.clone(),
        );
        registry.register(
            "archive_uploaded_files",
            "Archive files uploaded to object storage (storage.url)",
            m.uploaded_files.clone(),
        );
        registry.register(
            "archive_uploaded_bytes",
            "Bytes of archive files uploaded to object storage",
            m.uploaded_bytes.clone(),
        );
        registry.register(
            "archive_uploaded_manifest_segments",
            "Manifest segments put in object storage (each makes the files its lines add visible there)",
            m.uploaded_segments.clone(),
        );
        registry.register(
            "archive_upload_failures",
            "Upload attempts that failed, by reason (store: the object store refused or was unreachable, retried; local: a file or manifest could not be read; differs: a file no longer has the bytes its manifest entry records, not uploaded; conflict: the store holds another manifest segment under the key)",
            m.upload_failures.clone(),
        );
        registry.register(
            "archive_upload_pending_bytes",
            "Manifest bytes written locally and not yet in object storage: the upload's lag",
            m.upload_pending_bytes.clone(),
        );
        registry.register(
            "archive_upload_stuck_manifests",
            "Manifests whose upload stopped on an error of their own (a line that is not an entry, a manifest cut back under its upload, another segment under its key): they need an operator; the others go on",
            m.upload_stuck.clone(),
        );
        registry.register(
            "archive_remote_deleted_objects",
            "Objects deleted from object storage after their removal (compaction, scrub, retention) was uploaded and storage.delete_delay passed",
            m.remote_deleted.clone(),
        );
        registry.register(
            "archive_abandoned_files",
            "Unfinished archive files from an earlier process removed at start, by table",
            m.archive_abandoned.clone(),
        );
        registry.register(
            "archive_open_files",
            "Partitions with rows buffered for their next archive file, by table",
            m.open_files.clone(),
        );
        registry.register(
            "archive_buffered_bytes",
            "Memory held by archive rows not yet in a completed file (bounded by archive.buffer_bytes)",
            m.archive_buffered.clone(),
        );
        registry.register(
            "memory_held_bytes",
            "Memory held under pipeline.memory_limit, by holder (intake, journal, archive, assembly, budgets, windows); estimates of heap bytes",
            m.memory_held.clone(),
        );
        registry.register(
            "memory_limit_bytes",
            "pipeline.memory_limit",
            m.memory_limit.clone(),
        );
        registry.register(
            "memory_pool_bytes",
            "What the holders may hold together now: pipeline.memory_limit, or under pipeline.resident_limit that less what the process holds resident beyond their counts (at least a quarter of the limit)",
            m.memory_pool.clone(),
        );
        registry.register(
            "memory_resident_bytes",
            "The process's resident memory: as last read for pipeline.resident_limit, else read at the scrape (0 where it cannot be read)",
            m.memory_resident.clone(),
        );
        registry.register(
            "archive_reader_flush_seconds",
            "Readers' flush requests (POST /v1/archive/flush), from the request to every archive writer done, by outcome (flushed, timeout)",
            m.reader_flush.clone(),
        );
        registry.register(
            "archive_reader_flush_write_seconds",
            "Writing out an archive writer's buffers for readers, by writer",
            m.reader_flush_write.clone(),
        );
        registry.register(
            "archive_reader_copy_seconds",
            "Readers' requests for copies of the archive buffers (GET /v1/archive/buffered), from the request to every writer's answer, by outcome (copied, timeout)",
            m.reader_copy.clone(),
        );
        registry.register(
            "archive_reader_copy_refused",
            "Requests for copies of the archive buffers refused because they came from another host",
            m.reader_copy_refused.clone(),
        );
        registry.register(
            "archive_compactions",
            "Compactions (one partition's small files merged into one), by table",
            m.compactions.clone(),
        );
        registry.register(
            "archive_compaction_files",
            "Files merged by compaction (direction in) and written by it (out), by table",
            m.compaction_files.clone(),
        );
        registry.register(
            "archive_compaction_bytes",
            "Bytes of files merged by compaction (direction in) and written by it (out), by table",
            m.compaction_bytes.clone(),
        );
        registry.register(
            "request_summaries",
            "Request summaries written to the requests table, by completeness",
            m.summaries.clone(),
        );
        registry.register(
            "findings",
            "Findings raised by the executor-checklist rules (schemas/findings.md), by tenant (past the series limit as _other), rule and severity",
            m.findings.clone(),
        );
        registry.register(
            "assemble_duplicate_spans",
            "Spans assembly had already seen (same request, same span id), kept once",
            m.assemble_duplicates.clone(),
        );
        registry.register(
            "assemble_open_requests",
            "Requests held by assembly (open, or remembered for amendments)",
            m.assemble_requests.clone(),
        );
        registry.register(
            "assemble_held_spans",
            "Span facts held by assembly",
            m.assemble_spans.clone(),
        );
        let build = Family::<Labels1, Gauge>::default();
        build
            .get_or_create(&[("version", env!("CARGO_PKG_VERSION"))])
            .set(1);
        registry.register("build_info", "Build of the running toolwatch", build);
        Metrics { registry, ..m }
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        if let Some(memory) = self.memory.get() {
            self.memory_limit
                .set(i64::try_from(memory.limit()).unwrap_or(i64::MAX));
            self.memory_pool
                .set(i64::try_from(memory.pool()).unwrap_or(i64::MAX));
            // Without a resident limit nothing reads it between scrapes.
            let resident = match memory.resident() {
                0 => crate::memory::resident_bytes().unwrap_or(0),
                read => read,
            };
            self.memory_resident
                .set(i64::try_from(resident).unwrap_or(i64::MAX));
            for h in crate::memory::Holder::ALL {
                self.memory_held
                    .get_or_create(&[("holder", h.as_str())])
                    .set(i64::try_from(memory.held(h)).unwrap_or(i64::MAX));
            }
        }
        let mut out = String::new();
        if encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }

    /// Shows `memory`'s holders at each scrape (the first budget given is kept).
    pub fn watch_memory(&self, memory: std::sync::Arc<crate::memory::MemoryBudget>) {
        let _ = self.memory.set(memory);
    }

    /// Marks the daemon ready (or not) for `/readyz`.
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::SeqCst);
    }

    /// True when the daemon accepts data: started, not stopping, and not refusing for load.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst) && self.refusing_until.load(Ordering::Relaxed) <= now_ns()
    }

    /// Data was just refused for load: not ready for `delay` (the retry delay clients get).
    pub fn refusing_for(&self, delay: std::time::Duration) {
        let until = now_ns() + i64::try_from(delay.as_nanos()).unwrap_or(i64::MAX / 2);
        self.refusing_until.fetch_max(until, Ordering::Relaxed);
    }

    /// An accepted request with its body size and item count.
    pub fn accepted(&self, t: Transport, s: Signal, bytes: usize, items: usize) {
        let l = [("transport", t.as_str()), ("signal", s.as_str())];
        self.requests.get_or_create(&l).inc();
        self.received_bytes.get_or_create(&l).inc_by(bytes as u64);
        self.received_items
            .get_or_create(&[("signal", s.as_str())])
            .inc_by(items as u64);
    }

    /// A refused request.
    pub fn rejected(&self, t: Transport, s: Signal, r: RejectReason) {
        self.rejected
            .get_or_create(&[
                ("transport", t.as_str()),
                ("signal", s.as_str()),
                ("reason", r.as_str()),
            ])
            .inc();
    }

    /// A request refused for a rate.
    pub fn rate_limited(&self, scope: &'static str, name: &str) {
        let name = if scope == "tenant" {
            self.budget.tenant_label(name)
        } else {
            name.to_string()
        };
        self.rate_limited
            .get_or_create(&[("scope", scope.to_string()), ("name", name)])
            .inc();
    }

    /// A request refused for a structural limit.
    pub fn structure_refused(&self, limit: &'static str, tenant: &str) {
        let tenant = self.budget.tenant_label(tenant);
        self.structure_refused
            .get_or_create(&[("limit", limit.to_string()), ("tenant", tenant)])
            .inc();
    }

    /// A TLS handshake on `listener` that failed.
    pub fn tls_failed(&self, listener: &'static str, reason: &'static str) {
        self.tls_failed
            .get_or_create(&[("listener", listener), ("reason", reason)])
            .inc();
    }

    /// A request refused for its credential.
    pub fn auth_refused(&self, t: Transport, reason: &'static str) {
        self.auth_refused_on(t.as_str(), reason);
    }

    /// A request refused for its credential on `listener` (`grpc`, `http` or `admin`).
    pub fn auth_refused_on(&self, listener: &'static str, reason: &'static str) {
        self.auth_refused
            .get_or_create(&[("transport", listener), ("reason", reason)])
            .inc();
    }

    /// A completed archive file of `table`.
    pub fn archive_file(&self, table: &'static str, rows: u64, bytes: u64) {
        let l = [("table", table)];
        self.archive_rows.get_or_create(&l).inc_by(rows);
        self.archive_files.get_or_create(&l).inc();
        self.archive_bytes.get_or_create(&l).inc_by(bytes);
    }

    /// Rows of `table` lost to a write error.
    pub fn archive_error(&self, table: &'static str, rows: u64) {
        self.archive_failed_rows
            .get_or_create(&[("table", table)])
            .inc_by(rows);
    }

    /// An archive file of `bytes` uploaded to object storage.
    pub fn archive_uploaded(&self, bytes: u64) {
        self.uploaded_files.inc();
        self.uploaded_bytes.inc_by(bytes);
    }

    /// A manifest segment put in object storage.
    pub fn archive_uploaded_segment(&self) {
        self.uploaded_segments.inc();
    }

    /// An upload attempt failed (`reason`: store, local, differs, conflict, store_behind).
    pub fn archive_upload_failed(&self, reason: &'static str) {
        self.upload_failures
            .get_or_create(&[("reason", reason)])
            .inc();
    }

    /// Manifest bytes not yet uploaded.
    pub fn archive_upload_pending(&self, bytes: u64) {
        self.upload_pending_bytes
            .set(i64::try_from(bytes).unwrap_or(i64::MAX));
    }

    /// Manifests whose upload is stopped.
    pub fn archive_upload_stuck(&self, manifests: u64) {
        self.upload_stuck
            .set(i64::try_from(manifests).unwrap_or(i64::MAX));
    }

    /// Objects deleted from object storage.
    pub fn archive_remote_deleted(&self, objects: u64) {
        self.remote_deleted.inc_by(objects);
    }

    /// Counts completed files the manifest could not record.
    pub fn manifest_failed(&self, files: usize) {
        self.manifest_failed.inc_by(files as u64);
    }

    /// Unfinished files of `table` removed at start.
    pub fn archive_abandoned_files(&self, table: &'static str, files: u64) {
        self.archive_abandoned
            .get_or_create(&[("table", table)])
            .inc_by(files);
    }

    /// Counts rule hits (rule id, hits); rule ids come from the configuration, never from a
    /// payload.
    pub fn redactions<'a>(&self, hits: impl IntoIterator<Item = (&'a String, &'a u32)>) {
        for (rule, n) in hits {
            self.redactions
                .get_or_create(&[("rule", rule.clone())])
                .inc_by(u64::from(*n));
        }
    }

    /// Reports what the tenants have learned. Called from one task only (the daemon's gauge
    /// refresher): the counters move by what the totals grew since their last report.
    pub fn learned(&self, stats: &crate::protect::learned::LearnedStats) {
        use std::sync::atomic::Ordering::Relaxed;
        let to_i64 = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        self.learned_values.set(to_i64(stats.values.load(Relaxed)));
        self.learned_bytes.set(to_i64(stats.bytes.load(Relaxed)));
        for (reason, total) in [
            ("limit", stats.evicted_limit.load(Relaxed)),
            ("ttl", stats.expired.load(Relaxed)),
        ] {
            let counter = self.learned_forgotten.get_or_create(&[("reason", reason)]);
            counter.inc_by(total.saturating_sub(counter.get()));
        }
    }

    /// Counts quarantined items by (signal, reason).
    pub fn quarantined(
        &self,
        counts: &std::collections::BTreeMap<(&'static str, &'static str), u64>,
    ) {
        for ((signal, reason), n) in counts {
            self.quarantined
                .get_or_create(&[("signal", *signal), ("reason", *reason)])
                .inc_by(*n);
        }
    }

    /// Memory held by archive buffers.
    pub fn set_archive_buffered_bytes(&self, bytes: usize) {
        self.archive_buffered
            .set(i64::try_from(bytes).unwrap_or(i64::MAX));
    }

    /// One compaction of `table`: `files_in` files of `bytes_in` bytes merged into
    /// `files_out` of `bytes_out`.
    pub fn archive_compaction(
        &self,
        t: &'static str,
        (files_in, bytes_in): (u64, u64),
        (files_out, bytes_out): (u64, u64),
    ) {
        self.compactions.get_or_create(&[("table", t)]).inc();
        for (dir, files, bytes) in [("in", files_in, bytes_in), ("out", files_out, bytes_out)] {
            let l = [("table", t), ("direction", dir)];
            self.compaction_files.get_or_create(&l).inc_by(files);
            self.compaction_bytes.get_or_create(&l).inc_by(bytes);
        }
    }

    /// A reader's flush request took `seconds`; `flushed` false when it timed out.
    pub fn reader_flush(&self, flushed: bool, seconds: f64) {
        let outcome = if flushed { "flushed" } else { "timeout" };
        self.reader_flush
            .get_or_create(&[("outcome", outcome)])
            .observe(seconds);
    }

    /// A reader's request for copies of the buffers took `seconds` (all answered or not).
    pub fn reader_copy(&self, copied: bool, seconds: f64) {
        let outcome = if copied { "copied" } else { "timeout" };
        self.reader_copy
            .get_or_create(&[("outcome", outcome)])
            .observe(seconds);
    }

    /// A request for copies of the buffers came from another host and was refused.
    pub fn reader_copy_refused(&self) {
        self.reader_copy_refused.inc();
    }

    /// Archive writer `writer` wrote out its buffers for readers in `seconds`.
    pub fn reader_flush_write(&self, writer: &'static str, seconds: f64) {
        self.reader_flush_write
            .get_or_create(&[("writer", writer)])
            .observe(seconds);
    }

    /// Moves the count of archive files of `table` open by `delta`.
    pub fn open_files_changed(&self, table: &'static str, delta: i64) {
        // Several writers hold files of one table (the archive's writer threads): each adds
        // its own change.
        self.open_files
            .get_or_create(&[("table", table)])
            .inc_by(delta);
    }

    /// A finding raised (its first `open` row).
    pub fn finding(&self, tenant: &str, rule: &'static str, severity: &'static str) {
        self.findings
            .get_or_create(&[
                ("tenant", self.budget.tenant_label(tenant)),
                ("rule", rule.to_string()),
                ("severity", severity.to_string()),
            ])
            .inc();
    }

    /// Summaries written, by completeness.
    pub fn request_summary(&self, completeness: &'static str) {
        self.summaries
            .get_or_create(&[("completeness", completeness)])
            .inc();
    }

    /// What assembly holds, and duplicates seen so far (a running total).
    pub fn assemble_state(&self, requests: usize, spans: usize, duplicates_total: u64) {
        self.assemble_requests.set(requests as i64);
        self.assemble_spans.set(spans as i64);
        let seen = self.assemble_duplicates.get();
        if duplicates_total > seen {
            self.assemble_duplicates.inc_by(duplicates_total - seen);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn learned_counters_move_by_what_the_totals_grew() {
        use std::sync::atomic::Ordering::Relaxed;
        let m = Metrics::new();
        let stats = crate::protect::learned::LearnedStats::default();
        stats.values.store(7, Relaxed);
        stats.bytes.store(90, Relaxed);
        stats.evicted_limit.store(3, Relaxed);
        m.learned(&stats);
        m.learned(&stats);
        stats.expired.store(2, Relaxed);
        stats.evicted_limit.store(5, Relaxed);
        m.learned(&stats);
        let text = m.render();
        for line in [
            "toolwatch_protect_learned_values 7",
            "toolwatch_protect_learned_bytes 90",
            "toolwatch_protect_learned_forgotten_total{reason=\"limit\"} 5",
            "toolwatch_protect_learned_forgotten_total{reason=\"ttl\"} 2",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }
    }

    #[test]
    fn tenant_series_are_capped_and_quiet_usage_series_removed() {
        let m = Metrics::new();
        for i in 0..MAX_TENANT_SERIES + 3 {
            m.budget
                .alarm(&format!("t{i}"), "request", "tool_calls", "limit");
        }
        let text = m.render();
        assert!(text.contains(
            "toolwatch_budget_alarms_total{tenant=\"_other\",scope=\"request\",budget=\"tool_calls\",level=\"limit\"} 3"
        ));
        let row = |t: &str| {
            (
                t.to_string(),
                "tenant",
                "tokens_per_day".to_string(),
                5.0,
                10.0,
            )
        };
        m.budget.set_usage(&[row("t1"), row("t2")], 0);
        assert!(m.render().contains("toolwatch_budget_usage{tenant=\"t2\""));
        m.budget.set_usage(&[row("t1")], 0);
        let text = m.render();
        assert!(text.contains("toolwatch_budget_usage{tenant=\"t1\""));
        assert!(!text.contains("toolwatch_budget_usage{tenant=\"t2\""));
        assert!(!text.contains("toolwatch_budget_limit{tenant=\"t2\""));
        // A tenant past the cap gets no gauges.
        m.budget.set_usage(&[row("t-late")], 0);
        assert!(!m.render().contains("t-late"));
    }
}
