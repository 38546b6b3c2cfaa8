//! The system bus through zbus, every step bounded. zbus speaks the protocol (authentication,
//! `Hello`, messages, replies); this module decides how long each step may take and whether a
//! requested stop ends it. zbus itself would wait without end in two places: `connect()` on a
//! socket whose listen backlog is full, and any reply a peer never sends. So the socket is
//! connected here, non-blocking and retried until the deadline, then handed to zbus; and every
//! future of zbus (the handshake and `Hello`, each call and its reply) is raced against the
//! deadline and a requested stop, and dropped when either comes first.
//!
//! What the bus says reaches the dispatcher's words only as D-Bus error *names* and values of
//! checked types (an object path is a valid object path, or the reply is refused): never a
//! message text or a raw string of the peer.

use std::collections::VecDeque;
use std::future::Future;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::net::{SocketAddr, UnixStream};
use std::pin::pin;
use std::task::Poll;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use async_io::Timer;
use zbus::export::futures_core::Stream;
use zbus::zvariant::DynamicDeserialize;

/// Where the system bus listens when `DBUS_SYSTEM_BUS_ADDRESS` does not say.
const DEFAULT_ADDRESS: &str = "unix:path=/run/dbus/system_bus_socket";

/// How often a wait wakes up to look at the deadline and a requested stop.
const SLICE: Duration = Duration::from_millis(50);

/// When a call must be over: an instant, and the timeout it came from (for messages).
#[derive(Debug, Clone, Copy)]
pub struct Deadline {
    pub at: Instant,
    pub timeout: Duration,
}

impl Deadline {
    pub fn after(timeout: Duration) -> Deadline {
        Deadline { at: Instant::now() + timeout, timeout }
    }

    pub fn passed(&self) -> bool {
        Instant::now() >= self.at
    }

    fn missed(&self, what: &str) -> anyhow::Error {
        anyhow!("{what}: no answer within {} s", self.timeout.as_secs_f32())
    }
}

/// Why a call failed: the bus could not be reached or kept (worth a reconnection), it
/// answered with an error, or it answered with a reply the dispatcher cannot read.
#[derive(Debug)]
pub enum CallError {
    Connection(anyhow::Error),
    Answer(anyhow::Error),
    Unreadable(anyhow::Error),
}

impl From<CallError> for anyhow::Error {
    fn from(e: CallError) -> anyhow::Error {
        match e {
            CallError::Connection(e) | CallError::Answer(e) | CallError::Unreadable(e) => e,
        }
    }
}

/// A stop was requested while waiting for the bus.
#[derive(Debug)]
pub struct Stopped;

impl std::fmt::Display for Stopped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("stopped while waiting for the system bus")
    }
}

impl std::error::Error for Stopped {}

/// One method call.
pub struct Call<'a> {
    pub destination: &'a str,
    pub path: &'a str,
    pub interface: &'a str,
    pub member: &'a str,
}

/// A connection to the system bus, authenticated and named (`Hello` answered).
pub struct Connection {
    connection: zbus::Connection,
}

impl Connection {
    /// Connects to the system bus, authenticates and says `Hello`, within `deadline`.
    pub fn system(deadline: Deadline, stop: &dyn Fn() -> bool) -> Result<Connection> {
        let address = std::env::var("DBUS_SYSTEM_BUS_ADDRESS").unwrap_or_else(|_| DEFAULT_ADDRESS.to_owned());
        let socket = socket_address(&address)?;
        let stream = connect(&socket, deadline, stop)?;
        let build = zbus::connection::Builder::async_io_unix_stream(stream).build();
        let connection = bounded(build, deadline, stop)
            .map_err(|cut| cut.into_error(deadline, "the system bus did not let the dispatcher in"))?
            .map_err(|e| anyhow!("the system bus refused the connection ({})", describe(&e)))?;
        Ok(Connection { connection })
    }

    /// Calls a method and returns the reply's body as `R`, or the D-Bus error's name. Never
    /// its message, which may quote the arguments. `signals` (a subscription on this
    /// connection) are taken in while the reply is awaited: zbus stops reading the socket while
    /// a subscription's queue is full, and the reply would then never come.
    pub fn call<R>(
        &self,
        call: &Call<'_>,
        args: &(impl serde::Serialize + zbus::zvariant::DynamicType),
        deadline: Deadline,
        stop: &dyn Fn() -> bool,
        signals: Option<&mut Signals>,
    ) -> Result<R, CallError>
    where
        R: for<'d> DynamicDeserialize<'d>,
    {
        let reply =
            self.connection.call_method(Some(call.destination), call.path, Some(call.interface), call.member, args);
        let reply = wait(reply, deadline, stop, signals, false)
            .map_err(|cut| {
                CallError::Connection(cut.into_error(deadline, &format!("{} on the system bus", call.member)))
            })?
            .map_err(|e| match e {
                zbus::Error::MethodError(..) => CallError::Answer(anyhow!("{}", describe(&e))),
                e => CallError::Connection(anyhow!("{} on the system bus failed ({})", call.member, describe(&e))),
            })?;
        reply.body().deserialize().map_err(|_| {
            CallError::Unreadable(anyhow!("systemd answered {} with a reply of the wrong type", call.member))
        })
    }

    /// The messages of `rule` (a D-Bus match rule), from now on: the bus is asked to route
    /// them here (`AddMatch`) before this returns.
    pub fn subscribe(&self, rule: &str, deadline: Deadline, stop: &dyn Fn() -> bool) -> Result<Signals, CallError> {
        let rule = zbus::MatchRule::try_from(rule).map_err(|e| CallError::Unreadable(anyhow!("a match rule: {e}")))?;
        let stream = zbus::MessageStream::for_match_rule(rule, &self.connection, Some(SIGNALS_QUEUED));
        let stream = bounded(stream, deadline, stop)
            .map_err(|cut| CallError::Connection(cut.into_error(deadline, "AddMatch on the system bus")))?
            .map_err(|e| CallError::Connection(anyhow!("AddMatch on the system bus failed ({})", describe(&e))))?;
        Ok(Signals { stream, queued: VecDeque::new(), broken: None })
    }
}

/// The most messages a subscription holds that were not taken yet; the oldest go first. The
/// follower looks at the whole queue again after any of them, so a lost one costs nothing.
const SIGNALS_QUEUED: usize = 1024;

/// The messages of one subscription ([`Connection::subscribe`]).
pub struct Signals {
    stream: zbus::MessageStream,
    queued: VecDeque<zbus::Message>,
    /// Why the stream ended: the connection broke.
    broken: Option<String>,
}

/// What a wait for a message gave.
pub enum Next {
    Message(zbus::Message),
    /// Nothing came before the wait's end.
    Quiet,
    /// A stop was requested.
    Stopped,
}

impl Signals {
    /// The next message, waiting until `until` at most; a stop ends the wait.
    pub fn next(&mut self, until: Deadline, stop: &dyn Fn() -> bool) -> Result<Next, CallError> {
        if let Some(message) = self.queued.pop_front() {
            return Ok(Next::Message(message));
        }
        let waited = wait(std::future::pending::<()>(), until, stop, Some(&mut *self), true);
        if let Some(message) = self.queued.pop_front() {
            return Ok(Next::Message(message));
        }
        if let Some(why) = &self.broken {
            return Err(CallError::Connection(anyhow!("the system bus connection ended ({why})")));
        }
        match waited {
            Err(Cut::Stopped) => Ok(Next::Stopped),
            Err(Cut::TimedOut) | Ok(()) => Ok(Next::Quiet),
        }
    }

    /// The oldest message taken in, without waiting.
    pub fn queued(&mut self) -> Option<zbus::Message> {
        self.queued.pop_front()
    }

    /// Takes what has come in without waiting; registers `cx` to be woken by the next one.
    fn drain(&mut self, cx: &mut std::task::Context<'_>) {
        while self.broken.is_none() {
            match std::pin::Pin::new(&mut self.stream).poll_next(cx) {
                Poll::Ready(Some(Ok(message))) => {
                    if self.queued.len() == SIGNALS_QUEUED {
                        self.queued.pop_front();
                    }
                    self.queued.push_back(message);
                }
                Poll::Ready(Some(Err(e))) => self.broken = Some(describe(&e)),
                Poll::Ready(None) => self.broken = Some("closed".to_owned()),
                Poll::Pending => return,
            }
        }
    }
}

/// How a zbus error is told: in the dispatcher's own words, from its kind only. zbus's texts
/// may quote what the peer sent (an error's message, a malformed value).
fn describe(error: &zbus::Error) -> String {
    match error {
        zbus::Error::MethodError(name, _, _) => name.as_str().to_owned(),
        zbus::Error::InputOutput(e) => format!("cannot talk to the system bus: {}", e.kind()),
        zbus::Error::Handshake(_) => "the authentication failed".to_owned(),
        _ => "the system bus sent what the dispatcher cannot read".to_owned(),
    }
}

/// What ended a wait before its future did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    TimedOut,
    Stopped,
}

impl Cut {
    fn into_error(self, deadline: Deadline, what: &str) -> anyhow::Error {
        match self {
            Cut::TimedOut => deadline.missed(what),
            Cut::Stopped => anyhow::Error::new(Stopped),
        }
    }
}

/// Runs `future` on this thread until it is done, the deadline passes or a stop is requested,
/// whichever comes first; the future is dropped (its socket with it) when it does not finish.
fn bounded<T>(future: impl Future<Output = T>, deadline: Deadline, stop: &dyn Fn() -> bool) -> Result<T, Cut> {
    wait(future, deadline, stop, None, false)
}

/// [`bounded`], taking in the messages of `signals` meanwhile; with `until_signal`, a message
/// taken in (or the subscription's end) also ends the wait, as the deadline does.
fn wait<T>(
    future: impl Future<Output = T>,
    deadline: Deadline,
    stop: &dyn Fn() -> bool,
    mut signals: Option<&mut Signals>,
    until_signal: bool,
) -> Result<T, Cut> {
    let mut future = pin!(future);
    let mut tick = Timer::at(deadline.at.min(Instant::now() + SLICE));
    async_io::block_on(std::future::poll_fn(|cx| {
        if let Some(signals) = signals.as_deref_mut() {
            signals.drain(cx);
        }
        if let Poll::Ready(value) = future.as_mut().poll(cx) {
            return Poll::Ready(Ok(value));
        }
        if until_signal && signals.as_deref().is_some_and(|s| s.broken.is_some() || !s.queued.is_empty()) {
            return Poll::Ready(Err(Cut::TimedOut));
        }
        loop {
            if stop() {
                return Poll::Ready(Err(Cut::Stopped));
            }
            if deadline.passed() {
                return Poll::Ready(Err(Cut::TimedOut));
            }
            if std::pin::Pin::new(&mut tick).poll(cx).is_pending() {
                return Poll::Pending;
            }
            tick.set_at(deadline.at.min(Instant::now() + SLICE));
        }
    }))
}

/// Connects to `socket` without ever blocking: a bus whose listen backlog is full refuses
/// with `EAGAIN` at once, and is asked again until the deadline or a stop.
fn connect(socket: &SocketAddr, deadline: Deadline, stop: &dyn Fn() -> bool) -> Result<UnixStream> {
    use rustix::net::{AddressFamily, SocketFlags, SocketType};
    let place = || match (socket.as_pathname(), socket.as_abstract_name()) {
        (Some(path), _) => path.display().to_string(),
        _ => "its abstract address".to_owned(),
    };
    // The two an image builder meets: no bus at all (dbus not installed, or not started), and
    // a bus that is down. Named as such, not as a silence.
    let cant = |e: rustix::io::Errno| {
        match e {
        rustix::io::Errno::NOENT => anyhow!(
            "there is no system bus: {} does not exist (the image needs dbus, or another system bus, installed and started)",
            place()
        ),
        rustix::io::Errno::CONNREFUSED => anyhow!("the system bus at {} refuses connections (is dbus running?)", place()),
        e => anyhow!("cannot reach the system bus: {}", std::io::Error::from(e).kind()),
    }
    };
    loop {
        let fd = rustix::net::socket_with(
            AddressFamily::UNIX,
            SocketType::STREAM,
            SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
            None,
        )
        .map_err(cant)?;
        let target = match (socket.as_pathname(), socket.as_abstract_name()) {
            (Some(path), _) => rustix::net::SocketAddrUnix::new(path),
            (None, Some(name)) => rustix::net::SocketAddrUnix::new_abstract_name(name),
            _ => bail!("the system bus address is not valid"),
        }
        .map_err(cant)?;
        match rustix::net::connect(&fd, &target) {
            Ok(()) => return Ok(UnixStream::from(fd)),
            Err(rustix::io::Errno::AGAIN | rustix::io::Errno::INTR) => {}
            Err(e) => return Err(cant(e)),
        }
        if stop() {
            return Err(anyhow::Error::new(Stopped));
        }
        if deadline.passed() {
            return Err(deadline.missed("the system bus accepted no connection (its listen backlog is full)"));
        }
        std::thread::sleep(SLICE.min(deadline.at.saturating_duration_since(Instant::now())));
    }
}

/// The socket of a D-Bus address: the first `unix:path=` or `unix:abstract=` of a
/// `;`-separated list, its value unescaped (`%XX`). Ours, not zbus's `Address`: zbus 5.19 keeps
/// a unix path's `%XX` escapes as they are, and we connect the socket ourselves anyway.
fn socket_address(address: &str) -> Result<SocketAddr> {
    for entry in address.split(';') {
        let Some(params) = entry.strip_prefix("unix:") else { continue };
        for param in params.split(',') {
            if let Some(path) = param.strip_prefix("path=") {
                let path = std::ffi::OsString::from_vec(unescape(path)?);
                return SocketAddr::from_pathname(path).context("the system bus address is not valid");
            }
            if let Some(name) = param.strip_prefix("abstract=") {
                return SocketAddr::from_abstract_name(unescape(name)?).context("the system bus address is not valid");
            }
        }
    }
    bail!("the system bus address is not valid (no unix:path= or unix:abstract=)")
}

fn unescape(value: &str) -> Result<Vec<u8>> {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = value.get(i + 1..i + 3).context("the system bus address is not valid")?;
            out.push(u8::from_str_radix(hex, 16).context("the system bus address is not valid")?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_name_a_path_or_an_abstract_socket() {
        let path = socket_address("unix:path=/run/dbus/system_bus_socket,guid=0123456789abcdef0123456789abcdef");
        assert_eq!(path.unwrap().as_pathname(), Some(std::path::Path::new("/run/dbus/system_bus_socket")));
        let escaped = socket_address("tcp:host=x,port=1;unix:path=/tmp/with%20space").unwrap();
        assert_eq!(escaped.as_pathname(), Some(std::path::Path::new("/tmp/with space")));
        let abstract_ = socket_address("unix:abstract=/tmp/dbus-x").unwrap();
        assert_eq!(abstract_.as_abstract_name(), Some(&b"/tmp/dbus-x"[..]));
        assert!(socket_address("tcp:host=localhost,port=1").is_err());
        assert!(socket_address("unix:path=/x%2").is_err());
    }

    #[test]
    fn a_wait_ends_at_the_deadline_or_at_a_stop() {
        let never = std::future::pending::<()>();
        let deadline = Deadline::after(Duration::from_millis(120));
        assert_eq!(bounded(never, deadline, &|| false), Err(Cut::TimedOut));
        assert!(deadline.passed());
        let deadline = Deadline::after(Duration::from_secs(60));
        assert_eq!(bounded(std::future::pending::<()>(), deadline, &|| true), Err(Cut::Stopped));
        assert_eq!(bounded(async { 7 }, deadline, &|| true), Ok(7), "a finished future wins over a stop");
    }
}
