//! The one interface through which rows reach the archive.
//!
//! A stage that archives rows owns them: their Arrow schema, the builders that collect them
//! ([`TableRows`]) and how one row fills those builders ([`ArchiveRow`]). The archive only
//! partitions rows, buffers the builders under its memory budget, encodes them and completes
//! files; it never names a stage's row type. Rows come a slice at a time, and a partition's
//! builders are looked up (and downcast) once per slice, not once per row.

use std::any::Any;

use arrow::datatypes::SchemaRef;
use arrow::error::ArrowError;
use arrow::record_batch::RecordBatch;

use super::Table;

/// One table's Arrow builders, collecting the rows of one record batch.
pub trait TableRows: Send + 'static {
    /// Rows collected so far.
    fn len(&self) -> usize;

    /// True when no rows are collected.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// About the memory the collected rows hold (what the archive's budget counts).
    fn approx_bytes(&self) -> usize;

    /// The table's schema: that of the batches [`TableRows::finish`] and
    /// [`TableRows::snapshot`] make, and of the files they go into.
    fn schema(&self) -> SchemaRef;

    /// The collected rows as one record batch; the builders start over empty.
    fn finish(&mut self) -> Result<RecordBatch, ArrowError>;

    /// The collected rows as one record batch, leaving the builders as they are (a reader's
    /// view of rows not yet encoded; see `archive::write::buffer`).
    fn snapshot(&self) -> Result<RecordBatch, ArrowError>;

    /// The builders as their own type, for [`ArchiveRow::append_to`].
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

/// A row a stage hands to the archive ([`crate::archive::Archive::append_rows`]).
pub trait ArchiveRow {
    /// The builders of the row's table.
    type Rows: TableRows + Default;

    /// The table the row goes to.
    const TABLE: Table;

    /// The tenant whose partition the row goes to.
    fn tenant(&self) -> &str;

    /// The time (ns since the epoch) whose UTC hour is the row's partition.
    fn time_ns(&self) -> i64;

    /// The journal record the row came from, if any: the archive's checkpoint stays before
    /// it until the row is in a completed file.
    fn record(&self) -> Option<u64>;

    /// Adds the row to `rows`.
    fn append_to(&self, rows: &mut Self::Rows) -> Result<(), ArrowError>;
}

/// Empty builders of type `R`, boxed: what a partition buffer starts its rows with.
pub fn new_rows<R: TableRows + Default>() -> Box<dyn TableRows> {
    Box::<R>::default()
}

/// `rows` as builders of type `R`.
pub fn downcast<R: TableRows>(rows: &mut dyn TableRows) -> Result<&mut R, ArrowError> {
    // A partition's key carries its table, and each table has one row type: a mismatch is a
    // defect, reported as a failed write rather than a panic.
    rows.as_any_mut()
        .downcast_mut::<R>()
        .ok_or_else(|| ArrowError::InvalidArgumentError("row sent to the wrong table".into()))
}

/// Checks [`TableRows::snapshot`] against [`TableRows::finish`] for the builders `R`, filled
/// with a few rows by `fill`: the snapshot of empty builders is empty with the table's
/// schema, and two snapshots keep the rows and equal the batch `finish` then makes.
#[cfg(test)]
pub(crate) fn assert_snapshot_is_finish<R: TableRows + Default>(fill: impl FnOnce(&mut R)) {
    let mut rows = R::default();
    let empty = rows.snapshot().expect("snapshot of empty builders");
    assert_eq!(empty.num_rows(), 0);
    assert_eq!(empty.schema(), rows.schema());

    fill(&mut rows);
    let n = rows.len();
    assert!(n > 1, "fill adds a few rows, not {n}");
    let first = rows.snapshot().expect("first snapshot");
    assert_eq!(rows.len(), n, "a snapshot leaves the rows");
    let second = rows.snapshot().expect("second snapshot");
    assert_eq!(rows.len(), n, "a snapshot leaves the rows");
    let finished = rows.finish().expect("finish");
    assert_eq!(rows.len(), 0, "finish empties the builders");
    assert_eq!(first.num_rows(), n);
    assert_eq!(first, second);
    assert_eq!(first, finished);
    // A snapshot after finish sees the builders finish emptied.
    assert_eq!(rows.snapshot().expect("snapshot after finish"), empty);
}
