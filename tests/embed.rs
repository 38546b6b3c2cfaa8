//! `media embed` through the real binary, on a maintenance ISO made here by xorriso as the
//! image's is (volume id `PROVISION-MAINT`, an empty task area at `/provision/task.img`, its
//! extent found by xorriso): no byte outside the area changes; `--remove` gives the ISO back
//! byte for byte; `--in-place`; a directory is written as `media build` writes it; every
//! refusal leaves the input as it was and writes nothing; `media check` and `run` take the
//! embedded task as they take a task ISO, and say where it came from (`embedded`).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::machine::Machine;
use common::{dispatcher, root, run, Run};
use provision_dispatcher::media::area::{Header, HEADER_BYTES};
use serde_json::Value;

/// The area of the maintenance ISOs made here: the size of arm64's (1 MiB).
const AREA: u64 = 1 << 20;

fn embed(args: &[&dyn AsRef<std::ffi::OsStr>]) -> Run {
    run(dispatcher().args(["media", "embed"]).args(args.iter().map(|a| a.as_ref())))
}

fn json(text: &str) -> Value {
    serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// A maintenance ISO in `dir` as `cargo xtask image` lays out its area (a file of the tree,
/// its header and zeros), with a few other files around it; `area` is the area's file, or
/// `None` for an image without one.
fn maintenance_iso(dir: &Path, volume_id: &str, area: Option<Vec<u8>>) -> PathBuf {
    let tree = dir.join(format!("tree-{volume_id}"));
    std::fs::create_dir_all(tree.join("live")).unwrap();
    std::fs::create_dir_all(tree.join("boot/grub")).unwrap();
    let noise: Vec<u8> = (0..300_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 11) as u8).collect();
    std::fs::write(tree.join("live/00-base.squashfs"), &noise).unwrap();
    std::fs::write(tree.join("boot/grub/grub.cfg"), "set default=0\n").unwrap();
    if let Some(area) = area {
        std::fs::create_dir_all(tree.join("provision")).unwrap();
        std::fs::write(tree.join("provision/task.img"), area).unwrap();
    }
    let iso = dir.join(format!("{volume_id}.iso"));
    let out = Command::new("xorriso")
        .args(["-as", "mkisofs", "-r", "-J", "-V", volume_id, "-o"])
        .arg(&iso)
        .arg(&tree)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    iso
}

/// An empty area of `bytes`, as the image is built.
fn empty_area(bytes: u64) -> Vec<u8> {
    let mut area = Header::empty(bytes).encode().to_vec();
    area.resize(bytes as usize, 0);
    area
}

/// Where xorriso says `/provision/task.img` lies in `iso`: its first byte and its size.
fn area_extent(iso: &Path) -> (usize, usize) {
    let out = Command::new("xorriso")
        .arg("-indev")
        .arg(iso)
        .args(["-find", "/provision/task.img", "-exec", "report_lba", "--"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().find(|l| l.starts_with("File data lba:")).unwrap_or_else(|| panic!("{text}"));
    let fields: Vec<&str> = line["File data lba:".len()..].split(',').map(str::trim).collect();
    (fields[1].parse::<usize>().unwrap() * 2048, fields[3].parse().unwrap())
}

/// A task ISO of the seed example `name` (`media build`), with these options.
fn task_iso(dir: &Path, name: &str, extra: &[&str]) -> PathBuf {
    let iso = dir.join(format!("{name}.iso"));
    let recipe = root().join(format!("iso/examples/{name}.json"));
    let built = run(dispatcher().args(["media", "build"]).arg(&recipe).arg("-o").arg(&iso).args(extra));
    assert_eq!(built.code, 0, "{}", built.stdout);
    iso
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn only_the_area_changes_and_remove_gives_the_image_back() {
    let dir = tempfile::tempdir().unwrap();
    let maintenance = maintenance_iso(dir.path(), "PROVISION-MAINT", Some(empty_area(AREA)));
    let task = task_iso(dir.path(), "seed-linux", &[]);
    let server = dir.path().join("server.iso");
    let embedded = embed(&[&maintenance, &task, &"-o", &server, &"--format", &"json"]);
    assert_eq!(embedded.code, 0, "{}", embedded.stdout);
    let report = json(&embedded.stdout);
    let (before, after) = (std::fs::read(&maintenance).unwrap(), std::fs::read(&server).unwrap());
    let (start, len) = area_extent(&maintenance);
    assert_eq!(len as u64, AREA);
    assert_eq!(before.len(), after.len());
    let outside: Vec<usize> =
        (0..before.len()).filter(|&i| !(start..start + len).contains(&i) && before[i] != after[i]).collect();
    assert!(outside.is_empty(), "bytes outside the area changed: {:?}", &outside[..outside.len().min(8)]);
    // The area: the header, the task deflated, zeros.
    let task_bytes = std::fs::read(&task).unwrap();
    let stored = &report["media"]["embedded"]["task"];
    assert_eq!(stored["bytes"], task_bytes.len());
    assert_eq!(stored["sha256"], sha256_hex(&task_bytes).as_str());
    assert_eq!(stored["compression"], "deflate");
    let stored_bytes = stored["stored_bytes"].as_u64().unwrap() as usize;
    assert!(stored_bytes < 8192, "the seed example's task deflates to a few KiB, not {stored_bytes}");
    let area = &after[start..start + len];
    assert_eq!(&area[..32], b"provision-dispatcher task area\n\0");
    assert!(area[HEADER_BYTES as usize + stored_bytes..].iter().all(|&b| b == 0));
    assert_eq!(report["media"]["embedded"]["iso"], server.to_str().unwrap());
    assert_eq!(report["media"]["embedded"]["area_bytes"], AREA);
    // `media check` reads the embedded task as the task ISO itself.
    let of_task = json(&run(dispatcher().args(["media", "check", "--format", "json"]).arg(&task)).stdout);
    let of_server = run(dispatcher().args(["media", "check", "--format", "json"]).arg(&server));
    assert_eq!(of_server.code, 0, "{}", of_server.stdout);
    let of_server = json(&of_server.stdout);
    for key in ["recipe_sha256", "schema_id", "files", "signer"] {
        assert_eq!(of_server["media"][key], of_task["media"][key], "{key}");
    }
    assert_eq!(of_server["media"]["embedded"]["task"], report["media"]["embedded"]["task"]);
    // Removed: the maintenance ISO byte for byte, by -o and in place.
    let back = dir.path().join("back.iso");
    let removed = embed(&[&"--remove", &server, &"-o", &back, &"--format", &"json"]);
    assert_eq!(removed.code, 0, "{}", removed.stdout);
    assert_eq!(json(&removed.stdout)["removed_task_sha256"], sha256_hex(&task_bytes).as_str());
    assert!(std::fs::read(&back).unwrap() == before, "--remove -o gives the image as built");
    assert!(std::fs::read(&server).unwrap() == after, "-o leaves its input alone");
    let removed = embed(&[&"--remove", &"--in-place", &server]);
    assert_eq!(removed.code, 0, "{}", removed.stdout);
    assert!(
        removed.stdout.contains("its task area (1048576 bytes) empty, as the image was built"),
        "{}",
        removed.stdout
    );
    assert!(std::fs::read(&server).unwrap() == before, "--remove --in-place gives the image as built");
    let unchanged = embed(&[&"--remove", &"--in-place", &server]);
    assert!(unchanged.stdout.contains("it held no task"), "{}", unchanged.stdout);
    assert!(std::fs::read(&server).unwrap() == before);
}

#[test]
fn in_place_and_force() {
    let dir = tempfile::tempdir().unwrap();
    let maintenance = maintenance_iso(dir.path(), "PROVISION-MAINT", Some(empty_area(AREA)));
    let copy = dir.path().join("node17.iso");
    std::fs::copy(&maintenance, &copy).unwrap();
    let linux = task_iso(dir.path(), "seed-linux", &[]);
    let esxi = task_iso(dir.path(), "seed-esxi", &[]);
    let written = embed(&[&copy, &linux, &"--in-place"]);
    assert_eq!(written.code, 0, "{}", written.stdout);
    assert!(written.stdout.contains("wrote ") && written.stdout.contains("embedded in its task area"));
    let held = std::fs::read(&copy).unwrap();
    // A second task is refused, the ISO as it was; --force replaces it.
    let refused = embed(&[&copy, &esxi, &"--in-place"]);
    assert_eq!(refused.code, 73, "{}", refused.stdout);
    assert!(refused.stdout.contains("already holds a task"), "{}", refused.stdout);
    assert!(std::fs::read(&copy).unwrap() == held);
    let replaced = embed(&[&copy, &esxi, &"--in-place", &"--force", &"--format", &"json"]);
    assert_eq!(replaced.code, 0, "{}", replaced.stdout);
    let checked = json(&run(dispatcher().args(["media", "check", "--format", "json"]).arg(&copy)).stdout);
    let esxi_recipe = std::fs::read(root().join("iso/examples/seed-esxi.json")).unwrap();
    assert_eq!(checked["media"]["recipe_sha256"], sha256_hex(&esxi_recipe).as_str());
    // The longer task replaced by a shorter one leaves nothing of it: the same bytes as the
    // shorter one embedded into the image as built.
    let fresh = dir.path().join("fresh.iso");
    assert_eq!(embed(&[&maintenance, &esxi, &"-o", &fresh]).code, 0);
    assert!(std::fs::read(&copy).unwrap() == std::fs::read(&fresh).unwrap());
}

/// A directory of the task's files is judged as `media check` judges it, then written as
/// `media build` writes the ISO: the same task ISO, byte for byte, signatures included.
#[test]
fn a_directory_is_written_as_media_build_writes_it() {
    let dir = tempfile::tempdir().unwrap();
    let maintenance = maintenance_iso(dir.path(), "PROVISION-MAINT", Some(empty_area(AREA)));
    let key = dir.path().join("key");
    std::fs::copy(root().join("tests/keys/test-only-trusted"), &key).unwrap();
    let built = task_iso(dir.path(), "seed-esxi", &["--sign", key.to_str().unwrap()]);
    let files = dir.path().join("task");
    std::fs::create_dir(&files).unwrap();
    let out = Command::new("xorriso")
        .args(["-osirrox", "on", "-indev"])
        .arg(&built)
        .args(["-extract", "/"])
        .arg(&files)
        .output()
        .unwrap();
    assert!(out.status.success());
    for entry in std::fs::read_dir(&files).unwrap() {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(entry.unwrap().path(), std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let server = dir.path().join("server.iso");
    let embedded = embed(&[&maintenance, &files, &"-o", &server, &"--format", &"json"]);
    assert_eq!(embedded.code, 0, "{}", embedded.stdout);
    let report = json(&embedded.stdout);
    let task = std::fs::read(&built).unwrap();
    assert_eq!(report["media"]["embedded"]["task"]["sha256"], sha256_hex(&task).as_str());
    assert_eq!(
        report["media"]["files"],
        serde_json::json!(["recipe.json", "recipe.schema.json", "recipe.json.sig", "recipe.schema.json.sig"])
    );
    // Checked against the image's trust file, as the boot will.
    let trust = dir.path().join("allowed_signers");
    let public = std::fs::read_to_string(root().join("tests/keys/test-only-trusted.pub")).unwrap();
    std::fs::write(&trust, format!("ops@example.com {public}")).unwrap();
    let checked =
        run(dispatcher().args(["media", "check", "--format", "json", "--allowed-signers"]).arg(&trust).arg(&server));
    assert_eq!(checked.code, 0, "{}", checked.stdout);
    assert_eq!(json(&checked.stdout)["media"]["signer"]["principal"], "ops@example.com");
}

/// Each refusal names what is wrong and writes nothing: the output is not made, an ISO written
/// in place is as it was.
#[test]
fn refusals_leave_everything_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let good = maintenance_iso(dir.path(), "PROVISION-MAINT", Some(empty_area(AREA)));
    let task = task_iso(dir.path(), "seed-linux", &[]);
    let other_volume = maintenance_iso(dir.path(), "DEBIAN-LIVE", Some(empty_area(AREA)));
    let no_area = {
        let sub = dir.path().join("no-area");
        std::fs::create_dir(&sub).unwrap();
        maintenance_iso(&sub, "PROVISION-MAINT", None)
    };
    let not_ours = {
        let sub = dir.path().join("not-ours");
        std::fs::create_dir(&sub).unwrap();
        maintenance_iso(&sub, "PROVISION-MAINT", Some(vec![0; AREA as usize]))
    };
    let small = {
        let sub = dir.path().join("small");
        std::fs::create_dir(&sub).unwrap();
        maintenance_iso(&sub, "PROVISION-MAINT", Some(empty_area(2048)))
    };
    let invalid = dir.path().join("invalid");
    std::fs::create_dir(&invalid).unwrap();
    std::fs::copy(root().join("iso/examples/seed-invalid-linux.json"), invalid.join("recipe.json")).unwrap();
    std::fs::copy(root().join("iso/recipe.schema.json"), invalid.join("recipe.schema.json")).unwrap();
    let random = dir.path().join("random.bin");
    std::fs::write(&random, vec![7u8; 100_000]).unwrap();
    let out = dir.path().join("out.iso");
    let cases: [(&Path, &Path, i32, &str); 8] = [
        (&task, &task, 66, "not the maintenance ISO's \"PROVISION-MAINT\""),
        (&other_volume, &task, 66, "it has the volume id \"DEBIAN-LIVE\""),
        (&no_area, &task, 66, "it has no /provision/task.img"),
        (&not_ours, &task, 66, "does not start with the header of a task area"),
        (&small, &task, 73, "does not fit the task area"),
        (&good, &invalid, 65, "/target_disk"),
        (&good, &random, 66, "is not an ISO 9660 image, not a task ISO"),
        (&good, &good, 64, "is a maintenance ISO: the maintenance ISO comes first"),
    ];
    for (maintenance, task, code, says) in cases {
        let before = std::fs::read(maintenance).unwrap();
        let refused = embed(&[&maintenance, &task, &"-o", &out]);
        assert_eq!(refused.code, code, "{} {}: {}", maintenance.display(), task.display(), refused.stdout);
        assert!(refused.stdout.contains(says), "{says:?} in: {}", refused.stdout);
        assert!(!out.exists(), "nothing written for {}", task.display());
        let in_place = embed(&[&maintenance, &task, &"--in-place"]);
        assert_eq!(in_place.code, code, "{}", in_place.stdout);
        assert!(std::fs::read(maintenance).unwrap() == before, "{} as it was", maintenance.display());
    }
    // The sizes are named: what the task takes, what the area has.
    let refused = embed(&[&small, &task, &"-o", &out]);
    assert!(refused.stdout.contains("the area has 2048"), "{}", refused.stdout);
    for usage in [
        vec!["media", "embed", "a.iso", "b.iso"],
        vec!["media", "embed", "a.iso", "b.iso", "-o", "c.iso", "--in-place"],
        vec!["media", "embed", "--remove", "a.iso", "--in-place", "--force"],
        vec!["media", "embed", "a.iso", "-o", "c.iso"],
    ] {
        let refused = run(dispatcher().args(&usage));
        assert_eq!(refused.code, 64, "{usage:?}: {}", refused.stderr);
    }
}

/// `run` takes a task embedded in the boot medium's area (where the initrd leaves it under
/// `/run/live`) before any labelled device, or one in a maintenance ISO named with `--media`,
/// as it takes a task ISO; status.json and the result line say `embedded`. An empty area is
/// passed over (the label is looked for); a damaged one fails the run (66).
#[test]
fn run_takes_the_embedded_task_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let maintenance = maintenance_iso(dir.path(), "PROVISION-MAINT", Some(empty_area(AREA)));
    let task = task_iso(dir.path(), "seed-esxi", &[]);
    let server = dir.path().join("server.iso");
    assert_eq!(embed(&[&maintenance, &task, &"-o", &server]).code, 0);
    let (start, len) = area_extent(&server);
    let area = std::fs::read(&server).unwrap()[start..start + len].to_vec();
    let live = dir.path().join("live");
    std::fs::create_dir_all(live.join("medium/provision")).unwrap();
    let recipe = std::fs::read(root().join("iso/examples/seed-esxi.json")).unwrap();
    let on_medium = |area: &[u8]| std::fs::write(live.join("medium/provision/task.img"), area).unwrap();
    let boot = |machine: &Machine, media: Option<&Path>| {
        let mut cmd = dispatcher();
        cmd.arg("run").arg("--state-dir").arg(machine.state()).arg("--output").arg(machine.output());
        cmd.args(["--no-start", "--label", "NO-SUCH-LABEL-HERE", "--live-root"]).arg(&live);
        // No wait for the label (nothing has it); named media is found at once, however busy
        // the machine.
        match media {
            Some(media) => cmd.arg("--media").arg(media).args(["--wait", "30"]),
            None => cmd.args(["--wait", "0"]),
        };
        cmd.env_remove("NOTIFY_SOCKET").env_remove("JOURNAL_STREAM");
        run(&mut cmd)
    };
    let line = |out: &Run| -> Value {
        let line = out.stdout.lines().find_map(|l| l.strip_prefix("PROVISION-RESULT v1 ")).expect("a result line");
        json(line)
    };
    for (what, media) in [("on the boot medium", None), ("named with --media", Some(server.as_path()))] {
        on_medium(&area);
        let machine = Machine::new();
        let out = boot(&machine, media);
        assert_eq!(out.code, 0, "{what}: {}{}", out.stdout, out.stderr);
        let status = machine.status();
        assert_eq!((status["state"].as_str(), status["media"].as_str()), (Some("rendered"), Some("embedded")));
        assert_eq!(line(&out)["media"], "embedded", "{what}");
        assert_eq!(status["recipe_sha256"], sha256_hex(&recipe).as_str());
        assert_eq!(std::fs::read(machine.output().join("recipe.json")).unwrap(), recipe);
    }
    // Empty: the label is looked for (none here), and its absence is what fails.
    on_medium(&empty_area(AREA));
    let machine = Machine::new();
    let out = boot(&machine, None);
    assert_eq!(out.code, 66, "{}", out.stdout);
    assert_eq!(machine.status()["failure"], "media_not_found");
    assert!(machine.status()["message"].as_str().unwrap().contains("label NO-SUCH-LABEL-HERE"));
    // Damaged: refused, not passed over.
    let mut damaged = area.clone();
    damaged[HEADER_BYTES as usize + 10] ^= 0xff;
    on_medium(&damaged);
    let machine = Machine::new();
    let out = boot(&machine, None);
    assert_eq!(out.code, 66, "{}", out.stdout);
    let status = machine.status();
    assert_eq!(status["failure"], "media_unmountable");
    assert!(status["message"].as_str().unwrap().contains("SHA-256"), "{status}");
    // With toram the initrd leaves the area in RAM instead, the medium let go.
    std::fs::remove_file(live.join("medium/provision/task.img")).unwrap();
    std::fs::create_dir_all(live.join("toram/provision")).unwrap();
    std::fs::write(live.join("toram/provision/task.img"), &area).unwrap();
    let machine = Machine::new();
    let out = boot(&machine, None);
    assert_eq!(out.code, 0, "{}", out.stdout);
    assert_eq!(machine.status()["media"], "embedded");
}
