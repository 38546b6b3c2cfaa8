//! `cargo xtask deb [--target TRIPLE]`: the Debian packages, then lintian on each and an
//! install test with dpkg in a clean Debian 12 root: the dispatcher's,
//! `target/debian/provision-dispatcher_VERSION_ARCH.deb`, for maintenance-OS images (the
//! binary and the units that run it at boot), and the controller hosts'
//! `provision-dispatcher-tools_VERSION_ARCH.deb` (the same binary, nothing that runs at boot).
//!
//! Built with `dpkg-deb` from a tree staged here, not with cargo-deb: the package is a static
//! binary and a handful of files, dpkg-deb is on every Debian machine (cargo-deb would be one
//! more tool to compile before the first package), and staging the tree by hand keeps every
//! path, mode and maintainer script in plain sight. The sources of what is not compiled live
//! in `debian/` (man page, catalog, preset, copyright, changelog, maintainer scripts),
//! `docs/` (the pages it ships: [`PAGES`]) and `schemas/` (the published schemas:
//! [`SCHEMAS_DIR`]).

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

use crate::arch::Arch;
use crate::dist;
use crate::system;

pub const PACKAGE: &str = "provision-dispatcher";

/// The pages of `docs/` the package installs in `/usr/share/doc/provision-dispatcher/`, for
/// whoever is at the server: the operator's, the controller's, and the reference both link
/// to. Uncompressed, as they link to each other by name (a test holds them to linking only
/// among themselves), and a maintenance OS may have no pager that reads gzip.
pub const PAGES: [&str; 3] = ["operator.md", "controller.md", "reference.md"];

/// Where both packages install the published schemas of the documents a controller reads
/// (`schemas/NAME.schema.json`, which `provision-dispatcher schema print NAME` prints too).
pub const SCHEMAS_DIR: &str = "usr/share/provision-dispatcher/schemas";

/// dpkg's filter that keeps the pages where dpkg is told to leave documentation out (the
/// image's base: `path-exclude=/usr/share/doc/*`); a later `--path-include` wins.
pub const KEEP_PAGES: &str = "--path-include=/usr/share/doc/provision-dispatcher/*";

pub fn run(args: &[String]) -> Result<()> {
    let arch = dist::target_arg("deb", args)?;
    let deb = build(arch)?;
    lintian(&deb)?;
    install_test(&deb, arch)?;
    let tools = build_tools(arch)?;
    lintian(&tools)?;
    tools_install_test(&tools, &deb, arch)?;
    println!("{}", deb.display());
    println!("{}", tools.display());
    Ok(())
}

/// The package for controller hosts: the same binary, its man page and pages, and nothing that
/// runs at boot (no unit, no preset, no catalog, no maintainer script). A controller builds,
/// checks and embeds task media with the very binary the images carry; the dispatcher's own
/// package would put a boot unit on the controller (enabled wherever presets are applied).
pub const TOOLS_PACKAGE: &str = "provision-dispatcher-tools";

/// A binary package as staged: what goes where with which mode, its maintainer scripts (from
/// `debian/`) and the control file's fields after Package, Version, Architecture and
/// Installed-Size.
struct Package {
    name: &'static str,
    files: Vec<(PathBuf, String, u32)>,
    scripts: &'static [&'static str],
    control: String,
}

/// Builds the dispatcher's package for `arch`; returns its path.
pub fn build(arch: Arch) -> Result<PathBuf> {
    let root = crate::root();
    let debian = root.join("debian");
    let unit = |name: &str| (root.join("systemd").join(name), format!("usr/lib/systemd/system/{name}"), 0o644);
    let mut files = vec![
        unit("provision-dispatcher.service"),
        unit("provision-failed.service"),
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
        (debian.join("allowed-targets.example"), format!("usr/share/doc/{PACKAGE}/examples/allowed-targets"), 0o644),
    ];
    files.extend(common_files(PACKAGE, arch)?);
    let package = Package { name: PACKAGE, files, scripts: &["postinst", "postrm"], control: dispatcher_control() };
    assemble(&package, arch)
}

/// Builds the controller hosts' package for `arch` ([`TOOLS_PACKAGE`]); returns its path.
pub fn build_tools(arch: Arch) -> Result<PathBuf> {
    let package = Package {
        name: TOOLS_PACKAGE,
        files: common_files(TOOLS_PACKAGE, arch)?,
        scripts: &[],
        control: tools_control(),
    };
    assemble(&package, arch)
}

/// What both packages hold: the static binary, its man page, the copyright, the changelog,
/// the pages, the published schemas and the lintian overrides.
fn common_files(package: &str, arch: Arch) -> Result<Vec<(PathBuf, String, u32)>> {
    let root = crate::root();
    let debian = root.join("debian");
    let doc = format!("usr/share/doc/{package}");
    let mut files = vec![
        (dist::build(arch)?, format!("usr/bin/{PACKAGE}"), 0o755),
        (debian.join("copyright"), format!("{doc}/copyright"), 0o644),
        (debian.join(format!("{package}.lintian-overrides")), format!("usr/share/lintian/overrides/{package}"), 0o644),
    ];
    for page in PAGES {
        files.push((root.join("docs").join(page), format!("{doc}/{page}"), 0o644));
    }
    for name in crate::schemas::NAMES {
        files.push((crate::schemas::path(name), format!("{SCHEMAS_DIR}/{name}.schema.json"), 0o644));
    }
    Ok(files)
}

/// Stages `package` and builds it with dpkg-deb; returns its path.
fn assemble(package: &Package, arch: Arch) -> Result<PathBuf> {
    let root = crate::root();
    let version = version(&root)?;
    let out_dir = root.join("target/debian");
    let stage = out_dir.join(format!("stage-{}-{}", package.name, arch.debian()));
    let _ = fs::remove_dir_all(&stage);
    let debian = root.join("debian");
    for (from, to, mode) in &package.files {
        put(from, &stage.join(to), *mode)?;
    }
    let doc = format!("usr/share/doc/{}", package.name);
    gzip(&debian.join("provision-dispatcher.8"), &stage.join("usr/share/man/man8/provision-dispatcher.8.gz"))?;
    gzip(&debian.join("changelog"), &stage.join(format!("{doc}/changelog.gz")))?;
    let control_dir = stage.join("DEBIAN");
    fs::create_dir_all(&control_dir)?;
    for script in package.scripts {
        put(&debian.join(script), &control_dir.join(script), 0o755)?;
    }
    fs::write(control_dir.join("md5sums"), md5sums(&stage)?)?;
    let control = format!(
        "Package: {}\nSource: {PACKAGE}\nVersion: {version}\nArchitecture: {}\nInstalled-Size: {}\n{}",
        package.name,
        arch.debian(),
        installed_kib(&stage)?,
        package.control
    );
    fs::write(control_dir.join("control"), control)?;
    fs::create_dir_all(&out_dir)?;
    let deb = out_dir.join(format!("{}_{version}_{}.deb", package.name, arch.debian()));
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

/// The control fields of the dispatcher's package.
fn dispatcher_control() -> String {
    format!(
        "Maintainer: {MAINTAINER}
Depends: systemd, default-dbus-system-bus | dbus-system-bus
Section: admin
Priority: optional
Homepage: {HOMEPAGE}
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
 .
 Controller hosts install {TOOLS_PACKAGE} instead.
"
    )
}

/// The control fields of the controller hosts' package. It conflicts with the dispatcher's,
/// which holds the same binary: a machine has one or the other.
fn tools_control() -> String {
    format!(
        "Maintainer: {MAINTAINER}
Conflicts: {PACKAGE}
Section: admin
Priority: optional
Homepage: {HOMEPAGE}
Description: provisioning task media tools for controllers
 The provision-dispatcher binary for the controller's side of provisioning
 over a server's BMC: checks a recipe as the maintenance OS's boot will
 (schema, safety rules, signatures, a saved inventory of the server),
 builds, checks and embeds task media, and prints the schemas the
 binary knows.
 .
 Nothing in it runs at boot: no unit, no preset. Maintenance-OS images
 install {PACKAGE} instead, which holds the same binary and the units
 that dispatch task media at boot.
"
    )
}

const MAINTAINER: &str = "provision-dispatcher developers <provision-dispatcher@shoal.dev>";
const HOMEPAGE: &str = "https://shoal.dev/provisioner";

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
    let clean = CleanRoot::new(arch, "dispatcher")?;
    clean.copy_in(deb, "package.deb")?;
    // The image's root excludes /usr/share/{man,doc} from dpkg: the man page is looked for in
    // the package, the pages are kept as the image keeps them ([`KEEP_PAGES`]).
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
    let installed: Vec<String> =
        installed.into_iter().map(str::to_owned).chain(pages(PACKAGE)).chain(schemas()).collect();
    has_man_page(deb)?;
    clean.dpkg(&[KEEP_PAGES, "--install", "/tmp/package.deb"])?;
    clean.expect_files(&installed, "after dpkg --install")?;
    clean.runs_binary()?;
    clean.prints_the_schemas_installed()?;
    clean.dpkg(&[KEEP_PAGES, "--install", "/tmp/package.deb"])?;
    if !clean.dpkg(&["--status", PACKAGE])?.contains("Status: install ok installed") {
        bail!("after a reinstall, the package is not installed");
    }
    clean.purge(PACKAGE, &installed)?;
    println!("deb: installed, reinstalled and purged with dpkg in a clean Debian 12 {} root", arch.debian());
    Ok(())
}

/// The controller hosts' package in a clean root: installed, the binary runs, nothing of it
/// is a unit, a preset or anything else systemd reads, the dispatcher's package is refused
/// beside it (they hold the same binary), and a purge leaves nothing.
pub fn tools_install_test(tools: &Path, dispatcher: &Path, arch: Arch) -> Result<()> {
    let clean = CleanRoot::new(arch, "tools")?;
    clean.copy_in(tools, "tools.deb")?;
    clean.copy_in(dispatcher, "dispatcher.deb")?;
    has_man_page(tools)?;
    let contents = system::output(Command::new("dpkg-deb").arg("--contents").arg(tools))?;
    if let Some(line) = contents.lines().find(|l| l.contains("/lib/systemd/") || l.contains("/etc/")) {
        bail!("{TOOLS_PACKAGE} holds what runs at boot or is configuration: {line}");
    }
    let installed: Vec<String> = std::iter::once("usr/bin/provision-dispatcher".to_owned())
        .chain(pages(TOOLS_PACKAGE))
        .chain(schemas())
        .collect();
    clean.dpkg(&[KEEP_PAGES_TOOLS, "--install", "/tmp/tools.deb"])?;
    clean.expect_files(&installed, "after dpkg --install")?;
    clean.runs_binary()?;
    clean.prints_the_schemas_installed()?;
    if clean.dpkg(&["--install", "/tmp/dispatcher.deb"]).is_ok() {
        bail!("dpkg installed {PACKAGE} beside {TOOLS_PACKAGE}: they must conflict");
    }
    clean.purge(TOOLS_PACKAGE, &installed)?;
    println!(
        "deb: {TOOLS_PACKAGE} installed (no unit, no preset), refused beside {PACKAGE}, purged, in a clean {} root",
        arch.debian()
    );
    Ok(())
}

/// [`KEEP_PAGES`] for the controller hosts' package.
const KEEP_PAGES_TOOLS: &str = "--path-include=/usr/share/doc/provision-dispatcher-tools/*";

/// The pages as `package` installs them.
fn pages(package: &str) -> impl Iterator<Item = String> + '_ {
    PAGES.iter().map(move |page| format!("usr/share/doc/{package}/{page}"))
}

/// The published schemas as both packages install them.
fn schemas() -> impl Iterator<Item = String> {
    crate::schemas::NAMES.into_iter().map(|name| format!("{SCHEMAS_DIR}/{name}.schema.json"))
}

fn has_man_page(deb: &Path) -> Result<()> {
    let contents = system::output(Command::new("dpkg-deb").arg("--contents").arg(deb))?;
    if !contents.contains("./usr/share/man/man8/provision-dispatcher.8.gz") {
        bail!("{} holds no man page", deb.display());
    }
    Ok(())
}

/// A clean Debian 12 root to install a package in: an overlay over the image's cached base,
/// gone when dropped.
struct CleanRoot {
    overlay: Overlay,
}

impl CleanRoot {
    fn new(arch: Arch, name: &str) -> Result<CleanRoot> {
        if arch != Arch::host() {
            crate::cross::ensure_binfmt(arch)?;
        }
        let base = crate::base::ensure(arch)?;
        let work = crate::root().join("target/debian/install-test").join(format!("{}-{name}", arch.debian()));
        let layers: Vec<PathBuf> = base.layers().into_iter().map(|(path, _)| path).collect();
        let overlay = Overlay::mount(&layers, &work)?;
        fs::create_dir_all(overlay.merged().join("tmp"))?;
        Ok(CleanRoot { overlay })
    }

    fn copy_in(&self, file: &Path, name: &str) -> Result<()> {
        fs::copy(file, self.overlay.merged().join("tmp").join(name))?;
        Ok(())
    }

    fn dpkg(&self, args: &[&str]) -> Result<String> {
        let out = Command::new("chroot").arg(self.overlay.merged()).arg("dpkg").args(args).output()?;
        if !out.status.success() {
            bail!("dpkg {} failed: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    fn expect_files(&self, files: &[String], when: &str) -> Result<()> {
        match files.iter().find(|file| !self.overlay.merged().join(file).is_file()) {
            Some(file) => bail!("{when}, /{file} is missing"),
            None => Ok(()),
        }
    }

    fn runs_binary(&self) -> Result<()> {
        let version =
            Command::new("chroot").arg(self.overlay.merged()).args(["provision-dispatcher", "--version"]).output()?;
        if !version.status.success() {
            bail!("the installed binary does not run in the clean root");
        }
        Ok(())
    }

    /// `provision-dispatcher schema print NAME` of the installed binary is the installed
    /// schema, byte for byte, for each published document.
    fn prints_the_schemas_installed(&self) -> Result<()> {
        for name in crate::schemas::NAMES {
            let printed = Command::new("chroot")
                .arg(self.overlay.merged())
                .args(["provision-dispatcher", "schema", "print", name])
                .output()?;
            let installed = fs::read(self.overlay.merged().join(SCHEMAS_DIR).join(format!("{name}.schema.json")))?;
            if !printed.status.success() || printed.stdout != installed {
                bail!("schema print {name} is not /{SCHEMAS_DIR}/{name}.schema.json byte for byte");
            }
        }
        Ok(())
    }

    fn purge(&self, package: &str, installed: &[String]) -> Result<()> {
        self.dpkg(&["--purge", package])?;
        let left: Vec<&String> = installed.iter().filter(|f| self.overlay.merged().join(f).exists()).collect();
        if !left.is_empty() || self.dpkg(&["--status", package]).is_ok() {
            bail!("after dpkg --purge {package}, files are left: {left:?}");
        }
        Ok(())
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The pages the package installs link only to each other (or within themselves), so that
    /// no link dangles in /usr/share/doc/provision-dispatcher/.
    #[test]
    fn the_shipped_pages_link_only_to_each_other() {
        for page in PAGES {
            let text = fs::read_to_string(crate::root().join("docs").join(page)).unwrap();
            let links: Vec<&str> = text.split("](").skip(1).map(|rest| rest.split(')').next().unwrap()).collect();
            assert!(!links.is_empty(), "docs/{page} has no links");
            for link in links {
                let file = link.split('#').next().unwrap();
                let outside = link.starts_with("https://") || link.starts_with("http://");
                assert!(
                    outside || file.is_empty() || PAGES.contains(&file),
                    "docs/{page} links {link}, which the package does not ship beside it"
                );
            }
        }
    }
}
