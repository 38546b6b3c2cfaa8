//! The typed view of a recipe that every rule reads and the outputs are built from.
//!
//! [`Recipe::view`] reads the fields the dispatcher consumes, once and leniently: a field of
//! another shape than the dispatcher reads is left out of the view and recorded as a
//! mismatch, which [`contract`] reports in the canonical schema's words (the runner drops it
//! when the schema already said the same). Whatever schema the ISO carries, the dispatcher
//! needs these shapes; no rule walks raw JSON. Once every check passed, [`Valid::new`] makes
//! the view into what the outputs need, each field certain.

use serde_json::{Map, Value};

use super::{child, Document, EDITOR_HINT};
use crate::issues::{Code, Findings, Issue};

/// The view of one recipe.
#[derive(Debug)]
pub struct Recipe<'d> {
    doc: &'d Document,
    pub task_target: Option<&'d str>,
    pub target_disk: Option<&'d str>,
    pub oci_url: Option<&'d str>,
    pub firmware_url: Option<&'d str>,
    pub recipe_version: Option<&'d str>,
    pub user_data: Option<&'d str>,
    pub unattend_xml: Option<&'d str>,
    pub ks_cfg: Option<&'d str>,
    /// The top-level `$schema` editor hint, of whatever type.
    pub editor_hint: Option<&'d Value>,
    /// `None` when the recipe has no layout (or one that is not an array).
    pub partitions: Option<Vec<Partition<'d>>>,
    pub metadata: Option<&'d Map<String, Value>>,
    /// `target_disk_hints` (schema v2; acted on whatever the schema's version).
    pub target_disk_hints: Option<Hints<'d>>,
    mismatches: Vec<Issue>,
}

/// `target_disk_hints`: what the disk `target_disk` names must be (SPEC §4a). Each given in a
/// form the dispatcher can compare; one it cannot is a mismatch, and the hints are then not
/// acted on (the recipe is invalid anyway).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Hints<'d> {
    /// Hexadecimal digits, lower-cased, without `0x`.
    pub wwn: Option<String>,
    pub serial: Option<&'d str>,
    pub model: Option<&'d str>,
    pub size_min: Option<u64>,
    pub size_max: Option<u64>,
    pub rotational: Option<bool>,
}

/// The hint keys, in the order their checks run and report.
pub const HINT_KEYS: [&str; 6] = ["wwn", "serial", "model", "size_min", "size_max", "rotational"];

/// v2's grammar of a WWN hint.
pub const WWN_PATTERN: &str = "^(0[xX])?([0-9a-fA-F]{16}|[0-9a-fA-F]{32})$";

/// v2's grammar of a size hint: a partition size without `%`.
pub const HINT_SIZE_PATTERN: &str = "^(?:[1-9][0-9]*)(?:[KMGTP]B?|B)?$";

/// One item of `partition_layout`.
#[derive(Debug)]
pub struct Partition<'d> {
    /// The partition's object as the recipe gives it; `None` when the item is not an object.
    pub fields: Option<&'d Map<String, Value>>,
    pub size: Option<&'d str>,
    pub type_guid: Option<&'d str>,
    pub format: Option<&'d str>,
    pub label: Option<&'d str>,
}

/// The top-level string fields the dispatcher reads.
pub const STRING_FIELDS: [&str; 8] =
    ["task_target", "target_disk", "oci_url", "firmware_url", "recipe_version", "user_data", "unattend_xml", "ks_cfg"];

/// The partition fields the dispatcher reads; others are carried through unchanged.
const PARTITION_STRING_FIELDS: [&str; 4] = ["size", "type_guid", "format", "label"];

impl<'d> Recipe<'d> {
    /// Reads the view from a parsed recipe. Never fails: what does not fit is a mismatch.
    pub fn view(doc: &'d Document) -> Recipe<'d> {
        let mut mismatches = Vec::new();
        let empty = Recipe {
            doc,
            task_target: None,
            target_disk: None,
            oci_url: None,
            firmware_url: None,
            recipe_version: None,
            user_data: None,
            unattend_xml: None,
            ks_cfg: None,
            editor_hint: None,
            partitions: None,
            metadata: None,
            target_disk_hints: None,
            mismatches: Vec::new(),
        };
        let Some(map) = doc.value().as_object() else {
            mismatches.push(Issue::error("", Code::Keyword("type"), "must be an object"));
            return Recipe { mismatches, ..empty };
        };
        if !map.contains_key("task_target") {
            mismatches.push(Issue::error("/task_target", Code::Keyword("required"), "is required"));
        }
        let mut string = |name: &str| strings(map, "", name, &mut mismatches);
        let [task_target, target_disk, oci_url, firmware_url, recipe_version, user_data, unattend_xml, ks_cfg] =
            STRING_FIELDS.map(&mut string);
        let metadata = match map.get("metadata") {
            Some(Value::Object(metadata)) => Some(metadata),
            Some(_) => {
                mismatches.push(Issue::error("/metadata", Code::Keyword("type"), "must be an object"));
                None
            }
            None => None,
        };
        let partitions = match map.get("partition_layout") {
            Some(Value::Array(items)) => {
                Some(items.iter().enumerate().map(|(i, item)| Partition::view(i, item, &mut mismatches)).collect())
            }
            Some(_) => {
                mismatches.push(Issue::error("/partition_layout", Code::Keyword("type"), "must be an array"));
                None
            }
            None => None,
        };
        let target_disk_hints = map.get("target_disk_hints").and_then(|hints| Hints::view(hints, &mut mismatches));
        if map.contains_key("target_disk_hints") && !map.contains_key("target_disk") {
            // Hints confirm the disk target_disk names; without it they name nothing.
            mismatches.push(Issue::error("/target_disk", Code::Keyword("required"), "is required"));
        }
        Recipe {
            task_target,
            target_disk,
            target_disk_hints,
            oci_url,
            firmware_url,
            recipe_version,
            user_data,
            unattend_xml,
            ks_cfg,
            editor_hint: map.get(EDITOR_HINT),
            partitions,
            metadata,
            mismatches,
            ..empty
        }
    }

    /// The recipe as parsed (for the schema, which validates the whole of it).
    pub fn doc(&self) -> &'d Document {
        self.doc
    }

    /// A top-level string field by name ([`STRING_FIELDS`]).
    pub fn string(&self, name: &str) -> Option<&'d str> {
        match name {
            "task_target" => self.task_target,
            "target_disk" => self.target_disk,
            "oci_url" => self.oci_url,
            "firmware_url" => self.firmware_url,
            "recipe_version" => self.recipe_version,
            "user_data" => self.user_data,
            "unattend_xml" => self.unattend_xml,
            "ks_cfg" => self.ks_cfg,
            _ => None,
        }
    }
}

impl<'d> Hints<'d> {
    fn view(value: &'d Value, mismatches: &mut Vec<Issue>) -> Option<Hints<'d>> {
        const AT: &str = "/target_disk_hints";
        let Some(map) = value.as_object() else {
            mismatches.push(Issue::error(AT, Code::Keyword("type"), "must be an object"));
            return None;
        };
        if map.is_empty() {
            mismatches.push(Issue::error(AT, Code::Keyword("minProperties"), "must have at least 1 property"));
            return None;
        }
        let mut found = Vec::new();
        let mut error = |key: &str, code: &'static str, message: String| {
            found.push(Issue::error(child(AT, key), Code::Keyword(code), message));
        };
        let mut hints = Hints::default();
        for (key, value) in map {
            match (key.as_str(), value) {
                ("wwn", Value::String(text)) => {
                    match text.strip_prefix("0x").or(text.strip_prefix("0X")).unwrap_or(text) {
                        hex if matches!(hex.len(), 16 | 32) && hex.bytes().all(|b| b.is_ascii_hexdigit()) => {
                            hints.wwn = Some(hex.to_ascii_lowercase())
                        }
                        _ => error(key, "pattern", format!("must match pattern {WWN_PATTERN}")),
                    }
                }
                ("serial", Value::String(text)) => hints.serial = Some(text),
                ("model", Value::String(text)) => hints.model = Some(text),
                ("size_min" | "size_max", Value::String(text)) => match Size::parse(text) {
                    Ok(Size::Bytes(bytes)) if key == "size_min" => hints.size_min = Some(bytes),
                    Ok(Size::Bytes(bytes)) => hints.size_max = Some(bytes),
                    Err(SizeError::TooLarge) => {
                        error(key, "maximum", format!("must be at most {MAX_SIZE_BYTES} bytes (8 PiB less one byte)"))
                    }
                    _ => error(key, "pattern", format!("must match pattern {HINT_SIZE_PATTERN}")),
                },
                ("rotational", Value::Bool(spinning)) => hints.rotational = Some(*spinning),
                ("rotational", _) => error(key, "type", "must be a boolean".into()),
                (key, _) if HINT_KEYS.contains(&key) => error(key, "type", "must be a string".into()),
                (key, _) => error(
                    key,
                    "additionalProperties",
                    "is not a property the schema allows (additionalProperties is false)".into(),
                ),
            }
        }
        let valid = found.is_empty();
        mismatches.extend(found);
        valid.then_some(hints)
    }
}

impl<'d> Partition<'d> {
    fn view(index: usize, item: &'d Value, mismatches: &mut Vec<Issue>) -> Partition<'d> {
        let at = format!("/partition_layout/{index}");
        let Some(fields) = item.as_object() else {
            mismatches.push(Issue::error(at, Code::Keyword("type"), "must be an object"));
            return Partition { fields: None, size: None, type_guid: None, format: None, label: None };
        };
        for name in ["size", "type_guid"] {
            if !fields.contains_key(name) {
                mismatches.push(Issue::error(child(&at, name), Code::Keyword("required"), "is required"));
            }
        }
        let [size, type_guid, format, label] =
            PARTITION_STRING_FIELDS.map(|name| strings(fields, &at, name, mismatches));
        if size.is_some_and(|size| Size::parse(size) == Err(SizeError::Grammar)) {
            let message = format!("must match pattern {SIZE_PATTERN}");
            mismatches.push(Issue::error(child(&at, "size"), Code::Keyword("pattern"), message));
        }
        if type_guid.is_some_and(|guid| canonical_type_guid(guid).is_none()) {
            mismatches.push(Issue::error(child(&at, "type_guid"), Code::Keyword("oneOf"), TYPE_GUID_MESSAGE));
        }
        Partition { fields: Some(fields), size, type_guid, format, label }
    }
}

/// The string field `name` of `map` (at `at`), recording a mismatch if it is another type.
fn strings<'d>(map: &'d Map<String, Value>, at: &str, name: &str, mismatches: &mut Vec<Issue>) -> Option<&'d str> {
    match map.get(name) {
        Some(Value::String(text)) => Some(text),
        Some(_) => {
            mismatches.push(Issue::error(child(at, name), Code::Keyword("type"), "must be a string"));
            None
        }
        None => None,
    }
}

/// The dispatcher's own needs, whatever the schema says: an object with a `task_target`
/// string; the fields it reads, when present, of the types it reads them as; partition sizes
/// and type GUIDs it can normalize. Codes and words are the canonical schema's, so that with
/// the canonical schema the runner drops these as repeats.
pub fn contract(recipe: &Recipe<'_>, issues: &mut Vec<Issue>) {
    issues.extend(recipe.mismatches.iter().cloned());
}

/// A recipe that passed every check, with what the outputs need made certain.
#[derive(Debug)]
pub struct Valid<'a> {
    pub recipe: &'a Recipe<'a>,
    pub task_target: &'a str,
    /// `None` when the recipe has no layout.
    pub partitions: Option<Vec<ValidPartition<'a>>>,
    /// The exact text of the `metadata` object, as it stands in the recipe.
    pub metadata: Option<&'a str>,
}

/// A partition whose size and type GUID parsed.
#[derive(Debug)]
pub struct ValidPartition<'a> {
    /// The partition's object as the recipe gives it.
    pub fields: &'a Map<String, Value>,
    pub size: Size,
    /// The upper-case, dashed GUID of its `type_guid`.
    pub type_guid: String,
}

impl<'a> Valid<'a> {
    /// The valid recipe, when `findings` hold no error. The contract makes sure that what the
    /// outputs need is there when there is no error; were it missing anyway, this is `None`
    /// too, never a panic.
    pub fn new(recipe: &'a Recipe<'a>, findings: &Findings) -> Option<Valid<'a>> {
        if findings.has_errors() {
            return None;
        }
        let partitions = match &recipe.partitions {
            None => None,
            Some(partitions) => Some(
                partitions
                    .iter()
                    .map(|p| {
                        Some(ValidPartition {
                            fields: p.fields?,
                            size: Size::parse(p.size?).ok()?,
                            type_guid: canonical_type_guid(p.type_guid?)?,
                        })
                    })
                    .collect::<Option<Vec<_>>>()?,
            ),
        };
        let metadata = match recipe.metadata {
            Some(_) => Some(recipe.doc.raw("/metadata")?),
            None => None,
        };
        Some(Valid { recipe, task_target: recipe.task_target?, partitions, metadata })
    }
}

/// A partition size as `layout.json` states it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Size {
    Bytes(u64),
    Percent(u8),
}

/// Why a size string is not a [`Size`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SizeError {
    /// Not the schema's size grammar.
    Grammar,
    /// The grammar, but more than [`MAX_SIZE_BYTES`].
    TooLarge,
}

/// The largest size in bytes written to `layout.json`: every JSON reader (jq included, which
/// uses doubles) reads integers up to 2^53 - 1 exactly, and that is 8 PiB.
pub const MAX_SIZE_BYTES: u64 = (1 << 53) - 1;

/// The canonical schema's size pattern, which the dispatcher needs whatever the ISO's schema.
pub const SIZE_PATTERN: &str = "^(?:[1-9][0-9]*)(?:[KMGTP]B?|B)?$|^[1-9][0-9]?%$|^100%$";

impl Size {
    /// Parses the schema's size grammar: digits with an optional K, M, G, T or P (powers of
    /// 1024) and an optional B, or plain bytes with B; or 1 to 100 followed by `%`.
    pub fn parse(text: &str) -> Result<Size, SizeError> {
        if let Some(number) = text.strip_suffix('%') {
            let percent = parse_digits(number).ok_or(SizeError::Grammar)?;
            return match percent {
                1..=100 => Ok(Size::Percent(percent as u8)),
                _ => Err(SizeError::Grammar),
            };
        }
        let unitless = text.strip_suffix('B').unwrap_or(text);
        let (digits, shift) = match unitless.as_bytes().last() {
            Some(b'K') => (&unitless[..unitless.len() - 1], 10),
            Some(b'M') => (&unitless[..unitless.len() - 1], 20),
            Some(b'G') => (&unitless[..unitless.len() - 1], 30),
            Some(b'T') => (&unitless[..unitless.len() - 1], 40),
            Some(b'P') => (&unitless[..unitless.len() - 1], 50),
            _ => (unitless, 0),
        };
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) || digits.starts_with('0') {
            return Err(SizeError::Grammar);
        }
        let bytes = parse_digits(digits).and_then(|n| n.checked_mul(1u64 << shift));
        match bytes {
            Some(bytes) if bytes <= MAX_SIZE_BYTES => Ok(Size::Bytes(bytes)),
            _ => Err(SizeError::TooLarge),
        }
    }
}

/// A decimal number without sign or leading zero; `None` also when it overflows.
fn parse_digits(digits: &str) -> Option<u64> {
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) || digits.starts_with('0') {
        return None;
    }
    digits.parse().ok()
}

/// sgdisk's type code aliases that the schema allows, with the GPT type GUIDs they stand for
/// (gptfdisk `parttypes.cc`).
pub const TYPE_ALIASES: [(&str, &str); 7] = [
    ("ef00", "C12A7328-F81F-11D2-BA4B-00A0C93EC93B"), // EFI system partition
    ("8300", "0FC63DAF-8483-4772-8E79-3D69D8477DE4"), // Linux filesystem
    ("8200", "0657FD6D-A4AB-43C4-84E5-0933C84B4F4F"), // Linux swap
    ("0700", "EBD0A0A2-B9E5-4433-87C0-68B6B72699C7"), // Microsoft basic data
    ("0c01", "E3C9E316-0B5C-4DB8-817D-F92DF00215AE"), // Microsoft reserved (MSR)
    ("fc00", "9D275380-40AD-11DB-BF97-000C2911D1B8"), // VMware kcore crash protection
    ("fd00", "A19D880F-05FC-4D3B-A006-743F0F84911E"), // Linux RAID
];

/// The canonical schema's `type_guid` alternatives, which the dispatcher needs whatever the
/// ISO's schema: an sgdisk alias in any case, or a GUID whose four dashes are each optional.
pub const TYPE_GUID_MESSAGE: &str = "must match exactly one of pattern ^(?i)(ef00|8300|8200|0700|0c01|fc00|fd00)$ \
     or pattern ^[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}$";

/// The canonical form of a `type_guid`: the upper-case, dashed GUID for an sgdisk alias or for
/// a full GUID. `None` for anything the canonical schema refuses.
pub fn canonical_type_guid(type_guid: &str) -> Option<String> {
    if let Some((_, guid)) = TYPE_ALIASES.iter().find(|(alias, _)| alias.eq_ignore_ascii_case(type_guid)) {
        return Some((*guid).to_owned());
    }
    let mut rest = type_guid;
    let mut groups = Vec::with_capacity(5);
    for (i, len) in [8, 4, 4, 4, 12].into_iter().enumerate() {
        if i > 0 {
            rest = rest.strip_prefix('-').unwrap_or(rest);
        }
        let group = rest.get(..len).filter(|g| g.bytes().all(|b| b.is_ascii_hexdigit()))?;
        groups.push(group.to_ascii_uppercase());
        rest = &rest[len..];
    }
    rest.is_empty().then(|| groups.join("-"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recipe::parse;

    #[test]
    fn sizes_follow_powers_of_1024() {
        assert_eq!(Size::parse("512M"), Ok(Size::Bytes(512 << 20)));
        assert_eq!(Size::parse("512MB"), Ok(Size::Bytes(512 << 20)));
        assert_eq!(Size::parse("1G"), Ok(Size::Bytes(1 << 30)));
        assert_eq!(Size::parse("3T"), Ok(Size::Bytes(3 << 40)));
        assert_eq!(Size::parse("7P"), Ok(Size::Bytes(7 << 50)));
        assert_eq!(Size::parse("4096"), Ok(Size::Bytes(4096)));
        assert_eq!(Size::parse("4096B"), Ok(Size::Bytes(4096)));
        assert_eq!(Size::parse("100%"), Ok(Size::Percent(100)));
        assert_eq!(Size::parse("5%"), Ok(Size::Percent(5)));
    }

    #[test]
    fn sizes_outside_the_grammar_or_range_are_refused() {
        for bad in ["", "0", "0%", "101%", "-1G", "1Z", "1BB", "1KK", "M", "01G", "1.5G", "%", "B"] {
            assert_eq!(Size::parse(bad), Err(SizeError::Grammar), "{bad}");
        }
        for big in ["8P", "8192T", "99999999999999999999", "9007199254740992"] {
            assert_eq!(Size::parse(big), Err(SizeError::TooLarge), "{big}");
        }
        assert_eq!(Size::parse("9007199254740991"), Ok(Size::Bytes(MAX_SIZE_BYTES)));
    }

    #[test]
    fn size_grammar_is_the_schema_pattern() {
        let pattern = regex::Regex::new(SIZE_PATTERN).unwrap();
        for text in ["1", "512M", "512MB", "1B", "100%", "99%", "1%", "0", "0%", "100B%", "1Z", "101%", "007", "1KB"] {
            assert_eq!(pattern.is_match(text), Size::parse(text).is_ok(), "{text}");
        }
    }

    #[test]
    fn type_guids_canonicalise() {
        assert_eq!(canonical_type_guid("EF00").as_deref(), Some("C12A7328-F81F-11D2-BA4B-00A0C93EC93B"));
        assert_eq!(
            canonical_type_guid("c12a7328f81f11d2ba4b00a0c93ec93b").as_deref(),
            Some("C12A7328-F81F-11D2-BA4B-00A0C93EC93B")
        );
        assert_eq!(
            canonical_type_guid("c12a7328-f81f11d2-ba4b00a0c93ec93b").as_deref(),
            Some("C12A7328-F81F-11D2-BA4B-00A0C93EC93B")
        );
        assert_eq!(canonical_type_guid("abcd"), None);
        assert_eq!(canonical_type_guid("c12a7328--f81f-11d2-ba4b-00a0c93ec93b"), None);
    }

    #[test]
    fn type_guid_grammar_is_the_schema_one_of() {
        let alias = regex::Regex::new("^(?i)(ef00|8300|8200|0700|0c01|fc00|fd00)$").unwrap();
        let guid =
            regex::Regex::new("^[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}$")
                .unwrap();
        for text in [
            "ef00",
            "EF00",
            "0C01",
            "abcd",
            "8301",
            "c12a7328-f81f-11d2-ba4b-00a0c93ec93b",
            "c12a7328f81f11d2ba4b00a0c93ec93b",
            "c12a7328-f81f-11d2-ba4b-00a0c93ec93",
            "g12a7328-f81f-11d2-ba4b-00a0c93ec93b",
            "c12a7328-f81f-11d2-ba4b-00a0c93ec93b-",
            "-c12a7328f81f11d2ba4b00a0c93ec93b",
            "",
        ] {
            let schema_ok = alias.is_match(text) != guid.is_match(text);
            assert_eq!(schema_ok, canonical_type_guid(text).is_some(), "{text}");
        }
    }

    #[test]
    fn contract_names_each_field_it_needs() {
        let doc =
            parse(br#"{"target_disk": 5, "partition_layout": [{"size": "1G"}, 3], "metadata": []}"#.to_vec()).unwrap();
        let mut issues = Vec::new();
        contract(&Recipe::view(&doc), &mut issues);
        let paths: Vec<_> = issues.iter().map(|i| (i.path.as_str(), i.code.name())).collect();
        assert_eq!(
            paths,
            [
                ("/task_target", "required"),
                ("/target_disk", "type"),
                ("/metadata", "type"),
                ("/partition_layout/0/type_guid", "required"),
                ("/partition_layout/1", "type"),
            ]
        );
    }

    #[test]
    fn hints_are_read_in_the_forms_they_are_compared_in() {
        let doc = parse(
            br#"{"task_target": "t.target", "target_disk": "/dev/sdb", "target_disk_hints": {"wwn": "0X5000C50015EA71AD",
                "serial": " S1 ", "model": "M", "size_min": "900M", "size_max": "1G", "rotational": false}}"#
                .to_vec(),
        )
        .unwrap();
        let hints = Recipe::view(&doc).target_disk_hints.unwrap();
        assert_eq!(hints.wwn.as_deref(), Some("5000c50015ea71ad"));
        assert_eq!((hints.serial, hints.model), (Some(" S1 "), Some("M")));
        assert_eq!((hints.size_min, hints.size_max, hints.rotational), (Some(900 << 20), Some(1 << 30), Some(false)));
        let doc = parse(
            br#"{"task_target": "t.target", "target_disk_hints": {"wwn": "5000", "size_max": "10%", "rotational": "no",
                "serial": 1, "colour": "red"}}"#
                .to_vec(),
        )
        .unwrap();
        let recipe = Recipe::view(&doc);
        assert_eq!(recipe.target_disk_hints, None, "hints that cannot be compared are not acted on");
        let mut issues = Vec::new();
        contract(&recipe, &mut issues);
        let mut found: Vec<_> = issues.iter().map(|i| (i.path.as_str(), i.code.name())).collect();
        found.sort();
        assert_eq!(
            found,
            [
                ("/target_disk", "required"),
                ("/target_disk_hints/colour", "additionalProperties"),
                ("/target_disk_hints/rotational", "type"),
                ("/target_disk_hints/serial", "type"),
                ("/target_disk_hints/size_max", "pattern"),
                ("/target_disk_hints/wwn", "pattern"),
            ]
        );
        let empty =
            parse(br#"{"task_target": "t.target", "target_disk": "/dev/sdb", "target_disk_hints": {}}"#.to_vec())
                .unwrap();
        let mut issues = Vec::new();
        contract(&Recipe::view(&empty), &mut issues);
        assert_eq!(issues.iter().map(|i| i.code.name()).collect::<Vec<_>>(), ["minProperties"]);
    }

    #[test]
    fn the_view_borrows_the_recipe_and_the_valid_form_certifies_it() {
        let doc = parse(
            br#"{"task_target": "t.target", "partition_layout": [{"size": "1G", "type_guid": "8300", "x": 1}],
                "metadata": {"b": 1.0, "a": [1e2]}}"#
                .to_vec(),
        )
        .unwrap();
        let recipe = Recipe::view(&doc);
        assert_eq!(recipe.task_target, Some("t.target"));
        let valid = Valid::new(&recipe, &Findings::default()).unwrap();
        let partitions = valid.partitions.unwrap();
        assert_eq!(partitions[0].size, Size::Bytes(1 << 30));
        assert_eq!(partitions[0].type_guid, "0FC63DAF-8483-4772-8E79-3D69D8477DE4");
        assert_eq!(partitions[0].fields.len(), 3);
        // Metadata is the recipe's own text: key order and number spelling survive.
        assert_eq!(valid.metadata, Some(r#"{"b": 1.0, "a": [1e2]}"#));
    }

    #[test]
    fn no_valid_form_with_errors_or_without_a_target() {
        let doc = parse(br#"{"partition_layout": [{"size": "1G", "type_guid": "8300"}]}"#.to_vec()).unwrap();
        let recipe = Recipe::view(&doc);
        assert!(Valid::new(&recipe, &Findings::default()).is_none(), "no task_target");
        let doc = parse(br#"{"task_target": "t.target"}"#.to_vec()).unwrap();
        let recipe = Recipe::view(&doc);
        let findings = Findings { issues: vec![Issue::error("/x", Code::UnsafePath, "no")] };
        assert!(Valid::new(&recipe, &findings).is_none(), "an error");
    }
}
