//! The image's initrd: our `/init` (the `maintenance-init` crate in `initrd/`, static) and the
//! drivers that reaching the boot medium needs (the base's `initrd-modules`: the list of
//! `image/initrd-modules` with what they depend on, in load order), one newc cpio archive
//! compressed with xz. Every byte of it crosses the BMC's virtual-media link at each boot;
//! live-boot's initramfs-tools initrd was 17.2 MB (udev, kmod, libc, busybox, most storage
//! drivers), this one is a few hundred KB of program and the drivers (BENCHMARKS.md).

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

use crate::arch::Arch;
use crate::base::Base;

/// Builds the initrd for `arch` over `base`'s drivers at `out`.
pub fn build(arch: Arch, base: &Base, out: &Path) -> Result<()> {
    let init = crate::dist::build_package(arch, "maintenance-init")?;
    let modules = base.initrd_modules();
    let order = std::fs::read_to_string(modules.join("load-order")).context("the base's initrd-modules/load-order")?;
    let mut archive = Cpio::default();
    for dir in ["dev", "proc", "sys", "run", "root", "lib", "lib/modules"] {
        archive.dir(dir);
    }
    archive.file("init", 0o755, &std::fs::read(&init).with_context(|| format!("read {}", init.display()))?);
    archive.file("lib/modules/load-order", 0o644, order.as_bytes());
    for module in order.lines().filter(|l| !l.is_empty()) {
        let mut parent = String::from("lib/modules");
        for part in Path::new(module).parent().into_iter().flat_map(|p| p.iter()) {
            parent = format!("{parent}/{}", part.to_string_lossy());
            archive.dir(&parent);
        }
        let bytes = std::fs::read(modules.join(module)).with_context(|| format!("read the module {module}"))?;
        archive.file(&format!("lib/modules/{module}"), 0o644, &bytes);
    }
    // The kernel's xz decoder checks CRC32 at most; a dictionary the size of the input is all
    // that helps it.
    let mut xz = Command::new("xz")
        .args(["--check=crc32", "--lzma2=preset=9e,dict=8MiB", "--stdout"])
        .stdin(Stdio::piped())
        .stdout(std::fs::File::create(out).with_context(|| format!("create {}", out.display()))?)
        .spawn()
        .context("cannot start xz")?;
    xz.stdin.take().context("xz's stdin")?.write_all(&archive.finish())?;
    if !xz.wait()?.success() {
        bail!("xz failed on the initrd");
    }
    eprintln!(
        "image: initrd {} ({} bytes: /init {} bytes, {} drivers)",
        out.display(),
        std::fs::metadata(out)?.len(),
        std::fs::metadata(&init)?.len(),
        order.lines().count()
    );
    Ok(())
}

/// A newc ("070701") cpio archive, as the kernel unpacks an initramfs: everything owned by
/// root, times zero, each directory once.
#[derive(Default)]
struct Cpio {
    bytes: Vec<u8>,
    inode: u32,
    dirs: Vec<String>,
}

impl Cpio {
    fn dir(&mut self, path: &str) {
        if !self.dirs.iter().any(|d| d == path) {
            self.dirs.push(path.to_owned());
            self.entry(path, 0o040755, 2, &[]);
        }
    }

    fn file(&mut self, path: &str, mode: u32, data: &[u8]) {
        self.entry(path, 0o100000 | mode, 1, data);
    }

    fn entry(&mut self, path: &str, mode: u32, links: u32, data: &[u8]) {
        self.inode += 1;
        let fields = [self.inode, mode, 0, 0, links, 0, data.len() as u32, 0, 0, 0, 0, path.len() as u32 + 1, 0];
        self.bytes.extend_from_slice(b"070701");
        for field in fields {
            self.bytes.extend_from_slice(format!("{field:08x}").as_bytes());
        }
        self.bytes.extend_from_slice(path.as_bytes());
        self.bytes.push(0);
        self.pad();
        self.bytes.extend_from_slice(data);
        self.pad();
    }

    fn pad(&mut self) {
        while !self.bytes.len().is_multiple_of(4) {
            self.bytes.push(0);
        }
    }

    fn finish(mut self) -> Vec<u8> {
        self.entry("TRAILER!!!", 0, 1, &[]);
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cpio_archive_has_the_newc_fields_the_kernel_reads() {
        let mut archive = Cpio::default();
        archive.dir("lib");
        archive.dir("lib");
        archive.file("lib/x", 0o644, b"hello");
        archive.file("init", 0o755, b"#!");
        let bytes = archive.finish();
        assert!(bytes.starts_with(b"070701"));
        assert_eq!(bytes.len() % 4, 0);
        // Header of `lib/x`: after `lib`'s entry (110 + "lib\0" padded to 116).
        let header = &bytes[116..116 + 110];
        assert_eq!(&header[..6], b"070701");
        assert_eq!(&header[6 + 8..6 + 8 * 2], b"000081a4", "a regular file, 0644");
        assert_eq!(&header[6 + 8 * 6..6 + 8 * 7], b"00000005", "its size");
        assert_eq!(&bytes[116 + 110..116 + 110 + 6], b"lib/x\0");
        let names: Vec<&[u8]> = [b"lib\0".as_slice(), b"lib/x\0", b"init\0", b"TRAILER!!!\0"].into_iter().collect();
        for name in names {
            assert_eq!(bytes.windows(name.len()).filter(|w| *w == name).count(), 1, "{name:?} once");
        }
    }
}
