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

use super::remote::{RemoteArchive, RemoteError};
use crate::archive::error::ArchiveError;
use crate::archive::layout::lock::{PartitionLock, ScrubLock};
use crate::archive::layout::offloaded::{read_marker, write_marker, OffloadedFile};
use crate::archive::layout::partition::PartitionDir;
use crate::archive::manifest::{self, file_sha256, relative_path, Manifest, NewEntry, Op, Reason};
use crate::archive::retention::{completed_with_sizes, expired, RetentionConfig};
use crate::archive::table::Table;

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
    let Some(_scrub) = ScrubLock::try_acquire(data_dir)? else {
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
        // Listed again under the lock: a merge since `expired` looked changed the files.
        let files = match completed_with_sizes(&dir) {
            Ok(f) => f,
            Err(ArchiveError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                continue
            }
            Err(e) => return Err(e.into()),
        };
        remove_partial_recalls(&dir)?;
        let mut marker = read_marker(&dir)?;
        let mut going = Vec::new();
        for (path, size) in &files {
            let rel = relative_path(data_dir, path);
            match marker.iter().find(|f| f.path == rel) {
                // A copy a scrub brought back and did not replace (it crashed): still
                // offloaded, recorded so; it goes again.
                Some(f) if f.recorded => {
                    std::fs::remove_file(path).map_err(|e| io(path, e))?;
                    continue;
                }
                // Listed, its line not written (a crash, a manifest that could not be
                // written): it goes now, with its line.
                Some(f) => {
                    going.push((path.clone(), f.clone()));
                    continue;
                }
                None => {}
            }
            let key = remote.file_key(&rel)?;
            let uploaded = match remote.store().head(&key).await {
                Ok(meta) => meta.size == *size,
                Err(object_store::Error::NotFound { .. }) => false,
                Err(e) => return Err(RemoteError::store("head", &key, e).into()),
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
                    recorded: false,
                },
            ));
        }
        if going.is_empty() {
            continue;
        }
        // The manifest (and its signing key) first: nothing is listed that cannot be recorded.
        let manifest = manifest().map_err(|e| io(&data_dir.join(manifest::DIR), e))?;
        // Listed, then recorded, then marked recorded, then deleted: a crash at any point
        // leaves files the next pass finishes, never a deletion without its line.
        marker.retain(|f| !going.iter().any(|(_, g)| g.path == f.path));
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
        manifest
            .append(&entries)
            .map_err(|e| io(manifest.path(), e))?;
        for f in marker.iter_mut() {
            f.recorded = true;
        }
        write_marker(&dir, &marker)?;
        for (path, f) in &going {
            std::fs::remove_file(path).map_err(|e| io(path, e))?;
            done.files += 1;
            done.bytes += f.bytes;
        }
        crate::durable::sync_dir(&dir).map_err(|e| io(&dir, e))?;
    }
    Ok(done)
}

/// Brings back the offloaded files of `part` (into its partition folder, each checked
/// against the SHA-256 recorded when it was offloaded), for a scrub to read; they stay listed
/// as offloaded. Adds the files brought back to `out` (those before a failure too); call
/// [`settle_recalled`] with them after, whether this failed or not.
pub fn recall(
    data_dir: &Path,
    remote: Option<&RemoteArchive>,
    part: &PartitionDir,
    out: &mut Vec<(PartitionDir, OffloadedFile)>,
) -> Result<(), OffloadError> {
    let dir = part.dir(data_dir);
    if read_marker(&dir)?.is_empty() {
        return Ok(());
    }
    let Some(remote) = remote else {
        return Err(OffloadError::NoStore { dir });
    };
    let _lock = PartitionLock::acquire(data_dir, part, true)?;
    // Read again under the lock: retention may have taken the partition meanwhile.
    let marker = read_marker(&dir)?;
    remove_partial_recalls(&dir)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| io(data_dir, e))?;
    // One whose line was never written is still here (not offloaded yet).
    for f in marker.into_iter().filter(|f| f.recorded) {
        let local = data_dir.join(&f.path);
        let mut name = local.file_name().unwrap_or_default().to_os_string();
        name.push(RECALL_SUFFIX);
        let temp = local.with_file_name(name);
        runtime.block_on(download(remote, &f, &temp))?;
        std::fs::rename(&temp, &local).map_err(|e| io(&local, e))?;
        out.push((part.clone(), f));
    }
    crate::durable::sync_dir(&dir).map_err(|e| io(&dir, e))?;
    Ok(())
}

/// The name a file being brought back has until it is whole (not a Parquet name, so no
/// reader or merge takes it).
const RECALL_SUFFIX: &str = ".recall";

/// Removes what a killed recall left half downloaded in partition folder `dir`.
pub fn remove_partial_recalls(dir: &Path) -> Result<(), ArchiveError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io(dir, e)),
    };
    for e in entries.flatten() {
        if e.file_name().to_string_lossy().ends_with(RECALL_SUFFIX) {
            std::fs::remove_file(e.path()).map_err(|err| io(&e.path(), err))?;
        }
    }
    Ok(())
}

/// Streams offloaded file `f`'s object to `temp`, hashing it, and syncs it; an error if its
/// bytes are not those recorded.
async fn download(
    remote: &RemoteArchive,
    f: &OffloadedFile,
    temp: &Path,
) -> Result<(), OffloadError> {
    use futures_util::TryStreamExt;
    use sha2::Digest;
    use std::io::Write;
    let key = remote.file_key(&f.path)?;
    let store_error = |e| RemoteError::Store {
        operation: "get",
        key: f.path.clone(),
        source: e,
    };
    let mut stream = remote
        .store()
        .get(&key)
        .await
        .map_err(store_error)?
        .into_stream();
    let mut file = std::fs::File::create(temp).map_err(|e| io(temp, e))?;
    let mut hash = sha2::Sha256::new();
    while let Some(chunk) = stream.try_next().await.map_err(store_error)? {
        hash.update(&chunk);
        file.write_all(&chunk).map_err(|e| io(temp, e))?;
    }
    file.sync_all().map_err(|e| io(temp, e))?;
    if hex::encode(hash.finalize()) != f.sha256 {
        let _ = std::fs::remove_file(temp);
        return Err(OffloadError::Differs {
            path: f.path.clone(),
        });
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::archive::manifest::Entry;

    /// An archive with one file in an hour long past, uploaded to a `file://` store.
    fn archive() -> (tempfile::TempDir, tempfile::TempDir, RemoteArchive, PathBuf) {
        let root = tempfile::tempdir().unwrap();
        let bucket = tempfile::tempdir().unwrap();
        let remote = RemoteArchive::open(&format!("file://{}", bucket.path().display())).unwrap();
        let rel = "spans/tenant=acme/date=2020-01-01/hour=00/part-a.parquet";
        let path = root.path().join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, b"old rows").unwrap();
        let object = bucket.path().join(rel);
        std::fs::create_dir_all(object.parent().unwrap()).unwrap();
        std::fs::write(&object, b"old rows").unwrap();
        (root, bucket, remote, path)
    }

    fn offloaded_lines(root: &Path) -> Vec<Entry> {
        let text = std::fs::read_to_string(root.join("manifest/off.jsonl")).unwrap_or_default();
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    #[tokio::test]
    async fn a_file_goes_only_once_its_removal_is_recorded_and_a_listed_unrecorded_one_gets_its_line(
    ) {
        let (root, _bucket, remote, path) = archive();
        let dir = path.parent().unwrap().to_path_buf();
        let opener = || Manifest::shared(root.path(), "off", Path::new(""));
        // A crash after the marker was written, before the line: listed, not recorded.
        let listed = OffloadedFile {
            path: "spans/tenant=acme/date=2020-01-01/hour=00/part-a.parquet".into(),
            bytes: 8,
            sha256: file_sha256(&path).unwrap(),
            recorded: false,
        };
        write_marker(&dir, std::slice::from_ref(&listed)).unwrap();
        // A recall cut short by a kill.
        std::fs::write(dir.join("part-b.parquet.recall"), b"half").unwrap();
        let done = offload(
            root.path(),
            &remote,
            Duration::from_secs(86_400),
            &opener,
            SystemTime::now(),
        )
        .await
        .unwrap();
        assert_eq!((done.files, done.bytes), (1, 8));
        assert!(!path.exists() && !dir.join("part-b.parquet.recall").exists());
        let lines = offloaded_lines(root.path());
        assert_eq!(lines.len(), 1);
        assert_eq!(
            (lines[0].op, lines[0].reason.as_str()),
            (Op::Remove, "offloaded")
        );
        assert_eq!(lines[0].sha256, listed.sha256);
        assert_eq!(
            read_marker(&dir).unwrap(),
            vec![OffloadedFile {
                recorded: true,
                ..listed
            }]
        );
    }

    #[tokio::test]
    async fn nothing_goes_that_is_not_in_the_store_whole_or_whose_line_cannot_be_written() {
        let (root, bucket, remote, path) = archive();
        let object = bucket
            .path()
            .join("spans/tenant=acme/date=2020-01-01/hour=00/part-a.parquet");
        std::fs::write(&object, b"old").unwrap();
        let opener = || Manifest::shared(root.path(), "off", Path::new(""));
        let keep = Duration::from_secs(86_400);
        let done = offload(root.path(), &remote, keep, &opener, SystemTime::now())
            .await
            .unwrap();
        assert_eq!((done.files, done.not_uploaded), (0, 1), "a partial object");
        assert!(path.exists());
        std::fs::write(&object, b"old rows").unwrap();
        // A signing key that cannot be read: nothing listed, nothing deleted.
        let broken = || Manifest::shared(root.path(), "off2", Path::new("/nonexistent/key"));
        let e = offload(root.path(), &remote, keep, &broken, SystemTime::now()).await;
        assert!(e.is_err());
        assert!(path.exists());
        assert_eq!(read_marker(path.parent().unwrap()).unwrap(), vec![]);
    }
}
