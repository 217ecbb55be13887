//! The daemon's own Prometheus metrics.
//!
//! Every label value here is one of a fixed set spelled in this file (transport, signal,
//! table, reason); none comes from a payload, so no payload value can reach `/metrics`.

use std::sync::atomic::{AtomicBool, Ordering};

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::archive::partition::Table;

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
    /// The daemon is stopping.
    ShuttingDown,
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
            RejectReason::ShuttingDown => "shutting_down",
        }
    }
}

type Labels2 = [(&'static str, &'static str); 2];
type Labels3 = [(&'static str, &'static str); 3];
type Labels1 = [(&'static str, &'static str); 1];

/// All metrics, registered once at start.
pub struct Metrics {
    registry: Registry,
    ready: AtomicBool,
    requests: Family<Labels2, Counter>,
    rejected: Family<Labels3, Counter>,
    received_bytes: Family<Labels2, Counter>,
    received_items: Family<Labels1, Counter>,
    archive_rows: Family<Labels1, Counter>,
    archive_files: Family<Labels1, Counter>,
    archive_bytes: Family<Labels1, Counter>,
    archive_failed_rows: Family<Labels1, Counter>,
    archive_abandoned: Family<Labels1, Counter>,
    queue_depth: Gauge,
    open_files: Family<Labels1, Gauge>,
    summaries: Family<Labels1, Counter>,
    assemble_skipped: Counter,
    assemble_duplicates: Counter,
    assemble_requests: Gauge,
    assemble_spans: Gauge,
    redactions: Family<[(&'static str, String); 1], Counter>,
    quarantined: Family<Labels2, Counter>,
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
            requests: Family::default(),
            rejected: Family::default(),
            received_bytes: Family::default(),
            received_items: Family::default(),
            archive_rows: Family::default(),
            archive_files: Family::default(),
            archive_bytes: Family::default(),
            archive_failed_rows: Family::default(),
            archive_abandoned: Family::default(),
            queue_depth: Gauge::default(),
            open_files: Family::default(),
            summaries: Family::default(),
            assemble_skipped: Counter::default(),
            assemble_duplicates: Counter::default(),
            assemble_requests: Gauge::default(),
            assemble_spans: Gauge::default(),
            redactions: Family::default(),
            quarantined: Family::default(),
        };
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
            "archive_abandoned_files",
            "Unfinished archive files from an earlier process removed at start, by table",
            m.archive_abandoned.clone(),
        );
        registry.register(
            "archive_queue_batches",
            "Batches waiting for the archive writer",
            m.queue_depth.clone(),
        );
        registry.register(
            "archive_open_files",
            "Archive files currently being written, by table",
            m.open_files.clone(),
        );
        registry.register(
            "request_summaries",
            "Request summaries written to the requests table, by completeness",
            m.summaries.clone(),
        );
        registry.register(
            "assemble_skipped_batches",
            "Batches assembly could not take because it was behind (their spans are archived, their requests summarized without them)",
            m.assemble_skipped.clone(),
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
        let mut out = String::new();
        if encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }

    /// Marks the daemon ready (or not) for `/readyz`.
    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::SeqCst);
    }

    /// True when the daemon accepts data.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst)
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

    /// A completed archive file.
    pub fn archive_file(&self, table: Table, rows: u64, bytes: u64) {
        let l = [("table", table.as_str())];
        self.archive_rows.get_or_create(&l).inc_by(rows);
        self.archive_files.get_or_create(&l).inc();
        self.archive_bytes.get_or_create(&l).inc_by(bytes);
    }

    /// Rows lost to a write error.
    pub fn archive_error(&self, table: Table, rows: u64) {
        self.archive_failed_rows
            .get_or_create(&[("table", table.as_str())])
            .inc_by(rows);
    }

    /// Unfinished files removed at start.
    pub fn archive_abandoned_files(&self, table: Table, files: u64) {
        self.archive_abandoned
            .get_or_create(&[("table", table.as_str())])
            .inc_by(files);
    }

    /// Counts rule hits; rule ids come from the configuration, never from a payload.
    pub fn redactions(&self, hits: &crate::event::Redactions) {
        for (rule, n) in hits {
            self.redactions
                .get_or_create(&[("rule", rule.clone())])
                .inc_by(u64::from(*n));
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

    /// Batches waiting for the archive.
    pub fn set_queue_depth(&self, n: usize) {
        self.queue_depth.set(n as i64);
    }

    /// Archive files open.
    pub fn set_open_files(&self, table: Table, n: usize) {
        self.open_files
            .get_or_create(&[("table", table.as_str())])
            .set(n as i64);
    }

    /// Summaries written, by completeness.
    pub fn request_summary(&self, completeness: &'static str) {
        self.summaries
            .get_or_create(&[("completeness", completeness)])
            .inc();
    }

    /// A batch assembly could not take.
    pub fn assemble_skipped(&self) {
        self.assemble_skipped.inc();
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
