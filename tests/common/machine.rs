//! One test machine: task media as directories, a /run with the state and output
//! directories, spare block devices and tmpfs mounts (the latter two need root, as in CI).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use super::bus::PrivateBus;
use super::{dispatcher, root, run, Run};

/// A task medium as a directory: the recipe and the canonical schema.
pub fn media(recipe: &Value) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("recipe.json"), serde_json::to_vec_pretty(recipe).unwrap()).unwrap();
    std::fs::copy(root().join("iso/recipe.schema.json"), dir.path().join("recipe.schema.json")).unwrap();
    dir
}

pub fn example(name: &str) -> Value {
    serde_json::from_slice(&std::fs::read(root().join(format!("iso/examples/{name}.json"))).unwrap()).unwrap()
}

/// One machine's /run: the state directory and the output directory.
pub struct Machine {
    run: tempfile::TempDir,
}

impl Machine {
    pub fn new() -> Machine {
        Machine { run: tempfile::tempdir().unwrap() }
    }

    pub fn state(&self) -> PathBuf {
        self.run.path().join("provision-dispatcher")
    }

    pub fn output(&self) -> PathBuf {
        self.run.path().join("provision")
    }

    pub fn status(&self) -> Value {
        serde_json::from_slice(&std::fs::read(self.state().join("status.json")).unwrap()).unwrap()
    }

    pub fn dispatch(&self, media: &Path, bus: Option<&PrivateBus>, extra: &[&str]) -> Run {
        let address = bus.map_or("unix:path=/nonexistent/bus", |bus| bus.address.as_str());
        let mut cmd = run_command(media, &self.state(), &self.output(), address);
        cmd.args(["--wait", "1", "--bus-timeout", "3"]).args(extra);
        run(&mut cmd)
    }
}

/// `run` on `media` with these state and output directories and this system bus.
pub fn run_command(media: &Path, state: &Path, output: &Path, bus_address: &str) -> Command {
    let mut cmd = dispatcher();
    cmd.arg("run").arg("--media").arg(media).arg("--state-dir").arg(state).arg("--output").arg(output);
    cmd.env("DBUS_SYSTEM_BUS_ADDRESS", bus_address).env_remove("NOTIFY_SOCKET").env_remove("JOURNAL_STREAM");
    cmd
}

pub fn detail_paths(status: &Value) -> Vec<String> {
    let mut paths: Vec<String> =
        status["details"].as_array().unwrap().iter().map(|d| d["path"].as_str().unwrap().to_owned()).collect();
    paths.sort();
    paths
}

pub fn detail_codes(status: &Value) -> Vec<String> {
    status["details"].as_array().unwrap().iter().map(|d| d["code"].as_str().unwrap().to_owned()).collect()
}

/// A free block device for `target_disk`: a loop device over a sparse file, named through a
/// `/dev/mapper/` symlink because the schema's pattern does not admit `/dev/loopN`.
pub struct Disk {
    pub loop_device: String,
    link: PathBuf,
    _backing: tempfile::NamedTempFile,
}

impl Disk {
    pub fn new() -> Disk {
        assert!(rustix::process::geteuid().is_root(), "this test attaches a loop device: run it as root (CI does)");
        let backing = tempfile::NamedTempFile::new().unwrap();
        backing.as_file().set_len(64 << 20).unwrap();
        let out = Command::new("losetup").args(["--find", "--show"]).arg(backing.path()).output().unwrap();
        assert!(out.status.success(), "losetup: {}", String::from_utf8_lossy(&out.stderr));
        let loop_device = String::from_utf8(out.stdout).unwrap().trim().to_owned();
        std::fs::create_dir_all("/dev/mapper").unwrap();
        let link = PathBuf::from(format!("/dev/mapper/provision-test-{}", loop_device.trim_start_matches("/dev/")));
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&loop_device, &link).unwrap();
        Disk { loop_device, link, _backing: backing }
    }

    pub fn path(&self) -> &str {
        self.link.to_str().unwrap()
    }
}

impl Drop for Disk {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.link);
        let _ = Command::new("losetup").arg("-d").arg(&self.loop_device).status();
    }
}

/// A tmpfs mounted for one test, unmounted when dropped.
pub struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    pub fn mount(options: &str) -> Tmpfs {
        assert!(rustix::process::geteuid().is_root(), "this test mounts a tmpfs: run it as root (CI does)");
        let dir = tempfile::tempdir().unwrap();
        let status =
            Command::new("mount").args(["-t", "tmpfs", "-o", options, "tmpfs"]).arg(dir.path()).status().unwrap();
        assert!(status.success(), "mount tmpfs -o {options}");
        Tmpfs { dir }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}
