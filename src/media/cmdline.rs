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
    /// The parameter is there but not in a form the dispatcher knows (another algorithm, a
    /// wrong length, not hexadecimal, empty): nothing can match it, so every media is refused
    /// rather than the guard silently ignored.
    Malformed,
}

impl Cmdline {
    pub fn parse(cmdline: &str) -> Cmdline {
        let args = kernel_args(cmdline);
        let last = |name: &str| args.iter().rev().find(|(param, _)| *param == name).and_then(|(_, value)| *value);
        let media = last("provision.media").map(|value| match value.strip_prefix("LABEL=") {
            Some(label) => Request::Label(label.to_owned()),
            None => Request::Path(PathBuf::from(value)),
        });
        let recipe = last("provision.recipe").map(|value| match value.strip_prefix("sha256:") {
            Some(hex) if hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()) => {
                Expected::Sha256(hex.to_ascii_lowercase())
            }
            _ => Expected::Malformed,
        });
        Cmdline { media, recipe }
    }

    /// This boot's, or nothing if `/proc/cmdline` cannot be read.
    pub fn of_this_boot() -> Cmdline {
        std::fs::read_to_string("/proc/cmdline").map(|text| Cmdline::parse(&text)).unwrap_or_default()
    }
}

/// The parameters of a kernel command line, as the kernel splits them (`next_arg` in
/// lib/cmdline.c): whitespace separates them except inside double quotes; a parameter may be
/// quoted whole (`"a=b c"`) or in its value (`a="b c"`), and those outer quotes are not part
/// of the value. `(name, value)`; a parameter without `=` has no value.
pub fn kernel_args(cmdline: &str) -> Vec<(&str, Option<&str>)> {
    let mut args = Vec::new();
    let mut rest = cmdline.trim_start();
    while !rest.is_empty() {
        let quoted = rest.starts_with('"');
        let arg_start = usize::from(quoted);
        let mut in_quote = quoted;
        let mut end = rest.len();
        let mut equals = None;
        for (i, c) in rest.char_indices().skip(arg_start) {
            if c.is_whitespace() && !in_quote {
                end = i;
                break;
            }
            if equals.is_none() && c == '=' {
                equals = Some(i);
            }
            if c == '"' {
                in_quote = !in_quote;
            }
        }
        let mut arg = &rest[arg_start..end];
        // The closing quote of a parameter quoted whole, or of its value.
        let value_quoted = equals.is_some_and(|i| rest[i + 1..].starts_with('"'));
        if (quoted || value_quoted) && arg.ends_with('"') && arg.len() > usize::from(value_quoted) {
            arg = &arg[..arg.len() - 1];
        }
        args.push(match equals {
            Some(i) if i - arg_start <= arg.len() => {
                let (name, value) = (&arg[..i - arg_start], &arg[(i - arg_start + 1).min(arg.len())..]);
                (name, Some(value.strip_prefix('"').unwrap_or(value)))
            }
            _ => (arg, None),
        });
        rest = rest[end..].trim_start();
    }
    args
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
    fn quoted_values_are_read_as_the_kernel_reads_them() {
        assert_eq!(
            Cmdline::parse(r#"quiet provision.media="LABEL=MY TASK" console=ttyS0"#).media,
            Some(Request::Label("MY TASK".into()))
        );
        assert_eq!(
            Cmdline::parse(r#""provision.media=/dev/disk/by-label/MY TASK" ro"#).media,
            Some(Request::Path("/dev/disk/by-label/MY TASK".into()))
        );
        assert_eq!(
            kernel_args(r#"a b= c="" "d" e="x y"z f="unterminated g"#),
            [
                ("a", None),
                ("b", Some("")),
                ("c", Some("")),
                ("d", None),
                ("e", Some("x y\"z")),
                ("f", Some("unterminated g"))
            ]
        );
        // Quotes inside a value toggle like any other: the kernel reads this as one parameter.
        assert_eq!(kernel_args(r#"h="x"y" i=1"#), [("h", Some("x\"y\" i=1"))]);
        assert_eq!(kernel_args("  \t\n"), []);
    }

    #[test]
    fn the_expected_recipe_is_a_sha256_or_matches_nothing() {
        let hex = "AB".repeat(32);
        let expected = Cmdline::parse(&format!("quiet provision.recipe=sha256:{hex}")).recipe.unwrap();
        assert!(expected.matches(&"ab".repeat(32)));
        assert!(!expected.matches(&"cd".repeat(32)));
        for bad in ["provision.recipe=md5:abc", "provision.recipe=sha256:abc", "provision.recipe="] {
            let expected = Cmdline::parse(bad).recipe.unwrap();
            assert_eq!(expected, Expected::Malformed, "{bad}");
            assert!(!expected.matches(&"ab".repeat(32)));
        }
    }
}
