//! `recipe.env`: its keys (one table, [`FIELD_KEYS`] and [`FILE_KEYS`], for the writer, the
//! checks and the documentation test), and `KEY="value"` lines that read back byte-identical
//! through two parsers, a POSIX shell (`. /run/provision/recipe.env`) and systemd's
//! `EnvironmentFile=`.
//!
//! # The quoting rule
//!
//! Every value is written in double quotes, with a backslash before each of the four
//! characters `"`, `\`, `` ` `` and `$`, and nothing else escaped. Values holding a control
//! character (U+0000 to U+001F, or U+007F) are refused at validation time instead.
//!
//! Why this reads back identically:
//! - **POSIX shell** (XCU 2.2.3): inside double quotes only `$`, `` ` ``, `\` and `"` are
//!   special (plus `\` before a newline, and newlines are refused). A backslash before one of
//!   the four yields the character itself; everything else is literal, so `'`, `%`, `!`, `*`,
//!   `;`, spaces and non-ASCII stay as they are. With `$` and `` ` `` escaped, sourcing
//!   expands nothing and runs nothing.
//! - **systemd** (`src/basic/env-file.c`, state machine of `parse_env_file_internal`): after
//!   `KEY=`, a `"` enters DOUBLE_QUOTE_VALUE, where every byte is kept until the closing `"`;
//!   a `\` enters DOUBLE_QUOTE_VALUE_ESCAPE, which keeps the next byte alone when it is one of
//!   `SHELL_NEED_ESCAPE` (the same four characters) and keeps `\` and the byte otherwise, as
//!   the shell does. Nothing is expanded: `EnvironmentFile=` uses `load_env_file()`, not the
//!   merging variant that substitutes `${}`. `%` specifiers apply to unit files, not here.
//!
//! The rule avoids the shell idiom `'it'\''s'` on purpose: in systemd, once an unquoted
//! backslash escape has been read the parser stays in its unquoted VALUE state, where later
//! quote characters are literal, so that idiom reads back differently. It also avoids bare
//! values (systemd strips their trailing whitespace) and single quotes (no way to hold `'`).
//!
//! Control characters are refused rather than escaped: a newline would need a continuation
//! rule that the two parsers do not share, NUL cannot be stored by either, and systemd refuses
//! other control characters in environment values.

/// The recipe's string fields written to `recipe.env`, with their keys, in file order
/// (SPEC §5): each only when the recipe has it.
pub const FIELD_KEYS: [(&str, &str); 5] = [
    ("task_target", "TASK_TARGET"),
    ("target_disk", "TARGET_DISK"),
    ("oci_url", "OCI_URL"),
    ("firmware_url", "FIRMWARE_URL"),
    ("recipe_version", "RECIPE_VERSION"),
];

/// The kernel's node of what `target_disk` names (`/dev/sdb` for a by-id name), after the
/// fields, when a run resolved it on the machine (SPEC §4a; `render` resolves nothing).
pub const DEVICE_KEY: &str = "TARGET_DISK_DEVICE";

/// The schema's `$id`, always written, after the fields.
pub const SCHEMA_ID_KEY: &str = "RECIPE_SCHEMA_ID";

/// The files of the output set that `recipe.env` names by absolute path, with their keys, in
/// file order: each only when it is written.
pub const FILE_KEYS: [(&str, &str); 6] = [
    ("layout.json", "LAYOUT_FILE"),
    ("user-data", "USER_DATA_FILE"),
    ("unattend.xml", "UNATTEND_XML_FILE"),
    ("ks.cfg", "KS_CFG_FILE"),
    ("metadata.json", "METADATA_FILE"),
    ("recipe.json", "RECIPE_FILE"),
];

/// Whether `value` can be written so that both parsers read it back byte for byte.
pub fn representable(value: &str) -> bool {
    !value.chars().any(|c| c < ' ' || c == '\u{7f}')
}

/// `value` in double quotes per the rule above. Callers have checked [`representable`].
pub fn quote(value: &str) -> String {
    debug_assert!(representable(value));
    let mut out = String::with_capacity(value.len() + 2);
    out.push('"');
    for c in value.chars() {
        if matches!(c, '"' | '\\' | '`' | '$') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

/// Writes `KEY="value"` lines.
pub fn render(pairs: &[(&str, &str)]) -> String {
    let mut out = String::new();
    for (key, value) in pairs {
        out.push_str(key);
        out.push('=');
        out.push_str(&quote(value));
        out.push('\n');
    }
    out
}

/// A model of systemd's `parse_env_file_internal` (env-file.c): the `KEY`/value pairs that
/// `EnvironmentFile=` would read from `text`, in file order.
///
/// It is a reference model for the unit tests of the rule and for the `outputs_writer` fuzz
/// target (`fuzz/`), not part of the dispatcher's work: nothing on the boot path calls it, so
/// it never reaches the shipped binary. It follows the C state machine branch for branch, so
/// that values can be read back without a systemd here; the VM test reads them back through
/// the real one.
pub fn parse_like_systemd(text: &str) -> Vec<(String, String)> {
    #[derive(Clone, Copy, PartialEq)]
    enum State {
        PreKey,
        Key,
        PreValue,
        Value,
        ValueEscape,
        SingleQuote,
        DoubleQuote,
        DoubleQuoteEscape,
        Comment,
        CommentEscape,
    }
    const WHITESPACE: &[char] = &[' ', '\t', '\n', '\r'];
    const NEWLINE: &[char] = &['\n', '\r'];
    let mut pairs = Vec::new();
    let (mut key, mut value) = (String::new(), String::new());
    let (mut last_key_ws, mut last_value_ws): (Option<usize>, Option<usize>) = (None, None);
    let mut state = State::PreKey;
    let mut push = |key: &mut String, value: &mut String, last_key_ws: Option<usize>, last_value_ws: Option<usize>| {
        let mut k = std::mem::take(key);
        let mut v = std::mem::take(value);
        if let Some(cut) = last_key_ws {
            k.truncate(cut);
        }
        if let Some(cut) = last_value_ws {
            v.truncate(cut);
        }
        pairs.push((k, v));
    };
    for c in text.chars() {
        match state {
            State::PreKey => {
                if c == '#' || c == ';' {
                    state = State::Comment;
                } else if !WHITESPACE.contains(&c) {
                    state = State::Key;
                    last_key_ws = None;
                    key.push(c);
                }
            }
            State::Key => {
                if NEWLINE.contains(&c) {
                    state = State::PreKey;
                    key.clear();
                } else if c == '=' {
                    state = State::PreValue;
                    last_value_ws = None;
                } else {
                    if !WHITESPACE.contains(&c) {
                        last_key_ws = None;
                    } else if last_key_ws.is_none() {
                        last_key_ws = Some(key.len());
                    }
                    key.push(c);
                }
            }
            State::PreValue => {
                if NEWLINE.contains(&c) {
                    state = State::PreKey;
                    push(&mut key, &mut value, last_key_ws, None);
                } else if c == '\'' {
                    state = State::SingleQuote;
                } else if c == '"' {
                    state = State::DoubleQuote;
                } else if c == '\\' {
                    state = State::ValueEscape;
                } else if !WHITESPACE.contains(&c) {
                    state = State::Value;
                    value.push(c);
                }
            }
            State::Value => {
                if NEWLINE.contains(&c) {
                    state = State::PreKey;
                    push(&mut key, &mut value, last_key_ws, last_value_ws);
                } else if c == '\\' {
                    state = State::ValueEscape;
                    last_value_ws = None;
                } else {
                    if !WHITESPACE.contains(&c) {
                        last_value_ws = None;
                    } else if last_value_ws.is_none() {
                        last_value_ws = Some(value.len());
                    }
                    value.push(c);
                }
            }
            State::ValueEscape => {
                state = State::Value;
                if !NEWLINE.contains(&c) {
                    value.push(c);
                }
            }
            State::SingleQuote => {
                if c == '\'' {
                    state = State::PreValue;
                } else {
                    value.push(c);
                }
            }
            State::DoubleQuote => {
                if c == '"' {
                    state = State::PreValue;
                } else if c == '\\' {
                    state = State::DoubleQuoteEscape;
                } else {
                    value.push(c);
                }
            }
            State::DoubleQuoteEscape => {
                state = State::DoubleQuote;
                if matches!(c, '"' | '\\' | '`' | '$') {
                    value.push(c);
                } else if c != '\n' {
                    value.push('\\');
                    value.push(c);
                }
            }
            State::Comment => {
                if c == '\\' {
                    state = State::CommentEscape;
                } else if NEWLINE.contains(&c) {
                    state = State::PreKey;
                }
            }
            State::CommentEscape => {
                state = if NEWLINE.contains(&c) { State::PreKey } else { State::Comment };
            }
        }
    }
    if matches!(
        state,
        State::PreValue
            | State::Value
            | State::ValueEscape
            | State::SingleQuote
            | State::DoubleQuote
            | State::DoubleQuoteEscape
    ) {
        let trailing = if state == State::Value { last_value_ws } else { None };
        push(&mut key, &mut value, last_key_ws, trailing);
    }
    pairs
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const NASTY: &[&str] = &[
        "",
        "plain",
        "it's",
        r#"say "hi""#,
        r"back\slash\\ and \n not a newline",
        "$HOME ${HOME} $(id) `id`",
        "trailing spaces   ",
        "   leading spaces",
        "100% of %n %i %%",
        "semi; colon & amp | pipe > gt < lt",
        "'single' \"double\" 'mixed\"",
        r"'it'\''s'",
        "#not a comment",
        "ünïcødé ✓ 日本",
        "a=b=c",
        "\\",
        "\\\"",
        "$",
        "!bang !! !$",
        "*?[glob]",
        "~tilde",
    ];

    #[test]
    fn values_read_back_through_the_systemd_model() {
        for value in NASTY {
            let text = render(&[("KEY", value), ("NEXT", "x")]);
            let parsed = parse_like_systemd(&text);
            assert_eq!(parsed, [("KEY".to_owned(), value.to_string()), ("NEXT".to_owned(), "x".to_owned())], "{text}");
        }
    }

    #[test]
    fn the_model_reproduces_the_documented_trap() {
        // The shell idiom for a quote inside single quotes does not survive systemd.
        let parsed = parse_like_systemd("KEY='it'\\''s'\n");
        assert_eq!(parsed, [("KEY".to_owned(), "it''s'".to_owned())]);
        // And a bare value loses its trailing blanks.
        assert_eq!(parse_like_systemd("KEY=a b  \n"), [("KEY".to_owned(), "a b".to_owned())]);
    }

    #[test]
    fn control_characters_are_not_representable() {
        for bad in ["a\nb", "a\rb", "tab\there", "nul\0", "del\u{7f}", "\u{1b}[31m"] {
            assert!(!representable(bad), "{bad:?}");
        }
        for good in NASTY {
            assert!(representable(good), "{good:?}");
        }
    }

    proptest! {
        #[test]
        fn any_representable_value_reads_back_through_the_model(value in "\\PC*") {
            prop_assume!(representable(&value));
            let text = render(&[("KEY", &value)]);
            prop_assert_eq!(parse_like_systemd(&text), vec![("KEY".to_owned(), value.clone())]);
        }
    }
}
