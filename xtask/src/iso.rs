//! Task ISOs for the tests and the demo, made as users make them: `cargo xtask iso ARGS` is
//! `provision-dispatcher media build ARGS` of the shipped binary (`cargo xtask dist`'s), and
//! [`build`] runs it for the VM cases and the demo; [`embed`] writes one into the image's task
//! area (`media embed`). Media that `media build` refuses to make
//! (an invalid recipe for a case that expects the boot to refuse it, a link or a directory
//! where a file belongs, a recipe changed after signing) are written by [`unchecked`]: the
//! tests' rig `examples/task-media.rs`, over the same ISO writer, never part of the product.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use anyhow::{bail, Context, Result};

use crate::arch::Arch;
use crate::system;

/// `cargo xtask iso ARGS`: `media build ARGS` of the shipped binary (`--help` is its help).
pub fn run(args: &[String]) -> Result<()> {
    let binary = crate::dist::build(Arch::host())?;
    let status = Command::new(binary).args(["media", "build"]).args(args).status()?;
    if !status.success() {
        std::process::exit(status.code().unwrap_or(1));
    }
    Ok(())
}

/// Who signs the task media: a private key, and the server a recipe is bound to, if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signing {
    pub key: PathBuf,
    pub bind: Option<String>,
}

impl Signing {
    /// The SSHSIG namespace the dispatcher checks (SPEC §6a).
    pub fn namespace(&self) -> String {
        match &self.bind {
            Some(uuid) => format!("provision-dispatcher@{uuid}"),
            None => "provision-dispatcher".into(),
        }
    }

    /// `ssh-keygen -Y sign` of `files`, each `FILE.sig` beside it, as a controller with stock
    /// OpenSSH does (the fuzz seeds, and a recipe changed after signing). The key is signed
    /// with from a private copy: ssh-keygen refuses a key others can read, and a test key
    /// committed to git is checked out readable.
    pub fn sign(&self, files: &[PathBuf]) -> Result<()> {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        crate::needs::ensure(crate::needs::Need::Sign, "signed task media")?;
        let key = std::fs::read(&self.key).with_context(|| format!("read the key {}", self.key.display()))?;
        let copy = std::env::temp_dir().join(format!("provision-signing-key-{}", std::process::id()));
        let _ = std::fs::remove_file(&copy);
        std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&copy)?.write_all(&key)?;
        for file in files {
            let _ = std::fs::remove_file(format!("{}.sig", file.display()));
        }
        let result = system::run(
            Command::new("ssh-keygen")
                .args(["-q", "-Y", "sign", "-f"])
                .arg(&copy)
                .args(["-n", &self.namespace()])
                .args(files),
        );
        std::fs::remove_file(&copy)?;
        result
    }
}

/// The schema a task ISO carries.
#[derive(Debug, Clone, Copy)]
pub enum Schema<'a> {
    /// A compiled-in version, by number.
    Version(u32),
    File(&'a Path),
}

/// How `media build` ended: the ISO written, or refused with the check's exit code and report.
pub enum Built {
    Written,
    Refused { code: i32, report: String },
}

impl Built {
    /// Fails unless the ISO was written.
    pub fn written(self) -> Result<()> {
        match self {
            Built::Written => Ok(()),
            Built::Refused { code, report } => bail!("media build refused the recipe (exit {code}):\n{report}"),
        }
    }
}

/// `media build` of `recipe` with `schema`, signed as `signing` says, into `output`.
pub fn build(recipe: &Path, schema: Schema, signing: Option<&Signing>, output: &Path) -> Result<Built> {
    let binary = crate::dist::build(Arch::host())?;
    let mut cmd = Command::new(binary);
    cmd.args(["media", "build"]).arg(recipe).arg("-o").arg(output);
    match schema {
        Schema::Version(n) => cmd.args(["--schema-version", &n.to_string()]),
        Schema::File(file) => cmd.arg("--schema").arg(file),
    };
    if let Some(signing) = signing {
        cmd.arg("--sign").arg(&signing.key);
        if let Some(uuid) = &signing.bind {
            cmd.args(["--bind", uuid]);
        }
    }
    let Output { status, stdout, stderr } =
        cmd.output().with_context(|| format!("cannot start {}", system::describe(&cmd)))?;
    match status.code() {
        Some(0) => Ok(Built::Written),
        Some(code @ (65 | 66 | 77 | 78)) => {
            Ok(Built::Refused { code, report: String::from_utf8_lossy(&stdout).into_owned() })
        }
        _ => bail!("{} failed ({status}): {}", system::describe(&cmd), String::from_utf8_lossy(&stderr)),
    }
}

/// `media embed` of the shipped binary: `task` (a task ISO) written into the task area of the
/// maintenance ISO `image`, as a controller does for a server with one virtual drive; into a
/// copy at `output`, or into `image` itself when `output` is `None`.
pub fn embed(image: &Path, task: &Path, output: Option<&Path>) -> Result<()> {
    let binary = crate::dist::build(Arch::host())?;
    let mut cmd = Command::new(binary);
    cmd.args(["media", "embed"]).arg(image).arg(task);
    match output {
        Some(output) => cmd.arg("-o").arg(output),
        None => cmd.arg("--in-place"),
    };
    let Output { status, stdout, .. } =
        cmd.output().with_context(|| format!("cannot start {}", system::describe(&cmd)))?;
    if !status.success() {
        bail!("{} failed ({status}):\n{}", system::describe(&cmd), String::from_utf8_lossy(&stdout));
    }
    Ok(())
}

/// What goes on an ISO written by [`unchecked`].
pub enum Entry {
    /// A file, its bytes from this path.
    File(String, PathBuf),
    /// A Rock Ridge symbolic link to this target.
    Symlink(String, String),
    /// A directory holding one file (name, bytes from this path).
    Dir(String, String, PathBuf),
}

/// An ISO with `volume_id` holding `entries` as given, unchecked: the tests' rig over the
/// product's ISO writer.
pub fn unchecked(volume_id: &str, entries: &[Entry], output: &Path) -> Result<()> {
    let rig = crate::dist::build_example(Arch::host(), "task-media")?;
    let mut cmd = Command::new(rig);
    cmd.arg("-o").arg(output).args(["--volume-id", volume_id]);
    for entry in entries {
        match entry {
            Entry::File(name, path) => cmd.arg("--file").arg(format!("{name}={}", path.display())),
            Entry::Symlink(name, target) => cmd.arg("--symlink").arg(format!("{name}={target}")),
            Entry::Dir(name, inner, path) => cmd.arg("--dir").arg(format!("{name}/{inner}={}", path.display())),
        };
    }
    system::run(&mut cmd)
}
