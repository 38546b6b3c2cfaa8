//! From a JSON pointer back to the file: the line and column where a value starts, and the
//! exact text of a value. Found on demand (error reports, `metadata.json`) by one pass over
//! text that serde_json has already accepted, so the hot path of a valid recipe never pays
//! for it. The pass records only the pointers asked for, so its memory follows the answer,
//! not the input; and it is defensive: on anything unexpected it stops, never panics.

use ahash::{AHashMap as HashMap, AHashSet as HashSet};
use std::ops::Range;

use crate::issues::{ascii_json_len, shorten, Position, MAX_PATH_BYTES};

/// The position of byte `offset` of `text`.
pub fn of_offset(text: &[u8], offset: usize) -> Position {
    of_offsets(text, &[offset])[0]
}

/// The positions of many offsets in one pass over `text` (one pass per offset would make a
/// report of many details quadratic in the input).
pub fn of_offsets(text: &[u8], offsets: &[usize]) -> Vec<Position> {
    let mut order: Vec<usize> = (0..offsets.len()).collect();
    order.sort_unstable_by_key(|&i| offsets[i]);
    let mut out = vec![Position::START; offsets.len()];
    let (mut scanned, mut line, mut line_start) = (0, 1, 0);
    for i in order {
        let offset = offsets[i].min(text.len());
        for newline in memchr::memchr_iter(b'\n', &text[scanned..offset]) {
            line += 1;
            line_start = scanned + newline + 1;
        }
        scanned = offset;
        out[i] = Position { line, column: offset - line_start + 1 };
    }
    out
}

/// Deeper than serde_json's own limit, so text serde_json accepted is indexed whole.
const MAX_DEPTH: usize = 256;

/// Where the value at each pointer starts in `text`; for a pointer that does not exist (a
/// missing property), where its nearest existing ancestor starts.
pub fn positions(text: &str, pointers: &[&str]) -> Vec<Position> {
    // A valid recipe has nothing to place: no pass over a text of up to 8 MiB for it.
    if pointers.is_empty() {
        return Vec::new();
    }
    // Each pointer and its ancestors, so that a missing property finds its object.
    let mut wanted = HashSet::new();
    for pointer in pointers {
        wanted.insert(*pointer);
        wanted.extend(pointer.match_indices('/').map(|(cut, _)| &pointer[..cut]));
    }
    let spans = scan(text, Some(&wanted)).spans;
    let start = |mut pointer: &str| loop {
        if let Some(span) = spans.get(pointer) {
            return span.start;
        }
        match pointer.rfind('/') {
            Some(cut) => pointer = &pointer[..cut],
            None => return 0,
        }
    };
    let offsets: Vec<usize> = pointers.iter().map(|p| start(p)).collect();
    of_offsets(text.as_bytes(), &offsets)
}

/// The byte range of the value at `pointer`.
pub fn span(text: &str, pointer: &str) -> Option<Range<usize>> {
    scan(text, Some(&HashSet::from_iter([pointer]))).spans.remove(pointer)
}

/// Every key that repeats an earlier key of its object: its pointer and where it stands.
pub fn duplicates(text: &str) -> Vec<(String, Position)> {
    let found = scan(text, None).duplicates;
    let offsets: Vec<usize> = found.iter().map(|(_, offset)| *offset).collect();
    let positions = of_offsets(text.as_bytes(), &offsets);
    found.into_iter().map(|(pointer, _)| pointer).zip(positions).collect()
}

/// One pass over `text`: the spans of the `wanted` pointers, and the repeated keys.
fn scan<'w>(text: &str, wanted: Option<&'w HashSet<&'w str>>) -> Found<'w> {
    let mut scanner = Scanner { bytes: text.as_bytes(), text, wanted, found: Found::default(), values: 0 };
    let mut pointer = String::new();
    let start = scanner.skip_ws(0);
    let _complete = scanner.value(start, &mut pointer, 0);
    scanner.found
}

#[derive(Debug, Default)]
struct Found<'w> {
    /// Keyed by the wanted pointers themselves: no copy of a (possibly long) pointer.
    spans: HashMap<&'w str, Range<usize>>,
    duplicates: Vec<(String, usize)>,
}

struct Scanner<'t, 'w> {
    bytes: &'t [u8],
    text: &'t str,
    /// Record only these pointers' spans (`None`: look for repeated keys only).
    wanted: Option<&'w HashSet<&'w str>>,
    found: Found<'w>,
    values: usize,
}

impl Scanner<'_, '_> {
    fn skip_ws(&self, mut i: usize) -> usize {
        while matches!(self.bytes.get(i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            i += 1;
        }
        i
    }

    /// Indexes the value starting at `i`; returns the offset just past it.
    fn value(&mut self, i: usize, pointer: &mut String, depth: usize) -> Option<usize> {
        // As many values as the strict reader accepts: text it refused for a repeated key is
        // indexed no further than the reader would have read.
        if depth > MAX_DEPTH || self.values >= super::MAX_VALUES {
            return None;
        }
        self.values += 1;
        let end = match *self.bytes.get(i)? {
            b'{' => self.object(i, pointer, depth)?,
            b'[' => self.array(i, pointer, depth)?,
            b'"' => self.string_end(i)?,
            _ => {
                let len = self.bytes[i..]
                    .iter()
                    .position(|b| matches!(b, b',' | b']' | b'}' | b' ' | b'\t' | b'\n' | b'\r'))
                    .unwrap_or(self.bytes.len() - i);
                i + len
            }
        };
        if let Some(wanted) = self.wanted.and_then(|wanted| wanted.get(pointer.as_str())) {
            self.found.spans.insert(wanted, i..end);
        }
        Some(end)
    }

    fn object(&mut self, open: usize, pointer: &mut String, depth: usize) -> Option<usize> {
        let mut seen = HashSet::new();
        let mut i = self.skip_ws(open + 1);
        if self.bytes.get(i) == Some(&b'}') {
            return Some(i + 1);
        }
        loop {
            let key_end = self.string_end(i)?;
            let key = self.key(i..key_end)?;
            let parent_len = pointer.len();
            super::push_token(pointer, &key);
            if self.wanted.is_none() && !seen.insert(key) {
                // Shortened here, not copied whole: under one key of 1 MiB, 3,000 repeats
                // made 3 GiB of pointers (issue 31).
                let path = shorten(pointer, MAX_PATH_BYTES, ascii_json_len).into_owned();
                self.found.duplicates.push((path, i));
            }
            i = self.skip_ws(key_end);
            if self.bytes.get(i) != Some(&b':') {
                return None;
            }
            i = self.skip_ws(i + 1);
            i = self.value(i, pointer, depth + 1)?;
            pointer.truncate(parent_len);
            i = self.skip_ws(i);
            match self.bytes.get(i)? {
                b',' => i = self.skip_ws(i + 1),
                b'}' => return Some(i + 1),
                _ => return None,
            }
        }
    }

    fn array(&mut self, open: usize, pointer: &mut String, depth: usize) -> Option<usize> {
        let mut i = self.skip_ws(open + 1);
        if self.bytes.get(i) == Some(&b']') {
            return Some(i + 1);
        }
        let mut n = 0usize;
        loop {
            let parent_len = pointer.len();
            super::push_token(pointer, &n.to_string());
            i = self.value(i, pointer, depth + 1)?;
            pointer.truncate(parent_len);
            n += 1;
            i = self.skip_ws(i);
            match self.bytes.get(i)? {
                b',' => i = self.skip_ws(i + 1),
                b']' => return Some(i + 1),
                _ => return None,
            }
        }
    }

    /// `i` is an opening quote; returns the offset just past the closing one.
    fn string_end(&self, i: usize) -> Option<usize> {
        if self.bytes.get(i) != Some(&b'"') {
            return None;
        }
        let mut j = i + 1;
        loop {
            // memchr: a 1 MiB user_data is skipped in microseconds, not byte by byte.
            j += memchr::memchr2(b'"', b'\\', self.bytes.get(j..)?)?;
            match self.bytes[j] {
                b'"' => return Some(j + 1),
                _ => j += 2,
            }
        }
    }

    /// The decoded text of a key (escapes resolved, so `"\u0061"` and `"a"` are one key).
    fn key(&self, quoted: Range<usize>) -> Option<String> {
        let raw = self.text.get(quoted)?;
        if raw.contains('\\') {
            serde_json::from_str(raw).ok()
        } else {
            Some(raw[1..raw.len() - 1].to_owned())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "{\n  \"a\": [1, {\"b/c\": \"x\"}],\n  \"s\": \"q\\\"uo\"\n}";

    #[test]
    fn positions_of_values_and_missing_properties() {
        let at = |line, column| Position { line, column };
        assert_eq!(
            positions(TEXT, &["/a", "", "/a/1/b~1c", "/s", "/a/1/nope", "/missing", "/a"]),
            // A missing property points at its enclosing object.
            [at(2, 8), at(1, 1), at(2, 20), at(3, 8), at(2, 12), at(1, 1), at(2, 8)]
        );
    }

    #[test]
    fn raw_spans_are_exact() {
        assert_eq!(&TEXT[span(TEXT, "/s").unwrap()], "\"q\\\"uo\"");
        assert_eq!(&TEXT[span(TEXT, "/a/1").unwrap()], "{\"b/c\": \"x\"}");
        assert_eq!(&TEXT[span(TEXT, "/a/0").unwrap()], "1");
        assert_eq!(span(TEXT, "/a/2"), None);
    }

    #[test]
    fn repeated_keys_under_a_long_key_are_named_shortened() {
        let key = "k".repeat(1 << 20);
        let text = format!("{{\"{key}\": {{{}}}}}", vec!["\"a\": 1"; 3000].join(","));
        let found = duplicates(&text);
        assert_eq!(found.len(), 2999);
        for (path, _) in &found {
            assert!(path.len() <= MAX_PATH_BYTES && path.starts_with("/kkk") && path.ends_with("kkk/a"), "{path}");
        }
    }

    #[test]
    fn broken_text_stops_without_panicking() {
        for text in ["{\"a\": ", "{\"a\" 1}", "[1, 2", "\"abc", "{\"a\\", "[[[[", ""] {
            let _ = positions(text, &["/a/0"]);
            let _ = duplicates(text);
        }
    }
}
