//! The published schemas of the documents a controller reads (`schemas/NAME.schema.json`, which
//! the package installs and `provision-dispatcher schema print NAME` prints), used as a
//! controller uses them: files, validated with a stock validator, Python's `jsonschema`
//! (Debian's python3-jsonschema), with nothing of the product's code.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};
use serde_json::Value;

/// The documents, by the name `schema print` takes and the file is named for.
pub const NAMES: [&str; 4] = ["result", "inventory", "check", "status"];

/// `schemas/NAME.schema.json` in the source tree.
pub fn path(name: &str) -> PathBuf {
    crate::root().join("schemas").join(format!("{name}.schema.json"))
}

/// Reads every schema and validates the documents given to it on stdin (`[[what, name,
/// document], ...]`), or the schemas themselves against draft-07's meta-schema (`--schemas`);
/// prints one line per error. `disks` is `disks --format json`, whose disks are the
/// inventory's. `closed` makes every `additionalProperties: true` false: the product may write
/// no field its schema does not describe (a controller's reading is the published one).
const VALIDATE: &str = r##"
import json, sys
import jsonschema

folder, mode = sys.argv[1], sys.argv[2]

def close(node):
    if isinstance(node, dict):
        return {k: (False if k == "additionalProperties" and v is True else close(v)) for k, v in node.items()}
    if isinstance(node, list):
        return [close(v) for v in node]
    return node

def load(name):
    if name == "disks":
        inventory = load("inventory")
        return {"type": "object", "additionalProperties": True, "required": ["disks"],
                "properties": {"disks": {"type": "array", "items": {"$ref": "#/definitions/disk"}}},
                "definitions": inventory["definitions"]}
    with open(f"{folder}/{name}.schema.json") as f:
        return json.load(f)

if mode == "--schemas":
    for name in sys.argv[3:]:
        try:
            jsonschema.Draft7Validator.check_schema(load(name))
        except jsonschema.exceptions.SchemaError as e:
            print(f"schemas/{name}.schema.json: not a valid draft-07 schema: {e.message}")
    sys.exit(0)
validators = {}
for what, name, document in json.load(sys.stdin):
    if name not in validators:
        schema = load(name)
        validators[name] = jsonschema.Draft7Validator(close(schema) if mode == "closed" else schema)
    for error in validators[name].iter_errors(document):
        at = "".join(f"/{p}" for p in error.absolute_path) or "(root)"
        print(f"{what}: not a valid {name} document at {at}: {error.message}"[:600])
"##;

/// A document to validate: what it is (for the message), the schema's name, the document.
pub struct Document {
    pub what: String,
    pub name: &'static str,
    pub json: Value,
}

/// What is wrong with each of `documents` by its schema held closed: empty when every one is
/// valid.
pub fn invalid(documents: &[Document]) -> Result<Vec<String>> {
    if documents.is_empty() {
        return Ok(vec![]);
    }
    let input: Vec<Value> = documents.iter().map(|d| serde_json::json!([d.what, d.name, d.json])).collect();
    python(&["closed"], Some(serde_json::to_vec(&input)?))
}

/// What Python's `jsonschema` finds wrong with the schemas themselves (draft-07's meta-schema).
pub fn not_draft_07() -> Result<Vec<String>> {
    python(&[&["--schemas"][..], &NAMES].concat(), None)
}

fn python(args: &[&str], stdin: Option<Vec<u8>>) -> Result<Vec<String>> {
    crate::needs::ensure(crate::needs::Need::Tests, "validating documents against the published schemas")?;
    let folder = crate::root().join("schemas");
    let mut child = Command::new("python3")
        .args(["-c", VALIDATE])
        .arg(&folder)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("start python3")?;
    let mut input = child.stdin.take().expect("piped");
    let writer = std::thread::spawn(move || input.write_all(&stdin.unwrap_or_default()));
    let out = child.wait_with_output()?;
    writer.join().expect("the writer does not panic")?;
    if !out.status.success() {
        bail!("python3's jsonschema failed: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).lines().map(str::to_owned).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The validation can fail: a result line of a state that does not exist, and one without
    /// a field, are refused; a field the schema does not list is refused (closed).
    #[test]
    fn a_wrong_document_is_refused() {
        let line = serde_json::json!({"state": "failed", "failure": "boot_medium_not_found", "exit_code": 66,
            "phase": "boot", "target": null, "job": null, "recipe_sha256": null, "media": null, "signer": null, "secure_boot": null,
            "details": [], "details_omitted": 0, "took_ms": 1, "status_sha256": null, "disk": null,
            "inventory_sha256": null, "end": null});
        let mut wrong = line.clone();
        wrong["state"] = "done".into();
        let mut missing = line.clone();
        missing.as_object_mut().unwrap().remove("took_ms");
        let mut extra = line.clone();
        extra["later"] = 1.into();
        let documents: Vec<Document> = [("good", line), ("wrong", wrong), ("missing", missing), ("extra", extra)]
            .into_iter()
            .map(|(what, json)| Document { what: what.into(), name: "result", json })
            .collect();
        let found = invalid(&documents).unwrap();
        let of = |what: &str| found.iter().filter(|e| e.starts_with(&format!("{what}: "))).cloned().collect::<Vec<_>>();
        assert_eq!(of("good"), Vec::<String>::new());
        assert!(of("wrong")[0].starts_with("wrong: not a valid result document at /state: "), "{found:#?}");
        assert_eq!(of("missing"), ["missing: not a valid result document at (root): 'took_ms' is a required property"]);
        assert!(of("extra")[0].contains("'later' was unexpected"), "{found:#?}");
        assert_eq!(not_draft_07().unwrap(), Vec::<String>::new());
    }
}
