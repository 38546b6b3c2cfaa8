//! Arbitrary text as the kernel command line (the controller writes it, a boot loader edits
//! it, a person types it at the GRUB prompt). Beyond "never panics": every parameter's name
//! and value are pieces of the line, a name holds no whitespace unless it was quoted, and
//! `provision.recipe=` is either a lower-case SHA-256 or malformed.

#![no_main]

use libfuzzer_sys::fuzz_target;
use provision_dispatcher::media::cmdline::{kernel_args, Cmdline, Expected};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    for (name, value) in kernel_args(text) {
        assert!(text.contains(name), "{name:?} is not from the line");
        if let Some(value) = value {
            assert!(text.contains(value), "{value:?} is not from the line");
        }
        if !text.contains('"') {
            assert!(!name.chars().any(char::is_whitespace), "{name:?}");
        }
    }
    match Cmdline::parse(text).recipe {
        Some(Expected::Sha256(hex)) => {
            assert!(hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
        }
        Some(Expected::Malformed) | None => {}
    }
});
