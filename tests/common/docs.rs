//! The documentation as the tests read it: README.md and the pages of docs/ (their sections,
//! tables, code and links, and the headings GitHub makes anchors of), and the commands,
//! options and defaults the binary's `--help` lists.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::{dispatcher, root, run};

/// README.md and every page of docs/, as paths from the root.
pub fn pages() -> Vec<String> {
    let mut docs: Vec<String> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|name| name.ends_with(".md"))
        .map(|name| format!("docs/{name}"))
        .collect();
    docs.sort();
    docs.insert(0, "README.md".to_owned());
    docs
}

pub fn page(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The section that `heading` (a whole heading line, `## Limits`) opens, to the next heading
/// of its level or above.
pub fn section<'a>(text: &'a str, heading: &str) -> &'a str {
    let start = text
        .lines()
        .scan(0, |at, line| {
            let here = *at;
            *at += line.len() + 1;
            Some((here, line))
        })
        .find(|(_, line)| *line == heading)
        .unwrap_or_else(|| panic!("no heading {heading:?}"))
        .0;
    let level = heading.chars().take_while(|&c| c == '#').count();
    let body = &text[start + heading.len()..];
    let mut at = 0;
    let mut fenced = false;
    for line in body.split_inclusive('\n') {
        fenced ^= line.starts_with("```");
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if !fenced && (1..=level).contains(&hashes) && line[hashes..].starts_with(' ') {
            break;
        }
        at += line.len();
    }
    &text[start..start + heading.len() + at]
}

/// The rows of the first table after `heading` (its first occurrence in `text`), header and
/// separator left out; `\|` inside a cell is a literal bar.
pub fn table_after(text: &str, heading: &str) -> Vec<Vec<String>> {
    let start = text.find(heading).unwrap_or_else(|| panic!("no {heading:?}"));
    let rows: Vec<&str> =
        text[start..].lines().skip_while(|l| !l.starts_with('|')).take_while(|l| l.starts_with('|')).collect();
    rows.iter()
        .skip(2)
        .map(|row| {
            let row = row.replace("\\|", "\u{1}");
            row.trim_matches('|').split('|').map(|cell| cell.trim().replace('\u{1}', "|")).collect()
        })
        .collect()
}

/// Every `--option` in `text`.
pub fn options_in(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .filter(|w| w.starts_with("--") && w.len() > 2)
        .map(str::to_owned)
        .collect()
}

/// `text` with its runs of white space made one space.
pub fn normalized(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// What a page's code holds: each code span (its paragraph's lines joined, `\|` read as `|`)
/// and each line of a fenced block.
pub fn code(text: &str) -> Vec<String> {
    let mut code = vec![];
    let mut fenced = false;
    let mut paragraph = String::new();
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
            code.extend(split_spans(&paragraph).1);
            paragraph.clear();
        } else if fenced {
            code.push(line.to_owned());
        } else if line.trim().is_empty() {
            code.extend(split_spans(&paragraph).1);
            paragraph.clear();
        } else {
            paragraph.push_str(line);
            paragraph.push(' ');
        }
    }
    code.extend(split_spans(&paragraph).1);
    code
}

/// `text` without its fenced blocks and code spans: the prose, where links are.
pub fn prose(text: &str) -> String {
    let mut prose = String::new();
    let mut fenced = false;
    for paragraph in text.split("\n\n") {
        for line in paragraph.lines() {
            if line.starts_with("```") {
                fenced = !fenced;
            } else if !fenced {
                prose.push_str(line);
                prose.push('\n');
            }
        }
        prose.push('\n');
    }
    prose.split("\n\n").map(|p| split_spans(p).0).collect::<Vec<_>>().join("\n\n")
}

/// A paragraph split into its prose and its code spans (text between two runs of as many
/// backticks, `\|` read as `|`).
fn split_spans(paragraph: &str) -> (String, Vec<String>) {
    let (mut prose, mut spans) = (String::new(), vec![]);
    let mut rest = paragraph;
    while let Some(open) = rest.find('`') {
        let ticks = rest[open..].chars().take_while(|&c| c == '`').count();
        let after = &rest[open + ticks..];
        let Some(close) = after.find(&"`".repeat(ticks)) else { break };
        prose.push_str(&rest[..open]);
        spans.push(after[..close].trim().replace("\\|", "|"));
        rest = &after[close + ticks..];
    }
    prose.push_str(rest);
    (prose, spans)
}

/// The targets of the inline links of `text` (`[words](target)`), code left out.
pub fn links(text: &str) -> Vec<String> {
    let prose = prose(text);
    let mut links = vec![];
    let mut rest = prose.as_str();
    while let Some(at) = rest.find("](") {
        let target = &rest[at + 2..];
        let end = target.find(')').unwrap_or(target.len());
        links.push(target[..end].to_owned());
        rest = &target[end..];
    }
    links
}

/// The anchors GitHub gives the headings of a Markdown file: the heading's text as rendered
/// (code spans and links keep their words, emphasis loses its marks), lower-cased, with every
/// character but letters, digits, `-`, `_` and spaces removed and each space made `-`; a
/// repeated anchor gets `-1`, `-2`, ...
pub fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut anchors = BTreeSet::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        }
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if fenced || !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let words = link_words(line[hashes..].trim());
        let slug: String = words
            .chars()
            .flat_map(char::to_lowercase)
            .filter_map(|c| match c {
                ' ' => Some('-'),
                c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                _ => None,
            })
            .collect();
        let count = seen.entry(slug.clone()).or_default();
        anchors.insert(if *count == 0 { slug.clone() } else { format!("{slug}-{count}") });
        *count += 1;
    }
    anchors
}

/// A heading's links (`[words](target)`) as their words.
fn link_words(heading: &str) -> String {
    let mut out = String::new();
    let mut rest = heading;
    while let Some(open) = rest.find('[') {
        let Some(mid) = rest[open..].find("](") else { break };
        let Some(close) = rest[open + mid..].find(')') else { break };
        out.push_str(&rest[..open]);
        out.push_str(&rest[open + 1..open + mid]);
        rest = &rest[open + mid + close + 1..];
    }
    out.push_str(rest);
    out
}

/// Every Markdown file of the repository but those of build outputs and fuzzing's corpora.
pub fn markdown_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if path.is_dir() && !["target", ".git", "corpus", "artifacts"].contains(&name.as_str()) {
                walk(&path, out);
            } else if name.ends_with(".md") {
                out.push(path);
            }
        }
    }
    let mut files = vec![];
    walk(&root(), &mut files);
    files.sort();
    files
}

/// The help of `command` (words, none for the top level).
pub fn help(command: &[&str]) -> String {
    let out = run(dispatcher().args(command).arg("--help"));
    assert_eq!(out.code, 0, "{command:?} --help: {}", out.stderr);
    out.stdout
}

/// The commands the top-level `--help` lists, each as its words (`["check"]`; a command with
/// sub-commands lists each as `media build`): the lowercase words that open a line of its
/// `Commands:` part.
pub fn commands() -> Vec<Vec<String>> {
    let top = help(&[]);
    let listed = top.split("Commands:").nth(1).expect("a Commands: part").split("\n\n").next().unwrap();
    listed
        .lines()
        .filter(|line| line.starts_with("  ") && line.chars().nth(2).is_some_and(|c| c.is_ascii_lowercase()))
        .map(|line| {
            let usage = line.trim().split("  ").next().unwrap();
            usage
                .split_whitespace()
                .take_while(|w| w.chars().all(|c| c.is_ascii_lowercase() || c == '-'))
                .map(str::to_owned)
                .collect()
        })
        .collect()
}

/// The options a help text lists, long and short (`--output`, `-o`).
pub fn help_options(help: &str) -> BTreeSet<String> {
    help.split(|c: char| c.is_whitespace() || ",[]()|=".contains(c))
        .filter_map(option_word)
        .map(str::to_owned)
        .collect()
}

/// `word` if it is an option: `--` and a name, or `-` and one letter.
pub fn option_word(word: &str) -> Option<&str> {
    let word = word.trim_end_matches(['.', ':', ';', '`']);
    let long =
        word.len() > 2 && word.starts_with("--") && word[2..].chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
    let short =
        word.len() == 2 && word.starts_with('-') && word.chars().nth(1).is_some_and(|c| c.is_ascii_alphabetic());
    (long || short).then_some(word)
}

/// Each option of a help text that has a default, with that default's words
/// (`("--wait", "120")`), white space made one space.
pub fn help_defaults(help: &str) -> Vec<(String, String)> {
    let mut entries: Vec<String> = vec![];
    for line in help.lines() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        if trimmed.starts_with('-') && indent <= 6 {
            entries.push(trimmed.to_owned());
        } else if let Some(entry) = entries.last_mut().filter(|_| indent > 6) {
            entry.push(' ');
            entry.push_str(trimmed);
        }
    }
    entries
        .iter()
        .filter_map(|entry| {
            let entry = normalized(entry);
            let option = entry.split_whitespace().filter_map(option_word).find(|o| o.starts_with("--"))?.to_owned();
            let default = entry.split("[default: ").nth(1)?.split(']').next()?.to_owned();
            Some((option, default))
        })
        .collect()
}

/// The words of a default that a page must give: up to its first comma (`if present`, `if
/// readable` stay with the help).
pub fn default_core(default: &str) -> &str {
    default.split(", ").next().unwrap()
}

/// The keys of a JSON object's text, in the order they are written (serde_json's map sorts
/// them).
pub fn keys_in_order(json: &str) -> Vec<String> {
    struct Keys(Vec<String>);
    impl<'de> serde::Deserialize<'de> for Keys {
        fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Keys, D::Error> {
            struct Visitor;
            impl<'de> serde::de::Visitor<'de> for Visitor {
                type Value = Keys;
                fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                    f.write_str("a JSON object")
                }
                fn visit_map<M: serde::de::MapAccess<'de>>(self, mut map: M) -> Result<Keys, M::Error> {
                    let mut keys = vec![];
                    while let Some(key) = map.next_key::<String>()? {
                        map.next_value::<serde::de::IgnoredAny>()?;
                        keys.push(key);
                    }
                    Ok(Keys(keys))
                }
            }
            deserializer.deserialize_map(Visitor)
        }
    }
    serde_json::from_str::<Keys>(json).unwrap_or_else(|e| panic!("{e}: {json}")).0
}
