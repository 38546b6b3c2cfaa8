//! SPEC §6a through the real binary: media signed with the real `ssh-keygen -Y sign`
//! (keys made here, in a temporary directory), the image's trust file, `check`, `render` and
//! `run --media DIR`, Secure Boot and lockdown read from a sysfs tree of the test's own.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::bus::{PrivateBus, SEED_TARGETS};
use common::machine::{example, media, Machine};
use common::{dispatcher, run, Run};
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
            let status = Command::new("ssh-keygen")
                .args(["-q", "-N", "", "-t", "ed25519", "-C", key, "-f"])
                .arg(c.path(key))
                .status()
                .unwrap();
            assert!(status.success());
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

fn assert_untrusted(machine: &Machine, out: &Run, file: &str, why: &str) {
    assert_eq!(out.code, 77, "{why}: {}", out.stderr);
    let status = machine.status();
    assert_eq!(status["failure"], "untrusted_media", "{status}");
    assert_eq!(status["phase"], "media");
    assert_eq!(status["signature"], Value::Null);
    let message = status["message"].as_str().unwrap();
    assert!(message.contains(file) && message.contains(why), "wanted {file}, {why}: {message}");
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

#[test]
fn anything_short_of_two_good_signatures_is_77_with_nothing_written_or_started() {
    let c = Controller::new();
    let bus = PrivateBus::with_units(SEED_TARGETS);
    let cases: [(&str, &str, Spoil); 8] = [
        ("recipe.json", "recipe.json.sig is missing", |_, m| std::fs::remove_file(m.join("recipe.json.sig")).unwrap()),
        ("recipe.schema.json", "recipe.schema.json.sig is missing", |_, m| {
            std::fs::remove_file(m.join("recipe.schema.json.sig")).unwrap()
        }),
        ("recipe.json", "bad signature", |_, m| {
            let text = std::fs::read_to_string(m.join("recipe.json")).unwrap();
            std::fs::write(m.join("recipe.json"), text.replace("install-esxi", "install-linux")).unwrap();
        }),
        ("recipe.json", "bad signature", |_, m| {
            std::fs::copy(m.join("recipe.schema.json.sig"), m.join("recipe.json.sig")).unwrap();
        }),
        ("recipe.json", "a key the image does not trust", |c, m| c.sign_media("stranger", NS, m)),
        ("recipe.json", "bound to another machine", |c, m| c.sign_media("trusted", &format!("{NS}@{OTHER}"), m)),
        ("recipe.json", "not for namespace", |c, m| c.sign_media("trusted", "file", m)),
        ("recipe.json", "is a symbolic link", |_, m| {
            std::fs::rename(m.join("recipe.json.sig"), m.join("elsewhere.sig")).unwrap();
            std::os::unix::fs::symlink("elsewhere.sig", m.join("recipe.json.sig")).unwrap();
        }),
    ];
    for (file, why, spoil) in cases {
        let media = marked_media();
        c.sign_media("trusted", NS, media.path());
        spoil(&c, media.path());
        let machine = Machine::new();
        let out = c.dispatch(&machine, media.path(), Some(&bus));
        assert_untrusted(&machine, &out, file, why);
    }
    assert!(bus.starts().is_empty(), "nothing started");
    // A key the trust file keeps for bound recipes cannot sign an unbound one.
    c.trust(&format!("ops@example.com namespaces=\"{NS}@*\" {}", c.public("trusted")));
    let media = marked_media();
    c.sign_media("trusted", NS, media.path());
    let machine = Machine::new();
    assert_untrusted(&machine, &c.dispatch(&machine, media.path(), None), "recipe.json", "only bound recipes");
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
        assert_untrusted(&machine, &c.dispatch(&machine, media.path(), None), "recipe.json", &words);

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
