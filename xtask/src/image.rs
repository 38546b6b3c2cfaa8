//! `cargo xtask image [--arch ARCH] [--layer DIR]...`: the maintenance OS as users deploy it,
//! one hybrid ISO that boots under UEFI and legacy BIOS, as a CD and written to a USB disk,
//! its root in RAM. It prints the ISO's path as its last line.
//!
//! Built with real tools from the inputs in `image/`: mmdebstrap makes a Debian 12 root with
//! systemd and the generic kernel; `image/configure.sh` trims it; mksquashfs packs it; the
//! initrd is our own `/init` and the drivers that reaching the medium needs
//! ([`crate::initrd`]); xorriso makes the ISO, whose UEFI path is Debian's signed chain (shim,
//! GRUB, the kernel: [`crate::efi`]) and whose BIOS path (amd64) is grub-mkrescue's. The
//! initrd stacks every `/live/*.squashfs` in name order under an overlay in RAM, so the image
//! is layers:
//!
//! - `00-base`, `01-modules`, `02-boot`: the OS ([`crate::base`]), packed by what the boot
//!   reads, cached outside the clone and keyed by a hash of `image/` and the architecture, so
//!   that only a change there rebuilds it (minutes);
//! - `50-package`: our .deb installed with dpkg in a chroot over the base (an overlay whose
//!   upper directory is all the layer holds), then enabled by its preset (seconds);
//! - `90-layer-N`: each `--layer DIR` tree as it is (the image builder's targets and
//!   allowlist, the tests' stand-ins); a README.md at the top of a tree stays out.
//!
//! The shipped image is the one without `--layer`; the tested one differs only by its layer.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Instant, SystemTime};

use anyhow::{bail, Context, Result};

use crate::arch::Arch;
use crate::base::{self, Base, Compression};
use crate::deb;
use crate::efi;
use crate::needs::{self, Need};
use crate::system;

/// The ISO's volume id (what a BMC's virtual-media dialog shows).
const VOLUME_ID: &str = "PROVISION-MAINT";

/// The task area (SPEC §6c): a file of the ISO's tree that `provision-dispatcher media embed`
/// writes a task into, so that a server with one virtual drive boots one ISO carrying its task.
/// Its format is the product's (`src/media/area.rs`); the image holds it empty: the header,
/// then zeros.
pub const TASK_AREA: &str = "provision/task.img";
const AREA_MAGIC: &[u8; 32] = b"provision-dispatcher task area\n\0";
const AREA_VERSION: u32 = 1;
const AREA_HEADER_BYTES: usize = 512;

/// The area's size: what tasks need, within the ISO's budget (SPEC §9). A task ISO of a seed
/// example deflates to 3 to 4 KiB; one with 1 MiB of user_data that deflate cannot shrink (random
/// base64) to 0.8 MiB. arm64's ISO has 1.5 MiB of room under its 96 MiB (94.5 MiB without the
/// area), so 1 MiB there, which holds that task; amd64's has 3.3 MiB under 80, so 2 MiB, which
/// also holds a task of 1 MiB of user_data and 1 MiB of unattend_xml that deflate cannot shrink.
pub fn task_area_bytes(arch: Arch) -> u64 {
    match arch {
        Arch::Amd64 => 2 << 20,
        Arch::Arm64 => 1 << 20,
    }
}

/// An empty task area of `bytes`: the header (magic, version, the area's size; nothing
/// stored), then zeros.
pub fn empty_task_area(bytes: u64) -> Vec<u8> {
    let mut area = vec![0u8; bytes as usize];
    area[..32].copy_from_slice(AREA_MAGIC);
    area[32..36].copy_from_slice(&AREA_VERSION.to_le_bytes());
    area[40..48].copy_from_slice(&bytes.to_le_bytes());
    debug_assert!(area[48..AREA_HEADER_BYTES].iter().all(|&b| b == 0));
    area
}

/// The kernel command line: which medium the initrd takes (`initrd/`: the ISO whose
/// `/.disk/MARKER` is this build's), both consoles (the serial one last: it is
/// /dev/console), and a quiet boot.
fn cmdline(arch: Arch, marker: &str) -> String {
    let serial = match arch {
        Arch::Amd64 => "ttyS0",
        Arch::Arm64 => "ttyAMA0",
    };
    format!(
        "maintenance.medium={marker} console=tty1 console={serial},115200 quiet loglevel=3 \
         systemd.show_status=auto rd.udev.log_level=3 nomodeset"
    )
}

/// A built image and the parts of it a test boots directly.
pub struct Image {
    pub iso: PathBuf,
    pub kernel: PathBuf,
    pub initrd: PathBuf,
    pub cmdline: String,
}

pub fn run(args: &[String]) -> Result<()> {
    let mut arch = Arch::host();
    let mut layers = Vec::new();
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--arch" => arch = Arch::from_debian(args.next().context("--arch needs amd64 or arm64")?)?,
            "--layer" => layers.push(PathBuf::from(args.next().context("--layer needs a directory")?)),
            other => {
                bail!("image: unexpected argument '{other}'\nusage: cargo xtask image [--arch ARCH] [--layer DIR]...")
            }
        }
    }
    let out = crate::root().join("target/image").join(arch.debian());
    let image = build(arch, &layers, &out)?;
    println!("{}", image.iso.display());
    Ok(())
}

/// Builds the image for `arch` with these layers over it, in the directory `out` (emptied
/// first).
pub fn build(arch: Arch, layers: &[PathBuf], out: &Path) -> Result<Image> {
    tools(arch)?;
    let base = base::ensure(arch)?;
    let deb = crate::deb::build(arch)?;
    let _ = std::fs::remove_dir_all(out);
    std::fs::create_dir_all(out)?;
    let started = Instant::now();
    let mut squashfs = base.layers();
    let package = out.join("50-package.squashfs");
    package_layer(arch, &base, &deb, &package)?;
    squashfs.push((package, "50-package.squashfs".into()));
    for (n, dir) in layers.iter().enumerate() {
        let layer = out.join(format!("90-layer-{n}.squashfs"));
        tree_layer(arch, dir, &layer)?;
        squashfs.push((layer, format!("90-layer-{n}.squashfs")));
    }
    let version = crate::deb::version(&crate::root())?;
    let iso = out.join(format!("provision-maintenance_{version}_{}.iso", arch.debian()));
    let initrd = out.join("initrd.img");
    crate::initrd::build(arch, &base, &initrd)?;
    let cmdline = assemble(arch, &base, &initrd, &squashfs, &iso)?;
    check_task_area(arch, &iso)?;
    eprintln!(
        "image: {} ({} bytes) in {:.1?} over the cached base",
        iso.display(),
        std::fs::metadata(&iso)?.len(),
        started.elapsed()
    );
    Ok(Image { iso, kernel: base.kernel(), initrd, cmdline })
}

fn tools(arch: Arch) -> Result<()> {
    needs::ensure(Need::Image(arch), "the maintenance-OS image")?;
    if arch != Arch::host() {
        // The package's layer is installed by the architecture's own dpkg, in a chroot.
        crate::cross::ensure_binfmt(arch)?;
    }
    Ok(())
}

/// The package layer: the .deb installed with dpkg, in a chroot over the base (an overlay
/// whose upper directory becomes the layer), the operator's and the controller's pages kept
/// (the base's dpkg leaves documentation out), then enabled by its preset. Every mount lives in
/// a mount namespace of its own and dies with it.
fn package_layer(arch: Arch, base: &Base, deb: &Path, out: &Path) -> Result<()> {
    let work = out.with_extension("work");
    let _ = std::fs::remove_dir_all(&work);
    for dir in ["lower", "upper", "work", "merged"] {
        std::fs::create_dir_all(work.join(dir))?;
    }
    std::fs::copy(deb, work.join("package.deb"))?;
    let script = r#"
        set -e
        w=$1; shift
        n=0; lower=
        for layer; do
            n=$((n + 1)); mkdir -p "$w/lower/$n"
            mount -o loop,ro -t squashfs "$layer" "$w/lower/$n"
            lower="$w/lower/$n${lower:+:$lower}"
        done
        mount -t overlay overlay -o "lowerdir=$lower,upperdir=$w/upper,workdir=$w/work" "$w/merged"
        mount -t proc proc "$w/merged/proc"
        mount --rbind /dev "$w/merged/dev"
        mkdir -p "$w/merged/run/package"
        mount --bind "$w" "$w/merged/run/package"
        chroot "$w/merged" dpkg "$KEEP_PAGES" --install /run/package/package.deb
        chroot "$w/merged" systemctl preset provision-dispatcher.service provision-failed.service
    "#;
    system::run(
        Command::new("unshare")
            .args(["--mount", "--propagation", "private", "--", "sh", "-c", script, "sh"])
            .arg(&work)
            .args(base.layers().iter().map(|(path, _)| path))
            .env("KEEP_PAGES", deb::KEEP_PAGES)
            .stdout(Stdio::null()),
    )?;
    let upper = work.join("upper");
    let page = upper.join("usr/share/doc").join(deb::PACKAGE).join(deb::PAGES[0]);
    if !page.is_file() {
        bail!("the package layer lacks /{}: dpkg left the pages out", page.strip_prefix(&upper)?.display());
    }
    for leftover in ["run", "tmp", "var/cache/debconf/config.dat-old", "var/cache/debconf/templates.dat-old"] {
        let path = upper.join(leftover);
        let _ = std::fs::remove_dir_all(&path);
        let _ = std::fs::remove_file(&path);
    }
    let enabled = upper.join("etc/systemd/system/multi-user.target.wants/provision-dispatcher.service");
    if std::fs::symlink_metadata(&enabled).is_err() {
        bail!("the preset did not enable provision-dispatcher.service in the image");
    }
    base::squash(&upper, out, Compression::Layer, arch, None)?;
    std::fs::remove_dir_all(&work)?;
    Ok(())
}

/// A layer of a tree as it is (symlinks and modes kept, owned by root).
fn tree_layer(arch: Arch, dir: &Path, out: &Path) -> Result<()> {
    if !dir.is_dir() {
        bail!("--layer {}: not a directory", dir.display());
    }
    let readme = out.with_extension("excludes");
    std::fs::write(&readme, "README.md\n")?;
    base::squash(dir, out, Compression::Layer, arch, Some(&readme))?;
    std::fs::remove_file(&readme)?;
    Ok(())
}

/// The ISO: the layers, the kernel and the initrd under /live, the boot menu, Debian's signed
/// chain for UEFI (`efi`) and, on amd64, grub-mkrescue's GRUB for BIOS, hybrid so that it
/// boots as a CD and from a USB disk. Returns the kernel command line of its menu.
fn assemble(arch: Arch, base: &Base, initrd: &Path, squashfs: &[(PathBuf, String)], iso: &Path) -> Result<String> {
    let kernel = std::fs::read(base.kernel())?;
    // GRUB has shim check the kernel under Secure Boot: an unsigned one would not boot.
    if efi::signature_bytes(&kernel).with_context(|| format!("the kernel {}", base.kernel().display()))? == 0 {
        bail!("the kernel {} is not signed", base.kernel().display());
    }
    let tree = iso.with_extension("tree");
    let _ = std::fs::remove_dir_all(&tree);
    std::fs::create_dir_all(tree.join("live"))?;
    std::fs::create_dir_all(tree.join("boot/grub"))?;
    std::fs::create_dir_all(tree.join(".disk"))?;
    let link_or_copy = |from: &Path, to: &Path| -> Result<()> {
        if std::fs::hard_link(from, to).is_err() {
            std::fs::copy(from, to).with_context(|| format!("copy {}", from.display()))?;
        }
        Ok(())
    };
    for (file, name) in squashfs {
        link_or_copy(file, &tree.join("live").join(name))?;
    }
    link_or_copy(&base.kernel(), &tree.join("live/vmlinuz"))?;
    link_or_copy(initrd, &tree.join("live/initrd.img"))?;
    // GRUB on the ESP and the initrd find this ISO by a file only this build has, not by its
    // label or Debian's `/.disk/info`, which another ISO attached beside it may have too.
    let stamp = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_nanos();
    let marker =
        format!("provision-maintenance-{:016x}", system::fnv1a(format!("{}{stamp}", iso.display()).as_bytes()));
    std::fs::write(tree.join(".disk").join(&marker), b"")?;
    let area = tree.join(TASK_AREA);
    std::fs::create_dir_all(area.parent().expect("a folder"))?;
    std::fs::write(&area, empty_task_area(task_area_bytes(arch)))?;
    let cmdline = cmdline(arch, &marker);
    let menu = std::fs::read_to_string(crate::root().join("image/grub.cfg"))?;
    std::fs::write(tree.join("boot/grub/grub.cfg"), menu.replace("@CMDLINE@", &cmdline))?;
    let esp_menu = std::fs::read_to_string(crate::root().join("image/grub-esp.cfg"))?;
    let chain = efi::signed_chain(arch)?;
    let esp = iso.with_extension("esp.img");
    efi::esp(arch, &chain, &esp_menu.replace("@MARKER@", &marker), &esp)?;
    let mut cmd = match arch {
        Arch::Amd64 => {
            let mut cmd = Command::new("grub-mkrescue");
            // BIOS only: the UEFI boot image is the signed chain's, below.
            cmd.args(["-d", "/usr/lib/grub/i386-pc"]);
            cmd.arg("-o").arg(iso).args([
                // Only the modules the menu needs: else every module is copied. Modules come
                // with their dependencies. The partition modules are those grub-mkrescue's own
                // early configuration loads; all_video is the menu's.
                "--install-modules=linux normal iso9660 serial terminal echo test search fat gzio part_msdos \
                 part_gpt part_acorn part_amiga part_apple part_bsd part_dfly part_dvh part_plan part_sun \
                 part_sunpc all_video",
                "--modules=serial terminal",
                "--locales=",
                "--themes=",
                "--fonts=",
            ]);
            cmd.arg(&tree);
            cmd
        }
        Arch::Arm64 => {
            let mut cmd = Command::new("xorriso");
            cmd.args(["-as", "mkisofs", "-r", "-o"]).arg(iso).arg(&tree);
            cmd
        }
    };
    // Then xorriso's own commands. Without -hfsplus off, grub-mkrescue adds an HFS+ partition
    // whose label is the volume id too: a USB disk would show it twice.
    cmd.args(["--", "-volid", VOLUME_ID, "-hfsplus", "off"]).args(efi::xorriso_args(&esp));
    let out = cmd.output().with_context(|| system::describe(&cmd))?;
    if !out.status.success() {
        bail!("{} failed: {}", system::describe(&cmd), String::from_utf8_lossy(&out.stderr));
    }
    eprintln!("image: UEFI boots Debian's signed chain: {}", chain.packages.join(", "));
    std::fs::remove_file(&esp)?;
    std::fs::remove_dir_all(&tree)?;
    Ok(cmdline)
}

/// The shipped binary reads the image's task area as `media embed` will: the maintenance ISO,
/// its area empty and of the architecture's size. (The host's binary: the area's format is the
/// same on every architecture.)
fn check_task_area(arch: Arch, iso: &Path) -> Result<()> {
    let binary = crate::dist::build(Arch::host())?;
    let mut cmd = Command::new(&binary);
    cmd.args(["media", "check", "--format", "json"]).arg(iso);
    let out = cmd.output().with_context(|| system::describe(&cmd))?;
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .with_context(|| format!("{}: {}", system::describe(&cmd), String::from_utf8_lossy(&out.stdout)))?;
    let embedded = &report["media"]["embedded"];
    let empty =
        serde_json::json!({"iso": iso.display().to_string(), "area_bytes": task_area_bytes(arch), "task": null});
    if *embedded != empty {
        bail!(
            "{} does not read the image's task area as empty of {} bytes: {report}",
            binary.display(),
            task_area_bytes(arch)
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The product reads these bytes (`src/media/area.rs`'s test of an empty area pins the same).
    #[test]
    fn an_empty_task_area_is_the_products_header_and_zeros() {
        let area = empty_task_area(1 << 20);
        assert_eq!(area.len(), 1 << 20);
        assert_eq!(&area[..32], b"provision-dispatcher task area\n\0");
        assert_eq!(area[32..48], [1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 16, 0, 0, 0, 0, 0]);
        assert!(area[48..].iter().all(|&b| b == 0));
    }
}
