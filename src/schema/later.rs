//! A recipe checked against one version of the schema that uses a property of a later one
//! (`target_disk_hints` against v1): the error says which version has it and how to ask for
//! it. Decided from the compiled-in schemas' own `properties`, found where the recipe has the
//! property, so a property a new version adds is named without a list kept by hand.

use serde_json::Value;

use super::{subschemas, Schema, Version, VERSIONS};
use crate::issues::{Code, Issue};

/// How a later version is asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ask {
    /// `check` and `render`: `--schema-version N`.
    Option,
    /// `run`: the task media must carry that version's schema.
    Media,
}

/// Adds to each error of a property the schema does not allow the first later compiled-in
/// version that has that property at that place, and how to ask for it. Nothing for a schema
/// that is no compiled-in version (its `$id` is another's), nor for a property no later
/// version has (a typo stays a typo).
pub fn name_later_versions(schema: &Schema, issues: &mut [Issue], ask: Ask) {
    let Some(current) = VERSIONS.iter().find(|v| schema.id() == Some(v.id)) else { return };
    let later: Vec<(&Version, Value)> = VERSIONS
        .iter()
        .filter(|v| v.number > current.number)
        .filter_map(|v| Some((v, serde_json::from_str(v.text).ok()?)))
        .collect();
    if later.is_empty() {
        return;
    }
    for issue in issues.iter_mut().filter(|i| i.code == Code::Keyword("additionalProperties")) {
        let tokens = tokens(&issue.path);
        let Some((name, parent)) = tokens.split_last() else { continue };
        if let Some((version, _)) = later.iter().find(|(_, schema)| has_property(schema, parent, name)) {
            issue.message.push_str(&how(version, ask));
        }
    }
}

fn how(version: &Version, ask: Ask) -> String {
    let n = version.number;
    match ask {
        Ask::Option => format!("; schema v{n} has it: use --schema-version {n}"),
        Ask::Media => format!(
            "; schema v{n} has it: the task media must carry schema v{n} as recipe.schema.json ($id {})",
            version.id
        ),
    }
}

/// Whether `schema` has a property `name` in an object at the instance location `parent`.
fn has_property(schema: &Value, parent: &[String], name: &str) -> bool {
    let mut here = vec![schema];
    for token in parent {
        here = applying(here).into_iter().flat_map(|s| step(s, token)).collect();
        if here.is_empty() {
            return false;
        }
    }
    applying(here).into_iter().any(|s| s.get("properties").and_then(|p| p.get(name)).is_some())
}

/// The schemas that apply to the same instance as these: themselves and, through `allOf`,
/// `anyOf`, `oneOf`, `then` and `else`, those under them.
fn applying(schemas: Vec<&Value>) -> Vec<&Value> {
    let mut all = Vec::new();
    let mut todo = schemas;
    while let Some(schema) = todo.pop() {
        all.push(schema);
        let Some(map) = schema.as_object() else { continue };
        for (tokens, sub) in subschemas(map) {
            if matches!(tokens[0].as_str(), "allOf" | "anyOf" | "oneOf" | "then" | "else") {
                todo.push(sub);
            }
        }
    }
    all
}

/// The subschemas of `schema` for its instance's member `token`: the property's, the items'.
fn step<'s>(schema: &'s Value, token: &str) -> Vec<&'s Value> {
    let Some(map) = schema.as_object() else { return Vec::new() };
    subschemas(map)
        .into_iter()
        .filter(|(tokens, _)| match tokens.as_slice() {
            [keyword, name] => (keyword == "properties" || keyword == "items") && name == token,
            [keyword] => keyword == "items",
            _ => false,
        })
        .map(|(_, sub)| sub)
        .collect()
}

/// The reference tokens of an RFC 6901 pointer, unescaped.
fn tokens(pointer: &str) -> Vec<String> {
    pointer.split('/').skip(1).map(|t| t.replace("~1", "/").replace("~0", "~")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recipe::parse;

    fn errors(recipe: &str, version: usize, ask: Ask) -> Vec<Issue> {
        let schema = Schema::version(&VERSIONS[version]);
        let doc = parse(recipe.as_bytes().to_vec()).unwrap();
        let mut issues = schema.check(&doc).unwrap();
        name_later_versions(&schema, &mut issues, ask);
        issues
    }

    const HINTED: &str = r#"{"task_target": "install-esxi.target", "ks_cfg": "x", "target_disk": "/dev/sda",
        "target_disk_hints": {"serial": "S"}, "target_disk_hint": 1}"#;

    #[test]
    fn a_property_of_v2_checked_against_v1_names_v2_and_how_to_ask() {
        let issues = errors(HINTED, 0, Ask::Option);
        let hints = issues.iter().find(|i| i.path == "/target_disk_hints").unwrap();
        assert_eq!(
            hints.message,
            "is not a property the schema allows (additionalProperties is false); schema v2 has it: use --schema-version 2"
        );
        let typo = issues.iter().find(|i| i.path == "/target_disk_hint").unwrap();
        assert!(!typo.message.contains("v2"), "no version has it: {}", typo.message);
        let media = errors(HINTED, 0, Ask::Media);
        let hints = media.iter().find(|i| i.path == "/target_disk_hints").unwrap();
        assert!(
            hints.message.ends_with(
                "schema v2 has it: the task media must carry schema v2 as recipe.schema.json ($id https://shoal.dev/provisioner/v2/recipe.schema.json)"
            ),
            "{}",
            hints.message
        );
        assert!(errors(HINTED, 1, Ask::Option).iter().all(|i| !i.message.contains("has it")), "v2 is the last");
    }

    /// Every property the later version has and the earlier lacks is named, wherever it is:
    /// found from the schemas, so this holds for a version added later too.
    #[test]
    fn every_property_a_later_version_adds_is_named() {
        let v1: Value = serde_json::from_str(VERSIONS[0].text).unwrap();
        let v2: Value = serde_json::from_str(VERSIONS[1].text).unwrap();
        let added: Vec<&String> = v2["properties"]
            .as_object()
            .unwrap()
            .keys()
            .filter(|k| v1["properties"].get(k.as_str()).is_none())
            .collect();
        assert_eq!(added, ["target_disk_hints"]);
        for name in added {
            assert!(has_property(&v2, &[], name) && !has_property(&v1, &[], name));
        }
        assert!(has_property(&v2, &["target_disk_hints".into()], "wwn"), "nested, under a property");
        assert!(has_property(&v1, &["partition_layout".into(), "3".into()], "label"), "under items");
        assert!(!has_property(&v1, &["partition_layout".into(), "3".into()], "wwn"));
    }

    #[test]
    fn pointers_are_unescaped() {
        assert_eq!(tokens("/a~1b/c~0d/"), ["a/b", "c~d", ""]);
        assert!(tokens("").is_empty());
    }
}
