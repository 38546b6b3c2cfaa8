//! The dispatcher's `PROVISION-RESULT v1` line (SPEC §6b), read from the guest's serial
//! console as a controller reads it, and judged: it must be there, parse, and agree with the
//! guest's own report (status.json, byte for byte through its digest) and with the case.

use std::path::Path;

use serde_json::Value;

use super::cases::Expect;
use super::report::Report;

/// What starts the result line (after whatever shares its row on the console).
pub const PREFIX: &str = "PROVISION-RESULT v1 ";

/// The last result line on the console that parses, as a controller would take it: a line
/// cut or garbled on the wire is skipped (after a failure, the next repeat comes).
pub fn last_line(console: &str) -> Option<Value> {
    console.lines().rev().find_map(|line| {
        let (_, json) = line.trim_end_matches('\r').split_once(PREFIX)?;
        serde_json::from_str::<Value>(json).ok().filter(Value::is_object)
    })
}

/// What is wrong with the result line of this boot: empty means it told a controller the
/// same as the guest's report. `dir` receives status.json for its digest.
pub fn judge(expect: &Expect, report: &Report, console: &str, dir: &Path) -> Vec<String> {
    let Some(line) = last_line(console) else {
        return vec!["the serial console has no PROVISION-RESULT line".into()];
    };
    let mut problems = vec![];
    let mut differs = |what: &str, got: &Value, want: &Value| {
        if got != want {
            problems.push(format!("the result line's {what} is {got}, expected {want}"));
        }
    };
    match expect {
        Expect::Dispatched { target, .. } => {
            differs("state", &line["state"], &"dispatched".into());
            differs("exit_code", &line["exit_code"], &0.into());
            differs("target", &line["target"], &target.as_str().into());
        }
        Expect::Failed { exit, failure, paths, .. } => {
            differs("state", &line["state"], &"failed".into());
            differs("exit_code", &line["exit_code"], &(*exit).into());
            if let Some(failure) = failure {
                differs("failure", &line["failure"], &failure.as_str().into());
            }
            // Named once the target was started, never by a failure: status.json keeps it
            // from validation on (the disk gone before the start, the start refused), the line
            // does not (issue 31, finding 13).
            differs("target", &line["target"], &Value::Null);
            let named: Vec<&str> =
                line["details"].as_array().into_iter().flatten().filter_map(|d| d["path"].as_str()).collect();
            for path in paths.iter().filter(|p| !named.contains(&p.as_str())) {
                problems.push(format!("the result line does not name {path}"));
            }
        }
        // Nothing booted, so no line: judged by the refusal alone (`cases::refused`).
        Expect::RefusedByFirmware {} => return problems,
    }
    let Some(bytes) = report.file("status.json") else { return problems };
    let Ok(status) = serde_json::from_slice::<Value>(bytes) else { return problems };
    let started = status["state"] == "dispatched";
    for key in ["state", "failure", "exit_code", "phase", "target", "job", "recipe_sha256", "disk", "inventory_sha256"]
    {
        let want = status.get(key).cloned().filter(|_| started || !matches!(key, "target" | "job"));
        let want = want.unwrap_or(Value::Null);
        if line[key] != want {
            problems.push(format!("the result line's {key} is {}, status.json's {want}", line[key]));
        }
    }
    let status_paths: Vec<&Value> =
        status["details"].as_array().into_iter().flatten().take(16).map(|d| &d["path"]).collect();
    let line_paths: Vec<&Value> = line["details"].as_array().into_iter().flatten().map(|d| &d["path"]).collect();
    if line_paths != status_paths {
        problems.push("the result line's details are not status.json's first 16".into());
    }
    let copy = dir.join("status.json");
    match std::fs::write(&copy, bytes).map_err(anyhow::Error::from).and_then(|()| crate::system::sha256_hex(&copy)) {
        Ok(digest) if line["status_sha256"] == digest.as_str() => {}
        Ok(digest) => problems.push(format!("the result line's status_sha256 is not status.json's ({digest})")),
        Err(e) => problems.push(format!("cannot digest status.json: {e:#}")),
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_whole_line_is_taken() {
        let console = "boot\r\n\
            PROVISION-RESULT v1 {\"state\":\"failed\",\"exit_code\":65}\r\n\
            [  12.1] something\n\
            PROVISION-RESULT v1 {\"state\":\"fail\n\
            maintenance login: PROVISION-RESULT v1 {\"state\":\"failed\",\"exit_code\":66}\n";
        assert_eq!(last_line(console).unwrap()["exit_code"], 66);
        assert_eq!(last_line("no line\n"), None);
    }

    #[test]
    fn the_line_must_agree_with_the_case() {
        let dir = std::env::temp_dir();
        let report = Report::parse(br#"{"format":1,"files":{}}"#).unwrap();
        let want = Expect::Failed {
            exit: 65,
            failure: None,
            paths: vec!["/target_disk".into()],
            codes: vec![],
            banner_says: vec![],
            secure_boot: None,
            disk: None,
        };
        let good = "PROVISION-RESULT v1 {\"state\":\"failed\",\"exit_code\":65,\"target\":null,\
                    \"details\":[{\"path\":\"/target_disk\",\"code\":\"required\"}]}\n";
        assert_eq!(judge(&want, &report, good, &dir), Vec::<String>::new());
        let wrong =
            "PROVISION-RESULT v1 {\"state\":\"dispatched\",\"exit_code\":0,\"target\":\"x.target\",\"details\":[]}\n";
        assert_eq!(
            judge(&want, &report, wrong, &dir),
            [
                "the result line's state is \"dispatched\", expected \"failed\"",
                "the result line's exit_code is 0, expected 65",
                "the result line's target is \"x.target\", expected null",
                "the result line does not name /target_disk",
            ]
        );
        assert_eq!(judge(&want, &report, "", &dir), ["the serial console has no PROVISION-RESULT line"]);
    }

    #[test]
    fn the_line_must_agree_with_status_json_byte_for_byte() {
        let dir = std::env::temp_dir().join(format!("vm-result-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // `{"state":"failed","exit_code":65,"details":[{"path":"/target_disk"}]}` and a newline.
        let status = "eyJzdGF0ZSI6ImZhaWxlZCIsImV4aXRfY29kZSI6NjUsImRldGFpbHMiOlt7InBhdGgiOiIvdGFyZ2V0X2Rpc2sifV19Cg==";
        let report =
            Report::parse(format!(r#"{{"format":1,"files":{{"status.json":"{status}"}}}}"#).as_bytes()).unwrap();
        let want = Expect::Failed {
            exit: 65,
            failure: None,
            paths: vec![],
            codes: vec![],
            banner_says: vec![],
            secure_boot: None,
            disk: None,
        };
        let line = |digest: &str| {
            format!(
                "PROVISION-RESULT v1 {{\"state\":\"failed\",\"failure\":null,\"exit_code\":65,\"phase\":null,\
                 \"target\":null,\"job\":null,\"recipe_sha256\":null,\"details\":[{{\"path\":\"/target_disk\"}}],\
                 \"status_sha256\":\"{digest}\"}}\n"
            )
        };
        let digest = "802031f371d9d962ad915a8825d07d101cf255c060e2c93f77e7dc64e68e035e";
        assert_eq!(judge(&want, &report, &line(digest), &dir), Vec::<String>::new());
        assert_eq!(
            judge(&want, &report, &line(&"0".repeat(64)), &dir),
            [format!("the result line's status_sha256 is not status.json's ({digest})")]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
