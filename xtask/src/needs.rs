//! Which task needs which Debian packages: the one table of them ([`TABLE`]). A task asks for
//! what it needs ([`ensure`]) before it needs it, whichever task a user runs first on a fresh
//! machine; what is missing is installed by apt (announced, `--no-install-recommends`), so a
//! package that apt would only recommend is a row of its own here.
//!
//! A row says what proves the package present: a command on PATH, or an absolute path for a
//! file (a library, firmware) that no command stands for.

use crate::arch::Arch;
use crate::system;
use anyhow::Result;

/// What a piece of work needs from the build machine. Tasks are made of these: `deb` is
/// `Link` + `Lint` + `Base` (its install test runs over the image's base), `image` is `Base`
/// + `Image`, `vm-test` is `Image` + `Boot`, `ci` all of them for both architectures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    /// The product's tests: a real dbus-daemon, squashfs for the loop mount, xorriso to read
    /// task ISOs back, systemd-analyze and journalctl, ssh-keygen to sign and cross-check
    /// signatures, Python for the journal listener of tests/run.rs and, with its `jsonschema`
    /// (and `rfc3987`, which it only recommends, for URIs), the stock validator schema version
    /// 2 is held to (tests/compat.rs), mkfs.ext4, OpenIPMI's simulator and ipmitool.
    Tests,
    /// Linking the static binary for an architecture: the C toolchain and its static C
    /// library (for arm64 a Recommends of the cross compiler, so named here).
    Link(Arch),
    /// Running the architecture's programs here through qemu-user and binfmt_misc (a foreign
    /// architecture only).
    Emulate(Arch),
    /// The image's cached base: mmdebstrap (and for a foreign architecture arch-test, which
    /// mmdebstrap only recommends and refuses to start without), squashfs.
    Base(Arch),
    /// Assembling the image: grub-mkrescue with its BIOS platform (amd64), the ESP's FAT
    /// tools, xorriso, xz for the initrd, Debian's archive keyring (the signed EFI packages
    /// are fetched with a private apt: `efi`).
    Image(Arch),
    /// lintian on the package.
    Lint,
    /// Booting the VM tests: UEFI firmware and task ISOs (QEMU itself is unpacked apart,
    /// `vm::qemu`, because of the qemu-utils conflict).
    Boot(Arch),
    /// Signing files with stock OpenSSH (`ssh-keygen -Y sign`): the fuzz seeds, and the VM
    /// case whose recipe changes after signing (`media build` signs the others itself).
    Sign,
    /// `cargo xtask bench`: the private bus, the loop mount, GNU time, valgrind, the other
    /// checkers (check-jsonschema in a Python venv, ajv-cli with npm), xorriso beside `media
    /// build` and `media embed`, ext4 and XFS for the per-server ISOs' stores.
    Bench,
    /// `cargo xtask fresh-check`: a clean Debian root.
    FreshRoot,
    /// VM cases with a BMC outside the guest: OpenIPMI's simulator and ipmitool to read its SEL.
    Bmc,
    /// `cargo xtask foreign-image`: Debian's live-build (debootstrap comes as its dependency;
    /// what it only recommends, the build of an ISO does not use on the host).
    LiveBuild,
}

struct Row {
    need: Need,
    probe: &'static str,
    package: &'static str,
}

const fn row(need: Need, probe: &'static str, package: &'static str) -> Row {
    Row { need, probe, package }
}

use Arch::{Amd64, Arm64};
use Need::*;

/// Every Debian package a task installs, and what it is for.
const TABLE: &[Row] = &[
    row(Tests, "dbus-daemon", "dbus"),
    row(Tests, "mksquashfs", "squashfs-tools"),
    row(Tests, "xorriso", "xorriso"),
    row(Tests, "systemd-analyze", "systemd"),
    row(Tests, "ssh-keygen", "openssh-client"),
    row(Tests, "python3", "python3"),
    // The controller's page's shell reader, run as written (tests/readers.rs).
    row(Tests, "jq", "jq"),
    row(Tests, "/usr/lib/python3/dist-packages/jsonschema/__init__.py", "python3-jsonschema"),
    row(Tests, "/usr/lib/python3/dist-packages/rfc3987.py", "python3-rfc3987"),
    row(Tests, "mkfs.ext4", "e2fsprogs"),
    row(Tests, "ipmi_sim", "openipmi"),
    row(Tests, "ipmitool", "ipmitool"),
    row(Link(Amd64), "x86_64-linux-gnu-gcc", "gcc"),
    row(Link(Amd64), "/usr/lib/x86_64-linux-gnu/rcrt1.o", "libc6-dev"),
    row(Link(Arm64), "aarch64-linux-gnu-gcc", "gcc-aarch64-linux-gnu"),
    row(Link(Arm64), "/usr/aarch64-linux-gnu/lib/rcrt1.o", "libc6-dev-arm64-cross"),
    row(Emulate(Amd64), "qemu-x86_64-static", "qemu-user-static"),
    row(Emulate(Amd64), "update-binfmts", "binfmt-support"),
    row(Emulate(Arm64), "qemu-aarch64-static", "qemu-user-static"),
    row(Emulate(Arm64), "update-binfmts", "binfmt-support"),
    row(Base(Amd64), "mmdebstrap", "mmdebstrap"),
    row(Base(Amd64), "mksquashfs", "squashfs-tools"),
    row(Base(Arm64), "mmdebstrap", "mmdebstrap"),
    row(Base(Arm64), "mksquashfs", "squashfs-tools"),
    row(Base(Arm64), "arch-test", "arch-test"),
    row(Image(Amd64), "grub-mkrescue", "grub-common"),
    row(Image(Amd64), "/usr/lib/grub/i386-pc/cdboot.img", "grub-pc-bin"),
    row(Image(Amd64), "mformat", "mtools"),
    row(Image(Amd64), "xorriso", "xorriso"),
    row(Image(Amd64), "mksquashfs", "squashfs-tools"),
    row(Image(Amd64), "xz", "xz-utils"),
    row(Image(Amd64), "/usr/share/keyrings/debian-archive-keyring.gpg", "debian-archive-keyring"),
    row(Image(Arm64), "/usr/share/keyrings/debian-archive-keyring.gpg", "debian-archive-keyring"),
    row(Image(Arm64), "mformat", "mtools"),
    row(Image(Arm64), "xorriso", "xorriso"),
    row(Image(Arm64), "mksquashfs", "squashfs-tools"),
    row(Image(Arm64), "xz", "xz-utils"),
    row(Lint, "lintian", "lintian"),
    row(Boot(Amd64), "/usr/share/OVMF/OVMF_CODE_4M.fd", "ovmf"),
    row(Boot(Amd64), "xorriso", "xorriso"),
    row(Boot(Arm64), "/usr/share/AAVMF/AAVMF_CODE.fd", "qemu-efi-aarch64"),
    row(Boot(Arm64), "xorriso", "xorriso"),
    row(Sign, "ssh-keygen", "openssh-client"),
    row(Bench, "dbus-daemon", "dbus"),
    row(Bench, "mksquashfs", "squashfs-tools"),
    row(Bench, "losetup", "mount"),
    row(Bench, "/usr/bin/time", "time"),
    row(Bench, "valgrind", "valgrind"),
    row(Bench, "xorriso", "xorriso"),
    row(Bench, "mkfs.ext4", "e2fsprogs"),
    row(Bench, "mkfs.xfs", "xfsprogs"),
    row(Bench, "npm", "npm"),
    row(Bench, "python3", "python3"),
    row(Bench, "python3", "python3-venv"),
    row(FreshRoot, "mmdebstrap", "mmdebstrap"),
    row(Bmc, "ipmi_sim", "openipmi"),
    row(Bmc, "ipmitool", "ipmitool"),
    row(LiveBuild, "lb", "live-build"),
    row(LiveBuild, "debootstrap", "debootstrap"),
];

/// Installs what `need` asks for and the machine lacks, saying what for.
pub fn ensure(need: Need, purpose: &str) -> Result<()> {
    let pairs: Vec<(&str, &str)> = TABLE.iter().filter(|r| r.need == need).map(|r| (r.probe, r.package)).collect();
    system::ensure_commands(purpose, &pairs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_need_has_rows_and_no_row_is_doubled() {
        let needs = [Tests, Lint, Sign, Bench, FreshRoot, Bmc, LiveBuild]
            .into_iter()
            .chain(Arch::ALL.into_iter().flat_map(|a| [Link(a), Emulate(a), Base(a), Image(a), Boot(a)]));
        for need in needs {
            assert!(TABLE.iter().any(|r| r.need == need), "{need:?} has no row");
        }
        for (i, a) in TABLE.iter().enumerate() {
            let twin = TABLE[i + 1..].iter().any(|b| a.need == b.need && a.package == b.package);
            assert!(!twin, "{:?} {} is listed twice", a.need, a.package);
        }
    }

    #[test]
    fn what_apt_only_recommends_is_named() {
        // Found on a fresh machine: without these, arm64 links nothing and mmdebstrap
        // refuses a foreign architecture.
        let has = |need, package| TABLE.iter().any(|r| r.need == need && r.package == package);
        assert!(has(Link(Arm64), "libc6-dev-arm64-cross"));
        assert!(has(Base(Arm64), "arch-test"));
    }
}
