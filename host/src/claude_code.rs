//! Claude Code's PreToolUse hook: the hook input, the sequence a call writes on its session's log,
//! and the mapping from an outcome to a `permissionDecision`. The same code answers in the hook's
//! own process (`hook claude-code --config`) and inside a running `serve` (`hook/claude-code`,
//! which `hook claude-code --socket` calls), so the logs are identical either way.
//!
//! Each call writes `turn/start`, `tool/call` (with Claude Code's `permission_mode`),
//! `approval/asked`, `approval/decided`, `turn/end` on the Claude Code session's log. Parallel
//! calls of one session (Claude Code runs the hooks of parallel tool calls at once) share one
//! turn in a server: it opens with the first and ends with the last, so every question is
//! decided inside it.
//!
//! `allowed-once` is `allow`; `rejected` and `cancelled` are `deny` with the text the model
//! reads; a call nobody decided (`unavailable`) is `ask` (Claude Code's own prompt) or, deferred,
//! no decision at all, so Claude Code's permission rules and mode apply. The hook never prints
//! `allow` for a call no answerer granted.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::agent::Agent;
use crate::outcome::Outcome;
use crate::service::ApprovalError;
use crate::service::{ApprovalRequest, ApprovalService, Verdict};
use crate::tools::texts;

/// The agent id hook calls are recorded under.
pub const AGENT_ID: &str = "claude-code";

/// Claude Code's before-tool hook event.
pub const PRE_TOOL_USE: &str = "PreToolUse";

/// Claude Code's after-tool hook event.
pub const POST_TOOL_USE: &str = "PostToolUse";

/// Claude Code's permission modes, as its hook input spells them.
pub const PERMISSION_MODES: [&str; 5] = [
    "default",
    "acceptEdits",
    "plan",
    "bypassPermissions",
    "dontAsk",
];

/// The reason printed with `allow`.
pub const ALLOWED_REASON: &str = "allowed once by the approval-host deployment";

/// What the hook prints for a call nobody decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WhenUndecided {
    /// `ask`: Claude Code prompts the user.
    #[default]
    Ask,
    /// No decision at all (empty output): Claude Code's own rules and mode decide.
    Defer,
    /// `deny`, with the text saying nobody could answer: for deployments where a call no
    /// answerer granted must not run whatever the harness's own settings say.
    Deny,
}

impl std::str::FromStr for WhenUndecided {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "ask" => Ok(WhenUndecided::Ask),
            "defer" => Ok(WhenUndecided::Defer),
            "deny" => Ok(WhenUndecided::Deny),
            other => Err(format!(
                "when-undecided {other:?} is not \"ask\", \"defer\" or \"deny\""
            )),
        }
    }
}

impl WhenUndecided {
    /// The spelling on the command line and in the deployment file.
    pub const fn as_str(self) -> &'static str {
        match self {
            WhenUndecided::Ask => "ask",
            WhenUndecided::Defer => "defer",
            WhenUndecided::Deny => "deny",
        }
    }
}

/// The hook input fields this adapter reads.
#[derive(Debug, Clone)]
pub struct HookInput {
    /// Claude Code's session id: the session log's name.
    pub session_id: String,
    /// The tool.
    pub tool_name: String,
    /// Its arguments.
    pub tool_input: Value,
    /// The call id.
    pub tool_use_id: Option<String>,
    /// Claude Code's working directory.
    pub cwd: Option<String>,
    /// Claude Code's permission mode.
    pub permission_mode: Option<String>,
    /// The harness's trace (`TRACEPARENT` in the hook's environment, or the forwarding request's
    /// `_meta.traceparent`); not part of Claude Code's input.
    pub trace_parent: Option<crate::service::TraceParent>,
}

impl HookInput {
    /// Parses the hook's stdin.
    ///
    /// # Errors
    /// The reason the input is refused (printed on exit 2).
    pub fn parse(text: &str) -> Result<HookInput, String> {
        let v: Value =
            serde_json::from_str(text).map_err(|e| format!("the hook input is not JSON: {e}"))?;
        Self::from_value(&v)
    }

    /// Reads the hook input from its JSON.
    ///
    /// # Errors
    /// The reason the input is refused.
    pub fn from_value(v: &Value) -> Result<HookInput, String> {
        Self::of_event(v, PRE_TOOL_USE)
    }

    /// Reads a `PostToolUse` hook input: the call that ran, for [`crate::after_tool`].
    ///
    /// # Errors
    /// The reason the input is refused.
    pub fn after_value(v: &Value) -> Result<HookInput, String> {
        Self::of_event(v, POST_TOOL_USE)
    }

    fn of_event(v: &Value, expected: &str) -> Result<HookInput, String> {
        let field = |name: &str| field(v, name);
        let optional = |name: &str| optional(v, name);
        let event = field("hook_event_name")?;
        if event != expected {
            return Err(format!(
                "hook_event_name is {event:?}; this hook answers only {expected}"
            ));
        }
        let session_id = field("session_id")?;
        crate::audit::store::validate_session_id(&session_id).map_err(|e| e.to_string())?;
        Ok(HookInput {
            session_id,
            tool_name: field("tool_name")?,
            tool_input: v.get("tool_input").cloned().unwrap_or(Value::Null),
            tool_use_id: optional("tool_use_id"),
            cwd: optional("cwd"),
            permission_mode: optional("permission_mode"),
            trace_parent: None,
        })
    }
}

/// A hook input's required non-empty string field.
pub(crate) fn field(v: &Value, name: &str) -> Result<String, String> {
    optional(v, name).ok_or_else(|| format!("the hook input has no {name}"))
}

/// A hook input's optional non-empty string field.
pub(crate) fn optional(v: &Value, name: &str) -> Option<String> {
    v.get(name)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

/// How undecided calls are answered: the deployment's `[claude-code]` (with the command line's
/// `--when-undecided` over it: [`crate::assemble::hook_options`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HookOptions {
    /// What an undecided call prints.
    pub when_undecided: WhenUndecided,
    /// Permission modes in which an undecided call is deferred whatever `when_undecided` says.
    pub defer_in_modes: Vec<String>,
    /// Said in parentheses after every reason the hook prints: why the call was answered where it
    /// was (a warm server that did not answer, so the deployment was loaded in process).
    pub note: Option<String>,
}

impl HookOptions {
    /// What a call nobody decided gets in permission mode `mode`: `defer-in-modes` defers, unless
    /// the deployment denies undecided calls outright.
    pub fn undecided(&self, mode: Option<&str>) -> WhenUndecided {
        if self.when_undecided == WhenUndecided::Deny {
            return WhenUndecided::Deny;
        }
        if mode.is_some_and(|m| self.defer_in_modes.iter().any(|d| d == m)) {
            return WhenUndecided::Defer;
        }
        self.when_undecided
    }
}

/// The hook's output: the JSON to print, or nothing (deferred to Claude Code).
#[derive(Debug, Clone, PartialEq)]
pub struct HookAnswer {
    /// What decided.
    pub verdict: Verdict,
    /// `hookSpecificOutput`, or `None` to print nothing.
    pub output: Option<Value>,
}

/// A `hookSpecificOutput` object.
pub fn output(decision: &str, reason: &str) -> Value {
    json!({
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": decision,
            "permissionDecisionReason": reason,
        }
    })
}

/// Maps a verdict to what the hook prints.
pub fn answer_for(input: &HookInput, verdict: Verdict, options: &HookOptions) -> HookAnswer {
    let tool = &input.tool_name;
    let output = match verdict.outcome {
        Outcome::AllowedOnce => Some(output("allow", ALLOWED_REASON)),
        // Claude Code shows a `deny` reason to the model: the gate's own words reach it.
        Outcome::Rejected => Some(output("deny", &texts::rejection(tool, &verdict))),
        Outcome::Cancelled => Some(output("deny", &texts::approval_cancelled(tool))),
        Outcome::Unavailable => match options.undecided(input.permission_mode.as_deref()) {
            WhenUndecided::Defer => None,
            WhenUndecided::Ask => Some(output("ask", &texts::approval_unavailable(tool))),
            WhenUndecided::Deny => Some(output("deny", &texts::approval_unavailable(tool))),
        },
    };
    HookAnswer { verdict, output }
}

/// The turns hook calls share in one process, by session: the first call of a session opens
/// the turn, the last one out ends it.
#[derive(Debug, Default)]
pub struct HookTurns {
    sessions: Mutex<HashMap<String, Arc<tokio::sync::Mutex<usize>>>>,
}

impl HookTurns {
    fn counter(&self, session: &str) -> Arc<tokio::sync::Mutex<usize>> {
        self.sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(session.to_owned())
            .or_default()
            .clone()
    }

    async fn enter(&self, service: &ApprovalService, session: &str) -> Result<(), ApprovalError> {
        let counter = self.counter(session);
        let mut inside = counter.lock().await;
        if *inside == 0 {
            // A turn left open (a hook process killed mid-call) is closed first: its questions
            // settle `cancelled`, audited.
            service.end_turn_if_open(session).await?;
            // Durable with the decision, before the hook answers: one sync fewer per call.
            service.start_turn_unsynced(session).await?;
        }
        *inside += 1;
        Ok(())
    }

    async fn leave(&self, service: &ApprovalService, session: &str) -> Result<(), ApprovalError> {
        let counter = self.counter(session);
        let mut inside = counter.lock().await;
        *inside = inside.saturating_sub(1);
        if *inside == 0 {
            service.end_turn(session).await?;
            drop(inside);
            let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
            // Forget an idle session (nobody else holds its counter).
            if sessions
                .get(session)
                .is_some_and(|c| Arc::strong_count(c) == 2)
            {
                sessions.remove(session);
            }
        }
        Ok(())
    }
}

/// Records the call, asks the deployment inside the session's turn, and maps the outcome.
///
/// # Errors
/// The log could not be written; nothing was granted.
pub async fn ask(
    service: &ApprovalService,
    turns: &HookTurns,
    agent: &Agent,
    input: &HookInput,
    options: &HookOptions,
) -> Result<HookAnswer, ApprovalError> {
    ask_until(
        service,
        turns,
        agent,
        input,
        options,
        CancellationToken::new(),
    )
    .await
}

/// [`ask`], with the question settling `cancelled` if `cancel` fires first (a server stopping).
///
/// # Errors
/// As [`ask`].
pub async fn ask_until(
    service: &ApprovalService,
    turns: &HookTurns,
    agent: &Agent,
    input: &HookInput,
    options: &HookOptions,
    cancel: CancellationToken,
) -> Result<HookAnswer, ApprovalError> {
    let verdict = decide_until(service, turns, agent, input, cancel).await?;
    Ok(answer_for(input, verdict, options))
}

/// Records the call and asks the deployment inside the session's turn: the sequence every
/// agent CLI's hook writes ([`crate::cli_hooks`] too), before any CLI's output is made.
///
/// # Errors
/// As [`ask`].
pub async fn decide_until(
    service: &ApprovalService,
    turns: &HookTurns,
    agent: &Agent,
    input: &HookInput,
    cancel: CancellationToken,
) -> Result<Verdict, ApprovalError> {
    let session = input.session_id.as_str();
    turns.enter(service, session).await?;
    let asked = async {
        let mut request = ApprovalRequest::new(agent, input.tool_name.clone()).cancel(cancel);
        if let Some(call_id) = &input.tool_use_id {
            service
                .record_tool_call_in_mode(
                    agent,
                    call_id,
                    &input.tool_name,
                    input.tool_input.clone(),
                    input.permission_mode.as_deref(),
                    false,
                )
                .await?;
            request = request.call_id(call_id.clone());
        }
        if let Some(cwd) = &input.cwd {
            request = request.cwd(cwd.clone());
        }
        if let Some(parent) = input.trace_parent {
            request = request.trace_parent(parent);
        }
        service.ask(request).await
    }
    .await;
    let left = turns.leave(service, session).await;
    let verdict = asked?;
    left?;
    Ok(verdict)
}
