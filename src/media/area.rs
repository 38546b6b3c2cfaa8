//! The task area of the maintenance ISO (SPEC §6c): a file that `cargo xtask image` reserves in
//! the image's ISO 9660 tree ([`PATH`]), a fixed size per architecture, into which `media embed`
//! writes a task ISO, so that a server boots one ISO that carries its own task. Writing inside
//! a file's extent moves nothing else: the directory records, the boot catalogue, the partition
//! tables and the ESP stay byte for byte.
//!
//! The area is a [`Header`] of [`HEADER_BYTES`], then the task ISO as stored (deflated when
//! that is smaller), then zeros to its end. The header, version 1, little-endian:
//!
//! | bytes | field |
//! |---|---|
//! | 0..32 | [`MAGIC`]: `provision-dispatcher task area`, a newline, a NUL |
//! | 32..36 | version: 1 |
//! | 36..40 | compression: 0 stored, 1 deflate (RFC 1951, no zlib or gzip wrapper) |
//! | 40..48 | the area's size, header included: the file's size in the ISO |
//! | 48..56 | the bytes stored after the header: 0 for an empty area |
//! | 56..64 | the task ISO's size |
//! | 64..96 | SHA-256 of the bytes stored |
//! | 96..128 | SHA-256 of the task ISO (what `sha256sum task.iso` prints) |
//! | 128..512 | zeros |
//!
//! An empty area (as the image is built, and after `media embed --remove`) is the header with
//! nothing stored, then zeros. The boot reads the header and then only the bytes stored, never
//! the whole area: over a BMC's link each byte read is a wait.

use std::io;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::label::{probe, Filesystem};
use crate::iso9660::read::{Image, Kind};
use crate::iso9660::{read_at_most, ReadAt};

/// The area's file in the maintenance ISO's tree.
pub const PATH: &str = "provision/task.img";
/// The maintenance ISO's volume id (`cargo xtask image`): only that image has the area.
pub const VOLUME_ID: &str = "PROVISION-MAINT";
pub const MAGIC: &[u8; 32] = b"provision-dispatcher task area\n\0";
pub const VERSION: u32 = 1;
pub const HEADER_BYTES: u64 = 512;
/// The largest task ISO taken from an area: more than `media build` makes of a recipe at its cap
/// (8 MiB), the largest schema (1 MiB), two signatures and the ISO's own sectors.
pub const MAX_TASK_BYTES: u64 = 12 << 20;
/// The largest area read: an ISO may claim anything; the image reserves 1 or 2 MiB. With the
/// task inflated beside what is stored, an area read stays well inside the heap's ceiling.
pub const MAX_AREA_BYTES: u64 = 8 << 20;
/// The live system's directory (live-boot's layout, which the image's initrd keeps).
pub const LIVE: &str = "/run/live";
/// Where the boot finds the area, under the live system's `/run/live`: on the medium the system
/// booted from (live-boot's layout, the initrd's), or with `toram` in RAM, where the initrd
/// copied it before letting the medium go.
pub const ON_BOOT_MEDIUM: [&str; 2] = ["medium/provision/task.img", "toram/provision/task.img"];
/// The deflate level: 6, zlib's default (9 makes the seed examples' tasks no smaller).
const LEVEL: u8 = 6;

/// How the task is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    Stored,
    Deflate,
}

impl Compression {
    pub fn name(self) -> &'static str {
        match self {
            Compression::Stored => "stored",
            Compression::Deflate => "deflate",
        }
    }

    fn code(self) -> u32 {
        match self {
            Compression::Stored => 0,
            Compression::Deflate => 1,
        }
    }
}

/// What the header says of the task in an area.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    pub compression: Compression,
    /// The bytes after the header.
    pub stored_bytes: u64,
    /// The task ISO's size.
    pub task_bytes: u64,
    pub stored_sha256: [u8; 32],
    pub task_sha256: [u8; 32],
}

/// An area's header: its size, and the task it holds (`None`: empty).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub area_bytes: u64,
    pub task: Option<Stored>,
}

/// Why an area, or the task in it, cannot be used.
#[derive(Debug)]
pub enum AreaError {
    /// Not the maintenance ISO, or one without an area: what it is instead.
    NotMaintenance(String),
    /// The header is not this program's.
    NotOurs,
    /// A version of the header this program does not read.
    Version(u32),
    /// The header or the bytes stored are damaged.
    Corrupt(String),
    Io(io::Error),
}

impl std::fmt::Display for AreaError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AreaError::NotMaintenance(why) | AreaError::Corrupt(why) => f.write_str(why),
            AreaError::NotOurs => {
                write!(f, "its /{PATH} does not start with the header of a task area of provision-dispatcher")
            }
            AreaError::Version(version) => write!(
                f,
                "its task area's header is version {version}; this provision-dispatcher reads version {VERSION} (use the binary of the image's own version)"
            ),
            AreaError::Io(e) => write!(f, "cannot be read: {e}"),
        }
    }
}

impl std::error::Error for AreaError {}

fn corrupt(why: impl Into<String>) -> AreaError {
    AreaError::Corrupt(format!("its task area is damaged: {}", why.into()))
}

impl Header {
    /// The header of an empty area of `area_bytes`.
    pub fn empty(area_bytes: u64) -> Header {
        Header { area_bytes, task: None }
    }

    pub fn encode(&self) -> [u8; HEADER_BYTES as usize] {
        let mut bytes = [0u8; HEADER_BYTES as usize];
        bytes[..32].copy_from_slice(MAGIC);
        bytes[32..36].copy_from_slice(&VERSION.to_le_bytes());
        bytes[40..48].copy_from_slice(&self.area_bytes.to_le_bytes());
        if let Some(task) = &self.task {
            bytes[36..40].copy_from_slice(&task.compression.code().to_le_bytes());
            bytes[48..56].copy_from_slice(&task.stored_bytes.to_le_bytes());
            bytes[56..64].copy_from_slice(&task.task_bytes.to_le_bytes());
            bytes[64..96].copy_from_slice(&task.stored_sha256);
            bytes[96..128].copy_from_slice(&task.task_sha256);
        }
        bytes
    }

    /// The header at the start of an area of `area_bytes` (the file's size in the ISO).
    pub fn parse(bytes: &[u8; HEADER_BYTES as usize], area_bytes: u64) -> Result<Header, AreaError> {
        if &bytes[..32] != MAGIC {
            return Err(AreaError::NotOurs);
        }
        let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
        let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
        let digest = |at: usize| -> [u8; 32] { bytes[at..at + 32].try_into().expect("32 bytes") };
        let version = u32_at(32);
        if version != VERSION {
            return Err(AreaError::Version(version));
        }
        if u64_at(40) != area_bytes {
            return Err(corrupt(format!("its header says {} bytes, the file is {area_bytes}", u64_at(40))));
        }
        if bytes[128..].iter().any(|&b| b != 0) {
            return Err(corrupt("bytes its header's version keeps zero are not"));
        }
        let (compression, stored_bytes, task_bytes) = (u32_at(36), u64_at(48), u64_at(56));
        if stored_bytes == 0 {
            if compression != 0 || task_bytes != 0 || bytes[64..128].iter().any(|&b| b != 0) {
                return Err(corrupt("its header stores nothing yet describes a task"));
            }
            return Ok(Header::empty(area_bytes));
        }
        let compression = match compression {
            0 => Compression::Stored,
            1 => Compression::Deflate,
            other => return Err(corrupt(format!("compression {other} is none this program knows"))),
        };
        if stored_bytes > area_bytes - HEADER_BYTES {
            return Err(corrupt(format!("it claims {stored_bytes} bytes stored in an area of {area_bytes}")));
        }
        if task_bytes > MAX_TASK_BYTES || (compression == Compression::Stored && task_bytes != stored_bytes) {
            return Err(corrupt(format!("it claims a task of {task_bytes} bytes")));
        }
        let task = Stored { compression, stored_bytes, task_bytes, stored_sha256: digest(64), task_sha256: digest(96) };
        Ok(Header { area_bytes, task: Some(task) })
    }
}

/// The bytes that go at the start of an area of `area_bytes` to hold `task` (a task ISO): the
/// header, then the task deflated, or as it is when deflating makes it no smaller. The rest of
/// the area is zeros. `Err`: the bytes it needs, more than the area has.
pub fn pack(task: &[u8], area_bytes: u64) -> Result<(Header, Vec<u8>), u64> {
    let deflated = miniz_oxide::deflate::compress_to_vec(task, LEVEL);
    let (compression, stored) = match deflated.len() < task.len() {
        true => (Compression::Deflate, &deflated[..]),
        false => (Compression::Stored, task),
    };
    let needed = HEADER_BYTES + stored.len() as u64;
    if needed > area_bytes || task.len() as u64 > MAX_TASK_BYTES {
        return Err(needed);
    }
    let header = Header {
        area_bytes,
        task: Some(Stored {
            compression,
            stored_bytes: stored.len() as u64,
            task_bytes: task.len() as u64,
            stored_sha256: Sha256::digest(stored).into(),
            task_sha256: Sha256::digest(task).into(),
        }),
    };
    let mut bytes = Vec::with_capacity(needed as usize);
    bytes.extend_from_slice(&header.encode());
    bytes.extend_from_slice(stored);
    Ok((header, bytes))
}

/// An area: `len` bytes of `source` from `start` (the file itself at boot, or its extent in an
/// ISO).
#[derive(Debug)]
pub struct Area<S> {
    source: S,
    pub start: u64,
    pub len: u64,
}

impl<S: ReadAt> Area<S> {
    pub fn new(source: S, start: u64, len: u64) -> Area<S> {
        Area { source, start, len }
    }

    pub fn source(&self) -> &S {
        &self.source
    }

    /// Its header.
    pub fn header(&self) -> Result<Header, AreaError> {
        if self.len < HEADER_BYTES || self.len > MAX_AREA_BYTES {
            return Err(AreaError::NotMaintenance(format!(
                "its /{PATH} is {} bytes, which is no task area of provision-dispatcher",
                self.len
            )));
        }
        let mut bytes = [0u8; HEADER_BYTES as usize];
        self.read_exact(&mut bytes, 0)?;
        Header::parse(&bytes, self.len)
    }

    /// The task ISO the area holds, whole and checked against both digests (`None`: empty).
    /// Reads the header and the bytes stored, nothing more.
    pub fn task(&self) -> Result<Option<(Header, Vec<u8>)>, AreaError> {
        let header = self.header()?;
        let Some(task) = &header.task else { return Ok(None) };
        let mut stored = vec![0u8; task.stored_bytes as usize];
        self.read_exact(&mut stored, HEADER_BYTES)?;
        if <[u8; 32]>::from(Sha256::digest(&stored)) != task.stored_sha256 {
            return Err(corrupt("the bytes stored are not those its header's SHA-256 names"));
        }
        let bytes = match task.compression {
            Compression::Stored => stored,
            Compression::Deflate => {
                let mut out = vec![0u8; task.task_bytes as usize];
                let inflated = miniz_oxide::inflate::decompress_slice_iter_to_slice(
                    &mut out,
                    std::iter::once(&stored[..]),
                    false,
                    false,
                );
                match inflated {
                    Ok(n) if n as u64 == task.task_bytes => out,
                    _ => return Err(corrupt("the task does not inflate to the size its header gives")),
                }
            }
        };
        if <[u8; 32]>::from(Sha256::digest(&bytes)) != task.task_sha256 {
            return Err(corrupt("the task is not the one its header's SHA-256 names"));
        }
        Ok(Some((header, bytes)))
    }

    fn read_exact(&self, buf: &mut [u8], offset: u64) -> Result<(), AreaError> {
        let got = read_at_most(&self.source, buf, self.start + offset).map_err(AreaError::Io)?;
        if got < buf.len() {
            return Err(corrupt("it ends before its header says"));
        }
        Ok(())
    }
}

/// The area of the maintenance ISO in `source` (`len` bytes): its volume id must be
/// [`VOLUME_ID`], and [`PATH`] one regular file in one extent. Its header is not read yet.
pub fn in_image<S: ReadAt>(source: S, len: u64) -> Result<Area<S>, AreaError> {
    let not_maintenance = |why: String| AreaError::NotMaintenance(why);
    match probe(&source).map_err(AreaError::Io)? {
        Filesystem::Iso9660 { volume_id } if volume_id == VOLUME_ID => {}
        Filesystem::Iso9660 { volume_id } => {
            return Err(not_maintenance(format!(
                "it has the volume id {volume_id:?}, not the maintenance ISO's {VOLUME_ID:?}"
            )))
        }
        _ => return Err(not_maintenance("it is not an ISO 9660 image".into())),
    }
    let image = Image::open(&source, len).map_err(|e| not_maintenance(format!("it cannot be read: {e}")))?;
    let entry = image.lookup(PATH).map_err(|e| not_maintenance(format!("its /{PATH} cannot be looked up: {e}")))?;
    let entry = entry.ok_or_else(|| {
        not_maintenance(format!("it has no /{PATH}: an image built before task areas, or not by `cargo xtask image`"))
    })?;
    match (entry.kind, entry.compressed, entry.extents.as_slice()) {
        (Kind::File, false, [extent]) if extent.start.checked_add(extent.len).is_some_and(|end| end <= len) => {
            Ok(Area::new(source, extent.start, extent.len))
        }
        _ => Err(not_maintenance(format!("its /{PATH} is not one regular file within the image"))),
    }
}

/// The area the boot can read under `live` (`/run/live`): the first of [`ON_BOOT_MEDIUM`]
/// that is there, a regular file (`None`: the system did not boot from a maintenance ISO with
/// an area).
pub fn on_boot_medium(live: &Path) -> Option<PathBuf> {
    ON_BOOT_MEDIUM
        .iter()
        .map(|relative| live.join(relative))
        .find(|path| std::fs::symlink_metadata(path).is_ok_and(|m| m.is_file()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const AREA: u64 = 64 * 1024;

    /// Bytes deflate cannot shrink (xorshift).
    fn noise(len: usize) -> Vec<u8> {
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        (0..len)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as u8
            })
            .collect()
    }

    fn area_with(task: &[u8]) -> Vec<u8> {
        let (_, mut bytes) = pack(task, AREA).unwrap();
        bytes.resize(AREA as usize, 0);
        bytes
    }

    #[test]
    fn an_empty_area_is_its_header_and_zeros() {
        let header = Header::empty(AREA).encode();
        assert_eq!(&header[..32], b"provision-dispatcher task area\n\0");
        assert_eq!(header[32..48], [1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0]);
        assert!(header[48..].iter().all(|&b| b == 0));
        let mut area = header.to_vec();
        area.resize(AREA as usize, 0);
        let read = Area::new(&area[..], 0, AREA);
        assert_eq!(read.header().unwrap(), Header::empty(AREA));
        assert!(read.task().unwrap().is_none());
    }

    #[test]
    fn a_task_is_deflated_when_that_is_smaller_and_read_back_whole() {
        let task: Vec<u8> = b"recipe ".iter().cycle().take(40_000).copied().collect();
        let area = area_with(&task);
        let (header, read) = Area::new(&area[..], 0, AREA).task().unwrap().unwrap();
        assert_eq!(read, task);
        let stored = header.task.unwrap();
        assert_eq!(stored.compression, Compression::Deflate);
        assert!(stored.stored_bytes < 1000, "{}", stored.stored_bytes);
        assert_eq!(stored.task_sha256, <[u8; 32]>::from(Sha256::digest(&task)));
        // Bytes that deflate makes larger are stored as they are.
        let noise = noise(5000);
        let area = area_with(&noise);
        let (header, read) = Area::new(&area[..], 0, AREA).task().unwrap().unwrap();
        assert_eq!((read, header.task.unwrap().compression), (noise, Compression::Stored));
    }

    #[test]
    fn a_task_larger_than_the_area_is_refused_with_the_bytes_it_needs() {
        assert_eq!(pack(&noise(AREA as usize), AREA).unwrap_err(), AREA + HEADER_BYTES);
    }

    #[test]
    fn damage_is_found_before_the_task_is_taken() {
        let task: Vec<u8> = b"recipe ".iter().cycle().take(4000).copied().collect();
        let good = area_with(&task);
        let read = |area: &[u8]| Area::new(area, 0, area.len() as u64).task().map(|_| ()).unwrap_err().to_string();
        let mut bad = good.clone();
        bad[HEADER_BYTES as usize + 3] ^= 1;
        assert!(read(&bad).contains("SHA-256"), "{}", read(&bad));
        let mut bad = good.clone();
        bad[0] = b'P';
        assert!(read(&bad).contains("does not start with the header"), "{}", read(&bad));
        let mut bad = good.clone();
        bad[32] = 2;
        assert!(read(&bad).contains("version 2; this provision-dispatcher reads version 1"), "{}", read(&bad));
        let mut bad = good.clone();
        bad[48..56].copy_from_slice(&AREA.to_le_bytes());
        assert!(read(&bad).contains("claims 65536 bytes stored"), "{}", read(&bad));
        let mut bad = good.clone();
        bad[200] = 1;
        assert!(read(&bad).contains("keeps zero"), "{}", read(&bad));
        // A header copied into a file of another size.
        assert!(read(&good[..AREA as usize - 2048]).contains("its header says 65536 bytes"));
        // Cut short: the header promises more than there is.
        let cut = &good[..HEADER_BYTES as usize + 10];
        let header = Header::parse(cut[..512].try_into().unwrap(), AREA).unwrap();
        assert!(header.task.is_some());
        let area = Area::new(cut, 0, AREA);
        assert!(area.task().unwrap_err().to_string().contains("ends before"));
        // A deflated task whose stated size is wrong, digests made to match the bytes.
        let (mut header, bytes) = pack(&task, AREA).unwrap();
        let stored = header.task.as_mut().unwrap();
        stored.task_bytes -= 1;
        let mut bad = header.encode().to_vec();
        bad.extend_from_slice(&bytes[HEADER_BYTES as usize..]);
        bad.resize(AREA as usize, 0);
        assert!(read(&bad).contains("does not inflate"), "{}", read(&bad));
    }
}
