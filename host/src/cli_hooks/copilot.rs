//! GitHub Copilot CLI's `preToolUse` hook, as its CLI hooks reference
//! (docs.github.com/copilot/reference/copilot-cli-reference/cli-hooks-reference) describes it.
//!
//! Input, in either of its two formats: camelCase (`sessionId`, `timestamp`, `cwd`, `toolName`,
//! `toolArgs`, the arguments sometimes a JSON string) when the hook is configured as
//! `preToolUse`, or snake_case (`hook_event_name: "PreToolUse"`, `session_id`, `cwd`,
//! `tool_name`, `tool_input`) when configured as `PreToolUse`. Neither names a call id.
//!
//! Output: `permissionDecision` `allow`, `deny` or `ask` with `permissionDecisionReason`; `{}`
//! leaves the call to Copilot CLI's own permissions. A hook that fails or times out is logged and
//! skipped, never a block, so every refusal here is a printed `deny`.

use serde_json::{Value, json};

use super::{ALLOWED_REASON, Cli, Decision, Event, Parsed, field, optional, tools};
use crate::claude_code::HookInput;

pub(super) fn parse(v: &Value, after: bool) -> Result<Parsed, String> {
    let snake = v.get("hook_event_name").is_some();
    let expected = if after { "PostToolUse" } else { "PreToolUse" };
    let (session, tool, args) = if snake {
        let event = field(v, "hook_event_name")?;
        if event != expected {
            return Err(format!(
                "hook_event_name is {event:?}; this hook answers only {expected}"
            ));
        }
        ("session_id", "tool_name", "tool_input")
    } else {
        ("sessionId", "toolName", "toolArgs")
    };
    let cli_tool = field(v, tool)?;
    let args = match v.get(args) {
        // Arguments as a JSON string: read it; a string that is not JSON stays as it is (no
        // rule about arguments covers it).
        Some(Value::String(s)) => serde_json::from_str(s).unwrap_or(Value::String(s.clone())),
        Some(other) => other.clone(),
        None => Value::Null,
    };
    let (tool_name, tool_input) = tools::canonical(tools::COPILOT, &cli_tool, &args);
    Ok(Parsed {
        input: HookInput {
            session_id: field(v, session)?,
            tool_name,
            tool_input,
            // Copilot CLI names no call: each hook call is one, and a call that ran is found
            // by its tool and arguments.
            tool_use_id: (!after).then(|| super::fresh_call_id(Cli::Copilot)),
            cwd: optional(v, "cwd"),
            permission_mode: None,
            trace_parent: None,
        },
        event: if after {
            Event::AfterTool
        } else {
            Event::BeforeTool
        },
        cli_tool,
    })
}

pub(super) fn deny(reason: &str) -> Value {
    json!({"permissionDecision": "deny", "permissionDecisionReason": reason})
}

pub(super) fn render(decision: &Decision) -> Option<Value> {
    Some(match decision {
        Decision::Allow => {
            json!({"permissionDecision": "allow", "permissionDecisionReason": ALLOWED_REASON})
        }
        Decision::Deny(reason) => deny(reason),
        Decision::Ask(reason) => {
            json!({"permissionDecision": "ask", "permissionDecisionReason": reason})
        }
        Decision::Defer => json!({}),
    })
}
