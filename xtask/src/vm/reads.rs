//! What a guest read from its boot medium, file by file: QEMU's trace of the drives' reads
//! (`reads.log` of each case: `blk_co_preadv` per request, and `bdrv_open_common`, which names
//! the file behind each node), up to a moment, laid over the ISO's own map of its files
//! (xorriso's `report_lba`). The firmware's, GRUB's and Linux's reads alike: all of them cross
//! a BMC's virtual-media link.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};

use crate::system;

/// One read request: when (seconds since the epoch, as QEMU stamps its log), where, how much.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Read {
    pub at: f64,
    pub offset: u64,
    pub bytes: u64,
}

/// The reads of the drive whose image is `file`, from QEMU's trace log.
pub fn of_file(log: &str, file: &Path) -> Vec<Read> {
    let wanted = format!("filename \"{}\"", file.display());
    // The format node (raw) over the file is the one requests enter.
    let nodes: Vec<&str> = log
        .lines()
        .filter(|line| line.contains(":bdrv_open_common ") && line.contains(&wanted))
        .filter_map(|line| field(line, "bs "))
        .collect();
    log.lines()
        .filter(|line| line.contains(":blk_co_preadv "))
        .filter(|line| field(line, "bs ").is_some_and(|bs| nodes.contains(&bs)))
        .filter_map(|line| {
            let at = line.split_once('@')?.1.split_once(':')?.0.parse().ok()?;
            Some(Read {
                at,
                offset: field(line, "offset ")?.parse().ok()?,
                bytes: field(line, "bytes ")?.parse().ok()?,
            })
        })
        .collect()
}

/// The word after `name` in a trace line (`bs 0x55...`, `offset 123`).
fn field<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    let (_, rest) = line.split_once(&format!(" {name}"))?;
    rest.split_whitespace().next()
}

/// A file of the ISO and where its data lies, in bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct Extent {
    pub path: String,
    pub start: u64,
    pub bytes: u64,
}

/// Every file's data in `iso` (xorriso `-find / -exec report_lba`; 2 KiB blocks).
pub fn extents(iso: &Path) -> Result<Vec<Extent>> {
    let mut cmd = Command::new("xorriso");
    cmd.args(["-report_about", "FAILURE", "-indev"]).arg(iso).args([
        "-find",
        "/",
        "-type",
        "f",
        "-exec",
        "report_lba",
        "--",
    ]);
    let out = cmd.output().with_context(|| format!("cannot start {}", system::describe(&cmd)))?;
    if !out.status.success() {
        anyhow::bail!("{} failed: {}", system::describe(&cmd), String::from_utf8_lossy(&out.stderr));
    }
    parse_report(&String::from_utf8_lossy(&out.stdout))
        .with_context(|| format!("xorriso's report of {}", iso.display()))
}

fn parse_report(text: &str) -> Result<Vec<Extent>> {
    const BLOCK: u64 = 2048;
    let mut extents = vec![];
    for line in text.lines().filter_map(|l| l.strip_prefix("File data lba:")) {
        let fields: Vec<&str> = line.splitn(5, ',').map(str::trim).collect();
        let [_, lba, _, size, path] = fields[..] else { anyhow::bail!("unexpected line {line:?}") };
        extents.push(Extent {
            path: path.trim_matches('\'').to_owned(),
            start: lba.parse::<u64>()? * BLOCK,
            bytes: size.parse()?,
        });
    }
    Ok(extents)
}

/// Where the bytes of `reads` made before `until` went: per part of the ISO (each file under
/// `/live`, the ESP, BIOS GRUB's files, and the rest: volume descriptors, directories, the
/// partition tables), bytes read (a region read twice counts twice: it crossed the link
/// twice) and the part's size. Largest first.
pub fn by_part(reads: &[Read], extents: &[Extent], until: SystemTime) -> Vec<(String, u64, u64)> {
    let until = until.duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
    let mut parts: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for extent in extents {
        parts.entry(part(&extent.path)).or_default().1 += extent.bytes;
    }
    for read in reads.iter().filter(|r| r.at <= until) {
        let (start, end) = (read.offset, read.offset + read.bytes);
        let mut counted = 0;
        for extent in extents {
            let overlap = end.min(extent.start + extent.bytes).saturating_sub(start.max(extent.start));
            if overlap > 0 {
                parts.entry(part(&extent.path)).or_default().0 += overlap;
                counted += overlap;
            }
        }
        parts.entry(OTHER.into()).or_default().0 += read.bytes - counted;
    }
    let mut parts: Vec<(String, u64, u64)> =
        parts.into_iter().filter(|(_, (read, _))| *read > 0).map(|(name, (read, size))| (name, read, size)).collect();
    parts.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    parts
}

const OTHER: &str = "(volume descriptors, directories, partition tables)";

fn part(path: &str) -> String {
    match path {
        _ if path.starts_with("/live/") => path.to_owned(),
        "/efi.img" => "/efi.img (the ESP: shim, GRUB)".into(),
        _ if path.starts_with("/boot/grub/") => "/boot/grub (the menu; BIOS GRUB's files)".into(),
        _ => "(other files)".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = "\
9@100.000001:bdrv_open_common bs 0xa filename \"/x/image.iso\" flags 0x28000 format_name \"file\"
9@100.000002:bdrv_open_common bs 0xb filename \"/x/image.iso\" flags 0x20000 format_name \"raw\"
9@100.000003:bdrv_open_common bs 0xc filename \"/x/task.iso\" flags 0x20000 format_name \"raw\"
9@101.5:blk_co_preadv blk 0x1 bs 0xb offset 4096 bytes 8192 flags 0x0
9@101.6:blk_co_preadv blk 0x2 bs 0xc offset 0 bytes 2048 flags 0x0
9@102.0:blk_co_preadv blk 0x1 bs 0xb offset 0 bytes 2048 flags 0x0
";

    #[test]
    fn the_reads_of_one_drive_are_picked_out_of_the_trace() {
        let reads = of_file(LOG, Path::new("/x/image.iso"));
        assert_eq!(reads, [Read { at: 101.5, offset: 4096, bytes: 8192 }, Read { at: 102.0, offset: 0, bytes: 2048 }]);
    }

    #[test]
    fn bytes_go_to_the_files_they_fall_in_until_the_moment() {
        let extents = parse_report(
            "Report layout: xt , Startlba ,   Blocks , Filesize , ISO image path\n\
             File data lba:  0 ,        2 ,        2 ,     4000 , '/live/vmlinuz'\n\
             File data lba:  0 ,        5 ,        1 ,     2048 , '/efi.img'\n",
        )
        .unwrap();
        assert_eq!(extents[0], Extent { path: "/live/vmlinuz".into(), start: 4096, bytes: 4000 });
        let reads = of_file(LOG, Path::new("/x/image.iso"));
        let until = UNIX_EPOCH + std::time::Duration::from_secs_f64(101.9);
        assert_eq!(
            by_part(&reads, &extents, until),
            [
                ("/live/vmlinuz".to_owned(), 4000, 4000),
                (OTHER.to_owned(), 2144, 0),
                ("/efi.img (the ESP: shim, GRUB)".to_owned(), 2048, 2048)
            ]
        );
    }
}
