//! A mock `org.freedesktop.systemd1` for tests and benchmarks on a private `dbus-daemon`:
//! the Manager's LoadUnit, GetUnit, StartUnit and Subscribe, the JobRemoved signal, and Unit
//! objects with LoadState, as systemd answers them. Every call is appended to a log (one
//! JSON object a line) so tests can tell what the dispatcher asked.
//!
//! It is also the one test rig for a private bus, shared by the integration tests and
//! `cargo xtask bench`: with `--private-bus DIR` it starts its own `dbus-daemon` (an
//! allow-all policy, the socket in DIR), which dies with it.
//!
//! Why zbus here too, with zbus the dispatcher's client: this is zbus's *server* side (the
//! object server, its interface macros), not the client connection the dispatcher uses, and
//! every message between the two passes through the real `dbus-daemon`, the reference
//! implementation, which checks each one. So there are still three parties, and a message
//! either side gets wrong is refused by the daemon. What the daemon would never let through
//! (escape sequences in a job path, a reply that never comes) is tests/common/fakebus.rs's
//! job: bytes written from the D-Bus specification by hand. The VM test has the real systemd.
//!
//! Usage: mock-systemd (--address ADDR | --private-bus DIR) --log FILE --units a.target,b.target
//!        [--refuse-start]
//! Prints `ready ADDRESS` on stdout once it owns the name.

use std::collections::HashSet;
use std::fs::OpenOptions;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

use zbus::object_server::SignalEmitter;
use zbus::zvariant::OwnedObjectPath;
use zbus::{interface, ObjectServer};

#[derive(Debug, zbus::DBusError)]
#[zbus(prefix = "org.freedesktop.systemd1")]
enum SystemdError {
    #[zbus(error)]
    ZBus(zbus::Error),
    NoSuchUnit(String),
    UnitMasked(String),
}

struct Manager {
    units: HashSet<String>,
    refuse_start: bool,
    jobs: AtomicU32,
    log: Mutex<std::fs::File>,
}

impl Manager {
    fn record(&self, call: serde_json::Value) {
        let mut log = self.log.lock().unwrap();
        writeln!(log, "{call}").unwrap();
        log.flush().unwrap();
    }
}

fn unit_path(name: &str) -> OwnedObjectPath {
    // systemd escapes every byte outside [A-Za-z0-9] as _XX.
    let escaped: String = name
        .bytes()
        .map(|b| if b.is_ascii_alphanumeric() { (b as char).to_string() } else { format!("_{b:02x}") })
        .collect();
    OwnedObjectPath::try_from(format!("/org/freedesktop/systemd1/unit/{escaped}")).unwrap()
}

#[interface(name = "org.freedesktop.systemd1.Manager")]
impl Manager {
    async fn load_unit(
        &self,
        name: String,
        #[zbus(object_server)] server: &ObjectServer,
    ) -> Result<OwnedObjectPath, SystemdError> {
        self.record(serde_json::json!({"call": "LoadUnit", "unit": name}));
        let path = unit_path(&name);
        let load_state = if self.units.contains(&name) { "loaded" } else { "not-found" };
        server.at(&path, Unit { load_state: load_state.into() }).await?;
        Ok(path)
    }

    async fn get_unit(&self, name: String) -> Result<OwnedObjectPath, SystemdError> {
        self.record(serde_json::json!({"call": "GetUnit", "unit": name}));
        if self.units.contains(&name) {
            Ok(unit_path(&name))
        } else {
            Err(SystemdError::NoSuchUnit(format!("Unit {name} not loaded.")))
        }
    }

    async fn start_unit(
        &self,
        name: String,
        mode: String,
        #[zbus(signal_emitter)] emitter: SignalEmitter<'_>,
    ) -> Result<OwnedObjectPath, SystemdError> {
        self.record(serde_json::json!({"call": "StartUnit", "unit": name, "mode": mode}));
        if self.refuse_start {
            return Err(SystemdError::UnitMasked(format!("Unit {name} is masked.")));
        }
        if !self.units.contains(&name) {
            return Err(SystemdError::NoSuchUnit(format!("Unit {name} not found.")));
        }
        let id = self.jobs.fetch_add(1, Ordering::SeqCst) + 1;
        let job = OwnedObjectPath::try_from(format!("/org/freedesktop/systemd1/job/{id}")).unwrap();
        Manager::job_removed(&emitter, id, job.clone(), name, "done".into()).await?;
        Ok(job)
    }

    async fn subscribe(&self) {
        self.record(serde_json::json!({"call": "Subscribe"}));
    }

    #[zbus(signal)]
    async fn job_removed(
        emitter: &SignalEmitter<'_>,
        id: u32,
        job: OwnedObjectPath,
        unit: String,
        result: String,
    ) -> zbus::Result<()>;
}

struct Unit {
    load_state: String,
}

#[interface(name = "org.freedesktop.systemd1.Unit")]
impl Unit {
    #[zbus(property)]
    fn load_state(&self) -> String {
        self.load_state.clone()
    }
}

fn main() -> zbus::Result<()> {
    let mut args = std::env::args().skip(1);
    let (mut address, mut private, mut log, mut units, mut refuse_start) = (None, None, None, HashSet::new(), false);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--address" => address = args.next(),
            "--private-bus" => private = args.next().map(PathBuf::from),
            "--log" => log = args.next(),
            "--units" => units = args.next().unwrap_or_default().split(',').map(str::to_owned).collect(),
            "--refuse-start" => refuse_start = true,
            other => panic!("mock-systemd: unexpected argument {other}"),
        }
    }
    let (address, _daemon) = match (address, private) {
        (Some(address), None) => (address, None),
        (None, Some(dir)) => {
            let (address, daemon) = private_bus(&dir);
            (address, Some(daemon))
        }
        _ => panic!("mock-systemd: give --address ADDR or --private-bus DIR"),
    };
    let log = OpenOptions::new().create(true).append(true).open(log.expect("--log FILE")).unwrap();
    let manager = Manager { units, refuse_start, jobs: AtomicU32::new(0), log: Mutex::new(log) };
    let _connection = zbus::blocking::connection::Builder::address(address.as_str())?
        .name("org.freedesktop.systemd1")?
        .serve_at("/org/freedesktop/systemd1", manager)?
        .build()?;
    println!("ready {address}");
    std::io::stdout().flush().unwrap();
    loop {
        std::thread::park();
    }
}

/// Everything allowed, one socket, EXTERNAL auth: the system bus of a test machine.
const BUS_CONFIG: &str = r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-BUS Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <listen>unix:path=@SOCKET@</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_destination="*"/>
    <allow receive_sender="*"/>
  </policy>
</busconfig>
"#;

/// Starts a `dbus-daemon` on a socket in `dir` that dies with this process; its address.
fn private_bus(dir: &Path) -> (String, Child) {
    let config = dir.join("bus.conf");
    std::fs::write(&config, BUS_CONFIG.replace("@SOCKET@", dir.join("bus").to_str().expect("a UTF-8 path"))).unwrap();
    let mut command = Command::new("dbus-daemon");
    command
        .arg(format!("--config-file={}", config.display()))
        .args(["--nofork", "--nopidfile", "--print-address=1"])
        .stdout(Stdio::piped())
        // It warns that it may not raise its fd limit; nothing a test needs.
        .stderr(Stdio::null());
    // SAFETY: prctl is async-signal-safe.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut daemon = command.spawn().expect("dbus-daemon (Debian package dbus) is installed");
    let mut line = String::new();
    BufReader::new(daemon.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let address = line.trim().to_owned();
    assert!(address.starts_with("unix:"), "dbus-daemon printed {address:?}");
    (address, daemon)
}
