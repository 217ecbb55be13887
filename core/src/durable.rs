//! Making file changes survive a crash: a file is replaced whole or not at all, and a new or
//! renamed entry stays in its folder.

use std::fs::File;
use std::io::Write;
use std::path::Path;

/// Fsyncs a folder, which makes the files created or renamed in it durable.
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Makes everything written to the filesystem holding `path` durable, in one call (Linux
/// `syncfs`): many new files at once cost one flush of the disk's cache instead of one per file
/// and per folder. Errors of the writeback are reported (Linux 5.8 and later).
pub fn sync_filesystem(path: &Path) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let f = File::open(path)?;
    // SAFETY: `f` is an open descriptor for the duration of the call.
    let rc = unsafe { libc::syncfs(f.as_raw_fd()) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The temporary a new version of `path` is written to before it is renamed over it,
/// `<path>.<pid>.tmp`: a temporary of this process alone, so two writers of one file
/// (overlapping runs) each rename a whole file of their own.
pub fn temporary_of(path: &Path) -> std::path::PathBuf {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".{}.tmp", std::process::id()));
    std::path::PathBuf::from(tmp)
}

/// Replaces `path` with `bytes`: written to [`temporary_of`] `path`, fsynced, renamed over
/// `path`, and the folder fsynced, so a crash leaves the old content or the new, never a mix.
pub fn replace_file(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = temporary_of(path);
    let mut f = File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    // A bare file name's folder is the working directory.
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty());
    sync_dir(dir.unwrap_or(Path::new(".")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replaced_file_holds_the_new_bytes_and_no_temporary_is_left() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("state.json");
        replace_file(&path, b"old").expect("first");
        replace_file(&path, b"new").expect("second");
        assert_eq!(std::fs::read(&path).expect("read"), b"new");
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .expect("list")
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(names, ["state.json"]);
    }
}
