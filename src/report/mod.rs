//! What the dispatcher tells people and programs about a recipe: the `check` report (human
//! lines or one JSON object), and the status of a `run` ([`status`]).

pub mod status;

use serde::Serialize;

use crate::checks::{Detail, Findings};
use crate::recipe::{Document, Position, ReadError};

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
}

impl Failure {
    fn message(self) -> &'static str {
        match self {
            Failure::InvalidJson => "Recipe is not valid JSON.",
            Failure::TooLarge => "Recipe is too large.",
            Failure::ValidationError => "Recipe failed validation.",
            Failure::Unreadable => "Recipe cannot be read.",
            Failure::SchemaError => "Schema cannot be used.",
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
    pub fn of_findings(doc: &Document, findings: &Findings) -> Report {
        let place = |issue| Detail::new(issue, doc.position(&issue.path));
        let details: Vec<Detail> = findings.errors().map(place).collect();
        Report {
            failure: (!details.is_empty()).then_some(Failure::ValidationError),
            reason: None,
            details,
            warnings: findings.warnings().map(place).collect(),
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
        match error {
            ReadError::Io(_) => Report::failed(Failure::Unreadable, error.to_string()),
            ReadError::TooLarge { limit } => Report {
                failure: Some(Failure::TooLarge),
                details: vec![detail(
                    "",
                    "maxBytes",
                    format!("is larger than {limit} bytes"),
                    Position { line: 1, column: 1 },
                )],
                ..Report::default()
            },
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
        let json = JsonReport {
            valid: self.valid(),
            error: self.failure,
            message: self.failure.map(Failure::message),
            reason: self.reason.as_deref(),
            details: &self.details,
            warnings: &self.warnings,
        };
        serde_json::to_string(&json).expect("a report serializes")
    }

    /// The human format of SPEC §2: `FILE:LINE:COL: PATH: message [code]` per detail, then
    /// warnings the same way, then a one-line summary.
    pub fn to_human(&self, file: &str) -> String {
        let mut out = String::new();
        for (details, prefix) in [(&self.details, ""), (&self.warnings, "warning: ")] {
            for d in details {
                let path = if d.path.is_empty() { "(root)" } else { &d.path };
                out.push_str(&format!("{file}:{}:{}: {path}: {prefix}{} [{}]\n", d.line, d.column, d.message, d.code));
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
