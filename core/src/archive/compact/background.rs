//! The daemon's compaction thread: a pass over its tables now and every `compact_every`,
//! sooner (within [`AFTER_FLUSHES`]) while readers have files flushed, with retention applied
//! after each pass.

use std::path::Path;
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use super::policy::Policy;
use super::Compactor;
use crate::archive::table::Table;
use crate::metrics::Metrics;

/// While readers have files flushed, the daemon looks for small files this often (rather
/// than every `compact_every`): often enough that a partition read in a loop holds a few
/// dozen files, not hundreds; seldom enough that a reader seldom finds a file it listed
/// swapped away by a merge (it then lists again; see `query`).
pub const AFTER_FLUSHES: Duration = Duration::from_secs(10);

/// What the compaction thread is asked to do next.
#[derive(Debug, Default)]
struct Asked {
    /// Stop for good.
    stop: bool,
    /// Files were flushed for a reader since the last pass.
    flushed: bool,
}

/// The daemon's compaction thread for some tables.
pub struct Background {
    stop: Arc<(Mutex<Asked>, Condvar)>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Background {
    /// Starts compacting `tables` now and every `policy.every`, skipping partitions another
    /// process holds; `None` if the thread cannot start (logged: the archive works without).
    pub fn start(
        data_dir: &Path,
        tables: &[Table],
        policy: Policy,
        instance_id: String,
        metrics: Arc<Metrics>,
    ) -> Option<Background> {
        let stop = Arc::new((Mutex::new(Asked::default()), Condvar::new()));
        let every = policy.every;
        let mut compactor = Compactor::new(data_dir, policy, instance_id, metrics)
            .without_waiting()
            .with_retention();
        let tables = tables.to_vec();
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("toolwatch-compact".into())
            .spawn(move || loop {
                let stopped = || flag.0.lock().unwrap_or_else(PoisonError::into_inner).stop;
                {
                    let mut asked = flag.0.lock().unwrap_or_else(PoisonError::into_inner);
                    if asked.stop {
                        return;
                    }
                    // Flushes from now on count for the next pass.
                    asked.flushed = false;
                }
                if let Err(e) = compactor.run(&tables, SystemTime::now(), &stopped) {
                    tracing::error!(error = %e, "archive compaction failed");
                }
                let last = std::time::Instant::now();
                let mut asked = flag.0.lock().unwrap_or_else(PoisonError::into_inner);
                loop {
                    if asked.stop {
                        return;
                    }
                    let due = if asked.flushed {
                        every.min(AFTER_FLUSHES)
                    } else {
                        every
                    };
                    let Some(left) = due.checked_sub(last.elapsed()).filter(|d| !d.is_zero())
                    else {
                        break;
                    };
                    asked = flag
                        .1
                        .wait_timeout(asked, left)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0;
                }
            });
        match thread {
            Ok(t) => Some(Background {
                stop,
                thread: Some(t),
            }),
            Err(e) => {
                tracing::error!(error = %e, "cannot start archive compaction");
                None
            }
        }
    }

    /// Asks the thread to stop after the partition it is on.
    pub fn signal_stop(&self) {
        self.stop
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .stop = true;
        self.stop.1.notify_all();
    }

    /// Tells the thread that a flush just wrote small files: it looks again within
    /// [`AFTER_FLUSHES`] of its last pass.
    pub fn flushed(&self) {
        let mut asked = self.stop.0.lock().unwrap_or_else(PoisonError::into_inner);
        if !asked.flushed {
            asked.flushed = true;
            self.stop.1.notify_all();
        }
    }

    /// Stops the thread and waits for it.
    pub fn stop(mut self) {
        self.signal_stop();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
