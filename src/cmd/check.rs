//! `check FILE`: static validation of a recipe file, offline.

use std::io::{self, ErrorKind, Write};
use std::path::{Path, PathBuf};

use crate::checks::host::{self, InventoryHost};
use crate::checks::{safety::Policy, static_checks};
use crate::disks::verdict::Inventory;
use crate::failure::{Exit, Failure};
use crate::memory;
use crate::recipe::model::Recipe;
use crate::recipe::{self, Document, ReadError};
use crate::report::Report;
use crate::schema::{Schema, SchemaError, SchemaPolicy, MAX_SCHEMA_BYTES, VERSIONS};
use crate::trust::firmware::Sysfs;
use crate::trust::{SignatureFile, Trust};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    #[default]
    Human,
    Json,
}

#[derive(Debug, Default)]
pub struct CheckArgs {
    pub file: PathBuf,
    pub schema: Option<PathBuf>,
    /// The compiled-in schema version used when `schema` is `None` (`--schema-version`).
    pub schema_version: u32,
    pub format: Format,
    pub policy: Policy,
    pub schema_policy: SchemaPolicy,
    /// A trust file: then the recipe and the schema given need `FILE.sig` beside them, by a
    /// key it holds. The compiled-in schema is the binary's own and needs none.
    pub allowed_signers: Option<PathBuf>,
    /// The server a bound recipe is checked for; default: this machine's.
    pub machine_uuid: Option<String>,
    /// A saved inventory (`disks --format json`) to run the disk checks against (SPEC §4a).
    pub inventory: Option<PathBuf>,
}

/// The largest inventory read: thousands of disks' identities.
const MAX_INVENTORY_BYTES: u64 = 4 << 20;

/// Validates the file and prints its report on `out`. Should memory run out first, the report
/// says so instead, straight on standard output, and the exit code is 70.
pub fn run(args: &CheckArgs, out: &mut impl io::Write) -> io::Result<Exit> {
    report_when_memory_runs_out(args.format, args.file.display().to_string());
    let report = check(args);
    match args.format {
        Format::Json => {
            let mut out = io::BufWriter::new(out);
            report.write_json(&mut out)?;
            out.flush()?;
        }
        Format::Human => write!(out, "{}", report.to_human(&args.file.display().to_string()))?,
    }
    Ok(report.failure.map_or(Exit::Ok, Failure::exit))
}

/// Should memory run out, the report says so in `format`, straight on standard output (the
/// exit code is 70).
pub fn report_when_memory_runs_out(format: Format, file: String) {
    memory::on_exhaustion(move |exhaustion| {
        let report = Report::failed(Failure::OutOfMemory, exhaustion.to_string());
        let text = match format {
            Format::Json => report.to_json() + "\n",
            Format::Human => report.to_human(&file),
        };
        // Not through `out`: its lock may be held by the allocation that failed.
        memory::write_raw(libc::STDOUT_FILENO, text.as_bytes());
    });
}

/// The report of one recipe file.
pub fn check(args: &CheckArgs) -> Report {
    match load(args) {
        Ok(loaded) => judge(&loaded.schema, &loaded.doc, &args.policy, args.inventory.as_deref()),
        Err(refused) => refused,
    }
}

/// The report of a recipe read and parsed, against its compiled schema: the static checks
/// and, with a saved inventory, the target disk's checks against it. `check`, `media build`
/// and `media check` judge alike through this.
pub fn judge(schema: &Schema, doc: &Document, policy: &Policy, inventory: Option<&Path>) -> Report {
    let recipe = Recipe::view(doc);
    let mut findings = match static_checks(&recipe, schema, policy) {
        Ok(findings) => findings,
        Err(e) => return Report::failed(Failure::SchemaError, e.to_string()),
    };
    if let Some(file) = inventory {
        let host = match read_inventory(file) {
            Ok(inventory) => InventoryHost::new(inventory),
            Err(reason) => return Report::failed(Failure::Usage, reason),
        };
        let found = host::check_disk(&recipe, &host, &findings);
        findings.issues.extend(found.issues);
    }
    Report::of_findings(doc, findings)
}

/// A recipe and its schema, read and made ready to judge.
pub struct Loaded {
    pub schema: Schema,
    /// The schema's text as read (or compiled in): what `media build` puts on the media.
    pub schema_bytes: Vec<u8>,
    pub doc: Document,
}

/// The schema and the recipe of `args`, read (and with a trust file, their signatures
/// checked on those bytes); or the report that says why not (the schema's first). The schema
/// compiles on a second thread while the recipe is parsed: the two take about as long for a
/// large recipe, and neither needs the other.
pub fn load(args: &CheckArgs) -> Result<Loaded, Report> {
    let schema_bytes = args.schema.as_deref().map(read_schema).transpose();
    let recipe_bytes = recipe::read_bytes(&args.file);
    let schema_bytes = schema_bytes.map_err(|e| Report::failed(Failure::SchemaError, e.to_string()))?;
    let recipe_bytes = recipe_bytes.map_err(|e| Report::of_read_error(&e))?;
    if let Some(trust_file) = &args.allowed_signers {
        verify(args, trust_file, &recipe_bytes, schema_bytes.as_deref())?;
    }
    let (schema_bytes, policy) = match schema_bytes {
        None => {
            let version = VERSIONS.iter().find(|v| v.number == args.schema_version).unwrap_or(&VERSIONS[0]);
            (version.text.as_bytes().to_vec(), SchemaPolicy::default())
        }
        Some(bytes) => (bytes, args.schema_policy),
    };
    let compiling = Schema::start(schema_bytes.clone(), policy);
    let doc = recipe::parse(recipe_bytes);
    let schema = compiling.finish().map_err(|e| Report::failed(Failure::SchemaError, e.to_string()))?;
    let doc = doc.map_err(|e| Report::of_read_error(&e))?;
    Ok(Loaded { schema, schema_bytes, doc })
}

/// A saved inventory: `disks --format json` of the server, capped; why not, in words.
fn read_inventory(file: &Path) -> Result<Inventory, String> {
    let bytes = std::fs::File::open(file)
        .map_err(ReadError::Io)
        .and_then(|f| recipe::read::read_capped(f, MAX_INVENTORY_BYTES))
        .map_err(|e| format!("cannot read --inventory {}: {e}", file.display()))?;
    serde_json::from_slice(&bytes).map_err(|e| {
        format!("--inventory {} is not the JSON of `provision-dispatcher disks --format json`: {e}", file.display())
    })
}

/// The schema file's bytes, capped.
fn read_schema(path: &Path) -> Result<Vec<u8>, SchemaError> {
    let file = std::fs::File::open(path).map_err(|e| {
        let e = if e.kind() == ErrorKind::NotFound { io::Error::new(e.kind(), "no such file") } else { e };
        SchemaError::Unreadable(ReadError::Io(e))
    })?;
    recipe::read::read_capped(file, MAX_SCHEMA_BYTES).map_err(SchemaError::Unreadable)
}

/// The recipe's and the schema's signatures (`FILE.sig` beside each), as `run` checks those
/// on the media: an unusable trust file is 78, a refused signature 77.
fn verify(args: &CheckArgs, trust_file: &Path, recipe: &[u8], schema: Option<&[u8]>) -> Result<(), Report> {
    let trust = Trust::load(trust_file).map_err(|e| Report::failed(Failure::TrustFileUnusable, e))?;
    let machine = args.machine_uuid.clone().or_else(|| Sysfs::default().machine_uuid());
    let recipe_name = args.file.display().to_string();
    let recipe_sig = SignatureFile::beside(&args.file);
    let mut files = vec![(recipe_name.as_str(), recipe, &recipe_sig)];
    let schema_name = args.schema.as_deref().map(|path| path.display().to_string());
    let schema_sig = args.schema.as_deref().map(SignatureFile::beside);
    if let (Some(name), Some(bytes), Some(sig)) = (&schema_name, schema, &schema_sig) {
        files.push((name, bytes, sig));
    }
    trust.verify_all(&files, machine.as_deref()).map(drop).map_err(|e| Report::failed(Failure::UntrustedMedia, e))
}
