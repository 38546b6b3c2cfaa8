//! `cargo xtask vm-test [--cases DIR]`: the proof on a real boot (SPEC §9). One QEMU guest
//! per case, with systemd as PID 1, the dist binary and the units of `systemd/`, the test
//! stand-ins of `tests/vm-guest/`, a blank disk at /dev/vdb and the case's task ISO as a CD.
//! The guest's reporter sends the facts of the boot over virtio-serial; the host judges them
//! against the case's `expect.json`.
//!
//! - [`qemu`]: find or install QEMU, choose the accelerator, run a guest with a deadline.
//! - [`rootfs`]: the cached guest root filesystem and the per-run system disk image.
//! - [`cases`]: the case folders and the judgement; [`report`]: what the guest sent.
//!
//! Everything a run leaves for people is under `target/vm-test/<case>/`: the serial console
//! (`console.log`), the report (`report.json`) and the task ISO.

pub mod cases;
mod qemu;
pub mod report;
pub mod rootfs;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::system;
use cases::Case;
use qemu::{Machine, Qemu};
use report::Report;

/// Size of the blank second disk (sparse).
const BLANK_DISK_BYTES: u64 = 1 << 30;

/// What the console shows when the dispatcher starts (with `systemd.status_unit_format=name`).
const DISPATCHER_STARTING: &str = "Starting provision-dispatcher.service";

pub fn run(args: &[String]) -> Result<()> {
    let mut cases_dir = crate::root().join("tests/vm-cases");
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--cases" => cases_dir = args.next().map(PathBuf::from).context("--cases needs a directory")?,
            other => bail!("vm-test: unexpected argument '{other}'\nusage: cargo xtask vm-test [--cases DIR]"),
        }
    }
    let started = Instant::now();
    let cases = cases::load_all(&cases_dir)?;
    let testbed = Testbed::prepare()?;
    println!("vm-test: {} cases from {}, {:?} guests", cases.len(), cases_dir.display(), testbed.qemu.accel);
    let width = cases.iter().map(|c| c.name.len()).max().unwrap_or(0);
    let (mut passed, mut failed) = (0, 0);
    for case in &cases {
        let (boot, problems) = testbed.run_case(case);
        let time = boot.as_ref().ok().and_then(|b| b.dispatcher_ms()).map_or("-".into(), |ms| format!("{ms:.0} ms"));
        let cpu = boot.as_ref().ok().and_then(|b| b.dispatcher_cpu_ms()).map_or("-".into(), |ms| format!("{ms:.0} ms"));
        let boot_secs = boot.as_ref().map_or(0.0, |b| b.elapsed.as_secs_f64());
        let steps = boot.as_ref().ok().and_then(Boot::dispatcher_steps).unwrap_or_default();
        if problems.is_empty() {
            passed += 1;
            println!("{:width$}  pass  dispatcher {time:>8} (cpu {cpu:>6})  boot {boot_secs:4.0} s", case.name);
            println!("{:width$}        steps: {steps}", "");
        } else {
            failed += 1;
            println!(
                "{:width$}  FAIL  dispatcher {time:>8} (cpu {cpu:>6})  boot {boot_secs:4.0} s  {} (see {})",
                case.name,
                problems.join("; "),
                testbed.case_dir(case).display()
            );
        }
    }
    println!("vm-test: {:.0?} in all", started.elapsed());
    println!("{passed} passed, {failed} failed");
    if failed > 0 {
        bail!("{failed} VM test case(s) failed");
    }
    Ok(())
}

/// Everything the guests share: QEMU, the cached root filesystem, the system disk image.
pub struct Testbed {
    qemu: Qemu,
    rootfs: rootfs::Rootfs,
    system_disk: PathBuf,
    workdir: PathBuf,
}

/// One guest's run: what it reported, and where its console log is.
pub struct Boot {
    pub report: Result<Report>,
    pub console: PathBuf,
    pub elapsed: Duration,
}

impl Boot {
    /// The serial console as text, without colour sequences.
    pub fn console_text(&self) -> String {
        strip_ansi(&String::from_utf8_lossy(&std::fs::read(&self.console).unwrap_or_default()))
    }

    pub fn dispatcher_ms(&self) -> Option<f64> {
        self.report.as_ref().ok()?.dispatcher().run_time_ms()
    }

    pub fn dispatcher_cpu_ms(&self) -> Option<f64> {
        self.report.as_ref().ok()?.dispatcher().cpu_ms()
    }

    /// The dispatcher's own account of its steps (status.json's `timings_ms`), in ms.
    pub fn dispatcher_steps(&self) -> Option<String> {
        let status = self.report.as_ref().ok()?.status()?;
        let timings = status.get("timings_ms")?.as_object()?;
        const ORDER: [&str; 11] = [
            "media",
            "mount",
            "read",
            "schema",
            "recipe",
            "validate",
            "host_checks",
            "outputs",
            "start",
            "bus",
            "total",
        ];
        let steps: Vec<String> =
            ORDER.iter().filter_map(|name| Some(format!("{name} {:.0}", timings.get(*name)?.as_f64()?))).collect();
        Some(steps.join(", ") + " (ms)")
    }
}

impl Testbed {
    /// Installs what is missing, builds (or reuses) the root filesystem, builds the dist
    /// binary and the system disk image.
    pub fn prepare() -> Result<Testbed> {
        let workdir = crate::root().join("target/vm-test");
        std::fs::create_dir_all(&workdir)?;
        system::ensure_commands("the VM tests", &[("xorriso", "xorriso"), ("mkfs.ext4", "e2fsprogs")])?;
        let mut qemu = Qemu::find_or_install()?;
        let rootfs = rootfs::ensure()?;
        qemu.choose_accel(&rootfs.kernel(), &workdir)?;
        eprintln!("vm: {} ({:?})", qemu.version()?, qemu.accel);
        let binary = crate::dist::build(crate::dist::Arch::host())?;
        let system_disk = workdir.join("system.img");
        rootfs::system_image(&rootfs, &binary, &system_disk)?;
        Ok(Testbed { qemu, rootfs, system_disk, workdir })
    }

    pub fn case_dir(&self, case: &Case) -> PathBuf {
        self.workdir.join(&case.name)
    }

    /// Boots the case and judges it: the boot, and the problems found (empty: pass).
    pub fn run_case(&self, case: &Case) -> (Result<Boot>, Vec<String>) {
        let boot = self.boot(case);
        let problems = match &boot {
            Err(e) => vec![format!("{e:#}")],
            Ok(Boot { report: Err(e), .. }) => vec![format!("{e:#}")],
            Ok(boot @ Boot { report: Ok(report), .. }) => {
                let mut problems = cases::judge(&case.expect, report, &boot.console_text());
                problems.extend(cases::leaks(&std::fs::read(&case.recipe).unwrap_or_default(), report));
                problems
            }
        };
        (boot, problems)
    }

    /// Boots one guest for the case and collects its report.
    pub fn boot(&self, case: &Case) -> Result<Boot> {
        let dir = self.case_dir(case);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir)?;
        let iso = dir.join("task.iso");
        crate::iso::build(&case.recipe, case.schema.as_deref(), &iso)?;
        let blank_disk = dir.join("blank.img");
        std::fs::File::create(&blank_disk)?.set_len(BLANK_DISK_BYTES)?;
        let qmp = case
            .vm
            .attach_media_after
            .map(|_| std::env::temp_dir().join(format!("provision-vm-{}-{}.qmp", std::process::id(), case.name)));
        let machine = Machine {
            kernel: self.rootfs.kernel(),
            initrd: self.rootfs.initrd(),
            cmdline: format!(
                "root=LABEL={} rw console=ttyS0 panic=-1 systemd.status_unit_format=name {}",
                rootfs::ROOT_LABEL,
                case.vm.kernel_args.as_deref().unwrap_or_default()
            ),
            cpus: 2,
            system_disk: self.system_disk.clone(),
            blank_disk: blank_disk.clone(),
            iso,
            media_late: qmp.is_some(),
            console: dir.join("console.log"),
            report: dir.join("report.json"),
            qmp: qmp.clone(),
        };
        let result = self.watch(case, &machine);
        let _ = std::fs::remove_file(&blank_disk);
        if let Some(qmp) = &qmp {
            let _ = std::fs::remove_file(qmp);
        }
        result
    }

    /// Runs the guest until it has sent a whole report, has exited, or is past the deadline;
    /// plugs the CD in on the way if the case wants late media.
    fn watch(&self, case: &Case, machine: &Machine) -> Result<Boot> {
        let started = Instant::now();
        let mut guest = self.qemu.launch(machine)?;
        let mut dispatcher_started: Option<Instant> = None;
        let mut attached = false;
        let report = loop {
            if let Some(report) = complete_report(&machine.report) {
                break report;
            }
            if guest.exited()? {
                break complete_report(&machine.report)
                    .unwrap_or_else(|| Err(anyhow::anyhow!("the guest powered off without a whole report")));
            }
            if started.elapsed() > case.vm.deadline {
                break Err(anyhow::anyhow!("no report within {:.0?}: killed QEMU", case.vm.deadline));
            }
            if let (Some(delay), false) = (case.vm.attach_media_after, attached) {
                if dispatcher_started.is_none() && console_shows(&machine.console, DISPATCHER_STARTING) {
                    dispatcher_started = Some(Instant::now());
                }
                if dispatcher_started.is_some_and(|at| at.elapsed() >= delay) {
                    qemu::attach_media(machine.qmp.as_deref().expect("late media has a QMP socket"))?;
                    attached = true;
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        // The report is all the harness needs: no need to wait for the guest's power-off.
        drop(guest);
        Ok(Boot { report, console: machine.console.clone(), elapsed: started.elapsed() })
    }
}

/// The report, once the guest has written all of it (it ends with a newline).
fn complete_report(path: &Path) -> Option<Result<Report>> {
    let bytes = std::fs::read(path).ok()?;
    bytes.ends_with(b"\n").then(|| Report::parse(&bytes))
}

fn console_shows(console: &Path, text: &str) -> bool {
    std::fs::read(console).is_ok_and(|bytes| strip_ansi(&String::from_utf8_lossy(&bytes)).contains(text))
}

/// The console text without terminal colour sequences (`ESC [ ... m`).
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}
