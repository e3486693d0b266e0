//! `approval-host hook codex | gemini | copilot`: the other agent CLIs' hooks, answered in process
//! or by a warm `serve --socket` exactly as `hook claude-code` is (the same options, the same
//! fallbacks); the codecs are [`approval_host::cli_hooks`]. Every error reaches the caller, which
//! blocks the call the way the CLI honours ([`approval_host::cli_hooks::Cli::failure`]).

use anyhow::Result;
use approval_host::Deployment;
use approval_host::claude_code::{HookOptions, HookTurns, WhenUndecided};
use approval_host::cli_hooks::{self, Cli, Parsed};
use approval_host::outcome::Outcome;
use approval_host::service::Verdict;
use serde_json::Value;

use crate::UsageError;
use crate::claude_code::{
    Fallback, Options, Unanswered, server_failed, through_server, unreachable_note, with_agent,
};

/// Answers the hook input `text`; returns what to print (nothing when the CLI is left to decide).
pub(crate) fn run(
    ctx: &crate::Context,
    cli: Cli,
    options: &Options,
    text: &str,
) -> Result<Option<String>> {
    let raw: Value = serde_json::from_str(text)
        .map_err(|e| UsageError(format!("the hook input is not JSON: {e}")))?;
    let mut parsed = cli.parse(&raw).map_err(UsageError)?;
    // A malformed value only means the question is traced on a trace of its own.
    parsed.input.trace_parent = std::env::var(approval_host::telemetry::TRACEPARENT_ENV)
        .ok()
        .and_then(|v| v.parse().ok());
    let deployment = match &options.config {
        Some(path) => Some(Deployment::load(path)?),
        None => None,
    };
    let mut hook_options = HookOptions {
        when_undecided: options.when_undecided.unwrap_or_default(),
        ..HookOptions::default()
    };
    let Some(socket) = &options.socket else {
        let deployment = deployment.unwrap_or_else(Deployment::embedded);
        return in_process(ctx, &deployment, cli, &parsed, &hook_options);
    };
    let why = match through_server(
        socket,
        cli.method(),
        &raw,
        parsed.input.trace_parent,
        options,
    ) {
        Ok(printed) => return Ok(printed),
        Err(Unanswered::Failed(why)) => return Err(server_failed(socket, &why)),
        Err(Unanswered::Unreachable(why)) => why,
    };
    let note = unreachable_note(socket, &why);
    tracing::warn!("{note}");
    match (options.fallback, deployment) {
        (Fallback::InProcess, Some(deployment)) => {
            hook_options.note = Some(format!("answered in process: {note}"));
            in_process(ctx, &deployment, cli, &parsed, &hook_options)
        }
        (Fallback::InProcess, None) => {
            Err(UsageError("--fallback in-process needs --config".to_owned()).into())
        }
        // Nobody could be asked: the call is undecided, printed as this CLI prints one.
        (Fallback::Ask, _) => {
            let verdict = Verdict {
                outcome: Outcome::Unavailable,
                answerer: None,
                reason: None,
                answered_outside: false,
                digest: None,
                failure: None,
            };
            let options = HookOptions {
                when_undecided: options.when_undecided.unwrap_or(WhenUndecided::Ask),
                note: Some(note),
                ..HookOptions::default()
            };
            Ok(cli
                .render(&parsed, &verdict, &options)
                .map(|o| o.to_string()))
        }
    }
}

fn in_process(
    ctx: &crate::Context,
    deployment: &Deployment,
    cli: Cli,
    parsed: &Parsed,
    options: &HookOptions,
) -> Result<Option<String>> {
    let printed = with_agent(
        ctx,
        deployment,
        &parsed.input.session_id,
        cli.agent_id(),
        parsed.input.tool_use_id.as_deref(),
        async |service, agent| {
            let answer = cli_hooks::ask_until(
                service,
                &HookTurns::default(),
                agent,
                cli,
                parsed,
                options,
                tokio_util::sync::CancellationToken::new(),
            )
            .await?;
            Ok(answer.output)
        },
    )?;
    Ok(printed.map(|o| o.to_string()))
}
