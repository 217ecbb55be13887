//! One open Parquet file of one partition (`table/tenant=T/date=D/hour=H/`).
//!
//! A file is written under a hidden temporary name (`.part-….parquet.inprogress`, which no
//! reader's `*.parquet` glob matches), then closed, fsynced and renamed to its final name,
//! so a reader sees a whole file or none.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::Instant;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::schema::types::ColumnPath;

use super::schema::JSON_COLUMNS;
use super::ArchiveError;
use crate::event::SCHEMA_VERSION;

/// Suffix of files still being written.
pub const IN_PROGRESS_SUFFIX: &str = ".parquet.inprogress";

/// The archive tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Table {
    /// `spans/`
    Spans,
    /// `logs/`
    Logs,
    /// `requests/`
    Requests,
    /// `alarms/`
    Alarms,
}

impl Table {
    /// Folder and table name.
    pub fn as_str(self) -> &'static str {
        match self {
            Table::Spans => "spans",
            Table::Logs => "logs",
            Table::Requests => "requests",
            Table::Alarms => "alarms",
        }
    }
}

/// Which partition a row belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PartitionKey {
    /// Table.
    pub table: Table,
    /// Tenant, as the event gave it (encoded for the path by [`PartitionKey::dir`]).
    pub tenant: String,
    /// `YYYY-MM-DD` (UTC).
    pub date: String,
    /// `00`..`23` (UTC).
    pub hour: String,
}

impl PartitionKey {
    /// The partition of an event at `time_ns` (UTC).
    pub fn new(table: Table, tenant: &str, time_ns: i64) -> PartitionKey {
        let t = chrono::DateTime::from_timestamp_nanos(time_ns);
        PartitionKey {
            table,
            tenant: tenant.to_string(),
            date: t.format("%Y-%m-%d").to_string(),
            hour: t.format("%H").to_string(),
        }
    }

    /// The partition's folder below the data directory.
    pub fn dir(&self, data_dir: &Path) -> PathBuf {
        data_dir
            .join(self.table.as_str())
            .join(format!("tenant={}", encode_partition_value(&self.tenant)))
            .join(format!("date={}", self.date))
            .join(format!("hour={}", self.hour))
    }
}

/// Longest tenant name kept in a path; longer names are cut (and stay distinct by a hash
/// suffix) so that a hostile value cannot exceed file-name limits.
const MAX_PARTITION_VALUE: usize = 96;

/// Encodes a partition value for a folder name: letters, digits, `-`, `_` and `.` stay;
/// everything else (including `/`, `%` and a leading `.`) becomes `%XX` as Hive does, so a
/// tenant name can never leave its folder or hide it.
pub fn encode_partition_value(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for (i, b) in v.bytes().enumerate() {
        let keep = b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || (b == b'.' && i > 0);
        if keep {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    if out.is_empty() {
        out.push_str("%00");
    }
    if out.len() > MAX_PARTITION_VALUE {
        // A stable digest keeps long names distinct and in the same folder across releases.
        use sha2::Digest;
        let digest = sha2::Sha256::digest(v.as_bytes());
        let mut cut = MAX_PARTITION_VALUE - 17;
        // Never split a %XX escape (the output is ASCII, so any index is a char boundary).
        if let Some(pct) = out[..cut].rfind('%') {
            if pct + 3 > cut {
                cut = pct;
            }
        }
        out.truncate(cut);
        out.push('~');
        out.push_str(&hex::encode(&digest[..8]));
    }
    out
}

/// Writer settings shared by every file of a table.
#[derive(Debug, Clone)]
pub struct FileSettings {
    /// Complete a file at about this size.
    pub max_bytes: u64,
    /// Complete a file after it has been open this long.
    pub max_age: std::time::Duration,
    /// Rows per row group.
    pub row_group_rows: usize,
    /// Encoded bytes per row group.
    pub row_group_bytes: usize,
    /// zstd level.
    pub zstd_level: i32,
}

/// Parquet writer settings for a table: zstd, page statistics, bloom filters on the id columns.
pub fn writer_properties(
    settings: &FileSettings,
    table: Table,
) -> Result<WriterProperties, ArchiveError> {
    let level = ZstdLevel::try_new(settings.zstd_level).map_err(ArchiveError::Parquet)?;
    let mut b = WriterProperties::builder()
        .set_compression(Compression::ZSTD(level))
        .set_statistics_enabled(EnabledStatistics::Page)
        .set_max_row_group_row_count(Some(settings.row_group_rows))
        .set_max_row_group_bytes(Some(settings.row_group_bytes))
        .set_created_by(format!("toolwatch {}", env!("CARGO_PKG_VERSION")))
        .set_key_value_metadata(Some(vec![KeyValue::new(
            "toolwatch.schema_version".to_string(),
            SCHEMA_VERSION.to_string(),
        )]));
    for col in JSON_COLUMNS {
        b = b.set_column_dictionary_enabled(ColumnPath::from(*col), false);
    }
    let bloom_columns: &[&str] = match table {
        Table::Spans => &["trace_id", "request_id"],
        Table::Logs => &["trace_id", "request_id"],
        Table::Requests => &["request_id"],
        Table::Alarms => &["request_id", "alarm_id"],
    };
    for col in bloom_columns {
        let path = ColumnPath::from(*col);
        b = b
            .set_column_bloom_filter_enabled(path.clone(), true)
            .set_column_bloom_filter_fpp(path.clone(), 0.01)
            .set_column_bloom_filter_max_ndv(path, settings.row_group_rows as u64);
    }
    Ok(b.build())
}

/// A completed file.
#[derive(Debug, Clone)]
pub struct CompletedFile {
    /// Final path.
    pub path: PathBuf,
    /// Rows in it.
    pub rows: u64,
    /// Size on disk.
    pub bytes: u64,
}

/// The open file of one partition.
pub struct PartitionWriter {
    key: PartitionKey,
    temp_path: PathBuf,
    dir: PathBuf,
    stem: String,
    writer: ArrowWriter<File>,
    opened: Instant,
    rows: u64,
    max_bytes: u64,
    max_age: std::time::Duration,
    /// Last time a row arrived, for least-recently-written eviction.
    pub last_write: Instant,
}

impl PartitionWriter {
    /// Opens a new temporary file for `key`; `file_stem` makes the name unique.
    pub fn open(
        data_dir: &Path,
        key: PartitionKey,
        schema: SchemaRef,
        settings: &FileSettings,
        file_stem: &str,
    ) -> Result<PartitionWriter, ArchiveError> {
        let dir = key.dir(data_dir);
        std::fs::create_dir_all(&dir).map_err(|e| ArchiveError::io(&dir, e))?;
        let temp_path = dir.join(format!(".{file_stem}{IN_PROGRESS_SUFFIX}"));
        let file = File::create(&temp_path).map_err(|e| ArchiveError::io(&temp_path, e))?;
        let props = writer_properties(settings, key.table)?;
        let writer =
            ArrowWriter::try_new(file, schema, Some(props)).map_err(ArchiveError::Parquet)?;
        let now = Instant::now();
        Ok(PartitionWriter {
            key,
            temp_path,
            dir,
            stem: file_stem.to_string(),
            writer,
            opened: now,
            rows: 0,
            max_bytes: settings.max_bytes,
            max_age: settings.max_age,
            last_write: now,
        })
    }

    /// The partition.
    pub fn key(&self) -> &PartitionKey {
        &self.key
    }

    /// Rows encoded into the file so far.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Encodes a batch into the file.
    pub fn write(&mut self, batch: &RecordBatch) -> Result<(), ArchiveError> {
        self.writer.write(batch).map_err(ArchiveError::Parquet)?;
        self.rows += batch.num_rows() as u64;
        self.last_write = Instant::now();
        Ok(())
    }

    /// True when the file has reached its size or age.
    pub fn is_due(&self, now: Instant) -> bool {
        let size = self.writer.bytes_written() + self.writer.in_progress_size();
        size as u64 >= self.max_bytes || now.duration_since(self.opened) >= self.max_age
    }

    /// Finishes the file, makes it durable and gives it its final name: the stem, then
    /// `suffix`, then `.parquet`.
    pub fn complete(self, suffix: &str) -> Result<CompletedFile, ArchiveError> {
        let final_path = self.dir.join(format!("{}{suffix}.parquet", self.stem));
        let file = self.writer.into_inner().map_err(ArchiveError::Parquet)?;
        file.sync_all()
            .map_err(|e| ArchiveError::io(&self.temp_path, e))?;
        let bytes = file
            .metadata()
            .map(|m| m.len())
            .map_err(|e| ArchiveError::io(&self.temp_path, e))?;
        drop(file);
        std::fs::rename(&self.temp_path, &final_path)
            .map_err(|e| ArchiveError::io(&final_path, e))?;
        // The rename is durable only once the folder itself is synced.
        crate::durable::sync_dir(&self.dir).map_err(|e| ArchiveError::io(&self.dir, e))?;
        Ok(CompletedFile {
            path: final_path,
            rows: self.rows,
            bytes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_values_cannot_escape_their_folder() {
        assert_eq!(encode_partition_value("acme-prod_1.eu"), "acme-prod_1.eu");
        assert_eq!(encode_partition_value("../etc"), "%2E.%2Fetc");
        assert_eq!(encode_partition_value("a/b c%"), "a%2Fb%20c%25");
        assert_eq!(encode_partition_value(""), "%00");
        let long = "x".repeat(500);
        let enc = encode_partition_value(&long);
        assert_eq!(enc.len(), MAX_PARTITION_VALUE);
        assert_ne!(enc, encode_partition_value(&"x".repeat(501)));
        // 78 kept bytes then a two-byte escape would straddle the cut at 79.
        let straddle = format!("{}/{}", "x".repeat(78), "y".repeat(100));
        let enc = encode_partition_value(&straddle);
        assert!(enc.starts_with(&format!("{}~", "x".repeat(78))), "{enc}");
    }

    proptest::proptest! {
        /// Whatever the tenant name, its folder name is one safe path segment, and short
        /// names decode back to themselves (so distinct tenants get distinct folders).
        #[test]
        fn any_tenant_is_one_safe_segment(name in proptest::prelude::any::<String>()) {
            let enc = encode_partition_value(&name);
            proptest::prop_assert!(enc.len() <= MAX_PARTITION_VALUE);
            proptest::prop_assert!(!enc.starts_with('.'));
            proptest::prop_assert!(enc.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.%~".contains(&b)), "{}", enc);
            if !enc.contains('~') && !name.is_empty() {
                let mut bytes = Vec::new();
                let raw = enc.as_bytes();
                let mut i = 0;
                while i < raw.len() {
                    if raw[i] == b'%' {
                        let hex = std::str::from_utf8(&raw[i + 1..i + 3]).expect("ascii");
                        bytes.push(u8::from_str_radix(hex, 16).expect("hex"));
                        i += 3;
                    } else {
                        bytes.push(raw[i]);
                        i += 1;
                    }
                }
                proptest::prop_assert_eq!(String::from_utf8(bytes).expect("utf-8"), name);
            }
        }
    }

    #[test]
    fn partition_of_a_timestamp_is_utc() {
        // 2024-03-05T23:59:59.999999999Z
        let k = PartitionKey::new(Table::Spans, "t", 1_709_683_199_999_999_999);
        assert_eq!((k.date.as_str(), k.hour.as_str()), ("2024-03-05", "23"));
        let k = PartitionKey::new(Table::Logs, "t", 1_709_683_200_000_000_000);
        assert_eq!((k.date.as_str(), k.hour.as_str()), ("2024-03-06", "00"));
    }
}
