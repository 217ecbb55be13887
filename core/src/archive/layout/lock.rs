//! Partition locks and the compaction work area, both outside the tables' folders.
//!
//! The daemon writing a file into a partition folder and a compaction rewriting that folder
//! exclude each other with an exclusive lock on one byte of the table's lock file,
//! `<data_dir>/.compact/locks/<table>.lock`, at an offset hashed from the partition's name
//! (an open-file-description lock, `F_OFD_SETLK`, so two holders in one process exclude each
//! other too). One file per table, not one per partition: a thousand tenants made three
//! thousand lock files an hour that nothing could safely remove. The kernel drops a lock when
//! its holder dies, so a `kill -9` never leaves a partition locked. A compaction builds the new folder in
//! `<data_dir>/.compact/staging/<table>/` and swaps it with the live one: nothing a reader of
//! `<table>/**/*.parquet` lists ever lives there (DuckDB's `**` glob does descend into
//! hidden folders, so a hidden name inside the table would not be enough).

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use super::partition::PartitionDir;
use crate::archive::error::ArchiveError;
use crate::archive::table::Table;

/// Folder of the data directory holding partition locks and compaction work.
pub const WORK_DIR: &str = ".compact";

/// A partition's places in the work area (its live folder: [`PartitionDir::dir`]).
impl PartitionDir {
    /// One path segment naming the partition within its table (`@` is never in an encoded
    /// tenant, a date or an hour).
    fn name(&self) -> String {
        format!("{}@{}@{}", self.tenant, self.date, self.hour)
    }

    /// Parses [`PartitionDir::name`] back.
    fn from_name(table: Table, name: &str) -> Option<PartitionDir> {
        let mut parts = name.split('@');
        let (tenant, date, hour) = (parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() || tenant.is_empty() {
            return None;
        }
        Some(PartitionDir {
            table,
            tenant: tenant.to_string(),
            date: date.to_string(),
            hour: hour.to_string(),
        })
    }

    /// Where a compaction of this partition builds the new folder (and where the old one
    /// is while it is removed).
    pub fn staging(&self, data_dir: &Path) -> PathBuf {
        work_dir(data_dir, self.table).join(self.name())
    }

    /// The manifest entries of a swap of this partition, written before the swap and
    /// removed once they are in the manifest.
    pub fn pending(&self, data_dir: &Path) -> PathBuf {
        pending_dir(data_dir, self.table).join(format!("{}.jsonl", self.name()))
    }

    /// Where a scrub writes this partition's rewritten files without its lock.
    pub fn rewrite_work(&self, data_dir: &Path) -> PathBuf {
        rewrite_work_dir(data_dir)
            .join(self.table.as_str())
            .join(self.name())
    }
}

/// The compaction work folder of `table`.
pub fn work_dir(data_dir: &Path, table: Table) -> PathBuf {
    data_dir.join(WORK_DIR).join("staging").join(table.as_str())
}

/// Where the pending manifest entries of `table`'s swaps are kept.
fn pending_dir(data_dir: &Path, table: Table) -> PathBuf {
    data_dir.join(WORK_DIR).join("pending").join(table.as_str())
}

/// Partitions of `table` with pending manifest entries (left by a process that died
/// between a swap and its manifest lines, or whose manifest could not be written).
pub fn pending(data_dir: &Path, table: Table) -> Vec<PartitionDir> {
    named_in(&pending_dir(data_dir, table), table, ".jsonl")
}

/// Compaction folders left in the work area of `table` (by a process that died).
pub fn staged(data_dir: &Path, table: Table) -> Vec<PartitionDir> {
    named_in(&work_dir(data_dir, table), table, "")
}

/// The partitions of `table` named by the entries of `dir` (a [`PartitionDir::name`]
/// followed by `suffix`).
fn named_in(dir: &Path, table: Table, suffix: &str) -> Vec<PartitionDir> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            e.file_name()
                .to_str()
                .and_then(|n| n.strip_suffix(suffix))
                .and_then(|n| PartitionDir::from_name(table, n))
        })
        .collect()
}

/// An exclusive lock on one partition, released when dropped (or when the process dies).
#[derive(Debug)]
pub struct PartitionLock {
    _file: File,
}

impl PartitionLock {
    /// Locks `part`; with `wait` false, gives `None` at once if another holds it.
    pub fn acquire(
        data_dir: &Path,
        part: &PartitionDir,
        wait: bool,
    ) -> Result<Option<PartitionLock>, ArchiveError> {
        let path = lock_path(data_dir, &format!("{}.lock", part.table.as_str()));
        let file = open_lock_file(&path)?;
        let taken =
            lock_byte(&file, part.lock_offset(), wait).map_err(|e| ArchiveError::io(&path, e))?;
        Ok(taken.then_some(PartitionLock { _file: file }))
    }
}

impl PartitionDir {
    /// The order partitions' locks are taken in when one holder takes several at once
    /// (a write group): the same order in every process, so two instances writing the same
    /// partitions never each hold one the other waits for.
    pub fn lock_order(&self) -> (Table, i64) {
        (self.table, self.lock_offset())
    }

    /// The byte of the table's lock file standing for this partition: 62 bits of the SHA-256
    /// of its name, the same in every process and release. Two partitions never share one in
    /// practice (a pair among a million partitions: one chance in ten million); if two did,
    /// the daemon's writer, which holds the partitions of a group at once, would wait on
    /// itself.
    fn lock_offset(&self) -> i64 {
        use sha2::{Digest, Sha256};
        let d = Sha256::digest(self.name().as_bytes());
        let bits = d[..8]
            .iter()
            .fold(0u64, |acc, &b| (acc << 8) | u64::from(b));
        // Below 2^62: the byte and its end stay inside `off_t`.
        (bits >> 2) as i64
    }
}

/// An exclusive open-file-description lock on byte `at` of `file`: true when taken, false
/// when `wait` is false and another holds it.
fn lock_byte(file: &File, at: i64, wait: bool) -> std::io::Result<bool> {
    // SAFETY: an all-zero `flock` struct is a valid value (plain integers).
    let mut range: libc::flock = unsafe { std::mem::zeroed() };
    range.l_type = libc::F_WRLCK as libc::c_short;
    range.l_whence = libc::SEEK_SET as libc::c_short;
    range.l_start = at;
    range.l_len = 1;
    // Open-file-description locks require l_pid 0.
    range.l_pid = 0;
    let cmd = if wait {
        libc::F_OFD_SETLKW
    } else {
        libc::F_OFD_SETLK
    };
    // SAFETY: fcntl on a descriptor the caller owns, with a pointer to a live struct.
    lock_call(!wait, || unsafe {
        libc::fcntl(file.as_raw_fd(), cmd, &mut range)
    })
}

/// Runs a lock call (`flock`, `fcntl`) until it is not interrupted: true when the lock was
/// taken, false when a `nonblocking` call found it held.
fn lock_call(nonblocking: bool, mut call: impl FnMut() -> libc::c_int) -> std::io::Result<bool> {
    loop {
        if call() == 0 {
            return Ok(true);
        }
        let err = std::io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EINTR) => continue,
            // EWOULDBLOCK is EAGAIN here; fcntl may also say EACCES.
            Some(libc::EAGAIN) | Some(libc::EACCES) if nonblocking => return Ok(false),
            _ => return Err(err),
        }
    }
}

/// Tries `attempt` until it gives a lock or `patience` has passed (`None` then), looking
/// again every `poll`.
fn try_within<L>(
    patience: std::time::Duration,
    poll: std::time::Duration,
    mut attempt: impl FnMut() -> Result<Option<L>, ArchiveError>,
) -> Result<Option<L>, ArchiveError> {
    let deadline = std::time::Instant::now() + patience;
    loop {
        if let Some(lock) = attempt()? {
            return Ok(Some(lock));
        }
        if std::time::Instant::now() >= deadline {
            return Ok(None);
        }
        std::thread::sleep(poll);
    }
}

impl PartitionLock {
    /// Locks `part`, trying for up to `patience` while another holds it; `None` if it is
    /// still held then. For a holder that keeps partitions only briefly but often (the
    /// daemon's writers during a reader's flush), where waiting for good could stall and
    /// giving up at once would almost always give up.
    pub fn acquire_within(
        data_dir: &Path,
        part: &PartitionDir,
        patience: std::time::Duration,
    ) -> Result<Option<PartitionLock>, ArchiveError> {
        try_within(patience, patience / 40, || {
            PartitionLock::acquire(data_dir, part, false)
        })
    }
}

/// The readers' lock, `<data_dir>/.compact/locks/readers.lock`: our readers (`query`,
/// `trace`) hold it shared while they list and read; a compaction holds it exclusively only
/// for its swap. So a file our readers listed is never swapped away under them, and a merge
/// waits at most for the reads in progress. Other readers (DuckDB, pyarrow) do not take it:
/// for them a swapped-away file is an error worth a retry, as the swap is atomic.
#[derive(Debug)]
pub struct ReadersLock {
    _file: File,
}

/// A lock file of the archive's work area, `<data_dir>/.compact/locks/<name>`.
fn lock_path(data_dir: &Path, name: &str) -> PathBuf {
    data_dir.join(WORK_DIR).join("locks").join(name)
}

/// The readers' lock file.
fn readers_lock_path(data_dir: &Path) -> PathBuf {
    lock_path(data_dir, "readers.lock")
}

impl ReadersLock {
    /// Takes the lock shared, waiting while a compaction swaps a folder. `None` when the lock
    /// file can be neither opened nor created (an archive this user may only read, which no
    /// compaction by this user can change either): the reader then goes without.
    pub fn shared(data_dir: &Path) -> Option<ReadersLock> {
        let path = readers_lock_path(data_dir);
        let file = open_lock_file(&path)
            .ok()
            .or_else(|| File::open(&path).ok())?;
        flock(&file, libc::LOCK_SH)
            .ok()
            .filter(|&taken| taken)
            .map(|_| ReadersLock { _file: file })
    }

    /// Takes the lock exclusively: waiting for good with `patience` `None` (the CLI), else
    /// trying for up to `patience`; `None` if readers still hold it then.
    pub fn exclusive(
        data_dir: &Path,
        patience: Option<std::time::Duration>,
    ) -> Result<Option<ReadersLock>, ArchiveError> {
        let path = readers_lock_path(data_dir);
        let file = open_lock_file(&path)?;
        let Some(patience) = patience else {
            flock(&file, libc::LOCK_EX).map_err(|e| ArchiveError::io(&path, e))?;
            return Ok(Some(ReadersLock { _file: file }));
        };
        // A reader holds it for one query; between two, even back to back, lies at least the
        // next one's flush.
        let taken = try_within(patience, READERS_POLL, || {
            let taken = flock(&file, libc::LOCK_EX | libc::LOCK_NB)
                .map_err(|e| ArchiveError::io(&path, e))?;
            Ok(taken.then_some(()))
        })?;
        Ok(taken.map(|()| ReadersLock { _file: file }))
    }
}

/// The scrub lock, `<data_dir>/.compact/locks/scrub.lock`, held by a running `toolwatch
/// scrub` for its whole run: two scrubs take turns, and the one holding it owns the rewrite
/// work area (see [`PartitionDir::rewrite_work`]).
#[derive(Debug)]
pub struct ScrubLock {
    _file: File,
}

impl ScrubLock {
    /// Takes the lock, waiting for a scrub already running.
    pub fn acquire(data_dir: &Path) -> Result<ScrubLock, ArchiveError> {
        let path = lock_path(data_dir, "scrub.lock");
        let file = open_lock_file(&path)?;
        flock(&file, libc::LOCK_EX).map_err(|e| ArchiveError::io(&path, e))?;
        Ok(ScrubLock { _file: file })
    }

    /// Takes the lock, or `None` at once if a scrub is running.
    pub fn try_acquire(data_dir: &Path) -> Result<Option<ScrubLock>, ArchiveError> {
        let path = lock_path(data_dir, "scrub.lock");
        let file = open_lock_file(&path)?;
        let taken =
            flock(&file, libc::LOCK_EX | libc::LOCK_NB).map_err(|e| ArchiveError::io(&path, e))?;
        Ok(taken.then_some(ScrubLock { _file: file }))
    }
}

/// The lock of one manifest's upload to object storage,
/// `<data_dir>/.compact/locks/upload-<instance>.lock`: one process at a time uploads a
/// manifest's lines and files (the daemons sharing an archive folder, `toolwatch upload`).
#[derive(Debug)]
pub struct UploadLock {
    _file: File,
}

impl UploadLock {
    /// Takes the lock of manifest `instance`, or `None` at once if another process holds it.
    pub fn try_acquire(
        data_dir: &Path,
        instance: &str,
    ) -> Result<Option<UploadLock>, ArchiveError> {
        let path = lock_path(data_dir, &format!("upload-{instance}.lock"));
        let file = open_lock_file(&path)?;
        let taken =
            flock(&file, libc::LOCK_EX | libc::LOCK_NB).map_err(|e| ArchiveError::io(&path, e))?;
        Ok(taken.then_some(UploadLock { _file: file }))
    }
}

/// Where a scrub writes its rewritten files before it takes a partition's lock (the work
/// area of the scrub lock's holder).
pub fn rewrite_work_dir(data_dir: &Path) -> PathBuf {
    data_dir.join(WORK_DIR).join("rewrite")
}

/// How often a compaction looks again while readers hold the readers' lock.
const READERS_POLL: std::time::Duration = std::time::Duration::from_millis(5);

/// Opens (creating it and its folder if need be) a lock file for writing.
fn open_lock_file(path: &Path) -> Result<File, ArchiveError> {
    let open = || {
        OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
    };
    match open() {
        Ok(f) => Ok(f),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir).map_err(|e| ArchiveError::io(dir, e))?;
            }
            open().map_err(|e| ArchiveError::io(path, e))
        }
        Err(e) => Err(ArchiveError::io(path, e)),
    }
}

/// `flock(op)`: true when taken, false when `LOCK_NB` found it held.
pub(crate) fn flock(file: &File, op: libc::c_int) -> std::io::Result<bool> {
    // SAFETY: flock on a descriptor the caller owns; no memory is passed.
    lock_call(op & libc::LOCK_NB != 0, || unsafe {
        libc::flock(file.as_raw_fd(), op)
    })
}

/// Swaps two folders in one step (`renameat2(RENAME_EXCHANGE)`): a reader resolving either
/// path sees the old folder or the new one, never neither or a mix.
pub fn exchange(a: &Path, b: &Path) -> Result<(), ArchiveError> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let ca = CString::new(a.as_os_str().as_bytes())
        .map_err(|_| ArchiveError::io(a, std::io::Error::from(std::io::ErrorKind::InvalidInput)))?;
    let cb = CString::new(b.as_os_str().as_bytes())
        .map_err(|_| ArchiveError::io(b, std::io::Error::from(std::io::ErrorKind::InvalidInput)))?;
    // SAFETY: both paths are NUL-terminated strings that outlive the call.
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            ca.as_ptr(),
            libc::AT_FDCWD,
            cb.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(ArchiveError::io(a, std::io::Error::last_os_error()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::archive::layout::partition::PartitionKey;

    #[test]
    fn a_lock_excludes_another_holder_until_dropped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let part = PartitionDir::of(&PartitionKey::new(Table::Spans, "a b", 0));
        let held = PartitionLock::acquire(dir.path(), &part, true).expect("lock");
        assert!(held.is_some());
        assert!(PartitionLock::acquire(dir.path(), &part, false)
            .expect("try")
            .is_none());
        drop(held);
        assert!(PartitionLock::acquire(dir.path(), &part, false)
            .expect("try")
            .is_some());
    }

    #[test]
    fn a_patient_try_gives_up_while_held_and_gets_the_lock_once_released() {
        let dir = tempfile::tempdir().expect("tempdir");
        let part = PartitionDir::of(&PartitionKey::new(Table::Logs, "t", 0));
        let held = PartitionLock::acquire(dir.path(), &part, true).expect("lock");
        let short = std::time::Duration::from_millis(20);
        assert!(PartitionLock::acquire_within(dir.path(), &part, short)
            .expect("try")
            .is_none());
        let (data, p) = (dir.path().to_path_buf(), part.clone());
        let (started_tx, started) = std::sync::mpsc::channel();
        let waiter = std::thread::spawn(move || {
            started_tx.send(()).expect("started");
            PartitionLock::acquire_within(&data, &p, std::time::Duration::from_secs(30))
                .expect("try")
                .is_some()
        });
        started.recv().expect("waiter running");
        drop(held);
        assert!(waiter.join().expect("waiter"));
    }

    #[test]
    fn readers_share_the_readers_lock_and_keep_a_swap_waiting() {
        let dir = tempfile::tempdir().expect("tempdir");
        let short = Some(std::time::Duration::from_millis(20));
        let first = ReadersLock::shared(dir.path()).expect("shared");
        let second = ReadersLock::shared(dir.path()).expect("two readers at once");
        assert!(ReadersLock::exclusive(dir.path(), short)
            .expect("try")
            .is_none());
        drop(first);
        assert!(
            ReadersLock::exclusive(dir.path(), short)
                .expect("try")
                .is_none(),
            "one reader is still reading"
        );
        drop(second);
        let swap = ReadersLock::exclusive(dir.path(), short)
            .expect("try")
            .expect("no reader left");
        // A reader arriving during the swap waits for it.
        let data = dir.path().to_path_buf();
        let (started_tx, started) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            started_tx.send(()).expect("started");
            ReadersLock::shared(&data).is_some()
        });
        started.recv().expect("reader running");
        drop(swap);
        assert!(reader.join().expect("reader"));
    }

    #[test]
    fn partitions_of_one_table_lock_apart_in_one_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let held: Vec<PartitionLock> = (0..100)
            .map(|hour| {
                let key = PartitionKey::new(Table::Spans, "t", hour * 3_600_000_000_000);
                PartitionLock::acquire(dir.path(), &PartitionDir::of(&key), false)
                    .expect("lock")
                    .expect("no other holder")
            })
            .collect();
        let other = PartitionDir::of(&PartitionKey::new(Table::Logs, "t", 0));
        assert!(PartitionLock::acquire(dir.path(), &other, false)
            .expect("lock")
            .is_some());
        let files: Vec<String> = std::fs::read_dir(dir.path().join(WORK_DIR).join("locks"))
            .expect("locks folder")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(files.len(), 2, "one lock file per table: {files:?}");
        let first = PartitionDir::of(&PartitionKey::new(Table::Spans, "t", 0));
        assert!(
            PartitionLock::acquire(dir.path(), &first, false)
                .expect("lock")
                .is_none(),
            "still held"
        );
        drop(held);
        assert!(PartitionLock::acquire(dir.path(), &first, false)
            .expect("lock")
            .is_some());
    }

    #[test]
    fn exchange_swaps_two_folders() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (a, b) = (dir.path().join("a"), dir.path().join("x").join("b"));
        std::fs::create_dir_all(&a).expect("a");
        std::fs::create_dir_all(&b).expect("b");
        std::fs::write(a.join("1"), b"").expect("1");
        std::fs::write(b.join("2"), b"").expect("2");
        exchange(&a, &b).expect("exchange");
        assert!(a.join("2").exists() && b.join("1").exists());
        assert!(!a.join("1").exists());
    }

    #[test]
    fn staging_names_round_trip() {
        let part = PartitionDir::of(&PartitionKey::new(Table::Logs, "t/1", 0));
        let name = part.name();
        assert_eq!(
            PartitionDir::from_name(Table::Logs, &name),
            Some(part.clone())
        );
        assert_eq!(part.hour_start_ns(), Some(0));
    }
}
