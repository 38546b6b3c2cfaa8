//! Arbitrary bytes as an image's trust file and a task ISO's `.sig` (split at the first NUL):
//! the allowed_signers parser and the SSHSIG check of SPEC §6a. Beyond "never panics": a
//! signature is accepted only in the dispatcher's namespaces, for this machine when bound,
//! with a fingerprint as `ssh-keygen -l` prints it; a refusal names the file and never
//! quotes the signed content; the `.sig` reads the same from a file as from memory, capped;
//! and, as in OpenSSH, nothing after the armour's footer counts: bytes appended that cannot
//! complete a footer leave the verdict as it was. The seeds hold the forms OpenSSH accepts
//! (re-wrapped, on one line, bytes after the footer, version 0, names ending in NUL, ...) and
//! some it refuses (a wrong length prefix, a byte after the last field, CRLF).

#![no_main]

use std::io::{Seek, Write};

use libfuzzer_sys::fuzz_target;
use provision_dispatcher::trust::{SignatureFile, Trust, MAX_SIGNATURE_BYTES, NAMESPACE};

/// What the seeds sign (`cargo xtask fuzz` makes them with the test-only key).
const CONTENT: &[u8] = b"{\"task_target\": \"FUZZMARK.target\"}\n";
const THIS: &str = "4c4c4544-0042-3510-8052-b4c04f4d4e31";

fuzz_target!(|data: &[u8]| {
    let split = data.iter().position(|&b| b == 0).unwrap_or(data.len());
    let (trust_text, sig) = (&data[..split], data.get(split + 1..).unwrap_or_default());
    let Ok(trust_text) = std::str::from_utf8(trust_text) else { return };
    let Ok(trust) = Trust::parse(trust_text) else { return };
    let from_file = {
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(sig).unwrap();
        file.rewind().unwrap();
        SignatureFile::read(Ok(file))
    };
    match (&from_file, sig.len() as u64 > MAX_SIGNATURE_BYTES) {
        (SignatureFile::Read(bytes), false) => assert_eq!(bytes, sig),
        (SignatureFile::Unusable(_), true) => {}
        (other, too_large) => panic!("{} bytes read as {other:?} (over the cap: {too_large})", sig.len()),
    }
    let verdict = trust.verify("recipe.json", CONTENT, &from_file, Some(THIS));
    match &verdict {
        Ok(signer) => {
            let bound = format!("{NAMESPACE}@{THIS}");
            assert!(signer.namespace == NAMESPACE || signer.namespace == bound, "{signer:?}");
            assert!(signer.fingerprint.starts_with("SHA256:") && signer.fingerprint.len() == 50, "{signer:?}");
        }
        Err(untrusted) => {
            let message = untrusted.to_string();
            assert!(message.starts_with("recipe.json"), "{message}");
            assert!(!message.contains("FUZZMARK"), "the content was quoted: {message}");
        }
    }
    // No `-`: the footer ends in one, so these bytes cannot finish a footer begun before them.
    let appended = [sig, &b"\xff\x00 "[..]].concat();
    if appended.len() as u64 <= MAX_SIGNATURE_BYTES {
        let again = trust.verify("recipe.json", CONTENT, &SignatureFile::Read(appended), Some(THIS));
        assert_eq!(verdict.map_err(|e| e.why), again.map_err(|e| e.why), "bytes after the signature counted");
    }
});
