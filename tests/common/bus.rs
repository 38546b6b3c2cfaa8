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

    fn start(units: &str, extra: &[&str]) -> PrivateBus {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("calls.jsonl");
        let args: Vec<String> = ["--units", units].iter().chain(extra).map(|a| (*a).to_owned()).collect();
        let (mock, address) = spawn_mock(dir.path(), &log, &args);
        PrivateBus { mock, address, log, args, _dir: dir }
    }

    /// Stops the bus (and the mock on it) and starts a new one at the same address, as a
    /// `systemctl restart dbus` does; the call log goes on.
    pub fn restart(&mut self) {
        let _ = self.mock.kill();
        let _ = self.mock.wait();
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
