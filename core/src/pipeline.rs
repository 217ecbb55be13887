//! The intake: where receivers hand normalized batches to the rest of the pipeline.
//!
//! `file_under_tenants` files each item under its trace's tenant within what its sender may
//! write (see [`crate::tenancy`]); `submit` runs `protect`, so nothing unprotected goes
//! further, then appends the protected batch to the journal and returns once it is durable:
//! only then may a receiver
//! answer success. A full journal or writer queue is answered with [`Refusal::Overloaded`] at
//! once, never by waiting or growing, and `/readyz` reports not ready while refusals go on.

use std::sync::Arc;
use std::time::Duration;

use crate::event::{EventBatch, LogRecord, Sender, SpanRecord};
use crate::journal::codec::{self, JournalEntry};
use crate::journal::writer::{AppendError, JournalWriter};
use crate::metrics::Metrics;
use crate::protect::Protector;
use crate::tenancy::{binding, TraceTenants};

/// Why the pipeline did not take a batch; all are worth retrying later.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The journal is full (a consumer is behind) or its writer's queue is.
    #[error("toolwatch is overloaded; retry later")]
    Overloaded,
    /// The intake is at its allowance of `pipeline.memory_limit` (see [`crate::memory`]).
    #[error("toolwatch is at its memory limit (pipeline.memory_limit); retry later")]
    OverMemory,
    /// The journal cannot be written (the daemon's log says why).
    #[error("toolwatch cannot store data right now; retry later")]
    Unavailable,
    /// The daemon is shutting down.
    #[error("toolwatch is shutting down; retry later")]
    ShuttingDown,
}

/// Text in a batch from which protect runs on a blocking thread, not a runtime worker.
pub const BLOCKING_PROTECT_BYTES: usize = 256 << 10;

/// About how much text protect reads in `batch` (every text of every item, tool arguments
/// and results included). Stops counting at [`BLOCKING_PROTECT_BYTES`].
fn text_bytes(batch: &EventBatch) -> usize {
    let spans = batch.spans.iter().map(SpanRecord::text_bytes);
    let logs = batch.logs.iter().map(LogRecord::text_bytes);
    let mut total = 0;
    for n in spans.chain(logs) {
        total += n;
        if total >= BLOCKING_PROTECT_BYTES {
            break;
        }
    }
    total
}

/// Who a request came from, as the receiver authenticated it.
#[derive(Debug, Clone, Default)]
pub struct Origin {
    /// The sender its token names (`None`: auth is off and no known token came).
    pub sender: Option<Arc<Sender>>,
    /// The request's `x-toolwatch-tenant` header, for items that name no tenant.
    pub tenant_header: Option<String>,
}

/// The entry to the pipeline after `receive`.
pub struct Intake {
    /// The rules in force. Each submit holds it (shared) from protecting its batch until the
    /// journal writer has committed the batch's record (the guard travels with the record, so
    /// a client that goes away mid-request does not let go early), so a reload (exclusive)
    /// waits for the batches in flight and every record after the last one committed then
    /// was protected by the new rules.
    protector: Arc<tokio::sync::RwLock<Protector>>,
    /// The journal's head: where the last committed record is.
    head: Arc<crate::journal::head::JournalHead>,
    tenants: Arc<TraceTenants>,
    journal: JournalWriter,
    metrics: Arc<Metrics>,
    retry_after: Duration,
}

impl Intake {
    /// An intake appending to `journal`.
    pub fn new(
        protector: Protector,
        tenants: Arc<TraceTenants>,
        (journal, head): (JournalWriter, Arc<crate::journal::head::JournalHead>),
        retry_after: Duration,
        metrics: Arc<Metrics>,
    ) -> Intake {
        Intake {
            protector: Arc::new(tokio::sync::RwLock::new(protector)),
            head,
            tenants,
            journal,
            metrics,
            retry_after,
        }
    }

    /// Files the batch's items under their traces' tenants within what its sender may write
    /// (before [`Intake::submit`], so each tenant's own redaction rules and rates apply);
    /// returns how many items claimed a tenant their sender may not write.
    pub fn file_under_tenants(&self, batch: &mut EventBatch, origin: &Origin) -> u64 {
        if batch.is_empty() {
            return 0;
        }
        let sender = origin.sender.as_ref();
        let mut moved = binding::before_traces(batch, sender, origin.tenant_header.as_deref());
        self.metrics.tenancy.conflicts(self.tenants.resolve(batch));
        if sender.is_some() {
            moved += binding::after_traces(batch);
        }
        moved
    }

    /// Protects and journals a batch filed by [`Intake::file_under_tenants`]; on `Ok` it is
    /// durable.
    pub async fn submit(&self, mut batch: EventBatch) -> Result<(), Refusal> {
        if batch.is_empty() {
            return Ok(());
        }
        // Held until the batch's record is committed (see `protector`).
        let protector = Arc::clone(&self.protector).read_owned().await;
        let (protector, batch, report) = if text_bytes(&batch) >= BLOCKING_PROTECT_BYTES {
            // Protect is linear, but a batch of megabytes still takes a while: off the
            // runtime's workers, so the requests behind it are not kept waiting.
            tracing::debug!("protecting a large batch off the runtime workers");
            tokio::task::spawn_blocking(move || {
                let report = protector.protect(&mut batch);
                (protector, batch, report)
            })
            .await
            .map_err(|e| {
                tracing::error!(error = %e, "protecting a batch failed; refused");
                Refusal::Unavailable
            })?
        } else {
            let report = protector.protect(&mut batch);
            (protector, batch, report)
        };
        self.metrics.redactions(&report.hits);
        self.metrics.quarantined(&report.quarantined);
        if batch.is_empty() {
            return Ok(());
        }
        let payload = match codec::encode_events(&batch) {
            Ok(p) => p,
            Err(e) => {
                tracing::error!(error = %e, "a protected batch cannot be journalled; refused");
                return Err(Refusal::Unavailable);
            }
        };
        // The batch goes with its payload: the consumers take it instead of decoding.
        match self
            .journal
            .append_decoded_holding(payload, JournalEntry::Events(batch), Box::new(protector))
            .await
        {
            Ok(_) => Ok(()),
            Err(e) => {
                self.metrics.journal.refused(e.reason());
                let refusal = match e {
                    AppendError::Full { .. } | AppendError::Busy => Refusal::Overloaded,
                    AppendError::Failed(_) => Refusal::Unavailable,
                    AppendError::Closed => Refusal::ShuttingDown,
                };
                // Not ready until a retry could succeed: a balancer sends new clients elsewhere.
                self.metrics.refusing_for(self.retry_after);
                Err(refusal)
            }
        }
    }

    /// Puts `protector` in force once the batches being protected are durable; returns the
    /// sequence number of the last journal record protected by the rules it replaces (every
    /// later record is protected by the new ones).
    pub async fn replace_protector(&self, protector: Protector) -> u64 {
        let mut in_force = self.protector.write().await;
        *in_force = protector;
        // No batch protected by the old rules is waiting for its record now.
        self.head.committed().saturating_sub(1)
    }

    /// A copy of the protector in force (it shares what the tenants learned).
    pub async fn protector(&self) -> Protector {
        self.protector.read().await.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{fixtures, AttrValue, Attributes};

    #[test]
    fn every_text_of_a_batch_counts_towards_protecting_it_off_the_runtime() {
        let big = "password=abc123 ".repeat(BLOCKING_PROTECT_BYTES / 16);
        let mut result = fixtures::span();
        result.gen_ai.tool_result = Some(big.clone());
        let mut body = fixtures::log();
        body.body = AttrValue::Array(vec![AttrValue::Map(Attributes(vec![(
            "dump".into(),
            AttrValue::Str(big.clone()),
        )]))]);
        let mut event = fixtures::span();
        event.events.push(crate::event::SpanEventRecord {
            time_ns: 0,
            name: "log".into(),
            attributes: Attributes(vec![("text".into(), AttrValue::Str(big))]),
        });
        for batch in [
            EventBatch {
                spans: vec![result],
                ..Default::default()
            },
            EventBatch {
                logs: vec![body],
                ..Default::default()
            },
            EventBatch {
                spans: vec![event],
                ..Default::default()
            },
        ] {
            assert!(text_bytes(&batch) >= BLOCKING_PROTECT_BYTES);
        }
        let small = EventBatch {
            spans: vec![fixtures::span(); 1000],
            ..Default::default()
        };
        assert_eq!(text_bytes(&small), 0);
    }
}
