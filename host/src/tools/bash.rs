//! The `bash` tool and its sandbox escalation gate, the seam's second asker.
//!
//! A command runs confined to the session's sandbox mode. With `sandbox_permissions` (a wider
//! mode) and a `justification`, the tool asks the approval service (reason
//! `escalate sandbox to <mode>: <justification>`); `allowed-once` runs this one call under the
//! wider mode and nothing persists: the next call is confined again. A command that fails on a
//! sandboxed write gets a hint that one retry with an escalation may ask the user.

use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};

use super::sandbox::{self, SandboxMode, Workspace};
use super::texts::{self, escalation};
use super::{SchemaError, ToolContext, ToolRuntime};
use crate::outcome::Outcome;
use crate::service::ApprovalRequest;

/// The tool's name.
pub const NAME: &str = "bash";

/// How a runtime's `bash` tool runs commands.
#[derive(Debug, Clone)]
pub struct BashTool {
    /// Where commands run.
    pub workspace: Workspace,
    /// The deployment's default mode: calls that do not escalate run under it, or under their
    /// session's logged `sandbox/mode` switch.
    pub mode: SandboxMode,
    /// How long a command may run.
    pub timeout: Duration,
}

/// Kills a command's process group when dropped before the command finished (a timeout, or the
/// call's future dropped on cancellation).
struct KillGroup(Option<u32>);

impl KillGroup {
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for KillGroup {
    fn drop(&mut self) {
        if let Some(pid) = self.0.and_then(|p| i32::try_from(p).ok()) {
            // SAFETY: kill(2) with a negative pid signals the group; no memory is involved.
            unsafe {
                libc::kill(-pid, libc::SIGKILL);
            }
        }
    }
}

/// What the model reads about `command`.
pub const COMMAND_DESCRIPTION: &str =
    "The shell command to run (sh -c). It runs confined to this session's sandbox mode.";

/// What the model reads about `sandbox_permissions`.
pub const SANDBOX_PERMISSIONS_DESCRIPTION: &str = "Only to retry a command the sandbox refused: run this one call under a wider sandbox mode. The user is asked to approve it first; the wider mode applies to this call only. Requires `justification`.";

/// What the model reads about `justification`.
pub const JUSTIFICATION_DESCRIPTION: &str = "One sentence, shown to the person asked to approve the escalation, saying why this command needs the wider mode. Only with `sandbox_permissions`.";

/// The modes an escalation may ask for: every mode wider than the narrowest. Asking for the
/// narrowest could never widen anything, so the schema does not offer it.
pub fn escalation_modes() -> Vec<&'static str> {
    SandboxMode::ALL[1..].iter().map(|m| m.as_str()).collect()
}

/// The arguments' schema.
pub fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "command": {"type": "string", "description": COMMAND_DESCRIPTION},
            "sandbox_permissions": {
                "type": "string",
                "enum": escalation_modes(),
                "description": SANDBOX_PERMISSIONS_DESCRIPTION,
            },
            "justification": {"type": "string", "description": JUSTIFICATION_DESCRIPTION},
        },
        "required": ["command"],
        "additionalProperties": false,
    })
}

impl BashTool {
    /// Registers the tool on `runtime`.
    pub fn register(self, runtime: &ToolRuntime) -> Result<(), SchemaError> {
        runtime.register_tool(NAME, &schema(), move |ctx: ToolContext| {
            let tool = self.clone();
            async move { tool.call(ctx).await }
        })
    }

    /// The mode a call by `agent` runs under unless it escalates.
    pub fn current_mode(&self, agent: Option<&crate::agent::Agent>) -> SandboxMode {
        agent.map_or(self.mode, |a| sandbox::session_mode(a, self.mode))
    }

    /// Checks an escalation's arguments against the `current` mode; `Ok(None)` when the call does
    /// not escalate.
    pub fn requested_mode(
        &self,
        arguments: &Value,
        current: SandboxMode,
    ) -> Result<Option<(SandboxMode, String)>, String> {
        let permissions = arguments.get("sandbox_permissions").and_then(Value::as_str);
        let justification = arguments.get("justification").and_then(Value::as_str);
        match (permissions, justification) {
            (None, None) => Ok(None),
            (Some(_), None) => Err(escalation::NEEDS_JUSTIFICATION.to_owned()),
            (None, Some(_)) => Err(escalation::JUSTIFICATION_ALONE.to_owned()),
            (Some(_), Some(j)) if j.trim().is_empty() => {
                Err(escalation::EMPTY_JUSTIFICATION.to_owned())
            }
            (Some(p), Some(j)) => {
                let mode: SandboxMode = p.parse()?;
                if mode <= current {
                    return Err(escalation::not_wider(mode.as_str(), current.as_str()));
                }
                Ok(Some((mode, j.trim().to_owned())))
            }
        }
    }

    async fn escalate(
        &self,
        ctx: &ToolContext,
        mode: SandboxMode,
        why: &str,
    ) -> Result<(), String> {
        let m = mode.as_str();
        let Some(service) = &ctx.approval else {
            return Err(escalation::no_service(m));
        };
        let Some(agent) = &ctx.agent else {
            return Err(escalation::no_agent(m));
        };
        let request = ApprovalRequest::new(agent, NAME)
            .call_id(ctx.call_id.clone())
            .reason(escalation::reason(m, why))
            .cancel(ctx.cancel.clone());
        let verdict = service.ask(request).await;
        if ctx.cancel.is_cancelled() {
            return Err(texts::ABORTED_BEFORE_DISPATCH.to_owned());
        }
        match verdict {
            Ok(v) => match v.outcome {
                Outcome::AllowedOnce => Ok(()),
                Outcome::Rejected => Err(escalation::rejection(m, &v)),
                Outcome::Cancelled => Err(escalation::cancelled(m)),
                Outcome::Unavailable => Err(escalation::unavailable(m)),
            },
            Err(e) => Err(texts::approval_failed(NAME, &e.to_string())),
        }
    }

    async fn call(&self, ctx: ToolContext) -> Result<String, String> {
        let command = ctx.arguments["command"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let current = self.current_mode(ctx.agent.as_ref());
        let mode = match self.requested_mode(&ctx.arguments, current)? {
            None => current,
            Some((wider, why)) => {
                self.escalate(&ctx, wider, &why).await?;
                wider
            }
        };
        // Cancelling the call stops the command: dropping its future kills the child.
        tokio::select! {
            biased;
            () = ctx.cancel.cancelled() => Err(texts::COMMAND_CANCELLED.to_owned()),
            ran = self.run(&command, mode) => ran,
        }
    }

    /// Runs `command` under `mode`.
    pub async fn run(&self, command: &str, mode: SandboxMode) -> Result<String, String> {
        let mut child = tokio::process::Command::new("sh");
        child
            .arg("-c")
            .arg(command)
            .current_dir(&self.workspace.root)
            .env("TMPDIR", &self.workspace.temp)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        crate::plugin::secret::withhold_from(&mut child);
        sandbox::confine(&mut child, mode, &self.workspace.root, &self.workspace.temp)
            .map_err(|e| e.to_string())?;
        // Its own process group, so a timeout or a cancellation kills what it started too.
        child.process_group(0);
        let child = child
            .spawn()
            .map_err(|e| format!("command could not start: {e}"))?;
        let group = KillGroup(child.id());
        let output = match tokio::time::timeout(self.timeout, child.wait_with_output()).await {
            Err(_) => {
                return Err(format!(
                    "command timed out after {} ms",
                    self.timeout.as_millis()
                ));
            }
            Ok(Err(e)) => return Err(format!("command failed: {e}")),
            Ok(Ok(output)) => output,
        };
        group.disarm();
        let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
        text.push_str(&String::from_utf8_lossy(&output.stderr));
        if output.status.success() {
            return Ok(text);
        }
        match output.status.code() {
            Some(code) => text.push_str(&format!("\n[exit code {code}]")),
            None => text.push_str("\n[killed by a signal]"),
        }
        let denied = text.contains("Permission denied") || text.contains("Read-only file system");
        if mode.confines() && denied {
            text.push('\n');
            text.push_str(&escalation::denied_hint(mode.as_str()));
        }
        Err(text)
    }
}
