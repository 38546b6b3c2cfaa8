//! QEMU: finding or installing it for an architecture, choosing the accelerator, the machine
//! a case's guest is (a server with a BMC's virtual media), running it with a deadline so that
//! nothing outlives the harness, and plugging media in and out through QMP.
//!
//! Installing: QEMU 10 of bookworm-backports (Debian 12's 7.2 loses 15 to 25 s of each boot
//! under TCG, [`Qemu::find_or_install`]). Its package set, as apt would install it, is
//! downloaded through a private apt (`crate::apt`) and unpacked into the cache, and run from
//! there with `LD_LIBRARY_PATH` and `-L`: installing it would replace the machine's own
//! qemu-user-static, and Debian 12's qemu-system packages conflict with the backported
//! qemu-utils these machines ship (MACHINE-NOTES).
//!
//! Accelerator: `/dev/kvm` here is a PVM device under which QEMU aborts or Debian kernels
//! hang, and QEMU's own kvm→tcg fallback catches neither. So a tiny probe (the guest kernel
//! with no root, which panics at once under a working KVM) decides, with a deadline. An arm64
//! guest on an x86 host always runs under TCG.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use super::cases::{BootMedia, DiskBus, DiskSpec, Firmware};
use crate::apt::{PrivateApt, Suites, BACKPORTS};
use crate::arch::Arch;
use crate::system;

/// A QEMU that runs here, and the accelerator it should use.
pub struct Qemu {
    pub arch: Arch,
    binary: PathBuf,
    /// `-L` directories (firmware), for an unpacked QEMU whose compiled-in paths are absent.
    firmware: Vec<PathBuf>,
    /// `LD_LIBRARY_PATH` for an unpacked QEMU.
    libraries: Option<OsString>,
    pub accel: Accel,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Accel {
    Kvm,
    Tcg,
}

fn binary(arch: Arch) -> &'static str {
    match arch {
        Arch::Amd64 => "qemu-system-x86_64",
        Arch::Arm64 => "qemu-system-aarch64",
    }
}

fn package(arch: Arch) -> &'static str {
    match arch {
        Arch::Amd64 => "qemu-system-x86",
        Arch::Arm64 => "qemu-system-arm",
    }
}

impl Qemu {
    /// The system's QEMU if it is 8.0 or later, else the unpacked one of bookworm-backports in
    /// the cache (made if missing or broken). The accelerator starts as TCG; see
    /// [`Qemu::choose_accel`].
    ///
    /// Why not Debian 12's own QEMU 7.2: under TCG it spends 15 to 25 s of every boot
    /// invalidating translated code right after the initramfs hands over to systemd (measured:
    /// the first process of the real root takes 16 s to print its usage as PID 1, 0.2 s with
    /// QEMU 10; `perf` shows 7.2 inside `page_collection_lock` and the TB hash). QEMU 8.0
    /// reworked that; with bookworm-backports' QEMU 10 the same boot reaches it in 9 s, not 30.
    pub fn find_or_install(arch: Arch) -> Result<Qemu> {
        if system::has(binary(arch)) {
            let qemu = Qemu { arch, binary: binary(arch).into(), firmware: vec![], libraries: None, accel: Accel::Tcg };
            let version = qemu.version()?;
            if major_version(&version).is_some_and(|major| major >= MIN_MAJOR) {
                return Ok(qemu);
            }
            eprintln!("vm: the system's {version} is slow under TCG; using bookworm-backports' QEMU");
        }
        let dir = crate::cache_dir().join(format!("qemu-{}-backports", package(arch)));
        let unpacked = Qemu::unpacked(arch, &dir);
        if unpacked.version().is_ok() {
            return Ok(unpacked);
        }
        install(package(arch), &dir)?;
        let version = unpacked.version().context("the unpacked QEMU does not run")?;
        if major_version(&version).is_none_or(|major| major < MIN_MAJOR) {
            bail!("bookworm-backports offers {version}; the VM tests need QEMU {MIN_MAJOR} or later");
        }
        Ok(unpacked)
    }

    fn unpacked(arch: Arch, dir: &Path) -> Qemu {
        let libraries = std::env::join_paths([dir.join("usr/lib/x86_64-linux-gnu"), dir.join("lib/x86_64-linux-gnu")])
            .expect("cache paths hold no ':'");
        Qemu {
            arch,
            binary: dir.join("usr/bin").join(binary(arch)),
            firmware: ["usr/share/qemu", "usr/share/seabios", "usr/lib/ipxe/qemu"]
                .iter()
                .map(|d| dir.join(d))
                .collect(),
            libraries: Some(libraries),
            accel: Accel::Tcg,
        }
    }

    pub fn version(&self) -> Result<String> {
        let text = system::output(self.command().arg("--version").stderr(Stdio::null()))?;
        Ok(text.lines().next().unwrap_or_default().to_owned())
    }

    fn command(&self) -> Command {
        let mut cmd = Command::new(&self.binary);
        if let Some(libraries) = &self.libraries {
            cmd.env("LD_LIBRARY_PATH", libraries);
        }
        for dir in &self.firmware {
            cmd.arg("-L").arg(dir);
        }
        cmd
    }

    /// Sets the accelerator: `PROVISION_VM_ACCEL=kvm|tcg` if given, else KVM only for a guest
    /// of the host's architecture and only if a probe boot of `kernel` under KVM reaches its
    /// panic in time. The verdict is kept in the cache for the rest of this host boot
    /// (`/proc/sys/kernel/random/boot_id`).
    pub fn choose_accel(&mut self, kernel: &Path, workdir: &Path) -> Result<()> {
        self.accel = match std::env::var("PROVISION_VM_ACCEL").as_deref() {
            _ if self.arch != Arch::host() => Accel::Tcg,
            Ok("kvm") => Accel::Kvm,
            Ok("tcg") => Accel::Tcg,
            Ok(other) => bail!("PROVISION_VM_ACCEL must be kvm or tcg, not '{other}'"),
            Err(_) if !Path::new("/dev/kvm").exists() => Accel::Tcg,
            Err(_) => {
                let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
                let verdict_file = crate::cache_dir().join("kvm-probe");
                match std::fs::read_to_string(&verdict_file).ok().as_deref().and_then(|v| v.split_once(' ')) {
                    Some((id, verdict)) if id == boot_id.trim() => match verdict.trim() {
                        "kvm" => Accel::Kvm,
                        _ => Accel::Tcg,
                    },
                    _ => {
                        let accel = self.probe_kvm(kernel, workdir)?;
                        let verdict = if accel == Accel::Kvm { "kvm" } else { "tcg" };
                        std::fs::write(&verdict_file, format!("{} {verdict}\n", boot_id.trim()))?;
                        accel
                    }
                }
            }
        };
        Ok(())
    }

    fn probe_kvm(&self, kernel: &Path, workdir: &Path) -> Result<Accel> {
        const DEADLINE: Duration = Duration::from_secs(20);
        const PANIC: &str = "Kernel panic";
        let console = workdir.join("kvm-probe.log");
        let _ = std::fs::remove_file(&console);
        let mut cmd = self.command();
        cmd.args(["-nodefaults", "-no-user-config", "-display", "none", "-no-reboot", "-M", "q35", "-m", "256"])
            .args(["-accel", "kvm", "-cpu", "host"])
            .arg("-kernel")
            .arg(kernel)
            .args(["-append", "console=ttyS0 panic=-1"])
            .arg("-serial")
            .arg(format!("file:{}", console.display()));
        // What a broken KVM makes QEMU say (an assertion about MSRs here) is not news.
        cmd.stderr(Stdio::null());
        let mut guest = Guest::spawn(cmd)?;
        let started = Instant::now();
        let booted = loop {
            let text = std::fs::read_to_string(&console).unwrap_or_default();
            if text.contains(PANIC) {
                break true;
            }
            if guest.exited()? || started.elapsed() > DEADLINE {
                break false;
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        drop(guest);
        eprintln!(
            "vm: KVM probe: {} in {:.1?}",
            if booted { "works" } else { "hangs or fails, using TCG" },
            started.elapsed()
        );
        Ok(if booted { Accel::Kvm } else { Accel::Tcg })
    }

    /// Starts a guest. QEMU dies with the harness (`PR_SET_PDEATHSIG`) and is killed when the
    /// returned [`Guest`] is dropped.
    pub fn launch(&self, machine: &Machine) -> Result<Guest> {
        let mut cmd = self.command();
        cmd.args(["-nodefaults", "-no-user-config", "-display", "none", "-no-reboot"]);
        // Secure Boot on amd64: OVMF keeps its variables (the keys) safe from the OS in SMM,
        // and its secboot build refuses to run without it.
        let q35 = if machine.secure_boot { "q35,smm=on" } else { "q35" };
        match (self.arch, self.accel) {
            (Arch::Amd64, Accel::Kvm) => cmd.args(["-M", q35, "-accel", "kvm", "-cpu", "host"]),
            // ERMS/FSRM make the guest kernel copy and clear pages with `rep movsb/stosb`,
            // which TCG runs one byte at a time: without them the boot is a third faster.
            (Arch::Amd64, Accel::Tcg) => cmd.args(["-M", q35, "-accel", "tcg", "-cpu", "max,erms=off,fsrm=off"]),
            // Cheap pointer authentication: the architected algorithm is slow under TCG.
            (Arch::Arm64, _) => cmd.args(["-M", "virt", "-accel", "tcg", "-cpu", "max,pauth-impdef=on"]),
        };
        cmd.arg("-smp").arg(machine.cpus.to_string()).args(["-m", "1024"]);
        // The SMBIOS system UUID, which a bound recipe names.
        if let Some(uuid) = &machine.uuid {
            cmd.arg("-uuid").arg(uuid);
        }
        // A video console (tty1), as a server's BMC shows one.
        match self.arch {
            Arch::Amd64 => cmd.args(["-vga", "std"]),
            // QEMU 10 looks for an x86 option ROM for it (vgabios-ramfb.bin) and says so on
            // stderr when it is missing, as on arm64 where nothing would run it: harmless.
            Arch::Arm64 => cmd.args(["-device", "ramfb"]),
        };
        if let (Firmware::Uefi, Some(uefi)) = (machine.firmware, &machine.uefi) {
            cmd.arg("-drive")
                .arg(format!("if=pflash,format=raw,unit=0,readonly=on,file={}", comma_escaped(&uefi.code)));
            cmd.arg("-drive").arg(format!("if=pflash,format=raw,unit=1,file={}", comma_escaped(&uefi.vars)));
            if machine.secure_boot && self.arch == Arch::Amd64 {
                cmd.args(["-global", "driver=cfi.pflash01,property=secure,value=on"]);
            }
        }
        cmd.args(["-device", "qemu-xhci,id=xhci"]);
        // A BMC's virtual-media link, as slow as the case says.
        let link = machine.boot_read_bytes_per_sec.map(|bps| format!(",throttling.bps-read={bps}")).unwrap_or_default();
        match &machine.boot {
            Boot::Image { iso, media } => {
                let cdrom = if *media == BootMedia::Cd { ",media=cdrom,readonly=on" } else { ",snapshot=on" };
                cmd.arg("-drive").arg(drive_arg(BOOT_DRIVE, iso, &format!("{cdrom}{link}")));
                cmd.args(["-device", &format!("usb-storage,bus=xhci.0,drive={BOOT_DRIVE},id=bootdev,bootindex=0")]);
            }
            Boot::Kernel { kernel, initrd, cmdline, iso } => {
                cmd.arg("-kernel").arg(kernel).arg("-initrd").arg(initrd).arg("-append").arg(cmdline);
                // Still the live medium, which the initrd finds by its volume id and marker.
                cmd.arg("-drive").arg(drive_arg(BOOT_DRIVE, iso, &format!(",media=cdrom,readonly=on{link}")));
                cmd.args(["-device", &format!("usb-storage,bus=xhci.0,drive={BOOT_DRIVE},id=bootdev")]);
            }
        }
        if machine.disks.iter().any(|(_, spec)| spec.bus == DiskBus::Scsi) {
            cmd.args(["-device", "virtio-scsi-pci,id=scsi"]);
        }
        for (n, (image, spec)) in machine.disks.iter().enumerate() {
            cmd.arg("-drive").arg(drive_arg(&format!("disk{n}"), image, ""));
            let serial = spec.serial.as_deref().map(|s| format!(",serial={s}")).unwrap_or_default();
            let device = match spec.bus {
                DiskBus::Virtio => format!("virtio-blk-pci,drive=disk{n}{serial}"),
                // rotation_rate=1: a solid-state disk, as the kernel then says (rotational 0).
                DiskBus::Scsi => {
                    let wwn = spec.wwn.as_deref().map(|w| format!(",wwn={w}")).unwrap_or_default();
                    format!("scsi-hd,bus=scsi.0,drive=disk{n}{serial}{wwn},rotation_rate=1")
                }
                // QEMU's NVMe controller needs a serial.
                DiskBus::Nvme => {
                    let serial = spec.serial.clone().unwrap_or_else(|| format!("nvme-disk{n}"));
                    format!("nvme,drive=disk{n},serial={serial}")
                }
                DiskBus::Usb => format!("usb-storage,bus=xhci.0,drive=disk{n}{serial},removable=off"),
            };
            cmd.args(["-device", &device]);
        }
        let throttle =
            machine.task_read_bytes_per_sec.map(|bps| format!(",throttling.bps-read={bps}")).unwrap_or_default();
        if let Some(task) = &machine.task {
            cmd.arg("-drive").arg(drive_arg(TASK_DRIVE, task, &format!(",media=cdrom,readonly=on{throttle}")));
            if !machine.task_late {
                cmd.args(["-device", &task_device()]);
            }
        }
        for (n, iso) in machine.extra.iter().enumerate() {
            cmd.arg("-drive").arg(drive_arg(&format!("extra{n}"), iso, ",media=cdrom,readonly=on"));
            cmd.args(["-device", &format!("usb-storage,bus=xhci.0,drive=extra{n},id=extradev{n}")]);
        }
        if let Some(fault) = machine.fault {
            cmd.arg("-fw_cfg").arg(format!("name={FAULT_FW_CFG},string={fault}"));
        }
        cmd.args(&machine.bmc);
        cmd.args(["-device", "virtio-serial-pci,id=serial"])
            .arg("-chardev")
            .arg(format!("file,id=report,path={}", comma_escaped(&machine.report)))
            .args(["-device", &format!("virtserialport,bus=serial.0,chardev=report,name={REPORT_PORT}")]);
        // The way back, in a boot of several rounds: the harness tells the reporter to go on.
        if let Some(control) = &machine.control {
            cmd.arg("-chardev")
                .arg(format!("socket,id=control,path={},server=on,wait=off", comma_escaped(control)))
                .args(["-device", &format!("virtserialport,bus=serial.0,chardev=control,name={CONTROL_PORT}")]);
        }
        cmd.arg("-serial")
            .arg(format!("file:{}", machine.console.display()))
            .arg("-qmp")
            .arg(format!("unix:{},server=on,wait=off", comma_escaped(&machine.qmp)));
        // Every read of every drive, timed, and which file each drive's node is
        // (`vm::reads`): QEMU's log trace backend, a line per request.
        cmd.args(["-msg", "timestamp=on", "-trace", "enable=blk_co_preadv", "-trace", "enable=bdrv_open_common"])
            .arg("-D")
            .arg(&machine.reads);
        let stderr =
            std::fs::File::create(&machine.stderr).with_context(|| format!("create {}", machine.stderr.display()))?;
        cmd.stderr(stderr);
        Guest::spawn(cmd)
    }
}

/// The name the guest sees at `/dev/virtio-ports/` (tests/vm-guest/usr/lib/vm-test/report).
pub const REPORT_PORT: &str = "vm-test.report";

/// The port on which the harness tells the reporter what comes after a round's report, in a
/// boot of several rounds ([`super::rounds`]): `next` or `poweroff`.
pub const CONTROL_PORT: &str = "vm-test.control";

/// The drive of the maintenance OS's own medium (the image ISO), whose reads a slow
/// virtual-media link makes costly: [`boot_read_bytes`].
const BOOT_DRIVE: &str = "boot";

const TASK_DRIVE: &str = "task";

/// Where the guest reads the fault of a `fault_while_held` case:
/// `/sys/firmware/qemu_fw_cfg/by_name/opt/vm-test/fault/raw` (tests/vm-guest/usr/lib/vm-test/report).
const FAULT_FW_CFG: &str = "opt/vm-test/fault";

/// The task CD as a BMC's virtual media shows it: a USB CD.
fn task_device() -> String {
    format!("usb-storage,bus=xhci.0,drive={TASK_DRIVE},id=taskdev")
}

/// UEFI firmware: its code (read-only) and a copy of its variables for one guest.
pub struct Uefi {
    pub code: PathBuf,
    pub vars: PathBuf,
}

/// What boots: the image ISO through the firmware (as a virtual CD or written to a USB disk),
/// or the image's kernel given directly, with arguments added and the ISO still attached.
pub enum Boot {
    Image { iso: PathBuf, media: BootMedia },
    Kernel { kernel: PathBuf, initrd: PathBuf, cmdline: String, iso: PathBuf },
}

/// One guest's hardware: a server with two blank local disks (/dev/vda, /dev/vdb), a BMC's
/// virtual media on USB, a video and a serial console, and the report port.
pub struct Machine {
    pub cpus: usize,
    /// The SMBIOS system UUID (QEMU's own default when `None`).
    pub uuid: Option<String>,
    pub firmware: Firmware,
    pub uefi: Option<Uefi>,
    /// UEFI with Secure Boot enforced (`uefi` is then the firmware that enforces it).
    pub secure_boot: bool,
    pub boot: Boot,
    /// The local disks: each image and what it is.
    pub disks: Vec<(PathBuf, DiskSpec)>,
    /// The task CD (`None`: the task is embedded in the image).
    pub task: Option<PathBuf>,
    /// The task CD is not plugged at power-on; [`plug_task_media`] plugs it.
    pub task_late: bool,
    pub task_read_bytes_per_sec: Option<u64>,
    /// Reads from the boot medium throttled to this many bytes a second (a slow BMC link).
    pub boot_read_bytes_per_sec: Option<u64>,
    /// The fault the guest does while it holds the dispatcher (`fault_while_held`), told to
    /// the guest through QEMU's firmware configuration (`opt/vm-test/fault`).
    pub fault: Option<&'static str>,
    /// QEMU's arguments for a BMC outside the guest (`vm::bmc`), if the case has one.
    pub bmc: Vec<String>,
    pub extra: Vec<PathBuf>,
    pub console: PathBuf,
    pub report: PathBuf,
    /// The socket behind the control port ([`CONTROL_PORT`]), in a boot of several rounds.
    pub control: Option<PathBuf>,
    /// QEMU's trace of the drives' reads.
    pub reads: PathBuf,
    /// What QEMU itself says (its warnings, or why it ended): a guest gone without a report
    /// is explained from here.
    pub stderr: PathBuf,
    pub qmp: PathBuf,
}

/// A running QEMU. Dropping it kills QEMU and reaps it.
pub struct Guest {
    child: Child,
    exited: Option<ExitStatus>,
}

impl Guest {
    fn spawn(mut cmd: Command) -> Result<Guest> {
        cmd.stdin(Stdio::null()).stdout(Stdio::null());
        let parent = std::process::id() as libc::pid_t;
        // SAFETY: between fork and exec only async-signal-safe calls (prctl, getppid, _exit).
        unsafe {
            cmd.pre_exec(move || {
                // If the harness dies (SIGKILL, a panic elsewhere), QEMU goes with it.
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 || libc::getppid() != parent {
                    libc::_exit(1);
                }
                Ok(())
            });
        }
        let child = cmd.spawn().with_context(|| format!("cannot start {}", system::describe(&cmd)))?;
        Ok(Guest { child, exited: None })
    }

    /// Whether QEMU has exited (reaping it if so).
    pub fn exited(&mut self) -> Result<bool> {
        if self.exited.is_none() {
            self.exited = self.child.try_wait()?;
        }
        Ok(self.exited.is_some())
    }

    /// How QEMU ended, once [`Guest::exited`] has seen it end.
    pub fn exit_status(&self) -> Option<ExitStatus> {
        self.exited
    }
}

impl Drop for Guest {
    fn drop(&mut self) {
        if self.exited.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Plugs the task CD into the running guest, as a controller attaching virtual media does.
pub fn plug_task_media(qmp: &Path) -> Result<()> {
    let device = task_device();
    let mut arguments = serde_json::Map::new();
    for pair in device.split(',') {
        let (key, value) = pair.split_once('=').unwrap_or(("driver", pair));
        arguments.insert(key.to_owned(), value.into());
    }
    monitor(qmp, serde_json::json!({"execute": "device_add", "arguments": arguments})).map(drop)
}

/// Pulls the task CD out of the running guest, as a BMC whose virtual media is detached: the
/// medium goes first (the guest's reads fail), then the USB device.
///
/// In that order because QEMU 10.0's `usb-storage` crashes (SIGSEGV in
/// `usb_msd_request_cancelled`, seen in 3 of 16 pulls two guests at a time) when it is unplugged
/// while a read waits in the drive's throttle: the cancelled request completes after the device
/// is freed. A forced eject drains the drive first (its throttled reads run out), and a drive
/// with no medium answers every later read at once, so the unplug has nothing left to cancel.
pub fn pull_task_media(qmp: &Path) -> Result<()> {
    let eject = serde_json::json!({"execute": "eject", "arguments": {"device": TASK_DRIVE, "force": true}});
    monitor(qmp, eject).context("eject the task CD's medium")?;
    monitor(qmp, serde_json::json!({"execute": "device_del", "arguments": {"id": "taskdev"}})).map(drop)
}

/// Puts `iso` into the task CD in place of its medium, as a BMC swapping its virtual media
/// does: the tray opened, the medium taken out, the new one put in and the tray closed
/// (`blockdev-change-medium`). The USB device stays: unplugging it could cancel a read the
/// guest still has queued ([`pull_task_media`]). Forced, because udev in the guest locks the
/// tray (so that the eject button reaches it); QEMU then clears the eject request it would
/// otherwise pass on to the guest, whose udev would eject the new medium.
pub fn change_task_media(qmp: &Path, iso: &Path) -> Result<()> {
    let change = serde_json::json!({"execute": "blockdev-change-medium", "arguments": {
        "device": TASK_DRIVE,
        "filename": iso,
        "format": "raw",
        "read-only-mode": "read-only",
        "force": true,
    }});
    monitor(qmp, change).map(drop).with_context(|| format!("change the task CD's medium to {}", iso.display()))
}

/// How many bytes the guest (its firmware, GRUB and Linux alike) has read from the boot
/// medium so far: the boot drive's `rd_bytes` of `query-blockstats`.
pub fn boot_read_bytes(qmp: &Path) -> Result<u64> {
    let stats = monitor(qmp, serde_json::json!({"execute": "query-blockstats"}))?;
    stats
        .as_array()
        .into_iter()
        .flatten()
        .find(|drive| drive["device"] == BOOT_DRIVE)
        .and_then(|drive| drive["stats"]["rd_bytes"].as_u64())
        .with_context(|| format!("query-blockstats has no rd_bytes for the drive '{BOOT_DRIVE}'"))
}

/// One command on the QEMU monitor (QMP); its answer's `return` value.
fn monitor(qmp: &Path, command: serde_json::Value) -> Result<serde_json::Value> {
    let stream = UnixStream::connect(qmp).with_context(|| format!("connect {}", qmp.display()))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut writer = stream.try_clone()?;
    let mut reader = BufReader::new(stream);
    let mut reply = || -> Result<serde_json::Value> {
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line)? == 0 {
                bail!("QMP closed the connection");
            }
            let value: serde_json::Value = serde_json::from_str(&line).context("QMP sent something not JSON")?;
            // Asynchronous events may come between the replies.
            if value.get("event").is_none() {
                return Ok(value);
            }
        }
    };
    reply()?; // greeting
    let mut answer = serde_json::Value::Null;
    for command in [serde_json::json!({"execute": "qmp_capabilities"}), command] {
        writeln!(writer, "{command}")?;
        answer = reply()?;
        if let Some(error) = answer.get("error") {
            bail!("QMP {}: {error}", command["execute"]);
        }
    }
    Ok(answer["return"].take())
}

/// The oldest QEMU whose TCG is fast enough for the VM tests (see [`Qemu::find_or_install`]).
const MIN_MAJOR: u32 = 8;

/// The major version in QEMU's `--version` line ("QEMU emulator version 10.0.2 (...)").
fn major_version(line: &str) -> Option<u32> {
    let version = line.split("version ").nth(1)?;
    version.split('.').next()?.parse().ok()
}

/// Downloads the package set apt would install for `package` from bookworm-backports (and
/// what it needs from bookworm that this machine lacks) and unpacks it into `dir`. Nothing is
/// installed: the machine's own QEMU packages (qemu-utils, qemu-user-static) stay as they are.
fn install(package: &str, dir: &Path) -> Result<()> {
    eprintln!(
        "vm: unpacking {package} of {BACKPORTS} and its libraries into {} (apt-get download, dpkg-deb -x)",
        dir.display()
    );
    let apt = PrivateApt::new(&crate::cache_dir().join("apt-backports"), Arch::host(), Suites::WithBackports)?;
    if !apt.lists_stamp().exists() {
        apt.update()?;
    }
    let mut packages = apt.install_plan(BACKPORTS, package)?;
    if packages.is_empty() {
        apt.update()?;
        packages = apt.install_plan(BACKPORTS, package)?;
    }
    // apt would replace qemu-user-static (the arm64 steps' emulator) with QEMU 10's user
    // emulators; running the system emulator needs neither.
    packages.retain(|p| !p.starts_with("qemu-user"));
    if !packages.iter().any(|p| p.starts_with(&format!("{package}="))) {
        bail!("apt would not fetch {package} from {BACKPORTS} (plan: {})", packages.join(" "));
    }
    let staging = dir.with_extension("partial");
    let _ = std::fs::remove_dir_all(&staging);
    let debs = staging.join("debs");
    std::fs::create_dir_all(&debs)?;
    system::run(apt.command().arg("download").args(&packages).current_dir(&debs).stdout(Stdio::null()))?;
    for entry in std::fs::read_dir(&debs)? {
        let deb = entry?.path();
        system::run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&staging))?;
    }
    std::fs::remove_dir_all(&debs)?;
    let _ = std::fs::remove_dir_all(dir);
    std::fs::rename(&staging, dir)?;
    Ok(())
}

fn drive_arg(id: &str, file: &Path, extra: &str) -> String {
    format!("if=none,id={id},file={},format=raw{extra}", comma_escaped(file))
}

/// QEMU option values separate on commas; a comma in a path is written twice.
fn comma_escaped(path: &Path) -> String {
    path.display().to_string().replace(',', ",,")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_major_version_is_read_from_qemus_version_line() {
        assert_eq!(major_version("QEMU emulator version 10.0.2 (Debian 1:10.0.2+ds-2+deb13u1~bpo12+1)"), Some(10));
        assert_eq!(major_version("QEMU emulator version 7.2.22 (Debian 1:7.2+dfsg-7+deb12u18+b3)"), Some(7));
        assert_eq!(major_version("qemu-system-x86_64: not a version line"), None);
    }
}
