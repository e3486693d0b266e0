//! `approval-host acp`: a scripted agent over ACP on stdio, to answer approvals from a client.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, Result};
use approval_host::Deployment;
use approval_host::acp::{Script, ScriptedAgent};

use crate::{Context, UsageError, wiring};

/// The arguments of `acp`.
#[derive(clap::Args, Debug)]
pub(crate) struct AcpArgs {
    /// The deployment file (TOML): default policy, plugins, hooks, sandbox mode.
    #[arg(long, value_name = "FILE")]
    pub(crate) config: PathBuf,
    /// The script standing in for the model (JSON: `{"turns": [{"tool_calls": [...],
    /// "message": "..."}]}`).
    #[arg(long, value_name = "SCRIPT")]
    pub(crate) script: PathBuf,
}

/// Runs `acp`.
pub(crate) fn run(ctx: &Context, args: AcpArgs) -> Result<ExitCode> {
    let AcpArgs { config, script } = args;
    let deployment = Deployment::load(&config)?;
    let script = Script::load(&script).map_err(|e| UsageError(e.to_string()))?;
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    runtime.block_on(acp(ctx, &deployment, script))?;
    Ok(ExitCode::SUCCESS)
}

async fn acp(ctx: &crate::Context, deployment: &Deployment, script: Script) -> Result<()> {
    let state_dir = ctx.dir.as_path();
    use tokio_util::compat::{TokioAsyncReadCompatExt, TokioAsyncWriteCompatExt};
    let service = crate::wiring::service(ctx, deployment)?;
    let _plugins = wiring::mount(&service, deployment, state_dir, ctx.quiet)?;
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
