//! What the build machine has: running commands, and installing the Debian packages a task
//! needs when they are missing (CI starts from a fresh machine).

use std::ffi::OsStr;
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

/// Runs a command, inheriting stdio; fails unless it exits 0.
pub fn run(cmd: &mut Command) -> Result<()> {
    let status = cmd.status().with_context(|| format!("cannot start {}", describe(cmd)))?;
    if !status.success() {
        bail!("{} failed: {status}", describe(cmd));
    }
    Ok(())
}

/// Runs a command and returns its stdout; fails unless it exits 0.
pub fn output(cmd: &mut Command) -> Result<String> {
    let out = cmd.stderr(Stdio::inherit()).output().with_context(|| format!("cannot start {}", describe(cmd)))?;
    if !out.status.success() {
        bail!("{} failed: {}", describe(cmd), out.status);
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

pub fn describe(cmd: &Command) -> String {
    let mut text = cmd.get_program().to_string_lossy().into_owned();
    for arg in cmd.get_args() {
        text.push(' ');
        text.push_str(&arg.to_string_lossy());
    }
    text
}

/// Whether `program` is on PATH (an absolute path: whether that file exists).
pub fn has(program: impl AsRef<OsStr>) -> bool {
    let program = program.as_ref();
    if std::path::Path::new(program).is_absolute() {
        return std::path::Path::new(program).is_file();
    }
    std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).any(|dir| dir.join(program).is_file()))
        .unwrap_or(false)
}

/// Installs the Debian packages whose commands are missing (`(command, package)` pairs),
/// saying which and what for before apt runs. Installing is explicit: only here.
pub fn ensure_commands(purpose: &str, pairs: &[(&str, &str)]) -> Result<()> {
    // One look and install at a time: `ci` builds the arm64 base on a thread of its own, and
    // dpkg's lock would refuse a second apt.
    static APT: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _apt = APT.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let missing: Vec<&str> = pairs.iter().filter(|(cmd, _)| !has(cmd)).map(|(_, pkg)| *pkg).collect();
    if missing.is_empty() {
        return Ok(());
    }
    eprintln!("xtask: installing the Debian package(s) {} with apt-get, for {purpose}", missing.join(" "));
    apt_install(&missing)
}

fn apt_install(packages: &[&str]) -> Result<()> {
    let quiet = |cmd: &mut Command| {
        cmd.env("DEBIAN_FRONTEND", "noninteractive").stdout(Stdio::null());
    };
    let mut update = Command::new("apt-get");
    update.args(["-q", "update"]);
    quiet(&mut update);
    run(&mut update)?;
    let mut install = Command::new("apt-get");
    install.args(["-q", "-y", "--no-install-recommends", "install"]).args(packages);
    quiet(&mut install);
    run(&mut install)
}

/// The SHA-256 of a file, in lower-case hex (`sha256sum`, from coreutils).
pub fn sha256_hex(path: &std::path::Path) -> Result<String> {
    let out = output(Command::new("sha256sum").arg(path))?;
    out.split_whitespace().next().map(str::to_owned).with_context(|| format!("sha256sum {}", path.display()))
}

/// FNV-1a, 64 bits: stable across Rust versions (unlike `DefaultHasher`), enough for a cache
/// key.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}
