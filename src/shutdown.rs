//! Stopping early, cleanly. SIGTERM, SIGINT and SIGHUP set a flag that the boot path checks
//! between steps (and while it waits); a panic or an allocation failure runs the registered
//! undo actions (unmount, detach the loop device, remove a staging directory) before the
//! process ends.
//!
//! Why not `Drop`: the shipped binary is built with `panic = "abort"` (0.18 MiB smaller than
//! with unwinding, as measured in Cargo.toml: the landing pads go, the `.eh_frame` tables stay
//! for backtraces), so no destructor runs during a panic.
//! Values that hold something the system must not keep (a mount, a loop device, a staging
//! directory) register an undo action for as long as they live; their `Drop` does the same
//! work on the normal path and unregisters. This module knows nothing of those values: an
//! action is a closure.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::Mutex;

/// Something to undo if the process has to stop in a hurry.
type Undo = Box<dyn FnOnce() + Send>;

/// The undo actions of live values.
struct Registry {
    actions: Mutex<Vec<(u64, Undo)>>,
    next_id: AtomicU64,
}

static REGISTRY: Registry = Registry::new();

impl Registry {
    const fn new() -> Registry {
        Registry { actions: Mutex::new(Vec::new()), next_id: AtomicU64::new(1) }
    }

    fn register(&'static self, undo: Undo) -> Registration {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.actions.lock().unwrap_or_else(|e| e.into_inner()).push((id, undo));
        Registration { registry: self, id }
    }

    /// Takes every action, newest first (a mount before its loop device).
    fn take_all(&self) -> Vec<Undo> {
        let mut actions = match self.actions.try_lock() {
            Ok(guard) => guard,
            Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
            // Held by the thread that is stopping us: nothing safe to do.
            Err(std::sync::TryLockError::WouldBlock) => return Vec::new(),
        };
        actions.drain(..).map(|(_, undo)| undo).rev().collect()
    }
}

/// An undo action registered for as long as this value lives.
pub struct Registration {
    registry: &'static Registry,
    id: u64,
}

impl std::fmt::Debug for Registration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Registration").field(&self.id).finish()
    }
}

/// Registers `undo`; it runs only if the process stops in a hurry before the registration is
/// dropped.
pub fn register(undo: impl FnOnce() + Send + 'static) -> Registration {
    REGISTRY.register(Box::new(undo))
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.registry.actions.lock().unwrap_or_else(|e| e.into_inner()).retain(|(id, _)| *id != self.id);
    }
}

/// Runs every registered undo action, newest first.
pub fn undo_all() {
    for action in REGISTRY.take_all() {
        action();
    }
}

static STOP_SIGNAL: AtomicI32 = AtomicI32::new(0);
static HANDLERS_INSTALLED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(signal: i32) {
    // Only an atomic store: async-signal-safe.
    STOP_SIGNAL.store(signal, Ordering::SeqCst);
}

/// Makes SIGTERM, SIGINT and SIGHUP request a stop instead of killing the process outright.
pub fn install_signal_handlers() {
    if HANDLERS_INSTALLED.swap(true, Ordering::SeqCst) {
        return;
    }
    for signal in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
        // SAFETY: the handler only stores into an atomic. SA_RESTART: interrupted system calls
        // resume, and the flag is checked between steps.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_signal as *const () as usize;
            action.sa_flags = libc::SA_RESTART;
            libc::sigaction(signal, &action, std::ptr::null_mut());
        }
    }
}

/// The signal that asked the dispatcher to stop, if one did.
pub fn stop_requested() -> Option<i32> {
    match STOP_SIGNAL.load(Ordering::SeqCst) {
        0 => None,
        signal => Some(signal),
    }
}

/// The signal's name, for messages.
pub fn signal_name(signal: i32) -> &'static str {
    match signal {
        libc::SIGTERM => "SIGTERM",
        libc::SIGINT => "SIGINT",
        libc::SIGHUP => "SIGHUP",
        _ => "a signal",
    }
}

/// After a clean stop: dies of the same signal with its default action, so that systemd and
/// shells see what really happened.
pub fn die_of(signal: i32) -> ! {
    // SAFETY: restoring the default disposition and raising are async-signal-safe.
    unsafe {
        libc::signal(signal, libc::SIG_DFL);
        libc::raise(signal);
    }
    std::process::exit(128 + signal)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_are_taken_newest_first_and_dropped_ones_never() {
        static LOCAL: Registry = Registry::new();
        let ran = std::sync::Arc::new(Mutex::new(Vec::new()));
        let action = |name: &'static str| {
            let ran = ran.clone();
            Box::new(move || ran.lock().unwrap().push(name)) as Undo
        };
        let first = LOCAL.register(action("first"));
        let dropped = LOCAL.register(action("dropped"));
        let _last = LOCAL.register(action("last"));
        drop(dropped);
        for undo in LOCAL.take_all() {
            undo();
        }
        assert_eq!(*ran.lock().unwrap(), ["last", "first"]);
        assert!(LOCAL.take_all().is_empty(), "each action runs once");
        drop(first);
    }
}
