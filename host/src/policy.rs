//! The per-session approval policy (`ask | never`), the sandbox modes as logs spell them, and the
//! exact texts they show an agent: the runtime-context sentences and the change notice.
//!
//! The effective policy of a session is its last logged `approval/policy` event, or the
//! deployment default when it has none: a pure fold over the log, so replay rebuilds it.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Whether a session's approval requests reach the answerers at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Policy {
    /// Requests run through the waterfall of answerers.
    #[default]
    Ask,
    /// Every request settles `rejected` before any answerer runs.
    Never,
}

/// The error for any policy value outside the vocabulary.
pub const POLICY_VOCABULARY_ERROR: &str = "approval policy must be one of \"ask\" or \"never\"";

/// The runtime-context sentence for a session whose effective policy is `ask`.
pub const ASK_CONTEXT: &str = "Approval policy: ask. Operations that require approval may ask through the configured answerers; without an available answerer, the request fails closed.";

/// The runtime-context sentence for a session whose effective policy is `never`.
pub const NEVER_CONTEXT: &str = "Approval prompts are disabled in this session: actions that require approval are rejected automatically \u{2014} do not request sandbox escalation (do not set `sandbox_permissions`).";

/// The runtime-context sentence a delegated subagent gets while its delegation pin stands.
pub const SUBAGENT_CONTEXT: &str = "You are a delegated subagent: your permission scope was fixed when you were started and cannot be widened from inside this session \u{2014} operations that require approval are rejected automatically. When the task needs access beyond that scope, do not retry the denied operation; state the limitation in your reply so the delegating agent can handle it.";

/// The runtime-context sentence of a session with its own sandbox mode (a logged `sandbox/mode`):
/// set for the session, or inherited at delegation. A session on the deployment default gets no
/// sandbox sentence. Byte-stable.
pub const fn sandbox_context(mode: SandboxModeName, inherited: bool) -> &'static str {
    use SandboxModeName as M;
    match (mode, inherited) {
        (M::ReadOnly, false) => "Sandbox mode: read-only, set for this session.",
        (M::WorkspaceWrite, false) => "Sandbox mode: workspace-write, set for this session.",
        (M::DangerFullAccess, false) => "Sandbox mode: danger-full-access, set for this session.",
        (M::ReadOnly, true) => {
            "Sandbox mode: read-only, inherited from the delegating agent: your commands run no wider than its own."
        }
        (M::WorkspaceWrite, true) => {
            "Sandbox mode: workspace-write, inherited from the delegating agent: your commands run no wider than its own."
        }
        (M::DangerFullAccess, true) => {
            "Sandbox mode: danger-full-access, inherited from the delegating agent: your commands run no wider than its own."
        }
    }
}

/// The `source` of a policy switch made by the user.
pub const SOURCE_USER: &str = "user";

/// The `source` of the seed events of a subagent's new session: its `never` pin, and the
/// parent's sandbox override when it has one.
pub const SOURCE_DELEGATION: &str = "delegation";

impl Policy {
    /// The wire spelling: `ask` or `never`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Policy::Ask => "ask",
            Policy::Never => "never",
        }
    }

    /// The runtime-context sentence for this policy; byte-stable.
    pub const fn context_sentence(self) -> &'static str {
        match self {
            Policy::Ask => ASK_CONTEXT,
            Policy::Never => NEVER_CONTEXT,
        }
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A value outside the `ask | never` vocabulary.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{POLICY_VOCABULARY_ERROR}")]
pub struct UnknownPolicy(pub String);

impl FromStr for Policy {
    type Err = UnknownPolicy;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "ask" => Ok(Policy::Ask),
            "never" => Ok(Policy::Never),
            other => Err(UnknownPolicy(other.to_owned())),
        }
    }
}

/// The notice queued for an agent when its session's effective policy changes, e.g.
/// `The approval policy changed from "ask" to "never" (changed by the user).`
pub fn change_notice(from: Policy, to: Policy, source: Option<&str>) -> String {
    match source {
        Some(SOURCE_USER) => {
            format!(
                "The approval policy changed from \"{from}\" to \"{to}\" (changed by the user)."
            )
        }
        Some(other) => {
            format!("The approval policy changed from \"{from}\" to \"{to}\" (changed by {other}).")
        }
        None => format!("The approval policy changed from \"{from}\" to \"{to}\"."),
    }
}

/// A sandbox mode as the log spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxModeName {
    /// `read-only`.
    ReadOnly,
    /// `workspace-write`.
    WorkspaceWrite,
    /// `danger-full-access`.
    DangerFullAccess,
}

impl SandboxModeName {
    /// The log's spelling: `read-only`, `workspace-write` or `danger-full-access`.
    pub const fn as_str(self) -> &'static str {
        match self {
            SandboxModeName::ReadOnly => "read-only",
            SandboxModeName::WorkspaceWrite => "workspace-write",
            SandboxModeName::DangerFullAccess => "danger-full-access",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_only_the_vocabulary() {
        assert_eq!("ask".parse::<Policy>().unwrap(), Policy::Ask);
        assert_eq!("never".parse::<Policy>().unwrap(), Policy::Never);
        let err = "sometimes".parse::<Policy>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "approval policy must be one of \"ask\" or \"never\""
        );
        assert!("Ask".parse::<Policy>().is_err());
    }

    #[test]
    fn notice_text_names_both_values_and_the_source() {
        assert_eq!(
            change_notice(Policy::Ask, Policy::Never, Some(SOURCE_USER)),
            "The approval policy changed from \"ask\" to \"never\" (changed by the user)."
        );
        assert_eq!(
            change_notice(Policy::Never, Policy::Ask, None),
            "The approval policy changed from \"never\" to \"ask\"."
        );
    }

    #[test]
    fn never_sentence_has_em_dash_and_backticks() {
        assert!(NEVER_CONTEXT.contains(" \u{2014} "));
        assert!(NEVER_CONTEXT.contains("`sandbox_permissions`"));
    }
}
