//! Arbitrary bytes as the ISO's `recipe.schema.json`, as `run` compiles it (any `$id`
//! accepted, so the fuzzer gets past that gate), then the recipes of `iso/examples`
//! validated against whatever compiled. Beyond "never panics, never hangs, never overflows the
//! stack": a refusal is one line of bounded length; every message of a validation stays within
//! the cap on the schema's words; every detail's path is a JSON pointer.

#![no_main]

use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use provision_dispatcher::checks::{safety::Policy, static_checks};
use provision_dispatcher::recipe::model::Recipe;
use provision_dispatcher::recipe::{self, Document};
use provision_dispatcher::schema::{Schema, SchemaPolicy, MAX_SCHEMA_WORDS};

/// A refusal names a pointer into the schema and a reason clipped to 300 characters; the
/// pointer is the schema's own, at most as long as the schema, which the fuzzer keeps small.
const MAX_REFUSAL: usize = 2 * 64 * 1024 + 1024;

/// The longest message a check builds around the schema's words.
const MAX_MESSAGE: usize = MAX_SCHEMA_WORDS * 4 + 200;

fuzz_target!(|data: &[u8]| {
    let schema = match Schema::from_bytes(data, SchemaPolicy { accept_unknown_id: true }) {
        Ok(schema) => schema,
        Err(refusal) => {
            let text = refusal.to_string();
            assert!(!text.contains('\n'), "a refusal is one line: {text:?}");
            assert!(text.len() <= MAX_REFUSAL, "a refusal of {} bytes", text.len());
            return;
        }
    };
    for doc in RECIPES.iter() {
        // A schema too complex for a recipe is refused, in one line, like one that does not compile.
        let findings = match static_checks(&Recipe::view(doc), &schema, &Policy::default()) {
            Ok(findings) => findings,
            Err(refusal) => {
                assert!(!refusal.to_string().contains('\n'), "a refusal is one line: {refusal}");
                continue;
            }
        };
        for issue in &findings.issues {
            assert!(issue.path.is_empty() || issue.path.starts_with('/'), "not a pointer: {:?}", issue.path);
            assert!(
                issue.message.chars().count() <= MAX_MESSAGE,
                "a message of {} characters: {:?}",
                issue.message.chars().count(),
                issue.message.chars().take(200).collect::<String>()
            );
        }
    }
});

/// The recipes of iso/examples small enough to validate thousands of times a second.
static RECIPES: LazyLock<Vec<Document>> = LazyLock::new(|| {
    let examples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../iso/examples");
    let mut docs = Vec::new();
    for entry in std::fs::read_dir(&examples).expect("iso/examples is there") {
        let path = entry.unwrap().path();
        let name = path.to_string_lossy().into_owned();
        if name.ends_with(".json") && !name.ends_with(".expect.json") && path.metadata().unwrap().len() < 16 * 1024 {
            if let Ok(doc) = recipe::parse(std::fs::read(&path).unwrap()) {
                docs.push(doc);
            }
        }
    }
    docs
});
