//! A session's journal on the database: lines held until the sync, then committed in the next
//! batch across sessions (`batch.rs`: the lease checked and the rows inserted by one statement).

use std::io;
use std::sync::Arc;

use crate::audit::store::{CommitMode, DetachedSync, Journal, SyncDone};

use super::batch::{Queue, Rows};
use super::lease::release;
use super::{Failure, Inner, client};

/// One open session's writer. Lines written are held in memory until the next sync, which
/// commits them all in one batch (one transaction, shared with other sessions' syncs) that also
/// checks the lease and refuses them if another host owns it now: an in-process question and its
/// decision cost one commit. The log hands a sync over without waiting ([`Journal::detach_sync`]);
/// [`Journal::sync`] waits, for a log being closed.
pub(super) struct PgJournal {
    pub(super) inner: Arc<Inner>,
    pub(super) session: String,
    pub(super) owner: String,
    /// The seq of the first pending line.
    pub(super) next_seq: i64,
    /// Lines written and not yet committed.
    pub(super) pending: Vec<String>,
    pub(super) name: String,
}

impl Journal for PgJournal {
    fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.write(bytes)?;
        self.sync()
    }

    fn commit_mode(&self) -> CommitMode {
        CommitMode::Split
    }

    fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        let text = std::str::from_utf8(bytes).map_err(io::Error::other)?;
        self.pending.extend(
            text.strip_suffix('\n')
                .unwrap_or(text)
                .split('\n')
                .map(str::to_owned),
        );
        Ok(())
    }

    fn sync(&mut self) -> io::Result<()> {
        // Joins the next batch across sessions (`batch.rs`) and waits for its commit. On failure
        // the lines stay uncommitted and the log stops accepting events; reopening reads back
        // what the database holds.
        crate::audit::store::wait_for(self.detach_sync())
    }

    fn syncs_detached(&self) -> bool {
        true
    }

    fn detach_sync(&mut self) -> Box<dyn DetachedSync> {
        let lines = std::mem::take(&mut self.pending);
        let first_seq = self.next_seq;
        // Counted as sent: a batch that fails stops the log, which is reopened from the rows the
        // database holds.
        self.next_seq += lines.len() as i64;
        Box::new(Detached {
            session: self.session.clone(),
            owner: self.owner.clone(),
            first_seq,
            lines,
            queue: self.inner.batches.clone(),
            name: self.name.clone(),
        })
    }
}

/// A sync this journal handed over: its lines, queued for the next batch when started.
struct Detached {
    session: String,
    owner: String,
    first_seq: i64,
    lines: Vec<String>,
    queue: Queue,
    name: String,
}

impl DetachedSync for Detached {
    fn start(self: Box<Self>, done: SyncDone) {
        let Detached {
            session,
            owner,
            first_seq,
            lines,
            queue,
            name,
        } = *self;
        if lines.is_empty() {
            return done(Ok(()));
        }
        let rows = Rows {
            session,
            owner,
            first_seq,
            lines,
            // What a sync failure says: the log's name and why.
            done: Box::new(move |result| {
                done(result.map_err(|e| io::Error::other(format!("{name}: {e}"))))
            }),
        };
        if let Err(refused) = queue.send(rows) {
            (refused.0.done)(Err(Failure::Stopped));
        }
    }
}

impl Drop for PgJournal {
    fn drop(&mut self) {
        let inner = self.inner.clone();
        let (session, owner) = (self.session.clone(), self.owner.clone());
        // Released before the log's drop returns, like the file store's lock: a reopen right
        // after finds the session free.
        let _ = self.inner.block(async move {
            match client(&inner.pool).await {
                Ok(client) => release(&inner, &client, &session, &owner).await,
                Err(e) => {
                    inner
                        .held
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .remove(&owner);
                    tracing::warn!(session, error = %e, "could not release a session lease; it expires on its own");
                }
            }
            Ok(())
        });
    }
}
