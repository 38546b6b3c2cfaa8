//! A private `dbus-daemon` with the mock `org.freedesktop.systemd1` (examples/mock-systemd.rs)
//! on it: the real bus protocol, a fake systemd.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

pub struct PrivateBus {
    daemon: Child,
    mock: Option<Child>,
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
        let socket = dir.path().join("bus");
        let config = dir.path().join("bus.conf");
        let template = std::fs::read_to_string(super::root().join("tests/fixtures/private-bus.conf.in")).unwrap();
        std::fs::write(&config, template.replace("@SOCKET@", socket.to_str().unwrap())).unwrap();
        let mut daemon = Command::new("dbus-daemon")
            .arg(format!("--config-file={}", config.display()))
            .args(["--nofork", "--nopidfile", "--print-address=1"])
            .stdout(Stdio::piped())
            // It warns that it may not raise its fd limit; nothing the tests need.
            .stderr(Stdio::null())
            .spawn()
            .expect("dbus-daemon (Debian package dbus) is installed; cargo xtask ci installs it");
        let mut line = String::new();
        BufReader::new(daemon.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let address = line.trim().to_owned();
        assert!(address.starts_with("unix:"), "dbus-daemon printed {address:?}");
        let log = dir.path().join("calls.jsonl");
        let mut bus = PrivateBus { daemon, mock: None, address, log, _dir: dir };
        let mut mock = Command::new(mock_binary())
            .args(["--address", &bus.address, "--log"])
            .arg(&bus.log)
            .args(["--units", units])
            .args(extra)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut ready = String::new();
        BufReader::new(mock.stdout.take().unwrap()).read_line(&mut ready).unwrap();
        assert_eq!(ready.trim(), "ready", "the mock systemd did not start");
        bus.mock = Some(mock);
        bus
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
        if let Some(mock) = &mut self.mock {
            let _ = mock.kill();
            let _ = mock.wait();
        }
        let _ = self.daemon.kill();
        let _ = self.daemon.wait();
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
