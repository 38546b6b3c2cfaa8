//! Validation as data (seed 001): every check pushes [`Issue`]s into one list and the runner
//! runs them all, so a recipe gets every problem in one report, never just the first.
//!
//! Static checks see only the recipe ([`safety`], [`lints`], the schema and the contract of
//! [`crate::recipe::model`]); host checks ([`host`]) also read the machine through the small
//! [`host::Host`] trait. Both kinds are registered with the same [`Runner`]. Checks never
//! modify the recipe: they take it by shared reference.
//!
//! Checks run one after the other: the static ones take microseconds, and the host ones
//! share a single bus connection, so seed 001's concurrency would buy nothing here.

pub mod host;
pub mod lints;
pub mod safety;

use std::borrow::Cow;
use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::recipe::{model, Document, Position};
use crate::schema::Schema;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Error,
    Warning,
}

/// One finding about one value of the recipe.
///
/// `message` is built from the schema's and the rule's own words, never from the recipe's
/// values: it reaches stdout, the journal and status.json, and `user_data` may hold secrets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issue {
    /// RFC 6901 pointer to the offending value; for a missing or unexpected property, the
    /// property itself.
    pub path: String,
    /// The JSON Schema keyword, or the dispatcher's rule name.
    pub code: Cow<'static, str>,
    pub message: String,
    pub severity: Severity,
}

impl Issue {
    pub fn error(path: impl Into<String>, code: impl Into<Cow<'static, str>>, message: impl Into<String>) -> Issue {
        Issue { path: path.into(), code: code.into(), message: message.into(), severity: Severity::Error }
    }

    pub fn warning(path: impl Into<String>, code: impl Into<Cow<'static, str>>, message: impl Into<String>) -> Issue {
        Issue { path: path.into(), code: code.into(), message: message.into(), severity: Severity::Warning }
    }

    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

/// An issue placed in the recipe file, as reports print it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Detail {
    pub path: String,
    pub code: String,
    pub message: String,
    pub line: usize,
    pub column: usize,
}

impl Detail {
    pub fn new(issue: Issue, position: Position) -> Detail {
        Detail {
            path: issue.path,
            code: issue.code.into_owned(),
            message: issue.message,
            line: position.line,
            column: position.column,
        }
    }
}

/// Anything the runner can run over a recipe.
pub trait Check {
    fn run(&self, doc: &Document, issues: &mut Vec<Issue>);
}

impl<F: Fn(&Document, &mut Vec<Issue>)> Check for F {
    fn run(&self, doc: &Document, issues: &mut Vec<Issue>) {
        self(doc, issues)
    }
}

/// Registered checks, run in registration order (schema, then safety rules, then host checks,
/// then lints), all of them every time.
#[derive(Default)]
pub struct Runner<'a> {
    checks: Vec<Box<dyn Check + 'a>>,
}

impl<'a> Runner<'a> {
    pub fn new() -> Self {
        Runner::default()
    }

    pub fn register(&mut self, check: impl Check + 'a) -> &mut Self {
        self.checks.push(Box::new(check));
        self
    }

    /// Runs every check. An issue with the same path, code and severity as one an earlier
    /// check found says nothing new (the contract re-finding what the schema found) and is
    /// dropped. Linear in the number of issues, and without copies of them.
    pub fn run_all(&self, doc: &Document) -> Findings {
        let mut issues = Vec::new();
        let mut origin = Vec::new();
        for (n, check) in self.checks.iter().enumerate() {
            check.run(doc, &mut issues);
            origin.resize(issues.len(), n);
        }
        let mut first_check: HashMap<(&str, &str, Severity), usize> = HashMap::new();
        for (issue, &n) in issues.iter().zip(&origin) {
            first_check.entry(key(issue)).or_insert(n);
        }
        let keep: Vec<bool> = issues.iter().zip(&origin).map(|(issue, &n)| first_check[&key(issue)] == n).collect();
        drop(first_check);
        let mut keep = keep.into_iter();
        issues.retain(|_| keep.next().unwrap_or(true));
        Findings { issues }
    }
}

/// Registers the static checks in report order: the schema, the dispatcher's own contract,
/// the safety rules, the lints. Host checks go after them (`run` only).
pub fn register_static<'a>(runner: &mut Runner<'a>, schema: &'a Schema, policy: &'a safety::Policy) {
    runner
        .register(|doc: &Document, issues: &mut Vec<Issue>| schema.check(doc, issues))
        .register(model::contract)
        .register(safety::rules(policy))
        .register(lints::lints);
}

/// What makes two issues say the same thing.
fn key(issue: &Issue) -> (&str, &str, Severity) {
    (issue.path.as_str(), issue.code.as_ref(), issue.severity)
}

/// What all checks found.
#[derive(Debug, Default)]
pub struct Findings {
    pub issues: Vec<Issue>,
}

impl Findings {
    pub fn errors(&self) -> impl Iterator<Item = &Issue> {
        self.issues.iter().filter(|i| i.is_error())
    }

    pub fn warnings(&self) -> impl Iterator<Item = &Issue> {
        self.issues.iter().filter(|i| !i.is_error())
    }

    pub fn has_errors(&self) -> bool {
        self.errors().next().is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recipe::parse;

    #[test]
    fn runner_runs_every_check_and_drops_repeats() {
        let doc = parse(b"{}".to_vec()).unwrap();
        let mut runner = Runner::new();
        runner
            .register(|_: &Document, out: &mut Vec<Issue>| out.push(Issue::error("/a", "required", "one")))
            .register(|_: &Document, out: &mut Vec<Issue>| {
                out.push(Issue::error("/a", "required", "same place, same rule"));
                out.push(Issue::error("/b", "type", "two"));
            })
            .register(|_: &Document, out: &mut Vec<Issue>| out.push(Issue::warning("/c", "lint", "three")));
        let findings = runner.run_all(&doc);
        let seen: Vec<_> = findings.issues.iter().map(|i| (i.path.as_str(), i.message.as_str())).collect();
        assert_eq!(seen, [("/a", "one"), ("/b", "two"), ("/c", "three")]);
        assert!(findings.has_errors());
        assert_eq!(findings.warnings().count(), 1);
    }
}
