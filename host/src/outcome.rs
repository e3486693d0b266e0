//! The closed vocabularies: what a request settles to ([`Outcome`]), what a listener may answer
//! ([`Decision`]), and how a listener that could not answer failed ([`Failure`]).
//!
//! Every wire string here is written once, in an `as_str` match, and serde uses the same spelling.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// How an approval request settled. Only [`Outcome::AllowedOnce`] grants, and only for the one
/// call that asked; nothing about a grant persists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    /// Exactly the asked-about call may proceed.
    AllowedOnce,
    /// An answerer (or the `never` policy) said no.
    Rejected,
    /// The asker cancelled, the turn ended, or the answerer dismissed the question.
    Cancelled,
    /// Nobody could answer: no listener decided, or a listener failed.
    Unavailable,
}

impl Outcome {
    /// Every outcome, in declaration order.
    pub const ALL: [Outcome; 4] = [
        Outcome::AllowedOnce,
        Outcome::Rejected,
        Outcome::Cancelled,
        Outcome::Unavailable,
    ];

    /// The wire spelling: `allowed-once`, `rejected`, `cancelled`, `unavailable`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Outcome::AllowedOnce => "allowed-once",
            Outcome::Rejected => "rejected",
            Outcome::Cancelled => "cancelled",
            Outcome::Unavailable => "unavailable",
        }
    }

    /// Whether this outcome lets the asked-about call proceed.
    pub const fn grants(self) -> bool {
        matches!(self, Outcome::AllowedOnce)
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A string that is not one of the four outcomes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown outcome {0:?}: expected one of \"allowed-once\", \"rejected\", \"cancelled\" or \"unavailable\""
)]
pub struct UnknownOutcome(pub String);

impl FromStr for Outcome {
    type Err = UnknownOutcome;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Outcome::ALL
            .into_iter()
            .find(|o| o.as_str() == s)
            .ok_or_else(|| UnknownOutcome(s.to_owned()))
    }
}

/// What one listener in the waterfall answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Decision {
    /// Grant exactly this call; settles [`Outcome::AllowedOnce`].
    AllowOnce,
    /// Refuse; settles [`Outcome::Rejected`].
    Reject,
    /// Dismiss the question; settles [`Outcome::Cancelled`].
    Cancel,
    /// Do not decide; the next listener is asked.
    Next,
}

impl Decision {
    /// Every decision, in declaration order.
    pub const ALL: [Decision; 4] = [
        Decision::AllowOnce,
        Decision::Reject,
        Decision::Cancel,
        Decision::Next,
    ];

    /// The wire spelling: `allow-once`, `reject`, `cancel`, `next`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Decision::AllowOnce => "allow-once",
            Decision::Reject => "reject",
            Decision::Cancel => "cancel",
            Decision::Next => "next",
        }
    }

    /// The outcome this decision settles, or `None` for [`Decision::Next`].
    pub const fn outcome(self) -> Option<Outcome> {
        match self {
            Decision::AllowOnce => Some(Outcome::AllowedOnce),
            Decision::Reject => Some(Outcome::Rejected),
            Decision::Cancel => Some(Outcome::Cancelled),
            Decision::Next => None,
        }
    }

    /// Reads a decision from a listener that answers in strings (a script, a remote client).
    /// Anything outside the vocabulary is an [`FailureKind::InvalidResult`] failure, which the
    /// waterfall settles `unavailable`: an unknown answer never grants.
    pub fn from_wire(s: &str) -> Result<Decision, Failure> {
        Decision::ALL
            .into_iter()
            .find(|d| d.as_str() == s)
            .ok_or_else(|| {
                Failure::new(
                    FailureKind::InvalidResult,
                    format!(
                        "{s:?} is not one of \"allow-once\", \"reject\", \"cancel\" or \"next\""
                    ),
                )
            })
    }
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a listener produced no decision. Any failure settles the request `unavailable` and stops
/// the waterfall: a broken gate must never let a permissive answerer behind it grant.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind}: {message}")]
pub struct Failure {
    /// The class of failure, recorded on the `approval/decided` event.
    pub kind: FailureKind,
    /// A human-readable detail for logs.
    pub message: String,
}

impl Failure {
    /// A failure of the given kind.
    pub fn new(kind: FailureKind, message: impl Into<String>) -> Self {
        Failure {
            kind,
            message: message.into(),
        }
    }

    /// A listener that returned an error.
    pub fn error(message: impl Into<String>) -> Self {
        Failure::new(FailureKind::Error, message)
    }
}

/// The class of a contained listener failure, as recorded in `approval/decided`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FailureKind {
    /// The listener returned an error.
    Error,
    /// The listener panicked.
    Panic,
    /// The listener answered something outside the decision vocabulary.
    InvalidResult,
    /// A WebAssembly listener trapped.
    Trap,
    /// The listener ran past its deadline.
    Timeout,
    /// The listener exhausted its memory limit.
    Memory,
    /// The listener overflowed its stack.
    StackOverflow,
    /// The host stopped while the question was open; recorded when the log is next opened.
    Interrupted,
    /// The listener was quarantined after repeated failures and was not run.
    Quarantined,
}

impl FailureKind {
    /// Every kind, in declaration order.
    pub const ALL: [FailureKind; 9] = [
        FailureKind::Error,
        FailureKind::Panic,
        FailureKind::InvalidResult,
        FailureKind::Trap,
        FailureKind::Timeout,
        FailureKind::Memory,
        FailureKind::StackOverflow,
        FailureKind::Interrupted,
        FailureKind::Quarantined,
    ];

    /// The wire spelling, e.g. `invalid-result`.
    pub const fn as_str(self) -> &'static str {
        match self {
            FailureKind::Error => "error",
            FailureKind::Panic => "panic",
            FailureKind::InvalidResult => "invalid-result",
            FailureKind::Trap => "trap",
            FailureKind::Timeout => "timeout",
            FailureKind::Memory => "memory",
            FailureKind::StackOverflow => "stack-overflow",
            FailureKind::Interrupted => "interrupted",
            FailureKind::Quarantined => "quarantined",
        }
    }
}

impl fmt::Display for FailureKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a caught panic says, for the failure it becomes (a listener's, a subscriber's, a tool's).
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_spellings_match_serde() {
        for o in Outcome::ALL {
            assert_eq!(serde_json::to_value(o).unwrap(), o.as_str());
            assert_eq!(o.as_str().parse::<Outcome>().unwrap(), o);
        }
        for d in Decision::ALL {
            assert_eq!(serde_json::to_value(d).unwrap(), d.as_str());
            assert_eq!(Decision::from_wire(d.as_str()).unwrap(), d);
        }
        for k in [
            FailureKind::Error,
            FailureKind::Panic,
            FailureKind::InvalidResult,
            FailureKind::Trap,
            FailureKind::Timeout,
            FailureKind::Memory,
            FailureKind::StackOverflow,
            FailureKind::Interrupted,
            FailureKind::Quarantined,
        ] {
            assert_eq!(serde_json::to_value(k).unwrap(), k.as_str());
        }
    }
}
