//! git's command line as git reads it: its own global options (matched exactly, as `git.c`
//! does), then a subcommand that is one of git's own commands or else an alias or a `git-<name>`
//! program found on the path, then that subcommand's options by its table.
//!
//! What makes git run a program its words do not show: `-c` and `--config-env` (any
//! configuration, `core.pager` and `alias.*` included), `--exec-path=`, an alias or external
//! command, and the subcommands and options that run commands they are given (`rebase --exec`,
//! `bisect run`, `submodule foreach`, `difftool -x`). Those are [`changes_program`]: reject rules
//! cannot see through them, so they are opaque. Options that write files or run the configured
//! programs (`--output`, `--ext-diff`, `--upload-pack`) only put the command beyond a rule
//! written because git reads ([`uncovered`]).

use super::grammar;
use super::option_tables;

/// Global options that take the next word (`git -C dir`, `git --git-dir x`).
const GLOBAL_VALUED: &[&str] = &[
    "-C",
    "-c",
    "--git-dir",
    "--work-tree",
    "--namespace",
    "--super-prefix",
    "--list-cmds",
    "--attr-source",
    "--config-env",
];

/// Global options without a value (or with one attached by `=`).
const GLOBAL_FLAGS: &[&str] = &[
    "-p",
    "--paginate",
    "-P",
    "--no-pager",
    "--no-replace-objects",
    "--no-lazy-fetch",
    "--no-optional-locks",
    "--no-advice",
    "--bare",
    "--literal-pathspecs",
    "--glob-pathspecs",
    "--noglob-pathspecs",
    "--icase-pathspecs",
    "--exec-path",
    "--html-path",
    "--man-path",
    "--info-path",
    "-v",
    "--version",
    "-h",
    "--help",
];

/// Every command git runs itself from 2.39 (Debian 12) to 2.47 (`git --list-cmds=main,nohelpers`):
/// any other name may be an alias or a program on the path. A command newer than 2.39 (`replay`,
/// `refs`) is left out, since an older git would run an alias of that name.
const COMMANDS: &[&str] = &[
    "add",
    "am",
    "annotate",
    "apply",
    "archimport",
    "archive",
    "bisect",
    "blame",
    "branch",
    "bugreport",
    "bundle",
    "cat-file",
    "check-attr",
    "check-ignore",
    "check-mailmap",
    "check-ref-format",
    "checkout",
    "checkout-index",
    "cherry",
    "cherry-pick",
    "clean",
    "clone",
    "column",
    "commit",
    "commit-graph",
    "commit-tree",
    "config",
    "count-objects",
    "credential",
    "credential-cache",
    "credential-store",
    "cvsexportcommit",
    "cvsimport",
    "cvsserver",
    "daemon",
    "describe",
    "diagnose",
    "diff",
    "diff-files",
    "diff-index",
    "diff-tree",
    "difftool",
    "fast-export",
    "fast-import",
    "fetch",
    "fetch-pack",
    "filter-branch",
    "fmt-merge-msg",
    "for-each-ref",
    "for-each-repo",
    "format-patch",
    "fsck",
    "fsck-objects",
    "gc",
    "get-tar-commit-id",
    "grep",
    "hash-object",
    "help",
    "hook",
    "http-backend",
    "http-fetch",
    "http-push",
    "imap-send",
    "index-pack",
    "init",
    "init-db",
    "instaweb",
    "interpret-trailers",
    "log",
    "ls-files",
    "ls-remote",
    "ls-tree",
    "mailinfo",
    "mailsplit",
    "maintenance",
    "merge",
    "merge-base",
    "merge-file",
    "merge-index",
    "merge-octopus",
    "merge-one-file",
    "merge-ours",
    "merge-recursive",
    "merge-recursive-ours",
    "merge-recursive-theirs",
    "merge-resolve",
    "merge-subtree",
    "merge-tree",
    "mergetool",
    "mktag",
    "mktree",
    "multi-pack-index",
    "mv",
    "name-rev",
    "notes",
    "p4",
    "pack-objects",
    "pack-redundant",
    "pack-refs",
    "patch-id",
    "pickaxe",
    "prune",
    "prune-packed",
    "pull",
    "push",
    "quiltimport",
    "range-diff",
    "read-tree",
    "rebase",
    "receive-pack",
    "reflog",
    "remote",
    "remote-ext",
    "remote-fd",
    "remote-ftp",
    "remote-ftps",
    "remote-http",
    "remote-https",
    "repack",
    "replace",
    "request-pull",
    "rerere",
    "reset",
    "restore",
    "rev-list",
    "rev-parse",
    "revert",
    "rm",
    "send-email",
    "send-pack",
    "shell",
    "shortlog",
    "show",
    "show-branch",
    "show-index",
    "show-ref",
    "sparse-checkout",
    "stage",
    "stash",
    "status",
    "stripspace",
    "submodule",
    "svn",
    "switch",
    "symbolic-ref",
    "tag",
    "unpack-file",
    "unpack-objects",
    "update-index",
    "update-ref",
    "update-server-info",
    "upload-archive",
    "upload-pack",
    "var",
    "verify-commit",
    "verify-pack",
    "verify-tag",
    "version",
    "whatchanged",
    "worktree",
    "write-tree",
];

/// git's command line, read.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct GitLine {
    /// Where the subcommand is in the arguments.
    pub subcommand: Option<usize>,
    /// Why what git runs is not what its words show, if it is not.
    pub changes_program: Option<&'static str>,
}

/// Reads git's global options and finds its subcommand.
pub(super) fn read(args: &[String]) -> GitLine {
    let mut i = 0;
    let mut changes_program = None;
    while i < args.len() {
        let a = args[i].as_str();
        let (name, attached) = match a.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n, Some(v)),
            _ => (a, None),
        };
        if matches!(name, "-c" | "--config-env") {
            changes_program.get_or_insert(
                "git -c and --config-env set configuration, which can name programs git runs",
            );
        }
        if name == "--exec-path" && attached.is_some() {
            changes_program
                .get_or_insert("git --exec-path= changes where git's commands come from");
        }
        if GLOBAL_VALUED.contains(&name) {
            i += if attached.is_some() { 1 } else { 2 };
        } else if GLOBAL_FLAGS.contains(&name) {
            i += 1;
        } else if a.starts_with('-') {
            // git refuses an option it does not know; nothing runs, but nothing is known either.
            return GitLine {
                subcommand: None,
                changes_program: Some("a git option this host does not know"),
            };
        } else {
            break;
        }
    }
    let subcommand = (i < args.len()).then_some(i);
    if let Some(at) = subcommand {
        let sub = args[at].as_str();
        if !COMMANDS.contains(&sub) {
            changes_program.get_or_insert(
                "a git alias or external command: what it runs is in configuration this host does not read",
            );
        } else if let Some(why) = runs_given_command(sub, &args[at + 1..]) {
            changes_program.get_or_insert(why);
        }
    }
    GitLine {
        subcommand,
        changes_program,
    }
}

/// Subcommands that run a command they are given.
fn runs_given_command(sub: &str, rest: &[String]) -> Option<&'static str> {
    let long_prefix_of = |word: &str, full: &str| {
        word.strip_prefix("--")
            .map(|w| w.split('=').next().unwrap_or(w))
            .is_some_and(|w| w.len() >= 2 && full.starts_with(w))
    };
    let options = || rest.iter().take_while(|a| *a != "--");
    match sub {
        "rebase"
            if options().any(|a| {
                long_prefix_of(a, "exec")
                    || long_prefix_of(a, "interactive")
                    || (a.starts_with('-') && !a.starts_with("--") && a.contains(['x', 'i']))
            }) =>
        {
            Some("git rebase --exec and -i run commands")
        }
        "bisect" if rest.iter().any(|a| a == "run") => Some("git bisect run runs a command"),
        "submodule" if rest.iter().any(|a| a == "foreach") => {
            Some("git submodule foreach runs a command")
        }
        "difftool" | "mergetool" | "filter-branch" | "daemon" | "instaweb" | "shell" | "p4"
        | "svn" | "cvsserver" | "send-email" | "imap-send" | "hook" | "for-each-repo" => {
            Some("this git command runs other programs")
        }
        // Plumbing that does what a porcelain command's words would name (`send-pack` pushes).
        "send-pack" | "http-push" | "receive-pack" | "upload-pack" | "fetch-pack"
        | "upload-archive" => {
            Some("git plumbing that does another command's work (send-pack pushes)")
        }
        "clone" | "ls-remote" | "pull" | "archive" | "submodule"
            if options().any(|a| {
                (a.starts_with('-') && !a.starts_with("--") && a.contains('u'))
                    || long_prefix_of(a, "upload-pack")
                    || long_prefix_of(a, "exec")
                    || long_prefix_of(a, "config")
                    || long_prefix_of(a, "template")
            }) =>
        {
            Some("git clone -u, --upload-pack, --exec and --config run programs")
        }
        _ => None,
    }
}

/// Where `git`'s subcommand is, after its global options.
pub(super) fn subcommand(args: &[String]) -> Option<usize> {
    read(args).subcommand
}

/// Long options of any git command that write files or run programs, for the subcommands
/// without a table; matched by any prefix git would accept.
const UNSAFE_ANYWHERE: &[&str] = &[
    "output",
    "output-directory",
    "ext-diff",
    "textconv",
    "upload-pack",
    "receive-pack",
    "exec",
    "open-files-in-pager",
    "extcmd",
    "tool",
];

/// Why git's options put the command beyond a rule written because it reads.
pub(super) fn uncovered(args: &[String]) -> Option<&'static str> {
    let line = read(args);
    if let Some(why) = line.changes_program {
        return Some(why);
    }
    let at = line.subcommand?;
    let sub = args[at].as_str();
    let rest = &args[at + 1..];
    let key = format!("git {sub}");
    if let Some(table) = option_tables::table(&key) {
        return match grammar::read(table, rest) {
            Ok(parsed) => parsed.first_unsafe(),
            Err(_) => Some(UNKNOWN_GIT_OPTION),
        };
    }
    let unsafe_long = rest.iter().take_while(|a| *a != "--").any(|a| {
        a.strip_prefix("--")
            .map(|w| w.split('=').next().unwrap_or(w))
            .is_some_and(|w| w.len() >= 3 && UNSAFE_ANYWHERE.iter().any(|u| u.starts_with(w)))
    });
    if unsafe_long {
        return Some(
            "git --output, --ext-diff, --textconv, --exec and --upload-pack write files or run programs",
        );
    }
    match sub {
        "archive" | "format-patch" if rest.iter().any(|a| a == "-o" || a.starts_with("-o")) => {
            Some("git archive -o and format-patch -o write files")
        }
        _ => None,
    }
}

/// The reason for an option a git subcommand's table does not hold.
pub(super) const UNKNOWN_GIT_OPTION: &str =
    "a git option this host does not know for this command (or an abbreviation of one)";

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn global_options_are_read_as_git_reads_them() {
        assert_eq!(read(&words("-C dir status")).subcommand, Some(2));
        assert_eq!(read(&words("--git-dir=.git log")).subcommand, Some(1));
        assert_eq!(read(&words("--no-pager -P diff")).subcommand, Some(2));
        assert!(
            read(&words("-c alias.p=push p origin"))
                .changes_program
                .is_some()
        );
        assert!(
            read(&words("--config-env=core.pager=X log"))
                .changes_program
                .is_some()
        );
        assert!(read(&words("p origin main")).changes_program.is_some());
        assert!(read(&words("--bogus status")).changes_program.is_some());
        assert!(
            read(&words("rebase --exe make main"))
                .changes_program
                .is_some()
        );
        assert!(
            read(&words("rebase -x make main"))
                .changes_program
                .is_some()
        );
        assert_eq!(read(&words("status --short")).changes_program, None);
    }

    #[test]
    fn every_command_is_one_the_installed_git_runs() {
        // The list is git's own: a name in it that git did not know would hide an alias.
        let Ok(out) = std::process::Command::new("git")
            .arg("--list-cmds=main,nohelpers")
            .output()
        else {
            return;
        };
        let installed = String::from_utf8_lossy(&out.stdout);
        let installed: Vec<&str> = installed.lines().collect();
        if installed.is_empty() {
            return;
        }
        let unknown: Vec<&&str> = COMMANDS.iter().filter(|c| !installed.contains(c)).collect();
        assert!(unknown.is_empty(), "not git commands here: {unknown:?}");
    }
}
