//! The machine beside its disks and interfaces: the SMBIOS system and the firmware
//! (`class/dmi/id`, `firmware/efi`, `kernel/security/lockdown`), the TPM (`class/tpm`), the CPUs
//! (`devices/system/cpu/online`, the model from `/proc/cpuinfo` or else SMBIOS's processor
//! record) and the memory (`/proc/meminfo`). Each field that cannot be read is null: the
//! inventory says what the kernel shows, and a virtual machine or a board without SMBIOS shows
//! less.

use std::io::{BufReader, Read};
use std::path::Path;

use serde::Serialize;

use super::{machine_string, Sources};
use crate::disks;

/// What the firmware's SMBIOS tables say the system is (`class/dmi/id`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct System {
    /// `product_uuid` in lower case, when shaped like a UUID: the name a bound recipe's
    /// signature uses (SPEC §6a).
    pub uuid: Option<String>,
    /// `sys_vendor`.
    pub vendor: Option<String>,
    /// `product_name`.
    pub product: Option<String>,
    /// `product_serial`.
    pub serial: Option<String>,
}

/// How the machine booted, and what its firmware is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Firmware {
    /// `uefi` or `bios`.
    pub mode: &'static str,
    /// The firmware's Secure Boot state; null where it is not UEFI (as status.json's).
    pub secure_boot: Option<bool>,
    /// The kernel's lockdown mode (`none`, `integrity`, `confidentiality`).
    pub lockdown: Option<String>,
    /// `bios_vendor`, `bios_version`, `bios_date` (SMBIOS calls UEFI firmware a BIOS too).
    pub vendor: Option<String>,
    pub version: Option<String>,
    pub date: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Tpm {
    /// Whether the kernel has a TPM (`class/tpm/tpm0`, ...).
    pub present: bool,
    /// `2.0` or `1.2`, from the kernel's `tpm_version_major`; null when it does not say.
    pub version: Option<&'static str>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Cpus {
    /// The first `model name` of `/proc/cpuinfo` (x86 and others), else the version of the
    /// first processor SMBIOS lists (arm64 servers, whose cpuinfo names no model).
    pub model: Option<String>,
    /// Logical CPUs online (`devices/system/cpu/online`).
    pub count: Option<u32>,
}

pub fn system(sources: &Sources) -> System {
    let dmi = |name: &str| dmi_id(sources, name);
    System {
        uuid: sources.sysfs.machine_uuid(),
        vendor: dmi("sys_vendor"),
        product: dmi("product_name"),
        serial: dmi("product_serial"),
    }
}

pub fn firmware(sources: &Sources) -> Firmware {
    let dmi = |name: &str| dmi_id(sources, name);
    Firmware {
        mode: if sources.sysfs.uefi() { "uefi" } else { "bios" },
        secure_boot: sources.sysfs.secure_boot(),
        lockdown: sources.sysfs.lockdown(),
        vendor: dmi("bios_vendor"),
        version: dmi("bios_version"),
        date: dmi("bios_date"),
    }
}

/// The first TPM the kernel lists (`tpm0`; `tpmrm0` is its resource manager, not another).
pub fn tpm(sources: &Sources) -> Tpm {
    let class = sources.sysfs.root().join("class/tpm");
    let mut names: Vec<String> = std::fs::read_dir(&class)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| entry.file_name().into_string().ok())
        .filter(|name| name.strip_prefix("tpm").is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())))
        .collect();
    names.sort_by_key(|name| name[3..].parse::<u32>().unwrap_or(u32::MAX));
    let Some(first) = names.first() else { return Tpm { present: false, version: None } };
    let major = disks::attr(&class.join(first).join("tpm_version_major"));
    let version = match major.as_deref().map(|b| b.trim_ascii()) {
        Some(b"2") => Some("2.0"),
        Some(b"1") => Some("1.2"),
        _ => None,
    };
    Tpm { present: true, version }
}

pub fn cpus(sources: &Sources) -> Cpus {
    let online = disks::attr(&sources.sysfs.root().join("devices/system/cpu/online"));
    Cpus {
        model: cpuinfo_model(&sources.procfs.join("cpuinfo")).or_else(|| smbios_processor(sources)),
        count: online.as_deref().and_then(|list| count_cpu_list(&String::from_utf8_lossy(list))),
    }
}

/// `MemTotal` of `/proc/meminfo` in bytes: the memory the kernel manages, a little less than
/// is installed (what the firmware keeps for itself is not in it).
pub fn memory_bytes(sources: &Sources) -> Option<u64> {
    let text = read_proc(&sources.procfs.join("meminfo"), MAX_MEMINFO_BYTES)?;
    let line = text.lines().find_map(|line| line.strip_prefix("MemTotal:"))?;
    let kib: u64 = line.trim().strip_suffix("kB")?.trim().parse().ok()?;
    kib.checked_mul(1024)
}

/// `/proc/meminfo` is about 1.5 KiB.
const MAX_MEMINFO_BYTES: u64 = 64 * 1024;

/// How much of `/proc/cpuinfo` is looked through for a model: its first processor's record
/// comes first, a few KiB on any architecture (a machine of 256 CPUs has 400 KiB in all).
const MAX_CPUINFO_BYTES: u64 = 64 * 1024;

/// An attribute of `class/dmi/id`, as the inventory shows a machine's string.
fn dmi_id(sources: &Sources, name: &str) -> Option<String> {
    disks::attr(&sources.sysfs.root().join("class/dmi/id").join(name)).as_deref().and_then(machine_string)
}

fn cpuinfo_model(path: &Path) -> Option<String> {
    let text = read_proc(path, MAX_CPUINFO_BYTES)?;
    let value = text.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        (key.trim() == "model name").then_some(value)
    })?;
    machine_string(value.as_bytes())
}

/// A file of `/proc`, at most `cap` bytes of it (files there say their size is 0: read until
/// the end or the cap); only a regular file, never through a symlink.
fn read_proc(path: &Path, cap: u64) -> Option<String> {
    let file = crate::files::open_regular(path).ok()?;
    let mut text = String::new();
    BufReader::new(file.take(cap)).read_to_string(&mut text).ok()?;
    Some(text)
}

/// `0-3,8-11` (sysfs's CPU lists) counted: 8.
fn count_cpu_list(list: &str) -> Option<u32> {
    let mut count: u32 = 0;
    for range in list.trim().split(',').filter(|r| !r.is_empty()) {
        let (first, last) = range.split_once('-').unwrap_or((range, range));
        let (first, last): (u32, u32) = (first.parse().ok()?, last.parse().ok()?);
        count = count.checked_add(last.checked_sub(first)?.checked_add(1)?)?;
    }
    (count > 0).then_some(count)
}

/// The Processor Version string of the first processor record (SMBIOS type 4) the kernel
/// exposes (`firmware/dmi/entries/4-0/raw`): the record's byte 0x10 numbers the string, the
/// strings follow the record's formatted part, each ended by a NUL.
fn smbios_processor(sources: &Sources) -> Option<String> {
    let raw = disks::attr(&sources.sysfs.root().join("firmware/dmi/entries/4-0/raw"))?;
    let (kind, length, number) = (*raw.first()?, usize::from(*raw.get(1)?), usize::from(*raw.get(0x10)?));
    if kind != 4 || length <= 0x10 || number == 0 {
        return None;
    }
    let string = raw.get(length..)?.split(|&b| b == 0).nth(number - 1)?;
    machine_string(string)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inventory::tests::{put, sources};
    use std::io::BufRead;

    #[test]
    fn the_system_and_its_firmware_from_sysfs() {
        let (dir, sources) = sources();
        assert_eq!(system(&sources), System { uuid: None, vendor: None, product: None, serial: None });
        let bare = firmware(&sources);
        assert_eq!((bare.mode, bare.secure_boot, bare.vendor), ("bios", None, None));
        put(dir.path(), "sys/class/dmi/id/product_uuid", "4C4C4544-0042-3510-8052-B4C04F4D4E31\n");
        put(dir.path(), "sys/class/dmi/id/sys_vendor", "Dell Inc.\n");
        put(dir.path(), "sys/class/dmi/id/product_name", "  PowerEdge R650 \n");
        put(dir.path(), "sys/class/dmi/id/product_serial", "7XYZ\u{1b}[2J123\n");
        put(dir.path(), "sys/class/dmi/id/bios_vendor", "Dell Inc.\n");
        put(dir.path(), "sys/class/dmi/id/bios_version", "1.13.2\n");
        put(dir.path(), "sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c", "\u{6}\0\0\0\u{1}");
        put(dir.path(), "sys/kernel/security/lockdown", "none [integrity] confidentiality\n");
        assert_eq!(
            system(&sources),
            System {
                uuid: Some("4c4c4544-0042-3510-8052-b4c04f4d4e31".into()),
                vendor: Some("Dell Inc.".into()),
                product: Some("PowerEdge R650".into()),
                serial: Some("7XYZ?[2J123".into()),
            }
        );
        assert_eq!(
            firmware(&sources),
            Firmware {
                mode: "uefi",
                secure_boot: Some(true),
                lockdown: Some("integrity".into()),
                vendor: Some("Dell Inc.".into()),
                version: Some("1.13.2".into()),
                date: None,
            }
        );
    }

    #[test]
    fn the_tpm_and_its_version() {
        let (dir, sources) = sources();
        assert_eq!(tpm(&sources), Tpm { present: false, version: None });
        put(dir.path(), "sys/class/tpm/tpmrm0/dev", "253:65536\n");
        assert_eq!(tpm(&sources), Tpm { present: false, version: None }, "a resource manager is no TPM");
        put(dir.path(), "sys/class/tpm/tpm0/dev", "10:224\n");
        assert_eq!(tpm(&sources), Tpm { present: true, version: None }, "an older kernel does not say");
        put(dir.path(), "sys/class/tpm/tpm0/tpm_version_major", "2\n");
        assert_eq!(tpm(&sources), Tpm { present: true, version: Some("2.0") });
        put(dir.path(), "sys/class/tpm/tpm0/tpm_version_major", "1\n");
        assert_eq!(tpm(&sources).version, Some("1.2"));
    }

    #[test]
    fn cpus_and_memory_from_sysfs_and_proc() {
        let (dir, sources) = sources();
        assert_eq!(cpus(&sources), Cpus { model: None, count: None });
        assert_eq!(memory_bytes(&sources), None);
        put(dir.path(), "sys/devices/system/cpu/online", "0-3,8-11,16\n");
        put(
            dir.path(),
            "proc/cpuinfo",
            "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz\n\n\
             processor\t: 1\nmodel name\t: Another\n",
        );
        put(dir.path(), "proc/meminfo", "MemTotal:        8039596 kB\nMemFree:         7000000 kB\n");
        assert_eq!(
            cpus(&sources),
            Cpus { model: Some("Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz".into()), count: Some(9) }
        );
        assert_eq!(memory_bytes(&sources), Some(8_039_596 * 1024));
        for list in ["", "3-1", "x", "0-4294967295,0"] {
            assert_eq!(count_cpu_list(list), None, "{list}");
        }
    }

    /// An arm64 server's cpuinfo names no model: SMBIOS's processor record does.
    #[test]
    fn without_a_model_name_the_smbios_processor_record_names_it() {
        let (dir, sources) = sources();
        put(dir.path(), "proc/cpuinfo", "processor\t: 0\nBogoMIPS\t: 50.00\nCPU implementer\t: 0x41\n");
        let mut record = vec![4, 0x2a, 0x04, 0x00, 0x01, 0x03, 0xfe, 0x02];
        record.resize(0x2a, 0);
        record[0x10] = 2;
        record.extend_from_slice(b"CPU 0\0Ampere(R) Altra(R) Processor\0Ampere(R)\0\0");
        let path = dir.path().join("sys/firmware/dmi/entries/4-0/raw");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &record).unwrap();
        assert_eq!(cpus(&sources).model.as_deref(), Some("Ampere(R) Altra(R) Processor"));
        record[0x10] = 9;
        std::fs::write(&path, &record).unwrap();
        assert_eq!(cpus(&sources).model, None, "no such string");
    }

    /// Whether a line of `path` starts with `key`.
    fn has_line(path: &Path, key: &str) -> bool {
        std::fs::File::open(path)
            .is_ok_and(|f| BufReader::new(f).lines().map_while(Result::ok).any(|l| l.starts_with(key)))
    }

    #[test]
    fn this_machine_says_what_it_has() {
        let sources = Sources::default();
        let cpus = cpus(&sources);
        assert!(cpus.count.is_some_and(|n| n >= 1), "{cpus:?}");
        if has_line(Path::new("/proc/cpuinfo"), "model name") {
            assert!(cpus.model.is_some());
        }
        assert!(memory_bytes(&sources).is_some_and(|bytes| bytes > 1 << 20));
    }
}
