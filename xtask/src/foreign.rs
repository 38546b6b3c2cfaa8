//! `cargo xtask foreign-image`: the package in an image we did not build (issue 33). A Debian 12
//! image made with Debian's own live-build from the steps of docs/image-builder.md, nothing
//! more: `lb config` with that page's options ([`LB_CONFIG`], the mirrors the machine's apt
//! uses), the package of `cargo xtask deb` in `config/packages.chroot/`, and the files of
//! `tests/foreign-image/config/` over lb config's tree (the hook that enables the unit, the
//! stand-in target with its service, boot menus that boot without a person). It then boots the
//! ISO under QEMU twice, as a server whose BMC attached a task ISO, one guest at a time: the
//! seed ESXi example (UEFI) must dispatch `install-esxi.target`, whose service says on the
//! console what it was given, and then tell the task's end (`succeeded`, SPEC §6d) for the
//! same recipe and job; the seed maintenance example (legacy BIOS) names a target the
//! image lacks and must fail with 69. Each result is read from the serial console as a
//! controller reads it ([`crate::vm::result::last_line`]).
//!
//! live-build's slow part, its bootstrap and the packages it downloads (its `cache/`), is kept
//! with its working directory outside the clone, in the cache directory, keyed by a hash of
//! what the bootstrap is made from (live-build's version, the suite, the architecture, the
//! archive areas, the mirror). The chroot and binary stages run every time: they install our
//! package, which changes with the code.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::Value;

use crate::arch::Arch;
use crate::needs::{self, Need};
use crate::system;
use crate::vm::cases::{BootMedia, Firmware};
use crate::vm::qemu::{Boot, Machine, Qemu, Uefi};
use crate::vm::result;

/// `lb config`'s options as docs/image-builder.md gives them to image builders (live-build),
/// the mirrors aside ([`mirror_args`]). A test holds the page to them.
pub const LB_CONFIG: &[(&str, &str)] = &[
    ("--distribution", "bookworm"),
    ("--architecture", "amd64"),
    ("--archive-areas", "main"),
    ("--binary-image", "iso-hybrid"),
    ("--apt-recommends", "false"),
    ("--bootappend-live", "boot=live components console=tty0 console=ttyS0,115200n8 live-config.noautologin"),
    ("--firmware-chroot", "false"),
    ("--firmware-binary", "false"),
    ("--chroot-squashfs-compression-type", "zstd"),
    ("--apt-indices", "false"),
    ("--apt-source-archives", "false"),
    ("--zsync", "false"),
];

/// The options of [`LB_CONFIG`] that decide the bootstrap stage, and so the cache's key (the
/// mirror is keyed apart).
const BOOTSTRAP_OPTIONS: &[&str] = &["--distribution", "--architecture", "--archive-areas"];

/// The ISO `lb build` writes for [`LB_CONFIG`].
const LB_ISO: &str = "live-image-amd64.hybrid.iso";

/// A guest that shows no result line by then has failed (a boot under TCG on a busy machine
/// takes one to three minutes).
const DEADLINE: Duration = Duration::from_secs(600);

/// The stand-in's line on the console (tests/foreign-image/config/includes.chroot/usr/local/sbin).
const STANDIN: &str = "install-esxi-standin: ";

/// One boot of the image: the recipe on its task ISO, the firmware, and what must come of it.
struct Case {
    recipe: &'static str,
    firmware: Firmware,
    expect: Outcome,
}

enum Outcome {
    Dispatched { target: &'static str },
    Failed { exit: u64, failure: &'static str },
}

const CASES: &[Case] = &[
    Case {
        recipe: "iso/examples/seed-esxi.json",
        firmware: Firmware::Uefi,
        expect: Outcome::Dispatched { target: "install-esxi.target" },
    },
    Case {
        recipe: "iso/examples/seed-maintenance.json",
        firmware: Firmware::Bios,
        expect: Outcome::Failed { exit: 69, failure: "unit_not_loadable" },
    },
];

pub fn run(args: &[String]) -> Result<()> {
    if let Some(arg) = args.first() {
        bail!("foreign-image: unexpected argument '{arg}'\nusage: cargo xtask foreign-image");
    }
    if Arch::host() != Arch::Amd64 {
        bail!("foreign-image builds an amd64 live-build image, on an amd64 machine");
    }
    let started = Instant::now();
    needs::ensure(Need::LiveBuild, "the live-build image")?;
    needs::ensure(Need::Boot(Arch::Amd64), "booting the live-build image")?;
    let out = crate::root().join("target/foreign-image");
    std::fs::create_dir_all(&out)?;
    let deb = crate::deb::build(Arch::Amd64)?;
    let built = Instant::now();
    let iso = build(&deb, &out)?;
    let lb_took = built.elapsed();
    let mut qemu = Qemu::find_or_install(Arch::Amd64)?;
    qemu.choose_accel(&out.join("vmlinuz"), &out)?;
    let mut problems = vec![];
    for case in CASES {
        problems.extend(boot(&qemu, case, &iso, &out)?);
    }
    println!(
        "foreign-image: live-build {:.0?}, {:.0?} in all (including the package and both boots)",
        lb_took,
        started.elapsed()
    );
    if !problems.is_empty() {
        bail!("the live-build image did not do what docs/image-builder.md says:\n  {}", problems.join("\n  "));
    }
    println!("foreign-image: both boots as expected");
    Ok(())
}

/// The live-build image with `deb` in it, built in its cached working directory; returns the
/// ISO's path in `out`.
fn build(deb: &Path, out: &Path) -> Result<PathBuf> {
    let mirrors = machine_mirrors()?;
    let version = system::output(Command::new("dpkg-query").args(["-W", "-f=${Version}", "live-build"]))?;
    let cache = crate::cache_dir();
    let key = format!("{:016x}", system::fnv1a(bootstrap_definition(&version, &mirrors).as_bytes()));
    let work = cache.join(format!("foreign-image-amd64-{key}"));
    let warm = work.join("cache/bootstrap").is_dir();
    eprintln!(
        "foreign-image: live-build {version} in {} ({})",
        work.display(),
        if warm { "its bootstrap cached" } else { "nothing cached: bootstrap from the mirror" }
    );
    std::fs::create_dir_all(&work)?;
    // What an earlier run left (its chroot, its stages, mounts of a killed build), all but
    // live-build's cache; then a fresh configuration, as the page's steps make it.
    if work.join("config").exists() {
        lb(&work, &["clean"], None)?;
    }
    let _ = std::fs::remove_dir_all(work.join("config"));
    let _ = std::fs::remove_file(work.join(LB_ISO));
    let mut config: Vec<String> = vec!["config".into()];
    for (option, value) in LB_CONFIG {
        config.extend([option.to_string(), value.to_string()]);
    }
    config.extend(mirror_args(&mirrors));
    let config: Vec<&str> = config.iter().map(String::as_str).collect();
    lb(&work, &config, None)?;
    let files = crate::root().join("tests/foreign-image/config");
    system::run(Command::new("cp").arg("-a").arg(format!("{}/.", files.display())).arg(work.join("config")))?;
    let packages = work.join("config/packages.chroot");
    std::fs::create_dir_all(&packages)?;
    std::fs::copy(deb, packages.join(deb.file_name().context("the package's name")?))?;
    let log = out.join("lb-build.log");
    let started = Instant::now();
    lb(&work, &["build"], Some(&log)).with_context(|| format!("lb build failed: see {}", log.display()))?;
    eprintln!("foreign-image: lb build took {:.0?} (log: {})", started.elapsed(), log.display());
    let iso = out.join(LB_ISO);
    std::fs::rename(work.join(LB_ISO), &iso)?;
    // The kernel, for the accelerator's probe.
    let kernel = only_kernel(&work.join("binary/live"))?;
    std::fs::copy(kernel, out.join("vmlinuz"))?;
    // The chroot and the binary tree are a gigabyte: only the cache stays.
    lb(&work, &["clean"], None)?;
    remove_stale(&cache, &work)?;
    Ok(iso)
}

/// Runs `lb ARGS` in `dir`, its output to `log` (appended) or inherited.
fn lb(dir: &Path, args: &[&str], log: Option<&Path>) -> Result<()> {
    let mut cmd = Command::new("lb");
    cmd.args(args).current_dir(dir).stdin(Stdio::null());
    if let Some(log) = log {
        let file = std::fs::File::create(log)?;
        cmd.stdout(file.try_clone()?).stderr(file);
    } else {
        cmd.stdout(Stdio::null());
    }
    system::run(&mut cmd)
}

fn only_kernel(dir: &Path) -> Result<PathBuf> {
    for entry in std::fs::read_dir(dir).with_context(|| format!("read {}", dir.display()))? {
        let path = entry?.path();
        if path.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("vmlinuz")) {
            return Ok(path);
        }
    }
    bail!("no kernel in {}", dir.display())
}

/// Working directories of other keys (an older live-build, another mirror) are dropped.
fn remove_stale(cache: &Path, keep: &Path) -> Result<()> {
    for entry in std::fs::read_dir(cache)? {
        let path = entry?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if name.starts_with("foreign-image-amd64-") && path != keep {
            std::fs::remove_dir_all(&path).with_context(|| format!("remove stale {}", path.display()))?;
        }
    }
    Ok(())
}

/// What the cached bootstrap is made from.
fn bootstrap_definition(version: &str, mirrors: &Mirrors) -> String {
    let mut text = format!("live-build={version}\nmirror={}\n", mirrors.main);
    for (option, value) in LB_CONFIG.iter().filter(|(o, _)| BOOTSTRAP_OPTIONS.contains(o)) {
        text.push_str(&format!("{option}={value}\n"));
    }
    text
}

/// The Debian mirror and the security mirror the machine's apt uses.
#[derive(Debug, PartialEq, Eq)]
struct Mirrors {
    main: String,
    security: String,
}

fn mirror_args(mirrors: &Mirrors) -> Vec<String> {
    let (main, security) = (&mirrors.main, &mirrors.security);
    [
        ("--mirror-bootstrap", main),
        ("--mirror-chroot", main),
        ("--mirror-binary", main),
        ("--mirror-chroot-security", security),
        ("--mirror-binary-security", security),
    ]
    .iter()
    .flat_map(|(option, value)| [option.to_string(), value.to_string()])
    .collect()
}

/// The mirrors of `/etc/apt/sources.list` and `/etc/apt/sources.list.d/` (one-line and deb822
/// forms) for bookworm and bookworm-security; Debian's own where the machine names none.
fn machine_mirrors() -> Result<Mirrors> {
    let mut texts = vec![];
    let list = Path::new("/etc/apt/sources.list");
    if list.is_file() {
        texts.push(std::fs::read_to_string(list)?);
    }
    if let Ok(entries) = std::fs::read_dir("/etc/apt/sources.list.d") {
        let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
        paths.sort();
        for path in paths {
            if path.extension().is_some_and(|e| e == "list" || e == "sources") {
                texts.push(std::fs::read_to_string(&path)?);
            }
        }
    }
    let sources: Vec<(String, Vec<String>)> = texts.iter().flat_map(|t| sources(t)).collect();
    let find = |suite: &str, default: &str| {
        sources
            .iter()
            .find(|(_, suites)| suites.iter().any(|s| s == suite))
            .map_or(default.to_owned(), |(uri, _)| uri.trim_end_matches('/').to_owned())
    };
    Ok(Mirrors {
        main: find("bookworm", "http://deb.debian.org/debian"),
        security: find("bookworm-security", "http://deb.debian.org/debian-security"),
    })
}

/// The `deb` sources of an apt sources file: each URI with its suites.
fn sources(text: &str) -> Vec<(String, Vec<String>)> {
    let mut found = vec![];
    // deb822: stanzas of `Field: value` lines, apart by blank lines.
    for stanza in text.split("\n\n") {
        let field = |name: &str| -> Option<Vec<String>> {
            let value = stanza.lines().find_map(|l| l.strip_prefix(name))?;
            Some(value.split_whitespace().map(str::to_owned).collect())
        };
        let (Some(types), Some(uris), Some(suites)) = (field("Types:"), field("URIs:"), field("Suites:")) else {
            continue;
        };
        if types.iter().any(|t| t == "deb") && !stanza.lines().any(|l| l.trim() == "Enabled: no") {
            found.extend(uris.into_iter().map(|uri| (uri, suites.clone())));
        }
    }
    // One-line form: `deb [options] URI SUITE COMPONENT...`.
    for line in text.lines().map(str::trim) {
        let Some(rest) = line.strip_prefix("deb ") else { continue };
        let rest = match rest.trim_start().strip_prefix('[') {
            Some(options) => options.split_once(']').map_or("", |(_, after)| after),
            None => rest,
        };
        let mut words = rest.split_whitespace();
        if let (Some(uri), Some(suite)) = (words.next(), words.next()) {
            found.push((uri.to_owned(), vec![suite.to_owned()]));
        }
    }
    found
}

/// Boots the ISO with the case's task ISO and judges the result line: the problems found.
fn boot(qemu: &Qemu, case: &Case, iso: &Path, out: &Path) -> Result<Vec<String>> {
    let name = Path::new(case.recipe).file_stem().and_then(|n| n.to_str()).unwrap_or("case");
    let dir = out.join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let recipe = crate::root().join(case.recipe);
    let task = dir.join("task.iso");
    // The task ISO as a controller makes it: `provision-dispatcher media build`.
    crate::iso::build(&recipe, crate::iso::Schema::Version(1), None, &task)?.written()?;
    let uefi = match case.firmware {
        Firmware::Uefi => {
            let (code, vars) = crate::vm::uefi_firmware(Arch::Amd64, false);
            let copy = dir.join("efi-vars.fd");
            std::fs::copy(vars, &copy).with_context(|| format!("copy {vars}"))?;
            Some(Uefi { code: code.into(), vars: copy })
        }
        Firmware::Bios => None,
    };
    let machine = Machine {
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()).min(2),
        uuid: None,
        firmware: case.firmware,
        uefi,
        secure_boot: false,
        boot: Boot::Image { iso: iso.to_owned(), media: BootMedia::Cd },
        disks: vec![],
        task: Some(task),
        task_late: false,
        task_read_bytes_per_sec: None,
        boot_read_bytes_per_sec: None,
        fault: None,
        bmc: vec![],
        extra: vec![],
        console: dir.join("console.log"),
        reads: dir.join("reads.log"),
        stderr: dir.join("qemu.stderr"),
        // The guest has no reporter: this port stays silent.
        report: dir.join("report.port"),
        control: None,
        qmp: std::env::temp_dir().join(format!("provision-foreign-{}.qmp", std::process::id())),
    };
    println!("=== {} ({:?}): booting the live-build image with it on the task ISO", case.recipe, case.firmware);
    let started = Instant::now();
    let mut guest = qemu.launch(&machine)?;
    let console = loop {
        let console = crate::vm::console_text(&machine.console);
        if finished(&case.expect, &console) {
            break console;
        }
        if guest.exited()? || started.elapsed() > DEADLINE {
            break console;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    drop(guest);
    let _ = std::fs::remove_file(&machine.qmp);
    let took = started.elapsed();
    let problems = judge(&case.expect, &console, &recipe);
    let line = console.lines().rev().find(|l| l.contains("PROVISION-RESULT v1 ")).unwrap_or("(none)");
    println!("--- the result line on the serial console, {took:.0?} after power-on:\n  {}", line.trim());
    if let Some(standin) = console.lines().find(|l| l.contains(STANDIN)) {
        println!("--- the target's service said:\n  {}", standin.trim());
    }
    match problems.as_slice() {
        [] => println!("--- as expected (console: {})", machine.console.display()),
        _ => println!("--- NOT as expected: {} (console: {})", problems.join("; "), machine.console.display()),
    }
    Ok(problems.into_iter().map(|p| format!("{}: {p}", case.recipe)).collect())
}

/// Whether the console shows all the case waits for: the result line, and the target's service
/// with the task's end (dispatched) or the failure banner (failed).
fn finished(expect: &Outcome, console: &str) -> bool {
    let Some(line) = result::last_line(console) else { return false };
    match (expect, line["state"].as_str()) {
        // The task's end is still to come.
        (Outcome::Dispatched { .. }, Some("dispatched")) => false,
        (Outcome::Dispatched { .. }, Some("succeeded")) => console.contains(STANDIN),
        (Outcome::Failed { .. }, Some("failed")) => crate::vm::cases::console_banner(console).is_some(),
        // Not the outcome expected: nothing more to wait for.
        _ => true,
    }
}

/// What is wrong with what the console shows: empty when the boot did what docs/image-builder.md says.
fn judge(expect: &Outcome, console: &str, recipe: &Path) -> Vec<String> {
    let Some(line) = result::last_line(console) else {
        return vec!["the serial console has no PROVISION-RESULT line".into()];
    };
    let mut problems = vec![];
    let mut want: Vec<(&str, Value)> = vec![];
    match system::sha256_hex(recipe) {
        Ok(digest) => want.push(("recipe_sha256", digest.into())),
        Err(e) => problems.push(format!("{e:#}")),
    }
    match expect {
        Outcome::Dispatched { target } => {
            want.extend([("state", "succeeded".into()), ("exit_code", 0.into()), ("target", (*target).into())]);
            let first = result::lines(console).into_iter().map(|(_, l)| l).find(|l| l["state"] == "dispatched");
            match first {
                Some(first) if first["job"] == line["job"] && first["recipe_sha256"] == line["recipe_sha256"] => {}
                Some(first) => {
                    problems.push(format!("the end's job {} is not the dispatch's {}", line["job"], first["job"]))
                }
                None => problems.push("the serial console has no dispatched line".into()),
            }
            match standin_said(recipe) {
                Ok(said) if console.lines().any(|l| l.contains(&said)) => {}
                Ok(said) => problems.push(format!("the target's service did not say \"{said}\" on the console")),
                Err(e) => problems.push(format!("{e:#}")),
            }
        }
        Outcome::Failed { exit, failure } => {
            want.extend([("state", "failed".into()), ("exit_code", (*exit).into()), ("failure", (*failure).into())]);
            if crate::vm::cases::console_banner(console).is_none() {
                problems.push("provision-failed.service's banner is not on the serial console".into());
            }
        }
    }
    for (key, value) in want {
        if line[key] != value {
            problems.push(format!("the result line's {key} is {}, expected {value}", line[key]));
        }
    }
    problems
}

/// The line the stand-in service prints when it was given the recipe's values: its target,
/// the recipe's copy and the kickstart file's digest.
fn standin_said(recipe: &Path) -> Result<String> {
    let value: Value = serde_json::from_slice(&std::fs::read(recipe)?)?;
    let ks = value["ks_cfg"].as_str().context("the recipe has no ks_cfg")?;
    let target = value["task_target"].as_str().context("the recipe has no task_target")?;
    let copy = crate::root().join("target/foreign-image/ks.cfg");
    std::fs::write(&copy, ks)?;
    let digest = system::sha256_hex(&copy)?;
    Ok(format!("{STANDIN}TASK_TARGET={target} RECIPE_FILE=/run/provision/recipe.json ks.cfg sha256={digest}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mirrors_are_read_in_both_forms() {
        let deb822 = "Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\n\
                      Components: main\n\nTypes: deb\nURIs: http://mirror.example/debian-security\n\
                      Suites: bookworm-security\nComponents: main\n\nTypes: deb-src\nURIs: http://src.example\n\
                      Suites: bookworm\n";
        assert_eq!(
            sources(deb822),
            [
                ("http://mirror.example/debian".into(), vec!["bookworm".into(), "bookworm-updates".into()]),
                ("http://mirror.example/debian-security".into(), vec!["bookworm-security".into()]),
            ]
        );
        let one_line = "# comment\ndeb [signed-by=/k.gpg] http://m.example/debian/ bookworm main\n\
                        deb-src http://m.example/debian bookworm main\n";
        assert_eq!(sources(one_line), [("http://m.example/debian/".into(), vec!["bookworm".into()])]);
    }

    #[test]
    fn the_image_builders_page_gives_these_options() {
        let page = std::fs::read_to_string(crate::root().join("docs/image-builder.md")).unwrap();
        // The page's `lb config` command, its line continuations joined.
        let command = page.split("\nlb config").nth(1).expect("the page has an lb config command");
        let command = command.split("\n\n").next().unwrap().replace("\\\n", " ");
        for (option, value) in LB_CONFIG {
            let quoted = if value.contains(' ') { format!("\"{value}\"") } else { value.to_string() };
            assert!(
                command.split_whitespace().collect::<Vec<_>>().join(" ").contains(&format!("{option} {quoted}")),
                "docs/image-builder.md's lb config lacks {option} {quoted}"
            );
        }
        for option in ["--mirror-bootstrap", "--mirror-chroot", "--mirror-binary", "--mirror-chroot-security"] {
            assert!(command.contains(option), "docs/image-builder.md's lb config lacks {option}");
        }
    }
}
