//! What the boot's kernel command line asks of the task media (SPEC §6.1 and the stale-media
//! guard): `provision.media=` (where it is) and `provision.recipe=` (which recipe it must
//! carry). The last of each wins, as for other kernel parameters.

use std::path::PathBuf;

use super::discover::Request;

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
    /// The parameter is there but not in a form the dispatcher knows: nothing can match it,
    /// so every media is refused rather than the guard silently ignored.
    Unreadable,
}

impl Cmdline {
    pub fn parse(cmdline: &str) -> Cmdline {
        let last = |name: &str| cmdline.split_ascii_whitespace().filter_map(|arg| arg.strip_prefix(name)).next_back();
        let media = last("provision.media=").map(|value| match value.strip_prefix("LABEL=") {
            Some(label) => Request::Label(label.to_owned()),
            None => Request::Path(PathBuf::from(value)),
        });
        let recipe = last("provision.recipe=").map(|value| match value.strip_prefix("sha256:") {
            Some(hex) if hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()) => {
                Expected::Sha256(hex.to_ascii_lowercase())
            }
            _ => Expected::Unreadable,
        });
        Cmdline { media, recipe }
    }

    /// This boot's, or nothing if `/proc/cmdline` cannot be read.
    pub fn of_this_boot() -> Cmdline {
        std::fs::read_to_string("/proc/cmdline").map(|text| Cmdline::parse(&text)).unwrap_or_default()
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
        assert_eq!(Cmdline::parse("ro quiet provision.media=/dev/sr1").media, Some(Request::Path("/dev/sr1".into())));
        assert_eq!(
            Cmdline::parse("provision.media=/x provision.media=LABEL=JOB7 console=ttyS0").media,
            Some(Request::Label("JOB7".into()))
        );
        assert_eq!(Cmdline::parse("root=LABEL=vmroot"), Cmdline::default());
    }

    #[test]
    fn the_expected_recipe_is_a_sha256_or_matches_nothing() {
        let hex = "AB".repeat(32);
        let expected = Cmdline::parse(&format!("quiet provision.recipe=sha256:{hex}")).recipe.unwrap();
        assert!(expected.matches(&"ab".repeat(32)));
        assert!(!expected.matches(&"cd".repeat(32)));
        for bad in ["provision.recipe=md5:abc", "provision.recipe=sha256:abc", "provision.recipe="] {
            let expected = Cmdline::parse(bad).recipe.unwrap();
            assert_eq!(expected, Expected::Unreadable, "{bad}");
            assert!(!expected.matches(&"ab".repeat(32)));
        }
    }
}
