//! A consumer's reader: follows the journal from the consumer's checkpoint as the writer
//! commits, and records how far the consumer has durably taken it.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::head::JournalHead;
use super::segment::{self, End, SegmentReader};
use super::{io, read_checkpoint, write_checkpoint, JournalError};

/// A record [`Tail::read`] hands over.
pub enum Record<T> {
    /// Its payload, read from disk and checked.
    Payload(Vec<u8>),
    /// What the caller already had for it.
    Taken(T),
}

/// One consumer's position in the journal and its open segment.
pub struct Tail {
    dir: PathBuf,
    consumer: String,
    head: Arc<JournalHead>,
    next: u64,
    reader: Option<(SegmentReader, PathBuf)>,
}

impl Tail {
    /// Opens `consumer`'s tail at its checkpoint (or the oldest record still kept, if the
    /// checkpoint is older) and registers its position with the head.
    pub fn open(dir: &Path, consumer: &str, head: Arc<JournalHead>) -> Result<Tail, JournalError> {
        let checkpoint = read_checkpoint(dir, consumer)?;
        // A consumer new to this journal (or behind what was removed) starts at the oldest
        // record kept; with no segment left, at the next record to come.
        let oldest = segment::list(dir)
            .map_err(|e| io(dir, e))?
            .first()
            .map_or(head.committed(), |s| s.first_seq);
        let next = checkpoint.max(oldest).min(head.committed());
        head.set_position(consumer, next);
        Ok(Tail {
            dir: dir.to_path_buf(),
            consumer: consumer.to_string(),
            head,
            next,
            reader: None,
        })
    }

    /// The consumer's name.
    pub fn consumer(&self) -> &str {
        &self.consumer
    }

    /// The next record this tail will return.
    pub fn next_seq(&self) -> u64 {
        self.next
    }

    /// The shared head.
    pub fn head(&self) -> &Arc<JournalHead> {
        &self.head
    }

    /// Durable records from the current position on, at most `max_records` and about
    /// `max_bytes`; waits up to `wait` when there are none. Empty means nothing new (or, with
    /// [`JournalHead::is_closed`], nothing more ever). A record whose content `have` returns
    /// is passed over on disk (its payload neither read nor checked) and handed over as that
    /// content; the others are read and checked.
    pub fn read<T>(
        &mut self,
        max_records: usize,
        max_bytes: usize,
        wait: Duration,
        mut have: impl FnMut(u64) -> Option<T>,
    ) -> Result<Vec<(u64, Record<T>)>, JournalError> {
        let committed = self.head.wait_past(self.next, wait);
        // Every record before `committed` was written before it was published: with the
        // length read now, none of them can look torn.
        if let Some((reader, path)) = self.reader.as_mut() {
            reader.refresh().map_err(|e| io(path, e))?;
        }
        let mut out = Vec::new();
        let mut bytes = 0;
        while self.next < committed && out.len() < max_records && bytes < max_bytes {
            if let Some(content) = have(self.next) {
                let (seq, len) = self.skip_record()?;
                bytes += len as usize;
                out.push((seq, Record::Taken(content)));
            } else {
                let (seq, payload) = self.next_record()?;
                bytes += payload.len();
                out.push((seq, Record::Payload(payload)));
            }
        }
        Ok(out)
    }

    /// Passes over the record at `self.next`, which the head says is durable: its number and
    /// payload length.
    fn skip_record(&mut self) -> Result<(u64, u32), JournalError> {
        self.step(|reader| reader.skip_record())
    }

    /// The record at `self.next`, which the head says is durable.
    fn next_record(&mut self) -> Result<(u64, Vec<u8>), JournalError> {
        self.step(|reader| reader.next_record())
    }

    /// Reads the record at `self.next` with `read`, opening its segment as needed.
    fn step<R>(
        &mut self,
        mut read: impl FnMut(&mut SegmentReader) -> std::io::Result<Result<(u64, R), End>>,
    ) -> Result<(u64, R), JournalError> {
        loop {
            let (reader, path) = match self.reader.as_mut() {
                Some(open) => (&mut open.0, open.1.clone()),
                None => {
                    let open = self.open_segment_holding(self.next)?;
                    let open = self.reader.insert(open);
                    (&mut open.0, open.1.clone())
                }
            };
            match read(reader).map_err(|e| io(&path, e))? {
                // Skipping up to the checkpoint inside the first segment read.
                Ok((seq, _)) if seq < self.next => {}
                Ok((seq, payload)) => {
                    self.next = seq + 1;
                    return Ok((seq, payload));
                }
                Err(End::Clean) => {
                    // This segment ended: the record is the first of the next segment.
                    self.reader = None;
                    let next_path = self.dir.join(segment::file_name(self.next));
                    if !next_path.exists() {
                        return Err(JournalError::Corrupt {
                            path: next_path,
                            offset: 0,
                            why: "the segment of a durable record is missing",
                        });
                    }
                }
                Err(End::Invalid { offset, why }) => {
                    return Err(JournalError::Corrupt { path, offset, why })
                }
            }
        }
    }

    /// Opens the segment that holds `seq`.
    fn open_segment_holding(&self, seq: u64) -> Result<(SegmentReader, PathBuf), JournalError> {
        let segments = segment::list(&self.dir).map_err(|e| io(&self.dir, e))?;
        let Some(s) = segments.iter().rev().find(|s| s.first_seq <= seq) else {
            return Err(JournalError::Corrupt {
                path: self.dir.clone(),
                offset: 0,
                why: "no segment holds a durable record",
            });
        };
        match SegmentReader::open(&s.path).map_err(|e| io(&s.path, e))? {
            Ok(r) => Ok((r, s.path.clone())),
            Err(End::Invalid { offset, why }) => Err(JournalError::Corrupt {
                path: s.path.clone(),
                offset,
                why,
            }),
            Err(End::Clean) => Err(JournalError::Corrupt {
                path: s.path.clone(),
                offset: 0,
                why: "segment is empty",
            }),
        }
    }

    /// Records that the consumer has durably taken every record before `next_seq`.
    pub fn save_checkpoint(&self, next_seq: u64) -> Result<(), JournalError> {
        write_checkpoint(&self.dir, &self.consumer, next_seq)?;
        self.head.set_position(&self.consumer, next_seq);
        Ok(())
    }
}
