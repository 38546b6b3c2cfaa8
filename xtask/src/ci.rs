//! `cargo xtask ci`: everything that must pass before a change lands, in the order that fails
//! fastest (the package next, the VM boots last: minutes, where the rest takes seconds).
//! `.ci/run` calls exactly this.

use std::process::Command;
use std::time::Instant;

use anyhow::Result;

use crate::arch::Arch;
use crate::needs::{self, Need};
use crate::system;

/// The VM cases CI boots on arm64 too: the hold's system calls are the architecture's own, so
/// one `fault_while_held` case is among them.
const ARM64_CASES: &[&str] = &[
    "seed-linux",
    "seed-invalid-linux",
    "late-media",
    "target-disk-removed-before-start",
    "unsigned-grub-refused",
    // Disk identity on arm64's buses: SCSI on virtio-scsi by its WWN, a serial hint; its task
    // embedded in the image (`media embed`), which proves arm64's smaller task area too.
    "disk-scsi-by-id-dispatched",
];

pub fn run() -> Result<()> {
    let root = crate::root();
    let started = Instant::now();
    let cargo = || {
        let mut cmd = Command::new(env!("CARGO"));
        cmd.current_dir(&root);
        cmd
    };
    step("fmt", || system::run(cargo().args(["fmt", "--all", "--", "--check"])))?;
    step("clippy", || {
        system::run(cargo().args(["clippy", "--workspace", "--all-targets", "--locked", "--", "-D", "warnings"]))
    })?;
    needs::ensure(Need::Tests, "the tests")?;
    // The fail points of tests/faults.rs are compiled into the test build only.
    step("test", || {
        system::run(cargo().args([
            "test",
            "--workspace",
            "--locked",
            "--features",
            "provision-dispatcher/fault-injection",
        ]))
    })?;
    // The arm64 base, when it is not cached, is built beside the amd64 steps: its package
    // scripts run one at a time under qemu-user (about 18 minutes on one core), which would
    // otherwise be the longest step of a run from nothing.
    let arm64_base = std::thread::spawn(|| crate::base::ensure(Arch::Arm64).map(drop));
    step("validate", crate::validate::run)?;
    // The package: built, lintian, installed, reinstalled and purged in a clean root (whose
    // base is the image's, built here on a clean machine and cached).
    step("deb", || crate::deb::run(&[]))?;
    // The image users deploy, booted: every case, two guests at a time (one core each). UEFI
    // cases boot with Secure Boot enforced (OVMF's secboot build, SMM under TCG). With QEMU 10
    // (`vm::qemu`) a boot takes 36 s alone on an idle machine, 40 to 97 s two at a time (the
    // cases that wait for late media or hold the dispatcher are the long ones): all 33 amd64
    // cases in about 14 minutes.
    step("vm-test", || crate::vm::run(&args(&["--image", "--jobs", "2"])))?;
    // arm64: the binary and the tests of check, render, run (private bus, stand-in systemd)
    // and faults under qemu-user; the package; the image booted under qemu-system-aarch64
    // for the seed's dispatch, the seed's invalid recipe, late media (the three) and
    // one fault while held (about 100 s of boot each under TCG, two at a time; every case
    // would add about half an hour), with Secure Boot as on amd64, and shim's refusal of an
    // unsigned GRUB (a few seconds: it ends at the refusal).
    step("test arm64", || crate::cross::test(Arch::Arm64))?;
    step("arm64 base", || {
        arm64_base.join().unwrap_or_else(|_| Err(anyhow::anyhow!("the arm64 base's thread panicked")))
    })?;
    step("deb arm64", || crate::deb::run(&args(&["--target", Arch::Arm64.triple()])))?;
    step("vm-test arm64", || {
        let mut arm64 = args(&["--image", "--arch", "arm64", "--jobs", "2"]);
        for case in ARM64_CASES {
            arm64.push("--cases".into());
            arm64.push(crate::root().join("tests/vm-cases").join(case).display().to_string());
        }
        crate::vm::run(&arm64)
    })?;
    println!("ci: all steps passed in {:.0?}", started.elapsed());
    Ok(())
}

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|a| a.to_string()).collect()
}

fn step(name: &str, f: impl FnOnce() -> Result<()>) -> Result<()> {
    let started = Instant::now();
    println!("ci: {name}");
    f()?;
    println!("ci: {name} passed in {:.1?}", started.elapsed());
    Ok(())
}
