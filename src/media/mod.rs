//! The task media: finding it ([`discover`]), telling what it holds ([`label`]), and mounting
//! it read-only with files opened beneath it ([`mount`]).

pub mod discover;
pub mod label;
pub mod mount;
