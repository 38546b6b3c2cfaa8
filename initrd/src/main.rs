//! `/init` of the maintenance OS's initrd: loads the drivers that reaching the boot medium
//! needs, finds the medium, stacks its `/live/*.squashfs` in name order under an overlay in
//! RAM, and hands over to systemd. Nothing else: the root's udev loads every other driver.
//!
//! Users boot the image through a server's BMC as virtual media, a link of 50 KB/s to a few
//! MB/s, often with a long round trip, so what this reads from the medium is what the boot
//! waits for. The images are read through loop devices over their files on the medium, whose
//! page cache keeps each compressed block once (squashfs reads its metadata and fragment
//! blocks again and again, its own caches being a few blocks each), and the medium's
//! readahead is cut to [`MEDIUM_READAHEAD_KIB`]: the default 128 KiB read a block's
//! neighbours too, a third of what the boot read (BENCHMARKS.md). A page at a time means
//! more reads, each a round trip: on a link with a long one, `maintenance.readahead=KIB`
//! trades bytes for round trips.
//!
//! The layout is live-boot's, which the dispatcher knows (it never takes a disk the running
//! system lives on): the medium at `/run/live/medium`, each image at `/run/live/rootfs/NAME`,
//! the overlay's writable half at `/run/live/overlay`. The kernel command line says which
//! medium (`maintenance.medium=MARKER`: `/.disk/MARKER`, which only this build of the ISO
//! has) and may ask for `toram`: the images copied into RAM first and the medium let go, so
//! that a BMC with one virtual drive can take the next ISO.
//!
//! On failure it says why on the console and waits: no shell (the image's root account is
//! locked; a shell here would be root for anyone at the console).

use std::ffi::CString;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::MetadataExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The ISO 9660 volume id of the image (`cargo xtask image`).
const VOLUME_ID: &[u8] = b"PROVISION-MAINT";
/// Where a volume id starts on an ISO 9660 medium: the primary volume descriptor at 32768,
/// the id 40 bytes into it.
const VOLUME_ID_AT: u64 = 32768 + 40;
/// How long virtual media may take to show up (some BMCs enumerate it late).
const MEDIUM_WAIT: Duration = Duration::from_secs(120);
/// The medium's readahead, in KiB (`read_ahead_kb`; `maintenance.readahead=` on the kernel
/// command line), and the read-around of the root's files on a page fault (each loop
/// device's), chosen by the bytes read before the dispatcher's result (BENCHMARKS.md: 4, 8,
/// 16 and 32 KiB of readahead read 8.5, 9.4, 10.2 and 11.2 MiB of the root in 2,178, 1,432,
/// 1,059 and 879 reads; 4 KiB of read-around 0.2 to 0.3 MiB less than 16).
const MEDIUM_READAHEAD_KIB: u32 = 4;
const READ_AROUND_KIB: u32 = 4;

const MEDIUM: &str = "/run/live/medium";
const TORAM: &str = "/run/live/toram";
const ROOTFS: &str = "/run/live/rootfs";
const OVERLAY: &str = "/run/live/overlay";
const NEW_ROOT: &str = "/root";

fn main() {
    if let Err(e) = boot() {
        say(&format!("{e}"));
        say("the boot cannot go on: check the medium and the BMC's virtual media, then reset the server");
        loop {
            std::thread::sleep(Duration::from_secs(3600));
        }
    }
}

fn say(line: &str) {
    let _ = writeln!(io::stdout(), "maintenance-os: {line}");
}

/// An error in words, for the console.
struct Failed(String);

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

type Result<T> = std::result::Result<T, Failed>;

/// Adds what was being done to an I/O error.
trait Context<T> {
    fn context(self, what: impl FnOnce() -> String) -> Result<T>;
}

impl<T> Context<T> for io::Result<T> {
    fn context(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| Failed(format!("{}: {e}", what())))
    }
}

fn boot() -> Result<()> {
    mount("devtmpfs", "/dev", "devtmpfs", libc::MS_NOSUID, "mode=0755")?;
    mount("proc", "/proc", "proc", libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC, "")?;
    mount("sysfs", "/sys", "sysfs", libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC, "")?;
    mount("tmpfs", "/run", "tmpfs", libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC, "mode=0755,size=10%")?;
    let args = Cmdline::parse(&fs::read_to_string("/proc/cmdline").context(|| "read /proc/cmdline".into())?);
    load_modules();
    let medium = find_medium(args.marker.as_deref())?;
    let images = images(Path::new(MEDIUM))?;
    let images = if args.toram {
        say("copying the images into RAM (toram)");
        let copies = copy_to_ram(&images)?;
        umount(MEDIUM)?;
        copies
    } else {
        set_readahead(&medium, args.readahead_kib);
        name_for_udev(&medium);
        images
    };
    let lower = images.iter().map(|image| mount_image(image)).collect::<Result<Vec<_>>>()?;
    mkdir(OVERLAY)?;
    mount("tmpfs", OVERLAY, "tmpfs", 0, "mode=0755")?;
    mkdir(&format!("{OVERLAY}/rw"))?;
    mkdir(&format!("{OVERLAY}/work"))?;
    mkdir(NEW_ROOT)?;
    // The last image is the top layer: the overlay lists its lower directories top first.
    let lowerdir: Vec<&str> = lower.iter().rev().map(String::as_str).collect();
    let options = format!("lowerdir={},upperdir={OVERLAY}/rw,workdir={OVERLAY}/work", lowerdir.join(":"));
    mount("overlay", NEW_ROOT, "overlay", 0, &options)?;
    for fs in ["/run", "/dev", "/proc", "/sys"] {
        move_mount(fs, &format!("{NEW_ROOT}{fs}"))?;
    }
    switch_root(&args.init)
}

/// What the kernel command line asks of the initrd.
#[derive(Debug, PartialEq)]
struct Cmdline {
    marker: Option<String>,
    toram: bool,
    readahead_kib: u32,
    init: String,
}

impl Cmdline {
    fn parse(text: &str) -> Cmdline {
        let mut args =
            Cmdline { marker: None, toram: false, readahead_kib: MEDIUM_READAHEAD_KIB, init: "/sbin/init".into() };
        for word in text.split_ascii_whitespace() {
            match word.split_once('=') {
                Some(("maintenance.medium", marker)) if !marker.is_empty() => args.marker = Some(marker.into()),
                Some(("maintenance.readahead", kib)) => {
                    args.readahead_kib = kib.parse().ok().filter(|&k| k <= 4096).unwrap_or(MEDIUM_READAHEAD_KIB)
                }
                Some(("init", init)) if init.starts_with('/') => args.init = init.into(),
                None if word == "toram" => args.toram = true,
                _ => {}
            }
        }
        args
    }
}

/// The drivers of `/lib/modules/load-order`, in that order (dependencies first, as the build
/// wrote it). A driver whose hardware is absent loads all the same, or says so; neither stops
/// the boot: the medium is what must be found.
fn load_modules() {
    let order = fs::read_to_string("/lib/modules/load-order").unwrap_or_default();
    for module in order.lines().filter(|l| !l.is_empty()) {
        let path = format!("/lib/modules/{module}");
        let Ok(file) = File::open(&path) else { continue };
        // SAFETY: finit_module reads the module from the descriptor; the parameters string
        // is a valid, empty C string.
        let loaded = unsafe { libc::syscall(libc::SYS_finit_module, file.as_raw_fd(), c"".as_ptr(), 0) };
        if loaded != 0 {
            let error = io::Error::last_os_error();
            if error.raw_os_error() != Some(libc::EEXIST) && error.raw_os_error() != Some(libc::ENODEV) {
                say(&format!("{module}: {error}"));
            }
        }
    }
}

/// The medium, mounted at [`MEDIUM`]: a block device whose volume id is [`VOLUME_ID`] and
/// that holds `/.disk/MARKER` (any medium with the volume id when no marker is given). Whole
/// devices before their partitions (the image written to a USB stick shows both).
fn find_medium(marker: Option<&str>) -> Result<PathBuf> {
    mkdir(MEDIUM)?;
    let started = Instant::now();
    let mut said = Duration::ZERO;
    loop {
        for dev in candidates() {
            if volume_id(&dev).as_deref() != Some(VOLUME_ID) {
                continue;
            }
            let source = dev.to_string_lossy();
            if mount(&source, MEDIUM, "iso9660", libc::MS_RDONLY | libc::MS_NOATIME, "").is_err() {
                continue;
            }
            if marker.is_none_or(|marker| Path::new(MEDIUM).join(".disk").join(marker).exists()) {
                return Ok(dev);
            }
            umount(MEDIUM)?;
        }
        let waited = started.elapsed();
        let wanted = match marker {
            Some(marker) => format!("{} with /.disk/{marker}", String::from_utf8_lossy(VOLUME_ID)),
            None => String::from_utf8_lossy(VOLUME_ID).into_owned(),
        };
        if waited > MEDIUM_WAIT {
            return Err(Failed(format!("no boot medium {wanted} after {} s", MEDIUM_WAIT.as_secs())));
        }
        if waited >= said + Duration::from_secs(10) {
            said = waited;
            say(&format!("waiting for the boot medium ({wanted})"));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Tells the root's udev what the medium is, so that it does not probe it again: its blkid
/// probe reads the medium's first and last 512 KiB (1 MiB over the BMC's link at each boot,
/// before the result). The by-label and by-uuid links stay. A rule in /run (kept into the
/// root), for the device's first events only: a medium changed later (`DISK_MEDIA_CHANGE`)
/// is probed as any. Best effort: without it, udev probes.
fn name_for_udev(dev: &Path) {
    use std::os::unix::fs::FileExt;
    let Some(name) = dev.file_name().map(|n| n.to_string_lossy().into_owned()) else { return };
    let mut descriptor = [0u8; 2048];
    let read = File::open(dev).and_then(|f| f.read_exact_at(&mut descriptor, 32768));
    let Some(uuid) = read.ok().and_then(|()| iso_uuid(&descriptor)) else { return };
    let label = String::from_utf8_lossy(VOLUME_ID);
    let rule = format!(
        "# The boot medium, as the initrd found it (maintenance-init).\n\
         SUBSYSTEM==\"block\", KERNEL==\"{name}\", ENV{{DISK_MEDIA_CHANGE}}!=\"?*\", \
         ENV{{UDEV_DISABLE_PERSISTENT_STORAGE_BLKID_FLAG}}=\"1\", ENV{{ID_FS_TYPE}}=\"iso9660\", \
         ENV{{ID_FS_USAGE}}=\"filesystem\", ENV{{ID_FS_LABEL}}=\"{label}\", ENV{{ID_FS_LABEL_ENC}}=\"{label}\", \
         ENV{{ID_FS_UUID}}=\"{uuid}\", ENV{{ID_FS_UUID_ENC}}=\"{uuid}\"\n"
    );
    let _ = fs::create_dir_all("/run/udev/rules.d");
    let _ = fs::write("/run/udev/rules.d/59-boot-medium.rules", rule);
}

/// An ISO 9660 volume's UUID as blkid gives it: its modification time (else its creation
/// time) from the primary volume descriptor, `YYYY-MM-DD-HH-MM-SS-cc`.
fn iso_uuid(descriptor: &[u8]) -> Option<String> {
    let date = |at: usize| {
        descriptor.get(at..at + 16).filter(|d| d.iter().all(u8::is_ascii_digit) && d.iter().any(|&b| b != b'0'))
    };
    let d = date(830).or_else(|| date(813))?;
    let s = |r: std::ops::Range<usize>| String::from_utf8_lossy(&d[r]).into_owned();
    Some(format!("{}-{}-{}-{}-{}-{}-{}", s(0..4), s(4..6), s(6..8), s(8..10), s(10..12), s(12..14), s(14..16)))
}

/// Block devices that may hold the medium: each whole device, then its partitions.
fn candidates() -> Vec<PathBuf> {
    let mut names: Vec<String> = fs::read_dir("/sys/class/block")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| !["loop", "ram", "zram"].iter().any(|p| name.starts_with(p)))
        .collect();
    names.sort_by_key(|name| (Path::new("/sys/class/block").join(name).join("partition").exists(), name.clone()));
    names.into_iter().map(|name| Path::new("/dev").join(name)).collect()
}

/// The ISO 9660 volume id of a device, without its padding.
fn volume_id(dev: &Path) -> Option<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    let file = File::open(dev).ok()?;
    let mut id = [0u8; 32];
    file.read_exact_at(&mut id, VOLUME_ID_AT).ok()?;
    let end = id.iter().rposition(|&b| b != b' ').map_or(0, |at| at + 1);
    Some(id[..end].to_vec())
}

/// The squashfs images on the medium, in name order.
fn images(medium: &Path) -> Result<Vec<PathBuf>> {
    let dir = medium.join("live");
    let mut images: Vec<PathBuf> = fs::read_dir(&dir)
        .context(|| format!("read {}", dir.display()))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "squashfs"))
        .collect();
    images.sort();
    if images.is_empty() {
        return Err(Failed(format!("no images in {}", dir.display())));
    }
    Ok(images)
}

/// Copies of the images in a tmpfs of their size.
fn copy_to_ram(images: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let bytes: u64 = images.iter().map(|i| fs::metadata(i).map(|m| m.len()).unwrap_or(0)).sum();
    mkdir(TORAM)?;
    mount("tmpfs", TORAM, "tmpfs", libc::MS_NOSUID | libc::MS_NODEV, &format!("mode=0755,size={}", bytes + (1 << 20)))?;
    images
        .iter()
        .map(|image| {
            let copy = Path::new(TORAM).join(image.file_name().unwrap_or_default());
            fs::copy(image, &copy).context(|| format!("copy {} into RAM", image.display()))?;
            Ok(copy)
        })
        .collect()
}

/// Mounts one image at `/run/live/rootfs/NAME` through a loop device; returns the mount
/// point.
fn mount_image(image: &Path) -> Result<String> {
    let name = image.file_name().unwrap_or_default().to_string_lossy();
    let point = format!("{ROOTFS}/{name}");
    mkdir(&point)?;
    // The loop device clears itself when its last user goes: held open until mounted.
    let (device, _held) = attach(image).context(|| format!("a loop device for {}", image.display()))?;
    set_readahead(&device, READ_AROUND_KIB);
    mount(&device.to_string_lossy(), &point, "squashfs", libc::MS_RDONLY | libc::MS_NOATIME, "")?;
    Ok(point)
}

/// A block device's readahead (of the whole device, for a partition). Best effort: a device
/// that keeps its own is slower to boot from, not wrong.
fn set_readahead(dev: &Path, kib: u32) {
    let name = dev.file_name().unwrap_or_default().to_string_lossy().into_owned();
    let sys = Path::new("/sys/class/block").join(&name);
    let whole = match sys.join("partition").exists() {
        true => fs::canonicalize(&sys).ok().and_then(|p| p.parent().map(Path::to_path_buf)),
        false => Some(sys),
    };
    if let Some(whole) = whole {
        let _ = fs::write(whole.join("queue/read_ahead_kb"), kib.to_string());
    }
}

/// A read-only loop device over `backing`, and the device opened.
fn attach(backing: &Path) -> io::Result<(PathBuf, File)> {
    use linux_raw_sys::loop_device::{
        loop_config, LOOP_CONFIGURE, LOOP_CTL_GET_FREE, LO_FLAGS_AUTOCLEAR, LO_FLAGS_READ_ONLY,
    };
    let file = File::open(backing)?;
    let control = File::open("/dev/loop-control")?;
    loop {
        // SAFETY: LOOP_CTL_GET_FREE takes no argument and returns a device number.
        let number = unsafe { libc::ioctl(control.as_raw_fd(), LOOP_CTL_GET_FREE as _) };
        if number < 0 {
            return Err(io::Error::last_os_error());
        }
        let path = PathBuf::from(format!("/dev/loop{number}"));
        let device = OpenOptions::new().read(true).open(&path)?;
        // SAFETY: loop_config is integers, arrays of integers and a loop_info64: zero is a value.
        let mut config: loop_config = unsafe { std::mem::zeroed() };
        config.fd = file.as_raw_fd() as u32;
        config.info.lo_flags = LO_FLAGS_READ_ONLY as u32 | LO_FLAGS_AUTOCLEAR as u32;
        // SAFETY: `config` is a valid loop_config that outlives the call.
        if unsafe { libc::ioctl(device.as_raw_fd(), LOOP_CONFIGURE as _, &config) } == 0 {
            return Ok((path, device));
        }
        let error = io::Error::last_os_error();
        // Taken meanwhile by someone else: the next free one.
        if error.raw_os_error() != Some(libc::EBUSY) {
            return Err(error);
        }
    }
}

/// Makes `NEW_ROOT` the root and runs `init` there, after freeing the initrd's files (they
/// live in RAM, on the file system that is the root until now).
fn switch_root(init: &str) -> Result<()> {
    let initrd = fs::metadata("/").context(|| "stat /".into())?.dev();
    remove_tree(Path::new("/"), initrd);
    std::env::set_current_dir(NEW_ROOT).context(|| format!("enter {NEW_ROOT}"))?;
    move_mount(".", "/")?;
    let dot = CString::new(".").expect("no NUL");
    // SAFETY: chroot takes a valid C string.
    if unsafe { libc::chroot(dot.as_ptr()) } != 0 {
        return Err(Failed(format!("chroot {NEW_ROOT}: {}", io::Error::last_os_error())));
    }
    std::env::set_current_dir("/").context(|| "enter the new root".into())?;
    let program = CString::new(init).map_err(|_| Failed(format!("init={init}")))?;
    let argv = [program.as_ptr(), std::ptr::null()];
    // SAFETY: a valid, NULL-terminated argv; execv returns only on failure.
    unsafe { libc::execv(program.as_ptr(), argv.as_ptr()) };
    Err(Failed(format!("run {init}: {}", io::Error::last_os_error())))
}

/// Removes what lies under `dir` on device `dev` (the initrd), never crossing into a mount.
fn remove_tree(dir: &Path, dev: u64) {
    for entry in fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        let Ok(meta) = fs::symlink_metadata(&path) else { continue };
        if meta.dev() != dev {
            continue;
        }
        if meta.is_dir() {
            remove_tree(&path, dev);
            let _ = fs::remove_dir(&path);
        } else {
            let _ = fs::remove_file(&path);
        }
    }
}

fn mkdir(path: &str) -> Result<()> {
    fs::create_dir_all(path).context(|| format!("create {path}"))
}

fn mount(source: &str, target: &str, fstype: &str, flags: libc::c_ulong, data: &str) -> Result<()> {
    let _ = fs::create_dir_all(target);
    let c = |s: &str| CString::new(s).map_err(|_| Failed(format!("a NUL in {s:?}")));
    let (source_c, target_c, fstype_c, data_c) = (c(source)?, c(target)?, c(fstype)?, c(data)?);
    // SAFETY: valid C strings that outlive the call.
    let mounted =
        unsafe { libc::mount(source_c.as_ptr(), target_c.as_ptr(), fstype_c.as_ptr(), flags, data_c.as_ptr().cast()) };
    if mounted != 0 {
        return Err(Failed(format!("mount {fstype} {source} on {target}: {}", io::Error::last_os_error())));
    }
    Ok(())
}

fn move_mount(from: &str, to: &str) -> Result<()> {
    let c = |s: &str| CString::new(s).map_err(|_| Failed(format!("a NUL in {s:?}")));
    let (from_c, to_c) = (c(from)?, c(to)?);
    // SAFETY: valid C strings that outlive the call; MS_MOVE ignores the other arguments.
    if unsafe { libc::mount(from_c.as_ptr(), to_c.as_ptr(), std::ptr::null(), libc::MS_MOVE, std::ptr::null()) } != 0 {
        return Err(Failed(format!("move {from} to {to}: {}", io::Error::last_os_error())));
    }
    Ok(())
}

fn umount(target: &str) -> Result<()> {
    let target_c = CString::new(target).map_err(|_| Failed(format!("a NUL in {target:?}")))?;
    // SAFETY: a valid C string.
    if unsafe { libc::umount(target_c.as_ptr()) } != 0 {
        return Err(Failed(format!("unmount {target}: {}", io::Error::last_os_error())));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_names_the_medium_and_asks_for_toram() {
        let args = Cmdline::parse("maintenance.medium=provision-maintenance-0123 console=tty1 quiet toram\n");
        assert_eq!(
            args,
            Cmdline {
                marker: Some("provision-maintenance-0123".into()),
                toram: true,
                readahead_kib: MEDIUM_READAHEAD_KIB,
                init: "/sbin/init".into()
            }
        );
        let args = Cmdline::parse(
            "toram=no maintenance.medium= maintenance.readahead=64 init=/lib/systemd/systemd init=relative",
        );
        assert_eq!(
            args,
            Cmdline { marker: None, toram: false, readahead_kib: 64, init: "/lib/systemd/systemd".into() }
        );
        assert_eq!(Cmdline::parse("maintenance.readahead=lots").readahead_kib, MEDIUM_READAHEAD_KIB);
    }

    #[test]
    fn an_iso_uuid_is_its_modification_time_as_blkid_writes_it() {
        let mut descriptor = [0u8; 2048];
        descriptor[813..830].copy_from_slice(b"2026112619524400\0");
        assert_eq!(iso_uuid(&descriptor).as_deref(), Some("2026-11-26-19-52-44-00"));
        descriptor[830..847].copy_from_slice(b"2026112701020300\0");
        assert_eq!(iso_uuid(&descriptor).as_deref(), Some("2026-11-27-01-02-03-00"));
        assert_eq!(iso_uuid(&[0u8; 2048]), None);
    }

    #[test]
    fn a_volume_id_is_read_without_its_padding() {
        let dir = std::env::temp_dir().join(format!("maintenance-init-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let image = dir.join("iso");
        let mut bytes = vec![0u8; 34816];
        bytes[VOLUME_ID_AT as usize..VOLUME_ID_AT as usize + 32].copy_from_slice(b"PROVISION-MAINT                 ");
        fs::write(&image, &bytes).unwrap();
        assert_eq!(volume_id(&image).as_deref(), Some(VOLUME_ID));
        fs::write(&image, &bytes[..1000]).unwrap();
        assert_eq!(volume_id(&image), None, "too short to hold one");
        fs::remove_dir_all(&dir).unwrap();
    }
}
