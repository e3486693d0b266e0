//! Session logs in PostgreSQL: the store several hosts share.
//!
//! Each record is a row `(session, seq, line)` holding the exact line the directory store would
//! write, so the hash chain, `verify` and `export` read both stores alike. The promises are the
//! file store's:
//!
//! - an append returns once its transaction has committed; the log's group commit hands a whole
//!   batch to one transaction (one multi-row insert, one round trip), which the syncs of other
//!   sessions at the same moment share. As with the file store's
//!   split write and sync, a question decided in process is committed together with its decision,
//!   and one about to leave the process is committed first;
//! - `seq` has no gaps and no duplicates: it is part of the primary key, and a batch either
//!   commits whole or not at all, so torn state cannot exist;
//! - one writer per session at a time, across hosts: a lease row (owner, expiry) taken with a
//!   compare-and-set when the log opens, renewed while it is open, released when it closes. Every
//!   append locks the lease row for share in its own transaction and fails if another host owns
//!   it now (a takeover, which updates the row, waits for the append's commit), so a host that
//!   lost its lease (paused past the expiry, cut off) cannot write after the new owner has read
//!   the log. When a host dies its leases expire and the next host to open the session recovers
//!   it as after a crash.
//!
//! The store runs its own small tokio runtime: the [`Store`] and [`Journal`] calls are
//! synchronous (they run on the commit threads or in `spawn_blocking`) and wait on a channel for
//! the work done there, so they never block the runtime they are called from. A log's commit
//! does not wait at all: the asking task hands its rows to the batcher
//! ([`Journal::detach_sync`]), whose report wakes the asker with no thread between them.
//! Transactions that fail with a serialization failure or a deadlock (SQLSTATE 40001, 40P01;
//! routine on CockroachDB and YugabyteDB) are retried.
//!
//! The files: `options.rs` (how to reach the database, and [`DbError`]), `lease.rs` (taking,
//! renewing and releasing a session's lease), `journal.rs` (a session's writer), `batch.rs`
//! (commits across sessions: one statement for every log that syncs at once), `logs.rs` (the
//! [`Store`] itself), `schema.rs` (the migrations); this file holds the store's runtime, its
//! connection and the retry of a failed transaction.

mod batch;
mod journal;
mod lease;
mod logs;
mod options;
pub mod schema;

use lease::renew_leases;
pub use options::{
    DEFAULT_LEASE, DEFAULT_MAX_CONNECTIONS, DbError, PASSWORD_ENV, PgOptions, Transport, check_url,
    transport,
};
use options::{parse_url, tls_connector};

use std::collections::HashSet;
use std::future::Future;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use tokio_postgres::error::SqlState;

use crate::audit::error::LogError;
#[cfg(doc)]
use crate::audit::store::{Journal, Store};

/// Attempts of a transaction that keeps failing with a serialization failure.
const MAX_ATTEMPTS: u32 = 20;

/// A failure inside the store's runtime, before it becomes a [`LogError`] or a [`DbError`].
#[derive(Debug)]
enum Failure {
    Pool(String),
    Pg(tokio_postgres::Error),
    /// The session's lease belongs to someone else now.
    LeaseLost {
        owner: Option<String>,
    },
    /// The runtime stopped (the store is being dropped).
    Stopped,
    /// The batch this session's rows were in failed as a whole, for this reason.
    Batch(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Pool(e) => write!(f, "no connection: {e}"),
            Failure::Pg(e) => match e.as_db_error() {
                Some(db) => write!(f, "{} (SQLSTATE {})", db.message(), db.code().code()),
                None => write!(f, "{e}"),
            },
            Failure::LeaseLost { owner: Some(owner) } => {
                write!(f, "the session's lease was taken over by {owner}")
            }
            Failure::LeaseLost { owner: None } => write!(f, "the session's lease was lost"),
            Failure::Stopped => write!(f, "the store is shutting down"),
            Failure::Batch(why) => f.write_str(why),
        }
    }
}

impl From<tokio_postgres::Error> for Failure {
    fn from(e: tokio_postgres::Error) -> Self {
        Failure::Pg(e)
    }
}

impl Failure {
    fn retryable(&self) -> bool {
        match self {
            Failure::Pg(e) => e.code().is_some_and(|c| {
                *c == SqlState::T_R_SERIALIZATION_FAILURE || *c == SqlState::T_R_DEADLOCK_DETECTED
            }),
            _ => false,
        }
    }

    /// Whether the database refused the rows themselves (SQLSTATE class 22, data, or 23,
    /// integrity) rather than failing as a whole.
    fn about_the_rows(&self) -> bool {
        match self {
            Failure::Pg(e) => e
                .code()
                .is_some_and(|c| c.code().starts_with("22") || c.code().starts_with("23")),
            _ => false,
        }
    }

    fn into_db(self, what: &'static str) -> DbError {
        DbError::Database {
            what,
            reason: self.to_string(),
        }
    }
}

/// A session log store in PostgreSQL (or a database that speaks its protocol and SQL).
#[derive(Clone)]
pub struct PgStore {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("host", &self.inner.host_label)
            .finish_non_exhaustive()
    }
}

struct Inner {
    handle: tokio::runtime::Handle,
    pool: Pool,
    host_label: String,
    lease_ms: f64,
    /// Lease owners (one per open log) this store renews.
    held: Mutex<HashSet<String>>,
    opened: AtomicU64,
    retries: AtomicU64,
    /// Whether the last lease renewal round failed (the database did not answer).
    renewal_failing: std::sync::atomic::AtomicBool,
    /// Where open logs' syncs queue their rows for the next batch (`batch.rs`).
    batches: batch::Queue,
    /// Last: dropped after everything that runs on it.
    _runtime: OwnedRuntime,
}

/// The store's runtime, shut down without waiting when dropped: dropping a runtime the usual way
/// waits for its tasks, which tokio refuses inside another runtime (a store dropped, or one that
/// failed to connect, on an async task).
struct OwnedRuntime(Option<tokio::runtime::Runtime>);

impl Drop for OwnedRuntime {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

impl Inner {
    /// Runs `work` on the store's runtime and waits for it, from any thread.
    fn block<T: Send + 'static>(
        &self,
        work: impl Future<Output = Result<T, Failure>> + Send + 'static,
    ) -> Result<T, Failure> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.handle.spawn(async move {
            let _ = tx.send(work.await);
        });
        rx.recv().unwrap_or(Err(Failure::Stopped))
    }
}

/// After a failed attempt: whether to try again (a serialization failure or deadlock, fewer than
/// [`MAX_ATTEMPTS`] tries so far), after a short, growing pause that lets the competing
/// transaction finish.
async fn again(inner: &Inner, failure: &Failure, tries: &mut u32) -> bool {
    *tries += 1;
    if !failure.retryable() || *tries >= MAX_ATTEMPTS {
        return false;
    }
    inner.retries.fetch_add(1, Ordering::Relaxed);
    crate::audit::stats::retried();
    tokio::time::sleep(Duration::from_millis(u64::from(*tries) * 2)).await;
    true
}

async fn client(pool: &Pool) -> Result<deadpool_postgres::Object, Failure> {
    pool.get().await.map_err(|e| Failure::Pool(with_causes(&e)))
}

/// An error and its causes, `: `-separated: a failed TLS handshake says why it failed.
fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let more = c.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        cause = c.source();
    }
    text
}

impl PgStore {
    /// Connects, checks (or, with [`PgOptions::migrate`], brings up to date) the schema, and
    /// starts renewing leases.
    pub fn connect(options: PgOptions) -> Result<PgStore, DbError> {
        let (mut config, transport) = parse_url(&options.url)?;
        match transport {
            Transport::Opportunistic => tracing::warn!(
                "the store URL says sslmode=prefer: a man in the middle can make the database connection plaintext; leave sslmode out (TLS, certificate checked) unless the network is trusted"
            ),
            Transport::Plain => tracing::warn!(
                "the store URL says sslmode=disable: the database connection is plaintext"
            ),
            Transport::Verified | Transport::Local => {}
        }
        if let Some(password) = &options.password {
            config.password(password.as_bytes());
        }
        if config.get_application_name().is_none() {
            config.application_name("approval-host");
        }
        let tls = tls_connector(options.ca_file.as_deref())?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("approval-db")
            .enable_all()
            .build()
            .map_err(|e| DbError::Database {
                what: "runtime",
                reason: e.to_string(),
            })?;
        let runtime = OwnedRuntime(Some(runtime));
        let handle = runtime.0.as_ref().expect("just built").handle().clone();
        let manager = Manager::from_config(
            config,
            tls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = {
            let _entered = handle.enter();
            Pool::builder(manager)
                .max_size(options.max_connections.max(1))
                .runtime(deadpool_postgres::Runtime::Tokio1)
                .wait_timeout(Some(Duration::from_secs(30)))
                .create_timeout(Some(Duration::from_secs(10)))
                .build()
                .map_err(|e| DbError::Database {
                    what: "connection pool",
                    reason: e.to_string(),
                })?
        };
        let (batches, queued) = tokio::sync::mpsc::unbounded_channel();
        let inner = Arc::new(Inner {
            handle,
            batches,
            pool,
            host_label: options.host_label.clone(),
            lease_ms: options.lease.as_secs_f64() * 1000.0,
            held: Mutex::new(HashSet::new()),
            opened: AtomicU64::new(0),
            renewal_failing: std::sync::atomic::AtomicBool::new(false),
            retries: AtomicU64::new(0),
            _runtime: runtime,
        });
        batch::start(&inner, queued);
        let store = PgStore { inner };
        let found = store.schema_version()?;
        if found > schema::CURRENT_VERSION {
            return Err(DbError::SchemaAhead {
                found,
                known: schema::CURRENT_VERSION,
            });
        }
        if found < schema::CURRENT_VERSION {
            if !options.migrate {
                return Err(DbError::SchemaBehind {
                    found,
                    needed: schema::CURRENT_VERSION,
                });
            }
            store.migrate()?;
        }
        let weak = Arc::downgrade(&store.inner);
        store
            .inner
            .handle
            .spawn(renew_leases(weak, options.lease / 3));
        Ok(store)
    }

    /// The schema version of the database (0 when it has none).
    pub fn schema_version(&self) -> Result<i32, DbError> {
        let pool = self.inner.pool.clone();
        self.inner
            .block(async move {
                let client = client(&pool).await?;
                let exists = client
                    .query_one(
                        "SELECT count(*) FROM information_schema.tables
                         WHERE table_name = 'approval_schema' AND table_schema = current_schema()",
                        &[],
                    )
                    .await?
                    .get::<_, i64>(0)
                    > 0;
                if !exists {
                    return Ok(0);
                }
                let row = client.query_opt(schema::READ_VERSION, &[]).await?;
                Ok(row.map_or(0, |r| r.get::<_, i32>(0)))
            })
            .map_err(|e| e.into_db("schema version"))
    }

    /// Brings the schema to [`schema::CURRENT_VERSION`], one step per transaction; returns the
    /// versions before and after. Safe to run from several hosts at once.
    pub fn migrate(&self) -> Result<(i32, i32), DbError> {
        let inner = self.inner.clone();
        let (from, to) = self
            .inner
            .block(async move {
                let mut client = client(&inner.pool).await?;
                // `CREATE TABLE IF NOT EXISTS` is not safe against a concurrent twin: a host
                // that loses the race sees a duplicate and finds the table there on the next try.
                let mut tries = 0;
                loop {
                    match client.batch_execute(schema::ENSURE_VERSION_TABLE).await {
                        Err(e)
                            if tries < 5
                                && e.code().is_some_and(|c| {
                                    *c == SqlState::UNIQUE_VIOLATION
                                        || *c == SqlState::DUPLICATE_TABLE
                                        || *c == SqlState::DUPLICATE_OBJECT
                                }) =>
                        {
                            tries += 1;
                        }
                        other => break other?,
                    }
                }
                let mut first = None;
                loop {
                    let tx = client.transaction().await?;
                    let found: i32 = tx.query_one(schema::LOCK_VERSION, &[]).await?.get(0);
                    first.get_or_insert(found);
                    let Some((next, sql)) = schema::MIGRATIONS.iter().find(|(v, _)| *v > found)
                    else {
                        tx.commit().await?;
                        return Ok((first.unwrap_or(found), found));
                    };
                    tx.batch_execute(sql).await?;
                    tx.execute(schema::SET_VERSION, &[next]).await?;
                    tx.commit().await?;
                }
            })
            .map_err(|e| e.into_db("migration"))?;
        if to > schema::CURRENT_VERSION {
            return Err(DbError::SchemaAhead {
                found: to,
                known: schema::CURRENT_VERSION,
            });
        }
        Ok((from, to))
    }

    /// How many transactions were retried after a serialization failure or deadlock.
    pub fn retries(&self) -> u64 {
        self.inner.retries.load(Ordering::Relaxed)
    }

    /// The label this host writes in lease rows.
    pub fn host_label(&self) -> &str {
        &self.inner.host_label
    }

    fn log_name(session: &str) -> String {
        format!("postgres:{session}")
    }
}

fn log_error(log: &str, failure: Failure) -> LogError {
    LogError::Io {
        log: log.to_owned(),
        source: Arc::new(io::Error::other(failure.to_string())),
    }
}
