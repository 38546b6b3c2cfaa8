//! `run`: the boot path (SPEC §6). [`dispatch`] is the list of its phases: media → mount →
//! schema → recipe → validate → outputs → systemd. Each phase is a function that fills the
//! status as it goes or ends the run with a [`Failed`]: the kind of failure (which owns the
//! exit code), the phase, the dispatcher's words and, for the recipe, field-level details,
//! all recorded in `status.json`.

use std::cell::OnceCell;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime};

use tracing::{error, info, warn};

use crate::atomic::Existing;
use crate::bmc;
use crate::checks::safety::{AllowedTargets, Policy};
use crate::checks::{host, static_checks};
use crate::disks::{self, Disk, Identity, Resolved};
use crate::failure::{Exit, Failure, Phase};
use crate::inventory::{lines, Inventory, Sources};
use crate::issues::{Code, Detail, Findings, Severity};
use crate::log::{notify_status, DISPATCHED_ID, FAILED_ID};
use crate::media::area::{self, Area, AreaError};
use crate::media::cmdline::{Cmdline, Expected};
use crate::media::discover::{self, Devices, Found, Request};
use crate::media::iso::IsoFiles;
use crate::media::mount::{Mount, Root};
use crate::media::MediaFiles;
use crate::memory;
use crate::outputs::{Outputs, WriteError};
use crate::recipe::model::{Recipe, Valid};
use crate::recipe::Document;
use crate::report::result;
use crate::report::status::{timestamp, Dispatch, State, Status, FILE_NAME, MAX_KEPT};
use crate::report::timings::{ms, Clock, Step, Timings};
use crate::report::{Report, DETAILS_SHOWN};
use crate::schema::{name_later_versions, Ask, Schema, SchemaPolicy};
use crate::shutdown::{self, stop_requested};
use crate::systemd::{StartError, Systemd};
use crate::task::{self, RecipeFile, Refused, RECIPE_FILE, SCHEMA_FILE};
use crate::trust::firmware::Sysfs;
use crate::trust::{Signer, Trust};

/// The defaults of `run`'s options, declared once: the arguments, the help text and the
/// documentation test read them from here.
pub mod defaults {
    use std::time::Duration;

    pub const LABEL: &str = "TASK";
    pub const WAIT: Duration = Duration::from_secs(120);
    pub const OUTPUT: &str = "/run/provision";
    pub const STATE_DIR: &str = "/run/provision-dispatcher";
    pub const BUS_TIMEOUT: Duration = Duration::from_secs(10);
    /// The image's allowlist of targets, read when it exists.
    pub const ALLOWED_TARGETS: &str = "/etc/provision-dispatcher/allowed-targets";
    /// The image's trust file (SPEC §6a), read when it exists.
    pub const ALLOWED_SIGNERS: &str = "/etc/provision-dispatcher/allowed_signers";
}

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
    /// The image's allowlist of targets (`--allowed-targets`), read by the run itself so that
    /// one that cannot be read ends in a recorded failure.
    pub allowed_targets: Option<PathBuf>,
    pub schema_policy: SchemaPolicy,
    /// How long any one exchange with the system bus may take.
    pub bus_timeout: Duration,
    /// `--console`: the result line also on every console the kernel writes to.
    pub console: bool,
    /// `--bmc`: the outcome also in the BMC's System Event Log, through `/dev/ipmi0`.
    pub bmc: bool,
    /// The trust file: with it, the media's files must be signed by a key it holds.
    pub allowed_signers: Option<PathBuf>,
    /// Where Secure Boot, lockdown and the machine's UUID are read, and the inventory.
    pub sysfs: Sysfs,
    /// Where the inventory reads the CPUs' model and the memory (`/proc`).
    pub procfs: PathBuf,
    /// The live system's `/run/live`, where the boot medium's task area is read.
    pub live: PathBuf,
}

impl Default for RunArgs {
    fn default() -> Self {
        RunArgs {
            media: None,
            label: defaults::LABEL.into(),
            wait: defaults::WAIT,
            output: defaults::OUTPUT.into(),
            state_dir: defaults::STATE_DIR.into(),
            no_start: false,
            force: false,
            allowed_targets: None,
            schema_policy: SchemaPolicy::default(),
            bus_timeout: defaults::BUS_TIMEOUT,
            console: false,
            bmc: false,
            allowed_signers: None,
            sysfs: Sysfs::default(),
            procfs: Sources::default().procfs,
            live: area::LIVE.into(),
        }
    }
}

/// Why a run stopped.
struct Failed {
    failure: Failure,
    phase: Phase,
    message: String,
    details: Vec<Detail>,
}

impl Failed {
    fn new(failure: Failure, message: impl Into<String>) -> Failed {
        Failed { failure, phase: failure.phase(), message: message.into(), details: Vec::new() }
    }

    /// The media's task refused, in `phase`.
    fn refused(phase: Phase, refused: Refused) -> Failed {
        let Refused { failure, message, details } = refused;
        Failed { failure, phase, message, details }
    }

    /// A run stopped by `signal` in `phase`. The process dies of the signal once the status
    /// is written.
    fn stopped(phase: Phase, signal: i32) -> Failed {
        let message = format!("stopped by {}", shutdown::signal_name(signal));
        Failed { phase, ..Failed::new(Failure::Stopped, message) }
    }

    /// The stop that cut `failed` short; a start whose outcome is unknown still says so.
    fn stopped_during(failed: Failed, signal: i32) -> Failed {
        let stopped = Failed::stopped(failed.phase, signal);
        match failed.failure {
            Failure::StartFailed => Failed { message: format!("{}; {}", stopped.message, failed.message), ..stopped },
            _ => stopped,
        }
    }
}

/// Runs the boot path and records it. Returns the exit code; a run stopped by a signal
/// records its status, then dies of that signal.
pub fn run(args: &RunArgs) -> Exit {
    shutdown::install_signal_handlers();
    let started_at = timestamp(SystemTime::now());
    let cant_write = |e: std::io::Error| {
        error!(phase = "outputs", "cannot write the status in {}: {e}", args.state_dir.display());
        Failure::OutputsUnwritable.exit()
    };
    // A state directory that is not the dispatcher's records nothing; the result line still
    // tells the controller why (status_sha256 null: no status was written).
    let unrecorded = |e: std::io::Error| {
        let message = format!("cannot record the run in {}: {e}; nothing was done", args.state_dir.display());
        announce_unrecorded(args, &started_at, Failed::new(Failure::OutputsUnwritable, message));
        cant_write(e)
    };
    if let Err(e) = prepare_state_dir(&args.state_dir) {
        return unrecorded(e);
    }
    // Held until the process ends: a second run waits, then sees this one's dispatch.
    let _lock = match lock_state_dir(&args.state_dir) {
        Ok(lock) => lock,
        Err(e) => match stop_requested() {
            Some(signal) => {
                announce_unrecorded(args, &started_at, Failed::stopped(Phase::Media, signal));
                shutdown::die_of(signal)
            }
            None => return unrecorded(e),
        },
    };
    // Under the lock no other run writes here: what a killed one left is garbage.
    Status::remove_leftovers(&args.state_dir);
    let previous = Status::read(&args.state_dir.join(FILE_NAME)).ok();
    // The end of this boot's dispatch, if `follow` told it, goes with the dispatch.
    let ended = previous.as_ref().and_then(|p| Some(p.state).zip(p.end.clone()));
    let mut status = Status::running(started_at.clone(), previous.and_then(|s| s.dispatch));
    status.end = ended.as_ref().map(|(_, end)| end.clone());
    status.secure_boot = args.sysfs.secure_boot();
    status.lockdown = args.sysfs.lockdown();
    let consoles = crate::report::console::active(Path::new(crate::report::console::ACTIVE));
    status.consoles = crate::report::console::names(&consoles);
    if args.console && !crate::report::console::any_serial(&consoles) {
        warn!(
            phase = "media",
            "no serial console is active (the kernel writes to: {}): a controller reading serial-over-LAN gets no result line; boot with console=ttyS0,115200n8 (or the port of the server's SOL) after console=tty0",
            if status.consoles.is_empty() { "none".to_owned() } else { status.consoles.join(" ") }
        );
    }
    if let Err(e) = status.write(&args.state_dir) {
        return unrecorded(e);
    }
    install_last_words(args, &status);
    notify_status("looking for the task media");
    // With --no-start the bus is never asked, nor even connected to.
    let systemd = (!args.no_start).then(|| Systemd::new(args.bus_timeout));
    let mut clock = Clock::start();
    let dispatched_before = status.dispatch.clone();
    let read_disks = OnceCell::new();
    let result = dispatch(args, &mut status, &mut clock, systemd.as_ref(), ended.map(|(state, _)| state), &read_disks);
    clock.stop(&mut status.timings_ms);
    status.timings_ms.bus = systemd.as_ref().map(|bus| ms(bus.busy()));
    let exit = match result {
        Ok(()) => {
            log_end_of_run(&status);
            Exit::Ok
        }
        // A failure while a stop was requested is the stop: the run did not get to finish.
        Err(failed) => match stop_requested() {
            Some(signal) => record_failure(&mut status, Failed::stopped_during(failed, signal)),
            None => record_failure(&mut status, failed),
        },
    };
    status.exit_code = exit.code();
    status.finished_at = Some(timestamp(SystemTime::now()));
    if args.bmc && stop_requested().is_none() {
        let telling = Instant::now();
        status.bmc_event = tell_bmc(&status, status.dispatch != dispatched_before);
        status.timings_ms.bmc = Some(ms(telling.elapsed()));
    }
    crate::failpoint::hit("status.final");
    let inventory = read_inventory(args, &mut status, read_disks.into_inner());
    let written = status.write(&args.state_dir);
    result::announce(&status, written.as_deref().ok(), args.console, &inventory.lines);
    // The end follows the status just written, whenever a stop came: a run recorded as stopped
    // dies of the signal; one that got to its outcome first (a job queued, a failure decided)
    // exits with that outcome's code.
    if status.failure == Some(Failure::Stopped) {
        shutdown::die_of(stop_requested().unwrap_or(libc::SIGTERM));
    }
    match written {
        Err(e) if exit == Exit::Ok => cant_write(e),
        Err(e) => {
            cant_write(e);
            exit
        }
        Ok(_) => exit,
    }
}

/// The phases, in order: each step timed on `clock`, `status` filled as it goes. `ended`: the
/// state in which this boot's dispatch ended, if it did; every disk's identity kept in
/// `read_disks` when the host checks read them all (the inventory takes them).
fn dispatch(
    args: &RunArgs,
    status: &mut Status,
    clock: &mut Clock,
    systemd: Option<&Systemd>,
    ended: Option<State>,
    read_disks: &OnceCell<Vec<Disk>>,
) -> Result<(), Failed> {
    let policy = image_policy(args)?;
    let cmdline = Cmdline::of_this_boot();
    clock.enter(Step::Media, &mut status.timings_ms);
    let trust = load_trust(args)?;
    let found = find_media(args, &cmdline)?;
    status.media = Some(found.shown());
    clock.enter(Step::Mount, &mut status.timings_ms);
    let mounted = mount_media(args, found)?;
    clock.enter(Step::Read, &mut status.timings_ms);
    // The recipe first: every line after this one names it, whatever refuses the media.
    let recipe = task::read_recipe(&*mounted.files, &|| stop_requested().is_some()).map_err(|refused| {
        let phase = if refused.failure == Failure::Stopped { Phase::Media } else { refused.failure.phase() };
        Failed::refused(phase, refused)
    });
    status.recipe_sha256 = recipe.as_ref().ok().map(|recipe| recipe.sha256.clone());
    expect_this_boots_recipe(&cmdline, recipe.as_ref().ok())?;
    let media = read_media(mounted, recipe?, trust.is_some())?;
    if let Some(trust) = &trust {
        status.signature = Some(verify_media(trust, &media, &args.sysfs)?);
    }
    clock.enter(Step::Recipe, &mut status.timings_ms);
    enter(Phase::Schema)?;
    let digest = media.files.recipe_sha256.clone();
    let (schema, doc) = compile_beside_parse(args, media.files, &mut status.timings_ms);
    let schema = schema?;
    status.schema_id = schema.id().map(str::to_owned);
    if already_dispatched(args, status, &digest, ended)? {
        return Ok(());
    }
    let doc = doc?;
    let recipe = Recipe::view(&doc);
    let (valid, resolved) =
        validate(args, &policy, &schema, &recipe, &media.devices, systemd, status, clock, read_disks)?;
    status.target = Some(valid.task_target.to_owned());
    clock.enter(Step::Outputs, &mut status.timings_ms);
    write_outputs(args, &valid, &schema, resolved.as_ref(), status)?;
    match systemd {
        Some(systemd) => {
            clock.enter(Step::Start, &mut status.timings_ms);
            recheck_target_disk(args, &recipe, &media.devices, resolved.as_ref())?;
            start_target(systemd, valid.task_target, digest, status)
        }
        None => {
            status.state = State::Rendered;
            status.message = "outputs written; nothing started (--no-start)".into();
            Ok(())
        }
    }
}

/// The image's configuration of the rules: its allowlist of targets, when it has one.
fn image_policy(args: &RunArgs) -> Result<Policy, Failed> {
    let Some(file) = &args.allowed_targets else { return Ok(Policy::default()) };
    let allowed = AllowedTargets::load(file).map_err(|e| {
        let message = format!("the image's allowlist {} cannot be used: {e}", file.display());
        let detail = Detail::of_file(file.display().to_string(), Code::AllowedTargetsUnusable, message.clone());
        Failed { details: vec![detail], ..Failed::new(Failure::ImageConfig, message) }
    })?;
    Ok(Policy { allowed_targets: Some(allowed) })
}

/// Media, first: the image's trust file, if it has one. An unusable one fails the run before
/// any wait for the media.
fn load_trust(args: &RunArgs) -> Result<Option<Trust>, Failed> {
    enter(Phase::Media)?;
    let Some(file) = args.allowed_signers.as_deref() else { return Ok(None) };
    Trust::load(file).map(Some).map_err(|e| {
        let detail = Detail::of_file(file.display().to_string(), Code::TrustFileUnusable, e.clone());
        Failed { details: vec![detail], ..Failed::new(Failure::TrustFileUnusable, e) }
    })
}

/// Where this run's task comes from.
enum TaskMedia {
    /// Task media: a device, an image file or a directory.
    Found(Found),
    /// A task embedded in the area of a maintenance ISO (SPEC §6c): the file the area was read
    /// from (on the boot medium, or the ISO named), and the task ISO, checked against the area's
    /// digests.
    Embedded { from: PathBuf, iso: Vec<u8> },
}

impl TaskMedia {
    /// What status.json and the result line say of it: the device (or path), or `embedded`.
    fn shown(&self) -> String {
        match self {
            TaskMedia::Found(found) => found.path().display().to_string(),
            TaskMedia::Embedded { .. } => EMBEDDED.to_owned(),
        }
    }
}

/// status.json's `media` for a task embedded in the maintenance ISO.
pub const EMBEDDED: &str = "embedded";

/// Media: the path given, the kernel command line's, else a task embedded in the medium the
/// system booted from, else the device with the label, waited for up to `--wait`. A path or a
/// device that is a maintenance ISO gives the task embedded in it.
fn find_media(args: &RunArgs, cmdline: &Cmdline) -> Result<TaskMedia, Failed> {
    enter(Phase::Media)?;
    let request = match (&args.media, &cmdline.media) {
        (Some(path), _) => Request::Path(path.clone()),
        (None, Some(request)) => request.clone(),
        (None, None) => match embedded_on_boot_medium(args)? {
            Some(embedded) => return Ok(embedded),
            None => Request::Label(args.label.clone()),
        },
    };
    info!(phase = "media", "looking for the task media at {request} (waiting up to {} s)", args.wait.as_secs());
    let found = discover::find(&request, &Devices::system(), args.wait, &|| stop_requested().is_some(), |progress| {
        info!(phase = "media", "{progress}");
        notify_status(progress);
    });
    let found = found.map_err(|e| Failed::new(Failure::MediaNotFound, e.to_string()))?;
    info!(phase = "media", "found the task media at {}", found.path().display());
    crate::failpoint::hit("media.found");
    match &found {
        Found::Device { path, fs } | Found::Image { path, fs } if fs.label() == Some(area::VOLUME_ID) => {
            embedded_in(path)
        }
        _ => Ok(TaskMedia::Found(found)),
    }
}

/// The task embedded in the medium the system booted from (its area, where the initrd left it
/// under `/run/live`), if it holds one. Only the area's header and the bytes stored are read.
/// An area that is not ours is passed over; a damaged one fails the run (66). A device labelled
/// as task media beside it is a second task: both are refused, named, and nothing is waited for.
fn embedded_on_boot_medium(args: &RunArgs) -> Result<Option<TaskMedia>, Failed> {
    let Some(path) = area::on_boot_medium(&args.live) else { return Ok(None) };
    let shown = path.display();
    let cannot = |e: &dyn std::fmt::Display| {
        Failed::new(
            Failure::MediaUnmountable,
            format!("the task area of the boot medium ({shown}) cannot be read: {e}"),
        )
    };
    let file = crate::files::open_regular(&path).map_err(|e| cannot(&e))?;
    let len = file.metadata().map_err(|e| cannot(&e))?.len();
    let (header, iso) = match Area::new(file, 0, len).task() {
        Ok(Some(task)) => task,
        Ok(None) => {
            info!(phase = "media", "the boot medium's task area ({shown}) is empty");
            return Ok(None);
        }
        Err(e @ (AreaError::NotOurs | AreaError::NotMaintenance(_))) => {
            info!(phase = "media", "{shown} is no task area of the dispatcher ({e}); passed over");
            return Ok(None);
        }
        Err(e) => return Err(cannot(&e)),
    };
    let digest = header.task.as_ref().map(|task| crate::issues::hex(&task.task_sha256)).unwrap_or_default();
    info!(phase = "media", "found a task embedded in the boot medium ({shown}): the task ISO of sha256:{digest}");
    let devices = discover::labelled(&Devices::system(), &args.label, &|| stop_requested().is_some());
    if !devices.is_empty() {
        let names: Vec<String> =
            devices.iter().map(|d| format!("{} (label {})", d.path.display(), args.label)).collect();
        return Err(Failed::new(
            Failure::MediaNotFound,
            format!(
                "{} task media: a task embedded in the boot medium ({shown}) and {}; attach exactly one task medium",
                devices.len() + 1,
                names.join(", ")
            ),
        ));
    }
    Ok(Some(TaskMedia::Embedded { from: path, iso }))
}

/// The task embedded in the maintenance ISO at `path` (named with `--media` or
/// `provision.media=`), read in user space as `media check` reads it.
fn embedded_in(path: &Path) -> Result<TaskMedia, Failed> {
    let shown = path.display();
    let cannot = |failure, e: &dyn std::fmt::Display| Failed::new(failure, format!("{shown}: {e}"));
    let mut file = boot_io::devices::open(path).map_err(|e| cannot(Failure::MediaUnmountable, &e))?;
    // The end, not the metadata: a block device's metadata says 0 bytes.
    let len = std::io::Seek::seek(&mut file, std::io::SeekFrom::End(0));
    let len = len.map_err(|e| cannot(Failure::MediaUnmountable, &e))?;
    let area = area::in_image(file, len).map_err(|e| cannot(Failure::MediaNotFound, &e))?;
    match area.task() {
        Ok(Some((_, iso))) => Ok(TaskMedia::Embedded { from: path.to_owned(), iso }),
        Ok(None) => Err(Failed::new(
            Failure::MediaNotFound,
            format!("{shown} is a maintenance ISO whose task area is empty: no task is embedded"),
        )),
        Err(e @ (AreaError::NotOurs | AreaError::NotMaintenance(_))) => Err(cannot(Failure::MediaNotFound, &e)),
        Err(e) => Err(cannot(Failure::MediaUnmountable, &e)),
    }
}

/// What the run takes from the media before it lets go of it.
struct MediaContent {
    files: task::Files,
    /// The devices the media lives on, which `target_disk` must not be on.
    devices: Vec<host::Dev>,
}

/// The media's files, mounted (or the directory given, or an embedded task in memory), and the
/// devices it lives on. Fields drop in order: the files (the root directory) are closed before
/// the unmount.
struct Mounted {
    files: Box<dyn MediaFiles>,
    mount: Option<Mount>,
    devices: Vec<host::Dev>,
}

/// Mount: read-only, through a loop device for an image file; an embedded task is read in user
/// space, as `media check` reads it.
fn mount_media(args: &RunArgs, media: TaskMedia) -> Result<Mounted, Failed> {
    enter(Phase::Mount)?;
    let unmountable = |message: String| Failed::new(Failure::MediaUnmountable, message);
    let found = match media {
        TaskMedia::Found(found) => found,
        TaskMedia::Embedded { from, iso } => {
            use std::os::unix::fs::{FileTypeExt, MetadataExt};
            let len = iso.len() as u64;
            let files = IsoFiles::new(iso, len).map_err(|e| {
                unmountable(format!("the task embedded in {} cannot be read as an ISO: {e}", from.display()))
            })?;
            // The filesystem holding the area (the boot medium's), or the device named.
            let devices = std::fs::metadata(&from)
                .map(|m| if m.file_type().is_block_device() { vec![m.dev(), m.rdev()] } else { vec![m.dev()] })
                .unwrap_or_default();
            return Ok(Mounted { files: Box::new(files), mount: None, devices });
        }
    };
    let (mount, root_path) = match &found {
        Found::Directory(dir) => (None, dir.clone()),
        Found::Device { path, fs } | Found::Image { path, fs } => {
            let mount =
                Mount::new(path, fs, &args.state_dir.join("media")).map_err(|e| unmountable(format!("{e:#}")))?;
            let point = mount.point().to_owned();
            (Some(mount), point)
        }
    };
    let root = Root::open(&root_path).map_err(|e| unmountable(format!("cannot open {}: {e}", root_path.display())))?;
    let devices = media_devices(&found, &root, mount.as_ref());
    Ok(Mounted { files: Box::new(root), mount, devices })
}

/// Everything needed from the media is read, then it is unmounted (and its loop device
/// detached) before anything else happens. The recipe was read first ([`task::read_recipe`]).
fn read_media(mounted: Mounted, recipe: RecipeFile, signed: bool) -> Result<MediaContent, Failed> {
    let files = task::read(&*mounted.files, recipe, signed)
        .map_err(|refused| Failed::refused(refused.failure.phase(), refused))?;
    // Close the directory first, or the unmount finds the filesystem busy.
    let Mounted { files: root, mount, devices } = mounted;
    drop(root);
    drop(mount);
    Ok(MediaContent { files, devices })
}

/// Media, last: with a trust file, both files need a good signature by a key it holds,
/// checked on the bytes read, before anything parses them. Each file refused is a detail.
fn verify_media(trust: &Trust, media: &MediaContent, sysfs: &Sysfs) -> Result<Signer, Failed> {
    enter(Phase::Media)?;
    let signer = task::verify(trust, &media.files, sysfs.machine_uuid().as_deref())
        .map_err(|refused| Failed::refused(Phase::Media, refused))?;
    info!(phase = "media", "signed by {} ({}, namespace {})", signer.principal, signer.fingerprint, signer.namespace);
    Ok(signer)
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

/// Schema and recipe, side by side (`task::compile_beside_parse`). The schema's time is its
/// thread's; the recipe step's, the whole.
fn compile_beside_parse(
    args: &RunArgs,
    files: task::Files,
    timings: &mut Timings,
) -> (Result<Schema, Failed>, Result<Document, Failed>) {
    notify_status("validating the recipe");
    let taken = task::compile_beside_parse(args.schema_policy, files.schema, files.recipe);
    timings.schema = taken.schema_took.map(ms);
    let schema = taken
        .schema
        .map_err(|refused| Failed::refused(refused.failure.phase(), refused))
        .inspect(|schema| info!(phase = "schema", "compiled {SCHEMA_FILE} ({})", schema.id().unwrap_or("no $id")));
    (schema, taken.doc.map_err(|refused| Failed::refused(Phase::Recipe, refused)))
}

/// The stale-media guard: with `provision.recipe=` on the kernel command line, only that
/// recipe is taken. Decided from the recipe file's digest before anything else reads the
/// media (schema, caps, parsing): another job's media is stale whatever else is wrong with
/// it. A recipe that could not be read is left to that read's failure, which says why.
fn expect_this_boots_recipe(cmdline: &Cmdline, recipe: Option<&RecipeFile>) -> Result<(), Failed> {
    let stale = |code, file: &str, message: String| {
        let detail = Detail::of_file(file, code, message.clone());
        Failed { details: vec![detail], ..Failed::new(Failure::StaleMedia, message) }
    };
    match (&cmdline.recipe, recipe) {
        (Some(Expected::Malformed), _) => Err(stale(
            Code::ExpectedRecipeMalformed,
            "/proc/cmdline",
            "provision.recipe= on the kernel command line is malformed (it takes sha256: and 64 hexadecimal digits), so no media can be this boot's; nothing was started".into(),
        )),
        (Some(expected @ Expected::Sha256(_)), Some(recipe)) if !expected.matches(&recipe.sha256) => Err(stale(
            Code::RecipeNotExpected,
            RECIPE_FILE,
            format!(
                "the media's {RECIPE_FILE} (sha256 {}) is not the one provision.recipe= on the kernel command line expects; nothing was started",
                recipe.sha256
            ),
        )),
        _ => Ok(()),
    }
}

/// Recipe, the rerun rule (SPEC §6.5): the recipe this boot already dispatched is not started
/// again; a different one is refused unless `--force`. `true`: nothing more to do; the state
/// is then the dispatch's, or its end's (`ended`) once `follow` told it.
fn already_dispatched(args: &RunArgs, status: &mut Status, digest: &str, ended: Option<State>) -> Result<bool, Failed> {
    enter(Phase::Recipe)?;
    let Some(done) = status.dispatch.clone() else { return Ok(false) };
    if done.recipe_sha256 == digest {
        status.state = ended.filter(|_| status.end.is_some()).unwrap_or(State::Dispatched);
        match &done.job {
            Some(job) => {
                info!(phase = "recipe", "this recipe was already dispatched in this boot (job {job}); nothing to do");
                status.message = "already dispatched in this boot; not started again".into();
            }
            None => {
                info!(phase = "recipe", "the start of this recipe's target was already requested in this boot, its outcome unknown; nothing to do");
                status.message = "already requested in this boot (outcome unknown); not started again".into();
            }
        }
        status.target = Some(done.target);
        status.job = done.job;
        return Ok(true);
    }
    if !args.force {
        return Err(Failed::new(
            Failure::DifferentRecipe,
            "a different recipe was already dispatched in this boot; refusing to replace it (run with --force to do so)",
        ));
    }
    warn!(phase = "recipe", "replacing the recipe dispatched earlier in this boot (--force)");
    Ok(false)
}

/// Validate: the static checks, then the host checks (SPEC §3), every one of them. The disk
/// `target_disk` resolved to is recorded whatever the outcome; when a check of it failed, every
/// disk of the machine too, so that the operator sees which is which.
#[allow(clippy::too_many_arguments)]
fn validate<'a>(
    args: &RunArgs,
    policy: &Policy,
    schema: &Schema,
    recipe: &'a Recipe<'a>,
    media: &[host::Dev],
    systemd: Option<&Systemd>,
    status: &mut Status,
    clock: &mut Clock,
    read_disks: &OnceCell<Vec<Disk>>,
) -> Result<(Valid<'a>, Option<Resolved>), Failed> {
    enter(Phase::Validate)?;
    clock.enter(Step::Validate, &mut status.timings_ms);
    crate::failpoint::hit("validate.started");
    let mut findings = static_checks(recipe, schema, policy)
        .map_err(|e| Failed::refused(Phase::Validate, task::schema_refused(&e)))?;
    name_later_versions(schema, &mut findings.issues, Ask::Media);
    clock.enter(Step::HostChecks, &mut status.timings_ms);
    // Without a bus (--no-start) nothing will be started, so any unit is fine.
    let ask = |unit: &str| systemd.map_or_else(|| Ok("loaded".to_owned()), |bus| bus.load_state(unit));
    let machine = host::SystemHost::new(media, &ask).with_sysfs(args.sysfs.root());
    let host = host::check(recipe, &machine, &findings);
    let resolved_disk = host.resolved.as_ref().and_then(|r| r.disk.as_ref());
    status.disk = resolved_disk.map(Identity::from);
    if host.issues.iter().any(|issue| issue.path.starts_with("/target_disk")) {
        status.disks = host::listed_for(recipe, &machine, resolved_disk);
    }
    if let Some(disks) = machine.read_disks() {
        let _ = read_disks.set(disks.to_vec());
    }
    findings.issues.extend(host.issues);
    let valid = Valid::new(recipe, &findings);
    let report = Report::of_findings(recipe.doc(), findings);
    log_details("validate", &report.warnings, Severity::Warning);
    status.warnings = report.warnings;
    match (valid, report.failure) {
        (Some(valid), None) => Ok((valid, host.resolved)),
        (_, failure) => {
            let message = format!("the recipe failed validation: {} error(s)", report.details.len());
            let failure = failure.unwrap_or(Failure::ValidationError);
            Err(Failed { details: report.details, ..Failed::new(failure, message) })
        }
    }
}

/// Outputs: staged and renamed into place, after room for the final status is set aside.
fn write_outputs(
    args: &RunArgs,
    valid: &Valid<'_>,
    schema: &Schema,
    resolved: Option<&Resolved>,
    status: &mut Status,
) -> Result<(), Failed> {
    enter(Phase::Outputs)?;
    notify_status("writing the outputs");
    // Once the outputs are published, the final status must have room to say so.
    status.reserve(&args.state_dir).map_err(|e| {
        let message = format!("cannot set aside room for the status in {}: {e}", args.state_dir.display());
        Failed::new(Failure::OutputsUnwritable, message)
    })?;
    Outputs::new(valid, schema.id().unwrap_or_default(), &args.output, resolved)
        .write(&args.output, Existing::ReplaceOwn)
        .map_err(|e| match e {
            WriteError::Stopped => Failed::stopped(Phase::Outputs, stop_requested().unwrap_or(libc::SIGTERM)),
            e => Failed::new(Failure::OutputsUnwritable, e.to_string()),
        })?;
    info!(phase = "outputs", "wrote the outputs to {}", args.output.display());
    Ok(())
}

/// Systemd, first: the target disk is still the free block device validation found, and the
/// very disk (its identity read again). Between the two, the outputs were written; a disk that
/// left meanwhile (a hot-unplug, a failing drive), or another disk under its name, fails the
/// run here, before anything starts.
fn recheck_target_disk(
    args: &RunArgs,
    recipe: &Recipe<'_>,
    media: &[host::Dev],
    validated: Option<&Resolved>,
) -> Result<(), Failed> {
    enter(Phase::Systemd)?;
    crate::failpoint::hit("start.before");
    let no_bus = |_: &str| Ok("loaded".to_owned());
    let machine = host::SystemHost::new(media, &no_bus).with_sysfs(args.sysfs.root());
    let issues = host::recheck_disk(recipe, &machine, validated);
    if issues.is_empty() {
        return Ok(());
    }
    let report = Report::of_findings(recipe.doc(), Findings { issues });
    let message = "the target disk changed after validation; nothing was started".to_owned();
    Err(Failed { details: report.details, ..Failed::new(Failure::ValidationError, message) })
}

/// Systemd: `StartUnit(target, "replace")`, not waiting for the job. A start that may have
/// queued the job without saying so (its reply cut off by the timeout or a stop, or
/// unreadable) is recorded as requested with its outcome unknown: a rerun does not start the
/// target a second time (`--force` does).
fn start_target(systemd: &Systemd, target: &str, digest: String, status: &mut Status) -> Result<(), Failed> {
    enter(Phase::Systemd)?;
    notify_status("starting the target");
    let dispatch =
        |job| Dispatch { recipe_sha256: digest, target: target.to_owned(), job, at: timestamp(SystemTime::now()) };
    let job = match systemd.start(target) {
        Ok(job) => job,
        Err(StartError { error, maybe_queued: true }) => {
            status.dispatch = Some(dispatch(None));
            status.end = None;
            let message = format!("the start of the target was requested, its outcome is unknown ({error:#}); a rerun does not start it again");
            return Err(Failed::new(Failure::StartFailed, message));
        }
        Err(StartError { error, maybe_queued: false }) => {
            return Err(Failed::new(Failure::StartFailed, format!("systemd did not start the target: {error:#}")))
        }
    };
    notify_status("dispatched");
    status.state = State::Dispatched;
    status.message = "dispatched".into();
    status.job = Some(job.clone());
    status.dispatch = Some(dispatch(Some(job)));
    status.end = None;
    Ok(())
}

/// The BMC's System Event Log learns the outcome (SPEC §6b): installation started when this
/// run started the target, failed on a failure. Nothing else depends on what became of it.
fn tell_bmc(status: &Status, started: bool) -> Option<bmc::Outcome> {
    let event = match status.state {
        State::Failed => bmc::Event::InstallationFailed,
        State::Dispatched if started => bmc::Event::InstallationStarted,
        _ => return None,
    };
    let outcome = bmc::send(Path::new(bmc::DEVICE), event, bmc::TIMEOUT, &|| stop_requested().is_some());
    match outcome {
        bmc::Outcome::Logged | bmc::Outcome::NoBmc => info!(phase = "report", "BMC event {event:?}: {outcome:?}"),
        _ => warn!(phase = "report", "BMC event {event:?}: {outcome:?}; the outcome stands"),
    }
    Some(outcome)
}

/// The machine's inventory, to be printed before the result line (SPEC §6b), its digest in
/// the status: read at the end, when the media's disk is known (and after the start, which does
/// not delay it: the target's units wait for this run to end), with the disks' identity as the
/// host checks read it when they read every disk (`read_disks`). The disk the recipe named is
/// the last the inventory leaves out when it must leave out some.
fn read_inventory(args: &RunArgs, status: &mut Status, read_disks: Option<Vec<Disk>>) -> lines::Printed {
    let reading = Instant::now();
    let sources = Sources { sysfs: args.sysfs.clone(), procfs: args.procfs.clone() };
    let media: Vec<host::Dev> =
        status.media.as_deref().and_then(|path| disks::device_of(Path::new(path))).into_iter().collect();
    let mut inventory = Inventory::read(&sources, &media, read_disks);
    let printed = lines::fit(&mut inventory, status.disk.as_ref().map(|disk| disk.name.as_str()));
    status.inventory_sha256 = Some(printed.sha256.clone());
    status.timings_ms.inventory = Some(ms(reading.elapsed()));
    printed
}

/// The phase the run is in, for a failure that cannot say it otherwise (memory run out): an
/// index into [`Phase::ALL`]. A run starts in `media` (`boot` is the initrd's).
static CURRENT_PHASE: AtomicUsize = AtomicUsize::new(Phase::Media as usize);

/// Enters `phase`: stops the run instead if a signal asked for it.
fn enter(phase: Phase) -> Result<(), Failed> {
    CURRENT_PHASE.store(phase as usize, Ordering::Relaxed);
    match stop_requested() {
        Some(signal) => Err(Failed::stopped(phase, signal)),
        None => Ok(()),
    }
}

fn current_phase() -> Phase {
    Phase::ALL[CURRENT_PHASE.load(Ordering::Relaxed)]
}

/// The result line of a run that could record nothing (its state directory refused): a
/// status of its own, never written, announced as every run's is.
fn announce_unrecorded(args: &RunArgs, started_at: &str, failed: Failed) {
    let mut status = Status::running(started_at.to_owned(), None);
    status.secure_boot = args.sysfs.secure_boot();
    status.lockdown = args.sysfs.lockdown();
    record_failure(&mut status, failed);
    status.finished_at = Some(timestamp(SystemTime::now()));
    let inventory = read_inventory(args, &mut status, None);
    result::announce(&status, None, args.console, &inventory.lines);
}

fn record_failure(status: &mut Status, failed: Failed) -> Exit {
    let phase = failed.phase.name();
    let exit = failed.failure.exit();
    log_details(phase, &failed.details, Severity::Error);
    notify_status(&format!("failed in {phase}: {}", failed.message));
    status.state = State::Failed;
    status.failure = Some(failed.failure);
    status.phase = Some(failed.phase);
    status.exit_code = exit.code();
    status.message = failed.message;
    status.details = failed.details;
    log_end_of_run(status);
    exit
}

/// The end-of-run journal entry: dispatched or failed, with its MESSAGE_ID (the catalog
/// explains both) and where the time went (`MEDIA_MS=`, `MOUNT_MS=`, ..., `TOTAL_MS=`).
fn log_end_of_run(status: &Status) {
    let t = &status.timings_ms;
    let took = format!("{}; {}", t.line(), crate::report::banner::trust_line(status));
    macro_rules! end_of_run {
        ($level:expr, $($field:tt)*) => {
            tracing::event!(
                $level,
                media_ms = t.media,
                mount_ms = t.mount,
                read_ms = t.read,
                schema_ms = t.schema,
                recipe_ms = t.recipe,
                validate_ms = t.validate,
                host_checks_ms = t.host_checks,
                outputs_ms = t.outputs,
                start_ms = t.start,
                bus_ms = t.bus,
                total_ms = t.total,
                secure_boot = status.secure_boot,
                lockdown = status.lockdown.as_deref(),
                signer = status.signature.as_ref().map(|s| s.fingerprint.as_str()),
                $($field)*
            )
        };
    }
    match (status.state, status.failure) {
        (State::Failed, Some(failure)) => {
            let (phase, exit_code) = (status.phase.unwrap_or(failure.phase()).name(), status.exit_code);
            end_of_run!(
                tracing::Level::ERROR,
                phase,
                failure = failure.word(),
                message_id = FAILED_ID,
                exit_code,
                "provisioning failed: {} (took: {took})",
                status.message
            );
        }
        _ => match status.job.as_deref() {
            Some(job) => end_of_run!(
                tracing::Level::INFO,
                phase = "systemd",
                message_id = DISPATCHED_ID,
                job,
                "{}: start job {job} (took: {took})",
                status.message
            ),
            None => end_of_run!(tracing::Level::INFO, phase = "systemd", "{} (took: {took})", status.message),
        },
    }
}

/// One journal entry per detail, with CODE and PATH fields for `journalctl CODE=...`; at
/// most [`DETAILS_SHOWN`] of them: status.json keeps more, and a hostile recipe must not
/// flood the journal.
fn log_details(phase: &str, details: &[Detail], severity: Severity) {
    for d in details.iter().take(DETAILS_SHOWN) {
        let line = d.line(RECIPE_FILE, severity);
        match severity {
            Severity::Error => error!(phase, code = d.code.as_str(), path = d.path.as_str(), "{line}"),
            Severity::Warning => warn!(phase, code = d.code.as_str(), path = d.path.as_str(), "{line}"),
        }
    }
    if let Some(more) = details.len().checked_sub(DETAILS_SHOWN).filter(|&n| n > 0) {
        let what = if severity == Severity::Error { "error" } else { "warning" };
        info!(phase, "and {more} more {what}(s): status.json keeps the first {MAX_KEPT}, `check` lists them all");
    }
}

/// The state directory, created if missing, and refused unless it is the dispatcher's own: a
/// directory (not a symlink) of root or this user, mode 0700, that no other user can rename
/// (SPEC §5). Another user's directory could hold a planted `lock` symlink or a forged
/// dispatch record.
fn prepare_state_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    crate::files::private_dir(dir)?;
    let mode = std::fs::symlink_metadata(dir)?.permissions().mode() & 0o7777;
    if mode != 0o700 {
        let message = format!("{} has mode {mode:04o}, not the dispatcher's 0700; refusing to use it", dir.display());
        return Err(std::io::Error::new(std::io::ErrorKind::PermissionDenied, message));
    }
    Ok(())
}

/// Takes the state directory's lock, waiting (and saying so) while another run holds it.
fn lock_state_dir(dir: &Path) -> std::io::Result<std::fs::File> {
    crate::report::status::lock(dir, None, || {
        info!(phase = "media", "another run of the dispatcher holds {}; waiting for it", dir.display());
    })
}

/// A panic (a bug) or memory running out still ends as a recorded failure (exit 70) with the
/// media unmounted, the loop device detached and no staging directory left. A panic's
/// message is not recorded: it could quote anything; its location is.
fn install_last_words(args: &RunArgs, status: &Status) {
    let last_words = LastWords {
        state_dir: args.state_dir.clone(),
        console: args.console,
        started_at: status.started_at.clone(),
        dispatch: status.dispatch.clone(),
    };
    let on_panic = last_words.clone();
    std::panic::set_hook(Box::new(move |info| {
        let location = info.location().map(|l| format!("{}:{}", l.file(), l.line())).unwrap_or_default();
        on_panic.say(Failure::Bug, format!("the dispatcher panicked at {location}; this is a bug"));
        std::process::exit(Failure::Bug.exit().code().into());
    }));
    memory::on_exhaustion(move |exhaustion| {
        let message = format!("the dispatcher ran {exhaustion} while in the {} phase", current_phase().name());
        last_words.say(Failure::OutOfMemory, message);
    });
}

/// What a run that must end at once records, from what it knew when it started.
#[derive(Clone)]
struct LastWords {
    state_dir: PathBuf,
    console: bool,
    started_at: String,
    dispatch: Option<Dispatch>,
}

impl LastWords {
    fn say(&self, failure: Failure, message: String) {
        shutdown::undo_all();
        let exit_code = failure.exit().code();
        let mut status = Status::running(self.started_at.clone(), self.dispatch.clone());
        status.state = State::Failed;
        status.failure = Some(failure);
        status.phase = Some(failure.phase());
        status.exit_code = exit_code;
        status.message = message;
        status.finished_at = Some(timestamp(SystemTime::now()));
        log_end_of_run(&status);
        let written = status.write(&self.state_dir);
        // No inventory: after a panic or with memory run out, reading the machine again could
        // fail the same way, and the result line must get out.
        result::announce(&status, written.as_deref().ok(), self.console, &[]);
    }
}
