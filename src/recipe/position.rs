//! From a JSON pointer back to the file: the line and column where a value starts, and the
//! exact text of a value. Built on demand (error reports, `metadata.json`) by one pass over
//! text that serde_json has already accepted, so the hot path of a valid recipe never pays
//! for it. The pass is defensive all the same: on anything unexpected it stops, never panics.

use std::collections::{HashMap, HashSet};
use std::ops::Range;

use serde::Serialize;

/// A 1-based line and a 1-based column counted in bytes, as serde_json reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Position {
    pub line: usize,
    pub column: usize,
}

impl Position {
    /// The position of byte `offset` of `text`.
    pub fn of_offset(text: &[u8], offset: usize) -> Position {
        let before = &text[..offset.min(text.len())];
        let line_start = before.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        Position { line: before.iter().filter(|&&b| b == b'\n').count() + 1, column: before.len() - line_start + 1 }
    }
}

/// Deeper than serde_json's own limit, so text serde_json accepted is indexed whole.
const MAX_DEPTH: usize = 256;

#[derive(Debug, Default)]
pub struct Index {
    spans: HashMap<String, Range<usize>>,
    duplicates: Vec<(String, usize)>,
}

impl Index {
    pub fn build(text: &str) -> Index {
        let mut scanner = Scanner { bytes: text.as_bytes(), text, index: Index::default() };
        let mut pointer = String::new();
        let start = scanner.skip_ws(0);
        let _complete = scanner.value(start, &mut pointer, 0);
        scanner.index
    }

    /// The byte range of the value at `pointer`.
    pub fn span(&self, pointer: &str) -> Option<Range<usize>> {
        self.spans.get(pointer).cloned()
    }

    /// Where the value at `pointer` starts, or its nearest existing ancestor.
    pub fn position(&self, text: &str, pointer: &str) -> Position {
        let mut pointer = pointer;
        loop {
            if let Some(span) = self.spans.get(pointer) {
                return Position::of_offset(text.as_bytes(), span.start);
            }
            match pointer.rfind('/') {
                Some(cut) => pointer = &pointer[..cut],
                None => return Position { line: 1, column: 1 },
            }
        }
    }

    /// Every key that repeats an earlier key of its object: its pointer and where it stands.
    pub fn duplicates(&self, text: &str) -> Vec<(String, Position)> {
        self.duplicates
            .iter()
            .map(|(pointer, offset)| (pointer.clone(), Position::of_offset(text.as_bytes(), *offset)))
            .collect()
    }
}

struct Scanner<'t> {
    bytes: &'t [u8],
    text: &'t str,
    index: Index,
}

impl Scanner<'_> {
    fn skip_ws(&self, mut i: usize) -> usize {
        while matches!(self.bytes.get(i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            i += 1;
        }
        i
    }

    /// Indexes the value starting at `i`; returns the offset just past it.
    fn value(&mut self, i: usize, pointer: &mut String, depth: usize) -> Option<usize> {
        if depth > MAX_DEPTH {
            return None;
        }
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
        self.index.spans.insert(pointer.clone(), i..end);
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
            if !seen.insert(key) {
                self.index.duplicates.push((pointer.clone(), i));
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
        let index = Index::build(TEXT);
        assert_eq!(index.position(TEXT, ""), Position { line: 1, column: 1 });
        assert_eq!(index.position(TEXT, "/a"), Position { line: 2, column: 8 });
        assert_eq!(index.position(TEXT, "/a/1/b~1c"), Position { line: 2, column: 20 });
        // A missing property points at its enclosing object.
        assert_eq!(index.position(TEXT, "/a/1/nope"), Position { line: 2, column: 12 });
        assert_eq!(index.position(TEXT, "/missing"), Position { line: 1, column: 1 });
    }

    #[test]
    fn raw_spans_are_exact() {
        let index = Index::build(TEXT);
        assert_eq!(&TEXT[index.span("/s").unwrap()], "\"q\\\"uo\"");
        assert_eq!(&TEXT[index.span("/a/1").unwrap()], "{\"b/c\": \"x\"}");
        assert_eq!(&TEXT[index.span("/a/0").unwrap()], "1");
    }

    #[test]
    fn broken_text_stops_without_panicking() {
        for text in ["{\"a\": ", "{\"a\" 1}", "[1, 2", "\"abc", "{\"a\\", "[[[[", ""] {
            let index = Index::build(text);
            let _ = index.position(text, "/a/0");
        }
    }
}
