//! Uploading the archive to object storage (`storage.url`): every manifest's lines, in
//! order, each batch of them as one segment put only after every file its lines add is
//! uploaded whole; objects its lines remove deleted `storage.delete_delay` later.
//!
//! Promises: a file is visible in the store (named by a segment) only once all its bytes
//! are there, with the SHA-256 its entry records (the bytes are hashed as they are read
//! for the upload; a file whose bytes differ is not uploaded, and `verify` over the store
//! reports it missing). Nothing is lost to a failed request: a manifest's cursor
//! (`.compact/upload/<instance>.<store>.json`, one per store URL) moves past a line only once
//! its segment is in the store, so a failed upload, a crash or a stopped store means the same lines are tried
//! again, and uploading them twice is harmless (a file's key is its path; a segment is put
//! only if absent, and one already there holding the same lines counts as put). A failed
//! multipart upload is aborted, leaving no parts behind. A reader that listed the live
//! files just before a removal reached the store still finds them for `delete_delay`.

use std::collections::{BTreeMap, VecDeque};
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use object_store::{ObjectStoreExt, PutPayload, WriteMultipart};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::offload;
use super::remote::{self, RemoteArchive, RemoteError};
use crate::archive::layout::lock::{self, UploadLock, WORK_DIR};
use crate::archive::layout::names::new_instance_id;
use crate::archive::layout::offloaded::read_marker;
use crate::archive::manifest::{self, Entry, Manifest, Op, Reason};
use crate::metrics::Metrics;

/// How the uploader works.
#[derive(Debug, Clone)]
pub struct UploadSettings {
    /// How long an object stays in the store after its removal is uploaded.
    pub delete_delay: Duration,
    /// Files at least this large are uploaded in parts.
    pub multipart_bytes: u64,
    /// The most manifest lines in one segment.
    pub segment_lines: usize,
    /// A manifest's segments are consolidated after this many more were put...
    pub consolidate_after: usize,
    /// ...each run of at least this many consecutive small ones into one.
    pub consolidate_min: usize,
}

/// A consolidated segment grows up to this size; bigger ones are left as they are.
const CONSOLIDATED_BYTES: u64 = 32 << 20;

/// Why an upload pass stopped short (what was uploaded before it stays uploaded).
#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    /// The object store or a local file failed; tried again at the next pass.
    #[error(transparent)]
    Remote(#[from] RemoteError),
    /// A manifest line that is not an entry: the lines after it wait until it is mended
    /// (`verify` names it).
    #[error("{manifest}: the line at byte {offset} is not a manifest entry; upload of this manifest stops there")]
    Unreadable {
        /// The manifest.
        manifest: PathBuf,
        /// Where the line starts.
        offset: u64,
    },
    /// The manifest no longer continues what was uploaded from it (shorter than what is in
    /// the store, or its next line not chained to the last one uploaded).
    #[error("{manifest}: no longer continues the lines already uploaded from it; upload of this manifest stops (verify names what changed)")]
    Diverged {
        /// The manifest.
        manifest: PathBuf,
    },
    /// The store holds fewer of the manifest's lines than were uploaded from it.
    #[error("{manifest}: the object store lacks lines of this manifest that were uploaded ({what}: a bucket emptied or restored from an older copy, a segment deleted, or another store under this URL; check storage.url and AWS_ENDPOINT_URL); its upload stops until `toolwatch upload --resync`, run with the daemons writing this folder stopped, puts the missing lines again")]
    StoreBehind {
        /// The manifest.
        manifest: PathBuf,
        /// What it lacks.
        what: String,
    },
    /// A pass panicked; the manifests are taken again from their saved cursors.
    #[error("the upload pass panicked (a bug, or a store's answer a library could not take); manifests are taken again from their saved cursors")]
    Panicked,
    /// The store already holds a different segment under the key of one being put.
    #[error("object store already holds a different manifest segment at {key}; upload of this manifest stops there")]
    Conflict {
        /// The segment's key.
        key: String,
    },
}

/// What a pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct UploadReport {
    /// Archive files uploaded.
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Manifest segments put.
    pub segments: u64,
    /// Manifest lines now in the store that were not before.
    pub lines: u64,
    /// Objects deleted.
    pub deleted: u64,
    /// Added files no longer in the archive folder when their line was uploaded (removed
    /// by a later line: compaction, retention).
    pub gone: u64,
    /// Added files whose bytes were not those recorded: not uploaded.
    pub differs: u64,
    /// Added files, while resyncing, in neither the archive folder nor the store (offloaded
    /// copies of what the store lost): named by the store's manifest, `verify --url` reports
    /// them missing.
    pub lost: u64,
    /// Manifests another process is uploading...
    pub held_elsewhere: usize,
    /// ...and of them, those whose lines are not all in this store by that process's cursor
    /// (offloading waits for them too).
    pub behind_elsewhere: usize,
    /// Consolidated segments put, and segments deleted as covered by one.
    pub consolidated: (u64, u64),
    /// Manifests whose upload stopped on an error of their own (retried on their own
    /// backoff, up to an hour).
    pub stuck: usize,
    /// What stopped them, in this pass.
    pub stuck_errors: Vec<String>,
    /// Manifest bytes still to upload.
    pub pending_bytes: u64,
    /// Files whose local copy was deleted (`storage.local_keep`), and their bytes.
    pub offloaded: (u64, u64),
}

/// Where offloading records what it deletes: the manifest of `instance`, signed with the key
/// in `signing_key_file` (empty: unsigned), opened at the first offload.
#[derive(Debug, Clone)]
pub struct OffloadSettings {
    /// Local copies of partitions whose hour ended longer ago than this go.
    pub keep: Duration,
    /// The instance whose manifest records offloads.
    pub instance: String,
    /// Its signing key file.
    pub signing_key_file: PathBuf,
}

/// The instance whose manifest records the offloads of `toolwatch upload` runs on the archive
/// under `root`: one for every run (they take turns: the scrub lock), `offload-<id>` with an
/// id made once per archive folder (`.compact/upload/offload-id`), so two archives uploading
/// to one prefix never share a manifest name.
pub fn offload_instance(root: &Path) -> std::io::Result<String> {
    let path = root.join(WORK_DIR).join("upload").join("offload-id");
    let id = match std::fs::read_to_string(&path) {
        Ok(t) if t.trim().len() == 8 && t.trim().bytes().all(|b| b.is_ascii_hexdigit()) => {
            t.trim().to_string()
        }
        Ok(_) => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{}: not 8 hex digits", path.display()),
            ))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let id = new_instance_id();
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            crate::durable::replace_file(&path, id.as_bytes())?;
            id
        }
        Err(e) => return Err(e),
    };
    Ok(format!("offload-{id}"))
}

/// How often the daemon looks for local copies to offload (a walk of the partition folders).
const OFFLOAD_EVERY: Duration = Duration::from_secs(300);

/// Where one manifest's upload stands; kept in `.compact/upload/<instance>.<store>.json`.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Cursor {
    /// The store these positions are in: another URL starts again from the beginning.
    url: String,
    /// Bytes of the manifest in the store.
    offset: u64,
    /// The last line in the store.
    seq: u64,
    /// Hex SHA-256 of the last line in the store (the next line's `prev`).
    #[serde(default)]
    prev: String,
    /// Every removal up to this line has had its object deleted...
    deleted_seq: u64,
    /// ...and the line after it starts here.
    deleted_offset: u64,
    /// The first line and the size of the last segment in the store, which ends at `seq`
    /// (0: not known), so a restart knows the store holds no more without reading it.
    #[serde(default)]
    segment: u64,
    #[serde(default)]
    segment_bytes: u64,
    /// The store was found to lack lines it was given (`StoreBehind`): another process
    /// sharing the folder must not count this manifest as in the store.
    #[serde(default)]
    behind: bool,
}

impl Cursor {
    /// A cursor at the start of the manifest, for the store at `url`.
    fn start(url: &str) -> Cursor {
        Cursor {
            url: url.to_string(),
            ..Cursor::default()
        }
    }
}

/// A removal waiting for its delay.
#[derive(Debug)]
struct Due {
    /// Wall-clock time, so a restart keeps the delay already waited.
    at: SystemTime,
    seq: u64,
    /// Where the line after it starts.
    next_offset: u64,
    path: String,
}

/// One manifest being uploaded by this process.
struct Shipping {
    path: PathBuf,
    cursor: Cursor,
    deletes: VecDeque<Due>,
    /// A manifest that cannot go on (see [`UploadError::is_of_one_manifest`]) waits on its own
    /// backoff, not holding the others back.
    stuck_until: Option<Instant>,
    backoff: crate::retry::Backoff,
    /// Segments put since the last consolidation.
    segments_put: usize,
    /// The cursor was checked against the store (see [`Uploader::catch_up`]).
    synced: bool,
    _lock: UploadLock,
}

/// Uploads the archive under a data directory: every manifest there (the daemon's, those of
/// `toolwatch compact`, `scrub` and `retention` runs, other instances' in a shared folder).
pub struct Uploader {
    root: PathBuf,
    remote: RemoteArchive,
    settings: UploadSettings,
    metrics: Arc<Metrics>,
    shipping: BTreeMap<String, Shipping>,
    offload: Option<OffloadSettings>,
    offloaded_at: Option<Instant>,
    resync: bool,
}

/// A manifest line and where the next one starts.
struct Line {
    text: String,
    entry: Entry,
    next_offset: u64,
}

impl Uploader {
    /// An uploader of the archive under `root` to `remote`.
    pub fn new(
        root: &Path,
        remote: RemoteArchive,
        settings: UploadSettings,
        metrics: Arc<Metrics>,
    ) -> Uploader {
        Uploader {
            root: root.to_path_buf(),
            remote,
            settings,
            metrics,
            shipping: BTreeMap::new(),
            offload: None,
            offloaded_at: None,
            resync: false,
        }
    }

    /// Checks every manifest's whole chain in the store at the first pass and puts again
    /// the lines after its last unbroken line, with their files, however far back that is
    /// (`toolwatch upload --resync`, after a store lost lines: see
    /// [`UploadError::StoreBehind`]).
    pub fn with_resync(mut self) -> Uploader {
        self.resync = true;
        self
    }

    /// Also offloads local copies (see [`offload`]) after a pass that uploaded
    /// everything: at the first pass, then every few minutes.
    pub fn with_offload(mut self, settings: OffloadSettings) -> Uploader {
        self.offload = Some(settings);
        self
    }

    /// Offloads, when due and every manifest this process uploads is in the store.
    async fn offload_due(&mut self, report: &mut UploadReport) -> Result<(), UploadError> {
        let Some(settings) = &self.offload else {
            return Ok(());
        };
        if settings.keep.is_zero() {
            return Ok(());
        }
        let due = self
            .offloaded_at
            .is_none_or(|t| t.elapsed() >= OFFLOAD_EVERY);
        if !due {
            return Ok(());
        }
        let manifest =
            || Manifest::shared(&self.root, &settings.instance, &settings.signing_key_file);
        let done = offload::offload(
            &self.root,
            &self.remote,
            settings.keep,
            &manifest,
            std::time::SystemTime::now(),
        )
        .await
        .map_err(|e| match e {
            offload::OffloadError::Remote(r) => UploadError::Remote(r),
            other => UploadError::Remote(RemoteError::Io {
                path: self.root.clone(),
                source: std::io::Error::other(other.to_string()),
            }),
        })?;
        self.offloaded_at = Some(Instant::now());
        report.offloaded = (done.files, done.bytes);
        if done.files > 0 {
            tracing::info!(
                files = done.files,
                bytes = done.bytes,
                "local copies of uploaded archive files deleted (storage.local_keep)"
            );
        }
        Ok(())
    }

    /// Uploads what every manifest added since the last pass, then deletes the objects
    /// whose delay is over (all of them with `delete_all`). Returns the first error after
    /// trying every manifest.
    pub async fn pass(&mut self, delete_all: bool) -> Result<UploadReport, UploadError> {
        let mut report = UploadReport::default();
        let mut first_error = None;
        // Every manifest taken went up to its end in this pass (offloading waits for it).
        let mut all_shipped = true;
        let manifests = manifest::list(&self.root).map_err(|e| RemoteError::Io {
            path: self.root.join(manifest::DIR),
            source: e,
        })?;
        for path in manifests {
            let Some(instance) = path.file_stem().map(|s| s.to_string_lossy().into_owned()) else {
                continue;
            };
            match self.take(&instance, &path) {
                Ok(true) => {}
                Ok(false) => {
                    report.held_elsewhere += 1;
                    if !self.is_up_elsewhere(&instance, &path) {
                        report.behind_elsewhere += 1;
                    }
                    continue;
                }
                Err(e) => {
                    first_error.get_or_insert(e);
                    continue;
                }
            }
            if self.is_stuck(&instance) {
                report.stuck += 1;
                continue;
            }
            match self.ship(&instance, &mut report).await {
                Ok(()) => {
                    if let Some(s) = self.shipping.get_mut(&instance) {
                        s.backoff = stuck_backoff();
                    }
                    if let Err(e) = self.consolidate_due(&instance, &mut report).await {
                        self.metrics.archive_upload_failed(failure_reason(&e));
                        tracing::warn!(error = %e, "manifest segments not consolidated; tried again later");
                    }
                }
                Err(e) if e.is_of_one_manifest() => {
                    all_shipped = false;
                    self.metrics.archive_upload_failed(failure_reason(&e));
                    report.stuck += 1;
                    report.stuck_errors.push(e.to_string());
                    if let Some(s) = self.shipping.get_mut(&instance) {
                        let wait = s.backoff.next_wait(None);
                        s.stuck_until = Some(Instant::now() + wait);
                        tracing::error!(error = %e, retry_in_s = wait.as_secs(), "archive upload of one manifest stopped; the others go on");
                    }
                }
                Err(e) => {
                    self.metrics.archive_upload_failed(failure_reason(&e));
                    first_error.get_or_insert(e);
                }
            }
            if let Err(e) = self.delete_due(&instance, delete_all, &mut report).await {
                self.metrics.archive_upload_failed(failure_reason(&e));
                first_error.get_or_insert(e);
            }
        }
        report.pending_bytes = self.pending_bytes();
        self.metrics.archive_upload_pending(report.pending_bytes);
        self.metrics.archive_upload_stuck(report.stuck as u64);
        // Only when every manifest of the folder is in the store as far as it goes (by this
        // process or, for those another holds, by its cursor; none stuck): every file a line
        // adds has its line there, so no local copy goes whose object no segment names.
        let all_up = all_shipped && report.behind_elsewhere == 0 && report.stuck == 0;
        if first_error.is_none() && all_up {
            if let Err(e) = self.offload_due(&mut report).await {
                self.metrics.archive_upload_failed(failure_reason(&e));
                first_error = Some(e);
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(report),
        }
    }

    /// Consolidates manifest `instance`'s segments when enough were put since the last time:
    /// each run of at least `consolidate_min` consecutive segments, up to 32 MiB, becomes one
    /// (`<first>-<last>.jsonl`, put only if absent), which readers take instead of the run;
    /// segments a consolidated one covers are deleted once it has been there
    /// `delete_delay` (a reader that listed them before still finds them).
    async fn consolidate_due(
        &mut self,
        instance: &str,
        report: &mut UploadReport,
    ) -> Result<(), UploadError> {
        let due = self
            .shipping
            .get(instance)
            .is_some_and(|s| s.segments_put >= self.settings.consolidate_after);
        if !due {
            return Ok(());
        }
        let segments = self.remote.segments_of(instance).await?;
        let (chosen, covered) = remote::plan(&segments);
        let now = chrono::Utc::now();
        for (old, by) in &covered {
            let there = now
                .signed_duration_since(by.modified)
                .to_std()
                .unwrap_or_default();
            if there < self.settings.delete_delay {
                continue;
            }
            // Only what lies wholly inside the segment covering it (a plain one says where
            // it ends by its lines).
            let old_last = match old.last {
                Some(last) => last,
                None => {
                    let lines = self.remote.read_text(&old.key).await?.lines().count() as u64;
                    old.first + lines.saturating_sub(1)
                }
            };
            if old_last > by.last.unwrap_or(by.first) {
                continue;
            }
            match self.remote.store().delete(&old.key).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => report.consolidated.1 += 1,
                Err(e) => return Err(RemoteError::store("delete", &old.key, e).into()),
            }
        }
        let mut i = 0;
        while i < chosen.len() {
            let mut j = i + 1;
            let mut bytes = chosen[i].bytes;
            while j < chosen.len() && bytes + chosen[j].bytes <= CONSOLIDATED_BYTES {
                bytes += chosen[j].bytes;
                j += 1;
            }
            if j - i >= self.settings.consolidate_min
                && self.merge_segments(instance, &chosen[i..j]).await?
            {
                report.consolidated.0 += 1;
            }
            i = j;
        }
        if let Some(s) = self.shipping.get_mut(instance) {
            s.segments_put = 0;
        }
        Ok(())
    }

    /// Puts one segment holding the lines of `run` (consecutive segments of `instance`),
    /// if they are exactly consecutive lines: each segment starting where the one before
    /// ended, each line's `seq` its place. False (nothing put, logged) otherwise: a segment
    /// missing from the listing, overlapping ones, a line changed in the store.
    async fn merge_segments(
        &self,
        instance: &str,
        run: &[&remote::Segment],
    ) -> Result<bool, UploadError> {
        let mut text = String::new();
        let mut next = run[0].first;
        for s in run {
            let t = self.remote.read_text(&s.key).await?;
            let mut fits = s.first == next;
            for line in t.lines() {
                if !fits {
                    break;
                }
                fits = serde_json::from_str::<SeqOnly>(line).is_ok_and(|l| l.seq == next);
                text.push_str(line);
                text.push('\n');
                next += 1;
            }
            fits = fits && s.last.is_none_or(|last| last + 1 == next);
            if !fits {
                tracing::warn!(instance, segment = %s.key, "manifest segments not consolidated: their lines are not consecutive (verify --url says where)");
                return Ok(false);
            }
        }
        let last = next - 1;
        let key = self.remote.consolidated_key(instance, run[0].first, last);
        // Put before (a pass that failed after it): the same lines, or a conflict.
        match self.remote.put_new_text(&key, text.clone()).await? {
            None => Ok(true),
            Some(there) if there == text => Ok(true),
            Some(_) => Err(UploadError::Conflict {
                key: key.to_string(),
            }),
        }
    }

    /// Lets go of every manifest (locks, cursors in memory): the next pass takes them again
    /// from their saved cursors.
    fn forget(&mut self) {
        self.shipping.clear();
        self.metrics.archive_upload_failed("panic");
    }

    /// Whether manifest `instance` waits after an error of its own.
    fn is_stuck(&self, instance: &str) -> bool {
        self.shipping
            .get(instance)
            .and_then(|s| s.stuck_until)
            .is_some_and(|t| Instant::now() < t)
    }

    /// Manifest bytes not yet in the store, over the manifests this process uploads.
    fn pending_bytes(&self) -> u64 {
        self.shipping
            .values()
            .map(|s| {
                std::fs::metadata(&s.path)
                    .map(|m| m.len().saturating_sub(s.cursor.offset))
                    .unwrap_or(0)
            })
            .sum()
    }

    /// Starts uploading manifest `instance` if no other process does: its cursor read, the
    /// removals not yet deleted queued again. False when another process holds it.
    fn take(&mut self, instance: &str, path: &Path) -> Result<bool, UploadError> {
        if self.shipping.contains_key(instance) {
            return Ok(true);
        }
        let lock = UploadLock::try_acquire(&self.root, instance).map_err(|e| RemoteError::Io {
            path: self.root.join(WORK_DIR),
            source: std::io::Error::other(e.to_string()),
        })?;
        let Some(lock) = lock else {
            return Ok(false);
        };
        let cursor = self
            .load_cursor(instance)?
            .unwrap_or_else(|| Cursor::start(self.remote.url()));
        let shipping = Shipping {
            path: path.to_path_buf(),
            cursor,
            deletes: VecDeque::new(),
            stuck_until: None,
            backoff: stuck_backoff(),
            // At the first pass: segments of earlier runs may want consolidating or deleting.
            segments_put: usize::MAX,
            synced: false,
            _lock: lock,
        };
        self.shipping.insert(instance.to_string(), shipping);
        Ok(true)
    }

    /// Brings manifest `instance`'s cursor in line with what the store holds of it, at the
    /// first pass of a process, and queues the removals already in the store whose objects
    /// may still be there, each due `delete_delay` after the segment holding it was put (so a
    /// command run from cron deletes what earlier runs left, never before a reader listing
    /// the store could have seen the removal). A cursor behind the store (lost, kept for
    /// another URL, restored from a backup) moves up over the lines there, each checked
    /// against the manifest (or the manifest is `Diverged`), so they do not go up again under
    /// other segment boundaries. A store behind the cursor stops the manifest
    /// (`StoreBehind`) unless resyncing.
    async fn catch_up(&mut self, instance: &str) -> Result<(), UploadError> {
        let segments = self.remote.segments_of(instance).await?;
        let (chosen, _) = remote::plan(&segments);
        let Some(s) = self.shipping.get(instance) else {
            return Ok(());
        };
        let (cursor, path) = (s.cursor.clone(), s.path.clone());
        let known = store_end_known(chosen.last().copied(), &cursor) == Some(cursor.seq);
        if self.resync || !known {
            let (seq, offset) = if self.resync {
                (0, 0)
            } else {
                (cursor.seq, cursor.offset)
            };
            let from = Cursor {
                seq,
                offset,
                prev: if self.resync {
                    String::new()
                } else {
                    cursor.prev.clone()
                },
                ..cursor.clone()
            };
            let end = chain_end(&self.remote, &path, &chosen, from).await?;
            if !self.resync && (end.seq < cursor.seq || end.broken) {
                let what = if end.seq < cursor.seq {
                    format!("its lines end at {}, {} were uploaded", end.seq, cursor.seq)
                } else {
                    format!("line {} is missing before later lines", end.seq + 1)
                };
                if !cursor.behind {
                    let flagged = Cursor {
                        behind: true,
                        ..cursor
                    };
                    self.save_cursor(instance, &flagged)?;
                    if let Some(s) = self.shipping.get_mut(instance) {
                        s.cursor.behind = true;
                    }
                }
                return Err(UploadError::StoreBehind {
                    manifest: path,
                    what,
                });
            }
            if end.broken {
                // The segments after the break go, so the lines put again never overlap
                // them (readers plan over consolidated segments by their names).
                let after: Vec<_> = segments.iter().filter(|g| g.first > end.seq).collect();
                tracing::warn!(manifest = %path.display(), segments = after.len(), seq = end.seq, "resync: the store's segments after its last unbroken line are deleted and their lines put again");
                for g in after {
                    match self.remote.store().delete(&g.key).await {
                        Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                        Err(e) => return Err(RemoteError::store("delete", &g.key, e).into()),
                    }
                }
            }
            let Some(s) = self.shipping.get_mut(instance) else {
                return Ok(());
            };
            if end.seq > cursor.seq {
                tracing::info!(manifest = %path.display(), seq = end.seq, "upload cursor caught up with the lines already in the store");
            } else if end.seq < cursor.seq {
                tracing::warn!(manifest = %path.display(), store_seq = end.seq, cursor_seq = cursor.seq, "resync: the lines after the store's last unbroken line go up again with their files");
                if s.cursor.deleted_seq > end.seq {
                    s.cursor.deleted_seq = end.seq;
                    s.cursor.deleted_offset = end.offset;
                }
            }
            s.cursor.seq = end.seq;
            s.cursor.offset = end.offset;
            s.cursor.prev = end.prev;
            (s.cursor.segment, s.cursor.segment_bytes) = end.segment;
        }
        if let Some(s) = self.shipping.get_mut(instance) {
            s.cursor.behind = false;
        }
        let delay = self.settings.delete_delay;
        let put = |seq: u64| {
            let holder = chosen.iter().rev().find(|g| g.first <= seq);
            holder.map_or_else(SystemTime::now, |g| g.modified.into()) + delay
        };
        let Some(s) = self.shipping.get_mut(instance) else {
            return Ok(());
        };
        let (from, to) = (s.cursor.deleted_offset, s.cursor.offset);
        queue_removals(s, from, to, put)?;
        let cursor = s.cursor.clone();
        self.save_cursor(instance, &cursor)
    }

    /// Whether archive file `path`, gone from the archive folder, was offloaded and is
    /// missing from the store too (resyncing after the store lost lines: it cannot come
    /// back). A file gone for another reason has a later line removing it.
    async fn is_lost(&self, path: &str) -> Result<bool, UploadError> {
        let local = self.root.join(path);
        let Some(dir) = local.parent() else {
            return Ok(false);
        };
        let listed = read_marker(dir).map_err(|e| RemoteError::Io {
            path: dir.to_path_buf(),
            source: std::io::Error::other(e.to_string()),
        })?;
        if !listed.iter().any(|f| f.path == path) {
            return Ok(false);
        }
        let key = self.remote.file_key(path)?;
        match self.remote.store().head(&key).await {
            Ok(_) => Ok(false),
            Err(object_store::Error::NotFound { .. }) => {
                tracing::warn!(path, "resync: a file the store lost was offloaded, so no copy is left to put again; unless a later manifest line removes it, verify --url reports it missing");
                Ok(true)
            }
            Err(e) => Err(RemoteError::store("head", &key, e).into()),
        }
    }

    /// Whether manifest `instance` (at `path`), which another process uploads, is in this
    /// store to its end by that process's cursor.
    fn is_up_elsewhere(&self, instance: &str, path: &Path) -> bool {
        // The length first: lines appended after it are as new as those of this process's
        // own manifests after its pass.
        let Ok(len) = std::fs::metadata(path).map(|m| m.len()) else {
            return false;
        };
        // At its end, and that end the line uploaded last (a manifest cut back and grown
        // again to the cursor's length is not).
        match self.load_cursor(instance) {
            Ok(Some(c)) if c.offset == len && !c.behind => {
                // A cursor of a build that kept no hash cannot be checked further.
                c.seq == 0
                    || c.prev.is_empty()
                    || last_line_before(path, len)
                        .is_some_and(|l| manifest::line_hash(&l) == c.prev)
            }
            _ => false,
        }
    }

    /// The cursor of manifest `instance` for this store: one per store, so uploading the
    /// same archive elsewhere (`toolwatch upload --url`) does not move this one.
    fn cursor_path(&self, instance: &str) -> PathBuf {
        self.upload_dir()
            .join(format!("{instance}.{}.json", self.store_tag()))
    }

    /// Where upload state is kept.
    fn upload_dir(&self) -> PathBuf {
        self.root.join(WORK_DIR).join("upload")
    }

    /// A short name of the store, for state kept per store.
    fn store_tag(&self) -> String {
        hex::encode(&Sha256::digest(self.remote.url().as_bytes())[..4])
    }

    /// Manifest `instance`'s cursor for this store, if there is one. Builds before cursors
    /// were kept per store wrote `<instance>.json` (with the URL inside): read when it
    /// names this store, so such an archive does not scan every manifest and delete every
    /// removal's object again.
    fn load_cursor(&self, instance: &str) -> Result<Option<Cursor>, UploadError> {
        let ours = |c: &Cursor| remote::canonical_url(&c.url).as_deref() == Some(self.remote.url());
        let older = self.upload_dir().join(format!("{instance}.json"));
        for path in [self.cursor_path(instance), older] {
            match std::fs::read_to_string(&path) {
                // A cursor that does not parse is started over: uploading again is harmless
                // (the store's segments are caught up with).
                Ok(text) => {
                    return Ok(serde_json::from_str::<Cursor>(&text)
                        .ok()
                        .filter(ours)
                        .map(|c| Cursor {
                            url: self.remote.url().to_string(),
                            ..c
                        }))
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(RemoteError::Io { path, source: e }.into()),
            }
        }
        Ok(None)
    }

    fn save_cursor(&self, instance: &str, cursor: &Cursor) -> Result<(), UploadError> {
        let path = self.cursor_path(instance);
        let write = || -> std::io::Result<()> {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            let text = serde_json::to_vec(cursor).map_err(std::io::Error::other)?;
            crate::durable::replace_file(&path, &text)
        };
        write().map_err(|e| RemoteError::Io { path, source: e }.into())
    }

    /// Uploads manifest `instance`'s new lines, a segment at a time.
    async fn ship(&mut self, instance: &str, report: &mut UploadReport) -> Result<(), UploadError> {
        self.abort_leftovers(instance).await?;
        if self.shipping.get(instance).is_some_and(|s| !s.synced) {
            self.catch_up(instance).await?;
            if let Some(s) = self.shipping.get_mut(instance) {
                s.synced = true;
            }
        }
        loop {
            let Some(s) = self.shipping.get(instance) else {
                return Ok(());
            };
            self.check_continues(s)?;
            let (mut lines, capped) = read_lines_capped(
                &s.path,
                s.cursor.offset,
                self.settings.segment_lines,
                u64::MAX,
            )?;
            // A file that fails to go up ends the segment before its line: the lines before
            // it go up now, it and the rest at the next pass.
            let mut failed = None;
            for (i, line) in lines.iter().enumerate() {
                if line.entry.op != Op::Add {
                    continue;
                }
                match self.upload_file(instance, &line.entry).await {
                    Ok(Uploaded::Whole(bytes)) => {
                        report.files += 1;
                        report.bytes += bytes;
                        self.metrics.archive_uploaded(bytes);
                    }
                    Ok(Uploaded::Gone) => {
                        report.gone += 1;
                        if self.resync && self.is_lost(&line.entry.path).await? {
                            report.lost += 1;
                        }
                    }
                    Ok(Uploaded::Differs) => {
                        report.differs += 1;
                        self.metrics.archive_upload_failed("differs");
                    }
                    Err(e) => {
                        failed = Some((i, e));
                        break;
                    }
                }
            }
            if let Some((i, _)) = &failed {
                lines.truncate(*i);
            }
            let whole = whole_batches(&lines, capped || failed.is_some(), failed.is_none());
            lines.truncate(whole);
            let Some(first) = lines.first() else {
                return failed.map_or(Ok(()), |(_, e)| Err(e));
            };
            let first_seq = first.entry.seq;
            let texts: Vec<&str> = lines.iter().map(|l| l.text.as_str()).collect();
            let lines = match self.put_segment(instance, first_seq, &texts).await? {
                Stored::All => {
                    report.segments += 1;
                    if let Some(s) = self.shipping.get_mut(instance) {
                        s.segments_put = s.segments_put.saturating_add(1);
                    }
                    report.lines += lines.len() as u64;
                    self.metrics.archive_uploaded_segment();
                    lines
                }
                // A segment already there (a put whose answer was lost, a crash before the
                // cursor was saved) counts if it holds the same lines as the manifest here;
                // their files went up before it was put.
                Stored::Found(there) => {
                    let ours = read_lines(&s.path, s.cursor.offset, there.len(), u64::MAX)?;
                    let same = ours.len() == there.len()
                        && ours.iter().zip(&there).all(|(a, b)| a.text == *b);
                    if !same {
                        self.metrics.archive_upload_failed("conflict");
                        return Err(UploadError::Conflict {
                            key: self.remote.segment_key(instance, first_seq).to_string(),
                        });
                    }
                    ours
                }
            };
            let stored = lines.len();
            let at = SystemTime::now() + self.settings.delete_delay;
            let Some(s) = self.shipping.get_mut(instance) else {
                return Ok(());
            };
            for line in &lines[..stored] {
                if deletes_object(&line.entry) {
                    s.deletes.push_back(Due {
                        at,
                        seq: line.entry.seq,
                        next_offset: line.next_offset,
                        path: line.entry.path.clone(),
                    });
                }
            }
            let last = &lines[stored - 1];
            s.cursor.offset = last.next_offset;
            s.cursor.seq = last.entry.seq;
            s.cursor.prev = manifest::line_hash(&last.text);
            s.cursor.segment = first_seq;
            s.cursor.segment_bytes = lines[..stored]
                .iter()
                .map(|l| l.text.len() as u64 + 1)
                .sum();
            if s.deletes.is_empty() {
                s.cursor.deleted_seq = s.cursor.seq;
                s.cursor.deleted_offset = s.cursor.offset;
            }
            let cursor = s.cursor.clone();
            self.save_cursor(instance, &cursor)?;
            if let Some((_, e)) = failed {
                return Err(e);
            }
        }
    }

    /// Checks that manifest `s` still holds what was uploaded: at least as long as the
    /// cursor, its next line chained to the last one uploaded. A manifest cut back (a write
    /// taken back after a failed sync, a restored backup) must not have other lines uploaded
    /// under seqs the store already holds.
    fn check_continues(&self, s: &Shipping) -> Result<(), UploadError> {
        let diverged = || UploadError::Diverged {
            manifest: s.path.clone(),
        };
        let len = std::fs::metadata(&s.path)
            .map_err(|e| RemoteError::Io {
                path: s.path.clone(),
                source: e,
            })?
            .len();
        if len < s.cursor.offset {
            return Err(diverged());
        }
        if s.cursor.seq == 0 || s.cursor.prev.is_empty() {
            return Ok(());
        }
        match read_lines(&s.path, s.cursor.offset, 1, u64::MAX) {
            Ok(next) => match next.first() {
                Some(l) if l.entry.prev != s.cursor.prev || l.entry.seq != s.cursor.seq + 1 => {
                    Err(diverged())
                }
                _ => Ok(()),
            },
            // The cursor in the middle of a line: the manifest changed under it.
            Err(UploadError::Unreadable { .. }) => Err(diverged()),
            Err(e) => Err(e),
        }
    }

    /// Puts a segment of `lines` starting at `first_seq` unless the store has one there
    /// (whose lines it then gives).
    async fn put_segment(
        &self,
        instance: &str,
        first_seq: u64,
        lines: &[&str],
    ) -> Result<Stored, UploadError> {
        let key = self.remote.segment_key(instance, first_seq);
        let mut text = lines.join("\n");
        text.push('\n');
        let Some(there) = self.remote.put_new_text(&key, text).await? else {
            return Ok(Stored::All);
        };
        let there: Vec<String> = there.lines().map(str::to_string).collect();
        if there.is_empty() {
            self.metrics.archive_upload_failed("conflict");
            return Err(UploadError::Conflict {
                key: key.to_string(),
            });
        }
        Ok(Stored::Found(there))
    }

    /// Uploads the file `entry` adds, checking its bytes against the entry as they are read.
    async fn upload_file(&self, instance: &str, entry: &Entry) -> Result<Uploaded, UploadError> {
        let local = self.root.join(&entry.path);
        let key = self.remote.file_key(&entry.path)?;
        let file = match std::fs::File::open(&local) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Uploaded::Gone),
            Err(e) => {
                return Err(RemoteError::Io {
                    path: local,
                    source: e,
                }
                .into())
            }
        };
        let io = |e| {
            UploadError::from(RemoteError::Io {
                path: local.clone(),
                source: e,
            })
        };
        let size = file.metadata().map_err(io)?.len();
        if size != entry.bytes {
            tracing::error!(file = %entry.path, "archive file's size differs from its manifest entry; not uploaded");
            return Ok(Uploaded::Differs);
        }
        let store_error = |e| UploadError::from(RemoteError::store("put", &key, e));
        if size < self.settings.multipart_bytes {
            let mut bytes = Vec::with_capacity(size as usize);
            (&file).read_to_end(&mut bytes).map_err(io)?;
            if hex::encode(Sha256::digest(&bytes)) != entry.sha256 {
                tracing::error!(file = %entry.path, "archive file's bytes differ from its manifest entry; not uploaded");
                return Ok(Uploaded::Differs);
            }
            // Overwrite: the same path always holds the same bytes, so a second upload of it
            // (after a lost answer or a restart) changes nothing.
            self.remote
                .store()
                .put(&key, PutPayload::from(bytes))
                .await
                .map_err(store_error)?;
            return Ok(Uploaded::Whole(size));
        }
        if let Some(mp) = self.remote.multipart() {
            return self
                .upload_in_parts(instance, mp.as_ref(), &key, file, entry)
                .await;
        }
        let upload = self
            .remote
            .store()
            .put_multipart(&key)
            .await
            .map_err(store_error)?;
        let mut parts = WriteMultipart::new_with_chunk_size(upload, PART_BYTES);
        match self.send_parts(file, &mut parts, entry).await {
            Ok(true) => {
                // A failed finish aborts the upload itself.
                parts.finish().await.map_err(store_error)?;
                Ok(Uploaded::Whole(size))
            }
            Ok(false) => {
                let _ = parts.abort().await;
                tracing::error!(file = %entry.path, "archive file's bytes differ from its manifest entry; not uploaded");
                Ok(Uploaded::Differs)
            }
            Err(e) => {
                // The parts sent so far would stay in the bucket (and be billed) until aborted.
                if let Err(abort) = parts.abort().await {
                    tracing::warn!(error = %abort, file = %entry.path, "could not abort a failed multipart upload");
                }
                Err(e)
            }
        }
    }

    /// Uploads `file` to `key` in parts through the store's multipart interface. The upload's
    /// id is kept (`.compact/upload/<instance>.<store>.uploads.json`) until it is completed or
    /// aborted: one whose abort failed too, or that a crash interrupted, is aborted at a later
    /// pass ([`Uploader::abort_leftovers`]), so no parts stay in the bucket.
    async fn upload_in_parts(
        &self,
        instance: &str,
        mp: &dyn object_store::multipart::MultipartStore,
        key: &object_store::path::Path,
        mut file: std::fs::File,
        entry: &Entry,
    ) -> Result<Uploaded, UploadError> {
        let store_error = |operation, e| {
            UploadError::from(RemoteError::Store {
                operation,
                key: key.to_string(),
                source: e,
            })
        };
        let id = mp
            .create_multipart(key)
            .await
            .map_err(|e| store_error("create multipart upload", e))?;
        self.note_upload(instance, key.as_ref(), &id, true)?;
        let outcome = match self.put_parts(mp, key, &id, &mut file, entry).await {
            Ok(Some(parts)) => match mp.complete_multipart(key, &id, parts).await {
                Ok(_) => {
                    self.note_upload(instance, key.as_ref(), &id, false)?;
                    return Ok(Uploaded::Whole(entry.bytes));
                }
                Err(e) => Err(store_error("complete multipart upload", e)),
            },
            Ok(None) => {
                tracing::error!(file = %entry.path, "archive file's bytes differ from its manifest entry; not uploaded");
                Ok(Uploaded::Differs)
            }
            Err(e) => Err(e),
        };
        // Not completed: its parts would stay in the bucket (and be billed) until aborted.
        match mp.abort_multipart(key, &id).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => {
                self.note_upload(instance, key.as_ref(), &id, false)?
            }
            Err(e) => {
                tracing::warn!(error = %e, file = %entry.path, "could not abort a failed multipart upload; tried again later")
            }
        }
        outcome
    }

    /// Sends `file` as parts of upload `id`; their ids when the file's hash is the entry's.
    async fn put_parts(
        &self,
        mp: &dyn object_store::multipart::MultipartStore,
        key: &object_store::path::Path,
        id: &str,
        file: &mut std::fs::File,
        entry: &Entry,
    ) -> Result<Option<Vec<object_store::multipart::PartId>>, UploadError> {
        let local = self.root.join(&entry.path);
        let io = |e| {
            UploadError::from(RemoteError::Io {
                path: local.clone(),
                source: e,
            })
        };
        file.seek(SeekFrom::Start(0)).map_err(io)?;
        let mut hash = Sha256::new();
        let mut parts = Vec::new();
        loop {
            let mut chunk = Vec::with_capacity(PART_BYTES);
            (&mut *file)
                .take(PART_BYTES as u64)
                .read_to_end(&mut chunk)
                .map_err(io)?;
            if chunk.is_empty() && !parts.is_empty() {
                break;
            }
            hash.update(&chunk);
            let last = chunk.len() < PART_BYTES;
            let part = mp
                .put_part(key, &id.to_string(), parts.len(), PutPayload::from(chunk))
                .await
                .map_err(|e| RemoteError::store("put part", key, e))?;
            parts.push(part);
            if last {
                break;
            }
        }
        Ok((hex::encode(hash.finalize()) == entry.sha256).then_some(parts))
    }

    /// The multipart uploads of manifest `instance` open in this store (ids are the store's).
    fn uploads_path(&self, instance: &str) -> PathBuf {
        self.upload_dir()
            .join(format!("{instance}.{}.uploads.json", self.store_tag()))
    }

    /// The multipart uploads of manifest `instance` begun and not yet completed or aborted.
    fn open_uploads(&self, instance: &str) -> Result<Vec<(String, String)>, UploadError> {
        read_uploads(&self.uploads_path(instance))
    }

    /// Records upload `id` of `key` as open (`open`) or as ended.
    fn note_upload(
        &self,
        instance: &str,
        key: &str,
        id: &str,
        open: bool,
    ) -> Result<(), UploadError> {
        let mut uploads = self.open_uploads(instance)?;
        uploads.retain(|(k, i)| !(k == key && i == id));
        if open {
            uploads.push((key.to_string(), id.to_string()));
        }
        let path = self.uploads_path(instance);
        let write = || -> std::io::Result<()> {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            let text = serde_json::to_vec(&uploads).map_err(std::io::Error::other)?;
            crate::durable::replace_file(&path, &text)
        };
        write().map_err(|e| RemoteError::Io { path, source: e }.into())
    }

    /// Aborts the multipart uploads of manifest `instance` a failure or a crash left open.
    async fn abort_leftovers(&self, instance: &str) -> Result<(), UploadError> {
        let Some(mp) = self.remote.multipart() else {
            return Ok(());
        };
        // Kept by builds before uploads were kept per store: each tried once, then the file
        // goes (another store's id cannot be aborted here; the bucket's lifecycle rule for
        // incomplete uploads is the backstop).
        let older = self.upload_dir().join(format!("{instance}.uploads.json"));
        if older.exists() {
            for (key, id) in read_uploads(&older)? {
                let path = object_store::path::Path::from(key.as_str());
                match mp.abort_multipart(&path, &id).await {
                    Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                    Err(e) => {
                        tracing::warn!(error = %e, key = %key, upload_id = %id, "could not abort a multipart upload an older build left open; not tried again (abort it by hand or let the bucket's lifecycle rule)")
                    }
                }
            }
            std::fs::remove_file(&older).map_err(|e| RemoteError::Io {
                path: older.clone(),
                source: e,
            })?;
        }
        for (key, id) in self.open_uploads(instance)? {
            let path = object_store::path::Path::from(key.as_str());
            match mp.abort_multipart(&path, &id).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {
                    self.note_upload(instance, &key, &id, false)?
                }
                // Kept for the next pass; the manifest's upload goes on meanwhile (a bucket
                // lifecycle rule for incomplete uploads is the backstop).
                Err(e) => {
                    self.metrics.archive_upload_failed("store");
                    tracing::warn!(error = %e, key = %key, "could not abort a failed multipart upload; tried again at the next pass");
                }
            }
        }
        Ok(())
    }

    /// Sends `file` as parts, hashing it; true when its hash is the entry's (the upload is
    /// not finished either way).
    async fn send_parts(
        &self,
        mut file: std::fs::File,
        parts: &mut WriteMultipart,
        entry: &Entry,
    ) -> Result<bool, UploadError> {
        let local = self.root.join(&entry.path);
        let mut hash = Sha256::new();
        let mut buf = vec![0u8; 1 << 20];
        file.seek(SeekFrom::Start(0)).map_err(|e| RemoteError::Io {
            path: local.clone(),
            source: e,
        })?;
        loop {
            let n = file.read(&mut buf).map_err(|e| RemoteError::Io {
                path: local.clone(),
                source: e,
            })?;
            if n == 0 {
                break;
            }
            hash.update(&buf[..n]);
            parts
                .wait_for_capacity(PARTS_IN_FLIGHT)
                .await
                .map_err(|e| RemoteError::Store {
                    operation: "put part",
                    key: entry.path.clone(),
                    source: e,
                })?;
            parts.write(&buf[..n]);
        }
        Ok(hex::encode(hash.finalize()) == entry.sha256)
    }

    /// Deletes the objects of manifest `instance`'s removals whose delay is over (all of
    /// them with `all`), in batches (one request per thousand on S3), the cursor saved after
    /// each, so a restart repeats at most one batch; at most [`DELETES_PER_PASS`] a pass
    /// unless `all`, so a backlog of removals does not hold the uploads back.
    async fn delete_due(
        &mut self,
        instance: &str,
        all: bool,
        report: &mut UploadReport,
    ) -> Result<(), UploadError> {
        let now = SystemTime::now();
        let mut done = 0usize;
        loop {
            let Some(s) = self.shipping.get_mut(instance) else {
                return Ok(());
            };
            let due = s
                .deletes
                .iter()
                .take_while(|d| all || d.at <= now)
                .take(DELETE_BATCH)
                .count();
            if due == 0 || (!all && done >= DELETES_PER_PASS) {
                break;
            }
            let keys = s
                .deletes
                .iter()
                .take(due)
                .map(|d| self.remote.file_key(&d.path))
                .collect::<Result<Vec<_>, _>>()?;
            let (deleted, failed) = self.delete_objects(keys).await;
            report.deleted += deleted as u64;
            self.metrics.archive_remote_deleted(deleted as u64);
            done += deleted;
            let Some(s) = self.shipping.get_mut(instance) else {
                return Ok(());
            };
            let last = s.deletes.drain(..deleted).next_back();
            if let Some(last) = last {
                s.cursor.deleted_seq = last.seq;
                s.cursor.deleted_offset = last.next_offset;
                let cursor = s.cursor.clone();
                self.save_cursor(instance, &cursor)?;
            }
            if let Some(e) = failed {
                return Err(e.into());
            }
        }
        let Some(s) = self.shipping.get_mut(instance) else {
            return Ok(());
        };
        // Only once the removals already in the store were queued (`catch_up`).
        if s.synced && s.deletes.is_empty() && s.cursor.deleted_offset != s.cursor.offset {
            s.cursor.deleted_seq = s.cursor.seq;
            s.cursor.deleted_offset = s.cursor.offset;
            let cursor = s.cursor.clone();
            self.save_cursor(instance, &cursor)?;
        }
        Ok(())
    }

    /// Deletes `keys` in order; how many from the first were deleted (or already gone), and
    /// what stopped the rest. A batch the store does not answer key for key (a failed bulk
    /// request, a store without bulk deletes, a per-key error such as S3's `NoSuchKey`) goes
    /// on one key at a time from where the answers stopped.
    async fn delete_objects(
        &self,
        keys: Vec<object_store::path::Path>,
    ) -> (usize, Option<RemoteError>) {
        use futures_util::StreamExt;
        let store = self.remote.store();
        let stream = futures_util::stream::iter(keys.clone().into_iter().map(Ok)).boxed();
        let mut results = store.delete_stream(stream);
        let mut deleted = 0;
        while let Some(Ok(path)) = results.next().await {
            if keys.get(deleted) != Some(&path) {
                break;
            }
            deleted += 1;
        }
        drop(results);
        for key in &keys[deleted..] {
            match store.delete(key).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => deleted += 1,
                Err(e) => return (deleted, Some(RemoteError::store("delete", key, e))),
            }
        }
        (deleted, None)
    }
}

/// The daemon's upload thread: a pass every `every` (sooner after a failure, with backoff
/// from 1 s to a minute), and a last one when it stops.
pub struct Background {
    stop: Arc<(std::sync::Mutex<bool>, std::sync::Condvar)>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// The longest the last pass may take at shutdown; what it leaves goes up at the next start.
const LAST_PASS: Duration = Duration::from_secs(30);

impl Background {
    /// Starts uploading; an error if the thread or its runtime cannot start.
    pub fn start(mut uploader: Uploader, every: Duration) -> std::io::Result<Background> {
        let stop = Arc::new((std::sync::Mutex::new(false), std::sync::Condvar::new()));
        let flag = Arc::clone(&stop);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let thread = std::thread::Builder::new()
            .name("toolwatch-upload".into())
            .spawn(move || {
                let mut backoff = crate::retry::Backoff::new(Duration::from_secs(1), Duration::from_secs(60));
                loop {
                    // A panic (in a library, on a store's odd answer) must not end uploading
                    // for the daemon's life: the pass's state goes, the cursors on disk stay.
                    let pass = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        runtime.block_on(uploader.pass(false))
                    }));
                    let pass = pass.unwrap_or_else(|_| {
                        uploader.forget();
                        Err(UploadError::Panicked)
                    });
                    let wait = match pass {
                        Ok(r) => {
                            backoff = crate::retry::Backoff::new(Duration::from_secs(1), Duration::from_secs(60));
                            if r.files + r.deleted > 0 {
                                tracing::debug!(files = r.files, bytes = r.bytes, lines = r.lines, deleted = r.deleted, "archive uploaded");
                            }
                            every
                        }
                        Err(e) => {
                            let wait = backoff.next_wait(None);
                            tracing::warn!(error = %e, retry_in_ms = wait.as_millis() as u64, "archive upload failed; nothing is lost, it is tried again");
                            wait
                        }
                    };
                    let stopped = flag.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                    let (stopped, _) = flag
                        .1
                        .wait_timeout_while(stopped, wait, |s| !*s)
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    if *stopped {
                        break;
                    }
                }
                match runtime.block_on(async { tokio::time::timeout(LAST_PASS, uploader.pass(false)).await }) {
                    Ok(Ok(r)) if r.pending_bytes == 0 => {}
                    Ok(Ok(r)) => tracing::warn!(pending_bytes = r.pending_bytes, "archive upload incomplete at shutdown; the rest goes up at the next start"),
                    Ok(Err(e)) => tracing::warn!(error = %e, "archive upload failed at shutdown; the rest goes up at the next start"),
                    Err(_) => tracing::warn!("archive upload did not finish at shutdown; the rest goes up at the next start"),
                }
            })?;
        Ok(Background {
            stop,
            thread: Some(thread),
        })
    }

    /// Asks for a last pass and waits for it (see [`LAST_PASS`]).
    pub fn stop(mut self) {
        *self
            .stop
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = true;
        self.stop.1.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Objects deleted in one batch (S3 deletes up to a thousand in one request).
const DELETE_BATCH: usize = 1000;
/// The most objects the daemon deletes in one pass, per manifest.
const DELETES_PER_PASS: usize = 10 * DELETE_BATCH;

/// Part size of multipart uploads (S3 wants at least 5 MiB but the last).
const PART_BYTES: usize = 8 << 20;
/// Parts sent at once per file.
const PARTS_IN_FLIGHT: usize = 4;

/// How a segment's put went.
enum Stored {
    /// Every line put.
    All,
    /// The store already had a segment there, with these lines.
    Found(Vec<String>),
}

/// How one file's upload went.
enum Uploaded {
    /// All of it, this many bytes.
    Whole(u64),
    /// Not in the archive folder any more.
    Gone,
    /// Its bytes are not those recorded.
    Differs,
}

/// How many of `lines` a segment takes so that no swap is split: a compaction's or a scrub's
/// removals are written in one append with the files that replace them, and a segment
/// ending inside that run would have readers of the store miss the replaced rows until the
/// next one. Reads see whole appends (the manifest's lock), so only a read `cut_short` (at
/// its cap, or before a file that failed to go up) can end inside one: then the last run of
/// swap lines goes to the next segment. A run longer than a whole segment (`may_split`: the
/// cut was the cap) is split, as it could never go up otherwise.
fn whole_batches(lines: &[Line], cut_short: bool, may_split: bool) -> usize {
    let swap = |l: &Line| {
        l.entry.reason == Reason::Compaction.as_str() || l.entry.reason == Reason::Scrub.as_str()
    };
    let mut k = lines.len();
    if cut_short {
        while k > 0 && swap(&lines[k - 1]) && lines[k - 1].entry.op == Op::Add {
            k -= 1;
        }
    }
    while k > 0 && swap(&lines[k - 1]) && lines[k - 1].entry.op == Op::Remove {
        k -= 1;
    }
    if k == 0 && cut_short && may_split {
        lines.len()
    } else {
        k
    }
}

/// True when `entry` removes its file from the store too (an offloaded file's local copy
/// went, its object stays).
fn deletes_object(entry: &Entry) -> bool {
    entry.op == Op::Remove && entry.reason != Reason::Offloaded.as_str()
}

/// The one field of a manifest line consolidation checks.
#[derive(Deserialize)]
struct SeqOnly {
    seq: u64,
}

/// Queues the removals of manifest lines from byte `from` to `to` whose objects may still
/// be in the store, each due at `due(seq)`.
fn queue_removals(
    s: &mut Shipping,
    from: u64,
    to: u64,
    due: impl Fn(u64) -> SystemTime,
) -> Result<(), UploadError> {
    let mut from = from;
    while from < to {
        let lines = read_lines(&s.path, from, usize::MAX, to)?;
        let Some(last) = lines.last() else {
            break;
        };
        from = last.next_offset;
        for line in lines {
            if deletes_object(&line.entry) && line.entry.seq > s.cursor.deleted_seq {
                s.deletes.push_back(Due {
                    at: due(line.entry.seq),
                    seq: line.entry.seq,
                    next_offset: line.next_offset,
                    path: line.entry.path,
                });
            }
        }
    }
    Ok(())
}

/// The manifest line ending just before byte `end` of the file at `path` (read from at most
/// 1 MiB before it).
fn last_line_before(path: &Path, end: u64) -> Option<String> {
    let mut file = std::fs::File::open(path).ok()?;
    let from = end.saturating_sub(1 << 20);
    file.seek(SeekFrom::Start(from)).ok()?;
    let mut bytes = Vec::new();
    file.take(end - from).read_to_end(&mut bytes).ok()?;
    let body = bytes.strip_suffix(b"\n")?;
    let line = body.rsplit(|&b| b == b'\n').next()?;
    // A line longer than what was read does not start inside it.
    if line.len() == body.len() && from > 0 {
        return None;
    }
    String::from_utf8(line.to_vec()).ok()
}

/// Where the store's unbroken chain of a manifest's lines ends, read on from the line after
/// a cursor's.
struct ChainEnd {
    /// Its last line (below the cursor's when the store ends before it).
    seq: u64,
    /// Where the manifest's next line starts, and the hash of line `seq` (the cursor's when
    /// the store holds nothing after it).
    offset: u64,
    prev: String,
    /// The first line and the size of the segment whose last line is `seq` ((0, 0): none read).
    segment: (u64, u64),
    /// A segment starts after a line the chain lacks, or holds no line.
    broken: bool,
}

/// Reads the chain of segments `chosen` (as readers plan it) from the one holding the line
/// after `from` on, checking each line after it against the manifest at `path`: a line that
/// differs, or that the manifest lacks, is `Diverged`.
async fn chain_end(
    remote: &RemoteArchive,
    path: &Path,
    chosen: &[&remote::Segment],
    from: Cursor,
) -> Result<ChainEnd, UploadError> {
    let mut end = ChainEnd {
        seq: from.seq,
        offset: from.offset,
        prev: from.prev,
        segment: (0, 0),
        broken: false,
    };
    let start = chosen
        .iter()
        .rposition(|g| g.first <= from.seq.max(1))
        .unwrap_or(0);
    let Some(first) = chosen.get(start).filter(|g| g.first <= from.seq + 1) else {
        end.broken = !chosen.is_empty();
        end.seq = 0;
        return Ok(end);
    };
    let diverged = || UploadError::Diverged {
        manifest: path.to_path_buf(),
    };
    let mut manifest = ManifestLines::new(path, from.offset);
    // Segments are named from line 1 on (`remote::segments_of`).
    let mut seen = first.first.saturating_sub(1);
    for g in &chosen[start..] {
        if g.first > seen + 1 {
            end.broken = true;
            break;
        }
        let text = remote.read_text(&g.key).await?;
        let n = text.lines().count() as u64;
        if n == 0 {
            end.broken = true;
            break;
        }
        for (i, line) in text.lines().enumerate() {
            let seq = g.first + i as u64;
            if seq <= seen.max(from.seq) {
                continue;
            }
            match manifest.next()? {
                Some(ours) if ours.entry.seq == seq && ours.text == line => {
                    end.seq = seq;
                    end.offset = ours.next_offset;
                    end.prev = manifest::line_hash(&ours.text);
                }
                _ => return Err(diverged()),
            }
        }
        seen = seen.max(g.first.saturating_add(n - 1));
        if seen == end.seq {
            end.segment = (g.first, g.bytes);
        }
    }
    if seen < from.seq {
        end.seq = seen;
    }
    Ok(end)
}

/// A manifest's lines one after another from a byte on, read a few thousand at a time.
struct ManifestLines<'a> {
    path: &'a Path,
    offset: u64,
    read: VecDeque<Line>,
}

impl<'a> ManifestLines<'a> {
    fn new(path: &'a Path, offset: u64) -> Self {
        ManifestLines {
            path,
            offset,
            read: VecDeque::new(),
        }
    }

    fn next(&mut self) -> Result<Option<Line>, UploadError> {
        if self.read.is_empty() {
            self.read = read_lines(self.path, self.offset, 10_000, u64::MAX)?.into();
            if let Some(last) = self.read.back() {
                self.offset = last.next_offset;
            }
        }
        Ok(self.read.pop_front())
    }
}

/// The store's last line of a manifest, when known without reading its last segment
/// (`last`, as readers plan): a consolidated segment's name gives it, and the cursor's own
/// last segment ends at the cursor.
fn store_end_known(last: Option<&remote::Segment>, cursor: &Cursor) -> Option<u64> {
    match last {
        None => Some(0),
        Some(seg) => seg.last.or((cursor.segment != 0
            && seg.first == cursor.segment
            && seg.bytes == cursor.segment_bytes)
            .then_some(cursor.seq)),
    }
}

/// Multipart uploads recorded open in the file at `path` (none when it is absent).
fn read_uploads(path: &Path) -> Result<Vec<(String, String)>, UploadError> {
    match std::fs::read_to_string(path) {
        // Unreadable (a torn write): what it held cannot be aborted from here; the bucket's
        // lifecycle rule for incomplete uploads is the backstop.
        Ok(text) => Ok(serde_json::from_str(&text).unwrap_or_default()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(RemoteError::Io {
            path: path.to_path_buf(),
            source: e,
        }
        .into()),
    }
}

/// A stuck manifest's retry delays: from a minute to an hour (it needs an operator).
fn stuck_backoff() -> crate::retry::Backoff {
    crate::retry::Backoff::new(Duration::from_secs(60), Duration::from_secs(3600))
}

impl UploadError {
    /// True for an error of one manifest's lines (not the store's or the network's): the
    /// other manifests go on.
    pub fn is_of_one_manifest(&self) -> bool {
        matches!(
            self,
            UploadError::Unreadable { .. }
                | UploadError::Diverged { .. }
                | UploadError::StoreBehind { .. }
                | UploadError::Conflict { .. }
        )
    }
}

/// The metric label of a failed pass.
fn failure_reason(e: &UploadError) -> &'static str {
    match e {
        UploadError::Remote(RemoteError::Store { .. }) => "store",
        UploadError::Remote(_) | UploadError::Unreadable { .. } | UploadError::Diverged { .. } => {
            "local"
        }
        UploadError::Conflict { .. } => "conflict",
        UploadError::StoreBehind { .. } => "store_behind",
        UploadError::Panicked => "panic",
    }
}

/// Up to `max` complete lines of the manifest at `path` from byte `from` (a line still
/// being written, without its newline, is left for later), none starting at or after `to`.
fn read_lines(path: &Path, from: u64, max: usize, to: u64) -> Result<Vec<Line>, UploadError> {
    read_lines_capped(path, from, max, to).map(|(lines, _)| lines)
}

/// [`read_lines`], and whether the read stopped at its cap (`max` lines, or the bytes read
/// at once) rather than at the manifest's end or `to`: then it may have stopped inside an
/// append.
fn read_lines_capped(
    path: &Path,
    from: u64,
    max: usize,
    to: u64,
) -> Result<(Vec<Line>, bool), UploadError> {
    let io = |e| {
        UploadError::from(RemoteError::Io {
            path: path.to_path_buf(),
            source: e,
        })
    };
    let mut file = std::fs::File::open(path).map_err(io)?;
    // Shared with other readers, not with an append in progress (see `Manifest::append`):
    // what is read is whole appends, synced.
    lock::flock(&file, libc::LOCK_SH).map_err(io)?;
    file.seek(SeekFrom::Start(from)).map_err(io)?;
    // Segments are bounded by lines; reading a few MiB at a time is enough for them.
    let mut text = Vec::new();
    let limit = (to.saturating_sub(from)).min(SEGMENT_READ_BYTES);
    (&file).take(limit).read_to_end(&mut text).map_err(io)?;
    drop(file);
    let mut out = Vec::new();
    let mut offset = from;
    let mut rest = &text[..];
    while out.len() < max {
        let Some(end) = rest.iter().position(|&b| b == b'\n') else {
            break;
        };
        let raw = &rest[..end];
        let line = std::str::from_utf8(raw).ok();
        let entry = line.and_then(|l| serde_json::from_str::<Entry>(l).ok());
        let (Some(line), Some(entry)) = (line, entry) else {
            if out.is_empty() {
                return Err(UploadError::Unreadable {
                    manifest: path.to_path_buf(),
                    offset,
                });
            }
            // The lines before it go; the next pass stops at it.
            break;
        };
        offset += end as u64 + 1;
        out.push(Line {
            text: line.to_string(),
            entry,
            next_offset: offset,
        });
        rest = &rest[end + 1..];
    }
    let capped = out.len() == max || text.len() as u64 == SEGMENT_READ_BYTES;
    Ok((out, capped))
}

/// The most manifest bytes read for one segment.
const SEGMENT_READ_BYTES: u64 = 8 << 20;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::archive::manifest::{Manifest, NewEntry, Reason};

    fn settings() -> UploadSettings {
        UploadSettings {
            delete_delay: Duration::ZERO,
            multipart_bytes: 1 << 30,
            segment_lines: 2,
            consolidate_after: usize::MAX,
            consolidate_min: usize::MAX,
        }
    }

    /// An archive folder, a `file://` store, and manifest `instance` in the folder.
    fn archive_and_store(
        instance: &str,
    ) -> (
        tempfile::TempDir,
        tempfile::TempDir,
        RemoteArchive,
        Arc<Manifest>,
    ) {
        let root = tempfile::tempdir().unwrap();
        let bucket = tempfile::tempdir().unwrap();
        let remote = RemoteArchive::open(&format!("file://{}", bucket.path().display())).unwrap();
        let m = Manifest::shared(root.path(), instance, Path::new("")).unwrap();
        (root, bucket, remote, m)
    }

    /// An uploader of the archive under `root` (its metrics not looked at here).
    fn uploader(root: &Path, remote: RemoteArchive, settings: UploadSettings) -> Uploader {
        Uploader::new(root, remote, settings, Arc::new(Metrics::new()))
    }

    fn add(root: &Path, manifest: &Manifest, rel: &str, bytes: &[u8]) {
        let path = root.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, bytes).unwrap();
        manifest
            .append(&[NewEntry {
                op: Op::Add,
                path,
                table: "spans".into(),
                rows: 1,
                bytes: bytes.len() as u64,
                sha256: hex::encode(Sha256::digest(bytes)),
                records: None,
                reason: Reason::Flush,
            }])
            .unwrap();
    }

    #[tokio::test]
    async fn lines_go_up_in_segments_after_their_files_and_removals_delete_objects() {
        let (root, bucket, remote, m) = archive_and_store("i1");
        for n in 0..3 {
            add(
                root.path(),
                &m,
                &format!("spans/tenant=a/p{n}.parquet"),
                format!("file {n}").as_bytes(),
            );
        }
        let mut up = uploader(root.path(), remote.clone(), settings());
        let r = up.pass(false).await.unwrap();
        assert_eq!(
            (r.files, r.segments, r.lines, r.pending_bytes),
            (3, 2, 3, 0)
        );
        assert_eq!(
            std::fs::read(bucket.path().join("spans/tenant=a/p1.parquet")).unwrap(),
            b"file 1"
        );
        let segments = remote.segments().await.unwrap();
        let keys: Vec<u64> = segments["i1"].iter().map(|s| s.first).collect();
        assert_eq!(keys, vec![1, 3]);
        // The store's manifest is the local one, byte for byte.
        let fetched = tempfile::tempdir().unwrap();
        remote
            .fetch_manifests(fetched.path(), &mut Default::default())
            .await
            .unwrap();
        assert_eq!(
            std::fs::read(fetched.path().join("manifest/i1.jsonl")).unwrap(),
            std::fs::read(root.path().join("manifest/i1.jsonl")).unwrap()
        );
        // A removal deletes the object (no delay here).
        m.append(&[NewEntry {
            op: Op::Remove,
            path: root.path().join("spans/tenant=a/p0.parquet"),
            table: "spans".into(),
            rows: 1,
            bytes: 6,
            sha256: hex::encode(Sha256::digest(b"file 0")),
            records: None,
            reason: Reason::Retention,
        }])
        .unwrap();
        let r = up.pass(false).await.unwrap();
        assert_eq!((r.files, r.lines, r.deleted), (0, 1, 1));
        assert!(!bucket.path().join("spans/tenant=a/p0.parquet").exists());
        let live: Vec<String> = remote
            .live_files()
            .await
            .unwrap()
            .into_iter()
            .map(|f| f.path)
            .collect();
        assert_eq!(
            live,
            vec!["spans/tenant=a/p1.parquet", "spans/tenant=a/p2.parquet"]
        );
    }

    #[tokio::test]
    async fn a_restart_after_a_put_whose_cursor_was_not_saved_uploads_nothing_twice() {
        let (root, _bucket, remote, m) = archive_and_store("i2");
        add(root.path(), &m, "spans/a.parquet", b"a");
        {
            let mut up = uploader(root.path(), remote.clone(), settings());
            up.pass(false).await.unwrap();
        }
        // The cursor lost (a crash just before it was saved), and a line added meanwhile.
        for e in std::fs::read_dir(root.path().join(".compact/upload")).unwrap() {
            let e = e.unwrap();
            if e.file_name().to_string_lossy().starts_with("i2.") {
                std::fs::remove_file(e.path()).unwrap();
            }
        }
        add(root.path(), &m, "spans/b.parquet", b"b");
        let mut up = uploader(root.path(), remote.clone(), settings());
        let r = up.pass(false).await.unwrap();
        // The segment at line 1 already held line 1: only line 2 went up, in its own segment.
        assert_eq!((r.lines, r.segments), (1, 1));
        let keys: Vec<u64> = remote.segments().await.unwrap()["i2"]
            .iter()
            .map(|s| s.first)
            .collect();
        assert_eq!(keys, vec![1, 2]);
    }

    fn remove(root: &Path, manifest: &Manifest, rel: &str, bytes: &[u8], reason: Reason) {
        manifest
            .append(&[NewEntry {
                op: Op::Remove,
                path: root.join(rel),
                table: "spans".into(),
                rows: 0,
                bytes: bytes.len() as u64,
                sha256: hex::encode(Sha256::digest(bytes)),
                records: None,
                reason,
            }])
            .unwrap();
    }

    #[tokio::test]
    async fn a_segment_never_ends_between_a_merges_removals_and_its_output() {
        let (root, _bucket, remote, m) = archive_and_store("i4");
        add(root.path(), &m, "spans/a.parquet", b"a");
        add(root.path(), &m, "spans/b.parquet", b"b");
        // As a reader may find a merge's lines half written: its removals, not yet its output.
        remove(root.path(), &m, "spans/a.parquet", b"a", Reason::Compaction);
        remove(root.path(), &m, "spans/b.parquet", b"b", Reason::Compaction);
        let settings = UploadSettings {
            segment_lines: 100,
            ..settings()
        };
        let mut up = uploader(root.path(), remote.clone(), settings);
        let r = up.pass(false).await.unwrap();
        assert_eq!(
            (r.lines, r.deleted),
            (2, 0),
            "the removals wait for their output"
        );
        add(root.path(), &m, "spans/ab.parquet", b"ab");
        let r = up.pass(false).await.unwrap();
        assert_eq!((r.lines, r.deleted), (3, 2));
        let keys: Vec<u64> = remote.segments().await.unwrap()["i4"]
            .iter()
            .map(|s| s.first)
            .collect();
        assert_eq!(keys, vec![1, 3]);
        let live: Vec<String> = remote
            .live_files()
            .await
            .unwrap()
            .into_iter()
            .map(|f| f.path)
            .collect();
        assert_eq!(live, vec!["spans/ab.parquet"]);
    }

    #[tokio::test]
    async fn a_manifest_cut_back_under_its_upload_stops_it() {
        let (root, _bucket, remote, m) = archive_and_store("i5");
        add(root.path(), &m, "spans/a.parquet", b"a");
        add(root.path(), &m, "spans/b.parquet", b"b");
        let mut up = uploader(root.path(), remote.clone(), settings());
        up.pass(false).await.unwrap();
        drop(up);
        // The second line taken back and another written in its place (seq 2 again).
        let path = root.path().join("manifest/i5.jsonl");
        let text = std::fs::read_to_string(&path).unwrap();
        let first = text.lines().next().unwrap();
        let mut other: Entry = serde_json::from_str(text.lines().nth(1).unwrap()).unwrap();
        other.path = "spans/other.parquet".into();
        other.prev = crate::archive::manifest::line_hash(first);
        let again = format!("{first}\n{}\n", serde_json::to_string(&other).unwrap());
        std::fs::write(&path, &again[..first.len() + 1]).unwrap();
        let mut up = uploader(root.path(), remote.clone(), settings());
        let r = up.pass(false).await.unwrap();
        assert_eq!(
            (r.stuck, r.lines),
            (1, 0),
            "stuck, and the pass itself did not fail"
        );
        assert!(
            r.stuck_errors[0].contains("no longer continues"),
            "{:?}",
            r.stuck_errors
        );
        // It waits on its own backoff.
        let r = up.pass(false).await.unwrap();
        assert_eq!((r.stuck, r.stuck_errors.len()), (1, 0));
        drop(up);
        std::fs::write(&path, again).unwrap();
        // Its line 2 is not the one uploaded: the cursor lands on no line chained to it.
        let mut up = uploader(root.path(), remote, settings());
        let r = up.pass(false).await.unwrap();
        assert_eq!(r.stuck, 1);
        assert!(
            r.stuck_errors[0].contains("no longer continues"),
            "{:?}",
            r.stuck_errors
        );
    }

    /// A manifest's segment names in the store, in reading order, seqs without their zeros.
    async fn segment_names(remote: &RemoteArchive, instance: &str) -> Vec<String> {
        remote.segments().await.unwrap()[instance]
            .iter()
            .map(|s| match s.last {
                Some(last) => format!("{}-{last}.jsonl", s.first),
                None => format!("{}.jsonl", s.first),
            })
            .collect()
    }

    #[tokio::test]
    async fn runs_of_segments_are_consolidated_and_readers_see_every_line_once() {
        let (root, _bucket, remote, m) = archive_and_store("i6");
        let first = UploadSettings {
            segment_lines: 1,
            consolidate_after: 3,
            consolidate_min: 3,
            delete_delay: Duration::from_secs(3600),
            ..settings()
        };
        let mut up = uploader(root.path(), remote.clone(), first);
        // Seven segments of one line, put two passes apart.
        for n in 0..4 {
            add(root.path(), &m, &format!("spans/p{n}.parquet"), b"x");
        }
        let r = up.pass(false).await.unwrap();
        assert_eq!((r.segments, r.consolidated), (4, (1, 0)));
        for n in 4..7 {
            add(root.path(), &m, &format!("spans/p{n}.parquet"), b"x");
        }
        up.pass(false).await.unwrap();
        let got = segment_names(&remote, "i6").await;
        // 1-4 (the first four) then 1-7 over it and the three after; the covered ones stay
        // for the delay.
        assert_eq!(
            got,
            vec![
                "1-7.jsonl",
                "1-4.jsonl",
                "1.jsonl",
                "2.jsonl",
                "3.jsonl",
                "4.jsonl",
                "5.jsonl",
                "6.jsonl",
                "7.jsonl"
            ]
        );
        // Readers: every file once; verify's copy of the manifest is the local one.
        let live = remote.live_files().await.unwrap();
        assert_eq!(live.len(), 7);
        let fetched = tempfile::tempdir().unwrap();
        let mut next = Default::default();
        remote
            .fetch_manifests(fetched.path(), &mut next)
            .await
            .unwrap();
        assert_eq!(
            std::fs::read(fetched.path().join("manifest/i6.jsonl")).unwrap(),
            std::fs::read(root.path().join("manifest/i6.jsonl")).unwrap()
        );
        // Lines added later come on their own after the consolidated ones.
        add(root.path(), &m, "spans/p7.parquet", b"x");
        up.pass(false).await.unwrap();
        remote
            .fetch_manifests(fetched.path(), &mut next)
            .await
            .unwrap();
        assert_eq!(
            std::fs::read(fetched.path().join("manifest/i6.jsonl")).unwrap(),
            std::fs::read(root.path().join("manifest/i6.jsonl")).unwrap()
        );
        drop(up);
        // Once the consolidated segment is older than the delay, what it covers goes.
        let later = UploadSettings {
            delete_delay: Duration::ZERO,
            consolidate_after: 0,
            consolidate_min: usize::MAX,
            ..settings()
        };
        let mut up = uploader(root.path(), remote.clone(), later);
        let r = up.pass(false).await.unwrap();
        assert_eq!(r.consolidated.1, 8);
        let got = segment_names(&remote, "i6").await;
        assert_eq!(got, vec!["1-7.jsonl", "8.jsonl"]);
        assert_eq!(remote.live_files().await.unwrap().len(), 8);
    }

    #[tokio::test]
    async fn a_lost_cursor_catches_up_with_consolidated_segments_instead_of_overlapping_them() {
        let root = tempfile::tempdir().unwrap();
        let bucket = tempfile::tempdir().unwrap();
        let remote = RemoteArchive::open(&format!("file://{}/", bucket.path().display())).unwrap();
        let m = Manifest::shared(root.path(), "i7", Path::new("")).unwrap();
        let quick = UploadSettings {
            segment_lines: 1,
            consolidate_after: 0,
            consolidate_min: 2,
            ..settings()
        };
        for n in 0..4 {
            add(root.path(), &m, &format!("spans/p{n}.parquet"), b"x");
        }
        {
            let mut up = uploader(root.path(), remote.clone(), quick.clone());
            up.pass(false).await.unwrap();
            // A second pass deletes what the consolidated segment covers (no delay here).
            up.pass(false).await.unwrap();
        }
        assert_eq!(segment_names(&remote, "i7").await, vec!["1-4.jsonl"]);
        // The cursor lost; the same store spelled another way; a line added meanwhile.
        for e in std::fs::read_dir(root.path().join(".compact/upload")).unwrap() {
            std::fs::remove_file(e.unwrap().path()).unwrap();
        }
        add(root.path(), &m, "spans/p4.parquet", b"x");
        let again = RemoteArchive::open(&format!("file://{}", bucket.path().display())).unwrap();
        assert_eq!(again.url(), remote.url());
        let mut up = uploader(root.path(), again, settings());
        let r = up.pass(false).await.unwrap();
        assert_eq!((r.lines, r.files), (1, 1), "only the new line and its file");
        assert_eq!(
            segment_names(&remote, "i7").await,
            vec!["1-4.jsonl", "5.jsonl"]
        );
        let fetched = tempfile::tempdir().unwrap();
        remote
            .fetch_manifests(fetched.path(), &mut Default::default())
            .await
            .unwrap();
        assert_eq!(
            std::fs::read(fetched.path().join("manifest/i7.jsonl")).unwrap(),
            std::fs::read(root.path().join("manifest/i7.jsonl")).unwrap()
        );
    }

    #[tokio::test]
    async fn a_file_changed_after_its_entry_is_not_uploaded() {
        let (root, bucket, remote, m) = archive_and_store("i3");
        add(root.path(), &m, "spans/a.parquet", b"right");
        std::fs::write(root.path().join("spans/a.parquet"), b"wrong").unwrap();
        let mut up = uploader(root.path(), remote, settings());
        let r = up.pass(false).await.unwrap();
        assert_eq!((r.files, r.differs, r.lines), (0, 1, 1));
        assert!(!bucket.path().join("spans/a.parquet").exists());
    }

    #[tokio::test]
    async fn a_manifest_another_process_uploads_is_up_once_its_cursor_covers_it() {
        let (root, _bucket, remote, m) = archive_and_store("j1");
        add(root.path(), &m, "spans/a.parquet", b"a");
        let mut holder = uploader(root.path(), remote.clone(), settings());
        holder.pass(false).await.unwrap();
        add(root.path(), &m, "spans/b.parquet", b"b");
        let mut other = uploader(root.path(), remote.clone(), settings());
        let r = other.pass(false).await.unwrap();
        assert_eq!((r.held_elsewhere, r.behind_elsewhere), (1, 1));
        holder.pass(false).await.unwrap();
        let r = other.pass(false).await.unwrap();
        assert_eq!((r.held_elsewhere, r.behind_elsewhere), (1, 0));
        // Cut back and written again to the same length with another line: not up.
        let path = root.path().join("manifest/j1.jsonl");
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, text.replace("spans/b.parquet", "spans/c.parquet")).unwrap();
        let r = other.pass(false).await.unwrap();
        assert_eq!((r.held_elsewhere, r.behind_elsewhere), (1, 1));
        std::fs::write(&path, text).unwrap();
        // Another store's cursor says nothing of this one.
        let elsewhere = tempfile::tempdir().unwrap();
        let remote2 =
            RemoteArchive::open(&format!("file://{}", elsewhere.path().display())).unwrap();
        let r = uploader(root.path(), remote2, settings())
            .pass(false)
            .await
            .unwrap();
        assert_eq!((r.held_elsewhere, r.behind_elsewhere), (1, 1));
    }

    /// The cursor files of manifest `instance` in the archive under `root`.
    fn cursor_files(root: &Path, instance: &str) -> Vec<PathBuf> {
        let mut files: Vec<PathBuf> = std::fs::read_dir(root.join(".compact/upload"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| {
                let name = p.file_name().unwrap().to_string_lossy().into_owned();
                name.starts_with(&format!("{instance}.")) && !name.ends_with(".uploads.json")
            })
            .collect();
        files.sort();
        files
    }

    #[tokio::test]
    async fn a_cursor_an_older_build_kept_is_read_and_no_removal_is_deleted_again() {
        let (root, bucket, remote, m) = archive_and_store("j2");
        add(root.path(), &m, "spans/a.parquet", b"a");
        add(root.path(), &m, "spans/b.parquet", b"b");
        remove(root.path(), &m, "spans/a.parquet", b"a", Reason::Retention);
        {
            let r = uploader(root.path(), remote.clone(), settings())
                .pass(false)
                .await
                .unwrap();
            assert_eq!((r.lines, r.deleted), (3, 1));
        }
        // As an older build kept it: `<instance>.json`, the URL as it was spelled.
        let [ours] = &cursor_files(root.path(), "j2")[..] else {
            panic!("one cursor")
        };
        let mut cursor: Cursor =
            serde_json::from_str(&std::fs::read_to_string(ours).unwrap()).unwrap();
        cursor.url = format!("file://{}/", &remote.url()["file://".len()..]);
        std::fs::write(
            root.path().join(".compact/upload/j2.json"),
            serde_json::to_vec(&cursor).unwrap(),
        )
        .unwrap();
        std::fs::remove_file(ours).unwrap();
        // An object under the removed file's key again: deleting it again would show.
        std::fs::write(bucket.path().join("spans/a.parquet"), b"a").unwrap();
        let r = uploader(root.path(), remote.clone(), settings())
            .pass(false)
            .await
            .unwrap();
        assert_eq!((r.lines, r.files, r.deleted), (0, 0, 0));
        assert!(bucket.path().join("spans/a.parquet").exists());
    }

    /// Deletes manifest `instance`'s segments from `first` on, and the objects `files` name.
    async fn lose(remote: &RemoteArchive, instance: &str, first: u64, files: &[&str]) {
        for seg in remote.segments_of(instance).await.unwrap() {
            if seg.first >= first {
                remote.store().delete(&seg.key).await.unwrap();
            }
        }
        for f in files {
            let key = remote.file_key(f).unwrap();
            remote.store().delete(&key).await.unwrap();
        }
    }

    #[tokio::test]
    async fn a_store_that_lost_lines_gets_them_again_with_their_files() {
        let (root, _bucket, remote, m) = archive_and_store("j3");
        let one = UploadSettings {
            segment_lines: 1,
            ..settings()
        };
        for n in 0..3 {
            add(root.path(), &m, &format!("spans/p{n}.parquet"), b"x");
        }
        {
            let r = uploader(root.path(), remote.clone(), one.clone())
                .pass(false)
                .await
                .unwrap();
            assert_eq!((r.lines, r.files), (3, 3));
        }
        let local = std::fs::read(root.path().join("manifest/j3.jsonl")).unwrap();
        let in_store = || async {
            let fetched = tempfile::tempdir().unwrap();
            remote
                .fetch_manifests(fetched.path(), &mut Default::default())
                .await
                .unwrap();
            let live = remote.live_files().await.unwrap().len();
            let objects = remote
                .store()
                .head(&remote.file_key("spans/p2.parquet").unwrap())
                .await
                .is_ok();
            (
                std::fs::read(fetched.path().join("manifest/j3.jsonl")).unwrap_or_default(),
                live,
                objects,
            )
        };
        let pass = |resync: bool| {
            let (root, remote, one) = (root.path().to_path_buf(), remote.clone(), one.clone());
            async move {
                let up = uploader(&root, remote, one);
                let mut up = if resync { up.with_resync() } else { up };
                up.pass(false).await.unwrap()
            }
        };
        // The last segment and its file lost: the manifest stops, nothing is put, until a
        // resync puts the line and its file again.
        lose(&remote, "j3", 3, &["spans/p2.parquet"]).await;
        let mut holder = uploader(root.path(), remote.clone(), one.clone());
        let r = holder.pass(false).await.unwrap();
        assert_eq!((r.stuck, r.lines, r.files), (1, 0, 0));
        // Another process sharing the folder does not count the manifest as in the store.
        let r = uploader(root.path(), remote.clone(), one.clone())
            .pass(false)
            .await
            .unwrap();
        assert_eq!((r.held_elsewhere, r.behind_elsewhere), (1, 1));
        drop(holder);
        let r = pass(false).await;
        assert_eq!((r.stuck, r.lines, r.files), (1, 0, 0));
        assert!(
            r.stuck_errors[0].contains("its lines end at 2, 3 were uploaded")
                && r.stuck_errors[0].contains("--resync"),
            "{:?}",
            r.stuck_errors
        );
        assert!(!in_store().await.2);
        let r = pass(true).await;
        assert_eq!((r.stuck, r.lines, r.files), (0, 1, 1));
        assert_eq!(in_store().await, (local.clone(), 3, true));
        // A segment lost from the middle, and the cursor too: catching up reads the chain
        // and finds it broken after line 1.
        lose(&remote, "j3", 2, &[]).await;
        let mut third = local.split(|&b| b == b'\n').nth(2).unwrap().to_vec();
        third.push(b'\n');
        let three = remote.segment_key("j3", 3);
        remote
            .store()
            .put(&three, PutPayload::from(third))
            .await
            .unwrap();
        for f in cursor_files(root.path(), "j3") {
            std::fs::remove_file(f).unwrap();
        }
        let r = pass(false).await;
        assert_eq!(r.stuck, 1, "{:?}", r.stuck_errors);
        assert!(
            r.stuck_errors[0].contains("line 2 is missing before later lines"),
            "{:?}",
            r.stuck_errors
        );
        // A resync deletes the segments after the break and puts lines 2 and 3 again, with
        // their files, in segments of its own.
        let r = pass(true).await;
        assert_eq!((r.stuck, r.lines, r.files), (0, 2, 2));
        assert_eq!(in_store().await, (local.clone(), 3, true));
        assert_eq!(
            segment_names(&remote, "j3").await,
            vec!["1.jsonl", "2.jsonl", "3.jsonl"]
        );
        // The bucket emptied, and one file's local copy gone meanwhile (offloaded): the
        // resync puts every line and the files it still has, and counts the one it lost.
        lose(
            &remote,
            "j3",
            1,
            &["spans/p0.parquet", "spans/p1.parquet", "spans/p2.parquet"],
        )
        .await;
        assert_eq!(pass(false).await.stuck, 1);
        std::fs::remove_file(root.path().join("spans/p0.parquet")).unwrap();
        let offloaded = crate::archive::layout::offloaded::OffloadedFile {
            path: "spans/p0.parquet".into(),
            bytes: 1,
            sha256: hex::encode(Sha256::digest(b"x")),
            recorded: true,
        };
        crate::archive::layout::offloaded::write_marker(&root.path().join("spans"), &[offloaded])
            .unwrap();
        let r = pass(true).await;
        assert_eq!((r.stuck, r.lines, r.files, r.lost), (0, 3, 2, 1));
        assert_eq!(in_store().await, (local, 3, true));
        // In line again: a plain pass puts nothing and stops nothing.
        let r = pass(false).await;
        assert_eq!((r.stuck, r.lines), (0, 0));
    }

    #[tokio::test]
    async fn deletes_go_in_batches_and_an_object_already_gone_counts_as_deleted() {
        let (root, bucket, remote, _m) = archive_and_store("j6");
        for name in ["a", "c"] {
            std::fs::create_dir_all(bucket.path().join("spans")).unwrap();
            std::fs::write(bucket.path().join(format!("spans/{name}.parquet")), b"x").unwrap();
        }
        let keys = ["a", "b", "c"]
            .map(|n| remote.file_key(&format!("spans/{n}.parquet")).unwrap())
            .to_vec();
        let up = uploader(root.path(), remote.clone(), settings());
        let (deleted, failed) = up.delete_objects(keys).await;
        assert_eq!(deleted, 3);
        assert!(failed.is_none());
        assert!(!bucket.path().join("spans/a.parquet").exists());
        assert!(!bucket.path().join("spans/c.parquet").exists());
    }

    #[test]
    fn the_stores_end_is_known_without_a_read_from_a_consolidated_name_or_the_cursors_segment() {
        let seg = |first: u64, last: Option<u64>| super::remote::Segment {
            first,
            last,
            key: object_store::path::Path::from("k"),
            bytes: 1,
            modified: chrono::Utc::now(),
        };
        let cursor = Cursor {
            seq: 7,
            segment: 5,
            segment_bytes: 1,
            ..Cursor::default()
        };
        assert_eq!(store_end_known(None, &cursor), Some(0));
        assert_eq!(store_end_known(Some(&seg(5, None)), &cursor), Some(7));
        // Another segment under the same name (another store under the URL): read it.
        let other = Cursor {
            segment_bytes: 2,
            ..cursor.clone()
        };
        assert_eq!(store_end_known(Some(&seg(5, None)), &other), None);
        assert_eq!(store_end_known(Some(&seg(6, None)), &cursor), None);
        assert_eq!(store_end_known(Some(&seg(1, Some(9))), &cursor), Some(9));
        let unknown = Cursor {
            seq: 7,
            ..Cursor::default()
        };
        assert_eq!(store_end_known(Some(&seg(5, None)), &unknown), None);
    }

    /// Rewrites the manifest at `path` as if every line had been written `by` earlier.
    fn age(path: &Path, by: Duration) {
        let text = std::fs::read_to_string(path).unwrap();
        let mut out = String::new();
        let mut prev = None;
        for line in text.lines() {
            let mut e: Entry = serde_json::from_str(line).unwrap();
            e.time_ns -= by.as_nanos() as i64;
            if let Some(p) = prev.take() {
                e.prev = p;
            }
            let line = serde_json::to_string(&e).unwrap();
            prev = Some(crate::archive::manifest::line_hash(&line));
            out.push_str(&line);
            out.push('\n');
        }
        std::fs::write(path, out).unwrap();
    }

    #[tokio::test]
    async fn removals_already_in_the_store_wait_their_delay_from_the_upload_not_the_line() {
        let (root, bucket, remote, m) = archive_and_store("j5");
        add(root.path(), &m, "spans/a.parquet", b"a");
        add(root.path(), &m, "spans/b.parquet", b"b");
        remove(root.path(), &m, "spans/a.parquet", b"a", Reason::Retention);
        // Written two hours ago, uploaded only now (a backlog, a store that was down).
        age(
            &root.path().join("manifest/j5.jsonl"),
            Duration::from_secs(7200),
        );
        let hour = UploadSettings {
            delete_delay: Duration::from_secs(3600),
            ..settings()
        };
        let pass = |all: bool| {
            let (root, remote, hour) = (root.path().to_path_buf(), remote.clone(), hour.clone());
            async move { uploader(&root, remote, hour).pass(all).await.unwrap() }
        };
        let r = pass(false).await;
        assert_eq!((r.lines, r.deleted), (3, 0));
        // A restart: due an hour after the segment holding it was put.
        assert_eq!(pass(false).await.deleted, 0);
        // The cursor lost: caught up with the store, due the same.
        for f in cursor_files(root.path(), "j5") {
            std::fs::remove_file(f).unwrap();
        }
        let r = pass(false).await;
        assert_eq!((r.lines, r.deleted), (0, 0));
        assert!(bucket.path().join("spans/a.parquet").exists());
        // Once the segment holding the removal has been in the store for the delay, a
        // one-shot run (cron) deletes the object.
        for seg in remote.segments_of("j5").await.unwrap() {
            let object = bucket.path().join(seg.key.as_ref());
            std::fs::File::options()
                .write(true)
                .open(object)
                .unwrap()
                .set_modified(SystemTime::now() - Duration::from_secs(7200))
                .unwrap();
        }
        let r = pass(false).await;
        assert_eq!((r.lines, r.deleted), (0, 1));
        assert!(!bucket.path().join("spans/a.parquet").exists());
    }
}
