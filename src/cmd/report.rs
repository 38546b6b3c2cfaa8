//! `report`: the last status, for people. `provision-failed.service` runs it to put a banner on
//! the consoles and in the journal: what failed, each field and why, and what to do next.

use std::fs::OpenOptions;
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use crate::failure::Exit;
use crate::issues::printable;
use crate::report::banner;
use crate::report::status::Status;

/// Where the kernel lists the consoles it writes to (`tty1 ttyS0`).
const ACTIVE_CONSOLES: &str = "/sys/class/tty/console/active";

/// Prints the banner on `out`; with `consoles`, also on every console the kernel writes to.
/// A process's own output reaches one console at most (/dev/console is the last `console=`),
/// while a BMC shows the serial console and the video console to different people.
pub fn run(status_file: &Path, consoles: bool, out: &mut impl Write) -> io::Result<Exit> {
    let (text, exit) = match Status::read(status_file) {
        Ok(status) => (banner::render(&status), Exit::Ok),
        // The reader's error may quote the file (an unknown state word): printed escaped.
        Err(e) => (
            format!(
                "provision-dispatcher: no status at {} ({}): the dispatcher did not record a run.\n\
                 See: journalctl -b -u provision-dispatcher.service\n",
                printable(&status_file.display().to_string()),
                printable(&e.to_string())
            ),
            Exit::NotFound,
        ),
    };
    out.write_all(text.as_bytes())?;
    if consoles {
        for console in active_consoles(Path::new(ACTIVE_CONSOLES)) {
            // A console that cannot be written to takes nothing from the others or the journal.
            let _ = write_console(&Path::new("/dev").join(&console), &text);
        }
    }
    Ok(exit)
}

/// The names in the kernel's list of active consoles.
fn active_consoles(list: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(list).unwrap_or_default();
    text.split_whitespace().filter(|name| name.bytes().all(|b| b.is_ascii_alphanumeric())).map(str::to_owned).collect()
}

fn write_console(device: &Path, text: &str) -> io::Result<()> {
    let mut console = OpenOptions::new().write(true).custom_flags(libc::O_NOCTTY).open(device)?;
    console.write_all(text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consoles_are_read_from_the_kernels_list() {
        let dir = tempfile::tempdir().unwrap();
        let list = dir.path().join("active");
        std::fs::write(&list, "tty1 ttyS0\n").unwrap();
        assert_eq!(active_consoles(&list), ["tty1", "ttyS0"]);
        std::fs::write(&list, "../etc/passwd ttyAMA0").unwrap();
        assert_eq!(active_consoles(&list), ["ttyAMA0"], "only device names");
        assert!(active_consoles(&dir.path().join("missing")).is_empty());
    }

    #[test]
    fn the_banner_goes_to_out_and_to_each_console_given() {
        let dir = tempfile::tempdir().unwrap();
        let status = Status::running("2026-11-23T00:00:00Z".into(), None);
        status.write(dir.path()).unwrap();
        let console = dir.path().join("console");
        std::fs::write(&console, "").unwrap();
        write_console(&console, "banner\n").unwrap();
        assert_eq!(std::fs::read_to_string(&console).unwrap(), "banner\n");
        let mut out = Vec::new();
        let exit = run(&dir.path().join("status.json"), false, &mut out).unwrap();
        assert_eq!(exit, Exit::Ok);
        assert!(String::from_utf8(out).unwrap().contains("PROVISIONING DID NOT FINISH"));
    }
}
