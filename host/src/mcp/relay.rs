//! Forwarding one request to the other side with what belongs to it: the caller's `_meta`, its
//! cancellation (a `notifications/cancelled` from the caller cancels the forwarded request) and
//! its progress (the forwarded request gets a token of its own; the other side's progress
//! notifications go back under the caller's token). And the server-facing side of a connection,
//! [`Relay`], which hands the server's requests and notifications to the agent the same way.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rmcp::model::{
    ClientConfig, ClientResult, ProgressToken, RequestMetaObject, ServerNotification, ServerRequest,
};

use crate::agent::Agent;
use crate::audit::event::{McpFrom, McpHandled, McpMessage};

use super::SharedRef;
use rmcp::service::{
    NotificationContext, Peer, PeerRequestOptions, RequestContext, Service, ServiceError,
    ServiceRole,
};
use rmcp::{ErrorData as McpError, RoleClient, RoleServer};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

/// Progress tokens of forwarded requests (the token this side gave the request it sent) mapped
/// to the caller's.
#[derive(Debug, Default, Clone)]
pub(super) struct Progress(Arc<Mutex<HashMap<ProgressToken, ProgressToken>>>);

impl Progress {
    fn insert(&self, ours: ProgressToken, theirs: ProgressToken) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(ours, theirs);
    }

    fn remove(&self, ours: &ProgressToken) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(ours);
    }

    /// The caller's token for a progress notification about a forwarded request.
    pub(super) fn caller_token(&self, ours: &ProgressToken) -> Option<ProgressToken> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(ours)
            .cloned()
    }
}

/// The `_meta` key of a request's progress token.
pub(super) const PROGRESS_TOKEN: &str = "progressToken";

/// Sends `request` to `peer` and waits for its answer, cancelling it when `cancel` fires.
pub(super) async fn forward<R: ServiceRole>(
    peer: &Peer<R>,
    request: R::Req,
    mut meta: RequestMetaObject,
    cancel: CancellationToken,
    progress: &Progress,
    gone: &str,
) -> Result<R::PeerResp, McpError> {
    let caller_token = meta.get_progress_token();
    meta.0.0.remove(PROGRESS_TOKEN);
    let mut options = PeerRequestOptions::no_options();
    if !meta.0.0.is_empty() {
        options = options.with_meta(meta);
    }
    if cancel.is_cancelled() {
        return Err(cancelled());
    }
    let mut handle = peer
        .send_request_with_option(request, options)
        .await
        .map_err(|e| service_error(e, gone))?;
    // A progress notification sent before this insert has no request to report on yet.
    let ours = handle.progress_token.clone();
    if let Some(theirs) = caller_token {
        progress.insert(ours.clone(), theirs);
    }
    let answered = tokio::select! {
        answered = &mut handle.rx => Some(answered),
        () = cancel.cancelled() => None,
    };
    progress.remove(&ours);
    match answered {
        Some(Ok(result)) => result.map_err(|e| service_error(e, gone)),
        Some(Err(_)) => Err(McpError::internal_error(gone.to_owned(), None)),
        None => {
            // The cancellation goes on to the other side; nobody waits for its answer.
            let _ = handle.cancel(Some(CANCELLED.to_owned())).await;
            Err(cancelled())
        }
    }
}

/// The reason a forwarded request was cancelled with.
const CANCELLED: &str = "the caller cancelled the request";

fn cancelled() -> McpError {
    McpError::internal_error(CANCELLED, None)
}

/// What a failed forward answers: the other side's own error unchanged, else the text that it
/// has gone.
fn service_error(e: ServiceError, gone: &str) -> McpError {
    match e {
        ServiceError::McpError(e) => e,
        ServiceError::Cancelled { .. } => cancelled(),
        ServiceError::TransportClosed | ServiceError::TransportSend(_) => {
            McpError::internal_error(gone.to_owned(), None)
        }
        other => McpError::internal_error(other.to_string(), None),
    }
}

/// A result of the type the request asked for: the SDK reads results as an untagged union, so
/// one that fits two variants is read again as the one wanted.
pub(super) fn expect<T: DeserializeOwned>(result: impl Serialize) -> Result<T, McpError> {
    serde_json::to_value(&result)
        .and_then(serde_json::from_value)
        .map_err(|e| McpError::internal_error(format!("unexpected result: {e}"), None))
}

/// The server-facing side of one connection: what the server asks of its client (sampling,
/// roots, elicitation, ping) goes to the agent, its notifications likewise.
pub(super) struct Relay {
    /// The agent's `initialize` parameters, which the gateway initializes the server with.
    pub(super) info: ClientConfig,
    /// The agent.
    pub(super) agent: Peer<RoleServer>,
    /// Requests the agent made, by the token the server reports their progress under.
    pub(super) calls: Progress,
    /// Requests the server made, by the token the agent reports their progress under.
    pub(super) asks: Progress,
    /// The text of a request to an agent that has gone.
    pub(super) gone: String,
    /// The server's name in rules.
    pub(super) server: String,
    /// The agent speaks the per-request lifecycle (MCP 2026-07-28): a server's request of it
    /// mid-call has nowhere to go.
    pub(super) inline: bool,
    /// What the connection shares with the gateway's others (the deployment's `[mcp]`).
    pub(super) shared: SharedRef,
    /// Where the server's requests and notifications are recorded: the connection's session
    /// once it initialized, and until then held for it.
    pub(super) recorded_as: Arc<Recorder>,
}

/// The record of what a connection's servers sent it that went no further, or passed: a server
/// may ask (`roots/list`, say) while it is still being initialized, before the connection's
/// session exists, and such a message is held and written once the session starts rather than
/// lost. Waiting for the session instead would stall a server that asks during `initialize`.
#[derive(Default)]
pub(super) struct Recorder {
    state: std::sync::Mutex<(Option<Agent>, Vec<McpMessage>)>,
}

impl Recorder {
    /// Whether the connection's session has started.
    fn started(&self) -> bool {
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .0
            .is_some()
    }

    /// Records `message` in the session, or holds it until [`Recorder::start`]; an error when
    /// the session could not take it.
    async fn record(
        &self,
        service: &crate::service::ApprovalService,
        message: McpMessage,
    ) -> Result<(), crate::service::ApprovalError> {
        let agent = {
            let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
            match &state.0 {
                Some(agent) => agent.clone(),
                None => {
                    state.1.push(message);
                    return Ok(());
                }
            }
        };
        service.record_mcp_message(&agent, message).await
    }

    /// The session started as `agent`: what was held is written now, in the order it came.
    pub(super) async fn start(&self, service: &crate::service::ApprovalService, agent: Agent) {
        let held = {
            let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
            state.0 = Some(agent.clone());
            std::mem::take(&mut state.1)
        };
        for message in held {
            if let Err(e) = service.record_mcp_message(&agent, message).await {
                tracing::warn!(error = %e, "could not record what an MCP server sent while it started");
            }
        }
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        // A probe (`server/discover`) has no session: what its servers sent is only logged.
        let state = self.state.get_mut().unwrap_or_else(|p| p.into_inner());
        for message in state.1.drain(..) {
            tracing::warn!(method = %message.method, server = ?message.server, handled = ?message.handled, "an MCP server's message while it started, with no session to record it in");
        }
    }
}

/// The method of a server's request, as the log records it.
fn server_method(request: &ServerRequest) -> &str {
    match request {
        ServerRequest::PingRequest(_) => "ping",
        ServerRequest::CreateMessageRequest(_) => "sampling/createMessage",
        ServerRequest::ListRootsRequest(_) => "roots/list",
        ServerRequest::ElicitRequest(_) => "elicitation/create",
        ServerRequest::CustomRequest(r) => &r.method,
        // A request type newer than the gateway: never passed.
        _ => "",
    }
}

/// The error a server's request gets when the deployment does not pass it to the agent.
pub fn server_request_refused(method: &str) -> String {
    format!(
        "the MCP gateway does not pass {method:?} from the server to the agent ([mcp] server-requests)"
    )
}

impl Relay {
    /// Whether the server's request goes on to the agent; recorded either way, but a ping.
    async fn passes(&self, request: &ServerRequest) -> bool {
        let method = server_method(request);
        if matches!(request, ServerRequest::PingRequest(_)) {
            return true;
        }
        // Nothing passes before the session it would be recorded in exists.
        let started = self.recorded_as.started();
        let passes = started
            && !method.is_empty()
            && !self.inline
            && super::methods::SERVER_REQUESTS.contains(&method)
            && self
                .shared
                .options
                .config
                .server_requests
                .iter()
                .any(|m| m == method);
        let message = McpMessage {
            from: McpFrom::Server,
            method: method.chars().take(super::screen::MAX_METHOD).collect(),
            handled: if passes {
                McpHandled::Passed
            } else {
                McpHandled::Refused
            },
            why: (!passes).then(|| {
                if started {
                    self.refusal(method)
                } else {
                    server_request_early(method)
                }
            }),
            server: Some(self.server.clone()),
        };
        if let Err(e) = self.recorded_as.record(&self.shared.service, message).await {
            // Not recorded, not passed.
            tracing::warn!(error = %e, "could not record the MCP server's request");
            return false;
        }
        passes
    }
}

/// The error a server's request gets when it comes while the server is still being started,
/// before the connection's session exists to record it in.
pub fn server_request_early(method: &str) -> String {
    format!(
        "the MCP gateway does not pass {method:?} from a server that is still starting (the agent's session does not exist yet)"
    )
}

/// The error a server's request gets when its agent speaks the per-request lifecycle (MCP
/// 2026-07-28), where a server's request mid-call has no way to the agent.
pub fn server_request_inline(method: &str) -> String {
    format!(
        "the MCP gateway does not pass {method:?} from the server to an agent on MCP 2026-07-28 (a server cannot ask such an agent anything mid-call)"
    )
}

/// The error a request gets when its server answered with an `input_required` result (it asks
/// the agent for input inside its answer, MCP 2026-07-28's way of asking mid-call).
pub fn input_required_refused(server: &str) -> String {
    format!(
        "the MCP server \"{server}\" asked the agent for input inside its answer (input_required), which the MCP gateway does not pass"
    )
}

impl Relay {
    /// Why the server's request of `method` does not pass.
    fn refusal(&self, method: &str) -> String {
        if self.inline {
            server_request_inline(method)
        } else {
            server_request_refused(method)
        }
    }

    /// Records a notification of the server's that went no further.
    async fn dropped(&self, method: &str) {
        let message = McpMessage {
            from: McpFrom::Server,
            method: method.chars().take(super::screen::MAX_METHOD).collect(),
            handled: McpHandled::Dropped,
            why: Some(super::methods::unknown_method(method)),
            server: Some(self.server.clone()),
        };
        if let Err(e) = self.recorded_as.record(&self.shared.service, message).await {
            tracing::warn!(error = %e, "could not record the MCP server's notification");
        }
    }
}

impl Service<RoleClient> for Relay {
    async fn handle_request(
        &self,
        request: ServerRequest,
        context: RequestContext<RoleClient>,
    ) -> Result<ClientResult, McpError> {
        if !self.passes(&request).await {
            return Err(McpError::invalid_request(
                self.refusal(server_method(&request)),
                None,
            ));
        }
        forward(
            &self.agent,
            request,
            context.meta,
            context.ct,
            &self.asks,
            &self.gone,
        )
        .await
    }

    #[allow(deprecated)] // Logging is deprecated (SEP-2577), but servers still log.
    async fn handle_notification(
        &self,
        notification: ServerNotification,
        _context: NotificationContext<RoleClient>,
    ) -> Result<(), McpError> {
        let notification = match notification {
            ServerNotification::ProgressNotification(mut n) => {
                match self.calls.caller_token(&n.params.progress_token) {
                    Some(theirs) => n.params.progress_token = theirs,
                    None => return Ok(()),
                }
                ServerNotification::ProgressNotification(n)
            }
            // The SDK cancels the request it names; the agent has its own cancellation.
            ServerNotification::CancelledNotification(_) => return Ok(()),
            // With many servers, a log line says whose it is: no server can speak as another.
            ServerNotification::LoggingMessageNotification(mut n) if self.shared.prefixed => {
                n.params.logger = Some(match n.params.logger.take() {
                    Some(logger) => format!("{}/{logger}", self.server),
                    None => self.server.clone(),
                });
                ServerNotification::LoggingMessageNotification(n)
            }
            // A notification the gateway does not know: what it would do at the agent is
            // unknown, so it goes no further.
            ServerNotification::CustomNotification(n) => {
                self.dropped(&n.method).await;
                return Ok(());
            }
            other => other,
        };
        // An agent that has gone cannot be told; its connection's end settles the rest.
        let _ = self.agent.send_notification(notification).await;
        Ok(())
    }

    fn get_info(&self) -> ClientConfig {
        self.info.clone()
    }
}
