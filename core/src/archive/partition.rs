//! Partitions of the archive tables (`table/tenant=T/date=D/hour=H/`) and their completed files.
//!
//! A file is written under a hidden temporary name (`.part-….parquet.inprogress`, which no
//! reader's `*.parquet` glob matches), then closed, fsynced and renamed to its final name,
//! so a reader sees a whole file or none.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use parquet::basic::{Compression, ZstdLevel};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::schema::types::ColumnPath;

use super::schema::{JSON_COLUMNS, REQUEST_SMALL_COLUMNS, SMALL_COLUMNS, UNIQUE_COLUMNS};
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
    /// `findings/`
    Findings,
}

impl Table {
    /// Every table.
    pub const ALL: [Table; 5] = [
        Table::Spans,
        Table::Logs,
        Table::Requests,
        Table::Alarms,
        Table::Findings,
    ];

    /// Folder and table name.
    pub fn as_str(self) -> &'static str {
        match self {
            Table::Spans => "spans",
            Table::Logs => "logs",
            Table::Requests => "requests",
            Table::Alarms => "alarms",
            Table::Findings => "findings",
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
    for col in JSON_COLUMNS.iter().chain(UNIQUE_COLUMNS) {
        b = b.set_column_dictionary_enabled(column_path(col), false);
    }
    let small: &[&str] = match table {
        Table::Spans | Table::Logs => SMALL_COLUMNS,
        Table::Requests => REQUEST_SMALL_COLUMNS,
        Table::Alarms | Table::Findings => &[],
    };
    for col in small {
        b = b.set_column_compression(column_path(col), Compression::UNCOMPRESSED);
    }
    let bloom_columns: &[&str] = match table {
        Table::Spans => &["trace_id", "request_id"],
        Table::Logs => &["trace_id", "request_id"],
        Table::Requests => &["request_id"],
        Table::Alarms => &["request_id", "alarm_id"],
        Table::Findings => &["request_id", "finding_id"],
    };
    for col in bloom_columns {
        let path = ColumnPath::from(*col);
        b = b
            .set_column_bloom_filter_enabled(path.clone(), true)
            .set_column_bloom_filter_fpp(path.clone(), 0.01)
            .set_column_bloom_filter_max_ndv(path, bloom_ndv(settings.row_group_rows));
    }
    Ok(b.build())
}

/// The path of a column named with dots between nesting levels (`redactions.entries.keys`).
fn column_path(name: &str) -> ColumnPath {
    ColumnPath::new(name.split('.').map(str::to_string).collect())
}

/// Distinct values a row group's bloom filter is sized for: a quarter of its rows (agent
/// traces and requests have several spans each). The filter is allocated at that size while
/// its row group is built, for every buffered partition, so sizing it for all rows would
/// cost 128 KiB a column a partition; more distinct values than this only raise its
/// false-positive rate (the writer folds it down to 1% where it can), never hide a row.
pub fn bloom_ndv(row_group_rows: usize) -> u64 {
    (row_group_rows as u64 / 4).max(1024)
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
    /// Hex SHA-256 of its bytes (for the manifest).
    pub sha256: String,
}

/// A complete file written under its temporary name, not yet visible. Written with
/// [`Durability::Later`], several are made durable by one [`crate::durable::sync_filesystem`]
/// before they are [`StagedFile::publish`]ed.
#[derive(Debug)]
pub struct StagedFile {
    temp_path: PathBuf,
    final_path: PathBuf,
    rows: u64,
    bytes: u64,
    sha256: String,
}

/// When a staged file's bytes are made durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// fsynced as it is written.
    Now,
    /// By the caller, for several files at once.
    Later,
}

impl StagedFile {
    /// Writes `bytes` (of `rows` rows) into partition folder `dir` as `.<stem>.parquet.inprogress`.
    pub fn write(
        dir: &Path,
        stem: &str,
        bytes: &[u8],
        rows: u64,
        durability: Durability,
    ) -> Result<StagedFile, ArchiveError> {
        std::fs::create_dir_all(dir).map_err(|e| ArchiveError::io(dir, e))?;
        let temp_path = dir.join(format!(".{stem}{IN_PROGRESS_SUFFIX}"));
        let write = || -> std::io::Result<()> {
            let mut file = File::create(&temp_path)?;
            file.write_all(bytes)?;
            if durability == Durability::Now {
                file.sync_all()?;
            }
            Ok(())
        };
        if let Err(e) = write() {
            let _ = std::fs::remove_file(&temp_path);
            return Err(ArchiveError::io(&temp_path, e));
        }
        Ok(StagedFile {
            final_path: dir.join(format!("{stem}.parquet")),
            temp_path,
            rows,
            bytes: bytes.len() as u64,
            sha256: hex::encode(<sha2::Sha256 as sha2::Digest>::digest(bytes)),
        })
    }

    /// Gives the file its final name (call once its bytes are durable; the rename itself is
    /// durable once the filesystem or the folder is synced).
    pub fn publish(self) -> Result<CompletedFile, ArchiveError> {
        std::fs::rename(&self.temp_path, &self.final_path)
            .map_err(|e| ArchiveError::io(&self.final_path, e))?;
        Ok(CompletedFile {
            path: self.final_path,
            rows: self.rows,
            bytes: self.bytes,
            sha256: self.sha256,
        })
    }

    /// Removes the temporary file (its rows stay in the journal).
    pub fn discard(self) {
        let _ = std::fs::remove_file(&self.temp_path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_columns_go_uncompressed_and_ids_without_a_dictionary() {
        use crate::archive::rows::TableRows;
        use crate::archive::schema::SpanRows;
        use parquet::basic::Encoding;
        use parquet::file::reader::{FileReader, SerializedFileReader};

        let mut rows = SpanRows::default();
        let mut span = crate::event::fixtures::span();
        span.redactions.insert("email".into(), 1);
        rows.append(&span).expect("append");
        let batch = rows.finish().expect("batch");
        let settings = super::super::file_settings(&super::super::config::ArchiveConfig::default());
        let props = writer_properties(&settings, Table::Spans).expect("properties");
        let mut buf = Vec::new();
        let mut w = parquet::arrow::ArrowWriter::try_new(&mut buf, batch.schema(), Some(props))
            .expect("writer");
        w.write(&batch).expect("write");
        w.close().expect("close");
        let reader = SerializedFileReader::new(bytes::Bytes::from(buf)).expect("parquet");
        let group = reader.metadata().row_group(0);
        let column = |name: &str| {
            group
                .columns()
                .iter()
                .find(|c| c.column_path().string() == name)
                .unwrap_or_else(|| panic!("no column {name}"))
        };
        for small in [
            "span_kind",
            "tool_name",
            "redactions.entries.keys",
            "cancelled",
        ] {
            assert_eq!(
                column(small).compression(),
                Compression::UNCOMPRESSED,
                "{small}"
            );
        }
        for large in [
            "tool_arguments",
            "attributes",
            "span_id",
            "start_time",
            "trace_id",
        ] {
            assert!(
                matches!(column(large).compression(), Compression::ZSTD(_)),
                "{large}"
            );
        }
        let dictionary = |name: &str| {
            column(name)
                .encodings()
                .any(|e| matches!(e, Encoding::RLE_DICTIONARY | Encoding::PLAIN_DICTIONARY))
        };
        assert!(!dictionary("span_id") && !dictionary("tool_arguments"));
        assert!(dictionary("trace_id") && dictionary("span_kind"));
    }

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
