//! `approval-host shadow report`: what the shadow plugins said on live traffic; `shadow settle`:
//! the shadows of a question an in-process hook settled, run after that hook answered and
//! exited (it starts this, detached, so its answer waits for no shadow).

use std::process::ExitCode;

use anyhow::Result;
use approval_host::replay::shadowed;

use crate::{Context, UsageError, wiring};

/// Shadow plugins (`[[plugin]] mode = "shadow"`).
#[derive(clap::Subcommand, Debug)]
pub(crate) enum ShadowCommand {
    /// Each shadow version's agreement with the real decisions, and every disagreement.
    ///
    /// Reads the `approval/shadowed` records of every session in the store (the state
    /// directory, or --store). Exits 0 when every shadow agreed, 1 when one disagreed.
    ///
    /// Example: `approval-host shadow report --since 7d`
    Report {
        /// Only what the shadows said in this last stretch of time (`7d`, `12h`).
        #[arg(long, value_name = "DURATION")]
        since: Option<String>,
        /// Print the report as one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Run the deployment's shadows on the settled question of SESSION about CALL-ID and record
    /// what they would have answered (what an in-process hook starts, detached, once it has
    /// answered).
    #[command(hide = true)]
    Settle {
        /// The deployment file.
        #[arg(long, value_name = "FILE")]
        config: std::path::PathBuf,
        /// The session.
        #[arg(long, value_name = "S")]
        session: String,
        /// The call the question is about.
        #[arg(long, value_name = "ID")]
        call_id: String,
    },
}

/// Runs `shadow`.
pub(crate) fn run(ctx: &Context, command: ShadowCommand) -> Result<ExitCode> {
    let (since, json) = match command {
        ShadowCommand::Report { since, json } => (since, json),
        ShadowCommand::Settle {
            config,
            session,
            call_id,
        } => return settle(ctx, &config, &session, &call_id),
    };
    let since = since
        .as_deref()
        .map(|d| {
            humantime::parse_duration(d)
                .map(|d| std::time::SystemTime::now() - d)
                .map_err(|e| UsageError(format!("--since {d:?}: {e}")))
        })
        .transpose()?;
    let store = wiring::open(ctx, None, false)?;
    let report = shadowed::read(&*store, since)?;
    if json {
        println!("{}", report.to_json());
    } else {
        print!("{}", report.to_text());
    }
    Ok(ExitCode::from(u8::from(report.any_disagreement())))
}

/// How long `settle` waits for the hook that settled the question to let go of its log.
const LOCK_PATIENCE: std::time::Duration = std::time::Duration::from_secs(10);

/// `shadow settle`: the shadows of one settled question, recorded on its session's log.
fn settle(
    ctx: &Context,
    config: &std::path::Path,
    session: &str,
    call_id: &str,
) -> Result<ExitCode> {
    use approval_host::{ApprovalError, LogError};
    let deployment = approval_host::Deployment::load(config)?;
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        let service = wiring::service(ctx, &deployment)?;
        let plugins = wiring::mount(&service, &deployment, &ctx.dir, true)?;
        let started = std::time::Instant::now();
        // The hook that answered may still hold the log for a moment.
        let handed = loop {
            match service.hand_settled(session, call_id).await {
                Err(ApprovalError::Log(LogError::Locked { .. }))
                    if started.elapsed() < LOCK_PATIENCE =>
                {
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                }
                other => break other?,
            }
        };
        if handed.is_none() {
            tracing::warn!(
                session,
                call_id,
                "no settled question about this call to shadow"
            );
        }
        if let Some(plugins) = plugins {
            plugins.shadows_done().await;
        }
        anyhow::Ok(ExitCode::SUCCESS)
    })
}

/// Starts `shadow settle` for the question of `session` about `call_id`, detached (its own
/// process group, no standard streams), so the hook that answered exits at once.
pub(crate) fn start_settle(ctx: &Context, config: &std::path::Path, session: &str, call_id: &str) {
    use std::os::unix::process::CommandExt as _;
    let Ok(exe) = std::env::current_exe() else {
        return;
    };
    let mut command = std::process::Command::new(exe);
    command.arg("--state-dir").arg(&ctx.dir);
    if let Some(store) = &ctx.store {
        command.arg("--store").arg(store);
    }
    command
        .args(["shadow", "settle", "--config"])
        .arg(config)
        .args(["--session", session, "--call-id", call_id])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .process_group(0);
    if let Err(e) = command.spawn() {
        tracing::warn!(error = %e, "could not start the shadows of this question");
    }
}
