//! A client connection as the last answerer of the waterfall: the questions of the sessions it
//! opened go to it as `approval/prompt` requests, and its reply is the decision (with a standing
//! rule when it may make one).

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use serde_json::{Value, json};
use tokio::sync::oneshot;

use super::connection::Conn;
use super::{Inner, RULE_DECLINED, rpc};
use crate::answer::{Answer, Authority, Effect, RuleScope, clean_reason};
use crate::outcome::{Decision, Failure};
use crate::waterfall::{AnswerFuture, Listener, ListenerFuture, Question};

/// A connection that answers for the sessions it owns.
pub(super) struct ClientAnswerer {
    pub(super) server: Weak<Inner>,
    pub(super) conn: Weak<Conn>,
}

/// Withdraws a prompt whose question went away before the client answered.
struct PromptGuard {
    conn: Weak<Conn>,
    id: u64,
    answered: bool,
}

impl Drop for PromptGuard {
    fn drop(&mut self) {
        if !self.answered
            && let Some(conn) = self.conn.upgrade()
            && conn.lock_prompts().remove(&self.id).is_some()
        {
            conn.send(rpc::notification(
                "$/cancel_request",
                json!({"id": self.id}),
            ));
        }
    }
}

impl Listener for ClientAnswerer {
    /// The question goes to a client: it is made durable before it is sent.
    fn leaves_process(&self) -> bool {
        true
    }

    fn decide(&self, question: Question) -> ListenerFuture {
        let (_, future) = self
            .answer(&question)
            .expect("a client answerer always answers with a future");
        Box::pin(async move { future.await.map(|a| a.decision) })
    }

    /// The prompt carries the call's recorded `arguments`; the client's answer may carry a
    /// `reason` (for a rejection: what the model reads after "the user rejected ...").
    fn answer(&self, question: &Question) -> Option<(Option<Arc<str>>, AnswerFuture)> {
        let next = || -> Option<(Option<Arc<str>>, AnswerFuture)> {
            Some((None, Box::pin(async { Ok(Answer::from(Decision::Next)) })))
        };
        let (Some(server), Some(conn)) = (self.server.upgrade(), self.conn.upgrade()) else {
            return next();
        };
        let owned = server
            .lock_sessions()
            .get(question.session_id())
            .is_some_and(|e| e.owner == conn.id && e.agent.same(question.agent()));
        if !owned {
            return next();
        }
        let authority = conn
            .lock_grant()
            .as_ref()
            .map_or(Authority::Answerer, super::auth::Grant::authority);
        let call_tool = question.tool_name().to_owned();
        let call_arguments = question.arguments();
        let call_cwd = question.cwd().map(str::to_owned);
        let question_id = question.id().to_owned();
        let id = conn.next_out.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        conn.lock_prompts().insert(id, tx);
        let mut params = json!({
            "requestId": question.id(),
            "sessionId": question.session_id(),
            "toolName": question.tool_name(),
        });
        if let Some(c) = question.call_id() {
            params["callId"] = json!(c);
        }
        if let Some(r) = question.reason() {
            params["reason"] = json!(r);
        }
        if let Some(a) = question.arguments_shown() {
            params["arguments"] = a;
        }
        conn.send(rpc::request(id, "approval/prompt", params));
        let guard = PromptGuard {
            conn: Arc::downgrade(&conn),
            id,
            answered: false,
        };
        drop(conn);
        Some((
            None,
            Box::pin(async move {
                // Move the whole guard in (not just a field): dropping this future withdraws the prompt.
                let mut guard = guard;
                let answer = rx.await;
                guard.answered = true;
                match answer {
                    Ok(Ok(result)) => {
                        let reason = result
                            .get("reason")
                            .and_then(Value::as_str)
                            .and_then(clean_reason);
                        // `allow-always` / `reject-always` carry the rule and its scope; without
                        // a rule that parses they are plain rejections, never a grant.
                        let always = |effect| {
                            let rule = result.get("rule").and_then(Value::as_str)?;
                            let scope = result
                                .get("scope")
                                .cloned()
                                .and_then(|s| serde_json::from_value(s).ok())
                                .unwrap_or(RuleScope::Session);
                            crate::rules::proposal(rule, effect, scope).ok()
                        };
                        let (decision, proposal) =
                            match result.get("decision").and_then(Value::as_str) {
                                Some("allow-once") => (Decision::AllowOnce, None),
                                Some("cancel") => (Decision::Cancel, None),
                                Some("allow-always") => match always(Effect::Allow) {
                                    Some(p) => (Decision::AllowOnce, Some(p)),
                                    None => (Decision::Reject, None),
                                },
                                Some("reject-always") => (Decision::Reject, always(Effect::Reject)),
                                // "reject", and any other reply: never a grant.
                                _ => (Decision::Reject, None),
                            };
                        if let Some(p) = &proposal {
                            let call = crate::rules::pattern::Call {
                                tool: &call_tool,
                                arguments: call_arguments.as_ref(),
                                cwd: call_cwd.as_deref(),
                                undeclared: &[],
                            };
                            // The decision stands; the client is told at once why its rule
                            // will not be kept (the decided event records it too).
                            if let Err(why) = crate::rules::proposals::vet(p, authority, &[], &call)
                                && let Some(conn) = guard.conn.upgrade()
                            {
                                conn.send(rpc::notification(
                                    RULE_DECLINED,
                                    json!({"requestId": question_id, "rule": p.text(), "scope": p.scope.as_str(), "reason": why}),
                                ));
                            }
                        }
                        Ok(Answer {
                            decision,
                            reason,
                            proposal,
                            rule: None,
                            by: None,
                            authority: Some(authority),
                        })
                    }
                    Ok(Err(e)) => Err(Failure::error(format!(
                        "the client answered the prompt with an error: {}",
                        e.message
                    ))),
                    Err(_) => Err(Failure::error(
                        "the client disconnected before answering the prompt",
                    )),
                }
            }),
        ))
    }
}
