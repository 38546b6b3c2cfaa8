//! apt with state, cache and sources of its own: packages fetched and unpacked for the
//! tasks' own use (Debian's signed EFI chain, QEMU), without touching the machine's apt
//! sources or installing anything.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Result};

use crate::arch::Arch;
use crate::system;

const KEYRING: &str = "/usr/share/keyrings/debian-archive-keyring.gpg";

/// Which Debian suites the private apt reads.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Suites {
    /// Debian 12 with its updates and security fixes, as the image's base (mmdebstrap).
    Stable,
    /// The same and bookworm-backports, from which a package is taken only when asked for
    /// by name (`-t bookworm-backports`): apt pins backports below the release.
    WithBackports,
}

pub const BACKPORTS: &str = "bookworm-backports";

/// apt for one architecture, trusting Debian's archive keyring only.
pub struct PrivateApt {
    dir: PathBuf,
    arch: Arch,
}

impl PrivateApt {
    pub fn new(dir: &Path, arch: Arch, suites: Suites) -> Result<PrivateApt> {
        for sub in ["state/lists/partial", "cache/archives/partial", "etc/parts"] {
            std::fs::create_dir_all(dir.join(sub))?;
        }
        let mut sources = vec![
            "http://deb.debian.org/debian bookworm main",
            "http://deb.debian.org/debian bookworm-updates main",
            "http://deb.debian.org/debian-security bookworm-security main",
        ];
        if suites == Suites::WithBackports {
            sources.push("http://deb.debian.org/debian bookworm-backports main");
        }
        let sources: String = sources.iter().map(|s| format!("deb [signed-by={KEYRING}] {s}\n")).collect();
        std::fs::write(dir.join("etc/sources.list"), sources)?;
        Ok(PrivateApt { dir: dir.to_owned(), arch })
    }

    /// `apt-get` with this apt's directories. Which packages are installed is still the
    /// machine's (`/var/lib/dpkg/status`): a plan leaves out what the machine has.
    pub fn command(&self) -> Command {
        let mut cmd = Command::new("apt-get");
        cmd.arg("-q");
        let d = |sub: &str| self.dir.join(sub).display().to_string();
        for (key, value) in [
            ("Dir::State", d("state")),
            ("Dir::State::status", "/var/lib/dpkg/status".to_owned()),
            ("Dir::Cache", d("cache")),
            ("Dir::Etc::SourceList", d("etc/sources.list")),
            ("Dir::Etc::SourceParts", d("etc/parts")),
            ("Dir::Etc::TrustedParts", d("etc/parts")),
            ("Dir::Etc::Preferences", d("etc/preferences")),
            ("Dir::Etc::PreferencesParts", d("etc/parts")),
            ("APT::Architecture", self.arch.debian().to_owned()),
            ("APT::Architectures", self.arch.debian().to_owned()),
            // apt's download sandbox user cannot write into root's cache.
            ("APT::Sandbox::User", "root".to_owned()),
        ] {
            cmd.arg("-o").arg(format!("{key}={value}"));
        }
        cmd
    }

    pub fn lists_stamp(&self) -> PathBuf {
        self.dir.join("state/updated")
    }

    pub fn update(&self) -> Result<()> {
        system::run(self.command().arg("update").stdout(Stdio::null()))?;
        std::fs::write(self.lists_stamp(), b"")?;
        Ok(())
    }

    /// The file names of the packages `apt-get download` would fetch (their versions).
    pub fn candidates(&self, packages: &[&str]) -> Result<Vec<String>> {
        let uris = system::output(self.command().args(["download", "--print-uris"]).args(packages))?;
        let files: Vec<String> = uris.lines().filter_map(|l| l.split_whitespace().nth(1)).map(String::from).collect();
        if files.len() != packages.len() {
            bail!("apt offers {} of the packages {}", files.len(), packages.join(" "));
        }
        Ok(files)
    }

    /// What `apt-get install --no-install-recommends -t RELEASE package` would add to this
    /// machine, as `name=version` (apt resolves the alternatives; what is installed is left
    /// out).
    pub fn install_plan(&self, release: &str, package: &str) -> Result<Vec<String>> {
        let plan = system::output(
            self.command()
                .args(["install", "-s", "--no-install-recommends", "-t", release, package])
                .env("DEBIAN_FRONTEND", "noninteractive"),
        )?;
        Ok(plan
            .lines()
            .filter_map(|l| l.strip_prefix("Inst "))
            .filter_map(|l| {
                let mut words = l.split_whitespace();
                let name = words.next()?;
                // "Inst NAME [OLD] (NEW SUITE [ARCH])" or "Inst NAME (NEW SUITE [ARCH])"
                let version = words.find_map(|w| w.strip_prefix('('))?;
                Some(format!("{name}={version}"))
            })
            .collect())
    }
}
