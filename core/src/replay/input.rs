//! Reading OTLP files: the OpenTelemetry Collector `file` exporter's formats, one message at a
//! time, with the position after each so that a replay can resume there.
//!
//! - JSON lines: one OTLP/JSON request per line (the exporter's `format: json` without
//!   compression), plain or gzip-compressed as a whole (as rotated files often are).
//! - Length-prefixed messages: each preceded by its size as a 4-byte big-endian integer (the
//!   exporter's `format: proto`, and any format with `compression: zstd`), each protobuf or
//!   OTLP/JSON, each zstd-compressed or not.
//!
//! Which signal a JSON message holds is read from its top-level key (`resourceSpans`,
//! `resourceLogs`, ...). A protobuf message does not say: it is read as traces when every span
//! has a 16-byte trace id and an 8-byte span id, else as logs when it decodes as logs, unless
//! the caller names the signal.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::Path;

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use serde_json::Value;

use crate::receive::decode;

/// Messages larger than this are refused without being read whole (a corrupt length prefix
/// must not make the reader allocate gigabytes).
pub const MAX_MESSAGE_BYTES: usize = 256 * 1024 * 1024;

const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

/// The telemetry signal of a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// `ExportTraceServiceRequest`.
    Traces,
    /// `ExportLogsServiceRequest`.
    Logs,
}

/// What one message of a file holds.
#[derive(Debug, Clone, PartialEq)]
pub enum Payload {
    /// Spans.
    Traces(ExportTraceServiceRequest),
    /// Log records.
    Logs(ExportLogsServiceRequest),
    /// A signal toolwatch does not take (metrics, profiles): named, not sent.
    Skipped(&'static str),
}

/// One message, and where the file's decoded stream stands after it.
#[derive(Debug)]
pub struct Message {
    /// Its number in the file, from 1 (the line number for JSON lines).
    pub number: u64,
    /// The offset just after it in the decoded stream (after whole-file gzip).
    pub end: u64,
    /// The request, or why it cannot be read (never quoting the message's content).
    pub payload: Result<Payload, String>,
}

/// Why a file cannot be read on (its messages so far stand).
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// Reading failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The error.
        source: io::Error,
    },
    /// The file ends inside a length prefix or a message (a file still being written, or cut).
    #[error("{path}: the file ends inside message {number} (still being written, or cut)")]
    Truncated {
        /// The file.
        path: String,
        /// The message's number.
        number: u64,
    },
    /// A length prefix beyond [`MAX_MESSAGE_BYTES`]: not this format, or corrupt.
    #[error(
        "{path}: message {number} claims {bytes} bytes (more than {MAX_MESSAGE_BYTES}): not a length-prefixed OTLP file, or corrupt"
    )]
    Oversized {
        /// The file.
        path: String,
        /// The message's number.
        number: u64,
        /// The claimed size.
        bytes: u64,
    },
}

/// How a file's messages are framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// One OTLP/JSON request per line.
    JsonLines,
    /// A 4-byte big-endian size before each message.
    LengthPrefixed,
}

/// The messages of one file, from a position on.
pub struct MessageReader {
    path: String,
    reader: Box<dyn BufRead + Send>,
    framing: Framing,
    /// The file is whole (gzip-compressed: written once); a plain file may still be growing.
    whole: bool,
    /// The reader stopped before an incomplete last line or message of a file that may still
    /// be growing: it is left for the next replay.
    tail_pending: bool,
    /// Offset in the decoded stream.
    offset: u64,
    /// Messages before the current position.
    number: u64,
    signal: Option<Signal>,
    line: Vec<u8>,
}

impl MessageReader {
    /// Opens `path` at `offset` of its decoded stream, `number` messages in; `signal` names
    /// the signal of protobuf messages (else it is told from their content).
    pub fn open(
        path: &Path,
        offset: u64,
        number: u64,
        signal: Option<Signal>,
    ) -> Result<MessageReader, InputError> {
        let name = path.display().to_string();
        let io_err = |source| InputError::Io {
            path: name.clone(),
            source,
        };
        let mut file = File::open(path).map_err(io_err)?;
        let mut magic = [0u8; 2];
        let n = read_up_to(&mut file, &mut magic).map_err(io_err)?;
        file.seek(SeekFrom::Start(0)).map_err(io_err)?;
        // The framing is told from the start of the stream, wherever the reader resumes.
        let whole = n == 2 && magic == GZIP_MAGIC;
        let (reader, framing): (Box<dyn BufRead + Send>, _) = if whole {
            let gz = flate2::read::MultiGzDecoder::new(BufReader::new(file));
            let mut r = BufReader::with_capacity(1 << 20, gz);
            let framing = framing_of(&mut r).map_err(io_err)?;
            // A gzip stream cannot seek: what came before is inflated again and dropped.
            io::copy(&mut (&mut r).take(offset), &mut io::sink()).map_err(io_err)?;
            (Box::new(r), framing)
        } else {
            let mut r = BufReader::with_capacity(1 << 20, file);
            let framing = framing_of(&mut r).map_err(io_err)?;
            r.seek(SeekFrom::Start(offset)).map_err(io_err)?;
            (Box::new(r), framing)
        };
        Ok(MessageReader {
            path: name,
            reader,
            framing,
            whole,
            tail_pending: false,
            offset,
            number,
            signal,
            line: Vec::new(),
        })
    }

    /// How the file is framed.
    pub fn framing(&self) -> Framing {
        self.framing
    }

    /// Whether reading stopped before an incomplete last line or message of a file that may
    /// still be growing (left for the next replay).
    pub fn tail_pending(&self) -> bool {
        self.tail_pending
    }

    /// The next message, `None` at the end of the file.
    pub fn next_message(&mut self) -> Result<Option<Message>, InputError> {
        let bytes = match self.framing {
            Framing::JsonLines => self.next_line()?,
            Framing::LengthPrefixed => self.next_framed()?,
        };
        let Some(bytes) = bytes else { return Ok(None) };
        self.number += 1;
        let payload = match self.framing {
            Framing::JsonLines => decode_json(&bytes),
            Framing::LengthPrefixed => decode_message(&bytes, self.signal),
        };
        Ok(Some(Message {
            number: self.number,
            end: self.offset,
            payload,
        }))
    }

    /// The next non-empty line (blank lines are skipped but counted as lines).
    fn next_line(&mut self) -> Result<Option<Vec<u8>>, InputError> {
        loop {
            self.line.clear();
            let n = self
                .reader
                .read_until(b'\n', &mut self.line)
                .map_err(|source| InputError::Io {
                    path: self.path.clone(),
                    source,
                })?;
            if n == 0 {
                return Ok(None);
            }
            if self.line.last() != Some(&b'\n') && !self.whole {
                // A last line without its newline may still be being written (the exporter
                // ends every line with one): left for the next replay. In a whole (gzip)
                // file it is the last line as it will ever be, and read as one.
                self.tail_pending = true;
                return Ok(None);
            }
            self.offset += n as u64;
            if self.line.iter().all(u8::is_ascii_whitespace) {
                self.number += 1;
                continue;
            }
            return Ok(Some(std::mem::take(&mut self.line)));
        }
    }

    fn next_framed(&mut self) -> Result<Option<Vec<u8>>, InputError> {
        let io_err = |source| InputError::Io {
            path: self.path.clone(),
            source,
        };
        let mut size = [0u8; 4];
        let n = read_up_to(&mut self.reader, &mut size).map_err(io_err)?;
        if n == 0 {
            return Ok(None);
        }
        let number = self.number + 1;
        if n < 4 {
            return self.cut_short(number);
        }
        let len = u64::from(u32::from_be_bytes(size));
        if len > MAX_MESSAGE_BYTES as u64 {
            return Err(InputError::Oversized {
                path: self.path.clone(),
                number,
                bytes: len,
            });
        }
        let mut body = vec![0u8; len as usize];
        let got = read_up_to(&mut self.reader, &mut body).map_err(io_err)?;
        if got < body.len() {
            return self.cut_short(number);
        }
        self.offset += 4 + len;
        Ok(Some(body))
    }

    /// A file that ends inside message `number`: still being written if it may grow (left
    /// for the next replay), cut if it is whole.
    fn cut_short(&mut self, number: u64) -> Result<Option<Vec<u8>>, InputError> {
        if self.whole {
            return Err(InputError::Truncated {
                path: self.path.clone(),
                number,
            });
        }
        self.tail_pending = true;
        Ok(None)
    }
}

/// Reads until `buf` is full or the input ends; how many bytes were read.
fn read_up_to(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// JSON lines when the stream starts (after whitespace) with `{`; else length-prefixed.
fn framing_of(reader: &mut impl BufRead) -> io::Result<Framing> {
    let head = reader.fill_buf()?;
    // A length prefix's first byte is 0 for every message under 16 MiB; `{` is 0x7b. Empty
    // or only whitespace: nothing to read either way.
    Ok(match head.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'{') | None => Framing::JsonLines,
        Some(_) => Framing::LengthPrefixed,
    })
}

/// A message's bytes as a request: zstd-compressed or not, OTLP/JSON or protobuf.
pub fn decode_message(bytes: &[u8], signal: Option<Signal>) -> Result<Payload, String> {
    if bytes.starts_with(&ZSTD_MAGIC) {
        let mut out = Vec::new();
        let mut d = zstd::stream::read::Decoder::new(bytes)
            .map_err(|e| format!("not valid zstd: {e}"))?
            .take(MAX_MESSAGE_BYTES as u64 + 1);
        d.read_to_end(&mut out)
            .map_err(|e| format!("not valid zstd: {e}"))?;
        if out.len() > MAX_MESSAGE_BYTES {
            return Err(format!(
                "more than {MAX_MESSAGE_BYTES} bytes after zstd decompression"
            ));
        }
        return decode_plain(&out, signal);
    }
    decode_plain(bytes, signal)
}

fn decode_plain(bytes: &[u8], signal: Option<Signal>) -> Result<Payload, String> {
    let first = bytes.iter().find(|b| !b.is_ascii_whitespace());
    if first == Some(&b'{') {
        decode_json(bytes)
    } else {
        decode_protobuf(bytes, signal)
    }
}

/// An OTLP/JSON request, its signal read from its top-level key.
fn decode_json(bytes: &[u8]) -> Result<Payload, String> {
    let value: Value = serde_json::from_slice(bytes)
        .map_err(|e| format!("not JSON: {}", decode::scrub(&e.to_string())))?;
    let has = |key: &str| value.get(key).is_some();
    if has("resourceSpans") || has("resource_spans") {
        decode::json_value(value)
            .map(Payload::Traces)
            .map_err(|e| e.to_string())
    } else if has("resourceLogs") || has("resource_logs") {
        decode::json_value(value)
            .map(Payload::Logs)
            .map_err(|e| e.to_string())
    } else if has("resourceMetrics") || has("resource_metrics") {
        Ok(Payload::Skipped("metrics"))
    } else if has("resourceProfiles") || has("resource_profiles") {
        Ok(Payload::Skipped("profiles"))
    } else {
        Err("not an OTLP request: no resourceSpans, resourceLogs or resourceMetrics".into())
    }
}

/// A protobuf request of the named signal, or of the one it reads as.
fn decode_protobuf(bytes: &[u8], signal: Option<Signal>) -> Result<Payload, String> {
    let traces = || decode::protobuf::<ExportTraceServiceRequest>(bytes);
    let logs = || decode::protobuf::<ExportLogsServiceRequest>(bytes);
    match signal {
        Some(Signal::Traces) => traces().map(Payload::Traces).map_err(|e| e.to_string()),
        Some(Signal::Logs) => logs().map(Payload::Logs).map_err(|e| e.to_string()),
        None => match traces() {
            Ok(t) if looks_like_traces(&t) => Ok(Payload::Traces(t)),
            Ok(_) | Err(_) => match logs() {
                Ok(l) => Ok(Payload::Logs(l)),
                Err(e) => Err(format!(
                    "neither OTLP traces nor logs ({e}); name the signal with --signal"
                )),
            },
        },
    }
}

/// Every span has ids of the sizes OTLP gives them, and there is at least one span: what a
/// logs request read as traces would not have.
fn looks_like_traces(t: &ExportTraceServiceRequest) -> bool {
    let mut spans = t
        .resource_spans
        .iter()
        .flat_map(|r| &r.scope_spans)
        .flat_map(|s| &s.spans)
        .peekable();
    spans.peek().is_some() && spans.all(|s| s.trace_id.len() == 16 && s.span_id.len() == 8)
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
    use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
    use prost::Message as _;
    use std::io::Write;

    fn traces(n: u8) -> ExportTraceServiceRequest {
        ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                scope_spans: vec![ScopeSpans {
                    spans: (1..=n)
                        .map(|i| Span {
                            trace_id: vec![7; 16],
                            span_id: vec![i; 8],
                            name: format!("s{i}"),
                            ..Default::default()
                        })
                        .collect(),
                    ..Default::default()
                }],
                ..Default::default()
            }],
        }
    }

    fn logs() -> ExportLogsServiceRequest {
        ExportLogsServiceRequest {
            resource_logs: vec![ResourceLogs {
                scope_logs: vec![ScopeLogs {
                    log_records: vec![LogRecord {
                        time_unix_nano: 5,
                        severity_number: 9,
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        }
    }

    fn read_all(path: &Path, offset: u64, number: u64) -> Vec<Message> {
        let mut r = MessageReader::open(path, offset, number, None).expect("open");
        let mut out = Vec::new();
        while let Some(m) = r.next_message().expect("read") {
            out.push(m);
        }
        out
    }

    const JSON_SPAN: &str = r#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"0707070707070707070707070707070a","spanId":"0101010101010101","name":"a"}]}]}]}"#;

    #[test]
    fn json_lines_plain_and_gzip_resume_at_a_line() {
        let dir = tempdir();
        let text = format!(
            "{JSON_SPAN}\n\n{{\"resourceMetrics\":[]}}\nnot json\n{{\"resourceLogs\":[]}}\n"
        );
        let plain = dir.join("t.json");
        std::fs::write(&plain, &text).expect("write");
        let gz = dir.join("t.json.gz");
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(text.as_bytes()).expect("gzip");
        std::fs::write(&gz, e.finish().expect("gzip")).expect("write");
        for path in [&plain, &gz] {
            let all = read_all(path, 0, 0);
            let numbers: Vec<u64> = all.iter().map(|m| m.number).collect();
            // Line 2 is blank: skipped, but lines keep their numbers.
            assert_eq!(numbers, [1, 3, 4, 5]);
            assert!(
                matches!(&all[0].payload, Ok(Payload::Traces(t)) if t.resource_spans.len() == 1)
            );
            assert_eq!(all[1].payload, Ok(Payload::Skipped("metrics")));
            let refused = all[2].payload.as_ref().expect_err("not json");
            assert!(refused.starts_with("not JSON"), "{refused}");
            assert!(matches!(&all[3].payload, Ok(Payload::Logs(_))));
            // Resuming after line 3 reads lines 4 and 5, numbered as before.
            let again = read_all(path, all[1].end, all[1].number);
            let numbers: Vec<u64> = again.iter().map(|m| m.number).collect();
            assert_eq!(numbers, [4, 5]);
            assert_eq!(again[1].end, text.len() as u64);
        }
    }

    #[test]
    fn a_last_line_still_being_written_waits() {
        let dir = tempdir();
        let path = dir.join("t.json");
        // Cut, or whole JSON: either way, without its newline it may still be being written.
        for tail in ["{\"resourceSpans\":[", JSON_SPAN] {
            std::fs::write(&path, format!("{JSON_SPAN}\n{tail}")).expect("write");
            let mut r = MessageReader::open(&path, 0, 0, None).expect("open");
            let first = r.next_message().expect("read").expect("line 1");
            assert_eq!(first.end, JSON_SPAN.len() as u64 + 1);
            assert!(r.next_message().expect("read").is_none());
            assert!(r.tail_pending());
        }
        // In a gzip file the last line is read as it is: refused when cut.
        let gz = dir.join("t.json.gz");
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(format!("{JSON_SPAN}\n{{\"resourceSpans\":[").as_bytes())
            .expect("gzip");
        std::fs::write(&gz, e.finish().expect("gzip")).expect("write");
        let all = read_all(&gz, 0, 0);
        assert_eq!(all.len(), 2);
        assert!(all[1]
            .payload
            .as_ref()
            .expect_err("cut")
            .starts_with("not JSON"));
    }

    #[test]
    fn length_prefixed_protobuf_json_and_zstd_with_signals_told_apart() {
        let dir = tempdir();
        let path = dir.join("t.pb");
        let mut bytes = Vec::new();
        let mut push = |body: Vec<u8>| {
            bytes.extend_from_slice(&(body.len() as u32).to_be_bytes());
            bytes.extend_from_slice(&body);
        };
        push(traces(3).encode_to_vec());
        push(logs().encode_to_vec());
        push(zstd::encode_all(&traces(2).encode_to_vec()[..], 3).expect("zstd"));
        push(zstd::encode_all(JSON_SPAN.as_bytes(), 3).expect("zstd"));
        push(b"\x0a\x03abc".to_vec());
        std::fs::write(&path, &bytes).expect("write");
        let all = read_all(&path, 0, 0);
        assert_eq!(all.len(), 5);
        assert_eq!(all[0].payload, Ok(Payload::Traces(traces(3))));
        assert_eq!(all[1].payload, Ok(Payload::Logs(logs())));
        assert_eq!(all[2].payload, Ok(Payload::Traces(traces(2))));
        assert!(matches!(&all[3].payload, Ok(Payload::Traces(_))));
        let refused = all[4].payload.as_ref().expect_err("garbage");
        assert!(refused.contains("--signal"), "{refused}");
        // Resume after the second message.
        let again = read_all(&path, all[1].end, 2);
        assert_eq!(again.len(), 3);
        assert_eq!(again[0].number, 3);
        // A file ending inside a message (still being written): the messages before it
        // stand, the last waits for the next replay.
        std::fs::write(&path, &bytes[..bytes.len() - 2]).expect("write");
        let mut r = MessageReader::open(&path, 0, 0, None).expect("open");
        for _ in 0..4 {
            r.next_message().expect("whole").expect("a message");
        }
        assert!(r.next_message().expect("no error").is_none());
        assert!(r.tail_pending());
    }

    #[test]
    fn refusals_never_quote_the_message() {
        let secret = "AKIAQX7Z3K9M2P4V8R6T";
        for line in [
            format!("{{\"resourceSpans\": [{{\"x\": \"{secret}"),
            format!("{{\"resourceSpans\": \"{secret}\"}}"),
            format!("{{\"resourceSpans\":[{{\"scopeSpans\":[{{\"spans\":[{{\"traceId\":\"{secret}\"}}]}}]}}]}}"),
        ] {
            let e = decode_message(line.as_bytes(), None).expect_err("bad");
            assert!(!e.contains(secret) && !e.contains("AKIA"), "{e}");
        }
    }

    /// A fresh directory under the system's temporary one.
    fn tempdir() -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "toolwatch-replay-input-{}-{}",
            std::process::id(),
            rand::random::<u64>()
        ));
        std::fs::create_dir_all(&dir).expect("mkdir");
        dir
    }
}
