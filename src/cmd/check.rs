//! `check FILE`: static validation of a recipe file, offline.

use std::io::{self, ErrorKind};
use std::path::PathBuf;

use crate::checks::{self, safety::Policy, Runner};
use crate::exit::Exit;
use crate::recipe::{self, ReadError};
use crate::report::{Failure, Report};
use crate::schema::{Schema, SchemaError, SchemaPolicy};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    #[default]
    Human,
    Json,
}

#[derive(Debug, Default)]
pub struct CheckArgs {
    pub file: PathBuf,
    pub schema: Option<PathBuf>,
    pub format: Format,
    pub policy: Policy,
    pub schema_policy: SchemaPolicy,
}

/// Validates the file and prints its report on `out`.
pub fn run(args: &CheckArgs, out: &mut impl io::Write) -> io::Result<Exit> {
    let (report, exit) = check(args);
    match args.format {
        Format::Json => writeln!(out, "{}", report.to_json())?,
        Format::Human => write!(out, "{}", report.to_human(&args.file.display().to_string()))?,
    }
    Ok(exit)
}

/// The report of one recipe file and the exit code it means.
pub fn check(args: &CheckArgs) -> (Report, Exit) {
    let schema = match load_schema(args.schema.as_deref(), args.schema_policy) {
        Ok(schema) => schema,
        Err(e) => return (Report::failed(Failure::SchemaError, e.to_string()), Exit::Config),
    };
    let doc = match recipe::read_file(&args.file) {
        Ok(doc) => doc,
        Err(e @ ReadError::Io(_)) => return (Report::of_read_error(&e), Exit::NotFound),
        Err(e) => return (Report::of_read_error(&e), Exit::Invalid),
    };
    let mut runner = Runner::new();
    checks::register_static(&mut runner, &schema, &args.policy);
    let findings = runner.run_all(&doc);
    (Report::of_findings(&doc, &findings), Exit::of_findings(&findings))
}

/// The schema from `path`, or the canonical one.
pub fn load_schema(path: Option<&std::path::Path>, policy: SchemaPolicy) -> Result<Schema, SchemaError> {
    match path {
        None => Ok(Schema::canonical()),
        Some(path) => {
            let file = std::fs::File::open(path).map_err(|e| {
                let e = if e.kind() == ErrorKind::NotFound { io::Error::new(e.kind(), "no such file") } else { e };
                SchemaError::Unreadable(ReadError::Io(e))
            })?;
            Schema::read(file, policy)
        }
    }
}
