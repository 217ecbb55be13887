//! Archive: the Parquet audit archive.
//!
//! Owns everything under `spans/`, `logs/`, `requests/` and `alarms/` in the data directory. Promises: rows are
//! written to `table/tenant=T/date=YYYY-MM-DD/hour=HH/part-….parquet` (zstd, page statistics,
//! bloom filters on `trace_id` and `request_id`); a file becomes visible only when complete;
//! files roll by size and age; everything handed to the archive is in a completed file once
//! [`Archive::close`] returns. It receives protected events only.

pub mod consumer;
pub mod partition;
pub mod schema;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use crate::assemble::summary::RequestSummary;
use crate::config::ArchiveConfig;
use crate::event::EventBatch;
use crate::metrics::Metrics;
use partition::{FileSettings, PartitionKey, PartitionWriter, Table, IN_PROGRESS_SUFFIX};
use schema::{AlarmRows, LogRows, RequestRows, SpanRows};

/// What went wrong writing the archive.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    /// A file operation failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The Parquet encoder failed.
    #[error("parquet: {0}")]
    Parquet(parquet::errors::ParquetError),
    /// Building a record batch failed.
    #[error("arrow: {0}")]
    Arrow(#[from] arrow::error::ArrowError),
}

impl ArchiveError {
    fn io(path: &Path, source: std::io::Error) -> ArchiveError {
        ArchiveError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

enum Rows {
    Spans(Box<SpanRows>),
    Logs(Box<LogRows>),
    Requests(Box<RequestRows>),
    Alarms(Box<AlarmRows>),
}

impl Rows {
    fn for_table(t: Table) -> Rows {
        match t {
            Table::Spans => Rows::Spans(Box::default()),
            Table::Logs => Rows::Logs(Box::default()),
            Table::Requests => Rows::Requests(Box::default()),
            Table::Alarms => Rows::Alarms(Box::default()),
        }
    }

    fn len(&self) -> usize {
        match self {
            Rows::Spans(r) => r.len(),
            Rows::Logs(r) => r.len(),
            Rows::Requests(r) => r.len(),
            Rows::Alarms(r) => r.len(),
        }
    }

    fn finish(&mut self) -> Result<arrow::record_batch::RecordBatch, ArchiveError> {
        Ok(match self {
            Rows::Spans(r) => r.finish()?,
            Rows::Logs(r) => r.finish()?,
            Rows::Requests(r) => r.finish()?,
            Rows::Alarms(r) => r.finish()?,
        })
    }
}

struct OpenPartition {
    writer: PartitionWriter,
    rows: Rows,
    /// First and last journal record with rows in this file.
    records: Option<(u64, u64)>,
}

impl OpenPartition {
    fn flush_rows(&mut self) -> Result<(), ArchiveError> {
        if self.rows.len() > 0 {
            let batch = self.rows.finish()?;
            self.writer.write(&batch)?;
        }
        Ok(())
    }
}

/// Above this share of the journal's bound, files holding the journal back complete early.
pub const PRESSURE: f64 = 0.5;
/// Early completions happen at most this often.
pub const PRESSURE_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

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
    /// Completed files.
    pub files: u64,
    /// Rows lost to write errors (each also logged and counted in metrics).
    pub failed_rows: u64,
}

/// The partitioned Parquet writer for all tables.
pub struct Archive {
    data_dir: PathBuf,
    settings: FileSettings,
    batch_rows: usize,
    max_open: usize,
    instance_id: String,
    sequence: u64,
    open: HashMap<PartitionKey, OpenPartition>,
    /// Partitions whose file reached its size during the current record.
    due: Vec<PartitionKey>,
    /// Names the journal whose records completed files hold (see [`records_suffix`]).
    journal_id: Option<String>,
    /// The first journal record with rows that could not be written: the checkpoint stays
    /// before it, so a restart writes them from the journal.
    failed_from: Option<u64>,
    /// The journal record being added.
    current: Option<u64>,
    metrics: Arc<Metrics>,
    totals: ArchiveTotals,
}

impl Archive {
    /// Prepares the archive's `tables` under `data_dir`. Files a previous process left
    /// half-written are removed: without the journal their rows cannot be completed.
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
            let removed = remove_in_progress(&dir)?;
            if removed > 0 {
                tracing::warn!(
                    table = table.as_str(),
                    files = removed,
                    "removed unfinished archive files left by an earlier process"
                );
                metrics.archive_abandoned_files(table, removed);
            }
        }
        Ok(Archive {
            data_dir: data_dir.to_path_buf(),
            settings: FileSettings {
                max_bytes: config.max_file_bytes.0,
                max_age: config.max_file_age.0,
                row_group_rows: config.row_group_rows.0,
                row_group_bytes: config.row_group_bytes.as_usize(),
                zstd_level: config.zstd_level.0,
            },
            batch_rows: config.batch_rows.0,
            max_open: config.max_open_partitions.0,
            instance_id,
            sequence: 0,
            open: HashMap::new(),
            due: Vec::new(),
            journal_id: None,
            failed_from: None,
            current: None,
            metrics,
            totals: ArchiveTotals::default(),
        })
    }

    /// Names completed files after the journal records they hold, for exactly-once replay.
    pub fn with_journal_id(mut self, journal_id: &str) -> Archive {
        self.journal_id = Some(journal_id.to_string());
        self
    }

    /// Adds a batch of protected events (journal record `seq`, if it came from one). Files
    /// are completed only between records, so a file holds all of a record's rows for its
    /// partition or none.
    pub fn append(&mut self, seq: Option<u64>, batch: &EventBatch) {
        let spans = vec![true; batch.spans.len()];
        let logs = vec![true; batch.logs.len()];
        self.append_kept(seq, batch, &spans, &logs);
    }

    /// [`Archive::append`] of the spans and log records whose flag in `spans` and `logs` is set.
    pub fn append_kept(
        &mut self,
        seq: Option<u64>,
        batch: &EventBatch,
        spans: &[bool],
        logs: &[bool],
    ) {
        self.current = seq;
        for (span, _) in batch.spans.iter().zip(spans).filter(|(_, &k)| k) {
            let key = PartitionKey::new(Table::Spans, &span.tenant, span.start_ns);
            self.with_partition(key, seq, |rows| match rows {
                Rows::Spans(r) => r.append(span).map_err(ArchiveError::from),
                _ => unreachable_table(),
            });
        }
        for (log, _) in batch.logs.iter().zip(logs).filter(|(_, &k)| k) {
            let key = PartitionKey::new(Table::Logs, &log.tenant, log.time_ns);
            self.with_partition(key, seq, |rows| match rows {
                Rows::Logs(r) => r.append(log).map_err(ArchiveError::from),
                _ => unreachable_table(),
            });
        }
        self.settle();
    }

    /// The first journal record with rows in a file not yet complete: everything before it
    /// is in completed files (or was never for this archive).
    pub fn pinned_record(&self) -> Option<u64> {
        self.open
            .values()
            .filter_map(|p| p.records.map(|(first, _)| first))
            .chain(self.failed_from)
            .min()
    }

    /// When the journal is over half full, completes the open files that hold it back rather
    /// than let receivers refuse data; at most every [`PRESSURE_EVERY`], since each time makes
    /// small files. (Whether another consumer is further behind does not matter: waiting for
    /// each other, two consumers could hold the journal full for good.)
    pub fn relieve_journal(
        &mut self,
        head: &crate::journal::head::JournalHead,
        consumer: &str,
        next_seq: u64,
        last: &mut Instant,
    ) {
        if self.pinned_record().is_none()
            || head.fill() <= PRESSURE
            || last.elapsed() < PRESSURE_EVERY
        {
            return;
        }
        *last = Instant::now();
        tracing::info!(
            consumer,
            "journal over half full: completing archive files early"
        );
        self.complete_records_before(next_seq);
    }

    /// Completes every open file.
    pub fn complete_all(&mut self) {
        let keys: Vec<PartitionKey> = self.open.keys().cloned().collect();
        for key in keys {
            self.complete(&key);
        }
    }

    /// Files open (not yet complete).
    pub fn open_files(&self) -> usize {
        self.open.len()
    }

    /// Completes every open file holding a journal record before `seq`.
    pub fn complete_records_before(&mut self, seq: u64) {
        let keys: Vec<PartitionKey> = self
            .open
            .iter()
            .filter(|(_, p)| p.records.is_some_and(|(first, _)| first < seq))
            .map(|(k, _)| k.clone())
            .collect();
        for key in keys {
            self.complete(&key);
        }
    }

    /// Adds request summaries, partitioned by tenant and the request's start.
    pub fn append_summaries(&mut self, summaries: &[RequestSummary]) {
        for s in summaries {
            let key = PartitionKey::new(Table::Requests, &s.tenant, s.start_ns);
            let seq = (s.first_record > 0).then_some(s.first_record);
            self.with_partition(key, seq, |rows| match rows {
                Rows::Requests(r) => r.append(s).map_err(ArchiveError::from),
                _ => unreachable_table(),
            });
        }
        self.settle();
    }

    /// Adds alarms, partitioned by tenant and the time they fired.
    pub fn append_alarms(&mut self, alarms: &[crate::budget::evaluate::Alarm]) {
        for a in alarms {
            let key = PartitionKey::new(Table::Alarms, &a.tenant, a.time_ns);
            self.with_partition(key, None, |rows| match rows {
                Rows::Alarms(r) => {
                    r.append(a);
                    Ok(())
                }
                _ => unreachable_table(),
            });
        }
        self.settle();
    }

    /// Completes the files that became due and, beyond `max_open_partitions`, the least
    /// recently written ones.
    fn settle(&mut self) {
        self.current = None;
        for key in std::mem::take(&mut self.due) {
            self.complete(&key);
        }
        while self.open.len() > self.max_open {
            self.evict_least_recent();
        }
    }

    fn with_partition(
        &mut self,
        key: PartitionKey,
        seq: Option<u64>,
        add: impl FnOnce(&mut Rows) -> Result<(), ArchiveError>,
    ) {
        if !self.open.contains_key(&key) {
            // One record may reach many partitions (hours of event time): beyond the bound,
            // files complete even mid-record rather than hold a file per partition.
            if self.open.len() >= self.max_open.saturating_mul(2) {
                self.evict_least_recent();
            }
            if let Err(e) = self.open_partition(key.clone()) {
                self.fail(key.table, 1, seq.map(|s| (s, s)), &e);
                return;
            }
        }
        let Some(part) = self.open.get_mut(&key) else {
            return;
        };
        if let Err(e) = add(&mut part.rows) {
            self.fail(key.table, 1, seq.map(|s| (s, s)), &e);
            return;
        }
        if let Some(seq) = seq {
            part.records = Some(
                part.records
                    .map_or((seq, seq), |(first, last)| (first.min(seq), last.max(seq))),
            );
        }
        if part.rows.len() >= self.batch_rows {
            let at_stake = part.writer.rows() + part.rows.len() as u64;
            if let Err(e) = part.flush_rows() {
                let records = part.records;
                self.fail(key.table, at_stake, records, &e);
                self.discard(&key);
                return;
            }
            // Size is checked as rows are encoded, so a busy partition rolls on time.
            if part.writer.is_due(Instant::now()) && !self.due.contains(&key) {
                self.due.push(key);
            }
        }
    }

    fn open_partition(&mut self, key: PartitionKey) -> Result<(), ArchiveError> {
        self.sequence += 1;
        let stem = format!(
            "part-{}-{}-{:06}",
            chrono::Utc::now().format("%Y%m%dT%H%M%S%3fZ"),
            self.instance_id,
            self.sequence
        );
        let schema = match key.table {
            Table::Spans => schema::spans_schema(),
            Table::Logs => schema::logs_schema(),
            Table::Requests => schema::requests_schema(),
            Table::Alarms => schema::alarms_schema(),
        };
        let writer =
            PartitionWriter::open(&self.data_dir, key.clone(), schema, &self.settings, &stem)?;
        self.open.insert(
            key.clone(),
            OpenPartition {
                writer,
                rows: Rows::for_table(key.table),
                records: None,
            },
        );
        self.report_open(key.table);
        Ok(())
    }

    fn report_open(&self, table: Table) {
        let n = self.open.keys().filter(|k| k.table == table).count();
        self.metrics.set_open_files(table, n);
    }

    /// Completes files that reached their size or age.
    pub fn complete_due(&mut self, now: Instant) {
        let due: Vec<PartitionKey> = self
            .open
            .iter()
            .filter(|(_, p)| p.writer.is_due(now))
            .map(|(k, _)| k.clone())
            .collect();
        for key in due {
            self.complete(&key);
        }
    }

    fn complete(&mut self, key: &PartitionKey) {
        let Some(mut part) = self.open.remove(key) else {
            return;
        };
        self.report_open(key.table);
        // If the file cannot be completed, everything in it is lost, not just the last batch.
        let at_stake = part.writer.rows() + part.rows.len() as u64;
        if let Err(e) = part.flush_rows() {
            self.fail(key.table, at_stake, part.records, &e);
            return;
        }
        // A file completed in the middle of a record holds only part of that record's rows
        // for its partition: it claims the records before it (the rest of that record's rows
        // there may be written twice after a crash, never lost).
        let claimed = match (part.records, self.current) {
            (Some((first, last)), Some(current)) if last == current => {
                (first < current).then_some((first, current - 1))
            }
            (records, _) => records,
        };
        let suffix = match (&self.journal_id, claimed) {
            (Some(id), Some(records)) => records_suffix(id, records),
            _ => String::new(),
        };
        match part.writer.complete(&suffix) {
            Ok(done) => {
                match key.table {
                    Table::Spans => self.totals.span_rows += done.rows,
                    Table::Logs => self.totals.log_rows += done.rows,
                    Table::Requests => self.totals.request_rows += done.rows,
                    Table::Alarms => self.totals.alarm_rows += done.rows,
                }
                self.totals.files += 1;
                self.metrics.archive_file(key.table, done.rows, done.bytes);
                tracing::debug!(path = %done.path.display(), rows = done.rows, bytes = done.bytes, "archive file complete");
            }
            Err(e) => self.fail(key.table, at_stake, part.records, &e),
        }
    }

    fn evict_least_recent(&mut self) {
        if let Some(oldest) = self
            .open
            .iter()
            .min_by_key(|(_, p)| p.writer.last_write)
            .map(|(k, _)| k.clone())
        {
            self.complete(&oldest);
        }
    }

    fn discard(&mut self, key: &PartitionKey) {
        self.open.remove(key);
        self.report_open(key.table);
    }

    /// Counts rows that could not be written. Those of journal `records` stay in the journal:
    /// the checkpoint does not pass them, and the next start writes them.
    fn fail(&mut self, table: Table, rows: u64, records: Option<(u64, u64)>, e: &ArchiveError) {
        self.totals.failed_rows += rows;
        self.metrics.archive_error(table, rows);
        if let Some((first, _)) = records {
            self.failed_from = Some(self.failed_from.map_or(first, |f| f.min(first)));
        }
        tracing::error!(table = table.as_str(), rows, error = %e, "archive write failed; the rows stay in the journal for the next start");
    }

    /// Completes every open file and reports what was written in total.
    pub fn close(&mut self) -> ArchiveTotals {
        let keys: Vec<PartitionKey> = self.open.keys().cloned().collect();
        for key in keys {
            self.complete(&key);
        }
        self.totals
    }
}

/// The file-name suffix of a file holding journal `records` (first, last) of journal `id`:
/// `_j<id>_<first>-<last>`. After a crash the archive reads it back to skip what is complete.
pub fn records_suffix(id: &str, (first, last): (u64, u64)) -> String {
    format!("_j{id}_{first}-{last}")
}

/// The last journal record of journal `id` in a completed file named `name`, if it has one.
pub fn last_record_in(name: &str, id: &str) -> Option<u64> {
    let stem = name.strip_suffix(".parquet")?;
    let (_, range) = stem.rsplit_once(&format!("_j{id}_"))?;
    let (_, last) = range.split_once('-')?;
    last.parse().ok()
}

fn unreachable_table() -> Result<(), ArchiveError> {
    // Partition keys carry their table, so rows always match; this is a defect if reached.
    Err(ArchiveError::Arrow(
        arrow::error::ArrowError::InvalidArgumentError("row sent to the wrong table".into()),
    ))
}

fn remove_in_progress(dir: &Path) -> Result<u64, ArchiveError> {
    let mut removed = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let entries = std::fs::read_dir(&d).map_err(|e| ArchiveError::io(&d, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| ArchiveError::io(&d, e))?;
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.ends_with(IN_PROGRESS_SUFFIX))
            {
                std::fs::remove_file(&path).map_err(|e| ArchiveError::io(&path, e))?;
                removed += 1;
            }
        }
    }
    Ok(removed)
}
