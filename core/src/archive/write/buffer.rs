//! Rows waiting in memory for their partition's next file, under one budget for the archive.
//!
//! Each partition with rows not yet in a completed file has a [`PartitionBuffer`]: the
//! table's Arrow builders (the [`TableRows`] of the stage owning the table) collecting its
//! newest rows and, once they hold a batch, a Parquet writer encoding into memory. A partition's file is thus built as rows come (zstd pages
//! take a fraction of the rows' memory) and written out in one piece when it completes: no
//! file is open between records, however many partitions there are. The memory each buffer
//! holds (its builders' values, the encoder's buffered pages and the encoded bytes) is added
//! to a [`SharedBudget`] that every [`super::Archive`] of one data directory shares, so the
//! archive as a whole holds at most about `archive.buffer_bytes`.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Instant;

use arrow::datatypes::{Schema, SchemaRef};
use parquet::arrow::{
    encode_arrow_schema, ArrowSchemaConverter, ArrowWriter, ARROW_SCHEMA_META_KEY,
};
use parquet::basic::{ColumnOrder, Compression};
use parquet::file::metadata::{FileMetaData, KeyValue, ParquetMetaData, ParquetMetaDataWriter};
use parquet::file::properties::WriterProperties;

use crate::archive::error::ArchiveError;
use crate::archive::table::rows::TableRows;
use crate::memory::{Holder, MemoryBudget};

/// A copy of buffered rows: a complete Parquet file and its row count.
pub type ParquetCopy = (Vec<u8>, u64);

/// The rows of one partition not yet in a completed file.
pub struct PartitionBuffer {
    /// Makes the table's empty builders.
    new_rows: fn() -> Box<dyn TableRows>,
    /// The newest rows, not yet encoded; `None` once encoded, so an idle partition holds no
    /// builders.
    rows: Option<Box<dyn TableRows>>,
    /// The partition's file so far, encoded in memory (created with the first batch).
    writer: Option<ArrowWriter<Vec<u8>>>,
    /// The schema `writer` encodes (the encoder does not say).
    schema: Option<SchemaRef>,
    /// Memory of `rows` at the last count.
    rows_bytes: usize,
    /// Memory of `writer` (buffered pages, encoded bytes and its columns' codecs) after its
    /// last batch.
    encoded_bytes: usize,
    /// Memory of `writer`'s column encoders that the encoder does not count, while a row
    /// group is in progress (the encoders live as long as it does).
    codec_bytes: usize,
    /// Rows in this buffer, encoded or not.
    total_rows: usize,
    /// First and last journal record with rows here.
    pub records: Option<(u64, u64)>,
    /// When the first row arrived: the buffer is written out at `max_file_age` after this.
    pub created: Instant,
    /// The writer's number for this buffer, in its file's name once written (so a reader
    /// holding a [`PartitionBuffer::snapshot`] can tell when the file is there).
    pub sequence: u64,
}

impl PartitionBuffer {
    /// An empty buffer whose rows `new_rows` collects, created now, the writer's
    /// `sequence`th.
    pub fn new(
        new_rows: fn() -> Box<dyn TableRows>,
        now: Instant,
        sequence: u64,
    ) -> PartitionBuffer {
        PartitionBuffer {
            sequence,
            new_rows,
            rows: None,
            writer: None,
            schema: None,
            rows_bytes: 0,
            encoded_bytes: 0,
            codec_bytes: 0,
            total_rows: 0,
            records: None,
            created: now,
        }
    }

    /// Rows held.
    pub fn rows(&self) -> usize {
        self.total_rows
    }

    /// Memory held, in bytes.
    pub fn bytes(&self) -> usize {
        self.rows_bytes + self.encoded_bytes
    }

    /// Adds `n` rows with `fill` (of journal `records`, first and last, if any) and returns
    /// the change of the memory held. When the builders hold `batch_rows` rows or
    /// `batch_bytes` bytes, they are encoded. On an error the whole buffer is unusable (its
    /// builders may be out of step): the caller drops it and counts its rows as failed.
    pub fn add(
        &mut self,
        records: Option<(u64, u64)>,
        n: usize,
        fill: impl FnOnce(&mut dyn TableRows) -> Result<(), ArchiveError>,
        batch: (usize, usize),
        props: &WriterProperties,
    ) -> Result<isize, ArchiveError> {
        let before = self.bytes();
        // Counted first, so that after an error `rows` and `records` say what was at stake.
        self.total_rows += n;
        self.records = merge_records(self.records, records);
        let rows = self.rows.get_or_insert_with(self.new_rows);
        fill(rows.as_mut())?;
        self.rows_bytes = rows.approx_bytes();
        let (batch_rows, batch_bytes) = batch;
        if rows.len() >= batch_rows || self.rows_bytes >= batch_bytes {
            self.encode(props)?;
        }
        Ok(self.bytes() as isize - before as isize)
    }

    /// Ends the row group in progress, if any, in the in-memory file: its column encoders and
    /// the codec memory they hold go (the next batch starts a new row group). The cheapest
    /// relief of the memory budget: no file is written. Returns the change of memory held.
    pub fn close_row_group(&mut self) -> Result<isize, ArchiveError> {
        let before = self.bytes();
        if let Some(writer) = self.writer.as_mut().filter(|w| w.in_progress_rows() > 0) {
            writer.flush().map_err(ArchiveError::Parquet)?;
            self.encoded_bytes = writer_bytes(writer, self.codec_bytes);
        }
        Ok(self.bytes() as isize - before as isize)
    }

    /// Codec memory the buffer would give back by [`PartitionBuffer::close_row_group`].
    pub fn open_codec_bytes(&self) -> usize {
        match &self.writer {
            Some(w) if w.in_progress_rows() > 0 => self.codec_bytes,
            _ => 0,
        }
    }

    /// Encodes the builders' rows into the in-memory file.
    fn encode(&mut self, props: &WriterProperties) -> Result<(), ArchiveError> {
        // The builders stay: finished, they are empty, and keep what sizes the next batch.
        let Some(rows) = self.rows.as_mut() else {
            return Ok(());
        };
        self.rows_bytes = 0;
        if rows.is_empty() {
            return Ok(());
        }
        let batch = rows.finish()?;
        let writer = match &mut self.writer {
            Some(w) => w,
            slot => {
                self.schema = Some(batch.schema());
                self.codec_bytes = leaf_columns(&batch.schema())? * CODEC_BYTES_PER_COLUMN;
                slot.insert(new_writer(batch.schema(), props)?)
            }
        };
        writer.write(&batch).map_err(ArchiveError::Parquet)?;
        self.encoded_bytes = writer_bytes(writer, self.codec_bytes);
        Ok(())
    }

    /// Copies of the rows held, each a complete Parquet file with its row count: the encoded
    /// part (its row groups so far and a footer of its own) and the rows not yet encoded
    /// (uncompressed: it is read once). Rows the encoder holds in its current row group end
    /// that row group first, so while readers look often a file has more, smaller row groups.
    /// Returns the copies and the change of the memory held. On an error the buffer is left as
    /// it is: its write-out reports the failure.
    pub fn snapshot(
        &mut self,
        props: &WriterProperties,
    ) -> Result<(Vec<ParquetCopy>, isize), ArchiveError> {
        let before = self.bytes();
        let mut out = Vec::new();
        if let (Some(writer), Some(schema)) = (&mut self.writer, &self.schema) {
            if let Some(copy) = readable_copy(writer, schema, props)? {
                out.push(copy);
            }
            self.encoded_bytes = writer_bytes(writer, self.codec_bytes);
        }
        if let Some(rows) = self.rows.as_ref().filter(|r| !r.is_empty()) {
            let batch = rows.snapshot()?;
            let mut w = ArrowWriter::try_new(Vec::new(), batch.schema(), Some(copy_properties()))
                .map_err(ArchiveError::Parquet)?;
            w.write(&batch).map_err(ArchiveError::Parquet)?;
            out.push((
                w.into_inner().map_err(ArchiveError::Parquet)?,
                batch.num_rows() as u64,
            ));
        }
        Ok((out, self.bytes() as isize - before as isize))
    }

    /// The whole file: the remaining rows encoded, the footer written.
    pub fn into_file(mut self, props: &WriterProperties) -> Result<Vec<u8>, ArchiveError> {
        self.encode(props)?;
        match self.writer.take() {
            Some(w) => w.into_inner().map_err(ArchiveError::Parquet),
            // Only reached for a buffer that never got a row: an empty, valid file.
            None => new_writer((self.new_rows)().schema(), props)?
                .into_inner()
                .map_err(ArchiveError::Parquet),
        }
    }
}

/// The encoder's row groups so far as a file of their own, with its row count: the bytes
/// written and a footer naming those row groups. None before the first row group.
fn readable_copy(
    writer: &mut ArrowWriter<Vec<u8>>,
    schema: &Schema,
    props: &WriterProperties,
) -> Result<Option<ParquetCopy>, ArchiveError> {
    if writer.in_progress_rows() > 0 {
        writer.flush().map_err(ArchiveError::Parquet)?;
    }
    // The encoder writes through a buffer: everything up to the last row group into the Vec.
    writer
        .sync()
        .map_err(|e| ArchiveError::Parquet(parquet::errors::ParquetError::External(Box::new(e))))?;
    let groups = writer.flushed_row_groups();
    if groups.is_empty() {
        return Ok(None);
    }
    let descr = Arc::new(
        ArrowSchemaConverter::new()
            .convert(schema)
            .map_err(ArchiveError::Parquet)?,
    );
    let rows: i64 = groups.iter().map(|g| g.num_rows()).sum();
    // As the encoder's own footer does: every leaf column in its type's order, so readers
    // use the statistics; the Arrow schema, so they read the same Arrow types back.
    let orders = descr
        .columns()
        .iter()
        .map(|c| {
            ColumnOrder::TYPE_DEFINED_ORDER(ColumnOrder::sort_order_for_type(
                c.logical_type_ref(),
                c.converted_type(),
                c.physical_type(),
            ))
        })
        .collect();
    let kv = vec![KeyValue::new(
        ARROW_SCHEMA_META_KEY.to_string(),
        encode_arrow_schema(schema),
    )];
    let meta = ParquetMetaData::new(
        FileMetaData::new(
            props.writer_version().as_num(),
            rows,
            Some(props.created_by().to_string()),
            Some(kv),
            descr,
            Some(orders),
        ),
        groups.to_vec(),
    );
    let mut out = Vec::with_capacity(writer.inner().len() + 16 * 1024);
    out.extend_from_slice(writer.inner());
    // The row groups' offsets are from the file's start, where the copy starts too; no page
    // index or bloom filter is written yet (the encoder writes them at the end).
    ParquetMetaDataWriter::new(&mut out, &meta)
        .finish()
        .map_err(ArchiveError::Parquet)?;
    Ok(Some((out, rows.max(0) as u64)))
}

/// Writer properties of the copy of rows not yet encoded.
fn copy_properties() -> WriterProperties {
    WriterProperties::builder()
        .set_compression(Compression::UNCOMPRESSED)
        .build()
}

/// The journal records of `a` and `b` together (first, last).
fn merge_records(a: Option<(u64, u64)>, b: Option<(u64, u64)>) -> Option<(u64, u64)> {
    match (a, b) {
        (Some((f1, l1)), Some((f2, l2))) => Some((f1.min(f2), l1.max(l2))),
        (a, b) => a.or(b),
    }
}

/// A Parquet writer of files of `schema`, encoding into memory.
/// Resident memory of one column's encoder that the Parquet writer does not count, measured
/// (heaptrack, parquet 59, zstd level 3, 4,096-row batches): its zstd compressor (~44 KiB)
/// and its dictionary's interner (~20 KiB). (The codec also allocates a decompressor, ~96
/// KiB, that a writer never touches: not resident.) A thousand tenants' open partitions of a
/// 30-column table hold some 1.9 GiB of them, which the budget must see.
pub const CODEC_BYTES_PER_COLUMN: usize = 64 << 10;

/// Memory of an in-memory file's writer: what the encoder counts, the bytes so far, and the
/// codecs of a row group in progress.
fn writer_bytes(writer: &ArrowWriter<Vec<u8>>, codec_bytes: usize) -> usize {
    let codecs = if writer.in_progress_rows() > 0 {
        codec_bytes
    } else {
        0
    };
    writer.memory_size() + writer.inner().capacity() + codecs
}

/// Leaf columns of `schema` in Parquet (one per primitive value, nested ones included).
fn leaf_columns(schema: &Schema) -> Result<usize, ArchiveError> {
    Ok(ArrowSchemaConverter::new()
        .convert(schema)
        .map_err(ArchiveError::Parquet)?
        .num_columns())
}

fn new_writer(
    schema: SchemaRef,
    props: &WriterProperties,
) -> Result<ArrowWriter<Vec<u8>>, ArchiveError> {
    ArrowWriter::try_new(Vec::new(), schema, Some(props.clone())).map_err(ArchiveError::Parquet)
}

/// Writers of one budget that publish their largest buffer; a writer beyond these relieves
/// the budget as if it were alone.
const RANKED_WRITERS: usize = 8;

/// The memory budget shared by every archive writer of one data directory.
///
/// When the writers together hold more than the budget, the largest buffers of *all* writers
/// go first: each registered writer publishes the size of its largest buffer, and a writer
/// whose largest is smaller than another's leaves the relief to that one. Without this, the
/// writer of request summaries (a thousand small buffers at a thousand tenants) wrote all of
/// them whenever the span writer's rows pushed the total over, five small files per tenant
/// in a 20 s run.
#[derive(Debug)]
pub struct SharedBudget {
    limit: usize,
    used: AtomicUsize,
    /// Each registered writer's largest buffer, in bytes (0: none, or the writer is gone).
    largest: [AtomicUsize; RANKED_WRITERS],
    /// Slots handed out so far.
    registered: AtomicUsize,
    /// The process's memory budget, when the archive is under one: then the archive holds at
    /// most its allowance there too (see [`crate::memory`]), and says what it holds.
    memory: std::sync::OnceLock<Arc<MemoryBudget>>,
}

impl SharedBudget {
    /// A budget of `limit` bytes of its own (not shared), for tests and tools.
    pub fn new(limit: usize) -> Arc<SharedBudget> {
        Arc::new(SharedBudget {
            limit,
            used: AtomicUsize::new(0),
            largest: Default::default(),
            registered: AtomicUsize::new(0),
            memory: std::sync::OnceLock::new(),
        })
    }

    /// Puts the archive under the process's memory budget (the first one given holds).
    pub fn under_memory(&self, memory: Arc<MemoryBudget>) {
        let counted = Arc::clone(&memory);
        if self.memory.set(memory).is_ok() {
            counted.set(Holder::Archive, self.used());
        }
    }

    /// True when the process's memory budget as a whole is over its limit: the intake is
    /// being refused, so every writer relieves the budget, whoever holds the largest buffers.
    pub fn squeezed(&self) -> bool {
        self.memory.get().is_some_and(|m| m.over_limit())
    }

    /// What the writers may hold now: the budget, or less while the memory budget's
    /// other holders need their share back.
    pub fn bound(&self) -> usize {
        match self.memory.get() {
            Some(m) => self.limit.min(m.allowance(Holder::Archive)),
            None => self.limit,
        }
    }

    /// A slot for one writer to publish its largest buffer in, if one is left.
    pub fn register(&self) -> Option<usize> {
        let slot = self.registered.fetch_add(1, Ordering::Relaxed);
        (slot < RANKED_WRITERS).then_some(slot)
    }

    /// Publishes the largest buffer of the writer in `slot` (0 when it leaves).
    pub fn set_largest(&self, slot: Option<usize>, bytes: usize) {
        if let Some(cell) = slot.and_then(|s| self.largest.get(s)) {
            cell.store(bytes, Ordering::Relaxed);
        }
    }

    /// The largest buffer any writer other than the one in `slot` holds.
    pub fn largest_elsewhere(&self, slot: Option<usize>) -> usize {
        self.largest
            .iter()
            .enumerate()
            .filter(|(i, _)| Some(*i) != slot)
            .map(|(_, c)| c.load(Ordering::Relaxed))
            .max()
            .unwrap_or(0)
    }

    /// True when the writers hold half as much again as the budget: then every writer
    /// relieves it, whoever holds the largest buffers (one writer busy elsewhere must not
    /// let the total grow without bound).
    pub fn far_over(&self) -> bool {
        let bound = self.bound();
        self.used() > bound.saturating_add(bound / 2)
    }

    /// The budget of the archive under `data_dir` in this process: the writers of spans and
    /// logs, requests and alarms share it. The first writer's `limit` holds while any writer
    /// of that directory is alive.
    pub fn for_data_dir(data_dir: &Path, limit: usize) -> Arc<SharedBudget> {
        static BUDGETS: Mutex<Vec<(PathBuf, Weak<SharedBudget>)>> = Mutex::new(Vec::new());
        let key = std::fs::canonicalize(data_dir).unwrap_or_else(|_| data_dir.to_path_buf());
        let mut all = BUDGETS.lock().unwrap_or_else(PoisonError::into_inner);
        all.retain(|(_, w)| w.strong_count() > 0);
        if let Some(b) = all
            .iter()
            .find(|(p, _)| *p == key)
            .and_then(|(_, w)| w.upgrade())
        {
            return b;
        }
        let b = SharedBudget::new(limit);
        all.push((key, Arc::downgrade(&b)));
        b
    }

    /// The budget in bytes.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Bytes buffered by all writers.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// Records a change of one writer's buffered bytes.
    pub fn change(&self, delta: isize) {
        if delta >= 0 {
            self.used.fetch_add(delta as usize, Ordering::Relaxed);
            if let Some(m) = self.memory.get() {
                m.add(Holder::Archive, delta as usize);
            }
        } else {
            let d = delta.unsigned_abs();
            // Never below zero, whatever the order of updates.
            let _ = self
                .used
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |u| {
                    Some(u.saturating_sub(d))
                });
            if let Some(m) = self.memory.get() {
                m.sub(Holder::Archive, d);
            }
        }
    }

    /// True when the writers hold more than they may (see [`SharedBudget::bound`]).
    pub fn over(&self) -> bool {
        self.used() > self.bound()
    }

    /// The level written-out buffers bring the total down to once it is over: a little
    /// under the bound, so that one write-out is not followed by another at the next record.
    pub fn low_water(&self) -> usize {
        let bound = self.bound();
        bound - bound / 8
    }
}

/// Which buffers to write out to bring `total` down to `target`: the largest first.
/// `sizes` are (key, bytes); returns them in the order to write them.
pub fn largest_first<K: Clone>(
    sizes: &[(K, usize)],
    total: usize,
    target: usize,
) -> Vec<(K, usize)> {
    let mut order: Vec<usize> = (0..sizes.len()).collect();
    order.sort_by(|&a, &b| sizes[b].1.cmp(&sizes[a].1));
    let mut out = Vec::new();
    let mut left = total;
    for i in order {
        if left <= target {
            break;
        }
        left = left.saturating_sub(sizes[i].1);
        out.push(sizes[i].clone());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn a_squeezed_memory_budget_is_not_an_archive_far_over_its_own() {
        let memory = MemoryBudget::new(16 << 20);
        let b = SharedBudget::new(4 << 20);
        b.under_memory(Arc::clone(&memory));
        b.change(1 << 20);
        assert_eq!(memory.held(Holder::Archive), 1 << 20);
        // Another holder has not given back yet: the whole is over, the archive is not.
        memory.set(Holder::Assembly, 16 << 20);
        assert!(b.squeezed());
        assert!(!b.far_over() && !b.over());
        // A second budget given later is not counted in (the first holds).
        let later = MemoryBudget::new(16 << 20);
        b.under_memory(Arc::clone(&later));
        assert_eq!(later.held(Holder::Archive), 0);
        b.change(-(1 << 20));
        assert_eq!(memory.held(Holder::Archive), 0);
    }

    #[test]
    fn the_largest_go_first_until_the_target_is_reached() {
        let sizes = vec![("a", 10), ("b", 50), ("c", 30), ("d", 20)];
        let keys = |target| -> Vec<&str> {
            largest_first(&sizes, 110, target)
                .into_iter()
                .map(|(k, _)| k)
                .collect()
        };
        assert_eq!(keys(100), vec!["b"]);
        assert_eq!(keys(40), vec!["b", "c"]);
        assert_eq!(keys(0), vec!["b", "c", "d", "a"]);
        assert_eq!(largest_first(&sizes, 110, 100), vec![("b", 50)]);
        assert!(largest_first(&sizes, 110, 110).is_empty());
    }

    #[test]
    fn writers_of_one_data_dir_share_a_budget() {
        let dir = tempfile::tempdir().expect("tempdir");
        let other = tempfile::tempdir().expect("tempdir");
        let a = SharedBudget::for_data_dir(dir.path(), 1000);
        let b = SharedBudget::for_data_dir(dir.path(), 5);
        let c = SharedBudget::for_data_dir(other.path(), 1000);
        a.change(700);
        b.change(400);
        assert_eq!(a.used(), 1100);
        assert!(b.over());
        assert_eq!(b.limit(), 1000);
        assert_eq!(c.used(), 0);
        a.change(-2000);
        assert_eq!(b.used(), 0);
    }
}
