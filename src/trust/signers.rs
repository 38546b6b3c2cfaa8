//! The image's trust file, `allowed_signers`, in OpenSSH's format as `ssh-keygen -Y verify -f`
//! reads it (ssh-keygen(1), ALLOWED SIGNERS): one signer a line, `principals [options] key`,
//! `#` comments and blank lines ignored.
//!
//! Supported: principals (a comma list of patterns, kept as written: the signer's name in
//! status.json), the option `namespaces="..."` (a comma list of patterns, `*`, `?` and `!` as
//! OpenSSH matches them) and keys of the types in [`ACCEPTED`]. Refused, so that the image
//! builder learns it at once instead of a server trusting less or more than meant:
//! `cert-authority` (no certificates), `valid-after`/`valid-before` (the maintenance OS has no
//! clock it can trust at boot), any other option, any other key type.

use ssh_key::{Algorithm, EcdsaCurve, PublicKey};

/// The key types a trust file may name: what `ssh-key` verifies with the features built in.
pub const ACCEPTED: &str = "ssh-ed25519, ecdsa-sha2-nistp256";

/// The trust file's size cap: a few hundred signers.
pub const MAX_TRUST_FILE_BYTES: u64 = 64 * 1024;

/// One line of the trust file.
#[derive(Debug, Clone)]
pub struct AllowedSigner {
    /// As written: a comma list of names or patterns.
    pub principals: String,
    /// `namespaces="..."`: the patterns a signature's namespace must match; `None`: any.
    pub namespaces: Option<String>,
    pub key: PublicKey,
}

impl AllowedSigner {
    /// Whether this line lets its key sign in `namespace`.
    pub fn allows(&self, namespace: &str) -> bool {
        self.namespaces.as_deref().is_none_or(|patterns| match_list(namespace, patterns))
    }
}

/// Parses the whole file. An error names the line and what is wrong with it, never a key.
pub fn parse(text: &str) -> Result<Vec<AllowedSigner>, String> {
    let mut signers = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        signers.push(parse_line(line).map_err(|e| format!("line {}: {e}", index + 1))?);
    }
    Ok(signers)
}

fn parse_line(line: &str) -> Result<AllowedSigner, String> {
    let (principals, rest) = token(line);
    let principals = principals.trim_matches('"');
    if principals.is_empty() {
        return Err("no principals".into());
    }
    if rest.is_empty() {
        return Err("no key".into());
    }
    let (namespaces, key) = if looks_like_key_type(rest) {
        (None, rest)
    } else {
        let (options, key) = token(rest);
        (parse_options(options)?, key)
    };
    if key.is_empty() {
        return Err("no key".into());
    }
    let key = PublicKey::from_openssh(key).map_err(|_| "the key is not an OpenSSH public key".to_owned())?;
    match key.algorithm() {
        Algorithm::Ed25519 | Algorithm::Ecdsa { curve: EcdsaCurve::NistP256 } => {}
        other => return Err(format!("key type {} is not accepted (only {ACCEPTED})", other.as_str())),
    }
    Ok(AllowedSigner { principals: principals.to_owned(), namespaces, key })
}

/// The options field: `namespaces="..."` is honoured, the rest refused.
fn parse_options(options: &str) -> Result<Option<String>, String> {
    let mut namespaces = None;
    for option in split_outside_quotes(options) {
        let (name, value) = option.split_once('=').unwrap_or((option, ""));
        match name.to_ascii_lowercase().as_str() {
            "namespaces" => {
                let value = value.strip_prefix('"').and_then(|v| v.strip_suffix('"'));
                let value = value.ok_or("namespaces= needs a quoted list")?;
                if namespaces.replace(value.to_owned()).is_some() {
                    return Err("namespaces= given twice".into());
                }
            }
            "cert-authority" => return Err("cert-authority is not supported: list each signing key".into()),
            "valid-after" | "valid-before" => {
                return Err(format!("{name}= is not supported: the maintenance OS has no trusted clock at boot"))
            }
            _ => return Err("an unknown option (supported: namespaces=\"...\")".into()),
        }
    }
    Ok(namespaces)
}

/// The first whitespace-delimited token (quotes keep spaces inside it) and the rest, trimmed.
fn token(text: &str) -> (&str, &str) {
    let mut quoted = false;
    for (at, c) in text.char_indices() {
        match c {
            '"' => quoted = !quoted,
            c if c.is_whitespace() && !quoted => return (&text[..at], text[at..].trim_start()),
            _ => {}
        }
    }
    (text, "")
}

fn split_outside_quotes(text: &str) -> impl Iterator<Item = &str> {
    let mut quoted = false;
    text.split(move |c| {
        if c == '"' {
            quoted = !quoted;
        }
        c == ',' && !quoted
    })
}

/// Whether the field starts with a key type rather than options (as OpenSSH decides: it
/// tries the key first).
fn looks_like_key_type(text: &str) -> bool {
    let (first, _) = token(text);
    first.starts_with("ssh-") || first.starts_with("ecdsa-") || first.starts_with("sk-")
}

/// OpenSSH's `match_pattern_list`: a comma list of patterns, each perhaps negated with `!`.
/// A negated match refuses outright; otherwise any positive match accepts.
pub fn match_list(text: &str, patterns: &str) -> bool {
    let mut matched = false;
    for pattern in patterns.split(',') {
        let (negated, pattern) = match pattern.strip_prefix('!') {
            Some(rest) => (true, rest),
            None => (false, pattern),
        };
        if glob(text.as_bytes(), pattern.as_bytes()) {
            if negated {
                return false;
            }
            matched = true;
        }
    }
    matched
}

/// `*` any run, `?` any one byte. Linear backtracking on the last `*`.
fn glob(text: &[u8], pattern: &[u8]) -> bool {
    let (mut t, mut p) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match pattern.get(p) {
            Some(b'*') => {
                star = Some((p, t));
                p += 1;
            }
            Some(&c) if c == b'?' || c == text[t] => {
                t += 1;
                p += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    p = sp + 1;
                    t = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    const ED25519: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHMuNnTh/E8CZNUr/zbxG3rzV0OuB5GyBVtVd1WBnTHg";

    #[test]
    fn lines_with_and_without_options_parse() {
        let text = format!(
            "# the controller's keys\n\nops@example.com {ED25519} controller\n\"a,b\" namespaces=\"provision-dispatcher@*\" {ED25519}\n"
        );
        let signers = parse(&text).unwrap();
        assert_eq!(signers.len(), 2);
        assert_eq!(signers[0].principals, "ops@example.com");
        assert!(signers[0].allows("provision-dispatcher"));
        assert_eq!(signers[1].principals, "a,b");
        assert!(!signers[1].allows("provision-dispatcher"));
        assert!(signers[1].allows("provision-dispatcher@4c4c4544-0042-3510-8052-b4c04f4d4e31"));
    }

    #[test]
    fn unsupported_lines_are_refused_with_their_line_number() {
        let cases = [
            (format!("x cert-authority {ED25519}"), "cert-authority is not supported"),
            (format!("x valid-after=\"20260101\" {ED25519}"), "valid-after= is not supported"),
            (format!("x valid-before=\"20260101\" {ED25519}"), "valid-before= is not supported"),
            (format!("x no-touch-required {ED25519}"), "unknown option"),
            (format!("x namespaces=provision-dispatcher {ED25519}"), "quoted list"),
            ("x ssh-ed25519 AAAA".to_owned(), "not an OpenSSH public key"),
            ("x".to_owned(), "no key"),
        ];
        for (text, wanted) in cases {
            let err = parse(&format!("# first\n{text}")).unwrap_err();
            assert!(err.starts_with("line 2: ") && err.contains(wanted), "{text}: {err}");
        }
    }

    #[test]
    fn patterns_match_as_openssh_does() {
        assert!(match_list("provision-dispatcher", "provision-dispatcher"));
        assert!(match_list("provision-dispatcher@abc", "provision-dispatcher@*"));
        assert!(!match_list("provision-dispatcher", "provision-dispatcher@*"));
        assert!(match_list("provision-dispatcher", "file,provision-*"));
        assert!(!match_list("provision-dispatcher@abc", "provision-*,!provision-dispatcher@abc"));
        assert!(match_list("ab", "a?"));
        assert!(!match_list("abc", "a?"));
        assert!(match_list("aXbXc", "a*b*c"));
        assert!(!match_list("", "?"));
        assert!(match_list("", "*"));
    }
}
