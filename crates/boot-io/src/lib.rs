//! What the maintenance OS's two boot programs share: the initrd's `/init`
//! (`maintenance-init`), which runs before the root exists, and the dispatcher, which runs in
//! it. Each reads the kernel command line as the kernel splits it ([`cmdline`]), reads block
//! devices each on a thread of its own so that one that does not answer holds up nothing
//! ([`devices`]), writes to every console the kernel writes to ([`console`]), and ends in a
//! `PROVISION-RESULT v1` line ([`result`]: its frame, and the initrd's own failures).
//!
//! Small on purpose: the initrd links it, and every byte of the initrd crosses a BMC's
//! virtual-media link at each boot.

pub mod cmdline;
pub mod console;
pub mod devices;
pub mod result;
