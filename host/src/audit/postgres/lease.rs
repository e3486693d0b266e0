//! One writer per session across hosts: taking a session's lease with a compare-and-set, renewing
//! the leases of open sessions, releasing one when its session closes.

use std::collections::HashSet;
use std::sync::Weak;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio_postgres::Client;

use super::{Failure, Inner, again, client};

/// Renews every lease this store holds, until the store is dropped.
pub(super) async fn renew_leases(inner: Weak<Inner>, every: Duration) {
    let mut ticker = tokio::time::interval(every.max(Duration::from_millis(50)));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let Some(inner) = inner.upgrade() else { return };
        let owners: Vec<String> = inner
            .held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .cloned()
            .collect();
        if owners.is_empty() {
            // No lease to keep: nothing is failing.
            inner.renewal_failing.store(false, Ordering::Relaxed);
            continue;
        }
        let mut tries = 0;
        let renewed = loop {
            let attempt = async {
                let rows = client(&inner.pool)
                    .await?
                    .query(
                        // Locked in session order, as a batch commit locks them: the two
                        // never wait on each other in a circle.
                        "WITH locked AS (
                             SELECT session FROM approval_leases WHERE owner = ANY($1)
                             ORDER BY session FOR UPDATE
                         )
                         UPDATE approval_leases AS l
                         SET expires_at = now() + $2::FLOAT8 * INTERVAL '1 millisecond'
                         FROM locked AS k
                         WHERE l.session = k.session AND l.owner = ANY($1) RETURNING l.owner",
                        &[&owners, &inner.lease_ms],
                    )
                    .await?;
                Ok::<_, Failure>(
                    rows.iter()
                        .map(|r| r.get::<_, String>(0))
                        .collect::<HashSet<String>>(),
                )
            }
            .await;
            match attempt {
                Err(e) if again(&inner, &e, &mut tries).await => {}
                other => break other,
            }
        };
        match renewed {
            Ok(renewed) => {
                inner.renewal_failing.store(false, Ordering::Relaxed);
                crate::audit::stats::renewed(renewed.len() as u64);
                // A lease released while this ran is not lost.
                let held = inner.held.lock().unwrap_or_else(|p| p.into_inner());
                let lost = owners
                    .iter()
                    .filter(|o| held.contains(*o) && !renewed.contains(*o))
                    .count();
                if lost > 0 {
                    crate::audit::stats::lost(lost as u64);
                    tracing::warn!(
                        lost,
                        "leases taken over by another host; their sessions accept no more events here"
                    );
                }
            }
            Err(e) => {
                inner.renewal_failing.store(true, Ordering::Relaxed);
                crate::audit::stats::renewal_failed();
                tracing::warn!(error = %e, "could not renew session leases");
            }
        }
    }
}

/// The outcome of asking for a session's lease.
pub(super) enum Lease {
    /// Taken; `from` names the owner whose lease had run out, when there was one (a takeover).
    Taken { from: Option<String> },
    /// Another owner's lease is still running (empty when it was released meanwhile).
    Held(String),
}

/// Takes `session`'s lease for `owner` unless another owner's lease is still running.
pub(super) async fn take_lease(
    client: &Client,
    session: &str,
    owner: &str,
    lease_ms: f64,
) -> Result<Lease, Failure> {
    // `before` reads the row as the statement found it: an expired lease it replaces is a
    // takeover of a host that stopped answering.
    let taken = client
        .query_opt(
            "WITH before AS (SELECT owner FROM approval_leases WHERE session = $1)
             INSERT INTO approval_leases (session, owner, expires_at)
             VALUES ($1, $2, now() + $3::FLOAT8 * INTERVAL '1 millisecond')
             ON CONFLICT (session) DO UPDATE
                SET owner = excluded.owner, expires_at = excluded.expires_at
                WHERE approval_leases.expires_at <= now()
             RETURNING (SELECT owner FROM before)",
            &[&session, &owner, &lease_ms],
        )
        .await?;
    if let Some(row) = taken {
        return Ok(Lease::Taken {
            from: row.get::<_, Option<String>>(0),
        });
    }
    let holder = client
        .query_opt(
            "SELECT owner FROM approval_leases WHERE session = $1",
            &[&session],
        )
        .await?;
    Ok(Lease::Held(holder.map_or_else(String::new, |r| r.get(0))))
}

pub(super) async fn release(inner: &Inner, client: &Client, session: &str, owner: &str) {
    inner
        .held
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(owner);
    if let Err(e) = client
        .execute(
            "DELETE FROM approval_leases WHERE session = $1 AND owner = $2",
            &[&session, &owner],
        )
        .await
    {
        tracing::warn!(session, error = %e, "could not release a session lease; it expires on its own");
    }
}
