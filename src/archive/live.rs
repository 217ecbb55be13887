//! Live rows: what an archive writer holds in memory and has not yet completed into a file,
//! published for readers (`GET /v1/live/{table}` on the admin listener; `toolwatch query` and
//! `toolwatch trace` merge it with the completed files).
//!
//! Each [`super::Archive`] publishes an `Arc`'d [`LiveRows`] into its [`LiveCell`]: after a
//! record at most every [`PUBLISH_EVERY`], at every tick, and whenever a buffer becomes a
//! file. Publishing clones `Arc`s only (a partition's batches are shared with its buffer and
//! rebuilt only when the buffer changed), so the archive thread's cost stays small.
//!
//! Exactly once for a reader: a buffer becomes a file by a rename, and the writer takes the
//! cell's lock before that rename and releases it only after publishing the rows without
//! that buffer. [`LiveCell::snapshot`] lists the completed files under the same lock, so the
//! list and the rows it returns never both hold a row, and never both miss one. (A file a
//! compaction swaps away after the listing fails to open; the reader retries.)

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use arrow::record_batch::RecordBatch;

use super::partition::{encode_partition_value, PartitionKey, Table};
use super::ArchiveError;

/// Published at most this often after records (ticks and completed files publish too).
pub const PUBLISH_EVERY: Duration = Duration::from_millis(100);

/// One partition's rows not yet in a completed file.
#[derive(Debug)]
pub struct LivePartition {
    /// Table.
    pub table: Table,
    /// Tenant as a reader of the partition folder sees it (the folder name, percent-decoded).
    pub tenant: String,
    /// `YYYY-MM-DD`.
    pub date: String,
    /// `00`..`23`.
    pub hour: String,
    /// The rows, in the table's schema (without the partition columns).
    pub batches: Vec<RecordBatch>,
}

impl LivePartition {
    /// The partition `key` holding `batches`.
    pub fn new(key: &PartitionKey, batches: Vec<RecordBatch>) -> LivePartition {
        LivePartition {
            table: key.table,
            tenant: folder_value(&key.tenant),
            date: key.date.clone(),
            hour: key.hour.clone(),
            batches,
        }
    }

    /// Rows held.
    pub fn rows(&self) -> usize {
        self.batches.iter().map(RecordBatch::num_rows).sum()
    }
}

/// What one archive writer holds, at one moment.
#[derive(Debug, Default)]
pub struct LiveRows {
    /// Counts publications of this writer.
    pub generation: u64,
    /// Partitions with rows.
    pub partitions: Vec<Arc<LivePartition>>,
}

/// The rows of one table and the completed files at one moment, consistent with each other.
#[derive(Debug)]
pub struct LiveSnapshot {
    /// The writer's publication.
    pub rows: Arc<LiveRows>,
    /// The table.
    pub table: Table,
    /// Completed files of the table, relative to its folder (`tenant=…/date=…/hour=…/part-….parquet`).
    pub files: Vec<String>,
    /// The data directory, canonical.
    pub data_dir: PathBuf,
}

/// Where one archive writer publishes its rows.
#[derive(Debug)]
pub struct LiveCell {
    data_dir: PathBuf,
    tables: Vec<Table>,
    rows: Mutex<Arc<LiveRows>>,
}

impl LiveCell {
    /// A cell for the writer of `tables` under `data_dir`.
    pub fn new(data_dir: &Path, tables: &[Table]) -> Arc<LiveCell> {
        let data_dir = std::fs::canonicalize(data_dir).unwrap_or_else(|_| data_dir.to_path_buf());
        Arc::new(LiveCell {
            data_dir,
            tables: tables.to_vec(),
            rows: Mutex::new(Arc::new(LiveRows::default())),
        })
    }

    /// Whether this cell's writer owns `table`.
    pub fn holds(&self, table: Table) -> bool {
        self.tables.contains(&table)
    }

    /// Takes the lock: while held, no reader lists files or takes rows.
    pub fn lock(&self) -> MutexGuard<'_, Arc<LiveRows>> {
        self.rows.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The current rows.
    pub fn current(&self) -> Arc<LiveRows> {
        Arc::clone(&self.lock())
    }

    /// The rows of `table` and its completed files, taken under the lock.
    pub fn snapshot(&self, table: Table) -> Result<LiveSnapshot, ArchiveError> {
        let guard = self.lock();
        let rows = Arc::clone(&guard);
        let dir = self.data_dir.join(table.as_str());
        let mut files = Vec::new();
        list_completed(&dir, "", 0, &mut files)?;
        drop(guard);
        files.sort();
        Ok(LiveSnapshot {
            rows,
            table,
            files,
            data_dir: self.data_dir.clone(),
        })
    }
}

/// Completed files (`*.parquet`) three folder levels below `dir`, relative to the table folder.
fn list_completed(
    dir: &Path,
    rel: &str,
    depth: usize,
    out: &mut Vec<String>,
) -> Result<(), ArchiveError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        // A folder a compaction just swapped away, or a table without rows yet.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(ArchiveError::io(dir, e)),
    };
    for entry in entries {
        let entry = entry.map_err(|e| ArchiveError::io(dir, e))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let path = rel_join(rel, name);
        if depth < 3 {
            if name.contains('=') && entry.file_type().is_ok_and(|t| t.is_dir()) {
                list_completed(&entry.path(), &path, depth + 1, out)?;
            }
        } else if name.ends_with(".parquet") {
            out.push(path);
        }
    }
    Ok(())
}

fn rel_join(rel: &str, name: &str) -> String {
    if rel.is_empty() {
        name.to_string()
    } else {
        format!("{rel}/{name}")
    }
}

/// A partition value as a reader of its folder name sees it: encoded, then percent-decoded
/// (the same as the tenant except for names cut to fit a folder name).
fn folder_value(v: &str) -> String {
    let enc = encode_partition_value(v);
    let bytes = enc.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8(out).unwrap_or(enc)
}

/// The live cells of one daemon, for the admin server.
#[derive(Debug, Clone, Default)]
pub struct LiveTables {
    cells: Vec<Arc<LiveCell>>,
}

impl LiveTables {
    /// The cells of every archive writer.
    pub fn new(cells: Vec<Arc<LiveCell>>) -> LiveTables {
        LiveTables { cells }
    }

    /// The cell of `table`'s writer.
    pub fn cell(&self, table: Table) -> Option<&Arc<LiveCell>> {
        self.cells.iter().find(|c| c.holds(table))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folder_values_read_back_as_datafusion_decodes_them() {
        assert_eq!(folder_value("acme"), "acme");
        assert_eq!(folder_value("a/b c%"), "a/b c%");
        assert_eq!(folder_value(".x"), ".x");
        assert_eq!(folder_value(""), "\0");
    }

    #[test]
    fn the_listing_names_completed_files_only() {
        let dir = tempfile::tempdir().expect("tempdir");
        let part = dir.path().join("spans/tenant=a/date=2026-01-01/hour=03");
        std::fs::create_dir_all(&part).expect("mkdir");
        std::fs::write(part.join("part-1.parquet"), b"x").expect("write");
        std::fs::write(part.join("part-2.parquet.inprogress"), b"x").expect("write");
        std::fs::create_dir_all(dir.path().join("spans/.compact")).expect("mkdir");
        let cell = LiveCell::new(dir.path(), &[Table::Spans, Table::Logs]);
        let snap = cell.snapshot(Table::Spans).expect("snapshot");
        assert_eq!(
            snap.files,
            vec!["tenant=a/date=2026-01-01/hour=03/part-1.parquet".to_string()]
        );
        assert!(cell.snapshot(Table::Logs).expect("empty").files.is_empty());
        assert!(cell.holds(Table::Logs) && !cell.holds(Table::Requests));
    }
}
