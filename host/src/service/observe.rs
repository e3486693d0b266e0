//! What sees every settled question with what it took, on the deciding path: the seam
//! `serve --metrics` counts through. It must be quick (counters, no allocation for the common
//! case): it runs after the decision is durable, before the asker gets it.

use std::time::Duration;

use crate::audit::event::FailureRecord;
use crate::outcome::Outcome;

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
}

/// Sees every settled question (cancelled and `never`-refused ones included).
pub trait DecisionObserver: Send + Sync + 'static {
    /// One question settled.
    fn settled(&self, settlement: &Settlement<'_>);
}
