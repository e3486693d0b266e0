//! The approval service: the seam every asker calls and every answerer plugs into.
//!
//! [`ApprovalService::request`] does, in this order: refuse with an error when the session has no
//! open turn, appending nothing; append `approval/asked` with a fresh UUID; decide (an
//! already-cancelled request settles `cancelled`, then policy `never` settles `rejected` before any
//! listener, then the waterfall runs); append `approval/decided` exactly once; return the outcome.
//!
//! The body runs on its own task, so a caller that drops the request future cancels the question
//! instead of leaving an unmatched `approval/asked` behind.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

use futures_util::future::Either;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::agent::Agent;
use crate::error::{ApprovalError, LogError};
use crate::event::{Asked, Decided, Event, FailureRecord, PolicySwitch, ToolCall};
use crate::fold::Violation;
use crate::log::SessionLog;
use crate::outcome::{FailureKind, Outcome};
use crate::policy::{self, Policy};
use crate::session::{InFlight, Released, Session};
use crate::store::{DirStore, Store, validate_session_id};
use crate::waterfall::{Listener, Position, Question, Registration, Scope, Settled, Waterfall};

/// One approval question, as an asker poses it. Carries no tool arguments.
#[derive(Debug, Clone)]
pub struct ApprovalRequest {
    agent: Agent,
    tool_name: String,
    call_id: Option<String>,
    reason: Option<String>,
    cancel: Option<CancellationToken>,
}

impl ApprovalRequest {
    /// A request from `agent` about a call of `tool_name`.
    pub fn new(agent: &Agent, tool_name: impl Into<String>) -> Self {
        ApprovalRequest {
            agent: agent.clone(),
            tool_name: tool_name.into(),
            call_id: None,
            reason: None,
            cancel: None,
        }
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

/// An open session (while a handle lives) and whether its log is closed (after the last one).
type SessionSlot = (Weak<Session>, Arc<Released>);

struct Inner {
    store: Arc<dyn Store>,
    never_by_default: AtomicBool,
    sessions: tokio::sync::Mutex<HashMap<String, SessionSlot>>,
    waterfall: Waterfall,
}

/// The approval service: sessions and their logs, turns, policy, and the waterfall.
#[derive(Clone)]
pub struct ApprovalService {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for ApprovalService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApprovalService")
            .field("default_policy", &self.default_policy())
            .field("waterfall", &self.inner.waterfall)
            .finish_non_exhaustive()
    }
}

impl ApprovalService {
    /// A service over `store` with the deployment's default policy.
    pub fn new(store: impl Store, default_policy: Policy) -> Self {
        Self::with_store(Arc::new(store), default_policy)
    }

    /// A service over a shared store.
    pub fn with_store(store: Arc<dyn Store>, default_policy: Policy) -> Self {
        ApprovalService {
            inner: Arc::new(Inner {
                store,
                never_by_default: AtomicBool::new(default_policy == Policy::Never),
                sessions: tokio::sync::Mutex::new(HashMap::new()),
                waterfall: Waterfall::new(),
            }),
        }
    }

    /// A service over the embedded default store, session files under `state_dir/sessions`.
    pub fn open_dir(state_dir: impl Into<PathBuf>, default_policy: Policy) -> Self {
        Self::new(DirStore::new(state_dir), default_policy)
    }

    /// The deployment default policy.
    pub fn default_policy(&self) -> Policy {
        if self.inner.never_by_default.load(Ordering::Acquire) {
            Policy::Never
        } else {
            Policy::Ask
        }
    }

    /// Changes the deployment default; sessions with their own switch keep it.
    pub fn set_default_policy(&self, policy: Policy) {
        self.inner
            .never_by_default
            .store(policy == Policy::Never, Ordering::Release);
    }

    /// The waterfall, for registering listeners.
    pub fn waterfall(&self) -> &Waterfall {
        &self.inner.waterfall
    }

    /// Registers a listener; see [`Waterfall::register`].
    pub fn register(
        &self,
        name: impl Into<String>,
        scope: Scope,
        position: Position,
        listener: impl Listener,
    ) -> Registration {
        self.inner
            .waterfall
            .register(name, scope, position, listener)
    }

    async fn session(&self, id: &str) -> Result<Arc<Session>, ApprovalError> {
        validate_session_id(id)?;
        let mut sessions = self.inner.sessions.lock().await;
        if let Some((weak, released)) = sessions.get(id) {
            if let Some(session) = weak.upgrade() {
                return Ok(session);
            }
            // Its last handle is being dropped, maybe on another thread: wait for the log to
            // close, or reopening would find the file still locked.
            released.clone().wait().await;
        }
        let store = self.inner.store.clone();
        let owned = id.to_owned();
        let log = tokio::task::spawn_blocking(move || SessionLog::open(&*store, &owned))
            .await
            .map_err(|e| ApprovalError::Internal(e.to_string()))??;
        settle_interrupted(&log).await?;
        let released = Arc::new(Released::default());
        let session = Arc::new(Session::new(log, released.clone()));
        sessions.retain(|_, (weak, released)| weak.strong_count() > 0 || !released.is_done());
        sessions.insert(id.to_owned(), (Arc::downgrade(&session), released));
        Ok(session)
    }

    /// A new handle for agent `agent_id` of session `session_id`, opening (or creating) the
    /// session's log. Each call returns a distinct agent identity.
    pub async fn agent(&self, session_id: &str, agent_id: &str) -> Result<Agent, ApprovalError> {
        let session = self.session(session_id).await?;
        Ok(Agent::new(agent_id.to_owned(), session, None))
    }

    /// Starts a delegated subagent of `parent` in a new session. The session is seeded with
    /// `approval/policy {policy: "never", source: "delegation"}` before the child can ask, so its
    /// asks are rejected before any answerer until a later switch inside the child.
    pub async fn subagent(
        &self,
        parent: &Agent,
        session_id: &str,
        agent_id: &str,
    ) -> Result<Agent, ApprovalError> {
        let session = self.session(session_id).await?;
        if !session.log.is_empty() {
            return Err(ApprovalError::SessionExists {
                session: session_id.to_owned(),
            });
        }
        session
            .log
            .append(Event::Policy(PolicySwitch {
                policy: Policy::Never,
                source: Some(policy::SOURCE_DELEGATION.to_owned()),
            }))
            .await?;
        Ok(Agent::new(
            agent_id.to_owned(),
            session,
            Some(parent.id().to_owned()),
        ))
    }

    /// Opens a turn on the session (`turn/start`).
    pub async fn start_turn(&self, session_id: &str) -> Result<(), ApprovalError> {
        let session = self.session(session_id).await?;
        session.log.append(Event::TurnStart).await?;
        session.opened_turn();
        Ok(())
    }

    /// Closes the session's turn (`turn/end`). Questions still in flight are cancelled first and
    /// settle `cancelled`, audited inside the turn.
    pub async fn end_turn(&self, session_id: &str) -> Result<(), ApprovalError> {
        let session = self.session(session_id).await?;
        if session.begin_close() {
            session.drained().await;
        }
        let result = session.log.append(Event::TurnEnd).await;
        session.closed_turn(result.is_ok());
        result?;
        Ok(())
    }

    /// Whether the session has an open turn.
    pub async fn turn_open(&self, session_id: &str) -> Result<bool, ApprovalError> {
        let session = self.session(session_id).await?;
        Ok(session.log.with_fold(|f| f.turn_open()))
    }

    /// Records a `tool/call` on the agent's session, so gates can read the call's arguments.
    pub async fn record_tool_call(
        &self,
        agent: &Agent,
        call_id: &str,
        name: &str,
        arguments: serde_json::Value,
    ) -> Result<(), ApprovalError> {
        agent
            .session()
            .log
            .append(Event::ToolCall(ToolCall {
                call_id: call_id.to_owned(),
                name: name.to_owned(),
                arguments,
            }))
            .await?;
        Ok(())
    }

    /// The JSON arguments of the session's recorded `tool/call` with this call id.
    pub fn call_arguments(&self, agent: &Agent, call_id: &str) -> Option<serde_json::Value> {
        agent.call_arguments(call_id)
    }

    /// The agent's effective policy: its session's last switch, else the deployment default.
    pub fn effective_policy(&self, agent: &Agent) -> Policy {
        let default = self.default_policy();
        agent
            .session()
            .log
            .with_fold(|f| f.effective_policy(default))
    }

    /// Switches the agent's session to `policy`. Appends `approval/policy` and queues the change
    /// notice for the agent only when the effective value changes; returns whether it did.
    pub async fn set_policy(
        &self,
        agent: &Agent,
        policy: Policy,
        source: Option<&str>,
    ) -> Result<bool, ApprovalError> {
        let session = agent.session();
        let _serial = session.policy_lock.lock().await;
        let current = self.effective_policy(agent);
        if current == policy {
            return Ok(false);
        }
        session
            .log
            .append(Event::Policy(PolicySwitch {
                policy,
                source: source.map(str::to_owned),
            }))
            .await?;
        agent.queue_notice(policy::change_notice(current, policy, source));
        Ok(true)
    }

    /// The runtime-context sentences for the agent: its effective policy's sentence and, for a
    /// subagent whose delegation pin still stands, the subagent sentence. Byte-stable while
    /// nothing changes.
    pub fn runtime_context(&self, agent: &Agent) -> Vec<&'static str> {
        let default = self.default_policy();
        let (effective, pinned) = agent.session().log.with_fold(|f| {
            let pinned = f
                .policy_override()
                .is_some_and(|p| p.source.as_deref() == Some(policy::SOURCE_DELEGATION));
            (f.effective_policy(default), pinned)
        });
        let mut sentences = vec![effective.context_sentence()];
        if agent.is_subagent() && pinned {
            sentences.push(policy::SUBAGENT_CONTEXT);
        }
        sentences
    }

    /// Asks whether `request`'s call may proceed.
    ///
    /// # Errors
    /// [`ApprovalError::NoOpenTurn`] when the session has no open turn (nothing is appended);
    /// [`ApprovalError::Log`] when an audit append fails: before the decision nothing is decided,
    /// after it the decision is withheld, so no outcome is ever returned unaudited.
    pub async fn request(&self, request: ApprovalRequest) -> Result<Outcome, ApprovalError> {
        let session = request.agent.session().clone();
        let in_flight = session.enter()?;
        let ask_cancel = in_flight.turn.child_token();
        // If the caller stops waiting, the question is cancelled but still settled and audited.
        let abandon = ask_cancel.clone().drop_guard();
        let service = self.clone();
        let task = tokio::spawn(async move {
            service
                .run_request(session, in_flight, request, ask_cancel)
                .await
        });
        let result = task.await;
        abandon.disarm();
        result.map_err(|e| ApprovalError::Internal(e.to_string()))?
    }

    async fn run_request(
        &self,
        session: Arc<Session>,
        in_flight: InFlight,
        request: ApprovalRequest,
        ask_cancel: CancellationToken,
    ) -> Result<Outcome, ApprovalError> {
        let ApprovalRequest {
            agent,
            tool_name,
            call_id,
            reason,
            cancel,
        } = request;
        let id = Uuid::new_v4().to_string();
        session
            .log
            .append(Event::Asked(Asked {
                id: id.clone(),
                tool_name: tool_name.clone(),
                call_id: call_id.clone(),
                reason: reason.clone(),
            }))
            .await
            .map_err(|e| match e {
                LogError::Refused {
                    violation: Violation::OutsideTurn(_),
                    ..
                } => ApprovalError::NoOpenTurn {
                    session: session.id().to_owned(),
                },
                other => other.into(),
            })?;

        let caller_cancelled = cancel.as_ref().is_some_and(|t| t.is_cancelled());
        let settled = if caller_cancelled || ask_cancel.is_cancelled() {
            Settled::plain(Outcome::Cancelled)
        } else if self.effective_policy(&agent) == Policy::Never {
            Settled::plain(Outcome::Rejected)
        } else {
            let question = Question::new(
                id.clone(),
                agent,
                tool_name,
                call_id,
                reason,
                ask_cancel.clone(),
                cancel.clone(),
            );
            let caller = match &cancel {
                Some(token) => Either::Left(token.cancelled()),
                None => Either::Right(futures_util::future::pending()),
            };
            let waterfall = self.inner.waterfall.clone();
            tokio::select! {
                biased;
                () = ask_cancel.cancelled() => Settled::plain(Outcome::Cancelled),
                () = caller => {
                    ask_cancel.cancel();
                    Settled::plain(Outcome::Cancelled)
                }
                // Losing the race drops the waterfall future: a late answer is discarded. A
                // listener that blocked through the cancellation also answers late.
                settled = waterfall.run(&question) => if question.is_cancelled() {
                    Settled::plain(Outcome::Cancelled)
                } else {
                    settled
                },
            }
        };

        let (failure, answerer) = match settled.failure {
            Some((plugin, f)) => (
                Some(FailureRecord {
                    plugin: Some(plugin),
                    kind: f.kind,
                }),
                None,
            ),
            None => (None, settled.answerer),
        };
        session
            .log
            .append(Event::Decided(Decided {
                id,
                outcome: settled.outcome,
                answerer,
                digest: settled.version,
                failure,
            }))
            .await?;
        drop(in_flight);
        Ok(settled.outcome)
    }
}

/// Settles questions a previous process left open when it died: the asker is gone, nothing was
/// granted, and the log must pair every `approval/asked`.
async fn settle_interrupted(log: &SessionLog) -> Result<(), LogError> {
    for q in log.with_fold(|f| f.open_questions()) {
        tracing::warn!(log = log.name(), question = %q.id, "settling a question left open by an interrupted run as unavailable");
        log.append(Event::Decided(Decided {
            id: q.id,
            outcome: Outcome::Unavailable,
            answerer: None,
            digest: None,
            failure: Some(FailureRecord {
                plugin: None,
                kind: FailureKind::Interrupted,
            }),
        }))
        .await?;
    }
    Ok(())
}
