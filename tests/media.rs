//! `media build` and `media check` through the real binary: the ISO it writes read back by
//! `media check`, by xorriso and against the compiled-in schemas; the same bytes for the same
//! inputs; nothing written for an invalid recipe or a bad signature; signatures byte for byte
//! as `ssh-keygen -Y sign` makes them (Ed25519) or verified by it (ECDSA); hostile media,
//! written by `examples/task-media.rs` through the same writer, refused with the boot's exit
//! codes; and `media check` of a directory deciding as `run` decides on it.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::machine::{example, media, Machine};
use common::{dispatcher, example_binary, root, run, Run};
use serde_json::Value;

const SECTOR: usize = 2048;
const UUID: &str = "4c4c4544-0000-1111-2222-333344445555";

fn build(recipe: &Path, iso: &Path, extra: &[&str]) -> Run {
    run(dispatcher().args(["media", "build"]).arg(recipe).arg("-o").arg(iso).args(extra))
}

fn check(media: &Path, extra: &[&str]) -> Run {
    run(dispatcher().args(["media", "check"]).arg(media).args(extra))
}

fn json(text: &str) -> Value {
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1, "one JSON object: {text}");
    serde_json::from_str(lines[0]).unwrap()
}

/// The recipe example `name` as a file in `dir`.
fn recipe_file(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(format!("{name}.json"));
    std::fs::copy(root().join(format!("iso/examples/{name}.json")), &path).unwrap();
    path
}

/// The files xorriso finds in `iso`, and their bytes as it extracts them.
fn xorriso_files(iso: &Path) -> Vec<(String, Vec<u8>)> {
    let out = tempfile::tempdir().unwrap();
    let extracted = out.path().join("x");
    let status = Command::new("xorriso")
        .args(["-osirrox", "on", "-indev"])
        .arg(iso)
        .args(["-extract", "/"])
        .arg(&extracted)
        .output()
        .unwrap();
    assert!(status.status.success(), "{}", String::from_utf8_lossy(&status.stderr));
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(&extracted)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (e.file_name().into_string().unwrap(), std::fs::read(e.path()).unwrap())
        })
        .collect();
    files.sort();
    files
}

/// A private copy of a test key: ssh-keygen refuses a key others can read.
fn private_key(dir: &Path, name: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let key = dir.join(name);
    std::fs::copy(root().join("tests/keys").join(name), &key).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    key
}

fn trust_file(dir: &Path, key: &str) -> PathBuf {
    let public = std::fs::read_to_string(root().join("tests/keys").join(format!("{key}.pub"))).unwrap();
    let file = dir.join("allowed_signers");
    std::fs::write(&file, format!("ops@example.com {public}")).unwrap();
    file
}

/// A directory with the seed ESXi recipe, the trusted test key and a trust file holding it.
fn signing() -> (tempfile::TempDir, PathBuf, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let recipe = recipe_file(dir.path(), "seed-esxi");
    let key = private_key(dir.path(), "test-only-trusted");
    let trust = trust_file(dir.path(), "test-only-trusted");
    (dir, recipe, key, trust)
}

fn ssh_keygen_sign(key: &Path, namespace: &str, files: &[&Path]) {
    let status = Command::new("ssh-keygen")
        .args(["-q", "-Y", "sign", "-f"])
        .arg(key)
        .args(["-n", namespace])
        .args(files)
        .status();
    assert!(status.unwrap().success());
}

#[test]
fn the_iso_holds_the_files_the_boot_reads_and_every_reader_agrees() {
    let dir = tempfile::tempdir().unwrap();
    let recipe = recipe_file(dir.path(), "seed-linux");
    let iso = dir.path().join("task.iso");
    let built = build(&recipe, &iso, &[]);
    assert_eq!(built.code, 0, "{}", built.stdout);
    let digest = sha256(&std::fs::read(&recipe).unwrap());
    assert!(
        built.stdout.contains(&format!("recipe sha256:{digest} (provision.recipe=sha256:{digest}")),
        "{}",
        built.stdout
    );
    assert!(built.stdout.contains("schema https://shoal.dev/provisioner/recipe.schema.json"), "{}", built.stdout);
    let v1 = run(dispatcher().args(["schema", "print", "1"])).stdout;
    let files = xorriso_files(&iso);
    assert_eq!(
        files,
        [
            ("recipe.json".to_owned(), std::fs::read(&recipe).unwrap()),
            ("recipe.schema.json".to_owned(), v1.into_bytes())
        ]
    );
    let pvd = &std::fs::read(&iso).unwrap()[16 * SECTOR..17 * SECTOR];
    assert_eq!(&pvd[1..6], b"CD001");
    assert_eq!(&pvd[40..48], b"TASK    ", "volume id TASK");
    let checked = check(&iso, &["--format", "json"]);
    assert_eq!(checked.code, 0, "{}", checked.stdout);
    let checked = json(&checked.stdout);
    assert_eq!(checked["valid"], true);
    assert_eq!(checked["media"]["recipe_sha256"], digest.as_str());
    assert_eq!(checked["media"]["schema_id"], "https://shoal.dev/provisioner/recipe.schema.json");
    assert_eq!(checked["media"]["signer"], Value::Null);
}

#[test]
fn the_same_inputs_give_the_same_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let recipe = recipe_file(dir.path(), "seed-esxi");
    let key = private_key(dir.path(), "test-only-trusted");
    let (a, b) = (dir.path().join("a.iso"), dir.path().join("b.iso"));
    assert_eq!(build(&recipe, &a, &["--sign", key.to_str().unwrap()]).code, 0);
    std::thread::sleep(std::time::Duration::from_millis(1100));
    assert_eq!(build(&recipe, &b, &["--sign", key.to_str().unwrap()]).code, 0);
    assert!(std::fs::read(&a).unwrap() == std::fs::read(&b).unwrap(), "a second later, the same bytes");
}

#[test]
fn an_invalid_recipe_is_reported_as_check_reports_it_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let recipe = recipe_file(dir.path(), "seed-invalid-linux");
    let iso = dir.path().join("task.iso");
    std::fs::write(&iso, b"the media of an earlier job").unwrap();
    for format in ["human", "json"] {
        let built = build(&recipe, &iso, &["--format", format]);
        let checked = run(dispatcher().arg("check").arg(&recipe).args(["--format", format]));
        assert_eq!((built.code, checked.code), (65, 65));
        match format {
            "json" => {
                let mut object = json(&built.stdout);
                assert_eq!(object.as_object_mut().unwrap().remove("media"), Some(Value::Null));
                assert_eq!(object, json(&checked.stdout));
            }
            _ => assert_eq!(built.stdout, checked.stdout),
        }
    }
    assert_eq!(std::fs::read(&iso).unwrap(), b"the media of an earlier job", "left untouched");
    let unreadable = build(&dir.path().join("missing.json"), &iso, &[]);
    assert_eq!(unreadable.code, 66);
    assert_eq!(common::entries(dir.path()), ["seed-invalid-linux.json", "task.iso"], "no temporary left");
}

#[test]
fn the_schema_asked_for_goes_on_the_media() {
    let dir = tempfile::tempdir().unwrap();
    let recipe = recipe_file(dir.path(), "seed-linux");
    let iso = dir.path().join("task.iso");
    assert_eq!(build(&recipe, &iso, &["--schema-version", "2"]).code, 0);
    let v2 = std::fs::read(root().join("iso/recipe.schema.v2.json")).unwrap();
    assert_eq!(xorriso_files(&iso)[1].1, v2);
    let seed = root().join("iso/seed-002.schema.json");
    assert_eq!(build(&recipe, &iso, &["--schema", seed.to_str().unwrap()]).code, 0);
    assert_eq!(xorriso_files(&iso)[1].1, std::fs::read(&seed).unwrap());
    assert_eq!(build(&recipe, &iso, &["--schema-version", "2", "--schema", seed.to_str().unwrap()]).code, 64);
}

#[test]
fn ed25519_signatures_are_byte_for_byte_ssh_keygens() {
    let (dir, recipe, key, trust) = signing();
    for (bind, namespace) in
        [(None, "provision-dispatcher".to_owned()), (Some(UUID.to_uppercase()), format!("provision-dispatcher@{UUID}"))]
    {
        let iso = dir.path().join("signed.iso");
        let mut args = vec!["--sign", key.to_str().unwrap(), "--allowed-signers", trust.to_str().unwrap()];
        if let Some(uuid) = &bind {
            args.extend(["--bind", uuid]);
        }
        let built = build(&recipe, &iso, &args);
        assert_eq!(built.code, 0, "{}", built.stdout);
        assert!(
            built.stdout.contains(&format!("namespace {namespace}, principal ops@example.com")),
            "{}",
            built.stdout
        );
        let files = xorriso_files(&iso);
        let names: Vec<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["recipe.json", "recipe.json.sig", "recipe.schema.json", "recipe.schema.json.sig"]);
        let stage = tempfile::tempdir().unwrap();
        let (r, s) = (stage.path().join("recipe.json"), stage.path().join("recipe.schema.json"));
        std::fs::write(&r, &files[0].1).unwrap();
        std::fs::write(&s, &files[2].1).unwrap();
        ssh_keygen_sign(&key, &namespace, &[&r, &s]);
        assert_eq!(std::fs::read(stage.path().join("recipe.json.sig")).unwrap(), files[1].1, "{namespace}");
        assert_eq!(std::fs::read(stage.path().join("recipe.schema.json.sig")).unwrap(), files[3].1, "{namespace}");
    }
}

#[test]
fn ecdsa_signatures_verify_with_ssh_keygen() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("ecdsa");
    let made = Command::new("ssh-keygen").args(["-q", "-t", "ecdsa", "-b", "256", "-N", "", "-f"]).arg(&key).status();
    assert!(made.unwrap().success());
    let recipe = recipe_file(dir.path(), "seed-esxi");
    let iso = dir.path().join("signed.iso");
    assert_eq!(build(&recipe, &iso, &["--sign", key.to_str().unwrap()]).code, 0);
    let files = xorriso_files(&iso);
    let public = std::fs::read_to_string(dir.path().join("ecdsa.pub")).unwrap();
    let allowed = dir.path().join("allowed");
    std::fs::write(&allowed, format!("ops {public}")).unwrap();
    for (content, sig) in [(&files[0].1, &files[1].1), (&files[2].1, &files[3].1)] {
        let sig_file = dir.path().join("file.sig");
        std::fs::write(&sig_file, sig).unwrap();
        let mut verify = Command::new("ssh-keygen")
            .args(["-Y", "verify", "-I", "ops", "-n", "provision-dispatcher", "-f"])
            .arg(&allowed)
            .arg("-s")
            .arg(&sig_file)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        verify.stdin.take().unwrap().write_all(content).unwrap();
        assert!(verify.wait().unwrap().success());
    }
}

#[test]
fn keys_and_signatures_that_cannot_go_on_the_media_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let recipe = recipe_file(dir.path(), "seed-esxi");
    let iso = dir.path().join("task.iso");
    // A key with a passphrase: refused, no prompt.
    let locked = dir.path().join("locked");
    let made = Command::new("ssh-keygen").args(["-q", "-t", "ed25519", "-N", "secret", "-f"]).arg(&locked).status();
    assert!(made.unwrap().success());
    let refused = build(&recipe, &iso, &["--sign", locked.to_str().unwrap()]);
    assert_eq!(refused.code, 64, "{}", refused.stdout);
    assert!(refused.stdout.contains("encrypted with a passphrase"), "{}", refused.stdout);
    // Signatures made elsewhere: good ones go on the media, as made.
    let key = private_key(dir.path(), "test-only-trusted");
    let sigs = dir.path().join("sigs");
    std::fs::create_dir(&sigs).unwrap();
    let (r, s) = (sigs.join("recipe.json"), sigs.join("recipe.schema.json"));
    std::fs::copy(&recipe, &r).unwrap();
    std::fs::write(&s, run(dispatcher().args(["schema", "print", "1"])).stdout).unwrap();
    ssh_keygen_sign(&key, "provision-dispatcher", &[&r, &s]);
    let trust = trust_file(dir.path(), "test-only-trusted");
    let given = ["--signatures", sigs.to_str().unwrap(), "--allowed-signers", trust.to_str().unwrap()];
    assert_eq!(build(&recipe, &iso, &given).code, 0);
    assert_eq!(xorriso_files(&iso)[1].1, std::fs::read(sigs.join("recipe.json.sig")).unwrap());
    // ... but not for another recipe, another namespace, or a key the trust file lacks.
    std::fs::remove_file(&iso).unwrap();
    let other = recipe_file(dir.path(), "seed-maintenance");
    let untrusted = trust_file(dir.path(), "test-only-untrusted");
    for (recipe, args, why) in [
        (&other, given.to_vec(), "is a bad signature of recipe.json"),
        (&recipe, [&given[..], &["--bind", UUID]].concat(), "not provision-dispatcher@"),
        (
            &recipe,
            vec!["--signatures", sigs.to_str().unwrap(), "--allowed-signers", untrusted.to_str().unwrap()],
            "a key the image does not trust",
        ),
    ] {
        let refused = build(recipe, &iso, &args);
        assert_eq!(refused.code, 77, "{args:?}: {}", refused.stdout);
        assert!(refused.stdout.contains(why), "{}", refused.stdout);
        assert!(!iso.exists());
    }
    std::fs::remove_file(sigs.join("recipe.schema.json.sig")).unwrap();
    let missing = build(&recipe, &iso, &given);
    assert_eq!(missing.code, 77);
    assert!(missing.stdout.contains("recipe.schema.json.sig is missing"), "{}", missing.stdout);
    assert_eq!(build(&recipe, &iso, &["--bind", UUID]).code, 64, "--bind alone signs nothing");
}

/// Hostile or broken media, written by the tests' writer, and what `media check` says: the
/// exit code the boot gives, and why.
#[test]
fn media_the_boot_refuses_media_check_refuses_alike() {
    let dir = tempfile::tempdir().unwrap();
    let recipe = recipe_file(dir.path(), "seed-esxi");
    let schema = root().join("iso/recipe.schema.json");
    let oversize = dir.path().join("oversize.json");
    let mut padded = std::fs::read(&recipe).unwrap();
    padded.resize(8 * 1024 * 1024 + 1, b' ');
    std::fs::write(&oversize, padded).unwrap();
    let file = |name: &str, path: &Path| format!("{name}={}", path.display());
    let cases: Vec<(&str, Vec<String>, i32, &str)> = vec![
        ("a link", vec!["--symlink".into(), "recipe.json=/etc/hostname".into()], 66, "is a symbolic link"),
        ("a directory", vec!["--dir".into(), file("recipe.json/recipe.json", &recipe)], 66, "is not a regular file"),
        ("too large", vec!["--file".into(), file("recipe.json", &oversize)], 65, "is larger than 8388608 bytes"),
        ("no recipe", vec![], 66, "recipe.json on the media does not exist"),
    ];
    for (what, entries, code, why) in cases {
        let iso = dir.path().join("hostile.iso");
        let mut cmd = Command::new(example_binary("task-media"));
        cmd.arg("-o").arg(&iso).arg("--file").arg(file("recipe.schema.json", &schema)).args(&entries);
        assert!(cmd.status().unwrap().success(), "{what}");
        let checked = check(&iso, &[]);
        assert_eq!(checked.code, code, "{what}: {}", checked.stdout);
        assert!(checked.stdout.contains(why), "{what}: {}", checked.stdout);
        // The boot on the same media as xorriso extracts it (links and directories kept):
        // this host's kernel mounts no ISO 9660, the VM cases mount it.
        let extracted = dir.path().join("extracted");
        let _ = std::fs::remove_dir_all(&extracted);
        let status = Command::new("xorriso")
            .args(["-osirrox", "on", "-indev"])
            .arg(&iso)
            .args(["-extract", "/"])
            .arg(&extracted)
            .output()
            .unwrap();
        assert!(status.status.success(), "{what}");
        let booted = Machine::new().dispatch(&extracted, None, &["--no-start"]);
        assert_eq!(booted.code, code, "{what}: run on the extracted media: {}", booted.stderr);
    }
    // A link where the schema belongs makes the schema unusable (78), as at boot.
    let iso = dir.path().join("hostile.iso");
    let made = Command::new(example_binary("task-media"))
        .arg("-o")
        .arg(&iso)
        .args(["--symlink", "recipe.schema.json=/etc/passwd", "--file"])
        .arg(file("recipe.json", &recipe))
        .status();
    assert!(made.unwrap().success());
    assert_eq!(check(&iso, &[]).code, 78);
    // Damaged images: cut after the volume descriptors; root directories overwritten; another
    // label; a file claiming 4 GiB.
    let good = dir.path().join("good.iso");
    assert_eq!(build(&recipe, &good, &[]).code, 0);
    let bytes = std::fs::read(&good).unwrap();
    let damaged = |name: &str, bytes: &[u8], code: i32, why: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        let checked = check(&path, &[]);
        assert_eq!(checked.code, code, "{name}: {}", checked.stdout);
        assert!(checked.stdout.contains(why), "{name}: {}", checked.stdout);
    };
    damaged("cut.iso", &bytes[..18 * SECTOR], 66, "cut short");
    damaged("corrupt.iso", &corrupt_root_directories(&bytes), 66, "cannot be read as the boot would mount it");
    let mut relabelled = bytes.clone();
    relabelled[16 * SECTOR + 40..16 * SECTOR + 44].copy_from_slice(b"ESXI");
    damaged("label.iso", &relabelled, 66, "not \"TASK\"");
    let mut huge = bytes.clone();
    let record = find(&huge, b"RECIPE.JSON;1") - 33;
    huge[record + 10..record + 18].copy_from_slice(&[0xff; 8]);
    // The recipe is digested whole, past the cap too (its SHA-256 names it on every line): the
    // image ends first, the medium's fault (66, as Linux's read past the end of the device),
    // whether it ends before the cap or after it.
    damaged("huge.iso", &huge, 66, "ends before a file's data");
    huge.resize(9 << 20, 0);
    damaged("huge-and-long.iso", &huge, 66, "ends before a file's data");
    let mut past_end = bytes.clone();
    past_end[record + 2..record + 10].copy_from_slice(&[0, 0, 1, 0, 0, 1, 0, 0]);
    damaged("past-end.iso", &past_end, 66, "ends before a file's data");
}

/// The root directory of each tree (the primary one and Joliet's) overwritten with garbage;
/// the volume descriptors, and so the label, stay (as `task_media_damage: corrupt-directory`).
fn corrupt_root_directories(image: &[u8]) -> Vec<u8> {
    let mut bytes = image.to_vec();
    for descriptor in [16 * SECTOR, 17 * SECTOR] {
        let record = descriptor + 156;
        let extent = u32::from_le_bytes(bytes[record + 2..record + 6].try_into().unwrap()) as usize * SECTOR;
        for (i, byte) in bytes[extent..extent + SECTOR].iter_mut().enumerate() {
            *byte = (i as u8).wrapping_mul(37) | 0x80;
        }
    }
    bytes
}

fn find(haystack: &[u8], needle: &[u8]) -> usize {
    haystack.windows(needle.len()).position(|w| w == needle).expect("present")
}

#[test]
fn signed_media_are_checked_as_the_image_checks_them() {
    let (dir, recipe, key, trust) = signing();
    let trusted = ["--allowed-signers", trust.to_str().unwrap()];
    let (unsigned, signed, bound) = (dir.path().join("u.iso"), dir.path().join("s.iso"), dir.path().join("b.iso"));
    assert_eq!(build(&recipe, &unsigned, &[]).code, 0);
    assert_eq!(build(&recipe, &signed, &["--sign", key.to_str().unwrap()]).code, 0);
    assert_eq!(build(&recipe, &bound, &["--sign", key.to_str().unwrap(), "--bind", UUID]).code, 0);
    let good = check(&signed, &[&trusted[..], &["--format", "json"]].concat());
    assert_eq!(good.code, 0, "{}", good.stdout);
    let signer = &json(&good.stdout)["media"]["signer"];
    assert_eq!(signer["principal"], "ops@example.com");
    assert!(signer["fingerprint"].as_str().unwrap().starts_with("SHA256:"));
    let this = ["--machine-uuid", UUID];
    let other = ["--machine-uuid", "00000000-1111-2222-3333-444444444444"];
    assert_eq!(check(&bound, &[&trusted[..], &this].concat()).code, 0);
    let elsewhere = check(&bound, &[&trusted[..], &other].concat());
    assert_eq!(elsewhere.code, 77);
    assert!(elsewhere.stdout.contains("bound to another machine"), "{}", elsewhere.stdout);
    let refused = check(&unsigned, &trusted);
    assert_eq!(refused.code, 77);
    assert!(refused.stdout.contains("recipe.json is not signed"), "{}", refused.stdout);
    assert_eq!(check(&unsigned, &[]).code, 0, "no trust file, no signatures needed");
}

/// A directory of media: `media check` decides as `run` does on it (exit code, failure), for a
/// valid recipe, an invalid one, a missing schema, a link for a recipe and a bad signature.
#[test]
fn media_check_of_a_directory_decides_as_run_does() {
    use std::os::unix::fs::symlink;
    let trust_dir = tempfile::tempdir().unwrap();
    let trust = trust_file(trust_dir.path(), "test-only-trusted");
    let valid = media(&example("seed-esxi"));
    let invalid = media(&example("seed-invalid-linux"));
    let no_schema = media(&example("seed-esxi"));
    std::fs::remove_file(no_schema.path().join("recipe.schema.json")).unwrap();
    let linked = media(&example("seed-esxi"));
    std::fs::remove_file(linked.path().join("recipe.json")).unwrap();
    symlink("/etc/hostname", linked.path().join("recipe.json")).unwrap();
    let unsigned = media(&example("seed-esxi"));
    for (media, extra) in [
        (valid.path(), vec![]),
        (invalid.path(), vec![]),
        (no_schema.path(), vec![]),
        (linked.path(), vec![]),
        (unsigned.path(), vec!["--allowed-signers", trust.to_str().unwrap()]),
    ] {
        let machine = Machine::new();
        let booted = machine.dispatch(media, None, &[&["--no-start"][..], &extra].concat());
        let checked = check(media, &[&extra[..], &["--format", "json"]].concat());
        assert_eq!(checked.code, booted.code, "{}: {}", media.display(), checked.stdout);
        let status = machine.status();
        assert_eq!(
            json(&checked.stdout).get("error").unwrap_or(&Value::Null),
            status.get("failure").unwrap_or(&Value::Null)
        );
    }
}

fn sha256(bytes: &[u8]) -> String {
    let out =
        Command::new("sha256sum").stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped()).spawn();
    let mut child = out.unwrap();
    use std::io::Write;
    child.stdin.take().unwrap().write_all(bytes).unwrap();
    let out = child.wait_with_output().unwrap();
    String::from_utf8(out.stdout).unwrap().split_whitespace().next().unwrap().to_owned()
}

#[test]
fn schema_list_and_print() {
    let listed = run(dispatcher().args(["schema", "list"]));
    assert_eq!(listed.code, 0);
    let names: Vec<&str> = listed.stdout.lines().map(|l| l.split_whitespace().next().unwrap()).collect();
    assert_eq!(names, ["1", "2", "result", "inventory", "check", "status"], "{}", listed.stdout);
    let lines: Vec<Vec<&str>> = listed.stdout.lines().map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(lines[0][1], "https://shoal.dev/provisioner/recipe.schema.json", "{}", listed.stdout);
    assert_eq!(lines[1][1], "https://shoal.dev/provisioner/v2/recipe.schema.json", "{}", listed.stdout);
    let columns: Vec<Option<usize>> = listed.stdout.lines().map(|l| l.find("https://")).collect();
    assert!(columns.windows(2).all(|w| w[0] == w[1]), "the $ids in one column:\n{}", listed.stdout);
    let listed = json(&run(dispatcher().args(["schema", "list", "--format", "json"])).stdout);
    assert_eq!(listed["schemas"][1]["name"], "2");
    let files = [("1", "iso/recipe.schema.json"), ("2", "iso/recipe.schema.v2.json")];
    let documents = common::schemas::NAMES.map(|name| (name, format!("schemas/{name}.schema.json")));
    for (name, file) in files.iter().map(|(n, f)| (*n, f.to_string())).chain(documents) {
        let printed = dispatcher().args(["schema", "print", name]).output().unwrap();
        assert!(printed.status.success());
        assert_eq!(printed.stdout, std::fs::read(root().join(&file)).unwrap(), "{name} byte for byte");
        let id = serde_json::from_slice::<serde_json::Value>(&printed.stdout).unwrap()["$id"].clone();
        let listed = listed["schemas"].as_array().unwrap().iter().find(|s| s["name"] == name).unwrap();
        assert_eq!(listed["id"], id, "{name}: schema list names its $id");
    }
    let unknown = run(dispatcher().args(["schema", "print", "3"]));
    assert_eq!(unknown.code, 64);
    assert!(unknown.stderr.contains("this binary has: 1, 2, result, inventory, check, status"), "{}", unknown.stderr);
    for help in
        [&["media", "--help"][..], &["media", "build", "--help"], &["media", "check", "--help"], &["schema", "--help"]]
    {
        let shown = run(dispatcher().args(help));
        assert_eq!(shown.code, 0, "{help:?}");
        assert!(shown.stdout.starts_with("Usage: provision-dispatcher "), "{help:?}");
    }
}
