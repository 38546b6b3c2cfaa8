//! The media a case's guest gets: its task ISO, made from the case as a controller makes it
//! (`media build` of the shipped binary), with the faults the case asks for (`vm.json`), and
//! other ISOs beside it. What `media build` refuses to make (a link or a directory named
//! `recipe.json`, an oversize recipe, a recipe changed after signing, a recipe the case expects
//! the boot to refuse as `media build` does) is written by the tests' writer below its check
//! (`iso::unchecked`).

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

use super::cases::{Case, CaseSchema, Damage, Expect, RecipeFile};
use super::reads::{self, Extent};
use crate::arch::Arch;
use crate::iso::{self, Built, Entry};
use crate::{efi, system};

/// The recipe cap of the dispatcher (SPEC §3): a recipe one byte over it is refused unread.
const MAX_RECIPE_BYTES: usize = 8 * 1024 * 1024;

const SECTOR: usize = 2048;

/// The case's task ISO in `dir` (`task.iso`), and the SHA-256 of the recipe on it (for
/// `provision.recipe=`), when the recipe is a file.
pub fn task_iso(case: &Case, dir: &Path) -> Result<(PathBuf, Option<String>)> {
    let stage = dir.join("task-media");
    let _ = std::fs::remove_dir_all(&stage);
    std::fs::create_dir_all(&stage)?;
    let recipe = stage.join("recipe.json");
    let mut text = std::fs::read(&case.recipe).with_context(|| format!("read {}", case.recipe.display()))?;
    if let Some(bytes) = case.vm.recipe_padding_bytes {
        let mut value: serde_json::Value = serde_json::from_slice(&text).context("recipe.json to pad")?;
        value["metadata"]["padding"] = "x".repeat(bytes).into();
        text = serde_json::to_vec(&value)?;
    }
    let iso = dir.join("task.iso");
    let _ = std::fs::remove_file(&iso);
    let built = match (case.vm.recipe_file, case.vm.recipe_changed_after_signing) {
        (None, false) => {
            std::fs::write(&recipe, &text)?;
            let schema = match &case.schema {
                CaseSchema::Version(n) => iso::Schema::Version(*n),
                CaseSchema::Own(file) => iso::Schema::File(file),
            };
            match iso::build(&recipe, schema, case.vm.signing.as_ref(), &iso)? {
                Built::Written => true,
                Built::Refused { code, .. } if expects_exit(&case.expect, code) => false,
                Built::Refused { code, report } => bail!(
                    "media build refused the case's recipe (exit {code}), and the case does not expect the boot to:\n{report}"
                ),
            }
        }
        _ => false,
    };
    if !built {
        unchecked(case, &stage, &text, &iso)?;
    }
    // A recipe that is a link or a directory on the media is staged as nothing, or apart.
    let digest = match std::fs::symlink_metadata(&recipe).is_ok_and(|m| m.is_file()) {
        true => Some(system::sha256_hex(&recipe)?),
        false => None,
    };
    std::fs::remove_dir_all(&stage)?;
    match case.vm.task_media_damage {
        None => {}
        // The primary volume descriptor (sector 16) and the terminator (17) stay.
        Some(Damage::Truncate) => std::fs::OpenOptions::new().write(true).open(&iso)?.set_len((18 * SECTOR) as u64)?,
        Some(Damage::CorruptDirectory) => corrupt_root_directory(&iso)?,
    }
    Ok((iso, digest))
}

/// Whether the case expects the dispatcher to exit with `code`: then media build's refusal of
/// the recipe, with the same code, is what the case is about.
fn expects_exit(expect: &Expect, code: i32) -> bool {
    matches!(expect, Expect::Failed { exit, .. } if i64::try_from(*exit).is_ok_and(|exit| exit == i64::from(code)))
}

/// The case's task ISO written unchecked, with the faults it asks for, into `iso`; the recipe
/// (`text`), when a file, staged at `stage/recipe.json`.
fn unchecked(case: &Case, stage: &Path, text: &[u8], iso: &Path) -> Result<()> {
    let recipe = stage.join("recipe.json");
    let schema = stage.join("recipe.schema.json");
    std::fs::copy(case.schema.file(), &schema).with_context(|| format!("copy {}", case.schema.file().display()))?;
    let mut entries = vec![Entry::File("recipe.schema.json".into(), schema.clone())];
    match case.vm.recipe_file {
        None => std::fs::write(&recipe, text)?,
        Some(RecipeFile::Symlink) => entries.push(Entry::Symlink("recipe.json".into(), "/etc/hostname".into())),
        Some(RecipeFile::Directory) => {
            let inner = stage.join("inner-recipe.json");
            std::fs::write(&inner, text)?;
            entries.push(Entry::Dir("recipe.json".into(), "recipe.json".into(), inner));
        }
        Some(RecipeFile::Oversize) => {
            let mut text = text.to_vec();
            text.resize(MAX_RECIPE_BYTES + 1, b' ');
            std::fs::write(&recipe, &text)?;
        }
    }
    if recipe.is_file() {
        entries.push(Entry::File("recipe.json".into(), recipe.clone()));
    }
    if let Some(signing) = &case.vm.signing {
        if !recipe.is_file() {
            bail!("a signed case's recipe.json must be a file");
        }
        signing.sign(&[recipe.clone(), schema])?;
        if case.vm.recipe_changed_after_signing {
            std::fs::OpenOptions::new().append(true).open(&recipe)?.write_all(b"\n")?;
        }
        for name in ["recipe.json.sig", "recipe.schema.json.sig"] {
            entries.push(Entry::File(name.into(), stage.join(name)));
        }
    }
    iso::unchecked("TASK", &entries, iso)
}

/// An ISO with `volume_id` holding one small file, as another medium attached beside the
/// task ISO (a vendor's installer).
pub fn plain_iso(volume_id: &str, dir: &Path) -> Result<PathBuf> {
    let stage = dir.join(format!("media-{volume_id}"));
    let _ = std::fs::remove_dir_all(&stage);
    std::fs::create_dir_all(&stage)?;
    let readme = stage.join("README.TXT");
    std::fs::write(&readme, format!("A medium labelled {volume_id}, made by cargo xtask vm-test.\n"))?;
    let iso = dir.join(format!("{volume_id}.iso"));
    iso::unchecked(volume_id, &[Entry::File("README.TXT".into(), readme)], &iso)?;
    std::fs::remove_dir_all(&stage)?;
    Ok(iso)
}

/// Overwrites the root directory of every directory tree of the ISO (the primary volume
/// descriptor's, and the Joliet one's, which Linux reads when the primary tree is unusable)
/// with garbage; the descriptors themselves, and so the volume id, stay.
fn corrupt_root_directory(iso: &Path) -> Result<()> {
    let mut bytes = std::fs::read(iso)?;
    const PRIMARY: u8 = 1;
    const SUPPLEMENTARY: u8 = 2;
    const TERMINATOR: u8 = 255;
    let mut corrupted = 0;
    let sectors = bytes.len() / SECTOR;
    for descriptor in (16..sectors).map(|sector| sector * SECTOR) {
        match bytes[descriptor] {
            TERMINATOR => break,
            PRIMARY | SUPPLEMENTARY => {
                // The root directory record is at bytes 156..190 of the descriptor; its
                // extent's location (little-endian) at bytes 2..6 of the record.
                let record = descriptor + 156;
                let extent =
                    u32::from_le_bytes(bytes[record + 2..record + 6].try_into().expect("4 bytes")) as usize * SECTOR;
                let end = (extent + SECTOR).min(bytes.len());
                for (i, byte) in bytes[extent..end].iter_mut().enumerate() {
                    *byte = (i as u8).wrapping_mul(37) | 0x80;
                }
                corrupted += 1;
            }
            _ => {}
        }
    }
    if corrupted < 2 {
        bail!("{}: expected a primary and a Joliet directory tree, found {corrupted}", iso.display());
    }
    std::fs::write(iso, bytes)?;
    Ok(())
}

/// A copy of the image in `dir` whose GRUB on the ESP is the same GRUB with its signature
/// taken off (what a tampered or self-built GRUB is to shim). The ESP is a file of the ISO
/// (`/efi.img`, which the El Torito catalogue and the GPT both point at): mtools rewrites
/// GRUB in it, in place.
pub fn with_unsigned_grub(arch: Arch, image: &Path, dir: &Path) -> Result<PathBuf> {
    let iso = dir.join("image-unsigned-grub.iso");
    std::fs::copy(image, &iso).with_context(|| format!("copy {}", image.display()))?;
    let lba = extent(&iso, "/efi.img")?.start / SECTOR as u64;
    let esp = format!("{}@@{}", iso.display(), lba * SECTOR as u64);
    let grub = efi::grub_on_esp(arch);
    let signed = dir.join("grub-signed.efi");
    system::run(Command::new("mcopy").args(["-n", "-i", &esp, &grub]).arg(&signed))?;
    let unsigned = dir.join("grub-unsigned.efi");
    std::fs::write(&unsigned, efi::unsigned(&std::fs::read(&signed)?)?)?;
    system::run(Command::new("mcopy").args(["-o", "-i", &esp]).arg(&unsigned).arg(&grub))?;
    Ok(iso)
}

/// The boot menu's entry that copies the medium to RAM (`image/grub.cfg`), counted from 0.
pub const TORAM_ENTRY: u8 = 1;

/// A copy of the image ISO at `out` whose boot menu starts entry `entry` (counted from 0)
/// instead of the first: its `/boot/grub/grub.cfg` changed in place, `set default=0` to
/// `set default=N`, the same length, so nothing else in the ISO moves.
pub fn with_menu_entry(image: &Path, entry: u8, out: &Path) -> Result<PathBuf> {
    const FIRST: &[u8] = b"set default=0";
    if entry > 9 {
        bail!("menu entry {entry}: one digit");
    }
    let menu = extent(image, "/boot/grub/grub.cfg")?;
    std::fs::copy(image, out).with_context(|| format!("copy {}", image.display()))?;
    let mut file = std::fs::OpenOptions::new().read(true).write(true).open(out)?;
    let mut text = vec![0; menu.bytes as usize];
    file.seek(SeekFrom::Start(menu.start))?;
    file.read_exact(&mut text)?;
    let at = text.windows(FIRST.len()).position(|w| w == FIRST).context("the boot menu has no `set default=0`")?;
    file.seek(SeekFrom::Start(menu.start + at as u64 + FIRST.len() as u64 - 1))?;
    file.write_all(&[b'0' + entry])?;
    Ok(out.to_owned())
}

/// Where `path`'s data lies in `iso`.
fn extent(iso: &Path, path: &str) -> Result<Extent> {
    reads::extents(iso)?.into_iter().find(|e| e.path == path).with_context(|| format!("no {path} in {}", iso.display()))
}
