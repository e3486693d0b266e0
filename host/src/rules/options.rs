//! Options that make a command people allow because it reads write files or run other programs:
//! `find -exec`, `rg --pre`, `git --output`, `sed`'s `e` and `w`, `sort -o`, `tar` beyond
//! listing, `curl -o`, `awk`'s `system`. [`uncovered`] says why a program's arguments put it
//! beyond a rule that names its words; the README's table of them is this file, each entry
//! tested.

/// Why options of a program people allow because it only reads make it write or run something.
pub(super) fn uncovered(name: &str, args: &[String]) -> Option<&'static str> {
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
pub(super) fn git_subcommand(args: &[String]) -> Option<usize> {
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

pub(super) fn sed_in_place(args: &[String]) -> bool {
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

#[cfg(test)]
mod tests {
    use super::super::programs::{Reading, read};
    use super::super::shell::{self, Opaque};

    fn reading(command: &str) -> Result<Reading, Opaque> {
        let mut parts = shell::parse(command)?;
        assert_eq!(parts.len(), 1, "{command}");
        read(&parts.remove(0))
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
}
