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
//! The options that uncover a command are in `options.rs`, where the wrappers start what they run
//! in `wrappers.rs`.

use super::options::uncovered;
use super::shell::{self, Opaque, Redirect, Simple};
use super::wrappers::{Wrapped, wrapped};
use super::{changers, git, writes};

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
    /// Directories whose whole tree it may remove, replace or fill (`rm -r`, `mv`, `cp -r src
    /// dir`, `tar -x -C dir`): removing or replacing a directory takes what is in it along.
    pub writes_below: Vec<String>,
    /// Directories it puts files into (`cp x dir/`, `cp -t dir x`).
    pub writes_into: Vec<String>,
    /// Words a program not known to only read may write, remove or fill as it likes.
    pub writes_near: Vec<String>,
    /// It writes files it is given at run time (`xargs rm`): which, no text can tell.
    pub writes_unknown: bool,
    /// Its own paths are read from a directory this host does not follow (`env -C dir`,
    /// `git -C dir`, `sudo -D dir`).
    pub elsewhere: bool,
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
    for assignment in &simple.assignments {
        if let Some(why) = changers::assignment(assignment) {
            reading.hidden = true;
            reading.uncovered.get_or_insert(why);
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
    if let Some(why) = changers::program(name, args) {
        reading.hidden = true;
        reading.uncovered.get_or_insert(why);
    }
    if name == "git" {
        let line = git::read(args);
        if line.changes_program.is_some() {
            reading.hidden = true;
        }
        // `git -C dir` reads its paths from there.
        reading.elsewhere |= args[..line.subcommand.unwrap_or(args.len())]
            .iter()
            .any(|a| a == "-C" || a.starts_with("--work-tree") || a.starts_with("--git-dir"));
        if let Some(at) = line.subcommand.filter(|at| *at > 0) {
            // `git -C dir -c x=y push` is `git push` to a reject rule.
            let mut plain = vec!["git".to_owned()];
            plain.extend_from_slice(&args[at..]);
            reading.runs.push(plain);
        }
    }
    let options_uncover = uncovered(name, args);
    if let Some(why) = options_uncover {
        // An option that may run a program (`rg --pre rm`, `tar -I`, sed's `e`, awk's
        // `system`, or an option this host does not know) hides that program from reject
        // rules too.
        reading.hidden = true;
        reading.uncovered.get_or_insert(why);
    }
    for word in args {
        let value = word.split_once('=').map_or(word.as_str(), |(_, v)| v);
        reading.operands.push(value.to_owned());
    }
    let wraps = wrapped(name, args)?;
    if matches!(wraps, Wrapped::Nothing) {
        let w = writes::of(name, args, options_uncover.is_none());
        reading.writes.extend(w.files);
        reading.writes_below.extend(w.below);
        reading.writes_into.extend(w.into);
        reading.writes_near.extend(w.near);
        reading.writes_unknown |= w.unknown;
    } else if matches!(wraps, Wrapped::Hidden) {
        // What it runs is not read: whatever it is given, it may write.
        reading.writes_near.extend(writes::all_words(args).near);
    }
    for inner in executed_by(name, args) {
        // What `find -exec` and `fd -x` run, for reject rules (they are uncovered anyway).
        let mut inner_reading = Reading::default();
        program(inner, &mut inner_reading, depth + 1, 0)?;
        reading.runs.extend(inner_reading.runs);
        reading.hidden |= inner_reading.hidden;
        if !inner_reading.writes.is_empty() || !inner_reading.writes_below.is_empty() {
            // It writes the files find finds: anything below where find starts.
            reading.writes_below.extend(find_starts(args));
        }
    }
    if name == "find" && args.iter().any(|a| a == "-delete") {
        reading.writes_below.extend(find_starts(args));
    }
    match name {
        "cd" | "pushd" => reading.chdir = Some(new_directory(name, args)),
        "popd" => reading.chdir = Some(None),
        _ => {}
    }
    match wraps {
        Wrapped::Nothing => Ok(()),
        Wrapped::Command(at) => {
            reading.wraps_from = Some(offset + 1 + at);
            if name == "xargs" {
                let inner = base_name(&args[at]);
                if !writes::reads_only(inner, &args[at + 1..]) {
                    // Its program may write the files named on standard input: any at all.
                    reading.writes_unknown = true;
                }
                if writes::options_matter(inner) {
                    // Standard input may hold options as well as files (`-i`, `--output=F`).
                    reading.writes_unknown = true;
                    reading.hidden = true;
                    reading.uncovered.get_or_insert(
                        "xargs gives its program arguments from standard input, options included",
                    );
                }
            }
            program(&args[at..], reading, depth + 1, offset + 1 + at)
        }
        Wrapped::Elsewhere(at) => {
            reading.wraps_from = Some(offset + 1 + at);
            reading.elsewhere = true;
            program(&args[at..], reading, depth + 1, offset + 1 + at)
        }
        Wrapped::Script(at) => {
            reading.wraps_from = Some(offset + 1 + at);
            for simple in shell::parse(&args[at])? {
                let inner = read(&simple)?;
                reading.runs.extend(inner.runs);
                reading.writes.extend(inner.writes);
                reading.writes_below.extend(inner.writes_below);
                reading.writes_into.extend(inner.writes_into);
                reading.writes_near.extend(inner.writes_near);
                reading.operands.extend(inner.operands);
                reading.hidden |= inner.hidden;
                reading.writes_unknown |= inner.writes_unknown;
                // A `cd` inside the script moves its own paths: only their text can tell.
                reading.hidden |= inner.chdir.is_some();
                reading.elsewhere |= inner.chdir.is_some() || inner.elsewhere;
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
        "hash" if args.iter().any(|a| a.starts_with('-') && a.contains('p')) => {
            "hash -p makes a name run another program"
        }
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

/// Where `find` starts: the words before its expression.
fn find_starts(args: &[String]) -> Vec<String> {
    let starts: Vec<String> = args
        .iter()
        .filter(|a| !matches!(a.as_str(), "-H" | "-L" | "-P"))
        .take_while(|a| !a.starts_with('-') && *a != "!" && *a != "(")
        .cloned()
        .collect();
    if starts.is_empty() {
        vec![".".to_owned()]
    } else {
        starts
    }
}

/// Where `cd` or `pushd` moves to, when its words tell (`cd -- dir`, `cd -P dir`); `None` for
/// `cd -`, `pushd +1` and anything else that depends on the shell's state.
fn new_directory(name: &str, args: &[String]) -> Option<String> {
    let mut rest = args;
    while let Some(first) = rest.first() {
        match first.as_str() {
            "--" => {
                rest = &rest[1..];
                break;
            }
            "-P" | "-L" | "-e" | "-@" | "-n" if name == "cd" || first == "-n" => rest = &rest[1..],
            _ => break,
        }
    }
    match rest {
        [] if name == "cd" => Some("~".to_owned()),
        [dir] if dir != "-" && !dir.starts_with(['+', '-']) => Some(dir.clone()),
        _ => None,
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
    fn writers_name_their_files() {
        assert_eq!(reading("tee -a a b").unwrap().writes, vec!["a", "b"]);
        assert_eq!(reading("cp x y").unwrap().writes, vec!["x", "y", "y/x"]);
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
