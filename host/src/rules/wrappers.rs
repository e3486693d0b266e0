//! Programs that run other programs (`timeout`, `env`, `sudo`, `xargs`, `bash -c`, `ssh`…): where,
//! after their own options, the program they run starts, or that it cannot be known.

use super::shell::Opaque;

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
        // A bundle of one-letter flags (`-0r`).
        let bundle = !a.starts_with("--")
            && a.len() > 2
            && a[1..]
                .chars()
                .all(|c| g.flags.iter().any(|f| f.len() == 2 && f.ends_with(c)));
        let flag = bundle
            || g.flags.contains(&a)
            || (g.numeric && a[1..].bytes().all(|b| b.is_ascii_digit()));
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
        // A value only when attached (`--eof=x`): bare, the next word is the program.
        "--eof",
        "--replace",
        "--max-lines",
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
pub(super) enum Wrapped {
    /// Not a wrapper, or one given nothing to run.
    Nothing,
    /// The program at this index of its arguments.
    Command(usize),
    /// The program at this index, run in another directory (`env -C dir`).
    Elsewhere(usize),
    /// A literal shell script (`bash -c '…'`), the argument at this index.
    Script(usize),
    /// Something this host cannot read (a script file, standard input, a remote host).
    Hidden,
}

pub(super) fn wrapped(name: &str, args: &[String]) -> Result<Wrapped, Opaque> {
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
            let elsewhere = args[..at]
                .iter()
                .any(|a| a == "-C" || a.starts_with("--chdir"));
            Ok(match (at < args.len(), elsewhere) {
                // It runs its program elsewhere: the program's paths read from there.
                (true, true) => Wrapped::Elsewhere(at),
                (true, false) => Wrapped::Command(at),
                (false, _) => Wrapped::Nothing,
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
        "bash" | "sh" | "zsh" | "dash" | "ksh" | "mksh" | "ash" | "yash" | "posh" | "rbash" => {
            shell_script(args)
        }
        "su" | "runuser" => match args.iter().position(|a| a == "-c" || a == "--command") {
            Some(at) if at + 1 < args.len() => Ok(Wrapped::Script(at + 1)),
            _ => Ok(Wrapped::Hidden),
        },
        "watch" | "flock" | "chroot" | "unshare" | "nsenter" | "taskset" | "systemd-run"
        | "script" | "strace" | "ltrace" | "valgrind" | "gdb" | "perf" | "parallel" | "ssh"
        | "chrt" | "firejail" | "bwrap" | "fakeroot" | "proot" | "nix-shell" | "unbuffer"
        | "prlimit" | "setarch" | "linux32" | "linux64" | "i386" | "x86_64" | "uname26"
        | "setpriv" | "catchsegv" | "rlwrap" | "xvfb-run" | "dbus-run-session"
        | "systemd-inhibit" | "cgexec" | "numactl" | "torsocks" | "proxychains"
        | "proxychains4" | "tsocks" | "sg" | "pkexec" | "run-parts" | "entr" | "pipx"
        | "direnv" | "tini" | "dumb-init" | "gosu" | "su-exec" | "chpst" | "softlimit"
        | "setuidgid" | "envdir" | "envuidgid" | "start-stop-daemon" | "daemonize"
        | "flatpak-spawn" | "distrobox-enter" | "ifne" | "chronic" | "sem" | "expect"
        | "caffeinate" | "run0" | "machinectl" | "toolbox" | "ssh-agent" | "tmux" | "screen"
        | "byobu" | "zellij" | "dtach" | "abduco" | "vim" | "vi" | "nvim" | "view" | "ex"
        | "emacs" | "sqlite3" | "socat" | "nc" | "ncat" | "netcat" | "at" | "batch" | "crontab"
        | "fish" | "tcsh" | "csh" | "elvish" | "nu" | "xonsh" | "watchexec" | "rush" | "xe"
        | "ed" | "red" | "nvi" => Ok(Wrapped::Hidden),
        // The dynamic loader runs the program it is given (`/lib64/ld-linux-x86-64.so.2 rm`).
        _ if name.starts_with("ld-")
            || name.starts_with("ld.so")
            || name.starts_with("ld64.so") =>
        {
            Ok(Wrapped::Hidden)
        }
        // Package runners that run the command they are given: what follows the runner (and
        // its subcommand) when no option stands before it, else nothing this host can read.
        "npx" | "pnpx" | "bunx" | "uvx" => Ok(runner(args, 0)),
        "uv" | "poetry" | "pipenv" | "pdm" | "hatch" | "rye" | "conda" | "mamba" | "micromamba"
        | "pixi" | "mise"
            if args.first().is_some_and(|a| a == "run" || a == "exec") =>
        {
            Ok(runner(args, 1))
        }
        "npm" | "pnpm" | "yarn" | "bun"
            if args
                .first()
                .is_some_and(|a| matches!(a.as_str(), "exec" | "dlx" | "x")) =>
        {
            Ok(runner(args, 1))
        }
        _ => Ok(Wrapped::Nothing),
    }
}

/// A runner's command: the word after its `skip` subcommand words, when no option comes first
/// (a runner's options are not modelled: `npx -c 'cmd'` runs a shell command).
fn runner(args: &[String], skip: usize) -> Wrapped {
    match args.get(skip) {
        None => Wrapped::Nothing,
        Some(a) if a.starts_with('-') => Wrapped::Hidden,
        Some(_) => Wrapped::Command(skip),
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
