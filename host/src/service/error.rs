//! Why an approval request, turn or policy operation could not be carried out. Errors are never
//! outcomes: a request that errors granted nothing, and callers treat it as a denial.

use crate::audit::error::LogError;

/// An approval request, turn or policy operation that could not be carried out.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ApprovalError {
    /// The session has no open turn (or its turn is ending); nothing was appended.
    #[error(
        "session {session} has no open turn: approval requests are accepted only between turn/start and turn/end"
    )]
    NoOpenTurn {
        /// The session id.
        session: String,
    },
    /// A subagent needs a new session, but this one already has events.
    #[error("session {session} already has events: a subagent needs a new session")]
    SessionExists {
        /// The session id.
        session: String,
    },
    /// The session log refused or failed.
    #[error(transparent)]
    Log(#[from] LogError),
    /// The request's own task failed unexpectedly (a bug); nothing was granted.
    #[error("approval request failed internally: {0}")]
    Internal(String),
    /// A standing rule could not be added, revoked or read.
    #[error(transparent)]
    Rule(#[from] crate::rules::RuleError),
    /// The service keeps no standing rules (none were enabled).
    #[error("standing rules are not enabled on this service")]
    RulesOff,
}

impl From<crate::session::NoOpenTurn> for ApprovalError {
    fn from(e: crate::session::NoOpenTurn) -> Self {
        ApprovalError::NoOpenTurn { session: e.session }
    }
}
