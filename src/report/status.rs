//! The dispatcher's own record of a `run` (SPEC §5): `status.json` in the state directory,
//! written atomically, read by `report` and by the next `run` of the same boot. It holds
//! paths, codes, the schema's words and digests; never a recipe value.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::bmc;
use crate::disks::verdict::Listed;
use crate::disks::Identity;
use crate::failure::{Failure, Phase};
use crate::issues::{shortened, Detail, MAX_PATH_BYTES};
use crate::report::timings::Timings;
use crate::trust::Signer;

pub const FILE_NAME: &str = "status.json";

/// Room set aside in the state directory for the final status ([`Status::reserve`]).
const RESERVE_FILE: &str = ".status.reserve";

/// The most of a status file that is read: more than the largest status [`Status::write`]
/// can write (every string and list at its bound, about 0.8 MiB; a test builds it), and little
/// enough that `report` reads it well within `provision-failed.service`'s `MemoryMax=32M`.
pub const MAX_STATUS_BYTES: u64 = 2 * 1024 * 1024;

/// The most details, and the most warnings, status.json keeps: the first ones in the recipe's
/// order, with a count of the rest (`details_omitted`, `warnings_omitted`). More than any recipe
/// of a real shape draws (64 partitions of a few fields each); `check` on the recipe lists
/// every one. A hostile recipe's 16,384 values draw as many details.
pub const MAX_KEPT: usize = 256;

/// The most bytes of each string of a status in the dispatcher's words or the machine's (the
/// message, the media, the schema's `$id`, the job, a signer), counted as escaped JSON
/// (`issues::ascii_json_len`): longer ones are shortened in the middle with a marker
/// (`issues::shorten`). No real one comes near.
pub const MAX_FIELD_BYTES: usize = 4096;

/// The most bytes of a detail's message (the schema's words in one message are already at
/// most 300 characters) and of its code.
const MAX_MESSAGE_BYTES: usize = 1024;
const MAX_CODE_BYTES: usize = 64;

/// How much larger than the status at the time of [`Status::reserve`] the final one may grow:
/// the job path, the dispatch record, a failure message.
const RESERVE_SLACK: usize = 8 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// Under way (written first, so a run killed outright still leaves a trace).
    Running,
    /// The target's start job was queued.
    Dispatched,
    /// Outputs written, nothing started (`run --no-start`).
    Rendered,
    Failed,
}

/// What was dispatched in this boot: a rerun compares its recipe's digest with this.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dispatch {
    pub recipe_sha256: String,
    pub target: String,
    /// None: the start was requested but its outcome is unknown (no reply came).
    pub job: Option<String>,
    pub at: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Status {
    pub state: State,
    /// What failed: the kind of failure, and the phase it happened in.
    #[serde(default)]
    pub failure: Option<Failure>,
    pub phase: Option<Phase>,
    pub exit_code: u8,
    /// One line in the dispatcher's words.
    pub message: String,
    /// The media as found (a device or file path), when found.
    pub media: Option<String>,
    pub schema_id: Option<String>,
    /// The recipe's target, once the recipe passed validation.
    pub target: Option<String>,
    /// The start job's object path.
    pub job: Option<String>,
    pub recipe_sha256: Option<String>,
    /// Who signed the media (SPEC §6a); null without a trust file.
    #[serde(default)]
    pub signature: Option<Signer>,
    /// The firmware's Secure Boot state; null where the firmware is not UEFI.
    #[serde(default)]
    pub secure_boot: Option<bool>,
    /// The kernel's lockdown mode (`none`, `integrity`, `confidentiality`); null without one.
    #[serde(default)]
    pub lockdown: Option<String>,
    pub details: Vec<Detail>,
    /// How many details were left out of `details` beyond the first [`MAX_KEPT`].
    #[serde(default)]
    pub details_omitted: usize,
    pub warnings: Vec<Detail>,
    #[serde(default)]
    pub warnings_omitted: usize,
    pub started_at: String,
    pub finished_at: Option<String>,
    /// Where the run's time went, step by step.
    #[serde(default)]
    pub timings_ms: Timings,
    pub dispatch: Option<Dispatch>,
    /// What became of the event for the BMC's System Event Log (SPEC §6b); `null` when none
    /// was sent (a run that started nothing and did not fail).
    #[serde(default)]
    pub bmc_event: Option<bmc::Outcome>,
    /// The consoles the kernel writes to (`ttyS0`, `tty0`): the result line's readers. None
    /// serial means a controller reading serial-over-LAN learns nothing.
    #[serde(default)]
    pub consoles: Vec<String>,
    /// The disk `target_disk` resolved to, as the machine identifies it (SPEC §4a); `null`
    /// when none was resolved.
    #[serde(default)]
    pub disk: Option<Identity>,
    /// Every whole disk of the machine and what the dispatcher thinks of it, when a check of
    /// the target disk failed: which disk is which, for the operator.
    #[serde(default)]
    pub disks: Vec<Listed>,
    /// The SHA-256 of the machine's inventory as this run prints it before its result line
    /// (SPEC §6b): the digest its `PROVISION-INVENTORY v1` lines carry.
    #[serde(default)]
    pub inventory_sha256: Option<String>,
}

impl Status {
    pub fn running(started_at: String, dispatch: Option<Dispatch>) -> Status {
        Status {
            state: State::Running,
            failure: None,
            phase: None,
            exit_code: 0,
            message: "running".into(),
            media: None,
            schema_id: None,
            target: None,
            job: None,
            recipe_sha256: None,
            signature: None,
            secure_boot: None,
            lockdown: None,
            details: Vec::new(),
            details_omitted: 0,
            warnings: Vec::new(),
            warnings_omitted: 0,
            started_at,
            finished_at: None,
            timings_ms: Timings::default(),
            dispatch,
            bmc_event: None,
            consoles: Vec::new(),
            disk: None,
            disks: Vec::new(),
            inventory_sha256: None,
        }
    }

    /// Reads a status file: a regular file (not a FIFO, a device or a symlink), capped.
    pub fn read(path: &Path) -> std::io::Result<Status> {
        Ok(Status::read_bytes(path)?.0)
    }

    /// The status and the bytes it was read from (a regular file, capped).
    pub fn read_bytes(path: &Path) -> std::io::Result<(Status, Vec<u8>)> {
        let bytes = crate::files::read_regular(path, MAX_STATUS_BYTES)?;
        let status =
            serde_json::from_slice(&bytes).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
        Ok((status, bytes))
    }

    /// Removes the temporary files of status writes that a run killed outright (SIGKILL)
    /// left in `state_dir`. Only under the state lock: then no other run is writing.
    pub fn remove_leftovers(state_dir: &Path) {
        crate::atomic::remove_temporaries(state_dir, &[FILE_NAME, RESERVE_FILE]);
    }

    /// Writes `status.json` in `state_dir`, atomically, mode 0600, after giving back the room
    /// [`Status::reserve`] set aside. Returns the bytes written (the result line carries their
    /// digest). The status is [`bound`](Status::bound) first: what is written is what it
    /// holds.
    pub fn write(&mut self, state_dir: &Path) -> std::io::Result<Vec<u8>> {
        let _ = std::fs::remove_file(state_dir.join(RESERVE_FILE));
        self.bound();
        let bytes = self.to_bytes();
        crate::atomic::write_file(state_dir, FILE_NAME, &bytes, 0o600)?;
        Ok(bytes)
    }

    /// Sets aside room in `state_dir` for a final status: a file of zeros as large as this
    /// status plus some slack, which the next [`Status::write`] deletes first. The boot path
    /// calls it before publishing outputs, so that once they are published the status can
    /// always say so (on a filesystem that has filled up meanwhile, too).
    pub fn reserve(&mut self, state_dir: &Path) -> std::io::Result<()> {
        self.bound();
        let room = vec![0; self.to_bytes().len() + RESERVE_SLACK];
        crate::atomic::write_file(state_dir, RESERVE_FILE, &room, 0o600)
    }

    /// Bounds what the status holds, so that any status a run writes can be read back by
    /// `report` under the failure unit's memory limit: at most [`MAX_KEPT`] details and as
    /// many warnings (the first, in the recipe's order; the rest counted), every string at
    /// most [`MAX_FIELD_BYTES`], a detail's path at most [`MAX_PATH_BYTES`], its message at
    /// most 1 KiB. A recipe of 67 KB (a 64 KiB key over 250 repeated keys) made a 16 MiB
    /// status that `report` could not read there (issue 31).
    pub fn bound(&mut self) {
        for (details, omitted) in
            [(&mut self.details, &mut self.details_omitted), (&mut self.warnings, &mut self.warnings_omitted)]
        {
            if details.len() > MAX_KEPT {
                *omitted = omitted.saturating_add(details.len() - MAX_KEPT);
                details.truncate(MAX_KEPT);
            }
            for d in details.iter_mut() {
                cut(&mut d.path, MAX_PATH_BYTES);
                cut(&mut d.message, MAX_MESSAGE_BYTES);
                cut(&mut d.code, MAX_CODE_BYTES);
            }
        }
        let mut fields: Vec<&mut String> = vec![&mut self.message, &mut self.started_at];
        let optional = [&mut self.media, &mut self.schema_id, &mut self.target, &mut self.job];
        fields.extend(
            optional.into_iter().chain([&mut self.recipe_sha256, &mut self.lockdown, &mut self.finished_at]).flatten(),
        );
        if let Some(signer) = &mut self.signature {
            fields.extend([&mut signer.principal, &mut signer.fingerprint, &mut signer.namespace]);
        }
        if let Some(dispatch) = &mut self.dispatch {
            fields.extend([&mut dispatch.recipe_sha256, &mut dispatch.target, &mut dispatch.at]);
            fields.extend(&mut dispatch.job);
        }
        for field in fields {
            cut(field, MAX_FIELD_BYTES);
        }
    }

    fn to_bytes(&self) -> Vec<u8> {
        let mut bytes = serde_json::to_vec_pretty(self).expect("a status serializes");
        bytes.push(b'\n');
        bytes
    }
}

/// `text` in at most `max` bytes as escaped JSON, shortened in the middle with a marker.
fn cut(text: &mut String, max: usize) {
    *text = shortened(std::mem::take(text), max);
}

/// RFC 3339 in UTC, to the second: `2026-11-21T21:38:16Z`.
pub fn timestamp(time: SystemTime) -> String {
    let secs = time.duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", rest / 3600, rest % 3600 / 60, rest % 60)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn timestamps_are_rfc3339_utc() {
        assert_eq!(timestamp(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        assert_eq!(timestamp(UNIX_EPOCH + Duration::from_secs(951_782_400)), "2000-02-29T00:00:00Z");
        assert_eq!(timestamp(UNIX_EPOCH + Duration::from_secs(1_795_297_096)), "2026-11-21T21:38:16Z");
    }

    #[test]
    fn the_reserve_is_given_back_by_the_next_write() {
        let dir = tempfile::tempdir().unwrap();
        let mut status = Status::running("2026-11-21T21:38:16Z".into(), None);
        status.write(dir.path()).unwrap();
        status.reserve(dir.path()).unwrap();
        let reserved = std::fs::metadata(dir.path().join(RESERVE_FILE)).unwrap().len() as usize;
        assert!(reserved > status.to_bytes().len() + RESERVE_SLACK - 1);
        status.write(dir.path()).unwrap();
        assert!(!dir.path().join(RESERVE_FILE).exists());
    }

    #[test]
    fn leftovers_of_killed_runs_are_removed_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let names = [".status.json.tmp-4242", "..status.reserve.tmp-4243", "status.json", "lock", ".status.json.tmp-x"];
        for name in names {
            std::fs::write(dir.path().join(name), "").unwrap();
        }
        Status::remove_leftovers(dir.path());
        let mut left: Vec<String> =
            std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        left.sort();
        assert_eq!(left, [".status.json.tmp-x", "lock", "status.json"]);
    }

    #[test]
    fn status_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let mut status = Status::running("2026-11-21T21:38:16Z".into(), None);
        status.write(dir.path()).unwrap();
        assert_eq!(Status::read(&dir.path().join(FILE_NAME)).unwrap(), status);
    }

    /// Issue 31, finding 5: 250 details under one 64 KiB key made a 16 MiB status.
    #[test]
    fn a_written_status_is_bounded_and_counts_what_it_left_out() {
        let dir = tempfile::tempdir().unwrap();
        let mut status = Status::running("2026-11-21T21:38:16Z".into(), None);
        let key = "k".repeat(64 * 1024);
        let detail = |i: usize| Detail {
            path: format!("/{key}/{i}"),
            code: "duplicateKey".into(),
            message: "repeats a key of its object".into(),
            line: 1,
            column: i + 1,
        };
        status.details = (0..1000).map(detail).collect();
        status.warnings = (0..3).map(detail).collect();
        status.message = "m".repeat(1 << 20);
        let written = status.write(dir.path()).unwrap();
        assert!(written.len() < 200 * 1024, "{} bytes", written.len());
        let read = Status::read(&dir.path().join(FILE_NAME)).unwrap();
        assert_eq!(read, status, "what is written is what the status holds");
        assert_eq!((read.details.len(), read.details_omitted), (MAX_KEPT, 1000 - MAX_KEPT));
        assert_eq!((read.warnings.len(), read.warnings_omitted), (3, 0));
        assert_eq!(read.details[0].column, 1, "the first ones are kept");
        assert!(read
            .details
            .iter()
            .all(|d| d.path.len() <= MAX_PATH_BYTES && d.path.ends_with(&format!("k/{}", d.column - 1))));
        assert!(read.message.len() <= MAX_FIELD_BYTES && read.message.contains(" bytes cut)"));
    }
}
