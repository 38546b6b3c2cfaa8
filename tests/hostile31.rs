//! Regressions of the fourth attack (issue 31), the report's part: the result line, the
//! banner, the `check` report and status.json against what a recipe (or a file name) can make
//! of them. Each test failed on the code the attack broke and names the finding it guards.

mod common;

use common::{dispatcher, run};

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
