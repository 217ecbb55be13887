//! The archive as a journal consumer: exactly once, across crashes.
//!
//! Every completed file is named after the journal records it holds (`_j<journal>_<first>-
//! <last>`), and files are completed only between records, so a file holds all of a record's
//! rows for its partition or none. The checkpoint is the first record with rows in a file not
//! yet complete. After a crash the archive replays from there and, for records read before the
//! crash, skips the rows of each partition whose completed files already reach that record.
//! A span sent twice (a client retrying a request whose answer it lost) is dropped by its
//! tenant, trace and span id within a window of recent spans.

use std::collections::VecDeque;
use std::hash::{BuildHasher, RandomState};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::writers::{writer_of, PartitionWriters, Routes, StartError, NOT_KEPT};
use super::{Archive, ArchiveTotals};
use crate::archive::layout::names::last_record_in;
use crate::archive::layout::partition::PartitionKey;
use crate::archive::table::Table;
use crate::event::{EventBatch, SpanRecord};
use crate::journal::codec::{self, JournalEntry};
use crate::journal::consume::Consumer;
use crate::journal::head::JournalHead;
use crate::journal::segment::{self, SegmentReader};
use crate::metrics::Metrics;

/// The last spans seen, by tenant, trace and span id, to drop repeats.
pub struct RecentSpans {
    hasher: RandomState,
    /// Keyed SipHash values of the spans' ids (set membership needs no second keyed hash).
    seen: crate::maps::FastSet<u64>,
    order: VecDeque<u64>,
    capacity: usize,
}

/// Memory of one span remembered, at most (a hash in the set at its lowest load, one in the
/// order queue at its emptiest).
pub const RECENT_SPAN_BYTES: usize = 32;

impl RecentSpans {
    /// Memory of a window of `capacity` spans once full, at most.
    pub fn memory_bytes(capacity: usize) -> usize {
        capacity.saturating_mul(RECENT_SPAN_BYTES)
    }

    /// A window of `capacity` spans. Keys are hashed with a per-process random key, so a
    /// sender cannot craft a span that collides with another tenant's.
    pub fn new(capacity: usize) -> RecentSpans {
        RecentSpans {
            hasher: RandomState::new(),
            seen: crate::maps::FastSet::with_capacity_and_hasher(
                capacity.min(1 << 16),
                Default::default(),
            ),
            order: VecDeque::with_capacity(capacity.min(1 << 16)),
            capacity: capacity.max(1),
        }
    }

    fn key(&self, span: &SpanRecord) -> u64 {
        self.hasher
            .hash_one((span.tenant.as_str(), span.trace_id, span.span_id))
    }

    /// Remembers `span`; false if it was seen within the window.
    pub fn insert(&mut self, span: &SpanRecord) -> bool {
        let key = self.key(span);
        if !self.seen.insert(key) {
            return false;
        }
        self.order.push_back(key);
        if self.order.len() > self.capacity {
            if let Some(old) = self.order.pop_front() {
                self.seen.remove(&old);
            }
        }
        true
    }

    /// Spans remembered.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// True when nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// Remembers the spans of the journal records just before `before` (the archive's
    /// checkpoint), reading back whole segments up to [`SEED_BYTES`]: after a restart, the
    /// requests a client may resend are the last ones acknowledged (or not) before the crash.
    /// Returns how many spans were read.
    pub fn seed_from_journal(&mut self, journal_dir: &Path, before: u64) -> usize {
        let Ok(segments) = segment::list(journal_dir) else {
            return 0;
        };
        // Newest first, the segments holding records before `before`, until the byte budget.
        let mut chosen = Vec::new();
        let mut bytes = 0u64;
        for s in segments.iter().rev().filter(|s| s.first_seq < before) {
            bytes += std::fs::metadata(&s.path).map_or(0, |m| m.len());
            chosen.push(s);
            if bytes >= SEED_BYTES {
                break;
            }
        }
        let mut n = 0;
        for s in chosen.into_iter().rev() {
            let Ok(Ok(mut reader)) = SegmentReader::open(&s.path) else {
                continue;
            };
            while let Ok(Ok((seq, payload))) = reader.next_record() {
                if seq >= before {
                    break;
                }
                if let Ok(JournalEntry::Events(batch)) = codec::decode(&payload) {
                    for span in &batch.spans {
                        self.insert(span);
                        n += 1;
                    }
                }
            }
        }
        n
    }
}

/// How much of the journal before the archive's checkpoint is read back at start to refill
/// the window of recent spans.
pub const SEED_BYTES: u64 = 64 << 20;

/// Where the archive consumer's rows go: one archive on the consumer's own thread, or
/// writer threads (see [`super::writers`]).
pub enum ArchiveSink {
    /// One archive, written on the consumer's thread.
    Here(Box<Archive>),
    /// Several archives, each on a thread of its own, each with its own partitions.
    Writers(PartitionWriters),
}

impl ArchiveSink {
    /// One archive written here, or one writer thread per archive when there are several;
    /// each names its files after journal `journal_id`, whose records before `checkpoint`
    /// are not theirs to write.
    pub fn of(
        archives: Vec<Archive>,
        journal_id: &str,
        checkpoint: u64,
    ) -> Result<ArchiveSink, StartError> {
        let mut archives: Vec<Archive> = archives
            .into_iter()
            .map(|a| a.with_journal_id(journal_id).for_consumer("archive"))
            .collect();
        if archives.len() == 1 {
            if let Some(a) = archives.pop() {
                return Ok(ArchiveSink::Here(Box::new(a)));
            }
        }
        Ok(ArchiveSink::Writers(PartitionWriters::start(
            archives, checkpoint,
        )?))
    }
}

/// The archive reading the journal.
pub struct ArchiveConsumer {
    sink: ArchiveSink,
    data_dir: PathBuf,
    journal_id: String,
    /// Records before this were read before the last stop, and may be in completed files.
    replay_before: u64,
    /// Per partition, the last record in its completed files (looked up once, for replay).
    completed: crate::maps::FastMap<PartitionKey, u64>,
    recent: RecentSpans,
    pause: Duration,
    metrics: Arc<Metrics>,
}

impl ArchiveConsumer {
    /// The archive consuming journal `journal_id`; records before `replay_before` were read
    /// by an earlier process.
    pub fn new(
        sink: ArchiveSink,
        data_dir: &Path,
        journal_id: &str,
        replay_before: u64,
        recent: RecentSpans,
        pause: Duration,
        metrics: Arc<Metrics>,
    ) -> ArchiveConsumer {
        ArchiveConsumer {
            sink,
            data_dir: data_dir.to_path_buf(),
            journal_id: journal_id.to_string(),
            replay_before,
            completed: crate::maps::map(),
            recent,
            pause,
            metrics,
        }
    }

    /// True if the rows of record `seq` in `table` for `tenant` at `time_ns` are already in a
    /// completed file. Only records read before a restart can be: for the others no partition
    /// key is built (this runs for every row).
    fn already_archived(&mut self, table: Table, tenant: &str, time_ns: i64, seq: u64) -> bool {
        if seq >= self.replay_before {
            return false;
        }
        let key = PartitionKey::new(table, tenant, time_ns);
        let last = match self.completed.get(&key) {
            Some(&last) => last,
            None => {
                let last = last_record_in_folder(&key.dir(&self.data_dir), &self.journal_id);
                self.completed.insert(key, last);
                last
            }
        };
        seq <= last
    }

    /// Which spans and logs to write: not those already archived (replay) nor spans seen
    /// before (repeats).
    fn keep(&mut self, seq: u64, batch: &EventBatch) -> (Vec<bool>, Vec<bool>) {
        let mut replayed = 0u64;
        let mut repeated = 0u64;
        let mut spans = Vec::with_capacity(batch.spans.len());
        for span in &batch.spans {
            let keep = if self.already_archived(Table::Spans, &span.tenant, span.start_ns, seq) {
                self.recent.insert(span);
                replayed += 1;
                false
            } else if self.recent.insert(span) {
                true
            } else {
                repeated += 1;
                false
            };
            spans.push(keep);
        }
        let mut logs = Vec::with_capacity(batch.logs.len());
        for log in &batch.logs {
            let archived = self.already_archived(Table::Logs, &log.tenant, log.time_ns, seq);
            replayed += u64::from(archived);
            logs.push(!archived);
        }
        if repeated > 0 {
            self.metrics.journal.repeated_spans(repeated);
        }
        if replayed > 0 {
            self.metrics.journal.replayed_rows(replayed);
        }
        (spans, logs)
    }
}

/// The last record of journal `id` in the completed files of one partition folder (0: none).
fn last_record_in_folder(dir: &Path, id: &str) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str().and_then(|n| last_record_in(n, id)))
        .max()
        .unwrap_or(0)
}

impl Consumer for ArchiveConsumer {
    type Totals = ArchiveTotals;

    fn record(&mut self, seq: u64, entry: &Arc<JournalEntry>) {
        let JournalEntry::Events(batch) = &**entry else {
            return;
        };
        let (spans, logs) = self.keep(seq, batch);
        match &mut self.sink {
            ArchiveSink::Here(archive) => {
                archive.append_kept(Some(seq), batch, |i| spans[i], |i| logs[i]);
            }
            ArchiveSink::Writers(writers) => {
                let routes = routes(batch, (&spans, &logs), writers.count());
                writers.record(seq, entry, routes);
            }
        }
        if !self.pause.is_zero() {
            std::thread::sleep(self.pause);
        }
    }

    fn tick(&mut self, next_seq: u64, head: &JournalHead) -> u64 {
        match &mut self.sink {
            ArchiveSink::Here(archive) => archive
                .tick(Instant::now(), next_seq, head.pressure())
                .unwrap_or(next_seq),
            ArchiveSink::Writers(writers) => writers.tick(next_seq, head.pressure()),
        }
    }

    fn flush_due_in(&self) -> Option<Duration> {
        match &self.sink {
            ArchiveSink::Here(archive) => archive.flush_due_in(Instant::now()),
            ArchiveSink::Writers(writers) => writers.flush_due_in(Instant::now()),
        }
    }

    fn finish(self, next_seq: u64) -> (u64, ArchiveTotals) {
        match self.sink {
            ArchiveSink::Here(mut archive) => {
                let totals = archive.close();
                // Rows that failed to be written keep the checkpoint before them.
                (archive.pinned_record().unwrap_or(next_seq), totals)
            }
            ArchiveSink::Writers(writers) => writers.finish(next_seq),
        }
    }
}

/// Which of `n` writers takes each kept span and log record of `batch` (by partition).
fn routes(batch: &EventBatch, (spans, logs): (&[bool], &[bool]), n: usize) -> Routes {
    let route = |keep: bool, table: Table, tenant: &str, at: i64| {
        if keep {
            writer_of(table, tenant, at, n)
        } else {
            NOT_KEPT
        }
    };
    Routes {
        spans: batch
            .spans
            .iter()
            .zip(spans)
            .map(|(s, &k)| route(k, Table::Spans, &s.tenant, s.start_ns))
            .collect(),
        logs: batch
            .logs
            .iter()
            .zip(logs)
            .map(|(l, &k)| route(k, Table::Logs, &l.tenant, l.time_ns))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::fixtures;

    #[test]
    fn the_window_forgets_the_oldest_and_tells_tenants_apart() {
        let mut recent = RecentSpans::new(2);
        let a = SpanRecord {
            span_id: [1; 8],
            ..fixtures::span()
        };
        let b = SpanRecord {
            span_id: [2; 8],
            ..fixtures::span()
        };
        let c = SpanRecord {
            span_id: [3; 8],
            ..fixtures::span()
        };
        let a_elsewhere = SpanRecord {
            tenant: "other".into(),
            ..a.clone()
        };
        assert!(recent.insert(&a));
        assert!(!recent.insert(&a));
        assert!(recent.insert(&a_elsewhere));
        assert!(recent.insert(&b));
        assert!(recent.insert(&c));
        // `a` fell out of the window of two.
        assert!(recent.insert(&a));
        assert_eq!(recent.len(), 2);
    }

    #[test]
    fn file_names_carry_their_records() {
        let suffix = crate::archive::layout::names::records_suffix("ab12cd34", (17, 42));
        let name = format!("part-20261130T120000000Z-0a0b0c0d-000003{suffix}.parquet");
        assert_eq!(last_record_in(&name, "ab12cd34"), Some(42));
        assert_eq!(last_record_in(&name, "ffffffff"), None);
        assert_eq!(last_record_in("part-x-y-000001.parquet", "ab12cd34"), None);
        assert_eq!(
            last_record_in(&format!(".{name}.inprogress"), "ab12cd34"),
            None
        );
    }
}

#[cfg(test)]
mod replay_tests {
    use super::*;
    use crate::archive::config::ArchiveConfig;
    use crate::event::fixtures;
    use arrow::array::{Array, StringArray};
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

    const HOUR: i64 = 3_600_000_000_000;

    fn span(tenant: &str, n: u8, hour: i64) -> SpanRecord {
        SpanRecord {
            tenant: tenant.into(),
            span_id: [n; 8],
            start_ns: 1_800_000_000_000_000_000 + hour * HOUR,
            ..fixtures::span()
        }
    }

    fn batch(spans: Vec<SpanRecord>) -> Arc<JournalEntry> {
        Arc::new(JournalEntry::Events(EventBatch {
            spans,
            logs: Vec::new(),
        }))
    }

    fn consumer(dir: &Path, replay_before: u64) -> ArchiveConsumer {
        consumer_with(dir, replay_before, 1, &ArchiveConfig::default(), 1)
    }

    /// A consumer writing through `writers` archives of `config`, whose checkpoint at start
    /// is `checkpoint`.
    fn consumer_with(
        dir: &Path,
        replay_before: u64,
        writers: usize,
        config: &ArchiveConfig,
        checkpoint: u64,
    ) -> ArchiveConsumer {
        let metrics = Arc::new(Metrics::new());
        let archives = (0..writers)
            .map(|_| {
                Archive::open(
                    dir,
                    &[Table::Spans, Table::Logs],
                    config,
                    "0a0b0c0d".into(),
                    Arc::clone(&metrics),
                )
                .expect("archive")
            })
            .collect();
        let sink = ArchiveSink::of(archives, "feedf00d", checkpoint).expect("writers");
        ArchiveConsumer::new(
            sink,
            dir,
            "feedf00d",
            replay_before,
            RecentSpans::new(1000),
            Duration::ZERO,
            metrics,
        )
    }

    /// Every archived span id, in completed files only.
    fn archived(dir: &Path) -> Vec<String> {
        let mut out = Vec::new();
        let mut stack = vec![dir.join("spans")];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).expect("read_dir").flatten() {
                let p = e.path();
                if p.is_dir() {
                    stack.push(p);
                } else if p.extension().is_some_and(|x| x == "parquet") {
                    let f = std::fs::File::open(&p).expect("open");
                    let reader = ParquetRecordBatchReaderBuilder::try_new(f)
                        .expect("parquet")
                        .build()
                        .expect("reader");
                    for b in reader {
                        let b = b.expect("batch");
                        let col = b.column_by_name("span_id").expect("span_id");
                        let ids = col.as_any().downcast_ref::<StringArray>().expect("utf8");
                        for i in 0..ids.len() {
                            out.push(ids.value(i).to_string());
                        }
                    }
                }
            }
        }
        out.sort();
        out
    }

    #[test]
    fn a_crash_after_some_files_completed_replays_each_span_exactly_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let head = JournalHead::new(1, 0, u64::MAX);
        // Records 1..=4 over two partitions (hour 0 and hour 1 of tenant a).
        let records = [
            vec![span("a", 1, 0), span("a", 2, 1)],
            vec![span("a", 3, 0)],
            vec![span("a", 4, 1), span("a", 5, 0)],
            vec![span("a", 6, 0)],
        ];
        let mut c = consumer(dir.path(), 1);
        for (i, spans) in records.iter().enumerate().take(3) {
            c.record(i as u64 + 1, &batch(spans.clone()));
        }
        // Hour 1's file (records 1 and 3) completes; hour 0's (records 1..3) stays open.
        let hour1 = PartitionKey::new(Table::Spans, "a", span("a", 0, 1).start_ns);
        here(&mut c).complete(&hour1);
        assert_eq!(c.tick(4, &head), 1, "hour 0's open file pins record 1");
        assert_eq!(archived(dir.path()), vec![hex_of(2), hex_of(4)]);
        // Crash: the open file is lost; record 4 was journalled but never read.
        drop(c);

        let mut c = consumer(dir.path(), 5);
        for (i, spans) in records.iter().enumerate() {
            c.record(i as u64 + 1, &batch(spans.clone()));
        }
        // A client resending span 6 after the crash: dropped as a repeat.
        c.record(5, &batch(vec![span("a", 6, 0)]));
        let (next, _) = c.finish(6);
        assert_eq!(next, 6);
        assert_eq!(
            archived(dir.path()),
            (1..=6).map(hex_of).collect::<Vec<_>>()
        );
    }

    /// The one archive of a consumer writing on its own thread.
    fn here(c: &mut ArchiveConsumer) -> &mut Archive {
        match &mut c.sink {
            ArchiveSink::Here(archive) => archive,
            ArchiveSink::Writers(_) => panic!("one archive, written here"),
        }
    }

    fn hex_of(n: u8) -> String {
        hex::encode([n; 8])
    }

    #[test]
    fn rows_that_cannot_be_written_keep_the_checkpoint_before_them() {
        let dir = tempfile::tempdir().expect("tempdir");
        let head = JournalHead::new(1, 0, u64::MAX);
        let mut c = consumer(dir.path(), 1);
        c.record(1, &batch(vec![span("a", 1, 0)]));
        // Tenant b's partition folder cannot be made: a file stands where it would go.
        std::fs::write(dir.path().join("spans").join("tenant=b"), b"in the way").expect("block");
        c.record(2, &batch(vec![span("b", 2, 0)]));
        c.record(3, &batch(vec![span("a", 3, 0)]));
        let a_hour0 = PartitionKey::new(Table::Spans, "a", span("a", 0, 0).start_ns);
        here(&mut c).complete(&a_hour0);
        assert_eq!(
            c.tick(4, &head),
            2,
            "record 2 failed and holds the checkpoint"
        );
        let (checkpoint, totals) = c.finish(4);
        assert_eq!(checkpoint, 2);
        assert_eq!(totals.failed_rows, 1);
        assert_eq!(archived(dir.path()), vec![hex_of(1), hex_of(3)]);
    }

    /// A span of `tenant` in hour `hour`, with id `n` (two bytes of it).
    fn numbered(tenant: &str, n: u16, hour: i64) -> SpanRecord {
        let [hi, lo] = n.to_be_bytes();
        SpanRecord {
            span_id: [hi, lo, 7, 7, 7, 7, 7, 7],
            ..span(tenant, 0, hour)
        }
    }

    fn numbered_hex(n: u16) -> String {
        let [hi, lo] = n.to_be_bytes();
        hex::encode([hi, lo, 7, 7, 7, 7, 7, 7])
    }

    /// Files complete at every tick (age zero); no compaction thread.
    fn eager() -> ArchiveConfig {
        sized(true, 128 << 20)
    }

    /// Files complete at every tick (`at_tick`) or not, and once a buffer holds `bytes`;
    /// no compaction thread.
    fn sized(at_tick: bool, bytes: u64) -> ArchiveConfig {
        let age = if at_tick {
            Duration::ZERO
        } else {
            Duration::from_secs(3600)
        };
        ArchiveConfig {
            max_file_age: crate::units::HumanDuration(age),
            max_file_bytes: crate::units::ByteSize(bytes),
            compact_every: crate::units::LimitDuration(Duration::ZERO),
            ..ArchiveConfig::default()
        }
    }

    /// Reads `records` (from `first`, numbered from 1) through `c`, ticking after those
    /// `ticks` marks, and after a tick, where `idle` marks it, letting the writers do all
    /// they were handed before the next (so it reads what they report at once, the most a
    /// consumer can get ahead); returns the checkpoint as the consume loop would have saved it.
    fn feed(
        c: &mut ArchiveConsumer,
        records: &[Arc<JournalEntry>],
        (first, end): (u64, u64),
        (ticks, idle): (&[bool], &[bool]),
        mut checkpoint: u64,
    ) -> u64 {
        let head = JournalHead::new(1, 0, u64::MAX);
        let marked = |marks: &[bool], seq: u64| marks.get(seq as usize).copied().unwrap_or(false);
        for seq in first..end {
            c.record(seq, &records[seq as usize - 1]);
            if marked(ticks, seq) {
                checkpoint = checkpoint.max(c.tick(seq + 1, &head));
                if let (true, ArchiveSink::Writers(w)) = (marked(idle, seq), &c.sink) {
                    w.wait_idle();
                }
            }
        }
        checkpoint
    }

    #[test]
    fn writer_threads_write_every_partition_and_report_where_the_checkpoint_is() {
        let dir = tempfile::tempdir().expect("tempdir");
        let records: Vec<_> = (0..6u16)
            .map(|r| {
                batch(
                    (0..8u16)
                        .map(|i| {
                            numbered(
                                ["a", "b", "c"][usize::from(i % 3)],
                                r * 8 + i,
                                i64::from(i % 2),
                            )
                        })
                        .collect(),
                )
            })
            .collect();
        let mut c = consumer_with(dir.path(), 1, 3, &eager(), 1);
        let head = JournalHead::new(1, 0, u64::MAX);
        feed(&mut c, &records, (1, 4), (&[], &[]), 1);
        // The answer is what the writers last reported: the start (none has ticked yet) or,
        // if all three took the tick already, record 4; never a record in between.
        let first = c.tick(4, &head);
        assert!(first == 1 || first == 4, "{first}");
        // Each writer answers at its own tick (files of age zero complete then); the
        // consumer sees the answers at a later tick.
        let deadline = Instant::now() + Duration::from_secs(30);
        while c.tick(4, &head) != 4 {
            assert!(
                Instant::now() < deadline,
                "the writers never reported record 4"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(archived(dir.path()).len(), 24);
        feed(&mut c, &records, (4, 7), (&[], &[]), 4);
        let (checkpoint, totals) = c.finish(7);
        assert_eq!(checkpoint, 7);
        assert_eq!(totals.span_rows, 48);
        assert_eq!(totals.failed_rows, 0);
        let mut all: Vec<String> = (0..48).map(numbered_hex).collect();
        all.sort();
        assert_eq!(archived(dir.path()), all);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 40, ..Default::default() })]

        /// Any writer counts before and after a crash, any ticks and any crash point: every
        /// span is archived exactly once, and the checkpoint never passes a lost row.
        #[test]
        fn every_span_is_archived_once_across_a_crash_at_any_writer_counts(
            shape in proptest::collection::vec(
                proptest::collection::vec((0usize..3, 0i64..3), 1..6), 1..10),
            ticks in proptest::collection::vec(proptest::bool::ANY, 12),
            idle in proptest::collection::vec(proptest::bool::ANY, 12),
            crash_at in 0u64..11,
            before in 1usize..=4,
            after in 1usize..=4,
            (at_tick, kib) in (proptest::bool::ANY, 1u64..96),
        ) {
            // Files complete at ticks, or only by size: then a tick finds some buffers open.
            let config = sized(at_tick, kib << 10);
            let dir = tempfile::tempdir().expect("tempdir");
            let mut n = 0u16;
            let records: Vec<_> = shape
                .iter()
                .map(|spans| {
                    batch(spans.iter().map(|&(t, hour)| {
                        n += 1;
                        numbered(["a", "b", "c"][t], n, hour)
                    }).collect())
                })
                .collect();
            let end = records.len() as u64 + 1;
            let crash = crash_at.min(end - 1) + 1;
            let mut c = consumer_with(dir.path(), 1, before, &config, 1);
            let checkpoint = feed(&mut c, &records, (1, crash), (&ticks, &idle), 1);
            // The crash: buffers lost, the checkpoint as last saved.
            drop(c);
            let mut c = consumer_with(dir.path(), crash, after, &config, checkpoint);
            feed(&mut c, &records, (checkpoint, end), (&ticks, &idle), checkpoint);
            let (last, totals) = c.finish(end);
            proptest::prop_assert_eq!(last, end);
            proptest::prop_assert_eq!(totals.failed_rows, 0);
            let mut all: Vec<String> = (1..=n).map(numbered_hex).collect();
            all.sort();
            proptest::prop_assert_eq!(archived(dir.path()), all);
        }
    }
}
