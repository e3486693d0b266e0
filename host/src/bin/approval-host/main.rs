//! The `approval-host` command: ask a deployment whether a call may proceed, and read session logs.
//!
//! Exit codes: 0 when the command did its job (whatever the outcome of a request), 1 when it could
//! not (an I/O failure, a log that fails its check), 2 for a bad argument or deployment file.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
mod claude_code;
mod demo;
mod init;
mod new;
mod progress;
mod project_state;
mod rules_cmd;
mod store_cmd;
mod test_cmd;

use approval_host::acp::{Script, ScriptedAgent};
use approval_host::assemble::{self, AssembleError};
use approval_host::plugin::QuarantinePolicy;
use approval_host::plugin::inspect::inspect_bytes;
use approval_host::serve::{ServeError, ServeOptions, Server};
use approval_host::store::validate_session_id;
use approval_host::{
    ApprovalRequest, ApprovalService, Deployment, DirStore, Mounted, PluginError, PluginHost,
    PluginSpec, Role,
};
use clap::{Parser, Subcommand};
use tokio_util::sync::CancellationToken;

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
    Ask {
        /// The asking session's id.
        #[arg(long, value_name = "S")]
        session: String,
        /// The asking agent's id.
        #[arg(long, value_name = "A")]
        agent: String,
        /// The tool the call is for.
        #[arg(long, value_name = "T")]
        tool: String,
        /// The exact call id.
        #[arg(long, value_name = "C")]
        call_id: Option<String>,
        /// A human-readable reason shown to the answerer.
        #[arg(long, value_name = "R")]
        reason: Option<String>,
        /// The deployment file (TOML): default policy and plugins.
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// The call's JSON arguments, recorded as its `tool/call` event first so gates can read
        /// them (needs --call-id).
        #[arg(long, value_name = "JSON", requires = "call_id")]
        arguments: Option<String>,
        /// Print the decision as the log records it, `{"outcome", "answerer"?, "digest"?,
        /// "failure"?, "reason"?}`, instead of the bare outcome.
        #[arg(long)]
        json: bool,
    },
    /// Check whether a component fits the plugin world.
    ///
    /// Reports its exports, its imports (only the host interface and WASI 0.2) and its API
    /// version (approval:plugin/answerer@0.1.x or 0.2.x). Exits 1 with the exact mismatch. Compiled components are cached under `<state-dir>/cache`.
    ///
    /// Example: `approval-host check target/guests/python/allow-tools.wasm`
    Check {
        /// The component file.
        plugin: PathBuf,
    },
    /// Write a plugin skeleton in any of four languages.
    ///
    /// Its source, a build script, the WIT contract, a sample deployment and sample conformance
    /// cases, in a new directory NAME (or --dir).
    ///
    /// Example: `approval-host new no-secrets --lang python`, then `approval-host test no-secrets`
    New {
        /// The plugin's name (lowercase letters, digits and '-').
        name: String,
        /// The language.
        #[arg(long, value_enum)]
        lang: new::Lang,
        /// What the plugin is in the waterfall.
        #[arg(long, value_enum, default_value = "gate")]
        role: new::Role,
        /// Where to write it [default: ./NAME].
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
        /// (No state directory: this command neither reads nor writes one.)
        #[arg(id = "state_dir", long = "state-dir", value_name = "DIR", hide = true)]
        no_state_dir: Option<PathBuf>,
        /// (No store: this command opens no log.)
        #[arg(id = "store", long = "store", value_name = "URL", hide = true)]
        no_store: Option<String>,
    },
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
    Conform {
        /// The component.
        plugin: PathBuf,
        /// The case file.
        #[arg(long, value_name = "FILE")]
        cases: PathBuf,
        /// The plugin's name, which selects the cases [default: the file's stem].
        #[arg(long, value_name = "NAME")]
        name: Option<String>,
    },
    /// Build, check and conform a plugin made by `new`.
    ///
    /// Runs its build.sh, checks the component against the plugin world, and runs its
    /// conformance cases: exits 0 when it is ready to use, 1 naming the step that failed.
    ///
    /// Example: `approval-host new no-secrets --lang rust && approval-host test no-secrets`
    Test {
        /// The plugin's directory [default: .].
        #[arg(default_value = ".")]
        dir: PathBuf,
    },
    /// Turn a core WebAssembly module (C, wasi-libc) into a plugin component.
    ///
    /// The module is WASI preview1, with the component type `wit-bindgen` embeds (e.g. from
    /// clang and wasi-libc); its WASI imports are adapted to WASI 0.2, then the component is
    /// checked as `check` does. Exits 1 when the module cannot become a plugin.
    ///
    /// Example: `approval-host componentize gate.core.wasm -o gate.wasm`
    Componentize {
        /// The core module.
        module: PathBuf,
        /// Where to write the component.
        #[arg(short, long, value_name = "FILE")]
        output: PathBuf,
    },
    /// Serve the host over JSON-RPC 2.0 (stdio or a Unix socket).
    ///
    /// One message per line, over stdio or a Unix socket for many clients, with the
    /// deployment's plugins hot-reloaded when their files change.
    ///
    /// Example: `approval-host --state-dir ~/.approval-host serve --config deploy.toml --socket ~/.approval-host/serve.sock`
    Serve {
        /// The deployment file (TOML).
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
        /// Listen on this Unix socket instead of stdio.
        #[arg(long, value_name = "PATH")]
        socket: Option<PathBuf>,
        /// Do not watch the deployment and plugin files (reload only on `plugins/reload`).
        #[arg(long)]
        no_watch: bool,
        /// Quarantine a plugin after more than this many failures within the window.
        #[arg(long, value_name = "N", default_value_t = 5)]
        quarantine_failures: usize,
        /// The window failures are counted in, in seconds.
        #[arg(long, value_name = "SECONDS", default_value_t = 60)]
        quarantine_window: u64,
        /// How long a quarantine lasts, in seconds (a reload ends it sooner).
        #[arg(long, value_name = "SECONDS", default_value_t = 30)]
        quarantine_backoff: u64,
        /// Create or migrate the database schema first when it is behind (see `db migrate`).
        #[arg(long)]
        migrate: bool,
        /// Also listen on TCP at this address (`host:port`), over TLS (--tls-cert and
        /// --tls-key) unless --insecure-plaintext. Every connection authenticates with a token
        /// (`[[token]]` in the deployment; see `token new`).
        #[arg(long, value_name = "ADDR")]
        listen: Option<String>,
        /// Also serve the web console at this address (`host:port`): pending questions answered
        /// from a browser. Needs `[[answerer]] kind = "web"` and tokens with the answerer role in
        /// the deployment; TLS as for --listen.
        #[arg(long, value_name = "ADDR")]
        http: Option<String>,
        /// The server's certificate chain (PEM) for --listen and --http.
        #[arg(long, value_name = "FILE")]
        tls_cert: Option<PathBuf>,
        /// The server's private key (PEM) for --listen and --http.
        #[arg(long, value_name = "FILE")]
        tls_key: Option<PathBuf>,
        /// Require client certificates issued by these authorities (PEM).
        #[arg(long, value_name = "FILE", requires = "tls_cert")]
        tls_client_ca: Option<PathBuf>,
        /// Listen without TLS: tokens and questions cross the network in the clear. Only for a
        /// network you trust; a warning is logged at start.
        #[arg(long, conflicts_with_all = ["tls_cert", "tls_key"])]
        insecure_plaintext: bool,
    },
    /// Tokens for `serve` clients.
    #[command(subcommand)]
    Token(TokenCommand),
    /// Adapters for agent harnesses.
    #[command(subcommand)]
    Hook(HookCommand),
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
    Acp {
        /// The deployment file (TOML): default policy, plugins, hooks, sandbox mode.
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
        /// The script standing in for the model (JSON: `{"turns": [{"tool_calls": [...],
        /// "message": "..."}]}`).
        #[arg(long, value_name = "SCRIPT")]
        script: PathBuf,
    },
    /// Show every outcome with its audit trail, on the embedded default.
    ///
    /// A bundled deployment of the example plugins answers scripted requests.
    ///
    /// Example: `approval-host demo` (or `approval-host --state-dir /tmp/demo demo` to keep the log)
    Demo,
    /// Print and check a session log, or list the sessions.
    ///
    /// Checks that every approval/asked has exactly one approval/decided, all inside turns; exits
    /// 1 naming the first problem. Without a session, lists the sessions: id, records, last
    /// activity, whether a turn is open.
    ///
    /// Example: `approval-host --state-dir .approval-host log` then `... log <session>`
    Log {
        /// The session id.
        session: Option<String>,
    },
    /// Check session logs for tampering.
    ///
    /// Each line commits to the one before it
    /// (hash chain from the session's genesis), seq has no gap, and every question is decided
    /// once inside its turn. Exits 0 when every log is intact (warnings are not tampering), 1
    /// naming the session, the first bad line and what is wrong.
    ///
    /// Example: `approval-host --state-dir ~/.approval-host verify --all`
    Verify {
        /// The sessions to check.
        sessions: Vec<String>,
        /// Check every session in the state directory.
        #[arg(long, conflicts_with = "sessions")]
        all: bool,
        /// One JSON object per session instead of text.
        #[arg(long)]
        json: bool,
        /// The public key of the deployment's `[audit] signing-key` (`KEY.pub`, written by
        /// `keygen`): also check each log against its signed checkpoints, which finds a log cut
        /// short, replaced whole, or extended after its last checkpoint.
        #[arg(long, value_name = "FILE")]
        public_key: Option<PathBuf>,
        /// Read checkpoint logs from DIR (the deployment's `[audit] checkpoint-copy`) instead
        /// of the state directory's `checkpoints/`: a copy whoever can write the state directory
        /// cannot cut short or remove.
        #[arg(long, value_name = "DIR", requires = "public_key")]
        checkpoints: Option<PathBuf>,
    },
    /// Print session records as JSON lines, for another system to keep.
    ///
    /// Each line is `{"session": ID, "record": RECORD}`, the record exactly as stored (so its
    /// hash chain still verifies); sessions in name order, records in order. Works on the state
    /// directory or a database (--store).
    ///
    /// Example: `approval-host --store postgres://approvals@db/approvals export --since 2026-12-01T00:00:00Z > audit.jsonl`
    Export {
        /// Only these sessions (every session and rules log when none is named).
        #[arg(long = "session", value_name = "S")]
        sessions: Vec<String>,
        /// Only records at or after this time (RFC 3339).
        #[arg(long, value_name = "TIME")]
        since: Option<String>,
    },
    /// The shared database: create or migrate its schema, import a state directory.
    #[command(subcommand)]
    Db(store_cmd::DbCommand),
    /// Set the host up for an agent harness.
    Init {
        /// The harness.
        #[command(subcommand)]
        harness: InitCommand,
        /// (Given to the harness's subcommand, which says where its hook keeps state.)
        #[arg(id = "state_dir", long = "state-dir", value_name = "DIR", hide = true)]
        no_state_dir: Option<PathBuf>,
        /// (No store: this command opens no log.)
        #[arg(id = "store", long = "store", value_name = "URL", hide = true)]
        no_store: Option<String>,
    },
    /// Standing rules: list, add, revoke, explain.
    #[command(subcommand)]
    Rules(rules_cmd::RulesCommand),
    /// Create the Ed25519 key that signs audit checkpoints.
    ///
    /// Writes the key at FILE (mode 0600; keep it outside the state directory) and its public
    /// key at FILE.pub. Refuses to overwrite a key.
    ///
    /// Example: `approval-host keygen ~/.config/approval-host/audit.key`, then
    /// `[audit] signing-key = "~/.config/approval-host/audit.key"` in the deployment file.
    Keygen {
        /// Where to write the signing key.
        file: PathBuf,
        /// (No state directory: this command neither reads nor writes one.)
        #[arg(id = "state_dir", long = "state-dir", value_name = "DIR", hide = true)]
        no_state_dir: Option<PathBuf>,
        /// (No store: this command opens no log.)
        #[arg(id = "store", long = "store", value_name = "URL", hide = true)]
        no_store: Option<String>,
    },
}

#[derive(Subcommand, Debug)]
enum TokenCommand {
    /// Make a token: print it once, and its `[[token]]` entry (only its SHA-256 is kept).
    ///
    /// With --config the entry is appended to that deployment file (a running `serve` picks it
    /// up on reload). The client presents the token in `initialize` (`"token": "aht_…"`; the
    /// Claude Code hook reads APPROVAL_HOST_TOKEN).
    ///
    /// Example: `approval-host token new --name ci --role agent --sessions ci- --config deploy.toml`
    New {
        /// Its name in logs and in the deployment file.
        #[arg(long, value_name = "NAME")]
        name: String,
        /// What it may do (repeatable): agent, answerer, admin.
        #[arg(long = "role", value_name = "ROLE", required = true)]
        roles: Vec<String>,
        /// Limit it to sessions whose id starts with PREFIX (repeatable).
        #[arg(long = "sessions", value_name = "PREFIX")]
        sessions: Vec<String>,
        /// Append the entry to this deployment file.
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// (No state directory: this command neither reads nor writes one.)
        #[arg(id = "state_dir", long = "state-dir", value_name = "DIR", hide = true)]
        no_state_dir: Option<PathBuf>,
        /// (No store: this command opens no log.)
        #[arg(id = "store", long = "store", value_name = "URL", hide = true)]
        no_store: Option<String>,
    },
}

#[derive(Subcommand, Debug)]
enum InitCommand {
    /// Write a deployment of the example gates for Claude Code's tool names, install its plugins
    /// beside it, and merge the PreToolUse hook into Claude Code's settings.json. Never
    /// overwrites: other settings and hooks stay, an existing deployment is kept, and a second
    /// run changes nothing.
    ///
    /// Example: `approval-host init claude-code --project .` (then commit `.claude/settings.json`
    /// and `.approval-host/`).
    ClaudeCode {
        /// Set up this project: the deployment and plugins in `DIR/.approval-host/`, the hook in
        /// `DIR/.claude/settings.json`, state outside the project.
        #[arg(long, value_name = "DIR", conflicts_with = "user")]
        project: Option<PathBuf>,
        /// Set up every project of this user: `~/.approval-host/` and `~/.claude/settings.json`.
        #[arg(long)]
        user: bool,
        /// Show what would change (a diff) and write nothing.
        #[arg(long)]
        dry_run: bool,
        /// Where the hook keeps logs, rules and its cache [default for --project: the user's
        /// state directory, keyed by the project's path (see --project-state); for --user:
        /// ~/.approval-host].
        #[arg(id = "state_dir", long = "state-dir", value_name = "DIR")]
        state_dir: Option<PathBuf>,
        /// (No store: this command opens no log.)
        #[arg(id = "store", long = "store", value_name = "URL", hide = true)]
        no_store: Option<String>,
    },
}

#[derive(Subcommand, Debug)]
enum HookCommand {
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
    ClaudeCode {
        /// The deployment file (TOML).
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// Ask a running `serve` on this Unix socket instead of loading the deployment here.
        #[arg(long, value_name = "PATH")]
        socket: Option<PathBuf>,
        /// When the server is missing, refuses or does not answer in time.
        #[arg(long, value_enum, default_value = "ask", requires = "socket")]
        fallback: claude_code::Fallback,
        /// How long to wait for the server, in seconds.
        #[arg(
            long,
            value_name = "SECONDS",
            default_value_t = 50.0,
            requires = "socket"
        )]
        timeout: f64,
        /// For a call nobody decided: `ask` (Claude Code prompts) or `defer` (print no decision:
        /// Claude Code's own rules and mode apply) [default: the deployment's
        /// `[claude-code] when-undecided`, else ask].
        #[arg(long, value_name = "ask|defer", value_parser = parse_when_undecided)]
        when_undecided: Option<approval_host::claude_code::WhenUndecided>,
    },
}

fn parse_when_undecided(s: &str) -> Result<approval_host::claude_code::WhenUndecided, String> {
    s.parse()
}

/// An error that is the user's input, not the host's failure: exit 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct UsageError(pub(crate) String);

fn main() -> ExitCode {
    let cli = Cli::parse();
    let level = match (cli.quiet, cli.verbose) {
        (true, _) => Some("error"),
        (false, 0) => None,
        (false, 1) => Some("info"),
        (false, 2) => Some("debug"),
        (false, _) => Some("trace"),
    };
    progress::QUIET.store(cli.quiet, std::sync::atomic::Ordering::Relaxed);
    let filter = match level {
        Some(level) => tracing_subscriber::EnvFilter::new(level),
        None => tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
    };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(filter)
        .init();
    match run(cli) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("approval-host: {err:#}");
            if err.is::<UsageError>()
                || err.is::<approval_host::ConfigError>()
                || err.is::<clap::Error>()
            {
                ExitCode::from(2)
            } else {
                ExitCode::from(1)
            }
        }
    }
}

const DEFAULT_STATE_DIR: &str = ".approval-host";

fn run(cli: Cli) -> Result<ExitCode> {
    store_cmd::set_url(cli.store.clone());
    let state_dir = match (&cli.state_dir, &cli.project_state) {
        (Some(dir), _) => dir.clone(),
        (None, Some(project)) => project_state::for_project(project)?,
        (None, None) => PathBuf::from(DEFAULT_STATE_DIR),
    };
    match cli.command {
        Command::Ask {
            session,
            agent,
            tool,
            call_id,
            reason,
            config,
            arguments,
            json,
        } => {
            validate_session_id(&session).map_err(|e| UsageError(e.to_string()))?;
            for (flag, value) in [
                ("--agent", Some(&agent)),
                ("--tool", Some(&tool)),
                ("--call-id", call_id.as_ref()),
            ] {
                if value.is_some_and(|v| v.trim().is_empty()) {
                    return Err(UsageError(format!("{flag} must not be empty")).into());
                }
            }
            let arguments = arguments
                .map(|a| {
                    serde_json::from_str::<serde_json::Value>(&a)
                        .map_err(|e| UsageError(format!("--arguments is not JSON: {e}")))
                })
                .transpose()?;
            let deployment = match &config {
                Some(path) => Deployment::load(path)?,
                None => Deployment::embedded(),
            };
            let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
            let verdict = runtime.block_on(ask(
                &state_dir,
                &deployment,
                Ask {
                    session: &session,
                    agent: &agent,
                    tool: &tool,
                    call_id,
                    reason,
                    arguments,
                },
            ))?;
            if json {
                println!("{}", verdict.to_json());
            } else {
                println!("{}", verdict.outcome);
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Log { session: None } => store_cmd::list_sessions(&state_dir),
        Command::Log {
            session: Some(session),
        } => store_cmd::print_log(&state_dir, &session),
        Command::Export { sessions, since } => store_cmd::export(&state_dir, sessions, since),
        Command::Db(command) => store_cmd::db(&state_dir, command),
        Command::Token(TokenCommand::New {
            name,
            roles,
            sessions,
            config,
            ..
        }) => token_new(&name, &roles, &sessions, config.as_deref()),
        Command::Verify {
            sessions,
            all,
            json,
            public_key,
            checkpoints,
        } => {
            let key = public_key
                .map(|p| approval_host::audit::checkpoint::load_public_key(&p))
                .transpose()
                .map_err(|e| UsageError(format!("--public-key {e}")))?;
            if let Some(dir) = &checkpoints
                && !dir.is_dir()
            {
                return Err(UsageError(format!(
                    "--checkpoints {}: not a directory",
                    dir.display()
                ))
                .into());
            }
            let checkpoints = checkpoints.unwrap_or_else(|| state_dir.join("checkpoints"));
            verify(&state_dir, sessions, all, json, key.as_ref(), &checkpoints)
        }
        Command::Keygen { file, .. } => {
            let public = approval_host::audit::checkpoint::keygen(&file)
                .map_err(|e| UsageError(e.to_string()))?;
            println!(
                "signing key: {} (keep it secret, outside the state directory)",
                file.display()
            );
            println!(
                "public key:  {} (give it to whoever runs `verify`)",
                public.display()
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Rules(command) => rules_cmd::run(&state_dir, command),
        Command::Test { dir } => test_cmd::run(&state_dir, &dir),
        Command::Init {
            harness:
                InitCommand::ClaudeCode {
                    project,
                    user,
                    dry_run,
                    state_dir: hook_state,
                    ..
                },
            ..
        } => {
            let target = match (project, user) {
                (Some(dir), false) => init::Target::Project(dir),
                (None, true) => init::Target::User(
                    std::env::var_os("HOME")
                        .map(PathBuf::from)
                        .ok_or_else(|| UsageError("--user needs $HOME".to_owned()))?,
                ),
                _ => {
                    return Err(UsageError("say where: --project DIR or --user".to_owned()).into());
                }
            };
            let hook_state = hook_state.or(cli.state_dir.clone());
            init::run(&target, hook_state.as_deref(), dry_run)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Check { plugin } => check(&state_dir, &plugin),
        Command::Componentize { module, output } => componentize(&state_dir, &module, &output),
        Command::New {
            name,
            lang,
            role,
            dir,
            ..
        } => {
            new::check_name(&name).map_err(UsageError)?;
            let dir = dir.unwrap_or_else(|| PathBuf::from(&name));
            if dir.exists() {
                return Err(UsageError(format!(
                    "{} already exists; `new` writes only into a new directory",
                    dir.display()
                ))
                .into());
            }
            // The sample deployment's sample question: a gate rejects `bash`, an answerer
            // grants `read` once.
            let tool = match role {
                new::Role::Gate => "bash",
                new::Role::Answerer => "read",
            };
            for file in new::write(&dir, &name, lang, role)? {
                println!("{}", file.display());
            }
            println!(
                "next: approval-host test {}, then approval-host ask --session s1 --agent a1 --tool {tool} --config {0}/deployment.toml",
                dir.display()
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Conform {
            plugin,
            cases,
            name,
        } => {
            let suite = approval_host::conformance::Suite::load(&cases)
                .map_err(|e| UsageError(e.to_string()))?;
            let name = name.unwrap_or_else(|| plugin_name(&plugin));
            let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
            runtime.block_on(conform(&state_dir, &plugin, &suite, &name, &cases))
        }
        Command::Hook(HookCommand::ClaudeCode {
            config,
            socket,
            fallback,
            timeout,
            when_undecided,
        }) => {
            if !(timeout.is_finite() && timeout > 0.0) {
                return Err(UsageError("--timeout must be a positive number".to_owned()).into());
            }
            let mut input = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut input)
                .map_err(|e| UsageError(format!("reading the hook input: {e}")))?;
            let options = claude_code::Options {
                config,
                socket,
                fallback,
                timeout: Duration::from_secs_f64(timeout),
                when_undecided,
            };
            if let Some(output) = claude_code::run(&state_dir, &options, &input)? {
                println!("{output}");
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Serve {
            config,
            socket,
            no_watch,
            quarantine_failures,
            quarantine_window,
            quarantine_backoff,
            migrate,
            listen,
            http,
            tls_cert,
            tls_key,
            tls_client_ca,
            insecure_plaintext,
        } => {
            let flag = if listen.is_some() {
                "--listen"
            } else {
                "--http"
            };
            let tls = match (
                listen.is_some() || http.is_some(),
                tls_cert,
                tls_key,
                insecure_plaintext,
            ) {
                (false, None, None, false) => None,
                (false, ..) => {
                    return Err(UsageError(
                        "--tls-cert, --tls-key and --insecure-plaintext go with --listen or --http"
                            .to_owned(),
                    )
                    .into());
                }
                (true, Some(cert), Some(key), false) => {
                    let files = approval_host::serve::tls::TlsFiles {
                        cert,
                        key,
                        client_ca: tls_client_ca,
                    };
                    Some(
                        approval_host::serve::tls::acceptor(&files)
                            .map_err(|e| UsageError(format!("{flag}: {e}")))?,
                    )
                }
                (true, None, None, true) => None,
                (true, ..) => {
                    return Err(UsageError(format!(
                        "{flag} needs --tls-cert and --tls-key (or, on a network you trust, --insecure-plaintext)"
                    ))
                    .into());
                }
            };
            let network = listen.map(|addr| (addr, tls.clone()));
            let console = http.map(|addr| (addr, tls));
            let options = ServeOptions {
                config,
                state_dir,
                store_url: cli.store.clone(),
                migrate,
                quarantine: QuarantinePolicy {
                    max_failures: quarantine_failures,
                    window: Duration::from_secs(quarantine_window),
                    backoff: Duration::from_secs(quarantine_backoff),
                },
            };
            let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
            let served = runtime.block_on(serve(options, socket, network, console, !no_watch));
            // The server and its sessions are gone by now (leases released); stdin's reader
            // thread may still block on a client that keeps its end open: do not wait for it.
            runtime.shutdown_timeout(Duration::from_millis(500));
            served?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Acp { config, script } => {
            let deployment = Deployment::load(&config)?;
            let script = Script::load(&script).map_err(|e| UsageError(e.to_string()))?;
            let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
            runtime.block_on(acp(&state_dir, &deployment, script))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Demo => {
            let temp;
            let dir = match &cli.state_dir {
                Some(dir) => dir.clone(),
                None => {
                    temp = tempfile::tempdir().context("creating a state directory")?;
                    temp.path().to_owned()
                }
            };
            let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
            runtime.block_on(demo::run(&dir, cli.state_dir.is_some()))?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

async fn serve(
    options: ServeOptions,
    socket: Option<PathBuf>,
    network: Option<(String, Option<tokio_rustls::TlsAcceptor>)>,
    console: Option<(String, Option<tokio_rustls::TlsAcceptor>)>,
    watch: bool,
) -> Result<()> {
    let server = Server::start(options).await.map_err(|e| match e {
        ServeError::Config(e) => anyhow::Error::new(e),
        other => anyhow::Error::new(UsageError(other.to_string())),
    })?;
    let _watcher = if watch {
        Some(server.watch(Duration::from_millis(200)).await?)
    } else {
        None
    };
    let web = async {
        match &console {
            Some((addr, tls)) => {
                if tls.is_none() {
                    tracing::warn!(
                        addr,
                        "web console WITHOUT TLS (--insecure-plaintext): tokens and cookies cross the network in the clear"
                    );
                }
                let listener = tokio::net::TcpListener::bind(addr)
                    .await
                    .map_err(|e| approval_host::serve::ServeError::Io(format!("{addr}: {e}")))?;
                tracing::info!(addr, "web console listening");
                server.serve_console(listener, tls.clone()).await
            }
            None => std::future::pending().await,
        }
    };
    let stdio = async {
        if network.is_none() && socket.is_none() && console.is_none() {
            server.serve_stdio().await;
        } else {
            std::future::pending::<()>().await;
        }
    };
    let tcp = async {
        match &network {
            Some((addr, tls)) => {
                if tls.is_none() {
                    tracing::warn!(
                        addr,
                        "listening WITHOUT TLS (--insecure-plaintext): tokens and questions cross the network in the clear"
                    );
                }
                server.serve_tcp(addr, tls.clone(), None).await
            }
            None => std::future::pending().await,
        }
    };
    let unix = async {
        match &socket {
            Some(path) => server.serve_unix(path).await,
            None => std::future::pending().await,
        }
    };
    // SIGTERM (a service manager's stop) ends the server as Ctrl-C does: sessions close, and on a
    // database their leases are released at once rather than left to expire.
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("listening for SIGTERM")?;
    tokio::select! {
        () = stdio => {}
        served = tcp => served?,
        served = unix => served?,
        served = web => served?,
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
    }
    if let Some(path) = &socket {
        let _ = std::fs::remove_file(path);
    }
    Ok(())
}

async fn acp(state_dir: &Path, deployment: &Deployment, script: Script) -> Result<()> {
    use tokio_util::compat::{TokioAsyncReadCompatExt, TokioAsyncWriteCompatExt};
    let service = store_cmd::service(state_dir, deployment)?;
    let _plugins = mount(&service, deployment, state_dir)?;
    let agent = ScriptedAgent::new(
        service,
        script,
        approval_host::assemble::agent_options(deployment),
    );
    let transport = agent_client_protocol::ByteStreams::new(
        tokio::io::stdout().compat_write(),
        tokio::io::stdin().compat(),
    );
    agent
        .serve(transport)
        .await
        .map_err(|e| anyhow::anyhow!("the ACP connection failed: {e}"))
}

/// A plugin host keeping compiled components under `<state-dir>/cache`: a command run per tool
/// call (`ask`, the Claude Code hook) would otherwise compile a Python or JavaScript plugin, which
/// takes seconds, every time.
pub(crate) fn cached_host(state_dir: &Path) -> Result<PluginHost> {
    let host = PluginHost::with_cache(
        std::sync::Arc::new(approval_host::plugin::TracingSink),
        approval_host::plugin::cache::CompiledCache::new(state_dir.join("cache")),
    )?;
    host.observe_compiles(progress::observer());
    Ok(host)
}

/// What a deployment that cannot be put together means for the exit code: its own fault (a
/// signing key or a plugin that cannot be used, exit 2), or a failure (exit 1).
pub(crate) fn assemble_error(e: AssembleError) -> anyhow::Error {
    match e {
        AssembleError::SigningKey { .. } | AssembleError::Plugin { .. } => {
            UsageError(e.to_string()).into()
        }
        other => other.into(),
    }
}

/// Puts a deployment together on `service` (checkpointer, protections, standing rules when it
/// keeps any) and loads its plugins.
pub(crate) fn mount(
    service: &ApprovalService,
    deployment: &Deployment,
    state_dir: &Path,
) -> Result<Option<(PluginHost, Mounted)>> {
    let rules = assemble::wants_rules(&*service.store(), deployment);
    assemble::prepare(service, deployment, state_dir, rules).map_err(assemble_error)?;
    if deployment.plugins.is_empty() {
        return Ok(None);
    }
    let host = cached_host(state_dir)?;
    let mounted = assemble::mount(service, &host, deployment, QuarantinePolicy::default())
        .map_err(assemble_error)?;
    Ok(Some((host, mounted)))
}

pub(crate) async fn conform(
    state_dir: &Path,
    plugin: &Path,
    suite: &approval_host::conformance::Suite,
    name: &str,
    cases_file: &Path,
) -> Result<ExitCode> {
    use approval_host::conformance;
    let cases: Vec<_> = suite.for_plugin(name).collect();
    if cases.is_empty() {
        return Err(UsageError(format!(
            "{}: no case for plugin {name:?} (cases name it with \"gate\", or name no gate)",
            cases_file.display()
        ))
        .into());
    }
    let bytes = std::fs::read(plugin).with_context(|| format!("reading {}", plugin.display()))?;
    let state = tempfile::tempdir().context("creating a state directory")?;
    let service = ApprovalService::open_dir(state.path(), approval_host::Policy::Ask);
    let host = cached_host(state_dir)?;
    let results = conformance::run(
        &host,
        &conformance::spec(name, plugin),
        &bytes,
        cases,
        &service,
    )
    .await
    .map_err(|e| match e {
        conformance::ConformanceError::Plugin(e) => anyhow::Error::new(UsageError(e.to_string())),
        other => anyhow::Error::new(other),
    })?;
    let failed = results.iter().filter(|r| !r.passed()).count();
    for r in &results {
        let said = |reason: &Option<String>| match reason {
            Some(reason) => format!(" ({reason:?})"),
            None => String::new(),
        };
        if r.passed() {
            println!("ok    {}: {}{}", r.name, r.answer, said(&r.expect_reason));
        } else {
            println!(
                "FAIL  {}: answered {}{}, expected {}{}",
                r.name,
                r.answer,
                said(&r.reason),
                r.expect,
                said(&r.expect_reason)
            );
        }
    }
    println!("{name}: {} passed, {failed} failed", results.len() - failed);
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn componentize(state_dir: &Path, module: &Path, output: &Path) -> Result<ExitCode> {
    let bytes = std::fs::read(module).with_context(|| format!("reading {}", module.display()))?;
    let component = match approval_host::plugin::componentize::componentize(&bytes) {
        Ok(component) => component,
        Err(e) => {
            println!("{}: {e}", module.display());
            return Ok(ExitCode::from(1));
        }
    };
    // Write whole or not at all: a partial component must never be loadable.
    let temp = output.with_extension("wasm.partial");
    std::fs::write(&temp, &component).with_context(|| format!("writing {}", temp.display()))?;
    std::fs::rename(&temp, output).with_context(|| format!("writing {}", output.display()))?;
    check(state_dir, output)
}

/// A plugin's name from its file: the stem, as in `allow-tools.wasm`.
fn plugin_name(path: &Path) -> String {
    path.file_stem()
        .map_or_else(|| "plugin".to_owned(), |s| s.to_string_lossy().into_owned())
}

pub(crate) fn check(state_dir: &Path, path: &Path) -> Result<ExitCode> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let host = cached_host(state_dir)?;
    let spec = PluginSpec::new(plugin_name(path), path, Role::Gate);
    match host.load_bytes(&spec, &bytes) {
        Ok(plugin) => {
            let inspection = inspect_bytes(host.engine(), &bytes).map_err(anyhow::Error::msg)?;
            println!(
                "{}: fits approval:plugin/answerer@{}",
                path.display(),
                plugin.api_version()
            );
            println!("  exports: {}", inspection.exports.join(", "));
            println!("  imports: {}", inspection.imports.join(", "));
            println!("  sha256:  {}", plugin.digest());
            if let Some((version, adds)) = approval_host::plugin::api_changes(plugin.api_version())
            {
                let newest = approval_host::plugin::NEWEST_API_VERSION;
                if version == newest {
                    println!("  api:     {version}, the newest this host serves; over 0.1 it:");
                    for change in adds {
                        println!("           - {change}");
                    }
                } else {
                    println!(
                        "  api:     {version}; this host also serves {newest}, which adds what `approval-host new` skeletons use (see docs/plugin-authors.md, \"What changed in 0.2\")"
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(PluginError::Component { reason, .. }) => {
            println!("{}: {reason}", path.display());
            Ok(ExitCode::from(1))
        }
        Err(other) => Err(other.into()),
    }
}

struct Ask<'a> {
    session: &'a str,
    agent: &'a str,
    tool: &'a str,
    call_id: Option<String>,
    reason: Option<String>,
    arguments: Option<serde_json::Value>,
}

async fn ask(
    state_dir: &Path,
    deployment: &Deployment,
    ask: Ask<'_>,
) -> Result<approval_host::Verdict> {
    let Ask {
        session,
        agent,
        tool,
        call_id,
        reason,
        arguments,
    } = ask;
    let service = store_cmd::service(state_dir, deployment)?;
    let _plugins = mount(&service, deployment, state_dir)?;
    let agent = service.agent(session, agent).await?;
    if service.turn_open(session).await? {
        tracing::warn!(session, "closing a turn left open by an interrupted run");
        service.end_turn(session).await?;
    }
    service.start_turn(session).await?;
    if let (Some(arguments), Some(call_id)) = (arguments, &call_id) {
        service
            .record_tool_call(&agent, call_id, tool, arguments)
            .await?;
    }
    let cancel = CancellationToken::new();
    let on_interrupt = cancel.clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            on_interrupt.cancel();
        }
    });
    let mut request = ApprovalRequest::new(&agent, tool).cancel(cancel);
    if let Some(c) = call_id {
        request = request.call_id(c);
    }
    if let Some(r) = reason {
        request = request.reason(r);
    }
    let verdict = service.ask(request).await?;
    service.end_turn(session).await?;
    Ok(verdict)
}

fn verify(
    state_dir: &Path,
    sessions: Vec<String>,
    all: bool,
    json: bool,
    key: Option<&ed25519_dalek::VerifyingKey>,
    checkpoints_dir: &Path,
) -> Result<ExitCode> {
    use approval_host::audit::checkpoint::{checkpoints_in, read_checkpoints};
    let store = DirStore::new(state_dir);
    // A database is read whole per session; the directory store streams each file.
    let database = store_cmd::on_database(None)
        .then(|| store_cmd::open(state_dir, None, false))
        .transpose()?;
    let sessions = if all {
        match &database {
            Some(db) => db.list()?,
            None => approval_host::Store::list(&store)?,
        }
    } else if sessions.is_empty() {
        return Err(UsageError("name the sessions to verify, or --all".to_owned()).into());
    } else {
        sessions
    };
    let mut tampered = false;
    for session in &sessions {
        validate_session_id(session).map_err(|e| UsageError(e.to_string()))?;
        let path = store.session_path(session);
        let bytes = match &database {
            Some(db) => {
                let bytes = db.read(session)?;
                if bytes.is_empty() {
                    return Err(UsageError(format!("no session log postgres:{session}")).into());
                }
                Some(bytes)
            }
            None if !path.exists() => {
                return Err(UsageError(format!("no session log at {}", path.display())).into());
            }
            None => None,
        };
        let checkpoints_file = checkpoints_in(checkpoints_dir, session);
        let checkpoints = read_checkpoints(&checkpoints_file)
            .with_context(|| format!("reading {}", checkpoints_file.display()))?;
        let against = key.map(|k| (k, checkpoints.as_slice()));
        let mut report = match &bytes {
            Some(bytes) => {
                approval_host::audit::verify::verify_reader_with(&bytes[..], session, against)
            }
            None => approval_host::audit::verify::verify_file_with(&path, session, against),
        }
        .with_context(|| format!("reading {}", path.display()))?;
        let path = match bytes {
            Some(_) => PathBuf::from(format!("postgres:{session}")),
            None => path,
        };
        if key.is_none() && !checkpoints.is_empty() {
            report
                .warnings
                .push(approval_host::audit::verify::CHECKPOINTS_UNCHECKED.to_owned());
        }
        tampered |= !report.intact();
        if json {
            let mut value = serde_json::to_value(&report)?;
            value["intact"] = report.intact().into();
            value["path"] = path.display().to_string().into();
            println!("{value}");
            continue;
        }
        match &report.problem {
            None if report.records == 0 => println!("{session}: intact, empty"),
            None => println!(
                "{session}: intact, {} records{}",
                report.records,
                match report.chained_from {
                    Some(1) => ", chained".to_owned(),
                    Some(seq) => format!(", chained from seq {seq}"),
                    None => ", unchained".to_owned(),
                }
            ),
            Some(p) => println!(
                "{session}: TAMPERED at line {} ({}): {} [{}]",
                p.line,
                p.kind.as_str(),
                p.message,
                path.display()
            ),
        }
        for w in &report.warnings {
            println!("{session}: warning: {w}");
        }
    }
    Ok(if tampered {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// `token new`: a fresh token, printed once, and its `[[token]]` entry.
fn token_new(
    name: &str,
    roles: &[String],
    sessions: &[String],
    config: Option<&Path>,
) -> Result<ExitCode> {
    use approval_host::config::token::TokenRole;
    use approval_host::serve::auth;
    for role in roles {
        if TokenRole::parse(role).is_none() {
            return Err(
                UsageError(format!("--role {role:?}: must be agent, answerer or admin")).into(),
            );
        }
    }
    let token = auth::new_token().context("reading random bytes")?;
    let quoted = |list: &[String]| {
        list.iter()
            .map(|s| format!("{s:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut entry = format!(
        "\n[[token]]\nname = {name:?}\nsha256 = \"{}\"\nroles = [{}]\n",
        auth::token_hash(&token),
        quoted(roles)
    );
    if !sessions.is_empty() {
        entry.push_str(&format!("sessions = [{}]\n", quoted(sessions)));
    }
    if let Some(path) = config {
        // The file must still load with the entry (a duplicate name, a bad prefix): check a copy
        // first, then append; the original is never left half-written.
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let dir = path.parent().unwrap_or(Path::new("."));
        let probe = tempfile::Builder::new()
            .suffix(".toml")
            .tempfile_in(dir)
            .with_context(|| format!("writing beside {}", path.display()))?;
        std::fs::write(probe.path(), format!("{text}{entry}"))?;
        std::fs::set_permissions(probe.path(), std::fs::metadata(path)?.permissions())?;
        Deployment::load(probe.path()).map_err(|e| {
            UsageError(e.to_string().replace(
                &probe.path().display().to_string(),
                &path.display().to_string(),
            ))
        })?;
        probe
            .persist(path)
            .with_context(|| format!("writing {}", path.display()))?;
        println!("token {name:?} added to {}", path.display());
    } else {
        print!("add to the deployment file:\n{entry}");
    }
    println!("\ntoken (shown once; the deployment keeps only its SHA-256):\n{token}");
    Ok(ExitCode::SUCCESS)
}
