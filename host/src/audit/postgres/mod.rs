//! Session logs in PostgreSQL: the store several hosts share.
//!
//! Each record is a row `(session, seq, line)` holding the exact line the directory store would
//! write, so the hash chain, `verify` and `export` read both stores alike. The promises are the
//! file store's:
//!
//! - an append returns once its transaction has committed; the log's group commit hands a whole
//!   batch to one transaction (one multi-row insert, one round trip). As with the file store's
//!   split write and sync, a question decided in process is committed together with its decision,
//!   and one about to leave the process is committed first;
//! - `seq` has no gaps and no duplicates: it is part of the primary key, and a batch either
//!   commits whole or not at all, so torn state cannot exist;
//! - one writer per session at a time, across hosts: a lease row (owner, expiry) taken with a
//!   compare-and-set when the log opens, renewed while it is open, released when it closes. Every
//!   append updates the lease row in its own transaction and fails if another host owns it now, so
//!   a host that lost its lease (paused past the expiry, cut off) cannot write after the new
//!   owner has read the log. When a host dies its leases expire and the next host to open the
//!   session recovers it as after a crash.
//!
//! The store runs its own small tokio runtime: the [`Store`] and [`Journal`] calls are
//! synchronous (they run on the commit threads or in `spawn_blocking`) and wait on a channel for
//! the work done there, so they never block the runtime they are called from. Transactions that
//! fail with a serialization failure or a deadlock (SQLSTATE 40001, 40P01; routine on
//! CockroachDB and YugabyteDB) are retried.

pub mod schema;

use std::collections::HashSet;
use std::future::Future;
use std::io;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use tokio_postgres::Client;
use tokio_postgres::error::SqlState;

use crate::audit::error::LogError;
use crate::audit::store::{CommitMode, Journal, OpenedLog, Store, parse_lines};

/// How long a lease lasts unless renewed; renewed every third of it.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(15);

/// Most connections one store opens.
pub const DEFAULT_MAX_CONNECTIONS: usize = 16;

/// Attempts of a transaction that keeps failing with a serialization failure.
const MAX_ATTEMPTS: u32 = 20;

/// How to reach the database and how this host takes part.
#[derive(Debug, Clone)]
pub struct PgOptions {
    /// `postgres://user@host:port/dbname?...` or `host=... dbname=...`, without a password.
    pub url: String,
    /// The password, read from an environment variable or a file by the caller.
    pub password: Option<String>,
    /// How long a session's lease lasts without renewal: how soon another host may take over the
    /// sessions of a host that died.
    pub lease: Duration,
    /// How this host names itself in lease rows (and so in another host's "in use by" error).
    pub host_label: String,
    /// Create or migrate the schema when it is behind, instead of refusing to start.
    pub migrate: bool,
    /// Most connections open at once.
    pub max_connections: usize,
    /// The certificate authorities (PEM) a TLS connection's server certificate must chain to;
    /// `None`: the system's. TLS is used as the URL's `sslmode` says (`prefer` by default,
    /// `require` to refuse a server without it; a Unix socket never uses it).
    pub ca_file: Option<std::path::PathBuf>,
}

impl PgOptions {
    /// Options for `url` with the defaults: a 15 s lease, the machine's host name and process id
    /// as the label, no migration.
    pub fn new(url: impl Into<String>) -> Self {
        PgOptions {
            url: url.into(),
            password: None,
            lease: DEFAULT_LEASE,
            host_label: default_host_label(),
            migrate: false,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            ca_file: None,
        }
    }
}

fn default_host_label() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "localhost".to_owned());
    format!("{host} pid {}", std::process::id())
}

/// Why the store could not be opened or migrated.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    /// The URL does not parse.
    #[error("store URL: {0}")]
    Url(String),
    /// The URL carries a password, which would show in process listings and shell history.
    #[error(
        "store URL: a password in the URL is refused (it would show in process listings); set {env} or the deployment's [store] password-file instead"
    )]
    PasswordInUrl {
        /// The environment variable to use instead.
        env: &'static str,
    },
    /// The TLS settings for the database could not be used.
    #[error("store TLS: {0}")]
    Tls(String),
    /// The password file or variable could not be read.
    #[error("store password: {0}")]
    Password(String),
    /// The database could not be reached or refused a statement.
    #[error("database {what}: {reason}")]
    Database {
        /// What was being done.
        what: &'static str,
        /// The database's or the connection's error.
        reason: String,
    },
    /// The schema is older than this host's and migration was not asked for.
    #[error(
        "the database schema is at version {found}, this host needs version {needed}: run `approval-host db migrate` (or start with --migrate)"
    )]
    SchemaBehind {
        /// The version found.
        found: i32,
        /// The version this host needs.
        needed: i32,
    },
    /// The schema is newer than this host knows.
    #[error(
        "the database schema is at version {found}, newer than this host knows ({known}): upgrade approval-host"
    )]
    SchemaAhead {
        /// The version found.
        found: i32,
        /// The newest version this host knows.
        known: i32,
    },
}

/// The TLS connector for database connections: the server's certificate must chain to the
/// authorities in `ca_file`, or to the system's.
fn tls_connector(
    ca_file: Option<&std::path::Path>,
) -> Result<tokio_postgres_rustls::MakeRustlsConnect, DbError> {
    let mut roots = rustls::RootCertStore::empty();
    match ca_file {
        Some(path) => {
            let certs = crate::pem::certs(path).map_err(|e| DbError::Tls(e.to_string()))?;
            for cert in certs {
                roots
                    .add(cert)
                    .map_err(|e| DbError::Tls(format!("{}: {e}", path.display())))?;
            }
        }
        None => {
            // Certificates the system store holds but rustls cannot use are skipped.
            let found = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(found.certs);
        }
    }
    let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| DbError::Tls(e.to_string()))?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Ok(tokio_postgres_rustls::MakeRustlsConnect::new(config))
}

/// The environment variable a command-line store URL's password comes from.
pub const PASSWORD_ENV: &str = "APPROVAL_HOST_DB_PASSWORD";

/// Checks a store URL given where it could be seen (a command line, a deployment file): it must
/// parse and must not carry a password.
pub fn check_url(url: &str) -> Result<(), DbError> {
    let config = tokio_postgres::Config::from_str(url).map_err(|e| DbError::Url(e.to_string()))?;
    if config.get_password().is_some() {
        return Err(DbError::PasswordInUrl { env: PASSWORD_ENV });
    }
    Ok(())
}

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
        let mut config = tokio_postgres::Config::from_str(&options.url)
            .map_err(|e| DbError::Url(e.to_string()))?;
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
        let inner = Arc::new(Inner {
            handle,
            pool,
            host_label: options.host_label.clone(),
            lease_ms: options.lease.as_secs_f64() * 1000.0,
            held: Mutex::new(HashSet::new()),
            opened: AtomicU64::new(0),
            retries: AtomicU64::new(0),
            _runtime: runtime,
        });
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

/// Renews every lease this store holds, until the store is dropped.
async fn renew_leases(inner: Weak<Inner>, every: Duration) {
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
            continue;
        }
        let mut tries = 0;
        let renewed = loop {
            let attempt = async {
                let rows = client(&inner.pool)
                    .await?
                    .query(
                        "UPDATE approval_leases
                         SET expires_at = now() + $2::FLOAT8 * INTERVAL '1 millisecond'
                         WHERE owner = ANY($1) RETURNING owner",
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
                // A lease released while this ran is not lost.
                let held = inner.held.lock().unwrap_or_else(|p| p.into_inner());
                let lost = owners
                    .iter()
                    .filter(|o| held.contains(*o) && !renewed.contains(*o))
                    .count();
                if lost > 0 {
                    tracing::warn!(
                        lost,
                        "leases taken over by another host; their sessions accept no more events here"
                    );
                }
            }
            Err(e) => tracing::warn!(error = %e, "could not renew session leases"),
        }
    }
}

/// Takes `session`'s lease for `owner` unless another owner's lease is still running; returns
/// the other owner when it is.
async fn take_lease(
    client: &Client,
    session: &str,
    owner: &str,
    lease_ms: f64,
) -> Result<Option<String>, Failure> {
    let taken = client
        .query_opt(
            "INSERT INTO approval_leases (session, owner, expires_at)
             VALUES ($1, $2, now() + $3::FLOAT8 * INTERVAL '1 millisecond')
             ON CONFLICT (session) DO UPDATE
                SET owner = excluded.owner, expires_at = excluded.expires_at
                WHERE approval_leases.expires_at <= now()
             RETURNING owner",
            &[&session, &owner, &lease_ms],
        )
        .await?;
    if taken.is_some() {
        return Ok(None);
    }
    let holder = client
        .query_opt(
            "SELECT owner FROM approval_leases WHERE session = $1",
            &[&session],
        )
        .await?;
    Ok(Some(holder.map_or_else(String::new, |r| r.get(0))))
}

impl Store for PgStore {
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
            let holder = loop {
                match take_lease(&client, &sess, &own, inner.lease_ms).await {
                    // Released between the two statements: try again.
                    Ok(Some(h)) if h.is_empty() => {}
                    Err(e) if again(&inner, &e, &mut tries).await => {}
                    other => break other?,
                }
            };
            if let Some(holder) = holder {
                return Ok(Err(holder));
            }
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
                Ok(rows) => Ok(Ok(rows
                    .iter()
                    .map(|r| (r.get::<_, i64>(0), r.get::<_, String>(1)))
                    .collect::<Vec<_>>())),
                Err(e) => {
                    release(&inner, &client, &sess, &own).await;
                    Err(e)
                }
            }
        });
        let rows = match opened.map_err(|e| log_error(&name, e))? {
            Ok(rows) => rows,
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

async fn release(inner: &Inner, client: &Client, session: &str, owner: &str) {
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

/// One open session's writer. Lines written are held in memory until the next sync, which
/// commits them all in one statement (its own transaction) that also renews the lease and fails
/// if another host owns it now: an in-process question and its decision cost one commit.
struct PgJournal {
    inner: Arc<Inner>,
    session: String,
    owner: String,
    /// The seq of the first pending line.
    next_seq: i64,
    /// Lines written and not yet committed.
    pending: Vec<String>,
    name: String,
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
