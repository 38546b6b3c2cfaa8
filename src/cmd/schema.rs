//! `schema list` and `schema print NAME`: the schemas compiled into this binary, byte for byte,
//! so that a controller takes the schema it puts on task media from the very binary it checks
//! with (SPEC §6c). A schema is named: a recipe schema version by its number (`1`, `2`); other
//! published documents may be named by a word.

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

/// Every schema this binary prints, in order.
pub fn published() -> Vec<Published> {
    VERSIONS
        .iter()
        .map(|v| Published {
            name: v.number.to_string(),
            id: v.id,
            describes: format!("recipe, version {}", v.number),
            text: v.text,
        })
        .collect()
}

/// `schema list`: one line per schema (`NAME  $id  what it describes`), or as JSON
/// `{"schemas": [{"name", "id", "describes"}]}`.
pub fn list(format: Format, out: &mut impl Write) -> io::Result<Exit> {
    let schemas = published();
    match format {
        Format::Json => writeln!(out, "{}", serde_json::json!({ "schemas": schemas }))?,
        Format::Human => {
            let width = schemas.iter().map(|s| s.id.len()).max().unwrap_or(0);
            for s in &schemas {
                writeln!(out, "{:<4} {:<width$}  {}", s.name, s.id, s.describes)?;
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
