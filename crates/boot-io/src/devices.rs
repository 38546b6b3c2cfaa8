//! Reading block devices without letting one hold up the rest. A failing disk or a BMC's
//! virtual media may leave an open or a read hanging for the SCSI or USB time-outs (minutes),
//! or for ever: each device is read on a thread of its own ([`Readers`]), and whoever waits for
//! the answers waits until a deadline, then names the devices that did not answer.

use std::collections::HashMap;
use std::fmt;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Opens a device (or an image file) for reading what it holds. O_NONBLOCK lets an empty CD
/// drive open.
pub fn open(path: &Path) -> io::Result<File> {
    OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path)
}

/// Why a device's answer is not known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unread {
    /// Its open or read did not return by the deadline; it may later.
    NotAnswering,
    /// It answered with an error, in a few words (`no medium`).
    Failed(String),
}

impl fmt::Display for Unread {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unread::NotAnswering => f.write_str("not answering: its first sectors could not be read in time"),
            Unread::Failed(why) => f.write_str(why),
        }
    }
}

/// An I/O error in a few words: a CD drive without its disc says "no medium".
pub fn describe(error: &io::Error) -> String {
    match error.raw_os_error() {
        Some(libc::ENOMEDIUM) => "no medium".into(),
        _ => error.kind().to_string(),
    }
}

/// Reads devices with `read`, each on its own thread. A thread stuck in a read is left behind,
/// never joined, and no second reader is started on its device until it returns; an answer
/// that comes after its wait gave up is kept for the next [`read_all`](Readers::read_all).
pub struct Readers<T> {
    slots: Mutex<HashMap<PathBuf, Slot<T>>>,
    changed: Condvar,
    read: Box<Read<T>>,
}

/// How a device is read.
type Read<T> = dyn Fn(&Path) -> io::Result<T> + Send + Sync;

enum Slot<T> {
    Reading,
    Read(Result<T, Unread>),
}

impl<T> fmt::Debug for Readers<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Readers")
    }
}

impl<T: Send + 'static> Readers<T> {
    pub fn new(read: impl Fn(&Path) -> io::Result<T> + Send + Sync + 'static) -> Arc<Readers<T>> {
        Arc::new(Readers { slots: Mutex::new(HashMap::new()), changed: Condvar::new(), read: Box::new(read) })
    }

    /// What each of `paths` gave, as far as it answered by `deadline` (or a stop), in their
    /// order. Each answer is handed out once: the next call reads the device again.
    pub fn read_all(
        self: &Arc<Self>,
        paths: &[PathBuf],
        deadline: Instant,
        stop: &dyn Fn() -> bool,
    ) -> Vec<Result<T, Unread>> {
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        for path in paths {
            if slots.contains_key(path) {
                continue;
            }
            slots.insert(path.clone(), Slot::Reading);
            let (readers, device) = (Arc::clone(self), path.clone());
            let spawned = std::thread::Builder::new().name("device-read".into()).spawn(move || {
                let answer = (readers.read)(&device).map_err(|e| Unread::Failed(describe(&e)));
                readers.slots.lock().unwrap_or_else(|e| e.into_inner()).insert(device, Slot::Read(answer));
                readers.changed.notify_all();
            });
            if let Err(e) = spawned {
                slots.insert(path.clone(), Slot::Read(Err(Unread::Failed(format!("cannot be read ({e})")))));
            }
        }
        loop {
            let answered = paths.iter().all(|p| matches!(slots.get(p), Some(Slot::Read(_))));
            let now = Instant::now();
            if answered || now >= deadline || stop() {
                break;
            }
            // Short slices: a stop is seen within 50 ms.
            let slice = (deadline - now).min(Duration::from_millis(50));
            slots = self.changed.wait_timeout(slots, slice).unwrap_or_else(|e| e.into_inner()).0;
        }
        paths
            .iter()
            .map(|path| match slots.remove(path) {
                Some(Slot::Read(answer)) => answer,
                Some(Slot::Reading) => {
                    slots.insert(path.clone(), Slot::Reading);
                    Err(Unread::NotAnswering)
                }
                None => Err(Unread::NotAnswering),
            })
            .collect()
    }

    /// The devices whose read has not returned yet.
    pub fn reading(&self) -> Vec<PathBuf> {
        let slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        let mut reading: Vec<PathBuf> =
            slots.iter().filter(|(_, slot)| matches!(slot, Slot::Reading)).map(|(path, _)| path.clone()).collect();
        reading.sort();
        reading
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Reads of `stuck` never return (a failing disk, virtual media that stopped answering);
    /// the others answer with their name's length.
    fn readers(calls: Arc<AtomicUsize>) -> Arc<Readers<usize>> {
        Readers::new(move |path: &Path| {
            if path.ends_with("stuck") {
                calls.fetch_add(1, Ordering::SeqCst);
                loop {
                    std::thread::park();
                }
            }
            Ok(path.as_os_str().len())
        })
    }

    #[test]
    fn a_stuck_device_holds_up_neither_the_others_nor_the_deadline_nor_a_stop() {
        let calls = Arc::new(AtomicUsize::new(0));
        let readers = readers(Arc::clone(&calls));
        let paths = [PathBuf::from("/dev/stuck"), PathBuf::from("/dev/sr0")];
        let started = Instant::now();
        let answers = readers.read_all(&paths, Instant::now() + Duration::from_millis(300), &|| false);
        assert!(started.elapsed() >= Duration::from_millis(300));
        assert_eq!(answers, [Err(Unread::NotAnswering), Ok(8)]);
        assert_eq!(readers.reading(), [PathBuf::from("/dev/stuck")]);
        // Looked at again: still not answering, and no second reader on it.
        let answers = readers.read_all(&paths, Instant::now() + Duration::from_millis(100), &|| false);
        assert_eq!(answers, [Err(Unread::NotAnswering), Ok(8)]);
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        // A stop ends the wait at once.
        let started = Instant::now();
        let answers = readers.read_all(&paths, Instant::now() + Duration::from_secs(60), &|| true);
        assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
        assert_eq!(answers[0], Err(Unread::NotAnswering));
    }

    #[test]
    fn an_error_is_said_in_a_few_words() {
        let readers = Readers::new(|path: &Path| open(path).map(drop));
        let missing = PathBuf::from("/nonexistent/device");
        let answers = readers.read_all(&[missing], Instant::now() + Duration::from_secs(10), &|| false);
        assert_eq!(answers, [Err(Unread::Failed("entity not found".into()))]);
        assert_eq!(describe(&io::Error::from_raw_os_error(libc::ENOMEDIUM)), "no medium");
        assert_eq!(Unread::NotAnswering.to_string(), "not answering: its first sectors could not be read in time");
    }
}
