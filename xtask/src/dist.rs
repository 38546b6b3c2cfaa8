//! `cargo xtask dist [--target TRIPLE]`: the shipped binary, static, stripped and PIE, for
//! each architecture the dispatcher ships for ([`Arch`]). The host's lands at
//! `target/dist/provision-dispatcher`, another's at `target/dist/TRIPLE/provision-dispatcher`.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::arch::Arch;
use crate::system;

/// The budget with zbus and the media commands (SPEC §9: 6 MiB; issue 21's 5.5 MiB before
/// issue 38, issue 12's 4 MiB withdrawn).
pub const MAX_BYTES: u64 = 6 * 1024 * 1024;

/// glibc linked statically (`+crt-static`; with an explicit `--target`, so that proc-macro
/// crates are not), and its PIE relocations packed (DT_RELR, glibc 2.36+ relocates a static
/// PIE with them: ~300 KiB less than plain RELA).
const RUSTFLAGS: &str = "-C target-feature=+crt-static -C link-arg=-Wl,-z,pack-relative-relocs";

/// `--target TRIPLE` among `args` (the host's by default); the other arguments are refused.
pub fn target_arg(task: &str, args: &[String]) -> Result<Arch> {
    match args {
        [] => Ok(Arch::host()),
        [flag, triple] if flag == "--target" => Arch::from_triple(triple),
        _ => bail!("usage: cargo xtask {task} [--target TRIPLE]"),
    }
}

pub fn run(args: &[String]) -> Result<()> {
    build(target_arg("dist", args)?).map(drop)
}

/// Builds the binary for `arch`; returns its path.
pub fn build(arch: Arch) -> Result<PathBuf> {
    let root = crate::root();
    let mut cargo = cargo_build(arch)?;
    cargo.args(["--bin", "provision-dispatcher"]);
    system::run(&mut cargo)?;
    let built = root.join("target").join(arch.triple()).join("dist/provision-dispatcher");
    let dist = match arch == Arch::host() {
        true => root.join("target/dist"),
        false => root.join("target/dist").join(arch.triple()),
    };
    std::fs::create_dir_all(&dist)?;
    let out = dist.join("provision-dispatcher");
    // Through a file of this thread's, renamed over the last copy: another thread (the VM
    // tests' guests, two at a time, each making task ISOs) may be running that one, which a
    // copy onto it would fail (ETXTBSY).
    let partial = dist.join(format!(".provision-dispatcher.{}.{:?}", std::process::id(), std::thread::current().id()));
    std::fs::copy(&built, &partial).with_context(|| format!("copy {}", built.display()))?;
    std::fs::rename(&partial, &out).with_context(|| format!("rename {} to {}", partial.display(), out.display()))?;
    let size = std::fs::metadata(&out)?.len();
    println!(
        "{}: {size} bytes ({:.2} MiB, budget {:.1} MiB)",
        out.display(),
        size as f64 / 1048576.0,
        MAX_BYTES as f64 / 1048576.0
    );
    if !linkage_is_static_pie(&out)? {
        bail!("{} is not a static PIE", out.display());
    }
    if size > MAX_BYTES {
        bail!("the binary is over its budget of {MAX_BYTES} bytes");
    }
    Ok(out)
}

/// Whether the ELF file is position independent (type DYN) with no interpreter and no shared
/// library to load: a static PIE. Read from the ELF headers, for any architecture.
fn linkage_is_static_pie(path: &std::path::Path) -> Result<bool> {
    let bytes = std::fs::read(path)?;
    let u16_at = |at: usize| u16::from_le_bytes([bytes[at], bytes[at + 1]]);
    let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
    let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
    if bytes.len() < 64 || &bytes[..4] != b"\x7fELF" || bytes[4] != 2 || bytes[5] != 1 {
        bail!("{} is not a 64-bit little-endian ELF file", path.display());
    }
    const ET_DYN: u16 = 3;
    const PT_DYNAMIC: u32 = 2;
    const PT_INTERP: u32 = 3;
    const DT_NEEDED: u64 = 1;
    let (phoff, phentsize, phnum) = (u64_at(0x20) as usize, u16_at(0x36) as usize, u16_at(0x38) as usize);
    let mut interpreter = false;
    let mut needed = false;
    for i in 0..phnum {
        let header = phoff + i * phentsize;
        match u32_at(header) {
            PT_INTERP => interpreter = true,
            PT_DYNAMIC => {
                let (offset, size) = (u64_at(header + 8) as usize, u64_at(header + 32) as usize);
                needed = (offset..offset + size).step_by(16).any(|entry| u64_at(entry) == DT_NEEDED);
            }
            _ => {}
        }
    }
    Ok(u16_at(0x10) == ET_DYN && !interpreter && !needed)
}

/// An example of the product crate (the benchmark's floor, the VM tests' hold), built as the
/// dispatcher is: static, for `arch`.
/// Builds the binary of another package of the workspace for `arch`, as the shipped binary is
/// built (static, dist profile); returns its path.
pub fn build_package(arch: Arch, package: &str) -> Result<PathBuf> {
    system::run(cargo_build(arch)?.args(["--package", package]))?;
    Ok(crate::root().join("target").join(arch.triple()).join("dist").join(package))
}

pub fn build_example(arch: Arch, name: &str) -> Result<PathBuf> {
    system::run(cargo_build(arch)?.args(["--example", name]))?;
    Ok(crate::root().join("target").join(arch.triple()).join("dist/examples").join(name))
}

/// `cargo build` of the dist profile for `arch`, linked as the shipped binary is.
pub fn cargo_build(arch: Arch) -> Result<Command> {
    let root = crate::root();
    let mut cargo = Command::new(env!("CARGO"));
    cargo
        .current_dir(&root)
        .args(["build", "--quiet", "--locked", "--profile", "dist", "--target", arch.triple()])
        .env("RUSTFLAGS", RUSTFLAGS);
    if arch != Arch::host() {
        cross_toolchain(arch)?;
        // Through xtask/linker/static-pie-cc: rustc's aarch64 target spec would link a static
        // non-PIE binary.
        cargo
            .env(
                format!("CARGO_TARGET_{}_LINKER", arch.triple().to_uppercase().replace('-', "_")),
                root.join("xtask/linker/static-pie-cc"),
            )
            .env("STATIC_PIE_CC", linker(arch));
    }
    Ok(cargo)
}

pub fn linker(arch: Arch) -> &'static str {
    match arch {
        Arch::Amd64 => "x86_64-linux-gnu-gcc",
        Arch::Arm64 => "aarch64-linux-gnu-gcc",
    }
}

/// The Rust target (rustup) and Debian's cross C toolchain, which links and brings the
/// target's static glibc.
pub fn cross_toolchain(arch: Arch) -> Result<()> {
    crate::needs::ensure(crate::needs::Need::Link(arch), &format!("linking the {} binary", arch.debian()))?;
    let installed = system::output(Command::new("rustup").args(["target", "list", "--installed"]))?;
    if !installed.lines().any(|l| l.trim() == arch.triple()) {
        eprintln!("xtask: adding the Rust target {} with rustup", arch.triple());
        system::run(Command::new("rustup").args(["target", "add", arch.triple()]))?;
    }
    Ok(())
}
