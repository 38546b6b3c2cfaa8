//! Arbitrary bytes as the start of a block device the dispatcher looks at during discovery:
//! ISO 9660 volume descriptors, FAT boot sectors, squashfs. Beyond "never panics": the answer
//! is the same from memory and from a file; a label is at most its field's length and holds no
//! control, separator or bidi character (it is printed in the journal and on the console); ISO 9660 is only
//! claimed with its `CD001` descriptor in place.

#![no_main]

use std::io::Write;

use libfuzzer_sys::fuzz_target;
use provision_dispatcher::media::label::{probe, Filesystem};

fuzz_target!(|data: &[u8]| {
    let found = probe(data).expect("reading memory does not fail");
    match &found {
        Filesystem::Iso9660 { volume_id } => {
            assert!(data.len() >= 17 * 2048, "ISO 9660 claimed on {} bytes", data.len());
            assert!(volume_id.chars().count() <= 32, "{volume_id:?}");
        }
        Filesystem::Fat { label } => {
            assert!(data.len() >= 512 && data[510..512] == [0x55, 0xAA]);
            assert!(label.chars().count() <= 11, "{label:?}");
        }
        Filesystem::Squashfs => assert!(data.starts_with(b"hsqs")),
        Filesystem::Unknown => {}
    }
    if let Some(label) = found.label() {
        let unprintable = provision_dispatcher::issues::unprintable;
        assert!(!label.chars().any(unprintable), "a control, separator or bidi character in {label:?}");
    }
    // A file reads the same (short reads, the end of the device).
    if data.len() <= 64 * 1024 {
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(data).unwrap();
        assert_eq!(probe(&file).unwrap(), found);
    }
});
