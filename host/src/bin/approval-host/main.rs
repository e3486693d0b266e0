//! The `approval-host` command: ask a deployment whether a call may proceed, and read session logs.
//! This file parses the command line and dispatches; each command lives in a file of its own
//! with its arguments and its `run` (`ask.rs`, `serve_cmd.rs`, `rules_cmd.rs`, …), and putting a
//! deployment together for a command is `wiring.rs`.
//!
//! Exit codes: 0 when the command did its job (whatever the outcome of a request), 1 when it could
//! not (an I/O failure, a log that fails its check), 2 for a bad argument or deployment file.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Result;
use clap::{Parser, Subcommand};

mod acp_cmd;
mod ask;
mod check;
mod claude_code;
mod cli_hook;
mod codex_app;
mod componentize;
mod conform;
mod demo;
mod doctor;
mod harness;
mod hook_cmd;
mod hook_guard;
mod init;
mod init_mcp;
mod keygen;
mod mcp_cmd;
mod mcp_pins_cmd;
mod new;
mod progress;
mod project_state;
// Only its tests use it: they generate and check `docs/reference/cli.md`.
#[cfg(test)]
mod reference;
mod replay_cmd;
mod rules_cmd;
mod serve_cmd;
mod shadow_cmd;
mod store_cmd;
mod test_cmd;
mod token_cmd;
mod verify_cmd;
mod wiring;

/// Decides whether an AI agent's tool call may proceed, through a waterfall of answerers, with
/// every question and decision on a durable session log.
#[derive(Parser, Debug)]
#[command(name = "approval-host", version, about, long_about = None)]
struct Cli {
    /// Where session logs live (`<DIR>/sessions/<session>.jsonl`) [default: .approval-host;
    /// for `demo`, a fresh temporary directory].
    #[arg(long, global = true, value_name = "DIR")]
    state_dir: Option<PathBuf>,

    /// Keep state for the project at DIR in the user's state directory
    /// (`$XDG_STATE_HOME/approval-host/projects/<name>-<key>`, else under
    /// `~/.local/state`), outside the project, where its agent cannot write through it.
    #[arg(long, global = true, value_name = "DIR", conflicts_with = "state_dir")]
    project_state: Option<PathBuf>,

    /// Keep session logs and rules in this PostgreSQL database instead of the state directory
    /// (`postgres://user@host/db`; the password from APPROVAL_HOST_DB_PASSWORD, never the URL);
    /// over the deployment's `[store] url`.
    #[arg(long, global = true, value_name = "URL")]
    store: Option<String>,

    /// Log more on stderr (-v info, -vv debug, -vvv trace); over RUST_LOG.
    #[arg(short, long, global = true, action = clap::ArgAction::Count, conflicts_with = "quiet")]
    verbose: u8,

    /// Log only errors on stderr; over RUST_LOG.
    #[arg(short, long, global = true)]
    quiet: bool,

    /// How log lines on stderr are written: `text` for people, `json` (one object a line) for a
    /// log collector.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,

    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Open a turn, ask whether a call may proceed, close the turn, and print the outcome.
    ///
    /// Prints one of allowed-once, rejected, cancelled, unavailable and exits 0 whatever the
    /// outcome. Without --config the embedded default deployment applies: policy "ask" and no
    /// answerer, so the outcome is "unavailable" (fail-closed), and still audited.
    ///
    /// Example: `approval-host ask --session s1 --agent a --tool Bash --call-id c1 --arguments '{"command":"ls"}' --config deploy.toml`
    Ask(ask::AskArgs),
    /// Check whether a component fits the plugin world.
    ///
    /// Reports its exports, its imports (only the host interface and WASI 0.2) and its API
    /// version (approval:plugin/answerer@0.1.x or 0.2.x). Exits 1 with the exact mismatch. Compiled components are cached under `<state-dir>/cache`.
    ///
    /// Example: `approval-host check target/guests/python/allow-tools.wasm`
    Check(check::CheckArgs),
    /// Write a plugin skeleton in any of four languages.
    ///
    /// Its source, a build script, the WIT contract, a sample deployment and sample conformance
    /// cases, in a new directory NAME (or --dir).
    ///
    /// Example: `approval-host new no-secrets --lang python`, then `approval-host test no-secrets`
    New(new::NewArgs),
    /// Run conformance cases against a plugin.
    ///
    /// Cases are JSON, `{"cases": [{"name", "gate"?, "config"?, "tool", "call_id"?,
    /// "arguments"?, "expect", "reason"?}]}`, where `expect` is allow-once, reject, cancel, next,
    /// refused or failed (<kind>). Each runs in its own audited session (in a scratch
    /// directory) and its answer is printed. Runs the cases for the plugin's name and those that
    /// name no gate. Exits 1 when a case fails. Compiled components are cached under
    /// `<state-dir>/cache`.
    ///
    /// Example: `approval-host conform my-gate.wasm --cases cases.json`
    Conform(conform::ConformArgs),
    /// Build, check and conform a plugin made by `new`.
    ///
    /// Runs its build.sh, checks the component against the plugin world, and runs its
    /// conformance cases: exits 0 when it is ready to use, 1 naming the step that failed.
    ///
    /// Example: `approval-host new no-secrets --lang rust && approval-host test no-secrets`
    Test(test_cmd::TestArgs),
    /// Turn a core WebAssembly module (C, wasi-libc) into a plugin component.
    ///
    /// The module is WASI preview1, with the component type `wit-bindgen` embeds (e.g. from
    /// clang and wasi-libc); its WASI imports are adapted to WASI 0.2, then the component is
    /// checked as `check` does. Exits 1 when the module cannot become a plugin.
    ///
    /// Example: `approval-host componentize gate.core.wasm -o gate.wasm`
    Componentize(componentize::ComponentizeArgs),
    /// Serve the host over JSON-RPC 2.0 (stdio or a Unix socket).
    ///
    /// One message per line, over stdio or a Unix socket for many clients, with the
    /// deployment's plugins hot-reloaded when their files change.
    ///
    /// Example: `approval-host --state-dir ~/.approval-host serve --config deploy.toml --socket ~/.approval-host/serve.sock`
    Serve(serve_cmd::ServeArgs),
    /// Tokens for `serve` clients.
    #[command(subcommand)]
    Token(token_cmd::TokenCommand),
    /// Adapters for agent harnesses.
    #[command(subcommand)]
    Hook(hook_cmd::HookCommand),
    /// Stand between an agent and an MCP server: every `tools/call` is asked first.
    ///
    /// Each call is asked as `mcp__<NAME>__<tool>` with its arguments, through the deployment's
    /// rules, plugins and answerers; an allowed call goes to the server unchanged, any other
    /// outcome comes back as a tool result with `isError: true` and the reason. Everything else
    /// passes through. Over stdio the server is a command started per agent connection; over
    /// streamable HTTP (`--listen`, loopback only) it is --upstream.
    ///
    /// Example: `approval-host mcp --config deploy.toml --name notes -- python3 notes_server.py`
    Mcp(mcp_cmd::McpArgs),
    /// Serve ACP over stdio as a scripted agent, to answer approvals from an ACP client.
    ///
    /// The agent's model is a script, so a real client (an editor, or an automation client) can
    /// watch and answer the approval flow.
    ///
    /// `session/prompt` runs the session's next scripted turn through the tool runtime (the
    /// deployment's hooks, ask routing, the sandboxed `bash` tool); approval questions nothing
    /// else answers go to the client as `session/request_permission`. The session modes `ask` and
    /// `never` are the approval policy. stdout carries only protocol messages; logs go to stderr.
    ///
    /// Example: `approval-host acp --config examples/acp/deploy.toml --script examples/acp/script.json`
    Acp(acp_cmd::AcpArgs),
    /// Show every outcome with its audit trail, on the embedded default.
    ///
    /// A bundled deployment of the example plugins answers scripted requests.
    ///
    /// Example: `approval-host demo` (or `approval-host --state-dir /tmp/demo demo` to keep the log)
    Demo,
    /// Print and check a session log, or list the sessions.
    ///
    /// Checks that every approval/asked has exactly one approval/decided, all inside turns; exits
    /// 1 naming the first problem, 3 when the log records a call that ran unasked
    /// (`approval/unasked`, printed as `UNASKED:`). Without a session, lists the sessions: id, records, last
    /// activity, whether a turn is open.
    ///
    /// Example: `approval-host --state-dir .approval-host log` then `... log <session>`
    Log(store_cmd::LogArgs),
    /// Check session logs for tampering.
    ///
    /// Each line commits to the one before it
    /// (hash chain from the session's genesis), seq has no gap, and every question is decided
    /// once inside its turn. Exits 0 when every log is intact (warnings are not tampering), 1
    /// naming the session, the first bad line and what is wrong, and 3 when every log is intact
    /// but one records a call that ran unasked (`approval/unasked`: an agent CLI's before-tool
    /// hook failed, was skipped, or its refusal was ignored), each printed as `UNASKED:`.
    ///
    /// Example: `approval-host --state-dir ~/.approval-host verify --all`
    Verify(verify_cmd::VerifyArgs),
    /// Print session records as JSON lines, for another system to keep.
    ///
    /// Each line is `{"session": ID, "record": RECORD}`, the record exactly as stored (so its
    /// hash chain still verifies); sessions in name order, records in order. Works on the state
    /// directory or a database (--store).
    ///
    /// Example: `approval-host --store postgres://approvals@db/approvals export --since 2026-12-01T00:00:00Z > audit.jsonl`
    Export(store_cmd::ExportArgs),
    /// The shared database: create or migrate its schema, import a state directory.
    #[command(subcommand)]
    Db(store_cmd::DbCommand),
    /// Set the host up for an agent harness.
    Init(init::InitArgs),
    /// Check that the hooks `init` installed will really run.
    ///
    /// An agent CLI skips hooks it was not told to trust (Codex: a trusted project and a
    /// reviewed hook; Gemini CLI and Copilot CLI: a trusted folder, for a project's hooks) or that
    /// its settings turn off (Claude Code's `disableAllHooks`, `allowManagedHooksOnly`). Asks
    /// Codex itself (its app-server's `hooks/list`) and reads the others' trust files; prints
    /// `ok` or `FAIL` with the step to take for each, and exits 1 when a hook will not run.
    ///
    /// Example: `approval-host doctor --project .` (or `--cli codex`)
    Doctor(doctor::DoctorArgs),
    /// Standing rules: list, add, revoke, explain.
    #[command(subcommand)]
    Rules(rules_cmd::RulesCommand),
    /// Ask the recorded questions again of another deployment, and print what would change.
    ///
    /// Every settled question of the sessions named (or --all) goes through the new
    /// deployment's rules, protections and plugins, with no person and no client (a question
    /// that would reach one counts as "would ask"), never writing to the recorded logs. Prints
    /// recorded × replayed outcomes, every changed question grouped by who decides now, and
    /// plugin failures. Exits 0 when nothing changed, 1 when a question changed, 3 when one
    /// that was not allowed without a person would now be allowed, 2 on bad input, 4 when the
    /// replay could not run.
    ///
    /// Example: `approval-host replay --config deploy.new.toml --all --since 7d`
    Replay(replay_cmd::ReplayArgs),
    /// Shadow plugins: what they said on live traffic.
    #[command(subcommand)]
    Shadow(shadow_cmd::ShadowCommand),
    /// Create the Ed25519 key that signs audit checkpoints.
    ///
    /// Writes the key at FILE (mode 0600; keep it outside the state directory) and its public
    /// key at FILE.pub. Refuses to overwrite a key.
    ///
    /// Example: `approval-host keygen ~/.config/approval-host/audit.key`, then
    /// `[audit] signing-key = "~/.config/approval-host/audit.key"` in the deployment file.
    Keygen(keygen::KeygenArgs),
}

/// What every command gets from the global options.
#[derive(Debug, Clone)]
pub(crate) struct Context {
    /// The state directory (`--state-dir`, `--project-state`, or `.approval-host`).
    pub(crate) dir: PathBuf,
    /// `--state-dir` as given, for the commands that treat its absence on their own (`demo`,
    /// `init`).
    pub(crate) named_dir: Option<PathBuf>,
    /// `--store`: the database the logs are kept in, over the deployment's `[store]`.
    pub(crate) store: Option<String>,
    /// `--quiet`: no progress on stderr.
    pub(crate) quiet: bool,
    /// The set-up `init` made in the working directory's project, when no state directory was
    /// named and the command reads that project's state and deployment.
    pub(crate) setup: Option<project_state::Setup>,
}

/// `--log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

/// An error that is the user's input, not the host's failure: exit 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct UsageError(pub(crate) String);

fn main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    // A hook blocks its call whatever goes wrong, from reading its own command line on.
    if let Some(target) = hook_guard::Target::of_args(&args) {
        // The after-tool hook never blocks, so nothing needs to watch it end.
        if target != hook_guard::Target::After
            && let hook_guard::Supervised::Done(code) = hook_guard::supervise(target)
        {
            return code;
        }
        return hook_guard::run(target, || start(args));
    }
    match start(args) {
        Ok(code) => code,
        Err(err) => {
            if let Some(clap) = err.downcast_ref::<clap::Error>() {
                clap.exit();
            }
            eprintln!("approval-host: {err:#}");
            if err.is::<UsageError>() || err.is::<approval_host::ConfigError>() {
                ExitCode::from(2)
            } else {
                ExitCode::from(1)
            }
        }
    }
}

/// Parses the command line, sets up logging and runs the command.
fn start(args: Vec<std::ffi::OsString>) -> Result<ExitCode> {
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        // `--help` and `--version` are answers, even for a hook.
        Err(e) if !e.use_stderr() => {
            e.print()?;
            return Ok(ExitCode::SUCCESS);
        }
        Err(e) => return Err(e.into()),
    };
    let level = match (cli.quiet, cli.verbose) {
        (true, _) => Some("error"),
        (false, 0) => None,
        (false, 1) => Some("info"),
        (false, 2) => Some("debug"),
        (false, _) => Some("trace"),
    };
    let filter = match level {
        Some(level) => tracing_subscriber::EnvFilter::new(level),
        None => tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
    };
    let logs = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter);
    match cli.log_format {
        LogFormat::Text => logs
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
        LogFormat::Json => logs.json().with_ansi(false).init(),
    }
    run(cli)
}

const DEFAULT_STATE_DIR: &str = ".approval-host";

fn run(cli: Cli) -> Result<ExitCode> {
    // Inside a project `init` set up, the commands that read its records read its hooks' state
    // and deployment, never a `.approval-host` of the working directory.
    let reads_project = matches!(
        cli.command,
        Command::Rules(_) | Command::Log(_) | Command::Verify(_) | Command::Export(_)
    );
    let setup = match (&cli.state_dir, &cli.project_state, &cli.store) {
        (None, None, None) if reads_project => project_state::find_setup(Path::new("."))?,
        _ => None,
    };
    let ctx = Context {
        dir: match (&cli.state_dir, &cli.project_state, &setup) {
            (Some(dir), _, _) => dir.clone(),
            (None, Some(project), _) => project_state::for_project(project)?,
            (None, None, Some(setup)) => {
                if !cli.quiet {
                    eprintln!(
                        "approval-host: reading the state of the hooks set up in {} ({})",
                        setup.root.display(),
                        setup.state.display()
                    );
                }
                setup.state.clone()
            }
            (None, None, None) => PathBuf::from(DEFAULT_STATE_DIR),
        },
        named_dir: cli.state_dir.clone(),
        store: cli.store.clone(),
        quiet: cli.quiet,
        setup,
    };
    match cli.command {
        Command::Ask(args) => ask::run(&ctx, args),
        Command::Check(args) => check::run(&ctx, args),
        Command::New(args) => new::run(args),
        Command::Conform(args) => conform::run(&ctx, args),
        Command::Test(args) => test_cmd::run(&ctx, &args.dir),
        Command::Componentize(args) => componentize::run(&ctx, args),
        Command::Serve(args) => serve_cmd::run(&ctx, args),
        Command::Token(command) => token_cmd::run(command),
        Command::Hook(command) => hook_cmd::run_command(&ctx, command),
        Command::Acp(args) => acp_cmd::run(&ctx, args),
        Command::Mcp(args) => mcp_cmd::run(&ctx, args),
        Command::Demo => demo::run_command(&ctx),
        Command::Log(args) => match args.session {
            None => store_cmd::list_sessions(&ctx),
            Some(session) => store_cmd::print_log(&ctx, &session),
        },
        Command::Verify(args) => verify_cmd::run(&ctx, args),
        Command::Export(args) => store_cmd::export(&ctx, args.sessions, args.since),
        Command::Db(command) => store_cmd::db(&ctx, command),
        Command::Init(args) => {
            let r = init::request(&ctx, args)?;
            let state = r.state_dir.as_deref();
            if r.mcp {
                init_mcp::run(r.harness, &r.target, state, r.dry_run, r.undo)?;
            } else {
                init::run(r.harness, &r.target, state, r.dry_run, r.trust)?;
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Doctor(args) => doctor::run(args),
        Command::Rules(command) => rules_cmd::run(&ctx, command),
        Command::Replay(args) => replay_cmd::run(&ctx, args),
        Command::Shadow(command) => shadow_cmd::run(&ctx, command),
        Command::Keygen(args) => keygen::run(args),
    }
}
