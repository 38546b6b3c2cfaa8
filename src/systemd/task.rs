//! The task's end (SPEC §6d), judged from what systemd says of the dispatched target: no bus
//! here. `follow` gathers a [`Seen`] over the bus ([`super::follow`]) whenever something may
//! have changed, and [`judge`] says whether the task is over and how.
//!
//! What "ended" means: the target's start job has left systemd's queue, and none of the units
//! the target pulls in directly (`Requires=`, `Requisite=`, `Wants=`, `BindsTo=`, `Upholds=`)
//! has a job left other than a stop. Succeeded: the job's result was `done` (or, when the
//! follower did not see the job go, the target is active) and none of those units failed.
//! Units ordered after the follower's own unit are what runs after the report (a reboot, a
//! power-off): not part of the task, so never waited for.

use serde::{Deserialize, Serialize};

/// The unit that runs `follow`. Units ordered after it run once the end has been told.
pub const FOLLOWER_UNIT: &str = "provision-task-end.service";

/// The dispatcher's own unit: a target may pull it in, it is not the task.
pub const DISPATCHER_UNIT: &str = "provision-dispatcher.service";

/// The dependencies through which a target pulls units in (systemd.unit(5)), as the
/// properties of `org.freedesktop.systemd1.Unit` name them.
pub const PULLS: [&str; 5] = ["Requires", "Requisite", "Wants", "BindsTo", "Upholds"];

/// The kind of shutdown under way, from the start job of systemd's special target that
/// begins it (systemd.special(7)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Shutdown {
    Reboot,
    Poweroff,
    Halt,
    Kexec,
}

impl Shutdown {
    pub const ALL: [Shutdown; 4] = [Shutdown::Reboot, Shutdown::Poweroff, Shutdown::Halt, Shutdown::Kexec];

    /// The shutdown that a start job of `unit` begins, if it begins one. A soft reboot
    /// (systemd 254) restarts the user space, the maintenance OS with it: to a controller, a
    /// reboot.
    pub fn begun_by(unit: &str) -> Option<Shutdown> {
        match unit {
            "reboot.target" | "soft-reboot.target" => Some(Shutdown::Reboot),
            "poweroff.target" => Some(Shutdown::Poweroff),
            "halt.target" => Some(Shutdown::Halt),
            "kexec.target" => Some(Shutdown::Kexec),
            _ => None,
        }
    }
}

/// A job in systemd's queue (`ListJobs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    pub unit: String,
    /// `start`, `stop`, `restart`, `verify-active`, ...
    pub kind: String,
    /// Its object path.
    pub path: String,
}

/// The shutdown under way, if the queue holds the start job of one.
pub fn shutdown_queued(jobs: &[Job]) -> Option<Shutdown> {
    jobs.iter().filter(|job| job.kind == "start").find_map(|job| Shutdown::begun_by(&job.unit))
}

/// Whether a unit the target pulls in is part of the task: not the dispatcher's or the
/// follower's unit, and not ordered after the follower (`after`: its `After=` list), which
/// is what runs once the end is told.
pub fn part_of_the_task(unit: &str, after: &[String]) -> bool {
    unit != FOLLOWER_UNIT && unit != DISPATCHER_UNIT && !after.iter().any(|a| a == FOLLOWER_UNIT)
}

/// One unit the target pulls in, as seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnitSeen {
    pub name: String,
    /// Its `ActiveState`: `active`, `failed`, `activating`, `inactive`, ...
    pub active_state: String,
    /// It has a job in the queue other than a stop (a shutdown stops everything: that is no
    /// part of the task).
    pub starting: bool,
}

/// What the follower saw of the task at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    /// The target's start job is still in systemd's queue.
    pub job_queued: bool,
    /// The result `JobRemoved` gave for that job, if the follower saw it go.
    pub job_result: Option<String>,
    /// The target's `ActiveState`.
    pub target_state: String,
    /// The units the target pulls in that are part of the task ([`part_of_the_task`]).
    pub units: Vec<UnitSeen>,
    pub shutdown: Option<Shutdown>,
}

/// Where the task stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Judgement {
    /// Not over: these units still run (the target itself when none of its units does).
    Running(Vec<String>),
    Succeeded,
    /// These units failed (the target itself when none of its units did).
    Failed {
        units: Vec<String>,
    },
    /// A shutdown began before the end (`None`: the follower was stopped without one); these
    /// units still ran.
    Interrupted {
        shutdown: Option<Shutdown>,
        units: Vec<String>,
    },
}

/// Whether the task is over, and how, for `target` as `seen`.
pub fn judge(target: &str, seen: &Seen) -> Judgement {
    let or_target = |units: Vec<String>| if units.is_empty() { vec![target.to_owned()] } else { units };
    let running: Vec<String> = seen.units.iter().filter(|u| u.starting).map(|u| u.name.clone()).collect();
    if seen.job_queued || !running.is_empty() {
        return match seen.shutdown {
            Some(shutdown) => Judgement::Interrupted { shutdown: Some(shutdown), units: or_target(running) },
            None => Judgement::Running(or_target(running)),
        };
    }
    let job_done = match seen.job_result.as_deref() {
        Some(result) => result == "done",
        None => matches!(seen.target_state.as_str(), "active" | "reloading"),
    };
    let failed: Vec<String> =
        seen.units.iter().filter(|u| u.active_state == "failed").map(|u| u.name.clone()).collect();
    // The job was cancelled, or went unseen: a shutdown under way took it away (it cancels
    // what conflicts with it), and stopped its units, which may then show as failed.
    let cut_short = matches!(seen.job_result.as_deref(), None | Some("canceled"));
    match (job_done, seen.shutdown) {
        (true, _) if failed.is_empty() => Judgement::Succeeded,
        (false, Some(shutdown)) if cut_short => {
            Judgement::Interrupted { shutdown: Some(shutdown), units: or_target(failed) }
        }
        _ => Judgement::Failed { units: or_target(failed) },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TARGET: &str = "install-linux.target";

    fn unit(name: &str, active_state: &str, starting: bool) -> UnitSeen {
        UnitSeen { name: name.into(), active_state: active_state.into(), starting }
    }

    fn seen(job_queued: bool, job_result: Option<&str>, target_state: &str, units: Vec<UnitSeen>) -> Seen {
        Seen {
            job_queued,
            job_result: job_result.map(str::to_owned),
            target_state: target_state.into(),
            units,
            shutdown: None,
        }
    }

    #[test]
    fn a_queued_job_or_a_starting_unit_is_not_the_end() {
        let waiting = seen(true, None, "inactive", vec![unit("write.service", "activating", true)]);
        assert_eq!(judge(TARGET, &waiting), Judgement::Running(vec!["write.service".into()]));
        let alone = seen(true, None, "inactive", vec![unit("write.service", "inactive", false)]);
        assert_eq!(judge(TARGET, &alone), Judgement::Running(vec![TARGET.into()]), "the target names itself");
        // A unit the target does not wait for (DefaultDependencies=no) still runs.
        let late = seen(false, Some("done"), "active", vec![unit("late.service", "activating", true)]);
        assert_eq!(judge(TARGET, &late), Judgement::Running(vec!["late.service".into()]));
    }

    #[test]
    fn done_with_no_failed_unit_is_success_and_a_failed_unit_is_not() {
        let units = vec![unit("write.service", "inactive", false), unit("daemon.service", "active", false)];
        assert_eq!(judge(TARGET, &seen(false, Some("done"), "active", units.clone())), Judgement::Succeeded);
        let mut failed = units.clone();
        failed.push(unit("check.service", "failed", false));
        // A Wants= unit that failed leaves the target's job done: the task failed all the same.
        assert_eq!(
            judge(TARGET, &seen(false, Some("done"), "active", failed.clone())),
            Judgement::Failed { units: vec!["check.service".into()] }
        );
        assert_eq!(
            judge(TARGET, &seen(false, Some("dependency"), "inactive", failed)),
            Judgement::Failed { units: vec!["check.service".into()] }
        );
        assert_eq!(
            judge(TARGET, &seen(false, Some("timeout"), "inactive", units)),
            Judgement::Failed { units: vec![TARGET.into()] },
            "no unit to blame: the target is named"
        );
    }

    #[test]
    fn a_job_gone_unseen_is_judged_from_the_targets_state() {
        assert_eq!(judge(TARGET, &seen(false, None, "active", vec![])), Judgement::Succeeded);
        assert_eq!(
            judge(TARGET, &seen(false, None, "inactive", vec![])),
            Judgement::Failed { units: vec![TARGET.into()] }
        );
        assert_eq!(
            judge(TARGET, &seen(false, None, "failed", vec![])),
            Judgement::Failed { units: vec![TARGET.into()] }
        );
    }

    #[test]
    fn a_shutdown_before_the_end_interrupts_it_and_one_after_does_not() {
        let mut running = seen(true, None, "inactive", vec![unit("write.service", "activating", true)]);
        running.shutdown = Some(Shutdown::Reboot);
        assert_eq!(
            judge(TARGET, &running),
            Judgement::Interrupted { shutdown: Some(Shutdown::Reboot), units: vec!["write.service".into()] }
        );
        // The task's last unit asked for the reboot itself (SuccessAction=reboot): the shutdown
        // cancelled the target's start job before it was done.
        let mut cancelled = seen(false, Some("canceled"), "inactive", vec![unit("write.service", "inactive", false)]);
        cancelled.shutdown = Some(Shutdown::Reboot);
        assert_eq!(
            judge(TARGET, &cancelled),
            Judgement::Interrupted { shutdown: Some(Shutdown::Reboot), units: vec![TARGET.into()] }
        );
        // Done before the shutdown: the task ended, whatever comes next.
        let mut done = seen(false, Some("done"), "deactivating", vec![unit("write.service", "active", false)]);
        done.shutdown = Some(Shutdown::Poweroff);
        assert_eq!(judge(TARGET, &done), Judgement::Succeeded);
        // The shutdown stopped a unit that was still running: it shows as failed, the job as
        // cancelled. Not a failure of the task (found by the VM case past its deadline).
        let mut stopped = seen(false, Some("canceled"), "inactive", vec![unit("write.service", "failed", false)]);
        stopped.shutdown = Some(Shutdown::Poweroff);
        assert_eq!(
            judge(TARGET, &stopped),
            Judgement::Interrupted { shutdown: Some(Shutdown::Poweroff), units: vec!["write.service".into()] }
        );
        // A failure before the shutdown (the job's own result says so) stays a failure.
        let mut failed = seen(false, Some("dependency"), "inactive", vec![unit("write.service", "failed", false)]);
        failed.shutdown = Some(Shutdown::Reboot);
        assert_eq!(judge(TARGET, &failed), Judgement::Failed { units: vec!["write.service".into()] });
    }

    #[test]
    fn the_shutdown_is_read_from_the_queue() {
        let job = |unit: &str, kind: &str| Job { unit: unit.into(), kind: kind.into(), path: "/j".into() };
        assert_eq!(
            shutdown_queued(&[job("getty@tty1.service", "stop"), job("reboot.target", "start")]),
            Some(Shutdown::Reboot)
        );
        assert_eq!(shutdown_queued(&[job("poweroff.target", "start")]), Some(Shutdown::Poweroff));
        assert_eq!(shutdown_queued(&[job("kexec.target", "start"), job("halt.target", "stop")]), Some(Shutdown::Kexec));
        assert_eq!(shutdown_queued(&[job("reboot.target", "stop"), job("install-linux.target", "start")]), None);
    }

    #[test]
    fn what_runs_after_the_report_is_not_the_task() {
        assert!(part_of_the_task("write.service", &["provision-dispatcher.service".into()]));
        assert!(!part_of_the_task("provision-poweroff.service", &[FOLLOWER_UNIT.into()]));
        assert!(!part_of_the_task(FOLLOWER_UNIT, &[]));
        assert!(!part_of_the_task(DISPATCHER_UNIT, &[]));
    }
}
