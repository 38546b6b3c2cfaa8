//! The vocabulary every step shares: what a check finds ([`Issue`]: a [`Code`], a
//! [`Severity`], a pointer and the rule's words), where it stands in the recipe file
//! ([`Position`]), and how reports carry and print it ([`Detail`]). This module depends on
//! nothing else in the crate, so every other module may use it.

use std::borrow::Cow;
use std::fmt::{self, Write as _};

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Error,
    Warning,
}

/// The rule an issue is about: a JSON Schema keyword, or one of the dispatcher's own rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Code {
    /// A draft-07 keyword (`required`, `pattern`, ...), as the schema names it.
    Keyword(&'static str),
    // Strict reading.
    Syntax,
    MaxBytes,
    MaxValues,
    DuplicateKey,
    /// Listing every error of the schema went over the validation's bound; the first is shown.
    TooManyErrors,
    // Safety rules.
    UnsafePath,
    ForbiddenTarget,
    InvalidUnitName,
    UnsafeEnvValue,
    SizeRange,
    // Host checks.
    DiskNotFound,
    NotBlockDevice,
    SystemDisk,
    MediaDisk,
    DiskInUse,
    /// A hint does not match the disk `target_disk` names, or a name points two ways.
    DiskIdentityMismatch,
    /// The hints (or a name) fit two or more whole disks.
    DiskAmbiguous,
    /// Between validation and the start, another disk took the name.
    DiskChanged,
    UnitNotFound,
    SystemdUnavailable,
    // Lints.
    MissingEfiPartition,
    MissingLinuxRoot,
    MissingMsrPartition,
    MissingWindowsDataPartition,
    PercentNotLast,
    DuplicateLabel,
    // Refusals of the media (exit 77, 78, stale media): each about a file as a whole
    // ([`Detail::of_file`]), one code per cause.
    SignatureMissing,
    NotASignature,
    UnknownKey,
    BadSignature,
    WrongNamespace,
    /// The key's line of the trust file does not allow the namespace (`namespaces=`).
    NamespaceNotAllowed,
    BoundToOtherMachine,
    /// Bound to a machine, and this one's SMBIOS UUID cannot be read.
    MachineUuidUnreadable,
    /// Bound to a machine, and this one's SMBIOS UUID is all 0 or all F: no identity.
    MachineWithoutIdentity,
    TrustFileUnusable,
    SchemaMissing,
    /// There, but not a regular file, a symlink, over its cap, or not readable.
    SchemaUnreadable,
    /// Not JSON, not draft-07, a pattern that does not compile, or not a valid schema.
    SchemaInvalid,
    UnknownSchemaId,
    /// Compiling the schema, or validating the recipe against it, went over its bound.
    SchemaTooComplex,
    /// The image's allowlist of targets cannot be used.
    AllowedTargetsUnusable,
    /// The recipe is not the one `provision.recipe=` on the kernel command line names.
    RecipeNotExpected,
    /// `provision.recipe=` is not `sha256:` and 64 hexadecimal digits.
    ExpectedRecipeMalformed,
}

/// The keywords an error of the schema can name (jsonschema calls a false schema
/// `falseSchema`); any other is reported as `schema`.
pub const KEYWORDS: [&str; 37] = [
    "$ref",
    "additionalItems",
    "additionalProperties",
    "allOf",
    "anyOf",
    "const",
    "contains",
    "contentEncoding",
    "contentMediaType",
    "dependencies",
    "else",
    "enum",
    "exclusiveMaximum",
    "exclusiveMinimum",
    "falseSchema",
    "format",
    "if",
    "items",
    "maxItems",
    "maxLength",
    "maxProperties",
    "maximum",
    "minItems",
    "minLength",
    "minProperties",
    "minimum",
    "multipleOf",
    "not",
    "oneOf",
    "pattern",
    "patternProperties",
    "properties",
    "propertyNames",
    "required",
    "then",
    "type",
    "uniqueItems",
];

impl Code {
    /// The code of a JSON Schema keyword; one this list does not know is reported as `schema`.
    pub fn keyword(name: &str) -> Code {
        Code::Keyword(KEYWORDS.iter().find(|k| **k == name).copied().unwrap_or("schema"))
    }

    /// The code as reports, the journal (`CODE=`) and status.json spell it.
    pub fn name(self) -> &'static str {
        match self {
            Code::Keyword(keyword) => keyword,
            Code::Syntax => "syntax",
            Code::MaxBytes => "maxBytes",
            Code::MaxValues => "maxValues",
            Code::DuplicateKey => "duplicateKey",
            Code::TooManyErrors => "tooManyErrors",
            Code::UnsafePath => "unsafePath",
            Code::ForbiddenTarget => "forbiddenTarget",
            Code::InvalidUnitName => "invalidUnitName",
            Code::UnsafeEnvValue => "unsafeEnvValue",
            Code::SizeRange => "sizeRange",
            Code::DiskNotFound => "diskNotFound",
            Code::NotBlockDevice => "notBlockDevice",
            Code::SystemDisk => "systemDisk",
            Code::MediaDisk => "mediaDisk",
            Code::DiskInUse => "diskInUse",
            Code::DiskIdentityMismatch => "diskIdentityMismatch",
            Code::DiskAmbiguous => "diskAmbiguous",
            Code::DiskChanged => "diskChanged",
            Code::UnitNotFound => "unitNotFound",
            Code::SystemdUnavailable => "systemdUnavailable",
            Code::MissingEfiPartition => "missingEfiPartition",
            Code::MissingLinuxRoot => "missingLinuxRoot",
            Code::MissingMsrPartition => "missingMsrPartition",
            Code::MissingWindowsDataPartition => "missingWindowsDataPartition",
            Code::PercentNotLast => "percentNotLast",
            Code::DuplicateLabel => "duplicateLabel",
            Code::SignatureMissing => "signatureMissing",
            Code::NotASignature => "notASignature",
            Code::UnknownKey => "unknownKey",
            Code::BadSignature => "badSignature",
            Code::WrongNamespace => "wrongNamespace",
            Code::NamespaceNotAllowed => "namespaceNotAllowed",
            Code::BoundToOtherMachine => "boundToOtherMachine",
            Code::MachineUuidUnreadable => "machineUuidUnreadable",
            Code::MachineWithoutIdentity => "machineWithoutIdentity",
            Code::TrustFileUnusable => "trustFileUnusable",
            Code::SchemaMissing => "schemaMissing",
            Code::SchemaUnreadable => "schemaUnreadable",
            Code::SchemaInvalid => "schemaInvalid",
            Code::UnknownSchemaId => "unknownSchemaId",
            Code::SchemaTooComplex => "schemaTooComplex",
            Code::AllowedTargetsUnusable => "allowedTargetsUnusable",
            Code::RecipeNotExpected => "recipeNotExpected",
            Code::ExpectedRecipeMalformed => "expectedRecipeMalformed",
        }
    }
}

impl Code {
    /// The codes of the dispatcher's own rules (strict reading, safety rules, host checks,
    /// lints): every code but the schema's keywords and the media's refusals.
    pub const RULES: [Code; 26] = [
        Code::Syntax,
        Code::MaxBytes,
        Code::MaxValues,
        Code::DuplicateKey,
        Code::TooManyErrors,
        Code::UnsafePath,
        Code::ForbiddenTarget,
        Code::InvalidUnitName,
        Code::UnsafeEnvValue,
        Code::SizeRange,
        Code::DiskNotFound,
        Code::NotBlockDevice,
        Code::SystemDisk,
        Code::MediaDisk,
        Code::DiskInUse,
        Code::DiskIdentityMismatch,
        Code::DiskAmbiguous,
        Code::DiskChanged,
        Code::UnitNotFound,
        Code::SystemdUnavailable,
        Code::MissingEfiPartition,
        Code::MissingLinuxRoot,
        Code::MissingMsrPartition,
        Code::MissingWindowsDataPartition,
        Code::PercentNotLast,
        Code::DuplicateLabel,
    ];

    /// The codes of the media's refusals, each the cause of one.
    pub const MEDIA: [Code; 18] = [
        Code::SignatureMissing,
        Code::NotASignature,
        Code::UnknownKey,
        Code::BadSignature,
        Code::WrongNamespace,
        Code::NamespaceNotAllowed,
        Code::BoundToOtherMachine,
        Code::MachineUuidUnreadable,
        Code::MachineWithoutIdentity,
        Code::TrustFileUnusable,
        Code::SchemaMissing,
        Code::SchemaUnreadable,
        Code::SchemaInvalid,
        Code::UnknownSchemaId,
        Code::SchemaTooComplex,
        Code::AllowedTargetsUnusable,
        Code::RecipeNotExpected,
        Code::ExpectedRecipeMalformed,
    ];

    /// The refusal of the media a detail's code names, if it names one.
    pub fn media(name: &str) -> Option<Code> {
        Code::MEDIA.into_iter().find(|code| code.name() == name)
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One finding about one value of the recipe.
///
/// `message` is built from the schema's and the rule's own words, never from the recipe's
/// values: it reaches stdout, the journal and status.json, and `user_data` may hold secrets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issue {
    /// RFC 6901 pointer to the offending value; for a missing or unexpected property, the
    /// property itself.
    pub path: String,
    pub code: Code,
    pub message: String,
    pub severity: Severity,
}

impl Issue {
    pub fn error(path: impl Into<String>, code: Code, message: impl Into<String>) -> Issue {
        Issue { path: path.into(), code, message: message.into(), severity: Severity::Error }
    }

    pub fn warning(path: impl Into<String>, code: Code, message: impl Into<String>) -> Issue {
        Issue { path: path.into(), code, message: message.into(), severity: Severity::Warning }
    }

    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

/// What the checks found, in report order.
#[derive(Debug, Default)]
pub struct Findings {
    pub issues: Vec<Issue>,
}

impl Findings {
    pub fn errors(&self) -> impl Iterator<Item = &Issue> {
        self.issues.iter().filter(|i| i.is_error())
    }

    pub fn warnings(&self) -> impl Iterator<Item = &Issue> {
        self.issues.iter().filter(|i| !i.is_error())
    }

    pub fn has_errors(&self) -> bool {
        self.errors().next().is_some()
    }

    /// Whether an error was found at `path` (a later check leaves such a value alone).
    pub fn refused(&self, path: &str) -> bool {
        self.errors().any(|i| i.path == path)
    }
}

/// A 1-based line and a 1-based column counted in bytes, as serde_json reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Position {
    pub line: usize,
    pub column: usize,
}

impl Position {
    pub const START: Position = Position { line: 1, column: 1 };
}

/// An issue placed in the recipe file, as reports carry it (and status.json keeps it).
///
/// A refusal of the media is about a file as a whole, not a value of the recipe: it names
/// that file in `file` (`recipe.json.sig`, `recipe.schema.json`, the image's trust file),
/// with the empty pointer and line 1, column 1, as a recipe too large to read is placed.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Detail {
    pub path: String,
    pub code: String,
    pub message: String,
    pub line: usize,
    pub column: usize,
    /// The file the detail is about, when it is not the recipe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// For `unknownSchemaId`: the `$id`s this dispatcher knows (its own values).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub known: Vec<String>,
}

impl Detail {
    /// The detail of `issue`, its path at most [`MAX_PATH_BYTES`] long ([`shorten`]).
    pub fn new(issue: Issue, position: Position) -> Detail {
        Detail {
            path: shortened(issue.path, MAX_PATH_BYTES),
            code: issue.code.name().to_owned(),
            message: issue.message,
            line: position.line,
            column: position.column,
            ..Detail::default()
        }
    }

    /// A refusal of the media, about `file` as a whole (see [`Detail`]).
    pub fn of_file(file: impl Into<String>, code: Code, message: impl Into<String>) -> Detail {
        let start = Position::START;
        let file = Some(file.into());
        Detail {
            code: code.name().to_owned(),
            message: message.into(),
            line: start.line,
            column: start.column,
            file,
            ..Detail::default()
        }
    }

    /// The one line every human-facing report prints for a detail (the `check` report, the
    /// console banner, the journal): `FILE:LINE:COL: PATH: message [code]` (FILE the detail's
    /// own `file` when it has one), with `warning: `
    /// before the message of a warning. Every part goes through [`printable`], the file name
    /// too: it is the operator's argument, and a name may hold a newline or an escape sequence.
    pub fn line(&self, file: &str, severity: Severity) -> String {
        let file = self.file.as_deref().unwrap_or(file);
        let warning = if severity == Severity::Warning { "warning: " } else { "" };
        let (file, path, message) = (printable(file), display_path(&self.path), printable(&self.message));
        format!("{file}:{}:{}: {path}: {warning}{message} [{}]", self.line, self.column, printable(&self.code))
    }
}

/// A detail's path as people read it: `(root)` for the whole recipe, otherwise the pointer
/// through [`printable`]. Paths name the recipe's keys, and a key may hold any character.
pub fn display_path(path: &str) -> Cow<'_, str> {
    if path.is_empty() {
        Cow::Borrowed("(root)")
    } else {
        printable(path)
    }
}

/// Whether `c` may not be printed as it is: a control character (C0, DEL, C1), a line or
/// paragraph separator (U+2028, U+2029, which some terminals and viewers break lines at), or
/// a bidirectional or other invisible format control (U+202E turns the rest of a line around,
/// so that a label reads as something it is not).
pub fn unprintable(c: char) -> bool {
    c.is_control()
        || matches!(c,
            '\u{00ad}' | '\u{061c}' | '\u{180e}' | '\u{200b}'..='\u{200f}' | '\u{2028}'..='\u{202e}'
            | '\u{2060}'..='\u{206f}' | '\u{feff}' | '\u{fff9}'..='\u{fffb}')
}

/// `text` with each [`unprintable`] character shown as a `\uXXXX` escape. What the human
/// formats print must stay on its line and read as what it is: a newline in a key would forge
/// report lines, an escape sequence would drive the console the failure banner is printed on,
/// a right-to-left override would turn a line around.
pub fn printable(text: &str) -> Cow<'_, str> {
    if !text.chars().any(unprintable) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if unprintable(c) {
            let _ = write!(out, "\\u{:04x}", u32::from(c));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// The most bytes of a detail's path in every report, counted as the result line writes it
/// ([`ascii_json_len`]; as UTF-8 it is no longer), so that one bound holds everywhere and
/// the line never cuts a path again. A pointer names keys, and one key may be 1 MiB long:
/// repeated in every detail beneath it, it made a status of 16 MiB and ran `check` out of
/// memory. Far longer than any path a real recipe has (`/partition_layout/63/type_guid` is 30).
pub const MAX_PATH_BYTES: usize = 256;

/// `text` in at most `max` bytes as `cost` counts them (such as [`ascii_json_len`]), or as it
/// is when it fits: when it does not, its middle is left out and a visible
/// marker, `…(N bytes cut)…`, says how many bytes of `text` are missing. The head and the
/// tail are kept in equal shares: the first keys of a pointer say where it starts, the last
/// ones what it names.
pub fn shorten(text: &str, max: usize, cost: impl Fn(char) -> usize) -> Cow<'_, str> {
    // Counted no further than `max`: a text of 1 MiB costs no more than a short one.
    let mut spent = 0;
    if text.chars().all(|c| {
        spent += cost(c);
        spent <= max
    }) {
        return Cow::Borrowed(text);
    }
    // The marker is written with the most digits the count can have, so the sum holds.
    let marker = |cut: usize| format!("…({cut} bytes cut)…");
    let room = max.saturating_sub(marker(text.len()).chars().map(&cost).sum());
    let mut head_end = 0;
    let mut spent = 0;
    for (at, c) in text.char_indices() {
        if spent + cost(c) > room / 2 {
            break;
        }
        spent += cost(c);
        head_end = at + c.len_utf8();
    }
    let mut tail_start = text.len();
    for (at, c) in text[head_end..].char_indices().rev() {
        if spent + cost(c) > room {
            break;
        }
        spent += cost(c);
        tail_start = head_end + at;
    }
    let (head, tail) = (&text[..head_end], &text[tail_start..]);
    Cow::Owned(format!("{head}{}{tail}", marker(tail_start - head_end)))
}

/// The bytes a character of a string takes in JSON written in printable ASCII only (the
/// result line's form, `report::result`): `\"`, `\\` and the short escapes two, every other
/// character outside printable ASCII a `\uXXXX` escape (two beyond U+FFFF). Never less than
/// its UTF-8 length, nor than what serde_json's own output takes.
pub fn ascii_json_len(c: char) -> usize {
    match c {
        '"' | '\\' | '\u{8}' | '\u{c}' | '\n' | '\r' | '\t' => 2,
        ' '..='~' => 1,
        _ => 6 * c.len_utf16(),
    }
}

/// `text` in at most `max` bytes as [`ascii_json_len`] counts them ([`shorten`]), without a
/// copy when it fits.
pub fn shortened(text: String, max: usize) -> String {
    match shorten(&text, max, ascii_json_len) {
        Cow::Borrowed(_) => text,
        Cow::Owned(short) => short,
    }
}

/// `value` as compact JSON in printable ASCII (`report::result::ResultLine::json` says why).
pub fn ascii_json(value: &impl Serialize) -> String {
    let mut out = Vec::new();
    let mut serializer = serde_json::Serializer::with_formatter(&mut out, Ascii);
    value.serialize(&mut serializer).expect("what the dispatcher prints serializes");
    String::from_utf8(out).expect("ASCII is UTF-8")
}

/// serde_json's compact format, with every character of a string outside printable ASCII
/// escaped (serde_json itself escapes only `"`, `\` and U+0000 to U+001F).
struct Ascii;

impl serde_json::ser::Formatter for Ascii {
    fn write_string_fragment<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        fragment: &str,
    ) -> std::io::Result<()> {
        let mut rest = fragment;
        while let Some(at) = rest.find(|c: char| !matches!(c, ' '..='~')) {
            writer.write_all(&rest.as_bytes()[..at])?;
            let c = rest[at..].chars().next().expect("found there");
            for unit in c.encode_utf16(&mut [0; 2]) {
                write!(writer, "\\u{unit:04x}")?;
            }
            rest = &rest[at + c.len_utf8()..];
        }
        writer.write_all(rest.as_bytes())
    }
}

/// `bytes` as lower-case hexadecimal digits (a SHA-256 digest as sha256sum prints it).
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keyword_codes_are_the_keywords_and_unknown_ones_say_schema() {
        assert_eq!(Code::keyword("required"), Code::Keyword("required"));
        assert_eq!(Code::keyword("type").name(), "type");
        assert_eq!(Code::keyword("x-unheard-of").name(), "schema");
    }

    #[test]
    fn a_detail_prints_as_one_line() {
        let issue = Issue::error("/a\nb", Code::UnsafePath, "must be\u{1b}[2J clean");
        let detail = Detail::new(issue, Position { line: 3, column: 7 });
        assert_eq!(
            detail.line("recipe.json", Severity::Error),
            "recipe.json:3:7: /a\\u000ab: must be\\u001b[2J clean [unsafePath]"
        );
        let root = Detail::new(Issue::warning("", Code::PercentNotLast, "w"), Position::START);
        assert_eq!(root.line("f", Severity::Warning), "f:1:1: (root): warning: w [percentNotLast]");
        // Issue 31, finding 12: the file name was printed raw.
        assert_eq!(
            root.line("a\nf:9:9: forged\u{1b}[2J", Severity::Warning),
            "a\\u000af:9:9: forged\\u001b[2J:1:1: (root): warning: w [percentNotLast]"
        );
    }

    #[test]
    fn a_refusal_of_the_media_is_placed_in_its_own_file() {
        let detail = Detail::of_file("recipe.json.sig", Code::SignatureMissing, "is missing");
        assert_eq!((detail.path.as_str(), detail.line, detail.column), ("", 1, 1));
        assert_eq!(
            detail.line("recipe.json", Severity::Error),
            "recipe.json.sig:1:1: (root): is missing [signatureMissing]"
        );
        for code in Code::MEDIA {
            assert_eq!(Code::media(code.name()), Some(code));
        }
        assert_eq!(Code::media("pattern"), None);
    }

    #[test]
    fn separators_and_bidi_controls_are_escaped() {
        assert_eq!(
            printable("a\u{202e}b\u{2028}c\u{2029}d\u{2066}e\u{200f}"),
            "a\\u202eb\\u2028c\\u2029d\\u2066e\\u200f"
        );
        assert!(matches!(printable("מַעֲרֶכֶת ✓ ü"), Cow::Borrowed(_)), "right-to-left text itself is fine");
    }

    #[test]
    fn long_text_is_shortened_in_the_middle_with_a_marker() {
        let utf8_len = char::len_utf8;
        assert!(matches!(shorten("/a/b", 4, utf8_len), Cow::Borrowed("/a/b")));
        let long = format!("/{}/size", "k".repeat(70_000));
        let short = shorten(&long, MAX_PATH_BYTES, utf8_len);
        assert!(short.len() <= MAX_PATH_BYTES, "{}", short.len());
        assert!(short.starts_with("/kkk") && short.ends_with("kkk/size"), "{short}");
        let cut = long.len() - (short.len() - "…(70006 bytes cut)…".len());
        assert!(short.contains(&format!("…({cut} bytes cut)…")), "{short}");
        // Never inside a character, whatever the budget.
        let wide = "é✓😀".repeat(500);
        for max in 0..120 {
            let short = shorten(&wide, max, utf8_len);
            assert!(short.len() <= max.max("…(6000 bytes cut)…".len()), "{max}: {short}");
        }
        assert!(shorten(&long, MAX_PATH_BYTES, |_| 6).chars().count() * 6 <= MAX_PATH_BYTES);
        let wide = shortened(format!("/{}", "設\u{1}😀".repeat(1000)), MAX_PATH_BYTES);
        assert!(wide.chars().map(ascii_json_len).sum::<usize>() <= MAX_PATH_BYTES, "{wide}");
    }

    #[test]
    fn printable_text_is_left_as_it_is() {
        assert!(matches!(printable("/partition_layout/0/label ü ✓"), Cow::Borrowed(_)));
        assert_eq!(printable("a\tb\u{7f}\u{85}"), "a\\u0009b\\u007f\\u0085");
    }

    #[test]
    fn ascii_json_len_is_what_the_line_takes() {
        let chars = (0..0x3000).chain(0x1f600..0x1f610).filter_map(char::from_u32);
        for c in chars {
            let mut out = Vec::new();
            c.to_string().serialize(&mut serde_json::Serializer::with_formatter(&mut out, Ascii)).unwrap();
            assert_eq!(out.len() - 2, ascii_json_len(c), "{c:?}");
        }
    }
}
