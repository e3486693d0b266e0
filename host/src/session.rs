//! One open session inside the service: its log, and the turn gate that keeps every approval
//! question inside the turn that asked it.
//!
//! The gate counts questions in flight. Ending a turn first stops new questions, cancels the ones
//! in flight (they settle `cancelled` and are audited), waits for them, and only then appends
//! `turn/end`, so an `approval/asked` never outlives its turn.

use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::audit::log::SessionLog;

/// A question asked outside an open turn (or while its turn is ending); the service turns it into
/// its own error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NoOpenTurn {
    /// The session id.
    pub(crate) session: String,
}

#[derive(Debug)]
struct TurnGate {
    open: bool,
    closing: bool,
    token: CancellationToken,
    inflight: usize,
}

/// An open session: shared by every [`crate::agent::Agent`] handle of it.
#[derive(Debug)]
pub(crate) struct Session {
    pub(crate) log: SessionLog,
    /// Declared after `log`, so it fires once the log is closed and its file lock released.
    _released: ReleaseOnDrop,
    gate: Mutex<TurnGate>,
    idle: Notify,
    /// Serialises policy switches so "append only when the value changes" holds under races.
    pub(crate) policy_lock: tokio::sync::Mutex<()>,
    /// The seq and time of the last checkpoint taken (or of the open, for the first).
    pub(crate) checkpointed: Mutex<(u64, std::time::Instant)>,
    /// The ids of the agents handed out for this session, in order (what a console lists).
    pub(crate) agents: Mutex<Vec<String>>,
}

/// Whether a session's log is closed: the last handle to a session can be dropped on another
/// thread while the session is reopened, and the reopen must wait for the file lock.
#[derive(Debug, Default)]
pub(crate) struct Released {
    done: std::sync::atomic::AtomicBool,
    notify: Notify,
}

impl Released {
    /// Whether the log is closed.
    pub(crate) fn is_done(&self) -> bool {
        self.done.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Waits until the log is closed.
    pub(crate) async fn wait(&self) {
        loop {
            // Created before the check, so a release in between still wakes it.
            let notified = self.notify.notified();
            if self.is_done() {
                return;
            }
            notified.await;
        }
    }
}

#[derive(Debug)]
struct ReleaseOnDrop(Arc<Released>);

impl Drop for ReleaseOnDrop {
    fn drop(&mut self) {
        self.0
            .done
            .store(true, std::sync::atomic::Ordering::Release);
        self.0.notify.notify_waiters();
    }
}

/// A question in flight: holds the turn open until dropped.
pub(crate) struct InFlight {
    session: Arc<Session>,
    pub(crate) turn: CancellationToken,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut gate = self.session.gate();
        gate.inflight -= 1;
        if gate.inflight == 0 {
            self.session.idle.notify_waiters();
        }
    }
}

impl Session {
    pub(crate) fn new(log: SessionLog, released: Arc<Released>) -> Self {
        let open = log.with_fold(|f| f.turn_open());
        let records = log.len();
        Session {
            log,
            _released: ReleaseOnDrop(released),
            gate: Mutex::new(TurnGate {
                open,
                closing: false,
                token: CancellationToken::new(),
                inflight: 0,
            }),
            idle: Notify::new(),
            policy_lock: tokio::sync::Mutex::new(()),
            checkpointed: Mutex::new((records, std::time::Instant::now())),
            agents: Mutex::default(),
        }
    }

    fn gate(&self) -> MutexGuard<'_, TurnGate> {
        self.gate.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn id(&self) -> &str {
        self.log.session()
    }

    /// Admits a question if a turn is open and not ending.
    pub(crate) fn enter(self: &Arc<Self>) -> Result<InFlight, NoOpenTurn> {
        let mut gate = self.gate();
        if !gate.open || gate.closing {
            return Err(NoOpenTurn {
                session: self.id().to_owned(),
            });
        }
        gate.inflight += 1;
        Ok(InFlight {
            session: self.clone(),
            turn: gate.token.clone(),
        })
    }

    /// Records that `turn/start` was committed.
    pub(crate) fn opened_turn(&self) {
        let mut gate = self.gate();
        gate.open = true;
        gate.closing = false;
        gate.token = CancellationToken::new();
    }

    /// Stops admitting questions and cancels those in flight; returns whether a turn was open.
    pub(crate) fn begin_close(&self) -> bool {
        let mut gate = self.gate();
        if !gate.open {
            return false;
        }
        gate.closing = true;
        gate.token.cancel();
        true
    }

    /// Waits until no question is in flight.
    pub(crate) async fn drained(&self) {
        loop {
            let notified = self.idle.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.gate().inflight == 0 {
                return;
            }
            notified.await;
        }
    }

    /// Records the result of appending `turn/end`.
    pub(crate) fn closed_turn(&self, committed: bool) {
        let mut gate = self.gate();
        gate.closing = false;
        if committed {
            gate.open = false;
        } else {
            // The turn is still open on the log; let it keep serving with a fresh token.
            gate.token = CancellationToken::new();
        }
    }
}
