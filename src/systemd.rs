//! systemd over the system bus (SPEC §6.4): `LoadUnit` → `LoadState`, then
//! `StartUnit(target, "replace")`, without waiting for the job (the target's units are ordered
//! after the dispatcher; waiting would deadlock).
//!
//! Every call is bounded: the bus lives on a worker thread and each request waits at most the
//! timeout for its answer, so a bus that accepts the connection and never answers costs the
//! timeout, not the boot. `DBUS_SYSTEM_BUS_ADDRESS` is honoured (zbus reads it).
//!
//! Errors carry D-Bus error *names* (`org.freedesktop.systemd1.NoSuchUnit`), never their
//! messages, which quote the unit name, a recipe value.

use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use zbus::blocking::Connection;
use zbus::zvariant::{OwnedObjectPath, OwnedValue};
use zbus::DBusError;

const DESTINATION: &str = "org.freedesktop.systemd1";
const MANAGER_PATH: &str = "/org/freedesktop/systemd1";
const MANAGER: &str = "org.freedesktop.systemd1.Manager";

type Reply = Sender<Result<String>>;

enum Request {
    LoadState(String, Reply),
    Start(String, Reply),
}

/// A handle on systemd. Connects on first use.
pub struct Systemd {
    requests: Sender<Request>,
    timeout: Duration,
}

impl Systemd {
    pub fn new(timeout: Duration) -> Systemd {
        let (requests, inbox) = mpsc::channel();
        std::thread::Builder::new()
            .name("system-bus".into())
            .spawn(move || serve(inbox, timeout))
            .expect("a thread can be spawned");
        Systemd { requests, timeout }
    }

    /// The unit's `LoadState` (`loaded`, `not-found`, `masked`, ...).
    pub fn load_state(&self, unit: &str) -> Result<String> {
        self.ask(|reply| Request::LoadState(unit.to_owned(), reply))
    }

    /// Queues the unit's start job; returns the job's object path.
    pub fn start(&self, unit: &str) -> Result<String> {
        self.ask(|reply| Request::Start(unit.to_owned(), reply))
    }

    /// Sends a request and waits for its answer, at most the timeout, and no longer once a
    /// stop was requested.
    fn ask(&self, request: impl FnOnce(Reply) -> Request) -> Result<String> {
        let (reply, answer) = mpsc::channel();
        self.requests.send(request(reply)).map_err(|_| anyhow!("the bus thread is gone"))?;
        let deadline = Instant::now() + self.timeout;
        loop {
            let slice = deadline.saturating_duration_since(Instant::now()).min(Duration::from_millis(100));
            match answer.recv_timeout(slice) {
                Ok(result) => return result,
                Err(RecvTimeoutError::Disconnected) => bail!("the bus thread is gone"),
                Err(RecvTimeoutError::Timeout) if Instant::now() >= deadline => {
                    bail!("no answer within {} s", self.timeout.as_secs_f32())
                }
                Err(RecvTimeoutError::Timeout) if crate::shutdown::stop_requested().is_some() => {
                    bail!("stopped while waiting for the bus")
                }
                Err(RecvTimeoutError::Timeout) => {}
            }
        }
    }
}

/// The worker: one connection, requests in order.
fn serve(inbox: Receiver<Request>, timeout: Duration) {
    let connection = zbus::blocking::connection::Builder::system()
        .map(|builder| builder.method_timeout(timeout))
        .and_then(|builder| builder.build());
    for request in inbox {
        let (result, reply) = match (&connection, request) {
            (Err(e), Request::LoadState(_, reply) | Request::Start(_, reply)) => (Err(describe(e)), reply),
            (Ok(bus), Request::LoadState(unit, reply)) => (load_state(bus, &unit), reply),
            (Ok(bus), Request::Start(unit, reply)) => (start(bus, &unit), reply),
        };
        let _ = reply.send(result);
    }
}

fn load_state(bus: &Connection, unit: &str) -> Result<String> {
    let path: OwnedObjectPath = bus
        .call_method(Some(DESTINATION), MANAGER_PATH, Some(MANAGER), "LoadUnit", &(unit,))
        .and_then(|reply| reply.body().deserialize())
        .map_err(|e| describe(&e))?;
    let value: OwnedValue = bus
        .call_method(
            Some(DESTINATION),
            &path,
            Some("org.freedesktop.DBus.Properties"),
            "Get",
            &("org.freedesktop.systemd1.Unit", "LoadState"),
        )
        .and_then(|reply| reply.body().deserialize())
        .map_err(|e| describe(&e))?;
    String::try_from(value).map_err(|_| anyhow!("LoadState is not a string"))
}

fn start(bus: &Connection, unit: &str) -> Result<String> {
    let job: OwnedObjectPath = bus
        .call_method(Some(DESTINATION), MANAGER_PATH, Some(MANAGER), "StartUnit", &(unit, "replace"))
        .and_then(|reply| reply.body().deserialize())
        .map_err(|e| describe(&e))?;
    Ok(job.as_str().to_owned())
}

/// An error in words that never quote a recipe value.
fn describe(error: &zbus::Error) -> anyhow::Error {
    match error {
        zbus::Error::MethodError(name, _, _) => anyhow!("{name}"),
        zbus::Error::FDO(e) => anyhow!("{}", e.name()),
        zbus::Error::InputOutput(e) | zbus::Error::Connection(e, _) => {
            anyhow!("cannot reach the system bus: {}", e.kind())
        }
        zbus::Error::Address(_) => anyhow!("the system bus address is not valid"),
        zbus::Error::Handshake(_) => anyhow!("the system bus refused the connection"),
        _ => anyhow!("the system bus answered unexpectedly"),
    }
}
