//! The task on the media, taken as the boot path takes it: `run` at boot and `media check` on a
//! controller share this code, so that both decide the same for the same media. The files are
//! read through [`MediaFiles`] (a mounted tree or an ISO image read in user space): the recipe
//! first, digested whole, so that every refusal after it names the recipe ([`read_recipe`]);
//! then the schema and the signatures with their names, caps and refusals ([`read`]); their
//! signatures are checked on those bytes ([`verify`]); then the schema compiles while the recipe
//! is parsed ([`compile_beside_parse`]). Each refusal carries the failure that owns its exit
//! code, and a refusal of the media a detail of its cause, naming the file.

use std::io::Read;
use std::path::Path;
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::failure::Failure;
use crate::issues::{Code, Detail};
use crate::media::MediaFiles;
use crate::recipe::read::{read_capped_from, ReadError};
use crate::recipe::{self, Document, MAX_RECIPE_BYTES};
use crate::report::result::hex;
use crate::report::Report;
use crate::schema::{Schema, SchemaError, SchemaPolicy, MAX_SCHEMA_BYTES};
use crate::trust::{signature_path, SignatureFile, Signer, Trust};

/// The files the task media carries.
pub const RECIPE_FILE: &str = "recipe.json";
pub const SCHEMA_FILE: &str = "recipe.schema.json";

/// Why the media's task is not taken: the kind of failure (which owns the exit code), the
/// dispatcher's words, and the details: field-level for a recipe that does not parse, one per
/// file and cause for a refusal of the media.
#[derive(Debug)]
pub struct Refused {
    pub failure: Failure,
    pub message: String,
    pub details: Vec<Detail>,
}

impl Refused {
    pub fn new(failure: Failure, message: impl Into<String>) -> Refused {
        Refused { failure, message: message.into(), details: Vec::new() }
    }

    /// A refusal of one file of the media, for `code`'s cause.
    pub fn of_file(failure: Failure, file: &str, code: Code, message: String) -> Refused {
        Refused { failure, details: vec![Detail::of_file(file, code, message.clone())], message }
    }

    /// The `check` report of this refusal: a recipe that does not read is reported as `check`
    /// reports it, field by field; a refusal of the media with its reason and its details.
    pub fn report(self) -> Report {
        match self.failure {
            Failure::InvalidJson | Failure::TooLarge => {
                Report { failure: Some(self.failure), details: self.details, ..Report::default() }
            }
            _ => Report::refused(self.failure, self.message, self.details),
        }
    }
}

/// `recipe.json` as read from the media: its bytes (none when over the cap), and the SHA-256
/// of the whole file.
#[derive(Debug)]
pub struct RecipeFile {
    pub bytes: Option<Vec<u8>>,
    pub sha256: String,
}

/// `recipe.json`, read once: its first bytes up to the cap, and the SHA-256 of the whole file,
/// which ties every result line to the recipe the controller sent (what `sha256sum
/// recipe.json` gives, and `provision.recipe=` names). Past the cap the file is read only to
/// be digested, in pieces, never kept; `stop` ends that read. A recipe that cannot be opened or
/// read is unreadable (66).
pub fn read_recipe(media: &dyn MediaFiles, stop: &dyn Fn() -> bool) -> Result<RecipeFile, Refused> {
    let file = media.open(RECIPE_FILE).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => {
            Refused::new(Failure::Unreadable, format!("{RECIPE_FILE} on the media does not exist"))
        }
        _ => Refused::new(Failure::Unreadable, format!("{RECIPE_FILE} on the media {e}")),
    })?;
    let mut bytes = Vec::with_capacity(file.len.min(MAX_RECIPE_BYTES) as usize + 1);
    let mut reader = file.reader.take(MAX_RECIPE_BYTES + 1);
    reader.read_to_end(&mut bytes).map_err(unreadable)?;
    let mut hasher = Sha256::new();
    hasher.update(&bytes);
    if bytes.len() as u64 <= MAX_RECIPE_BYTES {
        return Ok(RecipeFile { bytes: Some(bytes), sha256: hex(&hasher.finalize()) });
    }
    drop(bytes);
    let mut rest = reader.into_inner();
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        if stop() {
            return Err(Refused::new(Failure::Stopped, format!("stopped while reading {RECIPE_FILE}")));
        }
        match rest.read(&mut buffer) {
            Ok(0) => return Ok(RecipeFile { bytes: None, sha256: hex(&hasher.finalize()) }),
            Ok(n) => hasher.update(&buffer[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(unreadable(e)),
        }
    }
}

fn unreadable(e: std::io::Error) -> Refused {
    Refused::new(Failure::Unreadable, format!("{RECIPE_FILE} on the media cannot be read: {e}"))
}

/// What is taken from the media: the schema's and the recipe's bytes, the recipe's SHA-256,
/// and with a trust file their signatures.
#[derive(Debug)]
pub struct Files {
    pub schema: Vec<u8>,
    pub recipe: Vec<u8>,
    /// The SHA-256 of the recipe file, in hexadecimal: `provision.recipe=sha256:` takes it.
    pub recipe_sha256: String,
    /// `recipe.json.sig` and `recipe.schema.json.sig`, when signatures are required.
    pub signatures: Option<[SignatureFile; 2]>,
}

/// The rest of the task, the recipe read first ([`read_recipe`]): a recipe over the cap is
/// refused (65, never parsed), then the schema and (`signed`) both signatures are read.
pub fn read(media: &dyn MediaFiles, recipe: RecipeFile, signed: bool) -> Result<Files, Refused> {
    let Some(bytes) = recipe.bytes else {
        let report = Report::of_read_error(&ReadError::TooLarge { limit: MAX_RECIPE_BYTES });
        let message = format!("{RECIPE_FILE} on the media is larger than {MAX_RECIPE_BYTES} bytes");
        return Err(Refused { details: report.details, ..Refused::new(Failure::TooLarge, message) });
    };
    let schema = read_schema(media)?;
    let signature = |name: &str| {
        let name = signature_path(Path::new(name));
        SignatureFile::read(media.open(&name.to_string_lossy()).map(|file| file.reader))
    };
    let signatures = signed.then(|| [signature(RECIPE_FILE), signature(SCHEMA_FILE)]);
    Ok(Files { schema, recipe: bytes, recipe_sha256: recipe.sha256, signatures })
}

/// Reads the schema from the media, capped. A missing or unusable schema makes the schema
/// unusable (78), with the detail of its cause; a failure of the medium itself (pulled out,
/// damaged, an image cut short) is the medium's fault: unreadable (66).
fn read_schema(media: &dyn MediaFiles) -> Result<Vec<u8>, Refused> {
    let refused = |code, message: String| Refused::of_file(Failure::SchemaError, SCHEMA_FILE, code, message);
    let io = |e: std::io::Error, message: String| match medium_fault(&e) {
        true => Refused::new(Failure::Unreadable, message),
        false => refused(Code::SchemaUnreadable, message),
    };
    let file = media.open(SCHEMA_FILE).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => {
            refused(Code::SchemaMissing, format!("{SCHEMA_FILE} on the media does not exist"))
        }
        _ => {
            let message = format!("{SCHEMA_FILE} on the media {e}");
            io(e, message)
        }
    })?;
    read_capped_from(file.reader, file.len, MAX_SCHEMA_BYTES).map_err(|e| match e {
        ReadError::TooLarge { limit } => {
            refused(Code::SchemaUnreadable, format!("{SCHEMA_FILE} on the media is larger than {limit} bytes"))
        }
        ReadError::Io(e) => {
            let message = format!("{SCHEMA_FILE} on the media cannot be read: {e}");
            io(e, message)
        }
        e => refused(Code::SchemaUnreadable, format!("{SCHEMA_FILE} on the media cannot be read: {e}")),
    })
}

/// Whether an error says the medium itself failed: an I/O error, a device gone or without a
/// medium, a filesystem that no longer answers or is corrupt, an image that ends before its
/// data.
pub fn medium_fault(e: &std::io::Error) -> bool {
    const FAULTS: [i32; 6] = [libc::EIO, libc::ENXIO, libc::ENODEV, libc::ENOMEDIUM, libc::ESTALE, libc::EUCLEAN];
    e.raw_os_error().is_some_and(|errno| FAULTS.contains(&errno)) || e.kind() == std::io::ErrorKind::UnexpectedEof
}

/// With a trust file, both files need a good signature by a key it holds, checked on the
/// bytes read, before anything parses them (SPEC §6a); each file refused is a detail.
/// `machine`: the server's SMBIOS UUID, for a recipe bound to one.
pub fn verify(trust: &Trust, files: &Files, machine: Option<&str>) -> Result<Signer, Refused> {
    let Some([recipe_sig, schema_sig]) = &files.signatures else {
        return Err(Refused::new(Failure::Bug, "the signatures were not read"));
    };
    let signed = [(RECIPE_FILE, &files.recipe[..], recipe_sig), (SCHEMA_FILE, &files.schema[..], schema_sig)];
    trust.verify_all(&signed, machine).map_err(|refused| Refused {
        failure: Failure::UntrustedMedia,
        message: format!("{refused}; nothing was written or started"),
        details: refused.details(),
    })
}

/// The media's schema cannot be used (78): the detail of its cause.
pub fn schema_refused(e: &SchemaError) -> Refused {
    Refused {
        failure: Failure::SchemaError,
        message: format!("{SCHEMA_FILE} on the media: {e}"),
        details: vec![e.detail(Some(SCHEMA_FILE))],
    }
}

/// The schema compiled and the recipe parsed.
pub struct Taken {
    pub schema: Result<Schema, Refused>,
    /// How long compiling took, when it ended.
    pub schema_took: Option<Duration>,
    pub doc: Result<Document, Refused>,
}

/// Schema and recipe, side by side: the schema compiles on a second thread while the recipe is
/// parsed (for a large recipe they take about as long, and neither needs the other).
pub fn compile_beside_parse(policy: SchemaPolicy, schema: Vec<u8>, recipe: Vec<u8>) -> Taken {
    let compiling = Schema::start(schema, policy);
    let doc = recipe::parse(recipe).map_err(|e| {
        let report = Report::of_read_error(&e);
        let failure = report.failure.unwrap_or(Failure::InvalidJson);
        Refused { failure, message: format!("{RECIPE_FILE} on the media: {e}"), details: report.details }
    });
    let (compiled, schema_took) = compiling.finish_timed();
    Taken { schema: compiled.map_err(|e| schema_refused(&e)), schema_took, doc }
}

/// The SHA-256 of `bytes` in hexadecimal.
pub fn sha256(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}
