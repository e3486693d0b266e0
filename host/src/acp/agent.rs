//! The host as an ACP agent whose model is a [`Script`]: what `approval-host acp` serves over
//! stdio, and what tests connect to in-process.
//!
//! `session/new` opens a session log and its agent, owned by the connection's client for the ACP
//! answerer; `session/prompt` runs the session's next scripted turn through a tool runtime (the
//! deployment's pre-execute hooks, ask routing, the sandboxed `bash` tool with escalation) inside
//! an audited turn, streaming a `tool_call` and a final `tool_call_update` per call, then the
//! turn's message, and ends with `end_turn`. `session/cancel` cancels the running turn: pending
//! questions settle `cancelled` and the prompt ends with stop reason `cancelled`. The session's
//! approval policy is exposed as the session modes `ask` and `never`; `session/set_mode` switches
//! it through the seam's `set_policy`.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{
    AgentCapabilities, CancelNotification, ContentBlock, ContentChunk, Implementation,
    InitializeRequest, InitializeResponse, NewSessionRequest, NewSessionResponse, PromptRequest,
    PromptResponse, SessionMode, SessionModeState, SessionNotification, SessionUpdate,
    SetSessionModeRequest, SetSessionModeResponse, StopReason, ToolCall as AcpToolCall,
    ToolCallStatus, ToolCallUpdate, ToolCallUpdateFields, ToolKind,
};
use agent_client_protocol::{Agent as AgentRole, Client, ConnectTo, Error as AcpError};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::answerer::AcpAnswerer;
use super::script::{Script, ScriptedCall};
use crate::agent::Agent;
use crate::policy::Policy;
use crate::service::ApprovalService;
use crate::tools::bash::{self, BashTool};
use crate::tools::hooks::{HookSpec, Hooks};
use crate::tools::sandbox::{SandboxMode, Workspace};
use crate::tools::{PreRegistration, ToolCall, ToolRuntime};
use crate::waterfall::{Position, Registration, Scope};

/// The name the ACP answerer is registered under (an `approval/decided` names it).
pub const ANSWERER_NAME: &str = "acp";
/// The source recorded on `approval/policy` switches made with `session/set_mode`.
pub const MODE_SOURCE: &str = "acp";
/// The agent name in `initialize`.
pub const AGENT_NAME: &str = "approval-host";

/// The session modes: one per approval policy, with the policy's own name as its id.
pub fn session_modes(current: Policy) -> SessionModeState {
    SessionModeState::new(
        current.as_str(),
        vec![
            SessionMode::new(Policy::Ask.as_str(), "Ask")
                .description("approval requests go to the deployment's answerers, then to you"),
            SessionMode::new(Policy::Never.as_str(), "Never ask")
                .description("every approval request is rejected before any answerer runs"),
        ],
    )
}

/// How the agent's sessions are set up.
#[derive(Debug, Clone)]
pub struct AgentOptions {
    /// The agent id of each session's agent.
    pub agent_id: String,
    /// `PreToolUse` command hooks, run in the session's working directory.
    pub hooks: Vec<HookSpec>,
    /// The sandbox mode `bash` runs under unless a call escalates.
    pub sandbox_mode: SandboxMode,
    /// How long a `bash` command may run.
    pub command_timeout: Duration,
}

impl Default for AgentOptions {
    fn default() -> Self {
        AgentOptions {
            agent_id: "agent".to_owned(),
            hooks: Vec::new(),
            sandbox_mode: SandboxMode::ReadOnly,
            command_timeout: Duration::from_secs(120),
        }
    }
}

struct TurnState {
    next: usize,
    running: Option<CancellationToken>,
}

struct AcpSession {
    id: String,
    agent: Agent,
    runtime: ToolRuntime,
    state: Mutex<TurnState>,
    _hooks: Option<PreRegistration>,
    _temp: tempfile::TempDir,
}

impl AcpSession {
    fn state(&self) -> MutexGuard<'_, TurnState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

struct Inner {
    service: ApprovalService,
    answerer: AcpAnswerer,
    script: Script,
    options: AgentOptions,
    sessions: Mutex<HashMap<String, Arc<AcpSession>>>,
    tasks: TaskTracker,
    _answering: Registration,
}

/// The scripted ACP agent. Cheap to clone; clones share sessions.
#[derive(Clone)]
pub struct ScriptedAgent {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for ScriptedAgent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScriptedAgent")
            .field("turns", &self.inner.script.turns.len())
            .finish_non_exhaustive()
    }
}

fn invalid(message: impl Into<String>) -> AcpError {
    AcpError::invalid_params().data(json!({ "message": message.into() }))
}

fn refused(message: impl Into<String>) -> AcpError {
    AcpError::invalid_request().data(json!({ "message": message.into() }))
}

fn internal(message: impl std::fmt::Display) -> AcpError {
    AcpError::internal_error().data(json!({ "message": message.to_string() }))
}

/// Sends a session update; `false` when the connection is gone.
fn notify(cx: &ConnectionTo<Client>, session: &str, update: SessionUpdate) -> bool {
    cx.send_notification(SessionNotification::new(session.to_owned(), update))
        .is_ok()
}

impl ScriptedAgent {
    /// An agent answering approval questions through `service`, whose waterfall gets the ACP
    /// answerer at the back (after the deployment's own answerers).
    pub fn new(service: ApprovalService, script: Script, options: AgentOptions) -> Self {
        let answerer = AcpAnswerer::new().offering_rules(service.rules().is_some());
        let answering = service.register(
            ANSWERER_NAME,
            Scope::Global,
            Position::Last,
            answerer.clone(),
        );
        ScriptedAgent {
            inner: Arc::new(Inner {
                service,
                answerer,
                script,
                options,
                sessions: Mutex::new(HashMap::new()),
                tasks: TaskTracker::new(),
                _answering: answering,
            }),
        }
    }

    /// The ACP answerer's session map.
    pub fn answerer(&self) -> &AcpAnswerer {
        &self.inner.answerer
    }

    fn sessions(&self) -> MutexGuard<'_, HashMap<String, Arc<AcpSession>>> {
        self.inner
            .sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    fn session(&self, id: &str) -> Result<Arc<AcpSession>, AcpError> {
        self.sessions()
            .get(id)
            .cloned()
            .ok_or_else(|| invalid(format!("unknown session {id:?}")))
    }

    /// Serves one client over `transport` until it disconnects, then waits for running turns to
    /// settle (their questions are audited) and forgets the connection's sessions.
    pub async fn serve(
        &self,
        transport: impl ConnectTo<AgentRole> + 'static,
    ) -> Result<(), AcpError> {
        let served = self.component().connect_to(transport).await;
        self.inner.tasks.close();
        self.inner.tasks.wait().await;
        let ids: Vec<String> = self.sessions().drain().map(|(id, _)| id).collect();
        for id in ids {
            self.inner.answerer.release(&id);
        }
        served
    }

    /// The agent side of a connection, for `connect_to`/`connect_with`.
    pub fn component(&self) -> impl ConnectTo<Client> + 'static {
        let on_new = self.clone();
        let on_prompt = self.clone();
        let on_mode = self.clone();
        let on_cancel = self.clone();
        AgentRole
            .v1()
            .name(AGENT_NAME)
            .on_receive_request(
                async move |_req: InitializeRequest, responder, _cx| {
                    responder.respond(
                        InitializeResponse::new(agent_client_protocol::schema::ProtocolVersion::V1)
                            .agent_capabilities(AgentCapabilities::new())
                            .agent_info(Implementation::new(
                                AGENT_NAME,
                                env!("CARGO_PKG_VERSION"),
                            )),
                    )
                },
                agent_client_protocol::on_receive_request!(),
            )
            .on_receive_request(
                async move |req: NewSessionRequest, responder, cx| {
                    match on_new.new_session(&req.cwd, cx).await {
                        Ok(response) => responder.respond(response),
                        Err(e) => responder.respond_with_error(e),
                    }
                },
                agent_client_protocol::on_receive_request!(),
            )
            .on_receive_request(
                async move |req: PromptRequest, responder, cx| {
                    let agent = on_prompt.clone();
                    let (session, turn, token) = match agent.begin_prompt(&req.session_id.0) {
                        Ok(begun) => begun,
                        Err(e) => return responder.respond_with_error(e),
                    };
                    // The turn waits on the client (permission requests): run it off the
                    // dispatch loop so the client's answers and `session/cancel` get through.
                    on_prompt.inner.tasks.spawn(async move {
                        let stopped = agent.run_turn(&session, turn, &token, &cx).await;
                        session.state().running = None;
                        let sent = match stopped {
                            Ok(reason) => responder.respond(PromptResponse::new(reason)),
                            Err(e) => responder.respond_with_error(e),
                        };
                        if let Err(e) = sent {
                            tracing::debug!(session = %session.id, error = %e, "the prompt's client is gone");
                        }
                    });
                    Ok(())
                },
                agent_client_protocol::on_receive_request!(),
            )
            .on_receive_request(
                async move |req: SetSessionModeRequest, responder, _cx| {
                    match on_mode.set_mode(&req.session_id.0, &req.mode_id.0).await {
                        Ok(()) => responder.respond(SetSessionModeResponse::new()),
                        Err(e) => responder.respond_with_error(e),
                    }
                },
                agent_client_protocol::on_receive_request!(),
            )
            .on_receive_notification(
                async move |note: CancelNotification, _cx| {
                    on_cancel.cancel(&note.session_id.0);
                    Ok(())
                },
                agent_client_protocol::on_receive_notification!(),
            )
    }

    async fn new_session(
        &self,
        cwd: &Path,
        cx: ConnectionTo<Client>,
    ) -> Result<NewSessionResponse, AcpError> {
        if !cwd.is_absolute() {
            return Err(invalid(format!(
                "cwd {} is not an absolute path",
                cwd.display()
            )));
        }
        if !cwd.is_dir() {
            return Err(invalid(format!("cwd {} is not a directory", cwd.display())));
        }
        let id = format!("acp-{}", uuid::Uuid::new_v4().simple());
        let options = &self.inner.options;
        let agent = self
            .inner
            .service
            .agent(&id, &options.agent_id)
            .await
            .map_err(internal)?;
        let temp = tempfile::Builder::new()
            .prefix("approval-host-acp-")
            .tempdir()
            .map_err(|e| internal(format!("creating the session's temp directory: {e}")))?;
        let runtime = ToolRuntime::new(Some(self.inner.service.clone()));
        BashTool {
            workspace: Workspace {
                root: cwd.to_owned(),
                temp: temp.path().to_owned(),
            },
            mode: options.sandbox_mode,
            timeout: options.command_timeout,
        }
        .register(&runtime)
        .map_err(internal)?;
        let hooks = if options.hooks.is_empty() {
            None
        } else {
            let hooks = Hooks::new(options.hooks.clone(), cwd.to_owned()).map_err(invalid)?;
            Some(runtime.pre_execute("hooks", Scope::Global, Position::Front, hooks))
        };
        self.inner.answerer.own(&agent, id.clone().into(), cx);
        let current = self.inner.service.effective_policy(&agent);
        self.sessions().insert(
            id.clone(),
            Arc::new(AcpSession {
                id: id.clone(),
                agent,
                runtime,
                state: Mutex::new(TurnState {
                    next: 0,
                    running: None,
                }),
                _hooks: hooks,
                _temp: temp,
            }),
        );
        Ok(NewSessionResponse::new(id).modes(session_modes(current)))
    }

    /// Claims the session's next turn, or says why there is none.
    fn begin_prompt(
        &self,
        id: &str,
    ) -> Result<(Arc<AcpSession>, usize, CancellationToken), AcpError> {
        let session = self.session(id)?;
        let token = CancellationToken::new();
        let turn = {
            let mut state = session.state();
            if state.running.is_some() {
                return Err(refused(format!(
                    "session {id:?} is already running a prompt"
                )));
            }
            let turns = self.inner.script.turns.len();
            if state.next >= turns {
                return Err(refused(format!(
                    "the script has no turn {} (it has {turns})",
                    state.next + 1
                )));
            }
            state.running = Some(token.clone());
            state.next += 1;
            state.next - 1
        };
        Ok((session, turn, token))
    }

    async fn run_turn(
        &self,
        session: &AcpSession,
        turn: usize,
        token: &CancellationToken,
        cx: &ConnectionTo<Client>,
    ) -> Result<StopReason, AcpError> {
        let service = &self.inner.service;
        let script = &self.inner.script.turns[turn];
        service.start_turn(&session.id).await.map_err(internal)?;
        for call in &script.tool_calls {
            if token.is_cancelled() {
                break;
            }
            if !notify(cx, &session.id, SessionUpdate::ToolCall(announce(call))) {
                // Nobody is watching: run nothing more for a client that is gone.
                token.cancel();
                break;
            }
            let result = session
                .runtime
                .execute(
                    ToolCall::new(
                        call.call_id.clone(),
                        call.name.clone(),
                        call.arguments.clone(),
                        Some(&session.agent),
                    )
                    .cancel(token.clone()),
                )
                .await;
            let status = if result.is_error {
                ToolCallStatus::Failed
            } else {
                ToolCallStatus::Completed
            };
            let fields = ToolCallUpdateFields::new()
                .status(status)
                .content(vec![result.content.clone().into()])
                .raw_output(serde_json::to_value(&result).ok());
            let update = ToolCallUpdate::new(call.call_id.clone(), fields);
            if !notify(cx, &session.id, SessionUpdate::ToolCallUpdate(update)) {
                token.cancel();
            }
        }
        if !token.is_cancelled() {
            let chunk = ContentChunk::new(ContentBlock::from(script.message.clone()));
            notify(cx, &session.id, SessionUpdate::AgentMessageChunk(chunk));
        }
        service.end_turn(&session.id).await.map_err(internal)?;
        Ok(if token.is_cancelled() {
            StopReason::Cancelled
        } else {
            StopReason::EndTurn
        })
    }

    async fn set_mode(&self, id: &str, mode: &str) -> Result<(), AcpError> {
        let session = self.session(id)?;
        let policy: Policy = mode.parse().map_err(|_| {
            invalid(format!(
                "unknown mode {mode:?} (the modes are {:?} and {:?})",
                Policy::Ask.as_str(),
                Policy::Never.as_str()
            ))
        })?;
        self.inner
            .service
            .set_policy(&session.agent, policy, Some(MODE_SOURCE))
            .await
            .map_err(internal)?;
        Ok(())
    }

    /// Cancels the session's running turn, if any, and its pending permission requests.
    fn cancel(&self, id: &str) {
        self.inner.answerer.cancel(&id.to_owned().into());
        let Ok(session) = self.session(id) else {
            tracing::debug!(session = id, "session/cancel for an unknown session");
            return;
        };
        if let Some(token) = &session.state().running {
            token.cancel();
        }
    }
}

/// The `tool_call` update that announces a scripted call.
fn announce(call: &ScriptedCall) -> AcpToolCall {
    let (title, kind) = match (call.name.as_str(), call.arguments["command"].as_str()) {
        (bash::NAME, Some(command)) => (command.to_owned(), ToolKind::Execute),
        (name, _) => (name.to_owned(), ToolKind::Other),
    };
    AcpToolCall::new(call.call_id.clone(), title)
        .kind(kind)
        .status(ToolCallStatus::Pending)
        .raw_input(call.arguments.clone())
}
