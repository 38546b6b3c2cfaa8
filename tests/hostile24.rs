//! Regressions of the third hostile-world attack (issue 24): shared directories, files that are
//! not what they seem, leftovers. Each test names the finding it guards; the other user of
//! the attacks is `nobody`, through setpriv (the tests run as root, as CI does).

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::bus::{PrivateBus, SEED_TARGETS};
use common::machine::{example, media, run_command, Machine};
use common::{entries, run};

/// A directory tree the attacker (`nobody`) can reach: `shared` has `mode`, `victim` holds a
/// root-only output set of the dispatcher.
struct Shared {
    dir: tempfile::TempDir,
}

impl Shared {
    fn new(mode: u32) -> Shared {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let shared = dir.path().join("shared");
        std::fs::create_dir(&shared).unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(mode)).unwrap();
        let out = render(&example("seed-esxi"), &dir.path().join("victim"));
        assert_eq!(out.code, 0, "{}", out.stderr);
        Shared { dir }
    }

    fn shared(&self) -> PathBuf {
        self.dir.path().join("shared")
    }

    fn victim(&self) -> PathBuf {
        self.dir.path().join("victim")
    }

    fn assert_victim_intact(&self) {
        assert_eq!(entries(&self.victim()), [".provision-dispatcher", "ks.cfg", "recipe.env", "recipe.json"]);
    }
}

fn render(recipe: &serde_json::Value, output: &Path) -> common::Run {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), serde_json::to_vec(recipe).unwrap()).unwrap();
    run(common::dispatcher().arg("render").arg(file.path()).arg("--output").arg(output))
}

/// Runs `script` with `sh -c` as the user nobody.
fn as_nobody(script: &str) {
    let status = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "sh", "-c", script])
        .status()
        .unwrap();
    assert!(status.success(), "as nobody: {script}");
}

/// Finding 3 (a): in a directory others can write, another user planted
/// `.out.staging-N` as a symlink to another output set, and `render --output` deleted that
/// set's files while cleaning "stale" stagings. Now a parent that others can write (sticky
/// or not) is refused before anything in it is touched.
#[test]
fn a_planted_staging_symlink_in_a_shared_parent_deletes_nothing() {
    for mode in [0o777, 0o1777] {
        let shared = Shared::new(mode);
        as_nobody(&format!("ln -s {} {}/.out.staging-1", shared.victim().display(), shared.shared().display()));
        let out = render(&example("seed-maintenance"), &shared.shared().join("out"));
        assert_eq!(out.code, 73, "{mode:o}: {}", out.stderr);
        assert!(out.stderr.contains("can be written by other users"), "{}", out.stderr);
        shared.assert_victim_intact();
        assert_eq!(entries(&shared.shared()), [".out.staging-1"], "nothing written in the shared directory");
    }
}

/// Finding 3 (b): a marked directory swapped for a symlink to a root-only directory. The swap
/// races the dispatcher (it worked within a few runs); whatever the timing, a shared parent
/// is now refused, for `run` as for `render`, and nothing is started.
#[test]
fn a_marked_directory_swapped_for_a_symlink_is_never_followed() {
    let bus = PrivateBus::with_units(SEED_TARGETS);
    let shared = Shared::new(0o777);
    let output = shared.shared().join("out");
    as_nobody(&format!(
        "mkdir {o}.staging-7 && printf 'ks.cfg\\n' > {o}.staging-7/.provision-dispatcher && mv {o}.staging-7 {s}/.hidden && ln -s {v} {s}/.out.staging-7 && ln -s {v} {o}",
        o = shared.shared().join(".out").display(),
        s = shared.shared().display(),
        v = shared.victim().display(),
    ));
    let machine = Machine::new();
    let media = media(&example("seed-maintenance"));
    let out = run(&mut run_command(media.path(), &machine.state(), &output, &bus.address));
    assert_eq!(out.code, 73, "{}", out.stderr);
    let status = machine.status();
    assert_eq!((status["failure"].as_str(), status["phase"].as_str()), (Some("outputs_unwritable"), Some("outputs")));
    assert!(status["message"].as_str().unwrap().contains("can be written by other users"), "{status}");
    shared.assert_victim_intact();
    assert!(bus.starts().is_empty(), "nothing was started");
}

/// Finding 3 (c): while `render` wrote its staging directory, another user renamed it and put
/// a symlink to a root-only directory in its place; root wrote `ks.cfg` (recipe text) there
/// and chmodded it. The fail point holds the dispatcher between two files, where the swap
/// worked; now it never gets there in a shared parent.
#[cfg(feature = "fault-injection")]
#[test]
fn a_staging_directory_swapped_mid_write_never_leads_root_elsewhere() {
    let shared = Shared::new(0o777);
    let root_only = shared.dir.path().join("root-only");
    std::fs::create_dir(&root_only).unwrap();
    std::fs::set_permissions(&root_only, std::fs::Permissions::from_mode(0o711)).unwrap();
    let pause = tempfile::tempdir().unwrap();
    let recipe = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(recipe.path(), serde_json::to_vec(&example("seed-esxi")).unwrap()).unwrap();
    let mut child = common::dispatcher()
        .arg("render")
        .arg(recipe.path())
        .arg("--output")
        .arg(shared.shared().join("out"))
        .env("PROVISION_DISPATCHER_FAILPOINTS", format!("outputs.file-written=pause:{}", pause.path().display()))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let reached = pause.path().join("outputs.file-written.reached");
    while !reached.exists() && child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "render neither paused nor ended");
        std::thread::sleep(Duration::from_millis(20));
    }
    if reached.exists() {
        let staging = std::fs::read_dir(shared.shared())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .find(|n| n.starts_with(".out.staging-"))
            .unwrap();
        as_nobody(&format!(
            "cd {} && mv {staging} moved && ln -s {} {staging}",
            shared.shared().display(),
            root_only.display()
        ));
        std::fs::write(pause.path().join("outputs.file-written.continue"), b"").unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(73), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(entries(&root_only), Vec::<String>::new(), "root wrote into the root-only directory");
    assert_eq!(std::fs::metadata(&root_only).unwrap().permissions().mode() & 0o7777, 0o711);
}

/// Finding 4: a state directory another user created (0777) held a forged status.json whose
/// dispatch record made `run` exit 0 "already dispatched" without doing anything; a `lock`
/// symlink in it made root create a file where it pointed. Now such a directory is refused
/// (73) and nothing in it or behind it is touched.
#[test]
fn a_state_directory_of_another_user_is_refused() {
    let bus = PrivateBus::with_units(SEED_TARGETS);
    let machine = Machine::new();
    std::fs::set_permissions(machine.state().parent().unwrap(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let media = media(&example("seed-esxi"));
    let digest = sha256(&std::fs::read(media.path().join("recipe.json")).unwrap());
    let forged = serde_json::json!({
        "state": "dispatched", "phase": null, "exit_code": 0, "message": "dispatched", "media": null,
        "schema_id": null, "target": "install-esxi.target", "job": "/forged", "recipe_sha256": digest,
        "details": [], "warnings": [], "started_at": "2026-11-24T00:00:00Z", "finished_at": null,
        "dispatch": {"recipe_sha256": digest, "target": "install-esxi.target", "job": "/forged", "at": "2026-11-24T00:00:00Z"}
    });
    let pointed = machine.state().parent().unwrap().join("created-through-the-link");
    let state = machine.state();
    std::fs::create_dir(&state).unwrap();
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o777)).unwrap();
    std::fs::write(state.join("status.json.forged"), serde_json::to_vec(&forged).unwrap()).unwrap();
    as_nobody(&format!(
        "cd {} && cp status.json.forged status.json && ln -s {} lock",
        state.display(),
        pointed.display()
    ));
    let out = machine.dispatch(media.path(), Some(&bus), &[]);
    assert_eq!(out.code, 73, "{}", out.stderr);
    assert!(out.stderr.contains("can be written by other users"), "{}", out.stderr);
    assert!(!pointed.exists(), "root created a file through the planted lock symlink");
    assert!(!machine.output().exists(), "nothing was written");
    assert_eq!(machine.status()["job"], "/forged", "the status was left as it was");
    // A root-owned state directory with other modes, or a symlink to one, is refused alike.
    std::fs::remove_dir_all(&state).unwrap();
    let elsewhere = machine.state().parent().unwrap().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::fs::set_permissions(&elsewhere, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &state).unwrap();
    let out = machine.dispatch(media.path(), Some(&bus), &[]);
    assert_eq!(out.code, 73, "{}", out.stderr);
    assert!(out.stderr.contains("is a symbolic link"), "{}", out.stderr);
    std::fs::remove_file(&state).unwrap();
    std::fs::create_dir(&state).unwrap();
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = machine.dispatch(media.path(), Some(&bus), &[]);
    assert_eq!(out.code, 73, "{}", out.stderr);
    assert!(out.stderr.contains("not the dispatcher's 0700"), "{}", out.stderr);
    assert!(bus.starts().is_empty(), "nothing was started");
}

fn sha256(bytes: &[u8]) -> String {
    let out = Command::new("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(bytes)?;
            child.wait_with_output()
        })
        .unwrap();
    String::from_utf8(out.stdout).unwrap().split_whitespace().next().unwrap().to_owned()
}

/// Finding 5: a `run` and a `render` writing the same `--output` at once left a set without
/// `recipe.env` or its marker behind a run that exited 0 (the render's cleaning took the
/// run's live staging directory). Now writers of one parent take turns: the run publishes a
/// complete set, the render then finds it and refuses (73).
#[cfg(feature = "fault-injection")]
#[test]
fn two_writers_on_one_output_leave_a_complete_set() {
    let machine = Machine::new();
    let media = media(&example("seed-esxi"));
    let pause = tempfile::tempdir().unwrap();
    let mut held = run_command(media.path(), &machine.state(), &machine.output(), "unix:path=/nonexistent");
    let held = held
        .args(["--wait", "1", "--no-start"])
        .env("PROVISION_DISPATCHER_FAILPOINTS", format!("outputs.file-written=pause:{}", pause.path().display()))
        .spawn()
        .unwrap();
    let reached = pause.path().join("outputs.file-written.reached");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !reached.exists() {
        assert!(Instant::now() < deadline, "the run never reached its pause");
        std::thread::sleep(Duration::from_millis(20));
    }
    let recipe = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(recipe.path(), serde_json::to_vec(&example("seed-maintenance")).unwrap()).unwrap();
    let render = common::dispatcher()
        .arg("render")
        .arg(recipe.path())
        .arg("--output")
        .arg(machine.output())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The render waits for the run's lock (a render alone takes a few milliseconds).
    std::thread::sleep(Duration::from_millis(1500));
    std::fs::write(pause.path().join("outputs.file-written.continue"), b"").unwrap();
    let run_out = held.wait_with_output().unwrap();
    let render_out = render.wait_with_output().unwrap();
    assert_eq!(run_out.status.code(), Some(0));
    assert_eq!(render_out.status.code(), Some(73), "{}", String::from_utf8_lossy(&render_out.stderr));
    assert!(String::from_utf8_lossy(&render_out.stderr).contains("exists and is not empty"));
    assert_eq!(entries(&machine.output()), [".provision-dispatcher", "ks.cfg", "recipe.env", "recipe.json"]);
    assert_eq!(machine.status()["state"], "rendered");
}

/// Runs `cmd` with a deadline: a hang is a failure, not a stuck test.
fn run_within(cmd: &mut Command, limit: Duration) -> std::process::Output {
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > limit {
            child.kill().unwrap();
            let out = child.wait_with_output().unwrap();
            panic!("still running after {limit:?}: {}", String::from_utf8_lossy(&out.stderr));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

fn mkfifo(path: &Path) {
    assert!(Command::new("mkfifo").arg(path).status().unwrap().success());
}

/// Finding 7: an allowlist that is a directory, not UTF-8, a FIFO or /dev/zero ended `run`
/// with 64 and no status (or hung, or read until memory ran out). Now each is a recorded
/// failure of the image's configuration (78, `image_config`), and `check` refuses them at
/// once (64).
#[test]
fn an_unusable_allowlist_is_a_recorded_failure() {
    let dir = tempfile::tempdir().unwrap();
    let not_utf8 = dir.path().join("not-utf8");
    std::fs::write(&not_utf8, b"install-esxi.target\n\xff\xfe\n").unwrap();
    let fifo = dir.path().join("fifo");
    mkfifo(&fifo);
    let media = media(&example("seed-esxi"));
    for (allowlist, why) in [
        (dir.path().to_owned(), "not a regular file"),
        (not_utf8, "not UTF-8"),
        (fifo, "not a regular file"),
        (PathBuf::from("/dev/zero"), "not a regular file"),
    ] {
        let machine = Machine::new();
        let mut cmd = run_command(media.path(), &machine.state(), &machine.output(), "unix:path=/nonexistent");
        cmd.args(["--wait", "1", "--no-start", "--allowed-targets"]).arg(&allowlist);
        let out = run_within(&mut cmd, Duration::from_secs(20));
        assert_eq!(out.status.code(), Some(78), "{}: {}", allowlist.display(), String::from_utf8_lossy(&out.stderr));
        let status = machine.status();
        assert_eq!((status["state"].as_str(), status["failure"].as_str()), (Some("failed"), Some("image_config")));
        assert!(status["message"].as_str().unwrap().contains(why), "{status}");
        assert!(status["finished_at"].is_string());
        assert!(!machine.output().exists());
        let mut check = common::dispatcher();
        check.args(["check", "--allowed-targets"]).arg(&allowlist).arg(media.path().join("recipe.json"));
        let out = run_within(&mut check, Duration::from_secs(20));
        assert_eq!(out.status.code(), Some(64), "{}", allowlist.display());
        assert!(String::from_utf8_lossy(&out.stderr).contains(why), "{}", String::from_utf8_lossy(&out.stderr));
    }
}

/// Finding 11 (and 10's size): status.json as a FIFO hung `run` with its lock held and
/// `report` too; as a link to /dev/zero it was read until memory ran out. Now a status that
/// is not a regular file is no status: `run` goes on and replaces it, `report` says so.
#[test]
fn a_status_that_is_not_a_regular_file_is_not_read() {
    let media = media(&example("seed-esxi"));
    for special in ["fifo", "/dev/zero"] {
        let machine = Machine::new();
        std::fs::create_dir(machine.state()).unwrap();
        std::fs::set_permissions(machine.state(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let status = machine.state().join("status.json");
        match special {
            "fifo" => mkfifo(&status),
            device => std::os::unix::fs::symlink(device, &status).unwrap(),
        }
        let mut report = common::dispatcher();
        report.args(["report", "--status"]).arg(&status);
        let out = run_within(&mut report, Duration::from_secs(20));
        assert_eq!(out.status.code(), Some(66), "{special}");
        assert!(String::from_utf8_lossy(&out.stdout).contains("no status at"), "{special}");
        let mut cmd = run_command(media.path(), &machine.state(), &machine.output(), "unix:path=/nonexistent");
        cmd.args(["--wait", "1", "--no-start"]);
        let out = run_within(&mut cmd, Duration::from_secs(20));
        assert_eq!(out.status.code(), Some(0), "{special}: {}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(machine.status()["state"], "rendered");
    }
}

/// Finding 13: the temporary files of a run killed by SIGKILL stayed in the state directory
/// forever. The next run removes them (under the state lock, so no live writer owns them).
#[test]
fn leftovers_of_a_killed_run_are_removed_by_the_next() {
    let machine = Machine::new();
    std::fs::create_dir(machine.state()).unwrap();
    std::fs::set_permissions(machine.state(), std::fs::Permissions::from_mode(0o700)).unwrap();
    for name in [".status.json.tmp-4194300", "..status.reserve.tmp-4194301"] {
        std::fs::write(machine.state().join(name), "{").unwrap();
    }
    let media = media(&example("seed-esxi"));
    let out = machine.dispatch(media.path(), None, &["--no-start"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(entries(&machine.state()), ["lock", "status.json"]);
}

/// `cmd` run with `cmdline` as the kernel command line: /proc/cmdline bind-mounted over in a
/// mount namespace of its own.
fn with_cmdline(cmd: &Command, cmdline: impl AsRef<[u8]>, dir: &Path) -> Command {
    let file = dir.join("cmdline");
    std::fs::write(&file, [cmdline.as_ref(), b"\n"].concat()).unwrap();
    let mut wrapped = Command::new("unshare");
    wrapped
        .args(["--mount", "--propagation", "private", "sh", "-c", r#"mount --bind "$0" /proc/cmdline && exec "$@""#])
        .arg(&file)
        .arg(cmd.get_program())
        .args(cmd.get_args());
    for (key, value) in cmd.get_envs() {
        match value {
            Some(value) => wrapped.env(key, value),
            None => wrapped.env_remove(key),
        };
    }
    if let Some(dir) = cmd.get_current_dir() {
        wrapped.current_dir(dir);
    }
    wrapped
}

/// Finding 6: with `provision.recipe=` naming another recipe, media with a broken schema was
/// refused as 78 and an oversized recipe as 65, instead of 66 `stale_media` at once. The
/// digest is now taken from the recipe's bytes before anything else reads the media.
#[test]
fn stale_media_is_decided_before_the_schema_and_the_caps() {
    let other = format!("provision.recipe=sha256:{}", "ab".repeat(32));
    let broken_schema = media(&example("seed-esxi"));
    std::fs::write(broken_schema.path().join("recipe.schema.json"), "{ not json").unwrap();
    let oversized = media(&example("seed-esxi"));
    std::fs::write(oversized.path().join("recipe.json"), vec![b' '; 9 << 20]).unwrap();
    for media in [&broken_schema, &oversized] {
        let machine = Machine::new();
        let mut cmd = run_command(media.path(), &machine.state(), &machine.output(), "unix:path=/nonexistent");
        cmd.args(["--wait", "1", "--no-start"]);
        let out = run(&mut with_cmdline(&cmd, format!("quiet {other}"), machine.state().parent().unwrap()));
        assert_eq!(out.code, 66, "{}", out.stderr);
        let status = machine.status();
        assert_eq!(status["failure"], "stale_media", "{status}");
        assert!(status["message"].as_str().unwrap().contains("is not the one provision.recipe="), "{status}");
        // Issue 39: tied to the recipe found, the whole file's digest, with the cause's code.
        let digest = sha256(&std::fs::read(media.path().join("recipe.json")).unwrap());
        assert_eq!(status["recipe_sha256"], digest.as_str(), "{status}");
        assert_eq!(
            (&status["details"][0]["code"], &status["details"][0]["file"]),
            (&"recipeNotExpected".into(), &"recipe.json".into())
        );
    }
}

/// Issue 31, finding 2: the stale-media guard failed open. A byte that is not UTF-8 anywhere
/// on the kernel command line made the whole line read as empty, and a later bare
/// `provision.recipe` lifted a good one: both took a stale recipe (0). Now both refuse (66).
#[test]
fn the_stale_media_guard_fails_closed() {
    let stale = media(&example("seed-esxi"));
    let other = format!("provision.recipe=sha256:{}", "ab".repeat(32));
    let mut latin1 = format!("quiet {other} hostname=caf").into_bytes();
    latin1.extend_from_slice(b"\xe9 console=ttyS0");
    let digest = sha256(&std::fs::read(stale.path().join("recipe.json")).unwrap());
    let lifted = format!("provision.recipe=sha256:{digest} quiet provision.recipe");
    let cases = [
        (latin1, "is not the one provision.recipe=", "recipeNotExpected"),
        (lifted.into_bytes(), "is malformed", "expectedRecipeMalformed"),
    ];
    for (line, says, code) in cases {
        let machine = Machine::new();
        let mut cmd = run_command(stale.path(), &machine.state(), &machine.output(), "unix:path=/nonexistent");
        cmd.args(["--wait", "1", "--no-start"]);
        let out = run(&mut with_cmdline(&cmd, &line, machine.state().parent().unwrap()));
        assert_eq!(out.code, 66, "{}", out.stderr);
        let status = machine.status();
        assert_eq!(status["failure"], "stale_media", "{status}");
        assert!(status["message"].as_str().unwrap().contains(says), "{status}");
        assert_eq!(status["details"][0]["code"], code, "{status}");
        assert_eq!(status["recipe_sha256"], digest.as_str(), "{status}");
        assert!(!machine.output().exists(), "nothing written");
    }
}

/// Finding 15: a malformed `provision.recipe=` failed closed with the message of a wrong
/// digest; `provision.media="LABEL=MY TASK"` was read as `"LABEL=MY`. Now the parameter is
/// said to be malformed, and quoted values are read as the kernel reads them.
#[test]
fn kernel_parameters_are_read_as_the_kernel_reads_them() {
    let good = media(&example("seed-esxi"));
    for malformed in ["provision.recipe=md5:abc", "provision.recipe=sha256:abc", "provision.recipe="] {
        let machine = Machine::new();
        let mut cmd = run_command(good.path(), &machine.state(), &machine.output(), "unix:path=/nonexistent");
        cmd.args(["--wait", "1", "--no-start"]);
        let out = run(&mut with_cmdline(&cmd, malformed, machine.state().parent().unwrap()));
        assert_eq!(out.code, 66, "{malformed}: {}", out.stderr);
        let message = machine.status()["message"].as_str().unwrap().to_owned();
        assert!(message.contains("provision.recipe= on the kernel command line is malformed"), "{message}");
    }
    let machine = Machine::new();
    let mut cmd = common::dispatcher();
    cmd.args(["run", "--wait", "1", "--no-start", "--state-dir"])
        .arg(machine.state())
        .arg("--output")
        .arg(machine.output());
    let out =
        run(&mut with_cmdline(&cmd, r#"ro provision.media="LABEL=MY TASK" quiet"#, machine.state().parent().unwrap()));
    assert_eq!(out.code, 66, "{}", out.stderr);
    let message = machine.status()["message"].as_str().unwrap().to_owned();
    assert!(message.starts_with("no media at label MY TASK after 1 s"), "{message}");
}

/// Also in issue 24: an ISO given on a kernel without ISO 9660 (this host's) failed with "No
/// such device (os error 19)"; a character device as the recipe on a `nodev` mount with
/// "Permission denied". Now each says what it is.
#[test]
fn a_kernel_without_the_filesystem_and_a_device_node_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let iso = dir.path().join("task.iso");
    let mut image = vec![0u8; 18 * 2048];
    image[16 * 2048..16 * 2048 + 6].copy_from_slice(b"\x01CD001");
    image[16 * 2048 + 40..16 * 2048 + 72].copy_from_slice(&[b' '; 32]);
    image[16 * 2048 + 40..16 * 2048 + 44].copy_from_slice(b"TASK");
    image[17 * 2048..17 * 2048 + 6].copy_from_slice(b"\xffCD001");
    std::fs::write(&iso, image).unwrap();
    let kernel_has_iso9660 = std::fs::read_to_string("/proc/filesystems").unwrap().contains("iso9660");
    if !kernel_has_iso9660 {
        let machine = Machine::new();
        let out = machine.dispatch(&iso, None, &["--no-start"]);
        assert_eq!(out.code, 66, "{}", out.stderr);
        let message = machine.status()["message"].as_str().unwrap().to_owned();
        assert!(message.contains("this kernel has no iso9660 filesystem"), "{message}");
    }
    let media = common::machine::Tmpfs::mount("size=1m,nodev,mode=0755");
    std::fs::copy(common::root().join("iso/recipe.schema.json"), media.path().join("recipe.schema.json")).unwrap();
    assert!(Command::new("mknod")
        .arg(media.path().join("recipe.json"))
        .args(["c", "1", "3"])
        .status()
        .unwrap()
        .success());
    let machine = Machine::new();
    let out = machine.dispatch(media.path(), None, &["--no-start"]);
    assert_eq!(out.code, 66, "{}", out.stderr);
    let message = machine.status()["message"].as_str().unwrap().to_owned();
    assert_eq!(message, "recipe.json on the media is not a regular file");
}

/// Finding 10: `report` printed escape sequences raw from a status.json whose timestamps or
/// state word held them. Every string it prints from the file is escaped now.
#[test]
fn report_escapes_every_string_of_the_status() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("status.json");
    let status = |state: &str| {
        serde_json::json!({
            "state": state, "phase": null, "exit_code": 0, "message": "m", "media": null, "schema_id": null,
            "target": null, "job": null, "recipe_sha256": null, "details": [], "warnings": [],
            "started_at": "\u{1b}[2J\u{202e}", "finished_at": "\u{1b}]0;title\u{7}", "dispatch": null
        })
    };
    for state in ["failed", "\u{1b}[31mfailed"] {
        std::fs::write(&file, serde_json::to_vec(&status(state)).unwrap()).unwrap();
        let out = common::dispatcher().args(["report", "--status"]).arg(&file).output().unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(text.contains("\\u001b"), "{text}");
        assert!(!text.contains('\u{1b}') && !text.contains('\u{202e}') && !text.contains('\u{7}'), "{text:?}");
    }
}
