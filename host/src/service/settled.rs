//! A question settled by another process, handed to what sees settled questions here (the
//! shadows): an in-process hook answers and exits at once, so its shadows run afterwards, in a
//! process of their own (`approval-host shadow settle`), on the question as the log recorded it.

use tokio_util::sync::CancellationToken;

use super::{ApprovalError, ApprovalService};
use crate::audit::event::Event;
use crate::outcome::Outcome;
use crate::waterfall::Question;

impl ApprovalService {
    /// Hands the last settled question of session `session_id` about call `call_id` to the
    /// after-decision seam (the shadows), as it was asked (agent, tool, cwd, sandbox mode, the
    /// call's recorded arguments) and as it was decided. A cancelled question is not handed, as
    /// live. Returns the question's id, or `None` when no settled question is about the call.
    ///
    /// # Errors
    /// The session's log could not be read.
    pub async fn hand_settled(
        &self,
        session_id: &str,
        call_id: &str,
    ) -> Result<Option<String>, ApprovalError> {
        let bytes = self.store().read(session_id)?;
        let records = crate::audit::store::parse_lines(session_id, &bytes)?;
        let mut found = None;
        for record in &records {
            match &record.event {
                Event::Asked(a) if a.call_id.as_deref() == Some(call_id) => {
                    found = Some((record.seq, a.clone(), None));
                }
                Event::Decided(d) => {
                    if let Some((_, a, decided)) = &mut found
                        && a.id == d.id
                    {
                        *decided = Some((d.outcome, d.answerer.clone()));
                    }
                }
                _ => {}
            }
        }
        let Some((seq, asked, Some((outcome, answerer)))) = found else {
            return Ok(None);
        };
        let Some(after) = self.after_decision() else {
            return Ok(None);
        };
        if outcome == Outcome::Cancelled {
            return Ok(None);
        }
        let agent_id = asked.agent.clone().unwrap_or_default();
        let agent = self.agent(session_id, &agent_id).await?;
        let question = Question::new(
            asked.id.clone(),
            seq,
            agent,
            asked.tool_name,
            asked.call_id,
            asked.reason,
            asked.cwd,
            asked.undeclared,
            asked.sandbox_mode.map(|m| m.as_str()),
            CancellationToken::new(),
            None,
            None,
            None,
        );
        after.decided(&question, outcome, answerer.as_deref());
        Ok(Some(asked.id))
    }
}
