//! The rule of dependencies of ARCHITECTURE.md, checked: the top-level modules of src/ stand
//! in [`LAYERS`], bottom first, and a module may use only the modules below it. That makes
//! an import cycle impossible, and a new module must be given its place here (and in
//! ARCHITECTURE.md) before it passes.

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::{Context, Result};

/// Bottom first. The shared ground, then the data path, then the commands.
pub const LAYERS: &[&str] = &[
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
    // The data path, in the order the data flows.
    "media",
    "disks",
    "recipe",
    "trust",
    "schema",
    "checks",
    "outputs",
    "systemd",
    "bmc",
    "report",
    // One module per command.
    "cmd",
];

/// Each use of a module above the user, and each module without a place: empty when the
/// rule holds.
pub fn check(src: &Path) -> Result<Vec<String>> {
    let mut problems = Vec::new();
    let mut modules = BTreeSet::new();
    for entry in std::fs::read_dir(src).with_context(|| format!("read {}", src.display()))? {
        let path = entry?.path();
        let name = path.file_stem().and_then(|n| n.to_str()).unwrap_or_default().to_owned();
        if name == "main" || name == "lib" {
            continue;
        }
        modules.insert(name.clone());
        let Some(level) = LAYERS.iter().position(|m| *m == name) else {
            problems.push(format!("src/{name}: a module without a place in the layers (xtask/src/layers.rs)"));
            continue;
        };
        for file in rust_files(&path)? {
            let text = std::fs::read_to_string(&file)?;
            for used in used_modules(&text) {
                match LAYERS.iter().position(|m| *m == used) {
                    Some(other) if other >= level && used != name => problems.push(format!(
                        "{}: {name} uses {used}, which is not below it (ARCHITECTURE.md)",
                        file.strip_prefix(src.parent().unwrap_or(src)).unwrap_or(&file).display()
                    )),
                    _ => {}
                }
            }
        }
    }
    let architecture = std::fs::read_to_string(src.join("../ARCHITECTURE.md")).unwrap_or_default();
    for module in &modules {
        if !architecture.contains(&format!("`{module}`")) {
            problems.push(format!("ARCHITECTURE.md does not describe `{module}`"));
        }
    }
    Ok(problems)
}

fn rust_files(path: &Path) -> Result<Vec<std::path::PathBuf>> {
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
    let mut used = BTreeSet::new();
    for line in text.lines().map(str::trim_start).filter(|l| !l.starts_with("//")) {
        for (at, _) in line.match_indices("crate::") {
            let rest = &line[at + "crate::".len()..];
            if let Some(group) = rest.strip_prefix('{') {
                let inner = group.split('}').next().unwrap_or_default();
                used.extend(inner.split(',').map(|item| identifier(item.trim())).filter(|m| !m.is_empty()));
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
    fn this_repository_keeps_the_rule() {
        let problems = check(&crate::root().join("src")).unwrap();
        assert_eq!(problems, Vec::<String>::new());
    }
}
