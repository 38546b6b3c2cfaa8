//! `disks` on this machine: the real binary reads the real sysfs. Each disk's size must be the
//! kernel's own answer to BLKGETSIZE64 (`blockdev --getsize64`), the JSON one object, the table
//! within an 80-column console.

mod common;

use common::{dispatcher, run};

#[test]
fn json_is_one_object_and_sizes_are_the_kernels() {
    let out = run(dispatcher().args(["disks", "--format", "json"]));
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(out.stdout.lines().count(), 1, "{}", out.stdout);
    let inventory: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let disks = inventory["disks"].as_array().expect("a list of disks");
    for disk in disks {
        let name = disk["name"].as_str().unwrap();
        assert_eq!(disk["node"], format!("/dev/{name}"));
        assert!(["candidate", "system", "media", "in_use"].contains(&disk["verdict"].as_str().unwrap()), "{disk}");
        assert!(disk["by_id"].is_array() && disk["by_path"].is_array() && disk["users"].is_array(), "{disk}");
        let blockdev = std::process::Command::new("blockdev").args(["--getsize64", &format!("/dev/{name}")]).output();
        let blockdev = blockdev.expect("blockdev (Debian package util-linux) is installed");
        if !blockdev.status.success() {
            eprintln!("skipped /dev/{name}: {}", String::from_utf8_lossy(&blockdev.stderr));
            continue;
        }
        let size: u64 = String::from_utf8(blockdev.stdout).unwrap().trim().parse().unwrap();
        assert_eq!(disk["size_bytes"], size, "{name}");
    }
    // Every whole disk the kernel lists is there (on this host: no whole disk is left out).
    let kernel: Vec<String> = std::fs::read_dir("/sys/block")
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|name| ["sd", "vd", "nvme", "xvd", "mmcblk"].iter().any(|p| name.starts_with(p)))
        // Not eMMC boot areas, nor NVMe multipath's hidden paths (`nvme0c0n1`).
        .filter(|name| !(name.contains("boot") || name.starts_with("nvme") && name.contains('c')))
        .collect();
    for name in kernel {
        assert!(disks.iter().any(|d| d["name"] == name.as_str()), "{name} missing from {}", out.stdout);
    }
}

#[test]
fn the_table_fits_the_console() {
    let out = run(dispatcher().arg("disks"));
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.starts_with("NAME "), "{}", out.stdout);
    assert!(out.stdout.lines().all(|line| line.chars().count() <= 80), "{}", out.stdout);
}

#[test]
fn help_and_usage_errors() {
    let help = run(dispatcher().args(["disks", "--help"]));
    assert_eq!(help.code, 0);
    assert!(help.stdout.contains("--format human|json") && help.stdout.contains("Exit codes"), "{}", help.stdout);
    for args in [&["disks", "--format", "xml"][..], &["disks", "extra"], &["disks", "--media"]] {
        let out = run(dispatcher().args(args));
        assert_eq!(out.code, 64, "{args:?}: {}", out.stderr);
    }
}
