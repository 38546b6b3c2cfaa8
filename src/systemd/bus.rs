//! The D-Bus wire protocol, as much of it as the dispatcher's three calls need: connect to the
//! system bus (`DBUS_SYSTEM_BUS_ADDRESS`, else `/run/dbus/system_bus_socket`), authenticate
//! with EXTERNAL, `Hello`, then method calls whose arguments are strings and whose replies
//! are a string, an object path or a variant holding one. Everything blocks, each read and
//! write bounded by the call's deadline.
//!
//! Why not a D-Bus library: the one that fits (zbus) brought an async runtime, a worker thread
//! and about 0.5 MiB to a binary with a 4 MiB budget, for three calls. The mock systemd of the
//! tests still uses zbus: an independent implementation of the same protocol checks this one.
//!
//! What the bus sends is parsed defensively (bounded sizes, bounds-checked reads): a broken or
//! hostile peer gets an error, never a panic or an unbounded allocation.

use std::io::{self, Read, Write};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::net::{SocketAddr, UnixStream};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

/// Where the system bus listens when `DBUS_SYSTEM_BUS_ADDRESS` does not say.
const DEFAULT_ADDRESS: &str = "unix:path=/run/dbus/system_bus_socket";

/// The largest message accepted: the replies the dispatcher waits for are a few hundred bytes.
const MAX_MESSAGE: usize = 1 << 20;

/// How often a blocked read wakes up to look at the deadline and a requested stop.
const SLICE: Duration = Duration::from_millis(100);

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

    fn left(&self) -> Result<Duration> {
        match self.at.saturating_duration_since(Instant::now()) {
            left if left.is_zero() => bail!("no answer within {} s", self.timeout.as_secs_f32()),
            left => Ok(left),
        }
    }

    pub fn passed(&self) -> bool {
        Instant::now() >= self.at
    }
}

/// One method call: all arguments strings, as every call the dispatcher makes.
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    pub destination: &'a str,
    pub path: &'a str,
    pub interface: &'a str,
    pub member: &'a str,
    pub args: &'a [&'a str],
}

/// A connection to the system bus.
pub struct Connection {
    stream: UnixStream,
    serial: u32,
}

/// Why a call failed: the bus could not be reached or kept (worth a reconnection), or it
/// answered with an error.
#[derive(Debug)]
pub enum CallError {
    Connection(anyhow::Error),
    Answer(anyhow::Error),
}

impl From<CallError> for anyhow::Error {
    fn from(e: CallError) -> anyhow::Error {
        match e {
            CallError::Connection(e) | CallError::Answer(e) => e,
        }
    }
}

impl Connection {
    /// Connects to the system bus and says `Hello`, within `deadline`.
    pub fn system(deadline: Deadline, stop: &dyn Fn() -> bool) -> Result<Connection> {
        let address = std::env::var("DBUS_SYSTEM_BUS_ADDRESS").unwrap_or_else(|_| DEFAULT_ADDRESS.to_owned());
        let socket = socket_address(&address)?;
        let stream =
            UnixStream::connect_addr(&socket).map_err(|e| anyhow!("cannot reach the system bus: {}", e.kind()))?;
        let mut connection = Connection { stream, serial: 0 };
        connection.authenticate(deadline, stop)?;
        connection
            .call(
                &Call {
                    destination: "org.freedesktop.DBus",
                    path: "/org/freedesktop/DBus",
                    interface: "org.freedesktop.DBus",
                    member: "Hello",
                    args: &[],
                },
                deadline,
                stop,
            )
            .map_err(anyhow::Error::from)
            .context("the system bus refused the connection")?;
        Ok(connection)
    }

    /// The EXTERNAL mechanism: the kernel vouches for our uid.
    fn authenticate(&mut self, deadline: Deadline, stop: &dyn Fn() -> bool) -> Result<()> {
        let uid: String = rustix::process::getuid().as_raw().to_string().bytes().map(|b| format!("{b:02x}")).collect();
        self.write_all(format!("\0AUTH EXTERNAL {uid}\r\n").as_bytes(), deadline)?;
        let mut line = Vec::new();
        while !line.ends_with(b"\r\n") {
            if line.len() > 512 {
                bail!("the system bus answered the authentication unexpectedly");
            }
            let mut byte = [0u8];
            self.read_exact(&mut byte, deadline, stop)?;
            line.push(byte[0]);
        }
        if !line.starts_with(b"OK ") {
            bail!("the system bus refused the connection");
        }
        self.write_all(b"BEGIN\r\n", deadline)
    }

    /// Calls a method and returns the reply's first value (a string, an object path, or the
    /// string a variant holds), or the D-Bus error's name. Never its message, which may quote
    /// the arguments.
    pub fn call(&mut self, call: &Call<'_>, deadline: Deadline, stop: &dyn Fn() -> bool) -> Result<String, CallError> {
        self.serial = self.serial.wrapping_add(1).max(1);
        let serial = self.serial;
        let message = method_call(call, serial);
        self.write_all(&message, deadline).map_err(CallError::Connection)?;
        loop {
            let (header, body) = self.read_message(deadline, stop).map_err(CallError::Connection)?;
            let reply = Header::parse(&header).map_err(CallError::Connection)?;
            if reply.reply_serial != Some(serial) {
                // A signal (NameAcquired after Hello), or a reply to something else: not ours.
                continue;
            }
            return match reply.kind {
                METHOD_RETURN => {
                    first_value(&body, reply.signature.as_deref().unwrap_or("")).map_err(CallError::Answer)
                }
                ERROR => Err(CallError::Answer(anyhow!(
                    "{}",
                    reply.error_name.unwrap_or_else(|| "an unnamed D-Bus error".into())
                ))),
                _ => Err(CallError::Connection(anyhow!("the system bus answered unexpectedly"))),
            };
        }
    }

    /// One whole message: its fixed header and fields, and its body.
    fn read_message(&mut self, deadline: Deadline, stop: &dyn Fn() -> bool) -> Result<(Vec<u8>, Vec<u8>)> {
        let mut fixed = [0u8; 16];
        self.read_exact(&mut fixed, deadline, stop)?;
        if fixed[0] != b'l' {
            bail!("the system bus sent a message that is not little-endian");
        }
        let body_len = u32::from_le_bytes(fixed[4..8].try_into().expect("4 bytes")) as usize;
        let fields_len = u32::from_le_bytes(fixed[12..16].try_into().expect("4 bytes")) as usize;
        let header_len = (16 + fields_len).next_multiple_of(8);
        if header_len + body_len > MAX_MESSAGE {
            bail!("the system bus sent an oversized message");
        }
        let mut header = fixed.to_vec();
        header.resize(header_len, 0);
        self.read_exact(&mut header[16..], deadline, stop)?;
        let mut body = vec![0u8; body_len];
        self.read_exact(&mut body, deadline, stop)?;
        Ok((header, body))
    }

    fn read_exact(&mut self, mut buf: &mut [u8], deadline: Deadline, stop: &dyn Fn() -> bool) -> Result<()> {
        while !buf.is_empty() {
            let left = deadline.left()?;
            if stop() {
                bail!("stopped while waiting for the bus");
            }
            self.stream.set_read_timeout(Some(left.min(SLICE)))?;
            match self.stream.read(buf) {
                Ok(0) => bail!("the system bus closed the connection"),
                Ok(n) => buf = &mut buf[n..],
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
                    ) => {}
                Err(e) => bail!("cannot read from the system bus: {}", e.kind()),
            }
        }
        Ok(())
    }

    fn write_all(&mut self, bytes: &[u8], deadline: Deadline) -> Result<()> {
        self.stream.set_write_timeout(Some(deadline.left()?))?;
        self.stream.write_all(bytes).map_err(|e| anyhow!("cannot write to the system bus: {}", e.kind()))
    }
}

/// The socket of a D-Bus address: the first `unix:path=` or `unix:abstract=` of a
/// `;`-separated list, its value unescaped (`%XX`).
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

const METHOD_CALL: u8 = 1;
const METHOD_RETURN: u8 = 2;
const ERROR: u8 = 3;

const FIELD_PATH: u8 = 1;
const FIELD_INTERFACE: u8 = 2;
const FIELD_MEMBER: u8 = 3;
const FIELD_ERROR_NAME: u8 = 4;
const FIELD_REPLY_SERIAL: u8 = 5;
const FIELD_DESTINATION: u8 = 6;
const FIELD_SIGNATURE: u8 = 8;

/// A message being written, little-endian, with the alignment the protocol wants (counted
/// from the start of the message).
struct Writer(Vec<u8>);

impl Writer {
    fn align(&mut self, to: usize) {
        while !self.0.len().is_multiple_of(to) {
            self.0.push(0);
        }
    }

    fn u32(&mut self, value: u32) {
        self.align(4);
        self.0.extend_from_slice(&value.to_le_bytes());
    }

    /// A string or an object path.
    fn string(&mut self, value: &str) {
        self.u32(value.len() as u32);
        self.0.extend_from_slice(value.as_bytes());
        self.0.push(0);
    }

    fn signature(&mut self, value: &str) {
        self.0.push(value.len() as u8);
        self.0.extend_from_slice(value.as_bytes());
        self.0.push(0);
    }

    /// One header field: a struct of its code and a variant.
    fn field(&mut self, code: u8, signature: &str, value: &str) {
        self.align(8);
        self.0.push(code);
        self.signature(signature);
        match signature {
            "g" => self.signature(value),
            _ => self.string(value),
        }
    }
}

fn method_call(call: &Call<'_>, serial: u32) -> Vec<u8> {
    let mut body = Writer(Vec::new());
    for arg in call.args {
        body.string(arg);
    }
    let signature = "s".repeat(call.args.len());
    let mut message = Writer(vec![b'l', METHOD_CALL, 0, 1]);
    message.u32(body.0.len() as u32);
    message.u32(serial);
    message.u32(0); // the fields' length, filled in below
    message.field(FIELD_PATH, "o", call.path);
    message.field(FIELD_INTERFACE, "s", call.interface);
    message.field(FIELD_MEMBER, "s", call.member);
    message.field(FIELD_DESTINATION, "s", call.destination);
    if !signature.is_empty() {
        message.field(FIELD_SIGNATURE, "g", &signature);
    }
    let fields_len = (message.0.len() - 16) as u32;
    message.0[12..16].copy_from_slice(&fields_len.to_le_bytes());
    message.align(8);
    message.0.extend_from_slice(&body.0);
    message.0
}

/// A message being read, bounds-checked.
struct Reader<'b> {
    bytes: &'b [u8],
    at: usize,
}

impl<'b> Reader<'b> {
    fn align(&mut self, to: usize) -> Result<()> {
        self.at = self.at.next_multiple_of(to);
        if self.at > self.bytes.len() {
            bail!("the system bus sent a truncated message");
        }
        Ok(())
    }

    fn take(&mut self, n: usize) -> Result<&'b [u8]> {
        let end = self.at.checked_add(n).filter(|&end| end <= self.bytes.len());
        let end = end.context("the system bus sent a truncated message")?;
        let taken = &self.bytes[self.at..end];
        self.at = end;
        Ok(taken)
    }

    fn u32(&mut self) -> Result<u32> {
        self.align(4)?;
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }

    fn string(&mut self) -> Result<String> {
        let len = self.u32()? as usize;
        let text = self.take(len)?.to_vec();
        self.take(1)?;
        String::from_utf8(text).context("the system bus sent a string that is not UTF-8")
    }

    fn signature(&mut self) -> Result<String> {
        let len = self.take(1)?[0] as usize;
        let text = self.take(len)?.to_vec();
        self.take(1)?;
        String::from_utf8(text).context("the system bus sent a signature that is not UTF-8")
    }

    /// A value of a one-character type the dispatcher reads as text (`s`, `o`, `g`), or a
    /// `u` as its decimal digits.
    fn value(&mut self, kind: &str) -> Result<String> {
        match kind {
            "s" | "o" => self.string(),
            "g" => self.signature(),
            "u" => Ok(self.u32()?.to_string()),
            other => bail!("the system bus sent a value of type {other}, which the dispatcher does not read"),
        }
    }
}

/// What the dispatcher reads of a header.
struct Header {
    kind: u8,
    reply_serial: Option<u32>,
    error_name: Option<String>,
    signature: Option<String>,
}

impl Header {
    fn parse(header: &[u8]) -> Result<Header> {
        let fields_end = 16 + u32::from_le_bytes(header[12..16].try_into().expect("4 bytes")) as usize;
        let mut reader = Reader { bytes: &header[..fields_end.min(header.len())], at: 16 };
        let mut parsed = Header { kind: header[1], reply_serial: None, error_name: None, signature: None };
        while reader.at < reader.bytes.len() {
            reader.align(8)?;
            let code = reader.take(1)?[0];
            let kind = reader.signature()?;
            let value = reader.value(&kind)?;
            match code {
                FIELD_REPLY_SERIAL => parsed.reply_serial = value.parse().ok(),
                FIELD_ERROR_NAME => parsed.error_name = Some(value),
                FIELD_SIGNATURE => parsed.signature = Some(value),
                _ => {}
            }
        }
        Ok(parsed)
    }
}

/// The first value of a reply's body: a string, an object path, or what a variant holds.
fn first_value(body: &[u8], signature: &str) -> Result<String> {
    let mut reader = Reader { bytes: body, at: 0 };
    match signature.chars().next() {
        Some('v') => {
            let inner = reader.signature()?;
            reader.value(&inner)
        }
        Some(kind) => reader.value(&kind.to_string()),
        None => Ok(String::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reply as a bus would send it.
    fn reply(kind: u8, reply_serial: u32, error: Option<&str>, signature: &str, body: &[u8]) -> Vec<u8> {
        let mut message = Writer(vec![b'l', kind, 1, 1]);
        message.u32(body.len() as u32);
        message.u32(7);
        message.u32(0);
        message.align(8);
        message.0.push(FIELD_REPLY_SERIAL);
        message.signature("u");
        message.u32(reply_serial);
        if let Some(error) = error {
            message.field(FIELD_ERROR_NAME, "s", error);
        }
        if !signature.is_empty() {
            message.field(FIELD_SIGNATURE, "g", signature);
        }
        let fields_len = (message.0.len() - 16) as u32;
        message.0[12..16].copy_from_slice(&fields_len.to_le_bytes());
        message.align(8);
        message.0.extend_from_slice(body);
        message.0
    }

    fn split(message: &[u8]) -> (&[u8], &[u8]) {
        let fields_len = u32::from_le_bytes(message[12..16].try_into().unwrap()) as usize;
        message.split_at((16 + fields_len).next_multiple_of(8))
    }

    #[test]
    fn a_method_call_is_laid_out_as_the_specification_says() {
        let call = Call {
            destination: "org.freedesktop.systemd1",
            path: "/org/freedesktop/systemd1",
            interface: "org.freedesktop.systemd1.Manager",
            member: "StartUnit",
            args: &["a.target", "replace"],
        };
        let message = method_call(&call, 5);
        assert_eq!(&message[..4], b"l\x01\x00\x01");
        assert_eq!(u32::from_le_bytes(message[8..12].try_into().unwrap()), 5);
        let (header, body) = split(&message);
        assert_eq!(header.len() % 8, 0);
        // Body: "a.target" (len 8) then, aligned to 4, "replace" (len 7).
        assert_eq!(body, b"\x08\0\0\0a.target\0\0\0\0\x07\0\0\0replace\0");
        let mut reader = Reader { bytes: header, at: 16 };
        let mut fields = Vec::new();
        while reader.at < 16 + u32::from_le_bytes(header[12..16].try_into().unwrap()) as usize {
            reader.align(8).unwrap();
            let code = reader.take(1).unwrap()[0];
            let kind = reader.signature().unwrap();
            fields.push((code, kind.clone(), reader.value(&kind).unwrap()));
        }
        assert_eq!(
            fields,
            [
                (FIELD_PATH, "o".into(), "/org/freedesktop/systemd1".into()),
                (FIELD_INTERFACE, "s".into(), "org.freedesktop.systemd1.Manager".into()),
                (FIELD_MEMBER, "s".into(), "StartUnit".into()),
                (FIELD_DESTINATION, "s".into(), "org.freedesktop.systemd1".into()),
                (FIELD_SIGNATURE, "g".into(), "ss".into()),
            ]
        );
    }

    #[test]
    fn replies_give_their_value_or_their_error_name() {
        let mut path = Writer(Vec::new());
        path.string("/org/freedesktop/systemd1/job/42");
        let message = reply(METHOD_RETURN, 3, None, "o", &path.0);
        let (header, body) = split(&message);
        let parsed = Header::parse(header).unwrap();
        assert_eq!((parsed.kind, parsed.reply_serial), (METHOD_RETURN, Some(3)));
        assert_eq!(first_value(body, "o").unwrap(), "/org/freedesktop/systemd1/job/42");

        let mut variant = Writer(Vec::new());
        variant.signature("s");
        variant.string("loaded");
        assert_eq!(first_value(&variant.0, "v").unwrap(), "loaded");

        let message = reply(ERROR, 3, Some("org.freedesktop.systemd1.NoSuchUnit"), "s", b"\x05\0\0\0quote\0");
        let parsed = Header::parse(split(&message).0).unwrap();
        assert_eq!(parsed.error_name.as_deref(), Some("org.freedesktop.systemd1.NoSuchUnit"));
    }

    #[test]
    fn broken_messages_are_errors_not_panics() {
        let mut path = Writer(Vec::new());
        path.string("/a");
        let message = reply(METHOD_RETURN, 1, None, "o", &path.0);
        let (header, body) = split(&message);
        for cut in 0..body.len() {
            assert!(first_value(&body[..cut], "o").is_err(), "cut at {cut}");
        }
        for cut in 17..header.len() {
            let mut truncated = header[..cut].to_vec();
            truncated[12..16].copy_from_slice(&((cut - 16) as u32).to_le_bytes());
            let _ = Header::parse(&truncated);
        }
        assert!(first_value(b"\xff\xff\xff\xff", "s").is_err(), "a length past the end");
        assert!(first_value(&[1, b'a', 0], "v").is_err(), "a type it does not read");
    }

    #[test]
    fn addresses_name_a_path_or_an_abstract_socket() {
        let path = socket_address("unix:path=/run/dbus/system_bus_socket,guid=1234").unwrap();
        assert_eq!(path.as_pathname(), Some(std::path::Path::new("/run/dbus/system_bus_socket")));
        let escaped = socket_address("tcp:host=x;unix:path=/tmp/with%20space").unwrap();
        assert_eq!(escaped.as_pathname(), Some(std::path::Path::new("/tmp/with space")));
        let abstract_ = socket_address("unix:abstract=/tmp/dbus-x").unwrap();
        assert_eq!(abstract_.as_abstract_name(), Some(&b"/tmp/dbus-x"[..]));
        assert!(socket_address("tcp:host=localhost,port=1").is_err());
        assert!(socket_address("unix:path=/x%2").is_err());
    }
}
