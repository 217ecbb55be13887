//! A partition's completed files: listed, read whole (and hashed, for the manifest), and the
//! files a merge or a rewrite writes: sorted by the table's key or as they are, hashed as their
//! bytes go out, fsynced.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use arrow::array::ArrayRef;
use arrow::compute::SortColumn;
use arrow::record_batch::RecordBatch;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ArrowWriter;

use crate::archive::error::ArchiveError;
use crate::archive::layout::partition::{is_completed, IN_PROGRESS_SUFFIX};
use crate::archive::table::encoding::{writer_properties, FileSettings};
use crate::archive::table::Table;

/// A completed file of a partition folder.
#[derive(Debug, Clone)]
pub(super) struct FileInfo {
    pub(super) name: String,
    pub(super) path: PathBuf,
    pub(super) bytes: u64,
    pub(super) modified: SystemTime,
    /// Hex SHA-256 of the bytes, once read for a merge.
    pub(super) sha256: String,
}

/// The completed files of a partition folder; `None` when it holds anything else than files
/// (a folder inside is not ours to move) or is gone.
pub(super) fn list(dir: &Path) -> Result<Option<Vec<FileInfo>>, ArchiveError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(ArchiveError::io(dir, e)),
    };
    let mut out = Vec::new();
    for e in entries {
        let e = e.map_err(|err| ArchiveError::io(dir, err))?;
        let meta = e
            .metadata()
            .map_err(|err| ArchiveError::io(&e.path(), err))?;
        if meta.is_dir() {
            return Ok(None);
        }
        let Some(name) = e.file_name().to_str().map(str::to_string) else {
            return Ok(None);
        };
        // A dead writer's unfinished file is not data: it is left out of the new folder.
        if name.ends_with(IN_PROGRESS_SUFFIX) {
            continue;
        }
        out.push(FileInfo {
            path: e.path(),
            bytes: meta.len(),
            modified: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
            name,
            sha256: String::new(),
        });
    }
    // Only completed Parquet files are merged; any other file is linked across unchanged.
    Ok(Some(out))
}

/// The completed files of a partition folder, by name; `None` when it holds a folder.
pub(super) fn completed_files(dir: &Path) -> Result<Option<Vec<PathBuf>>, ArchiveError> {
    let Some(files) = list(dir)? else {
        return Ok(None);
    };
    let mut out: Vec<PathBuf> = files
        .into_iter()
        .filter(|f| is_completed(&f.name))
        .map(|f| f.path)
        .collect();
    out.sort();
    Ok(Some(out))
}

/// The Arrow schema of the newest completed file of `files` whose footer can be read (by
/// modification time, then name); `None` if there is none.
pub(super) fn newest_schema(
    files: &[FileInfo],
) -> Result<Option<arrow::datatypes::SchemaRef>, ArchiveError> {
    let mut newest: Vec<&FileInfo> = files.iter().filter(|f| is_completed(&f.name)).collect();
    newest.sort_by(|a, b| (b.modified, &b.name).cmp(&(a.modified, &a.name)));
    let mut first_error = None;
    for f in newest {
        let opened = File::open(&f.path)
            .map_err(|e| ArchiveError::io(&f.path, e))
            .and_then(|file| {
                ParquetRecordBatchReaderBuilder::try_new(file).map_err(ArchiveError::Parquet)
            });
        match opened {
            Ok(builder) => return Ok(Some(Arc::clone(builder.schema()))),
            // A damaged file does not decide the schema; the next newest does.
            Err(e) => {
                tracing::warn!(path = %f.path.display(), error = %e, "archive file unreadable");
                first_error.get_or_insert(e);
            }
        }
    }
    first_error.map_or(Ok(None), Err)
}

/// A completed file's batches, if it has `schema`, and the hex SHA-256 of its bytes (for the
/// manifest): read once, hashed and decoded from memory (inputs are small files).
pub(super) fn read_file(
    path: &Path,
    schema: &arrow::datatypes::SchemaRef,
) -> Result<Option<(Vec<RecordBatch>, String)>, ArchiveError> {
    if !path
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(is_completed)
    {
        return Ok(None);
    }
    let (builder, sha256) = open_hashed(path)?;
    if builder.schema().fields() != schema.fields() {
        return Ok(None);
    }
    Ok(Some((decode(builder)?, sha256)))
}

/// A completed file's schema, batches and the hex SHA-256 of its bytes, read once.
pub(super) fn read_whole(
    path: &Path,
) -> Result<(arrow::datatypes::SchemaRef, Vec<RecordBatch>, String), ArchiveError> {
    let (builder, sha256) = open_hashed(path)?;
    let schema = Arc::clone(builder.schema());
    Ok((schema, decode(builder)?, sha256))
}

/// A file read into memory and hashed, ready to decode.
fn open_hashed(
    path: &Path,
) -> Result<(ParquetRecordBatchReaderBuilder<bytes::Bytes>, String), ArchiveError> {
    let bytes = bytes::Bytes::from(std::fs::read(path).map_err(|e| ArchiveError::io(path, e))?);
    let sha256 = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&bytes));
    let builder = ParquetRecordBatchReaderBuilder::try_new(bytes).map_err(ArchiveError::Parquet)?;
    Ok((builder, sha256))
}

/// Every batch of a file.
fn decode(
    builder: ParquetRecordBatchReaderBuilder<bytes::Bytes>,
) -> Result<Vec<RecordBatch>, ArchiveError> {
    let reader = builder
        .with_batch_size(8192)
        .build()
        .map_err(ArchiveError::Parquet)?;
    let mut out = Vec::new();
    for b in reader {
        out.push(b?);
    }
    Ok(out)
}

/// Writes `batches` (of `schema`) to `path` as they are, fsynced; returns (bytes, rows,
/// hex SHA-256).
pub(super) fn write_in_order(
    path: &Path,
    table: Table,
    schema: &arrow::datatypes::SchemaRef,
    batches: &[RecordBatch],
    settings: &FileSettings,
) -> Result<(u64, u64, String), ArchiveError> {
    let mut writer = open_writer(path, table, schema, settings)?;
    let mut rows = 0u64;
    for b in batches {
        writer.write(b).map_err(ArchiveError::Parquet)?;
        rows += b.num_rows() as u64;
    }
    finish_file(path, writer).map(|(bytes, sha)| (bytes, rows, sha))
}

/// A file being written, hashed as its bytes go out (the manifest needs the hash; reading
/// the file back for it would read every merged byte twice).
struct HashedFile {
    file: File,
    hasher: sha2::Sha256,
    bytes: u64,
}

impl std::io::Write for HashedFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.file.write(buf)?;
        sha2::Digest::update(&mut self.hasher, &buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

/// A Parquet writer of `table`'s settings into a new file at `path`.
fn open_writer(
    path: &Path,
    table: Table,
    schema: &arrow::datatypes::SchemaRef,
    settings: &FileSettings,
) -> Result<ArrowWriter<HashedFile>, ArchiveError> {
    let file = File::create(path).map_err(|e| ArchiveError::io(path, e))?;
    let props = writer_properties(settings, table)?;
    let out = HashedFile {
        file,
        hasher: <sha2::Sha256 as sha2::Digest>::new(),
        bytes: 0,
    };
    ArrowWriter::try_new(out, Arc::clone(schema), Some(props)).map_err(ArchiveError::Parquet)
}

/// Closes a writer's file, fsynced; returns its size and hex SHA-256.
fn finish_file(
    path: &Path,
    writer: ArrowWriter<HashedFile>,
) -> Result<(u64, String), ArchiveError> {
    let out = writer.into_inner().map_err(ArchiveError::Parquet)?;
    out.file.sync_all().map_err(|e| ArchiveError::io(path, e))?;
    let sha = hex::encode(sha2::Digest::finalize(out.hasher));
    Ok((out.bytes, sha))
}

/// The sort key of a table's rows.
fn sort_columns(table: Table) -> &'static [&'static str] {
    match table {
        Table::Spans => &["trace_id", "start_time"],
        Table::Logs => &["trace_id", "time"],
        Table::Requests => &["start_time", "request_id"],
        Table::Alarms => &["time", "alarm_id"],
        Table::Findings => &["time", "finding_id"],
    }
}

/// Writes `batches` (of `schema`) to `path` sorted by the table's key, fsynced; returns
/// (bytes, rows).
pub(super) fn write_sorted(
    path: &Path,
    table: Table,
    schema: &arrow::datatypes::SchemaRef,
    batches: &[RecordBatch],
    settings: &FileSettings,
) -> Result<(u64, u64, String), ArchiveError> {
    let mut keys = Vec::new();
    for name in sort_columns(table) {
        let idx = schema.index_of(name)?;
        let parts: Vec<&dyn arrow::array::Array> =
            batches.iter().map(|b| b.column(idx).as_ref()).collect();
        let values: ArrayRef = if parts.is_empty() {
            arrow::array::new_empty_array(schema.field(idx).data_type())
        } else {
            arrow::compute::concat(&parts)?
        };
        keys.push(SortColumn {
            values,
            options: None,
        });
    }
    let order = arrow::compute::lexsort_to_indices(&keys, None)?;
    // Global row number to (batch, row).
    let mut starts = Vec::with_capacity(batches.len());
    let mut n = 0usize;
    for b in batches {
        starts.push(n);
        n += b.num_rows();
    }
    let locate = |global: usize| -> (usize, usize) {
        let b = starts.partition_point(|&s| s <= global) - 1;
        (b, global - starts[b])
    };
    let mut writer = open_writer(path, table, schema, settings)?;
    let refs: Vec<&RecordBatch> = batches.iter().collect();
    let chunk = settings.row_group_rows.clamp(1, 65536);
    for slice in order.values().chunks(chunk) {
        let indices: Vec<(usize, usize)> = slice.iter().map(|&g| locate(g as usize)).collect();
        let out = arrow::compute::interleave_record_batch(&refs, &indices)?;
        writer.write(&out).map_err(ArchiveError::Parquet)?;
    }
    finish_file(path, writer).map(|(bytes, sha)| (bytes, n as u64, sha))
}
