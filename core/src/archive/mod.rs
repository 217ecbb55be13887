//! Archive: the Parquet audit archive.
//!
//! Owns the files under `spans/`, `logs/`, `requests/` and `alarms/` in the data directory
//! (the rows of `requests` and `alarms` are their stages', see below). Promises: rows are
//! written to `table/tenant=T/date=YYYY-MM-DD/hour=HH/part-….parquet` (zstd, page statistics,
//! bloom filters on `trace_id` and `request_id`); a file becomes visible only when complete.
//! Rows wait in per-partition memory buffers under one budget (`archive.buffer_bytes`) for
//! the whole archive; a buffer becomes one completed file when it reaches its age or size,
//! or, largest first, when the archive is over its budget. Small files are later merged by
//! compaction ([`compact`]) without a reader ever seeing a row twice or missing one.
//! Everything handed to the archive is in a completed file once [`Archive::close`] returns.
//! It receives protected events only.
//!
//! The archive is a sink: it writes the rows of `spans` and `logs` itself (the journal's
//! events, [`Archive::append_kept`]), and every other stage hands it rows of a table it owns
//! through one interface, [`table::rows::ArchiveRow`] ([`Archive::append_rows`]): the stage defines
//! the table's schema and builders, the archive partitions, buffers and writes them, and
//! never imports the stage. A consumer writing through an archive keeps it going with one
//! call at each of its ticks, [`Archive::tick`] (files due, readers' flushes, journal
//! pressure), takes its checkpoint from [`Archive::pinned_record`] and ends with
//! [`Archive::close`].
//!
//! The tree, by concern (each folder's own documentation says what it promises):
//! - [`table`]: the tables, the row interface, the `spans` and `logs` schemas, Parquet encoding;
//! - [`layout`]: partition folders, completed files and their names, the offload marker, locks;
//! - [`write`](mod@write): the writer ([`Archive`]), buffers, readers' copies, flushes, consumer;
//! - [`compact`]: partition folders rewritten in one swap: compaction's merges and scrub;
//! - [`retention`]: partitions past their retention deleted, recorded in the manifest;
//! - [`manifest`]: the hash-chained record of every file, and `verify` against it;
//! - [`store`]: the archive in object storage: uploads, offloading, reads of the store;
//! - [`config`]: the `[archive]` section of the configuration.

pub mod compact;
pub mod config;
mod error;
pub mod layout;
pub mod manifest;
pub mod retention;
pub mod store;
pub mod table;
pub mod write;

pub use error::ArchiveError;
pub use write::{Archive, ArchiveTotals};
