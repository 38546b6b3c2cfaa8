//! The rule of dependencies of ARCHITECTURE.md, checked for both crates: the top-level modules
//! of `src/` stand in [`PRODUCT`] and those of `xtask/src/` in [`XTASK`], bottom first, and a
//! module may use only the modules below it. That makes an import cycle between them
//! impossible, and a new module must be given its place here (and in ARCHITECTURE.md) before
//! it passes. Inside a module that is a folder, its files may use each other, but never in a
//! circle (`recipe/read.rs` using `recipe/position.rs` and back): shared items go down, to the
//! folder's `mod.rs` or a file of their own.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// The product's modules, bottom first. The shared ground, then the data path, then the
/// commands.
pub const PRODUCT: &[&str] = &[
    // The shared ground: depends on nothing of the data path.
    "issues",
    "failpoint",
    "shutdown",
    "memory",
    "bounded",
    "envfile",
    "failure",
    "log",
    "files",
    "atomic",
    "iso9660",
    // The data path, in the order the data flows.
    "media",
    "disks",
    "recipe",
    "trust",
    "schema",
    "checks",
    "inventory",
    "outputs",
    "systemd",
    "bmc",
    "report",
    "task",
    // One module per command.
    "cmd",
];

/// xtask's modules, bottom first: helpers, then what users get in the order it is made
/// (binary, package, image), then the proof, then the tasks that run the others.
#[rustfmt::skip]
pub const XTASK: &[&str] = &[
    // Helpers: commands and apt, the architectures, which task needs which package.
    "system",
    "layers",
    "arch",
    "needs",
    "apt",
    "schemas",
    // What users get: the binary, the package, the image's base and boot chain, the image.
    "dist",
    "cross",
    "base",
    "deb",
    "efi",
    "initrd",
    "image",
    // The proof on it: task ISOs, the VM tests.
    "iso",
    "vm",
    // Tasks that run the others.
    "validate",
    "bench",
    "fuzz",
    "demo",
    "fresh",
    "foreign",
    "ci",
];

/// Each use of a module above the user, each module without a place, each module that
/// ARCHITECTURE.md does not name, and each circle between the files of a folder module:
/// empty when the rule holds. `src` is a crate's source folder, `layers` its order.
pub fn check(src: &Path, layers: &[&str], architecture: &str) -> Result<Vec<String>> {
    let mut problems = Vec::new();
    let root = crate::root();
    let shown = |file: &Path| file.strip_prefix(&root).unwrap_or(file).display().to_string();
    for (name, path) in modules(src)? {
        let Some(level) = layers.iter().position(|m| *m == name) else {
            problems.push(format!("{}: a module without a place in the layers (xtask/src/layers.rs)", shown(&path)));
            continue;
        };
        if !architecture.contains(&format!("`{name}`")) {
            problems.push(format!("ARCHITECTURE.md does not describe `{name}` ({})", shown(&path)));
        }
        for file in rust_files(&path)? {
            let text = std::fs::read_to_string(&file)?;
            for used in used_modules(&text) {
                match layers.iter().position(|m| *m == used) {
                    Some(other) if other >= level && used != name => problems
                        .push(format!("{}: {name} uses {used}, which is not below it (ARCHITECTURE.md)", shown(&file))),
                    _ => {}
                }
            }
        }
        if path.is_dir() {
            problems.extend(
                circles(&path, &name)?.into_iter().map(|c| format!("{}: files in a circle: {c}", shown(&path))),
            );
        }
    }
    Ok(problems)
}

/// The top-level modules of a crate's source folder: each file but `main.rs` and `lib.rs`,
/// and each folder, by name.
fn modules(src: &Path) -> Result<BTreeMap<String, PathBuf>> {
    let mut modules = BTreeMap::new();
    for entry in std::fs::read_dir(src).with_context(|| format!("read {}", src.display()))? {
        let path = entry?.path();
        let name = path.file_stem().and_then(|n| n.to_str()).unwrap_or_default().to_owned();
        if name == "main" || name == "lib" || !(path.is_dir() || path.extension().is_some_and(|e| e == "rs")) {
            continue;
        }
        modules.insert(name, path);
    }
    Ok(modules)
}

/// The circles among the files of folder module `dir` (named `name` at the top of its crate):
/// a file using a sibling as `super::SIBLING` or `crate::NAME::SIBLING`; `mod.rs` is the
/// folder itself, which its files may use and which declares them. Each circle once, as
/// `a -> b -> a`.
fn circles(dir: &Path, name: &str) -> Result<Vec<String>> {
    let files = modules(dir)?;
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (file, path) in files.iter().filter(|(file, _)| *file != "mod") {
        let mut used = BTreeSet::new();
        for source in rust_files(path)? {
            let text = std::fs::read_to_string(&source)?;
            used.extend(
                paths_after(&text, "super::")
                    .into_iter()
                    .chain(paths_after(&text, &format!("crate::{name}::")))
                    .filter(|sibling| sibling != file && files.contains_key(sibling) && sibling != "mod"),
            );
        }
        edges.insert(file.clone(), used);
    }
    let mut found = BTreeSet::new();
    for start in edges.keys() {
        // Depth first from each file, along paths of files larger than it, back to it: each
        // circle is found from its smallest file only.
        let mut stack = vec![vec![start.clone()]];
        while let Some(path) = stack.pop() {
            let last = path.last().expect("a path has a file");
            for next in edges.get(last).into_iter().flatten() {
                if next == start {
                    found.insert(format!("{} -> {start}", path.join(" -> ")));
                } else if next > start && !path.contains(next) {
                    stack.push([path.clone(), vec![next.clone()]].concat());
                }
            }
        }
    }
    Ok(found.into_iter().collect())
}

fn rust_files(path: &Path) -> Result<Vec<PathBuf>> {
    if path.is_file() {
        return Ok(vec![path.to_owned()]);
    }
    let mut files = Vec::new();
    for entry in std::fs::read_dir(path)? {
        files.extend(rust_files(&entry?.path())?);
    }
    Ok(files)
}

/// The top-level modules a source file names as `crate::NAME` (or in `crate::{A, B::c}`),
/// outside comments.
fn used_modules(text: &str) -> BTreeSet<String> {
    paths_after(text, "crate::")
}

/// The first segment of every path that starts with `prefix` (`crate::`, `super::`), outside
/// comments; a group (`prefix{A, B::c}`) gives each of its first segments.
fn paths_after(text: &str, prefix: &str) -> BTreeSet<String> {
    let mut used = BTreeSet::new();
    for line in text.lines().map(str::trim_start).filter(|l| !l.starts_with("//")) {
        for (at, _) in line.match_indices(prefix) {
            // `super::super::x` is not a sibling of this file; `crate::a::super::` is no path.
            let before = &line[..at];
            if before.ends_with("super::") || before.ends_with(|c: char| c.is_alphanumeric() || c == '_') {
                continue;
            }
            let rest = &line[at + prefix.len()..];
            if let Some(group) = rest.strip_prefix('{') {
                let inner = group.split('}').next().unwrap_or_default();
                used.extend(inner.split(',').map(|item| identifier(item.trim())));
            } else {
                used.insert(identifier(rest));
            }
        }
    }
    used.retain(|m| !m.is_empty());
    used
}

fn identifier(text: &str) -> String {
    text.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uses_are_read_from_paths_and_groups_not_comments() {
        let text = "use crate::issues::{Code, Issue};\nuse crate::{media, recipe::model};\n\
                    // crate::cmd in a comment\nlet x = crate::memory::peak();\n";
        let found: Vec<String> = used_modules(text).into_iter().collect();
        assert_eq!(found, ["issues", "media", "memory", "recipe"]);
    }

    #[test]
    fn a_circle_between_the_files_of_a_folder_is_found() {
        let dir = std::env::temp_dir().join(format!("xtask-layers-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("m")).unwrap();
        std::fs::write(dir.join("m/mod.rs"), "pub mod a;\npub mod b;\npub mod c;\nfn f() { a::x(); }\n").unwrap();
        std::fs::write(dir.join("m/a.rs"), "use super::b::Y;\nuse super::super::c;\n").unwrap();
        std::fs::write(dir.join("m/b.rs"), "fn g() { crate::m::c::z() }\n").unwrap();
        std::fs::write(dir.join("m/c.rs"), "use super::{a, mod_item};\nmod tests { use super::*; }\n").unwrap();
        assert_eq!(circles(&dir.join("m"), "m").unwrap(), ["a -> b -> c -> a"]);
        std::fs::write(dir.join("m/c.rs"), "use super::mod_item;\n").unwrap();
        assert_eq!(circles(&dir.join("m"), "m").unwrap(), Vec::<String>::new());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn both_crates_keep_the_rule() {
        let root = crate::root();
        let architecture = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
        assert_eq!(check(&root.join("src"), PRODUCT, &architecture).unwrap(), Vec::<String>::new());
        assert_eq!(check(&root.join("xtask/src"), XTASK, &architecture).unwrap(), Vec::<String>::new());
    }
}
