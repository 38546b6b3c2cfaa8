//! What the fuzz targets share: the static checks exactly as `check` runs them, with the
//! canonical schema compiled once per process.

use std::sync::LazyLock;

use provision_dispatcher::checks::{safety::Policy, static_checks};
use provision_dispatcher::issues::Findings;
use provision_dispatcher::recipe::model::Recipe;
use provision_dispatcher::schema::Schema;

/// The canonical schema, as `check` uses it without `--schema`.
pub static SCHEMA: LazyLock<Schema> = LazyLock::new(Schema::canonical);

/// Every static check (schema, contract, safety rules with the default policy, lints).
pub fn check(recipe: &Recipe<'_>) -> Findings {
    static_checks(recipe, &SCHEMA, &Policy::default())
        .expect("the canonical schema validates any recipe within its budget")
}
