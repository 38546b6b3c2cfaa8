//! Host checks (context-aware, seed 001): what the recipe asks of this machine. They read the
//! host only through [`Host`], so tests give them a fake one; [`SystemHost`] reads /proc,
//! /sys and systemd.

use std::collections::BTreeSet;
use std::fs;
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use crate::issues::{Code, Findings, Issue};
use crate::recipe::model::Recipe;

/// A device number (`st_rdev` / `st_dev`).
pub type Dev = u64;

/// What a path on the host is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Node {
    Block(Dev),
    Other,
}

/// What the host checks read from the machine.
pub trait Host {
    /// What `path` is, following symlinks (`/dev/disk/by-id/...` is fine).
    fn node(&self, path: &Path) -> io::Result<Node>;
    /// The whole disk a device belongs to (itself for a disk).
    fn whole_disk(&self, dev: Dev) -> Dev;
    /// Whole disks holding the running system (`/`, `/usr`, `/boot`, ..., through dm and md).
    fn system_disks(&self) -> BTreeSet<Dev>;
    /// Whole disks holding the task media.
    fn media_disks(&self) -> BTreeSet<Dev>;
    /// What uses the disk or any of its partitions: mounts, swap, holders. Empty if unused.
    fn users(&self, disk: Dev) -> Vec<&'static str>;
    /// systemd's `LoadState` of the unit; an error (in words that never quote the unit) when
    /// systemd cannot be asked.
    fn unit_load_state(&self, unit: &str) -> anyhow::Result<String>;
}

/// The host checks, after the static ones: a field that `refused` holds an error for (an
/// unsafe path, a forbidden target) is never looked up on the host.
pub fn check(recipe: &Recipe<'_>, host: &dyn Host, refused: &Findings) -> Vec<Issue> {
    let mut issues = Vec::new();
    if !refused.refused("/target_disk") {
        target_disk(recipe, host, &mut issues);
    }
    if !refused.refused("/task_target") {
        target_unit(recipe, host, &mut issues);
    }
    issues
}

/// The target disk's checks again, just before the target starts: a disk that went away (or
/// came into use) since validation must not be handed to the installer.
pub fn recheck_disk(recipe: &Recipe<'_>, host: &dyn Host) -> Vec<Issue> {
    let mut issues = Vec::new();
    target_disk(recipe, host, &mut issues);
    issues
}

/// `target_disk` resolves to a block device that is neither the system's disk nor the
/// media's, and that nothing uses.
fn target_disk(recipe: &Recipe<'_>, host: &dyn Host, issues: &mut Vec<Issue>) {
    let Some(disk) = recipe.target_disk else { return };
    let error = |code: Code, message: String| Issue::error("/target_disk", code, message);
    let dev = match host.node(Path::new(disk)) {
        Ok(Node::Block(dev)) => dev,
        Ok(Node::Other) => return issues.push(error(Code::NotBlockDevice, "is not a block device".into())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return issues.push(error(Code::DiskNotFound, "does not exist on this host".into()));
        }
        Err(e) => return issues.push(error(Code::DiskNotFound, format!("cannot be inspected: {}", e.kind()))),
    };
    let whole = host.whole_disk(dev);
    if host.system_disks().contains(&whole) {
        issues.push(error(Code::SystemDisk, "is on the disk the running system lives on".into()));
    } else if host.media_disks().contains(&whole) {
        issues.push(error(Code::MediaDisk, "is on the disk the task media lives on".into()));
    } else {
        let users = host.users(whole);
        if !users.is_empty() {
            issues.push(error(
                Code::DiskInUse,
                format!("is in use ({}); nothing may use the target disk", users.join(", ")),
            ));
        }
    }
}

/// The target unit loads (`LoadState=loaded`).
fn target_unit(recipe: &Recipe<'_>, host: &dyn Host, issues: &mut Vec<Issue>) {
    let Some(unit) = recipe.task_target else { return };
    match host.unit_load_state(unit) {
        Ok(state) if state == "loaded" => {}
        Ok(state) => issues.push(Issue::error(
            "/task_target",
            Code::UnitNotFound,
            format!("is not a unit systemd can load here (LoadState={state})"),
        )),
        Err(e) => issues.push(Issue::error(
            "/task_target",
            Code::SystemdUnavailable,
            format!("cannot be checked: systemd did not answer ({e:#})"),
        )),
    }
}

/// The real host: /proc/self/mountinfo, /proc/swaps, /sys/dev/block, and systemd.
pub struct SystemHost<'a> {
    media: BTreeSet<Dev>,
    systemd: &'a dyn Fn(&str) -> anyhow::Result<String>,
}

impl<'a> SystemHost<'a> {
    /// `media` are the devices the task media came from (the mounted device, the loop device's
    /// backing file's filesystem, a directory's filesystem); `systemd` asks for a LoadState.
    pub fn new(media: &[Dev], systemd: &'a dyn Fn(&str) -> anyhow::Result<String>) -> Self {
        let mut this = SystemHost { media: BTreeSet::new(), systemd };
        this.media = media.iter().flat_map(|&dev| this.disks_under(dev)).collect();
        this
    }

    /// Whole disks under a device, through dm/md slaves (a root on LVM lives on its PVs).
    fn disks_under(&self, dev: Dev) -> BTreeSet<Dev> {
        let mut out = BTreeSet::new();
        let mut todo = vec![dev];
        while let Some(dev) = todo.pop() {
            let slaves = sys_dir(dev).map(|dir| list_devs(&dir.join("slaves"))).unwrap_or_default();
            if slaves.is_empty() {
                out.insert(self.whole_disk(dev));
            } else if out.len() + todo.len() < 256 {
                todo.extend(slaves);
            }
        }
        out
    }
}

impl Host for SystemHost<'_> {
    fn node(&self, path: &Path) -> io::Result<Node> {
        let meta = fs::metadata(path)?;
        Ok(if meta.file_type().is_block_device() { Node::Block(meta.rdev()) } else { Node::Other })
    }

    fn whole_disk(&self, dev: Dev) -> Dev {
        let Some(dir) = sys_dir(dev) else { return dev };
        if !dir.join("partition").exists() {
            return dev;
        }
        read_dev(&dir.join("../dev")).unwrap_or(dev)
    }

    fn system_disks(&self) -> BTreeSet<Dev> {
        mounts()
            .into_iter()
            .filter(|m| ["/", "/usr", "/boot", "/boot/efi", "/efi", "/var"].contains(&m.point.as_str()))
            .filter(|m| rustix::fs::major(m.dev) != 0)
            .flat_map(|m| self.disks_under(m.dev))
            .collect()
    }

    fn media_disks(&self) -> BTreeSet<Dev> {
        self.media.clone()
    }

    fn users(&self, disk: Dev) -> Vec<&'static str> {
        let Some(dir) = sys_dir(disk) else { return Vec::new() };
        // The disk and its partitions (subdirectories with a `partition` file).
        let mut devs: BTreeSet<Dev> = [disk].into();
        for entry in fs::read_dir(&dir).into_iter().flatten().flatten() {
            if entry.path().join("partition").exists() {
                devs.extend(read_dev(&entry.path().join("dev")));
            }
        }
        let mut users = Vec::new();
        if mounts().iter().any(|m| devs.contains(&m.dev)) {
            users.push("mounted");
        }
        let swaps = fs::read_to_string("/proc/swaps").unwrap_or_default();
        let swapping = swaps.lines().skip(1).filter_map(|l| l.split_whitespace().next()).any(|path| {
            fs::metadata(unescape_octal(path))
                .is_ok_and(|m| m.file_type().is_block_device() && devs.contains(&m.rdev()))
        });
        if swapping {
            users.push("swap");
        }
        if devs.iter().filter_map(|&d| sys_dir(d)).any(|d| !list_devs(&d.join("holders")).is_empty()) {
            users.push("held by another device, such as LVM, RAID or dm-crypt");
        }
        users
    }

    fn unit_load_state(&self, unit: &str) -> anyhow::Result<String> {
        (self.systemd)(unit)
    }
}

/// `/sys/dev/block/MAJ:MIN`, resolved.
fn sys_dir(dev: Dev) -> Option<PathBuf> {
    let link = format!("/sys/dev/block/{}:{}", rustix::fs::major(dev), rustix::fs::minor(dev));
    fs::canonicalize(link).ok()
}

fn read_dev(path: &Path) -> Option<Dev> {
    let text = fs::read_to_string(path).ok()?;
    let (major, minor) = text.trim().split_once(':')?;
    Some(rustix::fs::makedev(major.parse().ok()?, minor.parse().ok()?))
}

/// The devices named in a sysfs `slaves/` or `holders/` directory.
fn list_devs(dir: &Path) -> Vec<Dev> {
    fs::read_dir(dir).into_iter().flatten().flatten().filter_map(|e| read_dev(&e.path().join("dev"))).collect()
}

struct MountEntry {
    dev: Dev,
    point: String,
}

/// `/proc/self/mountinfo`: field 3 is MAJ:MIN, field 5 the mount point (octal-escaped).
fn mounts() -> Vec<MountEntry> {
    let text = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            let (major, minor) = fields.get(2)?.split_once(':')?;
            Some(MountEntry {
                dev: rustix::fs::makedev(major.parse().ok()?, minor.parse().ok()?),
                point: unescape_octal(fields.get(4)?),
            })
        })
        .collect()
}

/// The kernel writes space, tab, newline and backslash in mount and swap paths as `\ooo`.
fn unescape_octal(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes.get(i + 1..i + 4).filter(|d| d.iter().all(|b| (b'0'..=b'7').contains(b)));
        match (bytes[i], octal) {
            (b'\\', Some(d)) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recipe::parse;
    use std::collections::HashMap;

    /// A machine described by tables.
    #[derive(Default)]
    struct FakeHost {
        nodes: HashMap<&'static str, Node>,
        parents: HashMap<Dev, Dev>,
        system: BTreeSet<Dev>,
        media: BTreeSet<Dev>,
        users: HashMap<Dev, Vec<&'static str>>,
        units: HashMap<&'static str, &'static str>,
        bus_down: bool,
    }

    impl Host for FakeHost {
        fn node(&self, path: &Path) -> io::Result<Node> {
            self.nodes.get(path.to_str().unwrap()).copied().ok_or_else(|| io::ErrorKind::NotFound.into())
        }
        fn whole_disk(&self, dev: Dev) -> Dev {
            *self.parents.get(&dev).unwrap_or(&dev)
        }
        fn system_disks(&self) -> BTreeSet<Dev> {
            self.system.clone()
        }
        fn media_disks(&self) -> BTreeSet<Dev> {
            self.media.clone()
        }
        fn users(&self, disk: Dev) -> Vec<&'static str> {
            self.users.get(&disk).cloned().unwrap_or_default()
        }
        fn unit_load_state(&self, unit: &str) -> anyhow::Result<String> {
            if self.bus_down {
                anyhow::bail!("org.freedesktop.DBus.Error.NoReply");
            }
            Ok(self.units.get(unit).copied().unwrap_or("not-found").to_owned())
        }
    }

    fn machine() -> FakeHost {
        FakeHost {
            nodes: [
                ("/dev/vda", Node::Block(1)),
                ("/dev/vda2", Node::Block(2)),
                ("/dev/vdb", Node::Block(3)),
                ("/dev/vdc", Node::Block(4)),
                ("/dev/sr0", Node::Block(5)),
                ("/dev/null", Node::Other),
            ]
            .into(),
            parents: [(2, 1)].into(),
            system: [1].into(),
            media: [5].into(),
            users: [(4, vec!["mounted"])].into(),
            units: [("install-linux.target", "loaded"), ("masked.target", "masked")].into(),
            ..FakeHost::default()
        }
    }

    fn check(host: &FakeHost, recipe: serde_json::Value, earlier: Vec<Issue>) -> Vec<(String, String)> {
        let doc = parse(recipe.to_string().into_bytes()).unwrap();
        let issues = super::check(&Recipe::view(&doc), host, &Findings { issues: earlier });
        issues.into_iter().map(|i| (i.path, i.code.name().to_owned())).collect()
    }

    fn disk(path: &str) -> serde_json::Value {
        serde_json::json!({"task_target": "install-linux.target", "target_disk": path})
    }

    fn one(code: &str) -> Vec<(String, String)> {
        vec![("/target_disk".into(), code.into())]
    }

    #[test]
    fn target_disk_must_be_a_free_block_device_apart_from_system_and_media() {
        let host = machine();
        assert_eq!(check(&host, disk("/dev/vdb"), vec![]), []);
        assert_eq!(check(&host, disk("/dev/vda"), vec![]), one("systemDisk"));
        assert_eq!(check(&host, disk("/dev/vda2"), vec![]), one("systemDisk"), "a partition of the system disk");
        assert_eq!(check(&host, disk("/dev/sr0"), vec![]), one("mediaDisk"));
        assert_eq!(check(&host, disk("/dev/vdc"), vec![]), one("diskInUse"));
        assert_eq!(check(&host, disk("/dev/null"), vec![]), one("notBlockDevice"));
        assert_eq!(check(&host, disk("/dev/sdz"), vec![]), one("diskNotFound"));
    }

    #[test]
    fn a_path_a_static_rule_refused_is_never_touched() {
        let host = machine();
        let earlier = vec![Issue::error("/target_disk", Code::UnsafePath, "x")];
        assert_eq!(check(&host, disk("/dev/../vda"), earlier), []);
    }

    #[test]
    fn the_target_unit_must_load() {
        let host = machine();
        let unit = |name: &str| serde_json::json!({"task_target": name});
        assert_eq!(check(&host, unit("install-linux.target"), vec![]), []);
        assert_eq!(
            check(&host, unit("install-nothing.target"), vec![]),
            [("/task_target".into(), "unitNotFound".into())]
        );
        assert_eq!(check(&host, unit("masked.target"), vec![]), [("/task_target".into(), "unitNotFound".into())]);
        let down = FakeHost { bus_down: true, ..machine() };
        assert_eq!(
            check(&down, unit("install-linux.target"), vec![]),
            [("/task_target".into(), "systemdUnavailable".into())]
        );
    }

    #[test]
    fn mountinfo_paths_are_unescaped() {
        assert_eq!(unescape_octal(r"/mnt/with\040space\134and\011tab"), "/mnt/with space\\and\ttab");
        assert_eq!(unescape_octal(r"/plain\09"), r"/plain\09");
    }

    #[test]
    fn the_real_host_answers_for_this_machine() {
        let never = |_: &str| -> anyhow::Result<String> { anyhow::bail!("unused") };
        let host = SystemHost::new(&[], &never);
        assert_eq!(host.node(Path::new("/dev/null")).unwrap(), Node::Other);
        assert_eq!(host.node(Path::new("/no/such/device")).unwrap_err().kind(), io::ErrorKind::NotFound);
        // The disk under / is a system disk, and it is in use (mounted).
        let root = fs::metadata("/").unwrap().dev();
        if rustix::fs::major(root) != 0 {
            let disk = host.whole_disk(root);
            assert!(host.system_disks().contains(&disk));
            assert!(host.users(disk).contains(&"mounted"));
        }
    }
}
