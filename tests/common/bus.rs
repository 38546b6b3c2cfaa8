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
        let mut mock = Command::new(mock_binary())
            .arg("--private-bus")
            .arg(dir.path())
            .arg("--log")
            .arg(&log)
            .args(["--units", units])
            .args(extra)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut ready = String::new();
        BufReader::new(mock.stdout.take().unwrap()).read_line(&mut ready).unwrap();
        let address = ready.trim().strip_prefix("ready ").expect("the mock systemd started its bus").to_owned();
        PrivateBus { mock, address, log, _dir: dir }
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

/// examples/mock-systemd, which `cargo test` builds beside the test binaries.
fn mock_binary() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().and_then(Path::parent).unwrap();
    let mock = profile_dir.join("examples/mock-systemd");
    assert!(
        mock.exists(),
        "{} is missing: `cargo test` builds it (or `cargo build --example mock-systemd`)",
        mock.display()
    );
    mock
}
