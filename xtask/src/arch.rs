//! The architectures the dispatcher ships for, by their Rust and Debian names: what the
//! binary, the package, the image and the VM tests are built for.

use anyhow::{Context, Result};

/// An architecture the dispatcher ships for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arch {
    Amd64,
    Arm64,
}

impl Arch {
    pub const ALL: [Arch; 2] = [Arch::Amd64, Arch::Arm64];

    /// glibc linked statically (`+crt-static`): measured against musl in Cargo.toml.
    pub fn triple(self) -> &'static str {
        match self {
            Arch::Amd64 => "x86_64-unknown-linux-gnu",
            Arch::Arm64 => "aarch64-unknown-linux-gnu",
        }
    }

    /// Debian's name, for packages and images.
    pub fn debian(self) -> &'static str {
        match self {
            Arch::Amd64 => "amd64",
            Arch::Arm64 => "arm64",
        }
    }

    /// The machine this runs on (the build host is x86_64).
    pub fn host() -> Arch {
        if cfg!(target_arch = "aarch64") {
            Arch::Arm64
        } else {
            Arch::Amd64
        }
    }

    pub fn from_debian(name: &str) -> Result<Arch> {
        Arch::ALL.into_iter().find(|a| a.debian() == name).with_context(|| {
            let known: Vec<&str> = Arch::ALL.iter().map(|a| a.debian()).collect();
            format!("unknown --arch '{name}': the dispatcher ships for {}", known.join(" and "))
        })
    }

    pub fn from_triple(triple: &str) -> Result<Arch> {
        Arch::ALL.into_iter().find(|a| a.triple() == triple).with_context(|| {
            let known: Vec<&str> = Arch::ALL.iter().map(|a| a.triple()).collect();
            format!("unknown --target '{triple}': the dispatcher ships for {}", known.join(" and "))
        })
    }
}
