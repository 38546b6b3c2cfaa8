//! `run` against buses that misbehave, one way each (issue 21, issue 24): every step of the
//! bus is bounded by `--bus-timeout` and ends in 69 with a clear message within the bound plus
//! a margin; a SIGTERM ends the wait at once; what the bus sends never reaches the console
//! raw. The buses are tests/common/fakebus.rs, a unix socket served by the test.

mod common;

use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::fakebus::{string, string_bytes, systemd, Answer, FakeBus, FullBacklog, Stage};
use common::machine::{detail_codes, example, media, run_command, Machine};
use common::{dispatcher, run, Run};
use serde_json::json;

/// The bound every test gives, and what a run may take beyond it: starting the binary and
/// reading the media, on a loaded machine.
const TIMEOUT: Duration = Duration::from_secs(2);
const MARGIN: Duration = Duration::from_secs(3);

/// Runs the esxi example against the bus at `address` with the test's bound; its output and
/// how long it took.
fn dispatch(machine: &Machine, address: &str) -> (Run, Duration) {
    let media = media(&example("seed-esxi"));
    let started = Instant::now();
    let mut cmd = run_command(media.path(), &machine.state(), &machine.output(), address);
    let out = run(cmd.args(["--wait", "1", "--bus-timeout"]).arg(TIMEOUT.as_secs().to_string()));
    (out, started.elapsed())
}

/// The run ended in 69 within the bound plus the margin, saying `says`.
fn assert_bounded_69(machine: &Machine, out: &Run, took: Duration, says: &str) {
    assert_eq!(out.code, 69, "{}", out.stderr);
    assert!(took < TIMEOUT + MARGIN, "took {took:?}");
    let status = machine.status();
    assert_eq!(status["state"], "failed");
    let text = status.to_string();
    assert!(text.contains(says), "the status says {says:?}: {status}");
}

/// Runs against `address` and checks that the run ended in 69 within the bound plus the
/// margin, its status saying `says`.
fn assert_bounded_69_against(address: &str, says: &str) -> Machine {
    let machine = Machine::new();
    let (out, took) = dispatch(&machine, address);
    assert_bounded_69(&machine, &out, took, says);
    machine
}

#[test]
fn a_bus_whose_listen_backlog_is_full_is_69_within_the_timeout() {
    let bus = FullBacklog::new();
    let machine = assert_bounded_69_against(&bus.address, "the system bus accepted no connection");
    assert_eq!(detail_codes(&machine.status()), ["systemdUnavailable"]);
}

#[test]
fn a_bus_that_accepts_and_never_speaks_is_69_within_the_timeout() {
    let bus = FakeBus::start(Stage::Silent);
    assert_bounded_69_against(&bus.address, "the system bus did not let the dispatcher in: no answer within 2 s");
}

#[test]
fn a_bus_that_never_answers_hello_is_69_within_the_timeout() {
    let bus = FakeBus::start(Stage::AuthOnly);
    assert_bounded_69_against(&bus.address, "the system bus did not let the dispatcher in: no answer within 2 s");
}

#[test]
fn a_call_never_answered_is_69_within_the_timeout() {
    let bus = FakeBus::start(Stage::Calls(|member| match member {
        "LoadUnit" => Answer::Never,
        other => systemd(other),
    }));
    let machine = assert_bounded_69_against(&bus.address, "LoadUnit on the system bus: no answer within 2 s");
    assert_eq!(detail_codes(&machine.status()), ["systemdUnavailable"]);
    assert_eq!(bus.calls(), ["Hello", "LoadUnit"]);
}

/// systemd, but StartUnit is never answered.
fn silent_on_start(member: &str) -> Answer {
    match member {
        "StartUnit" => Answer::Never,
        other => systemd(other),
    }
}

/// A rerun of the same recipe on a good bus: exit 0, and no second StartUnit.
fn assert_a_rerun_does_not_start_again(machine: &Machine) {
    let good = FakeBus::start(Stage::Calls(systemd));
    let (again, _) = dispatch(machine, &good.address);
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert!(again.stderr.contains("outcome unknown"), "{}", again.stderr);
    assert!(!good.calls().contains(&"StartUnit".to_owned()), "not started twice: {:?}", good.calls());
}

#[test]
fn a_good_bus_dispatches() {
    let bus = FakeBus::start(Stage::Calls(systemd));
    let machine = Machine::new();
    let (out, _) = dispatch(&machine, &bus.address);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(machine.status()["job"], "/org/freedesktop/systemd1/job/7");
    assert_eq!(bus.calls(), ["Hello", "LoadUnit", "Get", "StartUnit"]);
}

/// Issue 24 #9: a StartUnit whose reply never comes may have queued the job: the dispatch is
/// recorded with its outcome unknown, and a rerun does not start the target a second time.
#[test]
fn a_start_never_answered_is_69_and_recorded_so_that_a_rerun_does_not_start_again() {
    let bus = FakeBus::start(Stage::Calls(silent_on_start));
    let machine = assert_bounded_69_against(&bus.address, "StartUnit on the system bus: no answer within 2 s");
    let status = machine.status();
    assert_eq!(status["failure"], "start_failed");
    assert!(status["message"].as_str().unwrap().contains("outcome is unknown"), "{status}");
    assert_eq!(status["dispatch"]["target"], "install-esxi.target");
    assert_eq!(status["dispatch"]["job"], json!(null));
    assert_a_rerun_does_not_start_again(&machine);
}

/// Issue 24 #8: a name systemd refuses to load (InvalidArgs) is the unit not loadable, not
/// systemd unavailable.
#[test]
fn a_name_systemd_refuses_is_the_unit_not_loadable() {
    let bus = FakeBus::start(Stage::Calls(|member| match member {
        "LoadUnit" => Answer::Error("org.freedesktop.DBus.Error.InvalidArgs"),
        other => systemd(other),
    }));
    let machine = Machine::new();
    let (out, _) = dispatch(&machine, &bus.address);
    assert_eq!(out.code, 69, "{}", out.stderr);
    let status = machine.status();
    assert_eq!(status["failure"], "unit_not_loadable", "{status}");
    assert_eq!(detail_codes(&status), ["unitNotFound"]);
}

/// Issue 24 #16: a job path holding an escape sequence never reaches the console or the
/// status raw, whether the bus calls it an object path or a string.
#[test]
fn a_job_path_with_escape_sequences_is_never_written_raw() {
    let scripts: [fn(&str) -> Answer; 2] = [
        |member| match member {
            "StartUnit" => Answer::Return("o", string_bytes(b"/org/freedesktop/systemd1/job/\x1b]0;owned\x07\x1b[2J")),
            other => systemd(other),
        },
        |member| match member {
            "StartUnit" => Answer::Return("s", string("\u{1b}[31m/job/1\u{9b}")),
            other => systemd(other),
        },
    ];
    for script in scripts {
        let bus = FakeBus::start(Stage::Calls(script));
        let machine = Machine::new();
        let (out, _) = dispatch(&machine, &bus.address);
        assert_eq!(out.code, 69, "{}", out.stderr);
        let status = std::fs::read_to_string(machine.state().join("status.json")).unwrap();
        for (what, text) in [("stderr", &out.stderr), ("stdout", &out.stdout), ("status.json", &status)] {
            assert!(!text.contains('\u{1b}') && !text.contains('\u{9b}'), "{what}: {text}");
        }
        assert!(status.contains("a reply of the wrong type"), "{status}");
    }
}

/// Starts the run in the background against `address`, with a long bound.
fn spawn(machine: &Machine, media: &std::path::Path, address: &str) -> Child {
    let mut cmd = run_command(media, &machine.state(), &machine.output(), address);
    cmd.args(["--wait", "1", "--bus-timeout", "60"]).stderr(Stdio::null()).spawn().unwrap()
}

/// Sends SIGTERM, as systemd does to stop a unit: the run must end within 2 s, dying of the
/// signal, its status saying it was stopped. Returns that status.
fn stop_promptly(mut child: Child, machine: &Machine) -> serde_json::Value {
    let pid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
    let sent = Instant::now();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let exit = child.wait().unwrap();
    assert!(sent.elapsed() < Duration::from_secs(2), "took {:?}", sent.elapsed());
    assert_eq!(exit.signal(), Some(libc::SIGTERM), "{exit:?}");
    let status = machine.status();
    assert_eq!(status["state"], "failed");
    assert_eq!(status["failure"], "stopped", "{status}");
    status
}

/// Waits for `condition`, up to 30 s.
fn wait_for(what: &str, condition: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !condition() {
        assert!(Instant::now() < deadline, "never: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Issue 24 #1: a SIGTERM while the dispatcher waits to connect ends the run at once, and
/// the status says so.
#[test]
fn sigterm_while_connecting_ends_the_run_at_once() {
    let bus = FullBacklog::new();
    let machine = Machine::new();
    let media = media(&example("seed-esxi"));
    let child = spawn(&machine, media.path(), &bus.address);
    // The status says `running` from the start; the media is a directory: it is connecting.
    wait_for("the run started", || machine.state().join("status.json").exists());
    std::thread::sleep(Duration::from_millis(700));
    stop_promptly(child, &machine);
}

/// Issue 24 #9: a SIGTERM while StartUnit's reply is on its way records the request, so that
/// a rerun does not start the target again.
#[test]
fn sigterm_while_the_start_is_answered_records_the_request() {
    let bus = FakeBus::start(Stage::Calls(silent_on_start));
    let machine = Machine::new();
    let media = media(&example("seed-esxi"));
    let child = spawn(&machine, media.path(), &bus.address);
    wait_for("StartUnit was called", || bus.calls().contains(&"StartUnit".to_owned()));
    let status = stop_promptly(child, &machine);
    assert!(status["message"].as_str().unwrap().contains("outcome is unknown"), "{status}");
    assert_eq!(status["dispatch"]["target"], "install-esxi.target");
    assert_a_rerun_does_not_start_again(&machine);
}

/// Issue 24 #12: absurd bounds are usage errors, not panics.
#[test]
fn absurd_bus_timeouts_are_usage_errors() {
    for value in ["9.9e18", "1e300", "inf", "NaN", "-1", "86401"] {
        let out = run(dispatcher().arg("run").arg(format!("--bus-timeout={value}")));
        assert_eq!(out.code, 64, "{value}: {}", out.stderr);
        assert!(out.stderr.contains("--bus-timeout takes seconds"), "{value}: {}", out.stderr);
    }
}
