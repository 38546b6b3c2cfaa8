//! The VM tests' hold (`tests/vm-guest/usr/lib/vm-test/hold`, built and put into the guest by
//! `cargo xtask vm-test`): stops a running dispatcher at one exact moment of the real boot,
//! runs a fault, and lets the dispatcher go on. Not part of the product.
//!
//! The moment is the publication of the output set: the rename whose new name is the output
//! directory. Validation is over (host checks and the bus's `LoadUnit` included), nothing is
//! started yet. The dispatcher is stopped at the entry of that system call with ptrace, from
//! outside: the binary, its unit and its arguments are the shipped ones. A fault at a moment
//! this narrow (a millisecond under TCG) could not be timed from the host.
//!
//! Usage: vm-hold PID OUTPUT_DIR -- COMMAND [ARG]...
//! Attaches to PID's main thread, follows its system calls to the rename into OUTPUT_DIR,
//! runs COMMAND while the dispatcher is held there, then detaches (the rename goes ahead).
//! Exits 0 once COMMAND succeeded and the dispatcher was let go; 1 when the dispatcher ended
//! before the moment or COMMAND failed (the harness reads the lines it prints).

use std::ffi::CString;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::process::{Command, ExitCode};

/// `<linux/ptrace.h>`: `PTRACE_GET_SYSCALL_INFO` and its answer for a system-call entry.
const PTRACE_GET_SYSCALL_INFO: libc::c_uint = 0x420e;
const PTRACE_SYSCALL_INFO_ENTRY: u8 = 1;

#[repr(C)]
#[derive(Default)]
struct SyscallInfo {
    op: u8,
    _pad: [u8; 3],
    _arch: u32,
    _instruction_pointer: u64,
    _stack_pointer: u64,
    nr: u64,
    args: [u64; 6],
    _seccomp_ret_data: u32,
    _pad2: u32,
}

/// The rename system calls of this architecture, each with the index of its new-name argument.
#[cfg(target_arch = "x86_64")]
const RENAMES: [(libc::c_long, usize); 3] = [(libc::SYS_rename, 1), (libc::SYS_renameat, 3), (libc::SYS_renameat2, 3)];
#[cfg(target_arch = "aarch64")]
const RENAMES: [(libc::c_long, usize); 2] = [(libc::SYS_renameat, 3), (libc::SYS_renameat2, 3)];

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (pid, output, command) = match args.as_slice() {
        [pid, output, dashes, command @ ..] if dashes == "--" && !command.is_empty() => {
            match pid.parse::<libc::pid_t>() {
                Ok(pid) if pid > 0 => (pid, output.as_str(), command),
                _ => return usage(),
            }
        }
        _ => return usage(),
    };
    match hold(pid, output, command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            println!("vm-test: hold: {e}");
            ExitCode::FAILURE
        }
    }
}

fn usage() -> ExitCode {
    eprintln!("usage: vm-hold PID OUTPUT_DIR -- COMMAND [ARG]...");
    ExitCode::from(2)
}

fn hold(pid: libc::pid_t, output: &str, command: &[String]) -> Result<(), String> {
    ptrace(libc::PTRACE_SEIZE, pid, 0, libc::PTRACE_O_TRACESYSGOOD as usize).map_err(|e| format!("seize: {e}"))?;
    ptrace(libc::PTRACE_INTERRUPT, pid, 0, 0).map_err(|e| format!("interrupt: {e}"))?;
    println!("vm-test: following the dispatcher (pid {pid}) to the publication of {output}");
    loop {
        let status = wait(pid)?;
        if libc::WIFEXITED(status) || libc::WIFSIGNALED(status) {
            return Err(format!("the dispatcher ended before it published {output}"));
        }
        let stop = libc::WSTOPSIG(status);
        let mut signal = 0;
        if stop == libc::SIGTRAP | 0x80 {
            if publishes(pid, output)? {
                break;
            }
        } else if status >> 16 == 0 {
            // A signal on its way to the dispatcher: delivered as it would have been.
            signal = stop;
        }
        ptrace(libc::PTRACE_SYSCALL, pid, 0, signal as usize).map_err(|e| format!("resume: {e}"))?;
    }
    println!("vm-test: the dispatcher is held as it publishes its outputs; running: {}", command.join(" "));
    let ran = Command::new(&command[0]).args(&command[1..]).status();
    ptrace(libc::PTRACE_DETACH, pid, 0, 0).map_err(|e| format!("detach: {e}"))?;
    match ran {
        Ok(status) if status.success() => {
            println!("vm-test: released the dispatcher after the fault");
            Ok(())
        }
        Ok(status) => Err(format!("the fault failed ({status}); the dispatcher was released")),
        Err(e) => Err(format!("cannot run {}: {e}; the dispatcher was released", command[0])),
    }
}

/// Whether the dispatcher, stopped at a system call, is entering the rename into `output`.
fn publishes(pid: libc::pid_t, output: &str) -> Result<bool, String> {
    let mut info = SyscallInfo::default();
    let size = std::mem::size_of::<SyscallInfo>();
    // SAFETY: the kernel writes at most `size` bytes into `info`, which is that large.
    let got =
        unsafe { libc::ptrace(PTRACE_GET_SYSCALL_INFO, pid, size as *mut libc::c_void, &mut info as *mut SyscallInfo) };
    if got < 0 {
        return Err(format!("PTRACE_GET_SYSCALL_INFO: {}", std::io::Error::last_os_error()));
    }
    if info.op != PTRACE_SYSCALL_INFO_ENTRY {
        return Ok(false);
    }
    let Some(&(_, arg)) = RENAMES.iter().find(|(nr, _)| *nr as u64 == info.nr) else {
        return Ok(false);
    };
    // Opened at each look: the hold may attach before the unit's process has executed the
    // dispatcher, and a `mem` opened then would still show the old program's memory.
    let mem = File::open(format!("/proc/{pid}/mem")).map_err(|e| format!("cannot open /proc/{pid}/mem: {e}"))?;
    Ok(read_c_string(&mem, info.args[arg]).is_some_and(|name| name.as_bytes() == output.as_bytes()))
}

/// A NUL-terminated string of the tracee at `at`, read in pieces that never cross a page.
fn read_c_string(mem: &File, at: u64) -> Option<CString> {
    const PIECE: u64 = 256;
    let mut bytes = Vec::new();
    let mut next = at;
    while bytes.len() < 4096 {
        let mut piece = vec![0; (PIECE - next % PIECE) as usize];
        let n = mem.read_at(&mut piece, next).ok().filter(|&n| n > 0)?;
        if let Some(end) = piece[..n].iter().position(|&b| b == 0) {
            bytes.extend_from_slice(&piece[..end]);
            return CString::new(bytes).ok();
        }
        bytes.extend_from_slice(&piece[..n]);
        next += n as u64;
    }
    None
}

fn ptrace(request: libc::c_uint, pid: libc::pid_t, addr: usize, data: usize) -> std::io::Result<()> {
    // SAFETY: these requests take integers, no pointer the kernel writes through.
    let r = unsafe { libc::ptrace(request, pid, addr as *mut libc::c_void, data as *mut libc::c_void) };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

fn wait(pid: libc::pid_t) -> Result<libc::c_int, String> {
    let mut status = 0;
    loop {
        // SAFETY: `status` is a valid place for the kernel to write the status to.
        if unsafe { libc::waitpid(pid, &mut status, libc::__WALL) } == pid {
            return Ok(status);
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(format!("waitpid: {e}"));
        }
    }
}
