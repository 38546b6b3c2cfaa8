//! `report`: the last status, for people and for controllers. `provision-failed.service` runs
//! it to put a banner on the consoles and in the journal (what failed, each field and why,
//! and what to do next), then to repeat the result line on the serial consoles for a
//! controller that attaches late.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use boot_io::result::repeat_every;

use crate::cmd::check::Format;
use crate::failure::Exit;
use crate::issues::printable;
use crate::report::banner;
use crate::report::console;
use crate::report::result::ResultLine;
use crate::report::status::Status;
use crate::shutdown;

#[derive(Debug, Clone, Copy, Default)]
pub struct ReportArgs {
    pub format: Format,
    /// Also write the banner to every console the kernel writes to.
    pub consoles: bool,
    /// Then repeat the result line on the serial consoles until stopped (every 30 s in the
    /// first hour, then every 5 minutes: boot-io's `repeat_every`).
    pub repeat: bool,
}

/// Prints the banner (or, as JSON, the result line's object) on `out`; with `consoles`, also
/// on every console the kernel writes to, fitted to one screen.
pub fn run(status_file: &Path, args: ReportArgs, out: &mut impl Write) -> io::Result<Exit> {
    let (status, bytes) = match Status::read_bytes(status_file) {
        Ok(read) => read,
        Err(e) => {
            // The reader's error may quote the file (an unknown state word): printed escaped.
            let text = format!(
                "provision-dispatcher: no status at {} ({}): the dispatcher did not record a run.\n\
                 See: journalctl -b -u provision-dispatcher.service\n",
                printable(&status_file.display().to_string()),
                printable(&e.to_string())
            );
            match args.format {
                // One object always, as the result line's readers expect: no state, and why.
                Format::Json => {
                    let reason = format!("no status at {}: {e}", status_file.display());
                    let object =
                        serde_json::json!({"state": null, "failure": "no_status", "exit_code": null, "reason": reason});
                    writeln!(out, "{}", crate::report::result::ascii_json(&object))?;
                }
                Format::Human => out.write_all(text.as_bytes())?,
            }
            if args.consoles {
                let _took = console::write_all_consoles(&console::active(Path::new(console::ACTIVE)), text.as_bytes());
            }
            return Ok(Exit::NotFound);
        }
    };
    match args.format {
        Format::Json => writeln!(out, "{}", ResultLine::new(&status, Some(&bytes)).json())?,
        Format::Human => out.write_all(banner::render(&status).as_bytes())?,
    }
    out.flush()?;
    if args.consoles {
        let consoles = console::active(Path::new(console::ACTIVE));
        let took = console::write_all_consoles(&consoles, banner::console(&status).as_bytes());
        // A console that refused the banner is named on the serial ones that took it (a line
        // more on a screen would push the banner's title off it).
        for refused in consoles.iter().filter(|c| !took.contains(c)) {
            let note = format!(
                "provision-dispatcher: the banner could not be shown on {} (see the journal)\n",
                refused.display()
            );
            for serial in took.iter().filter(|c| !console::is_vt(c)) {
                let _ = console::write_once(serial, note.as_bytes());
            }
        }
        if args.repeat {
            shutdown::install_signal_handlers();
            let serial: Vec<_> = consoles.into_iter().filter(|c| !console::is_vt(c)).collect();
            repeat(status_file, &serial, &|| shutdown::stop_requested().is_some(), &mut std::thread::sleep);
        }
    }
    Ok(Exit::Ok)
}

/// Writes the result line of the status to the serial consoles, again and again, until `stop`.
/// Only serial lines: on a screen each line would scroll the banner up, until its title is
/// gone, which is what the banner is fitted to prevent; the dispatcher already wrote the line
/// there once, above the banner. The status is read again each time: the line always proves
/// the status.json there is.
fn repeat(status_file: &Path, serial: &[PathBuf], stop: &dyn Fn() -> bool, sleep: &mut dyn FnMut(Duration)) {
    // Short slices, so that a stop ends the wait at once. Time is counted as slept.
    const SLICE: Duration = Duration::from_millis(200);
    let mut since_start = Duration::ZERO;
    loop {
        let interval = repeat_every(since_start);
        let mut waited = Duration::ZERO;
        while waited < interval {
            if stop() {
                return;
            }
            let slice = SLICE.min(interval - waited);
            sleep(slice);
            waited += slice;
        }
        since_start += interval;
        if let Ok((status, bytes)) = Status::read_bytes(status_file) {
            let _took = console::write_all_consoles(serial, ResultLine::new(&status, Some(&bytes)).line().as_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[test]
    fn the_banner_goes_to_out() {
        let dir = tempfile::tempdir().unwrap();
        let mut status = Status::running("2026-11-23T00:00:00Z".into(), None);
        status.write(dir.path()).unwrap();
        let mut out = Vec::new();
        let exit = run(&dir.path().join("status.json"), ReportArgs::default(), &mut out).unwrap();
        assert_eq!(exit, Exit::Ok);
        assert!(String::from_utf8(out).unwrap().contains("PROVISIONING DID NOT FINISH"));
    }

    #[test]
    fn json_is_the_result_lines_object_for_the_status_as_written() {
        use sha2::{Digest, Sha256};
        let dir = tempfile::tempdir().unwrap();
        let written = Status::running("2026-11-23T00:00:00Z".into(), None).write(dir.path()).unwrap();
        let mut out = Vec::new();
        let args = ReportArgs { format: Format::Json, ..ReportArgs::default() };
        run(&dir.path().join("status.json"), args, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text.lines().count(), 1);
        let json: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(json["state"], "running");
        assert_eq!(json["status_sha256"], crate::report::result::hex(&Sha256::digest(&written)));
    }

    #[test]
    fn repeating_writes_whole_lines_and_ends_when_stopped() {
        let dir = tempfile::tempdir().unwrap();
        Status::running("2026-11-23T00:00:00Z".into(), None).write(dir.path()).unwrap();
        let serial = dir.path().join("ttyS0");
        std::fs::write(&serial, "").unwrap();
        let slept = Cell::new(Duration::ZERO);
        // The stop comes once a line has been written.
        let stop = || std::fs::metadata(&serial).unwrap().len() > 0;
        let mut sleep = |d: Duration| slept.set(slept.get() + d);
        repeat(&dir.path().join("status.json"), std::slice::from_ref(&serial), &stop, &mut sleep);
        let text = std::fs::read_to_string(&serial).unwrap();
        assert!(text.starts_with("PROVISION-RESULT v1 {\"state\":\"running\""), "{text}");
        assert_eq!(text.matches('\n').count(), 1);
        assert_eq!(slept.get(), Duration::from_secs(30), "the first line after 30 s");
    }
}
