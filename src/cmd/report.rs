//! `report`: the last status, for people. `provision-failed.service` runs it to put a banner on
//! the console and in the journal: what failed, each field and why, and what to do next.

use std::io::{self, Write};
use std::path::Path;

use crate::failure::Exit;
use crate::report::banner;
use crate::report::status::Status;

pub fn run(status_file: &Path, out: &mut impl Write) -> io::Result<Exit> {
    match Status::read(status_file) {
        Ok(status) => {
            out.write_all(banner::render(&status).as_bytes())?;
            Ok(Exit::Ok)
        }
        Err(e) => {
            writeln!(
                out,
                "provision-dispatcher: no status at {} ({e}): the dispatcher did not record a run.\n\
                 See: journalctl -b -u provision-dispatcher.service",
                status_file.display()
            )?;
            Ok(Exit::NotFound)
        }
    }
}
