//! The inputs of the hostile-world attack (issue 14), within the 8 MiB cap: shared by the
//! regression tests and `cargo xtask bench`'s hostile rows.

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
