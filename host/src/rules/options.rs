//! Options that make a command people allow because it reads write files or run other programs.
//!
//! Every program with a table ([`super::option_tables`]) is read by its real option grammar
//! ([`super::grammar`]): a rule written because the program reads covers a command only when
//! each option in it is one the table knows and marks safe; an unknown option, an ambiguous or
//! unresolvable abbreviation, or a value where none is taken makes the command uncovered. Then
//! what the options cannot show: sed's script (its `e`, `w`, `r` commands), awk's program
//! ([`super::awk`]), tar's mode and a remote archive, a second operand of `uniq` (its output),
//! curl's and Wget's destinations, find's expression. A program without a table keeps its words'
//! meaning: the person who wrote the rule chose it.

use super::grammar::{self, Parsed};
use super::option_tables;

/// The reason for an option a program's table does not hold.
pub const UNKNOWN_OPTION: &str =
    "an option this host does not know for this program (or an abbreviation it cannot resolve)";

/// Why options of a program people allow because it only reads make it write or run something.
pub(super) fn uncovered(name: &str, args: &[String]) -> Option<&'static str> {
    match name {
        "find" => return find_uncovered(args),
        "git" => return super::git::uncovered(args),
        _ => {}
    }
    let table = option_tables::table(name)?;
    let expanded;
    let args = if name == "tar" {
        expanded = tar_old_style(args);
        &expanded
    } else {
        args
    };
    let parsed = match grammar::read(table, args) {
        Ok(parsed) => parsed,
        Err(_) => return Some(UNKNOWN_OPTION),
    };
    if let Some(why) = parsed.first_unsafe() {
        return Some(why);
    }
    match name {
        "sed" => sed_uncovered(&parsed),
        "awk" | "gawk" | "mawk" | "nawk" => awk_uncovered(&parsed),
        "tar" => tar_uncovered(&parsed),
        "uniq" => (parsed.operands.len() > 1).then_some("uniq writes its second operand"),
        "curl" => curl_uncovered(&parsed),
        "wget" => wget_uncovered(&parsed),
        _ => None,
    }
}

/// Whether `sed` edits its files in place.
pub(super) fn sed_in_place(args: &[String]) -> bool {
    let Some(table) = option_tables::table("sed") else {
        return true;
    };
    // An argument list sed's table cannot read is taken to edit in place: it may.
    grammar::read(table, args).map_or(true, |p| p.has("in-place"))
}

fn sed_uncovered(parsed: &Parsed<'_, '_>) -> Option<&'static str> {
    let mut scripts: Vec<&str> = parsed.values("expression").collect();
    if scripts.is_empty() {
        scripts.extend(parsed.operands.first());
    }
    scripts
        .iter()
        .any(|s| !sed_script_is_safe(s))
        .then_some("a sed script with e, w, W or r commands (or one this host cannot read) runs programs or writes files")
}

fn awk_uncovered(parsed: &Parsed<'_, '_>) -> Option<&'static str> {
    const SAFE_W: &[&str] = &["version", "v", "interactive", "i", "usage", "posix_space"];
    let safe_w = |w: &str| {
        SAFE_W.contains(&w)
            || ["sprintf=", "random="].iter().any(|p| {
                w.strip_prefix(p)
                    .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
            })
    };
    // mawk reads several `-W` options from one value, split at commas.
    if parsed.values("W").any(|w| !w.split(',').all(safe_w)) {
        return Some("a mawk -W option that runs a program file (or one this host does not know)");
    }
    let mut programs: Vec<&str> = parsed.values("source").collect();
    if programs.is_empty() {
        programs.extend(parsed.operands.first());
    }
    programs.iter().find_map(|p| super::awk::unsafe_program(p))
}

/// GNU tar's old style: a first argument without `-` is a bundle of letters whose values follow
/// in order (`tar tvfC a.tar dir`), read here as the options they stand for.
fn tar_old_style(args: &[String]) -> Vec<String> {
    const VALUED: &str = "fbCTXIFgKLNVH";
    let Some(first) = args
        .first()
        .filter(|a| !a.starts_with('-') && !a.is_empty())
    else {
        return args.to_vec();
    };
    let mut out = Vec::with_capacity(args.len() + 2);
    let mut values = args[1..].iter();
    for letter in first.chars() {
        out.push(format!("-{letter}"));
        if VALUED.contains(letter)
            && let Some(v) = values.next()
        {
            out.push(v.clone());
        }
    }
    out.extend(values.cloned());
    out
}

fn tar_uncovered(parsed: &Parsed<'_, '_>) -> Option<&'static str> {
    if !(parsed.has("list") || parsed.has("diff") || parsed.has("test-label")) {
        return Some(
            "tar only reads when it lists (-t): it extracts, creates and runs programs otherwise",
        );
    }
    // `host:file` is a remote archive, reached by running a remote shell.
    let remote = parsed
        .values("file")
        .any(|f| f.find(':').is_some_and(|colon| !f[..colon].contains('/')));
    (remote && !parsed.has("force-local"))
        .then_some("tar -f host:file runs a remote shell to reach the archive")
}

/// Where only standard output (or nothing) may be named.
fn to_stdout(value: &str) -> bool {
    matches!(value, "-" | "/dev/null" | "/dev/stdout")
}

fn curl_uncovered(parsed: &Parsed<'_, '_>) -> Option<&'static str> {
    for name in ["output", "dump-header", "trace", "stderr"] {
        if parsed.values(name).any(|v| !to_stdout(v)) {
            return Some("curl -o, -D, --trace and --stderr write the files they name");
        }
    }
    if parsed.values("write-out").any(|w| w.contains("%output{")) {
        return Some("curl -w %output{} writes a file");
    }
    None
}

fn wget_uncovered(parsed: &Parsed<'_, '_>) -> Option<&'static str> {
    // `--spider` fetches nothing, but Wget still opens the `-O` file it is given.
    let documents_to_stdout = parsed.values("output-document").all(|v| v == "-");
    let to_stdout = documents_to_stdout
        && (parsed.has("spider") || parsed.values("output-document").count() > 0);
    (!to_stdout).then_some("wget writes the files it fetches (only -O - and --spider do not)")
}

/// find's expression: the primaries that only test and print, with how many words each takes.
const FIND_SAFE: &[(&str, usize)] = &[
    ("-name", 1),
    ("-iname", 1),
    ("-path", 1),
    ("-ipath", 1),
    ("-wholename", 1),
    ("-iwholename", 1),
    ("-regex", 1),
    ("-iregex", 1),
    ("-regextype", 1),
    ("-type", 1),
    ("-xtype", 1),
    ("-size", 1),
    ("-mtime", 1),
    ("-mmin", 1),
    ("-atime", 1),
    ("-amin", 1),
    ("-ctime", 1),
    ("-cmin", 1),
    ("-newer", 1),
    ("-anewer", 1),
    ("-cnewer", 1),
    ("-used", 1),
    ("-user", 1),
    ("-group", 1),
    ("-uid", 1),
    ("-gid", 1),
    ("-perm", 1),
    ("-links", 1),
    ("-inum", 1),
    ("-samefile", 1),
    ("-lname", 1),
    ("-ilname", 1),
    ("-fstype", 1),
    ("-maxdepth", 1),
    ("-mindepth", 1),
    ("-printf", 1),
    ("-empty", 0),
    ("-nouser", 0),
    ("-nogroup", 0),
    ("-readable", 0),
    ("-writable", 0),
    ("-executable", 0),
    ("-depth", 0),
    ("-d", 0),
    ("-mount", 0),
    ("-xdev", 0),
    ("-follow", 0),
    ("-noleaf", 0),
    ("-daystart", 0),
    ("-ignore_readdir_race", 0),
    ("-noignore_readdir_race", 0),
    ("-print", 0),
    ("-print0", 0),
    ("-ls", 0),
    ("-prune", 0),
    ("-quit", 0),
    ("-true", 0),
    ("-false", 0),
    ("-not", 0),
    ("-a", 0),
    ("-and", 0),
    ("-o", 0),
    ("-or", 0),
    ("!", 0),
    ("(", 0),
    (")", 0),
    (",", 0),
];

/// find's primaries that run programs or write files.
const FIND_UNSAFE: &[&str] = &[
    "-exec", "-execdir", "-ok", "-okdir", "-delete", "-fls", "-fprint", "-fprint0", "-fprintf",
];

fn find_uncovered(args: &[String]) -> Option<&'static str> {
    const WHY: &str = "find with -exec, -ok, -delete or -fprint runs programs or writes files";
    let mut i = 0;
    // Its own options, then the starting points: everything before the expression.
    while i < args.len() {
        let a = args[i].as_str();
        match a {
            "-H" | "-L" | "-P" => i += 1,
            "-D" => i += 2,
            _ if a.starts_with("-O") && a.len() > 2 => i += 1,
            _ if a.starts_with('-') || a == "!" || a == "(" => break,
            _ => i += 1,
        }
    }
    while i < args.len() {
        let a = args[i].as_str();
        if FIND_UNSAFE.contains(&a) {
            return Some(WHY);
        }
        // `-newerXY` compares times (`-newermt 2024-01-01`).
        let takes = if a.starts_with("-newer") && a.len() == 8 {
            Some(1)
        } else {
            FIND_SAFE.iter().find(|(p, _)| *p == a).map(|(_, n)| *n)
        };
        let Some(takes) = takes else {
            return Some("a find primary this host does not know");
        };
        i += 1 + takes;
    }
    None
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
    // Reads a delimited part starting after the delimiter; returns false if unterminated. In a
    // regular expression (`regex`), GNU sed reads a bracket expression whole: `[/]` holds a
    // `/` that does not end it.
    let delimited_as = |i: &mut usize, delim: char, regex: bool| -> bool {
        while *i < s.len() {
            match s[*i] {
                '\\' => *i += 2,
                '[' if regex => {
                    *i += 1;
                    if s.get(*i) == Some(&'^') {
                        *i += 1;
                    }
                    if s.get(*i) == Some(&']') {
                        *i += 1;
                    }
                    loop {
                        match s.get(*i) {
                            None | Some('\n') => return false,
                            Some(']') => {
                                *i += 1;
                                break;
                            }
                            // `[:alpha:]`, `[=a=]`, `[.-.]` inside hold a `]` of their own.
                            Some('[') if matches!(s.get(*i + 1), Some(':' | '=' | '.')) => {
                                let kind = s[*i + 1];
                                *i += 2;
                                while *i + 1 < s.len() && !(s[*i] == kind && s[*i + 1] == ']') {
                                    *i += 1;
                                }
                                *i += 2;
                            }
                            Some(_) => *i += 1,
                        }
                    }
                }
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
    let delimited = |i: &mut usize, delim: char| delimited_as(i, delim, true);
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
                // GNU sed ends a label at a blank or `;` (`:a e cmd` is the label `a`, then
                // `e cmd`): after it only a blank, `;`, a newline or the end may follow, or a
                // `}` straight after a branch without one.
                while i < s.len() && s[i] == ' ' {
                    i += 1;
                }
                let start = i;
                while i < s.len() && !matches!(s[i], ' ' | '\t' | ';' | '\n' | '}') {
                    i += 1;
                }
                if command == ':' && i == start {
                    return false;
                }
                while i < s.len() && (s[i] == ' ' || s[i] == '\t') {
                    i += 1;
                }
                match s.get(i) {
                    None | Some(';' | '\n') => {}
                    Some('}') if i == start => {}
                    Some(_) => return false,
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
                let pattern_is_regex = command == 's';
                if !delimited_as(&mut i, delim, pattern_is_regex)
                    || !delimited_as(&mut i, delim, false)
                {
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
            // a, i and c print the rest of their line (a trailing backslash joins the next).
            'a' | 'i' | 'c' => {
                while i < s.len() && s[i] != '\n' {
                    i += if s[i] == '\\' { 2 } else { 1 };
                }
            }
            // e runs a command, w/W write files, r/R read them: none is a plain read.
            _ => return false,
        }
    }
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
