//! The tests' media that `media build` refuses to make: an ISO written by the product's own ISO
//! writer (`provision_dispatcher::iso9660::write`, the one `media build` uses after its check),
//! with whatever files the test gives, unchecked, and links and directories where files belong.
//! Built by `cargo test` beside the test binaries and by `cargo xtask vm-test`; never part of
//! the product, so no user meets a way around the check.
//!
//! Usage: task-media -o OUT.iso [--volume-id ID] [ENTRY]...
//!   --file NAME=PATH         a file NAME holding PATH's bytes
//!   --symlink NAME=TARGET    a Rock Ridge symbolic link NAME to TARGET
//!   --dir NAME/INNER=PATH    a directory NAME holding the file INNER (PATH's bytes)
//! The volume id is TASK unless given. Exit 0 once OUT is written; 2 on a bad argument.

use std::process::ExitCode;

use provision_dispatcher::iso9660::write::{image, Entry, Node};

enum Wanted {
    File(String, Vec<u8>),
    Symlink(String, String),
    Dir(String, String, Vec<u8>),
}

fn main() -> ExitCode {
    match run(std::env::args().skip(1).collect()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("task-media: {e}");
            ExitCode::from(2)
        }
    }
}

fn run(args: Vec<String>) -> Result<(), String> {
    let (mut out, mut volume_id, mut wanted) = (None, "TASK".to_owned(), Vec::new());
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "-o" => out = Some(value()?),
            "--volume-id" => volume_id = value()?,
            "--file" => {
                let (name, path) = pair(&value()?)?;
                wanted.push(Wanted::File(name, read(&path)?));
            }
            "--symlink" => {
                let (name, target) = pair(&value()?)?;
                wanted.push(Wanted::Symlink(name, target));
            }
            "--dir" => {
                let (names, path) = pair(&value()?)?;
                let (name, inner) = names.split_once('/').ok_or("--dir takes NAME/INNER=PATH")?;
                wanted.push(Wanted::Dir(name.to_owned(), inner.to_owned(), read(&path)?));
            }
            other => return Err(format!("unexpected argument {other:?}")),
        }
    }
    let out = out.ok_or("-o OUT.iso is required")?;
    let inner: Vec<Vec<Entry>> = wanted
        .iter()
        .map(|w| match w {
            Wanted::Dir(_, inner, bytes) => vec![Entry::file(inner, bytes)],
            _ => Vec::new(),
        })
        .collect();
    let entries: Vec<Entry> = wanted
        .iter()
        .zip(&inner)
        .map(|(w, inner)| match w {
            Wanted::File(name, bytes) => Entry::file(name, bytes),
            Wanted::Symlink(name, target) => Entry { name, node: Node::Symlink(target) },
            Wanted::Dir(name, _, _) => Entry { name, node: Node::Directory(inner) },
        })
        .collect();
    let bytes = image(&volume_id, &entries).map_err(|e| e.to_string())?;
    std::fs::write(&out, bytes).map_err(|e| format!("{out}: {e}"))
}

fn pair(value: &str) -> Result<(String, String), String> {
    let (a, b) = value.split_once('=').ok_or_else(|| format!("{value:?} is not NAME=VALUE"))?;
    Ok((a.to_owned(), b.to_owned()))
}

fn read(path: &str) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("{path}: {e}"))
}
