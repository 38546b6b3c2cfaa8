//! Host checks (context-aware, seed 001): what the recipe asks of this machine.

/// The target unit does not load (exit 69, not 65: the recipe may be fine for another image).
pub const UNIT_NOT_FOUND: &str = "unitNotFound";
