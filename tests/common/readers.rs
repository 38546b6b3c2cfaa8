//! The readers of docs/controller.md (Reading this job's line), run as written: the shell
//! pipeline with `sh` and `jq`, the Python functions with `python3`, on a console log.

use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::Value;

use super::root;

/// The code block of docs/controller.md that starts with `head`, to its end.
pub fn block(head: &str) -> String {
    let page = std::fs::read_to_string(root().join("docs/controller.md")).unwrap();
    let start = page.find(head).unwrap_or_else(|| panic!("docs/controller.md has no block starting {head:?}"));
    let end = start + page[start..].find("\n```").unwrap();
    page[start..end].to_owned()
}

/// The shell pipeline's head (the block's `JOB=` line before it is the test's to set).
pub const SHELL: &str = "tr -d '\\r' < console.log";

/// The Python block's head.
pub const PYTHON: &str = "import hashlib\n";

/// What each documented reader makes of `log` for the job `job` (`None`: any job's): the shell
/// pipeline's line, and the Python function's with the log decoded as UTF-8 (errors replaced)
/// and as Latin-1; each the line's object, or null for no result yet.
pub fn results(log: &[u8], job: Option<&str>) -> [Value; 3] {
    // The pipeline's status is its last command's: without jq it would print nothing, which
    // reads as "no result yet".
    let jq = Command::new("jq").arg("--version").output();
    assert!(
        jq.is_ok_and(|out| out.status.success()),
        "jq runs (Debian's jq: the Tests need of cargo xtask, which installs it)"
    );
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("console.log"), log).unwrap();
    let out = Command::new("sh")
        .arg("-c")
        .arg(block(SHELL))
        .env("JOB", job.unwrap_or_default())
        .current_dir(dir.path())
        .output()
        .expect("sh runs");
    assert!(out.status.success(), "the shell reader: {}", String::from_utf8_lossy(&out.stderr));
    let shell = match String::from_utf8(out.stdout).unwrap().trim() {
        "" => Value::Null,
        line => serde_json::from_str(line).expect("the shell reader prints a line's object"),
    };
    let job = job.map_or("None".to_owned(), |job| format!("{job:?}"));
    let [utf8, latin1] = ["'utf-8', 'replace'", "'latin-1'"]
        .map(|decode| python(log, &format!("print(json.dumps(provision_result(LOG.decode({decode}), {job})))")));
    [shell, utf8, latin1]
}

/// The Python reader's inventory in `log` (`digest`: the one of that SHA-256; else the last
/// whole one), or null; and the SHA-256 of the document it returned, written compact as the
/// dispatcher writes it (so that it is the inventory's digest when the reader returned exactly
/// the document printed).
pub fn inventory(log: &[u8], digest: Option<&str>) -> (Value, Option<String>) {
    let digest = digest.map_or("None".to_owned(), |digest| format!("{digest:?}"));
    let read = python(
        log,
        &format!(
            "inventory = provision_inventory(LOG.decode('latin-1'), {digest})\n\
             text = json.dumps(inventory, separators=(',', ':')).encode()\n\
             print(json.dumps([inventory, inventory and hashlib.sha256(text).hexdigest()]))"
        ),
    );
    (read[0].clone(), read[1].as_str().map(str::to_owned))
}

/// Runs the Python block, then `then` with the log's bytes in `LOG`; what it prints, as JSON.
fn python(log: &[u8], then: &str) -> Value {
    let program = format!("{}\nimport sys\nLOG = sys.stdin.buffer.read()\n{then}\n", block(PYTHON));
    let mut child = Command::new("python3")
        .args(["-c", &program])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 runs");
    child.stdin.take().unwrap().write_all(log).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "the Python reader: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("JSON")
}
