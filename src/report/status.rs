//! The dispatcher's own record of a `run` (SPEC §5): `status.json` in the state directory,
//! written atomically, read by `report` and by the next `run` of the same boot. It holds
//! paths, codes, the schema's words and digests; never a recipe value.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::bmc;
use crate::failure::{Failure, Phase};
use crate::issues::Detail;
use crate::report::timings::Timings;
use crate::trust::Signer;

pub const FILE_NAME: &str = "status.json";

/// Room set aside in the state directory for the final status ([`Status::reserve`]).
const RESERVE_FILE: &str = ".status.reserve";

/// The most of a status file that is read: a failed run's status lists every detail, and a
/// hostile recipe's 16,384 values with long keys make it large, but never this large.
pub const MAX_STATUS_BYTES: u64 = 32 * 1024 * 1024;

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
    pub warnings: Vec<Detail>,
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
            warnings: Vec::new(),
            started_at,
            finished_at: None,
            timings_ms: Timings::default(),
            dispatch,
            bmc_event: None,
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
    /// digest).
    pub fn write(&self, state_dir: &Path) -> std::io::Result<Vec<u8>> {
        let _ = std::fs::remove_file(state_dir.join(RESERVE_FILE));
        let bytes = self.to_bytes();
        crate::atomic::write_file(state_dir, FILE_NAME, &bytes, 0o600)?;
        Ok(bytes)
    }

    /// Sets aside room in `state_dir` for a final status: a file of zeros as large as this
    /// status plus some slack, which the next [`Status::write`] deletes first. The boot path
    /// calls it before publishing outputs, so that once they are published the status can
    /// always say so (on a filesystem that has filled up meanwhile, too).
    pub fn reserve(&self, state_dir: &Path) -> std::io::Result<()> {
        let room = vec![0; self.to_bytes().len() + RESERVE_SLACK];
        crate::atomic::write_file(state_dir, RESERVE_FILE, &room, 0o600)
    }

    fn to_bytes(&self) -> Vec<u8> {
        let mut bytes = serde_json::to_vec_pretty(self).expect("a status serializes");
        bytes.push(b'\n');
        bytes
    }
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
        let status = Status::running("2026-11-21T21:38:16Z".into(), None);
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
        let status = Status::running("2026-11-21T21:38:16Z".into(), None);
        status.write(dir.path()).unwrap();
        assert_eq!(Status::read(&dir.path().join(FILE_NAME)).unwrap(), status);
    }
}
