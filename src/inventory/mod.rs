//! The machine's inventory (SPEC §6b): what a controller knows of a server only from its console,
//! since the maintenance OS has no network. Read from the kernel (sysfs and `/proc`, at roots
//! tests move: [`Sources`]), never from udev nor from a recipe: the SMBIOS system, the firmware,
//! the TPM, the CPUs, the memory, every whole disk with its identity and verdict exactly as
//! `disks --format json` gives them, and the network interfaces ([`network`]).
//!
//! Every `run` prints it before its result line as numbered `PROVISION-INVENTORY v1` lines
//! ([`lines`]), and `check --inventory` reads those back from a console log ([`saved`]).

pub mod lines;
mod machine;
pub mod network;
pub mod saved;

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::checks::host::{listed, SystemHost};
use crate::disks::verdict::{self, Listed};
use crate::disks::{self, Dev, Disk};
use crate::issues::shortened;
use crate::trust::firmware::Sysfs;
pub use machine::{Cpus, Firmware, System, Tpm};
pub use network::Interface;

/// The most bytes of a string of the system, the firmware, the CPUs or an interface, as
/// written in the inventory's JSON: SMBIOS strings are 64 characters in practice, and a longer
/// one is shortened in the middle (the disks' strings are `disks`' own, as it prints them).
const MAX_STRING_BYTES: usize = 256;

/// Where the kernel's views are: sysfs (`/sys`) and procfs (`/proc`).
#[derive(Debug, Clone)]
pub struct Sources {
    pub sysfs: Sysfs,
    pub procfs: PathBuf,
}

impl Default for Sources {
    fn default() -> Self {
        Sources { sysfs: Sysfs::default(), procfs: "/proc".into() }
    }
}

/// The inventory, in the order its JSON writes it (schemas/inventory.schema.json describes each field).
#[derive(Debug, Clone, Serialize)]
pub struct Inventory {
    pub system: System,
    pub firmware: Firmware,
    pub tpm: Tpm,
    pub cpus: Cpus,
    /// The kernel's `MemTotal`, in bytes.
    pub memory_bytes: Option<u64>,
    /// Every whole disk, as `disks --format json` lists them.
    pub disks: Vec<Listed>,
    /// Disks left out to keep the printed inventory within its bound ([`lines::MAX_BYTES`]).
    pub disks_omitted: usize,
    pub interfaces: Vec<Interface>,
    /// Interfaces left out: beyond [`network::MAX_INTERFACES`], or to keep within the bound.
    pub interfaces_omitted: usize,
}

impl Inventory {
    /// The machine as `sources` show it; `media` are the devices the task media was found on
    /// (the verdict `media`), as `disks` is told them; `read` the disks' identity when it was
    /// read already in this run (the host checks of a by-id name or hints read every disk).
    pub fn read(sources: &Sources, media: &[Dev], read: Option<Vec<Disk>>) -> Inventory {
        let (interfaces, interfaces_omitted) = network::read(sources.sysfs.root());
        Inventory {
            system: machine::system(sources),
            firmware: machine::firmware(sources),
            tpm: machine::tpm(sources),
            cpus: machine::cpus(sources),
            memory_bytes: machine::memory_bytes(sources),
            disks: disks_of(sources.sysfs.root(), media, read).map(|listed| listed.disks).unwrap_or_default(),
            disks_omitted: 0,
            interfaces,
            interfaces_omitted,
        }
    }
}

/// Every whole disk under `sysfs` with its verdict (`disks --format json`): the system's disks
/// as the host checks find them, the media's those `media` are on, what uses each. An error only
/// when there are no block devices to list at all.
pub fn disks(sysfs: &Path, media: &[Dev]) -> std::io::Result<verdict::Inventory> {
    disks_of(sysfs, media, None)
}

/// [`disks`], with their identity as `read` already when it was.
fn disks_of(sysfs: &Path, media: &[Dev], read: Option<Vec<Disk>>) -> std::io::Result<verdict::Inventory> {
    let no_systemd = |_: &str| -> anyhow::Result<String> { anyhow::bail!("systemd is not asked for an inventory") };
    std::fs::read_dir(sysfs.join("block"))?;
    let host = SystemHost::new(media, &no_systemd).with_sysfs(sysfs);
    let host = match read {
        Some(disks) => host.with_disks(disks),
        None => host,
    };
    Ok(verdict::Inventory { disks: listed(&host) })
}

/// A string the machine gives, as the inventory shows it: [`disks::clean`], then at most
/// [`MAX_STRING_BYTES`] as written.
fn machine_string(raw: &[u8]) -> Option<String> {
    disks::clean(raw).map(|text| shortened(text, MAX_STRING_BYTES))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::issues::ascii_json_len;

    /// A file under a test's root, its directories made.
    pub fn put(root: &Path, path: &str, text: &str) {
        let path = root.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    /// An empty machine: `sys` and `proc` under a directory of the test's own.
    pub fn sources() -> (tempfile::TempDir, Sources) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("sys")).unwrap();
        std::fs::create_dir_all(dir.path().join("proc")).unwrap();
        let sources = Sources { sysfs: Sysfs::at(&dir.path().join("sys")), procfs: dir.path().join("proc") };
        (dir, sources)
    }

    #[test]
    fn machine_strings_are_printable_and_bounded() {
        assert_eq!(machine_string(b"  QEMU \0"), Some("QEMU".into()));
        assert_eq!(machine_string(b" \n"), None);
        let long = machine_string("\u{e9}".repeat(400).as_bytes()).unwrap();
        assert!(long.chars().map(ascii_json_len).sum::<usize>() <= MAX_STRING_BYTES, "{long}");
        assert!(long.contains("bytes cut"), "{long}");
    }

    #[test]
    fn an_empty_machine_is_an_inventory_of_nulls() {
        let (_dir, sources) = sources();
        let inventory = Inventory::read(&sources, &[], None);
        let text = crate::issues::ascii_json(&inventory);
        let json: serde_json::Value = serde_json::from_str(&text).unwrap();
        let mut keys: Vec<&str> = json.as_object().unwrap().keys().map(String::as_str).collect();
        keys.sort_by_key(|key| text.find(&format!("\"{key}\":")));
        assert_eq!(
            keys,
            [
                "system",
                "firmware",
                "tpm",
                "cpus",
                "memory_bytes",
                "disks",
                "disks_omitted",
                "interfaces",
                "interfaces_omitted"
            ]
        );
        assert_eq!(json["firmware"]["mode"], "bios");
        assert_eq!(json["tpm"], serde_json::json!({"present": false, "version": null}));
        assert_eq!(json["disks"], serde_json::json!([]));
    }

    /// The disks are `disks --format json`'s, object for object.
    #[test]
    fn the_disks_are_those_disks_lists() {
        let tree = crate::disks::tests::machine();
        let sources = Sources { sysfs: Sysfs::at(tree.root()), procfs: "/nonexistent".into() };
        let inventory = Inventory::read(&sources, &[], None);
        let listed = disks(tree.root(), &[]).unwrap();
        assert_eq!(inventory.disks, listed.disks);
        assert_eq!(inventory.disks.len(), 9);
        // As the host checks read them: the same, not read again.
        let read: Vec<Disk> = listed.disks.iter().map(|l| l.disk.clone()).collect();
        let again = Inventory::read(&sources, &[], Some(read[..2].to_vec()));
        assert_eq!(again.disks, listed.disks[..2]);
        let json = serde_json::to_value(&inventory).unwrap();
        assert_eq!(json["disks"], serde_json::to_value(&listed).unwrap()["disks"]);
    }
}
