//! The archive as one read-only object store, for fresh reads: the files on disk, listed once
//! at [`ArchiveView::freeze`], plus files held in memory (the rows a running daemon has not
//! written yet, fetched as Parquet).
//!
//! Listing answers come from that one frozen listing only, so a file the daemon writes after
//! the freeze is never listed: its rows are already among the in-memory files, and listing it
//! too would count them twice. Paths are in the form DataFusion uses for `file://` URLs, so
//! the view is registered for `file://` and the listing tables over the archive's folders work
//! unchanged. Reads go to memory for added paths and to the local file system otherwise; every
//! write is refused.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures_util::stream::{self, BoxStream, StreamExt, TryStreamExt};
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    ObjectStoreExt, PutMultipartOptions, PutOptions, PutPayload, PutResult,
};

/// Why the view could not be built or extended.
#[derive(Debug, thiserror::Error)]
pub enum ViewError {
    /// The local path is not absolute, or has a form object paths cannot hold (such as a `..`
    /// segment or a name that is not UTF-8).
    #[error("{path} cannot be a path in the archive view: {source}")]
    Path {
        /// The local path given.
        path: PathBuf,
        /// Why it was refused.
        source: object_store::path::Error,
    },
    /// Listing a folder on disk failed.
    #[error("cannot list {dir}: {source}")]
    List {
        /// The folder being listed.
        dir: PathBuf,
        /// What the local file system said.
        source: object_store::Error,
    },
    /// Holding a file in memory failed.
    #[error("cannot hold {path} in memory: {source}")]
    Memory {
        /// The local path of the file.
        path: PathBuf,
        /// What the in-memory store said.
        source: object_store::Error,
    },
}

/// The archive as one read-only object store: the local files listed once, at
/// [`ArchiveView::freeze`], plus files held in memory.
pub struct ArchiveView {
    /// Reads of files not added: the local file system rooted at `/` (as `LocalFileSystem::new()`
    /// is for `file://`), or the archive's object store.
    source: Arc<dyn ObjectStore>,
    /// The added files' bytes; a path held here is read from here.
    memory: InMemory,
    /// Every listed file: the local ones frozen at the freeze, then the added ones.
    listing: BTreeMap<Path, ObjectMeta>,
    /// Only listed files may be read (a session scoped to some tenants).
    listed_only: bool,
}

impl ArchiveView {
    /// Lists every file under the folders `dirs` (absolute local paths; missing ones are
    /// skipped) now.
    pub async fn freeze(dirs: &[PathBuf]) -> Result<ArchiveView, ViewError> {
        Self::freeze_listing(dirs, |_| true).await
    }

    /// [`ArchiveView::freeze`], listing only the files `keep` accepts (given each file's path
    /// relative to its folder in `dirs`), and reading no file it does not list: a session
    /// over it cannot reach any other file of the local file system.
    pub async fn freeze_within(
        dirs: &[PathBuf],
        keep: impl Fn(&str) -> bool,
    ) -> Result<ArchiveView, ViewError> {
        let mut view = Self::freeze_listing(dirs, keep).await?;
        view.listed_only = true;
        Ok(view)
    }

    async fn freeze_listing(
        dirs: &[PathBuf],
        keep: impl Fn(&str) -> bool,
    ) -> Result<ArchiveView, ViewError> {
        let local = LocalFileSystem::new();
        let mut listing = BTreeMap::new();
        for dir in dirs {
            let prefix = object_path(dir)?;
            // The local store lists a missing folder (or one removed while it walks, such as
            // a partition a compaction swaps) as empty, and a file that vanishes meanwhile is
            // left out: neither is an error.
            let metas: Vec<ObjectMeta> =
                local
                    .list(Some(&prefix))
                    .try_collect()
                    .await
                    .map_err(|source| ViewError::List {
                        dir: dir.clone(),
                        source,
                    })?;
            for meta in metas {
                let relative = meta
                    .location
                    .prefix_match(&prefix)
                    .map(|parts| {
                        parts
                            .map(|p| p.as_ref().to_string())
                            .collect::<Vec<_>>()
                            .join("/")
                    })
                    .unwrap_or_default();
                if keep(&relative) {
                    listing.insert(meta.location.clone(), meta);
                }
            }
        }
        Ok(ArchiveView {
            source: Arc::new(local),
            memory: InMemory::new(),
            listing,
            listed_only: false,
        })
    }

    /// A view of `files` (and no others) in `source`: the archive in an object store, its
    /// files those its manifests record as live when the view is made.
    pub fn over(source: Arc<dyn ObjectStore>, files: Vec<ObjectMeta>) -> ArchiveView {
        ArchiveView {
            source,
            memory: InMemory::new(),
            listing: files.into_iter().map(|m| (m.location.clone(), m)).collect(),
            listed_only: true,
        }
    }

    /// File names listed in local folder `dir` (absolute path), directly in it: the frozen
    /// ones and the added ones, sorted.
    pub fn names_in(&self, dir: &std::path::Path) -> Vec<String> {
        // A path objects cannot hold has no files listed under it.
        let Ok(prefix) = object_path(dir) else {
            return Vec::new();
        };
        children(&self.listing, &prefix)
            .filter_map(|(location, _)| {
                let mut rest = location.prefix_match(&prefix)?;
                let name = rest.next()?;
                // Deeper entries are files of subfolders, not of `dir`.
                rest.next().is_none().then(|| name.as_ref().to_string())
            })
            .collect()
    }

    /// Adds an in-memory file at local path `path` (absolute; it need not exist on disk):
    /// listed and read like the frozen files; an added path that is also listed on disk
    /// replaces it.
    pub async fn add(&mut self, path: &std::path::Path, bytes: Bytes) -> Result<(), ViewError> {
        let location = object_path(path)?;
        let held = |source| ViewError::Memory {
            path: path.to_path_buf(),
            source,
        };
        self.memory
            .put(&location, PutPayload::from(bytes))
            .await
            .map_err(held)?;
        // The listed metadata is the store's own, so a read checking it (size, e-tag) agrees.
        let meta = self.memory.head(&location).await.map_err(held)?;
        self.listing.insert(location, meta);
        Ok(())
    }
}

impl ArchiveView {
    /// In a scoped view, a file not listed is not there.
    fn readable(&self, location: &Path) -> object_store::Result<()> {
        if self.listed_only && !self.listing.contains_key(location) {
            return Err(object_store::Error::NotFound {
                path: location.to_string(),
                source: "outside the tenants this session may read".into(),
            });
        }
        Ok(())
    }
}

/// The object path of local path `path`, as `LocalFileSystem::new()` and DataFusion's
/// `file://` listing table URLs spell it.
fn object_path(path: &std::path::Path) -> Result<Path, ViewError> {
    Path::from_absolute_path(path).map_err(|source| ViewError::Path {
        path: path.to_path_buf(),
        source,
    })
}

/// The listed entries strictly below `prefix`, on path-segment boundaries (`a/b` is under `a`,
/// `a_b` and `a` itself are not), in path order.
fn children<'a>(
    listing: &'a BTreeMap<Path, ObjectMeta>,
    prefix: &'a Path,
) -> impl Iterator<Item = (&'a Path, &'a ObjectMeta)> + 'a {
    // Every path starting with the prefix's text sorts at or after it and before any that
    // does not, so the range ends at the first one that does not.
    listing
        .range(prefix.clone()..)
        .take_while(move |(location, _)| location.as_ref().starts_with(prefix.as_ref()))
        .filter(move |(location, _)| {
            location
                .prefix_match(prefix)
                .is_some_and(|mut rest| rest.next().is_some())
        })
}

/// The error every write answers.
#[derive(Debug, thiserror::Error)]
#[error("the archive view is read-only: {0} is refused")]
struct ReadOnly(&'static str);

fn refused(operation: &'static str) -> object_store::Error {
    object_store::Error::NotSupported {
        source: Box::new(ReadOnly(operation)),
    }
}

impl fmt::Display for ArchiveView {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ArchiveView({} files listed)", self.listing.len())
    }
}

impl fmt::Debug for ArchiveView {
    // Not derived: the in-memory store's Debug would print every added file's bytes.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ArchiveView")
            .field("listed", &self.listing.len())
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl ObjectStore for ArchiveView {
    async fn put_opts(
        &self,
        _location: &Path,
        _payload: PutPayload,
        _opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        Err(refused("put"))
    }

    async fn put_multipart_opts(
        &self,
        _location: &Path,
        _opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        Err(refused("put_multipart"))
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        // Added paths are exactly those the memory holds; anything else, listed or not (a
        // single-file table's head, say), is read from disk.
        match self.memory.get_opts(location, options.clone()).await {
            Err(object_store::Error::NotFound { .. }) => {
                self.readable(location)?;
                self.source.get_opts(location, options).await
            }
            held => held,
        }
    }

    async fn get_ranges(
        &self,
        location: &Path,
        ranges: &[Range<u64>],
    ) -> object_store::Result<Vec<Bytes>> {
        // Routed like get_opts, to keep each store's own: the local one reads all ranges
        // from one open file instead of one open per range.
        match self.memory.get_ranges(location, ranges).await {
            Err(object_store::Error::NotFound { .. }) => {
                self.readable(location)?;
                self.source.get_ranges(location, ranges).await
            }
            held => held,
        }
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        locations
            .map(|location| location.and_then(|_| Err(refused("delete"))))
            .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        let root = Path::default();
        let prefix = prefix.unwrap_or(&root);
        let metas: Vec<_> = children(&self.listing, prefix)
            .map(|(_, meta)| Ok(meta.clone()))
            .collect();
        stream::iter(metas).boxed()
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        let root = Path::default();
        let prefix = prefix.unwrap_or(&root);
        let mut common_prefixes = BTreeSet::new();
        let mut objects = Vec::new();
        for (location, meta) in children(&self.listing, prefix) {
            let Some(mut rest) = location.prefix_match(prefix) else {
                continue;
            };
            let Some(first) = rest.next() else {
                continue;
            };
            if rest.next().is_some() {
                common_prefixes.insert(prefix.clone().join(first));
            } else {
                objects.push(meta.clone());
            }
        }
        Ok(ListResult {
            common_prefixes: common_prefixes.into_iter().collect(),
            objects,
        })
    }

    async fn copy_opts(
        &self,
        _from: &Path,
        _to: &Path,
        _options: CopyOptions,
    ) -> object_store::Result<()> {
        Err(refused("copy"))
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path as LocalPath;
    use std::sync::Arc;

    use datafusion::arrow::array::{Array, ArrayRef, Int64Array, StringArray};
    use datafusion::arrow::compute::cast;
    use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
    use datafusion::arrow::record_batch::RecordBatch;
    use datafusion::datasource::file_format::parquet::ParquetFormat;
    use datafusion::datasource::listing::{
        ListingOptions, ListingTable, ListingTableConfig, ListingTableUrl,
    };
    use datafusion::execution::context::SessionContext;
    use datafusion::execution::object_store::ObjectStoreUrl;
    use parquet::arrow::ArrowWriter;

    use super::*;

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]))
    }

    fn parquet_bytes(values: &[i64]) -> Bytes {
        let column: ArrayRef = Arc::new(Int64Array::from(values.to_vec()));
        let batch = RecordBatch::try_new(schema(), vec![column]).expect("batch");
        let mut buf = Vec::new();
        let mut w = ArrowWriter::try_new(&mut buf, schema(), None).expect("writer");
        w.write(&batch).expect("write");
        w.close().expect("close");
        Bytes::from(buf)
    }

    fn write_parquet(path: &LocalPath, values: &[i64]) {
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, parquet_bytes(values)).expect("write file");
    }

    fn write_text(path: &LocalPath, text: &str) {
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, text).expect("write file");
    }

    fn object(path: &LocalPath) -> Path {
        Path::from_absolute_path(path).expect("object path")
    }

    /// Registers table `name` over `dir` as `query::register` does for the archive's tables.
    fn register_listing(ctx: &SessionContext, name: &str, dir: &LocalPath) {
        let url = ListingTableUrl::parse(format!("{}/", dir.display())).expect("url");
        let options = ListingOptions::new(Arc::new(ParquetFormat::default()))
            .with_file_extension(".parquet")
            .with_table_partition_cols(crate::query::partition_columns());
        let config = ListingTableConfig::new(url)
            .with_listing_options(options)
            .with_schema(schema());
        let table = ListingTable::try_new(config).expect("listing table");
        ctx.register_table(name, Arc::new(table)).expect("register");
    }

    async fn ints(ctx: &SessionContext, sql: &str) -> Vec<i64> {
        let batches = ctx
            .sql(sql)
            .await
            .expect("plan")
            .collect()
            .await
            .expect("run");
        let mut out = Vec::new();
        for batch in batches {
            for column in batch.columns() {
                let column = cast(column, &DataType::Int64).expect("cast");
                let column = column.as_any().downcast_ref::<Int64Array>().expect("int64");
                out.extend((0..column.len()).map(|i| column.value(i)));
            }
        }
        out
    }

    async fn counts_by_tenant(ctx: &SessionContext, table: &str) -> Vec<(String, i64)> {
        let sql = format!("SELECT tenant, count(*) FROM {table} GROUP BY tenant ORDER BY tenant");
        let batches = ctx
            .sql(&sql)
            .await
            .expect("plan")
            .collect()
            .await
            .expect("run");
        let mut out = Vec::new();
        for batch in batches {
            // Partition columns may come back dictionary-encoded; plain strings either way.
            let tenants = cast(batch.column(0), &DataType::Utf8).expect("cast");
            let tenants = tenants
                .as_any()
                .downcast_ref::<StringArray>()
                .expect("utf8");
            let counts = batch
                .column(1)
                .as_any()
                .downcast_ref::<Int64Array>()
                .expect("int64");
            for i in 0..batch.num_rows() {
                out.push((tenants.value(i).to_string(), counts.value(i)));
            }
        }
        out
    }

    fn pairs(expected: &[(&str, i64)]) -> Vec<(String, i64)> {
        expected.iter().map(|(t, n)| (t.to_string(), *n)).collect()
    }

    #[tokio::test]
    async fn a_listing_table_sees_the_frozen_disk_files_and_the_added_ones_only() {
        let data = tempfile::tempdir().expect("tempdir");
        let table = data.path().join("spans");
        let hour0 = |tenant: &str| table.join(format!("tenant={tenant}/date=2025-01-01/hour=00"));
        write_parquet(&hour0("a").join("part-1.parquet"), &[1, 2, 3]);
        write_parquet(&hour0("b").join("part-2.parquet"), &[10, 20]);

        let mut view = ArchiveView::freeze(std::slice::from_ref(&table))
            .await
            .expect("freeze");
        // Written after the freeze: its rows would be among the in-memory files.
        write_parquet(
            &hour0("a").join("part-3.parquet"),
            &[100, 200, 300, 400, 500],
        );
        // One in a partition folder that is not on disk, one in a folder that is.
        let new_folder = table.join("tenant=c/date=2025-01-01/hour=01/part-m1.parquet");
        view.add(&new_folder, parquet_bytes(&[1000]))
            .await
            .expect("add");
        view.add(
            &hour0("b").join("part-m2.parquet"),
            parquet_bytes(&[5, 5, 5]),
        )
        .await
        .expect("add");
        assert!(!new_folder.exists(), "an added file is not written to disk");

        let ctx = SessionContext::new();
        let previous =
            ctx.register_object_store(ObjectStoreUrl::local_filesystem().as_ref(), Arc::new(view));
        assert!(
            previous.is_some(),
            "the view replaces the default file:// store"
        );
        register_listing(&ctx, "spans", &table);

        assert_eq!(
            ints(&ctx, "SELECT count(*) FROM spans").await,
            [3 + 2 + 1 + 3]
        );
        assert_eq!(
            ints(&ctx, "SELECT sum(v) FROM spans").await,
            [6 + 30 + 1000 + 15]
        );
        assert_eq!(
            counts_by_tenant(&ctx, "spans").await,
            pairs(&[("a", 3), ("b", 5), ("c", 1)])
        );
        // A partition filter lists only under its prefix.
        assert_eq!(
            ints(&ctx, "SELECT sum(v) FROM spans WHERE tenant = 'b'").await,
            [45]
        );
        assert_eq!(
            ints(
                &ctx,
                "SELECT count(*) FROM spans WHERE tenant = 'c' AND hour = '01'"
            )
            .await,
            [1]
        );

        // The same table without the view sees the disk as it is now, and no memory.
        let plain = SessionContext::new();
        register_listing(&plain, "spans", &table);
        assert_eq!(
            ints(&plain, "SELECT count(*) FROM spans").await,
            [3 + 2 + 5]
        );
        assert_eq!(
            counts_by_tenant(&plain, "spans").await,
            pairs(&[("a", 8), ("b", 2)])
        );
    }

    #[tokio::test]
    async fn an_added_path_listed_on_disk_replaces_the_disk_file() {
        let data = tempfile::tempdir().expect("tempdir");
        let file = data.path().join("t/x.txt");
        write_text(&file, "on disk");
        let mut view = ArchiveView::freeze(&[data.path().join("t")])
            .await
            .expect("freeze");
        view.add(&file, Bytes::from_static(b"in memory, longer"))
            .await
            .expect("add");

        let listed: Vec<ObjectMeta> = view.list(None).try_collect().await.expect("list");
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].location, object(&file));
        assert_eq!(listed[0].size, 17);
        let got = view.get(&object(&file)).await.expect("get");
        assert_eq!(
            got.bytes().await.expect("bytes").as_ref(),
            b"in memory, longer"
        );
        let ranges = view
            .get_ranges(&object(&file), &[0..2, 11..17])
            .await
            .expect("ranges");
        assert_eq!(
            ranges,
            [Bytes::from_static(b"in"), Bytes::from_static(b"longer")]
        );
        assert_eq!(std::fs::read(&file).expect("read"), b"on disk");
    }

    #[tokio::test]
    async fn listing_answers_come_from_the_frozen_tree_by_path_segments() {
        let data = tempfile::tempdir().expect("tempdir");
        let root = data.path().join("root");
        for file in ["a.txt", "d/b.txt", "d/e/c.txt", "d_x/f.txt"] {
            write_text(&root.join(file), file);
        }
        let mut view = ArchiveView::freeze(std::slice::from_ref(&root))
            .await
            .expect("freeze");
        write_text(&root.join("d/late.txt"), "late");
        write_text(&root.join("late/g.txt"), "late");
        view.add(&root.join("d/m.txt"), Bytes::from_static(b"m"))
            .await
            .expect("add");
        view.add(&root.join("new/n.txt"), Bytes::from_static(b"n"))
            .await
            .expect("add");

        let at = |rel: &str| object(&root.join(rel));
        let list = |prefix: Option<Path>| {
            let stream = view.list(prefix.as_ref());
            async move {
                let mut found: Vec<Path> = stream
                    .map_ok(|meta| meta.location)
                    .try_collect()
                    .await
                    .expect("list");
                found.sort();
                found
            }
        };
        let everything: Vec<Path> = ["a.txt", "d/b.txt", "d/e/c.txt", "d/m.txt", "d_x/f.txt"]
            .iter()
            .chain(&["new/n.txt"])
            .map(|rel| at(rel))
            .collect();
        assert_eq!(list(None).await, everything);
        assert_eq!(list(Some(object(&root))).await, everything);
        // `d` is a prefix of `d/b.txt`, not of `d_x/f.txt`; listing is recursive.
        assert_eq!(
            list(Some(at("d"))).await,
            [at("d/b.txt"), at("d/e/c.txt"), at("d/m.txt")]
        );
        // Not a whole segment, and an exact file: nothing under either.
        assert_eq!(list(Some(at("d_"))).await, Vec::<Path>::new());
        assert_eq!(list(Some(at("d/b.txt"))).await, Vec::<Path>::new());
        assert_eq!(list(Some(at("late"))).await, Vec::<Path>::new());

        let delimited = |prefix: Option<Path>| {
            let view = &view;
            async move {
                let result = view
                    .list_with_delimiter(prefix.as_ref())
                    .await
                    .expect("list_with_delimiter");
                let mut objects: Vec<Path> =
                    result.objects.into_iter().map(|m| m.location).collect();
                objects.sort();
                (objects, result.common_prefixes)
            }
        };
        assert_eq!(
            delimited(Some(object(&root))).await,
            (vec![at("a.txt")], vec![at("d"), at("d_x"), at("new")])
        );
        assert_eq!(
            delimited(Some(at("d"))).await,
            (vec![at("d/b.txt"), at("d/m.txt")], vec![at("d/e")])
        );
        assert_eq!(
            delimited(Some(at("d/e"))).await,
            (vec![at("d/e/c.txt")], vec![])
        );
        assert_eq!(delimited(Some(at("d_"))).await, (vec![], vec![]));
        // From the top, everything is under the tempdir's first segment.
        let first = object(data.path())
            .parts()
            .next()
            .expect("a segment")
            .as_ref()
            .to_string();
        assert_eq!(delimited(None).await, (vec![], vec![Path::from(first)]));

        // Reads are not limited to the listing: a file written since is read from disk.
        let late = view.get(&at("d/late.txt")).await.expect("get");
        assert_eq!(late.bytes().await.expect("bytes").as_ref(), b"late");

        // A view frozen within a scope lists and reads only what it kept.
        let scoped =
            ArchiveView::freeze_within(std::slice::from_ref(&root), |rel| rel.starts_with("d/"))
                .await
                .expect("freeze within");
        if let Err(e) = scoped.get(&at("d/b.txt")).await {
            panic!("{e}");
        }
        assert!(scoped.get(&at("a.txt")).await.is_err(), "not listed");
        assert!(
            scoped.get(&at("d/late.txt")).await.is_ok(),
            "listed: written before this freeze"
        );
    }

    #[tokio::test]
    async fn writes_are_refused() {
        let data = tempfile::tempdir().expect("tempdir");
        let file = data.path().join("t/x.txt");
        write_text(&file, "x");
        let mut view = ArchiveView::freeze(&[data.path().join("t")])
            .await
            .expect("freeze");
        view.add(&data.path().join("t/m.txt"), Bytes::from_static(b"m"))
            .await
            .expect("add");
        let x = object(&file);
        let m = object(&data.path().join("t/m.txt"));
        let other = object(&data.path().join("t/y.txt"));

        let refused = |r: object_store::Result<()>, what: &str| match r {
            Err(object_store::Error::NotSupported { source }) => {
                assert!(source.to_string().contains("read-only"), "{what}: {source}")
            }
            other => panic!("{what}: expected NotSupported, got {other:?}"),
        };
        refused(view.put(&other, "y".into()).await.map(drop), "put");
        refused(view.put(&x, "y".into()).await.map(drop), "put over");
        refused(view.put_multipart(&other).await.map(drop), "multipart");
        refused(view.delete(&x).await, "delete local");
        refused(view.delete(&m).await, "delete added");
        refused(view.copy(&x, &other).await, "copy");
        refused(
            view.copy_if_not_exists(&x, &other).await,
            "copy if not exists",
        );
        refused(view.rename(&m, &other).await, "rename");
        let deleted: Vec<_> = view
            .delete_stream(stream::iter([Ok(x.clone()), Ok(m.clone())]).boxed())
            .collect()
            .await;
        assert_eq!(deleted.len(), 2);
        for r in deleted {
            refused(r.map(drop), "delete_stream");
        }

        assert_eq!(std::fs::read(&file).expect("read"), b"x");
        assert!(!data.path().join("t/y.txt").exists());
        let listed: Vec<ObjectMeta> = view.list(None).try_collect().await.expect("list");
        assert_eq!(listed.len(), 2);
        let held = view.get(&m).await.expect("added file still held");
        assert_eq!(held.bytes().await.expect("bytes").as_ref(), b"m");
    }

    #[tokio::test]
    async fn names_in_gives_the_listed_names_directly_in_a_folder() {
        let data = tempfile::tempdir().expect("tempdir");
        let dir = data.path().join("spans/tenant=a/date=2025-01-01/hour=00");
        write_text(&dir.join("part-1.parquet"), "1");
        write_text(&dir.join("part-2.parquet.inprogress"), "2");
        write_text(&dir.join("sub/deeper.parquet"), "3");
        let missing = data.path().join("logs");
        let mut view = ArchiveView::freeze(&[data.path().join("spans"), missing.clone()])
            .await
            .expect("freeze skips a missing folder");
        write_text(&dir.join("part-3.parquet"), "late");

        assert_eq!(
            view.names_in(&dir),
            ["part-1.parquet", "part-2.parquet.inprogress"]
        );
        assert_eq!(view.names_in(&dir.join("sub")), ["deeper.parquet"]);
        assert_eq!(view.names_in(&missing), Vec::<String>::new());
        assert_eq!(
            view.names_in(&dir.join("part-1.parquet")),
            Vec::<String>::new()
        );
        assert_eq!(
            view.names_in(LocalPath::new("relative")),
            Vec::<String>::new()
        );

        view.add(&dir.join("part-0.parquet"), Bytes::from_static(b"0"))
            .await
            .expect("add");
        assert_eq!(
            view.names_in(&dir),
            [
                "part-0.parquet",
                "part-1.parquet",
                "part-2.parquet.inprogress"
            ]
        );

        let relative = view
            .add(LocalPath::new("spans/x.parquet"), Bytes::from_static(b"x"))
            .await;
        assert!(
            matches!(relative, Err(ViewError::Path { .. })),
            "{relative:?}"
        );
    }
}
