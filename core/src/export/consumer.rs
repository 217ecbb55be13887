//! One export endpoint as a journal consumer.
//!
//! Records are gathered into requests of at most `max_batch_items` spans or log records (the
//! alarm log batches the budget stage journals go as they are) and sent in journal order; the
//! checkpoint is the first record with an item not yet delivered, so a crash or a downstream
//! outage resends from there (at least once: the downstream may see a request twice).
//! Sending blocks this endpoint's thread only: the other consumers read on.

use std::sync::Arc;
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use prost::Message;
use tokio_util::sync::CancellationToken;

use super::encode;
use super::endpoint::{Endpoint, SendError};
use crate::event::{LogRecord, SpanRecord};
use crate::journal::codec::JournalEntry;
use crate::journal::consume::Consumer;
use crate::journal::head::JournalHead;
use crate::metrics::Metrics;

/// A partial request waits at most this long for more items.
const LINGER: Duration = Duration::from_secs(1);

/// What an endpoint's consumer did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExportTotals {
    /// Spans delivered.
    pub spans: u64,
    /// Log records delivered (alarms included).
    pub logs: u64,
    /// Requests the endpoint refused for good (counted, not retried).
    pub rejected_requests: u64,
}

/// A replacement for an endpoint's client, handed to its consumer by a reload. The consumer
/// takes it before its next send, or at once when a send is under way (which may be retrying
/// an endpoint that is gone: the request is sent again, whole, with the new client). The
/// consumer's journal position stays: what the old client had not delivered goes to the new.
pub type EndpointSlot = Arc<ReplacementSlot>;

/// See [`EndpointSlot`].
#[derive(Default)]
pub struct ReplacementSlot {
    next: std::sync::Mutex<Option<Endpoint>>,
    arrived: tokio::sync::Notify,
}

impl ReplacementSlot {
    /// Hands `endpoint` over (replacing one not yet taken).
    pub fn put(&self, endpoint: Endpoint) {
        *self
            .next
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(endpoint);
        self.arrived.notify_one();
    }

    fn take(&self) -> Option<Endpoint> {
        self.next
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }
}

/// One endpoint reading the journal.
pub struct ExportConsumer {
    endpoint: Endpoint,
    replacement: EndpointSlot,
    runtime: tokio::runtime::Handle,
    give_up: CancellationToken,
    max_items: usize,
    spans: Vec<SpanRecord>,
    logs: Vec<LogRecord>,
    /// The first record with an item not yet delivered.
    unsent_from: Option<u64>,
    /// When the oldest buffered item was read.
    buffered_at: Option<Instant>,
    /// Set once sending stopped for the shutdown deadline: nothing more is sent.
    stopped: bool,
    metrics: Arc<Metrics>,
    totals: ExportTotals,
}

/// How one send ended.
enum Sent {
    Delivered,
    Rejected,
    Stopped,
}

impl ExportConsumer {
    /// Sends to `endpoint` on `runtime`; `give_up` interrupts retries at the shutdown deadline.
    pub fn new(
        endpoint: Endpoint,
        runtime: tokio::runtime::Handle,
        give_up: CancellationToken,
        metrics: Arc<Metrics>,
    ) -> ExportConsumer {
        ExportConsumer {
            max_items: endpoint.max_batch_items(),
            endpoint,
            replacement: EndpointSlot::default(),
            runtime,
            give_up,
            spans: Vec::new(),
            logs: Vec::new(),
            unsent_from: None,
            buffered_at: None,
            stopped: false,
            metrics,
            totals: ExportTotals::default(),
        }
    }

    /// Where a reload puts this endpoint's new client.
    pub fn replacement(&self) -> EndpointSlot {
        Arc::clone(&self.replacement)
    }

    /// Takes a reloaded client, if one was handed over.
    fn take_replacement(&mut self) {
        if let Some(new) = self.replacement.take() {
            self.max_items = new.max_batch_items();
            self.endpoint = new;
            tracing::info!(
                endpoint = self.endpoint.name(),
                "SIGHUP: export endpoint reloaded; what it had not sent goes to the new settings"
            );
        }
    }

    fn outcome(&self, result: Result<(), SendError>) -> Sent {
        match result {
            Ok(()) => Sent::Delivered,
            Err(SendError::Rejected(why)) => {
                tracing::warn!(endpoint = self.endpoint.name(), error = %why, "export endpoint refused a request for good; dropped for this endpoint");
                Sent::Rejected
            }
            Err(SendError::Stopped) => Sent::Stopped,
        }
    }

    /// Runs a send to completion, unless a replacement client arrives first (`None`: the
    /// send was abandoned, to be made again with the new client).
    fn until_replaced(
        &self,
        send: impl std::future::Future<Output = Result<(), SendError>>,
    ) -> Option<Result<(), SendError>> {
        let slot = Arc::clone(&self.replacement);
        self.runtime.block_on(async move {
            tokio::select! {
                r = send => Some(r),
                () = slot.arrived.notified() => None,
            }
        })
    }

    /// Sends the spans buffered, with the client in force when it completes.
    fn send_spans(&mut self) -> Result<(), SendError> {
        loop {
            self.take_replacement();
            let req = encode::trace_request(&self.spans);
            if let Some(r) = self.until_replaced(self.endpoint.send_traces(req, &self.give_up)) {
                return r;
            }
        }
    }

    /// Sends log records built by `req`, with the client in force when it completes.
    fn send_logs(&mut self, req: impl Fn() -> ExportLogsServiceRequest, n: u64) -> bool {
        let result = loop {
            self.take_replacement();
            if let Some(r) = self.until_replaced(self.endpoint.send_logs(req(), &self.give_up)) {
                break r;
            }
        };
        match self.outcome(result) {
            Sent::Delivered => self.totals.logs += n,
            Sent::Rejected => self.totals.rejected_requests += 1,
            Sent::Stopped => return false,
        }
        true
    }

    /// Sends what is buffered; false if sending stopped for the shutdown deadline (the
    /// buffers then stay, and the checkpoint with them).
    fn flush(&mut self) -> bool {
        if self.stopped {
            return false;
        }
        if !self.spans.is_empty() {
            let result = self.send_spans();
            match self.outcome(result) {
                Sent::Delivered => self.totals.spans += self.spans.len() as u64,
                Sent::Rejected => self.totals.rejected_requests += 1,
                Sent::Stopped => return self.stop(),
            }
            self.spans.clear();
        }
        if !self.logs.is_empty() {
            let logs = std::mem::take(&mut self.logs);
            let n = logs.len() as u64;
            let sent = self.send_logs(|| encode::logs_request(&logs), n);
            self.logs = logs;
            if !sent {
                return self.stop();
            }
            self.logs.clear();
        }
        self.unsent_from = None;
        self.buffered_at = None;
        true
    }

    fn stop(&mut self) -> bool {
        self.stopped = true;
        false
    }

    fn buffered(&self) -> usize {
        self.spans.len() + self.logs.len()
    }

    fn mark(&mut self, seq: u64) {
        self.unsent_from.get_or_insert(seq);
        self.buffered_at.get_or_insert_with(Instant::now);
    }

    fn alarms(&mut self, seq: u64, bytes: &[u8]) {
        // Alarms keep their journal order relative to the events before them.
        if !self.flush() {
            return;
        }
        let req = match ExportLogsServiceRequest::decode(bytes) {
            Ok(req) => req,
            Err(e) => {
                self.metrics
                    .journal
                    .undecodable(&format!("export-{}", self.endpoint.name()));
                tracing::error!(endpoint = self.endpoint.name(), error = %e, "journalled alarm batch cannot be decoded; skipped");
                return;
            }
        };
        let n = req
            .resource_logs
            .iter()
            .flat_map(|r| &r.scope_logs)
            .map(|s| s.log_records.len() as u64)
            .sum();
        self.mark(seq);
        if !self.send_logs(|| req.clone(), n) {
            self.stop();
            return;
        }
        self.unsent_from = None;
        self.buffered_at = None;
    }
}

impl Consumer for ExportConsumer {
    type Totals = ExportTotals;

    fn record(&mut self, seq: u64, entry: &Arc<JournalEntry>) {
        if self.stopped {
            return;
        }
        match &**entry {
            JournalEntry::Events(batch) => {
                if batch.is_empty() {
                    return;
                }
                self.mark(seq);
                self.spans.extend(batch.spans.iter().cloned());
                self.logs.extend(batch.logs.iter().cloned());
                if self.buffered() >= self.max_items {
                    self.flush();
                }
            }
            JournalEntry::AlarmLogs(bytes) => self.alarms(seq, bytes),
        }
    }

    fn tick(&mut self, next_seq: u64, head: &JournalHead) -> u64 {
        // A partial request goes out once the stream pauses or its oldest item waited.
        let waited = self.buffered_at.is_some_and(|t| t.elapsed() >= LINGER);
        let caught_up = next_seq >= head.committed();
        if self.buffered() > 0 && (waited || caught_up) {
            self.flush();
        }
        let durable = self.unsent_from.unwrap_or(next_seq);
        self.metrics.export.set_lag(
            self.endpoint.name(),
            head.committed().saturating_sub(durable),
            self.buffered_at.map_or(0.0, |t| t.elapsed().as_secs_f64()),
        );
        durable
    }

    fn finish(mut self, next_seq: u64) -> (u64, ExportTotals) {
        if self.buffered() > 0 {
            self.flush();
        }
        (self.unsent_from.unwrap_or(next_seq), self.totals)
    }
}
