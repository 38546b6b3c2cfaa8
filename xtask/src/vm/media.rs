//! The media a case's guest gets: its task ISO, made from the case as a controller would make
//! it, with the faults the case asks for (`vm.json`), and other ISOs beside it.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

use super::cases::{Case, Damage, RecipeFile};
use super::reads::{self, Extent};
use crate::arch::Arch;
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
    match case.vm.recipe_file {
        None => std::fs::write(&recipe, &text)?,
        Some(RecipeFile::Symlink) => std::os::unix::fs::symlink("/etc/hostname", &recipe)?,
        Some(RecipeFile::Directory) => {
            std::fs::create_dir(&recipe)?;
            std::fs::write(recipe.join("recipe.json"), &text)?;
        }
        Some(RecipeFile::Oversize) => {
            text.resize(MAX_RECIPE_BYTES + 1, b' ');
            std::fs::write(&recipe, &text)?;
        }
    }
    let canonical = crate::root().join("iso/recipe.schema.json");
    let schema = case.schema.as_deref().unwrap_or(&canonical);
    std::fs::copy(schema, stage.join("recipe.schema.json")).with_context(|| format!("copy {}", schema.display()))?;
    if let Some(signing) = &case.vm.signing {
        signing.sign(&[recipe.clone(), stage.join("recipe.schema.json")])?;
        if case.vm.recipe_changed_after_signing {
            std::fs::OpenOptions::new().append(true).open(&recipe)?.write_all(b"\n")?;
        }
    }
    let digest = match std::fs::symlink_metadata(&recipe)?.is_file() {
        true => Some(system::sha256_hex(&recipe)?),
        false => None,
    };
    let iso = dir.join("task.iso");
    make_iso("TASK", &stage, &iso)?;
    std::fs::remove_dir_all(&stage)?;
    match case.vm.task_media_damage {
        None => {}
        // The primary volume descriptor (sector 16) and the terminator (17) stay.
        Some(Damage::Truncate) => std::fs::OpenOptions::new().write(true).open(&iso)?.set_len((18 * SECTOR) as u64)?,
        Some(Damage::CorruptDirectory) => corrupt_root_directory(&iso)?,
    }
    Ok((iso, digest))
}

/// An ISO with `volume_id` holding one small file, as another medium attached beside the
/// task ISO (a vendor's installer).
pub fn plain_iso(volume_id: &str, dir: &Path) -> Result<PathBuf> {
    let stage = dir.join(format!("media-{volume_id}"));
    let _ = std::fs::remove_dir_all(&stage);
    std::fs::create_dir_all(&stage)?;
    std::fs::write(stage.join("README.TXT"), format!("A medium labelled {volume_id}, made by cargo xtask vm-test.\n"))?;
    let iso = dir.join(format!("{volume_id}.iso"));
    make_iso(volume_id, &stage, &iso)?;
    std::fs::remove_dir_all(&stage)?;
    Ok(iso)
}

fn make_iso(volume_id: &str, tree: &Path, iso: &Path) -> Result<()> {
    let _ = std::fs::remove_file(iso);
    system::run(
        Command::new("xorriso")
            .args(["-as", "mkisofs", "-quiet", "-V", volume_id, "-R", "-J", "-o"])
            .arg(iso)
            .arg(tree)
            .stderr(Stdio::null()),
    )
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
