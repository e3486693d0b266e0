//! The [`Store`] over the database: opening a session's log (its lease taken, its rows read),
//! measuring, reading and listing logs without a lease.

use std::sync::atomic::Ordering;

use crate::audit::error::LogError;
use crate::audit::store::{OpenedLog, Store, parse_lines};

use super::journal::PgJournal;
use super::lease::{Lease, release, take_lease};
use super::{Failure, PgStore, again, client, log_error};

impl Store for PgStore {
    fn trouble(&self) -> Option<String> {
        self.inner
            .renewal_failing
            .load(Ordering::Relaxed)
            .then(|| "session leases could not be renewed at the last attempt".to_owned())
    }

    fn open(&self, session: &str) -> Result<OpenedLog, LogError> {
        crate::audit::store::validate_session_id(session)?;
        let name = Self::log_name(session);
        let n = self.inner.opened.fetch_add(1, Ordering::Relaxed);
        let owner = format!(
            "{} #{n} {}",
            self.inner.host_label,
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        );
        let inner = self.inner.clone();
        let (sess, own) = (session.to_owned(), owner.clone());
        let opened = self.inner.block(async move {
            let client = client(&inner.pool).await?;
            let mut tries = 0;
            let taken_over = loop {
                match take_lease(&client, &sess, &own, inner.lease_ms).await {
                    Ok(Lease::Taken { from }) => break from,
                    // Released between the two statements: try again.
                    Ok(Lease::Held(h)) if h.is_empty() => {}
                    Ok(Lease::Held(holder)) => return Ok(Err(holder)),
                    Err(e) if again(&inner, &e, &mut tries).await => {}
                    Err(e) => return Err(e),
                }
            };
            inner
                .held
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(own.clone());
            let rows = client
                .query(
                    "SELECT seq, line FROM approval_records WHERE session = $1 ORDER BY seq",
                    &[&sess],
                )
                .await
                .map_err(Failure::from);
            match rows {
                Ok(rows) => Ok(Ok((
                    rows.iter()
                        .map(|r| (r.get::<_, i64>(0), r.get::<_, String>(1)))
                        .collect::<Vec<_>>(),
                    taken_over,
                ))),
                Err(e) => {
                    release(&inner, &client, &sess, &own).await;
                    Err(e)
                }
            }
        });
        let (rows, taken_over) = match opened.map_err(|e| log_error(&name, e))? {
            Ok(opened) => {
                if opened.1.is_some() {
                    crate::audit::stats::took_over();
                }
                opened
            }
            Err(holder) => {
                return Err(LogError::Locked {
                    log: name,
                    holder: Some(holder),
                });
            }
        };
        // The journal owns the lease from here: dropping it (on any error below) releases it.
        let journal = PgJournal {
            inner: self.inner.clone(),
            session: session.to_owned(),
            owner,
            next_seq: rows.len() as i64 + 1,
            pending: Vec::new(),
            name: name.clone(),
        };
        let mut bytes = Vec::with_capacity(rows.iter().map(|(_, l)| l.len() + 1).sum());
        for (i, (seq, line)) in rows.iter().enumerate() {
            if *seq != i as i64 + 1 {
                return Err(LogError::Corrupt {
                    log: name,
                    line: i + 1,
                    reason: format!("seq {seq} where {} was expected", i + 1),
                });
            }
            bytes.extend_from_slice(line.as_bytes());
            bytes.push(b'\n');
        }
        let records = parse_lines(&name, &bytes)?;
        let tail = rows
            .last()
            .map(|(_, line)| crate::audit::chain::line_hash(line.as_bytes()));
        Ok(OpenedLog {
            name,
            records,
            tail,
            journal: Box::new(journal),
            taken_over,
        })
    }

    fn log_len(&self, session: &str) -> Result<Option<u64>, LogError> {
        crate::audit::store::validate_session_id(session)?;
        let pool = self.inner.pool.clone();
        let sess = session.to_owned();
        let len = self
            .inner
            .block(async move {
                let row = client(&pool)
                    .await?
                    .query_one(
                        "SELECT coalesce(max(seq), 0) FROM approval_records WHERE session = $1",
                        &[&sess],
                    )
                    .await?;
                Ok(row.get::<_, i64>(0))
            })
            .map_err(|e| log_error(&Self::log_name(session), e))?;
        Ok(Some(len as u64))
    }

    fn read(&self, session: &str) -> Result<Vec<u8>, LogError> {
        crate::audit::store::validate_session_id(session)?;
        let pool = self.inner.pool.clone();
        let sess = session.to_owned();
        let lines = self
            .inner
            .block(async move {
                let rows = client(&pool)
                    .await?
                    .query(
                        "SELECT line FROM approval_records WHERE session = $1 ORDER BY seq",
                        &[&sess],
                    )
                    .await?;
                Ok(rows
                    .iter()
                    .map(|r| r.get::<_, String>(0))
                    .collect::<Vec<_>>())
            })
            .map_err(|e| log_error(&Self::log_name(session), e))?;
        let mut bytes = Vec::new();
        for line in lines {
            bytes.extend_from_slice(line.as_bytes());
            bytes.push(b'\n');
        }
        Ok(bytes)
    }

    /// Every session (and rules log) with at least one record, in name order.
    fn list(&self) -> Result<Vec<String>, LogError> {
        Ok(self
            .list_lens()?
            .into_iter()
            .map(|(name, _)| name)
            .collect())
    }

    fn list_lens(&self) -> Result<crate::audit::store::LogLens, LogError> {
        let pool = self.inner.pool.clone();
        self.inner
            .block(async move {
                let rows = client(&pool)
                    .await?
                    .query(
                        "SELECT session, max(seq) FROM approval_records GROUP BY session ORDER BY session",
                        &[],
                    )
                    .await?;
                Ok(rows
                    .iter()
                    .map(|r| (r.get::<_, String>(0), Some(r.get::<_, i64>(1) as u64)))
                    .collect())
            })
            .map_err(|e| log_error("postgres", e))
    }
}
