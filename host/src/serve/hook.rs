//! `hook/claude-code`: a Claude Code PreToolUse hook answered by a warm server, so a hook
//! process (`approval-host hook claude-code --socket PATH`) costs a connection instead of
//! loading every plugin. The call goes through exactly the sequence the in-process hook writes
//! ([`crate::claude_code`]); parallel calls of one session share a turn.

use serde_json::{Value, json};

use crate::claude_code::{self, HookInput, HookOptions, HookTurns, WhenUndecided};
use crate::service::ApprovalService;

use super::rpc::{RpcError, opt_str_param};

/// Answers one hook input: `params = {input: <the hook's stdin JSON>, whenUndecided?}`; the
/// result is `{output: <what the hook prints, or null to print nothing>, outcome, answerer?}`.
pub(super) async fn call(
    service: &ApprovalService,
    turns: &HookTurns,
    base: HookOptions,
    params: &Value,
) -> Result<Value, RpcError> {
    let input = params
        .get("input")
        .ok_or_else(|| RpcError::params("missing input"))?;
    let input = HookInput::from_value(input).map_err(RpcError::params)?;
    let mut options = base;
    if let Some(w) = opt_str_param(params, "whenUndecided")? {
        options.when_undecided = w.parse::<WhenUndecided>().map_err(RpcError::params)?;
    }
    let agent = service
        .agent(&input.session_id, claude_code::AGENT_ID)
        .await
        .map_err(RpcError::failed)?;
    let answer = claude_code::ask(service, turns, &agent, &input, &options)
        .await
        .map_err(RpcError::failed)?;
    let mut result = answer.verdict.to_json();
    result["output"] = json!(answer.output);
    Ok(result)
}
