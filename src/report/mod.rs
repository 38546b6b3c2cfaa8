//! What the dispatcher tells people and programs: the `check` report (human lines or one
//! JSON object, this module), the status of a `run` ([`status`]), and the console banner made
//! from a status ([`banner`]).

pub mod banner;
pub mod columns;
pub mod console;
pub mod result;
pub mod status;
pub mod timings;

use serde::Serialize;

use crate::failure::Failure;
use crate::issues::{printable, Code, Detail, Findings, Issue, Position, Severity};
use crate::recipe::{Document, ReadError};
use crate::trust::Signer;

/// How many details the journal and the console banner show; status.json and `check` keep
/// every one.
pub const DETAILS_SHOWN: usize = 50;

/// Errors and warnings about one recipe, placed in its file.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Report {
    pub failure: Option<Failure>,
    /// For a failure without details (unreadable, schema, memory): what went wrong, in the
    /// dispatcher's and the schema's words.
    pub reason: Option<String>,
    pub details: Vec<Detail>,
    pub warnings: Vec<Detail>,
    /// Who signed the recipe, when a trust file was given and the signatures were good.
    pub signature: Option<Box<Signer>>,
}

impl Report {
    /// The report of everything the checks found, each list in the recipe's order: by line,
    /// then column (a missing property stands at its object, so what the top level lacks comes
    /// first), and in the order found at one place. Every report shows the first details when
    /// it cannot show all (the banner, the result line, the journal), and the order the checks
    /// happen to find them in is not the order anyone reads a recipe in.
    pub fn of_findings(doc: &Document, findings: Findings) -> Report {
        let failure = Failure::of_findings(&findings);
        let (errors, warnings): (Vec<Issue>, Vec<Issue>) = findings.issues.into_iter().partition(Issue::is_error);
        let place = |issues: Vec<Issue>| -> Vec<Detail> {
            let paths: Vec<&str> = issues.iter().map(|i| i.path.as_str()).collect();
            let positions = doc.positions(&paths);
            let mut details: Vec<Detail> =
                issues.into_iter().zip(positions).map(|(issue, position)| Detail::new(issue, position)).collect();
            details.sort_by_key(|d| (d.line, d.column));
            details
        };
        Report { failure, details: place(errors), warnings: place(warnings), ..Report::default() }
    }

    /// The report of a recipe that could not be parsed.
    pub fn of_read_error(error: &ReadError) -> Report {
        let one = |failure, path: &str, code, message: String, position| Report {
            failure: Some(failure),
            details: vec![Detail::new(Issue::error(path, code, message), position)],
            ..Report::default()
        };
        match error {
            ReadError::Io(_) => Report::failed(Failure::Unreadable, error.to_string()),
            ReadError::TooLarge { limit } => {
                one(Failure::TooLarge, "", Code::MaxBytes, format!("is larger than {limit} bytes"), Position::START)
            }
            ReadError::TooManyValues { limit } => one(
                Failure::TooLarge,
                "",
                Code::MaxValues,
                format!("holds more than {limit} JSON values (objects, arrays, strings, numbers, booleans, nulls)"),
                Position::START,
            ),
            ReadError::Syntax { position, message } => {
                one(Failure::InvalidJson, "", Code::Syntax, message.clone(), *position)
            }
            ReadError::DuplicateKeys(keys) => Report {
                failure: Some(Failure::ValidationError),
                details: keys
                    .iter()
                    .map(|(path, position)| {
                        Detail::new(Issue::error(path, Code::DuplicateKey, "repeats a key of its object"), *position)
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

    /// A refusal of what comes with the recipe (a signature, the schema, the trust file): the
    /// recipe was never looked at; the details say which file and why, one code per cause.
    pub fn refused(failure: Failure, reason: String, details: Vec<Detail>) -> Report {
        Report { details, ..Report::failed(failure, reason) }
    }

    pub fn valid(&self) -> bool {
        self.failure.is_none()
    }

    /// The JSON format of SPEC §2: one object, for valid and invalid recipes alike.
    pub fn to_json(&self) -> String {
        let mut out = Vec::new();
        self.write_json(&mut out).expect("writing to memory cannot fail");
        out.pop();
        String::from_utf8(out).expect("serde_json writes UTF-8")
    }

    /// [`Report::to_json`] and a newline, written straight to `out`, without the whole text in
    /// memory.
    pub fn write_json(&self, out: &mut impl std::io::Write) -> std::io::Result<()> {
        let json = JsonReport {
            valid: self.valid(),
            error: self.failure,
            message: self.failure.map(Failure::summary),
            reason: self.reason.as_deref(),
            details: &self.details,
            warnings: &self.warnings,
            signature: self.signature.as_deref(),
        };
        serde_json::to_writer(&mut *out, &json)?;
        out.write_all(b"\n")
    }

    /// The human format of SPEC §2: `FILE:LINE:COL: PATH: message [code]` per detail, then
    /// warnings the same way, then a one-line summary. The file name is printed escaped, as
    /// every other part is ([`printable`]).
    pub fn to_human(&self, file: &str) -> String {
        let mut out = String::new();
        for (details, severity) in [(&self.details, Severity::Error), (&self.warnings, Severity::Warning)] {
            for d in details {
                out.push_str(&d.line(file, severity));
                out.push('\n');
            }
        }
        let warnings = plural(self.warnings.len(), "warning");
        let errors = plural(self.details.len(), "error");
        let file = printable(file);
        if let Some(signer) = &self.signature {
            let (principal, namespace) = (printable(&signer.principal), printable(&signer.namespace));
            out.push_str(&format!(
                "{file}: signed by {principal}, key {}, namespace {namespace}\n",
                printable(&signer.fingerprint)
            ));
        }
        match (self.failure, &self.reason) {
            (None, _) => out.push_str(&format!("{file}: valid, {warnings}\n")),
            // The details said why, each in its file: the summary does not say it again.
            (Some(failure), Some(_)) if !self.details.is_empty() => {
                out.push_str(&format!("{file}: error: {}\n", failure.summary()))
            }
            (Some(_), Some(reason)) => out.push_str(&format!("{file}: error: {}\n", printable(reason))),
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
    /// Who signed, once the signatures were checked and good: principal, fingerprint,
    /// namespace, as status.json's `signature`.
    #[serde(skip_serializing_if = "Option::is_none")]
    signature: Option<&'r Signer>,
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
    use crate::checks::{safety::Policy, static_checks};
    use crate::recipe::model::Recipe;
    use crate::schema::Schema;

    fn human(recipe: &str) -> String {
        let doc = crate::recipe::parse(recipe.as_bytes().to_vec()).unwrap();
        let findings = static_checks(&Recipe::view(&doc), &Schema::canonical(), &Policy::default()).unwrap();
        Report::of_findings(&doc, findings).to_human("recipe.json")
    }

    /// Issue 31, finding 14: the details came in the order the checks found them, so the
    /// first ten (all a screen shows) were partition errors and the missing top-level fields
    /// came last.
    #[test]
    fn details_come_in_the_recipes_order_top_level_omissions_first() {
        let partitions = [r#"{"size": "1Q", "type_guid": "8300"}"#; 12].join(",\n");
        let text = human(&format!(
            "{{\"task_target\": \"install-linux.target\",\n\"partition_layout\": [\n{partitions}],\n\"bogus\": 1}}"
        ));
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 15 + 2 + 1, "15 errors, 2 warnings, the summary: {text}");
        let mut omissions = [lines[0], lines[1]];
        omissions.sort();
        assert!(omissions[0].starts_with("recipe.json:1:1: /oci_url: is required"), "{text}");
        assert!(omissions[1].starts_with("recipe.json:1:1: /target_disk: is required"), "{text}");
        for (i, line) in lines[2..14].iter().enumerate() {
            let (row, at) = (i + 3, format!("/partition_layout/{i}/size"));
            assert!(line.starts_with(&format!("recipe.json:{row}:10: {at}: ")), "{i}: {text}");
        }
        assert!(lines[14].starts_with("recipe.json:15:10: /bogus: "), "{text}");
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
            "recipe.json:2:54: /a\\u000arecipe.json: valid, 0 warnings: is not a property the schema allows \
             (additionalProperties is false) [additionalProperties]\n\
             recipe.json:2:70: /\\u001b[2J: is not a property the schema allows (additionalProperties is false) \
             [additionalProperties]\n\
             recipe.json: invalid, 2 errors, 0 warnings\n"
        );
    }
}
