//! `follow` through the real binary (SPEC §6d): after `run` dispatched a target on a real
//! dbus-daemon, the follower follows its job on the mock systemd (examples/mock-systemd.rs,
//! whose jobs end when a test says so) and tells the task's end: status.json, a second
//! `PROVISION-RESULT v1` line for the same recipe and job, made from the status as written,
//! and READY=1 to systemd (a datagram socket of the test's as `NOTIFY_SOCKET`) only once the
//! end is told. One test per end: succeeded, a unit failed, the deadline, a shutdown, a bus
//! restart while following, nothing dispatched.

mod common;

use std::io::{BufRead, BufReader};
use std::os::unix::net::UnixDatagram;
use std::process::{Child, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::{Duration, Instant};

use common::bus::PrivateBus;
use common::dispatcher;
use common::machine::{example, media, Machine};
use serde_json::Value;
use sha2::{Digest, Sha256};

const PREFIX: &str = "PROVISION-RESULT v1 ";
const TARGET: &str = "install-esxi.target";

/// How long a test waits for something the follower must do at once (a line, an exit): a
/// bound so that a broken follower fails the test instead of hanging it, never a measurement.
const PATIENCE: Duration = Duration::from_secs(60);

/// A bus whose mock queues the target's job and a job for each of `units` (the units the
/// target pulls in), and ends none until the test says so.
fn waiting_bus(units: &str) -> PrivateBus {
    PrivateBus::start(TARGET, &["--pulls", &format!("{TARGET}={units}"), "--jobs-wait"])
}

/// `run` dispatches seed-esxi; its result line.
fn dispatch(machine: &Machine, bus: &PrivateBus) -> Value {
    let out = machine.dispatch(media(&example("seed-esxi")).path(), Some(bus), &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let line = out.stdout.lines().find_map(|l| l.strip_prefix(PREFIX)).expect("run's result line");
    let line: Value = serde_json::from_str(line).unwrap();
    assert_eq!(line["state"], "dispatched");
    line
}

/// A dispatch of seed-esxi on a [`waiting_bus`] pulling in `units`, and a follower with this
/// deadline that has looked at it once: the bus, the machine, run's line, the follower.
fn following(units: &str, deadline_secs: &str) -> (PrivateBus, Machine, Value, Following) {
    let bus = waiting_bus(units);
    let machine = Machine::new();
    let dispatched = dispatch(&machine, &bus);
    let following = follow(&machine, &bus, deadline_secs);
    wait_for_calls(&bus, "ListJobs", 1);
    (bus, machine, dispatched, following)
}

/// A running `follow`: its result lines as they come, and what it told systemd.
struct Following {
    child: Child,
    lines: Receiver<String>,
    notify: UnixDatagram,
    _dir: tempfile::TempDir,
}

fn follow(machine: &Machine, bus: &PrivateBus, deadline_secs: &str) -> Following {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("notify");
    let notify = UnixDatagram::bind(&socket).unwrap();
    notify.set_nonblocking(true).unwrap();
    let mut child = dispatcher()
        .arg("follow")
        .arg("--state-dir")
        .arg(machine.state())
        .args(["--deadline", deadline_secs, "--bus-timeout", "5"])
        .env("DBUS_SYSTEM_BUS_ADDRESS", &bus.address)
        .env("NOTIFY_SOCKET", &socket)
        .env_remove("JOURNAL_STREAM")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (send, lines) = channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if send.send(line).is_err() {
                return;
            }
        }
    });
    Following { child, lines, notify, _dir: dir }
}

impl Following {
    /// The next result line, parsed.
    fn next_line(&self) -> Value {
        let line = self.lines.recv_timeout(PATIENCE).expect("a result line from the follower");
        let json = line.strip_prefix(PREFIX).unwrap_or_else(|| panic!("not a result line: {line}"));
        let line = serde_json::from_str(json).unwrap();
        common::schemas::assert_valid("result", &line);
        line
    }

    /// Whether no result line is there now.
    fn silent(&self) -> bool {
        self.lines.try_recv().is_err()
    }

    /// What the follower told systemd so far (`READY=1`, `STATUS=...`), one datagram each.
    fn told_systemd(&self) -> Vec<String> {
        let mut said = Vec::new();
        let mut buffer = [0u8; 4096];
        while let Ok(n) = self.notify.recv(&mut buffer) {
            said.push(String::from_utf8_lossy(&buffer[..n]).into_owned());
        }
        said
    }

    /// Whether READY=1 came by now.
    fn ready_now(&self) -> bool {
        self.told_systemd().iter().any(|said| said.lines().any(|l| l == "READY=1"))
    }

    /// Waits for READY=1 (it follows the line on stdout).
    fn wait_ready(&self) {
        let started = Instant::now();
        while !self.ready_now() {
            assert!(started.elapsed() < PATIENCE, "no READY=1 after the end");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM; its exit code, its stderr, and the result lines it printed since the last one
    /// taken.
    fn stop(mut self) -> (Option<i32>, String, Vec<Value>) {
        rustix::process::kill_process(rustix::process::Pid::from_child(&self.child), rustix::process::Signal::TERM)
            .unwrap();
        let started = Instant::now();
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            assert!(started.elapsed() < PATIENCE, "the follower did not end on SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut stderr = String::new();
        std::io::Read::read_to_string(&mut self.child.stderr.take().unwrap(), &mut stderr).unwrap();
        // The reader ends at the pipe's end, now that the follower has exited.
        let lines: Vec<Value> =
            self.lines.iter().filter_map(|l| serde_json::from_str(l.strip_prefix(PREFIX)?).ok()).collect();
        lines.iter().for_each(|line| common::schemas::assert_valid("result", line));
        (status.code(), stderr, lines)
    }
}

/// Waits until the mock has received `n` calls of `name`.
fn wait_for_calls(bus: &PrivateBus, name: &str, n: usize) {
    let started = Instant::now();
    while bus.count(name) < n {
        assert!(started.elapsed() < PATIENCE, "the follower never called {name} {n} time(s)");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The end line belongs to the dispatch: same recipe, job and target, and it proves the
/// status.json now there (its digest), which holds the same end.
fn assert_tells_the_dispatch(end: &Value, dispatched: &Value, machine: &Machine) {
    for key in ["recipe_sha256", "job", "target"] {
        assert_eq!(end[key], dispatched[key], "{key}");
    }
    let bytes = std::fs::read(machine.state().join("status.json")).unwrap();
    let digest: String = Sha256::digest(&bytes).iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(end["status_sha256"], digest.as_str(), "made from the status as written");
    let status = machine.status();
    common::schemas::assert_valid("status", &status);
    assert_eq!(status["state"], end["state"]);
    assert_eq!(status["end"]["units"], end["end"]["units"]);
    assert_eq!(status["end"]["job_result"], end["end"]["job_result"]);
}

/// SPEC §6d: the target's job done and none of its units failed is `succeeded`, told only
/// once the job has ended (not at the first look), then READY=1.
#[test]
fn a_task_whose_job_is_done_succeeded() {
    let (bus, machine, dispatched, following) = following("esxi-write.service", "3600");
    assert!(bus.count("Subscribe") >= 1, "subscribed before it looked");
    bus.control("Finish", "esxi-write.service", "done");
    // The target's job is still queued: not the end.
    wait_for_calls(&bus, "ListJobs", 2);
    assert!(following.silent(), "no end told while the target's job is queued");
    assert!(!following.ready_now());
    bus.control("Finish", TARGET, "done");
    let end = following.next_line();
    assert_eq!(end["state"], "succeeded");
    assert_eq!(end["exit_code"], 0);
    assert_eq!(end["end"]["job_result"], "done");
    assert_eq!(end["end"]["units"], serde_json::json!([]));
    assert_eq!(end["end"]["past_deadline"], false);
    assert_tells_the_dispatch(&end, &dispatched, &machine);
    following.wait_ready();
    let (code, stderr, _) = following.stop();
    assert_eq!(code, Some(0), "{stderr}");
    // A follower started again finds the end told and says ready at once.
    let again = run_follow_once(&machine, &bus);
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert!(!again.stdout.contains(PREFIX), "told once: {}", again.stdout);
    // A rerun of the same recipe starts nothing, and keeps the end with the dispatch.
    let end = machine.status()["end"].clone();
    let rerun = machine.dispatch(media(&example("seed-esxi")).path(), Some(&bus), &[]);
    assert_eq!(rerun.code, 0, "{}", rerun.stderr);
    assert_eq!((machine.status()["state"].clone(), machine.status()["end"].clone()), ("succeeded".into(), end));
    assert_eq!(bus.starts().len(), 1, "not started again");
}

/// `follow` that must exit at once: nothing to follow.
fn run_follow_once(machine: &Machine, bus: &PrivateBus) -> common::Run {
    common::run(
        dispatcher()
            .arg("follow")
            .arg("--state-dir")
            .arg(machine.state())
            .env("DBUS_SYSTEM_BUS_ADDRESS", &bus.address)
            .env_remove("NOTIFY_SOCKET"),
    )
}

/// SPEC §6d: a unit the target pulls in failed: `task_failed`, naming that unit (a unit name,
/// the image's), whatever the target's job says.
#[test]
fn a_failed_unit_is_task_failed_naming_it() {
    let (bus, machine, dispatched, following) = following("esxi-write.service,esxi-check.service", "3600");
    bus.control("Finish", "esxi-check.service", "failed");
    bus.control("Finish", "esxi-write.service", "done");
    bus.control("Finish", TARGET, "dependency");
    let end = following.next_line();
    assert_eq!(end["state"], "task_failed");
    assert_eq!(end["end"]["units"], serde_json::json!(["esxi-check.service"]));
    assert_eq!(end["end"]["job_result"], "dependency");
    assert_tells_the_dispatch(&end, &dispatched, &machine);
    following.wait_ready();
    let (code, stderr, _) = following.stop();
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.contains("task_failed") && stderr.contains("esxi-check.service"), "{stderr}");
}

/// SPEC §6d: past the deadline, `timed_out` naming what still runs; the task is left running,
/// READY=1 waits, and the later end is told too.
#[test]
fn past_the_deadline_timed_out_is_told_and_the_later_end_too() {
    let bus = waiting_bus("esxi-write.service,esxi-check.service");
    let machine = Machine::new();
    let dispatched = dispatch(&machine, &bus);
    bus.control("Finish", "esxi-check.service", "done");
    let following = follow(&machine, &bus, "1");
    let late = following.next_line();
    assert_eq!(late["state"], "timed_out");
    assert_eq!(late["end"]["units"], serde_json::json!(["esxi-write.service"]), "what still runs");
    assert_tells_the_dispatch(&late, &dispatched, &machine);
    assert!(machine.status()["end"]["timed_out_at"].is_string());
    assert!(!following.ready_now(), "no READY=1 before a real end");
    assert!(bus.calls().iter().all(|c| c["call"] != "StopUnit"), "the task is left running");
    bus.control("Finish", "esxi-write.service", "done");
    bus.control("Finish", TARGET, "done");
    let end = following.next_line();
    assert_eq!(end["state"], "succeeded");
    assert_eq!(end["end"]["past_deadline"], true);
    assert_tells_the_dispatch(&end, &dispatched, &machine);
    following.wait_ready();
    assert_eq!(following.stop().0, Some(0));
}

/// SPEC §6d: SIGTERM before the end, with a reboot queued: `interrupted` by a reboot, told
/// before the follower exits. Without a shutdown, the follower itself was stopped.
#[test]
fn a_sigterm_during_a_shutdown_tells_the_task_interrupted_by_it() {
    let (bus, machine, dispatched, following) = following("esxi-write.service", "3600");
    bus.control("Queue", "reboot.target", "start");
    let (code, stderr, lines) = following.stop();
    assert_eq!(code, Some(0), "{stderr}");
    let [end] = &lines[..] else { panic!("one line told before the exit: {lines:?}") };
    assert_eq!(end["state"], "interrupted");
    assert_eq!(end["end"]["shutdown"], "reboot");
    assert_tells_the_dispatch(end, &dispatched, &machine);
    let status = machine.status();
    assert_eq!(status["state"], "interrupted");
    assert_eq!(status["end"]["shutdown"], "reboot");
    assert_eq!(status["end"]["units"], serde_json::json!(["esxi-write.service"]));
    let told: Vec<&str> = stderr.lines().filter(|l| l.contains("interrupted")).collect();
    assert!(!told.is_empty() && told[0].contains("reboot under way"), "{stderr}");
}

#[test]
fn a_sigterm_without_a_shutdown_says_the_follower_was_stopped() {
    let (_bus, machine, _, following) = following("esxi-write.service", "3600");
    let (code, stderr, lines) = following.stop();
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["state"], "interrupted");
    let status = machine.status();
    assert_eq!(status["state"], "interrupted");
    assert_eq!(status["end"]["shutdown"], Value::Null);
    assert!(stderr.contains("the follower was stopped"), "{stderr}");
}

/// The race of a task whose last unit reboots the server itself (`SuccessAction=reboot`): the
/// shutdown cancels the target's start job before it is done. Told at once as `interrupted`
/// by the reboot, not as a failure.
#[test]
fn a_start_job_cancelled_by_a_reboot_is_interrupted_not_failed() {
    let (bus, machine, dispatched, following) = following("esxi-write.service", "3600");
    bus.control("Finish", "esxi-write.service", "done");
    // As `SuccessAction=reboot` does: reboot.target started in "replace-irreversibly" mode,
    // which cancels the start jobs still queued, in one transaction.
    bus.control("Shutdown", "reboot.target", "replace-irreversibly");
    let end = following.next_line();
    assert_eq!(end["state"], "interrupted");
    assert_eq!(end["end"]["shutdown"], "reboot");
    assert_eq!(end["end"]["job_result"], "canceled");
    assert_tells_the_dispatch(&end, &dispatched, &machine);
    assert_eq!(following.stop().0, Some(0));
}

/// The bus restarts while the follower follows: it connects again and subscribes again (the
/// mock sees a second Subscribe), and looks again: the job that ended while the bus was down,
/// whose JobRemoved nobody saw, is judged from the target's state.
#[test]
fn a_bus_restart_while_following_is_survived_and_a_missed_end_found() {
    let (mut bus, machine, dispatched, following) = following("esxi-write.service", "3600");
    bus.restart();
    wait_for_calls(&bus, "Subscribe", 2);
    assert!(following.silent());
    bus.restart_with(|state| {
        // The task ended meanwhile: no job left, the units active.
        state["jobs"] = serde_json::json!([]);
        for unit in [TARGET, "esxi-write.service"] {
            state["units"][unit]["active_state"] = "active".into();
        }
    });
    let end = following.next_line();
    assert_eq!(end["state"], "succeeded");
    assert_eq!(end["end"]["job_result"], Value::Null, "the job's signal was never seen");
    assert_tells_the_dispatch(&end, &dispatched, &machine);
    assert!(bus.count("Subscribe") >= 3, "subscribed again on each new bus");
    let (code, stderr, _) = following.stop();
    assert_eq!(code, Some(0));
    assert!(stderr.contains("the connection to the system bus broke"), "{stderr}");
}

/// Nothing dispatched (the run failed, or there is no run at all): the follower says ready
/// and exits at once, telling nothing.
#[test]
fn nothing_dispatched_ends_at_once() {
    let bus = PrivateBus::with_units(TARGET);
    let machine = Machine::new();
    let none = run_follow_once(&machine, &bus);
    assert_eq!(none.code, 0, "{}", none.stderr);
    assert!(none.stderr.contains("nothing to follow"), "{}", none.stderr);
    let out = machine.dispatch(media(&example("seed-invalid-linux")).path(), Some(&bus), &[]);
    assert_eq!(out.code, 65);
    let failed = run_follow_once(&machine, &bus);
    assert_eq!(failed.code, 0, "{}", failed.stderr);
    assert!(!failed.stdout.contains(PREFIX), "{}", failed.stdout);
    assert!(failed.stderr.contains("nothing to follow: the dispatcher's last run ended failed"), "{}", failed.stderr);
    assert_eq!(bus.count("Subscribe"), 0, "the bus is not even asked");
    assert_eq!(machine.status()["state"], "failed", "the status is left as it was");
}
