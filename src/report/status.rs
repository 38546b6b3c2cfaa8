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
use crate::systemd::task::Shutdown;
use crate::trust::Signer;

pub const FILE_NAME: &str = "status.json";

/// Room set aside in the state directory for the final status ([`Status::reserve`]).
const RESERVE_FILE: &str = ".status.reserve";

/// The most of a status file that is read: more than the largest status [`Status::write`]
/// can write (every string and list at its bound, the machine's disks at theirs; tests/hostile31.rs
/// builds it), and little
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

/// The most `$id`s a detail names as those the image knows: more than it compiles in.
const MAX_KNOWN: usize = 4;
/// The most bytes the machine's disks take in a status as written (`disks`, after a failed
/// check of the target disk): about 460 disks of a real machine, the ones that matter first;
/// the others are counted (`disks_omitted`). 4,000 disks took 2.2 MB, more than is read back
/// (issue 40).
pub const MAX_DISKS_BYTES: usize = 256 * 1024;

/// How much larger than the status at the time of [`Status::reserve`] the final one may grow:
/// the job path, the dispatch record, a failure message.
const RESERVE_SLACK: usize = 8 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// Under way (written first, so a run killed outright still leaves a trace).
    Running,
    /// The target's start job was queued.
    Dispatched,
    /// Outputs written, nothing started (`run --no-start`).
    Rendered,
    Failed,
    /// The dispatched task ended (SPEC §6d, told by `follow`): the target's start job done and
    /// none of the units it pulls in failed.
    Succeeded,
    /// The task ended, and the target's start job did not succeed or a unit it pulls in failed.
    TaskFailed,
    /// The task's deadline passed before its end; it was left running, and a later end is
    /// told too.
    TimedOut,
    /// The server began to shut down before the task's end, or the follower was stopped.
    Interrupted,
}

impl State {
    pub const ALL: [State; 8] = [
        State::Running,
        State::Dispatched,
        State::Rendered,
        State::Failed,
        State::Succeeded,
        State::TaskFailed,
        State::TimedOut,
        State::Interrupted,
    ];

    /// Whether the target was started: the states of a dispatch and of its end.
    pub fn started(self) -> bool {
        matches!(self, State::Dispatched | State::Succeeded | State::TaskFailed | State::TimedOut | State::Interrupted)
    }

    /// Whether the state tells the task's end for good: nothing follows it.
    pub fn is_end(self) -> bool {
        matches!(self, State::Succeeded | State::TaskFailed | State::Interrupted)
    }
}

/// The most units an end names in status.json (the rest counted in `units_omitted`): more
/// than any target pulls in directly.
pub const MAX_END_UNITS: usize = 64;

/// The most bytes of a unit name as written: systemd's own limit is 255 characters
/// (`UNIT_NAME_MAX`), which escaped JSON can make longer.
pub const MAX_UNIT_BYTES: usize = 256;

/// How the dispatched task ended, as `follow` told it (SPEC §6d). `state` says which end.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct End {
    /// When it was told (RFC 3339, UTC).
    pub at: String,
    /// The result systemd gave the target's start job (`JobRemoved`: `done`, `dependency`,
    /// `failed`, `canceled`, `timeout`, `skipped`); null when the job was gone before the
    /// follower saw it end (the target's state decided then) or has not ended.
    pub job_result: Option<String>,
    /// `task_failed`: the units the target pulls in that failed (the target itself when none
    /// did); `timed_out` and `interrupted`: those still running. Unit names, the image's.
    pub units: Vec<String>,
    /// How many more there were.
    #[serde(default)]
    pub units_omitted: usize,
    /// `interrupted`: the shutdown under way; null when the follower was stopped without one.
    pub shutdown: Option<Shutdown>,
    /// The deadline that applied, in seconds from the dispatch.
    pub deadline_secs: u64,
    /// When `timed_out` was told, if the deadline passed before this end.
    pub timed_out_at: Option<String>,
    /// What became of the end's event for the BMC's System Event Log.
    pub bmc_event: Option<bmc::Outcome>,
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
    /// How the dispatched task ended, once `follow` told it (SPEC §6d); null before. Carried
    /// from run to run with `dispatch`.
    #[serde(default)]
    pub end: Option<End>,
    /// How many disks were left out of `disks`: those that did not fit its bound, the ones that
    /// matter (the disk named, those the hints match) being kept first.
    #[serde(default)]
    pub disks_omitted: usize,
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
            end: None,
            disks_omitted: 0,
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
    /// most [`MAX_FIELD_BYTES`], a detail's path, file and each of its at most four known
    /// `$id`s at most [`MAX_PATH_BYTES`], its message at most 1 KiB, and the machine's disks at
    /// most [`MAX_DISKS_BYTES`] (the first that fit, each string of theirs at most
    /// [`MAX_FIELD_BYTES`]; the rest counted). A recipe of 67 KB (a 64 KiB key over 250
    /// repeated keys) made a 16 MiB status that `report` could not read there (issue 31); so
    /// did a machine of 4,000 disks (issue 40).
    pub fn bound(&mut self) {
        self.bound_disks();
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
                d.known.truncate(MAX_KNOWN);
                d.file.iter_mut().chain(&mut d.known).for_each(|text| cut(text, MAX_PATH_BYTES));
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
        if let Some(end) = &mut self.end {
            if end.units.len() > MAX_END_UNITS {
                end.units_omitted = end.units_omitted.saturating_add(end.units.len() - MAX_END_UNITS);
                end.units.truncate(MAX_END_UNITS);
            }
            for unit in &mut end.units {
                cut(unit, MAX_UNIT_BYTES);
            }
            fields.push(&mut end.at);
            fields.extend(end.job_result.iter_mut().chain(&mut end.timed_out_at));
        }
        for field in fields {
            cut(field, MAX_FIELD_BYTES);
        }
    }

    /// The disks that fit [`MAX_DISKS_BYTES`] as written, in their order (the caller's: those
    /// that matter first); the others counted in `disks_omitted`.
    fn bound_disks(&mut self) {
        let mut used = 0;
        let mut kept = 0;
        for listed in &mut self.disks {
            let disk = &mut listed.disk;
            let lists = [&mut disk.by_id, &mut disk.by_path, &mut listed.users];
            let mut fields: Vec<&mut String> = lists.into_iter().flatten().collect();
            fields.extend([&mut disk.name, &mut disk.node]);
            let optional = [&mut disk.wwn, &mut disk.serial, &mut disk.model, &mut disk.vendor, &mut disk.transport];
            fields.extend(optional.into_iter().flatten());
            for field in fields {
                cut(field, MAX_FIELD_BYTES);
            }
            // As written: each line of the disk's object indented by two levels more, and the
            // comma and newline after it.
            let pretty = serde_json::to_vec_pretty(listed).expect("a disk serializes");
            let size = pretty.len() + 4 * (1 + pretty.iter().filter(|&&b| b == b'\n').count()) + 2;
            if used + size > MAX_DISKS_BYTES {
                break;
            }
            used += size;
            kept += 1;
        }
        self.disks_omitted = self.disks_omitted.saturating_add(self.disks.len() - kept);
        self.disks.truncate(kept);
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

/// Takes the state directory's lock (`STATE/lock`): one `run` at a time, and no end told
/// while one runs. Waits at most `patience` (`None`: as long as it takes), calling `waiting`
/// once if another holds it; a stop ends the wait. Held until the file is closed.
pub fn lock(
    dir: &Path,
    patience: Option<std::time::Duration>,
    waiting: impl FnMut(),
) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(dir.join("lock"))?;
    crate::files::lock(&file, patience, waiting)?;
    Ok(file)
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

/// The time a [`timestamp`] names; `None` for any other text.
pub fn parse_timestamp(text: &str) -> Option<SystemTime> {
    let b = text.as_bytes();
    let separators = [(4, b'-'), (7, b'-'), (10, b'T'), (13, b':'), (16, b':'), (19, b'Z')];
    if b.len() != 20 || separators.iter().any(|&(at, c)| b[at] != c) {
        return None;
    }
    let number = |from: usize, to: usize| -> Option<i64> {
        let digits = text.get(from..to)?;
        digits.bytes().all(|c| c.is_ascii_digit()).then(|| digits.parse().ok())?
    };
    let (year, month, day) = (number(0, 4)?, number(5, 7)?, number(8, 10)?);
    let (hour, minute, second) = (number(11, 13)?, number(14, 16)?, number(17, 19)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    // A civil date to days since 1970-01-01 (Howard Hinnant's algorithm, the inverse of the
    // one above).
    let y = year - i64::from(month <= 2);
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = u64::try_from(days * 86_400 + hour * 3600 + minute * 60 + second).ok()?;
    Some(UNIX_EPOCH + std::time::Duration::from_secs(secs))
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
    fn timestamps_read_back_and_nothing_else_does() {
        for secs in [0, 951_782_400, 1_795_297_096, 4_102_444_799, 86_399, 5_097_600] {
            let time = UNIX_EPOCH + Duration::from_secs(secs);
            assert_eq!(parse_timestamp(&timestamp(time)), Some(time), "{secs}");
        }
        for text in ["", "2026-11-21T21:38:16", "2026-11-21 21:38:16Z", "2026-13-01T00:00:00Z", "+026-11-21T21:38:16Z"]
        {
            assert_eq!(parse_timestamp(text), None, "{text:?}");
        }
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

    /// Issue 40, finding 3: when a target-disk check failed, status.json listed every whole
    /// disk unbounded: 4,000 disks (a JBOD shelf behind an HBA) wrote 2.2 MB, over what `run`
    /// and `report` read, and the next run lost the dispatch record with it.
    #[test]
    fn four_thousand_disks_keep_the_status_readable_and_the_dispatch_record() {
        use crate::checks::host::{self, SystemHost};
        use crate::issues::Findings;
        use crate::recipe::model::Recipe;

        let tree = crate::disks::tests::scsi_disks(4000);
        let ask = |_: &str| Ok("loaded".to_owned());
        let machine = SystemHost::new(&[], &ask).with_sysfs(tree.root());
        // Disk 3999 by its by-id name, with the serial of disk 7: a failed check of the target disk.
        let recipe = serde_json::json!({
            "task_target": "install-linux.target",
            "target_disk": "/dev/disk/by-id/wwn-0x5000c50015ea0f9f",
            "target_disk_hints": {"serial": "PD-DISK-0007"}
        });
        let doc = crate::recipe::parse(recipe.to_string().into_bytes()).unwrap();
        let recipe = Recipe::view(&doc);
        let found = host::check(&recipe, &machine, &Findings::default());
        let codes: Vec<&str> = found.issues.iter().map(|i| i.code.name()).collect();
        assert_eq!(codes, ["diskIdentityMismatch"]);
        let named = found.resolved.and_then(|r| r.disk).unwrap();
        assert_eq!(named.serial.as_deref(), Some("PD-DISK-3999"));

        let dispatched = Dispatch {
            recipe_sha256: "ab".repeat(32),
            target: "install-linux.target".into(),
            job: Some("/org/freedesktop/systemd1/job/42".into()),
            at: "2026-11-21T21:38:16Z".into(),
        };
        let mut status = Status::running("2026-11-21T21:38:16Z".into(), Some(dispatched.clone()));
        status.state = State::Failed;
        status.disks = host::listed_for(&recipe, &machine, Some(&named));
        let dir = tempfile::tempdir().unwrap();
        let written = status.write(dir.path()).unwrap();
        assert!(written.len() as u64 <= MAX_STATUS_BYTES, "{} bytes", written.len());
        let read = Status::read(&dir.path().join(FILE_NAME)).unwrap();
        assert_eq!(read.dispatch, Some(dispatched), "the rerun's record is kept");
        let serials: Vec<&str> = read.disks.iter().take(3).filter_map(|l| l.disk.serial.as_deref()).collect();
        assert_eq!(serials, ["PD-DISK-3999", "PD-DISK-0007", "PD-DISK-0000"], "the named disk, the hint's, the rest");
        assert!(read.disks.len() >= 64, "{} kept", read.disks.len());
        assert_eq!(read.disks.len() + read.disks_omitted, 4000);
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
            ..Detail::default()
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
