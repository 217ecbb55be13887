//! `toolwatch verify`: the archive against its manifests.
//!
//! Every manifest's chain is checked line by line (each line names the hash of the one
//! before), then the files the manifests say should be there (added and not removed) are
//! compared with the files that are: each missing, modified (SHA-256 differs) or extra file is
//! named. `--since` limits the file comparison and signature checks to partitions of that
//! date or later; chains are always checked whole, streamed line by line, so memory holds the
//! files in scope, never a manifest's text.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use super::{file_sha256, line_hash, Entry, Op, DIR, GENESIS};
use crate::archive::layout::lock::ReadersLock;
use crate::archive::layout::partition::IN_PROGRESS_SUFFIX;
use crate::archive::table::Table;

/// One thing `verify` found wrong.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Problem {
    /// A manifest line that is not an entry.
    Unreadable {
        /// The manifest.
        manifest: String,
        /// Line number (1-based).
        line: usize,
    },
    /// A line whose `prev` is not the hash of the line before it: that line or this one was
    /// edited, or a line was removed between them.
    ChainBroken {
        /// The manifest.
        manifest: String,
        /// Line number (1-based).
        line: usize,
    },
    /// Lines out of order (a line's `prev` names another line of the manifest, or its `seq`
    /// is not the next).
    Reordered {
        /// The manifest.
        manifest: String,
        /// Line number (1-based).
        line: usize,
    },
    /// An entry without a signature, where a public key says entries are signed.
    Unsigned {
        /// The manifest.
        manifest: String,
        /// Line number (1-based).
        line: usize,
    },
    /// An entry whose signature the public key does not verify.
    BadSignature {
        /// The manifest.
        manifest: String,
        /// Line number (1-based).
        line: usize,
    },
    /// A file merged away (or deleted by retention) that no manifest ever recorded as added:
    /// it was slipped in, and compaction took it in.
    RemovedUnrecorded(String),
    /// A file merged away whose bytes, when compaction read them, were not those recorded.
    ModifiedBeforeRemoval(String),
    /// A manifest a kept head names is not there.
    ManifestMissing(String),
    /// A manifest is shorter than a kept head says it was: its tail was cut off.
    Truncated {
        /// The manifest.
        manifest: String,
        /// The kept head's line.
        line: u64,
    },
    /// A manifest's line is not the one a kept head recorded.
    HeadDiffers {
        /// The manifest.
        manifest: String,
        /// The kept head's line.
        line: u64,
    },
    /// A file the manifests record is not there.
    Missing(String),
    /// A file's bytes are not those recorded.
    Modified(String),
    /// A file no manifest records.
    Extra(String),
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Problem::Unreadable { manifest, line } => {
                write!(f, "unreadable {manifest} line {line}")
            }
            Problem::ChainBroken { manifest, line } => {
                write!(f, "chain-broken {manifest} line {line}")
            }
            Problem::Reordered { manifest, line } => write!(f, "reordered {manifest} line {line}"),
            Problem::Unsigned { manifest, line } => write!(f, "unsigned {manifest} line {line}"),
            Problem::BadSignature { manifest, line } => {
                write!(f, "bad-signature {manifest} line {line}")
            }
            Problem::RemovedUnrecorded(p) => write!(f, "removed-unrecorded {p}"),
            Problem::ModifiedBeforeRemoval(p) => write!(f, "modified-before-removal {p}"),
            Problem::ManifestMissing(m) => write!(f, "manifest-missing {m}"),
            Problem::Truncated { manifest, line } => write!(f, "truncated {manifest} line {line}"),
            Problem::HeadDiffers { manifest, line } => {
                write!(f, "head-differs {manifest} line {line}")
            }
            Problem::Missing(p) => write!(f, "missing {p}"),
            Problem::Modified(p) => write!(f, "modified {p}"),
            Problem::Extra(p) => write!(f, "extra {p}"),
        }
    }
}

/// What `verify` found.
#[derive(Debug, Default)]
pub struct Report {
    /// Manifests read.
    pub manifests: usize,
    /// Entries read.
    pub entries: usize,
    /// Files compared.
    pub files: usize,
    /// Each manifest's last line: (manifest, seq, hash of the line).
    pub heads: Vec<(String, u64, String)>,
    /// What is wrong, in order.
    pub problems: Vec<Problem>,
}

/// What the manifests say about the files in scope.
#[derive(Default)]
struct Ledger {
    /// Every file added: its SHA-256 and size as recorded.
    added: std::collections::HashMap<String, ([u8; 32], u64)>,
    /// Every file removed, with the SHA-256 its remover read (`None`: retention, which does
    /// not read).
    removed: std::collections::HashMap<String, Option<[u8; 32]>>,
    /// Adds out of scope, kept small (a hash of the path to the SHA-256 recorded), so a
    /// removal out of scope is still checked against what was added: the latest
    /// [`OLD_ADDS_KEPT`] of them (a merge removes files added shortly before it).
    old_added: std::collections::HashMap<u64, [u8; 32]>,
    /// Their order, oldest first, and whether any were dropped.
    old_order: std::collections::VecDeque<u64>,
    old_dropped: bool,
    /// Removals out of scope, with what their remover read.
    old_removed: Vec<(String, Option<[u8; 32]>)>,
    /// `offloaded` removals are not removals here (the archive in the object store).
    ignore_offloads: bool,
}

/// How many adds out of scope are kept for checking removals (about 80 bytes each).
const OLD_ADDS_KEPT: usize = 1 << 20;

/// A 64-bit key of a path (the same in every run).
fn path_key(path: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    path.hash(&mut h);
    h.finish()
}

/// Whether the archive file at `path` (relative) is in a partition dated `since` or later
/// (every file when there is no `since`; a path without a date is always in).
fn in_scope(since: Option<&str>, path: &str) -> bool {
    since.is_none_or(|d| {
        path.split('/')
            .find_map(|c| c.strip_prefix("date="))
            .is_none_or(|date| date >= d)
    })
}

/// A hex SHA-256 as bytes (anything else: zeros, which match no file).
fn sha_bytes(hex_text: &str) -> [u8; 32] {
    let mut out = [0u8; 32];
    if hex::decode_to_slice(hex_text, &mut out).is_err() {
        out = [0u8; 32];
    }
    out
}

/// Verifies the archive under `data_dir`; `since` (`YYYY-MM-DD`) limits the file comparison
/// and the signature checks to partitions of that date or later (every chain is still read
/// whole, streamed); with `key`, every entry in scope, and every manifest's last line, must
/// carry a signature it verifies (the chain ties each earlier line to the last).
pub fn verify(
    data_dir: &Path,
    since: Option<&str>,
    key: Option<&ed25519_dalek::VerifyingKey>,
) -> std::io::Result<Report> {
    verify_from(data_dir, since, key, None).map(|(report, _)| report)
}

/// [`verify`], continuing from `checkpoint` (taken by an earlier run with a `since` no later
/// than this one's): each manifest's chain is read from the line the checkpoint verified (which
/// must still be there, unchanged), and the files it booked are compared with those the new
/// lines book. Returns the checkpoint to keep for the next run. A removal of a file out of
/// scope whose add came before the checkpoint is not checked (a run without one checks it).
pub fn verify_from(
    data_dir: &Path,
    since: Option<&str>,
    key: Option<&ed25519_dalek::VerifyingKey>,
    checkpoint: Option<&Checkpoint>,
) -> std::io::Result<(Report, Checkpoint)> {
    // Readers' lock, shared: a compaction's swap and its manifest lines are seen together.
    let _readers = ReadersLock::shared(data_dir);
    verify_files(&mut LocalFiles(data_dir), since, key, checkpoint)
}

/// Where `verify` finds an archive's manifests and files: a folder, or an object store.
pub trait ArchiveFiles {
    /// The folder whose `manifest/` holds the manifests, as local files.
    fn manifest_root(&self) -> &Path;
    /// Brings the manifest lines written since the last call into [`Self::manifest_root`]
    /// (nothing to do for a folder: its manifests are the files themselves).
    fn refresh(&mut self) -> std::io::Result<()>;
    /// Every archive file there, relative to the archive's root, `/`-separated.
    fn present(&mut self) -> std::io::Result<Vec<String>>;
    /// A file's size (`None`: gone since it was listed).
    fn size(&mut self, path: &str) -> std::io::Result<Option<u64>>;
    /// A file's hex SHA-256 (`None`: gone since it was listed).
    fn sha256(&mut self, path: &str) -> std::io::Result<Option<String>>;
    /// True when a removed file may still be there for a while (an object store deletes a
    /// removal's object `storage.delete_delay` after it), so it is not `extra`.
    fn removals_linger(&self) -> bool;
    /// True when an `offloaded` removal takes the file away here (a local folder; in the
    /// object store the file stays).
    fn counts_offloads(&self) -> bool {
        true
    }
}

/// An archive in a local folder.
pub struct LocalFiles<'a>(pub &'a Path);

impl ArchiveFiles for LocalFiles<'_> {
    fn manifest_root(&self) -> &Path {
        self.0
    }

    fn refresh(&mut self) -> std::io::Result<()> {
        Ok(())
    }

    fn present(&mut self) -> std::io::Result<Vec<String>> {
        archive_files(self.0)
    }

    fn size(&mut self, path: &str) -> std::io::Result<Option<u64>> {
        match std::fs::metadata(self.0.join(path)) {
            Ok(m) => Ok(Some(m.len())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn sha256(&mut self, path: &str) -> std::io::Result<Option<String>> {
        match file_sha256(&self.0.join(path)) {
            Ok(h) => Ok(Some(h)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn removals_linger(&self) -> bool {
        false
    }
}

/// [`verify_from`] over the archive `files` holds.
pub fn verify_files(
    files: &mut dyn ArchiveFiles,
    since: Option<&str>,
    key: Option<&ed25519_dalek::VerifyingKey>,
    checkpoint: Option<&Checkpoint>,
) -> std::io::Result<(Report, Checkpoint)> {
    let mut report = Report::default();
    let mut ledger = Ledger {
        ignore_offloads: !files.counts_offloads(),
        ..Ledger::default()
    };
    if let Some(c) = checkpoint {
        seed(&mut ledger, c, since);
    }
    let in_scope = |p: &str| in_scope(since, p);
    let from: std::collections::HashMap<String, Mark> = checkpoint
        .map(|c| {
            c.marks
                .iter()
                .map(|m| (m.manifest.clone(), m.clone()))
                .collect()
        })
        .unwrap_or_default();
    files.refresh()?;
    let mut read = read_manifests(files.manifest_root(), key, &in_scope, &mut ledger, &from)?;
    // A manifest the checkpoint verified must still be there.
    for m in from.keys() {
        if !read.seen.contains(m) {
            read.problems.push(Problem::ManifestMissing(m.clone()));
        }
    }
    let mut present = present_files(files, &in_scope, &ledger)?;
    // A writer publishes a file before its line, and retention writes its line before it
    // deletes: files and lines that disagree are looked at again after the lines appended
    // meanwhile are read, so a running daemon makes no false alarm.
    if disagree(&ledger, &present) {
        files.refresh()?;
        let again = read_manifests(
            files.manifest_root(),
            key,
            &in_scope,
            &mut ledger,
            &read.marks,
        )?;
        read.merge(again);
        present = present_files(files, &in_scope, &ledger)?;
    }
    report.manifests = read.seen.len();
    report.entries = read.entries;
    report.heads = read.heads.into_values().collect();
    report.heads.sort();
    report.problems = read.problems;
    let mut marks: Vec<Mark> = read.marks.into_values().collect();
    marks.sort_by(|a, b| a.manifest.cmp(&b.manifest));
    let next = Checkpoint {
        since: since.unwrap_or_default().to_string(),
        public_key: key.map(|k| hex::encode(k.to_bytes())).unwrap_or_default(),
        marks,
        added: ledger
            .added
            .iter()
            .map(|(p, (sha, bytes))| (p.clone(), hex::encode(sha), *bytes))
            .collect(),
        removed: ledger
            .removed
            .iter()
            .map(|(p, read)| (p.clone(), read.map(hex::encode).unwrap_or_default()))
            .collect(),
    };
    let expected = settle(ledger, checkpoint.is_some(), &mut report.problems);
    for (p, (sha, bytes)) in &expected {
        if !present.contains(p) {
            report.problems.push(Problem::Missing(p.clone()));
            continue;
        }
        let named = |e: std::io::Error| std::io::Error::new(e.kind(), format!("{p}: {e}"));
        // Deleted since the listing (retention, a merge): gone as the lines say.
        let Some(size) = files.size(p).map_err(named)? else {
            continue;
        };
        // A size that differs says enough: the file is not read.
        let modified = size != *bytes
            || match files.sha256(p).map_err(named)? {
                Some(h) => sha_bytes(&h) != *sha,
                None => continue,
            };
        report.files += 1;
        if modified {
            report.problems.push(Problem::Modified(p.clone()));
        }
    }
    for p in present.iter().filter(|p| !expected.contains_key(*p)) {
        report.problems.push(Problem::Extra(p.clone()));
    }
    Ok((report, next))
}

/// What reading the manifests gave.
#[derive(Default)]
struct Read {
    /// The manifests there.
    seen: std::collections::HashSet<String>,
    /// Per manifest: where it was read up to.
    marks: std::collections::HashMap<String, Mark>,
    /// Per manifest: its last line (seq, hash).
    heads: std::collections::HashMap<String, (String, u64, String)>,
    entries: usize,
    problems: Vec<Problem>,
}

impl Read {
    /// A second read's findings over the first's.
    fn merge(&mut self, later: Read) {
        self.seen.extend(later.seen);
        self.marks.extend(later.marks);
        self.heads.extend(later.heads);
        self.entries += later.entries;
        self.problems.extend(later.problems);
    }
}

/// Reads every manifest (each from its mark in `from`, if it has one) into `ledger`.
fn read_manifests(
    data_dir: &Path,
    key: Option<&ed25519_dalek::VerifyingKey>,
    in_scope: &dyn Fn(&str) -> bool,
    ledger: &mut Ledger,
    from: &std::collections::HashMap<String, Mark>,
) -> std::io::Result<Read> {
    let mut read = Read::default();
    for path in super::list(data_dir)? {
        let name = format!(
            "{DIR}/{}",
            path.file_name().unwrap_or_default().to_string_lossy()
        );
        if !std::fs::metadata(&path)
            .map(|m| m.is_file())
            .unwrap_or(false)
        {
            continue;
        }
        read.seen.insert(name.clone());
        let scan = scan_manifest(
            &name,
            &path,
            key,
            in_scope,
            ledger,
            from.get(&name),
            &mut read.problems,
        )?;
        read.entries += scan.entries;
        if let Some(mark) = scan.mark {
            read.marks.insert(name.clone(), mark);
        }
        if let Some(head) = scan.head {
            read.heads.insert(name.clone(), (name, head.0, head.1));
        }
    }
    Ok(read)
}

/// The completed files in scope (without the removed ones, where removals linger).
fn present_files(
    files: &mut dyn ArchiveFiles,
    in_scope: &dyn Fn(&str) -> bool,
    ledger: &Ledger,
) -> std::io::Result<BTreeSet<String>> {
    let linger = files.removals_linger();
    Ok(files
        .present()?
        .into_iter()
        .filter(|p| in_scope(p))
        .filter(|p| !(linger && ledger.removed.contains_key(p)))
        .collect())
}

/// True when the files present are not those the ledger expects.
fn disagree(ledger: &Ledger, present: &BTreeSet<String>) -> bool {
    let live = |p: &String| ledger.added.contains_key(p) && !ledger.removed.contains_key(p);
    present.iter().any(|p| !live(p)) || ledger.added.keys().any(|p| live(p) && !present.contains(p))
}

/// The files the ledger expects (added, not removed), with the problems of its removals.
fn settle(
    ledger: Ledger,
    incremental: bool,
    problems: &mut Vec<Problem>,
) -> BTreeMap<String, ([u8; 32], u64)> {
    let Ledger {
        mut added,
        removed,
        old_added,
        old_removed,
        old_dropped,
        ..
    } = ledger;
    // Removals of files out of scope: still checked, so a file changed and then merged away
    // is found however old its partition.
    for (r, read) in &old_removed {
        match old_added.get(&path_key(r)) {
            // Added before the checkpoint, or among the adds no longer kept: not known here.
            None if incremental || old_dropped => {}
            None => problems.push(Problem::RemovedUnrecorded(r.clone())),
            Some(sha) if read.is_some_and(|read| read != *sha) => {
                problems.push(Problem::ModifiedBeforeRemoval(r.clone()))
            }
            Some(_) => {}
        }
    }
    for (r, read) in &removed {
        match added.remove(r) {
            None => problems.push(Problem::RemovedUnrecorded(r.clone())),
            Some((sha, _)) if read.is_some_and(|read| read != sha) => {
                problems.push(Problem::ModifiedBeforeRemoval(r.clone()))
            }
            Some(_) => {}
        }
    }
    added.into_iter().collect()
}

/// The checkpoint's booked files in scope of a run from `since` on.
fn seed(ledger: &mut Ledger, c: &Checkpoint, since: Option<&str>) {
    for (p, sha, bytes) in c.added.iter().filter(|(p, _, _)| in_scope(since, p)) {
        ledger.added.insert(p.clone(), (sha_bytes(sha), *bytes));
    }
    for (p, read) in c.removed.iter().filter(|(p, _)| in_scope(since, p)) {
        let read = (!read.is_empty()).then(|| sha_bytes(read));
        ledger.removed.insert(p.clone(), read);
    }
}

impl Problem {
    /// True for a problem of the manifests themselves (not of the files they name): a run
    /// that finds one does not advance a checkpoint past it.
    pub fn is_of_manifests(&self) -> bool {
        !matches!(
            self,
            Problem::Missing(_)
                | Problem::Modified(_)
                | Problem::Extra(_)
                | Problem::RemovedUnrecorded(_)
                | Problem::ModifiedBeforeRemoval(_)
        )
    }
}

/// What scanning one manifest found.
struct Scan {
    /// Entries read.
    entries: usize,
    /// Its last line: (seq, hash).
    head: Option<(u64, String)>,
    /// Where its last line is, to continue from next time.
    mark: Option<Mark>,
}

/// Where a manifest was verified up to: its last line verified, by position and hash.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Mark {
    /// The manifest, `manifest/<instance>.jsonl`.
    pub manifest: String,
    /// The line's number (1-based) and `seq`.
    pub line: usize,
    /// Byte offset where the line starts.
    pub offset: u64,
    /// Hex SHA-256 of the line.
    pub hash: String,
}

/// What `verify --checkpoint` keeps between runs (outside the data directory, like heads):
/// where each manifest was verified up to, and the files in scope its lines booked, so the
/// next run reads only the lines appended since.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Checkpoint {
    /// Partitions of this date (`YYYY-MM-DD`) or later are booked below; a run with an
    /// earlier `--since` cannot use the checkpoint.
    pub since: String,
    /// Per manifest.
    pub marks: Vec<Mark>,
    /// Files added in scope: path, hex SHA-256, size.
    pub added: Vec<(String, String, u64)>,
    /// Files removed in scope: path, hex SHA-256 read by the remover (empty: none).
    pub removed: Vec<(String, String)>,
    /// The public key the lines before the marks were checked with (hex; empty: none): a
    /// run with another key cannot continue from them.
    #[serde(default)]
    pub public_key: String,
}

/// One line of a manifest at a time: a manifest of millions of lines is never held whole.
struct Lines {
    reader: std::io::BufReader<std::fs::File>,
    buf: Vec<u8>,
    /// Bytes read so far: where the next line starts.
    offset: u64,
}

impl Lines {
    fn open(path: &Path) -> std::io::Result<Lines> {
        Ok(Lines {
            reader: std::io::BufReader::with_capacity(1 << 20, std::fs::File::open(path)?),
            buf: Vec::new(),
            offset: 0,
        })
    }

    /// Continues reading at byte `offset`.
    fn seek(&mut self, offset: u64) -> std::io::Result<()> {
        use std::io::Seek;
        self.reader.seek(std::io::SeekFrom::Start(offset))?;
        self.offset = offset;
        Ok(())
    }

    /// The next line without its end (`\n` or `\r\n`); bytes that are not UTF-8 make an
    /// unreadable line, not an unreadable archive.
    fn next_line(&mut self) -> std::io::Result<Option<String>> {
        Ok(self.next_line_ended()?.map(|(line, _)| line))
    }

    /// [`Lines::next_line`], and whether the line ended with its `\n` (the last line of a
    /// manifest being appended to, or torn by a crash, has none yet).
    fn next_line_ended(&mut self) -> std::io::Result<Option<(String, bool)>> {
        use std::io::BufRead;
        self.buf.clear();
        let n = self.reader.read_until(b'\n', &mut self.buf)?;
        if n == 0 {
            return Ok(None);
        }
        self.offset += n as u64;
        let mut end = self.buf.len();
        let ended = self.buf[..end].ends_with(b"\n");
        if ended {
            end -= 1;
            if self.buf[..end].ends_with(b"\r") {
                end -= 1;
            }
        }
        Ok(Some((
            String::from_utf8_lossy(&self.buf[..end]).into_owned(),
            ended,
        )))
    }
}

/// Checks one manifest's chain, streamed, and books its entries in scope.
fn scan_manifest(
    name: &str,
    path: &Path,
    key: Option<&ed25519_dalek::VerifyingKey>,
    in_scope: &dyn Fn(&str) -> bool,
    ledger: &mut Ledger,
    start: Option<&Mark>,
    problems: &mut Vec<Problem>,
) -> std::io::Result<Scan> {
    let mut lines = Lines::open(path)?;
    let mut scan = Scan {
        entries: 0,
        head: None,
        mark: None,
    };
    let mut previous = GENESIS.to_string();
    let mut at = 0usize;
    // From a checkpoint: its line must still be there, unchanged; the chain continues from it.
    if let Some(mark) = start {
        lines.seek(mark.offset)?;
        match lines.next_line()? {
            Some(line) if line_hash(&line) == mark.hash => {
                previous = mark.hash.clone();
                at = mark.line;
                scan.head = Some((mark.line as u64, mark.hash.clone()));
                scan.mark = Some(mark.clone());
            }
            found => {
                let manifest = name.to_string();
                problems.push(match found {
                    None => Problem::Truncated {
                        manifest,
                        line: mark.line as u64,
                    },
                    Some(_) => Problem::HeadDiffers {
                        manifest,
                        line: mark.line as u64,
                    },
                });
                lines.seek(0)?;
            }
        }
    }
    // Lines whose `prev` is not the line before's hash: (line, prev), told apart once the
    // whole manifest's hashes are known (rare: only a changed manifest has any).
    let mut mismatched: Vec<(usize, String)> = Vec::new();
    // The last entry, whose signature is always checked.
    let mut last: Option<(usize, Entry)> = None;
    loop {
        let line_start = lines.offset;
        let Some((line, ended)) = lines.next_line_ended()? else {
            break;
        };
        let parsed = serde_json::from_str::<Entry>(&line);
        // A last line without its line end that is not an entry is one being appended (or
        // torn by a crash mid-append): not written yet, neither a problem nor a mark.
        if !ended && parsed.is_err() {
            break;
        }
        at += 1;
        let hash = line_hash(&line);
        scan.mark = Some(Mark {
            manifest: name.to_string(),
            line: at,
            offset: line_start,
            hash: hash.clone(),
        });
        previous = match parsed {
            Err(_) => {
                problems.push(Problem::Unreadable {
                    manifest: name.to_string(),
                    line: at,
                });
                hash
            }
            Ok(entry) => {
                if entry.prev != previous {
                    mismatched.push((at, entry.prev.clone()));
                } else if entry.seq != at as u64 {
                    problems.push(Problem::Reordered {
                        manifest: name.to_string(),
                        line: at,
                    });
                }
                let scoped = in_scope(&entry.path);
                if let (Some(key), true) = (key, scoped) {
                    check_signature(name, at, &entry, key, problems);
                }
                book(ledger, &entry, scoped);
                scan.entries += 1;
                scan.head = Some((entry.seq, hash.clone()));
                last = Some((at, entry));
                hash
            }
        };
    }
    if let (Some(key), Some((at, entry))) = (key, &last) {
        if !in_scope(&entry.path) {
            check_signature(name, *at, entry, key, problems);
        }
    }
    if !mismatched.is_empty() {
        classify_mismatches(name, path, mismatched, problems)?;
    }
    Ok(scan)
}

/// Books one entry: an add, or a removal with what its remover read (out of scope, only
/// what checking removals needs).
fn book(ledger: &mut Ledger, entry: &Entry, scoped: bool) {
    if ledger.ignore_offloads
        && entry.op == Op::Remove
        && entry.reason == super::Reason::Offloaded.as_str()
    {
        return;
    }
    let read = || (!entry.sha256.is_empty()).then(|| sha_bytes(&entry.sha256));
    match (entry.op, scoped) {
        (Op::Add, true) => {
            ledger
                .added
                .insert(entry.path.clone(), (sha_bytes(&entry.sha256), entry.bytes));
        }
        (Op::Remove, true) => {
            ledger.removed.insert(entry.path.clone(), read());
        }
        (Op::Add, false) => {
            let key = path_key(&entry.path);
            ledger.old_added.insert(key, sha_bytes(&entry.sha256));
            ledger.old_order.push_back(key);
            if ledger.old_order.len() > OLD_ADDS_KEPT {
                if let Some(oldest) = ledger.old_order.pop_front() {
                    ledger.old_added.remove(&oldest);
                    ledger.old_dropped = true;
                }
            }
        }
        // Checked against the adds kept; beyond as many removals, the rest go unchecked.
        (Op::Remove, false) if ledger.old_removed.len() < OLD_ADDS_KEPT => {
            ledger.old_removed.push((entry.path.clone(), read()))
        }
        (Op::Remove, false) => ledger.old_dropped = true,
    }
}

fn check_signature(
    name: &str,
    at: usize,
    entry: &Entry,
    key: &ed25519_dalek::VerifyingKey,
    problems: &mut Vec<Problem>,
) {
    let manifest = name.to_string();
    match signature_holds(entry, key) {
        None => problems.push(Problem::Unsigned { manifest, line: at }),
        Some(false) => problems.push(Problem::BadSignature { manifest, line: at }),
        Some(true) => {}
    }
}

/// Tells a line moved (its `prev` names another line of the manifest, or the start) from a
/// chain broken (its `prev` names no line: the line before it was changed or removed).
fn classify_mismatches(
    name: &str,
    path: &Path,
    mismatched: Vec<(usize, String)>,
    problems: &mut Vec<Problem>,
) -> std::io::Result<()> {
    // Which of the few `prev`s named are some line's hash: one more streamed pass.
    let mut wanted: std::collections::HashSet<&str> =
        mismatched.iter().map(|(_, p)| p.as_str()).collect();
    let mut known = std::collections::HashSet::new();
    let mut lines = Lines::open(path)?;
    while let Some(line) = lines.next_line()? {
        if wanted.is_empty() {
            break;
        }
        let h = line_hash(&line);
        if wanted.remove(h.as_str()) {
            known.insert(h);
        }
    }
    for (at, prev) in mismatched {
        let manifest = name.to_string();
        problems.push(if prev == GENESIS || known.contains(&prev) {
            Problem::Reordered { manifest, line: at }
        } else {
            Problem::ChainBroken { manifest, line: at }
        });
    }
    Ok(())
}

/// Records files no manifest knows (`extra`: an archive written before manifests existed, or
/// a crash between a file's publication and its line) as added, reason `adopted`, in
/// `manifest`; returns how many. A file that went meanwhile is skipped. An explicit operator
/// step: whatever the files hold from then on is what `verify` expects.
pub fn adopt(
    data_dir: &Path,
    paths: &[String],
    manifest: &super::Manifest,
) -> std::io::Result<usize> {
    use super::NewEntry;
    let mut entries = Vec::new();
    for p in paths {
        let file = data_dir.join(p);
        let Ok(bytes) = std::fs::read(&file).map(bytes::Bytes::from) else {
            continue;
        };
        let sha256 = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&bytes));
        let rows = parquet::file::reader::SerializedFileReader::new(bytes.clone())
            .map(|r| {
                use parquet::file::reader::FileReader;
                u64::try_from(r.metadata().file_metadata().num_rows()).unwrap_or(0)
            })
            .unwrap_or(0);
        entries.push(NewEntry {
            op: Op::Add,
            path: file,
            table: p.split('/').next().unwrap_or_default().to_string(),
            rows,
            bytes: bytes.len() as u64,
            sha256,
            records: None,
            reason: super::Reason::Adopted,
        });
    }
    manifest.append(&entries)?;
    Ok(entries.len())
}

/// Checks heads kept from an earlier `verify --print-heads` (its `head <manifest> <seq>
/// <hash>` lines; other lines are ignored): each manifest must still be there, at least that
/// long, with that line unchanged. What the chain alone cannot show: a tail cut off, or a
/// whole manifest deleted, together with the files they named.
pub fn check_heads(data_dir: &Path, kept: &str) -> std::io::Result<Vec<Problem>> {
    let mut problems = Vec::new();
    for line in kept.lines() {
        let parts: Vec<&str> = line.split_whitespace().collect();
        let ["head", manifest, seq, hash] = parts.as_slice() else {
            continue;
        };
        let Ok(seq) = seq.parse::<u64>() else {
            continue;
        };
        let manifest = manifest.to_string();
        let path = data_dir.join(&manifest);
        let mut lines = match Lines::open(&path) {
            Ok(l) => l,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                problems.push(Problem::ManifestMissing(manifest));
                continue;
            }
            Err(e) => return Err(e),
        };
        let mut line = None;
        for _ in 0..seq {
            line = lines.next_line()?;
            if line.is_none() {
                break;
            }
        }
        match line {
            _ if seq == 0 => {}
            None => problems.push(Problem::Truncated {
                manifest,
                line: seq,
            }),
            Some(l) if line_hash(&l) != *hash => problems.push(Problem::HeadDiffers {
                manifest,
                line: seq,
            }),
            Some(_) => {}
        }
    }
    Ok(problems)
}

/// Whether `key` verifies the entry's signature (none: it has none).
fn signature_holds(entry: &Entry, key: &ed25519_dalek::VerifyingKey) -> Option<bool> {
    let sig = entry.sig.as_deref()?;
    let Some(sig) = hex::decode(sig)
        .ok()
        .and_then(|b| <[u8; 64]>::try_from(b).ok())
    else {
        return Some(false);
    };
    let Ok(text) = entry.signed_text() else {
        return Some(false);
    };
    let sig = ed25519_dalek::Signature::from_bytes(&sig);
    Some(key.verify_strict(text.as_bytes(), &sig).is_ok())
}

/// A public key as 64 hex digits.
pub fn parse_public_key(text: &str) -> Result<ed25519_dalek::VerifyingKey, String> {
    let bytes = hex::decode(text.trim())
        .ok()
        .and_then(|b| <[u8; 32]>::try_from(b).ok())
        .ok_or("expected 64 hex digits (an Ed25519 public key)")?;
    ed25519_dalek::VerifyingKey::from_bytes(&bytes).map_err(|e| format!("not a public key: {e}"))
}

/// Every completed archive file, relative to the data directory, `/`-separated (temporary
/// and compaction work files are not archive files).
fn archive_files(data_dir: &Path) -> std::io::Result<Vec<String>> {
    let mut out = Vec::new();
    for table in Table::ALL {
        walk(data_dir, &data_dir.join(table.as_str()), &mut out)?;
    }
    Ok(out)
}

fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) -> std::io::Result<()> {
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for e in rd {
        let e = e?;
        let path = e.path();
        let name = e.file_name().to_string_lossy().to_string();
        // Hidden names count (readers' globs take them); only the writers' temporary files
        // and compaction's work area are not archive files.
        if name.ends_with(IN_PROGRESS_SUFFIX) || name == ".compact" {
            continue;
        }
        // Followed like readers follow them: a linked folder's files count.
        if std::fs::metadata(&path)
            .map(|m| m.is_dir())
            .unwrap_or(false)
        {
            walk(root, &path, out)?;
        } else if name.ends_with(".parquet") {
            out.push(super::relative_path(root, &path));
        }
    }
    Ok(())
}
