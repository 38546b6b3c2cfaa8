//! The consoles the kernel writes to (`/sys/class/tty/console/active`: `tty0 ttyS0`): a
//! process's own output reaches one console at most (/dev/console is the last `console=`),
//! while a BMC shows the serial console and the video console to different people.

use std::io;
use std::path::{Path, PathBuf};

/// Finding the consoles and writing a line whole are boot-io's, which the initrd's `/init`
/// tells its failures with.
pub use boot_io::console::{active, is_vt, write_once, ACTIVE};

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
}
