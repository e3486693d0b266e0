//! The files a simple command may write, for the built-in protections: by default every word a
//! program is given, since most programs may write what they are told; only programs known to
//! read (with options their tables mark safe) are exempt. Known writers say more: which of their
//! operands they replace, remove or rename, and where a whole tree below a directory is reached
//! (`rm -r`, `mv`, `cp -r src dir`, `tar -x -C dir`, `unzip -d dir`, `rsync … dir`).

use super::options::{sed_in_place, uncovered};

/// What a program may write.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Writes {
    /// Files it may create or change.
    pub files: Vec<String>,
    /// Directories whose whole tree it may replace, remove or fill.
    pub below: Vec<String>,
    /// Directories it puts files into (`cp x dir/`, `cp -t dir x`): a directory that holds a
    /// protected file is as protected as the file.
    pub into: Vec<String>,
    /// Words it may write, remove or fill as it likes (a program not known to only read): a
    /// protected place, or a directory holding one, other than the working directory or the
    /// home and those above them (`pytest .` stays allowed).
    pub near: Vec<String>,
    /// It writes files named where no text shows (a patch's headers).
    pub unknown: bool,
}

/// Programs that only read their operands (with options their tables, if any, mark safe).
const READ_ONLY: &[&str] = &[
    "cat",
    "head",
    "tail",
    "less",
    "more",
    "wc",
    "ls",
    "stat",
    "file",
    "diff",
    "cmp",
    "sha1sum",
    "sha224sum",
    "sha256sum",
    "sha384sum",
    "sha512sum",
    "md5sum",
    "b2sum",
    "cksum",
    "jq",
    "cut",
    "tr",
    "nl",
    "od",
    "xxd",
    "hexdump",
    "base64",
    "base32",
    "column",
    "fold",
    "fmt",
    "paste",
    "join",
    "comm",
    "tac",
    "rev",
    "strings",
    "realpath",
    "readlink",
    "dirname",
    "basename",
    "du",
    "df",
    "tree",
    "bat",
    "batcat",
    "echo",
    "printf",
    "test",
    "[",
    "true",
    "false",
    "pwd",
    "which",
    "type",
    "id",
    "date",
    "uname",
    "whoami",
    "hostname",
    "ps",
    "cd",
    "pushd",
    "popd",
    "sleep",
    "seq",
    "expr",
    "nproc",
    "kill",
    "pkill",
    "pgrep",
    "grep",
    "egrep",
    "fgrep",
    "rg",
    "fd",
    "fdfind",
    "find",
    "sort",
    "uniq",
    "sed",
    "awk",
    "gawk",
    "mawk",
    "nawk",
    "tar",
    "curl",
    "wget",
    "git",
    ":",
];

/// Whether a program's options can make it write or run something (it has an option table, or
/// is not known to only read): given arguments no text shows, it could do anything.
pub(super) fn options_matter(name: &str) -> bool {
    !READ_ONLY.contains(&name)
        || super::option_tables::table(name).is_some()
        || matches!(name, "git" | "find")
}

/// Whether `name args…` only reads: a program known to read, with options its table marks
/// safe (git: a subcommand with a table).
pub(super) fn reads_only(name: &str, args: &[String]) -> bool {
    READ_ONLY.contains(&name)
        && uncovered(name, args).is_none()
        && (name != "git" || git_reads(args))
        && !(name == "sed" && sed_in_place(args))
}

/// What `name args…` may write; `options_safe` when its options uncover nothing (the caller
/// has read them already).
pub(super) fn of(name: &str, args: &[String], options_safe: bool) -> Writes {
    let operands = || operands(args);
    match name {
        "rm" | "rmdir" | "shred" | "unlink" => Writes {
            below: operands(),
            ..Writes::default()
        },
        // They write the files their input names: which, no text shows (Codex applies an
        // `apply_patch` run in its shell itself).
        "patch" | "apply_patch" | "applypatch" | "cpio" | "pax" | "ar" => Writes {
            unknown: true,
            ..Writes::default()
        },
        "touch" | "truncate" | "tee" | "mkdir" | "dd" => Writes {
            files: operands(),
            ..Writes::default()
        },
        "chmod" | "chown" | "chgrp" => {
            let recursive = recursive(args);
            let words = operands();
            if recursive {
                Writes {
                    below: words,
                    ..Writes::default()
                }
            } else {
                Writes {
                    files: words,
                    ..Writes::default()
                }
            }
        }
        "cp" | "mv" | "ln" | "install" | "rsync" | "scp" => copies(name, args),
        "tar" | "bsdtar" | "gtar" => tar(args),
        // `python3 -m tarfile -e a.tar [dir]`, `-m zipfile -e a.zip dir`: an extractor.
        _ if name.starts_with("python")
            && args.windows(2).any(|w| {
                w[0] == "-m" && matches!(w[1].as_str(), "tarfile" | "zipfile" | "shutil")
            }) =>
        {
            Writes {
                below: vec![".".to_owned()],
                near: operands(),
                ..Writes::default()
            }
        }
        "7z" | "7za" | "7zr" | "7zz" if args.first().is_some_and(|a| a == "x" || a == "e") => {
            let dir = args
                .iter()
                .find_map(|a| a.strip_prefix("-o"))
                .unwrap_or(".")
                .to_owned();
            Writes {
                below: vec![dir.clone()],
                into: vec![dir],
                ..Writes::default()
            }
        }
        "unzip" => unzip(args),
        "sed" if sed_in_place(args) => Writes {
            files: operands(),
            ..Writes::default()
        },
        "git" if !git_reads(args) => git(args),
        _ if READ_ONLY.contains(&name) && options_safe => Writes::default(),
        // Anything else may write what it is given.
        _ => all_words(args),
    }
}

/// A program not known to only read may write, remove or fill whatever it is given.
pub(super) fn all_words(args: &[String]) -> Writes {
    Writes {
        // Options alone are not paths; a value after `=` may be, and a path inside an option
        // (`-o.claude/settings.json`) is found by its text.
        near: args
            .iter()
            .filter(|a| !a.starts_with('-') || a.contains('='))
            .map(|a| a.split_once('=').map_or(a.as_str(), |(_, v)| v).to_owned())
            .collect(),
        ..Writes::default()
    }
}

/// git commands that change the work tree beyond their words: `clean` and `stash -u` remove
/// untracked files, `apply` and `am` write the files their patches name, `rm` and `mv` take
/// directories whole.
fn git(args: &[String]) -> Writes {
    let Some(at) = super::git::subcommand(args) else {
        return all_words(args);
    };
    let rest = &args[at + 1..];
    let mut writes = all_words(rest);
    let paths: Vec<String> = rest
        .iter()
        .filter(|a| !a.starts_with('-'))
        .cloned()
        .collect();
    let has = |short: char, long: &[&str]| {
        rest.iter().any(|a| {
            long.contains(&a.as_str())
                || (a.starts_with('-') && !a.starts_with("--") && a.contains(short))
        })
    };
    match args[at].as_str() {
        // They change the repository, never the work tree's files.
        "add" | "commit" | "push" | "remote" | "notes" | "reflog" | "gc" | "fsck" | "prune"
        | "count-objects" | "show-branch" | "init" | "credential" | "maintenance" => {
            writes = Writes::default();
        }
        "clean" => {
            writes.below = if paths.is_empty() {
                vec![".".to_owned()]
            } else {
                paths
            };
        }
        "stash" if has('u', &["--include-untracked"]) || has('a', &["--all"]) => {
            writes.below = vec![".".to_owned()];
        }
        "rm" | "mv" => writes.below = paths,
        "apply" | "am" => writes.unknown = true,
        _ => {}
    }
    writes
}

/// Whether git runs a subcommand whose table says it reads (`status`, `log`, `diff`, …).
fn git_reads(args: &[String]) -> bool {
    super::git::subcommand(args)
        .is_some_and(|at| super::option_tables::table(&format!("git {}", args[at])).is_some())
}

/// The words that are not options (values after `=` included, so `of=x` is `x`).
fn operands(args: &[String]) -> Vec<String> {
    args.iter()
        .filter(|a| !a.starts_with('-') || a.contains('='))
        .map(|a| a.split_once('=').map_or(a.as_str(), |(_, v)| v).to_owned())
        .collect()
}

fn recursive(args: &[String]) -> bool {
    args.iter().take_while(|a| *a != "--").any(|a| {
        matches!(a.as_str(), "--recursive" | "--archive")
            || (a.starts_with('-') && !a.starts_with("--") && a[1..].contains(['r', 'R', 'a']))
    })
}

/// `cp`, `mv`, `ln`, `install`, `rsync`, `scp`: every operand may be written (`mv` removes its
/// sources), and each source lands in the destination directory under its own name (`cp x dir/`
/// writes `dir/x`; `-t dir` names the directory). A tree that is moved, or copied recursively,
/// fills what lies below where it lands.
fn copies(name: &str, args: &[String]) -> Writes {
    let mut target = None;
    let mut words = Vec::new();
    let mut options_done = false;
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        if options_done || !a.starts_with('-') || a == "-" {
            words.push(a.to_owned());
        } else if a == "--" {
            options_done = true;
        } else if a == "-t" || a == "--target-directory" {
            i += 1;
            target = args.get(i).cloned();
        } else if let Some(dir) = a.strip_prefix("--target-directory=") {
            target = Some(dir.to_owned());
        } else if let Some(dir) = a.strip_prefix("-t").filter(|d| !d.is_empty()) {
            target = Some(dir.to_owned());
        } else if matches!(
            a,
            "-S" | "--suffix" | "-m" | "--mode" | "-o" | "--owner" | "-g"
        ) && name == "install"
        {
            i += 1;
        } else if a.contains('=') {
            words.push(a.split_once('=').map_or(a, |(_, v)| v).to_owned());
        }
        i += 1;
    }
    let has_target = target.is_some();
    let (sources, dest) = match target {
        Some(dir) => (words.clone(), Some(dir)),
        None => {
            let mut sources = words.clone();
            let dest = sources.pop();
            (sources, dest)
        }
    };
    let whole_trees = name == "mv" || name == "rsync" || recursive(args);
    let mut writes = Writes::default();
    let words: Vec<String> = match has_target {
        true => words,
        // The destination is written below, by what lands in it.
        false => words[..words.len().saturating_sub(1)].to_vec(),
    };
    for word in &words {
        if name == "mv" {
            writes.below.push(word.clone());
        } else {
            writes.files.push(word.clone());
        }
    }
    if let Some(dest) = dest {
        writes.into.push(dest.clone());
        let no_target_dir = args
            .iter()
            .take_while(|a| *a != "--")
            .any(|a| a == "-T" || a == "--no-target-directory");
        // A tree moved or copied to a name that is not plainly an existing directory (`.`,
        // `dir/`) becomes that name, with all it holds.
        let plainly_a_directory = has_target
            || matches!(dest.as_str(), "." | ".." | "~")
            || dest.ends_with(['/'])
            || dest.ends_with("/.")
            || dest.ends_with("/..");
        if whole_trees && (no_target_dir || name == "rsync" || !plainly_a_directory) {
            writes.below.push(dest.clone());
        } else {
            writes.files.push(dest.clone());
        }
        for source in sources {
            let landed = format!("{}/{}", dest.trim_end_matches('/'), base(&source));
            if whole_trees {
                writes.below.push(landed);
            } else {
                writes.files.push(landed);
            }
        }
    }
    writes
}

/// The name a source lands under (`a/b/` is `b`; `a/.` is `.`, its contents).
fn base(source: &str) -> &str {
    let trimmed = source.trim_end_matches('/');
    if trimmed.is_empty() {
        return "/";
    }
    trimmed.rsplit('/').next().unwrap_or(trimmed)
}

/// tar: the archive it creates or changes, and the tree it extracts into (`-C dir`, else the
/// working directory; with `-P` anywhere at all).
fn tar(args: &[String]) -> Writes {
    let letters: String = args
        .iter()
        .enumerate()
        .filter(|(i, a)| {
            (*i == 0 && !a.starts_with('-')) || (a.starts_with('-') && !a.starts_with("--"))
        })
        .map(|(_, a)| a.trim_start_matches('-').to_owned())
        .collect();
    let long = |names: &[&str]| {
        args.iter().any(|a| {
            a.strip_prefix("--")
                .map(|l| l.split('=').next().unwrap_or(l))
                .is_some_and(|l| l.len() >= 3 && names.iter().any(|n| n.starts_with(l)))
        })
    };
    let extracts = letters.contains('x') || long(&["extract", "get"]);
    let changes = letters.chars().any(|c| "cruA".contains(c))
        || long(&[
            "create",
            "append",
            "update",
            "catenate",
            "concatenate",
            "delete",
        ]);
    let mut writes = Writes::default();
    if changes || extracts {
        // Every word may be the archive or a member: all are written or read.
        writes.files = operands(args);
    }
    if extracts {
        let mut dir = ".".to_owned();
        for (i, a) in args.iter().enumerate() {
            if a == "-C" || a == "--directory" {
                if let Some(d) = args.get(i + 1) {
                    dir = d.clone();
                }
            } else if let Some(d) = a.strip_prefix("--directory=") {
                dir = d.to_owned();
            } else if let Some(d) = a.strip_prefix("-C").filter(|d| !d.is_empty()) {
                dir = d.to_owned();
            }
        }
        if letters.contains('P') || long(&["absolute-names"]) {
            dir = "/".to_owned();
        }
        writes.below.push(dir.clone());
        writes.into.push(dir);
    }
    writes
}

/// unzip: the tree it extracts into (`-d dir`, else the working directory), unless it only
/// lists, tests or prints.
fn unzip(args: &[String]) -> Writes {
    let options: Vec<&String> = args.iter().filter(|a| a.starts_with('-')).collect();
    if options
        .iter()
        .any(|a| a[1..].contains(['l', 't', 'v', 'p', 'Z', 'z']))
    {
        return Writes::default();
    }
    let mut dir = ".".to_owned();
    for (i, a) in args.iter().enumerate() {
        if a == "-d" {
            if let Some(d) = args.get(i + 1) {
                dir = d.clone();
            }
        } else if let Some(d) = a.strip_prefix("-d").filter(|d| !d.is_empty()) {
            dir = d.to_owned();
        }
    }
    Writes {
        files: operands(args),
        below: vec![dir.clone()],
        into: vec![dir],
        ..Writes::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(s: &str) -> Writes {
        let words: Vec<String> = s.split_whitespace().map(str::to_owned).collect();
        of(
            &words[0],
            &words[1..],
            uncovered(&words[0], &words[1..]).is_none(),
        )
    }

    #[test]
    fn copies_land_in_their_destination_under_their_own_names() {
        assert_eq!(
            w("cp x .approval-host/").files,
            vec!["x", ".approval-host/", ".approval-host/x"]
        );
        assert_eq!(
            w("cp -t .claude a").files,
            vec!["a", ".claude", ".claude/a"]
        );
        assert_eq!(w("cp -r evil/. .").below, vec!["./."]);
        assert_eq!(
            w("mv .claude .claude.off").below,
            vec![".claude", ".claude.off", ".claude.off/.claude"]
        );
        assert_eq!(w("tar -xf t -C .claude").below, vec![".claude"]);
        assert_eq!(w("tar xzf t").below, vec!["."]);
        assert_eq!(w("unzip a.zip -d out").below, vec!["out"]);
        assert!(w("unzip -l a.zip").below.is_empty());
        assert_eq!(w("rm -rf .claude").below, vec![".claude"]);
        assert_eq!(
            w("git checkout HEAD -- .claude/settings.json")
                .near
                .last()
                .unwrap(),
            ".claude/settings.json"
        );
        assert_eq!(w("sort -o out f").near, vec!["out", "f"]);
        assert_eq!(w("cat .claude/settings.json"), Writes::default());
        assert_eq!(w("git log -p"), Writes::default());
    }
}
