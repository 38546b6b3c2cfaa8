//! `cargo xtask vm-test [--image] [--arch ARCH] [--cases DIR]...`: the proof on a real boot
//! (SPEC §9), of the image users deploy. A QEMU guest boots the maintenance-OS ISO of
//! `cargo xtask image`, built with the stand-ins of `tests/vm-guest/` as its one layer, as a
//! server would: firmware (UEFI or SeaBIOS), the ISO as a virtual CD (or written to a USB
//! disk), two blank local disks (/dev/vda, /dev/vdb), the case's task ISO as a USB CD (a BMC's
//! virtual media), plugged late or pulled when the case asks, and other ISOs beside it. The
//! guest's reporter sends the facts of the boot over virtio-serial; the host judges them
//! against the case's `expect.json`. Cases whose guest would be the same share a boot, one
//! round each: the task CD's medium swapped and the dispatcher run again ([`rounds`]).
//!
//! - [`qemu`]: find or install QEMU, choose the accelerator, the machine, QMP.
//! - [`rounds`]: which cases share a boot, and what makes each round's facts its own.
//! - [`media`]: the case's task ISO (with its faults) and the other ISOs.
//! - [`cases`]: the case folders and the judgement; [`report`]: what the guest sent;
//!   [`result`]: the dispatcher's result line on the serial console; [`inventory`]: the
//!   machine's inventory printed before it, read as a controller reads it.
//! - [`bmc`]: a BMC outside the guest (OpenIPMI's simulator, or a silent one) and its SEL.
//! - [`reads`]: what the guest read from its boot medium, file by file.
//!
//! There is one mode, the image: the direct-kernel mode of the first VM tests (a bare kernel,
//! a hand-made root on /dev/vda) proved a system nobody deploys, and its minutes are better
//! spent on the image's cases. A case written for it only (`"mode": "direct"`) is skipped.
//!
//! Everything a run leaves for people is under `target/vm-test/<arch>/<case>/`: the serial
//! console (`console.log`), the report (`report.json`), QEMU's trace of the drives' reads
//! (`reads.log`) and the media (in a boot of several rounds, each case's round's part of the
//! console and its report; the whole boot's in its first case's folder). Each case's line
//! says how many bytes the guest had read from its boot medium when the dispatcher's result
//! line showed (QMP `query-blockstats`): on a BMC's virtual-media link, the time a controller
//! waits.

mod bmc;
pub mod cases;
mod inventory;
pub mod media;
pub mod qemu;
pub mod reads;
pub mod report;
pub mod result;
pub mod rounds;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{bail, Context, Result};

use crate::arch::Arch;
use crate::image::{self, Image};
use crate::system;
use cases::{Case, DiskSpec, Expect, Firmware, Mode, TaskArrival};
use qemu::{Boot as Booted, Machine, Qemu, Uefi};
use report::Report;

/// What the reporter prints on the serial console once the dispatcher has started; late media
/// are plugged and pulled relative to it.
const DISPATCHER_STARTED: &str = "vm-test: the dispatcher has started";

const USAGE: &str = "usage: cargo xtask vm-test [--image] [--arch amd64|arm64] [--cases DIR]... [--layer DIR]... \
     [--jobs N] [--rounds N]";

pub fn run(args: &[String]) -> Result<()> {
    let mut cases_dirs = vec![];
    let mut arch = Arch::host();
    let mut jobs = 1;
    let mut most_rounds = rounds::MOST_ROUNDS;
    let mut layers = vec![];
    let mut args = args.iter();
    let number = |what: &str, arg: Option<&String>| -> Result<usize> {
        arg.and_then(|n| n.parse().ok()).filter(|&n| n > 0).with_context(|| format!("{what} needs a number"))
    };
    while let Some(arg) = args.next() {
        match arg.as_str() {
            // The only mode; accepted so that the command reads as what it does.
            "--image" => {}
            "--arch" => arch = Arch::from_debian(args.next().context("--arch needs amd64 or arm64")?)?,
            "--cases" => cases_dirs.push(args.next().map(PathBuf::from).context("--cases needs a directory")?),
            "--layer" => layers.push(args.next().map(PathBuf::from).context("--layer needs a directory")?),
            "--jobs" => jobs = number("--jobs", args.next())?,
            "--rounds" => most_rounds = number("--rounds", args.next())?,
            other => bail!("vm-test: unexpected argument '{other}'\n{USAGE}"),
        }
    }
    if cases_dirs.is_empty() {
        cases_dirs.push(crate::root().join("tests/vm-cases"));
    }
    let mut cases = vec![];
    for dir in &cases_dirs {
        cases.extend(cases::load_all(dir)?);
    }
    let from: Vec<String> = cases_dirs.iter().map(|d| d.display().to_string()).collect();
    run_cases(arch, &layers, &cases, jobs, most_rounds, &from.join(", "))
}

/// Boots every case that runs on `arch`, in boots of at most `most_rounds` cases
/// ([`rounds::plan`]), `jobs` guests at a time, and prints the verdict lines of each case;
/// fails if any case failed. `layers` go into the image below the test layer.
pub fn run_cases(
    arch: Arch,
    layers: &[PathBuf],
    cases: &[Case],
    jobs: usize,
    most_rounds: usize,
    from: &str,
) -> Result<()> {
    let started = Instant::now();
    let case_layers: Vec<PathBuf> = cases.iter().filter_map(|c| c.vm.image_layer.clone()).collect();
    let mut testbed = Testbed::prepare(arch, layers, &case_layers)?;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    testbed.cpus = (cores / jobs).clamp(1, 2);
    let (runnable, skipped): (Vec<&Case>, Vec<&Case>) = cases.iter().partition(|c| c.skip_reason(arch).is_none());
    if runnable.iter().any(|c| c.vm.ipmi.is_some()) {
        crate::needs::ensure(crate::needs::Need::Bmc, "the VM tests' BMC")?;
    }
    let boots = rounds::plan(&runnable, most_rounds);
    println!(
        "vm-test: {} of {} cases from {from} on {} ({:?}) in {} boots of at most {most_rounds} rounds, {jobs} at a time",
        runnable.len(),
        cases.len(),
        arch.debian(),
        testbed.qemu.accel,
        boots.len(),
    );
    for (n, boot) in boots.iter().enumerate().filter(|(_, boot)| boot.len() > 1) {
        let names: Vec<&str> = boot.iter().map(|case| case.name.as_str()).collect();
        println!("boot {}: {}", n + 1, names.join(", "));
    }
    let width = cases.iter().map(|c| c.name.len()).max().unwrap_or(0);
    for case in &skipped {
        println!("{:width$}  skip  {}", case.name, case.skip_reason(arch).unwrap_or_default());
    }
    let next = AtomicUsize::new(0);
    let failed = AtomicUsize::new(0);
    let (read, measured) = (AtomicU64::new(0), AtomicUsize::new(0));
    std::thread::scope(|scope| {
        for _ in 0..jobs.min(boots.len()) {
            scope.spawn(|| {
                loop {
                    let n = next.fetch_add(1, Ordering::SeqCst);
                    let Some(boot) = boots.get(n) else { break };
                    let mut lines = vec![];
                    for (index, (case, (outcome, problems))) in boot.iter().zip(testbed.run_boot(boot)).enumerate() {
                        if !problems.is_empty() {
                            failed.fetch_add(1, Ordering::SeqCst);
                        }
                        if let Some(bytes) = outcome.as_ref().ok().and_then(|b| b.result?.boot_read_bytes) {
                            read.fetch_add(bytes, Ordering::SeqCst);
                            measured.fetch_add(1, Ordering::SeqCst);
                        }
                        let place = Place { boot: n + 1, round: index + 1, rounds: boot.len() };
                        lines.push(verdict(case, &outcome, &problems, width, &testbed.case_dir(case), place));
                    }
                    // A boot's lines together, whatever the other guest prints meanwhile.
                    println!("{}", lines.join("\n"));
                }
            });
        }
    });
    let failed = failed.into_inner();
    let (read, measured) = (read.into_inner(), measured.into_inner());
    println!(
        "boot medium: {read} bytes read before the result in all, {measured} boots ({:.1} MiB each on average)",
        read as f64 / MIB / measured.max(1) as f64
    );
    println!("vm-test: {} boots, {} rounds, {:.0?} in all", boots.len(), runnable.len(), started.elapsed());
    println!("{} passed, {failed} failed, {} skipped", runnable.len() - failed, skipped.len());
    if failed > 0 {
        bail!("{failed} VM test case(s) failed");
    }
    Ok(())
}

/// Where a case ran: its boot (numbered as [`rounds::plan`] lists them, from 1), and its
/// round among the boot's (from 1).
#[derive(Clone, Copy)]
struct Place {
    boot: usize,
    round: usize,
    rounds: usize,
}

/// The lines printed for one case: pass or FAIL with the problems, the dispatcher's time and
/// the round's (from power-on in a boot's first round, from the word to go on in the later
/// ones), its boot and round, and the dispatcher's own steps.
fn verdict(case: &Case, boot: &Result<Boot>, problems: &[String], width: usize, dir: &Path, place: Place) -> String {
    let boot = boot.as_ref().ok();
    let time = boot.and_then(Boot::dispatcher_ms).map_or("-".into(), |ms| format!("{ms:.0} ms"));
    let cpu = boot.and_then(Boot::dispatcher_cpu_ms).map_or("-".into(), |ms| format!("{ms:.0} ms"));
    let secs = boot.map_or(0.0, |b| b.elapsed.as_secs_f64());
    let (name, Place { boot: n, round, rounds }) = (&case.name, place);
    let took = match round {
        1 => format!("boot {secs:4.0} s"),
        _ => format!("round {secs:3.0} s"),
    };
    let medium = match boot.and_then(|b| b.result) {
        _ if round > 1 => format!("boot medium: read before the result of round 1 (boot {n})"),
        Some(ResultSeen { after, boot_read_bytes: Some(bytes), .. }) => format!(
            "boot medium: {bytes} bytes read before the result ({:.1} MiB; the result {:.0} s after power-on)",
            bytes as f64 / MIB,
            after.as_secs_f64()
        ),
        Some(ResultSeen { boot_read_bytes: None, .. }) => "boot medium: QEMU did not say what was read".into(),
        None => "boot medium: no result line".into(),
    };
    let place = format!("boot {n}, round {round} of {rounds}");
    if problems.is_empty() {
        let steps = boot.and_then(Boot::dispatcher_steps).unwrap_or_default();
        format!(
            "{name:width$}  pass  dispatcher {time:>8} (cpu {cpu:>6})  {took}  {place}\n{:width$}        steps: {steps}\n{:width$}        {medium}",
            "", ""
        )
    } else {
        format!(
            "{name:width$}  FAIL  dispatcher {time:>8} (cpu {cpu:>6})  {took}  {place}  {} (see {})\n{:width$}        {medium}",
            problems.join("; "),
            dir.display(),
            ""
        )
    }
}

const MIB: f64 = 1024.0 * 1024.0;

/// Everything the guests share: QEMU, the image, the UEFI firmware.
pub struct Testbed {
    /// Virtual CPUs per guest: the host's cores shared among the guests running at once.
    cpus: usize,
    /// Whether the image has layers besides the test layer (an image builder's): their
    /// drop-ins and presets are theirs to choose, so the packaged-units check is off.
    foreign_layers: bool,
    arch: Arch,
    qemu: Qemu,
    image: Image,
    /// The image with a case's own layer (`image_layer`) under the test layer, by layer.
    layered: BTreeMap<PathBuf, Image>,
    workdir: PathBuf,
}

/// One guest's run: what it reported, and where its console log is.
pub struct Boot {
    pub report: Result<Report>,
    /// This boot's job: the SHA-256 of the recipe on its task ISO (`None`: no recipe file).
    pub job: Option<String>,
    /// What the firmware or shim said on the console when it refused the image, if one did.
    pub refusal: Option<String>,
    pub console: PathBuf,
    /// QEMU's trace of the drives' reads ([`reads`]).
    pub reads: PathBuf,
    pub elapsed: Duration,
    /// When the dispatcher's result line first showed on the serial console, if it did.
    pub result: Option<ResultSeen>,
    /// When each result line showed, from power-on.
    pub result_lines_at: Vec<Duration>,
    /// The guest's BMC, and its SEL after the case (`ipmitool sel elist`).
    pub bmc: Option<(cases::Ipmi, Result<String>)>,
    /// How QEMU ended, when the guest ended it (a power-off, or a reboot under `-no-reboot`).
    pub exit: Option<std::process::ExitStatus>,
}

/// How far a boot goes: to the guest's report (a case), only to the result line, or to the
/// guest's own shutdown (a case whose task reboots or powers off the server at its end), or to
/// the result line's repeat (a boot the initrd ends: there is no report to wait for).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Until {
    Report,
    Result,
    Exit,
    Repeat,
}

/// The moment the first `PROVISION-RESULT` line showed on the serial console: what a
/// controller waits for, and what a slow virtual-media link delays.
#[derive(Clone, Copy, Debug)]
pub struct ResultSeen {
    /// From QEMU's start (power-on).
    pub after: Duration,
    pub at: SystemTime,
    /// Bytes read from the boot medium by then (QMP `query-blockstats`), if QEMU answered.
    pub boot_read_bytes: Option<u64>,
}

impl Boot {
    /// The serial console as text, without colour sequences.
    pub fn console_text(&self) -> String {
        console_text(&self.console)
    }

    /// The last result line on the serial console that parses, as a controller takes it.
    pub fn result_line(&self) -> Option<serde_json::Value> {
        result::last_line(&self.console_text())
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

/// UEFI firmware for `arch`: its code and variables files (the packages: `Need::Boot`). With
/// Secure Boot: the build that enforces it and variables with Microsoft's keys enrolled, as
/// servers ship.
pub fn uefi_firmware(arch: Arch, secure_boot: bool) -> (&'static str, &'static str) {
    match (arch, secure_boot) {
        (Arch::Amd64, false) => ("/usr/share/OVMF/OVMF_CODE_4M.fd", "/usr/share/OVMF/OVMF_VARS_4M.fd"),
        (Arch::Amd64, true) => ("/usr/share/OVMF/OVMF_CODE_4M.secboot.fd", "/usr/share/OVMF/OVMF_VARS_4M.ms.fd"),
        (Arch::Arm64, false) => ("/usr/share/AAVMF/AAVMF_CODE.fd", "/usr/share/AAVMF/AAVMF_VARS.fd"),
        (Arch::Arm64, true) => ("/usr/share/AAVMF/AAVMF_CODE.ms.fd", "/usr/share/AAVMF/AAVMF_VARS.ms.fd"),
    }
}

impl Testbed {
    /// Installs what is missing, checks that the test layer leaves the dispatcher alone, and
    /// builds the image with `layers` (an image builder's own: their allowlist, their units)
    /// and the test layer on top (its stand-ins win over targets of the same name); and one
    /// image more for each of `case_layers` (a case's configuration of the image, such as its
    /// trust file), which goes between the two.
    pub fn prepare(arch: Arch, layers: &[PathBuf], case_layers: &[PathBuf]) -> Result<Testbed> {
        let workdir = crate::root().join("target/vm-test").join(arch.debian());
        std::fs::create_dir_all(&workdir)?;
        crate::needs::ensure(crate::needs::Need::Boot(arch), "the VM tests")?;
        let layer = crate::root().join("tests/vm-guest");
        layer_leaves_the_dispatcher_alone(&layer)?;
        let hold = hold_layer(arch, &workdir)?;
        let mut qemu = Qemu::find_or_install(arch)?;
        // The tested image lives beside the cases (the shipped one is `cargo xtask image`'s), one
        // per set of layers, so that runs with other layers do not replace it under a guest.
        let foreign_layers = !layers.is_empty();
        let build = |case_layer: Option<&PathBuf>| {
            let layers =
                [layers, &case_layer.into_iter().cloned().collect::<Vec<_>>(), &[layer.clone(), hold.clone()]].concat();
            let key = system::fnv1a(format!("{layers:?}").as_bytes());
            image::build(arch, &layers, &workdir.join(format!("image-{key:016x}")))
        };
        let image = build(None)?;
        let mut layered = BTreeMap::new();
        for case_layer in case_layers {
            if !layered.contains_key(case_layer) {
                layered.insert(case_layer.clone(), build(Some(case_layer))?);
            }
        }
        qemu.choose_accel(&image.kernel, &workdir)?;
        eprintln!("vm: {} ({:?})", qemu.version()?, qemu.accel);
        Ok(Testbed { cpus: 2, foreign_layers, arch, qemu, image, layered, workdir })
    }

    /// The tested image: the shipped one with the test layer over it.
    pub fn image(&self) -> &Image {
        &self.image
    }

    pub fn case_dir(&self, case: &Case) -> PathBuf {
        self.workdir.join(&case.name)
    }

    /// Boots the case alone and judges it: the boot, and the problems found (empty: pass).
    pub fn run_case(&self, case: &Case) -> (Result<Boot>, Vec<String>) {
        self.run_boot(&[case]).pop().expect("one round for one case")
    }

    /// Boots one guest for `cases`, one round each in order ([`rounds`]), and judges each
    /// round on its own: each round's boot, and the problems found (empty: pass).
    pub fn run_boot(&self, cases: &[&Case]) -> Vec<(Result<Boot>, Vec<String>)> {
        let boots = self.boot(cases);
        let rounds = cases.iter().zip(boots).enumerate();
        rounds
            .map(|(index, (case, boot))| {
                let mut problems = self.judge(case, index, &boot);
                if let Ok(boot) = &boot {
                    problems.extend(as_a_controller_reads(boot));
                }
                (boot, problems)
            })
            .collect()
    }

    /// The problems of round `index` (from 0) of a boot, which proved `case`.
    fn judge(&self, case: &Case, index: usize, boot: &Result<Boot>) -> Vec<String> {
        match boot {
            Err(e) => vec![format!("{e:#}")],
            Ok(boot) if matches!(case.expect, Expect::RefusedByFirmware {}) => {
                cases::refused(boot.refusal.as_deref(), boot.report.is_ok())
            }
            // The guest went down by itself after the end: no report, the console and QEMU's
            // exit say it all.
            Ok(boot) if case.expect.shuts_down().is_some() => {
                result::shut_down(&case.expect, &boot.console_text(), boot.exit)
            }
            Ok(boot) if matches!(case.expect, Expect::BootFailed { .. }) => result::judge_boot_failed(
                &case.expect,
                boot.report.is_ok(),
                &boot.console_text(),
                &boot.result_lines_at,
            ),
            Ok(Boot { report: Err(e), .. }) => vec![format!("{e:#}")],
            Ok(boot @ Boot { report: Ok(report), .. }) => {
                let console = boot.console_text();
                let mut problems = rounds::judge(index, &case.expect, report);
                problems.extend(cases::judge(&case.expect, report, &console));
                problems.extend(result::judge(&case.expect, report, &console, &self.case_dir(case)));
                problems.extend(inventory::judge(report, &console, result::last_line(&console).as_ref()));
                // How the guest saw Secure Boot is the boot's: its first round says it.
                problems.extend(match index {
                    0 => cases::secure_boot(case.vm.firmware, case.vm.secure_boot, case.expect.secure_boot(), report),
                    _ => cases::secure_boot_stated(case.expect.secure_boot(), report),
                });
                if let Some((kind, sel)) = &boot.bmc {
                    let status = report.status();
                    // The BMC's wait as the dispatcher timed it: the process's whole run time
                    // would add what a loaded host does to its start and its end.
                    let waited = status.as_ref().and_then(|s| s["timings_ms"]["bmc"].as_f64());
                    problems.extend(bmc::judge(*kind, &case.expect, status.as_ref(), sel, waited));
                }
                if !self.foreign_layers {
                    problems.extend(cases::packaged(report, case.vm.image_layer.is_some()));
                }
                problems.extend(cases::task_media(case.vm.task, &case.expect, report));
                problems.extend(cases::leaks(&std::fs::read(&case.recipe).unwrap_or_default(), report));
                problems.extend(cases::udev_disagreements(report));
                if case.expect.end() == Some(cases::TaskEnd::TimedOut) {
                    problems.extend(result::interrupted_by_the_power_off(&console, boot.exit));
                }
                if let Some(fault) = case.vm.fault_while_held {
                    problems.extend(cases::held(fault, report));
                }
                problems
            }
        }
    }

    /// Boots one guest for `cases`, one round each, and collects each round's report, or
    /// waits for the guest to shut itself down when the last case says it does. A task past
    /// its deadline is followed to the guest's power-off too, which interrupts it.
    pub fn boot(&self, cases: &[&Case]) -> Vec<Result<Boot>> {
        let untils: Vec<Until> = cases
            .iter()
            .map(|case| {
                let to_the_end =
                    case.expect.shuts_down().is_some() || case.expect.end() == Some(cases::TaskEnd::TimedOut);
                match case.expect {
                    Expect::BootFailed { .. } => Until::Repeat,
                    _ if to_the_end => Until::Exit,
                    _ => Until::Report,
                }
            })
            .collect();
        self.boot_rounds(cases, None, &untils)
    }

    /// Boots `iso` (instead of the tested image) for the case, only until the dispatcher's
    /// result line shows: what a controller waits for (`cargo xtask bench --boot`).
    pub fn boot_to_result(&self, case: &Case, iso: &Path) -> Result<Boot> {
        self.boot_rounds(&[case], Some(iso), &[Until::Result]).pop().expect("one round for one case")
    }

    /// The rounds of one boot, each as [`Testbed::watch`] saw it. A case whose task ISO cannot
    /// be made fails alone; the boot goes on with the others.
    fn boot_rounds(&self, cases: &[&Case], iso: Option<&Path>, untils: &[Until]) -> Vec<Result<Boot>> {
        let mut outcomes: Vec<Option<Result<Boot>>> = cases.iter().map(|_| None).collect();
        let mut rounds = vec![];
        for (index, case) in cases.iter().enumerate() {
            let dir = self.case_dir(case);
            let _ = std::fs::remove_dir_all(&dir);
            let task =
                std::fs::create_dir_all(&dir).map_err(anyhow::Error::from).and_then(|()| media::task_iso(case, &dir));
            match task {
                Ok(task) => rounds.push((index, *case, task, untils[index])),
                Err(e) => outcomes[index] = Some(Err(e)),
            }
        }
        if !rounds.is_empty() {
            let booted = self.boot_until(&rounds, iso).unwrap_or_else(|e| {
                let e = format!("{e:#}");
                rounds.iter().map(|_| Err(anyhow::anyhow!("{e}"))).collect()
            });
            for ((index, ..), boot) in rounds.iter().zip(booted) {
                outcomes[*index] = Some(boot);
            }
        }
        outcomes.into_iter().map(|outcome| outcome.expect("each round has an outcome")).collect()
    }

    /// Boots the machine of the first round's case and runs `rounds` in it (each its case, its
    /// task ISO with its recipe's digest, and how far it goes).
    fn boot_until(&self, rounds: &[Round], iso: Option<&Path>) -> Result<Vec<Result<Boot>>> {
        let (_, case, (task, digest), _) = &rounds[0];
        let dir = self.case_dir(case);
        let extra = case.vm.extra_media.iter().map(|m| media::plain_iso(&m.volume_id, &dir)).collect::<Result<_>>()?;
        let disks: Vec<(PathBuf, DiskSpec)> = case
            .vm
            .disks
            .iter()
            .enumerate()
            .map(|(n, spec)| (dir.join(format!("disk{n}.img")), spec.clone()))
            .collect();
        let bmc = case.vm.ipmi.map(|kind| bmc::Bmc::start(kind, &dir)).transpose()?;
        for (image, spec) in &disks {
            std::fs::File::create(image)?.set_len(spec.bytes()?)?;
        }
        let uefi = match case.vm.firmware {
            Firmware::Uefi => {
                let (code, vars) = uefi_firmware(self.arch, case.vm.secure_boot);
                // Each guest writes its own copy of the variables (boot entries).
                let copy = dir.join("efi-vars.fd");
                std::fs::copy(vars, &copy).with_context(|| format!("copy {vars}"))?;
                Some(Uefi { code: code.into(), vars: copy })
            }
            Firmware::Bios => None,
        };
        let image = case.vm.image_layer.as_ref().and_then(|layer| self.layered.get(layer)).unwrap_or(&self.image);
        let iso = match (iso, case.vm.unsigned_grub) {
            (Some(iso), _) => iso.to_owned(),
            (None, true) => media::with_unsigned_grub(self.arch, &image.iso, &dir)?,
            (None, false) => image.iso.clone(),
        };
        let iso = match case.vm.toram {
            true => media::with_menu_entry(&iso, media::TORAM_ENTRY, &dir.join("image-toram.iso"))?,
            false => iso,
        };
        // An embedded task is written into the image's own area, as a controller does for a
        // server with one virtual drive: no task CD then.
        let (iso, task) = match (case.vm.task, case.vm.toram) {
            (TaskArrival::Cd, _) => (iso, Some(task)),
            (TaskArrival::Embedded, true) => {
                crate::iso::embed(&iso, task, None)?;
                (iso, None)
            }
            (TaskArrival::Embedded, false) => {
                let embedded = dir.join("image-embedded.iso");
                crate::iso::embed(&iso, task, Some(&embedded))?;
                (embedded, None)
            }
        };
        let boot = match &case.vm.kernel_args {
            None => Booted::Image { iso: iso.clone(), media: case.vm.boot_media },
            Some(args) => {
                let args = match &digest {
                    Some(digest) => args.replace("@RECIPE_SHA256@", digest),
                    None if args.contains("@RECIPE_SHA256@") => bail!("@RECIPE_SHA256@ needs a recipe file"),
                    None => args.clone(),
                };
                Booted::Kernel {
                    kernel: image.kernel.clone(),
                    initrd: image.initrd.clone(),
                    cmdline: format!("{} {args}", image.cmdline),
                    // The image, with the case's task in its area if it has one there.
                    iso,
                }
            }
        };
        // Short: a Unix socket's path has at most 107 bytes.
        let socket = |kind: &str| {
            let key = system::fnv1a(case.name.as_bytes());
            std::env::temp_dir().join(format!("provision-vm-{}-{key}.{kind}", std::process::id()))
        };
        // A boot of several rounds keeps its whole console and reports apart from each
        // round's part of them, which its case's folder gets.
        let shared = rounds.len() > 1;
        let machine = Machine {
            cpus: self.cpus,
            uuid: case.vm.machine_uuid.clone(),
            firmware: case.vm.firmware,
            uefi,
            secure_boot: case.vm.secure_boot,
            boot,
            disks: disks.clone(),
            task: task.cloned(),
            task_late: case.vm.attach_media_after.is_some(),
            fault: case.vm.fault_while_held.map(|f| f.word()),
            bmc: bmc.as_ref().map(|b| b.qemu_args(self.qemu.arch)).unwrap_or_default(),
            task_read_bytes_per_sec: case.vm.media_read_bytes_per_sec,
            boot_read_bytes_per_sec: case.vm.boot_read_bytes_per_sec,
            extra,
            console: dir.join(if shared { "boot-console.log" } else { "console.log" }),
            report: dir.join(if shared { "boot-reports.json" } else { "report.json" }),
            control: shared.then(|| socket("control")),
            reads: dir.join("reads.log"),
            stderr: dir.join("qemu.stderr"),
            qmp: socket("qmp"),
        };
        let result = self.watch(rounds, &machine, bmc);
        for (disk, _) in &disks {
            let _ = std::fs::remove_file(disk);
        }
        let _ = std::fs::remove_file(&machine.qmp);
        if let Some(control) = &machine.control {
            let _ = std::fs::remove_file(control);
        }
        result
    }

    /// Runs the guest through its rounds: each until the guest has sent its whole report, has
    /// exited, or is past the round's deadline; plugs and pulls the task CD on the way when
    /// the case asks; between two rounds, puts the next task ISO into the CD and tells the
    /// reporter to go on. A round the boot never reached fails saying where the boot ended.
    fn watch(&self, rounds: &[Round], machine: &Machine, bmc: Option<bmc::Bmc>) -> Result<Vec<Result<Boot>>> {
        let powered_on = Instant::now();
        let mut guest = self.qemu.launch(machine)?;
        let mut control = machine.control.clone().map(rounds::Control::new);
        let mut done: Vec<(Result<Report>, Watched)> = vec![];
        let mut watched = Watched::new(powered_on, rounds[0].1);
        let ended = loop {
            let index = done.len();
            let (_, case, _, until) = rounds[index];
            let report = nth_report(&machine.report, index);
            let reported = report.is_some();
            if let Some(report) = report.filter(|_| until != Until::Exit) {
                done.push((report, watched.finish()));
                let Some((_, next, (task, _), _)) = rounds.get(index + 1) else { break None };
                // The next round: its task ISO in the CD, then the reporter runs the
                // dispatcher again.
                watched = Watched::new(Instant::now(), next);
                let went_on = qemu::change_task_media(&machine.qmp, task).and_then(|()| match &mut control {
                    Some(control) => control.next(),
                    None => bail!("a boot of several rounds has no control port"),
                });
                if let Err(e) = went_on {
                    break Some((format!("{e:#}"), watched));
                }
                continue;
            }
            if reported && !watched.told_to_power_off {
                // The reporter of a boot of several rounds waits to hear whether one more comes.
                if let Some(control) = &mut control {
                    control.power_off()?;
                }
                watched.told_to_power_off = true;
            }
            let whole = console_text(&machine.console);
            let console = rounds::console(&whole, index);
            let lines = console.matches(result::PREFIX).count();
            let since = watched.started.elapsed();
            watched.result_lines_at.resize(lines.max(watched.result_lines_at.len()), since);
            if until == Until::Repeat && lines >= 2 {
                let why = "the result line came again, and no report: the boot never reached its root";
                break Some((why.into(), watched));
            }
            if watched.result.is_none() && console.contains(result::PREFIX) {
                // What the guest read from its boot medium is the boot's: its first round's.
                let boot_read_bytes = match index {
                    0 => match qemu::boot_read_bytes(&machine.qmp) {
                        Ok(bytes) => Some(bytes),
                        Err(e) => {
                            eprintln!("vm: {}: the boot medium's counters: {e:#}", case.name);
                            None
                        }
                    },
                    _ => None,
                };
                watched.result = Some(ResultSeen { after: since, at: SystemTime::now(), boot_read_bytes });
                if until == Until::Result {
                    break Some(("stopped at the result line, before the report".into(), watched));
                }
            }
            // A refused boot goes nowhere (the firmware tries the next boot option, or waits):
            // it ends here, not at the deadline.
            watched.refusal = cases::refusal(console);
            if let Some(line) = &watched.refusal {
                break Some((format!("Secure Boot refused the image: {line:?}"), watched));
            }
            if guest.exited()? {
                break match nth_report(&machine.report, index) {
                    Some(report) => {
                        done.push((report, watched.finish()));
                        None
                    }
                    None if until == Until::Exit => {
                        Some(("the guest shut down by itself, without a report".into(), watched))
                    }
                    None => Some((format!("{:#}", ended_without_report(&guest, machine)), watched)),
                };
            }
            if since > case.vm.deadline {
                break Some((format!("no report within {:.0?}: killed QEMU", case.vm.deadline), watched));
            }
            if !(watched.plugged && watched.pulled)
                && watched.dispatcher_started.is_none()
                && console.contains(DISPATCHER_STARTED)
            {
                watched.dispatcher_started = Some(Instant::now());
            }
            if let Some(since) = watched.dispatcher_started.map(|at| at.elapsed()) {
                if !watched.plugged && case.vm.attach_media_after.is_some_and(|after| since >= after) {
                    qemu::plug_task_media(&machine.qmp)?;
                    watched.plugged = true;
                }
                if !watched.pulled && case.vm.detach_media_after.is_some_and(|after| since >= after) {
                    qemu::pull_task_media(&machine.qmp)?;
                    watched.pulled = true;
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let ended = ended.map(|(why, watched)| (why, watched.finish()));
        // The reports are all the harness needs: no need to wait for the guest's power-off.
        let exit = guest.exit_status();
        drop(guest);
        let whole = console_text(&machine.console);
        let reports = std::fs::read(&machine.report).unwrap_or_default();
        let mut bmc = bmc.map(|bmc| (bmc.kind, bmc.sel()));
        let mut boots = vec![];
        let reached = done.len() + usize::from(ended.is_some());
        let unfinished = ended.map(|(why, watched)| (Err(anyhow::anyhow!(why)), watched));
        for (index, (report, watched)) in done.into_iter().chain(unfinished).enumerate() {
            let dir = self.case_dir(rounds[index].1);
            // Each round's own part of the console and of the reports, in its case's folder.
            let console = match machine.control {
                None => machine.console.clone(),
                Some(_) => {
                    let part = dir.join("console.log");
                    std::fs::write(&part, rounds::console(&whole, index))?;
                    if let Some(line) = reports.split_inclusive(|&b| b == b'\n').nth(index) {
                        std::fs::write(dir.join("report.json"), line)?;
                    }
                    part
                }
            };
            boots.push(Ok(Boot {
                report,
                job: rounds[index].2 .1.clone(),
                refusal: watched.refusal,
                console,
                reads: machine.reads.clone(),
                elapsed: watched.took,
                result: watched.result,
                result_lines_at: watched.result_lines_at,
                bmc: bmc.take(),
                exit: (index + 1 == reached).then_some(exit).flatten(),
            }));
        }
        let last = rounds[reached - 1].1;
        for _ in reached..rounds.len() {
            boots.push(Err(anyhow::anyhow!("the boot ended in its round {reached} ({}) before this round", last.name)));
        }
        Ok(boots)
    }
}

/// A round of a boot: its index among the boot's cases, its case, its task ISO with the
/// SHA-256 of its recipe, and how far it goes.
type Round<'a> = (usize, &'a Case, (PathBuf, Option<String>), Until);

/// What the harness saw of one round while it ran.
struct Watched {
    /// Power-on for the first round; the word to go on for the later ones.
    started: Instant,
    dispatcher_started: Option<Instant>,
    plugged: bool,
    pulled: bool,
    refusal: Option<String>,
    result: Option<ResultSeen>,
    result_lines_at: Vec<Duration>,
    told_to_power_off: bool,
    /// How long the round took, once it is over.
    took: Duration,
}

impl Watched {
    /// A round of `case` that began at `started`.
    fn new(started: Instant, case: &Case) -> Watched {
        Watched {
            started,
            dispatcher_started: None,
            plugged: case.vm.attach_media_after.is_none(),
            pulled: case.vm.detach_media_after.is_none(),
            refusal: None,
            result: None,
            result_lines_at: vec![],
            told_to_power_off: false,
            took: Duration::ZERO,
        }
    }

    /// The round is over: its time is taken.
    fn finish(self) -> Watched {
        Watched { took: self.started.elapsed(), ..self }
    }
}

/// Every boot read as a controller reads it, whatever the case expects: the console's result
/// lines are this job's (`result::of_this_job`), and every document the boot made is valid by
/// its published schema, held closed (`schemas/`, with Python's jsonschema): each whole result
/// line and each whole inventory on the serial console, and the guest's status.json and
/// `disks --format json`.
fn as_a_controller_reads(boot: &Boot) -> Vec<String> {
    use crate::schemas::Document;
    let console = boot.console_text();
    let mut problems = result::of_this_job(&console, boot.job.as_deref());
    let mut documents: Vec<Document> = result::lines(&console)
        .into_iter()
        .enumerate()
        .map(|(n, (_, json))| Document {
            what: format!("result line {} on the serial console", n + 1),
            name: "result",
            json,
        })
        .collect();
    let (inventories, _) = inventory::read(&console);
    documents.extend(inventories.into_iter().map(|inventory| Document {
        what: format!("the inventory {} on the serial console", inventory.sha256),
        name: "inventory",
        json: inventory.document,
    }));
    if let Ok(report) = &boot.report {
        for (file, name) in [("status.json", "status"), ("disks.json", "disks")] {
            match report.file(file).map(serde_json::from_slice) {
                Some(Ok(json)) => documents.push(Document { what: format!("the guest's {file}"), name, json }),
                Some(Err(e)) => problems.push(format!("the guest's {file} is not JSON: {e}")),
                None => {}
            }
        }
    }
    match crate::schemas::invalid(&documents) {
        Ok(found) => problems.extend(found),
        Err(e) => problems.push(format!("{e:#}")),
    }
    problems
}

/// Why a guest ended before its report: QEMU crashed (a signal; its last words on stderr
/// and `core` in its working directory when core dumps are on), or the guest powered itself
/// off or reset under `-no-reboot` (the console's last line says how far it got).
fn ended_without_report(guest: &qemu::Guest, machine: &qemu::Machine) -> anyhow::Error {
    use std::os::unix::process::ExitStatusExt;
    let last_line = |path: &Path| {
        let text = std::fs::read(path).unwrap_or_default();
        let text = String::from_utf8_lossy(&text);
        text.lines()
            .map(str::trim)
            .rfind(|line| !line.is_empty())
            .map(|line| line.chars().take(160).collect::<String>())
    };
    let how = match guest.exit_status() {
        Some(status) if status.signal().is_some() => format!("QEMU crashed ({status})"),
        Some(status) => format!("QEMU ended ({status}): the guest powered off or reset"),
        None => "QEMU ended".to_owned(),
    };
    let qemu = last_line(&machine.stderr).map(|line| format!("; QEMU said {line:?}")).unwrap_or_default();
    let console =
        last_line(&machine.console).map(|line| format!("; the console's last line: {line:?}")).unwrap_or_default();
    anyhow::anyhow!("{how} without a whole report{qemu}{console}")
}

/// The second half of the test layer: `/usr/lib/vm-test/hold` (examples/vm-hold.rs), built
/// for `arch` as the dispatcher is (static), which `fault_while_held` cases use.
fn hold_layer(arch: Arch, workdir: &Path) -> Result<PathBuf> {
    let built = crate::dist::build_example(arch, "vm-hold")?;
    let layer = workdir.join("hold-layer");
    let dir = layer.join("usr/lib/vm-test");
    std::fs::create_dir_all(&dir)?;
    std::fs::copy(&built, dir.join("hold")).with_context(|| format!("copy {}", built.display()))?;
    Ok(layer)
}

/// The test layer must not enable, configure or replace any part of the product: what the
/// guest reports has to come from the image's own package, preset and units.
fn layer_leaves_the_dispatcher_alone(layer: &Path) -> Result<()> {
    let mut todo = vec![layer.to_owned()];
    while let Some(dir) = todo.pop() {
        for entry in std::fs::read_dir(&dir).with_context(|| format!("read {}", dir.display()))? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with("provision-") {
                bail!(
                    "{} is in the test layer: the tests must run the image's own package, preset and units",
                    entry.path().display()
                );
            }
            if entry.file_type()?.is_dir() {
                todo.push(entry.path());
            }
        }
    }
    Ok(())
}

/// Round `index`'s report (from 0), once the guest has written all of it: the reports of a
/// boot's rounds come one a line.
fn nth_report(path: &Path, index: usize) -> Option<Result<Report>> {
    let bytes = std::fs::read(path).ok()?;
    let line = bytes.split_inclusive(|&b| b == b'\n').nth(index)?;
    line.ends_with(b"\n").then(|| Report::parse(line))
}

/// A serial console log as text, without colour sequences (empty until QEMU writes it).
pub fn console_text(console: &Path) -> String {
    strip_ansi(&String::from_utf8_lossy(&std::fs::read(console).unwrap_or_default()))
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

impl Case {
    /// Why this case does not run on `arch`, if it does not.
    pub fn skip_reason(&self, arch: Arch) -> Option<String> {
        if self.vm.mode == Some(Mode::Direct) {
            return Some("written for the direct-kernel mode, which was retired (the image is what users run)".into());
        }
        if let Some(only) = self.vm.arch.as_deref().filter(|only| *only != arch.debian()) {
            return Some(format!("runs on {only} only"));
        }
        if self.vm.firmware == Firmware::Bios && arch != Arch::Amd64 {
            return Some(format!("no legacy BIOS on {}", arch.debian()));
        }
        None
    }
}
