//! The dispatcher's product: the files in `/run/provision` that the installer units read.

pub mod env;
