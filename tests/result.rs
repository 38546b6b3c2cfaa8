//! The result line (SPEC §6b) through the real binary: every `run` ends with one
//! `PROVISION-RESULT v1` line that agrees with the status.json it wrote, and
//! `report --format json` prints the same object.

mod common;

use common::bus::{PrivateBus, SEED_TARGETS};
use common::machine::{detail_paths, example, media, Machine};
use common::{dispatcher, run};
use serde_json::Value;
use sha2::{Digest, Sha256};

const PREFIX: &str = "PROVISION-RESULT v1 ";

/// The one result line of a run's stdout, parsed as a controller would.
fn result_of(stdout: &str) -> Value {
    let lines: Vec<&str> = stdout.lines().filter(|l| l.starts_with(PREFIX)).collect();
    assert_eq!(lines.len(), 1, "one result line in:\n{stdout}");
    serde_json::from_str(&lines[0][PREFIX.len()..]).unwrap()
}

fn status_sha256(machine: &Machine) -> String {
    let bytes = std::fs::read(machine.state().join("status.json")).unwrap();
    Sha256::digest(&bytes).iter().map(|b| format!("{b:02x}")).collect()
}

fn report_json(machine: &Machine) -> Value {
    let out =
        run(dispatcher().args(["report", "--format", "json", "--status"]).arg(machine.state().join("status.json")));
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(out.stdout.lines().count(), 1, "{}", out.stdout);
    serde_json::from_str(&out.stdout).unwrap()
}

#[test]
fn a_failed_run_ends_with_its_result_line() {
    let bus = PrivateBus::with_units(SEED_TARGETS);
    let machine = Machine::new();
    let media = media(&example("seed-invalid-linux"));
    let out = machine.dispatch(media.path(), Some(&bus), &[]);
    assert_eq!(out.code, 65, "{}", out.stderr);
    let result = result_of(&out.stdout);
    let status = machine.status();
    assert_eq!(result["state"], "failed");
    assert_eq!(result["failure"], "validation_error");
    assert_eq!(result["exit_code"], 65);
    assert_eq!(result["phase"], "validate");
    assert_eq!(result["target"], Value::Null, "never the target of an invalid recipe");
    assert_eq!(result["recipe_sha256"], status["recipe_sha256"]);
    let mut paths: Vec<&str> =
        result["details"].as_array().unwrap().iter().map(|d| d["path"].as_str().unwrap()).collect();
    paths.sort();
    assert_eq!(paths, detail_paths(&status));
    assert!(result["details"].as_array().unwrap().iter().all(|d| d.as_object().unwrap().len() == 2), "path and code");
    assert_eq!(result["status_sha256"], status_sha256(&machine), "the status as written");
    assert!(result["took_ms"].is_u64());
    assert_eq!(report_json(&machine), result, "report --format json prints the same object");
}

#[test]
fn a_dispatch_ends_with_its_result_line() {
    let bus = PrivateBus::with_units(SEED_TARGETS);
    let machine = Machine::new();
    let media = media(&example("seed-esxi"));
    let out = machine.dispatch(media.path(), Some(&bus), &[]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let result = result_of(&out.stdout);
    let status = machine.status();
    assert_eq!(result["state"], "dispatched");
    assert_eq!(result["failure"], Value::Null);
    assert_eq!(result["exit_code"], 0);
    assert_eq!(result["target"], "install-esxi.target");
    assert_eq!(result["job"], status["job"]);
    assert_eq!(result["details"], serde_json::json!([]));
    assert_eq!(result["status_sha256"], status_sha256(&machine));
    assert_eq!(report_json(&machine), result);
    assert_eq!(status["bmc_event"], Value::Null, "no event without --bmc");
}

/// SPEC §6b: without a BMC the run is what it would have been, and status.json says so.
#[test]
fn without_a_bmc_the_outcome_is_unchanged() {
    if std::path::Path::new("/dev/ipmi0").exists() {
        eprintln!("skipped: this machine has a BMC, and a test must not log events in it");
        return;
    }
    let bus = PrivateBus::with_units(SEED_TARGETS);
    for (name, code) in [("seed-esxi", 0), ("seed-invalid-linux", 65)] {
        let machine = Machine::new();
        let media = media(&example(name));
        let out = machine.dispatch(media.path(), Some(&bus), &["--bmc"]);
        assert_eq!(out.code, code, "{name}: {}", out.stderr);
        assert_eq!(machine.status()["bmc_event"], "no_bmc", "{name}");
        assert_eq!(result_of(&out.stdout)["exit_code"], code);
    }
}

/// Issue 32 #1: a run refused for its state directory exited 73 with nothing on stdout. Every
/// run prints the line; with nothing recorded, `status_sha256` is null.
#[test]
fn a_run_that_can_record_nothing_still_ends_with_its_line() {
    use std::os::unix::fs::PermissionsExt;
    let media = media(&example("seed-esxi"));
    type Prepare = fn(&std::path::Path);
    let cases: [(&str, Prepare); 3] = [
        ("a state directory of mode 0755", |state| {
            std::fs::create_dir(state).unwrap();
            std::fs::set_permissions(state, std::fs::Permissions::from_mode(0o755)).unwrap();
        }),
        ("a state directory that is a symlink", |state| {
            let real = state.with_extension("real");
            std::fs::create_dir(&real).unwrap();
            std::os::unix::fs::symlink(&real, state).unwrap();
        }),
        ("status.json a directory", |state| {
            std::fs::create_dir(state).unwrap();
            std::fs::set_permissions(state, std::fs::Permissions::from_mode(0o700)).unwrap();
            std::fs::create_dir(state.join("status.json")).unwrap();
        }),
    ];
    for (what, prepare) in cases {
        let machine = Machine::new();
        prepare(&machine.state());
        let out = machine.dispatch(media.path(), None, &["--no-start"]);
        assert_eq!(out.code, 73, "{what}: {}", out.stderr);
        let line = result_of(&out.stdout);
        assert_eq!(line["state"], "failed", "{what}");
        assert_eq!(line["failure"], "outputs_unwritable", "{what}");
        assert_eq!(line["exit_code"], 73, "{what}");
        assert_eq!(line["status_sha256"], Value::Null, "{what}: nothing was recorded");
    }
}

/// Issue 32 #2: `report --format json` without a status printed a sentence; it prints one
/// object that says so, with 66.
#[test]
fn report_without_a_status_is_one_object_too() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(dispatcher().args(["report", "--format", "json", "--status"]).arg(dir.path().join("none.json")));
    assert_eq!(out.code, 66, "{}", out.stderr);
    assert_eq!(out.stdout.lines().count(), 1, "{}", out.stdout);
    let object: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!((object["state"].clone(), object["failure"].as_str()), (Value::Null, Some("no_status")));
}

/// Issue 39, item 3: a 78 line had empty `details` and a null `recipe_sha256`, so neither its
/// cause nor its job could be told from the console. The recipe is read (and digested) before
/// anything else refuses the media: every refusal names it, and says why with one code about
/// one file; an unknown `$id` comes with the `$id`s the image knows.
#[test]
fn every_refusal_of_the_media_names_its_recipe_and_its_cause() {
    type Spoil = fn(&std::path::Path);
    let cases: [(&str, u8, &str, &str, Spoil); 6] = [
        ("schema missing", 78, "schemaMissing", "recipe.schema.json", |m| {
            std::fs::remove_file(m.join("recipe.schema.json")).unwrap()
        }),
        ("schema not JSON", 78, "schemaInvalid", "recipe.schema.json", |m| {
            std::fs::write(m.join("recipe.schema.json"), "{ not json").unwrap()
        }),
        ("schema of draft-04", 78, "schemaInvalid", "recipe.schema.json", |m| {
            let draft4 = r#"{"$schema": "http://json-schema.org/draft-04/schema#", "type": "object"}"#;
            std::fs::write(m.join("recipe.schema.json"), draft4).unwrap()
        }),
        ("schema a directory", 78, "schemaUnreadable", "recipe.schema.json", |m| {
            std::fs::remove_file(m.join("recipe.schema.json")).unwrap();
            std::fs::create_dir(m.join("recipe.schema.json")).unwrap();
        }),
        ("schema of an unknown $id", 78, "unknownSchemaId", "recipe.schema.json", |m| {
            let schema = std::fs::read_to_string(m.join("recipe.schema.json")).unwrap();
            std::fs::write(m.join("recipe.schema.json"), schema.replace("/provisioner/", "/provisioner/v3/")).unwrap();
        }),
        // Over the cap: the digest is still the whole file's, as `sha256sum` gives it.
        ("recipe over 8 MiB", 65, "maxBytes", "", |m| {
            let mut recipe = std::fs::read(m.join("recipe.json")).unwrap();
            recipe.resize(9 << 20, b' ');
            std::fs::write(m.join("recipe.json"), recipe).unwrap();
        }),
    ];
    for (what, exit, code, file, spoil) in cases {
        let media = media(&example("seed-esxi"));
        spoil(media.path());
        let machine = Machine::new();
        let out = machine.dispatch(media.path(), None, &["--no-start"]);
        assert_eq!(out.code, i32::from(exit), "{what}: {}", out.stderr);
        let (line, status) = (result_of(&out.stdout), machine.status());
        let recipe = std::fs::read(media.path().join("recipe.json")).unwrap();
        let digest: String = Sha256::digest(&recipe).iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(line["recipe_sha256"], digest.as_str(), "{what}: {line}");
        assert_eq!(status["recipe_sha256"], digest.as_str(), "{what}");
        let detail = &line["details"][0];
        assert_eq!((&detail["path"], &detail["code"]), (&Value::from(""), &Value::from(code)), "{what}: {line}");
        assert_eq!(line["details"].as_array().unwrap().len(), 1, "{what}: one cause, one detail: {line}");
        assert_eq!(status["details"][0]["code"], code, "{what}");
        match file {
            "" => assert_eq!(detail.get("file"), None, "{what}: about the recipe: {line}"),
            file => {
                assert_eq!((&detail["file"], &status["details"][0]["file"]), (&file.into(), &file.into()), "{what}")
            }
        }
        let known = (code == "unknownSchemaId").then(|| {
            serde_json::json!([
                "https://shoal.dev/provisioner/recipe.schema.json",
                "https://shoal.dev/provisioner/v2/recipe.schema.json"
            ])
        });
        assert_eq!(detail.get("known"), known.as_ref(), "{what}: {line}");
        assert_eq!(status["details"][0].get("known"), known.as_ref(), "{what}");
        assert_eq!(report_json(&machine), line, "{what}: report --format json prints the same object");
    }
}
