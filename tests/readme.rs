//! The README as the entry (issue 41) and the documentation's tables tried against the real
//! binary (issue 32), so that neither can drift: the README fits its budget, points to every
//! page and says nothing a page says again; `.ci/run` runs its test command; its first look
//! runs as written, with the defaults it names; every exit code of the operator's table is
//! produced by the scenario it describes; each limit of the reference's table is tried at the
//! limit and one past it.

mod common;

use std::collections::BTreeSet;
use std::path::Path;

use common::docs::{page, pages, section, table_after};
use common::machine::{example, media, run_command, Machine};
use common::{dispatcher, root, run};
use provision_dispatcher::cmd::run::defaults;
use provision_dispatcher::failure::Exit;
use serde_json::{json, Value};

/// The README's budget: what a newcomer reads before choosing a page.
const README_LINES: usize = 250;

#[test]
fn the_readme_is_an_entry_to_every_page_and_repeats_none() {
    let readme = page("README.md");
    assert!(readme.lines().count() <= README_LINES, "README.md has {} lines", readme.lines().count());
    let readers = section(&readme, "## Where to read next");
    for path in pages().iter().filter(|p| p.starts_with("docs/")) {
        assert!(readers.contains(&format!("]({path})")), "the README's table of readers does not link {path}");
    }
    // A sentence of the README in a page would be said twice: no line of prose or code of any
    // length is in both.
    let lines = |text: &str| -> BTreeSet<String> {
        text.lines().map(str::trim).filter(|l| l.len() >= 40 && !l.starts_with("|---")).map(str::to_owned).collect()
    };
    let ours = lines(&readme);
    for path in pages().iter().filter(|p| p.starts_with("docs/")) {
        let twice: Vec<String> = lines(&page(path)).intersection(&ours).cloned().collect();
        assert!(twice.is_empty(), "README.md and {path} both say: {twice:#?}");
    }
}

/// `.ci/run` runs exactly the test command of the README's quick start.
#[test]
fn ci_runs_exactly_the_readmes_test_command() {
    let readme = page("README.md");
    let quick = section(&readme, "## Quick start");
    let block = quick.split("```sh\n").nth(1).unwrap().split("```").next().unwrap();
    let commands: Vec<&str> = block.lines().map(|l| l.split('#').next().unwrap().trim()).collect();
    assert_eq!(commands, ["cargo xtask demo", "cargo xtask ci"], "the README's two commands");
    let ci = std::fs::read_to_string(root().join(".ci/run")).unwrap();
    let last = ci.lines().rfind(|l| !l.trim().is_empty() && !l.starts_with('#')).unwrap();
    assert_eq!(last.trim(), "exec cargo xtask ci", ".ci/run's command");
}

/// The README's first look, as written, with this build's binary for `cargo build`'s: each
/// command exits as its comment says (0 where it says nothing), and the last shows the banner.
#[test]
fn the_readmes_first_look_runs_as_written() {
    let readme = page("README.md");
    let quick = section(&readme, "## Quick start");
    let start = quick.find("**A first look on the host").expect("the first look");
    let block = quick[start..].split("```sh\n").nth(1).unwrap().split("```").next().unwrap();
    let mut lines = block.lines();
    assert_eq!(lines.next(), Some("cargo build --release && B=target/release/provision-dispatcher"));
    let mut script = format!("B='{}'\n", env!("CARGO_BIN_EXE_provision-dispatcher"));
    let mut expected = vec![];
    for line in lines {
        script.push_str(&format!("{line}\necho $? >&3\n"));
        let comment = line.split_once('#').map(|(_, c)| c).unwrap_or_default();
        let code = comment.split(|c: char| !c.is_ascii_digit()).find(|w| !w.is_empty()).unwrap_or("0");
        expected.push(code.parse::<i32>().unwrap());
    }
    let tmp = tempfile::tempdir().unwrap();
    let codes = tmp.path().join("codes");
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("exec 3>'{}'\n{script}", codes.display()))
        .current_dir(root())
        .env("TMPDIR", tmp.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let got: Vec<i32> = std::fs::read_to_string(&codes).unwrap().lines().map(|l| l.parse().unwrap()).collect();
    assert_eq!(got, expected, "the first look's exit codes:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("PROVISIONING RENDERED (nothing started)"), "{stdout}");
    assert!(stdout.contains("TASK_TARGET=\"install-esxi.target\""), "{stdout}");
}

/// What the README says `run`'s defaults do is what they are.
#[test]
fn the_readmes_defaults_are_the_binarys() {
    let readme = page("README.md");
    let start = readme.find("`run` with its defaults is the boot path").expect("the defaults' paragraph");
    let paragraph = &readme[start..start + readme[start..].find("\n\n").unwrap()];
    let paragraph = paragraph.split_whitespace().collect::<Vec<_>>().join(" ");
    for default in [
        format!("`{}`", defaults::OUTPUT),
        format!("`{}`", defaults::STATE_DIR),
        format!("labelled `{}`", defaults::LABEL),
        format!("for up to {} s", defaults::WAIT.as_secs()),
    ] {
        assert!(paragraph.contains(&default), "the README's defaults lack {default}: {paragraph}");
    }
}

#[test]
fn every_exit_code_of_the_table_is_what_the_binary_gives() {
    let rows = table_after(&page("docs/operator.md"), "## Exit codes");
    let documented: BTreeSet<i32> = rows.iter().map(|r| r[0].parse().expect("a code")).collect();
    let known: BTreeSet<i32> = Exit::ALL.iter().map(|e| i32::from(e.code())).collect();
    assert_eq!(documented, known, "the operator's exit codes are the binary's");
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
    let rows = table_after(&page("docs/reference.md"), "## Limits");
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

    // The image's allowlist: comment lines to the byte, then one past it (64 from `check`).
    assert_limit(&rows, "the image's allowlist of targets", "64 KiB");
    let dir = tempfile::tempdir().unwrap();
    let allowlist = |size: usize| {
        let mut text = b"install-esxi.target\n".to_vec();
        text.resize(size - 1, b'#');
        text.push(b'\n');
        let file = dir.path().join(format!("allowed-targets-{size}"));
        std::fs::write(&file, text).unwrap();
        file
    };
    let with_allowlist = |file: &Path| {
        run(dispatcher()
            .arg("check")
            .arg(root().join("iso/examples/seed-esxi.json"))
            .arg("--allowed-targets")
            .arg(file))
        .code
    };
    assert_eq!(with_allowlist(&allowlist(64 << 10)), 0);
    assert_eq!(with_allowlist(&allowlist((64 << 10) + 1)), 64);
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
