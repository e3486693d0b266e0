//! A hook fails closed from its first byte. An agent CLI runs `approval-host hook <cli>` before a
//! tool call and lets the call through unless the hook's answer blocks it, so whatever goes wrong
//! inside the hook process (its command line, resolving `--project-state`, the deployment, the
//! log, a panic) must end in the answer that CLI honours as a block, never in an exit status it
//! reads as "no opinion". This wraps the whole command, from argument parsing on.

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

/// Panics here when a debug build's [`FAULT_ENV`] names `step`.
pub(crate) fn fault_point(step: &str) {
    if cfg!(debug_assertions) && std::env::var(FAULT_ENV).is_ok_and(|v| v == step) {
        panic!("injected fault at {step}");
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
