//! Query: SQL over the archive, and the view of one request as a tree.
//!
//! The archive's tables (`spans`, `logs`, `requests`, `alarms`) are registered with DataFusion as
//! listing tables over their folders, with the Hive partition columns `tenant`, `date` and
//! `hour`, so a predicate on them skips whole folders; row-group statistics and the bloom
//! filters on `trace_id` and `request_id` skip the rest. Only completed files are read (their
//! names end in `.parquet`; files being written end in `.parquet.inprogress`), so reading
//! while the daemon writes never sees a partial file. Beside them a session can read copies
//! of the rows a running daemon still buffers ([`fresh`], [`view`]; see `archive::write::snapshot`),
//! each row once. Everything here is read-only.

pub mod ddl;
pub mod fresh;
pub mod output;
pub mod trace;
pub mod view;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::listing::{
    ListingOptions, ListingTable, ListingTableConfig, ListingTableUrl,
};
use datafusion::datasource::MemTable;
use datafusion::execution::context::SessionContext;
use datafusion::prelude::SessionConfig;
use futures_util::StreamExt;

use crate::archive::layout::lock::ReadersLock;
use crate::archive::table::Table;
use crate::archive::write::snapshot::BufferedSet;
use fresh::{Freshen, Freshness};
use view::ArchiveView;

use crate::archive::store::remote::RemoteArchive;
use object_store::path::Path as ObjectPath;
use object_store::ObjectMeta;

/// Why a query could not run.
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    /// The data directory does not exist.
    #[error("data directory {0} does not exist (set --data-dir)")]
    NoDataDir(PathBuf),
    /// The SQL is not valid, names something unknown, or failed while running.
    #[error("{0}")]
    Sql(String),
    /// Writing the output failed.
    #[error("cannot write the output: {0}")]
    Output(String),
    /// No request matches the id.
    #[error("no request or trace {0:?} in the archive")]
    NotFound(String),
}

impl From<datafusion::error::DataFusionError> for QueryError {
    fn from(e: datafusion::error::DataFusionError) -> Self {
        // DataFusion wraps errors in context layers; the innermost message says what is wrong.
        QueryError::Sql(e.find_root().to_string())
    }
}

impl QueryError {
    /// The file a vanished-file error names (as the object store names it).
    pub fn vanished_path(&self) -> Option<String> {
        let QueryError::Sql(m) = self else {
            return None;
        };
        let rest = &m[m.find("Object at location ")? + "Object at location ".len()..];
        Some(rest[..rest.find(" not found")?].to_string())
    }

    /// True when a file listed for the query was gone when it was read: a compaction swapped
    /// its partition folder in between (see `archive::compact`). Listing again finds the
    /// merged file; a query failing so is worth another try.
    pub fn is_vanished_file(&self) -> bool {
        match self {
            // The local object store's NotFound ("Object at location … not found: No such
            // file or directory"), not a planning error such as "table 'x' not found".
            QueryError::Sql(m) => {
                let m = m.to_ascii_lowercase();
                m.contains("no such file or directory")
                    || (m.contains("object at location") && m.contains("not found"))
            }
            _ => false,
        }
    }
}

/// Tries of a query whose listed files a compaction swapped away meanwhile: each lists again.
const VANISHED_TRIES: u32 = 4;

/// Runs `work` on a fresh session over the archive under `data_dir`, again (with a fresh
/// listing, up to [`VANISHED_TRIES`] in all) if a file vanished under it. With
/// [`Freshen::Copies`] the session also reads copies of the rows the daemon buffers, taken
/// after the readers' lock and before the listing (see `archive::write::snapshot`); with
/// [`Freshen::Flush`] the daemon writes them out first. Returns how asking the daemon went.
pub async fn with_session<T, F, Fut>(
    data_dir: &Path,
    freshen: Freshen,
    scope: &TenantScope,
    work: F,
) -> Result<(T, Freshness), QueryError>
where
    F: FnMut(SessionContext) -> Fut,
    Fut: std::future::Future<Output = Result<T, QueryError>>,
{
    if !data_dir.is_dir() {
        return Err(QueryError::NoDataDir(data_dir.to_path_buf()));
    }
    let freshness = std::sync::Mutex::new(match freshen {
        Freshen::Flush => fresh::flush_daemon(data_dir).await,
        _ => Freshness::NoDaemon,
    });
    let t = with_session_copying(
        data_dir,
        scope,
        || async {
            if freshen == Freshen::Copies {
                let (copies, how) = fresh::buffered_rows(data_dir).await;
                *freshness
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = how;
                copies
            } else {
                None
            }
        },
        work,
    )
    .await?;
    let freshness = freshness
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    Ok((t, freshness))
}

/// Runs `work` on a fresh session over the archive under `data_dir` with the rows `copies`
/// gives beside the files (inside the daemon: taken from its writers, not over HTTP), again
/// (with fresh copies and a fresh listing, up to [`VANISHED_TRIES`] in all) if a file
/// vanished under it.
pub async fn with_session_copying<T, F, Fut, C, CopiesFut>(
    data_dir: &Path,
    scope: &TenantScope,
    mut copies: C,
    mut work: F,
) -> Result<T, QueryError>
where
    F: FnMut(SessionContext) -> Fut,
    Fut: std::future::Future<Output = Result<T, QueryError>>,
    C: FnMut() -> CopiesFut,
    CopiesFut: std::future::Future<Output = Option<BufferedSet>>,
{
    let mut tries = 0;
    loop {
        tries += 1;
        // Held while listing and reading: no compaction swaps a listed file away meanwhile
        // (other readers of the archive retry instead).
        let readers = ReadersLock::shared(data_dir);
        let ctx = session_scoped(data_dir, copies().await, scope).await?;
        let result = work(ctx).await;
        drop(readers);
        match result {
            Err(e) if tries < VANISHED_TRIES && e.is_vanished_file() => continue,
            r => return r,
        }
    }
}

/// Where a session over the archive in object storage finds it (the scheme is ours: only
/// the view registered under it answers).
const REMOTE_URL: &str = "toolwatch-archive://store";

/// Runs `work` on a session over the archive in object storage (`toolwatch query --url`):
/// the files its manifests record as live when the session starts, of the tenants `scope`
/// admits. Again with a fresh listing (up to [`VANISHED_TRIES`] in all) if a file was
/// deleted under it: a removal's object goes `storage.delete_delay` after the removal.
/// Rows a daemon still buffers are not there (they are not uploaded yet). A file the
/// manifests record as live that is not in the store (lost, deleted by hand: `verify --url`
/// names it) is left out after a fresh listing still names it; returns those left out, for
/// the caller to warn that their rows are missing from the answer.
pub async fn with_remote_session<T, F, Fut>(
    remote: &RemoteArchive,
    scope: &TenantScope,
    mut work: F,
) -> Result<(T, Vec<String>), QueryError>
where
    F: FnMut(SessionContext) -> Fut,
    Fut: std::future::Future<Output = Result<T, QueryError>>,
{
    let mut missing = std::collections::BTreeSet::new();
    let mut vanished_once: Option<String> = None;
    let mut tries = 0;
    loop {
        tries += 1;
        let ctx = remote_session(remote, scope, &missing).await?;
        match work(ctx).await {
            Err(e) if tries < REMOTE_TRIES && e.is_vanished_file() => {
                let Some(path) = e.vanished_path().map(|k| remote.archive_path(&k)) else {
                    continue;
                };
                // Vanished twice in a row, across a fresh listing: not a deletion the
                // manifests record, but a file missing from the store.
                if vanished_once.as_deref() == Some(path.as_str()) {
                    missing.insert(path);
                    vanished_once = None;
                } else {
                    vanished_once = Some(path);
                }
            }
            r => return r.map(|t| (t, missing.into_iter().collect())),
        }
    }
}

/// Tries of a query over the store: a vanished file costs one (a fresh listing), a missing
/// one two.
const REMOTE_TRIES: u32 = 16;

/// A session over the live files of the archive in object storage `remote`.
pub async fn remote_session(
    remote: &RemoteArchive,
    scope: &TenantScope,
    missing: &std::collections::BTreeSet<String>,
) -> Result<SessionContext, QueryError> {
    let live = remote
        .live_files()
        .await
        .map_err(|e| QueryError::Sql(e.to_string()))?;
    let files: Vec<ObjectMeta> = live
        .into_iter()
        .filter(|f| {
            f.path
                .split_once('/')
                .is_some_and(|(_, rest)| scope.admits(rest))
                && !missing.contains(&f.path)
        })
        // As the uploader keys them (parsed: `%XX` escapes stay); a path no key can hold
        // was never uploaded.
        .filter_map(|f| {
            Some(ObjectMeta {
                location: ObjectPath::parse(&f.path).ok()?,
                last_modified: chrono::DateTime::from_timestamp_nanos(f.time_ns),
                size: f.bytes,
                e_tag: None,
                version: None,
            })
        })
        .collect();
    let ctx = new_context();
    let url = datafusion::execution::object_store::ObjectStoreUrl::parse(REMOTE_URL)?;
    ctx.register_object_store(
        url.as_ref(),
        Arc::new(ArchiveView::over(remote.under_prefix(), files)),
    );
    for &table in TABLES {
        let url = ListingTableUrl::parse(format!("{REMOTE_URL}/{}/", table.as_str()))?;
        register_listing(&ctx, url, table)?;
    }
    Ok(ctx)
}

/// Which tenants a session may read: every one, or only some. A scoped session lists only
/// those tenants' partition folders (and the daemon's buffered rows of those tenants) and
/// cannot open any other file, whatever its SQL says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TenantScope(Option<std::collections::BTreeSet<String>>);

impl TenantScope {
    /// Every tenant.
    pub fn all() -> TenantScope {
        TenantScope(None)
    }

    /// Only `tenants` (none at all when empty).
    pub fn only<I: IntoIterator<Item = String>>(tenants: I) -> TenantScope {
        TenantScope(Some(tenants.into_iter().collect()))
    }

    /// True when some tenants are left out.
    pub fn is_scoped(&self) -> bool {
        self.0.is_some()
    }

    /// The tenants admitted, or `None` for every tenant.
    pub fn tenants(&self) -> Option<&std::collections::BTreeSet<String>> {
        self.0.as_ref()
    }

    /// This scope narrowed to `tenants`.
    pub fn within(&self, tenants: &[String]) -> TenantScope {
        TenantScope(Some(
            tenants
                .iter()
                .filter(|t| self.admits_tenant(t))
                .cloned()
                .collect(),
        ))
    }

    /// Whether `tenant`'s rows may be read.
    pub fn admits_tenant(&self, tenant: &str) -> bool {
        self.0.as_ref().is_none_or(|t| t.contains(tenant))
    }

    /// Whether a file at `relative` (to its table's folder: `tenant=<T>/date=…/…`) is in scope.
    fn admits(&self, relative: &str) -> bool {
        let Some(tenants) = &self.0 else {
            return true;
        };
        let first = relative.split('/').next().unwrap_or("");
        tenants.iter().any(|t| {
            first.strip_prefix("tenant=")
                == Some(crate::archive::layout::partition::encode_partition_value(t).as_str())
        })
    }
}

/// The tables `toolwatch query` registers, with their schemas.
pub const TABLES: &[Table] = &Table::ALL;

/// A table's schema, from the stage owning its rows (the archive's for spans and logs).
pub fn table_schema(table: Table) -> SchemaRef {
    match table {
        Table::Spans => crate::archive::table::schema::spans_schema(),
        Table::Logs => crate::archive::table::schema::logs_schema(),
        Table::Requests => crate::assemble::rows::requests_schema(),
        Table::Alarms => crate::budget::rows::alarms_schema(),
        Table::Findings => crate::findings::rows::findings_schema(),
    }
}

/// A DataFusion session with the archive under `data_dir` registered, as it is on disk.
pub async fn session(data_dir: &Path) -> Result<SessionContext, QueryError> {
    session_with(data_dir, None).await
}

/// A DataFusion session with the archive under `data_dir` registered, and with `copies` of
/// the daemon's buffers beside its files (those of buffers written out since dropped).
pub async fn session_with(
    data_dir: &Path,
    copies: Option<BufferedSet>,
) -> Result<SessionContext, QueryError> {
    session_scoped(data_dir, copies, &TenantScope::all()).await
}

/// [`session_with`], reading only the tenants `scope` admits.
pub async fn session_scoped(
    data_dir: &Path,
    copies: Option<BufferedSet>,
    scope: &TenantScope,
) -> Result<SessionContext, QueryError> {
    if !data_dir.is_dir() {
        return Err(QueryError::NoDataDir(data_dir.to_path_buf()));
    }
    // The view's paths and the tables' URLs must name files alike: absolute, links resolved.
    let data_dir = &std::fs::canonicalize(data_dir)
        .map_err(|_| QueryError::NoDataDir(data_dir.to_path_buf()))?;
    let ctx = new_context();
    if copies.is_some() || scope.is_scoped() {
        register_view(&ctx, data_dir, copies, scope).await?;
    }
    for &table in TABLES {
        register(&ctx, data_dir, table)?;
    }
    Ok(ctx)
}

/// A session as every query runs in.
fn new_context() -> SessionContext {
    let mut config = SessionConfig::new().with_information_schema(true);
    // Row filters use the page indexes and skip decoding rows that cannot match.
    config.options_mut().execution.parquet.pushdown_filters = true;
    config.options_mut().execution.parquet.reorder_filters = true;
    SessionContext::new_with_config(config)
}

/// Serves the archive's files to the session through a view that lists the table folders
/// now (only the tenants `scope` admits), plus the copies of buffers not written out by then.
async fn register_view(
    ctx: &SessionContext,
    data_dir: &Path,
    copies: Option<BufferedSet>,
    scope: &TenantScope,
) -> Result<(), QueryError> {
    let dirs: Vec<PathBuf> = TABLES.iter().map(|t| data_dir.join(t.as_str())).collect();
    let frozen = if scope.is_scoped() {
        ArchiveView::freeze_within(&dirs, |relative| scope.admits(relative)).await
    } else {
        ArchiveView::freeze(&dirs).await
    };
    let mut view = frozen.map_err(|e| QueryError::Sql(e.to_string()))?;
    let copies = match copies {
        Some(c) => {
            c.without_written(|dir| view.names_in(&data_dir.join(dir)))
                .files
        }
        None => Vec::new(),
    };
    // A copy's path is `<table>/tenant=<T>/…`.
    let in_scope = |path: &str| {
        path.split_once('/')
            .is_some_and(|(_, rest)| scope.admits(rest))
    };
    for f in copies.into_iter().filter(|f| in_scope(&f.entry.path)) {
        view.add(&data_dir.join(&f.entry.path), f.data)
            .await
            .map_err(|e| QueryError::Sql(e.to_string()))?;
    }
    let local = datafusion::execution::object_store::ObjectStoreUrl::local_filesystem();
    ctx.register_object_store(local.as_ref(), Arc::new(view));
    Ok(())
}

fn register(ctx: &SessionContext, data_dir: &Path, table: Table) -> Result<(), QueryError> {
    let dir = data_dir.join(table.as_str());
    let schema = table_schema(table);
    if !dir.is_dir() {
        // No rows yet: the table still exists, so queries name it without error.
        let empty = MemTable::try_new(with_partition_columns(&schema), vec![vec![]])?;
        ctx.register_table(table.as_str(), Arc::new(empty))?;
        return Ok(());
    }
    let url = ListingTableUrl::parse(format!("{}/", dir.display()))?;
    register_listing(ctx, url, table)
}

/// Registers `table` as the Hive-partitioned Parquet files under `url`.
fn register_listing(
    ctx: &SessionContext,
    url: ListingTableUrl,
    table: Table,
) -> Result<(), QueryError> {
    let schema = table_schema(table);
    let options = ListingOptions::new(Arc::new(ParquetFormat::default()))
        .with_file_extension(".parquet")
        .with_table_partition_cols(partition_columns());
    let config = ListingTableConfig::new(url)
        .with_listing_options(options)
        .with_schema(schema);
    ctx.register_table(table.as_str(), Arc::new(ListingTable::try_new(config)?))?;
    Ok(())
}

fn partition_columns() -> Vec<(String, DataType)> {
    ["tenant", "date", "hour"]
        .iter()
        .map(|c| (c.to_string(), DataType::Utf8))
        .collect()
}

fn with_partition_columns(schema: &SchemaRef) -> SchemaRef {
    let mut fields: Vec<_> = schema.fields().iter().cloned().collect();
    for (name, ty) in partition_columns() {
        fields.push(Arc::new(datafusion::arrow::datatypes::Field::new(
            name, ty, false,
        )));
    }
    Arc::new(datafusion::arrow::datatypes::Schema::new(fields))
}

/// Runs `sql`, calling `progress` with the rows seen so far after each batch.
pub async fn run(
    ctx: &SessionContext,
    sql: &str,
    mut progress: impl FnMut(u64),
) -> Result<(SchemaRef, Vec<RecordBatch>), QueryError> {
    // Read-only: no CREATE EXTERNAL TABLE (it could name any file), no INSERT, no SET.
    let options = datafusion::execution::context::SQLOptions::new()
        .with_allow_ddl(false)
        .with_allow_dml(false)
        .with_allow_statements(false);
    let df = ctx.sql_with_options(sql, options).await?;
    let schema: SchemaRef = Arc::new(df.schema().as_arrow().clone());
    let mut stream = df.execute_stream().await?;
    let mut batches = Vec::new();
    let mut rows = 0u64;
    while let Some(batch) = stream.next().await {
        let batch = batch?;
        rows += batch.num_rows() as u64;
        progress(rows);
        batches.push(batch);
    }
    Ok((schema, batches))
}

/// Escapes a value for a SQL string literal.
pub fn sql_string(value: &str) -> String {
    format!("'{}'", value.replace('\'', "''"))
}

#[cfg(test)]
mod scope_tests {
    use super::TenantScope;

    #[test]
    fn a_scope_admits_its_tenants_folders_only() {
        let s = TenantScope::only(["acme".to_string(), "a/b".to_string()]);
        assert!(s.admits("tenant=acme/date=2026-01-01/hour=00/part-1.parquet"));
        assert!(s.admits("tenant=a%2Fb/date=2026-01-01/hour=00/x.parquet"));
        assert!(!s.admits("tenant=acmex/date=2026-01-01/hour=00/x.parquet"));
        assert!(!s.admits("tenant=globex/x.parquet"));
        assert!(!s.admits("x.parquet"));
        assert!(TenantScope::all().admits("tenant=globex/x.parquet"));
        assert!(!TenantScope::only(Vec::new()).admits("tenant=acme/x.parquet"));
    }
}

#[cfg(test)]
mod vanished_tests {
    use super::QueryError;

    #[test]
    fn only_a_missing_file_is_worth_a_retry() {
        let gone = QueryError::Sql("Object at location /d/spans/tenant=a/p.parquet not found: No such file or directory (os error 2)".into());
        assert!(gone.is_vanished_file());
        assert!(!QueryError::Sql("table 'nope' not found".into()).is_vanished_file());
        assert!(!QueryError::NotFound("req-1".into()).is_vanished_file());
    }
}

#[cfg(test)]
mod doc_tests {
    use super::{table_schema, TABLES};

    /// Every column of every table has its row in `schemas/archive.md`, in order (here, where
    /// every stage's schema is in sight).
    #[test]
    fn every_column_is_documented_in_order() {
        let doc = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("schemas/archive.md"),
        )
        .expect("schemas/archive.md");
        for &t in TABLES {
            let (table, schema) = (t.as_str(), table_schema(t));
            let start = doc
                .find(&format!("## `{table}`"))
                .unwrap_or_else(|| panic!("no section for {table}"));
            let section = &doc[start..];
            let end = section[3..].find("\n## ").map_or(section.len(), |e| e + 3);
            let section = &section[..end];
            for (i, field) in schema.fields().iter().enumerate() {
                let row = format!("| {} | `{}` |", i + 1, field.name());
                assert!(section.contains(&row), "{table}: missing {row}");
            }
        }
    }
}

#[cfg(test)]
mod copies_tests {
    use std::collections::BTreeSet;

    use datafusion::arrow::array::{Array, StringArray};
    use proptest::prelude::*;

    use super::{run, session_with};
    use crate::archive::write::snapshot::BufferedSet;
    use crate::archive::write::test_archive;
    use crate::event::{fixtures, EventBatch, HexId, SpanRecord};

    const T0: i64 = 1_800_000_000_000_000_000;

    #[derive(Debug, Clone)]
    enum Step {
        /// `n` new spans of tenant `t` in one journal record.
        Append(u8, u8),
        /// Every buffer written out.
        WriteAll,
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            4 => (0u8..3, 1u8..12).prop_map(|(t, n)| Step::Append(t, n)),
            1 => Just(Step::WriteAll),
        ]
    }

    fn span_ids(data: &std::path::Path, copies: BufferedSet) -> Vec<String> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let ctx = session_with(data, Some(copies)).await.expect("session");
            let (_, batches) = run(&ctx, "SELECT span_id FROM spans", |_| {})
                .await
                .expect("query");
            let mut ids = Vec::new();
            for b in batches {
                let col = b
                    .column(0)
                    .as_any()
                    .downcast_ref::<StringArray>()
                    .expect("strings");
                ids.extend((0..col.len()).map(|i| col.value(i).to_string()));
            }
            ids
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        /// Whatever buffers fill, go out over budget or are written out before and after the
        /// copies are taken: copies then listing read every row appended before the copies,
        /// once, and nothing that was never appended.
        #[test]
        fn copies_and_files_together_read_every_row_once(
            steps in prop::collection::vec(step(), 1..16),
            at in 0usize..17,
        ) {
            let dir = tempfile::tempdir().expect("tempdir");
            // Room for a few dozen spans: the largest buffers go out on their own.
            let mut a = test_archive(dir.path(), 5, 24 * 1024);
            let (mut next, mut seq) = (0u64, 0u64);
            let (mut before, mut all) = (BTreeSet::new(), BTreeSet::new());
            let mut copies = None;
            let at = at.min(steps.len());
            for (i, s) in steps.iter().enumerate() {
                if i == at {
                    copies = Some(a.snapshot());
                    before = all.clone();
                }
                match *s {
                    Step::Append(t, n) => {
                        seq += 1;
                        let spans: Vec<SpanRecord> = (0..u64::from(n)).map(|k| SpanRecord {
                            tenant: format!("t{t}"),
                            span_id: (next + k).to_be_bytes(),
                            start_ns: T0,
                            ..fixtures::span()
                        }).collect();
                        for k in 0..u64::from(n) {
                            all.insert(HexId::of(&(next + k).to_be_bytes()).as_str().to_string());
                        }
                        next += u64::from(n);
                        a.append(Some(seq), &EventBatch { spans, logs: Vec::new() });
                    }
                    Step::WriteAll => a.complete_all(),
                }
            }
            let copies = match copies {
                Some(c) => c,
                None => { before = all.clone(); a.snapshot() }
            };
            let ids = span_ids(dir.path(), BufferedSet { records: seq, files: copies });
            let read: BTreeSet<String> = ids.iter().cloned().collect();
            prop_assert_eq!(read.len(), ids.len(), "a row read twice");
            prop_assert!(before.is_subset(&read), "missing: {:?}", before.difference(&read).collect::<Vec<_>>());
            prop_assert!(read.is_subset(&all));
        }
    }
}
