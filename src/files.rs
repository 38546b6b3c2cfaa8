//! The one standard for what the dispatcher reads and where it writes, outside the media
//! (which [`crate::media::mount::Root`] opens beneath its root):
//!
//! - a file it reads (the image's allowlist, status.json) is opened without following a
//!   symlink and without blocking, must be a regular file (never a FIFO, a device or a
//!   directory), and is read up to a cap, never whole ([`read_regular`]);
//! - a directory it writes in (the state directory, the parent of an output set) can be
//!   changed by root and the dispatcher's user only, as can every directory above it unless
//!   that one is sticky ([`private_dir`]): otherwise another user could swap an entry for a
//!   symlink between two steps and have root write, chmod or delete through it;
//! - a lock is waited for at most a bounded time, and a stop ends the wait ([`lock`]).

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

use rustix::fs::{flock, FlockOperation};

/// Reads the regular file `path`, at most `cap` bytes; a larger file, a symlink, a FIFO, a
/// device or a directory is an error that says so.
pub fn read_regular(path: &Path, cap: u64) -> io::Result<Vec<u8>> {
    let file = open_regular(path)?;
    // Sized once from the length (a hint only: what is read decides), so that a large file
    // is not copied again and again as it grows, nor held twice while it is.
    let hint = file.metadata()?.len();
    let mut bytes = Vec::with_capacity(hint.min(cap) as usize + 1);
    file.take(cap + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > cap {
        return Err(io::Error::new(io::ErrorKind::InvalidData, format!("is larger than {cap} bytes")));
    }
    Ok(bytes)
}

/// Opens `path` for reading: O_NOFOLLOW (a symlink is refused), O_NONBLOCK (a FIFO cannot
/// hold the open), and only a regular file is kept.
pub fn open_regular(path: &Path) -> io::Result<File> {
    let file = File::options()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => {
                io::Error::new(io::ErrorKind::InvalidData, "is a symbolic link, which is not followed")
            }
            _ => e,
        })?;
    if !file.metadata()?.is_file() {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "is not a regular file"));
    }
    Ok(file)
}

/// Checks that `dir` (not a symlink itself) is a directory that only root or this process's
/// user can change, and that no directory above it lets another user rename it: each is
/// theirs too, or sticky. The error says which directory fails and why.
pub fn private_dir(dir: &Path) -> io::Result<()> {
    let meta = dir.symlink_metadata()?;
    if meta.file_type().is_symlink() {
        return Err(unsafe_dir(dir, "is a symbolic link"));
    }
    if !meta.is_dir() {
        return Err(unsafe_dir(dir, "is not a directory"));
    }
    check_owner_and_mode(dir, &meta, false)?;
    let real = std::fs::canonicalize(dir)?;
    for ancestor in real.ancestors().skip(1) {
        check_owner_and_mode(ancestor, &ancestor.metadata()?, true)?;
    }
    Ok(())
}

fn check_owner_and_mode(dir: &Path, meta: &std::fs::Metadata, sticky_is_enough: bool) -> io::Result<()> {
    let us = rustix::process::geteuid().as_raw();
    if meta.uid() != 0 && meta.uid() != us {
        return Err(unsafe_dir(dir, &format!("belongs to another user (uid {})", meta.uid())));
    }
    let mode = meta.permissions().mode();
    let others_write = mode & 0o022 != 0;
    let sticky = mode & libc::S_ISVTX != 0;
    if others_write && !(sticky_is_enough && sticky) {
        return Err(unsafe_dir(dir, &format!("can be written by other users (mode {:04o})", mode & 0o7777)));
    }
    Ok(())
}

fn unsafe_dir(dir: &Path, why: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!("{} {why}; the dispatcher writes only where no other user can change its entries", dir.display()),
    )
}

/// How long [`lock`] looks again while another process holds the lock.
const LOCK_POLL: Duration = Duration::from_millis(100);

/// Takes an exclusive `flock` on `file`, looking again while another process holds it, for
/// at most `patience` (`None`: as long as it takes). `waiting` is called once, when the lock
/// is found held. A stop (SIGTERM) ends the wait with `Interrupted`; the patience running out
/// with `WouldBlock`.
pub fn lock(file: &File, patience: Option<Duration>, mut waiting: impl FnMut()) -> io::Result<()> {
    let started = Instant::now();
    let mut said = false;
    loop {
        match flock(file, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => return Ok(()),
            Err(rustix::io::Errno::WOULDBLOCK) => {}
            Err(e) => return Err(e.into()),
        }
        if crate::shutdown::stop_requested().is_some() {
            return Err(io::ErrorKind::Interrupted.into());
        }
        if patience.is_some_and(|patience| started.elapsed() >= patience) {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        if !said {
            waiting();
            said = true;
        }
        std::thread::sleep(LOCK_POLL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::symlink;

    #[test]
    fn only_regular_files_within_the_cap_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("file");
        fs::write(&file, "12345").unwrap();
        assert_eq!(read_regular(&file, 5).unwrap(), b"12345");
        assert!(read_regular(&file, 4).unwrap_err().to_string().contains("larger than 4 bytes"));
        symlink(&file, dir.path().join("link")).unwrap();
        rustix::fs::mknodat(rustix::fs::CWD, dir.path().join("fifo"), rustix::fs::FileType::Fifo, 0o600.into(), 0)
            .unwrap();
        for (path, why) in [
            (dir.path().join("link"), "symbolic link"),
            (dir.path().join("fifo"), "not a regular file"),
            (dir.path().to_owned(), "not a regular file"),
            ("/dev/zero".into(), "not a regular file"),
        ] {
            let err = read_regular(&path, 1 << 20).unwrap_err();
            assert!(err.to_string().contains(why), "{}: {err}", path.display());
        }
    }

    #[test]
    fn a_directory_others_can_change_is_not_private() {
        let dir = tempfile::tempdir().unwrap();
        let private = dir.path().join("private");
        fs::create_dir(&private).unwrap();
        fs::set_permissions(&private, fs::Permissions::from_mode(0o755)).unwrap();
        private_dir(&private).unwrap();
        symlink(&private, dir.path().join("link")).unwrap();
        let err = private_dir(&dir.path().join("link")).unwrap_err();
        assert!(err.to_string().contains("is a symbolic link"), "{err}");
        for mode in [0o777, 0o1777, 0o775] {
            fs::set_permissions(&private, fs::Permissions::from_mode(mode)).unwrap();
            let err = private_dir(&private).unwrap_err();
            assert!(err.to_string().contains("can be written by other users"), "{mode:o}: {err}");
        }
        // Below a sticky directory (/tmp) a private one is safe; below a shared one it is not.
        fs::set_permissions(&private, fs::Permissions::from_mode(0o700)).unwrap();
        let inner = private.join("inner");
        fs::create_dir(&inner).unwrap();
        fs::set_permissions(&private, fs::Permissions::from_mode(0o1777)).unwrap();
        private_dir(&inner).unwrap();
        fs::set_permissions(&private, fs::Permissions::from_mode(0o777)).unwrap();
        let err = private_dir(&inner).unwrap_err();
        assert!(err.to_string().starts_with(&format!("{} can be written", private.display())), "{err}");
    }
}
