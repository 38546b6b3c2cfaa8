//! Work on untrusted input with a bound on what it may cost: compiling the media's schema and
//! validating the recipe against it.
//!
//! Any schema within the caps can ask for work without end: a 1.6 KB schema of 40 levels of
//! `allOf: [{"$ref": next}, {"$ref": next}]` takes 2^40 steps, an `anyOf` of 100 patterns over
//! 3,000 strings keeps every failed branch's errors. No static measure of a schema catches
//! every shape (recursion through `items` multiplies with the recipe's depth), so the work
//! itself is bounded: it runs on a thread of its own, with a limit on its CPU time and on the
//! heap it may add, while the caller waits. The first limit reached, or a stop signal, ends the
//! wait: the caller goes on to report, and the worker is given up. It stops for good at its
//! next allocation or [`checkpoint`] (`crate::memory::Bound`), and the process ends soon after.
//!
//! CPU time rather than the clock: a busy machine (or a slow link that holds the boot up)
//! makes the same work take longer, not cost more; the limits are hundreds of times what the
//! canonical schema needs on a maximal recipe, so only work that would never end reaches them.

use std::fmt;
use std::sync::mpsc;
use std::time::Duration;

use crate::memory::Bound;
use crate::shutdown;

/// What a piece of work may cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// CPU time of the worker thread.
    pub cpu: Duration,
    /// Heap the worker may add (allocated less freed).
    pub heap: usize,
}

/// Why the work did not finish.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overrun {
    /// It used its CPU time.
    Cpu(Duration),
    /// It needed more heap than its limit, or than the process has left.
    Heap(usize),
    /// A stop signal came first.
    Stopped(i32),
    /// No thread could be started for it.
    NoThread,
}

impl fmt::Display for Overrun {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Overrun::Cpu(limit) => write!(f, "took more than {} ms of CPU time", limit.as_millis()),
            Overrun::Heap(limit) => write!(f, "needed more than {} MiB of memory", limit >> 20),
            Overrun::Stopped(signal) => write!(f, "was stopped by {}", shutdown::signal_name(*signal)),
            Overrun::NoThread => f.write_str("could not be given a thread"),
        }
    }
}

/// How often the caller looks at the worker's CPU time and for a stop. A result wakes it at
/// once.
const POLL: Duration = Duration::from_millis(5);

/// The worker's stack: validation recurses once per level of the schema (at most 256, with
/// `$ref` hops) and of the recipe (at most 128).
const STACK: usize = 4 << 20;

/// Runs `work` on a thread of its own within `budget`, and waits for it.
pub fn run<T: Send + 'static>(
    name: &str,
    budget: Budget,
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, Overrun> {
    spawn(name, budget, work).wait()
}

/// Starts `work` on a thread of its own within `budget`; [`Pending::wait`] waits for it, so
/// the caller can do something else meanwhile (parse the recipe while the schema compiles).
pub fn spawn<T: Send + 'static>(name: &str, budget: Budget, work: impl FnOnce() -> T + Send + 'static) -> Pending<T> {
    let bound = Bound::new(budget.heap);
    let (done, result) = mpsc::sync_channel(1);
    let (running, started) = mpsc::sync_channel(1);
    let worker = std::thread::Builder::new().name(name.to_owned()).stack_size(STACK).spawn(move || {
        let _ = running.send(());
        bound.bind_this_thread();
        let _gone = done.send(work());
    });
    // Once the thread runs, std has mapped its signal stack, which it cannot do without a
    // panic: the caller's next allocations (a recipe parsed beside the schema) must not take
    // the last of the address space first (a race tests/hostile.rs met under a limit).
    let worker = worker.ok().filter(|_| started.recv().is_ok());
    Pending { budget, bound, result, worker }
}

/// Work started by [`spawn`].
pub struct Pending<T> {
    budget: Budget,
    bound: &'static Bound,
    result: mpsc::Receiver<T>,
    /// `None` when no thread could be started.
    worker: Option<std::thread::JoinHandle<()>>,
}

impl<T> Pending<T> {
    /// Its result, or why there is none: the first limit reached, or a stop signal, ends the
    /// wait and gives the work up.
    pub fn wait(self) -> Result<T, Overrun> {
        let Some(worker) = self.worker else { return Err(Overrun::NoThread) };
        let clock = cpu_clock(&worker);
        let overrun = loop {
            match self.result.recv_timeout(POLL) {
                Ok(value) => return Ok(value),
                // The work panicked (the shipped binary aborts first): the caller's thread panics too.
                Err(mpsc::RecvTimeoutError::Disconnected) => match worker.join() {
                    Err(panic) => std::panic::resume_unwind(panic),
                    Ok(()) => unreachable!("the worker sends before it ends"),
                },
                Err(mpsc::RecvTimeoutError::Timeout) if self.bound.went_over() => {
                    break Overrun::Heap(self.budget.heap)
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
            }
            if let Some(signal) = shutdown::stop_requested() {
                break Overrun::Stopped(signal);
            }
            if clock.is_some_and(|clock| cpu_time(clock) > self.budget.cpu) {
                break Overrun::Cpu(self.budget.cpu);
            }
        };
        self.bound.abandon();
        Err(overrun)
    }
}

/// Where long work without allocations looks whether it was given up (and stops for good if
/// so). Free outside bounded work.
pub fn checkpoint() {
    if let Some(bound) = Bound::of_this_thread() {
        bound.checkpoint();
    }
}

/// The CPU-time clock of the worker's thread.
fn cpu_clock(worker: &std::thread::JoinHandle<()>) -> Option<libc::clockid_t> {
    use std::os::unix::thread::JoinHandleExt;
    let mut clock: libc::clockid_t = 0;
    // SAFETY: the thread is alive until joined or detached, and the handle is held meanwhile.
    let rc = unsafe { libc::pthread_getcpuclockid(worker.as_pthread_t(), &mut clock) };
    (rc == 0).then_some(clock)
}

fn cpu_time(clock: libc::clockid_t) -> Duration {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: writes into a live timespec.
    if unsafe { libc::clock_gettime(clock, &mut now) } != 0 {
        return Duration::ZERO;
    }
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMALL: Budget = Budget { cpu: Duration::from_millis(100), heap: 1 << 20 };

    #[test]
    fn work_within_its_budget_returns_its_value() {
        assert_eq!(run("test", SMALL, || 6 * 7), Ok(42));
    }

    #[test]
    fn work_without_end_is_given_up_at_its_cpu_budget_and_stops() {
        let spins = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let counted = spins.clone();
        let out = run("test", SMALL, move || loop {
            counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            checkpoint();
        });
        assert_eq!(out, Err(Overrun::Cpu(SMALL.cpu)));
        std::thread::sleep(Duration::from_millis(20));
        let after = spins.load(std::sync::atomic::Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(spins.load(std::sync::atomic::Ordering::Relaxed), after, "the worker stopped");
    }

    #[test]
    fn the_messages_say_which_limit() {
        assert_eq!(Overrun::Cpu(Duration::from_millis(300)).to_string(), "took more than 300 ms of CPU time");
        assert_eq!(Overrun::Heap(24 << 20).to_string(), "needed more than 24 MiB of memory");
        assert_eq!(Overrun::Stopped(libc::SIGTERM).to_string(), "was stopped by SIGTERM");
    }
}
