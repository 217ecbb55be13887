//! One journal segment file: a header, then records.
//!
//! ```text
//! header:  b"TWJ1" | first sequence number (u64 LE)
//! record:  payload length (u32 LE) | CRC-32 of (sequence LE ‖ payload) (u32 LE)
//!          | sequence number (u64 LE) | payload
//! ```
//!
//! Sequence numbers are consecutive across segments. A record is valid only when it is whole,
//! its CRC matches and its sequence number is the next one expected, so a torn write (a crash
//! mid-append), a flipped byte or stale bytes past the end are all detected the same way.

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};

/// Magic and version at the start of every segment.
pub const MAGIC: &[u8; 4] = b"TWJ1";
/// Bytes before the first record.
pub const HEADER_BYTES: u64 = 12;
/// Bytes of a record before its payload.
pub const RECORD_HEADER_BYTES: u64 = 16;
/// Largest payload a record may hold (a batch is bounded by the receivers' request limit).
pub const MAX_PAYLOAD: u32 = 256 * 1024 * 1024;

/// The file name of the segment whose first record has sequence `first`.
pub fn file_name(first: u64) -> String {
    format!("seg-{first:020}.twj")
}

/// The first sequence number in a segment file name, if it is one.
pub fn first_seq_of(path: &Path) -> Option<u64> {
    let name = path.file_name()?.to_str()?;
    name.strip_prefix("seg-")?
        .strip_suffix(".twj")?
        .parse()
        .ok()
}

/// The CRC of a record.
pub fn checksum(seq: u64, payload: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&seq.to_le_bytes());
    h.update(payload);
    h.finalize()
}

/// Encodes one record.
pub fn encode(seq: u64, payload: &[u8], out: &mut Vec<u8>) {
    let len = u32::try_from(payload.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&checksum(seq, payload).to_le_bytes());
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(payload);
}

/// Why reading a segment stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum End {
    /// At the end of the file, after a whole record.
    Clean,
    /// At `offset`, where the bytes are not a valid next record (torn, corrupt, or stale).
    Invalid {
        /// Where the valid part of the file ends.
        offset: u64,
        /// What is wrong there.
        why: &'static str,
    },
}

/// Reads a segment's records in order.
pub struct SegmentReader {
    reader: BufReader<File>,
    /// The next expected sequence number.
    pub next_seq: u64,
    /// Offset of the next record.
    pub offset: u64,
    len: u64,
}

impl SegmentReader {
    /// Opens a segment and checks its header.
    pub fn open(path: &Path) -> std::io::Result<Result<SegmentReader, End>> {
        let file = File::open(path)?;
        let len = file.metadata()?.len();
        let mut reader = BufReader::with_capacity(1 << 16, file);
        let mut header = [0u8; HEADER_BYTES as usize];
        if len < HEADER_BYTES || reader.read_exact(&mut header).is_err() {
            return Ok(Err(End::Invalid {
                offset: 0,
                why: "segment header is torn",
            }));
        }
        if &header[..4] != MAGIC {
            return Ok(Err(End::Invalid {
                offset: 0,
                why: "not a journal segment",
            }));
        }
        let mut first = [0u8; 8];
        first.copy_from_slice(&header[4..12]);
        let first = u64::from_le_bytes(first);
        if first_seq_of(path).is_some_and(|named| named != first) {
            return Ok(Err(End::Invalid {
                offset: 0,
                why: "segment header names another first record",
            }));
        }
        Ok(Ok(SegmentReader {
            reader,
            next_seq: first,
            offset: HEADER_BYTES,
            len,
        }))
    }

    /// Re-reads the file's length, for a segment that is still being appended to.
    pub fn refresh(&mut self) -> std::io::Result<()> {
        self.len = self.reader.get_ref().metadata()?.len();
        Ok(())
    }

    /// Passes over the next record without reading its payload (a record whose content the
    /// caller has already): its length, or why there is none. The header is checked as
    /// [`SegmentReader::next_record`] checks it; the payload's checksum is not.
    pub fn skip_record(&mut self) -> std::io::Result<Result<(u64, u32), End>> {
        let (len, _, seq) = match self.next_header()? {
            Ok(h) => h,
            Err(end) => return Ok(Err(end)),
        };
        if seq != self.next_seq {
            return Ok(Err(self.invalid("record is out of sequence")));
        }
        self.reader.seek_relative(i64::from(len))?;
        self.passed(len);
        Ok(Ok((seq, len)))
    }

    /// The next record, or why there is none.
    pub fn next_record(&mut self) -> std::io::Result<Result<(u64, Vec<u8>), End>> {
        let (len, crc, seq) = match self.next_header()? {
            Ok(h) => h,
            Err(end) => return Ok(Err(end)),
        };
        let mut payload = vec![0u8; len as usize];
        self.reader.read_exact(&mut payload)?;
        if checksum(seq, &payload) != crc {
            return Ok(Err(self.invalid("record checksum does not match")));
        }
        if seq != self.next_seq {
            return Ok(Err(self.invalid("record is out of sequence")));
        }
        self.passed(len);
        Ok(Ok((seq, payload)))
    }

    /// The next record's header (payload length, checksum, sequence number) once the file
    /// is known to hold the whole record, or why there is none.
    fn next_header(&mut self) -> std::io::Result<Result<(u32, u32, u64), End>> {
        if self.offset == self.len {
            return Ok(Err(End::Clean));
        }
        if self.len - self.offset < RECORD_HEADER_BYTES {
            return Ok(Err(self.invalid("record header is torn")));
        }
        let mut head = [0u8; RECORD_HEADER_BYTES as usize];
        self.reader.read_exact(&mut head)?;
        let word = |i: usize| {
            let mut b = [0u8; 4];
            b.copy_from_slice(&head[i..i + 4]);
            u32::from_le_bytes(b)
        };
        let mut seq = [0u8; 8];
        seq.copy_from_slice(&head[8..16]);
        let (len, crc, seq) = (word(0), word(4), u64::from_le_bytes(seq));
        if len > MAX_PAYLOAD {
            return Ok(Err(self.invalid("record length is implausible")));
        }
        if self.len - self.offset - RECORD_HEADER_BYTES < u64::from(len) {
            return Ok(Err(self.invalid("record is torn")));
        }
        Ok(Ok((len, crc, seq)))
    }

    /// The record at the current offset is invalid.
    fn invalid(&self, why: &'static str) -> End {
        End::Invalid {
            offset: self.offset,
            why,
        }
    }

    /// Moves past a record of `len` payload bytes.
    fn passed(&mut self, len: u32) {
        self.offset += RECORD_HEADER_BYTES + u64::from(len);
        self.next_seq += 1;
    }
}

/// A segment file on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentFile {
    /// Its path.
    pub path: PathBuf,
    /// The sequence number of its first record.
    pub first_seq: u64,
}

/// The segments in `dir`, oldest first.
pub fn list(dir: &Path) -> std::io::Result<Vec<SegmentFile>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if let Some(first_seq) = first_seq_of(&path) {
            out.push(SegmentFile { path, first_seq });
        }
    }
    out.sort_by_key(|s| s.first_seq);
    Ok(out)
}
