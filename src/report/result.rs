//! The result line (SPEC §6b): `PROVISION-RESULT v1 ` and one compact JSON object, for
//! controllers reading the serial console (serial-over-LAN) or the screen. Made from the
//! status as written, so that it and status.json never disagree; `status_sha256` proves which
//! status it was made from.

use std::io::Write;
use std::path::Path;

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::failure::{Failure, Phase};
use crate::report::console;
use crate::report::status::{State, Status};

pub const PREFIX: &str = "PROVISION-RESULT v1 ";

/// At most this many details: the line stays short enough for any console buffer.
pub const MAX_DETAILS: usize = 16;

/// Field order as in SPEC §6b.
#[derive(Debug, Serialize)]
pub struct ResultLine<'s> {
    pub state: State,
    pub failure: Option<Failure>,
    pub exit_code: u8,
    pub phase: Option<Phase>,
    /// A recipe value, but one that passed validation as a unit name: the run records it only
    /// then.
    pub target: Option<&'s str>,
    pub job: Option<&'s str>,
    pub recipe_sha256: Option<&'s str>,
    pub signer: Option<&'s str>,
    pub secure_boot: Option<bool>,
    pub details: Vec<PathCode<'s>>,
    pub took_ms: Option<u64>,
    pub status_sha256: Option<String>,
}

/// A detail, as a pointer and a code only: never the message, which the line has no room for.
#[derive(Debug, Serialize)]
pub struct PathCode<'s> {
    pub path: &'s str,
    pub code: &'s str,
}

impl<'s> ResultLine<'s> {
    /// The result of `status`, whose status.json holds `written` (`None`: it could not be
    /// written).
    pub fn new(status: &'s Status, written: Option<&[u8]>) -> ResultLine<'s> {
        ResultLine {
            state: status.state,
            failure: status.failure,
            exit_code: status.exit_code,
            phase: status.phase,
            target: status.target.as_deref(),
            job: status.job.as_deref(),
            recipe_sha256: status.recipe_sha256.as_deref(),
            signer: status.signature.as_ref().map(|s| s.fingerprint.as_str()),
            secure_boot: status.secure_boot,
            details: status
                .details
                .iter()
                .take(MAX_DETAILS)
                .map(|d| PathCode { path: &d.path, code: &d.code })
                .collect(),
            took_ms: status.timings_ms.total.map(|ms| ms.round() as u64),
            status_sha256: written.map(|bytes| hex(&Sha256::digest(bytes))),
        }
    }

    /// The JSON object alone, on one line (`report --format json`).
    pub fn json(&self) -> String {
        // serde_json escapes every control character, so a key in a path cannot break the line.
        serde_json::to_string(self).expect("a result serializes")
    }

    /// The whole line, with its newline: written in one piece, it never splits.
    pub fn line(&self) -> String {
        format!("{PREFIX}{}\n", self.json())
    }
}

/// Ends a run: the result line on stdout (the journal, under the unit) and, with `consoles`,
/// on every console the kernel writes to.
pub fn announce(status: &Status, written: Option<&[u8]>, consoles: bool) {
    let line = ResultLine::new(status, written).line();
    let _ = std::io::stdout().write_all(line.as_bytes());
    if consoles {
        console::write_all_consoles(&console::active(Path::new(console::ACTIVE)), line.as_bytes());
    }
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
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
                 \"took_ms\":42,\"status_sha256\":\"{}\"}}\n",
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
        assert!(!line.contains("must match"), "{line}");
        assert_eq!(line.matches('\n').count(), 1, "one line");
        assert!(line.ends_with("\"status_sha256\":null}\n"));
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
}
