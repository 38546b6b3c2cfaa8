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

/// How a command run with a deadline ended.
pub enum Ended {
    Exited,
    /// Past the deadline: it and every process it started (its process group) were killed.
    Killed,
}

/// Runs a command, inheriting stdio, in a process group of its own; kills the group once
/// `deadline` has passed. Fails unless it exits 0 or is killed.
pub fn run_with_deadline(cmd: &mut Command, deadline: std::time::Duration) -> Result<Ended> {
    use std::os::unix::process::CommandExt;
    let started = std::time::Instant::now();
    let mut child = cmd.process_group(0).spawn().with_context(|| format!("cannot start {}", describe(cmd)))?;
    loop {
        if let Some(status) = child.try_wait()? {
            if !status.success() {
                bail!("{} failed: {status}", describe(cmd));
            }
            return Ok(Ended::Exited);
        }
        if started.elapsed() > deadline {
            // SAFETY: kill(2) on the group this function created; no memory is involved.
            unsafe { libc::kill(-(child.id() as libc::pid_t), libc::SIGKILL) };
            child.wait()?;
            return Ok(Ended::Killed);
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
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

/// The SHA-256 of `bytes`, in lower-case hex (`sha256sum` reading them on its stdin).
pub fn sha256_hex_of(bytes: &[u8]) -> Result<String> {
    use std::io::Write;
    let mut child = Command::new("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .context("cannot start sha256sum")?;
    child.stdin.take().context("sha256sum's stdin")?.write_all(bytes)?;
    let out = child.wait_with_output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.split_whitespace().next().filter(|_| out.status.success()).map(str::to_owned).context("sha256sum failed")
}

/// FNV-1a, 64 bits: stable across Rust versions (unlike `DefaultHasher`), enough for a cache
/// key.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn a_command_past_its_deadline_is_killed_with_what_it_started() {
        let dir = std::env::temp_dir().join(format!("xtask-deadline-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let pid_file = dir.join("pid");
        let script = format!("sleep 30 & echo $! > {}; wait", pid_file.display());
        let started = Instant::now();
        let ended = run_with_deadline(Command::new("sh").args(["-c", &script]), Duration::from_secs(1));
        assert!(matches!(ended, Ok(Ended::Killed)));
        assert!(started.elapsed() < Duration::from_secs(20));
        // The shell's own child went with it: gone, or a zombie waiting for its new parent.
        let pid = std::fs::read_to_string(&pid_file).unwrap();
        std::thread::sleep(Duration::from_millis(200));
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", pid.trim())).unwrap_or_default();
        assert!(stat.is_empty() || stat.contains(") Z "), "still running: {stat}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_command_within_its_deadline_is_judged_by_its_exit() {
        assert!(matches!(run_with_deadline(&mut Command::new("true"), Duration::from_secs(60)), Ok(Ended::Exited)));
        let failed = run_with_deadline(&mut Command::new("false"), Duration::from_secs(60));
        assert!(failed.is_err_and(|e| e.to_string().contains("false failed")));
    }
}
