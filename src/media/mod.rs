//! The task media: what the kernel command line asks of it ([`cmdline`]), finding it
//! ([`discover`]), telling what it holds ([`label`]), mounting it read-only with files opened
//! beneath it ([`mount`]), or reading an ISO image in user space ([`iso`]). Either way the boot
//! path takes the media's files through one interface, [`MediaFiles`].

pub mod area;
pub mod cmdline;
pub mod discover;
pub mod iso;
pub mod label;
pub mod mount;

use std::io::{self, Read};

/// The files of task media, as the boot path reads them: a name directly on the media, opened
/// only if it is a regular file. The mounted media ([`mount::Root`]) and an ISO image read in
/// user space ([`iso::IsoFiles`]) answer alike, so that `run` and `media check` decide alike.
pub trait MediaFiles {
    /// Opens the regular file `name`. Errors: `NotFound` when there is none; `InvalidData` for a
    /// symbolic link ([`symlink_refused`]), anything but a regular file ([`not_regular`]) or a
    /// name that cannot be looked up; the medium's own failures otherwise (an OS error, or
    /// `UnexpectedEof` for an image that ends before its data).
    fn open(&self, name: &str) -> io::Result<MediaFile<'_>>;
}

/// A file opened on the media: its bytes, and the length the media claims (a hint only).
pub struct MediaFile<'a> {
    pub reader: Box<dyn Read + 'a>,
    pub len: u64,
}

/// Why a symbolic link where a file belongs is not opened.
pub fn symlink_refused() -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, "is a symbolic link, which the dispatcher does not follow")
}

/// Why a directory, a device, a FIFO or a socket where a file belongs is not opened.
pub fn not_regular() -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, "is not a regular file")
}
