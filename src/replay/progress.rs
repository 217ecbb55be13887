//! How far a replay got in each file, kept on disk so that a replay run again resumes.
//!
//! One JSON file per input file in the state directory, named by a digest of the input's
//! absolute path, replaced whole (written aside, then renamed) after each message the daemon
//! acknowledged. The input's first bytes are recorded too: a file replaced by another of the
//! same name (a rotation that reused it) starts again from its beginning.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Bytes at the start of a file that identify it.
const HEAD_BYTES: u64 = 4096;

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
    /// Messages refused, in file order.
    pub refused: Vec<Refused>,
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

    fn file_for(&self, input: &Path) -> PathBuf {
        let absolute = std::fs::canonicalize(input).unwrap_or_else(|_| input.to_path_buf());
        let digest = Sha256::digest(absolute.to_string_lossy().as_bytes());
        self.0.join(format!("{}.json", &hex::encode(digest)[..32]))
    }

    /// The progress kept for `input`, if any and if `input` is still the same file; else a
    /// fresh start. The bool says whether kept progress was dropped because the file changed.
    pub fn load(&self, input: &Path) -> std::io::Result<(FileProgress, bool)> {
        let fresh = fresh(input)?;
        let kept = match std::fs::read(self.file_for(input)) {
            Ok(bytes) => serde_json::from_slice::<FileProgress>(&bytes).ok(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(e),
        };
        Ok(match kept {
            None => (fresh, false),
            Some(k) => {
                // The same file: its first bytes, as far as the digest went, are the same.
                let same = head_digest(input, k.head_bytes)?.0 == k.head_sha256;
                if same {
                    (k, false)
                } else {
                    (fresh, true)
                }
            }
        })
    }

    /// Replaces the kept progress of its file.
    pub fn save(&self, p: &FileProgress) -> std::io::Result<()> {
        let target = self.file_for(Path::new(&p.path));
        let aside = target.with_extension("json.tmp");
        let mut f = std::fs::File::create(&aside)?;
        f.write_all(&serde_json::to_vec_pretty(p).map_err(std::io::Error::other)?)?;
        drop(f);
        std::fs::rename(&aside, &target)
    }

    /// Forgets the kept progress of `input`.
    pub fn forget(&self, input: &Path) -> std::io::Result<()> {
        match std::fs::remove_file(self.file_for(input)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}

/// Progress at the beginning of `input`.
fn fresh(input: &Path) -> std::io::Result<FileProgress> {
    let (head_sha256, head_bytes) = head_digest(input, HEAD_BYTES)?;
    Ok(FileProgress {
        path: input.display().to_string(),
        head_sha256,
        head_bytes,
        offset: 0,
        messages: 0,
        spans: 0,
        log_records: 0,
        skipped: 0,
        refused: Vec::new(),
        finished: false,
    })
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
        let (mut p, changed) = state.load(&input).expect("load");
        assert!(!changed);
        assert_eq!((p.offset, p.messages), (0, 0));
        p.offset = 8;
        p.messages = 1;
        p.refused.push(Refused {
            message: 1,
            reason: "why".into(),
        });
        state.save(&p).expect("save");
        // Appended to (a file still being written): the same file.
        std::fs::write(&input, "{\"a\":1}\n{\"b\":2}\n{\"c\":3}\n").expect("append");
        let (kept, changed) = state.load(&input).expect("load");
        assert!(!changed);
        assert_eq!(kept, p);
        // Replaced by another: starts again.
        std::fs::write(&input, "{\"z\":9}\n").expect("replace");
        let (again, changed) = state.load(&input).expect("load");
        assert!(changed);
        assert_eq!((again.offset, again.messages), (0, 0));
        state.forget(&input).expect("forget");
        assert_eq!(std::fs::read_dir(&state.0).expect("dir").count(), 0);
    }
}
