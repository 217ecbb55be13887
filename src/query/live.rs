//! The running daemon's live rows: what its archive holds in memory and has not yet
//! completed into files, fetched from its admin listener (`GET /v1/live/{table}`, an Arrow
//! IPC stream whose schema metadata lists the completed files at the same moment).
//!
//! A table read with live rows is the union of exactly the completed files the daemon
//! listed (not a fresh listing of the folder: a buffer completing in between would be seen
//! twice) and the rows, so each row is seen once. A listed file that a compaction swapped
//! away fails to open; [`super::session_with`]'s callers retry once.

use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::object_store::local::LocalFileSystem;
use datafusion::object_store::path::Path as ObjectPath;
use datafusion::object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    ObjectStoreExt, PutMultipartOptions, PutOptions, PutPayload, PutResult,
};
use futures_util::stream::BoxStream;
use futures_util::StreamExt;

use super::QueryError;
use crate::admin::{live_schema, META_DATA_DIR, META_FILES};
use crate::archive::partition::Table;

/// How long the daemon gets to answer.
const TIMEOUT: Duration = Duration::from_secs(10);
/// How long connecting may take when the daemon is only tried.
const TRY_CONNECT: Duration = Duration::from_millis(300);

/// Where the live rows come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LiveSource {
    /// Completed files only.
    Off,
    /// The daemon at this admin address if one answers there and archives to the same data
    /// directory; otherwise completed files only, silently.
    Try(SocketAddr),
    /// The daemon at this admin address; an error if it does not answer.
    Require(SocketAddr),
}

/// One table's live rows and the completed files at the same moment.
#[derive(Debug, Clone)]
pub struct LiveTable {
    /// Completed files, relative to the table's folder.
    pub files: Vec<String>,
    /// The rows, with `tenant`, `date` and `hour`.
    pub batches: Vec<RecordBatch>,
    /// The daemon's data directory.
    pub data_dir: PathBuf,
}

impl LiveTable {
    /// Rows held.
    pub fn rows(&self) -> usize {
        self.batches.iter().map(RecordBatch::num_rows).sum()
    }
}

fn canonical(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf())
}

/// Fetches every table's live rows for the archive under `data_dir`; `None` when `source`
/// is [`LiveSource::Off`] or only tried and nothing fitting answered.
pub async fn fetch_all(
    source: &LiveSource,
    data_dir: &Path,
    tables: &[Table],
) -> Result<Option<HashMap<Table, LiveTable>>, QueryError> {
    let (addr, required) = match source {
        LiveSource::Off => return Ok(None),
        LiveSource::Try(a) => (*a, false),
        LiveSource::Require(a) => (*a, true),
    };
    let mut builder = reqwest::Client::builder().timeout(TIMEOUT);
    if !required {
        builder = builder.connect_timeout(TRY_CONNECT);
    }
    let client = builder
        .build()
        .map_err(|e| QueryError::Live(format!("http client: {e}")))?;
    let mut out = HashMap::new();
    for &table in tables {
        match fetch(&client, addr, table).await {
            Ok(t) => {
                if canonical(&t.data_dir) != canonical(data_dir) {
                    if required {
                        return Err(QueryError::Live(format!(
                            "the daemon at {addr} archives to {}, not {} (set --data-dir)",
                            t.data_dir.display(),
                            data_dir.display()
                        )));
                    }
                    return Ok(None);
                }
                out.insert(table, t);
            }
            Err(e) if required => return Err(e),
            Err(_) => return Ok(None),
        }
    }
    Ok(Some(out))
}

/// `GET /v1/live/{table}` from the daemon at `addr`.
pub async fn fetch(
    client: &reqwest::Client,
    addr: SocketAddr,
    table: Table,
) -> Result<LiveTable, QueryError> {
    let url = format!("http://{addr}/v1/live/{}", table.as_str());
    let live_err = |e: String| QueryError::Live(format!("{url}: {e}"));
    let response = client
        .get(&url)
        .send()
        .await
        .map_err(|e| live_err(e.to_string()))?;
    if !response.status().is_success() {
        return Err(live_err(format!("answered {}", response.status())));
    }
    let body = response
        .bytes()
        .await
        .map_err(|e| live_err(e.to_string()))?;
    decode(table, &body).map_err(live_err)
}

/// Reads a `/v1/live/{table}` answer.
pub fn decode(table: Table, body: &[u8]) -> Result<LiveTable, String> {
    let reader =
        datafusion::arrow::ipc::reader::StreamReader::try_new(std::io::Cursor::new(body), None)
            .map_err(|e| e.to_string())?;
    let metadata = reader.schema().metadata().clone();
    let files: Vec<String> = match metadata.get(META_FILES) {
        Some(f) => serde_json::from_str(f).map_err(|e| format!("file list: {e}"))?,
        None => return Err("no file list in the answer".to_string()),
    };
    // Only plain relative paths inside the table's folder.
    if files
        .iter()
        .any(|f| f.starts_with('/') || f.split('/').any(|p| p == ".." || p.is_empty()))
    {
        return Err("the file list names a path outside the table".to_string());
    }
    let data_dir = metadata
        .get(META_DATA_DIR)
        .map(PathBuf::from)
        .ok_or("no data directory in the answer")?;
    let schema = live_schema(table);
    let mut batches = Vec::new();
    for batch in reader {
        let batch = batch.map_err(|e| e.to_string())?;
        let batch = RecordBatch::try_new(Arc::clone(&schema), batch.columns().to_vec())
            .map_err(|e| format!("rows of another schema: {e}"))?;
        batches.push(batch);
    }
    Ok(LiveTable {
        files,
        batches,
        data_dir,
    })
}

/// The local file system, except that listing a folder holding a table with live rows
/// yields exactly the files the daemon listed (each looked up, so one that vanished is an
/// error rather than rows silently missing).
#[derive(Debug)]
pub struct ListedFiles {
    inner: Arc<LocalFileSystem>,
    /// Table folder (as an object path) and the object paths of its listed files.
    tables: Vec<(ObjectPath, Arc<Vec<ObjectPath>>)>,
}

impl ListedFiles {
    /// No table listed yet.
    pub fn new() -> ListedFiles {
        ListedFiles {
            inner: Arc::new(LocalFileSystem::new()),
            tables: Vec::new(),
        }
    }

    /// Lists `files` (relative paths) for the table folder `dir` (an object path).
    pub fn add(&mut self, dir: ObjectPath, files: &[String]) {
        let paths = files
            .iter()
            .map(|f| {
                ObjectPath::from_iter(
                    dir.parts().chain(
                        f.split('/')
                            .map(datafusion::object_store::path::PathPart::from),
                    ),
                )
            })
            .collect();
        self.tables.push((dir, Arc::new(paths)));
    }

    fn listed(&self, prefix: Option<&ObjectPath>) -> Option<Vec<ObjectPath>> {
        let prefix = prefix?;
        let (_, files) = self
            .tables
            .iter()
            .find(|(dir, _)| prefix.prefix_matches(dir))?;
        Some(
            files
                .iter()
                .filter(|f| f.prefix_matches(prefix))
                .cloned()
                .collect(),
        )
    }
}

impl Default for ListedFiles {
    fn default() -> Self {
        ListedFiles::new()
    }
}

impl fmt::Display for ListedFiles {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ListedFiles({})", self.inner)
    }
}

type StoreResult<T> = datafusion::object_store::Result<T>;

#[async_trait::async_trait]
impl ObjectStore for ListedFiles {
    async fn put_opts(
        &self,
        location: &ObjectPath,
        payload: PutPayload,
        opts: PutOptions,
    ) -> StoreResult<PutResult> {
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &ObjectPath,
        opts: PutMultipartOptions,
    ) -> StoreResult<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &ObjectPath, options: GetOptions) -> StoreResult<GetResult> {
        self.inner.get_opts(location, options).await
    }

    async fn get_ranges(
        &self,
        location: &ObjectPath,
        ranges: &[Range<u64>],
    ) -> StoreResult<Vec<bytes::Bytes>> {
        self.inner.get_ranges(location, ranges).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, StoreResult<ObjectPath>>,
    ) -> BoxStream<'static, StoreResult<ObjectPath>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&ObjectPath>) -> BoxStream<'static, StoreResult<ObjectMeta>> {
        match self.listed(prefix) {
            Some(files) => {
                let inner = Arc::clone(&self.inner);
                futures_util::stream::iter(files)
                    .then(move |f| {
                        let inner = Arc::clone(&inner);
                        async move { inner.head(&f).await }
                    })
                    .boxed()
            }
            None => self.inner.list(prefix),
        }
    }

    async fn list_with_delimiter(&self, prefix: Option<&ObjectPath>) -> StoreResult<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(
        &self,
        from: &ObjectPath,
        to: &ObjectPath,
        options: CopyOptions,
    ) -> StoreResult<()> {
        self.inner.copy_opts(from, to, options).await
    }
}

/// Whether `e` says a file was not found (a compaction swapped its folder after the listing).
pub fn is_vanished_file(e: &QueryError) -> bool {
    match e {
        QueryError::Sql(m) => {
            let m = m.to_ascii_lowercase();
            m.contains("not found") || m.contains("no such file")
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listed_table_lists_only_its_files() {
        let mut store = ListedFiles::new();
        store.add(
            ObjectPath::from("data/spans"),
            &[
                "tenant=a/date=2026-01-01/hour=01/p1.parquet".to_string(),
                "tenant=b/date=2026-01-01/hour=01/p2.parquet".to_string(),
            ],
        );
        let all = store.listed(Some(&ObjectPath::from("data/spans")));
        assert_eq!(all.map(|v| v.len()), Some(2));
        let a = store.listed(Some(&ObjectPath::from("data/spans/tenant=a")));
        assert_eq!(
            a,
            Some(vec![ObjectPath::from(
                "data/spans/tenant=a/date=2026-01-01/hour=01/p1.parquet"
            )])
        );
        assert_eq!(store.listed(Some(&ObjectPath::from("data/logs"))), None);
        assert_eq!(store.listed(None), None);
    }

    #[test]
    fn vanished_files_are_recognised() {
        assert!(is_vanished_file(&QueryError::Sql(
            "Object at location /x/y.parquet not found: No such file or directory".into()
        )));
        assert!(!is_vanished_file(&QueryError::Sql("syntax error".into())));
    }
}
