//! Replay: OTLP files into a running toolwatch, through the receive → protect → journal path
//! that live exporters use.
//!
//! Promise: every span and log record in the files is either acknowledged by the daemon or
//! reported as refused with its file, message number and reason (never its content); a
//! replay stopped or killed part-way resumes, when run again, after the last message the
//! daemon acknowledged (progress is kept per file in the state directory), and what it sends
//! again after a kill (at most the message in flight) the archive keeps once, since it
//! de-duplicates spans by tenant, trace and span id. Files are the OpenTelemetry Collector
//! `file` exporter's output ([`input`]). One request is in flight at a time, in file order.

pub mod input;
pub mod progress;
pub mod send;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Serialize;

use input::{InputError, MessageReader, Payload, Signal};
use progress::{FileProgress, ProgressDir};
use send::{Outcome, SendError, Target};

/// What a replay is asked to do.
#[derive(Debug, Clone)]
pub struct ReplayOptions {
    /// Files, and directories to take every file under (in path order, hidden ones skipped).
    pub paths: Vec<PathBuf>,
    /// The daemon's OTLP/HTTP receiver, e.g. `http://127.0.0.1:4318`.
    pub target: String,
    /// The tenant for items that name none (the `x-toolwatch-tenant` header).
    pub tenant: Option<String>,
    /// Bearer token, when the daemon requires senders to authenticate.
    pub token: Option<String>,
    /// Where progress is kept.
    pub state_dir: PathBuf,
    /// Start every file from its beginning, forgetting kept progress.
    pub restart: bool,
    /// The signal of protobuf messages, when given.
    pub signal: Option<Signal>,
    /// Requests are split to stay under this many bytes.
    pub max_request_bytes: usize,
    /// How long to keep retrying a daemon that refuses for load or cannot be reached.
    pub retry_for: Duration,
    /// Draw a progress bar on stderr (when it is a terminal).
    pub progress_bar: bool,
}

/// What a replay did to one file.
#[derive(Debug, Clone, Serialize)]
pub struct FileReport {
    /// The file.
    pub path: String,
    /// Messages already done by an earlier run, where this one resumed.
    pub resumed_after: u64,
    /// Kept progress was dropped: the file is not the one it was kept for.
    pub started_again: bool,
    /// Its last line or message is incomplete (the file may still be being written): left
    /// for the next replay.
    pub tail_pending: bool,
    /// Why the file could not be read to its end, if it could not.
    pub error: Option<String>,
    /// Its progress after this run.
    #[serde(flatten)]
    pub progress: FileProgress,
}

/// What a replay did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ReplayReport {
    /// Per file, in the order read.
    pub files: Vec<FileReport>,
    /// Spans acknowledged over all files (earlier runs' included).
    pub spans: u64,
    /// Log records acknowledged over all files.
    pub log_records: u64,
    /// Messages of other signals, not sent.
    pub skipped: u64,
    /// Messages refused.
    pub refused: u64,
    /// The error that stopped the replay, if one did (progress kept: run again to resume).
    pub stopped: Option<String>,
    /// Files that could not be read to their end (their error is in their report).
    pub files_with_errors: u64,
}

/// Why a replay cannot start.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// Bad options.
    #[error("{0}")]
    Usage(String),
    /// The state directory cannot be used.
    #[error("state directory {dir}: {source}")]
    State {
        /// The directory.
        dir: String,
        /// The error.
        source: std::io::Error,
    },
}

/// Why one file stopped.
#[derive(Debug, thiserror::Error)]
enum FileStop {
    #[error(transparent)]
    Input(#[from] InputError),
    #[error(transparent)]
    Send(#[from] SendError),
    #[error("{path}: {source}")]
    Open {
        path: String,
        source: std::io::Error,
    },
    #[error("saving progress of {path}: {source}")]
    Save {
        path: String,
        source: std::io::Error,
    },
}

/// Replays the files; the report says what was taken, refused and skipped, and what stopped
/// it if something did.
pub fn run(opts: &ReplayOptions) -> Result<ReplayReport, ReplayError> {
    let files = expand(&opts.paths).map_err(ReplayError::Usage)?;
    if opts.max_request_bytes < 1024 {
        return Err(ReplayError::Usage(
            "--max-request-bytes must be at least 1KiB".into(),
        ));
    }
    let target = Target::new(
        &opts.target,
        opts.token.clone(),
        opts.tenant.clone(),
        opts.retry_for,
    )
    .map_err(ReplayError::Usage)?;
    let state = ProgressDir::open(&opts.state_dir).map_err(|source| ReplayError::State {
        dir: opts.state_dir.display().to_string(),
        source,
    })?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| ReplayError::Usage(format!("cannot start the runtime: {e}")))?;
    let total: u64 = files
        .iter()
        .map(|f| std::fs::metadata(f).map(|m| m.len()).unwrap_or(0))
        .sum();
    let bar = progress_bar(opts.progress_bar, total);
    let mut report = ReplayReport::default();
    let mut bytes_before = 0;
    for file in &files {
        // A file gone since the listing (the exporter prunes old ones) or unreadable stops
        // only itself.
        let loaded = (|| {
            if opts.restart {
                state.forget(file)?;
            }
            state.load(file, !is_gzip(file)?)
        })();
        let (progress, started_again) = match loaded {
            Ok(l) => l,
            Err(source) => {
                let stop = FileStop::Open {
                    path: file.display().to_string(),
                    source,
                };
                report.files_with_errors += 1;
                report.files.push(FileReport {
                    path: file.display().to_string(),
                    resumed_after: 0,
                    started_again: false,
                    tail_pending: false,
                    error: Some(stop.to_string()),
                    progress: progress::FileProgress::empty(file),
                });
                continue;
            }
        };
        let mut file_report = FileReport {
            path: file.display().to_string(),
            resumed_after: progress.messages,
            started_again,
            tail_pending: false,
            error: None,
            progress,
        };
        bar.set_message(file.display().to_string());
        let size = std::fs::metadata(file).map(|m| m.len()).unwrap_or(0);
        let shown = BarPlace {
            bar: &bar,
            before: bytes_before,
            size,
        };
        let outcome = runtime.block_on(replay_file(
            file,
            &mut file_report.progress,
            &state,
            &target,
            opts,
            &shown,
        ));
        bytes_before += size;
        bar.set_position(bytes_before);
        let p = &file_report.progress;
        report.spans += p.spans;
        report.log_records += p.log_records;
        report.skipped += p.skipped;
        report.refused += p.refused_count();
        let stop = match outcome {
            Ok(tail_pending) => {
                file_report.tail_pending = tail_pending;
                None
            }
            Err(stop) => Some(stop),
        };
        match stop {
            None => report.files.push(file_report),
            // The daemon is gone, refuses this sender, or progress cannot be saved: the other
            // files would fare no better.
            Some(stop @ (FileStop::Send(_) | FileStop::Save { .. })) => {
                file_report.error = Some(stop.to_string());
                report.stopped = Some(stop.to_string());
                report.files.push(file_report);
                break;
            }
            // A file that cannot be read on stops only itself.
            Some(stop) => {
                file_report.error = Some(stop.to_string());
                report.files_with_errors += 1;
                report.files.push(file_report);
            }
        }
    }
    bar.finish_and_clear();
    Ok(report)
}

/// Whether `file` is gzip-compressed (its progress offsets are then in the inflated stream).
fn is_gzip(file: &Path) -> std::io::Result<bool> {
    let mut magic = [0u8; 2];
    let mut f = std::fs::File::open(file)?;
    let n = std::io::Read::read(&mut f, &mut magic)?;
    Ok(n == 2 && magic == [0x1f, 0x8b])
}

/// Replays one file from its kept progress, saving progress after each message; whether an
/// incomplete last line or message was left for the next replay.
async fn replay_file(
    file: &Path,
    p: &mut FileProgress,
    state: &ProgressDir,
    target: &Target,
    opts: &ReplayOptions,
    shown: &BarPlace<'_>,
) -> Result<bool, FileStop> {
    p.finished = false;
    let mut reader = MessageReader::open(file, p.offset, p.messages, opts.signal)?;
    let save = |p: &FileProgress| {
        state.save(p).map_err(|source| FileStop::Save {
            path: p.path.clone(),
            source,
        })
    };
    while let Some(m) = reader.next_message()? {
        match m.payload {
            Err(reason) => p.refuse(m.number, reason),
            Ok(Payload::Skipped(_)) => p.skipped += 1,
            Ok(Payload::Traces(req)) => {
                let mut taken = 0;
                let mut why = Vec::new();
                for part in send::split_traces(req, opts.max_request_bytes) {
                    match target.traces(&part).await? {
                        Outcome::Taken => taken += send::span_count(&part),
                        Outcome::Refused(r) => why.push(r),
                    }
                }
                p.spans += taken;
                refuse(p, m.number, why);
            }
            Ok(Payload::Logs(req)) => {
                let mut taken = 0;
                let mut why = Vec::new();
                for part in send::split_logs(req, opts.max_request_bytes) {
                    match target.logs(&part).await? {
                        Outcome::Taken => taken += send::log_count(&part),
                        Outcome::Refused(r) => why.push(r),
                    }
                }
                p.log_records += taken;
                refuse(p, m.number, why);
            }
        }
        p.offset = m.end;
        p.messages = m.number;
        // Offsets in a gzip file's inflated stream run past its size: shown as at its end.
        shown
            .bar
            .set_position(shown.before + p.offset.min(shown.size));
        save(p)?;
    }
    p.finished = !reader.tail_pending();
    save(p)?;
    Ok(reader.tail_pending())
}

/// Where one file's bytes lie on the bar over all files.
struct BarPlace<'a> {
    bar: &'a indicatif::ProgressBar,
    /// Bytes of the files before it.
    before: u64,
    /// Its own size.
    size: u64,
}

/// Records the reasons the parts of one message were refused, as one refusal.
fn refuse(p: &mut FileProgress, message: u64, why: Vec<String>) {
    if why.is_empty() {
        return;
    }
    let mut reason = why[0].clone();
    if why.len() > 1 {
        reason.push_str(&format!(" (and {} more parts refused)", why.len() - 1));
    }
    p.refuse(message, reason);
}

/// Files named, and the files under directories named (hidden entries skipped, in path
/// order), each once.
fn expand(paths: &[PathBuf]) -> Result<Vec<PathBuf>, String> {
    if paths.is_empty() {
        return Err("name at least one file or directory to replay".into());
    }
    let mut out = Vec::new();
    for p in paths {
        let meta = std::fs::metadata(p).map_err(|e| format!("{}: {e}", p.display()))?;
        if meta.is_dir() {
            let mut found = Vec::new();
            walk(p, &mut found).map_err(|e| format!("{}: {e}", p.display()))?;
            found.sort();
            out.extend(found);
        } else {
            out.push(p.clone());
        }
    }
    let mut seen = std::collections::HashSet::new();
    out.retain(|p| seen.insert(std::fs::canonicalize(p).unwrap_or_else(|_| p.clone())));
    Ok(out)
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        let kind = entry.file_type()?;
        if kind.is_dir() {
            walk(&entry.path(), out)?;
        } else if kind.is_file() {
            out.push(entry.path());
        }
    }
    Ok(())
}

/// A bar over the files' bytes on stderr, drawn only when asked and stderr is a terminal.
fn progress_bar(show: bool, total: u64) -> indicatif::ProgressBar {
    if !show {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(total);
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "{bar:30} {bytes}/{total_bytes} {elapsed} eta {eta} {wide_msg}",
    ) {
        bar.set_style(style);
    }
    bar
}
