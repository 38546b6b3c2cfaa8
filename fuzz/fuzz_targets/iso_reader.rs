//! Arbitrary bytes as a task ISO read in user space (`media check`, and a task held in the boot
//! medium): the ISO 9660 reader with Linux's names, types and refusals, through the media's
//! files as the boot path opens them. Beyond "never panics": every lookup ends within the
//! reader's bounds; a file opened is a regular file, and reading it yields at most the length
//! the image claims, stopping with the image's end at the latest; an image read from a file
//! answers as the same bytes in memory. The same bytes as a maintenance ISO with a task area
//! (`media embed`'s), and as an area alone (what the boot reads under `/run/live`): a task taken
//! from one is exactly as long as its header says, and is the task its SHA-256 names.

#![no_main]

use std::io::{Read, Write};

use libfuzzer_sys::fuzz_target;
use sha2::{Digest, Sha256};
use provision_dispatcher::iso9660::read::{Image, Kind};
use provision_dispatcher::media::area::{self, Area};
use provision_dispatcher::media::iso::IsoFiles;
use provision_dispatcher::media::MediaFiles;

/// The names the boot path opens, and a path below a directory (as `media embed` looks one up).
const NAMES: [&str; 5] =
    ["recipe.json", "recipe.schema.json", "recipe.json.sig", "recipe.schema.json.sig", "boot/grub/grub.cfg"];
/// Read no more of a file than the recipe's cap and a byte.
const CAP: u64 = 8 * 1024 * 1024 + 1;

fuzz_target!(|data: &[u8]| {
    let len = data.len() as u64;
    for area in [area::in_image(data, len).ok(), Some(Area::new(data, 0, len))].into_iter().flatten() {
        if let Ok(Some((header, task))) = area.task() {
            let stored = header.task.expect("a task taken is one its header describes");
            assert_eq!(task.len() as u64, stored.task_bytes);
            assert!(stored.task_bytes <= area::MAX_TASK_BYTES && stored.stored_bytes + area::HEADER_BYTES <= area.len);
            assert_eq!(<[u8; 32]>::from(Sha256::digest(&task)), stored.task_sha256);
        }
    }
    let Ok(image) = Image::open(data, data.len() as u64) else {
        // What the kernel would not mount is refused alike from a file.
        assert!(data.len() > 64 * 1024 || from_file(data).is_none());
        return;
    };
    let media = IsoFiles::new(data, data.len() as u64).expect("the same bytes open alike");
    let mut answers = Vec::new();
    for name in NAMES {
        let entry = image.lookup(name);
        let opened = media.open(name);
        match (&entry, &opened) {
            (Ok(Some(e)), Ok(file)) => {
                assert_eq!(e.kind, Kind::File, "{name}: only a regular file opens");
                assert!(!e.compressed, "{name}: a compressed file is refused");
                assert_eq!(file.len, e.len());
            }
            (Ok(Some(e)), Err(_)) => assert!(e.kind != Kind::File || e.compressed, "{name}: a plain file refused"),
            (Ok(None), Err(err)) => assert_eq!(err.kind(), std::io::ErrorKind::NotFound),
            (Err(_), Err(_)) => {}
            (found, opened) => panic!("{name}: lookup {found:?}, open {:?}", opened.as_ref().map(|f| f.len)),
        }
        let read = opened.map(|file| {
            let claimed = file.len;
            let mut bytes = Vec::new();
            let result = file.reader.take(CAP).read_to_end(&mut bytes);
            assert!(bytes.len() as u64 <= claimed.min(CAP), "{name}: more read than the image claims");
            assert!(bytes.len() <= data.len(), "{name}: more read than the image holds");
            result.map(|_| bytes).map_err(|e| e.kind())
        });
        answers.push(read.map_err(|e| e.kind()));
    }
    if data.len() <= 64 * 1024 {
        let file = from_file(data).expect("a file opens as its bytes");
        for (name, answer) in NAMES.iter().zip(&answers) {
            let read = file.open(name).map_err(|e| e.kind()).map(|f| {
                let mut bytes = Vec::new();
                f.reader.take(CAP).read_to_end(&mut bytes).map(|_| bytes).map_err(|e| e.kind())
            });
            assert_eq!(&read, answer, "{name}: a file and its bytes read alike");
        }
    }
});

fn from_file(data: &[u8]) -> Option<IsoFiles<std::fs::File>> {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(data).unwrap();
    IsoFiles::open(file.path()).ok()
}
