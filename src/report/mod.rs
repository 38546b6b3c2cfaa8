//! What the dispatcher tells people and programs about a recipe: the `check` report (human
//! lines or one JSON object), and the status of a `run` ([`status`]).

pub mod status;

use std::borrow::Cow;
use std::fmt::Write as _;

use serde::Serialize;

use crate::checks::{Detail, Findings, Issue};
use crate::recipe::{Document, Position, ReadError};

/// How many details the journal and the console banner show; status.json and `check` keep
/// every one.
pub const DETAILS_SHOWN: usize = 50;

/// The kinds of failure a report names (`"error"` in the JSON format).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Failure {
    /// Not JSON: syntax, encoding, trailing data, nesting.
    InvalidJson,
    /// Larger than the cap; not parsed.
    TooLarge,
    /// Parsed, but the checks found errors (duplicate keys included).
    ValidationError,
    /// The recipe file could not be read.
    Unreadable,
    /// The schema could not be used.
    SchemaError,
    /// The dispatcher ran out of memory before it could decide.
    OutOfMemory,
}

impl Failure {
    fn message(self) -> &'static str {
        match self {
            Failure::InvalidJson => "Recipe is not valid JSON.",
            Failure::TooLarge => "Recipe is too large.",
            Failure::ValidationError => "Recipe failed validation.",
            Failure::Unreadable => "Recipe cannot be read.",
            Failure::SchemaError => "Schema cannot be used.",
            Failure::OutOfMemory => "The dispatcher ran out of memory.",
        }
    }
}

/// Errors and warnings about one recipe, placed in its file.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Report {
    pub failure: Option<Failure>,
    /// For [`Failure::Unreadable`] and [`Failure::SchemaError`]: what went wrong, in the
    /// dispatcher's and the schema's words.
    pub reason: Option<String>,
    pub details: Vec<Detail>,
    pub warnings: Vec<Detail>,
}

impl Report {
    /// The report of everything the checks found.
    pub fn of_findings(doc: &Document, findings: Findings) -> Report {
        let (errors, warnings): (Vec<Issue>, Vec<Issue>) = findings.issues.into_iter().partition(Issue::is_error);
        let place = |issues: Vec<Issue>| -> Vec<Detail> {
            let paths: Vec<&str> = issues.iter().map(|i| i.path.as_str()).collect();
            let positions = doc.positions(&paths);
            issues.into_iter().zip(positions).map(|(issue, position)| Detail::new(issue, position)).collect()
        };
        let details = place(errors);
        Report {
            failure: (!details.is_empty()).then_some(Failure::ValidationError),
            reason: None,
            details,
            warnings: place(warnings),
        }
    }

    /// The report of a recipe that could not be parsed.
    pub fn of_read_error(error: &ReadError) -> Report {
        let detail = |path: &str, code: &str, message: String, position: Position| Detail {
            path: path.to_owned(),
            code: code.to_owned(),
            message,
            line: position.line,
            column: position.column,
        };
        let too_large = |code: &str, message: String| Report {
            failure: Some(Failure::TooLarge),
            details: vec![detail("", code, message, Position { line: 1, column: 1 })],
            ..Report::default()
        };
        match error {
            ReadError::Io(_) => Report::failed(Failure::Unreadable, error.to_string()),
            ReadError::TooLarge { limit } => too_large("maxBytes", format!("is larger than {limit} bytes")),
            ReadError::TooManyValues { limit } => too_large(
                "maxValues",
                format!("holds more than {limit} JSON values (objects, arrays, strings, numbers, booleans, nulls)"),
            ),
            ReadError::Syntax { position, message } => Report {
                failure: Some(Failure::InvalidJson),
                details: vec![detail("", "syntax", message.clone(), *position)],
                ..Report::default()
            },
            ReadError::DuplicateKeys(keys) => Report {
                failure: Some(Failure::ValidationError),
                details: keys
                    .iter()
                    .map(|(path, position)| {
                        detail(path, "duplicateKey", "repeats a key of its object".to_owned(), *position)
                    })
                    .collect(),
                ..Report::default()
            },
        }
    }

    /// A report with no details: the recipe was never looked at.
    pub fn failed(failure: Failure, reason: String) -> Report {
        Report { failure: Some(failure), reason: Some(reason), ..Report::default() }
    }

    pub fn valid(&self) -> bool {
        self.failure.is_none()
    }

    /// The JSON format of SPEC §2: one object, for valid and invalid recipes alike.
    pub fn to_json(&self) -> String {
        let mut out = Vec::new();
        self.write_json(&mut out).expect("writing to memory cannot fail");
        String::from_utf8(out).expect("serde_json writes UTF-8")
    }

    /// [`Report::to_json`] written straight to `out`, without the whole text in memory.
    pub fn write_json(&self, out: &mut impl std::io::Write) -> std::io::Result<()> {
        let json = JsonReport {
            valid: self.valid(),
            error: self.failure,
            message: self.failure.map(Failure::message),
            reason: self.reason.as_deref(),
            details: &self.details,
            warnings: &self.warnings,
        };
        serde_json::to_writer(&mut *out, &json)?;
        out.write_all(b"\n")
    }

    /// The human format of SPEC §2: `FILE:LINE:COL: PATH: message [code]` per detail, then
    /// warnings the same way, then a one-line summary.
    pub fn to_human(&self, file: &str) -> String {
        let mut out = String::new();
        for (details, prefix) in [(&self.details, ""), (&self.warnings, "warning: ")] {
            for d in details {
                let (path, message) = (display_path(&d.path), printable(&d.message));
                out.push_str(&format!("{file}:{}:{}: {path}: {prefix}{message} [{}]\n", d.line, d.column, d.code));
            }
        }
        let warnings = plural(self.warnings.len(), "warning");
        let errors = plural(self.details.len(), "error");
        match (self.failure, &self.reason) {
            (None, _) => out.push_str(&format!("{file}: valid, {warnings}\n")),
            (Some(_), Some(reason)) => out.push_str(&format!("{file}: error: {reason}\n")),
            (Some(_), None) => out.push_str(&format!("{file}: invalid, {errors}, {warnings}\n")),
        }
        out
    }
}

/// A detail's path as people read it: `(root)` for the whole recipe, otherwise the pointer
/// through [`printable`]. Paths name the recipe's keys, and a key may hold any character.
pub fn display_path(path: &str) -> Cow<'_, str> {
    if path.is_empty() {
        Cow::Borrowed("(root)")
    } else {
        printable(path)
    }
}

/// `text` with each control character shown as a `\uXXXX` escape. What the human formats
/// print must stay on its line: a newline in a key would forge report lines, and an escape
/// sequence would drive the console the failure banner is printed on.
pub fn printable(text: &str) -> Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if c.is_control() {
            let _ = write!(out, "\\u{:04x}", u32::from(c));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Field order as in SPEC §2.
#[derive(Serialize)]
struct JsonReport<'r> {
    valid: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<Failure>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'r str>,
    details: &'r [Detail],
    warnings: &'r [Detail],
}

fn plural(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checks::{self, safety::Policy, Runner};
    use crate::schema::Schema;

    fn human(recipe: &str) -> String {
        let doc = crate::recipe::parse(recipe.as_bytes().to_vec()).unwrap();
        let (schema, policy) = (Schema::canonical(), Policy::default());
        let mut runner = Runner::new();
        checks::register_static(&mut runner, &schema, &policy);
        Report::of_findings(&doc, runner.run_all(&doc)).to_human("recipe.json")
    }

    #[test]
    fn a_key_cannot_forge_report_lines_or_drive_the_console() {
        // Found by fuzz/reader_validator: a key with a newline split its detail in two lines.
        let text = human(
            r#"{"task_target": "install-esxi.target", "ks_cfg": "x",
                "a\nrecipe.json: valid, 0 warnings": 1, "\u001b[2J": 2}"#,
        );
        assert_eq!(
            text,
            "recipe.json:2:70: /\\u001b[2J: is not a property the schema allows (additionalProperties is false) \
             [additionalProperties]\n\
             recipe.json:2:54: /a\\u000arecipe.json: valid, 0 warnings: is not a property the schema allows \
             (additionalProperties is false) [additionalProperties]\n\
             recipe.json: invalid, 2 errors, 0 warnings\n"
        );
    }

    #[test]
    fn printable_text_is_left_as_it_is() {
        assert!(matches!(printable("/partition_layout/0/label ü ✓"), Cow::Borrowed(_)));
        assert_eq!(display_path(""), "(root)");
        assert_eq!(printable("a\tb\u{7f}\u{85}"), "a\\u0009b\\u007f\\u0085");
    }
}
