//! The ACP answerer: the terminal answerer that asks the client owning the asking agent, over
//! the Agent Client Protocol (`session/request_permission`, protocol v1, through the official
//! `agent-client-protocol` crate).
//!
//! It answers only for an agent object its session map owns (exact identity: another object with
//! the same session id is foreign) and only for questions with a call id; everything else
//! delegates. It offers the one-shot options and, when the host keeps standing rules and a safe
//! rule exists for the call ([`crate::rules::suggest`]), `allow_always` / `reject_always` named
//! with the exact rule and its scope (`Always allow Bash(npm run test:*) in this project`):
//! choosing one answers this call and proposes that project rule. The selected `allow-once` or
//! `allow-always` grants; any other option id, known or not, rejects; the `cancelled` outcome
//! cancels; a JSON-RPC error, a dropped responder or a closed connection settles
//! `unavailable`. [`AcpAnswerer::cancel`], called on the client's `session/cancel`,
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
use crate::answer::{Answer, Authority, Effect, RuleScope};
use crate::outcome::{Decision, Failure};
use crate::rules::proposal;
use crate::rules::suggest::suggest;
use crate::waterfall::{AnswerFuture, Listener, ListenerFuture, Question};

/// The option id that grants one call.
pub const ALLOW_ONCE: &str = "allow-once";
/// The option id that rejects.
pub const REJECT_ONCE: &str = "reject-once";

/// The option id that grants this call and adds the offered allow rule.
pub const ALLOW_ALWAYS: &str = "allow-always";
/// The option id that rejects this call and adds the offered reject rule.
pub const REJECT_ALWAYS: &str = "reject-always";

/// The one-shot options every permission request offers.
pub fn permission_options() -> Vec<PermissionOption> {
    vec![
        PermissionOption::new(ALLOW_ONCE, "Allow once", PermissionOptionKind::AllowOnce),
        PermissionOption::new(REJECT_ONCE, "Reject", PermissionOptionKind::RejectOnce),
    ]
}

/// The name of the option that makes `rule` a standing allow rule of the project.
pub fn always_allow_name(rule: &str) -> String {
    format!("Always allow {rule} in this project")
}

/// The name of the option that makes `rule` a standing reject rule of the project.
pub fn always_reject_name(rule: &str) -> String {
    format!("Always reject {rule} in this project")
}

/// The options of a request for which `rule` is offered as a standing rule.
pub fn permission_options_with_rule(rule: &str) -> Vec<PermissionOption> {
    vec![
        PermissionOption::new(ALLOW_ONCE, "Allow once", PermissionOptionKind::AllowOnce),
        PermissionOption::new(
            ALLOW_ALWAYS,
            always_allow_name(rule),
            PermissionOptionKind::AllowAlways,
        ),
        PermissionOption::new(REJECT_ONCE, "Reject", PermissionOptionKind::RejectOnce),
        PermissionOption::new(
            REJECT_ALWAYS,
            always_reject_name(rule),
            PermissionOptionKind::RejectAlways,
        ),
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
    /// Whether to offer standing rules (the host keeps them).
    offer_rules: bool,
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

    /// Offers `allow_always` / `reject_always` with a project rule for the call (only for a host
    /// with standing rules on: elsewhere nothing could keep the rule).
    #[must_use]
    pub fn offering_rules(mut self, offer: bool) -> Self {
        self.offer_rules = offer;
        self
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
    if let Some(arguments) = question.arguments_shown() {
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
        let (_, future) = self
            .answer(&question)
            .expect("the ACP answerer always answers with a future");
        Box::pin(async move { future.await.map(|a| a.decision) })
    }

    fn answer(&self, question: &Question) -> Option<(Option<Arc<str>>, AnswerFuture)> {
        let next = || -> Option<(Option<Arc<str>>, AnswerFuture)> {
            Some((None, Box::pin(async { Ok(Answer::from(Decision::Next)) })))
        };
        let Some(call_id) = question.call_id() else {
            return next();
        };
        let offered = if self.offer_rules {
            let arguments = question.arguments();
            suggest(question.tool_name(), arguments.as_ref(), question.cwd())
        } else {
            None
        };
        let options = match &offered {
            Some(rule) => permission_options_with_rule(rule),
            None => permission_options(),
        };
        let request = {
            let sessions = self.lock();
            match sessions.get(question.session_id()) {
                Some(owned) if owned.agent.same(question.agent()) => Some((
                    owned.connection.clone(),
                    owned.cancel.clone(),
                    RequestPermissionRequest::new(
                        owned.acp_session.clone(),
                        ToolCallUpdate::new(call_id.to_owned(), describe(question)),
                        options,
                    ),
                )),
                _ => None,
            }
        };
        let Some((connection, cancel, request)) = request else {
            return next();
        };
        let sent = connection.send_request(request);
        Some((
            None,
            Box::pin(async move {
                let answered = tokio::select! {
                    biased;
                    // Dropping the request sends `$/cancel_request`: the client can close its
                    // prompt.
                    () = cancel.cancelled() => return Ok(Answer::from(Decision::Cancel)),
                    answered = sent.block_task() => answered,
                };
                let always = |effect| {
                    offered
                        .as_deref()
                        .and_then(|rule| proposal(rule, effect, RuleScope::Project).ok())
                };
                match answered {
                    Ok(response) => Ok(match response.outcome {
                        RequestPermissionOutcome::Selected(selected) => {
                            match &*selected.option_id.0 {
                                ALLOW_ONCE => Answer::from(Decision::AllowOnce),
                                // Only an offered rule grants: an `allow-always` nobody offered
                                // is an unknown option.
                                ALLOW_ALWAYS => match always(Effect::Allow) {
                                    // The editor's person is at the host.
                                    Some(p) => Answer::from(Decision::AllowOnce)
                                        .proposing(p)
                                        .with_authority(Authority::Person),
                                    None => Answer::from(Decision::Reject),
                                },
                                REJECT_ALWAYS => match always(Effect::Reject) {
                                    Some(p) => Answer::from(Decision::Reject)
                                        .proposing(p)
                                        .with_authority(Authority::Person),
                                    None => Answer::from(Decision::Reject),
                                },
                                // Any other option id, known or not, never grants.
                                _ => Answer::from(Decision::Reject),
                            }
                        }
                        RequestPermissionOutcome::Cancelled => Answer::from(Decision::Cancel),
                        _ => Answer::from(Decision::Reject),
                    }),
                    Err(e) => Err(Failure::error(format!(
                        "session/request_permission failed: {e}"
                    ))),
                }
            }),
        ))
    }
}
