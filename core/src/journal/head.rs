//! What the writer has made durable and where each consumer stands, shared between the
//! writer thread and the consumers.
//!
//! The writer publishes the first sequence number not yet durable after every commit; a
//! consumer never reads at or past it, so it never sees a record that is still being written.
//! Consumers publish their durable position (their checkpoint); the writer removes the
//! segments every registered consumer has passed.

use std::collections::BTreeMap;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

#[derive(Debug, Default)]
struct HeadState {
    /// First sequence number not yet durable.
    committed: u64,
    /// Bytes of the journal on disk.
    disk_bytes: u64,
    /// Each consumer's first record not yet durable on its side.
    positions: BTreeMap<String, u64>,
    /// True once the writer has stopped: no record will be added.
    closed: bool,
    /// Records and commits since start.
    records: u64,
    commits: u64,
    /// Times the writer looked for segments to remove.
    housekeeping: u64,
    /// Times a reader of the archive asked the consumers to look up (see [`JournalHead::nudge`]).
    nudges: u64,
}

/// The shared head of the journal.
#[derive(Debug)]
pub struct JournalHead {
    state: Mutex<HeadState>,
    changed: Condvar,
    max_bytes: u64,
}

impl JournalHead {
    /// A head whose first undurable record is `committed`, with `disk_bytes` on disk.
    pub fn new(committed: u64, disk_bytes: u64, max_bytes: u64) -> JournalHead {
        JournalHead {
            state: Mutex::new(HeadState {
                committed,
                disk_bytes,
                ..HeadState::default()
            }),
            changed: Condvar::new(),
            max_bytes,
        }
    }

    fn lock(&self) -> MutexGuard<'_, HeadState> {
        // A consumer that panicked holding the lock leaves plain numbers behind: keep going.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The first sequence number not yet durable.
    pub fn committed(&self) -> u64 {
        self.lock().committed
    }

    /// Called by the writer after a commit of `records` records.
    pub fn publish_commit(&self, committed: u64, disk_bytes: u64, records: u64) {
        let mut s = self.lock();
        s.records += records;
        s.commits += 1;
        drop(s);
        self.publish(committed, disk_bytes);
    }

    /// Called by the writer each time it looked for segments to remove.
    pub fn housekept(&self) {
        self.lock().housekeeping += 1;
        self.changed.notify_all();
    }

    /// Times the writer looked for segments to remove (tests wait on it).
    pub fn housekeeping_rounds(&self) -> u64 {
        self.lock().housekeeping
    }

    /// Records and commits since start.
    pub fn totals(&self) -> (u64, u64) {
        let s = self.lock();
        (s.records, s.commits)
    }

    /// Called by the writer after a commit or a removal.
    pub fn publish(&self, committed: u64, disk_bytes: u64) {
        let mut s = self.lock();
        s.committed = committed;
        s.disk_bytes = disk_bytes;
        drop(s);
        self.changed.notify_all();
    }

    /// Ends every consumer's wait for a record now, as if one had come: a reader's flush
    /// request is then served at once by an idle daemon, not after the consumers' next tick.
    pub fn nudge(&self) {
        self.lock().nudges += 1;
        self.changed.notify_all();
    }

    /// Called by the writer when it stops.
    pub fn close(&self) {
        self.lock().closed = true;
        self.changed.notify_all();
    }

    /// True once the writer has stopped.
    pub fn is_closed(&self) -> bool {
        self.lock().closed
    }

    /// Waits until a record at `seq` is durable, the writer stops, someone nudges, or
    /// `timeout` passes; returns the first sequence number not yet durable.
    pub fn wait_past(&self, seq: u64, timeout: Duration) -> u64 {
        let deadline = Instant::now() + timeout;
        let mut s = self.lock();
        let nudges = s.nudges;
        while s.committed <= seq && !s.closed && s.nudges == nudges {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            s = match self.changed.wait_timeout(s, left) {
                Ok((guard, _)) => guard,
                Err(p) => p.into_inner().0,
            };
        }
        s.committed
    }

    /// Registers or moves a consumer's durable position.
    pub fn set_position(&self, consumer: &str, next_seq: u64) {
        self.lock().positions.insert(consumer.to_string(), next_seq);
    }

    /// The smallest registered position: every segment wholly before it may be removed.
    pub fn min_position(&self) -> Option<u64> {
        self.lock().positions.values().min().copied()
    }

    /// Each consumer's position, by name.
    pub fn positions(&self) -> BTreeMap<String, u64> {
        self.lock().positions.clone()
    }

    /// Size, totals and every consumer's position, at one moment, for the metrics.
    pub fn state(&self) -> crate::metrics::JournalState {
        let s = self.lock();
        crate::metrics::JournalState {
            disk_bytes: s.disk_bytes,
            max_bytes: self.max_bytes,
            records: s.records,
            commits: s.commits,
            committed: s.committed,
            positions: s.positions.iter().map(|(c, p)| (c.clone(), *p)).collect(),
        }
    }

    /// Bytes of the journal on disk.
    pub fn disk_bytes(&self) -> u64 {
        self.lock().disk_bytes
    }

    /// The configured bound on the journal's size.
    pub fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    /// How full the journal is, 0.0 to 1.0.
    pub fn fill(&self) -> f64 {
        if self.max_bytes == 0 {
            return 1.0;
        }
        (self.disk_bytes() as f64 / self.max_bytes as f64).min(1.0)
    }

    /// How hard the consumers that hold the journal back (open archive buffers, unsummarized
    /// requests, unsaved budget windows) should let go of it rather than make receivers refuse
    /// data: not at all, now and then (over [`PRESSURE`] of its bound), or often (over
    /// [`NEARLY_FULL`]).
    pub fn pressure(&self) -> Pressure {
        match self.fill() {
            f if f > NEARLY_FULL => Pressure::NearlyFull,
            f if f > PRESSURE => Pressure::Over,
            _ => Pressure::None,
        }
    }
}

/// How full the journal is, for the consumers that hold it back (see
/// [`JournalHead::pressure`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pressure {
    /// Under [`PRESSURE`].
    None,
    /// Over [`PRESSURE`].
    Over,
    /// Over [`NEARLY_FULL`]: receivers are about to refuse data.
    NearlyFull,
}

/// The share of `journal.max_bytes` above which receivers are about to refuse data and
/// consumers let go of the journal as often as every second (see [`JournalHead::pressure`]).
pub const NEARLY_FULL: f64 = 0.9;

/// The share of `journal.max_bytes` above which the journal is under pressure (see
/// [`JournalHead::pressure`]).
pub const PRESSURE: f64 = 0.5;

#[cfg(test)]
mod tests {
    use super::*;

    use std::sync::Arc;

    #[test]
    fn a_nudge_ends_a_wait_for_records() {
        let head = Arc::new(JournalHead::new(5, 0, 1 << 30));
        let (done_tx, done) = std::sync::mpsc::channel();
        let waiting = Arc::clone(&head);
        let waiter = std::thread::spawn(move || {
            done_tx
                .send(waiting.wait_past(5, Duration::from_secs(3600)))
                .expect("send");
        });
        // Nudge until the waiter is out (a nudge before it waits is not seen by it).
        let deadline = Instant::now() + Duration::from_secs(60);
        let returned = loop {
            assert!(Instant::now() < deadline, "the nudges never ended the wait");
            head.nudge();
            if let Ok(seq) = done.recv_timeout(Duration::from_millis(10)) {
                break seq;
            }
        };
        assert_eq!(returned, 5, "no record came");
        waiter.join().expect("waiter");
    }

    #[test]
    fn a_waiter_wakes_when_its_record_is_published() {
        let head = Arc::new(JournalHead::new(1, 0, 100));
        let h = Arc::clone(&head);
        let waiter = std::thread::spawn(move || h.wait_past(1, Duration::from_secs(30)));
        head.publish(2, 10);
        assert_eq!(waiter.join().expect("waiter"), 2);
        // Nothing new: the wait times out with the same head.
        assert_eq!(head.wait_past(1, Duration::from_millis(1)), 2);
        assert_eq!(head.wait_past(5, Duration::from_millis(1)), 2);
    }

    #[test]
    fn closing_releases_waiters_and_positions_keep_the_minimum() {
        let head = Arc::new(JournalHead::new(7, 0, 100));
        let h = Arc::clone(&head);
        let waiter = std::thread::spawn(move || h.wait_past(7, Duration::from_secs(30)));
        head.close();
        assert_eq!(waiter.join().expect("waiter"), 7);
        assert!(head.is_closed());
        assert_eq!(head.min_position(), None);
        head.set_position("archive", 5);
        head.set_position("budgets", 3);
        head.set_position("budgets", 6);
        assert_eq!(head.min_position(), Some(5));
    }
}
