//! The task on the media, taken as the boot path takes it: `run` at boot and `media check` on a
//! controller share this code, so that both decide the same for the same media. The files are
//! read through [`MediaFiles`] (a mounted tree or an ISO image read in user space) with their
//! names, caps and refusals ([`read`]); their signatures are checked on those bytes ([`verify`]);
//! then the schema compiles while the recipe is digested and parsed ([`compile_beside_parse`]).
//! Each refusal carries the failure that owns its exit code.

use std::path::Path;
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::failure::Failure;
use crate::issues::Detail;
use crate::media::MediaFiles;
use crate::recipe::read::{read_capped_from, ReadError};
use crate::recipe::{self, Document, MAX_RECIPE_BYTES};
use crate::report::result::hex;
use crate::report::Report;
use crate::schema::{Schema, SchemaPolicy, MAX_SCHEMA_BYTES};
use crate::trust::{signature_path, SignatureFile, Signer, Trust};

/// The files the task media carries.
pub const RECIPE_FILE: &str = "recipe.json";
pub const SCHEMA_FILE: &str = "recipe.schema.json";

/// Why the media's task is not taken: the kind of failure (which owns the exit code), the
/// dispatcher's words, and for a recipe that does not parse, its field-level details.
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

    /// The `check` report of this refusal.
    pub fn report(self) -> Report {
        match self.details.is_empty() {
            true => Report::failed(self.failure, self.message),
            false => Report { failure: Some(self.failure), details: self.details, ..Report::default() },
        }
    }
}

/// What is taken from the media: the schema's and the recipe's bytes, and with a trust file
/// their signatures.
#[derive(Debug)]
pub struct Files {
    pub schema: Vec<u8>,
    pub recipe: Vec<u8>,
    /// `recipe.json.sig` and `recipe.schema.json.sig`, when signatures are required.
    pub signatures: Option<[SignatureFile; 2]>,
}

/// Reads the schema, then the recipe, then (`signed`) both signatures from the media.
pub fn read(media: &dyn MediaFiles, signed: bool) -> Result<Files, Refused> {
    let schema = read_file(media, SCHEMA_FILE, MAX_SCHEMA_BYTES)?;
    let recipe = read_file(media, RECIPE_FILE, MAX_RECIPE_BYTES)?;
    let signature = |name: &str| {
        let name = signature_path(Path::new(name));
        SignatureFile::read(media.open(&name.to_string_lossy()).map(|file| file.reader))
    };
    let signatures = signed.then(|| [signature(RECIPE_FILE), signature(SCHEMA_FILE)]);
    Ok(Files { schema, recipe, signatures })
}

/// Reads one file from the media, capped. A missing or unusable schema makes the schema
/// unusable (78); a missing or unusable recipe is unreadable (66), an oversized one invalid
/// (65). A failure of the medium itself (pulled out, damaged, an image cut short) is the
/// medium's fault whichever file met it: unreadable (66), for the schema too.
fn read_file(media: &dyn MediaFiles, name: &str, cap: u64) -> Result<Vec<u8>, Refused> {
    let (missing, too_large) = match name {
        SCHEMA_FILE => (Failure::SchemaError, Failure::SchemaError),
        _ => (Failure::Unreadable, Failure::TooLarge),
    };
    let kind = |e: &std::io::Error| if medium_fault(e) { Failure::Unreadable } else { missing };
    let file = media.open(name).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => Refused::new(missing, format!("{name} on the media does not exist")),
        _ => Refused::new(kind(&e), format!("{name} on the media {e}")),
    })?;
    read_capped_from(file.reader, file.len, cap).map_err(|e| match e {
        ReadError::TooLarge { limit } => {
            Refused::new(too_large, format!("{name} on the media is larger than {limit} bytes"))
        }
        ReadError::Io(e) => Refused::new(kind(&e), format!("{name} on the media cannot be read: {e}")),
        e => Refused::new(missing, format!("{name} on the media cannot be read: {e}")),
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
/// bytes read, before anything parses them (SPEC §6a). `machine`: the server's SMBIOS UUID in
/// lower case, for a recipe bound to one.
pub fn verify(trust: &Trust, files: &Files, machine: Option<&str>) -> Result<Signer, Refused> {
    let Some([recipe_sig, schema_sig]) = &files.signatures else {
        return Err(Refused::new(Failure::Bug, "the signatures were not read"));
    };
    let signed = [(RECIPE_FILE, &files.recipe[..], recipe_sig), (SCHEMA_FILE, &files.schema[..], schema_sig)];
    trust
        .verify_all(&signed, machine)
        .map_err(|refused| Refused::new(Failure::UntrustedMedia, format!("{refused}; nothing was written or started")))
}

/// The schema compiled and the recipe parsed, and the recipe's SHA-256.
pub struct Taken {
    pub schema: Result<Schema, Refused>,
    /// How long compiling took, when it ended.
    pub schema_took: Option<Duration>,
    /// The recipe's SHA-256 in hexadecimal: `provision.recipe=sha256:` takes it.
    pub digest: String,
    pub doc: Result<Document, Refused>,
}

/// Schema and recipe, side by side: the schema compiles on a second thread while the recipe is
/// digested and parsed (for a large recipe they take about as long, and neither needs the
/// other).
pub fn compile_beside_parse(policy: SchemaPolicy, schema: Vec<u8>, recipe: Vec<u8>) -> Taken {
    let compiling = Schema::start(schema, policy);
    let digest = sha256(&recipe);
    let doc = recipe::parse(recipe).map_err(|e| {
        let report = Report::of_read_error(&e);
        let failure = report.failure.unwrap_or(Failure::InvalidJson);
        Refused { failure, message: format!("{RECIPE_FILE} on the media: {e}"), details: report.details }
    });
    let (compiled, schema_took) = compiling.finish_timed();
    let schema = compiled.map_err(|e| Refused::new(Failure::SchemaError, format!("{SCHEMA_FILE} on the media: {e}")));
    Taken { schema, schema_took, digest, doc }
}

/// The SHA-256 of `bytes` in hexadecimal.
pub fn sha256(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}
