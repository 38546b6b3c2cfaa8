//! Finding the task media (SPEC §6.1): a path given on the command line or the kernel
//! command line, or the block device whose label is the one wanted, read from the device
//! itself. Virtual media appears late, so both wait, with progress, up to a deadline.

use std::fmt;
use std::fs;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use boot_io::devices::{describe, Readers};

use super::label::{probe, Filesystem};

/// What the dispatcher was asked to find.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// A block device, an ISO image file, or a directory (an already mounted tree).
    Path(PathBuf),
    /// The block device with this ISO 9660 volume id or FAT label.
    Label(String),
}

impl fmt::Display for Request {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Request::Path(path) => write!(f, "{}", path.display()),
            Request::Label(label) => write!(f, "label {label}"),
        }
    }
}

/// The media, found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    Directory(PathBuf),
    Device { path: PathBuf, fs: Filesystem },
    Image { path: PathBuf, fs: Filesystem },
}

impl Found {
    pub fn path(&self) -> &Path {
        match self {
            Found::Directory(path) | Found::Device { path, .. } | Found::Image { path, .. } => path,
        }
    }
}

/// Why nothing was found: what was looked at, for the operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotFound(pub String);

impl fmt::Display for NotFound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NotFound {}

/// The block devices of this machine, read from sysfs and /dev (overridable for tests). Their
/// labels are read each on a thread of its own (boot-io's `Readers`, which the initrd's search
/// for its boot medium uses too): a failing disk or a BMC's virtual media may hang a read for
/// many seconds, and that device must not hold up the others, the wait, or a stop.
#[derive(Debug, Clone)]
pub struct Devices {
    class: PathBuf,
    dev: PathBuf,
    readers: Arc<Readers<Filesystem>>,
}

/// How long one look waits for the devices' answers, at most and at least: a device that
/// answers later is taken at a later look, one that never answers is named as not answering.
const LOOK_PATIENCE: Duration = Duration::from_secs(1);
const LOOK_PATIENCE_MIN: Duration = Duration::from_millis(100);

/// Reads the label of the device or image at `path`.
fn read_label(path: &Path) -> std::io::Result<Filesystem> {
    boot_io::devices::open(path).and_then(|file| probe(&file))
}

/// How much a device is preferred as task media (lower first). Partitions of fixed disks
/// are never taken: they hold somebody's data, not virtual media.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    CdRom,
    Removable,
    Loop,
    FixedDisk,
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::CdRom => "CD-ROM",
            Kind::Removable => "removable",
            Kind::Loop => "loop",
            Kind::FixedDisk => "fixed disk",
        })
    }
}

/// One device looked at, and what it holds.
#[derive(Debug, Clone)]
pub struct Candidate {
    pub name: String,
    pub kind: Kind,
    pub path: PathBuf,
    pub holds: Result<Filesystem, String>,
}

impl Devices {
    pub fn system() -> Devices {
        Devices::at("/sys/class/block", "/dev")
    }

    pub fn at(class: impl Into<PathBuf>, dev: impl Into<PathBuf>) -> Devices {
        Devices { class: class.into(), dev: dev.into(), readers: Readers::new(read_label) }
    }

    /// The same devices, their labels read by `read` (a test's slow device).
    #[cfg(test)]
    fn read_by(self, read: fn(&Path) -> std::io::Result<Filesystem>) -> Devices {
        Devices { readers: Readers::new(read), ..self }
    }

    /// Every device that could be task media, best first, with what each held when it was
    /// read by `deadline`.
    pub fn scan(&self, deadline: Instant, stop: &dyn Fn() -> bool) -> Vec<Candidate> {
        let Ok(entries) = fs::read_dir(&self.class) else { return Vec::new() };
        let mut found: Vec<(String, Kind, PathBuf)> = entries
            .flatten()
            .filter_map(|entry| {
                let name = entry.file_name().into_string().ok()?;
                let kind = self.kind(&name)?;
                let path = self.dev.join(&name);
                Some((name, kind, path))
            })
            .collect();
        found.sort_by(|a, b| (a.1, &a.0).cmp(&(b.1, &b.0)));
        let paths: Vec<PathBuf> = found.iter().map(|(_, _, path)| path.clone()).collect();
        let holds = self.readers.read_all(&paths, deadline, stop);
        let holds = holds.into_iter().map(|answer| answer.map_err(|unread| unread.to_string()));
        found.into_iter().zip(holds).map(|((name, kind, path), holds)| Candidate { name, kind, path, holds }).collect()
    }

    fn kind(&self, name: &str) -> Option<Kind> {
        if ["ram", "zram", "dm-", "md", "nbd", "mtdblock"].iter().any(|p| name.starts_with(p)) {
            return None;
        }
        let dir = self.class.join(name);
        let read = |path: PathBuf| fs::read_to_string(path).map(|s| s.trim().to_owned()).unwrap_or_default();
        if read(dir.join("size")).parse::<u64>().unwrap_or(0) == 0 {
            return None;
        }
        let partition = dir.join("partition").exists();
        // A partition's flags are its disk's: the parent directory in sysfs.
        let disk = if partition { dir.join("..") } else { dir.clone() };
        if name.starts_with("sr") || read(disk.join("device/type")) == "5" {
            Some(Kind::CdRom)
        } else if read(disk.join("removable")) == "1" {
            Some(Kind::Removable)
        } else if partition {
            None
        } else if name.starts_with("loop") {
            Some(Kind::Loop)
        } else {
            Some(Kind::FixedDisk)
        }
    }
}

/// Looks for the media until it is found, `wait` has passed or `stop` says so, calling
/// `progress` about every five seconds with what has been looked at.
pub fn find(
    request: &Request,
    devices: &Devices,
    wait: Duration,
    stop: &dyn Fn() -> bool,
    mut progress: impl FnMut(&str),
) -> Result<Found, NotFound> {
    let started = Instant::now();
    let mut next_report = Duration::from_secs(5);
    loop {
        if stop() {
            return Err(NotFound(format!("stopped while looking for media at {request}")));
        }
        let patience = wait.saturating_sub(started.elapsed()).clamp(LOOK_PATIENCE_MIN, LOOK_PATIENCE);
        let deadline = Instant::now() + patience;
        let attempt = match request {
            Request::Path(path) => at_path(devices, path, deadline, stop),
            Request::Label(label) => by_label(devices, label, deadline, stop),
        };
        let seen = match attempt {
            Attempt::Found(found) => return Ok(found),
            Attempt::Refused(why) => return Err(NotFound(why)),
            Attempt::NotYet(seen) => seen,
        };
        let elapsed = started.elapsed();
        if elapsed >= wait {
            return Err(NotFound(format!("no media at {request} after {} s; {seen}", wait.as_secs())));
        }
        if elapsed >= next_report {
            progress(&format!(
                "waiting for media at {request} ({} of {} s); {seen}",
                elapsed.as_secs(),
                wait.as_secs()
            ));
            next_report += Duration::from_secs(5);
        }
        std::thread::sleep(Duration::from_millis(200).min(wait - elapsed));
    }
}

enum Attempt {
    Found(Found),
    /// Found something that can never be the media; waiting longer will not help.
    Refused(String),
    /// Not there (yet): what was looked at.
    NotYet(String),
}

fn at_path(devices: &Devices, path: &Path, deadline: Instant, stop: &dyn Fn() -> bool) -> Attempt {
    let meta = match fs::metadata(path) {
        Ok(meta) => meta,
        Err(e) => return Attempt::NotYet(format!("looked at {}: {}", path.display(), describe(&e))),
    };
    if meta.is_dir() {
        return Attempt::Found(Found::Directory(path.to_owned()));
    }
    let device = meta.file_type().is_block_device();
    if !device && !meta.is_file() {
        return Attempt::Refused(format!("{} is not a block device, an image file or a directory", path.display()));
    }
    let holds = devices.readers.read_all(&[path.to_owned()], deadline, stop).pop();
    match holds.unwrap_or(Err(boot_io::devices::Unread::NotAnswering)).map_err(|unread| unread.to_string()) {
        Ok(Filesystem::Unknown) => {
            Attempt::Refused(format!("{} holds no ISO 9660, FAT or squashfs filesystem", path.display()))
        }
        Ok(fs) if device => Attempt::Found(Found::Device { path: path.to_owned(), fs }),
        Ok(fs) => Attempt::Found(Found::Image { path: path.to_owned(), fs }),
        // A CD drive without its medium yet, for instance.
        Err(why) => Attempt::NotYet(format!("looked at {}: {why}", path.display())),
    }
}

/// The devices labelled `label` now, at one look of at most a second: those that answer in
/// that time.
pub fn labelled(devices: &Devices, label: &str, stop: &dyn Fn() -> bool) -> Vec<Candidate> {
    let candidates = devices.scan(Instant::now() + LOOK_PATIENCE, stop);
    candidates.into_iter().filter(|c| c.holds.as_ref().is_ok_and(|fs| fs.label() == Some(label))).collect()
}

fn by_label(devices: &Devices, label: &str, deadline: Instant, stop: &dyn Fn() -> bool) -> Attempt {
    let candidates = devices.scan(deadline, stop);
    let matching: Vec<(&Candidate, &Filesystem)> = candidates
        .iter()
        .filter_map(|c| Some((c, c.holds.as_ref().ok()?)))
        .filter(|(_, fs)| fs.label() == Some(label))
        .collect();
    match matching.as_slice() {
        [] => Attempt::NotYet(looked_at(&candidates)),
        [(one, fs)] => Attempt::Found(Found::Device { path: one.path.clone(), fs: (*fs).clone() }),
        // Two task media would mean two recipes: refuse rather than guess which disk to wipe.
        several => Attempt::Refused(format!(
            "{} devices have label {label}: {}; attach exactly one task medium",
            several.len(),
            several.iter().map(|(c, _)| c.name.as_str()).collect::<Vec<_>>().join(", ")
        )),
    }
}

fn looked_at(candidates: &[Candidate]) -> String {
    if candidates.is_empty() {
        return "looked at no block device (none present)".into();
    }
    let each: Vec<String> = candidates
        .iter()
        .map(|c| {
            let holds = match &c.holds {
                Ok(fs) => match fs.label() {
                    Some(label) => format!("label {label}"),
                    None if *fs == Filesystem::Unknown => "no ISO 9660 or FAT label".into(),
                    None => "no label".into(),
                },
                Err(why) => why.clone(),
            };
            format!("{} ({}, {holds})", c.name, c.kind)
        })
        .collect();
    format!("looked at {}", each.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::media::label::tests::iso_header;
    use std::os::unix::fs::symlink;

    /// A fake sysfs and /dev: each device a directory with `size` (and flags), each node a
    /// regular file with the device's first bytes.
    struct FakeHost {
        root: tempfile::TempDir,
    }

    impl FakeHost {
        fn new() -> FakeHost {
            let root = tempfile::tempdir().unwrap();
            fs::create_dir_all(root.path().join("sys/class/block")).unwrap();
            fs::create_dir_all(root.path().join("sys/devices")).unwrap();
            fs::create_dir_all(root.path().join("dev")).unwrap();
            FakeHost { root }
        }

        fn devices(&self) -> Devices {
            Devices::at(self.root.path().join("sys/class/block"), self.root.path().join("dev"))
        }

        /// `parent` makes a partition of that disk.
        fn add(&self, name: &str, parent: Option<&str>, flags: &[(&str, &str)], contents: &[u8]) {
            let dir = match parent {
                Some(disk) => self.root.path().join("sys/devices").join(disk).join(name),
                None => self.root.path().join("sys/devices").join(name),
            };
            fs::create_dir_all(&dir).unwrap();
            fs::write(dir.join("size"), "2048\n").unwrap();
            if parent.is_some() {
                fs::write(dir.join("partition"), "1\n").unwrap();
            }
            for (file, value) in flags {
                let path = dir.join(file);
                fs::create_dir_all(path.parent().unwrap()).unwrap();
                fs::write(path, value).unwrap();
            }
            symlink(&dir, self.root.path().join("sys/class/block").join(name)).unwrap();
            fs::write(self.root.path().join("dev").join(name), contents).unwrap();
        }
    }

    fn label(name: &str) -> Vec<u8> {
        iso_header(name)
    }

    #[test]
    fn finds_the_labelled_cdrom_and_prefers_it() {
        let host = FakeHost::new();
        host.add("vda", None, &[("removable", "0")], &label("TASK"));
        host.add("sr0", None, &[("removable", "1"), ("device/type", "5")], &label("TASK"));
        host.add("sdb", None, &[("removable", "1")], &label("OTHER"));
        let kinds: Vec<_> = host
            .devices()
            .scan(Instant::now() + LOOK_PATIENCE, &|| false)
            .iter()
            .map(|c| (c.name.clone(), c.kind))
            .collect();
        assert_eq!(
            kinds,
            [("sr0".into(), Kind::CdRom), ("sdb".into(), Kind::Removable), ("vda".into(), Kind::FixedDisk)]
        );
        // Two devices carry TASK: refused, not guessed.
        let err = find(&Request::Label("TASK".into()), &host.devices(), Duration::ZERO, &|| false, |_| {}).unwrap_err();
        assert!(err.0.contains("2 devices have label TASK: sr0, vda"), "{err}");
    }

    #[test]
    fn the_devices_labelled_now_are_named_at_one_look() {
        let host = FakeHost::new();
        host.add("sr0", None, &[("device/type", "5")], &label("PROVISION-MAINT"));
        host.add("sr1", None, &[("device/type", "5")], &label("TASK"));
        host.add("vda", None, &[], &label("TASK"));
        let names = |label| labelled(&host.devices(), label, &|| false).into_iter().map(|c| c.name).collect::<Vec<_>>();
        assert_eq!(names("TASK"), ["sr1", "vda"]);
        assert_eq!(names("OTHER"), Vec::<String>::new());
    }

    #[test]
    fn never_takes_a_partition_of_a_fixed_disk() {
        let host = FakeHost::new();
        host.add("vda", None, &[("removable", "0")], b"");
        host.add("vda1", Some("vda"), &[], &label("TASK"));
        host.add("sdc", None, &[("removable", "1")], b"");
        host.add("sdc1", Some("sdc"), &[], &label("TASK"));
        let found = find(&Request::Label("TASK".into()), &host.devices(), Duration::ZERO, &|| false, |_| {}).unwrap();
        assert_eq!(found.path(), host.root.path().join("dev/sdc1"));
    }

    #[test]
    fn names_what_was_looked_at_when_nothing_matches() {
        let host = FakeHost::new();
        host.add("sr0", None, &[("device/type", "5")], b"");
        host.add("vdb", None, &[], &label("ROOT"));
        host.add("zram0", None, &[], &label("TASK"));
        let err = find(&Request::Label("TASK".into()), &host.devices(), Duration::ZERO, &|| false, |_| {}).unwrap_err();
        assert_eq!(
            err.0,
            "no media at label TASK after 0 s; looked at sr0 (CD-ROM, no ISO 9660 or FAT label), vdb (fixed disk, label ROOT)"
        );
    }

    #[test]
    fn waits_for_late_media_and_reports_progress() {
        let host = FakeHost::new();
        let root = host.root.path().to_owned();
        let late = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(600));
            let dir = root.join("sys/devices/sr0");
            fs::create_dir_all(dir.join("device")).unwrap();
            fs::write(root.join("dev/sr0"), label("TASK")).unwrap();
            fs::write(dir.join("device/type"), "5").unwrap();
            fs::write(dir.join("size"), "100").unwrap();
            symlink(&dir, root.join("sys/class/block/sr0")).unwrap();
        });
        let found =
            find(&Request::Label("TASK".into()), &host.devices(), Duration::from_secs(10), &|| false, |_| {}).unwrap();
        late.join().unwrap();
        assert!(matches!(found, Found::Device { ref fs, .. } if fs.label() == Some("TASK")));
    }

    /// Reads of `sdz` hang (a failing disk, virtual media that stopped answering).
    static HUNG_READS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

    fn hanging_sdz(path: &Path) -> std::io::Result<Filesystem> {
        if path.ends_with("sdz") {
            HUNG_READS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            std::thread::sleep(Duration::from_secs(30));
        }
        read_label(path)
    }

    #[test]
    fn a_hung_device_holds_up_neither_the_others_nor_the_wait_nor_a_stop() {
        let host = FakeHost::new();
        host.add("sdz", None, &[("removable", "1")], &label("OTHER"));
        let devices = host.devices().read_by(hanging_sdz);
        // Alone: the wait holds, and the device is named as not answering.
        let started = Instant::now();
        let err =
            find(&Request::Label("TASK".into()), &devices, Duration::from_secs(2), &|| false, |_| {}).unwrap_err();
        let took = started.elapsed();
        assert!(took >= Duration::from_secs(2) && took < Duration::from_secs(3), "{took:?}");
        assert!(
            err.0.starts_with("no media at label TASK after 2 s; looked at sdz (removable, not answering"),
            "{err}"
        );
        assert_eq!(HUNG_READS.load(std::sync::atomic::Ordering::SeqCst), 1, "no second reader on a stuck device");
        // With the task media beside it: found at the first look.
        host.add("sr0", None, &[("device/type", "5")], &label("TASK"));
        let started = Instant::now();
        let found = find(&Request::Label("TASK".into()), &devices, Duration::from_secs(60), &|| false, |_| {}).unwrap();
        assert_eq!(found.path(), host.root.path().join("dev/sr0"));
        assert!(started.elapsed() < LOOK_PATIENCE + Duration::from_millis(500), "{:?}", started.elapsed());
        // A stop ends the wait at once, wherever it is.
        let stop_at = Instant::now() + Duration::from_millis(300);
        let started = Instant::now();
        let err = find(
            &Request::Label("NONE".into()),
            &devices,
            Duration::from_secs(60),
            &|| Instant::now() >= stop_at,
            |_| {},
        )
        .unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(1), "{:?}", started.elapsed());
        assert!(err.0.starts_with("stopped while looking"), "{err}");
        // Named with --media, the same.
        let started = Instant::now();
        let err =
            find(&Request::Path(host.root.path().join("dev/sdz")), &devices, Duration::from_secs(1), &|| false, |_| {})
                .unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
        assert!(err.0.contains("sdz: not answering"), "{err}");
        assert_eq!(HUNG_READS.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    #[test]
    fn a_path_is_classified_and_waited_for() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            find(&Request::Path(dir.path().into()), &Devices::system(), Duration::ZERO, &|| false, |_| {}).unwrap(),
            Found::Directory(dir.path().into())
        );
        let image = dir.path().join("task.iso");
        fs::write(&image, label("TASK")).unwrap();
        assert!(matches!(
            find(&Request::Path(image.clone()), &Devices::system(), Duration::ZERO, &|| false, |_| {}).unwrap(),
            Found::Image { .. }
        ));
        let junk = dir.path().join("junk.bin");
        fs::write(&junk, [7u8; 40000]).unwrap();
        let err =
            find(&Request::Path(junk), &Devices::system(), Duration::from_secs(5), &|| false, |_| {}).unwrap_err();
        assert!(err.0.contains("holds no ISO 9660"), "{err}");
        let missing = dir.path().join("missing.iso");
        let started = Instant::now();
        let err = find(&Request::Path(missing), &Devices::system(), Duration::from_millis(500), &|| false, |_| {})
            .unwrap_err();
        assert!(started.elapsed() >= Duration::from_millis(500));
        assert!(err.0.contains("missing.iso: entity not found"), "{err}");
    }
}
