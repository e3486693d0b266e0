//! What changes the program that runs, beyond what a command's words show: environment that
//! names a program, a configuration or a library; interpreters given code inline or on standard
//! input; programs that evaluate a command they are given. Reject rules cannot see through any
//! of them, so a command holding one is opaque: no rule naming words covers it, reject rules
//! look for their words in its text, and a rule for the whole tool does not allow it while any
//! reject rule exists (it goes on down the waterfall).
//!
//! Environment is judged by an allow-list ([`INERT_ENVIRONMENT`]): a name not on it may change
//! what runs (`PATH`, `LD_PRELOAD`, `BASH_ENV`, `GIT_SSH_COMMAND`, `NODE_OPTIONS`,
//! `PYTHONSTARTUP`, `PERL5OPT`, `RUSTC_WRAPPER`, `TAR_OPTIONS`, `HOME` with the configuration
//! files under it, …), since a list of the dangerous ones is never complete.

/// Environment variables that change no program, configuration or library: names people put in
/// front of a command to change how it reports or which tests it runs. Sources: the POSIX locale
/// and terminal variables, Rust's and Node's conventions, and what the benign corpus uses.
pub const INERT_ENVIRONMENT: &[&str] = &[
    "CI",
    "NODE_ENV",
    "RUST_LOG",
    "RUST_BACKTRACE",
    "RUST_LIB_BACKTRACE",
    "RUST_TEST_THREADS",
    "RUST_TEST_NOCAPTURE",
    "CARGO_TERM_COLOR",
    "CARGO_TERM_VERBOSE",
    "CARGO_INCREMENTAL",
    "LANG",
    "LANGUAGE",
    "LC_ALL",
    "LC_CTYPE",
    "LC_COLLATE",
    "LC_MESSAGES",
    "LC_NUMERIC",
    "LC_TIME",
    "TZ",
    "TERM",
    "NO_COLOR",
    "FORCE_COLOR",
    "CLICOLOR",
    "CLICOLOR_FORCE",
    "COLUMNS",
    "LINES",
    "DEBUG",
    "VERBOSE",
    "PYTHONUNBUFFERED",
    "PYTHONDONTWRITEBYTECODE",
    "PYTHONHASHSEED",
    "PYTHONIOENCODING",
    "PYTHONWARNINGS",
    "PYTEST_ADDOPTS_DISABLED",
    "GIT_TERMINAL_PROMPT",
];

/// Why an assignment (`NAME=value`) in front of a program may change what it runs.
pub(super) fn assignment(word: &str) -> Option<&'static str> {
    let name = word.split_once('=').map_or(word, |(n, _)| n);
    let name = name.strip_suffix('+').unwrap_or(name);
    (!INERT_ENVIRONMENT.contains(&name)).then_some(
        "an environment variable that may name a program, a configuration or a library (only a few are known inert)",
    )
}

/// Interpreters: given code inline (`-c`, `-e`) or on standard input, what they run is not in
/// the command's words.
const INTERPRETERS: &[&str] = &[
    "python",
    "python2",
    "python3",
    "pypy",
    "pypy3",
    "perl",
    "ruby",
    "node",
    "nodejs",
    "deno",
    "bun",
    "php",
    "lua",
    "luajit",
    "Rscript",
    "R",
    "tclsh",
    "wish",
    "expect",
    "pwsh",
    "osascript",
    "jshell",
    "irb",
    "ghci",
    "julia",
    "guile",
    "racket",
    "sbcl",
    "clisp",
    "gdb",
];

/// Options with which an interpreter takes its program as the next word or attached.
const INLINE: &[&str] = &[
    "-c",
    "-e",
    "-E",
    "-r",
    "-p",
    "--eval",
    "--print",
    "--command",
    "--expression",
    "--execute",
    "-x",
    "eval",
];

/// The interpreter a program name is (`python3.12` is `python3`).
fn interpreter(name: &str) -> Option<&str> {
    let trimmed = name.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
    INTERPRETERS
        .iter()
        .find(|i| **i == name || **i == trimmed)
        .copied()
}

/// Why `name args…` runs something its words do not show.
pub(super) fn program(name: &str, args: &[String]) -> Option<&'static str> {
    if interpreter(name).is_some() {
        return interpreted(args);
    }
    match name {
        "make" | "gmake" => {
            let evaluates = args
                .iter()
                .take_while(|a| *a != "--")
                .enumerate()
                .any(|(i, a)| {
                    a.starts_with("--eval")
                        || a.starts_with("-E")
                        || (matches!(a.as_str(), "-f" | "--file" | "--makefile")
                            && args.get(i + 1).is_some_and(|f| is_stdin(f)))
                        || a.strip_prefix("-f").is_some_and(is_stdin)
                        || a.strip_prefix("--file=").is_some_and(is_stdin)
                        || a.strip_prefix("--makefile=").is_some_and(is_stdin)
                });
            evaluates.then_some("make --eval and -f - run make code this host cannot read")
        }
        // Their options name a program they run (`-o ProxyCommand=…`, `-S prog`, `-e 'ssh …'`).
        "scp" | "sftp" | "rsync" | "sshfs"
            if args.iter().any(|a| {
                a.starts_with("-o")
                    || a.starts_with("-S")
                    || a.starts_with("-e")
                    || a.starts_with("-F")
                    || a.starts_with("--rsh")
                    || a.starts_with("--rsync-path")
            }) =>
        {
            Some("an option that names a program it runs (ssh's ProxyCommand, rsync -e)")
        }
        "env" => args.iter().find_map(|a| {
            a.contains('=')
                .then(|| a.split_once('=').map(|(n, _)| n))
                .flatten()
                .filter(|n| !n.is_empty() && !n.starts_with('-'))
                .and_then(|_| assignment(a))
        }),
        _ => None,
    }
}

/// A file name that is standard input.
fn is_stdin(name: &str) -> bool {
    matches!(
        name,
        "-" | "/dev/stdin" | "/dev/fd/0" | "/proc/self/fd/0" | "/dev/tty"
    )
}

/// Whether an interpreter's arguments give it code inline or on standard input.
fn interpreted(args: &[String]) -> Option<&'static str> {
    const INLINE_CODE: &str = "an interpreter given code inline (-c, -e) or on standard input";
    let only_asks = |a: &String| {
        matches!(
            a.as_str(),
            "--version" | "-V" | "-v" | "--help" | "-h" | "-VV"
        )
    };
    if !args.is_empty() && args.iter().all(only_asks) {
        return None;
    }
    let mut skip_value = false;
    for a in args {
        if std::mem::take(&mut skip_value) {
            continue;
        }
        if a == "--" {
            break;
        }
        if a == "-m" {
            // A module from the path, like a script file: its words are all a rule can see.
            return None;
        }
        if matches!(a.as_str(), "-W" | "-X" | "-I" | "--check-hash-based-pycs") {
            skip_value = true;
            continue;
        }
        if INLINE.contains(&a.as_str())
            || INLINE
                .iter()
                .any(|o| o.starts_with("--") && a.starts_with(&format!("{o}=")))
        {
            return Some(INLINE_CODE);
        }
        if let Some(bundle) = a
            .strip_prefix('-')
            .filter(|b| !b.starts_with('-') && !b.is_empty())
        {
            // `-lne`, `-pie`, `-Ic`: a bundle holding the inline-code letter.
            if bundle.contains(['c', 'e', 'E', 'r']) {
                return Some(INLINE_CODE);
            }
            continue;
        }
        if a.starts_with("--") {
            continue;
        }
        // The first operand is the script file (`-` and `/dev/stdin` are standard input).
        return is_stdin(a).then_some(INLINE_CODE);
    }
    Some(INLINE_CODE)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn interpreters_given_code_inline_or_on_stdin_change_the_program() {
        for (name, args) in [
            ("python3", "-c print(1)"),
            ("python3.12", "-Ic x"),
            ("python3", ""),
            ("python3", "-"),
            ("perl", "-e print"),
            ("perl", "-pi -e s/a/b/ f"),
            ("perl", "-lne print"),
            ("node", "-e x"),
            ("node", "--eval=x"),
            ("ruby", "-e x"),
            ("php", "-r x"),
            ("make", "--eval=x:;id"),
            ("make", "-f -"),
            ("env", "GIT_SSH_COMMAND=x git fetch"),
        ] {
            assert!(program(name, &words(args)).is_some(), "{name} {args}");
        }
        for (name, args) in [
            ("python3", "script.py"),
            ("python3", "-m pytest"),
            ("python3", "--version"),
            ("node", "server.js --port 3"),
            ("make", "test"),
            ("env", "CI=1 npm test"),
            ("cargo", "test"),
        ] {
            assert_eq!(program(name, &words(args)), None, "{name} {args}");
        }
        assert!(assignment("LD_PRELOAD=./x.so").is_some());
        assert!(assignment("PATH=.").is_some());
        assert!(assignment("BASH_ENV=./x").is_some());
        assert_eq!(assignment("CI=true"), None);
        assert_eq!(assignment("RUST_LOG=debug"), None);
    }
}
