//! Who may turn an answer into a standing rule, and which rule.
//!
//! A rule outlives the question it was made with, so making one is a wider act than answering:
//! a project or user rule changes what every session may do. Only a person at the host (the
//! CLI, a local socket or stdio client, an ACP editor's prompt) or an admin token may make
//! them; an answerer token may make session rules only, for the sessions it answers; a plugin
//! only the scopes the deployment lists. And a proposed rule must cover the call it answers: a
//! person who allowed `npm test` never meant to allow `Bash`. [`vet`] says why not, in the words
//! the decided event's `ruleDeclined` records and the console and clients show.

use crate::answer::{Authority, Effect, Proposal, RuleScope};

use super::pattern::{self, Call};

/// Why a proposal was not made a rule, on a host without standing rules.
pub const DECLINED_RULES_OFF: &str = "this host keeps no standing rules";

/// Why a plugin's proposal of `scope` was not made a rule.
pub fn declined_for_plugins(scope: RuleScope) -> String {
    format!(
        "plugins may not create {} rules in this deployment ([rules] plugins-may-create)",
        scope.as_str()
    )
}

/// Why an answerer token's proposal of a scope wider than its session was not made a rule.
pub fn declined_for_answerers(scope: RuleScope) -> String {
    format!(
        "an answerer token may create session rules only; {} rules need a person at the host or an admin token",
        scope.as_str()
    )
}

/// Why a proposal that does not match the call it answers was not made a rule.
pub fn declined_not_covering(rule: &str, effect: Effect) -> String {
    let verb = match effect {
        Effect::Allow => "allow",
        Effect::Reject => "reject",
    };
    format!("the proposed rule {rule} would not {verb} the call it answers")
}

/// Why a proposal that could not be saved was not made a rule.
pub fn declined_unsaved(error: &dyn std::fmt::Display) -> String {
    format!("the rule could not be saved: {error}")
}

/// Whether `proposal`, made by someone with `authority` with an answer to `call`, may become a
/// rule; `plugins_may_create` are the scopes the deployment lets plugins create.
///
/// # Errors
/// Why not, as `ruleDeclined` records it.
pub fn vet(
    proposal: &Proposal,
    authority: Authority,
    plugins_may_create: &[RuleScope],
    call: &Call<'_>,
) -> Result<(), String> {
    match authority {
        Authority::Person => {}
        Authority::Answerer if proposal.scope != RuleScope::Session => {
            return Err(declined_for_answerers(proposal.scope));
        }
        Authority::Answerer => {}
        Authority::Plugin if !plugins_may_create.contains(&proposal.scope) => {
            return Err(declined_for_plugins(proposal.scope));
        }
        Authority::Plugin => {}
    }
    let text = proposal.text();
    let spec = pattern::parse(&text).map_err(|e| e.to_string())?;
    let covers = match proposal.effect {
        Effect::Allow => spec.covers(call),
        Effect::Reject => spec.rejects(call),
    };
    if covers {
        Ok(())
    } else {
        Err(declined_not_covering(&spec.text, proposal.effect))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn proposal(rule: &str, effect: Effect, scope: RuleScope) -> Proposal {
        let (tool, pattern) = match rule.split_once('(') {
            Some((t, p)) => (t.to_owned(), Some(p.trim_end_matches(')').to_owned())),
            None => (rule.to_owned(), None),
        };
        Proposal::checked(effect, tool, pattern, scope).unwrap()
    }

    #[test]
    fn only_a_person_or_an_admin_widens_beyond_the_session() {
        let args = json!({"command": "npm test"});
        let call = Call {
            tool: "Bash",
            arguments: Some(&args),
            cwd: Some("/w"),
            undeclared: &[],
        };
        let wide = proposal("Bash(npm test:*)", Effect::Allow, RuleScope::User);
        assert_eq!(vet(&wide, Authority::Person, &[], &call), Ok(()));
        assert_eq!(
            vet(&wide, Authority::Answerer, &[], &call),
            Err(declined_for_answerers(RuleScope::User))
        );
        let session = proposal("Bash(npm test:*)", Effect::Allow, RuleScope::Session);
        assert_eq!(vet(&session, Authority::Answerer, &[], &call), Ok(()));
        assert_eq!(
            vet(&session, Authority::Plugin, &[], &call),
            Err(declined_for_plugins(RuleScope::Session))
        );
        assert_eq!(
            vet(&session, Authority::Plugin, &[RuleScope::Session], &call),
            Ok(())
        );
        let elsewhere = proposal("Bash(ls:*)", Effect::Allow, RuleScope::Session);
        assert_eq!(
            vet(&elsewhere, Authority::Person, &[], &call),
            Err(declined_not_covering("Bash(ls:*)", Effect::Allow))
        );
        let reject = proposal("Bash(npm:*)", Effect::Reject, RuleScope::Project);
        assert_eq!(vet(&reject, Authority::Person, &[], &call), Ok(()));
    }
}
