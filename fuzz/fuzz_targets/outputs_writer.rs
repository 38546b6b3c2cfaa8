//! Structured recipes through validation and, when valid, `Outputs::write` into a fresh
//! directory. Then every `recipe.env` value must read back byte-identical through the model
//! of systemd's parser and through a real POSIX shell, every payload file must be its string
//! byte for byte, and the modes must be 0600 and 0700. When invalid, each error about an env
//! field must be exactly what that field's value deserves: `unsafeEnvValue` if and only if it
//! holds a control character, and nothing the generator cannot explain.

#![no_main]

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use provision_dispatcher::atomic::{Existing, MARKER};
use provision_dispatcher::envfile::parse_like_systemd;
use provision_dispatcher::issues::{Code, Issue};
use provision_dispatcher::outputs::Outputs;
use provision_dispatcher::recipe;
use provision_dispatcher::recipe::model::{Recipe, Valid};
use provision_dispatcher_fuzz::{check, SCHEMA};
use serde_json::{json, Map, Value};

#[derive(Arbitrary, Debug)]
struct Input {
    task: Task,
    recipe_version: Option<String>,
    oci_url: Option<String>,
    /// `target_disk` is `/dev/mapper/` and this: the one form of it that is free text.
    mapper_name: Option<String>,
    /// `firmware_url` is `https://fw.example/` and this.
    firmware_path: Option<String>,
    user_data: Option<String>,
    ks_cfg: Option<String>,
    metadata: Option<Vec<(String, Meta)>>,
    partitions: Option<Vec<Part>>,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Task {
    Linux,
    Windows,
    Esxi,
    Supermicro,
    Other,
}

#[derive(Arbitrary, Debug)]
enum Meta {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Text(String),
    List(Vec<Meta>),
    Object(Vec<(String, Meta)>),
}

#[derive(Arbitrary, Debug)]
struct Part {
    size: PartSize,
    type_guid: u8,
    format: Option<u8>,
    label: Option<String>,
}

#[derive(Arbitrary, Debug)]
enum PartSize {
    Bytes(u16, u8),
    Percent(u8),
}

const TYPE_GUIDS: [&str; 9] = [
    "ef00",
    "8300",
    "8200",
    "0700",
    "0C01",
    "fc00",
    "fd00",
    "0FC63DAF-8483-4772-8E79-3D69D8477DE4",
    "c12a7328f81f11d2ba4b00a0c93ec93b",
];
const FORMATS: [&str; 7] = ["vfat", "ext4", "xfs", "btrfs", "ntfs", "swap", "raw"];
const UNITS: [(&str, u32); 9] =
    [("", 0), ("B", 0), ("K", 10), ("KB", 10), ("M", 20), ("MB", 20), ("G", 30), ("T", 40), ("P", 50)];
/// `MAX_SIZE_BYTES`, stated again so that the target checks the rule rather than reuses it.
const MAX_SIZE: u128 = (1 << 53) - 1;
/// The strict reader refuses nesting beyond serde_json's 128; metadata stays well inside.
const MAX_META_DEPTH: usize = 16;

/// The recipe the input stands for, completed with what its task requires so that most
/// inputs are valid and reach the writer.
struct Built {
    value: Value,
    /// `(pointer, env key, value)` of every env field the recipe has.
    env: Vec<(&'static str, &'static str, String)>,
    /// `(file name, env key, contents)` of every payload the recipe has.
    payloads: Vec<(&'static str, &'static str, Vec<u8>)>,
    labels: Vec<Option<String>>,
    /// `(pointer, code)` of every error the inputs imply, the firmware URL's format aside.
    expected_errors: Vec<(String, &'static str)>,
}

fn build(input: &Input) -> Built {
    let (task_target, needs) = match input.task {
        Task::Linux => ("install-linux.target", &["target_disk", "oci_url", "partition_layout"][..]),
        Task::Windows => ("install-windows.target", &["target_disk", "oci_url"][..]),
        Task::Esxi => ("install-esxi.target", &["ks_cfg"][..]),
        Task::Supermicro => ("supermicro-update.target", &["firmware_url"][..]),
        Task::Other => ("diagnostics.target", &[][..]),
    };
    let needed = |field| needs.contains(&field);
    let mut errors = Vec::new();
    let mut env = vec![("/task_target", "TASK_TARGET", task_target.to_owned())];

    let target_disk = match &input.mapper_name {
        Some(name) => {
            if name.is_empty() || name.contains('\n') {
                errors.push(("/target_disk".to_owned(), "pattern"));
            }
            if ("mapper/".to_owned() + name).split('/').any(|s| matches!(s, "" | "." | "..")) {
                errors.push(("/target_disk".to_owned(), "unsafePath"));
            }
            Some(format!("/dev/mapper/{name}"))
        }
        None => needed("target_disk").then(|| "/dev/sda".to_owned()),
    };
    let oci_url = input.oci_url.clone().or_else(|| needed("oci_url").then(|| "registry.example/os:1".to_owned()));
    if oci_url.as_deref() == Some("") {
        errors.push(("/oci_url".to_owned(), "minLength"));
    }
    let firmware_url = match &input.firmware_path {
        Some(path) => Some(format!("https://fw.example/{path}")),
        None => needed("firmware_url").then(|| "https://fw.example/bmc.bin".to_owned()),
    };
    for (pointer, key, value) in [
        ("/target_disk", "TARGET_DISK", target_disk),
        ("/oci_url", "OCI_URL", oci_url),
        ("/firmware_url", "FIRMWARE_URL", firmware_url),
        ("/recipe_version", "RECIPE_VERSION", input.recipe_version.clone()),
    ] {
        if let Some(value) = value {
            env.push((pointer, key, value));
        }
    }
    for (pointer, _, value) in &env {
        if value.chars().any(|c| c.is_ascii_control()) {
            errors.push(((*pointer).to_owned(), "unsafeEnvValue"));
        }
    }

    let mut recipe = Map::new();
    for (pointer, _, value) in &env {
        recipe.insert(pointer[1..].to_owned(), value.clone().into());
    }
    let mut payloads = Vec::new();
    let ks_cfg = input.ks_cfg.clone().or_else(|| needed("ks_cfg").then(|| "vmaccepteula\n".to_owned()));
    for (field, file, key, text) in [
        ("user_data", "user-data", "USER_DATA_FILE", input.user_data.clone()),
        ("ks_cfg", "ks.cfg", "KS_CFG_FILE", ks_cfg),
    ] {
        if let Some(text) = text {
            payloads.push((file, key, text.clone().into_bytes()));
            recipe.insert(field.to_owned(), text.into());
        }
    }
    if let Some(entries) = &input.metadata {
        let metadata = object(entries, 0);
        payloads.push(("metadata.json", "METADATA_FILE", format!("{metadata}\n").into_bytes()));
        recipe.insert("metadata".to_owned(), metadata);
    }

    let mut labels = Vec::new();
    let parts: Vec<Value> = match &input.partitions {
        Some(parts) if !parts.is_empty() => parts
            .iter()
            .take(64)
            .enumerate()
            .map(|(i, p)| {
                let (size, too_large) = size(&p.size);
                if too_large {
                    errors.push((format!("/partition_layout/{i}/size"), "sizeRange"));
                }
                let mut part =
                    json!({"size": size, "type_guid": TYPE_GUIDS[usize::from(p.type_guid) % TYPE_GUIDS.len()]});
                if let Some(format) = p.format {
                    part["format"] = FORMATS[usize::from(format) % FORMATS.len()].into();
                }
                if let Some(label) = &p.label {
                    if label.chars().count() > 32 {
                        errors.push((format!("/partition_layout/{i}/label"), "maxLength"));
                    }
                    part["label"] = label.as_str().into();
                }
                labels.push(p.label.clone());
                part
            })
            .collect(),
        _ if needed("partition_layout") => {
            labels.push(None);
            vec![json!({"size": "100%", "type_guid": "8300"})]
        }
        _ => Vec::new(),
    };
    if !parts.is_empty() {
        recipe.insert("partition_layout".to_owned(), parts.into());
        payloads.push(("layout.json", "LAYOUT_FILE", Vec::new()));
    }
    Built { value: recipe.into(), env, payloads, labels, expected_errors: errors }
}

fn size(size: &PartSize) -> (String, bool) {
    match *size {
        PartSize::Bytes(n, unit) => {
            let n = n.max(1);
            let (suffix, shift) = UNITS[usize::from(unit) % UNITS.len()];
            (format!("{n}{suffix}"), u128::from(n) << shift > MAX_SIZE)
        }
        PartSize::Percent(p) => (format!("{}%", p % 100 + 1), false),
    }
}

fn object(entries: &[(String, Meta)], depth: usize) -> Value {
    entries.iter().map(|(k, v)| (k.clone(), meta(v, depth + 1))).collect::<Map<_, _>>().into()
}

fn meta(m: &Meta, depth: usize) -> Value {
    match m {
        _ if depth > MAX_META_DEPTH => Value::Null,
        Meta::Null => Value::Null,
        Meta::Bool(b) => (*b).into(),
        Meta::Int(i) => (*i).into(),
        Meta::Float(f) => (*f).into(),
        Meta::Text(s) => s.as_str().into(),
        Meta::List(items) => items.iter().map(|v| meta(v, depth + 1)).collect(),
        Meta::Object(entries) => object(entries, depth),
    }
}

fuzz_target!(|input: Input| {
    let built = build(&input);
    let text = built.value.to_string();
    let doc = recipe::parse(text.clone().into_bytes()).expect("serde_json's own output reads strictly");
    let recipe = Recipe::view(&doc);
    let findings = check(&recipe);
    match Valid::new(&recipe, &findings) {
        None => invalid(&built, findings.errors()),
        Some(valid) => {
            assert!(built.expected_errors.is_empty(), "valid, but expected {:?}", built.expected_errors);
            written(&built, &valid);
        }
    }
});

/// The errors are exactly the ones the inputs imply (a firmware URL may also fail `format`).
fn invalid<'f>(built: &Built, errors: impl Iterator<Item = &'f Issue>) {
    let mut found: Vec<(String, &str)> = errors
        .filter(|e| !(e.path == "/firmware_url" && e.code == Code::Keyword("format")))
        .map(|e| (e.path.clone(), e.code.name()))
        .collect();
    let mut expected = built.expected_errors.clone();
    found.sort();
    expected.sort();
    assert_eq!(found, expected, "{}", built.value);
}

fn written(built: &Built, valid: &Valid<'_>) {
    let scratch = scratch_dir();
    let dir = scratch.path().join("provision");
    let schema_id = SCHEMA.id().unwrap_or_default();
    let outputs = Outputs::new(valid, schema_id, &dir, None);
    outputs.write(&dir, Existing::Refuse).expect("the outputs are written");

    let mut expected_env: BTreeMap<&str, String> =
        built.env.iter().map(|(_, key, value)| (*key, value.clone())).collect();
    expected_env.insert("RECIPE_SCHEMA_ID", schema_id.to_owned());
    let mut expected_files = vec![MARKER.to_owned(), "recipe.env".to_owned()];
    for (name, key, _) in &built.payloads {
        expected_env.insert(key, dir.join(name).display().to_string());
        expected_files.push((*name).to_owned());
    }

    assert_eq!(mode(&dir), 0o700);
    let mut names: Vec<String> =
        fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    names.sort();
    expected_files.sort();
    assert_eq!(names, expected_files, "exactly the files the recipe implies");
    for name in &names {
        assert_eq!(mode(&dir.join(name)), 0o600, "{name}");
    }
    let siblings = fs::read_dir(scratch.path()).unwrap().count();
    assert_eq!(siblings, 1, "no staging directory left beside the outputs");

    for (name, _, contents) in &built.payloads {
        let on_disk = fs::read(dir.join(name)).unwrap();
        if *name == "layout.json" {
            let layout: Value = serde_json::from_slice(&on_disk).expect("layout.json is JSON");
            let labels: Vec<Option<String>> = layout["partitions"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p.get("label").map(|l| l.as_str().unwrap().to_owned()))
                .collect();
            assert_eq!(labels, built.labels);
            assert_eq!(layout["target_disk"].as_str(), built.value["target_disk"].as_str());
        } else {
            assert!(on_disk == *contents, "{name} is not its string byte for byte");
        }
    }

    let env_text = fs::read_to_string(dir.join("recipe.env")).unwrap();
    let systemd = parse_like_systemd(&env_text);
    let read_back: BTreeMap<&str, String> = systemd.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
    assert_eq!(read_back.len(), systemd.len(), "a key repeats:\n{env_text}");
    assert_eq!(read_back, expected_env, "systemd reads back something else:\n{env_text}");
    assert_eq!(shell_read_back(&dir, &expected_env), expected_env, "sh reads back something else:\n{env_text}");
}

/// What `sh` sees after `. ./recipe.env`: each expected key's value, printed NUL-terminated
/// in a clean environment. Anything on stderr or a failing status is a failure too.
fn shell_read_back<'k>(dir: &Path, keys: &BTreeMap<&'k str, String>) -> BTreeMap<&'k str, String> {
    // The path is the scratch directory's (letters, digits, `/`, `-`, `.`), safe to quote
    // as is; no working directory for the child lets std spawn it without a fork.
    let mut script = format!(". '{}' && printf '%s\\0'", dir.join("recipe.env").display());
    for key in keys.keys() {
        script.push_str(&format!(" \"${key}\""));
    }
    let out = Command::new("/bin/sh").arg("-c").arg(&script).env_clear().output().expect("sh runs");
    assert!(out.status.success() && out.stderr.is_empty(), "sh: {out:?}");
    let text = String::from_utf8(out.stdout).expect("values are UTF-8");
    let values = text.strip_suffix('\0').map_or(Vec::new(), |t| t.split('\0').collect());
    assert_eq!(values.len(), keys.len(), "{text:?}");
    keys.keys().copied().zip(values.into_iter().map(str::to_owned)).collect()
}

/// A fresh directory on tmpfs where there is one: the writer fsyncs every file, and a
/// fuzzer writing thousands of sets a second should not do that to a disk.
fn scratch_dir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    let base = if shm.is_dir() { shm.to_owned() } else { std::env::temp_dir() };
    tempfile::Builder::new().prefix("outputs-writer-").tempdir_in(base).unwrap()
}

fn mode(path: &Path) -> u32 {
    fs::metadata(path).unwrap().permissions().mode() & 0o7777
}
