//! `cargo xtask fuzz [--time SECS] [TARGET...]`: coverage-guided fuzzing of the targets in
//! `fuzz/` with cargo-fuzz and libFuzzer, one target after the other, and a one-line summary
//! of each run from libFuzzer's final stats. Fails when a target crashed, hung or ran out of
//! memory, naming the input that did it.
//!
//! cargo-fuzz needs `-Zsanitizer=address`; the stable compiler takes it with
//! `RUSTC_BOOTSTRAP=1` (it ships the ASan runtime), so no nightly toolchain is needed.

use std::fs::{self, File};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

use crate::system;

/// Every parser of untrusted bytes: the recipe reader with the checks and reports, the outputs
/// writer, the schema compiler (the ISO's schema), the volume-id reader (any block device),
/// the kernel command line (as the dispatcher reads it, and as the initrd's `/init` does), the
/// media's signatures and the image's trust file, the ISO 9660 reader (a task ISO read in user
/// space).
const TARGETS: [&str; 8] = [
    "reader_validator",
    "outputs_writer",
    "schema_compiler",
    "volume_id",
    "cmdline",
    "initrd_cmdline",
    "signature",
    "iso_reader",
];
const DEFAULT_SECS: u64 = 60;
/// Inputs grow at most to this, and larger seeds are left out: the payload-limit examples
/// (1 MiB) would slow every mutation a hundredfold, and the unit tests cover those limits.
const MAX_LEN: u64 = 64 * 1024;
/// One input taking longer than this is a hang, reported like a crash. Wall time: a niced
/// fuzzer starved by other work (VM boots beside it) once took 10 s over an input that runs in
/// 0.5 s alone, so the limit leaves room for starvation; a real hang still ends the run.
const TIMEOUT_SECS: u64 = 60;

pub fn run(args: &[String]) -> Result<()> {
    let (secs, targets) = parse_args(args)?;
    ensure_cargo_fuzz()?;
    let root = crate::root();
    let fuzz_dir = root.join("fuzz");
    let cargo_fuzz = |subcommand: &str| {
        let mut cmd = Command::new("cargo");
        cmd.current_dir(&root).env("RUSTC_BOOTSTRAP", "1").args(["fuzz", subcommand, "--fuzz-dir", "fuzz", "-a"]);
        if system::has("rustup") {
            cmd.env("RUSTUP_TOOLCHAIN", "stable");
        }
        cmd
    };
    // Every target at once: they share all but their last compilation unit.
    system::run(&mut cargo_fuzz("build"))?;

    let mut crashed = Vec::new();
    for target in &targets {
        let corpus = seed(&root, &fuzz_dir, target)?;
        let log = fuzz_dir.join("target").join(format!("{target}.log"));
        println!("fuzz: {target} for {secs} s (libFuzzer output in {})", log.display());
        let mut cmd = cargo_fuzz("run");
        cmd.arg(target).arg(&corpus).arg("--").args([
            format!("-max_total_time={secs}"),
            format!("-max_len={MAX_LEN}"),
            format!("-timeout={TIMEOUT_SECS}"),
            "-print_final_stats=1".to_owned(),
        ]);
        if let Some(dict) = dictionary(target) {
            cmd.arg(format!("-dict={}", fuzz_dir.join(dict).display()));
        }
        let (ok, stats) = run_logged(&mut cmd, &log)?;
        println!("fuzz: {target}: {}", stats.summary());
        if !ok {
            let input = stats.artifact.as_deref().unwrap_or("(none written; see the log)");
            println!("fuzz: {target} FAILED on {input}");
            println!("      reproduce: RUSTC_BOOTSTRAP=1 cargo fuzz run -a {target} {input}");
            crashed.push(target.clone());
        }
    }
    if !crashed.is_empty() {
        bail!("fuzz targets failed: {}", crashed.join(", "));
    }
    Ok(())
}

fn parse_args(args: &[String]) -> Result<(u64, Vec<String>)> {
    let usage = || format!("usage: cargo xtask fuzz [--time SECS] [{}]...", TARGETS.join("|"));
    let mut secs = DEFAULT_SECS;
    let mut targets = Vec::new();
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--time" => secs = args.next().and_then(|n| n.parse().ok()).with_context(usage)?,
            target if TARGETS.contains(&target) => targets.push(target.to_owned()),
            other => bail!("unknown argument '{other}'\n{}", usage()),
        }
    }
    if targets.is_empty() {
        targets = TARGETS.iter().map(|t| (*t).to_owned()).collect();
    }
    Ok((secs, targets))
}

fn ensure_cargo_fuzz() -> Result<()> {
    let present = Command::new("cargo")
        .args(["fuzz", "--version"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !present {
        eprintln!("xtask: installing cargo-fuzz");
        system::run(Command::new("cargo").args(["install", "cargo-fuzz", "--locked"]))?;
    }
    Ok(())
}

/// The words a target's inputs are made of, for libFuzzer to splice in.
fn dictionary(target: &str) -> Option<&'static str> {
    match target {
        "reader_validator" | "outputs_writer" => Some("recipe.dict"),
        "schema_compiler" => Some("schema.dict"),
        "iso_reader" => Some("iso.dict"),
        _ => None,
    }
}

/// Seeds of the signature target: a trust file, NUL, a signature of the target's content by
/// the test-only key (unbound, bound to the target's machine, and by a key restricted to
/// bound recipes), as `ssh-keygen -Y sign` makes them.
fn signature_seeds(root: &Path) -> Result<Vec<(String, Vec<u8>)>> {
    const CONTENT: &[u8] = b"{\"task_target\": \"FUZZMARK.target\"}\n";
    const THIS: &str = "4c4c4544-0042-3510-8052-b4c04f4d4e31";
    let key = root.join("tests/keys/test-only-trusted");
    let public = fs::read_to_string(key.with_extension("pub"))?;
    let public: Vec<&str> = public.split_whitespace().take(2).collect();
    let dir = std::env::temp_dir().join(format!("xtask-fuzz-seeds-{}", std::process::id()));
    fs::create_dir_all(&dir)?;
    let file = dir.join("recipe.json");
    fs::write(&file, CONTENT)?;
    let mut seeds = vec![];
    for (name, bind, options) in [
        ("seed-unbound", None, ""),
        ("seed-bound", Some(THIS), ""),
        ("seed-bound-only", Some(THIS), "namespaces=\"provision-dispatcher@*\" "),
    ] {
        let signing = crate::iso::Signing { key: key.clone(), bind: bind.map(str::to_owned) };
        signing.sign(std::slice::from_ref(&file))?;
        let mut seed = format!("# seed\nfuzz@example.invalid {options}{}\n", public.join(" ")).into_bytes();
        seed.push(0);
        seed.extend(fs::read(dir.join("recipe.json.sig"))?);
        seeds.push((name.to_owned(), seed));
    }
    fs::remove_dir_all(&dir)?;
    Ok(seeds)
}

/// `fuzz/corpus/TARGET`, seeded: the recipes of `iso/examples` (not their sidecars) for the
/// recipe targets, every schema of the repository for the schema compiler, the heads of an
/// ISO 9660 image and of FAT boot sectors for the volume-id reader, trust files with real
/// signatures (made with the test-only key) for the signature check. The corpus is committed
/// (minimized with `cargo fuzz cmin`), so fuzzing time adds up across machines.
fn seed(root: &Path, fuzz_dir: &Path, target: &str) -> Result<PathBuf> {
    let corpus = fuzz_dir.join("corpus").join(target);
    fs::create_dir_all(&corpus)?;
    let copy = |path: &Path, name: String| -> Result<()> {
        if fs::metadata(path)?.len() <= MAX_LEN {
            fs::copy(path, corpus.join(name)).with_context(|| format!("cannot seed {}", path.display()))?;
        }
        Ok(())
    };
    match target {
        "schema_compiler" => {
            for name in ["recipe.schema.json", "seed-002.schema.json"] {
                copy(&root.join("iso").join(name), format!("seed-{name}"))?;
            }
            for entry in fs::read_dir(root.join("tests/vm-cases"))? {
                let schema = entry?.path().join("recipe.schema.json");
                if schema.is_file() {
                    let case = schema.parent().and_then(Path::file_name).unwrap_or_default().to_string_lossy();
                    copy(&schema, format!("seed-{case}.schema.json"))?;
                }
            }
        }
        "volume_id" => {
            for (name, bytes) in volume_seeds() {
                fs::write(corpus.join(name), bytes)?;
            }
        }
        // Their seeds are in the committed corpus.
        "cmdline" | "initrd_cmdline" => {}
        "signature" => {
            for (name, bytes) in signature_seeds(root)? {
                fs::write(corpus.join(name), bytes)?;
            }
        }
        "iso_reader" => {
            for (name, bytes) in iso_seeds(root)? {
                fs::write(corpus.join(name), bytes)?;
            }
        }
        _ => {
            for entry in fs::read_dir(root.join("iso/examples"))? {
                let path = entry?.path();
                let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_owned();
                if name.ends_with(".json") && !name.ends_with(".expect.json") {
                    copy(&path, name)?;
                }
            }
        }
    }
    Ok(corpus)
}

/// Task ISOs as `media build` writes them (seed Linux, signed or not) and as the tests' writer
/// writes hostile ones (a link and a directory named recipe.json), each without its 150 sectors
/// of padding, so that it fits the inputs' length.
fn iso_seeds(root: &Path) -> Result<Vec<(String, Vec<u8>)>> {
    use crate::iso::{self, Entry, Schema, Signing};
    let dir = std::env::temp_dir().join(format!("xtask-fuzz-iso-seeds-{}", std::process::id()));
    fs::create_dir_all(&dir)?;
    let recipe = root.join("iso/examples/seed-linux.json");
    let schema = root.join("iso/recipe.schema.json");
    let signing = Signing { key: root.join("tests/keys/test-only-trusted"), bind: None };
    let path = |name: &str| dir.join(format!("{name}.iso"));
    iso::build(&recipe, Schema::Version(1), None, &path("seed-task"))?.written()?;
    iso::build(&recipe, Schema::Version(1), Some(&signing), &path("seed-task-signed"))?.written()?;
    let schema_entry = || Entry::File("recipe.schema.json".into(), schema.clone());
    let link = Entry::Symlink("recipe.json".into(), "/etc/hostname".into());
    iso::unchecked("TASK", &[schema_entry(), link], &path("seed-link"))?;
    let directory = Entry::Dir("recipe.json".into(), "recipe.json".into(), recipe.clone());
    iso::unchecked("TASK", &[schema_entry(), directory], &path("seed-directory"))?;
    let mut seeds = Vec::new();
    for name in ["seed-task", "seed-task-signed", "seed-link", "seed-directory"] {
        let mut bytes = fs::read(path(name))?;
        bytes.truncate(bytes.len().saturating_sub(150 * 2048));
        if bytes.len() as u64 <= MAX_LEN {
            seeds.push((name.to_owned(), bytes));
        }
    }
    fs::remove_dir_all(&dir)?;
    Ok(seeds)
}

/// Device heads the volume-id reader knows: an ISO 9660 image's descriptors (volume id TASK),
/// FAT16 and FAT32 boot sectors (label TASK), a squashfs superblock.
fn volume_seeds() -> Vec<(&'static str, Vec<u8>)> {
    let mut iso = vec![0u8; 18 * 2048];
    let pvd = &mut iso[16 * 2048..17 * 2048];
    pvd[0] = 1;
    pvd[1..6].copy_from_slice(b"CD001");
    pvd[6] = 1;
    pvd[40..72].fill(b' ');
    pvd[40..44].copy_from_slice(b"TASK");
    iso[17 * 2048] = 255;
    iso[17 * 2048 + 1..17 * 2048 + 6].copy_from_slice(b"CD001");
    let fat = |kind: &[u8; 8], signature: usize, label: usize, kind_at: usize| {
        let mut boot = vec![0u8; 512];
        boot[510..].copy_from_slice(&[0x55, 0xAA]);
        boot[signature] = 0x29;
        boot[label..label + 11].copy_from_slice(b"TASK       ");
        boot[kind_at..kind_at + 8].copy_from_slice(kind);
        boot
    };
    vec![
        ("iso9660-task", iso),
        ("fat16-task", fat(b"FAT16   ", 0x26, 0x2B, 0x36)),
        ("fat32-task", fat(b"FAT32   ", 0x42, 0x47, 0x52)),
        ("squashfs", b"hsqs\x00\x00\x00\x00".to_vec()),
    ]
}

/// What libFuzzer said at the end of a run.
#[derive(Debug, Default, PartialEq)]
struct Stats {
    execs: Option<u64>,
    execs_per_sec: Option<u64>,
    cov: Option<u64>,
    ft: Option<u64>,
    corpus: Option<String>,
    secs: Option<u64>,
    peak_rss_mb: Option<u64>,
    artifact: Option<String>,
}

impl Stats {
    fn read(&mut self, line: &str) {
        let stat = |name: &str| line.strip_prefix(name).and_then(|v| v.trim().parse().ok());
        if line.starts_with('#') && line.contains(" cov: ") {
            self.cov = field(line, "cov:").and_then(|v| v.parse().ok());
            self.ft = field(line, "ft:").and_then(|v| v.parse().ok());
            self.corpus = field(line, "corp:").map(str::to_owned);
        } else if let Some(n) = stat("stat::number_of_executed_units:") {
            self.execs = Some(n);
        } else if let Some(n) = stat("stat::average_exec_per_sec:") {
            self.execs_per_sec = Some(n);
        } else if let Some(n) = stat("stat::peak_rss_mb:") {
            self.peak_rss_mb = Some(n);
        } else if let Some(rest) = line.strip_prefix("Done ") {
            self.secs = rest.split(" in ").nth(1).and_then(|s| s.split(' ').next()).and_then(|s| s.parse().ok());
        } else if let Some((_, path)) = line.split_once("Test unit written to ") {
            self.artifact = Some(path.trim().to_owned());
        }
    }

    fn summary(&self) -> String {
        let show = |v: Option<u64>| v.map_or("?".to_owned(), |v| v.to_string());
        format!(
            "{} execs in {} s, {} exec/s, cov: {} ft: {}, corpus {} (inputs/bytes), peak RSS {} MB",
            show(self.execs),
            show(self.secs),
            show(self.execs_per_sec),
            show(self.cov),
            show(self.ft),
            self.corpus.as_deref().unwrap_or("?"),
            show(self.peak_rss_mb),
        )
    }
}

/// The word after `name` in a libFuzzer status line (`#1024 NEW cov: 11596 ft: 22424 ...`).
fn field<'l>(line: &'l str, name: &str) -> Option<&'l str> {
    let mut words = line.split_whitespace();
    words.find(|w| *w == name)?;
    words.next()
}

/// Runs `cmd` with its stderr and stdout in `log`, reading libFuzzer's stats as they pass.
fn run_logged(cmd: &mut Command, log: &Path) -> Result<(bool, Stats)> {
    fs::create_dir_all(log.parent().expect("the log is in a directory"))?;
    let mut file = File::create(log).with_context(|| format!("cannot create {}", log.display()))?;
    let stdout = file.try_clone()?;
    let mut child = cmd
        .stdout(stdout)
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot start {}", system::describe(cmd)))?;
    let mut stats = Stats::default();
    for line in BufReader::new(child.stderr.take().expect("piped")).lines() {
        let line = line?;
        writeln!(file, "{line}")?;
        stats.read(&line);
    }
    Ok((child.wait()?.success(), stats))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The signature target starts from signatures `ssh-keygen -Y verify` accepts.
    #[test]
    fn signature_seeds_are_good_signatures() {
        let seeds = signature_seeds(&crate::root()).unwrap();
        let dir = std::env::temp_dir().join(format!("xtask-fuzz-seed-check-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("content"), b"{\"task_target\": \"FUZZMARK.target\"}\n").unwrap();
        for (name, seed) in &seeds {
            let split = seed.iter().position(|&b| b == 0).unwrap();
            fs::write(dir.join("allowed_signers"), &seed[..split]).unwrap();
            fs::write(dir.join("sig"), &seed[split + 1..]).unwrap();
            let namespace = match name.as_str() {
                "seed-unbound" => "provision-dispatcher",
                _ => "provision-dispatcher@4c4c4544-0042-3510-8052-b4c04f4d4e31",
            };
            let verified = std::process::Command::new("ssh-keygen")
                .args(["-Y", "verify", "-I", "fuzz@example.invalid", "-n", namespace, "-f"])
                .arg(dir.join("allowed_signers"))
                .arg("-s")
                .arg(dir.join("sig"))
                .stdin(fs::File::open(dir.join("content")).unwrap())
                .output()
                .unwrap();
            assert!(verified.status.success(), "{name}: {}", String::from_utf8_lossy(&verified.stderr));
        }
        fs::remove_dir_all(&dir).unwrap();
        assert_eq!(seeds.len(), 3);
    }

    #[test]
    fn final_stats_are_read_from_libfuzzer_output() {
        let mut stats = Stats::default();
        for line in [
            "#30563\tREDUCE cov: 11500 ft: 22000 corp: 700/400Kb lim: 6994 exec/s: 3395 rss: 487Mb",
            "#30761\tDONE   cov: 11596 ft: 22430 corp: 782/415Kb lim: 6994 exec/s: 3417 rss: 641Mb",
            "Done 30761 runs in 91 second(s)",
            "stat::number_of_executed_units: 30761",
            "stat::average_exec_per_sec:     3417",
            "stat::peak_rss_mb:              641",
        ] {
            stats.read(line);
        }
        assert_eq!(
            stats.summary(),
            "30761 execs in 91 s, 3417 exec/s, cov: 11596 ft: 22430, corpus 782/415Kb (inputs/bytes), peak RSS 641 MB"
        );
        stats.read("artifact_prefix='/r/fuzz/artifacts/t/'; Test unit written to /r/fuzz/artifacts/t/crash-532e");
        assert_eq!(stats.artifact.as_deref(), Some("/r/fuzz/artifacts/t/crash-532e"));
    }
}
