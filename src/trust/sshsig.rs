//! A `.sig` read as `ssh-keygen -Y verify` reads it: OpenSSH 9.2's `sshsig.c` (Debian 12's, the
//! image's and the tests'), each rule below one of its checks, so that the dispatcher accepts
//! exactly the signatures OpenSSH accepts.
//!
//! - The armour (`sshsig_dearmor`): the header line from the first byte, ended by LF (9.5 and
//!   later also take CRLF there; 9.2 does not); the body up to the first LF followed by the
//!   footer; nothing after the footer is read. The body is base64 as `b64_pton` reads it, at
//!   any line width.
//! - The blob (`sshsig_wrap_verify`): every length-prefixed field holds exactly its value (the
//!   public key and the signature nothing more), and nothing follows the last field. ssh-key's
//!   own reader is not used for it: it ignores the rest of a length-prefixed field, so a wrong
//!   prefix on the public key went unnoticed.
//! - The check: the signed data holds an empty reserved field whatever the signature's says;
//!   the namespace and the names of the key type, its curve and the algorithms may end in one
//!   NUL, as OpenSSH reads them (C strings), and a plain key type may be given by its short
//!   name in any case (`ED25519`, as `sshkey_type_from_name` takes it). An Ed25519 `S` below 2^253 is taken modulo the group order, as
//!   OpenSSH's Ed25519 does; ed25519-dalek wants it reduced. An ECDSA integer may carry leading
//!   zeros; ssh-key wants none.

use std::cmp::Ordering;

use memchr::{memchr, memmem};
use ssh_encoding::{Decode, Encode};
use ssh_key::public::{EcdsaPublicKey, Ed25519PublicKey, KeyData};
use ssh_key::{Algorithm, EcdsaCurve, HashAlg, Mpint, PublicKey, Signature, SshSig};

const HEADER: &[u8] = b"-----BEGIN SSH SIGNATURE-----\n";
const FOOTER: &[u8] = b"\n-----END SSH SIGNATURE-----";
const MAGIC: &[u8] = b"SSHSIG";
/// The newest version OpenSSH reads; it takes any version up to it.
const VERSION: u32 = 1;
/// `SSHBUF_MAX_BIGNUM`: the largest integer OpenSSH reads, in bytes (one more for a leading
/// zero).
const MAX_BIGNUM_BYTES: usize = 2048;
/// The Ed25519 group order L = 2^252 + 27742317777372353535851937790883648493, little-endian.
const ED25519_ORDER: [u8; 32] = [
    0xed, 0xd3, 0xf5, 0x5c, 0x1a, 0x63, 0x12, 0x58, 0xd6, 0x9c, 0xf7, 0xa2, 0xde, 0xf9, 0xde, 0x14, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10,
];

/// Why a `.sig` is not a signature, in the refusal's words.
const NOT_ARMOURED: &str = "it is not in SSH SIGNATURE armour";
const MALFORMED: &str = "it is truncated or malformed";
const UNKNOWN_ALGORITHM: &str = "its hash or key algorithm is unknown";
const NEWER_VERSION: &str = "its SSHSIG version is newer than 1";

/// A signature blob, read: the key that claims to have made it, its namespace and hash
/// algorithm, and the signature field, read once the key is known (its form is the key's).
#[derive(Debug)]
pub struct Sshsig {
    pub key: KeyData,
    namespace: Vec<u8>,
    hash: HashAlg,
    signature: Vec<u8>,
}

impl Sshsig {
    /// The namespace, if it is text (nothing else can be one of the dispatcher's).
    pub fn namespace(&self) -> Option<&str> {
        std::str::from_utf8(&self.namespace).ok().filter(|namespace| !namespace.is_empty())
    }

    /// Whether `key` made this signature of `content` in its namespace.
    pub fn verifies(&self, key: &PublicKey, content: &[u8]) -> bool {
        let (Some(namespace), Some(signature)) = (self.namespace(), signature(&self.key, &self.signature)) else {
            return false;
        };
        SshSig::new(self.key.clone(), namespace, self.hash, signature)
            .is_ok_and(|sig| key.verify(namespace, content, &sig).is_ok())
    }
}

/// The signature in a `.sig` file's bytes, or why there is none.
pub fn decode(file: &[u8]) -> Result<Sshsig, &'static str> {
    let blob = dearmor(file)?;
    let mut fields = Fields(&blob);
    if fields.take(MAGIC.len()) != Some(MAGIC) {
        return Err(MALFORMED);
    }
    if fields.u32().ok_or(MALFORMED)? > VERSION {
        return Err(NEWER_VERSION);
    }
    let key = fields.string().ok_or(MALFORMED)?;
    let namespace = fields.cstring().ok_or(MALFORMED)?;
    // Reserved: read, and not signed (OpenSSH signs an empty one, whatever this one holds).
    fields.string().ok_or(MALFORMED)?;
    let hash = fields.cstring().ok_or(MALFORMED)?;
    let signature = fields.string().ok_or(MALFORMED)?;
    fields.end().ok_or(MALFORMED)?;
    let hash = match hash {
        b"sha256" => HashAlg::Sha256,
        b"sha512" => HashAlg::Sha512,
        _ => return Err(UNKNOWN_ALGORITHM),
    };
    Ok(Sshsig { key: public_key(key)?, namespace: namespace.to_vec(), hash, signature: signature.to_vec() })
}

/// The blob inside the armour.
fn dearmor(file: &[u8]) -> Result<Vec<u8>, &'static str> {
    let rest = file.strip_prefix(HEADER).ok_or(NOT_ARMOURED)?;
    let body = &rest[..memmem::find(rest, FOOTER).ok_or(NOT_ARMOURED)?];
    // Read as a C string: a NUL only as the last byte, where the string ends anyway.
    let body = match memchr(0, body) {
        None => body,
        Some(at) if at + 1 == body.len() => &body[..at],
        Some(_) => return Err(MALFORMED),
    };
    base64(body).ok_or(MALFORMED)
}

/// Base64 as OpenSSH's `b64_pton` reads it: whitespace (C's `isspace`) skipped anywhere; `=`
/// only after two or three characters of a group (two after two), then only whitespace; the
/// bits past the last whole byte zero.
fn base64(text: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len() / 4 * 3);
    let (mut bits, mut held, mut count) = (0u32, 0u32, 0usize);
    let mut rest = text.iter().copied().filter(|&c| !is_space(c));
    let padded = loop {
        match rest.next() {
            None => break false,
            Some(b'=') => break true,
            Some(c) => {
                bits = bits << 6 | base64_value(c)?;
                held += 6;
                if held >= 8 {
                    held -= 8;
                    out.push((bits >> held) as u8);
                    bits &= (1 << held) - 1;
                }
                count += 1;
            }
        }
    };
    let whole = match (padded, count % 4) {
        (false, 0) => true,
        (true, 2) => rest.next() == Some(b'=') && rest.next().is_none(),
        (true, 3) => rest.next().is_none(),
        _ => false,
    };
    (whole && bits == 0).then_some(out)
}

fn base64_value(c: u8) -> Option<u32> {
    let value = match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => return None,
    };
    Some(value.into())
}

/// C's `isspace` in the C locale.
fn is_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// The public key field as `sshkey_from_blob` reads it, for the key types a trust file can
/// hold; any other type as ssh-key reads it, for its fingerprint only (no trust file line
/// holds one).
fn public_key(blob: &[u8]) -> Result<KeyData, &'static str> {
    let mut fields = Fields(blob);
    let name = fields.cstring().ok_or(MALFORMED)?;
    // OpenSSH also takes a plain key type's short name, in any case.
    let key = if name == b"ssh-ed25519" || name.eq_ignore_ascii_case(b"ED25519") {
        let bytes = fields.string().and_then(|bytes| bytes.try_into().ok()).ok_or(MALFORMED)?;
        KeyData::Ed25519(Ed25519PublicKey(bytes))
    } else if name == b"ecdsa-sha2-nistp256" {
        if fields.cstring() != Some(b"nistp256") {
            return Err(MALFORMED);
        }
        // An uncompressed point only.
        let point = fields.string().filter(|point| point.len() == 65 && point[0] == 4).ok_or(MALFORMED)?;
        KeyData::Ecdsa(EcdsaPublicKey::from_sec1_bytes(point).map_err(|_| MALFORMED)?)
    } else {
        let mut rest = blob;
        let key = KeyData::decode(&mut rest).map_err(|e| match e {
            ssh_key::Error::AlgorithmUnknown
            | ssh_key::Error::AlgorithmUnsupported { .. }
            | ssh_key::Error::Encoding(ssh_encoding::Error::Label(_)) => UNKNOWN_ALGORITHM,
            _ => MALFORMED,
        })?;
        return if rest.is_empty() { Ok(key) } else { Err(MALFORMED) };
    };
    fields.end().ok_or(MALFORMED)?;
    Ok(key)
}

/// The signature field as OpenSSH reads it for `key` (`ssh_ed25519_verify`,
/// `ssh_ecdsa_verify`), in the one form ssh-key takes; `None` where OpenSSH refuses it.
fn signature(key: &KeyData, field: &[u8]) -> Option<Signature> {
    let mut fields = Fields(field);
    let name = fields.cstring()?;
    let (algorithm, data) = match key {
        KeyData::Ed25519(_) if name == b"ssh-ed25519" => {
            let mut bytes: [u8; 64] = fields.string()?.try_into().ok()?;
            reduce_ed25519_s((&mut bytes[32..]).try_into().ok()?)?;
            (Algorithm::Ed25519, bytes.to_vec())
        }
        KeyData::Ecdsa(EcdsaPublicKey::NistP256(_)) if name == b"ecdsa-sha2-nistp256" => {
            let mut integers = Fields(fields.string()?);
            let mut data = Vec::new();
            for _ in 0..2 {
                // Above 32 bytes an integer is past the group order: never a good signature.
                let integer = integers.bignum().filter(|integer| integer.len() <= 32)?;
                Mpint::from_positive_bytes(integer).ok()?.encode(&mut data).ok()?;
            }
            integers.end()?;
            (Algorithm::Ecdsa { curve: EcdsaCurve::NistP256 }, data)
        }
        _ => return None,
    };
    fields.end()?;
    Signature::new(algorithm, data).ok()
}

/// OpenSSH's Ed25519 takes any `S` below 2^253 (its top three bits clear) and reduces it
/// modulo the group order L; below 2^253 < 2L that is one subtraction at most.
fn reduce_ed25519_s(s: &mut [u8; 32]) -> Option<()> {
    if s[31] & 0xe0 != 0 {
        return None;
    }
    if s.iter().rev().cmp(ED25519_ORDER.iter().rev()) != Ordering::Less {
        let mut borrow = 0;
        for (byte, order) in s.iter_mut().zip(ED25519_ORDER) {
            let (difference, under) = byte.overflowing_sub(order);
            let (difference, under_again) = difference.overflowing_sub(borrow);
            *byte = difference;
            borrow = u8::from(under || under_again);
        }
    }
    Some(())
}

/// The fields of a blob, read as OpenSSH's `sshbuf` reads them.
struct Fields<'a>(&'a [u8]);

impl<'a> Fields<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (taken, rest) = self.0.split_at_checked(n)?;
        self.0 = rest;
        Some(taken)
    }

    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_be_bytes(self.take(4)?.try_into().ok()?))
    }

    fn string(&mut self) -> Option<&'a [u8]> {
        let len = self.u32()?;
        self.take(usize::try_from(len).ok()?)
    }

    /// `sshbuf_get_cstring`: a NUL only as the last byte, which ends the C string.
    fn cstring(&mut self) -> Option<&'a [u8]> {
        let string = self.string()?;
        match memchr(0, string) {
            None => Some(string),
            Some(at) if at + 1 == string.len() => Some(&string[..at]),
            Some(_) => None,
        }
    }

    /// `sshbuf_get_bignum2_bytes_direct`: not negative, not too long, leading zeros dropped.
    fn bignum(&mut self) -> Option<&'a [u8]> {
        let bytes = self.string()?;
        let negative = bytes.first().is_some_and(|first| first & 0x80 != 0);
        let too_long = bytes.len() > MAX_BIGNUM_BYTES + 1 || (bytes.len() == MAX_BIGNUM_BYTES + 1 && bytes[0] != 0);
        if negative || too_long {
            return None;
        }
        Some(&bytes[bytes.iter().take_while(|&&byte| byte == 0).count()..])
    }

    fn end(&self) -> Option<()> {
        self.0.is_empty().then_some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_is_read_as_openssh_reads_it() {
        assert_eq!(base64(b"U1NI\n U0lH\r\n"), Some(b"SSHSIG".to_vec()), "whitespace anywhere");
        assert_eq!(base64(b"U1NIUw=="), Some(b"SSHS".to_vec()));
        assert_eq!(base64(b"U1NIU1M="), Some(b"SSHSS".to_vec()));
        assert_eq!(base64(b"U1NIUw= \t=\n"), Some(b"SSHS".to_vec()), "whitespace between the pads");
        assert_eq!(base64(b""), Some(vec![]));
        for refused in [
            &b"U1NIUw"[..], // a partial group without padding
            b"U1NIUw=",     // one pad where two are due
            b"U1NIU1M==",   // two where one is due
            b"U1NI=",       // a pad at a group's start
            b"U1NIU=",      // or after one character
            b"U1NIUx==",    // bits past the last byte
            b"U1NIU1N=",
            b"U1NIUw==U1NI", // anything after the padding
            b"U1N\xa0I",     // not C's whitespace
            b"U1N-I",
        ] {
            assert_eq!(base64(refused), None, "{}", String::from_utf8_lossy(refused));
        }
        assert_eq!(base64(b"U1N\x0bI\x0c"), Some(b"SSH".to_vec()), "vertical tab and form feed are whitespace");
    }

    #[test]
    fn a_cstring_may_end_in_one_nul_and_hold_no_other() {
        let field = |bytes: &[u8]| [&(bytes.len() as u32).to_be_bytes()[..], bytes].concat();
        assert_eq!(Fields(&field(b"sha512\0")).cstring(), Some(&b"sha512"[..]));
        assert_eq!(Fields(&field(b"sha512")).cstring(), Some(&b"sha512"[..]));
        assert_eq!(Fields(&field(b"sha\x00512")).cstring(), None);
        assert_eq!(Fields(&field(b"sha512\0\0")).cstring(), None);
        assert_eq!(Fields(&field(b"sha")[..6]).cstring(), None, "truncated");
    }

    #[test]
    fn ecdsa_integers_are_read_as_openssh_reads_them() {
        let field = |bytes: &[u8]| [&(bytes.len() as u32).to_be_bytes()[..], bytes].concat();
        assert_eq!(Fields(&field(&[0, 0, 0x7f])).bignum(), Some(&[0x7f][..]), "leading zeros dropped");
        assert_eq!(Fields(&field(&[0x80])).bignum(), None, "negative");
        assert_eq!(Fields(&field(&[0; MAX_BIGNUM_BYTES + 1])).bignum(), Some(&[][..]));
        assert_eq!(Fields(&field(&[0; MAX_BIGNUM_BYTES + 2])).bignum(), None, "too long");
    }

    #[test]
    fn an_ed25519_s_is_reduced_once_and_refused_from_2_253() {
        let mut order = ED25519_ORDER;
        reduce_ed25519_s(&mut order).unwrap();
        assert_eq!(order, [0; 32], "L is 0");
        let mut below = ED25519_ORDER;
        below[0] -= 1;
        reduce_ed25519_s(&mut below).unwrap();
        assert_eq!(below, {
            let mut expected = ED25519_ORDER;
            expected[0] -= 1;
            expected
        });
        let mut top = [0xff; 32];
        top[31] = 0x1f;
        reduce_ed25519_s(&mut top).unwrap();
        // 2^253 - 1 - L, computed by hand: every byte of 0xff..ff minus L's, borrowing.
        let mut expected = [0u8; 32];
        let mut borrow = 0i16;
        for (i, slot) in expected.iter_mut().enumerate() {
            let minuend = if i == 31 { 0x1f } else { 0xff };
            let d = minuend - i16::from(ED25519_ORDER[i]) - borrow;
            borrow = i16::from(d < 0);
            *slot = d.rem_euclid(256) as u8;
        }
        assert_eq!(top, expected);
        let mut too_large = [0; 32];
        too_large[31] = 0x20;
        assert_eq!(reduce_ed25519_s(&mut too_large), None);
    }
}
