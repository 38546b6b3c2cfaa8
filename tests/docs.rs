//! What the help, the man page, README.md and the pages of docs/ promise, checked against the
//! binary and the code's own tables, so that none of them can drift: the option defaults
//! (declared once, in `cmd::run::defaults`), every command and option a page names (each
//! against the `--help` of the command, whichever commands the top-level `--help` lists), the
//! keys of `recipe.env` (one table, in `envfile`), the exit codes and the failures with their
//! next steps (`failure`), the limits (each against the constant that enforces it), the fields
//! of the result line and the inventory, the tasks of xtask, every link and anchor, and the
//! man page against the help.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::docs::{
    anchors, code, commands, default_core, help, help_defaults, help_options, keys_in_order, links, markdown_files,
    normalized, option_word, options_in, page, pages, section, table_after,
};
use common::machine::{example, media, Machine};
use common::{dispatcher, root, run};
use provision_dispatcher::cmd::follow;
use provision_dispatcher::cmd::run::defaults;
use provision_dispatcher::envfile::{DEVICE_KEY, FIELD_KEYS, FILE_KEYS, SCHEMA_ID_KEY};
use provision_dispatcher::failure::{Exit, Failure};

#[test]
fn help_shows_every_default() {
    let help = run(dispatcher().args(["run", "--help"])).stdout;
    for default in [
        defaults::LABEL.to_owned(),
        defaults::WAIT.as_secs().to_string(),
        defaults::OUTPUT.to_owned(),
        defaults::STATE_DIR.to_owned(),
        defaults::BUS_TIMEOUT.as_secs().to_string(),
    ] {
        assert!(help.contains(&format!("[default: {default}]")), "run --help lacks [default: {default}]:\n{help}");
    }
    assert!(help.contains(defaults::ALLOWED_TARGETS), "{help}");
    let follow = run(dispatcher().args(["follow", "--help"])).stdout;
    for default in [defaults::STATE_DIR.to_owned(), follow::DEADLINE.as_secs().to_string()] {
        assert!(
            follow.contains(&format!("[default: {default}]")),
            "follow --help lacks [default: {default}]:\n{follow}"
        );
    }
    let report = run(dispatcher().args(["report", "--help"])).stdout;
    assert!(report.contains(&format!("[default: {}/status.json]", defaults::STATE_DIR)), "{report}");
}

#[test]
fn the_reference_names_every_env_key_and_the_operator_every_exit_code() {
    let reference = page("docs/reference.md");
    let outputs = section(&reference, "## Outputs (`/run/provision`, 0700; files 0600)");
    let keys = FIELD_KEYS.iter().chain(&FILE_KEYS).map(|(_, key)| *key).chain([SCHEMA_ID_KEY, DEVICE_KEY]);
    for key in keys {
        assert!(outputs.contains(&format!("`{key}`")), "docs/reference.md's Outputs do not name {key}");
    }
    let operator = page("docs/operator.md");
    let documented: BTreeSet<u8> =
        table_after(&operator, "## Exit codes").iter().map(|r| r[0].parse().unwrap()).collect();
    assert_eq!(documented, Exit::ALL.iter().map(|e| e.code()).collect(), "docs/operator.md's exit codes");
}

/// The operator's table of failures is the code's: every kind, its exit code, its summary and
/// the next step the banner prints, word for word.
#[test]
fn the_operators_failure_table_is_the_codes_own() {
    let rows = table_after(&page("docs/operator.md"), "## What to do for each failure");
    let documented: Vec<&str> = rows.iter().map(|r| r[0].trim_matches('`')).collect();
    let known: Vec<&str> = Failure::ALL.iter().map(|f| f.word()).collect();
    assert_eq!(documented, known, "docs/operator.md's failures, in the code's order");
    for (row, failure) in rows.iter().zip(Failure::ALL) {
        let expected =
            [failure.exit().code().to_string(), failure.summary().to_owned(), failure.next_step().to_owned()];
        assert_eq!(row[1..], expected, "the row of {}", failure.word());
    }
}

/// The options a command's row of the reference's table may name: its own, and those of the
/// paragraph on options shared by the commands it names.
fn documented_options(reference: &str, command: &str) -> (String, BTreeSet<String>) {
    let rows = table_after(reference, "## Commands");
    let row = rows
        .iter()
        .find(|r| {
            r[0].starts_with(&format!("`provision-dispatcher {command} "))
                || r[0] == format!("`provision-dispatcher {command}`")
        })
        .unwrap_or_else(|| panic!("docs/reference.md's command table has no row for {command}"));
    let shared = shared_options(reference);
    let mut text = row.join(" ");
    if shared.0.contains(&command.to_owned()) {
        text.push(' ');
        text.push_str(&shared.1);
    }
    (normalized(&text.replace('`', "")), options_in(&row[0]))
}

/// The paragraph after the command table on the options several commands share: the commands
/// its first sentence names, and its text.
fn shared_options(reference: &str) -> (Vec<String>, String) {
    let start = reference.find("Options shared by").expect("the shared options' paragraph");
    let text = &reference[start..start + reference[start..].find("\n\n").unwrap()];
    let lead = text.split(':').next().unwrap();
    let named = lead.split('`').skip(1).step_by(2).map(str::to_owned).collect();
    (named, text.to_owned())
}

#[test]
fn the_command_table_names_exactly_the_options_each_command_takes() {
    let reference = page("docs/reference.md");
    let (shared_by, shared_text) = shared_options(&reference);
    let shared = options_in(&shared_text);
    let every = ["--help", "--version"];
    for command in commands() {
        let command = command.join(" ");
        let words: Vec<&str> = command.split(' ').collect();
        let help = options_in(&help(&words));
        let (text, named) = documented_options(&reference, &command);
        let documented = options_in(&text);
        // `--help` and `--version` are every command's, and the reference says so once.
        for option in help.iter().filter(|o| !every.contains(&o.as_str())) {
            assert!(documented.contains(option), "{command} --help has {option}, docs/reference.md's table does not");
        }
        for option in &named {
            assert!(
                help.contains(option),
                "docs/reference.md's {command} row names {option}, which {command} --help does not"
            );
        }
    }
    for option in &shared {
        let takers: Vec<&String> = shared_by.iter().filter(|c| help(&[c]).contains(option.as_str())).collect();
        assert!(!takers.is_empty(), "the shared option {option} is in no --help of {shared_by:?}");
    }
}

/// Every default a command's `--help` gives is in its row of the reference (or the shared
/// options' paragraph), as `--option VALUE` or `--option: words`.
#[test]
fn the_command_table_gives_every_default_of_the_help() {
    let reference = page("docs/reference.md");
    for command in commands() {
        let command = command.join(" ");
        let words: Vec<&str> = command.split(' ').collect();
        let (text, _) = documented_options(&reference, &command);
        for (option, default) in help_defaults(&help(&words)) {
            let core = normalized(&default_core(&default).replace('`', ""));
            let forms = [format!("{option} {core}"), format!("{option}: {core}"), format!("(default: {core}")];
            // Whole: `--format human` in a usage's `[--format human|json]` gives no default.
            let whole = |form: &String| {
                text.match_indices(form.as_str()).any(|(at, _)| {
                    text[at + form.len()..].chars().next().is_none_or(|c| !c.is_alphanumeric() && c != '|')
                })
            };
            let given = forms[..2].iter().any(whole) || (text.contains(&option) && whole(&forms[2]));
            assert!(given, "docs/reference.md does not give {command} {option}'s default {core:?}");
        }
    }
}

/// Where a page shows `provision-dispatcher` run (in code: a span or a line of a block; `$B`
/// in the README's first look), the words after it are a command the top-level `--help`
/// lists, or a top-level option, and every option given is one that command's `--help` lists.
#[test]
fn every_invocation_in_the_docs_is_a_command_with_its_options() {
    let commands = commands();
    let mut helps: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut options_of = |command: &[String]| -> BTreeSet<String> {
        let key = command.join(" ");
        helps
            .entry(key)
            .or_insert_with(|| help_options(&help(&command.iter().map(String::as_str).collect::<Vec<_>>())))
            .clone()
    };
    let mut seen = 0;
    for path in pages() {
        for code in code(&page(&path)) {
            let tokens: Vec<&str> = code.split_whitespace().collect();
            for (at, _) in tokens.iter().enumerate().filter(|(_, t)| ["provision-dispatcher", "$B"].contains(t)) {
                // `ssh-keygen -n provision-dispatcher`: the namespace, not the program.
                if at > 0 && tokens[at - 1] == "-n" {
                    continue;
                }
                let invocation = invocation(&tokens[at + 1..]);
                let words: Vec<String> = invocation
                    .iter()
                    .take_while(|w| !w.starts_with('-'))
                    .map(|w| w.trim_matches(['[', ']']).to_owned())
                    .collect();
                let command = commands.iter().filter(|c| words.starts_with(c)).max_by_key(|c| c.len()).cloned();
                let command = match command {
                    Some(command) => command,
                    // `provision-dispatcher COMMAND --help`: any command.
                    None if words.first().is_some_and(|w| w.chars().all(|c| c.is_ascii_uppercase())) => vec![],
                    None if words.is_empty() => vec![],
                    None => panic!("{path}: `{code}` runs {:?}, which --help does not list", words.first()),
                };
                let takes = options_of(&command);
                for option in invocation
                    .iter()
                    .filter_map(|t| option_word(t.trim_start_matches('[').trim_end_matches([']', ')', ','])))
                {
                    let option = option.split('=').next().unwrap();
                    assert!(
                        takes.contains(option),
                        "{path}: `{code}` gives {option}, which {command:?} --help does not list"
                    );
                }
                seen += 1;
            }
        }
    }
    assert!(seen > 30, "only {seen} invocations found in the docs");
}

/// The words of one shell command: up to a pipe, `&&`, `;`, a redirection or a comment that
/// stands outside the brackets of a usage.
fn invocation<'a>(tokens: &[&'a str]) -> Vec<&'a str> {
    let mut depth = 0i32;
    let mut words = vec![];
    for &token in tokens {
        let ends =
            ["|", "||", "&&", ";", ">", ">>", "<"].contains(&token) || token.starts_with('#') || token.starts_with('>');
        if depth == 0 && ends {
            break;
        }
        depth += token.matches('[').count() as i32 - token.matches(']').count() as i32;
        words.push(token.trim_end_matches(';'));
    }
    words
}

/// Every inline link of every Markdown file resolves: the file exists, and an anchor is one
/// that GitHub makes of a heading of the file it names.
/// A page holds no figure left to fill: a placeholder (`@@NAME@@`) written while the figure was
/// being measured is either replaced by the figure or the page is not done.
#[test]
fn no_page_holds_a_placeholder() {
    for name in common::docs::pages() {
        let text = common::docs::page(&name);
        let left: Vec<&str> = text.lines().filter(|line| line.contains("@@")).collect();
        assert!(left.is_empty(), "{name}: a placeholder left: {left:#?}");
    }
}

#[test]
fn every_link_and_anchor_resolves() {
    let mut checked = 0;
    for file in markdown_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        let name = file.strip_prefix(root()).unwrap().display().to_string();
        for link in links(&text) {
            if link.starts_with("http://") || link.starts_with("https://") || link.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = link.split_once('#').unwrap_or((&link, ""));
            let target = if path.is_empty() { file.clone() } else { file.parent().unwrap().join(path) };
            assert!(target.exists(), "{name}: the link {link:?} names {}, which does not exist", target.display());
            if !anchor.is_empty() {
                assert!(
                    path.is_empty() || path.ends_with(".md"),
                    "{name}: an anchor into a file that is not Markdown: {link}"
                );
                let anchors = anchors(&std::fs::read_to_string(&target).unwrap());
                assert!(anchors.contains(anchor), "{name}: {link}: no heading makes #{anchor}; there are {anchors:?}");
            }
            checked += 1;
        }
    }
    assert!(checked > 30, "only {checked} links checked");
}

/// Where a page writes an exit code (`exit 65`, `(73)`, `"exit_code": 69`, `with 78`), it is
/// one the binary has.
#[test]
fn every_exit_code_the_docs_write_is_the_binarys() {
    let known: BTreeSet<u8> = Exit::ALL.iter().map(|e| e.code()).collect();
    let mut seen = 0;
    for path in pages() {
        let text = page(&path);
        let tokens: Vec<&str> = text.split_whitespace().collect();
        for pair in tokens.windows(2) {
            let after_word = ["exit", "`exit_code`", "\"exit_code\":", "with"].contains(&pair[0]);
            // `(73)`, `(64,`, `(78;`: a code alone in parentheses, or first in a list there.
            let in_parens = pair[1].starts_with('(') && pair[1].ends_with([')', ',', ';']);
            let word = pair[1].trim_start_matches('(').trim_end_matches([')', ',', ';', '.', ':']);
            let Some(code) = (after_word || in_parens).then(|| word.parse::<u8>().ok()).flatten() else { continue };
            if (60..80).contains(&code) {
                assert!(
                    known.contains(&code),
                    "{path}: `{} {}` writes exit code {code}, which the binary has not",
                    pair[0],
                    pair[1]
                );
                seen += 1;
            }
        }
    }
    assert!(seen > 30, "only {seen} exit codes found in the docs");
}

/// Every limit of the reference's table is the figure of the constant that enforces it.
#[test]
fn the_limits_are_the_codes_own() {
    use provision_dispatcher::checks::safety::{BYTE_LIMITS, MAX_ALLOWLIST_BYTES};
    use provision_dispatcher::issues::MAX_PATH_BYTES;
    use provision_dispatcher::recipe::{read::MAX_RECIPE_BYTES, MAX_VALUES};
    use provision_dispatcher::report::{banner, result, status, DETAILS_SHOWN};
    use provision_dispatcher::schema::{
        COMPILE_BUDGET, MAX_SCHEMA_BYTES, MAX_SCHEMA_DEPTH, MAX_SCHEMA_WORDS, REGEX_SIZE_LIMIT, VALIDATE_BUDGET,
    };
    use provision_dispatcher::trust::{signers::MAX_TRUST_FILE_BYTES, MAX_SIGNATURE_BYTES};
    let size = |bytes: u64| match bytes {
        b if b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b => format!("{} KiB", b >> 10),
    };
    let thousands = |n: usize| if n >= 1000 { format!("{},{:03}", n / 1000, n % 1000) } else { n.to_string() };
    let reference = page("docs/reference.md");
    let rows = table_after(&reference, "## Limits");
    let unit = std::fs::read_to_string(root().join("systemd/provision-dispatcher.service")).unwrap();
    let memory_max = unit.lines().find_map(|l| l.strip_prefix("MemoryMax=")).expect("the unit's MemoryMax=");
    let expected: Vec<(&str, String)> = vec![
        ("recipe size", size(MAX_RECIPE_BYTES)),
        ("values in a recipe", thousands(MAX_VALUES)),
        ("schema size / depth", format!("{} / {MAX_SCHEMA_DEPTH} levels", size(MAX_SCHEMA_BYTES))),
        ("a pattern's compiled size", size(REGEX_SIZE_LIMIT as u64)),
        ("a signature", size(MAX_SIGNATURE_BYTES)),
        ("the image's allowlist", size(MAX_ALLOWLIST_BYTES)),
        ("the image's trust file", size(MAX_TRUST_FILE_BYTES)),
        ("compiling the schema", format!("{} of heap", size(COMPILE_BUDGET.heap as u64))),
        ("compiling the schema", format!("{} s of CPU time", COMPILE_BUDGET.cpu.as_secs())),
        ("validating the recipe", format!("{} ms of CPU time", VALIDATE_BUDGET.cpu.as_millis())),
        ("validating the recipe", format!("{} of heap", size(VALIDATE_BUDGET.heap as u64))),
        ("schema words in one message", format!("{MAX_SCHEMA_WORDS} characters")),
        ("details in the journal", format!("{DETAILS_SHOWN}, then a count")),
        ("details in status.json", format!("{0} errors and {0} warnings", status::MAX_KEPT)),
        ("a detail's path", format!("{MAX_PATH_BYTES} bytes")),
        ("status.json", format!("read up to {}", size(status::MAX_STATUS_BYTES))),
        ("the console banner", format!("{} rows of {} terminal columns", banner::CONSOLE_ROWS, banner::COLUMNS)),
        ("the result line", format!("{} bytes with its newline", thousands(result::MAX_LINE_BYTES))),
        ("the result line", format!("at most {} details", result::MAX_DETAILS)),
        ("heap", size(provision_dispatcher::memory::HEAP_CEILING as u64)),
        ("unit memory", format!("`MemoryMax={memory_max}`")),
    ];
    for (what, value) in &expected {
        let row = rows.iter().find(|r| r[0].starts_with(what)).unwrap_or_else(|| panic!("no limits row {what:?}"));
        assert!(row[1].contains(value.as_str()), "the limits row {what:?} says {:?}, the code {value:?}", row[1]);
    }
    // The rule on payloads: each field, then the first "at most" after it.
    let rules = normalized(section(&reference, "## Recipe rules"));
    for (field, bytes) in BYTE_LIMITS {
        let at = rules.find(&format!("`{field}`")).unwrap_or_else(|| panic!("the recipe rules do not name {field}"));
        let limit = rules[at..].split("at most ").nth(1).unwrap_or_default();
        let expected = size(bytes as u64);
        assert!(
            limit.starts_with(&expected),
            "docs/reference.md gives {field} at most {limit:.20}, the code {expected}"
        );
    }
}

/// The fields a page lists after `lead` (`Its fields, in the order written: `), to the full
/// stop: their names in code spans, in order.
fn listed_after(text: &str, lead: &str) -> Vec<String> {
    let text = normalized(text);
    let start = text.find(lead).unwrap_or_else(|| panic!("no {lead:?}")) + lead.len();
    let list = &text[start..start + text[start..].find(". ").unwrap()];
    list.split('`').skip(1).step_by(2).map(str::to_owned).collect()
}

/// Each of `fields` is a property of `name`'s published schema with a description of its own,
/// and the schema requires exactly them, in their order: the field is described there, once.
fn described_in_schema(name: &str, fields: &[String]) {
    let schema = common::schemas::published(name);
    for field in fields {
        let description = schema["properties"][field]["description"].as_str().unwrap_or_default();
        assert!(!description.trim().is_empty(), "schemas/{name}.schema.json does not describe {field}");
    }
    let required: Vec<&str> = schema["required"].as_array().unwrap().iter().map(|f| f.as_str().unwrap()).collect();
    assert_eq!(required, fields, "schemas/{name}.schema.json requires every field written, in order");
}

/// The result line as a real run prints it: the controller's page lists its fields in order,
/// the published schema describes each (the controller's page points there), and the example
/// lines of the operator's and the controller's pages have exactly its fields, in its order.
#[test]
fn the_result_line_is_documented_field_by_field() {
    let media = media(&example("seed-esxi"));
    let out = Machine::new().dispatch(media.path(), None, &["--no-start"]);
    let line = out.stdout.lines().find_map(|l| l.strip_prefix(provision_dispatcher::report::result::PREFIX)).unwrap();
    let fields = keys_in_order(line);
    let controller = page("docs/controller.md");
    let described = section(&controller, "### The result line");
    assert_eq!(listed_after(described, "Its fields, in the order written: "), fields, "docs/controller.md");
    assert!(described.contains("`result.schema.json`"), "docs/controller.md points to the result's schema");
    described_in_schema("result", &fields);
    let mut examples = 0;
    for path in ["docs/operator.md", "docs/controller.md"] {
        for code in code(&page(path)) {
            let Some(json) = code.strip_prefix(provision_dispatcher::report::result::PREFIX) else { continue };
            if !json.starts_with('{') {
                continue;
            }
            assert_eq!(keys_in_order(json), fields, "{path}: {code}");
            examples += 1;
        }
    }
    assert!(examples >= 2, "{examples} example lines");
}

/// The operator's page shows a banner of `report`: the same failure, run for real, prints
/// each of its lines but those of the run's own media path and times.
#[test]
fn the_operators_banner_is_the_binarys() {
    let dir = tempfile::tempdir().unwrap();
    let media = dir.path().join("media");
    std::fs::create_dir(&media).unwrap();
    std::fs::copy(root().join("iso/examples/seed-invalid-linux.json"), media.join("recipe.json")).unwrap();
    std::fs::copy(root().join("iso/recipe.schema.json"), media.join("recipe.schema.json")).unwrap();
    let machine = Machine::new();
    assert_eq!(machine.dispatch(&media, None, &["--no-start"]).code, 65);
    let report = run(dispatcher().arg("report").arg("--status").arg(machine.state().join("status.json")));
    let own = |line: &&str| !["media:", "started:", "finished:", "took:"].iter().any(|p| line.starts_with(p));
    let printed: Vec<&str> = report.stdout.lines().filter(own).collect();
    let operator = page("docs/operator.md");
    let shown = section(&operator, "## What the console shows");
    let block = shown.split("```\n").nth(1).expect("a banner block");
    let documented: Vec<&str> = block.lines().filter(own).collect();
    assert_eq!(documented, printed, "docs/operator.md's banner");
}

/// The fields of a disk, as `disks --format json` writes them and the inventory and status.json
/// hold them, are those the reference names and the published schemas describe, in its order.
#[test]
fn the_inventory_fields_are_documented() {
    use provision_dispatcher::disks::verdict::{Listed, Verdict};
    use provision_dispatcher::disks::Disk;
    let disk = Disk {
        name: "sdb".into(),
        node: "/dev/sdb".into(),
        dev: 8 << 8 | 16,
        by_id: vec![],
        by_path: vec![],
        wwn: None,
        serial: None,
        model: None,
        vendor: None,
        size_bytes: 1 << 30,
        rotational: None,
        removable: false,
        transport: None,
    };
    let listed = serde_json::to_string(&Listed { disk, verdict: Verdict::Candidate, users: vec![] }).unwrap();
    let fields = keys_in_order(&listed);
    let reference = page("docs/reference.md");
    let named = listed_after(&reference, "which describes each of its fields: ");
    assert_eq!(named, fields, "docs/reference.md's disk fields, in the order disks writes them");
    for name in ["inventory", "status"] {
        let disk = &common::schemas::published(name)["definitions"]["disk"];
        let required: Vec<&str> = disk["required"].as_array().unwrap().iter().map(|f| f.as_str().unwrap()).collect();
        assert_eq!(required, fields, "schemas/{name}.schema.json's disk");
        for field in &fields {
            assert!(
                disk["properties"][field]["description"].is_string(),
                "{name}: the disk's {field} is not described"
            );
        }
    }
}

/// The tasks xtask's usage lists (`xtask/src/main.rs`) are the rows of the developer's task
/// table, with the same options, and every `cargo xtask TASK` a page shows is one of them,
/// given only options its usage lists.
#[test]
fn the_tasks_are_xtasks_own() {
    let main = std::fs::read_to_string(root().join("xtask/src/main.rs")).unwrap();
    let usage = main.split("const USAGE: &str = \"\\").nth(1).unwrap().split("\";").next().unwrap();
    let listed = usage.split_once("\n\n").unwrap().1;
    let mut tasks: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in listed.lines().filter(|l| l.starts_with("  ") && !l.starts_with("   ")) {
        let task = line.split_whitespace().next().unwrap().to_owned();
        tasks.entry(task).or_default().extend(options_in(line));
    }
    assert!(tasks.len() > 10, "{tasks:?}");
    let development = page("docs/development.md");
    let mut rows: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for row in table_after(&development, "## Build, proof and benchmark tasks") {
        let usage = row[0].trim_matches('`');
        rows.entry(usage.split_whitespace().next().unwrap().to_owned()).or_default().extend(options_in(usage));
    }
    assert_eq!(rows, tasks, "docs/development.md's task table against xtask's usage");
    for path in pages().iter().map(String::as_str).chain(["ARCHITECTURE.md", "BENCHMARKS.md"]) {
        for code in code(&page(path)) {
            let tokens: Vec<&str> = code.split_whitespace().collect();
            for at in (0..tokens.len().saturating_sub(2)).filter(|&i| tokens[i] == "cargo" && tokens[i + 1] == "xtask")
            {
                let words = invocation(&tokens[at + 2..]);
                let task = words[0].trim_matches(['[', ']']);
                // `cargo xtask ...`, `cargo xtask TASK`: any task.
                if task.chars().all(|c| c == '.' || c.is_ascii_uppercase()) {
                    continue;
                }
                let options = tasks
                    .get(task)
                    .unwrap_or_else(|| panic!("{path}: `{code}` runs task {task}, which xtask's usage does not list"));
                let long = words[1..].iter().filter_map(|w| option_word(w.trim_matches(['[', ']', ')', ','])));
                for option in long.filter(|o| o.starts_with("--")) {
                    assert!(
                        options.contains(option),
                        "{path}: `{code}` gives {task} {option}, which xtask's usage does not list"
                    );
                }
            }
        }
    }
}

/// The man page the package installs agrees with the help: each command's synopsis names
/// exactly the options of its `--help`; each option's entry names the commands that take it,
/// and no other; and says each default the help gives.
#[test]
fn the_man_page_agrees_with_the_help() {
    let man = std::fs::read_to_string(root().join("debian/provision-dispatcher.8")).unwrap();
    let text = troff_text(&man);
    let synopsis = text.split(".SH SYNOPSIS").nth(1).unwrap().split(".SH ").next().unwrap();
    let options_part = text.split(".SH OPTIONS").nth(1).unwrap().split(".SH ").next().unwrap();
    let entries: Vec<&str> = options_part.split(".TP").skip(1).collect();
    let every = ["--help", "--version", "-h", "-V"];
    let commands = commands();
    for command in &commands {
        let name = command.join(" ");
        let words: Vec<&str> = command.iter().map(String::as_str).collect();
        let help = help(&words);
        let block = synopsis
            .split(".br")
            .find(|b| normalized(b).starts_with(&format!("provision-dispatcher {name} ")))
            .unwrap_or_else(|| panic!("the man page's synopsis has no {name}"));
        let long = |set: BTreeSet<String>| -> BTreeSet<String> {
            set.into_iter().filter(|o| o.starts_with("--") && !every.contains(&o.as_str())).collect()
        };
        assert_eq!(long(options_in(block)), long(options_in(&help)), "the man page's synopsis of {name}");
        for option in long(options_in(&help)) {
            let entry = entries
                .iter()
                .find(|e| entry_option(e) == option && entry_commands(e, &commands).contains(&name))
                .unwrap_or_else(|| panic!("the man page has no entry for {name} {option}"));
            if let Some((_, default)) = help_defaults(&help).into_iter().find(|(o, _)| *o == option) {
                let core = default_core(&default);
                let entry = normalized(entry);
                assert!(
                    entry.contains(&format!("Default: {core}")) || entry.contains(&format!("Default ({name}): {core}")),
                    "the man page's {option} entry does not give {name}'s default {core:?}:\n{entry}"
                );
            }
        }
    }
    let takes: BTreeMap<String, BTreeSet<String>> = commands
        .iter()
        .map(|c| (c.join(" "), help_options(&help(&c.iter().map(String::as_str).collect::<Vec<_>>()))))
        .collect();
    for entry in &entries {
        let option = entry_option(entry);
        for name in entry_commands(entry, &commands) {
            assert!(takes[&name].contains(&option), "the man page gives {option} to {name}, whose --help lacks it");
        }
    }
    for word in ["EXIT STATUS", "FILES", "BOOT PATH", "provision.recipe=", "provision.media="] {
        assert!(man.contains(word), "the man page lacks {word}");
    }
    let exit = text.split(".SH EXIT STATUS").nth(1).unwrap().split(".SH ").next().unwrap();
    let codes: BTreeSet<u8> =
        exit.split(".TP").skip(1).map(|e| e.split_whitespace().next().unwrap().parse().unwrap()).collect();
    assert_eq!(codes, Exit::ALL.iter().map(|e| e.code()).collect(), "the man page's exit status");
}

/// A man page's source as its words: escapes read (`\-` a dash, `\(dq` a quote), font
/// macros (`.B`, `.IR`, ...) and their quotes dropped, the structure (`.SH`, `.TP`, `.br`)
/// kept.
fn troff_text(man: &str) -> String {
    let fonts = [".B ", ".I ", ".BR ", ".RB ", ".BI ", ".IB ", ".IR ", ".RI "];
    man.replace("\\-", "-")
        .replace("\\(dq", "\u{1}")
        .replace("\\fI", "")
        .replace("\\fR", "")
        .replace("\\fB", "")
        .lines()
        .map(|line| match fonts.iter().find(|f| line.starts_with(*f)) {
            Some(font) => line[font.len()..].replace('"', "").replace('\u{1}', "\""),
            None => line.replace('\u{1}', "\""),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The option an OPTIONS entry is for: the first long option of its tag line.
fn entry_option(entry: &str) -> String {
    let tag = entry.lines().find(|l| !l.trim().is_empty()).unwrap_or_default();
    options_in(tag).into_iter().next().unwrap_or_default()
}

/// The commands an OPTIONS entry gives the option to: those its lines that open with a
/// parenthesis name (`(check, render)`; `(run, --output only)`; `(media build, media embed)`),
/// not those of its prose.
fn entry_commands(entry: &str, commands: &[Vec<String>]) -> BTreeSet<String> {
    let mut named = BTreeSet::new();
    for (at, _) in entry.match_indices("\n(") {
        let group = entry[at + 2..].split(')').next().unwrap();
        for command in commands {
            // A part of the group opens with the command's words (`run --output only`).
            let opens = |part: &str| part.split_whitespace().take(command.len()).eq(command.iter().map(String::as_str));
            if group.split([',', ':', ';']).any(opens) {
                named.insert(command.join(" "));
            }
        }
    }
    named
}

/// The journald catalog the package installs explains both MESSAGE_IDs the dispatcher logs,
/// and journalctl reads it (`journalctl -x` shows it).
#[test]
fn the_catalog_explains_both_message_ids() {
    use provision_dispatcher::log::{DISPATCHED_ID, FAILED_ID};
    let root_dir = tempfile::tempdir().unwrap();
    let catalog = root_dir.path().join("usr/lib/systemd/catalog");
    std::fs::create_dir_all(&catalog).unwrap();
    std::fs::create_dir_all(root_dir.path().join("var/lib/systemd/catalog")).unwrap();
    std::fs::copy(root().join("debian/provision-dispatcher.catalog"), catalog.join("provision-dispatcher.catalog"))
        .unwrap();
    let journalctl = |args: &[&str]| {
        let out = std::process::Command::new("journalctl")
            .arg(format!("--root={}", root_dir.path().display()))
            .args(args)
            .output()
            .expect("journalctl (Debian package systemd) is installed");
        assert!(out.status.success(), "journalctl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    journalctl(&["--update-catalog"]);
    let listed = journalctl(&["--list-catalog"]);
    for id in [DISPATCHED_ID, FAILED_ID] {
        assert!(listed.contains(id), "the catalog lacks {id}:\n{listed}");
        let text = journalctl(&["--dump-catalog", id]);
        for part in ["Subject:", "Details:", "Next", "provision-dispatcher report"] {
            assert!(text.contains(part), "{id}'s entry lacks {part}:\n{text}");
        }
    }
}

/// status.json as a real run writes it: the operator's page lists its fields in order and the
/// steps of its timings, and the published schema describes each (the words of its enumerations
/// are held to the code's by `cmd::schema`'s tests).
#[test]
fn status_json_is_documented_field_by_field() {
    let media = media(&example("seed-esxi"));
    let machine = Machine::new();
    machine.dispatch(media.path(), None, &["--no-start"]);
    let written = std::fs::read_to_string(machine.state().join("status.json")).unwrap();
    let fields = keys_in_order(&written);
    let operator = page("docs/operator.md");
    let described = section(&operator, "## Status (`STATE/status.json`, 0600)");
    assert_eq!(listed_after(described, "Its fields, in the order written: "), fields, "docs/operator.md");
    assert!(described.contains("schema print status"), "docs/operator.md points to the status's schema");
    described_in_schema("status", &fields);
    let timings: serde_json::Value = serde_json::from_str(&written).unwrap();
    let schema = common::schemas::published("status");
    for step in timings["timings_ms"].as_object().unwrap().keys() {
        assert!(described.contains(&format!("`{step}`")), "docs/operator.md's status.json does not name {step}");
        let description = &schema["properties"]["timings_ms"]["properties"][step]["description"];
        assert!(description.is_string(), "schemas/status.schema.json does not describe timings_ms.{step}");
    }
}
