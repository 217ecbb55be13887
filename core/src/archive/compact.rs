//! Compaction: a partition's small files merged into one sorted file, atomically.
//!
//! A partition's files are *small* when under half of `archive.compact_max_bytes`; once they
//! are older than `compact_after` they are merged: in an hour still being written once
//! `compact_min_files` of them have aged, in an hour that ended `compact_after` ago as soon as
//! there are two. Younger small files (flushes for readers write one per partition, up to twice
//! a second) are merged as soon as `compact_min_files` of one size tier (a factor of four
//! apart) are there; while readers have files flushed, the daemon looks every
//! [`AFTER_FLUSHES`]. Merged rows are sorted (spans and logs by trace id then time, requests and
//! alarms by time), so a trace's rows sit together and row-group statistics prune by trace.
//!
//! Atomic for every reader of `<table>/**/*.parquet` (DataFusion, DuckDB, pyarrow):
//! 1. lock the partition (see [`super::lock`]: the daemon writes no file into it meanwhile);
//! 2. build the new folder in `.compact/staging/` (outside every table): the merged file plus a
//!    hard link of each file that is not merged; fsync the file and the folder;
//! 3. swap it with the live folder in one `renameat2(RENAME_EXCHANGE)`; fsync the parents;
//! 4. remove the old folder, now in the work area.
//!
//! A reader lists one folder or the other, never a mix: it sees every row once, or (when it
//! listed the old folder and opens a file after the swap) fails to open a file and can retry.
//! A crash at any step leaves the live folder whole (old or new) and, at most, a folder in
//! the work area, removed by the next compaction (daemon or `toolwatch compact`) under the
//! partition's lock. The merged file's name carries, per journal id, the first and the last
//! journal record of its inputs, so replay after a crash skips exactly what it skipped before.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use arrow::array::ArrayRef;
use arrow::compute::SortColumn;
use arrow::record_batch::RecordBatch;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ArrowWriter;

use super::config::ArchiveConfig;
use super::lock::{self, PartitionDir, PartitionLock, ReadersLock};
use super::manifest::{NewEntry, Op, Reason};
use super::partition::{writer_properties, FileSettings, Table, IN_PROGRESS_SUFFIX};
use super::{file_settings, record_ranges, ArchiveError};
use crate::metrics::Metrics;

/// Environment variable (a testing aid, not a configuration key): `<step>:<file>` makes a
/// compaction write `<file>` and stop for good at `<step>` (`built`: the new folder is
/// complete, not yet swapped; `swapped`: swapped, the old folder not yet removed), so a test
/// can kill the process there.
pub const PAUSE_ENV: &str = "_TOOLWATCH_COMPACT_PAUSE";

/// When files are merged.
#[derive(Debug, Clone)]
pub struct Policy {
    /// Files younger than this are left alone.
    pub older_than: Duration,
    /// Aged small files needed to merge in an hour still being written.
    pub min_files: usize,
    /// Most input bytes merged into one file; files of half this or more are not small.
    pub max_bytes: u64,
    /// How often the daemon looks (background only).
    pub every: Duration,
    /// Writer settings for the merged files.
    pub settings: FileSettings,
    /// The key that signs the manifest entries of a compaction (empty: unsigned).
    pub signing_key_file: PathBuf,
    /// Retention, applied after each pass by the daemon's compactor.
    pub retention: super::retention::RetentionConfig,
}

impl Policy {
    /// The policy of an archive configuration.
    pub fn from_config(c: &ArchiveConfig) -> Policy {
        Policy {
            older_than: c.compact_after.0,
            min_files: c.compact_min_files.0.max(2),
            max_bytes: c.compact_max_bytes.0,
            every: c.compact_every.0,
            settings: file_settings(c),
            signing_key_file: c.manifest_signing_key_file.clone(),
            retention: c.retention.clone(),
        }
    }
}

/// What a compaction run did (or, dry, would do).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// Partitions looked at.
    pub partitions: u64,
    /// Partitions rewritten.
    pub compacted: u64,
    /// Files merged.
    pub files_in: u64,
    /// Their bytes.
    pub bytes_in: u64,
    /// Files written.
    pub files_out: u64,
    /// Their bytes (0 in a dry run).
    pub bytes_out: u64,
    /// Rows in the merged files (0 in a dry run).
    pub rows: u64,
    /// Left-over folders of interrupted compactions removed.
    pub cleaned: u64,
    /// Partitions skipped because another process held them.
    pub busy: u64,
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} partitions looked at, {} compacted: {} files ({} bytes) merged into {} ({} bytes, {} rows); {} interrupted compactions cleaned up; {} partitions busy",
            self.partitions,
            self.compacted,
            self.files_in,
            self.bytes_in,
            self.files_out,
            self.bytes_out,
            self.rows,
            self.cleaned,
            self.busy
        )
    }
}

/// A change [`Compactor::rewrite`] applies to each file's batches: the new batches, or
/// `None` to keep the file as it is.
pub type BatchChange<'a> =
    dyn FnMut(Vec<RecordBatch>) -> Result<Option<Vec<RecordBatch>>, ArchiveError> + 'a;

/// What [`Compactor::rewrite`] did to one partition.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rewrite {
    /// Completed files read.
    pub files_read: u64,
    /// Files replaced by a changed copy.
    pub files_rewritten: u64,
    /// Another process held the partition (or our readers the archive) throughout, or a
    /// file changed while it was rewritten: nothing was changed; try again.
    pub busy: bool,
    /// The partition folder holds a folder (or went): it was not looked at.
    pub skipped: bool,
}

/// A completed file of a partition folder.
#[derive(Debug, Clone)]
pub(super) struct FileInfo {
    name: String,
    path: PathBuf,
    bytes: u64,
    modified: SystemTime,
    /// Hex SHA-256 of the bytes, once read for a merge.
    sha256: String,
}

/// A merged file written into the staging folder.
pub(super) struct Written {
    name: String,
    bytes: u64,
    rows: u64,
    sha256: String,
}

/// Merges small files of the partitions under a data directory.
pub struct Compactor {
    data_dir: PathBuf,
    policy: Policy,
    instance_id: String,
    sequence: u64,
    /// Wait for a partition the daemon is writing (the CLI) or skip it (the daemon).
    wait: bool,
    dry_run: bool,
    metrics: Arc<Metrics>,
    /// Where merged and removed files are recorded (opened at the first compaction).
    manifest: Option<Arc<super::manifest::Manifest>>,
    /// Apply retention after each pass (the daemon's compactor).
    retention: bool,
}

impl Compactor {
    /// A compactor of the archive under `data_dir`; its files carry `instance_id`.
    pub fn new(
        data_dir: &Path,
        policy: Policy,
        instance_id: String,
        metrics: Arc<Metrics>,
    ) -> Compactor {
        Compactor {
            data_dir: data_dir.to_path_buf(),
            policy,
            instance_id,
            sequence: 0,
            wait: true,
            dry_run: false,
            metrics,
            manifest: None,
            retention: false,
        }
    }

    /// Also applies the policy's retention after each pass.
    pub fn with_retention(mut self) -> Compactor {
        self.retention = true;
        self
    }

    /// The instance's manifest, opened the first time it is needed.
    fn manifest(&mut self) -> std::io::Result<Arc<super::manifest::Manifest>> {
        if let Some(m) = &self.manifest {
            return Ok(Arc::clone(m));
        }
        let m = super::manifest::Manifest::shared(
            &self.data_dir,
            &self.instance_id,
            &self.policy.signing_key_file,
        )?;
        self.manifest = Some(Arc::clone(&m));
        Ok(m)
    }

    /// Deletes the partitions of `tables` past their retention.
    fn apply_retention(&mut self, tables: &[Table], now: SystemTime) {
        if !self.retention || self.dry_run || self.policy.retention.is_empty() {
            return;
        }
        let result = super::retention::expired(&self.data_dir, &self.policy.retention, tables, now)
            .and_then(|expired| {
                let done = self.delete_expired(&expired)?;
                Ok((expired.len(), done))
            });
        match result {
            Ok((0, _)) => {}
            Ok((partitions, (files, bytes))) => {
                tracing::info!(
                    partitions,
                    files,
                    bytes,
                    "expired archive partitions deleted"
                )
            }
            Err(e) => tracing::error!(error = %e, "retention failed; expired partitions kept"),
        }
    }

    /// Deletes `expired` partitions (see [`super::retention::apply`]), each removal recorded
    /// in this instance's manifest first, after the lines interrupted rewrites of their
    /// tables left pending (their files may be among those going). Returns (files, bytes).
    pub fn delete_expired(
        &mut self,
        expired: &[super::retention::Expired],
    ) -> Result<(u64, u64), ArchiveError> {
        let mut tables: Vec<Table> = expired.iter().map(|e| e.part.table).collect();
        tables.dedup();
        for table in tables {
            self.recover_pending(table);
        }
        let manifest = self
            .manifest()
            .map_err(|e| ArchiveError::io(&self.data_dir.join(super::manifest::DIR), e))?;
        super::retention::apply(&self.data_dir, expired, &manifest)
    }

    /// This instance's manifest file.
    pub fn manifest_path(&self) -> PathBuf {
        self.data_dir
            .join(super::manifest::DIR)
            .join(format!("{}.jsonl", self.instance_id))
    }

    /// The manifest entries of a swap: the inputs removed (with the hash they had when read,
    /// which `verify` checks against their `add`, so a file changed or slipped in before its
    /// rewrite is not laundered by it), the outputs added.
    fn entries(
        &self,
        part: &PartitionDir,
        removed: &[FileInfo],
        added: &[Written],
        reason: Reason,
    ) -> Vec<NewEntry> {
        let live = part.dir(&self.data_dir);
        let table = part.table.as_str().to_string();
        let mut entries: Vec<NewEntry> = removed
            .iter()
            .map(|f| NewEntry {
                op: Op::Remove,
                path: live.join(&f.name),
                table: table.clone(),
                rows: 0,
                bytes: f.bytes,
                sha256: f.sha256.clone(),
                records: None,
                reason,
            })
            .collect();
        entries.extend(added.iter().map(|w| NewEntry {
            op: Op::Add,
            path: live.join(&w.name),
            table: table.clone(),
            rows: w.rows,
            bytes: w.bytes,
            sha256: w.sha256.clone(),
            records: None,
            reason,
        }));
        entries
    }

    /// Appends a swap's entries to the manifest; true if they are there. A failure is
    /// logged and counted (the entries stay pending: the next pass appends them).
    fn record(&mut self, entries: &[NewEntry]) -> bool {
        match self.manifest().and_then(|m| m.append(entries)) {
            Ok(()) => true,
            Err(e) => {
                self.metrics.manifest_failed(entries.len());
                tracing::error!(error = %e, files = entries.len(), "archive rewrite not recorded in the manifest");
                false
            }
        }
    }

    /// Swaps the folder built in `staging` in for the live folder of `part` (whose lock the
    /// caller holds), records `removed` and `added` in the manifest and removes the old
    /// folder. False, with nothing changed and the built folder removed, when our readers
    /// held the archive throughout.
    pub(super) fn swap_in(
        &mut self,
        part: &PartitionDir,
        staging: &Path,
        removed: &[FileInfo],
        added: &[Written],
        reason: Reason,
    ) -> Result<bool, ArchiveError> {
        let live = part.dir(&self.data_dir);
        // Our readers list and read under the readers' lock: the swap waits for those in
        // progress, so none finds a listed file swapped away.
        let Some(readers) = ReadersLock::exclusive(&self.data_dir, self.readers_patience())? else {
            let _ = remove_dir(staging);
            tracing::debug!(
                table = part.table.as_str(),
                "a partition's rewrite was skipped: readers held the archive throughout"
            );
            return Ok(false);
        };
        // Written down before the swap: a crash between the swap and the manifest's lines
        // leaves them to the next pass over the work area, which appends them if the swap
        // happened (see [`Compactor::recover_pending`]).
        let entries = self.entries(part, removed, added, reason);
        let pending = part.pending(&self.data_dir);
        write_pending(&self.data_dir, &pending, &entries)?;
        pause_for_test("pending");
        lock::exchange(&live, staging)?;
        pause_for_test("exchanged");
        // The swap is made durable before the manifest says it happened.
        for dir in [live.parent(), staging.parent()].into_iter().flatten() {
            crate::durable::sync_dir(dir).map_err(|e| ArchiveError::io(dir, e))?;
        }
        // Recorded before readers (and `verify`) may look again: they see the new folder and
        // its entries together.
        let recorded = self.record(&entries);
        drop(readers);
        if recorded {
            remove_file(&pending)?;
        }
        pause_for_test("swapped");
        remove_dir(staging)?;
        Ok(true)
    }

    /// Appends the entries of swaps a crash left unrecorded: a pending file whose added files
    /// are all live was swapped in; one whose are not never was (its built folder is removed
    /// with the work area).
    fn recover_pending(&mut self, table: Table) {
        for part in lock::pending(&self.data_dir, table) {
            let recovered = PartitionLock::acquire(&self.data_dir, &part, self.wait).and_then(
                |lock| match lock {
                    Some(_lock) => self.recover_partition(&part),
                    None => Ok(()),
                },
            );
            // One unreadable pending file does not stop compaction; it stays for a look.
            if let Err(e) = recovered {
                tracing::error!(table = table.as_str(), error = %e, "pending manifest lines not recovered");
            }
        }
    }

    /// Recovers the pending lines of one partition, whose lock the caller holds (before
    /// anything else swaps it, so a later swap never overwrites them).
    fn recover_partition(&mut self, part: &PartitionDir) -> Result<(), ArchiveError> {
        let path = part.pending(&self.data_dir);
        if !path.exists() {
            return Ok(());
        }
        let entries = read_pending(&self.data_dir, &path)?;
        let added: Vec<&NewEntry> = entries.iter().filter(|e| e.op == Op::Add).collect();
        let swapped = !added.is_empty() && added.iter().all(|e| e.path.is_file());
        if swapped {
            tracing::warn!(
                table = part.table.as_str(),
                files = entries.len(),
                "recording an archive rewrite a crash left unrecorded"
            );
            if !self.record(&entries) {
                return Ok(());
            }
        }
        remove_file(&path)
    }

    /// Records the swaps interrupted rewrites of `table` made and removes what they left in
    /// the work area.
    pub fn clean_up_table(&mut self, table: Table) -> Result<(), ArchiveError> {
        self.clean_up(table, &mut Report::default())
    }

    /// Skips partitions another process holds instead of waiting for them.
    pub fn without_waiting(mut self) -> Compactor {
        self.wait = false;
        self
    }

    /// Only reports what would be merged.
    pub fn dry_run(mut self, dry: bool) -> Compactor {
        self.dry_run = dry;
        self
    }

    /// One pass over `tables` at `now`; `stop` is asked between partitions.
    pub fn run(
        &mut self,
        tables: &[Table],
        now: SystemTime,
        stop: &dyn Fn() -> bool,
    ) -> Result<Report, ArchiveError> {
        let mut report = Report::default();
        for &table in tables {
            if !self.dry_run {
                self.clean_up(table, &mut report)?;
            }
            for part in partitions(&self.data_dir, table)? {
                if stop() {
                    return Ok(report);
                }
                report.partitions += 1;
                match self.partition(&part, now, &mut report) {
                    Ok(()) => {}
                    // One unreadable partition does not stop the others.
                    Err(e) => {
                        tracing::error!(table = table.as_str(), error = %e, "compaction of a partition failed; its files are unchanged")
                    }
                }
            }
        }
        self.apply_retention(tables, now);
        Ok(report)
    }

    /// The partition's lock: waited for (the CLI), or tried for up to [`BUSY_PATIENCE`] (the
    /// daemon: its writers hold a partition only while they write a file into it, but a
    /// reader's flush holds every partition with rows at once, about every second while a
    /// reader polls; skipping at the first try left most partitions unmerged then).
    fn lock(&self, part: &PartitionDir) -> Result<Option<PartitionLock>, ArchiveError> {
        if self.wait {
            PartitionLock::acquire(&self.data_dir, part, true)
        } else {
            PartitionLock::acquire_within(&self.data_dir, part, BUSY_PATIENCE)
        }
    }

    /// How long a swap waits for our readers: for good (the CLI), or up to
    /// [`READERS_PATIENCE`] (the daemon, which holds the partition's lock meanwhile and so
    /// keeps its writer waiting).
    fn readers_patience(&self) -> Option<Duration> {
        (!self.wait).then_some(READERS_PATIENCE)
    }

    /// Records the swaps interrupted rewrites made, then removes the folders they left in
    /// the work area.
    fn clean_up(&mut self, table: Table, report: &mut Report) -> Result<(), ArchiveError> {
        self.recover_pending(table);
        for part in lock::staged(&self.data_dir, table) {
            let Some(_lock) = PartitionLock::acquire(&self.data_dir, &part, self.wait)? else {
                report.busy += 1;
                continue;
            };
            let staging = part.staging(&self.data_dir);
            if staging.exists() {
                remove_dir(&staging)?;
                report.cleaned += 1;
            }
        }
        Ok(())
    }

    /// Which files of a partition to merge, in groups of one output file each.
    fn plan(
        &self,
        part: &PartitionDir,
        now: SystemTime,
    ) -> Result<Vec<Vec<FileInfo>>, ArchiveError> {
        let Some(files) = list(&part.dir(&self.data_dir))? else {
            return Ok(Vec::new());
        };
        Ok(select(files, &self.policy, part.hour_start_ns(), now))
    }

    fn partition(
        &mut self,
        part: &PartitionDir,
        now: SystemTime,
        report: &mut Report,
    ) -> Result<(), ArchiveError> {
        // A look without the lock first: most partitions need nothing.
        if self.plan(part, now)?.is_empty() {
            return Ok(());
        }
        if self.dry_run {
            for g in self.plan(part, now)? {
                report.compacted += 1;
                report.files_in += g.len() as u64;
                report.bytes_in += g.iter().map(|f| f.bytes).sum::<u64>();
                report.files_out += 1;
            }
            return Ok(());
        }
        let Some(_lock) = self.lock(part)? else {
            report.busy += 1;
            return Ok(());
        };
        // Pending lines of an earlier swap of this partition go first (this swap's pending
        // file takes their place).
        self.recover_partition(part)?;
        // Again under the lock: the daemon may have written files since.
        let groups = self.plan(part, now)?;
        if groups.is_empty() {
            return Ok(());
        }
        let Some(files) = list(&part.dir(&self.data_dir))? else {
            return Ok(());
        };
        let staging = part.staging(&self.data_dir);
        if staging.exists() {
            remove_dir(&staging)?;
            report.cleaned += 1;
        }
        std::fs::create_dir_all(&staging).map_err(|e| ArchiveError::io(&staging, e))?;
        let result = self.build(part, &groups, &files, &staging);
        let (merged_in, outputs) = match result {
            Ok(r) => r,
            Err(e) => {
                // Nothing live changed; the half-built folder goes.
                let _ = remove_dir(&staging);
                return Err(e);
            }
        };
        pause_for_test("built");
        if !self.swap_in(part, &staging, &merged_in, &outputs, Reason::Compaction)? {
            report.busy += 1;
            return Ok(());
        }
        let bytes_in: u64 = merged_in.iter().map(|f| f.bytes).sum();
        let bytes_out: u64 = outputs.iter().map(|w| w.bytes).sum();
        let rows: u64 = outputs.iter().map(|w| w.rows).sum();
        report.compacted += 1;
        report.files_in += merged_in.len() as u64;
        report.bytes_in += bytes_in;
        report.files_out += outputs.len() as u64;
        report.bytes_out += bytes_out;
        report.rows += rows;
        self.metrics.archive_compaction(
            part.table.as_str(),
            (merged_in.len() as u64, bytes_in),
            (outputs.len() as u64, bytes_out),
        );
        tracing::info!(
            table = part.table.as_str(),
            files_in = merged_in.len(),
            bytes_in,
            files_out = outputs.len(),
            bytes_out,
            rows,
            "archive partition compacted"
        );
        Ok(())
    }

    /// Fills `staging` with the merged files and links to the others; returns the files
    /// merged and the files written.
    fn build(
        &mut self,
        part: &PartitionDir,
        groups: &[Vec<FileInfo>],
        files: &[FileInfo],
        staging: &Path,
    ) -> Result<(Vec<FileInfo>, Vec<Written>), ArchiveError> {
        // The table's schema is that of its newest file: the running release's (the stage
        // owning the table defines it; the archive does not know it).
        let Some(schema) = newest_schema(files)? else {
            return Ok((Vec::new(), Vec::new()));
        };
        let mut merged_in = Vec::new();
        let mut written = Vec::new();
        for group in groups {
            // Files of another schema (an older release) stay as they are.
            let mut batches = Vec::new();
            let mut inputs = Vec::new();
            for f in group {
                match read_file(&f.path, &schema)? {
                    Some((b, sha256)) => {
                        batches.extend(b);
                        inputs.push(FileInfo {
                            sha256,
                            ..f.clone()
                        });
                    }
                    None => {
                        tracing::warn!(path = %f.path.display(), "archive file of another schema not compacted")
                    }
                }
            }
            if inputs.len() < 2 {
                continue;
            }
            let name = self.merged_name(&inputs);
            let path = staging.join(&name);
            let (bytes, rows, sha256) =
                write_sorted(&path, part.table, &schema, &batches, &self.policy.settings)?;
            written.push(Written {
                name,
                bytes,
                rows,
                sha256,
            });
            merged_in.extend(inputs);
        }
        for f in files {
            if merged_in.iter().any(|m| m.name == f.name) {
                continue;
            }
            link_across(f, staging, &merged_in)?;
        }
        crate::durable::sync_dir(staging).map_err(|e| ArchiveError::io(staging, e))?;
        Ok((merged_in, written))
    }

    /// Rewrites the completed files of `part` that `change` changes (it is given each file's
    /// batches and returns the new ones, or `None` to keep the file), with the same swap and
    /// manifest entries (`reason`) as a merge: readers see the old folder or the new one, and
    /// a crash leaves one of them whole. The files are read and rewritten without the
    /// partition's lock (in the work area the caller owns, see [`ScrubLock`](lock::ScrubLock)),
    /// so the daemon's writer is held only for the swap; if a file rewritten changed or went
    /// meanwhile (a merge), nothing is swapped and the partition is reported busy.
    pub fn rewrite(
        &mut self,
        part: &PartitionDir,
        reason: Reason,
        change: &mut BatchChange<'_>,
    ) -> Result<Rewrite, ArchiveError> {
        let mut done = Rewrite::default();
        let live = part.dir(&self.data_dir);
        let Some(files) = list(&live)? else {
            done.skipped = !live.is_dir() || part_holds_folders(&live);
            return Ok(done);
        };
        let work = part.rewrite_work(&self.data_dir);
        remove_dir(&work)?;
        std::fs::create_dir_all(&work).map_err(|e| ArchiveError::io(&work, e))?;
        let result = self.rewrite_in(part, &files, &work, reason, change, &mut done);
        let _ = remove_dir(&work);
        match result {
            Ok(()) => Ok(done),
            // A file listed, then merged away before it was read: the partition is busy.
            Err(ArchiveError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                done.busy = true;
                Ok(done)
            }
            Err(e) => Err(e),
        }
    }

    fn rewrite_in(
        &mut self,
        part: &PartitionDir,
        files: &[FileInfo],
        work: &Path,
        reason: Reason,
        change: &mut BatchChange<'_>,
        done: &mut Rewrite,
    ) -> Result<(), ArchiveError> {
        let (removed, added) = self.build_rewrite(part, files, work, change, done)?;
        if removed.is_empty() {
            return Ok(());
        }
        let Some(_lock) = self.lock(part)? else {
            done.busy = true;
            return Ok(());
        };
        // Under the lock: the files rewritten must still be there as they were read; the
        // others (new flushes included) are linked across as they are now.
        let Some(now) = list(&part.dir(&self.data_dir))? else {
            done.busy = true;
            return Ok(());
        };
        let unchanged = removed
            .iter()
            .all(|r| now.iter().any(|f| f.name == r.name && f.bytes == r.bytes));
        if !unchanged {
            done.busy = true;
            return Ok(());
        }
        // Pending lines of an earlier swap of this partition go first: this swap's own
        // pending file takes their place.
        self.recover_partition(part)?;
        let staging = part.staging(&self.data_dir);
        remove_dir(&staging)?;
        std::fs::create_dir_all(&staging).map_err(|e| ArchiveError::io(&staging, e))?;
        let linked = link_staging(work, &staging, &added, &removed, &now);
        if let Err(e) = linked {
            let _ = remove_dir(&staging);
            return Err(e);
        }
        pause_for_test("built");
        if self.swap_in(part, &staging, &removed, &added, reason)? {
            done.files_rewritten = added.len() as u64;
        } else {
            done.busy = true;
        }
        Ok(())
    }

    /// Writes the changed files of `files` into `work` under new names; returns the files
    /// replaced and the files written.
    fn build_rewrite(
        &mut self,
        part: &PartitionDir,
        files: &[FileInfo],
        work: &Path,
        change: &mut BatchChange<'_>,
        done: &mut Rewrite,
    ) -> Result<(Vec<FileInfo>, Vec<Written>), ArchiveError> {
        let (mut removed, mut added) = (Vec::new(), Vec::new());
        for f in files.iter().filter(|f| is_completed(&f.name)) {
            let (schema, batches, sha256) = read_whole(&f.path)?;
            done.files_read += 1;
            let Some(changed) = change(batches)? else {
                continue;
            };
            let name = self.rewritten_name(&f.name);
            let path = work.join(&name);
            let (bytes, rows, new_sha) =
                write_in_order(&path, part.table, &schema, &changed, &self.policy.settings)?;
            removed.push(FileInfo {
                sha256,
                ..f.clone()
            });
            added.push(Written {
                name,
                bytes,
                rows,
                sha256: new_sha,
            });
        }
        Ok((removed, added))
    }

    /// `part-<time>-<instance>-s<n>` then the journal records the rewritten file's name
    /// claims, so replay after a crash skips what it skipped before.
    fn rewritten_name(&mut self, old: &str) -> String {
        self.sequence += 1;
        let mut name = format!(
            "part-{}-{}-s{:06}",
            chrono::Utc::now().format("%Y%m%dT%H%M%S%3fZ"),
            self.instance_id,
            self.sequence
        );
        for (id, first, last) in record_ranges(old) {
            name.push_str(&super::records_suffix(&id, (first, last)));
        }
        name.push_str(".parquet");
        name
    }

    /// `part-<time>-<instance>-c<n>` then, per journal id of the inputs, `_j<id>_<first>-<last>`.
    fn merged_name(&mut self, inputs: &[FileInfo]) -> String {
        self.sequence += 1;
        let mut ranges: Vec<(String, u64, u64)> = Vec::new();
        for f in inputs {
            for (id, first, last) in record_ranges(&f.name) {
                match ranges.iter_mut().find(|(i, _, _)| *i == id) {
                    Some(r) => {
                        r.1 = r.1.min(first);
                        r.2 = r.2.max(last);
                    }
                    None => ranges.push((id, first, last)),
                }
            }
        }
        ranges.sort();
        let mut name = format!(
            "part-{}-{}-c{:06}",
            chrono::Utc::now().format("%Y%m%dT%H%M%S%3fZ"),
            self.instance_id,
            self.sequence
        );
        for (id, first, last) in ranges {
            name.push_str(&super::records_suffix(&id, (first, last)));
        }
        name.push_str(".parquet");
        name
    }
}

/// The partition folders of `table`, sorted.
/// Young files are merged with others of their size tier: files under this are tier 0, and
/// each tier above holds files up to four times larger.
const TIER_BASE: u64 = 64 * 1024;

/// The size tier of a file of `bytes`: files in one tier are within a factor of four.
fn tier(bytes: u64) -> u32 {
    if bytes < TIER_BASE {
        0
    } else {
        (bytes / TIER_BASE).ilog(4) + 1
    }
}

/// The merge groups among a partition's `files` (see the module's rules). Small files that
/// have aged are merged all together, as before; younger ones (a flush for a reader writes
/// one per partition, up to twice a second) are merged `min_files` at a time with files of
/// their size tier, so a partition read in a loop holds a few files per tier instead of one
/// per flush, and each row is rewritten about once per tier, not once per merge.
fn select(
    files: Vec<FileInfo>,
    policy: &Policy,
    hour_start_ns: Option<i64>,
    now: SystemTime,
) -> Vec<Vec<FileInfo>> {
    let aged_before = now
        .checked_sub(policy.older_than)
        .unwrap_or(SystemTime::UNIX_EPOCH);
    let small = policy.max_bytes / 2;
    let mut candidates: Vec<FileInfo> = files
        .into_iter()
        .filter(|f| is_completed(&f.name) && f.bytes < small)
        .collect();
    candidates.sort_by(|a, b| a.name.cmp(&b.name));
    let (aged, young): (Vec<FileInfo>, Vec<FileInfo>) = candidates
        .into_iter()
        .partition(|f| f.modified <= aged_before);
    let hour_closed = hour_start_ns.is_some_and(|start| {
        let end = SystemTime::UNIX_EPOCH
            + Duration::from_nanos(u64::try_from(start).unwrap_or(0))
            + Duration::from_secs(3600);
        end <= aged_before
    });
    let needed = if hour_closed { 2 } else { policy.min_files };
    let mut groups = Vec::new();
    if aged.len() >= needed {
        groups.extend(by_bytes(aged, policy.max_bytes));
    }
    let mut tiers: std::collections::BTreeMap<u32, Vec<FileInfo>> = Default::default();
    for f in young {
        tiers.entry(tier(f.bytes)).or_default().push(f);
    }
    for (_, files) in tiers {
        if files.len() >= policy.min_files {
            groups.extend(by_bytes(files, policy.max_bytes));
        }
    }
    groups.retain(|g| g.len() >= 2);
    groups
}

/// `files` cut into groups of at most `max_bytes` of input each (a file over it alone).
fn by_bytes(files: Vec<FileInfo>, max_bytes: u64) -> Vec<Vec<FileInfo>> {
    let mut groups: Vec<Vec<FileInfo>> = Vec::new();
    let mut current: Vec<FileInfo> = Vec::new();
    let mut bytes = 0u64;
    for f in files {
        if !current.is_empty() && bytes + f.bytes > max_bytes {
            groups.push(std::mem::take(&mut current));
            bytes = 0;
        }
        bytes += f.bytes;
        current.push(f);
    }
    groups.push(current);
    groups
}

/// The partition folders of `table`, in order.
pub(super) fn partitions(data_dir: &Path, table: Table) -> Result<Vec<PartitionDir>, ArchiveError> {
    let mut out = Vec::new();
    let root = data_dir.join(table.as_str());
    for tenant in subdirs(&root, "tenant=")? {
        for date in subdirs(&root.join(format!("tenant={tenant}")), "date=")? {
            let d = root
                .join(format!("tenant={tenant}"))
                .join(format!("date={date}"));
            for hour in subdirs(&d, "hour=")? {
                out.push(PartitionDir {
                    table,
                    tenant: tenant.clone(),
                    date: date.clone(),
                    hour,
                });
            }
        }
    }
    out.sort();
    Ok(out)
}

/// The values of the `<prefix><value>` folders in `dir`.
fn subdirs(dir: &Path, prefix: &str) -> Result<Vec<String>, ArchiveError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(ArchiveError::io(dir, e)),
    };
    let mut out = Vec::new();
    for e in entries {
        let e = e.map_err(|err| ArchiveError::io(dir, err))?;
        if !e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
            continue;
        }
        if let Some(v) = e.file_name().to_str().and_then(|n| n.strip_prefix(prefix)) {
            if !v.is_empty() && !v.contains('@') {
                out.push(v.to_string());
            }
        }
    }
    Ok(out)
}

/// The completed files of a partition folder; `None` when it holds anything else than files
/// (a folder inside is not ours to move) or is gone.
fn list(dir: &Path) -> Result<Option<Vec<FileInfo>>, ArchiveError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(ArchiveError::io(dir, e)),
    };
    let mut out = Vec::new();
    for e in entries {
        let e = e.map_err(|err| ArchiveError::io(dir, err))?;
        let meta = e
            .metadata()
            .map_err(|err| ArchiveError::io(&e.path(), err))?;
        if meta.is_dir() {
            return Ok(None);
        }
        let Some(name) = e.file_name().to_str().map(str::to_string) else {
            return Ok(None);
        };
        // A dead writer's unfinished file is not data: it is left out of the new folder.
        if name.ends_with(IN_PROGRESS_SUFFIX) {
            continue;
        }
        out.push(FileInfo {
            path: e.path(),
            bytes: meta.len(),
            modified: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
            name,
            sha256: String::new(),
        });
    }
    // Only completed Parquet files are merged; any other file is linked across unchanged.
    Ok(Some(out))
}

/// The completed files of a partition folder, by name; `None` when it holds a folder.
pub(super) fn completed_files(dir: &Path) -> Result<Option<Vec<PathBuf>>, ArchiveError> {
    let Some(files) = list(dir)? else {
        return Ok(None);
    };
    let mut out: Vec<PathBuf> = files
        .into_iter()
        .filter(|f| is_completed(&f.name))
        .map(|f| f.path)
        .collect();
    out.sort();
    Ok(Some(out))
}

/// True for a completed Parquet file's name.
pub(super) fn is_completed(name: &str) -> bool {
    name.ends_with(".parquet") && !name.starts_with('.')
}

/// The Arrow schema of the newest completed file of `files` whose footer can be read (by
/// modification time, then name); `None` if there is none.
fn newest_schema(files: &[FileInfo]) -> Result<Option<arrow::datatypes::SchemaRef>, ArchiveError> {
    let mut newest: Vec<&FileInfo> = files.iter().filter(|f| is_completed(&f.name)).collect();
    newest.sort_by(|a, b| (b.modified, &b.name).cmp(&(a.modified, &a.name)));
    let mut first_error = None;
    for f in newest {
        let opened = File::open(&f.path)
            .map_err(|e| ArchiveError::io(&f.path, e))
            .and_then(|file| {
                ParquetRecordBatchReaderBuilder::try_new(file).map_err(ArchiveError::Parquet)
            });
        match opened {
            Ok(builder) => return Ok(Some(Arc::clone(builder.schema()))),
            // A damaged file does not decide the schema; the next newest does.
            Err(e) => {
                tracing::warn!(path = %f.path.display(), error = %e, "archive file unreadable");
                first_error.get_or_insert(e);
            }
        }
    }
    first_error.map_or(Ok(None), Err)
}

/// A completed file's batches, if it has `schema`, and the hex SHA-256 of its bytes (for the
/// manifest): read once, hashed and decoded from memory (inputs are small files).
fn read_file(
    path: &Path,
    schema: &arrow::datatypes::SchemaRef,
) -> Result<Option<(Vec<RecordBatch>, String)>, ArchiveError> {
    if !path
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(is_completed)
    {
        return Ok(None);
    }
    let (builder, sha256) = open_hashed(path)?;
    if builder.schema().fields() != schema.fields() {
        return Ok(None);
    }
    Ok(Some((decode(builder)?, sha256)))
}

/// A completed file's schema, batches and the hex SHA-256 of its bytes, read once.
pub(super) fn read_whole(
    path: &Path,
) -> Result<(arrow::datatypes::SchemaRef, Vec<RecordBatch>, String), ArchiveError> {
    let (builder, sha256) = open_hashed(path)?;
    let schema = Arc::clone(builder.schema());
    Ok((schema, decode(builder)?, sha256))
}

/// A file read into memory and hashed, ready to decode.
fn open_hashed(
    path: &Path,
) -> Result<(ParquetRecordBatchReaderBuilder<bytes::Bytes>, String), ArchiveError> {
    let bytes = bytes::Bytes::from(std::fs::read(path).map_err(|e| ArchiveError::io(path, e))?);
    let sha256 = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&bytes));
    let builder = ParquetRecordBatchReaderBuilder::try_new(bytes).map_err(ArchiveError::Parquet)?;
    Ok((builder, sha256))
}

/// Every batch of a file.
fn decode(
    builder: ParquetRecordBatchReaderBuilder<bytes::Bytes>,
) -> Result<Vec<RecordBatch>, ArchiveError> {
    let reader = builder
        .with_batch_size(8192)
        .build()
        .map_err(ArchiveError::Parquet)?;
    let mut out = Vec::new();
    for b in reader {
        out.push(b?);
    }
    Ok(out)
}

/// Writes `batches` (of `schema`) to `path` as they are, fsynced; returns (bytes, rows,
/// hex SHA-256).
fn write_in_order(
    path: &Path,
    table: Table,
    schema: &arrow::datatypes::SchemaRef,
    batches: &[RecordBatch],
    settings: &FileSettings,
) -> Result<(u64, u64, String), ArchiveError> {
    let mut writer = open_writer(path, table, schema, settings)?;
    let mut rows = 0u64;
    for b in batches {
        writer.write(b).map_err(ArchiveError::Parquet)?;
        rows += b.num_rows() as u64;
    }
    finish_file(path, writer).map(|(bytes, sha)| (bytes, rows, sha))
}

/// A file being written, hashed as its bytes go out (the manifest needs the hash; reading
/// the file back for it would read every merged byte twice).
struct HashedFile {
    file: File,
    hasher: sha2::Sha256,
    bytes: u64,
}

impl std::io::Write for HashedFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.file.write(buf)?;
        sha2::Digest::update(&mut self.hasher, &buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

/// A Parquet writer of `table`'s settings into a new file at `path`.
fn open_writer(
    path: &Path,
    table: Table,
    schema: &arrow::datatypes::SchemaRef,
    settings: &FileSettings,
) -> Result<ArrowWriter<HashedFile>, ArchiveError> {
    let file = File::create(path).map_err(|e| ArchiveError::io(path, e))?;
    let props = writer_properties(settings, table)?;
    let out = HashedFile {
        file,
        hasher: <sha2::Sha256 as sha2::Digest>::new(),
        bytes: 0,
    };
    ArrowWriter::try_new(out, Arc::clone(schema), Some(props)).map_err(ArchiveError::Parquet)
}

/// Closes a writer's file, fsynced; returns its size and hex SHA-256.
fn finish_file(
    path: &Path,
    writer: ArrowWriter<HashedFile>,
) -> Result<(u64, String), ArchiveError> {
    let out = writer.into_inner().map_err(ArchiveError::Parquet)?;
    out.file.sync_all().map_err(|e| ArchiveError::io(path, e))?;
    let sha = hex::encode(sha2::Digest::finalize(out.hasher));
    Ok((out.bytes, sha))
}

/// The sort key of a table's rows.
fn sort_columns(table: Table) -> &'static [&'static str] {
    match table {
        Table::Spans => &["trace_id", "start_time"],
        Table::Logs => &["trace_id", "time"],
        Table::Requests => &["start_time", "request_id"],
        Table::Alarms => &["time", "alarm_id"],
        Table::Findings => &["time", "finding_id"],
    }
}

/// Writes `batches` (of `schema`) to `path` sorted by the table's key, fsynced; returns
/// (bytes, rows).
fn write_sorted(
    path: &Path,
    table: Table,
    schema: &arrow::datatypes::SchemaRef,
    batches: &[RecordBatch],
    settings: &FileSettings,
) -> Result<(u64, u64, String), ArchiveError> {
    let mut keys = Vec::new();
    for name in sort_columns(table) {
        let idx = schema.index_of(name)?;
        let parts: Vec<&dyn arrow::array::Array> =
            batches.iter().map(|b| b.column(idx).as_ref()).collect();
        let values: ArrayRef = if parts.is_empty() {
            arrow::array::new_empty_array(schema.field(idx).data_type())
        } else {
            arrow::compute::concat(&parts)?
        };
        keys.push(SortColumn {
            values,
            options: None,
        });
    }
    let order = arrow::compute::lexsort_to_indices(&keys, None)?;
    // Global row number to (batch, row).
    let mut starts = Vec::with_capacity(batches.len());
    let mut n = 0usize;
    for b in batches {
        starts.push(n);
        n += b.num_rows();
    }
    let locate = |global: usize| -> (usize, usize) {
        let b = starts.partition_point(|&s| s <= global) - 1;
        (b, global - starts[b])
    };
    let mut writer = open_writer(path, table, schema, settings)?;
    let refs: Vec<&RecordBatch> = batches.iter().collect();
    let chunk = settings.row_group_rows.clamp(1, 65536);
    for slice in order.values().chunks(chunk) {
        let indices: Vec<(usize, usize)> = slice.iter().map(|&g| locate(g as usize)).collect();
        let out = arrow::compute::interleave_record_batch(&refs, &indices)?;
        writer.write(&out).map_err(ArchiveError::Parquet)?;
    }
    finish_file(path, writer).map(|(bytes, sha)| (bytes, n as u64, sha))
}

/// Fills `staging` for a rewrite: the files written in `work` moved in, hard links of the
/// live files (`now`) not replaced; fsynced.
fn link_staging(
    work: &Path,
    staging: &Path,
    added: &[Written],
    removed: &[FileInfo],
    now: &[FileInfo],
) -> Result<(), ArchiveError> {
    for w in added {
        let (from, to) = (work.join(&w.name), staging.join(&w.name));
        std::fs::rename(&from, &to).map_err(|e| ArchiveError::io(&to, e))?;
    }
    for f in now {
        if removed.iter().any(|r| r.name == f.name) {
            continue;
        }
        link_across(f, staging, removed)?;
    }
    crate::durable::sync_dir(staging).map_err(|e| ArchiveError::io(staging, e))
}

/// Puts a file the swap keeps into the new folder `staging`: a hard link, except the
/// offload marker, written anew without the files the swap removes (a copy a scrub brought
/// back and replaced, one a merge took in), so the marker changes with the swap itself.
fn link_across(f: &FileInfo, staging: &Path, removed: &[FileInfo]) -> Result<(), ArchiveError> {
    let to = staging.join(&f.name);
    if f.name != super::offload::MARKER {
        return std::fs::hard_link(&f.path, &to).map_err(|e| ArchiveError::io(&to, e));
    }
    let dir = f.path.parent().unwrap_or(Path::new("."));
    let kept: Vec<_> = super::offload::read_marker(dir)?
        .into_iter()
        .filter(|o| {
            let name = o.path.rsplit('/').next().unwrap_or(&o.path);
            !removed.iter().any(|r| r.name == name)
        })
        .collect();
    super::offload::write_marker(staging, &kept)
}

/// True when a partition folder holds a folder (which no rewrite moves).
fn part_holds_folders(dir: &Path) -> bool {
    std::fs::read_dir(dir)
        .map(|rd| rd.flatten().any(|e| e.path().is_dir()))
        .unwrap_or(false)
}

/// Writes a swap's entries to `path` (durably, before the swap), their paths relative to
/// the data directory.
fn write_pending(data_dir: &Path, path: &Path, entries: &[NewEntry]) -> Result<(), ArchiveError> {
    let mut text = String::new();
    for e in entries {
        let relative = NewEntry {
            path: e
                .path
                .strip_prefix(data_dir)
                .unwrap_or(&e.path)
                .to_path_buf(),
            ..e.clone()
        };
        let json = serde_json::to_string(&relative)
            .map_err(|e| ArchiveError::io(path, std::io::Error::other(e)))?;
        text.push_str(&json);
        text.push('\n');
    }
    let dir = path.parent().unwrap_or(data_dir);
    std::fs::create_dir_all(dir).map_err(|e| ArchiveError::io(dir, e))?;
    crate::durable::replace_file(path, text.as_bytes()).map_err(|e| ArchiveError::io(path, e))
}

/// The entries of a pending file; a line that does not parse is skipped (the file was
/// written whole, through a rename, so that is damage, not a torn write).
fn read_pending(data_dir: &Path, path: &Path) -> Result<Vec<NewEntry>, ArchiveError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(ArchiveError::io(path, e)),
    };
    let mut out = Vec::new();
    for line in text.lines() {
        let Ok(mut e) = serde_json::from_str::<NewEntry>(line) else {
            tracing::warn!(path = %path.display(), "unreadable line in a pending manifest file skipped");
            continue;
        };
        e.path = data_dir.join(&e.path);
        out.push(e);
    }
    Ok(out)
}

fn remove_file(path: &Path) -> Result<(), ArchiveError> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(ArchiveError::io(path, e)),
    }
}

fn remove_dir(dir: &Path) -> Result<(), ArchiveError> {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(ArchiveError::io(dir, e)),
    }
}

/// See [`PAUSE_ENV`].
fn pause_for_test(step: &str) {
    let Ok(v) = std::env::var(PAUSE_ENV) else {
        return;
    };
    let Some((at, marker)) = v.split_once(':') else {
        return;
    };
    if at != step {
        return;
    }
    let _ = std::fs::write(marker, step);
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

/// How long the daemon's compactor tries for a partition its writers hold before it skips it.
const BUSY_PATIENCE: Duration = Duration::from_secs(2);

/// How long the daemon's compactor waits for our readers to let it swap a folder before it
/// drops the merge (done again at the next pass). A reader holds the readers' lock for one
/// query at a time, and starts its next only after a flush; half a second finds a gap.
const READERS_PATIENCE: Duration = Duration::from_millis(500);

/// While readers have files flushed, the daemon looks for small files this often (rather
/// than every `compact_every`): often enough that a partition read in a loop holds a few
/// dozen files, not hundreds; seldom enough that a reader seldom finds a file it listed
/// swapped away by a merge (it then lists again; see `query`).
pub const AFTER_FLUSHES: Duration = Duration::from_secs(10);

/// What the compaction thread is asked to do next.
#[derive(Debug, Default)]
struct Asked {
    /// Stop for good.
    stop: bool,
    /// Files were flushed for a reader since the last pass.
    flushed: bool,
}

/// The daemon's compaction thread for some tables.
pub struct Background {
    stop: Arc<(Mutex<Asked>, Condvar)>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Background {
    /// Starts compacting `tables` now and every `policy.every`, skipping partitions another
    /// process holds; `None` if the thread cannot start (logged: the archive works without).
    pub fn start(
        data_dir: &Path,
        tables: &[Table],
        policy: Policy,
        instance_id: String,
        metrics: Arc<Metrics>,
    ) -> Option<Background> {
        let stop = Arc::new((Mutex::new(Asked::default()), Condvar::new()));
        let every = policy.every;
        let mut compactor = Compactor::new(data_dir, policy, instance_id, metrics)
            .without_waiting()
            .with_retention();
        let tables = tables.to_vec();
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("toolwatch-compact".into())
            .spawn(move || loop {
                let stopped = || flag.0.lock().unwrap_or_else(PoisonError::into_inner).stop;
                {
                    let mut asked = flag.0.lock().unwrap_or_else(PoisonError::into_inner);
                    if asked.stop {
                        return;
                    }
                    // Flushes from now on count for the next pass.
                    asked.flushed = false;
                }
                if let Err(e) = compactor.run(&tables, SystemTime::now(), &stopped) {
                    tracing::error!(error = %e, "archive compaction failed");
                }
                let last = std::time::Instant::now();
                let mut asked = flag.0.lock().unwrap_or_else(PoisonError::into_inner);
                loop {
                    if asked.stop {
                        return;
                    }
                    let due = if asked.flushed {
                        every.min(AFTER_FLUSHES)
                    } else {
                        every
                    };
                    let Some(left) = due.checked_sub(last.elapsed()).filter(|d| !d.is_zero())
                    else {
                        break;
                    };
                    asked = flag
                        .1
                        .wait_timeout(asked, left)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0;
                }
            });
        match thread {
            Ok(t) => Some(Background {
                stop,
                thread: Some(t),
            }),
            Err(e) => {
                tracing::error!(error = %e, "cannot start archive compaction");
                None
            }
        }
    }

    /// Asks the thread to stop after the partition it is on.
    pub fn signal_stop(&self) {
        self.stop
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .stop = true;
        self.stop.1.notify_all();
    }

    /// Tells the thread that a flush just wrote small files: it looks again within
    /// [`AFTER_FLUSHES`] of its last pass.
    pub fn flushed(&self) {
        let mut asked = self.stop.0.lock().unwrap_or_else(PoisonError::into_inner);
        if !asked.flushed {
            asked.flushed = true;
            self.stop.1.notify_all();
        }
    }

    /// Stops the thread and waits for it.
    pub fn stop(mut self) {
        self.signal_stop();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_swap_takes_the_files_it_removes_off_the_offload_marker() {
        use crate::archive::offload::{read_marker, write_marker, OffloadedFile, MARKER};
        let dir = tempfile::tempdir().expect("tempdir");
        let (live, staging) = (dir.path().join("live"), dir.path().join("staging"));
        std::fs::create_dir_all(&live).expect("live");
        std::fs::create_dir_all(&staging).expect("staging");
        let listed = |name: &str| OffloadedFile {
            path: format!("spans/tenant=a/date=2020-01-01/hour=00/{name}"),
            bytes: 1,
            sha256: "00".into(),
            recorded: true,
        };
        write_marker(&live, &[listed("part-a.parquet"), listed("part-b.parquet")]).expect("marker");
        let info = |name: &str| FileInfo {
            name: name.to_string(),
            path: live.join(name),
            bytes: 1,
            modified: SystemTime::UNIX_EPOCH,
            sha256: String::new(),
        };
        // A copy of part-a a scrub brought back, replaced by this swap.
        link_across(&info(MARKER), &staging, &[info("part-a.parquet")]).expect("link");
        assert_eq!(
            read_marker(&staging).expect("read"),
            vec![listed("part-b.parquet")]
        );
        // The live folder's marker is untouched until the folders are exchanged.
        assert_eq!(read_marker(&live).expect("read").len(), 2);
    }
    use arrow::array::{StringArray, TimestampNanosecondArray};
    use arrow::datatypes::{DataType, Field, Schema};

    const T0: i64 = 1_577_836_800_000_000_000; // 2020-01-01T00:00:00Z

    /// Writes a file of `rows` alarm-like rows into the partition folder `dir`, of the schema
    /// with (`with_note`) or without a third column, last modified `ago` before now.
    fn write(dir: &Path, name: &str, rows: i64, with_note: bool, ago: Duration) {
        let ts = DataType::Timestamp(arrow::datatypes::TimeUnit::Nanosecond, Some("UTC".into()));
        let mut fields = vec![
            Field::new("time", ts, false),
            Field::new("alarm_id", DataType::Utf8, false),
        ];
        let times = TimestampNanosecondArray::from((0..rows).map(|i| T0 + i).collect::<Vec<_>>())
            .with_timezone("UTC");
        let ids = StringArray::from((0..rows).map(|i| format!("{name}-{i}")).collect::<Vec<_>>());
        let mut cols: Vec<ArrayRef> = vec![Arc::new(times), Arc::new(ids)];
        if with_note {
            fields.push(Field::new("note", DataType::Utf8, true));
            cols.push(Arc::new(StringArray::from(vec![Some("n"); rows as usize])));
        }
        let batch = RecordBatch::try_new(Arc::new(Schema::new(fields)), cols).expect("batch");
        let path = dir.join(name);
        let file = File::create(&path).expect("create");
        let mut w = ArrowWriter::try_new(file, batch.schema(), None).expect("writer");
        w.write(&batch).expect("write");
        let file = w.into_inner().expect("close");
        file.set_modified(SystemTime::now() - ago).expect("mtime");
    }

    #[test]
    fn a_written_files_hash_and_size_are_those_of_its_bytes_on_disk() {
        let dir = tempfile::tempdir().expect("tempdir");
        write(dir.path(), "in.parquet", 500, true, Duration::ZERO);
        let (schema, batches, _) = read_whole(&dir.path().join("in.parquet")).expect("read");
        let settings = file_settings(&ArchiveConfig::default());
        for (name, sorted) in [("sorted.parquet", true), ("as-is.parquet", false)] {
            let path = dir.path().join(name);
            let (bytes, rows, sha) = if sorted {
                write_sorted(&path, Table::Alarms, &schema, &batches, &settings)
            } else {
                write_in_order(&path, Table::Alarms, &schema, &batches, &settings)
            }
            .expect("write");
            assert_eq!(rows, 500);
            assert_eq!(bytes, std::fs::metadata(&path).expect("meta").len());
            assert_eq!(
                sha,
                super::super::manifest::file_sha256(&path).expect("hash")
            );
        }
    }

    /// Merges files a minute old, two at a time.
    fn merging_two_aged() -> Policy {
        Policy {
            older_than: Duration::from_secs(60),
            min_files: 2,
            max_bytes: 64 << 20,
            every: Duration::ZERO,
            settings: file_settings(&ArchiveConfig::default()),
            signing_key_file: PathBuf::new(),
            retention: Default::default(),
        }
    }

    #[test]
    fn files_of_another_schema_than_the_newest_are_left_as_they_are() {
        let data = tempfile::tempdir().expect("tempdir");
        let dir = data.path().join("alarms/tenant=t/date=2020-01-01/hour=00");
        std::fs::create_dir_all(&dir).expect("mkdir");
        let hour = Duration::from_secs(3600);
        write(&dir, "part-a.parquet", 2, false, 3 * hour);
        write(&dir, "part-b.parquet", 3, true, 2 * hour);
        write(&dir, "part-c.parquet", 4, true, hour);
        let policy = merging_two_aged();
        let mut c = Compactor::new(data.path(), policy, "0a0b0c0d".into(), Arc::default());
        let report = c
            .run(&[Table::Alarms], SystemTime::now(), &|| false)
            .expect("compaction");
        assert_eq!((report.compacted, report.files_in, report.rows), (1, 2, 7));
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .expect("list")
            .flatten()
            .filter_map(|e| e.file_name().to_str().map(str::to_string))
            .collect();
        names.sort();
        assert_eq!(names.len(), 2, "{names:?}");
        assert_eq!(names[1], "part-a.parquet", "the older schema's file stays");
        let merged = ParquetRecordBatchReaderBuilder::try_new(
            File::open(dir.join(&names[0])).expect("open"),
        )
        .expect("parquet");
        assert_eq!(
            merged.schema().fields().len(),
            3,
            "the newest file's schema"
        );
    }

    #[test]
    fn the_daemons_compactor_leaves_a_partition_our_readers_hold_and_merges_it_after() {
        let data = tempfile::tempdir().expect("tempdir");
        let dir = data.path().join("alarms/tenant=t/date=2020-01-01/hour=00");
        std::fs::create_dir_all(&dir).expect("mkdir");
        let hour = Duration::from_secs(3600);
        for (name, rows) in [("part-a.parquet", 2), ("part-b.parquet", 3)] {
            write(&dir, name, rows, false, hour);
        }
        let policy = merging_two_aged();
        let mut c = Compactor::new(data.path(), policy, "0a0b0c0d".into(), Arc::default())
            .without_waiting();
        let count = || std::fs::read_dir(&dir).expect("list").count();
        let reading = ReadersLock::shared(data.path()).expect("readers' lock");
        let report = c
            .run(&[Table::Alarms], SystemTime::now(), &|| false)
            .expect("compaction");
        assert_eq!((report.compacted, report.busy), (0, 1));
        assert_eq!(count(), 2, "the listed files are still there");
        assert!(
            lock::staged(data.path(), Table::Alarms).is_empty(),
            "the dropped merge left no folder behind"
        );
        drop(reading);
        let report = c
            .run(&[Table::Alarms], SystemTime::now(), &|| false)
            .expect("compaction");
        assert_eq!((report.compacted, report.busy, report.rows), (1, 0, 5));
        assert_eq!(count(), 1);
    }

    const MIB: u64 = 1024 * 1024;

    fn policy() -> Policy {
        Policy {
            older_than: Duration::from_secs(300),
            min_files: 4,
            max_bytes: 64 * MIB,
            every: Duration::from_secs(60),
            settings: file_settings(&crate::config::ArchiveConfig::default()),
            signing_key_file: PathBuf::new(),
            retention: Default::default(),
        }
    }

    fn file(n: u32, bytes: u64, age_s: u64, now: SystemTime) -> FileInfo {
        let name = format!("part-{n:04}.parquet");
        FileInfo {
            path: PathBuf::from(&name),
            name,
            bytes,
            modified: now - Duration::from_secs(age_s),
            sha256: String::new(),
        }
    }

    fn names(groups: &[Vec<FileInfo>]) -> Vec<Vec<&str>> {
        groups
            .iter()
            .map(|g| g.iter().map(|f| f.name.as_str()).collect())
            .collect()
    }

    #[test]
    fn tiers_are_factors_of_four() {
        assert_eq!(tier(0), 0);
        assert_eq!(tier(TIER_BASE - 1), 0);
        assert_eq!(tier(TIER_BASE), 1);
        assert_eq!(tier(4 * TIER_BASE - 1), 1);
        assert_eq!(tier(4 * TIER_BASE), 2);
        assert_eq!(tier(16 * TIER_BASE), 3);
    }

    #[test]
    fn young_files_merge_by_tier_aged_ones_all_together() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(10 * 86_400);
        // An hour still being written (it starts now).
        let hour = Some(
            i64::try_from(
                now.duration_since(SystemTime::UNIX_EPOCH)
                    .unwrap()
                    .as_nanos(),
            )
            .unwrap(),
        );
        let files = vec![
            // Three young tier-0 files: one short of a merge.
            file(1, 10_000, 1, now),
            file(2, 20_000, 2, now),
            file(3, 30_000, 3, now),
            // Four young tier-2 files (256 KiB..1 MiB): merged.
            file(4, 300_000, 5, now),
            file(5, 400_000, 6, now),
            file(6, 500_000, 7, now),
            file(7, 600_000, 8, now),
            // A large file is never an input.
            file(8, 40 * MIB, 9, now),
            // Four aged files of mixed sizes: merged together whatever their tiers.
            file(9, 10_000, 400, now),
            file(10, 2 * MIB, 400, now),
            file(11, 100_000, 500, now),
            file(12, 5 * MIB, 600, now),
        ];
        let groups = select(files.clone(), &policy(), hour, now);
        assert_eq!(
            names(&groups),
            vec![
                vec![
                    "part-0009.parquet",
                    "part-0010.parquet",
                    "part-0011.parquet",
                    "part-0012.parquet"
                ],
                vec![
                    "part-0004.parquet",
                    "part-0005.parquet",
                    "part-0006.parquet",
                    "part-0007.parquet"
                ],
            ]
        );
        // One more young tier-0 file makes four of them.
        let mut more = files;
        more.push(file(13, 5_000, 0, now));
        let groups = select(more, &policy(), hour, now);
        assert_eq!(groups.len(), 3);
        // Tiers in order: the tier-0 group comes before the tier-2 one.
        assert_eq!(
            names(&groups)[1],
            vec![
                "part-0001.parquet",
                "part-0002.parquet",
                "part-0003.parquet",
                "part-0013.parquet"
            ]
        );
    }

    /// A partition flushed once a second for ten minutes, with a compaction pass every
    /// [`AFTER_FLUSHES`], holds a few dozen files at any time, not one per flush.
    #[test]
    fn a_partition_read_in_a_loop_stays_at_a_few_files() {
        let start = SystemTime::UNIX_EPOCH + Duration::from_secs(10 * 86_400);
        let hour = Some(
            i64::try_from(
                start
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .unwrap()
                    .as_nanos(),
            )
            .unwrap(),
        );
        let mut files: Vec<(u64, SystemTime)> = Vec::new();
        let mut most = 0;
        let mut rewritten = 0u64;
        for s in 0..600u64 {
            let now = start + Duration::from_secs(s);
            files.push((30_000, now));
            most = most.max(files.len());
            // The daemon looks every AFTER_FLUSHES while files are flushed.
            if (s + 1) % AFTER_FLUSHES.as_secs() != 0 {
                continue;
            }
            let infos: Vec<FileInfo> = files
                .iter()
                .enumerate()
                .map(|(i, &(bytes, modified))| FileInfo {
                    name: format!("part-{i:06}.parquet"),
                    path: PathBuf::new(),
                    bytes,
                    modified,
                    sha256: String::new(),
                })
                .collect();
            let groups = select(infos, &policy(), hour, now);
            let mut merged: Vec<usize> = Vec::new();
            let mut out = Vec::new();
            for g in &groups {
                let bytes: u64 = g.iter().map(|f| f.bytes).sum();
                rewritten += bytes;
                out.push((bytes, now));
                merged.extend(g.iter().map(|f| f.name[5..11].parse::<usize>().unwrap()));
            }
            files = files
                .into_iter()
                .enumerate()
                .filter(|(i, _)| !merged.contains(i))
                .map(|(_, f)| f)
                .chain(out)
                .collect();
            most = most.max(files.len());
        }
        let total = 600 * 30_000u64;
        // Without the tiers, one file per flush until they age: about 300 at a time.
        assert_eq!((most, files.len()), (19, 9));
        // Each byte rewritten under three times (once per tier it passes, and once more when
        // aged), not once per flush.
        assert_eq!(rewritten, 49_200_000);
        assert!(rewritten < 3 * total);
    }
}
