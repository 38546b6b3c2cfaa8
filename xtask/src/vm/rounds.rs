//! Several cases in one boot, one round each, proven the way an operator goes on after a
//! failure (docs/operator.md, "What to do for each failure": attach the new task ISO, then
//! rerun the dispatcher). The first case runs as the boot's own. Once the guest has reported
//! it, the harness puts the next case's task ISO into the task CD
//! ([`super::qemu::change_task_media`], a BMC swapping its virtual media) and tells the
//! reporter to go on ([`Control`]); the reporter stops `provision-failed.service`, clears tty1,
//! writes the round's [`marker`] on the serial console and starts
//! `provision-dispatcher.service` again: a second `run` in the same boot, after a failure, so
//! that no dispatch of this boot stands in its way (SPEC §6.5). Then it reports the round.
//!
//! - [`plan`]: which cases share a boot, in which order, and which keep a boot of their own.
//! - [`console`]: a round's part of the serial console.
//! - [`judge`]: what makes a round's facts its own (the report, the run, status.json, tty1).

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;

use anyhow::{Context, Result};

use super::cases::{Case, Expect, TaskArrival, VmOptions};
use super::report::Report;

/// How many cases one boot proves at most, unless `--rounds` says: a boot costs 40 to 110 s
/// of TCG here and a round about a fifth of that, and with at most four rounds a boot, the
/// cases of one machine still make enough boots for `--jobs 2` to keep two going.
pub const MOST_ROUNDS: usize = 4;

/// What makes the boot of `case` (cases whose boots are the same may share one), or why the
/// case keeps a boot of its own. Every key of vm.json is placed here, as the boot's, a
/// round's or its own boot's: a new one does not compile until it is.
pub fn boot_of(case: &Case) -> Result<String, &'static str> {
    let VmOptions {
        // Skipped before (`direct`), or one for the whole run (the architecture).
        mode: _,
        arch: _,
        // The boot: the machine and what it boots.
        firmware,
        boot_media,
        disks,
        image_layer,
        machine_uuid,
        secure_boot,
        // A throttle on the task CD's drive, which stays for the boot.
        media_read_bytes_per_sec,
        // A round's own: its task ISO, and how long it may take.
        recipe_padding_bytes: _,
        recipe_file: _,
        task_media_damage: _,
        signing: _,
        recipe_changed_after_signing: _,
        deadline: _,
        // A boot of its own.
        attach_media_after,
        detach_media_after,
        fault_while_held,
        boot_read_bytes_per_sec,
        kernel_args,
        ipmi,
        extra_media,
        unsigned_grub,
        task,
        toram,
    } = &case.vm;
    let own = [
        (matches!(case.expect, Expect::RefusedByFirmware {} | Expect::BootFailed { .. }), "it proves the boot itself"),
        (case.expect.shuts_down().is_some(), "its guest shuts itself down"),
        (attach_media_after.is_some() || detach_media_after.is_some(), "its task CD is plugged or pulled on a clock"),
        (fault_while_held.is_some(), "it holds the dispatcher"),
        (boot_read_bytes_per_sec.is_some(), "it measures the boot"),
        (kernel_args.is_some(), "its kernel command line is its own"),
        (ipmi.is_some(), "its BMC's SEL would hold the earlier rounds' events"),
        (!extra_media.is_empty(), "it has media of its own beside the task CD"),
        (*unsigned_grub, "its boot ISO is its own"),
        (*task == TaskArrival::Embedded, "its task is written into its boot ISO"),
        (*toram, "its boot ISO is its own (toram's menu entry)"),
    ];
    if let Some((_, why)) = own.iter().find(|(own, _)| *own) {
        return Err(why);
    }
    Ok(format!(
        "{firmware:?} {boot_media:?} {disks:?} {image_layer:?} {machine_uuid:?} {secure_boot} {media_read_bytes_per_sec:?}"
    ))
}

/// The boots that prove `cases`, each its cases in the order of its rounds. A case keeps a
/// boot of its own when [`boot_of`] says so; the others share boots with cases of the same
/// boot, at most `most` rounds each, as few boots as that allows and as even as they can
/// be. A case that dispatches is the last round of its boot (its target ran and its task's
/// end was told: nothing after it would be a clean rerun), so there are at least as many
/// boots as such cases; the failures go first, in the order given (by name), filling the
/// boots in turn. Boots with more rounds come first (the long ones, while two run at once),
/// then by their first case's name: the same cases make the same boots.
pub fn plan<'a>(cases: &[&'a Case], most: usize) -> Vec<Vec<&'a Case>> {
    let mut boots = vec![];
    let mut shared: Vec<(String, Vec<&Case>, Vec<&Case>)> = vec![];
    for &case in cases {
        let Ok(key) = boot_of(case) else {
            boots.push(vec![case]);
            continue;
        };
        let at = match shared.iter().position(|(same, ..)| *same == key) {
            Some(at) => at,
            None => {
                shared.push((key, vec![], vec![]));
                shared.len() - 1
            }
        };
        let (_, failing, dispatching) = &mut shared[at];
        match case.expect.end() {
            Some(_) => dispatching.push(case),
            None => failing.push(case),
        }
    }
    for (_, failing, dispatching) in shared {
        boots.extend(split(failing, dispatching, most.max(1)));
    }
    boots.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a[0].name.cmp(&b[0].name)));
    boots
}

/// The cases of one boot into as few boots of at most `most` rounds as hold them with one
/// dispatch each at most, at the end; the boots' sizes differ by one at most.
fn split<'a>(failing: Vec<&'a Case>, dispatching: Vec<&'a Case>, most: usize) -> Vec<Vec<&'a Case>> {
    let cases = failing.len() + dispatching.len();
    let count = dispatching.len().max(cases.div_ceil(most));
    let (mut failing, mut dispatching) = (failing.into_iter(), dispatching.into_iter());
    (0..count)
        .map(|i| {
            let size = cases / count + usize::from(i < cases % count);
            let last = dispatching.next();
            let mut boot: Vec<&Case> = failing.by_ref().take(size - usize::from(last.is_some())).collect();
            boot.extend(last);
            boot
        })
        .collect()
}

/// The line the reporter writes on the serial console as round `round` (from 1) begins,
/// before it starts the dispatcher again.
pub fn marker(round: usize) -> String {
    format!("vm-test: round {round} begins")
}

/// Round `index`'s part (from 0) of a boot's serial console: from its marker (the boot's start
/// for the first) to the next round's, or the end. Empty until its marker shows.
pub fn console(whole: &str, index: usize) -> &str {
    let start = match index {
        0 => 0,
        _ => match whole.find(&marker(index + 1)) {
            Some(at) => at,
            None => return "",
        },
    };
    let rest = &whole[start..];
    &rest[..rest.find(&marker(index + 2)).unwrap_or(rest.len())]
}

/// What is wrong with round `index` (from 0) being judged on its own facts: the report is this
/// round's; the dispatcher ran in it (and the follower, after a dispatch); and from the second
/// round on, status.json is the one this round's run wrote (the earlier round's stays until a
/// run replaces it) and tty1 was clear as the round began (an earlier round's banner cannot
/// stand for this one's). Units are scoped by their invocation as the round began
/// ([`Report::unit`]), the journals by a cursor taken then, the serial console by [`console`].
pub fn judge(index: usize, expect: &Expect, report: &Report) -> Vec<String> {
    let mut problems = vec![];
    let round = report.text("round");
    if round.trim() != (index + 1).to_string() {
        problems.push(format!("the report is of round {:?}, expected round {}", round.trim(), index + 1));
    }
    if !report.dispatcher().ran() {
        problems.push("provision-dispatcher.service did not run in this round".into());
    }
    if expect.end().is_some() && !report.unit("task-end.show").ran() {
        problems.push("provision-task-end.service did not run in this round".into());
    }
    if index > 0 {
        if report.file("status.json").is_some() && report.file("status.json") == report.file("status.before-round") {
            problems.push("status.json is the earlier round's: this round's run wrote none".into());
        }
        if report
            .file("tty1.at-start")
            .is_none_or(|screen| String::from_utf8_lossy(screen).contains("PROVISIONING FAILED"))
        {
            problems.push("the video console (tty1) was not clear as the round began".into());
        }
    }
    problems
}

/// The harness's end of the control port ([`super::qemu::CONTROL_PORT`]): connected when first
/// used and kept for the boot, so that no word is lost with a connection closed at once.
pub struct Control {
    path: PathBuf,
    stream: Option<UnixStream>,
}

impl Control {
    pub fn new(path: PathBuf) -> Control {
        Control { path, stream: None }
    }

    /// The next round: the reporter runs the dispatcher again, on the medium now in the CD.
    pub fn next(&mut self) -> Result<()> {
        self.say("next")
    }

    /// No more rounds: the reporter powers the guest off (a case judged to its power-off).
    pub fn power_off(&mut self) -> Result<()> {
        self.say("poweroff")
    }

    fn say(&mut self, word: &str) -> Result<()> {
        let stream = match &mut self.stream {
            Some(stream) => stream,
            None => self
                .stream
                .insert(UnixStream::connect(&self.path).with_context(|| format!("connect {}", self.path.display()))?),
        };
        writeln!(stream, "{word}").context("tell the reporter")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vm::cases::{self, tests::report};

    /// A case folder of its own, made and loaded as the harness loads the real ones.
    fn case(name: &str, expect: &str, vm: Option<&str>) -> Case {
        let dir = std::env::temp_dir().join(format!("vm-rounds-{}", std::process::id())).join(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("recipe.json"), "{}").unwrap();
        std::fs::write(dir.join("expect.json"), expect).unwrap();
        let _ = std::fs::remove_file(dir.join("vm.json"));
        if let Some(vm) = vm {
            std::fs::write(dir.join("vm.json"), vm).unwrap();
        }
        cases::load(&dir).unwrap()
    }

    const FAILS: &str = r#"{"outcome": "failed", "exit": 65, "paths": []}"#;
    const DISPATCHES: &str = r#"{"outcome": "dispatched", "target": "install-linux.target"}"#;

    fn names(boots: &[Vec<&Case>]) -> Vec<Vec<String>> {
        boots.iter().map(|boot| boot.iter().map(|case| case.name.clone()).collect()).collect()
    }

    #[test]
    fn a_case_that_proves_something_of_its_boot_keeps_it_to_itself() {
        let own = [
            (r#"{"outcome": "refused_by_firmware"}"#, None),
            (r#"{"outcome": "boot_failed", "failure": "boot_medium_not_found", "exit": 66}"#, None),
            (r#"{"outcome": "dispatched", "target": "t.target", "shuts_down": "reboot"}"#, None),
            (FAILS, Some(r#"{"attach_media_after_secs": 10}"#)),
            (FAILS, Some(r#"{"detach_media_after_secs": 4}"#)),
            (FAILS, Some(r#"{"attach_media_after_secs": 8, "fault_while_held": "restart-dbus"}"#)),
            (FAILS, Some(r#"{"boot_read_bytes_per_sec": 1000000}"#)),
            (FAILS, Some(r#"{"kernel_args": "x=1"}"#)),
            (FAILS, Some(r#"{"ipmi": true}"#)),
            (FAILS, Some(r#"{"ipmi": "silent"}"#)),
            (FAILS, Some(r#"{"extra_media": [{"volume_id": "TASK"}]}"#)),
            (FAILS, Some(r#"{"unsigned_grub": true}"#)),
            (FAILS, Some(r#"{"task": "embedded"}"#)),
            (FAILS, Some(r#"{"toram": true}"#)),
        ];
        let (a, b) = (case("a-fails", FAILS, None), case("b-fails", FAILS, None));
        for (n, (expect, vm)) in own.into_iter().enumerate() {
            let alone = case(&format!("own-{n}"), expect, vm);
            assert!(boot_of(&alone).is_err(), "{expect} {vm:?}");
            let boots = plan(&[&a, &alone, &b], MOST_ROUNDS);
            assert_eq!(
                names(&boots),
                [vec!["a-fails".to_owned(), "b-fails".to_owned()], vec![format!("own-{n}")]],
                "{expect} {vm:?}"
            );
        }
    }

    #[test]
    fn cases_share_a_boot_only_on_the_same_machine() {
        let others = [
            r#"{"firmware": "bios"}"#,
            r#"{"boot_media": "usb-disk"}"#,
            r#"{"disks": [{"bus": "scsi", "serial": "A"}]}"#,
            r#"{"disks": [{"bus": "scsi", "serial": "B"}]}"#,
            r#"{"image_layer": "tests/vm-trust"}"#,
            r#"{"image_layer": "tests/vm-deadline"}"#,
            r#"{"machine_uuid": "4c4c4544-0042-3510-8052-b4c04f4d4e31"}"#,
            r#"{"secure_boot": false}"#,
            r#"{"media_read_bytes_per_sec": 131072}"#,
        ];
        let plain = case("plain", FAILS, None);
        // What only the task ISO holds is a round's: these share the plain case's boot.
        let rounds = [
            r#"{"recipe_file": "symlink"}"#,
            r#"{"task_media_damage": "truncate"}"#,
            r#"{"recipe_padding_bytes": 100, "deadline_secs": 100}"#,
            r#"{"schema": "v2"}"#,
        ];
        for (n, vm) in rounds.into_iter().enumerate() {
            let same = case(&format!("same-{n}"), FAILS, Some(vm));
            assert_eq!(boot_of(&same), boot_of(&plain), "{vm}");
        }
        let mut all = vec![plain];
        all.extend(others.iter().enumerate().map(|(n, vm)| case(&format!("other-{n}"), FAILS, Some(vm))));
        let twin = case("twin-of-other-0", FAILS, Some(others[0]));
        let listed: Vec<&Case> = all.iter().chain([&twin]).collect();
        let boots = plan(&listed, MOST_ROUNDS);
        assert_eq!(boots.len(), others.len() + 1, "{:?}", names(&boots));
        assert_eq!(names(&boots)[0], ["other-0", "twin-of-other-0"]);
    }

    #[test]
    fn a_dispatch_ends_its_boot_and_the_rounds_are_bounded() {
        let failing: Vec<Case> = (0..5).map(|n| case(&format!("f{n}"), FAILS, None)).collect();
        let dispatching: Vec<Case> = (0..2).map(|n| case(&format!("d{n}"), DISPATCHES, None)).collect();
        let listed: Vec<&Case> = dispatching.iter().chain(&failing).collect();
        // Seven cases, two dispatches: two boots, the failures first, in the order given.
        let boots = plan(&listed, 4);
        assert_eq!(names(&boots), [["f0", "f1", "f2", "d0"].as_slice(), &["f3", "f4", "d1"]]);
        holds_together(&boots, 4);
        let boots = plan(&listed, 2);
        assert_eq!(names(&boots), [["f0", "d0"].as_slice(), &["f1", "d1"], &["f2", "f3"], &["f4"]]);
        holds_together(&boots, 2);
        assert_eq!(plan(&listed, 1).len(), 7, "--rounds 1: every case alone");
        assert_eq!(names(&plan(&listed[..1], 4)), [["d0"]], "--cases of one case: that case alone");
    }

    /// What every plan keeps: at most `most` rounds a boot, a dispatch only as a boot's last
    /// round, the cases of a boot all of the same boot (or alone), each case in one boot.
    fn holds_together(boots: &[Vec<&Case>], most: usize) {
        for boot in boots {
            assert!(boot.len() <= most, "{:?}", names(boots));
            let (last, before) = boot.split_last().unwrap();
            assert!(before.iter().all(|case| case.expect.end().is_none()), "a dispatch before the last round");
            if boot.len() > 1 {
                assert!(boot.iter().all(|case| boot_of(case).is_ok() && boot_of(case) == boot_of(last)));
            }
        }
        let mut all: Vec<&str> = boots.iter().flatten().map(|case| case.name.as_str()).collect();
        let count = all.len();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), count, "a case in two boots");
    }

    /// The shipped cases: what must keep a boot of its own does, and the rest hold together.
    #[test]
    fn the_shipped_cases_make_boots_that_keep_apart_what_must_be_apart() {
        let all = cases::load_all(&crate::root().join("tests/vm-cases")).unwrap();
        let listed: Vec<&Case> = all.iter().collect();
        let boots = plan(&listed, MOST_ROUNDS);
        holds_together(&boots, MOST_ROUNDS);
        assert_eq!(boots.iter().map(Vec::len).sum::<usize>(), all.len());
        for name in
            ["seed-esxi", "late-media", "unsigned-grub-refused", "boot-slow-link-dispatched", "task-reboots-at-its-end"]
        {
            assert!(boots.iter().any(|boot| boot.len() == 1 && boot[0].name == name), "{name} shares a boot");
        }
        assert!(boots.len() < all.len(), "no boot is shared");
    }

    /// A round is judged on its part of the serial console only: the earlier round's banner and
    /// result line do not stand for a later round's, which has none.
    #[test]
    fn a_round_sees_only_its_own_part_of_the_serial_console() {
        let rule = "=".repeat(72);
        let first = format!(
            "boot\n{rule}\nPROVISIONING FAILED\n{rule}\nexit code:  65\n  /target_disk: is required\n{rule}\n\
             PROVISION-RESULT v1 {{\"state\":\"failed\",\"exit_code\":65,\"target\":null,\
             \"details\":[{{\"path\":\"/target_disk\"}}]}}\nlogin: "
        );
        let second = format!("{}\nnothing of the dispatcher yet\n", marker(2));
        let whole = format!("{first}\n{second}");
        assert_eq!(console(&whole, 0), format!("{first}\n"));
        assert_eq!(console(&whole, 1), second);
        assert_eq!(console(&whole, 2), "", "the third round has not begun");
        let third = format!("{whole}{}\nround three\n", marker(3));
        assert_eq!(console(&third, 1), second, "up to the next round's marker");
        let failed = Expect::failed(65, &["/target_disk"]);
        let report = report(&[("failed.journal", b"PROVISIONING FAILED\n  /target_disk: is required\n")]);
        let banner = "the serial console does not show the failure banner".to_owned();
        assert!(!cases::judge(&failed, &report, &whole).contains(&banner), "the whole console shows one");
        assert!(cases::judge(&failed, &report, console(&whole, 1)).contains(&banner));
        let dir = std::env::temp_dir();
        assert!(super::super::result::judge(&failed, &report, &whole, &dir).is_empty(), "the earlier round's line");
        assert_eq!(
            super::super::result::judge(&failed, &report, console(&whole, 1), &dir),
            ["the serial console has no PROVISION-RESULT line"]
        );
    }

    /// The reports of a boot's rounds come one a line: a round's report is its own, and what
    /// an earlier round's journal said does not stand for a later round's `banner_says`.
    #[test]
    fn a_rounds_report_is_its_own_line_of_the_reports() {
        let line = |round: &str, journal: &str| {
            let files = serde_json::json!({"round": cases::tests::encode(round.as_bytes()),
                "failed.journal": cases::tests::encode(journal.as_bytes())});
            format!("{}\n", serde_json::json!({"format": 1, "files": files}))
        };
        let path = std::env::temp_dir().join(format!("vm-rounds-reports-{}", std::process::id()));
        let says = "the schema is of a version this image does not know";
        std::fs::write(&path, format!("{}{}", line("1", says), line("2", "PROVISIONING FAILED"))).unwrap();
        let first = super::super::nth_report(&path, 0).unwrap().unwrap();
        let second = super::super::nth_report(&path, 1).unwrap().unwrap();
        assert!(super::super::nth_report(&path, 2).is_none(), "no third report yet");
        assert_eq!((first.text("round"), second.text("round")), ("1".into(), "2".into()));
        let mut expect = Expect::failed(78, &[]);
        if let Expect::Failed { banner_says, .. } = &mut expect {
            *banner_says = vec![says.into()];
        }
        let missing = format!("provision-failed.service's output does not say {says:?}");
        assert!(!cases::judge(&expect, &first, "").contains(&missing));
        assert!(cases::judge(&expect, &second, "").contains(&missing));
        std::fs::write(&path, line("1", says).trim_end()).unwrap();
        assert!(super::super::nth_report(&path, 0).is_none(), "a report not yet whole");
        std::fs::remove_file(&path).unwrap();
    }

    /// From the second round on, what the earlier round left (its run of the dispatcher, its
    /// status.json, its banner on tty1) fails the round instead of passing for it.
    #[test]
    fn a_later_round_is_judged_on_its_own_run_status_and_screen() {
        let show = |id: &str| {
            format!("Id=provision-dispatcher.service\nInvocationID={id}\nExecMainStartTimestampMonotonic=7\n")
        };
        let (now, then) = (show("b2"), show("a1"));
        let fresh: Vec<(&str, &[u8])> = vec![
            ("round", b"2\n"),
            ("round-start", b"provision-dispatcher.service=a1\n"),
            ("dispatcher.show", now.as_bytes()),
            ("status.before-round", br#"{"state": "failed", "started_at": "1"}"#),
            ("status.json", br#"{"state": "failed", "started_at": "2"}"#),
            ("tty1.at-start", b"                    \n"),
        ];
        let failed = Expect::failed(65, &[]);
        assert_eq!(judge(1, &failed, &report(&fresh)), Vec::<String>::new());
        let mut stale = fresh.clone();
        stale[0].1 = b"1\n";
        stale[2].1 = then.as_bytes();
        stale[4].1 = stale[3].1;
        stale[5].1 = b"  PROVISIONING FAILED  \n";
        assert_eq!(
            judge(1, &failed, &report(&stale)),
            [
                r#"the report is of round "1", expected round 2"#,
                "provision-dispatcher.service did not run in this round",
                "status.json is the earlier round's: this round's run wrote none",
                "the video console (tty1) was not clear as the round began",
            ]
        );
        // The first round is the boot's: everything in it is its own.
        let first: Vec<(&str, &[u8])> = vec![("round", b"1\n"), ("dispatcher.show", then.as_bytes())];
        assert_eq!(judge(0, &failed, &report(&first)), Vec::<String>::new());
        // After a dispatch, the follower must have told this round's end.
        let follower = b"Id=provision-task-end.service\nInvocationID=f1\nExecMainStartTimestampMonotonic=8\n";
        let mut dispatched = fresh.clone();
        dispatched.push(("task-end.show", follower));
        dispatched[1].1 = b"provision-dispatcher.service=a1\nprovision-task-end.service=f1\n";
        let expect = Expect::dispatched("t.target", cases::TaskEnd::Succeeded);
        assert_eq!(judge(1, &expect, &report(&dispatched)), ["provision-task-end.service did not run in this round"]);
    }

    /// In a boot's later round, a unit ran only if it was started again: what it did in an
    /// earlier round does not count.
    #[test]
    fn a_unit_ran_in_a_later_round_only_under_a_new_invocation() {
        let show =
            |id: &str| format!("Id=provision-failed.service\nInvocationID={id}\nExecMainStartTimestampMonotonic=9\n");
        let failed = |id: &str, start: Option<&str>| {
            let show = show(id);
            let mut files: Vec<(&str, &[u8])> = vec![("failed.show", show.as_bytes())];
            files.extend(start.map(|start| ("round-start", start.as_bytes())));
            report(&files)
        };
        assert!(failed("a1", None).failed_unit().ran(), "the first round: ran in this boot");
        let earlier = "provision-dispatcher.service=d1\nprovision-failed.service=a1\n";
        assert!(!failed("a1", Some(earlier)).failed_unit().ran(), "the earlier round's run");
        assert!(failed("b2", Some(earlier)).failed_unit().ran());
    }
}
