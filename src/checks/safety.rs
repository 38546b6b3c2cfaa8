//! Static safety rules beyond the schema (SPEC §3). Each is a function over the recipe that
//! pushes issues; none reads the host. Messages name the rule, never the recipe's values.

use std::collections::BTreeSet;
use std::io;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::Issue;
use crate::outputs::env;
use crate::recipe::model::{Size, SizeError, MAX_SIZE_BYTES};
use crate::recipe::{Document, EDITOR_HINT};

/// systemd.special(7): targets with a meaning of their own to systemd. Starting one of them
/// from a recipe would reboot, halt, isolate or otherwise take over the maintenance OS.
pub const SPECIAL_TARGETS: &[&str] = &[
    "basic.target",
    "blockdev.target",
    "bluetooth.target",
    "boot-complete.target",
    "cryptsetup-pre.target",
    "cryptsetup.target",
    "ctrl-alt-del.target",
    "default.target",
    "emergency.target",
    "exit.target",
    "factory-reset.target",
    "factory-reset-now.target",
    "final.target",
    "first-boot-complete.target",
    "getty-pre.target",
    "getty.target",
    "graphical.target",
    "halt.target",
    "hibernate.target",
    "hybrid-sleep.target",
    "imports-pre.target",
    "imports.target",
    "integritysetup-pre.target",
    "integritysetup.target",
    "kbrequest.target",
    "kexec.target",
    "local-fs-pre.target",
    "local-fs.target",
    "machines.target",
    "multi-user.target",
    "network-online.target",
    "network-pre.target",
    "network.target",
    "nss-lookup.target",
    "nss-user-lookup.target",
    "paths.target",
    "poweroff.target",
    "printer.target",
    "reboot.target",
    "remote-cryptsetup.target",
    "remote-fs-pre.target",
    "remote-fs.target",
    "remote-veritysetup.target",
    "rescue.target",
    "rpcbind.target",
    "shutdown.target",
    "sigpwr.target",
    "sleep.target",
    "slices.target",
    "smartcard.target",
    "sockets.target",
    "soft-reboot.target",
    "sound.target",
    "ssh-access.target",
    "storage-target-mode.target",
    "suspend-then-hibernate.target",
    "suspend.target",
    "swap.target",
    "sysinit.target",
    "system-update-pre.target",
    "system-update.target",
    "time-set.target",
    "time-sync.target",
    "timers.target",
    "tpm2.target",
    "umount.target",
    "usb-gadget.target",
    "veritysetup-pre.target",
    "veritysetup.target",
];

/// Whether systemd gives `unit` a special meaning: the list above, the SysV `runlevelN`
/// aliases, and everything of the initrd.
pub fn is_special_target(unit: &str) -> bool {
    SPECIAL_TARGETS.contains(&unit) || unit.starts_with("runlevel") || unit.starts_with("initrd")
}

/// Byte limits that the schema's character limits cannot express (SPEC §3).
pub const BYTE_LIMITS: [(&str, usize); 3] =
    [("user_data", 1024 * 1024), ("unattend_xml", 1024 * 1024), ("ks_cfg", 256 * 1024)];

/// Fields written to `recipe.env`, with their keys (SPEC §5).
pub const ENV_FIELDS: [(&str, &str); 5] = [
    ("task_target", "TASK_TARGET"),
    ("target_disk", "TARGET_DISK"),
    ("oci_url", "OCI_URL"),
    ("firmware_url", "FIRMWARE_URL"),
    ("recipe_version", "RECIPE_VERSION"),
];

/// The image's narrowing of the targets a recipe may start: one unit name a line, `#`
/// comments and blank lines ignored.
#[derive(Debug, Clone)]
pub struct AllowedTargets {
    file: PathBuf,
    names: BTreeSet<String>,
}

impl AllowedTargets {
    pub fn load(file: &Path) -> io::Result<AllowedTargets> {
        let text = std::fs::read_to_string(file)?;
        let names = text
            .lines()
            .map(|line| line.split('#').next().unwrap_or_default().trim())
            .filter(|line| !line.is_empty())
            .map(str::to_owned)
            .collect();
        Ok(AllowedTargets { file: file.to_owned(), names })
    }
}

/// What the image configures for the static rules.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    pub allowed_targets: Option<AllowedTargets>,
}

/// All static safety rules, as one check for the runner.
pub fn rules(policy: &Policy) -> impl Fn(&Document, &mut Vec<Issue>) + '_ {
    move |doc, issues| {
        editor_hint(doc, issues);
        target_disk_path(doc, issues);
        task_target_allowed(doc, policy, issues);
        payload_bytes(doc, issues);
        env_values(doc, issues);
        partition_sizes(doc, issues);
    }
}

/// `$schema` is an editor hint (SPEC §3), but when present it is a string.
fn editor_hint(doc: &Document, issues: &mut Vec<Issue>) {
    if doc.object().and_then(|m| m.get(EDITOR_HINT)).is_some_and(|v| !v.is_string()) {
        issues.push(Issue::error("/$schema", "type", "must be of type string"));
    }
}

/// `target_disk` is a clean absolute path under /dev: the schema's `mapper/.+` would
/// otherwise let `..` walk out of /dev.
fn target_disk_path(doc: &Document, issues: &mut Vec<Issue>) {
    let Some(disk) = doc.str_field("target_disk") else { return };
    let clean = disk
        .strip_prefix("/dev/")
        .is_some_and(|rest| rest.split('/').all(|segment| !matches!(segment, "" | "." | "..")));
    if !clean {
        issues.push(Issue::error(
            "/target_disk",
            "unsafePath",
            "must be a clean absolute path under /dev (no '.' or '..' segments, no '//', no trailing '/')",
        ));
    }
}

fn task_target_allowed(doc: &Document, policy: &Policy, issues: &mut Vec<Issue>) {
    let Some(target) = doc.str_field("task_target") else { return };
    if is_special_target(target) {
        issues.push(Issue::error(
            "/task_target",
            "forbiddenTarget",
            "is one of systemd's special targets (systemd.special(7)), which a recipe may not start",
        ));
    } else if let Some(allowed) = &policy.allowed_targets {
        if !allowed.names.contains(target) {
            issues.push(Issue::error(
                "/task_target",
                "forbiddenTarget",
                format!("is not one of the targets this image allows ({})", allowed.file.display()),
            ));
        }
    }
}

fn payload_bytes(doc: &Document, issues: &mut Vec<Issue>) {
    for (field, limit) in BYTE_LIMITS {
        if doc.str_field(field).is_some_and(|text| text.len() > limit) {
            issues.push(Issue::error(
                format!("/{field}"),
                "maxBytes",
                format!("must be at most {limit} bytes of UTF-8"),
            ));
        }
    }
}

fn env_values(doc: &Document, issues: &mut Vec<Issue>) {
    for (field, key) in ENV_FIELDS {
        if doc.str_field(field).is_some_and(|text| !env::representable(text)) {
            issues.push(Issue::error(
                format!("/{field}"),
                "unsafeEnvValue",
                format!("contains a control character, which {key} in recipe.env cannot carry"),
            ));
        }
    }
}

fn partition_sizes(doc: &Document, issues: &mut Vec<Issue>) {
    let Some(partitions) = doc.object().and_then(|m| m.get("partition_layout")).and_then(Value::as_array) else {
        return;
    };
    for (i, partition) in partitions.iter().enumerate() {
        let size = partition.get("size").and_then(Value::as_str);
        if size.is_some_and(|size| Size::parse(size) == Err(SizeError::TooLarge)) {
            issues.push(Issue::error(
                format!("/partition_layout/{i}/size"),
                "sizeRange",
                format!("must be at most {MAX_SIZE_BYTES} bytes (8 PiB)"),
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recipe::parse;

    fn run(policy: &Policy, recipe: serde_json::Value) -> Vec<(String, String)> {
        let doc = parse(recipe.to_string().into_bytes()).unwrap();
        let mut issues = Vec::new();
        rules(policy)(&doc, &mut issues);
        issues.into_iter().map(|i| (i.path, i.code.into_owned())).collect()
    }

    fn one(recipe: serde_json::Value) -> Vec<(String, String)> {
        run(&Policy::default(), recipe)
    }

    fn issue(path: &str, code: &str) -> Vec<(String, String)> {
        vec![(path.to_owned(), code.to_owned())]
    }

    #[test]
    fn target_disk_must_be_a_clean_path_under_dev() {
        for good in ["/dev/sda", "/dev/nvme0n1", "/dev/mapper/mpathX", "/dev/disk/by-id/wwn-0x5000"] {
            assert_eq!(one(serde_json::json!({"target_disk": good})), [], "{good}");
        }
        for bad in [
            "sda",
            "/dev/../../etc/passwd",
            "/dev/mapper/../sda",
            "/dev//sda",
            "/dev/./sda",
            "/dev/sda/",
            "/dev/",
            "/etc/sda",
        ] {
            assert_eq!(one(serde_json::json!({"target_disk": bad})), issue("/target_disk", "unsafePath"), "{bad}");
        }
    }

    #[test]
    fn special_targets_are_forbidden() {
        for special in [
            "reboot.target",
            "poweroff.target",
            "emergency.target",
            "default.target",
            "runlevel6.target",
            "initrd-switch-root.target",
            "multi-user.target",
        ] {
            assert_eq!(
                one(serde_json::json!({"task_target": special})),
                issue("/task_target", "forbiddenTarget"),
                "{special}"
            );
        }
        assert_eq!(one(serde_json::json!({"task_target": "install-linux.target"})), []);
    }

    #[test]
    fn the_image_allowlist_narrows_targets() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("allowed-targets");
        std::fs::write(&file, "# installers only\ninstall-linux.target\n\n  install-esxi.target  # trailing comment\n")
            .unwrap();
        let policy = Policy { allowed_targets: Some(AllowedTargets::load(&file).unwrap()) };
        assert_eq!(run(&policy, serde_json::json!({"task_target": "install-esxi.target"})), []);
        assert_eq!(
            run(&policy, serde_json::json!({"task_target": "supermicro-update.target"})),
            issue("/task_target", "forbiddenTarget")
        );
    }

    #[test]
    fn payloads_are_limited_in_bytes() {
        // 600 Ki two-byte characters: within the schema's 1 Mi characters, over 1 MiB of bytes.
        let wide = "é".repeat(600 * 1024);
        assert_eq!(one(serde_json::json!({"user_data": wide})), issue("/user_data", "maxBytes"));
        assert_eq!(one(serde_json::json!({"unattend_xml": wide})), issue("/unattend_xml", "maxBytes"));
        assert_eq!(one(serde_json::json!({"ks_cfg": "x".repeat(256 * 1024 + 1)})), issue("/ks_cfg", "maxBytes"));
        assert_eq!(one(serde_json::json!({"ks_cfg": "x".repeat(256 * 1024)})), []);
    }

    #[test]
    fn env_values_with_control_characters_are_refused() {
        assert_eq!(one(serde_json::json!({"recipe_version": "1\n2"})), issue("/recipe_version", "unsafeEnvValue"));
        assert_eq!(one(serde_json::json!({"recipe_version": "$(reboot) `x` 'q' \"d\" \\ %"})), []);
        // user_data is a file, not an env value: newlines are its nature.
        assert_eq!(one(serde_json::json!({"user_data": "a\nb\0"})), []);
    }

    #[test]
    fn sizes_beyond_8_pib_are_refused() {
        let layout = |size: &str| serde_json::json!({"partition_layout": [{"size": size, "type_guid": "8300"}]});
        assert_eq!(one(layout("9P")), issue("/partition_layout/0/size", "sizeRange"));
        assert_eq!(one(layout("7P")), []);
        // Outside the grammar is the schema's (and the contract's) business, not this rule's.
        assert_eq!(one(layout("1Z")), []);
    }

    #[test]
    fn editor_hint_must_be_a_string() {
        assert_eq!(one(serde_json::json!({"$schema": 7})), issue("/$schema", "type"));
        assert_eq!(one(serde_json::json!({"$schema": "./recipe.schema.json"})), []);
    }
}
