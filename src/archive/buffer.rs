//! Rows waiting in memory for their partition's next file, under one budget for the archive.
//!
//! Each partition with rows not yet in a completed file has a [`PartitionBuffer`]: finished
//! Arrow record batches (one per journal record that reached the partition, merged as they
//! accumulate so that small ones do not each carry their own per-column overhead). Their
//! memory is measured exactly (`get_array_memory_size`) and added to a [`SharedBudget`]
//! that every [`super::Archive`] of one data directory shares, so the archive as a whole
//! holds at most about `archive.buffer_bytes`.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Instant;

use arrow::record_batch::RecordBatch;

use super::ArchiveError;

/// The rows of one partition not yet in a completed file.
pub struct PartitionBuffer {
    /// Finished batches, oldest first; each later one has fewer than half the rows of the one
    /// before (see [`PartitionBuffer::push`]), so there are about log2(rows) of them.
    chunks: Vec<RecordBatch>,
    rows: usize,
    bytes: usize,
    /// First and last journal record with rows here.
    pub records: Option<(u64, u64)>,
    /// When the first row arrived: the buffer is written out at `max_file_age` after this.
    pub created: Instant,
    /// The rows as last published for readers; cleared when rows are added.
    published: Option<Arc<super::live::LivePartition>>,
}

impl PartitionBuffer {
    /// An empty buffer, created now.
    pub fn new(now: Instant) -> PartitionBuffer {
        PartitionBuffer {
            chunks: Vec::new(),
            rows: 0,
            bytes: 0,
            records: None,
            created: now,
            published: None,
        }
    }

    /// Rows held.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Memory held by the rows, in bytes.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The batches held, oldest first.
    pub fn chunks(&self) -> &[RecordBatch] {
        &self.chunks
    }

    /// The rows for readers (see [`super::live`]): shared with this buffer, rebuilt only
    /// after rows were added.
    pub fn live(
        &mut self,
        key: &super::partition::PartitionKey,
    ) -> Arc<super::live::LivePartition> {
        let chunks = &self.chunks;
        Arc::clone(
            self.published.get_or_insert_with(|| {
                Arc::new(super::live::LivePartition::new(key, chunks.clone()))
            }),
        )
    }

    /// Adds a batch of rows of journal record `seq` (if any); returns the change of the
    /// memory held (it can shrink: merging frees the small batches' overhead). Consecutive
    /// batches are merged while the newer one is at least half the older one's rows and
    /// the merged batch stays within `merge_rows`: chunk sizes fall geometrically, a row is
    /// copied about log2(merge_rows) times at most, and a partition that gets a few rows a record
    /// does not hold a few hundred bytes of per-column overhead for each of them.
    pub fn push(
        &mut self,
        batch: RecordBatch,
        seq: Option<u64>,
        merge_rows: usize,
    ) -> Result<isize, ArchiveError> {
        let before = self.bytes;
        self.published = None;
        self.rows += batch.num_rows();
        self.bytes += batch.get_array_memory_size();
        self.chunks.push(batch);
        if let Some(seq) = seq {
            self.records = Some(
                self.records
                    .map_or((seq, seq), |(first, last)| (first.min(seq), last.max(seq))),
            );
        }
        while self.chunks.len() >= 2 {
            let n = self.chunks.len();
            let (older, newer) = (self.chunks[n - 2].num_rows(), self.chunks[n - 1].num_rows());
            if newer * 2 < older || older + newer > merge_rows {
                break;
            }
            let merged = arrow::compute::concat_batches(
                &self.chunks[n - 1].schema(),
                &self.chunks[n - 2..],
            )?;
            for c in self.chunks.drain(n - 2..) {
                self.bytes -= c.get_array_memory_size();
            }
            self.bytes += merged.get_array_memory_size();
            self.chunks.push(merged);
        }
        Ok(self.bytes as isize - before as isize)
    }
}

/// The memory budget shared by every archive writer of one data directory.
#[derive(Debug)]
pub struct SharedBudget {
    limit: usize,
    used: AtomicUsize,
}

impl SharedBudget {
    /// A budget of `limit` bytes of its own (not shared), for tests and tools.
    pub fn new(limit: usize) -> Arc<SharedBudget> {
        Arc::new(SharedBudget {
            limit,
            used: AtomicUsize::new(0),
        })
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
        } else {
            let d = delta.unsigned_abs();
            // Never below zero, whatever the order of updates.
            let _ = self
                .used
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |u| {
                    Some(u.saturating_sub(d))
                });
        }
    }

    /// True when the writers hold more than the budget.
    pub fn over(&self) -> bool {
        self.used() > self.limit
    }

    /// The level written-out buffers bring the total down to once it is over: a little
    /// under the budget, so that one write-out is not followed by another at the next record.
    pub fn low_water(&self) -> usize {
        self.limit - self.limit / 8
    }
}

/// Which buffers to write out to bring `total` down to `target`: the largest first.
/// `sizes` are (key, bytes); returns the keys in the order to write them.
pub fn largest_first<K: Clone>(sizes: &[(K, usize)], total: usize, target: usize) -> Vec<K> {
    let mut order: Vec<usize> = (0..sizes.len()).collect();
    order.sort_by(|&a, &b| sizes[b].1.cmp(&sizes[a].1));
    let mut out = Vec::new();
    let mut left = total;
    for i in order {
        if left <= target {
            break;
        }
        left = left.saturating_sub(sizes[i].1);
        out.push(sizes[i].0.clone());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::Int64Array;
    use arrow::datatypes::{DataType, Field, Schema};

    fn batch(rows: usize) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)]));
        let col = Int64Array::from_iter_values(0..rows as i64);
        RecordBatch::try_new(schema, vec![Arc::new(col)]).expect("batch")
    }

    #[test]
    fn small_batches_merge_like_a_binary_counter_and_bytes_stay_exact() {
        let mut b = PartitionBuffer::new(Instant::now());
        let mut total = 0isize;
        for seq in 1..=64u64 {
            total += b.push(batch(10), Some(seq), 4096).expect("push");
        }
        assert_eq!(b.rows(), 640);
        assert_eq!(b.records, Some((1, 64)));
        // Few chunks, each at least twice as big as the next.
        assert!(b.chunks().len() <= 7, "{} chunks", b.chunks().len());
        for w in b.chunks().windows(2) {
            assert!(w[1].num_rows() * 2 < w[0].num_rows() + 10, "{w:?}");
        }
        let exact: usize = b.chunks().iter().map(|c| c.get_array_memory_size()).sum();
        assert_eq!(b.bytes(), exact);
        assert_eq!(total, exact as isize);
        // Never beyond the merge cap.
        let mut b = PartitionBuffer::new(Instant::now());
        for _ in 0..10 {
            b.push(batch(300), None, 1000).expect("push");
        }
        assert!(b.chunks().iter().all(|c| c.num_rows() <= 1000));
        assert_eq!(b.rows(), 3000);
        assert_eq!(b.records, None);
    }

    #[test]
    fn the_largest_go_first_until_the_target_is_reached() {
        let sizes = vec![("a", 10), ("b", 50), ("c", 30), ("d", 20)];
        assert_eq!(largest_first(&sizes, 110, 100), vec!["b"]);
        assert_eq!(largest_first(&sizes, 110, 40), vec!["b", "c"]);
        assert_eq!(largest_first(&sizes, 110, 0), vec!["b", "c", "d", "a"]);
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
