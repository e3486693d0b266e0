//! The exact texts a model sees when a tool call is refused, written once. The model sees each
//! prefixed with [`ERROR_PREFIX`].

use crate::service::Verdict;

/// What the model sees before every refusal text.
pub const ERROR_PREFIX: &str = "Error: ";

/// The caller cancelled before the body ran.
pub const ABORTED_BEFORE_DISPATCH: &str = "tool call aborted before dispatch";

/// The error code of [`ABORTED_BEFORE_DISPATCH`].
pub const ABORTED_CODE: &str = "ABORTED_BEFORE_DISPATCH";

/// The caller cancelled while the body ran a command; the command was killed.
pub const COMMAND_CANCELLED: &str = "the command was cancelled and killed";

/// `ask` with no approval service mounted and no reason of its own.
pub fn approval_not_supported(tool: &str) -> String {
    format!("tool \"{tool}\" requires approval (not yet supported)")
}

/// `ask` from a call that has no agent.
pub fn approval_without_agent(tool: &str) -> String {
    format!("tool \"{tool}\" requires approval, but the call has no agent to route it through")
}

/// `ask` settled `rejected`, by a person who gave no reason, or by a gate that gave none.
pub fn approval_rejected(tool: &str) -> String {
    format!("the user rejected tool \"{tool}\"")
}

/// `ask` settled `rejected` by an in-process gate (a plugin, a rule) that said why.
pub fn approval_rejected_by_policy(tool: &str, policy: &str, reason: &str) -> String {
    format!("tool \"{tool}\" was rejected by policy \"{policy}\": {reason}")
}

/// `ask` settled `rejected` by a person (an answerer outside the process) who said why.
pub fn approval_rejected_because(tool: &str, reason: &str) -> String {
    format!("the user rejected tool \"{tool}\": {reason}")
}

/// The text for a `rejected` verdict on a call of `tool`: the reference text when nobody said
/// why (a reason-less rejection, policy `never`), else the gate's or the person's reason.
pub fn rejection(tool: &str, verdict: &Verdict) -> String {
    match (&verdict.reason, &verdict.answerer) {
        (Some(reason), Some(gate)) if !verdict.answered_outside => {
            approval_rejected_by_policy(tool, gate, reason)
        }
        (Some(reason), _) => approval_rejected_because(tool, reason),
        (None, _) => approval_rejected(tool),
    }
}

/// `ask` settled `cancelled`.
pub fn approval_cancelled(tool: &str) -> String {
    format!("approval for tool \"{tool}\" was cancelled")
}

/// `ask` settled `unavailable`.
pub fn approval_unavailable(tool: &str) -> String {
    format!("tool \"{tool}\" requires approval, but no approval channel is available")
}

/// No tool of that name is registered.
pub fn unknown_tool(tool: &str) -> String {
    format!("unknown tool \"{tool}\"")
}

/// The arguments do not fit the tool's schema.
pub fn invalid_arguments(tool: &str, why: &str) -> String {
    format!("invalid arguments for tool \"{tool}\": {why}")
}

/// The asker's audit failed; the tool does not run.
pub fn approval_failed(tool: &str, why: &str) -> String {
    format!("approval for tool \"{tool}\" failed: {why}")
}

/// The default reason of a PreToolUse hook that blocks without one.
pub const HOOK_BLOCKED: &str = "blocked by PreToolUse hook";

/// Sandbox escalation texts (the bash tool's asker).
pub mod escalation {
    /// `sandbox_permissions` without `justification`.
    pub const NEEDS_JUSTIFICATION: &str =
        "invalid escalation: sandbox_permissions requires a justification";
    /// `justification` without `sandbox_permissions`.
    pub const JUSTIFICATION_ALONE: &str =
        "invalid escalation: justification is only valid together with sandbox_permissions";
    /// An empty or blank justification.
    pub const EMPTY_JUSTIFICATION: &str = "invalid justification: expected a non-empty sentence";

    /// The requested mode is not wider than the current one.
    pub fn not_wider(mode: &str, current: &str) -> String {
        format!(
            "sandbox escalation to \"{mode}\" is not strictly wider than this call's current \"{current}\" mode"
        )
    }

    /// The approval request's reason.
    pub fn reason(mode: &str, justification: &str) -> String {
        format!("escalate sandbox to {mode}: {justification}")
    }

    use crate::service::Verdict;

    /// Settled `rejected`, with no reason given.
    pub fn rejected(mode: &str) -> String {
        format!("the user rejected escalating this command to \"{mode}\"")
    }

    /// Settled `rejected` by an in-process gate that said why.
    pub fn rejected_by_policy(mode: &str, policy: &str, reason: &str) -> String {
        format!(
            "escalating this command to \"{mode}\" was rejected by policy \"{policy}\": {reason}"
        )
    }

    /// Settled `rejected` by a person who said why.
    pub fn rejected_because(mode: &str, reason: &str) -> String {
        format!("the user rejected escalating this command to \"{mode}\": {reason}")
    }

    /// The text for a `rejected` verdict on an escalation to `mode`, as
    /// [`super::rejection`] chooses for a tool call.
    pub fn rejection(mode: &str, verdict: &Verdict) -> String {
        match (&verdict.reason, &verdict.answerer) {
            (Some(reason), Some(gate)) if !verdict.answered_outside => {
                rejected_by_policy(mode, gate, reason)
            }
            (Some(reason), _) => rejected_because(mode, reason),
            (None, _) => rejected(mode),
        }
    }

    /// Settled `cancelled`.
    pub fn cancelled(mode: &str) -> String {
        format!("approval for escalating to \"{mode}\" was cancelled")
    }

    /// Settled `unavailable`.
    pub fn unavailable(mode: &str) -> String {
        format!(
            "sandbox escalation to \"{mode}\" requires approval, but no approval channel is available"
        )
    }

    /// No approval service composed.
    pub fn no_service(mode: &str) -> String {
        format!(
            "sandbox escalation to \"{mode}\" requires approval, but no approval service is composed"
        )
    }

    /// No agent on the call.
    pub fn no_agent(mode: &str) -> String {
        format!(
            "sandbox escalation to \"{mode}\" requires approval, but the call has no agent to route it through"
        )
    }

    /// Appended to the output of a command that failed on a sandboxed write.
    pub fn denied_hint(mode: &str) -> String {
        format!(
            "[sandbox: file access denied under {mode} mode]\nIf this command needs to write there, retry it once with `sandbox_permissions` set to a wider mode and a `justification` sentence; that may ask the user."
        )
    }
}
