//! Arbitrary bytes through the strict reader, every static check and both report formats,
//! as `provision-dispatcher check` does, and the details through status.json, the banner and
//! the result line, as `run` and `report` show them. Beyond "never panics, never hangs", it
//! asserts what docs/ promise of a report: one JSON object; one human line per detail;
//! positions inside the file, in the file's order; paths within their bound; no recipe value in
//! any message (a value of 8 characters or more that is not in the dispatcher's own words);
//! a result line of printable ASCII within 4,096 bytes that counts what it leaves out; a
//! banner within its screen; and that a recipe the checks pass builds its outputs.

#![no_main]

use std::fs;
use std::path::Path;
use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use provision_dispatcher::issues::{Detail, MAX_PATH_BYTES};
use provision_dispatcher::outputs::Outputs;
use provision_dispatcher::recipe;
use provision_dispatcher::recipe::model::{Recipe, Valid};
use provision_dispatcher::report::banner::{self, COLUMNS, CONSOLE_ROWS};
use provision_dispatcher::report::columns::width;
use provision_dispatcher::report::result::{ResultLine, MAX_LINE_BYTES};
use provision_dispatcher::report::status::{State, Status};
use provision_dispatcher::report::Report;
use provision_dispatcher::schema::CANONICAL_TEXT;
use provision_dispatcher_fuzz::{check, SCHEMA};
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let (report, value) = match recipe::parse(data.to_vec()) {
        Ok(doc) => {
            let recipe = Recipe::view(&doc);
            let findings = check(&recipe);
            let has_errors = findings.has_errors();
            let valid = Valid::new(&recipe, &findings);
            assert_eq!(valid.is_some(), !has_errors, "a recipe without errors has a valid form");
            if let Some(valid) = &valid {
                Outputs::new(valid, SCHEMA.id().unwrap_or_default(), Path::new("/run/provision"), None);
            }
            let report = Report::of_findings(&doc, findings);
            assert_eq!(report.valid(), !has_errors);
            (report, Some(doc.value().clone()))
        }
        // A recipe refused for its duplicate keys still has values that must not leak.
        Err(error) => (Report::of_read_error(&error), serde_json::from_slice(data).ok()),
    };
    let details = || report.details.iter().chain(&report.warnings);

    let json: Value = serde_json::from_str(&report.to_json()).expect("the JSON report parses");
    assert!(json.is_object() && !report.to_json().contains('\n'), "one JSON object on one line");
    assert_eq!(json["valid"], report.valid());

    let human = report.to_human("recipe.json");
    assert_eq!(
        human.lines().count(),
        details().count() + 1,
        "one human line per detail and one summary line:\n{human}"
    );

    let lines: Vec<&[u8]> = data.split(|&b| b == b'\n').collect();
    for detail in details() {
        assert_within(detail, &lines);
        assert!(detail.path.len() <= MAX_PATH_BYTES, "a path of {} bytes", detail.path.len());
    }
    for list in [&report.details, &report.warnings] {
        let places: Vec<(usize, usize)> = list.iter().map(|d| (d.line, d.column)).collect();
        assert!(places.is_sorted(), "details in the file's order: {places:?}");
    }
    assert_shown_whole(&report);

    let mut values = Vec::new();
    if let Some(value) = &value {
        secret_candidates(value, &mut values);
    }
    let messages = details().map(|d| d.message.as_str()).chain(report.reason.as_deref());
    for message in messages {
        for secret in &values {
            assert!(!occurs(secret, message), "a recipe value leaks: {secret:?} in {message:?}");
        }
    }
});

/// The details as a failed run shows them: the result line is printable ASCII, fits one
/// console write and counts what it leaves out; the console banner fits its screen.
fn assert_shown_whole(report: &Report) {
    let mut status = Status::running("2026-11-24T00:00:00Z".into(), None);
    status.state = State::Failed;
    status.details = report.details.clone();
    status.warnings = report.warnings.clone();
    status.bound();
    let result = ResultLine::new(&status, Some(b"{}"));
    let line = result.line();
    assert!(line.len() <= MAX_LINE_BYTES, "a result line of {} bytes", line.len());
    assert!(line[..line.len() - 1].bytes().all(|b| (b' '..=b'~').contains(&b)), "{line:?}");
    assert_eq!(result.details.len() + result.details_omitted, report.details.len());
    let screen = banner::console(&status);
    assert!(screen.lines().count() <= CONSOLE_ROWS, "{screen}");
    assert!(screen.lines().all(|row| width(row) <= COLUMNS), "{screen}");
}

/// Whether `needle` occurs in `haystack`, compared byte by byte. `str::contains` compares
/// with `memcmp`, which libFuzzer intercepts and mines for words: the fuzzer would learn the
/// messages' own words, put them in recipe values and report them as leaks.
fn occurs(needle: &str, haystack: &str) -> bool {
    let (needle, haystack) = (needle.as_bytes(), haystack.as_bytes());
    needle.len() <= haystack.len()
        && (0..=haystack.len() - needle.len()).any(|start| {
            let mut i = 0;
            while i < needle.len() && haystack[start + i] == needle[i] {
                i += 1;
            }
            i == needle.len()
        })
}

/// Lines and columns are 1-based; a column may stand one past the end of its line (where
/// the text ends before a value is complete).
fn assert_within(detail: &Detail, lines: &[&[u8]]) {
    let line = detail.line.checked_sub(1).and_then(|i| lines.get(i));
    let inside = line.is_some_and(|line| (1..=line.len() + 1).contains(&detail.column));
    assert!(inside, "{detail:?} lies outside the input ({} lines)", lines.len());
}

/// The dispatcher's own words: the schema, and every message the checks give the recipes of
/// `iso/examples`, which draw every rule and lint. A recipe value found in them proves nothing
/// (the fuzzer finds `" Windows"` and `"a key of its"` quickly enough).
static VOCABULARY: LazyLock<String> = LazyLock::new(|| {
    let mut words = CANONICAL_TEXT.to_owned();
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../iso/examples");
    for entry in fs::read_dir(&examples).expect("iso/examples is there") {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "json") && !path.to_string_lossy().ends_with(".expect.json") {
            let report = match recipe::parse(fs::read(&path).unwrap()) {
                Ok(doc) => Report::of_findings(&doc, check(&Recipe::view(&doc))),
                Err(error) => Report::of_read_error(&error),
            };
            for detail in report.details.iter().chain(&report.warnings) {
                words.push('\n');
                words.push_str(&detail.message);
            }
        }
    }
    words
});

/// String values (not keys) long enough and foreign enough to the dispatcher's own words
/// that a message containing one can only have copied it from the recipe.
fn secret_candidates(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::String(s) if s.chars().count() >= 8 && !VOCABULARY.contains(s.as_str()) => out.push(s.clone()),
        Value::Array(items) => items.iter().for_each(|v| secret_candidates(v, out)),
        Value::Object(map) => map.values().for_each(|v| secret_candidates(v, out)),
        _ => {}
    }
}
