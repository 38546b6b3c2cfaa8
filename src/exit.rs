//! Exit codes (sysexits, SPEC §2), decided in one place.

use std::process::ExitCode;

use crate::checks::Findings;
use crate::report::status::Phase;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Ok = 0,
    /// Bad command line.
    Usage = 64,
    /// The recipe is not valid: parse, schema, safety rule, or a host check on its values.
    Invalid = 65,
    /// No media, or no recipe on it (after the wait).
    NotFound = 66,
    /// systemd unavailable, the unit not loadable, or the start refused.
    Unavailable = 69,
    /// A bug or an unexpected condition of the dispatcher itself.
    Internal = 70,
    /// The outputs or the status cannot be written.
    CantWrite = 73,
    /// The schema is unusable: missing, invalid, or an unsupported `$id`.
    Config = 78,
}

impl Exit {
    pub fn code(self) -> u8 {
        self as u8
    }

    /// The exit code for what the checks found: 65 for any problem with the recipe's values,
    /// 69 when the only problems are that systemd cannot load the target or cannot be asked.
    pub fn of_findings(findings: &Findings) -> Exit {
        use crate::checks::host::{SYSTEMD_UNAVAILABLE, UNIT_NOT_FOUND};
        let mut errors = findings.errors().peekable();
        if errors.peek().is_none() {
            Exit::Ok
        } else if errors.all(|issue| issue.code == UNIT_NOT_FOUND || issue.code == SYSTEMD_UNAVAILABLE) {
            Exit::Unavailable
        } else {
            Exit::Invalid
        }
    }
}

impl Exit {
    /// The exit code of an operational failure in `phase` (the recipe phase also fails with 65
    /// for content, decided where it is read).
    pub fn of_phase(phase: Phase) -> Exit {
        match phase {
            Phase::Media | Phase::Mount | Phase::Recipe => Exit::NotFound,
            Phase::Schema => Exit::Config,
            Phase::Validate => Exit::Invalid,
            Phase::Outputs => Exit::CantWrite,
            Phase::Systemd => Exit::Unavailable,
            Phase::Internal => Exit::Internal,
        }
    }

    /// What the code means, in a few words.
    pub fn meaning(self) -> &'static str {
        match self {
            Exit::Ok => "ok",
            Exit::Usage => "usage error",
            Exit::Invalid => "recipe invalid",
            Exit::NotFound => "media or recipe not found",
            Exit::Unavailable => "systemd unavailable or unit not loadable",
            Exit::Internal => "internal error",
            Exit::CantWrite => "cannot write outputs",
            Exit::Config => "schema unusable",
        }
    }

    pub fn from_code(code: u8) -> Option<Exit> {
        [
            Exit::Ok,
            Exit::Usage,
            Exit::Invalid,
            Exit::NotFound,
            Exit::Unavailable,
            Exit::Internal,
            Exit::CantWrite,
            Exit::Config,
        ]
        .into_iter()
        .find(|e| e.code() == code)
    }
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> ExitCode {
        ExitCode::from(exit.code())
    }
}
