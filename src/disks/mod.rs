//! The machine's whole disks and what identifies each (SPEC §4a), read from the kernel's sysfs,
//! not from udev's database: at boot udev may not have run yet, and a name must mean the same
//! disk whether or not udev has made its link. The sysfs root is a parameter, so tests give a
//! tree of their own ([`SYSFS`] on the machine).
//!
//! Whole disks are the entries of `block/` named like a disk of a real bus, with a `device`
//! link (a device behind them): `sd*` (SCSI, SAS, SATA, USB), `nvme<N>n<M>` (an NVMe namespace),
//! `vd*` (virtio), `xvd*` (Xen), `mmcblk<N>` (SD, eMMC) and `hd*` (IDE). Not whole disks: loop,
//! ram, zram, nbd, `dm-*` and `md*` (made of other disks), `sr*` (CD and DVD drives, the task
//! media's kind), eMMC boot areas (`mmcblk<N>boot<M>`), the hidden per-path devices of NVMe
//! multipath (`nvme<N>c<C>n<M>`: the `nvme<N>n<M>` head stands for them) and partitions (never
//! in `block/`). An empty card-reader slot is a whole disk of size 0: it is listed, so that an
//! operator sees what took a name.
//!
//! Where each field comes from (`X` is `block/<name>`; `X/device` is the SCSI device, the NVMe
//! controller, the virtio or MMC device):
//!
//! | field | SCSI, SAS, SATA | NVMe | virtio | USB |
//! |---|---|---|---|---|
//! | `wwn` | page 0x83's NAA designator as `scsi_id` picks it (`X/device/vpd_pg83`); SATA: the IDENTIFY WWN there, if NAA 5 | `X/wwid`'s EUI-64 or NGUID | none | page 0x83's NAA, if the bridge has one |
//! | `serial` | the unit serial (`X/device/vpd_pg80`); SATA: the drive's serial from page 0x83 | `X/device/serial` | `X/serial` | the USB device's `serial` |
//! | `model` | `X/device/model`; SATA: the drive's 40-byte model from page 0x83 | `X/device/model` | none | `X/device/model` |
//! | `vendor` | `X/device/vendor` (`ATA` for SATA) | none | none | `X/device/vendor` |
//!
//! and for all: `size_bytes` from `X/size` (512-byte sectors), `rotational` from
//! `X/queue/rotational`, `removable` from `X/removable`, `transport` from the device's place in
//! sysfs, `by_id` and `by_path` as udev names the disk ([`udev`]'s table). Serial, model and
//! vendor are trimmed of white space at both ends, and characters that may not be printed as
//! they are ([`unprintable`]) are shown as `?`: any device may say anything.
//!
//! `wwn` is written as udev's `ID_WWN`: `0x` and the first 16 lower-case hex digits of the NAA
//! name (NAA 6's extension is only in the `wwn-` link, as udev does). For NVMe, udev's `ID_WWN`
//! is the kernel's `wwid` itself (`eui.0025388b91b2d1f4`); here an EUI-64 or an NGUID (which the
//! kernel also prints as `eui.` with 32 digits) is `0x` and its hex digits, so that a hint of
//! hex digits can name it; a `uuid.` or `nvme.` (vendor, serial and model) identifier is no
//! WWN, and `wwn` is null.

pub mod hints;
mod udev;
pub mod verdict;

use std::cmp::Ordering;
use std::fs;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Component, Path, PathBuf};

use rustix::fs::{Mode, OFlags};
use serde::{Deserialize, Serialize};

use crate::issues::unprintable;
use udev::Ancestor;

/// A device number (`st_rdev` / `st_dev`).
pub type Dev = u64;

/// Where the machine's sysfs is.
pub const SYSFS: &str = "/sys";

/// Every sysfs file read here is a few bytes (a VPD page at most a few hundred); this caps a
/// surprise.
const MAX_ATTR_BYTES: usize = 4096;

/// What a path on the host is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Node {
    Block(Dev),
    Other,
}

/// What `path` is, following symlinks (`/dev/disk/by-id/...` is fine).
pub fn node(path: &Path) -> io::Result<Node> {
    let meta = fs::metadata(path)?;
    Ok(if meta.file_type().is_block_device() { Node::Block(meta.rdev()) } else { Node::Other })
}

/// The device the task media at `path` is on: a block device itself, or the filesystem that
/// holds an image file or a directory.
pub fn device_of(path: &Path) -> Option<Dev> {
    let meta = fs::metadata(path).ok()?;
    Some(if meta.file_type().is_block_device() { meta.rdev() } else { meta.dev() })
}

/// One whole disk and what the kernel says identifies it. Serialized as one object of
/// `disks --format json` (the verdict and the users come with [`verdict::Listed`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Disk {
    /// The kernel's name: `sdb`, `nvme0n1`.
    pub name: String,
    /// Its device node: `/dev/sdb`.
    pub node: String,
    /// Major and minor, written `8:16` as sysfs does.
    #[serde(with = "dev_text")]
    pub dev: Dev,
    /// The `/dev/disk/by-id/...` names udev gives it, in full.
    pub by_id: Vec<String>,
    /// The `/dev/disk/by-path/...` names.
    pub by_path: Vec<String>,
    pub wwn: Option<String>,
    pub serial: Option<String>,
    pub model: Option<String>,
    pub vendor: Option<String>,
    pub size_bytes: u64,
    /// As the kernel says (`queue/rotational`); virtual disks often say rotational.
    pub rotational: Option<bool>,
    pub removable: bool,
    /// `sata`, `sas`, `scsi`, `fc`, `iscsi`, `nvme`, `virtio`, `usb`, `mmc`, `xen` or `ata`.
    pub transport: Option<String>,
}

/// What status.json, the result line and `layout.json` say of the disk a run resolved
/// (SPEC §4a): the machine's values, read from the kernel, never the recipe's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    pub name: String,
    pub wwn: Option<String>,
    pub serial: Option<String>,
    pub model: Option<String>,
    pub size_bytes: u64,
}

impl From<&Disk> for Identity {
    fn from(disk: &Disk) -> Identity {
        Identity {
            name: disk.name.clone(),
            wwn: disk.wwn.clone(),
            serial: disk.serial.clone(),
            model: disk.model.clone(),
            size_bytes: disk.size_bytes,
        }
    }
}

impl Disk {
    /// Whether `other` is the very same disk: the same WWN, serial and size; for a disk with
    /// neither WWN nor serial, the same device too (nothing else tells two blank disks apart).
    pub fn same_disk(&self, other: &Disk) -> bool {
        let anonymous = self.wwn.is_none() && self.serial.is_none();
        (self.wwn.as_ref(), self.serial.as_ref(), self.size_bytes)
            == (other.wwn.as_ref(), other.serial.as_ref(), other.size_bytes)
            && (!anonymous || self.dev == other.dev)
    }
}

/// What a recipe's `target_disk` resolved to on the machine: the kernel's node of what it names
/// (`/dev/sdb` for a by-id name of sdb, `/dev/sda1` for a partition), and the whole disk it is
/// on, with its identity, when that is a whole disk of the machine (not for dm or md devices).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    pub device: String,
    pub disk: Option<Disk>,
}

/// Every whole disk under the sysfs root `sysfs` (see the module's rule), by kind (SCSI, NVMe,
/// virtio, Xen, MMC, IDE), then by name with numbers counted (`sdz` before `sdaa`, `nvme2n1`
/// before `nvme10n1`). An error only when `block/` cannot be listed; a disk that vanishes while
/// it is read is left out, a field that cannot be read is null.
///
/// A machine of many disks is read on a few threads at once: each disk is a dozen small files,
/// and 64 of them took 4 ms on one thread (BENCHMARKS.md, issue 29's budget of 5 ms).
pub fn read(sysfs: &Path) -> io::Result<Vec<Disk>> {
    let names: Vec<String> =
        fs::read_dir(sysfs.join("block"))?.flatten().filter_map(|e| e.file_name().into_string().ok()).collect();
    let read_all = |names: &[String]| {
        let mut known = udev::Known::default();
        names.iter().filter_map(|name| read_disk(sysfs, name, &mut known)).collect::<Vec<Disk>>()
    };
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(MAX_THREADS);
    let mut disks: Vec<Disk> = if names.len() < DISKS_PER_THREAD * 2 || threads < 2 {
        read_all(&names)
    } else {
        let share = names.len().div_ceil(threads.min(names.len() / DISKS_PER_THREAD));
        std::thread::scope(|scope| {
            let workers: Vec<_> = names.chunks(share).map(|part| scope.spawn(move || read_all(part))).collect();
            // A worker that panicked read nothing: its disks are missing, as a disk that
            // vanished while it was read is.
            workers.into_iter().flat_map(|w| w.join().unwrap_or_default()).collect()
        })
    };
    disks.sort_by(|a, b| order(&a.name, &b.name));
    Ok(disks)
}

/// At most this many threads read the disks, each at least this many disks: a thread costs
/// tens of microseconds to start, a disk about sixty to read.
const MAX_THREADS: usize = 4;
const DISKS_PER_THREAD: usize = 8;

/// The whole disk `dev` alone, when it is one ([`read`]'s rule): found through
/// `dev/block/MAJ:MIN`, as the kernel links it, or else by each disk's `dev`.
pub fn read_one(sysfs: &Path, dev: Dev) -> Option<Disk> {
    let link = sysfs.join("dev/block").join(format_dev(dev));
    let name = match resolve_link(&link).filter(|_| link.is_symlink()) {
        Some(path) => path.file_name()?.to_str()?.to_owned(),
        None => fs::read_dir(sysfs.join("block")).ok()?.flatten().find_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            let text = text(&sysfs.join("block").join(&name).join("dev"))?;
            (parse_dev(&text)? == dev).then_some(name)
        })?,
    };
    read_disk(sysfs, &name, &mut udev::Known::default()).filter(|disk| disk.dev == dev)
}

/// Which kind of whole disk a name is: the module's rule, by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Scsi,
    Nvme,
    Virtio,
    Xen,
    Mmc,
    Ide,
}

impl Kind {
    fn of(name: &str) -> Option<Kind> {
        let letters = |rest: &str| !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_lowercase());
        let number = |rest: &str| !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit());
        let prefixed = |prefix: &str, rest: &dyn Fn(&str) -> bool| name.strip_prefix(prefix).is_some_and(rest);
        if prefixed("sd", &letters) {
            Some(Kind::Scsi)
        } else if prefixed("vd", &letters) {
            Some(Kind::Virtio)
        } else if prefixed("xvd", &letters) {
            Some(Kind::Xen)
        } else if prefixed("hd", &letters) {
            Some(Kind::Ide)
        } else if prefixed("mmcblk", &number) {
            Some(Kind::Mmc)
        } else if prefixed("nvme", &|rest| rest.split_once('n').is_some_and(|(c, n)| number(c) && number(n))) {
            Some(Kind::Nvme)
        } else {
            None
        }
    }
}

fn read_disk(sysfs: &Path, name: &str, known: &mut udev::Known) -> Option<Disk> {
    let kind = Kind::of(name)?;
    let path = resolve_link(&sysfs.join("block").join(name))?;
    let dir = Dir::open(&path)?;
    // A whole disk has a device behind it.
    let device = dir.open_dir("device")?;
    let dev = parse_dev(&String::from_utf8_lossy(&dir.attr("dev")?))?;
    let chain = udev::chain(sysfs, &path, known);
    let number = |name: &str| dir.attr(name).and_then(|n| String::from_utf8_lossy(&n).trim().parse::<u64>().ok());
    let mut disk = Disk {
        name: name.to_owned(),
        node: format!("/dev/{name}"),
        dev,
        by_id: Vec::new(),
        by_path: udev::path_id(sysfs, &chain, known).map(|id| udev::path_links(name, &id)).unwrap_or_default(),
        wwn: None,
        serial: None,
        model: None,
        vendor: None,
        size_bytes: number("size").unwrap_or(0).saturating_mul(512),
        rotational: number("queue/rotational").and_then(|r| (r <= 1).then_some(r == 1)),
        removable: number("removable") == Some(1),
        transport: None,
    };
    let transport = match kind {
        Kind::Scsi => scsi(&mut disk, &device, &chain, &devpath(sysfs, &path)),
        Kind::Nvme => {
            let (model, serial, wwid) = (device.attr("model"), device.attr("serial"), dir.attr("wwid"));
            disk.by_id =
                udev::nvme_links(wwid.as_deref(), model.as_deref(), serial.as_deref(), dir.attr("nsid").as_deref());
            disk.wwn = wwid.as_deref().and_then(nvme_wwn);
            (disk.model, disk.serial) = (model.as_deref().and_then(clean), serial.as_deref().and_then(clean));
            "nvme"
        }
        Kind::Virtio => {
            let serial = dir.attr("serial");
            disk.by_id = udev::virtio_links(serial.as_deref());
            disk.serial = serial.as_deref().and_then(clean);
            "virtio"
        }
        Kind::Mmc => {
            let (card, serial) = (device.attr("name"), device.attr("serial"));
            // 252's rule names `mmcblk[0-9]` only.
            if name.len() == "mmcblk0".len() && chain.iter().any(|a| a.subsystem.as_deref() == Some("mmc")) {
                disk.by_id = udev::mmc_links(card.as_deref(), serial.as_deref());
            }
            (disk.model, disk.serial) = (card.as_deref().and_then(clean), serial.as_deref().and_then(clean));
            "mmc"
        }
        Kind::Xen => "xen",
        Kind::Ide => "ata",
    };
    disk.transport = Some(transport.to_owned());
    Some(disk)
}

/// A sysfs directory, held open: its files are opened from it, not by walking the whole path
/// from the root again (which was most of the time 64 disks took).
struct Dir(OwnedFd);

impl Dir {
    fn open(path: &Path) -> Option<Dir> {
        rustix::fs::open(path, OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty()).ok().map(Dir)
    }

    /// The directory `name` below, following a link (`device`).
    fn open_dir(&self, name: &str) -> Option<Dir> {
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
        rustix::fs::openat(&self.0, name, flags, Mode::empty()).ok().map(Dir)
    }

    /// The file's bytes ([`contents`]).
    fn bytes(&self, name: &str) -> Option<Vec<u8>> {
        contents(rustix::fs::openat(&self.0, name, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty()).ok()?)
    }

    /// An attribute ([`without_newlines`]).
    fn attr(&self, name: &str) -> Option<Vec<u8>> {
        self.bytes(name).map(without_newlines)
    }
}

/// A sysfs file's bytes, at most [`MAX_ATTR_BYTES`]; `None` when it cannot be read. One read:
/// sysfs gives an attribute whole to the first.
fn contents(file: OwnedFd) -> Option<Vec<u8>> {
    let mut buffer = [0; MAX_ATTR_BYTES];
    let n = rustix::io::read(&file, &mut buffer).ok()?;
    Some(buffer[..n].to_vec())
}

/// An attribute as udev reads it: its trailing newlines dropped.
fn without_newlines(mut bytes: Vec<u8>) -> Vec<u8> {
    while bytes.last() == Some(&b'\n') {
        bytes.pop();
    }
    bytes
}

/// A disk on the SCSI layer: SCSI, SAS, FC, iSCSI, SATA through libata or a SAS HBA's SAT, USB
/// mass storage. Fills its identity and names; gives its transport.
fn scsi(disk: &mut Disk, device: &Dir, chain: &[Ancestor], devpath: &str) -> &'static str {
    let vendor = device.attr("vendor").unwrap_or_default();
    let model = device.attr("model").unwrap_or_default();
    let page_83 = device.bytes("vpd_pg83");
    let page_80 = device.bytes("vpd_pg80");
    disk.vendor = clean(&vendor);
    disk.model = clean(&model);
    disk.serial = page_80.as_deref().and_then(unit_serial).and_then(clean);
    let scsi_id = udev::scsi_id(&vendor, &model, page_83.as_deref(), page_80.as_deref());
    disk.wwn = scsi_id.wwn.as_ref().map(|wwn| format!("0x{wwn}"));
    if let Some(usb) = usb_id(chain, &vendor, &model) {
        disk.serial = usb.serial.as_deref().and_then(clean);
        disk.by_id = udev::usb_links(&usb);
        return "usb";
    }
    // udev asks a drive whose SCSI vendor is `ATA` with ata_id, and others with scsi_id. Without
    // SAT's designator in page 0x83, what ata_id would say is unknown here: no names at all.
    if vendor.trim_ascii() != b"ATA" {
        disk.by_id = udev::scsi_links(&scsi_id);
    } else if let Some(ata) = page_83.as_deref().and_then(udev::ata_id) {
        disk.by_id = udev::ata_links(&ata);
        disk.model = clean(&ata.model).or(disk.model.take());
        disk.serial = clean(&ata.serial).or(disk.serial.take());
        disk.wwn = ata.wwn.map(|wwn| format!("0x{wwn:016x}"));
    }
    if devpath.contains("/ata") {
        "sata"
    } else if devpath.contains("/end_device-") {
        "sas"
    } else if devpath.contains("/rport-") {
        "fc"
    } else if devpath.contains("/session") {
        "iscsi"
    } else {
        "scsi"
    }
}

/// What `usb_id` reads of a disk on USB; `None` for a disk that is not on USB.
fn usb_id(chain: &[Ancestor], vendor: &[u8], model: &[u8]) -> Option<udev::UsbId> {
    let interface = chain.iter().position(|a| a.subsystem.as_deref() == Some("usb") && a.name().contains(':'))?;
    let usb = &chain.get(interface + 1)?.dir;
    let subclass = text(&chain[interface].dir.join("bInterfaceSubClass"));
    // Mass storage speaking SCSI (6) or ATAPI (2): the SCSI INQUIRY's names and the LUN.
    let scsi = matches!(subclass.as_deref().map(str::trim), Some("06" | "02"));
    let target_lun = chain.iter().find_map(|a| udev::hctl(a.name())).filter(|_| scsi).map(|[_, _, t, l]| (t, l));
    let usb_attr = |name: &str, or: &str| attr(&usb.join(name)).or_else(|| attr(&usb.join(or))).unwrap_or_default();
    let (vendor, model) = match target_lun {
        Some(_) => (vendor.to_vec(), model.to_vec()),
        None => (usb_attr("manufacturer", "idVendor"), usb_attr("product", "idProduct")),
    };
    Some(udev::UsbId { vendor, model, serial: attr(&usb.join("serial")), target_lun })
}

/// The unit serial of a page 0x80.
fn unit_serial(page: &[u8]) -> Option<&[u8]> {
    if page.get(1) != Some(&0x80) {
        return None;
    }
    page.get(4..4 + usize::from(*page.get(3)?))
}

/// An NVMe `wwid`'s EUI-64 or NGUID as `0x` and lower-case hex digits (the module says why).
fn nvme_wwn(wwid: &[u8]) -> Option<String> {
    let hex = std::str::from_utf8(wwid).ok()?.trim().strip_prefix("eui.")?;
    let digits = hex.len() == 16 || hex.len() == 32;
    (digits && hex.bytes().all(|b| b.is_ascii_hexdigit())).then(|| format!("0x{}", hex.to_ascii_lowercase()))
}

/// A name, model or serial as it may be shown: trimmed of white space and NULs at both ends,
/// unprintable characters as `?`; `None` when nothing is left.
pub fn clean(raw: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(raw);
    let text: String = text
        .trim_matches(|c: char| c.is_whitespace() || c == '\0')
        .chars()
        .map(|c| if unprintable(c) { '?' } else { c })
        .collect();
    (!text.is_empty()).then_some(text)
}

/// A sysfs attribute by its path ([`without_newlines`]), at most [`MAX_ATTR_BYTES`].
pub fn attr(path: &Path) -> Option<Vec<u8>> {
    let file = rustix::fs::open(path, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty()).ok()?;
    contents(file).map(without_newlines)
}

/// [`attr`] as text.
fn text(path: &Path) -> Option<String> {
    attr(path).map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
}

/// `MAJ:MIN`.
fn parse_dev(text: &str) -> Option<Dev> {
    let (major, minor) = text.trim().split_once(':')?;
    Some(rustix::fs::makedev(major.parse().ok()?, minor.parse().ok()?))
}

/// Where the symlink `path` points, as a path without `..` (sysfs's links are relative); `path`
/// itself when it is no link.
fn resolve_link(path: &Path) -> Option<PathBuf> {
    let target = match fs::read_link(path) {
        Ok(target) => path.parent()?.join(target),
        Err(e) if e.kind() == io::ErrorKind::InvalidInput => path.to_owned(),
        Err(_) => return None,
    };
    let mut clean = PathBuf::new();
    for part in target.components() {
        match part {
            Component::ParentDir => {
                clean.pop();
            }
            Component::CurDir => {}
            part => clean.push(part),
        }
    }
    Some(clean)
}

/// `path` under the sysfs root, as the kernel's `DEVPATH` (`/devices/...`).
fn devpath(sysfs: &Path, path: &Path) -> String {
    format!("/{}", path.strip_prefix(sysfs).unwrap_or(path).display())
}

/// Disks' names by kind, then with their numbers as numbers and shorter runs of letters first:
/// `sdz` before `sdaa`, `nvme2n1` before `nvme10n1`.
fn order(a: &str, b: &str) -> Ordering {
    // Runs of digits and of other characters, each compared by its length, then its text.
    fn key(name: &str) -> Vec<(usize, &str)> {
        let mut key = Vec::new();
        let mut rest = name;
        while let Some(first) = rest.chars().next() {
            let digits = first.is_ascii_digit();
            let end = rest.find(|c: char| c.is_ascii_digit() != digits).unwrap_or(rest.len());
            let run = if digits { rest[..end].trim_start_matches('0') } else { &rest[..end] };
            key.push((run.len(), run));
            rest = &rest[end..];
        }
        key
    }
    Kind::of(a).cmp(&Kind::of(b)).then_with(|| key(a).cmp(&key(b))).then_with(|| a.cmp(b))
}

/// `dev` as sysfs writes it (`8:16`).
fn format_dev(dev: Dev) -> String {
    format!("{}:{}", rustix::fs::major(dev), rustix::fs::minor(dev))
}

/// `dev` as sysfs writes it, in JSON.
mod dev_text {
    use serde::{de::Error, Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(dev: &super::Dev, out: S) -> Result<S::Ok, S::Error> {
        out.collect_str(&super::format_dev(*dev))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(input: D) -> Result<super::Dev, D::Error> {
        let text = String::deserialize(input)?;
        super::parse_dev(&text).ok_or_else(|| D::Error::custom("dev must be MAJOR:MINOR"))
    }
}

/// Why a `target_disk` names no whole disk of the machine (or of an inventory).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unresolved {
    /// Not `/dev/NAME`, `/dev/disk/by-id/NAME` or `/dev/disk/by-path/NAME` with NAME one path
    /// segment.
    Unsupported,
    /// No whole disk has that name, and nothing is at the path.
    NotFound,
    /// Something is at the path, and it is no block device.
    NotBlockDevice,
    /// A block device is at the path, and it is no whole disk (a partition, a loop or dm
    /// device, a CD drive).
    NotWholeDisk,
    /// udev's link is there and points at a whole disk, but the kernel's identity gives no disk
    /// that name: the name would rest on udev alone (the names udev makes with an ioctl, or by
    /// other packages' rules: see [`udev`]).
    NotDerived,
    /// Two or more whole disks have the name (two disks with the same serial, one disk seen
    /// through two paths): it singles out none.
    Ambiguous,
    /// What is at the path (udev's link, the node in `/dev`) is another device than the disk
    /// the kernel's identity names, or cannot be read: one of the two is wrong, and the disk
    /// cannot be told.
    Disagrees,
}

impl Unresolved {
    /// Why, in words; `place` is where the disks were looked for: `this machine`, or a saved
    /// inventory by its file.
    pub fn words(self, place: &str) -> String {
        match self {
            Unresolved::Unsupported => "is not /dev/NAME, /dev/disk/by-id/NAME or /dev/disk/by-path/NAME".into(),
            Unresolved::NotFound => format!("names no disk of {place}"),
            Unresolved::NotBlockDevice => "is not a block device".into(),
            Unresolved::NotWholeDisk => "is not a whole disk (a partition, or a loop, dm, md or CD device)".into(),
            Unresolved::NotDerived => "is a link udev made that the kernel's identity of the disk does not give; name \
                                       the disk by a name derived from its identity (wwn-, scsi-, ata-, nvme-, \
                                       virtio-, usb-) or by its kernel name"
                .into(),
            Unresolved::Ambiguous => format!("is a name two or more disks of {place} carry"),
            Unresolved::Disagrees => {
                "is a link or node that points at another device than the disk this name gives by its identity".into()
            }
        }
    }
}

/// The disks among `disks` that carry the name `path` by their identity, as [`resolve`]
/// reads it; `None` when `path` is no form of name it reads.
pub fn named<'a>(path: &str, disks: &'a [Disk]) -> Option<Vec<&'a Disk>> {
    let segment = |name: &str| !name.is_empty() && name != "." && name != ".." && !name.contains('/');
    type Names = fn(&Disk, &str, &str) -> bool;
    let forms: [(&str, Names); 3] = [
        ("/dev/disk/by-id/", |disk, path, _| disk.by_id.iter().any(|link| link == path)),
        ("/dev/disk/by-path/", |disk, path, _| disk.by_path.iter().any(|link| link == path)),
        ("/dev/", |disk, _, name| disk.name == name),
    ];
    let (names, name) = forms
        .into_iter()
        .find_map(|(prefix, names)| Some((names, path.strip_prefix(prefix).filter(|name| segment(name))?)))?;
    Some(disks.iter().filter(|disk| names(disk, path, name)).collect())
}

/// The whole disk `path` names among `disks`: `/dev/NAME` the disk of that kernel name,
/// `/dev/disk/by-id/NAME` and `/dev/disk/by-path/NAME` the disk whose identity gives that name
/// (see [`udev`]), whether or not udev has made the link yet. `node` tells what is at a path
/// ([`node`] on the machine; nothing for a saved inventory).
///
/// What is at the path must agree: a link or node to another device, or one that cannot be
/// read, is refused ([`Unresolved::Disagrees`]), never decided for one side; a name two disks
/// carry is refused ([`Unresolved::Ambiguous`]). A link udev made that the kernel's identity
/// does not give is refused too ([`Unresolved::NotDerived`]).
pub fn resolve<'a>(
    path: &str,
    disks: &'a [Disk],
    node: &dyn Fn(&Path) -> io::Result<Node>,
) -> Result<&'a Disk, Unresolved> {
    let named = named(path, disks).ok_or(Unresolved::Unsupported)?;
    let there = node(Path::new(path));
    match (named.as_slice(), there) {
        ([disk], Ok(Node::Block(dev))) if dev == disk.dev => Ok(disk),
        ([disk], Err(e)) if e.kind() == io::ErrorKind::NotFound => Ok(disk),
        ([_], _) => Err(Unresolved::Disagrees),
        ([], Err(e)) if e.kind() == io::ErrorKind::NotFound => Err(Unresolved::NotFound),
        ([], Ok(Node::Block(dev))) if disks.iter().any(|d| d.dev == dev) => Err(Unresolved::NotDerived),
        ([], Ok(Node::Block(_))) => Err(Unresolved::NotWholeDisk),
        ([], Ok(Node::Other)) => Err(Unresolved::NotBlockDevice),
        ([], Err(_)) => Err(Unresolved::NotFound),
        (_, _) => Err(Unresolved::Ambiguous),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::udev::tests::{libata_page_83, page_80, page_83};
    use super::*;
    use std::os::unix::fs::symlink;

    /// A disk with nothing known but its name and number.
    pub fn disk(name: &str, dev: Dev) -> Disk {
        Disk {
            name: name.into(),
            node: format!("/dev/{name}"),
            dev,
            by_id: Vec::new(),
            by_path: Vec::new(),
            wwn: None,
            serial: None,
            model: None,
            vendor: None,
            size_bytes: 0,
            rotational: None,
            removable: false,
            transport: None,
        }
    }

    /// A sysfs tree in a temporary directory, laid out as the kernel lays it out: devices
    /// under `devices/`, each with its `subsystem` link (and `uevent`'s DEVTYPE, which udev
    /// reads), `block/` and `class/` links into them, all relative as the kernel's are.
    pub struct Tree {
        dir: tempfile::TempDir,
    }

    impl Tree {
        pub fn new() -> Tree {
            // In RAM where the machine has /dev/shm, as sysfs is: a tree of 4,000 disks took 30 s to
            // make and 4 minutes to remove on a loaded disk, 3 s in RAM.
            let dir = tempfile::tempdir_in("/dev/shm").or_else(|_| tempfile::tempdir()).unwrap();
            let tree = Tree { dir };
            fs::create_dir_all(tree.root().join("block")).unwrap();
            tree
        }

        pub fn root(&self) -> &Path {
            self.dir.path()
        }

        /// A device `devices/<path>` on `subsystem`, of the kernel's `devtype`.
        pub fn device(&self, path: &str, subsystem: Option<&str>, devtype: Option<&str>) -> &Tree {
            let dir = self.root().join("devices").join(path);
            fs::create_dir_all(&dir).unwrap();
            if let Some(subsystem) = subsystem {
                let buses = ["pci", "virtio", "scsi", "usb"];
                let kind = if buses.contains(&subsystem) { "bus" } else { "class" };
                fs::create_dir_all(self.root().join(kind).join(subsystem)).unwrap();
                self.link(&format!("devices/{path}/subsystem"), &format!("{kind}/{subsystem}"));
            }
            let uevent = devtype.map(|t| format!("DEVTYPE={t}\n")).unwrap_or_default();
            self.file(&format!("devices/{path}/uevent"), uevent)
        }

        pub fn file(&self, path: &str, bytes: impl AsRef<[u8]>) -> &Tree {
            let path = self.root().join(path);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, bytes).unwrap();
            self
        }

        /// The link `path` to `target`, both under the root, written relative (in place of one
        /// that was there).
        pub fn link(&self, path: &str, target: &str) -> &Tree {
            let up = "../".repeat(path.matches('/').count());
            let at = self.root().join(path);
            fs::create_dir_all(at.parent().unwrap()).unwrap();
            let _ = fs::remove_file(&at);
            symlink(format!("{up}{target}"), at).unwrap();
            self
        }

        /// The block device `devices/<path>` (its name the last part), `dev` its number,
        /// `sectors` its size, `device` the device behind it (under `devices/`).
        pub fn block(&self, path: &str, dev: &str, sectors: u64, device: Option<&str>) -> &Tree {
            let name = path.rsplit('/').next().unwrap();
            self.device(path, Some("block"), Some("disk"));
            let (major, minor) = dev.split_once(':').unwrap();
            let uevent = format!("MAJOR={major}\nMINOR={minor}\nDEVNAME={name}\nDEVTYPE=disk\n");
            self.file(&format!("devices/{path}/uevent"), uevent);
            self.file(&format!("devices/{path}/dev"), format!("{dev}\n"));
            self.file(&format!("devices/{path}/size"), format!("{sectors}\n"));
            self.file(&format!("devices/{path}/removable"), "0\n");
            self.file(&format!("devices/{path}/queue/rotational"), "1\n");
            if let Some(device) = device {
                self.link(&format!("devices/{path}/device"), &format!("devices/{device}"));
            }
            self.link(&format!("dev/block/{dev}"), &format!("devices/{path}"));
            self.link(&format!("block/{name}"), &format!("devices/{path}"))
        }

        /// A SCSI host under `devices/<parent>`, and under it (`between` it and the target: a SAS
        /// port, an expander, an end device) the target and device `H:C:T:L`; the device's path.
        pub fn scsi(&self, parent: &str, between: &str, [h, c, t, l]: [u32; 4], vendor: &str, model: &str) -> String {
            let host = format!("{parent}/host{h}");
            let target = format!("{host}{between}/target{h}:{c}:{t}");
            // The devices between (ports, expanders, end devices) are on no bus.
            let mut at = host.clone();
            for part in between.split('/').filter(|p| !p.is_empty()) {
                at = format!("{at}/{part}");
                self.device(&at, None, None);
            }
            let device = format!("{target}/{h}:{c}:{t}:{l}");
            self.device(&host, Some("scsi"), Some("scsi_host"));
            self.device(&target, Some("scsi"), Some("scsi_target"));
            self.device(&device, Some("scsi"), Some("scsi_device"));
            self.file(&format!("devices/{device}/vendor"), format!("{vendor:<8}\n"));
            self.file(&format!("devices/{device}/model"), format!("{model:<16}\n"));
            self.file(&format!("devices/{device}/type"), "0\n");
            self.file(&format!("devices/{device}/rev"), "2.5+\n");
            device
        }

        /// The transport class device `<class>/<name>` of the device `devices/<path>` (whose
        /// name it takes), linked from `class/<class>/`, with its attributes.
        pub fn class(&self, class: &str, path: &str, attrs: &[(&str, &str)]) -> &Tree {
            let name = path.rsplit('/').next().unwrap();
            let dir = format!("{path}/{class}/{name}");
            self.device(&dir, Some(class), None);
            for (attr, value) in attrs {
                self.file(&format!("devices/{dir}/{attr}"), format!("{value}\n"));
            }
            self.link(&format!("class/{class}/{name}"), &format!("devices/{dir}"))
        }
    }

    /// A machine with one disk of each kind, and devices that are not whole disks.
    pub fn machine() -> Tree {
        let tree = Tree::new();
        // virtio-blk, partitioned.
        tree.device("pci0000:00/0000:00:02.0", Some("pci"), None);
        tree.device("pci0000:00/0000:00:02.0/virtio1", Some("virtio"), None);
        tree.block(
            "pci0000:00/0000:00:02.0/virtio1/block/vda",
            "253:0",
            2_097_152,
            Some("pci0000:00/0000:00:02.0/virtio1"),
        );
        tree.file("devices/pci0000:00/0000:00:02.0/virtio1/block/vda/serial", "PD-VIRTIO-0001");
        for n in 1..=2 {
            let part = format!("devices/pci0000:00/0000:00:02.0/virtio1/block/vda/vda{n}");
            tree.file(&format!("{part}/partition"), format!("{n}\n"))
                .file(&format!("{part}/dev"), format!("253:{n}\n"));
        }
        // SCSI disk on virtio-scsi, as QEMU's scsi-hd with serial= and wwn=; the host's number
        // is not the first of the machine.
        tree.device("pci0000:00/0000:00:03.0", Some("pci"), None);
        tree.device("pci0000:00/0000:00:03.0/virtio2", Some("virtio"), None);
        let sdb = tree.scsi("pci0000:00/0000:00:03.0/virtio2", "", [2, 0, 1, 0], "QEMU", "QEMU HARDDISK");
        let naa = [0x50, 0x00, 0xc5, 0x00, 0x15, 0xea, 0x71, 0xad];
        tree.file(&format!("devices/{sdb}/vpd_pg83"), page_83(&[(2, 0, &b"PD-TARGET-0001"[..]), (1, 3, &naa)]));
        tree.file(&format!("devices/{sdb}/vpd_pg80"), page_80(b"PD-TARGET-0001"));
        tree.block(&format!("{sdb}/block/sdb"), "8:16", 1_953_125, Some(&sdb));
        tree.file(&format!("devices/{sdb}/block/sdb/queue/rotational"), "0\n");
        // SATA through libata, port 1, partitioned; a CD drive on port 2.
        tree.device("pci0000:00/0000:00:1f.2", Some("pci"), None);
        tree.device("pci0000:00/0000:00:1f.2/ata1", None, None);
        tree.class("ata_port", "pci0000:00/0000:00:1f.2/ata1", &[("port_no", "1")]);
        let sda = tree.scsi("pci0000:00/0000:00:1f.2/ata1", "", [0, 0, 0, 0], "ATA", "Samsung SSD 860");
        let wwn = Some([0x50, 0x02, 0x53, 0x8e, 0x40, 0xa1, 0xb2, 0xc3]);
        tree.file(
            &format!("devices/{sda}/vpd_pg83"),
            libata_page_83("Samsung SSD 860 EVO 500GB", "S3Z1NB0K123456X", wwn),
        );
        tree.file(&format!("devices/{sda}/vpd_pg80"), page_80(b"     S3Z1NB0K123456X"));
        tree.block(&format!("{sda}/block/sda"), "8:0", 976_773_168, Some(&sda));
        tree.file(&format!("devices/{sda}/block/sda/sda1/partition"), "1\n");
        let sr0 = tree.scsi("pci0000:00/0000:00:1f.2/ata2", "", [1, 0, 0, 0], "QEMU", "QEMU DVD-ROM");
        tree.file(&format!("devices/{sr0}/type"), "5\n");
        tree.block(&format!("{sr0}/block/sr0"), "11:0", 2048, Some(&sr0));
        // NVMe behind a PCIe bridge.
        tree.device("pci0000:3a/0000:3a:00.0", Some("pci"), None);
        tree.device("pci0000:3a/0000:3a:00.0/0000:3b:00.0", Some("pci"), None);
        let nvme0 = "pci0000:3a/0000:3a:00.0/0000:3b:00.0/nvme/nvme0";
        tree.device(nvme0, Some("nvme"), None);
        tree.file(&format!("devices/{nvme0}/serial"), "PD-NVME-0001        \n");
        tree.file(&format!("devices/{nvme0}/model"), "QEMU NVMe Ctrl                          \n");
        tree.link("class/nvme/nvme0", &format!("devices/{nvme0}"));
        tree.block(&format!("{nvme0}/nvme0n1"), "259:0", 4_194_304, Some(nvme0));
        tree.file(&format!("devices/{nvme0}/nvme0n1/wwid"), "eui.0025388b91b2d1f4\n");
        tree.file(&format!("devices/{nvme0}/nvme0n1/nsid"), "1\n");
        tree.file(&format!("devices/{nvme0}/nvme0n1/queue/rotational"), "0\n");
        // NVMe with native multipath: the head is virtual, its controller elsewhere; the
        // hidden per-path device is no whole disk.
        tree.device("pci0000:00/0000:00:05.0", Some("pci"), None);
        tree.device("pci0000:00/0000:00:05.0/nvme/nvme1", Some("nvme"), None);
        tree.link("class/nvme/nvme1", "devices/pci0000:00/0000:00:05.0/nvme/nvme1");
        let subsys = "virtual/nvme-subsystem/nvme-subsys1";
        tree.device(subsys, Some("nvme-subsystem"), None);
        tree.file(&format!("devices/{subsys}/serial"), "PD-NVME-0002\n")
            .file(&format!("devices/{subsys}/model"), "QEMU NVMe Ctrl\n");
        tree.block(&format!("{subsys}/nvme1n1"), "259:1", 2_097_152, Some(subsys));
        tree.file(
            &format!("devices/{subsys}/nvme1n1/wwid"),
            "nvme.1b36-50442d4e564d452d30303032-51454d55204e564d65204374726c-00000001\n",
        );
        tree.file(&format!("devices/{subsys}/nvme1n1/nsid"), "1\n");
        tree.block(
            "pci0000:00/0000:00:05.0/nvme/nvme1/nvme1c1n1",
            "259:2",
            2_097_152,
            Some("pci0000:00/0000:00:05.0/nvme/nvme1"),
        );
        // A USB stick: mass storage speaking SCSI.
        tree.device("pci0000:00/0000:00:14.0", Some("pci"), None);
        tree.device("pci0000:00/0000:00:14.0/usb1", Some("usb"), Some("usb_device"));
        let stick = "pci0000:00/0000:00:14.0/usb1/1-1";
        tree.device(stick, Some("usb"), Some("usb_device"));
        for (attr, value) in [("serial", "0123456789AB"), ("idVendor", "0781"), ("idProduct", "5567")] {
            tree.file(&format!("devices/{stick}/{attr}"), format!("{value}\n"));
        }
        tree.device(&format!("{stick}/1-1:1.0"), Some("usb"), Some("usb_interface"));
        tree.file(&format!("devices/{stick}/1-1:1.0/bInterfaceClass"), "08\n");
        tree.file(&format!("devices/{stick}/1-1:1.0/bInterfaceSubClass"), "06\n");
        let sdc = tree.scsi(&format!("{stick}/1-1:1.0"), "", [6, 0, 0, 0], "SanDisk", "Cruzer Blade");
        tree.block(&format!("{sdc}/block/sdc"), "8:32", 31_266_816, Some(&sdc));
        tree.file(&format!("devices/{sdc}/block/sdc/removable"), "1\n");
        // SAS: on the HBA's phy 2, and behind an expander on its phy 5.
        tree.device("pci0000:80/0000:80:01.0", Some("pci"), None);
        tree.device("pci0000:80/0000:80:01.0/0000:81:00.0", Some("pci"), None);
        let hba = "pci0000:80/0000:80:01.0/0000:81:00.0";
        let direct = tree.scsi(hba, "/port-3:0/end_device-3:0", [3, 0, 0, 0], "SEAGATE", "ST1200MM0009");
        tree.file(&format!("devices/{direct}/vpd_pg80"), page_80(b"Z4009XYZ"));
        tree.block(&format!("{direct}/block/sdd"), "8:48", 2_344_225_968, Some(&direct));
        tree.class("sas_port", &format!("{hba}/host3/port-3:0"), &[("num_phys", "1")]);
        let end_device = [("phy_identifier", "2"), ("sas_address", "0x5000c500a1b2c3d5")];
        tree.class("sas_device", &format!("{hba}/host3/port-3:0/end_device-3:0"), &end_device);
        let far = "/port-3:1/expander-3:1/port-3:1:0/end_device-3:1:0";
        let behind = tree.scsi(hba, far, [3, 0, 1, 0], "SEAGATE", "ST1200MM0009");
        tree.block(&format!("{behind}/block/sde"), "8:64", 2_344_225_968, Some(&behind));
        tree.class("sas_port", &format!("{hba}/host3/port-3:1"), &[("num_phys", "4")]);
        tree.class(
            "sas_device",
            &format!("{hba}/host3/port-3:1/expander-3:1"),
            &[("sas_address", "0x500605b0000272bf")],
        );
        tree.class("sas_port", &format!("{hba}/host3{}", &far[..far.rfind('/').unwrap()]), &[("num_phys", "1")]);
        let end_device = [("phy_identifier", "5"), ("sas_address", "0x5000c500a1b2c3e6")];
        tree.class("sas_device", &format!("{hba}/host3{far}"), &end_device);
        // A SATA drive on the SAS HBA whose SAT keeps no VPD pages: ata_id's names are unknown.
        let sata = tree.scsi(hba, "/port-3:2/end_device-3:2", [3, 0, 2, 0], "ATA", "ST4000NM0035-1V4");
        tree.block(&format!("{sata}/block/sdf"), "8:80", 7_814_037_168, Some(&sata));
        tree.class("sas_port", &format!("{hba}/host3/port-3:2"), &[("num_phys", "1")]);
        tree.class("sas_device", &format!("{hba}/host3/port-3:2/end_device-3:2"), &[("phy_identifier", "3")]);
        // Not whole disks.
        tree.block("virtual/block/loop0", "7:0", 0, None);
        tree.block("virtual/block/dm-0", "254:0", 2048, None);
        tree.block("pci0000:00/0000:00:06.0/mmc_host/mmc0/mmc0:0001/block/mmcblk0/mmcblk0boot0", "179:8", 8192, None);
        tree
    }

    fn read_machine() -> Vec<Disk> {
        read(machine().root()).unwrap()
    }

    fn find<'a>(disks: &'a [Disk], name: &str) -> &'a Disk {
        disks.iter().find(|d| d.name == name).unwrap_or_else(|| panic!("{name} not in {disks:#?}"))
    }

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn whole_disks_by_name() {
        for name in ["sda", "sdaa", "vdb", "xvda", "hda", "nvme0n1", "nvme12n3", "mmcblk0", "mmcblk10"] {
            assert!(Kind::of(name).is_some(), "{name}");
        }
        for name in ["sda1", "sr0", "loop0", "ram0", "zram0", "dm-0", "md127", "nbd0", "nvme0c0n1", "nvme0n1p1"] {
            assert_eq!(Kind::of(name), None, "{name}");
        }
        for name in ["mmcblk0boot0", "mmcblk0rpmb", "nvme0", "sd", "vd1", "pmem0", "fd0"] {
            assert_eq!(Kind::of(name), None, "{name}");
        }
    }

    #[test]
    fn the_machine_lists_its_whole_disks_in_name_order() {
        let names: Vec<String> = read_machine().into_iter().map(|d| d.name).collect();
        assert_eq!(names, ["sda", "sdb", "sdc", "sdd", "sde", "sdf", "nvme0n1", "nvme1n1", "vda"]);
        let mut sorted = vec!["vda", "sdaa", "sdz", "nvme10n1", "nvme2n1", "sdb"];
        sorted.sort_by(|a, b| order(a, b));
        assert_eq!(sorted, ["sdb", "sdz", "sdaa", "nvme2n1", "nvme10n1", "vda"]);
    }

    #[test]
    fn a_scsi_disk_on_virtio_scsi() {
        let disks = read_machine();
        assert_eq!(
            *find(&disks, "sdb"),
            Disk {
                by_id: strings(&["/dev/disk/by-id/scsi-35000c50015ea71ad", "/dev/disk/by-id/wwn-0x5000c50015ea71ad"]),
                by_path: strings(&["/dev/disk/by-path/pci-0000:00:03.0-scsi-0:0:1:0"]),
                wwn: Some("0x5000c50015ea71ad".into()),
                serial: Some("PD-TARGET-0001".into()),
                model: Some("QEMU HARDDISK".into()),
                vendor: Some("QEMU".into()),
                size_bytes: 1_953_125 * 512,
                rotational: Some(false),
                transport: Some("scsi".into()),
                ..disk("sdb", rustix::fs::makedev(8, 16))
            }
        );
    }

    #[test]
    fn a_sata_disk_through_libata() {
        let disks = read_machine();
        assert_eq!(
            *find(&disks, "sda"),
            Disk {
                by_id: strings(&[
                    "/dev/disk/by-id/ata-Samsung_SSD_860_EVO_500GB_S3Z1NB0K123456X",
                    "/dev/disk/by-id/wwn-0x5002538e40a1b2c3"
                ]),
                by_path: strings(&[
                    "/dev/disk/by-path/pci-0000:00:1f.2-ata-1.0",
                    "/dev/disk/by-path/pci-0000:00:1f.2-ata-1"
                ]),
                wwn: Some("0x5002538e40a1b2c3".into()),
                serial: Some("S3Z1NB0K123456X".into()),
                model: Some("Samsung SSD 860 EVO 500GB".into()),
                vendor: Some("ATA".into()),
                size_bytes: 976_773_168 * 512,
                rotational: Some(true),
                transport: Some("sata".into()),
                ..disk("sda", rustix::fs::makedev(8, 0))
            }
        );
    }

    #[test]
    fn nvme_namespaces_with_and_without_multipath() {
        let disks = read_machine();
        assert_eq!(
            *find(&disks, "nvme0n1"),
            Disk {
                by_id: strings(&[
                    "/dev/disk/by-id/nvme-eui.0025388b91b2d1f4",
                    "/dev/disk/by-id/nvme-QEMU_NVMe_Ctrl_PD-NVME-0001",
                    "/dev/disk/by-id/nvme-QEMU_NVMe_Ctrl_PD-NVME-0001_1",
                ]),
                by_path: strings(&["/dev/disk/by-path/pci-0000:3b:00.0-nvme-1"]),
                wwn: Some("0x0025388b91b2d1f4".into()),
                serial: Some("PD-NVME-0001".into()),
                model: Some("QEMU NVMe Ctrl".into()),
                size_bytes: 4_194_304 * 512,
                rotational: Some(false),
                transport: Some("nvme".into()),
                ..disk("nvme0n1", rustix::fs::makedev(259, 0))
            }
        );
        let head = find(&disks, "nvme1n1");
        assert_eq!(head.by_path, ["/dev/disk/by-path/pci-0000:00:05.0-nvme-1"]);
        assert_eq!(
            head.by_id[0],
            "/dev/disk/by-id/nvme-nvme.1b36-50442d4e564d452d30303032-51454d55204e564d65204374726c-00000001"
        );
        assert_eq!((head.wwn.as_deref(), head.serial.as_deref()), (None, Some("PD-NVME-0002")), "no EUI, no WWN");
    }

    #[test]
    fn a_virtio_disk_and_a_usb_stick() {
        let disks = read_machine();
        assert_eq!(
            *find(&disks, "vda"),
            Disk {
                by_id: strings(&["/dev/disk/by-id/virtio-PD-VIRTIO-0001"]),
                by_path: strings(&["/dev/disk/by-path/pci-0000:00:02.0", "/dev/disk/by-path/virtio-pci-0000:00:02.0"]),
                serial: Some("PD-VIRTIO-0001".into()),
                size_bytes: 1 << 30,
                rotational: Some(true),
                transport: Some("virtio".into()),
                ..disk("vda", rustix::fs::makedev(253, 0))
            }
        );
        assert_eq!(
            *find(&disks, "sdc"),
            Disk {
                by_id: strings(&["/dev/disk/by-id/usb-SanDisk_Cruzer_Blade_0123456789AB-0:0"]),
                by_path: strings(&["/dev/disk/by-path/pci-0000:00:14.0-usb-0:1:1.0-scsi-0:0:0:0"]),
                serial: Some("0123456789AB".into()),
                model: Some("Cruzer Blade".into()),
                vendor: Some("SanDisk".into()),
                size_bytes: 31_266_816 * 512,
                rotational: Some(true),
                removable: true,
                transport: Some("usb".into()),
                ..disk("sdc", rustix::fs::makedev(8, 32))
            }
        );
    }

    #[test]
    fn sas_disks_on_a_phy_and_behind_an_expander() {
        let disks = read_machine();
        let direct = find(&disks, "sdd");
        assert_eq!(direct.by_path, ["/dev/disk/by-path/pci-0000:81:00.0-sas-phy2-lun-0"]);
        assert_eq!(direct.by_id, ["/dev/disk/by-id/scsi-SSEAGATE_ST1200MM0009_Z4009XYZ"], "page 0x80 alone");
        assert_eq!((direct.serial.as_deref(), direct.transport.as_deref()), (Some("Z4009XYZ"), Some("sas")));
        let behind = find(&disks, "sde");
        assert_eq!(behind.by_path, ["/dev/disk/by-path/pci-0000:81:00.0-sas-exp0x500605b0000272bf-phy5-lun-0"]);
        assert_eq!((behind.by_id.len(), behind.serial.as_deref()), (0, None), "no VPD pages, no names");
        let sata = find(&disks, "sdf");
        assert_eq!(sata.by_path, ["/dev/disk/by-path/pci-0000:81:00.0-sas-phy3-lun-0"]);
        assert_eq!(sata.by_id, Vec::<String>::new(), "not scsi_id's names: udev would ask the drive");
        assert_eq!((sata.vendor.as_deref(), sata.transport.as_deref()), (Some("ATA"), Some("sas")));
    }

    /// 64 SCSI disks on one controller, each with its VPD pages (the budget of issue 29 #7 is
    /// for as many).
    pub fn sixty_four_disks() -> Tree {
        scsi_disks(64)
    }

    /// `count` SCSI disks on one controller (a JBOD shelf behind an HBA), each with its serial
    /// (`PD-DISK-0000`...) and WWN (`0x5000c50015ea` and the disk's number in 4 hex digits) in
    /// its VPD pages, named and numbered as sd names and numbers them.
    pub fn scsi_disks(count: u32) -> Tree {
        let tree = Tree::new();
        tree.device("pci0000:00/0000:00:03.0", Some("pci"), None);
        tree.device("pci0000:00/0000:00:03.0/virtio2", Some("virtio"), None);
        for n in 0..count {
            let device = tree.scsi("pci0000:00/0000:00:03.0/virtio2", "", [0, 0, n, 0], "QEMU", "QEMU HARDDISK");
            let serial = format!("PD-DISK-{n:04}");
            let naa = [0x50, 0x00, 0xc5, 0x00, 0x15, 0xea, (n >> 8) as u8, n as u8];
            tree.file(&format!("devices/{device}/vpd_pg83"), page_83(&[(2, 0, serial.as_bytes()), (1, 3, &naa)]));
            tree.file(&format!("devices/{device}/vpd_pg80"), page_80(serial.as_bytes()));
            let name = format!("sd{}", disk_letters(n));
            tree.block(&format!("{device}/block/{name}"), &sd_dev(n), 2_097_152, Some(&device));
        }
        tree
    }

    /// `a`..`z`, `aa`..`zz`, `aaa`.. as the kernel names SCSI disks (`sd_format_disk_name`).
    fn disk_letters(mut n: u32) -> String {
        let mut letters = Vec::new();
        loop {
            letters.push(b'a' + (n % 26) as u8);
            match (n / 26).checked_sub(1) {
                Some(rest) => n = rest,
                None => break,
            }
        }
        letters.iter().rev().map(|&b| char::from(b)).collect()
    }

    /// The number of the `n`th SCSI disk as sd gives it: 16 minors a disk in sd's 16 majors,
    /// then the minors above 255 (`sd_probe`).
    fn sd_dev(n: u32) -> String {
        const MAJORS: [u32; 16] = [8, 65, 66, 67, 68, 69, 70, 71, 128, 129, 130, 131, 132, 133, 134, 135];
        format!("{}:{}", MAJORS[(n as usize & 0xf0) >> 4], (n & 0xf) << 4 | (n & 0xfff00))
    }

    /// Not a test: `cargo xtask bench` builds its machine of 64 disks with this, into the
    /// directory `PROVISION_DISPATCHER_FAKE_SYSFS` names.
    #[test]
    #[ignore = "a fixture for cargo xtask bench"]
    fn sixty_four_disks_for_the_bench() {
        let Some(dest) = std::env::var_os("PROVISION_DISPATCHER_FAKE_SYSFS") else { return };
        let tree = sixty_four_disks();
        let copied = std::process::Command::new("cp").arg("-a").arg(tree.root()).arg(&dest).status().unwrap();
        assert!(copied.success());
    }

    #[test]
    fn a_disk_alone_reads_as_among_all() {
        for tree in [machine(), sixty_four_disks()] {
            // Read on several threads where there are many.
            let all = read(tree.root()).unwrap();
            assert!(all.len() >= 3);
            for disk in &all {
                assert_eq!(read_one(tree.root(), disk.dev).as_ref(), Some(disk), "{}", disk.name);
            }
            // Without the kernel's dev/block links: found by each disk's dev.
            fs::remove_dir_all(tree.root().join("dev/block")).unwrap();
            for disk in &all {
                assert_eq!(read_one(tree.root(), disk.dev).as_ref(), Some(disk), "{}", disk.name);
            }
            assert_eq!(read_one(tree.root(), rustix::fs::makedev(7, 0)), None, "no disk has that number");
        }
    }

    #[test]
    fn sixty_four_disks_each_with_its_own_names() {
        assert_eq!([disk_letters(0), disk_letters(25), disk_letters(26), disk_letters(701)], ["a", "z", "aa", "zz"]);
        assert_eq!([disk_letters(702), disk_letters(3999)], ["aaa", "ewv"]);
        assert_eq!(
            [sd_dev(0), sd_dev(17), sd_dev(255), sd_dev(256), sd_dev(3999)],
            ["8:0", "65:16", "135:240", "8:256", "129:4080"]
        );
        let disks = read(sixty_four_disks().root()).unwrap();
        assert_eq!(disks.len(), 64);
        for (n, disk) in disks.iter().enumerate() {
            assert_eq!(disk.name, format!("sd{}", disk_letters(n as u32)));
            assert_eq!(disk.serial, Some(format!("PD-DISK-{n:04}")));
            assert_eq!(disk.by_path, [format!("/dev/disk/by-path/pci-0000:00:03.0-scsi-0:0:{n}:0")]);
            assert_eq!(disk.by_id[1], format!("/dev/disk/by-id/wwn-0x5000c50015ea00{n:02x}"));
        }
    }

    /// What is at each path on a machine whose udev made some links: `sdb`'s WWN link, a stale
    /// link of another disk's serial that now points at `sdc`, a link to a partition.
    fn udev_links(path: &Path) -> io::Result<Node> {
        let dev = |major, minor| Ok(Node::Block(rustix::fs::makedev(major, minor)));
        match path.to_str().unwrap() {
            "/dev/sdb" | "/dev/disk/by-id/wwn-0x5000c50015ea71ad" => dev(8, 16),
            "/dev/disk/by-id/scsi-35000c50015ea71ad" => dev(8, 32),
            "/dev/disk/by-id/ata-Samsung_SSD_860_EVO_500GB_S3Z1NB0K123456X-part1" | "/dev/sda1" => dev(8, 1),
            "/dev/disk/by-id/ata-ST4000NM0035_ZC1ABCDE" => dev(8, 0),
            "/dev/null" => Ok(Node::Other),
            _ => Err(io::ErrorKind::NotFound.into()),
        }
    }

    #[test]
    fn names_resolve_without_udev_and_must_agree_with_it() {
        let disks = read_machine();
        let resolve = |path: &str| super::resolve(path, &disks, &udev_links).map(|d| d.name.as_str());
        let nothing = |_: &Path| -> io::Result<Node> { Err(io::ErrorKind::NotFound.into()) };
        let inventory = |path: &str| super::resolve(path, &disks, &nothing).map(|d| d.name.as_str());
        // By kernel name, by-id and by-path, with or without udev's link.
        assert_eq!(resolve("/dev/sdb"), Ok("sdb"));
        assert_eq!(resolve("/dev/disk/by-id/wwn-0x5000c50015ea71ad"), Ok("sdb"), "the link agrees");
        assert_eq!(resolve("/dev/disk/by-id/nvme-eui.0025388b91b2d1f4"), Ok("nvme0n1"), "no link yet");
        assert_eq!(resolve("/dev/disk/by-path/pci-0000:00:1f.2-ata-1"), Ok("sda"));
        assert_eq!(inventory("/dev/disk/by-id/virtio-PD-VIRTIO-0001"), Ok("vda"));
        assert_eq!(inventory("/dev/disk/by-path/virtio-pci-0000:00:02.0"), Ok("vda"));
        // A link to another device than the identity names: refused, whichever is right.
        assert_eq!(resolve("/dev/disk/by-id/scsi-35000c50015ea71ad"), Err(Unresolved::Disagrees));
        // A link this identity does not give, to a whole disk: refused; to a partition: no disk.
        assert_eq!(resolve("/dev/disk/by-id/ata-ST4000NM0035_ZC1ABCDE"), Err(Unresolved::NotDerived));
        let partition = "/dev/disk/by-id/ata-Samsung_SSD_860_EVO_500GB_S3Z1NB0K123456X-part1";
        assert_eq!(resolve(partition), Err(Unresolved::NotWholeDisk));
        assert_eq!(resolve("/dev/sda1"), Err(Unresolved::NotWholeDisk));
        assert_eq!(resolve("/dev/null"), Err(Unresolved::NotBlockDevice));
        assert_eq!(resolve("/dev/sdz"), Err(Unresolved::NotFound));
        assert_eq!(inventory("/dev/sr0"), Err(Unresolved::NotFound), "a CD drive is no disk");
        assert_eq!(resolve("/dev/disk/by-id/wwn-0x5000c50015ea71ae"), Err(Unresolved::NotFound));
        // Other forms.
        for path in ["/dev/disk/by-label/TASK", "/dev/disk/by-id/", "/dev/disk/by-id/..", "/dev/mapper/root", "sdb"] {
            assert_eq!(resolve(path), Err(Unresolved::Unsupported), "{path}");
        }
    }

    #[test]
    fn a_name_two_disks_carry_names_neither() {
        let mut disks = read_machine();
        let twin = Disk { name: "sdg".into(), dev: rustix::fs::makedev(8, 96), ..find(&disks, "sdb").clone() };
        disks.push(twin);
        let nothing = |_: &Path| -> io::Result<Node> { Err(io::ErrorKind::NotFound.into()) };
        let resolved = super::resolve("/dev/disk/by-id/wwn-0x5000c50015ea71ad", &disks, &nothing);
        assert_eq!(resolved, Err(Unresolved::Ambiguous));
        assert_eq!(super::resolve("/dev/sdg", &disks, &nothing).map(|d| d.dev), Ok(rustix::fs::makedev(8, 96)));
    }
}
