//! What sees a question once it is settled, off the decision's path: the seam shadow plugins
//! plug into ([`AfterDecision`]).

use crate::outcome::Outcome;

use super::Question;

/// Told of every question the waterfall decided, after its decision is durable and before the
/// asker gets it. It must return at once (spawn whatever it does) and can change nothing: the
/// outcome is already written.
pub trait AfterDecision: Send + Sync + 'static {
    /// `question` settled `outcome`, decided by `answerer` (`None`: nobody decided).
    fn decided(&self, question: &Question, outcome: Outcome, answerer: Option<&str>);
}
