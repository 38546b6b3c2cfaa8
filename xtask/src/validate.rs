//! `cargo xtask validate`: the schema is valid draft-07 and follows the schema-writing rules
//! of seeds 000 and 003; the published schemas of the documents a controller reads are valid
//! draft-07 (for the binary and for Python's jsonschema) and follow rules of their own (each
//! field described, each object's openness stated, shared definitions alike); every
//! `examples`/`default` value in it validates in its place; every
//! recipe in iso/examples gives the result its sidecar expects; the unit files pass
//! `systemd-analyze verify`; the modules of src/ and of xtask/src/ form layers without an
//! import cycle. What the dispatcher decides is asked of the shipped binary, as users run it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use serde_json::{json, Map, Value};

use crate::system;

/// Objects that may stay open: `metadata` is free-form by design (seed 002).
const OPEN_OBJECTS: &[&str] = &["/properties/metadata"];

/// Strings left unconstrained on purpose, with the reason. Each would be a backward-
/// incompatible change to the seed's schema, which SPEC §3 forbids.
const UNCONSTRAINED_STRINGS: &[(&str, &str)] =
    &[("/properties/recipe_version", "the seed leaves it free-form; any constraint would refuse recipes it accepts")];

/// Keywords a combinator branch may not set (seed 003 rule 2, seed 000 R10): branches
/// constrain, they do not restructure or annotate.
const BRANCH_FORBIDDEN: &[&str] = &["type", "title", "description", "default", "examples", "additionalProperties"];

pub fn run() -> Result<()> {
    let root = crate::root();
    let binary = crate::dist::build(crate::arch::Arch::host())?;
    let mut problems = Vec::new();
    for (name, path) in [
        ("canonical, version 1", "iso/recipe.schema.json"),
        ("version 2", "iso/recipe.schema.v2.json"),
        ("seed 002 verbatim", "iso/seed-002.schema.json"),
    ] {
        let (exit, report) = check(&binary, &root.join("iso/examples/seed-esxi.json"), &root.join(path))?;
        match exit {
            0 | 65 => report_line(true, &format!("{path}: valid draft-07 ({name})")),
            _ => problems.push(format!("{path}: {}", report["reason"].as_str().unwrap_or("refused"))),
        }
    }
    // Each version compiled into the binary: the lints, and every example in its place.
    for (path, version) in [("iso/recipe.schema.json", "1"), ("iso/recipe.schema.v2.json", "2")] {
        let schema: Value = serde_json::from_slice(&std::fs::read(root.join(path))?)?;
        let lint = lint_schema(&schema);
        report_line(lint.is_empty(), &format!("{path}: schema lints (seeds 000/003)"));
        problems.extend(lint.into_iter().map(|p| format!("{path}: {p}")));
        let examples = schema_examples(&binary, &root, &schema, version)?;
        report_line(examples.is_empty(), &format!("{path}: examples and defaults"));
        problems.extend(examples.into_iter().map(|p| format!("{path}: {p}")));
    }
    problems.extend(documents(&binary, &root)?);
    let (count, mismatches) = recipe_examples(&binary, &root)?;
    report_line(mismatches.is_empty(), &format!("iso/examples: {count} recipes against their sidecars"));
    problems.extend(mismatches);
    problems.extend(verify_units(&root)?);
    let architecture = std::fs::read_to_string(root.join("ARCHITECTURE.md")).context("read ARCHITECTURE.md")?;
    for (dir, layers) in [("src", crate::layers::PRODUCT), ("xtask/src", crate::layers::XTASK)] {
        let layering = crate::layers::check(&root.join(dir), layers, &architecture)?;
        report_line(layering.is_empty(), &format!("{dir}/: modules in layers, no import cycle (ARCHITECTURE.md)"));
        problems.extend(layering);
    }
    if !problems.is_empty() {
        for problem in &problems {
            eprintln!("  {problem}");
        }
        bail!("validate: {} problem(s)", problems.len());
    }
    Ok(())
}

/// The definitions two or more published schemas share, and which: each must be the same in
/// every one, so that a field is described once whichever document it is read in (every
/// schema stands alone, as a controller's validator takes it, without a reference to another
/// file).
const SHARED: &[(&str, &[&str])] = &[
    ("identity", &["result", "status"]),
    ("disk", &["inventory", "status"]),
    ("detail", &["check", "status"]),
    ("signer", &["check", "status"]),
    ("code", &["result", "check", "status"]),
    ("media_code", &["result", "check", "status"]),
];

/// The published schemas of the documents a controller reads (`schemas/`): valid draft-07 for
/// the binary (as the recipe's are) and for Python's stock validator, each field described,
/// every object's openness stated, and the definitions they share the same in each.
fn documents(binary: &Path, root: &Path) -> Result<Vec<String>> {
    let mut problems = Vec::new();
    let mut loaded = BTreeMap::new();
    for name in crate::schemas::NAMES {
        let path = crate::schemas::path(name);
        let shown = format!("schemas/{name}.schema.json");
        let mut command = Command::new(binary);
        command.args(["check", "--format", "json", "--accept-unknown-schema-id", "--schema"]).arg(&path);
        let out = command.arg(root.join("iso/examples/seed-esxi.json")).output()?;
        let mut found = match out.status.code() {
            Some(0 | 65) => vec![],
            _ => vec![String::from_utf8_lossy(&out.stdout).trim().to_owned()],
        };
        let schema: Value = serde_json::from_slice(&std::fs::read(&path)?).with_context(|| shown.clone())?;
        found.extend(lint_document(&schema));
        report_line(
            found.is_empty(),
            &format!("{shown}: valid draft-07, every field described, objects' openness stated"),
        );
        problems.extend(found.into_iter().map(|p| format!("{shown}: {p}")));
        loaded.insert(name, schema);
    }
    let stock = crate::schemas::not_draft_07()?;
    report_line(stock.is_empty(), "schemas/: valid draft-07 for Python's jsonschema");
    problems.extend(stock);
    for (definition, names) in SHARED {
        let first = &loaded[names[0]]["definitions"][definition];
        for name in &names[1..] {
            if first.is_null() || &loaded[name]["definitions"][definition] != first {
                problems.push(format!(
                    "schemas/{name}.schema.json: definitions/{definition} is not schemas/{}.schema.json's",
                    names[0]
                ));
            }
        }
    }
    Ok(problems)
}

/// The rules of a published document's schema, one line per violation: every field described
/// (outside the branches of `allOf`/`if`/..., which only constrain), every object saying whether
/// it takes fields it does not list (`additionalProperties`), no `$ref` beside other keywords
/// (draft-07 ignores them), and no property defined only inside a branch.
pub fn lint_document(schema: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    walk(schema, "", Place::Root, None, &mut |pointer, node, place, outer| {
        let at = if pointer.is_empty() { "(root)" } else { pointer };
        if node.contains_key("$ref") && node.len() > 1 {
            problems.push(format!("{at}: $ref beside other keywords, which draft-07 ignores"));
        }
        if place == Place::Branch {
            let outer_props = outer.and_then(|o| o.get("properties")).and_then(Value::as_object);
            for name in node.get("properties").and_then(Value::as_object).into_iter().flat_map(|p| p.keys()) {
                if !outer_props.is_some_and(|p| p.contains_key(name)) {
                    problems.push(format!("{at}: property '{name}' is only defined inside a combinator"));
                }
            }
            return;
        }
        if place != Place::Item && node.get("description").and_then(Value::as_str).is_none_or(|d| d.trim().is_empty()) {
            problems.push(format!("{at}: no 'description'"));
        }
        let types = match node.get("type") {
            Some(Value::Array(types)) => types.iter().filter_map(Value::as_str).collect(),
            Some(Value::String(one)) => vec![one.as_str()],
            _ => vec![],
        };
        if types.contains(&"object") && !node.get("additionalProperties").is_some_and(Value::is_boolean) {
            problems.push(format!(
                "{at}: an object that does not say whether it takes other fields (additionalProperties)"
            ));
        }
    });
    problems
}

/// `provision-dispatcher check --format json RECIPE --schema S`: the exit code and the report.
fn check(binary: &Path, recipe: &Path, schema: &Path) -> Result<(i32, Value)> {
    let mut command = Command::new(binary);
    command.args(["check", "--format", "json"]).arg(recipe).arg("--schema").arg(schema);
    let out = command.output().with_context(|| format!("run {}", binary.display()))?;
    let report = serde_json::from_slice(&out.stdout).with_context(|| format!("the report of {}", recipe.display()))?;
    Ok((out.status.code().unwrap_or(-1), report))
}

fn report_line(ok: bool, what: &str) {
    println!("{} {what}", if ok { "ok  " } else { "FAIL" });
}

/// Where a subschema stands, for the rules that depend on it.
#[derive(Clone, Copy, PartialEq)]
enum Place {
    Root,
    /// Under `properties`: describes a named value of the recipe.
    Property,
    /// Under `items` and the like: describes each element; typed, but described by its owner.
    Item,
    /// A branch of allOf/anyOf/oneOf/not/if/then/else: constrains, does not describe.
    Branch,
    /// Under `definitions`.
    Definition,
}

/// The rules of seeds 000/003 that fit a draft-07 recipe schema; one line per violation.
pub fn lint_schema(schema: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    walk(schema, "", Place::Root, None, &mut |pointer, node, place, outer| {
        lint_node(pointer, node, place, outer, &mut problems)
    });
    problems.extend(recursion(schema));
    problems
}

fn lint_node(
    pointer: &str,
    node: &Map<String, Value>,
    place: Place,
    outer: Option<&Map<String, Value>>,
    out: &mut Vec<String>,
) {
    let at = if pointer.is_empty() { "(root)" } else { pointer };
    if place == Place::Branch {
        for keyword in BRANCH_FORBIDDEN {
            if node.contains_key(*keyword) {
                out.push(format!("{at}: a combinator branch sets '{keyword}' (seed 003: branches only constrain)"));
            }
        }
        let outer_props = outer.and_then(|o| o.get("properties")).and_then(Value::as_object);
        for name in node.get("properties").and_then(Value::as_object).into_iter().flat_map(|p| p.keys()) {
            if !outer_props.is_some_and(|p| p.contains_key(name)) {
                out.push(format!("{at}: property '{name}' is only defined inside a combinator (seed 003 rule 1)"));
            }
        }
        return;
    }
    let ty = match node.get("type") {
        Some(Value::String(t)) => t.as_str(),
        Some(_) => {
            out.push(format!("{at}: 'type' must be a single type name (seed 000 R2)"));
            return;
        }
        None => {
            out.push(format!("{at}: no 'type' (seed 000 R2)"));
            return;
        }
    };
    if place != Place::Item && node.get("description").and_then(Value::as_str).is_none_or(|d| d.trim().is_empty()) {
        out.push(format!("{at}: no 'description' (seed 000 R6)"));
    }
    match ty {
        "object"
            if !OPEN_OBJECTS.contains(&pointer) && node.get("additionalProperties") != Some(&Value::Bool(false)) =>
        {
            out.push(format!("{at}: object without \"additionalProperties\": false (seed 000 R3)"))
        }
        "array" if !node.contains_key("items") => out.push(format!("{at}: array without 'items' (seed 000 R4)")),
        "string" if !constrained(node) && !UNCONSTRAINED_STRINGS.iter().any(|(p, _)| *p == pointer) => {
            out.push(format!("{at}: unconstrained string (seed 000 R8)"))
        }
        _ => {}
    }
    if node.get("examples").and_then(Value::as_array).is_some_and(|e| e.len() > 5) {
        out.push(format!("{at}: more than five examples (seed 000 R7)"));
    }
    if node.get("default").is_some_and(is_empty_value) {
        out.push(format!("{at}: empty default (seed 000 R18)"));
    }
}

const STRING_CONSTRAINTS: &[&str] = &["const", "enum", "pattern", "minLength", "maxLength", "format"];

/// A string is constrained by its own keywords or by constraint-only branches (the seed's
/// `type_guid` is a oneOf of two patterns).
fn constrained(node: &Map<String, Value>) -> bool {
    let own = STRING_CONSTRAINTS.iter().any(|k| node.contains_key(*k));
    let branches =
        ["oneOf", "anyOf", "allOf"].iter().filter_map(|k| node.get(*k)).filter_map(Value::as_array).any(|b| {
            b.iter().all(|branch| {
                branch.as_object().is_some_and(|o| o.keys().any(|k| STRING_CONSTRAINTS.contains(&k.as_str())))
            })
        });
    own || branches
}

fn is_empty_value(value: &Value) -> bool {
    match value {
        Value::Bool(b) => !b,
        Value::String(s) => s.is_empty(),
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        Value::Null => true,
    }
}

type Visit<'a> = dyn FnMut(&str, &Map<String, Value>, Place, Option<&Map<String, Value>>) + 'a;

/// Visits every subschema of a draft-07 schema with its pointer, its place and, for
/// branches, the schema they constrain.
fn walk(schema: &Value, pointer: &str, place: Place, outer: Option<&Map<String, Value>>, visit: &mut Visit) {
    let Some(node) = schema.as_object() else { return };
    visit(pointer, node, place, outer);
    let here = |key: &str| format!("{pointer}/{}", key.replace('~', "~0").replace('/', "~1"));
    // A branch's own branches constrain the same value as it does.
    let constrained = if place == Place::Branch { outer } else { Some(node) };
    for (key, value) in node {
        match key.as_str() {
            "properties" => {
                for (name, sub) in value.as_object().into_iter().flatten() {
                    let sub_place = if place == Place::Branch { Place::Branch } else { Place::Property };
                    let sub_outer = outer
                        .and_then(|o| o.get("properties"))
                        .and_then(Value::as_object)
                        .and_then(|p| p.get(name))
                        .and_then(Value::as_object);
                    walk(sub, &format!("{}/{}", here(key), name), sub_place, sub_outer, visit);
                }
            }
            "definitions" => {
                for (name, sub) in value.as_object().into_iter().flatten() {
                    walk(sub, &format!("{}/{}", here(key), name), Place::Definition, None, visit);
                }
            }
            "items" | "additionalItems" | "additionalProperties" | "propertyNames" | "contains" => {
                if let Some(items) = value.as_array() {
                    for (i, sub) in items.iter().enumerate() {
                        walk(sub, &format!("{}/{i}", here(key)), Place::Item, None, visit);
                    }
                } else {
                    walk(value, &here(key), Place::Item, None, visit);
                }
            }
            "allOf" | "anyOf" | "oneOf" => {
                for (i, sub) in value.as_array().into_iter().flatten().enumerate() {
                    walk(sub, &format!("{}/{i}", here(key)), Place::Branch, constrained, visit);
                }
            }
            "not" | "if" | "then" | "else" => walk(value, &here(key), Place::Branch, constrained, visit),
            _ => {}
        }
    }
}

/// Seed 000 R13: no recursion. Draft-07 has no $recursiveRef or $dynamicRef; a `$ref` chain
/// that leads back into itself is the same thing.
fn recursion(schema: &Value) -> Vec<String> {
    let mut refs = BTreeMap::new();
    collect_refs(schema, String::new(), &mut refs);
    let mut problems = Vec::new();
    for start in refs.keys() {
        let mut at = start.clone();
        for _ in 0..=refs.len() {
            let Some(target) = refs.get(&at) else { break };
            if start.starts_with(target.as_str()) {
                problems.push(format!("{start}: $ref leads back to {target}, an enclosing schema (seed 000 R13)"));
                break;
            }
            // Follow the first $ref inside the target, if any.
            match refs.keys().find(|k| k.starts_with(target.as_str())) {
                Some(next) => at = next.clone(),
                None => break,
            }
        }
    }
    problems
}

fn collect_refs(value: &Value, pointer: String, out: &mut BTreeMap<String, String>) {
    match value {
        Value::Object(map) => {
            if let Some(target) = map.get("$ref").and_then(Value::as_str) {
                out.insert(pointer.clone(), target.trim_start_matches('#').to_owned());
            }
            for (key, sub) in map {
                collect_refs(sub, format!("{pointer}/{key}"), out);
            }
        }
        Value::Array(items) => {
            for (i, sub) in items.iter().enumerate() {
                collect_refs(sub, format!("{pointer}/{i}"), out);
            }
        }
        _ => {}
    }
}

/// Every `examples` and `default` value validates in its place: put into a recipe that is
/// otherwise the seed's valid ESXi example (for a partition field, into a partition of the seed
/// Linux example's layout), it draws no error at or under its own path.
fn schema_examples(binary: &Path, root: &Path, schema: &Value, version: &str) -> Result<Vec<String>> {
    let base: Value = serde_json::from_slice(&std::fs::read(root.join("iso/examples/seed-esxi.json"))?)?;
    let linux: Value = serde_json::from_slice(&std::fs::read(root.join("iso/examples/seed-linux.json"))?)?;
    let scratch = root.join("target/validate-examples");
    std::fs::create_dir_all(&scratch)?;
    let mut problems = Vec::new();
    for (n, placed) in place_examples(schema, &base, &linux["partition_layout"][0])?.into_iter().enumerate() {
        let file = scratch.join(format!("example-{n}.json"));
        std::fs::write(&file, serde_json::to_vec(&placed.recipe)?)?;
        let out = Command::new(binary)
            .args(["check", "--format", "json", "--schema-version", version])
            .arg(&file)
            .output()
            .with_context(|| format!("run {}", binary.display()))?;
        let report: Value = serde_json::from_slice(&out.stdout)?;
        let at = &placed.at;
        let details = report["details"].as_array().cloned().unwrap_or_default();
        let own = |d: &&Value| d["path"].as_str().is_some_and(|p| p == at || p.starts_with(&format!("{at}/")));
        for detail in details.iter().filter(own) {
            problems.push(format!(
                "{}: example {} fails in its place: {} [{}]",
                placed.pointer,
                placed.value,
                detail["message"].as_str().unwrap_or_default(),
                detail["code"].as_str().unwrap_or_default()
            ));
        }
    }
    Ok(problems)
}

/// An `examples` or `default` value of the schema, put into a recipe.
struct Placed {
    /// Where the schema annotates it.
    pointer: String,
    value: Value,
    /// Where it stands in `recipe`.
    at: String,
    recipe: Value,
}

fn place_examples(schema: &Value, base: &Value, partition: &Value) -> Result<Vec<Placed>> {
    let mut annotated = Vec::new();
    walk(schema, "", Place::Root, None, &mut |pointer, node, place, _| {
        if place != Place::Branch {
            let values = node.get("examples").and_then(Value::as_array).cloned().unwrap_or_default();
            annotated.push((pointer.to_owned(), values.into_iter().chain(node.get("default").cloned())));
        }
    });
    let mut placed = Vec::new();
    for (pointer, values) in annotated {
        let tokens: Option<Vec<&str>> = pointer.strip_prefix("/properties/").map(|rest| rest.split('/').collect());
        for value in values {
            let mut recipe = base.clone();
            let at = match tokens.as_deref() {
                Some([field]) => {
                    recipe[*field] = value.clone();
                    format!("/{field}")
                }
                Some([object, "properties", field]) => {
                    recipe[*object] = json!({ *field: value.clone() });
                    format!("/{object}/{field}")
                }
                Some([list, "items", "properties", field]) => {
                    let mut item = partition.clone();
                    item[*field] = value.clone();
                    recipe[*list] = json!([item]);
                    format!("/{list}/0/{field}")
                }
                _ => bail!("{pointer}: an example in a place `xtask validate` cannot put into a recipe"),
            };
            placed.push(Placed { pointer: pointer.clone(), value, at, recipe });
        }
    }
    Ok(placed)
}

/// Each `iso/examples/NAME.json` against `NAME.expect.json` ({"exit", "report"}).
fn recipe_examples(binary: &Path, root: &Path) -> Result<(usize, Vec<String>)> {
    let mut files: Vec<PathBuf> =
        std::fs::read_dir(root.join("iso/examples"))?.map(|e| e.map(|e| e.path())).collect::<std::io::Result<_>>()?;
    files.retain(|p| p.extension().is_some_and(|e| e == "json") && !p.to_string_lossy().ends_with(".expect.json"));
    files.sort();
    let mut problems = Vec::new();
    for file in &files {
        let sidecar = file.with_extension("expect.json");
        let expected: Value =
            serde_json::from_slice(&std::fs::read(&sidecar).with_context(|| sidecar.display().to_string())?)?;
        let relative = file.strip_prefix(root).unwrap_or(file).to_owned();
        // Relative, as the sidecars were made: a report names no file, but a reason may.
        let mut command = Command::new(binary);
        command.current_dir(root).args(["check", "--format", "json"]).arg(&relative);
        let out = command.output()?;
        let report: Value = serde_json::from_slice(&out.stdout)?;
        let actual = json!({"exit": out.status.code(), "report": report});
        if actual != expected {
            problems.push(format!("{}: does not give the result of {}", relative.display(), sidecar.display()));
        }
    }
    Ok((files.len(), problems))
}

/// `systemd-analyze verify` on the units, in a scratch root that has systemd's own units and
/// the binary the units name; any diagnostic counts (unknown keys are only warnings there).
fn verify_units(root: &Path) -> Result<Vec<String>> {
    crate::needs::ensure(crate::needs::Need::Tests, "checking the unit files")?;
    let scratch = root.join("target/validate-units");
    let _ = std::fs::remove_dir_all(&scratch);
    let units_dir = scratch.join("etc/systemd/system");
    std::fs::create_dir_all(&units_dir)?;
    std::fs::create_dir_all(scratch.join("usr/bin"))?;
    std::fs::create_dir_all(scratch.join("usr/lib/systemd"))?;
    system::run(Command::new("cp").arg("-a").arg("/lib/systemd/system").arg(scratch.join("usr/lib/systemd/")))?;
    // The units name /usr/bin/provision-dispatcher and /usr/bin/true; any executable stands in
    // for the check.
    for name in ["provision-dispatcher", "true"] {
        std::fs::copy("/bin/true", scratch.join("usr/bin").join(name))?;
    }
    let mut units = Vec::new();
    for entry in std::fs::read_dir(root.join("systemd"))? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "service" || e == "target") {
            let name = path.file_name().expect("a file").to_owned();
            std::fs::copy(&path, units_dir.join(&name))?;
            units.push(Path::new("/etc/systemd/system").join(name));
        }
    }
    units.sort();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        // Documentation= names the man page the package installs; tests/docs.rs checks it.
        .arg("--man=no")
        .arg(format!("--root={}", scratch.display()))
        .args(&units)
        .output()?;
    let diagnostics = String::from_utf8_lossy(&out.stderr).trim().to_owned();
    let mut problems = Vec::new();
    if !out.status.success() || !diagnostics.is_empty() {
        problems
            .push(format!("systemd-analyze verify: {}", if diagnostics.is_empty() { "failed" } else { &diagnostics }));
    }
    report_line(problems.is_empty(), &format!("systemd/: {} unit(s) verified", units.len()));
    Ok(problems)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_compiled_in_version_passes_the_lints() {
        for file in ["iso/recipe.schema.json", "iso/recipe.schema.v2.json"] {
            let text = std::fs::read(crate::root().join(file)).unwrap();
            let schema: Value = serde_json::from_slice(&text).unwrap();
            assert_eq!(lint_schema(&schema), Vec::<String>::new(), "{file}");
        }
    }

    #[test]
    fn lints_catch_each_rule() {
        let schema = json!({
            "type": "object",
            "description": "Root.",
            "properties": {
                "untyped": {"description": "No type."},
                "two": {"type": ["string", "null"], "description": "Two types.", "maxLength": 3},
                "bare": {"type": "string"},
                "open": {"type": "object", "description": "Open."},
                "list": {"type": "array", "description": "No items."},
                "free": {"type": "string", "description": "Unconstrained."},
                "many": {"type": "string", "description": "Examples.", "enum": ["a"], "examples": ["a", "a", "a", "a", "a", "a"]},
                "empty": {"type": "string", "description": "Empty default.", "maxLength": 1, "default": ""},
                "node": {"$ref": "#/properties/node"},
            },
            "oneOf": [{"type": "string"}, {"properties": {"ghost": {"minLength": 1}}}],
        });
        let found = lint_schema(&schema).join("\n");
        for expected in [
            "(root): object without",
            "/properties/untyped: no 'type'",
            "/properties/two: 'type' must be a single",
            "/properties/bare: no 'description'",
            "/properties/open: object without",
            "/properties/list: array without 'items'",
            "/properties/free: unconstrained string",
            "/properties/many: more than five examples",
            "/properties/empty: empty default",
            "/oneOf/0: a combinator branch sets 'type'",
            "/oneOf/1: property 'ghost' is only defined inside a combinator",
            "/properties/node: $ref leads back",
        ] {
            assert!(found.contains(expected), "{expected} not in:\n{found}");
        }
    }

    #[test]
    fn document_lints_catch_each_rule() {
        for name in crate::schemas::NAMES {
            let schema: Value = serde_json::from_slice(&std::fs::read(crate::schemas::path(name)).unwrap()).unwrap();
            assert_eq!(lint_document(&schema), Vec::<String>::new(), "{name}");
        }
        let schema = json!({
            "type": "object",
            "properties": {
                "bare": {"type": "string"},
                "shut": {"type": ["object", "null"], "description": "Open or closed?"},
                "beside": {"$ref": "#/definitions/x", "description": "Ignored."},
            },
            "allOf": [{"if": {"properties": {"bare": {"const": "a"}}}, "then": {"properties": {"ghost": {"const": 1}}}}],
        });
        let found = lint_document(&schema).join("\n");
        for expected in [
            "(root): no 'description'",
            "(root): an object that does not say",
            "/properties/bare: no 'description'",
            "/properties/shut: an object that does not say",
            "/properties/beside: $ref beside other keywords",
            "/allOf/0/then: property 'ghost' is only defined inside a combinator",
        ] {
            assert!(found.contains(expected), "{expected} not in:\n{found}");
        }
        assert_eq!(found.lines().count(), 6, "{found}");
    }

    #[test]
    fn examples_are_put_in_their_place() {
        let schema = json!({"type": "object", "properties": {
            "a": {"type": "string", "examples": ["x", "y"]},
            "list": {"type": "array", "items": {"type": "object", "properties": {"f": {"type": "string", "default": "z"}}}},
        }});
        let base = json!({"task_target": "t"});
        let placed = place_examples(&schema, &base, &json!({"size": "1G"})).unwrap();
        let found: Vec<(&str, &Value)> = placed.iter().map(|p| (p.at.as_str(), &p.recipe)).collect();
        assert_eq!(
            found,
            [
                ("/a", &json!({"task_target": "t", "a": "x"})),
                ("/a", &json!({"task_target": "t", "a": "y"})),
                ("/list/0/f", &json!({"task_target": "t", "list": [{"size": "1G", "f": "z"}]})),
            ]
        );
        // An object's own properties (v2's target_disk_hints) are placed in the object alone.
        let nested = json!({"type": "object", "properties": {"o": {"type": "object", "properties": {"p": {"type": "string", "examples": ["v"]}}}}});
        let placed = place_examples(&nested, &base, &json!({})).unwrap();
        assert_eq!((placed[0].at.as_str(), &placed[0].recipe), ("/o/p", &json!({"task_target": "t", "o": {"p": "v"}})));
        let deeper = json!({"type": "object", "properties": {"o": {"properties": {"q": {"properties": {"p": {"examples": ["v"]}}}}}}});
        assert!(place_examples(&deeper, &base, &json!({})).is_err(), "a place it cannot fill is an error, not a skip");
    }
}
