//! `render FILE --output DIR`: static validation, then the outputs of SPEC §5 in DIR
//! (created; refused if it exists and is not empty). Starts nothing.

use std::io::{self, Write};
use std::path::PathBuf;

use super::check::{load, CheckArgs};
use crate::atomic::Existing;
use crate::checks::static_checks;
use crate::failure::{Exit, Failure};
use crate::issues::printable;
use crate::memory;
use crate::outputs::Outputs;
use crate::recipe::model::{Recipe, Valid};
use crate::report::Report;

#[derive(Debug, Default)]
pub struct RenderArgs {
    pub check: CheckArgs,
    /// Absolute; its path is written into `recipe.env`.
    pub output: PathBuf,
}

/// Validates, then writes the outputs. The report (errors and warnings, human format) goes to
/// `err`; the list of files written to `out`.
pub fn run(args: &RenderArgs, out: &mut impl Write, err: &mut impl Write) -> io::Result<Exit> {
    memory::on_exhaustion(|exhaustion| {
        crate::shutdown::undo_all();
        let line = format!("provision-dispatcher: nothing was written: the dispatcher ran {exhaustion}\n");
        memory::write_raw(libc::STDERR_FILENO, line.as_bytes());
    });
    let file = args.check.file.display().to_string();
    let (schema, doc) = match load(&args.check) {
        Ok(loaded) => (loaded.schema, loaded.doc),
        Err(report) => {
            write!(err, "{}", report.to_human(&file))?;
            return Ok(report.failure.map_or(Exit::Ok, Failure::exit));
        }
    };
    let recipe = Recipe::view(&doc);
    let findings = match static_checks(&recipe, &schema, &args.check.policy) {
        Ok(findings) => findings,
        Err(e) => {
            let report = Report::failed(Failure::SchemaError, e.to_string());
            write!(err, "{}", report.to_human(&file))?;
            return Ok(Failure::SchemaError.exit());
        }
    };
    let outputs = Valid::new(&recipe, &findings)
        .map(|valid| Outputs::new(&valid, schema.id().unwrap_or_default(), &args.output, None));
    let report = Report::of_findings(&doc, findings);
    if !report.details.is_empty() || !report.warnings.is_empty() {
        write!(err, "{}", report.to_human(&file))?;
    }
    let Some(outputs) = outputs else {
        return Ok(report.failure.unwrap_or(Failure::ValidationError).exit());
    };
    // Paths are the operator's and may hold anything: printed escaped, one per line.
    if let Err(e) = outputs.write(&args.output, Existing::Refuse) {
        writeln!(err, "provision-dispatcher: {}", printable(&e.to_string()))?;
        return Ok(Failure::OutputsUnwritable.exit());
    }
    for file in outputs.files() {
        writeln!(out, "{}", printable(&args.output.join(file.name).display().to_string()))?;
    }
    Ok(Exit::Ok)
}
