//! The result line (SPEC §6b): `PROVISION-RESULT v1 ` and one compact JSON object, for
//! controllers reading the serial console (serial-over-LAN) or the screen. Made from the
//! status as written, so that it and status.json never disagree; `status_sha256` proves which
//! status it was made from.
//!
//! A dispatch has two lines: `run`'s (`dispatched`), then `follow`'s when the task ends
//! (`succeeded`, `task_failed`, `timed_out` then a later end, or `interrupted`: SPEC §6d), for
//! the same recipe and job, with `end` saying how.

use std::borrow::Cow;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::failure::{Failure, Phase};
pub use crate::issues::{ascii_json, hex};
use crate::issues::{ascii_json_len, shorten, MAX_PATH_BYTES};
use crate::report::console;
use crate::report::status::{State, Status, MAX_UNIT_BYTES};
use crate::systemd::task::Shutdown;

/// The line's frame is boot-io's, which the initrd's `/init` writes its own failures in.
pub use boot_io::result::{MAX_LINE_BYTES, PREFIX};

/// At most this many details.
pub const MAX_DETAILS: usize = 16;

/// The most bytes any other string takes in the line, as written: more than a unit name can
/// (255 characters, a `\` written as two), so only what no run writes is ever shortened.
const MAX_FIELD_BYTES: usize = 512;

/// The most bytes of a detail's code, as written: a rule's name takes under 30.
const MAX_CODE_BYTES: usize = 64;

/// At most this many units in an end (status.json keeps more).
pub const MAX_END_UNITS: usize = 8;

/// Field order as in SPEC §6b; `details_omitted` (how many details the line leaves out)
/// follows `details`.
#[derive(Debug, Serialize)]
pub struct ResultLine<'s> {
    pub state: State,
    pub failure: Option<Failure>,
    pub exit_code: u8,
    pub phase: Option<Phase>,
    /// A recipe value, but one that passed validation as a unit name; only once the target
    /// was started (or, in a rerun, had been started earlier in this boot).
    pub target: Option<Cow<'s, str>>,
    pub job: Option<Cow<'s, str>>,
    pub recipe_sha256: Option<Cow<'s, str>>,
    /// Where the task came from: the device (or the path given), or `embedded` (a task in the
    /// maintenance ISO's area, SPEC §6c); `null` before any was found.
    pub media: Option<Cow<'s, str>>,
    pub signer: Option<Cow<'s, str>>,
    pub secure_boot: Option<bool>,
    pub details: Vec<PathCode<'s>>,
    pub details_omitted: usize,
    pub took_ms: Option<u64>,
    pub status_sha256: Option<String>,
    /// The disk `target_disk` resolved to, the machine's values (SPEC §4a); `null` when none.
    pub disk: Option<DiskLine<'s>>,
    /// The SHA-256 of the inventory printed before this line (its lines carry it): which
    /// inventory is this run's. `null` when none was printed.
    pub inventory_sha256: Option<Cow<'s, str>>,
    /// How the task ended (SPEC §6d), in the lines of `follow`; `null` in `run`'s.
    pub end: Option<EndLine<'s>>,
}

/// The task's end in the line: status.json's `end`, its units bounded as details are.
#[derive(Debug, Serialize)]
pub struct EndLine<'s> {
    pub job_result: Option<Cow<'s, str>>,
    /// The failed units (`task_failed`) or those still running (`timed_out`, `interrupted`).
    pub units: Vec<Cow<'s, str>>,
    pub units_omitted: usize,
    pub shutdown: Option<Shutdown>,
    /// The deadline passed before this end (`timed_out` was told first).
    pub past_deadline: bool,
}

/// The resolved disk's identity in the line, each string bounded as the line's others.
#[derive(Debug, Serialize)]
pub struct DiskLine<'s> {
    pub name: Cow<'s, str>,
    pub wwn: Option<Cow<'s, str>>,
    pub serial: Option<Cow<'s, str>>,
    pub model: Option<Cow<'s, str>>,
    pub size_bytes: u64,
}

/// A detail, as a pointer and a code only: never the message, which the line has no room for.
/// A refusal of the media adds the file it is about and, for an unknown `$id`, the `$id`s the
/// image knows (its own values).
#[derive(Debug, Serialize)]
pub struct PathCode<'s> {
    pub path: Cow<'s, str>,
    pub code: Cow<'s, str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<Cow<'s, str>>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    pub known: &'s [String],
}

impl<'s> ResultLine<'s> {
    /// The result of `status`, whose status.json holds `written` (`None`: it could not be
    /// written). It always fits [`MAX_LINE_BYTES`]: long strings are shortened, and of the
    /// status's details the first ones that fit are taken (at most [`MAX_DETAILS`]), the rest
    /// counted in `details_omitted` with those status.json itself left out.
    pub fn new(status: &'s Status, written: Option<&[u8]>) -> ResultLine<'s> {
        let field = |text: Option<&'s str>| text.map(|text| shorten(text, MAX_FIELD_BYTES, ascii_json_len));
        let started = status.state.started();
        let total = status.details.len().saturating_add(status.details_omitted);
        let mut line = ResultLine {
            state: status.state,
            failure: status.failure,
            exit_code: status.exit_code,
            phase: status.phase,
            target: field(status.target.as_deref().filter(|_| started)),
            job: field(status.job.as_deref().filter(|_| started)),
            recipe_sha256: field(status.recipe_sha256.as_deref()),
            media: field(status.media.as_deref()),
            signer: field(status.signature.as_ref().map(|s| s.fingerprint.as_str())),
            secure_boot: status.secure_boot,
            details: Vec::new(),
            details_omitted: total,
            took_ms: status.timings_ms.total.map(|ms| ms.round() as u64),
            status_sha256: written.map(|bytes| hex(&Sha256::digest(bytes))),
            disk: status.disk.as_ref().map(|disk| DiskLine {
                name: shorten(&disk.name, MAX_FIELD_BYTES, ascii_json_len),
                wwn: field(disk.wwn.as_deref()),
                serial: field(disk.serial.as_deref()),
                model: field(disk.model.as_deref()),
                size_bytes: disk.size_bytes,
            }),
            end: status.end.as_ref().filter(|_| started).map(|end| EndLine {
                job_result: field(end.job_result.as_deref()),
                units: Vec::new(),
                units_omitted: end.units.len().saturating_add(end.units_omitted),
                shutdown: end.shutdown,
                past_deadline: end.timed_out_at.is_some() && status.state != State::TimedOut,
            }),
            inventory_sha256: field(status.inventory_sha256.as_deref()),
        };
        for unit in status.end.iter().filter(|_| started).flat_map(|end| &end.units).take(MAX_END_UNITS) {
            let end = line.end.as_mut().expect("made above from the same end");
            end.units.push(shorten(unit, MAX_UNIT_BYTES, ascii_json_len));
            end.units_omitted -= 1;
            if line.line().len() > MAX_LINE_BYTES {
                let end = line.end.as_mut().expect("made above from the same end");
                end.units.pop();
                end.units_omitted += 1;
                break;
            }
        }
        for d in status.details.iter().take(MAX_DETAILS) {
            let path = shorten(&d.path, MAX_PATH_BYTES, ascii_json_len);
            let code = shorten(&d.code, MAX_CODE_BYTES, ascii_json_len);
            line.details.push(PathCode { path, code, file: field(d.file.as_deref()), known: &d.known });
            line.details_omitted -= 1;
            if line.line().len() > MAX_LINE_BYTES {
                line.details.pop();
                line.details_omitted += 1;
                break;
            }
        }
        line
    }

    /// The JSON object alone, on one line (`report --format json`): printable ASCII only.
    /// Every other character is written as JSON's `\uXXXX` escape (two for one beyond the
    /// Basic Multilingual Plane): no reader can take one for a line break (Python's
    /// `splitlines` breaks at U+0085, U+2028, U+2029, U+000B, U+000C, U+001C to U+001E, and
    /// at byte 0x85 in text decoded as Latin-1), no terminal for a control sequence (U+009B
    /// is CSI), whatever the console's encoding.
    pub fn json(&self) -> String {
        ascii_json(self)
    }

    /// The whole line, with its newline: written in one piece, it never splits.
    pub fn line(&self) -> String {
        format!("{PREFIX}{}\n", self.json())
    }
}

/// The longest the inventory's lines may take on the consoles, all of them together: a whole
/// 64 KiB inventory takes under six seconds at 115200 baud; a slower line leaves the rest out.
pub const MAX_PRINTING: Duration = Duration::from_secs(20);

/// Ends a run: the inventory's lines (`inventory`: none after a panic or when memory ran out),
/// then the result line, on stdout (the journal, under the unit) and, with `consoles`, on every
/// console the kernel writes to, each line once the one before has left the console.
pub fn announce(status: &Status, written: Option<&[u8]>, consoles: bool, inventory: &[String]) {
    let line = ResultLine::new(status, written).line();
    let mut stdout = std::io::stdout().lock();
    for text in inventory.iter().chain([&line]) {
        let _ = stdout.write_all(text.as_bytes());
    }
    let _ = stdout.flush();
    if consoles {
        let started = Instant::now();
        let lines: Vec<&[u8]> = inventory.iter().chain([&line]).map(|text| text.as_bytes()).collect();
        let devices = console::active(Path::new(console::ACTIVE));
        let took = console::write_lines_all_consoles(&devices, &lines, started + MAX_PRINTING);
        if !inventory.is_empty() {
            let bytes: usize = inventory.iter().map(String::len).sum();
            tracing::info!(
                phase = "report",
                "printed the inventory ({} lines, {bytes} bytes) and the result line on {} in {:.0} ms",
                inventory.len(),
                if took.is_empty() { "no console".into() } else { console::names(&took).join(" ") },
                started.elapsed().as_secs_f64() * 1000.0
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::issues::Detail;

    fn failed_status(details: usize) -> Status {
        let mut status = Status::running("2026-11-24T00:00:00Z".into(), None);
        status.state = State::Failed;
        status.failure = Some(Failure::ValidationError);
        status.phase = Some(Phase::Validate);
        status.exit_code = 65;
        status.recipe_sha256 = Some("ab".repeat(32));
        status.timings_ms.total = Some(41.6);
        status.details = (0..details)
            .map(|i| Detail {
                path: format!("/partition_layout/{i}/size"),
                code: "pattern".into(),
                message: "must match pattern ^x$".into(),
                line: 3,
                column: 7,
                ..Detail::default()
            })
            .collect();
        status
    }

    #[test]
    fn the_line_has_the_fields_of_the_spec_in_order() {
        let status = failed_status(1);
        let line = ResultLine::new(&status, Some(b"{}\n")).line();
        assert_eq!(
            line,
            format!(
                "PROVISION-RESULT v1 {{\"state\":\"failed\",\"failure\":\"validation_error\",\"exit_code\":65,\
                 \"phase\":\"validate\",\"target\":null,\"job\":null,\"recipe_sha256\":\"{}\",\"media\":null,\
                 \"signer\":null,\"secure_boot\":null,\"details\":[{{\"path\":\"/partition_layout/0/size\",\"code\":\"pattern\"}}],\
                 \"details_omitted\":0,\"took_ms\":42,\"status_sha256\":\"{}\",\"disk\":null,\
                 \"inventory_sha256\":null,\"end\":null}}\n",
                "ab".repeat(32),
                hex(&Sha256::digest(b"{}\n"))
            )
        );
    }

    #[test]
    fn at_most_sixteen_details_and_never_a_message() {
        let status = failed_status(40);
        let line = ResultLine::new(&status, None).line();
        assert_eq!(line.matches("\"path\"").count(), MAX_DETAILS);
        assert!(line.contains("\"details_omitted\":24,"), "{line}");
        assert!(!line.contains("must match"), "{line}");
        assert_eq!(line.matches('\n').count(), 1, "one line");
        assert!(line.ends_with("\"status_sha256\":null,\"disk\":null,\"inventory_sha256\":null,\"end\":null}\n"));
    }

    #[test]
    fn a_dispatch_names_target_job_and_signer() {
        let mut status = Status::running("2026-11-24T00:00:00Z".into(), None);
        status.state = State::Dispatched;
        status.target = Some("install-linux.target".into());
        status.job = Some("/org/freedesktop/systemd1/job/42".into());
        status.secure_boot = Some(true);
        status.signature = Some(crate::trust::Signer {
            principal: "controller".into(),
            fingerprint: "SHA256:abc".into(),
            namespace: "provision-dispatcher".into(),
        });
        let json: serde_json::Value = serde_json::from_str(&ResultLine::new(&status, None).json()).unwrap();
        assert_eq!(json["state"], "dispatched");
        assert_eq!(json["failure"], serde_json::Value::Null);
        assert_eq!(json["target"], "install-linux.target");
        assert_eq!(json["job"], "/org/freedesktop/systemd1/job/42");
        assert_eq!(json["signer"], "SHA256:abc");
        assert_eq!(json["secure_boot"], true);
    }

    /// Issue 39: a refusal of the media names the file of each cause, and an unknown `$id`
    /// the `$id`s the image knows; a recipe's detail stays `{"path", "code"}`.
    #[test]
    fn a_refusal_of_the_media_names_its_file_and_what_the_image_knows() {
        let mut status = failed_status(1);
        status.failure = Some(Failure::SchemaError);
        let mut unknown = Detail::of_file("recipe.schema.json", crate::issues::Code::UnknownSchemaId, "m");
        unknown.known = vec!["https://a/v1".into(), "https://a/v2".into()];
        status.details.insert(0, unknown);
        let json: serde_json::Value = serde_json::from_str(&ResultLine::new(&status, None).json()).unwrap();
        assert_eq!(
            json["details"],
            serde_json::json!([
                {"path": "", "code": "unknownSchemaId", "file": "recipe.schema.json", "known": ["https://a/v1", "https://a/v2"]},
                {"path": "/partition_layout/0/size", "code": "pattern"}
            ])
        );
    }

    #[test]
    fn a_key_with_a_newline_cannot_split_the_line() {
        let mut status = failed_status(1);
        status.details[0].path = "/a\nPROVISION-RESULT v1 {}\r".into();
        let line = ResultLine::new(&status, None).line();
        assert_eq!(line.matches('\n').count(), 1);
        assert!(!line.contains('\r'));
    }

    /// What any reader may take for a line break or a control sequence, or a console in
    /// another encoding garble: everything but printable ASCII.
    fn assert_printable_ascii(line: &str) {
        let body = line.strip_suffix('\n').expect("ends with its newline");
        assert!(body.bytes().all(|b| (b' '..=b'~').contains(&b)), "{body:?}");
    }

    /// Issue 31, finding 3: U+2028, U+2029 and U+0085 reached the line raw (serde_json
    /// escapes U+0000 to U+001F only), and Python's `splitlines` breaks there.
    #[test]
    fn the_line_is_printable_ascii_and_reads_back_the_same() {
        let breaks = "\u{b}\u{c}\u{1c}\u{1d}\u{1e}\u{7f}\u{85}\u{9b}\u{2028}\u{2029}\u{202e}";
        let path = format!("/\u{2028}PROVISION-RESULT v1 {{}}\u{2028}{breaks}é✓😀\"\\");
        let mut status = failed_status(1);
        status.details[0].path = path.clone();
        let result = ResultLine::new(&status, None);
        let line = result.line();
        assert_printable_ascii(&line);
        assert!(line.contains("\\u2028PROVISION-RESULT v1 {}\\u2028\\u000b\\f\\u001c"), "{line}");
        assert!(line.contains("\\u00e9\\u2713\\ud83d\\ude00"), "{line}");
        let json: serde_json::Value = serde_json::from_str(&result.json()).unwrap();
        assert_eq!(json["details"][0]["path"], path.as_str(), "JSON readers decode the escapes");
    }

    /// Issue 31, finding 4: one unknown key of 64 KiB made a line of 66 KB, which no console
    /// takes in one write.
    #[test]
    fn the_line_fits_one_console_write_and_counts_what_it_left_out() {
        let mut status = failed_status(1);
        status.details[0].path = format!("/{}", "k".repeat(64 * 1024));
        let line = ResultLine::new(&status, Some(b"{}")).line();
        assert!(line.len() <= MAX_LINE_BYTES, "{}", line.len());
        assert!(line.contains("\"details_omitted\":0,"), "{line}");
        assert!(line.contains("kkk\\u2026(65310 bytes cut)\\u2026kkk"), "{line}");

        // The worst: every string long and escaped six or twelve bytes a character.
        let mut status = failed_status(40);
        let wide = "\u{1}😀".repeat(2000);
        for d in &mut status.details {
            d.path = format!("/{wide}");
            d.code = wide.clone();
        }
        status.state = State::Dispatched;
        status.target = Some(wide.clone());
        status.job = Some(wide.clone());
        status.recipe_sha256 = Some(wide.clone());
        status.signature =
            Some(crate::trust::Signer { principal: wide.clone(), fingerprint: wide.clone(), namespace: wide.clone() });
        status.details_omitted = usize::MAX - 40;
        status.timings_ms.total = Some(f64::MAX);
        let result = ResultLine::new(&status, Some(b"{}"));
        let line = result.line();
        assert!(line.len() <= MAX_LINE_BYTES, "{}", line.len());
        assert_printable_ascii(&line);
        assert!(result.details.len() >= 4, "{line}");
        assert_eq!(result.details_omitted, usize::MAX - result.details.len());
    }

    fn ended(state: State, units: Vec<String>) -> Status {
        let mut status = failed_status(0);
        (status.state, status.failure, status.phase, status.exit_code) = (state, None, None, 0);
        status.target = Some("install-linux.target".into());
        status.job = Some("/org/freedesktop/systemd1/job/42".into());
        status.end = Some(crate::report::status::End {
            at: "2026-11-24T01:00:00Z".into(),
            job_result: Some("dependency".into()),
            units,
            units_omitted: 0,
            shutdown: None,
            deadline_secs: 7200,
            timed_out_at: None,
            bmc_event: None,
        });
        status
    }

    /// SPEC §6d: the end's line names the job and the units, bounded as details are: at most
    /// [`MAX_END_UNITS`], as many as fit one console write, the rest counted.
    #[test]
    fn an_end_names_its_units_within_the_line() {
        let status = ended(State::TaskFailed, vec!["write.service".into(), "check.service".into()]);
        let json: serde_json::Value = serde_json::from_str(&ResultLine::new(&status, None).json()).unwrap();
        assert_eq!(json["state"], "task_failed");
        assert_eq!(json["job"], "/org/freedesktop/systemd1/job/42");
        assert_eq!(
            json["end"],
            serde_json::json!({"job_result": "dependency", "units": ["write.service", "check.service"],
                               "units_omitted": 0, "shutdown": null, "past_deadline": false})
        );
        let wide = |i: usize| format!("{i}-{}.service", "\u{1}😀".repeat(120));
        let mut status = ended(State::TaskFailed, (0..40).map(wide).collect());
        status.end.as_mut().unwrap().units_omitted = 3;
        let result = ResultLine::new(&status, None);
        let line = result.line();
        assert!(line.len() <= MAX_LINE_BYTES, "{}", line.len());
        assert_printable_ascii(&line);
        let end = result.end.as_ref().unwrap();
        assert!(!end.units.is_empty() && end.units.len() <= MAX_END_UNITS, "{line}");
        assert_eq!(end.units.len() + end.units_omitted, 43);
    }

    /// The end of an earlier dispatch, carried in the status of a run that failed (a different
    /// recipe refused), is not that run's: its line has none.
    #[test]
    fn only_a_started_target_has_an_end_in_the_line() {
        let mut status = ended(State::Succeeded, vec![]);
        assert!(ResultLine::new(&status, None).end.is_some());
        status.state = State::Failed;
        assert!(ResultLine::new(&status, None).end.is_none());
    }

    /// Issue 40, finding 5: when the boot never reaches the root, the initrd's `/init` ends it in
    /// a line of its own (boot-io's), which a controller must read as it reads the dispatcher's:
    /// the same fields in the same order, a failure word and a phase of this vocabulary.
    #[test]
    fn the_initrds_line_has_the_fields_of_the_dispatchers() {
        // The keys in the order written (neither line has a nested object here).
        let keys = |json: &str| -> Vec<String> {
            json.split('"')
                .collect::<Vec<_>>()
                .windows(2)
                .filter(|w| w[1].starts_with(':'))
                .map(|w| w[0].to_owned())
                .collect()
        };
        let ours = ResultLine::new(&failed_status(0), None).json();
        assert_eq!(keys(&ours).len(), 17, "{ours}");
        for boot in boot_io::result::BootFailure::ALL {
            let line = boot.line(1234);
            let json = line.strip_prefix(PREFIX).unwrap().strip_suffix('\n').unwrap();
            assert_eq!(keys(json), keys(&ours), "{line}");
            let theirs: serde_json::Value = serde_json::from_str(json).unwrap();
            let failure: Failure = serde_json::from_value(theirs["failure"].clone()).unwrap();
            assert_eq!(theirs["exit_code"], failure.exit().code(), "{line}");
            assert_eq!(serde_json::from_value::<Phase>(theirs["phase"].clone()).unwrap(), failure.phase());
            assert_eq!((&theirs["state"], &theirs["took_ms"]), (&"failed".into(), &1234.into()));
            assert_printable_ascii(&line);
        }
    }

    /// The inventory's lines go to the consoles as this line does: each in one write, within
    /// the same bound, with room for the newline written as CR LF.
    #[test]
    fn an_inventory_line_fits_a_result_lines_write() {
        use crate::inventory::lines::{MAX_CHUNK_BYTES, MAX_LINES, PREFIX};
        let header = format!("{PREFIX}{MAX_LINES}/{MAX_LINES} {} {MAX_CHUNK_BYTES} ", "0".repeat(64));
        assert!(header.len() + MAX_CHUNK_BYTES + "\r\n".len() < MAX_LINE_BYTES);
    }

    /// Issue 31, finding 13: the line named the target of runs that started nothing (outputs
    /// unwritable, `--no-start`); status.json keeps it from validation on, the line only once
    /// the target was started.
    #[test]
    fn the_target_is_named_only_once_started() {
        for (state, named) in [(State::Failed, false), (State::Rendered, false), (State::Dispatched, true)] {
            let mut status = failed_status(0);
            status.state = state;
            status.target = Some("install-linux.target".into());
            status.job = Some("/org/freedesktop/systemd1/job/42".into()).filter(|_| named);
            let json: serde_json::Value = serde_json::from_str(&ResultLine::new(&status, None).json()).unwrap();
            let want = |value: &str| if named { serde_json::Value::from(value) } else { serde_json::Value::Null };
            assert_eq!(json["target"], want("install-linux.target"), "{state:?}");
            assert_eq!(json["job"], want("/org/freedesktop/systemd1/job/42"), "{state:?}");
        }
    }
}
