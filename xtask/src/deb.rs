//! `cargo xtask deb [--target TRIPLE]`: the Debian package,
//! `target/debian/provision-dispatcher_VERSION_ARCH.deb`, then lintian on it and an install,
//! reinstall and purge with dpkg in a clean Debian 12 root.
//!
//! Built with `dpkg-deb` from a tree staged here, not with cargo-deb: the package is a static
//! binary and a handful of files, dpkg-deb is on every Debian machine (cargo-deb would be one
//! more tool to compile before the first package), and staging the tree by hand keeps every
//! path, mode and maintainer script in plain sight. The sources of what is not compiled live
//! in `debian/` (man page, catalog, preset, copyright, changelog, maintainer scripts).

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

use crate::arch::Arch;
use crate::dist;
use crate::system;

pub const PACKAGE: &str = "provision-dispatcher";

pub fn run(args: &[String]) -> Result<()> {
    let arch = dist::target_arg("deb", args)?;
    let deb = build(arch)?;
    lintian(&deb)?;
    install_test(&deb, arch)?;
    println!("{}", deb.display());
    Ok(())
}

/// Builds the package for `arch`; returns its path.
pub fn build(arch: Arch) -> Result<PathBuf> {
    let root = crate::root();
    let version = version(&root)?;
    let binary = dist::build(arch)?;
    let out_dir = root.join("target/debian");
    let stage = out_dir.join(format!("stage-{}", arch.debian()));
    let _ = fs::remove_dir_all(&stage);
    let debian = root.join("debian");
    let doc = format!("usr/share/doc/{PACKAGE}");
    let files: Vec<(PathBuf, String, u32)> = vec![
        (binary, format!("usr/bin/{PACKAGE}"), 0o755),
        (
            root.join("systemd/provision-dispatcher.service"),
            "usr/lib/systemd/system/provision-dispatcher.service".into(),
            0o644,
        ),
        (
            root.join("systemd/provision-failed.service"),
            "usr/lib/systemd/system/provision-failed.service".into(),
            0o644,
        ),
        (
            root.join("systemd/provision-task-end.service"),
            "usr/lib/systemd/system/provision-task-end.service".into(),
            0o644,
        ),
        (
            root.join("systemd/provision-poweroff.service"),
            "usr/lib/systemd/system/provision-poweroff.service".into(),
            0o644,
        ),
        (
            root.join("systemd/provision-reboot.service"),
            "usr/lib/systemd/system/provision-reboot.service".into(),
            0o644,
        ),
        (
            root.join("systemd/provision-inventory.target"),
            "usr/lib/systemd/system/provision-inventory.target".into(),
            0o644,
        ),
        (
            root.join("systemd/getty@tty1-keep-banner.conf"),
            "usr/lib/systemd/system/getty@tty1.service.d/provision-dispatcher.conf".into(),
            0o644,
        ),
        (
            debian.join("80-provision-dispatcher.preset"),
            "usr/lib/systemd/system-preset/80-provision-dispatcher.preset".into(),
            0o644,
        ),
        (
            debian.join("provision-dispatcher.catalog"),
            "usr/lib/systemd/catalog/provision-dispatcher.catalog".into(),
            0o644,
        ),
        (debian.join("copyright"), format!("{doc}/copyright"), 0o644),
        (debian.join("allowed-targets.example"), format!("{doc}/examples/allowed-targets"), 0o644),
        (debian.join("lintian-overrides"), format!("usr/share/lintian/overrides/{PACKAGE}"), 0o644),
    ];
    for (from, to, mode) in &files {
        put(from, &stage.join(to), *mode)?;
    }
    gzip(&debian.join("provision-dispatcher.8"), &stage.join("usr/share/man/man8/provision-dispatcher.8.gz"))?;
    gzip(&debian.join("changelog"), &stage.join(format!("{doc}/changelog.gz")))?;
    let control_dir = stage.join("DEBIAN");
    fs::create_dir_all(&control_dir)?;
    for script in ["postinst", "postrm"] {
        put(&debian.join(script), &control_dir.join(script), 0o755)?;
    }
    fs::write(control_dir.join("md5sums"), md5sums(&stage)?)?;
    fs::write(control_dir.join("control"), control(&version, arch, installed_kib(&stage)?))?;
    fs::create_dir_all(&out_dir)?;
    let deb = out_dir.join(format!("{PACKAGE}_{version}_{}.deb", arch.debian()));
    let _ = fs::remove_file(&deb);
    system::run(
        Command::new("dpkg-deb")
            .args(["--root-owner-group", "-Zxz", "--build"])
            .arg(&stage)
            .arg(&deb)
            .stdout(Stdio::null()),
    )?;
    println!("{}: {} bytes", deb.display(), fs::metadata(&deb)?.len());
    Ok(deb)
}

/// The package's version: Cargo.toml's, which debian/changelog's newest entry must match.
pub fn version(root: &Path) -> Result<String> {
    let manifest = fs::read_to_string(root.join("Cargo.toml"))?;
    let version = manifest
        .lines()
        .find_map(|l| l.strip_prefix("version = \""))
        .and_then(|rest| rest.strip_suffix('"'))
        .context("Cargo.toml has no version")?
        .to_owned();
    let changelog = fs::read_to_string(root.join("debian/changelog"))?;
    let top = changelog.lines().next().unwrap_or_default();
    if !top.starts_with(&format!("{PACKAGE} ({version})")) {
        bail!("debian/changelog's newest entry is not for {version}: {top}");
    }
    Ok(version)
}

fn control(version: &str, arch: Arch, installed_kib: u64) -> String {
    format!(
        "Package: {PACKAGE}
Version: {version}
Architecture: {arch}
Maintainer: provision-dispatcher developers <provision-dispatcher@shoal.dev>
Installed-Size: {installed_kib}
Depends: systemd, default-dbus-system-bus | dbus-system-bus
Section: admin
Priority: optional
Homepage: https://shoal.dev/provisioner
Description: boot-time dispatcher of a provisioning maintenance OS
 At boot, finds the task ISO that the controller attached as virtual media,
 mounts it read-only, validates its recipe against the JSON Schema it
 carries, writes normalized outputs to /run/provision and starts the
 systemd target that the recipe names; or fails into
 provision-failed.service with a field-level reason on the console and in
 the journal.
 .
 Meant for maintenance-OS images. Installing it enables nothing (a running
 machine must not start dispatching task media at its next boot): the
 image build enables provision-dispatcher.service itself, with
 systemctl enable (or systemctl preset-all; the package's preset says
 enable) in the image's root. Neither live-build, mmdebstrap,
 debootstrap nor mkosi 14 applies presets on its own: a live-build chroot
 hook, an mmdebstrap customize hook or a mkosi postinst script does it.
 It needs the system bus (StartUnit over D-Bus), hence the dependency on
 one.
",
        arch = arch.debian()
    )
}

/// Copies `from` to `to` with `mode`, creating the directories (0755) on the way.
fn put(from: &Path, to: &Path, mode: u32) -> Result<()> {
    fs::create_dir_all(to.parent().context("a path in the tree")?)?;
    fs::copy(from, to).with_context(|| format!("copy {}", from.display()))?;
    fs::set_permissions(to, fs::Permissions::from_mode(mode))?;
    Ok(())
}

/// `gzip -9n`, as Debian wants man pages and changelogs (no name, no timestamp).
fn gzip(from: &Path, to: &Path) -> Result<()> {
    fs::create_dir_all(to.parent().context("a path in the tree")?)?;
    let out = Command::new("gzip").args(["-9n", "-c"]).arg(from).output()?;
    if !out.status.success() {
        bail!("gzip {} failed", from.display());
    }
    fs::write(to, out.stdout)?;
    fs::set_permissions(to, fs::Permissions::from_mode(0o644))?;
    Ok(())
}

/// `md5sum` of every file of the tree but DEBIAN/, relative paths, as dpkg keeps them.
fn md5sums(stage: &Path) -> Result<String> {
    let mut files = Vec::new();
    collect_files(stage, stage, &mut files)?;
    files.sort();
    let out = Command::new("md5sum").args(&files).current_dir(stage).output()?;
    if !out.status.success() {
        bail!("md5sum failed");
    }
    Ok(String::from_utf8(out.stdout)?)
}

fn collect_files(stage: &Path, dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        let relative = path.strip_prefix(stage)?.to_owned();
        if relative.starts_with("DEBIAN") {
            continue;
        }
        if path.is_dir() {
            collect_files(stage, &path, out)?;
        } else {
            out.push(relative);
        }
    }
    Ok(())
}

fn installed_kib(stage: &Path) -> Result<u64> {
    let mut files = Vec::new();
    collect_files(stage, stage, &mut files)?;
    let bytes: u64 = files.iter().map(|f| fs::metadata(stage.join(f)).map(|m| m.len()).unwrap_or(0)).sum();
    Ok(bytes.div_ceil(1024))
}

/// lintian on the package: no error and no warning (overrides, each with its reason, are in
/// debian/lintian-overrides).
pub fn lintian(deb: &Path) -> Result<()> {
    crate::needs::ensure(crate::needs::Need::Lint, "checking the package")?;
    let out = Command::new("lintian")
        .args(["--fail-on", "error,warning", "--display-info", "--no-tag-display-limit"])
        .arg(deb)
        .output()?;
    let said = String::from_utf8_lossy(&out.stdout);
    for line in said.lines() {
        println!("lintian: {line}");
    }
    if !out.status.success() {
        bail!("lintian finds errors or warnings in {}", deb.display());
    }
    println!("lintian: {}: no error, no warning", deb.file_name().unwrap_or_default().to_string_lossy());
    Ok(())
}

/// Installs, reinstalls and purges the package with dpkg in a clean Debian 12 root (an overlay
/// over the maintenance OS's cached base, so the cache is never written), checking what each
/// step leaves. Another architecture's root runs its dpkg and the binary under qemu-user.
pub fn install_test(deb: &Path, arch: Arch) -> Result<()> {
    if arch != Arch::host() {
        crate::cross::ensure_binfmt(arch)?;
    }
    let base = crate::base::ensure(arch)?;
    let work = crate::root().join("target/debian/install-test").join(arch.debian());
    let layers: Vec<PathBuf> = base.layers().into_iter().map(|(path, _)| path).collect();
    let scratch = Overlay::mount(&layers, &work)?;
    let root = scratch.merged();
    fs::create_dir_all(root.join("tmp"))?;
    fs::copy(deb, root.join("tmp/package.deb"))?;
    let dpkg = |args: &[&str]| -> Result<String> {
        let out = Command::new("chroot").arg(&root).arg("dpkg").args(args).output()?;
        if !out.status.success() {
            bail!("dpkg {} failed: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    };
    // Documentation is left out: the image's root excludes /usr/share/{man,doc} from dpkg, so
    // the package's man page is looked for in the package instead.
    let installed = [
        "usr/bin/provision-dispatcher",
        "usr/lib/systemd/system/provision-dispatcher.service",
        "usr/lib/systemd/system/provision-failed.service",
        "usr/lib/systemd/system/provision-task-end.service",
        "usr/lib/systemd/system/provision-poweroff.service",
        "usr/lib/systemd/system/provision-reboot.service",
        "usr/lib/systemd/system/provision-inventory.target",
        "usr/lib/systemd/system-preset/80-provision-dispatcher.preset",
        "usr/lib/systemd/catalog/provision-dispatcher.catalog",
        "usr/lib/systemd/system/getty@tty1.service.d/provision-dispatcher.conf",
    ];
    let contents = system::output(Command::new("dpkg-deb").arg("--contents").arg(deb))?;
    if !contents.contains("./usr/share/man/man8/provision-dispatcher.8.gz") {
        bail!("the package holds no man page");
    }
    dpkg(&["--install", "/tmp/package.deb"])?;
    for file in installed {
        if !root.join(file).is_file() {
            bail!("after dpkg --install, /{file} is missing");
        }
    }
    let version = Command::new("chroot").arg(&root).args(["provision-dispatcher", "--version"]).output()?;
    if !version.status.success() {
        bail!("the installed binary does not run in the clean root");
    }
    dpkg(&["--install", "/tmp/package.deb"])?;
    if !dpkg(&["--status", PACKAGE])?.contains("Status: install ok installed") {
        bail!("after a reinstall, the package is not installed");
    }
    dpkg(&["--purge", PACKAGE])?;
    let left: Vec<&str> = installed.iter().copied().filter(|f| root.join(f).exists()).collect();
    if !left.is_empty() || dpkg(&["--status", PACKAGE]).is_ok() {
        bail!("after dpkg --purge, files are left: {left:?}");
    }
    drop(scratch);
    println!("deb: installed, reinstalled and purged with dpkg in a clean Debian 12 {} root", arch.debian());
    Ok(())
}

/// An overlay mount over a squashfs image (loop-mounted read-only as its lower directory),
/// unmounted and removed when dropped.
struct Overlay {
    dir: PathBuf,
    lowers: usize,
}

impl Overlay {
    /// The squashfs images `layers` (bottom first) under an overlay in `dir`.
    fn mount(layers: &[PathBuf], dir: &Path) -> Result<Overlay> {
        // What an interrupted run left mounted.
        unmount(dir, 8);
        let _ = fs::remove_dir_all(dir);
        for sub in ["upper", "work", "merged"] {
            fs::create_dir_all(dir.join(sub))?;
        }
        let overlay = Overlay { dir: dir.to_owned(), lowers: layers.len() };
        let mut lowers = vec![];
        for (n, layer) in layers.iter().enumerate() {
            let lower = dir.join(format!("lower-{n}"));
            fs::create_dir_all(&lower)?;
            system::run(Command::new("mount").args(["-o", "loop,ro", "-t", "squashfs"]).arg(layer).arg(&lower))?;
            lowers.insert(0, lower.display().to_string());
        }
        let options = format!(
            "lowerdir={},upperdir={},workdir={}",
            lowers.join(":"),
            dir.join("upper").display(),
            dir.join("work").display()
        );
        system::run(Command::new("mount").args(["-t", "overlay", "overlay", "-o", &options]).arg(dir.join("merged")))?;
        Ok(overlay)
    }

    fn merged(&self) -> PathBuf {
        self.dir.join("merged")
    }
}

impl Drop for Overlay {
    fn drop(&mut self) {
        unmount(&self.dir, self.lowers);
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// Unmounts the overlay in `dir` and its first `lowers` layers, whichever are mounted.
fn unmount(dir: &Path, lowers: usize) {
    let _ = Command::new("umount").arg(dir.join("merged")).stderr(Stdio::null()).status();
    for n in 0..lowers {
        let _ = Command::new("umount").arg(dir.join(format!("lower-{n}"))).stderr(Stdio::null()).status();
    }
}
