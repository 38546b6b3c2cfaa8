//! What the boot's kernel command line asks of the task media (SPEC §6.1 and the stale-media
//! guard): `provision.media=` (where it is) and `provision.recipe=` (which recipe it must
//! carry).
//!
//! The line is read as the kernel keeps it: bytes, split as the kernel splits them. A byte
//! that is not UTF-8 elsewhere on the line (a host name in Latin-1) changes nothing here.
//!
//! `provision.media=`: the last one wins, as for other kernel parameters. `provision.recipe=`
//! is a guard, so it fails closed: any occurrence the dispatcher cannot use (bare, empty,
//! another algorithm, a wrong length), or two that name different recipes, make it
//! [`Expected::Malformed`], which no media matches. A later parameter can narrow the guard,
//! never lift it.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use super::discover::Request;

/// The split itself is boot-io's, which the initrd's `/init` reads its own parameters with.
pub use boot_io::cmdline::kernel_args;

/// The parameters, as read from `/proc/cmdline`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cmdline {
    /// `provision.media=PATH` or `provision.media=LABEL=NAME`.
    pub media: Option<Request>,
    /// `provision.recipe=sha256:HEX`: the digest of the `recipe.json` this boot is for. Media
    /// carrying another recipe (a task ISO of an earlier job the controller failed to eject)
    /// is refused. The controller writes it when it prepares the boot; without it, any task
    /// media is taken.
    pub recipe: Option<Expected>,
}

/// What `provision.recipe=` expects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expected {
    /// Lower-case hexadecimal SHA-256 of the recipe file's bytes.
    Sha256(String),
    /// The parameter is there but not in a form the dispatcher can use (bare, empty, another
    /// algorithm, a wrong length, not hexadecimal, or two occurrences that disagree): nothing
    /// can match it, so every media is refused rather than the guard silently ignored.
    Malformed,
}

impl Cmdline {
    pub fn parse(cmdline: &[u8]) -> Cmdline {
        let args = kernel_args(cmdline);
        let media = args.iter().rev().find(|(name, value)| *name == b"provision.media" && value.is_some());
        let media = media.and_then(|(_, value)| *value).map(|value| match value.strip_prefix(b"LABEL=") {
            Some(label) => Request::Label(String::from_utf8_lossy(label).into_owned()),
            None => Request::Path(PathBuf::from(OsStr::from_bytes(value))),
        });
        let recipe = args.iter().filter(|(name, _)| *name == b"provision.recipe").map(|(_, value)| expected(*value));
        let recipe = recipe.reduce(|one, other| if one == other { one } else { Expected::Malformed });
        Cmdline { media, recipe }
    }

    /// This boot's, read from `/proc/cmdline`; nothing if it cannot be read (a system without
    /// procfs has no kernel command line to ask anything).
    pub fn of_this_boot() -> Cmdline {
        boot_io::cmdline::read(std::path::Path::new("/proc/cmdline"))
            .map(|line| Cmdline::parse(&line))
            .unwrap_or_default()
    }
}

/// One `provision.recipe` occurrence: `sha256:` and 64 hexadecimal digits, or malformed.
fn expected(value: Option<&[u8]>) -> Expected {
    match value.and_then(|value| value.strip_prefix(b"sha256:")) {
        Some(hex) if hex.len() == 64 && hex.iter().all(u8::is_ascii_hexdigit) => {
            Expected::Sha256(String::from_utf8_lossy(hex).to_ascii_lowercase())
        }
        _ => Expected::Malformed,
    }
}

impl Expected {
    /// Whether a recipe with this SHA-256 (lower-case hex) is the one expected.
    pub fn matches(&self, sha256: &str) -> bool {
        matches!(self, Expected::Sha256(hex) if hex == sha256)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn media_names_a_path_or_a_label() {
        assert_eq!(Cmdline::parse(b"ro quiet provision.media=/dev/sr1").media, Some(Request::Path("/dev/sr1".into())));
        assert_eq!(
            Cmdline::parse(b"provision.media=/x provision.media=LABEL=JOB7 console=ttyS0").media,
            Some(Request::Label("JOB7".into()))
        );
        assert_eq!(Cmdline::parse(b"root=LABEL=vmroot"), Cmdline::default());
    }

    #[test]
    fn quoted_values_are_read_as_the_kernel_reads_them() {
        assert_eq!(
            Cmdline::parse(br#"quiet provision.media="LABEL=MY TASK" console=ttyS0"#).media,
            Some(Request::Label("MY TASK".into()))
        );
        assert_eq!(
            Cmdline::parse(br#""provision.media=/dev/disk/by-label/MY TASK" ro"#).media,
            Some(Request::Path("/dev/disk/by-label/MY TASK".into()))
        );
    }

    #[test]
    fn the_expected_recipe_is_a_sha256_or_matches_nothing() {
        let hex = "AB".repeat(32);
        let expected = Cmdline::parse(format!("quiet provision.recipe=sha256:{hex}").as_bytes()).recipe.unwrap();
        assert!(expected.matches(&"ab".repeat(32)));
        assert!(!expected.matches(&"cd".repeat(32)));
        for bad in ["provision.recipe=md5:abc", "provision.recipe=sha256:abc", "provision.recipe=", "provision.recipe"]
        {
            let expected = Cmdline::parse(bad.as_bytes()).recipe.unwrap();
            assert_eq!(expected, Expected::Malformed, "{bad}");
            assert!(!expected.matches(&"ab".repeat(32)));
        }
    }

    /// Issue 31 #2: the guard failed open on a byte that is not UTF-8 anywhere on the line,
    /// and a later bare `provision.recipe` lifted it.
    #[test]
    fn the_guard_fails_closed() {
        let good = format!("provision.recipe=sha256:{}", "ab".repeat(32));
        let sha = Expected::Sha256("ab".repeat(32));
        let mut latin1 = format!("quiet {good} hostname=caf").into_bytes();
        latin1.extend_from_slice(b"\xe9 console=ttyS0\n");
        assert_eq!(Cmdline::parse(&latin1).recipe, Some(sha.clone()));
        for later in ["provision.recipe", "provision.recipe=", "provision.recipe=sha256:", "\"provision.recipe\""] {
            let line = format!("{good} quiet {later}");
            assert_eq!(Cmdline::parse(line.as_bytes()).recipe, Some(Expected::Malformed), "{line}");
            let line = format!("{later} {good}");
            assert_eq!(Cmdline::parse(line.as_bytes()).recipe, Some(Expected::Malformed), "{line}");
        }
        let other = format!("provision.recipe=sha256:{}", "cd".repeat(32));
        assert_eq!(Cmdline::parse(format!("{good} {other}").as_bytes()).recipe, Some(Expected::Malformed));
        let upper = format!("provision.recipe=sha256:{}", "AB".repeat(32));
        assert_eq!(Cmdline::parse(format!("{good} {upper}").as_bytes()).recipe, Some(sha));
        // A name that is not the parameter's leaves the guard alone.
        assert_eq!(Cmdline::parse(b"provision.recipes=x provision.recipe.x").recipe, None);
    }
}
