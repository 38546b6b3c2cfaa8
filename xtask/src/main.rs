//! `cargo xtask <task>`: the project's build, proof and demo tasks. Each task is a plain
//! function in its own module; this file only dispatches.

mod dist;
mod iso;
mod system;
mod validate;

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};

const USAGE: &str = "\
Usage: cargo xtask <TASK> [ARGS]

Tasks:
  dist                          Static, stripped release binary at target/dist/provision-dispatcher
  iso RECIPE [--schema S] -o F  Task ISO (volume id TASK) with the recipe and the schema
  validate                      Schema (draft-07, lints, examples), iso/examples sidecars, unit files
";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Err(e) = run(&args) {
        eprintln!("xtask: error: {e:#}");
        std::process::exit(1);
    }
}

fn run(args: &[String]) -> Result<()> {
    let Some((task, rest)) = args.split_first() else {
        print!("{USAGE}");
        return Ok(());
    };
    match task.as_str() {
        "dist" => dist::run().map(drop),
        "iso" => iso::run(rest),
        "validate" => validate::run(),
        "-h" | "--help" | "help" => {
            print!("{USAGE}");
            Ok(())
        }
        other => bail!("unknown task '{other}'\n{USAGE}"),
    }
}

/// The workspace root (the parent of `xtask/`).
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask lives in the workspace").to_owned()
}
