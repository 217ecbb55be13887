//! Journal: the write-ahead log between `protect` and every consumer (issue 6).
//!
//! Owns `<data_dir>/journal/`. Promises: a record handed to [`Journal::append`] is on disk once
//! [`Journal::commit`] returns (written and fsynced; a new segment's folder entry too); records
//! read back are exactly what was appended, in order, each once; a torn or corrupt tail left by
//! a crash is found when the journal opens, cut off and counted, and never read as data; each
//! consumer's checkpoint survives restarts; segments every consumer has passed can be removed.
//!
//! Parts: segment files ([`segment`]), the group-commit writer and its size bound
//! ([`writer`]), the shared head of durable records and consumer positions ([`head`]), a
//! consumer's reader ([`tail`]) and loop ([`consume`]), and the record encoding ([`codec`]).

pub mod codec;
pub mod consume;
pub mod head;
pub mod segment;
pub mod tail;
pub mod writer;

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use segment::{SegmentFile, SegmentReader, HEADER_BYTES, MAGIC};

/// What went wrong in the journal.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// A file operation failed.
    #[error("journal {path}: {source}")]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// A segment before the newest one is damaged: its records past `offset` cannot be read.
    #[error("journal segment {path} is damaged at byte {offset}: {why}")]
    Corrupt {
        /// The segment.
        path: PathBuf,
        /// Where the valid records end.
        offset: u64,
        /// What is wrong there.
        why: &'static str,
    },
    /// A consumer name that cannot be a file name.
    #[error("journal consumer name `{0}` must be letters, digits, '-' or '_'")]
    ConsumerName(String),
}

fn io(path: &Path, source: std::io::Error) -> JournalError {
    JournalError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// What opening the journal found and repaired.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Valid records in the newest segment.
    pub tail_records: u64,
    /// Bytes cut from the end of the newest segment (a torn or corrupt tail).
    pub cut_bytes: u64,
    /// Why they were cut.
    pub cut_reason: Option<&'static str>,
}

/// The segment being appended to.
struct OpenSegment {
    file: File,
    path: PathBuf,
    bytes: u64,
}

/// The journal of one data directory.
pub struct Journal {
    dir: PathBuf,
    segment_bytes: u64,
    current: Option<OpenSegment>,
    next_seq: u64,
    pending: Vec<u8>,
    pending_first: u64,
    disk_bytes: u64,
}

impl Journal {
    /// Opens (or creates) the journal in `dir`, cutting a damaged tail off the newest segment.
    /// Segments roll once they reach `segment_bytes`.
    pub fn open(dir: &Path, segment_bytes: u64) -> Result<(Journal, Recovery), JournalError> {
        std::fs::create_dir_all(dir.join("checkpoints")).map_err(|e| io(dir, e))?;
        let mut recovery = Recovery::default();
        let segments = segment::list(dir).map_err(|e| io(dir, e))?;
        let mut next_seq = None;
        if let Some(last) = segments.last() {
            let (valid_to, next, records, why) = scan(&last.path)?;
            recovery.tail_records = records;
            let len = std::fs::metadata(&last.path)
                .map_err(|e| io(&last.path, e))?
                .len();
            if let Some(why) = why {
                recovery.cut_bytes = len - valid_to;
                recovery.cut_reason = Some(why);
                if valid_to < HEADER_BYTES {
                    std::fs::remove_file(&last.path).map_err(|e| io(&last.path, e))?;
                } else {
                    let f = OpenOptions::new()
                        .write(true)
                        .open(&last.path)
                        .map_err(|e| io(&last.path, e))?;
                    f.set_len(valid_to).map_err(|e| io(&last.path, e))?;
                    f.sync_all().map_err(|e| io(&last.path, e))?;
                }
                tracing::warn!(
                    segment = %last.path.display(),
                    bytes = recovery.cut_bytes,
                    reason = why,
                    "journal tail damaged by a crash; cut off"
                );
            }
            if valid_to >= HEADER_BYTES {
                next_seq = Some(next);
            } else {
                next_seq = Some(last.first_seq);
            }
        }
        let mut journal = Journal {
            dir: dir.to_path_buf(),
            segment_bytes: segment_bytes.max(HEADER_BYTES + 1),
            current: None,
            next_seq: 1,
            pending: Vec::new(),
            pending_first: 1,
            disk_bytes: 0,
        };
        for s in segment::list(dir).map_err(|e| io(dir, e))? {
            journal.disk_bytes += std::fs::metadata(&s.path)
                .map_err(|e| io(&s.path, e))?
                .len();
        }
        // With no segment left (all consumed), numbering goes on after the checkpoints.
        let after_checkpoints = journal.checkpoints()?.into_iter().map(|(_, s)| s).max();
        journal.next_seq = next_seq.or(after_checkpoints).unwrap_or(1).max(1);
        journal.pending_first = journal.next_seq;
        Ok((journal, recovery))
    }

    /// The sequence number the next appended record gets.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// Adds a record (in memory until [`Journal::commit`]); returns its sequence number.
    pub fn append(&mut self, payload: &[u8]) -> u64 {
        let seq = self.next_seq;
        if self.pending.is_empty() {
            self.pending_first = seq;
        }
        segment::encode(seq, payload, &mut self.pending);
        self.next_seq += 1;
        seq
    }

    /// Writes and fsyncs everything appended; on return every record up to
    /// `next_seq() - 1` is durable.
    pub fn commit(&mut self) -> Result<(), JournalError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let roll = self
            .current
            .as_ref()
            .is_none_or(|c| c.bytes >= self.segment_bytes);
        if roll {
            self.start_segment(self.pending_first)?;
        }
        let Some(cur) = self.current.as_mut() else {
            return Ok(());
        };
        cur.file
            .write_all(&self.pending)
            .map_err(|e| io(&cur.path, e))?;
        cur.file.sync_data().map_err(|e| io(&cur.path, e))?;
        cur.bytes += self.pending.len() as u64;
        self.disk_bytes += self.pending.len() as u64;
        self.pending.clear();
        Ok(())
    }

    /// Opens a new segment whose first record is `first`, durable in its folder.
    fn start_segment(&mut self, first: u64) -> Result<(), JournalError> {
        let path = self.dir.join(segment::file_name(first));
        let existing = std::fs::metadata(&path).map(|m| m.len()).ok();
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| io(&path, e))?;
        let bytes = match existing {
            // Reopened after a restart: appends continue after its valid records.
            Some(len) if len >= HEADER_BYTES => len,
            _ => {
                let mut header = MAGIC.to_vec();
                header.extend_from_slice(&first.to_le_bytes());
                file.write_all(&header).map_err(|e| io(&path, e))?;
                file.sync_all().map_err(|e| io(&path, e))?;
                self.disk_bytes += HEADER_BYTES;
                crate::durable::sync_dir(&self.dir).map_err(|e| io(&self.dir, e))?;
                HEADER_BYTES
            }
        };
        self.current = Some(OpenSegment { file, path, bytes });
        Ok(())
    }

    /// Every committed record with sequence number `from` or later, in order.
    pub fn read_from(&self, from: u64) -> Result<Vec<(u64, Vec<u8>)>, JournalError> {
        let segments = segment::list(&self.dir).map_err(|e| io(&self.dir, e))?;
        let start = segments
            .iter()
            .rposition(|s| s.first_seq <= from)
            .unwrap_or(0);
        let mut out = Vec::new();
        let newest = segments.len().saturating_sub(1);
        for (i, s) in segments.iter().enumerate().skip(start) {
            read_segment(s, from, i == newest, &mut out)?;
        }
        Ok(out)
    }

    /// Records that `consumer` has taken every record before `next_seq` (atomically, durably).
    pub fn save_checkpoint(&self, consumer: &str, next_seq: u64) -> Result<(), JournalError> {
        write_checkpoint(&self.dir, consumer, next_seq)
    }

    /// Where `consumer` resumes: the first record it has not taken (1 for a new consumer).
    pub fn checkpoint(&self, consumer: &str) -> Result<u64, JournalError> {
        read_checkpoint(&self.dir, consumer)
    }

    /// Every consumer's checkpoint.
    pub fn checkpoints(&self) -> Result<Vec<(String, u64)>, JournalError> {
        let dir = self.dir.join("checkpoints");
        let mut out = Vec::new();
        for entry in std::fs::read_dir(&dir).map_err(|e| io(&dir, e))? {
            let entry = entry.map_err(|e| io(&dir, e))?;
            let Some(name) = entry.file_name().to_str().map(str::to_string) else {
                continue;
            };
            if name.ends_with(".tmp") {
                continue;
            }
            out.push((name.clone(), self.checkpoint(&name)?));
        }
        Ok(out)
    }

    /// Deletes the segments whose every record lies before `next_seq` (what all consumers
    /// have taken), never the one being appended to. Returns how many were deleted.
    pub fn remove_consumed(&mut self, next_seq: u64) -> Result<usize, JournalError> {
        let segments = segment::list(&self.dir).map_err(|e| io(&self.dir, e))?;
        let current = self.current.as_ref().map(|c| c.path.clone());
        let mut removed = 0;
        for pair in segments.windows(2) {
            let (seg, next) = (&pair[0], &pair[1]);
            if next.first_seq <= next_seq && Some(&seg.path) != current.as_ref() {
                let len = std::fs::metadata(&seg.path).map(|m| m.len()).unwrap_or(0);
                std::fs::remove_file(&seg.path).map_err(|e| io(&seg.path, e))?;
                self.disk_bytes = self.disk_bytes.saturating_sub(len);
                removed += 1;
            }
        }
        Ok(removed)
    }

    /// Bytes of all segments on disk (kept as records are committed and segments removed).
    pub fn disk_bytes(&self) -> u64 {
        self.disk_bytes
    }

    /// Bytes appended but not yet committed.
    pub fn pending_bytes(&self) -> u64 {
        self.pending.len() as u64
    }
}

/// The journal's identity, made once (`<dir>/id`): archive files name the journal whose
/// records they hold, so instances sharing an archive never mistake each other's numbers.
pub fn journal_id(dir: &Path) -> Result<String, JournalError> {
    let path = dir.join("id");
    match std::fs::read_to_string(&path) {
        Ok(id) if !id.trim().is_empty() => return Ok(id.trim().to_string()),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(&path, e)),
    }
    std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
    let id = hex::encode(rand::random::<[u8; 4]>());
    crate::durable::replace_file(&path, id.as_bytes()).map_err(|e| io(&path, e))?;
    Ok(id)
}

fn checkpoint_path(dir: &Path, consumer: &str) -> Result<PathBuf, JournalError> {
    let valid = !consumer.is_empty()
        && consumer
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if !valid {
        return Err(JournalError::ConsumerName(consumer.to_string()));
    }
    Ok(dir.join("checkpoints").join(consumer))
}

/// Records in the journal in `dir` that `consumer` has taken every record before `next_seq`.
pub fn write_checkpoint(dir: &Path, consumer: &str, next_seq: u64) -> Result<(), JournalError> {
    let path = checkpoint_path(dir, consumer)?;
    crate::durable::replace_file(&path, next_seq.to_string().as_bytes()).map_err(|e| io(&path, e))
}

/// Where `consumer` resumes in the journal in `dir` (1 for a new consumer).
pub fn read_checkpoint(dir: &Path, consumer: &str) -> Result<u64, JournalError> {
    let path = checkpoint_path(dir, consumer)?;
    match std::fs::read_to_string(&path) {
        Ok(text) => Ok(text.trim().parse().unwrap_or(1)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(1),
        Err(e) => Err(io(&path, e)),
    }
}

/// Scans a segment: (valid length, next sequence, valid records, why it ends early).
fn scan(path: &Path) -> Result<(u64, u64, u64, Option<&'static str>), JournalError> {
    let mut r = match SegmentReader::open(path).map_err(|e| io(path, e))? {
        Ok(r) => r,
        Err(segment::End::Invalid { why, .. }) => return Ok((0, 0, 0, Some(why))),
        Err(segment::End::Clean) => return Ok((0, 0, 0, None)),
    };
    let mut records = 0;
    loop {
        match r.next_record().map_err(|e| io(path, e))? {
            Ok(_) => records += 1,
            Err(segment::End::Clean) => return Ok((r.offset, r.next_seq, records, None)),
            Err(segment::End::Invalid { offset, why }) => {
                return Ok((offset, r.next_seq, records, Some(why)))
            }
        }
    }
}

/// Adds a segment's records from `from` on; a damaged segment is an error unless it is the
/// newest (whose end may be an append in progress).
fn read_segment(
    s: &SegmentFile,
    from: u64,
    newest: bool,
    out: &mut Vec<(u64, Vec<u8>)>,
) -> Result<(), JournalError> {
    let corrupt = |offset, why| JournalError::Corrupt {
        path: s.path.clone(),
        offset,
        why,
    };
    let mut r = match SegmentReader::open(&s.path).map_err(|e| io(&s.path, e))? {
        Ok(r) => r,
        Err(segment::End::Invalid { offset, why }) if !newest => return Err(corrupt(offset, why)),
        Err(_) => return Ok(()),
    };
    loop {
        match r.next_record().map_err(|e| io(&s.path, e))? {
            Ok((seq, payload)) => {
                if seq >= from {
                    out.push((seq, payload));
                }
            }
            Err(segment::End::Clean) => return Ok(()),
            Err(segment::End::Invalid { offset, why }) => {
                return if newest {
                    Ok(())
                } else {
                    Err(corrupt(offset, why))
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
