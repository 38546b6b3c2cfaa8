//! `run`: the boot path (SPEC §6). Media → mount → schema and recipe → checks (static and
//! host) → outputs → systemd, each step a phase; any failure ends the run with the phase,
//! an exit code and, for the recipe, field-level details, all recorded in `status.json`.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use sha2::{Digest, Sha256};
use tracing::{error, info, warn};

use crate::atomic::Existing;
use crate::checks::safety::Policy;
use crate::checks::{self, host, Detail, Findings, Runner, Severity};
use crate::exit::Exit;
use crate::log::{notify_status, DISPATCHED_ID, FAILED_ID};
use crate::media::discover::{self, Devices, Found, Request};
use crate::media::mount::{Mount, Root};
use crate::memory;
use crate::outputs::{Outputs, WriteError};
use crate::recipe::model::Recipe;
use crate::recipe::read::{read_capped, ReadError};
use crate::recipe::{self, Document, MAX_RECIPE_BYTES};
use crate::report::status::{timestamp, Dispatch, Phase, State, Status, FILE_NAME};
use crate::report::{display_path, printable, Report, DETAILS_SHOWN};
use crate::schema::{Schema, SchemaPolicy};
use crate::shutdown::{self, stop_requested};
use crate::systemd::Systemd;

#[derive(Debug, Clone)]
pub struct RunArgs {
    /// `--media`: a block device, an ISO file or a directory; else the kernel command line,
    /// else the label.
    pub media: Option<PathBuf>,
    pub label: String,
    pub wait: Duration,
    pub output: PathBuf,
    pub state_dir: PathBuf,
    pub no_start: bool,
    pub force: bool,
    pub policy: Policy,
    pub schema_policy: SchemaPolicy,
    /// How long any one exchange with the system bus may take.
    pub bus_timeout: Duration,
}

impl Default for RunArgs {
    fn default() -> Self {
        RunArgs {
            media: None,
            label: "TASK".into(),
            wait: Duration::from_secs(120),
            output: "/run/provision".into(),
            state_dir: "/run/provision-dispatcher".into(),
            no_start: false,
            force: false,
            policy: Policy::default(),
            schema_policy: SchemaPolicy::default(),
            bus_timeout: Duration::from_secs(10),
        }
    }
}

/// The files the ISO carries.
const RECIPE_FILE: &str = "recipe.json";
const SCHEMA_FILE: &str = "recipe.schema.json";

/// Why a run stopped.
struct Failure {
    phase: Phase,
    exit: Exit,
    message: String,
    details: Vec<Detail>,
}

impl Failure {
    fn new(phase: Phase, message: impl Into<String>) -> Failure {
        Failure { phase, exit: Exit::of_phase(phase), message: message.into(), details: Vec::new() }
    }

    fn exit(mut self, exit: Exit) -> Failure {
        self.exit = exit;
        self
    }
}

/// Runs the boot path and records it. Returns the exit code; a run stopped by a signal
/// records its status, then dies of that signal.
pub fn run(args: &RunArgs) -> Exit {
    shutdown::install_signal_handlers();
    if let Err(e) = prepare_state_dir(&args.state_dir) {
        error!(phase = "outputs", "cannot write the status in {}: {e}", args.state_dir.display());
        return Exit::CantWrite;
    }
    // Held until the process ends: a second run waits, then sees this one's dispatch.
    let _lock = match lock_state_dir(&args.state_dir) {
        Ok(lock) => lock,
        Err(e) => {
            if let Some(signal) = stop_requested() {
                shutdown::die_of(signal);
            }
            error!(phase = "outputs", "cannot lock the state directory {}: {e}", args.state_dir.display());
            return Exit::CantWrite;
        }
    };
    let previous = Status::read(&args.state_dir.join(FILE_NAME)).ok();
    let mut status = Status::running(timestamp(SystemTime::now()), previous.and_then(|s| s.dispatch));
    if let Err(e) = status.write(&args.state_dir) {
        error!(phase = "outputs", "cannot write the status in {}: {e}", args.state_dir.display());
        return Exit::CantWrite;
    }
    install_last_words(&args.state_dir, &status);
    notify_status("looking for the task media");
    let exit = match dispatch(args, &mut status) {
        Ok(()) => Exit::Ok,
        // A failure while a stop was requested is the stop: the run did not get to finish.
        Err(failure) => match stop_requested() {
            Some(signal) => record_failure(&mut status, stopped(failure.phase, signal)),
            None => record_failure(&mut status, failure),
        },
    };
    status.exit_code = exit.code();
    status.finished_at = Some(timestamp(SystemTime::now()));
    let written = status.write(&args.state_dir);
    if let Some(signal) = stop_requested() {
        shutdown::die_of(signal);
    }
    if let Err(e) = written {
        error!(phase = "outputs", "cannot write the status in {}: {e}", args.state_dir.display());
        return if exit == Exit::Ok { Exit::CantWrite } else { exit };
    }
    exit
}

/// How long a second run waits between looks at the lock.
const LOCK_POLL: Duration = Duration::from_millis(100);

/// Takes the state directory's lock, waiting (and saying so) while another run holds it.
fn lock_state_dir(dir: &Path) -> std::io::Result<std::fs::File> {
    use rustix::fs::{flock, FlockOperation};
    use std::os::unix::fs::OpenOptionsExt;
    let file =
        std::fs::OpenOptions::new().create(true).truncate(false).write(true).mode(0o600).open(dir.join("lock"))?;
    let mut said = false;
    loop {
        match flock(&file, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => return Ok(file),
            Err(rustix::io::Errno::WOULDBLOCK) => {}
            Err(e) => return Err(e.into()),
        }
        if stop_requested().is_some() {
            return Err(std::io::ErrorKind::Interrupted.into());
        }
        if !said {
            info!(phase = "media", "another run of the dispatcher holds {}; waiting for it", dir.display());
            said = true;
        }
        std::thread::sleep(LOCK_POLL);
    }
}

/// The phase the run is in, for a failure that cannot say it otherwise (a panic, memory run
/// out): an index into [`Phase::ALL`].
static CURRENT_PHASE: AtomicUsize = AtomicUsize::new(0);

/// Enters `phase`: stops the run instead if a signal asked for it.
fn enter(phase: Phase) -> Result<(), Failure> {
    CURRENT_PHASE.store(Phase::ALL.iter().position(|&p| p == phase).unwrap_or(0), Ordering::Relaxed);
    match stop_requested() {
        Some(signal) => Err(stopped(phase, signal)),
        None => Ok(()),
    }
}

fn current_phase() -> Phase {
    Phase::ALL[CURRENT_PHASE.load(Ordering::Relaxed)]
}

/// A panic (a bug) or memory running out still ends as a recorded failure (exit 70) with the
/// media unmounted, the loop device detached and no staging directory left. A panic's
/// message is not recorded: it could quote anything; its location is.
fn install_last_words(state_dir: &Path, status: &Status) {
    let last_words = LastWords {
        state_dir: state_dir.to_owned(),
        started_at: status.started_at.clone(),
        dispatch: status.dispatch.clone(),
    };
    let on_panic = last_words.clone();
    std::panic::set_hook(Box::new(move |info| {
        let location = info.location().map(|l| format!("{}:{}", l.file(), l.line())).unwrap_or_default();
        on_panic.say(format!("the dispatcher panicked at {location}; this is a bug"));
        std::process::exit(Exit::Internal.code().into());
    }));
    memory::on_exhaustion(move |exhaustion| {
        last_words.say(format!("the dispatcher ran {exhaustion} while in the {} phase", current_phase().name()));
    });
}

/// What a run that must end at once records, from what it knew when it started.
#[derive(Clone)]
struct LastWords {
    state_dir: PathBuf,
    started_at: String,
    dispatch: Option<Dispatch>,
}

impl LastWords {
    fn say(&self, message: String) {
        shutdown::undo_all();
        error!(
            phase = "internal",
            message_id = FAILED_ID,
            exit_code = Exit::Internal.code(),
            "provisioning failed: {message}"
        );
        let mut status = Status::running(self.started_at.clone(), self.dispatch.clone());
        status.state = State::Failed;
        status.phase = Some(Phase::Internal);
        status.exit_code = Exit::Internal.code();
        status.message = message;
        status.finished_at = Some(timestamp(SystemTime::now()));
        let _ = status.write(&self.state_dir);
    }
}

/// The failure of a run stopped by `signal`. Its exit code is never used: the process dies of
/// the signal once the status is written.
fn stopped(phase: Phase, signal: i32) -> Failure {
    Failure::new(phase, format!("stopped by {}", shutdown::signal_name(signal))).exit(Exit::Internal)
}

fn record_failure(status: &mut Status, failure: Failure) -> Exit {
    let phase = failure.phase.name();
    log_details(phase, &failure.details, Severity::Error);
    error!(phase, message_id = FAILED_ID, exit_code = failure.exit.code(), "provisioning failed: {}", failure.message);
    notify_status(&format!("failed in {phase}: {}", failure.message));
    status.state = State::Failed;
    status.phase = Some(failure.phase);
    status.message = failure.message;
    status.details = failure.details;
    failure.exit
}

/// One journal entry per detail, with CODE and PATH fields for `journalctl CODE=...`.
/// At most [`DETAILS_SHOWN`] of them: status.json keeps them all, and a hostile recipe must
/// not flood the journal.
fn log_details(phase: &str, details: &[Detail], severity: Severity) {
    for d in details.iter().take(DETAILS_SHOWN) {
        let (path, message) = (display_path(&d.path), printable(&d.message));
        match severity {
            Severity::Error => {
                error!(phase, code = d.code.as_str(), path = d.path.as_str(), "{path}: {message} [{}]", d.code)
            }
            Severity::Warning => {
                warn!(phase, code = d.code.as_str(), path = d.path.as_str(), "{path}: {message} [{}]", d.code)
            }
        }
    }
    if let Some(more) = details.len().checked_sub(DETAILS_SHOWN).filter(|&n| n > 0) {
        let what = if severity == Severity::Error { "error" } else { "warning" };
        info!(phase, "and {more} more {what}(s), all in status.json");
    }
}

fn prepare_state_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)
}

/// The phases, in order. Fills `status` as it goes.
fn dispatch(args: &RunArgs, status: &mut Status) -> Result<(), Failure> {
    // Media and mount: everything needed from the media is read, then it is unmounted.
    let found = find_media(args)?;
    crate::failpoint::hit("media.found");
    enter(Phase::Mount)?;
    status.media = Some(found.path().display().to_string());
    info!(phase = "media", "found the task media at {}", found.path().display());
    let (schema_bytes, recipe_bytes, media_devices) = {
        let mount_point = args.state_dir.join("media");
        let (mount, root_path) = match &found {
            Found::Directory(dir) => (None, dir.clone()),
            Found::Device { path, fs } | Found::Image { path, fs } => {
                let mount =
                    Mount::new(path, fs, &mount_point).map_err(|e| Failure::new(Phase::Mount, format!("{e:#}")))?;
                let point = mount.point().to_owned();
                (Some(mount), point)
            }
        };
        let root = Root::open(&root_path)
            .map_err(|e| Failure::new(Phase::Mount, format!("cannot open {}: {e}", root_path.display())))?;
        let schema = read_from_media(&root, SCHEMA_FILE, crate::schema::MAX_SCHEMA_BYTES, Phase::Schema)?;
        let recipe = read_from_media(&root, RECIPE_FILE, MAX_RECIPE_BYTES, Phase::Recipe)?;
        let devices = media_devices(&found, &root, mount.as_ref());
        // Close the directory first, or the unmount finds the filesystem busy.
        drop(root);
        drop(mount);
        (schema, recipe, devices)
    };

    enter(Phase::Schema)?;
    notify_status("validating the recipe");
    let schema = Schema::from_bytes(&schema_bytes, args.schema_policy)
        .map_err(|e| Failure::new(Phase::Schema, format!("{SCHEMA_FILE} on the media: {e}")))?;
    status.schema_id = schema.id().map(str::to_owned);
    info!(phase = "schema", "compiled {SCHEMA_FILE} ({})", schema.id().unwrap_or("no $id"));

    let digest = hex(&Sha256::digest(&recipe_bytes));
    status.recipe_sha256 = Some(digest.clone());
    if let Some(done) = status.dispatch.clone() {
        if done.recipe_sha256 == digest {
            info!(
                phase = "recipe",
                "this recipe was already dispatched in this boot (job {}); nothing to do", done.job
            );
            status.state = State::Dispatched;
            status.message = "already dispatched in this boot; not started again".into();
            status.target = Some(done.target);
            status.job = Some(done.job);
            return Ok(());
        }
        if !args.force {
            return Err(Failure::new(
                Phase::Recipe,
                "a different recipe was already dispatched in this boot; refusing to replace it (run with --force to do so)",
            )
            .exit(Exit::CantWrite));
        }
        warn!(phase = "recipe", "replacing the recipe dispatched earlier in this boot (--force)");
    }
    enter(Phase::Recipe)?;
    let doc = recipe::parse(recipe_bytes).map_err(|e| {
        let report = Report::of_read_error(&e);
        let message = format!("{RECIPE_FILE} on the media: {e}");
        Failure { details: report.details, ..Failure::new(Phase::Recipe, message).exit(Exit::Invalid) }
    })?;

    enter(Phase::Validate)?;
    crate::failpoint::hit("validate.started");
    // With --no-start the bus is never asked, nor even connected to.
    let systemd = (!args.no_start).then(|| Systemd::new(args.bus_timeout));
    let findings = validate(args, &schema, &doc, &media_devices, systemd.as_ref());
    let exit = Exit::of_findings(&findings);
    let report = Report::of_findings(&doc, findings);
    log_details("validate", &report.warnings, Severity::Warning);
    status.warnings = report.warnings;
    if exit != Exit::Ok {
        let message = format!("the recipe failed validation: {} error(s)", report.details.len());
        return Err(Failure { details: report.details, ..Failure::new(Phase::Validate, message).exit(exit) });
    }
    let recipe = Recipe::new(&doc);
    status.target = Some(recipe.task_target.to_owned());

    enter(Phase::Outputs)?;
    notify_status("writing the outputs");
    // Once the outputs are published, the final status must have room to say so.
    status.reserve(&args.state_dir).map_err(|e| {
        Failure::new(
            Phase::Outputs,
            format!("cannot set aside room for the status in {}: {e}", args.state_dir.display()),
        )
    })?;
    Outputs::new(&recipe, schema.id().unwrap_or_default(), &args.output)
        .write(&args.output, Existing::ReplaceOwn)
        .map_err(|e| match e {
            WriteError::Stopped => stopped(Phase::Outputs, stop_requested().unwrap_or(libc::SIGTERM)),
            e => Failure::new(Phase::Outputs, e.to_string()),
        })?;
    info!(phase = "outputs", "wrote the outputs to {}", args.output.display());

    if args.no_start {
        status.state = State::Rendered;
        status.message = "outputs written; nothing started (--no-start)".into();
        info!(phase = "systemd", "not starting the target (--no-start)");
        return Ok(());
    }
    enter(Phase::Systemd)?;
    notify_status("starting the target");
    let job = systemd
        .expect("connected unless --no-start")
        .start(recipe.task_target)
        .map_err(|e| Failure::new(Phase::Systemd, format!("systemd did not start the target: {e}")))?;
    info!(phase = "systemd", message_id = DISPATCHED_ID, job = job.as_str(), "dispatched: start job {job} queued");
    notify_status("dispatched");
    status.state = State::Dispatched;
    status.message = "dispatched".into();
    status.job = Some(job.clone());
    status.dispatch = Some(Dispatch {
        recipe_sha256: digest,
        target: recipe.task_target.to_owned(),
        job,
        at: timestamp(SystemTime::now()),
    });
    Ok(())
}

fn find_media(args: &RunArgs) -> Result<Found, Failure> {
    let request = match &args.media {
        Some(path) => Request::Path(path.clone()),
        None => std::fs::read_to_string("/proc/cmdline")
            .ok()
            .and_then(|cmdline| Request::from_cmdline(&cmdline))
            .unwrap_or_else(|| Request::Label(args.label.clone())),
    };
    info!(phase = "media", "looking for the task media at {request} (waiting up to {} s)", args.wait.as_secs());
    let found = discover::find(&request, &Devices::system(), args.wait, &|| stop_requested().is_some(), |progress| {
        info!(phase = "media", "{progress}");
        notify_status(progress);
    });
    enter(Phase::Media)?;
    found.map_err(|e| Failure::new(Phase::Media, e.to_string()))
}

/// Reads one file from the media, beneath its root, capped.
fn read_from_media(root: &Root, name: &str, cap: u64, phase: Phase) -> Result<Vec<u8>, Failure> {
    let missing = |why: String| {
        let failure = Failure::new(phase, format!("{name} on the media {why}"));
        // A missing schema makes the schema unusable (78); a missing recipe is "not found" (66).
        if phase == Phase::Schema {
            failure
        } else {
            failure.exit(Exit::NotFound)
        }
    };
    let file = root.open_file(name).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => missing("does not exist".into()),
        _ => missing(e.to_string()),
    })?;
    read_capped(file, cap).map_err(|e| match e {
        ReadError::TooLarge { limit } => {
            Failure::new(phase, format!("{name} on the media is larger than {limit} bytes")).exit(match phase {
                Phase::Schema => Exit::Config,
                _ => Exit::Invalid,
            })
        }
        e => missing(format!("cannot be read: {e}")),
    })
}

/// The devices the media lives on, for the host check that keeps `target_disk` off them.
fn media_devices(found: &Found, root: &Root, mount: Option<&Mount>) -> Vec<host::Dev> {
    use std::os::unix::fs::MetadataExt;
    let rdev = |path: &Path| std::fs::metadata(path).map(|m| m.rdev()).ok();
    let mut devices = vec![root.device];
    match found {
        Found::Directory(_) => {}
        Found::Device { path, .. } => devices.extend(rdev(path)),
        // The loop device, and the filesystem holding the image file.
        Found::Image { path, .. } => {
            devices.extend(mount.and_then(Mount::loop_device).and_then(rdev));
            devices.extend(std::fs::metadata(path).map(|m| m.dev()).ok());
        }
    }
    devices
}

/// Static checks, then host checks (SPEC §3): every one runs.
fn validate(
    args: &RunArgs,
    schema: &Schema,
    doc: &Document,
    media: &[host::Dev],
    systemd: Option<&Systemd>,
) -> Findings {
    // Without a bus (--no-start) nothing will be started, so any unit is fine.
    let ask = |unit: &str| systemd.map_or_else(|| Ok("loaded".to_owned()), |bus| bus.load_state(unit));
    let machine = host::SystemHost::new(media, &ask);
    let mut runner = Runner::new();
    checks::register_static(&mut runner, schema, &args.policy);
    runner.register(host::target_disk(&machine)).register(host::target_unit(&machine));
    runner.run_all(doc)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
