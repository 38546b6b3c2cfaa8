//! `cargo xtask iso RECIPE [--schema S] -o task.iso`: a task ISO as the controller makes one
//! (ISO 9660 with Rock Ridge and Joliet, volume id TASK, `/recipe.json` and
//! `/recipe.schema.json` at the root).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

use crate::system;

pub fn run(args: &[String]) -> Result<()> {
    let mut recipe = None;
    let mut schema = None;
    let mut output = None;
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--schema" => schema = args.next().map(PathBuf::from),
            "-o" | "--output" => output = args.next().map(PathBuf::from),
            other if recipe.is_none() && !other.starts_with('-') => recipe = Some(PathBuf::from(other)),
            other => bail!("iso: unexpected argument '{other}'"),
        }
    }
    let (Some(recipe), Some(output)) = (recipe, output) else {
        bail!("usage: cargo xtask iso RECIPE [--schema S] -o task.iso");
    };
    build(&recipe, schema.as_deref(), &output)?;
    println!("{}", output.display());
    Ok(())
}

/// Writes a task ISO with `recipe` and `schema` (the canonical schema by default).
pub fn build(recipe: &Path, schema: Option<&Path>, output: &Path) -> Result<()> {
    crate::needs::ensure(crate::needs::Need::TaskIso, "task ISOs")?;
    let stage = tempdir(output)?;
    let canonical = crate::root().join("iso/recipe.schema.json");
    std::fs::copy(recipe, stage.join("recipe.json")).with_context(|| format!("copy {}", recipe.display()))?;
    let schema = schema.unwrap_or(&canonical);
    std::fs::copy(schema, stage.join("recipe.schema.json")).with_context(|| format!("copy {}", schema.display()))?;
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
