//! The inputs of the hostile-world attacks, within the caps: recipes (issue 14) and schemas
//! that ask for work without end (issue 31, issue 32), shared by the regression tests and
//! `cargo xtask bench`'s hostile rows.

use serde_json::{json, Value};

const CAP: usize = 8 * 1024 * 1024;

/// `(name, recipe text, expected "error", a detail code the report must hold)`.
pub fn inputs() -> Vec<(&'static str, String, &'static str, &'static str)> {
    let head = r#"{"task_target":"install-esxi.target","ks_cfg":"x""#;
    let keys = |n: usize, width: usize| {
        let body: String = (0..n).map(|i| format!(r#","{i:0width$}":1"#)).collect();
        format!("{head}{body}}}")
    };
    let values = |n: usize| format!("[{}]", vec!["1"; n].join(","));
    let partitions = |n: usize| {
        let one = r#"{"size":"1G","type_guid":"8300","label":"l"}"#;
        format!(
            r#"{{"task_target":"install-linux.target","target_disk":"/dev/sda","oci_url":"x","partition_layout":[{}]}}"#,
            vec![one; n].join(",")
        )
    };
    let duplicates = |n: usize, key: &str| format!("{{{}}}", vec![format!(r#""{key}":1"#); n].join(","));
    let inputs = vec![
        ("unknown-keys-600k", keys(600_000, 6), "too_large", "maxValues"),
        ("unknown-keys-16k", keys(16_000, 6), "validation_error", "additionalProperties"),
        ("long-unknown-keys-16k", keys(16_000, 500), "validation_error", "additionalProperties"),
        ("array-of-4m-values", values((CAP - 2) / 2), "too_large", "maxValues"),
        ("partitions-60k", partitions(60_000), "too_large", "maxValues"),
        ("partitions-4k", partitions(4_000), "validation_error", "maxItems"),
        ("duplicate-keys-1m", duplicates(1_000_000, "a"), "validation_error", "duplicateKey"),
        ("long-duplicate-keys-16k", duplicates(16_000, &"d".repeat(500)), "validation_error", "duplicateKey"),
    ];
    for (name, text, _, _) in &inputs {
        assert!(text.len() <= CAP, "{name} is {} bytes", text.len());
    }
    inputs
}

const KNOWN_ID: &str = "https://shoal.dev/provisioner/recipe.schema.json";

/// `levels` of `allOf: [{"$ref": next}, {"$ref": next}]` over `leaf`, on `task_target`:
/// 2^levels steps, in a schema of a few KB.
pub fn doubling(levels: usize, leaf: Value) -> Value {
    let mut definitions = serde_json::Map::new();
    for i in 0..levels {
        let next = json!({"$ref": format!("#/definitions/d{}", i + 1)});
        definitions.insert(format!("d{i}"), json!({"allOf": [next, next]}));
    }
    definitions.insert(format!("d{levels}"), leaf);
    json!({"$id": KNOWN_ID, "definitions": definitions, "properties": {"task_target": {"$ref": "#/definitions/d0"}}})
}

/// A schema whose `metadata.list` items must satisfy `combinator` over `n` patterns.
pub fn patterns(combinator: &str, n: usize) -> Value {
    let branches: Vec<Value> = (0..n).map(|i| json!({"pattern": format!("^p{i}x$")})).collect();
    json!({"$id": KNOWN_ID, "properties": {"metadata": {"properties": {"list": {"items": {combinator: branches}}}}}})
}

/// 50 patterns, each just under the compiled-program limit (`\w{22}` is over it).
pub fn large_patterns() -> Value {
    let properties: serde_json::Map<String, Value> = (0..50)
        .map(|i| (format!("p{i}"), json!({"type": "string", "pattern": format!(r"^\w{{20}}$|^{i}$")})))
        .collect();
    json!({"$id": KNOWN_ID, "properties": properties})
}

/// `metadata.doc` must hold JSON.
pub fn holds_json() -> Value {
    json!({"$id": KNOWN_ID, "properties": {"metadata": {"properties": {"doc": {"contentMediaType": "application/json"}}}}})
}

/// A valid ESXi recipe with this `metadata`.
pub fn recipe_with(metadata: Value) -> Value {
    json!({"task_target": "install-esxi.target", "ks_cfg": "x", "metadata": metadata})
}

/// `(name, schema, recipe)`: the schemas of issue 31 and issue 32 with the recipes that made
/// them hang or run out of memory.
pub fn schemas() -> Vec<(&'static str, Value, Value)> {
    let strings =
        |n: usize, text: &dyn Fn(usize) -> String| recipe_with(json!({"list": (0..n).map(text).collect::<Vec<_>>()}));
    vec![
        ("doubling-40", doubling(40, json!({"type": "string"})), recipe_with(json!({}))),
        ("doubling-18-failing", doubling(18, json!({"type": "integer"})), recipe_with(json!({}))),
        ("any-of-100-over-3k", patterns("anyOf", 100), strings(3_000, &|i| format!("s{i}"))),
        ("one-of-2k-over-14k", patterns("oneOf", 2_000), strings(14_000, &|_| "p1x".into())),
        ("large-patterns-50", large_patterns(), recipe_with(json!({}))),
        ("json-in-a-string-8m", holds_json(), recipe_with(json!({"doc": format!("[{}1]", "1,".repeat(4_000_000))}))),
    ]
}
