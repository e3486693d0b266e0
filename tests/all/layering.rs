//! The library's dependencies point one way: each module imports only from its own layer or the
//! layers below it, and uses the real paths, not the crate-root aliases kept for embedders. Read
//! from the source text, so a change that folds the layers back fails here, naming the file, the
//! line and the import.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The layers, top down, as the architecture chapter (docs/architecture.md) draws them.
const LAYERS: &[&[&str]] = &[
    &["serve"],
    &["assemble", "replay"],
    &["config"],
    &[
        "acp",
        "after_tool",
        "claude_code",
        "cli_hooks",
        "mcp",
        "tools",
        "conformance",
        "telemetry",
    ],
    &["service"],
    &["rules", "plugin"],
    &["waterfall"],
    &["agent"],
    &["session"],
    &["audit"],
    &["answer"],
    &["outcome", "policy", "pem", "private", "bundled", "idle"],
];

/// The crate-root re-exports of `audit`'s modules: for embedders, never for the crate itself.
const ROOT_ALIASES: [&str; 8] = [
    "event",
    "log",
    "store",
    "fold",
    "check",
    "postgres",
    "subscribe",
    "error",
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&module))
}

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every library source file (the binary is on top of everything and is left out), with the
/// top-level module it belongs to.
fn library_files() -> Vec<(String, PathBuf)> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let src = src_dir();
    let mut files = Vec::new();
    walk(&src, &mut files);
    files.sort();
    files
        .into_iter()
        .filter_map(|path| {
            let relative = path.strip_prefix(&src).unwrap().to_owned();
            let first = relative
                .components()
                .next()?
                .as_os_str()
                .to_str()?
                .to_owned();
            if first == "bin" || first == "lib.rs" {
                return None;
            }
            Some((first.trim_end_matches(".rs").to_owned(), path))
        })
        .collect()
}

/// The source without comments, line breaks kept (so offsets still give line numbers).
fn without_comments(text: &str) -> String {
    text.lines()
        .map(|line| match line.find("//") {
            Some(at) if !line[..at].contains('"') => &line[..at],
            _ => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The top-level modules the text names as `crate::X`, with the byte offset of each: a path, or
/// each name of a grouped `use crate::{X, Y::{…}}` (across lines and nested groups).
fn crate_modules_at(text: &str) -> Vec<(usize, String)> {
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(at) = text[from..].find("crate::").map(|i| i + from) {
        let preceded = text[..at]
            .chars()
            .last()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$');
        let after = &text[at + "crate::".len()..];
        from = at + "crate::".len();
        if preceded {
            continue;
        }
        if let Some(group) = after.strip_prefix('{') {
            // The top-level names of the group: split at commas outside nested braces.
            let mut depth = 0;
            let mut start = 0;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        let name = ident(group[start..i].trim());
                        if !name.is_empty() {
                            found.push((at, name));
                        }
                        break;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        let name = ident(group[start..i].trim());
                        if !name.is_empty() {
                            found.push((at, name));
                        }
                        start = i + 1;
                    }
                    _ => {}
                }
            }
        } else {
            let name = ident(after);
            if !name.is_empty() {
                found.push((at, name));
            }
        }
    }
    found
}

fn crate_modules(text: &str) -> Vec<String> {
    crate_modules_at(text).into_iter().map(|(_, m)| m).collect()
}

/// Every `crate::X` of a library file, as (line number, module, the line).
fn imports(path: &Path) -> Vec<(usize, String, String)> {
    let text = without_comments(&std::fs::read_to_string(path).unwrap());
    crate_modules_at(&text)
        .into_iter()
        .map(|(at, module)| {
            let line = text[..at].matches('\n').count() + 1;
            let shown = text.lines().nth(line - 1).unwrap_or("").trim().to_owned();
            (line, module, shown)
        })
        .collect()
}

#[test]
fn every_library_module_is_placed_in_a_layer() {
    let unplaced: BTreeSet<String> = library_files()
        .into_iter()
        .map(|(module, _)| module)
        .filter(|m| layer_of(m).is_none())
        .collect();
    assert!(
        unplaced.is_empty(),
        "modules in no layer of tests/all/layering.rs (place them, and in docs/architecture.md): {unplaced:?}"
    );
}

#[test]
fn no_module_imports_one_above_it() {
    let mut upward = Vec::new();
    for (module, path) in library_files() {
        let Some(own) = layer_of(&module) else {
            continue;
        };
        for (line, named, shown) in imports(&path) {
            if let Some(theirs) = layer_of(&named)
                && theirs < own
            {
                upward.push(format!(
                    "{}:{line}: {module} imports {named}: {shown}",
                    path.strip_prefix(src_dir()).unwrap().display(),
                ));
            }
        }
    }
    assert!(
        upward.is_empty(),
        "imports running up:\n{}",
        upward.join("\n")
    );
}

#[test]
fn the_crate_uses_real_paths_not_the_root_aliases() {
    let mut aliased = Vec::new();
    for (_, path) in library_files() {
        for (line, named, shown) in imports(&path) {
            if ROOT_ALIASES.contains(&named.as_str()) {
                aliased.push(format!(
                    "{}:{line}: {shown}",
                    path.strip_prefix(src_dir()).unwrap().display(),
                ));
            }
        }
    }
    assert!(
        aliased.is_empty(),
        "crate-root aliases used inside the crate:\n{}",
        aliased.join("\n")
    );
}

#[test]
fn the_reader_finds_plain_grouped_and_nested_crate_paths() {
    assert_eq!(crate_modules("use crate::config::Deployment;"), ["config"]);
    assert_eq!(
        crate_modules("use crate::{audit::store::Store, config, serve::tls};"),
        ["audit", "config", "serve"]
    );
    assert_eq!(
        crate_modules(
            "let x = crate::rules::pattern::Call { tool, arguments: crate::serve::x() };"
        ),
        ["rules", "serve"]
    );
    assert_eq!(
        crate_modules("$crate::plugin::sandbox::PluginState"),
        Vec::<String>::new()
    );
    assert_eq!(
        crate_modules("use other_crate::config;"),
        Vec::<String>::new()
    );
    assert_eq!(
        crate_modules("use crate::{\n    audit::{event::Event, store},\n    serve::tls,\n};"),
        ["audit", "serve"]
    );
    assert_eq!(
        without_comments("use crate::a; // crate::serve\n/// [`crate::config`]\nx"),
        "use crate::a; \n\nx"
    );
}

/// The picture of the layers in `docs/architecture.md`, between its markers: each layer's
/// modules, how many files each has, and the modules each one imports (read from the source as
/// above), so the chapter's picture is the code's, not a drawing that drifts.
fn layers_picture() -> String {
    let mut files: BTreeMap<String, usize> = BTreeMap::new();
    let mut uses: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, path) in library_files() {
        *files.entry(module.clone()).or_default() += 1;
        for (_, named, _) in imports(&path) {
            if named != module && layer_of(&named).is_some() {
                uses.entry(module.clone()).or_default().insert(named);
            }
        }
    }
    let mut out = String::from("```text\n");
    for (i, layer) in LAYERS.iter().enumerate() {
        let rule = if i == 0 { "┌" } else { "├" };
        out.push_str(&format!("{rule}─ layer {} {}\n", i + 1, "─".repeat(60)));
        for module in *layer {
            let n = files.get(*module).copied().unwrap_or_default();
            let imported: Vec<&str> = uses
                .get(*module)
                .map(|s| s.iter().map(String::as_str).collect())
                .unwrap_or_default();
            let imported = if imported.is_empty() {
                "(nothing of the crate)".to_owned()
            } else {
                imported.join(", ")
            };
            let files = format!("{n} file{}", if n == 1 { "" } else { "s" });
            out.push_str(&format!("│ {module:<12} {files:>9}  → {imported}\n"));
        }
    }
    out.push_str(&format!("└{}\n```\n", "─".repeat(69)));
    out
}

const PICTURE_BEGIN: &str = "<!-- layers: generated by tests/all/layering.rs -->\n";
const PICTURE_END: &str = "<!-- end of layers -->\n";

#[test]
fn the_architecture_chapter_s_picture_is_the_code_s_layers() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/architecture.md");
    let page = std::fs::read_to_string(&path).unwrap();
    let start = page
        .find(PICTURE_BEGIN)
        .expect("docs/architecture.md holds the layers' markers")
        + PICTURE_BEGIN.len();
    let end = start + page[start..].find(PICTURE_END).expect("the end marker");
    let picture = layers_picture();
    if std::env::var_os("SNAPSHOTS").is_some_and(|v| v == "overwrite") {
        std::fs::write(
            &path,
            format!("{}{picture}{}", &page[..start], &page[end..]),
        )
        .unwrap();
        return;
    }
    assert_eq!(
        page[start..end],
        picture,
        "docs/architecture.md's picture of the layers is not the code's: run \
         SNAPSHOTS=overwrite cargo test -p approval-host --test all layering::"
    );
}
