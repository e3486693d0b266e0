//! The exact texts a model sees when a tool call is refused, written once. The model sees each
//! prefixed with [`ERROR_PREFIX`].

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

/// `ask` settled `rejected`.
pub fn approval_rejected(tool: &str) -> String {
    format!("the user rejected tool \"{tool}\"")
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

    /// Settled `rejected`.
    pub fn rejected(mode: &str) -> String {
        format!("the user rejected escalating this command to \"{mode}\"")
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
