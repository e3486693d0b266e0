//! `approval-host ask`: open a turn, ask whether one call may proceed, close the turn, print the
//! outcome.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, Result};
use approval_host::audit::store::validate_session_id;
use approval_host::{ApprovalRequest, Deployment};
use tokio_util::sync::CancellationToken;

use crate::{Context, UsageError, wiring};

/// The arguments of `ask`.
#[derive(clap::Args, Debug)]
pub(crate) struct AskArgs {
    /// The asking session's id.
    #[arg(long, value_name = "S")]
    pub(crate) session: String,
    /// The asking agent's id.
    #[arg(long, value_name = "A")]
    pub(crate) agent: String,
    /// The tool the call is for.
    #[arg(long, value_name = "T")]
    pub(crate) tool: String,
    /// The exact call id.
    #[arg(long, value_name = "C")]
    pub(crate) call_id: Option<String>,
    /// A human-readable reason shown to the answerer.
    #[arg(long, value_name = "R")]
    pub(crate) reason: Option<String>,
    /// The deployment file (TOML): default policy and plugins.
    #[arg(long, value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
    /// The call's JSON arguments, recorded as its `tool/call` event first so gates can read
    /// them (needs --call-id).
    #[arg(long, value_name = "JSON", requires = "call_id")]
    pub(crate) arguments: Option<String>,
    /// Print the decision as the log records it, `{"outcome", "answerer"?, "digest"?,
    /// "failure"?, "reason"?}`, instead of the bare outcome.
    #[arg(long)]
    pub(crate) json: bool,
}

/// Runs `ask`.
pub(crate) fn run(ctx: &Context, args: AskArgs) -> Result<ExitCode> {
    let AskArgs {
        session,
        agent,
        tool,
        call_id,
        reason,
        config,
        arguments,
        json,
    } = args;
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
        ctx,
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

struct Ask<'a> {
    session: &'a str,
    agent: &'a str,
    tool: &'a str,
    call_id: Option<String>,
    reason: Option<String>,
    arguments: Option<serde_json::Value>,
}

async fn ask(
    ctx: &crate::Context,
    deployment: &Deployment,
    ask: Ask<'_>,
) -> Result<approval_host::Verdict> {
    let state_dir = ctx.dir.as_path();
    let Ask {
        session,
        agent,
        tool,
        call_id,
        reason,
        arguments,
    } = ask;
    let service = crate::wiring::service(ctx, deployment)?;
    let plugins = wiring::mount(&service, deployment, state_dir, ctx.quiet)?;
    let agent = service.agent(session, agent).await?;
    if service.end_turn_if_open(session).await? {
        tracing::warn!(session, "closed a turn left open by an interrupted run");
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
    // The shadows' answers are recorded before the command ends.
    if let Some(plugins) = &plugins {
        plugins.shadows_done().await;
    }
    service.end_turn(session).await?;
    Ok(verdict)
}
