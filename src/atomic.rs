//! Files and directories written whole or not at all: every output and every status goes
//! through here (SPEC §5).
//!
//! A file is written to a temporary name in its own directory with its final mode, fsynced,
//! renamed over the final name, and the directory fsynced. A directory of outputs is staged
//! as a sibling, filled that way, and renamed into place (or exchanged with the old one with
//! `RENAME_EXCHANGE`, then the old one removed), so a reader sees the old set or the new set,
//! never a mix, and a failure leaves nothing behind.

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use rustix::fs::{renameat_with, RenameFlags, CWD};

use crate::shutdown::{self, Registration, Undo};

/// Writes `bytes` to `dir/name` with `mode`, atomically.
pub fn write_file(dir: &Path, name: &str, bytes: &[u8], mode: u32) -> io::Result<()> {
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let result = (|| {
        let mut file = OpenOptions::new().write(true).create_new(true).mode(mode).open(&tmp)?;
        // The umask may have narrowed the mode; make it exactly what was asked.
        file.set_permissions(fs::Permissions::from_mode(mode))?;
        file.write_all(bytes)?;
        file.sync_all()?;
        fs::rename(&tmp, dir.join(name))?;
        sync_dir(dir)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// A private directory being filled next to where it will be published. Dropping it without
/// [`Staging::publish`] removes it and everything in it.
#[derive(Debug)]
pub struct Staging {
    path: PathBuf,
    target: PathBuf,
    published: bool,
    _undo: Registration,
}

/// How [`Staging::publish`] treats a target that already holds files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Existing {
    /// Refuse a target that exists and is not empty.
    Refuse,
    /// Swap the new set in atomically and remove the old one.
    Replace,
}

/// Why a staged directory could not be published.
#[derive(Debug)]
pub enum PublishError {
    /// The target exists and holds files ([`Existing::Refuse`]).
    NotEmpty,
    Io(io::Error),
}

impl Staging {
    /// Creates `.<name>.staging-<pid>` (mode 0700) beside `target`, removing what an earlier,
    /// interrupted run may have left there.
    pub fn new(target: &Path) -> io::Result<Staging> {
        let (parent, name) = split(target)?;
        remove_stale(parent, name);
        let path = parent.join(format!(".{name}.staging-{}", std::process::id()));
        let _ = fs::remove_dir_all(&path);
        DirBuilder::new().mode(0o700).create(&path)?;
        let undo = shutdown::register(Undo::RemoveDir(path.clone()));
        fs::set_permissions(&path, fs::Permissions::from_mode(0o700))?;
        Ok(Staging { path, target: target.to_owned(), published: false, _undo: undo })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Renames the staged directory to the target, after fsyncing it.
    pub fn publish(mut self, existing: Existing) -> Result<(), PublishError> {
        sync_dir(&self.path).map_err(PublishError::Io)?;
        let occupied = match fs::read_dir(&self.target) {
            Ok(mut entries) => entries.next().is_some(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => false,
            Err(e) => return Err(PublishError::Io(e)),
        };
        match (occupied, existing) {
            (true, Existing::Refuse) => return Err(PublishError::NotEmpty),
            (true, Existing::Replace) => {
                renameat_with(CWD, &self.path, CWD, &self.target, RenameFlags::EXCHANGE)
                    .map_err(|e| PublishError::Io(e.into()))?;
                // The staging path now holds the old set; Drop removes it.
                self.published = false;
            }
            // rename(2) replaces an empty directory, and creates a missing one.
            (false, _) => {
                fs::rename(&self.path, &self.target).map_err(PublishError::Io)?;
                self.published = true;
            }
        }
        let (parent, _) = split(&self.target).map_err(PublishError::Io)?;
        sync_dir(parent).map_err(PublishError::Io)
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        if !self.published {
            let _ = fs::remove_dir_all(&self.path);
        }
    }
}

fn split(target: &Path) -> io::Result<(&Path, &str)> {
    let invalid = || io::Error::new(io::ErrorKind::InvalidInput, "not a directory path with a UTF-8 name");
    let name = target.file_name().and_then(|n| n.to_str()).ok_or_else(invalid)?;
    let parent = target.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    Ok((parent, name))
}

/// Staging directories of runs that were killed before they could clean up.
fn remove_stale(parent: &Path, name: &str) {
    let prefix = format!(".{name}.staging-");
    let Ok(entries) = fs::read_dir(parent) else { return };
    for entry in entries.flatten() {
        if entry.file_name().to_str().is_some_and(|n| n.starts_with(&prefix)) {
            let _ = fs::remove_dir_all(entry.path());
        }
    }
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn mode(path: &Path) -> u32 {
        fs::metadata(path).unwrap().mode() & 0o7777
    }

    #[test]
    fn file_is_written_with_its_mode_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        write_file(dir.path(), "status.json", b"{}", 0o600).unwrap();
        write_file(dir.path(), "status.json", b"{\"a\": 1}", 0o600).unwrap();
        assert_eq!(fs::read(dir.path().join("status.json")).unwrap(), b"{\"a\": 1}");
        assert_eq!(mode(&dir.path().join("status.json")), 0o600);
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1, "no temporary file left");
    }

    #[test]
    fn staging_publishes_into_a_missing_or_empty_directory() {
        let dir = tempfile::tempdir().unwrap();
        for target in [dir.path().join("missing"), dir.path().join("empty")] {
            if target.ends_with("empty") {
                fs::create_dir(&target).unwrap();
            }
            let staging = Staging::new(&target).unwrap();
            write_file(staging.path(), "a", b"1", 0o600).unwrap();
            staging.publish(Existing::Refuse).unwrap();
            assert_eq!(fs::read(target.join("a")).unwrap(), b"1");
            assert_eq!(mode(&target), 0o700);
        }
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 2, "no staging directory left");
    }

    #[test]
    fn a_non_empty_target_is_refused_or_replaced_whole() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("out");
        fs::create_dir(&target).unwrap();
        fs::write(target.join("old"), "old").unwrap();

        let staging = Staging::new(&target).unwrap();
        write_file(staging.path(), "new", b"new", 0o600).unwrap();
        assert!(matches!(staging.publish(Existing::Refuse), Err(PublishError::NotEmpty)));
        assert!(target.join("old").exists());

        let staging = Staging::new(&target).unwrap();
        write_file(staging.path(), "new", b"new", 0o600).unwrap();
        staging.publish(Existing::Replace).unwrap();
        let names: Vec<_> = fs::read_dir(&target).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, ["new"]);
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1, "the old set is gone");
    }

    #[test]
    fn dropping_an_unpublished_staging_removes_it_and_stale_ones_are_cleaned() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("out");
        fs::create_dir(dir.path().join(".out.staging-1")).unwrap();
        let staging = Staging::new(&target).unwrap();
        write_file(staging.path(), "a", b"1", 0o600).unwrap();
        drop(staging);
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
