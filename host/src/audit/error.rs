//! Why a session log could not be opened or refused an append: the audit's own error, beside
//! what fails.

use std::io;
use std::sync::Arc;

use crate::audit::fold::Violation;

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
