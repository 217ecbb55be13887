//! Compaction: a partition's small files merged into one sorted file, atomically.
//!
//! A partition's files are *small* when under half of `archive.compact_max_bytes`; once they
//! are older than `compact_after` they are merged: in an hour still being written once
//! `compact_min_files` of them have aged, in an hour that ended `compact_after` ago as soon as
//! there are two. Younger small files (flushes for readers write one per partition, up to twice
//! a second) are merged as soon as `compact_min_files` of one size tier (a factor of four
//! apart) are there; while readers have files flushed, the daemon looks every
//! [`AFTER_FLUSHES`](background::AFTER_FLUSHES). Merged rows are sorted (spans and logs by trace id then time, requests and
//! alarms by time), so a trace's rows sit together and row-group statistics prune by trace.
//!
//! Atomic for every reader of `<table>/**/*.parquet` (DataFusion, DuckDB, pyarrow):
//! 1. lock the partition (see [`lock`]: the daemon writes no file into it meanwhile);
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
//!
//! When files are merged is the [`policy`]'s; the daemon compacts on a thread of its own
//! ([`background`]); [`scrub`] rewrites files through the same swap ([`Compactor::rewrite`]).

pub mod background;
mod files;
pub mod policy;
pub mod scrub;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use arrow::record_batch::RecordBatch;

use crate::archive::error::ArchiveError;
use crate::archive::layout::lock::{self, PartitionLock, ReadersLock};
use crate::archive::layout::names::{record_ranges, records_suffix};
use crate::archive::layout::offloaded::{self, MARKER};
use crate::archive::layout::partition::{is_completed, partitions, PartitionDir};
use crate::archive::manifest::{self, NewEntry, Op, Reason};
use crate::archive::retention;
use crate::archive::table::Table;
use crate::metrics::Metrics;
use files::{list, newest_schema, read_file, read_whole, write_in_order, write_sorted, FileInfo};
use policy::{select, Policy};

/// Environment variable (a testing aid, not a configuration key): `<step>:<file>` makes a
/// compaction write `<file>` and stop for good at `<step>` (`built`: the new folder is
/// complete, not yet swapped; `swapped`: swapped, the old folder not yet removed), so a test
/// can kill the process there.
pub const PAUSE_ENV: &str = "_TOOLWATCH_COMPACT_PAUSE";

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
    manifest: Option<Arc<manifest::Manifest>>,
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
    fn manifest(&mut self) -> std::io::Result<Arc<manifest::Manifest>> {
        if let Some(m) = &self.manifest {
            return Ok(Arc::clone(m));
        }
        let m = manifest::Manifest::shared(
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
        let result = retention::expired(&self.data_dir, &self.policy.retention, tables, now)
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

    /// Deletes `expired` partitions (see [`retention::apply`]), each removal recorded
    /// in this instance's manifest first, after the lines interrupted rewrites of their
    /// tables left pending (their files may be among those going). Returns (files, bytes).
    pub fn delete_expired(
        &mut self,
        expired: &[retention::Expired],
    ) -> Result<(u64, u64), ArchiveError> {
        let mut tables: Vec<Table> = expired.iter().map(|e| e.part.table).collect();
        tables.dedup();
        for table in tables {
            self.recover_pending(table);
        }
        let manifest = self
            .manifest()
            .map_err(|e| ArchiveError::io(&self.data_dir.join(manifest::DIR), e))?;
        retention::apply(&self.data_dir, expired, &manifest)
    }

    /// This instance's manifest file.
    pub fn manifest_path(&self) -> PathBuf {
        self.data_dir
            .join(manifest::DIR)
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
    fn swap_in(
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
            name.push_str(&records_suffix(&id, (first, last)));
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
            name.push_str(&records_suffix(&id, (first, last)));
        }
        name.push_str(".parquet");
        name
    }
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
    if f.name != MARKER {
        return std::fs::hard_link(&f.path, &to).map_err(|e| ArchiveError::io(&to, e));
    }
    let dir = f.path.parent().unwrap_or(Path::new("."));
    let kept: Vec<_> = offloaded::read_marker(dir)?
        .into_iter()
        .filter(|o| {
            let name = o.path.rsplit('/').next().unwrap_or(&o.path);
            !removed.iter().any(|r| r.name == name)
        })
        .collect();
    offloaded::write_marker(staging, &kept)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::archive::config::{file_settings, ArchiveConfig};
    use arrow::array::ArrayRef;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    use parquet::arrow::ArrowWriter;
    use std::fs::File;

    #[test]
    fn a_swap_takes_the_files_it_removes_off_the_offload_marker() {
        use crate::archive::layout::offloaded::{read_marker, write_marker, OffloadedFile};
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
            assert_eq!(sha, manifest::file_sha256(&path).expect("hash"));
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
}
