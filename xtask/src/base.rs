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

/// The cached base of the image: its squashfs layers ([`LAYERS`]), the kernel, the initrd's
/// drivers and where the space goes (`du.txt`).
pub struct Base {
    dir: PathBuf,
}

/// The base's layers, bottom first (the initrd stacks `/live/*.squashfs` in name order), and
/// how each is packed. Each file of the root is in one of them. Chosen by the bytes a boot
/// reads from the medium before the dispatcher's result and by the ISO's size (BENCHMARKS.md,
/// The boot over virtual media): what the boot reads lies in small blocks, where a page fault
/// costs little beyond what it needs; the rest in large ones, which compress best.
pub const LAYERS: [(&str, Compression); 3] = [
    // Everything else: most of the root, never read before the dispatch.
    ("00-base.squashfs", Compression::Cold),
    // The kernel's drivers (`/usr/lib/modules/VERSION/kernel`): udev loads a few dozen at each
    // boot, which ones depends on the server, so none is singled out.
    ("01-modules.squashfs", Compression::Modules),
    // What the boot reads before the dispatcher's result: `image/boot-files`.
    ("02-boot.squashfs", Compression::Hot),
];

impl Base {
    /// The squashfs layers, bottom first, and their names.
    pub fn layers(&self) -> Vec<(PathBuf, String)> {
        LAYERS.iter().map(|(name, _)| (self.dir.join(name), (*name).to_owned())).collect()
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
        let files = [self.kernel(), self.initrd_modules().join("load-order")];
        self.layers().into_iter().map(|(path, _)| path).chain(files).all(|f| f.is_file())
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
    split(&root, arch, &partial)?;
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

/// Packs `root` into the base's [`LAYERS`] in `out`: the files `image/boot-files` names, the
/// kernel's other drivers, the rest. Each of the first two sets is staged with hard links
/// (owners, modes and the directories above each file kept) and packed apart; the rest is the
/// root without them.
fn split(root: &Path, arch: Arch, out: &Path) -> Result<()> {
    let patterns = boot_files()?;
    let mut hot = vec![];
    let mut todo = vec![PathBuf::new()];
    while let Some(dir) = todo.pop() {
        for entry in std::fs::read_dir(root.join(&dir)).with_context(|| format!("read {}", dir.display()))? {
            let entry = entry?;
            let path = dir.join(entry.file_name());
            let kind = entry.file_type()?;
            let pseudo = ["proc", "sys", "dev", "run", "tmp", "boot"].iter().any(|d| path == Path::new(d));
            if kind.is_dir() && !pseudo {
                todo.push(path);
            } else if kind.is_file() && patterns.iter().any(|p| matches(p, &path)) {
                hot.push(path);
            }
        }
    }
    hot.sort();
    let modules = std::fs::read_dir(root.join("usr/lib/modules"))?
        .map(|e| Ok(Path::new("usr/lib/modules").join(e?.file_name()).join("kernel")))
        .collect::<Result<Vec<_>>>()?;
    let stage = |name: &str, paths: &[PathBuf]| -> Result<PathBuf> {
        let dir = out.join(name);
        std::fs::create_dir_all(&dir)?;
        for chunk in paths.chunks(500) {
            let mut cp = Command::new("cp");
            cp.args(["-a", "-l", "--parents", "-t"]).arg(&dir).args(chunk).current_dir(root);
            system::run(&mut cp)?;
        }
        Ok(dir)
    };
    let boot = stage("boot-stage", &hot)?;
    let kernel = stage("modules-stage", &modules)?;
    for file in hot.iter().filter(|f| modules.iter().any(|m| f.starts_with(m))) {
        std::fs::remove_file(kernel.join(file))?;
    }
    let excluded = out.join("cold-excludes");
    let lines: Vec<String> = hot.iter().chain(&modules).map(|p| wildcard_literal(&p.to_string_lossy())).collect();
    std::fs::write(&excluded, lines.join("\n") + "\n")?;
    for ((name, compression), tree) in LAYERS.iter().zip([root, &kernel, &boot]) {
        let exclude = (tree == root).then_some(excluded.as_path());
        squash(tree, &out.join(name), *compression, arch, exclude)?;
    }
    std::fs::remove_dir_all(&boot)?;
    std::fs::remove_dir_all(&kernel)?;
    std::fs::remove_file(&excluded)?;
    eprintln!("image: {} files of the base in its boot layer (image/boot-files)", hot.len());
    Ok(())
}

/// `image/boot-files`: one path of the root a line, `*` standing for any characters within one
/// component; `#` comments.
fn boot_files() -> Result<Vec<String>> {
    let text = std::fs::read_to_string(crate::root().join("image/boot-files")).context("read image/boot-files")?;
    Ok(text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).map(String::from).collect())
}

/// Whether `path` matches `pattern` component by component, `*` within a component standing
/// for any characters.
fn matches(pattern: &str, path: &Path) -> bool {
    let parts: Vec<String> = path.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    let globs: Vec<&str> = pattern.split('/').collect();
    globs.len() == parts.len() && globs.iter().zip(&parts).all(|(glob, part)| component_matches(glob, part))
}

fn component_matches(glob: &str, text: &str) -> bool {
    match glob.split_once('*') {
        None => glob == text,
        Some((head, tail)) => {
            text.starts_with(head)
                && (head.len()..=text.len())
                    .filter(|&at| text.is_char_boundary(at))
                    .any(|at| component_matches(tail, &text[at..]))
        }
    }
}

/// A path as a mksquashfs wildcard that matches it alone.
fn wildcard_literal(path: &str) -> String {
    path.chars().flat_map(|c| if "*?[]\\".contains(c) { vec!['\\', c] } else { vec![c] }).collect()
}

/// The files of `image/` the base is made from; the others (the boot menu) are read at each
/// assembly and cost seconds.
const BASE_INPUTS: &[&str] =
    &["packages", "essential-hook.sh", "customize-hook.sh", "initrd-modules", "configure.sh", "boot-files"];

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

/// How a squashfs image is packed: the block size chosen by what is read from it at boot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    /// The base's bulk: xz in 1 MiB blocks, the smallest (the ISO's budget is 80 MiB). A page
    /// of it costs a whole block from the medium, so nothing the boot reads is here.
    Cold,
    /// The kernel's drivers: xz in 128 KiB blocks; 1 MiB ones would cost a server about a
    /// quarter MiB from the medium for each driver udev loads at boot, 32 KiB ones 2 MB more
    /// in the ISO.
    Modules,
    /// What the boot reads: xz in 32 KiB blocks, read about as they are needed (the initrd
    /// cuts the medium's readahead to a page). 16 and 8 KiB blocks read more: they compress
    /// worse (measured, BENCHMARKS.md).
    Hot,
    /// Our package's layer and the trees of `--layer`: as `Hot` (the dispatcher runs before
    /// its result), with their extended attributes.
    Layer,
}

/// `mksquashfs TREE OUT` for `arch`, the pseudo file systems and the paths of `exclude` (a
/// file of wildcards, one a line) left out. Extended attributes stay only in a `Layer`, whose
/// upper directory marks an overlay's whiteouts with them; the base's root has none the OS
/// needs (no file capabilities, no ACLs) and the build host's would leak in.
pub fn squash(tree: &Path, out: &Path, compression: Compression, arch: Arch, exclude: Option<&Path>) -> Result<()> {
    let _ = std::fs::remove_file(out);
    let mut cmd = Command::new("nice");
    cmd.args(["-n", "10", "mksquashfs"]).arg(tree).arg(out).args([
        "-noappend",
        "-no-progress",
        "-quiet",
        "-comp",
        "xz",
    ]);
    // x86's branch filter makes its programs a tenth smaller; the kernel's drivers are not
    // linked yet and gain nothing from it, and squashfs-tools 4.5 has none for arm64.
    if arch == Arch::Amd64 && compression != Compression::Modules {
        cmd.args(["-Xbcj", "x86"]);
    }
    cmd.args(match compression {
        Compression::Cold => ["-b", "1M", "-no-xattrs"],
        Compression::Modules => ["-b", "128K", "-no-xattrs"],
        Compression::Hot => ["-b", "32K", "-no-xattrs"],
        Compression::Layer => ["-b", "32K", "-xattrs"],
    });
    // A tree of `--layer` may belong to whoever made it; in the image, root owns all.
    cmd.args(match compression {
        Compression::Layer => &["-all-root"][..],
        _ => &[],
    });
    cmd.arg("-wildcards");
    if let Some(exclude) = exclude {
        cmd.arg("-ef").arg(exclude);
    }
    cmd.args(["-e", "boot/*", "proc/*", "sys/*", "dev/*", "run/*", "tmp/*"]);
    system::run(cmd.stdout(Stdio::null()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boot_files_match_by_component() {
        let path = Path::new("usr/lib/x86_64-linux-gnu/libc.so.6");
        assert!(matches("usr/lib/*-linux-gnu/libc.so.6", path));
        assert!(matches("usr/lib/*/*", path));
        assert!(!matches("usr/lib/*", path), "a star stays within its component");
        assert!(!matches("usr/lib/*-linux-gnu/libc.so", path));
        assert!(matches("usr/lib/modules/*/modules.*", Path::new("usr/lib/modules/6.1.0-56-amd64/modules.dep.bin")));
        assert!(matches(
            "usr/lib/*-linux-gnu/ld-linux-*",
            Path::new("usr/lib/aarch64-linux-gnu/ld-linux-aarch64.so.1")
        ));
        assert!(matches("usr/bin/[", Path::new("usr/bin/[")));
    }

    #[test]
    fn a_path_is_a_wildcard_of_itself() {
        assert_eq!(wildcard_literal("usr/bin/["), "usr/bin/\\[");
        assert_eq!(wildcard_literal("a*b?c\\d"), "a\\*b\\?c\\\\d");
    }
}
