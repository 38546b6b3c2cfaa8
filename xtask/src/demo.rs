//! `cargo xtask demo`: the whole story on two real boots of what users deploy. It builds the
//! package, the maintenance-OS image (with the test layer's stand-in targets) and the task
//! ISOs from the seed's examples; one guest dispatches the Linux example (retargeted to the
//! guest's blank disk /dev/vdb) from one drive, its task embedded in a copy of the image by
//! `media embed` (the one-drive flow), the other fails on the invalid example, its task ISO on
//! a CD of its own beside the image (the two-drive flow). For each it shows what an operator
//! would see: the failure banner on the console, the dispatcher's journal, and what the
//! target's service was given. The guests are the vm-test cases of the same names.

use anyhow::{bail, Result};

use crate::vm::cases::{self, Case, Expect, TaskArrival};
use crate::vm::report::Report;
use crate::vm::{self, Testbed};

/// The cases, and how each one's task arrives.
const CASES: &[(&str, TaskArrival)] = &[("seed-linux", TaskArrival::Embedded), ("seed-invalid-linux", TaskArrival::Cd)];

pub fn run() -> Result<()> {
    let dir = crate::root().join("tests/vm-cases");
    let mut shown: Vec<Case> = vec![];
    for (name, task) in CASES {
        let mut case = cases::load(&dir.join(name))?;
        case.vm.task = *task;
        shown.push(case);
    }
    let testbed = Testbed::prepare(crate::arch::Arch::host(), &[], &[])?;
    let mut failures = 0;
    for case in &shown {
        println!();
        let how = match case.vm.task {
            TaskArrival::Embedded => "embedded in the image by `media embed`: one ISO, one drive",
            TaskArrival::Cd => "on a task ISO attached beside the image: two drives",
        };
        println!("=== {}: boot with {}, {how}", case.name, case.recipe.display());
        let (boot, problems) = testbed.run_case(case);
        if let Ok(boot @ vm::Boot { report: Ok(report), .. }) = &boot {
            show(case, &boot.console_text(), report);
        }
        match problems.as_slice() {
            [] => println!("--- as expected ({})", describe(&case.expect)),
            _ => {
                failures += 1;
                println!("--- NOT as expected: {}", problems.join("; "));
            }
        }
    }
    if failures > 0 {
        bail!("{failures} demo guest(s) did not behave as expected");
    }
    Ok(())
}

fn show(case: &Case, console: &str, report: &Report) {
    if let Some(banner) = cases::console_banner(console) {
        println!("--- the serial console (a BMC's serial-over-LAN shows the same; tty1 too)");
        for line in banner.lines() {
            println!("  {line}");
        }
    }
    println!("--- journal of provision-dispatcher.service");
    for line in report.text("dispatcher.journal").lines() {
        println!("  {line}");
    }
    if let Expect::Dispatched { target, .. } = &case.expect {
        println!("--- what {target}'s service saw through EnvironmentFile=/run/provision/recipe.env");
        for (key, value) in report.recorded_env(target).unwrap_or_default() {
            println!("  {}={}", String::from_utf8_lossy(key), String::from_utf8_lossy(value));
        }
        println!("--- and in /run/provision (mode owner size path)");
        for line in report.recorded_listing(target).lines() {
            println!("  {line}");
        }
    }
    if let Some(ms) = report.dispatcher().run_time_ms() {
        println!("--- the dispatcher's process ran {ms:.0} ms");
    }
}

fn describe(expect: &Expect) -> String {
    match expect {
        Expect::Dispatched { target, .. } => format!("dispatched {target}"),
        Expect::Failed { exit, paths, .. } => format!("failed with exit {exit}, naming {}", paths.join(" ")),
        Expect::RefusedByFirmware {} => "refused by the firmware".into(),
        Expect::BootFailed { failure, exit, .. } => format!("stopped in the initrd ({failure}, exit {exit})"),
    }
}
