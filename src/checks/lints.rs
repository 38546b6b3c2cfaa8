//! Lints (seed 002, pipeline step 3): advice about the partition layout. They are warnings,
//! never failures, and the seed's valid examples raise none.

use std::collections::HashMap;

use serde_json::{Map, Value};

use super::Issue;
use crate::recipe::model::{canonical_type_guid, TYPE_ALIASES};
use crate::recipe::Document;

fn guid_of(alias: &str) -> &'static str {
    TYPE_ALIASES.iter().find(|(a, _)| *a == alias).map(|(_, guid)| *guid).expect("known alias")
}

/// One partition, as far as the lints read it (values of other types are the schema's
/// business and make a partition count as nothing here).
struct Part<'d> {
    guid: Option<String>,
    format: Option<&'d str>,
    size: Option<&'d str>,
    label: Option<&'d str>,
}

impl<'d> Part<'d> {
    fn new(fields: &'d Map<String, Value>) -> Self {
        let text = |name: &str| fields.get(name).and_then(Value::as_str);
        Part {
            guid: text("type_guid").and_then(canonical_type_guid),
            format: text("format"),
            size: text("size"),
            label: text("label"),
        }
    }

    fn is(&self, alias: &str) -> bool {
        self.guid.as_deref() == Some(guid_of(alias))
    }

    fn formatted(&self, formats: &[&str]) -> bool {
        self.format.is_some_and(|f| formats.contains(&f))
    }
}

/// All lints, as one check for the runner.
pub fn lints(doc: &Document, issues: &mut Vec<Issue>) {
    let Some(layout) = doc.object().and_then(|m| m.get("partition_layout")).and_then(Value::as_array) else {
        return;
    };
    let parts: Vec<Part> = layout.iter().filter_map(Value::as_object).map(Part::new).collect();
    if parts.len() != layout.len() {
        return;
    }
    let mut advise =
        |code: &'static str, message: &str| issues.push(Issue::warning("/partition_layout", code, message));
    match doc.str_field("task_target") {
        Some("install-linux.target") => {
            if !parts.iter().any(|p| p.is("ef00")) {
                advise(
                    "missingEfiPartition",
                    "has no EFI system partition (ef00): UEFI firmware will not boot the disk",
                );
            }
            if !parts.iter().any(|p| p.is("8300") && p.formatted(&["ext4", "xfs", "btrfs"])) {
                advise(
                    "missingLinuxRoot",
                    "has no Linux filesystem partition (8300) formatted ext4, xfs or btrfs for the root",
                );
            }
        }
        Some("install-windows.target") => {
            if !parts.iter().any(|p| p.is("ef00")) {
                advise(
                    "missingEfiPartition",
                    "has no EFI system partition (ef00): UEFI firmware will not boot the disk",
                );
            }
            if !parts.iter().any(|p| p.is("0c01")) {
                advise(
                    "missingMsrPartition",
                    "has no Microsoft reserved partition (0c01), which Windows expects on GPT",
                );
            }
            if !parts.iter().any(|p| p.is("0700") && p.formatted(&["ntfs"])) {
                advise("missingWindowsDataPartition", "has no basic data partition (0700) formatted ntfs for Windows");
            }
        }
        _ => {}
    }
    let last = parts.len().saturating_sub(1);
    let mut first_with_label: HashMap<&str, usize> = HashMap::new();
    for (i, part) in parts.iter().enumerate() {
        if i != last && part.size.is_some_and(|s| s.ends_with('%')) {
            issues.push(Issue::warning(
                format!("/partition_layout/{i}/size"),
                "percentNotLast",
                "is a percentage of the disk but not on the last partition; later partitions may not fit",
            ));
        }
        let first = part.label.map(|label| *first_with_label.entry(label).or_insert(i)).filter(|&first| first != i);
        if let Some(first) = first {
            issues.push(Issue::warning(
                format!("/partition_layout/{i}/label"),
                "duplicateLabel",
                format!("repeats the label of partition {} (index {first})", first + 1),
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recipe::parse;

    fn warnings(recipe: serde_json::Value) -> Vec<(String, String)> {
        let doc = parse(recipe.to_string().into_bytes()).unwrap();
        let mut issues = Vec::new();
        lints(&doc, &mut issues);
        assert!(issues.iter().all(|i| !i.is_error()));
        issues.into_iter().map(|i| (i.path, i.code.into_owned())).collect()
    }

    fn codes(found: &[(String, String)]) -> Vec<&str> {
        found.iter().map(|(_, c)| c.as_str()).collect()
    }

    #[test]
    fn linux_layout_wants_efi_and_a_root_filesystem() {
        let found = warnings(serde_json::json!({"task_target": "install-linux.target",
            "partition_layout": [{"size": "100%", "type_guid": "8200", "format": "swap"}]}));
        assert_eq!(codes(&found), ["missingEfiPartition", "missingLinuxRoot"]);
        // A full GUID counts like its alias.
        let found = warnings(serde_json::json!({"task_target": "install-linux.target", "partition_layout": [
            {"size": "1G", "type_guid": "C12A7328-F81F-11D2-BA4B-00A0C93EC93B"},
            {"size": "100%", "type_guid": "0fc63daf848347728e793d69d8477de4", "format": "xfs"}]}));
        assert_eq!(found, []);
    }

    #[test]
    fn windows_layout_wants_efi_msr_and_ntfs() {
        let found = warnings(serde_json::json!({"task_target": "install-windows.target",
            "partition_layout": [{"size": "100%", "type_guid": "0700", "format": "vfat"}]}));
        assert_eq!(codes(&found), ["missingEfiPartition", "missingMsrPartition", "missingWindowsDataPartition"]);
    }

    #[test]
    fn percent_not_last_and_duplicate_labels() {
        let found = warnings(serde_json::json!({"task_target": "supermicro-update.target", "partition_layout": [
            {"size": "50%", "type_guid": "8300", "label": "data"},
            {"size": "1G", "type_guid": "8300", "label": "data"},
            {"size": "100%", "type_guid": "8300", "label": "other"}]}));
        assert_eq!(
            found,
            [
                ("/partition_layout/0/size".to_owned(), "percentNotLast".to_owned()),
                ("/partition_layout/1/label".to_owned(), "duplicateLabel".to_owned()),
            ]
        );
    }

    #[test]
    fn no_layout_no_advice() {
        assert_eq!(warnings(serde_json::json!({"task_target": "install-windows.target"})), []);
        assert_eq!(warnings(serde_json::json!({"task_target": "install-linux.target", "partition_layout": "x"})), []);
    }
}
