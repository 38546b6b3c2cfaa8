//! Signing task media in-process as `ssh-keygen -Y sign -f KEY -n NAMESPACE FILE` does (OpenSSH
//! 9.2): SHA-512, the SSHSIG armour wrapped at 70 columns, for keys of the types a trust file
//! takes. Ed25519 signatures are deterministic, so these are byte for byte ssh-keygen's; ECDSA
//! ones differ by their nonce (RFC 6979 here) and verify alike. A key encrypted with a
//! passphrase is refused: the controller's tool asks for no passphrase (sign with ssh-keygen,
//! or an HSM, and give the signatures to `media build --signatures`).

use std::path::Path;

use ssh_key::{Algorithm, EcdsaCurve, HashAlg, LineEnding, PrivateKey, SshSig};

use super::signers::ACCEPTED;

/// An OpenSSH private key is a few hundred bytes; this leaves room and no more.
const MAX_KEY_BYTES: u64 = 64 * 1024;

/// The private key in the OpenSSH file at `path`, or why it cannot sign (the key's bytes are
/// never quoted).
pub fn load_key(path: &Path) -> Result<PrivateKey, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("cannot read the key {}: {e}", path.display()))?;
    let bytes = crate::recipe::read::read_capped(file, MAX_KEY_BYTES)
        .map_err(|e| format!("cannot read the key {}: {e}", path.display()))?;
    let key = PrivateKey::from_openssh(&bytes)
        .map_err(|_| format!("the key {} is not an OpenSSH private key", path.display()))?;
    if key.is_encrypted() {
        return Err(format!(
            "the key {} is encrypted with a passphrase, which this command does not ask for: sign with `ssh-keygen -Y sign` (or the HSM) and give the .sig files with --signatures",
            path.display()
        ));
    }
    match key.algorithm() {
        Algorithm::Ed25519 | Algorithm::Ecdsa { curve: EcdsaCurve::NistP256 } => Ok(key),
        other => {
            Err(format!("the key {} is of type {}; only {ACCEPTED} sign task media", path.display(), other.as_str()))
        }
    }
}

/// The `.sig` file's bytes for `content` signed by `key` in `namespace`.
pub fn sign(key: &PrivateKey, namespace: &str, content: &[u8]) -> Result<Vec<u8>, String> {
    let signature = SshSig::sign(key, namespace, HashAlg::Sha512, content).map_err(|e| format!("cannot sign: {e}"))?;
    let armoured = signature.to_pem(LineEnding::LF).map_err(|e| format!("cannot sign: {e}"))?;
    Ok(armoured.into_bytes())
}
