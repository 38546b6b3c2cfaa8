//! The published schemas (`schemas/`, `schema print`) can fail: a document of the wrong shape is
//! refused, each way a mistake would make one; a field version 1 may add later is accepted by
//! the schema a controller uses and refused by the closed form the tests hold the product to.
//! (That every document the tests make is valid is `common::schemas`', on every run.)

mod common;

use common::machine::{example, media, Machine};
use common::schemas::{closed, errors, inventories, published, RESULT_PREFIX};
use common::{dispatcher, run};
use serde_json::{json, Value};

/// A run's result line, its inventory and its status.json, as the binary wrote them.
fn a_run(name: &str) -> (Value, Value, Value) {
    let machine = Machine::new();
    let out = machine.dispatch(media(&example(name)).path(), None, &["--no-start"]);
    let line = out.stdout.lines().find_map(|l| l.strip_prefix(RESULT_PREFIX)).expect("a result line");
    let inventory = inventories(&out.stdout).pop().expect("an inventory");
    (serde_json::from_str(line).unwrap(), inventory, machine.status())
}

/// `document` changed by `change` is refused by `name`'s published schema, at `at`.
fn refused(name: &str, document: &Value, change: impl FnOnce(&mut Value), at: &str) {
    assert_eq!(errors(&published(name), document), Vec::<String>::new(), "{name}: the document as written");
    let mut wrong = document.clone();
    change(&mut wrong);
    let found = errors(&published(name), &wrong);
    assert!(found.iter().any(|e| e.starts_with(&format!("{at}:"))), "{name}: nothing refused at {at:?}: {found:?}");
}

#[test]
fn a_result_line_of_the_wrong_shape_is_refused() {
    let (failed, _, _) = a_run("seed-invalid-linux");
    let (rendered, _, _) = a_run("seed-esxi");
    refused("result", &failed, |l| l["state"] = "done".into(), "/state");
    refused("result", &failed, |l| drop(l.as_object_mut().unwrap().remove("recipe_sha256")), "");
    refused("result", &failed, |l| l["failure"] = "validation".into(), "/failure");
    refused("result", &failed, |l| l["exit_code"] = 66.into(), "/exit_code");
    refused("result", &failed, |l| l["phase"] = Value::Null, "/phase");
    refused("result", &failed, |l| l["details"][0]["code"] = "noSuchRule".into(), "/details/0/code");
    refused("result", &failed, |l| l["details"][0]["path"] = "target_disk".into(), "/details/0/path");
    refused("result", &failed, |l| l["recipe_sha256"] = "ABC".into(), "/recipe_sha256");
    refused("result", &rendered, |l| l["failure"] = "bug".into(), "/failure");
    refused("result", &rendered, |l| l["end"] = json!({"units": []}), "/end");
    let sixteen = json!({"path": "/a", "code": "required"});
    refused("result", &failed, |l| l["details"] = Value::Array(vec![sixteen; 17]), "/details");
    let media = json!({"path": "", "code": "pattern", "file": "recipe.schema.json"});
    refused("result", &failed, |l| l["details"][0] = media, "/details/0/code");
}

#[test]
fn an_inventory_status_or_report_of_the_wrong_shape_is_refused() {
    let (_, inventory, status) = a_run("seed-esxi");
    refused("inventory", &inventory, |i| i["disks"][0]["verdict"] = "free".into(), "/disks/0/verdict");
    refused("inventory", &inventory, |i| drop(i["system"].as_object_mut().unwrap().remove("uuid")), "/system");
    refused("inventory", &inventory, |i| i["firmware"]["mode"] = "efi".into(), "/firmware/mode");
    refused("inventory", &inventory, |i| i["disks"][0]["dev"] = "8-16".into(), "/disks/0/dev");
    refused("status", &status, |s| s["state"] = "done".into(), "/state");
    refused("status", &status, |s| drop(s.as_object_mut().unwrap().remove("timings_ms")), "");
    refused("status", &status, |s| s["failure"] = "boot_medium_not_found".into(), "/failure");
    refused("status", &status, |s| s["started_at"] = "yesterday".into(), "/started_at");
    let file =
        dispatcher().arg("check").arg("--format").arg("json").arg("iso/examples/seed-invalid-linux.json").output();
    let report: Value = serde_json::from_slice(&file.unwrap().stdout).unwrap();
    refused("check", &report, |r| drop(r.as_object_mut().unwrap().remove("error")), "");
    refused("check", &report, |r| r["details"][0]["line"] = 0.into(), "/details/0/line");
    refused("check", &report, |r| r["error"] = "boot_medium_not_found".into(), "/error");
    let valid = run(dispatcher().args(["check", "--format", "json", "iso/examples/seed-esxi.json"]));
    let valid: Value = serde_json::from_str(&valid.stdout).unwrap();
    refused("check", &valid, |r| r["error"] = "validation_error".into(), "");
}

/// Version 1 may gain fields: the published schemas take a field they do not list (a controller
/// ignores it); the closed form the tests hold the product to refuses it, so the product cannot
/// write a field its schema does not describe.
#[test]
fn a_field_v1_adds_later_is_taken_and_the_product_is_held_to_its_schema() {
    let (line, _, _) = a_run("seed-invalid-linux");
    let (_, inventory, status) = a_run("seed-esxi");
    for (name, mut document, at) in
        [("result", line, "/details/0"), ("inventory", inventory, "/disks/0"), ("status", status, "/timings_ms")]
    {
        document.pointer_mut(at).unwrap()["later"] = 1.into();
        document["later"] = "a field of a later v1".into();
        assert_eq!(errors(&published(name), &document), Vec::<String>::new(), "{name}: published");
        let found = errors(&closed(&published(name)), &document);
        assert_eq!(found.len(), 2, "{name}: closed, at the top and at {at}: {found:?}");
    }
}
