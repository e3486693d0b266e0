//! `approval-host hook claude-code`: the wasm waterfall in front of Claude Code's tools today.
//!
//! Claude Code runs this as a PreToolUse command hook. The call is recorded on the session's log
//! (the Claude Code session id), asked through the deployment inside a turn of its own, and the
//! outcome mapped to a `permissionDecision`. `unavailable` hands the question to Claude Code's
//! own prompt (`ask`): this adapter never grants what nobody answered.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Result;
use approval_host::tools::texts;
use approval_host::{
    ApprovalError, ApprovalRequest, ApprovalService, Deployment, LogError, Outcome,
};
use serde_json::{Value, json};

/// The hook input fields this adapter reads.
pub struct Input {
    session_id: String,
    tool_name: String,
    tool_input: Value,
    tool_use_id: Option<String>,
    cwd: Option<String>,
}

impl Input {
    /// Parses the hook's stdin; the error is the reason printed on exit 2.
    pub fn parse(text: &str) -> Result<Input, String> {
        let v: Value =
            serde_json::from_str(text).map_err(|e| format!("the hook input is not JSON: {e}"))?;
        let field = |name: &str| -> Result<String, String> {
            v.get(name)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .ok_or_else(|| format!("the hook input has no {name}"))
        };
        let event = field("hook_event_name")?;
        if event != "PreToolUse" {
            return Err(format!(
                "hook_event_name is {event:?}; this hook answers only PreToolUse"
            ));
        }
        Ok(Input {
            session_id: field("session_id")?,
            tool_name: field("tool_name")?,
            tool_input: v.get("tool_input").cloned().unwrap_or(Value::Null),
            cwd: v
                .get("cwd")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_owned),
            tool_use_id: v
                .get("tool_use_id")
                .and_then(Value::as_str)
                .map(str::to_owned),
        })
    }
}

/// How long to wait for a parallel hook holding the same session's log.
const LOCK_PATIENCE: Duration = Duration::from_secs(10);

pub async fn run(state_dir: &Path, deployment: &Deployment, input: Input) -> Result<String> {
    approval_host::store::validate_session_id(&input.session_id)
        .map_err(|e| super::UsageError(e.to_string()))?;
    let service = ApprovalService::open_dir(state_dir, deployment.default_policy);
    let _plugins = super::mount(&service, deployment, state_dir)?;
    let started = Instant::now();
    // Claude Code runs hooks of parallel tool calls at once; one process writes a log at a time.
    let agent = loop {
        match service.agent(&input.session_id, "claude-code").await {
            Err(ApprovalError::Log(LogError::Locked { .. }))
                if started.elapsed() < LOCK_PATIENCE =>
            {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            other => break other?,
        }
    };
    let session = input.session_id.as_str();
    if service.turn_open(session).await? {
        service.end_turn(session).await?;
    }
    service.start_turn(session).await?;
    let mut request = ApprovalRequest::new(&agent, input.tool_name.clone());
    if let Some(call_id) = &input.tool_use_id {
        service
            .record_tool_call(&agent, call_id, &input.tool_name, input.tool_input.clone())
            .await?;
        request = request.call_id(call_id.clone());
    }
    if let Some(cwd) = &input.cwd {
        request = request.cwd(cwd.clone());
    }
    let verdict = service.ask(request).await?;
    service.end_turn(session).await?;
    let tool = &input.tool_name;
    let (decision, reason) = match verdict.outcome {
        Outcome::AllowedOnce => (
            "allow",
            "allowed once by the approval-host deployment".to_owned(),
        ),
        // Claude Code shows a `deny` reason to the model: the gate's own words reach it.
        Outcome::Rejected => ("deny", texts::rejection(tool, &verdict)),
        Outcome::Cancelled => ("deny", texts::approval_cancelled(tool)),
        Outcome::Unavailable => ("ask", texts::approval_unavailable(tool)),
    };
    Ok(json!({
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": decision,
            "permissionDecisionReason": reason,
        }
    })
    .to_string())
}
