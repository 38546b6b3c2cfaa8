//! The result line (SPEC §6b): `PROVISION-RESULT v1 ` and one compact JSON object of printable
//! ASCII, in one console write of at most [`MAX_LINE_BYTES`], repeated after a failure for a
//! controller that attaches late. Every boot ends in one: the dispatcher's (its `report`
//! module makes it from status.json), or, when the boot never reaches the root, the initrd's
//! ([`BootFailure::line`]: the same fields, phase `boot`).

use std::time::Duration;

pub const PREFIX: &str = "PROVISION-RESULT v1 ";

/// The most bytes of a whole line, its newline included: what one non-blocking write puts
/// whole into a console's buffer. A UART's takes about 4 KiB; a line of 66 KB (one 64 KiB
/// key) was cut on every write, so a controller read no result at all (issue 31).
pub const MAX_LINE_BYTES: usize = 4096;

/// How long after the previous line the next one comes: every 30 s in the first hour (a
/// controller attaching late finds it within half a minute), then every 5 minutes (a console
/// with a history is not flooded).
pub fn repeat_every(since_start: Duration) -> Duration {
    if since_start < Duration::from_secs(3600) {
        Duration::from_secs(30)
    } else {
        Duration::from_secs(300)
    }
}

/// The phase of the initrd's failures: before the dispatcher's first (`media`).
pub const BOOT_PHASE: &str = "boot";

/// Why the initrd's `/init` could not hand over to the root, so that no dispatcher ran. Each
/// owns its word, its exit code from the dispatcher's table (SPEC §2) and what an operator
/// does next; the dispatcher's `Failure` has each under the same word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BootFailure {
    /// No medium with the image's volume id and this build's marker within the wait. 66, as
    /// the dispatcher's task media not found after its wait: the medium is missing, late, or
    /// another build's.
    MediumNotFound,
    /// The medium was found, its images could not be read, copied into RAM or mounted. 66,
    /// as the dispatcher's `media_unmountable`: a medium damaged or cut on the way (a transfer
    /// over the BMC's link), which attaching it again can mend.
    LayersUnmountable,
    /// The layers were mounted, the root over them could not be made or started (the overlay,
    /// the switch, its init). 78: the image's own make-up (or `init=`) is wrong; attaching it
    /// again does not help, a new build does.
    RootUnusable,
    /// `/init` could not mount the kernel's own file systems (devtmpfs, proc, sysfs, tmpfs).
    /// 70, an internal error: the image's kernel has them all.
    SetupFailed,
}

impl BootFailure {
    pub const ALL: [BootFailure; 4] = [
        BootFailure::MediumNotFound,
        BootFailure::LayersUnmountable,
        BootFailure::RootUnusable,
        BootFailure::SetupFailed,
    ];

    /// The word of the result line's `failure`.
    pub fn word(self) -> &'static str {
        match self {
            BootFailure::MediumNotFound => "boot_medium_not_found",
            BootFailure::LayersUnmountable => "boot_layers_unmountable",
            BootFailure::RootUnusable => "boot_root_unusable",
            BootFailure::SetupFailed => "boot_setup_failed",
        }
    }

    pub fn exit_code(self) -> u8 {
        match self {
            BootFailure::MediumNotFound | BootFailure::LayersUnmountable => 66,
            BootFailure::RootUnusable => 78,
            BootFailure::SetupFailed => 70,
        }
    }

    /// What happened, in one sentence.
    pub fn summary(self) -> &'static str {
        match self {
            BootFailure::MediumNotFound => "The boot medium was not found.",
            BootFailure::LayersUnmountable => "The boot medium's images could not be mounted.",
            BootFailure::RootUnusable => "The maintenance OS's root could not be started.",
            BootFailure::SetupFailed => "The initrd could not mount the kernel's file systems.",
        }
    }

    /// What an operator does next.
    pub fn next_step(self) -> &'static str {
        match self {
            BootFailure::MediumNotFound => {
                "attach this build's maintenance ISO as virtual media (or allow it longer: maintenance.wait=SECS), then reset the server"
            }
            BootFailure::LayersUnmountable => {
                "the maintenance ISO could not be read whole: attach it again (a fresh copy if it is damaged), then reset the server"
            }
            BootFailure::RootUnusable => {
                "rebuild the maintenance ISO (and check init= on the kernel command line), then boot the new one"
            }
            BootFailure::SetupFailed => "this kernel and initrd do not belong together: rebuild the maintenance ISO",
        }
    }

    /// The result line, with its newline: the dispatcher's fields, those the initrd cannot know
    /// null or empty; `took_ms` is how long `/init` ran.
    pub fn line(self, took_ms: u64) -> String {
        format!(
            "{PREFIX}{{\"state\":\"failed\",\"failure\":\"{}\",\"exit_code\":{},\"phase\":\"{BOOT_PHASE}\",\
             \"target\":null,\"job\":null,\"recipe_sha256\":null,\"media\":null,\"signer\":null,\"secure_boot\":null,\
             \"details\":[],\"details_omitted\":0,\"took_ms\":{took_ms},\"status_sha256\":null,\"disk\":null,\"inventory_sha256\":null,\"end\":null}}\n",
            self.word(),
            self.exit_code()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_repeats_every_30_s_then_every_5_minutes() {
        assert_eq!(repeat_every(Duration::ZERO), Duration::from_secs(30));
        assert_eq!(repeat_every(Duration::from_secs(3599)), Duration::from_secs(30));
        assert_eq!(repeat_every(Duration::from_secs(3600)), Duration::from_secs(300));
    }

    #[test]
    fn each_failure_is_one_printable_line() {
        for failure in BootFailure::ALL {
            let line = failure.line(u64::MAX);
            let body = line.strip_suffix('\n').unwrap();
            assert!(body.starts_with(PREFIX) && !body.contains('\n'), "{line}");
            assert!(body.bytes().all(|b| (b' '..=b'~').contains(&b)), "{line}");
            assert!(line.len() <= MAX_LINE_BYTES);
            assert!(body.contains(&format!(
                "\"failure\":\"{}\",\"exit_code\":{},",
                failure.word(),
                failure.exit_code()
            )));
        }
        assert_eq!(
            BootFailure::MediumNotFound.line(120_431),
            "PROVISION-RESULT v1 {\"state\":\"failed\",\"failure\":\"boot_medium_not_found\",\"exit_code\":66,\
             \"phase\":\"boot\",\"target\":null,\"job\":null,\"recipe_sha256\":null,\"media\":null,\"signer\":null,\
             \"secure_boot\":null,\"details\":[],\"details_omitted\":0,\"took_ms\":120431,\"status_sha256\":null,\
             \"disk\":null,\"inventory_sha256\":null,\"end\":null}\n"
        );
    }
}
