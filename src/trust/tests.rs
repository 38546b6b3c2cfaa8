//! Every form of a signature, each decided by this module and by the real
//! `ssh-keygen -Y verify` on the same files: both must agree on good and bad.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use super::*;
use ssh_key::PublicKey;

const THIS: &str = "4c4c4544-0042-3510-8052-b4c04f4d4e31";
const OTHER: &str = "00000000-1111-2222-3333-444444444444";
const NIL: &str = "00000000-0000-0000-0000-000000000000";
const NOT_SET: &str = "ffffffff-ffff-ffff-ffff-ffffffffffff";
const PRINCIPAL: &str = "ops@example.com";

struct Rig {
    dir: tempfile::TempDir,
}

impl Rig {
    fn new() -> Rig {
        let rig = Rig { dir: tempfile::tempdir().unwrap() };
        for (name, kind) in [("ed", "ed25519"), ("ec", "ecdsa"), ("stranger", "ed25519")] {
            let mut keygen = Command::new("ssh-keygen");
            keygen.args(["-q", "-N", "", "-C", name, "-t", kind, "-f"]).arg(rig.path(name));
            if kind == "ecdsa" {
                keygen.args(["-b", "256"]);
            }
            assert!(keygen.status().unwrap().success());
        }
        std::fs::write(rig.path("recipe.json"), "{\"task_target\": \"secret-marker.target\"}\n").unwrap();
        std::fs::write(rig.path("recipe.schema.json"), "{\"type\": \"object\"}\n").unwrap();
        rig
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn public(&self, key: &str) -> String {
        std::fs::read_to_string(self.path(&format!("{key}.pub"))).unwrap().trim().to_owned()
    }

    /// `ssh-keygen -Y sign` of `file` with `key` in `namespace`, extra options first.
    fn sign(&self, key: &str, namespace: &str, file: &str, options: &[&str]) {
        let _ = std::fs::remove_file(self.path(&format!("{file}.sig")));
        let status = Command::new("ssh-keygen")
            .args(["-q", "-Y", "sign"])
            .args(options)
            .arg("-f")
            .arg(self.path(key))
            .args(["-n", namespace])
            .arg(self.path(file))
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success());
    }

    fn trust(&self, text: &str) -> Trust {
        std::fs::write(self.path("allowed_signers"), text).unwrap();
        Trust::load(&self.path("allowed_signers")).unwrap()
    }

    fn ours(&self, trust: &Trust, file: &str) -> Result<Signer, Why> {
        self.ours_on(trust, file, Some(THIS))
    }

    /// As the dispatcher decides on the machine whose UUID is `machine`.
    fn ours_on(&self, trust: &Trust, file: &str, machine: Option<&str>) -> Result<Signer, Why> {
        let content = std::fs::read(self.path(file)).unwrap();
        let sig = SignatureFile::beside(&self.path(file));
        trust.verify(file, &content, &sig, machine).map_err(|e| e.why)
    }

    /// `ssh-keygen -Y verify` as the dispatcher would ask it on this machine: the principal
    /// known, the namespace the signature should have.
    fn openssh(&self, file: &str, namespace: &str) -> bool {
        self.openssh_as(file, namespace, PRINCIPAL)
    }

    fn openssh_as(&self, file: &str, namespace: &str, principal: &str) -> bool {
        let Ok(content) = std::fs::File::open(self.path(file)) else { return false };
        Command::new("ssh-keygen")
            .args(["-Y", "verify", "-f"])
            .arg(self.path("allowed_signers"))
            .args(["-I", principal, "-n", namespace, "-s"])
            .arg(self.path(&format!("{file}.sig")))
            .stdin(content)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap()
            .success()
    }
}

fn bound() -> String {
    format!("{NAMESPACE}@{THIS}")
}

#[test]
fn good_signatures_agree_with_ssh_keygen() {
    let rig = Rig::new();
    let trust = rig.trust(&format!("{PRINCIPAL} {}\n{PRINCIPAL} {}\n", rig.public("ed"), rig.public("ec")));
    for (key, options) in [("ed", &[][..]), ("ed", &["-O", "hashalg=sha256"][..]), ("ec", &[][..])] {
        rig.sign(key, NAMESPACE, "recipe.json", options);
        let signer = rig.ours(&trust, "recipe.json").unwrap_or_else(|e| panic!("{key} {options:?}: {e:?}"));
        assert!(rig.openssh("recipe.json", NAMESPACE), "{key} {options:?}");
        assert_eq!(signer.principal, PRINCIPAL);
        assert_eq!(signer.namespace, NAMESPACE);
        let listed = Command::new("ssh-keygen").arg("-lf").arg(rig.path(&format!("{key}.pub"))).output().unwrap();
        let listed = String::from_utf8(listed.stdout).unwrap();
        assert_eq!(listed.split_whitespace().nth(1), Some(signer.fingerprint.as_str()), "as ssh-keygen -l prints it");
    }
    rig.sign("ed", &bound(), "recipe.json", &[]);
    assert_eq!(rig.ours(&trust, "recipe.json").unwrap().namespace, bound());
    assert!(rig.openssh("recipe.json", &bound()));
}

#[test]
fn bad_signatures_agree_with_ssh_keygen() {
    let rig = Rig::new();
    let trust = rig.trust(&format!("{PRINCIPAL} {}\n", rig.public("ed")));
    let sig = rig.path("recipe.json.sig");
    let refused = |why: Why, namespace: &str| {
        assert_eq!(rig.ours(&trust, "recipe.json").unwrap_err(), why);
        assert!(!rig.openssh("recipe.json", namespace), "ssh-keygen accepted what we refused: {why:?}");
    };
    let not_a_signature = |reason: &str| Why::NotASignature(reason.into());

    rig.sign("ed", NAMESPACE, "recipe.json", &[]);
    let good = std::fs::read_to_string(&sig).unwrap();
    std::fs::write(&sig, &good[..good.len() / 2]).unwrap();
    refused(not_a_signature("it is not in SSH SIGNATURE armour"), NAMESPACE);
    let lines: Vec<&str> = good.lines().collect();
    let shortened = [&lines[..2], &lines[lines.len() - 1..]].concat().join("\n");
    std::fs::write(&sig, shortened).unwrap();
    refused(not_a_signature("it is truncated or malformed"), NAMESPACE);
    std::fs::write(&sig, good.replace("SSH SIGNATURE", "PGP SIGNATURE")).unwrap();
    refused(not_a_signature("it is not in SSH SIGNATURE armour"), NAMESPACE);
    std::fs::write(&sig, with_hash_algorithm(&good, "sha512", "sha999")).unwrap();
    refused(not_a_signature("its hash or key algorithm is unknown"), NAMESPACE);

    rig.sign("ed", "file", "recipe.json", &[]);
    refused(Why::WrongNamespace { found: Some("file".into()) }, NAMESPACE);
    rig.sign("ed", &format!("{NAMESPACE}@{OTHER}"), "recipe.json", &[]);
    refused(Why::OtherMachine { this: Some(THIS.into()), found: format!("{NAMESPACE}@{OTHER}") }, &bound());
    rig.sign("stranger", NAMESPACE, "recipe.json", &[]);
    let stranger = PublicKey::from_openssh(&rig.public("stranger")).unwrap();
    refused(Why::UnknownKey(stranger.fingerprint(HashAlg::Sha256).to_string()), NAMESPACE);

    // The schema's signature beside the recipe: another file's.
    rig.sign("ed", NAMESPACE, "recipe.schema.json", &[]);
    std::fs::copy(rig.path("recipe.schema.json.sig"), &sig).unwrap();
    refused(Why::BadSignature, NAMESPACE);
    // The recipe changed after signing.
    rig.sign("ed", NAMESPACE, "recipe.json", &[]);
    std::fs::write(rig.path("recipe.json"), "{\"task_target\": \"other.target\"}\n").unwrap();
    refused(Why::BadSignature, NAMESPACE);

    std::fs::remove_file(&sig).unwrap();
    refused(Why::Missing, NAMESPACE);
}

/// A key of a type no trust file line can hold (RSA) is still named by its fingerprint.
#[test]
fn a_key_of_another_type_is_named_by_its_fingerprint() {
    let rig = Rig::new();
    let trust = rig.trust(&format!("{PRINCIPAL} {}\n", rig.public("ed")));
    let rsa = rig.path("rsa");
    let keygen = Command::new("ssh-keygen").args(["-q", "-N", "", "-t", "rsa", "-b", "2048", "-f"]).arg(&rsa).status();
    assert!(keygen.unwrap().success());
    rig.sign("rsa", NAMESPACE, "recipe.json", &[]);
    let key = PublicKey::from_openssh(&rig.public("rsa")).unwrap();
    assert_eq!(
        rig.ours(&trust, "recipe.json").unwrap_err(),
        Why::UnknownKey(key.fingerprint(HashAlg::Sha256).to_string())
    );
    assert!(!rig.openssh("recipe.json", NAMESPACE));
}

#[test]
fn a_key_for_bound_recipes_signs_only_bound_ones() {
    let rig = Rig::new();
    let trust = rig.trust(&format!("{PRINCIPAL} namespaces=\"{NAMESPACE}@*\" {}\n", rig.public("ed")));
    rig.sign("ed", NAMESPACE, "recipe.json", &[]);
    let found = NAMESPACE.to_owned();
    assert_eq!(rig.ours(&trust, "recipe.json").unwrap_err(), Why::NamespaceNotAllowed { bound: false, found });
    assert!(!rig.openssh("recipe.json", NAMESPACE));
    rig.sign("ed", &bound(), "recipe.json", &[]);
    assert_eq!(rig.ours(&trust, "recipe.json").unwrap().namespace, bound());
    assert!(rig.openssh("recipe.json", &bound()));
    // Rotation: the old key and the new one, two lines, both trusted.
    let both = rig.trust(&format!("{PRINCIPAL} {}\n{PRINCIPAL} {}\n", rig.public("stranger"), rig.public("ed")));
    for key in ["ed", "stranger"] {
        rig.sign(key, NAMESPACE, "recipe.json", &[]);
        assert!(rig.ours(&both, "recipe.json").is_ok(), "{key}");
    }
}

/// SMBIOS's UUIDs for a machine without one (issue 31, item 10): a recipe bound to them would
/// run on every machine that has none, so no bound recipe runs there, as where the UUID
/// cannot be read. Unbound recipes still do.
#[test]
fn a_machine_without_an_identity_runs_no_bound_recipe() {
    let rig = Rig::new();
    let trust = rig.trust(&format!("{PRINCIPAL} {}\n", rig.public("ed")));
    for (uuid, meaning) in [(NIL, "no ID"), (NOT_SET, "not set")] {
        rig.sign("ed", &format!("{NAMESPACE}@{uuid}"), "recipe.json", &[]);
        assert!(rig.openssh("recipe.json", &format!("{NAMESPACE}@{uuid}")), "a good signature, for OpenSSH");
        let why = rig.ours_on(&trust, "recipe.json", Some(uuid)).unwrap_err();
        assert_eq!(why, Why::NoIdentity { uuid: uuid.into(), meaning });
        let said = Untrusted { file: "recipe.json".into(), why }.to_string();
        assert!(said.contains("this machine has no identity") && said.contains(meaning), "{said}");
        assert_eq!(
            rig.ours_on(&trust, "recipe.json", None).unwrap_err(),
            Why::OtherMachine { this: None, found: format!("{NAMESPACE}@{uuid}") },
            "as on a machine whose UUID cannot be read"
        );
        rig.sign("ed", NAMESPACE, "recipe.json", &[]);
        assert_eq!(rig.ours_on(&trust, "recipe.json", Some(uuid)).unwrap().namespace, NAMESPACE);
    }
    // Bound to a machine without an identity, on a machine with one: another machine's.
    rig.sign("ed", &format!("{NAMESPACE}@{NIL}"), "recipe.json", &[]);
    let found = format!("{NAMESPACE}@{NIL}");
    assert_eq!(rig.ours(&trust, "recipe.json").unwrap_err(), Why::OtherMachine { this: Some(THIS.into()), found });
}

/// Issue 39: the machine's UUID in the namespace is read without regard to case (RFC 4122):
/// upper case is this machine. The namespace is kept as signed, and `ssh-keygen -Y verify`
/// asked for it agrees.
#[test]
fn an_upper_case_uuid_binds_to_this_machine() {
    let rig = Rig::new();
    let trust = rig.trust(&format!("{PRINCIPAL} {}\n", rig.public("ed")));
    let upper = format!("{NAMESPACE}@{}", THIS.to_uppercase());
    rig.sign("ed", &upper, "recipe.json", &[]);
    assert_eq!(rig.ours(&trust, "recipe.json").unwrap().namespace, upper);
    assert!(rig.openssh("recipe.json", &upper));
    let other = format!("{NAMESPACE}@{}", OTHER.to_uppercase());
    rig.sign("ed", &other, "recipe.json", &[]);
    assert_eq!(
        rig.ours(&trust, "recipe.json").unwrap_err(),
        Why::OtherMachine { this: Some(THIS.into()), found: other }
    );
}

#[test]
fn each_cause_has_its_code_and_names_the_signature_file() {
    let causes = [
        (Why::Missing, "signatureMissing"),
        (Why::NotASignature("x".into()), "notASignature"),
        (Why::UnknownKey("SHA256:x".into()), "unknownKey"),
        (Why::BadSignature, "badSignature"),
        (Why::WrongNamespace { found: None }, "wrongNamespace"),
        (Why::NamespaceNotAllowed { bound: true, found: bound() }, "namespaceNotAllowed"),
        (Why::OtherMachine { this: Some(THIS.into()), found: bound() }, "boundToOtherMachine"),
        (Why::OtherMachine { this: None, found: bound() }, "machineUuidUnreadable"),
        (Why::NoIdentity { uuid: NIL.into(), meaning: "no ID" }, "machineWithoutIdentity"),
    ];
    for (why, code) in causes {
        let untrusted = Untrusted { file: "recipe.schema.json".into(), why };
        let detail = untrusted.detail();
        assert_eq!((detail.code.as_str(), detail.file.as_deref()), (code, Some("recipe.schema.json.sig")));
        assert_eq!(detail.message, untrusted.to_string());
    }
    // A namespace shown is printable and bounded: it is the signer's, and may hold anything.
    let found = super::shown(&format!("{NAMESPACE}@\u{1b}[2J{}", "x".repeat(10_000)));
    assert!(found.len() <= 128 && found.contains("\\u001b[2J"), "{found}");
}

#[test]
fn signature_files_are_read_bounded_and_never_through_a_symlink() {
    let rig = Rig::new();
    let trust = rig.trust(&format!("{PRINCIPAL} {}\n", rig.public("ed")));
    rig.sign("ed", NAMESPACE, "recipe.schema.json", &[]);
    std::os::unix::fs::symlink(rig.path("recipe.schema.json.sig"), rig.path("recipe.json.sig")).unwrap();
    assert_eq!(rig.ours(&trust, "recipe.json").unwrap_err(), Why::NotASignature("is a symbolic link".into()));
    std::fs::remove_file(rig.path("recipe.json.sig")).unwrap();
    std::fs::write(rig.path("recipe.json.sig"), vec![b'A'; MAX_SIGNATURE_BYTES as usize + 1]).unwrap();
    let Err(Why::NotASignature(reason)) = rig.ours(&trust, "recipe.json") else { panic!("oversized accepted") };
    assert!(reason.contains("larger than 8192 bytes"), "{reason}");
    std::fs::remove_file(rig.path("recipe.json.sig")).unwrap();
    std::fs::create_dir(rig.path("recipe.json.sig")).unwrap();
    assert_eq!(rig.ours(&trust, "recipe.json").unwrap_err(), Why::NotASignature("is not a regular file".into()));
}

#[test]
fn messages_name_the_file_and_the_reason_and_nothing_of_its_content() {
    let untrusted = |why| Untrusted { file: "recipe.json".into(), why }.to_string();
    assert_eq!(untrusted(Why::Missing), "recipe.json is not signed: recipe.json.sig is missing");
    let other = Why::OtherMachine { this: Some(THIS.into()), found: format!("{NAMESPACE}@{OTHER}") };
    assert_eq!(
        untrusted(other),
        format!("recipe.json.sig is bound to another machine: it is for {NAMESPACE}@{OTHER}, and this one is {THIS}")
    );
    assert!(untrusted(Why::BadSignature).starts_with("recipe.json.sig is a bad signature of recipe.json"));
}

#[test]
fn an_unusable_trust_file_says_which_and_why() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("allowed_signers");
    assert!(Trust::load(&path).unwrap_err().contains("allowed_signers"));
    std::fs::write(&path, "ops@example.com ssh-ed25519 AAAA\n").unwrap();
    assert!(Trust::load(&path).unwrap_err().ends_with("line 1: the key is not an OpenSSH public key"));
    let rsa = dir.path().join("rsa");
    let keygen = Command::new("ssh-keygen").args(["-q", "-N", "", "-t", "rsa", "-b", "1024", "-f"]).arg(&rsa).status();
    assert!(keygen.unwrap().success());
    std::fs::write(&path, format!("ops {}", std::fs::read_to_string(rsa.with_extension("pub")).unwrap())).unwrap();
    let err = Trust::load(&path).unwrap_err();
    assert!(err.ends_with("line 1: key type ssh-rsa is not accepted (only ssh-ed25519, ecdsa-sha2-nistp256)"), "{err}");
    std::fs::write(&path, vec![b'#'; MAX_TRUST_FILE_BYTES as usize + 1]).unwrap();
    assert!(Trust::load(&path).unwrap_err().contains("larger than"));
    std::fs::remove_file(&path).unwrap();
    std::os::unix::fs::symlink("/etc/hostname", &path).unwrap();
    assert!(Trust::load(&path).unwrap_err().contains("symbolic link"));
}

/// The armoured signature with its hash algorithm's name replaced (same length), through
/// coreutils' base64.
fn with_hash_algorithm(armoured: &str, from: &str, to: &str) -> String {
    let body: String = armoured.lines().filter(|l| !l.starts_with("-----")).collect();
    let mut blob = base64(&["-d"], body.as_bytes());
    let at = blob.windows(from.len()).rposition(|w| w == from.as_bytes()).unwrap();
    blob[at..at + to.len()].copy_from_slice(to.as_bytes());
    let encoded = String::from_utf8(base64(&["-w", "70"], &blob)).unwrap();
    format!("-----BEGIN SSH SIGNATURE-----\n{encoded}-----END SSH SIGNATURE-----\n")
}

fn base64(args: &[&str], input: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut child = Command::new("base64").args(args).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    child.wait_with_output().unwrap().stdout
}

/// The fuzz target's seeds (`fuzz/corpus/signature/seed-*`: a trust file, NUL, a `.sig`) are
/// decided here as `ssh-keygen -Y verify` decides them: `seed-unbound`, `seed-bound` and
/// `seed-bound-only` are signatures by `ssh-keygen -Y sign` with the test-only key (`cargo
/// xtask fuzz` makes them), `seed-ecdsa` one by an ECDSA key made for it; `seed-form-*` are
/// those in the other forms OpenSSH accepts (issue 31, item 11: re-wrapped, on one line, bytes
/// after the footer, version 0, names ending in NUL, ...) and `seed-refused-*` in forms it
/// refuses (a wrong length prefix on the public key, a byte after the last field, CRLF),
/// made from them by rewriting the blob, so the fuzzer starts on both sides of the line.
#[test]
fn the_fuzz_seeds_are_decided_as_ssh_keygen_decides_them() {
    let content = b"{\"task_target\": \"FUZZMARK.target\"}\n";
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/signature");
    let rig = Rig { dir: tempfile::tempdir().unwrap() };
    std::fs::write(rig.path("recipe.json"), content).unwrap();
    let mut seeds: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .filter(|name| name.starts_with("seed-"))
        .collect();
    seeds.sort();
    assert!(seeds.len() >= 18, "{seeds:?}");
    for name in seeds {
        let seed = std::fs::read(dir.join(&name)).unwrap();
        let split = seed.iter().position(|&b| b == 0).unwrap();
        let trust = rig.trust(std::str::from_utf8(&seed[..split]).unwrap());
        std::fs::write(rig.path("recipe.json.sig"), &seed[split + 1..]).unwrap();
        let namespace = if name.starts_with("seed-bound") { bound() } else { NAMESPACE.to_owned() };
        let ours = rig.ours(&trust, "recipe.json");
        let accepted = !name.starts_with("seed-refused-");
        assert_eq!(ours.is_ok(), accepted, "{name}: {ours:?}");
        assert_eq!(rig.openssh_as("recipe.json", &namespace, "fuzz@example.invalid"), accepted, "{name}, ssh-keygen");
        if let Ok(signer) = ours {
            assert_eq!((signer.principal.as_str(), signer.namespace), ("fuzz@example.invalid", namespace), "{name}");
        }
    }
}
