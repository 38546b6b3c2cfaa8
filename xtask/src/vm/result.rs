//! The dispatcher's `PROVISION-RESULT v1` line (SPEC §6b), read from the guest's serial
//! console as a controller reads it, and judged: it must be there, parse, and agree with the
//! guest's own report (status.json, byte for byte through its digest) and with the case.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use super::cases::{Expect, ShutsDown, TaskEnd};
use super::report::Report;

/// What starts the result line (after whatever shares its row on the console).
pub const PREFIX: &str = "PROVISION-RESULT v1 ";

/// The last whole result line on the console, of any job: what the harness judges, since each
/// case's console is one boot of one job (`None`: no line yet).
pub fn last_line(console: &str) -> Option<Value> {
    last_line_of(console, None)
}

/// The last whole result line of the job whose recipe has the SHA-256 `job` (`None`: of any
/// job), as docs/controller.md's readers take it: an earlier job's line left in the console's
/// history is never this job's, and before this job's first line there is "no result yet".
pub fn last_line_of(console: &str, job: Option<&str>) -> Option<Value> {
    lines(console).into_iter().map(|(_, line)| line).rfind(|line| job.is_none_or(|job| line["recipe_sha256"] == job))
}

/// Every whole result line on the console, in order, each with the byte offset of its row in
/// `console` (docs/controller.md, Reading the result). Rows are split at LF, their CRs dropped.
/// Each `PROVISION-RESULT v1 ` on a row may start a line, which ends at a later prefix on the
/// row or at the row's end, the first such end where it is one JSON value and nothing else:
/// so a line cut on the wire and a whole one on the same row (the newline lost) are both
/// tried, in either order. A value that is not an object (`PROVISION-RESULT v1 null`) is
/// skipped; a prefix inside a line read whole is the line's text (a key may hold it), not a
/// line.
pub fn lines(console: &str) -> Vec<(usize, Value)> {
    let mut found = vec![];
    let mut at = 0;
    for row in console.split_inclusive('\n') {
        let text = row.replace(['\r', '\n'], "");
        let starts: Vec<usize> = text.match_indices(PREFIX).map(|(start, _)| start).collect();
        let ends: Vec<usize> = starts.iter().skip(1).copied().chain([text.len()]).collect();
        let mut after = 0;
        for (i, &start) in starts.iter().enumerate() {
            if start < after {
                continue;
            }
            let parse =
                |end: &usize| Some((*end, serde_json::from_str::<Value>(&text[start + PREFIX.len()..*end]).ok()?));
            if let Some((end, line)) = ends[i..].iter().find_map(parse).filter(|(_, line)| line.is_object()) {
                after = end;
                found.push((at, line));
            }
        }
        at += row.len();
    }
    found
}

/// What is wrong with the console's result lines as this job's (`job`: the SHA-256 of the
/// recipe on the task ISO; `None` when it has no recipe file): each line that names a recipe
/// names this one (a fresh guest's console holds no other job's), and the reader of this job's
/// lines takes the last line of the console whenever that line names a recipe (a line of no
/// job, `recipe_sha256` null, is read only as the console's last word).
pub fn of_this_job(console: &str, job: Option<&str>) -> Vec<String> {
    let mut problems = vec![];
    for (_, line) in lines(console) {
        let named = &line["recipe_sha256"];
        if !named.is_null() && job.is_none_or(|job| named != job) {
            problems.push(format!("a result line names the recipe {named}, not this job's {job:?}"));
        }
    }
    let last = last_line(console);
    if last.as_ref().is_some_and(|line| !line["recipe_sha256"].is_null()) && last_line_of(console, job) != last {
        problems.push("the reader of this job's lines does not take the console's last line".into());
    }
    problems
}

/// The shortest time between the initrd's line and its repeat that passes: it repeats every
/// 30 s; the harness may see the first late by as much as it is slowed.
const MIN_REPEAT: Duration = Duration::from_secs(20);

/// What is wrong with a boot the initrd's `/init` ended (`boot_failed`): its result line must
/// be on the serial console, say this failure and exit code in phase `boot` and nothing of a
/// run (no target, job, recipe, status, detail), and come again, the same, about 30 s later
/// (`seen`: when each line showed); the console says each of `console_says`; the guest never
/// reported (`reported`).
pub fn judge_boot_failed(expect: &Expect, reported: bool, console: &str, seen: &[Duration]) -> Vec<String> {
    let Expect::BootFailed { failure, exit, console_says } = expect else { return vec![] };
    let mut problems = vec![];
    if reported {
        problems.push("the guest reached its root and reported".into());
    }
    for words in console_says.iter().filter(|words| !console.contains(words.as_str())) {
        problems.push(format!("the serial console does not say {words:?}"));
    }
    let lines: Vec<Value> = lines(console).into_iter().map(|(_, line)| line).collect();
    let Some(line) = lines.first() else {
        problems.push("the serial console has no PROVISION-RESULT line".into());
        return problems;
    };
    let want = [
        ("state", Value::from("failed")),
        ("failure", failure.as_str().into()),
        ("exit_code", (*exit).into()),
        ("phase", "boot".into()),
        ("details", Value::Array(vec![])),
        ("details_omitted", 0.into()),
    ];
    let none = [
        "target",
        "job",
        "recipe_sha256",
        "media",
        "signer",
        "secure_boot",
        "status_sha256",
        "disk",
        "inventory_sha256",
        "end",
    ];
    let want = want.into_iter().chain(none.map(|key| (key, Value::Null)));
    for (key, want) in want {
        if line.get(key) != Some(&want) {
            problems.push(format!("the result line's {key} is {}, expected {want}", line[key]));
        }
    }
    match (lines.get(1), seen) {
        (None, _) => problems.push("the result line did not come again for a controller that attaches late".into()),
        (Some(again), _) if again != line => problems.push(format!("the repeated result line differs: {again}")),
        (Some(_), [first, second, ..]) if *second < *first + MIN_REPEAT => problems
            .push(format!("the result line came again {:.0?} after the first, expected about 30 s", *second - *first)),
        _ => {}
    }
    problems
}

/// What is wrong with the result line of this boot: empty means it told a controller the
/// same as the guest's report. `dir` receives status.json for its digest.
pub fn judge(expect: &Expect, report: &Report, console: &str, dir: &Path) -> Vec<String> {
    // A task past its deadline is still running when the reporter powers the guest off: the
    // follower then tells it interrupted ([`interrupted_by_the_power_off`]). What the report
    // holds is the line before.
    let reported = |line: &Value| !(expect.end() == Some(TaskEnd::TimedOut) && line["state"] == "interrupted");
    let Some((_, line)) = lines(console).into_iter().rfind(|(_, line)| reported(line)) else {
        return vec!["the serial console has no PROVISION-RESULT line".into()];
    };
    let mut problems = vec![];
    let mut differs = |what: &str, got: &Value, want: &Value| {
        if got != want {
            problems.push(format!("the result line's {what} is {got}, expected {want}"));
        }
    };
    match expect {
        Expect::Dispatched { target, end, .. } => {
            differs("state", &line["state"], &end.word().into());
            differs("exit_code", &line["exit_code"], &0.into());
            differs("target", &line["target"], &target.as_str().into());
            // The dispatch's own line came first, for the same recipe and job (SPEC §6d).
            match lines(console).into_iter().find(|(_, l)| l["state"] == "dispatched") {
                None => problems.push("the serial console has no dispatched line before the end's".into()),
                Some((_, first)) => {
                    for key in ["recipe_sha256", "job", "target"] {
                        if first[key] != line[key] {
                            problems.push(format!(
                                "the end's line {key} is {}, the dispatched line's {}",
                                line[key], first[key]
                            ));
                        }
                    }
                }
            }
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
        // The initrd's line, with no status.json to agree with: `judge_boot_failed`.
        Expect::BootFailed { .. } => return judge_boot_failed(expect, true, console, &[]),
    }
    let Some(bytes) = report.file("status.json") else { return problems };
    let Ok(status) = serde_json::from_slice::<Value>(bytes) else { return problems };
    let started = !matches!(status["state"].as_str(), Some("failed" | "rendered" | "running") | None);
    for key in [
        "state",
        "failure",
        "exit_code",
        "phase",
        "target",
        "job",
        "recipe_sha256",
        "media",
        "disk",
        "inventory_sha256",
    ] {
        let want = status.get(key).cloned().filter(|_| started || !matches!(key, "target" | "job"));
        let want = want.unwrap_or(Value::Null);
        if line[key] != want {
            problems.push(format!("the result line's {key} is {}, status.json's {want}", line[key]));
        }
    }
    let (told, shown) = (&status["end"], &line["end"]);
    if started && told.is_object() != shown.is_object() {
        problems.push(format!("the result line's end is {shown}, status.json's {told}"));
    } else if started && told.is_object() {
        for key in ["job_result", "shutdown"] {
            if shown[key] != told[key] {
                problems.push(format!("the result line's end.{key} is {}, status.json's {}", shown[key], told[key]));
            }
        }
        let units = told["units"].as_array().map(Vec::as_slice).unwrap_or_default();
        if shown["units"].as_array().is_none_or(|shown| !units.starts_with(shown)) {
            problems.push(format!("the result line's end.units {} are not status.json's first", shown["units"]));
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

/// A task past its deadline, then the guest powered off (the reporter's `systemctl poweroff`,
/// once it has sent its report): the follower, still following, gets SIGTERM as the shutdown
/// stops it and tells `interrupted` by the power-off, for the same job, before the kernel's
/// power-off line: the bus and the consoles are still there for it then (SPEC §6d).
pub fn interrupted_by_the_power_off(console: &str, exit: Option<std::process::ExitStatus>) -> Vec<String> {
    let mut problems = vec![];
    let found = lines(console);
    let late = found.iter().rfind(|(_, line)| line["state"] == "timed_out");
    let told = found.iter().find(|(_, line)| line["state"] == "interrupted");
    match (late, told) {
        (Some((_, late)), Some((at, line))) => {
            if line["job"] != late["job"] || line["end"]["shutdown"] != "poweroff" {
                problems.push(format!(
                    "the interruption's line is for job {} by {}, expected job {} by \"poweroff\"",
                    line["job"], line["end"]["shutdown"], late["job"]
                ));
            }
            if console.find(ShutsDown::Poweroff.kernel_line()).is_none_or(|down| down < *at) {
                problems.push("the interruption was not told before the power-off".into());
            }
        }
        _ => problems.push("the serial console has no interrupted line after the timed_out one".into()),
    }
    if !exit.is_some_and(|status| status.success()) {
        problems.push(format!("QEMU ended with {exit:?}, expected the guest's power-off"));
    }
    problems
}

/// A case whose guest reboots or powers itself off after the task's end, judged as a
/// controller sees it (there is no report: the guest went down): the serial console shows the
/// dispatch's line for the target, then the end's line for the same recipe and job, then the
/// kernel's line of the shutdown; and QEMU exited by itself, without an error (`-no-reboot`
/// makes a reboot end it too).
pub fn shut_down(expect: &Expect, console: &str, exit: Option<std::process::ExitStatus>) -> Vec<String> {
    let Expect::Dispatched { target, end, end_units, shuts_down: Some(shuts_down), .. } = expect else {
        return vec!["the case does not say how the guest shuts down".into()];
    };
    let mut problems = vec![];
    let lines = lines(console);
    let dispatched = lines.iter().find(|(_, line)| line["state"] == "dispatched");
    let told = lines.iter().find(|(_, line)| line["state"] == end.word());
    match (dispatched, told) {
        (None, _) => problems.push("the serial console has no dispatched line".into()),
        (_, None) => problems.push(format!("the serial console has no {} line", end.word())),
        (Some((_, first)), Some((at, line))) => {
            for key in ["recipe_sha256", "job", "target"] {
                if line[key] != first[key] || line[key].is_null() {
                    problems.push(format!("the end's {key} is {}, the dispatch's {}", line[key], first[key]));
                }
            }
            if first["target"] != target.as_str() {
                problems.push(format!("the dispatched target is {}, expected {target:?}", first["target"]));
            }
            if let Some(units) = end_units {
                if line["end"]["units"] != serde_json::json!(units) {
                    problems.push(format!("the end's line names {}, expected {units:?}", line["end"]["units"]));
                }
            }
            match console.find(shuts_down.kernel_line()) {
                None => problems.push(format!("the serial console does not show {:?}", shuts_down.kernel_line())),
                Some(down) if down < *at => {
                    problems.push(format!("{:?} came before the end was told", shuts_down.kernel_line()))
                }
                Some(_) => {}
            }
        }
    }
    match exit {
        Some(status) if status.success() => {}
        Some(status) => problems.push(format!("QEMU ended with {status}, expected the guest's own {shuts_down:?}")),
        None => problems.push("the guest did not shut down by itself".into()),
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A guest that reboots or powers off at its end is judged from the console and QEMU's
    /// exit: the dispatched line, then the end's for the same recipe and job, then the
    /// kernel's shutdown line.
    #[test]
    fn a_guest_that_goes_down_by_itself_is_judged_from_the_console() {
        use std::os::unix::process::ExitStatusExt;
        let mut expect = Expect::dispatched("vm-test-reboot.target", TaskEnd::Succeeded);
        if let Expect::Dispatched { shuts_down, .. } = &mut expect {
            *shuts_down = Some(ShutsDown::Reboot);
        }
        let line = |state: &str, job: &str| {
            format!(
                "PROVISION-RESULT v1 {{\"state\":\"{state}\",\"target\":\"vm-test-reboot.target\",\"job\":\"{job}\",\"recipe_sha256\":\"ab\"}}\r\n"
            )
        };
        let (dispatched, ended) = (line("dispatched", "/j/1"), line("succeeded", "/j/1"));
        let down = "[   80.1] reboot: Restarting system\r\n";
        let clean = Some(std::process::ExitStatus::from_raw(0));
        let good = format!("boot\r\n{dispatched}login: {ended}{down}");
        assert_eq!(shut_down(&expect, &good, clean), Vec::<String>::new());
        assert_eq!(
            shut_down(&expect, &format!("{dispatched}{down}{ended}"), clean),
            [r#""reboot: Restarting system" came before the end was told"#]
        );
        assert_eq!(
            shut_down(&expect, &format!("{dispatched}{}{down}", line("succeeded", "/j/2")), clean),
            [r#"the end's job is "/j/2", the dispatch's "/j/1""#]
        );
        assert_eq!(shut_down(&expect, &format!("{dispatched}{ended}"), None).len(), 2);
        let killed = Some(std::process::ExitStatus::from_raw(9));
        assert_eq!(shut_down(&expect, &good, killed).len(), 1, "killed, not its own reboot");
        assert_eq!(
            shut_down(&expect, &format!("{dispatched}{down}"), clean),
            ["the serial console has no succeeded line"]
        );
    }

    /// Every line names this job's recipe, or none; the reader of this job's lines takes the
    /// last one.
    #[test]
    fn every_line_is_this_jobs() {
        let line =
            |state: &str, sha: &str| format!("PROVISION-RESULT v1 {{\"state\":\"{state}\",\"recipe_sha256\":{sha}}}\n");
        let ours = line("dispatched", "\"ab\"") + &line("succeeded", "\"ab\"");
        assert_eq!(of_this_job(&ours, Some("ab")), Vec::<String>::new());
        assert_eq!(of_this_job(&line("failed", "null"), None), Vec::<String>::new());
        assert_eq!(
            of_this_job(&ours, Some("cd")),
            [
                r#"a result line names the recipe "ab", not this job's Some("cd")"#,
                r#"a result line names the recipe "ab", not this job's Some("cd")"#,
                "the reader of this job's lines does not take the console's last line",
            ]
        );
    }

    /// Finding 11 and 13 of the controller's trial: an earlier job's line is not this job's, a
    /// line that is not an object is skipped, a cut line and a whole one on one row are both
    /// tried, in either order, and text inside a line that reads as the prefix is not a line.
    #[test]
    fn this_jobs_last_whole_line_is_taken() {
        let line = |state: &str, job: &str| {
            format!("PROVISION-RESULT v1 {{\"state\":\"{state}\",\"recipe_sha256\":\"{job}\"}}")
        };
        let earlier = format!("{}\r\n", line("dispatched", "a"));
        assert_eq!(last_line_of(&earlier, Some("b")), None, "no result yet");
        assert_eq!(last_line_of(&earlier, None).unwrap()["state"], "dispatched");
        let cut = &line("failed", "b")[..30];
        let rows = [
            format!("{earlier}login: {cut}{}\r\n", line("succeeded", "b")),
            format!("{earlier}{}{cut}\r\n", line("succeeded", "b")),
            format!("{earlier}{}\r\nmaintenance login: PROVISION-RESULT v1 null\r\n", line("succeeded", "b")),
        ];
        for console in rows {
            assert_eq!(last_line_of(&console, Some("b")).unwrap()["state"], "succeeded", "{console}");
            assert_eq!(last_line_of(&console, None).unwrap()["state"], "succeeded", "{console}");
        }
        // A key holding the prefix, escaped as the dispatcher writes it: one line, not two.
        let inner = r#"PROVISION-RESULT v1 {"state":"x","details":[{"path":"/\u2028PROVISION-RESULT v1 {}PROVISION-RESULT v1 \u2028"}],"recipe_sha256":"b"}"#;
        let found: Vec<Value> = lines(inner).into_iter().map(|(_, line)| line).collect();
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0]["state"], "x");
    }

    /// tests/fixtures/console/: every real console log is read as its INDEX.md's table says,
    /// this job's last whole line and any job's, and its last whole inventory: what
    /// docs/controller.md's readers read of it too (tests/readers.rs holds them to the table).
    #[test]
    fn the_reader_reads_each_real_console_log_as_its_index_says() {
        let dir = crate::root().join("tests/fixtures/console");
        let index = std::fs::read_to_string(dir.join("INDEX.md")).unwrap();
        let table = index.split("## The logs").nth(1).unwrap();
        let rows: Vec<Vec<&str>> = table
            .lines()
            .filter(|l| l.starts_with("| `"))
            .map(|l| l.split(" | ").map(|c| c.trim_matches(['|', ' ', '`'])).collect())
            .collect();
        assert!(rows.len() >= 12, "{} logs", rows.len());
        let summary = |line: Option<Value>| match line {
            None => "none".to_owned(),
            Some(line) => {
                let recipe = line["recipe_sha256"].as_str().map_or("-", |sha| &sha[..8]).to_owned();
                format!("{} {} {recipe}", line["state"].as_str().unwrap(), line["exit_code"])
            }
        };
        for row in rows {
            let console = super::super::console_text(&dir.join(row[0]));
            let job = Some(row[1]).filter(|job| *job != "none");
            assert_eq!(summary(last_line_of(&console, job)), row[2], "{}: this job's line", row[0]);
            assert_eq!(summary(last_line(&console)), row[3], "{}: any job's line", row[0]);
            let (inventories, _) = super::super::inventory::read(&console);
            let last = inventories.last().map_or("none", |inventory| &inventory.sha256[..8]);
            assert_eq!(last, row[4], "{}: the last whole inventory", row[0]);
        }
    }

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

    /// Issue 40, finding 5: a boot the initrd ends is judged by its own line and its repeat.
    #[test]
    fn a_boot_the_initrd_ends_needs_its_line_and_the_repeat() {
        let want = Expect::BootFailed {
            failure: "boot_medium_not_found".into(),
            exit: 66,
            console_says: vec!["of another build".into()],
        };
        // The initrd's own line, as boot-io writes it, twice.
        let line = boot_io::result::BootFailure::MediumNotFound.line(15_210);
        let words = "maintenance-os: no boot medium PROVISION-MAINT with /.disk/x after 15 s; looked at 2 device(s);                      PROVISION-MAINT of another build (without that marker) on sr0\n";
        let console = format!("[    3.1] Run /init as init process\r\n{line}{words}{line}");
        let seen = [Duration::from_secs(40), Duration::from_secs(70)];
        assert_eq!(judge_boot_failed(&want, false, &console, &seen), Vec::<String>::new());
        assert_eq!(
            judge_boot_failed(&want, false, &format!("{line}{words}"), &seen[..1]),
            ["the result line did not come again for a controller that attaches late"]
        );
        assert_eq!(
            judge_boot_failed(&want, false, &console, &[Duration::from_secs(40), Duration::from_secs(41)]),
            ["the result line came again 1s after the first, expected about 30 s"]
        );
        let other = boot_io::result::BootFailure::LayersUnmountable.line(1);
        let problems = judge_boot_failed(&want, true, &format!("{other}{other}"), &seen);
        assert_eq!(
            problems,
            [
                "the guest reached its root and reported",
                "the serial console does not say \"of another build\"",
                "the result line's failure is \"boot_layers_unmountable\", expected \"boot_medium_not_found\"",
            ]
        );
        assert_eq!(
            judge_boot_failed(&want, false, words, &[]).last().unwrap(),
            "the serial console has no PROVISION-RESULT line"
        );
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

    /// SPEC §6d: a dispatched case ends with the end's line, after the dispatch's, for the
    /// same recipe and job; `lines` keeps where each row starts.
    #[test]
    fn the_end_follows_the_dispatch_for_the_same_job() {
        let dir = std::env::temp_dir();
        let report = Report::parse(br#"{"format":1,"files":{}}"#).unwrap();
        let want = Expect::dispatched("t.target", TaskEnd::TaskFailed);
        let line = |state: &str, job: &str| {
            format!("PROVISION-RESULT v1 {{\"state\":\"{state}\",\"exit_code\":0,\"target\":\"t.target\",\"job\":\"{job}\"}}\n")
        };
        let good = format!("boot\n{}x{}", line("dispatched", "/j/1"), line("task_failed", "/j/1"));
        assert_eq!(judge(&want, &report, &good, &dir), Vec::<String>::new());
        let offsets: Vec<usize> = lines(&good).iter().map(|(at, _)| *at).collect();
        assert_eq!(offsets, [5, 5 + line("dispatched", "/j/1").len()]);
        let other_job = format!("{}{}", line("dispatched", "/j/1"), line("task_failed", "/j/2"));
        assert_eq!(
            judge(&want, &report, &other_job, &dir),
            [r#"the end's line job is "/j/2", the dispatched line's "/j/1""#]
        );
        assert_eq!(
            judge(&want, &report, &line("dispatched", "/j/1"), &dir),
            [r#"the result line's state is "dispatched", expected "task_failed""#]
        );
        assert_eq!(
            judge(&want, &report, &line("task_failed", "/j/1"), &dir),
            ["the serial console has no dispatched line before the end's"]
        );
    }

    /// A task past its deadline when the guest powers off: the interruption's line, for the
    /// same job and by the power-off, before the kernel's line.
    #[test]
    fn a_task_past_its_deadline_is_told_interrupted_by_the_power_off() {
        use std::os::unix::process::ExitStatusExt;
        let line = |state: &str, job: &str, shutdown: &str| {
            format!(
                "PROVISION-RESULT v1 {{\"state\":\"{state}\",\"job\":\"{job}\",\"end\":{{\"shutdown\":{shutdown}}}}}\n"
            )
        };
        let late = line("timed_out", "/j/1", "null");
        let down = "[ 99.1] reboot: Power down\n";
        let off = Some(std::process::ExitStatus::from_raw(0));
        let good = format!("{late}{}{down}", line("interrupted", "/j/1", "\"poweroff\""));
        assert_eq!(interrupted_by_the_power_off(&good, off), Vec::<String>::new());
        assert_eq!(
            interrupted_by_the_power_off(&format!("{late}{}{down}", line("interrupted", "/j/1", "null")), off),
            [r#"the interruption's line is for job "/j/1" by null, expected job "/j/1" by "poweroff""#]
        );
        assert_eq!(
            interrupted_by_the_power_off(&format!("{late}{down}"), off),
            ["the serial console has no interrupted line after the timed_out one"]
        );
        assert_eq!(interrupted_by_the_power_off(&good, None).len(), 1);
        // The report's line is the timed_out one, not the interruption that followed.
        let dir = std::env::temp_dir();
        let report = Report::parse(br#"{"format":1,"files":{}}"#).unwrap();
        let want = Expect::dispatched("t.target", TaskEnd::TimedOut);
        let console = "PROVISION-RESULT v1 {\"state\":\"dispatched\",\"exit_code\":0,\"target\":\"t.target\"}\n\
             PROVISION-RESULT v1 {\"state\":\"timed_out\",\"exit_code\":0,\"target\":\"t.target\"}\n\
             PROVISION-RESULT v1 {\"state\":\"interrupted\",\"exit_code\":0,\"target\":\"t.target\"}\n";
        assert_eq!(judge(&want, &report, console, &dir), Vec::<String>::new());
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
