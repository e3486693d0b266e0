//! The shared commit threads: where session logs with a blocking journal write and sync.
//!
//! A log that needs a commit while none runs for it is queued here; a thread takes it and runs
//! commit rounds until nothing more is wanted, each round committing everything appended since the
//! last one (group commit). The threads are few and shared by every open log, so ten thousand open
//! sessions cost no thread each; a session's appends are never committed by two threads at once
//! (a log is queued again only after its round ended).

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, OnceLock};

/// A log that commits in rounds: each writes and syncs what was appended since the last one
/// and says whether more is wanted.
pub(crate) trait Rounds: Send + Sync {
    /// Runs one commit round; `true` when another is wanted.
    fn commit_round(&self) -> bool;
}

/// Most commit threads: syncs of different logs overlap on the device up to about this many.
pub(crate) const MAX_THREADS: usize = crate::audit::store::MAX_COMMIT_THREADS;

struct Queue {
    logs: VecDeque<Arc<dyn Rounds>>,
    threads: usize,
    idle: usize,
}

struct Pool {
    queue: Mutex<Queue>,
    ready: Condvar,
}

fn pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(|| Pool {
        queue: Mutex::new(Queue {
            logs: VecDeque::new(),
            threads: 0,
            idle: 0,
        }),
        ready: Condvar::new(),
    })
}

/// Queues `log` for a commit round.
pub(crate) fn schedule(log: Arc<dyn Rounds>) {
    let pool = pool();
    let mut queue = pool.queue.lock().unwrap_or_else(|p| p.into_inner());
    queue.logs.push_back(log);
    if queue.idle > 0 {
        pool.ready.notify_one();
        return;
    }
    if queue.threads < MAX_THREADS {
        let spawned = std::thread::Builder::new()
            .name("log-commit".to_owned())
            .stack_size(256 << 10)
            .spawn(move || work(pool));
        match spawned {
            Ok(_) => queue.threads += 1,
            // The busy threads will come back for it.
            Err(e) if queue.threads > 0 => {
                tracing::warn!(error = %e, "could not start another log commit thread");
            }
            Err(e) => {
                // No thread at all: commit on this one rather than never.
                tracing::error!(error = %e, "could not start a log commit thread; committing in place");
                let log = queue.logs.pop_back();
                drop(queue);
                if let Some(log) = log {
                    while log.commit_round() {}
                }
            }
        }
    }
}

fn work(pool: &'static Pool) {
    let mut queue = pool.queue.lock().unwrap_or_else(|p| p.into_inner());
    loop {
        match queue.logs.pop_front() {
            Some(log) => {
                drop(queue);
                while log.commit_round() {}
                drop(log);
                queue = pool.queue.lock().unwrap_or_else(|p| p.into_inner());
            }
            None => {
                queue.idle += 1;
                queue = pool.ready.wait(queue).unwrap_or_else(|p| p.into_inner());
                queue.idle -= 1;
            }
        }
    }
}
