//! `media embed` (SPEC §6c): a task written into the area the maintenance ISO reserves for it
//! (`crate::media::area`), so that a server with one virtual drive boots one ISO, as
//! coreos-installer's `iso ignition embed` writes a config into a live ISO. The task is read
//! and judged as `media check` judges it (a directory is then written as `media build` writes
//! an ISO); nothing but the area's bytes changes, so the image still boots every way it did.
//! `--remove` empties the area again: the image as it was built, byte for byte.

use std::fs::{File, OpenOptions};
use std::io::{self, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::check::{self, CheckArgs, Format};
use super::media::{area_refused, judge_media, print, task_image, write_file_at, Embedded, Media, SIGNATURE_FILES};
use super::run::defaults;
use crate::failure::{Exit, Failure};
use crate::files;
use crate::issues::{hex, printable};
use crate::media::area::{self, Header, HEADER_BYTES, MAX_TASK_BYTES};
use crate::media::iso::IsoFiles;
use crate::media::label::{self, Filesystem};
use crate::media::mount::Root;
use crate::media::MediaFiles;
use crate::report::Report;
use crate::task::{Refused, RECIPE_FILE};
use crate::trust::SignatureFile;

/// Where the maintenance ISO with the task goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Destination {
    /// `-o OUT`: a copy, written whole or not at all; the input is not changed.
    Output(PathBuf),
    /// `--in-place`: the area of the given ISO itself (a copy the controller made).
    InPlace,
}

#[derive(Debug)]
pub struct EmbedArgs {
    /// The task (`file`: a task ISO or a directory of its files), judged as `media check`
    /// judges it, with its options.
    pub check: CheckArgs,
    pub maintenance: PathBuf,
    pub to: Destination,
    /// Replace a task the area already holds.
    pub force: bool,
}

#[derive(Debug)]
pub struct RemoveArgs {
    pub maintenance: PathBuf,
    pub to: Destination,
    pub format: Format,
}

/// The maintenance ISO: the file, where its area is and what its header says.
struct Maintenance {
    file: File,
    start: u64,
    len: u64,
    header: Header,
}

impl Maintenance {
    /// The maintenance ISO at `path` (a regular file, not through a symlink), opened for writing
    /// too when its own area is to be written. Not that image, no area, a header not ours: 66.
    fn open(path: &Path, writable: bool) -> Result<Maintenance, Refused> {
        let cannot = |e: io::Error| Refused::new(Failure::Unreadable, format!("{}: {e}", path.display()));
        let file = OpenOptions::new()
            .read(true)
            .write(writable)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(path)
            .map_err(cannot)?;
        let metadata = file.metadata().map_err(cannot)?;
        if !metadata.is_file() {
            return Err(cannot(io::Error::new(io::ErrorKind::InvalidInput, "is not a regular file")));
        }
        let area = area::in_image(&file, metadata.len()).map_err(|e| area_refused(path, e))?;
        let header = area.header().map_err(|e| area_refused(path, e))?;
        let (start, len) = (area.start, area.len);
        Ok(Maintenance { file, start, len, header })
    }

    /// Writes `bytes` at the start of the area of `file` (this ISO, or a copy of it), zeros
    /// after them to the area's end, and syncs: no byte outside the area is written.
    fn write_area(&self, file: &File, bytes: &[u8]) -> io::Result<()> {
        file.write_all_at(bytes, self.start)?;
        let zeros = vec![0u8; 64 * 1024];
        let mut at = bytes.len() as u64;
        while at < self.len {
            let n = zeros.len().min((self.len - at) as usize);
            file.write_all_at(&zeros[..n], self.start + at)?;
            at += n as u64;
        }
        file.sync_all()
    }

    /// The ISO with `bytes` in its area, where `to` says; the path written.
    fn write(&self, path: &Path, to: &Destination, bytes: &[u8]) -> Result<PathBuf, Refused> {
        match to {
            Destination::InPlace => {
                self.write_area(&self.file, bytes).map_err(|e| {
                    Refused::new(Failure::OutputsUnwritable, format!("cannot write {}: {e}", path.display()))
                })?;
                Ok(path.to_owned())
            }
            Destination::Output(out) => {
                // The copy is the kernel's (copy_file_range): no byte of it passes through here,
                // whatever the ISO's size.
                write_file_at(out, |copy| {
                    let mut source = &self.file;
                    source.seek(SeekFrom::Start(0))?;
                    io::copy(&mut source, copy)?;
                    self.write_area(copy, bytes)
                })?;
                Ok(out.clone())
            }
        }
    }
}

/// `media embed MAINTENANCE TASK`: the task judged as `media check` judges it, then written into
/// the maintenance ISO's area. Nothing is written when the task is refused, does not fit, or
/// the area already holds one (unless `--force`).
pub fn embed(args: &EmbedArgs, out: &mut impl Write) -> io::Result<Exit> {
    let file = format!("{}/{RECIPE_FILE}", args.check.file.display());
    check::report_when_memory_runs_out(args.check.format, file.clone());
    let mut media = Media { path: args.check.file.display().to_string(), ..Media::default() };
    let report = embed_task(args, &mut media).unwrap_or_else(Refused::report);
    print(out, args.check.format, &report, &file, Some(&media))?;
    Ok(report.failure.map_or(Exit::Ok, Failure::exit))
}

fn embed_task(args: &EmbedArgs, media: &mut Media) -> Result<Report, Refused> {
    let maintenance = Maintenance::open(&args.maintenance, args.to == Destination::InPlace)?;
    if let (Some(task), false) = (&maintenance.header.task, args.force) {
        return Err(Refused::new(
            Failure::OutputsUnwritable,
            format!(
                "{}'s task area already holds a task (the task ISO of sha256:{}): `media embed --remove` gives the image back as it was built, --force replaces the task",
                args.maintenance.display(),
                hex(&task.task_sha256)
            ),
        ));
    }
    let (report, task) = judged_task(&args.check, media)?;
    let Some(task) = task else { return Ok(report) };
    let (header, bytes) = area::pack(&task, maintenance.len).map_err(|needed| {
        Refused::new(
            Failure::OutputsUnwritable,
            format!(
                "the task ISO ({} bytes) does not fit the task area of {}: it takes {needed} bytes (a {HEADER_BYTES}-byte header, the task deflated), the area has {}; attach the task ISO as a second drive instead",
                task.len(),
                args.maintenance.display(),
                maintenance.len
            ),
        )
    })?;
    let written = maintenance.write(&args.maintenance, &args.to, &bytes)?;
    media.embedded = Some(Embedded { written: true, ..Embedded::new(&written, &header) });
    Ok(report)
}

/// The task at `args.file`, read and judged as `media check` does, and when it is valid, the
/// task ISO to embed: an ISO's own bytes (those judged), or a directory's files written as
/// `media build` writes them (the bytes judged, and the signatures beside them).
fn judged_task(args: &CheckArgs, media: &mut Media) -> Result<(Report, Option<Vec<u8>>), Refused> {
    let path = &args.file;
    let shown = path.display();
    let unreadable = |why: String| Refused::new(Failure::Unreadable, format!("{shown} {why}"));
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir()) {
        let root = Root::open(path).map_err(|e| unreadable(format!("cannot be opened: {e}")))?;
        let (report, kept) = judge_media(args, media, &root, true)?;
        let Some(kept) = kept.filter(|_| report.valid()) else { return Ok((report, None)) };
        let signatures = match kept.signatures {
            Some(signatures) => signatures.map(Some),
            None => {
                let read = |name: &str| match SignatureFile::read(root.open(name).map(|file| file.reader)) {
                    SignatureFile::Read(bytes) => Ok(Some(bytes)),
                    SignatureFile::Missing => Ok(None),
                    SignatureFile::Unusable(why) => Err(unreadable(format!("holds a {name} that {why}"))),
                };
                [read(SIGNATURE_FILES[0])?, read(SIGNATURE_FILES[1])?]
            }
        };
        let iso = task_image(&kept.recipe, &kept.schema, signatures.each_ref().map(Option::as_deref), media)?;
        return Ok((report, Some(iso)));
    }
    let bytes = files::read_regular(path, MAX_TASK_BYTES).map_err(|e| unreadable(e.to_string()))?;
    match label::probe(&bytes[..]).map_err(|e| unreadable(format!("cannot be read: {e}")))? {
        Filesystem::Iso9660 { volume_id } if volume_id == defaults::LABEL => {}
        Filesystem::Iso9660 { volume_id } if volume_id == area::VOLUME_ID => {
            return Err(Refused::new(
                Failure::Usage,
                format!("{shown} is a maintenance ISO: the maintenance ISO comes first, then the task"),
            ))
        }
        other => {
            let what = match other.label() {
                Some(label) => format!("has the volume id {label:?}"),
                None => "is not an ISO 9660 image".into(),
            };
            return Err(Refused::new(
                Failure::MediaNotFound,
                format!(
                    "{shown} {what}, not a task ISO (volume id {:?}) or a directory of the task's files",
                    defaults::LABEL
                ),
            ));
        }
    }
    let image = IsoFiles::new(&bytes[..], bytes.len() as u64)
        .map_err(|e| Refused::new(Failure::MediaUnmountable, format!("{shown} cannot be read as an ISO: {e}")))?;
    let (report, _) = judge_media(args, media, &image, false)?;
    let valid = report.valid();
    Ok((report, valid.then_some(bytes)))
}

/// What `--remove` prints as JSON.
#[derive(Debug, Serialize)]
struct Removed {
    /// The maintenance ISO written.
    iso: String,
    area_bytes: u64,
    /// The SHA-256 of the task ISO the area held (`null`: it was empty).
    removed_task_sha256: Option<String>,
}

/// `media embed --remove MAINTENANCE`: the area emptied, the image as it was built.
pub fn remove(args: &RemoveArgs, out: &mut impl Write) -> io::Result<Exit> {
    let removed = Maintenance::open(&args.maintenance, args.to == Destination::InPlace).and_then(|maintenance| {
        let written = maintenance.write(&args.maintenance, &args.to, &Header::empty(maintenance.len).encode())?;
        let removed_task_sha256 = maintenance.header.task.as_ref().map(|task| hex(&task.task_sha256));
        Ok(Removed { iso: written.display().to_string(), area_bytes: maintenance.len, removed_task_sha256 })
    });
    match (removed, args.format) {
        (Ok(removed), Format::Json) => {
            writeln!(out, "{}", serde_json::to_string(&removed).expect("serializable"))?;
            Ok(Exit::Ok)
        }
        (Ok(removed), Format::Human) => {
            let held = match &removed.removed_task_sha256 {
                Some(digest) => format!("the task ISO of sha256:{digest} removed"),
                None => "it held no task".into(),
            };
            let iso = printable(&removed.iso);
            writeln!(
                out,
                "wrote {iso}: its task area ({} bytes) empty, as the image was built ({held})",
                removed.area_bytes
            )?;
            Ok(Exit::Ok)
        }
        (Err(refused), format) => {
            let report = refused.report();
            match format {
                Format::Json => writeln!(out, "{}", report.to_json())?,
                Format::Human => write!(out, "{}", report.to_human(&args.maintenance.display().to_string()))?,
            }
            Ok(report.failure.map_or(Exit::Ok, Failure::exit))
        }
    }
}
