//! The recipe schema, compiled as the controller compiles it: JSON Schema draft-07, `format`
//! asserted, and `pattern` with RE2 semantics (inline flags such as the seed's `(?i)` work,
//! and matching is linear-time, so no pattern can backtrack catastrophically).
//!
//! jsonschema checks every schema against the draft-07 meta-schema, whose `format: regex`
//! demands ECMA-262 and so refuses `(?i)`. Before building, each `pattern` in a schema
//! position is therefore moved to the `RE2_PATTERN` keyword, which this module implements
//! with the `regex` crate; errors are reported under the keyword `pattern` all the same.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use jsonschema::error::{TypeKind, ValidationErrorKind};
use jsonschema::{Draft, Keyword, PatternOptions, ValidationError, Validator};
use regex::{Regex, RegexBuilder};
use serde_json::{Map, Value};

use crate::bounded::{self, Budget, Overrun};
use crate::issues::{Code, Detail, Issue};
use crate::recipe::read::{parse_value, ReadError};
use crate::recipe::{child, Document, EDITOR_HINT};

mod guards;
mod later;

pub use guards::MAX_SCHEMA_DEPTH;
pub use later::{name_later_versions, Ask};

/// The canonical schema (`iso/recipe.schema.json`, version 1), compiled into the binary.
pub const CANONICAL_TEXT: &str = include_str!("../../iso/recipe.schema.json");

/// A version of the recipe schema this dispatcher knows, compiled in (SPEC §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Version {
    pub number: u32,
    pub id: &'static str,
    pub text: &'static str,
}

/// Every version this dispatcher knows, oldest first. Seed 002's compatibility policy: a
/// field the dispatcher must act on comes with a new `$id` (so that an image that does not
/// know it refuses the media instead of ignoring the field); a field it need not act on may
/// be added under the same `$id`, and reaches the target through `recipe.json`.
pub const VERSIONS: [Version; 2] = [
    Version { number: 1, id: "https://shoal.dev/provisioner/recipe.schema.json", text: CANONICAL_TEXT },
    // Version 1 and the target disk's identity (SPEC §4a): by-id and by-path names, hints.
    Version {
        number: 2,
        id: "https://shoal.dev/provisioner/v2/recipe.schema.json",
        text: include_str!("../../iso/recipe.schema.v2.json"),
    },
];

/// The `$id`s this dispatcher knows. Another one is refused unless the image opts in.
pub const KNOWN_IDS: [&str; 2] = [VERSIONS[0].id, VERSIONS[1].id];

/// The versions this dispatcher knows, for messages: `v1 (ID), v2 (ID)`.
pub fn known_versions() -> String {
    VERSIONS.iter().map(|v| format!("v{} ({})", v.number, v.id)).collect::<Vec<_>>().join(", ")
}

/// Schemas larger than this are refused before parsing (the canonical one is about 6 KiB).
pub const MAX_SCHEMA_BYTES: u64 = 1024 * 1024;

/// Where `pattern` is moved to before building (see the module documentation).
const RE2_PATTERN: &str = "x-provision-dispatcher-re2-pattern";

/// Compiled-program limit per pattern. The whole schema's compiled size is bounded by
/// [`COMPILE_BUDGET`].
pub const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// What compiling the media's schema may cost (`crate::bounded`); a schema over either limit
/// is refused as too complex (78). Compiling is linear in the schema's size but for its
/// patterns, whose compiled programs the heap limit bounds (a pattern near its own limit
/// takes about 1 MiB and milliseconds), so the heap is the limit that counts. The CPU time
/// is a backstop, generous because the boot's first compile also builds the draft-07
/// meta-schema's validator: the canonical schema takes about 1 ms on a server and up to
/// 0.4 s in a guest under TCG emulation.
pub const COMPILE_BUDGET: Budget = Budget { cpu: Duration::from_secs(2), heap: 28 << 20 };

/// What validating a recipe against it may cost: the canonical schema takes well under 1 ms
/// on a maximal recipe; a recipe with every one of its 16,384 values in error needs under
/// 20 MiB for the errors. Over either limit, the schema is refused as too complex for this
/// recipe (78).
pub const VALIDATE_BUDGET: Budget = Budget { cpu: Duration::from_millis(300), heap: 24 << 20 };

/// What the image allows of an ISO's schema.
#[derive(Debug, Clone, Copy, Default)]
pub struct SchemaPolicy {
    /// Accept a draft-07 schema whose `$id` is not in [`KNOWN_IDS`].
    pub accept_unknown_id: bool,
}

/// Why a schema cannot be used (exit 78). Messages quote the schema, never the recipe.
#[derive(Debug)]
pub enum SchemaError {
    Unreadable(ReadError),
    NotDraft7 {
        declared: String,
    },
    UnknownId {
        id: Option<String>,
    },
    BadPattern {
        pointer: String,
        reason: String,
    },
    Invalid {
        pointer: String,
        reason: String,
    },
    /// Compiling the schema, or validating the recipe against it, went over its budget.
    TooComplex {
        task: &'static str,
        overrun: Overrun,
    },
}

impl fmt::Display for SchemaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SchemaError::Unreadable(e) => write!(f, "the schema cannot be read: {e}"),
            SchemaError::NotDraft7 { declared } => {
                write!(f, "the schema declares $schema {declared}; only draft-07 is supported")
            }
            SchemaError::UnknownId { id } => {
                match id {
                    Some(id) => {
                        write!(f, "the schema is of a version this image does not know ($id {})", clip(id, 300))?
                    }
                    None => f.write_str("the schema has no $id, so its version is unknown")?,
                }
                write!(
                    f,
                    "; this image knows {}: update the maintenance-OS image, or have the controller send a version it knows",
                    known_versions()
                )
            }
            SchemaError::BadPattern { pointer, reason } => {
                write!(f, "the schema's pattern at {pointer} does not compile: {reason}")
            }
            SchemaError::Invalid { pointer, reason } => {
                write!(f, "the schema is not valid draft-07 at {}: {reason}", display_pointer(pointer))
            }
            SchemaError::TooComplex { task, overrun: overrun @ Overrun::Stopped(_) } => write!(f, "{task}: {overrun}"),
            SchemaError::TooComplex { task, overrun } => {
                write!(f, "the schema is too complex: {task} {overrun}, over the dispatcher's bound")
            }
        }
    }
}

impl std::error::Error for SchemaError {}

impl SchemaError {
    /// The detail's code: one per cause.
    pub fn code(&self) -> Code {
        match self {
            SchemaError::Unreadable(ReadError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {
                Code::SchemaMissing
            }
            SchemaError::Unreadable(ReadError::Io(_) | ReadError::TooLarge { .. }) => Code::SchemaUnreadable,
            SchemaError::Unreadable(_)
            | SchemaError::NotDraft7 { .. }
            | SchemaError::BadPattern { .. }
            | SchemaError::Invalid { .. } => Code::SchemaInvalid,
            SchemaError::UnknownId { .. } => Code::UnknownSchemaId,
            SchemaError::TooComplex { .. } => Code::SchemaTooComplex,
        }
    }

    /// The detail of this refusal, about the schema file `file` (for an unknown `$id`, with
    /// the `$id`s this dispatcher knows); `None`: a compiled-in schema, which has no file, so
    /// the detail is about the recipe as a whole.
    pub fn detail(&self, file: Option<&str>) -> Detail {
        let mut detail = Detail::of_file(file.unwrap_or_default(), self.code(), self.to_string());
        detail.file = file.map(str::to_owned);
        if let SchemaError::UnknownId { .. } = self {
            detail.known = KNOWN_IDS.iter().map(|&id| id.to_owned()).collect();
        }
        detail
    }
}

/// A schema being compiled ([`Schema::start`]).
pub struct Compiling(bounded::Pending<(Result<Schema, SchemaError>, Duration)>);

impl Compiling {
    /// The compiled schema, or why there is none.
    pub fn finish(self) -> Result<Schema, SchemaError> {
        self.finish_timed().0
    }

    /// [`Compiling::finish`], and how long the compiling itself took (when it ended).
    pub fn finish_timed(self) -> (Result<Schema, SchemaError>, Option<Duration>) {
        match self.0.wait() {
            Ok((schema, took)) => (schema, Some(took)),
            Err(overrun) => (Err(SchemaError::TooComplex { task: "compiling it", overrun }), None),
        }
    }
}

/// A compiled recipe schema.
pub struct Schema {
    id: Option<String>,
    /// Shared with the thread that validates (`crate::bounded`).
    compiled: Arc<Compiled>,
    /// Whether the schema declares the top-level `$schema` property itself.
    declares_editor_hint: bool,
}

struct Compiled {
    /// The schema as written (with `pattern`), for messages in the schema's own words.
    document: Value,
    validator: Validator,
}

impl fmt::Debug for Schema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Schema").field("id", &self.id).finish_non_exhaustive()
    }
}

impl Schema {
    /// The canonical schema (version 1) compiled into the binary.
    pub fn canonical() -> Schema {
        Schema::version(&VERSIONS[0])
    }

    /// A version compiled into the binary.
    pub fn version(version: &Version) -> Schema {
        Schema::from_bytes(version.text.as_bytes(), SchemaPolicy::default())
            .expect("the compiled-in versions compile (tested)")
    }

    /// Compiles a schema within [`COMPILE_BUDGET`].
    pub fn from_bytes(bytes: &[u8], policy: SchemaPolicy) -> Result<Schema, SchemaError> {
        Schema::start(bytes.to_vec(), policy).finish()
    }

    /// Starts compiling a schema within [`COMPILE_BUDGET`], on a thread of its own.
    pub fn start(bytes: Vec<u8>, policy: SchemaPolicy) -> Compiling {
        Compiling(bounded::spawn("schema", COMPILE_BUDGET, move || {
            let started = std::time::Instant::now();
            (Schema::compile(&bytes, policy), started.elapsed())
        }))
    }

    fn compile(bytes: &[u8], policy: SchemaPolicy) -> Result<Schema, SchemaError> {
        let document = parse_value(bytes).map_err(SchemaError::Unreadable)?;
        if let Some(declared) = document.get("$schema") {
            let draft7 = declared.as_str().is_some_and(|uri| {
                let uri = uri.trim_end_matches('#');
                uri == "http://json-schema.org/draft-07/schema" || uri == "https://json-schema.org/draft-07/schema"
            });
            if !draft7 {
                return Err(SchemaError::NotDraft7 { declared: declared.to_string() });
            }
        }
        let id = document.get("$id").and_then(Value::as_str).map(str::to_owned);
        if id.as_deref().is_some_and(|id| !crate::envfile::representable(id)) {
            // It goes into recipe.env as RECIPE_SCHEMA_ID.
            return Err(SchemaError::Invalid { pointer: "/$id".into(), reason: "contains a control character".into() });
        }
        if !policy.accept_unknown_id && !id.as_deref().is_some_and(|id| KNOWN_IDS.contains(&id)) {
            return Err(SchemaError::UnknownId { id });
        }
        guards::check(&document, id.as_deref())?;
        let mut rewritten = document.clone();
        let mut compiled = HashMap::new();
        move_patterns(&mut rewritten, &mut String::new(), &mut compiled)?;
        // Each pattern was compiled once, with its pointer for errors; the keyword reuses it.
        let compiled = Arc::new(compiled);
        let validator = jsonschema::options()
            .with_draft(Draft::Draft7)
            .should_validate_formats(true)
            // A string said to hold JSON is parsed as the recipe is: with its caps.
            .with_content_media_type("application/json", |text| parse_value(text.as_bytes()).is_ok())
            .with_pattern_options(PatternOptions::regex().size_limit(REGEX_SIZE_LIMIT))
            .with_keyword(RE2_PATTERN, move |_, value, _| {
                let source = value.as_str().unwrap_or_default();
                let regex = match compiled.get(source) {
                    Some(regex) => regex.clone(),
                    None => compile_pattern(source).map_err(ValidationError::custom)?,
                };
                let message = clip(&format!("must match pattern {source}"), MAX_SCHEMA_WORDS);
                Ok(Box::new(Re2Pattern { regex, message: Arc::from(message) }))
            })
            .build(&rewritten)
            .map_err(|e| SchemaError::Invalid {
                pointer: e.instance_path().to_string(),
                reason: clip(&describe(e.kind(), None), 300),
            })?;
        let declares_editor_hint = document.pointer("/properties/$schema").is_some();
        Ok(Schema { id, compiled: Arc::new(Compiled { document, validator }), declares_editor_hint })
    }

    /// The schema's `$id`, recorded in outputs and status.
    pub fn id(&self) -> Option<&str> {
        self.id.as_deref()
    }

    /// Validates the recipe within [`VALIDATE_BUDGET`]: one issue per error it finds, each
    /// reported once (a schema that reaches one place by many paths finds it many times).
    pub fn check(&self, doc: &Document) -> Result<Vec<Issue>, SchemaError> {
        let strip_hint = !self.declares_editor_hint;
        self.validate_shared(doc.shared_value(), strip_hint)
    }

    /// Validates any JSON value against the schema (no editor-hint handling), as
    /// [`Schema::check`] does.
    pub fn validate(&self, instance: &Value) -> Result<Vec<Issue>, SchemaError> {
        self.validate_shared(Arc::new(instance.clone()), false)
    }

    /// Validation in up to three bounded steps: whether the recipe is valid (no allocation:
    /// the common case ends here); if not, every error; should listing them all go over the
    /// budget (an error found once per path through the schema, every failed branch of an
    /// `anyOf` kept), the first error the validator meets, with a `tooManyErrors` detail that
    /// says the list is not whole.
    fn validate_shared(&self, value: Arc<Value>, strip_hint: bool) -> Result<Vec<Issue>, SchemaError> {
        let instance = match value.as_object() {
            Some(map) if strip_hint && map.contains_key(EDITOR_HINT) => {
                let data = map.iter().filter(|(k, _)| *k != EDITOR_HINT);
                Arc::new(Value::Object(data.map(|(k, v)| (k.clone(), v.clone())).collect()))
            }
            _ => value,
        };
        let too_complex = |overrun| SchemaError::TooComplex { task: "validating the recipe against it", overrun };
        if self.bounded(&instance, |compiled, instance| compiled.validator.is_valid(instance)).map_err(too_complex)? {
            return Ok(Vec::new());
        }
        match self.bounded(&instance, Compiled::every_error) {
            Ok(issues) => Ok(issues),
            Err(overrun @ Overrun::Stopped(_)) => Err(too_complex(overrun)),
            Err(overrun) => {
                let mut first = self.bounded(&instance, Compiled::first_error).map_err(too_complex)?;
                first.push(Issue::error(
                    "",
                    Code::TooManyErrors,
                    format!("not every error is listed: listing them all under this schema {overrun}"),
                ));
                Ok(first)
            }
        }
    }

    /// One step of validation on a thread of its own, within [`VALIDATE_BUDGET`].
    fn bounded<T: Send + 'static>(
        &self,
        instance: &Arc<Value>,
        step: fn(&Compiled, &Value) -> T,
    ) -> Result<T, Overrun> {
        let (compiled, instance) = (self.compiled.clone(), instance.clone());
        bounded::run("validate", VALIDATE_BUDGET, move || step(&compiled, &instance))
    }
}

impl Compiled {
    fn first_error(&self, instance: &Value) -> Vec<Issue> {
        let mut issues = Vec::new();
        if let Err(error) = self.validator.validate(instance) {
            self.push_issues(&error, &mut issues);
        }
        issues
    }

    fn every_error(&self, instance: &Value) -> Vec<Issue> {
        let mut issues = Vec::new();
        for error in self.validator.iter_errors(instance) {
            self.push_issues(&error, &mut issues);
        }
        let first: Vec<bool> = {
            let mut seen = ahash::AHashSet::with_capacity(issues.len());
            issues
                .iter()
                .map(|issue| seen.insert((issue.path.as_str(), issue.code.name(), issue.message.as_str())))
                .collect()
        };
        let mut first = first.into_iter();
        issues.retain(|_| first.next().unwrap_or(true));
        issues
    }

    fn push_issues(&self, error: &ValidationError<'_>, issues: &mut Vec<Issue>) {
        let path = error.instance_path().to_string();
        let schema_path = error.schema_path().to_string();
        let subschema = parent_pointer(&schema_path).and_then(|p| self.document.pointer(p)).and_then(Value::as_object);
        match error.kind() {
            ValidationErrorKind::Required { property } => {
                let property = property.as_str().unwrap_or_default();
                let message = match self.condition(&schema_path) {
                    Some(condition) => clip(&format!("is required when {condition}"), MAX_SCHEMA_WORDS),
                    None => "is required".to_owned(),
                };
                issues.push(Issue::error(child(&path, property), Code::Keyword("required"), message));
            }
            ValidationErrorKind::AdditionalProperties { unexpected } => {
                for property in unexpected {
                    issues.push(Issue::error(
                        child(&path, property),
                        Code::Keyword("additionalProperties"),
                        "is not a property the schema allows (additionalProperties is false)",
                    ));
                }
            }
            ValidationErrorKind::Custom { message, .. } => {
                issues.push(Issue::error(path, Code::Keyword("pattern"), message.clone()))
            }
            kind => {
                let message = clip(&describe(kind, subschema), MAX_SCHEMA_WORDS);
                issues.push(Issue::error(path, Code::keyword(kind.keyword()), message));
            }
        }
    }

    /// For an error under `.../then/...`: the sibling `if` in words, when it is the common
    /// `{"properties": {KEY: {"const": VALUE}}}` form (the seed's workflow switch).
    fn condition(&self, schema_path: &str) -> Option<String> {
        let cut = schema_path.rfind("/then/")?;
        let test = self.document.pointer(&format!("{}/if", &schema_path[..cut]))?;
        let (key, property) = test.get("properties")?.as_object()?.iter().next()?;
        Some(format!("{key} is {}", bounded_json(property.get("const")?)))
    }
}

/// The `pattern` keyword with RE2 semantics.
struct Re2Pattern {
    regex: Regex,
    message: Arc<str>,
}

impl<'i> Keyword<'i> for Re2Pattern {
    fn validate(&self, instance: &'i Value) -> Result<(), ValidationError<'i>> {
        if self.is_valid(instance) {
            Ok(())
        } else {
            Err(ValidationError::custom(&*self.message))
        }
    }

    fn is_valid(&self, instance: &'i Value) -> bool {
        bounded::checkpoint();
        instance.as_str().is_none_or(|s| self.regex.is_match(s))
    }
}

fn compile_pattern(source: &str) -> Result<Regex, String> {
    RegexBuilder::new(source)
        .size_limit(REGEX_SIZE_LIMIT)
        .dfa_size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map_err(|e| clip(&e.to_string().replace('\n', " "), 300))
}

/// How a draft-07 keyword holds subschemas: the meta-schema's schema positions, so that a
/// property *named* `pattern` or `$ref` is never mistaken for the keyword.
enum Holds {
    /// An object of schemas (`properties`, `definitions`, ...).
    Named,
    /// An array of schemas (`allOf`, `items` as a tuple, ...).
    Listed,
    /// One schema (`not`, `items`, `additionalProperties`, ...).
    One,
    Nothing,
}

fn holds(key: &str, value: &Value) -> Holds {
    match key {
        "properties" | "patternProperties" | "definitions" | "dependencies" => Holds::Named,
        "items" | "allOf" | "anyOf" | "oneOf" if value.is_array() => Holds::Listed,
        "items"
        | "additionalItems"
        | "additionalProperties"
        | "contains"
        | "propertyNames"
        | "if"
        | "then"
        | "else"
        | "not" => Holds::One,
        _ => Holds::Nothing,
    }
}

/// The direct subschemas of a schema object, with their reference tokens.
pub(super) fn subschemas(map: &Map<String, Value>) -> Vec<(Vec<String>, &Value)> {
    let mut out = Vec::new();
    for (key, value) in map {
        match holds(key, value) {
            Holds::Named => {
                out.extend(value.as_object().into_iter().flatten().map(|(n, v)| (vec![key.clone(), n.clone()], v)))
            }
            Holds::Listed => out.extend(
                value.as_array().into_iter().flatten().enumerate().map(|(i, v)| (vec![key.clone(), i.to_string()], v)),
            ),
            Holds::One => out.push((vec![key.clone()], value)),
            Holds::Nothing => {}
        }
    }
    out
}

/// Moves every `pattern` of a schema position to [`RE2_PATTERN`], compiling each once (into
/// `compiled`, by source) so a bad one is reported with its pointer.
fn move_patterns(
    schema: &mut Value,
    pointer: &mut String,
    compiled: &mut HashMap<String, Regex>,
) -> Result<(), SchemaError> {
    let Some(map) = schema.as_object_mut() else { return Ok(()) };
    if let Some(Value::String(source)) = map.get("pattern") {
        if !compiled.contains_key(source) {
            let regex = compile_pattern(source)
                .map_err(|reason| SchemaError::BadPattern { pointer: child(pointer, "pattern"), reason })?;
            compiled.insert(source.clone(), regex);
        }
        let source = map.remove("pattern").expect("present");
        map.insert(RE2_PATTERN.to_owned(), source);
    }
    for (key, value) in map.iter_mut() {
        let len = pointer.len();
        crate::recipe::push_token(pointer, key);
        match holds(key, value) {
            Holds::Named => {
                for (name, sub) in value.as_object_mut().into_iter().flatten() {
                    let len = pointer.len();
                    crate::recipe::push_token(pointer, name);
                    move_patterns(sub, pointer, compiled)?;
                    pointer.truncate(len);
                }
            }
            Holds::Listed => {
                for (i, sub) in value.as_array_mut().into_iter().flatten().enumerate() {
                    let len = pointer.len();
                    crate::recipe::push_token(pointer, &i.to_string());
                    move_patterns(sub, pointer, compiled)?;
                    pointer.truncate(len);
                }
            }
            Holds::One => move_patterns(value, pointer, compiled)?,
            Holds::Nothing => {}
        }
        pointer.truncate(len);
    }
    Ok(())
}

/// A message for a schema error, from the error's kind and the failing subschema: the
/// schema's own words, never the instance's value.
fn describe(kind: &ValidationErrorKind, subschema: Option<&Map<String, Value>>) -> String {
    use ValidationErrorKind as K;
    match kind {
        K::Type { kind: TypeKind::Single(t) } => format!("must be of type {t}"),
        K::Type { kind: TypeKind::Multiple(types) } => {
            let names: Vec<String> = types.iter().map(|t| t.to_string()).collect();
            format!("must be of type {}", names.join(" or "))
        }
        K::Enum { options } => format!("must be one of {}", list_values(options)),
        K::Constant { expected_value } => format!("must be {}", bounded_json(expected_value)),
        K::MinLength { limit } => format!("must be at least {} long", count(*limit, "character")),
        K::MaxLength { limit } => format!("must be at most {} long", count(*limit, "character")),
        K::MinItems { limit } => format!("must have at least {}", count(*limit, "item")),
        K::MaxItems { limit } => format!("must have at most {}", count(*limit, "item")),
        K::MinProperties { limit } => format!("must have at least {}", count(*limit, "property")),
        K::MaxProperties { limit } => format!("must have at most {}", count(*limit, "property")),
        K::Minimum { limit } => format!("must be at least {limit}"),
        K::Maximum { limit } => format!("must be at most {limit}"),
        K::ExclusiveMinimum { limit } => format!("must be greater than {limit}"),
        K::ExclusiveMaximum { limit } => format!("must be less than {limit}"),
        K::MultipleOf { multiple_of } => format!("must be a multiple of {multiple_of}"),
        K::Format { format } => format!("must be a valid {format}"),
        K::Pattern { pattern } => format!("must match pattern {pattern}"),
        K::OneOfNotValid { .. } => alternatives(subschema, "oneOf", "must match exactly one of"),
        K::OneOfMultipleValid { .. } => alternatives(subschema, "oneOf", "must match only one of"),
        K::AnyOf { .. } => alternatives(subschema, "anyOf", "must match at least one of"),
        K::Not { .. } => "must not match the schema under not".to_owned(),
        K::FalseSchema => "is not allowed by the schema".to_owned(),
        K::UniqueItems => "must not contain the same item twice".to_owned(),
        K::Contains => "must contain an item that matches the schema under contains".to_owned(),
        K::AdditionalItems { limit } => {
            format!("must have at most {} (additionalItems is false)", count(*limit as u64, "item"))
        }
        K::PropertyNames { .. } => "has a property name that propertyNames does not allow".to_owned(),
        K::Required { property } => format!("requires property {property}"),
        K::AdditionalProperties { .. } => "has a property the schema does not allow".to_owned(),
        K::Custom { message, .. } => message.clone(),
        K::Referencing(_) => "refers to a schema that cannot be resolved ($ref)".to_owned(),
        other => format!("fails the {} keyword", other.keyword()),
    }
}

/// `must match exactly one of pattern A or pattern B` when every alternative is a lone
/// pattern (the seed's `type_guid`); otherwise the count of alternatives.
fn alternatives(subschema: Option<&Map<String, Value>>, keyword: &str, lead: &str) -> String {
    let branches = subschema.and_then(|s| s.get(keyword)).and_then(Value::as_array);
    let Some(branches) = branches else { return format!("{lead} the schemas under {keyword}") };
    let patterns: Option<Vec<&str>> = branches
        .iter()
        .map(|b| b.as_object().filter(|o| o.len() == 1).and_then(|o| o.get("pattern")).and_then(Value::as_str))
        .collect();
    match patterns {
        Some(patterns) => format!("{lead} pattern {}", patterns.join(" or pattern ")),
        None => format!("{lead} the {} schemas under {keyword}", branches.len()),
    }
}

/// `1 item`, `2 items`, `1 property`, `3 properties`.
fn count(n: u64, noun: &str) -> String {
    match (n, noun.strip_suffix('y')) {
        (1, _) => format!("1 {noun}"),
        (_, Some(stem)) => format!("{n} {stem}ies"),
        (_, None) => format!("{n} {noun}s"),
    }
}

/// The values of an `enum`, listed until the list is longer than a message may be: a huge
/// enum is never written out whole, per error.
fn list_values(options: &Value) -> String {
    let Some(items) = options.as_array() else { return options.to_string() };
    let mut out = String::new();
    for item in items {
        if !out.is_empty() {
            out.push_str(", ");
        }
        out.push_str(&bounded_json(item));
        if out.len() > MAX_SCHEMA_WORDS {
            break;
        }
    }
    out
}

fn parent_pointer(pointer: &str) -> Option<&str> {
    pointer.rfind('/').map(|cut| &pointer[..cut])
}

fn display_pointer(pointer: &str) -> &str {
    if pointer.is_empty() {
        "the top level"
    } else {
        pointer
    }
}

/// Cuts `text` to at most `max` characters, marking the cut. Schema words can be long (a
/// huge `enum`); a message stays one readable line.
/// A value of the schema as JSON text, cut once it is longer than a message may be, without
/// writing out the rest (a 1 MiB `const` would otherwise be serialized per error).
fn bounded_json(value: &Value) -> String {
    struct Bounded(Vec<u8>);
    impl std::io::Write for Bounded {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            if self.0.len() > MAX_SCHEMA_WORDS * 4 {
                return Err(std::io::ErrorKind::WriteZero.into());
            }
            self.0.extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut out = Bounded(Vec::new());
    let _cut_short = serde_json::to_writer(&mut out, value);
    clip(&String::from_utf8_lossy(&out.0), MAX_SCHEMA_WORDS)
}

/// The most characters of a message taken from the schema's words (an enum, a pattern): a
/// hostile schema must not make every error as large as itself.
pub const MAX_SCHEMA_WORDS: usize = 300;

pub fn clip(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recipe::parse;

    fn issues(schema: &Schema, recipe: &str) -> Vec<(String, String, String)> {
        let doc = parse(recipe.as_bytes().to_vec()).unwrap();
        schema.check(&doc).unwrap().into_iter().map(|i| (i.path, i.code.name().to_owned(), i.message)).collect()
    }

    fn compile(schema: serde_json::Value) -> Result<Schema, SchemaError> {
        Schema::from_bytes(schema.to_string().as_bytes(), SchemaPolicy { accept_unknown_id: true })
    }

    #[test]
    fn every_version_compiles_with_its_known_id() {
        assert_eq!(Schema::canonical().id(), Some(KNOWN_IDS[0]));
        for version in &VERSIONS {
            assert_eq!(Schema::version(version).id(), Some(version.id));
        }
        assert_eq!(VERSIONS.map(|v| v.number), [1, 2]);
    }

    #[test]
    fn an_unknown_version_is_named_with_the_ones_this_image_knows() {
        let refused = Schema::from_bytes(
            br#"{"$id": "https://shoal.dev/provisioner/v3/recipe.schema.json"}"#,
            SchemaPolicy::default(),
        );
        let message = refused.unwrap_err().to_string();
        assert_eq!(
            message,
            "the schema is of a version this image does not know ($id https://shoal.dev/provisioner/v3/recipe.schema.json); \
             this image knows v1 (https://shoal.dev/provisioner/recipe.schema.json), v2 (https://shoal.dev/provisioner/v2/recipe.schema.json): \
             update the maintenance-OS image, or have the controller send a version it knows"
        );
        let none = Schema::from_bytes(b"{}", SchemaPolicy::default()).unwrap_err().to_string();
        assert!(none.starts_with("the schema has no $id, so its version is unknown; this image knows v1 ("), "{none}");
    }

    /// Version 2 spells `type_guid`'s aliases with character classes where version 1 has an
    /// inline `(?i)`, which stock validators refuse; the two patterns match the same strings:
    /// every case of every alias, and every alias with any one character in the first 12,288
    /// code points or the fullwidth forms (where case folding could reach) put in.
    #[test]
    fn version_2_spells_the_aliases_without_inline_flags_and_means_the_same() {
        let pattern = |text: &str| {
            let schema: serde_json::Value = serde_json::from_str(text).unwrap();
            let at = "/properties/partition_layout/items/properties/type_guid/oneOf/0/pattern";
            schema.pointer(at).and_then(|p| p.as_str()).unwrap().to_owned()
        };
        let (one, two) = (pattern(VERSIONS[0].text), pattern(VERSIONS[1].text));
        assert!(one.contains("(?i)") && !two.contains("(?"), "{one} / {two}");
        let (one, two) = (compile_pattern(&one).unwrap(), compile_pattern(&two).unwrap());
        let aliases = ["ef00", "8300", "8200", "0700", "0c01", "fc00", "fd00"];
        let mut candidates = Vec::new();
        for alias in aliases {
            for mask in 0..16u32 {
                let cased = alias.chars().enumerate();
                candidates
                    .push(cased.map(|(i, c)| if mask & 1 << i != 0 { c.to_ascii_uppercase() } else { c }).collect());
            }
            let others = (0..0x3000u32).chain(0xFF00..0xFFF0).filter_map(char::from_u32);
            for (at, other) in (0..4).flat_map(|at| others.clone().map(move |c| (at, c))) {
                candidates
                    .push(alias.chars().enumerate().map(|(i, c)| if i == at { other } else { c }).collect::<String>());
            }
            candidates.extend([format!("{alias}\n"), format!(" {alias}"), alias.repeat(2), alias[..3].to_owned()]);
        }
        for text in &candidates {
            assert_eq!(one.is_match(text), two.is_match(text), "{text:?}");
        }
        let cased = candidates.iter().filter(|t| t.len() == 4 && aliases.contains(&t.to_ascii_lowercase().as_str()));
        assert!(
            cased.clone().count() > 7 * 16 && cased.into_iter().all(|t| two.is_match(t)),
            "every case of each alias"
        );
    }

    #[test]
    fn version_2_takes_the_disks_identity() {
        let v2 = Schema::version(&VERSIONS[1]);
        let recipe = |disk: &str, hints: &str| {
            format!(
                r#"{{"task_target": "install-linux.target", "target_disk": "{disk}", "oci_url": "x",
                   "partition_layout": [{{"size": "1G", "type_guid": "8300"}}], "target_disk_hints": {hints}}}"#
            )
        };
        let every = r#"{"wwn": "0x5000c50015ea71ad", "serial": "PD-TARGET-0001", "model": "QEMU HARDDISK",
            "size_min": "900M", "size_max": "1100M", "rotational": false}"#;
        for disk in ["/dev/sda", "/dev/disk/by-id/wwn-0x5000c50015ea71ad", "/dev/disk/by-path/pci-0000:3b:00.0-nvme-1"]
        {
            assert_eq!(issues(&v2, &recipe(disk, every)), [], "{disk}");
        }
        let bad = issues(&v2, &recipe("/dev/disk/by-label/x", r#"{"wwn": "5000c5", "size_max": "10%", "colour": 1}"#));
        let mut codes: Vec<_> = bad.iter().map(|(path, code, _)| (path.as_str(), code.as_str())).collect();
        codes.sort();
        assert_eq!(
            codes,
            [
                ("/target_disk", "pattern"),
                ("/target_disk_hints/colour", "additionalProperties"),
                ("/target_disk_hints/size_max", "pattern"),
                ("/target_disk_hints/wwn", "pattern"),
            ]
        );
        let empty = issues(&v2, &recipe("/dev/sda", "{}"));
        assert_eq!(empty.iter().map(|i| i.1.as_str()).collect::<Vec<_>>(), ["minProperties"]);
        let alone = r#"{"task_target": "install-esxi.target", "ks_cfg": "x", "target_disk_hints": {"serial": "S"}}"#;
        assert_eq!(
            issues(&v2, alone).iter().map(|i| (i.0.as_str(), i.1.as_str())).collect::<Vec<_>>(),
            [("/target_disk", "required")]
        );
        // Version 1 knows none of it.
        assert_eq!(issues(&Schema::canonical(), &recipe("/dev/sda", every))[0].1, "additionalProperties");
    }

    #[test]
    fn inline_flags_work_as_in_re2() {
        let schema = Schema::canonical();
        let recipe = |guid: &str| {
            format!(
                r#"{{"task_target": "install-linux.target", "target_disk": "/dev/sda", "oci_url": "x",
                   "partition_layout": [{{"size": "1G", "type_guid": "{guid}"}}]}}"#
            )
        };
        assert_eq!(issues(&schema, &recipe("EF00")), []);
        assert_eq!(issues(&schema, &recipe("Fd00")), []);
        let bad = issues(&schema, &recipe("abcd"));
        assert_eq!(bad.len(), 1);
        assert_eq!(bad[0].0, "/partition_layout/0/type_guid");
        assert_eq!(bad[0].1, "oneOf");
        assert_eq!(
            bad[0].2,
            "must match exactly one of pattern ^(?i)(ef00|8300|8200|0700|0c01|fc00|fd00)$ or pattern \
             ^[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}$"
        );
    }

    #[test]
    fn required_and_unexpected_properties_point_at_the_property() {
        let schema = Schema::canonical();
        let found = issues(&schema, r#"{"task_target": "install-esxi.target", "extra": 1}"#);
        assert_eq!(
            found,
            [
                (
                    "/extra".to_owned(),
                    "additionalProperties".to_owned(),
                    "is not a property the schema allows (additionalProperties is false)".to_owned()
                ),
                (
                    "/ks_cfg".to_owned(),
                    "required".to_owned(),
                    r#"is required when task_target is "install-esxi.target""#.to_owned()
                ),
            ]
        );
    }

    #[test]
    fn missing_task_target_is_one_error() {
        let schema = Schema::canonical();
        let found = issues(&schema, r#"{"oci_url": "x"}"#);
        assert_eq!(found, [("/task_target".to_owned(), "required".to_owned(), "is required".to_owned())]);
    }

    #[test]
    fn messages_never_quote_the_instance() {
        let schema = Schema::canonical();
        let found = issues(
            &schema,
            r#"{"task_target": "SECRET1", "firmware_url": "SECRET2 x", "partition_layout": [{"size": "SECRET3",
                "type_guid": "SECRET4", "format": "SECRET5", "label": "SECRET6SECRET6SECRET6SECRET6SECRET6"}]}"#,
        );
        assert_eq!(found.len(), 6, "{found:?}");
        for (_, _, message) in found {
            assert!(!message.contains("SECRET"), "{message}");
        }
    }

    #[test]
    fn editor_hint_is_data_only_when_the_schema_declares_it() {
        let seed =
            Schema::from_bytes(include_bytes!("../../iso/seed-002.schema.json"), SchemaPolicy::default()).unwrap();
        let recipe = r#"{"$schema": "./recipe.schema.json", "task_target": "install-esxi.target", "ks_cfg": "x"}"#;
        assert_eq!(issues(&seed, recipe), []);
        assert_eq!(issues(&Schema::canonical(), recipe), []);
        let empty_hint = r#"{"$schema": "", "task_target": "install-esxi.target", "ks_cfg": "x"}"#;
        assert_eq!(issues(&Schema::canonical(), empty_hint)[0].0, "/$schema");
    }

    #[test]
    fn unusable_schemas_are_refused() {
        let known = Schema::from_bytes(br#"{"$id": "https://example.com/other.json"}"#, SchemaPolicy::default());
        assert!(matches!(known, Err(SchemaError::UnknownId { .. })));
        let draft = compile(serde_json::json!({"$schema": "https://json-schema.org/draft/2020-12/schema"}));
        assert!(matches!(draft, Err(SchemaError::NotDraft7 { .. })));
        let control = compile(serde_json::json!({"$id": "https://example.com/a\nb"}));
        assert!(matches!(control, Err(SchemaError::Invalid { pointer, .. }) if pointer == "/$id"));
        let invalid = compile(serde_json::json!({"properties": {"a": {"type": "strng"}}}));
        assert!(matches!(invalid, Err(SchemaError::Invalid { .. })), "{invalid:?}");
        let pattern = compile(serde_json::json!({"properties": {"a": {"pattern": "(unclosed"}}}));
        match pattern {
            Err(SchemaError::BadPattern { pointer, .. }) => assert_eq!(pointer, "/properties/a/pattern"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn deep_ref_chains_and_ref_loops_are_refused_and_recursion_is_not() {
        let chain = |n: usize| {
            let mut defs = serde_json::Map::new();
            for i in 0..n {
                defs.insert(format!("a{i}"), serde_json::json!({"$ref": format!("#/definitions/a{}", i + 1)}));
            }
            defs.insert(format!("a{n}"), serde_json::json!({"type": "string"}));
            serde_json::json!({"definitions": defs, "properties": {"task_target": {"$ref": "#/definitions/a0"}}})
        };
        assert!(compile(chain(100)).is_ok());
        match compile(chain(5_000)) {
            Err(SchemaError::Invalid { reason, .. }) => assert!(reason.contains("deeper than 256"), "{reason}"),
            other => panic!("{other:?}"),
        }
        // Issue 14: a cycle of $refs alone accepted everything; it is refused (78).
        let cycle = serde_json::json!({"definitions": {"a": {"$ref": "#/definitions/b"}, "b": {"$ref": "#/definitions/a"}},
            "properties": {"task_target": {"$ref": "#/definitions/a"}}});
        match compile(cycle) {
            Err(SchemaError::Invalid { pointer, reason }) => {
                assert!(pointer.ends_with("/$ref"), "{pointer}");
                assert!(reason.contains("leads back to itself"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        // Issue 24: loops through the keywords that apply to the same instance accepted
        // everything too; each is refused, with the keyword that closes it.
        let through = |keyword: &str, sub: serde_json::Value| {
            let mut a = serde_json::json!({"type": "string"});
            a[keyword] = sub;
            compile(serde_json::json!({"definitions": {"a": a, "b": {"allOf": [{"$ref": "#/definitions/a"}]}},
                "properties": {"task_target": {"$ref": "#/definitions/b"}}}))
        };
        let to_b = serde_json::json!({"$ref": "#/definitions/b"});
        for (keyword, sub) in [
            ("allOf", serde_json::json!([{"type": "string"}, to_b.clone()])),
            ("anyOf", serde_json::json!([to_b.clone()])),
            ("oneOf", serde_json::json!([to_b.clone(), {"type": "null"}])),
            ("not", to_b.clone()),
            ("if", to_b.clone()),
            ("then", to_b.clone()),
            ("else", to_b.clone()),
            ("dependencies", serde_json::json!({"x": to_b.clone(), "y": ["z"]})),
        ] {
            match through(keyword, sub) {
                Err(SchemaError::Invalid { reason, .. }) => {
                    assert!(reason.contains("leads back to itself"), "{keyword}: {reason}")
                }
                other => panic!("{keyword}: {other:?}"),
            }
        }
        // A loop that descends the instance (a member, an element) is recursion, not a loop.
        for keyword in ["items", "additionalProperties", "contains", "propertyNames", "additionalItems"] {
            assert!(through(keyword, to_b.clone()).is_ok(), "{keyword}");
        }
        let to_itself = serde_json::json!({"$ref": "#"});
        assert!(matches!(compile(to_itself), Err(SchemaError::Invalid { .. })));
        // Recursion through a constraint is a tree, not a loop.
        let tree = serde_json::json!({"definitions": {"node": {"type": "object",
            "properties": {"children": {"type": "array", "items": {"$ref": "#/definitions/node"}}}}},
            "properties": {"metadata": {"$ref": "#/definitions/node"}}});
        assert!(compile(tree).is_ok());
    }

    #[test]
    fn references_resolve_against_the_base_their_ids_set() {
        let refused = |schema: serde_json::Value| match compile(schema) {
            Err(SchemaError::Invalid { reason, .. }) => reason,
            other => panic!("{other:?}"),
        };
        // Inside a subschema with its own `$id`, `#/...` means that subschema's root: a loop
        // the document's root does not show.
        let embedded = serde_json::json!({"$id": KNOWN_IDS[0], "definitions": {"inner": {"$id": "inner.json",
            "definitions": {"x": {"allOf": [{"$ref": "#/definitions/x"}]}}}},
            "properties": {"task_target": {"$ref": "inner.json#/definitions/x"}}});
        assert!(refused(embedded).contains("leads back to itself"));
        // A plain-name fragment (draft-07 `$id: "#name"`).
        let anchored = serde_json::json!({"definitions": {"a": {"$id": "#a", "anyOf": [{"$ref": "#a"}]}},
            "properties": {"task_target": {"$ref": "#a"}}});
        assert!(refused(anchored).contains("leads back to itself"));
        // The same pointer without the loop compiles.
        let tree = serde_json::json!({"$id": KNOWN_IDS[0], "definitions": {"inner": {"$id": "inner.json",
            "definitions": {"x": {"type": "string"}}}},
            "properties": {"task_target": {"$ref": "inner.json#/definitions/x"}}});
        assert!(compile(tree).is_ok());
    }

    #[test]
    fn an_error_found_by_many_paths_is_one_issue() {
        let mut definitions = serde_json::Map::new();
        for i in 0..8 {
            let next = serde_json::json!({"$ref": format!("#/definitions/d{}", i + 1)});
            definitions.insert(format!("d{i}"), serde_json::json!({"allOf": [next, next]}));
        }
        definitions.insert("d8".into(), serde_json::json!({"type": "integer", "minimum": 3}));
        let schema = compile(serde_json::json!({"definitions": definitions,
            "properties": {"a": {"$ref": "#/definitions/d0"}, "b": {"$ref": "#/definitions/d0"}}}))
        .unwrap();
        let found = issues(&schema, r#"{"a": "x", "b": 1}"#);
        let codes: Vec<_> = found.iter().map(|(path, code, _)| (path.as_str(), code.as_str())).collect();
        assert_eq!(codes, [("/a", "type"), ("/b", "minimum")]);
    }

    #[test]
    fn the_schemas_words_in_a_message_are_capped() {
        // Issue 14: a huge enum or pattern was repeated whole in every message.
        let words: Vec<String> = (0..5_000).map(|i| format!("word-number-{i}")).collect();
        let long_pattern = format!("^({})$", words[..200].join("|"));
        let schema = compile(serde_json::json!({
            "properties": {
                "e": {"enum": words},
                "p": {"type": "string", "pattern": long_pattern},
                "c": {"const": {"huge": words}},
            },
        }))
        .unwrap();
        let found = issues(&schema, r#"{"e": "x", "p": "x", "c": "x"}"#);
        assert_eq!(found.len(), 3, "{found:?}");
        for (path, _, message) in &found {
            assert!(message.chars().count() <= MAX_SCHEMA_WORDS + 1, "{path}: {} chars", message.chars().count());
            assert!(message.ends_with('…'), "{path}: {message}");
        }
    }

    #[test]
    fn a_property_named_pattern_is_not_a_keyword() {
        let schema = compile(serde_json::json!({
            "type": "object",
            "properties": {"pattern": {"type": "string", "pattern": "^a$"}},
        }))
        .unwrap();
        assert_eq!(issues(&schema, r#"{"pattern": "a"}"#), []);
        assert_eq!(issues(&schema, r#"{"pattern": "b"}"#)[0].1, "pattern");
    }

    #[test]
    fn every_message_kind_is_in_the_schemas_words() {
        let schema = compile(serde_json::json!({
            "type": "object",
            "properties": {
                "e": {"enum": ["a", "b"]},
                "c": {"const": "k"},
                "n": {"type": "integer", "minimum": 2, "maximum": 5, "multipleOf": 2},
                "u": {"type": "array", "uniqueItems": true, "maxItems": 1},
                "f": {"type": "string", "format": "uri"},
                "t": {"type": ["string", "null"]},
                "x": {"not": {"type": "string"}},
            },
        }))
        .unwrap();
        let found = issues(&schema, r#"{"e": "z", "c": "z", "n": 7, "u": [1, 1], "f": "not a uri", "t": 1, "x": "s"}"#);
        let messages: Vec<_> = found.iter().map(|(p, c, m)| format!("{p} {c}: {m}")).collect();
        for expected in [
            r#"/e enum: must be one of "a", "b""#,
            r#"/c const: must be "k""#,
            "/n maximum: must be at most 5",
            "/n multipleOf: must be a multiple of 2",
            "/u uniqueItems: must not contain the same item twice",
            "/u maxItems: must have at most 1 item",
            "/f format: must be a valid uri",
            "/t type: must be of type null or string",
            "/x not: must not match the schema under not",
        ] {
            assert!(messages.iter().any(|m| m == expected), "{expected} not in {messages:#?}");
        }
    }
}
