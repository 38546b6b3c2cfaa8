//! Files and directories written whole or not at all: every output and every status goes
//! through here (SPEC §5).
//!
//! A file is written to a temporary name in its own directory with its final mode, fsynced,
//! renamed over the final name, and the directory fsynced. A directory of outputs is staged
//! as a sibling, filled that way, and renamed into place (or exchanged with the old one with
//! `RENAME_EXCHANGE`, then the old one removed), so a reader sees the old set or the new set,
//! never a mix, and a failure leaves nothing behind.
//!
//! An output set carries a marker file ([`MARKER`]) naming its files. Only a directory that
//! holds exactly a marked set is ever replaced or removed, and only the files its marker
//! names are ever deleted: told `--output /etc` by mistake, the dispatcher refuses and
//! touches nothing.

use std::collections::BTreeSet;
use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use std::time::Duration;

use rustix::fs::{renameat_with, RenameFlags, CWD};

use crate::files;
use crate::shutdown::{self, Registration};

/// The file that marks a directory as an output set of the dispatcher, listing its files.
pub const MARKER: &str = ".provision-dispatcher";

const MARKER_HEADER: &str =
    "# Written by provision-dispatcher: the files of this output set, replaced whole by its next run.";

/// Writes `bytes` to `dir/name` with `mode`, atomically.
pub fn write_file(dir: &Path, name: &str, bytes: &[u8], mode: u32) -> io::Result<()> {
    write_file_with(dir, name, mode, |file| file.write_all(bytes))
}

/// Writes `dir/name` with `mode`, atomically: `fill` writes the file's contents.
pub fn write_file_with(
    dir: &Path,
    name: &str,
    mode: u32,
    fill: impl FnOnce(&mut File) -> io::Result<()>,
) -> io::Result<()> {
    let tmp = dir.join(temporary_name(name));
    let result = (|| {
        let mut file = OpenOptions::new().read(true).write(true).create_new(true).mode(mode).open(&tmp)?;
        // The umask may have narrowed the mode; make it exactly what was asked.
        file.set_permissions(fs::Permissions::from_mode(mode))?;
        fill(&mut file)?;
        file.sync_all()?;
        fs::rename(&tmp, dir.join(name))?;
        sync_dir(dir)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

fn temporary_name(name: &str) -> String {
    format!(".{name}.tmp-{}", std::process::id())
}

/// Whether `entry` is a temporary file [`write_file`] makes for `name` (of any process).
fn is_temporary_of(entry: &str, name: &str) -> bool {
    entry
        .strip_prefix('.')
        .and_then(|rest| rest.strip_prefix(name))
        .and_then(|rest| rest.strip_prefix(".tmp-"))
        .is_some_and(|pid| !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()))
}

/// Removes the temporary files [`write_file`] made for any of `names` in `dir` (of any
/// process: the caller makes sure no other writer is at work there).
pub fn remove_temporaries(dir: &Path, names: &[&str]) {
    let Ok(entries) = fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let leftover = entry.file_name().to_str().is_some_and(|n| names.iter().any(|name| is_temporary_of(n, name)));
        if leftover && entry.file_type().is_ok_and(|t| t.is_file()) {
            let _ = fs::remove_file(entry.path());
        }
    }
}

/// A private directory being filled next to where it will be published. Dropping it without
/// [`Staging::publish`] removes what it wrote.
#[derive(Debug)]
pub struct Staging {
    path: PathBuf,
    target: PathBuf,
    names: BTreeSet<String>,
    published: bool,
    _undo: Registration,
    /// The parent directory, locked from before the stale stagings are cleaned until the old
    /// set is removed: two writers (a `run` and a `render`) never see each other's halves.
    /// Declared last, so it is released after `Drop` has removed what was left.
    _lock: File,
}

/// How long a writer waits for another one on the same parent before it refuses.
const OUTPUT_LOCK_PATIENCE: Duration = Duration::from_secs(30);

/// How [`Staging::publish`] treats a target that already holds files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Existing {
    /// Refuse a target that exists and is not empty.
    Refuse,
    /// Swap the new set in atomically and remove the old one, if the target holds an output
    /// set of the dispatcher and nothing else; refuse anything else.
    ReplaceOwn,
}

/// Why a staged directory could not be published.
#[derive(Debug)]
pub enum PublishError {
    /// The target exists and holds files ([`Existing::Refuse`]).
    NotEmpty,
    /// The target holds something the dispatcher did not write; nothing was touched.
    NotOurs(String),
    Io(io::Error),
}

impl Staging {
    /// Creates `.<name>.staging-<pid>` (mode 0700) beside `target` with a marker naming the
    /// files the set will hold, removing what an earlier, interrupted run may have left there.
    /// The parent must be a directory no other user can change ([`files::private_dir`]), and
    /// is locked for as long as the staging lives.
    pub fn new(target: &Path, names: &[&str]) -> io::Result<Staging> {
        let (parent, name) = split(target)?;
        // Resolved once: every later step names the directory that was checked.
        let parent = &fs::canonicalize(parent)?;
        let target = &parent.join(name);
        files::private_dir(parent)?;
        let lock = File::open(parent)?;
        files::lock(&lock, Some(OUTPUT_LOCK_PATIENCE), || {}).map_err(|e| match e.kind() {
            io::ErrorKind::WouldBlock => io::Error::new(
                io::ErrorKind::WouldBlock,
                format!("another process kept {} locked for {} s", parent.display(), OUTPUT_LOCK_PATIENCE.as_secs()),
            ),
            _ => e,
        })?;
        remove_stale(parent, name);
        let path = parent.join(format!(".{name}.staging-{}", std::process::id()));
        let _ = remove_owned(&path);
        DirBuilder::new().mode(0o700).create(&path)?;
        let undo = {
            let path = path.clone();
            shutdown::register(move || {
                let _ = remove_owned(&path);
            })
        };
        fs::set_permissions(&path, fs::Permissions::from_mode(0o700))?;
        let names: BTreeSet<String> = names.iter().map(|n| (*n).to_owned()).collect();
        let mut marker = format!("{MARKER_HEADER}\n");
        for name in &names {
            marker.push_str(name);
            marker.push('\n');
        }
        let staging = Staging { path, target: target.to_owned(), names, published: false, _undo: undo, _lock: lock };
        write_file(&staging.path, MARKER, marker.as_bytes(), 0o600)?;
        Ok(staging)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes one file of the set (a name given to [`Staging::new`]).
    pub fn write(&self, name: &str, bytes: &[u8], mode: u32) -> io::Result<()> {
        if !self.names.contains(name) {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "not a file of this output set"));
        }
        write_file(&self.path, name, bytes, mode)
    }

    /// Renames the staged directory to the target, after fsyncing it.
    pub fn publish(mut self, existing: Existing) -> Result<(), PublishError> {
        sync_dir(&self.path).map_err(PublishError::Io)?;
        let occupied = match fs::symlink_metadata(&self.target) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => false,
            Err(e) => return Err(PublishError::Io(e)),
            Ok(meta) if !meta.is_dir() => {
                return Err(PublishError::NotOurs("it is not a directory".into()));
            }
            Ok(_) => fs::read_dir(&self.target).map_err(PublishError::Io)?.next().is_some(),
        };
        match (occupied, existing) {
            (true, Existing::Refuse) => return Err(PublishError::NotEmpty),
            (true, Existing::ReplaceOwn) => {
                owned_set(&self.target).map_err(PublishError::NotOurs)?;
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
            let _ = remove_owned(&self.path);
        }
    }
}

/// The files of the output set in `dir`, when `dir` holds one and nothing else (temporary
/// files of its own writes aside); otherwise why not, in words for the operator.
fn owned_set(dir: &Path) -> Result<BTreeSet<String>, String> {
    let names = read_marker(dir).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => format!("it holds no {MARKER} file, so the dispatcher did not write it"),
        _ => format!("its {MARKER} file cannot be read: {e}"),
    })?;
    let entries = fs::read_dir(dir).map_err(|e| format!("it cannot be listed: {e}"))?;
    let mut foreign = 0usize;
    for entry in entries {
        let entry = entry.map_err(|e| format!("it cannot be listed: {e}"))?;
        let ours = entry.file_name().to_str().is_some_and(|name| owns(&names, name))
            && entry.file_type().is_ok_and(|t| t.is_file());
        if !ours {
            foreign += 1;
        }
    }
    match foreign {
        0 => Ok(names),
        n => Err(format!("it holds {n} entr{} the dispatcher did not write", if n == 1 { "y" } else { "ies" })),
    }
}

/// Whether the entry `name` of a marked directory is the dispatcher's.
fn owns(names: &BTreeSet<String>, name: &str) -> bool {
    name == MARKER
        || names.contains(name)
        || is_temporary_of(name, MARKER)
        || names.iter().any(|n| is_temporary_of(name, n))
}

/// The names a marker lists; the marker is never followed if it is a symlink.
fn read_marker(dir: &Path) -> io::Result<BTreeSet<String>> {
    let file = OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW).open(dir.join(MARKER))?;
    let mut text = String::new();
    file.take(64 * 1024).read_to_string(&mut text)?;
    let names: BTreeSet<String> =
        text.lines().filter(|l| !l.is_empty() && !l.starts_with('#')).map(str::to_owned).collect();
    if names.iter().any(|n| n.contains('/') || n == "." || n == "..") {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "it names something outside its directory"));
    }
    Ok(names)
}

/// Removes what the dispatcher wrote in `dir` (the files its marker names, their temporary
/// files, the marker), then `dir` itself if that left it empty. Nothing else is touched.
pub fn remove_owned(dir: &Path) -> io::Result<()> {
    let names = match read_marker(dir) {
        Ok(names) => names,
        // A staging directory that was created but not yet marked is empty.
        Err(e) if e.kind() == io::ErrorKind::NotFound => BTreeSet::new(),
        Err(e) => return Err(e),
    };
    for entry in fs::read_dir(dir)?.flatten() {
        let ours = entry.file_name().to_str().is_some_and(|name| name != MARKER && owns(&names, name));
        if ours && entry.file_type().is_ok_and(|t| t.is_file()) {
            fs::remove_file(entry.path())?;
        }
    }
    match fs::remove_file(dir.join(MARKER)) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    fs::remove_dir(dir)
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
            let _ = remove_owned(&entry.path());
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

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> =
            fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        names.sort();
        names
    }

    fn stage(target: &Path, files: &[(&str, &str)]) -> Staging {
        let list: Vec<&str> = files.iter().map(|(n, _)| *n).collect();
        let staging = Staging::new(target, &list).unwrap();
        for (name, text) in files {
            staging.write(name, text.as_bytes(), 0o600).unwrap();
        }
        staging
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
            stage(&target, &[("a", "1")]).publish(Existing::Refuse).unwrap();
            assert_eq!(fs::read(target.join("a")).unwrap(), b"1");
            assert_eq!(names(&target), [MARKER, "a"]);
            assert_eq!(mode(&target), 0o700);
        }
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 2, "no staging directory left");
    }

    #[test]
    fn only_files_of_the_set_are_written() {
        let dir = tempfile::tempdir().unwrap();
        let staging = Staging::new(&dir.path().join("out"), &["a"]).unwrap();
        assert_eq!(staging.write("b", b"", 0o600).unwrap_err().kind(), io::ErrorKind::InvalidInput);
    }

    #[test]
    fn an_output_set_of_the_dispatcher_is_replaced_whole() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("out");
        stage(&target, &[("old", "old"), ("both", "1")]).publish(Existing::ReplaceOwn).unwrap();
        assert!(matches!(stage(&target, &[("new", "new")]).publish(Existing::Refuse), Err(PublishError::NotEmpty)));
        stage(&target, &[("new", "new"), ("both", "2")]).publish(Existing::ReplaceOwn).unwrap();
        assert_eq!(names(&target), [MARKER, "both", "new"]);
        assert_eq!(fs::read(target.join("both")).unwrap(), b"2");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1, "the old set is gone");
    }

    #[test]
    fn anything_the_dispatcher_did_not_write_is_refused_and_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        // Not an output set at all: a tree of somebody's files.
        let foreign = dir.path().join("etc");
        fs::create_dir_all(foreign.join("a/b/c")).unwrap();
        fs::write(foreign.join("a/b/c/deep"), "keep").unwrap();
        fs::write(foreign.join("recipe.env"), "keep").unwrap();
        // An output set with one file added by somebody else.
        let added = dir.path().join("added");
        stage(&added, &[("recipe.env", "x")]).publish(Existing::ReplaceOwn).unwrap();
        fs::write(added.join("notes"), "keep").unwrap();
        // A marker that names a file outside its directory.
        let escaping = dir.path().join("escaping");
        fs::create_dir(&escaping).unwrap();
        fs::write(escaping.join(MARKER), "../etc/recipe.env\n").unwrap();
        // A file and a symlink where the directory should be.
        let file = dir.path().join("file");
        fs::write(&file, "keep").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&added, &link).unwrap();
        for target in [&foreign, &added, &escaping, &file, &link] {
            let result = stage(target, &[("recipe.env", "new")]).publish(Existing::ReplaceOwn);
            assert!(matches!(result, Err(PublishError::NotOurs(_))), "{}: {result:?}", target.display());
        }
        assert_eq!(fs::read(foreign.join("a/b/c/deep")).unwrap(), b"keep");
        assert_eq!(fs::read(foreign.join("recipe.env")).unwrap(), b"keep");
        assert_eq!(names(&added), [MARKER, "notes", "recipe.env"]);
        assert_eq!(fs::read(&file).unwrap(), b"keep");
        assert_eq!(names(dir.path()), ["added", "escaping", "etc", "file", "link"], "no staging directory left");
    }

    #[test]
    fn dropping_an_unpublished_staging_removes_it_and_stale_ones_are_cleaned() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("out");
        // A stale staging directory of a killed run: its files, its marker, a temporary file.
        let stale = dir.path().join(".out.staging-1");
        fs::create_dir(&stale).unwrap();
        fs::write(stale.join(MARKER), "a\n").unwrap();
        fs::write(stale.join("a"), "1").unwrap();
        fs::write(stale.join(".a.tmp-1"), "1").unwrap();
        // Another one that somebody put a file of their own into: only ours is removed.
        let touched = dir.path().join(".out.staging-2");
        fs::create_dir(&touched).unwrap();
        fs::write(touched.join(MARKER), "a\n").unwrap();
        fs::write(touched.join("a"), "1").unwrap();
        fs::write(touched.join("theirs"), "keep").unwrap();
        drop(stage(&target, &[("a", "1")]));
        assert_eq!(names(dir.path()), [".out.staging-2"]);
        assert_eq!(names(&touched), ["theirs"]);
    }
}
