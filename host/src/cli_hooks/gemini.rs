//! Gemini CLI's `BeforeTool` hook, as its hooks reference (`docs/hooks/reference.md` in
//! google-gemini/gemini-cli; geminicli.com/docs/hooks/reference) describes it.
//!
//! Input: `session_id`, `transcript_path`, `cwd`, `hook_event_name` (`BeforeTool`),
//! `timestamp`, `tool_name`, `tool_input`, and `mcp_context` (`server_name`, `tool_name`) for an
//! MCP server's tool. The input names no call id.
//!
//! Output (stdout must be JSON and nothing else): `{"decision": "deny", "reason": …}` blocks the
//! call and sends the reason to the model; `{"decision": "allow"}` lets it go on to Gemini CLI's
//! own policy (a hook cannot skip its confirmation); Gemini CLI has no "ask", so an undecided
//! call prints `{}` and Gemini CLI's own policy and confirmation decide.

use serde_json::{Value, json};

use super::{ALLOWED_REASON, Cli, Decision, Event, Parsed, field, optional, tools};
use crate::claude_code::HookInput;

pub(super) const BEFORE_TOOL: &str = "BeforeTool";

pub(super) fn parse(v: &Value) -> Result<Parsed, String> {
    let event = field(v, "hook_event_name")?;
    if event != BEFORE_TOOL {
        return Err(format!(
            "hook_event_name is {event:?}; this hook answers only BeforeTool"
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
    if tool_name == "Bash"
        && let Some(dir) = tool_input
            .get("dir_path")
            .or_else(|| tool_input.get("directory"))
            .and_then(Value::as_str)
            .filter(|d| !d.is_empty())
    {
        cwd = Some(match &cwd {
            Some(base) if !dir.starts_with('/') => format!("{}/{dir}", base.trim_end_matches('/')),
            _ => dir.to_owned(),
        });
    }
    Ok(Parsed {
        input: HookInput {
            session_id: field(v, "session_id")?,
            tool_name,
            tool_input,
            tool_use_id: Some(super::fresh_call_id(Cli::Gemini)),
            cwd,
            permission_mode: None,
            trace_parent: None,
        },
        event: Event::BeforeTool,
        cli_tool,
    })
}

pub(super) fn render(decision: &Decision) -> Option<Value> {
    Some(match decision {
        Decision::Allow => json!({"decision": "allow", "reason": ALLOWED_REASON}),
        Decision::Deny(reason) => json!({"decision": "deny", "reason": reason}),
        // No "ask" in Gemini CLI's hooks: its own policy and confirmation decide.
        Decision::Ask(_) | Decision::Defer => json!({}),
    })
}
