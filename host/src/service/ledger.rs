//! Ledgers on the service: logs that are not sessions (the MCP gateway's pins), read whole and
//! checked as `verify` checks a log, appended one record at a time, each record durable and
//! checkpointed (when the deployment signs) before the append returns. Any process of a
//! deployment may write one (another gateway, `mcp pins approve`): an open waits a while for
//! another holding it.

use std::time::Duration;

use super::{ApprovalError, ApprovalService};
use crate::audit::error::LogError;
use crate::audit::event::{Event, Record};
use crate::audit::log::SessionLog;

/// How long an append waits for another process holding the ledger.
const LOCK_PATIENCE: Duration = Duration::from_secs(10);

/// A ledger as read: where it stood, and its records.
#[derive(Debug, Clone, Default)]
pub struct Ledger {
    /// The store's size for it ([`crate::audit::store::Store::log_len`]): unchanged means no
    /// record was added since.
    pub len: Option<u64>,
    /// Its records in order.
    pub records: Vec<Record>,
}

impl ApprovalService {
    /// The size of ledger `name` in the store, when the store can tell cheaply.
    pub fn ledger_len(&self, name: &str) -> Option<u64> {
        self.inner.store.log_len(name).ok().flatten()
    }

    /// Reads ledger `name` (empty when it has none): refused unless it reads intact, chained
    /// from its first record, with the writer's rules (no line changed, removed or inserted)
    /// and, when the deployment signs, every record covered by a checkpoint and none removed
    /// after one (a ledger deleted or cut back is refused, not read as new). A record another
    /// process appended a moment ago, whose checkpoint is still being written, is refused too:
    /// the reader reads it again at its next look.
    ///
    /// # Errors
    /// [`LogError::Corrupt`] naming what is wrong; the store cannot be read.
    pub async fn read_ledger(&self, name: &str) -> Result<Ledger, ApprovalError> {
        let store = self.inner.store.clone();
        let name = name.to_owned();
        let checkpointer = self.checkpointer();
        tokio::task::spawn_blocking(move || read(&*store, &name, checkpointer.as_deref()))
            .await
            .map_err(|e| ApprovalError::Internal(e.to_string()))?
    }

    /// Appends `event` to ledger `name`, durable (and checkpointed when the deployment signs)
    /// before this returns.
    ///
    /// # Errors
    /// The ledger cannot be opened (another process held it for too long, it is corrupt) or
    /// written.
    pub async fn append_ledger(&self, name: &str, event: Event) -> Result<(), ApprovalError> {
        debug_assert!(crate::audit::store::is_ledger(name));
        let store = self.inner.store.clone();
        let owned = name.to_owned();
        let log = tokio::task::spawn_blocking(move || open(&*store, &owned))
            .await
            .map_err(|e| ApprovalError::Internal(e.to_string()))??;
        log.append(event).await?;
        let checkpointer = self.checkpointer();
        if let Some(checkpointer) = checkpointer {
            // Every ledger record is checkpointed before it is reported done, as a rule change
            // is: `verify` reads one past the last checkpoint as added by someone else.
            let (seq, head) = log.durable_point();
            let owned = name.to_owned();
            tokio::task::spawn_blocking(move || checkpointer.write(&owned, seq, &head))
                .await
                .map_err(|e| ApprovalError::Internal(e.to_string()))?
                .map_err(|e| ApprovalError::Internal(format!("checkpoint of {name}: {e}")))?;
        }
        Ok(())
    }
}

fn open(store: &dyn crate::audit::store::Store, name: &str) -> Result<SessionLog, LogError> {
    SessionLog::open_waiting(store, name, LOCK_PATIENCE)
}

fn read(
    store: &dyn crate::audit::store::Store,
    name: &str,
    checkpointer: Option<&crate::audit::checkpoint::Checkpointer>,
) -> Result<Ledger, ApprovalError> {
    let len = store.log_len(name).ok().flatten();
    let bytes = match store.read(name) {
        Ok(bytes) => bytes,
        // A store that can only be read by opening a log: the writer's checks on open are
        // the check.
        Err(LogError::Io { source, .. }) if source.kind() == std::io::ErrorKind::Unsupported => {
            let log = open(store, name)?;
            drop(log);
            store.read(name)?
        }
        Err(e) => return Err(e.into()),
    };
    let corrupt = |line: u64, reason: String| LogError::Corrupt {
        log: name.to_owned(),
        line: usize::try_from(line).unwrap_or(usize::MAX),
        reason,
    };
    let checkpoints = match checkpointer {
        Some(c) => Some((
            c.verifying_key(),
            c.checkpoints(name)
                .map_err(|e| corrupt(0, format!("its checkpoints cannot be read: {e}")))?,
        )),
        None => None,
    };
    let report = crate::audit::verify::verify_reader_with(
        bytes.as_slice(),
        name,
        checkpoints.as_ref().map(|(k, l)| (k, l.as_slice())),
    )
    .map_err(|e| corrupt(0, e.to_string()))?;
    if let Some(problem) = report.problem {
        return Err(corrupt(problem.line, problem.message).into());
    }
    if report.records > 0 && report.chained_from != Some(1) {
        return Err(corrupt(1, "its first records are not chained".to_owned()).into());
    }
    let records = crate::audit::store::parse_lines(name, &bytes)?;
    Ok(Ledger { len, records })
}
