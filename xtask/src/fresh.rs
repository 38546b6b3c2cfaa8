//! `cargo xtask fresh-check [--busy] [--keep] [TASK]...`: the README's two commands on a machine
//! that has nothing yet, measured. A green run on a machine that already has the tools hides a
//! missing install step; this starts from a clean Debian 12 root instead:
//!
//! - made by mmdebstrap (`minbase`: Essential, `required`, apt) with build-essential, git,
//!   curl and ca-certificates, as a fresh machine has, the machine's own certificate
//!   authorities, and an empty cache;
//! - a copy of the host's Rust toolchain holding the host's target only, as rustup leaves a
//!   fresh install;
//! - a clean clone of this repository's HEAD (what is committed, as CI sees it);
//! - `/dev`, `/proc` and `/sys` of the host, so loop devices and binfmt_misc are shared, in a
//!   mount namespace of its own, so nothing stays mounted when it ends.
//!
//! Each TASK (default: `demo`, then `ci`) runs in it with `CI=true` and no input, one after
//! the other on the same root, and its time is printed and appended to
//! `target/fresh-check/times.txt`. `--busy` keeps one CPU-bound process running beside them
//! throughout (the load of issue 20's measurement); `--keep` leaves the root for a look.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context, Result};

use crate::needs::{self, Need};
use crate::system;

const PACKAGES: &str = "build-essential,git,curl,ca-certificates";

/// Inside a new mount namespace: the host's devices and kernel interfaces, name resolution;
/// then the task in the root, from the clone, with the environment CI gives (`$1` root, `$2`
/// the task).
const ENTER: &str = r#"set -eu
root=$1 task=$2
# The root a mount point of its own, as a machine's is (unshare --propagation needs one).
mount --bind "$root" "$root"
for fs in dev proc sys; do mount --rbind "/$fs" "$root/$fs"; mount --make-rslave "$root/$fs"; done
cp -L /etc/resolv.conf "$root/etc/resolv.conf"
exec chroot "$root" /usr/bin/env -i HOME=/root CI=true TERM=dumb LANG=C.UTF-8 \
    PATH=/root/.cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    sh -c 'cd /root/provision-dispatcher && exec cargo xtask "$0"' "$task" </dev/null
"#;

pub fn run(args: &[String]) -> Result<()> {
    let mut busy = false;
    let mut keep = false;
    let mut tasks = vec![];
    for arg in args {
        match arg.as_str() {
            "--busy" => busy = true,
            "--keep" => keep = true,
            task if !task.starts_with('-') => tasks.push(task.to_owned()),
            other => bail!("fresh-check: unexpected argument '{other}'\nusage: cargo xtask fresh-check [--busy] [--keep] [TASK]..."),
        }
    }
    if tasks.is_empty() {
        tasks = vec!["demo".into(), "ci".into()];
    }
    needs::ensure(Need::FreshRoot, "a clean Debian root")?;
    let work = crate::root().join("target/fresh-check");
    let root = work.join("root");
    clear(&work)?;
    std::fs::create_dir_all(&work)?;
    let started = Instant::now();
    make_root(&root)?;
    let mut times = vec![format!("root (mmdebstrap, toolchain, clone) {:.0?}", started.elapsed())];
    let _load = busy.then(Busy::start).transpose()?;
    let mut failed = None;
    for task in &tasks {
        let started = Instant::now();
        println!(
            "fresh-check: cargo xtask {task} in the clean root{}",
            if busy { ", one busy process beside it" } else { "" }
        );
        let status = Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sh", "-c", ENTER, "fresh-check"])
            .arg(&root)
            .arg(task)
            .status()
            .context("cannot start unshare")?;
        let line =
            format!("{task} {} in {:.0?}", if status.success() { "passed" } else { "FAILED" }, started.elapsed());
        println!("fresh-check: {line}");
        times.push(line);
        if !status.success() {
            failed = Some(task.clone());
            break;
        }
    }
    let summary = format!(
        "# {} fresh-check{} of {}\n{}\n",
        system::output(Command::new("date").arg("--iso-8601=seconds"))?.trim(),
        if busy { " --busy" } else { "" },
        system::output(Command::new("git").args(["rev-parse", "--short", "HEAD"]).current_dir(crate::root()))?.trim(),
        times.join("\n")
    );
    print!("{summary}");
    let log = work.join("times.txt");
    let before = std::fs::read_to_string(&log).unwrap_or_default();
    std::fs::write(&log, before + &summary)?;
    if !keep {
        clear_root(&root)?;
    }
    match failed {
        Some(task) => bail!("cargo xtask {task} failed in the clean root"),
        None => Ok(()),
    }
}

/// The clean root: mmdebstrap, the toolchain's binaries (the toolchain itself is an overlay
/// at each task), only the host's target, and a clone of HEAD.
fn make_root(root: &Path) -> Result<()> {
    println!("fresh-check: a clean Debian 12 root with {PACKAGES} (mmdebstrap)");
    system::run(
        Command::new("mmdebstrap")
            .args(["--quiet", "--variant=minbase", &format!("--include={PACKAGES}"), "bookworm"])
            .arg(root)
            .stdin(Stdio::null()),
    )?;
    // The machine's own certificate authorities (a fresh machine of this kind has them: the
    // package registries are reached through them).
    let local_cas = Path::new("/usr/local/share/ca-certificates");
    if local_cas.is_dir() {
        system::run(Command::new("cp").arg("-a").arg(local_cas).arg(root.join("usr/local/share")))?;
        system::run(
            Command::new("chroot").arg(root).args(["update-ca-certificates", "--fresh"]).stdout(Stdio::null()),
        )?;
    }
    let home = root.join("root");
    std::fs::create_dir_all(home.join(".cargo"))?;
    let cargo_home = std::env::var_os("CARGO_HOME").map(PathBuf::from).unwrap_or_else(|| home_dir().join(".cargo"));
    system::run(Command::new("cp").arg("-a").arg(cargo_home.join("bin")).arg(home.join(".cargo")))?;
    system::run(
        Command::new("git")
            .args(["clone", "--quiet", "--no-local"])
            .arg(crate::root())
            .arg(home.join("provision-dispatcher")),
    )?;
    // The toolchain, copied (rustup renames directories, which an overlay refuses). The host
    // may have added targets (aarch64, musl); a fresh rustup has only its own.
    system::run(Command::new("cp").arg("-a").arg(rustup_home()).arg(home.join(".rustup")))?;
    let host = system::output(Command::new("rustc").arg("-vV"))?;
    let host = host.lines().find_map(|l| l.strip_prefix("host: ")).context("rustc -vV names no host")?.to_owned();
    let installed = system::output(Command::new("rustup").args(["target", "list", "--installed"]))?;
    let extra: Vec<&str> = installed.lines().map(str::trim).filter(|t| !t.is_empty() && *t != host).collect();
    if !extra.is_empty() {
        let script =
            format!("{ENTER_TOOLCHAIN}\nexec chroot \"$1\" /root/.cargo/bin/rustup target remove {}", extra.join(" "));
        system::run(
            Command::new("unshare")
                .args(["--mount", "--propagation", "private", "sh", "-c", &script, "fresh-check"])
                .arg(root)
                .env("RUSTUP_HOME", "/root/.rustup"),
        )?;
    }
    Ok(())
}

/// `/proc` for rustup in the root (before any task runs).
const ENTER_TOOLCHAIN: &str = r#"set -eu
mount -t proc proc "$1/proc""#;

fn home_dir() -> PathBuf {
    PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/root".into()))
}

fn rustup_home() -> PathBuf {
    std::env::var_os("RUSTUP_HOME").map(PathBuf::from).unwrap_or_else(|| home_dir().join(".rustup"))
}

/// Removes a previous run's work directory, after making sure nothing is mounted in it (a
/// run killed mid-way leaves its namespace's mounts with its namespace, but be sure).
fn clear(work: &Path) -> Result<()> {
    if work.exists() {
        clear_root(&work.join("root"))?;
        std::fs::remove_dir_all(work).with_context(|| format!("remove {}", work.display()))?;
    }
    Ok(())
}

fn clear_root(root: &Path) -> Result<()> {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo")?;
    let prefix = root.display().to_string();
    if mounts.lines().any(|l| l.split(' ').nth(4).is_some_and(|m| m.starts_with(&prefix))) {
        bail!("{} still has mounts; unmount them first (umount -R)", root.display());
    }
    if root.exists() {
        std::fs::remove_dir_all(root).with_context(|| format!("remove {}", root.display()))?;
    }
    Ok(())
}

/// One CPU-bound process, ended when dropped.
struct Busy(Child);

impl Busy {
    fn start() -> Result<Busy> {
        let child =
            Command::new("sh").args(["-c", "while :; do :; done"]).spawn().context("cannot start the busy process")?;
        Ok(Busy(child))
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
