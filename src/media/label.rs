//! Reading a filesystem's label from the device itself, so discovery works without udev
//! (no `/dev/disk/by-label` on a minimal image or this host). The bytes are untrusted: any
//! block device the dispatcher looks at may hold anything ([`probe`] is fuzzed).

use std::io;

use crate::iso9660::read_at_most;
use crate::issues::unprintable;

pub use crate::iso9660::ReadAt;

/// What a device's first bytes say it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Filesystem {
    /// ISO 9660, with its primary volume descriptor's volume id.
    Iso9660 {
        volume_id: String,
    },
    /// FAT12/16/32, with the boot sector's volume label (virtual USB media).
    Fat {
        label: String,
    },
    /// squashfs has no label; it is only mounted when named with `--media`.
    Squashfs,
    Unknown,
}

impl Filesystem {
    pub fn label(&self) -> Option<&str> {
        match self {
            Filesystem::Iso9660 { volume_id } => Some(volume_id),
            Filesystem::Fat { label } => Some(label),
            Filesystem::Squashfs | Filesystem::Unknown => None,
        }
    }

    /// The kernel's name for the filesystem, for mount(2).
    pub fn fstype(&self) -> Option<&'static str> {
        match self {
            Filesystem::Iso9660 { .. } => Some("iso9660"),
            Filesystem::Fat { .. } => Some("vfat"),
            Filesystem::Squashfs => Some("squashfs"),
            Filesystem::Unknown => None,
        }
    }
}

const SECTOR: u64 = 2048;
/// ISO 9660 volume descriptors start at sector 16; the set ends with a terminator (255).
const FIRST_DESCRIPTOR: u64 = 16;
const MAX_DESCRIPTORS: u64 = 32;

/// Identifies the filesystem on `file` (a block device, an image file, bytes).
pub fn probe(file: &(impl ReadAt + ?Sized)) -> io::Result<Filesystem> {
    let mut head = [0u8; 512];
    let got = read_at_most(file, &mut head, 0)?;
    if got >= 4 && &head[..4] == b"hsqs" {
        return Ok(Filesystem::Squashfs);
    }
    if let Some(volume_id) = iso9660_volume_id(file)? {
        return Ok(Filesystem::Iso9660 { volume_id });
    }
    if got == 512 {
        if let Some(label) = fat_label(&head) {
            return Ok(Filesystem::Fat { label });
        }
    }
    Ok(Filesystem::Unknown)
}

fn iso9660_volume_id(file: &(impl ReadAt + ?Sized)) -> io::Result<Option<String>> {
    let mut sector = [0u8; SECTOR as usize];
    for n in FIRST_DESCRIPTOR..FIRST_DESCRIPTOR + MAX_DESCRIPTORS {
        if read_at_most(file, &mut sector, n * SECTOR)? < sector.len() || &sector[1..6] != b"CD001" {
            return Ok(None);
        }
        match sector[0] {
            // Primary volume descriptor: volume identifier at bytes 40..72, space-padded.
            1 => return Ok(Some(trim(&sector[40..72]))),
            255 => return Ok(None),
            _ => {}
        }
    }
    Ok(None)
}

fn fat_label(boot: &[u8; 512]) -> Option<String> {
    if boot[510..512] != [0x55, 0xAA] {
        return None;
    }
    // FAT32 keeps its extended boot record further in than FAT12/16.
    let (signature, label, kind) = if &boot[0x52..0x57] == b"FAT32" { (0x42, 0x47, 0x52) } else { (0x26, 0x2B, 0x36) };
    if &boot[kind..kind + 3] != b"FAT" || boot[signature] != 0x29 {
        return None;
    }
    let label = trim(&boot[label..label + 11]);
    (!label.is_empty() && label != "NO NAME").then_some(label)
}

/// A label field as text: padding trimmed, and each character that may not be printed as it
/// is ([`unprintable`]: a device may hold anything, and labels are printed in the journal, on
/// stderr and on the console) shown as `?`.
fn trim(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    text.trim_end_matches([' ', '\0']).chars().map(|c| if unprintable(c) { '?' } else { c }).collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::io::Write;

    /// The first 36 KiB of an ISO 9660 image: 16 empty sectors, a primary volume descriptor
    /// with `volume_id`, a terminator.
    pub fn iso_header(volume_id: &str) -> Vec<u8> {
        let mut image = vec![0u8; 18 * SECTOR as usize];
        let pvd = &mut image[16 * SECTOR as usize..17 * SECTOR as usize];
        pvd[0] = 1;
        pvd[1..6].copy_from_slice(b"CD001");
        pvd[6] = 1;
        pvd[40..72].fill(b' ');
        pvd[40..40 + volume_id.len()].copy_from_slice(volume_id.as_bytes());
        let end = &mut image[17 * SECTOR as usize..];
        end[0] = 255;
        end[1..6].copy_from_slice(b"CD001");
        image
    }

    fn probe_bytes(bytes: &[u8]) -> Filesystem {
        let in_memory = probe(bytes).unwrap();
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(bytes).unwrap();
        assert_eq!(probe(&file).unwrap(), in_memory, "a file and its bytes read alike");
        in_memory
    }

    #[test]
    fn iso9660_volume_id_is_read_from_the_descriptor() {
        assert_eq!(probe_bytes(&iso_header("TASK")), Filesystem::Iso9660 { volume_id: "TASK".into() });
        // A boot record before the primary descriptor (El Torito) is skipped.
        let mut image = iso_header("TASK");
        image.splice(16 * 2048..16 * 2048, {
            let mut boot = vec![0u8; 2048];
            boot[1..6].copy_from_slice(b"CD001");
            boot
        });
        assert_eq!(probe_bytes(&image).label(), Some("TASK"));
    }

    #[test]
    fn fat_labels_of_both_layouts() {
        let mut fat16 = [0u8; 512];
        fat16[510..].copy_from_slice(&[0x55, 0xAA]);
        fat16[0x26] = 0x29;
        fat16[0x2B..0x36].copy_from_slice(b"TASK       ");
        fat16[0x36..0x3E].copy_from_slice(b"FAT16   ");
        assert_eq!(probe_bytes(&fat16), Filesystem::Fat { label: "TASK".into() });
        let mut fat32 = [0u8; 512];
        fat32[510..].copy_from_slice(&[0x55, 0xAA]);
        fat32[0x42] = 0x29;
        fat32[0x47..0x52].copy_from_slice(b"TASK       ");
        fat32[0x52..0x5A].copy_from_slice(b"FAT32   ");
        assert_eq!(probe_bytes(&fat32).label(), Some("TASK"));
    }

    #[test]
    fn a_label_cannot_drive_the_console() {
        let mut image = iso_header("TASK");
        image[16 * 2048 + 40..16 * 2048 + 46].copy_from_slice(b"\x1b[2J\nX");
        assert_eq!(probe_bytes(&image).label(), Some("?[2J?X"));
        // Bidirectional overrides and line separators, in the label's UTF-8.
        let mut image = iso_header("TASK");
        let tricky = "A\u{202e}B\u{2028}\u{2029}".as_bytes();
        image[16 * 2048 + 40..16 * 2048 + 40 + tricky.len()].copy_from_slice(tricky);
        assert_eq!(probe_bytes(&image).label(), Some("A?B??"));
    }

    #[test]
    fn short_empty_and_foreign_devices_are_unknown() {
        assert_eq!(probe_bytes(b""), Filesystem::Unknown);
        assert_eq!(probe_bytes(&[0u8; 4096]), Filesystem::Unknown);
        assert_eq!(probe_bytes(&iso_header("TASK")[..16 * 2048 + 100]), Filesystem::Unknown);
        assert_eq!(probe_bytes(b"hsqs and more"), Filesystem::Squashfs);
    }
}
