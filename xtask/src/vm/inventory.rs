//! The machine's inventory on the guest's serial console (SPEC §6b), read as a controller
//! author would from docs/reference.md's reading rules alone, with none of the product's code:
//! numbered `PROVISION-INVENTORY v1` lines, joined and checked by their digest. Judged: this
//! boot's console holds a whole inventory, the result line names its digest, and its disks are
//! those the guest's `provision-dispatcher disks --format json` lists.

use serde_json::Value;

use super::report::Report;

pub const PREFIX: &str = "PROVISION-INVENTORY v1 ";

/// The most bytes of a line's chunk.
const MAX_CHUNK: usize = 3840;

/// A whole inventory found on a console: its digest and its document.
#[derive(Debug, PartialEq)]
pub struct Inventory {
    pub sha256: String,
    pub document: Value,
}

/// A line's header, `<index>/<count> <sha256> <length> ` after the prefix.
struct Header<'t> {
    index: usize,
    count: usize,
    sha256: &'t str,
    length: usize,
    /// The bytes it takes, its last space included.
    taken: usize,
}

/// The header at the start of `text`, read strictly: `1 <= index <= count <= 99`, 64
/// lower-case hexadecimal digits, `1 <= length <= 3840`, single spaces.
fn header(text: &str) -> Option<Header<'_>> {
    let number = |field: &str, max: usize| -> Option<usize> {
        let n = field.parse().ok().filter(|_| !field.starts_with('0') && field.bytes().all(|b| b.is_ascii_digit()))?;
        (1..=max).contains(&n).then_some(n)
    };
    let mut fields = text.splitn(4, ' ');
    let (numbers, sha256, length) = (fields.next()?, fields.next()?, fields.next()?);
    fields.next()?;
    let (index, count) = numbers.split_once('/')?;
    let (index, count) = (number(index, 99)?, number(count, 99)?);
    let hex = sha256.len() == 64 && sha256.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    let taken = numbers.len() + sha256.len() + length.len() + 3;
    let length = number(length, MAX_CHUNK)?;
    (index <= count && hex).then_some(Header { index, count, sha256, length, taken })
}

/// The inventories of `console` that are whole, in order, and what is wrong with those that
/// are not (docs/reference.md, Reading the inventory). In each row (split at LF, CRs dropped)
/// every prefix starts a line whose header is read strictly (else it belongs to no
/// inventory); the chunk is the next `<length>` bytes, cut short where a header of the same
/// digest begins inside them (the next line, its newline lost) or where the row ends. A line
/// belongs to the inventory under way when it has its digest and count and a higher index
/// than the last line taken; any other starts a new one.
pub fn read(console: &str) -> (Vec<Inventory>, Vec<String>) {
    let (mut whole, mut problems) = (vec![], vec![]);
    let mut current: Option<Lines> = None;
    for row in console.split('\n') {
        let row = row.replace('\r', "");
        let mut from = 0;
        while let Some(found) = row[from..].find(PREFIX) {
            let start = from + found + PREFIX.len();
            let Some(Header { index, count, sha256, length, taken }) = header(&row[start..]) else {
                problems.push(format!("an inventory line with a damaged header: {:.60}", &row[start..]));
                from = start;
                continue;
            };
            let body = &row[start + taken..];
            let mut end = body.len().min(length);
            while !body.is_char_boundary(end) {
                end -= 1;
            }
            let cut_at = body[..end]
                .match_indices(PREFIX)
                .find(|(at, _)| header(&body[at + PREFIX.len()..]).is_some_and(|next| next.sha256 == sha256));
            if let Some((at, _)) = cut_at {
                end = at;
            }
            let takes = matches!(&current, Some((sha, n, chunks)) if sha == sha256 && *n == count
                && chunks.iter().rposition(Option::is_some).is_none_or(|last| index > last + 1));
            if !takes {
                finish(current.take(), &mut whole, &mut problems);
                current = Some((sha256.to_owned(), count, vec![None; count]));
            }
            let chunks = &mut current.as_mut().expect("just made").2;
            chunks[index - 1] = Some((end == length).then(|| body[..end].to_owned()));
            from = start + taken + end;
        }
    }
    finish(current, &mut whole, &mut problems);
    (whole, problems)
}

/// The lines of the inventory under way: its digest and count, and by index each line seen,
/// its chunk when whole (`Some(None)`: cut).
type Lines = (String, usize, Vec<Option<Option<String>>>);

/// An inventory's lines, joined and checked: to `whole`, or what is wrong to `problems`.
fn finish(current: Option<Lines>, whole: &mut Vec<Inventory>, problems: &mut Vec<String>) {
    let Some((sha256, count, chunks)) = current else { return };
    let missing: Vec<usize> = (1..=count).filter(|i| chunks[i - 1].is_none()).collect();
    let cut: Vec<usize> = (1..=count).filter(|i| matches!(chunks[i - 1], Some(None))).collect();
    if !missing.is_empty() || !cut.is_empty() {
        problems.push(format!("inventory {sha256}: of {count} lines, {missing:?} missing and {cut:?} cut"));
        return;
    }
    let document: String = chunks.into_iter().flatten().flatten().collect();
    let digest = crate::system::sha256_hex_of(document.as_bytes()).unwrap_or_default();
    match serde_json::from_str(&document) {
        Ok(document) if digest == sha256 => whole.push(Inventory { sha256, document }),
        _ => problems.push(format!("inventory {sha256}: its lines do not add up to its digest")),
    }
}

/// What is wrong with this boot's inventory: empty means the console holds a whole one that
/// the result line names, with the disks the guest lists.
pub fn judge(report: &Report, console: &str, result: Option<&Value>) -> Vec<String> {
    let (whole, damaged) = read(console);
    let Some(last) = whole.last() else {
        let mut problems = vec!["the serial console has no whole PROVISION-INVENTORY v1 inventory".to_owned()];
        problems.extend(damaged);
        return problems;
    };
    let mut problems = vec![];
    if let Some(line) = result {
        if line["inventory_sha256"] != last.sha256.as_str() {
            problems.push(format!(
                "the result line's inventory_sha256 is {}, the last inventory's {}",
                line["inventory_sha256"], last.sha256
            ));
        }
    }
    if let Some(status) = report.status() {
        if status["inventory_sha256"] != last.sha256.as_str() {
            problems
                .push(format!("status.json's inventory_sha256 is {}, not the inventory's", status["inventory_sha256"]));
        }
    }
    let Some(listed) = report.file("disks.json").and_then(|b| serde_json::from_slice::<Value>(b).ok()) else {
        return problems;
    };
    let names = |disks: &Value| -> Vec<String> {
        disks.as_array().into_iter().flatten().filter_map(|d| d["name"].as_str().map(str::to_owned)).collect()
    };
    let (printed, guest) = (&last.document["disks"], &listed["disks"]);
    if names(printed) != names(guest) {
        problems.push(format!("the inventory lists the disks {:?}, `disks` {:?}", names(printed), names(guest)));
    } else if printed != guest {
        for (printed, guest) in printed.as_array().into_iter().flatten().zip(guest.as_array().into_iter().flatten()) {
            if printed != guest {
                problems.push(format!("the inventory says {printed} of a disk, `disks` says {guest}"));
            }
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vm::cases::tests::report;

    /// Lines as the dispatcher prints them (docs/reference.md, The inventory), for a document.
    fn lines(document: &str, size: usize) -> Vec<String> {
        let sha256 = crate::system::sha256_hex_of(document.as_bytes()).unwrap();
        let chunks: Vec<&str> = document.as_bytes().chunks(size).map(|c| std::str::from_utf8(c).unwrap()).collect();
        let count = chunks.len();
        chunks
            .iter()
            .enumerate()
            .map(|(i, chunk)| format!("{PREFIX}{}/{count} {sha256} {} {chunk}\r\n", i + 1, chunk.len()))
            .collect()
    }

    #[test]
    fn the_lines_join_into_the_document_and_a_missing_one_is_told() {
        let document = r#"{"disks":[{"name":"sda","model":"QEMU HARDDISK"}],"tpm":{"present":false}}"#;
        let printed = lines(document, 20);
        let console = format!("boot\r\n{}maintenance login: ", printed.concat());
        let (whole, problems) = read(&console);
        assert_eq!((whole.len(), problems.len()), (1, 0), "{problems:?}");
        assert_eq!(whole[0].document["disks"][0]["name"], "sda");
        let mut lost = printed.clone();
        lost.remove(1);
        let (whole, problems) = read(&lost.concat());
        assert!(whole.is_empty());
        assert!(problems[0].contains("of 4 lines, [2] missing and [] cut"), "{problems:?}");
        // Two boots: two inventories.
        let (whole, _) = read(&format!("{}{}", printed.concat(), printed.concat()));
        assert_eq!(whole.len(), 2);
    }

    /// A real console (tests/fixtures/console/INDEX.md): escape sequences, CR LF, a getty's
    /// prompt before the line.
    #[test]
    fn real_consoles_hold_one_whole_inventory_each() {
        for (name, lines, disks) in [("inventory-sixteen-disks", 2, 16), ("disk-scsi-by-id-dispatched", 1, 2)] {
            let path = crate::root().join(format!("tests/fixtures/console/{name}.console.log"));
            let console = super::super::console_text(&path);
            let (whole, problems) = read(&console);
            assert_eq!((whole.len(), problems.len()), (1, 0), "{name}: {problems:?}");
            assert_eq!(whole[0].document["disks"].as_array().unwrap().len(), disks, "{name}");
            assert_eq!(console.matches(PREFIX).count(), lines, "{name}");
        }
    }

    #[test]
    fn the_inventory_must_agree_with_the_guests_disks() {
        let document = r#"{"disks":[{"name":"sda","serial":"A"}]}"#;
        let console = lines(document, 16).concat();
        let report = |disks: &str| report(&[("disks.json", disks.as_bytes())]);
        assert_eq!(judge(&report(r#"{"disks":[{"name":"sda","serial":"A"}]}"#), &console, None), Vec::<String>::new());
        let problems = judge(&report(r#"{"disks":[{"name":"sda","serial":"B"}]}"#), &console, None);
        assert_eq!(problems.len(), 1, "{problems:?}");
        let problems = judge(&report(r#"{"disks":[]}"#), &console, None);
        assert!(problems[0].contains("lists the disks [\"sda\"], `disks` []"), "{problems:?}");
        let line = serde_json::json!({"inventory_sha256": "0"});
        assert!(judge(&report(r#"{"disks":[{"name":"sda","serial":"A"}]}"#), &console, Some(&line))[0]
            .starts_with("the result line's inventory_sha256 is \"0\""));
        assert!(judge(&report("{}"), "", None)[0].contains("no whole PROVISION-INVENTORY v1 inventory"));
    }
}
