//! The consoles the kernel writes to (`/sys/class/tty/console/active`: `tty0 ttyS0`): a
//! process's own output reaches one console at most (/dev/console is the last `console=`),
//! while a BMC shows the serial console and the video console to different people.

use std::fs::OpenOptions;
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
    let flags = libc::O_NOCTTY | libc::O_NOFOLLOW | libc::O_NONBLOCK;
    let mut console = OpenOptions::new().write(true).custom_flags(flags).open(device)?;
    match console.write(text)? {
        n if n == text.len() => Ok(()),
        n => Err(io::Error::new(io::ErrorKind::WriteZero, format!("wrote {n} of {} bytes", text.len()))),
    }
}

/// Writes `text` to each device, once; a console that cannot be written to takes nothing from
/// the others, and is named in the journal. Returns the consoles that took it.
pub fn write_all_consoles(devices: &[PathBuf], text: &[u8]) -> Vec<PathBuf> {
    let mut written = Vec::new();
    for device in devices {
        match write_once(device, text) {
            Ok(()) => written.push(device.clone()),
            Err(e) => tracing::warn!(phase = "report", "cannot write to {}: {e}{}", device.display(), hint(device, &e)),
        }
    }
    written
}

/// What an image builder can do about a console that refused a write.
pub fn hint(device: &Path, error: &io::Error) -> &'static str {
    match error.kind() {
        io::ErrorKind::PermissionDenied if is_vt(device) => {
            " (another program owns that terminal: live-config's autologin does, for one; boot with live-config.noautologin)"
        }
        _ => "",
    }
}

/// Whether any of the consoles is a serial line (a controller reading serial-over-LAN sees
/// only those).
pub fn any_serial(devices: &[PathBuf]) -> bool {
    devices.iter().any(|device| !is_vt(device))
}

/// The device names of the consoles, for status.json (`ttyS0`, `tty0`).
pub fn names(devices: &[PathBuf]) -> Vec<String> {
    devices.iter().filter_map(|d| d.file_name()).map(|n| n.to_string_lossy().into_owned()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consoles_are_read_from_the_kernels_list() {
        let dir = tempfile::tempdir().unwrap();
        let list = dir.path().join("active");
        std::fs::write(&list, "tty1 ttyS0\n").unwrap();
        assert_eq!(active(&list), [Path::new("/dev/tty1"), Path::new("/dev/ttyS0")]);
        std::fs::write(&list, "../etc/passwd ttyAMA0").unwrap();
        assert_eq!(active(&list), [Path::new("/dev/ttyAMA0")], "only device names");
        assert!(active(&dir.path().join("missing")).is_empty());
    }

    #[test]
    fn a_missing_serial_console_and_a_taken_screen_are_told() {
        let consoles = |names: &[&str]| names.iter().map(|n| Path::new("/dev").join(n)).collect::<Vec<_>>();
        assert!(!any_serial(&consoles(&["tty0"])), "the screen alone: a controller sees nothing");
        assert!(!any_serial(&consoles(&[])));
        assert!(any_serial(&consoles(&["tty0", "ttyS0"])));
        assert_eq!(names(&consoles(&["tty0", "ttyAMA0"])), ["tty0", "ttyAMA0"]);
        let denied = io::Error::from(io::ErrorKind::PermissionDenied);
        assert!(hint(Path::new("/dev/tty1"), &denied).contains("live-config.noautologin"));
        assert_eq!(hint(Path::new("/dev/ttyS0"), &denied), "");
    }

    #[test]
    fn screens_are_told_from_serial_lines() {
        for vt in ["/dev/tty0", "/dev/tty1", "/dev/tty12"] {
            assert!(is_vt(Path::new(vt)), "{vt}");
        }
        for serial in ["/dev/ttyS0", "/dev/ttyAMA0", "/dev/hvc0", "/dev/tty", "/dev/ttyUSB0"] {
            assert!(!is_vt(Path::new(serial)), "{serial}");
        }
    }

    #[test]
    fn one_write_puts_the_whole_text() {
        let dir = tempfile::tempdir().unwrap();
        let console = dir.path().join("console");
        std::fs::write(&console, "").unwrap();
        write_once(&console, b"PROVISION-RESULT v1 {}\n").unwrap();
        assert_eq!(std::fs::read_to_string(&console).unwrap(), "PROVISION-RESULT v1 {}\n");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&console, &link).unwrap();
        assert!(write_once(&link, b"x").is_err(), "never through a link");
    }
}
