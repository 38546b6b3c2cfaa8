//! Arbitrary bytes as the kernel command line the initrd's `/init` reads (its `maintenance.*`
//! parameters, `toram`, `init=`; the kernel keeps bytes, not UTF-8). Beyond "never panics": each
//! value within its bound, `init` an absolute path, a marker a non-empty piece of the line; of
//! each parameter the last one wins whatever the line holds; and a byte that is not UTF-8
//! elsewhere on the line changes nothing (issue 40: one such byte stopped the boot).

#![no_main]

use std::os::unix::ffi::OsStrExt;
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use maintenance_init::{Cmdline, MAX_READAHEAD_KIB, MAX_WAIT_SECS};

fn contains(line: &[u8], piece: &[u8]) -> bool {
    piece.is_empty() || line.windows(piece.len()).any(|w| w == piece)
}

fuzz_target!(|data: &[u8]| {
    let args = Cmdline::parse(data);
    assert!(args.readahead_kib <= MAX_READAHEAD_KIB);
    assert!(args.wait <= Duration::from_secs(MAX_WAIT_SECS));
    assert!(args.init.as_os_str().as_bytes().starts_with(b"/"), "{:?}", args.init);
    if let Some(marker) = &args.marker {
        assert!(!marker.is_empty() && contains(data, marker.as_bytes()), "{marker:?} is not from the line");
    }
    // Without quotes, a parameter added after the line stands alone.
    if !data.contains(&b'"') {
        let later = Cmdline::parse(&[data, b" maintenance.medium=fuzzmark maintenance.wait=7 init=/fuzz"].concat());
        assert_eq!(later.marker.as_deref(), Some(std::ffi::OsStr::new("fuzzmark")), "the last one wins");
        assert_eq!((later.wait, later.init.as_os_str().as_bytes()), (Duration::from_secs(7), &b"/fuzz"[..]));
        assert_eq!(Cmdline::parse(&[data, b" hostname=caf\xe9\xa0x=\xff"].concat()), args, "a Latin-1 byte changed it");
    }
});
