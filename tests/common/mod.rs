//! Helpers shared by the integration tests: the real binary, run as a user would run it.
#![allow(dead_code)] // each test crate uses its own subset

pub mod bus;
pub mod docs;
pub mod fakebus;
pub mod hostile;
pub mod limits;
pub mod machine;
pub mod readers;
pub mod schemas;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The dispatcher binary built for this test run.
pub fn dispatcher() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_provision-dispatcher"));
    cmd.current_dir(root());
    cmd
}

/// An example of `examples/` (a rig of the tests, not the product), which `cargo test` builds
/// beside the test binaries.
pub fn example_binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().and_then(Path::parent).unwrap();
    let binary = profile_dir.join("examples").join(name);
    assert!(
        binary.exists(),
        "{} is missing: `cargo test` builds it (or `cargo build --example {name}`)",
        binary.display()
    );
    binary
}

pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// Runs the dispatcher; every document it printed or wrote is valid by its published schema
/// ([`schemas::assert_documents_valid`]).
pub fn run(cmd: &mut Command) -> Run {
    let Output { status, stdout, stderr } = cmd.output().expect("the dispatcher starts");
    let run = Run {
        code: status.code().expect("exited, not killed"),
        stdout: String::from_utf8(stdout).expect("stdout is UTF-8"),
        stderr: String::from_utf8(stderr).expect("stderr is UTF-8"),
    };
    schemas::assert_documents_valid(cmd, &run);
    run
}

/// The names in `dir`, sorted.
pub fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    names.sort();
    names
}

/// Compares `actual` with the golden file, or rewrites it when UPDATE_EXPECT=1 (then review
/// the diff before committing).
pub fn assert_golden(path: &Path, actual: &str) {
    if std::env::var_os("UPDATE_EXPECT").is_some() {
        std::fs::write(path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(actual, expected, "{} differs (UPDATE_EXPECT=1 rewrites it)", path.display());
}
