//! Lints (seed 002, pipeline step 3): advice about the partition layout. They are warnings,
//! never failures, and the seed's valid examples raise none.

use ahash::AHashMap as HashMap;

use crate::issues::{Code, Issue};
use crate::recipe::model::{canonical_type_guid, Partition, Recipe};

/// One partition, as far as the lints read it.
struct Part<'d> {
    /// The canonical GUID of its type, when it has one.
    guid: Option<String>,
    partition: &'d Partition<'d>,
}

impl Part<'_> {
    /// Whether it is of the type of this sgdisk alias.
    fn is(&self, alias: &str) -> bool {
        self.guid.is_some() && self.guid == canonical_type_guid(alias)
    }

    fn formatted(&self, formats: &[&str]) -> bool {
        self.partition.format.is_some_and(|f| formats.contains(&f))
    }
}

/// All lints, as one check for the runner. A layout with an item that is not an object is
/// the schema's business and draws no advice.
pub fn lints(recipe: &Recipe<'_>, issues: &mut Vec<Issue>) {
    let Some(partitions) = &recipe.partitions else { return };
    if partitions.iter().any(|p| p.fields.is_none()) {
        return;
    }
    let parts: Vec<Part> = partitions
        .iter()
        .map(|partition| Part { guid: partition.type_guid.and_then(canonical_type_guid), partition })
        .collect();
    let mut advise = |code: Code, message: &str| issues.push(Issue::warning("/partition_layout", code, message));
    match recipe.task_target {
        Some("install-linux.target") => {
            if !parts.iter().any(|p| p.is("ef00")) {
                advise(
                    Code::MissingEfiPartition,
                    "has no EFI system partition (ef00): UEFI firmware will not boot the disk",
                );
            }
            if !parts.iter().any(|p| p.is("8300") && p.formatted(&["ext4", "xfs", "btrfs"])) {
                advise(
                    Code::MissingLinuxRoot,
                    "has no Linux filesystem partition (8300) formatted ext4, xfs or btrfs for the root",
                );
            }
        }
        Some("install-windows.target") => {
            if !parts.iter().any(|p| p.is("ef00")) {
                advise(
                    Code::MissingEfiPartition,
                    "has no EFI system partition (ef00): UEFI firmware will not boot the disk",
                );
            }
            if !parts.iter().any(|p| p.is("0c01")) {
                advise(
                    Code::MissingMsrPartition,
                    "has no Microsoft reserved partition (0c01), which Windows expects on GPT",
                );
            }
            if !parts.iter().any(|p| p.is("0700") && p.formatted(&["ntfs"])) {
                advise(
                    Code::MissingWindowsDataPartition,
                    "has no basic data partition (0700) formatted ntfs for Windows",
                );
            }
        }
        _ => {}
    }
    let last = parts.len().saturating_sub(1);
    let mut first_with_label: HashMap<&str, usize> = HashMap::new();
    for (i, part) in parts.iter().enumerate() {
        if i != last && part.partition.size.is_some_and(|s| s.ends_with('%')) {
            issues.push(Issue::warning(
                format!("/partition_layout/{i}/size"),
                Code::PercentNotLast,
                "is a percentage of the disk but not on the last partition; later partitions may not fit",
            ));
        }
        let first =
            part.partition.label.map(|label| *first_with_label.entry(label).or_insert(i)).filter(|&first| first != i);
        if let Some(first) = first {
            issues.push(Issue::warning(
                format!("/partition_layout/{i}/label"),
                Code::DuplicateLabel,
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
        lints(&Recipe::view(&doc), &mut issues);
        assert!(issues.iter().all(|i| !i.is_error()));
        issues.into_iter().map(|i| (i.path, i.code.name().to_owned())).collect()
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
