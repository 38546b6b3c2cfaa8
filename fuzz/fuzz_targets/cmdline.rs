//! Arbitrary bytes as the kernel command line (the controller writes it, a boot loader edits
//! it, a person types it at the GRUB prompt; the kernel keeps bytes, not UTF-8). Beyond "never
//! panics": every parameter's name and value are pieces of the line, a name holds no kernel
//! whitespace unless it was quoted, `provision.recipe=` is either a lower-case SHA-256 or
//! malformed, and the guard fails closed: whatever else the line holds, a usable
//! `provision.recipe` is honoured, and a second, unusable one makes it malformed.

#![no_main]

use libfuzzer_sys::fuzz_target;
use provision_dispatcher::media::cmdline::{kernel_args, Cmdline, Expected};

fn contains(line: &[u8], piece: &[u8]) -> bool {
    piece.is_empty() || line.windows(piece.len()).any(|w| w == piece)
}

fuzz_target!(|data: &[u8]| {
    for (name, value) in kernel_args(data) {
        assert!(contains(data, name), "{name:?} is not from the line");
        if let Some(value) = value {
            assert!(contains(data, value), "{value:?} is not from the line");
        }
        if !data.contains(&b'"') {
            assert!(!name.iter().any(|b| b" \t\n\x0b\x0c\r\xa0".contains(b)), "{name:?}");
        }
    }
    match Cmdline::parse(data).recipe {
        Some(Expected::Sha256(hex)) => {
            assert!(hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
        }
        Some(Expected::Malformed) | None => {}
    }
    if !data.contains(&b'"') {
        let good = format!("provision.recipe=sha256:{}", "ab".repeat(32));
        let guarded = [data, b" ", good.as_bytes()].concat();
        assert!(Cmdline::parse(&guarded).recipe.is_some(), "the guard was lost");
        let lifted = [good.as_bytes(), b" ", data, b" provision.recipe"].concat();
        assert_eq!(Cmdline::parse(&lifted).recipe, Some(Expected::Malformed), "a bare parameter lifted the guard");
    }
});
