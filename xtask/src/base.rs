//! The image's base, cached: a Debian 12 root made by mmdebstrap from `image/` (the package
//! list, the hooks, `configure.sh`), packed as `00-base.squashfs`, with the kernel and the
//! drivers of the initrd (`image/initrd-modules` and what they depend on) beside it. It is what `cargo xtask image` puts under our package's layer and what
//! `cargo xtask deb` installs the package over in its install test.
//!
//! The cache lives outside the clone (`crate::cache_dir`), one directory per architecture and
//! definition (a hash of `image/`'s base inputs, the suite and the architecture), so that only
//! a change there rebuilds it (minutes; under qemu-user for arm64, tens of minutes). Bases of
//! other definitions stay while something uses them (other worktrees share the cache), and
//! go after a week unused.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{bail, Context, Result};

use crate::arch::Arch;
use crate::needs::{self, Need};
use crate::system;

const SUITE: &str = "bookworm";

/// The cached base of the image: `00-base.squashfs`, the kernel, the initrd's drivers and where the
/// space goes (`du.txt`).
pub struct Base {
    dir: PathBuf,
}

impl Base {
    pub fn squashfs(&self) -> PathBuf {
        self.dir.join("00-base.squashfs")
    }

    pub fn kernel(&self) -> PathBuf {
        self.dir.join("vmlinuz")
    }

    /// The initrd's drivers: `load-order` (paths under `kernel/`, dependencies first) and the
    /// modules it names, as in `/lib/modules/VERSION`.
    pub fn initrd_modules(&self) -> PathBuf {
        self.dir.join("initrd-modules")
    }

    /// Stamps the base as used now (for [`remove_unused`]); a cache that cannot be written is
    /// no reason to fail.
    fn used(&self) {
        let _ = std::fs::write(self.dir.join(USED), b"");
    }

    fn complete(&self) -> bool {
        [self.squashfs(), self.kernel(), self.initrd_modules().join("load-order")].iter().all(|f| f.is_file())
    }
}

/// Whether the base of `image/` as it is, for `arch`, is in the cache (building an arm64 one
/// takes tens of minutes).
pub fn is_cached(arch: Arch) -> Result<bool> {
    Ok(at(arch)?.complete())
}

fn at(arch: Arch) -> Result<Base> {
    let key = format!("{:016x}", system::fnv1a(definition(arch)?.as_bytes()));
    Ok(Base { dir: crate::cache_dir().join(format!("image-base-{}-{key}", arch.debian())) })
}

/// The base for `arch`, built when `image/` changed or the cache has none.
pub fn ensure(arch: Arch) -> Result<Base> {
    let cache = crate::cache_dir();
    let base = at(arch)?;
    let name = base.dir.file_name().unwrap_or_default().to_string_lossy().into_owned();
    if base.complete() {
        eprintln!("image: base {} (cached)", base.dir.display());
        base.used();
        return Ok(base);
    }
    // Whichever task asks first (`deb`'s install test runs over the base too).
    needs::ensure(Need::Base(arch), "the image's base")?;
    if arch != Arch::host() {
        crate::cross::ensure_binfmt(arch)?;
    }
    let started = Instant::now();
    let partial = cache.join(format!("{name}.partial"));
    let _ = std::fs::remove_dir_all(&partial);
    std::fs::create_dir_all(&partial)?;
    let root = partial.join("root");
    let image = crate::root().join("image");
    let packages = packages(arch)?;
    eprintln!("image: building the {} base with mmdebstrap ({SUITE}: {})", arch.debian(), packages.join(" "));
    system::run(
        Command::new("mmdebstrap")
            .args(["--quiet", "--variant=minbase", &format!("--arch={}", arch.debian())])
            .arg(format!("--include={}", packages.join(",")))
            .args([
                "--dpkgopt=path-exclude=/usr/share/man/*",
                "--dpkgopt=path-exclude=/usr/share/locale/*",
                "--dpkgopt=path-include=/usr/share/locale/locale.alias",
                "--dpkgopt=path-exclude=/usr/share/doc/*",
                "--dpkgopt=path-include=/usr/share/doc/*/copyright",
                "--dpkgopt=path-exclude=/usr/share/info/*",
            ])
            .arg(format!("--essential-hook={}", image.join("essential-hook.sh").display()))
            .arg(format!("--customize-hook={}", image.join("customize-hook.sh").display()))
            .arg(SUITE)
            .arg(&root)
            // With no mirror given, mmdebstrap uses Debian's with updates and security; an
            // absent stdin keeps it from reading sources from there.
            .stdin(Stdio::null()),
    )?;
    system::run(Command::new(image.join("configure.sh")).arg(&root))?;
    std::fs::copy(only_file(&root.join("boot"), "vmlinuz-")?, partial.join("vmlinuz"))?;
    system::run(
        Command::new("cp").arg("-a").arg(root.join("boot/initrd-modules")).arg(partial.join("initrd-modules")),
    )?;
    std::fs::write(partial.join("du.txt"), space(&root)?)?;
    squash(&root, &partial.join("00-base.squashfs"), Compression::Base)?;
    std::fs::remove_dir_all(&root)?;
    let _ = std::fs::remove_dir_all(&base.dir);
    std::fs::rename(&partial, &base.dir)?;
    base.used();
    remove_unused(&cache, arch)?;
    eprintln!("image: base built in {:.0?}: {}", started.elapsed(), base.dir.display());
    Ok(base)
}

/// How long a base of another definition of `image/` stays in the cache after its last use:
/// other worktrees and branches use theirs meanwhile, and `cargo xtask bench --boot` the
/// one it compares with. Removing one they still use would have them build it again (an
/// arm64 base takes tens of minutes), and then remove ours.
const KEPT_UNUSED: Duration = Duration::from_secs(7 * 24 * 3600);

/// Removes the complete bases of `arch` not used for [`KEPT_UNUSED`] (a base being built,
/// `.partial`, is another process's and stays).
fn remove_unused(cache: &Path, arch: Arch) -> Result<()> {
    let prefix = format!("image-base-{}-", arch.debian());
    for entry in std::fs::read_dir(cache)? {
        let base = Base { dir: entry?.path() };
        let name = base.dir.file_name().unwrap_or_default().to_string_lossy().into_owned();
        if !name.starts_with(&prefix) || name.ends_with(".partial") {
            continue;
        }
        // A base made before uses were stamped counts from when it was made.
        let last = std::fs::metadata(base.dir.join(USED)).or_else(|_| std::fs::metadata(&base.dir))?.modified()?;
        if SystemTime::now().duration_since(last).unwrap_or_default() > KEPT_UNUSED {
            eprintln!("image: removing {}, unused for over {} days", base.dir.display(), KEPT_UNUSED.as_secs() / 86400);
            std::fs::remove_dir_all(&base.dir).with_context(|| format!("remove {}", base.dir.display()))?;
        }
    }
    Ok(())
}

/// A file in each base whose time is its last use.
const USED: &str = "used";

/// The files of `image/` the base is made from; the others (the boot menu) are read at each
/// assembly and cost seconds.
const BASE_INPUTS: &[&str] = &["packages", "essential-hook.sh", "customize-hook.sh", "initrd-modules", "configure.sh"];

/// What defines the base: its inputs in `image/`, the suite and the architecture.
fn definition(arch: Arch) -> Result<String> {
    let dir = crate::root().join("image");
    let mut text = format!("suite={SUITE}\narch={}\n", arch.debian());
    for name in BASE_INPUTS {
        let path = dir.join(name);
        text.push_str(&format!(
            "--- {name}\n{}\n",
            std::fs::read_to_string(&path).with_context(|| format!("read {}", path.display()))?
        ));
    }
    Ok(text)
}

/// `image/packages`, without comments, for `arch`.
fn packages(arch: Arch) -> Result<Vec<String>> {
    let text = std::fs::read_to_string(crate::root().join("image/packages"))?;
    Ok(text
        .lines()
        .map(|l| l.split('#').next().unwrap_or_default().trim())
        .filter(|l| !l.is_empty())
        .map(|l| l.replace("@ARCH@", arch.debian()))
        .collect())
}

/// `du` of what takes the space in a root: kernel modules, firmware, systemd, libraries.
fn space(root: &Path) -> Result<String> {
    let kernel = std::fs::read_dir(root.join("lib/modules"))?
        .next()
        .context("no kernel modules")??
        .file_name()
        .to_string_lossy()
        .into_owned();
    let mut out = String::from("# du -sm of the base root (MiB), before mksquashfs; /boot is not in the squashfs\n");
    let parts = [
        ".".to_owned(),
        "boot".into(),
        format!("lib/modules/{kernel}"),
        format!("lib/modules/{kernel}/kernel/drivers/net"),
        format!("lib/modules/{kernel}/kernel/drivers/scsi"),
        format!("lib/modules/{kernel}/kernel/drivers/gpu"),
        "lib/firmware".into(),
        "usr/lib/systemd".into(),
        "usr/lib/x86_64-linux-gnu".into(),
        "usr/lib/aarch64-linux-gnu".into(),
        "usr/share".into(),
        "var/lib/dpkg".into(),
        "usr/bin".into(),
    ];
    for part in parts.iter().filter(|p| root.join(p).exists()) {
        let line = system::output(Command::new("du").args(["-sm", part]).current_dir(root))?;
        out.push_str(&line);
    }
    Ok(out)
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

pub enum Compression {
    /// zstd: 7 times faster to build than xz for 20% more (FINDINGS of the prototype, and
    /// BENCHMARKS.md), and as fast to boot.
    Base,
    /// Our package and the trees of `--layer`: zstd at its highest level. As small as xz
    /// within a few percent (what a slow virtual-media link must carry) and several times
    /// cheaper to decompress: with xz, paging the dispatcher in cost 3 of its 4 s under TCG.
    /// Extended attributes stay: an overlay's upper directory marks whiteouts with them.
    Layer,
}

/// `mksquashfs TREE OUT`, everything owned by root, the pseudo file systems left out.
pub fn squash(tree: &Path, out: &Path, compression: Compression) -> Result<()> {
    let _ = std::fs::remove_file(out);
    let mut cmd = Command::new("nice");
    cmd.args(["-n", "10", "mksquashfs"]).arg(tree).arg(out).args(["-noappend", "-no-progress", "-quiet"]);
    match compression {
        // No extended attributes: the OS needs none (no file capabilities, no ACLs) and the
        // build host's would leak in.
        Compression::Base => cmd.args(["-comp", "zstd", "-Xcompression-level", "15", "-b", "128K", "-no-xattrs"]),
        Compression::Layer => cmd.args(["-comp", "zstd", "-Xcompression-level", "19"]),
    };
    cmd.args(["-wildcards", "-e", "boot/*", "proc/*", "sys/*", "dev/*", "run/*", "tmp/*"]);
    system::run(cmd.stdout(Stdio::null()))
}
