//! Window state on disk, so a restart does not reset a tenant's daily spend.
//!
//! `<data_dir>/state/budget-windows.json` holds every tenant and principal window's buckets
//! and active episode. It is written whole to a temporary file, fsynced and renamed over the
//! old one, so a crash leaves the previous state or the new one, never half of either. The file
//! names the first journal record it does not include; after a crash the budget stage replays
//! the journal from there.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::evaluate::SavedWindow;

/// Layout version of the state file.
const VERSION: u32 = 1;

/// The state file below a data directory.
pub fn state_file(data_dir: &Path) -> PathBuf {
    data_dir.join("state").join("budget-windows.json")
}

#[derive(Serialize, Deserialize)]
struct StateFile {
    version: u32,
    /// The first journal record the windows do not include.
    #[serde(default)]
    next_record: u64,
    windows: Vec<SavedWindow>,
}

/// Saved windows and the first journal record they do not include.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SavedState {
    /// The windows.
    pub windows: Vec<SavedWindow>,
    /// Records before this one are counted in the windows (0: none known).
    pub next_record: u64,
}

/// Why the state could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// A file operation failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The file is not a state file of this version.
    #[error("{path}: not a budget state file: {message}")]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

fn io(path: &Path, source: std::io::Error) -> StateError {
    StateError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Writes the windows atomically, with the first journal record they do not include.
pub fn save(path: &Path, windows: &[SavedWindow], next_record: u64) -> Result<(), StateError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
    let body = serde_json::to_vec(&StateFile {
        version: VERSION,
        next_record,
        windows: windows.to_vec(),
    })
    .map_err(|e| StateError::Format {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    crate::durable::replace_file(path, &body).map_err(|e| io(path, e))
}

/// Reads saved windows; no file means no state (a first start).
pub fn load(path: &Path) -> Result<SavedState, StateError> {
    let body = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(SavedState::default()),
        Err(e) => return Err(io(path, e)),
    };
    let file: StateFile = serde_json::from_slice(&body).map_err(|e| StateError::Format {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    if file.version != VERSION {
        return Err(StateError::Format {
            path: path.to_path_buf(),
            message: format!("version {} (this build reads {VERSION})", file.version),
        });
    }
    Ok(SavedState {
        windows: file.windows,
        next_record: file.next_record,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn saved_state_reads_back_and_a_missing_file_is_empty() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = state_file(dir.path());
        assert_eq!(load(&path).expect("no file"), SavedState::default());
        let w = SavedWindow {
            scope: "tenant".into(),
            tenant: "acme".into(),
            id: "acme".into(),
            budget: "cost_usd_per_day".into(),
            buckets: vec![(900_000_000_000, 1.25), (1_800_000_000_000, 0.5)],
            level: Some("warning".into()),
            alarm_id: "0011223344556677".into(),
        };
        save(&path, std::slice::from_ref(&w), 42).expect("save");
        assert_eq!(
            load(&path).expect("load"),
            SavedState {
                windows: vec![w],
                next_record: 42
            }
        );
        std::fs::write(&path, b"{\"version\":1,\"windows\":[{]}").expect("write");
        let err = load(&path).expect_err("garbage");
        assert!(err.to_string().contains("not a budget state file"), "{err}");
    }
}
