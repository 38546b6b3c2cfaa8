//! `follow`: the task's end (SPEC §6d). `provision-task-end.service` runs it once the
//! dispatcher's unit is done: it follows the job that `run` started in this boot (status.json's
//! `dispatch`) over the system bus until the task is over, then tells how it ended: status.json,
//! a second `PROVISION-RESULT v1` line for the same recipe and job, made from the status as
//! written, an event in the BMC's System Event Log, and `READY=1`, upon which the units ordered
//! after its unit (a reboot, a power-off) start. Then it repeats the line on the serial consoles
//! until it is stopped, for a controller that attaches late. Nothing dispatched: it says ready
//! and exits at once.
//!
//! What was decided, and why:
//! - The deadline is the image's (`--deadline`, the unit's `PROVISION_TASK_DEADLINE_SECS`,
//!   changed with a drop-in), counted from the dispatch. Past it, `timed_out` is told, naming
//!   the units still running, and the task is left running: the follower never stops a unit
//!   that may be writing a disk. It goes on following, and a later end is told too (its line
//!   says `past_deadline`). `READY=1` waits for a real end, so a power-off ordered after the
//!   report never cuts a task that overran.
//! - A SIGTERM before the end (a shutdown, or the unit stopped) tells `interrupted`, with the
//!   kind of shutdown read from systemd's queue, within a bound ([`STOP_BOUND`]) that the
//!   signal itself does not cut short, then exits. A shutdown seen queued before the signal is
//!   told at once.
//! - Every wait is bounded: each bus call by `--bus-timeout`, the wait for a signal by the next
//!   look ([`RECHECK`]), the deadline or the next repeat; a stop ends any of them.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use tracing::{error, info, warn};

use crate::bmc;
use crate::failure::Exit;
use crate::log::{
    notify_ready, notify_status, TASK_FAILED_ID, TASK_INTERRUPTED_ID, TASK_SUCCEEDED_ID, TASK_TIMED_OUT_ID,
};
use crate::report::console;
use crate::report::result::{self, ResultLine};
use crate::report::status::{self, parse_timestamp, timestamp, Dispatch, End, State, Status, FILE_NAME};
use crate::shutdown::{self, stop_requested};
use crate::systemd::bus::{CallError, Deadline};
use crate::systemd::follow::{Event, Removed, Watch};
use crate::systemd::task::{judge, part_of_the_task, shutdown_queued, Judgement, Seen, UnitSeen, PULLS};
use boot_io::result::repeat_every;

/// The deadline when the image sets none: installs take minutes to an hour or two (an image
/// written over a slow link, a firmware update's reboots of its own); past it the controller
/// hears `timed_out` and the task goes on.
pub const DEADLINE: Duration = Duration::from_secs(2 * 3600);

/// The longest deadline `--deadline` takes: a week.
pub const MAX_DEADLINE: Duration = Duration::from_secs(7 * 86_400);

/// How long the end may take to be told once SIGTERM came: a look at the bus, the BMC's 2 s,
/// the status and the line. The unit's `TimeoutStopSec=` is larger.
const STOP_BOUND: Duration = Duration::from_secs(5);

/// How often the task is looked at again without a signal: a `JobRemoved` lost (its queue full,
/// the bus restarted) costs at most this.
const RECHECK: Duration = Duration::from_secs(15);

/// How long to wait before connecting again to a bus that is not there.
const RECONNECT_WAIT: Duration = Duration::from_secs(1);

/// How long an end waits for a `run` that holds the state directory's lock.
const LOCK_PATIENCE: Duration = Duration::from_secs(10);

/// The most units of the target looked at; a target pulls in a handful.
const MAX_UNITS: usize = 512;

#[derive(Debug, Clone)]
pub struct FollowArgs {
    pub state_dir: PathBuf,
    pub deadline: Duration,
    pub bus_timeout: Duration,
    /// `--console`: the lines also on every console the kernel writes to, and repeated on the
    /// serial ones.
    pub console: bool,
    /// `--bmc`: the end also in the BMC's System Event Log.
    pub bmc: bool,
}

impl Default for FollowArgs {
    fn default() -> Self {
        FollowArgs {
            state_dir: crate::cmd::run::defaults::STATE_DIR.into(),
            deadline: DEADLINE,
            bus_timeout: crate::cmd::run::defaults::BUS_TIMEOUT,
            console: false,
            bmc: false,
        }
    }
}

/// What this boot dispatched.
struct Task {
    target: String,
    job: String,
}

/// Follows what this boot dispatched to its end and tells it; returns once stopped.
pub fn run(args: &FollowArgs) -> Exit {
    shutdown::install_signal_handlers();
    match dispatched(&args.state_dir) {
        Ok(Some((task, status, at))) => Follower::new(args, task, status, at).follow(),
        Ok(None) => {
            notify_ready("nothing to follow");
            Exit::Ok
        }
        Err(exit) => exit,
    }
}

/// The task to follow: the dispatch of status.json, when the last run dispatched it (or its
/// deadline passed: a follower started again goes on) and its job is known; with the status
/// and the time of the dispatch.
fn dispatched(state_dir: &Path) -> Result<Option<(Task, Status, SystemTime)>, Exit> {
    let nothing = |why: &str| {
        info!(phase = "follow", "nothing to follow: {why}");
        Ok(None)
    };
    // The state directory must be the dispatcher's (as `run` requires) before its status is
    // believed.
    match crate::files::private_dir(state_dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return nothing("no run of the dispatcher in this boot"),
        Err(e) => {
            error!(phase = "follow", "cannot use {}: {e}", state_dir.display());
            return Err(Exit::CantWrite);
        }
        Ok(()) => {}
    }
    let status = match Status::read(&state_dir.join(FILE_NAME)) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return nothing("no run of the dispatcher in this boot"),
        Err(e) => {
            error!(phase = "follow", "cannot read {}: {e}", state_dir.join(FILE_NAME).display());
            return Err(Exit::Internal);
        }
        Ok(status) => status,
    };
    if !matches!(status.state, State::Dispatched | State::TimedOut) {
        return nothing(&format!("the dispatcher's last run ended {}", state_word(status.state)));
    }
    let Some(Dispatch { job: Some(job), target, at, .. }) = status.dispatch.clone() else {
        return nothing("the start of the target was requested, its job is unknown");
    };
    let at = parse_timestamp(&at).unwrap_or_else(SystemTime::now);
    Ok(Some((Task { target, job }, status, at)))
}

/// A state as status.json writes it.
fn state_word(state: State) -> String {
    serde_json::to_value(state).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default()
}

/// How a stretch of following ended.
enum Step {
    /// The connection broke, or none could be made: connect again.
    Again,
    /// The end was told for good.
    Told,
    /// A stop came.
    Stopped,
}

struct Follower<'a> {
    args: &'a FollowArgs,
    task: Task,
    /// The status as read when following began: what an end is told from if it cannot be read
    /// again.
    base: Status,
    deadline_at: Instant,
    /// The result `JobRemoved` gave for the target's start job.
    job_result: Option<String>,
    /// When `timed_out` was told.
    timed_out_at: Option<String>,
    /// Whether each unit the target pulls in is part of the task (its `After=`, read once).
    part: HashMap<String, bool>,
    /// The target and its units: the end of one of their jobs calls for a new look.
    watched: HashSet<String>,
    last_look: Instant,
    /// The serial consoles the line is repeated on, since when, and when next.
    repeat: Option<(Vec<PathBuf>, Instant, Instant)>,
    bus_down_said: bool,
}

impl<'a> Follower<'a> {
    fn new(args: &'a FollowArgs, task: Task, base: Status, dispatched_at: SystemTime) -> Follower<'a> {
        let since = SystemTime::now().duration_since(dispatched_at).unwrap_or_default();
        let timed_out_at = base.end.as_ref().filter(|_| base.state == State::TimedOut).map(|end| end.at.clone());
        Follower {
            args,
            task,
            deadline_at: Instant::now() + args.deadline.saturating_sub(since),
            job_result: None,
            timed_out_at,
            part: HashMap::new(),
            watched: HashSet::new(),
            last_look: Instant::now(),
            repeat: None,
            bus_down_said: false,
            base,
        }
    }

    fn follow(mut self) -> Exit {
        let (target, job) = (self.task.target.clone(), self.task.job.clone());
        let left = self.deadline_at.saturating_duration_since(Instant::now()).as_secs();
        info!(phase = "follow", job, "following {target} (start job {job}); the deadline is in {left} s");
        notify_status(&format!("following {target} (start job {job})"));
        let stop = || stop_requested().is_some();
        loop {
            let step = match Watch::open(Deadline::after(self.args.bus_timeout), &stop) {
                Ok(mut watch) => {
                    self.bus_down_said = false;
                    match self.follow_on(&mut watch) {
                        Step::Stopped => return self.stopped(Some(watch)),
                        step => step,
                    }
                }
                Err(_) if stop() => Step::Stopped,
                Err(e) => {
                    let e = anyhow::Error::from(e);
                    if !self.bus_down_said {
                        warn!(phase = "follow", "cannot follow the task over the system bus ({e:#}); trying again");
                        self.bus_down_said = true;
                    }
                    self.without_bus()
                }
            };
            match step {
                Step::Again => {}
                Step::Told => return self.linger(),
                Step::Stopped => return self.stopped(None),
            }
        }
    }

    /// Follows on one connection: looks, tells an end if there is one, waits for a reason to
    /// look again.
    fn follow_on(&mut self, watch: &mut Watch) -> Step {
        let stop = || stop_requested().is_some();
        loop {
            let seen = match self.look(watch, Deadline::after(self.args.bus_timeout), &stop) {
                Ok(seen) => seen,
                Err(_) if stop() => return Step::Stopped,
                Err(e) => return broke(e),
            };
            match judge(&self.task.target, &seen) {
                Judgement::Running(units) => self.time_out_if_due(units),
                ended => {
                    self.tell(ended);
                    return Step::Told;
                }
            }
            loop {
                let until = self.next_wake();
                let event = watch.next(Deadline { at: until, timeout: self.args.bus_timeout }, &stop);
                self.repeat_if_due();
                match event {
                    Ok(Event::Removed(removed)) => {
                        if self.concerns(&removed) {
                            break;
                        }
                    }
                    Ok(Event::Quiet) => {
                        if self.look_due() {
                            break;
                        }
                    }
                    Ok(Event::Stopped) => return Step::Stopped,
                    Err(e) => return broke(e),
                }
            }
        }
    }

    /// What systemd says of the task now. A job that left the queue unseen is judged from the
    /// target's state ([`judge`]).
    fn look(&mut self, watch: &mut Watch, deadline: Deadline, stop: &dyn Fn() -> bool) -> Result<Seen, CallError> {
        let target = self.task.target.clone();
        let jobs = watch.jobs(deadline, stop)?;
        // Whatever ended before the queue was listed is in the list, and its signal (sent
        // before the reply) here: its result is kept, no new look needed.
        for removed in watch.taken() {
            self.concerns(&removed);
        }
        let target_state = watch.unit::<String>(&target, "ActiveState", deadline, stop)?;
        let mut pulled = Vec::new();
        for property in PULLS {
            pulled.extend(watch.unit::<Vec<String>>(&target, property, deadline, stop)?);
        }
        pulled.sort();
        pulled.dedup();
        if pulled.len() > MAX_UNITS {
            warn!(phase = "follow", "{target} pulls in {} units; the first {MAX_UNITS} are followed", pulled.len());
            pulled.truncate(MAX_UNITS);
        }
        let mut units = Vec::new();
        for name in pulled {
            let part = match self.part.get(&name) {
                Some(&part) => part,
                None => {
                    let part = part_of_the_task(&name, &watch.unit::<Vec<String>>(&name, "After", deadline, stop)?);
                    self.part.insert(name.clone(), part);
                    part
                }
            };
            if part {
                let active_state = watch.unit::<String>(&name, "ActiveState", deadline, stop)?;
                let starting = jobs.iter().any(|job| job.unit == name && job.kind != "stop");
                units.push(UnitSeen { name, active_state, starting });
            }
        }
        self.watched = units.iter().map(|u| u.name.clone()).chain([target]).collect();
        self.last_look = Instant::now();
        Ok(Seen {
            job_queued: jobs.iter().any(|job| job.path == self.task.job),
            job_result: self.job_result.clone(),
            target_state,
            units,
            shutdown: shutdown_queued(&jobs),
        })
    }

    /// Whether a job's end calls for a new look: the target's job (whose result is kept), a job
    /// of one of its units, or a cancelled one (a shutdown cancels what conflicts with it).
    fn concerns(&mut self, removed: &Removed) -> bool {
        if removed.job == self.task.job {
            self.job_result = Some(removed.result.clone());
            return true;
        }
        self.watched.contains(&removed.unit) || removed.result == "canceled"
    }

    fn look_due(&self) -> bool {
        let now = Instant::now();
        now >= self.last_look + RECHECK || (self.timed_out_at.is_none() && now >= self.deadline_at)
    }

    /// When the wait for a signal ends: the next look, the deadline, the next repeat.
    fn next_wake(&self) -> Instant {
        let mut until = self.last_look + RECHECK;
        if self.timed_out_at.is_none() {
            until = until.min(self.deadline_at);
        }
        if let Some((_, _, next)) = &self.repeat {
            until = until.min(*next);
        }
        until.max(Instant::now())
    }

    fn time_out_if_due(&mut self, running: Vec<String>) {
        if self.timed_out_at.is_none() && Instant::now() >= self.deadline_at {
            self.tell(Judgement::Running(running));
        }
    }

    /// No bus: wait a moment (repeating the line if due, telling `timed_out` if the deadline
    /// passes meanwhile: which units still run is then unknown).
    fn without_bus(&mut self) -> Step {
        self.time_out_if_due(Vec::new());
        if self.idle(Instant::now() + RECONNECT_WAIT) {
            Step::Stopped
        } else {
            Step::Again
        }
    }

    /// The stop came before the end was told: one last look, bounded and not cut short by the
    /// stop, on the connection there is or a new one. An end found then is told as such;
    /// otherwise the task was interrupted, by the shutdown under way if the queue shows one.
    fn stopped(mut self, watch: Option<Watch>) -> Exit {
        let bound = Deadline::after(STOP_BOUND);
        let never = || false;
        let seen = watch.and_then(|mut watch| self.look(&mut watch, bound, &never).ok()).or_else(|| {
            Watch::open(bound, &never).ok().and_then(|mut watch| self.look(&mut watch, bound, &never).ok())
        });
        let judgement = match seen.map(|seen| judge(&self.task.target, &seen)) {
            Some(Judgement::Running(units)) => Judgement::Interrupted { shutdown: None, units },
            Some(ended) => ended,
            None => {
                warn!(phase = "follow", "stopped, and the system bus did not say how the task stands");
                Judgement::Interrupted { shutdown: None, units: Vec::new() }
            }
        };
        self.tell(judgement);
        Exit::Ok
    }

    /// After the end: the line again on the serial consoles until stopped.
    fn linger(mut self) -> Exit {
        while !self.idle(Instant::now() + RECHECK) {}
        Exit::Ok
    }

    /// Waits until `until`, repeating the line when due; `true` when a stop ended the wait.
    fn idle(&mut self, until: Instant) -> bool {
        const SLICE: Duration = Duration::from_millis(200);
        loop {
            if stop_requested().is_some() {
                return true;
            }
            self.repeat_if_due();
            let now = Instant::now();
            if now >= until {
                return false;
            }
            std::thread::sleep(SLICE.min(until - now));
        }
    }

    /// The line again on the serial consoles when it is time (every 30 s for an hour, then
    /// every 5 minutes), made from status.json as it is then: the line always proves the
    /// status there is. Not on tty1: the first line reached the screen.
    fn repeat_if_due(&mut self) {
        let Some((serial, since, next)) = &mut self.repeat else { return };
        if Instant::now() < *next {
            return;
        }
        if let Ok((status, bytes)) = Status::read_bytes(&self.args.state_dir.join(FILE_NAME)) {
            let _took = console::write_all_consoles(serial, ResultLine::new(&status, Some(&bytes)).line().as_bytes());
        }
        *next = Instant::now() + repeat_every(since.elapsed());
    }

    /// Tells where the task stands: status.json (under the state directory's lock, the
    /// dispatch still this one), the BMC's event, the line on stdout and the consoles, the
    /// journal. `Running` is the deadline passing: `timed_out`.
    fn tell(&mut self, judgement: Judgement) {
        let (state, units, shutdown, event) = match judgement {
            Judgement::Succeeded => (State::Succeeded, Vec::new(), None, bmc::Event::InstallationCompleted),
            Judgement::Failed { units } => (State::TaskFailed, units, None, bmc::Event::InstallationFailed),
            Judgement::Running(units) => (State::TimedOut, units, None, bmc::Event::InstallationAborted),
            Judgement::Interrupted { shutdown, units } => {
                (State::Interrupted, units, shutdown, bmc::Event::InstallationAborted)
            }
        };
        let now = timestamp(SystemTime::now());
        if state == State::TimedOut {
            self.timed_out_at = Some(now.clone());
        }
        let dir = &self.args.state_dir;
        let lock = status::lock(dir, Some(LOCK_PATIENCE), || {
            info!(phase = "follow", "a run of the dispatcher holds {}; waiting for it", dir.display());
        });
        let mut status = match Status::read(&dir.join(FILE_NAME)) {
            Ok(status) => status,
            Err(e) => {
                warn!(phase = "follow", "cannot read the status again ({e}); the end is told from the one read first");
                self.base.clone()
            }
        };
        if status.dispatch.as_ref().and_then(|d| d.job.as_deref()) != Some(self.task.job.as_str()) {
            warn!(phase = "follow", "another dispatch replaced the one followed (run --force); its end is not told: restart provision-task-end.service to follow the new one");
            return;
        }
        // The BMC is told first, so that status.json records what became of it; its 2 s are
        // not cut short by a stop: the end is what a stop waits for.
        let bmc_event = self.args.bmc.then(|| bmc::send(Path::new(bmc::DEVICE), event, bmc::TIMEOUT, &|| false));
        status.state = state;
        status.end = Some(End {
            at: now.clone(),
            job_result: self.job_result.clone(),
            units,
            units_omitted: 0,
            shutdown,
            deadline_secs: self.args.deadline.as_secs(),
            timed_out_at: self.timed_out_at.clone(),
            bmc_event,
        });
        let written = match &lock {
            Ok(_) => status
                .write(dir)
                .map_err(|e| error!(phase = "follow", "cannot write the status in {}: {e}", dir.display()))
                .ok(),
            Err(e) => {
                error!(
                    phase = "follow",
                    "cannot take the lock of {} ({e}); the end is told, not recorded",
                    dir.display()
                );
                status.bound();
                None
            }
        };
        drop(lock);
        result::announce(&status, written.as_deref(), self.args.console, &[]);
        log_end(&status, &self.task);
        if state != State::TimedOut {
            notify_ready(&format!("the task ended: {}", state_word(state)));
        }
        if self.args.console && self.repeat.is_none() {
            let serial: Vec<PathBuf> =
                console::active(Path::new(console::ACTIVE)).into_iter().filter(|c| !console::is_vt(c)).collect();
            let first = Instant::now() + repeat_every(Duration::ZERO);
            self.repeat = Some((serial, Instant::now(), first));
        }
    }
}

/// A broken connection: said, and made again.
fn broke(error: CallError) -> Step {
    info!(
        phase = "follow",
        "the connection to the system bus broke ({:#}); connecting again",
        anyhow::Error::from(error)
    );
    Step::Again
}

/// The end in the journal, with its MESSAGE_ID (the catalog explains each).
fn log_end(status: &Status, task: &Task) {
    let Some(end) = &status.end else { return };
    let (target, job) = (task.target.as_str(), task.job.as_str());
    let units = end.units.join(" ");
    let shutdown = end.shutdown.map(|s| format!("{s:?}").to_lowercase()).unwrap_or_default();
    let result = end.job_result.as_deref().unwrap_or("unseen");
    match status.state {
        State::Succeeded => info!(
            phase = "follow",
            message_id = TASK_SUCCEEDED_ID,
            job,
            "the task ended: succeeded ({target}, start job {job}: {result})"
        ),
        State::TaskFailed => error!(
            phase = "follow",
            message_id = TASK_FAILED_ID,
            job,
            units,
            "the task ended: task_failed ({target}, start job {job}: {result}; failed: {units})"
        ),
        State::TimedOut => warn!(
            phase = "follow",
            message_id = TASK_TIMED_OUT_ID,
            job,
            units,
            "the task timed out after {} s: still running: {units}; it is left running, and its end will be told",
            end.deadline_secs
        ),
        _ => warn!(
            phase = "follow",
            message_id = TASK_INTERRUPTED_ID,
            job,
            units,
            shutdown,
            "the task was interrupted before its end ({}; still running: {units})",
            if shutdown.is_empty() { "the follower was stopped".to_owned() } else { format!("{shutdown} under way") }
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_are_told_in_status_json_words() {
        assert_eq!(state_word(State::TaskFailed), "task_failed");
        assert_eq!(state_word(State::TimedOut), "timed_out");
        assert_eq!(state_word(State::Succeeded), "succeeded");
    }
}
