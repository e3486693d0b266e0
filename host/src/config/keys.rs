//! The deployment file's reference, from the key tables the parser itself checks keys against:
//! every section and key with its type, default and meaning, rendered as
//! `docs/reference/deployment.md`.
//!
//! Each section's file holds its [`Section`] beside the code that reads it, and its keys are the
//! only list its unknown-key check uses: a key the table does not document is refused as unknown
//! when a file loads, whatever the parser would do with it. The tests below fail when the
//! committed page is not what the tables render, when a section of [`super::SECTIONS`] has no
//! table (or a table no section), and when a documented key is one the parser does not read.

use super::{answerer, approval, audit, claude_code, hook, limits, mcp};
use super::{plugin, rules, sandbox, store, telemetry, token};

use super::key::Section;

/// Every section in [`SECTIONS`](super::SECTIONS) order, each nested table right after its parent.
pub fn reference() -> &'static [Section] {
    &[
        approval::SECTION,
        sandbox::SECTION,
        audit::SECTION,
        store::SECTION,
        rules::SECTION,
        claude_code::SECTION,
        plugin::SECTION,
        answerer::SECTION,
        rules::RULE_SECTION,
        rules::EXAMPLES_SECTION,
        hook::SECTION,
        token::SECTION,
        limits::SECTION,
        telemetry::SECTION,
        mcp::SECTION,
        mcp::SERVER_SECTION,
    ]
}

/// `docs/reference/deployment.md`: a contents list, then each section's heading, what it is for
/// and a table of its keys.
pub fn reference_markdown() -> String {
    let mut page = String::from(
        "# Deployment file reference\n\
         \n\
         <!-- Generated from the parser's key tables: do not edit by hand. -->\n\
         \n\
         Every section and key of the deployment file (TOML), with its type, default and\n\
         meaning. The page is generated from the key tables the parser checks keys against\n\
         (`host/src/config/*.rs`) by the test in `host/src/config/keys.rs`, which fails when\n\
         this page and the tables disagree; a key the tables do not list is refused as unknown\n\
         when the file loads. Relative paths are read from the deployment file's directory. To\n\
         regenerate it after changing a section or a key, run\n\
         `SNAPSHOTS=overwrite cargo test -p approval-host --lib config::keys`.\n\
         \n\
         ## Sections\n\
         \n",
    );
    for section in reference() {
        let indent = if section.is_nested() { "  " } else { "" };
        page.push_str(&format!(
            "{indent}- [`{}`](#{})\n",
            section.shown,
            anchor(section.shown)
        ));
    }
    for section in reference() {
        let level = if section.is_nested() { "###" } else { "##" };
        page.push_str(&format!(
            "\n{level} `{}`\n\n{}\n\n| key | type | default | meaning |\n| --- | --- | --- | --- |\n",
            section.shown, section.about
        ));
        for key in section.keys {
            page.push_str(&format!(
                "| `{}` | {} | {} | {} |\n",
                key.name,
                cell(key.kind),
                cell(key.default),
                cell(key.meaning)
            ));
        }
    }
    page
}

/// A table cell's text: a `|` (a vocabulary's `"a" | "b"`) would end the cell, even inside a
/// code span, unless escaped.
fn cell(text: &str) -> String {
    text.replace('|', "\\|")
}

/// The fragment GitHub gives the heading `` `[[mcp.server]]` ``: lower case, only letters, digits,
/// `-` and `_` kept (`mcpserver`).
fn anchor(shown: &str) -> String {
    shown
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_'))
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::path::Path;

    use super::*;
    use crate::config::{Deployment, SECTIONS};

    /// The committed page, relative to the host crate.
    const PAGE: &str = "../docs/reference/deployment.md";

    #[test]
    fn every_section_has_its_table_and_every_key_its_documentation() {
        let top: Vec<&str> = reference()
            .iter()
            .filter(|s| !s.is_nested())
            .map(|s| s.shown)
            .collect();
        let sections: Vec<&str> = SECTIONS.iter().map(|(_, shown)| *shown).collect();
        assert_eq!(
            top, sections,
            "reference() lists the top-level sections of SECTIONS, in its order"
        );
        let mut parent = None;
        for section in reference() {
            let name = section.shown.trim_matches(['[', ']']);
            match name.split_once('.') {
                None => parent = Some(name),
                Some((outer, _)) => assert_eq!(
                    Some(outer),
                    parent,
                    "{} comes right after the section it sits in",
                    section.shown
                ),
            }
            assert!(
                !section.about.trim().is_empty(),
                "{}: no about",
                section.shown
            );
            assert!(!section.keys.is_empty(), "{}: no keys", section.shown);
            let mut names = HashSet::new();
            for key in section.keys {
                assert!(
                    names.insert(key.name),
                    "{} {}: documented twice",
                    section.shown,
                    key.name
                );
                for (field, text) in [
                    ("name", key.name),
                    ("kind", key.kind),
                    ("default", key.default),
                    ("meaning", key.meaning),
                ] {
                    assert!(
                        !text.trim().is_empty() && !text.contains('\n'),
                        "{} {}: the {field} must be one non-empty line",
                        section.shown,
                        key.name
                    );
                }
            }
        }
    }

    /// What a section needs to load besides the key under test: the text before its keys and
    /// the keys it cannot go without (each a TOML value).
    fn minimal(shown: &str) -> (String, &'static [(&'static str, &'static str)]) {
        let keys: &[(&str, &str)] = match shown {
            "[store]" => &[("url", "\"postgres://approvals@db.internal/approvals\"")],
            "[[plugin]]" => &[
                ("name", "\"p\""),
                ("path", "\"p.wasm\""),
                ("role", "\"gate\""),
            ],
            "[[answerer]]" => &[("kind", "\"web\"")],
            "[[rule]]" => &[("rule", "\"Bash(ls:*)\"")],
            "[rule.examples]" => {
                return (
                    "[[rule]]\nrule = \"Bash(ls:*)\"\n[rule.examples]\n".into(),
                    &[],
                );
            }
            "[[hook]]" => &[("event", "\"PreToolUse\""), ("command", "\"true\"")],
            "[[token]]" => &[
                ("name", "\"t\""),
                (
                    "sha256",
                    "\"0000000000000000000000000000000000000000000000000000000000000000\"",
                ),
                ("roles", "[\"agent\"]"),
            ],
            "[telemetry]" => &[("otlp-endpoint", "\"http://127.0.0.1:4318\"")],
            "[[mcp.server]]" => &[("name", "\"a\""), ("url", "\"http://127.0.0.1:9/mcp\"")],
            _ => &[],
        };
        (format!("{shown}\n"), keys)
    }

    /// A key documented but not read would load whatever it says. So every key is given a TOML
    /// datetime, a type no key takes, beside a section that loads without it: the file must be
    /// refused, and not as an unknown key or an unread one. (A key read but not documented is
    /// refused as unknown by the parser itself, since [`Key`](super::Key) tables are its only key list.)
    #[test]
    fn the_parser_reads_every_documented_key() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("p.wasm"), b"").unwrap();
        let path = dir.path().join("deploy.toml");
        for section in reference() {
            let (head, needed) = minimal(section.shown);
            let text = |tried: Option<&str>| {
                let mut text = head.clone();
                for (name, value) in needed.iter().filter(|(name, _)| Some(*name) != tried) {
                    text.push_str(&format!("{name} = {value}\n"));
                }
                if let Some(name) = tried {
                    text.push_str(&format!("{name} = 1979-05-27T07:32:00Z\n"));
                }
                text
            };
            if let Err(e) = Deployment::parse(&path, &text(None)) {
                panic!(
                    "{}: the minimal entry does not load (give it one in `minimal`): {e}",
                    section.shown
                );
            }
            for key in section.keys {
                let refusal = match Deployment::parse(&path, &text(Some(key.name))) {
                    Ok(_) => panic!(
                        "{} {}: a datetime loaded: the parser does not read this key",
                        section.shown, key.name
                    ),
                    Err(e) => e.to_string(),
                };
                assert!(
                    !refusal.contains("unknown key") && !refusal.contains("does not read it"),
                    "{} {}: {refusal}",
                    section.shown,
                    key.name
                );
            }
        }
    }

    /// Every table of the page reads as a table of four columns whose first is the key: a cell
    /// that broke the row (an unescaped `|`) would shift the others.
    #[test]
    fn the_page_reads_as_one_table_per_section() {
        use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};
        let page = reference_markdown();
        let mut rows: Vec<Vec<String>> = Vec::new();
        let mut tables = 0;
        let mut in_cell = false;
        for event in Parser::new_ext(&page, Options::ENABLE_TABLES) {
            match event {
                Event::Start(Tag::Table(_)) => tables += 1,
                Event::Start(Tag::TableHead | Tag::TableRow) => rows.push(Vec::new()),
                Event::Start(Tag::TableCell) => {
                    rows.last_mut().unwrap().push(String::new());
                    in_cell = true;
                }
                Event::End(TagEnd::TableCell) => in_cell = false,
                Event::Text(t) | Event::Code(t) if in_cell => {
                    rows.last_mut().unwrap().last_mut().unwrap().push_str(&t);
                }
                _ => {}
            }
        }
        assert_eq!(tables, reference().len());
        let expected: Vec<&str> = reference()
            .iter()
            .flat_map(|s| std::iter::once("key").chain(s.keys.iter().map(|k| k.name)))
            .collect();
        let firsts: Vec<&str> = rows.iter().map(|row| row[0].as_str()).collect();
        assert_eq!(firsts, expected);
        for row in &rows {
            assert_eq!(row.len(), 4, "{row:?}");
        }
    }

    #[test]
    fn the_committed_reference_is_what_the_tables_render() {
        // `.raw()`: the page is compared as it is; `...` and `[..]` are not wildcards here.
        let committed = Path::new(env!("CARGO_MANIFEST_DIR")).join(PAGE);
        snapbox::assert_data_eq!(
            reference_markdown(),
            snapbox::Data::read_from(&committed, None).raw()
        );
    }
}
