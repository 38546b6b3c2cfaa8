//! What the help and the README promise, checked against the code's own tables: the option
//! defaults (declared once, in `cmd::run::defaults`), the keys of `recipe.env` (one table, in
//! `envfile`), the exit codes and the failure words.

mod common;

use common::{dispatcher, root, run};
use provision_dispatcher::cmd::follow;
use provision_dispatcher::cmd::run::defaults;
use provision_dispatcher::envfile::{DEVICE_KEY, FIELD_KEYS, FILE_KEYS, SCHEMA_ID_KEY};
use provision_dispatcher::failure::Exit;

#[test]
fn help_shows_every_default() {
    let help = run(dispatcher().args(["run", "--help"])).stdout;
    for default in [
        defaults::LABEL.to_owned(),
        defaults::WAIT.as_secs().to_string(),
        defaults::OUTPUT.to_owned(),
        defaults::STATE_DIR.to_owned(),
        defaults::BUS_TIMEOUT.as_secs().to_string(),
    ] {
        assert!(help.contains(&format!("[default: {default}]")), "run --help lacks [default: {default}]:\n{help}");
    }
    assert!(help.contains(defaults::ALLOWED_TARGETS), "{help}");
    let follow = run(dispatcher().args(["follow", "--help"])).stdout;
    for default in [defaults::STATE_DIR.to_owned(), follow::DEADLINE.as_secs().to_string()] {
        assert!(
            follow.contains(&format!("[default: {default}]")),
            "follow --help lacks [default: {default}]:\n{follow}"
        );
    }
    let report = run(dispatcher().args(["report", "--help"])).stdout;
    assert!(report.contains(&format!("[default: {}/status.json]", defaults::STATE_DIR)), "{report}");
}

#[test]
fn the_readme_names_every_env_key_and_exit_code() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let keys = FIELD_KEYS.iter().chain(&FILE_KEYS).map(|(_, key)| *key).chain([SCHEMA_ID_KEY, DEVICE_KEY]);
    for key in keys {
        assert!(readme.contains(&format!("`{key}`")), "README.md does not name {key}");
    }
    for exit in Exit::ALL {
        assert!(readme.contains(&format!("| {} |", exit.code())), "README.md's exit codes lack {}", exit.code());
    }
}

/// Every option any command's `--help` lists is in the man page the package installs.
#[test]
fn the_man_page_has_every_option_of_the_help() {
    let man = std::fs::read_to_string(root().join("debian/provision-dispatcher.8")).unwrap();
    // troff writes a dash in an option as `\-`.
    let man = man.replace("\\-", "-");
    for command in [&[][..], &["check"], &["render"], &["run"], &["report"], &["disks"], &["follow"]] {
        let help = run(dispatcher().args(command).arg("--help")).stdout;
        let options: Vec<&str> = help
            .split_whitespace()
            .map(|w| w.trim_end_matches([',', ']', ')', '.']))
            .filter(|w| {
                w.starts_with('-') && w.len() > 1 && w.chars().nth(1).is_some_and(|c| c == '-' || c.is_alphabetic())
            })
            .collect();
        assert!(!options.is_empty(), "{command:?}: no options found in:\n{help}");
        for option in options {
            assert!(man.contains(option), "the man page lacks {option} (of {command:?} --help)");
        }
    }
    for word in ["EXIT STATUS", "FILES", "BOOT PATH", "provision.recipe=", "provision.media="] {
        assert!(man.contains(word), "the man page lacks {word}");
    }
}

/// The journald catalog the package installs explains both MESSAGE_IDs the dispatcher logs,
/// and journalctl reads it (`journalctl -x` shows it).
#[test]
fn the_catalog_explains_both_message_ids() {
    use provision_dispatcher::log::{DISPATCHED_ID, FAILED_ID};
    let root_dir = tempfile::tempdir().unwrap();
    let catalog = root_dir.path().join("usr/lib/systemd/catalog");
    std::fs::create_dir_all(&catalog).unwrap();
    std::fs::create_dir_all(root_dir.path().join("var/lib/systemd/catalog")).unwrap();
    std::fs::copy(root().join("debian/provision-dispatcher.catalog"), catalog.join("provision-dispatcher.catalog"))
        .unwrap();
    let journalctl = |args: &[&str]| {
        let out = std::process::Command::new("journalctl")
            .arg(format!("--root={}", root_dir.path().display()))
            .args(args)
            .output()
            .expect("journalctl (Debian package systemd) is installed");
        assert!(out.status.success(), "journalctl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    journalctl(&["--update-catalog"]);
    let listed = journalctl(&["--list-catalog"]);
    for id in [DISPATCHED_ID, FAILED_ID] {
        assert!(listed.contains(id), "the catalog lacks {id}:\n{listed}");
        let text = journalctl(&["--dump-catalog", id]);
        for part in ["Subject:", "Details:", "Next", "provision-dispatcher report"] {
            assert!(text.contains(part), "{id}'s entry lacks {part}:\n{text}");
        }
    }
}
