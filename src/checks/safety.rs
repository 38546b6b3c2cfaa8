//! Static safety rules beyond the schema (SPEC §3). Each is a function over the recipe that
//! pushes issues; none reads the host. Messages name the rule, never the recipe's values.

use std::collections::BTreeSet;
use std::io;
use std::path::{Path, PathBuf};

use crate::envfile;
use crate::issues::{Code, Issue};
use crate::recipe::model::{Recipe, Size, SizeError, MAX_SIZE_BYTES};

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

/// The image's narrowing of the targets a recipe may start: one unit name a line, `#`
/// comments and blank lines ignored.
#[derive(Debug, Clone)]
pub struct AllowedTargets {
    file: PathBuf,
    names: BTreeSet<String>,
}

/// The most of an allowlist that is read: a name per line, a few hundred at most.
pub const MAX_ALLOWLIST_BYTES: u64 = 64 * 1024;

impl AllowedTargets {
    /// Reads the allowlist: a regular file (never a FIFO or a device), capped, UTF-8.
    pub fn load(file: &Path) -> io::Result<AllowedTargets> {
        let bytes = crate::files::read_regular(file, MAX_ALLOWLIST_BYTES)?;
        let text = String::from_utf8(bytes).map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "is not UTF-8"))?;
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
pub fn rules(policy: &Policy) -> impl Fn(&Recipe<'_>, &mut Vec<Issue>) + '_ {
    move |recipe, issues| {
        editor_hint(recipe, issues);
        target_disk_path(recipe, issues);
        task_target_allowed(recipe, policy, issues);
        payload_bytes(recipe, issues);
        env_values(recipe, issues);
        partition_sizes(recipe, issues);
    }
}

/// `$schema` is an editor hint (SPEC §3), but when present it is a string.
fn editor_hint(recipe: &Recipe<'_>, issues: &mut Vec<Issue>) {
    if recipe.editor_hint.is_some_and(|hint| !hint.is_string()) {
        issues.push(Issue::error("/$schema", Code::Keyword("type"), "must be of type string"));
    }
}

/// `target_disk` is a clean absolute path under /dev: the schema's `mapper/.+` would
/// otherwise let `..` walk out of /dev.
fn target_disk_path(recipe: &Recipe<'_>, issues: &mut Vec<Issue>) {
    let Some(disk) = recipe.target_disk else { return };
    let clean = disk
        .strip_prefix("/dev/")
        .is_some_and(|rest| rest.split('/').all(|segment| !matches!(segment, "" | "." | "..")));
    if !clean {
        issues.push(Issue::error(
            "/target_disk",
            Code::UnsafePath,
            "must be a clean absolute path under /dev (no '.' or '..' segments, no '//', no trailing '/')",
        ));
    }
}

/// The unit types systemd knows (systemd.unit(5)): a unit name ends in one of them.
const UNIT_TYPES: [&str; 11] =
    ["service", "socket", "target", "device", "mount", "automount", "swap", "timer", "path", "slice", "scope"];

/// Whether systemd can load a unit of this name, by its own grammar (`unit_name_is_valid` in
/// systemd's src/basic/unit-name.c): at most 255 bytes; a name of letters, digits and `:-_.\`
/// with a unit type's suffix; for an instance, `@` and a non-empty instance (which may hold
/// `@` too). A template (`name@.target`) cannot be started.
pub fn is_loadable_unit_name(unit: &str) -> bool {
    const MAX: usize = 255;
    let plain = |text: &str| text.bytes().all(|b| b.is_ascii_alphanumeric() || b":-_.\\".contains(&b));
    let Some((stem, suffix)) = unit.rsplit_once('.') else { return false };
    let stem_valid = match stem.split_once('@') {
        Some((prefix, instance)) => {
            !prefix.is_empty() && !instance.is_empty() && plain(prefix) && plain(&instance.replace('@', ""))
        }
        None => !stem.is_empty() && plain(stem),
    };
    unit.len() <= MAX && UNIT_TYPES.contains(&suffix) && stem_valid
}

fn task_target_allowed(recipe: &Recipe<'_>, policy: &Policy, issues: &mut Vec<Issue>) {
    let Some(target) = recipe.task_target else { return };
    if !is_loadable_unit_name(target) {
        issues.push(Issue::error(
            "/task_target",
            Code::InvalidUnitName,
            "is not a unit name systemd can load (at most 255 characters: letters, digits, ':', '-', '_', '.', '\\', an '@' before an instance, and a unit type suffix such as '.target')",
        ));
    } else if is_special_target(target) {
        issues.push(Issue::error(
            "/task_target",
            Code::ForbiddenTarget,
            "is one of systemd's special targets (systemd.special(7)), which a recipe may not start",
        ));
    } else if let Some(allowed) = &policy.allowed_targets {
        if !allowed.names.contains(target) {
            issues.push(Issue::error(
                "/task_target",
                Code::ForbiddenTarget,
                format!("is not one of the targets this image allows ({})", allowed.file.display()),
            ));
        }
    }
}

fn payload_bytes(recipe: &Recipe<'_>, issues: &mut Vec<Issue>) {
    for (field, limit) in BYTE_LIMITS {
        if recipe.string(field).is_some_and(|text| text.len() > limit) {
            issues.push(Issue::error(
                format!("/{field}"),
                Code::MaxBytes,
                format!("must be at most {limit} bytes of UTF-8"),
            ));
        }
    }
}

fn env_values(recipe: &Recipe<'_>, issues: &mut Vec<Issue>) {
    for (field, key) in envfile::FIELD_KEYS {
        if recipe.string(field).is_some_and(|text| !envfile::representable(text)) {
            issues.push(Issue::error(
                format!("/{field}"),
                Code::UnsafeEnvValue,
                format!("contains a control character, which {key} in recipe.env cannot carry"),
            ));
        }
    }
}

fn partition_sizes(recipe: &Recipe<'_>, issues: &mut Vec<Issue>) {
    for (i, partition) in recipe.partitions.iter().flatten().enumerate() {
        if partition.size.is_some_and(|size| Size::parse(size) == Err(SizeError::TooLarge)) {
            issues.push(Issue::error(
                format!("/partition_layout/{i}/size"),
                Code::SizeRange,
                format!("must be at most {MAX_SIZE_BYTES} bytes (8 PiB less one byte)"),
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
        rules(policy)(&Recipe::view(&doc), &mut issues);
        issues.into_iter().map(|i| (i.path, i.code.name().to_owned())).collect()
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
    fn target_names_systemd_cannot_load_are_refused() {
        for name in [
            "install-linux.target",
            "getty@tty1.service",
            "a@b@c.target",
            "x:y\\z_1.target",
            &format!("{}.target", "a".repeat(248)),
        ] {
            assert_eq!(one(serde_json::json!({"task_target": name})), [], "{name}");
        }
        let refused = issue("/task_target", "invalidUnitName");
        for name in [
            &format!("{}.target", "a".repeat(249)),
            &format!("{}.target", "a".repeat(300)),
            "install-linux",
            ".target",
            "install-linux.targt",
            "install linux.target",
            "template@.target",
            "@instance.target",
            "caf\u{e9}.target",
            "",
        ] {
            assert_eq!(one(serde_json::json!({"task_target": name})), refused, "{name:?}");
        }
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
