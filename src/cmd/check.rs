//! `check FILE`: static validation of a recipe file, offline.

use std::io::{self, ErrorKind, Write};
use std::path::{Path, PathBuf};

use crate::checks::host::{self, InventoryHost};
use crate::checks::{safety::Policy, static_checks};
use crate::failure::{Exit, Failure};
use crate::inventory::saved;
use crate::issues::{printable, Code, Detail};
use crate::memory;
use crate::recipe::model::Recipe;
use crate::recipe::{self, Document, ReadError};
use crate::report::Report;
use crate::schema::{name_later_versions, Ask, Schema, SchemaError, SchemaPolicy, MAX_SCHEMA_BYTES, VERSIONS};
use crate::trust::firmware::Sysfs;
use crate::trust::{SignatureFile, Signer, Trust};

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
    /// A saved inventory to run the disk checks against (SPEC §4a): a console log holding a
    /// run's `PROVISION-INVENTORY v1` lines, or JSON with a `disks` list (`disks --format json`).
    pub inventory: Option<PathBuf>,
}

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
        Ok(Loaded { schema, doc, signer, .. }) => {
            let schema_file = args.schema.as_deref().map(|path| path.display().to_string());
            let how = Judging {
                policy: &args.policy,
                inventory: args.inventory.as_deref(),
                schema_file: schema_file.as_deref(),
                ask: Ask::Option,
            };
            Report { signature: signer.map(Box::new), ..judge(&schema, &doc, &how) }
        }
        Err(refused) => refused,
    }
}

/// What a recipe is judged with beside its schema: the image's rules, a saved inventory of the
/// server to run the target disk's checks against, the schema's file (which a refusal of the
/// schema names; none for a compiled-in version), and how a later schema version is asked for.
pub struct Judging<'a> {
    pub policy: &'a Policy,
    pub inventory: Option<&'a Path>,
    pub schema_file: Option<&'a str>,
    pub ask: Ask,
}

/// The report of a recipe read and parsed, against its compiled schema: the static checks
/// and, with a saved inventory, the target disk's checks against it. `check`, `media build`
/// and `media check` judge alike through this.
pub fn judge(schema: &Schema, doc: &Document, how: &Judging<'_>) -> Report {
    let recipe = Recipe::view(doc);
    let mut findings = match static_checks(&recipe, schema, how.policy) {
        Ok(findings) => findings,
        Err(e) => return Report::refused(Failure::SchemaError, e.to_string(), vec![e.detail(how.schema_file)]),
    };
    name_later_versions(schema, &mut findings.issues, how.ask);
    if let Some(file) = how.inventory {
        let shown = printable(&file.display().to_string()).into_owned();
        let saved = match saved::read(file) {
            Ok(saved) => saved,
            Err(reason) => return Report::failed(Failure::Usage, format!("--inventory {shown}: {reason}")),
        };
        for note in &saved.notes {
            eprintln!("provision-dispatcher: --inventory {shown}: {note}");
        }
        let host = InventoryHost::new(saved.inventory, file);
        let found = host::check_disk(&recipe, &host, &findings);
        findings.issues.extend(found.issues);
    }
    Report::of_findings(doc, findings)
}

/// A recipe and its schema, read and made ready to judge, and who signed them (with a trust
/// file).
pub struct Loaded {
    pub schema: Schema,
    /// The schema's text as read (or compiled in): what `media build` puts on the media.
    pub schema_bytes: Vec<u8>,
    pub doc: Document,
    pub signer: Option<Signer>,
}

/// The schema and the recipe of `args`, read (and with a trust file, their signatures
/// checked on those bytes); or the report that says why not (the schema's first). The schema
/// compiles on a second thread while the recipe is parsed: the two take about as long for a
/// large recipe, and neither needs the other.
pub fn load(args: &CheckArgs) -> Result<Loaded, Report> {
    let schema_bytes = args.schema.as_deref().map(read_schema).transpose();
    let recipe_bytes = recipe::read_bytes(&args.file);
    let schema_bytes = schema_bytes.map_err(|e| schema_refused(args, &e))?;
    let recipe_bytes = recipe_bytes.map_err(|e| Report::of_read_error(&e))?;
    let signer = match &args.allowed_signers {
        Some(trust_file) => Some(verify(args, trust_file, &recipe_bytes, schema_bytes.as_deref())?),
        None => None,
    };
    let (schema_bytes, policy) = match schema_bytes {
        None => {
            let version = VERSIONS.iter().find(|v| v.number == args.schema_version).unwrap_or(&VERSIONS[0]);
            (version.text.as_bytes().to_vec(), SchemaPolicy::default())
        }
        Some(bytes) => (bytes, args.schema_policy),
    };
    let compiling = Schema::start(schema_bytes.clone(), policy);
    let doc = recipe::parse(recipe_bytes);
    let schema = compiling.finish().map_err(|e| schema_refused(args, &e))?;
    let doc = doc.map_err(|e| Report::of_read_error(&e))?;
    Ok(Loaded { schema, schema_bytes, doc, signer })
}

/// The report of a schema that cannot be used (78): its detail names the `--schema` file, or
/// none for a compiled-in version.
pub fn schema_refused(args: &CheckArgs, error: &SchemaError) -> Report {
    let file = args.schema.as_deref().map(|path| path.display().to_string());
    Report::refused(Failure::SchemaError, error.to_string(), vec![error.detail(file.as_deref())])
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
/// on the media: an unusable trust file is 78, a refused signature 77. The signer is the
/// recipe's.
fn verify(args: &CheckArgs, trust_file: &Path, recipe: &[u8], schema: Option<&[u8]>) -> Result<Signer, Report> {
    let trust = Trust::load(trust_file).map_err(|e| {
        let detail = Detail::of_file(trust_file.display().to_string(), Code::TrustFileUnusable, e.clone());
        Report::refused(Failure::TrustFileUnusable, e, vec![detail])
    })?;
    let machine = args.machine_uuid.clone().or_else(|| Sysfs::default().machine_uuid());
    let recipe_name = args.file.display().to_string();
    let recipe_sig = SignatureFile::beside(&args.file);
    let mut files = vec![(recipe_name.as_str(), recipe, &recipe_sig)];
    let schema_name = args.schema.as_deref().map(|path| path.display().to_string());
    let schema_sig = args.schema.as_deref().map(SignatureFile::beside);
    if let (Some(name), Some(bytes), Some(sig)) = (&schema_name, schema, &schema_sig) {
        files.push((name, bytes, sig));
    }
    trust
        .verify_all(&files, machine.as_deref())
        .map_err(|refused| Report::refused(Failure::UntrustedMedia, refused.to_string(), refused.details()))
}
