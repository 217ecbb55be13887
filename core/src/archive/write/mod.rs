//! The writer: [`Archive`], the partitioned Parquet writer for all tables.
//!
//! Rows wait in per-partition memory buffers ([`buffer`]) under one budget
//! (`archive.buffer_bytes`) for the whole archive; a buffer becomes one completed file when it
//! reaches its age or size, or, largest first, when the archive is over its budget. Files are
//! completed only between journal records, and everything handed to the archive is in a
//! completed file once [`Archive::close`] returns. Beside the writer: readers' copies of the
//! buffers ([`snapshot`]) and their flushes ([`flush`]), the journal consumer writing through
//! it exactly once ([`consumer`]) and its writer threads ([`writers`]).

pub mod buffer;
pub mod consumer;
pub mod flush;
pub mod snapshot;
pub mod writers;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use parquet::file::properties::WriterProperties;

use crate::archive::compact;
use crate::archive::config::{file_settings, ArchiveConfig};
use crate::archive::error::ArchiveError;
use crate::archive::layout::lock;
use crate::archive::layout::names::{buffer_mark, records_suffix};
use crate::archive::layout::partition::{
    self, partitions, CompletedFile, PartitionDir, PartitionKey, IN_PROGRESS_SUFFIX,
};
use crate::archive::manifest;
use crate::archive::table::encoding::{writer_properties, FileSettings};
use crate::archive::table::rows::{downcast, new_rows, ArchiveRow, TableRows};
use crate::archive::table::schema::{LogRows, SpanRows};
use crate::archive::table::Table;
use crate::event::EventBatch;
use crate::journal::head::Pressure;
use crate::metrics::Metrics;
use buffer::{PartitionBuffer, SharedBudget};

/// Early write-outs under journal pressure happen at most this often.
pub const PRESSURE_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// How often buffers holding the journal back are written out while it is nearly full:
/// receivers refuse data until the journal frees space, and writing out only every
/// [`PRESSURE_EVERY`] freed it in bursts that a sender retrying once a second could miss for
/// half a minute.
pub const NEARLY_FULL_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

const HOUR_NS: i64 = 3_600_000_000_000;

/// A partition's newest rows are encoded once their builders hold this much (or
/// `batch_rows` rows): small enough that a thousand quiet partitions hold little raw data,
/// large enough that encoding is done in batches, not row by row.
const BATCH_BYTES: usize = 256 * 1024;

/// Buffers written out together share their filesystem syncs, this many at a time (each holds
/// its partition's lock file open meanwhile, so the group also bounds descriptors).
const WRITE_GROUP: usize = 256;
/// Fewer buffers than this are written one by one (two fsyncs each are cheaper than two
/// syncs of a filesystem that other programs may be writing to).
const GROUP_FROM: usize = 16;

/// Totals of what the archive wrote, reported when it closes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ArchiveTotals {
    /// Span rows in completed files.
    pub span_rows: u64,
    /// Log rows in completed files.
    pub log_rows: u64,
    /// Request rows in completed files.
    pub request_rows: u64,
    /// Alarm rows in completed files.
    pub alarm_rows: u64,
    /// Finding rows in completed files.
    pub finding_rows: u64,
    /// Completed files.
    pub files: u64,
    /// Rows lost to write errors (each also logged and counted in metrics).
    pub failed_rows: u64,
}

impl std::ops::AddAssign for ArchiveTotals {
    /// Adds another writer's totals (the archive's writer threads each report their own).
    fn add_assign(&mut self, other: ArchiveTotals) {
        self.span_rows += other.span_rows;
        self.log_rows += other.log_rows;
        self.request_rows += other.request_rows;
        self.alarm_rows += other.alarm_rows;
        self.finding_rows += other.finding_rows;
        self.files += other.files;
        self.failed_rows += other.failed_rows;
    }
}

/// Whether writing a buffer out may wait for a compaction holding its partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wait {
    /// Skip the partition for now if it is being compacted.
    No,
    /// Wait for the compaction (the rows must be out: shutdown, journal pressure).
    Yes,
}

/// The partitioned Parquet writer for all tables.
pub struct Archive {
    /// Where completed files are recorded (shared by the instance's writers).
    manifest: Arc<manifest::Manifest>,
    data_dir: PathBuf,
    settings: FileSettings,
    batch_rows: usize,
    instance_id: String,
    sequence: u64,
    /// Rows not yet in a completed file, by partition.
    buffers: crate::maps::FastMap<PartitionKey, PartitionBuffer>,
    /// Buffers per table, for the metric.
    per_table: [usize; 5],
    /// Bytes this writer holds in `buffers`; also counted in `budget`.
    held: usize,
    budget: Arc<SharedBudget>,
    /// This writer's slot in `budget`, where it publishes `largest`.
    budget_slot: Option<usize>,
    /// Bytes of this writer's largest buffer, as last published.
    largest: usize,
    /// Parquet writer settings per table (by [`table_index`]).
    props: [WriterProperties; 5],
    /// Partitions whose buffer reached `max_file_bytes` during the current call.
    due: Vec<PartitionKey>,
    /// Names the journal whose records completed files hold (see [`records_suffix`]).
    journal_id: Option<String>,
    /// The first journal record with rows that could not be written: the checkpoint stays
    /// before it, so a restart writes them from the journal.
    failed_from: Option<u64>,
    metrics: Arc<Metrics>,
    totals: ArchiveTotals,
    compactor: Option<compact::background::Background>,
    /// Flush requests of readers (see [`flush`]).
    flush: Option<flush::FlushDue>,
    /// The consumer writing through this archive, for its logs.
    consumer: &'static str,
    /// When buffers were last written out early for journal pressure.
    last_pressure: Instant,
}

fn table_index(t: Table) -> usize {
    match t {
        Table::Spans => 0,
        Table::Logs => 1,
        Table::Requests => 2,
        Table::Alarms => 3,
        Table::Findings => 4,
    }
}

impl Archive {
    /// Prepares the archive's `tables` under `data_dir`. Files a previous process left
    /// half-written are removed: without the journal their rows cannot be completed. Starts
    /// the background compaction of these tables when `compact_every` is not `0s`.
    pub fn open(
        data_dir: &Path,
        tables: &[Table],
        config: &ArchiveConfig,
        instance_id: String,
        metrics: Arc<Metrics>,
    ) -> Result<Archive, ArchiveError> {
        for &table in tables {
            let dir = data_dir.join(table.as_str());
            std::fs::create_dir_all(&dir).map_err(|e| ArchiveError::io(&dir, e))?;
            let removed = remove_in_progress(data_dir, table)?;
            if removed > 0 {
                tracing::warn!(
                    table = table.as_str(),
                    files = removed,
                    "removed unfinished archive files left by an earlier process"
                );
                metrics.archive_abandoned_files(table.as_str(), removed);
            }
        }
        let compactor = (!config.compact_every.0.is_zero()).then(|| {
            compact::background::Background::start(
                data_dir,
                tables,
                compact::policy::Policy::from_config(config),
                instance_id.clone(),
                Arc::clone(&metrics),
            )
        });
        let settings = file_settings(config);
        let budget = SharedBudget::for_data_dir(data_dir, config.buffer_bytes.as_usize());
        let manifest =
            manifest::Manifest::shared(data_dir, &instance_id, &config.manifest_signing_key_file)
                .map_err(|e| ArchiveError::io(&data_dir.join(manifest::DIR), e))?;
        Ok(Archive {
            manifest,
            data_dir: data_dir.to_path_buf(),
            batch_rows: config.batch_rows.0,
            instance_id,
            sequence: 0,
            buffers: crate::maps::map(),
            per_table: [0; 5],
            held: 0,
            budget_slot: budget.register(),
            budget,
            largest: 0,
            props: [
                writer_properties(&settings, Table::Spans)?,
                writer_properties(&settings, Table::Logs)?,
                writer_properties(&settings, Table::Requests)?,
                writer_properties(&settings, Table::Alarms)?,
                writer_properties(&settings, Table::Findings)?,
            ],
            settings,
            due: Vec::new(),
            journal_id: None,
            failed_from: None,
            metrics,
            totals: ArchiveTotals::default(),
            compactor: compactor.flatten(),
            flush: None,
            consumer: "archive",
            last_pressure: Instant::now(),
        })
    }

    /// Names completed files after the journal records they hold, for exactly-once replay.
    pub fn with_journal_id(mut self, journal_id: &str) -> Archive {
        self.journal_id = Some(journal_id.to_string());
        self
    }

    /// Takes readers' flush requests from `point` (see [`flush`]).
    pub fn with_flush(mut self, point: Arc<flush::FlushPoint>) -> Archive {
        self.flush = Some(flush::FlushDue::new(point));
        self
    }

    /// Names the journal consumer writing through this archive (for its logs).
    pub fn for_consumer(mut self, consumer: &'static str) -> Archive {
        self.consumer = consumer;
        self
    }

    /// The archive's upkeep, at each tick of its consumer (between records): writes out the
    /// buffers that reached their age or size; serves readers' flush requests once the
    /// consumer has read what they asked for (`next_seq`: the first record not yet handed
    /// over); and while the journal is under `pressure` (see
    /// `journal::head::JournalHead::pressure`), writes out the buffers that hold it back.
    /// Returns [`Archive::pinned_record`] after all that.
    pub fn tick(&mut self, now: Instant, next_seq: u64, pressure: Pressure) -> Option<u64> {
        self.complete_due(now);
        self.copy_if_asked(next_seq);
        self.flush_if_asked(next_seq);
        self.relieve_journal(pressure, next_seq);
        self.pinned_record()
    }

    /// Answers readers waiting for copies of the buffers once the consumer has read what they
    /// asked for. Between records.
    fn copy_if_asked(&mut self, next_seq: u64) {
        let due = self
            .flush
            .as_ref()
            .map(|f| f.copies_due(next_seq))
            .unwrap_or_default();
        if due.is_empty() {
            return;
        }
        let copies = self.snapshot();
        for tx in due {
            // A reader that gave up meanwhile is no concern of the writer's.
            let _ = tx.send(copies.clone());
        }
    }

    /// Copies of what every buffer holds, each a complete Parquet file under the path of the
    /// buffer's partition (see [`snapshot`]). A buffer whose copy fails is left out (and
    /// logged); its rows stay buffered.
    pub fn snapshot(&mut self) -> Vec<snapshot::BufferedFile> {
        let mut out = Vec::new();
        let mut change = 0isize;
        for (key, buf) in &mut self.buffers {
            let props = &self.props[table_index(key.table)];
            let (copies, delta) = match buf.snapshot(props) {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(table = key.table.as_str(), error = %e, "archive buffer could not be copied for a reader");
                    continue;
                }
            };
            change += delta;
            let dir = key.dir(Path::new(""));
            let mark = buffer_mark(&self.instance_id, buf.sequence);
            for (i, (data, rows)) in copies.into_iter().enumerate() {
                let path = dir.join(format!("buffered{mark}-{i}.parquet"));
                out.push(snapshot::BufferedFile {
                    entry: snapshot::BufferedFileEntry {
                        // Partition folders are made of `/`-free values (see `partition`).
                        path: path.to_string_lossy().into_owned(),
                        mark: mark.clone(),
                        rows,
                        bytes: data.len() as u64,
                    },
                    data: data.into(),
                });
            }
        }
        self.held_changed(change);
        self.publish_largest();
        out
    }

    /// Writes out every buffer when a reader asked for it and the consumer has read what the
    /// reader asked for (`next_seq`: the first record not yet handed over). Between records.
    fn flush_if_asked(&mut self, next_seq: u64) {
        let now = Instant::now();
        let Some(n) = self.flush.as_ref().and_then(|f| f.due(next_seq, now)) else {
            return;
        };
        self.complete_all();
        if let Some(f) = &mut self.flush {
            self.metrics
                .reader_flush_write(f.writer(), now.elapsed().as_secs_f64());
            f.flushed(n, now);
        }
        // Flushed files are small: merge them before readers polling in a loop pile them up.
        if let Some(c) = &self.compactor {
            c.flushed();
        }
    }

    /// How soon a reader's flush waiting for this writer may be served (its half-second
    /// spacing), if one waits.
    pub fn flush_due_in(&self, now: Instant) -> Option<std::time::Duration> {
        self.flush.as_ref().and_then(|f| f.due_in(now))
    }

    /// Uses `budget` for the buffered rows instead of the data directory's (tests, tools).
    pub fn with_budget(mut self, budget: Arc<SharedBudget>) -> Archive {
        self.budget.change(-(self.held as isize));
        self.budget.set_largest(self.budget_slot, 0);
        budget.change(self.held as isize);
        self.budget_slot = budget.register();
        budget.set_largest(self.budget_slot, self.largest);
        self.budget = budget;
        self
    }

    /// Publishes this writer's largest buffer in the shared budget, counted afresh.
    fn publish_largest(&mut self) {
        self.largest = self.buffers.values().map(|b| b.bytes()).max().unwrap_or(0);
        self.budget.set_largest(self.budget_slot, self.largest);
    }

    /// Adds a batch of protected events (journal record `seq`, if it came from one). Files
    /// are completed only between records, so a file holds all of a record's rows for its
    /// partition or none.
    pub fn append(&mut self, seq: Option<u64>, batch: &EventBatch) {
        self.append_kept(seq, batch, |_| true, |_| true);
    }

    /// [`Archive::append`] of the spans and log records whose index `spans` and `logs` keep.
    pub fn append_kept(
        &mut self,
        seq: Option<u64>,
        batch: &EventBatch,
        spans: impl Fn(usize) -> bool,
        logs: impl Fn(usize) -> bool,
    ) {
        let kept_spans = batch
            .spans
            .iter()
            .enumerate()
            .filter(|&(i, _)| spans(i))
            .map(|(_, s)| s);
        let records = seq.map(|s| (s, s));
        for group in group_by_partition(kept_spans, |s| (s.tenant.as_str(), s.start_ns)) {
            let key = PartitionKey::new(Table::Spans, &group[0].tenant, group[0].start_ns);
            self.add(key, records, new_rows::<SpanRows>, group.len(), |rows| {
                let rows = downcast::<SpanRows>(rows)?;
                group.iter().try_for_each(|s| rows.append(s))?;
                Ok(())
            });
        }
        let kept_logs = batch
            .logs
            .iter()
            .enumerate()
            .filter(|&(i, _)| logs(i))
            .map(|(_, l)| l);
        for group in group_by_partition(kept_logs, |l| (l.tenant.as_str(), l.time_ns)) {
            let key = PartitionKey::new(Table::Logs, &group[0].tenant, group[0].time_ns);
            self.add(key, records, new_rows::<LogRows>, group.len(), |rows| {
                let rows = downcast::<LogRows>(rows)?;
                group.iter().try_for_each(|l| rows.append(l))?;
                Ok(())
            });
        }
        self.settle();
    }

    /// The first journal record with rows not yet in a completed file: everything before it
    /// is in completed files (or was never for this archive).
    pub fn pinned_record(&self) -> Option<u64> {
        self.buffers
            .values()
            .filter_map(|p| p.records.map(|(first, _)| first))
            .chain(self.failed_from)
            .min()
    }

    /// When the journal is over half full (`pressure`), writes out the buffers that hold it
    /// back rather than let receivers refuse data; at most every [`PRESSURE_EVERY`], since
    /// each time makes small files, or every [`NEARLY_FULL_EVERY`] once it is nearly full.
    /// (Whether another consumer is further behind does not matter: waiting for each other,
    /// two consumers could hold the journal full for good.)
    fn relieve_journal(&mut self, pressure: Pressure, next_seq: u64) {
        let every = match pressure {
            Pressure::None => return,
            Pressure::Over => PRESSURE_EVERY,
            Pressure::NearlyFull => NEARLY_FULL_EVERY,
        };
        if self.pinned_record().is_none() || self.last_pressure.elapsed() < every {
            return;
        }
        self.last_pressure = Instant::now();
        tracing::info!(
            consumer = self.consumer,
            "journal over half full: completing archive files early"
        );
        self.complete_records_before(next_seq);
    }

    /// Writes every buffer out as a completed file.
    pub fn complete_all(&mut self) {
        let keys: Vec<PartitionKey> = self.buffers.keys().cloned().collect();
        self.write_out_batched(&keys);
        self.report_buffered();
    }

    /// Partitions with rows not yet in a completed file (each becomes a file when written
    /// out). Zero means everything added is in completed files.
    pub fn open_files(&self) -> usize {
        self.buffers.len()
    }

    /// Bytes of rows this writer holds in memory.
    pub fn buffered_bytes(&self) -> usize {
        self.held
    }

    /// Writes out every buffer holding a journal record before `seq`.
    fn complete_records_before(&mut self, seq: u64) {
        let keys: Vec<PartitionKey> = self
            .buffers
            .iter()
            .filter(|(_, p)| p.records.is_some_and(|(first, _)| first < seq))
            .map(|(k, _)| k.clone())
            .collect();
        self.write_out_batched(&keys);
        self.report_buffered();
    }

    /// Writes out the buffers of `keys` (waiting for a compaction holding one), in groups of
    /// [`WRITE_GROUP`]: each group's files are written under temporary names, made durable by
    /// one `syncfs`, renamed, and the renames made durable by another; a thousand partitions
    /// at shutdown cost a few filesystem syncs instead of two fsyncs each (measured: 8.9 s for
    /// 1,000 files one by one). Fewer than [`GROUP_FROM`] go one by one.
    fn write_out_batched(&mut self, keys: &[PartitionKey]) {
        if keys.len() < GROUP_FROM {
            for key in keys {
                self.write_out(key, Wait::Yes);
            }
            return;
        }
        // Locks are taken in one global order (see `PartitionDir::lock_order`): another
        // instance writing the same partitions at once waits, never deadlocks.
        let mut ordered = keys.to_vec();
        ordered.sort_by_cached_key(|k| PartitionDir::of(k).lock_order());
        for group in ordered.chunks(WRITE_GROUP) {
            self.write_group(group);
        }
    }

    fn write_group(&mut self, keys: &[PartitionKey]) {
        let mut staged = Vec::with_capacity(keys.len());
        for key in keys {
            let part = PartitionDir::of(key);
            let lock = match lock::PartitionLock::acquire(&self.data_dir, &part, true) {
                Ok(l) => l,
                Err(e) => {
                    tracing::warn!(error = %e, "archive partition lock unavailable; writing without it");
                    None
                }
            };
            let Some(buf) = self.take_buffer(key) else {
                continue;
            };
            let (rows, records) = (buf.rows() as u64, buf.records);
            match self.stage_file(key, buf, partition::Durability::Later) {
                Ok(file) => staged.push((key.clone(), lock, file, rows, records)),
                Err(e) => self.fail(key.table, rows, records, &e),
            }
        }
        if staged.is_empty() {
            return;
        }
        if let Err(e) = crate::durable::sync_filesystem(&self.data_dir) {
            let e = ArchiveError::io(&self.data_dir, e);
            for (key, _lock, file, rows, records) in staged {
                file.discard();
                self.fail(key.table, rows, records, &e);
            }
            return;
        }
        let mut published = Vec::with_capacity(staged.len());
        for (key, lock, file, rows, records) in staged {
            match file.publish() {
                Ok(done) => published.push((key, lock, done, records)),
                Err(e) => self.fail(key.table, rows, records, &e),
            }
        }
        if let Err(e) = crate::durable::sync_filesystem(&self.data_dir) {
            // The files may not survive a crash: keep their records in the journal (a restart
            // skips those whose files did survive).
            let e = ArchiveError::io(&self.data_dir, e);
            for (key, _lock, done, records) in published {
                self.fail(key.table, done.rows, records, &e);
            }
            return;
        }
        let entries: Vec<manifest::NewEntry> = published
            .iter()
            .map(|(key, _, done, records)| manifest_entry(key.table, done, *records))
            .collect();
        self.record(&entries);
        for (key, lock, done, _) in published {
            self.count_completed(key.table, &done);
            drop(lock);
        }
    }

    /// Appends completed files to the manifest. A failure is logged and counted, not fatal:
    /// the files are written and their rows safe; `verify` will report them as `extra`.
    fn record(&self, entries: &[manifest::NewEntry]) {
        if let Err(e) = self.manifest.append(entries) {
            self.metrics.manifest_failed(entries.len());
            tracing::error!(
                error = %e,
                manifest = %self.manifest.path().display(),
                files = entries.len(),
                "archive files not recorded in the manifest"
            );
        }
    }

    /// Removes `key`'s buffer from the accounting and returns it.
    fn take_buffer(&mut self, key: &PartitionKey) -> Option<PartitionBuffer> {
        let buf = self.buffers.remove(key)?;
        let i = table_index(key.table);
        self.per_table[i] = self.per_table[i].saturating_sub(1);
        self.metrics.open_files_changed(key.table.as_str(), -1);
        self.held_changed(-(buf.bytes() as isize));
        if buf.bytes() >= self.largest {
            self.publish_largest();
        }
        Some(buf)
    }

    fn count_completed(&mut self, table: Table, done: &CompletedFile) {
        match table {
            Table::Spans => self.totals.span_rows += done.rows,
            Table::Logs => self.totals.log_rows += done.rows,
            Table::Requests => self.totals.request_rows += done.rows,
            Table::Alarms => self.totals.alarm_rows += done.rows,
            Table::Findings => self.totals.finding_rows += done.rows,
        }
        self.totals.files += 1;
        self.metrics
            .archive_file(table.as_str(), done.rows, done.bytes);
        tracing::debug!(path = %done.path.display(), rows = done.rows, bytes = done.bytes, "archive file complete");
    }

    /// Adds a stage's rows, each to the partition of its tenant and hour. Files are completed
    /// only between calls, so a file holds all of a call's rows for its partition or none.
    pub fn append_rows<R: ArchiveRow>(&mut self, rows: &[R]) {
        for group in group_by_partition(rows.iter(), |r| (r.tenant(), r.time_ns())) {
            let key = PartitionKey::new(R::TABLE, group[0].tenant(), group[0].time_ns());
            let seqs = || group.iter().filter_map(|r| r.record());
            let records = seqs().min().zip(seqs().max());
            self.add(key, records, new_rows::<R::Rows>, group.len(), |rows| {
                // Once per partition of the call, not once per row.
                let rows = downcast::<R::Rows>(rows)?;
                group.iter().try_for_each(|r| r.append_to(rows))?;
                Ok(())
            });
        }
        self.settle();
    }

    /// Adds `n` rows of journal `records` (filled into the partition's builders, made by
    /// `new_rows`, by `fill`) to `key`'s buffer.
    fn add(
        &mut self,
        key: PartitionKey,
        records: Option<(u64, u64)>,
        new_rows: fn() -> Box<dyn TableRows>,
        n: usize,
        fill: impl FnOnce(&mut dyn TableRows) -> Result<(), ArchiveError>,
    ) {
        let now = Instant::now();
        let table = key.table;
        let buffer = match self.buffers.entry(key.clone()) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(e) => {
                // The folder appears with the partition's first rows, as readers and
                // operators have come to expect; a failure here shows again when written.
                let _ = std::fs::create_dir_all(e.key().dir(&self.data_dir));
                self.per_table[table_index(table)] += 1;
                self.metrics.open_files_changed(table.as_str(), 1);
                self.sequence += 1;
                e.insert(PartitionBuffer::new(new_rows, now, self.sequence))
            }
        };
        let batch = (self.batch_rows, BATCH_BYTES);
        match buffer.add(records, n, fill, batch, &self.props[table_index(table)]) {
            Ok(delta) => {
                let bytes = buffer.bytes();
                let full = bytes as u64 >= self.settings.max_bytes;
                self.held_changed(delta);
                if bytes > self.largest {
                    self.largest = bytes;
                    self.budget.set_largest(self.budget_slot, bytes);
                }
                if full && !self.due.contains(&key) {
                    self.due.push(key);
                }
            }
            Err(e) => {
                // The builders may be out of step: the buffer goes, and its rows stay in the
                // journal for the next start.
                let (at_stake, records) = (buffer.rows() as u64, buffer.records);
                self.take_buffer(&key);
                self.fail(table, at_stake, records, &e);
            }
        }
    }

    /// Between records: writes out the buffers that reached their size, then, while the
    /// archive holds more than its budget, the largest buffers.
    fn settle(&mut self) {
        for key in std::mem::take(&mut self.due) {
            self.write_out(&key, Wait::No);
        }
        self.relieve_budget();
        self.report_buffered();
    }

    /// Writes out the largest buffers until the shared budget is back to its low-water
    /// mark (or this writer has nothing left), as long as they are the largest of all the
    /// budget's writers (see [`SharedBudget`]; when it is far over, whatever their size).
    /// Partitions being compacted are skipped first, then waited for if the budget is still
    /// exceeded.
    fn relieve_budget(&mut self) {
        if self.budget.over() && self.held > 0 {
            self.close_row_groups();
        }
        for wait in [Wait::No, Wait::Yes] {
            if !self.budget.over() || self.held == 0 {
                return;
            }
            let excess = self.budget.used().saturating_sub(self.budget.low_water());
            let target = self.held.saturating_sub(excess);
            let sizes: Vec<(PartitionKey, usize)> = self
                .buffers
                .iter()
                .map(|(k, b)| (k.clone(), b.bytes()))
                .collect();
            for (key, bytes) in buffer::largest_first(&sizes, self.held, 0) {
                if self.held <= target {
                    break;
                }
                if bytes < self.budget.largest_elsewhere(self.budget_slot)
                    && !self.budget.far_over()
                    && !self.budget.squeezed()
                {
                    // Another writer holds larger buffers: they go first, at its next call.
                    return;
                }
                self.write_out(&key, wait);
            }
        }
    }

    /// Ends the row groups in progress of this writer's buffers, those holding the most codec
    /// memory first, until the budget is back to its low-water mark: their encoders' memory
    /// goes without a file being written.
    fn close_row_groups(&mut self) {
        let mut open: Vec<(PartitionKey, usize)> = self
            .buffers
            .iter()
            .map(|(k, b)| (k.clone(), b.open_codec_bytes()))
            .filter(|(_, codec)| *codec > 0)
            .collect();
        open.sort_by_key(|(_, codec)| std::cmp::Reverse(*codec));
        for (key, _) in open {
            if self.budget.used() <= self.budget.low_water() {
                break;
            }
            let Some(buffer) = self.buffers.get_mut(&key) else {
                continue;
            };
            match buffer.close_row_group() {
                Ok(delta) => {
                    self.held_changed(delta);
                }
                Err(e) => {
                    // The buffer is unusable: written out (or counted as failed) as on any error.
                    tracing::warn!(error = %e, "ending a row group failed; writing the partition out");
                    self.write_out(&key, Wait::No);
                }
            }
        }
        self.publish_largest();
    }

    /// Counts a change of this writer's buffered bytes, here and in the shared budget.
    fn held_changed(&mut self, delta: isize) {
        self.held = self.held.saturating_add_signed(delta);
        self.budget.change(delta);
    }

    fn report_buffered(&self) {
        self.metrics.set_archive_buffered_bytes(self.budget.used());
    }

    /// Writes out the buffers that reached their age or size.
    fn complete_due(&mut self, now: Instant) {
        let max_age = self.settings.max_age;
        let max_bytes = self.settings.max_bytes;
        let due: Vec<PartitionKey> = self
            .buffers
            .iter()
            .filter(|(_, b)| {
                now.duration_since(b.created) >= max_age || b.bytes() as u64 >= max_bytes
            })
            .map(|(k, _)| k.clone())
            .collect();
        for key in due {
            self.write_out(&key, Wait::No);
        }
        self.relieve_budget();
        self.report_buffered();
    }

    /// Writes out `key`'s buffer now (tests).
    #[cfg(test)]
    fn complete(&mut self, key: &PartitionKey) {
        self.write_out(key, Wait::Yes);
    }

    /// Writes `key`'s buffer as one completed file named after its journal records. With
    /// [`Wait::No`], a partition being compacted keeps its buffer for later; false then.
    fn write_out(&mut self, key: &PartitionKey, wait: Wait) -> bool {
        if !self.buffers.contains_key(key) {
            return true;
        }
        let part = PartitionDir::of(key);
        let lock = match lock::PartitionLock::acquire(&self.data_dir, &part, wait == Wait::Yes) {
            Ok(Some(l)) => Some(l),
            Ok(None) => return false,
            // Without the lock file the write can still go ahead: only a compaction of
            // this partition could conflict, and it cannot take the lock either.
            Err(e) => {
                tracing::warn!(error = %e, "archive partition lock unavailable; writing without it");
                None
            }
        };
        let Some(buf) = self.take_buffer(key) else {
            return true;
        };
        let (rows, records) = (buf.rows() as u64, buf.records);
        match self.write_file(key, buf) {
            Ok(done) => {
                self.record(&[manifest_entry(key.table, &done, records)]);
                self.count_completed(key.table, &done);
            }
            Err(e) => self.fail(key.table, rows, records, &e),
        }
        drop(lock);
        true
    }

    /// The file name (stem and journal suffix) for `buf`'s next file.
    fn file_stem(&self, buf: &PartitionBuffer) -> String {
        let stem = format!(
            "part-{}{}",
            chrono::Utc::now().format("%Y%m%dT%H%M%S%3fZ"),
            buffer_mark(&self.instance_id, buf.sequence),
        );
        let suffix = match (&self.journal_id, buf.records) {
            (Some(id), Some(records)) => records_suffix(id, records),
            _ => String::new(),
        };
        format!("{stem}{suffix}")
    }

    /// Encodes `buf`'s file and writes it under its temporary name.
    fn stage_file(
        &mut self,
        key: &PartitionKey,
        buf: PartitionBuffer,
        durability: partition::Durability,
    ) -> Result<partition::StagedFile, ArchiveError> {
        let stem = self.file_stem(&buf);
        let rows = buf.rows() as u64;
        let bytes = buf.into_file(&self.props[table_index(key.table)])?;
        partition::StagedFile::write(&key.dir(&self.data_dir), &stem, &bytes, rows, durability)
    }

    /// Writes `buf`'s file durably under its final name.
    fn write_file(
        &mut self,
        key: &PartitionKey,
        buf: PartitionBuffer,
    ) -> Result<CompletedFile, ArchiveError> {
        let done = self
            .stage_file(key, buf, partition::Durability::Now)?
            .publish()?;
        let dir = key.dir(&self.data_dir);
        // The rename is durable only once the folder itself is synced.
        crate::durable::sync_dir(&dir).map_err(|e| ArchiveError::io(&dir, e))?;
        Ok(done)
    }

    /// Counts rows that could not be written. Those of journal `records` stay in the journal:
    /// the checkpoint does not pass them, and the next start writes them.
    fn fail(&mut self, table: Table, rows: u64, records: Option<(u64, u64)>, e: &ArchiveError) {
        self.totals.failed_rows += rows;
        self.metrics.archive_error(table.as_str(), rows);
        if let Some((first, _)) = records {
            self.failed_from = Some(self.failed_from.map_or(first, |f| f.min(first)));
        }
        tracing::error!(table = table.as_str(), rows, error = %e, "archive write failed; the rows stay in the journal for the next start");
    }

    /// Stops the background compaction, writes every buffer out and reports what was
    /// written in total.
    pub fn close(&mut self) -> ArchiveTotals {
        if let Some(c) = self.compactor.take() {
            c.stop();
        }
        let (files, started) = (self.buffers.len(), Instant::now());
        self.complete_all();
        if files > 0 {
            tracing::info!(
                files,
                elapsed_ms = started.elapsed().as_millis() as u64,
                "archive buffers written at close"
            );
        }
        self.totals
    }
}

impl Drop for Archive {
    fn drop(&mut self) {
        // Rows never written (a test's crash, or a writer dropped without close) no longer
        // count against the shared budget.
        self.budget.change(-(self.held as isize));
        self.budget.set_largest(self.budget_slot, 0);
        for table in Table::ALL {
            let open = self.per_table[table_index(table)];
            if open > 0 {
                self.metrics
                    .open_files_changed(table.as_str(), -(open as i64));
            }
        }
        if let Some(c) = self.compactor.take() {
            c.signal_stop();
        }
    }
}

/// Groups items by partition (tenant and hour of `at`), in the order partitions first
/// appear; each group keeps the items' order.
fn group_by_partition<'a, T: 'a>(
    items: impl Iterator<Item = &'a T>,
    at: impl Fn(&'a T) -> (&'a str, i64),
) -> Vec<Vec<&'a T>> {
    let mut index: crate::maps::FastMap<(&'a str, i64), usize> = crate::maps::map();
    let mut groups: Vec<Vec<&'a T>> = Vec::new();
    for item in items {
        let (tenant, ns) = at(item);
        let slot = *index
            .entry((tenant, ns.div_euclid(HOUR_NS)))
            .or_insert_with(|| {
                groups.push(Vec::new());
                groups.len() - 1
            });
        groups[slot].push(item);
    }
    groups
}

/// The manifest entry of a file a writer completed.
fn manifest_entry(
    table: Table,
    done: &CompletedFile,
    records: Option<(u64, u64)>,
) -> manifest::NewEntry {
    manifest::NewEntry {
        op: manifest::Op::Add,
        path: done.path.clone(),
        table: table.as_str().to_string(),
        rows: done.rows,
        bytes: done.bytes,
        sha256: done.sha256.clone(),
        records,
        reason: manifest::Reason::Flush,
    }
}

/// Removes the unfinished files a dead writer left in `table`'s partitions. A writer holds a
/// partition's lock while its file is unfinished, so a file whose partition is locked belongs
/// to a live writer (another instance writing the same archive) and stays.
fn remove_in_progress(data_dir: &Path, table: Table) -> Result<u64, ArchiveError> {
    let mut removed = 0;
    for part in partitions(data_dir, table)? {
        let dir = part.dir(data_dir);
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            // Deleted since the listing (another instance's retention).
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(ArchiveError::io(&dir, e)),
        };
        let unfinished: Vec<PathBuf> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.ends_with(IN_PROGRESS_SUFFIX))
            })
            .collect();
        if unfinished.is_empty() {
            continue;
        }
        let Some(_lock) = lock::PartitionLock::acquire(data_dir, &part, false)? else {
            continue;
        };
        for path in unfinished {
            match std::fs::remove_file(&path) {
                Ok(()) => removed += 1,
                // Completed (renamed) by its writer since the listing.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(ArchiveError::io(&path, e)),
            }
        }
    }
    Ok(removed)
}

/// A spans and logs archive under `dir` for tests (this crate's and the query's): instance
/// `0a0b0c0d`, journal `feedf00d`, no background compaction, `batch_rows` rows a batch, a
/// budget of its own. Panics if the archive cannot be opened.
#[doc(hidden)]
pub fn test_archive(dir: &Path, batch_rows: usize, budget: usize) -> Archive {
    let config = ArchiveConfig {
        compact_every: crate::units::LimitDuration(std::time::Duration::ZERO),
        batch_rows: crate::units::PositiveUsize(batch_rows),
        ..ArchiveConfig::default()
    };
    Archive::open(
        dir,
        &[Table::Spans, Table::Logs],
        &config,
        "0a0b0c0d".into(),
        Arc::new(Metrics::new()),
    )
    .expect("archive")
    .with_journal_id("feedf00d")
    .with_budget(SharedBudget::new(budget))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::archive::layout::names::is_written_buffer;
    use crate::event::{fixtures, HexId, SpanRecord};

    const T0: i64 = 1_800_000_000_000_000_000;

    fn archive(dir: &Path, budget: usize) -> Archive {
        test_archive(dir, ArchiveConfig::default().batch_rows.0, budget)
    }

    fn spans(tenant: &str, n: usize, first_id: u64) -> EventBatch {
        EventBatch {
            spans: (0..n as u64)
                .map(|i| SpanRecord {
                    tenant: tenant.into(),
                    span_id: (first_id + i).to_be_bytes(),
                    start_ns: T0,
                    ..fixtures::span()
                })
                .collect(),
            logs: Vec::new(),
        }
    }

    /// The completed spans files of `tenant`, by name.
    fn files(dir: &Path, tenant: &str) -> Vec<String> {
        let key = PartitionKey::new(Table::Spans, tenant, T0);
        let mut names: Vec<String> = std::fs::read_dir(key.dir(dir))
            .map(|d| {
                d.flatten()
                    .filter_map(|e| e.file_name().to_str().map(str::to_string))
                    .filter(|n| n.ends_with(".parquet"))
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }

    /// Memory of one record of `n` spans in a partition buffer.
    fn bytes_of(n: usize) -> usize {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut a = archive(dir.path(), usize::MAX / 2);
        a.append(Some(1), &spans("x", n, 0));
        a.buffered_bytes()
    }

    #[test]
    fn over_budget_the_largest_buffers_are_written_first_and_the_pin_is_exact() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (big, mid, small) = (bytes_of(60), bytes_of(20), bytes_of(5));
        assert!(big > mid && mid > small, "{big} {mid} {small}");
        // Room for all three, not for one more record of the big tenant.
        let budget = big + mid + small + small / 2;
        let mut a = archive(dir.path(), budget);
        a.append(Some(1), &spans("big", 60, 0));
        a.append(Some(2), &spans("mid", 20, 1000));
        a.append(Some(3), &spans("small", 5, 2000));
        assert_eq!(a.open_files(), 3);
        assert!(files(dir.path(), "big").is_empty());
        assert_eq!(a.pinned_record(), Some(1));
        // Over the budget: only the largest goes, which is enough to get under 7/8 of it.
        a.append(Some(4), &spans("mid", 20, 3000));
        assert_eq!(files(dir.path(), "big").len(), 1);
        assert_eq!(
            files(dir.path(), "big")[0]
                .rsplit_once("_jfeedf00d_")
                .map(|(_, r)| r),
            Some("1-1.parquet")
        );
        assert!(files(dir.path(), "mid").is_empty() && files(dir.path(), "small").is_empty());
        assert!(
            a.buffered_bytes() <= budget,
            "{} > {budget}",
            a.buffered_bytes()
        );
        assert_eq!(a.open_files(), 2);
        // Record 1 is in a completed file; mid's buffer holds records 2 and 4.
        assert_eq!(a.pinned_record(), Some(2));
        // Far over: the new largest goes at once, and the total is back under 7/8 of it.
        a.append(Some(5), &spans("big", 80, 4000));
        assert!(
            a.buffered_bytes() <= budget - budget / 8,
            "{}",
            a.buffered_bytes()
        );
        assert_eq!(files(dir.path(), "big").len(), 2);
        assert_eq!(
            files(dir.path(), "big")[1]
                .rsplit_once("_jfeedf00d_")
                .map(|(_, r)| r),
            Some("5-5.parquet")
        );
        assert!(files(dir.path(), "mid").is_empty());
        // What is still buffered pins exactly its first record.
        let pinned = a.pinned_record();
        let expected = a
            .buffers
            .values()
            .filter_map(|b| b.records.map(|r| r.0))
            .min();
        assert_eq!(pinned, expected);
        assert!(pinned.is_some());
        let totals = a.close();
        assert_eq!(totals.span_rows, 60 + 20 + 5 + 20 + 80);
        assert_eq!(a.pinned_record(), None);
        assert_eq!(a.buffered_bytes(), 0);
    }

    #[test]
    fn under_memory_pressure_row_groups_end_before_any_file_is_written() {
        use crate::memory::{Holder, MemoryBudget};
        let dir = tempfile::tempdir().expect("tempdir");
        let budget = SharedBudget::new(usize::MAX / 2);
        let memory = MemoryBudget::new(16 << 20);
        budget.under_memory(Arc::clone(&memory));
        // One encoded batch each: two row groups in progress, their encoders held.
        let mut a = test_archive(dir.path(), 8, usize::MAX / 2).with_budget(Arc::clone(&budget));
        a.append(Some(1), &spans("t1", 8, 0));
        a.append(Some(2), &spans("t2", 8, 1000));
        let codecs = 2 * leaf_columns_of_spans() * buffer::CODEC_BYTES_PER_COLUMN;
        assert!(budget.used() > codecs, "{} {codecs}", budget.used());
        assert_eq!(memory.held(Holder::Archive), budget.used());
        assert!(!budget.over());
        // Assembly takes most of what the archive borrowed: the archive is over its allowance.
        // (The pool is 14 MiB and 1 MiB is kept free: the archive may now hold 1 MiB less
        // than it does.)
        memory.set(Holder::Assembly, (14 << 20) - budget.used());
        assert!(budget.over());
        a.append(Some(3), &spans("t1", 1, 2000));
        // Relieved without a file: a row group ended (its encoders went), both partitions open.
        assert!(!budget.over(), "{} over {}", budget.used(), budget.bound());
        assert_eq!(a.open_files(), 2);
        assert!(files(dir.path(), "t1").is_empty() && files(dir.path(), "t2").is_empty());
        assert_eq!(memory.held(Holder::Archive), budget.used());
        let totals = a.close();
        assert_eq!(totals.span_rows, 17);
        assert_eq!(files(dir.path(), "t1").len(), 1);
        assert_eq!(memory.held(Holder::Archive), 0);
    }

    fn leaf_columns_of_spans() -> usize {
        let schema = crate::archive::table::schema::spans_schema();
        parquet::arrow::ArrowSchemaConverter::new()
            .convert(&schema)
            .expect("schema")
            .num_columns()
    }

    #[test]
    fn over_a_shared_budget_the_writer_with_the_largest_buffers_relieves_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (big, small) = (bytes_of(60), bytes_of(5));
        let budget = SharedBudget::new(3 * big + 10 * small + small / 2);
        // Writer `a` (spans, say) holds three large buffers, `b` (summaries) ten small ones.
        let mut a = archive(dir.path(), usize::MAX / 2).with_budget(Arc::clone(&budget));
        let other = tempfile::tempdir().expect("tempdir");
        let mut b = archive(other.path(), usize::MAX / 2).with_budget(Arc::clone(&budget));
        for (i, t) in ["a1", "a2", "a3"].iter().enumerate() {
            a.append(Some(i as u64 + 1), &spans(t, 60, 1000 * i as u64));
        }
        for i in 0..10u64 {
            b.append(Some(10 + i), &spans(&format!("b{i}"), 5, 100_000 + 100 * i));
        }
        assert!(!budget.over());
        // `b` pushes the total over; its buffers are the smallest, so it writes none of them.
        b.append(Some(30), &spans("b0", 5, 200_000));
        assert!(budget.over());
        assert_eq!(b.open_files(), 10);
        assert!(files(other.path(), "b0").is_empty());
        // `a`'s next call writes its largest buffer, which brings the total under 7/8.
        a.append(Some(31), &spans("a1", 1, 300_000));
        assert!(!budget.over());
        assert_eq!(a.open_files(), 2);
        assert_eq!(files(dir.path(), "a1").len(), 1);
        assert!(budget.used() <= budget.low_water(), "{}", budget.used());
        // `b` keeps adding small buffers, never larger than `a`'s: it writes none of them until
        // the total is far over the budget (1.5 times), and then it does without waiting for `a`.
        let far = budget.limit() + budget.limit() / 2;
        let mut wrote_at = None;
        for i in 0..60u64 {
            let (before, open) = (budget.used(), b.open_files());
            b.append(Some(40 + i), &spans(&format!("c{i}"), 5, 400_000 + 100 * i));
            if b.open_files() <= open {
                wrote_at = Some(before);
                break;
            }
            assert!(
                budget.used() <= far + small,
                "{} and nothing written",
                budget.used()
            );
        }
        let before = wrote_at.expect("b wrote a buffer once far over");
        assert!(
            before + 2 * small > far,
            "{before} + {small} is not far over {far}"
        );
        assert!(budget.largest_elsewhere(None) <= big);
        a.close();
        b.close();
        assert_eq!(budget.used(), 0);
    }

    /// Rows of a Parquet file in memory, and its span ids.
    fn read_copy(data: &bytes::Bytes) -> Vec<String> {
        use arrow::array::{Array, StringArray};
        let reader =
            parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(data.clone())
                .expect("a complete Parquet file")
                .build()
                .expect("reader");
        let mut ids = Vec::new();
        for batch in reader {
            let batch = batch.expect("batch");
            let col = batch.column_by_name("span_id").expect("span_id");
            let col = col.as_any().downcast_ref::<StringArray>().expect("strings");
            ids.extend((0..col.len()).map(|i| col.value(i).to_string()));
        }
        ids
    }

    #[test]
    fn copies_hold_every_buffered_row_and_name_the_file_the_buffer_becomes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut a = test_archive(dir.path(), 10, usize::MAX / 2);
        // a: 25 rows encoded (one batch over 10), then 3 in the builders; b: 4 in the builders.
        a.append(Some(1), &spans("a", 25, 0));
        a.append(Some(2), &spans("a", 3, 100));
        a.append(Some(3), &spans("b", 4, 200));
        let id = |i: u64| HexId::of(&i.to_be_bytes()).as_str().to_string();
        for _ in 0..2 {
            let mut copies = a.snapshot();
            copies.sort_by(|x, y| x.entry.path.cmp(&y.entry.path));
            let got: Vec<(String, u64, usize)> = copies
                .iter()
                .map(|c| {
                    let (_, name) = c.entry.path.rsplit_once('/').expect("a name");
                    (name.to_string(), c.entry.rows, read_copy(&c.data).len())
                })
                .collect();
            assert_eq!(
                got,
                vec![
                    ("buffered-0a0b0c0d-000001-0.parquet".to_string(), 25, 25),
                    ("buffered-0a0b0c0d-000001-1.parquet".to_string(), 3, 3),
                    ("buffered-0a0b0c0d-000002-0.parquet".to_string(), 4, 4),
                ]
            );
            let key = PartitionKey::new(Table::Spans, "a", T0);
            let dir_a = key.dir(Path::new("")).to_string_lossy().into_owned();
            assert_eq!(copies[0].entry.path, format!("{dir_a}/{}", got[0].0));
            let mut ids: Vec<String> = copies[..2]
                .iter()
                .flat_map(|c| read_copy(&c.data))
                .collect();
            ids.sort();
            let mut want: Vec<String> = (0..25).chain(100..103).map(id).collect();
            want.sort();
            assert_eq!(ids, want);
            assert_eq!(copies[0].entry.mark, "-0a0b0c0d-000001");
        }
        let copies = a.snapshot();
        // Nothing is on disk: every copy stays.
        let names_in = |d: &str| -> Vec<String> {
            std::fs::read_dir(dir.path().join(d))
                .map(|r| {
                    r.flatten()
                        .filter_map(|e| e.file_name().into_string().ok())
                        .collect()
                })
                .unwrap_or_default()
        };
        let set = snapshot::BufferedSet {
            records: 3,
            files: copies,
        };
        assert_eq!(set.clone().without_written(names_in).files.len(), 3);
        // More rows after the copies, then the buffers become files: a's file holds all 31
        // rows (the copy ended a row group, the file is whole), and every copy is dropped.
        a.append(Some(4), &spans("a", 3, 300));
        a.close();
        let names = files(dir.path(), "a");
        assert_eq!(names.len(), 1);
        assert!(
            is_written_buffer(&names[0], "-0a0b0c0d-000001"),
            "{names:?}"
        );
        assert!(!is_written_buffer(&names[0], "-0a0b0c0d-000002"));
        let key = PartitionKey::new(Table::Spans, "a", T0);
        let whole =
            bytes::Bytes::from(std::fs::read(key.dir(dir.path()).join(&names[0])).expect("file"));
        assert_eq!(read_copy(&whole).len(), 31);
        assert!(set.without_written(names_in).files.is_empty());
    }

    #[test]
    fn many_buffers_go_out_together_each_as_one_file_named_after_its_records() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut a = archive(dir.path(), usize::MAX / 2);
        let tenants: Vec<String> = (0..GROUP_FROM * 2).map(|i| format!("t{i}")).collect();
        for (i, t) in tenants.iter().enumerate() {
            a.append(Some(i as u64 + 1), &spans(t, 3, i as u64 * 10));
        }
        assert_eq!(a.open_files(), tenants.len());
        let totals = a.close();
        assert_eq!(totals.span_rows, 3 * tenants.len() as u64);
        assert_eq!(totals.files, tenants.len() as u64);
        assert_eq!(totals.failed_rows, 0);
        for (i, t) in tenants.iter().enumerate() {
            let names = files(dir.path(), t);
            assert_eq!(names.len(), 1, "{t}: {names:?}");
            let n = i + 1;
            assert!(
                names[0].ends_with(&format!("_jfeedf00d_{n}-{n}.parquet")),
                "{names:?}"
            );
        }
        assert_eq!(
            remove_in_progress(dir.path(), Table::Spans).expect("scan"),
            0
        );
        assert_eq!(a.pinned_record(), None);
    }

    #[test]
    fn buffers_go_out_at_their_age_and_size_and_close_writes_everything() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut a = archive(dir.path(), usize::MAX / 2);
        a.settings.max_age = std::time::Duration::from_secs(60);
        a.append(Some(1), &spans("a", 3, 0));
        let created = Instant::now();
        a.append(Some(2), &spans("b", 3, 100));
        a.complete_due(created + std::time::Duration::from_secs(59));
        assert_eq!(a.open_files(), 2);
        a.complete_due(created + std::time::Duration::from_secs(61));
        assert_eq!(a.open_files(), 0);
        assert_eq!(files(dir.path(), "a").len(), 1);
        // Size: a buffer reaching max_file_bytes is written at the end of its record.
        a.settings.max_bytes = 1;
        a.append(Some(3), &spans("a", 1, 200));
        assert_eq!(a.open_files(), 0);
        assert_eq!(files(dir.path(), "a").len(), 2);
        a.settings.max_bytes = u64::MAX;
        a.append(Some(4), &spans("c", 2, 300));
        assert_eq!(a.pinned_record(), Some(4));
        assert_eq!(a.close().span_rows, 3 + 3 + 1 + 2);
        assert_eq!(files(dir.path(), "c").len(), 1);
    }

    #[test]
    fn a_partition_being_compacted_keeps_its_rows_until_forced() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut a = archive(dir.path(), usize::MAX / 2);
        a.settings.max_age = std::time::Duration::ZERO;
        a.append(Some(1), &spans("a", 3, 0));
        let part = PartitionDir::of(&PartitionKey::new(Table::Spans, "a", T0));
        let held = lock::PartitionLock::acquire(dir.path(), &part, true)
            .expect("lock")
            .expect("free");
        a.complete_due(Instant::now());
        assert_eq!(a.open_files(), 1, "skipped while locked");
        assert_eq!(a.pinned_record(), Some(1));
        drop(held);
        a.complete_due(Instant::now());
        assert_eq!(a.open_files(), 0);
        assert_eq!(files(dir.path(), "a").len(), 1);
    }

    #[test]
    fn under_journal_pressure_a_tick_writes_out_what_holds_the_journal_now_and_then() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut a = archive(dir.path(), usize::MAX / 2);
        a.append(Some(1), &spans("a", 3, 0));
        assert_eq!(
            a.tick(Instant::now(), 2, Pressure::None),
            Some(1),
            "no pressure"
        );
        assert_eq!(
            a.tick(Instant::now(), 2, Pressure::Over),
            Some(1),
            "too soon after opening"
        );
        a.last_pressure = Instant::now().checked_sub(PRESSURE_EVERY).expect("uptime");
        assert_eq!(a.tick(Instant::now(), 2, Pressure::Over), None);
        assert_eq!(files(dir.path(), "a").len(), 1);
        a.append(Some(2), &spans("a", 3, 10));
        assert_eq!(
            a.tick(Instant::now(), 3, Pressure::Over),
            Some(2),
            "at most every PRESSURE_EVERY"
        );
        // Nearly full: a second is enough, where over half it is not.
        a.last_pressure = Instant::now()
            .checked_sub(NEARLY_FULL_EVERY)
            .expect("uptime");
        assert_eq!(
            a.tick(Instant::now(), 3, Pressure::Over),
            Some(2),
            "over half: still at most every PRESSURE_EVERY"
        );
        assert_eq!(a.tick(Instant::now(), 3, Pressure::NearlyFull), None);
        assert_eq!(files(dir.path(), "a").len(), 2);
        assert_eq!(a.close().span_rows, 6);
    }

    /// A stage's row as the archive sees it: only through [`ArchiveRow`].
    struct Note {
        tenant: &'static str,
        time_ns: i64,
        record: Option<u64>,
    }

    #[derive(Default)]
    struct NoteRows(arrow::array::Int64Builder);

    impl TableRows for NoteRows {
        fn len(&self) -> usize {
            arrow::array::ArrayBuilder::len(&self.0)
        }
        fn approx_bytes(&self) -> usize {
            arrow::array::ArrayBuilder::len(&self.0) * 8
        }
        fn schema(&self) -> arrow::datatypes::SchemaRef {
            let time =
                arrow::datatypes::Field::new("time", arrow::datatypes::DataType::Int64, false);
            Arc::new(arrow::datatypes::Schema::new(vec![time]))
        }
        fn finish(&mut self) -> Result<arrow::record_batch::RecordBatch, arrow::error::ArrowError> {
            let col: arrow::array::ArrayRef = Arc::new(self.0.finish());
            arrow::record_batch::RecordBatch::try_new(self.schema(), vec![col])
        }
        fn snapshot(&self) -> Result<arrow::record_batch::RecordBatch, arrow::error::ArrowError> {
            let col: arrow::array::ArrayRef = Arc::new(self.0.finish_cloned());
            arrow::record_batch::RecordBatch::try_new(self.schema(), vec![col])
        }
        fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
            self
        }
    }

    impl ArchiveRow for Note {
        type Rows = NoteRows;
        const TABLE: Table = Table::Requests;
        fn tenant(&self) -> &str {
            self.tenant
        }
        fn time_ns(&self) -> i64 {
            self.time_ns
        }
        fn record(&self) -> Option<u64> {
            self.record
        }
        fn append_to(&self, rows: &mut NoteRows) -> Result<(), arrow::error::ArrowError> {
            rows.0.append_value(self.time_ns);
            Ok(())
        }
    }

    #[test]
    fn a_stages_rows_go_to_their_partitions_and_pin_their_first_record() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut a = archive(dir.path(), usize::MAX / 2);
        let note = |tenant, hour: i64, record| Note {
            tenant,
            time_ns: T0 + hour * HOUR_NS,
            record,
        };
        a.append_rows(&[
            note("a", 0, Some(5)),
            note("b", 0, None),
            note("a", 1, Some(9)),
            note("a", 0, Some(3)),
        ]);
        assert_eq!(a.open_files(), 3);
        assert_eq!(a.pinned_record(), Some(3));
        let totals = a.close();
        assert_eq!((totals.request_rows, totals.files), (4, 3));
        let names = |tenant, hour| {
            let key = PartitionKey::new(Table::Requests, tenant, T0 + hour * HOUR_NS);
            let mut n: Vec<String> = std::fs::read_dir(key.dir(dir.path()))
                .expect("partition")
                .flatten()
                .filter_map(|e| e.file_name().to_str().map(str::to_string))
                .collect();
            n.sort();
            n
        };
        let a0 = names("a", 0);
        assert!(
            a0.len() == 1 && a0[0].ends_with("_jfeedf00d_3-5.parquet"),
            "{a0:?}"
        );
        assert!(names("a", 1)[0].ends_with("_jfeedf00d_9-9.parquet"));
        let b0 = names("b", 0);
        assert!(b0.len() == 1 && !b0[0].contains("_j"), "{b0:?}");
    }
}
