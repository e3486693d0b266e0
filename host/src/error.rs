//! The library's public error types. Errors are never outcomes: a request that errors granted
//! nothing, and callers treat it as a denial.

use std::io;
use std::sync::Arc;

use crate::fold::Violation;

/// A session log could not be opened or refused an append.
#[derive(Debug, Clone, thiserror::Error)]
pub enum LogError {
    /// The session id could escape the sessions directory or is not a portable file name.
    #[error("invalid session id {id:?}: {why}")]
    InvalidSessionId {
        /// The refused id.
        id: String,
        /// Which rule it broke.
        why: &'static str,
    },
    /// Reading, writing or syncing the log failed. Shared, because every append of a failed
    /// batch reports the same error.
    #[error("session log {log}: {source}")]
    Io {
        /// The log's name (its path for the file store).
        log: String,
        /// The underlying error.
        #[source]
        source: Arc<io::Error>,
    },
    /// A complete line of the log does not parse or is out of sequence.
    #[error("session log {log} line {line}: {reason}")]
    Corrupt {
        /// The log's name.
        log: String,
        /// The 1-based line number.
        line: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// Another process (or, on a shared store, another host) holds the log open.
    #[error("session log {log} is in use by {}", holder.as_deref().unwrap_or("another process"))]
    Locked {
        /// The log's name.
        log: String,
        /// Who holds it, when the store can tell (a lease's owner: host name, process, open).
        holder: Option<String>,
    },
    /// The event broke a log rule; nothing was written.
    #[error("session {session}: refused {kind}: {violation}")]
    Refused {
        /// The session id.
        session: String,
        /// The refused event's type.
        kind: &'static str,
        /// The rule it broke.
        violation: Violation,
    },
    /// A write failed earlier, so what is on disk is uncertain: the log accepts nothing more
    /// until it is reopened (which recovers it).
    #[error("session log {log} stopped accepting events after a failed write: {reason}")]
    Poisoned {
        /// The log's name.
        log: String,
        /// The failure that stopped it.
        reason: String,
    },
    /// A complete line of an existing log breaks a log rule.
    #[error("session log {log} line {line}: {violation}")]
    Inconsistent {
        /// The log's name.
        log: String,
        /// The 1-based line number.
        line: usize,
        /// The rule it broke.
        violation: Violation,
    },
}

impl LogError {
    /// The underlying I/O error, when this is an I/O failure.
    pub fn io_error(&self) -> Option<&io::Error> {
        match self {
            LogError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

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
