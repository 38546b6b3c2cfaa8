//! Where a run's time goes (issue 12): the steps of the boot path, each timed as the run
//! passes from one to the next, in status.json (`timings_ms`), in the end-of-run journal entry
//! (`MEDIA_MS=`, `MOUNT_MS=`, ...) and on the banner.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// The timed steps, in the order a run takes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Finding the media: the device scan, and the wait for late media.
    Media,
    /// Attaching a loop device and mounting (the kernel may load isofs here).
    Mount,
    /// Opening and reading the schema and the recipe beneath the mount, then unmounting.
    Read,
    /// Digesting and parsing the recipe (the schema compiles beside it, on its own thread:
    /// `schema` is that thread's time), the stale-media guard and the rerun rule.
    Recipe,
    /// The static checks.
    Validate,
    /// The host checks, the bus's LoadUnit among them.
    HostChecks,
    /// Staging, fsyncing and publishing the outputs.
    Outputs,
    /// StartUnit.
    Start,
}

/// Milliseconds per step (absent: the run did not get there), the whole run, and the part of
/// it spent waiting for the system bus (connection and calls, within `host_checks` and
/// `start`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Timings {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub media: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mount: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schema: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recipe: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub validate: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_checks: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outputs: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bus: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total: Option<f64>,
    /// Telling the BMC (its SEL event), after the run's steps and outside `total`: bounded by
    /// `bmc::TIMEOUT` whatever the BMC does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bmc: Option<f64>,
    /// Reading the machine's inventory, after the run's steps and outside `total` (printing it
    /// comes after status.json is written: the journal says how long that took).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub inventory: Option<f64>,
}

impl Timings {
    fn slot(&mut self, step: Step) -> &mut Option<f64> {
        match step {
            Step::Media => &mut self.media,
            Step::Mount => &mut self.mount,
            Step::Read => &mut self.read,
            Step::Recipe => &mut self.recipe,
            Step::Validate => &mut self.validate,
            Step::HostChecks => &mut self.host_checks,
            Step::Outputs => &mut self.outputs,
            Step::Start => &mut self.start,
        }
    }

    /// `(name, milliseconds)` of each step the run took, in order, then `bus`, `total`, `bmc`
    /// and `inventory`.
    pub fn entries(&self) -> Vec<(&'static str, f64)> {
        [
            ("media", self.media),
            ("mount", self.mount),
            ("read", self.read),
            ("schema", self.schema),
            ("recipe", self.recipe),
            ("validate", self.validate),
            ("host_checks", self.host_checks),
            ("outputs", self.outputs),
            ("start", self.start),
            ("bus", self.bus),
            ("total", self.total),
            ("bmc", self.bmc),
            ("inventory", self.inventory),
        ]
        .into_iter()
        .filter_map(|(name, ms)| Some((name, ms?)))
        .collect()
    }

    /// One line for people: `media 3 ms, mount 41 ms, ..., total 120 ms`.
    pub fn line(&self) -> String {
        let parts: Vec<String> = self.entries().iter().map(|(name, ms)| format!("{name} {}", format_ms(*ms))).collect();
        parts.join(", ")
    }
}

fn format_ms(ms: f64) -> String {
    if ms < 10.0 {
        format!("{ms:.1} ms")
    } else {
        format!("{ms:.0} ms")
    }
}

/// Times the steps as the run passes from one to the next.
#[derive(Debug)]
pub struct Clock {
    started: Instant,
    current: Option<(Step, Instant)>,
}

impl Clock {
    pub fn start() -> Clock {
        Clock { started: Instant::now(), current: None }
    }

    /// The run enters `step`: the step it was in is over.
    pub fn enter(&mut self, step: Step, timings: &mut Timings) {
        self.stop(timings);
        self.current = Some((step, Instant::now()));
    }

    /// The run is over (done, failed or stopped): the last step and the total are recorded.
    pub fn stop(&mut self, timings: &mut Timings) {
        if let Some((step, since)) = self.current.take() {
            let slot = timings.slot(step);
            *slot = Some(slot.unwrap_or(0.0) + ms(since.elapsed()));
        }
        timings.total = Some(ms(self.started.elapsed()));
    }
}

pub fn ms(duration: Duration) -> f64 {
    (duration.as_secs_f64() * 1e6).round() / 1e3
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_timed_from_one_to_the_next() {
        let mut timings = Timings::default();
        let mut clock = Clock::start();
        clock.enter(Step::Media, &mut timings);
        std::thread::sleep(Duration::from_millis(20));
        clock.enter(Step::Mount, &mut timings);
        clock.stop(&mut timings);
        assert!(timings.media.unwrap() >= 20.0, "{timings:?}");
        assert!(timings.mount.is_some() && timings.read.is_none());
        assert!(timings.total.unwrap() >= timings.media.unwrap());
        let names: Vec<&str> = timings.entries().iter().map(|(n, _)| *n).collect();
        assert_eq!(names, ["media", "mount", "total"]);
        // The sleep lasts 20 ms or more (a loaded machine: more), so the line's first figure
        // is two digits or more.
        let line = timings.line();
        let media: f64 = line.strip_prefix("media ").and_then(|l| l.split(' ').next()).unwrap().parse().unwrap();
        assert!(media >= 20.0 && line.contains(", mount ") && line.contains(", total "), "{line}");
    }
}
