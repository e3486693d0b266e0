//! Commits across sessions: every open log's sync joins the next batch, and one statement (one
//! round trip, one transaction, one WAL flush) commits the batch's rows for all of its sessions,
//! each fenced by its own lease. With 64 askers on 64 logs the database sees a few large commits
//! instead of 64 small ones; one asker alone still commits at once.
//!
//! A batch commits whole or not at all, except that a session whose lease another host holds
//! now gets none of its rows in and is told so, while the others commit. A batch failing for any
//! other reason is retried as the store retries (serialization failure, deadlock), then split:
//! each session's rows commit alone, so one session's trouble is never another's.

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use tokio::sync::{Semaphore, mpsc};

use super::{Failure, Inner, again, client};

/// Most batches in flight at once: a few, so a batch fills while another commits, but not so many
/// that each holds one row. Never more than half the pool, which opens and leases need too.
const IN_FLIGHT: usize = 4;

/// Most rows in one batch.
const MAX_ROWS: usize = 4096;

/// The batch insert: the leases of the batch's sessions that this host still owns are locked in
/// session order (as the lease renewal locks them: two statements never wait on each other in a
/// circle) for share, so a takeover, which updates the lease, waits for this batch instead of
/// reading past it, and a batch after a takeover finds the new owner; the rows of those sessions
/// (with their owner: a log's rows are fenced by its own lease) are inserted, and how many went in
/// for each session is returned. The lease is not renewed here (the renewal loop keeps it):
/// a share lock writes no new row version. A session appears once in a batch: a log syncs one
/// round at a time.
const APPEND_BATCH: &str = "WITH batch AS (
        SELECT * FROM unnest($1::TEXT[], $2::TEXT[], $3::INT8[], $4::TEXT[])
            AS b (session, owner, seq, line)
    ), lease AS (
        SELECT l.session, l.owner FROM approval_leases AS l
        WHERE (l.session, l.owner) IN (SELECT session, owner FROM batch)
        ORDER BY l.session
        FOR SHARE OF l
    ), inserted AS (
        INSERT INTO approval_records (session, seq, line, written_by)
        SELECT b.session, b.seq, b.line, $5 FROM batch AS b
        WHERE (b.session, b.owner) IN (SELECT session, owner FROM lease)
        RETURNING session
    )
    SELECT session, count(*) FROM inserted GROUP BY session";

/// A batch of one session's rows (one asker, or a quiet fleet): the same fence and insert as
/// [`APPEND_BATCH`] for a single session, without the arrays of sessions and owners, the joins
/// or the count per session, which cost the database about as much again as the insert itself
/// (`pgbench`, one client: 4,900-6,400 a second against 7,700-9,100 bare `INSERT`s; this
/// statement 6,700-8,100). The lock is taken once (an uncorrelated `EXISTS` with a locking clause
/// is never made a join) and, under read committed, rechecks `owner` on the lease's newest
/// version, as the batch's does; only one lease is locked, so the lock order cannot matter. The
/// rows inserted are the statement's count: all of them, or none. `SELECT 1`, not an empty
/// select list, which some PostgreSQL-compatible databases refuse.
const APPEND_ONE: &str = "INSERT INTO approval_records (session, seq, line, written_by)
    SELECT $1::TEXT, s.seq, s.line, $5::TEXT FROM unnest($3::INT8[], $4::TEXT[]) AS s (seq, line)
    WHERE EXISTS (
        SELECT 1 FROM approval_leases AS l
        WHERE l.session = $1::TEXT AND l.owner = $2::TEXT
        FOR SHARE OF l
    )";

/// One session's rows waiting for a batch, and where its answer goes.
pub(super) struct Rows {
    pub(super) session: String,
    pub(super) owner: String,
    pub(super) first_seq: i64,
    pub(super) lines: Vec<String>,
    /// Told once how the rows fared, on the store's runtime: it must not block.
    pub(super) done: Box<dyn FnOnce(Result<(), Failure>) + Send + Sync>,
}

/// Where syncs hand their rows.
pub(super) type Queue = mpsc::UnboundedSender<Rows>;

/// Starts the batcher on the store's runtime: it ends when the store (the queue's sender) goes.
pub(super) fn start(inner: &Arc<Inner>, rows: mpsc::UnboundedReceiver<Rows>) {
    inner.handle.spawn(run(Arc::downgrade(inner), rows));
}

async fn run(inner: Weak<Inner>, mut queue: mpsc::UnboundedReceiver<Rows>) {
    let Some(pool) = inner.upgrade().map(|i| i.pool.status().max_size) else {
        return;
    };
    let slots = Arc::new(Semaphore::new((pool / 2).clamp(1, IN_FLIGHT)));
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        // Wait for the first rows, then take whatever else is waiting.
        let Some(first) = queue.recv().await else {
            return;
        };
        let mut batch = vec![first];
        let mut rows = batch[0].lines.len();
        while rows < MAX_ROWS {
            match queue.try_recv() {
                Ok(more) => {
                    rows += more.lines.len();
                    batch.push(more);
                }
                Err(_) => break,
            }
        }
        let Some(inner) = inner.upgrade() else {
            return;
        };
        tokio::spawn(async move {
            commit(&inner, batch).await;
            drop(slot);
        });
    }
}

/// Commits `batch` and answers each session.
async fn commit(inner: &Inner, batch: Vec<Rows>) {
    match attempt(inner, &batch).await {
        Ok(counts) => answer(inner, batch, counts).await,
        // A row the database refuses (a data or integrity error): each session commits on its
        // own, so one session's trouble is never another's.
        Err(e) if batch.len() > 1 && e.about_the_rows() => {
            for rows in batch {
                let one = vec![rows];
                match attempt(inner, &one).await {
                    Ok(counts) => answer(inner, one, counts).await,
                    Err(e) => fail(one, &e),
                }
            }
        }
        // The database itself (unreachable, shutting down): every session hears it at once.
        Err(e) => fail(batch, &e),
    }
}

/// Tells every session of `batch` that it failed, and why.
fn fail(batch: Vec<Rows>, failure: &Failure) {
    let why = failure.to_string();
    for rows in batch {
        (rows.done)(Err(Failure::Batch(why.clone())));
    }
}

/// Rows committed per session, retried while the failure is a serialization failure or deadlock.
async fn attempt(inner: &Inner, batch: &[Rows]) -> Result<HashMap<String, i64>, Failure> {
    if let [one] = batch {
        return attempt_one(inner, one).await;
    }
    let total: usize = batch.iter().map(|r| r.lines.len()).sum();
    let mut sessions = Vec::with_capacity(total);
    let mut owners = Vec::with_capacity(total);
    let mut seqs = Vec::with_capacity(total);
    let mut lines = Vec::with_capacity(total);
    for rows in batch {
        for (i, line) in rows.lines.iter().enumerate() {
            sessions.push(rows.session.as_str());
            owners.push(rows.owner.as_str());
            seqs.push(rows.first_seq + i as i64);
            lines.push(line.as_str());
        }
    }
    let client = &client(&inner.pool).await?;
    let values = (&sessions, &owners, &seqs, &lines);
    retrying(inner, || async move {
        let (sessions, owners, seqs, lines) = values;
        // Prepared once per connection: unprepared, every commit would cost a second round trip
        // (parse, then bind).
        let append = client.prepare_cached(APPEND_BATCH).await?;
        let counted = client
            .query(&append, &[sessions, owners, seqs, lines, &inner.host_label])
            .await?;
        Ok(counted
            .iter()
            .map(|row| (row.get::<_, String>(0), row.get::<_, i64>(1)))
            .collect())
    })
    .await
}

/// [`attempt`] for a batch of one session's rows, through [`APPEND_ONE`].
async fn attempt_one(inner: &Inner, rows: &Rows) -> Result<HashMap<String, i64>, Failure> {
    let seqs = &(0..rows.lines.len() as i64)
        .map(|i| rows.first_seq + i)
        .collect::<Vec<i64>>();
    let client = &client(&inner.pool).await?;
    retrying(inner, || async move {
        let append = client.prepare_cached(APPEND_ONE).await?;
        let inserted = client
            .execute(
                &append,
                &[
                    &rows.session,
                    &rows.owner,
                    seqs,
                    &rows.lines,
                    &inner.host_label,
                ],
            )
            .await?;
        Ok(HashMap::from([(rows.session.clone(), inserted as i64)]))
    })
    .await
}

/// Runs `statement` (one attempt each call) again while [`again`] says its failure is worth
/// another try.
async fn retrying<T, F>(inner: &Inner, mut statement: impl FnMut() -> F) -> Result<T, Failure>
where
    F: Future<Output = Result<T, Failure>>,
{
    let mut tries = 0;
    loop {
        match statement().await {
            Err(e) if again(inner, &e, &mut tries).await => {}
            other => return other,
        }
    }
}

/// Tells each session of `batch` how its rows fared: all in, or none because another host holds
/// its lease now (named when the database says who). The committed hear first.
async fn answer(inner: &Inner, batch: Vec<Rows>, counts: HashMap<String, i64>) {
    let (committed, lost): (Vec<Rows>, Vec<Rows>) = batch.into_iter().partition(|rows| {
        counts.get(&rows.session).copied().unwrap_or(0) == rows.lines.len() as i64
    });
    for rows in committed {
        (rows.done)(Ok(()));
    }
    if lost.is_empty() {
        return;
    }
    let sessions: Vec<&str> = lost.iter().map(|rows| rows.session.as_str()).collect();
    let mut owners: HashMap<String, String> = HashMap::new();
    if let Ok(client) = client(&inner.pool).await
        && let Ok(found) = client
            .query(
                "SELECT session, owner FROM approval_leases WHERE session = ANY($1)",
                &[&sessions],
            )
            .await
    {
        owners = found.iter().map(|r| (r.get(0), r.get(1))).collect();
    }
    for rows in lost {
        let owner = owners.remove(&rows.session);
        (rows.done)(Err(Failure::LeaseLost { owner }));
    }
}
