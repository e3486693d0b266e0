//! A hook fails closed from its first byte. An agent CLI runs `approval-host hook <cli>` before a
//! tool call and lets the call through unless the hook's answer blocks it, so whatever goes wrong
//! inside the hook process (its command line, resolving `--project-state`, the deployment, the
//! log, a panic) must end in the answer that CLI honours as a block, never in an exit status it
//! reads as "no opinion". This wraps the whole command, from argument parsing on.
//!
//! Some failures end a process where nothing inside it can answer: a stack overflow or an
//! allocation failure aborts, and the kernel may kill it. So the hook process is a supervisor: it
//! forks the hook into a child ([`supervise`]), passes the child's answer on when the child ended
//! the way a hook answers (exit 0, or exit 2 with its reason), and blocks the call itself when
//! the child ended any other way.

use std::ffi::OsString;
use std::io::Write as _;
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd};
use std::os::unix::process::ExitStatusExt as _;
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

/// Where a process is after [`supervise`]: the supervisor, done, with the status to exit with;
/// or its forked child, which answers the hook.
pub(crate) enum Supervised {
    /// The supervisor: the child ended and this is the answer passed on (or the block).
    Done(ExitCode),
    /// The child: stdout and stderr are the supervisor's pipes; run the hook and exit.
    Child,
}

/// Forks the hook into a child that answers (its stdout and stderr captured, its stdin this
/// process's) and, in this process, answers from how the child ended: its own answer when it
/// exited 0 or 2, the CLI's block otherwise.
///
/// A fork, not a second run of the program: the child starts where this process stands, without
/// loading and relocating the binary again, and nothing in the environment can make a process
/// skip its supervisor. It must be called while the process has one thread, before anything else
/// has run: `main` calls it first.
pub(crate) fn supervise(target: Target) -> Supervised {
    let (out_read, out_write) = match pipe() {
        Ok(ends) => ends,
        Err(e) => {
            return Supervised::Done(
                target.block(&format!("approval-host: starting the hook: {e}")),
            );
        }
    };
    let (err_read, err_write) = match pipe() {
        Ok(ends) => ends,
        Err(e) => {
            return Supervised::Done(
                target.block(&format!("approval-host: starting the hook: {e}")),
            );
        }
    };
    // Something outside this program (a preloaded library, a profiler) may have started a
    // thread before `main`; a fork would then copy locks that thread holds, and the child could
    // hang until the CLI gives up on the hook, which most CLIs read as no objection.
    if let Some(threads) = threads().filter(|&n| n != 1) {
        return Supervised::Done(target.block(&format!(
            "approval-host: the hook process has {threads} threads before it started; the call is blocked"
        )));
    }
    // A SIGCHLD ignored by whoever started this process would reap the child before it is
    // waited for, and every call would be blocked.
    // SAFETY: restoring the default disposition of a signal this program does not handle.
    unsafe { libc::signal(libc::SIGCHLD, libc::SIG_DFL) };
    // SAFETY: the process has one thread (checked above), so the child gets a consistent copy of
    // the whole program: no lock is held by a thread that does not exist in it.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        let e = std::io::Error::last_os_error();
        return Supervised::Done(target.block(&format!("approval-host: starting the hook: {e}")));
    }
    if pid == 0 {
        drop((out_read, err_read));
        // SAFETY: duplicating descriptors this process owns onto its standard output and error.
        let redirected = unsafe {
            libc::dup2(out_write.as_raw_fd(), libc::STDOUT_FILENO) >= 0
                && libc::dup2(err_write.as_raw_fd(), libc::STDERR_FILENO) >= 0
        };
        if !redirected {
            // The supervisor reads this as an abnormal end and blocks the call.
            std::process::abort();
        }
        drop((out_write, err_write));
        return Supervised::Child;
    }
    drop((out_write, err_write));
    Supervised::Done(answer_from(target, pid, out_read, err_read))
}

/// This process's threads, from `/proc/self/stat` (its 20th field); `None` where that cannot be
/// read.
fn threads() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: count from after it.
    let after_name = &stat[stat.rfind(')')? + 1..];
    after_name.split_whitespace().nth(17)?.parse().ok()
}

/// A pipe whose ends close on exec.
fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: pipe2 succeeded, so both are open descriptors owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Reads the child's output to its end, waits for it, and answers from how it ended.
fn answer_from(target: Target, pid: libc::pid_t, out: OwnedFd, err: OwnedFd) -> ExitCode {
    let drained = drain(out, err);
    let status = loop {
        let mut status = 0;
        // SAFETY: waiting for this process's own child.
        match unsafe { libc::waitpid(pid, &mut status, 0) } {
            -1 if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted => {}
            -1 => {
                let e = std::io::Error::last_os_error();
                return target.block(&format!("approval-host: waiting for the hook: {e}"));
            }
            _ => break std::process::ExitStatus::from_raw(status),
        }
    };
    let (stdout, stderr) = match drained {
        Ok(both) => both,
        Err(e) => return target.block(&format!("approval-host: reading the hook's answer: {e}")),
    };
    let passed_on = |code: u8| {
        let _ = std::io::stderr().lock().write_all(&stderr);
        let mut out = std::io::stdout().lock();
        match out.write_all(&stdout).and_then(|()| out.flush()) {
            Ok(()) => ExitCode::from(code),
            Err(_) => ExitCode::from(BLOCKING_EXIT),
        }
    };
    match status.code() {
        Some(0) => passed_on(0),
        Some(code) if code == i32::from(BLOCKING_EXIT) => passed_on(BLOCKING_EXIT),
        _ => {
            let said = String::from_utf8_lossy(&stderr);
            let last = said
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("");
            target.block(&format!(
                "approval-host: the hook stopped abnormally ({status}){}; the call is blocked",
                if last.is_empty() {
                    String::new()
                } else {
                    format!(": {last}")
                }
            ))
        }
    }
}

/// The child's stdout and stderr, each read to its end. Both are drained together on this one
/// thread (a child that fills one pipe while this waits on the other cannot stall), and no
/// thread is started: a supervisor that could not start one would have no answer to give.
fn drain(out: OwnedFd, err: OwnedFd) -> std::io::Result<(Vec<u8>, Vec<u8>)> {
    let mut open = [
        Some(std::fs::File::from(out)),
        Some(std::fs::File::from(err)),
    ];
    let mut read = [Vec::new(), Vec::new()];
    let mut chunk = [0u8; 16 * 1024];
    while open.iter().any(Option::is_some) {
        let mut polled: Vec<libc::pollfd> = open
            .iter()
            .map(|f| libc::pollfd {
                fd: f.as_ref().map_or(-1, |f| f.as_raw_fd()),
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        // SAFETY: `polled` holds `polled.len()` pollfds; a negative fd is ignored by poll.
        if unsafe { libc::poll(polled.as_mut_ptr(), polled.len() as libc::nfds_t, -1) } < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        for (i, p) in polled.iter().enumerate() {
            if p.revents == 0 {
                continue;
            }
            let Some(file) = open[i].as_mut() else {
                continue;
            };
            match std::io::Read::read(file, &mut chunk) {
                Ok(0) => open[i] = None,
                Ok(n) => read[i].extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
    let [stdout, stderr] = read;
    Ok((stdout, stderr))
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
