//! A hook fails closed from its first byte. An agent CLI runs `approval-host hook <cli>` before a
//! tool call and lets the call through unless the hook's answer blocks it, so whatever goes wrong
//! inside the hook process (its command line, resolving `--project-state`, the deployment, the
//! log, a panic) must end in the answer that CLI honours as a block, never in an exit status it
//! reads as "no opinion". This wraps the whole command, from argument parsing on.
//!
//! Some failures end a process where nothing inside it can answer: a stack overflow or an
//! allocation failure aborts, and the kernel may kill it. So the hook process is a supervisor: it
//! runs the hook again as its child ([`CHILD_ENV`]), passes the child's answer on when the child
//! ended the way a hook answers (exit 0, or exit 2 with its reason), and blocks the call itself
//! when the child ended any other way.

use std::ffi::OsString;
use std::io::Write as _;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::process::ExitCode;
use std::sync::Mutex;

use anyhow::Result;
use approval_host::cli_hooks::{Cli, Failure};

/// The exit status every CLI that reads one blocks on (Claude Code, Codex, Gemini CLI).
const BLOCKING_EXIT: u8 = 2;

/// The flag of an after-tool hook, which records and never blocks.
pub(crate) const AFTER_TOOL_FLAG: &str = "--after-tool";

/// The global options that take a value (`--state-dir DIR`), so a value is never read as the
/// command's name.
const VALUED_GLOBALS: [&str; 4] = ["--state-dir", "--project-state", "--store", "--log-format"];

/// Which agent CLI's hook this process is, read from the raw command line before anything else
/// can fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Target {
    /// `hook claude-code`.
    ClaudeCode,
    /// `hook codex | gemini | copilot`.
    Other(Cli),
    /// `hook` with a CLI this build does not know: exit 2, which every CLI blocks on.
    Unknown,
    /// `hook <cli> --after-tool`: the call already ran, so a failure is only said on stderr.
    After,
}

impl Target {
    /// The hook this command line runs, if it runs one.
    pub(crate) fn of_args(args: &[OsString]) -> Option<Target> {
        let mut words = args.iter().skip(1).map(|a| a.to_string_lossy());
        let mut command = None;
        while let Some(word) = words.next() {
            if VALUED_GLOBALS.contains(&word.as_ref()) {
                words.next();
            } else if !word.starts_with('-') {
                command = Some(word);
                break;
            }
        }
        if command.as_deref() != Some("hook") {
            return None;
        }
        if args.iter().any(|a| a == AFTER_TOOL_FLAG) {
            return Some(Target::After);
        }
        let name = words.find(|w| !w.starts_with('-'));
        Some(match name.as_deref() {
            Some("claude-code") => Target::ClaudeCode,
            Some(other) => Cli::ALL
                .into_iter()
                .find(|c| c.name() == other)
                .map_or(Target::Unknown, Target::Other),
            None => Target::Unknown,
        })
    }

    /// Blocks the call the way this CLI honours, saying `reason`; returns the exit status.
    pub(crate) fn block(self, reason: &str) -> ExitCode {
        let failure = match self {
            Target::Other(cli) => cli.failure(reason),
            Target::ClaudeCode | Target::Unknown => Failure::Exit2(reason.to_owned()),
            Target::After => {
                eprintln_lossy(reason);
                return ExitCode::SUCCESS;
            }
        };
        match failure {
            Failure::Exit2(reason) => {
                eprintln_lossy(&reason);
                ExitCode::from(BLOCKING_EXIT)
            }
            Failure::Print(output) => {
                eprintln_lossy(reason);
                let mut out = std::io::stdout().lock();
                match writeln!(out, "{output}").and_then(|()| out.flush()) {
                    Ok(()) => ExitCode::SUCCESS,
                    // The refusal could not be printed: a failing status is all that is left.
                    Err(_) => ExitCode::from(BLOCKING_EXIT),
                }
            }
        }
    }
}

/// Set in the supervised child's environment: this process answers; its parent supervises.
pub(crate) const CHILD_ENV: &str = "APPROVAL_HOST_HOOK_CHILD";

/// Runs the hook as a child of this process and answers from how it ended: its own answer when
/// it exited 0 or 2, the CLI's block otherwise.
pub(crate) fn supervise(target: Target) -> ExitCode {
    use std::io::Read as _;
    use std::process::{Command, Stdio};
    let mut input = Vec::new();
    if let Err(e) = std::io::stdin().lock().read_to_end(&mut input) {
        return target.block(&format!("approval-host: reading the hook input: {e}"));
    }
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => return target.block(&format!("approval-host: finding this program: {e}")),
    };
    let child = Command::new(exe)
        .args(std::env::args_os().skip(1))
        .env(CHILD_ENV, "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(child) => child,
        Err(e) => return target.block(&format!("approval-host: starting the hook: {e}")),
    };
    // Written beside the wait, so a child that stops reading early cannot stall this one.
    let writer = child.stdin.take().map(|mut stdin| {
        std::thread::spawn(move || {
            let _ = stdin.write_all(&input);
        })
    });
    let out = match child.wait_with_output() {
        Ok(out) => out,
        Err(e) => return target.block(&format!("approval-host: waiting for the hook: {e}")),
    };
    if let Some(writer) = writer {
        let _ = writer.join();
    }
    let passed_on = |code: u8| {
        let _ = std::io::stderr().lock().write_all(&out.stderr);
        let mut stdout = std::io::stdout().lock();
        match stdout.write_all(&out.stdout).and_then(|()| stdout.flush()) {
            Ok(()) => ExitCode::from(code),
            Err(_) => ExitCode::from(BLOCKING_EXIT),
        }
    };
    match out.status.code() {
        Some(0) => passed_on(0),
        Some(code) if code == i32::from(BLOCKING_EXIT) => passed_on(BLOCKING_EXIT),
        _ => {
            let said = String::from_utf8_lossy(&out.stderr);
            let last = said
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("");
            target.block(&format!(
                "approval-host: the hook stopped abnormally ({}){}; the call is blocked",
                out.status,
                if last.is_empty() {
                    String::new()
                } else {
                    format!(": {last}")
                }
            ))
        }
    }
}

/// The last panic's message, kept by the panic hook for the blocking answer.
static PANIC_MESSAGE: Mutex<Option<String>> = Mutex::new(None);

/// Runs the hook command `run` so that every way it can end, an error or a panic included, that
/// is not its own answer is this CLI's blocking answer.
pub(crate) fn run(target: Target, run: impl FnOnce() -> Result<ExitCode>) -> ExitCode {
    // A panic says one line on stderr (the CLI may show stderr to the model), not a backtrace.
    std::panic::set_hook(Box::new(|info| {
        let what = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic".to_owned());
        let place = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        if let Ok(mut last) = PANIC_MESSAGE.lock() {
            *last = Some(format!("{what}{place}"));
        }
    }));
    let run = || {
        fault_point("start");
        run()
    };
    match catch_unwind(AssertUnwindSafe(run)) {
        Ok(Ok(code)) => code,
        Ok(Err(err)) => target.block(&format!("approval-host: {err:#}")),
        Err(_) => {
            let what = PANIC_MESSAGE
                .lock()
                .ok()
                .and_then(|mut m| m.take())
                .unwrap_or_else(|| "a panic".to_owned());
            target.block(&format!(
                "approval-host: the hook failed ({what}); the call is blocked"
            ))
        }
    }
}

/// The environment variable that makes a debug build's hook panic at a named step (`start`,
/// `ask`, `print`), so the tests can watch a panic block the call. Release builds never read it.
pub(crate) const FAULT_ENV: &str = "APPROVAL_HOST_TEST_FAULT";

/// Panics here when a debug build's [`FAULT_ENV`] names `step`; aborts the process (as a stack
/// overflow does) when it names `abort-<step>`.
pub(crate) fn fault_point(step: &str) {
    if !cfg!(debug_assertions) {
        return;
    }
    match std::env::var(FAULT_ENV) {
        Ok(v) if v == step => panic!("injected fault at {step}"),
        Ok(v) if v.strip_prefix("abort-") == Some(step) => std::process::abort(),
        _ => {}
    }
}

/// Writes a line on stderr, ignoring a closed stderr (nothing else could be said anyway).
fn eprintln_lossy(line: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(line: &str) -> Option<Target> {
        let args: Vec<OsString> = line.split(' ').map(OsString::from).collect();
        Target::of_args(&args)
    }

    #[test]
    fn the_hook_is_read_from_the_raw_command_line() {
        assert_eq!(target("ah hook claude-code"), Some(Target::ClaudeCode));
        assert_eq!(
            target("ah --state-dir hook hook codex --config x"),
            Some(Target::Other(Cli::Codex))
        );
        assert_eq!(
            target("ah -q --project-state . hook --bogus gemini"),
            Some(Target::Other(Cli::Gemini))
        );
        assert_eq!(target("ah hook copilot"), Some(Target::Other(Cli::Copilot)));
        assert_eq!(target("ah hook cursor"), Some(Target::Unknown));
        assert_eq!(target("ah hook"), Some(Target::Unknown));
        assert_eq!(target("ah serve --config hook"), None);
        assert_eq!(target("ah log hook"), None);
        assert_eq!(target("ah hook codex --after-tool"), Some(Target::After));
    }
}
