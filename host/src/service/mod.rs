//! The approval service: the seam every asker calls and every answerer plugs into. This file
//! holds the service itself: its sessions (opened, reopened, resumed), turns, agents and
//! subagents, policy and sandbox switches, subscriptions and checkpoints. A question's way
//! through the seam is in `request`, standing rules and built-in protections on the service in
//! `standing`, its errors in `error`, how a dry run rebuilds a recorded session in `feed`, what
//! counts and traces settled questions in `observe`, a caller's trace in `traceparent`.
//!
//! [`ApprovalService::request`] does, in this order: refuse with an error when the session has no
//! open turn, appending nothing; append `approval/asked` with a fresh UUID; decide (an
//! already-cancelled request settles `cancelled`, then policy `never` settles `rejected` before any
//! listener, then the waterfall runs); append `approval/decided` exactly once; return the outcome.
//!
//! The body runs on the caller's task (no spawn, no thread hand-off unless the disk must be
//! waited for); a caller that drops the request future cancels the question, which is still
//! settled and audited, instead of leaving an unmatched `approval/asked` behind.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

use crate::agent::Agent;
use crate::audit::checkpoint::{self, Checkpointer};
use crate::audit::error::LogError;
use crate::audit::event::{
    Decided, Event, FailureRecord, PolicySwitch, SandboxSwitch, ToolCall, TurnEndBy, TurnEndSource,
};
use crate::audit::log::SessionLog;
use crate::audit::redact::{Redaction, RedactionCell};
use crate::audit::store::{DirStore, Store, validate_session_id};
use crate::audit::subscribe::{Subscriber, Subscribers, Subscription};
use crate::outcome::{FailureKind, Outcome};
use crate::policy::{self, Policy};
use crate::rules::RuleBook;
use crate::rules::protect::Protected;
use crate::session::{Released, Session};
use crate::waterfall::{AfterDecision, Listener, Position, Registration, Scope, Waterfall};

mod error;
mod feed;
mod ledger;
pub mod observe;
mod request;
mod settled;
mod standing;
mod traceparent;

pub use error::ApprovalError;
pub use ledger::Ledger;
pub use request::{ApprovalRequest, Verdict};
pub use traceparent::{BadTraceParent, TraceParent};

/// How long reopening a session this process has just closed waits out a lock still held by a
/// forked child that has not exec'd yet.
const REOPEN_PATIENCE: std::time::Duration = std::time::Duration::from_secs(2);

/// An open session (while a handle lives) and whether its log is closed (after the last one).
type SessionSlot = (Weak<Session>, Arc<Released>);

struct Inner {
    store: Arc<dyn Store>,
    never_by_default: AtomicBool,
    sessions: tokio::sync::Mutex<HashMap<String, SessionSlot>>,
    waterfall: Waterfall,
    subscribers: Arc<Subscribers>,
    checkpointer: std::sync::RwLock<Option<Arc<Checkpointer>>>,
    /// The standing rules and the registration of their gate, when enabled.
    rules: std::sync::RwLock<Option<(Arc<RuleBook>, Registration)>>,
    /// The built-in protections and the registration of their guard, when set.
    protected: std::sync::RwLock<Option<(Arc<Protected>, Registration)>>,
    /// `[audit] redact`, shared with every log this service opens.
    redaction: RedactionCell,
    /// What sees each question after its decision (the shadow plugins), when set.
    after: std::sync::RwLock<Option<Arc<dyn AfterDecision>>>,
    /// What counts every settled question (the metrics), when set.
    observer: std::sync::RwLock<Option<Arc<dyn observe::DecisionObserver>>>,
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
                subscribers: Arc::default(),
                redaction: RedactionCell::default(),
                after: std::sync::RwLock::new(None),
                observer: std::sync::RwLock::new(None),
                checkpointer: std::sync::RwLock::new(None),
                rules: std::sync::RwLock::new(None),
                protected: std::sync::RwLock::new(None),
            }),
        }
    }

    /// A service over the embedded default store, session files under `state_dir/sessions`.
    pub fn open_dir(state_dir: impl Into<PathBuf>, default_policy: Policy) -> Self {
        Self::new(DirStore::new(state_dir), default_policy)
    }

    /// The store its logs live in (rules logs are opened from it too).
    pub fn store(&self) -> Arc<dyn Store> {
        self.inner.store.clone()
    }

    /// The deployment default policy.
    pub fn default_policy(&self) -> Policy {
        if self.inner.never_by_default.load(Ordering::Acquire) {
            Policy::Never
        } else {
            Policy::Ask
        }
    }

    /// What `tool/call` arguments no log may hold (`[audit] redact`): applies at once to every
    /// log, open or opened later.
    pub fn set_redaction(&self, redaction: Redaction) {
        *self
            .inner
            .redaction
            .write()
            .unwrap_or_else(|p| p.into_inner()) = Arc::new(redaction);
    }

    /// Sets (or with `None`, clears) what sees each question after its decision is durable, off
    /// the decision's path: the shadow plugins.
    pub fn set_after_decision(&self, after: Option<Arc<dyn AfterDecision>>) {
        *self.inner.after.write().unwrap_or_else(|p| p.into_inner()) = after;
    }

    /// Sets (or with `None`, clears) what counts every settled question: see
    /// [`observe::DecisionObserver`].
    pub fn set_observer(&self, observer: Option<Arc<dyn observe::DecisionObserver>>) {
        *self
            .inner
            .observer
            .write()
            .unwrap_or_else(|p| p.into_inner()) = observer;
    }

    /// Adds `observer` beside any already set: both see every settled question.
    pub fn add_observer(&self, observer: Arc<dyn observe::DecisionObserver>) {
        let mut slot = self
            .inner
            .observer
            .write()
            .unwrap_or_else(|p| p.into_inner());
        *slot = Some(match slot.take() {
            Some(existing) => Arc::new(observe::Fanout(vec![existing, observer])),
            None => observer,
        });
    }

    pub(super) fn observer(&self) -> Option<Arc<dyn observe::DecisionObserver>> {
        self.inner
            .observer
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub(super) fn after_decision(&self) -> Option<Arc<dyn AfterDecision>> {
        self.inner
            .after
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Changes the deployment default; sessions with their own switch keep it.
    pub fn set_default_policy(&self, policy: Policy) {
        self.inner
            .never_by_default
            .store(policy == Policy::Never, Ordering::Release);
    }

    /// Signs checkpoints of every session's log with this checkpointer from now on: at every
    /// `turn/end`, and every [`checkpoint::EVERY_RECORDS`] records or [`checkpoint::EVERY`] while
    /// a turn is open; and the rules logs of its rule book after every rule added or revoked.
    /// `None` stops it.
    pub fn set_checkpointer(&self, checkpointer: Option<Arc<Checkpointer>>) {
        if let Some((book, _)) = &*self.inner.rules.read().unwrap_or_else(|p| p.into_inner()) {
            book.set_checkpointer(checkpointer.clone());
        }
        *self
            .inner
            .checkpointer
            .write()
            .unwrap_or_else(|p| p.into_inner()) = checkpointer;
    }

    /// The checkpointer signing this service's logs now, if any.
    fn checkpointer(&self) -> Option<Arc<Checkpointer>> {
        self.inner
            .checkpointer
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Checkpoints the session's durable head when one is due (`force`: at a turn's end). The
    /// write runs on a blocking thread; `wait` waits for it (a turn's end returns only once its
    /// checkpoint is durable, so the next turn never starts before it).
    async fn checkpoint(&self, session: &Arc<Session>, force: bool, wait: bool) {
        let Some(checkpointer) = self.checkpointer() else {
            return;
        };
        let (seq, head) = session.log.durable_point();
        {
            let mut last = session
                .checkpointed
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            let due = seq > last.0
                && (force
                    || seq - last.0 >= checkpoint::EVERY_RECORDS
                    || last.1.elapsed() >= checkpoint::EVERY);
            if !due {
                return;
            }
            *last = (seq, std::time::Instant::now());
        }
        let id = session.id().to_owned();
        let write = tokio::task::spawn_blocking(move || {
            if let Err(e) = checkpointer.write(&id, seq, &head) {
                tracing::error!(session = %id, seq, error = %e, "could not write a checkpoint");
            }
        });
        if wait {
            let _ = write.await;
        }
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

    /// Subscribes `subscriber` to the events appended to session `session_id` from now on, each
    /// delivered once durable, in order. A subscriber that errors or panics is reported once as a
    /// warning naming it and dropped; it never affects the appends or any outcome.
    pub fn subscribe(
        &self,
        session_id: &str,
        name: impl Into<String>,
        subscriber: impl Subscriber,
    ) -> Subscription {
        self.inner.subscribers.add(
            name.into(),
            Some(session_id.to_owned()),
            Arc::new(subscriber),
        )
    }

    /// Like [`ApprovalService::subscribe`], for the events of every session.
    pub fn subscribe_all(
        &self,
        name: impl Into<String>,
        subscriber: impl Subscriber,
    ) -> Subscription {
        self.inner
            .subscribers
            .add(name.into(), None, Arc::new(subscriber))
    }

    async fn session(&self, id: &str) -> Result<Arc<Session>, ApprovalError> {
        validate_session_id(id)?;
        if crate::audit::store::is_ledger(id) {
            return Err(LogError::InvalidSessionId {
                id: id.to_owned(),
                why: "the \"rules.\" and \"pins.\" prefixes are reserved for the rules and pins logs",
            }
            .into());
        }
        let mut sessions = self.inner.sessions.lock().await;
        let reopening = if let Some((weak, released)) = sessions.get(id) {
            if let Some(session) = weak.upgrade() {
                return Ok(session);
            }
            // Its last handle is being dropped, maybe on another thread: wait for the log to
            // close, or reopening would find the file still locked.
            released.clone().wait().await;
            true
        } else {
            false
        };
        let store = self.inner.store.clone();
        let owned = id.to_owned();
        let subscribers = self.inner.subscribers.clone();
        let redaction = self.inner.redaction.clone();
        let log = tokio::task::spawn_blocking(move || {
            // A log this process has just closed can still look locked for a moment: a child
            // process forked (for a hook, say) while the file was open holds a copy of its
            // descriptor, and the lock with it, until it execs. The directory store waits out
            // the usual moment itself (`store::LOCK_PATIENCE`); this covers a child slow to exec.
            let patience = std::time::Instant::now() + REOPEN_PATIENCE;
            loop {
                match SessionLog::open_observed(
                    &*store,
                    &owned,
                    subscribers.clone(),
                    redaction.clone(),
                ) {
                    Err(LogError::Locked { .. })
                        if reopening && std::time::Instant::now() < patience =>
                    {
                        std::thread::sleep(std::time::Duration::from_millis(2));
                    }
                    other => return other,
                }
            }
        })
        .await
        .map_err(|e| ApprovalError::Internal(e.to_string()))??;
        settle_interrupted(&log).await?;
        end_taken_over_turn(&log).await?;
        if let Some(book) = self.rules() {
            book.load_session(id, &log);
        }
        let released = Arc::new(Released::default());
        let session = Arc::new(Session::new(log, released.clone()));
        sessions.retain(|_, (weak, released)| weak.strong_count() > 0 || !released.is_done());
        sessions.insert(id.to_owned(), (Arc::downgrade(&session), released));
        Ok(session)
    }

    /// The sessions open in this service (an agent or a request holds them), each with the ids
    /// of the agents handed out for it.
    pub async fn open_sessions(&self) -> HashMap<String, Vec<String>> {
        let sessions = self.inner.sessions.lock().await;
        sessions
            .iter()
            .filter_map(|(id, (weak, _))| {
                let session = weak.upgrade()?;
                let agents = session
                    .agents
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .clone();
                Some((id.clone(), agents))
            })
            .collect()
    }

    /// A new handle for agent `agent_id` of session `session_id`, opening (or creating) the
    /// session's log. Each call returns a distinct agent identity.
    pub async fn agent(&self, session_id: &str, agent_id: &str) -> Result<Agent, ApprovalError> {
        let session = self.session(session_id).await?;
        Ok(Agent::new(agent_id.to_owned(), session, None))
    }

    /// Starts a delegated subagent of `parent` in a new session, never wider than the parent.
    ///
    /// The parent's state is taken when this is called, not when the future first runs, so a
    /// switch made by the parent in between never reaches the child. Before the child can act its
    /// session is seeded, in this order: `sandbox/mode {mode, source: "delegation"}` with the
    /// parent's own sandbox override (none when the parent runs at the deployment default), then
    /// `approval/policy {policy: "never", source: "delegation"}`, so the child's asks are rejected
    /// before any answerer until a later switch inside the child. The parent's own approval policy
    /// does not matter: the child is pinned to `never` regardless.
    ///
    /// A session that already opens with a delegation seed is resumed as it stands (the seed is
    /// replayed, never written again); any other non-empty session is refused.
    pub fn subagent(
        &self,
        parent: &Agent,
        session_id: &str,
        agent_id: &str,
    ) -> impl Future<Output = Result<Agent, ApprovalError>> + Send + 'static {
        let sandbox = parent
            .session()
            .log
            .with_fold(|f| f.sandbox_override().map(|s| s.mode));
        let parent_id = parent.id().to_owned();
        let service = self.clone();
        let session_id = session_id.to_owned();
        let agent_id = agent_id.to_owned();
        async move {
            let session = service.session(&session_id).await?;
            let _serial = session.policy_lock.lock().await;
            if !session.log.is_empty() {
                if session.log.with_fold(|f| f.delegated()) {
                    return Ok(Agent::new(agent_id, session.clone(), Some(parent_id)));
                }
                return Err(ApprovalError::SessionExists {
                    session: session_id,
                });
            }
            if let Some(mode) = sandbox {
                session
                    .log
                    .append(Event::Sandbox(SandboxSwitch {
                        mode,
                        source: Some(policy::SOURCE_DELEGATION.to_owned()),
                    }))
                    .await?;
            }
            session
                .log
                .append(Event::Policy(PolicySwitch {
                    policy: Policy::Never,
                    source: Some(policy::SOURCE_DELEGATION.to_owned()),
                }))
                .await?;
            Ok(Agent::new(agent_id, session.clone(), Some(parent_id)))
        }
    }

    /// Opens a turn on the session (`turn/start`).
    pub async fn start_turn(&self, session_id: &str) -> Result<(), ApprovalError> {
        let session = self.session(session_id).await?;
        session.log.append(Event::TurnStart).await?;
        session.opened_turn();
        Ok(())
    }

    /// [`ApprovalService::start_turn`] without waiting for the disk: the `turn/start` is written
    /// and becomes durable with the next commit, normally the decision of the question asked
    /// inside the turn (an asker that answers only after that decision, like the Claude Code
    /// hook, saves a sync per call).
    ///
    /// # Errors
    /// As [`ApprovalService::start_turn`].
    pub async fn start_turn_unsynced(&self, session_id: &str) -> Result<(), ApprovalError> {
        let session = self.session(session_id).await?;
        let (_, ticket) = session.log.submit(Event::TurnStart, false)?;
        // Not waited for: the next durable record commits it too.
        drop(ticket);
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
        self.checkpoint(&session, true, true).await;
        Ok(())
    }

    /// Ends the session's turn if one is open (one a client left open, or an interrupted run
    /// did); whether there was one.
    pub async fn end_turn_if_open(&self, session_id: &str) -> Result<bool, ApprovalError> {
        if !self.turn_open(session_id).await? {
            return Ok(false);
        }
        self.end_turn(session_id).await?;
        Ok(true)
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
        self.record_tool_call_in_mode(agent, call_id, name, arguments, None, true)
            .await
    }

    /// [`ApprovalService::record_tool_call`], also recording the harness's permission mode; with
    /// `synced` false it does not wait for the disk (the record becomes durable with the next
    /// commit, normally the decision about the call).
    ///
    /// # Errors
    /// As [`ApprovalService::record_tool_call`].
    pub async fn record_tool_call_in_mode(
        &self,
        agent: &Agent,
        call_id: &str,
        name: &str,
        arguments: serde_json::Value,
        permission_mode: Option<&str>,
        synced: bool,
    ) -> Result<(), ApprovalError> {
        let event = Event::ToolCall(ToolCall {
            call_id: call_id.to_owned(),
            name: name.to_owned(),
            arguments,
            permission_mode: permission_mode.map(str::to_owned),
            redacted: Vec::new(),
        });
        let log = &agent.session().log;
        if synced {
            log.append(event).await?;
        } else {
            let (_, ticket) = log.submit(event, false)?;
            drop(ticket);
        }
        Ok(())
    }

    /// Records what the MCP gateway did with a message it did not ask about (`mcp/message`),
    /// durably: a refusal the log does not hold did not happen as far as an auditor can tell.
    ///
    /// # Errors
    /// The session log could not be written.
    pub async fn record_mcp_message(
        &self,
        agent: &Agent,
        message: crate::audit::event::McpMessage,
    ) -> Result<(), ApprovalError> {
        agent
            .session()
            .log
            .append(Event::McpMessage(message))
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

    /// The session's own policy switch (`approval/policy`, with its source), or `None` when the
    /// session never switched and runs at the deployment default; see
    /// [`ApprovalService::effective_policy`] for the value in force.
    pub async fn override_of(
        &self,
        session_id: &str,
    ) -> Result<Option<PolicySwitch>, ApprovalError> {
        let session = self.session(session_id).await?;
        Ok(session.log.with_fold(|f| f.policy_override().cloned()))
    }

    /// The runtime-context sentences for the agent, in this order: its effective policy's
    /// sentence; its session's own sandbox mode, when it has one (set for the session, or
    /// inherited at delegation); and, for a subagent whose delegation pin still stands, the
    /// subagent sentence. Byte-stable while nothing changes.
    pub fn runtime_context(&self, agent: &Agent) -> Vec<&'static str> {
        let default = self.default_policy();
        let (effective, pinned, sandbox) = agent.session().log.with_fold(|f| {
            let pinned = f
                .policy_override()
                .is_some_and(|p| p.source.as_deref() == Some(policy::SOURCE_DELEGATION));
            let sandbox = f.sandbox_override().map(|s| {
                let inherited = s.source.as_deref() == Some(policy::SOURCE_DELEGATION);
                policy::sandbox_context(s.mode, inherited)
            });
            (f.effective_policy(default), pinned, sandbox)
        });
        let mut sentences = vec![effective.context_sentence()];
        sentences.extend(sandbox);
        if agent.is_subagent() && pinned {
            sentences.push(policy::SUBAGENT_CONTEXT);
        }
        sentences
    }
}

/// Settles questions a previous process left open when it died: the asker is gone, nothing was
/// granted, and the log must pair every `approval/asked`.
async fn settle_interrupted(log: &SessionLog) -> Result<(), LogError> {
    for q in log.with_fold(|f| f.open_questions()) {
        tracing::warn!(log = log.name(), question = %q.id, "settling a question left open by an interrupted run as unavailable");
        log.append(Event::Decided(Decided {
            failure: Some(FailureRecord {
                plugin: None,
                kind: FailureKind::Interrupted,
            }),
            ..Decided::bare(q.id, Outcome::Unavailable)
        }))
        .await?;
    }
    Ok(())
}

/// Ends the turn a host that stopped answering left open, once its questions are settled: the
/// turn cannot go on here, and a client that reconnects starts a new one.
async fn end_taken_over_turn(log: &SessionLog) -> Result<(), LogError> {
    if let Some(from) = log.taken_over()
        && log.with_fold(|f| f.turn_open())
    {
        tracing::warn!(
            log = log.name(),
            from,
            "ending the turn of a session taken over"
        );
        log.append(Event::TurnEndBy(TurnEndBy {
            source: TurnEndSource::Takeover,
        }))
        .await?;
    }
    Ok(())
}

impl AsRef<Waterfall> for ApprovalService {
    /// The service's waterfall, for what mounts listeners on it.
    fn as_ref(&self) -> &Waterfall {
        &self.inner.waterfall
    }
}
