//! Running the binary under an address-space limit (`RLIMIT_AS`), as a unit's memory limit
//! would: the hostile inputs' tests and the failure unit's.

/// The smallest address-space limit (in MiB steps) under which `command` succeeds.
pub fn smallest_address_space(command: impl Fn() -> std::process::Command) -> u64 {
    let (mut low, mut high) = (1u64 << 20, 1u64 << 30);
    assert!(limited(&mut command(), high).status.success(), "fails even with 1 GiB");
    while high - low > 1 << 20 {
        let middle = (low + high) / 2;
        if limited(&mut command(), middle).status.success() {
            high = middle;
        } else {
            low = middle;
        }
    }
    high
}

/// Runs `command` under an address-space limit, on one CPU: a small VM or a busy machine runs
/// it so, and there the threads of `check` interleave in every order (before
/// `memory::one_arena`, half the runs pinned so needed 29 to 37 MiB more).
pub fn limited(command: &mut std::process::Command, address_space: u64) -> std::process::Output {
    use std::os::unix::process::CommandExt;
    // SAFETY: setrlimit and sched_setaffinity are system calls, safe between fork and exec.
    unsafe {
        command.pre_exec(move || {
            let limit = libc::rlimit { rlim_cur: address_space, rlim_max: address_space };
            if libc::setrlimit(libc::RLIMIT_AS, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The first CPU it may run on (a container's set need not hold CPU 0).
            let size = std::mem::size_of::<libc::cpu_set_t>();
            let mut allowed: libc::cpu_set_t = std::mem::zeroed();
            if libc::sched_getaffinity(0, size, &mut allowed) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            let first = (0..libc::CPU_SETSIZE as usize).find(|&cpu| libc::CPU_ISSET(cpu, &allowed)).unwrap_or(0);
            let mut one: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(first, &mut one);
            if libc::sched_setaffinity(0, size, &one) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    command.output().unwrap()
}
