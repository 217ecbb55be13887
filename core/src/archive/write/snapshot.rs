//! Fresh reads without files: a reader asks the running daemon for copies of the rows its
//! archive writers buffer (`GET /v1/archive/buffered`), and reads them beside the completed
//! files, so a span acknowledged a moment ago is visible without the daemon writing a file.
//!
//! Each buffer's copy is one or two complete Parquet files ([`BufferedFile`]) under the path
//! its completed file will have (`table/tenant=T/date=D/hour=H/`), named `buffered-…` and
//! carrying the mark the completed file's name will carry ([`buffer_mark`](crate::archive::layout::names::buffer_mark)). A reader
//! holds the readers' lock (no compaction swaps a file meanwhile), takes the copies first and
//! lists the folders after: a buffer written out in between is then on disk under its mark,
//! and its copy is dropped ([`BufferedSet::without_written`]), so no row is read twice or
//! missed. Rows are copied as protected, exactly as they go into files.
//!
//! The answer's body: a 4-byte big-endian length, that many bytes of JSON
//! (`{"records": …, "files": [{"path", "mark", "rows", "bytes"}, …]}`), then each file's
//! bytes in order.

use serde::{Deserialize, Serialize};

use crate::archive::layout::names::is_written_buffer;
use crate::archive::table::Table;

/// One buffer's rows (or part of them) as a Parquet file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BufferedFileEntry {
    /// Where the file would be, relative to the data directory, `/`-separated.
    pub path: String,
    /// The mark of the completed file this buffer becomes ([`buffer_mark`](crate::archive::layout::names::buffer_mark)).
    pub mark: String,
    /// Rows in it.
    pub rows: u64,
    /// Its length in the body.
    pub bytes: u64,
}

/// A copy of one buffer's rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BufferedFile {
    /// Path, mark and rows.
    pub entry: BufferedFileEntry,
    /// The Parquet file.
    pub data: bytes::Bytes,
}

/// What a reader receives: the copies of every writer's buffers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BufferedSet {
    /// Journal records committed when the copies were asked for: the copies hold every row
    /// of them that is not in a completed file (nor waiting for its trace's tenant).
    pub records: u64,
    /// The copies.
    pub files: Vec<BufferedFile>,
}

/// The JSON part of the body.
#[derive(Serialize, Deserialize)]
struct Manifest {
    records: u64,
    files: Vec<BufferedFileEntry>,
}

/// Why an answer could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BufferedError {
    /// The body ends before what its manifest announces.
    #[error("the daemon's buffered rows end early: {0}")]
    Truncated(&'static str),
    /// The manifest is not the JSON this build writes.
    #[error("the daemon's buffered rows have an unreadable manifest: {0}")]
    Manifest(String),
    /// A path that is not a partition folder of a table, or not a Parquet file.
    #[error("the daemon's buffered rows name an unexpected path {0:?}")]
    Path(String),
    /// Bytes after the last file.
    #[error("the daemon's buffered rows have {0} bytes after the last file")]
    Trailing(usize),
}

impl BufferedSet {
    /// The body of the answer.
    pub fn encode(&self) -> Vec<u8> {
        let manifest = Manifest {
            records: self.records,
            files: self.files.iter().map(|f| f.entry.clone()).collect(),
        };
        // Serializing plain strings and numbers cannot fail.
        let json = serde_json::to_vec(&manifest).unwrap_or_default();
        let data: usize = self.files.iter().map(|f| f.data.len()).sum();
        let mut out = Vec::with_capacity(4 + json.len() + data);
        out.extend_from_slice(&(json.len() as u32).to_be_bytes());
        out.extend_from_slice(&json);
        for f in &self.files {
            out.extend_from_slice(&f.data);
        }
        out
    }

    /// Reads a body written by [`BufferedSet::encode`]; damaged input is an error.
    pub fn decode(body: bytes::Bytes) -> Result<BufferedSet, BufferedError> {
        let len = body
            .get(..4)
            .ok_or(BufferedError::Truncated("no manifest length"))?;
        let len = u32::from_be_bytes([len[0], len[1], len[2], len[3]]) as usize;
        let json = body
            .get(4..4 + len)
            .ok_or(BufferedError::Truncated("manifest"))?;
        let manifest: Manifest =
            serde_json::from_slice(json).map_err(|e| BufferedError::Manifest(e.to_string()))?;
        let mut at = 4 + len;
        let mut files = Vec::with_capacity(manifest.files.len());
        for entry in manifest.files {
            check_path(&entry.path)?;
            let end = usize::try_from(entry.bytes)
                .ok()
                .and_then(|n| at.checked_add(n))
                .filter(|&end| end <= body.len())
                .ok_or(BufferedError::Truncated("file"))?;
            let data = body.slice(at..end);
            at = end;
            files.push(BufferedFile { entry, data });
        }
        if at != body.len() {
            return Err(BufferedError::Trailing(body.len() - at));
        }
        Ok(BufferedSet {
            records: manifest.records,
            files,
        })
    }

    /// Drops the copies of buffers written out since: `names_in(dir)` gives the completed
    /// files' names in a partition folder (relative to the data directory) as listed now.
    pub fn without_written(mut self, mut names_in: impl FnMut(&str) -> Vec<String>) -> Self {
        let mut listed: std::collections::HashMap<String, Vec<String>> = Default::default();
        self.files.retain(|f| {
            let dir = f.entry.path.rsplit_once('/').map_or("", |(d, _)| d);
            let names = listed
                .entry(dir.to_string())
                .or_insert_with(|| names_in(dir));
            !names.iter().any(|n| is_written_buffer(n, &f.entry.mark))
        });
        self
    }
}

/// A relative path of a Parquet file in a table's partition folder:
/// `table/tenant=…/date=…/hour=…/name.parquet`, no `.` or `..` anywhere.
fn check_path(path: &str) -> Result<(), BufferedError> {
    let bad = || BufferedError::Path(path.to_string());
    let parts: Vec<&str> = path.split('/').collect();
    let [table, tenant, date, hour, name] = parts.as_slice() else {
        return Err(bad());
    };
    let ok = Table::ALL.iter().any(|t| t.as_str() == *table)
        && tenant.starts_with("tenant=")
        && date.starts_with("date=")
        && hour.starts_with("hour=")
        && name.starts_with("buffered-")
        && name.ends_with(".parquet")
        && parts
            .iter()
            .all(|p| !p.is_empty() && *p != "." && *p != ".." && !p.contains('\\'));
    if ok {
        Ok(())
    } else {
        Err(bad())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str, mark: &str, data: &[u8]) -> BufferedFile {
        BufferedFile {
            entry: BufferedFileEntry {
                path: path.into(),
                mark: mark.into(),
                rows: 3,
                bytes: data.len() as u64,
            },
            data: bytes::Bytes::copy_from_slice(data),
        }
    }

    fn set() -> BufferedSet {
        BufferedSet {
            records: 42,
            files: vec![
                file(
                    "spans/tenant=a/date=2026-12-01/hour=21/buffered-i-000001-0.parquet",
                    "-i-000001",
                    b"PAR1abc",
                ),
                file(
                    "spans/tenant=a/date=2026-12-01/hour=21/buffered-i-000001-1.parquet",
                    "-i-000001",
                    b"",
                ),
                file(
                    "requests/tenant=b/date=2026-12-01/hour=21/buffered-i-000002-0.parquet",
                    "-i-000002",
                    b"xyz",
                ),
            ],
        }
    }

    #[test]
    fn a_body_reads_back_as_written() {
        let s = set();
        assert_eq!(BufferedSet::decode(s.encode().into()), Ok(s));
        let empty = BufferedSet::default();
        assert_eq!(BufferedSet::decode(empty.encode().into()), Ok(empty));
    }

    #[test]
    fn damaged_bodies_are_errors() {
        let body = set().encode();
        for cut in 0..body.len() {
            assert!(
                BufferedSet::decode(bytes::Bytes::copy_from_slice(&body[..cut])).is_err(),
                "cut at {cut}"
            );
        }
        let mut long = body.clone();
        long.push(0);
        assert_eq!(
            BufferedSet::decode(long.into()),
            Err(BufferedError::Trailing(1))
        );
        for bad in [
            "../etc/buffered-x.parquet",
            "spans/tenant=a/date=d/hour=h/../buffered-x.parquet",
            "spans/tenant=a/date=d/hour=h/part-x.parquet",
            "nope/tenant=a/date=d/hour=h/buffered-x.parquet",
            "spans/tenant=a/date=d/buffered-x.parquet",
            "/spans/tenant=a/date=d/hour=h/buffered-x.parquet",
        ] {
            let s = BufferedSet {
                records: 0,
                files: vec![file(bad, "-i-1", b"")],
            };
            assert_eq!(
                BufferedSet::decode(s.encode().into()),
                Err(BufferedError::Path(bad.into()))
            );
        }
    }

    #[test]
    fn copies_of_buffers_written_since_are_dropped() {
        let mut asked = Vec::new();
        let left = set().without_written(|dir| {
            asked.push(dir.to_string());
            match dir {
                "spans/tenant=a/date=2026-12-01/hour=21" => vec![
                    // Another buffer of the same writer, and one whose mark only starts so.
                    "part-20261201T210000000Z-i-000003_j7_1-2.parquet".into(),
                    "part-20261201T210000000Z-i-0000010.parquet".into(),
                ],
                _ => vec!["part-20261201T210001000Z-i-000002_j7_3-9.parquet".into()],
            }
        });
        assert_eq!(asked.len(), 2, "each folder is listed once");
        let paths: Vec<&str> = left.files.iter().map(|f| f.entry.path.as_str()).collect();
        assert_eq!(
            paths,
            vec![
                "spans/tenant=a/date=2026-12-01/hour=21/buffered-i-000001-0.parquet",
                "spans/tenant=a/date=2026-12-01/hour=21/buffered-i-000001-1.parquet",
            ]
        );
    }
}
