//! `schema list` and `schema print NAME`: the schemas compiled into this binary, byte for byte,
//! so that a controller takes the schema it puts on task media from the very binary it checks
//! with (SPEC §6c), and the published schemas of the documents a controller reads (SPEC §6b).
//! A recipe schema version is named by its number (`1`, `2`); a document's schema by the
//! document (`result`, `inventory`, `check`, `status`).

use std::io::{self, Write};

use serde::Serialize;

use super::check::Format;
use crate::failure::Exit;
use crate::schema::VERSIONS;

/// A schema this binary can print.
#[derive(Debug, Serialize)]
pub struct Published {
    /// What `schema print` takes.
    pub name: String,
    pub id: &'static str,
    /// What it describes, in a few words.
    pub describes: String,
    #[serde(skip)]
    pub text: &'static str,
}

/// The JSON Schema (draft-07) of a document a controller reads, as the source tree's
/// `schemas/NAME.schema.json` holds it and the package installs it
/// (`/usr/share/provision-dispatcher/schemas/NAME.schema.json`).
pub struct Document {
    pub name: &'static str,
    pub id: &'static str,
    pub describes: &'static str,
    pub text: &'static str,
}

/// The published documents' schemas, in the order `schema list` names them.
pub const DOCUMENTS: [Document; 4] = [
    Document {
        name: "result",
        id: "https://shoal.dev/provision-dispatcher/v1/result.schema.json",
        describes: "the result line's object (PROVISION-RESULT v1), report --format json",
        text: include_str!("../../schemas/result.schema.json"),
    },
    Document {
        name: "inventory",
        id: "https://shoal.dev/provision-dispatcher/v1/inventory.schema.json",
        describes: "the inventory (PROVISION-INVENTORY v1 lines, joined)",
        text: include_str!("../../schemas/inventory.schema.json"),
    },
    Document {
        name: "check",
        id: "https://shoal.dev/provision-dispatcher/v1/check.schema.json",
        describes: "check, media build, media check, media embed --format json",
        text: include_str!("../../schemas/check.schema.json"),
    },
    Document {
        name: "status",
        id: "https://shoal.dev/provision-dispatcher/v1/status.schema.json",
        describes: "status.json, a run's record on the server",
        text: include_str!("../../schemas/status.schema.json"),
    },
];

/// Every schema this binary prints, in order: the recipe's versions, then the documents'.
pub fn published() -> Vec<Published> {
    let recipes = VERSIONS.iter().map(|v| Published {
        name: v.number.to_string(),
        id: v.id,
        describes: format!("recipe, version {}", v.number),
        text: v.text,
    });
    let documents = DOCUMENTS.iter().map(|d| Published {
        name: d.name.to_owned(),
        id: d.id,
        describes: d.describes.to_owned(),
        text: d.text,
    });
    recipes.chain(documents).collect()
}

/// `schema list`: one line per schema (`NAME  $id  what it describes`), or as JSON
/// `{"schemas": [{"name", "id", "describes"}]}`.
pub fn list(format: Format, out: &mut impl Write) -> io::Result<Exit> {
    let schemas = published();
    match format {
        Format::Json => writeln!(out, "{}", serde_json::json!({ "schemas": schemas }))?,
        Format::Human => {
            let names = schemas.iter().map(|s| s.name.len()).max().unwrap_or(0);
            let ids = schemas.iter().map(|s| s.id.len()).max().unwrap_or(0);
            for s in &schemas {
                writeln!(out, "{:<names$}  {:<ids$}  {}", s.name, s.id, s.describes)?;
            }
        }
    }
    Ok(Exit::Ok)
}

/// `schema print NAME`: the schema's text byte for byte; `None` when no schema has that name.
pub fn print(name: &str, out: &mut impl Write) -> io::Result<Option<Exit>> {
    let Some(schema) = published().into_iter().find(|s| s.name == name) else { return Ok(None) };
    out.write_all(schema.text.as_bytes())?;
    Ok(Some(Exit::Ok))
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;
    use crate::failure::{Failure, Phase};
    use crate::issues::{Code, KEYWORDS};
    use crate::report::result::{ResultLine, PREFIX};
    use crate::report::status::{State, Status};

    fn schema(name: &str) -> Value {
        let document = DOCUMENTS.iter().find(|d| d.name == name).unwrap();
        serde_json::from_str(document.text).unwrap()
    }

    /// The words of the enum at `pointer` in `name`'s schema (`null` as the empty word).
    fn words(name: &str, pointer: &str) -> Vec<String> {
        let schema = schema(name);
        let values = schema.pointer(pointer).and_then(Value::as_array).unwrap_or_else(|| panic!("{name}: {pointer}"));
        values.iter().map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned)).collect()
    }

    fn serialized<T: Serialize>(values: impl IntoIterator<Item = T>) -> Vec<String> {
        values.into_iter().map(|v| serde_json::to_value(v).unwrap().as_str().unwrap().to_owned()).collect()
    }

    fn with_null(mut words: Vec<String>) -> Vec<String> {
        words.insert(0, "null".into());
        words
    }

    #[test]
    fn each_document_is_draft_07_under_its_own_id() {
        for document in &DOCUMENTS {
            let schema = schema(document.name);
            assert_eq!(schema["$schema"], "http://json-schema.org/draft-07/schema#", "{}", document.name);
            assert_eq!(schema["$id"], document.id, "{}", document.name);
            jsonschema::draft7::new(&schema).unwrap_or_else(|e| panic!("{}: {e}", document.name));
        }
    }

    /// The enumerations whose set is the code's own are the code's sets, so that neither can
    /// gain a word without the other.
    #[test]
    fn the_enumerations_are_the_codes_own() {
        let states = serialized(State::ALL);
        assert_eq!(words("result", "/properties/state/enum"), states);
        assert_eq!(words("status", "/properties/state/enum"), states);
        let failures = |keep: fn(&Failure) -> bool| -> Vec<String> {
            Failure::ALL.iter().filter(|f| keep(f)).map(|f| f.word().to_owned()).collect()
        };
        let result = failures(|f| *f != Failure::Usage);
        assert_eq!(words("result", "/properties/failure/enum"), with_null(result));
        let status = failures(|f| *f != Failure::Usage && f.of_initrd().is_none());
        assert_eq!(words("status", "/properties/failure/enum"), with_null(status));
        assert_eq!(words("check", "/properties/error/enum"), failures(|f| f.of_initrd().is_none()));
        let phases: Vec<String> = Phase::ALL.iter().map(|p| p.name().to_owned()).collect();
        assert_eq!(words("result", "/properties/phase/enum"), with_null(phases.clone()));
        assert_eq!(words("status", "/properties/phase/enum"), with_null(phases[1..].to_vec()));
        let exits: Vec<String> = Exit::ALL.iter().map(|e| e.code().to_string()).collect();
        assert_eq!(words("result", "/properties/exit_code/enum"), exits);
        assert_eq!(words("status", "/properties/exit_code/enum"), exits);
        let codes: Vec<String> = KEYWORDS
            .iter()
            .copied()
            .chain(["schema"])
            .chain(Code::RULES.iter().chain(&Code::MEDIA).map(|c| c.name()))
            .map(str::to_owned)
            .collect();
        let media: Vec<String> = Code::MEDIA.iter().map(|c| c.name().to_owned()).collect();
        for name in ["result", "check", "status"] {
            assert_eq!(words(name, "/definitions/code/enum"), codes, "{name}");
            assert_eq!(words(name, "/definitions/media_code/enum"), media, "{name}");
        }
        let verdicts = serialized(crate::disks::verdict::Verdict::ALL);
        for name in ["inventory", "status"] {
            assert_eq!(words(name, "/definitions/disk/properties/verdict/enum"), verdicts, "{name}");
        }
        let shutdowns = with_null(serialized(crate::systemd::task::Shutdown::ALL));
        assert_eq!(words("result", "/properties/end/properties/shutdown/enum"), shutdowns);
        assert_eq!(words("status", "/properties/end/properties/shutdown/enum"), shutdowns);
        let outcomes = with_null(serialized(crate::bmc::Outcome::ALL));
        assert_eq!(words("status", "/properties/bmc_event/enum"), outcomes);
        assert_eq!(words("status", "/properties/end/properties/bmc_event/enum"), outcomes);
        let lockdown = with_null(crate::trust::firmware::LOCKDOWN_MODES.map(str::to_owned).to_vec());
        assert_eq!(words("status", "/properties/lockdown/enum"), lockdown);
        assert_eq!(words("inventory", "/properties/firmware/properties/lockdown/enum"), lockdown);
    }

    /// Each failure's line, as the report makes it, is valid with the failure's own exit code
    /// and phase, and invalid with any other exit code: the schema's rules are `Failure::exit`.
    #[test]
    fn each_failure_holds_its_exit_code() {
        let validator = jsonschema::draft7::new(&schema("result")).unwrap();
        for failure in Failure::ALL.into_iter().filter(|f| *f != Failure::Usage) {
            let mut status = Status::running("2026-11-24T00:00:00Z".into(), None);
            (status.state, status.failure, status.phase) = (State::Failed, Some(failure), Some(failure.phase()));
            for exit in Exit::ALL {
                status.exit_code = exit.code();
                let line: Value = serde_json::from_str(&ResultLine::new(&status, None).json()).unwrap();
                let errors: Vec<String> = validator.iter_errors(&line).map(|e| e.to_string()).collect();
                assert_eq!(
                    errors.is_empty(),
                    exit == failure.exit(),
                    "{} with {}: {errors:?}",
                    failure.word(),
                    exit.code()
                );
            }
        }
        for boot in boot_io::result::BootFailure::ALL {
            let line = boot.line(1234);
            let json: Value = serde_json::from_str(line.trim_end().strip_prefix(PREFIX).unwrap()).unwrap();
            assert!(validator.is_valid(&json), "{line}");
        }
    }
}
