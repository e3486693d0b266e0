//! The question a `tools/call` is (`mcp__<server>__<tool>` with its arguments, recorded as a
//! `tool/call` and asked inside the connection's turn), and the text a model reads when the call
//! is not allowed.

use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use crate::agent::Agent;
use crate::outcome::Outcome;
use crate::service::{ApprovalError, ApprovalRequest, Verdict};
use crate::tools::texts;

use super::Shared;

/// A `tools/call` whose tool name is empty, too long, or holds a blank or control character:
/// refused without a question (no rule was written for such a name, and the server would be
/// sent a name the rules never saw).
pub const INVALID_TOOL_NAME: &str = "invalid MCP tool name";

/// A `tools/call` of a tool whose name starts as the questions of resources, prompts and
/// completion are named (`resources/`, `prompts/`, `completion/`): refused without a question,
/// so that a rule written for a resource never reads a tool's call, or the other way round.
pub const RESERVED_TOOL_NAME: &str = "this MCP tool's name is reserved for the gateway's questions about resources, prompts and completion";

/// The longest tool name the gateway asks about (the MCP specification's limit).
const MAX_TOOL_NAME: usize = 128;

/// The rule-syntax name of `tool` on `server`, or `None` when the name is refused.
pub fn question_tool(server: &str, tool: &str) -> Option<String> {
    let fits = !tool.is_empty()
        && tool.len() <= MAX_TOOL_NAME
        && !tool.chars().any(|c| c.is_control() || c.is_whitespace());
    fits.then(|| format!("mcp__{server}__{tool}"))
}

/// The text of a tool result for a call that was not allowed (`None` when it was).
pub fn refusal(tool: &str, verdict: &Verdict) -> Option<String> {
    match verdict.outcome {
        Outcome::AllowedOnce => None,
        Outcome::Rejected => Some(texts::rejection(tool, verdict)),
        Outcome::Cancelled => Some(texts::approval_cancelled(tool)),
        Outcome::Unavailable => Some(texts::approval_unavailable(tool)),
    }
}

/// Asks whether `tool` (already in rule syntax) may run with `arguments`, in the agent's
/// session, whose turn the connection holds open.
pub(super) async fn ask(
    shared: &Shared,
    agent: &Agent,
    tool: &str,
    (arguments, undeclared): (Map<String, Value>, Vec<String>),
    cancel: CancellationToken,
) -> Result<Verdict, ApprovalError> {
    // JSON-RPC ids repeat across connections and restarts; the log needs its own.
    let call_id = format!("mcp-{}", uuid::Uuid::new_v4());
    let arguments = Value::Object(arguments);
    // Durable with the decision, one sync per call.
    shared
        .service
        .record_tool_call_in_mode(agent, &call_id, tool, arguments, None, false)
        .await?;
    let mut request = ApprovalRequest::new(agent, tool.to_owned())
        .call_id(call_id)
        .undeclared(undeclared)
        .cancel(cancel);
    if let Some(cwd) = &shared.options.cwd {
        request = request.cwd(cwd.clone());
    }
    shared.service.ask(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_names_with_blanks_or_controls_are_not_asked() {
        assert_eq!(
            question_tool("gh", "get_issue").as_deref(),
            Some("mcp__gh__get_issue")
        );
        assert_eq!(
            question_tool("gh", "a__b.c/d-e").as_deref(),
            Some("mcp__gh__a__b.c/d-e")
        );
        for bad in [
            "",
            "get issue",
            "get\nissue",
            "get\u{0}",
            "get\u{85}x",
            "x\u{a0}y",
            "\t",
        ] {
            assert_eq!(question_tool("gh", bad), None, "{bad:?}");
        }
        assert_eq!(question_tool("gh", &"x".repeat(129)), None);
        assert!(question_tool("gh", &"x".repeat(128)).is_some());
    }
}
