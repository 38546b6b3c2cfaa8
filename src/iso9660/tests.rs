use std::io::Read;

use super::read::{Error, Image, Kind, MAX_LOOKUP_RECORDS};
use super::write::{self, image, Entry, Node};
use super::*;

const RECIPE: &[u8] = b"{\"task_target\": \"install-esxi.target\"}\n";
const SCHEMA: &[u8] = b"{\"$id\": \"x\"}";

fn task_media() -> Vec<u8> {
    image(
        "TASK",
        &[
            Entry::file("recipe.json", RECIPE),
            Entry::file("recipe.schema.json", SCHEMA),
            Entry::file("recipe.json.sig", b"sig 1"),
            Entry::file("recipe.schema.json.sig", b"sig 2"),
        ],
    )
    .unwrap()
}

fn open(bytes: &[u8]) -> Result<Image<&[u8]>, Error> {
    Image::open(bytes, bytes.len() as u64)
}

/// The file at `path`, read whole.
fn read(image: &Image<&[u8]>, path: &str) -> Vec<u8> {
    let entry = image.lookup(path).unwrap().unwrap_or_else(|| panic!("{path} not found"));
    assert_eq!(entry.kind, Kind::File, "{path}");
    let mut bytes = Vec::new();
    image.data(&entry).read_to_end(&mut bytes).unwrap();
    assert_eq!(bytes.len() as u64, entry.len());
    bytes
}

#[test]
fn what_is_written_is_read_back_under_its_names() {
    let bytes = task_media();
    let image = open(&bytes).unwrap();
    assert_eq!(read(&image, "recipe.json"), RECIPE);
    assert_eq!(read(&image, "/recipe.schema.json"), SCHEMA);
    assert_eq!(read(&image, "recipe.json.sig"), b"sig 1");
    assert_eq!(read(&image, "recipe.schema.json.sig"), b"sig 2");
    // Rock Ridge names are exact: not the ISO 9660 names, not another case.
    for other in ["RECIPE.JSON", "recipe.json;1", "Recipe.json", "recipe", "recipe.json."] {
        assert_eq!(image.lookup(other).unwrap(), None, "{other}");
    }
    assert_eq!(&bytes[16 * SECTOR + VOLUME_ID..16 * SECTOR + VOLUME_ID + 6], b"TASK  ");
}

#[test]
fn the_same_files_give_the_same_bytes() {
    assert!(task_media() == task_media());
    let reordered =
        image("TASK", &[Entry::file("recipe.schema.json", SCHEMA), Entry::file("recipe.json", RECIPE)]).unwrap();
    let ordered =
        image("TASK", &[Entry::file("recipe.json", RECIPE), Entry::file("recipe.schema.json", SCHEMA)]).unwrap();
    assert!(reordered == ordered, "the order given does not matter");
}

#[test]
fn the_joliet_tree_holds_the_same_files() {
    let bytes = task_media();
    // Without the primary descriptor, Linux (and this reader) take the Joliet tree.
    let mut joliet_only = bytes.clone();
    joliet_only[16 * SECTOR] = 0;
    let image = open(&joliet_only).unwrap();
    assert_eq!(read(&image, "recipe.json"), RECIPE);
    assert_eq!(read(&image, "recipe.schema.json"), SCHEMA);
    // Joliet's names compare without case and without trailing dots, as Linux's do.
    assert_eq!(read(&image, "RECIPE.JSON"), RECIPE);
    assert_eq!(read(&image, "recipe.json.."), RECIPE);
}

#[test]
fn links_and_directories_are_told_apart() {
    let inner = [Entry::file("recipe.json", RECIPE)];
    let bytes = image(
        "TASK",
        &[
            Entry { name: "recipe.json", node: Node::Symlink("/etc/hostname") },
            Entry { name: "recipe.schema.json", node: Node::Directory(&inner) },
        ],
    )
    .unwrap();
    let image = open(&bytes).unwrap();
    assert_eq!(image.lookup("recipe.json").unwrap().unwrap().kind, Kind::Symlink);
    assert_eq!(image.lookup("recipe.schema.json").unwrap().unwrap().kind, Kind::Directory);
    assert_eq!(read(&image, "recipe.schema.json/recipe.json"), RECIPE);
    assert!(matches!(image.lookup("recipe.json/x"), Err(Error::Corrupt(_))), "a link is not searched");
}

#[test]
fn names_the_writer_cannot_hold_are_refused() {
    for name in ["", ".", "..", "a/b", "a;1", "tab\t", "é", &"x".repeat(65)] {
        assert!(image("TASK", &[Entry::file(name, b"")]).is_err(), "{name:?}");
    }
    assert!(image("TASK", &[Entry::file("a", b""), Entry::file("a", b"")]).is_err());
    assert!(image("", &[]).is_err());
    assert!(image(&"V".repeat(33), &[]).is_err());
}

/// A hand-made image: 16 empty sectors, a primary descriptor, a terminator, the root directory
/// (`dir_sectors` sectors from 18) holding `records` after `.` and `..`, and `extra` sectors
/// after it. `rock`: the root's `.` carries `SP` and `ER`.
fn hand_made(records: &[Vec<u8>], dir_sectors: u32, extra: u32, rock: bool) -> Vec<u8> {
    let total = 18 + dir_sectors + extra;
    let mut out = vec![0u8; total as usize * SECTOR];
    let pvd = &mut out[16 * SECTOR..17 * SECTOR];
    pvd[0] = PRIMARY;
    pvd[1..6].copy_from_slice(STANDARD_ID);
    pvd[6] = 1;
    pvd[BLOCK_SIZE_FIELD..BLOCK_SIZE_FIELD + 4].copy_from_slice(&both_u16(2048));
    let root = record(&[0], FLAG_DIRECTORY, 18, dir_sectors * 2048, &[]);
    pvd[ROOT_RECORD..ROOT_RECORD + 34].copy_from_slice(&root);
    let end = &mut out[17 * SECTOR..18 * SECTOR];
    end[0] = TERMINATOR;
    end[1..6].copy_from_slice(STANDARD_ID);
    let mut dot_entries = Vec::new();
    if rock {
        dot_entries.extend_from_slice(&[b'S', b'P', 7, 1, 0xBE, 0xEF, 0]);
        dot_entries.extend_from_slice(&[b'E', b'R', 18, 1, 10, 0, 0, 1]);
        dot_entries.extend_from_slice(b"RRIP_1991A");
    }
    let mut all = vec![record(&[0], FLAG_DIRECTORY, 18, dir_sectors * 2048, &dot_entries)];
    all.push(record(&[1], FLAG_DIRECTORY, 18, dir_sectors * 2048, &[]));
    all.extend_from_slice(records);
    let mut at = 18 * SECTOR;
    for r in all {
        if at % SECTOR + r.len() > SECTOR {
            at = at.next_multiple_of(SECTOR);
        }
        out[at..at + r.len()].copy_from_slice(&r);
        at += r.len();
    }
    out
}

/// A directory record with ISO 9660 identifier `id` and System Use `entries`.
fn record(id: &[u8], flags: u8, sector: u32, len: u32, entries: &[u8]) -> Vec<u8> {
    write::record(id, (sector, len), flags, entries.to_vec())
}

fn nm(name: &str) -> Vec<u8> {
    let mut e = vec![b'N', b'M', 5 + name.len() as u8, 1, 0];
    e.extend_from_slice(name.as_bytes());
    e
}

fn px(mode: u32) -> Vec<u8> {
    write::px(mode, 1)
}

#[test]
fn plain_iso_names_are_lower_cased_without_their_version() {
    let bytes = hand_made(&[record(b"RECIPE.JSON;1", 0, 19, 2, &[])], 1, 1, false);
    let image = open(&bytes).unwrap();
    assert_eq!(image.lookup("recipe.json").unwrap().unwrap().len(), 2);
    assert_eq!(image.lookup("RECIPE.JSON").unwrap(), None, "shown lower-cased, compared exactly");
    let bytes = hand_made(&[record(b"RECIPE.;1", 0, 19, 2, &[])], 1, 1, false);
    assert!(open(&bytes).unwrap().lookup("recipe").unwrap().is_some(), "a '.;1' ending is dropped");
}

#[test]
fn rock_ridge_types_decide_what_a_name_is() {
    let entries = |mode| [px(mode), nm("recipe.json")].concat();
    for (mode, kind) in [
        (0o100444, Kind::File),
        (0o040555, Kind::Directory),
        (0o120777, Kind::Symlink),
        (0o020644, Kind::Other(0o020644)),
        (0o010644, Kind::Other(0o010644)),
        (0o000644, Kind::Other(0o000644)),
    ] {
        let bytes = hand_made(&[record(b"A.;1", 0, 19, 2, &entries(mode))], 1, 1, true);
        let found = open(&bytes).unwrap().lookup("recipe.json").unwrap().unwrap();
        assert_eq!(found.kind, kind, "{mode:o}");
    }
    // The directory flag without PX.
    let bytes = hand_made(&[record(b"A", FLAG_DIRECTORY, 18, 2048, &nm("recipe.json"))], 1, 0, true);
    assert_eq!(open(&bytes).unwrap().lookup("recipe.json").unwrap().unwrap().kind, Kind::Directory);
}

#[test]
fn hidden_records_are_not_found() {
    let re = [nm("recipe.json"), vec![b'R', b'E', 4, 1]].concat();
    let associated = record(b"B.;1", FLAG_ASSOCIATED, 19, 2, &nm("recipe.json"));
    for records in [vec![record(b"A.;1", 0, 19, 2, &re)], vec![associated]] {
        let bytes = hand_made(&records, 1, 1, true);
        assert_eq!(open(&bytes).unwrap().lookup("recipe.json").unwrap(), None);
    }
    // An NM entry cut short (its length past the area) drops the Rock Ridge name: the ISO name
    // shows instead.
    let mut cut = nm("recipe.json");
    cut[2] = 60;
    let bytes = hand_made(&[record(b"X.;1", 0, 19, 2, &cut)], 1, 1, true);
    let image = open(&bytes).unwrap();
    assert_eq!(image.lookup("recipe.json").unwrap(), None);
    assert!(image.lookup("x").unwrap().is_some());
}

#[test]
fn continued_names_are_joined() {
    let mut first = nm("recipe.");
    first[4] = 1;
    let bytes = hand_made(&[record(b"A.;1", 0, 19, 2, &[first, nm("json")].concat())], 1, 1, true);
    assert!(open(&bytes).unwrap().lookup("recipe.json").unwrap().is_some());
}

#[test]
fn hostile_images_end_in_a_refusal() {
    // Cut after its descriptors: the root directory is past the end.
    let bytes = task_media();
    assert!(matches!(open(&bytes[..18 * SECTOR]), Err(Error::Truncated(_))));
    assert!(matches!(open(&bytes[..16 * SECTOR + 100]), Err(Error::Truncated(_))));
    assert!(matches!(open(&[0u8; 40 * SECTOR]), Err(Error::Truncated(_)) | Err(Error::NotIso(_))));
    // A file whose extent lies past the end, and one that claims 4 GiB.
    for (sector, len) in [(1000, 10), (19, u32::MAX)] {
        let bytes = hand_made(&[record(b"RECIPE.JSON;1", 0, sector, len, &[])], 1, 1, false);
        let image = open(&bytes).unwrap();
        let entry = image.lookup("recipe.json").unwrap().unwrap();
        let mut buf = Vec::new();
        let err = image.data(&entry).take(8 << 20).read_to_end(&mut buf).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::UnexpectedEof, "{err}");
    }
    // A record shorter than its name.
    let mut short = record(b"RECIPE.JSON;1", 0, 19, 2, &[]);
    short[0] = 36;
    let bytes = hand_made(&[short[..36].to_vec()], 1, 1, false);
    assert!(matches!(open(&bytes).unwrap().lookup("recipe.json"), Err(Error::Corrupt(_))));
    // Another block size; no volume at all.
    let mut other = task_media();
    other[16 * SECTOR + BLOCK_SIZE_FIELD..16 * SECTOR + BLOCK_SIZE_FIELD + 4].copy_from_slice(&both_u16(512));
    other[17 * SECTOR] = 0;
    assert!(matches!(open(&other), Err(Error::NotIso(_))));
    let mut none = task_media();
    none[16 * SECTOR] = 0;
    none[17 * SECTOR] = 0;
    assert!(matches!(open(&none), Err(Error::NotIso(_))));
}

#[test]
fn a_directory_of_100_000_records_is_not_searched_whole() {
    let one = record(b"A.;1", 0, 0, 0, &[]);
    let per_sector = SECTOR / one.len();
    let sectors = 100_000 / per_sector as u32 + 1;
    let records = vec![one; 100_000];
    let bytes = hand_made(&records, sectors, 0, false);
    let started = std::time::Instant::now();
    let err = open(&bytes).unwrap().lookup("recipe.json").unwrap_err();
    assert!(err.to_string().contains(&MAX_LOOKUP_RECORDS.to_string()), "{err}");
    // Not a timing assertion: a reminder of what the bound is for, should it ever regress.
    let _ = started.elapsed();
}

#[test]
fn loops_in_the_tree_and_its_continuations_are_bounded() {
    // A directory that is the root again: any depth of it is searched one step a name.
    let bytes = hand_made(&[record(b"LOOP", FLAG_DIRECTORY, 18, 2048, &[])], 1, 0, false);
    let image = open(&bytes).unwrap();
    let deep = "loop/".repeat(2000) + "recipe.json";
    assert!(matches!(image.lookup(&deep), Ok(None) | Err(Error::TooLarge(_))));
    // A continuation area that continues into itself, read at most 32 times.
    let mut ce = vec![b'C', b'E', 28, 1];
    for v in [19u32, 0, 28] {
        ce.extend_from_slice(&both_u32(v));
    }
    let mut bytes = hand_made(&[record(b"A.;1", 0, 19, 2, &[nm("recipe.json"), ce.clone()].concat())], 1, 1, true);
    bytes[19 * SECTOR..19 * SECTOR + 28].copy_from_slice(&ce);
    let image = open(&bytes).unwrap();
    assert_eq!(image.lookup("recipe.json").unwrap(), None, "a broken walk hides the record, as Linux's -EIO");
}

#[test]
fn multi_extent_files_read_in_order() {
    let bytes = {
        let first = record(b"RECIPE.JSON;1", FLAG_MULTI_EXTENT, 19, 2048, &[]);
        let second = record(b"RECIPE.JSON;1", 0, 20, 3, &[]);
        let mut bytes = hand_made(&[first, second], 1, 2, false);
        bytes[19 * SECTOR..20 * SECTOR].fill(b'a');
        bytes[20 * SECTOR..20 * SECTOR + 3].copy_from_slice(b"bcd");
        bytes
    };
    let image = open(&bytes).unwrap();
    let data = read(&image, "recipe.json");
    assert_eq!(data.len(), 2051);
    assert!(data.ends_with(b"abcd"));
}

/// Found by fuzz/iso_reader: an entry whose length is shorter than its kind's fields (`SP` of 3
/// bytes) had its fields read past its slice. Linux reads them from the bytes that follow.
#[test]
fn an_entry_shorter_than_its_fields_is_read_past_its_length() {
    for short in [vec![b'S', b'P', 3, 1, 0xBE, 0xEF, 0], vec![b'P', b'X', 4, 1], vec![b'N', b'M', 4, 1, 0, 0, 0, 0]] {
        let entries = [short.clone(), px(0o100444), nm("recipe.json")].concat();
        let bytes = hand_made(&[record(b"A.;1", 0, 19, 2, &entries)], 1, 1, true);
        let found = open(&bytes).unwrap().lookup("recipe.json");
        assert!(found.is_ok(), "{short:?}: {found:?}");
    }
}
