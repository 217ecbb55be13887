//! Flush on read: a reader asks the running daemon to write out what it buffers, so a span
//! acknowledged a moment ago is in a completed file by the time `toolwatch query` or
//! `toolwatch trace` reads the archive.
//!
//! Each archive writer of the daemon (spans and logs; requests; alarms) has a [`FlushPoint`].
//! `POST /v1/archive/flush` asks every point for the journal records committed so far and
//! nudges the consumers (an idle one is waiting for records); each writer's consumer writes out
//! every buffer once it has read past them, without waiting for its next tick, and reports how
//! far it got; one whose turn comes later (the spacing below) stops waiting for records then. Flushes of one
//! writer are at least [`FLUSH_EVERY`] apart, and every request waiting shares the next one,
//! so a reader polling in a loop costs one small file per partition per half second at
//! most (compaction merges them: see `compact`, young files). Items whose trace has named no tenant yet are held back by the
//! consumer (see `tenancy`) and are not written by a flush.
//!
//! The daemon records its admin address in `<data_dir>/state/admin.addr` while it serves,
//! so a reader of a data directory can find the daemon writing it.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::{oneshot, watch};

use super::snapshot::BufferedFile;
use crate::archive::layout::lock::{self, WORK_DIR};

/// A reader waiting for copies of what a writer buffers: the records it must have read
/// first, and where the copies go.
type CopiesWanted = (u64, oneshot::Sender<Vec<BufferedFile>>);

/// Flushes of one writer are at least this far apart.
pub const FLUSH_EVERY: Duration = Duration::from_millis(500);

/// Flush requests of one writer.
#[derive(Debug, Default)]
struct Asked {
    /// The last request number handed out.
    issued: u64,
    /// Requests not yet served: (request number, records before this to be written out),
    /// oldest first; both grow, since the journal only grows.
    pending: VecDeque<(u64, u64)>,
}

/// Where one archive writer takes flush requests and reports them done.
#[derive(Debug)]
pub struct FlushPoint {
    /// Which writer (for logs and answers).
    pub name: &'static str,
    /// The requests asked for.
    asked: Mutex<Asked>,
    /// Requests up to this number are served.
    done: watch::Sender<u64>,
    /// Readers waiting for copies of the buffers (see `snapshot`): no file is written for them.
    copies: Mutex<Vec<CopiesWanted>>,
}

impl FlushPoint {
    /// A point for the writer called `name`.
    pub fn new(name: &'static str) -> Arc<FlushPoint> {
        Arc::new(FlushPoint {
            name,
            asked: Mutex::new(Asked::default()),
            done: watch::Sender::new(0),
            copies: Mutex::new(Vec::new()),
        })
    }

    /// Asks for copies of what the writer buffers once it has read the records before `seq`;
    /// the answer comes on the returned channel (closed unanswered if the writer stops).
    pub fn want_copies(&self, seq: u64) -> oneshot::Receiver<Vec<BufferedFile>> {
        let (tx, rx) = oneshot::channel();
        self.copies
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((seq, tx));
        rx
    }

    fn copies_waiting(&self) -> bool {
        !self
            .copies
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_empty()
    }

    /// The readers whose records are all read (`next_seq`: the first not yet read); those
    /// that gave up waiting are dropped.
    fn copies_servable(&self, next_seq: u64) -> Vec<oneshot::Sender<Vec<BufferedFile>>> {
        let mut copies = self.copies.lock().unwrap_or_else(PoisonError::into_inner);
        copies.retain(|(_, tx)| !tx.is_closed());
        let (due, wait): (Vec<_>, Vec<_>) = copies.drain(..).partition(|&(s, _)| s <= next_seq);
        *copies = wait;
        due.into_iter().map(|(_, tx)| tx).collect()
    }

    /// Asks for the records before `seq` (and whatever the writer holds by then) to be
    /// written out; returns the request's number, for [`FlushPoint::wait`].
    pub fn want(&self, seq: u64) -> u64 {
        let mut asked = self.asked.lock().unwrap_or_else(PoisonError::into_inner);
        asked.issued += 1;
        let n = asked.issued;
        let seq = asked.pending.back().map_or(seq, |&(_, s)| s.max(seq));
        asked.pending.push_back((n, seq));
        n
    }

    /// Waits until request `n` was served, at most until `deadline`; true when it was.
    pub async fn wait(&self, n: u64, deadline: tokio::time::Instant) -> bool {
        let mut rx = self.done.subscribe();
        tokio::time::timeout_at(deadline, rx.wait_for(|&done| done >= n))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// The last request served.
    #[cfg(test)]
    fn done(&self) -> u64 {
        *self.done.borrow()
    }

    /// True when a request waits.
    fn waiting(&self) -> bool {
        !self
            .asked
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pending
            .is_empty()
    }

    /// The newest request whose records are all read (`next_seq`: the first not yet read).
    fn servable(&self, next_seq: u64) -> Option<u64> {
        let asked = self.asked.lock().unwrap_or_else(PoisonError::into_inner);
        asked
            .pending
            .iter()
            .rev()
            .find(|&&(_, seq)| seq <= next_seq)
            .map(|&(n, _)| n)
    }

    fn served(&self, n: u64) {
        let mut asked = self.asked.lock().unwrap_or_else(PoisonError::into_inner);
        while asked.pending.front().is_some_and(|&(m, _)| m <= n) {
            asked.pending.pop_front();
        }
        drop(asked);
        self.done.send_replace(n);
    }
}

/// The consumer's side of a [`FlushPoint`]: decides when to flush.
#[derive(Debug)]
pub struct FlushDue {
    point: Arc<FlushPoint>,
    last: Option<Instant>,
}

impl FlushDue {
    /// Flushes asked of `point`.
    pub fn new(point: Arc<FlushPoint>) -> FlushDue {
        FlushDue { point, last: None }
    }

    /// The request to serve now, if one is asked for, the consumer has read every record it
    /// covers (`next_seq` is the first not yet read) and the last flush is [`FLUSH_EVERY`]
    /// ago.
    pub fn due(&self, next_seq: u64, now: Instant) -> Option<u64> {
        if self
            .last
            .is_some_and(|l| now.duration_since(l) < FLUSH_EVERY)
        {
            return None;
        }
        self.point.servable(next_seq)
    }

    /// Readers waiting for copies whose records are all read (`next_seq`: the first not
    /// yet read): the writer answers each with the copies of its buffers.
    pub fn copies_due(&self, next_seq: u64) -> Vec<oneshot::Sender<Vec<BufferedFile>>> {
        self.point.copies_servable(next_seq)
    }

    /// The writer's name.
    pub fn writer(&self) -> &'static str {
        self.point.name
    }

    /// How soon [`FlushDue::due`] may say yes, if a request waits: zero when the spacing
    /// allows a flush now (it may still wait for records to be read).
    pub fn due_in(&self, now: Instant) -> Option<Duration> {
        // Copies have no spacing: they write nothing.
        if self.point.copies_waiting() {
            return Some(Duration::ZERO);
        }
        if !self.point.waiting() {
            return None;
        }
        Some(self.last.map_or(Duration::ZERO, |l| {
            (l + FLUSH_EVERY).saturating_duration_since(now)
        }))
    }

    /// Reports request `n` (and every one before it) served: what the writer held is in
    /// completed files.
    pub fn flushed(&mut self, n: u64, now: Instant) {
        self.last = Some(now);
        self.point.served(n);
    }
}

/// The file naming the admin address of the daemon serving `data_dir`.
pub fn address_file(data_dir: &Path) -> PathBuf {
    data_dir.join("state").join("admin.addr")
}

/// The file naming the admin address of one of the daemons writing a shared archive folder
/// (`storage.archive_dir`), by its journal id (the same across its restarts, so a restart
/// replaces its file rather than adding one).
pub fn instance_address_file(archive_dir: &Path, journal_id: &str) -> PathBuf {
    archive_dir
        .join(WORK_DIR)
        .join("instances")
        .join(format!("{journal_id}.addr"))
}

/// Records `addr` for readers of `data_dir`; removed by dropping the returned guard.
pub fn publish_address(data_dir: &Path, addr: SocketAddr) -> std::io::Result<AddressFile> {
    publish_address_at(address_file(data_dir), addr, false)
}

/// Records `addr` (and, `with_host`, this machine's name) in the file `path`, locked for as long as the
/// returned guard lives, so readers can tell a live daemon's file from a dead one's; removed
/// by dropping the guard.
pub fn publish_address_at(
    path: PathBuf,
    addr: SocketAddr,
    with_host: bool,
) -> std::io::Result<AddressFile> {
    use std::io::Write;
    use std::os::unix::fs::DirBuilderExt;
    if let Some(dir) = path.parent() {
        // Only this user writes addresses readers send their admin token to.
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
    }
    // Locked before it is renamed into place: a reader never finds it unlocked while its
    // daemon lives (the lock goes with the open file, across the rename).
    let tmp = crate::durable::temporary_of(&path);
    let mut file = std::fs::File::create(&tmp)?;
    if !lock::flock(&file, libc::LOCK_EX | libc::LOCK_NB)? {
        return Err(std::io::Error::from(std::io::ErrorKind::WouldBlock));
    }
    let text = if with_host {
        format!("{addr}\n{}\n", host_name())
    } else {
        format!("{addr}\n")
    };
    file.write_all(text.as_bytes())?;
    file.sync_all()?;
    std::fs::rename(&tmp, &path)?;
    Ok(AddressFile {
        path,
        _lock: Some(file),
    })
}

/// This machine's name (empty if it has none).
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default()
}

/// The admin address a daemon recorded under `data_dir`, if one did (it may be gone since).
pub fn recorded_address(data_dir: &Path) -> Option<SocketAddr> {
    read_address(&address_file(data_dir))
}

/// A daemon readers of an archive can ask for its buffered rows.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum RecordedDaemon {
    /// The daemon whose data directory it is, at this address (its file may outlive it).
    Here(SocketAddr),
    /// A daemon writing the shared folder from this machine, alive (it holds its file's
    /// lock), at this address.
    Live(SocketAddr),
    /// Writing the shared folder from another machine (its admin port answers only its own
    /// machine): its buffered rows cannot be read from here.
    Elsewhere(String),
    /// An address file this reader must not trust (not its own user's, or writable by others).
    Untrusted(PathBuf),
}

/// Every live daemon recorded for readers of the archive under `dir`: the daemon whose data
/// directory it is, and each daemon writing it as a shared folder. The address files of
/// daemons that are gone (unlocked) are removed.
pub fn recorded_addresses(dir: &Path) -> Vec<RecordedDaemon> {
    let mut out: Vec<RecordedDaemon> = recorded_address(dir)
        .map(RecordedDaemon::Here)
        .into_iter()
        .collect();
    let shared = dir.join(WORK_DIR).join("instances");
    let here = host_name();
    if let Ok(rd) = std::fs::read_dir(shared) {
        for e in rd.flatten() {
            let path = e.path();
            if path.extension().is_none_or(|x| x != "addr") {
                continue;
            }
            if !trusted(&path) {
                out.push(RecordedDaemon::Untrusted(path));
                continue;
            }
            if !held(&path) {
                let _ = std::fs::remove_file(&path);
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let mut lines = text.lines();
            let addr = lines.next().and_then(|a| a.trim().parse().ok());
            let host = lines.next().unwrap_or_default().trim().to_string();
            match addr {
                Some(a) if host == here => out.push(RecordedDaemon::Live(a)),
                Some(_) => out.push(RecordedDaemon::Elsewhere(host)),
                None => {}
            }
        }
    }
    out.sort();
    out.dedup();
    // A daemon whose data directory this is and which also records itself as an instance.
    let live: Vec<SocketAddr> = out
        .iter()
        .filter_map(|d| match d {
            RecordedDaemon::Live(a) => Some(*a),
            _ => None,
        })
        .collect();
    out.retain(|d| !matches!(d, RecordedDaemon::Here(a) if live.contains(a)));
    out
}

/// Whether a daemon holds the file's lock (it lives).
fn held(path: &Path) -> bool {
    let Ok(f) = std::fs::File::open(path) else {
        return false;
    };
    // A lock that cannot be tried at all is taken for held: the file is kept.
    lock::flock(&f, libc::LOCK_SH | libc::LOCK_NB).map_or(true, |taken| !taken)
}

/// An address file of this reader's own user that no one else may write.
fn trusted(path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return false;
    };
    // SAFETY: getuid has no preconditions.
    let me = unsafe { libc::getuid() };
    meta.file_type().is_file() && meta.uid() == me && meta.mode() & 0o022 == 0
}

fn read_address(path: &Path) -> Option<SocketAddr> {
    std::fs::read_to_string(path)
        .ok()?
        .lines()
        .next()?
        .trim()
        .parse()
        .ok()
}

/// Removes the address file when dropped (and holds its lock while it lives).
#[derive(Debug)]
pub struct AddressFile {
    path: PathBuf,
    _lock: Option<std::fs::File>,
}

impl Drop for AddressFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readers_ask_live_instances_here_and_skip_dead_foreign_and_untrusted_files() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let a: SocketAddr = "127.0.0.1:4001".parse().expect("addr");
        let live =
            publish_address_at(instance_address_file(dir.path(), "aa"), a, true).expect("publish");
        // A dead daemon's file: nobody holds its lock.
        let dead = instance_address_file(dir.path(), "bb");
        std::fs::write(&dead, "127.0.0.1:4002\n").expect("plant");
        // A live daemon on another machine.
        let b: SocketAddr = "10.0.0.2:9464".parse().expect("addr");
        let elsewhere = instance_address_file(dir.path(), "cc");
        let guard = publish_address_at(elsewhere.clone(), b, true).expect("publish");
        let text = std::fs::read_to_string(&elsewhere).expect("read");
        std::fs::write(&elsewhere, text.replace(&host_name(), "other-host")).expect("edit");
        let found = recorded_addresses(dir.path());
        assert!(found.contains(&RecordedDaemon::Live(a)), "{found:?}");
        assert!(!dead.exists(), "a dead daemon's file is removed");
        // The edit replaced the locked file's contents in place: still held, other host.
        assert!(
            found.contains(&RecordedDaemon::Elsewhere("other-host".into())),
            "{found:?}"
        );
        std::fs::set_permissions(&elsewhere, std::fs::Permissions::from_mode(0o666))
            .expect("chmod");
        assert!(
            recorded_addresses(dir.path()).contains(&RecordedDaemon::Untrusted(elsewhere.clone()))
        );
        // Stopped daemons take their files with them.
        drop(guard);
        drop(live);
        assert_eq!(recorded_addresses(dir.path()), vec![]);
        assert!(!elsewhere.exists());
    }

    #[test]
    fn a_flush_waits_for_the_records_and_for_its_interval() {
        let point = FlushPoint::new("archive");
        let mut due = FlushDue::new(Arc::clone(&point));
        let t0 = Instant::now();
        assert_eq!(due.due(100, t0), None, "nothing asked");
        let first = point.want(50);
        assert_eq!(due.due(49, t0), None, "record 49 not read yet");
        assert_eq!(due.due(50, t0), Some(first));
        due.flushed(first, t0);
        assert_eq!(point.done(), first);
        assert_eq!(due.due(60, t0), None, "served");
        // No new record since, but the writer may hold new rows (summaries): served again.
        let again = point.want(50);
        assert_eq!(
            due.due(50, t0 + FLUSH_EVERY - Duration::from_millis(1)),
            None,
            "too soon"
        );
        assert_eq!(due.due(50, t0 + FLUSH_EVERY), Some(again));
        // Two waiting, the later one not yet readable: the earlier one is served alone.
        let a = point.want(60);
        let b = point.want(70);
        let t1 = t0 + FLUSH_EVERY * 3;
        assert_eq!(due.due(65, t1), Some(a));
        due.flushed(a, t1);
        assert_eq!(due.due(70, t1 + FLUSH_EVERY), Some(b));
    }

    #[test]
    fn a_waiting_flush_says_how_soon_it_may_go() {
        let point = FlushPoint::new("archive");
        let mut due = FlushDue::new(Arc::clone(&point));
        let t0 = Instant::now();
        assert_eq!(due.due_in(t0), None, "nothing asked");
        let first = point.want(10);
        assert_eq!(due.due_in(t0), Some(Duration::ZERO), "never flushed: now");
        due.flushed(first, t0);
        assert_eq!(due.due_in(t0), None, "served");
        point.want(10);
        assert_eq!(due.due_in(t0), Some(FLUSH_EVERY));
        let later = t0 + FLUSH_EVERY / 5;
        assert_eq!(due.due_in(later), Some(FLUSH_EVERY - FLUSH_EVERY / 5));
        assert_eq!(due.due_in(t0 + FLUSH_EVERY * 2), Some(Duration::ZERO));
    }

    #[test]
    fn waiting_ends_when_the_request_is_served_or_at_the_timeout() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime");
        let point = FlushPoint::new("archive");
        let mut due = FlushDue::new(Arc::clone(&point));
        rt.block_on(async {
            let n = point.want(10);
            let soon = || tokio::time::Instant::now() + Duration::from_millis(20);
            assert!(!point.wait(n, soon()).await);
            due.flushed(n, Instant::now());
            assert!(point.wait(n, soon()).await);
        });
    }

    #[test]
    fn the_address_file_comes_and_goes() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert_eq!(recorded_address(dir.path()), None);
        let addr: SocketAddr = "127.0.0.1:4319".parse().expect("addr");
        let guard = publish_address(dir.path(), addr).expect("publish");
        assert_eq!(recorded_address(dir.path()), Some(addr));
        drop(guard);
        assert_eq!(recorded_address(dir.path()), None);
    }
}
