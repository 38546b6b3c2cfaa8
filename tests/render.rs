//! `render` through the real binary: golden outputs of the seed examples, recipe.env read
//! back by real shells byte for byte, random values either round-trip or are refused, and
//! failures part-way that leave nothing behind.

mod common;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::machine::Tmpfs;
use common::{assert_golden, dispatcher, root, run};
use proptest::prelude::*;
use provision_dispatcher::atomic::{Existing, MARKER};
use provision_dispatcher::checks::{safety::Policy, static_checks};
use provision_dispatcher::outputs::Outputs;
use provision_dispatcher::recipe::model::{Recipe, Valid};
use provision_dispatcher::recipe::parse;
use provision_dispatcher::schema::Schema;

fn render(recipe: &Path, output: &Path) -> common::Run {
    run(dispatcher().arg("render").arg(recipe).arg("--output").arg(output))
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().mode() & 0o7777
}

#[test]
fn seed_examples_render_their_golden_outputs() {
    for name in ["seed-linux", "seed-windows", "seed-esxi", "seed-maintenance", "matrix-layout-valid-mix"] {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("provision");
        let result = render(&root().join(format!("iso/examples/{name}.json")), &out);
        assert_eq!(result.code, 0, "{name}: {}", result.stderr);
        assert_eq!(mode(&out), 0o700);
        let golden = root().join("tests/golden/render").join(name);
        let list = |dir: &Path| {
            let mut names: Vec<String> =
                std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
            names.sort();
            names
        };
        let written = list(&out);
        if std::env::var_os("UPDATE_EXPECT").is_some() {
            let _ = std::fs::remove_dir_all(&golden);
            std::fs::create_dir_all(&golden).unwrap();
        } else {
            assert_eq!(written, list(&golden), "{name}: the set of files");
        }
        for file in &written {
            let path = out.join(file);
            assert_eq!(mode(&path), 0o600, "{name}/{file}");
            // recipe.env names the output directory; the golden file says @OUTPUT@ there.
            let text =
                String::from_utf8(std::fs::read(&path).unwrap()).unwrap().replace(out.to_str().unwrap(), "@OUTPUT@");
            assert_golden(&golden.join(file), &text);
        }
        let outputs = written.iter().filter(|f| *f != MARKER).count();
        assert_eq!(result.stdout.lines().count(), outputs, "stdout lists each output written");
    }
}

#[test]
fn payload_files_are_the_recipe_strings_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let recipe = dir.path().join("recipe.json");
    let payload = "line one\r\nline two   \n\u{0}nul and \u{7f} del\té ü € 😀\n\n";
    let json = serde_json::json!({"task_target": "install-esxi.target", "ks_cfg": payload, "user_data": payload,
        "unattend_xml": payload, "metadata": {"a": 1.50, "b": [1e2, "x"]}});
    std::fs::write(&recipe, serde_json::to_vec(&json).unwrap()).unwrap();
    let out = dir.path().join("out");
    assert_eq!(render(&recipe, &out).code, 0);
    for file in ["ks.cfg", "user-data", "unattend.xml"] {
        assert_eq!(std::fs::read(out.join(file)).unwrap(), payload.as_bytes(), "{file}");
    }
    let metadata: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("metadata.json")).unwrap()).unwrap();
    assert_eq!(metadata, json["metadata"]);
}

/// Values full of shell and systemd metacharacters, as the VM case also uses.
const NASTY: &[&str] = &[
    r#"it's "quoted" $HOME ${HOME} $(touch @M@/dollar-paren) `touch @M@/backtick` \ \\ \n %i %% ; touch @M@/semicolon"#,
    "'it'\\''s' && touch @M@/and || touch @M@/or | touch @M@/pipe > @M@/redirect",
    "trailing spaces   ",
    "   leading spaces, ünïcødé ✓ 日本 😀",
    "#not-a-comment = also=not=a=key",
    "$",
    "\\",
    "\"",
    "'",
    "`",
];

#[test]
fn recipe_env_reads_back_byte_for_byte_in_posix_shells_and_runs_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let marker_dir = dir.path().join("markers");
    std::fs::create_dir(&marker_dir).unwrap();
    for (i, template) in NASTY.iter().enumerate() {
        let value = template.replace("@M@", marker_dir.to_str().unwrap());
        let recipe = dir.path().join(format!("recipe-{i}.json"));
        let json = serde_json::json!({"task_target": "install-linux.target", "target_disk": format!("/dev/mapper/{value}"),
            "oci_url": value, "recipe_version": value,
            "partition_layout": [{"size": "512M", "type_guid": "ef00", "format": "vfat"}, {"size": "100%", "type_guid": "8300", "format": "ext4"}]});
        std::fs::write(&recipe, serde_json::to_vec(&json).unwrap()).unwrap();
        let out = dir.path().join(format!("out-{i}"));
        let result = render(&recipe, &out);
        assert_eq!(result.code, 0, "{value:?}: {}", result.stderr);
        for shell in ["sh", "bash", "dash"] {
            let read_back = source(shell, &out.join("recipe.env"), &["TARGET_DISK", "OCI_URL", "RECIPE_VERSION"]);
            assert_eq!(read_back, [format!("/dev/mapper/{value}"), value.clone(), value.clone()], "{shell}: {value:?}");
        }
    }
    let ran: Vec<_> = std::fs::read_dir(&marker_dir).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(ran.is_empty(), "sourcing recipe.env ran commands: {ran:?}");
}

/// Sources `env` in `shell` and prints the named variables NUL-separated.
fn source(shell: &str, env: &Path, keys: &[&str]) -> Vec<String> {
    let script = format!(
        ". \"$1\" && printf '%s\\0' {}",
        keys.iter().map(|k| format!("\"${k}\"")).collect::<Vec<_>>().join(" ")
    );
    let out = Command::new(shell).arg("-c").arg(script).arg(shell).arg(env).output().unwrap();
    assert!(out.status.success(), "{shell}: {}", String::from_utf8_lossy(&out.stderr));
    let mut values: Vec<String> = String::from_utf8(out.stdout).unwrap().split('\0').map(str::to_owned).collect();
    values.pop();
    values
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// Any string in an env field is either refused with that field's pointer, or written so
    /// that `sh` reads it back byte for byte.
    #[test]
    fn random_env_values_round_trip_through_sh_or_are_refused(
        value in "[\\x00-\\x7f'\"$`\\\\%!*?;&|<>(){}\\[\\] \\n\\téü€😀\u{85}\u{2028}]{0,40}"
    ) {
        let recipe = serde_json::json!({"task_target": "install-esxi.target", "ks_cfg": "x", "recipe_version": value});
        let doc = parse(serde_json::to_vec(&recipe).unwrap()).unwrap();
        let schema = Schema::canonical();
        let recipe = Recipe::view(&doc);
        let findings = static_checks(&recipe, &schema, &Policy::default()).unwrap();
        let errors: Vec<_> = findings.errors().map(|i| (i.path.as_str(), i.code.name())).collect();
        if errors.is_empty() {
            let dir = tempfile::tempdir().unwrap();
            let out: PathBuf = dir.path().join("out");
            let valid = Valid::new(&recipe, &findings).unwrap();
            Outputs::new(&valid, schema.id().unwrap(), &out, None).write(&out, Existing::Refuse).unwrap();
            prop_assert_eq!(source("sh", &out.join("recipe.env"), &["RECIPE_VERSION"]), vec![value]);
        } else {
            prop_assert_eq!(errors, vec![("/recipe_version", "unsafeEnvValue")]);
            let has_control = value.chars().any(|c| c < ' ' || c == '\x7f');
            prop_assert!(has_control, "refused without a control character");
        }
    }
}

#[test]
fn a_non_empty_output_directory_is_refused_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    std::fs::write(out.join("keep"), "keep").unwrap();
    let result = render(&root().join("iso/examples/seed-esxi.json"), &out);
    assert_eq!(result.code, 73);
    assert!(result.stderr.contains("exists and is not empty"), "{}", result.stderr);
    let names: Vec<_> = std::fs::read_dir(&out).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, ["keep"]);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1, "no staging directory left");
}

#[test]
fn an_invalid_recipe_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let result = render(&root().join("iso/examples/seed-invalid-linux.json"), &out);
    assert_eq!(result.code, 65);
    assert!(result.stderr.contains("/target_disk"), "{}", result.stderr);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn a_full_filesystem_fails_part_way_and_leaves_nothing() {
    // Room for recipe.env and layout.json, not for 1 MiB of user-data.
    let fs = Tmpfs::mount("size=256k,mode=0755");
    let out = fs.path().join("provision");
    let result = render(&root().join("iso/examples/matrix-layout-64-partitions.json"), &out);
    assert_eq!(result.code, 0, "fits: {}", result.stderr);
    std::fs::remove_dir_all(&out).unwrap();

    let dir = tempfile::tempdir().unwrap();
    let recipe = dir.path().join("big.json");
    let mut json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(root().join("iso/examples/seed-linux.json")).unwrap()).unwrap();
    json["user_data"] = "x".repeat(1024 * 1024).into();
    std::fs::write(&recipe, serde_json::to_vec(&json).unwrap()).unwrap();
    let result = render(&recipe, &out);
    assert_eq!(result.code, 73, "{}", result.stderr);
    assert!(result.stderr.contains("cannot write user-data"), "{}", result.stderr);
    assert!(result.stderr.contains("No space left on device"), "{}", result.stderr);
    assert!(!result.stderr.contains("xxxx"), "no content in the message");
    assert_eq!(std::fs::read_dir(fs.path()).unwrap().count(), 0, "nothing partial is left");
}

#[test]
fn a_read_only_filesystem_fails_cleanly() {
    let fs = Tmpfs::mount("size=1m,ro,mode=0755");
    let out = fs.path().join("provision");
    let result = render(&root().join("iso/examples/seed-esxi.json"), &out);
    assert_eq!(result.code, 73, "{}", result.stderr);
    assert!(result.stderr.contains("Read-only file system"), "{}", result.stderr);
    assert_eq!(std::fs::read_dir(fs.path()).unwrap().count(), 0);
}
