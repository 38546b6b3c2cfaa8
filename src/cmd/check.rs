//! `check FILE`: static validation of a recipe file, offline.

use std::io::{self, ErrorKind, Write};
use std::path::PathBuf;

use crate::checks::{self, safety::Policy, Findings, Runner};
use crate::exit::Exit;
use crate::memory;
use crate::recipe::{self, Document, ReadError};
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

/// Validates the file and prints its report on `out`. Should memory run out first, the report
/// says so instead, straight on standard output, and the exit code is 70.
pub fn run(args: &CheckArgs, out: &mut impl io::Write) -> io::Result<Exit> {
    let (format, file) = (args.format, args.file.display().to_string());
    memory::on_exhaustion(move |exhaustion| {
        let report = Report::failed(Failure::OutOfMemory, exhaustion.to_string());
        let text = match format {
            Format::Json => report.to_json(),
            Format::Human => report.to_human(&file),
        };
        // Not through `out`: its lock may be held by the allocation that failed.
        memory::write_raw(libc::STDOUT_FILENO, text.as_bytes());
    });
    let (report, exit) = check(args);
    match args.format {
        Format::Json => {
            let mut out = io::BufWriter::new(out);
            report.write_json(&mut out)?;
            out.flush()?;
        }
        Format::Human => write!(out, "{}", report.to_human(&args.file.display().to_string()))?,
    }
    Ok(exit)
}

/// The report of one recipe file and the exit code it means.
pub fn check(args: &CheckArgs) -> (Report, Exit) {
    match check_file(args) {
        Ok(checked) => {
            let exit = Exit::of_findings(&checked.findings);
            (Report::of_findings(&checked.doc, checked.findings), exit)
        }
        Err(refused) => refused,
    }
}

/// A recipe that was read and run through every static check, with the schema it was
/// checked against.
pub struct Checked {
    pub schema: Schema,
    pub doc: Document,
    pub findings: Findings,
}

/// Reads the schema and the recipe and runs the static checks; `Err` when either could not
/// be read, with the report and exit code that says so.
pub fn check_file(args: &CheckArgs) -> Result<Checked, (Report, Exit)> {
    let schema = load_schema(args.schema.as_deref(), args.schema_policy)
        .map_err(|e| (Report::failed(Failure::SchemaError, e.to_string()), Exit::Config))?;
    let doc = recipe::read_file(&args.file).map_err(|e| {
        let exit = if matches!(e, ReadError::Io(_)) { Exit::NotFound } else { Exit::Invalid };
        (Report::of_read_error(&e), exit)
    })?;
    let findings = {
        let mut runner = Runner::new();
        checks::register_static(&mut runner, &schema, &args.policy);
        runner.run_all(&doc)
    };
    Ok(Checked { schema, doc, findings })
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
