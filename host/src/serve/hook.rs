//! `hook/claude-code`, `hook/codex`, `hook/gemini`, `hook/copilot`: an agent CLI's hook answered
//! by a warm server, so a hook process (`approval-host hook claude-code --socket PATH`) costs a
//! connection instead of loading every plugin. The call goes through exactly the sequence the
//! in-process hook writes ([`crate::claude_code`], [`crate::cli_hooks`]); parallel calls of one
//! session share a turn.
//!
//! The server holds a hook's session open for a while after each call ([`super::warm`]), so the
//! next call of a long session does not read its whole log again.
//!
//! A hook's session belongs to the first token that asks about it here ([`HookOwners`]);
//! another token, or a session a connection opened with `session/open`, is refused, so one
//! client can neither end another's turn (cancelling its questions) nor write into its log.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use serde_json::{Value, json};

use crate::claude_code::{self, HookInput, HookOptions, HookTurns, WhenUndecided};
use crate::cli_hooks::Cli;
use crate::service::ApprovalService;

use super::rpc::{self, RpcError, opt_str_param};
use super::warm::WarmSessions;

/// Which token asks about each hook session, and through which method, for the server's life.
#[derive(Debug, Default)]
pub(super) struct HookOwners {
    owners: Mutex<HashMap<String, (String, &'static str)>>,
}

impl HookOwners {
    /// Claims `session` for `token` asking through `method`, or refuses when another token asks
    /// about it.
    pub(super) fn claim(
        &self,
        session: &str,
        token: &str,
        method: &'static str,
    ) -> Result<(), RpcError> {
        let mut owners = self.owners.lock().unwrap_or_else(|p| p.into_inner());
        let (owner, by) = owners
            .entry(session.to_owned())
            .or_insert_with(|| (token.to_owned(), method));
        if owner == token {
            Ok(())
        } else {
            Err(asked_by_another(session, by))
        }
    }

    /// Refuses `session/open` by `token` of a session another token asks about here.
    pub(super) fn check_open(&self, session: &str, token: &str) -> Result<(), RpcError> {
        let owners = self.owners.lock().unwrap_or_else(|p| p.into_inner());
        match owners.get(session) {
            Some((owner, by)) if owner != token => Err(asked_by_another(session, by)),
            _ => Ok(()),
        }
    }
}

fn asked_by_another(session: &str, method: &str) -> RpcError {
    RpcError::new(
        rpc::NOT_OWNER,
        format!("session {session:?} is asked about through {method} by another token"),
    )
}

/// The method of a hook's session: Claude Code's, or another CLI's.
pub(super) const CLAUDE_CODE: &str = "hook/claude-code";

/// The session a hook call is about, if its input names a valid one (an input without one is
/// refused by [`call`] and [`call_cli`]).
pub(super) fn session_of(cli: Option<Cli>, params: &Value) -> Option<String> {
    let input = params.get("input")?;
    let session = match (cli, is_after(params)) {
        (None, _) => input.get("session_id")?.as_str()?.to_owned(),
        (Some(cli), false) => cli.parse(input).ok()?.input.session_id,
        (Some(cli), true) => cli.parse_after(input).ok()?.input.session_id,
    };
    crate::audit::store::validate_session_id(&session)
        .is_ok()
        .then_some(session)
}

/// Answers one hook input: `params = {input: <the hook's stdin JSON>, whenUndecided?}`; the
/// result is `{output: <what the hook prints, or null to print nothing>, outcome, answerer?}`.
pub(super) async fn call(
    service: &ApprovalService,
    warm: &WarmSessions,
    turns: &HookTurns,
    base: HookOptions,
    params: &Value,
    cancel: tokio_util::sync::CancellationToken,
) -> Result<Value, RpcError> {
    let input = params
        .get("input")
        .ok_or_else(|| RpcError::params("missing input"))?;
    let mut input = HookInput::from_value(input).map_err(RpcError::params)?;
    input.trace_parent = super::rpc::trace_parent(params);
    let mut options = base;
    if let Some(w) = opt_str_param(params, "whenUndecided")? {
        options.when_undecided = w.parse::<WhenUndecided>().map_err(RpcError::params)?;
    }
    let done = async {
        let agent = service
            .agent(&input.session_id, claude_code::AGENT_ID)
            .await
            .map_err(RpcError::failed)?;
        let answer = claude_code::ask_until(service, turns, &agent, &input, &options, cancel)
            .await
            .map_err(RpcError::failed)?;
        Ok((agent, answer))
    }
    .await;
    let answer = hold(warm, &input.session_id, done)?;
    let mut result = answer.verdict.to_json();
    result["output"] = json!(answer.output);
    Ok(result)
}

/// Answers one hook input of another CLI: `params = {input: <the hook's stdin JSON>,
/// whenUndecided?}`; the result is `{output: <what the hook prints, or null>, outcome,
/// answerer?}`.
pub(super) async fn call_cli(
    service: &ApprovalService,
    warm: &WarmSessions,
    turns: &HookTurns,
    cli: Cli,
    params: &Value,
    cancel: tokio_util::sync::CancellationToken,
) -> Result<Value, RpcError> {
    let input = params
        .get("input")
        .ok_or_else(|| RpcError::params("missing input"))?;
    let mut parsed = cli.parse(input).map_err(RpcError::params)?;
    parsed.input.trace_parent = super::rpc::trace_parent(params);
    let mut options = HookOptions::default();
    if let Some(w) = opt_str_param(params, "whenUndecided")? {
        options.when_undecided = w.parse::<WhenUndecided>().map_err(RpcError::params)?;
    }
    let done = async {
        let agent = service
            .agent(&parsed.input.session_id, cli.agent_id())
            .await
            .map_err(RpcError::failed)?;
        let answer =
            crate::cli_hooks::ask_until(service, turns, &agent, cli, &parsed, &options, cancel)
                .await
                .map_err(RpcError::failed)?;
        Ok((agent, answer))
    }
    .await;
    let answer = hold(warm, &parsed.input.session_id, done)?;
    let mut result = answer.verdict.to_json();
    result["output"] = json!(answer.output);
    Ok(result)
}

/// After a call on `session`: holds the session for the next call when it answered, lets it go
/// when it failed (its log may be one that accepts nothing more until it is opened again).
fn hold<T>(
    warm: &WarmSessions,
    session: &str,
    done: Result<(crate::agent::Agent, T), RpcError>,
) -> Result<T, RpcError> {
    match done {
        Ok((agent, value)) => {
            warm.keep(session, agent, Instant::now());
            Ok(value)
        }
        Err(e) => {
            warm.forget(session);
            Err(e)
        }
    }
}

/// Whether `params` carry an after-tool hook's input (`after: true`).
pub(super) fn is_after(params: &Value) -> bool {
    params.get("after").and_then(Value::as_bool) == Some(true)
}

/// Records an after-tool hook's input: `params = {input, after: true}`; the result is
/// `{output: null, unasked: bool}` (an after-tool hook prints nothing).
pub(super) async fn after(
    service: &ApprovalService,
    warm: &WarmSessions,
    cli: Option<Cli>,
    params: &Value,
) -> Result<Value, RpcError> {
    let input = params
        .get("input")
        .ok_or_else(|| RpcError::params("missing input"))?;
    let (session, agent_id, ran) =
        crate::cli_hooks::after_input(cli, input).map_err(RpcError::params)?;
    let done = async {
        let agent = service
            .agent(&session, agent_id)
            .await
            .map_err(RpcError::failed)?;
        let seen = crate::after_tool::record(service, &agent, &ran)
            .await
            .map_err(RpcError::failed)?;
        Ok((agent, seen))
    }
    .await;
    let seen = hold(warm, &session, done)?;
    Ok(json!({
        "output": null,
        "unasked": matches!(seen, crate::after_tool::Seen::Unasked(_)),
    }))
}
