//! `cargo xtask bench`: the budgets of SPEC §9, as issue 12 raised them, measured side by
//! side in one run, with the hostile inputs of issue 14 beside them.
//!
//! Process-level, as a user runs things: each measurement is one process, from exec to
//! exit, with its peak RSS from wait4. Runs alternate between all the commands, round after
//! round, so machine noise falls on all of them alike; medians are reported, and ratios for
//! the alternatives. `--write` puts the figures into BENCHMARKS.md; `--profile` adds a
//! callgrind profile of where the dispatcher's instructions go.

use std::fmt::Write as _;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::json;

use crate::system;

/// `check` must be at least this many times faster than check-jsonschema.
const MIN_SPEEDUP: f64 = 100.0;
/// ... and within this factor of a process that only reads and parses the file.
const MAX_FLOOR_RATIO: f64 = 2.0;
/// `run`, exec to exit (which comes just after the StartUnit reply; SPEC §9, issue 21).
const MAX_RUN: Duration = Duration::from_millis(25);
/// Peak RSS of `check`, and of a dispatching `run` (zbus's threads and buffers included).
const MAX_CHECK_RSS_KIB: u64 = 8 * 1024;
const MAX_RUN_RSS_KIB: u64 = 16 * 1024;
/// What reading 64 disks' identity and checking a by-id name and its hints may add to `run`
/// (SPEC §9, issue 29 #7).
const MAX_IDENTITY: Duration = Duration::from_millis(5);
/// `media build` against `xorriso -as mkisofs -V TASK -R -J` on the same files, and `media
/// embed` against xorriso making the same per-server ISO (issue 38).
const MIN_MEDIA_SPEEDUP: f64 = 20.0;
/// How much the peak RSS of `media embed` may differ between a small and the shipped ISO: it
/// must not grow with the ISO (the copy is the kernel's, the area written in pieces).
const MAX_EMBED_RSS_SPREAD_KIB: u64 = 1024;
/// A hostile input within the caps: decided within this, in at most this much memory.
const MAX_HOSTILE: Duration = Duration::from_millis(500);
const MAX_HOSTILE_RSS_KIB: u64 = 64 * 1024;

mod boot;

#[path = "../../../tests/common/hostile.rs"]
mod hostile;

struct Options {
    rounds: usize,
    write: bool,
    profile: bool,
    /// A revision whose `run` is timed beside this tree's: what a change adds.
    against: Option<String>,
}

fn options(args: &[String]) -> Result<Options> {
    let mut options = Options { rounds: 21, write: false, profile: false, against: None };
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--rounds" => {
                options.rounds = args.next().context("--rounds N")?.parse().context("--rounds takes a number")?
            }
            "--write" => options.write = true,
            "--against" => options.against = Some(args.next().context("--against REV")?.clone()),
            "--profile" => options.profile = true,
            other => bail!(
                "bench: unexpected argument '{other}' (usage: cargo xtask bench [--rounds N] [--write] [--profile] [--against REV], \
                 or bench --boot [--arch A]... [--against REV] [--link BYTES_PER_SEC])"
            ),
        }
    }
    Ok(options)
}

pub fn run(args: &[String]) -> Result<()> {
    if args.iter().any(|a| a == "--boot") {
        return boot::run(args);
    }
    let options = options(args)?;
    let root = crate::root();
    let against = options.against.as_deref().map(against_binary).transpose()?;
    let binary = crate::dist::build(crate::arch::Arch::host())?;
    crate::needs::ensure(crate::needs::Need::Bench, "the benchmark")?;
    system::run(Command::new(env!("CARGO")).current_dir(&root).args([
        "build",
        "--quiet",
        "--release",
        "--example",
        "mock-systemd",
    ]))?;
    let floor = crate::dist::build_example(crate::arch::Arch::host(), "parse-floor")?;
    let dir = root.join("target/bench");
    // A run that was interrupted may have left its tmpfs mounted.
    let _ = Command::new("umount").arg(dir.join("run")).stderr(Stdio::null()).status();
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;

    let disk = LoopDisk::new(&dir)?;
    let recipe = dir.join("maximal.json");
    std::fs::write(&recipe, maximal_recipe("/dev/sda"))?;
    let invalid = dir.join("maximal-invalid.json");
    std::fs::write(&invalid, maximal_recipe("sda"))?;
    let equivalent = dir.join("equivalent.schema.json");
    std::fs::write(&equivalent, equivalent_schema()?)?;
    let image = task_image(&dir, &maximal_recipe(disk.path()))?;
    let bus = Bus::start(&dir, &root)?;
    // `run` writes its state and outputs where it does at boot: /run, a tmpfs.
    let run_dir = Tmpfs::mount(&dir.join("run"))?;

    let mut commands = check_commands(&binary, &equivalent)?;
    // Every checker must agree on both files, or the timings compare different work.
    for command in &commands {
        for (file, valid) in [(&recipe, true), (&invalid, false)] {
            let ok = command.command(file, &dir)?.status()?.success();
            if ok != valid {
                bail!("{} says {} for {}", command.name, if ok { "valid" } else { "invalid" }, file.display());
            }
        }
    }
    commands.push(Bench {
        name: "floor: read and parse with serde_json".into(),
        program: floor,
        args: vec!["{recipe}".into()],
        env: vec![],
    });
    commands.push(Bench::run(&binary, &image, &bus.address, true));
    commands.push(Bench::run(&binary, &image, &bus.address, false));
    if let Some((rev, binary)) = &against {
        let mut before = Bench::run(binary, &image, &bus.address, false);
        before.name = format!("provision-dispatcher run of {rev} (loop mount + mock systemd)");
        commands.push(before);
    }

    let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); commands.len()];
    for round in 0..options.rounds {
        for i in 0..commands.len() {
            let c = (i + round) % commands.len();
            let command = || commands[c].command(&recipe, &run_dir.0);
            samples[c].push(measure(command()?, command()?)?);
        }
        clear(&run_dir.0)?;
    }
    let identity =
        disk_identity(&binary, against.as_ref(), &root, &dir, &bus.address, &run_dir.0, &disk, options.rounds)?;
    let media = media_build(&binary, &recipe, &dir, &run_dir.0, options.rounds)?;
    let embed = media_embed(&binary, &dir, options.rounds)?;
    let starts = bus.start_units()?;
    // Every `run` really dispatched: one StartUnit per round, and one per RSS measurement, for
    // the dispatching `run` and the disk identity's three (and REV's run and its two).
    let dispatching = if against.is_some() { 7 } else { 4 };
    if starts != 2 * dispatching * options.rounds {
        bail!("the mock saw {starts} StartUnit calls for {} runs", 2 * dispatching * options.rounds);
    }

    let size = std::fs::metadata(&binary)?.len();
    let results: Vec<(&str, Duration, u64)> = commands
        .iter()
        .zip(&samples)
        .map(|(c, s)| (c.name.as_str(), median(s), s.iter().map(|s| s.max_rss_kib).max().unwrap_or(0)))
        .collect();
    let mut table = String::new();
    let _ = writeln!(table, "| command | median | peak RSS | vs `check` |");
    let _ = writeln!(table, "|---|---:|---:|---:|");
    for (name, median, rss) in &results {
        let ratio = median.as_secs_f64() / results[0].1.as_secs_f64();
        let _ = writeln!(table, "| {name} | {:.2} ms | {rss} KiB | {ratio:.1}x |", ms(*median));
    }
    let speedup = results[1].1.as_secs_f64() / results[0].1.as_secs_f64();
    let ajv = results[2].1.as_secs_f64() / results[0].1.as_secs_f64();
    let over_floor = results[0].1.as_secs_f64() / results[3].1.as_secs_f64();
    let run_median = results[5].1;
    let (check_rss, run_rss) = (results[0].2, results[4].2.max(results[5].2));
    let hostile = hostile_inputs(&binary, &dir)?;
    let slowest = hostile.iter().map(|h| h.1).max().unwrap_or_default();
    let largest = hostile.iter().map(|h| h.2).max().unwrap_or_default();
    let budgets = [
        (
            format!("`check` vs check-jsonschema: {speedup:.0}x faster (ajv-cli: {ajv:.0}x)"),
            format!(">= {MIN_SPEEDUP}x"),
            speedup >= MIN_SPEEDUP,
        ),
        (
            format!("`check` vs the floor (read and parse only): {over_floor:.2}x its time"),
            format!("<= {MAX_FLOOR_RATIO}x"),
            over_floor <= MAX_FLOOR_RATIO,
        ),
        (
            format!("`run` exec to StartUnit reply: {:.2} ms median", ms(run_median)),
            format!("< {} ms", MAX_RUN.as_millis()),
            run_median < MAX_RUN,
        ),
        (
            format!("peak RSS of `check`: {check_rss} KiB"),
            format!("<= {MAX_CHECK_RSS_KIB} KiB"),
            check_rss <= MAX_CHECK_RSS_KIB,
        ),
        (format!("peak RSS of `run`: {run_rss} KiB"), format!("<= {MAX_RUN_RSS_KIB} KiB"), run_rss <= MAX_RUN_RSS_KIB),
        (
            format!("static stripped binary: {size} bytes ({:.2} MiB)", size as f64 / 1048576.0),
            format!("<= {} bytes", crate::dist::MAX_BYTES),
            size <= crate::dist::MAX_BYTES,
        ),
        (
            format!(
                "disk identity on a machine of 64 disks, by-id name and hints: {:+.2} ms (the name alone: {:+.2} ms)",
                ms_signed(identity.hints),
                ms_signed(identity.name)
            ),
            format!("<= {} ms", MAX_IDENTITY.as_millis()),
            identity.hints <= MAX_IDENTITY.as_secs_f64(),
        ),
        (
            format!(
                "`media build` vs `xorriso -as mkisofs -V TASK -R -J`, seed Linux example: {:.0}x faster (maximal recipe: {:.0}x)",
                media.speedup, media.maximal_speedup
            ),
            format!(">= {MIN_MEDIA_SPEEDUP}x"),
            media.speedup >= MIN_MEDIA_SPEEDUP,
        ),
        (
            format!(
                "`media embed` vs xorriso making the same per-server ISO (the image's tree, its boot images replayed): {:.0}x faster on XFS with reflink (ext4: {:.0}x, tmpfs: {:.0}x; the copy of the image is the floor where blocks are not shared)",
                embed.speedups[2], embed.speedups[1], embed.speedups[0]
            ),
            format!(">= {MIN_MEDIA_SPEEDUP}x"),
            embed.speedups[2] >= MIN_MEDIA_SPEEDUP,
        ),
        (
            format!(
                "peak RSS of `media embed`: {} KiB into the shipped ISO ({:.1} MiB), {} KiB into one of {:.1} MiB",
                embed.rss_kib[0],
                embed.iso_bytes[0] as f64 / 1048576.0,
                embed.rss_kib[1],
                embed.iso_bytes[1] as f64 / 1048576.0
            ),
            format!("within {MAX_EMBED_RSS_SPREAD_KIB} KiB of each other"),
            embed.rss_kib[0].abs_diff(embed.rss_kib[1]) <= MAX_EMBED_RSS_SPREAD_KIB,
        ),
        (
            format!("slowest hostile input within the caps: {:.1} ms", ms(slowest)),
            format!("< {} ms", MAX_HOSTILE.as_millis()),
            slowest < MAX_HOSTILE,
        ),
        (
            format!("largest peak RSS of a hostile input: {largest} KiB"),
            format!("<= {MAX_HOSTILE_RSS_KIB} KiB"),
            largest <= MAX_HOSTILE_RSS_KIB,
        ),
    ];
    let mut report = String::new();
    let _ = writeln!(
        report,
        "`check` and `run` on a maximal recipe ({} bytes: 1 MiB `user_data`, 64 partitions), {} alternating rounds:\n",
        std::fs::metadata(&recipe)?.len(),
        options.rounds
    );
    report.push_str(&table);
    if let (Some((rev, _)), Some(before)) = (&against, results.get(6)) {
        let _ = writeln!(
            report,
            "\nThis tree's dispatching `run` against {rev}'s, side by side: {:+.2} ms ({:.2} ms against {:.2} ms).",
            ms(run_median) - ms(before.1),
            ms(run_median),
            ms(before.1)
        );
    }
    report.push_str(&identity.table);
    report.push_str(&media.table);
    report.push_str(&embed.table);
    let _ = writeln!(
        report,
        "\nThe hostile inputs of issues 14, 31 and 32 (`tests/common/hostile.rs`: recipes within the 8 MiB cap against the canonical schema, and schemas within the 1 MiB cap with the recipe that made each hang or run out of memory), `check --format json`, median of 5:\n"
    );
    let _ = writeln!(report, "| input | bytes | median | peak RSS |\n|---|---:|---:|---:|");
    for (name, wall, rss, bytes) in &hostile {
        let _ = writeln!(report, "| {name} | {bytes} | {:.1} ms | {rss} KiB |", ms(*wall));
    }
    let _ = writeln!(report, "\n| budget (issue 12, issue 14) | measured | limit | |\n|---|---|---|---|");
    for (what, limit, ok) in &budgets {
        let (name, measured) = what.split_once(": ").unwrap_or((what, ""));
        let _ = writeln!(report, "| {name} | {measured} | {limit} | {} |", if *ok { "met" } else { "**over**" });
    }
    println!("\n{report}");
    let profile = if options.profile { Some(profile(&recipe, &image, &dir)?) } else { None };
    if options.write {
        write_benchmarks(&root, &report, profile.as_deref())?;
        println!("wrote BENCHMARKS.md");
    }
    if let Some(profile) = &profile {
        println!("{profile}");
    }
    drop(bus);
    drop(disk);
    drop(run_dir);
    let over: Vec<&String> = budgets.iter().filter(|(_, _, ok)| !ok).map(|(what, _, _)| what).collect();
    if !over.is_empty() {
        bail!("over budget: {over:?}");
    }
    Ok(())
}

/// `check --format json` on each hostile input, recipes (against the canonical schema) and
/// schemas (with the recipe that made each hang): `(name, median, peak RSS in KiB, bytes of
/// the recipe and the schema)`.
fn hostile_inputs(binary: &Path, dir: &Path) -> Result<Vec<(&'static str, Duration, u64, usize)>> {
    let mut inputs: Vec<(&str, String, Option<String>)> =
        hostile::inputs().into_iter().map(|(name, text, _, _)| (name, text, None)).collect();
    for (name, schema, recipe) in hostile::schemas() {
        inputs.push((name, recipe.to_string(), Some(schema.to_string())));
    }
    let mut rows = Vec::new();
    for (name, text, schema) in inputs {
        let file = dir.join(format!("hostile-{name}.json"));
        std::fs::write(&file, &text)?;
        let schema_file = dir.join(format!("hostile-{name}.schema.json"));
        if let Some(schema) = &schema {
            std::fs::write(&schema_file, schema)?;
        }
        let mut samples = Vec::new();
        for _ in 0..5 {
            let command = || {
                let mut cmd = Command::new(binary);
                cmd.args(["check", "--format", "json"]).arg(&file).stdout(Stdio::null());
                if schema.is_some() {
                    cmd.arg("--schema").arg(&schema_file);
                }
                cmd
            };
            samples.push(measure_any(command(), command())?);
        }
        let bytes = text.len() + schema.as_ref().map_or(0, String::len);
        rows.push((name, median(&samples), samples.iter().map(|s| s.max_rss_kib).max().unwrap_or(0), bytes));
        std::fs::remove_file(&file)?;
        let _ = std::fs::remove_file(&schema_file);
    }
    Ok(rows)
}

/// What the disks' identity costs `run`: medians, side by side, of the maximal recipe on a
/// machine without disks in sysfs (nothing to read), the same on a machine of 64 SCSI disks
/// (each disk's identity read; the target a loop device, so no name to resolve), and the
/// target named by its by-id WWN name with hints on a machine of 64 disks. Deltas in seconds.
struct Identity {
    name: f64,
    hints: f64,
    table: String,
}

#[allow(clippy::too_many_arguments)]
fn disk_identity(
    binary: &Path,
    against: Option<&(String, PathBuf)>,
    root: &Path,
    dir: &Path,
    bus: &str,
    run: &Path,
    disk: &LoopDisk,
    rounds: usize,
) -> Result<Identity> {
    let empty = dir.join("sysfs-empty");
    std::fs::create_dir_all(empty.join("block"))?;
    let full = dir.join("sysfs-64-disks");
    // The unit tests' fixture of 64 disks (src/disks/mod.rs), written where the bench says.
    system::run(Command::new(env!("CARGO")).current_dir(root).env("PROVISION_DISPATCHER_FAKE_SYSFS", &full).args([
        "test",
        "--quiet",
        "--lib",
        "--",
        "--ignored",
        "--exact",
        "disks::tests::sixty_four_disks_for_the_bench",
    ]))?;
    // The kernel links every block device under dev/block, the loop device of the plain
    // recipe's target too: without it, finding that disk alone would read every disk's `dev`.
    let rdev = std::os::unix::fs::MetadataExt::rdev(&std::fs::metadata(&disk.device)?);
    let (major, minor) = (libc::major(rdev), libc::minor(rdev));
    let loop_dir = full.join("devices/virtual/block").join(Path::new(&disk.device).file_name().context("loop name")?);
    std::fs::create_dir_all(&loop_dir)?;
    std::fs::write(loop_dir.join("dev"), format!("{major}:{minor}\n"))?;
    std::fs::create_dir_all(full.join("dev/block"))?;
    std::os::unix::fs::symlink(&loop_dir, full.join(format!("dev/block/{major}:{minor}")))?;
    let plain = task_image(&dir.join("identity-plain"), &maximal_recipe(disk.path()))?;
    let mut hinted: serde_json::Value =
        serde_json::from_str(&maximal_recipe("/dev/disk/by-id/wwn-0x5000c50015ea0000"))?;
    hinted["target_disk_hints"] =
        json!({"serial": "PD-DISK-0000", "model": "QEMU HARDDISK", "size_min": "900M", "rotational": true});
    let hinted = task_image_v2(&dir.join("identity-hinted"), &hinted.to_string())?;
    let with = |binary: &Path, name: String, image: &Path, sysfs: &Path| {
        let mut bench = Bench::run(binary, image, bus, false);
        bench.name = name;
        bench.args.extend(["--sysfs-root".into(), sysfs.display().to_string()]);
        bench
    };
    let mut commands = vec![
        with(binary, "run, no disk in sysfs".into(), &plain, &empty),
        with(binary, "run, 64 disks in sysfs, the target by its kernel name".into(), &plain, &full),
        with(binary, "run, 64 disks in sysfs, the target by its by-id name, 4 hints".into(), &hinted, &full),
    ];
    // REV's, beside them: what this tree adds on each machine.
    if let Some((rev, before)) = against {
        commands.push(with(before, format!("run of {rev}, no disk in sysfs"), &plain, &empty));
        let name = format!("run of {rev}, 64 disks in sysfs, the target by its by-id name, 4 hints");
        commands.push(with(before, name, &hinted, &full));
    }
    let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); commands.len()];
    for round in 0..rounds {
        for i in 0..commands.len() {
            let c = (i + round) % commands.len();
            let command = || commands[c].command(Path::new("unused"), run);
            samples[c].push(measure(command()?, command()?)?);
        }
        clear(run)?;
    }
    let medians: Vec<Duration> = samples.iter().map(|s| median(s)).collect();
    let mut table = String::from("\nWhat the disks' identity adds to `run` (SPEC §9, issue 29), side by side:\n\n| command | median | vs no disk |\n|---|---:|---:|\n");
    for (i, (command, median)) in commands.iter().zip(&medians).enumerate() {
        // REV's rows against REV's own machine without disks.
        let baseline = if i < 3 { medians[0] } else { medians[3] };
        let delta = median.as_secs_f64() - baseline.as_secs_f64();
        let _ = writeln!(table, "| {} | {:.2} ms | {:+.2} ms |", command.name, ms(*median), delta * 1000.0);
    }
    let delta = |i: usize| medians[i].as_secs_f64() - medians[0].as_secs_f64();
    Ok(Identity { name: delta(1), hints: delta(2), table })
}

/// REV's shipped binary (`--against`), built once from `git archive REV` under
/// `target/bench-against/REV/` as `dist` builds this tree's, in a target directory of its own
/// (`target/bench-against/target`): in this tree's, cargo would take the binary it finds at the
/// shipped path, REV's, for this tree's own.
fn against_binary(rev: &str) -> Result<(String, PathBuf)> {
    let root = crate::root();
    let dir = root.join("target/bench-against").join(rev);
    let binary = dir.join("provision-dispatcher");
    if !binary.is_file() {
        let tree = dir.join("tree");
        let _ = std::fs::remove_dir_all(&tree);
        std::fs::create_dir_all(&tree)?;
        let archive =
            format!("git -C '{}' archive --format=tar '{rev}' | tar -x -C '{}'", root.display(), tree.display());
        system::run(Command::new("sh").args(["-c", &archive]))?;
        eprintln!("bench: building the binary of {rev}");
        let arch = crate::arch::Arch::host();
        let target = root.join("target/bench-against/target");
        let mut cargo = crate::dist::cargo_build(arch)?;
        cargo.current_dir(&tree).env("CARGO_TARGET_DIR", &target).args(["--bin", "provision-dispatcher"]);
        system::run(&mut cargo)?;
        std::fs::copy(target.join(arch.triple()).join("dist/provision-dispatcher"), &binary)?;
    }
    Ok((rev.to_owned(), binary))
}

/// `media build` and xorriso (what a controller ran before) on the same files, side by side,
/// each writing its ISO to the tmpfs (`media build` syncs what it writes, its atomic rename,
/// which a disk would make the measure of the disk, not of the work): the seed Linux example,
/// task media as a controller makes them (the budget), and the maximal recipe, where most of
/// `media build`'s time is `check`'s of 1 MiB of `user_data`, which xorriso does not do.
struct MediaBuild {
    speedup: f64,
    maximal_speedup: f64,
    table: String,
}

fn media_build(binary: &Path, maximal: &Path, dir: &Path, run: &Path, rounds: usize) -> Result<MediaBuild> {
    let schema = system::output(Command::new(binary).args(["schema", "print", "1"]))?;
    let seed = crate::root().join("iso/examples/seed-linux.json");
    let mut commands = Vec::new();
    let mut staged = Vec::new();
    let mut sizes = Vec::new();
    let pairs = [
        (
            "seed-linux",
            seed.as_path(),
            "provision-dispatcher media build, seed Linux example",
            "xorriso -as mkisofs -V TASK -R -J, seed Linux example",
        ),
        (
            "maximal",
            maximal,
            "provision-dispatcher media build, maximal recipe",
            "xorriso -as mkisofs -V TASK -R -J, maximal recipe",
        ),
    ];
    for (name, recipe, build_name, xorriso_name) in pairs {
        let stage = dir.join("media-build").join(name);
        std::fs::create_dir_all(&stage)?;
        std::fs::copy(recipe, stage.join("recipe.json"))?;
        std::fs::write(stage.join("recipe.schema.json"), &schema)?;
        sizes.push(std::fs::metadata(recipe)?.len() + schema.len() as u64);
        let build = ["media", "build", "{recipe}", "-o", "{fresh}/task.iso"];
        let xorriso = [
            "-as",
            "mkisofs",
            "-quiet",
            "-V",
            "TASK",
            "-R",
            "-J",
            "-o",
            "{fresh}/task.iso",
            &stage.display().to_string(),
        ];
        commands.push(Bench {
            name: build_name.into(),
            program: binary.to_owned(),
            args: build.map(String::from).to_vec(),
            env: vec![],
        });
        commands.push(Bench {
            name: xorriso_name.into(),
            program: "xorriso".into(),
            args: xorriso.map(String::from).to_vec(),
            env: vec![],
        });
        staged.extend([stage.join("recipe.json"), stage.join("recipe.json")]);
    }
    let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); commands.len()];
    for round in 0..rounds {
        for i in 0..commands.len() {
            let c = (i + round) % commands.len();
            let command = || commands[c].command(&staged[c], run);
            samples[c].push(measure(command()?, command()?)?);
        }
        // Both make media the dispatcher takes: `media check` reads xorriso's as its own.
        for entry in std::fs::read_dir(run)? {
            let iso = entry?.path().join("task.iso");
            if iso.is_file() {
                system::output(Command::new(binary).args(["media", "check"]).arg(&iso))?;
            }
        }
        clear(run)?;
    }
    let medians: Vec<Duration> = samples.iter().map(|s| median(s)).collect();
    let ratio = |pair: usize| medians[2 * pair + 1].as_secs_f64() / medians[2 * pair].as_secs_f64();
    let mut table = format!(
        "\nTask media of the seed Linux example ({} bytes with the canonical schema) and of the maximal recipe ({} bytes), each ISO written to a tmpfs and read back by `media check`, side by side (issue 38):\n\n| command | median | peak RSS | vs `media build` |\n|---|---:|---:|---:|\n",
        sizes[0], sizes[1]
    );
    for (i, (command, samples)) in commands.iter().zip(&samples).enumerate() {
        let rss = samples.iter().map(|s| s.max_rss_kib).max().unwrap_or(0);
        let vs = median(samples).as_secs_f64() / medians[i - i % 2].as_secs_f64();
        let _ = writeln!(table, "| {} | {:.2} ms | {rss} KiB | {vs:.1}x |", command.name, ms(median(samples)));
    }
    Ok(MediaBuild { speedup: ratio(0), maximal_speedup: ratio(1), table })
}

/// `media embed` and xorriso (what a controller without it does, and what Ironic does per node)
/// making the same per-server ISO, side by side: the shipped image with the seed Linux example's
/// task in its area, each written to a tmpfs of its own and read back by `media check` (the
/// same task, both). xorriso rebuilds the image from its tree (`-indev` the image, its boot
/// images replayed) with the area's file replaced by the one `media embed` wrote. And `media
/// embed` into a small maintenance ISO, for its peak RSS at another size.
struct MediaEmbed {
    /// xorriso's time over `media embed`'s, on each of [`EMBED_FILESYSTEMS`].
    speedups: [f64; 3],
    /// Peak RSS into the shipped ISO, and into the small one.
    rss_kib: [u64; 2],
    iso_bytes: [u64; 2],
    table: String,
}

/// Where the per-server ISOs are written, each the ISO's own filesystem with the pristine image
/// beside them, as a controller's store keeps it: tmpfs (no byte reaches a disk, so neither side
/// pays for writing), ext4 on a loop device (Debian's default: the copy is the kernel's, every
/// byte of it written and synced) and XFS with reflink on a loop device (RHEL's default since
/// 8: `copy_file_range` shares the image's blocks, so `media embed` writes only its area).
const EMBED_FILESYSTEMS: [&str; 3] = ["tmpfs", "ext4", "xfs"];

fn media_embed(binary: &Path, dir: &Path, rounds: usize) -> Result<MediaEmbed> {
    let arch = crate::arch::Arch::host();
    let built = crate::image::build(arch, &[], &crate::root().join("target/image").join(arch.debian()))?.iso;
    let stage = dir.join("media-embed");
    std::fs::create_dir_all(&stage)?;
    let task = stage.join("task.iso");
    let seed = crate::root().join("iso/examples/seed-linux.json");
    system::output(Command::new(binary).args(["media", "build"]).arg(&seed).arg("-o").arg(&task))?;
    let small = small_maintenance_iso(&stage, crate::image::task_area_bytes(arch))?;
    // The area as `media embed` writes it, for xorriso to put in its place.
    let embedded = stage.join("embedded.iso");
    system::output(Command::new(binary).args(["media", "embed"]).arg(&built).arg(&task).arg("-o").arg(&embedded))?;
    let area = stage.join("task.img");
    system::output(
        Command::new("xorriso")
            .args(["-osirrox", "on", "-indev"])
            .arg(&embedded)
            .args(["-extract", &format!("/{}", crate::image::TASK_AREA)])
            .arg(&area),
    )?;
    let shown = |path: &Path| path.display().to_string();
    let mut rows = vec![];
    let mut speedups = vec![];
    let mut rss_kib = [0, 0];
    for fs in EMBED_FILESYSTEMS {
        let store = stage.join(format!("store-{fs}"));
        mount_store(fs, &stage, &store)?;
        let measured = (|| -> Result<Vec<(String, Vec<Sample>)>> {
            // The pristine image in the store, as the controller keeps it.
            let image = store.join("maintenance.iso");
            std::fs::copy(&built, &image)?;
            let run = store.join("run");
            std::fs::create_dir_all(&run)?;
            let embed = |name: &str, iso: &Path| Bench {
                name: name.into(),
                program: binary.to_owned(),
                args: ["media", "embed", &shown(iso), &shown(&task), "-o", "{fresh}/node.iso"]
                    .map(String::from)
                    .to_vec(),
                env: vec![],
            };
            let mut commands = vec![
                embed(&format!("provision-dispatcher media embed, into the shipped ISO, on {fs}"), &image),
                Bench {
                    name: format!("xorriso -indev IMAGE -outdev OUT -boot_image any replay -map task.img /provision/task.img, on {fs}"),
                    program: "xorriso".into(),
                    args: ["-indev", &shown(&image), "-outdev", "{fresh}/node.iso", "-boot_image", "any", "replay"]
                        .into_iter()
                        .map(String::from)
                        .chain(["-map".into(), shown(&area), format!("/{}", crate::image::TASK_AREA), "-commit".into()])
                        .collect(),
                    env: vec![],
                },
                // The floor: the copy of the image alone, synced as `media embed` syncs it.
                Bench {
                    name: format!("the copy alone: cp --reflink=auto IMAGE OUT && sync OUT, on {fs}"),
                    program: "sh".into(),
                    args: ["-c", "cp --reflink=auto \"$1\" \"$2\" && sync \"$2\"", "sh", &shown(&image), "{fresh}/node.iso"]
                        .map(String::from)
                        .to_vec(),
                    env: vec![],
                },
            ];
            if fs == "tmpfs" {
                commands
                    .push(embed("provision-dispatcher media embed, into a small maintenance ISO, on tmpfs", &small));
            }
            let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); commands.len()];
            for round in 0..rounds {
                for i in 0..commands.len() {
                    let c = (i + round) % commands.len();
                    let command = || commands[c].command(&task, &run);
                    samples[c].push(measure(command()?, command()?)?);
                    // Every ISO `media embed` and xorriso made holds the task, for the dispatcher to take.
                    if commands[c].program != Path::new("sh") {
                        for entry in std::fs::read_dir(&run)? {
                            let iso = entry?.path().join("node.iso");
                            let checked = Command::new(binary).args(["media", "check"]).arg(&iso).output()?;
                            if !checked.status.success() {
                                bail!(
                                    "{}: `media check` of {} says {}",
                                    commands[c].name,
                                    iso.display(),
                                    String::from_utf8_lossy(&checked.stdout)
                                );
                            }
                        }
                    }
                    clear(&run)?;
                }
            }
            Ok(commands.into_iter().map(|c| c.name).zip(samples).collect())
        })();
        let _ = Command::new("umount").arg(&store).status();
        let measured = measured?;
        let medians: Vec<Duration> = measured.iter().map(|(_, s)| median(s)).collect();
        let rss: Vec<u64> = measured.iter().map(|(_, s)| s.iter().map(|s| s.max_rss_kib).max().unwrap_or(0)).collect();
        speedups.push(medians[1].as_secs_f64() / medians[0].as_secs_f64());
        if fs == "tmpfs" {
            rss_kib = [rss[0], rss[3]];
        }
        for (i, (name, _)) in measured.iter().enumerate() {
            let vs = medians[i].as_secs_f64() / medians[0].as_secs_f64();
            rows.push(format!("| {name} | {:.2} ms | {} KiB | {vs:.1}x |", ms(medians[i]), rss[i]));
        }
    }
    let iso_bytes = [std::fs::metadata(&built)?.len(), std::fs::metadata(&small)?.len()];
    let table = format!(
        "
The per-server ISO of the one-drive flow: the seed Linux example's task ISO ({} bytes) in the shipped image's task area ({} bytes of ISO), each ISO written beside the pristine image on its filesystem and read back by `media check`, side by side (issue 38), on tmpfs, ext4 and XFS with reflink (each on a loop device of its own); the copy alone is the floor; and `media embed` into a maintenance ISO of {} bytes, for its peak RSS. Ratios are to `media embed` on the same filesystem:\n\n| command | median | peak RSS | vs `media embed` |\n|---|---:|---:|---:|\n{}\n",
        std::fs::metadata(&task)?.len(),
        iso_bytes[0],
        iso_bytes[1],
        rows.join("\n")
    );
    Ok(MediaEmbed { speedups: [speedups[0], speedups[1], speedups[2]], rss_kib, iso_bytes, table })
}

/// Mounts a filesystem of `kind` at `at` for the per-server ISOs: tmpfs, or a loop device's
/// ext4 or XFS (with reflink) made in `stage`.
fn mount_store(kind: &str, stage: &Path, at: &Path) -> Result<()> {
    std::fs::create_dir_all(at)?;
    if kind == "tmpfs" {
        return system::run(Command::new("mount").args(["-t", "tmpfs", "-o", "size=1g,mode=0755", "tmpfs"]).arg(at));
    }
    let file = stage.join(format!("store-{kind}.img"));
    let _ = std::fs::remove_file(&file);
    std::fs::File::create(&file)?.set_len(1 << 30)?;
    match kind {
        "ext4" => system::output(Command::new("mkfs.ext4").args(["-q", "-F"]).arg(&file))?,
        _ => system::output(Command::new("mkfs.xfs").args(["-q", "-f", "-m", "reflink=1"]).arg(&file))?,
    };
    system::run(Command::new("mount").args(["-o", "loop"]).arg(&file).arg(at))
}

/// A maintenance ISO of a few MiB, as the image lays out its area (volume id, an empty area of
/// `area_bytes` at its place), beside a file of 1 MiB: `media embed` takes it as the image.
fn small_maintenance_iso(dir: &Path, area_bytes: u64) -> Result<PathBuf> {
    let tree = dir.join("small-tree");
    let area = tree.join(crate::image::TASK_AREA);
    std::fs::create_dir_all(area.parent().expect("a folder"))?;
    std::fs::write(&area, crate::image::empty_task_area(area_bytes))?;
    std::fs::write(tree.join("filler.bin"), vec![0x5a; 1 << 20])?;
    let iso = dir.join("small.iso");
    system::output(
        Command::new("xorriso")
            .args(["-as", "mkisofs", "-r", "-J", "-V", "PROVISION-MAINT", "-o"])
            .arg(&iso)
            .arg(&tree),
    )?;
    Ok(iso)
}

fn ms_signed(seconds: f64) -> f64 {
    seconds * 1000.0
}

/// One command to time. `{recipe}` stands for the recipe file, `{fresh}` for a new directory.
struct Bench {
    name: String,
    program: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
}

impl Bench {
    fn run(binary: &Path, image: &Path, address: &str, no_start: bool) -> Bench {
        let mut args: Vec<String> =
            ["run", "--media", &image.display().to_string(), "--wait", "0"].map(String::from).to_vec();
        args.extend(["--state-dir", "{fresh}/state", "--output", "{fresh}/provision"].map(String::from));
        if no_start {
            args.push("--no-start".into());
        }
        Bench {
            name: if no_start {
                "provision-dispatcher run --no-start (squashfs on loop)".into()
            } else {
                "provision-dispatcher run (loop mount + mock systemd)".into()
            },
            program: binary.to_owned(),
            args,
            env: vec![("DBUS_SYSTEM_BUS_ADDRESS".into(), address.into())],
        }
    }

    /// The command for one run on `recipe`, with fresh directories prepared.
    fn command(&self, recipe: &Path, dir: &Path) -> Result<Command> {
        let fresh = tempfile_dir(dir)?;
        let mut cmd = Command::new(&self.program);
        for arg in &self.args {
            cmd.arg(
                arg.replace("{recipe}", &recipe.display().to_string()).replace("{fresh}", &fresh.display().to_string()),
            );
        }
        cmd.envs(self.env.iter().map(|(k, v)| (k, v))).env_remove("NOTIFY_SOCKET");
        cmd.stdout(Stdio::null()).stderr(Stdio::null());
        Ok(cmd)
    }
}

/// Removes what the runs of a round left in `dir` (the tmpfs holds a few rounds' outputs, each
/// with a 1 MiB `user_data` and the recipe beside it).
fn clear(dir: &Path) -> Result<()> {
    for entry in std::fs::read_dir(dir)? {
        std::fs::remove_dir_all(entry?.path())?;
    }
    Ok(())
}

fn tempfile_dir(dir: &Path) -> Result<PathBuf> {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let fresh = dir.join(format!("run-{}", NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)));
    std::fs::create_dir_all(&fresh)?;
    Ok(fresh)
}

/// The dispatcher's `check` first (the baseline), then the alternatives, installed in the
/// cache when missing: check-jsonschema from PyPI in a venv, ajv-cli from npm.
fn check_commands(binary: &Path, equivalent: &Path) -> Result<Vec<Bench>> {
    let cache = crate::cache_dir();
    let venv = cache.join("bench-venv");
    if !venv.join("bin/check-jsonschema").exists() {
        system::run(Command::new("python3").args(["-m", "venv"]).arg(&venv))?;
        system::run(Command::new(venv.join("bin/pip")).args(["install", "--quiet", "check-jsonschema==0.39.0"]))?;
    }
    let npm = cache.join("bench-npm");
    if !npm.join("node_modules/.bin/ajv").exists() {
        std::fs::create_dir_all(&npm)?;
        system::run(
            Command::new("npm")
                .args(["install", "--silent", "--prefix"])
                .arg(&npm)
                .args(["ajv-cli@5", "ajv-formats@3"]),
        )?;
    }
    let schema = equivalent.display().to_string();
    Ok(vec![
        Bench {
            name: "provision-dispatcher check".into(),
            program: binary.to_owned(),
            args: vec!["check".into(), "{recipe}".into()],
            env: vec![],
        },
        Bench {
            name: "check-jsonschema 0.39 (Python)".into(),
            program: venv.join("bin/check-jsonschema"),
            args: vec!["--schemafile".into(), schema.clone(), "{recipe}".into()],
            env: vec![],
        },
        Bench {
            name: "ajv-cli 5 (Node.js)".into(),
            program: npm.join("node_modules/.bin/ajv"),
            args: ["validate", "--spec=draft7", "--strict=false", "-c", "ajv-formats", "-s", &schema, "-d", "{recipe}"]
                .map(String::from)
                .to_vec(),
            env: vec![],
        },
    ])
}

/// The canonical schema with its one RE2-only pattern spelled without the inline flag, so
/// that ECMA-262 and Python engines accept it: the same language, case-insensitive by hand.
fn equivalent_schema() -> Result<String> {
    let text = std::fs::read_to_string(crate::root().join("iso/recipe.schema.json"))?;
    let from = "^(?i)(ef00|8300|8200|0700|0c01|fc00|fd00)$";
    let to = "^([eE][fF]00|8300|8200|0700|0[cC]01|[fF][cC]00|[fF][dD]00)$";
    if !text.contains(from) {
        bail!("the canonical schema no longer has the pattern the equivalent schema rewrites");
    }
    Ok(text.replace(from, to))
}

/// A valid recipe at the limits: `user_data` of exactly 1 MiB, 64 partitions.
fn maximal_recipe(target_disk: &str) -> String {
    let line = "write_files: [{path: /etc/motd, content: 'provisioned by the maintenance OS'}]\n";
    let mut user_data = String::from("#cloud-config\n");
    while user_data.len() < 1024 * 1024 {
        user_data.push_str(line);
    }
    user_data.truncate(1024 * 1024);
    let mut partitions = vec![json!({"size": "512M", "type_guid": "ef00", "format": "vfat", "label": "EFI"})];
    for i in 2..64 {
        partitions.push(json!({"size": "1G", "type_guid": "8300", "format": "ext4", "label": format!("part{i}")}));
    }
    partitions.push(json!({"size": "100%", "type_guid": "8300", "format": "xfs", "label": "root"}));
    let recipe = json!({
        "task_target": "install-linux.target",
        "target_disk": target_disk,
        "oci_url": "controller.internal:8080/os-images/ubuntu-rootfs:22.04",
        "recipe_version": "2025.11",
        "user_data": user_data,
        "partition_layout": partitions,
        "metadata": {"ticket": "INC-12345", "owner": "ops@example.com"},
    });
    serde_json::to_string_pretty(&recipe).expect("serializes")
}

/// The task medium as a squashfs image (the host kernel has no ISO 9660; mounting it takes
/// the same loop-device path).
fn task_image(dir: &Path, recipe: &str) -> Result<PathBuf> {
    task_image_with(dir, recipe, "iso/recipe.schema.json")
}

/// [`task_image`] with schema version 2.
fn task_image_v2(dir: &Path, recipe: &str) -> Result<PathBuf> {
    task_image_with(dir, recipe, "iso/recipe.schema.v2.json")
}

fn task_image_with(dir: &Path, recipe: &str, schema: &str) -> Result<PathBuf> {
    let tree = dir.join("media");
    std::fs::create_dir_all(&tree)?;
    std::fs::write(tree.join("recipe.json"), recipe)?;
    std::fs::copy(crate::root().join(schema), tree.join("recipe.schema.json"))?;
    let image = dir.join("task.sqfs");
    system::run(Command::new("mksquashfs").arg(&tree).arg(&image).args(["-quiet", "-no-progress", "-noappend"]))?;
    Ok(image)
}

/// A free block device for `target_disk`, named through /dev/mapper as the schema requires.
struct LoopDisk {
    device: String,
    link: PathBuf,
}

impl LoopDisk {
    fn new(dir: &Path) -> Result<LoopDisk> {
        let backing = dir.join("disk.img");
        std::fs::File::create(&backing)?.set_len(64 << 20)?;
        let device =
            system::output(Command::new("losetup").args(["--find", "--show"]).arg(&backing))?.trim().to_owned();
        std::fs::create_dir_all("/dev/mapper")?;
        let link = PathBuf::from("/dev/mapper/provision-bench-disk");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&device, &link)?;
        Ok(LoopDisk { device, link })
    }

    fn path(&self) -> &str {
        self.link.to_str().expect("UTF-8")
    }
}

impl Drop for LoopDisk {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.link);
        let _ = Command::new("losetup").arg("-d").arg(&self.device).status();
    }
}

/// A tmpfs for the benchmark's /run, unmounted when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(path: &Path) -> Result<Tmpfs> {
        std::fs::create_dir_all(path)?;
        system::run(Command::new("mount").args(["-t", "tmpfs", "-o", "size=256m,mode=0755", "tmpfs"]).arg(path))?;
        Ok(Tmpfs(path.to_owned()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// A private dbus-daemon with the mock systemd on it: the rig of the integration tests,
/// examples/mock-systemd.rs with `--private-bus`.
struct Bus {
    mock: Child,
    address: String,
    log: PathBuf,
}

impl Bus {
    fn start(dir: &Path, root: &Path) -> Result<Bus> {
        let log = dir.join("mock-calls.jsonl");
        let bus_dir = dir.join("bus");
        std::fs::create_dir_all(&bus_dir)?;
        let mut mock = Command::new(root.join("target/release/examples/mock-systemd"))
            .arg("--private-bus")
            .arg(&bus_dir)
            .arg("--log")
            .arg(&log)
            .args(["--units", "install-linux.target"])
            .stdout(Stdio::piped())
            .spawn()?;
        let mut ready = String::new();
        BufReader::new(mock.stdout.take().context("mock stdout")?).read_line(&mut ready)?;
        let Some(address) = ready.trim().strip_prefix("ready ") else { bail!("the mock systemd did not start") };
        Ok(Bus { address: address.to_owned(), mock, log })
    }

    fn start_units(&self) -> Result<usize> {
        Ok(std::fs::read_to_string(&self.log)?.lines().filter(|l| l.contains("\"StartUnit\"")).count())
    }
}

impl Drop for Bus {
    fn drop(&mut self) {
        // Its dbus-daemon dies with it.
        let _ = self.mock.kill();
        let _ = self.mock.wait();
    }
}

#[derive(Debug, Clone, Copy)]
struct Sample {
    wall: Duration,
    max_rss_kib: u64,
}

/// Runs `timed` to completion, which must succeed: its wall time from spawn to exit; and
/// `measured`, the same command on fresh directories, for its peak RSS.
fn measure(timed: Command, mut measured: Command) -> Result<Sample> {
    let (wall, status) = wall_time(timed)?;
    if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        // Once more, to say why.
        let out = measured.stdout(Stdio::piped()).stderr(Stdio::piped()).output()?;
        let said = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = said.lines().rev().take(3).collect();
        bail!(
            "a benchmarked command failed (status {status}): {:?}: {}",
            measured.get_args().collect::<Vec<_>>(),
            tail.join(" / ")
        );
    }
    Ok(Sample { wall, max_rss_kib: peak_rss(measured)? })
}

/// [`measure`] for a command that may fail (a hostile input is refused), but not crash.
fn measure_any(timed: Command, measured: Command) -> Result<Sample> {
    let (wall, status) = wall_time(timed)?;
    if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) == 70 {
        bail!("a benchmarked command did not decide (status {status})");
    }
    Ok(Sample { wall, max_rss_kib: peak_rss(measured)? })
}

fn wall_time(mut cmd: Command) -> Result<(Duration, i32)> {
    let started = Instant::now();
    let status = cmd.status().with_context(|| system::describe(&cmd))?;
    Ok((started.elapsed(), std::os::unix::process::ExitStatusExt::into_raw(status)))
}

/// The peak RSS of `cmd` in KiB, as GNU time measures it. Not from wait4 here: a process
/// spawned from this one carries this one's resident set into its peak at exec (`ru_maxrss`
/// counts the memory the child was spawned with), while GNU time forks from its own small
/// process.
fn peak_rss(cmd: Command) -> Result<u64> {
    let rss_file = std::env::temp_dir().join(format!("provision-bench-rss-{}", std::process::id()));
    let mut timed = Command::new("/usr/bin/time");
    timed.arg("-f").arg("%M").arg("-o").arg(&rss_file).arg(cmd.get_program()).args(cmd.get_args());
    for (key, value) in cmd.get_envs() {
        match value {
            Some(value) => timed.env(key, value),
            None => timed.env_remove(key),
        };
    }
    timed.stdout(Stdio::null()).stderr(Stdio::null()).status()?;
    let text = std::fs::read_to_string(&rss_file)?;
    let _ = std::fs::remove_file(&rss_file);
    text.lines().last().unwrap_or_default().trim().parse().context("GNU time's %M")
}

fn median(samples: &[Sample]) -> Duration {
    let mut walls: Vec<Duration> = samples.iter().map(|s| s.wall).collect();
    walls.sort();
    walls[walls.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Where the instructions go (callgrind: repeatable, unlike timers), for `check` and for
/// `run --no-start`, summarized by the dispatcher's own functions.
fn profile(recipe: &Path, image: &Path, dir: &Path) -> Result<String> {
    // The dist binary is stripped; the release build has the same code with symbols.
    let root = crate::root();
    system::run(Command::new(env!("CARGO")).current_dir(&root).args([
        "build",
        "--quiet",
        "--release",
        "--bin",
        "provision-dispatcher",
    ]))?;
    let symbols = root.join("target/release/provision-dispatcher");
    let mut out = String::new();
    let fresh = tempfile_dir(dir)?;
    let runs: [(&str, Vec<String>); 2] = [
        ("check", vec!["check".into(), recipe.display().to_string()]),
        (
            "run --no-start",
            [
                "run",
                "--no-start",
                "--wait",
                "0",
                "--media",
                &image.display().to_string(),
                "--state-dir",
                &fresh.join("state").display().to_string(),
                "--output",
                &fresh.join("out").display().to_string(),
            ]
            .map(String::from)
            .to_vec(),
        ),
    ];
    for (name, args) in runs {
        let data = dir.join(format!("callgrind.{}.out", name.replace(' ', "-")));
        system::run(
            Command::new("valgrind")
                .args(["--tool=callgrind", "--quiet"])
                .arg(format!("--callgrind-out-file={}", data.display()))
                .arg(&symbols)
                .args(&args)
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
        )?;
        let annotated =
            system::output(Command::new("callgrind_annotate").args(["--inclusive=yes", "--threshold=100"]).arg(&data))?;
        let _ = writeln!(out, "\n`{name}` (callgrind, release build, inclusive instructions):\n\n```");
        let total = annotated.lines().find(|l| l.contains("PROGRAM TOTALS")).unwrap_or("").trim().to_owned();
        let _ = writeln!(out, "{total}");
        let interesting = [
            "provision_dispatcher::recipe::read::read_capped",
            "provision_dispatcher::recipe::read::parse",
            "provision_dispatcher::schema::Schema::from_bytes",
            "provision_dispatcher::schema::Schema::check",
            "provision_dispatcher::checks::static_checks",
            "provision_dispatcher::checks::host::check",
            "provision_dispatcher::report::Report::of_findings",
            "provision_dispatcher::recipe::position::positions",
            "provision_dispatcher::outputs::Outputs::write",
            "provision_dispatcher::media::mount::Mount::new",
            "provision_dispatcher::media::discover::find",
            "provision_dispatcher::log::init",
            "sha2::sha256::compress256",
        ];
        for line in annotated.lines() {
            if interesting.iter().any(|f| line.contains(&format!("{f} ")) || line.ends_with(f)) {
                let _ = writeln!(out, "{}", line.trim());
            }
        }
        let _ = writeln!(out, "```");
    }
    Ok(out)
}

/// Where the records written by hand start (the binary's breakdown, the image, the guest's
/// timings, fuzzing): `--write` keeps them.
const BY_HAND_HEADING: &str = "## The binary";

fn write_benchmarks(root: &Path, report: &str, profile: Option<&str>) -> Result<()> {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")?
        .lines()
        .find_map(|l| l.strip_prefix("model name").map(|m| m.trim_start_matches([' ', '\t', ':']).to_owned()))
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let kernel = system::output(Command::new("uname").arg("-r"))?.trim().to_owned();
    let date = system::output(Command::new("date").args(["-u", "+%Y-%m-%d"]))?.trim().to_owned();
    let mut text = format!(
        "# Benchmarks\n\nMeasured by `cargo xtask bench --write --profile` on {date}: {cpu}, {cores} cores, Linux {kernel}, \
         Debian 12.\nReproduce with the same command (it installs check-jsonschema and ajv-cli in \
         `~/.cache/provision-dispatcher/` and needs root for the loop device).\n\n\
         Every figure is one process from exec to exit, as a user runs it; the commands alternate \
         round by round so noise falls on all of them alike. `run` exits right after the StartUnit \
         reply (it writes status.json and returns), so its time bounds \"exec to StartUnit reply\" from \
         above. Its state and outputs go to a tmpfs, as /run is at boot. Its media is a squashfs image on a real loop device (this host's kernel has no ISO \
         9660; the mount path is the same) and systemd is the mock on a private dbus-daemon. \
         check-jsonschema and ajv-cli validate the same file against the canonical schema with its one \
         RE2-only pattern (`^(?i)(ef00|...)$`) spelled out case by case, since neither engine has \
         inline flags.\n\n"
    );
    text.push_str(report);
    if let Some(profile) = profile {
        text.push_str(
            "\n## Where the time goes\n\nInstructions counted by callgrind (repeatable, unlike timers), inclusive, for the \
             dispatcher's main steps. Under valgrind SHA-256 runs in software; natively the sha2 crate \
             detects and uses the CPU's SHA extensions, so the recipe digest (for the rerun rule) costs a \
             fraction of what it shows here. Reading the recipe (`parse`) and compiling the schema \
             (`from_bytes`) are the rest of the dispatcher's own work; the kernel's share of `run` \
             (loop device, mount, fsync) is not counted.\n",
        );
        text.push_str(profile);
    }
    // The records written by hand (cargo bloat, the image, the guest, fuzzing): keep them.
    let previous = std::fs::read_to_string(root.join("BENCHMARKS.md")).unwrap_or_default();
    if let Some(at) = previous.find(BY_HAND_HEADING) {
        text.push('\n');
        text.push_str(&previous[at..]);
    }
    std::fs::write(root.join("BENCHMARKS.md"), text)?;
    Ok(())
}
