//! provision-dispatcher: at boot, finds the task ISO, validates its recipe against the schema
//! it carries, writes normalized outputs to `/run/provision` and starts the systemd target the
//! recipe names, or fails with a precise, field-level reason.
//!
//! The modules follow the data: [`media`] → [`recipe`] → [`checks`] → [`outputs`] →
//! [`systemd`] → [`report`]. [`cmd`] holds one function per command; [`exit`] maps every
//! outcome to its exit code.

pub mod atomic;
pub mod checks;
pub mod cmd;
pub mod exit;
pub mod failpoint;
pub mod log;
pub mod media;
pub mod memory;
pub mod outputs;
pub mod recipe;
pub mod report;
pub mod schema;
pub mod shutdown;
pub mod systemd;
