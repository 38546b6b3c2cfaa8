//! QEMU: finding or installing it, choosing the accelerator, and running one guest with a
//! deadline so that nothing outlives the harness.
//!
//! Installing: Debian's `qemu-system-x86` conflicts with the backported `qemu-utils` these
//! machines ship (MACHINE-NOTES), so the package set apt would install is downloaded and
//! unpacked into the cache instead, and run from there with `LD_LIBRARY_PATH` and `-L`.
//!
//! Accelerator: `/dev/kvm` here is a PVM device under which QEMU aborts or Debian kernels
//! hang, and QEMU's own kvm→tcg fallback catches neither. So a tiny probe (the guest kernel
//! with no root, which panics at once under a working KVM) decides, with a deadline.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::system;

const BINARY: &str = "qemu-system-x86_64";
const PACKAGE: &str = "qemu-system-x86";

/// A QEMU that runs here, and the accelerator it should use.
pub struct Qemu {
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

impl Accel {
    fn args(self) -> [&'static str; 4] {
        match self {
            Accel::Kvm => ["-accel", "kvm", "-cpu", "host"],
            Accel::Tcg => ["-accel", "tcg", "-cpu", "max"],
        }
    }
}

impl Qemu {
    /// The system's QEMU if there is one, else the unpacked one in the cache (made if
    /// missing or broken). The accelerator starts as TCG; see [`Qemu::choose_accel`].
    pub fn find_or_install() -> Result<Qemu> {
        if system::has(BINARY) {
            let qemu = Qemu { binary: BINARY.into(), firmware: vec![], libraries: None, accel: Accel::Tcg };
            qemu.version()?;
            return Ok(qemu);
        }
        let dir = crate::cache_dir().join("qemu");
        let unpacked = Qemu::unpacked(&dir);
        if unpacked.version().is_ok() {
            return Ok(unpacked);
        }
        install(&dir)?;
        unpacked.version().context("the unpacked QEMU does not run")?;
        Ok(unpacked)
    }

    fn unpacked(dir: &Path) -> Qemu {
        let libraries = std::env::join_paths([dir.join("usr/lib/x86_64-linux-gnu"), dir.join("lib/x86_64-linux-gnu")])
            .expect("cache paths hold no ':'");
        Qemu {
            binary: dir.join("usr/bin").join(BINARY),
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

    /// Sets the accelerator: `PROVISION_VM_ACCEL=kvm|tcg` if given, else KVM only if a probe
    /// boot of `kernel` under KVM reaches its panic in time. The verdict is kept in the cache
    /// for the rest of this host boot (`/proc/sys/kernel/random/boot_id`).
    pub fn choose_accel(&mut self, kernel: &Path, workdir: &Path) -> Result<()> {
        self.accel = match std::env::var("PROVISION_VM_ACCEL").as_deref() {
            Ok("kvm") => Accel::Kvm,
            Ok("tcg") => Accel::Tcg,
            Ok(other) => bail!("PROVISION_VM_ACCEL must be kvm or tcg, not '{other}'"),
            Err(_) if !Path::new("/dev/kvm").exists() => Accel::Tcg,
            Err(_) => {
                let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
                let verdict_file = crate::cache_dir().join("kvm-probe");
                match std::fs::read_to_string(&verdict_file).ok().as_deref().and_then(|v| v.split_once(' ')) {
                    Some((id, verdict)) if id == boot_id.trim() => {
                        if verdict.trim() == "kvm" {
                            Accel::Kvm
                        } else {
                            Accel::Tcg
                        }
                    }
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
            .args(Accel::Kvm.args())
            .arg("-kernel")
            .arg(kernel)
            .args(["-append", "console=ttyS0 panic=-1"])
            .arg("-serial")
            .arg(file_arg(&console));
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
        let accel = if booted { Accel::Kvm } else { Accel::Tcg };
        eprintln!(
            "vm: KVM probe: {} in {:.1?}",
            if booted { "works" } else { "hangs or fails, using TCG" },
            started.elapsed()
        );
        Ok(accel)
    }

    /// Starts a guest. QEMU dies with the harness (`PR_SET_PDEATHSIG`) and is killed when the
    /// returned [`Guest`] is dropped.
    pub fn launch(&self, machine: &Machine) -> Result<Guest> {
        let mut cmd = self.command();
        cmd.args(["-nodefaults", "-no-user-config", "-display", "none", "-no-reboot", "-M", "q35"])
            .args(self.accel.args())
            .args(["-smp", &machine.cpus.to_string(), "-m", "1024"])
            .arg("-kernel")
            .arg(&machine.kernel)
            .arg("-initrd")
            .arg(&machine.initrd)
            .arg("-append")
            .arg(&machine.cmdline)
            .arg("-serial")
            .arg(file_arg(&machine.console))
            // The system disk is shared by every guest of a run: writes go to a throw-away overlay.
            .arg("-drive")
            .arg(drive_arg("system", &machine.system_disk, "raw", ",snapshot=on"))
            .args(["-device", "virtio-blk-pci,drive=system,addr=0x10"])
            .arg("-drive")
            .arg(drive_arg("blank", &machine.blank_disk, "raw", ""))
            .args(["-device", "virtio-blk-pci,drive=blank,addr=0x11"])
            .args(["-device", "virtio-scsi-pci,id=scsi,addr=0x12"])
            .arg("-drive")
            .arg(drive_arg(MEDIA_DRIVE, &machine.iso, "raw", ",media=cdrom,readonly=on"))
            .args(["-device", "virtio-serial-pci,id=serial,addr=0x13"])
            .arg("-chardev")
            .arg(format!("file,id=report,path={}", comma_escaped(&machine.report)))
            .args(["-device", &format!("virtserialport,bus=serial.0,chardev=report,name={REPORT_PORT}")]);
        if !machine.media_late {
            cmd.args(["-device", &media_device()]);
        }
        if let Some(qmp) = &machine.qmp {
            cmd.arg("-qmp").arg(format!("unix:{},server=on,wait=off", comma_escaped(qmp)));
        }
        Guest::spawn(cmd)
    }
}

/// The name the guest sees at `/dev/virtio-ports/` (tests/vm-guest/usr/lib/vm-test/report).
pub const REPORT_PORT: &str = "vm-test.report";

const MEDIA_DRIVE: &str = "media";

fn media_device() -> String {
    format!("scsi-cd,drive={MEDIA_DRIVE},bus=scsi.0,id=media-cd")
}

/// One guest's hardware: system disk at /dev/vda, blank disk at /dev/vdb (fixed PCI
/// addresses keep that order), the task ISO as a virtio-scsi CD, the report port.
pub struct Machine {
    pub kernel: PathBuf,
    pub initrd: PathBuf,
    pub cmdline: String,
    pub cpus: u32,
    pub system_disk: PathBuf,
    pub blank_disk: PathBuf,
    pub iso: PathBuf,
    /// The CD is not plugged at start; [`attach_media`] plugs it.
    pub media_late: bool,
    pub console: PathBuf,
    pub report: PathBuf,
    /// QMP socket, needed to attach media late.
    pub qmp: Option<PathBuf>,
}

/// A running QEMU. Dropping it kills QEMU and reaps it.
pub struct Guest {
    child: Child,
    exited: bool,
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
        Ok(Guest { child, exited: false })
    }

    /// Whether QEMU has exited (reaping it if so).
    pub fn exited(&mut self) -> Result<bool> {
        if !self.exited {
            self.exited = self.child.try_wait()?.is_some();
        }
        Ok(self.exited)
    }
}

impl Drop for Guest {
    fn drop(&mut self) {
        if !self.exited {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Plugs the task CD into the running guest, as a controller attaching virtual media does.
pub fn attach_media(qmp: &Path) -> Result<()> {
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
    for command in [
        serde_json::json!({"execute": "qmp_capabilities"}),
        serde_json::json!({"execute": "device_add", "arguments": {
            "driver": "scsi-cd", "drive": MEDIA_DRIVE, "bus": "scsi.0", "id": "media-cd"}}),
    ] {
        writeln!(writer, "{command}")?;
        let answer = reply()?;
        if let Some(error) = answer.get("error") {
            bail!("QMP {}: {error}", command["execute"]);
        }
    }
    Ok(())
}

/// Downloads the package set apt would install for QEMU and unpacks it into `dir`.
fn install(dir: &Path) -> Result<()> {
    eprintln!("vm: unpacking {PACKAGE} and its libraries into {}", dir.display());
    let mut packages = packages_to_install()?;
    if packages.is_empty() {
        system::run(Command::new("apt-get").args(["-q", "update"]).stdout(Stdio::null()))?;
        packages = packages_to_install()?;
    }
    if packages.is_empty() {
        bail!("apt would install nothing for {PACKAGE}: is it on PATH as {BINARY}?");
    }
    let staging = dir.with_extension("partial");
    let _ = std::fs::remove_dir_all(&staging);
    let debs = staging.join("debs");
    std::fs::create_dir_all(&debs)?;
    // apt's download sandbox user cannot write into root's cache: download as root.
    system::run(
        Command::new("apt-get")
            .args(["-q", "-o", "APT::Sandbox::User=root", "download"])
            .args(&packages)
            .current_dir(&debs)
            .stdout(Stdio::null()),
    )?;
    for entry in std::fs::read_dir(&debs)? {
        let deb = entry?.path();
        system::run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&staging))?;
    }
    std::fs::remove_dir_all(&debs)?;
    let _ = std::fs::remove_dir_all(dir);
    std::fs::rename(&staging, dir)?;
    Ok(())
}

/// The packages `apt-get install` would add for QEMU, by simulating it: apt resolves the
/// alternatives, and what is installed already is left out.
fn packages_to_install() -> Result<Vec<String>> {
    let plan = system::output(
        Command::new("apt-get")
            .args(["install", "-s", "--no-install-recommends", PACKAGE])
            .env("DEBIAN_FRONTEND", "noninteractive"),
    )
    .unwrap_or_default();
    Ok(plan
        .lines()
        .filter_map(|l| l.strip_prefix("Inst "))
        .filter_map(|l| l.split_whitespace().next())
        .map(String::from)
        .collect())
}

fn file_arg(path: &Path) -> String {
    format!("file:{}", path.display())
}

fn drive_arg(id: &str, file: &Path, format: &str, extra: &str) -> String {
    format!("if=none,id={id},file={},format={format}{extra}", comma_escaped(file))
}

/// QEMU option values separate on commas; a comma in a path is written twice.
fn comma_escaped(path: &Path) -> String {
    path.display().to_string().replace(',', ",,")
}
