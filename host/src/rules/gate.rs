//! The rules as the first gate of the waterfall (after the built-in guard), and the proposal a
//! person's or plugin's rule text makes.

use std::sync::Arc;

use crate::answer::{Answer, Effect, RuleScope};
use crate::outcome::Decision;
use crate::waterfall::{ImmediateAnswer, Listener, ListenerFuture, Question};

use super::book::{Matched, RuleBook};
use super::pattern::{self, Call, SpecError};
use super::rule::split_text;

/// A proposal for the rule text `rule` (`Tool` or `Tool(pattern)`), checked.
pub fn proposal(
    rule: &str,
    effect: Effect,
    scope: RuleScope,
) -> Result<crate::answer::Proposal, SpecError> {
    let spec = pattern::parse(rule)?;
    let (tool, pattern) = split_text(&spec.text);
    crate::answer::Proposal::checked(effect, tool, pattern, scope).map_err(|e| SpecError {
        text: rule.to_owned(),
        reason: e.to_string(),
    })
}

/// The rules as the first gate of the waterfall.
pub struct RuleGate(pub Arc<RuleBook>);

/// The waterfall name of the rule gate; the decided event names the rule itself.
pub const GATE_NAME: &str = "rules";

impl RuleGate {
    fn answer_for(&self, question: &Question) -> Answer {
        let arguments = question.arguments();
        let call = Call {
            tool: question.tool_name(),
            arguments: arguments.as_ref(),
            cwd: question.cwd(),
            undeclared: question.undeclared(),
        };
        let session = question.session_id();
        // A permission request for a call the rules refuse is refused too; only a rule naming
        // the request, with a pattern for the request's own tool, grants it.
        let inner_tool = (call.tool == pattern::PERMISSION_REQUEST)
            .then(|| {
                arguments
                    .as_ref()?
                    .get(pattern::PERMISSION_REQUEST_TOOL)?
                    .as_str()
            })
            .flatten();
        let refused = inner_tool.and_then(|tool| {
            let inner = Call { tool, ..call };
            self.0
                .decide(&inner, session)
                .filter(|m| m.effect == Effect::Reject)
        });
        let decided = refused.or_else(|| {
            self.0.decide(&call, session).filter(|m| {
                call.tool != pattern::PERMISSION_REQUEST
                    || m.effect == Effect::Reject
                    || inner_tool.is_some_and(|t| m.rule.spec.covers_permission_for(t))
            })
        });
        match decided {
            None => Answer::from(Decision::Next),
            Some(Matched { rule, effect }) => {
                let (decision, reason) = match effect {
                    Effect::Allow => (Decision::AllowOnce, rule.reason.clone()),
                    Effect::Reject => (Decision::Reject, Some(rule.rejection_reason())),
                };
                Answer {
                    decision,
                    reason: reason.as_deref().and_then(crate::answer::clean_reason),
                    proposal: None,
                    rule: Some(crate::answer::RuleRef {
                        id: rule.id.clone(),
                        rule: rule.spec.text.clone(),
                        scope: rule.scope,
                        creator: rule.creator.clone(),
                    }),
                    by: None,
                    authority: None,
                }
            }
        }
    }
}

impl Listener for RuleGate {
    fn decide(&self, question: Question) -> ListenerFuture {
        let decision = self.answer_for(&question).decision;
        Box::pin(async move { Ok(decision) })
    }

    fn decide_now(&self, question: &Question) -> Option<ImmediateAnswer> {
        Some((None, Ok(self.answer_for(question))))
    }
}
