//! The `[archive]` section of the configuration: files, buffers and compaction.
//!
//! It lives with the archive, which alone reads it; `config.rs` includes it in the whole
//! model, so neither imports the other in a loop.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::archive::table::encoding::FileSettings;
use crate::units::{ByteSize, HumanDuration, LimitDuration, PositiveUsize, ZstdLevel};

/// Parquet archive settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ArchiveConfig {
    /// A partition's buffered rows become a file once they hold about this many bytes in
    /// memory (mostly encoded already, so about the file's size).
    pub max_file_bytes: ByteSize,
    /// A partition's buffered rows become a file once the oldest has waited this long.
    pub max_file_age: HumanDuration,
    /// Memory for rows not yet in a completed file, for the whole archive (every table and
    /// partition together); beyond it the largest buffers are written out first.
    pub buffer_bytes: ByteSize,
    /// A partition's newest rows are encoded into its in-memory file once this many are
    /// collected (or 256 KiB of them).
    pub batch_rows: PositiveUsize,
    /// Rows per Parquet row group (the unit of statistics and bloom filters).
    pub row_group_rows: PositiveUsize,
    /// Encoded bytes per row group.
    pub row_group_bytes: ByteSize,
    /// No longer used: partitions are buffered under `buffer_bytes` rather than each holding
    /// an open file. Still read, so configuration files written for earlier versions load.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_open_partitions: Option<PositiveUsize>,
    /// zstd compression level (1-22).
    pub zstd_level: ZstdLevel,
    /// Span ids remembered to drop a span sent again (a client retrying a request whose
    /// answer it lost); each costs about 25 bytes.
    pub dedup_spans: PositiveUsize,
    /// How often the daemon looks for small files to merge (`0s`: never; `toolwatch
    /// compact` still can).
    pub compact_every: LimitDuration,
    /// Files younger than this are never merged; an hour that ended this long ago has all
    /// its small files merged (at least two).
    pub compact_after: HumanDuration,
    /// In an hour still being written, small files are merged once this many have aged.
    pub compact_min_files: PositiveUsize,
    /// The most bytes (on disk) merged into one file; files of at least half this size are
    /// not small and stay as they are.
    pub compact_max_bytes: ByteSize,
    /// Testing aid: the archive pauses this long after each journal record, to exercise
    /// backpressure. Keep `0s`.
    pub pause_per_record: LimitDuration,
    /// Ed25519 key that signs every manifest entry (64 hex digits, the key's seed; created
    /// with mode 0600 if the file is absent). Empty: entries are not signed.
    pub manifest_signing_key_file: std::path::PathBuf,
    /// `[archive.retention]`: how long each table's partitions are kept, per tenant.
    pub retention: super::retention::RetentionConfig,
}

impl Default for ArchiveConfig {
    fn default() -> Self {
        ArchiveConfig {
            max_file_bytes: ByteSize(128 * 1024 * 1024),
            max_file_age: HumanDuration(Duration::from_secs(300)),
            buffer_bytes: ByteSize(256 * 1024 * 1024),
            batch_rows: PositiveUsize(4096),
            row_group_rows: PositiveUsize(65536),
            row_group_bytes: ByteSize(32 * 1024 * 1024),
            max_open_partitions: None,
            zstd_level: ZstdLevel(3),
            dedup_spans: PositiveUsize(1 << 20),
            compact_every: LimitDuration(Duration::from_secs(60)),
            compact_after: HumanDuration(Duration::from_secs(300)),
            compact_min_files: PositiveUsize(4),
            compact_max_bytes: ByteSize(64 * 1024 * 1024),
            pause_per_record: LimitDuration(Duration::ZERO),
            manifest_signing_key_file: std::path::PathBuf::new(),
            retention: super::retention::RetentionConfig::default(),
        }
    }
}

/// A key of the `[archive]` section whose value cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {message}")]
pub struct InvalidArchiveConfig {
    /// The key, e.g. `archive.buffer_bytes`.
    pub key: &'static str,
    /// What is wrong.
    pub message: String,
}

impl ArchiveConfig {
    /// Checks values that parse but cannot work.
    pub fn validate(&self) -> Result<(), InvalidArchiveConfig> {
        if self.buffer_bytes.0 < 1 << 20 {
            return Err(InvalidArchiveConfig {
                key: "archive.buffer_bytes",
                message: format!(
                    "{} is less than 1MiB: every journal record would make a file per partition",
                    self.buffer_bytes
                ),
            });
        }
        if self.compact_min_files.0 < 2 {
            return Err(InvalidArchiveConfig {
                key: "archive.compact_min_files",
                message: "must be at least 2: merging one file changes nothing".into(),
            });
        }
        Ok(())
    }
}

/// The file settings of an archive configuration.
pub fn file_settings(config: &ArchiveConfig) -> FileSettings {
    FileSettings {
        max_bytes: config.max_file_bytes.0,
        max_age: config.max_file_age.0,
        row_group_rows: config.row_group_rows.0,
        row_group_bytes: config.row_group_bytes.as_usize(),
        zstd_level: config.zstd_level.0,
    }
}
