//! Feeding a recorded session into a service: how a dry run (`replay`) rebuilds, event by event,
//! the state a recorded question was asked in (its calls' arguments, the session's modes and
//! policy, its session rules, its turns) before asking the question again. Crate-only: it
//! appends session rules without vetting them, which only a scratch service may do.

use super::{ApprovalError, ApprovalService};
use crate::agent::Agent;
use crate::audit::event::Event;

impl ApprovalService {
    /// Appends a recorded `event` that shapes what later questions see to session `session_id`
    /// of this service: a turn's start or end, a `tool/call`, a `sandbox/mode`, an
    /// `approval/policy`, a session rule's `rule/added` or `rule/revoked` (the rule index kept in
    /// step). Questions, decisions, hooks and results are not fed (`Ok(false)`): a dry run asks
    /// its questions itself.
    ///
    /// # Errors
    /// The event does not fit the session as fed so far (the fold refuses it), or the append
    /// failed.
    pub(crate) async fn feed(
        &self,
        session_id: &str,
        event: &Event,
    ) -> Result<bool, ApprovalError> {
        match event {
            Event::TurnStart => self.start_turn(session_id).await?,
            Event::TurnEnd | Event::TurnEndBy(_) => self.end_turn(session_id).await?,
            Event::ToolCall(_) | Event::Sandbox(_) | Event::Policy(_) => {
                self.session(session_id)
                    .await?
                    .log
                    .append(event.clone())
                    .await?;
            }
            Event::RuleAdded(_) => {
                let session = self.session(session_id).await?;
                session.log.append(event.clone()).await?;
                if let Some(book) = self.rules() {
                    book.load_session(session_id, &session.log);
                }
            }
            Event::RuleRevoked(revoked) => {
                self.session(session_id)
                    .await?
                    .log
                    .append(event.clone())
                    .await?;
                if let Some(book) = self.rules() {
                    // Already gone when the session never indexed it: nothing to undo.
                    let _ = book.take(&revoked.id);
                }
            }
            Event::Asked(_)
            | Event::Decided(_)
            | Event::HookInvoked(_)
            | Event::HookResult(_)
            | Event::Shadowed(_)
            | Event::Unasked(_)
            | Event::McpMessage(_)
            | Event::McpPinned(_)
            | Event::McpPinWanted(_)
            | Event::ToolResult(_) => return Ok(false),
        }
        Ok(true)
    }

    /// Agent `agent_id` of session `session_id`, delegated by `parent` when it was a subagent, as
    /// a recorded question names it. Unlike [`ApprovalService::subagent`] nothing is seeded: the
    /// recorded session's own events are fed instead.
    ///
    /// # Errors
    /// As opening the session.
    pub(crate) async fn agent_as(
        &self,
        session_id: &str,
        agent_id: &str,
        parent: Option<&str>,
    ) -> Result<Agent, ApprovalError> {
        let session = self.session(session_id).await?;
        Ok(Agent::new(
            agent_id.to_owned(),
            session,
            parent.map(str::to_owned),
        ))
    }
}
