//! What the fuzz targets share: the static checks exactly as `check` runs them, with the
//! canonical schema compiled once per process.

use std::sync::LazyLock;

use provision_dispatcher::checks::{register_static, safety::Policy, Findings, Runner};
use provision_dispatcher::recipe::Document;
use provision_dispatcher::schema::Schema;

/// The canonical schema, as `check` uses it without `--schema`.
pub static SCHEMA: LazyLock<Schema> = LazyLock::new(Schema::canonical);

/// Every static check (schema, contract, safety rules with the default policy, lints).
pub fn check(doc: &Document) -> Findings {
    let policy = Policy::default();
    let mut runner = Runner::new();
    register_static(&mut runner, &SCHEMA, &policy);
    runner.run_all(doc)
}
