//! `cargo xtask iso RECIPE [--schema S] [--sign KEY [--bind UUID]] -o task.iso`: a task ISO
//! as the controller makes one (ISO 9660 with Rock Ridge and Joliet, volume id TASK,
//! `/recipe.json` and `/recipe.schema.json` at the root, and with `--sign` their signatures,
//! `ssh-keygen -Y sign -n provision-dispatcher`, `@UUID` with `--bind`).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

use crate::system;

pub fn run(args: &[String]) -> Result<()> {
    let mut recipe = None;
    let mut schema = None;
    let mut output = None;
    let mut signing = None;
    let mut bind = None;
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--schema" => schema = args.next().map(PathBuf::from),
            "-o" | "--output" => output = args.next().map(PathBuf::from),
            "--sign" => signing = Some(args.next().map(PathBuf::from).context("--sign needs a private key")?),
            "--bind" => bind = Some(args.next().context("--bind needs the server's SMBIOS UUID")?.to_ascii_lowercase()),
            other if recipe.is_none() && !other.starts_with('-') => recipe = Some(PathBuf::from(other)),
            other => bail!("iso: unexpected argument '{other}'"),
        }
    }
    let (Some(recipe), Some(output)) = (recipe, output) else {
        bail!("usage: cargo xtask iso RECIPE [--schema S] [--sign KEY [--bind UUID]] -o task.iso");
    };
    let signing = match (signing, bind) {
        (Some(key), bind) => Some(Signing { key, bind }),
        (None, Some(_)) => bail!("iso: --bind needs --sign"),
        (None, None) => None,
    };
    build(&recipe, schema.as_deref(), signing.as_ref(), &output)?;
    println!("{}", output.display());
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

    /// `ssh-keygen -Y sign` of `files`, each `FILE.sig` beside it, as a controller does. The
    /// key is signed with from a private copy: ssh-keygen refuses a key others can read, and
    /// a test key committed to git is checked out readable.
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

/// Writes a task ISO with `recipe` and `schema` (the canonical schema by default), signed
/// when `signing` says so.
pub fn build(recipe: &Path, schema: Option<&Path>, signing: Option<&Signing>, output: &Path) -> Result<()> {
    crate::needs::ensure(crate::needs::Need::TaskIso, "task ISOs")?;
    let stage = tempdir(output)?;
    let canonical = crate::root().join("iso/recipe.schema.json");
    std::fs::copy(recipe, stage.join("recipe.json")).with_context(|| format!("copy {}", recipe.display()))?;
    let schema = schema.unwrap_or(&canonical);
    std::fs::copy(schema, stage.join("recipe.schema.json")).with_context(|| format!("copy {}", schema.display()))?;
    if let Some(signing) = signing {
        signing.sign(&[stage.join("recipe.json"), stage.join("recipe.schema.json")])?;
    }
    let _ = std::fs::remove_file(output);
    let result = system::run(
        Command::new("xorriso")
            .args(["-as", "mkisofs", "-quiet", "-V", "TASK", "-R", "-J", "-o"])
            .arg(output)
            .arg(&stage)
            .stderr(Stdio::null()),
    );
    std::fs::remove_dir_all(&stage)?;
    result
}

fn tempdir(near: &Path) -> Result<PathBuf> {
    let parent = near.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let dir = parent.join(format!(".iso-stage-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}
