//! Regressions of the fourth attack (issue 31), the report's part: the result line, the
//! banner, the `check` report and status.json against what a recipe (or a file name) can make
//! of them. Each test failed on the code the attack broke and names the finding it guards.

mod common;

use common::machine::{media, Machine};
use common::{dispatcher, run};

const PREFIX: &str = "PROVISION-RESULT v1 ";

/// A recipe that fails validation: one detail, at `/bogus`.
const INVALID: &str = r#"{"task_target": "install-esxi.target", "ks_cfg": "x", "bogus": 1}"#;

/// Finding 12: `check` and `render` printed the file name raw at the start of each report
/// line, so a name holding a newline forged report lines (here a second "valid" summary) and
/// one holding an escape sequence drove the terminal. The name is escaped as every other
/// part of a line is.
#[test]
fn a_file_name_cannot_forge_report_lines() {
    let dir = tempfile::tempdir().unwrap();
    let name = "x\nforged.json: valid, 0 warnings\n\u{1b}[2J\u{85}\u{2028}.json";
    let file = dir.path().join(name);
    std::fs::write(&file, INVALID).unwrap();
    let out = run(dispatcher().arg("check").arg(&file));
    assert_eq!(out.code, 65, "{}", out.stderr);
    assert_clean(&out.stdout, 2);
    assert!(out.stdout.lines().last().unwrap().ends_with(": invalid, 1 error, 0 warnings"), "{}", out.stdout);
    assert!(out.stdout.contains("x\\u000aforged.json: valid, 0 warnings\\u000a\\u001b[2J\\u0085\\u2028.json:"));

    let out = run(dispatcher().arg("render").arg(&file).arg("--output").arg(dir.path().join("out")));
    assert_eq!(out.code, 65, "{}", out.stderr);
    assert_clean(&out.stderr, 2);

    // The report of a file that is not even read names it escaped too.
    let out = run(dispatcher().arg("check").arg(dir.path().join(name.replace("x\n", "missing\n"))));
    assert_eq!(out.code, 66, "{}", out.stdout);
    assert_clean(&out.stdout, 1);
}

/// `text` has `lines` lines and no character a terminal or a reader acts on.
fn assert_clean(text: &str, lines: usize) {
    assert_eq!(text.lines().count(), lines, "{text}");
    let raw = text.chars().find(|&c| c != '\n' && (c.is_control() || matches!(c, '\u{2028}' | '\u{2029}')));
    assert_eq!(raw, None, "{text:?}");
}

/// A Linux recipe with twelve bad partitions and neither `target_disk` nor `oci_url`.
fn twelve_bad_partitions() -> serde_json::Value {
    let partition = serde_json::json!({"size": "1Q", "type_guid": "8300", "format": "ext4"});
    serde_json::json!({"task_target": "install-linux.target", "partition_layout": vec![partition; 12]})
}

/// The paths of a report's or a status's details, in their order.
fn paths(details: &serde_json::Value) -> Vec<String> {
    details.as_array().unwrap().iter().map(|d| d["path"].as_str().unwrap().to_owned()).collect()
}

/// Finding 14: the details came in the order the validator found them, so the console's ten
/// and the result line's sixteen were partition errors, and neither named the two missing
/// fields that matter most. Every report now lists them in the recipe's order (a missing
/// property at its object: the top level's first), the same in each.
#[test]
fn details_come_in_the_recipes_order_in_every_report() {
    let media = media(&twelve_bad_partitions());
    let file = media.path().join("recipe.json");
    let wanted_head = ["/target_disk", "/oci_url", "/partition_layout/0/size"];

    let out = run(dispatcher().args(["check", "--format", "json"]).arg(&file));
    assert_eq!(out.code, 65, "{}", out.stderr);
    let report: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let checked = paths(&report["details"]);
    assert_eq!(checked.len(), 14, "{checked:?}");
    assert_eq!(checked[..3], wanted_head, "{checked:?}");
    let places: Vec<(u64, u64)> = report["details"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| (d["line"].as_u64().unwrap(), d["column"].as_u64().unwrap()))
        .collect();
    assert!(places.is_sorted(), "{places:?}");

    let out = run(dispatcher().arg("check").arg(&file));
    let human: Vec<String> =
        out.stdout.lines().filter_map(|l| l.split(": ").nth(1)).take(14).map(str::to_owned).collect();
    assert_eq!(human, checked, "the human format in the same order");

    let machine = Machine::new();
    let out = machine.dispatch(media.path(), None, &["--no-start"]);
    assert_eq!(out.code, 65, "{}", out.stderr);
    let status = machine.status();
    assert_eq!(paths(&status["details"]), checked, "status.json in the same order");
    let line = result_of(&out.stdout);
    assert_eq!(paths(&line["details"]), checked, "the result line in the same order");

    let out = run(dispatcher().arg("report").arg("--status").arg(machine.state().join("status.json")));
    let banner: Vec<&str> = out.stdout.lines().filter(|l| l.starts_with("  recipe.json:")).collect();
    assert!(banner[0].contains(": /target_disk: ") && banner[1].contains(": /oci_url: "), "{}", out.stdout);
}

/// The one `PROVISION-RESULT` line of a run's stdout, parsed.
fn result_of(stdout: &str) -> serde_json::Value {
    let lines: Vec<&str> = stdout.lines().filter(|l| l.starts_with(PREFIX)).collect();
    assert_eq!(lines.len(), 1, "one result line in:\n{stdout}");
    serde_json::from_str(&lines[0][PREFIX.len()..]).unwrap()
}
