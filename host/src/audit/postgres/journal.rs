//! A session's journal on the database: lines held until the sync, then committed by one fenced
//! statement (the lease renewed and the rows inserted in one round trip).

use std::io;
use std::sync::Arc;

use crate::audit::store::{CommitMode, Journal};

use super::lease::release;
use super::{Failure, Inner, again, client};

/// One open session's writer. Lines written are held in memory until the next sync, which
/// commits them all in one statement (its own transaction) that also renews the lease and fails
/// if another host owns it now: an in-process question and its decision cost one commit.
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

/// The batch insert, fenced by the lease: the lease row is updated (and so locked until commit,
/// so a takeover waits for this batch instead of reading past it) and the rows are inserted only
/// if this owner still holds it. One statement, one round trip, one commit.
const APPEND: &str = "WITH lease AS (
        UPDATE approval_leases
        SET expires_at = now() + $3::FLOAT8 * INTERVAL '1 millisecond'
        WHERE session = $1 AND owner = $2
        RETURNING owner
    )
    INSERT INTO approval_records (session, seq, line, written_by)
    SELECT $1, s, l, $6 FROM unnest($4::INT8[], $5::TEXT[]) AS batch (s, l)
    WHERE EXISTS (SELECT 1 FROM lease)";

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
        if self.pending.is_empty() {
            return Ok(());
        }
        let lines = std::mem::take(&mut self.pending);
        let count = lines.len() as i64;
        let seqs: Vec<i64> = (0..count).map(|i| self.next_seq + i).collect();
        let inner = self.inner.clone();
        let (session, owner) = (self.session.clone(), self.owner.clone());
        let committed = self.inner.block(async move {
            let client = client(&inner.pool).await?;
            let mut tries = 0;
            loop {
                let attempt = async {
                    let inserted = client
                        .execute(
                            APPEND,
                            &[
                                &session,
                                &owner,
                                &inner.lease_ms,
                                &seqs,
                                &lines,
                                &inner.host_label,
                            ],
                        )
                        .await?;
                    if inserted == seqs.len() as u64 {
                        return Ok(());
                    }
                    let now = client
                        .query_opt(
                            "SELECT owner FROM approval_leases WHERE session = $1",
                            &[&session],
                        )
                        .await?;
                    Err(Failure::LeaseLost {
                        owner: now.map(|r| r.get(0)),
                    })
                }
                .await;
                match attempt {
                    Err(e) if again(&inner, &e, &mut tries).await => {}
                    other => return other,
                }
            }
        });
        // On failure the lines stay uncommitted and the log stops accepting events; reopening
        // reads back what the database holds.
        committed.map_err(|e| io::Error::other(format!("{}: {e}", self.name)))?;
        self.next_seq += count;
        Ok(())
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
