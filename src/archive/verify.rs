//! `toolwatch verify`: the archive against its manifests.
//!
//! Every manifest's chain is checked line by line (each line names the hash of the one
//! before), then the files the manifests say should be there (added and not removed) are
//! compared with the files that are: each missing, modified (SHA-256 differs) or extra file is
//! named. `--since` limits the file comparison to partitions of that date or later (chains are
//! always checked whole: they are small).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::manifest::{file_sha256, line_hash, Entry, Op, DIR, GENESIS};
use super::partition::Table;

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

/// Verifies the archive under `data_dir`; `since` (`YYYY-MM-DD`) limits the file comparison;
/// with `key`, every entry must carry a signature it verifies.
pub fn verify(
    data_dir: &Path,
    since: Option<&str>,
    key: Option<&ed25519_dalek::VerifyingKey>,
) -> std::io::Result<Report> {
    let mut report = Report::default();
    let mut expected: BTreeMap<String, (String, u64)> = BTreeMap::new();
    // Removals, with the hash the remover read (empty: retention, which does not read).
    let mut removed: BTreeMap<String, String> = BTreeMap::new();
    let mut ever_added: BTreeMap<String, String> = BTreeMap::new();
    // Readers' lock, shared: a compaction's swap and its manifest lines are seen together.
    let _readers = super::lock::ReadersLock::shared(data_dir);
    let mut manifests: Vec<PathBuf> = match std::fs::read_dir(data_dir.join(DIR)) {
        Ok(rd) => rd
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(e),
    };
    manifests.sort();
    for path in manifests {
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
        // Bytes that are not UTF-8 make an unreadable line, not an unreadable archive.
        let text = String::from_utf8_lossy(&std::fs::read(&path)?).into_owned();
        report.manifests += 1;
        let entries = check_chain(&name, &text, key, &mut report.problems);
        if let Some(last) = text.lines().last() {
            let seq = entries.last().map_or(0, |e| e.seq);
            report.heads.push((name.clone(), seq, line_hash(last)));
        }
        report.entries += entries.len();
        for e in entries {
            match e.op {
                Op::Add => {
                    ever_added.insert(e.path.clone(), e.sha256.clone());
                    expected.insert(e.path, (e.sha256, e.bytes));
                }
                Op::Remove => {
                    removed.insert(e.path, e.sha256);
                }
            }
        }
    }
    for (r, read) in &removed {
        expected.remove(r);
        match ever_added.get(r) {
            None => report.problems.push(Problem::RemovedUnrecorded(r.clone())),
            Some(sha) if !read.is_empty() && read != sha => report
                .problems
                .push(Problem::ModifiedBeforeRemoval(r.clone())),
            Some(_) => {}
        }
    }
    let in_scope = |p: &str| {
        since.is_none_or(|d| {
            p.split('/')
                .find_map(|c| c.strip_prefix("date="))
                .is_none_or(|date| date >= d)
        })
    };
    let present: BTreeSet<String> = archive_files(data_dir)?
        .into_iter()
        .filter(|p| in_scope(p))
        .collect();
    for (p, (sha, bytes)) in expected.iter().filter(|(p, _)| in_scope(p)) {
        if !present.contains(p) {
            report.problems.push(Problem::Missing(p.clone()));
            continue;
        }
        report.files += 1;
        let file = data_dir.join(p);
        let same_size = std::fs::metadata(&file).map(|m| m.len()).ok() == Some(*bytes);
        if !same_size || file_sha256(&file)? != *sha {
            report.problems.push(Problem::Modified(p.clone()));
        }
    }
    for p in present.iter().filter(|p| !expected.contains_key(*p)) {
        report.problems.push(Problem::Extra(p.clone()));
    }
    Ok(report)
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
        let text = match std::fs::read(&path) {
            Ok(b) => String::from_utf8_lossy(&b).into_owned(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                problems.push(Problem::ManifestMissing(manifest));
                continue;
            }
            Err(e) => return Err(e),
        };
        let at = usize::try_from(seq).unwrap_or(usize::MAX);
        match text.lines().nth(at.saturating_sub(1)) {
            _ if seq == 0 => {}
            None => problems.push(Problem::Truncated {
                manifest,
                line: seq,
            }),
            Some(l) if line_hash(l) != *hash => problems.push(Problem::HeadDiffers {
                manifest,
                line: seq,
            }),
            Some(_) => {}
        }
    }
    Ok(problems)
}

/// The entries of one manifest, with the problems of its chain.
fn check_chain(
    name: &str,
    text: &str,
    key: Option<&ed25519_dalek::VerifyingKey>,
    problems: &mut Vec<Problem>,
) -> Vec<Entry> {
    let lines: Vec<&str> = text.lines().collect();
    let hashes: Vec<String> = lines.iter().map(|l| line_hash(l)).collect();
    let known: std::collections::HashSet<&str> = hashes.iter().map(String::as_str).collect();
    let mut entries = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let at = i + 1;
        let Ok(entry) = serde_json::from_str::<Entry>(line) else {
            problems.push(Problem::Unreadable {
                manifest: name.to_string(),
                line: at,
            });
            continue;
        };
        let want = if i == 0 { GENESIS } else { &hashes[i - 1] };
        if entry.prev != want {
            let elsewhere = entry.prev == GENESIS || known.contains(entry.prev.as_str());
            problems.push(if elsewhere {
                Problem::Reordered {
                    manifest: name.to_string(),
                    line: at,
                }
            } else {
                Problem::ChainBroken {
                    manifest: name.to_string(),
                    line: at,
                }
            });
        } else if entry.seq != at as u64 {
            problems.push(Problem::Reordered {
                manifest: name.to_string(),
                line: at,
            });
        }
        if let Some(key) = key {
            let manifest = name.to_string();
            match signature_holds(&entry, key) {
                None => problems.push(Problem::Unsigned { manifest, line: at }),
                Some(false) => problems.push(Problem::BadSignature { manifest, line: at }),
                Some(true) => {}
            }
        }
        entries.push(entry);
    }
    entries
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
        if name.ends_with(super::partition::IN_PROGRESS_SUFFIX) || name == ".compact" {
            continue;
        }
        // Followed like readers follow them: a linked folder's files count.
        if std::fs::metadata(&path)
            .map(|m| m.is_dir())
            .unwrap_or(false)
        {
            walk(root, &path, out)?;
        } else if name.ends_with(".parquet") {
            let rel = path.strip_prefix(root).unwrap_or(&path);
            out.push(
                rel.components()
                    .map(|c| c.as_os_str().to_string_lossy())
                    .collect::<Vec<_>>()
                    .join("/"),
            );
        }
    }
    Ok(())
}
