//! The approval service: the seam every asker calls and every answerer plugs into.
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
use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::task::Poll;

use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::agent::Agent;
use crate::answer::{Authority, RuleScope};
use crate::audit::checkpoint::{self, Checkpointer};
use crate::audit::error::LogError;
use crate::event::{
    Asked, Decided, Event, FailureRecord, PolicySwitch, RuleRevoked, SandboxSwitch, ToolCall,
};
use crate::fold::Violation;
use crate::log::{SessionLog, Ticket};
use crate::outcome::{FailureKind, Outcome};
use crate::policy::{self, Policy};
use crate::rules::protect::{Guard, Protected};
use crate::rules::{self, NewRule, RuleBook, RuleError, RuleGate, RuleView};
use crate::session::{InFlight, Released, Session};
use crate::store::{DirStore, Store, validate_session_id};
use crate::subscribe::{Subscriber, Subscribers, Subscription};
use crate::waterfall::{Listener, Position, Question, Registration, Scope, Settled, Waterfall};

mod error;

pub use error::ApprovalError;

/// One approval question, as an asker poses it. Carries no tool arguments.
#[derive(Debug, Clone)]
pub struct ApprovalRequest {
    agent: Agent,
    tool_name: String,
    call_id: Option<String>,
    reason: Option<String>,
    cwd: Option<String>,
    cancel: Option<CancellationToken>,
}

/// How a request settled, with what the deciding listener said: what an asker needs to write the
/// text a model reads ([`crate::tools::texts::refusal`]).
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
            cancel: None,
        }
    }

    /// The asker's working directory (plugins of API 0.2 see it).
    pub fn cwd(mut self, cwd: impl Into<String>) -> Self {
        self.cwd = Some(cwd.into());
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

    /// Checkpoints the session's durable head when one is due (`force`: at a turn's end). The
    /// write runs on a blocking thread; `wait` waits for it (a turn's end returns only once its
    /// checkpoint is durable, so the next turn never starts before it).
    async fn checkpoint(&self, session: &Arc<Session>, force: bool, wait: bool) {
        let Some(checkpointer) = self
            .inner
            .checkpointer
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
        else {
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
        if id.starts_with(rules::LOG_PREFIX) {
            return Err(LogError::InvalidSessionId {
                id: id.to_owned(),
                why: "the \"rules.\" prefix is reserved for the rules logs",
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
        let log = tokio::task::spawn_blocking(move || {
            // A log this process has just closed can still look locked for a moment: a child
            // process forked (for a hook, say) while the file was open holds a copy of its
            // descriptor, and the lock with it, until it execs. The directory store waits out
            // the usual moment itself (`store::LOCK_PATIENCE`); this covers a child slow to exec.
            let patience = std::time::Instant::now() + REOPEN_PATIENCE;
            loop {
                match SessionLog::open_observed(&*store, &owned, subscribers.clone()) {
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
        if let Some(book) = self.rules() {
            book.load_session(id, &log);
        }
        let released = Arc::new(Released::default());
        let session = Arc::new(Session::new(log, released.clone()));
        sessions.retain(|_, (weak, released)| weak.strong_count() > 0 || !released.is_done());
        sessions.insert(id.to_owned(), (Arc::downgrade(&session), released));
        Ok(session)
    }

    /// Enables standing rules from `book` (or, with `None`, turns them off): its gate joins the
    /// waterfall ahead of every plugin, and every session opened from now on has its session
    /// rules indexed.
    pub fn set_rules(&self, book: Option<Arc<RuleBook>>) {
        let next = book.map(|book| {
            book.set_checkpointer(
                self.inner
                    .checkpointer
                    .read()
                    .unwrap_or_else(|p| p.into_inner())
                    .clone(),
            );
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
    async fn accept_proposal(
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

    /// Asks whether `request`'s call may proceed.
    ///
    /// Runs on the caller's task: nothing is spawned and no thread is woken unless the store has
    /// to wait for the disk. Once the question is asked, dropping this future does not leave it
    /// open: it is settled `cancelled` and audited (see [`Unsettled`]).
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
        let ApprovalRequest {
            agent,
            tool_name,
            call_id,
            reason,
            cwd,
            cancel,
        } = request;
        let session = agent.session().clone();
        let in_flight = session.enter()?;
        let ask_cancel = in_flight.turn.child_token();
        let id = Uuid::new_v4().to_string();
        let asked = Event::Asked(Asked {
            id: id.clone(),
            tool_name: tool_name.clone(),
            call_id: call_id.clone(),
            reason: reason.clone(),
        });
        let (asked_seq, own_policy, written) =
            session.log.append_question(asked).map_err(|e| match e {
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

        let caller_cancelled = cancel.as_ref().is_some_and(|t| t.is_cancelled());
        let mut question = None;
        let settled = if caller_cancelled || ask_cancel.is_cancelled() {
            Settled::plain(Outcome::Cancelled)
        } else if own_policy.unwrap_or_else(|| self.default_policy()) == Policy::Never {
            Settled::plain(Outcome::Rejected)
        } else {
            let asked = question.insert(Question::new(
                id,
                asked_seq,
                agent,
                tool_name,
                call_id,
                reason,
                cwd,
                ask_cancel.clone(),
                cancel.clone(),
            ));
            decide(&self.inner.waterfall, asked, &ask_cancel, cancel.as_ref()).await
        };
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
        let ticket = unsettled.settle(record)?;
        // The outcome is withheld until its decision is durable.
        ticket.wait().await?;
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
        id: String::new(),
        outcome: settled.outcome,
        answerer,
        digest: settled.version,
        failure,
        reason: settled.reason,
        proposal: settled.proposal,
        rule_added: None,
        rule_declined: None,
        rule: settled.rule,
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
        let decided = Event::Decided(Decided {
            id,
            outcome: Outcome::Cancelled,
            answerer: None,
            digest: None,
            failure: None,
            reason: None,
            proposal: None,
            rule_added: None,
            rule_declined: None,
            rule: None,
        });
        // Nobody waits for this commit; the commit threads complete it.
        if let Err(e) = self.session.log.submit(decided, true) {
            tracing::error!(session = self.session.id(), error = %e, "could not settle a question whose caller stopped waiting");
        }
        self.in_flight.take();
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
            reason: None,
            proposal: None,
            rule_added: None,
            rule_declined: None,
            rule: None,
        }))
        .await?;
    }
    Ok(())
}
