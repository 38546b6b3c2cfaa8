//! Regressions of the hostile-world attack (issue 14): each test failed on the code the
//! attack broke and names the finding it guards.

mod common;

use std::path::Path;

use common::bus::{PrivateBus, SEED_TARGETS};
use common::machine::{example, media, run_command, Machine, Tmpfs};
use common::run;

/// Finding 4: `run --output` given a directory the dispatcher did not write replaced the whole
/// tree and exited 0. Now it is refused with 73 and left exactly as it was; nothing starts.
#[test]
fn run_never_replaces_a_directory_it_did_not_write() {
    let bus = PrivateBus::with_units(SEED_TARGETS);
    let machine = Machine::new();
    let output = machine.output();
    std::fs::create_dir_all(output.join("a/b/c")).unwrap();
    std::fs::write(output.join("a/b/c/deep.conf"), "precious").unwrap();
    std::fs::write(output.join("recipe.env"), "TASK_TARGET=\"somebody else's\"\n").unwrap();
    let media = media(&example("seed-esxi"));
    let out = machine.dispatch(media.path(), Some(&bus), &[]);
    assert_eq!(out.code, 73, "{}", out.stderr);
    assert_eq!(std::fs::read_to_string(output.join("a/b/c/deep.conf")).unwrap(), "precious");
    assert_eq!(std::fs::read_to_string(output.join("recipe.env")).unwrap(), "TASK_TARGET=\"somebody else's\"\n");
    assert_eq!(entries(&output), ["a", "recipe.env"]);
    let status = machine.status();
    assert_eq!((status["state"].as_str(), status["phase"].as_str()), (Some("failed"), Some("outputs")));
    assert!(status["message"].as_str().unwrap().contains("not an output set of the dispatcher"), "{status}");
    assert!(bus.starts().is_empty(), "nothing was started");
    assert_eq!(entries(output.parent().unwrap()), ["provision", "provision-dispatcher"], "no staging left");
}

/// The other side of finding 4: a previous output set of the dispatcher is still replaced
/// whole (a rerun with --force in the same boot, or a new boot with /run kept).
#[test]
fn run_replaces_its_own_previous_output_set() {
    let bus = PrivateBus::with_units(SEED_TARGETS);
    let machine = Machine::new();
    let mut missing_disk = example("seed-windows");
    missing_disk["target_disk"] = "/dev/mapper/none".into();
    let windows = media(&missing_disk);
    let esxi = media(&example("seed-esxi"));
    assert_eq!(machine.dispatch(esxi.path(), Some(&bus), &[]).code, 0);
    assert!(machine.output().join("ks.cfg").exists());
    let out = machine.dispatch(windows.path(), Some(&bus), &["--force", "--no-start"]);
    // The disk does not exist, so this one fails validation and the old set stays.
    assert_eq!(out.code, 65, "{}", out.stderr);
    assert!(machine.output().join("ks.cfg").exists());
    let maintenance = media(&example("seed-maintenance"));
    let out = machine.dispatch(maintenance.path(), Some(&bus), &["--force"]);
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(!machine.output().join("ks.cfg").exists(), "the old set is gone whole");
    assert_eq!(entries(&machine.output()), [".provision-dispatcher", "recipe.env"]);
    let env = std::fs::read_to_string(machine.output().join("recipe.env")).unwrap();
    assert!(env.starts_with("TASK_TARGET=\"supermicro-update.target\"\n"), "{env}");
}

/// Finding 5: with the state directory on a full filesystem, `run` published its outputs and
/// then failed, leaving status.json at `running`. Now nothing is published unless the final
/// status has room.
#[test]
fn outputs_are_not_published_when_the_final_status_has_no_room() {
    let bus = PrivateBus::with_units(SEED_TARGETS);
    // One page: the first status fits, and nothing more.
    let state_fs = Tmpfs::mount("size=4k");
    let machine = Machine::new();
    let state = state_fs.path().join("state");
    let media = media(&example("seed-esxi"));
    let out = run(&mut run_command(media.path(), &state, &machine.output(), &bus.address));
    assert_eq!(out.code, 73, "{}", out.stderr);
    assert!(!machine.output().exists(), "no outputs were published");
    assert!(bus.starts().is_empty(), "nothing was started");
    assert_eq!(entries(machine.output().parent().unwrap()), Vec::<String>::new(), "no staging left");
}

fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    names.sort();
    names
}
