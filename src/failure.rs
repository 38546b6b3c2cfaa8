//! How things end: the kinds of [`Failure`], each owning its exit code (sysexits, SPEC §2),
//! the phase of the boot path it belongs to, the word reports and status.json use for it,
//! and what an operator does next. Exit codes are decided here and nowhere else.

use std::process::ExitCode;

use boot_io::result::BootFailure;
use serde::{Deserialize, Serialize};

use crate::issues::{Code, Findings};

/// Exit codes (sysexits).
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
    /// The task media is not signed by a key the image trusts (SPEC §6a).
    Untrusted = 77,
    /// The schema is unusable (missing, invalid, or an unsupported `$id`), or the image's
    /// own configuration is (the allowlist of targets, the trust file).
    Config = 78,
}

impl Exit {
    pub const ALL: [Exit; 9] = [
        Exit::Ok,
        Exit::Usage,
        Exit::Invalid,
        Exit::NotFound,
        Exit::Unavailable,
        Exit::Internal,
        Exit::CantWrite,
        Exit::Untrusted,
        Exit::Config,
    ];

    pub fn code(self) -> u8 {
        self as u8
    }

    pub fn from_code(code: u8) -> Option<Exit> {
        Exit::ALL.into_iter().find(|e| e.code() == code)
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
            Exit::Untrusted => "untrusted media",
            Exit::Config => "schema or trust file unusable",
        }
    }
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> ExitCode {
        ExitCode::from(exit.code())
    }
}

/// The steps of the boot path, in order (declared so: [`Phase::ALL`] is indexed by it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// The initrd's, before the root exists: its failures are its own (boot-io's
    /// `BootFailure`), in a result line of its own; the dispatcher never runs in it.
    Boot,
    Media,
    Mount,
    Schema,
    Recipe,
    Validate,
    Outputs,
    Systemd,
    Internal,
}

impl Phase {
    pub const ALL: [Phase; 9] = [
        Phase::Boot,
        Phase::Media,
        Phase::Mount,
        Phase::Schema,
        Phase::Recipe,
        Phase::Validate,
        Phase::Outputs,
        Phase::Systemd,
        Phase::Internal,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Phase::Boot => boot_io::result::BOOT_PHASE,
            Phase::Media => "media",
            Phase::Mount => "mount",
            Phase::Schema => "schema",
            Phase::Recipe => "recipe",
            Phase::Validate => "validate",
            Phase::Outputs => "outputs",
            Phase::Systemd => "systemd",
            Phase::Internal => "internal",
        }
    }
}

/// Why a command did not succeed. The serialized word is `check --format json`'s `"error"`
/// and status.json's `"failure"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Failure {
    /// No task media after the wait, two of them, or media that is not the one expected.
    MediaNotFound,
    /// The media carries another recipe than the kernel command line expects
    /// (`provision.recipe=`): a task ISO of an earlier job.
    StaleMedia,
    /// The media was found but could not be mounted or opened.
    MediaUnmountable,
    /// The image trusts signers, and the media's recipe or schema lacks a good signature by
    /// one of them.
    UntrustedMedia,
    /// The image's trust file (`allowed_signers`) cannot be read or parsed.
    TrustFileUnusable,
    /// The recipe (or, for `check`, the recipe file) cannot be read, or is not on the media.
    Unreadable,
    /// Larger than a cap: 8 MiB, or too many values. Never parsed whole.
    TooLarge,
    /// Not JSON: syntax, encoding, trailing data, nesting.
    InvalidJson,
    /// Parsed, but the checks found errors (duplicate keys included).
    ValidationError,
    /// The schema is missing, invalid, not draft-07 or of an unknown `$id`.
    SchemaError,
    /// A different recipe was already dispatched in this boot (and no `--force`).
    DifferentRecipe,
    /// The image's own configuration (the allowlist of targets) cannot be read or used.
    ImageConfig,
    /// The target unit does not load here.
    UnitNotLoadable,
    /// systemd could not be asked whether the target loads.
    SystemdUnavailable,
    /// systemd refused or did not answer the start.
    StartFailed,
    /// The outputs, or the status, cannot be written; or the output directory is not the
    /// dispatcher's to replace.
    OutputsUnwritable,
    /// A signal stopped the run.
    Stopped,
    /// The dispatcher ran out of memory.
    OutOfMemory,
    /// The command line cannot be used (`check --format json` still prints one object).
    Usage,
    /// A bug in the dispatcher (a panic).
    Bug,
    /// The initrd's failures (boot-io's `BootFailure`, which decides their words and exit
    /// codes): the boot never reached the root, so no dispatcher ran. Here so that every word
    /// a controller reads in a result line has one vocabulary.
    BootMediumNotFound,
    BootLayersUnmountable,
    BootRootUnusable,
    BootSetupFailed,
}

impl Failure {
    pub const ALL: [Failure; 24] = [
        Failure::MediaNotFound,
        Failure::StaleMedia,
        Failure::MediaUnmountable,
        Failure::UntrustedMedia,
        Failure::TrustFileUnusable,
        Failure::Unreadable,
        Failure::TooLarge,
        Failure::InvalidJson,
        Failure::ValidationError,
        Failure::SchemaError,
        Failure::DifferentRecipe,
        Failure::ImageConfig,
        Failure::UnitNotLoadable,
        Failure::SystemdUnavailable,
        Failure::StartFailed,
        Failure::OutputsUnwritable,
        Failure::Stopped,
        Failure::OutOfMemory,
        Failure::Usage,
        Failure::Bug,
        Failure::BootMediumNotFound,
        Failure::BootLayersUnmountable,
        Failure::BootRootUnusable,
        Failure::BootSetupFailed,
    ];

    /// The initrd's failure this is, if it is one of those.
    pub fn of_initrd(self) -> Option<BootFailure> {
        match self {
            Failure::BootMediumNotFound => Some(BootFailure::MediumNotFound),
            Failure::BootLayersUnmountable => Some(BootFailure::LayersUnmountable),
            Failure::BootRootUnusable => Some(BootFailure::RootUnusable),
            Failure::BootSetupFailed => Some(BootFailure::SetupFailed),
            _ => None,
        }
    }

    /// The word reports, status.json and the journal (`FAILURE=`) use.
    pub fn word(self) -> &'static str {
        match self {
            Failure::MediaNotFound => "media_not_found",
            Failure::StaleMedia => "stale_media",
            Failure::MediaUnmountable => "media_unmountable",
            Failure::UntrustedMedia => "untrusted_media",
            Failure::TrustFileUnusable => "trust_file_unusable",
            Failure::Unreadable => "unreadable",
            Failure::TooLarge => "too_large",
            Failure::InvalidJson => "invalid_json",
            Failure::ValidationError => "validation_error",
            Failure::SchemaError => "schema_error",
            Failure::DifferentRecipe => "different_recipe",
            Failure::ImageConfig => "image_config",
            Failure::UnitNotLoadable => "unit_not_loadable",
            Failure::SystemdUnavailable => "systemd_unavailable",
            Failure::StartFailed => "start_failed",
            Failure::OutputsUnwritable => "outputs_unwritable",
            Failure::Stopped => "stopped",
            Failure::OutOfMemory => "out_of_memory",
            Failure::Usage => "usage",
            Failure::Bug => "bug",
            Failure::BootMediumNotFound
            | Failure::BootLayersUnmountable
            | Failure::BootRootUnusable
            | Failure::BootSetupFailed => self.of_initrd().map_or("", BootFailure::word),
        }
    }

    pub fn exit(self) -> Exit {
        match self {
            Failure::MediaNotFound | Failure::StaleMedia | Failure::MediaUnmountable | Failure::Unreadable => {
                Exit::NotFound
            }
            Failure::TooLarge | Failure::InvalidJson | Failure::ValidationError => Exit::Invalid,
            Failure::SchemaError | Failure::ImageConfig | Failure::TrustFileUnusable => Exit::Config,
            Failure::UntrustedMedia => Exit::Untrusted,
            Failure::UnitNotLoadable | Failure::SystemdUnavailable | Failure::StartFailed => Exit::Unavailable,
            Failure::DifferentRecipe | Failure::OutputsUnwritable => Exit::CantWrite,
            Failure::Stopped | Failure::OutOfMemory | Failure::Bug => Exit::Internal,
            Failure::Usage => Exit::Usage,
            // Decided by the initrd's table, among the codes of this one (a test holds them so).
            Failure::BootMediumNotFound
            | Failure::BootLayersUnmountable
            | Failure::BootRootUnusable
            | Failure::BootSetupFailed => {
                self.of_initrd().and_then(|boot| Exit::from_code(boot.exit_code())).unwrap_or(Exit::Internal)
            }
        }
    }

    /// The phase of the boot path it belongs to (a stop belongs to the phase it came in).
    pub fn phase(self) -> Phase {
        match self {
            Failure::MediaNotFound | Failure::StaleMedia | Failure::UntrustedMedia | Failure::TrustFileUnusable => {
                Phase::Media
            }
            Failure::MediaUnmountable => Phase::Mount,
            Failure::SchemaError => Phase::Schema,
            Failure::Unreadable | Failure::TooLarge | Failure::InvalidJson | Failure::DifferentRecipe => Phase::Recipe,
            Failure::ValidationError
            | Failure::UnitNotLoadable
            | Failure::SystemdUnavailable
            | Failure::ImageConfig => Phase::Validate,
            Failure::OutputsUnwritable => Phase::Outputs,
            Failure::StartFailed => Phase::Systemd,
            Failure::Stopped | Failure::OutOfMemory | Failure::Bug | Failure::Usage => Phase::Internal,
            Failure::BootMediumNotFound
            | Failure::BootLayersUnmountable
            | Failure::BootRootUnusable
            | Failure::BootSetupFailed => Phase::Boot,
        }
    }

    /// The one-line summary of `check`'s JSON report (`"message"`).
    pub fn summary(self) -> &'static str {
        match self {
            Failure::InvalidJson => "Recipe is not valid JSON.",
            Failure::TooLarge => "Recipe is too large.",
            Failure::ValidationError => "Recipe failed validation.",
            Failure::Unreadable => "Recipe cannot be read.",
            Failure::SchemaError => "Schema cannot be used.",
            Failure::OutOfMemory => "The dispatcher ran out of memory.",
            Failure::MediaNotFound => "Task media not found.",
            Failure::StaleMedia => "The task media is not this boot's.",
            Failure::MediaUnmountable => "Task media cannot be mounted.",
            Failure::UntrustedMedia => "The task media is not signed by a trusted key.",
            Failure::TrustFileUnusable => "The trust file cannot be used.",
            Failure::DifferentRecipe => "A different recipe was already dispatched.",
            Failure::ImageConfig => "The image's configuration cannot be used.",
            Failure::UnitNotLoadable => "The target unit does not load.",
            Failure::SystemdUnavailable => "systemd cannot be asked.",
            Failure::StartFailed => "systemd did not start the target.",
            Failure::OutputsUnwritable => "Outputs cannot be written.",
            Failure::Stopped => "Stopped by a signal.",
            Failure::Usage => "The command line cannot be used.",
            Failure::Bug => "The dispatcher failed (a bug).",
            Failure::BootMediumNotFound
            | Failure::BootLayersUnmountable
            | Failure::BootRootUnusable
            | Failure::BootSetupFailed => self.of_initrd().map_or("", BootFailure::summary),
        }
    }

    /// What an operator does next, for the console banner.
    pub fn next_step(self) -> &'static str {
        match self {
            Failure::MediaNotFound => {
                "attach exactly one task ISO (volume id TASK) as virtual media, the one this job expects, then reboot or rerun the dispatcher"
            }
            Failure::StaleMedia => {
                "the task ISO attached carries another recipe than this boot expects (provision.recipe=): eject it and attach this job's task ISO"
            }
            Failure::MediaUnmountable => {
                "the task ISO could not be mounted: rebuild it on the controller and attach it again"
            }
            Failure::UntrustedMedia => {
                "sign both files again with a key the image trusts (ssh-keygen -Y sign -n provision-dispatcher) and attach the new task ISO"
            }
            Failure::TrustFileUnusable => {
                "the image's /etc/provision-dispatcher/allowed_signers cannot be read or parsed: fix it in the image"
            }
            Failure::Unreadable => "the ISO has no readable recipe.json: rebuild it on the controller",
            Failure::TooLarge | Failure::InvalidJson | Failure::ValidationError => {
                "fix the fields above in the recipe on the controller, then attach the new task ISO"
            }
            Failure::SchemaError => {
                "update the maintenance-OS image if the ISO's schema is newer than it knows; else rebuild the ISO with a usable schema"
            }
            Failure::DifferentRecipe => {
                "a different recipe already ran in this boot: reboot to run the new one, or rerun with --force"
            }
            Failure::ImageConfig => {
                "the image's /etc/provision-dispatcher configuration is unusable: fix the image (or its --allowed-targets)"
            }
            Failure::UnitNotLoadable | Failure::SystemdUnavailable => {
                "the image has no such target unit, or systemd did not answer over the system bus: check the image's units and its dbus"
            }
            Failure::StartFailed => "systemd refused or did not answer: check the target unit and the system bus",
            Failure::OutputsUnwritable => {
                "the outputs could not be written: check that /run is writable, has room, and that the output directory is the dispatcher's"
            }
            Failure::Stopped => "the dispatcher was stopped before it finished: reboot or rerun it",
            Failure::OutOfMemory => "the dispatcher ran out of memory: give the maintenance OS more RAM, or report this",
            Failure::Usage => "see provision-dispatcher --help",
            Failure::Bug => "report this failure with the journal of provision-dispatcher.service",
            Failure::BootMediumNotFound
            | Failure::BootLayersUnmountable
            | Failure::BootRootUnusable
            | Failure::BootSetupFailed => self.of_initrd().map_or("", BootFailure::next_step),
        }
    }

    /// What an operator does next after this failure, whose first detail has `code`: a
    /// refusal of the media says what to do for its cause; any other, the failure's step.
    pub fn next_step_for(self, code: Option<&str>) -> &'static str {
        code.and_then(Code::media).and_then(media_step).unwrap_or(self.next_step())
    }

    /// The failure the checks' errors mean, if any: the target not loading (or systemd not
    /// answering) is 69 when it is the only trouble, since the recipe may be fine on another
    /// image; anything else about the recipe's values is 65.
    pub fn of_findings(findings: &Findings) -> Option<Failure> {
        let mut codes = findings.errors().map(|issue| issue.code).peekable();
        codes.peek()?;
        let codes: Vec<Code> = codes.collect();
        Some(if codes.iter().all(|&c| c == Code::UnitNotFound) {
            Failure::UnitNotLoadable
        } else if codes.iter().all(|&c| matches!(c, Code::UnitNotFound | Code::SystemdUnavailable)) {
            Failure::SystemdUnavailable
        } else {
            Failure::ValidationError
        })
    }
}

/// What to do for one cause of a refusal of the media; `None` where the failure's own step
/// says it (the trust file, the allowlist, stale media).
fn media_step(code: Code) -> Option<&'static str> {
    Some(match code {
        Code::SignatureMissing => {
            "sign recipe.json and recipe.schema.json (ssh-keygen -Y sign -n provision-dispatcher) and put both .sig files on the task ISO"
        }
        Code::NotASignature => {
            "the .sig named above is not an SSH signature: sign again with ssh-keygen -Y sign and copy the .sig to the ISO as it is"
        }
        Code::UnknownKey => {
            "sign with a key the image's allowed_signers holds, or add the key of the fingerprint above to the image's trust file"
        }
        Code::BadSignature => {
            "the file changed after it was signed, or has another file's .sig: sign the files exactly as they go on the task ISO"
        }
        Code::WrongNamespace => {
            "sign with -n provision-dispatcher, or with -n provision-dispatcher@UUID, this server's SMBIOS UUID"
        }
        Code::NamespaceNotAllowed => {
            "the trust file's namespaces= does not let this key sign in the namespace above: sign in one its line allows"
        }
        Code::BoundToOtherMachine => {
            "the ISO is signed for another server: check that it went to the right server, or sign it for this one's UUID (above)"
        }
        Code::MachineUuidUnreadable => {
            "this server's SMBIOS UUID cannot be read: sign the recipe unbound (-n provision-dispatcher), or fix its firmware"
        }
        Code::MachineWithoutIdentity => {
            "this server's SMBIOS UUID means no identity: set one in its firmware, or sign the recipe unbound (-n provision-dispatcher)"
        }
        Code::SchemaMissing => {
            "the task ISO has no recipe.schema.json: rebuild it with the schema of the recipe's version beside recipe.json"
        }
        Code::SchemaUnreadable => {
            "recipe.schema.json on the ISO is not a regular file of at most 1 MiB: rebuild the ISO with the schema itself"
        }
        Code::SchemaInvalid => {
            "the ISO's recipe.schema.json is not a usable draft-07 schema: rebuild the ISO with a version this image knows"
        }
        Code::UnknownSchemaId => {
            "the ISO's schema is of a version this image does not know: update the maintenance-OS image, or send a version it knows (above)"
        }
        Code::SchemaTooComplex => {
            "the ISO's schema is too complex for the dispatcher's bounds: rebuild the ISO with a version this image knows"
        }
        Code::ExpectedRecipeMalformed => {
            "provision.recipe= on the kernel command line takes sha256: and 64 hex digits: fix the boot entry the controller writes"
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::issues::Issue;

    #[test]
    fn findings_decide_between_65_and_69() {
        let findings =
            |codes: &[Code]| Findings { issues: codes.iter().map(|&c| Issue::error("/x", c, "m")).collect() };
        assert_eq!(Failure::of_findings(&findings(&[])), None);
        assert_eq!(
            Failure::of_findings(&Findings { issues: vec![Issue::warning("/x", Code::PercentNotLast, "w")] }),
            None
        );
        assert_eq!(Failure::of_findings(&findings(&[Code::UnitNotFound])), Some(Failure::UnitNotLoadable));
        assert_eq!(
            Failure::of_findings(&findings(&[Code::SystemdUnavailable])).map(Failure::exit),
            Some(Exit::Unavailable)
        );
        assert_eq!(
            Failure::of_findings(&findings(&[Code::UnitNotFound, Code::DiskNotFound])),
            Some(Failure::ValidationError)
        );
    }

    #[test]
    fn words_are_the_reports_words() {
        for failure in Failure::ALL {
            assert_eq!(serde_json::to_string(&failure).unwrap(), format!("\"{}\"", failure.word()));
        }
        assert_eq!(Failure::ValidationError.word(), "validation_error");
        assert_eq!(Exit::from_code(73), Some(Exit::CantWrite));
    }

    /// The initrd's failures (issue 40, finding 5) are in the vocabulary, with the word, the
    /// exit code of the table and the phase the initrd writes.
    #[test]
    fn the_initrds_failures_are_words_of_the_dispatchers_table() {
        for boot in BootFailure::ALL {
            let failure: Failure = serde_json::from_value(boot.word().into()).unwrap();
            assert_eq!(failure.of_initrd(), Some(boot));
            assert_eq!(Some(failure.exit()), Exit::from_code(boot.exit_code()), "{failure:?}: a code of the table");
            assert_eq!(failure.phase(), Phase::Boot);
            assert_eq!(failure.next_step(), boot.next_step());
        }
        assert_eq!(serde_json::from_value::<Phase>("boot".into()).unwrap(), Phase::Boot);
        assert!(Phase::ALL.iter().enumerate().all(|(i, &phase)| phase as usize == i), "ALL in declaration order");
    }
}
