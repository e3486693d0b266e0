//! The tool runtime: the seam's first asker.
//!
//! [`ToolRuntime::execute`] records the call, then in this order: a caller that already cancelled
//! gets `tool call aborted before dispatch` and nothing is asked; the arguments are checked
//! against the tool's JSON Schema; the `pre-execute` waterfall decides `allow`, `deny {reason}`
//! or `ask {reason?}` (default `allow`); an `ask` is routed through the approval service, and
//! every way it can fail to grant has its own text, so the model can tell a human "no" from a
//! dismissed prompt from a missing channel; guards run last and can still deny; then the body
//! runs. The result is recorded as `tool/result`.

pub mod bash;
pub mod hooks;
pub mod sandbox;
pub mod texts;

use std::collections::HashMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::{Arc, RwLock, Weak};

use futures_util::FutureExt;
use serde::Serialize;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::agent::{Agent, AgentInner};
use crate::audit::event::{Event, ToolCall as ToolCallEvent, ToolResult as ToolResultEvent};
use crate::outcome::Outcome;
use crate::outcome::panic_message;
use crate::service::{ApprovalRequest, ApprovalService};
use crate::waterfall::{Position, Scope};

/// One call of a tool.
#[derive(Debug, Clone)]
pub struct ToolCall {
    /// The exact call id.
    pub call_id: String,
    /// The tool's name.
    pub name: String,
    /// The JSON arguments.
    pub arguments: Value,
    /// The calling agent; a call without one cannot ask for approval.
    pub agent: Option<Agent>,
    /// The caller's cancellation.
    pub cancel: CancellationToken,
}

impl ToolCall {
    /// A call by `agent`.
    pub fn new(
        call_id: impl Into<String>,
        name: impl Into<String>,
        arguments: Value,
        agent: Option<&Agent>,
    ) -> Self {
        ToolCall {
            call_id: call_id.into(),
            name: name.into(),
            arguments,
            agent: agent.cloned(),
            cancel: CancellationToken::new(),
        }
    }

    /// With the caller's cancellation token.
    pub fn cancel(mut self, token: CancellationToken) -> Self {
        self.cancel = token;
        self
    }
}

/// `{name, code}` of a structured error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ErrorInfo {
    /// The error's class.
    pub name: &'static str,
    /// A stable code.
    pub code: &'static str,
}

/// The error of a failed call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ToolError {
    /// The message (without the `Error: ` prefix).
    pub message: String,
    /// Its class and code, when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub info: Option<ErrorInfo>,
}

/// What a call returns: `{content, is_error, error?}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ToolResult {
    /// What the model sees.
    pub content: String,
    /// Whether the call failed.
    pub is_error: bool,
    /// The failure, for callers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ToolError>,
    /// The `pre-execute` listener that failed and so refused the call. Its name goes to the
    /// tracing log and the `tool/result` audit, never into the text the model reads.
    #[serde(skip)]
    pub failed_listener: Option<String>,
}

/// A `pre-execute` listener that failed (answered an error or panicked).
struct ListenerFailure {
    listener: String,
    message: String,
}

impl ToolResult {
    /// A successful result.
    pub fn ok(content: impl Into<String>) -> Self {
        ToolResult {
            content: content.into(),
            is_error: false,
            error: None,
            failed_listener: None,
        }
    }

    /// A failed result: the model sees `Error: <message>`.
    pub fn error(message: impl Into<String>) -> Self {
        Self::error_with(message, None)
    }

    fn error_with(message: impl Into<String>, info: Option<ErrorInfo>) -> Self {
        let message = message.into();
        ToolResult {
            content: format!("{}{message}", texts::ERROR_PREFIX),
            is_error: true,
            error: Some(ToolError { message, info }),
            failed_listener: None,
        }
    }

    fn aborted() -> Self {
        Self::error_with(
            texts::ABORTED_BEFORE_DISPATCH,
            Some(ErrorInfo {
                name: "AbortError",
                code: texts::ABORTED_CODE,
            }),
        )
    }
}

/// What a tool body is given.
#[derive(Debug, Clone)]
pub struct ToolContext {
    /// The exact call id.
    pub call_id: String,
    /// The tool's name.
    pub name: String,
    /// The validated arguments.
    pub arguments: Value,
    /// The calling agent.
    pub agent: Option<Agent>,
    /// The caller's cancellation.
    pub cancel: CancellationToken,
    /// The approval service, when one is mounted (askers inside a tool use it).
    pub approval: Option<ApprovalService>,
}

/// The future a tool body returns: its content, or an error message.
pub type ToolFuture = Pin<Box<dyn Future<Output = Result<String, String>> + Send>>;

/// A tool's body. Implemented for `Fn(ToolContext) -> impl Future<Output = Result<String, String>>`.
pub trait ToolBody: Send + Sync + 'static {
    /// Runs the call.
    fn run(&self, ctx: ToolContext) -> ToolFuture;
}

impl<F, Fut> ToolBody for F
where
    F: Fn(ToolContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<String, String>> + Send + 'static,
{
    fn run(&self, ctx: ToolContext) -> ToolFuture {
        Box::pin(self(ctx))
    }
}

/// What `pre-execute` answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PreDecision {
    /// Run the tool.
    Allow,
    /// Refuse with this reason.
    Deny {
        /// What the model sees.
        reason: String,
    },
    /// Ask the approval service first.
    Ask {
        /// The asker's reason, shown to the answerer.
        reason: Option<String>,
    },
    /// Let the next listener decide.
    Next,
}

/// What a `pre-execute` listener sees.
#[derive(Debug, Clone)]
pub struct PreCall {
    /// The exact call id.
    pub call_id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments.
    pub arguments: Value,
    /// The calling agent.
    pub agent: Option<Agent>,
}

/// The future a `pre-execute` listener returns; an error names what failed.
pub type PreFuture = Pin<Box<dyn Future<Output = Result<PreDecision, String>> + Send>>;

/// A `pre-execute` listener. Implemented for `Fn(PreCall) -> impl Future<...>`.
pub trait PreExecute: Send + Sync + 'static {
    /// Decides the call, or says [`PreDecision::Next`].
    fn decide(&self, call: PreCall) -> PreFuture;
}

impl<F, Fut> PreExecute for F
where
    F: Fn(PreCall) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<PreDecision, String>> + Send + 'static,
{
    fn decide(&self, call: PreCall) -> PreFuture {
        Box::pin(self(call))
    }
}

/// A guard: runs after `pre-execute` (even after an approved ask) and can still deny.
pub trait Guard: Send + Sync + 'static {
    /// `Err(reason)` denies the call.
    fn check(&self, call: &PreCall) -> Result<(), String>;
}

impl<F> Guard for F
where
    F: Fn(&PreCall) -> Result<(), String> + Send + Sync + 'static,
{
    fn check(&self, call: &PreCall) -> Result<(), String> {
        self(call)
    }
}

struct Tool {
    schema: jsonschema::Validator,
    body: Arc<dyn ToolBody>,
}

struct PreEntry {
    id: u64,
    name: String,
    scope: Option<Weak<AgentInner>>,
    listener: Arc<dyn PreExecute>,
}

#[derive(Default)]
struct Lists {
    next_id: u64,
    pre: Vec<Arc<PreEntry>>,
    guards: Vec<(u64, Arc<dyn Guard>)>,
}

struct Inner {
    tools: RwLock<HashMap<String, Arc<Tool>>>,
    lists: RwLock<Lists>,
    approval: RwLock<Option<ApprovalService>>,
}

/// The tool runtime.
#[derive(Clone)]
pub struct ToolRuntime {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for ToolRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolRuntime").finish_non_exhaustive()
    }
}

/// A registered `pre-execute` listener or guard; dropping it removes it.
#[must_use = "dropping it removes the listener at once"]
pub struct PreRegistration {
    id: u64,
    runtime: Weak<Inner>,
}

impl Drop for PreRegistration {
    fn drop(&mut self) {
        if let Some(inner) = self.runtime.upgrade() {
            let mut lists = inner.lists.write().unwrap_or_else(|p| p.into_inner());
            lists.pre.retain(|e| e.id != self.id);
            lists.guards.retain(|(id, _)| *id != self.id);
        }
    }
}

/// A tool that could not be registered.
#[derive(Debug, thiserror::Error)]
#[error("tool {name:?}: invalid JSON Schema: {reason}")]
pub struct SchemaError {
    /// The tool.
    pub name: String,
    /// Why.
    pub reason: String,
}

impl Default for ToolRuntime {
    fn default() -> Self {
        Self::new(None)
    }
}

impl ToolRuntime {
    /// A runtime asking through `approval`, or with no approval service mounted.
    pub fn new(approval: Option<ApprovalService>) -> Self {
        ToolRuntime {
            inner: Arc::new(Inner {
                tools: RwLock::new(HashMap::new()),
                lists: RwLock::new(Lists::default()),
                approval: RwLock::new(approval),
            }),
        }
    }

    /// Mounts or unmounts the approval service.
    pub fn set_approval(&self, approval: Option<ApprovalService>) {
        *self
            .inner
            .approval
            .write()
            .unwrap_or_else(|p| p.into_inner()) = approval;
    }

    fn approval(&self) -> Option<ApprovalService> {
        self.inner
            .approval
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Registers a tool with a JSON Schema for its arguments.
    pub fn register_tool(
        &self,
        name: impl Into<String>,
        schema: &Value,
        body: impl ToolBody,
    ) -> Result<(), SchemaError> {
        let name = name.into();
        let schema = jsonschema::validator_for(schema).map_err(|e| SchemaError {
            name: name.clone(),
            reason: e.to_string(),
        })?;
        self.inner
            .tools
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(
                name,
                Arc::new(Tool {
                    schema,
                    body: Arc::new(body),
                }),
            );
        Ok(())
    }

    /// Registers a `pre-execute` listener: global or scoped to one agent, in front (gates) or at
    /// the back.
    pub fn pre_execute(
        &self,
        name: impl Into<String>,
        scope: Scope,
        position: Position,
        listener: impl PreExecute,
    ) -> PreRegistration {
        let mut lists = self.inner.lists.write().unwrap_or_else(|p| p.into_inner());
        lists.next_id += 1;
        let entry = Arc::new(PreEntry {
            id: lists.next_id,
            name: name.into(),
            scope: match scope {
                Scope::Global => None,
                Scope::Agent(a) => Some(Arc::downgrade(&a.inner)),
            },
            listener: Arc::new(listener),
        });
        let id = entry.id;
        match position {
            Position::Guard | Position::First | Position::Front => lists.pre.insert(0, entry),
            Position::Back | Position::Last => lists.pre.push(entry),
        }
        PreRegistration {
            id,
            runtime: Arc::downgrade(&self.inner),
        }
    }

    /// Registers a guard.
    pub fn guard(&self, guard: impl Guard) -> PreRegistration {
        let mut lists = self.inner.lists.write().unwrap_or_else(|p| p.into_inner());
        lists.next_id += 1;
        let id = lists.next_id;
        lists.guards.push((id, Arc::new(guard)));
        PreRegistration {
            id,
            runtime: Arc::downgrade(&self.inner),
        }
    }

    /// Executes `call`, recording `tool/call` and `tool/result` on the agent's session log.
    pub async fn execute(&self, call: ToolCall) -> ToolResult {
        if let Some(agent) = &call.agent {
            let recorded = agent
                .session()
                .log
                .append(Event::ToolCall(ToolCallEvent {
                    call_id: call.call_id.clone(),
                    name: call.name.clone(),
                    arguments: call.arguments.clone(),
                    permission_mode: None,
                    redacted: Vec::new(),
                }))
                .await;
            if let Err(e) = recorded {
                return ToolResult::error(format!("could not record the call: {e}"));
            }
        }
        let result = self.dispatch(&call).await;
        if let Some(agent) = &call.agent {
            let recorded = agent
                .session()
                .log
                .append(Event::ToolResult(ToolResultEvent {
                    call_id: call.call_id.clone(),
                    is_error: result.is_error,
                    content: Value::String(result.content.clone()),
                    failed_listener: result.failed_listener.clone(),
                }))
                .await;
            if let Err(e) = recorded {
                tracing::error!(call = %call.call_id, error = %e, "could not record the tool result");
            }
        }
        result
    }

    async fn pre_decide(&self, call: &PreCall) -> Result<PreDecision, ListenerFailure> {
        let snapshot: Vec<Arc<PreEntry>> = {
            let lists = self.inner.lists.read().unwrap_or_else(|p| p.into_inner());
            lists
                .pre
                .iter()
                .filter(|e| match (&e.scope, &call.agent) {
                    (None, _) => true,
                    (Some(w), Some(a)) => std::ptr::eq(w.as_ptr(), Arc::as_ptr(&a.inner)),
                    (Some(_), None) => false,
                })
                .cloned()
                .collect()
        };
        for entry in snapshot {
            // A panic may come from building the future or from polling it; both are contained.
            let answer = match std::panic::catch_unwind(AssertUnwindSafe(|| {
                entry.listener.decide(call.clone())
            })) {
                Ok(future) => AssertUnwindSafe(future).catch_unwind().await,
                Err(payload) => Err(payload),
            };
            let why = match answer {
                Ok(Ok(PreDecision::Next)) => continue,
                Ok(Ok(decision)) => return Ok(decision),
                Ok(Err(why)) => why,
                Err(payload) => panic_message(&*payload),
            };
            tracing::warn!(listener = %entry.name, call = %call.call_id, error = %why, "pre-execute listener failed; the call is refused");
            return Err(ListenerFailure {
                listener: entry.name.clone(),
                message: why,
            });
        }
        Ok(PreDecision::Allow)
    }

    async fn dispatch(&self, call: &ToolCall) -> ToolResult {
        if call.cancel.is_cancelled() {
            return ToolResult::aborted();
        }
        let tool = self
            .inner
            .tools
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&call.name)
            .cloned();
        let Some(tool) = tool else {
            return ToolResult::error(texts::unknown_tool(&call.name));
        };
        if let Err(e) = tool.schema.validate(&call.arguments) {
            return ToolResult::error(texts::invalid_arguments(&call.name, &e.to_string()));
        }
        let pre = PreCall {
            call_id: call.call_id.clone(),
            name: call.name.clone(),
            arguments: call.arguments.clone(),
            agent: call.agent.clone(),
        };
        match self.pre_decide(&pre).await {
            Err(failure) => {
                let mut result = ToolResult::error(failure.message);
                result.failed_listener = Some(failure.listener);
                return result;
            }
            Ok(PreDecision::Deny { reason }) => return ToolResult::error(reason),
            Ok(PreDecision::Ask { reason }) => {
                if let Some(refusal) = self.ask(call, reason).await {
                    return refusal;
                }
            }
            Ok(PreDecision::Allow | PreDecision::Next) => {}
        }
        let guards: Vec<Arc<dyn Guard>> = self
            .inner
            .lists
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .guards
            .iter()
            .map(|(_, g)| g.clone())
            .collect();
        for guard in guards {
            if let Err(reason) = guard.check(&pre) {
                return ToolResult::error(reason);
            }
        }
        if call.cancel.is_cancelled() {
            return ToolResult::aborted();
        }
        let ctx = ToolContext {
            call_id: call.call_id.clone(),
            name: call.name.clone(),
            arguments: call.arguments.clone(),
            agent: call.agent.clone(),
            cancel: call.cancel.clone(),
            approval: self.approval(),
        };
        match tool.body.run(ctx).await {
            Ok(content) => ToolResult::ok(content),
            Err(message) => ToolResult::error(message),
        }
    }

    /// Routes an `ask`; `None` means granted for this one call.
    async fn ask(&self, call: &ToolCall, reason: Option<String>) -> Option<ToolResult> {
        let name = &call.name;
        let Some(service) = self.approval() else {
            return Some(ToolResult::error(
                reason.unwrap_or_else(|| texts::approval_not_supported(name)),
            ));
        };
        let Some(agent) = &call.agent else {
            return Some(ToolResult::error(texts::approval_without_agent(name)));
        };
        let mut request = ApprovalRequest::new(agent, name.clone())
            .call_id(call.call_id.clone())
            .cancel(call.cancel.clone());
        if let Some(r) = reason {
            request = request.reason(r);
        }
        let verdict = service.ask(request).await;
        if call.cancel.is_cancelled() {
            return Some(ToolResult::aborted());
        }
        match verdict {
            Ok(v) => match v.outcome {
                Outcome::AllowedOnce => None,
                Outcome::Rejected => Some(ToolResult::error(texts::rejection(name, &v))),
                Outcome::Cancelled => Some(ToolResult::error(texts::approval_cancelled(name))),
                Outcome::Unavailable => Some(ToolResult::error(texts::approval_unavailable(name))),
            },
            Err(e) => Some(ToolResult::error(texts::approval_failed(
                name,
                &e.to_string(),
            ))),
        }
    }
}
