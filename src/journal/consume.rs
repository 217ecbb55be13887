//! The loop every journal consumer runs: read durable records from its checkpoint on, hand
//! them to the stage, and move the checkpoint to what the stage says is durable on its side.
//!
//! A consumer stops once `stop.drained` is cancelled (nothing more will be appended that it
//! must wait for) and it has read every durable record (a clean shutdown), or as soon as
//! `stop.give_up` is cancelled (the shutdown deadline passed): then what it has not read stays
//! in the journal for the next start.

use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::codec::{self, JournalEntry};
use super::head::JournalHead;
use super::tail::Tail;

/// How often a consumer's `tick` runs when records keep coming, and how long it waits for one.
pub const TICK: Duration = Duration::from_millis(250);

/// Records read per call.
const READ_RECORDS: usize = 256;
/// Bytes read per call, about.
const READ_BYTES: usize = 16 << 20;

/// A stage that reads the journal.
pub trait Consumer {
    /// What the stage reports when it stops.
    type Totals;
    /// Takes journal record `seq`.
    fn record(&mut self, seq: u64, entry: JournalEntry);
    /// Periodic work. `next_seq` is the first record not yet handed over; returns the first
    /// record not yet durable on the stage's side (its checkpoint).
    fn tick(&mut self, next_seq: u64, head: &JournalHead) -> u64;
    /// Stops: makes everything taken durable where it can; returns its checkpoint and totals.
    fn finish(self, next_seq: u64) -> (u64, Self::Totals);
}

/// When a consumer stops.
#[derive(Clone, Default)]
pub struct Stop {
    /// Nothing more will be appended for this consumer: stop once everything is read.
    pub drained: CancellationToken,
    /// Stop now, read or not.
    pub give_up: CancellationToken,
}

/// Runs `consumer` on `tail` until `stop` says so.
pub fn run<C: Consumer>(
    mut tail: Tail,
    mut consumer: C,
    stop: Stop,
    metrics: &crate::metrics::JournalMetrics,
) -> C::Totals {
    let mut last_tick = Instant::now();
    let mut saved = tail.next_seq();
    loop {
        if stop.give_up.is_cancelled() {
            break;
        }
        // Checked before reading, so whatever was durable when drained was set gets read.
        let drained = stop.drained.is_cancelled();
        let records = match tail.read(READ_RECORDS, READ_BYTES, TICK) {
            Ok(r) => r,
            Err(e) => {
                // A damaged segment: stop reading rather than skip acknowledged data; the
                // records stay for an operator (and the next start reports them). The
                // journal stops shrinking, so this must be loud.
                metrics.consumer_failed(tail.consumer());
                tracing::error!(consumer = tail.consumer(), error = %e, "cannot read the journal; this consumer stops until restart");
                break;
            }
        };
        let caught_up = records.is_empty();
        for (seq, payload) in records {
            match codec::decode(&payload) {
                Ok(entry) => consumer.record(seq, entry),
                Err(e) => {
                    metrics.undecodable(tail.consumer());
                    tracing::error!(consumer = tail.consumer(), seq, error = %e, "journal record cannot be decoded; skipped");
                }
            }
        }
        if last_tick.elapsed() >= TICK || caught_up {
            last_tick = Instant::now();
            let durable = consumer.tick(tail.next_seq(), tail.head());
            saved = save(&tail, saved, durable);
        }
        let closed = drained || tail.head().is_closed();
        if caught_up && closed && tail.next_seq() >= tail.head().committed() {
            break;
        }
    }
    let (durable, totals) = consumer.finish(tail.next_seq());
    save(&tail, saved, durable);
    totals
}

/// Writes the checkpoint when it moved; returns the one on disk.
fn save(tail: &Tail, saved: u64, durable: u64) -> u64 {
    if durable <= saved {
        return saved;
    }
    match tail.save_checkpoint(durable) {
        Ok(()) => durable,
        Err(e) => {
            tracing::error!(consumer = tail.consumer(), error = %e, "cannot save the journal checkpoint");
            saved
        }
    }
}
