//! One question through the seam: the asker's [`ApprovalRequest`], the [`Verdict`] it gets back,
//! and [`ApprovalService::ask`], which audits the question, decides it (policy, then the
//! waterfall) and audits the decision exactly once, withholding any outcome that is not durable.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::task::Poll;

use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::observe::{Detail, Settlement};
use super::traceparent::TraceParent;
use super::{ApprovalError, ApprovalService};
use crate::agent::Agent;
use crate::audit::error::LogError;
use crate::audit::event::{Asked, Decided, Event, FailureRecord};
use crate::audit::fold::Violation;
use crate::audit::log::{Appended, Ticket};
use crate::outcome::Outcome;
use crate::policy::Policy;
use crate::session::{InFlight, Session};
use crate::waterfall::{Hops, Question, Settled, Waterfall};

/// One approval question, as an asker poses it. Carries no tool arguments.
#[derive(Debug, Clone)]
pub struct ApprovalRequest {
    agent: Agent,
    tool_name: String,
    call_id: Option<String>,
    reason: Option<String>,
    cwd: Option<String>,
    undeclared: Vec<String>,
    cancel: Option<CancellationToken>,
    /// Set when a listener reads the call's arguments (a dry run reports decisions made on
    /// redacted values).
    arguments_read: Option<Arc<AtomicBool>>,
    /// The caller's trace, which the question's spans continue.
    trace_parent: Option<TraceParent>,
}

/// How a request settled, with what the deciding listener said: what an asker needs to write the
/// text a model reads (`tools::texts::rejection`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// The outcome.
    pub outcome: Outcome,
    /// The listener that decided, when one did.
    pub answerer: Option<String>,
    /// Its reason, when it gave one (bounded, one printable line).
    pub reason: Option<String>,
    /// Whether a listener outside the process (a person) decided, not an in-process gate.
    pub answered_outside: bool,
    /// The version of the plugin that answered (its component's SHA-256), when a plugin did.
    pub digest: Option<String>,
    /// What failed, when the outcome is a failure's `unavailable`.
    pub failure: Option<crate::audit::event::FailureRecord>,
}

impl Verdict {
    /// The verdict as the `approval/decided` event says it: `{outcome, answerer?, digest?,
    /// failure?, reason?}` (what `ask --json` prints and `serve` returns).
    pub fn to_json(&self) -> serde_json::Value {
        let mut v = serde_json::json!({ "outcome": self.outcome });
        if let Some(a) = &self.answerer {
            v["answerer"] = serde_json::json!(a);
        }
        if let Some(d) = &self.digest {
            v["digest"] = serde_json::json!(d);
        }
        if let Some(f) = &self.failure {
            v["failure"] = serde_json::json!(f);
        }
        if let Some(r) = &self.reason {
            v["reason"] = serde_json::json!(r);
        }
        v
    }
}

impl ApprovalRequest {
    /// A request from `agent` about a call of `tool_name`.
    pub fn new(agent: &Agent, tool_name: impl Into<String>) -> Self {
        ApprovalRequest {
            agent: agent.clone(),
            tool_name: tool_name.into(),
            call_id: None,
            reason: None,
            cwd: None,
            undeclared: Vec::new(),
            cancel: None,
            arguments_read: None,
            trace_parent: None,
        }
    }

    /// The caller's trace (W3C `traceparent`): a traced host makes the question's span its child.
    pub fn trace_parent(mut self, parent: TraceParent) -> Self {
        self.trace_parent = Some(parent);
        self
    }

    /// Sets `flag` when any listener reads the call's arguments (or another call's).
    pub fn observe_arguments(mut self, flag: Arc<AtomicBool>) -> Self {
        self.arguments_read = Some(flag);
        self
    }

    /// The asker's working directory (plugins of API 0.2 see it).
    pub fn cwd(mut self, cwd: impl Into<String>) -> Self {
        self.cwd = Some(cwd.into());
        self
    }

    /// The call's arguments that its tool's input schema does not declare (recorded on the
    /// question): no path rule covers the call then.
    pub fn undeclared(mut self, names: Vec<String>) -> Self {
        self.undeclared = names;
        self
    }

    /// The exact call id the question is about.
    pub fn call_id(mut self, call_id: impl Into<String>) -> Self {
        self.call_id = Some(call_id.into());
        self
    }

    /// A human-readable reason shown to the answerer.
    pub fn reason(mut self, reason: impl Into<String>) -> Self {
        self.reason = Some(reason.into());
        self
    }

    /// A cancellation signal: cancelled before the request, it settles `cancelled` without
    /// asking anyone; cancelled during it, it settles `cancelled` at once.
    pub fn cancel(mut self, token: CancellationToken) -> Self {
        self.cancel = Some(token);
        self
    }
}

impl ApprovalService {
    /// Asks whether `request`'s call may proceed.
    ///
    /// Runs on the caller's task: nothing is spawned and no thread is woken unless the store has
    /// to wait for the disk. Once the question is asked, dropping this future does not leave it
    /// open: it is settled `cancelled` and audited (see `Unsettled`).
    ///
    /// # Errors
    /// [`ApprovalError::NoOpenTurn`] when the session has no open turn (nothing is appended);
    /// [`ApprovalError::Log`] when an audit append fails: before the decision nothing is decided,
    /// after it the decision is withheld, so no outcome is ever returned unaudited.
    pub async fn request(&self, request: ApprovalRequest) -> Result<Outcome, ApprovalError> {
        self.ask(request).await.map(|v| v.outcome)
    }

    /// [`ApprovalService::request`], returning what the deciding listener said with the outcome.
    ///
    /// # Errors
    /// As [`ApprovalService::request`].
    pub async fn ask(&self, request: ApprovalRequest) -> Result<Verdict, ApprovalError> {
        let observer = self.observer();
        let started = observer.as_ref().map(|_| std::time::Instant::now());
        // A traced question records its steps; the rest pay nothing for it.
        let traced = match (&observer, started) {
            (Some(o), Some(origin)) if o.wants_detail() => {
                Some((std::time::SystemTime::now(), origin))
            }
            _ => None,
        };
        let ApprovalRequest {
            agent,
            tool_name,
            call_id,
            reason,
            cwd,
            undeclared,
            cancel,
            arguments_read,
            trace_parent,
        } = request;
        let session = agent.session().clone();
        let in_flight = session.enter()?;
        let ask_cancel = in_flight.turn.child_token();
        let id = Uuid::new_v4().to_string();
        let asked = Asked {
            id: id.clone(),
            tool_name: tool_name.clone(),
            call_id: call_id.clone(),
            reason: reason.clone(),
            agent: Some(agent.id().to_owned()),
            parent_agent: agent.parent_id().map(str::to_owned),
            cwd: cwd.clone(),
            sandbox_mode: None,
            undeclared: undeclared.clone(),
        };
        let Appended {
            seq: asked_seq,
            own_policy,
            sandbox_mode,
            ticket: written,
        } = session.log.append_question(asked).map_err(|e| match e {
            LogError::Refused {
                violation: Violation::OutsideTurn(_),
                ..
            } => ApprovalError::NoOpenTurn {
                session: session.id().to_owned(),
            },
            other => other.into(),
        })?;
        // From here the question must be settled, even if this future is dropped.
        let mut unsettled = Unsettled {
            session: session.clone(),
            id: Some(id.clone()),
            in_flight: Some(in_flight),
            cancel: ask_cancel.clone(),
        };
        if let Err(e) = written.wait().await {
            // The question never reached the log; the log refuses everything after this.
            unsettled.id = None;
            return Err(e.into());
        }
        let asked_durable = traced.map(|(_, origin)| origin.elapsed());

        let caller_cancelled = cancel.as_ref().is_some_and(|t| t.is_cancelled());
        let mut question = None;
        // Moved into the question when the waterfall runs; kept here (for a tracer) otherwise.
        let mut names = Some((id, tool_name));
        let settled = if caller_cancelled || ask_cancel.is_cancelled() {
            Settled::plain(Outcome::Cancelled)
        } else if own_policy.unwrap_or_else(|| self.default_policy()) == Policy::Never {
            Settled::plain(Outcome::Rejected)
        } else if let Some((id, tool_name)) = names.take() {
            let asked = question.insert(Question::new(
                id,
                asked_seq,
                agent,
                tool_name,
                call_id,
                reason,
                cwd,
                undeclared,
                sandbox_mode.map(|m| m.as_str()),
                ask_cancel.clone(),
                cancel.clone(),
                arguments_read,
                traced.map(|(_, origin)| origin),
            ));
            decide(&self.inner.waterfall, asked, &ask_cancel, cancel.as_ref()).await
        } else {
            Settled::plain(Outcome::Unavailable)
        };
        let decided_at = traced.map(|(_, origin)| origin.elapsed());
        let made = match (&settled.proposal, &question) {
            (Some(proposal), Some(question)) => Some(
                self.accept_proposal(session.id(), &settled, proposal, question)
                    .await,
            ),
            _ => None,
        };
        let answered_outside = settled.answered_outside;
        let mut record = decided_record(settled);
        match made {
            Some(Ok(id)) => record.rule_added = Some(id),
            Some(Err(why)) => record.rule_declined = Some(why),
            None => {}
        }
        // What the decided event says (a failed plugin is named in `failure`, not `answerer`).
        let verdict = Verdict {
            outcome: record.outcome,
            answerer: record.answerer.clone(),
            reason: record.reason.clone(),
            answered_outside,
            digest: record.digest.clone(),
            failure: record.failure.clone(),
        };
        let rule = observer
            .as_ref()
            .and_then(|_| record.rule.as_ref().map(|r| r.id.clone()));
        let ticket = unsettled.settle(record)?;
        // The outcome is withheld until its decision is durable.
        ticket.wait().await?;
        if let (Some(observer), Some(started)) = (&observer, started) {
            let took = started.elapsed();
            let hops = question.as_ref().and_then(Question::hops).map(Hops::take);
            let (id, tool) = match (&question, &names) {
                (Some(q), _) => (q.id(), q.tool_name()),
                (None, Some((id, tool))) => (id.as_str(), tool.as_str()),
                (None, None) => ("", ""),
            };
            let detail = traced.map(|(wall, _)| Detail {
                session: session.id(),
                question: id,
                tool,
                digest: verdict.digest.as_deref(),
                parent: trace_parent,
                started: wall,
                asked_durable: asked_durable.unwrap_or_default(),
                hops: hops.as_deref().unwrap_or_default(),
                settled: decided_at.unwrap_or_default(),
            });
            observer.settled(&Settlement {
                outcome: verdict.outcome,
                answerer: verdict.answerer.as_deref(),
                outside: answered_outside,
                failure: verdict.failure.as_ref(),
                rule: rule.as_deref(),
                took,
                detail: detail.as_ref(),
            });
        }
        if let (Some(question), Some(after)) = (&question, self.after_decision())
            && verdict.outcome != Outcome::Cancelled
        {
            after.decided(question, verdict.outcome, verdict.answerer.as_deref());
        }
        self.checkpoint(&session, false, false).await;
        Ok(verdict)
    }
}

/// Runs the waterfall for `question` until it decides or the question is cancelled (by its turn,
/// by the caller's token). An answer that comes after the cancellation is discarded.
async fn decide(
    waterfall: &Waterfall,
    question: &Question,
    ask_cancel: &CancellationToken,
    caller: Option<&CancellationToken>,
) -> Settled {
    let run = waterfall.run(question);
    tokio::pin!(run);
    // Listeners that answer at once (native gates, warm plugins) finish on the first poll; the
    // cancellation futures are only set up for a listener that waits.
    let mut first = true;
    let mut cancelled = None;
    std::future::poll_fn(|cx| {
        if let Poll::Ready(settled) = run.as_mut().poll(cx) {
            // A listener that blocked through the cancellation also answers late.
            return Poll::Ready(if question.is_cancelled() {
                Settled::plain(Outcome::Cancelled)
            } else {
                settled
            });
        }
        if first {
            first = false;
            let ask = ask_cancel.clone();
            let caller = caller.cloned();
            cancelled = Some(Box::pin(async move {
                match caller {
                    Some(caller) => {
                        tokio::select! {
                            () = ask.cancelled() => {}
                            () = caller.cancelled() => ask.cancel(),
                        }
                    }
                    None => ask.cancelled().await,
                }
            }));
        }
        match cancelled.as_mut().map(|c| c.as_mut().poll(cx)) {
            // Losing the race drops the waterfall future: a late answer is discarded.
            Some(Poll::Ready(())) => Poll::Ready(Settled::plain(Outcome::Cancelled)),
            _ => Poll::Pending,
        }
    })
    .await
}

/// The `approval/decided` record of `settled`, but for the question id.
fn decided_record(settled: Settled) -> Decided {
    let (answerer, failure) = match settled.failure {
        Some((plugin, f)) => (
            None,
            Some(FailureRecord {
                plugin: Some(plugin),
                kind: f.kind,
            }),
        ),
        None => (settled.answerer, None),
    };
    Decided {
        answerer,
        digest: settled.version,
        failure,
        reason: settled.reason,
        proposal: settled.proposal,
        rule: settled.rule,
        outside: settled.answered_outside,
        ..Decided::bare(String::new(), settled.outcome)
    }
}

/// A question asked and not yet settled. Settling appends its `approval/decided` (the turn stays
/// open for it until then); dropping it unsettled (the caller stopped waiting) cancels the
/// question and appends `cancelled` instead, so the log pairs every question whatever happens to
/// the asking future.
struct Unsettled {
    session: Arc<Session>,
    /// `None` once settled (or when the question never reached the log).
    id: Option<String>,
    in_flight: Option<InFlight>,
    cancel: CancellationToken,
}

impl Unsettled {
    fn settle(&mut self, record: Decided) -> Result<Ticket, ApprovalError> {
        let Some(id) = self.id.take() else {
            return Err(ApprovalError::Internal("question settled twice".to_owned()));
        };
        let decided = Event::Decided(Decided { id, ..record });
        let submitted = self.session.log.submit(decided, true);
        // Appended (or refused): the turn no longer waits for this question.
        self.in_flight.take();
        let (_, ticket) = submitted?;
        Ok(ticket)
    }
}

impl Drop for Unsettled {
    fn drop(&mut self) {
        let Some(id) = self.id.take() else {
            return;
        };
        self.cancel.cancel();
        let decided = Event::Decided(Decided::bare(id, Outcome::Cancelled));
        // Nobody waits for this commit; the commit threads complete it.
        if let Err(e) = self.session.log.submit(decided, true) {
            tracing::error!(session = self.session.id(), error = %e, "could not settle a question whose caller stopped waiting");
        }
        self.in_flight.take();
    }
}
