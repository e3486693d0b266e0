//! The waterfall of answerers: listeners asked in order until one decides.
//!
//! Gates go in front ([`Position::Front`]), terminal answerers at the back. Each listener decides
//! or says `next`; the first decision wins and later listeners never run; no listener, or every
//! listener delegating, settles `unavailable`. A listener that fails (returns an error, panics,
//! answers outside the vocabulary) settles the whole request `unavailable` and stops the
//! waterfall, so a broken gate can never let a permissive answerer behind it grant.
//!
//! Registering returns a [`Registration`]; dropping it removes the listener, so the next request
//! fails closed. A request already running keeps the listeners it started with.

use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::{Arc, RwLock, Weak};

use futures_util::FutureExt;
use tokio_util::sync::CancellationToken;

use crate::agent::{Agent, AgentInner};
use crate::answer::{Answer, Proposal};
use crate::outcome::{Decision, Failure, FailureKind, Outcome, panic_message};

/// An answer given at once ([`Listener::decide_now`]): the answering version, and the answer.
pub type ImmediateAnswer = (Option<Arc<str>>, Result<Answer, Failure>);

/// The future a listener returns.
pub type ListenerFuture = Pin<Box<dyn Future<Output = Result<Decision, Failure>> + Send>>;

/// The future of a listener that answers with a reason or a proposal ([`Listener::answer`]).
pub type AnswerFuture = Pin<Box<dyn Future<Output = Result<Answer, Failure>> + Send>>;

/// An answerer or gate. Implemented for any `Fn(Question) -> impl Future<Output =
/// Result<Decision, Failure>>`; wrap a closure answering `Result<Answer, Failure>` in
/// [`Explained`] to give a reason.
pub trait Listener: Send + Sync + 'static {
    /// Decides `question`, or says [`Decision::Next`].
    fn decide(&self, question: Question) -> ListenerFuture;

    /// Like [`Listener::decide`], also naming the version of the listener that will answer (a
    /// plugin's digest), for the audit. A listener whose version can change between calls takes
    /// its snapshot here.
    fn decide_versioned(&self, question: Question) -> (Option<Arc<str>>, ListenerFuture) {
        (None, self.decide(question))
    }

    /// Answers at once, on the asking task, when this listener can (a warm in-process plugin):
    /// the waterfall tries this first and skips the future. `None` (the default) means "ask me
    /// through [`Listener::decide_versioned`]". The answer carries the version, as there.
    fn decide_now(&self, _question: &Question) -> Option<ImmediateAnswer> {
        None
    }

    /// Answers with more than a decision (a reason, a proposed rule), when this listener can: the
    /// waterfall tries this after [`Listener::decide_now`] and before
    /// [`Listener::decide_versioned`]. `None` (the default) means "ask me for a bare decision".
    fn answer(&self, _question: &Question) -> Option<(Option<Arc<str>>, AnswerFuture)> {
        None
    }

    /// Whether this listener sends the question out of the process (to a person, an editor, a
    /// remote service). The waterfall makes the question's `approval/asked` record durable before
    /// asking such a listener, so nobody outside ever sees a question the log could lose. In-process
    /// gates (the default) decide before that sync, and the question and its decision are then
    /// made durable together.
    fn leaves_process(&self) -> bool {
        false
    }
}

impl<F, Fut> Listener for F
where
    F: Fn(Question) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Decision, Failure>> + Send + 'static,
{
    fn decide(&self, question: Question) -> ListenerFuture {
        Box::pin(self(question))
    }
}

/// A closure listener that answers with a full [`Answer`] (a reason, a proposal):
/// `Explained(|q| async { Ok(Answer::reject("not on Fridays")) })`.
pub struct Explained<F>(pub F);

impl<F, Fut> Listener for Explained<F>
where
    F: Fn(Question) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Answer, Failure>> + Send + 'static,
{
    fn decide(&self, question: Question) -> ListenerFuture {
        let future = (self.0)(question);
        Box::pin(async move { future.await.map(|a| a.decision) })
    }

    fn answer(&self, question: &Question) -> Option<(Option<Arc<str>>, AnswerFuture)> {
        Some((None, Box::pin((self.0)(question.clone()))))
    }
}

struct QuestionInner {
    id: String,
    /// The seq of its `approval/asked` record.
    asked_seq: u64,
    agent: Agent,
    tool_name: String,
    call_id: Option<String>,
    reason: Option<String>,
    cwd: Option<String>,
    cancel: CancellationToken,
    caller: Option<CancellationToken>,
    /// The asked-about call's arguments as JSON text, serialized once for every plugin that
    /// reads them.
    arguments_json: std::sync::OnceLock<Option<String>>,
    /// The session's sandbox mode as the first plugin that asked read it: every gate of one
    /// question sees the same mode, and the session's fold is locked once, not once a gate.
    sandbox_mode: std::sync::OnceLock<Option<&'static str>>,
    /// The listeners that said `next` before the question reached one outside the process
    /// (filled only then: a person may want to know which gates passed it on).
    passed: std::sync::Mutex<Vec<String>>,
}

/// What a listener is asked: the request's identity, without tool arguments. Cheap to clone.
#[derive(Clone)]
pub struct Question {
    inner: Arc<QuestionInner>,
}

impl Question {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        id: String,
        asked_seq: u64,
        agent: Agent,
        tool_name: String,
        call_id: Option<String>,
        reason: Option<String>,
        cwd: Option<String>,
        cancel: CancellationToken,
        caller: Option<CancellationToken>,
    ) -> Self {
        Question {
            inner: Arc::new(QuestionInner {
                id,
                asked_seq,
                agent,
                tool_name,
                call_id,
                reason,
                cwd,
                cancel,
                caller,
                arguments_json: std::sync::OnceLock::new(),
                sandbox_mode: std::sync::OnceLock::new(),
                passed: std::sync::Mutex::default(),
            }),
        }
    }

    /// The question id, as recorded in `approval/asked`.
    pub fn id(&self) -> &str {
        &self.inner.id
    }

    /// The asking agent.
    pub fn agent(&self) -> &Agent {
        &self.inner.agent
    }

    /// The asking agent's session id.
    pub fn session_id(&self) -> &str {
        self.inner.agent.session_id()
    }

    /// The tool the call is for.
    pub fn tool_name(&self) -> &str {
        &self.inner.tool_name
    }

    /// The exact call id, when the asker has one.
    pub fn call_id(&self) -> Option<&str> {
        self.inner.call_id.as_deref()
    }

    /// The asker's human-readable reason.
    pub fn reason(&self) -> Option<&str> {
        self.inner.reason.as_deref()
    }

    /// The asker's working directory, when it gave one.
    pub fn cwd(&self) -> Option<&str> {
        self.inner.cwd.as_deref()
    }

    /// The JSON arguments of the asked-about call, as the asking session recorded them on its
    /// `tool/call` event; `None` without a call id or a recorded call.
    pub fn arguments(&self) -> Option<serde_json::Value> {
        self.call_id().and_then(|id| self.call_arguments(id))
    }

    /// [`Question::arguments`] as JSON text, serialized on first use and shared by every listener
    /// that asks.
    pub fn arguments_json(&self) -> Option<&str> {
        self.inner
            .arguments_json
            .get_or_init(|| self.arguments().map(|v| v.to_string()))
            .as_deref()
    }

    /// The session's own sandbox mode (its last `sandbox/mode` event), read once per question.
    pub fn sandbox_mode(&self) -> Option<&'static str> {
        *self.inner.sandbox_mode.get_or_init(|| {
            self.inner
                .agent
                .session()
                .log
                .with_fold(|f| f.sandbox_override().map(|s| s.mode.as_str()))
        })
    }

    /// The JSON arguments of the call `call_id` as the asking session recorded them in its
    /// `tool/call` event, or `None`.
    pub fn call_arguments(&self, call_id: &str) -> Option<serde_json::Value> {
        self.inner.agent.call_arguments(call_id)
    }

    /// The listeners that said `next` before a listener that [leaves the
    /// process](Listener::leaves_process) got the question, in order; empty for a question that
    /// never reached one.
    pub fn passed(&self) -> Vec<String> {
        self.inner
            .passed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Waits until the question's `approval/asked` record is durable. The waterfall does this
    /// before asking a listener that [leaves the process](Listener::leaves_process); a listener
    /// that decides only later to send the question elsewhere calls it first.
    pub async fn ensure_durable(&self) -> Result<(), crate::audit::error::LogError> {
        self.inner
            .agent
            .session()
            .log
            .sync_to(self.inner.asked_seq)
            .wait()
            .await
    }

    /// Whether the question was cancelled (by the asker, by the caller leaving, or because its
    /// turn ended). Once it is, any answer is discarded. Cheap: a listener that blocks should
    /// check it.
    pub fn is_cancelled(&self) -> bool {
        self.inner.cancel.is_cancelled()
            || self.inner.caller.as_ref().is_some_and(|c| c.is_cancelled())
    }

    /// Completes when the question is cancelled.
    pub async fn cancelled(&self) {
        match &self.inner.caller {
            Some(caller) => {
                tokio::select! {
                    () = self.inner.cancel.cancelled() => {}
                    () = caller.cancelled() => {}
                }
            }
            None => self.inner.cancel.cancelled().await,
        }
    }
}

impl fmt::Debug for Question {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Question")
            .field("id", &self.inner.id)
            .field("agent", &self.inner.agent)
            .field("tool_name", &self.inner.tool_name)
            .field("call_id", &self.inner.call_id)
            .field("reason", &self.inner.reason)
            .finish()
    }
}

/// Which requests a listener sees.
#[derive(Debug, Clone)]
pub enum Scope {
    /// Every request.
    Global,
    /// Only requests from this exact agent object.
    Agent(Agent),
}

/// Where a listener joins the waterfall.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Position {
    /// Before every listener registered so far: for decide-or-delegate gates.
    Front,
    /// After every listener registered so far with `Front` or `Back`: for terminal answerers.
    Back,
    /// After everything, and kept behind `Back` listeners registered later: for fallback
    /// answerers such as a connected client.
    Last,
    /// Before everything, and kept ahead of `Front` listeners registered later: for the
    /// standing rules, which decide before any plugin.
    First,
    /// Before everything, even `First` listeners registered later: for the built-in
    /// protections, which no rule may get ahead of.
    Guard,
}

struct Entry {
    id: u64,
    last: bool,
    first: bool,
    guard: bool,
    name: String,
    scope: Option<Weak<AgentInner>>,
    listener: Arc<dyn Listener>,
}

impl Entry {
    fn sees(&self, agent: &Agent) -> bool {
        match &self.scope {
            None => true,
            // The Weak keeps the allocation, so the address is never reused while we compare.
            Some(weak) => std::ptr::eq(weak.as_ptr(), Arc::as_ptr(&agent.inner)),
        }
    }
}

#[derive(Default)]
struct Entries {
    next_id: u64,
    list: Vec<Arc<Entry>>,
}

/// The ordered listeners of one service.
#[derive(Clone, Default)]
pub struct Waterfall {
    entries: Arc<RwLock<Entries>>,
}

impl fmt::Debug for Waterfall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.names()).finish()
    }
}

/// A registered listener. Dropping it (or calling [`Registration::unregister`]) removes the
/// listener from the waterfall.
#[must_use = "dropping a Registration removes its listener at once"]
pub struct Registration {
    id: u64,
    name: String,
    entries: Weak<RwLock<Entries>>,
}

impl Registration {
    /// The listener's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Removes the listener now.
    pub fn unregister(self) {}
}

impl fmt::Debug for Registration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registration")
            .field("name", &self.name)
            .finish()
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Some(entries) = self.entries.upgrade() {
            let mut entries = entries.write().unwrap_or_else(|p| p.into_inner());
            entries.list.retain(|e| e.id != self.id);
        }
    }
}

/// How the waterfall settled one question.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settled {
    /// The outcome.
    pub outcome: Outcome,
    /// The listener that decided, if one did.
    pub answerer: Option<String>,
    /// The version (digest) of the listener that decided or failed, when it has one.
    pub version: Option<String>,
    /// The listener that failed and how, if one did.
    pub failure: Option<(String, Failure)>,
    /// Why, as the deciding listener said it ([cleaned](crate::answer::clean_reason)).
    pub reason: Option<String>,
    /// A standing rule the deciding listener proposed.
    pub proposal: Option<Proposal>,
    /// Whether the deciding listener [left the process](Listener::leaves_process): a person (or
    /// a remote service acting for one) answered, not an in-process gate.
    pub answered_outside: bool,
    /// The standing rule that decided, when one did (the answerer is then `rule:<id>`).
    pub rule: Option<crate::answer::RuleRef>,
    /// Who stands behind `proposal`, as the deciding listener said.
    pub authority: Option<crate::answer::Authority>,
}

impl Settled {
    /// Settled without any listener deciding.
    pub fn plain(outcome: Outcome) -> Self {
        Settled {
            outcome,
            answerer: None,
            version: None,
            failure: None,
            reason: None,
            proposal: None,
            answered_outside: false,
            rule: None,
            authority: None,
        }
    }

    /// Settled unavailable because `listener` failed.
    fn failed(listener: &str, version: Option<Arc<str>>, failure: Failure) -> Self {
        Settled {
            version: version.as_deref().map(str::to_owned),
            failure: Some((listener.to_owned(), failure)),
            ..Settled::plain(Outcome::Unavailable)
        }
    }
}

impl Waterfall {
    /// An empty waterfall.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `listener` under `name` at `position`, seeing the requests `scope` allows.
    pub fn register(
        &self,
        name: impl Into<String>,
        scope: Scope,
        position: Position,
        listener: impl Listener,
    ) -> Registration {
        self.register_arc(name, scope, position, Arc::new(listener))
    }

    /// [`Waterfall::register`] for a listener already behind an `Arc`.
    pub fn register_arc(
        &self,
        name: impl Into<String>,
        scope: Scope,
        position: Position,
        listener: Arc<dyn Listener>,
    ) -> Registration {
        let mut entries = self.entries.write().unwrap_or_else(|p| p.into_inner());
        self.insert(&mut entries, name.into(), scope, position, listener)
    }

    fn insert(
        &self,
        entries: &mut Entries,
        name: String,
        scope: Scope,
        position: Position,
        listener: Arc<dyn Listener>,
    ) -> Registration {
        entries.next_id += 1;
        let entry = Arc::new(Entry {
            id: entries.next_id,
            last: position == Position::Last,
            first: position == Position::First,
            guard: position == Position::Guard,
            name: name.clone(),
            scope: match scope {
                Scope::Global => None,
                Scope::Agent(agent) => Some(Arc::downgrade(&agent.inner)),
            },
            listener,
        });
        let id = entry.id;
        match position {
            Position::Guard => entries.list.insert(0, entry),
            Position::First => {
                let at = entries
                    .list
                    .iter()
                    .position(|e| !e.guard)
                    .unwrap_or(entries.list.len());
                entries.list.insert(at, entry);
            }
            Position::Front => {
                let at = entries
                    .list
                    .iter()
                    .position(|e| !e.first && !e.guard)
                    .unwrap_or(entries.list.len());
                entries.list.insert(at, entry);
            }
            Position::Back => {
                let at = entries
                    .list
                    .iter()
                    .position(|e| e.last)
                    .unwrap_or(entries.list.len());
                entries.list.insert(at, entry);
            }
            Position::Last => entries.list.push(entry),
        }
        Registration {
            id,
            name,
            entries: Arc::downgrade(&self.entries),
        }
    }

    /// Removes `remove` and adds `add` (in order) as one change: no request sees the waterfall
    /// between the two, so swapping a gate never leaves a moment without it.
    pub fn swap(
        &self,
        remove: Vec<Registration>,
        add: Vec<(String, Scope, Position, Arc<dyn Listener>)>,
    ) -> Vec<Registration> {
        let mut entries = self.entries.write().unwrap_or_else(|p| p.into_inner());
        let ids: Vec<u64> = remove.iter().map(|r| r.id).collect();
        entries.list.retain(|e| !ids.contains(&e.id));
        let added = add
            .into_iter()
            .map(|(name, scope, position, listener)| {
                self.insert(&mut entries, name, scope, position, listener)
            })
            .collect();
        drop(entries);
        // Their entries are gone already; dropping them now is a no-op.
        drop(remove);
        added
    }

    /// The registered listeners' names, in the order they are asked.
    pub fn names(&self) -> Vec<String> {
        let entries = self.entries.read().unwrap_or_else(|p| p.into_inner());
        entries.list.iter().map(|e| e.name.clone()).collect()
    }

    /// Asks the listeners that see `question`'s agent, in order, until one decides.
    pub async fn run(&self, question: &Question) -> Settled {
        let snapshot: Vec<Arc<Entry>> = {
            let entries = self.entries.read().unwrap_or_else(|p| p.into_inner());
            entries
                .list
                .iter()
                .filter(|e| e.sees(question.agent()))
                .cloned()
                .collect()
        };
        for (i, entry) in snapshot.iter().enumerate() {
            if entry.listener.leaves_process() {
                // Every listener before this one said `next` (any other answer returned).
                *question
                    .inner
                    .passed
                    .lock()
                    .unwrap_or_else(|p| p.into_inner()) =
                    snapshot[..i].iter().map(|e| e.name.clone()).collect();
            }
            if entry.listener.leaves_process()
                && let Err(e) = question.ensure_durable().await
            {
                tracing::error!(listener = %entry.name, question = question.id(), error = %e, "the question could not be made durable; it is not sent");
                return Settled::failed(&entry.name, None, Failure::error(e.to_string()));
            }
            // A panic may come from answering at once, from building the future or from polling
            // it; all are contained.
            let mut version = None;
            let answer = match std::panic::catch_unwind(AssertUnwindSafe(|| {
                entry.listener.decide_now(question)
            })) {
                Ok(Some((v, answer))) => {
                    version = v;
                    Ok(answer)
                }
                Ok(None) => match std::panic::catch_unwind(AssertUnwindSafe(|| {
                    entry.listener.answer(question)
                })) {
                    Ok(Some((v, future))) => {
                        version = v;
                        AssertUnwindSafe(future).catch_unwind().await
                    }
                    Ok(None) => match std::panic::catch_unwind(AssertUnwindSafe(|| {
                        entry.listener.decide_versioned(question.clone())
                    })) {
                        Ok((v, future)) => {
                            version = v;
                            AssertUnwindSafe(future)
                                .catch_unwind()
                                .await
                                .map(|r| r.map(Answer::from))
                        }
                        Err(payload) => Err(payload),
                    },
                    Err(payload) => Err(payload),
                },
                Err(payload) => Err(payload),
            };
            let failure = match answer {
                Ok(Ok(Answer {
                    decision: Decision::Next,
                    ..
                })) => continue,
                Ok(Ok(answer)) => {
                    let outcome = answer.decision.outcome().unwrap_or(Outcome::Unavailable);
                    let answerer = match (&answer.rule, &answer.by) {
                        (Some(rule), _) => format!("rule:{}", rule.id),
                        (None, Some(by)) => by.clone(),
                        (None, None) => entry.name.clone(),
                    };
                    return Settled {
                        outcome,
                        answerer: Some(answerer),
                        version: version.as_deref().map(str::to_owned),
                        failure: None,
                        // Native listeners build answers by hand: cleaned here, whoever made it.
                        reason: answer
                            .reason
                            .as_deref()
                            .and_then(crate::answer::clean_reason),
                        proposal: answer.proposal,
                        answered_outside: entry.listener.leaves_process(),
                        rule: answer.rule,
                        authority: answer.authority,
                    };
                }
                Ok(Err(failure)) => failure,
                Err(payload) => Failure::new(FailureKind::Panic, panic_message(&*payload)),
            };
            tracing::warn!(listener = %entry.name, question = question.id(), %failure, "listener failed; the request settles unavailable");
            return Settled::failed(&entry.name, version, failure);
        }
        Settled::plain(Outcome::Unavailable)
    }
}
