//! Claude-Code-style command hooks as a `pre-execute` producer.
//!
//! Each `PreToolUse` hook whose matcher fits the tool runs as `sh -c <command>` with
//! `{session_id, cwd, hook_event_name, tool_name, tool_input, tool_use_id}` on stdin. Exit 2
//! blocks, with stderr as the reason; exit 0 with JSON on stdout is read
//! (`hookSpecificOutput.permissionDecision` allow | deny | ask, with `permissionDecisionReason`,
//! overrides a top-level `decision` approve | block with `reason`; a missing or different
//! `hookEventName` voids the event fields; malformed JSON is ignored). Several hooks merge deny > ask > allow,
//! joining the winning rank's reasons with a blank line. Unlike Claude Code, a hook that cannot
//! start, crashes, exits with another code or times out denies with a reason naming it: fail
//! closed. Each run is recorded as `hook/invoked` and `hook/result`.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use regex::Regex;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

use super::{PreCall, PreDecision, PreExecute, PreFuture, texts};
use crate::audit::event::{Event, HookInvoked, HookResult};

/// The one hook event served.
pub const PRE_TOOL_USE: &str = "PreToolUse";

/// One configured hook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookSpec {
    /// Tool names it runs for: a regular expression matching the whole name; empty or `*` is
    /// every tool.
    pub matcher: String,
    /// The shell command.
    pub command: String,
    /// How long it may run.
    pub timeout: Duration,
}

/// What one hook said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Allow (delegates: `next`).
    Allow(Option<String>),
    /// Block.
    Deny(Option<String>),
    /// Ask the approval service.
    Ask(Option<String>),
    /// No decision.
    Nothing,
}

impl Verdict {
    fn name(&self) -> Option<&'static str> {
        match self {
            Verdict::Allow(_) => Some("allow"),
            Verdict::Deny(_) => Some("deny"),
            Verdict::Ask(_) => Some("ask"),
            Verdict::Nothing => None,
        }
    }

    fn reason(&self) -> Option<&str> {
        match self {
            Verdict::Allow(r) | Verdict::Deny(r) | Verdict::Ask(r) => r.as_deref(),
            Verdict::Nothing => None,
        }
    }
}

fn text(v: &Value, key: &str) -> Option<String> {
    v.get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

/// Reads a hook's stdout after exit 0.
pub fn parse_output(stdout: &str) -> Verdict {
    let Ok(v) = serde_json::from_str::<Value>(stdout.trim()) else {
        return Verdict::Nothing;
    };
    if !v.is_object() {
        return Verdict::Nothing;
    }
    let mut verdict = match v.get("decision").and_then(Value::as_str) {
        Some("approve") => Verdict::Allow(text(&v, "reason")),
        Some("block") => Verdict::Deny(text(&v, "reason")),
        _ => Verdict::Nothing,
    };
    if let Some(out) = v.get("hookSpecificOutput").filter(|o| o.is_object()) {
        // Claude Code requires the field: output naming no event is ignored like output
        // naming another one.
        let same_event = out
            .get("hookEventName")
            .is_some_and(|name| name == PRE_TOOL_USE);
        if same_event {
            let reason = text(out, "permissionDecisionReason");
            match out.get("permissionDecision").and_then(Value::as_str) {
                Some("allow") => verdict = Verdict::Allow(reason),
                Some("deny") => verdict = Verdict::Deny(reason),
                Some("ask") => verdict = Verdict::Ask(reason),
                _ => {}
            }
        }
    }
    verdict
}

/// Merges several hooks' verdicts: deny > ask > allow; the winning rank's reasons joined by a
/// blank line.
pub fn merge(verdicts: &[Verdict]) -> PreDecision {
    let reasons = |want: fn(&Verdict) -> bool| -> Option<String> {
        let rs: Vec<&str> = verdicts
            .iter()
            .filter(|v| want(v))
            .filter_map(Verdict::reason)
            .collect();
        (!rs.is_empty()).then(|| rs.join("\n\n"))
    };
    if verdicts.iter().any(|v| matches!(v, Verdict::Deny(_))) {
        PreDecision::Deny {
            reason: reasons(|v| matches!(v, Verdict::Deny(_)))
                .unwrap_or_else(|| texts::HOOK_BLOCKED.to_owned()),
        }
    } else if verdicts.iter().any(|v| matches!(v, Verdict::Ask(_))) {
        PreDecision::Ask {
            reason: reasons(|v| matches!(v, Verdict::Ask(_))),
        }
    } else {
        PreDecision::Next
    }
}

struct Hook {
    spec: HookSpec,
    matcher: Option<Regex>,
}

/// The configured hooks, as a `pre-execute` listener.
#[derive(Clone)]
pub struct Hooks {
    hooks: Arc<Vec<Hook>>,
    cwd: PathBuf,
}

impl std::fmt::Debug for Hooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.hooks.iter().map(|h| &h.spec.command))
            .finish()
    }
}

impl Hooks {
    /// Hooks run in `cwd`. A matcher that is not a valid regular expression is an error naming it.
    pub fn new(specs: Vec<HookSpec>, cwd: PathBuf) -> Result<Hooks, String> {
        let hooks = specs
            .into_iter()
            .map(|spec| {
                let matcher = match spec.matcher.as_str() {
                    "" | "*" => None,
                    m => Some(
                        Regex::new(&format!("^(?:{m})$"))
                            .map_err(|e| format!("hook matcher {m:?}: {e}"))?,
                    ),
                };
                Ok(Hook { spec, matcher })
            })
            .collect::<Result<Vec<_>, String>>()?;
        Ok(Hooks {
            hooks: Arc::new(hooks),
            cwd,
        })
    }

    async fn run(hook: &Hook, input: &Value, cwd: &PathBuf) -> (Verdict, HookResult) {
        let command = &hook.spec.command;
        let mut record = HookResult {
            hook: command.clone(),
            call_id: input["tool_use_id"].as_str().unwrap_or_default().to_owned(),
            exit_code: None,
            decision: None,
            reason: None,
            error: None,
        };
        let fail = |record: &mut HookResult, why: String| {
            let reason = format!("{PRE_TOOL_USE} hook {command:?} {why}");
            record.error = Some(reason.clone());
            record.decision = Some("deny".to_owned());
            record.reason = Some(reason.clone());
            Verdict::Deny(Some(reason))
        };
        let mut hook_command = tokio::process::Command::new("sh");
        crate::plugin::secret::withhold_from(&mut hook_command);
        let child = hook_command
            .arg("-c")
            .arg(command)
            .current_dir(cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn();
        let mut child = match child {
            Ok(c) => c,
            Err(e) => return (fail(&mut record, format!("could not start: {e}")), record),
        };
        if let Some(mut stdin) = child.stdin.take() {
            // A hook that does not read its input is not an error.
            let _ = stdin.write_all(input.to_string().as_bytes()).await;
        }
        let output = match tokio::time::timeout(hook.spec.timeout, child.wait_with_output()).await {
            Err(_) => {
                let ms = hook.spec.timeout.as_millis();
                return (
                    fail(&mut record, format!("timed out after {ms} ms")),
                    record,
                );
            }
            Ok(Err(e)) => return (fail(&mut record, format!("failed: {e}")), record),
            Ok(Ok(output)) => output,
        };
        record.exit_code = output.status.code();
        let verdict = match output.status.code() {
            Some(0) => parse_output(&String::from_utf8_lossy(&output.stdout)),
            Some(2) => {
                let stderr = String::from_utf8_lossy(&output.stderr).trim().to_owned();
                Verdict::Deny((!stderr.is_empty()).then_some(stderr))
            }
            Some(code) => {
                return (
                    fail(&mut record, format!("exited with code {code}")),
                    record,
                );
            }
            None => {
                return (
                    fail(&mut record, "crashed (killed by a signal)".to_owned()),
                    record,
                );
            }
        };
        record.decision = verdict.name().map(str::to_owned);
        record.reason = verdict.reason().map(str::to_owned);
        (verdict, record)
    }
}

impl PreExecute for Hooks {
    fn decide(&self, call: PreCall) -> PreFuture {
        let hooks = self.hooks.clone();
        let cwd = self.cwd.clone();
        Box::pin(async move {
            let matching: Vec<&Hook> = hooks
                .iter()
                .filter(|h| h.matcher.as_ref().is_none_or(|m| m.is_match(&call.name)))
                .collect();
            if matching.is_empty() {
                return Ok(PreDecision::Next);
            }
            let input = json!({
                "session_id": call.agent.as_ref().map(|a| a.session_id()).unwrap_or_default(),
                "cwd": cwd,
                "hook_event_name": PRE_TOOL_USE,
                "tool_name": call.name,
                "tool_input": call.arguments,
                "tool_use_id": call.call_id,
            });
            let log = call.agent.as_ref().map(|a| a.session().clone());
            if let Some(session) = &log {
                for hook in &matching {
                    session
                        .log
                        .append(Event::HookInvoked(HookInvoked {
                            hook: hook.spec.command.clone(),
                            event: PRE_TOOL_USE.to_owned(),
                            tool_name: call.name.clone(),
                            call_id: call.call_id.clone(),
                        }))
                        .await
                        .map_err(|e| e.to_string())?;
                }
            }
            let runs = futures_util::future::join_all(
                matching.iter().map(|h| Hooks::run(h, &input, &cwd)),
            )
            .await;
            let mut verdicts = Vec::new();
            for (verdict, record) in runs {
                if let Some(session) = &log {
                    session
                        .log
                        .append(Event::HookResult(record))
                        .await
                        .map_err(|e| e.to_string())?;
                }
                verdicts.push(verdict);
            }
            Ok(merge(&verdicts))
        })
    }
}
