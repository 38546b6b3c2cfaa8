//! The floor `cargo xtask bench` measures `check` against: a process that only reads a file
//! and parses it into a `serde_json::Value`, with the same libraries and build as the
//! dispatcher. Whatever `check` spends beyond this is its own work (the schema, the checks,
//! the report).

fn main() {
    let path = std::env::args_os().nth(1).expect("usage: parse-floor FILE");
    let bytes = std::fs::read(path).expect("the file is readable");
    let value: serde_json::Value = serde_json::from_slice(&bytes).expect("the file is JSON");
    std::hint::black_box(value);
}
