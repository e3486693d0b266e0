//! The asking agent: a handle whose identity is the exact object, not its ids.
//!
//! Two handles made separately for the same session and agent id are different agents: a
//! listener scoped to one never sees the other's requests. Clones of one handle are the same agent.

use std::fmt;
use std::sync::{Arc, Mutex};

use crate::session::Session;

pub(crate) struct AgentInner {
    pub(crate) id: String,
    pub(crate) session: Arc<Session>,
    pub(crate) parent: Option<String>,
    notices: Mutex<Vec<String>>,
}

/// An agent of one session. Made by [`crate::service::ApprovalService::agent`] or
/// [`crate::service::ApprovalService::subagent`]; clone it to share the same identity.
#[derive(Clone)]
pub struct Agent {
    pub(crate) inner: Arc<AgentInner>,
}

impl Agent {
    pub(crate) fn new(id: String, session: Arc<Session>, parent: Option<String>) -> Self {
        {
            let mut agents = session.agents.lock().unwrap_or_else(|p| p.into_inner());
            if !agents.contains(&id) {
                agents.push(id.clone());
            }
        }
        Agent {
            inner: Arc::new(AgentInner {
                id,
                session,
                parent,
                notices: Mutex::new(Vec::new()),
            }),
        }
    }

    /// The agent's id.
    pub fn id(&self) -> &str {
        &self.inner.id
    }

    /// The id of the session the agent belongs to.
    pub fn session_id(&self) -> &str {
        self.inner.session.id()
    }

    /// The delegating agent's id, for a subagent.
    pub fn parent_id(&self) -> Option<&str> {
        self.inner.parent.as_deref()
    }

    /// Whether this agent was started as a delegated subagent.
    pub fn is_subagent(&self) -> bool {
        self.inner.parent.is_some()
    }

    /// Whether `other` is this very agent (a clone of the same handle).
    pub fn same(&self, other: &Agent) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    pub(crate) fn session(&self) -> &Arc<Session> {
        &self.inner.session
    }

    /// The JSON arguments of the call `call_id` as this agent's session recorded them in its
    /// `tool/call` event, or `None`.
    pub fn call_arguments(&self, call_id: &str) -> Option<serde_json::Value> {
        self.inner
            .session
            .log
            .with_fold(|f| f.call_arguments(call_id))
    }

    pub(crate) fn queue_notice(&self, notice: String) {
        self.inner
            .notices
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(notice);
    }

    /// Takes the notices queued for this agent (such as a policy change), oldest first.
    pub fn take_notices(&self) -> Vec<String> {
        std::mem::take(&mut *self.inner.notices.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

impl fmt::Debug for Agent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Agent")
            .field("id", &self.inner.id)
            .field("session", &self.session_id())
            .field("parent", &self.inner.parent)
            .field("ptr", &Arc::as_ptr(&self.inner))
            .finish()
    }
}
