//! Offloading: with `storage.local_keep`, the local copies of uploaded files whose partition
//! hour ended longer ago than that are deleted, so the data directory holds recent hours and
//! the object store holds everything.
//!
//! A file is offloaded only once its object is in the store with the file's size (uploaded
//! whole). Under the partition's lock it is first listed in the partition's marker,
//! `.offloaded.jsonl` (path, size, SHA-256; a hidden file no reader takes for data), then its
//! removal is recorded in a manifest (`remove`, reason `offloaded`, with the SHA-256 read),
//! then it is deleted. Readers of the store ignore `offloaded` removals (the object is still
//! live there), local `verify` counts them as removals by policy, and the uploader never
//! deletes an object for one. Retention deletes a partition's offloaded files through its
//! marker like its local ones (their objects go from the store too), and `scrub` brings them
//! back for the time it reads them ([`recall`], then [`settle_recalled`]).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use object_store::ObjectStoreExt;
use serde::{Deserialize, Serialize};

use super::lock::{PartitionDir, PartitionLock};
use super::manifest::{file_sha256, relative_path, Manifest, NewEntry, Op, Reason};
use super::partition::Table;
use super::remote::{RemoteArchive, RemoteError};
use super::retention::{expired, RetentionConfig};
use super::ArchiveError;

/// A partition's list of files whose only copy is in the object store.
pub const MARKER: &str = ".offloaded.jsonl";

/// One offloaded file, as its partition's marker lists it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct OffloadedFile {
    /// Relative to the archive's root, `/`-separated.
    pub path: String,
    /// Its size.
    pub bytes: u64,
    /// Hex SHA-256 of its bytes.
    pub sha256: String,
}

/// Why offloading or recalling stopped.
#[derive(Debug, thiserror::Error)]
pub enum OffloadError {
    /// A local file, lock or manifest failed.
    #[error(transparent)]
    Archive(#[from] ArchiveError),
    /// The object store failed.
    #[error(transparent)]
    Remote(#[from] RemoteError),
    /// A recalled object's bytes are not those recorded when it was offloaded.
    #[error(
        "{path}: the object in the store is not the file offloaded (SHA-256 differs); not recalled"
    )]
    Differs {
        /// The file.
        path: String,
    },
    /// A partition in scope has offloaded files and no object store was given.
    #[error("{dir}: files of this partition are only in object storage; give the configuration with storage.url (--config)")]
    NoStore {
        /// The partition folder.
        dir: PathBuf,
    },
}

fn io(path: &Path, e: std::io::Error) -> ArchiveError {
    ArchiveError::io(path, e)
}

/// The files partition folder `dir`'s marker lists (none without a marker).
pub fn read_marker(dir: &Path) -> Result<Vec<OffloadedFile>, ArchiveError> {
    let path = dir.join(MARKER);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io(&path, e)),
    };
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            serde_json::from_str(l).map_err(|e| {
                io(
                    &path,
                    std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()),
                )
            })
        })
        .collect()
}

/// Replaces `dir`'s marker with `files` (removes it when there are none), durably.
pub fn write_marker(dir: &Path, files: &[OffloadedFile]) -> Result<(), ArchiveError> {
    let path = dir.join(MARKER);
    if files.is_empty() {
        return match std::fs::remove_file(&path) {
            Ok(()) => crate::durable::sync_dir(dir).map_err(|e| io(dir, e)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io(&path, e)),
        };
    }
    let mut text = String::new();
    for f in files {
        let line = serde_json::to_string(f).map_err(|e| io(&path, std::io::Error::other(e)))?;
        text.push_str(&line);
        text.push('\n');
    }
    crate::durable::replace_file(&path, text.as_bytes()).map_err(|e| io(&path, e))
}

/// What one offload pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Offloaded {
    /// Files whose local copy was deleted.
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Files kept because their object is not (yet) in the store whole.
    pub not_uploaded: u64,
}

/// Offloads the files of partitions whose hour ended longer than `keep` ago at `now`,
/// recording each in the manifest `manifest` opens (only once there is something to record).
/// Skips a partition another process holds (the next pass
/// takes it) and does nothing while a scrub runs (it may have recalled files).
pub async fn offload(
    data_dir: &Path,
    remote: &RemoteArchive,
    keep: Duration,
    manifest: &dyn Fn() -> std::io::Result<Arc<Manifest>>,
    now: SystemTime,
) -> Result<Offloaded, OffloadError> {
    let mut done = Offloaded::default();
    let Some(_scrub) = super::lock::ScrubLock::try_acquire(data_dir)? else {
        return Ok(done);
    };
    let every_table = Some(crate::units::HumanDuration(keep));
    let policy = RetentionConfig {
        spans: every_table,
        logs: every_table,
        requests: every_table,
        alarms: every_table,
        findings: every_table,
        tenants: Default::default(),
    };
    for part in expired(data_dir, &policy, &Table::ALL, now)? {
        let Some(_lock) = PartitionLock::acquire(data_dir, &part.part, false)? else {
            continue;
        };
        let dir = part.part.dir(data_dir);
        let mut marker = read_marker(&dir)?;
        let listed: BTreeSet<String> = marker.iter().map(|f| f.path.clone()).collect();
        let mut going = Vec::new();
        for (path, size) in &part.files {
            let rel = relative_path(data_dir, path);
            // Already offloaded: a copy a scrub recalled and did not remove (it crashed).
            if listed.contains(&rel) {
                std::fs::remove_file(path).map_err(|e| io(path, e))?;
                continue;
            }
            let key = remote.file_key(&rel)?;
            let uploaded = match remote.store().head(&key).await {
                Ok(meta) => meta.size == *size,
                Err(object_store::Error::NotFound { .. }) => false,
                Err(e) => {
                    return Err(RemoteError::Store {
                        operation: "head",
                        key: key.to_string(),
                        source: e,
                    }
                    .into())
                }
            };
            if !uploaded {
                done.not_uploaded += 1;
                continue;
            }
            let sha256 = file_sha256(path).map_err(|e| io(path, e))?;
            going.push((
                path.clone(),
                OffloadedFile {
                    path: rel,
                    bytes: *size,
                    sha256,
                },
            ));
        }
        if going.is_empty() {
            continue;
        }
        // Listed first: a crash after this leaves files the next pass deletes, never a
        // deletion with no record of where the file went.
        marker.extend(going.iter().map(|(_, f)| f.clone()));
        marker.sort();
        write_marker(&dir, &marker)?;
        let entries: Vec<NewEntry> = going
            .iter()
            .map(|(path, f)| NewEntry {
                op: Op::Remove,
                path: path.clone(),
                table: part.part.table.as_str().to_string(),
                rows: 0,
                bytes: f.bytes,
                sha256: f.sha256.clone(),
                records: None,
                reason: Reason::Offloaded,
            })
            .collect();
        let manifest = manifest().map_err(|e| io(&data_dir.join(super::manifest::DIR), e))?;
        manifest
            .append(&entries)
            .map_err(|e| io(manifest.path(), e))?;
        for (path, f) in &going {
            std::fs::remove_file(path).map_err(|e| io(path, e))?;
            done.files += 1;
            done.bytes += f.bytes;
        }
        crate::durable::sync_dir(&dir).map_err(|e| io(&dir, e))?;
    }
    Ok(done)
}

/// Brings back the offloaded files of `parts` (into their partition folders, each checked
/// against the SHA-256 recorded when it was offloaded), for a scrub to read; they stay listed
/// as offloaded. Adds the files brought back to `out` (those before a failure too); call
/// [`settle_recalled`] with them after, whether this failed or not.
pub fn recall(
    data_dir: &Path,
    remote: Option<&RemoteArchive>,
    parts: &[PartitionDir],
    out: &mut Vec<(PartitionDir, OffloadedFile)>,
) -> Result<(), OffloadError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| io(data_dir, e))?;
    for part in parts {
        let dir = part.dir(data_dir);
        let marker = read_marker(&dir)?;
        if marker.is_empty() {
            continue;
        }
        let Some(remote) = remote else {
            return Err(OffloadError::NoStore { dir });
        };
        let _lock = PartitionLock::acquire(data_dir, part, true)?;
        for f in marker {
            let local = data_dir.join(&f.path);
            let key = remote.file_key(&f.path)?;
            let store = Arc::clone(remote.store());
            let bytes = runtime
                .block_on(async move { store.get(&key).await?.bytes().await })
                .map_err(|e| RemoteError::Store {
                    operation: "get",
                    key: f.path.clone(),
                    source: e,
                })?;
            use sha2::Digest;
            if hex::encode(sha2::Sha256::digest(&bytes)) != f.sha256 {
                return Err(OffloadError::Differs { path: f.path });
            }
            let temp = crate::durable::temporary_of(&local);
            std::fs::write(&temp, &bytes).map_err(|e| io(&temp, e))?;
            std::fs::rename(&temp, &local).map_err(|e| io(&local, e))?;
            out.push((part.clone(), f));
        }
        crate::durable::sync_dir(&dir).map_err(|e| io(&dir, e))?;
    }
    Ok(())
}

/// After a scrub: a recalled file still there was left as it was (its object is still the
/// live one), so it goes again; one no longer there was replaced (its removal is recorded and
/// its object goes from the store), so its marker line goes.
pub fn settle_recalled(
    data_dir: &Path,
    recalled: &[(PartitionDir, OffloadedFile)],
) -> Result<(), OffloadError> {
    let mut parts: Vec<&PartitionDir> = recalled.iter().map(|(p, _)| p).collect();
    parts.dedup_by(|a, b| a.dir(data_dir) == b.dir(data_dir));
    for part in parts {
        let _lock = PartitionLock::acquire(data_dir, part, true)?;
        let dir = part.dir(data_dir);
        let mut marker = read_marker(&dir)?;
        let mut replaced = BTreeSet::new();
        for (_, f) in recalled.iter().filter(|(p, _)| p.dir(data_dir) == dir) {
            let local = data_dir.join(&f.path);
            match std::fs::remove_file(&local) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    replaced.insert(f.path.clone());
                }
                Err(e) => return Err(io(&local, e).into()),
            }
        }
        marker.retain(|f| !replaced.contains(&f.path));
        write_marker(&dir, &marker)?;
        crate::durable::sync_dir(&dir).map_err(|e| io(&dir, e))?;
    }
    Ok(())
}
