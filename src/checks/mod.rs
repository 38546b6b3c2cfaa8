//! Validation as data (seed 001): every check pushes [`Issue`]s into one list and every check
//! runs, so a recipe gets every problem in one report, never just the first.
//!
//! Static checks ([`static_checks`]) read only the recipe, through its typed view: the
//! schema, the dispatcher's own contract ([`crate::recipe::model::contract`]), the safety
//! rules ([`safety`]) and the lints ([`lints`]). Host checks ([`host`]) run after them and
//! also read the machine through the small [`host::Host`] trait; they are told what the
//! static checks refused, so a path that is not safe is never looked up on the host. Checks
//! never modify the recipe: they take it by shared reference.
//!
//! To add a rule: a function `fn(&Recipe, &mut Vec<Issue>)` in `safety` (an error) or `lints`
//! (a warning), with a [`crate::issues::Code`] of its own, registered in [`static_checks`].

pub mod host;
pub mod lints;
pub mod safety;

use ahash::AHashMap as HashMap;

use crate::issues::{Findings, Issue, Severity};
use crate::recipe::model::{self, Recipe};
use crate::schema::{Schema, SchemaError};

/// Anything the runner can run over a recipe.
pub trait Check {
    fn run(&self, recipe: &Recipe<'_>, issues: &mut Vec<Issue>);
}

impl<F: Fn(&Recipe<'_>, &mut Vec<Issue>)> Check for F {
    fn run(&self, recipe: &Recipe<'_>, issues: &mut Vec<Issue>) {
        self(recipe, issues)
    }
}

/// Registered checks, all run every time, their issues reported in registration order.
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
    pub fn run_all(&self, recipe: &Recipe<'_>) -> Findings {
        let mut issues = Vec::new();
        let mut origin = Vec::new();
        for (n, check) in self.checks.iter().enumerate() {
            check.run(recipe, &mut issues);
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

/// What makes two issues say the same thing.
fn key(issue: &Issue) -> (&str, &str, Severity) {
    (issue.path.as_str(), issue.code.name(), issue.severity)
}

/// Every static check, in report order: the schema, the dispatcher's own contract, the
/// safety rules, the lints. The schema's validation is bounded (`crate::bounded`): a schema
/// too complex for this recipe is an error of the schema, not a finding.
pub fn static_checks(recipe: &Recipe<'_>, schema: &Schema, policy: &safety::Policy) -> Result<Findings, SchemaError> {
    let from_schema = std::cell::Cell::new(schema.check(recipe.doc())?);
    let mut runner = Runner::new();
    runner
        .register(|_: &Recipe<'_>, issues: &mut Vec<Issue>| issues.append(&mut from_schema.take()))
        .register(model::contract)
        .register(safety::rules(policy))
        .register(lints::lints);
    Ok(runner.run_all(recipe))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::issues::Code;
    use crate::recipe::parse;

    #[test]
    fn runner_runs_every_check_and_drops_repeats_of_earlier_ones() {
        let doc = parse(b"{}".to_vec()).unwrap();
        let mut runner = Runner::new();
        runner
            .register(|_: &Recipe<'_>, out: &mut Vec<Issue>| out.push(Issue::error("/a", Code::UnsafePath, "one")))
            .register(|_: &Recipe<'_>, out: &mut Vec<Issue>| {
                out.push(Issue::error("/a", Code::UnsafePath, "same place, same rule"));
                out.push(Issue::error("/b", Code::SizeRange, "two"));
                out.push(Issue::error("/b", Code::SizeRange, "a check may repeat itself"));
            })
            .register(|_: &Recipe<'_>, out: &mut Vec<Issue>| {
                out.push(Issue::warning("/c", Code::DuplicateLabel, "three"))
            });
        let findings = runner.run_all(&Recipe::view(&doc));
        let seen: Vec<_> = findings.issues.iter().map(|i| (i.path.as_str(), i.message.as_str())).collect();
        assert_eq!(seen, [("/a", "one"), ("/b", "two"), ("/b", "a check may repeat itself"), ("/c", "three")]);
        assert!(findings.has_errors());
        assert_eq!(findings.warnings().count(), 1);
    }
}
