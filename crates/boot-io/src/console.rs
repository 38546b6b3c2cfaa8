//! The consoles the kernel writes to (`/sys/class/tty/console/active`: `tty0 ttyS0`): a
//! process's own output reaches one console at most (/dev/console is the last `console=`),
//! while a BMC shows the serial console and the video console to different people.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Where the kernel lists the consoles it writes to.
pub const ACTIVE: &str = "/sys/class/tty/console/active";

/// The device of each console in the kernel's `list` (only plain device names are taken).
pub fn active(list: &Path) -> Vec<PathBuf> {
    let text = std::fs::read_to_string(list).unwrap_or_default();
    text.split_whitespace()
        .filter(|name| name.bytes().all(|b| b.is_ascii_alphanumeric()))
        .map(|name| Path::new("/dev").join(name))
        .collect()
}

/// Whether `device` is a virtual terminal (`tty0`, `tty1`, ...), a screen, rather than a
/// serial line.
pub fn is_vt(device: &Path) -> bool {
    let name = device.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    name.strip_prefix("tty").is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// Writes `text` to `device` with one write(2): a terminal's driver writes one call whole
/// before another writer's, so a line written this way never splits. Non-blocking: a serial
/// line held by flow control must not hold up the boot; a short write (a full buffer) is an
/// error, not a retry that could be split.
pub fn write_once(device: &Path, text: &[u8]) -> io::Result<()> {
    write_whole(&mut open(device)?, text)
}

/// A console opened for [`write_once`]'s writes: write-only, non-blocking, never made the
/// process's controlling terminal, its last component not a symlink.
pub fn open(device: &Path) -> io::Result<File> {
    let flags = libc::O_NOCTTY | libc::O_NOFOLLOW | libc::O_NONBLOCK;
    OpenOptions::new().write(true).custom_flags(flags).open(device)
}

/// One write of all of `text` to an opened console, or an error.
pub fn write_whole(console: &mut File, text: &[u8]) -> io::Result<()> {
    match console.write(text)? {
        n if n == text.len() => Ok(()),
        n => Err(io::Error::new(io::ErrorKind::WriteZero, format!("wrote {n} of {} bytes", text.len()))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("boot-io-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn consoles_are_read_from_the_kernels_list() {
        let dir = temp_dir("active");
        let list = dir.join("active");
        std::fs::write(&list, "tty1 ttyS0\n").unwrap();
        assert_eq!(active(&list), [Path::new("/dev/tty1"), Path::new("/dev/ttyS0")]);
        std::fs::write(&list, "../etc/passwd ttyAMA0").unwrap();
        assert_eq!(active(&list), [Path::new("/dev/ttyAMA0")], "only device names");
        assert!(active(&dir.join("missing")).is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn screens_are_told_from_serial_lines() {
        for vt in ["/dev/tty0", "/dev/tty1", "/dev/tty12"] {
            assert!(is_vt(Path::new(vt)), "{vt}");
        }
        for serial in ["/dev/ttyS0", "/dev/ttyAMA0", "/dev/hvc0", "/dev/tty", "/dev/ttyUSB0", "/dev/console"] {
            assert!(!is_vt(Path::new(serial)), "{serial}");
        }
    }

    #[test]
    fn one_write_puts_the_whole_text() {
        let dir = temp_dir("write");
        let console = dir.join("console");
        std::fs::write(&console, "").unwrap();
        write_once(&console, b"PROVISION-RESULT v1 {}\n").unwrap();
        assert_eq!(std::fs::read_to_string(&console).unwrap(), "PROVISION-RESULT v1 {}\n");
        let link = dir.join("link");
        std::os::unix::fs::symlink(&console, &link).unwrap();
        assert!(write_once(&link, b"x").is_err(), "never through a link");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
