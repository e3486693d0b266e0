//! The `approval-host` command: ask a deployment whether a call may proceed, and read session logs.
//!
//! Exit codes: 0 when the command did its job (whatever the outcome of a request), 1 when it could
//! not (an I/O failure, a log that fails its check), 2 for a bad argument or deployment file.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use approval_host::check::check_file;
use approval_host::store::validate_session_id;
use approval_host::{ApprovalRequest, ApprovalService, Deployment, DirStore};
use clap::{Parser, Subcommand};
use tokio_util::sync::CancellationToken;

/// Decides whether an AI agent's tool call may proceed, through a waterfall of answerers, with
/// every question and decision on a durable session log.
#[derive(Parser, Debug)]
#[command(name = "approval-host", version, about, long_about = None)]
struct Cli {
    /// Where session logs live (`<DIR>/sessions/<session>.jsonl`).
    #[arg(
        long,
        global = true,
        value_name = "DIR",
        default_value = ".approval-host"
    )]
    state_dir: PathBuf,

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
        /// The deployment file (TOML).
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// Print `{"outcome":"..."}` instead of the bare outcome.
        #[arg(long)]
        json: bool,
    },
    /// Print a session log readably and check it: every approval/asked has exactly one
    /// approval/decided, all inside turns. Exits 1 naming the first problem.
    Log {
        /// The session id.
        session: String,
    },
}

/// An error that is the user's input, not the host's failure: exit 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct UsageError(String);

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("approval-host: {err:#}");
            if err.is::<UsageError>() || err.is::<approval_host::ConfigError>() {
                ExitCode::from(2)
            } else {
                ExitCode::from(1)
            }
        }
    }
}

fn run(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::Ask {
            session,
            agent,
            tool,
            call_id,
            reason,
            config,
            json,
        } => {
            validate_session_id(&session).map_err(|e| UsageError(e.to_string()))?;
            if tool.is_empty() {
                return Err(UsageError("--tool must not be empty".to_owned()).into());
            }
            let deployment = match &config {
                Some(path) => Deployment::load(path)?,
                None => Deployment::embedded(),
            };
            let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
            let outcome = runtime.block_on(ask(
                &cli.state_dir,
                &deployment,
                &session,
                &agent,
                &tool,
                call_id,
                reason,
            ))?;
            if json {
                println!("{}", serde_json::json!({ "outcome": outcome.as_str() }));
            } else {
                println!("{outcome}");
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Log { session } => {
            validate_session_id(&session).map_err(|e| UsageError(e.to_string()))?;
            print_log(&DirStore::new(&cli.state_dir).session_path(&session))
        }
    }
}

async fn ask(
    state_dir: &Path,
    deployment: &Deployment,
    session: &str,
    agent: &str,
    tool: &str,
    call_id: Option<String>,
    reason: Option<String>,
) -> Result<approval_host::Outcome> {
    let service = ApprovalService::open_dir(state_dir, deployment.default_policy);
    let agent = service.agent(session, agent).await?;
    if service.turn_open(session).await? {
        tracing::warn!(session, "closing a turn left open by an interrupted run");
        service.end_turn(session).await?;
    }
    service.start_turn(session).await?;
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
    let outcome = service.request(request).await?;
    service.end_turn(session).await?;
    Ok(outcome)
}

fn print_log(path: &Path) -> Result<ExitCode> {
    if !path.exists() {
        anyhow::bail!("no session log at {}", path.display());
    }
    let checked = check_file(path).with_context(|| format!("reading {}", path.display()))?;
    for r in &checked.records {
        println!(
            "{:>5}  {}  {:<17} {}",
            r.seq,
            r.ts,
            r.event.kind(),
            r.event.data()
        );
    }
    match checked.problem {
        Some(problem) => {
            eprintln!("approval-host: {}: {problem}", path.display());
            Ok(ExitCode::from(1))
        }
        None => {
            let s = checked.summary;
            println!(
                "ok: {} records, {} turns, {} questions, each decided once inside its turn",
                s.records, s.turns, s.questions
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}
