//! Exit codes (sysexits, SPEC §2), decided in one place.

use std::process::ExitCode;

use crate::checks::Findings;

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
    /// 69 when the only problem is that systemd cannot load the target.
    pub fn of_findings(findings: &Findings) -> Exit {
        let mut errors = findings.errors().peekable();
        if errors.peek().is_none() {
            Exit::Ok
        } else if errors.all(|issue| issue.code == crate::checks::host::UNIT_NOT_FOUND) {
            Exit::Unavailable
        } else {
            Exit::Invalid
        }
    }
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> ExitCode {
        ExitCode::from(exit.code())
    }
}
