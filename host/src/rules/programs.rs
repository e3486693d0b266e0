//! What the programs of a simple command do beyond their words: the programs it really runs
//! (through wrappers, paths and `bash -c`), the options that make a reading command write files
//! or run other programs, and the files it may write.
//!
//! A rule's words say which program may run; they do not say that `find . -delete` deletes or
//! that `timeout 5 rm -rf ~` is `rm`. [`read`] looks at a simple command the way a reviewer
//! would: a reject rule is matched against every program it runs ([`Reading::runs`]), an allow
//! rule only covers it when nothing in it writes a file or runs a program the rule never named
//! ([`Reading::uncovered`]), and the files it writes are checked against the protected paths
//! ([`Reading::writes`]). Builtins that evaluate their arguments as code make it [`Opaque`].
//!
//! The tables below are the README's "what makes a command uncovered" list; each entry is
//! tested.

use super::shell::{self, Opaque, Redirect, Simple};

/// How deep wrappers and nested scripts are followed (`sudo timeout 5 bash -c '…'`).
const MAX_DEPTH: usize = 8;

/// What one simple command does, as far as rules are concerned.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reading {
    /// Why no rule naming its words may allow it, if something in it writes a file or runs a
    /// program the words do not name.
    pub uncovered: Option<&'static str>,
    /// Every program it runs as reject rules see it: the base name of the program, then its
    /// arguments; the command itself first, then what its wrappers and scripts run.
    pub runs: Vec<Vec<String>>,
    /// It runs something this host cannot read (a shell reading a file or standard input, a
    /// remote command): reject rules also look for their words anywhere in the command's text.
    pub hidden: bool,
    /// Files it may write: redirection targets and the operands of known writers.
    pub writes: Vec<String>,
    /// Every word that may name a file (for paths nothing may touch at all).
    pub operands: Vec<String>,
    /// `cd`: where it moves what follows (`None` when that cannot be known: `cd -`, `pushd`).
    pub chdir: Option<Option<String>>,
    /// Its writes reach what lies below a directory it names (`rm -r`, `mv`, `cp -r`,
    /// `chmod -R`): removing or replacing a directory takes what is in it along.
    pub reaches_below: bool,
    /// When it is a wrapper (`timeout 5 cargo test`, `xargs rm`, `bash -c '…'`, `ssh host …`):
    /// the index of the word where what it runs starts. A rule covers it only when the rule's
    /// words reach past that index, that is when the rule names what runs.
    pub wraps_from: Option<usize>,
}

/// Reads `simple`.
///
/// # Errors
/// [`Opaque`] when it evaluates text as code (`eval`, `source`, `exec`, `trap`, `declare`, …),
/// or hands a script this host cannot read safely to a shell.
pub fn read(simple: &Simple) -> Result<Reading, Opaque> {
    let mut reading = Reading::default();
    for redirect in &simple.redirects {
        match redirect {
            Redirect::Harmless => {}
            Redirect::Reads(path) => {
                // A file the rule never named (or `/dev/tcp/host/port`, a network connection
                // to bash) as the program's input.
                reading
                    .uncovered
                    .get_or_insert("a redirection that reads a file");
                reading.operands.push(path.clone());
            }
            Redirect::Writes(path) => {
                reading
                    .uncovered
                    .get_or_insert("a redirection that writes a file");
                reading.writes.push(path.clone());
                reading.operands.push(path.clone());
            }
        }
    }
    program(&simple.words, &mut reading, 0, 0)?;
    Ok(reading)
}

/// The program's base name: `/usr/bin/rm` and `./rm` are `rm` to a reject rule.
pub fn base_name(word: &str) -> &str {
    word.rsplit('/').next().unwrap_or(word)
}

/// Reads the program `words` runs; `offset` is where `words` starts in the simple command.
fn program(
    words: &[String],
    reading: &mut Reading,
    depth: usize,
    offset: usize,
) -> Result<(), Opaque> {
    let Some(first) = words.first() else {
        return Ok(());
    };
    if depth > MAX_DEPTH {
        return Err(Opaque("wrappers nested too deep"));
    }
    let name = base_name(first);
    let args = &words[1..];
    if let Some(why) = evaluates_code(name, args) {
        return Err(Opaque(why));
    }
    let mut normalized = Vec::with_capacity(words.len());
    normalized.push(name.to_owned());
    normalized.extend_from_slice(args);
    reading.runs.push(normalized);
    if name == "git"
        && let Some(at) = git_subcommand(args)
        && at > 0
    {
        // `git -C dir -c x=y push` is `git push` to a reject rule.
        let mut plain = vec!["git".to_owned()];
        plain.extend_from_slice(&args[at..]);
        reading.runs.push(plain);
    }
    if let Some(why) = uncovered(name, args) {
        reading.uncovered.get_or_insert(why);
    }
    for word in args {
        let value = word.split_once('=').map_or(word.as_str(), |(_, v)| v);
        reading.operands.push(value.to_owned());
    }
    if WRITERS.contains(&name) || (name == "sed" && sed_in_place(args)) {
        reading.writes.extend(
            args.iter()
                .filter(|a| !a.starts_with('-') || a.contains('='))
                .map(|a| a.split_once('=').map_or(a.as_str(), |(_, v)| v).to_owned()),
        );
        reading.reaches_below |= reaches_below(name, args);
    }
    for inner in executed_by(name, args) {
        // What `find -exec` and `fd -x` run, for reject rules (they are uncovered anyway).
        let mut inner_reading = Reading::default();
        program(inner, &mut inner_reading, depth + 1, 0)?;
        reading.runs.extend(inner_reading.runs);
        reading.writes.extend(inner_reading.writes);
        reading.hidden |= inner_reading.hidden;
        reading.reaches_below |= inner_reading.reaches_below;
    }
    match name {
        "cd" => {
            reading.chdir = Some(match args {
                [] => Some("~".to_owned()),
                [dir] if !dir.starts_with('-') => Some(dir.clone()),
                _ => None,
            });
        }
        "pushd" | "popd" => reading.chdir = Some(None),
        _ => {}
    }
    match wrapped(name, args)? {
        Wrapped::Nothing => Ok(()),
        Wrapped::Command(at) => {
            reading.wraps_from = Some(offset + 1 + at);
            program(&args[at..], reading, depth + 1, offset + 1 + at)
        }
        Wrapped::Script(at) => {
            reading.wraps_from = Some(offset + 1 + at);
            for simple in shell::parse(&args[at])? {
                let inner = read(&simple)?;
                reading.runs.extend(inner.runs);
                reading.writes.extend(inner.writes);
                reading.operands.extend(inner.operands);
                reading.hidden |= inner.hidden;
                reading.reaches_below |= inner.reaches_below;
                // A `cd` inside the script moves its own paths: only their text can tell.
                reading.hidden |= inner.chdir.is_some();
                if let Some(why) = inner.uncovered {
                    reading.uncovered.get_or_insert(why);
                }
            }
            Ok(())
        }
        Wrapped::Hidden => {
            reading.hidden = true;
            let operand = args.iter().position(|a| !a.starts_with('-'));
            reading.wraps_from = Some(offset + 1 + operand.unwrap_or(args.len()));
            Ok(())
        }
    }
}

/// The commands `find -exec … ;` and `fd -x …` run.
fn executed_by<'a>(name: &str, args: &'a [String]) -> Vec<&'a [String]> {
    let starts: &[&str] = match name {
        "find" => &["-exec", "-execdir", "-ok", "-okdir"],
        "fd" | "fdfind" => &["-x", "--exec", "-X", "--exec-batch"],
        _ => return Vec::new(),
    };
    let mut out = Vec::new();
    let mut i = 0;
    while i < args.len() {
        if starts.contains(&args[i].as_str()) {
            let from = i + 1;
            let mut end = from;
            while end < args.len() && args[end] != ";" && args[end] != "+" {
                end += 1;
            }
            out.push(&args[from..end]);
            i = end;
        }
        i += 1;
    }
    out
}

/// Builtins that evaluate their arguments (or array subscripts in them) as code.
fn evaluates_code(name: &str, args: &[String]) -> Option<&'static str> {
    Some(match name {
        "eval" => "eval runs its arguments as a command",
        "source" | "." => "source runs a file as shell code",
        "exec" => "exec replaces the shell with another program",
        "trap" => "trap runs its argument as a command",
        "alias" | "unalias" | "bind" | "complete" | "compgen" | "fc" | "enable" | "history" => {
            "a builtin that defines or runs shell code"
        }
        "let" | "declare" | "typeset" | "local" | "export" | "readonly" => {
            "a builtin that evaluates arithmetic or assignments"
        }
        "mapfile" | "readarray" => "mapfile runs a callback",
        "printf" if args.iter().any(|a| a.starts_with("-v")) => {
            "printf -v assigns to a name it evaluates"
        }
        "read" | "unset" | "wait" if args.iter().any(|a| a.contains('[')) => {
            "an array subscript is evaluated as code"
        }
        "test" | "[" if args.iter().any(|a| a == "-v" || a == "-R") => {
            "test -v evaluates an array subscript"
        }
        _ => return None,
    })
}

/// Whether `name`'s writes reach below the directories it names.
fn reaches_below(name: &str, args: &[String]) -> bool {
    let recursive = args.iter().take_while(|a| *a != "--").any(|a| {
        matches!(a.as_str(), "--recursive" | "--archive" | "--delete")
            || (a.starts_with('-') && !a.starts_with("--") && a[1..].contains(['r', 'R', 'a']))
    });
    match name {
        "rm" | "rmdir" | "mv" | "shred" | "unlink" | "tar" | "unzip" => true,
        "cp" | "rsync" | "chmod" | "chown" | "chgrp" | "scp" | "install" => recursive,
        _ => false,
    }
}

/// Programs whose operands are files they write (or delete, or change).
const WRITERS: &[&str] = &[
    "tee", "cp", "mv", "ln", "install", "rsync", "truncate", "touch", "rm", "rmdir", "mkdir",
    "chmod", "chown", "chgrp", "shred", "unlink", "dd", "patch", "tar", "unzip", "scp",
];

/// Why options of a program people allow because it only reads make it write or run something.
fn uncovered(name: &str, args: &[String]) -> Option<&'static str> {
    let has = |options: &[&str]| {
        args.iter().any(|a| {
            options.iter().any(|o| {
                a == o
                    || (o.starts_with("--")
                        && a.strip_prefix(o).is_some_and(|r| r.starts_with('=')))
            })
        })
    };
    match name {
        "find" => has(&[
            "-exec", "-execdir", "-ok", "-okdir", "-delete", "-fls", "-fprint", "-fprint0",
            "-fprintf",
        ])
        .then_some("find with -exec, -ok, -delete or -fprint runs programs or writes files"),
        "fd" | "fdfind" => {
            has(&["-x", "--exec", "-X", "--exec-batch"]).then_some("fd --exec runs other programs")
        }
        "rg" | "grep" | "egrep" | "fgrep" => has(&["--pre", "--hostname-bin"])
            .then_some("--pre and --hostname-bin run other programs"),
        "git" => git_uncovered(args),
        "sed" => sed_uncovered(args),
        "sort" => (has(&["--output", "--compress-program"]) || short_bundle_has(args, 'o'))
            .then_some("sort -o writes a file; --compress-program runs one"),
        "tar" => tar_uncovered(args),
        "curl" => (has(&[
            "--output",
            "--remote-name",
            "--remote-name-all",
            "--config",
            "--dump-header",
            "--cookie-jar",
            "--trace",
            "--trace-ascii",
            "--libcurl",
            "--stderr",
            "--upload-file",
            "--output-dir",
        ]) || ['o', 'O', 'K', 'D', 'c', 'T']
            .iter()
            .any(|c| short_bundle_has(args, *c)))
        .then_some("curl with -o, -O, -T, -K, -c or -D writes or uploads files"),
        "wget" => {
            let to_stdout = args.iter().any(|a| {
                a == "--spider" || a == "-O-" || a == "-qO-" || a == "--output-document=-"
            }) || args.windows(2).any(|w| w[0] == "-O" && w[1] == "-");
            (!to_stdout || has(&["--execute", "-e"])).then_some("wget writes the files it fetches")
        }
        "awk" | "gawk" | "mawk" | "nawk" => awk_uncovered(args),
        _ => None,
    }
}

/// Whether a short-option bundle (`-sSo`) holds `letter`. Long options and operands are skipped.
fn short_bundle_has(args: &[String], letter: char) -> bool {
    args.iter()
        .take_while(|a| *a != "--")
        .any(|a| a.starts_with('-') && !a.starts_with("--") && a[1..].contains(letter))
}

/// Where `git`'s subcommand is, after its global options.
fn git_subcommand(args: &[String]) -> Option<usize> {
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        match a {
            "-C" | "-c" | "--git-dir" | "--work-tree" | "--namespace" | "--exec-path"
            | "--config-env" | "--super-prefix" | "--list-cmds" | "--attr-source" => i += 2,
            _ if a.starts_with('-') => i += 1,
            _ => return Some(i),
        }
    }
    None
}

fn git_uncovered(args: &[String]) -> Option<&'static str> {
    let sub = git_subcommand(args);
    let global = &args[..sub.unwrap_or(args.len())];
    if global
        .iter()
        .any(|a| a == "-c" || a.starts_with("--config-env") || a.starts_with("--exec-path="))
    {
        return Some("git -c and --config-env set configuration that can run programs");
    }
    let at = sub?;
    let (sub, rest) = (args[at].as_str(), &args[at + 1..]);
    let any = |options: &[&str]| {
        rest.iter().any(|a| {
            options
                .iter()
                .any(|o| a == o || a.strip_prefix(o).is_some_and(|r| r.starts_with('=')))
        })
    };
    if any(&[
        "--output",
        "--ext-diff",
        "--textconv",
        "--upload-pack",
        "--receive-pack",
        "--exec",
    ]) {
        return Some(
            "git --output, --ext-diff, --textconv, --exec and --upload-pack write files or run programs",
        );
    }
    match sub {
        "branch"
            if any(&[
                "-d",
                "-D",
                "--delete",
                "-m",
                "-M",
                "--move",
                "-c",
                "-C",
                "--copy",
                "-f",
                "--force",
                "--edit-description",
            ]) =>
        {
            Some("git branch -d, -D, -m, -M, -c and -f change branches")
        }
        "tag" if any(&["-d", "--delete", "-f", "--force"]) => Some("git tag -d and -f change tags"),
        "rebase" if any(&["-x"]) => Some("git rebase -x runs a command"),
        "grep" if any(&["-O", "--open-files-in-pager"]) => Some("git grep -O runs a pager"),
        "archive" | "format-patch" if any(&["-o", "--output-directory"]) => {
            Some("git archive -o and format-patch -o write files")
        }
        "submodule" if rest.iter().any(|a| a == "foreach") => {
            Some("git submodule foreach runs a command")
        }
        "bisect" if rest.iter().any(|a| a == "run") => Some("git bisect run runs a command"),
        "difftool" | "mergetool" | "filter-branch" | "daemon" | "instaweb" => {
            Some("this git subcommand runs other programs")
        }
        _ => None,
    }
}

fn sed_in_place(args: &[String]) -> bool {
    args.iter().take_while(|a| *a != "--").any(|a| {
        a.starts_with("--in-place")
            || (a.starts_with('-') && !a.starts_with("--") && a[1..].contains('i'))
    })
}

fn sed_uncovered(args: &[String]) -> Option<&'static str> {
    if sed_in_place(args) {
        return Some("sed -i writes the files it reads");
    }
    let mut scripts: Vec<&str> = Vec::new();
    let mut operands = Vec::new();
    let mut i = 0;
    let mut options_done = false;
    while i < args.len() {
        let a = args[i].as_str();
        if options_done || !a.starts_with('-') || a == "-" {
            operands.push(a);
        } else if a == "--" {
            options_done = true;
        } else if a == "-e" || a == "--expression" {
            i += 1;
            scripts.push(args.get(i).map_or("", String::as_str));
        } else if let Some(s) = a.strip_prefix("--expression=") {
            scripts.push(s);
        } else if a == "-f" || a.starts_with("--file") || (a.starts_with("-f") && a.len() > 2) {
            return Some("sed -f runs a script file this host cannot read");
        } else if a.starts_with("--") {
            // --debug, --posix, --sandbox, --separate, --null-data, --regexp-extended…
        } else {
            // A bundle of one-letter options: flags, then perhaps -e with its script (attached
            // or the next word) or -l with its length.
            let bundle = &a[1..];
            for (at, letter) in bundle.char_indices() {
                match letter {
                    'n' | 'E' | 'r' | 's' | 'u' | 'z' | 'b' => {}
                    'e' => {
                        let rest = &bundle[at + 1..];
                        if rest.is_empty() {
                            i += 1;
                            scripts.push(args.get(i).map_or("", String::as_str));
                        } else {
                            scripts.push(rest);
                        }
                        break;
                    }
                    'l' => {
                        if bundle[at + 1..].is_empty() {
                            i += 1;
                        }
                        break;
                    }
                    _ => return Some("a sed option this host cannot read"),
                }
            }
        }
        i += 1;
    }
    if scripts.is_empty() {
        scripts.extend(operands.first());
    }
    scripts
        .iter()
        .any(|s| !sed_script_is_safe(s))
        .then_some("a sed script with e, w or W commands (or one this host cannot read) runs programs or writes files")
}

/// Whether a sed script only prints, deletes, substitutes and moves through its input. Anything
/// this small reader does not know is unsafe.
fn sed_script_is_safe(script: &str) -> bool {
    let s: Vec<char> = script.chars().collect();
    let mut i = 0;
    let skip_blank = |i: &mut usize| {
        while *i < s.len() && (s[*i] == ' ' || s[*i] == '\t' || s[*i] == ';' || s[*i] == '\n') {
            *i += 1;
        }
    };
    // Reads a delimited part starting after the delimiter; returns false if unterminated.
    let delimited = |i: &mut usize, delim: char| -> bool {
        while *i < s.len() {
            match s[*i] {
                '\\' => *i += 2,
                c if c == delim => {
                    *i += 1;
                    return true;
                }
                '\n' => return false,
                _ => *i += 1,
            }
        }
        false
    };
    loop {
        skip_blank(&mut i);
        if i >= s.len() {
            return true;
        }
        // Addresses: N, $, /re/, \cREc, with ,N ,$ ,/re/ ~N +N, then optional !.
        for _ in 0..2 {
            if i < s.len() && s[i].is_ascii_digit() {
                while i < s.len() && (s[i].is_ascii_digit() || s[i] == '~') {
                    i += 1;
                }
            } else if i < s.len() && s[i] == '$' {
                i += 1;
            } else if i < s.len() && s[i] == '/' {
                i += 1;
                if !delimited(&mut i, '/') {
                    return false;
                }
                while i < s.len() && (s[i] == 'I' || s[i] == 'M') {
                    i += 1;
                }
            } else if i + 1 < s.len() && s[i] == '\\' {
                let d = s[i + 1];
                i += 2;
                if !delimited(&mut i, d) {
                    return false;
                }
            }
            if i < s.len() && s[i] == ',' {
                i += 1;
                if i < s.len() && (s[i] == '+' || s[i] == '~') {
                    i += 1;
                }
                continue;
            }
            break;
        }
        while i < s.len() && (s[i] == ' ' || s[i] == '!') {
            i += 1;
        }
        let Some(&command) = s.get(i) else {
            return false;
        };
        i += 1;
        match command {
            '{' | '}' | '=' | 'd' | 'D' | 'g' | 'G' | 'h' | 'H' | 'n' | 'N' | 'p' | 'P' | 'x'
            | 'z' | 'F' => {}
            'q' | 'Q' | 'l' | 'L' => {
                while i < s.len() && (s[i].is_ascii_digit() || s[i] == ' ') {
                    i += 1;
                }
            }
            'b' | 't' | 'T' | ':' => {
                while i < s.len() && s[i] != ';' && s[i] != '\n' && s[i] != '}' {
                    i += 1;
                }
            }
            's' | 'y' => {
                let Some(&delim) = s.get(i) else {
                    return false;
                };
                if delim == '\\' || delim == '\n' {
                    return false;
                }
                i += 1;
                if !delimited(&mut i, delim) || !delimited(&mut i, delim) {
                    return false;
                }
                if command == 's' {
                    while i < s.len()
                        && matches!(s[i], 'g' | 'p' | 'i' | 'I' | 'm' | 'M' | '0'..='9')
                    {
                        i += 1;
                    }
                }
            }
            // e runs a command, w/W write files, r/R read them, a/i/c take text this reader
            // does not follow: none is a plain read.
            _ => return false,
        }
    }
}

fn tar_uncovered(args: &[String]) -> Option<&'static str> {
    const WHY: &str =
        "tar only reads when it lists (-t): it extracts, creates and runs programs otherwise";
    let mut letters = String::new();
    let mut long = Vec::new();
    for (i, a) in args.iter().enumerate() {
        if let Some(l) = a.strip_prefix("--") {
            long.push(l.split('=').next().unwrap_or(l));
        } else if let Some(b) = a.strip_prefix('-') {
            letters.push_str(b);
        } else if i == 0 {
            // Old style: `tar tzf archive`.
            letters.push_str(a);
        }
    }
    let lists = letters.contains('t') || long.contains(&"list");
    let changes = letters.chars().any(|c| "xcruAIF".contains(c))
        || long.iter().any(|l| {
            matches!(
                *l,
                "extract"
                    | "get"
                    | "create"
                    | "append"
                    | "update"
                    | "catenate"
                    | "concatenate"
                    | "delete"
                    | "to-command"
                    | "checkpoint-action"
                    | "use-compress-program"
                    | "rsh-command"
                    | "info-script"
                    | "new-volume-script"
                    | "rmt-command"
                    | "index-file"
            )
        });
    (!lists || changes).then_some(WHY)
}

fn awk_uncovered(args: &[String]) -> Option<&'static str> {
    const WHY: &str = "an awk program with system, pipes, output redirection, or loaded code runs programs or writes files";
    let mut i = 0;
    let mut program = None;
    while i < args.len() {
        let a = args[i].as_str();
        match a {
            "-f" | "--file" | "-E" | "--exec" | "-i" | "--include" | "-l" | "--load" => {
                return Some(WHY);
            }
            "-F" | "-v" | "--field-separator" | "--assign" => i += 1,
            "--" => {
                program = args.get(i + 1).map(String::as_str);
                break;
            }
            "-e" | "--source" => {
                program = args.get(i + 1).map(String::as_str);
                break;
            }
            _ if a.starts_with("-f")
                || a.starts_with("--file=")
                || a.starts_with("--load=")
                || a.starts_with("--include=") =>
            {
                return Some(WHY);
            }
            _ if a.starts_with('-') => {}
            _ => {
                program = Some(a);
                break;
            }
        }
        i += 1;
    }
    let program = program?;
    (program.contains("system")
        || program.contains('|')
        || program.contains('>')
        || program.contains("getline")
        || program.contains("close")
        || program.contains("@load"))
    .then_some(WHY)
}

/// How a program's options read, to find where the command it wraps starts.
struct Grammar {
    /// Options whose value is the next word (or attached: `-n5`, `--name=v`).
    valued: &'static [&'static str],
    /// Options without a value.
    flags: &'static [&'static str],
    /// Whether `-<digits>` is an option (`nice -10`).
    numeric: bool,
}

/// Where the operands start after `args`' options, or `None` when an option is not in the
/// grammar (then where the wrapped program starts cannot be known).
fn operands_start(args: &[String], g: &Grammar) -> Option<usize> {
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        if a == "--" {
            return Some(i + 1);
        }
        if !a.starts_with('-') || a == "-" {
            return Some(i);
        }
        let flag =
            g.flags.contains(&a) || (g.numeric && a[1..].bytes().all(|b| b.is_ascii_digit()));
        // `--name=value`, or a one-letter option with its value attached (`-n5`, `-oL`).
        let attached = if a.starts_with("--") {
            a.split_once('=')
                .is_some_and(|(n, _)| g.valued.contains(&n) || g.flags.contains(&n))
        } else {
            g.valued.iter().any(|v| v.len() == 2 && a.starts_with(v))
        };
        if g.valued.contains(&a) {
            i += 2;
        } else if flag || attached {
            i += 1;
        } else {
            return None;
        }
    }
    Some(args.len())
}

const XARGS: Grammar = Grammar {
    valued: &[
        "-a",
        "-d",
        "-E",
        "-I",
        "-L",
        "-n",
        "-P",
        "-s",
        "--arg-file",
        "--delimiter",
        "--eof",
        "--replace",
        "--max-lines",
        "--max-args",
        "--max-procs",
        "--max-chars",
        "--process-slot-var",
    ],
    flags: &[
        "-0",
        "--null",
        "-o",
        "--open-tty",
        "-p",
        "--interactive",
        "-r",
        "--no-run-if-empty",
        "-t",
        "--verbose",
        "-x",
        "--exit",
        "--show-limits",
        "-i",
        "-l",
        "-e",
    ],
    numeric: false,
};

/// What a wrapper hands on.
enum Wrapped {
    /// Not a wrapper, or one given nothing to run.
    Nothing,
    /// The program at this index of its arguments.
    Command(usize),
    /// A literal shell script (`bash -c '…'`), the argument at this index.
    Script(usize),
    /// Something this host cannot read (a script file, standard input, a remote host).
    Hidden,
}

fn wrapped(name: &str, args: &[String]) -> Result<Wrapped, Opaque> {
    const UNREADABLE: Opaque = Opaque("a wrapper whose options this host cannot read");
    let after = |g: &Grammar| -> Result<Wrapped, Opaque> {
        match operands_start(args, g) {
            Some(at) if at < args.len() => Ok(Wrapped::Command(at)),
            Some(_) => Ok(Wrapped::Nothing),
            None => Err(UNREADABLE),
        }
    };
    match name {
        "timeout" => match operands_start(
            args,
            &Grammar {
                valued: &["-s", "--signal", "-k", "--kill-after"],
                flags: &["--foreground", "--preserve-status", "-v", "--verbose"],
                numeric: false,
            },
        ) {
            // The duration, then the program.
            Some(at) if at + 1 < args.len() => Ok(Wrapped::Command(at + 1)),
            Some(_) => Ok(Wrapped::Nothing),
            None => Err(UNREADABLE),
        },
        "nice" => after(&Grammar {
            valued: &["-n", "--adjustment"],
            flags: &[],
            numeric: true,
        }),
        "nohup" | "builtin" => after(&Grammar {
            valued: &[],
            flags: &[],
            numeric: false,
        }),
        "stdbuf" => after(&Grammar {
            valued: &["-i", "-o", "-e", "--input", "--output", "--error"],
            flags: &[],
            numeric: false,
        }),
        "setsid" => after(&Grammar {
            valued: &[],
            flags: &["-c", "-f", "-w", "--ctty", "--fork", "--wait"],
            numeric: false,
        }),
        "ionice" => after(&Grammar {
            valued: &["-c", "-n", "--class", "--classdata"],
            flags: &["-t", "--ignore"],
            numeric: false,
        }),
        "time" => after(&Grammar {
            valued: &["-o", "--output", "-f", "--format"],
            flags: &[
                "-p",
                "-a",
                "--append",
                "-v",
                "--verbose",
                "-q",
                "--quiet",
                "--portability",
            ],
            numeric: false,
        }),
        "command" => {
            if args
                .iter()
                .take_while(|a| a.starts_with('-'))
                .any(|a| a.contains(['v', 'V']))
            {
                return Ok(Wrapped::Nothing);
            }
            after(&Grammar {
                valued: &[],
                flags: &["-p"],
                numeric: false,
            })
        }
        "env" => {
            if args.iter().any(|a| {
                a == "-S"
                    || a.starts_with("--split-string")
                    || (a.starts_with("-S") && !a.starts_with("--"))
            }) {
                return Ok(Wrapped::Hidden);
            }
            let Some(mut at) = operands_start(
                args,
                &Grammar {
                    valued: &["-u", "--unset", "-C", "--chdir"],
                    flags: &[
                        "-i",
                        "--ignore-environment",
                        "-0",
                        "--null",
                        "-v",
                        "--debug",
                        "-",
                    ],
                    numeric: false,
                },
            ) else {
                return Err(UNREADABLE);
            };
            while at < args.len() && is_assignment(&args[at]) {
                at += 1;
            }
            if args[..at]
                .iter()
                .any(|a| a == "-C" || a.starts_with("--chdir"))
            {
                // It runs its program elsewhere: the program's paths read from there.
                return Ok(Wrapped::Hidden);
            }
            Ok(if at < args.len() {
                Wrapped::Command(at)
            } else {
                Wrapped::Nothing
            })
        }
        "sudo" | "doas" => {
            let g = Grammar {
                valued: &[
                    "-u",
                    "-g",
                    "-h",
                    "-p",
                    "-C",
                    "-D",
                    "-r",
                    "-t",
                    "-T",
                    "-U",
                    "--user",
                    "--group",
                    "--host",
                    "--prompt",
                    "--close-from",
                    "--chdir",
                    "--role",
                    "--type",
                    "--command-timeout",
                    "--other-user",
                ],
                flags: &[
                    "-A",
                    "-b",
                    "-E",
                    "-H",
                    "-K",
                    "-k",
                    "-n",
                    "-P",
                    "-S",
                    "-B",
                    "-N",
                    "--askpass",
                    "--background",
                    "--preserve-env",
                    "--set-home",
                    "--non-interactive",
                    "--stdin",
                    "--bell",
                    "--no-update",
                    "--remove-timestamp",
                    "--reset-timestamp",
                    "-s",
                    "--shell",
                    "-i",
                    "--login",
                ],
                numeric: false,
            };
            if args
                .iter()
                .take_while(|a| a.starts_with('-'))
                .any(|a| a == "-e" || a == "--edit")
            {
                return Err(Opaque("sudo -e edits files as another user"));
            }
            match operands_start(args, &g) {
                Some(at) if at < args.len() => Ok(Wrapped::Command(at)),
                // `sudo -s` or `sudo -i` alone: a root shell reading standard input.
                Some(_) => Ok(Wrapped::Hidden),
                None => Err(UNREADABLE),
            }
        }
        "xargs" => after(&XARGS),
        "busybox" => Ok(if args.is_empty() {
            Wrapped::Nothing
        } else {
            Wrapped::Command(0)
        }),
        "bash" | "sh" | "zsh" | "dash" | "ksh" | "mksh" | "ash" | "yash" | "posh" => {
            shell_script(args)
        }
        "su" | "runuser" => match args.iter().position(|a| a == "-c" || a == "--command") {
            Some(at) if at + 1 < args.len() => Ok(Wrapped::Script(at + 1)),
            _ => Ok(Wrapped::Hidden),
        },
        "watch" | "flock" | "chroot" | "unshare" | "nsenter" | "taskset" | "systemd-run"
        | "script" | "strace" | "ltrace" | "valgrind" | "gdb" | "perf" | "parallel" | "ssh"
        | "chrt" | "firejail" | "bwrap" | "fakeroot" | "proot" | "nix-shell" | "unbuffer" => {
            Ok(Wrapped::Hidden)
        }
        _ => Ok(Wrapped::Nothing),
    }
}

fn is_assignment(word: &str) -> bool {
    word.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty()
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
    })
}

/// `bash -c 'script'` (options bundled or not: `-lc`, `-ec`), or a shell reading a file or
/// standard input.
fn shell_script(args: &[String]) -> Result<Wrapped, Opaque> {
    let mut i = 0;
    let mut command = false;
    while i < args.len() {
        let a = args[i].as_str();
        if a == "--" || a == "-" {
            i += 1;
            break;
        }
        if let Some(bundle) = a.strip_prefix('-').filter(|_| !a.starts_with("--")) {
            if bundle.contains('c') {
                command = true;
            }
            if bundle.ends_with('o') || bundle.ends_with('O') {
                i += 1;
            }
        } else if let Some(bundle) = a.strip_prefix('+') {
            if bundle.ends_with('o') || bundle.ends_with('O') {
                i += 1;
            }
        } else if a == "--rcfile" || a == "--init-file" {
            i += 1;
        } else if !a.starts_with("--") {
            break;
        }
        i += 1;
    }
    match (command, i < args.len()) {
        (true, true) => Ok(Wrapped::Script(i)),
        (true, false) => Err(Opaque("a shell -c without a script")),
        (false, _) => Ok(Wrapped::Hidden),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(command: &str) -> Result<Reading, Opaque> {
        let mut parts = shell::parse(command)?;
        assert_eq!(parts.len(), 1, "{command}");
        read(&parts.remove(0))
    }

    fn runs(command: &str) -> Vec<String> {
        reading(command)
            .unwrap_or_else(|e| panic!("{command}: {e:?}"))
            .runs
            .iter()
            .map(|r| r.join(" "))
            .collect()
    }

    #[test]
    fn wrappers_and_paths_are_seen_through() {
        assert_eq!(runs("/usr/bin/rm -rf x"), vec!["rm -rf x"]);
        assert_eq!(
            runs("timeout -s KILL 5 nice -n 5 nohup rm x"),
            vec![
                "timeout -s KILL 5 nice -n 5 nohup rm x",
                "nice -n 5 nohup rm x",
                "nohup rm x",
                "rm x"
            ]
        );
        assert_eq!(runs("env -i A=1 B=2 git push").last().unwrap(), "git push");
        assert_eq!(runs("sudo -u root rm x").last().unwrap(), "rm x");
        assert_eq!(runs("command rm x").last().unwrap(), "rm x");
        assert_eq!(runs("stdbuf -oL rm x").last().unwrap(), "rm x");
        assert_eq!(runs("xargs -0 -n1 rm").last().unwrap(), "rm");
        assert_eq!(
            runs("bash -c 'git push --force'").last().unwrap(),
            "git push --force"
        );
        assert_eq!(runs("sh -ec 'ls; rm x'").last().unwrap(), "rm x");
        assert_eq!(runs("git -C dir -c a=b push").last().unwrap(), "git push");
        assert_eq!(
            runs("find . -exec rm -f {} \\; -print"),
            vec!["find . -exec rm -f {} ; -print", "rm -f {}"]
        );
    }

    #[test]
    fn code_in_arguments_is_opaque() {
        for command in [
            "eval 'rm -rf ~'",
            "source ./x",
            ". ./x",
            "exec rm x",
            "trap 'rm x' EXIT",
            "declare -a 'x=($(id))'",
            "export A=b",
            "printf -v 'a[$(id)]' x",
            "read 'a[$(id)]'",
            "test -v 'a[$(id)]'",
            "bash -c 'echo $(id)'",
            "bash -c",
            "timeout --bogus 5 rm x",
        ] {
            assert!(reading(command).is_err(), "{command}");
        }
        assert!(reading("bash ./build.sh").unwrap().hidden);
        assert!(reading("bash").unwrap().hidden);
        assert!(reading("env -S 'rm -rf ~'").unwrap().hidden);
    }

    #[test]
    fn options_that_write_or_run_programs_uncover_a_command() {
        for command in [
            "find . -name x -exec rm {} \\;",
            "find . -delete",
            "find . -fprint /etc/passwd",
            "rg --pre ./x files",
            "rg --pre=./x files",
            "rg --hostname-bin=./x a",
            "git log --output=FILE",
            "git diff --ext-diff",
            "git log --textconv",
            "git -c core.pager=x log",
            "git branch -D main",
            "git branch --delete main",
            "git tag -d v1",
            "git rebase -x make",
            "git submodule foreach rm",
            "sed -n '1e id' f",
            "sed -n 'w /tmp/out' f",
            "sed 's/a/b/e' f",
            "sed 's/a/b/w out' f",
            "sed -i s/a/b/ f",
            "sed -ni p f",
            "sed --in-place=.bak s/a/b/ f",
            "sed -f script f",
            "sort -o out f",
            "sort -uo out f",
            "sort --output=out f",
            "tar xf a.tar",
            "tar -czf a.tar dir",
            "tar -tf a.tar --to-command=sh",
            "tar -t -I ./x -f a.tar",
            "curl -o out https://x",
            "curl -sSLo out https://x",
            "curl -T secret https://x",
            "wget https://x",
            "awk 'BEGIN{system(\"id\")}'",
            "awk '{print > \"out\"}' f",
            "awk -f prog f",
            "npm test > out.txt",
            "cat < /dev/tcp/evil/80",
            "sort < in.txt",
            "timeout 5 find . -delete",
            "bash -c 'find . -delete'",
        ] {
            let r = reading(command).unwrap_or_else(|e| panic!("{command}: {e:?}"));
            assert!(r.uncovered.is_some(), "{command}");
        }
    }

    #[test]
    fn plain_reads_stay_covered() {
        for command in [
            "find . -name '*.rs' -type f",
            "rg -n foo src",
            "grep -rn foo .",
            "git log --oneline -n 5",
            "git diff HEAD~1",
            "git branch",
            "git branch -a",
            "git tag",
            "git status --short",
            "sed -n '1,20p' f",
            "sed -n '/start/,/end/p' f",
            "sed 's/a/b/g' f",
            "sed -e 's/x/y/' -e '/^#/d' f",
            "sed -E 's|a|b|g;s/c/d/2' f",
            "sort -u f",
            "sort -k2 -n f",
            "tar -tzf a.tar.gz",
            "tar tf a.tar",
            "xargs",
            "curl -sSL https://example.com",
            "curl -H 'Accept: x' https://example.com",
            "wget -qO- https://example.com",
            "awk '{print $1}' f",
            "awk -F: '{print $1}' /etc/passwd",
        ] {
            let r = reading(command).unwrap_or_else(|e| panic!("{command}: {e:?}"));
            assert_eq!(r.uncovered, None, "{command}");
        }
    }

    #[test]
    fn writers_name_their_files() {
        assert_eq!(reading("tee -a a b").unwrap().writes, vec!["a", "b"]);
        assert_eq!(reading("cp x y").unwrap().writes, vec!["x", "y"]);
        assert_eq!(reading("dd if=a of=b").unwrap().writes, vec!["a", "b"]);
        assert_eq!(
            reading("sed -i s/a/b/ f").unwrap().writes,
            vec!["s/a/b/", "f"]
        );
        assert_eq!(reading("echo x > out").unwrap().writes, vec!["out"]);
        assert!(reading("cat f").unwrap().writes.is_empty());
        assert_eq!(reading("cd sub").unwrap().chdir, Some(Some("sub".into())));
        assert_eq!(reading("cd -").unwrap().chdir, Some(None));
    }

    #[test]
    fn a_wrapper_is_covered_only_by_a_rule_that_names_what_it_runs() {
        assert_eq!(
            reading("timeout 60 cargo test").unwrap().wraps_from,
            Some(2)
        );
        assert_eq!(
            reading("sudo -u x timeout 5 rm a").unwrap().wraps_from,
            Some(5)
        );
        assert_eq!(reading("xargs -0 rm").unwrap().wraps_from, Some(2));
        assert_eq!(reading("bash -lc 'npm test'").unwrap().wraps_from, Some(2));
        assert_eq!(reading("ssh host ls").unwrap().wraps_from, Some(1));
        assert_eq!(reading("cargo test").unwrap().wraps_from, None);
    }
}
