//! [`ArchiveError`]: what went wrong writing the archive.

use std::path::{Path, PathBuf};

/// What went wrong writing the archive.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    /// A file operation failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The Parquet encoder failed.
    #[error("parquet: {0}")]
    Parquet(parquet::errors::ParquetError),
    /// Building a record batch failed.
    #[error("arrow: {0}")]
    Arrow(#[from] arrow::error::ArrowError),
}

impl ArchiveError {
    pub(super) fn io(path: &Path, source: std::io::Error) -> ArchiveError {
        ArchiveError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}
