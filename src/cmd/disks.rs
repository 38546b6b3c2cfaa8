//! `disks`: every whole disk of this machine, what identifies it and what the dispatcher thinks
//! of it (SPEC §2, §4a): the inventory a controller stores, and which disk is which for a person
//! at the console.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::cmd::check::Format;
use crate::cmd::run::defaults;
use crate::disks::verdict::Listed;
use crate::disks::{self, Dev};
use crate::failure::Exit;
use crate::inventory;
use crate::media::cmdline::Cmdline;
use crate::media::discover::{Devices, Request};
use crate::report::columns;

/// How long the devices may take to show their labels: one look of `run`'s.
const LOOK: Duration = Duration::from_secs(1);

/// The console's width, which the human format fits.
const COLUMNS: usize = 80;

#[derive(Debug, Clone)]
pub struct DisksArgs {
    pub format: Format,
    /// Where the task media is, as `run --media` takes it; else the kernel command line's
    /// `provision.media=`, else every device labelled `label`.
    pub media: Option<PathBuf>,
    pub label: String,
}

impl Default for DisksArgs {
    fn default() -> Self {
        DisksArgs { format: Format::Human, media: None, label: defaults::LABEL.into() }
    }
}

/// Prints the inventory on `out`: 0, or 70 when the disks cannot be listed.
pub fn run(args: &DisksArgs, out: &mut impl Write) -> io::Result<Exit> {
    let inventory = match inventory::disks(Path::new(disks::SYSFS), &media_devices(args)) {
        Ok(inventory) => inventory,
        Err(e) => {
            eprintln!("provision-dispatcher: cannot list the disks in {}/block: {e}", disks::SYSFS);
            return Ok(Exit::Internal);
        }
    };
    match args.format {
        Format::Json => {
            serde_json::to_writer(&mut *out, &inventory)?;
            writeln!(out)?;
        }
        Format::Human => out.write_all(table(&inventory.disks).as_bytes())?,
    }
    out.flush()?;
    Ok(Exit::Ok)
}

/// The devices the task media is on, as `run` would look for it, without waiting for it: the
/// path given (a device, or the filesystem of an image file or a directory), or every device
/// that shows the label within [`LOOK`] (two task media are both the media's).
fn media_devices(args: &DisksArgs) -> Vec<Dev> {
    let request = match (&args.media, Cmdline::of_this_boot().media) {
        (Some(path), _) => Request::Path(path.clone()),
        (None, Some(request)) => request,
        (None, None) => Request::Label(args.label.clone()),
    };
    match request {
        Request::Path(path) => disks::device_of(&path).into_iter().collect(),
        Request::Label(label) => Devices::system()
            .scan(Instant::now() + LOOK, &|| false)
            .into_iter()
            .filter(|c| c.holds.as_ref().is_ok_and(|fs| fs.label() == Some(label.as_str())))
            .filter_map(|c| disks::device_of(&c.path))
            .collect(),
    }
}

/// One line a disk, fitted to [`COLUMNS`] terminal columns: a field too long for its column
/// is cut, marked `...`.
fn table(disks: &[Listed]) -> String {
    const WIDTHS: [usize; 5] = [8, 7, 9, 16, 16];
    let row = |cells: [&str; 6]| {
        let mut line = String::new();
        for (cell, width) in cells.iter().zip(WIDTHS) {
            line.push_str(&columns::fit(cell, width));
            line.push(' ');
        }
        line.push_str(cells[5]);
        let mut line = line.trim_end().to_owned();
        columns::cut(&mut line, COLUMNS);
        line + "\n"
    };
    let mut text = row(["NAME", "SIZE", "VERDICT", "MODEL", "SERIAL", "WWN"]);
    for listed in disks {
        let disk = &listed.disk;
        let field = |value: &Option<String>| value.clone().unwrap_or_else(|| "-".into());
        let size = size(disk.size_bytes);
        let (model, serial, wwn) = (field(&disk.model), field(&disk.serial), field(&disk.wwn));
        text += &row([&disk.name, &size, listed.verdict.name(), &model, &serial, &wwn]);
    }
    if disks.is_empty() {
        text += "(no whole disks)\n";
    }
    text
}

/// Bytes in binary units, as lsblk writes them: `1G`, `931.5G`, `0B`.
fn size(bytes: u64) -> String {
    const UNITS: [&str; 7] = ["B", "K", "M", "G", "T", "P", "E"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    let text = format!("{value:.1}");
    format!("{}{}", text.strip_suffix(".0").unwrap_or(&text), UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checks::host::Host;
    use crate::disks::tests::disk;
    use crate::disks::verdict::Verdict;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn sizes_read_as_lsblk_writes_them() {
        assert_eq!(size(0), "0B");
        assert_eq!(size(1 << 30), "1G");
        assert_eq!(size(500_107_862_016), "465.8G");
        assert_eq!(size(1_953_125 * 512), "953.7M");
        assert_eq!(size(16 << 40), "16T");
    }

    #[test]
    fn the_table_fits_an_80_column_console() {
        let long = disks::Disk {
            model: Some("Samsung SSD 860 EVO 500GB".into()),
            serial: Some("S3Z1NB0K123456X".into()),
            wwn: Some("0x00253800000000000000000000000001".into()),
            size_bytes: 500_107_862_016,
            ..disk("nvme10n1", 259 << 8)
        };
        let short = disks::Disk { model: Some("QEMU HARDDISK".into()), ..disk("sdb", 8 << 8 | 16) };
        let listed = [
            Listed { disk: long, verdict: Verdict::Candidate, users: vec![] },
            Listed { disk: short, verdict: Verdict::InUse, users: vec!["mounted".into()] },
        ];
        let text = table(&listed);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines.iter().all(|l| columns::width(l) <= COLUMNS), "{text}");
        assert!(lines[0].starts_with("NAME     SIZE    VERDICT   MODEL"), "{text}");
        assert!(
            lines[1].starts_with("nvme10n1 465.8G  candidate Samsung SSD 8... S3Z1NB0K123456X  0x002538"),
            "{text}"
        );
        assert!(lines[1].ends_with("..."), "{text}");
        assert_eq!(lines[2], "sdb      0B      in_use    QEMU HARDDISK    -                -");
        assert_eq!(table(&[]), format!("{}(no whole disks)\n", lines[0].to_owned() + "\n"));
    }

    /// Issue 40, finding 4: the table was cut by characters, so a model and a serial in East
    /// Asian wide characters made a row of 79 characters take 105 columns.
    #[test]
    fn wide_characters_are_fitted_by_their_columns() {
        use crate::report::columns::width;
        let wide = disks::Disk {
            model: Some("東芝製ハードディスク装置".into()),
            serial: Some("シリアル１２３４５６７８".into()),
            wwn: Some("0x5000c50015ea71ad".into()),
            size_bytes: 1 << 40,
            ..disk("sda", 8 << 8)
        };
        let combining = disks::Disk { model: Some("Mode\u{301}le\u{301}".into()), ..disk("sdb", 8 << 8 | 16) };
        let listed = [
            Listed { disk: wide, verdict: Verdict::Candidate, users: vec![] },
            Listed { disk: combining, verdict: Verdict::Candidate, users: vec![] },
        ];
        let text = table(&listed);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines.iter().all(|l| width(l) <= COLUMNS), "{text}");
        // Every column starts where the header's does: counted in columns, not characters.
        let column_of =
            |line: &str, at: usize| width(&line[..line.char_indices().nth(at).map_or(line.len(), |(i, _)| i)]);
        let starts = |line: &str| -> Vec<usize> {
            let chars: Vec<char> = line.chars().collect();
            (1..chars.len()).filter(|&i| chars[i - 1] == ' ' && chars[i] != ' ').map(|i| column_of(line, i)).collect()
        };
        let header = starts(lines[0]);
        assert_eq!(&starts(lines[1])[..4], &header[..4], "{text}");
        assert_eq!(&starts(lines[2])[..3], &header[..3], "{text}");
        assert!(lines[1].contains("candidate 東芝製ハード...  シリアル１２...  0x5000c50015ea71ad"), "{text}");
    }

    #[test]
    fn this_machine_lists_its_disks_with_verdicts() {
        let inventory = inventory::disks(Path::new(disks::SYSFS), &[]).unwrap();
        let root = std::fs::metadata("/").unwrap().dev();
        // The disk of `/` (unless it is an overlay or RAM) is the system's.
        if rustix::fs::major(root) != 0 {
            let host_root = crate::checks::host::SystemHost::new(&[], &|_| anyhow::bail!("unused")).whole_disk(root);
            if let Some(listed) = inventory.disks.iter().find(|l| l.disk.dev == host_root) {
                assert_eq!(listed.verdict, Verdict::System);
            }
        }
        for listed in &inventory.disks {
            assert_eq!(listed.verdict == Verdict::InUse, listed.verdict != Verdict::System && !listed.users.is_empty());
        }
    }
}
