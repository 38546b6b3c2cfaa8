//! Host checks (context-aware, seed 001): what the recipe asks of this machine. They read the
//! host only through [`Host`], so tests give them a fake one; [`SystemHost`] reads /proc,
//! /sys and systemd.

use std::collections::BTreeSet;
use std::fs;
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use crate::disks::hints::HintKey;
use crate::disks::verdict::{Inventory, Listed, Verdict};
use crate::disks::{self, Disk, Resolved, Unresolved};
use crate::issues::{Code, Findings, Issue};
use crate::recipe::model::{Hints, Recipe};

pub use crate::disks::{Dev, Node};

/// What the host checks read from the machine.
pub trait Host {
    /// What `path` is, following symlinks (`/dev/disk/by-id/...` is fine).
    fn node(&self, path: &Path) -> io::Result<Node>;
    /// The whole disk a device belongs to (itself for a disk).
    fn whole_disk(&self, dev: Dev) -> Dev;
    /// Disks holding the running system: under `/`, `/usr`, `/boot`, ... and the live medium,
    /// through dm and md, overlays and loop devices (a RAM root's images and the medium
    /// they are read from).
    fn system_disks(&self) -> BTreeSet<Dev>;
    /// Whole disks holding the task media.
    fn media_disks(&self) -> BTreeSet<Dev>;
    /// What uses the disk or any of its partitions: mounts, swap, holders. Empty if unused.
    fn users(&self, disk: Dev) -> Vec<String>;
    /// systemd's `LoadState` of the unit; an error (in words that never quote the unit) when
    /// systemd cannot be asked.
    fn unit_load_state(&self, unit: &str) -> anyhow::Result<String>;
    /// Every whole disk of the machine with its identity, read from the kernel (SPEC §4a).
    fn disks(&self) -> &[Disk];
    /// The whole disk `dev` with its identity, if it is one: a host may read it alone.
    fn disk(&self, dev: Dev) -> Option<Disk> {
        self.disks().iter().find(|d| d.dev == dev).cloned()
    }
    /// Where the disks are, for a message: `this machine`, or a saved inventory by its file.
    fn place(&self) -> String {
        "this machine".into()
    }
}

/// What the host checks found: the issues, and what `target_disk` resolved to.
#[derive(Debug, Default)]
pub struct HostFindings {
    pub issues: Vec<Issue>,
    /// `None` when the recipe names no disk, or the name resolves to none.
    pub resolved: Option<Resolved>,
}

/// The host checks, after the static ones: a field that `refused` holds an error for (an
/// unsafe path, a forbidden target) is never looked up on the host.
pub fn check(recipe: &Recipe<'_>, host: &dyn Host, refused: &Findings) -> HostFindings {
    let mut found = HostFindings::default();
    if !refused.refused("/target_disk") {
        found.resolved = target_disk(recipe, host, &mut found.issues, None);
    }
    if !refused.refused("/task_target") {
        target_unit(recipe, host, &mut found.issues);
    }
    found
}

/// The target disk's checks alone (`check --inventory`: the controller's preflight against a
/// saved inventory, where no unit can be asked about).
pub fn check_disk(recipe: &Recipe<'_>, host: &dyn Host, refused: &Findings) -> HostFindings {
    let mut found = HostFindings::default();
    if !refused.refused("/target_disk") {
        found.resolved = target_disk(recipe, host, &mut found.issues, None);
    }
    found
}

/// A machine as its saved inventory (`disks --format json`) describes it, for the controller's
/// preflight: the same disk checks, with the same codes and paths, as at boot.
pub struct InventoryHost {
    listed: Vec<Listed>,
    disks: Vec<Disk>,
    /// The inventory's file, as the messages name it.
    file: String,
}

impl InventoryHost {
    /// `file` names the inventory in messages. Each disk's `dev` must be its own: it is how the
    /// checks tell the disks apart.
    pub fn new(inventory: Inventory, file: &Path) -> InventoryHost {
        let disks = inventory.disks.iter().map(|listed| listed.disk.clone()).collect();
        InventoryHost {
            listed: inventory.disks,
            disks,
            file: crate::issues::printable(&file.display().to_string()).into_owned(),
        }
    }

    fn with_verdict(&self, verdict: Verdict) -> BTreeSet<Dev> {
        self.listed.iter().filter(|l| l.verdict == verdict).map(|l| l.disk.dev).collect()
    }
}

impl Host for InventoryHost {
    /// `/dev/NAME` is the disk of that kernel name; nothing else is there (a by-id or by-path
    /// name is resolved from the identity, as at boot without udev).
    fn node(&self, path: &Path) -> io::Result<Node> {
        let name = path.to_str().and_then(|p| p.strip_prefix("/dev/"));
        match self.disks.iter().find(|disk| Some(disk.name.as_str()) == name) {
            Some(disk) => Ok(Node::Block(disk.dev)),
            None => Err(io::ErrorKind::NotFound.into()),
        }
    }

    fn whole_disk(&self, dev: Dev) -> Dev {
        dev
    }

    fn system_disks(&self) -> BTreeSet<Dev> {
        self.with_verdict(Verdict::System)
    }

    fn media_disks(&self) -> BTreeSet<Dev> {
        self.with_verdict(Verdict::Media)
    }

    fn users(&self, disk: Dev) -> Vec<String> {
        self.listed.iter().filter(|l| l.disk.dev == disk).flat_map(|l| l.users.clone()).collect()
    }

    fn unit_load_state(&self, _unit: &str) -> anyhow::Result<String> {
        anyhow::bail!("an inventory holds no units")
    }

    fn disks(&self) -> &[Disk] {
        &self.disks
    }

    fn place(&self) -> String {
        format!("the saved inventory {}", self.file)
    }
}

/// The target disk's checks again, just before the target starts: a disk that went away,
/// came into use, or is no longer the very disk validated (another one under the same name)
/// must not be handed to the installer.
pub fn recheck_disk(recipe: &Recipe<'_>, host: &dyn Host, validated: Option<&Resolved>) -> Vec<Issue> {
    let mut issues = Vec::new();
    let now = target_disk(recipe, host, &mut issues, validated.and_then(|r| r.disk.as_ref()));
    let (before, now) = (validated.and_then(|r| r.disk.as_ref()), now.as_ref().and_then(|r| r.disk.as_ref()));
    if let (Some(before), Some(now)) = (before, now) {
        if !before.same_disk(now) {
            issues.push(Issue::error(
                "/target_disk",
                Code::DiskChanged,
                format!(
                    "is no longer the disk validated: {} was {}, it is now {}",
                    now.node,
                    describe(before),
                    describe(now)
                ),
            ));
        } else if before.dev != now.dev {
            // The outputs name the node validated (TARGET_DISK_DEVICE): another disk may hold it.
            issues.push(Issue::error(
                "/target_disk",
                Code::DiskChanged,
                format!(
                    "is the disk validated, now at {} where the outputs name {}: kernel names moved",
                    now.node, before.node
                ),
            ));
        }
    }
    issues
}

/// Every whole disk of the machine with what the dispatcher thinks of it: the inventory of
/// `disks`, and what the banner shows when a disk check failed.
pub fn listed(host: &dyn Host) -> Vec<Listed> {
    let (system, media) = (host.system_disks(), host.media_disks());
    let disks = host.disks().iter().map(|disk| {
        let users = host.users(disk.dev);
        Listed { disk: disk.clone(), verdict: Verdict::of(disk.dev, &system, &media, &users), users }
    });
    disks.collect()
}

/// The machine's disks as [`listed`] gives them, those that matter to a failed check of the
/// target disk first: the disk `target_disk` resolved to, then those the recipe's hints match,
/// then the others, each part in the machine's order. status.json keeps as many as fit
/// (`report::status`), so a machine of thousands of disks keeps these.
pub fn listed_for(recipe: &Recipe<'_>, host: &dyn Host, resolved: Option<&Disk>) -> Vec<Listed> {
    let hints = recipe.target_disk_hints.as_ref().map(disk_hints).filter(|hints| !hints.given().is_empty());
    let rank = |disk: &Disk| match () {
        _ if resolved.is_some_and(|named| named.dev == disk.dev) => 0,
        _ if hints.as_ref().is_some_and(|hints| hints.mismatches(disk).is_empty()) => 1,
        _ => 2,
    };
    let mut listed = listed(host);
    listed.sort_by_key(|listed| rank(&listed.disk));
    listed
}

/// A disk's identity in words, for a message (the machine's values, not the recipe's).
pub fn describe(disk: &Disk) -> String {
    let or_none = |value: &Option<String>| value.clone().unwrap_or_else(|| "none".into());
    format!(
        "{} bytes, model {}, serial {}, WWN {}",
        disk.size_bytes,
        or_none(&disk.model),
        or_none(&disk.serial),
        or_none(&disk.wwn)
    )
}

/// `target_disk` resolves to a block device that is neither the system's disk nor the
/// media's, and that nothing uses; `target_disk_hints`, when given, match the disk it names
/// and no other whole disk of the machine. A `/dev/disk/by-id/` or `/dev/disk/by-path/` name
/// is resolved from the disks' identity ([`disks::resolve`]), with or without udev's link.
///
/// Again before the start (`validated`: the disk found then), a persistent name is first
/// looked for on that disk alone, read again, and the hints are not checked again: what must
/// hold then is that the name still names that very disk ([`recheck_disk`]), and reading every
/// disk of a large machine twice cost `run` 4 ms on 64 disks (issue 29's budget).
fn target_disk(
    recipe: &Recipe<'_>,
    host: &dyn Host,
    issues: &mut Vec<Issue>,
    validated: Option<&Disk>,
) -> Option<Resolved> {
    let name = recipe.target_disk?;
    let error = |code: Code, message: String| Issue::error("/target_disk", code, message);
    let persistent = name.starts_with("/dev/disk/by-id/") || name.starts_with("/dev/disk/by-path/");
    let (dev, device, disk) = if persistent {
        let node = |path: &Path| host.node(path);
        let again = validated.and_then(|disk| host.disk(disk.dev));
        let again = again.and_then(|disk| disks::resolve(name, std::slice::from_ref(&disk), &node).ok().cloned());
        match again.map(Ok).unwrap_or_else(|| disks::resolve(name, host.disks(), &node).cloned()) {
            Ok(disk) => (disk.dev, disk.node.clone(), Some(disk)),
            Err(why @ Unresolved::Ambiguous) => {
                let named = disks::named(name, host.disks()).unwrap_or_default();
                issues.push(error(unresolved_code(why), format!("{}: {}", why.words(&host.place()), names(&named))));
                return None;
            }
            Err(why) => {
                issues.push(error(unresolved_code(why), why.words(&host.place())));
                return None;
            }
        }
    } else {
        let dev = match host.node(Path::new(name)) {
            Ok(Node::Block(dev)) => dev,
            Ok(Node::Other) => {
                issues.push(error(Code::NotBlockDevice, "is not a block device".into()));
                return None;
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                issues.push(error(Code::DiskNotFound, format!("names no device of {}", host.place())));
                return None;
            }
            Err(e) => {
                issues.push(error(Code::DiskNotFound, format!("cannot be inspected: {}", e.kind())));
                return None;
            }
        };
        let whole = host.whole_disk(dev);
        let disk = host.disk(whole);
        let device = match &disk {
            Some(disk) if disk.dev == dev => disk.node.clone(),
            // A partition, a dm or md device: its own node.
            _ => std::fs::canonicalize(name).map_or_else(|_| name.to_owned(), |p| p.display().to_string()),
        };
        (dev, device, disk)
    };
    let whole = host.whole_disk(dev);
    if host.system_disks().contains(&whole) {
        issues.push(error(
            Code::SystemDisk,
            "is on a disk the running system lives on (its root, the boot medium, the images of a root in RAM)".into(),
        ));
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
    if let (Some(hints), None) = (&recipe.target_disk_hints, validated) {
        check_hints(&disk_hints(hints), disk.as_ref(), host, issues);
    }
    Some(Resolved { device, disk })
}

/// The recipe's hints as the disks module compares them.
fn disk_hints(hints: &Hints<'_>) -> disks::hints::Hints {
    disks::hints::Hints {
        wwn: hints.wwn.clone(),
        serial: hints.serial.map(str::to_owned),
        model: hints.model.map(str::to_owned),
        size_min: hints.size_min,
        size_max: hints.size_max,
        rotational: hints.rotational,
    }
}

/// Each hint against the disk `target_disk` names (one `diskIdentityMismatch` per key that
/// does not match), and all of them against every whole disk (`diskAmbiguous` when two or more
/// match). The messages give the machine's values, never the hint's.
fn check_hints(hints: &disks::hints::Hints, disk: Option<&Disk>, host: &dyn Host, issues: &mut Vec<Issue>) {
    let at = |key: HintKey| format!("/target_disk_hints/{}", key.name());
    match disk {
        Some(disk) => {
            for key in hints.mismatches(disk) {
                let have = match key {
                    HintKey::Wwn => format!("WWN {}", disk.wwn.as_deref().unwrap_or("none")),
                    HintKey::Serial => format!("serial {}", disk.serial.as_deref().unwrap_or("none")),
                    HintKey::Model => format!("model {}", disk.model.as_deref().unwrap_or("none")),
                    HintKey::SizeMin | HintKey::SizeMax => format!("{} bytes", disk.size_bytes),
                    HintKey::Rotational => match disk.rotational {
                        Some(true) => "rotational".into(),
                        Some(false) => "not rotational".into(),
                        None => "rotational unknown".into(),
                    },
                };
                let message = format!("does not match the disk target_disk names: {} has {have}", disk.node);
                issues.push(Issue::error(at(key), Code::DiskIdentityMismatch, message));
            }
        }
        None => {
            for key in hints.given() {
                let message =
                    "cannot be matched: target_disk names no whole disk with an identity (a dm, md or loop device)";
                issues.push(Issue::error(at(key), Code::DiskIdentityMismatch, message));
            }
        }
    }
    let matching = hints.matching(host.disks());
    if matching.len() > 1 {
        issues.push(Issue::error(
            "/target_disk_hints",
            Code::DiskAmbiguous,
            format!(
                "match {} whole disks of {} ({}); together they must single out one",
                matching.len(),
                host.place(),
                names(&matching)
            ),
        ));
    }
}

/// The disks' kernel names for a message: the first eight, and how many more.
fn names(disks: &[&Disk]) -> String {
    const NAMES_SHOWN: usize = 8;
    let shown: Vec<&str> = disks.iter().take(NAMES_SHOWN).map(|disk| disk.name.as_str()).collect();
    match disks.len().saturating_sub(NAMES_SHOWN) {
        0 => shown.join(", "),
        more => format!("{} and {more} more", shown.join(", ")),
    }
}

/// The code of a name that resolves to no whole disk.
fn unresolved_code(why: Unresolved) -> Code {
    match why {
        Unresolved::NotBlockDevice => Code::NotBlockDevice,
        Unresolved::Ambiguous => Code::DiskAmbiguous,
        Unresolved::Disagrees => Code::DiskIdentityMismatch,
        Unresolved::Unsupported | Unresolved::NotFound | Unresolved::NotWholeDisk | Unresolved::NotDerived => {
            Code::DiskNotFound
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
        Err(e) if e.is::<NameRefused>() => issues.push(Issue::error(
            "/task_target",
            Code::UnitNotFound,
            format!("is not a unit systemd can load ({e})"),
        )),
        Err(e) => issues.push(Issue::error(
            "/task_target",
            Code::SystemdUnavailable,
            format!("cannot be checked: systemd did not answer over the system bus ({e:#})"),
        )),
    }
}

/// systemd refused the unit's name (its `LoadUnit` answered `InvalidArgs`: too long, not a
/// unit name): the unit cannot load, whatever the image holds.
#[derive(Debug)]
pub struct NameRefused;

impl std::fmt::Display for NameRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("systemd refused the name")
    }
}

impl std::error::Error for NameRefused {}

/// The real host: /proc/self/mountinfo, /proc/swaps, /sys/dev/block, and systemd.
pub struct SystemHost<'a> {
    media: BTreeSet<Dev>,
    systemd: &'a dyn Fn(&str) -> anyhow::Result<String>,
    /// Where the disks' identity is read (`/sys`).
    sysfs: PathBuf,
    /// Read once, when a check first needs them.
    disks: std::cell::OnceCell<Vec<Disk>>,
}

impl<'a> SystemHost<'a> {
    /// `media` are the devices the task media came from (the mounted device, the loop device's
    /// backing file's filesystem, a directory's filesystem); `systemd` asks for a LoadState.
    pub fn new(media: &[Dev], systemd: &'a dyn Fn(&str) -> anyhow::Result<String>) -> Self {
        let mut this = SystemHost {
            media: BTreeSet::new(),
            systemd,
            sysfs: PathBuf::from(disks::SYSFS),
            disks: std::cell::OnceCell::new(),
        };
        this.media = this.disks_under(media);
        this
    }

    /// The disks' identity read from another sysfs root (a test's, a benchmark's).
    pub fn with_sysfs(mut self, sysfs: &Path) -> Self {
        self.sysfs = sysfs.to_owned();
        self
    }

    /// Every whole disk with its identity as read already, by another host of this run: not
    /// read again.
    pub fn with_disks(self, disks: Vec<Disk>) -> Self {
        let _ = self.disks.set(disks);
        self
    }

    /// Every whole disk, if a check needed them all and they were read.
    pub fn read_disks(&self) -> Option<&[Disk]> {
        self.disks.get().map(Vec::as_slice)
    }

    /// Every whole disk a filesystem on these devices reads from, themselves included:
    /// - an overlay (or any filesystem without a device of its own: major 0) reads from the
    ///   filesystems of its lower and upper directories; tmpfs and the like from RAM only;
    /// - a loop device from itself and the filesystem holding its backing file;
    /// - dm and md devices from themselves and their slaves (a root on LVM lives on its PVs).
    ///
    /// So a live system's root (an overlay over squashfs images on loop devices, read from
    /// the boot medium) is on the loop devices and on the boot medium's disk.
    fn disks_under(&self, devs: &[Dev]) -> BTreeSet<Dev> {
        /// A bound on the walk: no real stack of devices comes near it.
        const MAX_DEVICES: usize = 256;
        let mut seen = BTreeSet::new();
        let mut disks = BTreeSet::new();
        let mut todo: Vec<Dev> = devs.to_vec();
        let mut all_mounts: Option<Vec<MountEntry>> = None;
        while let Some(dev) = todo.pop() {
            if !seen.insert(dev) || seen.len() > MAX_DEVICES {
                continue;
            }
            if rustix::fs::major(dev) == 0 {
                let mounts = all_mounts.get_or_insert_with(mounts);
                let dirs = mounts
                    .iter()
                    .filter(|m| m.dev == dev && m.fstype == "overlay")
                    .flat_map(|m| overlay_dirs(&m.options));
                todo.extend(dirs.filter_map(|dir| fs::metadata(dir).ok()).map(|meta| meta.dev()));
                continue;
            }
            let whole = self.whole_disk(dev);
            disks.insert(whole);
            let Some(dir) = sys_dir(whole) else { continue };
            if let Ok(backing) = fs::read_to_string(dir.join("loop/backing_file")) {
                let backing = backing.trim_end_matches('\n');
                let backing = backing.strip_suffix(" (deleted)").unwrap_or(backing);
                todo.extend(fs::metadata(backing).ok().map(|meta| meta.dev()));
            }
            todo.extend(list_devs(&dir.join("slaves")));
        }
        disks
    }
}

impl Host for SystemHost<'_> {
    fn node(&self, path: &Path) -> io::Result<Node> {
        crate::disks::node(path)
    }

    fn whole_disk(&self, dev: Dev) -> Dev {
        let Some(dir) = sys_dir(dev) else { return dev };
        if !dir.join("partition").exists() {
            return dev;
        }
        read_dev(&dir.join("../dev")).unwrap_or(dev)
    }

    fn system_disks(&self) -> BTreeSet<Dev> {
        let devs: Vec<Dev> =
            mounts().into_iter().filter(|m| SYSTEM_MOUNTS.contains(&m.point.as_str())).map(|m| m.dev).collect();
        self.disks_under(&devs)
    }

    fn media_disks(&self) -> BTreeSet<Dev> {
        self.media.clone()
    }

    fn users(&self, disk: Dev) -> Vec<String> {
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
            users.push("mounted".to_owned());
        }
        let swaps = fs::read_to_string("/proc/swaps").unwrap_or_default();
        let swapping = swaps.lines().skip(1).filter_map(|l| l.split_whitespace().next()).any(|path| {
            fs::metadata(unescape_octal(path))
                .is_ok_and(|m| m.file_type().is_block_device() && devs.contains(&m.rdev()))
        });
        if swapping {
            users.push("swap".to_owned());
        }
        if devs.iter().filter_map(|&d| sys_dir(d)).any(|d| !list_devs(&d.join("holders")).is_empty()) {
            users.push("held by another device, such as LVM, RAID or dm-crypt".to_owned());
        }
        users
    }

    fn unit_load_state(&self, unit: &str) -> anyhow::Result<String> {
        (self.systemd)(unit)
    }

    /// A machine whose sysfs lists no disks has none to give: every name is then not found.
    fn disks(&self) -> &[Disk] {
        self.disks.get_or_init(|| disks::read(&self.sysfs).unwrap_or_default())
    }

    /// Only that disk's files, unless every disk was read already: a kernel name without
    /// hints needs no other disk's identity.
    fn disk(&self, dev: Dev) -> Option<Disk> {
        match self.disks.get() {
            Some(all) => all.iter().find(|d| d.dev == dev).cloned(),
            None => disks::read_one(&self.sysfs, dev),
        }
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

/// Where the running system lives: its root and the usual separate parts, and the live
/// medium of a live system (live-boot's, dracut's dmsquash-live's), which stays mounted
/// while the root's images are read from it.
const SYSTEM_MOUNTS: &[&str] =
    &["/", "/usr", "/boot", "/boot/efi", "/efi", "/var", "/run/live/medium", "/run/initramfs/live"];

struct MountEntry {
    dev: Dev,
    point: String,
    fstype: String,
    /// The filesystem's own options (after the fstype and the source), octal-escaped.
    options: String,
}

/// `/proc/self/mountinfo`: field 3 is MAJ:MIN, field 5 the mount point (octal-escaped); after
/// the optional fields and a `-`: the fstype, the source and the superblock options.
fn mounts() -> Vec<MountEntry> {
    let text = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    text.lines().filter_map(parse_mountinfo_line).collect()
}

fn parse_mountinfo_line(line: &str) -> Option<MountEntry> {
    let fields: Vec<&str> = line.split(' ').collect();
    let (major, minor) = fields.get(2)?.split_once(':')?;
    let separator = fields.iter().skip(6).position(|f| *f == "-")? + 6;
    Some(MountEntry {
        dev: rustix::fs::makedev(major.parse().ok()?, minor.parse().ok()?),
        point: unescape_octal(fields.get(4)?),
        fstype: (*fields.get(separator + 1)?).to_owned(),
        options: (*fields.get(separator + 3).unwrap_or(&"")).to_owned(),
    })
}

/// The lower and upper directories of an overlay's options (`lowerdir=A:B`, `lowerdir+=A`,
/// `upperdir=U`, `datadir+=D`). The kernel escapes `,` `:` and `\` in them with a backslash,
/// and mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn overlay_dirs(options: &str) -> Vec<String> {
    let options = unescape_octal(options);
    let mut dirs = Vec::new();
    for option in split_escaped(&options, ',') {
        let Some((key, value)) = option.split_once('=') else { continue };
        match key {
            "lowerdir" => dirs.extend(split_escaped(value, ':').into_iter().map(|d| unescape_backslash(&d))),
            "lowerdir+" | "upperdir" | "datadir+" => dirs.push(unescape_backslash(value)),
            _ => {}
        }
    }
    dirs
}

/// `text` split on `separator` where it is not escaped by a backslash (escapes kept).
fn split_escaped(text: &str, separator: char) -> Vec<String> {
    let mut parts = vec![String::new()];
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        let part = parts.last_mut().expect("never empty");
        match c {
            '\\' => {
                part.push(c);
                part.extend(chars.next());
            }
            c if c == separator => parts.push(String::new()),
            c => part.push(c),
        }
    }
    parts
}

fn unescape_backslash(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        out.extend(if c == '\\' { chars.next() } else { Some(c) });
    }
    out
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
        disks: Vec<Disk>,
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
        fn users(&self, disk: Dev) -> Vec<String> {
            self.users.get(&disk).into_iter().flatten().map(|u| u.to_string()).collect()
        }
        fn unit_load_state(&self, unit: &str) -> anyhow::Result<String> {
            if self.bus_down {
                anyhow::bail!("org.freedesktop.DBus.Error.NoReply");
            }
            if unit.len() >= 256 {
                return Err(NameRefused.into());
            }
            Ok(self.units.get(unit).copied().unwrap_or("not-found").to_owned())
        }
        fn disks(&self) -> &[Disk] {
            &self.disks
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
        let found = super::check(&Recipe::view(&doc), host, &Findings { issues: earlier });
        found.issues.into_iter().map(|i| (i.path, i.code.name().to_owned())).collect()
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

    /// Two SCSI disks that differ only in WWN and serial (vdb's identity), and one without
    /// any (vdc).
    fn identified() -> FakeHost {
        let disk = |name: &str, dev: Dev, wwn: Option<&str>, serial: Option<&str>| {
            let mut disk = crate::disks::tests::disk(name, dev);
            disk.node = format!("/dev/{name}");
            disk.wwn = wwn.map(str::to_owned);
            disk.serial = serial.map(str::to_owned);
            disk.model = Some("QEMU HARDDISK".into());
            disk.size_bytes = 1 << 30;
            disk.rotational = Some(false);
            disk.by_id = wwn.map(|w| format!("/dev/disk/by-id/wwn-{w}")).into_iter().collect();
            disk
        };
        FakeHost {
            disks: vec![
                disk("vdb", 3, Some("0x5000c50015ea71ad"), Some("PD-TARGET-0001")),
                disk("vdd", 6, Some("0x5000c50015ea71ae"), Some("PD-OTHER")),
                disk("vdc", 4, None, None),
            ],
            nodes: [("/dev/vdb", Node::Block(3)), ("/dev/vdd", Node::Block(6)), ("/dev/vdc", Node::Block(4))].into(),
            ..FakeHost::default()
        }
    }

    fn hinted(path: &str, hints: serde_json::Value) -> serde_json::Value {
        serde_json::json!({"task_target": "install-linux.target", "target_disk": path, "target_disk_hints": hints})
    }

    #[test]
    fn hints_confirm_the_disk_the_name_names_and_single_it_out() {
        let host = FakeHost { units: [("install-linux.target", "loaded")].into(), ..identified() };
        let all = serde_json::json!({"wwn": "0X5000C50015EA71AD", "serial": " PD-TARGET-0001 ", "model": "QEMU HARDDISK",
            "size_min": "900M", "size_max": "1100M", "rotational": false});
        assert_eq!(check(&host, hinted("/dev/vdb", all.clone()), vec![]), []);
        // The same by its by-id name, which udev has not made: resolved from the identity.
        assert_eq!(check(&host, hinted("/dev/disk/by-id/wwn-0x5000c50015ea71ad", all), vec![]), []);
        // Each hint that does not fit the named disk, one detail each.
        let wrong = serde_json::json!({"serial": "PD-OTHER", "size_min": "2G", "rotational": true});
        assert_eq!(
            check(&host, hinted("/dev/vdb", wrong), vec![]),
            [
                ("/target_disk_hints/serial".into(), "diskIdentityMismatch".into()),
                ("/target_disk_hints/size_min".into(), "diskIdentityMismatch".into()),
                ("/target_disk_hints/rotational".into(), "diskIdentityMismatch".into()),
            ]
        );
        // Hints that fit two disks confirm nothing.
        assert_eq!(
            check(&host, hinted("/dev/vdb", serde_json::json!({"model": "QEMU HARDDISK"})), vec![]),
            [("/target_disk_hints".into(), "diskAmbiguous".into())]
        );
        // A disk without WWN or serial matches no hint on them.
        assert_eq!(
            check(&host, hinted("/dev/vdc", serde_json::json!({"serial": "PD-TARGET-0001"})), vec![]),
            [("/target_disk_hints/serial".into(), "diskIdentityMismatch".into())]
        );
        // A by-id name no disk carries.
        assert_eq!(
            check(&host, hinted("/dev/disk/by-id/wwn-0x0000000000000001", serde_json::json!({"serial": "x"})), vec![]),
            one("diskNotFound")
        );
    }

    #[test]
    fn messages_give_the_machines_values_never_the_hints() {
        let host = identified();
        let doc =
            parse(hinted("/dev/vdb", serde_json::json!({"serial": "SECRET-HINT"})).to_string().into_bytes()).unwrap();
        let found = super::check(&Recipe::view(&doc), &host, &Findings::default());
        let said: Vec<&str> = found.issues.iter().map(|i| i.message.as_str()).collect();
        assert!(said.iter().all(|m| !m.contains("SECRET-HINT")), "{said:?}");
        assert!(said.iter().any(|m| m.contains("/dev/vdb has serial PD-TARGET-0001")), "{said:?}");
        let resolved = found.resolved.unwrap();
        assert_eq!((resolved.device.as_str(), resolved.disk.unwrap().name.as_str()), ("/dev/vdb", "vdb"));
    }

    #[test]
    fn before_the_start_the_disk_must_be_the_very_disk_validated() {
        let host = identified();
        let doc = parse(disk("/dev/vdb").to_string().into_bytes()).unwrap();
        let recipe = Recipe::view(&doc);
        let validated = super::check(&recipe, &host, &Findings::default()).resolved;
        assert_eq!(recheck_disk(&recipe, &host, validated.as_ref()), []);
        // Another disk under the same name: same node, another serial and WWN.
        let mut swapped = identified();
        swapped.disks[0].serial = Some("PD-REPLACEMENT".into());
        swapped.disks[0].wwn = Some("0x5000c50015ea7100".into());
        let issues = recheck_disk(&recipe, &swapped, validated.as_ref());
        let codes: Vec<_> = issues.iter().map(|i| (i.path.as_str(), i.code.name())).collect();
        assert_eq!(codes, [("/target_disk", "diskChanged")]);
        // A disk with neither WWN nor serial is the same disk only as the same device.
        let doc = parse(disk("/dev/vdc").to_string().into_bytes()).unwrap();
        let recipe = Recipe::view(&doc);
        let validated = super::check(&recipe, &host, &Findings::default()).resolved;
        let mut moved = identified();
        moved.disks[2].dev = 9;
        moved.nodes.insert("/dev/vdc", Node::Block(9));
        assert_eq!(recheck_disk(&recipe, &moved, validated.as_ref())[0].code.name(), "diskChanged");
        // The very disk, by its by-id name, at another node than the outputs name.
        let doc = parse(disk("/dev/disk/by-id/wwn-0x5000c50015ea71ad").to_string().into_bytes()).unwrap();
        let recipe = Recipe::view(&doc);
        let validated = super::check(&recipe, &host, &Findings::default()).resolved;
        assert_eq!(validated.as_ref().and_then(|r| r.disk.as_ref()).map(|d| d.name.as_str()), Some("vdb"));
        assert_eq!(recheck_disk(&recipe, &host, validated.as_ref()), []);
        let mut renamed = identified();
        renamed.disks[0].dev = 9;
        renamed.disks[0].node = "/dev/vdz".into();
        let issues = recheck_disk(&recipe, &renamed, validated.as_ref());
        assert_eq!(issues.len(), 1, "{issues:?}");
        assert!(issues[0].message.contains("now at /dev/vdz where the outputs name /dev/vdb"), "{issues:?}");
    }

    #[test]
    fn an_inventory_is_checked_as_the_machine_is() {
        let machine = identified();
        let listed = |i: usize, verdict: Verdict, users: &[&str]| Listed {
            disk: machine.disks[i].clone(),
            verdict,
            users: users.iter().map(|u| u.to_string()).collect(),
        };
        let inventory = InventoryHost::new(
            Inventory {
                disks: vec![
                    listed(0, Verdict::Candidate, &[]),
                    listed(1, Verdict::System, &["mounted"]),
                    listed(2, Verdict::InUse, &["swap"]),
                ],
            },
            Path::new("r650.log"),
        );
        let checked = |recipe: serde_json::Value| {
            let doc = parse(recipe.to_string().into_bytes()).unwrap();
            let found = check_disk(&Recipe::view(&doc), &inventory, &Findings::default());
            found.issues.into_iter().map(|i| (i.path, i.code.name().to_owned())).collect::<Vec<_>>()
        };
        assert_eq!(
            checked(hinted("/dev/disk/by-id/wwn-0x5000c50015ea71ad", serde_json::json!({"serial": "PD-TARGET-0001"}))),
            []
        );
        assert_eq!(checked(disk("/dev/vdb")), []);
        assert_eq!(checked(disk("/dev/vdd")), one("systemDisk"));
        assert_eq!(checked(disk("/dev/vdc")), one("diskInUse"));
        assert_eq!(checked(disk("/dev/sdq")), one("diskNotFound"));
        assert_eq!(
            checked(hinted("/dev/vdb", serde_json::json!({"serial": "PD-OTHER"}))),
            [("/target_disk_hints/serial".into(), "diskIdentityMismatch".into())]
        );
        // Finding 17 of the controller trial: the messages speak of the saved inventory.
        let said = |recipe: serde_json::Value| {
            let doc = parse(recipe.to_string().into_bytes()).unwrap();
            let found = check_disk(&Recipe::view(&doc), &inventory, &Findings::default());
            found.issues.into_iter().map(|i| i.message).collect::<Vec<_>>()
        };
        assert_eq!(said(disk("/dev/sdq")), ["names no device of the saved inventory r650.log"]);
        assert_eq!(said(disk("/dev/disk/by-id/wwn-0x1")), ["names no disk of the saved inventory r650.log"]);
        assert_eq!(
            said(hinted("/dev/vdb", serde_json::json!({"model": "QEMU HARDDISK"}))),
            ["match 3 whole disks of the saved inventory r650.log (vdb, vdd, vdc); together they must single out one"]
        );
    }

    /// diskAmbiguous lists the disks it matched, by their kernel names (the machine's values).
    #[test]
    fn ambiguous_names_and_hints_list_the_disks_they_match() {
        let mut host = identified();
        host.disks[1].by_id = host.disks[0].by_id.clone();
        host.disks[1].serial = host.disks[0].serial.clone();
        let doc = parse(disk("/dev/disk/by-id/wwn-0x5000c50015ea71ad").to_string().into_bytes()).unwrap();
        let found = super::check(&Recipe::view(&doc), &host, &Findings::default());
        assert_eq!(found.issues[0].code, Code::DiskAmbiguous);
        assert_eq!(found.issues[0].message, "is a name two or more disks of this machine carry: vdb, vdd");
        let many: Vec<Disk> = (0..12).map(|n| crate::disks::tests::disk(&format!("sd{n}"), n)).collect();
        let shown: Vec<&Disk> = many.iter().collect();
        assert_eq!(names(&shown), "sd0, sd1, sd2, sd3, sd4, sd5, sd6, sd7 and 4 more");
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
        let long = format!("{}.target", "a".repeat(300));
        assert_eq!(check(&host, unit(&long), vec![]), [("/task_target".into(), "unitNotFound".into())], "issue 24 #8");
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
    fn overlay_directories_are_read_from_mountinfo() {
        let line = r"31 1 0:27 / / rw,noatime - overlay overlay rw,lowerdir=/run/live/rootfs/50-package.squashfs/:/run/live/rootfs/00-base.squashfs/,upperdir=/run/live/overlay/rw,workdir=/run/live/overlay/work";
        let entry = parse_mountinfo_line(line).unwrap();
        assert_eq!((entry.point.as_str(), entry.fstype.as_str(), rustix::fs::major(entry.dev)), ("/", "overlay", 0));
        assert_eq!(
            overlay_dirs(&entry.options),
            ["/run/live/rootfs/50-package.squashfs/", "/run/live/rootfs/00-base.squashfs/", "/run/live/overlay/rw"]
        );
        // Optional fields before the separator; escaped separators and spaces in the paths.
        let line = r"40 30 0:50 / /mnt rw shared:5 master:1 - overlay none rw,lowerdir=/a\134:b:/with\040space,upperdir=/u\134,v,workdir=/w";
        let entry = parse_mountinfo_line(line).unwrap();
        assert_eq!(overlay_dirs(&entry.options), ["/a:b", "/with space", "/u,v"]);
        assert_eq!(overlay_dirs("rw,lowerdir+=/l1,lowerdir+=/l2,datadir+=/d,upperdir=/u"), ["/l1", "/l2", "/d", "/u"]);
    }

    /// A live system's root, built here for real: a squashfs image on a loop device, under an
    /// overlay. The overlay must resolve to the loop device and to the disk holding the image.
    #[test]
    fn an_overlay_over_a_loop_mounted_image_is_on_the_loop_device_and_its_backing_disk() {
        use std::process::Command;
        let tools = ["mksquashfs", "losetup", "mount", "umount", "unshare"];
        if !rustix::process::geteuid().is_root()
            || tools.iter().any(|t| Command::new(t).arg("--help").output().is_err())
        {
            eprintln!("skipped: needs root, loop devices and {tools:?}");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let tree = dir.path().join("tree");
        fs::create_dir_all(tree.join("etc")).unwrap();
        fs::write(tree.join("etc/hostname"), "live\n").unwrap();
        let image = dir.path().join("base.squashfs");
        let made = Command::new("mksquashfs").arg(&tree).arg(&image).args(["-quiet", "-no-progress"]).output().unwrap();
        assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
        // In a mount namespace of its own, the test binary reports what it sees from inside.
        let script = r#"
            set -e
            d=$1
            mkdir -p "$d/lower" "$d/upper" "$d/work" "$d/root"
            mount -o loop,ro -t squashfs "$d/base.squashfs" "$d/lower"
            mount -t overlay overlay -o "lowerdir=$d/lower,upperdir=$d/upper,workdir=$d/work" "$d/root"
            echo "overlay $(stat -c '%d' "$d/root")"
            echo "backing $(stat -c '%d' "$d/base.squashfs")"
            cat /proc/self/mountinfo > "$d/mountinfo"
            umount "$d/root" "$d/lower"
        "#;
        let out = Command::new("unshare")
            .args(["--mount", "--propagation", "private", "--", "sh", "-c", script, "sh"])
            .arg(dir.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let facts = String::from_utf8(out.stdout).unwrap();
        let fact = |name: &str| facts.lines().find_map(|l| l.strip_prefix(&format!("{name} "))).unwrap().to_owned();
        let overlay: Dev = fact("overlay").parse().unwrap();
        let backing: Dev = fact("backing").parse().unwrap();
        // The overlay's entry, as this namespace saw it: its lower directory is the squashfs.
        let mountinfo = fs::read_to_string(dir.path().join("mountinfo")).unwrap();
        let entry = mountinfo.lines().filter_map(parse_mountinfo_line).find(|m| m.dev == overlay).unwrap();
        assert_eq!(overlay_dirs(&entry.options)[0], dir.path().join("lower").display().to_string());
        // The walk from the loop device (what the lower directory's stat gives) reaches the
        // disk that holds the image, unless that is RAM or another anonymous filesystem.
        let never = |_: &str| -> anyhow::Result<String> { anyhow::bail!("unused") };
        let host = SystemHost::new(&[], &never);
        let losetup = Command::new("losetup").args(["-f", "--show", "-r"]).arg(&image).output().unwrap();
        let attached = String::from_utf8(losetup.stdout).unwrap();
        let attached = attached.trim();
        let dev = fs::metadata(attached).unwrap().rdev();
        let disks = host.disks_under(&[dev]);
        let _ = Command::new("losetup").args(["-d", attached]).status();
        assert!(disks.contains(&dev), "the loop device itself");
        if rustix::fs::major(backing) != 0 {
            assert!(disks.contains(&host.whole_disk(backing)), "the backing file's disk: {disks:?}");
        }
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
            assert!(host.users(disk).contains(&"mounted".to_owned()));
        }
    }
}
