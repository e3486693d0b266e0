//! What the store has done since the process started, for `serve --metrics`: the commit
//! threads' rounds, records and time (commit latency, as a histogram, and batch size), and on PostgreSQL the
//! lease renewals, leases lost, takeovers and retried statements.
//!
//! Process-wide counters, as the commit threads themselves are shared by every log of every
//! service in the process. Journals that never wait (`CommitMode::Inline`: memory, a discarded
//! log) are not counted: they have no commit to speak of.

use std::sync::atomic::{AtomicU64, Ordering};

static ROUNDS: AtomicU64 = AtomicU64::new(0);
static RECORDS: AtomicU64 = AtomicU64::new(0);
static NANOS: AtomicU64 = AtomicU64::new(0);
static FAILED: AtomicU64 = AtomicU64::new(0);
static RENEWED: AtomicU64 = AtomicU64::new(0);
static RENEWALS_FAILED: AtomicU64 = AtomicU64::new(0);
static LOST: AtomicU64 = AtomicU64::new(0);
static TAKEOVERS: AtomicU64 = AtomicU64::new(0);
static RETRIES: AtomicU64 = AtomicU64::new(0);
static REFUSED_LOGS: AtomicU64 = AtomicU64::new(0);

/// Counts a session log refused when opened: a record that does not parse, is out of sequence
/// or breaks the log's rules (what `log verify` would report).
pub(crate) fn log_refused() {
    REFUSED_LOGS.fetch_add(1, Ordering::Relaxed);
}

/// Session logs refused when opened so far.
pub fn logs_refused() -> u64 {
    REFUSED_LOGS.load(Ordering::Relaxed)
}

/// How many commit-latency buckets there are; the last is unbounded.
pub const LATENCY_BUCKETS: usize = 17;

/// The upper bound of commit-latency bucket `i`, in nanoseconds: 50 µs doubling to about 1.6 s
/// (as the decision histogram), then unbounded.
pub const fn latency_bound(i: usize) -> u64 {
    if i + 1 >= LATENCY_BUCKETS {
        u64::MAX
    } else {
        50_000 << i
    }
}

/// Commit rounds by latency, each in the first bucket whose bound it does not exceed.
static LATENCY: [AtomicU64; LATENCY_BUCKETS] = [const { AtomicU64::new(0) }; LATENCY_BUCKETS];

/// The leases of a shared database (PostgreSQL) so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Leases {
    /// Session leases renewed.
    pub renewed: u64,
    /// Renewal rounds that failed (the database did not answer).
    pub renewals_failed: u64,
    /// Leases found taken by another host at renewal.
    pub lost: u64,
    /// Sessions this process took over from a host whose lease ran out.
    pub takeovers: u64,
    /// Statements retried after a connection or serialization failure.
    pub retries: u64,
}

pub(crate) fn renewed(n: u64) {
    RENEWED.fetch_add(n, Ordering::Relaxed);
}

pub(crate) fn renewal_failed() {
    RENEWALS_FAILED.fetch_add(1, Ordering::Relaxed);
}

pub(crate) fn lost(n: u64) {
    LOST.fetch_add(n, Ordering::Relaxed);
}

pub(crate) fn took_over() {
    TAKEOVERS.fetch_add(1, Ordering::Relaxed);
}

pub(crate) fn retried() {
    RETRIES.fetch_add(1, Ordering::Relaxed);
}

/// The leases so far.
pub fn leases() -> Leases {
    Leases {
        renewed: RENEWED.load(Ordering::Relaxed),
        renewals_failed: RENEWALS_FAILED.load(Ordering::Relaxed),
        lost: LOST.load(Ordering::Relaxed),
        takeovers: TAKEOVERS.load(Ordering::Relaxed),
        retries: RETRIES.load(Ordering::Relaxed),
    }
}

/// The commits so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Commits {
    /// Commit rounds (one write and sync of a log's batch).
    pub rounds: u64,
    /// Records made durable by them.
    pub records: u64,
    /// Time spent in the journal's write and sync, in nanoseconds.
    pub nanos: u64,
    /// Rounds that failed (the log was poisoned).
    pub failed: u64,
}

/// Counts one round that committed `records` in `nanos`.
pub(crate) fn round(records: u64, nanos: u64, ok: bool) {
    ROUNDS.fetch_add(1, Ordering::Relaxed);
    RECORDS.fetch_add(records, Ordering::Relaxed);
    NANOS.fetch_add(nanos, Ordering::Relaxed);
    let bucket = (0..LATENCY_BUCKETS)
        .find(|&i| nanos <= latency_bound(i))
        .unwrap_or(LATENCY_BUCKETS - 1);
    LATENCY[bucket].fetch_add(1, Ordering::Relaxed);
    if !ok {
        FAILED.fetch_add(1, Ordering::Relaxed);
    }
}

/// Commit rounds so far by latency bucket (not cumulative; see [`latency_bound`]).
pub fn commit_latency() -> [u64; LATENCY_BUCKETS] {
    std::array::from_fn(|i| LATENCY[i].load(Ordering::Relaxed))
}

/// The commits so far.
pub fn commits() -> Commits {
    Commits {
        rounds: ROUNDS.load(Ordering::Relaxed),
        records: RECORDS.load(Ordering::Relaxed),
        nanos: NANOS.load(Ordering::Relaxed),
        failed: FAILED.load(Ordering::Relaxed),
    }
}
