//! How far a replay got in each file, kept on disk so that a replay run again resumes.
//!
//! One JSON file per input file in the state directory, named by a digest of the input's
//! device and inode (so a file the exporter's rotation renamed keeps its progress under its
//! new name), replaced whole (written aside, then renamed) after each message the daemon
//! acknowledged. The input's first bytes are recorded too (up to 4 KiB, more as the file
//! grows): a file whose first bytes changed (truncated and written again, or another file on a
//! reused inode), or that is now shorter than the progress, starts again from its beginning.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Bytes at the start of a file that identify it.
const HEAD_BYTES: u64 = 4096;
/// Refusals kept by message number per file; beyond, only counted (`refused_more`).
pub const REFUSALS_KEPT: usize = 1000;

/// A message the daemon (or the reader) refused, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refused {
    /// Its number in the file (the line number for JSON lines).
    pub message: u64,
    /// Why, without the message's content.
    pub reason: String,
}

/// The progress of one file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileProgress {
    /// The file, as given.
    pub path: String,
    /// SHA-256 of its first 4 KiB (fewer if shorter) when the replay began it.
    pub head_sha256: String,
    /// How many of those first bytes the digest covers.
    pub head_bytes: u64,
    /// The offset after the last message done, in the decoded stream.
    pub offset: u64,
    /// Messages done (sent and acknowledged, skipped or refused).
    pub messages: u64,
    /// Spans acknowledged.
    pub spans: u64,
    /// Log records acknowledged.
    pub log_records: u64,
    /// Messages of signals toolwatch does not take (metrics, profiles).
    pub skipped: u64,
    /// Messages refused, in file order (the first [`REFUSALS_KEPT`]).
    pub refused: Vec<Refused>,
    /// Messages refused beyond those listed.
    #[serde(default)]
    pub refused_more: u64,
    /// The whole file was read (as far as it went then).
    pub finished: bool,
}

/// Where the progress files are.
#[derive(Debug, Clone)]
pub struct ProgressDir(pub PathBuf);

impl ProgressDir {
    /// Creates the directory if needed.
    pub fn open(dir: &Path) -> std::io::Result<ProgressDir> {
        std::fs::create_dir_all(dir)?;
        Ok(ProgressDir(dir.to_path_buf()))
    }

    /// The progress file of `input`: by device and inode, which a rename keeps.
    fn file_for(&self, input: &Path) -> std::io::Result<PathBuf> {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(input)?;
        let id = format!("{}:{}", meta.dev(), meta.ino());
        let digest = Sha256::digest(id.as_bytes());
        Ok(self.0.join(format!("{}.json", &hex::encode(digest)[..32])))
    }

    /// The progress kept for `input`, if any and if `input` is still the same file; else a
    /// fresh start. The bool says whether kept progress was dropped because the file changed.
    /// `seekable`: the progress offset is a byte offset of the file itself (not of a gzip
    /// file's inflated stream), so a file shorter than it has changed.
    pub fn load(&self, input: &Path, seekable: bool) -> std::io::Result<(FileProgress, bool)> {
        let fresh = fresh(input)?;
        let kept = match std::fs::read(self.file_for(input)?) {
            Ok(bytes) => serde_json::from_slice::<FileProgress>(&bytes).ok(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(e),
        };
        let Some(mut k) = kept else {
            return Ok((fresh, false));
        };
        // The same file: its first bytes, as far as the digest went, are the same, and it is
        // not shorter than where the replay got to.
        let same = head_digest(input, k.head_bytes)?.0 == k.head_sha256
            && !(seekable && std::fs::metadata(input)?.len() < k.offset);
        if !same {
            return Ok((fresh, true));
        }
        // It grew: identify it by more of its first bytes from now on.
        if k.head_bytes < fresh.head_bytes {
            k.head_sha256 = fresh.head_sha256;
            k.head_bytes = fresh.head_bytes;
        }
        // Known by this name now (a rotation may have renamed it).
        k.path = fresh.path;
        Ok((k, false))
    }

    /// Replaces the kept progress of its file.
    pub fn save(&self, p: &FileProgress) -> std::io::Result<()> {
        let target = self.file_for(Path::new(&p.path))?;
        let aside = target.with_extension("json.tmp");
        let mut f = std::fs::File::create(&aside)?;
        f.write_all(&serde_json::to_vec(p).map_err(std::io::Error::other)?)?;
        drop(f);
        std::fs::rename(&aside, &target)
    }

    /// Forgets the kept progress of `input`.
    pub fn forget(&self, input: &Path) -> std::io::Result<()> {
        match std::fs::remove_file(self.file_for(input)?) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}

/// Progress at the beginning of `input`, identified by its first bytes.
fn fresh(input: &Path) -> std::io::Result<FileProgress> {
    let (head_sha256, head_bytes) = head_digest(input, HEAD_BYTES)?;
    Ok(FileProgress {
        head_sha256,
        head_bytes,
        ..FileProgress::empty(input)
    })
}

impl FileProgress {
    /// The progress of a file that could not be opened: nothing done.
    pub fn empty(input: &Path) -> FileProgress {
        FileProgress {
            path: input.display().to_string(),
            head_sha256: String::new(),
            head_bytes: 0,
            offset: 0,
            messages: 0,
            spans: 0,
            log_records: 0,
            skipped: 0,
            refused: Vec::new(),
            refused_more: 0,
            finished: false,
        }
    }

    /// Records a refused message (listed while fewer than [`REFUSALS_KEPT`] are).
    pub fn refuse(&mut self, message: u64, reason: String) {
        if self.refused.len() < REFUSALS_KEPT {
            self.refused.push(Refused { message, reason });
        } else {
            self.refused_more += 1;
        }
    }

    /// Messages refused in all.
    pub fn refused_count(&self) -> u64 {
        self.refused.len() as u64 + self.refused_more
    }
}

/// SHA-256 (hex) of the file's first `limit` bytes, and how many there were.
fn head_digest(input: &Path, limit: u64) -> std::io::Result<(String, u64)> {
    let mut head = Vec::new();
    std::fs::File::open(input)?
        .take(limit)
        .read_to_end(&mut head)?;
    Ok((hex::encode(Sha256::digest(&head)), head.len() as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_is_kept_per_file_and_dropped_when_the_file_changed() {
        let dir = std::env::temp_dir().join(format!(
            "toolwatch-replay-progress-{}-{}",
            std::process::id(),
            rand::random::<u64>()
        ));
        let state = ProgressDir::open(&dir.join("state")).expect("state");
        let input = dir.join("t.json");
        std::fs::write(&input, "{\"a\":1}\n{\"b\":2}\n").expect("write");
        let (mut p, changed) = state.load(&input, true).expect("load");
        assert!(!changed);
        assert_eq!((p.offset, p.messages), (0, 0));
        p.offset = 8;
        p.messages = 1;
        p.refuse(1, "why".into());
        state.save(&p).expect("save");
        // Appended to (a file still being written): the same file, known by more of its head.
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&input)
            .expect("open");
        f.write_all(b"{\"c\":3}\n").expect("append");
        drop(f);
        let (kept, changed) = state.load(&input, true).expect("load");
        assert!(!changed);
        assert_eq!(
            (kept.offset, kept.messages, &kept.refused),
            (8, 1, &p.refused)
        );
        assert_eq!(kept.head_bytes, 24);
        state.save(&kept).expect("save");
        // Renamed (a rotation): its progress follows it.
        let rotated = dir.join("t-2026-12-01T00-00-00.000.json");
        std::fs::rename(&input, &rotated).expect("rename");
        let (moved, changed) = state.load(&rotated, true).expect("load");
        assert!(!changed);
        assert_eq!(
            (moved.offset, moved.path.as_str()),
            (8, rotated.to_str().expect("utf-8"))
        );
        // Truncated and written again on the same inode: starts again.
        std::fs::write(&rotated, "{\"z\":9}\n").expect("rewrite");
        let (again, changed) = state.load(&rotated, true).expect("load");
        assert!(changed);
        assert_eq!((again.offset, again.messages), (0, 0));
        state.forget(&rotated).expect("forget");
        assert_eq!(std::fs::read_dir(&state.0).expect("dir").count(), 0);
    }
}
