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
use crate::rules::pattern::{
    PERMISSION_REQUEST as PERMISSION_REQUEST_TOOL,
    PERMISSION_REQUEST_TOOL as PERMISSION_REQUEST_ARG,
};

pub(super) const PRE_TOOL_USE: &str = "PreToolUse";
pub(super) const PERMISSION_REQUEST: &str = "PermissionRequest";
pub(super) const POST_TOOL_USE: &str = "PostToolUse";

pub(super) fn parse(v: &Value, after: bool) -> Result<Parsed, String> {
    let event = match (field(v, "hook_event_name")?.as_str(), after) {
        (PRE_TOOL_USE, false) => Event::BeforeTool,
        (PERMISSION_REQUEST, false) => Event::PermissionRequest,
        (POST_TOOL_USE, true) => Event::AfterTool,
        (other, false) => {
            return Err(format!(
                "hook_event_name is {other:?}; this hook answers PreToolUse and PermissionRequest"
            ));
        }
        (other, true) => {
            return Err(format!(
                "hook_event_name is {other:?}; this hook answers only PostToolUse"
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
    let tool_use_id = match (optional(v, "tool_use_id"), event) {
        (Some(id), Event::BeforeTool | Event::AfterTool) => Some(id),
        (Some(id), Event::PermissionRequest) => Some(format!("{id}-permission")),
        // A call that ran without an id is found by its tool and arguments.
        (None, Event::AfterTool) => None,
        (None, _) => Some(super::fresh_call_id(super::Cli::Codex)),
    };
    let mut cwd = optional(v, "cwd");
    // A shell command runs in its `workdir` (relative to the session's) when it names one.
    if tool_name == "Bash" {
        cwd = tools::run_dir(cwd, &tool_input, &["workdir"]);
    }
    // Codex's prompt may be to run the call outside its sandbox: only a person or a rule
    // written for permission requests grants it, never an ordinary allow rule for the tool.
    let (tool_name, tool_input) = match event {
        Event::BeforeTool | Event::AfterTool => (tool_name, tool_input),
        Event::PermissionRequest => (
            PERMISSION_REQUEST_TOOL.to_owned(),
            permission_arguments(&tool_name, tool_input),
        ),
    };
    Ok(Parsed {
        input: HookInput {
            session_id: field(v, "session_id")?,
            tool_name,
            tool_input,
            tool_use_id,
            cwd,
            permission_mode: optional(v, "permission_mode"),
            trace_parent: None,
        },
        event,
        cli_tool,
    })
}

/// A permission request's arguments: the call's own, with `tool` naming its tool (the call's own
/// `tool` field, if it had one, is overwritten: it never stands in for the real one).
fn permission_arguments(tool: &str, arguments: Value) -> Value {
    let mut map = match arguments {
        Value::Object(map) => map,
        Value::Null => serde_json::Map::new(),
        other => serde_json::Map::from_iter([("arguments".to_owned(), other)]),
    };
    map.insert(PERMISSION_REQUEST_ARG.to_owned(), Value::from(tool));
    Value::Object(map)
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
        (Event::AfterTool, _) => None,
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
