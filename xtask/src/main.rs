//! `cargo xtask <task>`: the project's build, proof and demo tasks. Each task is a plain
//! function in its own module; this file only dispatches.

mod apt;
mod arch;
mod base;
mod bench;
mod ci;
mod cross;
mod deb;
mod demo;
mod dist;
mod efi;
mod foreign;
mod fresh;
mod fuzz;
mod image;
mod initrd;
mod iso;
mod layers;
mod needs;
mod schemas;
mod system;
mod validate;
mod vm;

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};

const USAGE: &str = "\
Usage: cargo xtask <TASK> [ARGS]

Tasks (docs/development.md has more of each one):
  dist [--target TRIPLE]
      The static, stripped, PIE binary at target/dist/[TRIPLE/]provision-dispatcher
  deb [--target TRIPLE]
      The Debian package at target/debian/; lintian; an install, reinstall and purge test
  image [--arch amd64|arm64] [--layer DIR]...
      The maintenance-OS ISO (hybrid, UEFI and BIOS), its path printed last
  iso RECIPE -o F [OPTIONS]
      A task ISO: `provision-dispatcher media build` of the shipped binary
      (`cargo xtask iso --help` lists its options)
  test [--target TRIPLE]
      The product's tests; for another TRIPLE, under qemu-user
  validate
      Schemas (draft-07, lints, examples), iso/examples sidecars, unit files, module layers
  vm-test [--image] [--arch A] [--cases DIR] [--layer DIR]... [--jobs N] [--rounds N]
      Boots QEMU guests for the cases (default: tests/vm-cases), several cases a boot
      where the boot is the same (at most N rounds), and judges each
  demo
      Two real boots: the seed Linux example dispatched from one drive (its task
      embedded), the invalid one failed (its task ISO on a second drive)
  bench [--rounds N] [--write] [--profile]
      SPEC §9's budgets, side by side with check-jsonschema and ajv
  bench --boot [--arch A]... [--against REV] [--link BYTES_PER_SEC]
      The boot over a BMC's slow virtual media, side by side with an earlier image
  fuzz [--time SECS] [TARGET...]
      The cargo-fuzz targets of fuzz/ (all by default), SECS (60) each, stats
  fresh-check [--busy] [--keep] [TASK]...
      demo and ci (or the TASKs) in a clean Debian 12 root with an empty cache, timed
  foreign-image
      A Debian live-build image from docs/image-builder.md, booted: one dispatch, one failure
  ci
      fmt, clippy, tests, validate, deb, every VM case, the arm64 steps (what .ci/run runs)
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
        "dist" => dist::run(rest),
        "deb" => deb::run(rest),
        "image" => image::run(rest),
        "iso" => iso::run(rest),
        "test" => cross::run(rest),
        "validate" => validate::run(),
        "ci" => ci::run(),
        "bench" => bench::run(rest),
        "fuzz" => fuzz::run(rest),
        "vm-test" => vm::run(rest),
        "demo" => demo::run(),
        "fresh-check" => fresh::run(rest),
        "foreign-image" => foreign::run(rest),
        "-h" | "--help" | "help" => {
            print!("{USAGE}");
            Ok(())
        }
        other => bail!("unknown task '{other}'\n{USAGE}"),
    }
}

/// Where tasks keep what outlives a clone: `${XDG_CACHE_HOME:-$HOME/.cache}/provision-dispatcher`.
pub fn cache_dir() -> PathBuf {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/root".into())).join(".cache"));
    base.join("provision-dispatcher")
}

/// The workspace root (the parent of `xtask/`).
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask lives in the workspace").to_owned()
}
