//! `/init` of the maintenance OS's initrd: loads the drivers that reaching the boot medium
//! needs, finds the medium, stacks its `/live/*.squashfs` in name order under an overlay in
//! RAM, and hands over to systemd. Nothing else: the root's udev loads every other driver.
//!
//! Users boot the image through a server's BMC as virtual media, a link of 50 KB/s to a few
//! MB/s, often with a long round trip, so what this reads from the medium is what the boot
//! waits for. The images are read through loop devices over their files on the medium, whose
//! page cache keeps each compressed block once (squashfs reads its metadata and fragment
//! blocks again and again, its own caches being a few blocks each), and the medium's
//! readahead is cut to 4 KiB: the default 128 KiB read a block's neighbours too, a third of
//! what the boot read (BENCHMARKS.md). A page at a time means more reads, each a round trip:
//! on a link with a long one, `maintenance.readahead=KIB` trades bytes for round trips.
//!
//! The layout is live-boot's, which the dispatcher knows (it never takes a disk the running
//! system lives on): the medium at `/run/live/medium`, each image at `/run/live/rootfs/NAME`,
//! the overlay's writable half at `/run/live/overlay`. The kernel command line says which
//! medium and for how long to wait for it, and may ask for `toram`: the images (and the task
//! area that `provision-dispatcher media embed` writes into) copied into RAM first and the medium
//! let go, so that a BMC with one virtual drive can take the next ISO (`maintenance_init`, this
//! crate's library, reads it).
//!
//! The search reads each block device on a thread of its own (boot-io's `Readers`, the
//! dispatcher's too): a failing disk or a hung virtual medium holds its own thread for the
//! SCSI or USB time-outs, or for ever, never the search, its wait or the console. Every 10 s
//! the console hears which medium is awaited and which devices are not answering.
//!
//! On failure it says why on every console the kernel writes to, in words and in a
//! `PROVISION-RESULT v1` line (boot-io's `BootFailure`: its own failure word, an exit code of
//! the dispatcher's table, phase `boot`) for a controller waiting for one, repeated on the
//! serial consoles every 30 s as the dispatcher's failure unit repeats its own; and waits: no
//! shell (the image's root account is locked; a shell here would be root for anyone at the
//! console).

use std::collections::HashMap;
use std::convert::Infallible;
use std::ffi::{CString, OsStr};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use boot_io::console;
use boot_io::devices::{Readers, Unread};
use boot_io::result::{repeat_every, BootFailure};
use maintenance_init::{is_file_name, Cmdline};

/// The ISO 9660 volume id of the image (`cargo xtask image`).
const VOLUME_ID: &[u8] = b"PROVISION-MAINT";
/// Where a volume id starts on an ISO 9660 medium: the primary volume descriptor at 32768,
/// the id 40 bytes into it.
const VOLUME_ID_AT: u64 = 32768 + 40;
/// The read-around of the root's files on a page fault (each loop device's readahead), chosen
/// by the bytes read before the dispatcher's result (BENCHMARKS.md: 4, 8, 16 and 32 KiB of the
/// medium's readahead read 8.5, 9.4, 10.2 and 11.2 MiB of the root in 2,178, 1,432, 1,059 and
/// 879 reads; 4 KiB of read-around 0.2 to 0.3 MiB less than 16).
const READ_AROUND_KIB: u32 = 4;
/// How often the console hears what the search waits for.
const SAY_EVERY: Duration = Duration::from_secs(10);
/// How long one look waits for the devices' answers, at most and at least: a device that
/// answers later is taken at a later look.
const LOOK_PATIENCE: Duration = Duration::from_secs(1);
const LOOK_PATIENCE_MIN: Duration = Duration::from_millis(100);
/// A device is named as not answering once it has said nothing for this long: one whose probe
/// takes longer than a look (a mount over a slow link) answers every other look, and is named
/// by what it said last.
const SILENT_AFTER: Duration = Duration::from_secs(5);

const MEDIUM: &str = "/run/live/medium";
/// The maintenance ISO's task area, where `provision-dispatcher media embed` writes a task: the
/// dispatcher reads it on the medium, or with `toram` in RAM (`TORAM/TASK_AREA`), where the
/// images' copy takes it along before the medium is let go.
const TASK_AREA: &str = "provision/task.img";
/// Where each device with the image's volume id is mounted while its marker is looked for.
const PROBES: &str = "/run/live/probe";
const TORAM: &str = "/run/live/toram";
const ROOTFS: &str = "/run/live/rootfs";
const OVERLAY: &str = "/run/live/overlay";
const NEW_ROOT: &str = "/root";

fn main() {
    let started = Instant::now();
    let Err(failed) = boot();
    stop(&failed, started)
}

/// Why the boot cannot go on: the kind, and the words of what failed.
struct Failed {
    cause: BootFailure,
    words: String,
}

/// What failed, in words for the console.
type Result<T> = std::result::Result<T, String>;

/// Adds what was being done to an I/O error.
trait Context<T> {
    fn context(self, what: impl FnOnce() -> String) -> Result<T>;
}

impl<T> Context<T> for io::Result<T> {
    fn context(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| format!("{}: {e}", what()))
    }
}

fn boot() -> std::result::Result<Infallible, Failed> {
    let because = |cause| move |words| Failed { cause, words };
    setup().map_err(because(BootFailure::SetupFailed))?;
    let args = Cmdline::read(Path::new("/proc/cmdline")).unwrap_or_else(|e| {
        say(&format!("cannot read /proc/cmdline ({e}): any medium {} will do", String::from_utf8_lossy(VOLUME_ID)));
        Cmdline::default()
    });
    load_modules();
    let devices = Devices { class: "/sys/class/block".into(), dev: "/dev".into() };
    let marker = args.marker.clone();
    let readers = Readers::new(move |dev: &Path| probe(dev, marker.as_deref()));
    let medium = find_medium(&devices, &readers, &args, &mut say).map_err(because(BootFailure::MediumNotFound))?;
    let lower = layers(&medium, &args).map_err(because(BootFailure::LayersUnmountable))?;
    release_probes();
    let stuck: Vec<String> = readers
        .reading()
        .iter()
        .map(|dev| dev.file_name().unwrap_or_default().to_string_lossy().into_owned())
        .collect();
    if !stuck.is_empty() {
        // A read the kernel cannot interrupt holds up the start of systemd until it returns.
        say(&format!("starting systemd; not answering yet: {}", names(&stuck)));
    }
    root(&lower, &args.init).map_err(because(BootFailure::RootUnusable))
}

/// The kernel's own file systems, where the root's systemd expects them.
fn setup() -> Result<()> {
    mount("devtmpfs", "/dev", "devtmpfs", libc::MS_NOSUID, "mode=0755")?;
    mount("proc", "/proc", "proc", libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC, "")?;
    mount("sysfs", "/sys", "sysfs", libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC, "")?;
    mount("tmpfs", "/run", "tmpfs", libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC, "mode=0755,size=10%")
}

/// The medium's images mounted: copied into RAM first with `toram`; the mount points.
fn layers(medium: &Path, args: &Cmdline) -> Result<Vec<String>> {
    let images = images(Path::new(MEDIUM))?;
    let images = if args.toram {
        say("copying the images into RAM (toram)");
        let area = Path::new(MEDIUM).join(TASK_AREA);
        let copies = copy_to_ram(&images, area.is_file().then_some(area.as_path()))?;
        umount(MEDIUM)?;
        copies
    } else {
        set_readahead(medium, args.readahead_kib);
        name_for_udev(medium);
        images
    };
    images.iter().map(|image| mount_image(image)).collect()
}

/// The overlay over `lower` made the root, and `init` run in it.
fn root(lower: &[String], init: &Path) -> Result<Infallible> {
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
    switch_root(init)
}

/// Says `line` on every console the kernel writes to.
fn say(line: &str) {
    tell(&format!("maintenance-os: {line}\n"));
}

/// Writes `text` on every console the kernel writes to, each in one write that never blocks;
/// on `/init`'s own output (/dev/console) where none took it (before sysfs is mounted, say).
fn tell(text: &str) {
    let consoles = console::active(Path::new(console::ACTIVE));
    let took = consoles.iter().filter(|device| console::write_once(device, text.as_bytes()).is_ok()).count();
    if took == 0 {
        let _ = io::stdout().write_all(text.as_bytes());
    }
}

/// The end of a boot that cannot go on: the result line on every console, while their
/// buffers are empty (a line must go whole in one write), then why in words for the people at
/// them; then the line again on the serial consoles, every 30 s for an hour and every 5
/// minutes after, for a controller that attaches late (not on the screens, where it would
/// scroll the words away).
fn stop(failed: &Failed, started: Instant) -> ! {
    let line = failed.cause.line(u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX));
    tell(&line);
    let cause = failed.cause;
    tell(&format!(
        "maintenance-os: {}\nmaintenance-os: {} The boot cannot go on ({}, exit code {}).\nmaintenance-os: next: {}\n",
        failed.words,
        cause.summary(),
        cause.word(),
        cause.exit_code(),
        cause.next_step()
    ));
    let mut since_start = Duration::ZERO;
    loop {
        let interval = repeat_every(since_start);
        std::thread::sleep(interval);
        since_start += interval;
        let serial: Vec<PathBuf> =
            console::active(Path::new(console::ACTIVE)).into_iter().filter(|c| !console::is_vt(c)).collect();
        let took = serial.iter().filter(|device| console::write_once(device, line.as_bytes()).is_ok()).count();
        if took == 0 {
            let _ = io::stdout().write_all(line.as_bytes());
        }
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

/// Where the block devices are: sysfs's class and their nodes (a test's own tree).
struct Devices {
    class: PathBuf,
    dev: PathBuf,
}

impl Devices {
    /// Block devices that may hold the medium: each whole device, then its partitions.
    fn candidates(&self) -> Vec<PathBuf> {
        let mut names: Vec<String> = fs::read_dir(&self.class)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|name| !["loop", "ram", "zram"].iter().any(|p| name.starts_with(p)))
            .collect();
        names.sort_by_key(|name| (self.class.join(name).join("partition").exists(), name.clone()));
        names.into_iter().map(|name| self.dev.join(name)).collect()
    }
}

/// What a device holds, for the search.
#[derive(Debug, PartialEq, Eq)]
enum Holds {
    /// Not the image's volume id.
    Other,
    /// The image's volume id, without this build's marker: another build's ISO.
    OtherBuild,
    /// This build's medium, mounted at this probe point.
    ThisBuild(PathBuf),
}

/// What `dev` holds: its volume id read, and if it is the image's, the medium mounted (at its
/// probe point, under [`PROBES`]) and its marker looked for; another build's is let go again.
/// Runs on a reader's thread: an open, a read or a mount that never returns holds that thread
/// only.
fn probe(dev: &Path, marker: Option<&OsStr>) -> io::Result<Holds> {
    if volume_id(dev)? != VOLUME_ID {
        return Ok(Holds::Other);
    }
    let point = Path::new(PROBES).join(dev.file_name().unwrap_or_default());
    fs::create_dir_all(&point)?;
    sys_mount(dev.as_os_str(), point.as_os_str(), "iso9660", libc::MS_RDONLY | libc::MS_NOATIME, "")?;
    let this_build = match marker {
        None => true,
        Some(marker) => is_file_name(marker) && point.join(".disk").join(marker).exists(),
    };
    if this_build {
        return Ok(Holds::ThisBuild(point));
    }
    let _ = umount(&point.to_string_lossy());
    let _ = fs::remove_dir(&point);
    Ok(Holds::OtherBuild)
}

/// The medium, mounted at [`MEDIUM`]: a block device whose volume id is [`VOLUME_ID`] and
/// that holds `/.disk/MARKER` (any medium with the volume id when no marker is given), looked
/// for until the wait is over. Whole devices before their partitions (the image written to a
/// USB stick shows both). `say` hears every [`SAY_EVERY`] what is awaited and which devices
/// are not answering.
fn find_medium(
    devices: &Devices,
    readers: &Arc<Readers<Holds>>,
    args: &Cmdline,
    say: &mut dyn FnMut(&str),
) -> Result<PathBuf> {
    let wanted = match &args.marker {
        Some(marker) => {
            format!("{} with /.disk/{}", String::from_utf8_lossy(VOLUME_ID), String::from_utf8_lossy(marker.as_bytes()))
        }
        None => String::from_utf8_lossy(VOLUME_ID).into_owned(),
    };
    let started = Instant::now();
    let mut next_say = SAY_EVERY;
    // Each device's last answer in this search, and when it came.
    let mut last: HashMap<PathBuf, (Instant, Seen)> = HashMap::new();
    loop {
        let paths = devices.candidates();
        let patience = args.wait.saturating_sub(started.elapsed()).clamp(LOOK_PATIENCE_MIN, LOOK_PATIENCE);
        let answers = readers.read_all(&paths, Instant::now() + patience, &|| false);
        let mut found: Option<(&PathBuf, PathBuf)> = None;
        for (dev, answer) in paths.iter().zip(answers) {
            let seen = match answer {
                Ok(Holds::ThisBuild(point)) => {
                    match found {
                        None => found = Some((dev, point)),
                        // Two of this build (a USB stick and a CD): the first is taken.
                        Some(_) => {
                            let _ = umount(&point.to_string_lossy());
                        }
                    }
                    continue;
                }
                Ok(Holds::Other) => Seen::Other,
                Ok(Holds::OtherBuild) => Seen::OtherBuild,
                Err(Unread::Failed(why)) => Seen::Unreadable(why),
                Err(Unread::NotAnswering) => continue,
            };
            last.insert(dev.clone(), (Instant::now(), seen));
        }
        if let Some((dev, point)) = found {
            mkdir(MEDIUM)?;
            move_mount(&point.to_string_lossy(), MEDIUM)?;
            let _ = fs::remove_dir(point);
            return Ok(dev.clone());
        }
        let elapsed = started.elapsed();
        let heard = |dev: &PathBuf| last.get(dev).filter(|(at, _)| at.elapsed() < SILENT_AFTER).map(|(_, seen)| seen);
        let seen = looked_at(&paths.iter().map(|dev| (dev, heard(dev))).collect::<Vec<_>>());
        if elapsed >= args.wait {
            return Err(format!("no boot medium {wanted} after {} s; {seen}", args.wait.as_secs()));
        }
        if elapsed >= next_say {
            say(&format!(
                "waiting for the boot medium {wanted} ({} of {} s); {seen}",
                elapsed.as_secs(),
                args.wait.as_secs()
            ));
            next_say += SAY_EVERY;
        }
        std::thread::sleep(Duration::from_millis(200).min(args.wait - elapsed));
    }
}

/// Lets go of what the search left mounted after it chose the medium: another copy of this
/// build that answered later (the partition of a USB stick whose whole device was taken).
fn release_probes() {
    for entry in fs::read_dir(PROBES).into_iter().flatten().flatten() {
        let Ok(point) = CString::new(entry.path().as_os_str().as_bytes()) else { continue };
        // SAFETY: a valid C string; a lazy unmount of whatever is mounted there, if anything.
        unsafe { libc::umount2(point.as_ptr(), libc::MNT_DETACH) };
        let _ = fs::remove_dir(entry.path());
    }
    let _ = fs::remove_dir(PROBES);
}

/// What a device said at its last answer, for the console.
#[derive(Debug, PartialEq, Eq)]
enum Seen {
    Other,
    OtherBuild,
    Unreadable(String),
}

/// What the search heard, for the console: how many devices, whose medium is another build's,
/// which could not be read and why (an empty virtual CD says "no medium"), which are not
/// answering (`None`: no answer for [`SILENT_AFTER`]).
fn looked_at(devices: &[(&PathBuf, Option<&Seen>)]) -> String {
    if devices.is_empty() {
        return "no block device yet".into();
    }
    let which = |said: &dyn Fn(Option<&Seen>) -> Option<String>| -> Vec<String> {
        let name = |path: &PathBuf| path.file_name().unwrap_or_default().to_string_lossy().into_owned();
        devices.iter().filter_map(|(path, seen)| Some(name(path) + &said(*seen)?)).collect()
    };
    let mut heard = vec![format!("looked at {} device(s)", devices.len())];
    let other_build = which(&|seen| matches!(seen, Some(Seen::OtherBuild)).then(String::new));
    if !other_build.is_empty() {
        let volume = String::from_utf8_lossy(VOLUME_ID);
        heard.push(format!("{volume} of another build (without that marker) on {}", names(&other_build)));
    }
    let unreadable = which(&|seen| match seen {
        Some(Seen::Unreadable(why)) => Some(format!(" ({why})")),
        _ => None,
    });
    if !unreadable.is_empty() {
        heard.push(format!("unreadable: {}", names(&unreadable)));
    }
    let silent = which(&|seen| seen.is_none().then(String::new));
    if !silent.is_empty() {
        heard.push(format!("not answering: {}", names(&silent)));
    }
    heard.join("; ")
}

/// The first eight of `names`, and how many more.
fn names(names: &[String]) -> String {
    const SHOWN: usize = 8;
    let mut shown: Vec<&str> = names.iter().take(SHOWN).map(String::as_str).collect();
    let more = format!("and {} more", names.len().saturating_sub(SHOWN));
    if names.len() > SHOWN {
        shown.push(&more);
    }
    shown.join(", ")
}

/// Tells the root's udev what the medium is, so that it does not probe it again: its blkid
/// probe reads the medium's first and last 512 KiB (1 MiB over the BMC's link at each boot,
/// before the result). The by-label and by-uuid links stay. A rule in /run (kept into the
/// root), for the device's first events only: a medium changed later (`DISK_MEDIA_CHANGE`)
/// is probed as any. Best effort: without it, udev probes.
fn name_for_udev(dev: &Path) {
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

/// The ISO 9660 volume id of a device, without its padding.
fn volume_id(dev: &Path) -> io::Result<Vec<u8>> {
    let file = boot_io::devices::open(dev)?;
    let mut id = [0u8; 32];
    file.read_exact_at(&mut id, VOLUME_ID_AT)?;
    let end = id.iter().rposition(|&b| b != b' ').map_or(0, |at| at + 1);
    Ok(id[..end].to_vec())
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
        return Err(format!("no images in {}", dir.display()));
    }
    Ok(images)
}

/// Copies of the images, and of the task area if the medium has one, in a tmpfs of their size.
fn copy_to_ram(images: &[PathBuf], area: Option<&Path>) -> Result<Vec<PathBuf>> {
    let files = images.iter().map(PathBuf::as_path).chain(area);
    let bytes: u64 = files.map(|f| fs::metadata(f).map(|m| m.len()).unwrap_or(0)).sum();
    mkdir(TORAM)?;
    mount("tmpfs", TORAM, "tmpfs", libc::MS_NOSUID | libc::MS_NODEV, &format!("mode=0755,size={}", bytes + (1 << 20)))?;
    copy_into(Path::new(TORAM), images, area)
}

/// Copies of the images in `dir`, and of the task area at `dir/TASK_AREA`.
fn copy_into(dir: &Path, images: &[PathBuf], area: Option<&Path>) -> Result<Vec<PathBuf>> {
    if let Some(area) = area {
        let copy = dir.join(TASK_AREA);
        mkdir(&copy.parent().unwrap_or(dir).to_string_lossy())?;
        fs::copy(area, &copy).context(|| format!("copy {} into RAM", area.display()))?;
    }
    images
        .iter()
        .map(|image| {
            let copy = dir.join(image.file_name().unwrap_or_default());
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
fn switch_root(init: &Path) -> Result<Infallible> {
    let initrd = fs::metadata("/").context(|| "stat /".into())?.dev();
    remove_tree(Path::new("/"), initrd);
    std::env::set_current_dir(NEW_ROOT).context(|| format!("enter {NEW_ROOT}"))?;
    move_mount(".", "/")?;
    let dot = CString::new(".").expect("no NUL");
    // SAFETY: chroot takes a valid C string.
    if unsafe { libc::chroot(dot.as_ptr()) } != 0 {
        return Err(format!("chroot {NEW_ROOT}: {}", io::Error::last_os_error()));
    }
    std::env::set_current_dir("/").context(|| "enter the new root".into())?;
    let shown = init.display();
    let program = CString::new(init.as_os_str().as_bytes()).map_err(|_| format!("init={shown}"))?;
    let argv = [program.as_ptr(), std::ptr::null()];
    // SAFETY: a valid, NULL-terminated argv; execv returns only on failure.
    unsafe { libc::execv(program.as_ptr(), argv.as_ptr()) };
    Err(format!("run {shown}: {}", io::Error::last_os_error()))
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
    sys_mount(OsStr::new(source), OsStr::new(target), fstype, flags, data)
        .context(|| format!("mount {fstype} {source} on {target}"))
}

fn sys_mount(source: &OsStr, target: &OsStr, fstype: &str, flags: libc::c_ulong, data: &str) -> io::Result<()> {
    let c = |s: &[u8]| CString::new(s).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput));
    let (source_c, target_c) = (c(source.as_bytes())?, c(target.as_bytes())?);
    let (fstype_c, data_c) = (c(fstype.as_bytes())?, c(data.as_bytes())?);
    // SAFETY: valid C strings that outlive the call.
    let mounted =
        unsafe { libc::mount(source_c.as_ptr(), target_c.as_ptr(), fstype_c.as_ptr(), flags, data_c.as_ptr().cast()) };
    if mounted != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn move_mount(from: &str, to: &str) -> Result<()> {
    let c = |s: &str| CString::new(s).map_err(|_| format!("a NUL in {s:?}"));
    let (from_c, to_c) = (c(from)?, c(to)?);
    // SAFETY: valid C strings that outlive the call; MS_MOVE ignores the other arguments.
    if unsafe { libc::mount(from_c.as_ptr(), to_c.as_ptr(), std::ptr::null(), libc::MS_MOVE, std::ptr::null()) } != 0 {
        return Err(format!("move {from} to {to}: {}", io::Error::last_os_error()));
    }
    Ok(())
}

fn umount(target: &str) -> Result<()> {
    let target_c = CString::new(target).map_err(|_| format!("a NUL in {target:?}"))?;
    // SAFETY: a valid C string.
    if unsafe { libc::umount(target_c.as_ptr()) } != 0 {
        return Err(format!("unmount {target}: {}", io::Error::last_os_error()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With `toram` the medium is let go: the task area goes into RAM with the images, where
    /// the dispatcher reads it (`toram/provision/task.img`).
    #[test]
    fn toram_takes_the_task_area_along() {
        let medium = temp_dir("medium");
        let toram = temp_dir("toram");
        fs::create_dir_all(medium.join("live")).unwrap();
        fs::create_dir_all(medium.join("provision")).unwrap();
        fs::write(medium.join("live/00-base.squashfs"), b"base").unwrap();
        fs::write(medium.join(TASK_AREA), b"provision-dispatcher task area\n\0 and a task").unwrap();
        let images = images(&medium).unwrap();
        let area = medium.join(TASK_AREA);
        let copies = copy_into(&toram, &images, Some(&area)).unwrap();
        assert_eq!(copies, [toram.join("00-base.squashfs")]);
        assert_eq!(fs::read(toram.join("provision/task.img")).unwrap(), fs::read(&area).unwrap());
        // A medium without an area (an image built before it) gives the images alone.
        let bare = temp_dir("toram-bare");
        copy_into(&bare, &images, None).unwrap();
        assert!(!bare.join("provision").exists());
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

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("maintenance-init-{name}-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_volume_id_is_read_without_its_padding() {
        let dir = temp_dir("volume");
        let image = dir.join("iso");
        let mut bytes = vec![0u8; 34816];
        bytes[VOLUME_ID_AT as usize..VOLUME_ID_AT as usize + 32].copy_from_slice(b"PROVISION-MAINT                 ");
        fs::write(&image, &bytes).unwrap();
        assert_eq!(volume_id(&image).unwrap(), VOLUME_ID);
        fs::write(&image, &bytes[..1000]).unwrap();
        assert!(volume_id(&image).is_err(), "too short to hold one");
        fs::remove_dir_all(&dir).unwrap();
    }

    /// Devices named in a class directory of a test's own, with nodes beside it.
    fn devices(dir: &Path, names: &[&str]) -> Devices {
        let devices = Devices { class: dir.join("class"), dev: dir.join("dev") };
        for name in names {
            fs::create_dir_all(devices.class.join(name)).unwrap();
            fs::create_dir_all(&devices.dev).unwrap();
            fs::write(devices.dev.join(name), b"").unwrap();
        }
        devices
    }

    /// Issue 40, finding 2: a device whose open or read never returned held PID 1 for ever, in
    /// silence. `sda` (sorted before the medium, as a server's disks are before `sr0`) never
    /// answers; `sr0` holds another build's medium.
    #[test]
    fn a_device_that_never_answers_holds_up_neither_the_search_nor_its_wait() {
        let dir = temp_dir("search");
        let devices = devices(&dir, &["sda", "sr0", "sr0p1", "sr1"]);
        fs::write(devices.class.join("sr0p1/partition"), "1\n").unwrap();
        let nodes = ["sda", "sr0", "sr1", "sr0p1"].map(|name| dir.join("dev").join(name));
        assert_eq!(devices.candidates(), nodes, "whole devices first");
        let readers = Readers::new(|dev: &Path| match dev.file_name().and_then(OsStr::to_str) {
            Some("sda") => loop {
                std::thread::park();
            },
            Some("sr0") => Ok(Holds::OtherBuild),
            Some("sr1") => Err(io::Error::from_raw_os_error(libc::ENOMEDIUM)),
            _ => Ok(Holds::Other),
        });
        let args = Cmdline {
            marker: Some("provision-maintenance-0123".into()),
            wait: Duration::from_secs(2),
            ..Cmdline::default()
        };
        let (done, searched) = std::sync::mpsc::channel();
        std::thread::spawn(move || done.send(find_medium(&devices, &readers, &args, &mut |_| {})));
        let found = searched.recv_timeout(Duration::from_secs(60)).expect("the search ends at its wait");
        assert_eq!(
            found.unwrap_err(),
            "no boot medium PROVISION-MAINT with /.disk/provision-maintenance-0123 after 2 s; looked at 4 device(s); \
             PROVISION-MAINT of another build (without that marker) on sr0; unreadable: sr1 (no medium); \
             not answering: sda"
        );
        fs::remove_dir_all(&dir).unwrap();
    }

    /// A probe slower than a look (a mount over a slow link) answers every other look: the
    /// device is named by what it said last, not as not answering.
    #[test]
    fn a_slow_device_is_named_by_its_last_answer() {
        let dir = temp_dir("slow");
        let devices = devices(&dir, &["sr0"]);
        let readers = Readers::new(|_: &Path| {
            std::thread::sleep(LOOK_PATIENCE + LOOK_PATIENCE / 2);
            Ok(Holds::OtherBuild)
        });
        let args = Cmdline { wait: Duration::from_secs(4), ..Cmdline::default() };
        let words = find_medium(&devices, &readers, &args, &mut |_| {}).unwrap_err();
        assert!(
            words.ends_with("looked at 1 device(s); PROVISION-MAINT of another build (without that marker) on sr0"),
            "{words}"
        );
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn many_names_are_counted() {
        let devices: Vec<String> = (0..10).map(|n| format!("sd{n}")).collect();
        assert_eq!(names(&devices), "sd0, sd1, sd2, sd3, sd4, sd5, sd6, sd7, and 2 more");
        assert_eq!(names(&devices[..1]), "sd0");
    }
}
