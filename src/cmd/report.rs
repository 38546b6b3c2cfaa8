//! `report`: the last status, for people. `provision-failed.service` runs it to put a banner on
//! the console and in the journal: what failed, each field and why, and what to do next.

use std::io::{self, Write};
use std::path::Path;

use crate::exit::Exit;
use crate::report::status::{Phase, State, Status};
use crate::report::{display_path, printable, DETAILS_SHOWN};

pub fn run(status_file: &Path, out: &mut impl Write) -> io::Result<Exit> {
    match Status::read(status_file) {
        Ok(status) => {
            out.write_all(render(&status).as_bytes())?;
            Ok(Exit::Ok)
        }
        Err(e) => {
            writeln!(
                out,
                "provision-dispatcher: no status at {} ({e}): the dispatcher did not record a run.\n\
                 See: journalctl -b -u provision-dispatcher.service",
                status_file.display()
            )?;
            Ok(Exit::NotFound)
        }
    }
}

const RULE: &str = "========================================================================";

/// The banner for one status.
pub fn render(status: &Status) -> String {
    let mut text = String::new();
    let mut line = |s: String| {
        text.push_str(&s);
        text.push('\n');
    };
    let exit = Exit::from_code(status.exit_code);
    let meaning = exit.map_or("unknown", Exit::meaning);
    let title = match status.state {
        State::Dispatched => "PROVISIONING DISPATCHED",
        State::Rendered => "PROVISIONING RENDERED (nothing started)",
        State::Running => "PROVISIONING DID NOT FINISH",
        State::Failed => "PROVISIONING FAILED",
    };
    line(RULE.into());
    line(title.to_owned());
    line(RULE.into());
    if let Some(phase) = status.phase {
        line(format!("failed in:  {} ({})", phase.name(), status.message));
    }
    line(format!("exit code:  {} ({meaning})", status.exit_code));
    let fields = [
        ("media:", &status.media),
        ("schema:", &status.schema_id),
        ("target:", &status.target),
        ("start job:", &status.job),
    ];
    for (name, value) in fields {
        if let Some(value) = value {
            line(format!("{name:<11} {value}"));
        }
    }
    line(format!("started:    {}", status.started_at));
    if let Some(finished) = &status.finished_at {
        line(format!("finished:   {finished}"));
    }
    for (details, title) in [(&status.details, "problem(s) in recipe.json"), (&status.warnings, "warning(s)")] {
        if details.is_empty() {
            continue;
        }
        line(format!("{} {title}:", details.len()));
        for d in details.iter().take(DETAILS_SHOWN) {
            let (path, message) = (display_path(&d.path), printable(&d.message));
            line(format!("  recipe.json:{}:{}: {path}: {message} [{}]", d.line, d.column, d.code));
        }
        if details.len() > DETAILS_SHOWN {
            line(format!("  ... and {} more, all in status.json", details.len() - DETAILS_SHOWN));
        }
    }
    if status.state == State::Failed {
        line(format!("next:       {}", next_step(status.phase, exit)));
    }
    line("journal:    journalctl -b -u provision-dispatcher.service".into());
    line(RULE.into());
    text
}

fn next_step(phase: Option<Phase>, exit: Option<Exit>) -> &'static str {
    match (phase, exit) {
        (Some(Phase::Media), _) => {
            "attach the task ISO (volume id TASK) as virtual media, then reboot or rerun the dispatcher"
        }
        (Some(Phase::Mount), _) => {
            "the task ISO could not be mounted: rebuild it on the controller and attach it again"
        }
        (Some(Phase::Schema), _) => {
            "the ISO's recipe.schema.json is unusable: rebuild the ISO with the canonical schema"
        }
        (Some(Phase::Recipe), Some(Exit::CantWrite)) => {
            "a different recipe already ran in this boot: reboot to run the new one, or rerun with --force"
        }
        (Some(Phase::Recipe), _) => "the ISO has no readable recipe.json: rebuild it on the controller",
        (Some(Phase::Validate), Some(Exit::Unavailable)) => {
            "the image has no such target unit, or systemd did not answer: check the image's units"
        }
        (Some(Phase::Validate), _) => {
            "fix the fields above in the recipe on the controller, then attach the new task ISO"
        }
        (Some(Phase::Outputs), _) => "the outputs could not be written: check that /run is writable and has room",
        (Some(Phase::Systemd), _) => "systemd refused or did not answer: check the target unit and the system bus",
        _ => "report this failure with the journal of provision-dispatcher.service",
    }
}
