//! Regressions of the fourth attack (issue 31), the report's part: the result line, the
//! banner, the `check` report and status.json against what a recipe (or a file name) can make
//! of them. Each test failed on the code the attack broke and names the finding it guards.

mod common;

use std::path::Path;

use common::limits::limited;
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

/// A console log as a BMC keeps it: CRLF line ends, a getty's prompt before the line.
fn console_log(stdout: &str) -> Vec<u8> {
    let line = stdout.lines().find(|l| l.starts_with(PREFIX)).expect("a result line");
    format!("[   12.345678] boot\r\nmaintenance login: {line}\r\n").into_bytes()
}

/// Finding 3: U+2028, U+2029 and U+0085 in a key reached the result line raw, and the
/// documented Python reader splits lines there: a key holding `PROVISION-RESULT v1 {}`
/// between two U+2028 made it return `{}` instead of the failure. The line is printable
/// ASCII now, every other character escaped, and both readers read the failure, of any job
/// and of this one.
#[test]
fn a_key_cannot_break_the_result_line_for_the_documented_readers() {
    let breaks = "\u{b}\u{c}\u{1c}\u{1d}\u{1e}\u{7f}\u{85}\u{9b}\u{2029}Ņ";
    let mut recipe = common::machine::example("seed-esxi");
    recipe[format!("\u{2028}PROVISION-RESULT v1 {{}}\u{2028}{breaks}")] = 1.into();
    // Issue 39: the readers try every prefix on a row (a cut line and a whole one may share
    // it), but one inside a line read whole is its text: else the text between two in a key,
    // `{}`, would be the last line of any job's.
    recipe["PROVISION-RESULT v1 {}PROVISION-RESULT v1 x"] = 2.into();
    let media = media(&recipe);
    let machine = Machine::new();
    let out = machine.dispatch(media.path(), None, &["--no-start"]);
    assert_eq!(out.code, 65, "{}", out.stderr);
    let text = out.stdout.lines().find(|l| l.starts_with(PREFIX)).unwrap();
    assert!(text.bytes().all(|b| (b' '..=b'~').contains(&b)), "{text:?}");
    let line = result_of(&out.stdout);
    for (job, read) in [(None, "any job"), (line["recipe_sha256"].as_str(), "this job")] {
        for said in common::readers::results(&console_log(&out.stdout), job) {
            assert_eq!((&said["state"], &said["exit_code"]), (&"failed".into(), &65.into()), "{read}: {said}");
        }
    }
    let report =
        run(dispatcher().args(["report", "--format", "json", "--status"]).arg(machine.state().join("status.json")));
    assert!(report.stdout.trim_end().bytes().all(|b| (b' '..=b'~').contains(&b)), "{:?}", report.stdout);
    assert_eq!(result_of(&out.stdout), serde_json::from_str::<serde_json::Value>(&report.stdout).unwrap());
}

/// Finding 13: the result line named the target of runs that started nothing (`--no-start`;
/// outputs unwritable, 73), where the docs say a target appears once it was started.
/// status.json keeps it from validation on.
#[test]
fn the_result_line_names_a_target_only_once_started() {
    let media = media(&common::machine::example("seed-esxi"));
    let machine = Machine::new();
    let out = machine.dispatch(media.path(), None, &["--no-start"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(machine.status()["target"], "install-esxi.target");
    let line = result_of(&out.stdout);
    assert_eq!((line["state"].as_str(), &line["target"]), (Some("rendered"), &serde_json::Value::Null));

    let machine = Machine::new();
    std::fs::create_dir_all(machine.output()).unwrap();
    std::fs::write(machine.output().join("not-ours"), "").unwrap();
    let out = machine.dispatch(media.path(), None, &["--no-start"]);
    assert_eq!(out.code, 73, "{}", out.stderr);
    assert_eq!(machine.status()["target"], "install-esxi.target");
    let line = result_of(&out.stdout);
    assert_eq!((line["failure"].as_str(), &line["target"]), (Some("outputs_unwritable"), &serde_json::Value::Null));
}

/// Finding 4: the result line had no length bound: one unknown key of 64 KiB made a line of
/// 66 KB, cut by every console write (a UART takes about 4 KiB). It fits 4,096 bytes now,
/// a long path shortened with a marker, and says how many details it left out.
#[test]
fn the_result_line_fits_one_console_write() {
    let mut recipe = common::machine::example("seed-esxi");
    recipe["k".repeat(64 * 1024)] = 1.into();
    for i in 0..40 {
        recipe[format!("{i:02}{}", "😀".repeat(256))] = 1.into();
    }
    let media = media(&recipe);
    let machine = Machine::new();
    let out = machine.dispatch(media.path(), None, &["--no-start"]);
    assert_eq!(out.code, 65, "{}", out.stderr);
    let line = out.stdout.lines().find(|l| l.starts_with(PREFIX)).unwrap();
    assert!(line.len() < 4096, "{} bytes", line.len());
    let result = result_of(&out.stdout);
    // Forty paths of 256 escaped bytes do not all fit: the first ones do, the rest are counted.
    let shown = result["details"].as_array().unwrap();
    assert!((10..16).contains(&shown.len()), "{result}");
    assert_eq!(shown.len() as u64 + result["details_omitted"].as_u64().unwrap(), 41, "{result}");
    assert!(shown.iter().all(|d| d["path"].as_str().unwrap().contains(" bytes cut)…")), "{result}");
    let report =
        run(dispatcher().args(["report", "--format", "json", "--status"]).arg(machine.state().join("status.json")));
    assert!(report.stdout.len() < 4096 - PREFIX.len(), "{}", report.stdout.len());
}

/// Runs `report` (human and JSON) on `status` within `provision-failed.service`'s memory
/// limit, `MemoryMax=32M`, taken as an address-space limit (stricter: it counts every mapping,
/// resident or not): 16 MiB above what `report` of an empty status needs here. The rest of the
/// 32 MiB is the binary's own: the shipped static one reads an empty status in under 8 MiB of
/// address space (docs/reference.md, Limits); this debug build, linked dynamically, in about 22.
fn report_within_the_failure_units_limit(status: &Path) -> [std::process::Output; 2] {
    let unit = std::fs::read_to_string(common::root().join("systemd/provision-failed.service")).unwrap();
    assert!(unit.lines().any(|l| l == "MemoryMax=32M"), "the unit's limit changed: change this test");
    let report = |format: &str, status: &Path| {
        let mut cmd = dispatcher();
        cmd.args(["report", "--format", format, "--status"]).arg(status);
        cmd
    };
    let empty = tempfile::tempdir().unwrap();
    provision_dispatcher::report::status::Status::running("t".into(), None).write(empty.path()).unwrap();
    let baseline = common::limits::smallest_address_space(|| report("human", &empty.path().join("status.json")));
    ["human", "json"].map(|format| limited(&mut report(format, status), baseline + (16 << 20)))
}

/// Finding 5: a detail repeated the whole path, so one 1 MiB key over 3,000 repeated keys ran
/// out of memory (70, where 65 was due), and a 67 KB recipe (a 64 KiB key over 250 repeats)
/// made `run` write a 16 MiB status.json that `report` could not read within the failure
/// unit's memory limit: the banner was lost.
#[test]
fn repeated_keys_under_a_long_key_are_reported_in_bounded_room() {
    let repeats = |key: &str, n: usize| format!("{{\"{key}\": {{{}}}}}", vec!["\"a\": 1"; n].join(","));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("recipe.json");
    std::fs::write(&file, repeats(&"k".repeat(1 << 20), 3000)).unwrap();
    let out = run(dispatcher().args(["check", "--format", "json"]).arg(&file));
    assert_eq!(out.code, 65, "{}", &out.stdout[..out.stdout.len().min(400)]);
    let report: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(report["details"].as_array().unwrap().len(), 2999, "check lists every one");
    assert!(out.stdout.len() < 2 << 20, "{} bytes", out.stdout.len());

    let media = tempfile::tempdir().unwrap();
    std::fs::write(media.path().join("recipe.json"), repeats(&"k".repeat(64 << 10), 250)).unwrap();
    std::fs::copy(common::root().join("iso/recipe.schema.json"), media.path().join("recipe.schema.json")).unwrap();
    let machine = Machine::new();
    let out = machine.dispatch(media.path(), None, &["--no-start"]);
    assert_eq!(out.code, 65, "{}", out.stderr);
    let status_file = machine.state().join("status.json");
    assert!(std::fs::metadata(&status_file).unwrap().len() < 256 << 10);
    assert_eq!(machine.status()["details"].as_array().unwrap().len(), 249);
    for out in report_within_the_failure_units_limit(&status_file) {
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert!(String::from_utf8_lossy(&out.stdout).contains("duplicateKey"));
    }
}

/// Finding 5, the proof: the largest status.json `run` can write (every string and list far
/// past its bound, every character one that JSON escapes in six bytes, as `Status::write`
/// bounds them; since issue 40, with the disks of a machine of 4,000) is read by `report`
/// within the failure unit's memory limit.
#[test]
fn report_reads_the_largest_status_within_the_failure_units_limit() {
    use provision_dispatcher::disks::verdict::{Listed, Verdict};
    use provision_dispatcher::disks::Disk;
    use provision_dispatcher::failure::{Failure, Phase};
    use provision_dispatcher::issues::Detail;
    use provision_dispatcher::report::status::{
        Dispatch, End, State, Status, MAX_END_UNITS, MAX_KEPT, MAX_STATUS_BYTES,
    };

    let long = |n: usize| "\u{1}".repeat(n);
    let detail = |i: usize| Detail {
        path: long(4096),
        code: long(4096),
        message: long(4096),
        line: i,
        column: i,
        file: Some(long(4096)),
        known: vec![long(4096); 64],
    };
    let mut status = Status::running(long(1 << 16), None);
    status.state = State::Failed;
    status.failure = Some(Failure::ValidationError);
    status.phase = Some(Phase::Validate);
    status.exit_code = 65;
    status.message = long(1 << 16);
    for field in [&mut status.media, &mut status.schema_id, &mut status.target, &mut status.job] {
        *field = Some(long(1 << 16));
    }
    status.recipe_sha256 = Some(long(1 << 16));
    status.lockdown = Some(long(1 << 16));
    status.finished_at = Some(long(1 << 16));
    status.signature = Some(provision_dispatcher::trust::Signer {
        principal: long(1 << 16),
        fingerprint: long(1 << 16),
        namespace: long(1 << 16),
    });
    status.dispatch = Some(Dispatch {
        recipe_sha256: long(1 << 16),
        target: long(1 << 16),
        job: Some(long(1 << 16)),
        at: long(1 << 16),
    });
    status.details = (0..4 * MAX_KEPT).map(detail).collect();
    status.warnings = (0..4 * MAX_KEPT).map(detail).collect();
    // The end of the dispatch, carried (issue 39): a refused rerun after the task ended.
    status.end = Some(End {
        at: long(1 << 16),
        job_result: Some(long(1 << 16)),
        units: (0..4 * MAX_END_UNITS).map(|_| long(4096)).collect(),
        units_omitted: usize::MAX / 2,
        shutdown: None,
        deadline_secs: u64::MAX,
        timed_out_at: Some(long(1 << 16)),
        bmc_event: None,
    });
    // And the machine's disks after a failed disk check (issue 40), every string and list long.
    let disk = |i: usize| Listed {
        disk: Disk {
            name: long(1 << 16),
            node: long(1 << 16),
            dev: i as u64,
            by_id: vec![long(1 << 16); 8],
            by_path: vec![long(1 << 16); 8],
            wwn: Some(long(1 << 16)),
            serial: Some(long(1 << 16)),
            model: Some(long(1 << 16)),
            vendor: Some(long(1 << 16)),
            size_bytes: u64::MAX,
            rotational: Some(true),
            removable: true,
            transport: Some(long(1 << 16)),
        },
        verdict: Verdict::InUse,
        users: vec![long(1 << 16); 8],
    };
    status.disks = (0..4000).map(disk).collect();
    let dir = tempfile::tempdir().unwrap();
    let written = status.write(dir.path()).unwrap();
    assert!((written.len() as u64) < MAX_STATUS_BYTES, "{} bytes", written.len());
    assert_eq!(status.disks.len() + status.disks_omitted, 4000);
    let [human, json] = report_within_the_failure_units_limit(&dir.path().join("status.json"));
    for out in [&human, &json] {
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    assert!(String::from_utf8_lossy(&human.stdout).contains(&format!("{} problem(s)", 4 * MAX_KEPT)));
    let object: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(
        object["details"].as_array().unwrap().len() as u64 + object["details_omitted"].as_u64().unwrap(),
        4 * MAX_KEPT as u64
    );
    assert!(json.stdout.len() <= 4096 - PREFIX.len(), "the line with its newline within 4096 bytes");
}
