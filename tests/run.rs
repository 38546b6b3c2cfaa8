//! `run` through the real binary, against directory media (this host's kernel has no ISO
//! 9660), a squashfs image on a real loop device, a real dbus-daemon and the mock systemd.
//! Each test names the SPEC §6 behaviour it proves.

mod common;

use std::path::Path;
use std::process::Command;

use common::bus::{PrivateBus, SEED_TARGETS};
use common::machine::{detail_codes, detail_paths, example, media, Disk, Machine};
use common::{dispatcher, run, Run};
use serde_json::json;

/// SPEC §6: each seed example dispatches its target with StartUnit(target, "replace").
#[test]
fn every_seed_example_dispatches_its_target() {
    let bus = PrivateBus::with_units(SEED_TARGETS);
    let disk = Disk::new();
    for name in ["seed-linux", "seed-windows", "seed-esxi", "seed-maintenance"] {
        let mut recipe = example(name);
        if recipe.get("target_disk").is_some() {
            recipe["target_disk"] = disk.path().into();
        }
        let media = media(&recipe);
        let machine = Machine::new();
        let out = machine.dispatch(media.path(), Some(&bus), &[]);
        assert_eq!(out.code, 0, "{name}: {}", out.stderr);
        let status = machine.status();
        let target = recipe["task_target"].as_str().unwrap();
        assert_eq!(status["state"], "dispatched", "{name}");
        assert_eq!(status["target"], target);
        assert!(status["job"].as_str().unwrap().starts_with("/org/freedesktop/systemd1/job/"), "{status}");
        assert_eq!(status["schema_id"], "https://shoal.dev/provisioner/recipe.schema.json");
        assert!(machine.output().join("recipe.env").exists());
        assert!(!machine.state().join("media").exists(), "the mount point is gone");
    }
    let starts = bus.starts();
    let targets: Vec<&str> = starts.iter().map(|(unit, _)| unit.as_str()).collect();
    assert_eq!(
        targets,
        ["install-linux.target", "install-windows.target", "install-esxi.target", "supermicro-update.target"]
    );
    assert!(starts.iter().all(|(_, mode)| mode == "replace"));
    // The unit was checked before it was started.
    assert!(bus.calls().iter().any(|c| c["call"] == "LoadUnit" && c["unit"] == "install-esxi.target"));
}

/// SPEC §6.5: the same recipe again does nothing (exit 0); a different one is refused (73)
/// unless --force.
#[test]
fn a_rerun_in_the_same_boot_is_idempotent() {
    let bus = PrivateBus::with_units(SEED_TARGETS);
    let machine = Machine::new();
    let first = media(&example("seed-esxi"));
    assert_eq!(machine.dispatch(first.path(), Some(&bus), &[]).code, 0);
    let job = machine.status()["job"].clone();

    let again = machine.dispatch(first.path(), Some(&bus), &[]);
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert!(again.stderr.contains("already dispatched"), "{}", again.stderr);
    assert_eq!(machine.status()["job"], job);
    assert_eq!(bus.starts().len(), 1, "not started again");

    let other = media(&example("seed-maintenance"));
    let refused = machine.dispatch(other.path(), Some(&bus), &[]);
    assert_eq!(refused.code, 73, "{}", refused.stderr);
    assert_eq!(machine.status()["state"], "failed");
    assert!(std::fs::read_to_string(machine.output().join("recipe.env")).unwrap().contains("install-esxi.target"));
    assert_eq!(bus.starts().len(), 1);

    let forced = machine.dispatch(other.path(), Some(&bus), &["--force"]);
    assert_eq!(forced.code, 0, "{}", forced.stderr);
    assert!(std::fs::read_to_string(machine.output().join("recipe.env")).unwrap().contains("supermicro-update.target"));
    assert_eq!(bus.starts().len(), 2);
    // And the original recipe is now "different" in turn.
    assert_eq!(machine.dispatch(first.path(), Some(&bus), &[]).code, 73);
}

#[test]
fn a_unit_systemd_cannot_load_is_69() {
    let bus = PrivateBus::with_units(SEED_TARGETS);
    let machine = Machine::new();
    let media = media(&json!({"task_target": "install-nothing.target"}));
    let out = machine.dispatch(media.path(), Some(&bus), &[]);
    assert_eq!(out.code, 69, "{}", out.stderr);
    let status = machine.status();
    assert_eq!(status["phase"], "validate");
    assert_eq!(detail_codes(&status), ["unitNotFound"]);
    assert!(!machine.output().exists(), "nothing written");
    assert!(bus.starts().is_empty());
}

#[test]
fn a_start_refused_by_systemd_is_69() {
    let bus = PrivateBus::refusing_start(SEED_TARGETS);
    let machine = Machine::new();
    let media = media(&example("seed-esxi"));
    let out = machine.dispatch(media.path(), Some(&bus), &[]);
    assert_eq!(out.code, 69, "{}", out.stderr);
    let status = machine.status();
    assert_eq!(status["phase"], "systemd");
    assert!(status["message"].as_str().unwrap().contains("org.freedesktop.systemd1.UnitMasked"), "{status}");
}

#[test]
fn a_special_target_is_65() {
    let bus = PrivateBus::with_units("reboot.target");
    let machine = Machine::new();
    let media = media(&json!({"task_target": "reboot.target"}));
    let out = machine.dispatch(media.path(), Some(&bus), &[]);
    assert_eq!(out.code, 65);
    assert_eq!(detail_codes(&machine.status()), ["forbiddenTarget"]);
    assert!(bus.calls().is_empty(), "a forbidden target is never even loaded");
}

#[test]
fn an_invalid_recipe_is_65_and_the_status_names_every_path() {
    let bus = PrivateBus::with_units(SEED_TARGETS);
    let machine = Machine::new();
    let media = media(&example("seed-invalid-linux"));
    let out = machine.dispatch(media.path(), Some(&bus), &[]);
    assert_eq!(out.code, 65);
    let status = machine.status();
    assert_eq!(status["state"], "failed");
    assert_eq!(status["phase"], "validate");
    assert_eq!(detail_paths(&status), ["/oci_url", "/partition_layout", "/target_disk"]);
    assert!(!machine.output().exists());
    // `report` (provision-failed.service) names each path.
    let report = run(dispatcher().args(["report", "--status"]).arg(machine.state().join("status.json")));
    assert_eq!(report.code, 0);
    for path in ["/oci_url", "/partition_layout", "/target_disk"] {
        assert!(report.stdout.contains(path), "{}", report.stdout);
    }
    assert!(report.stdout.contains("PROVISIONING FAILED") && report.stdout.contains("next:"));
}

#[test]
fn missing_media_after_the_wait_is_66() {
    let machine = Machine::new();
    let started = std::time::Instant::now();
    let out = machine.dispatch(Path::new("/nonexistent/task.iso"), None, &[]);
    assert_eq!(out.code, 66);
    assert!(started.elapsed() >= std::time::Duration::from_secs(1), "it waited");
    let status = machine.status();
    assert_eq!(status["phase"], "media");
    assert!(status["message"].as_str().unwrap().contains("/nonexistent/task.iso"), "names what it looked at");
}

#[test]
fn media_without_recipe_is_66_and_without_schema_is_78() {
    let machine = Machine::new();
    let media = media(&example("seed-esxi"));
    std::fs::remove_file(media.path().join("recipe.json")).unwrap();
    assert_eq!(machine.dispatch(media.path(), None, &[]).code, 66);
    assert_eq!(machine.status()["phase"], "recipe");
    let media = self::media(&example("seed-esxi"));
    std::fs::remove_file(media.path().join("recipe.schema.json")).unwrap();
    assert_eq!(machine.dispatch(media.path(), None, &[]).code, 78);
    assert_eq!(machine.status()["phase"], "schema");
}

#[test]
fn a_schema_with_an_unknown_id_is_78_unless_the_image_opts_in() {
    let bus = PrivateBus::with_units(SEED_TARGETS);
    let machine = Machine::new();
    let media = media(&example("seed-esxi"));
    let schema = std::fs::read_to_string(media.path().join("recipe.schema.json")).unwrap();
    std::fs::write(media.path().join("recipe.schema.json"), schema.replace("shoal.dev", "example.com")).unwrap();
    assert_eq!(machine.dispatch(media.path(), Some(&bus), &[]).code, 78);
    assert!(machine.status()["message"].as_str().unwrap().contains("$id"));
    let out = machine.dispatch(media.path(), Some(&bus), &["--accept-unknown-schema-id"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(machine.status()["schema_id"], "https://example.com/provisioner/recipe.schema.json");
}

/// Issue 39, item 5: a v1 media's recipe with a field of v2 said only "not a property the
/// schema allows". It says which version has it, and that the media must carry that version.
#[test]
fn a_field_of_a_later_version_says_the_media_must_carry_it() {
    let bus = PrivateBus::with_units(SEED_TARGETS);
    let mut recipe = example("seed-linux");
    recipe["target_disk_hints"] = json!({"size_min": "1M"});
    let media = media(&recipe);
    let hints_error = |machine: &Machine| {
        let status = machine.status();
        let details = status["details"].as_array().unwrap().clone();
        details.into_iter().find(|d| d["path"] == "/target_disk_hints" && d["code"] == "additionalProperties")
    };
    let machine = Machine::new();
    assert_eq!(machine.dispatch(media.path(), Some(&bus), &[]).code, 65);
    let detail = hints_error(&machine).expect("an error at /target_disk_hints");
    assert!(
        detail["message"].as_str().unwrap().ends_with(
            "; schema v2 has it: the task media must carry schema v2 as recipe.schema.json ($id https://shoal.dev/provisioner/v2/recipe.schema.json)"
        ),
        "{detail}"
    );
    std::fs::copy(common::root().join("iso/recipe.schema.v2.json"), media.path().join("recipe.schema.json")).unwrap();
    let machine = Machine::new();
    machine.dispatch(media.path(), Some(&bus), &[]);
    assert_eq!(hints_error(&machine), None, "v2 has it");
    assert!(bus.starts().is_empty());
}

#[test]
fn a_symlinked_recipe_is_refused() {
    let machine = Machine::new();
    let outside = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(outside.path(), serde_json::to_vec(&example("seed-esxi")).unwrap()).unwrap();
    let media = media(&example("seed-esxi"));
    std::fs::remove_file(media.path().join("recipe.json")).unwrap();
    std::os::unix::fs::symlink(outside.path(), media.path().join("recipe.json")).unwrap();
    let out = machine.dispatch(media.path(), None, &[]);
    assert_eq!(out.code, 66, "{}", out.stderr);
    assert!(machine.status()["message"].as_str().unwrap().contains("symbolic link"));
}

#[test]
fn the_bus_down_is_69() {
    let machine = Machine::new();
    let media = media(&example("seed-esxi"));
    let out = machine.dispatch(media.path(), None, &[]);
    assert_eq!(out.code, 69, "{}", out.stderr);
    let status = machine.status();
    assert_eq!(detail_codes(&status), ["systemdUnavailable"]);
    // Issue 33: no bus at all is named as such, not as a silence.
    let said = status["details"][0]["message"].as_str().unwrap();
    assert!(said.contains("there is no system bus: /nonexistent/bus does not exist"), "{said}");
    assert!(!machine.output().exists());
}

/// Host checks: the disk under / is refused, a disk with a mounted filesystem is refused, a
/// character device is refused.
#[test]
fn target_disks_the_host_needs_are_refused() {
    let bus = PrivateBus::with_units(SEED_TARGETS);
    let machine = Machine::new();
    // The device itself, without the `[/dir]` findmnt adds when / is a bind mount (a chroot).
    let out = Command::new("findmnt").args(["-no", "SOURCE", "--nofsroot", "/"]).output().unwrap();
    let system = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    let link = format!("/dev/mapper/provision-test-system-{}", std::process::id());
    std::fs::create_dir_all("/dev/mapper").unwrap();
    std::os::unix::fs::symlink(&system, &link).unwrap();
    let mut recipe = example("seed-linux");
    recipe["target_disk"] = link.clone().into();
    let result = machine.dispatch(media(&recipe).path(), Some(&bus), &[]);
    std::fs::remove_file(&link).unwrap();
    assert_eq!(result.code, 65, "{}", result.stderr);
    assert_eq!(detail_codes(&machine.status()), ["systemDisk"]);

    let disk = Disk::new();
    let mounted = tempfile::tempdir().unwrap();
    assert!(Command::new("mkfs.ext4").args(["-q", "-F", &disk.loop_device]).status().unwrap().success());
    assert!(Command::new("mount").arg(&disk.loop_device).arg(mounted.path()).status().unwrap().success());
    recipe["target_disk"] = disk.path().into();
    let result = machine.dispatch(media(&recipe).path(), Some(&bus), &[]);
    let _ = Command::new("umount").arg(mounted.path()).status();
    assert_eq!(result.code, 65, "{}", result.stderr);
    assert_eq!(detail_codes(&machine.status()), ["diskInUse"]);

    recipe["target_disk"] = "/dev/mapper/control".into();
    if Path::new("/dev/mapper/control").exists() {
        assert_eq!(machine.dispatch(media(&recipe).path(), Some(&bus), &[]).code, 65);
        assert_eq!(detail_codes(&machine.status()), ["notBlockDevice"]);
    }
    assert!(bus.starts().is_empty());
}

/// The loop-mount path on this host (no ISO 9660 here: squashfs stands in, the code is the
/// same): the image is attached read-only, mounted, read, unmounted and detached.
#[test]
fn an_image_file_is_loop_mounted_and_everything_is_released() {
    assert!(rustix::process::geteuid().is_root(), "this test mounts: run it as root (CI does)");
    let bus = PrivateBus::with_units(SEED_TARGETS);
    let machine = Machine::new();
    let tree = media(&example("seed-esxi"));
    let image = tempfile::tempdir().unwrap().keep().join("task.sqfs");
    let made = Command::new("mksquashfs")
        .arg(tree.path())
        .arg(&image)
        .args(["-quiet", "-no-progress", "-noappend"])
        .status()
        .unwrap();
    assert!(made.success(), "mksquashfs (squashfs-tools; cargo xtask ci installs it)");
    let loops_before = attached_loops(&image);
    let out = machine.dispatch(&image, Some(&bus), &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(machine.status()["state"], "dispatched");
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mounts.contains(machine.state().to_str().unwrap()), "the ISO is unmounted");
    assert_eq!(attached_loops(&image), loops_before, "the loop device is detached");
    assert!(!machine.state().join("media").exists());
    std::fs::remove_dir_all(image.parent().unwrap()).unwrap();
}

/// Loop devices backed by `image`.
fn attached_loops(image: &Path) -> Vec<String> {
    let out =
        Command::new("losetup").args(["--noheadings", "--output", "NAME", "--associated"]).arg(image).output().unwrap();
    String::from_utf8(out.stdout).unwrap().lines().map(str::to_owned).collect()
}

/// No recipe value reaches stdout, stderr, status.json or the journal's fields, on any path
/// of `run`. The journal is real protocol: the dispatcher runs in a private mount namespace
/// where a listener owns /run/systemd/journal/socket and records every datagram.
#[test]
fn recipe_values_never_reach_logs_status_or_the_journal() {
    assert!(rustix::process::geteuid().is_root(), "this test uses a mount namespace: run it as root (CI does)");
    let bus = PrivateBus::with_units(SEED_TARGETS);
    let disk = Disk::new();
    let marked = |task_target: &str, disk: &str| {
        json!({"task_target": task_target, "target_disk": disk, "oci_url": "MARK3", "firmware_url": "MARK4 not a uri",
               "recipe_version": "MARK5", "user_data": "MARK6", "unattend_xml": "MARK7", "ks_cfg": "MARK8",
               "partition_layout": [{"size": "MARK9", "type_guid": "MARK10", "format": "MARK11", "label": "MARK12"}],
               "metadata": {"owner": "MARK13"}, "unexpected": "MARK14"})
    };
    let mut valid = example("seed-linux");
    valid["user_data"] = "MARK6 secret".into();
    valid["recipe_version"] = "MARK5".into();
    valid["metadata"]["owner"] = "MARK13".into();
    valid["target_disk"] = disk.path().into();
    let cases = [
        ("schema errors", marked("MARK1", "MARK2")),
        ("host check", marked("install-linux.target", "/dev/mapper/MARK2")),
        ("special target", json!({"task_target": "reboot.target", "user_data": "MARK6"})),
        (
            "unknown unit",
            json!({"task_target": "install-nothing.target", "user_data": "MARK6", "recipe_version": "MARK5"}),
        ),
        ("dispatched", valid),
    ];
    for (name, recipe) in cases {
        let media = media(&recipe);
        let machine = Machine::new();
        let (out, journal) = with_journal(|cmd| {
            cmd.arg("run").arg("--media").arg(media.path()).arg("--state-dir").arg(machine.state());
            cmd.arg("--output").arg(machine.output()).args(["--wait", "1", "--bus-timeout", "3"]);
            cmd.env("DBUS_SYSTEM_BUS_ADDRESS", &bus.address);
        });
        let status = std::fs::read_to_string(machine.state().join("status.json")).unwrap();
        for (what, text) in
            [("stdout", &out.stdout), ("stderr", &out.stderr), ("status.json", &status), ("journal", &journal)]
        {
            assert!(!text.contains("MARK"), "{name}: a recipe value reached {what}:\n{text}");
        }
        assert!(journal.contains("SYSLOG_IDENTIFIER=provision-dispatcher"), "{name}: {journal}");
        assert!(journal.contains("PHASE="), "{name}: {journal}");
        // Only the dispatcher's own events: not zbus's handshake and message dumps.
        let foreign: Vec<&str> = journal
            .lines()
            .filter(|l| l.starts_with("TARGET=") && !l.starts_with("TARGET=provision_dispatcher"))
            .collect();
        assert!(foreign.is_empty(), "{name}: {foreign:?}");
        let id = if name == "dispatched" {
            "MESSAGE_ID=6f5d0d0e6c9e4a8b9b1f3c2a7d4e8f01"
        } else {
            "MESSAGE_ID=b3a1c9e2f4d64b7a8e5c0d1f2a3b4c5d"
        };
        assert!(journal.contains(id), "{name}: {journal}");
        if name != "dispatched" {
            assert!(journal.contains("CODE=") && journal.contains("PATH=/"), "{name}: {journal}");
        }
    }
}

/// Runs the dispatcher in a private mount namespace with a journal listener; returns its
/// output and every journal field it sent, one `KEY=value` a line.
fn with_journal(configure: impl FnOnce(&mut Command)) -> (Run, String) {
    let dir = tempfile::tempdir().unwrap();
    let capture = dir.path().join("journal.txt");
    let mut inner = Command::new(env!("CARGO_BIN_EXE_provision-dispatcher"));
    configure(&mut inner);
    let argv: Vec<String> =
        std::iter::once(inner.get_program()).chain(inner.get_args()).map(|a| a.to_str().unwrap().to_owned()).collect();
    // Python holds the socket and runs the dispatcher, then decodes the native protocol
    // (KEY=value lines, or KEY\n + 64-bit little-endian length + value for binary fields).
    let listener = r#"
import socket, struct, subprocess, sys, threading
sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
sock.bind("/run/systemd/journal/socket")
sock.settimeout(0.2)
datagrams, done = [], threading.Event()
def drain():
    # Read while the dispatcher runs: a full queue would block its sends, as with journald.
    while True:
        try:
            datagrams.append(sock.recv(1 << 20))
        except socket.timeout:
            if done.is_set():
                return
reader = threading.Thread(target=drain)
reader.start()
proc = subprocess.run(sys.argv[2:], capture_output=True)
done.set()
reader.join()
fields = []
for data in datagrams:
    while data:
        nl = data.index(b"\n")
        line = data[:nl]
        if b"=" in line:
            fields.append(line); data = data[nl + 1:]
        else:
            n = struct.unpack("<Q", data[nl + 1:nl + 9])[0]
            fields.append(line + b"=" + data[nl + 9:nl + 9 + n]); data = data[nl + 10 + n:]
open(sys.argv[1], "wb").write(b"\n".join(fields))
sys.stdout.buffer.write(proc.stdout); sys.stderr.buffer.write(proc.stderr)
sys.exit(proc.returncode)
"#;
    let script =
        "mkdir -p /run/systemd/journal && mount -t tmpfs tmpfs /run/systemd/journal && exec python3 -c \"$0\" \"$@\"";
    let mut cmd = Command::new("unshare");
    cmd.args(["--mount", "--propagation", "private", "sh", "-c", script, listener]).arg(&capture).args(&argv);
    for (key, value) in inner.get_envs() {
        match value {
            Some(value) => cmd.env(key, value),
            None => cmd.env_remove(key),
        };
    }
    cmd.env_remove("NOTIFY_SOCKET").env_remove("JOURNAL_STREAM");
    let out = run(&mut cmd);
    let journal = std::fs::read_to_string(&capture).unwrap_or_else(|_| panic!("no journal captured: {}", out.stderr));
    (out, journal)
}
