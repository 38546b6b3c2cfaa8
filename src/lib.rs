//! provision-dispatcher: at boot, finds the task ISO, validates its recipe against the schema
//! it carries, writes normalized outputs to `/run/provision` and starts the systemd target the
//! recipe names, or fails with a precise, field-level reason.
//!
//! The modules follow the data: [`media`] → [`disks`] (the machine's) → [`recipe`] → [`trust`] →
//! [`schema`] → [`checks`] → [`inventory`] (the machine's, for the console) → [`outputs`] → [`systemd`] → [`report`], each depending only on
//! those before it and on the shared ground below them: [`issues`] (what checks find),
//! [`failure`] (how things end, with the exit codes), [`envfile`], [`atomic`], [`shutdown`],
//! [`memory`], [`log`], [`failpoint`]. [`cmd`] holds one module per command on top. ARCHITECTURE.md draws it.

pub mod atomic;
pub mod bmc;
pub mod bounded;
pub mod checks;
pub mod cmd;
pub mod disks;
pub mod envfile;
pub mod failpoint;
pub mod failure;
pub mod files;
pub mod inventory;
pub mod iso9660;
pub mod issues;
pub mod log;
pub mod media;
pub mod memory;
pub mod outputs;
pub mod recipe;
pub mod report;
pub mod schema;
pub mod shutdown;
pub mod systemd;
pub mod task;
pub mod trust;
