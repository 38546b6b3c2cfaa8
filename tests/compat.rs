//! Which media an image meets (issue 28): docs/reference.md's compatibility matrix, every cell
//! through the real binary. Media carry version 1, version 2, a version-1 `$id` schema that a
//! newer controller widened (an optional field, an enum value, a new target with fields of
//! its own), or a schema of a version this binary does not know (with and without the image's
//! opt-in); recipes hold only fields the dispatcher knows, or fields it does not interpret.
//! Each cell: the exit code, and what the target sees (`recipe.env`, `recipe.json` byte for
//! byte).

mod common;

use std::path::Path;

use common::machine::{example, run_command, Machine};
use common::{dispatcher, root, run};
use serde_json::{json, Value};

const V1: &str = "https://shoal.dev/provisioner/recipe.schema.json";
const V2: &str = "https://shoal.dev/provisioner/v2/recipe.schema.json";
const V3: &str = "https://shoal.dev/provisioner/v3/recipe.schema.json";

fn canonical(version: u32) -> Value {
    let file = if version == 1 { "iso/recipe.schema.json" } else { "iso/recipe.schema.v2.json" };
    serde_json::from_slice(&std::fs::read(root().join(file)).unwrap()).unwrap()
}

/// Version 1 as a newer controller widened it under the same `$id` (seed 002's backward-
/// compatible changes): an optional `hostname`, `zfs` in the `format` enum, and
/// `install-talos.target` with `extra_disks` and `bios_settings`.
fn widened_v1() -> Value {
    let mut schema = canonical(1);
    schema["properties"]["hostname"] = json!({"type": "string", "description": "The host's name."});
    schema["properties"]["extra_disks"] =
        json!({"type": "array", "items": {"type": "string"}, "description": "More disks."});
    schema["properties"]["bios_settings"] = json!({"type": "object", "description": "BIOS settings to apply."});
    let formats =
        schema["properties"]["partition_layout"]["items"]["properties"]["format"]["enum"].as_array_mut().unwrap();
    formats.push(json!("zfs"));
    let talos = json!({"if": {"properties": {"task_target": {"const": "install-talos.target"}}, "required": ["task_target"]},
                       "then": {"required": ["target_disk", "extra_disks"]}});
    schema["allOf"].as_array_mut().unwrap().push(talos);
    schema
}

fn with_id(mut schema: Value, id: &str) -> Value {
    schema["$id"] = json!(id);
    schema
}

/// The recipe with fields the dispatcher does not interpret, for each schema.
fn unknown_fields(schema: &str) -> Value {
    match schema {
        "v2" => {
            let mut recipe = example("seed-linux");
            recipe["target_disk_hints"] = json!({"serial": "PD-TARGET-0001"});
            recipe
        }
        _ => {
            let mut recipe = example("seed-linux");
            recipe["hostname"] = json!("node-17");
            recipe["partition_layout"][1]["format"] = json!("zfs");
            recipe
        }
    }
}

/// `render` of `recipe` against `schema` (written as the text a controller would send):
/// `(exit, stderr, recipe.env, recipe.json)`.
fn render(schema: &Value, recipe: &Value, extra: &[&str]) -> (i32, String, String, Vec<u8>) {
    let dir = tempfile::tempdir().unwrap();
    let (schema_file, recipe_file, out) =
        (dir.path().join("recipe.schema.json"), dir.path().join("recipe.json"), dir.path().join("out"));
    std::fs::write(&schema_file, serde_json::to_vec_pretty(schema).unwrap()).unwrap();
    // Pretty, with a key order of its own: byte for byte means these bytes.
    let text = format!("{}\n", serde_json::to_string_pretty(recipe).unwrap());
    std::fs::write(&recipe_file, &text).unwrap();
    let result = run(dispatcher()
        .arg("render")
        .arg(&recipe_file)
        .arg("--schema")
        .arg(&schema_file)
        .arg("--output")
        .arg(&out)
        .args(extra));
    let read = |name: &str| std::fs::read(out.join(name)).unwrap_or_default();
    if result.code == 0 {
        assert_eq!(read("recipe.json"), text.as_bytes(), "recipe.json is the recipe byte for byte");
    }
    let env = String::from_utf8(read("recipe.env")).unwrap().replace(out.to_str().unwrap(), "@OUTPUT@");
    (result.code, result.stderr, env, read("recipe.json"))
}

fn env_has(env: &str, key: &str, value: &str) -> bool {
    env.lines().any(|line| line == format!("{key}=\"{value}\""))
}

#[test]
fn version_1_media() {
    let (code, _, env, _) = render(&canonical(1), &example("seed-linux"), &[]);
    assert_eq!(code, 0);
    assert!(env_has(&env, "RECIPE_SCHEMA_ID", V1), "{env}");
    assert!(env_has(&env, "RECIPE_FILE", "@OUTPUT@/recipe.json"), "{env}");
    let (code, stderr, _, _) = render(&canonical(1), &unknown_fields("v1"), &[]);
    assert_eq!(code, 65, "version 1 is closed: {stderr}");
    assert!(stderr.contains("/hostname: is not a property the schema allows"), "{stderr}");
}

#[test]
fn version_2_media() {
    let (code, _, env, _) = render(&canonical(2), &example("seed-linux"), &[]);
    assert_eq!(code, 0);
    assert!(env_has(&env, "RECIPE_SCHEMA_ID", V2), "{env}");
    let (code, stderr, env, json) = render(&canonical(2), &unknown_fields("v2"), &[]);
    assert_eq!(code, 0, "{stderr}");
    assert!(!env.contains("PD-TARGET-0001"), "hints reach the target in recipe.json only: {env}");
    assert!(String::from_utf8(json).unwrap().contains("PD-TARGET-0001"));
    // Version 2 is as closed as version 1 to what neither defines.
    let (code, _, _, _) = render(&canonical(2), &unknown_fields("v1"), &[]);
    assert_eq!(code, 65);
}

/// The lossy transform of issue 28: the widened schema's fields reached no output.
#[test]
fn version_1_widened_under_its_id() {
    let (code, _, env, _) = render(&widened_v1(), &example("seed-linux"), &[]);
    assert_eq!(code, 0);
    let (code, stderr, env_unknown, json) = render(&widened_v1(), &unknown_fields("v1"), &[]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(env_unknown, env, "recipe.env carries what the dispatcher interprets, no more");
    let recipe: Value = serde_json::from_slice(&json).unwrap();
    assert_eq!(recipe["hostname"], "node-17", "the target reads it from RECIPE_FILE");
    let mut talos = json!({"task_target": "install-talos.target", "target_disk": "/dev/sdb",
                           "extra_disks": ["/dev/sdc"], "bios_settings": {"SecureBoot": "Enabled"}});
    let (code, stderr, env, json) = render(&widened_v1(), &talos, &[]);
    assert_eq!(code, 0, "{stderr}");
    assert!(env_has(&env, "TASK_TARGET", "install-talos.target"), "{env}");
    assert_eq!(serde_json::from_slice::<Value>(&json).unwrap()["bios_settings"]["SecureBoot"], "Enabled");
    // The new target's own rule is the schema's, and it holds.
    talos.as_object_mut().unwrap().remove("extra_disks");
    let (code, stderr, _, _) = render(&widened_v1(), &talos, &[]);
    assert_eq!(code, 65);
    assert!(stderr.contains("/extra_disks: is required when task_target is \"install-talos.target\""), "{stderr}");
}

#[test]
fn a_version_this_image_does_not_know() {
    for recipe in [example("seed-linux"), unknown_fields("v1")] {
        let (code, stderr, env, _) = render(&with_id(widened_v1(), V3), &recipe, &[]);
        assert_eq!(code, 78, "{stderr}");
        assert!(stderr.contains("the schema is of a version this image does not know"), "{stderr}");
        assert!(stderr.contains(&format!("v1 ({V1}), v2 ({V2})")), "{stderr}");
        assert!(stderr.contains("update the maintenance-OS image"), "{stderr}");
        assert!(env.is_empty(), "nothing written");
        // The image's opt-in: the media's schema decides, and its $id is recorded.
        let (code, stderr, env, _) = render(&with_id(widened_v1(), V3), &recipe, &["--accept-unknown-schema-id"]);
        assert_eq!(code, 0, "{stderr}");
        assert!(env_has(&env, "RECIPE_SCHEMA_ID", V3), "{env}");
    }
}

/// The dispatcher's own contract and rules apply whatever the version: a widened schema that
/// lets `target_disk` be anything does not let an unsafe path through.
#[test]
fn the_safety_rules_hold_under_any_version() {
    let mut loose = widened_v1();
    loose["properties"]["target_disk"] = json!({"type": "string"});
    let mut recipe = example("seed-linux");
    recipe["target_disk"] = json!("/dev/../etc/passwd");
    let (code, stderr, _, _) = render(&loose, &recipe, &[]);
    assert_eq!(code, 65);
    assert!(stderr.contains("[unsafePath]"), "{stderr}");
}

/// The boot path writes the same: `run` with a widened version-1 schema on the media.
#[test]
fn run_hands_the_target_every_field() {
    let machine = Machine::new();
    let media = tempfile::tempdir().unwrap();
    // No target disk: this host has none to give.
    let mut recipe = example("seed-esxi");
    recipe["hostname"] = json!("node-17");
    let text = serde_json::to_vec_pretty(&recipe).unwrap();
    std::fs::write(media.path().join("recipe.json"), &text).unwrap();
    std::fs::write(media.path().join("recipe.schema.json"), serde_json::to_vec(&widened_v1()).unwrap()).unwrap();
    let out = run(run_command(media.path(), &machine.state(), &machine.output(), "unix:path=/nonexistent").args([
        "--wait",
        "1",
        "--no-start",
    ]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(std::fs::read(machine.output().join("recipe.json")).unwrap(), text);
    let env = std::fs::read_to_string(machine.output().join("recipe.env")).unwrap();
    let file = machine.output().join("recipe.json");
    assert!(env_has(&env, "RECIPE_FILE", file.to_str().unwrap()), "{env}");
    assert_eq!(machine.status()["schema_id"], V1);
    assert!(!Path::new(&machine.state()).join("recipe.json").exists());
}

/// `--schema-version` picks a compiled-in version; with `--schema`, or a version this
/// binary does not know, it is a usage error.
#[test]
fn schema_version_option() {
    let file = root().join("iso/examples/seed-linux.json");
    let check = |args: &[&str]| run(dispatcher().arg("check").arg(&file).args(args));
    assert_eq!(check(&["--schema-version", "1"]).code, 0);
    assert_eq!(check(&["--schema-version", "2"]).code, 0);
    for bad in [
        &["--schema-version", "3"][..],
        &["--schema-version", "x"],
        &["--schema-version", "2", "--schema", "iso/recipe.schema.json"],
    ] {
        assert_eq!(check(bad).code, 64, "{bad:?}");
    }
    let hints = unknown_fields("v2");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("r.json"), serde_json::to_vec(&hints).unwrap()).unwrap();
    let with = |version: &str| {
        run(dispatcher().arg("check").arg(dir.path().join("r.json")).args(["--schema-version", version])).code
    };
    assert_eq!((with("1"), with("2")), (65, 0));
    let version = run(dispatcher().arg("--version"));
    assert_eq!(
        version.stdout.lines().skip(1).collect::<Vec<_>>(),
        [format!("schema v1 {V1}"), format!("schema v2 {V2}")]
    );
}

/// Version 2 is a strict superset of version 1: whatever version 1 accepts, version 2 accepts,
/// and version 2 finds no error version 1 does not (with the same path and rule), on every
/// example and on random recipes of the schema's fields. (A recipe with hints but no
/// `target_disk` is the one exception by design: version 1 refuses the hints, version 2 asks
/// for the disk they describe.)
mod superset {
    use std::collections::BTreeSet;
    use std::sync::LazyLock;

    use proptest::prelude::*;
    use provision_dispatcher::checks::{safety::Policy, static_checks};
    use provision_dispatcher::recipe::{model::Recipe, parse};
    use provision_dispatcher::schema::{Schema, VERSIONS};
    use serde_json::{json, Value};

    /// Versions 1 and 2, compiled once.
    static VERSIONS_1_2: LazyLock<(Schema, Schema)> =
        LazyLock::new(|| (Schema::version(&VERSIONS[0]), Schema::version(&VERSIONS[1])));

    fn errors(schema: &Schema, text: &[u8]) -> Option<BTreeSet<(String, String)>> {
        let doc = parse(text.to_vec()).ok()?;
        let findings = static_checks(&Recipe::view(&doc), schema, &Policy::default()).unwrap();
        Some(findings.errors().map(|i| (i.path.clone(), i.code.name().to_owned())).collect())
    }

    fn assert_superset(v1: &Schema, v2: &Schema, text: &[u8], name: &str) {
        let (Some(one), Some(two)) = (errors(v1, text), errors(v2, text)) else { return };
        assert!(two.is_subset(&one), "{name}: version 2 alone finds {:?}", two.difference(&one).collect::<Vec<_>>());
    }

    #[test]
    fn on_every_example() {
        let (v1, v2) = &*VERSIONS_1_2;
        let dir = super::root().join("iso/examples");
        let mut count = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.display().to_string();
            if name.ends_with(".json") && !name.ends_with(".expect.json") {
                assert_superset(v1, v2, &std::fs::read(&path).unwrap(), &name);
                count += 1;
            }
        }
        assert!(count > 40, "{count} examples");
    }

    /// Random recipes of the schemas' fields, right and wrong.
    pub fn recipe() -> impl Strategy<Value = Value> {
        let target = prop::sample::select(vec![
            "install-linux.target",
            "install-windows.target",
            "install-esxi.target",
            "supermicro-update.target",
            "Bad Target",
        ]);
        let disk = prop::sample::select(vec![
            "/dev/sda",
            "/dev/nvme0n1",
            "/dev/disk/by-id/wwn-0x5000c50015ea71ad",
            "sda",
            "/dev/../x",
        ]);
        let size = prop::sample::select(vec!["512M", "1G", "100%", "50%", "0", "1.5G"]);
        let guid = prop::sample::select(vec!["ef00", "8300", "EF00", "zz", "c12a7328-f81f-11d2-ba4b-00a0c93ec93b"]);
        let format = prop::option::of(prop::sample::select(vec!["vfat", "ext4", "raw", "zfs"]));
        let partition = (size, guid, format).prop_map(|(size, guid, format)| {
            let mut p = json!({"size": size, "type_guid": guid});
            if let Some(format) = format {
                p["format"] = json!(format);
            }
            p
        });
        let fields = (
            prop::option::of(target),
            prop::option::of(disk),
            prop::option::of("[a-z:/.]{0,12}"),
            prop::option::of(prop::collection::vec(partition, 0..4)),
            prop::option::of("[a-z]{0,6}"),
            any::<bool>(),
        );
        fields.prop_map(|(target, disk, oci, layout, ks, unknown)| {
            let mut recipe = json!({});
            let mut set = |key: &str, value: Option<Value>| {
                if let Some(value) = value {
                    recipe[key] = value;
                }
            };
            set("task_target", target.map(Value::from));
            set("target_disk", disk.map(Value::from));
            set("oci_url", oci.map(Value::from));
            set("partition_layout", layout.map(Value::from));
            set("ks_cfg", ks.map(Value::from));
            set("hostname", unknown.then(|| json!("h")));
            recipe
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

        #[test]
        fn on_random_recipes(recipe in recipe()) {
            let (v1, v2) = &*VERSIONS_1_2;
            assert_superset(v1, v2, &serde_json::to_vec(&recipe).unwrap(), &recipe.to_string());
        }
    }
}

/// Version 2 compiles in a stock validator as it is (issue 38: Python's `jsonschema` refused
/// version 1's inline `(?i)`): Debian's `python3-jsonschema` (draft 7, formats checked, URIs by
/// `python3-rfc3987`) finds the same errors as the dispatcher's schema check, by path and
/// keyword, on every example and on random recipes. Python reports a missing or unexpected
/// property at its object, the dispatcher at the property itself (SPEC §3): the script says it
/// the dispatcher's way.
mod python {
    use std::collections::BTreeSet;
    use std::io::{BufRead, BufReader, Write};
    use std::process::{Command, Stdio};

    use proptest::prelude::*;
    use provision_dispatcher::recipe::parse;
    use provision_dispatcher::schema::{Schema, VERSIONS};
    use serde_json::Value;

    /// Reads the schema (argv[1]), then one recipe a line; writes one line a recipe: its errors
    /// as `[path, keyword]` pairs, the JSON pointer of each as the dispatcher gives it.
    const VALIDATE: &str = r#"
import json, sys
import jsonschema
schema = json.load(open(sys.argv[1]))
jsonschema.Draft7Validator.check_schema(schema)
validator = jsonschema.Draft7Validator(schema, format_checker=jsonschema.draft7_format_checker)
def pointer(path):
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in path)
for line in sys.stdin:
    instance = json.loads(line)
    found = []
    for error in validator.iter_errors(instance):
        at = list(error.absolute_path)
        if error.validator == "required":
            found += [[pointer(at + [name]), "required"] for name in error.validator_value if name not in error.instance]
        elif error.validator == "additionalProperties":
            allowed = error.schema.get("properties", {})
            found += [[pointer(at + [name]), "additionalProperties"] for name in error.instance if name not in allowed]
        elif error.validator == "dependencies":
            found += [[pointer(at + [d]), "dependencies"] for key, needs in error.validator_value.items() if key in error.instance for d in needs if d not in error.instance]
        else:
            found.append([pointer(at), error.validator])
    print(json.dumps(sorted(found)), flush=True)
"#;

    /// Python's validator, running.
    struct Python {
        child: std::process::Child,
        lines: BufReader<std::process::ChildStdout>,
    }

    impl Python {
        fn start() -> Python {
            let schema = super::root().join("iso/recipe.schema.v2.json");
            let mut child = Command::new("/usr/bin/python3")
                .args(["-c", VALIDATE])
                .arg(schema)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .expect("/usr/bin/python3 (Debian's python3, with python3-jsonschema: the Tests need of xtask)");
            let lines = BufReader::new(child.stdout.take().unwrap());
            Python { child, lines }
        }

        fn errors(&mut self, recipe: &Value) -> BTreeSet<(String, String)> {
            let stdin = self.child.stdin.as_mut().unwrap();
            writeln!(stdin, "{recipe}").unwrap();
            let mut line = String::new();
            self.lines.read_line(&mut line).unwrap();
            assert!(!line.is_empty(), "python3 stopped: is python3-jsonschema installed? (cargo xtask ci installs it)");
            let pairs: Vec<(String, String)> = serde_json::from_str(&line).unwrap();
            pairs.into_iter().collect()
        }
    }

    fn dispatchers(schema: &Schema, recipe: &Value) -> BTreeSet<(String, String)> {
        let doc = parse(serde_json::to_vec(recipe).unwrap()).unwrap();
        schema.check(&doc).unwrap().into_iter().map(|i| (i.path, i.code.name().to_owned())).collect()
    }

    #[test]
    fn on_every_example() {
        let (mut python, v2) = (Python::start(), Schema::version(&VERSIONS[1]));
        let mut count = 0;
        for entry in std::fs::read_dir(super::root().join("iso/examples")).unwrap() {
            let path = entry.unwrap().path();
            let name = path.display().to_string();
            if !name.ends_with(".json") || name.ends_with(".expect.json") {
                continue;
            }
            // Examples that are not one JSON value (the reader's own refusals) are left out.
            let Ok(recipe) = serde_json::from_slice::<Value>(&std::fs::read(&path).unwrap()) else { continue };
            if parse(std::fs::read(&path).unwrap()).is_err() {
                continue;
            }
            assert_eq!(python.errors(&recipe), dispatchers(&v2, &recipe), "{name}");
            count += 1;
        }
        assert!(count > 30, "{count} examples");
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

        #[test]
        fn on_random_recipes(recipe in super::superset::recipe()) {
            thread_local! {
                static CHECKERS: std::cell::RefCell<(Python, Schema)> =
                    std::cell::RefCell::new((Python::start(), Schema::version(&VERSIONS[1])));
            }
            CHECKERS.with_borrow_mut(|(python, v2)| {
                assert_eq!(python.errors(&recipe), dispatchers(v2, &recipe), "{recipe}");
            });
        }
    }
}
