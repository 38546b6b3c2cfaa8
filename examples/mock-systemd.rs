//! A mock `org.freedesktop.systemd1` for tests and benchmarks on a private `dbus-daemon`:
//! the Manager's LoadUnit, GetUnit, StartUnit, Subscribe and ListJobs, the JobRemoved signal,
//! and Unit objects with LoadState, ActiveState, the dependencies a target pulls units in by
//! (Requires, Requisite, Wants, BindsTo, Upholds) and After, as systemd answers them. Every
//! Manager call is appended to a log (one JSON object a line) so tests can tell what the
//! dispatcher asked.
//!
//! Jobs: by default a StartUnit's job is done at once (JobRemoved `done`, the unit active).
//! With `--jobs-wait` it stays queued, with a job for each unit the target pulls in (those
//! `activating`), until the test ends them through the mock's own interface
//! (`dev.shoal.MockSystemd` at `/mock`): `Finish(unit, result)` removes the unit's job with that
//! result (emitting JobRemoved; `done` makes the unit active, `failed` failed, anything else
//! inactive), `Queue(unit, type)` adds a job that never ends (a shutdown's `reboot.target`
//! start job, say), `Shutdown(unit, "replace-irreversibly")` starts a shutdown as systemd's `replace-irreversibly` mode
//! does (its start job queued and every other start job cancelled at once). With `--state FILE` every change is kept in FILE and read back at start,
//! so a mock started again after a "restart of the bus" is the same systemd, as the real one
//! is across `systemctl restart dbus`.
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
//!        [--pulls a.target=x.service,y.service]... [--after x.service=z.service]...
//!        [--jobs-wait] [--refuse-start] [--state FILE]
//! Prints `ready ADDRESS` on stdout once it owns the name.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::OpenOptions;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use zbus::object_server::SignalEmitter;
use zbus::zvariant::OwnedObjectPath;
use zbus::{interface, ObjectServer};

const MANAGER_PATH: &str = "/org/freedesktop/systemd1";

#[derive(Debug, zbus::DBusError)]
#[zbus(prefix = "org.freedesktop.systemd1")]
enum SystemdError {
    #[zbus(error)]
    ZBus(zbus::Error),
    NoSuchUnit(String),
    UnitMasked(String),
}

/// What the mock knows, kept in `--state FILE` when given.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
struct State {
    next_job: u32,
    jobs: Vec<Job>,
    units: BTreeMap<String, Unit>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Job {
    id: u32,
    unit: String,
    kind: String,
}

#[derive(Debug, Default, Clone, Serialize, Deserialize)]
struct Unit {
    active_state: String,
    wants: Vec<String>,
    after: Vec<String>,
}

impl Job {
    fn path(&self) -> OwnedObjectPath {
        OwnedObjectPath::try_from(format!("/org/freedesktop/systemd1/job/{}", self.id)).unwrap()
    }
}

/// The mock's state, shared by its objects.
#[derive(Clone)]
struct Shared {
    state: Arc<Mutex<State>>,
    file: Option<PathBuf>,
    /// Jobs removed whose JobRemoved is still being sent.
    removing: Arc<AtomicUsize>,
}

impl Shared {
    /// Reads the state once every job removed so far has been said: systemd sends JobRemoved in
    /// the same turn of its loop as it removes the job, so no later answer (ListJobs, a unit's
    /// state) reaches a client before the signal does. zbus serves calls concurrently: this
    /// keeps that order here (a removal counts itself under the state's lock).
    async fn read<T>(&self, read: impl Fn(&State) -> T) -> T {
        loop {
            {
                let state = self.state.lock().unwrap();
                if self.removing.load(Ordering::SeqCst) == 0 {
                    return read(&state);
                }
            }
            async_io::Timer::after(std::time::Duration::from_millis(1)).await;
        }
    }

    fn with<T>(&self, change: impl FnOnce(&mut State) -> T) -> T {
        let mut state = self.state.lock().unwrap();
        let out = change(&mut state);
        if let Some(file) = &self.file {
            std::fs::write(file, serde_json::to_vec(&*state).unwrap()).unwrap();
        }
        out
    }

    fn unit(&self, name: &str) -> Unit {
        self.state.lock().unwrap().units.get(name).cloned().unwrap_or_default()
    }
}

struct Manager {
    shared: Shared,
    refuse_start: bool,
    jobs_wait: bool,
    log: Mutex<std::fs::File>,
}

impl Manager {
    /// One line per call, in one write(2): a test reads the log while the mock runs.
    fn record(&self, call: serde_json::Value) {
        let mut log = self.log.lock().unwrap();
        log.write_all(format!("{call}\n").as_bytes()).unwrap();
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
        if !self.shared.state.lock().unwrap().units.contains_key(&name) {
            server.at(&path, UnitObject { name: name.clone(), shared: self.shared.clone() }).await?;
        }
        Ok(path)
    }

    async fn get_unit(&self, name: String) -> Result<OwnedObjectPath, SystemdError> {
        self.record(serde_json::json!({"call": "GetUnit", "unit": name}));
        if self.shared.state.lock().unwrap().units.contains_key(&name) {
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
        let job = self.shared.with(|state| {
            let unit = state.units.get(&name)?.clone();
            let queue = |state: &mut State, unit: &str| {
                state.next_job += 1;
                let job = Job { id: state.next_job, unit: unit.to_owned(), kind: "start".into() };
                state.jobs.push(job.clone());
                job
            };
            let job = queue(state, &name);
            if self.jobs_wait {
                for pulled in &unit.wants {
                    queue(state, pulled);
                    state.units.entry(pulled.clone()).or_default().active_state = "activating".into();
                }
            }
            Some(job)
        });
        let Some(job) = job else { return Err(SystemdError::NoSuchUnit(format!("Unit {name} not found."))) };
        if !self.jobs_wait {
            finish(&self.shared, &emitter, &name, "done").await?;
        }
        Ok(job.path())
    }

    async fn subscribe(&self) {
        self.record(serde_json::json!({"call": "Subscribe"}));
    }

    async fn list_jobs(&self) -> Vec<(u32, String, String, String, OwnedObjectPath, OwnedObjectPath)> {
        self.record(serde_json::json!({"call": "ListJobs"}));
        let list = |state: &State| {
            let row = |job: &Job| {
                (job.id, job.unit.clone(), job.kind.clone(), "waiting".to_owned(), job.path(), unit_path(&job.unit))
            };
            state.jobs.iter().map(row).collect()
        };
        self.shared.read(list).await
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

/// Removes `unit`'s job with `result` and says so (JobRemoved), as systemd does when a job ends.
async fn finish(shared: &Shared, emitter: &SignalEmitter<'_>, unit: &str, result: &str) -> zbus::Result<()> {
    let job = shared.with(|state| {
        let at = state.jobs.iter().position(|job| job.unit == unit)?;
        shared.removing.fetch_add(1, Ordering::SeqCst);
        let job = state.jobs.remove(at);
        let active_state = match result {
            "done" => "active",
            "failed" => "failed",
            _ => "inactive",
        };
        state.units.entry(unit.to_owned()).or_default().active_state = active_state.into();
        Some(job)
    });
    let Some(job) = job else { return Ok(()) };
    let said = Manager::job_removed(emitter, job.id, job.path(), unit.to_owned(), result.to_owned()).await;
    shared.removing.fetch_sub(1, Ordering::SeqCst);
    said
}

/// What tests do to the mock: jobs end, jobs are queued.
struct Control {
    shared: Shared,
}

#[interface(name = "dev.shoal.MockSystemd")]
impl Control {
    /// Ends `unit`'s job with `result`.
    async fn finish(
        &self,
        unit: String,
        result: String,
        #[zbus(connection)] connection: &zbus::Connection,
    ) -> zbus::fdo::Result<()> {
        let emitter =
            SignalEmitter::new(connection, MANAGER_PATH).map_err(|e| zbus::fdo::Error::Failed(e.to_string()))?;
        finish(&self.shared, &emitter, &unit, &result).await.map_err(|e| zbus::fdo::Error::Failed(e.to_string()))
    }

    /// Starts the shutdown `unit` (`reboot.target`) as systemd does in `replace-irreversibly`
    /// mode: its start job is queued, and every other start job cancelled, in one transaction
    /// (each cancelled job says JobRemoved `canceled` after).
    async fn shutdown(
        &self,
        unit: String,
        mode: String,
        #[zbus(connection)] connection: &zbus::Connection,
    ) -> zbus::fdo::Result<()> {
        if mode != "replace-irreversibly" {
            return Err(zbus::fdo::Error::InvalidArgs(format!(
                "a shutdown's mode is replace-irreversibly, not {mode}"
            )));
        }
        let cancelled = self.shared.with(|state| {
            let (cancelled, kept): (Vec<Job>, Vec<Job>) = state.jobs.drain(..).partition(|job| job.kind == "start");
            state.jobs = kept;
            state.next_job += 1;
            state.jobs.push(Job { id: state.next_job, unit, kind: "start".into() });
            for job in &cancelled {
                state.units.entry(job.unit.clone()).or_default().active_state = "inactive".into();
            }
            self.shared.removing.fetch_add(cancelled.len(), Ordering::SeqCst);
            cancelled
        });
        let emitter =
            SignalEmitter::new(connection, MANAGER_PATH).map_err(|e| zbus::fdo::Error::Failed(e.to_string()))?;
        for job in cancelled {
            let said = Manager::job_removed(&emitter, job.id, job.path(), job.unit.clone(), "canceled".into()).await;
            self.shared.removing.fetch_sub(1, Ordering::SeqCst);
            said.map_err(|e| zbus::fdo::Error::Failed(e.to_string()))?;
        }
        Ok(())
    }

    /// Queues a job of `kind` for `unit` that never ends.
    async fn queue(&self, unit: String, kind: String) {
        self.shared.with(|state| {
            state.next_job += 1;
            let id = state.next_job;
            state.jobs.push(Job { id, unit, kind });
        });
    }
}

struct UnitObject {
    name: String,
    shared: Shared,
}

#[interface(name = "org.freedesktop.systemd1.Unit")]
impl UnitObject {
    #[zbus(property)]
    fn load_state(&self) -> String {
        let known = self.shared.state.lock().unwrap().units.contains_key(&self.name);
        if known { "loaded" } else { "not-found" }.into()
    }

    #[zbus(property)]
    async fn active_state(&self) -> String {
        let state = self.shared.read(|state| state.units.get(&self.name).map(|u| u.active_state.clone())).await;
        let state = state.unwrap_or_default();
        if state.is_empty() {
            "inactive".into()
        } else {
            state
        }
    }

    #[zbus(property)]
    fn wants(&self) -> Vec<String> {
        self.shared.unit(&self.name).wants
    }

    #[zbus(property)]
    fn requires(&self) -> Vec<String> {
        Vec::new()
    }

    #[zbus(property)]
    fn requisite(&self) -> Vec<String> {
        Vec::new()
    }

    #[zbus(property)]
    fn binds_to(&self) -> Vec<String> {
        Vec::new()
    }

    #[zbus(property)]
    fn upholds(&self) -> Vec<String> {
        Vec::new()
    }

    #[zbus(property)]
    fn after(&self) -> Vec<String> {
        self.shared.unit(&self.name).after
    }
}

/// `NAME=a,b`: a name and a list.
fn name_and_list(arg: &str) -> (String, Vec<String>) {
    let (name, list) = arg.split_once('=').expect("NAME=a,b");
    (name.to_owned(), list.split(',').filter(|s| !s.is_empty()).map(str::to_owned).collect())
}

fn main() -> zbus::Result<()> {
    let mut args = std::env::args().skip(1);
    let (mut address, mut private, mut log, mut units, mut refuse_start) = (None, None, None, BTreeSet::new(), false);
    let (mut pulls, mut after, mut jobs_wait, mut state_file) = (vec![], vec![], false, None);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--address" => address = args.next(),
            "--private-bus" => private = args.next().map(PathBuf::from),
            "--log" => log = args.next(),
            "--units" => units = args.next().unwrap_or_default().split(',').map(str::to_owned).collect(),
            "--pulls" => pulls.push(name_and_list(&args.next().unwrap_or_default())),
            "--after" => after.push(name_and_list(&args.next().unwrap_or_default())),
            "--jobs-wait" => jobs_wait = true,
            "--refuse-start" => refuse_start = true,
            "--state" => state_file = args.next().map(PathBuf::from),
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
    let state = match state_file.as_deref().and_then(|file| std::fs::read(file).ok()) {
        Some(bytes) => serde_json::from_slice(&bytes).unwrap(),
        None => {
            let mut state = State::default();
            let mentioned = pulls.iter().chain(&after).flat_map(|(name, list)| std::iter::once(name).chain(list));
            for name in units.iter().chain(mentioned) {
                state.units.entry(name.clone()).or_default();
            }
            for (name, list) in pulls {
                state.units.entry(name).or_default().wants = list;
            }
            for (name, list) in after {
                state.units.entry(name).or_default().after = list;
            }
            state
        }
    };
    let names: Vec<String> = state.units.keys().cloned().collect();
    let shared =
        Shared { state: Arc::new(Mutex::new(state)), file: state_file, removing: Arc::new(AtomicUsize::new(0)) };
    let manager = Manager { shared: shared.clone(), refuse_start, jobs_wait, log: Mutex::new(log) };
    let mut builder = zbus::blocking::connection::Builder::address(address.as_str())?
        .name("org.freedesktop.systemd1")?
        .serve_at(MANAGER_PATH, manager)?
        .serve_at("/mock", Control { shared: shared.clone() })?;
    for name in names {
        builder = builder.serve_at(unit_path(&name), UnitObject { name, shared: shared.clone() })?;
    }
    let _connection = builder.build()?;
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
