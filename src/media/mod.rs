//! The task media: what the kernel command line asks of it ([`cmdline`]), finding it
//! ([`discover`]), telling what it holds ([`label`]), and mounting it read-only with files
//! opened beneath it ([`mount`]).

pub mod cmdline;
pub mod discover;
pub mod label;
pub mod mount;
