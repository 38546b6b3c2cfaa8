//! SPEC §6a through the real binary: media signed with the real `ssh-keygen -Y sign`
//! (keys made here, in a temporary directory), the image's trust file, `check`, `render` and
//! `run --media DIR`, Secure Boot and lockdown read from a sysfs tree of the test's own.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::bus::{PrivateBus, SEED_TARGETS};
use common::machine::{example, media, Machine};
use common::{dispatcher, run, Run};
use provision_dispatcher::failure::Failure;
use serde_json::Value;

const THIS: &str = "4c4c4544-0042-3510-8052-b4c04f4d4e31";
const OTHER: &str = "00000000-1111-2222-3333-444444444444";
/// SMBIOS's UUIDs for a machine without one: "no ID" and "not set".
const NIL: &str = "00000000-0000-0000-0000-000000000000";
const NOT_SET: &str = "ffffffff-ffff-ffff-ffff-ffffffffffff";
const NS: &str = "provision-dispatcher";
/// In the recipe: must never reach any output.
const MARKER: &str = "MARKSECRET";

/// Keys, a trust file and a sysfs tree.
struct Controller {
    dir: tempfile::TempDir,
}

impl Controller {
    fn new() -> Controller {
        let c = Controller { dir: tempfile::tempdir().unwrap() };
        for key in ["trusted", "stranger"] {
            c.keygen(key, &["-t", "ed25519"]);
        }
        c.trust(&format!("ops@example.com {}", c.public("trusted")));
        let sys = c.sysfs();
        std::fs::create_dir_all(sys.join("firmware/efi/efivars")).unwrap();
        std::fs::write(
            sys.join("firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"),
            [6, 0, 0, 0, 1],
        )
        .unwrap();
        std::fs::create_dir_all(sys.join("kernel/security")).unwrap();
        std::fs::write(sys.join("kernel/security/lockdown"), "none [integrity] confidentiality\n").unwrap();
        std::fs::create_dir_all(sys.join("class/dmi/id")).unwrap();
        std::fs::write(sys.join("class/dmi/id/product_uuid"), THIS.to_uppercase() + "\n").unwrap();
        c
    }

    /// A key pair, `name` and `name.pub`, of the kind `ssh-keygen` options say.
    fn keygen(&self, name: &str, kind: &[&str]) {
        let status = Command::new("ssh-keygen")
            .args(["-q", "-N", "", "-C", name])
            .args(kind)
            .arg("-f")
            .arg(self.path(name))
            .status();
        assert!(status.unwrap().success());
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn sysfs(&self) -> PathBuf {
        self.path("sys")
    }

    fn public(&self, key: &str) -> String {
        std::fs::read_to_string(self.path(&format!("{key}.pub"))).unwrap().trim().to_owned()
    }

    fn trust(&self, text: &str) {
        std::fs::write(self.path("allowed_signers"), format!("{text}\n")).unwrap();
    }

    /// `ssh-keygen -Y sign -f KEY -n NAMESPACE FILE...`, as a controller does.
    fn sign(&self, key: &str, namespace: &str, files: &[PathBuf]) {
        for file in files {
            let _ = std::fs::remove_file(format!("{}.sig", file.display()));
        }
        let status = Command::new("ssh-keygen")
            .args(["-q", "-Y", "sign", "-f"])
            .arg(self.path(key))
            .args(["-n", namespace])
            .args(files)
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// `check` of a recipe against the trust file (the compiled-in schema needs no signature):
    /// whether its signature was accepted.
    fn check_signed(&self, recipe: &Path) -> bool {
        let mut cmd = dispatcher();
        cmd.arg("check").arg(recipe).args(["--format", "json", "--machine-uuid", THIS, "--allowed-signers"]);
        let out = run(cmd.arg(self.path("allowed_signers")));
        assert!(!out.stdout.contains(MARKER) && !out.stderr.contains(MARKER), "a recipe value in the report");
        match out.code {
            0 => true,
            77 => false,
            code => panic!("check exited {code}: {}", out.stdout),
        }
    }

    /// `check --format json` of a recipe for the machine `uuid` against the trust file.
    fn check_for(&self, recipe: &Path, uuid: &str) -> Value {
        let mut cmd = dispatcher();
        cmd.arg("check").arg(recipe).args(["--format", "json", "--machine-uuid", uuid, "--allowed-signers"]);
        let out = run(cmd.arg(self.path("allowed_signers")));
        serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", out.stdout))
    }

    fn check_signed_for(&self, recipe: &Path, uuid: &str) -> bool {
        self.check_for(recipe, uuid)["valid"] == true
    }

    /// `ssh-keygen -Y verify` of the recipe's signature, as the dispatcher would ask it.
    fn openssh_verifies(&self, recipe: &Path) -> bool {
        self.openssh_verifies_in(recipe, NS)
    }

    fn openssh_verifies_in(&self, recipe: &Path, namespace: &str) -> bool {
        let status = Command::new("ssh-keygen")
            .args(["-Y", "verify", "-f"])
            .arg(self.path("allowed_signers"))
            .args(["-I", "ops@example.com", "-n", namespace, "-s"])
            .arg(format!("{}.sig", recipe.display()))
            .stdin(std::fs::File::open(recipe).unwrap())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        status.unwrap().success()
    }

    fn sign_media(&self, key: &str, namespace: &str, media: &Path) {
        self.sign(key, namespace, &[media.join("recipe.json"), media.join("recipe.schema.json")]);
    }

    /// `run --media` with this trust file and sysfs, starting nothing unless a bus is given.
    fn dispatch(&self, machine: &Machine, media: &Path, bus: Option<&PrivateBus>) -> Run {
        let trust = self.path("allowed_signers");
        let mut extra = vec!["--allowed-signers", trust.to_str().unwrap()];
        let sysfs = self.sysfs();
        extra.extend(["--sysfs-root", sysfs.to_str().unwrap()]);
        if bus.is_none() {
            extra.push("--no-start");
        }
        machine.dispatch(media, bus, &extra)
    }
}

/// Spoils a signed media directory.
type Spoil = fn(&Controller, &Path);
/// Spoils the trust file.
type SpoilFile = fn(&Path);

fn marked_media() -> tempfile::TempDir {
    let mut recipe = example("seed-esxi");
    recipe["metadata"] = serde_json::json!({"owner": MARKER});
    media(&recipe)
}

/// A refusal (77) of `media`, for `file` because of `why`: a detail with `code` about
/// `file`'s signature, the recipe's digest recorded, the banner's next step the cause's.
fn assert_untrusted(machine: &Machine, media: &Path, out: &Run, file: &str, why: &str, code: &str) {
    assert_eq!(out.code, 77, "{why}: {}", out.stderr);
    let status = machine.status();
    assert_eq!(status["failure"], "untrusted_media", "{status}");
    assert_eq!(status["phase"], "media");
    assert_eq!(status["signature"], Value::Null);
    let message = status["message"].as_str().unwrap();
    assert!(message.contains(file) && message.contains(why), "wanted {file}, {why}: {message}");
    assert_eq!(status["recipe_sha256"], sha256(&media.join("recipe.json")), "tied to the recipe refused");
    let details = status["details"].as_array().unwrap();
    let sig = format!("{file}.sig");
    let detail = details.iter().find(|d| d["file"] == sig.as_str()).unwrap_or_else(|| panic!("{sig}: {status}"));
    assert_eq!((&detail["path"], &detail["code"]), (&Value::from(""), &Value::from(code)), "{status}");
    assert!(details.iter().all(|d| d["code"].as_str().is_some_and(|c| c.len() > 3)), "a code each: {status}");
    let banner = run(dispatcher().arg("report").arg("--status").arg(machine.state().join("status.json"))).stdout;
    let step = Failure::UntrustedMedia.next_step_for(details[0]["code"].as_str());
    assert!(banner.contains(&format!("next:       {step}")), "the cause's next step:\n{banner}");
    assert!(!machine.output().exists(), "nothing written");
    let text = std::fs::read_to_string(machine.state().join("status.json")).unwrap();
    for (what, text) in [("status.json", &text), ("stderr", &out.stderr), ("stdout", &out.stdout)] {
        assert!(!text.contains(MARKER), "a recipe value reached {what}");
    }
}

#[test]
fn without_a_trust_file_nothing_changes_and_the_firmware_is_recorded() {
    let c = Controller::new();
    let machine = Machine::new();
    let media = marked_media();
    let sysfs = c.sysfs();
    let out = machine.dispatch(media.path(), None, &["--no-start", "--sysfs-root", sysfs.to_str().unwrap()]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let status = machine.status();
    assert_eq!(status["signature"], Value::Null);
    assert_eq!(status["secure_boot"], true);
    assert_eq!(status["lockdown"], "integrity");
    let report = run(dispatcher().arg("report").arg("--status").arg(machine.state().join("status.json")));
    assert!(report.stdout.contains("trust:      secure boot on, lockdown integrity"), "{}", report.stdout);

    let bare = tempfile::tempdir().unwrap();
    let out = machine.dispatch(media.path(), None, &["--no-start", "--sysfs-root", bare.path().to_str().unwrap()]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    let status = machine.status();
    assert_eq!((&status["secure_boot"], &status["lockdown"]), (&Value::Null, &Value::Null), "not UEFI, no lockdown");
}

#[test]
fn signed_media_dispatches_and_names_its_signer() {
    let c = Controller::new();
    let bus = PrivateBus::with_units(SEED_TARGETS);
    let media = marked_media();
    c.sign_media("trusted", NS, media.path());
    let machine = Machine::new();
    let out = c.dispatch(&machine, media.path(), Some(&bus));
    assert_eq!(out.code, 0, "{}", out.stderr);
    let status = machine.status();
    assert_eq!(status["state"], "dispatched");
    assert_eq!(status["signature"]["principal"], "ops@example.com");
    assert_eq!(status["signature"]["namespace"], NS);
    let listed = Command::new("ssh-keygen").arg("-lf").arg(c.path("trusted.pub")).output().unwrap().stdout;
    let fingerprint = String::from_utf8(listed).unwrap().split_whitespace().nth(1).unwrap().to_owned();
    assert_eq!(status["signature"]["fingerprint"], fingerprint.as_str());
    assert_eq!(bus.starts().len(), 1);

    // Bound to this machine (its UUID is upper case in sysfs, lower case in the namespace).
    let bound = marked_media();
    c.sign_media("trusted", &format!("{NS}@{THIS}"), bound.path());
    let machine = Machine::new();
    let out = c.dispatch(&machine, bound.path(), None);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(machine.status()["signature"]["namespace"], format!("{NS}@{THIS}"));
}

/// Issue 39: a namespace with the machine's UUID in upper case (as dmidecode and many BMCs
/// print it) was refused as "bound to another machine (this one is ...)", naming the same
/// UUID in lower case. A UUID is read without regard to case (RFC 4122, section 3), so it is
/// this machine; the trust file's `namespaces=` patterns still match the namespace as signed,
/// exactly, as `ssh-keygen -Y verify` matches them, and a refusal shows the namespace found.
#[test]
fn an_upper_case_uuid_in_the_namespace_is_this_machine() {
    let c = Controller::new();
    let upper = format!("{NS}@{}", THIS.to_uppercase());
    let media = marked_media();
    let recipe = media.path().join("recipe.json");
    c.sign_media("trusted", &upper, media.path());
    let machine = Machine::new();
    let out = c.dispatch(&machine, media.path(), None);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(machine.status()["signature"]["namespace"], upper.as_str(), "as signed");
    assert!(c.openssh_verifies_in(&recipe, &upper), "ssh-keygen, asked for the namespace signed");
    for uuid in [THIS.to_owned(), THIS.to_uppercase()] {
        assert!(c.check_signed_for(&recipe, &uuid), "check --machine-uuid {uuid}");
    }
    let refused = c.check_for(&recipe, OTHER);
    assert!(refused["reason"].as_str().unwrap().contains(&format!("it is for {upper}, and this one is {OTHER}")));

    // A line that allows only this machine's namespace in lower case does not match it.
    c.trust(&format!("ops@example.com namespaces=\"{NS}@{THIS}\" {}", c.public("trusted")));
    assert!(!c.openssh_verifies_in(&recipe, &upper), "OpenSSH matches namespaces= exactly");
    let machine = Machine::new();
    let out = c.dispatch(&machine, media.path(), None);
    let why =
        format!("is bound to this machine ({upper}), but the trust file does not let its key sign that namespace");
    assert_untrusted(&machine, media.path(), &out, "recipe.json", &why, "namespaceNotAllowed");
}

/// Issue 39: a passing `check` said nothing of who signed. It names the principal, the key's
/// fingerprint and the namespace, as status.json does.
#[test]
fn a_passing_check_names_its_signer() {
    let c = Controller::new();
    let media = marked_media();
    let recipe = media.path().join("recipe.json");
    let bound = format!("{NS}@{THIS}");
    c.sign("trusted", &bound, std::slice::from_ref(&recipe));
    let report = c.check_for(&recipe, THIS);
    assert_eq!(report["valid"], true, "{report}");
    assert_eq!((&report["details"], &report["warnings"]), (&serde_json::json!([]), &serde_json::json!([])));
    let listed = Command::new("ssh-keygen").arg("-lf").arg(c.path("trusted.pub")).output().unwrap().stdout;
    let fingerprint = String::from_utf8(listed).unwrap().split_whitespace().nth(1).unwrap().to_owned();
    let signer = serde_json::json!({"principal": "ops@example.com", "fingerprint": fingerprint, "namespace": bound});
    assert_eq!(report["signature"], signer, "{report}");
    let mut human = dispatcher();
    human.arg("check").arg(&recipe).args(["--machine-uuid", THIS, "--allowed-signers"]).arg(c.path("allowed_signers"));
    let out = run(&mut human);
    assert_eq!(out.code, 0, "{}", out.stdout);
    let said = format!("recipe.json: signed by ops@example.com, key {fingerprint}, namespace {bound}\n");
    assert!(out.stdout.contains(&said), "{}", out.stdout);
    let unsigned = run(dispatcher().arg("check").arg(&recipe).args(["--format", "json"]));
    assert_eq!(unsigned.stdout.trim_end(), r#"{"valid":true,"details":[],"warnings":[]}"#, "without a trust file");
}

#[test]
fn anything_short_of_two_good_signatures_is_77_with_nothing_written_or_started() {
    let c = Controller::new();
    let bus = PrivateBus::with_units(SEED_TARGETS);
    let other_machine = format!("bound to another machine: it is for {NS}@{OTHER}, and this one is {THIS}");
    let cases: [(&str, &str, &str, Spoil); 8] = [
        ("recipe.json", "recipe.json.sig is missing", "signatureMissing", |_, m| {
            std::fs::remove_file(m.join("recipe.json.sig")).unwrap()
        }),
        ("recipe.schema.json", "recipe.schema.json.sig is missing", "signatureMissing", |_, m| {
            std::fs::remove_file(m.join("recipe.schema.json.sig")).unwrap()
        }),
        ("recipe.json", "bad signature", "badSignature", |_, m| {
            let text = std::fs::read_to_string(m.join("recipe.json")).unwrap();
            std::fs::write(m.join("recipe.json"), text.replace("install-esxi", "install-linux")).unwrap();
        }),
        ("recipe.json", "bad signature", "badSignature", |_, m| {
            std::fs::copy(m.join("recipe.schema.json.sig"), m.join("recipe.json.sig")).unwrap();
        }),
        ("recipe.json", "a key the image does not trust", "unknownKey", |c, m| c.sign_media("stranger", NS, m)),
        ("recipe.json", &other_machine, "boundToOtherMachine", |c, m| {
            c.sign_media("trusted", &format!("{NS}@{OTHER}"), m)
        }),
        (
            "recipe.json",
            "not for namespace provision-dispatcher or provision-dispatcher@UUID (it is for file)",
            "wrongNamespace",
            |c, m| c.sign_media("trusted", "file", m),
        ),
        ("recipe.json", "is a symbolic link", "notASignature", |_, m| {
            std::fs::rename(m.join("recipe.json.sig"), m.join("elsewhere.sig")).unwrap();
            std::os::unix::fs::symlink("elsewhere.sig", m.join("recipe.json.sig")).unwrap();
        }),
    ];
    for (file, why, code, spoil) in cases {
        let media = marked_media();
        c.sign_media("trusted", NS, media.path());
        spoil(&c, media.path());
        let machine = Machine::new();
        let out = c.dispatch(&machine, media.path(), Some(&bus));
        assert_untrusted(&machine, media.path(), &out, file, why, code);
    }
    assert!(bus.starts().is_empty(), "nothing started");
    // A key the trust file keeps for bound recipes cannot sign an unbound one.
    c.trust(&format!("ops@example.com namespaces=\"{NS}@*\" {}", c.public("trusted")));
    let media = marked_media();
    c.sign_media("trusted", NS, media.path());
    let machine = Machine::new();
    let out = c.dispatch(&machine, media.path(), None);
    assert_untrusted(&machine, media.path(), &out, "recipe.json", "only bound recipes", "namespaceNotAllowed");
    // Bound, on a machine whose UUID cannot be read.
    c.trust(&format!("ops@example.com {}", c.public("trusted")));
    c.sign_media("trusted", &format!("{NS}@{THIS}"), media.path());
    std::fs::remove_file(c.sysfs().join("class/dmi/id/product_uuid")).unwrap();
    let machine = Machine::new();
    let out = c.dispatch(&machine, media.path(), None);
    let why = format!("is bound to a machine ({NS}@{THIS}), and this machine's SMBIOS UUID cannot be read");
    assert_untrusted(&machine, media.path(), &out, "recipe.json", &why, "machineUuidUnreadable");
}

fn sha256(file: &Path) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(std::fs::read(file).unwrap()).iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn an_unusable_trust_file_is_78_before_any_wait() {
    let c = Controller::new();
    let media = marked_media();
    c.sign_media("trusted", NS, media.path());
    let spoilers: [(&str, SpoilFile); 3] = [
        ("line 1", |p| std::fs::write(p, "ops@example.com cert-authority ssh-ed25519 AAAA\n").unwrap()),
        ("not a regular file", |p| {
            std::fs::remove_file(p).unwrap();
            std::fs::create_dir(p).unwrap();
        }),
        ("symbolic link", |p| {
            std::fs::remove_dir(p).unwrap();
            std::os::unix::fs::symlink("/etc/hostname", p).unwrap();
        }),
    ];
    for (why, spoil) in spoilers {
        spoil(&c.path("allowed_signers"));
        let machine = Machine::new();
        let out = c.dispatch(&machine, Path::new("/nonexistent/task.iso"), None);
        assert_eq!(out.code, 78, "{why}: {}", out.stderr);
        let status = machine.status();
        assert_eq!(status["failure"], "trust_file_unusable");
        assert_eq!(status["phase"], "media");
        assert!(status["message"].as_str().unwrap().contains(why), "{status}");
        assert_eq!(status["media"], Value::Null, "it did not look for the media");
        // The image's fault, whatever the job: no recipe was read, so none is named.
        assert_eq!(status["recipe_sha256"], Value::Null);
        assert_eq!(status["details"][0]["code"], "trustFileUnusable", "{status}");
        assert_eq!(status["details"][0]["file"], c.path("allowed_signers").to_str().unwrap(), "{status}");
        assert!(status["details"][0]["message"].as_str().unwrap().contains(why), "{status}");
    }
}

/// The controller checks what it signed before it attaches it.
#[test]
fn check_and_render_verify_what_the_controller_signed() {
    let c = Controller::new();
    let media = marked_media();
    let (recipe, schema) = (media.path().join("recipe.json"), media.path().join("recipe.schema.json"));
    let trust = c.path("allowed_signers");
    let check = |extra: &[&str]| {
        let mut cmd = dispatcher();
        cmd.arg("check").arg(&recipe).args(["--format", "json", "--allowed-signers"]).arg(&trust).args(extra);
        let out = run(&mut cmd);
        assert!(!out.stdout.contains(MARKER));
        let report: Value = serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", out.stdout));
        (out.code, report)
    };
    let (code, report) = check(&[]);
    assert_eq!((code, &report["error"]), (77, &Value::from("untrusted_media")), "{report}");
    assert!(report["reason"].as_str().unwrap().contains("recipe.json.sig is missing"), "{report}");

    c.sign("trusted", NS, std::slice::from_ref(&recipe));
    assert_eq!(check(&[]).0, 0, "the compiled-in schema needs no signature");
    let (code, report) = check(&["--schema", schema.to_str().unwrap()]);
    assert_eq!(code, 77, "a schema given needs one");
    assert!(report["reason"].as_str().unwrap().contains("recipe.schema.json.sig is missing"), "{report}");
    c.sign("trusted", NS, std::slice::from_ref(&schema));
    assert_eq!(check(&["--schema", schema.to_str().unwrap()]).0, 0);

    c.sign("trusted", &format!("{NS}@{THIS}"), std::slice::from_ref(&recipe));
    assert_eq!(check(&["--machine-uuid", &THIS.to_uppercase()]).0, 0);
    let (code, report) = check(&["--machine-uuid", OTHER]);
    assert_eq!(code, 77);
    assert!(report["reason"].as_str().unwrap().contains(&format!("this one is {OTHER}")), "{report}");
    let out = run(dispatcher().arg("check").arg(&recipe).args(["--machine-uuid", "not-a-uuid"]));
    assert_eq!(out.code, 64);

    std::fs::write(&trust, "ops@example.com valid-before=\"20300101\" ssh-ed25519 AAAA\n").unwrap();
    let (code, report) = check(&["--machine-uuid", THIS]);
    assert_eq!((code, &report["error"]), (78, &Value::from("trust_file_unusable")), "{report}");

    c.trust(&format!("ops@example.com {}", c.public("trusted")));
    let out_dir = tempfile::tempdir().unwrap();
    let render = |uuid: &str, dir: &Path| {
        let mut cmd = dispatcher();
        cmd.arg("render").arg(&recipe).arg("--output").arg(dir).arg("--allowed-signers").arg(&trust);
        run(cmd.args(["--machine-uuid", uuid]))
    };
    let refused = render(OTHER, &out_dir.path().join("refused"));
    assert_eq!(refused.code, 77, "{}", refused.stderr);
    assert!(refused.stderr.contains("bound to another machine") && !refused.stderr.contains(MARKER));
    assert!(!out_dir.path().join("refused").exists(), "nothing written");
    let rendered = render(THIS, &out_dir.path().join("ok"));
    assert_eq!(rendered.code, 0, "{}", rendered.stderr);
    assert!(out_dir.path().join("ok/recipe.env").exists());
}

/// Issue 31, item 10: a machine whose SMBIOS UUID is all 00 ("no ID") or all FF ("not set")
/// has no identity, so no recipe is bound to it: `run` refuses a bound one (77) as where the
/// UUID cannot be read, and `check --machine-uuid` with those values says what `run` would.
/// Unbound recipes still run there.
#[test]
fn a_machine_without_an_identity_runs_no_bound_recipe() {
    let c = Controller::new();
    let trust = c.path("allowed_signers");
    for (uuid, meaning) in [(NIL, "no ID"), (NOT_SET, "not set")] {
        std::fs::write(c.sysfs().join("class/dmi/id/product_uuid"), uuid.to_uppercase() + "\n").unwrap();
        let media = marked_media();
        c.sign_media("trusted", &format!("{NS}@{uuid}"), media.path());
        let machine = Machine::new();
        let words = format!("this machine has no identity: its SMBIOS UUID {uuid} means \"{meaning}\"");
        let out = c.dispatch(&machine, media.path(), None);
        assert_untrusted(&machine, media.path(), &out, "recipe.json", &words, "machineWithoutIdentity");

        let mut check = dispatcher();
        check
            .arg("check")
            .arg(media.path().join("recipe.json"))
            .arg("--schema")
            .arg(media.path().join("recipe.schema.json"));
        check
            .args(["--format", "json", "--allowed-signers"])
            .arg(&trust)
            .args(["--machine-uuid", &uuid.to_uppercase()]);
        let out = run(&mut check);
        let report: Value = serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", out.stdout));
        assert_eq!((out.code, &report["error"]), (77, &Value::from("untrusted_media")), "{report}");
        assert!(report["reason"].as_str().unwrap().contains(&words), "{report}");

        c.sign_media("trusted", NS, media.path());
        let machine = Machine::new();
        let out = c.dispatch(&machine, media.path(), None);
        assert_eq!(out.code, 0, "an unbound recipe: {}", out.stderr);
        assert_eq!(run(&mut check).code, 0);
    }
}

/// Issue 31, item 11: every form of a `.sig` decided by the real binary (`check`) and by the
/// real `ssh-keygen -Y verify` (Debian 12's OpenSSH 9.2), for an Ed25519 and an ECDSA P-256
/// key: each verdict must be ssh-keygen's, and the one written here (so that another
/// OpenSSH, which may read the armour differently, fails loudly rather than silently).
#[test]
fn every_form_of_a_signature_is_decided_as_ssh_keygen_decides_it() {
    let c = Controller::new();
    c.keygen("trusted-ecdsa", &["-t", "ecdsa", "-b", "256"]);
    c.trust(&format!("ops@example.com {}\nops@example.com {}", c.public("trusted"), c.public("trusted-ecdsa")));
    let media = marked_media();
    let recipe = media.path().join("recipe.json");
    let sig = media.path().join("recipe.json.sig");
    let mut disagreements = vec![];
    for key in ["trusted", "trusted-ecdsa"] {
        c.sign(key, NS, std::slice::from_ref(&recipe));
        for (form, accepted, bytes) in signature_forms(&std::fs::read(&sig).unwrap()) {
            std::fs::write(&sig, &bytes).unwrap();
            let ours = c.check_signed(&recipe);
            let openssh = c.openssh_verifies(&recipe);
            if (ours, openssh) != (accepted, accepted) {
                disagreements
                    .push(format!("{key}, {form}: expected {accepted}, dispatcher {ours}, ssh-keygen {openssh}"));
            }
        }
    }
    assert!(disagreements.is_empty(), "{}", disagreements.join("\n"));
}

/// A good `.sig` (as `ssh-keygen -Y sign` wrote it) in other forms: what it is, whether
/// OpenSSH 9.2 accepts it (`sshsig.c`), and its bytes. The armour first, then the blob, field
/// by field: magic, version, then length-prefixed public key, namespace, reserved, hash
/// algorithm and signature.
fn signature_forms(good: &[u8]) -> Vec<(String, bool, Vec<u8>)> {
    let text = std::str::from_utf8(good).unwrap();
    let body: String = text.lines().filter(|line| !line.starts_with("-----")).collect();
    let blob = base64(&["-d"], body.as_bytes());
    let wrapped = |width: usize| armoured(&blob, width);
    let replaced = |from: &str, to: &str| text.replacen(from, to, 1).into_bytes();
    let mut forms: Vec<(String, bool, Vec<u8>)> = vec![
        ("as signed".into(), true, good.to_vec()),
        ("wrapped at 64 columns".into(), true, wrapped(64)),
        ("wrapped at 76 columns".into(), true, wrapped(76)),
        ("wrapped at 4 columns".into(), true, wrapped(4)),
        ("the base64 on one line".into(), true, wrapped(0)),
        ("trailing blank lines".into(), true, [good, b"\n\n\n"].concat()),
        ("no newline at the end".into(), true, text.trim_end().as_bytes().to_vec()),
        ("spaces, tabs, VT, FF and CR in the base64".into(), true, replaced("U1NI", "U1 N\tI\x0b\x0c\r")),
        (
            "blank lines in the base64".into(),
            true,
            text.replacen("\n", "\n\n", 3).replacen("\n\n", "\n", 1).into_bytes(),
        ),
        ("CR before each LF after the header".into(), true, [&good[..30], &crlf(&good[30..])].concat()),
        ("CRLF line ends (OpenSSH 9.5 takes them, 9.2 does not)".into(), false, crlf(good)),
        ("bytes that are not text after the footer".into(), true, [good, b"\xff\xfe\x00junk"].concat()),
        (
            "text after the footer on its line".into(),
            true,
            replaced("-----END SSH SIGNATURE-----", "-----END SSH SIGNATURE-----xyz"),
        ),
        ("a second signature after the first".into(), true, [good, good].concat()),
        ("a NUL ending the base64".into(), true, replaced("\n-----END", "\0\n-----END")),
        ("a NUL in the base64".into(), false, replaced("U1NI", "U1\0NI")),
        ("a non-breaking space in the base64".into(), false, replaced("U1NI", "U1\u{a0}NI")),
        ("a blank line before the header".into(), false, [b"\n", good].concat()),
        ("a space before the header".into(), false, [b" ", good].concat()),
        ("a space after the header".into(), false, replaced("SIGNATURE-----\n", "SIGNATURE----- \n")),
        ("a space before the footer".into(), false, replaced("\n-----END", "\n -----END")),
        ("no footer".into(), false, replaced("-----END SSH SIGNATURE-----", "")),
        ("header, base64 and footer on one line".into(), false, text.replace('\n', "").into_bytes()),
        ("the header in lower case".into(), false, replaced("BEGIN SSH", "begin SSH")),
    ];
    // The last line of the base64, padded or not: padding taken away, or bits added past the
    // last byte.
    let last = text.lines().rev().nth(1).unwrap();
    if let Some(unpadded) = last.strip_suffix('=') {
        let data = unpadded.trim_end_matches('=');
        let stray = if data.ends_with('A') { "B" } else { "A" };
        let with_stray_bits = format!("{}{stray}{}", &data[..data.len() - 1], &last[data.len()..]);
        forms.extend([
            ("one pad missing".into(), false, replaced(last, unpadded)),
            ("no padding".into(), false, replaced(last, data)),
            ("bits past the last byte".into(), false, replaced(last, &with_stray_bits)),
        ]);
    }

    let version: [u8; 4] = blob[6..10].try_into().unwrap();
    let fields = strings_of(&blob[10..]);
    let sshsig = |version: [u8; 4], fields: &[Vec<u8>], after: &[u8]| {
        armoured(&[b"SSHSIG", &version[..], &strings(fields), after].concat(), SSH_KEYGEN_COLUMNS)
    };
    let with = |at: usize, value: Vec<u8>| {
        let mut changed = fields.clone();
        changed[at] = value;
        sshsig(version, &changed, b"")
    };
    let names = ["public key", "namespace", "reserved field", "hash algorithm", "signature"];
    for (at, name) in names.iter().enumerate() {
        for delta in [1i64, -1, 4] {
            let mut prefixed = [&b"SSHSIG"[..], &version].concat();
            for (i, field) in fields.iter().enumerate() {
                let len = field.len() as i64 + if i == at { delta } else { 0 };
                prefixed.extend((len as u32).to_be_bytes());
                prefixed.extend(field);
            }
            forms.push((format!("the {name}'s length {delta:+}"), false, armoured(&prefixed, SSH_KEYGEN_COLUMNS)));
        }
    }
    let (key, signature) = (strings_of(&fields[0]), strings_of(&fields[4]));
    let nul_ended = |bytes: &[u8]| [bytes, b"\0"].concat();
    let with_key = |at: usize, value: Vec<u8>| {
        let mut parts = key.clone();
        parts[at] = value;
        with(0, strings(&parts))
    };
    let with_signature = |value: Vec<u8>| with(4, strings(&[signature[0].clone(), value]));
    forms.extend([
        ("a byte after the last field".into(), false, sshsig(version, &fields, b"\0")),
        ("four bytes after the last field".into(), false, sshsig(version, &fields, b"\0\0\0\0")),
        ("a byte after the public key, in its field".into(), false, with(0, nul_ended(&fields[0]))),
        ("a byte after the signature, in its field".into(), false, with(4, nul_ended(&fields[4]))),
        ("version 0".into(), true, sshsig([0; 4], &fields, b"")),
        ("version 2".into(), false, sshsig([0, 0, 0, 2], &fields, b"")),
        ("something in the reserved field".into(), true, with(2, b"future".to_vec())),
        ("a NUL ending the namespace".into(), true, with(1, nul_ended(&fields[1]))),
        ("a NUL in the namespace".into(), false, with(1, [&b"provision\0"[..], &fields[1][9..]].concat())),
        ("an empty namespace".into(), false, with(1, vec![])),
        ("a NUL ending the hash algorithm".into(), true, with(3, nul_ended(&fields[3]))),
        ("the hash algorithm in upper case".into(), false, with(3, fields[3].to_ascii_uppercase())),
        ("a NUL ending the key type".into(), true, with_key(0, nul_ended(&key[0]))),
        ("two NULs ending the key type".into(), false, with_key(0, [&key[0][..], b"\0\0"].concat())),
        (
            "a NUL ending the signature type".into(),
            true,
            with(4, strings(&[nul_ended(&signature[0]), signature[1].clone()])),
        ),
        (
            "another key's type on the signature".into(),
            false,
            with(4, strings(&[b"ssh-rsa".to_vec(), signature[1].clone()])),
        ),
    ]);
    if key[0] == b"ssh-ed25519" {
        let (r, s) = signature[1].split_at(32);
        let s_plus = |times: u8| with_signature([r, &add_ed25519_order(s, times)].concat());
        forms.extend([
            // OpenSSH's sshkey_type_from_name takes a plain type's short name, in any case.
            ("the key type as its short name ED25519".into(), true, with_key(0, b"ED25519".to_vec())),
            ("the key type as ed25519".into(), true, with_key(0, b"ed25519".to_vec())),
            ("a 31-byte public key".into(), false, with_key(1, key[1][..31].to_vec())),
            // OpenSSH's Ed25519 reduces any S below 2^253; S + 2L is above.
            ("S plus the group order".into(), true, s_plus(1)),
            ("S plus twice the group order".into(), false, s_plus(2)),
            ("a 63-byte signature".into(), false, with_signature(signature[1][..63].to_vec())),
            ("a 65-byte signature".into(), false, with_signature(nul_ended(&signature[1]))),
        ]);
    } else {
        let integers = strings_of(&signature[1]);
        let zeros =
            |n: usize| with_signature(strings(&[[&vec![0; n][..], &integers[0]].concat(), integers[1].clone()]));
        forms.extend([
            ("the key type as its short name ECDSA".into(), false, with_key(0, b"ECDSA".to_vec())),
            ("a NUL ending the curve name".into(), true, with_key(1, nul_ended(&key[1]))),
            ("another curve".into(), false, with_key(1, b"nistp384".to_vec())),
            ("the point compressed".into(), false, with_key(2, [&[2 + (key[2][64] & 1)][..], &key[2][1..33]].concat())),
            // OpenSSH drops leading zeros of an integer; ssh-key wants none.
            ("a leading zero on r".into(), true, zeros(1)),
            ("three leading zeros on r".into(), true, zeros(3)),
            ("a byte after s".into(), false, with_signature([&signature[1][..], b"\0"].concat())),
        ]);
    }
    forms
}

/// The width of `ssh-keygen -Y sign`'s base64 lines.
const SSH_KEYGEN_COLUMNS: usize = 70;

/// A blob in SSH SIGNATURE armour, its base64 in lines of `width` (0: one line).
fn armoured(blob: &[u8], width: usize) -> Vec<u8> {
    // Width 0: one line, which coreutils does not end.
    let encoded = String::from_utf8(base64(&["-w", &width.to_string()], blob)).unwrap();
    format!("-----BEGIN SSH SIGNATURE-----\n{}\n-----END SSH SIGNATURE-----\n", encoded.trim_end()).into_bytes()
}

/// Consecutive length-prefixed strings.
fn strings_of(mut bytes: &[u8]) -> Vec<Vec<u8>> {
    let mut strings = vec![];
    while let Some((len, rest)) = bytes.split_first_chunk::<4>() {
        let (string, rest) = rest.split_at(u32::from_be_bytes(*len) as usize);
        strings.push(string.to_vec());
        bytes = rest;
    }
    strings
}

fn strings(parts: &[Vec<u8>]) -> Vec<u8> {
    parts.iter().flat_map(|part| string(part)).collect()
}

fn string(bytes: &[u8]) -> Vec<u8> {
    [&(bytes.len() as u32).to_be_bytes()[..], bytes].concat()
}

/// Every LF made CRLF.
fn crlf(bytes: &[u8]) -> Vec<u8> {
    bytes.iter().flat_map(|&b| if b == b'\n' { vec![b'\r', b'\n'] } else { vec![b] }).collect()
}

/// An Ed25519 S (32 bytes, little-endian) plus `times` the group order, modulo 2^256.
fn add_ed25519_order(s: &[u8], times: u8) -> Vec<u8> {
    // 2^252 + 27742317777372353535851937790883648493, little-endian.
    let order: [u8; 32] = [
        0xed, 0xd3, 0xf5, 0x5c, 0x1a, 0x63, 0x12, 0x58, 0xd6, 0x9c, 0xf7, 0xa2, 0xde, 0xf9, 0xde, 0x14, 0, 0, 0, 0, 0,
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10,
    ];
    let mut carry = 0u16;
    s.iter()
        .zip(order)
        .map(|(&s, l)| {
            let sum = u16::from(s) + u16::from(l) * u16::from(times) + carry;
            carry = sum >> 8;
            sum as u8
        })
        .collect()
}

fn base64(args: &[&str], input: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut child = Command::new("base64").args(args).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    child.wait_with_output().unwrap().stdout
}
