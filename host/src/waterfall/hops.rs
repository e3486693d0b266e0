//! What each listener a question reached did and when: recorded only for a question whose
//! observer asked for it (tracing), so a question nobody traces pays one branch per listener.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::outcome::{FailureKind, Outcome};

/// What a listener answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HopAnswer {
    /// It passed the question on.
    Next,
    /// It decided.
    Decided(Outcome),
    /// It failed, which settles the question `unavailable`.
    Failed(FailureKind),
}

/// One listener's turn with a question.
#[derive(Debug, Clone)]
pub struct Hop {
    /// The listener's name in the waterfall.
    pub listener: Arc<str>,
    /// Its version (a plugin's component digest), when it has one.
    pub version: Option<Arc<str>>,
    /// Whether it leaves the process (a person or a client answers): its turn is a wait.
    pub outside: bool,
    /// From the question's start to the listener being asked.
    pub start: Duration,
    /// From the question's start to its answer.
    pub end: Duration,
    /// What it answered.
    pub answer: HopAnswer,
}

/// The hops of one question, in the order the listeners were asked.
#[derive(Debug)]
pub struct Hops {
    origin: Instant,
    list: Mutex<Vec<Hop>>,
}

impl Hops {
    /// Hops timed from `origin` (the request's start).
    pub fn new(origin: Instant) -> Self {
        Hops {
            origin,
            list: Mutex::new(Vec::new()),
        }
    }

    /// The time since the request's start.
    pub fn now(&self) -> Duration {
        self.origin.elapsed()
    }

    /// Records `hop`; the first allocates room for four (most questions meet a few listeners).
    pub(super) fn push(&self, hop: Hop) {
        self.list
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(hop);
    }

    /// The hops recorded, leaving none.
    pub fn take(&self) -> Vec<Hop> {
        std::mem::take(&mut *self.list.lock().unwrap_or_else(|p| p.into_inner()))
    }
}
