//! The offload marker: a partition's list of its files whose only copy is in the object store,
//! `.offloaded.jsonl` in the partition folder (path, size, SHA-256; a hidden file no reader
//! takes for data). A file is listed in it before its removal is recorded and its local copy
//! deleted (see `store::offload`).

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::archive::error::ArchiveError;

/// A partition's list of files whose only copy is in the object store.
pub const MARKER: &str = ".offloaded.jsonl";

/// One offloaded file, as its partition's marker lists it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct OffloadedFile {
    /// Relative to the archive's root, `/`-separated.
    pub path: String,
    /// Its size.
    pub bytes: u64,
    /// Hex SHA-256 of its bytes.
    pub sha256: String,
    /// Its removal is in a manifest (`offloaded`); until then its local copy stays.
    #[serde(default = "recorded_default")]
    pub recorded: bool,
}

fn recorded_default() -> bool {
    true
}

/// The files partition folder `dir`'s marker lists (none without a marker).
pub fn read_marker(dir: &Path) -> Result<Vec<OffloadedFile>, ArchiveError> {
    let path = dir.join(MARKER);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(ArchiveError::io(&path, e)),
    };
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            serde_json::from_str(l).map_err(|e| {
                ArchiveError::io(
                    &path,
                    std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()),
                )
            })
        })
        .collect()
}

/// Replaces `dir`'s marker with `files` (removes it when there are none), durably.
pub fn write_marker(dir: &Path, files: &[OffloadedFile]) -> Result<(), ArchiveError> {
    let path = dir.join(MARKER);
    if files.is_empty() {
        return match std::fs::remove_file(&path) {
            Ok(()) => crate::durable::sync_dir(dir).map_err(|e| ArchiveError::io(dir, e)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(ArchiveError::io(&path, e)),
        };
    }
    let mut text = String::new();
    for f in files {
        let line = serde_json::to_string(f)
            .map_err(|e| ArchiveError::io(&path, std::io::Error::other(e)))?;
        text.push_str(&line);
        text.push('\n');
    }
    crate::durable::replace_file(&path, text.as_bytes()).map_err(|e| ArchiveError::io(&path, e))
}
