//! The recipe as the dispatcher holds it: the file's text, its parsed value, and a way back
//! from a JSON pointer to the line and column it came from.
//!
//! Reading is strict ([`read`]); the typed view that outputs are built from is [`model`].

pub mod model;
pub mod position;
pub mod read;

use std::sync::Arc;

use serde_json::{Map, Value};

use crate::issues::Position;

pub use read::{parse, read_bytes, ReadError, MAX_RECIPE_BYTES};

/// A recipe that parsed strictly: valid UTF-8, one JSON value, no duplicate keys.
#[derive(Debug)]
pub struct Document {
    text: String,
    /// Shared with the thread that validates it against the schema (`crate::bounded`).
    value: Arc<Value>,
}

/// The most JSON values (objects, arrays, strings, numbers, booleans and nulls, at any depth;
/// a key counts with its value) a recipe or schema may hold. Parsed, each value costs tens of
/// bytes and each check a little time, so 8 MiB of `[1,1,1,...]` (4 million values) would
/// cost hundreds of MiB; a legitimate recipe holds a few hundred (64 partitions of the
/// schema's fields take under 500), far inside this. The strict reader ([`read`]) stops there,
/// and the positions ([`position`]) index no further.
pub const MAX_VALUES: usize = 16_384;

/// The top-level key that editors use to find a schema. It is a hint, not data (SPEC §3):
/// a schema that does not declare it validates the recipe without it.
pub const EDITOR_HINT: &str = "$schema";

impl Document {
    fn new(text: String, value: Value) -> Self {
        Document { text, value: Arc::new(value) }
    }

    /// The recipe as parsed.
    pub fn value(&self) -> &Value {
        &self.value
    }

    /// The recipe as parsed, for another thread.
    pub fn shared_value(&self) -> Arc<Value> {
        self.value.clone()
    }

    /// The top-level object, when the recipe is one.
    pub fn object(&self) -> Option<&Map<String, Value>> {
        self.value.as_object()
    }

    /// A top-level field that is a string.
    pub fn str_field(&self, name: &str) -> Option<&str> {
        self.object()?.get(name)?.as_str()
    }

    /// The file's text exactly as read.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Where the value at each pointer starts in the file; for a pointer that does not exist
    /// (a missing property), where its nearest existing ancestor starts.
    pub fn positions(&self, pointers: &[&str]) -> Vec<Position> {
        position::positions(&self.text, pointers)
    }

    /// The exact text of the value at `pointer`, as it stands in the file.
    pub fn raw(&self, pointer: &str) -> Option<&str> {
        let span = position::span(&self.text, pointer)?;
        self.text.get(span)
    }
}

/// Appends one reference token to a JSON pointer (RFC 6901: `~` is `~0`, `/` is `~1`).
pub fn push_token(pointer: &mut String, token: &str) {
    pointer.push('/');
    let mut rest = token;
    // Most keys need no escape: copied whole, not character by character.
    while let Some(at) = memchr::memchr2(b'~', b'/', rest.as_bytes()) {
        pointer.push_str(&rest[..at]);
        pointer.push_str(if rest.as_bytes()[at] == b'~' { "~0" } else { "~1" });
        rest = &rest[at + 1..];
    }
    pointer.push_str(rest);
}

/// `pointer` extended by one reference token.
pub fn child(pointer: &str, token: &str) -> String {
    let mut out = String::with_capacity(pointer.len() + token.len() + 1);
    out.push_str(pointer);
    push_token(&mut out, token);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pointer_tokens_are_escaped() {
        assert_eq!(child("", "a/b~c"), "/a~1b~0c");
        assert_eq!(child("", "~/~é"), "/~0~1~0é");
        assert_eq!(child("", ""), "/");
        assert_eq!(child("/x", "0"), "/x/0");
    }
}
