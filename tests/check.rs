//! `check` through the real binary: every example against its sidecar, the human format,
//! exit codes, and that no recipe value ever reaches the output.

mod common;

use std::path::{Path, PathBuf};

use common::{assert_golden, dispatcher, root, run};

fn examples() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join("iso/examples"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json") && !p.to_string_lossy().ends_with(".expect.json"))
        .collect();
    files.sort();
    files
}

fn relative(path: &Path) -> String {
    path.strip_prefix(root()).unwrap().display().to_string()
}

/// Each example's sidecar `NAME.expect.json` holds the exit code and the exact JSON report.
#[test]
fn every_example_gives_its_expected_result() {
    let files = examples();
    assert!(files.len() >= 40, "examples are missing: {}", files.len());
    for file in files {
        let out = run(dispatcher().args(["check", "--format", "json"]).arg(relative(&file)));
        assert_eq!(out.stderr, "", "{}", file.display());
        let report: serde_json::Value = serde_json::from_str(&out.stdout).expect("one JSON object");
        let actual = serde_json::json!({"exit": out.code, "report": report});
        let sidecar = file.with_extension("expect.json");
        assert_golden(&sidecar, &format!("{}\n", serde_json::to_string_pretty(&actual).unwrap()));
    }
}

#[test]
fn seed_valid_examples_pass_without_warnings_against_both_schemas() {
    for schema in [None, Some("iso/seed-002.schema.json")] {
        for name in ["seed-linux", "seed-windows", "seed-esxi", "seed-maintenance"] {
            let mut cmd = dispatcher();
            cmd.args(["check", "--format", "json", &format!("iso/examples/{name}.json")]);
            if let Some(schema) = schema {
                cmd.args(["--schema", schema]);
            }
            let out = run(&mut cmd);
            assert_eq!(out.code, 0, "{name} against {schema:?}: {}", out.stdout);
            assert_eq!(out.stdout, "{\"valid\":true,\"details\":[],\"warnings\":[]}\n");
        }
    }
}

#[test]
fn seed_invalid_example_points_at_each_missing_field_against_both_schemas() {
    for schema in ["iso/recipe.schema.json", "iso/seed-002.schema.json"] {
        let out = run(dispatcher().args([
            "check",
            "--format",
            "json",
            "iso/examples/seed-invalid-linux.json",
            "--schema",
            schema,
        ]));
        assert_eq!(out.code, 65);
        let report: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
        let mut paths: Vec<&str> =
            report["details"].as_array().unwrap().iter().map(|d| d["path"].as_str().unwrap()).collect();
        paths.sort();
        assert_eq!(paths, ["/oci_url", "/partition_layout", "/target_disk"], "{schema}");
    }
}

#[test]
fn human_format_matches_its_golden_files() {
    for name in [
        "seed-invalid-linux",
        "strict-duplicate-keys",
        "strict-syntax-error",
        "lint-percent-not-last-and-duplicate-label",
        "seed-windows",
    ] {
        let out = run(dispatcher().args(["check", &format!("iso/examples/{name}.json")]));
        assert_golden(&root().join(format!("tests/golden/check-human/{name}.txt")), &out.stdout);
    }
}

#[test]
fn a_recipe_over_8_mib_is_refused_before_parsing() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("recipe.json");
    // Not even JSON: it must never be parsed.
    std::fs::write(&file, vec![b'['; 8 * 1024 * 1024 + 1]).unwrap();
    let out = run(dispatcher().args(["check", "--format", "json"]).arg(&file));
    assert_eq!(out.code, 65);
    let report: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(report["error"], "too_large");
    assert_eq!(report["details"][0]["code"], "maxBytes");
}

#[test]
fn missing_recipe_is_66_and_still_one_json_object() {
    let out = run(dispatcher().args(["check", "--format", "json", "no/such/recipe.json"]));
    assert_eq!(out.code, 66);
    let report: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(report["valid"], false);
    assert_eq!(report["error"], "unreadable");
}

#[test]
fn unusable_schema_is_78() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("missing.json", None, "schemaMissing"),
        (
            "draft2020.json",
            Some(
                r#"{"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": "https://shoal.dev/provisioner/recipe.schema.json"}"#,
            ),
            "schemaInvalid",
        ),
        ("unknown-id.json", Some(r#"{"$id": "https://example.com/other.json", "type": "object"}"#), "unknownSchemaId"),
        (
            "bad-pattern.json",
            Some(
                r#"{"$id": "https://shoal.dev/provisioner/recipe.schema.json", "properties": {"a": {"pattern": "("}}}"#,
            ),
            "schemaInvalid",
        ),
        (
            "not-a-schema.json",
            Some(r#"{"$id": "https://shoal.dev/provisioner/recipe.schema.json", "type": 12}"#),
            "schemaInvalid",
        ),
        ("not-json.json", Some("{"), "schemaInvalid"),
    ];
    for (name, text, code) in cases {
        let path = dir.path().join(name);
        if let Some(text) = text {
            std::fs::write(&path, text).unwrap();
        }
        let out =
            run(dispatcher().args(["check", "--format", "json", "iso/examples/seed-esxi.json", "--schema"]).arg(&path));
        assert_eq!(out.code, 78, "{name}: {}", out.stdout);
        let report: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
        assert_eq!(report["error"], "schema_error", "{name}");
        assert!(!report["reason"].as_str().unwrap().is_empty());
        // Issue 39: one detail, about the schema file as a whole, with the cause's code.
        let detail = &report["details"][0];
        assert_eq!(report["details"].as_array().unwrap().len(), 1, "{name}: {report}");
        assert_eq!((&detail["code"], &detail["path"]), (&code.into(), &"".into()), "{name}: {report}");
        assert_eq!(detail["file"], path.to_str().unwrap(), "{name}");
        assert_eq!(detail["message"], report["reason"], "{name}");
        let known = detail["known"].as_array().map(Vec::len);
        assert_eq!(known, (code == "unknownSchemaId").then_some(2), "{name}: the $ids this binary knows");
    }
    // The image may opt in to a schema it does not know.
    let path = dir.path().join("unknown-id.json");
    let out = run(dispatcher()
        .args(["check", "iso/examples/seed-esxi.json", "--accept-unknown-schema-id", "--schema"])
        .arg(&path));
    assert_eq!(out.code, 0, "{}", out.stdout);
}

/// Issue 39, item 5: `check` (v1 by default) of a recipe with a field of v2 said only "not a
/// property the schema allows"; it says which version has it and how to ask for it. A field
/// that no version has is left as it was.
#[test]
fn a_field_of_a_later_version_names_the_version_and_the_option() {
    let dir = tempfile::tempdir().unwrap();
    let mut recipe: serde_json::Value =
        serde_json::from_slice(&std::fs::read(root().join("iso/examples/seed-linux.json")).unwrap()).unwrap();
    recipe["target_disk_hints"] = serde_json::json!({"serial": "PD-TARGET-0001"});
    recipe["target_disk_hint"] = serde_json::json!(1);
    let file = dir.path().join("recipe.json");
    std::fs::write(&file, serde_json::to_vec_pretty(&recipe).unwrap()).unwrap();
    let out = run(dispatcher().arg("check").arg(&file));
    assert_eq!(out.code, 65, "{}", out.stdout);
    let line = |path: &str| out.stdout.lines().find(|l| l.contains(&format!(": {path}: "))).unwrap().to_owned();
    assert!(
        line("/target_disk_hints").ends_with(
            ": /target_disk_hints: is not a property the schema allows (additionalProperties is false); \
             schema v2 has it: use --schema-version 2 [additionalProperties]"
        ),
        "{}",
        out.stdout
    );
    assert!(!line("/target_disk_hint").contains("schema v2"), "{}", out.stdout);
    let v2 = run(dispatcher().arg("check").arg(&file).args(["--schema-version", "2"]));
    assert!(!v2.stdout.contains("/target_disk_hints"), "{}", v2.stdout);
    let render = run(dispatcher().arg("render").arg(&file).arg("--output").arg(dir.path().join("out")));
    assert_eq!(render.code, 65);
    assert!(render.stderr.contains("schema v2 has it: use --schema-version 2"), "{}", render.stderr);
}

#[test]
fn usage_errors_are_64() {
    for args in [
        &["check"][..],
        &["check", "a", "b"],
        &["check", "a", "--format", "xml"],
        &["frobnicate"],
        &["check", "--nope", "a"],
    ] {
        let out = run(dispatcher().args(args));
        assert_eq!(out.code, 64, "{args:?}");
        assert!(out.stderr.contains("provision-dispatcher:"), "{args:?}: {}", out.stderr);
    }
    for args in [&["--help"][..], &["check", "--help"], &["--version"]] {
        let out = run(dispatcher().args(args));
        assert_eq!(out.code, 0, "{args:?}");
        assert!(!out.stdout.is_empty());
    }
}

/// A recipe whose every value is a unique marker, broken in each way the checker knows, must
/// never show a marker on stdout or stderr, in either format. (Keys are not values: a path
/// names the unexpected or duplicate property itself, as SPEC §3 asks.)
#[test]
fn recipe_values_never_reach_the_output() {
    let dir = tempfile::tempdir().unwrap();
    let variants = leak_variants();
    for (name, text) in &variants {
        let file = dir.path().join(format!("{name}.json"));
        std::fs::write(&file, text).unwrap();
        for format in ["human", "json"] {
            let out = run(dispatcher().args(["check", "--format", format]).arg(&file));
            assert_ne!(out.code, 0, "{name} should fail");
            for output in [&out.stdout, &out.stderr] {
                assert!(!output.contains("MARK"), "{name} ({format}) leaked a value:\n{output}");
            }
        }
    }
}

/// Recipes where every string is `MARK<n>...`, each failing a different rule.
fn leak_variants() -> Vec<(&'static str, String)> {
    let base = |task_target: &str, disk: &str, size: &str, guid: &str, extra: &str| {
        format!(
            r#"{{"task_target": "{task_target}", "target_disk": "{disk}", "oci_url": "MARK3", "firmware_url": "MARK4 not a uri",
            "recipe_version": "MARK5", "user_data": "MARK6", "unattend_xml": "MARK7", "ks_cfg": "MARK8",
            "partition_layout": [{{"size": "{size}", "type_guid": "{guid}", "format": "MARK9", "label": "MARK10MARK10MARK10MARK10MARK10MARK10"}}],
            "metadata": {{"owner": "MARK12"}}, "unexpected_key": "MARK14"{extra}}}"#
        )
    };
    vec![
        ("schema", base("MARK1", "MARK2", "MARK15", "MARK16", "")),
        ("safety", base("reboot.target", "/dev/mapper/../MARK2", "9P", "ef00", "")),
        (
            "control-character",
            base("install-esxi.target", "/dev/sda", "1G", "ef00", r#", "$schema": "MARK17\nMARK18""#),
        ),
        ("duplicate-key", base("install-esxi.target", "/dev/sda", "1G", "ef00", r#", "oci_url": "MARK19""#)),
        ("syntax", "{\"task_target\": \"MARK1\", \"user_data\": \"MARK6\" \"MARK20\"}".to_owned()),
        ("trailing", "{\"task_target\": \"MARK1\"} \"MARK21\"".to_owned()),
        ("bad-escape", "{\"user_data\": \"MARK6 \\q MARK22\"}".to_owned()),
        ("control-in-string", "{\"user_data\": \"MARK6\u{1} MARK23\"}".to_owned()),
        (
            "too-deep",
            format!("{{\"user_data\": \"MARK6\", \"metadata\": {}\"MARK24\"{}}}", "[".repeat(300), "]".repeat(300)),
        ),
        ("big-number", "{\"metadata\": {\"n\": 1e999999}, \"user_data\": \"MARK6\"}".to_owned()),
    ]
}

/// Issue 32 #2: once `--format json` was given, a usage problem (an allowlist that cannot be
/// read, an option this command does not take, a schema version it does not know) is one JSON
/// object on stdout too, with 64.
#[test]
fn a_usage_problem_after_the_format_is_one_json_object() {
    let recipe = root().join("iso/examples/seed-esxi.json");
    let dir = tempfile::tempdir().unwrap();
    for extra in [
        vec!["--allowed-targets".to_owned(), dir.path().display().to_string()],
        vec!["--allowed-targets".to_owned(), dir.path().join("missing").display().to_string()],
        vec!["--no-such-option".to_owned()],
        vec!["--schema-version".to_owned(), "9".to_owned()],
    ] {
        let out = run(dispatcher().arg("check").arg(&recipe).args(["--format", "json"]).args(&extra));
        assert_eq!(out.code, 64, "{extra:?}");
        assert_eq!(out.stdout.lines().count(), 1, "{extra:?}: {}", out.stdout);
        let report: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
        assert_eq!((report["valid"].as_bool(), report["error"].as_str()), (Some(false), Some("usage")), "{extra:?}");
        assert!(!report["reason"].as_str().unwrap().is_empty());
    }
}
