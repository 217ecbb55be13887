//! The intake: where receivers hand normalized batches to the rest of the pipeline.
//!
//! `submit` runs `protect` first, so nothing unprotected goes further, then enqueues the
//! batch on the bounded queue that feeds the archive. A full queue is answered with
//! [`Refusal::Overloaded`] after a short wait, never by growing.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::sync::mpsc::error::SendTimeoutError;

use crate::event::EventBatch;
use crate::metrics::Metrics;
use crate::protect::Protector;

/// Why the pipeline did not take a batch; both are worth retrying later.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The queue stayed full for the whole wait.
    #[error("toolwatch is overloaded; retry later")]
    Overloaded,
    /// The daemon is shutting down.
    #[error("toolwatch is shutting down; retry later")]
    ShuttingDown,
}

/// The entry to the pipeline after `receive`.
pub struct Intake {
    protector: Protector,
    queue: mpsc::Sender<EventBatch>,
    enqueue_timeout: Duration,
    metrics: Arc<Metrics>,
}

impl Intake {
    /// An intake feeding `queue`.
    pub fn new(
        protector: Protector,
        queue: mpsc::Sender<EventBatch>,
        enqueue_timeout: Duration,
        metrics: Arc<Metrics>,
    ) -> Intake {
        Intake {
            protector,
            queue,
            enqueue_timeout,
            metrics,
        }
    }

    /// Protects and enqueues a batch; on `Ok` the pipeline owns it.
    pub async fn submit(&self, mut batch: EventBatch) -> Result<(), Refusal> {
        if batch.is_empty() {
            return Ok(());
        }
        let report = self.protector.protect(&mut batch);
        self.metrics.redactions(&report.hits);
        self.metrics.quarantined(&report.quarantined);
        if batch.is_empty() {
            return Ok(());
        }
        match self.queue.send_timeout(batch, self.enqueue_timeout).await {
            Ok(()) => {
                self.metrics
                    .set_queue_depth(self.queue.max_capacity() - self.queue.capacity());
                Ok(())
            }
            Err(SendTimeoutError::Timeout(_)) => Err(Refusal::Overloaded),
            Err(SendTimeoutError::Closed(_)) => Err(Refusal::ShuttingDown),
        }
    }
}
