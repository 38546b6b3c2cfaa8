//! The machine's inventory through the real binary (SPEC §6b, issue 39 #1): every `run` prints
//! it before its result line, from a sysfs and a procfs of the test's own; `check --inventory`
//! reads it back from the console log as printed, or from JSON, and names what is wrong.

mod common;

use std::path::{Path, PathBuf};

use common::machine::{example, media, Machine};
use common::{dispatcher, run, Run};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

const PREFIX: &str = "PROVISION-INVENTORY v1 ";

/// A machine as sysfs and procfs show it: SMBIOS, UEFI with Secure Boot, a TPM 2.0, four CPUs,
/// 8 GiB, one NIC and one virtio disk (`vdb`, serial PD-INV-0001), under `dir`.
fn machine_tree(dir: &Path) -> (PathBuf, PathBuf) {
    let put = |path: &str, bytes: &[u8]| {
        let path = dir.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    };
    let link = |path: &str, target: &str| {
        let path = dir.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(target, path).unwrap();
    };
    put("sys/class/dmi/id/product_uuid", b"4C4C4544-0042-3510-8052-B4C04F4D4E31\n");
    put("sys/class/dmi/id/sys_vendor", b"Dell Inc.\n");
    put("sys/class/dmi/id/product_name", b"PowerEdge R650\n");
    put("sys/class/dmi/id/product_serial", b"7XYZ123\n");
    put("sys/class/dmi/id/bios_version", b"1.13.2\n");
    put("sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c", &[6, 0, 0, 0, 1]);
    put("sys/kernel/security/lockdown", b"none [integrity] confidentiality\n");
    put("sys/class/tpm/tpm0/tpm_version_major", b"2\n");
    put("sys/devices/system/cpu/online", b"0-3\n");
    put("proc/cpuinfo", b"processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz\n");
    put("proc/meminfo", b"MemTotal:        8388608 kB\n");
    let nic = "sys/devices/pci0000:00/0000:19:00.0";
    put(&format!("{nic}/net/eno1/address"), b"3c:ec:ef:00:11:22\n");
    put(&format!("{nic}/net/eno1/operstate"), b"down\n");
    std::fs::create_dir_all(dir.join("sys/bus/pci/drivers/ixgbe")).unwrap();
    link(&format!("{nic}/driver"), "../../../bus/pci/drivers/ixgbe");
    link(&format!("{nic}/net/eno1/device"), "../..");
    link("sys/class/net/eno1", "../../devices/pci0000:00/0000:19:00.0/net/eno1");
    let disk = "sys/devices/pci0000:00/0000:00:05.0/virtio3/block/vdb";
    put(&format!("{disk}/dev"), b"253:16\n");
    put(&format!("{disk}/size"), b"2097152\n");
    put(&format!("{disk}/serial"), b"PD-INV-0001\n");
    put(&format!("{disk}/removable"), b"0\n");
    put(&format!("{disk}/queue/rotational"), b"0\n");
    link(&format!("{disk}/device"), "../../../virtio3");
    link("sys/block/vdb", "../devices/pci0000:00/0000:00:05.0/virtio3/block/vdb");
    (dir.join("sys"), dir.join("proc"))
}

/// `run --no-start` on that machine: what it printed, and its status.json.
fn run_on_tree(recipe: Value) -> (Run, Value, tempfile::TempDir) {
    let tree = tempfile::tempdir().unwrap();
    let (sys, proc) = machine_tree(tree.path());
    let machine = Machine::new();
    let media = media(&recipe);
    let roots = ["--sysfs-root", sys.to_str().unwrap(), "--proc-root", proc.to_str().unwrap()];
    let out = machine.dispatch(media.path(), None, &[&["--no-start"][..], &roots].concat());
    let status = machine.status();
    (out, status, tree)
}

/// The document of the inventory lines in `stdout`, joined as docs/reference.md (Reading the inventory) says.
fn joined(stdout: &str) -> (String, String) {
    let mut document = String::new();
    let mut digest = String::new();
    for line in stdout.lines().filter(|l| l.starts_with(PREFIX)) {
        let fields: Vec<&str> = line[PREFIX.len()..].splitn(4, ' ').collect();
        let length: usize = fields[2].parse().unwrap();
        assert_eq!(fields[3].len(), length, "{line}");
        document += fields[3];
        digest = fields[1].to_owned();
    }
    (document, digest)
}

fn check(recipe: &Value, inventory: &Path, extra: &[&str]) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("recipe.json");
    std::fs::write(&file, recipe.to_string()).unwrap();
    run(dispatcher().arg("check").arg(&file).args(["--schema-version", "2", "--inventory"]).arg(inventory).args(extra))
}

/// The seed's Linux recipe, on `target_disk`.
fn recipe(target_disk: &str) -> Value {
    let mut recipe = example("seed-linux");
    recipe["target_disk"] = target_disk.into();
    recipe
}

#[test]
fn a_run_prints_the_inventory_before_its_result_line() {
    // The run's host checks look at this machine's /dev: a recipe that names no disk.
    let (out, status, _tree) = run_on_tree(example("seed-esxi"));
    assert_eq!(out.code, 0, "{}", out.stderr);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert!(lines.last().unwrap().starts_with("PROVISION-RESULT v1 {"), "{}", out.stdout);
    assert!(lines[..lines.len() - 1].iter().all(|l| l.starts_with(PREFIX)), "{}", out.stdout);
    for (i, line) in lines[..lines.len() - 1].iter().enumerate() {
        assert!(line.len() < 3940 && line.bytes().all(|b| (b' '..=b'~').contains(&b)), "{line}");
        assert!(line[PREFIX.len()..].starts_with(&format!("{}/{} ", i + 1, lines.len() - 1)), "{line}");
    }
    let (document, digest) = joined(&out.stdout);
    let sha256: String = Sha256::digest(document.as_bytes()).iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(digest, sha256);
    let result: Value = serde_json::from_str(&lines.last().unwrap()["PROVISION-RESULT v1 ".len()..]).unwrap();
    assert_eq!(result["inventory_sha256"], sha256.as_str(), "the result line names the inventory");
    assert_eq!(status["inventory_sha256"], sha256.as_str(), "status.json too");
    assert!(status["timings_ms"]["inventory"].is_number());

    let inventory: Value = serde_json::from_str(&document).unwrap();
    assert_eq!(
        inventory["system"],
        json!({"uuid": "4c4c4544-0042-3510-8052-b4c04f4d4e31", "vendor": "Dell Inc.", "product": "PowerEdge R650",
               "serial": "7XYZ123"})
    );
    assert_eq!(
        inventory["firmware"],
        json!({"mode": "uefi", "secure_boot": true, "lockdown": "integrity", "vendor": null, "version": "1.13.2",
               "date": null})
    );
    assert_eq!(inventory["tpm"], json!({"present": true, "version": "2.0"}));
    assert_eq!(inventory["cpus"], json!({"model": "Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz", "count": 4}));
    assert_eq!(inventory["memory_bytes"], 8_589_934_592u64);
    assert_eq!(
        inventory["interfaces"],
        json!([{"name": "eno1", "mac": "3c:ec:ef:00:11:22", "driver": "ixgbe", "link": "down", "carrier": null}])
    );
    let disk = &inventory["disks"][0];
    assert_eq!((disk["name"].as_str(), disk["serial"].as_str()), (Some("vdb"), Some("PD-INV-0001")));
    assert_eq!(disk["by_id"], json!(["/dev/disk/by-id/virtio-PD-INV-0001"]));
    assert_eq!((disk["size_bytes"].as_u64(), disk["verdict"].as_str()), (Some(1 << 30), Some("candidate")));
    assert_eq!((inventory["disks_omitted"].as_u64(), inventory["interfaces_omitted"].as_u64()), (Some(0), Some(0)));
}

/// A failed run prints the inventory too: a controller learns the machine whatever the recipe.
#[test]
fn a_failed_run_prints_the_inventory_too() {
    let (out, status, _tree) = run_on_tree(json!({"target_disk": "/dev/vdb"}));
    assert!(out.stdout.lines().last().unwrap().starts_with("PROVISION-RESULT v1 {"), "{}", out.stdout);
    assert_eq!(out.code, 65, "{}", out.stderr);
    let (_, digest) = joined(&out.stdout);
    assert_eq!(status["inventory_sha256"], digest.as_str());
}

#[test]
fn check_reads_the_inventory_from_the_console_log_as_printed() {
    let (out, _status, tree) = run_on_tree(example("seed-esxi"));
    // As a serial console logs it: CR LF, kernel lines and a getty prompt around it.
    let log = tree.path().join("console.log");
    let console = format!("[    2.1] virtio_net eno1\r\n{}\r\nmaintenance login: ", out.stdout.replace('\n', "\r\n"));
    std::fs::write(&log, &console).unwrap();
    for name in ["/dev/vdb", "/dev/disk/by-id/virtio-PD-INV-0001"] {
        let checked = check(&recipe(name), &log, &[]);
        assert_eq!(checked.code, 0, "{name}: {}{}", checked.stdout, checked.stderr);
        assert!(checked.stderr.contains("read the inventory on log lines 2 to 2 (sha256 "), "{}", checked.stderr);
    }
    let missing = check(&recipe("/dev/vdz"), &log, &["--format", "json"]);
    assert_eq!(missing.code, 65);
    let report: Value = serde_json::from_str(&missing.stdout).unwrap();
    let message = report["details"][0]["message"].as_str().unwrap();
    assert_eq!(message, format!("names no device of the saved inventory {}", log.display()));

    // Two bytes lost on the wire: the line is cut; 64, named, never a misread.
    std::fs::write(&log, console.replacen("PD-INV-0001", "PD-INV-00", 1)).unwrap();
    let cut = check(&recipe("/dev/vdb"), &log, &[]);
    assert_eq!(cut.code, 64, "{}", cut.stdout);
    assert!(cut.stdout.contains("line 1 of 1 is cut"), "{}", cut.stdout);
}

#[test]
fn check_reads_an_inventory_a_controller_writes() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("r650.json");
    // What a controller knows from Redfish or IPA: names as udev's tools print them, no `dev`,
    // no verdict, no users.
    let inventory = json!({"disks": [
        {"name": "sda", "size_bytes": 480_103_981_056u64, "serial": "S3Z1NB0K123456X",
         "by_id": ["wwn-0x5002538e40a1b2c3"]},
        {"name": "sdb", "size_bytes": 480_103_981_056u64, "serial": "S3Z1NB0K123457X", "model": "Samsung SSD 860"},
        {"name": "sdc", "size_bytes": 480_103_981_056u64, "model": "Samsung SSD 860",
         "by_id": ["/dev/disk/by-id/wwn-0x5002538e40a1b2c4"]}
    ]});
    std::fs::write(&file, inventory.to_string()).unwrap();
    for name in ["/dev/disk/by-id/wwn-0x5002538e40a1b2c3", "/dev/disk/by-id/wwn-0x5002538e40a1b2c4", "/dev/sdb"] {
        let checked = check(&recipe(name), &file, &[]);
        assert_eq!(checked.code, 0, "{name}: {}", checked.stdout);
    }
    let mut hinted = recipe("/dev/sdb");
    hinted["target_disk_hints"] = json!({"model": "Samsung SSD 860"});
    let ambiguous = check(&hinted, &file, &[]);
    assert_eq!(ambiguous.code, 65);
    assert!(
        ambiguous.stdout.contains(&format!(
            "match 2 whole disks of the saved inventory {} (sdb, sdc); together they must single out one",
            file.display()
        )),
        "{}",
        ambiguous.stdout
    );
    // Malformed: 64, the field named by its pointer.
    std::fs::write(&file, json!({"disks": [{"name": "sda", "size_bytes": "480G"}]}).to_string()).unwrap();
    let malformed = check(&recipe("/dev/sda"), &file, &["--format", "json"]);
    assert_eq!(malformed.code, 64);
    let report: Value = serde_json::from_str(&malformed.stdout).unwrap();
    assert_eq!(
        report["reason"],
        format!("--inventory {}: /disks/0/size_bytes: must be a whole number of bytes", file.display())
    );
}

/// `disks --format json` of this machine reads back as its inventory, as before.
#[test]
fn check_reads_what_disks_prints() {
    let out = run(dispatcher().args(["disks", "--format", "json"]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("disks.json");
    std::fs::write(&file, &out.stdout).unwrap();
    let listed: Value = serde_json::from_str(&out.stdout).unwrap();
    let Some(first) = listed["disks"][0]["name"].as_str() else { return };
    let checked = check(&recipe(&format!("/dev/{first}")), &file, &["--format", "json"]);
    let report: Value = serde_json::from_str(&checked.stdout).unwrap();
    assert!([0, 65].contains(&checked.code), "{}", checked.stdout);
    assert!(report["details"].as_array().unwrap().iter().all(|d| d["code"] != "diskNotFound"), "{report}");
}

/// A console log of a real boot (tests/fixtures/console/INDEX.md says how it was made).
fn fixture(name: &str) -> String {
    let path = common::root().join("tests/fixtures/console").join(name);
    String::from_utf8(std::fs::read(path).unwrap()).unwrap()
}

/// The sixteen-disk case's recipe: its target by its WWN's by-id name, a hint on its serial.
fn sixteen_disks_recipe() -> Value {
    let mut recipe = recipe("/dev/disk/by-id/wwn-0x5000c50015ea7109");
    recipe["target_disk_hints"] = json!({"serial": "PD-INVENTORY-0009", "rotational": false});
    recipe
}

/// `check --inventory` on `log`, written to a file: the run and the file's path.
fn check_log(recipe: &Value, log: &str) -> (Run, tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("console.log");
    std::fs::write(&file, log).unwrap();
    (check(recipe, &file, &[]), dir, file)
}

#[test]
fn the_reader_on_a_real_console_log() {
    let log = fixture("inventory-sixteen-disks.console.log");
    let (whole, _dir, _) = check_log(&sixteen_disks_recipe(), &log);
    assert_eq!(whole.code, 0, "{}{}", whole.stdout, whole.stderr);
    assert!(whole.stderr.contains("read the inventory on log lines 10 to 11 (sha256 b0a2a9ac"), "{}", whole.stderr);
    // The hints single the disk out among sixteen: one that fits two is refused, naming them.
    let mut loose = sixteen_disks_recipe();
    loose["target_disk_hints"] = json!({"size_min": "900M", "rotational": false});
    let (ambiguous, _dir, file) = check_log(&loose, &log);
    assert_eq!(ambiguous.code, 65);
    let listed = "(sda, sdb, sdc, sdd, sde, sdf, sdg, sdh and 8 more)";
    let said = format!("match 16 whole disks of the saved inventory {} {listed}", file.display());
    assert!(ambiguous.stdout.contains(&said), "{}", ambiguous.stdout);
}

/// The log's inventory lines (with their CR), and the log with `change` made to them.
fn with_lines(log: &str, change: impl Fn(&mut Vec<String>)) -> String {
    let mut rows: Vec<String> = log.split_inclusive('\n').map(str::to_owned).collect();
    let first = rows.iter().position(|r| r.starts_with(PREFIX)).unwrap();
    let mut lines: Vec<String> = rows.drain(first..first + 2).collect();
    change(&mut lines);
    rows.splice(first..first, lines);
    rows.concat()
}

#[test]
fn a_line_removed_or_cut_in_a_real_log_is_named() {
    let log = fixture("inventory-sixteen-disks.console.log");
    let removed = with_lines(&log, |lines| {
        lines.remove(0);
    });
    let (out, _dir, _) = check_log(&sixteen_disks_recipe(), &removed);
    assert_eq!(out.code, 64, "{}", out.stdout);
    assert!(out.stdout.contains("is not whole: line 1 of 2 is missing; boot the server again"), "{}", out.stdout);

    // Cut: its last 500 bytes lost, and its newline with them, so the next line joins its row.
    let cut = with_lines(&log, |lines| {
        let first = &lines[0];
        lines[0] = first[..first.len() - 502].to_owned();
    });
    let (out, _dir, _) = check_log(&sixteen_disks_recipe(), &cut);
    assert_eq!(out.code, 64, "{}", out.stdout);
    assert!(out.stdout.contains("is not whole: line 1 of 2 is cut (3340 of 3840 bytes); boot"), "{}", out.stdout);

    // A byte changed: the lengths hold, the digest does not.
    let garbled = with_lines(&log, |lines| lines[1] = lines[1].replacen("PD-INVENTORY-0015", "PD-INVENTORY-0016", 1));
    let (out, _dir, _) = check_log(&sixteen_disks_recipe(), &garbled);
    assert_eq!(out.code, 64, "{}", out.stdout);
    assert!(out.stdout.contains("has all its lines, but they do not add up to its sha256"), "{}", out.stdout);
}

#[test]
fn of_two_boots_in_one_log_the_last_whole_inventory_counts() {
    let (sixteen, two) =
        (fixture("inventory-sixteen-disks.console.log"), fixture("disk-scsi-by-id-dispatched.console.log"));
    // The later boot's inventory counts: the sixteen disks' target is not among its two.
    let (out, _dir, _) = check_log(&sixteen_disks_recipe(), &format!("{sixteen}{two}"));
    assert_eq!(out.code, 65, "{}", out.stdout);
    assert!(out.stdout.contains("/target_disk: names no disk of the saved inventory"), "{}", out.stdout);
    assert!(out.stderr.contains("(sha256 7d96d465"), "{}", out.stderr);
    let mut two_disks = recipe("/dev/disk/by-id/wwn-0x5000c50015ea71ad");
    two_disks["target_disk_hints"] = json!({"serial": "PD-TARGET-0001"});
    let (out, _dir, _) = check_log(&two_disks, &format!("{sixteen}{two}"));
    assert_eq!(out.code, 0, "{}", out.stdout);
    // The later one not whole: the earlier whole one counts, and what is wrong is said.
    let later_cut = with_lines(&sixteen, |lines| lines.truncate(1));
    let (out, _dir, _) = check_log(&two_disks, &format!("{two}{later_cut}"));
    assert_eq!(out.code, 0, "{}", out.stdout);
    assert!(out.stderr.contains("read the inventory on log lines 10 to 10 (sha256 7d96d465"), "{}", out.stderr);
    assert!(out.stderr.contains("is not whole: line 2 of 2 is missing; the last whole inventory before it was read"));
}
