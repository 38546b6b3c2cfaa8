//! systemd over the system bus (SPEC §6.4): `LoadUnit` → `LoadState`, then
//! `StartUnit(target, "replace")`, without waiting for the job (the target's units are ordered
//! after the dispatcher; waiting would deadlock).
//!
//! Every call is bounded by the timeout, and gives up early when a stop was requested, so a
//! bus that accepts the connection and never answers costs the timeout, not the boot. A bus
//! that goes away mid-call (dbus restarted during the boot) is connected to again, once per
//! call, and a systemd not back on it yet is asked again, within the same timeout: every call
//! the dispatcher makes may be repeated (a repeated `StartUnit` in "replace" mode finds the
//! job already queued).
//!
//! Errors carry D-Bus error *names* (`org.freedesktop.systemd1.NoSuchUnit`), never their
//! messages, which quote the unit name, a recipe value. The protocol is zbus's; the bounds
//! are [`bus`]'s.
//!
//! After the start, `follow` follows the job to its end ([`follow`] over the bus, [`task`] the
//! judgement, SPEC §6d).

pub mod bus;
pub mod follow;
pub mod task;

use std::cell::{Cell, RefCell};
use std::time::{Duration, Instant};

use anyhow::Result;
use tracing::info;
use zbus::zvariant::{DynamicDeserialize, DynamicType, OwnedObjectPath, OwnedValue};

use crate::checks::host::NameRefused;
use bus::{Call, CallError, Connection, Deadline};

const DESTINATION: &str = "org.freedesktop.systemd1";
const MANAGER_PATH: &str = "/org/freedesktop/systemd1";
const MANAGER: &str = "org.freedesktop.systemd1.Manager";

/// What systemd answers to a unit name it cannot parse (too long, not a unit name).
const INVALID_ARGS: &str = "org.freedesktop.DBus.Error.InvalidArgs";

/// How long to wait between attempts to reach a bus that is restarting.
pub(crate) const RECONNECT_PAUSE: Duration = Duration::from_millis(100);

/// A handle on systemd. Connects on first use.
pub struct Systemd {
    timeout: Duration,
    connection: RefCell<Option<Connection>>,
    /// Time spent connecting and waiting for answers.
    busy: Cell<Duration>,
}

/// A `StartUnit` that did not give a job path.
#[derive(Debug)]
pub struct StartError {
    pub error: anyhow::Error,
    /// The call was made and no error came back: systemd may have queued the job (the reply
    /// was cut off by the timeout or a stop, or was unreadable).
    pub maybe_queued: bool,
}

impl Systemd {
    pub fn new(timeout: Duration) -> Systemd {
        Systemd { timeout, connection: RefCell::new(None), busy: Cell::new(Duration::ZERO) }
    }

    /// How long the bus has kept the dispatcher waiting, connection included.
    pub fn busy(&self) -> Duration {
        self.busy.get()
    }

    /// The unit's `LoadState` (`loaded`, `not-found`, `masked`, ...). A name systemd refuses
    /// is a [`NameRefused`] error.
    pub fn load_state(&self, unit: &str) -> Result<String> {
        let load = Call { destination: DESTINATION, path: MANAGER_PATH, interface: MANAGER, member: "LoadUnit" };
        let path: OwnedObjectPath = match self.call(&load, &(unit,), &Cell::new(false)) {
            Err(CallError::Answer(e)) if e.to_string() == INVALID_ARGS => return Err(anyhow::Error::new(NameRefused)),
            other => other?,
        };
        let get = Call {
            destination: DESTINATION,
            path: path.as_str(),
            interface: "org.freedesktop.DBus.Properties",
            member: "Get",
        };
        let state: OwnedValue = self.call(&get, &("org.freedesktop.systemd1.Unit", "LoadState"), &Cell::new(false))?;
        String::try_from(state)
            .map_err(|_| anyhow::anyhow!("systemd answered LoadState with a value of the wrong type"))
    }

    /// Queues the unit's start job; returns the job's object path (valid as D-Bus says, so
    /// safe to print).
    pub fn start(&self, unit: &str) -> Result<String, StartError> {
        let start = Call { destination: DESTINATION, path: MANAGER_PATH, interface: MANAGER, member: "StartUnit" };
        let asked = Cell::new(false);
        match self.call::<OwnedObjectPath>(&start, &(unit, "replace"), &asked) {
            Ok(job) => Ok(job.as_str().to_owned()),
            Err(CallError::Answer(error)) => Err(StartError { error, maybe_queued: false }),
            Err(CallError::Connection(error) | CallError::Unreadable(error)) => {
                Err(StartError { error, maybe_queued: asked.get() })
            }
        }
    }

    /// One call within the timeout: on the connection there is, or on a new one if that one
    /// broke (once). `asked` is set once the call is on its way to systemd.
    fn call<R>(
        &self,
        call: &Call<'_>,
        args: &(impl serde::Serialize + DynamicType),
        asked: &Cell<bool>,
    ) -> Result<R, CallError>
    where
        R: for<'d> DynamicDeserialize<'d>,
    {
        let started = Instant::now();
        let deadline = Deadline::after(self.timeout);
        let stop = || crate::shutdown::stop_requested().is_some();
        let mut connection = self.connection.borrow_mut();
        let mut reconnected = false;
        let mut asked_again = false;
        let result = loop {
            if connection.is_none() {
                match connect(deadline, &stop) {
                    Ok(open) => *connection = Some(open),
                    Err(e) => break Err(CallError::Connection(e)),
                }
            }
            let open = connection.as_ref().expect("connected just above");
            asked.set(true);
            match open.call(call, args, deadline, &stop, None) {
                Ok(value) => break Ok(value),
                // systemd not (yet, again) on the bus: it reclaims its name right after a
                // restart of the bus. Asked again until the deadline.
                Err(CallError::Answer(e)) if is_transient(&e) && !deadline.passed() && !stop() => {
                    if !asked_again {
                        info!(phase = "systemd", "systemd is not on the system bus ({e}); asking again");
                        asked_again = true;
                    }
                    std::thread::sleep(RECONNECT_PAUSE);
                }
                Err(CallError::Connection(e)) if !reconnected && !deadline.passed() && !stop() => {
                    info!(phase = "systemd", "the connection to the system bus broke ({e:#}); connecting again");
                    *connection = None;
                    reconnected = true;
                }
                Err(e) => break Err(e),
            }
        };
        self.busy.set(self.busy.get() + started.elapsed());
        result
    }
}

/// Whether a D-Bus error says that nobody owns systemd's name for now.
pub(crate) fn is_transient(error: &anyhow::Error) -> bool {
    let name = error.to_string();
    name == "org.freedesktop.DBus.Error.ServiceUnknown" || name == "org.freedesktop.DBus.Error.NameHasNoOwner"
}

/// Connects, trying again until the deadline while the bus is not there (restarting).
pub(crate) fn connect(deadline: Deadline, stop: &dyn Fn() -> bool) -> Result<Connection> {
    loop {
        match Connection::system(deadline, stop) {
            Ok(connection) => return Ok(connection),
            Err(e) if Instant::now() + RECONNECT_PAUSE >= deadline.at || stop() || e.is::<bus::Stopped>() => {
                return Err(e)
            }
            Err(_) => std::thread::sleep(RECONNECT_PAUSE),
        }
    }
}
