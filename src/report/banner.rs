//! The banner `provision-failed.service` puts on the console and in the journal (through
//! `provision-dispatcher report`): what happened, each field and why, what to do next.
//! The journal gets it whole ([`render`]); the consoles get it fitted to one 80×24 screen
//! with the getty's prompt under it ([`console`]).

use crate::disks::verdict::Listed;
use crate::failure::{Exit, Failure};
use crate::issues::{printable, Detail, Severity};
use crate::report::columns::{cut, width};
use crate::report::status::{End, State, Status};
use crate::report::DETAILS_SHOWN;

const RULE: &str = "========================================================================";

/// The smallest screen the banner is made for: serial-over-LAN and a BIOS text console.
pub const COLUMNS: usize = 80;
pub const SCREEN_ROWS: usize = 24;
/// What a getty puts under the banner: a blank line, Debian's /etc/issue (its line and a
/// blank one) and the login prompt.
pub const GETTY_ROWS: usize = 4;
/// The rows the console banner may take.
pub const CONSOLE_ROWS: usize = SCREEN_ROWS - GETTY_ROWS;

/// The banner for one status, whole. Every string of the status is printed through
/// [`printable`]: a status file is data, and a device label or a schema's `$id` may hold
/// anything.
pub fn render(status: &Status) -> String {
    let parts = Parts::of(status);
    let mut lines = vec![RULE.to_owned(), parts.title.to_owned(), RULE.to_owned()];
    lines.extend(parts.outcome);
    lines.extend(parts.facts);
    lines.extend(parts.times);
    let all = 2 + DETAILS_SHOWN;
    lines.extend(section(&status.details, status.details_omitted, Severity::Error, errors_title(status), all));
    lines.extend(disks(&status.disks, status.disks_omitted, usize::MAX));
    lines.extend(section(&status.warnings, status.warnings_omitted, Severity::Warning, WARNINGS, all));
    lines.extend(parts.next);
    lines.extend(parts.tail);
    join(lines)
}

/// The banner for the consoles: at most [`CONSOLE_ROWS`] lines of at most [`COLUMNS`]
/// columns. The title, the phase, the exit code and the next step always; then as many
/// errors as fit; warnings in full if they fit, else counted in one line; the media, schema,
/// target and job if room is left. Times are left to the journal.
pub fn console(status: &Status) -> String {
    let parts = Parts::of(status);
    let mut head = vec![format!("{:=<width$}", format!("==== {} ", parts.title), width = RULE.len())];
    head.extend(parts.outcome);
    let tail: Vec<String> = parts.next.iter().flat_map(|next| wrap(next, COLUMNS, 2)).chain(parts.tail).collect();
    let mut room = CONSOLE_ROWS.saturating_sub(head.len() + tail.len());
    let warning_rows = usize::from(!status.warnings.is_empty());
    // After a failed disk check the machine's disks come next: a few rows are kept for them.
    let disk_rows = if status.disks.is_empty() { 0 } else { (status.disks.len() + 1).min(4) };
    let error_rows = room.saturating_sub(warning_rows + disk_rows);
    let errors = section(&status.details, status.details_omitted, Severity::Error, errors_title(status), error_rows);
    room -= errors.len();
    let disks = disks(&status.disks, status.disks_omitted, room.saturating_sub(warning_rows));
    room -= disks.len();
    let warnings = section(&status.warnings, status.warnings_omitted, Severity::Warning, WARNINGS, room);
    room -= warnings.len();
    let facts = parts.facts.into_iter().take(room);
    let mut lines = head;
    lines.extend(facts.chain(errors).chain(disks).chain(warnings).chain(tail));
    lines.iter_mut().for_each(|line| cut(line, COLUMNS));
    join(lines)
}

const ERRORS: &str = "problem(s) in recipe.json";
const WARNINGS: &str = "warning(s)";

/// The errors' title: in the recipe, or, for a refusal of the media, in the files each names.
fn errors_title(status: &Status) -> &'static str {
    match status.details.first().and_then(|d| d.file.as_ref()) {
        Some(_) => "problem(s)",
        None => ERRORS,
    }
}

/// The lines of a banner, in groups that the two layouts arrange.
struct Parts {
    title: &'static str,
    /// The phase and the exit code.
    outcome: Vec<String>,
    /// Media, schema, target, job: what the run was about; Secure Boot and lockdown.
    facts: Vec<String>,
    times: Vec<String>,
    next: Option<String>,
    tail: Vec<String>,
}

impl Parts {
    fn of(status: &Status) -> Parts {
        let meaning = Exit::from_code(status.exit_code).map_or("unknown", Exit::meaning);
        let title = match status.state {
            State::Dispatched => "PROVISIONING DISPATCHED",
            State::Rendered => "PROVISIONING RENDERED (nothing started)",
            State::Running => "PROVISIONING DID NOT FINISH",
            State::Failed => "PROVISIONING FAILED",
            State::Succeeded => "PROVISIONING TASK SUCCEEDED",
            State::TaskFailed => "PROVISIONING TASK FAILED",
            State::TimedOut => "PROVISIONING TASK TIMED OUT (still running)",
            State::Interrupted => "PROVISIONING TASK INTERRUPTED",
        };
        let mut outcome = Vec::new();
        if let Some(phase) = status.phase {
            outcome.push(format!("failed in:  {} ({})", phase.name(), printable(&status.message)));
        }
        outcome.push(format!("exit code:  {} ({meaning})", status.exit_code));
        let facts = [
            ("media:", &status.media),
            ("schema:", &status.schema_id),
            ("target:", &status.target),
            ("start job:", &status.job),
        ]
        .into_iter()
        .filter_map(|(name, value)| Some(format!("{name:<11} {}", printable(value.as_ref()?))))
        .chain(status.end.as_ref().map(|end| format!("task end:   {}", end_line(status.state, end))))
        .chain([format!("trust:      {}", trust_line(status))])
        .collect();
        let mut times = vec![format!("started:    {}", printable(&status.started_at))];
        times.extend(status.finished_at.as_ref().map(|finished| format!("finished:   {}", printable(finished))));
        if status.timings_ms.total.is_some() {
            times.push(format!("took:       {}", status.timings_ms.line()));
        }
        let next = (status.state == State::Failed).then(|| {
            let first = status.details.first().map(|d| d.code.as_str());
            let next = status.failure.map_or(Failure::Bug.next_step(), |failure| failure.next_step_for(first));
            format!("next:       {next}")
        });
        let tail = vec!["journal:    journalctl -b -u provision-dispatcher.service".to_owned(), RULE.to_owned()];
        Parts { title, outcome, facts, times, next, tail }
    }
}

/// A titled list of details in at most `rows` lines: all of them, or the first ones and how
/// many more, or (in one line) only how many. `omitted`: how many status.json left out.
fn section(details: &[Detail], omitted: usize, severity: Severity, title: &str, rows: usize) -> Vec<String> {
    let n = details.len().saturating_add(omitted);
    if n == 0 || rows == 0 {
        return Vec::new();
    }
    if rows == 1 {
        return vec![format!("{n} {title}: see provision-dispatcher report, the journal, status.json")];
    }
    let shown = if n < rows { n } else { rows - 2 }.min(details.len());
    let mut lines = vec![format!("{n} {title}:")];
    lines.extend(details.iter().take(shown).map(|d| format!("  {}", d.line("recipe.json", severity))));
    if shown < n {
        let where_ = if omitted == 0 { "all in status.json" } else { "all in `check` of the recipe" };
        lines.push(format!("  ... and {} more, {where_}", n - shown));
    }
    lines
}

/// The machine's disks in at most `rows` lines, one each: its node, size, model, serial, WWN
/// and what the dispatcher thinks of it (the machine's values: an operator tells the disks
/// apart by them). `omitted` more are counted (those status.json left out).
fn disks(disks: &[Listed], omitted: usize, rows: usize) -> Vec<String> {
    if disks.is_empty() || rows < 2 {
        return Vec::new();
    }
    let total = disks.len().saturating_add(omitted);
    let shown = if total < rows { disks.len() } else { (rows - 2).min(disks.len()) };
    let or_dash = |value: &Option<String>| value.as_deref().map_or("-".to_owned(), |v| printable(v).into_owned());
    let mut lines = vec![format!("{total} disk(s) of this machine:")];
    lines.extend(disks.iter().take(shown).map(|listed| {
        let disk = &listed.disk;
        format!(
            "  {} {} {} S/N {} WWN {} {}",
            printable(&disk.node),
            size_words(disk.size_bytes),
            or_dash(&disk.model),
            or_dash(&disk.serial),
            or_dash(&disk.wwn),
            listed.verdict.name()
        )
    }));
    if shown < total {
        lines.push(format!("  ... and {} more: provision-dispatcher disks", total - shown));
    }
    lines
}

/// A size for people: `931.5 GiB`.
fn size_words(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut size = bytes as f64;
    let mut unit = 0;
    while size >= 1024.0 && unit + 1 < UNITS.len() {
        size /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{size:.1} {}", UNITS[unit])
    }
}

/// `line` in at most `rows` lines of `columns`, broken at spaces; the continuation lines are
/// indented as the text after the line's label (`next:       `).
fn wrap(line: &str, columns: usize, rows: usize) -> Vec<String> {
    const INDENT: &str = "            ";
    let mut lines = Vec::new();
    let mut current = String::new();
    for word in line.split_inclusive(' ') {
        let over = width(&current) + width(word.trim_end()) > columns;
        if over && !current.trim().is_empty() && lines.len() + 1 < rows {
            lines.push(current.trim_end().to_owned());
            current = INDENT.to_owned();
        }
        current.push_str(word);
    }
    lines.push(current.trim_end().to_owned());
    lines
}

fn join(lines: Vec<String>) -> String {
    lines.into_iter().flat_map(|line| [line, "\n".to_owned()]).collect()
}

/// How the task ended, in one line: which units, the job's result, the shutdown.
fn end_line(state: State, end: &End) -> String {
    let mut units: Vec<String> = end.units.iter().map(|u| printable(u).into_owned()).collect();
    if end.units_omitted > 0 {
        units.push(format!("and {} more", end.units_omitted));
    }
    let which = match state {
        State::TaskFailed => "failed: ",
        State::TimedOut | State::Interrupted => "still running: ",
        _ => "",
    };
    let mut words = vec![format!("{} s deadline", end.deadline_secs)];
    words.extend(end.job_result.as_deref().map(|result| format!("start job {}", printable(result))));
    words.extend(end.shutdown.map(|shutdown| format!("{shutdown:?} under way").to_lowercase()));
    if !units.is_empty() && !which.is_empty() {
        words.push(format!("{which}{}", units.join(", ")));
    }
    words.join("; ")
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::failure::Phase;

    fn detail(i: usize, path: String) -> Detail {
        Detail {
            path,
            code: "pattern".into(),
            message: format!("must match pattern ^(?:[1-9][0-9]*)(?:[KMGTP]B?|B)?$|^[1-9][0-9]?%$|^100%$ ({i})"),
            line: 100 + i,
            column: 17,
            ..Detail::default()
        }
    }

    fn worst(errors: usize, warnings: usize) -> Status {
        let mut status = Status::running("2026-11-24T03:00:00Z".into(), None);
        status.state = State::Failed;
        status.failure = Some(Failure::ValidationError);
        status.phase = Some(Phase::Validate);
        status.exit_code = 65;
        status.message = "the recipe failed validation: 16 error(s)".into();
        status.media = Some(format!("/dev/disk/by-path/{}", "pci-0000:00:14.0-usb-0:1.4:1.0-scsi-0:0:0:0".repeat(4)));
        status.schema_id = Some(format!("https://schemas.example.com/{}/recipe.schema.json", "very-long".repeat(12)));
        status.finished_at = Some("2026-11-24T03:00:01Z".into());
        status.timings_ms.total = Some(120.0);
        status.timings_ms.media = Some(3.0);
        status.timings_ms.validate = Some(14.2);
        status.details = (0..errors).map(|i| detail(i, format!("/partition_layout/{i}/size"))).collect();
        status.warnings = (0..warnings).map(|i| detail(i, format!("/partition_layout/{i}/label"))).collect();
        status
    }

    fn check_fits<'b>(banner: &'b str, title: &str) -> Vec<&'b str> {
        let rows: Vec<&str> = banner.lines().collect();
        assert!(rows.len() <= CONSOLE_ROWS, "{} rows:\n{banner}", rows.len());
        for row in &rows {
            assert!(width(row) <= COLUMNS, "{} columns: {row}", width(row));
        }
        assert!(rows[0].starts_with("==== ") && rows[0].contains(title), "title first: {}", rows[0]);
        rows
    }

    #[test]
    fn the_worst_failure_fits_one_screen_with_the_prompt() {
        let status = worst(16, 5);
        let banner = console(&status);
        let rows = check_fits(&banner, "PROVISIONING FAILED");
        for wanted in ["failed in:  validate", "exit code:  65", "next:", "16 problem(s) in recipe.json:"] {
            assert!(rows.iter().any(|row| row.starts_with(wanted)), "{wanted} missing:\n{banner}");
        }
        assert!(rows.iter().any(|row| row.contains("/partition_layout/0/size")), "the first error in view");
        assert!(rows.iter().any(|row| row.contains("... and ")), "says how many more:\n{banner}");
        assert!(rows.iter().any(|row| row.starts_with("5 warning(s): see ")), "warnings in one line:\n{banner}");
        assert_eq!(rows.last(), Some(&RULE));
    }

    #[test]
    fn room_left_shows_the_media_and_all_warnings() {
        let status = worst(2, 3);
        let banner = console(&status);
        let rows = check_fits(&banner, "PROVISIONING FAILED");
        assert!(rows.iter().any(|row| row.starts_with("media:") && row.ends_with("...")), "cut:\n{banner}");
        assert!(rows.iter().any(|row| row.starts_with("schema:")), "{banner}");
        assert_eq!(rows.iter().filter(|row| row.contains("warning: ")).count(), 3, "{banner}");
    }

    #[test]
    fn every_shape_fits() {
        for errors in [0, 1, 5, 11, 12, 13, 16, 50, 200] {
            for warnings in [0, 1, 4, 20] {
                check_fits(&console(&worst(errors, warnings)), "PROVISIONING FAILED");
            }
        }
        let mut status = worst(0, 0);
        status.state = State::Dispatched;
        status.phase = None;
        check_fits(&console(&status), "PROVISIONING DISPATCHED");
    }

    /// Issue 31, finding 9: 80 wide characters take 160 columns, two rows of the screen.
    #[test]
    fn wide_characters_are_fitted_by_their_columns() {
        let mut status = worst(16, 5);
        for (i, d) in status.details.iter_mut().enumerate() {
            d.path = format!("/{i}/{}", "設定".repeat(30));
        }
        status.message = "失敗".repeat(40);
        let banner = console(&status);
        let rows = check_fits(&banner, "PROVISIONING FAILED");
        assert!(rows.iter().any(|row| row.contains("/0/設定設定") && row.ends_with("...")), "{banner}");
    }

    /// Issue 40, finding 3: the disks status.json left out are counted with those it kept.
    #[test]
    fn disks_left_out_of_status_json_are_counted() {
        let mut status = worst(1, 0);
        let listed = |name: &str| Listed {
            disk: crate::disks::tests::disk(name, 0),
            verdict: crate::disks::verdict::Verdict::Candidate,
            users: vec![],
        };
        status.disks = vec![listed("sdewv"), listed("sdh"), listed("sda")];
        status.disks_omitted = 3997;
        let whole = render(&status);
        assert!(whole.contains("4000 disk(s) of this machine:\n  /dev/sdewv "), "{whole}");
        assert!(whole.contains("  ... and 3997 more: provision-dispatcher disks"), "{whole}");
        let screen = console(&status);
        check_fits(&screen, "PROVISIONING FAILED");
        assert!(screen.contains("4000 disk(s) of this machine:"), "{screen}");
        assert!(screen.contains(" more: provision-dispatcher disks"), "{screen}");
    }

    /// The banner's next step, its wrapped lines joined again.
    fn next_step(banner: &str) -> String {
        let next: Vec<&str> =
            banner.lines().skip_while(|l| !l.starts_with("next:")).take_while(|l| !l.starts_with("journal:")).collect();
        next.join(" ").split_whitespace().collect::<Vec<_>>().join(" ")
    }

    #[test]
    fn the_next_step_is_wrapped_not_cut() {
        for failure in Failure::ALL {
            let mut status = worst(16, 5);
            status.failure = Some(failure);
            let banner = console(&status);
            check_fits(&banner, "PROVISIONING FAILED");
            assert_eq!(next_step(&banner), format!("next: {}", failure.next_step()), "{banner}");
        }
    }

    /// Issue 39: one next step for every refusal of the media; each cause now has its own,
    /// wrapped within the banner's rows as every failure's is.
    #[test]
    fn a_refusal_of_the_media_says_what_to_do_for_its_cause() {
        use crate::issues::Code;
        let mut steps = std::collections::HashSet::new();
        for code in Code::MEDIA {
            let mut status = worst(0, 0);
            status.failure = Some(Failure::UntrustedMedia);
            status.details = vec![Detail::of_file("recipe.json.sig", code, "why")];
            let banner = console(&status);
            let rows = check_fits(&banner, "PROVISIONING FAILED");
            assert!(rows.iter().any(|row| row.starts_with("1 problem(s):")), "{banner}");
            assert!(rows.iter().any(|row| row.starts_with("  recipe.json.sig:1:1: (root): why [")), "{banner}");
            let step = Failure::UntrustedMedia.next_step_for(Some(code.name()));
            assert_eq!(next_step(&banner), format!("next: {step}"), "{banner}");
            steps.insert(step);
        }
        // The trust file, the allowlist and stale media say what their failure says: one step
        // for the three here.
        assert_eq!(steps.len(), Code::MEDIA.len() - 2, "{steps:#?}");
    }

    #[test]
    fn details_status_json_left_out_are_counted() {
        let mut status = worst(256, 0);
        status.details_omitted = 744;
        let banner = console(&status);
        let rows = check_fits(&banner, "PROVISIONING FAILED");
        assert!(rows.iter().any(|row| row.starts_with("1000 problem(s) in recipe.json:")), "{banner}");
        assert!(rows.iter().any(|row| row.contains(" more, all in `check` of the recipe")), "{banner}");
        assert!(render(&status).contains("1000 problem(s) in recipe.json:"));
    }

    #[test]
    fn the_whole_banner_keeps_everything() {
        let status = worst(16, 5);
        let banner = render(&status);
        assert!(banner.contains(status.schema_id.as_deref().unwrap()), "uncut");
        assert_eq!(banner.matches("[pattern]").count(), 21, "every error and warning");
        assert!(banner.contains("took:       media 3.0 ms"));
    }
}
