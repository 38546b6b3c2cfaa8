//! `/init` run as the kernel runs it, as far as a host allows: PID 1 of a PID namespace of its
//! own, in a mount namespace of its own, in a root of its own (a tmpfs with the host's `/usr`
//! bound read-only for a test build's libraries), mounting the kernel's devtmpfs, proc and
//! sysfs itself. Once it has, the test gives it a block device whose open never returns (a
//! fanotify permission mark on the node, never answered: what a failing disk or a BMC's hung
//! virtual media does to an open) and a console of its own, and reads what it says there.

use std::fs;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A mark on `file` that holds every open of it until the returned descriptor answers, which it
/// never does; closing it lets them go.
fn hold_opens(file: &Path) -> OwnedFd {
    // SAFETY: fanotify_init takes flags and returns a new descriptor or -1.
    let fd = unsafe { libc::fanotify_init(libc::FAN_CLASS_CONTENT, libc::O_RDONLY as u32) };
    assert!(fd >= 0, "fanotify_init: {}", io::Error::last_os_error());
    // SAFETY: a descriptor fanotify_init just returned, owned from here on.
    let fan = unsafe { OwnedFd::from_raw_fd(fd) };
    let path = std::ffi::CString::new(file.as_os_str().as_bytes()).unwrap();
    // SAFETY: a fanotify descriptor and a valid C string that outlives the call.
    let marked =
        unsafe { libc::fanotify_mark(fd, libc::FAN_MARK_ADD, libc::FAN_OPEN_PERM, libc::AT_FDCWD, path.as_ptr()) };
    assert_eq!(marked, 0, "fanotify_mark: {}", io::Error::last_os_error());
    fan
}

/// The PID of `/init`, the child of `unshare --fork`, in the host's PID namespace.
fn init_pid(unshare: &Child) -> u32 {
    let children = format!("/proc/{0}/task/{0}/children", unshare.id());
    wait_for("unshare's child", || fs::read_to_string(&children).ok()?.split_whitespace().next()?.parse().ok())
}

fn wait_for<T>(what: &str, mut ready: impl FnMut() -> Option<T>) -> T {
    let started = Instant::now();
    loop {
        if let Some(value) = ready() {
            return value;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "{what}: not within 60 s");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Issue 40, finding 2: `/init` opened and read every block device in turn on one thread,
/// without a bound; one whose open never returned held PID 1 for ever, and the console heard
/// nothing, not even that it was waiting.
#[test]
fn a_device_that_never_answers_is_named_on_the_console_and_the_search_goes_on() {
    assert!(unsafe { libc::geteuid() } == 0, "this test runs /init in namespaces of its own: run it as root (CI does)");
    let work = tempfile::tempdir_in("/dev/shm").or_else(|_| tempfile::tempdir()).unwrap();
    let at = |name: &str| work.path().join(name);
    fs::create_dir_all(at("root")).unwrap();
    fs::create_dir_all(at("block/sdz")).unwrap();
    fs::write(at("sdz"), vec![0u8; 64 * 1024]).unwrap();
    fs::write(at("active"), "ttyTEST0\n").unwrap();
    fs::write(at("console"), "").unwrap();
    let _held = hold_opens(&at("sdz"));

    let boot = r#"set -e
        root=$1
        mount -t tmpfs -o mode=0755 tmpfs "$root"
        mkdir "$root/usr" "$root/dev" "$root/proc" "$root/sys" "$root/run" "$root/root"
        mount --bind /usr "$root/usr"
        mount -o remount,bind,ro "$root/usr"
        ln -s usr/lib "$root/lib"
        ln -s usr/lib64 "$root/lib64"
        cp "$2" "$root/init"
        exec chroot "$root" /init"#;
    let output = fs::File::create(at("stdout")).unwrap();
    let mut unshare = Command::new("unshare")
        .args(["--mount", "--pid", "--fork", "--propagation", "private", "sh", "-c", boot, "sh"])
        .arg(at("root"))
        .arg(env!("CARGO_BIN_EXE_maintenance-init"))
        .stdin(Stdio::null())
        .stdout(output.try_clone().unwrap())
        .stderr(output)
        .spawn()
        .unwrap();
    let pid = init_pid(&unshare);
    // Its own mounts made (devtmpfs, proc, sysfs, then /run), the test's go over them.
    let mountinfo = format!("/proc/{pid}/mountinfo");
    wait_for("/init's mounts", || {
        let mounts = fs::read_to_string(&mountinfo).ok()?;
        mounts.lines().any(|l| l.split(' ').nth(4) == Some("/run")).then_some(())
    });
    let inject = r#"set -e
        root=$1 work=$2
        mount --bind "$work/block" "$root/sys/class/block"
        : > "$root/dev/sdz"
        mount --bind "$work/sdz" "$root/dev/sdz"
        mount --bind "$work/active" "$root/sys/class/tty/console/active"
        : > "$root/dev/ttyTEST0"
        mount --bind "$work/console" "$root/dev/ttyTEST0""#;
    let injected = Command::new("nsenter")
        .args(["--target", &pid.to_string(), "--mount", "sh", "-c", inject, "sh"])
        .arg(at("root"))
        .arg(work.path())
        .status()
        .unwrap();
    assert!(injected.success());

    // The first word comes within 10 s of the search's start; 60 s for a loaded machine.
    let said = || {
        fs::read_to_string(at("console")).unwrap_or_default() + &fs::read_to_string(at("stdout")).unwrap_or_default()
    };
    let started = Instant::now();
    while !said().contains("not answering: sdz") && started.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(200));
    }
    // SAFETY: kill takes a PID and a signal; the PID is this test's grandchild.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    unshare.wait().unwrap();
    let said = said();
    assert!(said.contains("maintenance-os: waiting for the boot medium PROVISION-MAINT"), "{said}");
    assert!(said.contains("not answering: sdz"), "{said}");
    let console = fs::read_to_string(at("console")).unwrap();
    assert!(console.lines().all(|l| l.starts_with("maintenance-os: ")), "whole lines on the console: {console}");
}
