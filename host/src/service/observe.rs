//! What sees every settled question with what it took, on the deciding path: the seam
//! `serve --metrics` counts through and traces are exported through. It must be quick
//! (counters, a queue push; no allocation for the common case): it runs after the decision is
//! durable, before the asker gets it.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::traceparent::TraceParent;
use crate::audit::event::FailureRecord;
use crate::outcome::Outcome;
use crate::waterfall::Hop;

/// A settled question, as an observer sees it.
#[derive(Debug, Clone, Copy)]
pub struct Settlement<'a> {
    /// The outcome.
    pub outcome: Outcome,
    /// The listener that decided, when one did (`rule:<id>` for a rule).
    pub answerer: Option<&'a str>,
    /// Whether it answered from outside the process (a person, a client).
    pub outside: bool,
    /// What failed, when a failure settled it.
    pub failure: Option<&'a FailureRecord>,
    /// The standing rule (or protection) that decided, by id.
    pub rule: Option<&'a str>,
    /// From the request's start to its durable decision.
    pub took: Duration,
    /// The rest, for an observer that [wants it](DecisionObserver::wants_detail).
    pub detail: Option<&'a Detail<'a>>,
}

/// What a tracing observer needs beyond the counts: who asked what, when each step began and
/// ended (offsets from `started`), and the caller's trace.
#[derive(Debug, Clone, Copy)]
pub struct Detail<'a> {
    /// The session.
    pub session: &'a str,
    /// The question id, as `approval/asked` records it.
    pub question: &'a str,
    /// The tool asked about.
    pub tool: &'a str,
    /// The deciding plugin's version (its component digest), when a plugin decided or failed.
    pub digest: Option<&'a str>,
    /// The caller's trace, when it passed one.
    pub parent: Option<TraceParent>,
    /// The wall-clock time the request started.
    pub started: SystemTime,
    /// When the question's `approval/asked` record was durable.
    pub asked_durable: Duration,
    /// Each listener's turn, in order (empty when the question never reached the waterfall).
    pub hops: &'a [Hop],
    /// When the waterfall settled (or the question was settled without it).
    pub settled: Duration,
}

/// Sees every settled question (cancelled and `never`-refused ones included).
pub trait DecisionObserver: Send + Sync + 'static {
    /// One question settled.
    fn settled(&self, settlement: &Settlement<'_>);

    /// Whether this observer reads [`Settlement::detail`]; recording it costs each question a few
    /// allocations, so it is done only when one does.
    fn wants_detail(&self) -> bool {
        false
    }
}

/// Several observers as one, each seeing every settlement in the order added.
pub(super) struct Fanout(pub(super) Vec<Arc<dyn DecisionObserver>>);

impl DecisionObserver for Fanout {
    fn settled(&self, settlement: &Settlement<'_>) {
        for observer in &self.0 {
            observer.settled(settlement);
        }
    }

    fn wants_detail(&self) -> bool {
        self.0.iter().any(|o| o.wants_detail())
    }
}
