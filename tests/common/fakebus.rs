//! A system bus that misbehaves on purpose: a unix socket served by a thread of the test, which
//! speaks just enough D-Bus (the SASL lines, little-endian messages) to answer or not answer
//! each step as the test wants. Written from the D-Bus specification, byte by byte, so that
//! it can send what a real `dbus-daemon` never would (a job path holding an escape sequence).

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// What the fake does with one method call, by its member.
#[derive(Debug, Clone)]
pub enum Answer {
    /// Never answers (the connection stays open).
    Never,
    /// A method return: the body's signature and bytes.
    Return(&'static str, Vec<u8>),
    /// An error reply with this name.
    Error(&'static str),
}

/// How far the fake goes.
#[derive(Debug, Clone, Copy)]
pub enum Stage {
    /// Accepts the connection and never says a word.
    Silent,
    /// Answers the authentication, then never anything.
    AuthOnly,
    /// Answers calls as its script says.
    Calls(fn(&str) -> Answer),
}

pub struct FakeBus {
    pub address: String,
    calls: Arc<Mutex<Vec<String>>>,
    _dir: tempfile::TempDir,
}

impl FakeBus {
    pub fn start(stage: Stage) -> FakeBus {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("bus");
        let listener = UnixListener::bind(&socket).unwrap();
        let calls = Arc::new(Mutex::new(Vec::new()));
        let recorded = calls.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().map_while(Result::ok) {
                let recorded = recorded.clone();
                std::thread::spawn(move || serve(stream, stage, &recorded));
            }
        });
        FakeBus { address: format!("unix:path={}", socket.display()), calls, _dir: dir }
    }

    /// The members called, in order (`Hello` included).
    pub fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap().clone()
    }
}

/// A bus socket whose listen backlog is full: `connect()` blocks on it (or says EAGAIN).
pub struct FullBacklog {
    pub address: String,
    _listener: rustix::fd::OwnedFd,
    _waiting: Vec<rustix::fd::OwnedFd>,
    _dir: tempfile::TempDir,
}

impl FullBacklog {
    pub fn new() -> FullBacklog {
        use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};
        let dir = tempfile::tempdir().unwrap();
        let path: PathBuf = dir.path().join("bus");
        let addr = SocketAddrUnix::new(&path).unwrap();
        let listener = rustix::net::socket(AddressFamily::UNIX, SocketType::STREAM, None).unwrap();
        rustix::net::bind(&listener, &addr).unwrap();
        rustix::net::listen(&listener, 0).unwrap();
        // Connections nobody accepts, until the kernel refuses more.
        let mut waiting = Vec::new();
        loop {
            let client =
                rustix::net::socket_with(AddressFamily::UNIX, SocketType::STREAM, SocketFlags::NONBLOCK, None).unwrap();
            match rustix::net::connect(&client, &addr) {
                Ok(()) => waiting.push(client),
                Err(rustix::io::Errno::AGAIN) => break,
                Err(e) => panic!("filling the backlog: {e}"),
            }
            assert!(waiting.len() < 64, "the backlog never filled");
        }
        FullBacklog {
            address: format!("unix:path={}", path.display()),
            _listener: listener,
            _waiting: waiting,
            _dir: dir,
        }
    }
}

/// What systemd answers on a good day.
pub fn systemd(member: &str) -> Answer {
    match member {
        "Hello" => Answer::Return("s", string(":1.42")),
        "LoadUnit" => Answer::Return("o", string("/org/freedesktop/systemd1/unit/install_2desxi_2etarget")),
        "Get" => {
            let mut body = vec![1, b's', 0, 0];
            body.extend(string("loaded"));
            Answer::Return("v", body)
        }
        "StartUnit" => Answer::Return("o", string("/org/freedesktop/systemd1/job/7")),
        _ => Answer::Error("org.freedesktop.DBus.Error.UnknownMethod"),
    }
}

/// A string or object path as a body: length, bytes, NUL.
pub fn string(value: &str) -> Vec<u8> {
    string_bytes(value.as_bytes())
}

pub fn string_bytes(value: &[u8]) -> Vec<u8> {
    let mut out = (value.len() as u32).to_le_bytes().to_vec();
    out.extend_from_slice(value);
    out.push(0);
    out
}

fn serve(stream: UnixStream, stage: Stage, calls: &Mutex<Vec<String>>) {
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    let script = match stage {
        Stage::Silent => return hold(reader),
        Stage::AuthOnly => None,
        Stage::Calls(script) => Some(script),
    };
    let mut nul = [0u8];
    if reader.read_exact(&mut nul).is_err() {
        return;
    }
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let answer = match line.trim_end() {
            "BEGIN" => break,
            l if l.starts_with("AUTH EXTERNAL") => "OK 0123456789abcdef0123456789abcdef\r\n",
            l if l.starts_with("AUTH") => "REJECTED EXTERNAL\r\n",
            "NEGOTIATE_UNIX_FD" => "AGREE_UNIX_FD\r\n",
            _ => "ERROR\r\n",
        };
        if writer.write_all(answer.as_bytes()).is_err() {
            return;
        }
    }
    let Some(script) = script else { return hold(reader) };
    let mut serial = 0;
    while let Some((call_serial, member)) = read_call(&mut reader) {
        calls.lock().unwrap().push(member.clone());
        serial += 1;
        let reply = match script(&member) {
            Answer::Never => continue,
            Answer::Return(signature, body) => message(2, serial, call_serial, None, signature, &body),
            Answer::Error(name) => message(3, serial, call_serial, Some(name), "s", &string("refused")),
        };
        if writer.write_all(&reply).is_err() {
            return;
        }
    }
}

/// Keeps the connection open and reads what comes, answering nothing.
fn hold(mut reader: BufReader<UnixStream>) {
    let mut sink = [0u8; 4096];
    while reader.read(&mut sink).is_ok_and(|n| n > 0) {}
}

/// One method call: its serial and member.
fn read_call(reader: &mut impl Read) -> Option<(u32, String)> {
    let mut fixed = [0u8; 16];
    reader.read_exact(&mut fixed).ok()?;
    assert_eq!(fixed[0], b'l', "the dispatcher writes little-endian");
    let u32_at = |b: &[u8], at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
    let (body_len, serial, fields_len) = (u32_at(&fixed, 4), u32_at(&fixed, 8), u32_at(&fixed, 12) as usize);
    let padded = (16 + fields_len).next_multiple_of(8) - 16;
    let mut rest = vec![0u8; padded + body_len as usize];
    reader.read_exact(&mut rest).ok()?;
    let mut header = fixed.to_vec();
    header.extend_from_slice(&rest[..fields_len]);
    let mut at = 16;
    let mut member = String::new();
    while at < header.len() {
        at = at.next_multiple_of(8);
        let code = header[at];
        let sig_len = header[at + 1] as usize;
        let sig = header[at + 2];
        at += 3 + sig_len;
        match sig {
            b's' | b'o' => {
                at = at.next_multiple_of(4);
                let len = u32_at(&header, at) as usize;
                let value = String::from_utf8_lossy(&header[at + 4..at + 4 + len]).into_owned();
                at += 4 + len + 1;
                if code == 3 {
                    member = value;
                }
            }
            b'g' => at += 1 + header[at] as usize + 1,
            _ => {
                at = at.next_multiple_of(4);
                at += 4;
            }
        }
    }
    Some((serial, member))
}

/// A reply: method return (2) or error (3), to `reply_serial`.
fn message(kind: u8, serial: u32, reply_serial: u32, error: Option<&str>, signature: &str, body: &[u8]) -> Vec<u8> {
    let mut m = vec![b'l', kind, 1, 1];
    m.extend((body.len() as u32).to_le_bytes());
    m.extend(serial.to_le_bytes());
    m.extend([0; 4]);
    let pad = |m: &mut Vec<u8>, to: usize| m.resize(m.len().next_multiple_of(to), 0);
    pad(&mut m, 8);
    m.extend([5, 1, b'u', 0]);
    m.extend(reply_serial.to_le_bytes());
    if let Some(name) = error {
        pad(&mut m, 8);
        m.extend([4, 1, b's', 0]);
        m.extend(string(name));
    }
    pad(&mut m, 8);
    m.extend([8, 1, b'g', 0, signature.len() as u8]);
    m.extend(signature.as_bytes());
    m.push(0);
    let fields_len = (m.len() - 16) as u32;
    m[12..16].copy_from_slice(&fields_len.to_le_bytes());
    pad(&mut m, 8);
    m.extend_from_slice(body);
    m
}
