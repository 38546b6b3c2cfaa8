//! What the dispatcher thinks of each disk (SPEC §2, §4a), and the inventory `disks --format
//! json` prints and `check --inventory` reads back: each disk's identity, its verdict and what
//! uses it.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::{Dev, Disk};

/// Whether a disk may be a target, and if not, why: the first that holds, in the order of the
/// host checks (the system before the media before its users).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Nothing keeps a recipe from naming it.
    Candidate,
    /// The running system lives on it (its root, the boot medium, the images of a root in RAM).
    System,
    /// The task media is on it.
    Media,
    /// Mounted, swap, or held by another device (LVM, RAID, dm-crypt).
    InUse,
}

impl Verdict {
    pub const ALL: [Verdict; 4] = [Verdict::Candidate, Verdict::System, Verdict::Media, Verdict::InUse];

    /// `system` and `media` are sets of whole disks; `users` what uses `disk` (empty if unused).
    pub fn of(disk: Dev, system: &BTreeSet<Dev>, media: &BTreeSet<Dev>, users: &[String]) -> Verdict {
        if system.contains(&disk) {
            Verdict::System
        } else if media.contains(&disk) {
            Verdict::Media
        } else if !users.is_empty() {
            Verdict::InUse
        } else {
            Verdict::Candidate
        }
    }

    /// As JSON writes it.
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Candidate => "candidate",
            Verdict::System => "system",
            Verdict::Media => "media",
            Verdict::InUse => "in_use",
        }
    }
}

/// One disk of the inventory: its identity, the verdict, and what uses it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Listed {
    #[serde(flatten)]
    pub disk: Disk,
    pub verdict: Verdict,
    /// `mounted`, `swap`, `held by another device, ...`: what uses the disk or a partition.
    pub users: Vec<String>,
}

/// `disks --format json`: `{"disks": [...]}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inventory {
    pub disks: Vec<Listed>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disks::tests::disk;

    #[test]
    fn the_system_comes_before_the_media_before_the_users() {
        let (system, media): (BTreeSet<Dev>, BTreeSet<Dev>) = ([1].into(), [1, 2].into());
        let users = |what: &str| vec![what.to_owned()];
        assert_eq!(Verdict::of(1, &system, &media, &users("mounted")), Verdict::System);
        assert_eq!(Verdict::of(2, &system, &media, &users("mounted")), Verdict::Media);
        assert_eq!(Verdict::of(3, &system, &media, &users("swap")), Verdict::InUse);
        assert_eq!(Verdict::of(4, &system, &media, &[]), Verdict::Candidate);
    }

    #[test]
    fn the_inventory_reads_back_as_written() {
        let listed = Listed { disk: disk("sdb", 8 << 8 | 16), verdict: Verdict::InUse, users: vec!["swap".into()] };
        let inventory = Inventory { disks: vec![listed] };
        let json = serde_json::to_value(&inventory).unwrap();
        let object = &json["disks"][0];
        assert_eq!((object["name"].as_str(), object["dev"].as_str()), (Some("sdb"), Some("8:16")));
        assert_eq!((object["verdict"].as_str(), object["users"][0].as_str()), (Some("in_use"), Some("swap")));
        let keys: Vec<&str> = object.as_object().unwrap().keys().map(String::as_str).collect();
        for key in ["by_id", "by_path", "wwn", "serial", "model", "vendor", "size_bytes", "rotational", "removable"] {
            assert!(keys.contains(&key), "{key} in {keys:?}");
        }
        assert_eq!(serde_json::from_value::<Inventory>(json).unwrap(), inventory);
        assert_eq!(Verdict::InUse.name(), "in_use");
    }
}
