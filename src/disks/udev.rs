//! The names udev gives a whole disk under `/dev/disk/by-id` and `/dev/disk/by-path`, derived
//! from what the kernel shows in sysfs, one function per bus, as systemd 252's udev (Debian 12,
//! the image's) derives them in `60-persistent-storage.rules` and its helpers:
//!
//! | bus | by-id | helper |
//! |---|---|---|
//! | SCSI, SAS | `scsi-<ID_SERIAL>`, `wwn-0x<NAA>` | `scsi_id`: VPD page 0x83's best designator, else page 0x80 ([`scsi_id`]) |
//! | SATA (vendor `ATA`) | `ata-<MODEL>_<SERIAL>`, `wwn-0x<NAA 5>` | `ata_id`: the drive's IDENTIFY data ([`ata_id`]) |
//! | NVMe | `nvme-<wwid>`, `nvme-<MODEL>_<SERIAL>`, `nvme-<MODEL>_<SERIAL>_<NSID>` | the rules alone ([`nvme_links`]) |
//! | virtio | `virtio-<serial>` | the rules alone ([`virtio_links`]) |
//! | USB | `usb-<VENDOR>_<MODEL>_<SERIAL>-<T>:<L>` | `usb_id` ([`usb_id`]) |
//! | SD/eMMC | `mmc-<NAME>_<SERIAL>` | the rules alone ([`mmc_links`]) |
//!
//! and by-path from `path_id` ([`path_id`]): `pci-<PCI>-nvme-<NSID>`, `pci-<PCI>-scsi-H:C:T:L`,
//! `pci-<PCI>-ata-<PORT>.<T>` and its older form `pci-<PCI>-ata-<PORT>`,
//! `pci-<PCI>-sas-[exp<ADDR>-]phy<N>-lun-<L>`, `pci-<PCI>-fc-<WWPN>-lun-<L>`,
//! `pci-<PCI>-usb-0:<PORT>-scsi-0:0:0:0`, `pci-<PCI>` and `virtio-pci-<PCI>` (virtio).
//!
//! What sysfs alone cannot give, and is therefore not derived (never guessed):
//! - `ata_id` asks the drive with an ioctl. Its answer is also in the kernel's copy of page
//!   0x83, where SAT (and libata, which is SAT) puts the T10 designator `ATA` + the 40-byte
//!   model + the 20-byte serial, and the NAA designator holds the IDENTIFY WWN: the `ata-` and
//!   `wwn-` names are read from there. A SAT layer whose page 0x83 lacks the T10 designator
//!   gives no `ata-` name here.
//! - On USB, udev also runs `ata_id` on non-removable disks (SATA disks in enclosures): when
//!   the bridge passes ATA commands through, udev adds `ata-` and `wwn-` names that only the
//!   drive can tell. Only the `usb-` name is derived.
//! - by-path of iSCSI, Hyper-V, FireWire, cciss, bcma and s390 devices: none is derived.
//! - `/etc/scsi_id.config` (which may make `scsi_id` use another page) is not read, and
//!   links that other packages' rules add (sg3-utils' `scsi-SATA_…`, multipath) are not made.
//! - udev newer than 252 adds names this does not: `pci-…-usbv<N>-…` (the USB revision) and
//!   the NVMe name without escaping.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::{devpath, resolve_link, text};

/// What udev's `udev_replace_chars` keeps besides ASCII letters and digits.
const PLAIN: &[u8] = b"#+-.:=@_";
/// What a `$attr{...}` substitution keeps besides [`PLAIN`] (udev's `UDEV_ALLOWED_CHARS_INPUT`).
const ALLOWED_INPUT: &[u8] = b"/ $%?,";
/// The page length `scsi_id` asks for: what lies beyond, it never sees.
const SCSI_INQ_BUFF_LEN: usize = 254;
/// `scsi_id`'s serial buffer, prefixes included.
const MAX_SERIAL_LEN: usize = 256;
const VENDOR_LENGTH: usize = 8;
const MODEL_LENGTH: usize = 16;
/// C's `isspace` in the C locale.
const SPACE: &[u8] = b" \t\n\x0b\x0c\r";
/// systemd's `WHITESPACE`, which `udev_replace_whitespace` skips at the start.
const LEADING_SPACE: &[u8] = b" \t\n\r";

/// udev's `udev_replace_whitespace`: white space at the start dropped, each run of it further
/// on made one `_` (a run at the end dropped); at most `max` bytes read, and a NUL ends the
/// string as in C.
pub(super) fn replace_whitespace(text: &[u8], max: usize) -> Vec<u8> {
    let text = &c_str(text)[..c_str(text).len().min(max)];
    let start = text.iter().take_while(|b| LEADING_SPACE.contains(b)).count();
    let mut out = Vec::with_capacity(text.len());
    let mut in_space = false;
    for &b in &text[start..] {
        if SPACE.contains(&b) {
            in_space = true;
            continue;
        }
        if in_space {
            out.push(b'_');
            in_space = false;
        }
        out.push(b);
    }
    out
}

/// udev's `udev_replace_chars`: ASCII letters, digits, [`PLAIN`], `allow`, `\x` escapes and
/// valid UTF-8 characters stay; white space becomes a space where `allow` has one; anything
/// else becomes `_`.
pub(super) fn replace_chars(text: &[u8], allow: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    let mut i = 0;
    while i < text.len() {
        let b = text[i];
        if b.is_ascii_alphanumeric() || PLAIN.contains(&b) || allow.contains(&b) {
            out.push(b);
            i += 1;
        } else if b == b'\\' && text.get(i + 1) == Some(&b'x') {
            out.extend_from_slice(b"\\x");
            i += 2;
        } else if let Some(len) = utf8_char_len(&text[i..]) {
            out.extend_from_slice(&text[i..i + len]);
            i += len;
        } else {
            out.push(if SPACE.contains(&b) && allow.contains(&b' ') { b' ' } else { b'_' });
            i += 1;
        }
    }
    out
}

/// The length of the valid multi-byte UTF-8 character `bytes` starts with, as systemd's
/// `utf8_encoded_valid_unichar` judges it (no surrogates, no non-characters).
fn utf8_char_len(bytes: &[u8]) -> Option<usize> {
    let len = match bytes.first()? {
        0xc0..=0xdf => 2,
        0xe0..=0xef => 3,
        0xf0..=0xf7 => 4,
        _ => return None,
    };
    let c = std::str::from_utf8(bytes.get(..len)?).ok()?.chars().next()?;
    let code = u32::from(c);
    let reserved = (0xfdd0..=0xfdef).contains(&code) || code & 0xfffe == 0xfffe;
    (!reserved).then_some(len)
}

/// The bytes before the first NUL: where C reads a string to.
fn c_str(bytes: &[u8]) -> &[u8] {
    bytes.iter().position(|&b| b == 0).map_or(bytes, |end| &bytes[..end])
}

/// A `$attr{...}` value as udev substitutes it: white space at the end dropped, characters
/// outside [`PLAIN`] and [`ALLOWED_INPUT`] made `_`. The rules' `ATTRS{x}=="?*"` asks for
/// this to be non-empty.
fn attr_value(raw: &[u8]) -> Option<Vec<u8>> {
    let raw = c_str(raw);
    let end = raw.iter().rposition(|b| !SPACE.contains(b)).map_or(0, |last| last + 1);
    let value = replace_chars(&raw[..end], ALLOWED_INPUT);
    (!value.is_empty()).then_some(value)
}

/// How a rule line escapes its `SYMLINK+=` (its `OPTIONS="string_escape=..."`).
#[derive(Clone, Copy)]
enum Escape {
    /// The default: `/` and spaces stay (a space would separate two links).
    Unset,
    /// `string_escape=replace`: only `/` stays.
    Replace,
}

/// The link `SYMLINK+="disk/<dir>/<name>"` makes, `name` holding the values substituted into
/// it, each already through [`replace_whitespace`] (as udev does for a link's values).
fn link(dir: &str, name: &[u8], escape: Escape) -> String {
    let allow: &[u8] = match escape {
        Escape::Unset => b"/ ",
        Escape::Replace => b"/",
    };
    let name = replace_chars(name, allow);
    // Only a space in the rule's own text could split the link, and no rule here has one.
    let first = name.split(|&b| b == b' ').next().unwrap_or_default();
    format!("/dev/disk/{dir}/{}", String::from_utf8_lossy(first))
}

/// A substituted value, as a link's text takes it.
fn value(raw: &[u8]) -> Vec<u8> {
    replace_whitespace(raw, usize::MAX)
}

fn concat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

/// virtio-blk: `virtio-<serial>`, when the disk has a serial.
pub(super) fn virtio_links(serial: Option<&[u8]>) -> Vec<String> {
    let Some(serial) = serial.and_then(attr_value) else { return Vec::new() };
    vec![link("by-id", &concat(&[b"virtio-", &value(&serial)]), Escape::Unset)]
}

/// NVMe: `nvme-<wwid>` (the kernel's `eui.`, `uuid.` or `nvme.` identifier, as it prints it),
/// then `nvme-<MODEL>_<SERIAL>` and `nvme-<MODEL>_<SERIAL>_<NSID>`, whose every character
/// outside [`PLAIN`] (spaces too, one by one) is `_`.
pub(super) fn nvme_links(
    wwid: Option<&[u8]>,
    model: Option<&[u8]>,
    serial: Option<&[u8]>,
    nsid: Option<&[u8]>,
) -> Vec<String> {
    let mut links = Vec::new();
    if let Some(wwid) = wwid.and_then(attr_value) {
        links.push(link("by-id", &concat(&[b"nvme-", &value(&wwid)]), Escape::Unset));
    }
    let (Some(model), Some(serial)) = (model.and_then(attr_value), serial.and_then(attr_value)) else {
        return links;
    };
    let model_serial = replace_chars(&concat(&[&model, b"_", &serial]), b"");
    links.push(link("by-id", &concat(&[b"nvme-", &value(&model_serial)]), Escape::Replace));
    if let Some(nsid) = nsid.and_then(attr_value) {
        let with_nsid = replace_chars(&concat(&[&model, b"_", &serial, b"_", &nsid]), b"");
        links.push(link("by-id", &concat(&[b"nvme-", &value(&with_nsid)]), Escape::Replace));
    }
    links
}

/// SD/eMMC: `mmc-<NAME>_<SERIAL>`.
pub(super) fn mmc_links(name: Option<&[u8]>, serial: Option<&[u8]>) -> Vec<String> {
    let (Some(name), Some(serial)) = (name.and_then(attr_value), serial.and_then(attr_value)) else {
        return Vec::new();
    };
    vec![link("by-id", &concat(&[b"mmc-", &value(&name), b"_", &value(&serial)]), Escape::Unset)]
}

/// What `scsi_id --export` says of a SCSI disk, from the kernel's copies of its VPD pages.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct ScsiId {
    /// `ID_SERIAL` before its clean-up: the designator's type as a hex digit, then the
    /// designator (page 0x83), or `S` + vendor + model + the unit serial (page 0x80).
    pub serial: Option<Vec<u8>>,
    /// `ID_WWN` without `0x`: the first 16 characters of the NAA designator.
    pub wwn: Option<String>,
    /// `ID_WWN_VENDOR_EXTENSION` without `0x`: the next 16 (NAA 6).
    pub wwn_extension: Option<String>,
}

/// The designators `scsi_id` looks for in page 0x83, best first: (designator type, NAA type,
/// code set). 5 is the target port group, which names no disk and is passed over.
const SEARCH: [(u8, Option<u8>, u8); 13] = {
    const VENDOR_SPECIFIC: u8 = 0;
    const T10_VENDOR: u8 = 1;
    const EUI_64: u8 = 2;
    const NAA: u8 = 3;
    const TARGET_PORT_GROUP: u8 = 5;
    const BINARY: u8 = 1;
    const ASCII: u8 = 2;
    [
        (TARGET_PORT_GROUP, None, BINARY),
        (NAA, Some(6), BINARY),
        (NAA, Some(6), ASCII),
        (NAA, Some(5), BINARY),
        (NAA, Some(5), ASCII),
        (NAA, None, BINARY),
        (NAA, None, ASCII),
        (EUI_64, None, BINARY),
        (EUI_64, None, ASCII),
        (T10_VENDOR, None, BINARY),
        (T10_VENDOR, None, ASCII),
        (VENDOR_SPECIFIC, None, BINARY),
        (VENDOR_SPECIFIC, None, ASCII),
    ]
};

/// `scsi_id`'s identity of a SCSI disk: `vendor` and `model` as sysfs prints the INQUIRY
/// fields (8 and 16 bytes), `page_83` and `page_80` the kernel's copies of the VPD pages, which
/// it keeps for the pages the device lists (as `scsi_id` asks page 0 which to try).
pub(super) fn scsi_id(vendor: &[u8], model: &[u8], page_83: Option<&[u8]>, page_80: Option<&[u8]>) -> ScsiId {
    let vendor_model = (vendor.len() == VENDOR_LENGTH && model.len() == MODEL_LENGTH).then(|| concat(&[vendor, model]));
    if let Some(found) = page_83.and_then(|page| page_83_id(&inquiry(page), vendor_model.as_deref())) {
        return found;
    }
    let serial = page_80.and_then(|page| {
        let page = inquiry(page);
        let len = usize::from(page[3]);
        if page[1] != 0x80 || 1 + VENDOR_LENGTH + MODEL_LENGTH + len > MAX_SERIAL_LEN {
            return None;
        }
        Some(concat(&[b"S", vendor_model.as_deref()?, &page[4..(4 + len).min(SCSI_INQ_BUFF_LEN)]]))
    });
    ScsiId { serial, ..ScsiId::default() }
}

/// The page as `scsi_id` receives it: its first [`SCSI_INQ_BUFF_LEN`] bytes, zero-padded.
fn inquiry(page: &[u8]) -> [u8; SCSI_INQ_BUFF_LEN] {
    let mut buffer = [0; SCSI_INQ_BUFF_LEN];
    let n = page.len().min(SCSI_INQ_BUFF_LEN);
    buffer[..n].copy_from_slice(&page[..n]);
    buffer
}

fn page_83_id(page: &[u8; SCSI_INQ_BUFF_LEN], vendor_model: Option<&[u8]>) -> Option<ScsiId> {
    if page[1] != 0x83 {
        return None;
    }
    // A SCSI-2 page (old EMC Symmetrix): no designators, the identifier follows the header.
    if page[6] != 0 {
        let mut serial = b"3".to_vec();
        for &b in page[4..].iter().take(usize::from(page[3])) {
            if serial.len() >= MAX_SERIAL_LEN - 3 {
                break;
            }
            serial.extend_from_slice(hex_byte(b).as_bytes());
        }
        return Some(ScsiId { serial: Some(serial), ..ScsiId::default() });
    }
    let end = (usize::from(page[2]) << 8) + usize::from(page[3]) + 3;
    for search in SEARCH {
        let mut at = 4;
        while at <= end && at + 4 <= page.len() {
            if let Some(found) = designator(&page[at..], search, vendor_model) {
                return Some(found);
            }
            at += usize::from(page[at + 3]) + 4;
        }
    }
    None
}

/// One designator of page 0x83 against one entry of [`SEARCH`] (`scsi_id`'s
/// `check_fill_0x83_id`).
fn designator(d: &[u8], (kind, naa, code_set): (u8, Option<u8>, u8), vendor_model: Option<&[u8]>) -> Option<ScsiId> {
    const TARGET_PORT_GROUP: u8 = 5;
    const ASCII: u8 = 2;
    // Associated with the logical unit (0), or the target port (1) for the port group only.
    match d[1] & 0x30 {
        0x10 if kind == TARGET_PORT_GROUP => {}
        0x00 => {}
        _ => return None,
    }
    let at = |i: usize| d.get(i).copied().unwrap_or(0);
    if d[1] & 0x0f != kind || naa.is_some_and(|naa| naa != at(4) >> 4) || d[0] & 0x0f != code_set {
        return None;
    }
    let len = usize::from(d[3]);
    let mut need = if code_set == ASCII { len } else { len * 2 } + 2;
    if kind == 0 {
        need += VENDOR_LENGTH + MODEL_LENGTH;
    }
    if need > MAX_SERIAL_LEN || kind == TARGET_PORT_GROUP {
        return None;
    }
    let mut serial = vec![b"0123456789abcdef"[usize::from(kind)]];
    if kind == 0 {
        // Vendor-specific designators are unique only within a vendor's model.
        serial.extend_from_slice(vendor_model?);
    }
    let start = serial.len();
    let id = (4..4 + len).map(at);
    if code_set == ASCII {
        serial.extend(id);
    } else {
        id.for_each(|b| serial.extend_from_slice(hex_byte(b).as_bytes()));
    }
    let mut found = ScsiId::default();
    if kind == 3 {
        let hex = c_str(&serial[start..]);
        let text = |range: std::ops::Range<usize>| {
            let part = hex.get(range.start.min(hex.len())..range.end.min(hex.len())).unwrap_or_default();
            (!part.is_empty()).then(|| String::from_utf8_lossy(part).into_owned())
        };
        found.wwn = text(0..16);
        found.wwn_extension = text(16..32);
    }
    found.serial = Some(serial);
    Some(found)
}

fn hex_byte(b: u8) -> String {
    format!("{b:02x}")
}

/// `scsi-<ID_SERIAL>` and `wwn-0x<ID_WWN_WITH_EXTENSION>`.
pub(super) fn scsi_links(id: &ScsiId) -> Vec<String> {
    let mut links = Vec::new();
    if let Some(serial) = &id.serial {
        let serial = replace_chars(&replace_whitespace(serial, MAX_SERIAL_LEN - 1), b"");
        if !serial.is_empty() {
            links.push(link("by-id", &concat(&[b"scsi-", &serial]), Escape::Unset));
        }
    }
    if let Some(wwn) = &id.wwn {
        let extension = id.wwn_extension.as_deref().unwrap_or_default();
        links.push(link("by-id", format!("wwn-0x{wwn}{extension}").as_bytes(), Escape::Unset));
    }
    links
}

/// What `ata_id` reads from a SATA drive's IDENTIFY data, found in page 0x83 as SAT lays it
/// out: the T10 designator `ATA     ` + model (40 bytes) + serial (20), and the NAA designator
/// with IDENTIFY's words 108 to 111.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct AtaId {
    pub model: Vec<u8>,
    pub serial: Vec<u8>,
    /// The WWN, when it is an NAA 5 (IEEE registered) name: the only kind `ata_id` reports.
    pub wwn: Option<u64>,
}

pub(super) fn ata_id(page_83: &[u8]) -> Option<AtaId> {
    if page_83.get(1) != Some(&0x83) {
        return None;
    }
    let end = (4 + (usize::from(*page_83.get(2)?) << 8) + usize::from(*page_83.get(3)?)).min(page_83.len());
    let (mut names, mut wwn) = (None, None);
    let mut at = 4;
    while at + 4 <= end {
        let (head, len) = (&page_83[at..at + 4], usize::from(page_83[at + 3]));
        let Some(body) = page_83.get(at + 4..at + 4 + len) else { break };
        // Associated with the logical unit; code set and designator type.
        match (head[1] & 0x30, head[0] & 0x0f, head[1] & 0x0f) {
            (0, 2, 1) if len == 68 && body.starts_with(b"ATA     ") => names = Some((&body[8..48], &body[48..68])),
            (0, 1, 3) if len == 8 && body[0] >> 4 == 5 => {
                wwn = Some(body.iter().fold(0u64, |n, &b| n << 8 | u64::from(b)));
            }
            _ => {}
        }
        at += 4 + len;
    }
    let (model, serial) = names?;
    Some(AtaId { model: model.to_vec(), serial: serial.to_vec(), wwn })
}

/// `ata-<MODEL>_<SERIAL>` (`ata-<MODEL>` without a serial) and `wwn-0x<WWN>`.
pub(super) fn ata_links(id: &AtaId) -> Vec<String> {
    let model = replace_chars(&replace_whitespace(&id.model, 40), b"");
    let serial = replace_chars(&replace_whitespace(&id.serial, 20), b"");
    let mut links = Vec::new();
    let name = if serial.is_empty() { model } else { concat(&[&model, b"_", &serial]) };
    if !name.is_empty() {
        links.push(link("by-id", &concat(&[b"ata-", &name]), Escape::Unset));
    }
    if let Some(wwn) = id.wwn {
        links.push(link("by-id", format!("wwn-0x{wwn:x}").as_bytes(), Escape::Unset));
    }
    links
}

/// What `usb_id` reads of a USB disk.
pub(super) struct UsbId {
    /// The SCSI INQUIRY's vendor and model for mass storage speaking SCSI or ATAPI, else the
    /// USB device's manufacturer and product strings (or its vendor and product ids).
    pub vendor: Vec<u8>,
    pub model: Vec<u8>,
    /// The USB device's serial string.
    pub serial: Option<Vec<u8>>,
    /// The SCSI target and LUN, for mass storage speaking SCSI or ATAPI.
    pub target_lun: Option<(u32, u32)>,
}

/// `usb-<VENDOR>_<MODEL>[_<SERIAL>][-<TARGET>:<LUN>]`. A serial with a character outside
/// printable ASCII, or a comma, is left out (as Windows does, says `usb_id`).
pub(super) fn usb_links(id: &UsbId) -> Vec<String> {
    let clean = |text: &[u8], max: usize| replace_chars(&replace_whitespace(text, max), b"");
    let mut name = concat(&[b"usb-", &clean(&id.vendor, 63), b"_", &clean(&id.model, 63)]);
    let serial = id.serial.as_deref().map(c_str).filter(|s| s.iter().all(|&b| (0x20..=0x7f).contains(&b) && b != b','));
    if let Some(serial) = serial.map(|s| clean(s, 511)).filter(|s| !s.is_empty()) {
        name.extend_from_slice(&concat(&[b"_", &serial]));
    }
    if let Some((target, lun)) = id.target_lun {
        name.extend_from_slice(format!("-{target}:{lun}").as_bytes());
    }
    vec![link("by-id", &name, Escape::Unset)]
}

/// One device on the way from a disk up to `/sys/devices`.
#[derive(Debug, Clone)]
pub(super) struct Ancestor {
    pub dir: PathBuf,
    /// The bus or class it belongs to (its `subsystem` link), if any.
    pub subsystem: Option<String>,
}

impl Ancestor {
    pub fn name(&self) -> &str {
        self.dir.file_name().and_then(|n| n.to_str()).unwrap_or_default()
    }

    fn is(&self, subsystem: &str) -> bool {
        self.subsystem.as_deref() == Some(subsystem)
    }

    /// A SCSI host (`host<N>`) or target (`target<H>:<C>:<T>`), told by the kernel's name.
    fn is_scsi(&self, kind: &str) -> bool {
        self.is("scsi") && self.name().starts_with(kind)
    }
}

/// What one reading of the machine's disks learnt of the devices many disks share (a
/// controller's bus, its first SCSI host): read once, not once per disk.
#[derive(Default)]
pub(super) struct Known {
    subsystems: HashMap<PathBuf, Option<String>>,
    /// For each controller, its SCSI hosts' first number (`None` inside: it has none; `None`:
    /// it cannot be listed).
    first_hosts: HashMap<PathBuf, Option<Option<u32>>>,
}

/// `dir` and each directory above it, up to `devices/` of the sysfs root. The disk's own
/// subsystem (`block`; for NVMe multipath, the controller's) is not read: the walk starts above.
pub(super) fn chain(sysfs: &Path, dir: &Path, known: &mut Known) -> Vec<Ancestor> {
    let top = sysfs.join("devices");
    dir.ancestors()
        .take_while(|d| d.starts_with(&top) && *d != top)
        .enumerate()
        .map(|(i, d)| {
            let read = || {
                let subsystem = std::fs::read_link(d.join("subsystem")).ok()?;
                subsystem.file_name()?.to_str().map(str::to_owned)
            };
            // The disk itself, and the class folder `block/` it sits in, are no devices of a
            // bus: no link to read (64 disks, 64 failed reads).
            let subsystem = if i == 0 || d.file_name().is_some_and(|n| n == "block") {
                None
            } else {
                known.subsystems.entry(d.to_owned()).or_insert_with(read).clone()
            };
            Ancestor { dir: d.to_owned(), subsystem }
        })
        .collect()
}

/// A SCSI device's `host:channel:target:lun` name.
pub(super) fn hctl(name: &str) -> Option<[u32; 4]> {
    let mut parts = name.split(':').map(|p| p.parse::<u32>().ok());
    let hctl = [parts.next()??, parts.next()??, parts.next()??, parts.next()??];
    parts.next().is_none().then_some(hctl)
}

/// `ID_PATH` and `ID_PATH_ATA_COMPAT`.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct IdPath {
    pub path: String,
    pub ata_compat: Option<String>,
}

/// `path_id`: the way from the disk to its controller, walking up `chain` (the disk's
/// [`chain`]), each bus adding its part in front. `None` where udev gives no path, and where
/// this does not derive it (see the module's list).
pub(super) fn path_id(sysfs: &Path, chain: &[Ancestor], known: &mut Known) -> Option<IdPath> {
    let disk = chain.first()?;
    let devpath = devpath(sysfs, &disk.dir);
    let nvme_head = chain.iter().any(|a| a.is("nvme-subsystem"));
    if devpath.contains("/virtual/") && !nvme_head {
        return None;
    }
    let mut walk =
        Walk { sysfs, known, chain: chain.to_vec(), path: Vec::new(), compat: None, parent: false, transport: false };
    let mut i = 1;
    while i < walk.chain.len() {
        i = walk.step(i, disk)? + 1;
    }
    if walk.path.is_empty() || !walk.parent || !walk.transport {
        return None;
    }
    let join = |parts: &[String]| parts.iter().rev().cloned().collect::<Vec<_>>().join("-");
    Some(IdPath { path: join(&walk.path), ata_compat: walk.compat.as_deref().map(join) })
}

/// `path_id`'s walk: the parts found so far (last first), the ATA compat path once an ATA
/// port was met, and whether a known parent and a known transport were seen.
struct Walk<'a> {
    sysfs: &'a Path,
    known: &'a mut Known,
    chain: Vec<Ancestor>,
    path: Vec<String>,
    compat: Option<Vec<String>>,
    parent: bool,
    transport: bool,
}

/// Where the walk goes on: after this index of the chain, or nowhere (`Stop`: the path is what
/// was found so far).
enum Next {
    After(usize),
    Stop,
}

impl Walk<'_> {
    /// One device of the chain; the index the walk goes on after, `None` for no path at all.
    fn step(&mut self, i: usize, disk: &Ancestor) -> Option<usize> {
        let here = self.chain[i].clone();
        let name = here.name().to_owned();
        let next = match here.subsystem.as_deref() {
            Some("scsi") => {
                self.transport = true;
                self.scsi(i)?
            }
            Some("usb") => {
                self.transport = true;
                match name.split_once('-') {
                    Some((_, port)) => {
                        let top = self.skip(i, "usb");
                        self.path.push(format!("usb-0:{port}"));
                        Next::After(top)
                    }
                    None => Next::After(i),
                }
            }
            Some(bus @ ("pci" | "platform" | "amba" | "acpi" | "xen" | "scm" | "ccw" | "ccwgroup" | "iucv")) => {
                self.push_both(format!("{bus}-{name}"));
                self.parent = true;
                self.transport |= !matches!(bus, "pci" | "acpi" | "xen");
                Next::After(self.skip(i, bus))
            }
            Some("virtio") => {
                self.transport = true;
                Next::After(self.skip(i, "virtio"))
            }
            Some(bus @ ("nvme" | "nvme-subsystem")) => match text(&disk.dir.join("nsid")) {
                Some(nsid) => {
                    self.push_both(format!("nvme-{nsid}"));
                    let mut at = i;
                    if bus == "nvme-subsystem" {
                        // Native multipath: the controller is on another branch of sysfs.
                        let controller = self.real_nvme_parent(disk.name())?;
                        self.chain = chain(self.sysfs, &controller, self.known);
                        at = 0;
                    }
                    self.parent = true;
                    self.transport = true;
                    Next::After(self.skip(at, "nvme"))
                }
                None => Next::After(i),
            },
            Some("cciss" | "bcma" | "ap" | "serio" | "spi") => return None,
            _ => Next::After(i),
        };
        match next {
            Next::After(at) => Some(at),
            Next::Stop => Some(self.chain.len()),
        }
    }

    /// The last device up the chain from `i` that is still on `bus`.
    fn skip(&self, i: usize, bus: &str) -> usize {
        let mut at = i;
        while self.chain.get(at + 1).is_some_and(|a| a.is(bus)) {
            at += 1;
        }
        at
    }

    fn push_both(&mut self, part: String) {
        if let Some(compat) = &mut self.compat {
            compat.push(part.clone());
        }
        self.path.push(part);
    }

    /// The controller `nvme<N>` of the namespace head `nvme<N>n<M>`, unless it is virtual
    /// (NVMe over fabrics: no path).
    fn real_nvme_parent(&self, name: &str) -> Option<PathBuf> {
        let digits = name.strip_prefix("nvme")?.bytes().take_while(u8::is_ascii_digit).count();
        let class = self.sysfs.join("class/nvme").join(&name[..4 + digits]);
        let dir = resolve_link(&class)?;
        (!devpath(self.sysfs, &dir).starts_with("/devices/virtual/")).then_some(dir)
    }

    fn scsi(&mut self, i: usize) -> Option<Next> {
        let here = &self.chain[i];
        let Some([host, bus, target, lun]) = hctl(here.name()) else { return Some(Next::After(i)) };
        let devpath = devpath(self.sysfs, &here.dir);
        // FireWire (SBP-2) disks are under a `fw<N>` device.
        if devpath.contains("/fw") && here.dir.join("ieee1394_id").exists() {
            return None;
        }
        let lun_part = if lun < 256 {
            format!("lun-{lun}")
        } else {
            format!("lun-0x{:04x}{:04x}00000000", lun & 0xffff, (lun >> 16) & 0xffff)
        };
        if devpath.contains("/rport-") {
            self.parent = true;
            let Some(port) = self.above(i, |a| a.is_scsi("target")).and_then(|t| {
                text(&self.sysfs.join("class/fc_transport").join(self.chain[t].name()).join("port_name"))
            }) else {
                return Some(Next::Stop);
            };
            self.path.push(format!("fc-{port}-{lun_part}"));
            Some(Next::After(i))
        } else if devpath.contains("/end_device-") {
            self.parent = true;
            match self.sas(i, &lun_part) {
                Some(part) => {
                    self.path.push(part);
                    Some(Next::After(i))
                }
                None => Some(Next::Stop),
            }
        } else if devpath.contains("/session") || devpath.contains("/vmbus_") || devpath.contains("/VMBUS") {
            None
        } else if devpath.contains("/ata") {
            let Some(port) = self.above(i, |a| a.is_scsi("host")).and_then(|h| {
                let port = self.chain.get(h + 1)?;
                text(&self.sysfs.join("class/ata_port").join(port.name()).join("port_no"))
            }) else {
                return Some(Next::Stop);
            };
            // Behind a port multiplier the bus is its port; else the target tells master from slave.
            self.path.push(if bus != 0 { format!("ata-{port}.{bus}.0") } else { format!("ata-{port}.{target}") });
            self.compat = Some(vec![format!("ata-{port}")]);
            Some(Next::After(i))
        } else {
            let Some(h) = self.above(i, |a| a.is_scsi("host")) else { return Some(Next::Stop) };
            // Host numbers count every host of the machine: rebased on the first host of
            // the same controller, as udev does (and warns is fragile).
            let controller = self.chain[h].dir.parent()?.to_owned();
            let first = self.known.first_hosts.entry(controller).or_insert_with_key(|dir| first_host(dir));
            let Some(base) = *first else { return Some(Next::Stop) };
            if let Some(base) = base {
                let host = i64::from(host) - i64::from(base);
                self.path.push(format!("scsi-{host}:{bus}:{target}:{lun}"));
            }
            Some(Next::After(h))
        }
    }

    /// SAS: `sas-phy<N>-lun-<L>` on the HBA's own phy, `sas-exp<ADDR>-phy<N>-lun-<L>` behind an
    /// expander, `sas-<ADDR>-lun-<L>` on a wide port.
    fn sas(&self, i: usize, lun: &str) -> Option<String> {
        let t = self.above(i, |a| a.is_scsi("target"))?;
        let class = |kind: &str, at: usize| Some(self.sysfs.join("class").join(kind).join(self.chain.get(at)?.name()));
        let end_device = class("sas_device", t + 1)?;
        let phys = text(&class("sas_port", t + 2)?.join("num_phys"))?;
        if !end_device.exists() {
            return None;
        }
        if phys != "1" {
            return Some(format!("sas-{}-{lun}", text(&end_device.join("sas_address"))?));
        }
        let phy = text(&end_device.join("phy_identifier"))?;
        let expander = class("sas_device", t + 3).filter(|dir| dir.exists());
        Some(match expander {
            Some(expander) => format!("sas-exp{}-phy{phy}-{lun}", text(&expander.join("sas_address"))?),
            None => format!("sas-phy{phy}-{lun}"),
        })
    }

    /// The first device above `i` that `wanted` picks.
    fn above(&self, i: usize, wanted: impl Fn(&Ancestor) -> bool) -> Option<usize> {
        (i + 1..self.chain.len()).find(|&at| wanted(&self.chain[at]))
    }
}

/// The lowest `host<N>` in `controller`'s directory.
fn first_host(controller: &Path) -> Option<Option<u32>> {
    let entries = std::fs::read_dir(controller).ok()?;
    let hosts = entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir() || t.is_symlink()))
        .filter_map(|e| e.file_name().to_str()?.strip_prefix("host")?.parse::<u32>().ok());
    Some(hosts.min())
}

/// The by-path links of a disk: `ID_PATH`, its ATA compat form, and for virtio-blk on PCI the
/// legacy `virtio-pci-...`.
pub(super) fn path_links(name: &str, id: &IdPath) -> Vec<String> {
    let mut links = vec![link("by-path", &value(id.path.as_bytes()), Escape::Unset)];
    if let Some(compat) = &id.ata_compat {
        links.push(link("by-path", &value(compat.as_bytes()), Escape::Unset));
    }
    if name.starts_with("vd") && id.path.starts_with("pci-") {
        links.push(link("by-path", &concat(&[b"virtio-", &value(id.path.as_bytes())]), Escape::Unset));
    }
    links
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    #[test]
    fn white_space_is_trimmed_and_runs_become_one_underscore() {
        assert_eq!(replace_whitespace(b"  QEMU   HARDDISK  ", usize::MAX), b"QEMU_HARDDISK");
        assert_eq!(replace_whitespace(b"a\tb\nc", usize::MAX), b"a_b_c");
        // A vertical tab is white space inside but not skipped at the start (systemd's WHITESPACE).
        assert_eq!(replace_whitespace(b"\x0bab", usize::MAX), b"_ab");
        assert_eq!(replace_whitespace(b"ab\0cd", usize::MAX), b"ab", "a NUL ends a C string");
        assert_eq!(replace_whitespace(b"abcdef", 3), b"abc");
    }

    #[test]
    fn unsafe_characters_become_underscores() {
        assert_eq!(replace_chars(b"a/b c$%?,#+-.:=@_", b""), b"a_b_c____#+-.:=@_");
        assert_eq!(replace_chars(b"a/b c\td", b"/ "), b"a/b c d");
        assert_eq!(replace_chars(b"a\\xb", b""), b"a\\xb", "hex escapes stay");
        assert_eq!(replace_chars("Grüße".as_bytes(), b""), "Grüße".as_bytes(), "UTF-8 stays");
        assert_eq!(replace_chars(b"\xff\xc3", b""), b"__", "broken UTF-8 does not");
        assert_eq!(replace_chars("\u{fdd0}".as_bytes(), b""), b"___", "nor a non-character");
    }

    #[test]
    fn virtio_serials_name_their_disk() {
        assert_eq!(virtio_links(Some(b"PD-VIRTIO-0001\n")), ["/dev/disk/by-id/virtio-PD-VIRTIO-0001"]);
        assert_eq!(virtio_links(Some(b" two  words/x$\n")), ["/dev/disk/by-id/virtio-two_words/x_"]);
        assert_eq!(virtio_links(Some(b"   \n")), Vec::<String>::new());
        assert_eq!(virtio_links(None), Vec::<String>::new());
    }

    #[test]
    fn nvme_names_escape_spaces_one_by_one() {
        let links = nvme_links(
            Some(b"eui.0025388b91b2d1f4\n"),
            Some(b"QEMU NVMe  Ctrl                         \n"),
            Some(b"PD-NVME-0001        \n"),
            Some(b"1\n"),
        );
        assert_eq!(
            links,
            [
                "/dev/disk/by-id/nvme-eui.0025388b91b2d1f4",
                "/dev/disk/by-id/nvme-QEMU_NVMe__Ctrl_PD-NVME-0001",
                "/dev/disk/by-id/nvme-QEMU_NVMe__Ctrl_PD-NVME-0001_1",
            ]
        );
        assert_eq!(nvme_links(None, Some(b"M"), None, Some(b"1")), Vec::<String>::new());
    }

    /// A page 0x83 made of designators (code set, designator type, identifier).
    pub(in crate::disks) fn page_83(designators: &[(u8, u8, &[u8])]) -> Vec<u8> {
        let mut page = vec![0, 0x83, 0, 0];
        for (code_set, kind, id) in designators {
            page.extend_from_slice(&[*code_set, *kind, 0, id.len() as u8]);
            page.extend_from_slice(id);
        }
        let len = (page.len() - 4) as u16;
        page[2..4].copy_from_slice(&len.to_be_bytes());
        page
    }

    pub(in crate::disks) fn page_80(serial: &[u8]) -> Vec<u8> {
        [&[0, 0x80, 0, serial.len() as u8][..], serial].concat()
    }

    const NAA5: [u8; 8] = [0x50, 0x00, 0xc5, 0x00, 0x15, 0xea, 0x71, 0xad];

    #[test]
    fn scsi_id_takes_the_naa_name_before_a_vendor_specific_one() {
        // QEMU's scsi-hd with serial= and wwn=: its serial as a vendor-specific designator first.
        let page = page_83(&[(2, 0, b"PD-TARGET-0001"), (1, 3, &NAA5)]);
        let id = scsi_id(b"QEMU    ", b"QEMU HARDDISK   ", Some(&page), Some(&page_80(b"PD-TARGET-0001")));
        assert_eq!(id.wwn.as_deref(), Some("5000c50015ea71ad"));
        assert_eq!(id.wwn_extension, None);
        assert_eq!(
            scsi_links(&id),
            ["/dev/disk/by-id/scsi-35000c50015ea71ad", "/dev/disk/by-id/wwn-0x5000c50015ea71ad"]
        );
    }

    #[test]
    fn scsi_id_without_naa_prefixes_vendor_and_model() {
        let page = page_83(&[(2, 0, b"PD-TARGET-0001")]);
        let id = scsi_id(b"QEMU    ", b"QEMU HARDDISK   ", Some(&page), None);
        assert_eq!(scsi_links(&id), ["/dev/disk/by-id/scsi-0QEMU_QEMU_HARDDISK_PD-TARGET-0001"]);
        // Without page 0x83, page 0x80: `S`, vendor, model, unit serial.
        let id = scsi_id(b"SEAGATE ", b"ST1200MM0009    ", None, Some(&page_80(b"  Z4009XYZ")));
        assert_eq!(scsi_links(&id), ["/dev/disk/by-id/scsi-SSEAGATE_ST1200MM0009_Z4009XYZ"]);
        assert_eq!(scsi_id(b"SEAGATE ", b"ST1200MM0009    ", None, None), ScsiId::default());
    }

    #[test]
    fn an_naa_6_name_carries_its_extension_in_the_link_only() {
        let naa6 = [0x60, 0x0a, 0x0b, 0x80, 0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb];
        // An NAA 5 listed first still loses to the NAA 6 (the search's order, not the page's).
        let page = page_83(&[(1, 3, &NAA5), (1, 3, &naa6), (1, 0x13, &NAA5)]);
        let id = scsi_id(b"LIO-ORG ", b"disk0           ", Some(&page), None);
        assert_eq!(id.wwn.as_deref(), Some("600a0b8000112233"));
        assert_eq!(id.wwn_extension.as_deref(), Some("445566778899aabb"));
        assert_eq!(
            scsi_links(&id),
            [
                "/dev/disk/by-id/scsi-3600a0b8000112233445566778899aabb",
                "/dev/disk/by-id/wwn-0x600a0b8000112233445566778899aabb"
            ]
        );
    }

    #[test]
    fn target_port_designators_and_eui_64() {
        // A designator of the target port (association 1) names no disk.
        let page = page_83(&[(1, 0x13, &NAA5), (1, 2, &[0x00, 0x25, 0x38, 0x8b, 0x91, 0xb2, 0xd1, 0xf4])]);
        let id = scsi_id(b"V       ", b"M               ", Some(&page), None);
        assert_eq!(id.wwn, None);
        assert_eq!(scsi_links(&id), ["/dev/disk/by-id/scsi-20025388b91b2d1f4"]);
    }

    #[test]
    fn a_scsi_2_page_is_one_hex_identifier() {
        let mut page = vec![0, 0x83, 0, 6, 0x60, 0x06, 0x48, 0x00, 0x01, 0x02];
        page.truncate(10);
        let id = scsi_id(b"EMC     ", b"SYMMETRIX       ", Some(&page), None);
        assert_eq!(scsi_links(&id), ["/dev/disk/by-id/scsi-3600648000102"]);
    }

    #[test]
    fn a_long_page_is_read_as_far_as_scsi_id_asks() {
        // The NAA designator starts past byte 254: scsi_id never sees it.
        let filler = [b'x'; 250];
        let page = page_83(&[(2, 0, &filler), (1, 3, &NAA5)]);
        let id = scsi_id(b"V       ", b"M               ", Some(&page), None);
        assert_eq!(id.wwn, None);
    }

    /// Page 0x83 as libata writes it for a SATA drive.
    pub(in crate::disks) fn libata_page_83(model: &str, serial: &str, wwn: Option<[u8; 8]>) -> Vec<u8> {
        let t10 = format!("ATA     {model:<40}{serial:>20}");
        let mut designators: Vec<(u8, u8, &[u8])> = vec![(2, 0, serial.as_bytes()), (2, 1, t10.as_bytes())];
        let wwn = wwn.unwrap_or_default();
        if wwn != [0; 8] {
            designators.push((1, 3, &wwn));
        }
        page_83(&designators)
    }

    #[test]
    fn ata_names_come_from_the_sat_designators() {
        let wwn = [0x50, 0x02, 0x53, 0x8e, 0x40, 0xa1, 0xb2, 0xc3];
        let id = ata_id(&libata_page_83("Samsung SSD 860 EVO 500GB", "S3Z1NB0K123456X", Some(wwn))).unwrap();
        assert_eq!(
            ata_links(&id),
            ["/dev/disk/by-id/ata-Samsung_SSD_860_EVO_500GB_S3Z1NB0K123456X", "/dev/disk/by-id/wwn-0x5002538e40a1b2c3"]
        );
        // ata_id reports an NAA 5 WWN only.
        let other = [0x30, 0x02, 0x53, 0x8e, 0x40, 0xa1, 0xb2, 0xc3];
        let id = ata_id(&libata_page_83("QEMU HARDDISK", "", Some(other))).unwrap();
        assert_eq!(id.wwn, None);
        assert_eq!(ata_links(&id), ["/dev/disk/by-id/ata-QEMU_HARDDISK"]);
        assert_eq!(ata_id(&page_83(&[(1, 3, &wwn)])), None, "no T10 designator, no name");
    }

    #[test]
    fn usb_names_join_vendor_model_serial_and_the_lun() {
        let id = UsbId {
            vendor: b"SanDisk ".to_vec(),
            model: b"Cruzer Blade    ".to_vec(),
            serial: Some(b"0123456789AB".to_vec()),
            target_lun: Some((0, 0)),
        };
        assert_eq!(usb_links(&id), ["/dev/disk/by-id/usb-SanDisk_Cruzer_Blade_0123456789AB-0:0"]);
        let odd = UsbId { serial: Some(b"12,34".to_vec()), ..id };
        assert_eq!(usb_links(&odd), ["/dev/disk/by-id/usb-SanDisk_Cruzer_Blade-0:0"], "a comma drops the serial");
        let plain =
            UsbId { vendor: b"Generic".to_vec(), model: b"Flash Disk".to_vec(), serial: None, target_lun: None };
        assert_eq!(usb_links(&plain), ["/dev/disk/by-id/usb-Generic_Flash_Disk"]);
    }

    #[test]
    fn mmc_names() {
        assert_eq!(mmc_links(Some(b"SD32G\n"), Some(b"0x1234abcd\n")), ["/dev/disk/by-id/mmc-SD32G_0x1234abcd"]);
        assert_eq!(mmc_links(Some(b"SD32G\n"), None), Vec::<String>::new());
    }

    #[test]
    fn scsi_names() {
        assert_eq!(hctl("0:0:1:0"), Some([0, 0, 1, 0]));
        assert_eq!(hctl("target0:0:1"), None);
        assert_eq!(hctl("0:0:1:0:0"), None);
    }
}
