//! What a listener is asked: a [`Question`] (the request's identity, its arguments read once and
//! shared, its cancellation), cheap to clone.

use std::fmt;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::agent::Agent;

struct QuestionInner {
    id: String,
    /// The seq of its `approval/asked` record.
    asked_seq: u64,
    agent: Agent,
    tool_name: String,
    call_id: Option<String>,
    reason: Option<String>,
    cwd: Option<String>,
    undeclared: Vec<String>,
    cancel: CancellationToken,
    caller: Option<CancellationToken>,
    /// The asked-about call's arguments as JSON text, serialized once for every plugin that
    /// reads them.
    arguments_json: std::sync::OnceLock<Option<String>>,
    /// The session's own sandbox mode as the question recorded it: every gate of one question
    /// sees the same mode, the one its `approval/asked` says.
    sandbox_mode: Option<&'static str>,
    /// Set when a listener reads arguments, for an asker that wants to know.
    arguments_read: Option<Arc<std::sync::atomic::AtomicBool>>,
    /// The listeners that said `next` before the question reached one outside the process
    /// (filled only then: a person may want to know which gates passed it on).
    passed: std::sync::Mutex<Vec<String>>,
    /// Where the waterfall records each listener's turn, when the question is traced.
    hops: Option<super::hops::Hops>,
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
        undeclared: Vec<String>,
        sandbox_mode: Option<&'static str>,
        cancel: CancellationToken,
        caller: Option<CancellationToken>,
        arguments_read: Option<Arc<std::sync::atomic::AtomicBool>>,
        traced_from: Option<std::time::Instant>,
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
                undeclared,
                cancel,
                caller,
                arguments_json: std::sync::OnceLock::new(),
                sandbox_mode,
                arguments_read,
                passed: std::sync::Mutex::default(),
                hops: traced_from.map(super::hops::Hops::new),
            }),
        }
    }

    /// The same question for a listener that runs after it is settled (a shadow): the same
    /// identity, call and context, but cancelled by nothing, as its turn may end meanwhile.
    pub fn detached(&self) -> Question {
        let q = &self.inner;
        Question::new(
            q.id.clone(),
            q.asked_seq,
            q.agent.clone(),
            q.tool_name.clone(),
            q.call_id.clone(),
            q.reason.clone(),
            q.cwd.clone(),
            q.undeclared.clone(),
            q.sandbox_mode,
            CancellationToken::new(),
            None,
            None,
            None,
        )
    }

    /// How long the question's session log has had no new event.
    pub(crate) fn session_quiet_for(&self) -> std::time::Duration {
        self.inner.agent.session().log.quiet_for()
    }

    /// Appends `event` (an `approval/shadowed`) to the question's session log, once durable.
    pub(crate) async fn append_note(
        &self,
        event: crate::audit::event::Event,
    ) -> Result<(), crate::audit::error::LogError> {
        self.inner.agent.session().log.append(event).await.map(drop)
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

    /// The call's arguments its tool's input schema does not declare, when the asker knew the
    /// schema (an MCP tool).
    pub fn undeclared(&self) -> &[String] {
        &self.inner.undeclared
    }

    /// The JSON arguments of the asked-about call, as the asking session recorded them on its
    /// `tool/call` event; `None` without a call id or a recorded call.
    pub fn arguments(&self) -> Option<serde_json::Value> {
        self.call_id().and_then(|id| self.call_arguments(id))
    }

    /// [`Question::arguments`] as a person or a client may be shown them: with the values
    /// `[audit] redact` names replaced, as the log holds them.
    pub fn arguments_shown(&self) -> Option<serde_json::Value> {
        let arguments = self.arguments()?;
        Some(self.inner.agent.session().log.redacted(arguments))
    }

    /// [`Question::call_arguments`] with the values `[audit] redact` names replaced: what may
    /// leave the process.
    pub fn call_arguments_shown(&self, call_id: &str) -> Option<serde_json::Value> {
        let arguments = self.call_arguments(call_id)?;
        Some(self.inner.agent.session().log.redacted(arguments))
    }

    /// [`Question::arguments`] as JSON text, serialized on first use and shared by every listener
    /// that asks.
    pub fn arguments_json(&self) -> Option<&str> {
        self.inner
            .arguments_json
            .get_or_init(|| self.arguments().map(|v| v.to_string()))
            .as_deref()
    }

    /// The session's own sandbox mode (its last `sandbox/mode` event) when the question was
    /// asked, as its `approval/asked` records it.
    pub fn sandbox_mode(&self) -> Option<&'static str> {
        self.inner.sandbox_mode
    }

    /// The JSON arguments of the call `call_id` as the asking session recorded them in its
    /// `tool/call` event, or `None`.
    pub fn call_arguments(&self, call_id: &str) -> Option<serde_json::Value> {
        if let Some(flag) = &self.inner.arguments_read {
            flag.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        self.inner.agent.call_arguments(call_id)
    }

    /// The listeners that said `next` before a listener that [leaves the
    /// process](super::Listener::leaves_process) got the question, in order; empty for a question that
    /// never reached one.
    pub fn passed(&self) -> Vec<String> {
        self.inner
            .passed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Where the waterfall records each listener's turn, when the question is traced.
    pub(crate) fn hops(&self) -> Option<&super::hops::Hops> {
        self.inner.hops.as_ref()
    }

    /// Records the listeners that said `next` before one that leaves the process.
    pub(super) fn set_passed(&self, names: Vec<String>) {
        *self.inner.passed.lock().unwrap_or_else(|p| p.into_inner()) = names;
    }

    /// Waits until the question's `approval/asked` record is durable. The waterfall does this
    /// before asking a listener that [leaves the process](super::Listener::leaves_process); a listener
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
