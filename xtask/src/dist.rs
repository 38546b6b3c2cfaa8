//! `cargo xtask dist`: the shipped binary, static and stripped, at target/dist/.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::system;

/// The host triple with glibc linked statically (MACHINE-NOTES: an explicit --target keeps
/// crt-static away from proc-macro crates).
const TARGET: &str = "x86_64-unknown-linux-gnu";

/// The budget of SPEC §9.
pub const MAX_BYTES: u64 = 5 * 1024 * 1024;

/// Builds the binary; returns its path.
pub fn run() -> Result<PathBuf> {
    let root = crate::root();
    system::run(
        Command::new(env!("CARGO"))
            .current_dir(&root)
            .args([
                "build",
                "--quiet",
                "--locked",
                "--profile",
                "dist",
                "--target",
                TARGET,
                "--bin",
                "provision-dispatcher",
            ])
            .env("RUSTFLAGS", "-C target-feature=+crt-static"),
    )?;
    let built = root.join("target").join(TARGET).join("dist/provision-dispatcher");
    let dist = root.join("target/dist");
    std::fs::create_dir_all(&dist)?;
    let out = dist.join("provision-dispatcher");
    std::fs::copy(&built, &out).with_context(|| format!("copy {}", built.display()))?;
    let size = std::fs::metadata(&out)?.len();
    println!("{}: {size} bytes ({:.2} MiB, budget {} MiB)", out.display(), size as f64 / 1048576.0, MAX_BYTES >> 20);
    let linkage = system::output(Command::new("file").arg(&out)).unwrap_or_default();
    if !linkage.is_empty() && !linkage.contains("statically linked") && !linkage.contains("static-pie") {
        bail!("{} is not statically linked: {linkage}", out.display());
    }
    if size > MAX_BYTES {
        bail!("the binary is over its budget of {MAX_BYTES} bytes");
    }
    Ok(out)
}
