//! The manifest: an append-only, hash-chained record of every archive file that became
//! visible or went away, one per writer instance, so `toolwatch verify` can tell an archive
//! as written from one edited since.
//!
//! `manifest/<instance>.jsonl` under the data directory, one JSON object per line
//! ([`Entry`]). Each line names the SHA-256 of the line before it (`prev`; the first names
//! [`GENESIS`]), so an edited, removed or reordered line breaks the chain at that point
//! (unless whoever edits it recomputes the chain after it: signed entries, or heads kept
//! elsewhere, are what stop that). A
//! file's entry is appended (and fsynced) after the file is published: a crash between the
//! two leaves a file without an entry, which `verify` reports as `extra`. What the chain
//! cannot show is its own tail cut off together with the files it named: `verify
//! --print-heads` prints each manifest's last line hash, to keep elsewhere and compare.
//!
//! `toolwatch verify` holds the archive against its manifests ([`verify`]).

pub mod verify;

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::archive::layout::lock;

/// The manifests' folder in the data directory.
pub const DIR: &str = "manifest";

/// The `prev` of a manifest's first line.
pub const GENESIS: &str = "genesis";

/// What an entry records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    /// A file became visible.
    Add,
    /// A file went away (merged by compaction).
    Remove,
}

/// One line of a manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    /// 1, 2, … within the manifest.
    pub seq: u64,
    /// When it was written, ns since the epoch.
    pub time_ns: i64,
    /// Added or removed.
    pub op: Op,
    /// The file, relative to the data directory, `/`-separated.
    pub path: String,
    /// Its table.
    pub table: String,
    /// Rows in it.
    pub rows: u64,
    /// Its size.
    pub bytes: u64,
    /// Hex SHA-256 of its bytes.
    pub sha256: String,
    /// The journal records its rows came from (first, last), when it was written from them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub records: Option<(u64, u64)>,
    /// Why: `flush` (written by a writer) or `compaction`.
    pub reason: String,
    /// Hex SHA-256 of the previous line's text, or [`GENESIS`].
    pub prev: String,
    /// Hex Ed25519 signature of the line as written without this field, when the writer
    /// has a signing key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sig: Option<String>,
}

impl Entry {
    /// The text a signature covers: the entry as a line, without its signature.
    pub fn signed_text(&self) -> serde_json::Result<String> {
        let unsigned = Entry {
            sig: None,
            ..self.clone()
        };
        serde_json::to_string(&unsigned)
    }
}

/// The key that signs a manifest's entries: 32 bytes (the Ed25519 seed) as 64 hex digits in a
/// file, created (mode 0600, written whole under a temporary name, then renamed) when absent.
pub fn load_or_create_signing_key(path: &Path) -> std::io::Result<ed25519_dalek::SigningKey> {
    match load_signing_key(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let seed: [u8; 32] = rand::random();
            let temp = path.with_extension("new");
            let mut opts = OpenOptions::new();
            opts.write(true).create(true).truncate(true);
            #[cfg(unix)]
            std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
            let mut f = opts.open(&temp)?;
            f.write_all(hex::encode(seed).as_bytes())?;
            f.sync_all()?;
            std::fs::rename(&temp, path)?;
            if let Some(dir) = path.parent() {
                crate::durable::sync_dir(dir)?;
            }
            Ok(ed25519_dalek::SigningKey::from_bytes(&seed))
        }
        other => other,
    }
}

/// The signing key in `path` (an error if there is none).
pub fn load_signing_key(path: &Path) -> std::io::Result<ed25519_dalek::SigningKey> {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let bytes = hex::decode(text.trim())
                .ok()
                .and_then(|b| <[u8; 32]>::try_from(b).ok())
                .ok_or_else(|| {
                    std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!("{}: not 64 hex digits (an Ed25519 seed)", path.display()),
                    )
                })?;
            Ok(ed25519_dalek::SigningKey::from_bytes(&bytes))
        }
        Err(e) => Err(e),
    }
}

/// Why a file was added or removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Reason {
    /// A writer completed it.
    Flush,
    /// Compaction merged files into it, or merged it away.
    Compaction,
    /// Scrub rewrote it.
    Scrub,
    /// Retention deleted it.
    Retention,
    /// `verify --adopt-unrecorded` took it in.
    Adopted,
    /// Its local copy was deleted after it was uploaded (`storage.local_keep`): it is still
    /// in the object store.
    Offloaded,
}

impl Reason {
    /// As written in an entry's `reason`.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Flush => "flush",
            Reason::Compaction => "compaction",
            Reason::Scrub => "scrub",
            Reason::Retention => "retention",
            Reason::Adopted => "adopted",
            Reason::Offloaded => "offloaded",
        }
    }
}

/// An entry before the manifest numbers and chains it (also what a rewrite keeps pending
/// until its swap is recorded).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NewEntry {
    /// Added or removed.
    pub op: Op,
    /// The file (absolute, or relative to the data directory).
    pub path: PathBuf,
    /// Its table.
    pub table: String,
    /// Rows.
    pub rows: u64,
    /// Size.
    pub bytes: u64,
    /// Hex SHA-256 of its bytes.
    pub sha256: String,
    /// Journal records covered.
    #[serde(default)]
    pub records: Option<(u64, u64)>,
    /// Why.
    pub reason: Reason,
}

/// The seq and hash of the last line of whole manifest lines `bytes`; None when there is no
/// line, an error when the last one is not an entry.
fn last_entry(bytes: &[u8]) -> Option<Result<(u64, String), ()>> {
    let body = bytes.strip_suffix(b"\n")?;
    let line = body.rsplit(|&b| b == b'\n').next()?;
    let entry = std::str::from_utf8(line)
        .ok()
        .and_then(|l| Some((serde_json::from_str::<Entry>(l).ok()?, l)));
    Some(entry.map(|(e, l)| (e.seq, line_hash(l))).ok_or(()))
}

/// Hex SHA-256 of a line's text: the next line's `prev`.
pub fn line_hash(line: &str) -> String {
    hex::encode(Sha256::digest(line.as_bytes()))
}

struct State {
    signer: Option<ed25519_dalek::SigningKey>,
    file: File,
    seq: u64,
    last: String,
}

/// One instance's manifest, open for appending; shared by the writers of one process.
pub struct Manifest {
    data_dir: PathBuf,
    path: PathBuf,
    state: Mutex<State>,
}

/// The manifests open in this process, so every writer of an instance appends to one chain.
static OPEN: Mutex<Vec<(PathBuf, Weak<Manifest>)>> = Mutex::new(Vec::new());

impl Manifest {
    /// The manifest of `instance_id` under `data_dir`, opened once per process (created if
    /// absent, continued after its last line if present); its entries are signed with the
    /// key in `signing_key_file` unless that is empty.
    pub fn shared(
        data_dir: &Path,
        instance_id: &str,
        signing_key_file: &Path,
    ) -> std::io::Result<Arc<Manifest>> {
        let path = data_dir.join(DIR).join(format!("{instance_id}.jsonl"));
        let mut open = OPEN.lock().unwrap_or_else(PoisonError::into_inner);
        open.retain(|(_, w)| w.strong_count() > 0);
        if let Some(m) = open
            .iter()
            .find(|(p, _)| *p == path)
            .and_then(|(_, w)| w.upgrade())
        {
            return Ok(m);
        }
        std::fs::create_dir_all(data_dir.join(DIR))?;
        // Only the daemon creates a key (at its start): a command given a wrong path must
        // fail rather than sign with a key nobody knows.
        let signer = if signing_key_file.as_os_str().is_empty() {
            None
        } else {
            Some(load_signing_key(signing_key_file)?)
        };
        let file = OpenOptions::new().create(true).append(true).open(&path)?;
        // A manifest reopened (the upload command's offload manifest) may end in a line a
        // crash tore: it was never whole, so never uploaded or chained to; it goes, or the
        // next line would be glued to it.
        lock::flock(&file, libc::LOCK_EX)?;
        // Bytes, not text: a torn tail may end inside a character.
        let bytes = std::fs::read(&path)?;
        let whole = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        if whole < bytes.len() {
            file.set_len(whole as u64)?;
            file.sync_data()?;
        }
        let _ = lock::flock(&file, libc::LOCK_UN);
        let (seq, last) = match last_entry(&bytes[..whole]) {
            Some(Ok((seq, hash))) => (seq, hash),
            None => (0, GENESIS.to_string()),
            // Chaining to a line that is not an entry would hide it: refused, with its name.
            Some(Err(())) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!(
                        "{}: its last line is not a manifest entry (`toolwatch verify` names it); no entry is added after it",
                        path.display()
                    ),
                ))
            }
        };
        if seq == 0 {
            // A new manifest's name must survive a crash with its first lines.
            crate::durable::sync_dir(&data_dir.join(DIR))?;
        }
        let m = Arc::new(Manifest {
            data_dir: data_dir.to_path_buf(),
            path: path.clone(),
            state: Mutex::new(State {
                signer,
                file,
                seq,
                last,
            }),
        });
        open.push((path, Arc::downgrade(&m)));
        Ok(m)
    }

    /// Its file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends entries, chained, in one write, and makes them durable.
    pub fn append(&self, items: &[NewEntry]) -> std::io::Result<()> {
        if items.is_empty() {
            return Ok(());
        }
        let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let mut text = String::new();
        let (mut seq, mut last) = (s.seq, s.last.clone());
        for item in items {
            seq += 1;
            let entry = Entry {
                seq,
                time_ns: crate::clock::now_ns(),
                op: item.op,
                path: relative_path(&self.data_dir, &item.path),
                table: item.table.clone(),
                rows: item.rows,
                bytes: item.bytes,
                sha256: item.sha256.clone(),
                records: item.records,
                reason: item.reason.as_str().to_string(),
                prev: last,
                sig: None,
            };
            let mut line = serde_json::to_string(&entry).map_err(std::io::Error::other)?;
            if let Some(key) = &s.signer {
                use ed25519_dalek::Signer;
                let sig = key.sign(line.as_bytes());
                let signed = Entry {
                    sig: Some(hex::encode(sig.to_bytes())),
                    ..entry
                };
                line = serde_json::to_string(&signed).map_err(std::io::Error::other)?;
            }
            last = line_hash(&line);
            text.push_str(&line);
            text.push('\n');
        }
        // A failed write is taken back whole, so the next append chains from the last line
        // that is there (a torn line would make every later line look tampered with). The
        // file's lock, held from the write to the sync (or the taking back), keeps the
        // uploader (which reads it shared) from seeing half an append, or lines not durable.
        lock::flock(&s.file, libc::LOCK_EX)?;
        let len = s.file.metadata()?.len();
        let written = s
            .file
            .write_all(text.as_bytes())
            .and_then(|()| s.file.sync_data());
        if let Err(e) = written {
            let _ = s.file.set_len(len);
            let _ = lock::flock(&s.file, libc::LOCK_UN);
            return Err(e);
        }
        s.seq = seq;
        s.last = last;
        // Released when the handle closes anyway; the lines are written and counted.
        let _ = lock::flock(&s.file, libc::LOCK_UN);
        Ok(())
    }
}

/// `path` relative to `root` (itself if it is not under `root`), `/`-separated: how
/// manifests and `verify` name archive files.
pub fn relative_path(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .unwrap_or(path)
        .components()
        .map(|c| c.as_os_str().to_string_lossy())
        .collect::<Vec<_>>()
        .join("/")
}

/// The manifests under `data_dir`, by name (none when there is no manifest folder).
pub fn list(data_dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut out: Vec<PathBuf> = match std::fs::read_dir(data_dir.join(DIR)) {
        Ok(rd) => rd
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(e),
    };
    out.sort();
    Ok(out)
}

/// True when some manifest under `data_dir` ends in a signed line: a command that appends
/// entries unsigned there would make `verify --public-key` report them.
pub fn archive_is_signed(data_dir: &Path) -> bool {
    list(data_dir).unwrap_or_default().iter().any(|m| {
        std::fs::read_to_string(m)
            .ok()
            .and_then(|t| t.lines().last().map(|l| l.contains("\"sig\":")))
            .unwrap_or(false)
    })
}

/// Hex SHA-256 of a file's bytes.
pub fn file_sha256(path: &Path) -> std::io::Result<String> {
    let mut f = File::open(path)?;
    let mut h = Sha256::new();
    std::io::copy(&mut f, &mut h)?;
    Ok(hex::encode(h.finalize()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str) -> NewEntry {
        NewEntry {
            op: Op::Add,
            path: PathBuf::from(format!("spans/{name}.parquet")),
            table: "spans".into(),
            rows: 1,
            bytes: 1,
            sha256: "00".repeat(32),
            records: None,
            reason: Reason::Flush,
        }
    }

    fn reopen(root: &Path, instance: &str) -> std::io::Result<Arc<Manifest>> {
        Manifest::shared(root, instance, Path::new(""))
    }

    #[test]
    fn a_torn_tail_ending_inside_a_character_is_cut_and_the_chain_goes_on() {
        let root = tempfile::tempdir().unwrap();
        let path = {
            let m = reopen(root.path(), "t1").unwrap();
            m.append(&[entry("a"), entry("b")]).unwrap();
            m.path().to_path_buf()
        };
        let whole = std::fs::read(&path).unwrap();
        let last = whole[..whole.len() - 1]
            .rsplit(|&b| b == b'\n')
            .next()
            .unwrap()
            .to_vec();
        // Half of a two-byte character: not UTF-8.
        let mut torn = whole.clone();
        torn.extend_from_slice(b"{\"seq\":3,\"path\":\"\xc3");
        std::fs::write(&path, &torn).unwrap();
        let m = reopen(root.path(), "t1").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), whole);
        m.append(&[entry("c")]).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let third: Entry = serde_json::from_str(text.lines().nth(2).unwrap()).unwrap();
        assert_eq!(third.seq, 3);
        assert_eq!(third.prev, line_hash(std::str::from_utf8(&last).unwrap()));
    }

    #[test]
    fn a_last_line_that_is_not_an_entry_is_refused_with_the_manifests_name() {
        let root = tempfile::tempdir().unwrap();
        let path = {
            let m = reopen(root.path(), "t2").unwrap();
            m.append(&[entry("a")]).unwrap();
            m.path().to_path_buf()
        };
        let mut bytes = std::fs::read(&path).unwrap();
        bytes.extend_from_slice(b"not an entry\n");
        std::fs::write(&path, &bytes).unwrap();
        let e = reopen(root.path(), "t2").err().unwrap();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
        assert!(e.to_string().contains("t2.jsonl"), "{e}");
        assert_eq!(std::fs::read(&path).unwrap(), bytes, "nothing appended");
    }
}
