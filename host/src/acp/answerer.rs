//! The ACP answerer: the terminal answerer that asks the client owning the asking agent, over
//! the Agent Client Protocol (`session/request_permission`, protocol v1, through the official
//! `agent-client-protocol` crate).
//!
//! It answers only for an agent object its session map owns (exact identity: another object with
//! the same session id is foreign) and only for questions with a call id; everything else
//! delegates. It offers exactly two one-shot options, never `allow_always` (nothing could honour
//! it): the selected `allow-once` grants; any other option id, known or not, rejects; the
//! `cancelled` outcome cancels; a JSON-RPC error, a dropped responder or a closed connection
//! settles `unavailable`. [`AcpAnswerer::cancel`], called on the client's `session/cancel`,
//! settles the session's pending permission requests `cancelled` (and tells the client to drop
//! them with `$/cancel_request`).
//!
//! The request describes the call so an editor can show what it asks about: when the asking
//! session recorded the call, `toolCall` carries its `title` (the tool, and the command when
//! there is one), `kind` and `rawInput`; when the asker gave a reason, it is the `content`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use agent_client_protocol::Client;
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{
    Content, PermissionOption, PermissionOptionKind, RequestPermissionOutcome,
    RequestPermissionRequest, SessionId, ToolCallContent, ToolCallUpdate, ToolCallUpdateFields,
    ToolKind,
};

use tokio_util::sync::CancellationToken;

use crate::agent::Agent;
use crate::outcome::{Decision, Failure};
use crate::waterfall::{Listener, ListenerFuture, Question};

/// The option id that grants one call.
pub const ALLOW_ONCE: &str = "allow-once";
/// The option id that rejects.
pub const REJECT_ONCE: &str = "reject-once";

/// The options every permission request offers: one-shot allow and reject, nothing persistent.
pub fn permission_options() -> Vec<PermissionOption> {
    vec![
        PermissionOption::new(ALLOW_ONCE, "Allow once", PermissionOptionKind::AllowOnce),
        PermissionOption::new(REJECT_ONCE, "Reject", PermissionOptionKind::RejectOnce),
    ]
}

struct Owned {
    agent: Agent,
    acp_session: SessionId,
    connection: ConnectionTo<Client>,
    /// Cancelled (and replaced) by `session/cancel`: ends the requests pending at that moment.
    cancel: CancellationToken,
}

/// The session map and the answerer over it. Clone it to share one map between the ACP agent
/// (which owns sessions as clients open them) and the approval service (where it is registered).
#[derive(Clone, Default)]
pub struct AcpAnswerer {
    sessions: Arc<Mutex<HashMap<String, Owned>>>,
}

impl std::fmt::Debug for AcpAnswerer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AcpAnswerer")
            .field("sessions", &self.lock().len())
            .finish()
    }
}

impl AcpAnswerer {
    /// An empty session map.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Owned>> {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records that `connection`'s client owns `agent` (its ACP session is `acp_session`).
    pub fn own(&self, agent: &Agent, acp_session: SessionId, connection: ConnectionTo<Client>) {
        self.lock().insert(
            agent.session_id().to_owned(),
            Owned {
                agent: agent.clone(),
                acp_session,
                connection,
                cancel: CancellationToken::new(),
            },
        );
    }

    /// The client cancelled its prompt in `acp_session` (`session/cancel`): the permission
    /// requests pending for it settle `cancelled`. Later requests are asked as usual.
    pub fn cancel(&self, acp_session: &SessionId) {
        for owned in self.lock().values_mut() {
            if owned.acp_session == *acp_session {
                std::mem::take(&mut owned.cancel).cancel();
            }
        }
    }

    /// Forgets the session; its questions delegate from now on.
    pub fn release(&self, session_id: &str) {
        self.lock().remove(session_id);
    }
}

/// The longest command shown in a permission request's title, in characters; the rest is cut.
pub const TITLE_COMMAND_CHARS: usize = 120;

/// The ACP kind of a tool call, from its name: what an editor picks an icon by.
pub fn tool_kind(tool: &str) -> ToolKind {
    match tool.to_ascii_lowercase().as_str() {
        "bash" | "shell" | "exec" | "run" | "terminal" => ToolKind::Execute,
        "read" | "view" | "cat" => ToolKind::Read,
        "edit" | "write" | "multiedit" | "notebookedit" | "apply_patch" => ToolKind::Edit,
        "grep" | "glob" | "search" | "ls" => ToolKind::Search,
        "webfetch" | "web_fetch" | "fetch" | "websearch" => ToolKind::Fetch,
        "delete" | "rm" => ToolKind::Delete,
        "move" | "mv" => ToolKind::Move,
        _ => ToolKind::Other,
    }
}

/// A permission request's title: the tool, and its `command` argument when it has one.
pub fn title(tool: &str, arguments: &serde_json::Value) -> String {
    match arguments.get("command").and_then(serde_json::Value::as_str) {
        Some(command) => {
            let mut shown: String = command.chars().take(TITLE_COMMAND_CHARS).collect();
            if shown.len() < command.len() {
                shown.push('…');
            }
            format!("{tool}: {shown}")
        }
        None => tool.to_owned(),
    }
}

/// What `toolCall` says about `question`'s call beyond its id.
fn describe(question: &Question) -> ToolCallUpdateFields {
    let mut fields = ToolCallUpdateFields::new();
    if let Some(arguments) = question.arguments() {
        fields = fields
            .title(title(question.tool_name(), &arguments))
            .kind(tool_kind(question.tool_name()))
            .raw_input(arguments);
    }
    if let Some(reason) = question.reason() {
        fields = fields.content(vec![ToolCallContent::Content(Content::new(reason))]);
    }
    fields
}

impl Listener for AcpAnswerer {
    /// The question goes to a client: it is made durable before it is sent.
    fn leaves_process(&self) -> bool {
        true
    }

    fn decide(&self, question: Question) -> ListenerFuture {
        let Some(call_id) = question.call_id() else {
            return Box::pin(async { Ok(Decision::Next) });
        };
        let request = {
            let sessions = self.lock();
            match sessions.get(question.session_id()) {
                Some(owned) if owned.agent.same(question.agent()) => Some((
                    owned.connection.clone(),
                    owned.cancel.clone(),
                    RequestPermissionRequest::new(
                        owned.acp_session.clone(),
                        ToolCallUpdate::new(call_id.to_owned(), describe(&question)),
                        permission_options(),
                    ),
                )),
                _ => None,
            }
        };
        let Some((connection, cancel, request)) = request else {
            return Box::pin(async { Ok(Decision::Next) });
        };
        let sent = connection.send_request(request);
        Box::pin(async move {
            let answered = tokio::select! {
                biased;
                // Dropping the request sends `$/cancel_request`: the client can close its prompt.
                () = cancel.cancelled() => return Ok(Decision::Cancel),
                answered = sent.block_task() => answered,
            };
            match answered {
                Ok(response) => Ok(match response.outcome {
                    RequestPermissionOutcome::Selected(selected)
                        if &*selected.option_id.0 == ALLOW_ONCE =>
                    {
                        Decision::AllowOnce
                    }
                    RequestPermissionOutcome::Cancelled => Decision::Cancel,
                    // Any other option id, known or not, never grants.
                    _ => Decision::Reject,
                }),
                Err(e) => Err(Failure::error(format!(
                    "session/request_permission failed: {e}"
                ))),
            }
        })
    }
}
