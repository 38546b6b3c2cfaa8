//! Fail points for the fault-injection tests (`tests/faults.rs`): named places in the boot
//! path where a test can make the dispatcher panic or pause. Compiled in only with the
//! `fault-injection` feature; the shipped binary has none.
//!
//! `PROVISION_DISPATCHER_FAILPOINTS="name=panic;other=pause:DIR"`: `panic` panics there;
//! `pause:DIR` creates `DIR/name.reached` and waits (up to 60 s) for `DIR/name.continue`, so a
//! test can act at exactly that moment (remove the media, send a signal).

/// Marks a fail point. A no-op unless built with `fault-injection` and named in the variable.
#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub fn hit(_name: &str) {}

#[cfg(feature = "fault-injection")]
pub fn hit(name: &str) {
    let Ok(spec) = std::env::var("PROVISION_DISPATCHER_FAILPOINTS") else { return };
    for entry in spec.split(';') {
        let Some((point, action)) = entry.split_once('=') else { continue };
        if point != name {
            continue;
        }
        if action == "panic" {
            panic!("fail point {name}");
        }
        if let Some(dir) = action.strip_prefix("pause:") {
            let dir = std::path::Path::new(dir);
            let _ = std::fs::write(dir.join(format!("{name}.reached")), b"");
            let resume = dir.join(format!("{name}.continue"));
            for _ in 0..600 {
                if resume.exists() {
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
        }
    }
}
