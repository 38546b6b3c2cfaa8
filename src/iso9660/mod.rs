//! ISO 9660 (ECMA-119) with the Rock Ridge (RRIP 1.10 over SUSP 1.10) and Joliet extensions:
//! what task media are. [`write`] makes an image of a few files, byte for byte the same for the
//! same files; [`read`] finds a file in an image and reads it, as Linux's isofs (the boot's
//! mount) shows it, bounded in time and memory whatever the image holds.
//!
//! Hand-written, not a crate (docs/development.md, Dependencies): the reader must take the
//! names, types and refusals of Linux's `fs/isofs` (which tree wins, Rock Ridge's `PX` type, `RE`
//! and associated files hidden, Joliet's case-insensitive names), which no crate mirrors, and
//! the writer needs one flat directory; both together cost less than a tenth of the smallest
//! crate that writes.

pub mod read;
pub mod write;

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

/// The logical block of every image read or written here (a CD's sector).
pub const SECTOR: usize = 2048;
const SECTOR_U64: u64 = SECTOR as u64;

/// The volume descriptors start after the 16 sectors of the system area.
const FIRST_DESCRIPTOR: u64 = 16;
const STANDARD_ID: &[u8] = b"CD001";
const PRIMARY: u8 = 1;
const SUPPLEMENTARY: u8 = 2;
const TERMINATOR: u8 = 255;
/// Joliet's escape sequences (UCS-2 levels 1, 2 and 3), at byte 88 of its descriptor.
const JOLIET_ESCAPES: [&[u8]; 3] = [b"%/@", b"%/C", b"%/E"];
/// Where the descriptor fields this module uses are.
const VOLUME_ID: usize = 40;
const ESCAPES: usize = 88;
const BLOCK_SIZE_FIELD: usize = 128;
const ROOT_RECORD: usize = 156;

/// The fixed part of a directory record, before its name.
const RECORD_HEADER: usize = 33;
/// Directory record flags.
const FLAG_DIRECTORY: u8 = 2;
const FLAG_ASSOCIATED: u8 = 4;
const FLAG_MULTI_EXTENT: u8 = 0x80;

/// POSIX file types, as Rock Ridge's `PX` entry gives them.
const S_IFMT: u32 = 0o170_000;
const S_IFREG: u32 = 0o100_000;
const S_IFDIR: u32 = 0o040_000;
const S_IFLNK: u32 = 0o120_000;

/// Where an image is read from: a file, a device, bytes, or later a part of another image.
pub trait ReadAt {
    /// Reads into `buf` from `offset`; fewer bytes than asked only at the end.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;
}

impl ReadAt for File {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        FileExt::read_at(self, buf, offset)
    }
}

impl ReadAt for [u8] {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let start = usize::try_from(offset).unwrap_or(usize::MAX).min(self.len());
        let n = buf.len().min(self.len() - start);
        buf[..n].copy_from_slice(&self[start..start + n]);
        Ok(n)
    }
}

impl ReadAt for Vec<u8> {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.as_slice().read_at(buf, offset)
    }
}

impl<T: ReadAt + ?Sized> ReadAt for &T {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        (**self).read_at(buf, offset)
    }
}

/// Reads up to `buf.len()` bytes at `offset`; fewer only at the end of the source.
pub fn read_at_most(source: &(impl ReadAt + ?Sized), buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match source.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

/// An ISO 9660 number stored both little- and big-endian (7.2.3, 7.3.3).
fn both_u16(value: u16) -> [u8; 4] {
    let (le, be) = (value.to_le_bytes(), value.to_be_bytes());
    [le[0], le[1], be[0], be[1]]
}

fn both_u32(value: u32) -> [u8; 8] {
    let (le, be) = (value.to_le_bytes(), value.to_be_bytes());
    [le[0], le[1], le[2], le[3], be[0], be[1], be[2], be[3]]
}

/// The little-endian half of a both-endian 32-bit number at `at`: the half Linux reads
/// (`isonum_733`).
fn le_u32(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

fn le_u16(bytes: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([bytes[at], bytes[at + 1]])
}

#[cfg(test)]
mod tests;
