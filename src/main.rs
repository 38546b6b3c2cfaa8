//! Command line of provision-dispatcher: parses arguments and calls the library.

use std::ffi::OsString;
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use lexopt::prelude::*;
use provision_dispatcher::checks::safety::{AllowedTargets, Policy};
use provision_dispatcher::cmd::check::{self, CheckArgs, Format};
use provision_dispatcher::cmd::disks::{self, DisksArgs};
use provision_dispatcher::cmd::embed::{self, Destination, EmbedArgs, RemoveArgs};
use provision_dispatcher::cmd::follow::{self, FollowArgs};
use provision_dispatcher::cmd::media::{self, BuildArgs, CheckMediaArgs, Signing};
use provision_dispatcher::cmd::render::{self, RenderArgs};
use provision_dispatcher::cmd::report;
use provision_dispatcher::cmd::run::{self, defaults, RunArgs};
use provision_dispatcher::cmd::schema;
use provision_dispatcher::failure::{Exit, Failure};
use provision_dispatcher::report::status::FILE_NAME;
use provision_dispatcher::schema::{SchemaPolicy, VERSIONS};
use provision_dispatcher::trust::firmware::{is_uuid, Sysfs};

const USAGE: &str = "\
Usage: provision-dispatcher <COMMAND> [OPTIONS]

Commands:
  check FILE     Validate a recipe file offline and print a field-level report
  render FILE    Validate a recipe and write its outputs into a directory; start nothing
  run            The boot path: find and mount the task ISO, validate, write outputs,
                 start the recipe's systemd target
  follow         Follow the task that run dispatched to its end, and tell how it ended
  report         Print the last status for people
  disks          List this machine's whole disks, what identifies each, and whether a
                 recipe may name it
  media build    Check a recipe, then write the task ISO the boot reads (signed if asked)
  media check    Read a task ISO, directory or embedded task as the boot reads it and report
                 as the boot would decide
  media embed    Write a task into the maintenance ISO's own area: one ISO per server
  schema         List the schemas compiled into this binary, or print one byte for byte

Options:
  -h, --help     Print help (also after a command)
  -V, --version  Print version

Exit codes: 0 ok, 64 usage, 65 recipe invalid, 66 media or recipe not found,
69 systemd unavailable or unit not loadable, 70 internal error, 73 cannot write outputs,
77 untrusted media, 78 schema or trust file unusable.
";

const CHECK_USAGE: &str = "\
Usage: provision-dispatcher check FILE [OPTIONS]

Validates a recipe file against the schema (the canonical one compiled into the binary unless
--schema is given), then the dispatcher's safety rules and lints. Offline: reads nothing else.

Options:
      --schema FILE                 Validate against this draft-07 schema instead
      --schema-version N            Validate against the compiled-in schema version N
                                    (1 or 2; --version lists them) [default: 1]
      --format human|json           Report format [default: human]
      --allowed-targets FILE        Only these targets (one per line) may be started
      --accept-unknown-schema-id    Accept a schema whose $id this dispatcher does not know
      --allowed-signers FILE        Require FILE.sig beside the recipe (and the --schema given)
                                    signed by a key of this trust file (OpenSSH allowed_signers)
      --machine-uuid UUID           The server a bound recipe is checked for
                                    [default: this machine's SMBIOS UUID, if readable]
      --inventory FILE              Also run the target disk's checks against this saved
                                    inventory of the server: a console log holding a run's
                                    PROVISION-INVENTORY v1 lines, or JSON with a disks list
                                    (`disks --format json`)
  -h, --help                        Print help
";

const RENDER_USAGE: &str = "\
Usage: provision-dispatcher render FILE --output DIR [OPTIONS]

Validates a recipe as `check` does, then writes its outputs (recipe.env, layout.json,
user-data, unattend.xml, ks.cfg, metadata.json: those the recipe implies) into DIR, which is
created, or refused if it exists and is not empty. Starts nothing. The report goes to stderr,
the files written to stdout.

Options:
  -o, --output DIR                  Where to write (required)
      --schema FILE                 Validate against this draft-07 schema instead
      --schema-version N            Validate against the compiled-in schema version N
                                    (1 or 2; --version lists them) [default: 1]
      --allowed-targets FILE        Only these targets (one per line) may be started
      --accept-unknown-schema-id    Accept a schema whose $id this dispatcher does not know
      --allowed-signers FILE        Require FILE.sig beside the recipe (and the --schema given)
                                    signed by a key of this trust file (OpenSSH allowed_signers)
      --machine-uuid UUID           The server a bound recipe is checked for
                                    [default: this machine's SMBIOS UUID, if readable]
  -h, --help                        Print help
";

const MEDIA_USAGE: &str = "\
Usage: provision-dispatcher media build RECIPE -o ISO [OPTIONS]
       provision-dispatcher media check MEDIA [OPTIONS]
       provision-dispatcher media embed MAINTENANCE.iso TASK (-o OUT.iso | --in-place) [OPTIONS]

Task media made and read by this binary, with no other program and no root:
  build RECIPE -o ISO   Check the recipe as `check` does, then write the task ISO
  check MEDIA           Read a task ISO (a directory, a maintenance ISO with a task embedded)
                        as the boot reads it, and report
  embed MAINT TASK      Write the task into the maintenance ISO's area: one ISO per server

`provision-dispatcher media build --help` (check, embed) says more.
";

const MEDIA_BUILD_USAGE: &str = "\
Usage: provision-dispatcher media build RECIPE -o ISO [OPTIONS]

Checks RECIPE as `check` does (the same report, the same exit codes); when it is valid, writes
the task ISO the boot reads: ISO 9660 with Rock Ridge and Joliet, volume id TASK, holding
recipe.json (RECIPE byte for byte), recipe.schema.json (the compiled-in schema asked for, or the
--schema file) and, when signed, recipe.json.sig and recipe.schema.json.sig. The same inputs
give the same bytes. ISO is replaced whole or not at all; nothing is written when the recipe is
invalid or a signature is not good. Prints the report, then the ISO written, the recipe's
SHA-256 (the value of provision.recipe=sha256:), the schema's $id and the signer.

Options:
  -o, --output ISO                  Where to write the task ISO (required)
      --schema FILE                 Check against this draft-07 schema and put it on the media
      --schema-version N            Check against the compiled-in schema version N and put it
                                    on the media (`schema list` shows them) [default: 1]
      --sign KEY                    Sign both files with this OpenSSH private key (Ed25519 or
                                    ECDSA P-256, no passphrase) as `ssh-keygen -Y sign -f KEY
                                    -n provision-dispatcher` does
      --bind UUID                   The signatures are bound to this server: namespace
                                    provision-dispatcher@UUID (the UUID as the SMBIOS gives
                                    it, in either case: it is signed in lower case, and the
                                    boot compares without case)
      --signatures DIR              Take recipe.json.sig and recipe.schema.json.sig from DIR
                                    (made elsewhere, e.g. with an HSM); each must be a good
                                    signature of the file going on the media
      --allowed-signers FILE        The signatures must also be by a key of this trust file
                                    (OpenSSH allowed_signers), as the image will check them
      --allowed-targets FILE        Only these targets (one per line) may be started
      --accept-unknown-schema-id    Accept a schema whose $id this dispatcher does not know
      --format human|json           Report format [default: human]
  -h, --help                        Print help

Exit codes: 0 written, 64 usage (or a key that cannot sign), 65 recipe invalid, 66 recipe not
readable, 73 ISO not writable, 77 a signature not good, 78 schema or trust file unusable.
";

const MEDIA_CHECK_USAGE: &str = "\
Usage: provision-dispatcher media check MEDIA [OPTIONS]

Reads MEDIA, a task ISO (a file or a block device), a directory, or a maintenance ISO with a
task embedded (`media embed`), as the boot reads the task media: an ISO in user space (no
mount, no loop device, no root), with the boot's file names, size caps and refusals (a file
missing, a symbolic link, a directory or a device where a file belongs, an image whose volume id
is not TASK; an embedded task through its area's header and digests). Then the signatures (with
--allowed-signers), the schema, the recipe's checks and, with --inventory, the target disk's:
the report and exit code the boot would give for this media on that server, short of the
checks that need the server itself. Prints the report, then the recipe's SHA-256, the schema's
$id and the signer.

Options:
      --allowed-signers FILE        The image's trust file: the media's files must be signed by
                                    a key of it (OpenSSH allowed_signers)
      --machine-uuid UUID           The server a bound recipe is checked for
                                    [default: this machine's SMBIOS UUID, if readable]
      --inventory FILE              Also run the target disk's checks against this saved
                                    inventory of the server: a console log holding a run's
                                    PROVISION-INVENTORY v1 lines, or JSON with a disks list
                                    (`disks --format json`)
      --allowed-targets FILE        The image's allowlist of targets (one per line)
      --accept-unknown-schema-id    Judge as an image that accepts a schema of an unknown $id
      --format human|json           Report format [default: human]
  -h, --help                        Print help

Exit codes, the boot's: 0 ok, 64 usage, 65 recipe invalid, 66 media or recipe not readable,
77 untrusted media, 78 schema or trust file unusable.
";

const MEDIA_EMBED_USAGE: &str = "\
Usage: provision-dispatcher media embed MAINTENANCE.iso TASK (-o OUT.iso | --in-place) [OPTIONS]
       provision-dispatcher media embed --remove MAINTENANCE.iso (-o OUT.iso | --in-place)

Writes a task into the area the maintenance ISO reserves for it (/provision/task.img), so that a
server with one virtual drive boots one ISO that carries its task; no other byte changes, and the
image boots as before (UEFI with Secure Boot, BIOS; as a CD or a USB disk). TASK is a task ISO
(`media build`'s) or a directory holding recipe.json, recipe.schema.json and their .sig files
(written as `media build` writes an ISO). It is first read and judged as `media check` judges
it, with the same options: nothing is written when it is refused, when it does not fit the area
(deflated, if that makes it smaller), or when the area already holds a task (unless --force).
Prints the report, then what was written, the recipe's SHA-256, the schema's $id and the signer.

Options:
  -o, --output OUT.iso              Write the ISO with the task there (whole or not at all); the
                                    MAINTENANCE.iso given is not changed
      --in-place                    Write into MAINTENANCE.iso itself (a copy already made)
      --remove                      Empty the area instead: the image as it was built, byte for
                                    byte (takes no TASK)
      --force                       Replace a task the area already holds
      --allowed-signers FILE        The image's trust file: the task's files must be signed by a
                                    key of it (OpenSSH allowed_signers)
      --machine-uuid UUID           The server a bound recipe is checked for
                                    [default: this machine's SMBIOS UUID, if readable]
      --inventory FILE              Also run the target disk's checks against this saved
                                    inventory of the server: a console log holding a run's
                                    PROVISION-INVENTORY v1 lines, or JSON with a disks list
                                    (`disks --format json`)
      --allowed-targets FILE        The image's allowlist of targets (one per line)
      --accept-unknown-schema-id    Judge as an image that accepts a schema of an unknown $id
      --format human|json           Report format [default: human]
  -h, --help                        Print help

Exit codes: 0 written, 64 usage, 65 recipe invalid, 66 the task or the maintenance ISO not
readable (not that image, no area), 73 not writable (or the task does not fit, or the area holds
one), 77 untrusted task, 78 schema or trust file unusable.
";

const SCHEMA_USAGE: &str = "\
Usage: provision-dispatcher schema list [--format human|json]
       provision-dispatcher schema print NAME

The schemas compiled into this binary, byte for byte: the recipe's versions (1, 2), so that
the schema on task media comes from the binary that checks them (`media build` puts them there
itself), and the published schemas of the documents a controller reads (result, inventory,
check, status; the package also installs them in /usr/share/provision-dispatcher/schemas/).
`list` names each: NAME, $id, what it describes. `print NAME` writes its text to stdout.

Exit codes: 0 ok, 64 usage (an unknown NAME).
";

fn run_usage() -> String {
    format!(
        "\
Usage: provision-dispatcher run [OPTIONS]

The boot path: finds the task media, mounts it read-only, compiles its recipe.schema.json,
validates its recipe.json (schema, safety rules, host checks), writes the outputs and starts
the recipe's systemd target over the system bus. Records the run in STATE/status.json.

Options:
      --media PATH                  A block device, an ISO file or a mounted directory
                                    [default: provision.media= on the kernel command line,
                                    else the device labelled --label]
      --label L                     ISO 9660 volume id (or FAT label) to look for [default: {label}]
      --wait SECS                   How long to wait for the media [default: {wait}]
      --output DIR                  Where the outputs go [default: {output}]
      --state-dir DIR               status.json and the mount point [default: {state}]
      --no-start                    Write the outputs but start nothing (and do not ask systemd)
      --force                       Replace a different recipe already dispatched in this boot
      --console                     Also write the PROVISION-RESULT line to every console
      --bmc                         Also log the outcome in the BMC's SEL (/dev/ipmi0), if any
      --bus-timeout SECS            Longest wait for any answer of the system bus [default: {bus}]
      --allowed-targets FILE        Only these targets (one per line) may be started
                                    [default: {allowed}, if present]
      --accept-unknown-schema-id    Accept a schema whose $id this dispatcher does not know
      --allowed-signers FILE        Trust only media whose recipe.json and recipe.schema.json
                                    carry a .sig by a key of this file (OpenSSH allowed_signers)
                                    [default: {signers}, if present]
  -h, --help                        Print help
",
        label = defaults::LABEL,
        wait = defaults::WAIT.as_secs(),
        output = defaults::OUTPUT,
        state = defaults::STATE_DIR,
        bus = defaults::BUS_TIMEOUT.as_secs(),
        allowed = defaults::ALLOWED_TARGETS,
        signers = defaults::ALLOWED_SIGNERS,
    )
}

fn follow_usage() -> String {
    format!(
        "\
Usage: provision-dispatcher follow [OPTIONS]

Follows the task that `run` dispatched in this boot (STATE/status.json) over the system bus,
and tells how it ended: succeeded, task_failed (naming the units that failed), timed_out (past
the deadline: the task goes on, and its later end is told too) or interrupted (a shutdown or a
stop came first). Each is recorded in STATE/status.json, printed as a PROVISION-RESULT line for
the same recipe and job, and sent to the BMC; then systemd hears READY=1. Nothing dispatched:
exits at once. Runs until stopped (provision-task-end.service).

Options:
      --state-dir DIR          status.json [default: {state}]
      --deadline SECS          How long the task may run, from its dispatch, before the
                               controller hears timed_out [default: {deadline}]
      --bus-timeout SECS       Longest wait for any answer of the system bus [default: {bus}]
      --console                Also write the lines to every console, and repeat the last
                               one on the serial consoles every 30 s for an hour, then every
                               5 minutes, until stopped
      --bmc                    Also log the end in the BMC's SEL (/dev/ipmi0), if any
  -h, --help                   Print help
",
        state = defaults::STATE_DIR,
        deadline = follow::DEADLINE.as_secs(),
        bus = defaults::BUS_TIMEOUT.as_secs(),
    )
}

fn disks_usage() -> String {
    format!(
        "\
Usage: provision-dispatcher disks [--format human|json] [--media PATH] [--label L]

Lists every whole disk of this machine, read from the kernel (sysfs), not from udev: its name,
size, model, serial, WWN, its /dev/disk/by-id and by-path names, and the dispatcher's verdict:
candidate (a recipe may name it), system (the running system lives on it), media (the task
media is on it) or in_use (mounted, swap, or held by LVM, RAID, dm-crypt). As JSON:
{{\"disks\": [...]}}, the inventory a controller keeps of the machine.

Options:
      --format human|json      [default: human]
      --media PATH             Where the task media is: a block device, an ISO file or a
                               mounted directory [default: provision.media= on the kernel
                               command line, else every device labelled --label]
      --label L                ISO 9660 volume id (or FAT label) of the task media
                               [default: {label}]
  -h, --help                   Print help

Exit codes: 0 ok, 64 usage, 70 the disks cannot be listed.
",
        label = defaults::LABEL,
    )
}

fn report_usage() -> String {
    format!(
        "\
Usage: provision-dispatcher report [--status FILE] [--format human|json] [--console [--repeat]]

Prints the last run's status for people: what failed, each field and why, what to do next.
As JSON: the object of the PROVISION-RESULT line, for controllers.

Options:
      --status FILE            [default: {}]
      --format human|json      [default: human]
      --console                Also write the banner, fitted to one 80x24 screen, to every
                               console the kernel writes to (serial and video)
      --repeat                 Then write the PROVISION-RESULT line to the serial consoles
                               every 30 s for an hour, then every 5 minutes, until stopped
  -h, --help           Print help
",
        default_status().display()
    )
}

/// `report`'s default: the status `run` writes by default.
fn default_status() -> PathBuf {
    Path::new(defaults::STATE_DIR).join(FILE_NAME)
}

#[global_allocator]
static ALLOCATOR: provision_dispatcher::memory::Allocator = provision_dispatcher::memory::Allocator;

fn main() -> ExitCode {
    provision_dispatcher::memory::one_arena();
    match parse_and_run(std::env::args_os().skip(1).collect()) {
        Ok(exit) => exit.into(),
        Err(CliError::Usage(message)) => {
            eprintln!("provision-dispatcher: {message}\nTry 'provision-dispatcher --help'.");
            Exit::Usage.into()
        }
        Err(CliError::Io(e)) => {
            eprintln!("provision-dispatcher: cannot write the report: {e}");
            Exit::Internal.into()
        }
    }
}

enum CliError {
    Usage(String),
    Io(std::io::Error),
}

impl From<lexopt::Error> for CliError {
    fn from(e: lexopt::Error) -> Self {
        CliError::Usage(e.to_string())
    }
}

impl From<std::io::Error> for CliError {
    fn from(e: std::io::Error) -> Self {
        CliError::Io(e)
    }
}

fn parse_and_run(args: Vec<OsString>) -> Result<Exit, CliError> {
    let mut parser = lexopt::Parser::from_args(args);
    let command = match parser.next()? {
        Some(Value(command)) => command.string()?,
        Some(Long("help") | Short('h')) | None => return print(USAGE),
        Some(Long("version") | Short('V')) => return print(&version()),
        Some(other) => return Err(other.unexpected().into()),
    };
    match command.as_str() {
        "check" => check_command(parser),
        "render" => render_command(parser),
        "run" => run_command(parser),
        "report" => report_command(parser),
        "follow" => follow_command(parser),
        "disks" => disks_command(parser),
        "media" => media_command(parser),
        "schema" => schema_command(parser),
        other => Err(CliError::Usage(format!("unknown command '{other}'"))),
    }
}

/// The version line, then one line per schema version this binary knows.
fn version() -> String {
    let mut text = format!("provision-dispatcher {}\n", env!("CARGO_PKG_VERSION"));
    for version in &VERSIONS {
        text.push_str(&format!("schema v{} {}\n", version.number, version.id));
    }
    text
}

fn print(text: &str) -> Result<Exit, CliError> {
    std::io::stdout().write_all(text.as_bytes())?;
    Ok(Exit::Ok)
}

fn check_command(mut parser: lexopt::Parser) -> Result<Exit, CliError> {
    let mut format = Format::Human;
    match check_args(&mut parser, &mut format, &[], "check needs a recipe FILE") {
        Ok(Some(args)) => Ok(check::run(&args, &mut std::io::stdout().lock())?),
        Ok(None) => print(CHECK_USAGE),
        Err(e) => usage_error(format, e),
    }
}

/// Once JSON was asked for, a usage problem is one JSON object too (a controller parses
/// stdout, whatever went wrong).
fn usage_error(format: Format, error: CliError) -> Result<Exit, CliError> {
    match error {
        CliError::Usage(reason) if format == Format::Json => {
            let report = provision_dispatcher::report::Report::failed(Failure::Usage, reason);
            print(&(report.to_json() + "\n"))?;
            Ok(Exit::Usage)
        }
        e => Err(e),
    }
}

/// `check`'s arguments, `format` as soon as it is known; `None` for `--help`.
/// (`media check` takes the same, MEDIA for FILE, but for the `not_taken` options; `missing`
/// says what lacks when no FILE is given.)
fn check_args(
    parser: &mut lexopt::Parser,
    format: &mut Format,
    not_taken: &[&str],
    missing: &str,
) -> Result<Option<CheckArgs>, CliError> {
    let mut file = None;
    let mut inventory = None;
    let mut shared = SharedOptions::default();
    while let Some(arg) = parser.next()? {
        match arg {
            Long("help") | Short('h') => return Ok(None),
            Long("format") => *format = format_of(parser)?,
            Long("inventory") => inventory = Some(PathBuf::from(value_of(parser, "--inventory")?)),
            Value(path) if file.is_none() => file = Some(PathBuf::from(path)),
            Long(name) if !not_taken.contains(&name) => {
                let name = name.to_owned();
                shared.parse(&name, parser)?
            }
            arg => return Err(arg.unexpected().into()),
        }
    }
    let file = file.ok_or_else(|| CliError::Usage(missing.into()))?;
    Ok(Some(CheckArgs { format: *format, inventory, ..shared.check_args(file)? }))
}

fn media_command(mut parser: lexopt::Parser) -> Result<Exit, CliError> {
    let mut format = Format::Human;
    match parser.next()? {
        Some(Value(command)) if command == "build" => match media_build_args(&mut parser, &mut format) {
            Ok(Some(args)) => Ok(media::build(&args, &mut std::io::stdout().lock())?),
            Ok(None) => print(MEDIA_BUILD_USAGE),
            Err(e) => usage_error(format, e),
        },
        Some(Value(command)) if command == "check" => {
            // `check`'s options, the media in place of the recipe: the media carries its schema.
            let missing = "media check needs the MEDIA: a task ISO or a directory";
            match check_args(&mut parser, &mut format, &["schema", "schema-version"], missing) {
                Ok(Some(check)) => Ok(media::check(&CheckMediaArgs { check }, &mut std::io::stdout().lock())?),
                Ok(None) => print(MEDIA_CHECK_USAGE),
                Err(e) => usage_error(format, e),
            }
        }
        Some(Value(command)) if command == "embed" => match media_embed_args(&mut parser, &mut format) {
            Ok(Some(Embedding::Embed(args))) => Ok(embed::embed(&args, &mut std::io::stdout().lock())?),
            Ok(Some(Embedding::Remove(args))) => Ok(embed::remove(&args, &mut std::io::stdout().lock())?),
            Ok(None) => print(MEDIA_EMBED_USAGE),
            Err(e) => usage_error(format, e),
        },
        Some(Long("help") | Short('h')) | None => print(MEDIA_USAGE),
        Some(Value(other)) => Err(CliError::Usage(format!("unknown media command '{}'", other.to_string_lossy()))),
        Some(other) => Err(other.unexpected().into()),
    }
}

/// `media build`'s arguments, `format` as soon as it is known; `None` for `--help`.
fn media_build_args(parser: &mut lexopt::Parser, format: &mut Format) -> Result<Option<BuildArgs>, CliError> {
    let (mut recipe, mut output, mut bind, mut allowed_signers) = (None, None, None, None);
    let mut signing = Signing::Unsigned;
    let mut shared = SharedOptions::default();
    while let Some(arg) = parser.next()? {
        match arg {
            Long("help") | Short('h') => return Ok(None),
            Long("format") => *format = format_of(parser)?,
            Long("output") | Short('o') => output = Some(PathBuf::from(value_of(parser, "--output")?)),
            Long(name @ ("sign" | "signatures")) => {
                let name = name.to_owned();
                if !matches!(signing, Signing::Unsigned) {
                    return Err(CliError::Usage("--sign and --signatures are two ways to sign: give one".into()));
                }
                let value = PathBuf::from(value_of(parser, &format!("--{name}"))?);
                signing = if name == "sign" { Signing::Key(value) } else { Signing::Given(value) };
            }
            Long("bind") => bind = Some(uuid_of(parser, "--bind")?),
            Long("allowed-signers") => allowed_signers = Some(PathBuf::from(value_of(parser, "--allowed-signers")?)),
            Long(name @ ("schema" | "schema-version" | "allowed-targets" | "accept-unknown-schema-id")) => {
                let name = name.to_owned();
                shared.parse(&name, parser)?
            }
            Value(path) if recipe.is_none() => recipe = Some(PathBuf::from(path)),
            arg => return Err(arg.unexpected().into()),
        }
    }
    let recipe = recipe.ok_or_else(|| CliError::Usage("media build needs a RECIPE".into()))?;
    let output = output.ok_or_else(|| CliError::Usage("media build needs -o ISO".into()))?;
    if matches!(signing, Signing::Unsigned) && (bind.is_some() || allowed_signers.is_some()) {
        return Err(CliError::Usage("--bind and --allowed-signers need --sign or --signatures".into()));
    }
    let check = CheckArgs { format: *format, ..shared.check_args(recipe)? };
    Ok(Some(BuildArgs { check, output, signing, bind, allowed_signers }))
}

/// What `media embed` was asked: a task embedded, or the area emptied (`--remove`).
enum Embedding {
    Embed(EmbedArgs),
    Remove(RemoveArgs),
}

/// `media embed`'s arguments, `format` as soon as it is known; `None` for `--help`.
fn media_embed_args(parser: &mut lexopt::Parser, format: &mut Format) -> Result<Option<Embedding>, CliError> {
    let (mut maintenance, mut task, mut output, mut inventory) = (None, None, None, None);
    let (mut in_place, mut remove, mut force) = (false, false, false);
    let mut shared = SharedOptions::default();
    // An option of the task's check: `--remove` takes none.
    let mut checking = false;
    while let Some(arg) = parser.next()? {
        match arg {
            Long("help") | Short('h') => return Ok(None),
            Long("format") => *format = format_of(parser)?,
            Long("output") | Short('o') => output = Some(PathBuf::from(value_of(parser, "--output")?)),
            Long("in-place") => in_place = true,
            Long("remove") => remove = true,
            Long("force") => (force, checking) = (true, true),
            Long("inventory") => {
                inventory = Some(PathBuf::from(value_of(parser, "--inventory")?));
                checking = true;
            }
            Long(name @ ("allowed-signers" | "machine-uuid" | "allowed-targets" | "accept-unknown-schema-id")) => {
                let name = name.to_owned();
                shared.parse(&name, parser)?;
                checking = true;
            }
            Value(path) if maintenance.is_none() => maintenance = Some(PathBuf::from(path)),
            Value(path) if task.is_none() && !remove => task = Some(PathBuf::from(path)),
            arg => return Err(arg.unexpected().into()),
        }
    }
    let maintenance = maintenance.ok_or_else(|| CliError::Usage("media embed needs the MAINTENANCE ISO".into()))?;
    let to = match (output, in_place) {
        (Some(out), false) => Destination::Output(out),
        (None, true) => Destination::InPlace,
        (Some(_), true) => return Err(CliError::Usage("-o and --in-place are two places to write: give one".into())),
        (None, false) => return Err(CliError::Usage("media embed needs -o OUT.iso or --in-place".into())),
    };
    if remove {
        if checking {
            return Err(CliError::Usage("--remove takes only -o or --in-place (and --format)".into()));
        }
        return Ok(Some(Embedding::Remove(RemoveArgs { maintenance, to, format: *format })));
    }
    let task = task.ok_or_else(|| CliError::Usage("media embed needs the TASK: a task ISO or a directory".into()))?;
    let check = CheckArgs { format: *format, inventory, ..shared.check_args(task)? };
    Ok(Some(Embedding::Embed(EmbedArgs { check, maintenance, to, force })))
}

fn schema_command(mut parser: lexopt::Parser) -> Result<Exit, CliError> {
    match parser.next()? {
        Some(Value(command)) if command == "list" => {
            let mut format = Format::Human;
            while let Some(arg) = parser.next()? {
                match arg {
                    Long("help") | Short('h') => return print(SCHEMA_USAGE),
                    Long("format") => format = format_of(&mut parser)?,
                    arg => return Err(arg.unexpected().into()),
                }
            }
            Ok(schema::list(format, &mut std::io::stdout().lock())?)
        }
        Some(Value(command)) if command == "print" => {
            let mut name = None;
            while let Some(arg) = parser.next()? {
                match arg {
                    Long("help") | Short('h') => return print(SCHEMA_USAGE),
                    Value(value) if name.is_none() => name = Some(value.string()?),
                    arg => return Err(arg.unexpected().into()),
                }
            }
            let name =
                name.ok_or_else(|| CliError::Usage("schema print needs a NAME (`schema list` shows them)".into()))?;
            schema::print(&name, &mut std::io::stdout().lock())?.ok_or_else(|| {
                let names: Vec<String> = schema::published().into_iter().map(|s| s.name).collect();
                CliError::Usage(format!("no schema is named '{name}' (this binary has: {})", names.join(", ")))
            })
        }
        Some(Long("help") | Short('h')) | None => print(SCHEMA_USAGE),
        Some(Value(other)) => Err(CliError::Usage(format!("unknown schema command '{}'", other.to_string_lossy()))),
        Some(other) => Err(other.unexpected().into()),
    }
}

fn render_command(mut parser: lexopt::Parser) -> Result<Exit, CliError> {
    let mut file = None;
    let mut output = None;
    let mut shared = SharedOptions::default();
    while let Some(arg) = parser.next()? {
        match arg {
            Long("help") | Short('h') => return print(RENDER_USAGE),
            Long("output") | Short('o') => output = Some(PathBuf::from(value_of(&mut parser, "--output")?)),
            Value(path) if file.is_none() => file = Some(PathBuf::from(path)),
            Long(name) => {
                let name = name.to_owned();
                shared.parse(&name, &mut parser)?
            }
            arg => return Err(arg.unexpected().into()),
        }
    }
    let file = file.ok_or_else(|| CliError::Usage("render needs a recipe FILE".into()))?;
    let output = output.ok_or_else(|| CliError::Usage("render needs --output DIR".into()))?;
    let args = RenderArgs { check: shared.check_args(file)?, output: output_dir(output)? };
    Ok(render::run(&args, &mut std::io::stdout().lock(), &mut std::io::stderr().lock())?)
}

fn run_command(mut parser: lexopt::Parser) -> Result<Exit, CliError> {
    let mut args = RunArgs::default();
    let mut shared = SharedOptions::default();
    // A day at most: every wait of the boot path is added to the clock, which a larger one overflows.
    let seconds = |parser: &mut lexopt::Parser, name: &str| seconds_of(parser, name, DAY);
    while let Some(arg) = parser.next()? {
        match arg {
            Long("help") | Short('h') => return print(&run_usage()),
            Long("media") => args.media = Some(value_of(&mut parser, "--media")?.into()),
            Long("label") => args.label = value_of(&mut parser, "--label")?.string()?,
            Long("wait") => args.wait = seconds(&mut parser, "wait")?,
            Long("bus-timeout") => args.bus_timeout = seconds(&mut parser, "bus-timeout")?,
            Long("output") => args.output = output_dir(value_of(&mut parser, "--output")?.into())?,
            Long("state-dir") => args.state_dir = value_of(&mut parser, "--state-dir")?.into(),
            Long("no-start") => args.no_start = true,
            Long("force") => args.force = true,
            Long("console") => args.console = true,
            Long("bmc") => args.bmc = true,
            // Hidden: tests give Secure Boot, lockdown and the machine's UUID in a tree.
            Long("sysfs-root") => args.sysfs = Sysfs::at(Path::new(&value_of(&mut parser, "--sysfs-root")?)),
            // Hidden: tests give the live system's /run/live (the boot medium's task area) in a tree.
            Long("live-root") => args.live = value_of(&mut parser, "--live-root")?.into(),
            // Hidden: tests give the CPUs and the memory of the inventory in a tree.
            Long("proc-root") => args.procfs = value_of(&mut parser, "--proc-root")?.into(),
            Long(name) if !["schema", "schema-version", "machine-uuid"].contains(&name) => {
                let name = name.to_owned();
                shared.parse(&name, &mut parser)?
            }
            arg => return Err(arg.unexpected().into()),
        }
    }
    if shared.allowed_targets.is_none() && Path::new(defaults::ALLOWED_TARGETS).exists() {
        shared.allowed_targets = Some(defaults::ALLOWED_TARGETS.into());
    }
    // Anything at the default path is the trust file: one that cannot be read fails (78),
    // it does not quietly turn the checks off.
    if shared.allowed_signers.is_none()
        && std::fs::symlink_metadata(defaults::ALLOWED_SIGNERS)
            .map_or_else(|e| e.kind() != ErrorKind::NotFound, |_| true)
    {
        shared.allowed_signers = Some(defaults::ALLOWED_SIGNERS.into());
    }
    args.allowed_targets = shared.allowed_targets;
    args.schema_policy = shared.schema_policy;
    args.allowed_signers = shared.allowed_signers;
    provision_dispatcher::log::init();
    Ok(run::run(&args))
}

fn report_command(mut parser: lexopt::Parser) -> Result<Exit, CliError> {
    let mut status = default_status();
    let mut args = report::ReportArgs::default();
    while let Some(arg) = parser.next()? {
        match arg {
            Long("help") | Short('h') => return print(&report_usage()),
            Long("status") => status = value_of(&mut parser, "--status")?.into(),
            Long("format") => args.format = format_of(&mut parser)?,
            Long("console") => args.consoles = true,
            Long("repeat") => args.repeat = true,
            arg => return Err(arg.unexpected().into()),
        }
    }
    if args.repeat && !args.consoles {
        return Err(CliError::Usage("--repeat needs --console".into()));
    }
    Ok(report::run(&status, args, &mut std::io::stdout().lock())?)
}

fn disks_command(mut parser: lexopt::Parser) -> Result<Exit, CliError> {
    let mut args = DisksArgs::default();
    while let Some(arg) = parser.next()? {
        match arg {
            Long("help") | Short('h') => return print(&disks_usage()),
            Long("format") => args.format = format_of(&mut parser)?,
            Long("media") => args.media = Some(value_of(&mut parser, "--media")?.into()),
            Long("label") => args.label = value_of(&mut parser, "--label")?.string()?,
            arg => return Err(arg.unexpected().into()),
        }
    }
    Ok(disks::run(&args, &mut std::io::stdout().lock())?)
}

const DAY: Duration = Duration::from_secs(86_400);

/// The value of `--NAME` as seconds, at most `max`.
fn seconds_of(parser: &mut lexopt::Parser, name: &str, max: Duration) -> Result<Duration, CliError> {
    let text = value_of(parser, &format!("--{name}"))?.string()?;
    let secs: f64 = text.parse().map_err(|_| CliError::Usage(format!("--{name} takes seconds, not '{text}'")))?;
    Duration::try_from_secs_f64(secs)
        .ok()
        .filter(|d| *d <= max)
        .ok_or_else(|| CliError::Usage(format!("--{name} takes seconds (at most {}), not '{text}'", max.as_secs())))
}

fn follow_command(mut parser: lexopt::Parser) -> Result<Exit, CliError> {
    let mut args = FollowArgs::default();
    while let Some(arg) = parser.next()? {
        match arg {
            Long("help") | Short('h') => return print(&follow_usage()),
            Long("state-dir") => args.state_dir = value_of(&mut parser, "--state-dir")?.into(),
            Long("deadline") => args.deadline = seconds_of(&mut parser, "deadline", follow::MAX_DEADLINE)?,
            Long("bus-timeout") => args.bus_timeout = seconds_of(&mut parser, "bus-timeout", DAY)?,
            Long("console") => args.console = true,
            Long("bmc") => args.bmc = true,
            arg => return Err(arg.unexpected().into()),
        }
    }
    if args.deadline.is_zero() {
        return Err(CliError::Usage("--deadline takes a number of seconds above 0".into()));
    }
    provision_dispatcher::log::init();
    Ok(follow::run(&args))
}

fn format_of(parser: &mut lexopt::Parser) -> Result<Format, CliError> {
    match value_of(parser, "--format")?.string()?.as_str() {
        "human" => Ok(Format::Human),
        "json" => Ok(Format::Json),
        other => Err(CliError::Usage(format!("--format takes human or json, not '{other}'"))),
    }
}

/// The value of the option just read. What looks like another option is not taken as its
/// value: `--label --wait 5` lacks the label, it does not look for a disk labelled `--wait`
/// (a value that starts with a dash is written `--label=-x`).
fn value_of(parser: &mut lexopt::Parser, option: &str) -> Result<OsString, CliError> {
    if let Some(value) = parser.optional_value() {
        return Ok(value);
    }
    let looks_like_option =
        parser.raw_args()?.peek().map(|next| next.to_string_lossy().starts_with('-') && next != "-");
    match looks_like_option {
        Some(false) => Ok(parser.value()?),
        _ => Err(CliError::Usage(format!("{option} needs a value"))),
    }
}

/// A server's SMBIOS UUID, in lower case.
fn uuid_of(parser: &mut lexopt::Parser, option: &str) -> Result<String, CliError> {
    let uuid = value_of(parser, option)?.string()?.to_ascii_lowercase();
    if !is_uuid(&uuid) {
        return Err(CliError::Usage(format!("{option} takes a UUID (8-4-4-4-12 hex digits)")));
    }
    Ok(uuid)
}

/// An output directory as `recipe.env` will name it: absolute, UTF-8, and writable there.
fn output_dir(dir: PathBuf) -> Result<PathBuf, CliError> {
    let dir = std::path::absolute(&dir).map_err(|e| CliError::Usage(format!("--output: {e}")))?;
    match dir.to_str() {
        Some(text) if provision_dispatcher::envfile::representable(text) => Ok(dir),
        _ => Err(CliError::Usage("--output must be a UTF-8 path without control characters".into())),
    }
}

/// Options that `check`, `render` and `run` share.
#[derive(Default)]
struct SharedOptions {
    schema: Option<PathBuf>,
    /// `--schema-version N`: a compiled-in version instead of a file.
    schema_version: Option<u32>,
    allowed_targets: Option<PathBuf>,
    schema_policy: SchemaPolicy,
    allowed_signers: Option<PathBuf>,
    machine_uuid: Option<String>,
}

impl SharedOptions {
    fn parse(&mut self, long: &str, parser: &mut lexopt::Parser) -> Result<(), CliError> {
        match long {
            "schema" => self.schema = Some(value_of(parser, "--schema")?.into()),
            "schema-version" => {
                let text = value_of(parser, "--schema-version")?.string()?;
                let known = VERSIONS.iter().map(|v| v.number.to_string()).collect::<Vec<_>>().join(" or ");
                let number = text.parse().ok().filter(|n| VERSIONS.iter().any(|v| v.number == *n));
                let number = number.ok_or_else(|| {
                    CliError::Usage(format!(
                        "--schema-version takes {known} (the versions this binary knows), not '{text}'"
                    ))
                })?;
                self.schema_version = Some(number);
            }
            "allowed-targets" => self.allowed_targets = Some(value_of(parser, "--allowed-targets")?.into()),
            "accept-unknown-schema-id" => self.schema_policy.accept_unknown_id = true,
            "allowed-signers" => self.allowed_signers = Some(value_of(parser, "--allowed-signers")?.into()),
            "machine-uuid" => self.machine_uuid = Some(uuid_of(parser, "--machine-uuid")?),
            _ => return Err(Long(long).unexpected().into()),
        }
        Ok(())
    }

    fn policy(&self) -> Result<Policy, CliError> {
        let allowed_targets = match &self.allowed_targets {
            None => None,
            Some(file) => Some(
                AllowedTargets::load(file)
                    .map_err(|e| CliError::Usage(format!("cannot read --allowed-targets {}: {e}", file.display())))?,
            ),
        };
        Ok(Policy { allowed_targets })
    }

    fn check_args(self, file: PathBuf) -> Result<CheckArgs, CliError> {
        if self.schema.is_some() && self.schema_version.is_some() {
            return Err(CliError::Usage("--schema and --schema-version name two schemas: give one".into()));
        }
        let policy = self.policy()?;
        Ok(CheckArgs {
            inventory: None,
            file,
            schema: self.schema,
            schema_version: self.schema_version.unwrap_or(VERSIONS[0].number),
            format: Format::Human,
            policy,
            schema_policy: self.schema_policy,
            allowed_signers: self.allowed_signers,
            machine_uuid: self.machine_uuid,
        })
    }
}
