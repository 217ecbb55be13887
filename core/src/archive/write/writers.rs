//! The archive's writer threads: spans and logs encoded and written on `[pipeline] workers`
//! threads at once, each partition by one of them.
//!
//! The archive consumer reads the journal on its own thread, drops repeats and what replay
//! finds already archived, and hands each record to the writers holding its rows. A partition
//! (table, tenant, hour) always goes to the same writer ([`writer_of`]), so everything the
//! archive promises per partition holds as with one writer: a completed file holds all of a
//! record's rows for its partition or none, files of a partition complete in record order, and
//! replay skips by the partition's completed files whoever wrote them. Each writer is an
//! [`Archive`] of its own on the shared buffer budget and manifest; only the first runs
//! compaction.
//!
//! A writer takes its records in journal order and reports, at each tick, the first record
//! with rows of its not yet in a completed file; the consumer's checkpoint is the lowest of
//! those, so it never passes a row that a crash could lose. Queues between the consumer and
//! the writers are short ([`QUEUED_TASKS`]): a writer that falls behind holds the consumer
//! back, and the journal with it, rather than letting memory grow.

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::{Archive, ArchiveTotals, HOUR_NS};
use crate::archive::table::Table;
use crate::journal::codec::JournalEntry;
use crate::journal::head::Pressure;

/// Tasks queued for one writer at most; the consumer waits beyond that.
pub const QUEUED_TASKS: usize = 16;

/// Writers at most (a writer's number must fit the routes' bytes, with one to spare).
pub const MAX_WRITERS: usize = 64;

/// In a record's routes: the item is not written (a repeat, or already archived).
pub const NOT_KEPT: u8 = u8::MAX;

/// Which writer takes each item of one record: a writer's number per span and per log
/// record, or [`NOT_KEPT`].
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Routes {
    /// One per span of the record.
    pub spans: Vec<u8>,
    /// One per log record of the record.
    pub logs: Vec<u8>,
}

impl Routes {
    /// The writers with at least one item of the record, each once, in order.
    pub fn writers(&self, n: usize) -> Vec<usize> {
        let mut used = vec![false; n];
        for &w in self.spans.iter().chain(&self.logs) {
            if let Some(slot) = used.get_mut(usize::from(w)) {
                *slot = true;
            }
        }
        (0..n).filter(|&w| used[w]).collect()
    }
}

/// The writer, of `n`, that takes the rows of `table` for `tenant` in the hour of `time_ns`.
/// Fixed within a process (a fixed seed), so a partition's rows stay with one writer. A
/// hash spreads many partitions evenly; a few spread as dice fall (20 tenants over two
/// writers split 17 to 3 in one hour measured).
pub fn writer_of(table: Table, tenant: &str, time_ns: i64, n: usize) -> u8 {
    if n <= 1 {
        return 0;
    }
    let hash = foldhash::fast::FixedState::with_seed(0x746f_6f6c_7761_7463).hash_one((
        table.as_str(),
        tenant,
        time_ns.div_euclid(HOUR_NS),
    ));
    // Multiply-shift: the high bits of the hash, spread over n.
    ((u128::from(hash) * n as u128) >> 64) as u8
}

/// What a writer is asked to do, in the consumer's order.
enum Task {
    /// Append the rows of journal record `seq` that `routes` give this writer.
    Record {
        seq: u64,
        entry: Arc<JournalEntry>,
        routes: Arc<Routes>,
    },
    /// The archive's upkeep ([`Archive::tick`]); every record before `next_seq` was handed over.
    Tick { next_seq: u64, pressure: Pressure },
    /// Write everything out and stop; every record before `next_seq` was handed over.
    Finish { next_seq: u64 },
    /// Answer once every task before this one is done (tests).
    #[cfg(test)]
    Done(std::sync::mpsc::Sender<()>),
}

/// What a writer tells the consumer between tasks.
struct Progress {
    /// The first record with rows of this writer's not yet in a completed file, as of its
    /// last tick (everything it was handed before that record is in completed files).
    durable: AtomicU64,
    /// When a reader's flush waiting for this writer may go, as of its last tick.
    flush_due: Mutex<Option<Instant>>,
}

/// One writer thread and its queue.
struct Writer {
    tasks: SyncSender<Task>,
    progress: Arc<Progress>,
    thread: Option<JoinHandle<(u64, ArchiveTotals)>>,
}

/// Why the writer threads could not start.
#[derive(Debug, thiserror::Error)]
#[error("cannot start an archive writer thread: {0}")]
pub struct StartError(#[from] std::io::Error);

/// The archive's writer threads, fed by the archive consumer.
pub struct PartitionWriters {
    writers: Vec<Writer>,
}

impl PartitionWriters {
    /// Starts one thread per archive in `archives` (at most [`MAX_WRITERS`]); `checkpoint` is
    /// the consumer's at start (nothing before it is theirs to write).
    pub fn start(archives: Vec<Archive>, checkpoint: u64) -> Result<PartitionWriters, StartError> {
        let mut writers = Vec::with_capacity(archives.len());
        for (i, archive) in archives.into_iter().take(MAX_WRITERS).enumerate() {
            let (tasks, queue) = sync_channel(QUEUED_TASKS);
            let progress = Arc::new(Progress {
                durable: AtomicU64::new(checkpoint),
                flush_due: Mutex::new(None),
            });
            let shared = Arc::clone(&progress);
            let thread = std::thread::Builder::new()
                .name(format!("archive-write{i}"))
                .spawn(move || run(archive, i as u8, &queue, &shared))?;
            writers.push(Writer {
                tasks,
                progress,
                thread: Some(thread),
            });
        }
        Ok(PartitionWriters { writers })
    }

    /// How many writers there are.
    pub fn count(&self) -> usize {
        self.writers.len()
    }

    /// Hands record `seq` to the writers its `routes` name (waiting while one's queue is full).
    pub fn record(&self, seq: u64, entry: &Arc<JournalEntry>, routes: Routes) {
        let routes = Arc::new(routes);
        for w in routes.writers(self.writers.len()) {
            self.send(
                w,
                Task::Record {
                    seq,
                    entry: Arc::clone(entry),
                    routes: Arc::clone(&routes),
                },
            );
        }
    }

    /// Asks every writer for its upkeep, and returns the first record not yet in completed
    /// files as the writers last reported it (a tick behind: never ahead of what is durable).
    pub fn tick(&self, next_seq: u64, pressure: Pressure) -> u64 {
        for w in 0..self.writers.len() {
            self.send(w, Task::Tick { next_seq, pressure });
        }
        self.writers
            .iter()
            .map(|w| w.progress.durable.load(Ordering::Acquire))
            .min()
            .unwrap_or(next_seq)
    }

    /// How soon a reader's flush waiting for some writer may go, as the writers last said.
    pub fn flush_due_in(&self, now: Instant) -> Option<Duration> {
        self.writers
            .iter()
            .filter_map(|w| {
                *w.progress
                    .flush_due
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
            })
            .map(|at| at.saturating_duration_since(now))
            .min()
    }

    /// Writes everything out and stops the writers; returns the first record not in completed
    /// files (rows that failed keep it before them) and the writers' totals added up.
    pub fn finish(mut self, next_seq: u64) -> (u64, ArchiveTotals) {
        for w in 0..self.writers.len() {
            self.send(w, Task::Finish { next_seq });
        }
        let mut checkpoint = next_seq;
        let mut totals = ArchiveTotals::default();
        for w in &mut self.writers {
            let Some(thread) = w.thread.take() else {
                continue;
            };
            match thread.join() {
                Ok((durable, t)) => {
                    checkpoint = checkpoint.min(durable);
                    totals += t;
                }
                Err(_) => {
                    // Its rows stay in the journal for the next start.
                    tracing::error!("an archive writer thread panicked");
                    checkpoint = checkpoint.min(w.progress.durable.load(Ordering::Acquire));
                }
            }
        }
        (checkpoint, totals)
    }

    /// Waits until every writer has done every task handed to it so far (tests).
    #[cfg(test)]
    pub fn wait_idle(&self) {
        let (tx, rx) = std::sync::mpsc::channel();
        for w in 0..self.writers.len() {
            self.send(w, Task::Done(tx.clone()));
        }
        drop(tx);
        while rx.recv().is_ok() {}
    }

    fn send(&self, w: usize, task: Task) {
        // A writer that is gone panicked: `finish` reports it; its rows stay in the journal.
        let _ = self.writers[w].tasks.send(task);
    }
}

impl Drop for PartitionWriters {
    /// Without [`PartitionWriters::finish`] (a panic, or a test's crash): each writer takes
    /// what is queued and stops without completing its buffers, as a crash would leave them.
    fn drop(&mut self) {
        for w in self.writers.drain(..) {
            let Writer { tasks, thread, .. } = w;
            drop(tasks);
            if let Some(thread) = thread {
                let _ = thread.join();
            }
        }
    }
}

/// A writer thread: takes tasks until `Finish`, or until the consumer goes away without
/// one (a crash, as tests make one: nothing more is completed).
fn run(
    mut archive: Archive,
    me: u8,
    queue: &Receiver<Task>,
    progress: &Progress,
) -> (u64, ArchiveTotals) {
    while let Ok(task) = queue.recv() {
        match task {
            Task::Record { seq, entry, routes } => {
                if let JournalEntry::Events(batch) = &*entry {
                    archive.append_kept(
                        Some(seq),
                        batch,
                        |i| routes.spans.get(i) == Some(&me),
                        |i| routes.logs.get(i) == Some(&me),
                    );
                }
            }
            Task::Tick { next_seq, pressure } => {
                let now = Instant::now();
                let durable = archive.tick(now, next_seq, pressure).unwrap_or(next_seq);
                progress.durable.store(durable, Ordering::Release);
                *progress
                    .flush_due
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner) =
                    archive.flush_due_in(now).map(|d| now + d);
            }
            #[cfg(test)]
            Task::Done(done) => {
                let _ = done.send(());
            }
            Task::Finish { next_seq } => {
                let totals = archive.close();
                return (archive.pinned_record().unwrap_or(next_seq), totals);
            }
        }
    }
    (
        progress.durable.load(Ordering::Acquire),
        ArchiveTotals::default(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partition_always_goes_to_one_writer_and_partitions_spread() {
        let hour = 1_800_000_000_000_000_000i64;
        for n in 1..=8 {
            for t in 0..50 {
                let tenant = format!("tenant-{t}");
                let w = writer_of(Table::Spans, &tenant, hour, n);
                assert!(usize::from(w) < n);
                // Any time within the same hour: the same writer.
                assert_eq!(writer_of(Table::Spans, &tenant, hour + HOUR_NS - 1, n), w);
            }
        }
        let mut per = [0usize; 4];
        for t in 0..400 {
            per[usize::from(writer_of(Table::Spans, &format!("t{t}"), 0, 4))] += 1;
        }
        assert!(per.iter().all(|&c| c > 60), "{per:?}");
        // Names a load generator or a fleet gives, 20 tenants hour after hour: each writer's
        // share over two days within 15% of an even one.
        let now = 1_796_518_000_000_000_000i64;
        for n in [2usize, 4] {
            let mut per = vec![0usize; n];
            for h in 0..48 {
                for t in 0..20 {
                    let w = writer_of(Table::Spans, &format!("tenant-{t}"), now + h * HOUR_NS, n);
                    per[usize::from(w)] += 1;
                }
            }
            let even = 960 / n;
            assert!(
                per.iter().all(|&c| c.abs_diff(even) * 100 <= even * 15),
                "{n} writers: {per:?}"
            );
        }
    }

    #[test]
    fn routes_name_each_writer_with_an_item_once() {
        let routes = Routes {
            spans: vec![2, NOT_KEPT, 0, 2],
            logs: vec![0, 3],
        };
        assert_eq!(routes.writers(4), vec![0, 2, 3]);
        assert_eq!(Routes::default().writers(4), Vec::<usize>::new());
    }
}
