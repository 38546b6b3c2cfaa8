//! docs/controller.md's readers (Reading this job's line), run as written, the shell pipeline
//! with `sh` and `jq` and the Python functions with `python3`, on every console log of
//! tests/fixtures/console/: each reads what INDEX.md's table says of the log, this job's last
//! whole line, any job's, and the last whole inventory. xtask's reader is held to the same table
//! (`xtask/src/vm/result.rs`), so the three agree.

mod common;

use common::docs::table_after;
use common::readers;
use serde_json::Value;

/// A row of INDEX.md's table: the log, its job (the SHA-256 of the recipe on the task ISO),
/// what the readers make of it.
struct Fixture {
    file: String,
    job: Option<String>,
    this_job: String,
    any_job: String,
    inventory: String,
}

fn fixtures() -> Vec<Fixture> {
    let index = std::fs::read_to_string(common::root().join("tests/fixtures/console/INDEX.md")).unwrap();
    let cell = |text: &str| text.trim_matches('`').to_owned();
    let rows = table_after(&index, "## The logs");
    assert!(rows.len() >= 12, "{} logs", rows.len());
    rows.iter()
        .map(|r| Fixture {
            file: cell(&r[0]),
            job: Some(cell(&r[1])).filter(|job| job != "none"),
            this_job: cell(&r[2]),
            any_job: cell(&r[3]),
            inventory: cell(&r[4]),
        })
        .collect()
}

/// A line as the table gives it: state, exit code and the first 8 digits of `recipe_sha256`
/// (`-` for null); `none` for no line.
fn summary(line: &Value) -> String {
    match line {
        Value::Null => "none".into(),
        line => {
            let recipe = line["recipe_sha256"].as_str().map_or("-", |sha| &sha[..8]);
            format!("{} {} {recipe}", line["state"].as_str().unwrap(), line["exit_code"])
        }
    }
}

#[test]
fn the_documented_readers_read_each_real_console_log_as_its_index_says() {
    for fixture in fixtures() {
        let log = std::fs::read(common::root().join("tests/fixtures/console").join(&fixture.file)).unwrap();
        for (job, want) in [(fixture.job.as_deref(), &fixture.this_job), (None, &fixture.any_job)] {
            for (reader, read) in ["sh", "python utf-8", "python latin-1"].iter().zip(readers::results(&log, job)) {
                assert_eq!(&summary(&read), want, "{}: {reader} for job {job:?}", fixture.file);
                if !read.is_null() {
                    common::schemas::assert_valid("result", &read);
                }
            }
        }
        let (inventory, digest) = readers::inventory(&log, None);
        if !inventory.is_null() {
            common::schemas::assert_valid("inventory", &inventory);
        }
        let digest = digest.map_or("none".to_owned(), |digest| digest[..8].to_owned());
        assert_eq!(digest, fixture.inventory, "{}: the Python reader's inventory", fixture.file);
    }
}

/// The inventory the result line names is the one the Python reader finds by its digest; a
/// digest no inventory has finds none.
#[test]
fn the_inventory_the_line_names_is_read_by_its_digest() {
    let log = std::fs::read(common::root().join("tests/fixtures/console/inventory-sixteen-disks.console.log")).unwrap();
    let [line, ..] = readers::results(&log, None);
    let (named, digest) = readers::inventory(&log, line["inventory_sha256"].as_str());
    assert_eq!(named["disks"].as_array().unwrap().len(), 16);
    assert_eq!(line["inventory_sha256"].as_str(), digest.as_deref(), "the document printed, exactly");
    assert_eq!(readers::inventory(&log, Some(&"0".repeat(64))).0, Value::Null);
}
