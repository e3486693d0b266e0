//! Codex's command hooks, as its hooks documentation (developers.openai.com/codex/hooks) and the
//! schemas in `codex-rs/hooks/schema/generated/` describe them (Codex 0.124 and later, where
//! hooks are on by default and run for `Bash`, `apply_patch` and MCP tools).
//!
//! Input: `session_id`, `turn_id`, `cwd`, `hook_event_name` (`PreToolUse` or
//! `PermissionRequest`), `model`, `permission_mode`, `tool_name`, `tool_input`, `tool_use_id`.
//!
//! Output: `PreToolUse` honours only `permissionDecision: "deny"` with a reason (Codex parses
//! `allow` and `ask` but does not act on them), so a grant or an undecided call prints nothing and
//! Codex's own approval flow and sandbox go on. `PermissionRequest` (Codex is about to ask its
//! user) takes `decision.behavior` `allow` or `deny` with a `message`; no decision lets Codex ask.

use serde_json::{Value, json};

use super::{Decision, Event, Parsed, field, optional, tools};
use crate::claude_code::HookInput;

pub(super) const PRE_TOOL_USE: &str = "PreToolUse";
pub(super) const PERMISSION_REQUEST: &str = "PermissionRequest";

pub(super) fn parse(v: &Value) -> Result<Parsed, String> {
    let event = match field(v, "hook_event_name")?.as_str() {
        PRE_TOOL_USE => Event::BeforeTool,
        PERMISSION_REQUEST => Event::PermissionRequest,
        other => {
            return Err(format!(
                "hook_event_name is {other:?}; this hook answers PreToolUse and PermissionRequest"
            ));
        }
    };
    let cli_tool = field(v, "tool_name")?;
    let args = v.get("tool_input").cloned().unwrap_or(Value::Null);
    let (tool_name, tool_input) = if cli_tool == "apply_patch" {
        tools::apply_patch(&args)
    } else {
        tools::canonical(tools::CODEX, &cli_tool, &args)
    };
    // A PermissionRequest names no call id: it is a question of its own.
    let tool_use_id = optional(v, "tool_use_id")
        .map(|id| match event {
            Event::BeforeTool => id,
            Event::PermissionRequest => format!("{id}-permission"),
        })
        .unwrap_or_else(|| super::fresh_call_id(super::Cli::Codex));
    Ok(Parsed {
        input: HookInput {
            session_id: field(v, "session_id")?,
            tool_name,
            tool_input,
            tool_use_id: Some(tool_use_id),
            cwd: optional(v, "cwd"),
            permission_mode: optional(v, "permission_mode"),
            trace_parent: None,
        },
        event,
        cli_tool,
    })
}

pub(super) fn render(event: Event, decision: &Decision) -> Option<Value> {
    match (event, decision) {
        (Event::BeforeTool, Decision::Deny(reason)) => Some(json!({
            "hookSpecificOutput": {
                "hookEventName": PRE_TOOL_USE,
                "permissionDecision": "deny",
                "permissionDecisionReason": reason,
            }
        })),
        // Codex's PreToolUse cannot grant or ask: its own approval flow goes on.
        (Event::BeforeTool, Decision::Allow | Decision::Ask(_) | Decision::Defer) => None,
        (Event::PermissionRequest, Decision::Allow) => Some(json!({
            "hookSpecificOutput": {
                "hookEventName": PERMISSION_REQUEST,
                "decision": {"behavior": "allow"},
            }
        })),
        (Event::PermissionRequest, Decision::Deny(reason)) => Some(json!({
            "hookSpecificOutput": {
                "hookEventName": PERMISSION_REQUEST,
                "decision": {"behavior": "deny", "message": reason},
            }
        })),
        // No decision: Codex asks its user, as it was about to.
        (Event::PermissionRequest, Decision::Ask(_) | Decision::Defer) => None,
    }
}
