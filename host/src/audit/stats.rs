//! What the commit threads have done since the process started: rounds, records and the time
//! spent writing and syncing, for `serve --metrics` (store commit latency and batch size).
//!
//! Process-wide counters, as the commit threads themselves are shared by every log of every
//! service in the process. Journals that never wait (`CommitMode::Inline`: memory, a discarded
//! log) are not counted: they have no commit to speak of.

use std::sync::atomic::{AtomicU64, Ordering};

static ROUNDS: AtomicU64 = AtomicU64::new(0);
static RECORDS: AtomicU64 = AtomicU64::new(0);
static NANOS: AtomicU64 = AtomicU64::new(0);
static FAILED: AtomicU64 = AtomicU64::new(0);

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
    if !ok {
        FAILED.fetch_add(1, Ordering::Relaxed);
    }
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
