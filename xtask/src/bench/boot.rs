//! `cargo xtask bench --boot [--arch A]... [--against REV] [--link BYTES_PER_SEC]`: the boot
//! over a BMC's virtual media (SPEC §9, issue 30), side by side in one run. Users boot the
//! maintenance OS through the server's BMC, a link of 50 KB/s to a few MB/s, and every byte
//! the boot reads from the medium before the dispatcher's result is time on it.
//!
//! One dispatching case (`tests/vm-cases/seed-linux`) per image, its boot medium throttled
//! to the link (1 MB/s unless told): the image of REV ("before", built by REV's own xtask),
//! this tree's image, and this tree's image booted with `toram` (the menu's second entry),
//! each with the task on a CD of its own; then this tree's image with the task embedded in it
//! (`media embed`: one drive), booted both ways, for each architecture (amd64; arm64 when its base is cached, since building one takes tens
//! of minutes). Each boot ends at the result line. For each: the bytes read from the boot
//! medium by then (QMP `query-blockstats`), the time from power-on, the shipped ISO's size
//! and its parts, ratios to before, and where the bytes went (`vm::reads`). Exits 1 naming
//! each budget it finds over.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

use crate::arch::Arch;
use crate::system;
use crate::vm::cases::TaskArrival;
use crate::vm::{self, cases, reads, Testbed};

const MIB: f64 = 1024.0 * 1024.0;

/// Read from the boot medium before the result line, amd64 (issue 30).
const MAX_READ_AMD64: u64 = 24 << 20;
/// arm64 may read at most this many times what amd64 reads.
const MAX_READ_ARM64_FACTOR: f64 = 1.2;

/// The shipped ISO.
fn max_iso(arch: Arch) -> u64 {
    match arch {
        Arch::Amd64 => 80 << 20,
        Arch::Arm64 => 96 << 20,
    }
}

/// The image before issue 30: what "before" is unless `--against` says otherwise.
const BEFORE: &str = "6276c90";

/// 1 MB/s: a good BMC link; field reports go down to 52 KB/s.
const DEFAULT_LINK: u64 = 1_000_000;

const CASE: &str = "tests/vm-cases/seed-linux";

const USAGE: &str = "usage: cargo xtask bench --boot [--arch amd64|arm64]... [--against REV] [--link BYTES_PER_SEC]";

pub fn run(args: &[String]) -> Result<()> {
    let mut archs = vec![];
    let mut against = BEFORE.to_owned();
    let mut link = DEFAULT_LINK;
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--boot" => {}
            "--arch" => archs.push(Arch::from_debian(args.next().context(USAGE)?)?),
            "--against" => against = args.next().context(USAGE)?.clone(),
            "--link" => link = args.next().and_then(|n| n.parse().ok()).filter(|&n| n > 0).context(USAGE)?,
            other => bail!("bench --boot: unexpected argument '{other}'\n{USAGE}"),
        }
    }
    if archs.is_empty() {
        archs.push(Arch::Amd64);
        if crate::base::is_cached(Arch::Arm64)? {
            archs.push(Arch::Arm64);
        } else {
            println!("bench --boot: arm64 left out: its image's base is not cached (cargo xtask image --arch arm64)");
        }
    }
    let rev = system::output(Command::new("git").current_dir(crate::root()).args([
        "rev-parse",
        "--short",
        &format!("{against}^{{commit}}"),
    ]))?
    .trim()
    .to_owned();
    let mut rows = vec![];
    for &arch in &archs {
        rows.extend(measure(arch, &rev, link)?);
    }
    println!("{}", table(&rows, &rev, link));
    let over = budgets(&rows);
    for line in &over {
        println!("over budget: {line}");
    }
    if !over.is_empty() {
        bail!("{} boot budget(s) over", over.len());
    }
    Ok(())
}

/// One image's boot to the result.
struct Row {
    arch: Arch,
    /// "before (REV)", "after", "after, toram".
    name: String,
    /// The shipped ISO of this image (the boots use it with the test layer over it).
    shipped: PathBuf,
    read: u64,
    seconds: f64,
    /// Where the bytes went: part, bytes read, its size.
    parts: Vec<(String, u64, u64)>,
}

fn measure(arch: Arch, rev: &str, link: u64) -> Result<Vec<Row>> {
    let testbed = Testbed::prepare(arch, &[], &[])?;
    let shipped = crate::image::build(arch, &[], &crate::root().join("target/image").join(arch.debian()))?.iso;
    let before = reference(rev, arch)?;
    // The case with its task on a CD of its own, and embedded in the image (`media embed`).
    let case = |task| -> Result<cases::Case> {
        let mut case = cases::load(&crate::root().join(CASE))?;
        case.vm.boot_read_bytes_per_sec = Some(link);
        // Before reads over 60 MB; with toram, the whole image.
        case.vm.deadline = std::time::Duration::from_secs(1200);
        case.vm.task = task;
        Ok(case)
    };
    let (on_cd, embedded) = (case(TaskArrival::Cd)?, case(TaskArrival::Embedded)?);
    let dir = testbed.case_dir(&on_cd);
    std::fs::create_dir_all(&dir)?;
    let toram =
        vm::media::with_menu_entry(&testbed.image().iso, vm::media::TORAM_ENTRY, &dir.with_extension("toram.iso"))?;
    let mut rows = vec![];
    for (name, tested, shipped, case) in [
        (format!("before ({rev})"), before.tested, before.shipped, &on_cd),
        ("after".to_owned(), testbed.image().iso.clone(), shipped.clone(), &on_cd),
        ("after, toram".to_owned(), toram.clone(), shipped.clone(), &on_cd),
        ("after, embedded".to_owned(), testbed.image().iso.clone(), shipped.clone(), &embedded),
        ("after, embedded, toram".to_owned(), toram, shipped, &embedded),
    ] {
        eprintln!("bench --boot: {} {name}: booting {} at {link} bytes/s", arch.debian(), tested.display());
        let boot = testbed.boot_to_result(case, &tested)?;
        let seen = boot
            .result
            .with_context(|| format!("{} {name}: no result line (see {})", arch.debian(), boot.console.display()))?;
        let line = boot.result_line().unwrap_or_default();
        let media = if case.vm.task == TaskArrival::Embedded { "embedded" } else { "/dev/" };
        if line["state"] != "dispatched" || !line["media"].as_str().is_some_and(|m| m.starts_with(media)) {
            bail!(
                "{} {name}: the result line says {line}, not dispatched from {media} (see {})",
                arch.debian(),
                boot.console.display()
            );
        }
        let read = seen.boot_read_bytes.context("QEMU did not say what was read from the boot medium")?;
        let log = std::fs::read_to_string(&boot.reads).with_context(|| format!("read {}", boot.reads.display()))?;
        let parts = reads::by_part(&reads::of_file(&log, &tested), &reads::extents(&tested)?, seen.at);
        eprintln!("bench --boot: {} {name}: {read} bytes read, the result after {:.1?}", arch.debian(), seen.after);
        rows.push(Row { arch, name, shipped, read, seconds: seen.after.as_secs_f64(), parts });
    }
    let _ = std::fs::remove_file(dir.with_extension("toram.iso"));
    Ok(rows)
}

/// The two ISOs of REV: shipped, and tested (with REV's own `tests/vm-guest` as its layer).
struct Reference {
    shipped: PathBuf,
    tested: PathBuf,
}

/// REV's images, built once by REV's own xtask from `git archive REV` under
/// `target/bench-boot/REV/`, with a cache of its own: an xtask removes the cached bases of
/// other definitions when it builds one, and this tree's and REV's would take turns. The
/// cached bases are linked into it (hard links), QEMU and Debian's signed packages too.
fn reference(rev: &str, arch: Arch) -> Result<Reference> {
    let dir = crate::root().join("target/bench-boot").join(rev);
    let reference = Reference {
        shipped: dir.join(format!("shipped-{}.iso", arch.debian())),
        tested: dir.join(format!("tested-{}.iso", arch.debian())),
    };
    if reference.shipped.is_file() && reference.tested.is_file() {
        return Ok(reference);
    }
    let tree = dir.join("tree");
    if !tree.join("Cargo.toml").is_file() {
        let _ = std::fs::remove_dir_all(&tree);
        std::fs::create_dir_all(&tree)?;
        let archive = format!(
            "git -C '{}' archive --format=tar '{rev}' | tar -x -C '{}'",
            crate::root().display(),
            tree.display()
        );
        system::run(Command::new("sh").args(["-c", &archive]))?;
    }
    let cache = dir.join("cache");
    link_cache(&cache.join("provision-dispatcher"))?;
    for (layer, iso) in [(None, &reference.shipped), (Some("tests/vm-guest"), &reference.tested)] {
        eprintln!("bench --boot: building the {} image of {rev} with its own xtask", arch.debian());
        let mut cmd = Command::new(env!("CARGO"));
        cmd.current_dir(&tree).env("XDG_CACHE_HOME", &cache).args(["xtask", "image", "--arch", arch.debian()]);
        cmd.args(layer.map(|l| vec!["--layer", l]).unwrap_or_default());
        let out = cmd.stderr(Stdio::inherit()).output().with_context(|| system::describe(&cmd))?;
        if !out.status.success() {
            bail!("{} failed", system::describe(&cmd));
        }
        let stdout = String::from_utf8_lossy(&out.stdout);
        let built = stdout.lines().last().context("REV's image printed no path")?;
        std::fs::copy(built, iso).with_context(|| format!("copy {built}"))?;
    }
    Ok(reference)
}

/// A cache for REV's xtask: hard links to this cache's complete bases (REV's own, if its
/// definition is cached), symbolic links to the rest (QEMU, Debian's signed packages, apt).
fn link_cache(private: &Path) -> Result<()> {
    std::fs::create_dir_all(private)?;
    for entry in std::fs::read_dir(crate::cache_dir())? {
        let from = entry?.path();
        let name = from.file_name().unwrap_or_default().to_string_lossy().into_owned();
        let to = private.join(&name);
        if std::fs::symlink_metadata(&to).is_ok() || name.ends_with(".partial") || !from.is_dir() {
            continue;
        }
        if name.starts_with("image-base-") {
            system::run(Command::new("cp").arg("-al").arg(&from).arg(&to))?;
        } else {
            std::os::unix::fs::symlink(&from, &to)?;
        }
    }
    Ok(())
}

fn table(rows: &[Row], rev: &str, link: u64) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "The boot over virtual media: `{CASE}` booted by UEFI (Secure Boot) from the image as a USB CD, \
         its boot medium throttled to {link} bytes/s; \"before\" is {rev}'s image; \"embedded\": the task \
         written into the image's task area (`media embed`), no task CD. Sizes are the shipped ISO's; the \
         boots add the test layer (and the task).\n"
    );
    let _ = writeln!(
        out,
        "| image | read before the result | ISO | vmlinuz | initrd | squashfs | time to the result at {:.1} MB/s |",
        link as f64 / 1e6
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|");
    for row in rows {
        let before = rows.iter().find(|r| r.arch == row.arch).expect("the row itself at least");
        let sizes = reads::extents(&row.shipped).unwrap_or_default();
        let size = |pred: &dyn Fn(&str) -> bool| sizes.iter().filter(|e| pred(&e.path)).map(|e| e.bytes).sum::<u64>();
        let iso = std::fs::metadata(&row.shipped).map(|m| m.len()).unwrap_or(0);
        let ratio = |now: f64, then: f64| match std::ptr::eq(row, before) {
            true => String::new(),
            false => format!(" ({:.2}x)", now / then),
        };
        let _ = writeln!(
            out,
            "| {} {} | {:.1} MiB{} | {:.1} MiB | {:.1} MiB | {:.1} MiB | {:.1} MiB | {:.0} s{} |",
            row.arch.debian(),
            row.name,
            row.read as f64 / MIB,
            ratio(row.read as f64, before.read as f64),
            iso as f64 / MIB,
            size(&|p| p == "/live/vmlinuz") as f64 / MIB,
            size(&|p| p == "/live/initrd.img") as f64 / MIB,
            size(&|p| p.starts_with("/live/") && p.ends_with(".squashfs")) as f64 / MIB,
            row.seconds,
            ratio(row.seconds, before.seconds),
        );
    }
    for row in rows {
        let _ = writeln!(
            out,
            "\nWhere the bytes went, {} {} (read before the result / size):\n",
            row.arch.debian(),
            row.name
        );
        let _ = writeln!(out, "| part of the ISO | read | size |");
        let _ = writeln!(out, "|---|---:|---:|");
        for (part, read, size) in &row.parts {
            let _ = writeln!(out, "| `{part}` | {:.2} MiB | {:.2} MiB |", *read as f64 / MIB, *size as f64 / MIB);
        }
    }
    out
}

/// Each budget over, in words: this tree's image ("after", its task on a CD or embedded), not
/// with toram.
fn budgets(rows: &[Row]) -> Vec<String> {
    let mut over = vec![];
    let after = |arch: Arch| rows.iter().find(|r| r.arch == arch && r.name == "after");
    for row in rows.iter().filter(|r| ["after", "after, embedded"].contains(&r.name.as_str())) {
        let limit = match row.arch {
            Arch::Amd64 => MAX_READ_AMD64,
            Arch::Arm64 => {
                let amd64 = after(Arch::Amd64).map_or(MAX_READ_AMD64, |r| r.read.min(MAX_READ_AMD64));
                (amd64 as f64 * MAX_READ_ARM64_FACTOR) as u64
            }
        };
        if row.read > limit {
            // arm64's signed kernel is an uncompressed Image that GRUB reads whole, and that
            // Debian's GRUB refuses compressed under Secure Boot (BENCHMARKS.md): said beside
            // the figure, so that what the rest of the boot reads can be judged.
            let kernel = row.parts.iter().find(|(part, ..)| part == "/live/vmlinuz").map_or(0, |&(_, read, _)| read);
            over.push(format!(
                "{} {}: {} bytes read before the result, budget {limit} (the kernel {kernel} of them, the rest {})",
                row.arch.debian(),
                row.name,
                row.read,
                row.read.saturating_sub(kernel)
            ));
        }
        let iso = std::fs::metadata(&row.shipped).map(|m| m.len()).unwrap_or(u64::MAX);
        if row.name == "after" && iso > max_iso(row.arch) {
            over.push(format!("{}: the ISO is {iso} bytes, budget {}", row.arch.debian(), max_iso(row.arch)));
        }
    }
    over
}
