//! What the kernel command line asks of the initrd's `/init` (the `maintenance-init` crate's
//! library, so that `fuzz/` can reach it): read as the kernel keeps it, bytes split as the
//! kernel splits them (boot-io's `kernel_args`, the dispatcher's too), so that a byte that is
//! not UTF-8 elsewhere on the line (a Latin-1 host name from a controller's iPXE script)
//! changes nothing. Of each parameter the last one wins, as of the kernel's own.
//!
//! - `maintenance.medium=MARKER`: the medium must hold `/.disk/MARKER`, which only this build
//!   of the ISO has (the image's boot menu writes it); without it, any medium with the image's
//!   volume id. A marker that is not a plain file name matches no medium.
//! - `maintenance.wait=SECS`: how long the medium may take to show up (default 120, at most
//!   3600): a BMC that attaches its virtual media late needs more, a test less.
//! - `maintenance.readahead=KIB`: the medium's readahead (default 4, at most 4096).
//! - `toram`: copy the images into RAM and let the medium go.
//! - `init=/PATH`: what to run in the root (default `/sbin/init`).

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use boot_io::cmdline::kernel_args;

/// How long virtual media may take to show up (some BMCs enumerate it late).
pub const MEDIUM_WAIT: Duration = Duration::from_secs(120);
/// The longest wait `maintenance.wait=` may ask for: an hour.
pub const MAX_WAIT_SECS: u64 = 3600;
/// The medium's readahead, in KiB, unless `maintenance.readahead=` says (see `/init`'s
/// documentation for the measure behind it).
pub const MEDIUM_READAHEAD_KIB: u32 = 4;
pub const MAX_READAHEAD_KIB: u32 = 4096;

/// What the kernel command line asks of `/init`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cmdline {
    pub marker: Option<OsString>,
    pub wait: Duration,
    pub toram: bool,
    pub readahead_kib: u32,
    pub init: PathBuf,
}

impl Default for Cmdline {
    fn default() -> Cmdline {
        Cmdline {
            marker: None,
            wait: MEDIUM_WAIT,
            toram: false,
            readahead_kib: MEDIUM_READAHEAD_KIB,
            init: PathBuf::from("/sbin/init"),
        }
    }
}

impl Cmdline {
    /// The parameters of the line in `path` (`/proc/cmdline`), read capped.
    pub fn read(path: &Path) -> std::io::Result<Cmdline> {
        boot_io::cmdline::read(path).map(|line| Cmdline::parse(&line))
    }

    pub fn parse(line: &[u8]) -> Cmdline {
        let mut args = Cmdline::default();
        let number = |value: &[u8]| std::str::from_utf8(value).ok()?.parse::<u64>().ok();
        for (name, value) in kernel_args(line) {
            match (name, value) {
                (b"maintenance.medium", Some(marker)) if !marker.is_empty() => {
                    args.marker = Some(OsString::from_vec(marker.to_vec()))
                }
                (b"maintenance.wait", Some(secs)) => {
                    let secs = number(secs).filter(|&s| s <= MAX_WAIT_SECS);
                    args.wait = secs.map_or(MEDIUM_WAIT, Duration::from_secs);
                }
                (b"maintenance.readahead", Some(kib)) => {
                    let kib = number(kib).and_then(|k| u32::try_from(k).ok()).filter(|&k| k <= MAX_READAHEAD_KIB);
                    args.readahead_kib = kib.unwrap_or(MEDIUM_READAHEAD_KIB);
                }
                (b"init", Some(init)) if init.starts_with(b"/") => args.init = PathBuf::from(OsStr::from_bytes(init)),
                (b"toram", None) => args.toram = true,
                _ => {}
            }
        }
        args
    }
}

/// Whether `marker` can name a file in `/.disk/`: one plain name (no `/`, not `.` or `..`).
pub fn is_file_name(marker: &OsStr) -> bool {
    let bytes = marker.as_bytes();
    !bytes.is_empty() && !bytes.contains(&b'/') && bytes != b"." && bytes != b".."
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_names_the_medium_and_asks_for_toram() {
        let args = Cmdline::parse(b"maintenance.medium=provision-maintenance-0123 console=tty1 quiet toram\n");
        let marker = Some(OsString::from("provision-maintenance-0123"));
        assert_eq!(args, Cmdline { marker, toram: true, ..Cmdline::default() });
        let args = Cmdline::parse(
            b"toram=no maintenance.medium= maintenance.readahead=64 maintenance.wait=15 init=/lib/systemd/systemd init=relative",
        );
        assert_eq!(
            args,
            Cmdline {
                readahead_kib: 64,
                wait: Duration::from_secs(15),
                init: "/lib/systemd/systemd".into(),
                ..Cmdline::default()
            }
        );
        for bad in ["maintenance.readahead=lots", "maintenance.readahead=4097", "maintenance.readahead=-1"] {
            assert_eq!(Cmdline::parse(bad.as_bytes()).readahead_kib, MEDIUM_READAHEAD_KIB, "{bad}");
        }
        for bad in ["maintenance.wait=soon", "maintenance.wait=3601", "maintenance.wait", "maintenance.wait=1e3"] {
            assert_eq!(Cmdline::parse(bad.as_bytes()).wait, MEDIUM_WAIT, "{bad}");
        }
        assert_eq!(Cmdline::parse(b"maintenance.wait=0").wait, Duration::ZERO);
    }

    #[test]
    fn the_last_one_wins_and_quotes_are_the_kernels() {
        let args = Cmdline::parse(b"maintenance.medium=first maintenance.wait=5 maintenance.medium=second");
        assert_eq!(args.marker, Some("second".into()));
        assert_eq!(args.wait, Duration::from_secs(5));
        // A later bad value gives the default back, as a later good one would have its own.
        assert_eq!(Cmdline::parse(b"maintenance.wait=5 maintenance.wait=x").wait, MEDIUM_WAIT);
        let args = Cmdline::parse(b"\"maintenance.medium=a b\" init=\"/sbin/my init\"");
        assert_eq!((args.marker, args.init), (Some("a b".into()), PathBuf::from("/sbin/my init")));
    }

    /// Issue 40, finding 1: `/init` read the line as UTF-8 text, and one Latin-1 byte anywhere on
    /// it ("read /proc/cmdline: stream did not contain valid UTF-8") stopped the boot for ever.
    #[test]
    fn a_byte_that_is_not_utf8_elsewhere_on_the_line_changes_nothing() {
        let dir = std::env::temp_dir().join(format!("maintenance-init-cmdline-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("cmdline");
        let line = b"BOOT_IMAGE=/live/vmlinuz hostname=caf\xe9 maintenance.medium=provision-maintenance-0123 toram\n";
        std::fs::write(&file, line).unwrap();
        let args = Cmdline::read(&file).unwrap();
        assert_eq!(args.marker, Some("provision-maintenance-0123".into()));
        assert!(args.toram);
        // Latin-1's no-break space is the kernel's whitespace too; a marker of such bytes is
        // taken as the kernel gives it.
        let args = Cmdline::parse(b"hostname=caf\xe9\xa0maintenance.medium=caf\xe9");
        assert_eq!(args.marker, Some(OsString::from_vec(b"caf\xe9".to_vec())));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_marker_names_one_file() {
        for good in ["provision-maintenance-0123", "a b", "..x"] {
            assert!(is_file_name(OsStr::new(good)), "{good}");
        }
        for bad in ["", ".", "..", "../etc/passwd", "a/b", "/"] {
            assert!(!is_file_name(OsStr::new(bad)), "{bad}");
        }
    }
}
