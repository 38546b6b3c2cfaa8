//! The banner `provision-failed.service` puts on the console and in the journal (through
//! `provision-dispatcher report`): what happened, each field and why, what to do next.

use crate::failure::{Exit, Failure};
use crate::issues::{printable, Severity};
use crate::report::status::{State, Status};
use crate::report::DETAILS_SHOWN;

const RULE: &str = "========================================================================";

/// The banner for one status. Every string of the status is printed through [`printable`]:
/// a status file is data, and a device label or a schema's `$id` may hold anything.
pub fn render(status: &Status) -> String {
    let mut text = String::new();
    let mut line = |s: String| {
        text.push_str(&s);
        text.push('\n');
    };
    let meaning = Exit::from_code(status.exit_code).map_or("unknown", Exit::meaning);
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
        line(format!("failed in:  {} ({})", phase.name(), printable(&status.message)));
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
            line(format!("{name:<11} {}", printable(value)));
        }
    }
    line(format!("started:    {}", status.started_at));
    if let Some(finished) = &status.finished_at {
        line(format!("finished:   {finished}"));
    }
    if status.timings_ms.total.is_some() {
        line(format!("took:       {}", status.timings_ms.line()));
    }
    line(format!("trust:      {}", trust_line(status)));
    for (details, severity, title) in [
        (&status.details, Severity::Error, "problem(s) in recipe.json"),
        (&status.warnings, Severity::Warning, "warning(s)"),
    ] {
        if details.is_empty() {
            continue;
        }
        line(format!("{} {title}:", details.len()));
        for d in details.iter().take(DETAILS_SHOWN) {
            line(format!("  {}", d.line("recipe.json", severity)));
        }
        if details.len() > DETAILS_SHOWN {
            line(format!("  ... and {} more, all in status.json", details.len() - DETAILS_SHOWN));
        }
    }
    if status.state == State::Failed {
        let next = status.failure.map_or(Failure::Bug.next_step(), Failure::next_step);
        line(format!("next:       {next}"));
    }
    line("journal:    journalctl -b -u provision-dispatcher.service".into());
    line(RULE.into());
    text
}

/// Secure Boot and lockdown in a few words, for the banner and the end-of-run journal entry.
pub fn trust_line(status: &Status) -> String {
    let secure_boot = match status.secure_boot {
        Some(true) => "on",
        Some(false) => "off",
        None => "n/a (not UEFI)",
    };
    let lockdown = status.lockdown.as_deref().map_or("n/a".into(), printable);
    format!("secure boot {secure_boot}, lockdown {lockdown}")
}
