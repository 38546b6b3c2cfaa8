//! `check FILE`: static validation of a recipe file, offline.

use std::io::{self, ErrorKind, Write};
use std::path::PathBuf;

use crate::checks::{safety::Policy, static_checks};
use crate::failure::{Exit, Failure};
use crate::memory;
use crate::recipe::model::Recipe;
use crate::recipe::{self, Document, ReadError};
use crate::report::Report;
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
            Format::Json => report.to_json() + "\n",
            Format::Human => report.to_human(&file),
        };
        // Not through `out`: its lock may be held by the allocation that failed.
        memory::write_raw(libc::STDOUT_FILENO, text.as_bytes());
    });
    let report = check(args);
    match args.format {
        Format::Json => {
            let mut out = io::BufWriter::new(out);
            report.write_json(&mut out)?;
            out.flush()?;
        }
        Format::Human => write!(out, "{}", report.to_human(&args.file.display().to_string()))?,
    }
    Ok(report.failure.map_or(Exit::Ok, Failure::exit))
}

/// The report of one recipe file.
pub fn check(args: &CheckArgs) -> Report {
    match load(args) {
        Ok((schema, doc)) => {
            let findings = static_checks(&Recipe::view(&doc), &schema, &args.policy);
            Report::of_findings(&doc, findings)
        }
        Err(refused) => refused,
    }
}

/// The schema and the recipe of `args`, read; or the report that says why not (the schema's
/// first). The schema compiles on a second thread while the recipe is read and parsed: the
/// two take about as long for a large recipe, and neither needs the other.
pub fn load(args: &CheckArgs) -> Result<(Schema, Document), Report> {
    let (schema, doc) = std::thread::scope(|scope| {
        let schema = scope.spawn(|| load_schema(args.schema.as_deref(), args.schema_policy));
        let doc = recipe::read_file(&args.file);
        (schema.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic)), doc)
    });
    let schema = schema.map_err(|e| Report::failed(Failure::SchemaError, e.to_string()))?;
    let doc = doc.map_err(|e| Report::of_read_error(&e))?;
    Ok((schema, doc))
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
