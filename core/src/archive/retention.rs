//! Retention: partitions older than their table's (and tenant's) retention are deleted, each
//! file's removal recorded in the manifest first (reason `retention`), so `verify` tells a
//! deletion by policy from a loss.
//!
//! A partition hour expires when its end lies longer ago than the retention of its table for
//! its tenant (`[archive.retention]`, per tenant under `tenants.<tenant>`). The daemon applies
//! it with each compaction pass; `toolwatch retention [--dry-run]` applies (or lists) it at
//! once. Deletion holds the partition's lock, so no writer or compaction meets it halfway.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use crate::archive::error::ArchiveError;
use crate::archive::layout::lock::PartitionLock;
use crate::archive::layout::offloaded::{self, OffloadedFile};
use crate::archive::layout::partition::{
    encode_partition_value, is_completed, partitions, PartitionDir,
};
use crate::archive::manifest::{Manifest, NewEntry, Op, Reason};
use crate::archive::table::Table;
use crate::units::HumanDuration;

/// How long each table's rows are kept (none: for ever).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TableRetention {
    /// `spans`.
    pub spans: Option<HumanDuration>,
    /// `logs`.
    pub logs: Option<HumanDuration>,
    /// `requests`.
    pub requests: Option<HumanDuration>,
    /// `alarms`.
    pub alarms: Option<HumanDuration>,
    /// `findings`.
    pub findings: Option<HumanDuration>,
}

impl TableRetention {
    fn of(&self, table: Table) -> Option<Duration> {
        let d = match table {
            Table::Spans => &self.spans,
            Table::Logs => &self.logs,
            Table::Requests => &self.requests,
            Table::Alarms => &self.alarms,
            Table::Findings => &self.findings,
        };
        d.as_ref().map(|d| d.0)
    }
}

/// `[archive.retention]`: per table for every tenant, and per tenant over that.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetentionConfig {
    /// `spans`, for every tenant.
    pub spans: Option<HumanDuration>,
    /// `logs`.
    pub logs: Option<HumanDuration>,
    /// `requests`.
    pub requests: Option<HumanDuration>,
    /// `alarms`.
    pub alarms: Option<HumanDuration>,
    /// `findings`.
    pub findings: Option<HumanDuration>,
    /// Per tenant (its own value for a table wins; tables it does not name keep the above).
    pub tenants: BTreeMap<String, TableRetention>,
}

impl RetentionConfig {
    /// Whether any retention is set.
    pub fn is_empty(&self) -> bool {
        Table::ALL.iter().all(|&t| {
            self.all().of(t).is_none() && self.tenants.values().all(|r| r.of(t).is_none())
        })
    }

    /// The values for every tenant.
    fn all(&self) -> TableRetention {
        TableRetention {
            spans: self.spans,
            logs: self.logs,
            requests: self.requests,
            alarms: self.alarms,
            findings: self.findings,
        }
    }

    /// How long `table`'s rows of the tenant whose folder value is `tenant_folder` are kept.
    fn keep(&self, table: Table, tenant_folder: &str) -> Option<Duration> {
        self.tenants
            .iter()
            .find(|(t, _)| encode_partition_value(t) == tenant_folder)
            .and_then(|(_, r)| r.of(table))
            .or_else(|| self.all().of(table))
    }
}

/// How long retention waits for a partition's lock before leaving it to the next pass.
const LOCK_PATIENCE: Duration = Duration::from_secs(5);

/// A partition hour past its retention, with its files.
#[derive(Debug, Clone)]
pub struct Expired {
    /// The partition.
    pub part: PartitionDir,
    /// Its completed files and their sizes.
    pub files: Vec<(PathBuf, u64)>,
    /// Its files whose only copy is in the object store (see [`offloaded`]).
    pub offloaded: Vec<OffloadedFile>,
}

/// The end of a partition hour (none: not a date and hour, or before 1970).
fn hour_end(part: &PartitionDir) -> Option<SystemTime> {
    let start = u64::try_from(part.hour_start_ns()?).ok()?;
    Some(SystemTime::UNIX_EPOCH + Duration::from_nanos(start) + Duration::from_secs(3600))
}

/// The partitions of `tables` past their retention at `now`.
pub fn expired(
    data_dir: &Path,
    config: &RetentionConfig,
    tables: &[Table],
    now: SystemTime,
) -> Result<Vec<Expired>, ArchiveError> {
    let mut out = Vec::new();
    for &table in tables {
        for part in partitions(data_dir, table)? {
            let Some(keep) = config.keep(table, &part.tenant) else {
                continue;
            };
            let Some(end) = hour_end(&part) else { continue };
            if end.checked_add(keep).is_none_or(|t| t > now) {
                continue;
            }
            let dir = part.dir(data_dir);
            let files = completed_with_sizes(&dir)?;
            let offloaded = offloaded::read_marker(&dir)?;
            out.push(Expired {
                part,
                files,
                offloaded,
            });
        }
    }
    Ok(out)
}

/// The completed files in partition folder `dir`, with their sizes, by name.
pub(super) fn completed_with_sizes(dir: &Path) -> Result<Vec<(PathBuf, u64)>, ArchiveError> {
    let mut files = Vec::new();
    for e in std::fs::read_dir(dir).map_err(|e| ArchiveError::io(dir, e))? {
        let e = e.map_err(|err| ArchiveError::io(dir, err))?;
        if is_completed(&e.file_name().to_string_lossy()) {
            let bytes = e.metadata().map(|m| m.len()).unwrap_or(0);
            files.push((e.path(), bytes));
        }
    }
    files.sort();
    Ok(files)
}

/// Deletes expired partitions: under each one's lock, records the removal of the files it
/// holds then (and of those its offload marker lists) in `manifest`, then removes them and
/// the folder. Returns (files, bytes) deleted.
pub fn apply(
    data_dir: &Path,
    expired: &[Expired],
    manifest: &Manifest,
) -> Result<(u64, u64), ArchiveError> {
    let (mut files, mut bytes) = (0, 0);
    for e in expired {
        // Not for ever: a partition held by a compaction waiting for readers is left to the
        // next pass (the daemon's compactor must not hang on it).
        let Some(_lock) = PartitionLock::acquire_within(data_dir, &e.part, LOCK_PATIENCE)? else {
            continue;
        };
        // Listed again under the lock: a file flushed or offloaded since `expired` looked
        // is recorded too, and nothing the marker lists is dropped unrecorded.
        let dir = e.part.dir(data_dir);
        let local = match completed_with_sizes(&dir) {
            Ok(f) => f,
            Err(ArchiveError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                continue
            }
            Err(err) => return Err(err),
        };
        let marker = offloaded::read_marker(&dir)?;
        let offloaded = marker.iter().map(|f| (data_dir.join(&f.path), f.bytes));
        let entries: Vec<NewEntry> = local
            .iter()
            .cloned()
            .chain(offloaded)
            .map(|(path, size)| NewEntry {
                op: Op::Remove,
                path,
                table: e.part.table.as_str().to_string(),
                rows: 0,
                bytes: size,
                sha256: String::new(),
                records: None,
                reason: Reason::Retention,
            })
            .collect();
        // Recorded first: a crash before the deletion leaves files the next run deletes
        // (verify meanwhile calls them extra), never a deletion nothing recorded.
        manifest
            .append(&entries)
            .map_err(|err| ArchiveError::io(manifest.path(), err))?;
        for (path, size) in &local {
            match std::fs::remove_file(path) {
                Ok(()) => {
                    files += 1;
                    bytes += size;
                }
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
                Err(err) => return Err(ArchiveError::io(path, err)),
            }
        }
        // Their objects go from the store when these lines are uploaded.
        files += marker.len() as u64;
        bytes += marker.iter().map(|f| f.bytes).sum::<u64>();
        offloaded::write_marker(&dir, &[])?;
        // The folder goes when nothing else is in it (a writer's temporary file may be).
        let _ = std::fs::remove_dir(&dir);
        if let Some(date_dir) = dir.parent() {
            let _ = std::fs::remove_dir(date_dir);
            crate::durable::sync_dir(date_dir.parent().unwrap_or(date_dir))
                .map_err(|err| ArchiveError::io(date_dir, err))?;
        }
    }
    Ok((files, bytes))
}
