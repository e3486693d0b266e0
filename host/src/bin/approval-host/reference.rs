//! The command-line reference, `docs/reference/cli.md`: every visible command's help as clap
//! renders it for `--help`, so the page says what the binary says and cannot drift from it. The
//! tests below fail when an argument or a command has no help text, or when the committed page is
//! not what the clap definitions render now.
//!
//! Every section uses the long layout (each option's help on its own lines), even for a command
//! whose `--help` prints the compact one because none of its text has a long form: the words are
//! the same, and the page reads the same throughout.

use clap::{Command, CommandFactory};

use crate::Cli;

/// The committed page, relative to the host crate.
const PAGE: &str = "../docs/reference/cli.md";

/// The width help is laid out for: the page must not depend on the terminal of whoever
/// regenerates it.
const WIDTH: usize = 100;

/// Renders `docs/reference/cli.md` from the clap definitions.
pub(crate) fn cli_reference_markdown() -> String {
    let mut root = Cli::command()
        .term_width(WIDTH)
        .color(clap::ColorChoice::Never);
    // Building gives every subcommand its full bin name (`approval-host rules add`) for its usage
    // line, and the global options, as `approval-host <path> --help` shows them.
    root.build();
    let mut sections = Vec::new();
    collect(&mut root, &mut sections);

    let mut page = String::from(
        "# Command-line reference\n\
         \n\
         <!-- Generated from the clap definitions: do not edit by hand. -->\n\
         \n\
         Every command's `--help` (in its long layout), generated from the clap definitions by\n\
         the test in `host/src/bin/approval-host/reference.rs`, which fails when this page and\n\
         the binary disagree. To regenerate it after changing a command or its arguments, run\n\
         `SNAPSHOTS=overwrite cargo test -p approval-host --bin approval-host`.\n\
         \n\
         ## Commands\n\
         \n",
    );
    for section in &sections {
        let indent = "  ".repeat(section.depth);
        page.push_str(&format!(
            "{indent}- [`{}`](#{})\n",
            section.title,
            anchor(&section.title)
        ));
    }
    for section in &sections {
        page.push_str(&format!(
            "\n## {}\n\n```text\n{}\n```\n",
            section.title, section.help
        ));
    }
    page
}

/// One command's part of the page.
struct Section {
    /// `approval-host <path>`.
    title: String,
    /// How deep the command is under `approval-host`, for the table of contents.
    depth: usize,
    /// Its long help, plain text.
    help: String,
}

/// Adds `cmd` and its visible subcommands, depth first, in the order `--help` lists them.
fn collect(cmd: &mut Command, sections: &mut Vec<Section>) {
    let title = cmd
        .get_bin_name()
        .unwrap_or_else(|| cmd.get_name())
        .to_owned();
    // `to_string` drops the styling, so the page has no escape codes whatever the terminal.
    let help = cmd.render_long_help().to_string();
    let help = help
        .lines()
        .map(str::trim_end)
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        !help.contains("```"),
        "the help of `{title}` would close its code block"
    );
    sections.push(Section {
        depth: title.matches(' ').count(),
        title,
        help: help.trim_end().to_owned(),
    });
    for sub in cmd.get_subcommands_mut().filter(|sub| documented(sub)) {
        collect(sub, sections);
    }
}

/// Whether a subcommand belongs on the page: not hidden (internal plumbing), and not the `help`
/// subcommand clap adds, which only repeats the other sections.
fn documented(sub: &Command) -> bool {
    !sub.is_hide_set() && sub.get_name() != "help"
}

/// The fragment GitHub gives a heading: lower case, spaces as hyphens (command names are
/// already lower-case words and hyphens).
fn anchor(title: &str) -> String {
    title.to_lowercase().replace(' ', "-")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clap_definitions_are_consistent() {
        Cli::command().debug_assert();
    }

    /// A flag added without its documentation fails here, before the page could go out with an
    /// empty line for it.
    #[test]
    fn every_command_and_argument_has_help() {
        let mut root = Cli::command();
        root.build();
        let mut missing = Vec::new();
        check_help(&root, &mut missing);
        assert!(missing.is_empty(), "no help text for: {missing:#?}");
    }

    fn check_help(cmd: &Command, missing: &mut Vec<String>) {
        let path = cmd.get_bin_name().unwrap_or_else(|| cmd.get_name());
        if !has_text(cmd.get_about()) && !has_text(cmd.get_long_about()) {
            missing.push(format!("command `{path}`"));
        }
        for arg in cmd.get_arguments().filter(|arg| !arg.is_hide_set()) {
            if !has_text(arg.get_help()) && !has_text(arg.get_long_help()) {
                missing.push(format!("argument `{}` of `{path}`", arg.get_id()));
            }
        }
        for sub in cmd.get_subcommands().filter(|sub| documented(sub)) {
            check_help(sub, missing);
        }
    }

    fn has_text(text: Option<&clap::builder::StyledStr>) -> bool {
        text.is_some_and(|text| !text.to_string().trim().is_empty())
    }

    #[test]
    fn the_committed_reference_is_what_clap_renders() {
        let page = cli_reference_markdown();
        // A default computed where the page was generated (a home directory, the working
        // directory) would make the page differ on every other machine.
        for (what, dir) in [
            ("working directory", std::env::current_dir().ok()),
            ("home directory", std::env::var_os("HOME").map(Into::into)),
        ] {
            let Some(dir) = dir.filter(|dir| dir.components().count() > 1) else {
                continue;
            };
            let dir = dir.display().to_string();
            assert!(
                !page.contains(&dir),
                "the page mentions this machine's {what}, {dir}"
            );
        }
        // `.raw()`: the page is compared as it is; `...` and `[..]` in help text are not
        // snapbox's wildcards here.
        let committed = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(PAGE);
        snapbox::assert_data_eq!(page, snapbox::Data::read_from(&committed, None).raw());
    }
}
