//! A private `dbus-daemon` with the mock `org.freedesktop.systemd1` on it: the real bus
//! protocol, a fake systemd. The rig is examples/mock-systemd.rs itself (`--private-bus`),
//! which `cargo xtask bench` uses too.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

pub struct PrivateBus {
    mock: Child,
    pub address: String,
    log: PathBuf,
    args: Vec<String>,
    _dir: tempfile::TempDir,
}

/// The four seed targets, as the test image has them.
pub const SEED_TARGETS: &str =
    "install-linux.target,install-windows.target,install-esxi.target,supermicro-update.target";

impl PrivateBus {
    /// A bus with the mock serving `units`.
    pub fn with_units(units: &str) -> PrivateBus {
        PrivateBus::start(units, &[])
    }

    /// A bus whose mock refuses every StartUnit.
    pub fn refusing_start(units: &str) -> PrivateBus {
        PrivateBus::start(units, &["--refuse-start"])
    }

    /// A bus with the mock serving `units` and `extra` arguments (`--pulls`, `--jobs-wait`:
    /// examples/mock-systemd.rs).
    pub fn start(units: &str, extra: &[&str]) -> PrivateBus {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("calls.jsonl");
        let state = dir.path().join("systemd-state.json").to_str().unwrap().to_owned();
        let args: Vec<String> =
            ["--units", units, "--state", &state].iter().chain(extra).map(|a| (*a).to_owned()).collect();
        let (mock, address) = spawn_mock(dir.path(), &log, &args);
        PrivateBus { mock, address, log, args, _dir: dir }
    }

    /// Stops the bus (and the mock on it) and starts a new one at the same address, as a
    /// `systemctl restart dbus` does; the call log goes on, and systemd's state (the mock's
    /// state file) with it.
    pub fn restart(&mut self) {
        self.restart_with(|_| {});
    }

    /// [`PrivateBus::restart`], with systemd's state changed while the bus is down (`change`
    /// gets the mock's state file as JSON): what happened meanwhile, whose signals nobody saw.
    pub fn restart_with(&mut self, change: impl FnOnce(&mut serde_json::Value)) {
        let _ = self.mock.kill();
        let _ = self.mock.wait();
        let state_file = self._dir.path().join("systemd-state.json");
        if let Ok(bytes) = std::fs::read(&state_file) {
            let mut state: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
            change(&mut state);
            std::fs::write(&state_file, serde_json::to_vec(&state).unwrap()).unwrap();
        }
        let _ = std::fs::remove_file(self._dir.path().join("bus"));
        let (mock, address) = spawn_mock(self._dir.path(), &self.log, &self.args);
        self.mock = mock;
        // The same socket; only the server's guid, which clients need not check, is new.
        let socket = |address: &str| address.split(',').next().unwrap_or_default().to_owned();
        assert_eq!(socket(&address), socket(&self.address), "the restarted bus listens where the first did");
    }

    /// The calls the mock received, in order.
    pub fn calls(&self) -> Vec<serde_json::Value> {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    }

    /// How many calls of `name` the mock received.
    pub fn count(&self, name: &str) -> usize {
        self.calls().iter().filter(|c| c["call"] == name).count()
    }

    /// Asks the mock to end `unit`'s job with `result` (`Finish`; systemd's job results:
    /// `done`, `failed`, `dependency`, `canceled`, ...), to queue a job that never ends (`Queue`,
    /// `reboot.target`, `start`), or to start a shutdown as systemd does (`Shutdown`,
    /// `reboot.target`, `replace-irreversibly`): the mock's own interface, over the bus.
    pub fn control(&self, method: &str, unit: &str, word: &str) {
        let connection = zbus::blocking::connection::Builder::address(self.address.as_str()).unwrap().build().unwrap();
        connection
            .call_method(
                Some("org.freedesktop.systemd1"),
                "/mock",
                Some("dev.shoal.MockSystemd"),
                method,
                &(unit, word),
            )
            .unwrap();
    }

    pub fn starts(&self) -> Vec<(String, String)> {
        self.calls()
            .iter()
            .filter(|c| c["call"] == "StartUnit")
            .map(|c| (c["unit"].as_str().unwrap().to_owned(), c["mode"].as_str().unwrap().to_owned()))
            .collect()
    }
}

impl Drop for PrivateBus {
    fn drop(&mut self) {
        // Its dbus-daemon dies with it.
        let _ = self.mock.kill();
        let _ = self.mock.wait();
    }
}

/// Starts the mock with its own bus in `dir`; returns it and the bus's address.
fn spawn_mock(dir: &Path, log: &Path, args: &[String]) -> (Child, String) {
    let mut mock = Command::new(mock_binary())
        .arg("--private-bus")
        .arg(dir)
        .arg("--log")
        .arg(log)
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut ready = String::new();
    BufReader::new(mock.stdout.take().unwrap()).read_line(&mut ready).unwrap();
    let address = ready.trim().strip_prefix("ready ").expect("the mock systemd started its bus").to_owned();
    (mock, address)
}

/// examples/mock-systemd, which `cargo test` builds beside the test binaries.
fn mock_binary() -> PathBuf {
    super::example_binary("mock-systemd")
}
