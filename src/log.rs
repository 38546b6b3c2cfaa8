//! Logging (SPEC §6): the journal through tracing-journald, with the identifier
//! `provision-dispatcher` and fields such as PHASE, CODE and PATH; stderr when there is no
//! journal or stderr is not already the journal; progress for `systemctl status` through
//! sd_notify `STATUS=`. No recipe value is ever passed to a log call.

use std::fmt::Write as _;
use std::io::Write as _;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::Layer;

/// Journal MESSAGE_IDs (journalctl MESSAGE_ID=...), fixed for the life of the project.
pub const DISPATCHED_ID: &str = "6f5d0d0e6c9e4a8b9b1f3c2a7d4e8f01";
pub const FAILED_ID: &str = "b3a1c9e2f4d64b7a8e5c0d1f2a3b4c5d";
/// The task's end (SPEC §6d), told by `follow`: one per way it ends.
pub const TASK_SUCCEEDED_ID: &str = "1192cd99902e4e1fad4f0cb79496603d";
pub const TASK_FAILED_ID: &str = "ca473df619104eea82eff4a90744c3a8";
pub const TASK_TIMED_OUT_ID: &str = "fefe2773d56a4937940ead4f2dd7c4e0";
pub const TASK_INTERRUPTED_ID: &str = "a6544d53b9a34e39b9c080faf5872757";

pub const IDENTIFIER: &str = "provision-dispatcher";

/// Installs the journal and/or stderr layers for the rest of the process.
pub fn init() {
    let journal = tracing_journald::layer()
        .ok()
        .map(|layer| layer.with_syslog_identifier(IDENTIFIER.into()).with_field_prefix(None));
    let stderr = (journal.is_none() || !stderr_is_journal()).then_some(Stderr);
    // The dispatcher's own events only: zbus logs its handshake and every message at debug.
    let own = Targets::new().with_target("provision_dispatcher", Level::INFO);
    let subscriber = tracing_subscriber::registry().with(journal).with(stderr).with(own);
    let _ = tracing::subscriber::set_global_default(subscriber);
}

/// systemd sets JOURNAL_STREAM to the device and inode of the journal stream it connected
/// stderr to; logging there too would say everything twice.
fn stderr_is_journal() -> bool {
    let Some(stream) = std::env::var_os("JOURNAL_STREAM") else { return false };
    let Ok(meta) = std::fs::metadata("/proc/self/fd/2") else { return false };
    stream.to_str() == Some(&format!("{}:{}", meta.dev(), meta.ino()))
}

/// `provision-dispatcher: [phase] message (code, path)` lines on stderr.
struct Stderr;

#[derive(Default)]
struct Line {
    message: String,
    phase: String,
    extra: String,
}

impl Visit for Line {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        match field.name() {
            "message" => self.message = format!("{value:?}"),
            "phase" => self.phase = format!("{value:?}"),
            // Already in the message, or only for the journal.
            "message_id" | "code" | "path" | "job" => {}
            name if name.ends_with("_ms") => {}
            name => {
                let _ = write!(self.extra, " {name}={value:?}");
            }
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "message" => self.message = value.to_owned(),
            "phase" => self.phase = value.to_owned(),
            "message_id" | "code" | "path" | "job" => {}
            name if name.ends_with("_ms") => {}
            name => {
                let _ = write!(self.extra, " {name}={value}");
            }
        }
    }
}

impl<S: Subscriber> Layer<S> for Stderr {
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        let mut line = Line::default();
        event.record(&mut line);
        let level = match *event.metadata().level() {
            Level::ERROR => "error: ",
            Level::WARN => "warning: ",
            _ => "",
        };
        let phase = if line.phase.is_empty() { String::new() } else { format!("[{}] ", line.phase) };
        // One write per line, so concurrent writers never interleave within it.
        let text = format!("{IDENTIFIER}: {level}{phase}{}{}\n", line.message, line.extra);
        let _ = std::io::stderr().lock().write_all(text.as_bytes());
    }
}

/// Tells systemd a one-line status (`systemctl status` shows it), when it listens.
pub fn notify_status(status: &str) {
    notify(&format!("STATUS={status}"));
}

/// Tells systemd that the unit (`Type=notify`) is ready, with a one-line status: the units
/// ordered after it start now.
pub fn notify_ready(status: &str) {
    notify(&format!("READY=1\nSTATUS={status}"));
}

fn notify(message: &str) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else { return };
    let path = path.to_string_lossy().into_owned();
    let address = match path.strip_prefix('@') {
        Some(name) => SocketAddr::from_abstract_name(name.as_bytes()),
        None => SocketAddr::from_pathname(&path),
    };
    let (Ok(address), Ok(socket)) = (address, UnixDatagram::unbound()) else { return };
    let _ = socket.send_to_addr(message.as_bytes(), &address);
}
