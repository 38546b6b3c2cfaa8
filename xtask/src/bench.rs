//! `cargo xtask bench`: the budgets of SPEC §9 measured side by side in one run, as ratios.
//! Process-level: each tool is a separate process per run, as a user would run it; runs
//! alternate between tools so that machine noise falls on all of them alike.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::json;

use crate::system;

/// `check` must be at least this many times faster than check-jsonschema (SPEC §9).
const MIN_SPEEDUP: f64 = 20.0;
/// Peak resident memory budget of the dispatcher.
const MAX_RSS_KIB: u64 = 16 * 1024;

pub fn run(args: &[String]) -> Result<()> {
    let rounds: usize = match args {
        [] => 21,
        [flag, n] if flag == "--rounds" => n.parse().context("--rounds takes a number")?,
        _ => bail!("usage: cargo xtask bench [--rounds N]"),
    };
    let binary = crate::dist::run()?;
    let dir = crate::root().join("target/bench");
    std::fs::create_dir_all(&dir)?;
    let recipe = dir.join("maximal.json");
    std::fs::write(&recipe, maximal_recipe())?;
    let invalid = dir.join("maximal-invalid.json");
    std::fs::write(&invalid, maximal_recipe().replacen("\"/dev/sda\"", "\"sda\"", 1))?;
    let equivalent = dir.join("equivalent.schema.json");
    std::fs::write(&equivalent, equivalent_schema()?)?;
    let tools = tools(&binary, &equivalent)?;

    // Every tool must agree on both files, or the timings compare different work.
    for tool in &tools {
        for (file, valid) in [(&recipe, true), (&invalid, false)] {
            let ok = tool.command(file).stdout(Stdio::null()).stderr(Stdio::null()).status()?.success();
            if ok != valid {
                bail!("{} says {} for {}", tool.name, if ok { "valid" } else { "invalid" }, file.display());
            }
        }
    }

    let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); tools.len()];
    for round in 0..rounds {
        // Rotate the order each round.
        for i in 0..tools.len() {
            let t = (i + round) % tools.len();
            samples[t].push(measure(&mut tools[t].command(&recipe))?);
        }
    }
    let size = std::fs::metadata(&binary)?.len();
    println!(
        "\ncheck of a maximal recipe ({} bytes: 1 MiB user_data, 64 partitions), {rounds} alternating runs each:",
        std::fs::metadata(&recipe)?.len()
    );
    println!("  {:<34} {:>12} {:>12} {:>10}", "tool", "median", "peak RSS", "vs check");
    let ours = median(&samples[0]);
    for (tool, runs) in tools.iter().zip(&samples) {
        let m = median(runs);
        let rss = runs.iter().map(|s| s.max_rss_kib).max().unwrap_or(0);
        println!("  {:<34} {:>10.2}ms {:>9} KiB {:>9.1}x", tool.name, ms(m), rss, m.as_secs_f64() / ours.as_secs_f64());
    }
    println!("  dist binary: {size} bytes ({:.2} MiB)", size as f64 / 1048576.0);
    let speedup = median(&samples[1]).as_secs_f64() / ours.as_secs_f64();
    let our_rss = samples[0].iter().map(|s| s.max_rss_kib).max().unwrap_or(0);
    let mut failed = Vec::new();
    if speedup < MIN_SPEEDUP {
        failed.push(format!("check is only {speedup:.1}x faster than check-jsonschema (budget {MIN_SPEEDUP}x)"));
    }
    if our_rss > MAX_RSS_KIB {
        failed.push(format!("check peaked at {our_rss} KiB (budget {MAX_RSS_KIB} KiB)"));
    }
    if !failed.is_empty() {
        bail!("over budget: {}", failed.join("; "));
    }
    println!("budgets met: check {speedup:.0}x faster than check-jsonschema (>= {MIN_SPEEDUP}x), peak RSS {our_rss} KiB (< {MAX_RSS_KIB} KiB)");
    Ok(())
}

struct Tool {
    name: &'static str,
    program: PathBuf,
    args: Vec<String>,
}

impl Tool {
    fn command(&self, recipe: &Path) -> Command {
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.args).arg(recipe).stdout(Stdio::null());
        cmd
    }
}

/// The dispatcher first (the baseline), then the alternatives, installed in the cache when
/// missing: check-jsonschema from PyPI in a venv, ajv-cli from npm.
fn tools(binary: &Path, equivalent: &Path) -> Result<Vec<Tool>> {
    let cache = crate::cache_dir();
    let venv = cache.join("bench-venv");
    if !venv.join("bin/check-jsonschema").exists() {
        system::run(Command::new("python3").args(["-m", "venv"]).arg(&venv))?;
        system::run(Command::new(venv.join("bin/pip")).args(["install", "--quiet", "check-jsonschema==0.39.0"]))?;
    }
    let npm = cache.join("bench-npm");
    if !npm.join("node_modules/.bin/ajv").exists() {
        system::ensure_commands(&[("npm", "npm")])?;
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
        Tool { name: "provision-dispatcher check", program: binary.to_owned(), args: vec!["check".into()] },
        Tool {
            name: "check-jsonschema 0.39 (Python)",
            program: venv.join("bin/check-jsonschema"),
            args: vec!["--schemafile".into(), schema.clone()],
        },
        Tool {
            name: "ajv-cli 5 (Node.js)",
            program: npm.join("node_modules/.bin/ajv"),
            args: ["validate", "--spec=draft7", "--strict=false", "-c", "ajv-formats", "-s", &schema, "-d"]
                .map(String::from)
                .to_vec(),
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
pub fn maximal_recipe() -> String {
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
        "target_disk": "/dev/sda",
        "oci_url": "controller.internal:8080/os-images/ubuntu-rootfs:22.04",
        "recipe_version": "2025.11",
        "user_data": user_data,
        "partition_layout": partitions,
        "metadata": {"ticket": "INC-12345", "owner": "ops@example.com"},
    });
    serde_json::to_string_pretty(&recipe).expect("serializes")
}

#[derive(Debug, Clone, Copy)]
struct Sample {
    wall: Duration,
    max_rss_kib: u64,
}

/// Runs a command to completion and returns its wall time and peak RSS (from wait4).
fn measure(cmd: &mut Command) -> Result<Sample> {
    let started = Instant::now();
    let child = cmd.spawn().with_context(|| system::describe(cmd))?;
    let mut status = 0;
    // SAFETY: an all-zero rusage is valid; wait4 reaps the child we just spawned.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let pid = unsafe { libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut usage) };
    let wall = started.elapsed();
    if pid < 0 {
        bail!("wait4: {}", std::io::Error::last_os_error());
    }
    if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        bail!("{} failed during the benchmark", system::describe(cmd));
    }
    Ok(Sample { wall, max_rss_kib: usage.ru_maxrss as u64 })
}

fn median(samples: &[Sample]) -> Duration {
    let mut walls: Vec<Duration> = samples.iter().map(|s| s.wall).collect();
    walls.sort();
    walls[walls.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
