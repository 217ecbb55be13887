//! Which senders name tenants: the intake's memory of whether waiting can help.
//!
//! Holding an item back for its trace's tenant helps only where some item of the trace will
//! name one. Tenant names come from a sender's items (with auth on, each sender is its own
//! space, as trace ids are; with auth off, every unauthenticated item shares one space, since a
//! downstream service's spans take the tenant an executor's spans name). A space is
//! *untenanted* once one of its roots arrived naming no tenant while none of its items named
//! one within `tenancy.naming_memory`: its items go on at once. A space not seen yet is not
//! untenanted: its items may wait until their root arrives (which settles the trace at once),
//! so a multi-tenant executor's first request, children exported first, is filed whole.
//!
//! The memory is kept across restarts in `<data_dir>/state/tenant-spaces.json`: a restart with
//! no traffic after it must not turn a known untenanted space back into one that waits.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::maps::{FastMap, FastSet};

/// What one space has shown, as Unix seconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Seen {
    /// Last time an item of the space named a tenant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    named: Option<i64>,
    /// Last time a root span of the space arrived naming none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    unnamed_root: Option<i64>,
}

/// The file's form.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Saved {
    /// Space id (see [`super::TraceKey`]) and what it showed.
    spaces: Vec<(u64, Seen)>,
}

/// Most spaces remembered (one per sender: a bound far above any real deployment).
const MAX_SPACES: usize = 65_536;

/// Most traces remembered as having had an item wait for their tenant.
const MAX_WAITING_TRACES: usize = 65_536;

/// Seconds between saves of a changed memory.
const SAVE_EVERY_S: i64 = 60;

/// The intake's memory of which sender spaces name tenants (see the module notes).
#[derive(Debug)]
pub struct SenderSpaces {
    seen: FastMap<u64, Seen>,
    memory_s: i64,
    file: Option<PathBuf>,
    /// A change not yet saved, and when the memory was last saved.
    dirty: bool,
    saved_at: i64,
    /// Traces an item of which was left to wait for its tenant (in memory only): their
    /// unnamed root shows a request that names no tenant, not a lone span.
    waiting: FastSet<super::TraceKey>,
}

impl SenderSpaces {
    /// A memory that forgets a space's naming after `memory`, kept in `file` when given.
    pub fn new(memory: Duration, file: Option<PathBuf>) -> SenderSpaces {
        let seen = file.as_deref().map(load).unwrap_or_default();
        SenderSpaces {
            seen,
            memory_s: i64::try_from(memory.as_secs()).unwrap_or(i64::MAX),
            file,
            dirty: false,
            saved_at: 0,
            waiting: FastSet::default(),
        }
    }

    /// The memory's file under `data_dir`.
    pub fn file_in(data_dir: &Path) -> PathBuf {
        data_dir.join("state").join("tenant-spaces.json")
    }

    /// An item of `space` named a tenant at `now_s`.
    pub fn named(&mut self, space: u64, now_s: i64) {
        self.note(space, |s| s.named = Some(now_s));
    }

    /// A root span of `space` named no tenant at `now_s`.
    pub fn unnamed_root(&mut self, space: u64, now_s: i64) {
        self.note(space, |s| s.unnamed_root = Some(now_s));
    }

    /// An item of `trace` was left to wait for its tenant.
    pub fn waiting(&mut self, trace: super::TraceKey) {
        if self.waiting.len() >= MAX_WAITING_TRACES {
            self.waiting.clear();
        }
        self.waiting.insert(trace);
    }

    /// Whether an item of `trace` was left to wait (and forgets it: its root has come).
    pub fn waited(&mut self, trace: &super::TraceKey) -> bool {
        self.waiting.remove(trace)
    }

    fn note(&mut self, space: u64, set: impl FnOnce(&mut Seen)) {
        if self.seen.len() >= MAX_SPACES && !self.seen.contains_key(&space) {
            // Past any real deployment: forget all rather than grow; spaces wait until shown.
            self.seen.clear();
        }
        let entry = self.seen.entry(space).or_default();
        let before = *entry;
        set(entry);
        self.dirty |= before != *entry;
    }

    /// True when waiting cannot help `space` at `now_s`: it sent a root naming no tenant and
    /// named none within the memory.
    pub fn untenanted(&self, space: u64, now_s: i64) -> bool {
        self.seen.get(&space).is_some_and(|s| {
            s.unnamed_root.is_some()
                && s.named
                    .is_none_or(|t| now_s.saturating_sub(t) > self.memory_s)
        })
    }

    /// Saves the memory if it changed and `force` or a minute passed since the last save.
    pub fn save_if_due(&mut self, now_s: i64, force: bool) {
        if !self.dirty || !(force || now_s.saturating_sub(self.saved_at) >= SAVE_EVERY_S) {
            return;
        }
        let Some(file) = &self.file else {
            self.dirty = false;
            return;
        };
        let mut spaces: Vec<(u64, Seen)> = self.seen.iter().map(|(k, v)| (*k, *v)).collect();
        spaces.sort_unstable_by_key(|(k, _)| *k);
        match save(file, &Saved { spaces }) {
            Ok(()) => {
                self.dirty = false;
                self.saved_at = now_s;
            }
            Err(e) => {
                tracing::warn!(file = %file.display(), error = %e, "cannot save which senders name tenants");
            }
        }
    }
}

fn load(file: &Path) -> FastMap<u64, Seen> {
    let mut out = FastMap::default();
    let text = match std::fs::read(file) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return out,
        Err(e) => {
            tracing::warn!(file = %file.display(), error = %e, "cannot read which senders name tenants; every sender's items may wait until their root arrives");
            return out;
        }
    };
    match serde_json::from_slice::<Saved>(&text) {
        Ok(saved) => out.extend(saved.spaces.into_iter().take(MAX_SPACES)),
        Err(e) => {
            tracing::warn!(file = %file.display(), error = %e, "which senders name tenants is unreadable; every sender's items may wait until their root arrives");
        }
    }
    out
}

fn save(file: &Path, saved: &Saved) -> std::io::Result<()> {
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = file.with_extension("json.tmp");
    let bytes = serde_json::to_vec(saved).map_err(std::io::Error::other)?;
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, file)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: Duration = Duration::from_secs(86_400);

    #[test]
    fn a_space_is_untenanted_after_an_unnamed_root_and_no_naming_within_the_memory() {
        let mut s = SenderSpaces::new(DAY, None);
        assert!(!s.untenanted(1, 100), "unseen: its items may wait");
        s.unnamed_root(1, 100);
        assert!(s.untenanted(1, 100));
        s.named(1, 200);
        assert!(!s.untenanted(1, 300), "named lately");
        assert!(
            s.untenanted(1, 200 + 86_401),
            "named longer ago than the memory"
        );
        s.named(2, 100);
        assert!(!s.untenanted(2, 1_000_000), "never sent an unnamed root");
    }

    #[test]
    fn the_memory_survives_a_restart() {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = SenderSpaces::file_in(dir.path());
        let mut s = SenderSpaces::new(DAY, Some(file.clone()));
        s.unnamed_root(7, 100);
        s.save_if_due(100, false);
        let again = SenderSpaces::new(DAY, Some(file.clone()));
        assert!(again.untenanted(7, 150));
        std::fs::write(&file, b"{not json").expect("write");
        assert!(!SenderSpaces::new(DAY, Some(file)).untenanted(7, 150));
    }
}
