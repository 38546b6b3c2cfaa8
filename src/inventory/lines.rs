//! The inventory on a console (SPEC §6b): the document (the inventory as compact JSON in
//! printable ASCII) cut into numbered lines that a reader joins and checks, so that a line lost,
//! cut or garbled on a serial link is detected, never misread. docs/reference.md (The inventory) gives
//! the format to controller authors; in short, each line is
//!
//! ```text
//! PROVISION-INVENTORY v1 <index>/<count> <sha256> <length> <chunk>
//! ```
//!
//! `index` counts from 1 to `count`; `sha256` is the document's (64 lower-case hex digits, the
//! same on every line); `chunk` is the next `length` bytes of the document (at most
//! [`MAX_CHUNK_BYTES`]), never beginning or ending with a space (a log that trims a line's end
//! cannot make a whole line look cut, nor a cut one whole). The chunks in index order are the
//! document, whose SHA-256 must be `sha256`.
//!
//! A reader ([`read`]) takes a line from its prefix wherever it starts in a log's line (after a
//! getty's prompt) and takes `length` bytes after its header: a value that holds the prefix is
//! only chunk bytes to it, and a line cut short shows as short. The lines of one inventory are
//! consecutive lines of one `sha256` and `count` with rising indexes; the last inventory of a
//! log that is whole counts.

use std::io::{self, BufRead, Read};

use sha2::{Digest, Sha256};

use super::Inventory;
use crate::issues::{ascii_json, hex};

/// What starts every line (after whatever shares its row on the console).
pub const PREFIX: &str = "PROVISION-INVENTORY v1 ";

/// The most bytes of the document on one line. With the longest header (the prefix,
/// `99/99 `, the digest and `3840 `: 99 bytes) and its newline, a line takes at most 3,940
/// bytes: within one write that a UART's 4 KiB buffer takes whole, even with the newline
/// written as CR LF.
pub const MAX_CHUNK_BYTES: usize = 3840;

/// The most bytes of all the lines of one inventory, newlines included: about six seconds of a
/// 115200-baud serial console.
pub const MAX_BYTES: usize = 64 * 1024;

/// The most lines one inventory has ([`MAX_BYTES`] takes 18); a reader refuses more.
pub const MAX_LINES: usize = 99;

/// The most bytes of a log read ([`read`]): days of a server's console.
pub const MAX_LOG_BYTES: u64 = 256 << 20;

/// A log's lines are read up to this many bytes; a longer one is read on as the next (lines
/// merged when newlines were lost take 4 KiB each).
const MAX_ROW_BYTES: usize = 1 << 20;

/// An inventory as lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Printed {
    /// Each with its newline.
    pub lines: Vec<String>,
    /// The document's SHA-256, in hex: `inventory_sha256` in status.json and the result line.
    pub sha256: String,
}

impl Printed {
    /// All the lines' bytes, newlines included.
    pub fn bytes(&self) -> usize {
        self.lines.iter().map(String::len).sum()
    }
}

/// The lines of `document`, which must be printable ASCII (as [`ascii_json`] writes).
pub fn print(document: &str) -> Printed {
    debug_assert!(document.bytes().all(|b| (b' '..=b'~').contains(&b)));
    let sha256 = hex(&Sha256::digest(document.as_bytes()));
    let chunks = chunks(document);
    let count = chunks.len();
    let lines = chunks
        .iter()
        .enumerate()
        .map(|(i, chunk)| format!("{PREFIX}{}/{count} {sha256} {} {chunk}\n", i + 1, chunk.len()))
        .collect();
    Printed { lines, sha256 }
}

/// `document` in chunks of at most [`MAX_CHUNK_BYTES`], cut where neither side is a space (in a
/// run of spaces longer than half a chunk, which no machine's string has, where it falls).
fn chunks(document: &str) -> Vec<&str> {
    let mut chunks = Vec::new();
    let mut rest = document;
    while !rest.is_empty() {
        let mut end = rest.len().min(MAX_CHUNK_BYTES);
        let bytes = rest.as_bytes();
        let space_at = |cut: usize| bytes[cut - 1] == b' ' || bytes[cut] == b' ';
        if end < rest.len() {
            let cut = (MAX_CHUNK_BYTES / 2..=end).rev().find(|&cut| !space_at(cut));
            end = cut.unwrap_or(end);
        }
        chunks.push(&rest[..end]);
        rest = &rest[end..];
    }
    chunks
}

/// `inventory` printed within [`MAX_BYTES`]: what does not fit is left out and counted, the
/// disks first from the last (but the one named `keep`, the disk the recipe named), then the
/// interfaces from the last, and the disk named `keep` last of all.
pub fn fit(inventory: &mut Inventory, keep: Option<&str>) -> Printed {
    loop {
        let printed = print(&ascii_json(inventory));
        let Some(excess) = printed.bytes().checked_sub(MAX_BYTES).filter(|&n| n > 0) else { return printed };
        if !shed(inventory, keep, excess) {
            return printed;
        }
    }
}

/// Leaves out entries (in [`fit`]'s order) until their JSON took at least `excess` bytes;
/// `false` when there is nothing left to leave out.
fn shed(inventory: &mut Inventory, keep: Option<&str>, excess: usize) -> bool {
    let mut shed = 0;
    while shed < excess {
        let disk = inventory.disks.iter().rposition(|listed| Some(listed.disk.name.as_str()) != keep);
        shed += 1 + if let Some(at) = disk {
            inventory.disks_omitted += 1;
            ascii_json(&inventory.disks.remove(at)).len()
        } else if let Some(interface) = inventory.interfaces.pop() {
            inventory.interfaces_omitted += 1;
            ascii_json(&interface).len()
        } else if let Some(kept) = inventory.disks.pop() {
            inventory.disks_omitted += 1;
            ascii_json(&kept).len()
        } else {
            return shed > 0;
        };
    }
    true
}

/// An inventory read whole from a log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Whole {
    /// The document: JSON, as the lines carried it.
    pub document: String,
    pub sha256: String,
    /// The log's lines (from 1) its first and last line are on.
    pub rows: (usize, usize),
}

/// What a log holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// Its last whole inventory; `later` says what is wrong with one that comes after it.
    Whole { whole: Whole, later: Option<String> },
    /// Inventory lines, none of them a whole inventory: what is wrong with the last one.
    Damaged(String),
    /// No inventory line at all.
    Nothing,
}

/// The inventories of a console log, as [`PREFIX`] lines wherever they start in its lines (CR
/// LF or LF), at most [`MAX_LOG_BYTES`] of it read; a larger log is an error that says so.
pub fn read(mut log: impl BufRead) -> io::Result<Found> {
    let mut reading = Reading::default();
    let (mut row, mut number, mut total) = (Vec::new(), 0, 0u64);
    loop {
        row.clear();
        let n = Read::take(&mut log, MAX_ROW_BYTES as u64).read_until(b'\n', &mut row)?;
        if n == 0 {
            break;
        }
        total += n as u64;
        if total > MAX_LOG_BYTES {
            let message = format!("is larger than {MAX_LOG_BYTES} bytes: give the log of the server's last boots");
            return Err(io::Error::new(io::ErrorKind::InvalidData, message));
        }
        number += 1;
        while matches!(row.last(), Some(b'\n' | b'\r')) {
            row.pop();
        }
        for piece in pieces(&row, number) {
            reading.take(piece);
        }
    }
    Ok(reading.end())
}

/// One line found in a log.
#[derive(Debug)]
enum Piece {
    Line(Line),
    /// The prefix, then no header this format writes.
    Garbled {
        row: usize,
    },
}

#[derive(Debug)]
struct Line {
    row: usize,
    index: usize,
    count: usize,
    sha256: String,
    /// The bytes the header announces; `chunk` is shorter when the line was cut.
    length: usize,
    chunk: Vec<u8>,
}

/// The lines that start in a log's line `row` (more than one when newlines were lost).
fn pieces(row: &[u8], number: usize) -> Vec<Piece> {
    let mut pieces = Vec::new();
    let mut rest = row;
    while let Some(at) = find(rest, PREFIX.as_bytes()) {
        let after = &rest[at + PREFIX.len()..];
        let Some((index, count, sha256, length, body)) = header(after) else {
            pieces.push(Piece::Garbled { row: number });
            rest = after;
            continue;
        };
        // Cut short: by the end of the row, or by the next line of the same inventory, merged
        // into this row when the newline was lost (only a line of the inventory can carry its
        // digest: a value holding the prefix is chunk bytes).
        let mut end = body.len().min(length);
        let mut from = 0;
        while let Some(next) = find(&body[from..end], PREFIX.as_bytes()) {
            let next = from + next;
            if header(&body[next + PREFIX.len()..]).is_some_and(|h| h.2 == sha256) {
                end = next;
                break;
            }
            from = next + 1;
        }
        let chunk = body[..end].to_vec();
        pieces.push(Piece::Line(Line { row: number, index, count, sha256: sha256.to_owned(), length, chunk }));
        rest = &body[end..];
    }
    pieces
}

/// `<index>/<count> <sha256> <length> ` and what follows it.
fn header(text: &[u8]) -> Option<(usize, usize, &str, usize, &[u8])> {
    let mut fields = text.splitn(4, |&b| b == b' ');
    let (numbers, sha256, length, body) = (fields.next()?, fields.next()?, fields.next()?, fields.next()?);
    let number = |digits: &[u8], max: usize| -> Option<usize> {
        let valid = !digits.is_empty() && digits.len() <= 4 && digits.iter().all(u8::is_ascii_digit);
        let value: usize = std::str::from_utf8(digits).ok().filter(|_| valid)?.parse().ok()?;
        (1..=max).contains(&value).then_some(value)
    };
    let slash = numbers.iter().position(|&b| b == b'/')?;
    let count = number(&numbers[slash + 1..], MAX_LINES)?;
    let index = number(&numbers[..slash], count)?;
    let hex_digit = |b: &u8| b.is_ascii_digit() || (b'a'..=b'f').contains(b);
    let sha256 = std::str::from_utf8(sha256).ok().filter(|s| s.len() == 64 && s.bytes().all(|b| hex_digit(&b)))?;
    Some((index, count, sha256, number(length, MAX_CHUNK_BYTES)?, body))
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    memchr::memmem::find(haystack, needle)
}

/// The lines read so far: the inventory under way, the last whole one, and what is wrong with
/// the last one that was not whole.
#[derive(Default)]
struct Reading {
    current: Option<Assembly>,
    whole: Option<Whole>,
    damaged: Option<String>,
    garbled: Option<usize>,
}

impl Reading {
    fn take(&mut self, piece: Piece) {
        let line = match piece {
            Piece::Line(line) => line,
            Piece::Garbled { row } => {
                self.garbled.get_or_insert(row);
                return;
            }
        };
        match &mut self.current {
            Some(current) if current.takes(&line) => current.add(line),
            _ => {
                self.finish();
                self.current = Some(Assembly::new(line));
            }
        }
    }

    fn finish(&mut self) {
        match self.current.take().map(Assembly::finish) {
            Some(Ok(whole)) => (self.whole, self.damaged) = (Some(whole), None),
            Some(Err(why)) => self.damaged = Some(why),
            None => {}
        }
    }

    fn end(mut self) -> Found {
        self.finish();
        match (self.whole, self.damaged, self.garbled) {
            (Some(whole), later, _) => Found::Whole { whole, later },
            (None, Some(why), _) => Found::Damaged(why),
            (None, None, Some(row)) => Found::Damaged(format!(
                "log line {row} starts with {PREFIX:?}, then no header of that format (<index>/<count> <sha256> \
                 <length>): it was damaged on the way"
            )),
            (None, None, None) => Found::Nothing,
        }
    }
}

/// The lines of one inventory, gathered as they come.
struct Assembly {
    sha256: String,
    count: usize,
    /// By index: the chunk and the length its header announced.
    parts: Vec<Option<(Vec<u8>, usize)>>,
    last_index: usize,
    rows: (usize, usize),
}

impl Assembly {
    fn new(line: Line) -> Assembly {
        let mut assembly = Assembly {
            sha256: line.sha256.clone(),
            count: line.count,
            parts: vec![None; line.count],
            last_index: 0,
            rows: (line.row, line.row),
        };
        assembly.add(line);
        assembly
    }

    /// Whether `line` is the next of this inventory: the same digest and count, a later index.
    fn takes(&self, line: &Line) -> bool {
        line.sha256 == self.sha256 && line.count == self.count && line.index > self.last_index
    }

    fn add(&mut self, line: Line) {
        self.last_index = line.index;
        self.rows.1 = line.row;
        self.parts[line.index - 1] = Some((line.chunk, line.length));
    }

    /// The inventory, when every line is there whole and they add up to the digest; else what
    /// is wrong, in words.
    fn finish(self) -> Result<Whole, String> {
        let count = self.count;
        let mut problems = Vec::new();
        for (i, part) in self.parts.iter().enumerate() {
            match part {
                None => problems.push(format!("line {} of {count} is missing", i + 1)),
                Some((chunk, length)) if chunk.len() < *length => {
                    problems.push(format!("line {} of {count} is cut ({} of {length} bytes)", i + 1, chunk.len()))
                }
                Some(_) => {}
            }
        }
        let (first, last) = self.rows;
        let what = format!("the inventory on log lines {first} to {last} (sha256 {})", &self.sha256[..16]);
        if !problems.is_empty() {
            return Err(format!("{what} is not whole: {}", problems.join(", ")));
        }
        let document: Vec<u8> = self.parts.into_iter().flatten().flat_map(|(chunk, _)| chunk).collect();
        if hex(&Sha256::digest(&document)) != self.sha256 {
            return Err(format!(
                "{what} has all its lines, but they do not add up to its sha256: a line was damaged on the way"
            ));
        }
        let document = String::from_utf8(document).map_err(|_| format!("{what} is not text"))?;
        Ok(Whole { document, sha256: self.sha256, rows: self.rows })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn document(bytes: usize) -> String {
        let mut text = String::from("{\"disks\":[");
        let mut n = 0;
        while text.len() < bytes {
            text += &format!("{{\"name\":\"sd{n}\",\"model\":\"QEMU HARDDISK  {n}\"}},");
            n += 1;
        }
        text.pop();
        text + "]}"
    }

    fn read_text(log: &str) -> Found {
        read(log.as_bytes()).unwrap()
    }

    fn whole(found: Found) -> (String, Option<String>) {
        match found {
            Found::Whole { whole, later } => (whole.document, later),
            other => panic!("{other:?}"),
        }
    }

    fn damaged(found: Found) -> String {
        match found {
            Found::Damaged(why) => why,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn lines_fit_a_console_write_and_join_to_the_document() {
        let text = document(20_000);
        let printed = print(&text);
        assert_eq!(printed.lines.len(), 6);
        for (i, line) in printed.lines.iter().enumerate() {
            assert!(line.len() <= 3940, "{}", line.len());
            assert!(line.starts_with(&format!("{PREFIX}{}/6 {} ", i + 1, printed.sha256)), "{line}");
            assert!(line.bytes().filter(|&b| b != b'\n').all(|b| (b' '..=b'~').contains(&b)));
            let chunk = line.trim_end_matches('\n').splitn(5, ' ').nth(4).unwrap();
            assert!(!chunk.starts_with(' ') && !chunk.ends_with(' '), "{line}");
        }
        let log = format!("boot\r\n{}login: ", printed.lines.join("").replace('\n', "\r\n"));
        assert_eq!(whole(read_text(&log)), (text, None));
        assert_eq!(read_text("nothing here\n"), Found::Nothing);
    }

    #[test]
    fn a_line_lost_or_cut_is_named_never_misread() {
        let printed = print(&document(9000));
        assert_eq!(printed.lines.len(), 3);
        let without = |i: usize| {
            printed.lines.iter().enumerate().filter(|(n, _)| *n != i).map(|(_, l)| l.as_str()).collect::<String>()
        };
        assert!(damaged(read_text(&without(1))).ends_with("is not whole: line 2 of 3 is missing"));
        assert!(damaged(read_text(&without(0))).contains("line 1 of 3 is missing"));
        let mut cut = printed.lines.clone();
        cut[2] = format!("{}\n", &cut[2][..cut[2].len() - 40]);
        let why = damaged(read_text(&cut.concat()));
        assert!(why.contains("line 3 of 3 is cut ("), "{why}");
        // A byte lost inside a line and another one doubled: the lengths hold, the digest not.
        let mut garbled = printed.lines.clone();
        garbled[1] = garbled[1].replacen("sd1", "sd11", 1).replacen("QEMU", "QEM", 1);
        let why = damaged(read_text(&garbled.concat()));
        assert!(why.contains("do not add up to its sha256"), "{why}");
        // A line whose newline was lost: cut and merged with the next one.
        let mut merged = printed.lines.clone();
        merged[0] = merged[0][..1000].to_owned();
        let why = damaged(read_text(&merged.concat()));
        assert!(why.contains("is not whole: line 1 of 3 is cut ("), "{why}");
        assert!(!why.contains("line 2"), "line 2 survives its merge: {why}");
    }

    #[test]
    fn the_last_whole_inventory_counts() {
        let (first, second) = (print(&document(5000)), print(&document(6000)));
        let log = format!("{}reboot\n{}", first.lines.concat(), second.lines.concat());
        assert_eq!(whole(read_text(&log)).0, document(6000));
        // The later one cut: the earlier whole one counts, and what is wrong is said.
        let log = format!("{}reboot\n{}", first.lines.concat(), second.lines[..1].concat());
        let (text, later) = whole(read_text(&log));
        assert_eq!(text, document(5000));
        assert!(later.unwrap().contains("line 2 of 2 is missing"));
        // The same inventory printed at two boots: two inventories, not one of four lines.
        let log = format!("{}{}", first.lines.concat(), first.lines.concat());
        let Found::Whole { whole, later: None } = read_text(&log) else { panic!() };
        assert_eq!(whole.rows, (3, 4));
    }

    /// A machine's string that holds a line of its own is chunk bytes to a reader.
    #[test]
    fn a_value_that_holds_the_prefix_is_never_a_line() {
        let forged = print("{}");
        let text = format!("{{\"model\":\"{}\",\"pad\":\"{}\"}}", forged.lines[0].trim_end(), "x".repeat(5000));
        let printed = print(&text);
        assert_eq!(whole(read_text(&printed.lines.concat())).0, text);
        // Cut in the middle of the forged text: still no second inventory.
        let mut cut = printed.lines.clone();
        cut[0] = format!("{}\n", &cut[0][..140]);
        assert!(damaged(read_text(&cut.concat())).contains("line 1 of 2 is cut"));
    }

    #[test]
    fn headers_are_read_strictly() {
        let sha = "ab".repeat(32);
        for bad in [
            format!("0/1 {sha} 2 {{}}"),
            format!("2/1 {sha} 2 {{}}"),
            format!("1/100 {sha} 2 {{}}"),
            format!("1/1 {} 2 {{}}", "AB".repeat(32)),
            format!("1/1 {sha} 0 {{}}"),
            format!("1/1 {sha} 3841 {{}}"),
            format!("1/1 {sha}  2 {{}}"),
            "1/1".to_owned(),
        ] {
            assert!(header(bad.as_bytes()).is_none(), "{bad}");
        }
        assert_eq!(header(format!("1/1 {sha} 2 {{}}").as_bytes()).map(|h| (h.0, h.1, h.3)), Some((1, 1, 2)));
        let why = damaged(read_text(&format!("{PREFIX}x/y\n")));
        assert!(why.starts_with("log line 1 starts with"), "{why}");
    }

    /// A JBOD's inventory: 300 disks take more than 64 KiB; the last ones are left out and
    /// counted, the disk the recipe named kept, and the lines read back whole.
    #[test]
    fn what_does_not_fit_is_left_out_and_counted() {
        let (_dir, sources) = crate::inventory::tests::sources();
        let mut inventory = Inventory::read(&sources, &[], None);
        let disk = |n: usize| crate::disks::verdict::Listed {
            disk: crate::disks::Disk {
                serial: Some(format!("PD-JBOD-{n:04}")),
                model: Some("ST16000NM001G-2KK103".into()),
                by_id: vec![format!("/dev/disk/by-id/wwn-0x5000c500a1b2{n:04x}")],
                size_bytes: 16_000_900_661_248,
                ..crate::disks::tests::disk(&format!("sd{n}"), n as u64)
            },
            verdict: crate::disks::verdict::Verdict::Candidate,
            users: vec![],
        };
        inventory.disks = (0..300).map(disk).collect();
        inventory.interfaces = (0..4)
            .map(|n| super::super::Interface {
                name: format!("eno{n}"),
                mac: Some(format!("3c:ec:ef:00:11:{n:02x}")),
                driver: Some("ixgbe".into()),
                link: Some("down".into()),
                carrier: None,
            })
            .collect();
        let printed = fit(&mut inventory, Some("sd299"));
        assert!(printed.bytes() <= MAX_BYTES, "{}", printed.bytes());
        assert!(printed.bytes() > MAX_BYTES - 2 * 1024, "no more is left out than needs be: {}", printed.bytes());
        assert_eq!(inventory.disks.len() + inventory.disks_omitted, 300);
        assert!(inventory.disks_omitted > 0);
        assert_eq!(inventory.disks.last().unwrap().disk.name, "sd299", "the recipe's disk is kept");
        assert_eq!((inventory.interfaces.len(), inventory.interfaces_omitted), (4, 0), "disks go first");
        let (document, _) = whole(read_text(&printed.lines.concat()));
        assert_eq!(document, ascii_json(&inventory));
        assert_eq!(printed.sha256, hex(&Sha256::digest(document.as_bytes())));
    }

    #[test]
    fn chunks_never_begin_or_end_with_a_space() {
        let text = format!("{{\"a\":\"{}\"}}", "ab ".repeat(3000));
        for chunk in chunks(&text) {
            assert!(!chunk.starts_with(' ') && !chunk.ends_with(' '));
            assert!(chunk.len() <= MAX_CHUNK_BYTES);
        }
        assert_eq!(chunks(&text).concat(), text);
    }
}
