//! Wall-clock time as the pipeline records it: ns since the Unix epoch. Depends on nothing
//! else in the crate, so the metrics and every stage can share it.

use std::time::{SystemTime, UNIX_EPOCH};

/// Wall-clock time in ns since the epoch (0 before it, saturating far after it).
pub fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}
