//! Running another architecture's programs here: qemu-user through binfmt_misc, for the
//! foreign chroots of an arm64 image build (mmdebstrap, dpkg) and the arm64 tests.

use std::path::Path;
use std::process::Command;

use anyhow::{bail, Result};

use crate::arch::Arch;
use crate::dist;
use crate::needs::{self, Need};
use crate::system;

/// The test suites run under qemu-user: the unit tests and those of check, render, run (the
/// private bus and the stand-in systemd), faults, the units and the docs. Not tests/hostile.rs:
/// qemu-user ignores setrlimit(RLIMIT_AS) (it would limit the emulator itself), so its
/// out-of-memory tests cannot fail an allocation there, and its inputs at the caps take
/// minutes emulated; it runs natively on amd64, where nothing in it depends on the
/// architecture.
const UNDER_QEMU_USER: &[&str] = &[
    "--lib", "--bins", "--test", "check", "--test", "render", "--test", "run", "--test", "faults", "--test", "units",
    "--test", "docs",
];

/// Set for the suites run under qemu-user (`tests/faults.rs` reads it).
const EMULATED: &str = "PROVISION_DISPATCHER_TEST_EMULATED";

/// `cargo xtask test [--target TRIPLE]`: the product's unit and integration tests (with the
/// fail points of tests/faults.rs) built for TRIPLE. Another architecture's run under
/// qemu-user: the test binaries through cargo's runner, the dispatcher they start through
/// binfmt_misc, both loading the target's C library from Debian's cross toolchain.
pub fn run(args: &[String]) -> Result<()> {
    test(dist::target_arg("test", args)?)
}

pub fn test(arch: Arch) -> Result<()> {
    // The suites' own programs (a real dbus-daemon, ssh-keygen, python3 and jq for the
    // documented readers, ...), whichever task runs first: `ci` ensures them too.
    needs::ensure(Need::Tests, "the tests")?;
    let mut cargo = Command::new(env!("CARGO"));
    cargo.current_dir(crate::root()).args([
        "test",
        "--locked",
        "--package",
        "provision-dispatcher",
        "--features",
        "fault-injection",
        "--target",
        arch.triple(),
    ]);
    if arch != Arch::host() {
        dist::cross_toolchain(arch)?;
        ensure_binfmt(arch)?;
        let var = |what: &str| format!("CARGO_TARGET_{}_{what}", arch.triple().to_uppercase().replace('-', "_"));
        let (interpreter, sysroot) = match arch {
            Arch::Arm64 => ("qemu-aarch64-static", "/usr/aarch64-linux-gnu"),
            Arch::Amd64 => ("qemu-x86_64-static", "/usr/x86_64-linux-gnu"),
        };
        let env = [(var("LINKER"), dist::linker(arch).to_owned()), (var("RUNNER"), interpreter.to_owned())];
        // EMULATED tells the suites that CPU time is emulated (five to ten times the native):
        // a test of a CPU-time budget takes its bounded refusal for an outcome there.
        cargo.envs(env.clone()).env("QEMU_LD_PREFIX", sysroot).env(EMULATED, "1").args(UNDER_QEMU_USER);
        // One test at a time: qemu-user (7.2, Debian 12's) can leave a forked child deadlocked
        // before its exec when another thread of the emulated process is busy in the emulator
        // at the fork (seen once in ci: trust's ssh-keygen test, the child asleep on a futex
        // for 12 minutes, its parent waiting for it). Alone, a test forks with the others idle.
        cargo.args(["--", "--test-threads=1"]);
        // Naming the suites leaves out the examples that `cargo test` alone would build: the
        // run and faults suites start examples/mock-systemd, so it is built first.
        system::run(
            Command::new(env!("CARGO"))
                .current_dir(crate::root())
                .args(["build", "--locked", "--package", "provision-dispatcher", "--features", "fault-injection"])
                .args(["--example", "mock-systemd", "--target", arch.triple()])
                .envs(env),
        )?;
    }
    if arch == Arch::host() {
        return system::run(&mut cargo);
    }
    // And should it deadlock all the same, the hang is named and the suites run once more,
    // instead of ci waiting for its own time limit: the emulator's fault, not the product's
    // (a hang of ours would hang again, and fail).
    for attempt in 1..=2 {
        match system::run_with_deadline(&mut cargo, EMULATED_DEADLINE)? {
            system::Ended::Exited => return Ok(()),
            system::Ended::Killed => eprintln!(
                "xtask: the {} tests under qemu-user ran past {} minutes (attempt {attempt} of 2): killed; \
                 a child forked under qemu-user that never reached its exec is the known cause",
                arch.debian(),
                EMULATED_DEADLINE.as_secs() / 60
            ),
        }
    }
    bail!("the {} tests under qemu-user hung twice", arch.debian())
}

/// How long the suites may take under qemu-user: about 4 minutes here one test at a time
/// (the build apart), so 20 is a hang.
const EMULATED_DEADLINE: std::time::Duration = std::time::Duration::from_secs(20 * 60);

/// The kernel runs `arch`'s executables through qemu-user: qemu-user-static installed (its
/// package registers the interpreters with binfmt-support), binfmt_misc mounted (it is not
/// on this kind of machine until someone mounts it), the interpreter enabled.
pub fn ensure_binfmt(arch: Arch) -> Result<()> {
    let name = match arch {
        Arch::Arm64 => "qemu-aarch64",
        Arch::Amd64 => "qemu-x86_64",
    };
    needs::ensure(Need::Emulate(arch), &format!("running {} programs here (qemu-user)", arch.debian()))?;
    let binfmt = Path::new("/proc/sys/fs/binfmt_misc");
    if !binfmt.join("register").exists() {
        eprintln!("xtask: mounting binfmt_misc on {}", binfmt.display());
        system::run(Command::new("mount").args(["-t", "binfmt_misc", "binfmt_misc"]).arg(binfmt))?;
    }
    if !binfmt.join(name).exists() {
        system::run(Command::new("update-binfmts").args(["--enable", name]))?;
    }
    if !binfmt.join(name).exists() {
        bail!("binfmt_misc has no {name} interpreter after update-binfmts --enable");
    }
    Ok(())
}
