//! One module per command of SPEC §2; `main.rs` parses arguments and calls these.

pub mod check;
pub mod disks;
pub mod embed;
pub mod follow;
pub mod media;
pub mod render;
pub mod report;
pub mod run;
pub mod schema;
