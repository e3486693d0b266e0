//! Standing rules and built-in protections on the service: turning them on, adding and revoking
//! rules (a session rule in its session's log), and accepting a rule proposed with an answer
//! when whoever answered may make it.

use std::sync::Arc;

use super::{ApprovalError, ApprovalService};
use crate::answer::{Authority, RuleScope};
use crate::audit::event::{Event, RuleRevoked};
use crate::rules::protect::{Guard, Protected};
use crate::rules::{self, NewRule, RuleBook, RuleError, RuleGate, RuleView};
use crate::waterfall::{Position, Question, Scope, Settled};

impl ApprovalService {
    /// Enables standing rules from `book` (or, with `None`, turns them off): its gate joins the
    /// waterfall ahead of every plugin, and every session opened from now on has its session
    /// rules indexed.
    pub fn set_rules(&self, book: Option<Arc<RuleBook>>) {
        let next = book.map(|book| {
            book.set_checkpointer(self.checkpointer());
            let registration = self.inner.waterfall.register(
                rules::GATE_NAME,
                Scope::Global,
                Position::First,
                RuleGate(book.clone()),
            );
            (book, registration)
        });
        let previous = std::mem::replace(
            &mut *self.inner.rules.write().unwrap_or_else(|p| p.into_inner()),
            next,
        );
        drop(previous);
    }

    /// Protects the places `protected` names (or, with `None`, stops): its guard joins the
    /// waterfall ahead of everything, standing rules included, and rejects any call that would
    /// change one of them ([`crate::rules::protect`]).
    pub fn set_protected(&self, protected: Option<Protected>) {
        let next = protected.map(|protected| {
            let protected = Arc::new(protected);
            let registration = self.inner.waterfall.register(
                crate::rules::protect::GATE_NAME,
                Scope::Global,
                Position::Guard,
                Guard(protected.clone()),
            );
            (protected, registration)
        });
        let previous = std::mem::replace(
            &mut *self
                .inner
                .protected
                .write()
                .unwrap_or_else(|p| p.into_inner()),
            next,
        );
        drop(previous);
    }

    /// The built-in protections, when set.
    pub fn protected(&self) -> Option<Arc<Protected>> {
        self.inner
            .protected
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(|(p, _)| p.clone())
    }

    /// The standing rules, when enabled.
    pub fn rules(&self) -> Option<Arc<RuleBook>> {
        self.inner
            .rules
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(|(book, _)| book.clone())
    }

    /// Adds a standing rule: durable before this returns (a session rule in its session's log,
    /// a project or user rule in its rules log), then active for every decision that starts
    /// after.
    ///
    /// # Errors
    /// [`ApprovalError::RulesOff`] without rules; [`ApprovalError::Rule`] for a rule that does
    /// not parse or could not be written.
    pub async fn add_rule(&self, new: NewRule) -> Result<RuleView, ApprovalError> {
        let book = self.rules().ok_or(ApprovalError::RulesOff)?;
        if new.scope != RuleScope::Session {
            return Ok(book.add_shared(new).await?.view());
        }
        let session_id = new.session.clone().ok_or(RuleError::NoSession)?;
        let (added, rule) = book.record(&new)?;
        let session = self.session(&session_id).await?;
        session.log.append(Event::RuleAdded(added)).await?;
        Ok(book.activate(rule).view())
    }

    /// Opens session `id` long enough to index its session rules (a command that lists, explains
    /// or revokes them).
    ///
    /// # Errors
    /// As opening the session.
    pub async fn load_session_rules(&self, id: &str) -> Result<(), ApprovalError> {
        self.rules().ok_or(ApprovalError::RulesOff)?;
        self.session(id).await.map(drop)
    }

    /// Revokes the standing rule `id`. It stops matching before the revocation is written, so
    /// no decision that starts after this call begins uses it; if the write fails, an allow rule
    /// stays revoked and a reject rule is put back (the host fails closed either way).
    ///
    /// # Errors
    /// [`ApprovalError::RulesOff`]; [`ApprovalError::Rule`] for an unknown or static rule, or a
    /// failed write.
    pub async fn revoke_rule(
        &self,
        id: &str,
        by: &str,
        reason: Option<String>,
    ) -> Result<(), ApprovalError> {
        // A revocation runs to its end even when its caller stops waiting (a console request
        // whose browser went away): its first step takes the rule out and only its last puts a
        // reject rule back when the write failed, so stopping between them would lose the rule.
        let (service, id, by) = (self.clone(), id.to_owned(), by.to_owned());
        tokio::spawn(async move { service.revoke_rule_whole(&id, &by, reason).await })
            .await
            .map_err(|e| ApprovalError::Internal(format!("revoking a rule: {e}")))?
    }

    async fn revoke_rule_whole(
        &self,
        id: &str,
        by: &str,
        reason: Option<String>,
    ) -> Result<(), ApprovalError> {
        let book = self.rules().ok_or(ApprovalError::RulesOff)?;
        let Some(session_id) = book.get(id).and_then(|r| r.session.clone()) else {
            return Ok(book.revoke_shared(id, by, reason).await?);
        };
        let rule = book.take(id)?;
        let written = async {
            let session = self.session(&session_id).await.map_err(|e| match e {
                ApprovalError::Log(l) => RuleError::Log(l),
                other => RuleError::Internal(other.to_string()),
            })?;
            session
                .log
                .append(Event::RuleRevoked(RuleRevoked {
                    id: id.to_owned(),
                    by: by.to_owned(),
                    reason,
                }))
                .await?;
            Ok(())
        }
        .await;
        Ok(book.settle_revocation(rule, written)?)
    }

    /// Turns a listener's proposal into a rule when the host accepts it
    /// ([`rules::proposals::vet`]: who may make which scope, and the rule must cover the call it
    /// answers). Returns the new rule's id, or why it was declined (recorded on the decision,
    /// which stands for this call only).
    pub(super) async fn accept_proposal(
        &self,
        session_id: &str,
        settled: &Settled,
        proposal: &crate::answer::Proposal,
        question: &Question,
    ) -> Result<String, String> {
        let by = settled.answerer.as_deref().unwrap_or("unknown");
        let Some(book) = self.rules() else {
            return Err(rules::DECLINED_RULES_OFF.to_owned());
        };
        let authority = match (settled.answered_outside, settled.authority) {
            // A plugin's word about its own authority is not taken.
            (false, _) => Authority::Plugin,
            (true, Some(Authority::Plugin) | None) => Authority::Answerer,
            (true, Some(authority)) => authority,
        };
        let arguments = question.arguments();
        let call = rules::pattern::Call {
            tool: question.tool_name(),
            arguments: arguments.as_ref(),
            cwd: question.cwd(),
            undeclared: question.undeclared(),
        };
        if let Err(why) = rules::proposals::vet(
            proposal,
            authority,
            &book.plugins_may_create_scopes(),
            &call,
        ) {
            tracing::warn!(
                answerer = by,
                rule = %proposal.text(),
                scope = proposal.scope.as_str(),
                why = %why,
                "a proposed standing rule was declined; the decision stands for this call only"
            );
            return Err(why);
        }
        let rule = proposal.text();
        let creator = if settled.answered_outside {
            format!("answerer:{by}")
        } else {
            format!("plugin:{by}")
        };
        let new = NewRule {
            rule,
            effect: proposal.effect,
            scope: proposal.scope,
            session: (proposal.scope == RuleScope::Session).then(|| session_id.to_owned()),
            lasts: None,
            creator,
            reason: settled.reason.clone(),
        };
        match self.add_rule(new).await {
            Ok(view) => Ok(view.id),
            Err(e) => {
                tracing::warn!(answerer = by, error = %e, "a proposed standing rule could not be added; the decision stands for this call only");
                Err(rules::declined_unsaved(&e))
            }
        }
    }
}
