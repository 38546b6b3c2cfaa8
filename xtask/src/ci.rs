//! `cargo xtask ci`: everything that must pass before a change lands, in the order that fails
//! fastest (the VM boots last: minutes, where the rest takes seconds). `.ci/run` calls exactly this.

use std::process::Command;
use std::time::Instant;

use anyhow::Result;

use crate::system;

/// Debian packages the tests need: a real dbus-daemon for the private-bus tests, squashfs
/// tools for the loop-mount test, xorriso for task ISOs, systemd-analyze for the units.
pub const TEST_COMMANDS: &[(&str, &str)] = &[
    ("dbus-daemon", "dbus"),
    ("mksquashfs", "squashfs-tools"),
    ("xorriso", "xorriso"),
    ("systemd-analyze", "systemd"),
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
    system::ensure_commands("the tests", TEST_COMMANDS)?;
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
    step("validate", crate::validate::run)?;
    step("vm-test", || crate::vm::run(&[]))?;
    println!("ci: all steps passed in {:.0?}", started.elapsed());
    Ok(())
}

fn step(name: &str, f: impl FnOnce() -> Result<()>) -> Result<()> {
    let started = Instant::now();
    println!("ci: {name}");
    f()?;
    println!("ci: {name} passed in {:.1?}", started.elapsed());
    Ok(())
}
