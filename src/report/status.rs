//! The dispatcher's own record of a `run` (SPEC §5): `status.json` in the state directory,
//! written atomically, read by `report` and by the next `run` of the same boot. It holds
//! paths, codes, the schema's words and digests; never a recipe value.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::failure::{Failure, Phase};
use crate::issues::Detail;
use crate::report::timings::Timings;

pub const FILE_NAME: &str = "status.json";

/// Room set aside in the state directory for the final status ([`Status::reserve`]).
const RESERVE_FILE: &str = ".status.reserve";

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
    pub details: Vec<Detail>,
    pub warnings: Vec<Detail>,
    pub started_at: String,
    pub finished_at: Option<String>,
    /// Where the run's time went, step by step.
    #[serde(default)]
    pub timings_ms: Timings,
    pub dispatch: Option<Dispatch>,
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
            details: Vec::new(),
            warnings: Vec::new(),
            started_at,
            finished_at: None,
            timings_ms: Timings::default(),
            dispatch,
        }
    }

    pub fn read(path: &Path) -> std::io::Result<Status> {
        let bytes = std::fs::read(path)?;
        serde_json::from_slice(&bytes).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
    }

    /// Writes `status.json` in `state_dir`, atomically, mode 0600, after giving back the room
    /// [`Status::reserve`] set aside.
    pub fn write(&self, state_dir: &Path) -> std::io::Result<()> {
        let _ = std::fs::remove_file(state_dir.join(RESERVE_FILE));
        crate::atomic::write_file(state_dir, FILE_NAME, &self.to_bytes(), 0o600)
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
    fn status_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let status = Status::running("2026-11-21T21:38:16Z".into(), None);
        status.write(dir.path()).unwrap();
        assert_eq!(Status::read(&dir.path().join(FILE_NAME)).unwrap(), status);
    }
}
