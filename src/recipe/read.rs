//! Strict reading (SPEC §3): a size cap before parsing, UTF-8, exactly one JSON value,
//! duplicate keys refused at any depth, nesting beyond serde_json's limit an error, and at
//! most [`MAX_VALUES`] values, so that memory stays a small multiple of the input's size.

use std::cell::Cell;
use std::fmt;
use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use super::{position, Document, MAX_VALUES};
use crate::issues::Position;

/// Recipes larger than this are refused before any byte is parsed.
pub const MAX_RECIPE_BYTES: u64 = 8 * 1024 * 1024;

/// Why a file is not a recipe the dispatcher will look at.
#[derive(Debug)]
pub enum ReadError {
    /// The file could not be opened or read.
    Io(io::Error),
    /// Larger than the cap; nothing was parsed.
    TooLarge { limit: u64 },
    /// More than [`MAX_VALUES`] values; parsing stopped there.
    TooManyValues { limit: usize },
    /// Not JSON: bad UTF-8, bad syntax, trailing data, or nesting too deep.
    Syntax { position: Position, message: String },
    /// The same key twice in one object: every such key, by pointer and position.
    DuplicateKeys(Vec<(String, Position)>),
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::Io(e) => write!(f, "cannot read it: {e}"),
            ReadError::TooLarge { limit } => write!(f, "it is larger than {limit} bytes"),
            ReadError::TooManyValues { limit } => write!(f, "it holds more than {limit} JSON values"),
            ReadError::Syntax { message, .. } => write!(f, "it is not JSON: {message}"),
            ReadError::DuplicateKeys(keys) => write!(f, "it repeats {} object key(s)", keys.len()),
        }
    }
}

impl std::error::Error for ReadError {}

/// Reads a recipe file's bytes, capped, for [`parse`].
pub fn read_bytes(path: &Path) -> Result<Vec<u8>, ReadError> {
    read_capped(File::open(path).map_err(ReadError::Io)?, MAX_RECIPE_BYTES)
}

/// Reads at most `limit` bytes; one more byte means the input is too large. The length is
/// not trusted from metadata (a file on removable media may not be what `stat` says); it only
/// sizes the buffer, so that a large recipe is not copied again and again as it grows.
pub fn read_capped(file: File, limit: u64) -> Result<Vec<u8>, ReadError> {
    let hint = file.metadata().map_or(0, |m| m.len());
    read_capped_from(file, hint, limit)
}

/// [`read_capped`] of any reader, `hint` the length it claims.
pub fn read_capped_from(reader: impl Read, hint: u64, limit: u64) -> Result<Vec<u8>, ReadError> {
    let mut bytes = Vec::with_capacity(hint.min(limit) as usize + 1);
    reader.take(limit + 1).read_to_end(&mut bytes).map_err(ReadError::Io)?;
    if bytes.len() as u64 > limit {
        return Err(ReadError::TooLarge { limit });
    }
    Ok(bytes)
}

/// Parses recipe bytes strictly. The bytes become the document's text in place: their UTF-8
/// is checked once.
pub fn parse(bytes: Vec<u8>) -> Result<Document, ReadError> {
    let text = String::from_utf8(bytes).map_err(|e| invalid_utf8(e.as_bytes(), e.utf8_error()))?;
    let value = parse_text(&text)?;
    Ok(Document::new(text, value))
}

/// Parses any JSON text with the recipe's strictness (the schema is read the same way).
pub fn parse_value(bytes: &[u8]) -> Result<Value, ReadError> {
    parse_text(std::str::from_utf8(bytes).map_err(|e| invalid_utf8(bytes, e))?)
}

fn invalid_utf8(bytes: &[u8], e: std::str::Utf8Error) -> ReadError {
    let position = position::of_offset(bytes, e.valid_up_to());
    let message = format!("invalid UTF-8 at line {} column {}", position.line, position.column);
    ReadError::Syntax { position, message }
}

fn parse_text(text: &str) -> Result<Value, ReadError> {
    if text.starts_with('\u{feff}') {
        return Err(ReadError::Syntax {
            position: Position::START,
            message: "byte order mark at line 1 column 1 (JSON does not allow one)".into(),
        });
    }
    let mut de = serde_json::Deserializer::from_str(text);
    let budget = Budget(Cell::new(MAX_VALUES));
    let parsed = StrictSeed(&budget).deserialize(&mut de).and_then(|value| {
        de.end()?;
        Ok(value)
    });
    parsed.map_err(|e| {
        let message = e.to_string();
        if message.starts_with(DUPLICATE_KEY) {
            // serde stops at the first repeat; the index finds every one, with its pointer.
            return ReadError::DuplicateKeys(position::duplicates(text));
        }
        if message.starts_with(TOO_MANY_VALUES) {
            return ReadError::TooManyValues { limit: MAX_VALUES };
        }
        syntax_error(&e)
    })
}

/// serde_json places an error on the last byte it consumed, which is column 0 when it
/// consumed none of that line (an empty file, or one that ends just after a newline). Columns
/// are 1-based, so that is column 1, the place where the missing text would begin; the
/// message says the same place.
fn syntax_error(e: &serde_json::Error) -> ReadError {
    let position = Position { line: e.line(), column: e.column().max(1) };
    let text = e.to_string();
    let serde_place = format!(" at line {} column {}", e.line(), e.column());
    let what = text.strip_suffix(&serde_place).unwrap_or(&text);
    let message = format!("{what} at line {} column {}", position.line, position.column);
    ReadError::Syntax { position, message }
}

const DUPLICATE_KEY: &str = "duplicate object key";
const TOO_MANY_VALUES: &str = "too many values";

/// How many more values the document may hold.
struct Budget(Cell<usize>);

impl Budget {
    fn take<E: de::Error>(&self) -> Result<(), E> {
        match self.0.get() {
            0 => Err(E::custom(TOO_MANY_VALUES)),
            n => {
                self.0.set(n - 1);
                Ok(())
            }
        }
    }
}

/// Reads one `serde_json::Value`, refusing repeated keys (instead of keeping the last one)
/// and stopping once the budget of values is spent.
struct StrictSeed<'b>(&'b Budget);

impl<'de> DeserializeSeed<'de> for StrictSeed<'_> {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        self.0.take()?;
        deserializer.deserialize_any(StrictVisitor(self.0))
    }
}

struct StrictVisitor<'b>(&'b Budget);

impl<'de> Visitor<'de> for StrictVisitor<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(StrictSeed(self.0))? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Value, A::Error> {
        let mut map = Map::new();
        while let Some(key) = access.next_key::<String>()? {
            if map.contains_key(&key) {
                return Err(de::Error::custom(DUPLICATE_KEY));
            }
            let value = access.next_value_seed(StrictSeed(self.0))?;
            map.insert(key, value);
        }
        Ok(Value::Object(map))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn syntax(bytes: &[u8]) -> (Position, String) {
        match parse(bytes.to_vec()) {
            Err(ReadError::Syntax { position, message }) => (position, message),
            other => panic!("expected a syntax error, got {other:?}"),
        }
    }

    #[test]
    fn accepts_one_object() {
        let doc = parse(br#"{"a": [1, 2.5, null, true], "b": {"c": "d"}}"#.to_vec()).unwrap();
        assert_eq!(doc.value()["b"]["c"], "d");
    }

    #[test]
    fn refuses_trailing_values() {
        let (pos, message) = syntax(b"{}\n{}");
        assert_eq!(pos, Position { line: 2, column: 1 });
        assert!(message.contains("trailing characters"), "{message}");
    }

    #[test]
    fn refuses_invalid_utf8_with_its_position() {
        let (pos, message) = syntax(b"{\"a\":\n \"\xff\"}");
        assert_eq!(pos, Position { line: 2, column: 3 });
        assert!(message.contains("UTF-8"));
    }

    #[test]
    fn refuses_byte_order_mark() {
        let (_, message) = syntax("\u{feff}{}".as_bytes());
        assert!(message.contains("byte order mark"));
    }

    #[test]
    fn nothing_consumed_on_a_line_is_column_1_not_0() {
        // Found by fuzz/reader_validator: serde_json says column 0 here.
        assert_eq!(
            syntax(b""),
            (Position { line: 1, column: 1 }, "EOF while parsing a value at line 1 column 1".to_owned())
        );
        let (pos, message) = syntax(b"{\"a\": 1,\n");
        assert_eq!(pos, Position { line: 2, column: 1 });
        assert!(message.ends_with(" at line 2 column 1"), "{message}");
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_crash() {
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        let (_, message) = syntax(deep.as_bytes());
        assert!(message.contains("recursion limit"), "{message}");
    }

    #[test]
    fn duplicate_keys_are_all_reported_with_pointers() {
        let text = b"{\"a\": 1,\n \"m\": {\"x\": 1, \"x\": 2},\n \"a\": 3}";
        match parse(text.to_vec()) {
            Err(ReadError::DuplicateKeys(keys)) => {
                let pointers: Vec<_> = keys.iter().map(|(p, _)| p.as_str()).collect();
                assert_eq!(pointers, ["/m/x", "/a"]);
                assert_eq!(keys[0].1, Position { line: 2, column: 16 });
                assert_eq!(keys[1].1, Position { line: 3, column: 2 });
            }
            other => panic!("expected duplicate keys, got {other:?}"),
        }
    }

    #[test]
    fn duplicate_keys_with_escapes_are_the_same_key() {
        assert!(matches!(
            parse(br#"{"a": 1, "\u0061": 2}"#.to_vec()),
            Err(ReadError::DuplicateKeys(keys)) if keys[0].0 == "/a"
        ));
    }

    #[test]
    fn values_beyond_the_budget_stop_the_parse() {
        let at_limit = format!("[{}]", vec!["1"; MAX_VALUES - 1].join(","));
        assert!(parse(at_limit.into_bytes()).is_ok());
        let over = format!("[{}]", vec!["1"; MAX_VALUES].join(","));
        assert!(matches!(parse(over.into_bytes()), Err(ReadError::TooManyValues { limit: MAX_VALUES })));
        let keys: Vec<String> = (0..MAX_VALUES).map(|i| format!("\"k{i}\": {{}}")).collect();
        let over = format!("{{{}}}", keys.join(","));
        assert!(matches!(parse(over.into_bytes()), Err(ReadError::TooManyValues { .. })));
    }

    #[test]
    fn cap_is_enforced_before_parsing() {
        let file = |bytes: &[u8]| {
            let mut file = tempfile::tempfile().unwrap();
            std::io::Write::write_all(&mut file, bytes).unwrap();
            std::io::Seek::rewind(&mut file).unwrap();
            file
        };
        assert!(matches!(read_capped(file(&[b' '; 11]), 10), Err(ReadError::TooLarge { limit: 10 })));
        assert_eq!(read_capped(file(&[b' '; 10]), 10).unwrap().len(), 10);
    }
}
