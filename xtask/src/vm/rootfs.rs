//! The guest's system: a minimal Debian root filesystem, built once with mmdebstrap and kept
//! in the cache (CI starts from a clean clone), and per run a disk image of it with the
//! current binary, units and test stand-ins added, so a code change never rebuilds the
//! root filesystem.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context, Result};

use crate::system;

const SUITE: &str = "bookworm";

/// What the guest needs: systemd as PID 1 with udev (device discovery, /dev/virtio-ports) and
/// dbus (the dispatcher's StartUnit), the cloud kernel, and an initramfs to find the root by
/// label. Everything else the tests run (sh, coreutils' env, stat, base64, timeout) is in
/// the essential set.
const PACKAGES: &[&str] = &["systemd", "systemd-sysv", "dbus", "udev", "linux-image-cloud-amd64", "initramfs-tools"];

/// mmdebstrap's options besides the packages. Documentation and translations are left out:
/// smaller to copy, faster to pack into the image.
const OPTIONS: &[&str] = &[
    "--variant=essential",
    "--aptopt=APT::Install-Recommends \"false\"",
    "--dpkgopt=path-exclude=/usr/share/man/*",
    "--dpkgopt=path-exclude=/usr/share/doc/*",
    "--dpkgopt=path-exclude=/usr/share/locale/*",
];

/// Size of the system disk image (sparse; the root filesystem fills about 300 MB of it).
const IMAGE_BYTES: u64 = 2 << 30;

/// The label the kernel command line names (`root=LABEL=vmroot`).
pub const ROOT_LABEL: &str = "vmroot";

/// A built root filesystem in the cache: `root/`, and the kernel and initramfs beside it.
pub struct Rootfs {
    dir: PathBuf,
}

impl Rootfs {
    pub fn root(&self) -> PathBuf {
        self.dir.join("root")
    }

    pub fn kernel(&self) -> PathBuf {
        self.dir.join("vmlinuz")
    }

    pub fn initrd(&self) -> PathBuf {
        self.dir.join("initrd.img")
    }
}

/// The cached root filesystem for the current definition, built if missing. The cache entry
/// is named by a hash of everything that defines it (suite, packages, options), so changing
/// any of them builds a new one; stale entries are removed.
pub fn ensure() -> Result<Rootfs> {
    let cache = crate::cache_dir();
    let name = format!("rootfs-{:016x}", fnv1a(definition().as_bytes()));
    let rootfs = Rootfs { dir: cache.join(&name) };
    if rootfs.kernel().is_file() && rootfs.initrd().is_file() && rootfs.root().is_dir() {
        eprintln!("vm: root filesystem {} (cached)", rootfs.dir.display());
        return Ok(rootfs);
    }
    system::ensure_commands("the guest root filesystem", &[("mmdebstrap", "mmdebstrap")])?;
    let started = Instant::now();
    let partial = cache.join(format!("{name}.partial"));
    let _ = std::fs::remove_dir_all(&partial);
    std::fs::create_dir_all(&partial)?;
    eprintln!("vm: building the guest root filesystem ({SUITE}: {}) with mmdebstrap", PACKAGES.join(" "));
    system::run(
        Command::new("mmdebstrap")
            .args(["--quiet"])
            .args(OPTIONS)
            .arg(format!("--include={}", PACKAGES.join(",")))
            .arg(SUITE)
            .arg(partial.join("root"))
            // With no mirror given, mmdebstrap uses Debian's with updates and security; an
            // absent stdin keeps it from reading sources from there.
            .stdin(Stdio::null()),
    )?;
    let boot = partial.join("root/boot");
    std::fs::copy(only_file(&boot, "vmlinuz-")?, partial.join("vmlinuz"))?;
    std::fs::copy(only_file(&boot, "initrd.img-")?, partial.join("initrd.img"))?;
    let _ = std::fs::remove_dir_all(&rootfs.dir);
    std::fs::rename(&partial, &rootfs.dir)?;
    for entry in std::fs::read_dir(&cache)? {
        let path = entry?.path();
        let stale = path.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("rootfs-") && n != name);
        if stale {
            std::fs::remove_dir_all(&path).with_context(|| format!("remove stale {}", path.display()))?;
        }
    }
    eprintln!("vm: root filesystem built in {:.0?}: {}", started.elapsed(), rootfs.dir.display());
    Ok(rootfs)
}

fn definition() -> String {
    format!("suite={SUITE}\npackages={}\noptions={}\n", PACKAGES.join(" "), OPTIONS.join("\n"))
}

/// FNV-1a, 64 bits: stable across Rust versions (unlike `DefaultHasher`), enough for a key.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

fn only_file(dir: &Path, prefix: &str) -> Result<PathBuf> {
    let mut found = vec![];
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(prefix)) {
            found.push(path);
        }
    }
    match found.as_slice() {
        [one] => Ok(one.clone()),
        _ => bail!("expected one {prefix}* in {}, found {}", dir.display(), found.len()),
    }
}

/// Writes the system disk image: the cached root filesystem plus what this checkout makes
/// (the dist binary, `systemd/*.service`, the guest side of the tests in `tests/vm-guest/`),
/// with every installed unit enabled as its `[Install]` section says. No loop mount:
/// `mkfs.ext4 -d` fills the filesystem from a staging directory.
pub fn system_image(rootfs: &Rootfs, binary: &Path, image: &Path) -> Result<()> {
    let started = Instant::now();
    let root = crate::root();
    let stage = image.with_extension("stage");
    let _ = std::fs::remove_dir_all(&stage);
    // Hard links make the copy instant; everything added below replaces entries rather than
    // writing through them, so the cache is never touched.
    let linked = Command::new("cp").arg("-al").arg(rootfs.root()).arg(&stage).stderr(Stdio::null()).status()?;
    if !linked.success() {
        let _ = std::fs::remove_dir_all(&stage);
        system::run(Command::new("cp").arg("-a").arg(rootfs.root()).arg(&stage))?;
    }
    let mut units = vec![];
    copy_tree(&root.join("tests/vm-guest"), &stage, &mut units)?;
    put(binary, &stage.join("usr/bin/provision-dispatcher"))?;
    for entry in std::fs::read_dir(root.join("systemd"))? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "service") {
            let dest = stage.join("etc/systemd/system").join(path.file_name().expect("a file"));
            put(&path, &dest)?;
            units.push(dest);
        }
    }
    for unit in &units {
        enable(&stage, unit)?;
    }
    let _ = std::fs::remove_file(image);
    File::create(image)?.set_len(IMAGE_BYTES)?;
    system::run(Command::new("mkfs.ext4").args(["-q", "-F", "-L", ROOT_LABEL, "-d"]).arg(&stage).arg(image))?;
    std::fs::remove_dir_all(&stage)?;
    eprintln!("vm: system disk image in {:.1?}: {}", started.elapsed(), image.display());
    Ok(())
}

/// Copies the tree `from` into `to` (the README at its top stays behind), noting unit files.
fn copy_tree(from: &Path, to: &Path, units: &mut Vec<PathBuf>) -> Result<()> {
    for entry in std::fs::read_dir(from).with_context(|| format!("read {}", from.display()))? {
        let entry = entry?;
        let (src, dest) = (entry.path(), to.join(entry.file_name()));
        if entry.file_type()?.is_dir() {
            std::fs::create_dir_all(&dest)?;
            copy_tree(&src, &dest, units)?;
        } else if entry.file_name() != "README.md" {
            put(&src, &dest)?;
            if dest.parent().is_some_and(|p| p.ends_with("etc/systemd/system")) {
                units.push(dest);
            }
        }
    }
    Ok(())
}

/// Copies a file with its permissions, replacing (never writing through) what is there.
fn put(src: &Path, dest: &Path) -> Result<()> {
    std::fs::create_dir_all(dest.parent().expect("an absolute path"))?;
    let _ = std::fs::remove_file(dest);
    std::fs::copy(src, dest).with_context(|| format!("copy {} to {}", src.display(), dest.display()))?;
    Ok(())
}

/// `systemctl enable` for a unit in /etc/systemd/system: a symlink in each `WantedBy=`
/// target's `.wants/`.
fn enable(stage: &Path, unit: &Path) -> Result<()> {
    let text = std::fs::read_to_string(unit)?;
    let name = unit.file_name().expect("a file").to_string_lossy();
    let mut section = "";
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            section = line;
        } else if let (Some(targets), "[Install]") = (line.strip_prefix("WantedBy="), section) {
            for target in targets.split_whitespace() {
                let wants = stage.join("etc/systemd/system").join(format!("{target}.wants"));
                std::fs::create_dir_all(&wants)?;
                let link = wants.join(name.as_ref());
                let _ = std::fs::remove_file(&link);
                std::os::unix::fs::symlink(Path::new("/etc/systemd/system").join(name.as_ref()), link)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_is_the_published_function() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}
