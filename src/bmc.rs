//! The BMC's System Event Log (SPEC §6b): one Platform Event Message through the Linux IPMI
//! device interface (`/dev/ipmi0`, drivers `ipmi_si` and `ipmi_devintf`) when the run ends
//! and when the task does, so that a controller reading the SEL over Redfish or IPMI learns the outcome without the
//! network. Best effort: a missing, silent or refusing BMC is logged and changes nothing else.
//!
//! The ioctls are written here (a request, a poll, a receive) rather than taken from a crate:
//! the crates for this interface bring a whole IPMI stack for this one message (`ipmi-rs`:
//! RMCP, SDR iteration) or C built with `cc` (`ipmiraw`); docs/development.md says more.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// The device of the first BMC interface.
pub const DEVICE: &str = "/dev/ipmi0";

/// How long the BMC has to answer. A BMC that answers at all does so in milliseconds; the
/// kernel's own retries give up after about 5 s, and the run must not wait for them.
pub const TIMEOUT: Duration = Duration::from_secs(2);

/// What became of the event, as status.json records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The BMC took it (completion code 00h).
    Logged,
    /// No `/dev/ipmi0`: no BMC, or its drivers are not loaded.
    NoBmc,
    /// Nothing came back within [`TIMEOUT`], or the kernel gave up on the BMC.
    NoAnswer,
    /// The BMC answered with an error completion code, or the device refused the request.
    Refused,
}

impl Outcome {
    pub const ALL: [Outcome; 4] = [Outcome::Logged, Outcome::NoBmc, Outcome::NoAnswer, Outcome::Refused];
}

/// Sensor-specific offsets of sensor type OS Boot (1Fh) in IPMI 2.0, table 42-3.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// 07h, "installation started": the target was started.
    InstallationStarted = 0x07,
    /// 08h, "installation completed": the task succeeded (SPEC §6d).
    InstallationCompleted = 0x08,
    /// 09h, "installation aborted": the task's deadline passed, or a shutdown came first.
    InstallationAborted = 0x09,
    /// 0Ah, "installation failed": the dispatch failed, or the task did.
    InstallationFailed = 0x0a,
}

/// NetFn Sensor/Event, command Platform Event (Event Message).
const NETFN_SENSOR_EVENT: u8 = 0x04;
const CMD_PLATFORM_EVENT: u8 = 0x02;
/// Generator ID of system management software: software ID 20h, shifted, with bit 0 set to
/// say it is a software ID (IPMI 2.0 §5.5), not a slave address.
const GENERATOR_ID: u8 = 0x41;
/// Event Message format of IPMI 1.5 and 2.0.
const EVM_REV: u8 = 0x04;
const SENSOR_TYPE_OS_BOOT: u8 = 0x1f;
/// There is no SDR record for the dispatcher; the sensor number says nothing more.
const SENSOR_NUMBER: u8 = 0x00;
/// Assertion (bit 7 clear), event type 6Fh: sensor-specific offsets.
const EVENT_DIR_TYPE: u8 = 0x6f;
/// Event data 2 and 3 unspecified (bits 7:4 of data 1 are 0): FFh.
const UNSPECIFIED: u8 = 0xff;
/// NetFn Storage, command Add SEL Entry; record type 02h, a system event record.
const NETFN_STORAGE: u8 = 0x0a;
const CMD_ADD_SEL_ENTRY: u8 = 0x44;
const SYSTEM_EVENT_RECORD: u8 = 0x02;
/// The completion code of a command the BMC does not know.
const INVALID_COMMAND: u8 = 0xc1;

/// The request data of the Platform Event Message, as sent on the system interface (which
/// carries the generator ID first).
pub fn message(event: Event) -> [u8; 8] {
    [GENERATOR_ID, EVM_REV, SENSOR_TYPE_OS_BOOT, SENSOR_NUMBER, EVENT_DIR_TYPE, event as u8, UNSPECIFIED, UNSPECIFIED]
}

/// Sends `event` to the BMC behind `device`, waiting at most `timeout` in all, and ends early
/// when `stop` says so (a signal). A BMC that is no event receiver (it answers the Platform
/// Event Message with C1h, "invalid command", as OpenIPMI's simulator does) gets the same
/// event as a SEL record of its own (Add SEL Entry), which every BMC with a SEL takes.
pub fn send(device: &Path, event: Event, timeout: Duration, stop: &dyn Fn() -> bool) -> Outcome {
    let file = match open_device(device) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Outcome::NoBmc,
        Err(e) => {
            tracing::warn!(phase = "report", "cannot open {}: {e}", device.display());
            return Outcome::Refused;
        }
    };
    let deadline = Instant::now() + timeout;
    let ask = |netfn, cmd, data: &[u8]| match request(&file, netfn, cmd, data, deadline, stop) {
        Ok(code) => of_completion_code(code),
        Err(outcome) => outcome,
    };
    match request(&file, NETFN_SENSOR_EVENT, CMD_PLATFORM_EVENT, &message(event), deadline, stop) {
        Ok(INVALID_COMMAND) => ask(NETFN_STORAGE, CMD_ADD_SEL_ENTRY, &sel_entry(event)),
        Ok(code) => of_completion_code(code),
        Err(outcome) => outcome,
    }
}

/// One request and the completion code of its answer, before `deadline`.
fn request(
    file: &File,
    netfn: u8,
    cmd: u8,
    data: &[u8],
    deadline: Instant,
    stop: &dyn Fn() -> bool,
) -> Result<u8, Outcome> {
    if let Err(e) = sys::send_command(file, netfn, cmd, data) {
        tracing::warn!(phase = "report", "the BMC interface refused the request: {e}");
        return Err(Outcome::Refused);
    }
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || stop() {
            return Err(Outcome::NoAnswer);
        }
        // Short slices, so that a signal ends the wait at once.
        match sys::wait_readable(file, left.min(Duration::from_millis(100))) {
            Ok(false) => continue,
            Ok(true) => {}
            Err(e) => {
                tracing::warn!(phase = "report", "waiting for the BMC: {e}");
                return Err(Outcome::NoAnswer);
            }
        }
        match sys::receive(file) {
            Ok(Some(code)) => return Ok(code),
            // Not an answer (an event, or a stale message): keep waiting.
            Ok(None) => continue,
            Err(e) => {
                tracing::warn!(phase = "report", "reading the BMC's answer: {e}");
                return Err(Outcome::NoAnswer);
            }
        }
    }
}

/// The same event as a whole SEL record (IPMI 2.0 table 32-1), for Add SEL Entry: the record
/// id and the timestamp are the BMC's to fill in.
pub fn sel_entry(event: Event) -> [u8; 16] {
    let [generator, rev, sensor_type, sensor, dir_type, data1, data2, data3] = message(event);
    [0, 0, SYSTEM_EVENT_RECORD, 0, 0, 0, 0, generator, 0, rev, sensor_type, sensor, dir_type, data1, data2, data3]
}

/// C3h is the kernel's (or the BMC's) "timed out".
fn of_completion_code(code: u8) -> Outcome {
    match code {
        0x00 => Outcome::Logged,
        0xc3 => Outcome::NoAnswer,
        _ => Outcome::Refused,
    }
}

/// The device node, never through a symbolic link, and only a character device.
fn open_device(device: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(device)?;
    if !file.metadata()?.file_type().is_char_device() {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a character device"));
    }
    Ok(file)
}

/// `include/uapi/linux/ipmi.h`.
mod sys {
    use super::*;

    const IPMI_SYSTEM_INTERFACE_ADDR_TYPE: libc::c_int = 0x0c;
    const IPMI_BMC_CHANNEL: libc::c_short = 0x0f;
    const IPMI_RESPONSE_RECV_TYPE: libc::c_int = 1;
    /// The one message id of this process's requests.
    const MSGID: libc::c_long = 0x50_44;

    #[repr(C)]
    struct SystemInterfaceAddr {
        addr_type: libc::c_int,
        channel: libc::c_short,
        lun: libc::c_uchar,
    }

    #[repr(C)]
    struct Msg {
        netfn: libc::c_uchar,
        cmd: libc::c_uchar,
        data_len: libc::c_ushort,
        data: *mut libc::c_uchar,
    }

    #[repr(C)]
    struct Req {
        addr: *mut libc::c_uchar,
        addr_len: libc::c_uint,
        msgid: libc::c_long,
        msg: Msg,
    }

    #[repr(C)]
    struct Recv {
        recv_type: libc::c_int,
        addr: *mut libc::c_uchar,
        addr_len: libc::c_uint,
        msgid: libc::c_long,
        msg: Msg,
    }

    /// `_IOC(dir, 'i', nr, size)` in the generic encoding (x86 and arm64).
    const fn ioc(dir: u64, nr: u64, size: usize) -> u64 {
        (dir << 30) | ((size as u64) << 16) | ((b'i' as u64) << 8) | nr
    }
    const IOC_WRITE: u64 = 1;
    const IOC_READ: u64 = 2;
    /// `_IOR('i', 13, struct ipmi_req)`.
    const IPMICTL_SEND_COMMAND: u64 = ioc(IOC_READ, 13, std::mem::size_of::<Req>());
    /// `_IOWR('i', 11, struct ipmi_recv)`.
    const IPMICTL_RECEIVE_MSG_TRUNC: u64 = ioc(IOC_READ | IOC_WRITE, 11, std::mem::size_of::<Recv>());

    fn bmc_address() -> SystemInterfaceAddr {
        SystemInterfaceAddr { addr_type: IPMI_SYSTEM_INTERFACE_ADDR_TYPE, channel: IPMI_BMC_CHANNEL, lun: 0 }
    }

    pub fn send_command(file: &File, netfn: u8, cmd: u8, data: &[u8]) -> std::io::Result<()> {
        let mut addr = bmc_address();
        let mut data = data.to_vec();
        let mut req = Req {
            addr: (&raw mut addr).cast(),
            addr_len: std::mem::size_of::<SystemInterfaceAddr>() as libc::c_uint,
            msgid: MSGID,
            msg: Msg { netfn, cmd, data_len: data.len() as libc::c_ushort, data: data.as_mut_ptr() },
        };
        // SAFETY: `req` and what it points to live across the call; the kernel copies them.
        let rc = unsafe { libc::ioctl(file.as_raw_fd(), IPMICTL_SEND_COMMAND as _, &raw mut req) };
        if rc < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    /// Whether a message waits to be received, within `timeout`.
    pub fn wait_readable(file: &File, timeout: Duration) -> std::io::Result<bool> {
        let mut fds = libc::pollfd { fd: file.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd.
        let rc = unsafe { libc::poll(&raw mut fds, 1, timeout.as_millis() as libc::c_int) };
        match rc {
            0 => Ok(false),
            n if n > 0 => Ok(true),
            _ => match std::io::Error::last_os_error() {
                e if e.kind() == std::io::ErrorKind::Interrupted => Ok(false),
                e => Err(e),
            },
        }
    }

    /// The completion code of the answer to our request; `None` for any other message.
    pub fn receive(file: &File) -> std::io::Result<Option<u8>> {
        let mut addr = [0u8; 32];
        let mut data = [0u8; 64];
        let mut recv = Recv {
            recv_type: 0,
            addr: addr.as_mut_ptr(),
            addr_len: addr.len() as libc::c_uint,
            msgid: 0,
            msg: Msg { netfn: 0, cmd: 0, data_len: data.len() as libc::c_ushort, data: data.as_mut_ptr() },
        };
        // SAFETY: the buffers outlive the call and their lengths are given; TRUNC cuts a
        // longer message to them.
        let rc = unsafe { libc::ioctl(file.as_raw_fd(), IPMICTL_RECEIVE_MSG_TRUNC as _, &raw mut recv) };
        if rc < 0 {
            let e = std::io::Error::last_os_error();
            // EMSGSIZE: truncated, the completion code is still the first byte.
            if e.raw_os_error() != Some(libc::EMSGSIZE) {
                return Err(e);
            }
        }
        let ours = recv.recv_type == IPMI_RESPONSE_RECV_TYPE && recv.msgid == MSGID && recv.msg.data_len > 0;
        Ok(ours.then_some(data[0]))
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[cfg(target_pointer_width = "64")]
        #[test]
        fn the_ioctl_numbers_are_the_kernels() {
            // As the C headers give them on x86_64 and aarch64.
            assert_eq!(IPMICTL_SEND_COMMAND, 0x8028_690d);
            assert_eq!(IPMICTL_RECEIVE_MSG_TRUNC, 0xc030_690b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_platform_event_message_is_os_boot_with_the_offset() {
        assert_eq!(message(Event::InstallationStarted), [0x41, 0x04, 0x1f, 0x00, 0x6f, 0x07, 0xff, 0xff]);
        assert_eq!(message(Event::InstallationFailed), [0x41, 0x04, 0x1f, 0x00, 0x6f, 0x0a, 0xff, 0xff]);
        assert_eq!(message(Event::InstallationCompleted)[5], 0x08);
        assert_eq!(message(Event::InstallationAborted)[5], 0x09);
    }

    #[test]
    fn the_sel_record_carries_the_same_event() {
        // Checked against OpenIPMI's ipmi_sim: `ipmitool sel elist` shows
        // "OS Boot | Installation failed | Asserted", generator 0041.
        assert_eq!(
            sel_entry(Event::InstallationFailed),
            [0, 0, 0x02, 0, 0, 0, 0, 0x41, 0x00, 0x04, 0x1f, 0x00, 0x6f, 0x0a, 0xff, 0xff]
        );
    }

    #[test]
    fn completion_codes_say_what_became_of_the_event() {
        assert_eq!(of_completion_code(0x00), Outcome::Logged);
        assert_eq!(of_completion_code(0xc3), Outcome::NoAnswer);
        assert_eq!(of_completion_code(0xc1), Outcome::Refused);
    }

    #[test]
    fn without_the_device_there_is_no_bmc() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(send(&dir.path().join("ipmi0"), Event::InstallationFailed, TIMEOUT, &|| false), Outcome::NoBmc);
    }

    #[test]
    fn a_regular_file_or_a_link_is_not_taken_for_the_device() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("ipmi0");
        std::fs::write(&file, "").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink("/dev/null", &link).unwrap();
        for path in [file, link] {
            assert_eq!(send(&path, Event::InstallationStarted, TIMEOUT, &|| false), Outcome::Refused);
        }
    }
}
