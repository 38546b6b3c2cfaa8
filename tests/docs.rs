//! What the help and the README promise, checked against the code's own tables: the option
//! defaults (declared once, in `cmd::run::defaults`), the keys of `recipe.env` (one table, in
//! `envfile`), the exit codes and the failure words.

mod common;

use common::{dispatcher, root, run};
use provision_dispatcher::cmd::run::defaults;
use provision_dispatcher::envfile::{FIELD_KEYS, FILE_KEYS, SCHEMA_ID_KEY};
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
    let report = run(dispatcher().args(["report", "--help"])).stdout;
    assert!(report.contains(&format!("[default: {}/status.json]", defaults::STATE_DIR)), "{report}");
}

#[test]
fn the_readme_names_every_env_key_and_exit_code() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let keys = FIELD_KEYS.iter().chain(&FILE_KEYS).map(|(_, key)| *key).chain([SCHEMA_ID_KEY]);
    for key in keys {
        assert!(readme.contains(&format!("`{key}`")), "README.md does not name {key}");
    }
    for exit in Exit::ALL {
        assert!(readme.contains(&format!("| {} |", exit.code())), "README.md's exit codes lack {}", exit.code());
    }
}
