//! The archive in object storage: where its files and manifest segments live in a bucket,
//! and how readers anywhere take the files that are live from the manifests there.
//!
//! `storage.url = "s3://bucket/prefix"` (credentials, region and endpoint from the usual
//! `AWS_*` environment variables) or `file:///path`. Under the prefix, every archive file
//! keeps its path in the data directory (`spans/tenant=T/date=…/hour=…/part-….parquet`), so
//! Hive-partitioned readers (Spark, Trino, pyarrow) find the tables where `toolwatch ddl`
//! says; the manifests are segments `_manifest/<instance>/<first seq>.jsonl`, each holding
//! consecutive manifest lines exactly as written locally (a leading `_` keeps them out of
//! those readers' listings). A segment is put only after every file its lines add is
//! uploaded whole ([`super::upload`]), so a file a segment names is complete; readers that
//! take the live files from the segments ([`RemoteArchive::live_files`]) never read a file
//! half-uploaded, nor one a later segment removed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures_util::TryStreamExt;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt};

use crate::archive::manifest::verify::ArchiveFiles;
use crate::archive::manifest::{self, Entry, Op, Reason};
use crate::archive::table::Table;

/// Listings a reader of the store's manifests makes before giving up on segments deleted
/// under it.
const LIST_TRIES: u32 = 4;

/// Manifest segments read at once by readers of the store.
const SEGMENT_READS: usize = 16;

/// The folder of manifest segments under the prefix.
pub const MANIFEST_DIR: &str = "_manifest";

/// Why the object store could not be used.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    /// `storage.url` is not a URL this build can write to.
    #[error("storage.url {url:?}: {reason}")]
    Url {
        /// The URL as configured.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// An object store request failed (after the client's own retries).
    #[error("object store {operation} {key}: {source}")]
    Store {
        /// What was asked.
        operation: &'static str,
        /// The object's key.
        key: String,
        /// What the store said.
        source: object_store::Error,
    },
    /// A local file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What the file system said.
        source: std::io::Error,
    },
}

impl RemoteError {
    /// A failed request for object `key`.
    pub(crate) fn store(
        operation: &'static str,
        key: &ObjectPath,
        source: object_store::Error,
    ) -> Self {
        RemoteError::Store {
            operation,
            key: key.to_string(),
            source,
        }
    }

    /// True when the store said an object is not there.
    pub fn is_not_found(&self) -> bool {
        matches!(
            self,
            RemoteError::Store {
                source: object_store::Error::NotFound { .. },
                ..
            }
        )
    }

    fn io(path: &Path, source: std::io::Error) -> Self {
        RemoteError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// The archive's place in an object store.
#[derive(Clone)]
pub struct RemoteArchive {
    store: Arc<dyn ObjectStore>,
    /// The same store's multipart interface, where it has one (S3): uploads whose ids are
    /// kept, so one whose abort failed is aborted later.
    multipart: Option<Arc<dyn object_store::multipart::MultipartStore>>,
    prefix: ObjectPath,
    url: String,
    /// A `file://` store's folder, with a trailing `/`: its errors name files by their
    /// path on disk, not by key.
    local_root: Option<String>,
}

impl std::fmt::Debug for RemoteArchive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteArchive")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

/// One manifest segment in the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    /// Its first line's seq.
    pub first: u64,
    /// Its last line's seq, for a consolidated segment (`<first>-<last>.jsonl`); a segment the
    /// uploader put (`<first>.jsonl`) says it only by its lines.
    pub last: Option<u64>,
    /// Its key.
    pub key: ObjectPath,
    /// Its size.
    pub bytes: u64,
    /// When it was put.
    pub modified: chrono::DateTime<chrono::Utc>,
}

/// The segment an object named `name` is (`<first>.jsonl` or `<first>-<last>.jsonl`).
fn segment_of(name: &str, meta: object_store::ObjectMeta) -> Option<Segment> {
    let stem = name.strip_suffix(".jsonl")?;
    let (first, last) = match stem.split_once('-') {
        Some((f, l)) => {
            let (f, l) = (f.parse::<u64>().ok()?, l.parse::<u64>().ok()?);
            (l >= f).then_some((f, Some(l)))?
        }
        None => (stem.parse::<u64>().ok()?, None),
    };
    // Lines count from 1: an object named otherwise is not a segment.
    if first == 0 {
        return None;
    }
    Some(Segment {
        first,
        last,
        key: meta.location,
        bytes: meta.size,
        modified: meta.last_modified,
    })
}

/// Orders one manifest's segments: by first line, a consolidated one before the segments it
/// covers (the longest first).
pub fn sort_segments(list: &mut [Segment]) {
    list.sort_by(|a, b| {
        a.first
            .cmp(&b.first)
            .then(b.last.unwrap_or(0).cmp(&a.last.unwrap_or(0)))
    });
}

/// What a reader reads of one manifest's segments (ordered by [`sort_segments`]): the chain
/// that covers each line once, in order, preferring consolidated segments; and the segments
/// a consolidated one covers, each with it (the uploader deletes them once readers that
/// listed them are done).
pub fn plan(segments: &[Segment]) -> (Vec<&Segment>, Vec<(&Segment, &Segment)>) {
    let (mut chosen, mut covered): (Vec<&Segment>, Vec<(&Segment, &Segment)>) = (vec![], vec![]);
    let mut until = 0u64;
    for s in segments {
        match chosen.last() {
            Some(by) if s.first <= until => covered.push((s, by)),
            _ => {
                chosen.push(s);
                until = s.last.unwrap_or(s.first);
            }
        }
    }
    (chosen, covered)
}

/// `url` spelled one way per place (`s3a://` as `s3://`, no trailing `/`): upload cursors are
/// kept per URL. None for a URL of another scheme.
pub fn canonical_url(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let rest = rest.trim_end_matches('/');
    match scheme {
        "file" => Some(format!("file://{rest}")),
        "s3" | "s3a" => Some(format!("s3://{rest}")),
        _ => None,
    }
}

/// A live archive file in the store, as the manifests record it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveFile {
    /// Its path relative to the prefix (`spans/tenant=…/…parquet`).
    pub path: String,
    /// Its size.
    pub bytes: u64,
    /// When its entry was written, ns since the epoch.
    pub time_ns: i64,
}

impl RemoteArchive {
    /// The store `url` names: `s3://bucket[/prefix]` (also `s3a://`), with credentials,
    /// region and endpoint from the `AWS_*` environment variables (an `http://` endpoint is
    /// allowed when one is set), or `file:///folder`.
    pub fn open(url: &str) -> Result<RemoteArchive, RemoteError> {
        let bad = |reason: &str| RemoteError::Url {
            url: url.to_string(),
            reason: reason.to_string(),
        };
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| bad("not a URL (expected s3://bucket/prefix or file:///path)"))?;
        type Multipart = Option<Arc<dyn object_store::multipart::MultipartStore>>;
        let mut local_root = None;
        let (store, multipart, prefix): (Arc<dyn ObjectStore>, Multipart, &str) = match scheme {
            "s3" | "s3a" => {
                let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
                if bucket.is_empty() {
                    return Err(bad("no bucket"));
                }
                let s3 = Arc::new(s3_store(bucket).map_err(|e| bad(&e.to_string()))?);
                (s3.clone(), Some(s3), prefix)
            }
            "file" => {
                if !rest.starts_with('/') {
                    return Err(bad("a file URL needs an absolute path (file:///folder)"));
                }
                std::fs::create_dir_all(rest).map_err(|e| bad(&e.to_string()))?;
                let local = object_store::local::LocalFileSystem::new_with_prefix(rest)
                    .map_err(|e| bad(&e.to_string()))?;
                local_root = Some(format!("{}/", rest.trim_end_matches('/')));
                (Arc::new(local), None, "")
            }
            other => return Err(bad(&format!("unsupported scheme {other:?} (s3 or file)"))),
        };
        let prefix = ObjectPath::parse(prefix.trim_matches('/'))
            .map_err(|e| bad(&format!("bad prefix: {e}")))?;
        let url = canonical_url(url).ok_or_else(|| bad("not a URL"))?;
        Ok(RemoteArchive {
            store,
            multipart,
            prefix,
            url,
            local_root,
        })
    }

    /// The URL it was opened with.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The store itself (keys include the prefix).
    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    /// The store's multipart interface, where it has one.
    pub fn multipart(&self) -> Option<&Arc<dyn object_store::multipart::MultipartStore>> {
        self.multipart.as_ref()
    }

    /// The store seen from the prefix: keys are archive paths (`spans/…`).
    pub fn under_prefix(&self) -> Arc<dyn ObjectStore> {
        if self.prefix.as_ref().is_empty() {
            Arc::clone(&self.store)
        } else {
            Arc::new(object_store::prefix::PrefixStore::new(
                Arc::clone(&self.store),
                self.prefix.clone(),
            ))
        }
    }

    /// The key of archive file `relative` (as manifests name it).
    pub fn file_key(&self, relative: &str) -> Result<ObjectPath, RemoteError> {
        // A manifest path with `..`, `.` or an empty segment must not reach elsewhere.
        let parts: Vec<&str> = relative.split('/').collect();
        if parts
            .iter()
            .any(|p| p.is_empty() || *p == "." || *p == "..")
        {
            return Err(RemoteError::Url {
                url: self.url.clone(),
                reason: format!("archive path {relative:?} has an empty, . or .. segment"),
            });
        }
        // Parsed, not joined: joining would percent-encode again the `%XX` escapes partition
        // folder names already hold, and the keys must be the paths as they are.
        let key = if self.prefix.as_ref().is_empty() {
            relative.to_string()
        } else {
            format!("{}/{relative}", self.prefix.as_ref())
        };
        ObjectPath::parse(&key).map_err(|e| RemoteError::Url {
            url: self.url.clone(),
            reason: format!("archive path {relative:?}: {e}"),
        })
    }

    /// The archive path (as manifests name it) of object `key` (a key under the prefix, or
    /// for a `file://` store the file's path on disk).
    pub fn archive_path(&self, key: &str) -> String {
        let key = match &self.local_root {
            Some(root) => key.strip_prefix(root.as_str()).unwrap_or(key),
            None => key,
        };
        let prefix = self.prefix.as_ref();
        if prefix.is_empty() {
            return key.to_string();
        }
        key.strip_prefix(prefix)
            .and_then(|k| k.strip_prefix('/'))
            .unwrap_or(key)
            .to_string()
    }

    /// The key of manifest `instance`'s segment starting at line `first_seq`.
    pub fn segment_key(&self, instance: &str, first_seq: u64) -> ObjectPath {
        self.prefix
            .clone()
            .join(MANIFEST_DIR)
            .join(instance)
            .join(format!("{first_seq:020}.jsonl"))
    }

    /// Every object under `dir`.
    async fn list_under(
        &self,
        dir: &ObjectPath,
    ) -> Result<Vec<object_store::ObjectMeta>, RemoteError> {
        self.store
            .list(Some(dir))
            .try_collect()
            .await
            .map_err(|e| RemoteError::store("list", dir, e))
    }

    /// Every manifest segment in the store, per instance, ordered for [`plan`].
    pub async fn segments(&self) -> Result<BTreeMap<String, Vec<Segment>>, RemoteError> {
        let dir = self.prefix.clone().join(MANIFEST_DIR);
        let metas = self.list_under(&dir).await?;
        let mut out: BTreeMap<String, Vec<Segment>> = BTreeMap::new();
        for meta in metas {
            let Some(parts) = meta.location.prefix_match(&dir) else {
                continue;
            };
            let parts: Vec<String> = parts.map(|p| p.as_ref().to_string()).collect();
            let [instance, name] = parts.as_slice() else {
                continue;
            };
            let Some(segment) = segment_of(name, meta) else {
                continue;
            };
            out.entry(instance.clone()).or_default().push(segment);
        }
        for list in out.values_mut() {
            sort_segments(list);
        }
        Ok(out)
    }

    /// Manifest `instance`'s segments in the store, ordered for [`plan`].
    pub async fn segments_of(&self, instance: &str) -> Result<Vec<Segment>, RemoteError> {
        let dir = self.prefix.clone().join(MANIFEST_DIR).join(instance);
        let metas = self.list_under(&dir).await?;
        let mut out: Vec<Segment> = metas
            .into_iter()
            .filter_map(|m| {
                let name = m.location.filename()?.to_string();
                segment_of(&name, m)
            })
            .collect();
        sort_segments(&mut out);
        Ok(out)
    }

    /// The key of a consolidated segment of lines `first` to `last`.
    pub fn consolidated_key(&self, instance: &str, first: u64, last: u64) -> ObjectPath {
        self.prefix
            .clone()
            .join(MANIFEST_DIR)
            .join(instance)
            .join(format!("{first:020}-{last:020}.jsonl"))
    }

    /// The texts of objects `keys`, in their order, [`SEGMENT_READS`] requests at a time.
    fn read_in_order(
        &self,
        keys: Vec<ObjectPath>,
    ) -> impl futures_util::Stream<Item = Result<(ObjectPath, String), RemoteError>> + '_ {
        use futures_util::StreamExt;
        futures_util::stream::iter(keys)
            .map(move |key| async move {
                let text = self.read_text(&key).await?;
                Ok((key, text))
            })
            .buffered(SEGMENT_READS)
    }

    /// Puts `text` at `key` only if no object is there (If-None-Match); `None` when put, else
    /// the text already there (an earlier put whose answer was lost, or another's).
    pub async fn put_new_text(
        &self,
        key: &ObjectPath,
        text: String,
    ) -> Result<Option<String>, RemoteError> {
        let opts = object_store::PutOptions {
            mode: object_store::PutMode::Create,
            ..Default::default()
        };
        let payload = object_store::PutPayload::from(text.into_bytes());
        match self.store.put_opts(key, payload, opts).await {
            Ok(_) => Ok(None),
            Err(object_store::Error::AlreadyExists { .. }) => self.read_text(key).await.map(Some),
            Err(e) => Err(RemoteError::store("put", key, e)),
        }
    }

    /// The text of object `key`.
    pub async fn read_text(&self, key: &ObjectPath) -> Result<String, RemoteError> {
        let bytes = self
            .store
            .get(key)
            .await
            .map_err(|e| RemoteError::store("get", key, e))?
            .bytes()
            .await
            .map_err(|e| RemoteError::store("get", key, e))?;
        String::from_utf8(bytes.to_vec()).map_err(|_| RemoteError::Store {
            operation: "get",
            key: key.to_string(),
            source: object_store::Error::Generic {
                store: "toolwatch",
                source: "not UTF-8 text".into(),
            },
        })
    }

    /// Copies the manifests in the store into `dir/manifest/<instance>.jsonl` (the local
    /// layout `verify` reads), from the line `fetched` says comes next for each (which it
    /// updates): a second call brings what was uploaded since. Lines are taken as they are,
    /// entries or not (`verify` judges them); a segment deleted under it (covered by a
    /// consolidated one) has it list again.
    pub async fn fetch_manifests(
        &self,
        dir: &Path,
        fetched: &mut std::collections::HashMap<String, u64>,
    ) -> Result<usize, RemoteError> {
        let mut tries = 0;
        loop {
            tries += 1;
            match self.fetch_manifests_once(dir, fetched).await {
                Err(e) if tries < LIST_TRIES && e.is_not_found() => continue,
                r => return r,
            }
        }
    }

    async fn fetch_manifests_once(
        &self,
        dir: &Path,
        fetched: &mut std::collections::HashMap<String, u64>,
    ) -> Result<usize, RemoteError> {
        use std::io::Write;
        let out = dir.join(manifest::DIR);
        std::fs::create_dir_all(&out).map_err(|e| RemoteError::io(&out, e))?;
        let mut new = 0;
        for (instance, segments) in self.segments().await? {
            let path = out.join(format!("{instance}.jsonl"));
            let mut file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .map_err(|e| RemoteError::io(&path, e))?;
            let next = fetched.entry(instance.clone()).or_insert(1);
            let (chosen, _) = plan(&segments);
            // A consolidated segment wholly before `next` is here already; a plain one says
            // where it ends only by its lines, so it is read (there are few: the ones since
            // the last consolidation).
            let wanted: Vec<&Segment> = chosen
                .into_iter()
                .filter(|s| s.last.is_none_or(|last| last >= *next))
                .collect();
            let mut texts = self.read_in_order(wanted.iter().map(|s| s.key.clone()).collect());
            let mut i = 0;
            while let Some((_, text)) = texts.try_next().await? {
                let first = wanted[i].first;
                i += 1;
                // A line's seq is its place in its segment (not what it says: `verify`
                // judges what lines say): lines before `next` are here already.
                let mut copy = String::new();
                let mut after = *next;
                for (k, line) in text.lines().enumerate() {
                    let seq = first + k as u64;
                    if seq < after {
                        continue;
                    }
                    copy.push_str(line);
                    copy.push('\n');
                    after = seq + 1;
                }
                // Whole or not at all: a copy cut halfway would show a false break.
                let len = file
                    .metadata()
                    .map_err(|e| RemoteError::io(&path, e))?
                    .len();
                if let Err(e) = file.write_all(copy.as_bytes()) {
                    let _ = file.set_len(len);
                    return Err(RemoteError::io(&path, e));
                }
                *next = after;
                new += 1;
            }
        }
        Ok(new)
    }

    /// The files the manifests in the store record as live (added, not removed), read
    /// segment by segment.
    pub async fn live_files(&self) -> Result<Vec<LiveFile>, RemoteError> {
        let mut tries = 0;
        loop {
            tries += 1;
            match self.live_files_once().await {
                // A segment deleted under it (covered by a consolidated one): list again.
                Err(e) if tries < LIST_TRIES && e.is_not_found() => continue,
                r => return r,
            }
        }
    }

    async fn live_files_once(&self) -> Result<Vec<LiveFile>, RemoteError> {
        let mut live: BTreeMap<String, LiveFile> = BTreeMap::new();
        let mut removed = std::collections::HashSet::new();
        for segments in self.segments().await?.into_values() {
            let (chosen, _) = plan(&segments);
            let mut texts = self.read_in_order(chosen.iter().map(|s| s.key.clone()).collect());
            while let Some((_, text)) = texts.try_next().await? {
                // Lines that are not entries are `verify`'s to report; a reader skips them.
                for entry in text
                    .lines()
                    .filter_map(|l| serde_json::from_str::<Entry>(l).ok())
                {
                    match entry.op {
                        Op::Add if !removed.contains(&entry.path) => {
                            live.insert(
                                entry.path.clone(),
                                LiveFile {
                                    path: entry.path,
                                    bytes: entry.bytes,
                                    time_ns: entry.time_ns,
                                },
                            );
                        }
                        Op::Add => {}
                        // Only the local copy went: the object is still live here.
                        Op::Remove if entry.reason == Reason::Offloaded.as_str() => {}
                        Op::Remove => {
                            live.remove(&entry.path);
                            removed.insert(entry.path);
                        }
                    }
                }
            }
        }
        Ok(live.into_values().collect())
    }
}

/// The archive in the store as `verify` reads it: the manifests copied into a folder of its
/// own (removed when it is dropped), the files listed, sized and hashed in the store.
pub struct StoreFiles {
    remote: RemoteArchive,
    dir: PathBuf,
    fetched: std::collections::HashMap<String, u64>,
    runtime: tokio::runtime::Runtime,
}

impl StoreFiles {
    /// Reads the archive in `remote`, copying its manifests under a new folder in the
    /// system's temporary folder.
    pub fn new(remote: RemoteArchive) -> std::io::Result<StoreFiles> {
        let dir = std::env::temp_dir().join(format!(
            "toolwatch-verify-{}-{}",
            std::process::id(),
            hex::encode(rand::random::<[u8; 6]>())
        ));
        std::fs::create_dir_all(&dir)?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        Ok(StoreFiles {
            remote,
            dir,
            fetched: Default::default(),
            runtime,
        })
    }

    fn other(e: RemoteError) -> std::io::Error {
        std::io::Error::other(e.to_string())
    }
}

impl Drop for StoreFiles {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl ArchiveFiles for StoreFiles {
    fn manifest_root(&self) -> &Path {
        &self.dir
    }

    fn refresh(&mut self) -> std::io::Result<()> {
        self.runtime
            .block_on(self.remote.fetch_manifests(&self.dir, &mut self.fetched))
            .map(|_| ())
            .map_err(Self::other)
    }

    fn present(&mut self) -> std::io::Result<Vec<String>> {
        let store = self.remote.under_prefix();
        let mut out = Vec::new();
        for table in Table::ALL {
            let dir = ObjectPath::from(table.as_str());
            let metas: Vec<_> = self
                .runtime
                .block_on(store.list(Some(&dir)).try_collect::<Vec<_>>())
                .map_err(|e| Self::other(RemoteError::store("list", &dir, e)))?;
            out.extend(
                metas
                    .into_iter()
                    .map(|m| m.location.to_string())
                    .filter(|p| p.ends_with(".parquet")),
            );
        }
        Ok(out)
    }

    fn size(&mut self, path: &str) -> std::io::Result<Option<u64>> {
        let key = self.remote.file_key(path).map_err(Self::other)?;
        match self.runtime.block_on(self.remote.store.head(&key)) {
            Ok(meta) => Ok(Some(meta.size)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(Self::other(RemoteError::store("head", &key, e))),
        }
    }

    fn sha256(&mut self, path: &str) -> std::io::Result<Option<String>> {
        use sha2::{Digest, Sha256};
        let key = self.remote.file_key(path).map_err(Self::other)?;
        let store = Arc::clone(&self.remote.store);
        self.runtime.block_on(async move {
            let got = match store.get(&key).await {
                Ok(g) => g,
                Err(object_store::Error::NotFound { .. }) => return Ok(None),
                Err(e) => return Err(Self::other(RemoteError::store("get", &key, e))),
            };
            let mut stream = got.into_stream();
            let mut hash = Sha256::new();
            while let Some(chunk) = stream
                .try_next()
                .await
                .map_err(|e| Self::other(RemoteError::store("get", &key, e)))?
            {
                hash.update(&chunk);
            }
            Ok(Some(hex::encode(hash.finalize())))
        })
    }

    fn removals_linger(&self) -> bool {
        true
    }

    fn counts_offloads(&self) -> bool {
        false
    }
}

/// An S3 client for `bucket`, configured from the `AWS_*` environment variables.
fn s3_store(bucket: &str) -> object_store::Result<object_store::aws::AmazonS3> {
    use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
    let mut builder = AmazonS3Builder::from_env().with_bucket_name(bucket);
    // An endpoint given as http:// (a local S3 server, a gateway in the same network) is
    // meant: allow it without a second variable.
    let endpoint = builder
        .get_config_value(&AmazonS3ConfigKey::Endpoint)
        .unwrap_or_default();
    if endpoint.starts_with("http://") {
        builder = builder.with_allow_http(true);
    }
    // The client retries each request a little; the uploader retries whole files after.
    let retry = object_store::RetryConfig {
        max_retries: 3,
        retry_timeout: Duration::from_secs(60),
        ..Default::default()
    };
    builder.with_retry(retry).build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_keep_archive_paths_under_the_prefix() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("file://{}", dir.path().display());
        let r = RemoteArchive::open(&url).unwrap();
        assert_eq!(
            r.file_key("spans/tenant=a/date=2026-01-01/hour=03/part-1.parquet")
                .unwrap()
                .as_ref(),
            "spans/tenant=a/date=2026-01-01/hour=03/part-1.parquet"
        );
        assert_eq!(
            r.segment_key("ab12", 7).as_ref(),
            "_manifest/ab12/00000000000000000007.jsonl"
        );
        assert!(r.file_key("spans/../../etc/passwd").is_err());
        // Partition values' escapes stay as they are: the key is the folder's name.
        assert_eq!(
            r.file_key("spans/tenant=a%40b~1f/date=2026-01-01/hour=03/p.parquet")
                .unwrap()
                .as_ref(),
            "spans/tenant=a%40b~1f/date=2026-01-01/hour=03/p.parquet"
        );
        let prefixed = RemoteArchive {
            prefix: ObjectPath::from("audit"),
            ..r
        };
        assert_eq!(
            prefixed
                .file_key("spans/tenant=a%40b/x.parquet")
                .unwrap()
                .as_ref(),
            "audit/spans/tenant=a%40b/x.parquet"
        );
    }

    #[test]
    fn objects_named_otherwise_than_segments_from_line_one_are_not_segments() {
        let meta = |name: &str| object_store::ObjectMeta {
            location: ObjectPath::from(name),
            last_modified: chrono::Utc::now(),
            size: 1,
            e_tag: None,
            version: None,
        };
        let first_last = |name: &str| segment_of(name, meta(name)).map(|s| (s.first, s.last));
        assert_eq!(first_last("00000000000000000007.jsonl"), Some((7, None)));
        assert_eq!(first_last("3-9.jsonl"), Some((3, Some(9))));
        for name in [
            "0.jsonl",
            "0-5.jsonl",
            "9-3.jsonl",
            "x.jsonl",
            "7.json",
            "7-.jsonl",
        ] {
            assert_eq!(first_last(name), None, "{name}");
        }
    }

    #[test]
    fn urls_other_than_s3_and_file_are_refused_with_the_reason() {
        let e = RemoteArchive::open("gs://bucket/x")
            .unwrap_err()
            .to_string();
        assert!(e.contains("unsupported scheme \"gs\""), "{e}");
        let e = RemoteArchive::open("bucket/x").unwrap_err().to_string();
        assert!(e.contains("not a URL"), "{e}");
        let e = RemoteArchive::open("s3:///x").unwrap_err().to_string();
        assert!(e.contains("no bucket"), "{e}");
    }
}
