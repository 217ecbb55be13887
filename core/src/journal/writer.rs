//! The group-commit writer: one thread owns the journal; callers hand it records and wait for
//! the fsync that makes them durable.
//!
//! Records that arrive within `group_commit` of the first one waiting (or until
//! `group_bytes` are waiting) share one fsync. The journal's size is bounded: a record that
//! would take it past `max_bytes` is refused with [`AppendError::Full`] and nothing of it is
//! written, and so is a record when the writer's queue is full ([`AppendError::Busy`]); both
//! mean "retry later" to a client. After a write error the writer refuses everything: the
//! journal's tail is cut at the next start.

use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use std::sync::Arc;

use tokio::sync::oneshot;

use super::codec::JournalEntry;
use super::consume::DecodedRecords;
use super::head::JournalHead;
use super::Journal;

/// How often the writer removes segments every consumer has passed, when idle or busy.
const HOUSEKEEPING: Duration = Duration::from_millis(500);

/// How the writer groups records.
#[derive(Debug, Clone, Copy)]
pub struct GroupCommit {
    /// Longest a record waits for others to share its fsync.
    pub interval: Duration,
    /// Commit early once this many bytes wait.
    pub group_bytes: u64,
    /// The journal's size limit on disk.
    pub max_bytes: u64,
    /// Records queued for the writer at most.
    pub queue: usize,
}

/// Why a record was not made durable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AppendError {
    /// The journal holds `max_bytes` already: consumers are behind.
    #[error("journal full: {bytes} of {limit} bytes")]
    Full {
        /// Bytes on disk and waiting.
        bytes: u64,
        /// The limit.
        limit: u64,
    },
    /// The writer's queue is full.
    #[error("journal writer busy")]
    Busy,
    /// Writing failed (the message names the file, never record content).
    #[error("journal write failed: {0}")]
    Failed(String),
    /// The writer has stopped.
    #[error("journal writer stopped")]
    Closed,
}

impl AppendError {
    /// The reason as a metric label: `full`, `busy`, `failed` or `closed`.
    pub fn reason(&self) -> &'static str {
        match self {
            AppendError::Full { .. } => "full",
            AppendError::Busy => "busy",
            AppendError::Failed(_) => "failed",
            AppendError::Closed => "closed",
        }
    }
}

/// What the writer did, reported when it stops.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriterTotals {
    /// Records made durable.
    pub records: u64,
    /// Commits (fsyncs).
    pub commits: u64,
    /// Records refused because the journal was full.
    pub refused_full: u64,
}

struct Request {
    payload: Vec<u8>,
    /// What `payload` decodes to, when the caller has it.
    entry: Option<JournalEntry>,
    done: oneshot::Sender<Result<u64, AppendError>>,
    /// Dropped once the record is committed (or refused), whether or not the caller still
    /// waits: a caller's lock held until its record has its place in the journal.
    hold: Option<Hold>,
}

/// Something a caller's record carries to the writer, dropped once the record is committed or
/// refused.
pub type Hold = Box<dyn std::any::Any + Send>;

/// Hands records to the writer thread.
#[derive(Clone)]
pub struct JournalWriter {
    tx: SyncSender<Request>,
}

impl JournalWriter {
    /// Starts the writer thread; it stops when every `JournalWriter` is dropped and returns the
    /// journal with its totals.
    /// Commits are published to `head`, and segments every consumer registered there has
    /// passed are removed.
    pub fn spawn(
        journal: Journal,
        config: GroupCommit,
        head: Arc<JournalHead>,
    ) -> std::io::Result<(JournalWriter, JoinHandle<(Journal, WriterTotals)>)> {
        JournalWriter::spawn_publishing(journal, config, head, None)
    }

    /// As [`JournalWriter::spawn`]; the entries of records appended with
    /// [`JournalWriter::append_decoded`] are also published to `decoded` once durable and
    /// before the head says so, so no consumer reaches such a record before it is there.
    pub fn spawn_publishing(
        journal: Journal,
        config: GroupCommit,
        head: Arc<JournalHead>,
        decoded: Option<Arc<DecodedRecords>>,
    ) -> std::io::Result<(JournalWriter, JoinHandle<(Journal, WriterTotals)>)> {
        let (tx, rx) = mpsc::sync_channel(config.queue.max(1));
        let handle = std::thread::Builder::new()
            .name("toolwatch-journal".into())
            .spawn(move || {
                let out = run(journal, rx, config, &head, decoded.as_deref());
                head.close();
                out
            })?;
        Ok((JournalWriter { tx }, handle))
    }

    /// Makes `payload` durable; returns its sequence number once it is fsynced.
    pub async fn append(&self, payload: Vec<u8>) -> Result<u64, AppendError> {
        self.send(payload, None, None).await
    }

    /// As [`JournalWriter::append`], with what `payload` decodes to (see
    /// [`JournalWriter::spawn_publishing`]).
    pub async fn append_decoded(
        &self,
        payload: Vec<u8>,
        entry: JournalEntry,
    ) -> Result<u64, AppendError> {
        self.send(payload, Some(entry), None).await
    }

    /// As [`JournalWriter::append_decoded`]; `hold` is dropped once the record is committed
    /// or refused, even if the caller stopped waiting (its future dropped).
    pub async fn append_decoded_holding(
        &self,
        payload: Vec<u8>,
        entry: JournalEntry,
        hold: Hold,
    ) -> Result<u64, AppendError> {
        self.send(payload, Some(entry), Some(hold)).await
    }

    async fn send(
        &self,
        payload: Vec<u8>,
        entry: Option<JournalEntry>,
        hold: Option<Hold>,
    ) -> Result<u64, AppendError> {
        let (done, wait) = oneshot::channel();
        match self.tx.try_send(Request {
            payload,
            entry,
            done,
            hold,
        }) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => return Err(AppendError::Busy),
            Err(TrySendError::Disconnected(_)) => return Err(AppendError::Closed),
        }
        wait.await.unwrap_or(Err(AppendError::Closed))
    }
}

/// Removes what every consumer has passed and tells the head.
fn remove_consumed(journal: &mut Journal, head: &JournalHead) {
    let Some(min) = head.min_position() else {
        head.housekept();
        return;
    };
    match journal.remove_consumed(min) {
        Ok(0) => {}
        Ok(n) => {
            tracing::debug!(
                segments = n,
                "journal segments every consumer passed removed"
            );
            head.publish(journal.next_seq(), journal.disk_bytes());
        }
        Err(e) => tracing::error!(error = %e, "cannot remove consumed journal segments"),
    }
    head.housekept();
}

fn run(
    mut journal: Journal,
    rx: Receiver<Request>,
    config: GroupCommit,
    head: &JournalHead,
    decoded: Option<&DecodedRecords>,
) -> (Journal, WriterTotals) {
    let mut totals = WriterTotals::default();
    let mut failed: Option<String> = None;
    let mut last_housekeeping = Instant::now();
    loop {
        if last_housekeeping.elapsed() >= HOUSEKEEPING {
            remove_consumed(&mut journal, head);
            last_housekeeping = Instant::now();
        }
        let first = match rx.recv_timeout(HOUSEKEEPING) {
            Ok(r) => r,
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => break,
        };
        // Gather a group: until the interval since the first record passes, or enough bytes.
        let deadline = Instant::now() + config.interval;
        let mut group = vec![first];
        let mut bytes = group[0].payload.len() as u64;
        while bytes < config.group_bytes {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(r) => {
                    bytes += r.payload.len() as u64;
                    group.push(r);
                }
                Err(RecvTimeoutError::Timeout) | Err(RecvTimeoutError::Disconnected) => break,
            }
        }
        if let Some(why) = &failed {
            for r in group {
                let _ = r.done.send(Err(AppendError::Failed(why.clone())));
            }
            continue;
        }
        let mut accepted = Vec::with_capacity(group.len());
        for r in group {
            // A commit may open a segment: its header counts too, so the limit always holds.
            let size = r.payload.len() as u64
                + super::segment::RECORD_HEADER_BYTES
                + super::segment::HEADER_BYTES;
            let would_be = journal.disk_bytes() + journal.pending_bytes() + size;
            if would_be > config.max_bytes {
                totals.refused_full += 1;
                let _ = r.done.send(Err(AppendError::Full {
                    bytes: journal.disk_bytes() + journal.pending_bytes(),
                    limit: config.max_bytes,
                }));
                continue;
            }
            let seq = journal.append(&r.payload);
            let entry = decoded.and(r.entry).map(|e| (e, r.payload.len()));
            accepted.push((seq, entry, (r.done, r.hold)));
        }
        if accepted.is_empty() {
            continue;
        }
        match journal.commit() {
            Ok(()) => {
                totals.commits += 1;
                totals.records += accepted.len() as u64;
                if let Some(decoded) = decoded {
                    for (seq, entry, _) in &mut accepted {
                        if let Some((entry, bytes)) = entry.take() {
                            decoded.publish(*seq, entry, bytes);
                        }
                    }
                }
                head.publish_commit(
                    journal.next_seq(),
                    journal.disk_bytes(),
                    accepted.len() as u64,
                );
                for (seq, _, (done, hold)) in accepted {
                    let _ = done.send(Ok(seq));
                    drop(hold);
                }
            }
            Err(e) => {
                let why = e.to_string();
                tracing::error!(error = %why, "journal write failed; refusing data until restart");
                for (_, _, (done, _hold)) in accepted {
                    let _ = done.send(Err(AppendError::Failed(why.clone())));
                }
                failed = Some(why);
            }
        }
    }
    (journal, totals)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spawn(
        journal: Journal,
        config: GroupCommit,
    ) -> (JournalWriter, JoinHandle<(Journal, WriterTotals)>) {
        let head = Arc::new(JournalHead::new(
            journal.next_seq(),
            journal.disk_bytes(),
            config.max_bytes,
        ));
        JournalWriter::spawn(journal, config, head).expect("spawn")
    }

    fn config(max_bytes: u64) -> GroupCommit {
        GroupCommit {
            interval: Duration::from_millis(20),
            group_bytes: 1 << 20,
            max_bytes,
            queue: 4096,
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_appends_share_fsyncs_and_each_gets_its_own_number() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (journal, _) = Journal::open(dir.path(), 1 << 20).expect("open");
        let (writer, handle) = spawn(journal, config(u64::MAX));
        let mut tasks = tokio::task::JoinSet::new();
        for t in 0..8u8 {
            let w = writer.clone();
            tasks.spawn(async move {
                let mut got = Vec::new();
                for i in 0..50u8 {
                    let payload = vec![t, i, 0xab];
                    let seq = w.append(payload.clone()).await.expect("durable");
                    got.push((seq, payload));
                }
                got
            });
        }
        let mut all = Vec::new();
        while let Some(r) = tasks.join_next().await {
            all.extend(r.expect("task"));
        }
        drop(writer);
        let (journal, totals) = handle.join().expect("writer thread");
        all.sort();
        let seqs: Vec<u64> = all.iter().map(|(s, _)| *s).collect();
        assert_eq!(seqs, (1..=400).collect::<Vec<_>>());
        assert_eq!(totals.records, 400);
        assert!(
            totals.commits < 400,
            "{} commits for 400 records",
            totals.commits
        );
        // What each caller was told is what the journal holds.
        let stored = journal.read_from(1).expect("read");
        assert_eq!(stored, all);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_full_journal_refuses_and_keeps_what_it_acknowledged() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (journal, _) = Journal::open(dir.path(), 1 << 20).expect("open");
        // Room for the header and 10 records of 100 + 16 bytes.
        let limit = super::super::segment::HEADER_BYTES + 10 * 116;
        let (writer, handle) = spawn(journal, config(limit));
        let mut acked = 0;
        let mut full = 0;
        for i in 0..15u8 {
            match writer.append(vec![i; 100]).await {
                Ok(_) => acked += 1,
                Err(AppendError::Full { limit: l, .. }) => {
                    assert_eq!(l, limit);
                    full += 1;
                }
                Err(e) => panic!("unexpected {e}"),
            }
        }
        drop(writer);
        let (journal, totals) = handle.join().expect("writer thread");
        // Each check leaves room for a segment header a commit may add, so one record's worth
        // of the limit can stay unused: 9 or 10 fit, and the disk never holds more.
        assert!(acked == 10 || acked == 9, "{acked} acknowledged");
        assert_eq!(acked + full, 15);
        assert_eq!(totals.refused_full, full);
        assert!(journal.disk_bytes() <= limit);
        let stored = journal.read_from(1).expect("read");
        assert_eq!(stored.len() as u64, acked);
        assert!(stored
            .iter()
            .enumerate()
            .all(|(i, (_, p))| *p == vec![i as u8; 100]));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_writer_stops_when_its_last_handle_is_dropped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (journal, _) = Journal::open(dir.path(), 1 << 20).expect("open");
        let (writer, handle) = spawn(journal, config(u64::MAX));
        let other = writer.clone();
        drop(writer);
        assert!(other.append(vec![1]).await.is_ok());
        // The thread stops only when the last writer is gone.
        drop(other);
        let (_, totals) = handle.join().expect("writer thread");
        assert_eq!(totals.records, 1);
    }
}
