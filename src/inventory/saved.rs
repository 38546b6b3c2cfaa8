//! A saved inventory, for `check --inventory` (SPEC §4a): a console log holding the
//! `PROVISION-INVENTORY v1` lines as a run printed them ([`lines::read`] finds, joins and checks
//! them), or JSON with a `disks` list: `disks --format json`, the inventory's own document, or
//! one a controller writes from its own records. Of a disk only `name` and `size_bytes` are
//! required; the rest default to what a disk without them is (no names, no identity, a
//! `candidate`), and `dev`, a kernel's number on one boot, is not read. A by-id or by-path name
//! may be given as the link's name (`wwn-0x5000c500a1b2c3d4`, as udev's tools print it) or as
//! its path. Whatever is malformed is named by its JSON pointer.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use serde_json::{Map, Value};

use super::lines::{self, Found};
use crate::disks::verdict::{Inventory, Listed, Verdict};
use crate::disks::{Dev, Disk};

/// The largest JSON inventory read: thousands of disks' identities.
pub const MAX_JSON_BYTES: u64 = 4 << 20;

/// The disks of a saved inventory, and what a controller should know of where they came from.
#[derive(Debug)]
pub struct Saved {
    /// Each disk with a `dev` of its own (its place in the list): the checks tell disks apart by it.
    pub inventory: Inventory,
    /// Notes for the person checking: which of a log's inventories was read, disks it leaves out.
    pub notes: Vec<String>,
}

/// The inventory in `file`, or what is wrong with it, in words that name the JSON pointer of a
/// malformed field. A file whose first character that is not white space is `{` is JSON;
/// anything else is a console log (a kernel's console log starts with `[`).
pub fn read(file: &Path) -> Result<Saved, String> {
    let opened = crate::files::open_regular(file).map_err(|e| format!("cannot be read: {e}"))?;
    let mut reader = BufReader::new(opened);
    let json = loop {
        let buffer = reader.fill_buf().map_err(|e| format!("cannot be read: {e}"))?;
        match buffer.iter().position(|b| !b.is_ascii_whitespace()) {
            Some(at) => break buffer[at] == b'{',
            None if buffer.is_empty() => return Err("is empty".into()),
            None => {
                let all = buffer.len();
                reader.consume(all);
            }
        }
    };
    if json {
        let mut bytes = Vec::new();
        reader.take(MAX_JSON_BYTES + 1).read_to_end(&mut bytes).map_err(|e| format!("cannot be read: {e}"))?;
        if bytes.len() as u64 > MAX_JSON_BYTES {
            return Err(format!("is larger than {MAX_JSON_BYTES} bytes"));
        }
        let value: Value = serde_json::from_slice(&bytes).map_err(|e| format!("is not JSON: {e}"))?;
        return from_document(&value, Vec::new());
    }
    match lines::read(reader).map_err(|e| format!("cannot be read: {e}"))? {
        Found::Whole { whole, later } => {
            let mut notes = vec![format!(
                "read the inventory on log lines {} to {} (sha256 {})",
                whole.rows.0, whole.rows.1, whole.sha256
            )];
            notes.extend(later.map(|why| format!("{why}; the last whole inventory before it was read")));
            let value: Value = serde_json::from_str(&whole.document)
                .map_err(|e| format!("holds an inventory that is not JSON ({e}), though its lines are whole"))?;
            from_document(&value, notes)
        }
        Found::Damaged(why) => Err(format!("{why}; boot the server again for a whole one")),
        Found::Nothing => Err(format!(
            "holds no {:?} lines and is not JSON (a console log of a run, or `disks --format json`)",
            lines::PREFIX
        )),
    }
}

/// The disks of an inventory's JSON.
fn from_document(document: &Value, mut notes: Vec<String>) -> Result<Saved, String> {
    let object = document.as_object().ok_or("must be a JSON object with a \"disks\" list")?;
    let disks = match object.get("disks") {
        Some(Value::Array(disks)) => disks,
        Some(_) => return Err("/disks: must be a list of the server's whole disks".into()),
        None => return Err("/disks: is required: the list of the server's whole disks".into()),
    };
    let mut listed = Vec::with_capacity(disks.len());
    let mut names = BTreeSet::new();
    for (i, disk) in disks.iter().enumerate() {
        let at = format!("/disks/{i}");
        let disk = disk.as_object().ok_or_else(|| format!("{at}: must be an object, one disk"))?;
        let one = disk_of(&Fields { object: disk, at: &at }, i as Dev + 1)?;
        if !names.insert(one.disk.name.clone()) {
            return Err(format!("{at}/name: names a disk an earlier one names too"));
        }
        listed.push(one);
    }
    match object.get("disks_omitted").and_then(Value::as_u64) {
        Some(omitted) if omitted > 0 => notes.push(format!(
            "it leaves out {omitted} disk(s) (more than its lines could carry): hints are checked against the \
             disks it lists only"
        )),
        _ => {}
    }
    Ok(Saved { inventory: Inventory { disks: listed }, notes })
}

/// One disk; `dev` tells it apart from the others.
fn disk_of(fields: &Fields<'_>, dev: Dev) -> Result<Listed, String> {
    let name =
        fields.string("name")?.ok_or_else(|| fields.required("name", "the disk's kernel name (sda, nvme0n1)"))?;
    let name = name.strip_prefix("/dev/").unwrap_or(&name).to_owned();
    if name.is_empty() || name.contains('/') || name == "." || name == ".." {
        return Err(format!("{}/name: must be a kernel name (sda, nvme0n1) or /dev/ and one", fields.at));
    }
    let size_bytes =
        fields.number("size_bytes")?.ok_or_else(|| fields.required("size_bytes", "the disk's size in bytes"))?;
    let verdict = match fields.string("verdict")?.as_deref() {
        None | Some("candidate") => Verdict::Candidate,
        Some("system") => Verdict::System,
        Some("media") => Verdict::Media,
        Some("in_use") => Verdict::InUse,
        Some(_) => return Err(format!("{}/verdict: must be candidate, system, media or in_use", fields.at)),
    };
    let disk = Disk {
        node: fields.string("node")?.unwrap_or_else(|| format!("/dev/{name}")),
        dev,
        by_id: fields.links("by_id", "/dev/disk/by-id/")?,
        by_path: fields.links("by_path", "/dev/disk/by-path/")?,
        wwn: fields.string("wwn")?,
        serial: fields.string("serial")?,
        model: fields.string("model")?,
        vendor: fields.string("vendor")?,
        size_bytes,
        rotational: fields.boolean("rotational")?,
        removable: fields.boolean("removable")?.unwrap_or(false),
        transport: fields.string("transport")?,
        name,
    };
    Ok(Listed { disk, verdict, users: fields.strings("users")?.unwrap_or_default() })
}

/// A disk's object, with the pointer it is at: each reader names the field it finds malformed.
/// A field that is absent or null is not given.
struct Fields<'a> {
    object: &'a Map<String, Value>,
    at: &'a str,
}

impl Fields<'_> {
    fn given(&self, key: &str) -> Option<&Value> {
        self.object.get(key).filter(|value| !value.is_null())
    }

    fn required(&self, key: &str, what: &str) -> String {
        format!("{}/{key}: is required: {what}", self.at)
    }

    fn string(&self, key: &str) -> Result<Option<String>, String> {
        match self.given(key) {
            None => Ok(None),
            Some(Value::String(text)) => Ok(Some(text.clone())),
            Some(_) => Err(format!("{}/{key}: must be a string", self.at)),
        }
    }

    fn number(&self, key: &str) -> Result<Option<u64>, String> {
        self.given(key)
            .map(|value| value.as_u64().ok_or_else(|| format!("{}/{key}: must be a whole number of bytes", self.at)))
            .transpose()
    }

    fn boolean(&self, key: &str) -> Result<Option<bool>, String> {
        self.given(key)
            .map(|value| value.as_bool().ok_or_else(|| format!("{}/{key}: must be true or false", self.at)))
            .transpose()
    }

    fn strings(&self, key: &str) -> Result<Option<Vec<String>>, String> {
        let Some(value) = self.given(key) else { return Ok(None) };
        let items = value.as_array().ok_or_else(|| format!("{}/{key}: must be a list of strings", self.at))?;
        let strings = items.iter().enumerate().map(|(i, item)| {
            item.as_str().map(str::to_owned).ok_or_else(|| format!("{}/{key}/{i}: must be a string", self.at))
        });
        strings.collect::<Result<Vec<_>, _>>().map(Some)
    }

    /// Names under `dir` (`/dev/disk/by-id/`), each given as its path or as the link's name.
    fn links(&self, key: &str, dir: &str) -> Result<Vec<String>, String> {
        let names = self.strings(key)?.unwrap_or_default();
        let link = |(i, name): (usize, String)| {
            let bare = name.strip_prefix(dir).unwrap_or(&name);
            if bare.is_empty() || bare.contains('/') || bare == "." || bare == ".." {
                return Err(format!(
                    "{}/{key}/{i}: must be a name in {dir} (such as {}) or its path",
                    self.at,
                    if key == "by_id" { "wwn-0x5000c500a1b2c3d4" } else { "pci-0000:3b:00.0-nvme-1" }
                ));
            }
            Ok(format!("{dir}{bare}"))
        };
        names.into_iter().enumerate().map(link).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read_text(text: &str) -> Result<Saved, String> {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("inventory");
        std::fs::write(&file, text).unwrap();
        read(&file)
    }

    fn disks(value: Value) -> Result<Vec<Listed>, String> {
        read_text(&value.to_string()).map(|saved| saved.inventory.disks)
    }

    #[test]
    fn only_the_name_and_the_size_are_required() {
        let listed = disks(json!({"disks": [{"name": "sdb", "size_bytes": 1000}]})).unwrap();
        assert_eq!(listed[0].disk.node, "/dev/sdb");
        assert_eq!(
            (listed[0].verdict, listed[0].users.len(), listed[0].disk.removable),
            (Verdict::Candidate, 0, false)
        );
        assert_eq!(
            disks(json!({"disks": [{"size_bytes": 1}]})).unwrap_err(),
            "/disks/0/name: is required: the disk's kernel name (sda, nvme0n1)"
        );
        assert_eq!(
            disks(json!({"disks": [{"name": "sda", "size_bytes": 1}, {"name": "sdb"}]})).unwrap_err(),
            "/disks/1/size_bytes: is required: the disk's size in bytes"
        );
        // As IPA names disks; `dev` is not read.
        let listed =
            disks(json!({"disks": [{"name": "/dev/nvme0n1", "size_bytes": 1, "dev": "not a number"}]})).unwrap();
        assert_eq!(listed[0].disk.name, "nvme0n1");
    }

    #[test]
    fn a_malformed_field_is_named_by_its_pointer() {
        let one = |disk: Value| disks(json!({"disks": [{"name": "sda", "size_bytes": 1}, disk]})).unwrap_err();
        let base = |key: &str, value: Value| {
            let mut disk = json!({"name": "sdb", "size_bytes": 1});
            disk[key] = value;
            one(disk)
        };
        assert_eq!(base("size_bytes", json!("1G")), "/disks/1/size_bytes: must be a whole number of bytes");
        assert_eq!(base("verdict", json!("free")), "/disks/1/verdict: must be candidate, system, media or in_use");
        assert_eq!(base("users", json!("mounted")), "/disks/1/users: must be a list of strings");
        assert_eq!(base("users", json!(["swap", 1])), "/disks/1/users/1: must be a string");
        assert_eq!(base("rotational", json!("yes")), "/disks/1/rotational: must be true or false");
        assert_eq!(base("serial", json!(42)), "/disks/1/serial: must be a string");
        assert!(base("by_id", json!(["/dev/sda"])).starts_with("/disks/1/by_id/0: must be a name in /dev/disk/by-id/"));
        assert_eq!(base("name", json!("sda")), "/disks/1/name: names a disk an earlier one names too");
        assert_eq!(one(json!("sdb")), "/disks/1: must be an object, one disk");
        assert_eq!(
            disks(json!({"disk": []})).unwrap_err(),
            "/disks: is required: the list of the server's whole disks"
        );
        assert_eq!(disks(json!({"disks": {}})).unwrap_err(), "/disks: must be a list of the server's whole disks");
        assert!(disks(json!([])).unwrap_err().starts_with("holds no"), "[ starts a kernel's log, not JSON");
        assert!(read_text("{\"disks\": [").unwrap_err().starts_with("is not JSON: "));
        assert_eq!(read_text(" \n").unwrap_err(), "is empty");
    }

    #[test]
    fn by_id_and_by_path_names_as_links_or_paths() {
        let listed = disks(json!({"disks": [{"name": "sda", "size_bytes": 1,
            "by_id": ["wwn-0x5002538e40a1b2c3", "/dev/disk/by-id/ata-Samsung_SSD_860_EVO_500GB_S3Z1NB0K123456X"],
            "by_path": ["pci-0000:00:1f.2-ata-1"]}]}))
        .unwrap();
        assert_eq!(
            listed[0].disk.by_id,
            ["/dev/disk/by-id/wwn-0x5002538e40a1b2c3", "/dev/disk/by-id/ata-Samsung_SSD_860_EVO_500GB_S3Z1NB0K123456X"]
        );
        assert_eq!(listed[0].disk.by_path, ["/dev/disk/by-path/pci-0000:00:1f.2-ata-1"]);
    }

    #[test]
    fn what_disks_prints_reads_back_the_same() {
        let tree = crate::disks::tests::machine();
        let printed = crate::inventory::disks(tree.root(), &[]).unwrap();
        let listed = disks(serde_json::to_value(&printed).unwrap()).unwrap();
        assert_eq!(listed.len(), printed.disks.len());
        for (read, printed) in listed.iter().zip(&printed.disks) {
            assert_eq!(Disk { dev: printed.disk.dev, ..read.disk.clone() }, printed.disk);
            assert_eq!((read.verdict, &read.users), (printed.verdict, &printed.users));
        }
    }

    #[test]
    fn a_console_log_is_read_through_its_lines() {
        let document = json!({"system": {}, "disks": [{"name": "sdb", "size_bytes": 5}], "disks_omitted": 3});
        let printed = lines::print(&document.to_string());
        let log = format!("[    1.0] booting\r\n{}maintenance login: ", printed.lines.concat().replace('\n', "\r\n"));
        let saved = read_text(&log).unwrap();
        assert_eq!(saved.inventory.disks[0].disk.name, "sdb");
        assert!(saved.notes[0].starts_with("read the inventory on log lines 2 to 2 (sha256 "), "{:?}", saved.notes);
        assert!(saved.notes[1].starts_with("it leaves out 3 disk(s)"), "{:?}", saved.notes);
        let cut = format!("{}\n", &printed.lines[0][..printed.lines[0].len() - 5]);
        let why = read_text(&cut).unwrap_err();
        assert!(why.contains("line 1 of 1 is cut") && why.ends_with("boot the server again for a whole one"), "{why}");
        assert!(read_text("login: \n").unwrap_err().starts_with("holds no \"PROVISION-INVENTORY v1 \" lines"));
    }
}
