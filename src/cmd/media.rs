//! `media build` and `media check` (SPEC §6c): task media made and read by the very binary a
//! controller checks recipes with. `build` checks the recipe as `check` does (`check::load`,
//! `check::judge`), then writes the ISO the boot reads (`crate::iso9660::write`), signed in
//! process or with signatures made elsewhere. `check` reads a task ISO in user space, or a
//! directory, through the boot path's own code (`crate::task`), and judges it as `check` does.

use std::fs::File;
use std::io::{self, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::check::{self, CheckArgs, Format, Judging};
use super::run::defaults;
use crate::failure::{Exit, Failure};
use crate::iso9660::write::{image, Entry};
use crate::issues::{hex, printable, Code, Detail};
use crate::media::area::{self, AreaError, Header};
use crate::media::iso::IsoFiles;
use crate::media::label::{self, Filesystem};
use crate::media::mount::Root;
use crate::media::MediaFiles;
use crate::report::Report;
use crate::schema::Ask;
use crate::task::{self, Refused, RECIPE_FILE, SCHEMA_FILE};
use crate::trust::firmware::Sysfs;
use crate::trust::{self, sign, signature_path, SignatureFile, Signer, Trust, NAMESPACE};

/// Where the signatures of built media come from.
#[derive(Debug, Default)]
pub enum Signing {
    #[default]
    Unsigned,
    /// `--sign KEY`: signed here, with this OpenSSH private key.
    Key(PathBuf),
    /// `--signatures DIR`: `recipe.json.sig` and `recipe.schema.json.sig` made elsewhere.
    Given(PathBuf),
}

#[derive(Debug, Default)]
pub struct BuildArgs {
    /// The recipe (`file`), the schema asked for, the format: checked as `check` checks.
    pub check: CheckArgs,
    pub output: PathBuf,
    pub signing: Signing,
    /// `--bind UUID`: the server the signatures are bound to (lower case).
    pub bind: Option<String>,
    /// A trust file the signatures must satisfy before they go on the media.
    pub allowed_signers: Option<PathBuf>,
}

/// `media check`'s arguments: `check`'s, with the media (a task ISO, a file or a block device,
/// or a directory) as `file`; the schema is the media's own. A trust file means the media's
/// files need their signatures, as at boot.
#[derive(Debug, Default)]
pub struct CheckMediaArgs {
    pub check: CheckArgs,
}

/// What a media command tells besides the report: where the media is, what it holds, and what
/// a controller records of it.
#[derive(Debug, Default, Serialize)]
pub(super) struct Media {
    pub path: String,
    /// The files on the media, by name.
    pub files: Vec<&'static str>,
    /// The image's size (`build`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// The recipe's SHA-256: `provision.recipe=sha256:` takes it.
    pub recipe_sha256: Option<String>,
    pub schema_id: Option<String>,
    pub signer: Option<SignerView>,
    /// The maintenance ISO whose task area holds the task (`check` of such an ISO, `embed`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub embedded: Option<Embedded>,
}

/// A task area of the maintenance ISO, and the task in it.
#[derive(Debug, Serialize)]
pub(super) struct Embedded {
    /// The maintenance ISO read (`check`) or written (`embed`).
    pub iso: String,
    pub area_bytes: u64,
    /// `null`: the area is empty.
    pub task: Option<EmbeddedTask>,
    /// Written by `embed`, not only read.
    #[serde(skip)]
    pub written: bool,
}

/// The task ISO in an area: its size and SHA-256 (what `sha256sum task.iso` prints), and how
/// it is stored.
#[derive(Debug, Serialize)]
pub(super) struct EmbeddedTask {
    pub bytes: u64,
    pub sha256: String,
    pub stored_bytes: u64,
    pub compression: &'static str,
}

impl Embedded {
    pub fn new(iso: &Path, header: &Header) -> Embedded {
        let task = header.task.as_ref().map(|task| EmbeddedTask {
            bytes: task.task_bytes,
            sha256: hex(&task.task_sha256),
            stored_bytes: task.stored_bytes,
            compression: task.compression.name(),
        });
        Embedded { iso: iso.display().to_string(), area_bytes: header.area_bytes, task, written: false }
    }
}

impl Embedded {
    /// What the area holds, in words; after `embed`, what it wrote.
    fn line(&self) -> String {
        let iso = printable(&self.iso);
        let Some(task) = &self.task else {
            return format!("{iso}: its task area ({} bytes) is empty", self.area_bytes);
        };
        let verb = if self.written { "wrote" } else { "read" };
        format!(
            "{verb} {iso}: the task ISO ({} bytes, sha256:{}) embedded in its task area, {} of its {} bytes ({})",
            task.bytes,
            task.sha256,
            area::HEADER_BYTES + task.stored_bytes,
            self.area_bytes,
            task.compression
        )
    }
}

/// The signer: the trust file's principal when one was given, the key's fingerprint (as
/// `ssh-keygen -l` prints it) and the namespace signed in.
#[derive(Debug, Serialize)]
pub(super) struct SignerView {
    principal: Option<String>,
    fingerprint: String,
    namespace: String,
}

impl From<Signer> for SignerView {
    fn from(signer: Signer) -> SignerView {
        let principal = Some(signer.principal).filter(|p| !p.is_empty());
        SignerView { principal, fingerprint: signer.fingerprint, namespace: signer.namespace }
    }
}

/// `media build`: the report of `check`, then the ISO written (atomically) when the recipe is
/// valid and its signatures good. Nothing is written otherwise.
pub fn build(args: &BuildArgs, out: &mut impl Write) -> io::Result<Exit> {
    let file = args.check.file.display().to_string();
    check::report_when_memory_runs_out(args.check.format, file.clone());
    let mut media = Media { path: args.output.display().to_string(), ..Media::default() };
    let report = match build_media(args, &mut media) {
        Ok(report) => report,
        Err(refused) => refused.report(),
    };
    let written = report.valid().then_some(&media);
    print(out, args.check.format, &report, &file, written)?;
    Ok(report.failure.map_or(Exit::Ok, Failure::exit))
}

fn build_media(args: &BuildArgs, media: &mut Media) -> Result<Report, Refused> {
    let loaded = match check::load(&args.check) {
        Ok(loaded) => loaded,
        Err(report) => return Ok(report),
    };
    let schema_file = args.check.schema.as_deref().map(|path| path.display().to_string());
    let how =
        Judging { policy: &args.check.policy, inventory: None, schema_file: schema_file.as_deref(), ask: Ask::Option };
    let report = check::judge(&loaded.schema, &loaded.doc, &how);
    if !report.valid() {
        return Ok(report);
    }
    let recipe = loaded.doc.text().as_bytes();
    let schema = &loaded.schema_bytes[..];
    media.recipe_sha256 = Some(task::sha256(recipe));
    media.schema_id = loaded.schema.id().map(str::to_owned);
    let signatures = signatures(args, recipe, schema)?;
    let sigs = match &signatures {
        Some((signer, [recipe_sig, schema_sig])) => {
            media.signer = Some(signer.clone().into());
            [Some(&recipe_sig[..]), Some(&schema_sig[..])]
        }
        None => [None, None],
    };
    let bytes = task_image(recipe, schema, sigs, media)?;
    write_atomically(&args.output, &bytes)?;
    media.bytes = Some(bytes.len() as u64);
    Ok(report)
}

/// The task ISO of these files, as `build` writes it (the signatures of the recipe and the
/// schema, those given); `media.files` names what it holds.
pub(super) fn task_image(
    recipe: &[u8],
    schema: &[u8],
    signatures: [Option<&[u8]>; 2],
    media: &mut Media,
) -> Result<Vec<u8>, Refused> {
    let names = [signature_name(RECIPE_FILE), signature_name(SCHEMA_FILE)];
    let mut entries = vec![Entry::file(RECIPE_FILE, recipe), Entry::file(SCHEMA_FILE, schema)];
    media.files = vec![RECIPE_FILE, SCHEMA_FILE];
    for ((name, signature), shown) in names.iter().zip(signatures).zip(SIGNATURE_FILES) {
        if let Some(bytes) = signature {
            entries.push(Entry::file(name, bytes));
            media.files.push(shown);
        }
    }
    image(defaults::LABEL, &entries).map_err(|e| Refused::new(Failure::Bug, e.to_string()))
}

/// The signatures' names on the media.
pub(super) const SIGNATURE_FILES: [&str; 2] = ["recipe.json.sig", "recipe.schema.json.sig"];

fn signature_name(file: &str) -> String {
    signature_path(Path::new(file)).display().to_string()
}

/// The signer, and the signatures of the recipe and of the schema.
type Signed = (Signer, [Vec<u8>; 2]);

/// The two signatures and their signer: made here (`--sign`), or taken (`--signatures`); either
/// way each must be a good signature of the bytes going on the media, in the namespace asked
/// for (`--bind`), and with a trust file, by a key it holds in a namespace it allows.
fn signatures(args: &BuildArgs, recipe: &[u8], schema: &[u8]) -> Result<Option<Signed>, Refused> {
    let trust = args.allowed_signers.as_deref().map(Trust::load).transpose();
    let trust = trust.map_err(|e| Refused::new(Failure::TrustFileUnusable, e))?;
    let namespace = match &args.bind {
        Some(uuid) => format!("{NAMESPACE}@{uuid}"),
        None => NAMESPACE.to_owned(),
    };
    let sigs = match &args.signing {
        Signing::Unsigned => return Ok(None),
        Signing::Key(path) => {
            let key = sign::load_key(path).map_err(|e| Refused::new(Failure::Usage, e))?;
            let signed = |content| sign::sign(&key, &namespace, content).map_err(|e| Refused::new(Failure::Bug, e));
            [SignatureFile::Read(signed(recipe)?), SignatureFile::Read(signed(schema)?)]
        }
        Signing::Given(dir) => {
            [SignatureFile::beside(&dir.join(RECIPE_FILE)), SignatureFile::beside(&dir.join(SCHEMA_FILE))]
        }
    };
    let files = [(RECIPE_FILE, recipe, &sigs[0]), (SCHEMA_FILE, schema, &sigs[1])];
    let untrusted = |why: String, details| Refused {
        failure: Failure::UntrustedMedia,
        message: format!("{why}; nothing was written"),
        details,
    };
    let mut signer = None;
    for (name, content, sig) in files {
        let good = trust::self_check(name, content, sig).map_err(|e| untrusted(e.to_string(), vec![e.detail()]))?;
        if !good.namespace.eq_ignore_ascii_case(&namespace) {
            let signed = format!("{}{}", name, trust::SIGNATURE_SUFFIX);
            let why = format!("{signed} is signed in namespace {}, not {namespace}", good.namespace);
            return Err(untrusted(why.clone(), vec![Detail::of_file(signed, Code::WrongNamespace, why)]));
        }
        signer.get_or_insert(good);
    }
    let mut signer = signer.expect("two files were checked");
    if let Some(trust) = &trust {
        signer = trust.verify_all(&files, args.bind.as_deref()).map_err(|r| untrusted(r.to_string(), r.details()))?;
    }
    let [recipe_sig, schema_sig] = sigs.map(|sig| match sig {
        SignatureFile::Read(bytes) => bytes,
        _ => unreachable!("a good signature was read"),
    });
    Ok(Some((signer, [recipe_sig, schema_sig])))
}

/// Writes the image at `path`, replacing any file there whole or not at all.
fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), Refused> {
    write_file_at(path, |file| file.write_all(bytes))
}

/// Writes the file at `path` (mode 0644), replacing any file there whole or not at all: `fill`
/// writes its contents.
pub(super) fn write_file_at(path: &Path, fill: impl FnOnce(&mut File) -> io::Result<()>) -> Result<(), Refused> {
    let cannot = |e: &dyn std::fmt::Display| {
        Refused::new(Failure::OutputsUnwritable, format!("cannot write {}: {e}", path.display()))
    };
    let name = path.file_name().and_then(|n| n.to_str()).ok_or_else(|| cannot(&"it names no file"))?;
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    crate::atomic::write_file_with(dir, name, 0o644, fill).map_err(|e| cannot(&e))
}

/// `media check`: the media read as the boot reads it, judged as `check` judges, short of the
/// checks that need the server itself.
pub fn check(args: &CheckMediaArgs, out: &mut impl Write) -> io::Result<Exit> {
    let args = &args.check;
    let file = format!("{}/{RECIPE_FILE}", args.file.display());
    check::report_when_memory_runs_out(args.format, file.clone());
    let mut media = Media { path: args.file.display().to_string(), ..Media::default() };
    let report = match open_media(&args.file, &mut media) {
        Ok(opened) => judge_media(args, &mut media, &*opened, false).map(|(report, _)| report),
        Err(refused) => Err(refused),
    };
    let report = report.unwrap_or_else(Refused::report);
    print(out, args.format, &report, &file, Some(&media))?;
    Ok(report.failure.map_or(Exit::Ok, Failure::exit))
}

/// The task's files as they were judged, for `embed` to write as `build` would.
pub(super) struct Kept {
    pub recipe: Vec<u8>,
    pub schema: Vec<u8>,
    /// The signatures of both, when a trust file made them required (and checked them).
    pub signatures: Option<[Vec<u8>; 2]>,
}

/// The media's task read through `opened` as the boot reads it, and judged; with `keep`, the
/// bytes of the recipe and the schema judged.
pub(super) fn judge_media(
    args: &CheckArgs,
    media: &mut Media,
    opened: &dyn MediaFiles,
    keep: bool,
) -> Result<(Report, Option<Kept>), Refused> {
    let trust = match args.allowed_signers.as_deref() {
        None => None,
        Some(file) => Some(Trust::load(file).map_err(|e| {
            Refused::of_file(Failure::TrustFileUnusable, &file.display().to_string(), Code::TrustFileUnusable, e)
        })?),
    };
    let recipe = task::read_recipe(opened, &|| crate::shutdown::stop_requested().is_some())?;
    media.recipe_sha256 = Some(recipe.sha256.clone());
    let files = task::read(opened, recipe, trust.is_some())?;
    media.files = match trust {
        Some(_) => vec![RECIPE_FILE, SCHEMA_FILE, SIGNATURE_FILES[0], SIGNATURE_FILES[1]],
        None => vec![RECIPE_FILE, SCHEMA_FILE],
    };
    if let Some(trust) = &trust {
        let machine = args.machine_uuid.clone().or_else(|| Sysfs::default().machine_uuid());
        media.signer = Some(task::verify(trust, &files, machine.as_deref())?.into());
    }
    let kept = keep.then(|| Kept {
        recipe: files.recipe.clone(),
        schema: files.schema.clone(),
        signatures: files.signatures.as_ref().map(|sigs| {
            sigs.each_ref().map(|sig| match sig {
                SignatureFile::Read(bytes) => bytes.clone(),
                _ => unreachable!("the signatures were checked"),
            })
        }),
    });
    let taken = task::compile_beside_parse(args.schema_policy, files.schema, files.recipe);
    let schema = taken.schema?;
    media.schema_id = schema.id().map(str::to_owned);
    let doc = taken.doc?;
    let how = Judging {
        policy: &args.policy,
        inventory: args.inventory.as_deref(),
        schema_file: Some(SCHEMA_FILE),
        ask: Ask::Media,
    };
    Ok((check::judge(&schema, &doc, &how), kept))
}

/// The media at `path`: a directory as the boot reads a mounted one, a task ISO (a file or a
/// block device) read in user space, or the task embedded in a maintenance ISO's area (noted
/// in `media`), read as the boot reads it. An image the boot would not take by its label is
/// refused as the boot would not find it.
fn open_media(path: &Path, media: &mut Media) -> Result<Box<dyn MediaFiles>, Refused> {
    let shown = path.display();
    let metadata =
        std::fs::metadata(path).map_err(|e| Refused::new(Failure::MediaNotFound, format!("{shown}: {e}")))?;
    let unmountable = |why: String| Refused::new(Failure::MediaUnmountable, format!("{shown} {why}"));
    if metadata.is_dir() {
        return Ok(Box::new(Root::open(path).map_err(|e| unmountable(format!("cannot be opened: {e}")))?));
    }
    let file = File::open(path).map_err(|e| unmountable(format!("cannot be opened: {e}")))?;
    match label::probe(&file).map_err(|e| unmountable(format!("cannot be read: {e}")))? {
        Filesystem::Iso9660 { volume_id } if volume_id == defaults::LABEL => {}
        Filesystem::Iso9660 { volume_id } if volume_id == area::VOLUME_ID => {
            let (header, task) = embedded_task(path, file)?;
            media.embedded = Some(Embedded::new(path, &header));
            let task = task.ok_or_else(|| {
                Refused::new(
                    Failure::MediaNotFound,
                    format!("{shown} is a maintenance ISO whose task area is empty: no task is embedded (media embed writes one)"),
                )
            })?;
            let len = task.len() as u64;
            let image = IsoFiles::new(task, len)
                .map_err(|e| unmountable(format!("holds a task that cannot be read as the boot would: {e}")))?;
            return Ok(Box::new(image));
        }
        Filesystem::Iso9660 { volume_id } => {
            return Err(Refused::new(
                Failure::MediaNotFound,
                format!(
                    "{shown} has the volume id {volume_id:?}, not {:?}: the boot looks for the task media by that label and would not take it",
                    defaults::LABEL
                ),
            ))
        }
        _ => return Err(unmountable("is not an ISO 9660 image".into())),
    }
    let image =
        IsoFiles::open(path).map_err(|e| unmountable(format!("cannot be read as the boot would mount it: {e}")))?;
    Ok(Box::new(image))
}

/// The task ISO embedded in the maintenance ISO `file` (at `path`), read as the boot reads its
/// area: the header, then the bytes stored, checked against both digests (`None`: the area is
/// empty). A damaged area is refused as the boot would refuse it.
fn embedded_task(path: &Path, mut file: File) -> Result<(Header, Option<Vec<u8>>), Refused> {
    let shown = path.display();
    let len = file.seek(SeekFrom::End(0)).map_err(|e| Refused::new(Failure::Unreadable, format!("{shown}: {e}")))?;
    let area = area::in_image(file, len).map_err(|e| area_refused(path, e))?;
    let header = area.header().map_err(|e| area_refused(path, e))?;
    let task = area.task().map_err(|e| area_refused(path, e))?;
    Ok(task.map_or((header, None), |(header, task)| (header, Some(task))))
}

/// Why the task area of the maintenance ISO at `path` cannot be used: not that ISO, or no area
/// (66, no task media); damaged, of another version, not readable (66, as the boot refuses such
/// an area: the task media cannot be mounted).
pub(super) fn area_refused(path: &Path, e: AreaError) -> Refused {
    let failure = match e {
        AreaError::NotMaintenance(_) | AreaError::NotOurs => Failure::MediaNotFound,
        AreaError::Version(_) | AreaError::Corrupt(_) | AreaError::Io(_) => Failure::MediaUnmountable,
    };
    Refused::new(failure, format!("{}: {e}", path.display()))
}

/// The report as `check` prints it, then what the media holds (`None`: nothing was written).
pub(super) fn print(
    out: &mut impl Write,
    format: Format,
    report: &Report,
    file: &str,
    media: Option<&Media>,
) -> io::Result<()> {
    match format {
        Format::Json => {
            let mut object: serde_json::Value = serde_json::from_str(&report.to_json()).expect("a report is JSON");
            object["media"] = serde_json::to_value(media).expect("serializable");
            writeln!(out, "{object}")
        }
        Format::Human => {
            write!(out, "{}", report.to_human(file))?;
            let Some(media) = media else { return Ok(()) };
            if let Some(embedded) = &media.embedded {
                writeln!(out, "{}", embedded.line())?;
            }
            if let Some(bytes) = media.bytes {
                writeln!(
                    out,
                    "wrote {}: volume {}, {} files, {bytes} bytes",
                    printable(&media.path),
                    defaults::LABEL,
                    media.files.len()
                )?;
            }
            if let Some(digest) = &media.recipe_sha256 {
                writeln!(out, "recipe sha256:{digest} (provision.recipe=sha256:{digest} takes this media only)")?;
            }
            if let Some(id) = &media.schema_id {
                writeln!(out, "schema {}", printable(id))?;
            }
            if let Some(signer) = &media.signer {
                let principal =
                    signer.principal.as_deref().map(|p| format!(", principal {}", printable(p))).unwrap_or_default();
                writeln!(out, "signer {}, namespace {}{principal}", signer.fingerprint, signer.namespace)?;
            }
            Ok(())
        }
    }
}
