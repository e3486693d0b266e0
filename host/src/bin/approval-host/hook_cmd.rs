//! `approval-host hook <cli>`: the command line of every agent CLI's hook. Claude Code's is
//! answered by [`crate::claude_code`], the others' by [`crate::cli_hook`]; both share the options
//! here and the plumbing in `claude_code.rs` (the server round trip, the in-process service).

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use approval_host::cli_hooks::Cli;

use crate::UsageError;
use crate::claude_code::{Fallback, Options};

/// Where and how a hook is answered: the same options for every agent CLI.
#[derive(clap::Args, Debug)]
pub(crate) struct HookArgs {
    /// The deployment file (TOML).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Ask a running `serve` on this Unix socket instead of loading the deployment here.
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// When the server is missing, refuses or does not answer in time.
    #[arg(long, value_enum, default_value = "ask", requires = "socket")]
    fallback: Fallback,
    /// How long to wait for the server, in seconds.
    #[arg(
        long,
        value_name = "SECONDS",
        default_value_t = 50.0,
        requires = "socket"
    )]
    timeout: f64,
    /// For a call nobody decided: `ask` (the CLI asks its user, where it can), `defer` (print no
    /// decision: the CLI's own rules and mode apply) or `deny` [default: the deployment's
    /// `[claude-code] when-undecided` for Claude Code, else ask].
    #[arg(long, value_name = "ask|defer|deny", value_parser = parse_when_undecided)]
    when_undecided: Option<approval_host::claude_code::WhenUndecided>,
    /// Run as the CLI's after-tool hook (Claude Code and Codex `PostToolUse`, Gemini CLI
    /// `AfterTool`, Copilot CLI `postToolUse`): record that the call ran, and an
    /// `approval/unasked` alarm when no question allowed it. Prints nothing, never blocks.
    #[arg(long)]
    after_tool: bool,
}

impl HookArgs {
    fn options(self) -> Result<Options> {
        if !(self.timeout.is_finite() && self.timeout > 0.0) {
            return Err(UsageError("--timeout must be a positive number".to_owned()).into());
        }
        Ok(Options {
            config: self.config,
            socket: self.socket,
            fallback: self.fallback,
            timeout: Duration::from_secs_f64(self.timeout),
            when_undecided: self.when_undecided,
            after_tool: self.after_tool,
        })
    }
}

#[derive(clap::Subcommand, Debug)]
pub(crate) enum HookCommand {
    /// A Claude Code PreToolUse hook: reads the hook input on stdin, records the call, asks the
    /// deployment, and prints `hookSpecificOutput`: `allow` for allowed-once, `deny` with a reason
    /// for rejected and cancelled, `ask` for unavailable (Claude Code's own prompt decides; this
    /// never grants). Bad input exits 2 with the reason on stderr, which Claude Code treats as a
    /// block.
    ///
    /// With `--socket`, a running `approval-host serve --socket PATH` answers (warm plugins);
    /// when it cannot, the hook never grants: it answers `ask` saying why, or with
    /// `--fallback in-process` loads `--config` itself.
    ///
    /// Example (in `.claude/settings.json`, a PreToolUse command hook):
    /// `approval-host --state-dir ~/.approval-host hook claude-code --socket ~/.approval-host/serve.sock --fallback in-process --config ~/.approval-host/claude-code.toml`
    ClaudeCode(HookArgs),
    /// A Codex `PreToolUse` and `PermissionRequest` command hook. `PreToolUse` prints `deny` with
    /// the reason for a rejected or cancelled call and nothing otherwise (Codex's PreToolUse
    /// cannot grant: its own approval flow goes on); `PermissionRequest` prints `allow` for an
    /// allowed-once call, `deny` with a message for a rejected one, and nothing when nobody
    /// decided (Codex asks its user). A hook that cannot answer exits 2 (Codex blocks the call).
    ///
    /// Example (`approval-host init codex` writes it into `.codex/hooks.json`):
    /// `approval-host --state-dir ~/.approval-host hook codex --config ~/.approval-host/codex.toml`
    Codex(HookArgs),
    /// A Gemini CLI `BeforeTool` command hook: prints `{"decision": "deny", "reason": …}` for a
    /// rejected or cancelled call, `{"decision": "allow"}` for an allowed one, `{}` when nobody
    /// decided (Gemini CLI has no "ask": its own policy decides). A hook that cannot answer exits
    /// 2 (Gemini CLI blocks the call).
    Gemini(HookArgs),
    /// A Copilot CLI `preToolUse` command hook: prints `permissionDecision` `allow`, `deny` with
    /// the reason, or `ask` for a call nobody decided. Copilot CLI skips a hook that fails, so a
    /// hook that cannot answer prints `deny` with the reason instead.
    Copilot(HookArgs),
}

fn parse_when_undecided(s: &str) -> Result<approval_host::claude_code::WhenUndecided, String> {
    s.parse()
}

fn read_stdin() -> Result<String> {
    let mut input = String::new();
    std::io::Read::read_to_string(&mut std::io::stdin(), &mut input)
        .map_err(|e| UsageError(format!("reading the hook input: {e}")))?;
    Ok(input)
}

/// Runs a `hook` command. Any error reaches `hook_guard`, which blocks the call the way the CLI
/// honours.
pub(crate) fn run_command(ctx: &crate::Context, command: HookCommand) -> Result<ExitCode> {
    let (cli, args) = match command {
        HookCommand::ClaudeCode(args) => (None, args),
        HookCommand::Codex(args) => (Some(Cli::Codex), args),
        HookCommand::Gemini(args) => (Some(Cli::Gemini), args),
        HookCommand::Copilot(args) => (Some(Cli::Copilot), args),
    };
    let options = args.options()?;
    let input = read_stdin()?;
    if options.after_tool {
        crate::claude_code::record_ran(ctx, cli, &options, &input)?;
        return Ok(ExitCode::SUCCESS);
    }
    let printed = match cli {
        None => crate::claude_code::run(ctx, &options, &input)?,
        Some(cli) => crate::cli_hook::run(ctx, cli, &options, &input)?,
    };
    crate::hook_guard::fault_point("print");
    if let Some(output) = printed {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{output}")?;
        out.flush()?;
    }
    Ok(ExitCode::SUCCESS)
}
