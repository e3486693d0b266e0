//! Gemini CLI's `BeforeTool` hook, as its hooks reference (`docs/hooks/reference.md` in
//! google-gemini/gemini-cli; geminicli.com/docs/hooks/reference) describes it.
//!
//! Input: `session_id`, `transcript_path`, `cwd`, `hook_event_name` (`BeforeTool`),
//! `timestamp`, `tool_name`, `tool_input`, and `mcp_context` (`server_name`, `tool_name`) for an
//! MCP server's tool. The input names no call id.
//!
//! Output (stdout must be JSON and nothing else): `{"decision": "deny", "reason": …}` blocks the
//! call and sends the reason to the model; `{"decision": "allow"}` lets it go on to Gemini CLI's
//! own policy (a hook cannot skip its confirmation); `{"decision": "ask", "reason": …}` makes
//! Gemini CLI confirm the call with its user even under `--yolo` (0.61.0 honours it), which is
//! what an undecided call prints; `{}` (the deployment defers) leaves it to Gemini CLI's own
//! policy.

use serde_json::{Value, json};

use super::{ALLOWED_REASON, Cli, Decision, Event, Parsed, field, optional, tools};
use crate::claude_code::HookInput;

pub(super) const BEFORE_TOOL: &str = "BeforeTool";
pub(super) const AFTER_TOOL: &str = "AfterTool";

pub(super) fn parse(v: &Value, after: bool) -> Result<Parsed, String> {
    let event = field(v, "hook_event_name")?;
    let expected = if after { AFTER_TOOL } else { BEFORE_TOOL };
    if event != expected {
        return Err(format!(
            "hook_event_name is {event:?}; this hook answers only {expected}"
        ));
    }
    let cli_tool = field(v, "tool_name")?;
    let args = v.get("tool_input").cloned().unwrap_or(Value::Null);
    let mcp = v.get("mcp_context");
    let server = mcp.and_then(|m| optional(m, "server_name"));
    let remote = mcp.and_then(|m| optional(m, "tool_name"));
    let (tool_name, tool_input) = match (server, remote) {
        // An MCP server's tool, by the name rules give it whatever Gemini CLI registered it as.
        (Some(server), Some(tool)) => (format!("mcp__{server}__{tool}"), args),
        _ => tools::canonical(tools::GEMINI, &cli_tool, &args),
    };
    let mut cwd = optional(v, "cwd");
    // run_shell_command runs in `dir_path` (relative to the project) when it names one.
    if tool_name == "Bash" {
        cwd = tools::run_dir(cwd, &tool_input, &["dir_path", "directory"]);
    }
    Ok(Parsed {
        input: HookInput {
            session_id: field(v, "session_id")?,
            tool_name,
            tool_input,
            // Gemini CLI names no call: a call that ran is found by its tool and arguments.
            tool_use_id: (!after).then(|| super::fresh_call_id(Cli::Gemini)),
            cwd,
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

pub(super) fn render(decision: &Decision) -> Option<Value> {
    Some(match decision {
        Decision::Allow => json!({"decision": "allow", "reason": ALLOWED_REASON}),
        Decision::Deny(reason) => json!({"decision": "deny", "reason": reason}),
        Decision::Ask(reason) => json!({"decision": "ask", "reason": reason}),
        Decision::Defer => json!({}),
    })
}
