//! The dispatcher's memory: a ceiling on its heap, and a last word when memory runs out.
//!
//! The maintenance OS lives in RAM, so the dispatcher keeps its heap under [`HEAP_CEILING`]
//! (the value cap of the strict reader keeps every input within the caps far below it). Should
//! an allocation fail anyway (the ceiling, an address-space limit, a machine out of memory),
//! Rust's default is to print a line and abort, which leaves no report. The [`Allocator`]
//! instead gives back a reserve set aside at start, lifts the ceiling and runs the hook the
//! command registered ([`on_exhaustion`]): `check` prints its one JSON object, `run` writes
//! its final status and releases the media; then the process exits with 70.
//!
//! The hook runs inside the allocation that failed, on that thread. That is sound because the
//! system allocator has already returned (it holds no lock), and the process ends right after
//! the hook. A second thread that runs out meanwhile waits for the first to end the process;
//! the hook itself running out aborts.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicIsize, AtomicPtr, AtomicUsize, Ordering};
use std::sync::OnceLock;

/// The most heap the dispatcher uses: the largest input within the caps needs under 40 MiB
/// (8 MiB of distinct long keys, each reported), a valid maximal recipe under 8 MiB; the
/// unit's MemoryMax leaves room above it for the binary, stacks and the report.
pub const HEAP_CEILING: usize = 48 << 20;

/// Set aside at start and given back when memory runs out, so that the report can be made.
const RESERVE: usize = 2 << 20;

/// What bounded work ([`Bound`]) leaves of the heap to the rest of the process, whatever its
/// own limit: room for the report of a refusal.
const MARGIN: usize = 4 << 20;

/// The global allocator of the `provision-dispatcher` binary: the system's, with a ceiling
/// and a last word.
pub struct Allocator;

static IN_USE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
static CEILING: AtomicUsize = AtomicUsize::new(usize::MAX);
/// The thread making the report (0: none).
static REPORTER: AtomicI32 = AtomicI32::new(0);
static RESERVED: AtomicPtr<u8> = AtomicPtr::new(std::ptr::null_mut());
/// What a command says when memory runs out.
type Hook = Box<dyn Fn(&Exhaustion) + Send + Sync>;
static HOOK: OnceLock<Hook> = OnceLock::new();

/// What ran out, for the report.
#[derive(Debug, Clone, Copy)]
pub struct Exhaustion {
    /// The allocation that failed.
    pub requested: usize,
    /// The heap in use when it failed.
    pub in_use: usize,
    /// The ceiling then in force.
    pub ceiling: usize,
}

impl std::fmt::Display for Exhaustion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (requested, in_use) = (self.requested, self.in_use);
        if in_use.saturating_add(requested) > self.ceiling {
            write!(
                f,
                "out of memory: {requested} more bytes were needed with {in_use} in use, over its ceiling of {}",
                self.ceiling
            )
        } else {
            write!(f, "out of memory: {requested} more bytes were needed with {in_use} in use, and the system had none")
        }
    }
}

/// Makes every thread allocate from the one heap of the main thread. Call it first, before any
/// thread starts.
///
/// glibc gives each new thread that allocates its own arena, and an arena reserves 64 MiB of
/// address space (128 MiB while it is being made). The dispatcher's few threads have nothing
/// to gain from that: under an address-space limit (`LimitAS=`, `ulimit -v`) the
/// reservation, or its failure, made the same input need anywhere from 68 to 105 MiB
/// depending on which thread allocated first (`check` compiles the schema on a second thread).
/// With one arena the address space follows the heap, run after run.
pub fn one_arena() {
    // SAFETY: mallopt only sets a parameter of the allocator; no thread has started yet.
    unsafe { libc::mallopt(libc::M_ARENA_MAX, 1) };
}

/// Sets the ceiling and the reserve aside; `hook` makes the report should memory run out,
/// after which the process exits with 70.
pub fn on_exhaustion(hook: impl Fn(&Exhaustion) + Send + Sync + 'static) {
    let _ = HOOK.set(Box::new(hook));
    // SAFETY: a non-zero size with a valid alignment. Untouched, the reserve costs address
    // space, not RAM.
    let reserve = unsafe { System.alloc(Layout::from_size_align_unchecked(RESERVE, 16)) };
    RESERVED.store(reserve, Ordering::SeqCst);
    CEILING.store(HEAP_CEILING, Ordering::SeqCst);
}

/// Writes all of `bytes` to the file descriptor `fd`, bypassing std's locked handles: a hook
/// may run while the thread that ran out holds one of them.
pub fn write_raw(fd: i32, mut bytes: &[u8]) {
    while !bytes.is_empty() {
        // SAFETY: writes from a live buffer of that length.
        let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
        match n {
            n if n > 0 => bytes = &bytes[n as usize..],
            _ if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted => {}
            _ => return,
        }
    }
}

/// The heap a thread doing bounded work (`crate::bounded`) may add, and what became of it.
///
/// The allocator checks each allocation of a bound thread against its limit and against the
/// heap's own ([`HEAP_CEILING`] less a margin for the report). An allocation over either does
/// not fail, which would end the process: the thread stops for good right there, before the
/// system allocator is entered (so it holds no lock of it), and `over` says so to whoever
/// waits for it. A thread whose work was given up ([`Bound::abandon`]) stops the same way at
/// its next allocation.
#[derive(Debug)]
pub struct Bound {
    limit: usize,
    /// Allocated less freed by the thread.
    added: AtomicIsize,
    over: AtomicBool,
    abandoned: AtomicBool,
}

thread_local! {
    static BOUND: Cell<Option<&'static Bound>> = const { Cell::new(None) };
}

impl Bound {
    /// A bound of `limit` bytes, for one thread for the rest of the process (it is leaked:
    /// a thread stopped for good still reads it).
    pub fn new(limit: usize) -> &'static Bound {
        Box::leak(Box::new(Bound {
            limit,
            added: AtomicIsize::new(0),
            over: AtomicBool::new(false),
            abandoned: AtomicBool::new(false),
        }))
    }

    /// Binds the calling thread to this bound.
    pub fn bind_this_thread(&'static self) {
        BOUND.with(|bound| bound.set(Some(self)));
    }

    /// Whether the thread went over its limit (and stopped).
    pub fn went_over(&self) -> bool {
        self.over.load(Ordering::SeqCst)
    }

    /// The work is given up: the thread stops at its next allocation or checkpoint.
    pub fn abandon(&self) {
        self.abandoned.store(true, Ordering::SeqCst);
    }

    /// The calling thread's bound, if it is bound.
    pub fn of_this_thread() -> Option<&'static Bound> {
        BOUND.with(Cell::get)
    }

    /// Stops the calling thread for good if its work was given up.
    pub fn checkpoint(&self) {
        if self.abandoned.load(Ordering::Relaxed) {
            stop_forever();
        }
    }

    fn admit(&self, size: usize) {
        let added = self.added.load(Ordering::Relaxed).max(0) as usize;
        let heap = CEILING.load(Ordering::Relaxed).min(HEAP_CEILING) - MARGIN;
        if added.saturating_add(size) > self.limit || IN_USE.load(Ordering::Relaxed).saturating_add(size) > heap {
            self.over.store(true, Ordering::SeqCst);
            stop_forever();
        }
        self.checkpoint();
        self.added.fetch_add(size as isize, Ordering::Relaxed);
    }

    fn release(&self, size: usize) {
        self.added.fetch_sub(size as isize, Ordering::Relaxed);
    }
}

/// Ends the calling thread's part in the process without ending the process: it sleeps until
/// the process exits. Allocates nothing and holds no lock of the allocator.
fn stop_forever() -> ! {
    loop {
        std::thread::sleep(std::time::Duration::from_secs(3600));
    }
}

/// The most heap this process has had in use at once.
pub fn peak() -> usize {
    PEAK.load(Ordering::Relaxed)
}

impl Allocator {
    fn admit(size: usize) -> bool {
        IN_USE.load(Ordering::Relaxed).saturating_add(size) <= CEILING.load(Ordering::Relaxed)
    }

    fn count(size: usize) {
        let now = IN_USE.fetch_add(size, Ordering::Relaxed) + size;
        PEAK.fetch_max(now, Ordering::Relaxed);
    }

    /// An allocation failed. The first time, the report is made and the process ends; after
    /// that, the report's own allocations are retried without a ceiling.
    #[cold]
    fn exhausted(requested: usize, retry: impl Fn() -> *mut u8) -> *mut u8 {
        // SAFETY: gettid has no preconditions (and, unlike std's thread handles, allocates nothing).
        let me = unsafe { libc::gettid() };
        match REPORTER.compare_exchange(0, me, Ordering::SeqCst, Ordering::SeqCst) {
            Ok(_) => {}
            Err(reporter) => {
                let ptr = retry();
                if !ptr.is_null() {
                    return ptr;
                }
                if reporter == me {
                    // The report itself ran out: nothing more can be said.
                    std::process::abort();
                }
                // Another thread is making the report and will end the process.
                loop {
                    std::thread::sleep(std::time::Duration::from_secs(1));
                }
            }
        }
        let exhaustion =
            Exhaustion { requested, in_use: IN_USE.load(Ordering::Relaxed), ceiling: CEILING.load(Ordering::Relaxed) };
        CEILING.store(usize::MAX, Ordering::SeqCst);
        let reserve = RESERVED.swap(std::ptr::null_mut(), Ordering::SeqCst);
        if !reserve.is_null() {
            // SAFETY: allocated in `on_exhaustion` with this layout, freed once.
            unsafe { System.dealloc(reserve, Layout::from_size_align_unchecked(RESERVE, 16)) };
        }
        match HOOK.get() {
            Some(hook) => hook(&exhaustion),
            None => write_raw(libc::STDERR_FILENO, b"provision-dispatcher: out of memory\n"),
        }
        // SAFETY: ends the process at once; nothing of it is needed any more.
        unsafe { libc::_exit(70) }
    }
}

// SAFETY: every call is forwarded to the system allocator with the same layout; the counting
// and the ceiling only decide whether to forward.
unsafe impl GlobalAlloc for Allocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if let Some(bound) = Bound::of_this_thread() {
            bound.admit(layout.size());
        }
        let ptr = if Self::admit(layout.size()) { System.alloc(layout) } else { std::ptr::null_mut() };
        let ptr = if ptr.is_null() { Self::exhausted(layout.size(), || System.alloc(layout)) } else { ptr };
        Self::count(layout.size());
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if let Some(bound) = Bound::of_this_thread() {
            bound.admit(layout.size());
        }
        let ptr = if Self::admit(layout.size()) { System.alloc_zeroed(layout) } else { std::ptr::null_mut() };
        let ptr = if ptr.is_null() { Self::exhausted(layout.size(), || System.alloc_zeroed(layout)) } else { ptr };
        Self::count(layout.size());
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if let Some(bound) = Bound::of_this_thread() {
            bound.release(layout.size());
        }
        System.dealloc(ptr, layout);
        IN_USE.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let growth = new_size.saturating_sub(layout.size());
        if let Some(bound) = Bound::of_this_thread() {
            bound.admit(growth);
            bound.release(layout.size().saturating_sub(new_size));
        }
        let new = if Self::admit(growth) { System.realloc(ptr, layout, new_size) } else { std::ptr::null_mut() };
        let new = if new.is_null() { Self::exhausted(growth, || System.realloc(ptr, layout, new_size)) } else { new };
        IN_USE.fetch_sub(layout.size(), Ordering::Relaxed);
        Self::count(new_size);
        new
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exhaustion_says_whose_limit_it_was() {
        let over = Exhaustion { requested: 10, in_use: 95, ceiling: 100 };
        assert_eq!(
            over.to_string(),
            "out of memory: 10 more bytes were needed with 95 in use, over its ceiling of 100"
        );
        let system = Exhaustion { requested: 1, in_use: 5, ceiling: 100 };
        assert!(system.to_string().ends_with("and the system had none"));
    }
}
