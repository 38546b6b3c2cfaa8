//! Trust (SPEC §6a): task media signed by the controller with stock OpenSSH
//! (`ssh-keygen -Y sign -n provision-dispatcher`), checked against the image's trust file
//! ([`signers`]) on the raw bytes before anything parses them; and what the machine says
//! about its own boot ([`firmware`]).
//!
//! Who signed: OpenSSH's `-Y verify` is told a principal; the dispatcher is not, so, like
//! `ssh-keygen -Y find-principals`, the signer is the first line of the trust file whose key
//! made the signature and whose `namespaces=` allow the signature's namespace.

pub mod firmware;
pub mod sign;
pub mod signers;
mod sshsig;

use std::fmt;
use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use ssh_key::{HashAlg, PublicKey};

use crate::issues::{printable, shorten, Code, Detail};
use crate::recipe::read::{read_capped, read_capped_from, ReadError};
use signers::{AllowedSigner, MAX_TRUST_FILE_BYTES};

/// The signature namespace of task media; `NAMESPACE@UUID` binds a recipe to one server.
pub const NAMESPACE: &str = "provision-dispatcher";

/// A signature is `FILE.sig` beside `FILE`.
pub const SIGNATURE_SUFFIX: &str = ".sig";

/// An Ed25519 or ECDSA signature is under 1 KiB in its armour; this leaves room and no more.
pub const MAX_SIGNATURE_BYTES: u64 = 8 * 1024;

/// The signer of a good signature, as status.json names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Signer {
    /// The principals field of the trust file's line, as written there.
    pub principal: String,
    /// As `ssh-keygen -l` prints it: `SHA256:` and unpadded base64.
    pub fingerprint: String,
    /// `provision-dispatcher`, or `provision-dispatcher@UUID` for a bound recipe.
    pub namespace: String,
}

/// The image's trust file, parsed.
#[derive(Debug, Clone)]
pub struct Trust {
    signers: Vec<AllowedSigner>,
}

impl Trust {
    /// Reads and parses the trust file: capped, a regular file, its last component not a
    /// symlink. The error says which file and why, for exit 78.
    pub fn load(path: &Path) -> Result<Trust, String> {
        let why = |e: String| format!("the trust file {}: {e}", path.display());
        let bytes = read_file(path, MAX_TRUST_FILE_BYTES).map_err(|e| why(e.to_string()))?;
        let text = std::str::from_utf8(&bytes).map_err(|_| why("is not UTF-8".into()))?;
        Trust::parse(text).map_err(why)
    }

    pub fn parse(text: &str) -> Result<Trust, String> {
        Ok(Trust { signers: signers::parse(text)? })
    }

    /// Checks `sig` for `content` (the file `name`, as read), for this machine (`machine`:
    /// its SMBIOS UUID in lower case, if known).
    pub fn verify(
        &self,
        name: &str,
        content: &[u8],
        sig: &SignatureFile,
        machine: Option<&str>,
    ) -> Result<Signer, Untrusted> {
        let untrusted = |why| Untrusted { file: name.to_owned(), why };
        let sig = decoded(name, sig)?;
        let fingerprint = sig.key.fingerprint(HashAlg::Sha256).to_string();
        let mut lines = self.signers.iter().filter(|s| s.key.key_data() == &sig.key).peekable();
        let Some(first) = lines.peek() else { return Err(untrusted(Why::UnknownKey(fingerprint))) };
        // Not text: none of the dispatcher's.
        let namespace = sig.namespace().ok_or_else(|| untrusted(Why::WrongNamespace { found: None }))?;
        // The bytes decide first: a changed file is a bad signature, whatever it claims.
        if !sig.verifies(&first.key, content) {
            return Err(untrusted(Why::BadSignature));
        }
        match namespace.strip_prefix(NAMESPACE) {
            Some("") => {}
            // A machine without an identity of its own is refused as one whose UUID is unknown.
            Some(bound) if bound.starts_with('@') => match (machine, machine.and_then(firmware::no_identity)) {
                (Some(uuid), Some(meaning)) => {
                    return Err(untrusted(Why::NoIdentity { uuid: uuid.to_owned(), meaning }))
                }
                // A UUID is read without regard to case (RFC 4122, 3): the same machine.
                (Some(uuid), None) if bound[1..].eq_ignore_ascii_case(uuid) => {}
                (this, _) => {
                    return Err(untrusted(Why::OtherMachine { this: this.map(str::to_owned), found: shown(namespace) }))
                }
            },
            _ => return Err(untrusted(Why::WrongNamespace { found: Some(shown(namespace)) })),
        }
        // The trust file's patterns match the namespace as signed, exactly, as OpenSSH does.
        let Some(line) = lines.find(|line| line.allows(namespace)) else {
            return Err(untrusted(Why::NamespaceNotAllowed { bound: namespace != NAMESPACE, found: shown(namespace) }));
        };
        Ok(Signer { principal: line.principals.clone(), fingerprint, namespace: namespace.to_owned() })
    }

    /// Checks every file (name, content, signature): all must be good. The signer is the
    /// first file's; the refusal names every file refused and why.
    pub fn verify_all(
        &self,
        files: &[(&str, &[u8], &SignatureFile)],
        machine: Option<&str>,
    ) -> Result<Signer, Refused> {
        let mut signer = None;
        let mut refused = Vec::new();
        for &(name, content, sig) in files {
            match self.verify(name, content, sig, machine) {
                Ok(good) => {
                    signer.get_or_insert(good);
                }
                Err(untrusted) => refused.push(untrusted),
            }
        }
        match signer {
            Some(signer) if refused.is_empty() => Ok(signer),
            _ => Err(Refused(refused)),
        }
    }
}

/// The files of a media that did not come with a good signature, each with why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused(pub Vec<Untrusted>);

impl Refused {
    /// One detail per file refused, about its signature.
    pub fn details(&self) -> Vec<Detail> {
        self.0.iter().map(Untrusted::detail).collect()
    }
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, untrusted) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{untrusted}")?;
        }
        Ok(())
    }
}

/// The signature in `sig`, the signature file of `name`, or why there is none.
fn decoded(name: &str, sig: &SignatureFile) -> Result<sshsig::Sshsig, Untrusted> {
    let untrusted = |why| Untrusted { file: name.to_owned(), why };
    let bytes = match sig {
        SignatureFile::Read(bytes) => bytes,
        SignatureFile::Missing => return Err(untrusted(Why::Missing)),
        SignatureFile::Unusable(reason) => return Err(untrusted(Why::NotASignature(reason.clone()))),
    };
    sshsig::decode(bytes).map_err(|reason| untrusted(Why::NotASignature(reason.into())))
}

/// What a signature says of itself, checked against no trust file: that it is a good
/// signature of `content` by the key it carries, in the dispatcher's namespace or bound to a
/// server (`NAMESPACE@UUID`, the UUID in either case). For media made elsewhere (`media build
/// --signatures`): a file changed after signing, or signed for another purpose, is refused
/// before it goes on the media. The signer has no principal: no trust file names it.
pub fn self_check(name: &str, content: &[u8], sig: &SignatureFile) -> Result<Signer, Untrusted> {
    let untrusted = |why| Untrusted { file: name.to_owned(), why };
    let sig = decoded(name, sig)?;
    let fingerprint = sig.key.fingerprint(HashAlg::Sha256).to_string();
    let namespace = sig.namespace().ok_or_else(|| untrusted(Why::WrongNamespace { found: None }))?;
    if !sig.verifies(&PublicKey::from(sig.key.clone()), content) {
        return Err(untrusted(Why::BadSignature));
    }
    match namespace.strip_prefix(NAMESPACE) {
        Some("") => {}
        // A UUID in either case, as the boot reads it (RFC 4122, 3).
        Some(bound) if bound.strip_prefix('@').is_some_and(|uuid| firmware::is_uuid(&uuid.to_ascii_lowercase())) => {}
        _ => return Err(untrusted(Why::WrongNamespace { found: Some(shown(namespace)) })),
    }
    Ok(Signer { principal: String::new(), fingerprint, namespace: namespace.to_owned() })
}

/// A `.sig` file, as the caller could open it.
#[derive(Debug)]
pub enum SignatureFile {
    Read(Vec<u8>),
    Missing,
    /// Opened but not usable: a symlink, not a regular file, too large, unreadable.
    Unusable(String),
}

impl SignatureFile {
    /// Reads the opened file (the caller opens it on the media, or without following a
    /// symlink), capped at [`MAX_SIGNATURE_BYTES`].
    pub fn read(opened: io::Result<impl Read>) -> SignatureFile {
        let file = match opened {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return SignatureFile::Missing,
            Err(e) => return SignatureFile::Unusable(e.to_string()),
        };
        match read_capped_from(file, 0, MAX_SIGNATURE_BYTES) {
            Ok(bytes) => SignatureFile::Read(bytes),
            Err(e) => SignatureFile::Unusable(e.to_string()),
        }
    }

    /// The signature of the file at `path`: `path.sig`, opened without following a symlink.
    pub fn beside(path: &Path) -> SignatureFile {
        SignatureFile::read(open_regular(&signature_path(path)))
    }
}

/// `FILE.sig` for `FILE`.
pub fn signature_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(SIGNATURE_SUFFIX);
    name.into()
}

/// A file that did not come with a good signature: which, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Untrusted {
    pub file: String,
    pub why: Why,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Why {
    Missing,
    NotASignature(String),
    /// By a key no line of the trust file holds (its fingerprint).
    UnknownKey(String),
    /// Not the signature of these bytes: changed after signing, or another file's.
    BadSignature,
    /// Not `provision-dispatcher` nor `provision-dispatcher@UUID` (the namespace found, if
    /// it is text).
    WrongNamespace {
        found: Option<String>,
    },
    /// The key's line does not allow the namespace found (`namespaces=`); `bound`: it was a
    /// machine's.
    NamespaceNotAllowed {
        bound: bool,
        found: String,
    },
    /// Bound to a server that is not this one (this one's UUID, if known; the namespace
    /// found).
    OtherMachine {
        this: Option<String>,
        found: String,
    },
    /// Bound to a server, and this one has no identity: its UUID is SMBIOS's for none
    /// ([`firmware::no_identity`]: what it means).
    NoIdentity {
        uuid: String,
        meaning: &'static str,
    },
}

impl Why {
    /// The detail's code: one per cause.
    pub fn code(&self) -> Code {
        match self {
            Why::Missing => Code::SignatureMissing,
            Why::NotASignature(_) => Code::NotASignature,
            Why::UnknownKey(_) => Code::UnknownKey,
            Why::BadSignature => Code::BadSignature,
            Why::WrongNamespace { .. } => Code::WrongNamespace,
            Why::NamespaceNotAllowed { .. } => Code::NamespaceNotAllowed,
            Why::OtherMachine { this: Some(_), .. } => Code::BoundToOtherMachine,
            Why::OtherMachine { this: None, .. } => Code::MachineUuidUnreadable,
            Why::NoIdentity { .. } => Code::MachineWithoutIdentity,
        }
    }
}

impl Untrusted {
    /// The detail of this refusal: about the signature file, `FILE.sig`.
    pub fn detail(&self) -> Detail {
        Detail::of_file(format!("{}{SIGNATURE_SUFFIX}", self.file), self.why.code(), self.to_string())
    }
}

impl fmt::Display for Untrusted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (file, sig) = (&self.file, format!("{}{SIGNATURE_SUFFIX}", self.file));
        match &self.why {
            Why::Missing => write!(f, "{file} is not signed: {sig} is missing"),
            Why::NotASignature(reason) => write!(f, "{sig} is not an SSH signature: {reason}"),
            Why::UnknownKey(fingerprint) => {
                write!(f, "{sig} is signed by a key the image does not trust ({fingerprint})")
            }
            Why::BadSignature => {
                write!(f, "{sig} is a bad signature of {file}: changed after signing, or another file's signature")
            }
            Why::WrongNamespace { found } => {
                write!(f, "{sig} is not for namespace {NAMESPACE} or {NAMESPACE}@UUID")?;
                match found {
                    Some(found) => write!(f, " (it is for {found})"),
                    None => f.write_str(" (its namespace is not text)"),
                }
            }
            Why::NamespaceNotAllowed { bound: false, .. } => {
                write!(f, "{sig} is unbound, but the trust file lets its key sign only bound recipes (namespaces=)")
            }
            Why::NamespaceNotAllowed { bound: true, found } => write!(
                f,
                "{sig} is bound to this machine ({found}), but the trust file does not let its key sign that namespace (namespaces=)"
            ),
            Why::OtherMachine { this: Some(uuid), found } => {
                write!(f, "{sig} is bound to another machine: it is for {found}, and this one is {uuid}")
            }
            Why::OtherMachine { this: None, found } => write!(
                f,
                "{sig} is bound to a machine ({found}), and this machine's SMBIOS UUID cannot be read"
            ),
            Why::NoIdentity { uuid, meaning } => write!(
                f,
                "{sig} is bound to a machine, and this machine has no identity: its SMBIOS UUID {uuid} means \"{meaning}\""
            ),
        }
    }
}

/// The most bytes of a signature's namespace a message shows: more than any namespace of the
/// dispatcher's (`provision-dispatcher@` and a UUID take 57).
const MAX_NAMESPACE_SHOWN: usize = 128;

/// A signature's namespace as messages show it: printable, and cut in the middle when longer
/// than any of the dispatcher's. It is the signer's word, not the recipe's.
fn shown(namespace: &str) -> String {
    let printable = printable(namespace);
    shorten(&printable, MAX_NAMESPACE_SHOWN, char::len_utf8).into_owned()
}

/// Reads a file of the machine (not of the media): its last component not a symlink, a
/// regular file (O_NONBLOCK: a FIFO cannot block the open), at most `cap` bytes.
pub fn read_file(path: &Path, cap: u64) -> io::Result<Vec<u8>> {
    read_capped(open_regular(path)?, cap).map_err(|e| match e {
        ReadError::Io(e) => e,
        e => io::Error::new(io::ErrorKind::InvalidData, e.to_string()),
    })
}

fn open_regular(path: &Path) -> io::Result<File> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => io::Error::new(io::ErrorKind::InvalidData, "is a symbolic link"),
            _ => e,
        })?;
    if !file.metadata()?.is_file() {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "is not a regular file"));
    }
    Ok(file)
}

#[cfg(test)]
mod tests;
