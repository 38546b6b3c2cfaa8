//! What the machine says about its own trust, from sysfs: Secure Boot (the firmware's
//! `SecureBoot` EFI variable), the kernel's lockdown mode, and the SMBIOS system UUID that a
//! bound recipe names. The sysfs root is a value so that tests give a directory of their own.

use std::path::{Path, PathBuf};

use super::read_file;

/// The EFI global variable GUID's `SecureBoot`, under `firmware/efi/efivars`.
const SECURE_BOOT_VAR: &str = "SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c";

/// Every sysfs file read here is a few bytes; this caps a surprise.
const MAX_SYSFS_BYTES: u64 = 4096;

/// The lockdown modes `/sys/kernel/security/lockdown` can name.
pub const LOCKDOWN_MODES: [&str; 3] = ["none", "integrity", "confidentiality"];

#[derive(Debug, Clone)]
pub struct Sysfs {
    root: PathBuf,
}

impl Default for Sysfs {
    fn default() -> Self {
        Sysfs { root: "/sys".into() }
    }
}

impl Sysfs {
    pub fn at(root: &Path) -> Sysfs {
        Sysfs { root: root.to_owned() }
    }

    /// The root (`/sys`), where the disks' identity is read too.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Whether the firmware is UEFI: the kernel was booted by it (`firmware/efi`), rather than
    /// by a BIOS.
    pub fn uefi(&self) -> bool {
        self.root.join("firmware/efi").is_dir()
    }

    /// `None` where the firmware is not UEFI, or its variables cannot be seen (efivarfs not
    /// mounted). Under UEFI without the variable (firmware without Secure Boot), `false`.
    pub fn secure_boot(&self) -> Option<bool> {
        if !self.uefi() {
            return None;
        }
        let vars = self.root.join("firmware/efi/efivars");
        match read_file(&vars.join(SECURE_BOOT_VAR), MAX_SYSFS_BYTES) {
            // Four bytes of attributes, then the value.
            Ok(bytes) => bytes.get(4).map(|&value| value == 1),
            Err(_) => std::fs::read_dir(&vars).ok()?.next().is_some().then_some(false),
        }
    }

    /// The bracketed word of `kernel/security/lockdown` (`none [integrity] confidentiality`).
    pub fn lockdown(&self) -> Option<String> {
        let bytes = read_file(&self.root.join("kernel/security/lockdown"), MAX_SYSFS_BYTES).ok()?;
        let text = std::str::from_utf8(&bytes).ok()?;
        let word = text.split_whitespace().find_map(|w| w.strip_prefix('[')?.strip_suffix(']'))?;
        LOCKDOWN_MODES.contains(&word).then(|| word.to_owned())
    }

    /// The SMBIOS system UUID in lower case, if readable and shaped like a UUID.
    pub fn machine_uuid(&self) -> Option<String> {
        let bytes = read_file(&self.root.join("class/dmi/id/product_uuid"), MAX_SYSFS_BYTES).ok()?;
        let uuid = std::str::from_utf8(&bytes).ok()?.trim().to_ascii_lowercase();
        is_uuid(&uuid).then_some(uuid)
    }
}

/// What SMBIOS says when a machine has no UUID: all zeros ("no ID") or all FF ("not set"),
/// in either case. A machine that says so has no identity of its own: every machine without
/// one says the same, so a recipe bound to it would run on all of them.
pub fn no_identity(uuid: &str) -> Option<&'static str> {
    let digits = || uuid.bytes().filter(|&b| b != b'-');
    if !is_uuid(uuid) {
        None
    } else if digits().all(|b| b == b'0') {
        Some("no ID")
    } else if digits().all(|b| b.eq_ignore_ascii_case(&b'f')) {
        Some("not set")
    } else {
        None
    }
}

/// `8-4-4-4-12` hexadecimal digits.
pub fn is_uuid(text: &str) -> bool {
    let groups: Vec<&str> = text.split('-').collect();
    groups.iter().map(|g| g.len()).eq([8, 4, 4, 4, 12])
        && groups.iter().all(|g| g.bytes().all(|b| b.is_ascii_hexdigit()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn put(root: &Path, path: &str, bytes: &[u8]) {
        let path = root.join(path);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, bytes).unwrap();
    }

    #[test]
    fn no_efi_is_null_and_the_variable_decides_under_efi() {
        let dir = tempfile::tempdir().unwrap();
        let sys = Sysfs::at(dir.path());
        assert_eq!(sys.secure_boot(), None);
        fs::create_dir_all(dir.path().join("firmware/efi/efivars")).unwrap();
        assert_eq!(sys.secure_boot(), None, "efivarfs not mounted: unknown");
        put(dir.path(), "firmware/efi/efivars/Boot0000-8be4df61-93ca-11d2-aa0d-00e098032b8c", b"x");
        assert_eq!(sys.secure_boot(), Some(false), "UEFI without the variable");
        put(dir.path(), &format!("firmware/efi/efivars/{SECURE_BOOT_VAR}"), &[6, 0, 0, 0, 1]);
        assert_eq!(sys.secure_boot(), Some(true));
        put(dir.path(), &format!("firmware/efi/efivars/{SECURE_BOOT_VAR}"), &[6, 0, 0, 0, 0]);
        assert_eq!(sys.secure_boot(), Some(false));
    }

    #[test]
    fn lockdown_is_the_bracketed_word() {
        let dir = tempfile::tempdir().unwrap();
        let sys = Sysfs::at(dir.path());
        assert_eq!(sys.lockdown(), None);
        put(dir.path(), "kernel/security/lockdown", b"none [integrity] confidentiality\n");
        assert_eq!(sys.lockdown().as_deref(), Some("integrity"));
        put(dir.path(), "kernel/security/lockdown", b"[none] integrity confidentiality\n");
        assert_eq!(sys.lockdown().as_deref(), Some("none"));
        put(dir.path(), "kernel/security/lockdown", b"none integrity [bogus]\n");
        assert_eq!(sys.lockdown(), None);
    }

    #[test]
    fn the_uuid_is_read_in_lower_case() {
        let dir = tempfile::tempdir().unwrap();
        let sys = Sysfs::at(dir.path());
        assert_eq!(sys.machine_uuid(), None);
        put(dir.path(), "class/dmi/id/product_uuid", b"4C4C4544-0042-3510-8052-B4C04F4D4E31\n");
        assert_eq!(sys.machine_uuid().as_deref(), Some("4c4c4544-0042-3510-8052-b4c04f4d4e31"));
        put(dir.path(), "class/dmi/id/product_uuid", b"not a uuid\n");
        assert_eq!(sys.machine_uuid(), None);
    }

    #[test]
    fn smbios_says_no_id_and_not_set_with_all_00_and_all_ff() {
        assert_eq!(no_identity("00000000-0000-0000-0000-000000000000"), Some("no ID"));
        assert_eq!(no_identity("ffffffff-ffff-ffff-ffff-ffffffffffff"), Some("not set"));
        assert_eq!(no_identity("FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF"), Some("not set"));
        for uuid in ["00000000-0000-0000-0000-000000000001", "4c4c4544-0042-3510-8052-b4c04f4d4e31", "", "0", "f"] {
            assert_eq!(no_identity(uuid), None, "{uuid}");
        }
        // Read as any UUID: what it means is the check's to say.
        let dir = tempfile::tempdir().unwrap();
        put(dir.path(), "class/dmi/id/product_uuid", b"FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF\n");
        assert_eq!(Sysfs::at(dir.path()).machine_uuid().as_deref(), Some("ffffffff-ffff-ffff-ffff-ffffffffffff"));
    }
}
