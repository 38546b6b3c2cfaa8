//! What `follow` asks systemd over the system bus (SPEC §6d): the manager's `JobRemoved`
//! signals, subscribed to before anything is looked at so that no end is missed; the job queue
//! (`ListJobs`); the units the target pulls in and their states. Every call is bounded as
//! [`super::bus`] bounds them, by a deadline and a stop the caller gives (the last look after
//! SIGTERM must not be cut short by that very signal). A connection that breaks is the
//! caller's to make again: connect, subscribe again, look again (a signal may have been missed
//! meanwhile).

use anyhow::anyhow;
use zbus::zvariant::{OwnedObjectPath, OwnedValue};

use super::bus::{Call, CallError, Connection, Deadline, Next, Signals};
use super::task::Job;
use super::{is_transient, DESTINATION, MANAGER, MANAGER_PATH};

/// The manager's `JobRemoved` signals, and no other message.
const JOB_REMOVED: &str =
    "type='signal',interface='org.freedesktop.systemd1.Manager',member='JobRemoved',path='/org/freedesktop/systemd1'";

/// A job that left systemd's queue, as `JobRemoved` tells it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Removed {
    pub job: String,
    pub unit: String,
    /// `done`, `canceled`, `timeout`, `failed`, `dependency`, `skipped`.
    pub result: String,
}

/// What a wait on the watch gave.
pub enum Event {
    Removed(Removed),
    /// Nothing before the wait's end.
    Quiet,
    Stopped,
}

/// One connection to the system bus, subscribed to the manager's `JobRemoved`.
pub struct Watch {
    connection: Connection,
    signals: Signals,
    /// systemd's unique name on this bus: a signal from any other sender is not systemd's.
    systemd: String,
}

impl Watch {
    /// Connects, subscribes to `JobRemoved` (the match first, then `Subscribe`, without which
    /// systemd sends no job signals) and learns systemd's unique name, all before `deadline`.
    /// systemd not on the bus yet (it joins a restarted bus a moment later) is asked again.
    pub fn open(deadline: Deadline, stop: &dyn Fn() -> bool) -> Result<Watch, CallError> {
        let connection = super::connect(deadline, stop).map_err(CallError::Connection)?;
        let signals = connection.subscribe(JOB_REMOVED, deadline, stop)?;
        let mut watch = Watch { connection, signals, systemd: String::new() };
        let subscribe = Call { destination: DESTINATION, path: MANAGER_PATH, interface: MANAGER, member: "Subscribe" };
        let owner = Call {
            destination: "org.freedesktop.DBus",
            path: "/org/freedesktop/DBus",
            interface: "org.freedesktop.DBus",
            member: "GetNameOwner",
        };
        loop {
            let subscribed = watch.connection.call::<()>(&subscribe, &(), deadline, stop, Some(&mut watch.signals));
            match subscribed {
                Ok(()) => break,
                // A subscription this connection already holds is as good.
                Err(CallError::Answer(e)) if e.to_string() == "org.freedesktop.systemd1.AlreadySubscribed" => break,
                Err(CallError::Answer(e)) if is_transient(&e) && !deadline.passed() && !stop() => {
                    std::thread::sleep(super::RECONNECT_PAUSE)
                }
                Err(e) => return Err(e),
            }
        }
        watch.systemd = watch.connection.call(&owner, &(DESTINATION,), deadline, stop, Some(&mut watch.signals))?;
        Ok(watch)
    }

    /// The next `JobRemoved` of systemd, waiting until `until`.
    pub fn next(&mut self, until: Deadline, stop: &dyn Fn() -> bool) -> Result<Event, CallError> {
        loop {
            let message = match self.signals.next(until, stop)? {
                Next::Message(message) => message,
                Next::Quiet => return Ok(Event::Quiet),
                Next::Stopped => return Ok(Event::Stopped),
            };
            if let Some(removed) = self.removed(&message) {
                return Ok(Event::Removed(removed));
            }
        }
    }

    /// The `JobRemoved` signals of systemd taken in so far, without waiting.
    pub fn taken(&mut self) -> Vec<Removed> {
        let messages: Vec<zbus::Message> = std::iter::from_fn(|| self.signals.queued()).collect();
        messages.iter().filter_map(|message| self.removed(message)).collect()
    }

    /// A message as systemd's `JobRemoved`, if it is one.
    fn removed(&self, message: &zbus::Message) -> Option<Removed> {
        let header = message.header();
        if header.sender().map(|s| s.as_str()) != Some(self.systemd.as_str()) {
            return None;
        }
        let (_, job, unit, result) = message.body().deserialize::<(u32, OwnedObjectPath, String, String)>().ok()?;
        Some(Removed { job: job.as_str().to_owned(), unit, result })
    }

    /// Every job in systemd's queue.
    pub fn jobs(&mut self, deadline: Deadline, stop: &dyn Fn() -> bool) -> Result<Vec<Job>, CallError> {
        let list = Call { destination: DESTINATION, path: MANAGER_PATH, interface: MANAGER, member: "ListJobs" };
        type Listed = Vec<(u32, String, String, String, OwnedObjectPath, OwnedObjectPath)>;
        let jobs: Listed = self.connection.call(&list, &(), deadline, stop, Some(&mut self.signals))?;
        Ok(jobs
            .into_iter()
            .map(|(_, unit, kind, _, path, _)| Job { unit, kind, path: path.as_str().to_owned() })
            .collect())
    }

    /// A property of `unit` (`ActiveState`, `Wants`, `After`, ...); one systemd does not know
    /// (`Upholds` before systemd 249) is empty.
    pub fn unit<T>(
        &mut self,
        unit: &str,
        property: &str,
        deadline: Deadline,
        stop: &dyn Fn() -> bool,
    ) -> Result<T, CallError>
    where
        T: TryFrom<OwnedValue> + Default,
    {
        let path = unit_path(unit);
        let get =
            Call { destination: DESTINATION, path: &path, interface: "org.freedesktop.DBus.Properties", member: "Get" };
        let args = ("org.freedesktop.systemd1.Unit", property);
        match self.connection.call::<OwnedValue>(&get, &args, deadline, stop, Some(&mut self.signals)) {
            Ok(value) => T::try_from(value).map_err(|_| {
                CallError::Unreadable(anyhow!("systemd answered {property} with a value of the wrong type"))
            }),
            Err(CallError::Answer(e)) if e.to_string() == "org.freedesktop.DBus.Error.UnknownProperty" => {
                Ok(T::default())
            }
            Err(e) => Err(e),
        }
    }
}

/// A unit's object path as systemd makes it (`unit_dbus_path`): every byte outside
/// `[A-Za-z0-9]` escaped as `_xx`. The unit's object exists for every loaded unit, and systemd
/// loads one whose path is asked for.
pub fn unit_path(unit: &str) -> String {
    let mut path = String::from("/org/freedesktop/systemd1/unit/");
    if unit.is_empty() {
        path.push('_');
    }
    for b in unit.bytes() {
        if b.is_ascii_alphanumeric() {
            path.push(b as char);
        } else {
            path.push_str(&format!("_{b:02x}"));
        }
    }
    path
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_paths_are_escaped_as_systemd_escapes_them() {
        assert_eq!(unit_path("install-linux.target"), "/org/freedesktop/systemd1/unit/install_2dlinux_2etarget");
        assert_eq!(
            unit_path("vm-test-record@a.target.service"),
            "/org/freedesktop/systemd1/unit/vm_2dtest_2drecord_40a_2etarget_2eservice"
        );
        assert_eq!(unit_path(""), "/org/freedesktop/systemd1/unit/_");
    }
}
