//! The image's UEFI boot path, the one a server with Secure Boot enforced accepts: Debian's
//! signed chain. Microsoft signed shim (`EFI/BOOT/BOOTX64.EFI`, `BOOTAA64.EFI` on arm64),
//! shim checks Debian's signature on GRUB for removable media beside it (`grubx64.efi`,
//! `grubaa64.efi`: all its modules built in, none loaded from disk), GRUB has shim check the
//! kernel's. No `fbx64.efi`: on removable media it would write boot entries to the server.
//!
//! The signed binaries come from Debian's packages (`shim-signed`, `grub-efi-ARCH-signed`),
//! fetched for either architecture by `apt-get download` with a private apt configuration
//! (its own lists, the architecture, Debian's archive keyring) into a cache of their own:
//! the host's apt knows no foreign architecture and the image's base stays as it is. The
//! lists are refreshed once a day, so that a GRUB revoked by an update (SBAT) is replaced.
//!
//! The ESP is a FAT image built with mtools; xorriso puts it in the ISO as the El Torito
//! UEFI boot image and as the EFI partition of the GPT that a USB disk shows.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime};

use anyhow::{bail, Context, Result};

use crate::apt::{PrivateApt, Suites};
use crate::arch::Arch;
use crate::system;

/// The signed shim and GRUB for one architecture, as files in the cache.
pub struct SignedChain {
    pub shim: PathBuf,
    pub grub: PathBuf,
    /// The packages they came from, `name_version_arch.deb`.
    pub packages: Vec<String>,
}

/// The packages, the files in them, and the names on the ESP that firmware and shim look for.
struct Names {
    shim_package: &'static str,
    grub_package: &'static str,
    shim: &'static str,
    grub: &'static str,
    shim_on_esp: &'static str,
    grub_on_esp: &'static str,
}

fn names(arch: Arch) -> Names {
    match arch {
        Arch::Amd64 => Names {
            shim_package: "shim-signed",
            grub_package: "grub-efi-amd64-signed",
            shim: "usr/lib/shim/shimx64.efi.signed",
            grub: "usr/lib/grub/x86_64-efi-signed/gcdx64.efi.signed",
            shim_on_esp: "BOOTX64.EFI",
            grub_on_esp: "grubx64.efi",
        },
        Arch::Arm64 => Names {
            shim_package: "shim-signed",
            grub_package: "grub-efi-arm64-signed",
            shim: "usr/lib/shim/shimaa64.efi.signed",
            grub: "usr/lib/grub/arm64-efi-signed/gcdaa64.efi.signed",
            shim_on_esp: "BOOTAA64.EFI",
            grub_on_esp: "grubaa64.efi",
        },
    }
}

/// Where GRUB sits on the ESP (for a test that swaps it, `vm::media`).
pub fn grub_on_esp(arch: Arch) -> String {
    format!("::/EFI/BOOT/{}", names(arch).grub_on_esp)
}

/// How old the private lists may be before they are fetched again.
const LISTS_MAX_AGE: Duration = Duration::from_secs(24 * 3600);

/// The signed chain for `arch`: Debian's current packages, downloaded when the cache has
/// other versions (or none).
pub fn signed_chain(arch: Arch) -> Result<SignedChain> {
    let dir = crate::cache_dir().join(format!("signed-efi-{}", arch.debian()));
    let apt = PrivateApt::new(&dir, arch, Suites::Stable)?;
    let n = names(arch);
    let wanted = [n.shim_package, n.grub_package];
    let fresh = std::fs::metadata(apt.lists_stamp())
        .and_then(|m| m.modified())
        .is_ok_and(|at| SystemTime::now().duration_since(at).unwrap_or_default() < LISTS_MAX_AGE);
    let packages = if fresh {
        apt.candidates(&wanted)?
    } else {
        match apt.update().and_then(|()| apt.candidates(&wanted)) {
            Ok(packages) => packages,
            // Offline: what the cache has is what Debian shipped last time we looked.
            Err(e) if dir.join("unpacked").is_dir() => {
                eprintln!("image: cannot refresh Debian's signed EFI packages ({e:#}); using the cached ones");
                read_lines(&dir.join("unpacked/packages"))?
            }
            Err(e) => return Err(e),
        }
    };
    let unpacked = dir.join("unpacked");
    if read_lines(&unpacked.join("packages")).ok().as_ref() != Some(&packages) {
        eprintln!("image: fetching {} for {}", packages.join(", "), arch.debian());
        let partial = dir.join("unpacked.partial");
        let _ = std::fs::remove_dir_all(&partial);
        let debs = dir.join("debs");
        let _ = std::fs::remove_dir_all(&debs);
        std::fs::create_dir_all(&debs)?;
        system::run(apt.command().arg("download").args(wanted).current_dir(&debs).stdout(Stdio::null()))?;
        for deb in &packages {
            system::run(Command::new("dpkg-deb").arg("-x").arg(debs.join(deb)).arg(&partial))?;
        }
        std::fs::write(partial.join("packages"), packages.join("\n") + "\n")?;
        std::fs::remove_dir_all(&debs)?;
        let _ = std::fs::remove_dir_all(&unpacked);
        std::fs::rename(&partial, &unpacked)?;
    }
    let chain = SignedChain { shim: unpacked.join(n.shim), grub: unpacked.join(n.grub), packages };
    for file in [&chain.shim, &chain.grub] {
        let pe = std::fs::read(file).with_context(|| format!("read {}", file.display()))?;
        if signature_bytes(&pe).with_context(|| file.display().to_string())? == 0 {
            bail!("{} carries no signature", file.display());
        }
    }
    Ok(chain)
}

fn read_lines(path: &Path) -> Result<Vec<String>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
    Ok(text.lines().map(String::from).collect())
}

/// Builds the ESP: shim and GRUB where firmware and shim look for them, and `grub_cfg` at
/// `/boot/grub/grub.cfg`, where GRUB for removable media reads its configuration first.
pub fn esp(arch: Arch, chain: &SignedChain, grub_cfg: &str, out: &Path) -> Result<()> {
    const SLACK: u64 = 512 << 10;
    let n = names(arch);
    let cfg = out.with_extension("grub.cfg");
    std::fs::write(&cfg, grub_cfg)?;
    let files = std::fs::metadata(&chain.shim)?.len() + std::fs::metadata(&chain.grub)?.len();
    // FAT's tables, its directories and each file's last cluster fit in the slack; the rest
    // would only make the ISO larger (the firmware reads the files, not the image).
    let size = (files + SLACK).div_ceil(64 << 10) * (64 << 10);
    let _ = std::fs::remove_file(out);
    std::fs::File::create(out)?.set_len(size)?;
    let image = out.as_os_str();
    system::run(Command::new("mformat").arg("-i").arg(image).arg("::"))?;
    system::run(Command::new("mmd").arg("-i").arg(image).args(["::/EFI", "::/EFI/BOOT", "::/boot", "::/boot/grub"]))?;
    for (from, to) in [
        (chain.shim.as_path(), format!("::/EFI/BOOT/{}", n.shim_on_esp)),
        (&chain.grub, grub_on_esp(arch)),
        (&cfg, "::/boot/grub/grub.cfg".into()),
    ] {
        system::run(Command::new("mcopy").arg("-i").arg(image).arg(from).arg(to))?;
    }
    std::fs::remove_file(&cfg)?;
    Ok(())
}

/// xorriso's commands that make `esp` the ISO's UEFI boot image (El Torito, platform EFI)
/// and the EFI system partition of its GPT: after grub-mkrescue's BIOS image on amd64.
pub fn xorriso_args(esp: &Path) -> Vec<OsString> {
    let mut args: Vec<OsString> = vec!["-map".into(), esp.into(), "/efi.img".into()];
    for command in ["next", "efi_path=/efi.img", "efi_boot_part=--efi-boot-image"] {
        args.extend(["-boot_image".into(), "any".into(), command.into()]);
    }
    args
}

/// The size of the signatures a PE/COFF image carries (its certificate table; 0 when
/// unsigned). What firmware, shim and GRUB check is in there.
pub fn signature_bytes(pe: &[u8]) -> Result<u32> {
    let (_, _, size) = certificate_table(pe)?;
    Ok(size)
}

/// The image without its signatures: the certificate table's entry zeroed and the table,
/// which is the end of the file, cut off. What a tampered or self-built binary looks like.
pub fn unsigned(pe: &[u8]) -> Result<Vec<u8>> {
    let (entry, offset, size) = certificate_table(pe)?;
    if size == 0 {
        bail!("the image is not signed");
    }
    let end = offset as usize + size as usize;
    if end != pe.len() {
        bail!("the certificate table is not at the end of the image");
    }
    let mut out = pe[..offset as usize].to_vec();
    out[entry..entry + 8].fill(0);
    Ok(out)
}

/// Where the certificate table's data-directory entry is, and the table's file offset and
/// size (PE/COFF: `e_lfanew` at 0x3c, `PE\0\0`, the 20-byte COFF header, the optional header
/// whose data directories start at 96 (PE32) or 112 (PE32+); the table is entry 4).
fn certificate_table(pe: &[u8]) -> Result<(usize, u32, u32)> {
    let u16_at = |at: usize| pe.get(at..at + 2).map(|b| u16::from_le_bytes([b[0], b[1]]));
    let u32_at = |at: usize| pe.get(at..at + 4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
    if pe.get(..2) != Some(b"MZ") {
        bail!("not a PE image (no MZ header)");
    }
    let header = u32_at(0x3c).context("truncated DOS header")? as usize;
    if pe.get(header..header + 4) != Some(b"PE\0\0") {
        bail!("not a PE image (no PE signature)");
    }
    let optional = header + 4 + 20;
    let directories = match u16_at(optional).context("truncated optional header")? {
        0x10b => optional + 96,
        0x20b => optional + 112,
        magic => bail!("unknown optional header magic {magic:#x}"),
    };
    let count = u32_at(directories - 4).context("truncated optional header")?;
    if count < 5 {
        return Ok((directories + 4 * 8, 0, 0));
    }
    let entry = directories + 4 * 8;
    let offset = u32_at(entry).context("truncated data directories")?;
    let size = u32_at(entry + 4).context("truncated data directories")?;
    Ok((entry, offset, size))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal PE32+ header with `signature` appended as its certificate table.
    fn pe(signature: &[u8]) -> Vec<u8> {
        let mut image = vec![0u8; 0x200];
        image[..2].copy_from_slice(b"MZ");
        image[0x3c..0x40].copy_from_slice(&0x80u32.to_le_bytes());
        image[0x80..0x84].copy_from_slice(b"PE\0\0");
        let optional = 0x80 + 24;
        image[optional..optional + 2].copy_from_slice(&0x20bu16.to_le_bytes());
        image[optional + 108..optional + 112].copy_from_slice(&16u32.to_le_bytes());
        if !signature.is_empty() {
            let (entry, offset) = (optional + 112 + 32, image.len() as u32);
            image[entry..entry + 4].copy_from_slice(&offset.to_le_bytes());
            image[entry + 4..entry + 8].copy_from_slice(&(signature.len() as u32).to_le_bytes());
            image.extend_from_slice(signature);
        }
        image
    }

    #[test]
    fn a_signature_is_found_and_taken_off() {
        let signed = pe(&[7; 24]);
        assert_eq!(signature_bytes(&signed).unwrap(), 24);
        let stripped = unsigned(&signed).unwrap();
        assert_eq!(stripped.len(), 0x200);
        assert_eq!(signature_bytes(&stripped).unwrap(), 0);
        assert_eq!(stripped, pe(&[]));
        assert!(unsigned(&stripped).is_err(), "nothing to take off");
    }

    #[test]
    fn what_is_not_a_pe_image_is_refused() {
        assert!(signature_bytes(b"\x7fELF").is_err());
        assert!(signature_bytes(&pe(&[])[..0x90]).is_err(), "truncated");
        let mut other = pe(&[]);
        other[0x80] = b'X';
        assert!(signature_bytes(&other).is_err());
    }
}
