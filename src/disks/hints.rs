//! A recipe's `target_disk_hints` against the machine's disks (issue 29 #2): the name names the
//! disk, the hints confirm it, and hints that fit two disks confirm nothing. Pure functions of
//! the hints and the disks read from the kernel. The hints are recipe content: nothing here
//! puts their values into words, and their `Debug` says only which are given.

use std::fmt;

use super::Disk;

/// What the recipe says the target disk is; each given one must match.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Hints {
    /// Hex digits, in either case, `0x` optional.
    pub wwn: Option<String>,
    pub serial: Option<String>,
    pub model: Option<String>,
    /// Bytes.
    pub size_min: Option<u64>,
    /// Bytes.
    pub size_max: Option<u64>,
    pub rotational: Option<bool>,
}

/// A key of `target_disk_hints`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum HintKey {
    Wwn,
    Serial,
    Model,
    SizeMin,
    SizeMax,
    Rotational,
}

impl HintKey {
    /// The key as the recipe writes it (`/target_disk_hints/<name>`).
    pub fn name(self) -> &'static str {
        match self {
            HintKey::Wwn => "wwn",
            HintKey::Serial => "serial",
            HintKey::Model => "model",
            HintKey::SizeMin => "size_min",
            HintKey::SizeMax => "size_max",
            HintKey::Rotational => "rotational",
        }
    }
}

impl Hints {
    /// The keys given whose value `disk` does not have, in the order of [`HintKey`]; empty when
    /// the disk matches them all. A hint on a field the kernel does not know for the disk (no
    /// WWN, no serial) does not match.
    ///
    /// - `wwn` without case and without `0x`, against the disk's WWN, or its NAA 6 name with the
    ///   extension (the one its `wwn-0x...` link carries);
    /// - `serial` and `model` after trimming white space at both ends, otherwise exactly;
    /// - `size_min <= size_bytes <= size_max`;
    /// - `rotational` as the kernel says.
    pub fn mismatches(&self, disk: &Disk) -> Vec<HintKey> {
        let trimmed = |hint: &str, have: &Option<String>| have.as_deref() == Some(hint.trim());
        let checks = [
            (HintKey::Wwn, self.wwn.as_deref().map(|wwn| wwn_matches(wwn, disk))),
            (HintKey::Serial, self.serial.as_deref().map(|serial| trimmed(serial, &disk.serial))),
            (HintKey::Model, self.model.as_deref().map(|model| trimmed(model, &disk.model))),
            (HintKey::SizeMin, self.size_min.map(|min| disk.size_bytes >= min)),
            (HintKey::SizeMax, self.size_max.map(|max| disk.size_bytes <= max)),
            (HintKey::Rotational, self.rotational.map(|rotational| disk.rotational == Some(rotational))),
        ];
        checks.into_iter().filter(|(_, matched)| *matched == Some(false)).map(|(key, _)| key).collect()
    }

    /// The keys given, in the order of [`HintKey`].
    pub fn given(&self) -> Vec<HintKey> {
        let given = [
            (HintKey::Wwn, self.wwn.is_some()),
            (HintKey::Serial, self.serial.is_some()),
            (HintKey::Model, self.model.is_some()),
            (HintKey::SizeMin, self.size_min.is_some()),
            (HintKey::SizeMax, self.size_max.is_some()),
            (HintKey::Rotational, self.rotational.is_some()),
        ];
        given.into_iter().filter(|(_, given)| *given).map(|(key, _)| key).collect()
    }

    /// Those of `disks` that match every hint given: two or more is `diskAmbiguous` (hints that
    /// fit several disks would not notice a name that moved to another of them).
    pub fn matching<'a>(&self, disks: &'a [Disk]) -> Vec<&'a Disk> {
        disks.iter().filter(|disk| self.mismatches(disk).is_empty()).collect()
    }
}

/// Lower case, without `0x`.
fn normalize_wwn(wwn: &str) -> String {
    let wwn = wwn.trim();
    let wwn = wwn.strip_prefix("0x").or_else(|| wwn.strip_prefix("0X")).unwrap_or(wwn);
    wwn.to_ascii_lowercase()
}

fn wwn_matches(hint: &str, disk: &Disk) -> bool {
    let hint = normalize_wwn(hint);
    let link = format!("/dev/disk/by-id/wwn-0x{hint}");
    !hint.is_empty()
        && (disk.wwn.as_deref().is_some_and(|wwn| normalize_wwn(wwn) == hint) || disk.by_id.contains(&link))
}

/// Which hints are given, never their values (they are recipe content).
impl fmt::Debug for Hints {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.given().into_iter().map(HintKey::name)).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disks::tests::disk;

    fn target() -> Disk {
        Disk {
            wwn: Some("0x5000c50015ea71ad".into()),
            serial: Some("PD-TARGET-0001".into()),
            model: Some("QEMU HARDDISK".into()),
            size_bytes: 1_000_000_000,
            rotational: Some(false),
            by_id: vec!["/dev/disk/by-id/wwn-0x5000c50015ea71ad".into()],
            ..disk("sdb", 8 << 8 | 16)
        }
    }

    #[test]
    fn every_given_hint_that_the_disk_has_matches() {
        let hints = Hints {
            wwn: Some("5000C50015EA71AD".into()),
            serial: Some("  PD-TARGET-0001\t".into()),
            model: Some("QEMU HARDDISK ".into()),
            size_min: Some(900_000_000),
            size_max: Some(1_000_000_000),
            rotational: Some(false),
        };
        assert_eq!(hints.mismatches(&target()), []);
        assert_eq!(Hints { wwn: Some("0x5000c50015ea71ad".into()), ..Hints::default() }.mismatches(&target()), []);
        assert_eq!(Hints::default().mismatches(&target()), [], "no hints, nothing to miss");
    }

    #[test]
    fn each_failing_key_is_named_once() {
        let hints = Hints {
            wwn: Some("0x5000c50015ea71ae".into()),
            serial: Some("pd-target-0001".into()),
            model: Some("QEMU_HARDDISK".into()),
            size_min: Some(1_000_000_001),
            size_max: Some(999_999_999),
            rotational: Some(true),
        };
        let all =
            [HintKey::Wwn, HintKey::Serial, HintKey::Model, HintKey::SizeMin, HintKey::SizeMax, HintKey::Rotational];
        assert_eq!(hints.mismatches(&target()), all);
        assert_eq!(all.map(HintKey::name), ["wwn", "serial", "model", "size_min", "size_max", "rotational"]);
    }

    #[test]
    fn what_the_kernel_does_not_know_does_not_match() {
        let bare = disk("vdb", 253 << 8 | 16);
        let hints = Hints {
            wwn: Some("0x5000c50015ea71ad".into()),
            serial: Some("x".into()),
            model: Some("x".into()),
            rotational: Some(true),
            ..Hints::default()
        };
        assert_eq!(hints.mismatches(&bare), [HintKey::Wwn, HintKey::Serial, HintKey::Model, HintKey::Rotational]);
        let empty = Hints { wwn: Some("0x".into()), ..Hints::default() };
        assert_eq!(empty.mismatches(&target()), [HintKey::Wwn]);
    }

    #[test]
    fn an_naa_6_hint_may_carry_the_extension() {
        let naa6 = Disk {
            wwn: Some("0x600a0b8000112233".into()),
            by_id: vec!["/dev/disk/by-id/wwn-0x600a0b8000112233445566778899aabb".into()],
            ..disk("sdc", 8 << 8 | 32)
        };
        for hint in ["0x600a0b8000112233", "600A0B8000112233445566778899AABB"] {
            assert_eq!(Hints { wwn: Some(hint.into()), ..Hints::default() }.mismatches(&naa6), [], "{hint}");
        }
        let part = Hints { wwn: Some("600a0b80001122334455".into()), ..Hints::default() };
        assert_eq!(part.mismatches(&naa6), [HintKey::Wwn]);
    }

    #[test]
    fn hints_that_fit_two_disks_are_counted() {
        let twin = Disk { name: "sdc".into(), wwn: Some("0x5000c50015ea71ae".into()), by_id: vec![], ..target() };
        let disks = [target(), twin, disk("vda", 253 << 8)];
        let serial = Hints { serial: Some("PD-TARGET-0001".into()), ..Hints::default() };
        assert_eq!(serial.matching(&disks).len(), 2);
        let wwn = Hints { wwn: Some("0x5000c50015ea71ad".into()), ..serial.clone() };
        assert_eq!(wwn.matching(&disks).len(), 1);
        assert_eq!(Hints::default().matching(&disks).len(), 3);
    }

    #[test]
    fn debug_names_keys_never_values() {
        let hints = Hints { serial: Some("SECRET-SERIAL".into()), size_min: Some(1), ..Hints::default() };
        assert_eq!(format!("{hints:?}"), r#"["serial", "size_min"]"#);
    }
}
