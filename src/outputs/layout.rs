//! `layout.json`: the partition layout normalized for the partitioning tool. Defaults only
//! add (seed 001): each partition keeps the recipe's fields as given, and gains an `index`
//! (1-based, the GPT partition number), `format` when absent (`raw`), the canonical type GUID
//! and the size in bytes or percent.

use serde_json::{json, Map, Value};

use crate::disks::Identity;
use crate::recipe::model::{Size, ValidPartition};

/// The `layout.json` bytes.
pub fn render(target_disk: Option<&str>, disk: Option<&Identity>, partitions: &[ValidPartition<'_>]) -> Vec<u8> {
    let partitions: Vec<Value> = partitions.iter().enumerate().map(|(i, p)| normalize(i + 1, p)).collect();
    let layout = json!({"target_disk": target_disk, "disk": disk, "partitions": partitions});
    let mut bytes = serde_json::to_vec_pretty(&layout).expect("a layout serializes");
    bytes.push(b'\n');
    bytes
}

fn normalize(index: usize, partition: &ValidPartition<'_>) -> Value {
    let mut out: Map<String, Value> = partition.fields.clone();
    out.insert("index".into(), index.into());
    out.entry("format").or_insert_with(|| "raw".into());
    out.insert("type_guid_canonical".into(), partition.type_guid.clone().into());
    match partition.size {
        Size::Bytes(bytes) => out.insert("size_bytes".into(), bytes.into()),
        Size::Percent(percent) => out.insert("size_percent".into(), percent.into()),
    };
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::issues::Findings;
    use crate::recipe::model::{Recipe, Valid};
    use crate::recipe::parse;

    #[test]
    fn partitions_keep_their_fields_and_gain_what_they_imply() {
        let doc = parse(
            br#"{"task_target": "install-linux.target", "target_disk": "/dev/sda", "partition_layout": [
                {"size": "512M", "type_guid": "EF00", "format": "vfat", "label": "EFI"},
                {"size": "100%", "type_guid": "0fc63daf848347728e793d69d8477de4"}]}"#
                .to_vec(),
        )
        .unwrap();
        let recipe = Recipe::view(&doc);
        let valid = Valid::new(&recipe, &Findings::default()).unwrap();
        let layout: Value =
            serde_json::from_slice(&render(recipe.target_disk, None, valid.partitions.as_ref().unwrap())).unwrap();
        assert_eq!(
            layout,
            json!({"target_disk": "/dev/sda", "disk": null, "partitions": [
                {"index": 1, "size": "512M", "type_guid": "EF00", "format": "vfat", "label": "EFI",
                 "type_guid_canonical": "C12A7328-F81F-11D2-BA4B-00A0C93EC93B", "size_bytes": 536870912},
                {"index": 2, "size": "100%", "type_guid": "0fc63daf848347728e793d69d8477de4", "format": "raw",
                 "type_guid_canonical": "0FC63DAF-8483-4772-8E79-3D69D8477DE4", "size_percent": 100},
            ]})
        );
    }
}
