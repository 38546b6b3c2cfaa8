//! Task media that is an ISO image read in user space, without a mount, a loop device or root:
//! `media check` reads a task ISO so, and the boot a task held in its boot medium. The names,
//! types and refusals are Linux's (`crate::iso9660::read`), the answers those of the mounted
//! media ([`super::mount::Root`]).

use std::fs::File;
use std::io::{self, Seek, SeekFrom};
use std::path::Path;

use super::{not_regular, symlink_refused, MediaFile, MediaFiles};
use crate::iso9660::read::{Error, Image, Kind};
use crate::iso9660::ReadAt;

/// An ISO image's files.
#[derive(Debug)]
pub struct IsoFiles<S> {
    image: Image<S>,
}

impl IsoFiles<File> {
    /// The image in the file or block device at `path`. An error is what would fail the
    /// kernel's mount: no ISO 9660 volume, a root that cannot be read.
    pub fn open(path: &Path) -> Result<IsoFiles<File>, Error> {
        let mut file = File::open(path).map_err(Error::Io)?;
        // The end, not the metadata: a block device's metadata says 0 bytes.
        let len = file.seek(SeekFrom::End(0)).map_err(Error::Io)?;
        IsoFiles::new(file, len)
    }
}

impl<S: ReadAt> IsoFiles<S> {
    /// The image of `len` bytes read from `source`.
    pub fn new(source: S, len: u64) -> Result<IsoFiles<S>, Error> {
        Ok(IsoFiles { image: Image::open(source, len)? })
    }
}

impl<S: ReadAt> MediaFiles for IsoFiles<S> {
    fn open(&self, name: &str) -> io::Result<MediaFile<'_>> {
        let looked_up = self.image.lookup(name).map_err(|e| match e {
            e @ (Error::Io(_) | Error::Truncated(_)) => io::Error::from(e),
            e => io::Error::new(io::ErrorKind::InvalidData, format!("cannot be looked up: {e}")),
        })?;
        let entry = looked_up.ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "does not exist"))?;
        match entry.kind {
            Kind::File if entry.compressed => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "is compressed (zisofs), which the dispatcher's reader of images does not read",
            )),
            Kind::File => Ok(MediaFile { reader: Box::new(self.image.data(&entry)), len: entry.len() }),
            Kind::Symlink => Err(symlink_refused()),
            Kind::Directory | Kind::Other(_) => Err(not_regular()),
        }
    }
}
