//! The published schemas (`schemas/`) as the tests hold the product to them: every document a
//! test makes the binary print or write (`check --format json`, `media build`/`media check`'s,
//! the result lines and the inventory of `run` and `follow`, their status.json, `report
//! --format json`, `disks --format json`) is validated as [`super::run`] returns, against the
//! schema made closed: the published schemas let version 1 grow (an object may carry a field
//! they do not list, which a controller ignores), while the product may write no field its
//! schema does not describe.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use serde_json::Value;

use super::{root, Run};

/// The published documents, by the name `schema print` takes and the file the package ships.
pub const NAMES: [&str; 4] = ["result", "inventory", "check", "status"];

pub const RESULT_PREFIX: &str = "PROVISION-RESULT v1 ";
pub const INVENTORY_PREFIX: &str = "PROVISION-INVENTORY v1 ";

/// `schemas/NAME.schema.json` of the source tree, as published.
pub fn published(name: &str) -> Value {
    let path = root().join("schemas").join(format!("{name}.schema.json"));
    serde_json::from_slice(&std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))).unwrap()
}

/// `schema` with every object closed: `additionalProperties: true` made `false`.
pub fn closed(schema: &Value) -> Value {
    match schema {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(key, value)| match (key.as_str(), value) {
                    ("additionalProperties", Value::Bool(true)) => (key.clone(), Value::Bool(false)),
                    _ => (key.clone(), closed(value)),
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(closed).collect()),
        other => other.clone(),
    }
}

/// What is wrong with `document` by `schema`, one line per error (empty: valid).
pub fn errors(schema: &Value, document: &Value) -> Vec<String> {
    let validator = jsonschema::draft7::new(schema).expect("a published schema compiles");
    validator.iter_errors(document).map(|e| format!("{}: {e}", e.instance_path())).collect()
}

/// `document` is valid by `name`'s schema, closed.
pub fn assert_valid(name: &str, document: &Value) {
    static CLOSED: OnceLock<BTreeMap<&'static str, jsonschema::Validator>> = OnceLock::new();
    let validators = CLOSED.get_or_init(|| {
        NAMES.iter().map(|&name| (name, jsonschema::draft7::new(&closed(&published(name))).unwrap())).collect()
    });
    let problems: Vec<String> =
        validators[name].iter_errors(document).map(|e| format!("{}: {e}", e.instance_path())).collect();
    assert!(
        problems.is_empty(),
        "not a valid {name} document by schemas/{name}.schema.json: {problems:#?}\n{document}"
    );
}

/// The inventories printed whole in `text` (a run's stdout: lines are never cut there), each
/// its document.
pub fn inventories(text: &str) -> Vec<Value> {
    let mut found = vec![];
    let mut chunks: Vec<String> = vec![];
    for rest in text.lines().filter_map(|line| line.split_once(INVENTORY_PREFIX).map(|(_, rest)| rest)) {
        let fields: Vec<&str> = rest.splitn(4, ' ').collect();
        let (index, count) = fields[0].split_once('/').expect("index/count");
        if index == "1" {
            chunks.clear();
        }
        chunks.push(fields[3].to_owned());
        if index == count {
            found.push(serde_json::from_str(&chunks.concat()).expect("a whole inventory is JSON"));
        }
    }
    found
}

/// Every document the command `cmd` printed or wrote, by what it is, valid by its schema.
pub fn assert_documents_valid(cmd: &Command, run: &Run) {
    let args: Vec<String> = cmd.get_args().map(|a| a.to_string_lossy().into_owned()).collect();
    let json = args.windows(2).any(|w| w[0] == "--format" && w[1] == "json");
    let command: Vec<&str> = args.iter().take(2).map(String::as_str).collect();
    match command.as_slice() {
        ["check", ..] | ["media", "build" | "check"] if json && !run.stdout.is_empty() => {
            assert_valid("check", &serde_json::from_str(&run.stdout).expect("one JSON object"))
        }
        ["report", ..] if json && run.code == 0 => {
            assert_valid("result", &serde_json::from_str(&run.stdout).expect("one JSON object"))
        }
        ["disks", ..] if json && run.code == 0 => {
            let listed: Value = serde_json::from_str(&run.stdout).expect("one JSON object");
            let inventory = published("inventory");
            let disks = serde_json::json!({
                "type": "object", "additionalProperties": false, "required": ["disks"],
                "properties": {"disks": {"type": "array", "items": {"$ref": "#/definitions/disk"}}},
                "definitions": closed(&inventory["definitions"]),
            });
            let problems = errors(&disks, &listed);
            assert!(problems.is_empty(), "disks --format json: {problems:#?}");
        }
        ["run" | "follow", ..] => {
            let mut last = None;
            for json in run.stdout.lines().filter_map(|l| l.split_once(RESULT_PREFIX).map(|(_, json)| json)) {
                let line: Value = serde_json::from_str(json).expect("a result line is JSON");
                assert_valid("result", &line);
                last = Some(line);
            }
            for inventory in inventories(&run.stdout) {
                assert_valid("inventory", &inventory);
            }
            let state = args.windows(2).find(|w| w[0] == "--state-dir").map(|w| PathBuf::from(&w[1]));
            if let (Some(line), Some(state)) = (last, state) {
                status_as_written(&line, &state.join("status.json"));
            }
        }
        _ => {}
    }
}

/// status.json, when it is the one `line` was made from (its digest): a refused state
/// directory, or a status a test wrote itself, is not the product's.
fn status_as_written(line: &Value, path: &Path) {
    let Ok(bytes) = std::fs::read(path) else { return };
    let digest: String = sha2::Digest::finalize(<sha2::Sha256 as sha2::Digest>::new_with_prefix(&bytes))
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    if line["status_sha256"] == digest.as_str() {
        assert_valid("status", &serde_json::from_slice(&bytes).expect("status.json is JSON"));
    }
}
