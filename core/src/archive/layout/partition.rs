//! Partitions of the archive tables (`table/tenant=T/date=D/hour=H/`) and their completed files.
//!
//! A file is written under a hidden temporary name (`.part-….parquet.inprogress`, which no
//! reader's `*.parquet` glob matches), then closed, fsynced and renamed to its final name,
//! so a reader sees a whole file or none.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::archive::error::ArchiveError;
use crate::archive::table::Table;

/// Suffix of files still being written.
pub const IN_PROGRESS_SUFFIX: &str = ".parquet.inprogress";

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

/// One partition folder, named as on disk (the tenant already encoded).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PartitionDir {
    /// Table.
    pub table: Table,
    /// The `tenant=` value as in the folder name.
    pub tenant: String,
    /// The `date=` value.
    pub date: String,
    /// The `hour=` value.
    pub hour: String,
}

impl PartitionDir {
    /// The folder of a partition key.
    pub fn of(key: &PartitionKey) -> PartitionDir {
        PartitionDir {
            table: key.table,
            tenant: encode_partition_value(&key.tenant),
            date: key.date.clone(),
            hour: key.hour.clone(),
        }
    }

    /// The live folder.
    pub fn dir(&self, data_dir: &Path) -> PathBuf {
        data_dir
            .join(self.table.as_str())
            .join(format!("tenant={}", self.tenant))
            .join(format!("date={}", self.date))
            .join(format!("hour={}", self.hour))
    }

    /// The hour's start, ns since the epoch, if the folder names parse.
    pub fn hour_start_ns(&self) -> Option<i64> {
        let date = chrono::NaiveDate::parse_from_str(&self.date, "%Y-%m-%d").ok()?;
        let hour: u32 = self.hour.parse().ok()?;
        date.and_hms_opt(hour, 0, 0)?
            .and_utc()
            .timestamp_nanos_opt()
    }
}

/// The partition folders of `table`, in order.
pub(in crate::archive) fn partitions(
    data_dir: &Path,
    table: Table,
) -> Result<Vec<PartitionDir>, ArchiveError> {
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

/// True for a completed Parquet file's name.
pub(in crate::archive) fn is_completed(name: &str) -> bool {
    name.ends_with(".parquet") && !name.starts_with('.')
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
