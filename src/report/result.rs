//! The result line (SPEC §6b): `PROVISION-RESULT v1 ` and one compact JSON object, for
//! controllers reading the serial console (serial-over-LAN) or the screen. Made from the
//! status as written, so that it and status.json never disagree; `status_sha256` proves which
//! status it was made from.

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
use crate::report::status::{State, Status};

pub const PREFIX: &str = "PROVISION-RESULT v1 ";

/// At most this many details.
pub const MAX_DETAILS: usize = 16;

/// The most bytes of a whole line, its newline included: what one non-blocking write puts
/// whole into a console's buffer. A UART's takes about 4 KiB; a line of 66 KB (one 64 KiB
/// key) was cut on every write, so a controller read no result at all (issue 31).
pub const MAX_LINE_BYTES: usize = 4096;

/// The most bytes any other string takes in the line, as written: more than a unit name can
/// (255 characters, a `\` written as two), so only what no run writes is ever shortened.
const MAX_FIELD_BYTES: usize = 512;

/// The most bytes of a detail's code, as written: a rule's name takes under 30.
const MAX_CODE_BYTES: usize = 64;

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
#[derive(Debug, Serialize)]
pub struct PathCode<'s> {
    pub path: Cow<'s, str>,
    pub code: Cow<'s, str>,
}

impl<'s> ResultLine<'s> {
    /// The result of `status`, whose status.json holds `written` (`None`: it could not be
    /// written). It always fits [`MAX_LINE_BYTES`]: long strings are shortened, and of the
    /// status's details the first ones that fit are taken (at most [`MAX_DETAILS`]), the rest
    /// counted in `details_omitted` with those status.json itself left out.
    pub fn new(status: &'s Status, written: Option<&[u8]>) -> ResultLine<'s> {
        let field = |text: Option<&'s str>| text.map(|text| shorten(text, MAX_FIELD_BYTES, ascii_json_len));
        let started = status.state == State::Dispatched;
        let total = status.details.len().saturating_add(status.details_omitted);
        let mut line = ResultLine {
            state: status.state,
            failure: status.failure,
            exit_code: status.exit_code,
            phase: status.phase,
            target: field(status.target.as_deref().filter(|_| started)),
            job: field(status.job.as_deref().filter(|_| started)),
            recipe_sha256: field(status.recipe_sha256.as_deref()),
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
            inventory_sha256: field(status.inventory_sha256.as_deref()),
        };
        for d in status.details.iter().take(MAX_DETAILS) {
            let path = shorten(&d.path, MAX_PATH_BYTES, ascii_json_len);
            line.details.push(PathCode { path, code: shorten(&d.code, MAX_CODE_BYTES, ascii_json_len) });
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
                 \"phase\":\"validate\",\"target\":null,\"job\":null,\"recipe_sha256\":\"{}\",\"signer\":null,\
                 \"secure_boot\":null,\"details\":[{{\"path\":\"/partition_layout/0/size\",\"code\":\"pattern\"}}],\
                 \"details_omitted\":0,\"took_ms\":42,\"status_sha256\":\"{}\",\"disk\":null,\
                 \"inventory_sha256\":null}}\n",
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
        assert!(line.ends_with("\"status_sha256\":null,\"disk\":null,\"inventory_sha256\":null}\n"));
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
