//! The README's tables, checked against the real binary so that they cannot drift (issue 32):
//! every exit code of its table is produced by the scenario it describes; every option a
//! command's `--help` lists is in the README's command table (or among the options it says
//! are shared), and every option the table names is one the command takes; each documented
//! limit is tried at the limit and one past it.

mod common;

use std::collections::BTreeSet;
use std::path::Path;

use common::machine::{example, media, run_command, Machine};
use common::{dispatcher, root, run};
use provision_dispatcher::failure::Exit;
use serde_json::{json, Value};

fn readme() -> String {
    std::fs::read_to_string(root().join("README.md")).unwrap()
}

/// The rows of the table that follows `heading` (the first table after it).
fn table_after(readme: &str, heading: &str) -> Vec<Vec<String>> {
    let start = readme.find(heading).unwrap_or_else(|| panic!("README.md has no {heading:?}"));
    let rows: Vec<&str> =
        readme[start..].lines().skip_while(|l| !l.starts_with('|')).take_while(|l| l.starts_with('|')).collect();
    rows.iter()
        .skip(2)
        .map(|row| {
            // `\|` inside a cell is a literal bar.
            let row = row.replace("\\|", "\u{1}");
            row.trim_matches('|').split('|').map(|cell| cell.trim().replace('\u{1}', "|")).collect()
        })
        .collect()
}

/// Every `--option` in `text`.
fn options_in(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .filter(|w| w.starts_with("--") && w.len() > 2)
        .map(str::to_owned)
        .collect()
}

#[test]
fn every_exit_code_of_the_table_is_what_the_binary_gives() {
    let rows = table_after(&readme(), "### Exit codes");
    let documented: BTreeSet<i32> = rows.iter().map(|r| r[0].parse().expect("a code")).collect();
    let known: BTreeSet<i32> = Exit::ALL.iter().map(|e| i32::from(e.code())).collect();
    assert_eq!(documented, known, "the README's exit codes are the binary's");
    let dir = tempfile::tempdir().unwrap();
    let unsigned_trust = dir.path().join("allowed_signers");
    let key = std::fs::read_to_string(root().join("tests/keys/test-only-trusted.pub")).unwrap();
    std::fs::write(&unsigned_trust, format!("ops {key}")).unwrap();
    let broken_schema = dir.path().join("broken.schema.json");
    std::fs::write(&broken_schema, "{ not json").unwrap();
    let full = dir.path().join("full");
    std::fs::create_dir(&full).unwrap();
    std::fs::write(full.join("keep"), "").unwrap();
    let example_file = |name: &str| root().join(format!("iso/examples/{name}.json"));
    let check = |args: &[&dyn AsRef<std::ffi::OsStr>]| {
        let mut cmd = dispatcher();
        cmd.arg("check");
        for arg in args {
            cmd.arg(arg);
        }
        run(&mut cmd).code
    };
    for code in &documented {
        let got = match code {
            0 => check(&[&example_file("seed-linux")]),
            64 => check(&[&"--no-such-option"]),
            65 => check(&[&example_file("seed-invalid-linux")]),
            66 => check(&[&dir.path().join("missing.json")]),
            69 => {
                let machine = Machine::new();
                machine.dispatch(media(&example("seed-esxi")).path(), None, &[]).code
            }
            70 => match panicking_run() {
                Some(code) => code,
                None => continue, // without the fail points (`--features fault-injection`)
            },
            73 => run(dispatcher().arg("render").arg(example_file("seed-esxi")).arg("--output").arg(&full)).code,
            77 => check(&[&example_file("seed-esxi"), &"--allowed-signers", &unsigned_trust]),
            78 => check(&[&example_file("seed-esxi"), &"--schema", &broken_schema]),
            other => panic!("the table has code {other}, which this test cannot produce: add its scenario"),
        };
        assert_eq!(got, *code, "the scenario of exit code {code}");
    }
}

/// A panic inside `run` (a fail point): the internal error's 70.
fn panicking_run() -> Option<i32> {
    if !cfg!(feature = "fault-injection") {
        return None;
    }
    let machine = Machine::new();
    let media = media(&example("seed-esxi"));
    let mut cmd = run_command(media.path(), &machine.state(), &machine.output(), "unix:path=/nonexistent");
    cmd.args(["--wait", "1", "--no-start"]).env("PROVISION_DISPATCHER_FAILPOINTS", "validate.started=panic");
    Some(run(&mut cmd).code)
}

#[test]
fn the_command_table_names_exactly_the_options_each_command_takes() {
    let readme = readme();
    let rows = table_after(&readme, "## Commands");
    let shared_start = readme.find("Options shared by `check`").expect("the shared options' paragraph");
    let shared_end = shared_start + readme[shared_start..].find("\n\n").unwrap();
    let shared = options_in(&readme[shared_start..shared_end]);
    for command in ["check", "render", "run", "report"] {
        let row = rows
            .iter()
            .find(|r| r[0].starts_with(&format!("`provision-dispatcher {command} ")))
            .unwrap_or_else(|| panic!("no row for {command}"));
        let named = options_in(&row[0]);
        let help = options_in(&run(dispatcher().args([command, "--help"])).stdout);
        let takes_shared = command != "report";
        // `--help` and `--version` are every command's, and the README says so once.
        for option in help.iter().filter(|o| !["--help", "--version"].contains(&o.as_str())) {
            let documented = named.contains(option) || (takes_shared && shared.contains(option));
            assert!(documented, "{command} --help has {option}, the README's table does not");
        }
        for option in &named {
            assert!(
                help.contains(option),
                "the README's {command} row names {option}, which {command} --help does not"
            );
        }
    }
    for option in &shared {
        for command in ["check", "render"] {
            let help = run(dispatcher().args([command, "--help"])).stdout;
            assert!(help.contains(option.as_str()), "the shared option {option} is not in {command} --help");
        }
    }
}

/// A row of the limits table holds `value`.
fn assert_limit(rows: &[Vec<String>], what: &str, value: &str) {
    let row = rows.iter().find(|r| r[0].starts_with(what)).unwrap_or_else(|| panic!("no limits row {what:?}"));
    assert!(row[1].contains(value), "the limits row {what:?} says {:?}, not {value:?}", row[1]);
}

fn check_text(text: &[u8], schema: Option<&[u8]>) -> (i32, Value) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("r.json"), text).unwrap();
    let mut cmd = dispatcher();
    cmd.args(["check", "--format", "json"]).arg(dir.path().join("r.json"));
    if let Some(schema) = schema {
        std::fs::write(dir.path().join("s.json"), schema).unwrap();
        cmd.arg("--schema").arg(dir.path().join("s.json"));
    }
    let out = run(&mut cmd);
    (out.code, serde_json::from_str(&out.stdout).unwrap())
}

fn codes(report: &Value) -> Vec<String> {
    report["details"].as_array().unwrap().iter().map(|d| d["code"].as_str().unwrap().to_owned()).collect()
}

#[test]
fn every_limit_holds_at_the_limit_and_not_one_past_it() {
    let rows = table_after(&readme(), "## Limits");
    let esxi = |metadata: Value| json!({"task_target": "install-esxi.target", "ks_cfg": "x", "metadata": metadata});

    // The recipe's size: padded with spaces to the byte.
    assert_limit(&rows, "recipe size", "8 MiB");
    let padded = |size: usize| {
        let mut text = serde_json::to_vec(&esxi(json!({}))).unwrap();
        text.resize(size, b' ');
        text
    };
    assert_eq!(check_text(&padded(8 << 20), None).0, 0);
    let (code, report) = check_text(&padded((8 << 20) + 1), None);
    assert_eq!((code, codes(&report)), (65, vec!["maxBytes".to_owned()]));

    // Values: the object, task_target, ks_cfg, metadata, the array and its n elements.
    assert_limit(&rows, "values in a recipe", "16,384");
    let values = |n: usize| serde_json::to_vec(&esxi(json!({"a": vec![1; n]}))).unwrap();
    assert_eq!(check_text(&values(16_384 - 5), None).0, 0);
    let (code, report) = check_text(&values(16_384 - 4), None);
    assert_eq!((code, codes(&report)), (65, vec!["maxValues".to_owned()]));

    // Nesting: the top-level object, metadata, then arrays in it.
    assert_limit(&rows, "nesting", "127 levels");
    let nested = |levels: usize| {
        let arrays = levels - 2;
        let text = serde_json::to_string(&esxi(json!({}))).unwrap();
        let deep = format!("\"metadata\":{{\"a\":{}{}}}", "[".repeat(arrays), "]".repeat(arrays));
        text.replace("\"metadata\":{}", &deep).into_bytes()
    };
    assert_eq!(check_text(&nested(127), None).0, 0);
    let (code, report) = check_text(&nested(128), None);
    assert_eq!((code, report["error"].as_str()), (65, Some("invalid_json")));

    // The schema's size, padded; and the depth of a $ref chain from the top level.
    assert_limit(&rows, "schema size / depth through `$ref`", "1 MiB / 256 levels");
    let canonical = std::fs::read(root().join("iso/recipe.schema.json")).unwrap();
    let recipe = serde_json::to_vec(&esxi(json!({}))).unwrap();
    let schema_of = |size: usize| {
        let mut text = canonical.clone();
        text.resize(size, b' ');
        text
    };
    assert_eq!(check_text(&recipe, Some(&schema_of(1 << 20))).0, 0);
    assert_eq!(check_text(&recipe, Some(&schema_of((1 << 20) + 1))).0, 78);
    let chain = |links: usize| {
        let mut definitions = serde_json::Map::new();
        for i in 0..links {
            definitions.insert(format!("a{i}"), json!({"$ref": format!("#/definitions/a{}", i + 1)}));
        }
        definitions.insert(format!("a{links}"), json!({"type": "string"}));
        let id = "https://shoal.dev/provisioner/recipe.schema.json";
        serde_json::to_vec(&json!({"$id": id, "definitions": definitions, "properties": {"task_target": {"$ref": "#/definitions/a0"}}}))
            .unwrap()
    };
    // definitions/a0 is the first level, a255 the 256th.
    assert_eq!(check_text(&recipe, Some(&chain(255))).0, 0);
    let (code, report) = check_text(&recipe, Some(&chain(256)));
    assert_eq!(code, 78);
    assert!(report["reason"].as_str().unwrap().contains("deeper than 256 levels"), "{report}");

    // A pattern's compiled size: `\w{20}` compiles under 1 MiB, `\w{22}` over it.
    assert_limit(&rows, "a pattern's compiled size", "1 MiB");
    let pattern = |source: &str| {
        serde_json::to_vec(&json!({"$id": "https://shoal.dev/provisioner/recipe.schema.json",
                                   "properties": {"ks_cfg": {"type": "string", "pattern": source}}}))
        .unwrap()
    };
    assert_eq!(check_text(&recipe, Some(&pattern(r"^\w{20}$|^x$"))).0, 0);
    let (code, report) = check_text(&recipe, Some(&pattern(r"^\w{22}$|^x$")));
    assert_eq!(code, 78);
    assert!(report["reason"].as_str().unwrap().contains("exceeds size limit of 1048576 bytes"), "{report}");
}

#[test]
fn render_creates_no_missing_parent() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("missing/out");
    let result =
        run(dispatcher().arg("render").arg(root().join("iso/examples/seed-esxi.json")).arg("--output").arg(&out));
    assert_eq!(result.code, 73, "{}", result.stderr);
    assert!(!Path::new(&dir.path().join("missing")).exists());
}
