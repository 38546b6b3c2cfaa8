//! The consoles the kernel writes to (`/sys/class/tty/console/active`: `tty0 ttyS0`): a
//! process's own output reaches one console at most (/dev/console is the last `console=`),
//! while a BMC shows the serial console and the video console to different people.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::shutdown::stop_requested;

/// Finding the consoles and writing a line whole are boot-io's, which the initrd's `/init`
/// tells its failures with.
pub use boot_io::console::{active, is_vt, open, write_once, write_whole, ACTIVE};

/// How long a console may keep its output queue without sending a byte before it is given
/// up: a UART at 1200 baud sends one every 8 ms, one held by flow control (a BMC's
/// serial-over-LAN that nobody reads may hold it) sends none.
pub const STUCK: Duration = Duration::from_secs(1);

/// How often a console's output queue is looked at while it drains.
const POLL: Duration = Duration::from_millis(2);

/// Writes `lines` to each device in turn, each line with one non-blocking write (as
/// [`write_once`]) once the line before it has left the device's output queue (`TIOCOUTQ`):
/// several 4 KiB lines in a row would otherwise find a UART's buffer full. A console whose queue
/// does not move for [`STUCK`], or that is still sending at `until`, or when a stop is
/// requested, is given up: of the lines left, only the last (the result line) is still tried,
/// once, as [`write_all_consoles`] would. Returns the consoles that took every line.
pub fn write_lines_all_consoles(devices: &[PathBuf], lines: &[&[u8]], until: Instant) -> Vec<PathBuf> {
    let mut written = Vec::new();
    for device in devices {
        let mut console = match open(device) {
            Ok(console) => console,
            Err(e) => {
                tracing::warn!(phase = "report", "cannot write to {}: {e}{}", device.display(), hint(device, &e));
                continue;
            }
        };
        let mut given_up = false;
        let mut whole = true;
        for (i, line) in lines.iter().enumerate() {
            let last = i + 1 == lines.len();
            if !given_up {
                if let Err(why) = drain(&console, until) {
                    tracing::warn!(
                        phase = "report",
                        "gave up waiting for {} to send the inventory: {why}",
                        device.display()
                    );
                    given_up = true;
                }
            }
            if given_up && !last {
                whole = false;
                continue;
            }
            if let Err(e) = write_whole(&mut console, line) {
                tracing::warn!(phase = "report", "cannot write to {}: {e}{}", device.display(), hint(device, &e));
                whole = false;
            }
        }
        if whole {
            written.push(device.clone());
        }
    }
    written
}

/// Waits until the console's output queue is empty: at most until `until`, while it keeps
/// moving ([`STUCK`]), and not after a stop was requested. A device that is no terminal (a file,
/// in tests) has no queue.
fn drain(console: &File, until: Instant) -> Result<(), String> {
    wait_until_empty(|| output_queue(console), until)
}

/// [`drain`]'s wait, on a queue `queued` measures.
fn wait_until_empty(mut output_queue: impl FnMut() -> usize, until: Instant) -> Result<(), String> {
    let mut queued = output_queue();
    let mut moved = Instant::now();
    while queued > 0 {
        let now = Instant::now();
        if let Some(signal) = stop_requested() {
            return Err(format!("stopped by signal {signal}"));
        }
        if now >= until {
            return Err(format!("{queued} bytes still to send when the time for it ran out"));
        }
        if now.duration_since(moved) >= STUCK {
            return Err(format!("{queued} bytes have not moved for {} ms (flow control?)", STUCK.as_millis()));
        }
        std::thread::sleep(POLL);
        let now_queued = output_queue();
        if now_queued < queued {
            moved = Instant::now();
        }
        queued = now_queued;
    }
    Ok(())
}

/// The bytes in a terminal's output queue (`TIOCOUTQ`); 0 for what is no terminal.
fn output_queue(console: &File) -> usize {
    let mut queued: libc::c_int = 0;
    // SAFETY: TIOCOUTQ writes one int through the pointer, which points at one.
    let done = unsafe { libc::ioctl(console.as_raw_fd(), libc::TIOCOUTQ, &mut queued) };
    if done == 0 {
        usize::try_from(queued).unwrap_or(0)
    } else {
        0
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

    /// Each line with a write of its own, in order; a console that cannot be opened takes none.
    #[test]
    fn lines_are_written_in_order_to_every_console() {
        let dir = tempfile::tempdir().unwrap();
        let console = dir.path().join("console");
        std::fs::write(&console, "").unwrap();
        let lines: Vec<Vec<u8>> = (0..6).map(|i| format!("{i}{}\n", "x".repeat(3000)).into_bytes()).collect();
        let lines: Vec<&[u8]> = lines.iter().map(Vec::as_slice).collect();
        let consoles = [dir.path().join("missing"), console.clone()];
        let written = write_lines_all_consoles(&consoles, &lines, Instant::now() + Duration::from_secs(30));
        assert_eq!(written, std::slice::from_ref(&console));
        assert_eq!(std::fs::read(&console).unwrap(), lines.concat());
    }

    /// A queue that drains is waited for; one that does not move, or one still full when the
    /// time is up, is given up.
    #[test]
    fn a_queue_is_waited_for_while_it_moves() {
        let mut draining = [4000, 3000, 3000, 1000, 0].into_iter();
        let far = Instant::now() + Duration::from_secs(600);
        assert_eq!(wait_until_empty(|| draining.next().unwrap_or(0), far), Ok(()));
        let stuck = wait_until_empty(|| 120, far).unwrap_err();
        assert!(stuck.contains("120 bytes have not moved for 1000 ms"), "{stuck}");
        let late = wait_until_empty(|| 4000, Instant::now()).unwrap_err();
        assert!(late.contains("4000 bytes still to send when the time for it ran out"), "{late}");
    }
}
