//! `approval-host acp` and the scripted ACP agent behind it, driven by the official
//! `agent-client-protocol` crate as the client: in-process over a duplex byte channel, and
//! against the binary as a subprocess. Each test asserts what the client saw (permission
//! requests, session updates, stop reasons) and the session log's event sequence.

use std::any::Any;
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{
    CancelNotification, ContentBlock, InitializeRequest, NewSessionRequest, PromptRequest,
    RequestPermissionOutcome, RequestPermissionRequest, RequestPermissionResponse,
    SelectedPermissionOutcome, SessionId, SessionNotification, SetSessionModeRequest, StopReason,
    TextContent,
};
use agent_client_protocol::{Agent as AgentRole, ByteStreams, Client, ConnectTo};
use approval_host::acp::{AgentOptions, Script, ScriptedAgent};
use approval_host::tools::hooks::HookSpec;
use approval_host::tools::texts::{self, escalation};
use approval_host::{ApprovalService, Policy};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::compat::{TokioAsyncReadCompatExt, TokioAsyncWriteCompatExt};

use crate::support::{events_at, log_path, types};

/// How the client answers each permission request, in order.
#[derive(Clone, Debug)]
pub enum Reply {
    Select(&'static str),
    Cancelled,
    Error,
    /// Drop the responder without answering.
    Drop,
    /// Keep the request pending (the responder is held until the client ends).
    Hold,
}

/// What the client saw.
#[derive(Default, Debug)]
pub struct Seen {
    pub permissions: Vec<Value>,
    pub updates: Vec<Value>,
}

impl Seen {
    /// The `sessionUpdate` kinds in order.
    fn kinds(&self) -> Vec<&str> {
        self.updates
            .iter()
            .map(|u| u["update"]["sessionUpdate"].as_str().unwrap())
            .collect()
    }

    /// The final tool results: `(status, content text)` of each `tool_call_update`.
    fn results(&self) -> Vec<(String, String)> {
        self.updates
            .iter()
            .filter(|u| u["update"]["sessionUpdate"] == "tool_call_update")
            .map(|u| {
                (
                    u["update"]["status"].as_str().unwrap().to_owned(),
                    u["update"]["content"][0]["content"]["text"]
                        .as_str()
                        .unwrap()
                        .to_owned(),
                )
            })
            .collect()
    }
}

/// The client's side of an open session.
pub struct Conn {
    pub cx: ConnectionTo<AgentRole>,
    pub session: SessionId,
    /// The `modes` of the `session/new` response.
    pub modes: Value,
    /// One message per permission request the client received.
    pub asked: mpsc::UnboundedReceiver<()>,
    /// One message per session update the client received.
    pub updated: mpsc::UnboundedReceiver<()>,
}

impl Conn {
    pub fn prompt_request(&self, text: &str) -> PromptRequest {
        PromptRequest::new(
            self.session.clone(),
            vec![ContentBlock::Text(TextContent::new(text))],
        )
    }

    pub async fn prompt(&self) -> Result<StopReason, agent_client_protocol::Error> {
        self.prompt_text("go on").await
    }

    pub async fn prompt_text(
        &self,
        text: &str,
    ) -> Result<StopReason, agent_client_protocol::Error> {
        let response = self
            .cx
            .send_request(self.prompt_request(text))
            .block_task()
            .await?;
        Ok(response.stop_reason)
    }

    async fn set_mode(&self, mode: &str) -> Result<(), agent_client_protocol::Error> {
        self.cx
            .send_request(SetSessionModeRequest::new(
                self.session.clone(),
                mode.to_owned(),
            ))
            .block_task()
            .await
            .map(|_| ())
    }
}

/// Connects a client answering with `replies` over `transport`, opens a session in `cwd`, and
/// runs `body` on it. Returns what the client saw and what `body` returned.
pub async fn drive<T>(
    transport: impl ConnectTo<Client> + 'static,
    cwd: &Path,
    replies: Vec<Reply>,
    body: impl AsyncFnOnce(Conn) -> Result<T, agent_client_protocol::Error>,
) -> (Seen, T) {
    let seen: Arc<Mutex<Seen>> = Arc::default();
    let replies = Arc::new(Mutex::new(VecDeque::from(replies)));
    let held: Arc<Mutex<Vec<Box<dyn Any + Send>>>> = Arc::default();
    let (asked_tx, asked) = mpsc::unbounded_channel();
    let (updated_tx, updated) = mpsc::unbounded_channel();
    let on_permission = seen.clone();
    let on_update = seen.clone();
    let holder = held.clone();
    let cwd = cwd.to_owned();
    let result = Client
        .v1()
        .on_receive_request(
            async move |req: RequestPermissionRequest, responder, _cx| {
                on_permission
                    .lock()
                    .unwrap()
                    .permissions
                    .push(serde_json::to_value(&req).unwrap());
                let reply = replies
                    .lock()
                    .unwrap()
                    .pop_front()
                    .expect("an unscripted permission request");
                let _ = asked_tx.send(());
                match reply {
                    Reply::Select(id) => responder.respond(RequestPermissionResponse::new(
                        RequestPermissionOutcome::Selected(SelectedPermissionOutcome::new(id)),
                    )),
                    Reply::Cancelled => responder.respond(RequestPermissionResponse::new(
                        RequestPermissionOutcome::Cancelled,
                    )),
                    Reply::Error => {
                        responder.respond_with_error(agent_client_protocol::Error::internal_error())
                    }
                    Reply::Drop => {
                        drop(responder);
                        Ok(())
                    }
                    Reply::Hold => {
                        holder.lock().unwrap().push(Box::new(responder));
                        Ok(())
                    }
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_notification(
            async move |note: SessionNotification, _cx| {
                on_update
                    .lock()
                    .unwrap()
                    .updates
                    .push(serde_json::to_value(&note).unwrap());
                let _ = updated_tx.send(());
                Ok(())
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .connect_with(transport, async move |cx| {
            cx.send_request(InitializeRequest::new(ProtocolVersion::V1))
                .block_task()
                .await?;
            let session = cx
                .send_request(NewSessionRequest::new(cwd))
                .block_task()
                .await?;
            let conn = Conn {
                cx,
                session: session.session_id.clone(),
                modes: serde_json::to_value(&session.modes).unwrap(),
                asked,
                updated,
            };
            body(conn).await
        })
        .await
        .unwrap();
    held.lock().unwrap().clear();
    let seen = std::mem::take(&mut *seen.lock().unwrap());
    (seen, result)
}

/// A state directory, a workspace outside /tmp (so the sandbox's temp dir is not the
/// workspace), and the session log's location once the session id is known.
struct Env {
    state: tempfile::TempDir,
    ws: tempfile::TempDir,
}

impl Env {
    fn new() -> Self {
        Env {
            state: tempfile::tempdir().unwrap(),
            ws: tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap(),
        }
    }

    fn events(&self, session: &SessionId) -> Vec<(String, Value)> {
        events_at(&log_path(self.state.path(), &session.0))
    }

    fn ws(&self) -> PathBuf {
        self.ws.path().to_owned()
    }
}

fn script(turns: Value) -> Script {
    Script::parse(
        Path::new("test-script.json"),
        &json!({ "turns": turns }).to_string(),
    )
    .unwrap()
}

/// A hook that asks for every `bash` call, with this reason.
const ASK_HOOK: &str = r#"echo '{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"ask","permissionDecisionReason":"the hook wants a human"}}'"#;

fn ask_hook() -> Vec<HookSpec> {
    vec![HookSpec {
        matcher: "bash".to_owned(),
        command: ASK_HOOK.to_owned(),
        timeout: Duration::from_secs(30),
    }]
}

/// Serves `agent` in-process over a duplex byte channel and drives it; waits for the agent to
/// finish (every running turn settled and audited) before returning.
async fn in_process<T>(
    agent: ScriptedAgent,
    cwd: &Path,
    replies: Vec<Reply>,
    body: impl AsyncFnOnce(Conn) -> Result<T, agent_client_protocol::Error>,
) -> (Seen, T) {
    let (client_end, agent_end) = tokio::io::duplex(1 << 16);
    let (agent_read, agent_write) = tokio::io::split(agent_end);
    let served = tokio::spawn(async move {
        agent
            .serve(ByteStreams::new(
                agent_write.compat_write(),
                agent_read.compat(),
            ))
            .await
    });
    let (client_read, client_write) = tokio::io::split(client_end);
    let out = drive(
        ByteStreams::new(client_write.compat_write(), client_read.compat()),
        cwd,
        replies,
        body,
    )
    .await;
    // The client is gone; the agent returns once its turns are settled.
    let _ = served.await.unwrap();
    out
}

fn agent(env: &Env, policy: Policy, script: Script, hooks: Vec<HookSpec>) -> ScriptedAgent {
    let service = ApprovalService::open_dir(env.state.path(), policy);
    ScriptedAgent::new(
        service,
        script,
        AgentOptions {
            hooks,
            ..AgentOptions::default()
        },
    )
}

fn escalation_turn() -> Value {
    json!([{
        "tool_calls": [{
            "call_id": "call_00_1",
            "name": "bash",
            "arguments": {
                "command": "printf 'escalated\\n' > escalated.txt && cat escalated.txt",
                "sandbox_permissions": "workspace-write",
                "justification": "the user asked to write escalated.txt in the workspace"
            }
        }],
        "message": "wrote escalated.txt"
    }, {
        "tool_calls": [{
            "call_id": "call_01_1",
            "name": "bash",
            "arguments": {"command": "echo again > again.txt"}
        }],
        "message": "tried again without escalating"
    }])
}

const ESCALATION_REASON: &str =
    "escalate sandbox to workspace-write: the user asked to write escalated.txt in the workspace";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acp_escalation_approved_runs_one_call_wider_and_the_grant_dies_with_it() {
    let env = Env::new();
    let agent = agent(&env, Policy::Ask, script(escalation_turn()), vec![]);
    let (seen, (session, stops)) = in_process(
        agent,
        &env.ws(),
        vec![Reply::Select("allow-once")],
        async |conn: Conn| {
            let first = conn.prompt().await?;
            let second = conn.prompt().await?;
            Ok((conn.session, [first, second]))
        },
    )
    .await;
    assert_eq!(stops, [StopReason::EndTurn, StopReason::EndTurn]);
    assert_eq!(
        seen.permissions,
        [json!({"sessionId": session.0,
                "toolCall": {"toolCallId": "call_00_1", "kind": "execute",
                             "title": "bash: printf 'escalated\\n' > escalated.txt && cat escalated.txt",
                             "content": [{"type": "content",
                                          "content": {"type": "text", "text": ESCALATION_REASON}}],
                             "rawInput": {
                                 "command": "printf 'escalated\\n' > escalated.txt && cat escalated.txt",
                                 "sandbox_permissions": "workspace-write",
                                 "justification": "the user asked to write escalated.txt in the workspace"}},
                "options": [
                    {"optionId": "allow-once", "name": "Allow once", "kind": "allow_once"},
                    {"optionId": "reject-once", "name": "Reject", "kind": "reject_once"}]})]
    );
    assert_eq!(
        seen.kinds(),
        [
            "tool_call",
            "tool_call_update",
            "agent_message_chunk",
            "tool_call",
            "tool_call_update",
            "agent_message_chunk"
        ]
    );
    assert_eq!(
        seen.updates[0]["update"],
        json!({"sessionUpdate": "tool_call", "toolCallId": "call_00_1",
               "title": "printf 'escalated\\n' > escalated.txt && cat escalated.txt",
               // `pending`, the default status, goes without saying on the wire.
               "kind": "execute",
               "rawInput": {
                   "command": "printf 'escalated\\n' > escalated.txt && cat escalated.txt",
                   "sandbox_permissions": "workspace-write",
                   "justification": "the user asked to write escalated.txt in the workspace"}})
    );
    let results = seen.results();
    assert_eq!(
        results[0],
        ("completed".to_owned(), "escalated\n".to_owned())
    );
    assert_eq!(results[1].0, "failed");
    assert!(
        results[1]
            .1
            .contains("[sandbox: file access denied under read-only mode]"),
        "{}",
        results[1].1
    );
    assert_eq!(
        seen.updates[2]["update"]["content"],
        json!({"type": "text", "text": "wrote escalated.txt"})
    );
    assert_eq!(
        std::fs::read_to_string(env.ws.path().join("escalated.txt")).unwrap(),
        "escalated\n"
    );
    assert!(!env.ws.path().join("again.txt").exists());

    let events = env.events(&session);
    assert_eq!(
        types(&events),
        [
            "turn/start",
            "tool/call",
            "approval/asked",
            "approval/decided",
            "tool/result",
            "turn/end",
            "turn/start",
            "tool/call",
            "tool/result",
            "turn/end"
        ]
    );
    assert_eq!(
        events[2].1,
        json!({"id": events[2].1["id"], "toolName": "bash", "callId": "call_00_1",
               "reason": ESCALATION_REASON, "agent": "agent"})
    );
    assert_eq!(events[3].1["outcome"], "allowed-once");
    assert_eq!(events[3].1["answerer"], "acp");
    assert_eq!(events[4].1["content"], "escalated\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acp_escalation_rejected_runs_nothing_and_says_so() {
    let env = Env::new();
    let agent = agent(&env, Policy::Ask, script(escalation_turn()), vec![]);
    let (seen, (session, stop)) = in_process(
        agent,
        &env.ws(),
        vec![Reply::Select("reject-once")],
        async |conn: Conn| {
            let stop = conn.prompt().await?;
            Ok((conn.session, stop))
        },
    )
    .await;
    assert_eq!(stop, StopReason::EndTurn);
    assert_eq!(seen.permissions.len(), 1);
    let rejected = format!(
        "{}{}",
        texts::ERROR_PREFIX,
        escalation::rejected("workspace-write")
    );
    assert_eq!(seen.results(), [("failed".to_owned(), rejected.clone())]);
    assert!(!env.ws.path().join("escalated.txt").exists());
    let events = env.events(&session);
    assert_eq!(
        types(&events),
        [
            "turn/start",
            "tool/call",
            "approval/asked",
            "approval/decided",
            "tool/result",
            "turn/end"
        ]
    );
    assert_eq!(events[2].1["reason"], ESCALATION_REASON);
    assert_eq!(events[3].1["outcome"], "rejected");
    assert_eq!(events[4].1["isError"], true);
    assert_eq!(events[4].1["content"], rejected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_cancel_settles_the_pending_question_and_ends_the_turn_cancelled() {
    let env = Env::new();
    let turns = json!([
        {"tool_calls": [
            {"call_id": "c1", "name": "bash", "arguments": {"command": "echo one"}},
            {"call_id": "c2", "name": "bash", "arguments": {"command": "echo two"}}],
         "message": "never said"},
        {"message": "still here"}
    ]);
    let agent = agent(&env, Policy::Ask, script(turns), ask_hook());
    let (seen, (session, stops)) = in_process(
        agent,
        &env.ws(),
        vec![Reply::Hold],
        async |mut conn: Conn| {
            let pending = conn.cx.send_request(conn.prompt_request("go on"));
            // The client holds the permission request and cancels the prompt instead.
            conn.asked.recv().await.unwrap();
            conn.cx
                .send_notification(CancelNotification::new(conn.session.clone()))?;
            let first = pending.block_task().await?.stop_reason;
            let second = conn.prompt().await?;
            Ok((conn.session, [first, second]))
        },
    )
    .await;
    assert_eq!(stops, [StopReason::Cancelled, StopReason::EndTurn]);
    assert_eq!(seen.permissions.len(), 1);
    // The cancelled call reports the abort; the second call never starts.
    assert_eq!(
        seen.results(),
        [(
            "failed".to_owned(),
            format!("{}{}", texts::ERROR_PREFIX, texts::ABORTED_BEFORE_DISPATCH)
        )]
    );
    assert_eq!(
        seen.kinds(),
        ["tool_call", "tool_call_update", "agent_message_chunk"]
    );
    let events = env.events(&session);
    assert_eq!(
        types(&events),
        [
            "turn/start",
            "tool/call",
            "hook/invoked",
            "hook/result",
            "approval/asked",
            "approval/decided",
            "tool/result",
            "turn/end",
            "turn/start",
            "turn/end"
        ]
    );
    assert_eq!(events[4].1["reason"], "the hook wants a human");
    assert_eq!(events[5].1["outcome"], "cancelled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mode_never_rejects_without_a_request_reaching_the_client() {
    let env = Env::new();
    let turns = json!([
        {"tool_calls": [{"call_id": "c1", "name": "bash", "arguments": {"command": "echo -n one"}}],
         "message": "done"}
    ]);
    let agent = agent(&env, Policy::Ask, script(turns), ask_hook());
    let (seen, (session, modes, unknown, stop)) =
        in_process(agent, &env.ws(), vec![], async |conn: Conn| {
            let unknown = conn.set_mode("sometimes").await.unwrap_err();
            conn.set_mode("never").await?;
            let stop = conn.prompt().await?;
            Ok((conn.session, conn.modes, unknown, stop))
        })
        .await;
    assert_eq!(
        modes,
        json!({"currentModeId": "ask", "availableModes": [
            {"id": "ask", "name": "Ask",
             "description": "approval requests go to the deployment's answerers, then to you"},
            {"id": "never", "name": "Never ask",
             "description": "every approval request is rejected before any answerer runs"}]})
    );
    assert_eq!(
        unknown.data,
        Some(
            json!({"message": "unknown mode \"sometimes\" (the modes are \"ask\" and \"never\")"})
        )
    );
    assert_eq!(stop, StopReason::EndTurn);
    assert!(seen.permissions.is_empty(), "{:?}", seen.permissions);
    assert_eq!(
        seen.results(),
        [(
            "failed".to_owned(),
            format!(
                "{}{}",
                texts::ERROR_PREFIX,
                texts::approval_rejected("bash")
            )
        )]
    );
    let events = env.events(&session);
    assert_eq!(
        types(&events),
        [
            "approval/policy",
            "turn/start",
            "tool/call",
            "hook/invoked",
            "hook/result",
            "approval/asked",
            "approval/decided",
            "tool/result",
            "turn/end"
        ]
    );
    assert_eq!(events[0].1, json!({"policy": "never", "source": "acp"}));
    assert_eq!(events[6].1["outcome"], "rejected");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_connection_settles_the_pending_question_unavailable() {
    let env = Env::new();
    let turns = json!([
        {"tool_calls": [
            {"call_id": "c1", "name": "bash", "arguments": {"command": "echo one"}},
            {"call_id": "c2", "name": "bash", "arguments": {"command": "echo two > two.txt"}}],
         "message": "never said"}
    ]);
    let agent = agent(&env, Policy::Ask, script(turns), ask_hook());
    let (seen, session) = in_process(
        agent,
        &env.ws(),
        vec![Reply::Hold],
        async |mut conn: Conn| {
            let pending = conn.cx.send_request(conn.prompt_request("go on"));
            conn.asked.recv().await.unwrap();
            // The client goes away with the question pending.
            pending.detach();
            Ok(conn.session)
        },
    )
    .await;
    assert_eq!(seen.permissions.len(), 1);
    let events = env.events(&session);
    assert_eq!(
        types(&events),
        [
            "turn/start",
            "tool/call",
            "hook/invoked",
            "hook/result",
            "approval/asked",
            "approval/decided",
            "tool/result",
            "turn/end"
        ]
    );
    assert_eq!(events[5].1["outcome"], "unavailable");
    assert_eq!(
        events[6].1["content"],
        format!(
            "{}{}",
            texts::ERROR_PREFIX,
            texts::approval_unavailable("bash")
        )
    );
    // Nothing more ran for a client that is gone.
    assert!(!env.ws.path().join("two.txt").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prompts_past_the_script_and_bad_sessions_are_errors() {
    let env = Env::new();
    let agent = agent(
        &env,
        Policy::Ask,
        script(json!([{"message": "only"}])),
        vec![],
    );
    let (_seen, (exhausted, unknown, bad_cwd)) =
        in_process(agent, &env.ws(), vec![], async |conn: Conn| {
            conn.prompt().await?;
            let exhausted = conn.prompt().await.unwrap_err();
            let unknown = conn
                .cx
                .send_request(SetSessionModeRequest::new("acp-nope", "never"))
                .block_task()
                .await
                .unwrap_err();
            let bad_cwd = conn
                .cx
                .send_request(NewSessionRequest::new("relative/dir"))
                .block_task()
                .await
                .unwrap_err();
            Ok((exhausted, unknown, bad_cwd))
        })
        .await;
    assert_eq!(
        exhausted.data,
        Some(json!({"message": "the script has no turn 2 (it has 1)"}))
    );
    assert_eq!(
        unknown.data,
        Some(json!({"message": "unknown session \"acp-nope\""}))
    );
    assert_eq!(
        bad_cwd.data,
        Some(json!({"message": "cwd relative/dir is not an absolute path"}))
    );
}

/// The binary as a subprocess, over its stdin and stdout.
struct Subprocess {
    child: tokio::process::Child,
}

impl Subprocess {
    fn spawn(env: &Env, config: &str, turns: Value) -> (Self, impl ConnectTo<Client> + 'static) {
        let dir = env.state.path();
        std::fs::write(dir.join("deployment.toml"), config).unwrap();
        std::fs::write(
            dir.join("script.json"),
            json!({ "turns": turns }).to_string(),
        )
        .unwrap();
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_approval-host"))
            .arg("--state-dir")
            .arg(dir)
            .arg("acp")
            .arg("--config")
            .arg(dir.join("deployment.toml"))
            .arg("--script")
            .arg(dir.join("script.json"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let transport = ByteStreams::new(
            child.stdin.take().unwrap().compat_write(),
            child.stdout.take().unwrap().compat(),
        );
        (Subprocess { child }, transport)
    }

    /// Waits for the process to exit after its client closed stdin; returns its stderr.
    async fn finish(self) -> String {
        let output = self.child.wait_with_output().await.unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert!(output.status.success(), "{:?}: {stderr}", output.status);
        stderr
    }
}

fn deployment_with_ask_hook() -> String {
    format!("[[hook]]\nevent = \"PreToolUse\"\nmatcher = \"bash\"\ncommand = '''{ASK_HOOK}'''\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_maps_every_client_answer_and_gives_distinct_deny_texts() {
    let env = Env::new();
    let calls: Vec<Value> = (1..=6)
        .map(|i| {
            json!({"call_id": format!("call_{i}"), "name": "bash",
                        "arguments": {"command": format!("echo ran-{i}")}})
        })
        .collect();
    let (process, transport) = Subprocess::spawn(
        &env,
        &deployment_with_ask_hook(),
        json!([{"tool_calls": calls, "message": "all asked"}]),
    );
    let (seen, (session, stop)) = drive(
        transport,
        &env.ws(),
        vec![
            Reply::Select("allow-once"),
            Reply::Select("reject-once"),
            Reply::Select("allow-always"),
            Reply::Cancelled,
            Reply::Error,
            Reply::Drop,
        ],
        async |conn: Conn| {
            let stop = conn.prompt().await?;
            Ok((conn.session, stop))
        },
    )
    .await;
    let stderr = process.finish().await;
    assert_eq!(stop, StopReason::EndTurn);
    assert_eq!(seen.permissions.len(), 6);
    assert_eq!(
        seen.permissions[1],
        json!({"sessionId": session.0,
               "toolCall": {"toolCallId": "call_2", "kind": "execute", "title": "bash: echo ran-2",
                            "content": [{"type": "content",
                                         "content": {"type": "text", "text": "the hook wants a human"}}],
                            "rawInput": {"command": "echo ran-2"}},
               "options": [
                   {"optionId": "allow-once", "name": "Allow once", "kind": "allow_once"},
                   {"optionId": "reject-once", "name": "Reject", "kind": "reject_once"}]})
    );
    let error = |text: String| {
        (
            "failed".to_owned(),
            format!("{}{text}", texts::ERROR_PREFIX),
        )
    };
    assert_eq!(
        seen.results(),
        [
            ("completed".to_owned(), "ran-1\n".to_owned()),
            error(texts::approval_rejected("bash")),
            error(texts::approval_rejected("bash")),
            error(texts::approval_cancelled("bash")),
            error(texts::approval_unavailable("bash")),
            error(texts::approval_unavailable("bash")),
        ]
    );
    let outcomes: Vec<Value> = env
        .events(&session)
        .into_iter()
        .filter(|(t, _)| t == "approval/decided")
        .map(|(_, d)| d["outcome"].clone())
        .collect();
    assert_eq!(
        outcomes,
        [
            "allowed-once",
            "rejected",
            "rejected",
            "cancelled",
            "unavailable",
            "unavailable"
        ]
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_cancels_and_switches_modes() {
    let env = Env::new();
    let (process, transport) = Subprocess::spawn(
        &env,
        &deployment_with_ask_hook(),
        json!([
            {"tool_calls": [{"call_id": "c1", "name": "bash", "arguments": {"command": "echo -n one"}}],
             "message": "never said"},
            {"tool_calls": [{"call_id": "c2", "name": "bash", "arguments": {"command": "echo two"}}],
             "message": "asked nobody"}
        ]),
    );
    let (seen, (session, stops)) = drive(
        transport,
        &env.ws(),
        vec![Reply::Hold],
        async |mut conn: Conn| {
            let pending = conn.cx.send_request(conn.prompt_request("go on"));
            conn.asked.recv().await.unwrap();
            conn.cx
                .send_notification(CancelNotification::new(conn.session.clone()))?;
            let first = pending.block_task().await?.stop_reason;
            conn.set_mode("never").await?;
            let second = conn.prompt().await?;
            Ok((conn.session, [first, second]))
        },
    )
    .await;
    process.finish().await;
    assert_eq!(stops, [StopReason::Cancelled, StopReason::EndTurn]);
    assert_eq!(seen.permissions.len(), 1);
    let decided: Vec<Value> = env
        .events(&session)
        .into_iter()
        .filter(|(t, _)| t == "approval/decided" || t == "approval/policy")
        .map(|(t, d)| json!([t, d.get("outcome").or(d.get("policy"))]))
        .collect();
    assert_eq!(
        decided,
        [
            json!(["approval/decided", "cancelled"]),
            json!(["approval/policy", "never"]),
            json!(["approval/decided", "rejected"])
        ]
    );
}

#[test]
fn the_binary_refuses_a_bad_script_naming_the_file_and_the_place() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("deployment.toml");
    std::fs::write(&config, "").unwrap();
    let script = dir.path().join("script.json");
    std::fs::write(
        &script,
        r#"{"turns": [{"message": "m", "tool_calls": [{"name": "bash"}]}]}"#,
    )
    .unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_approval-host"))
        .arg("--state-dir")
        .arg(dir.path())
        .args(["acp", "--config"])
        .arg(&config)
        .arg("--script")
        .arg(&script)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(output.stdout.is_empty());
    assert_eq!(
        String::from_utf8_lossy(&output.stderr),
        format!(
            "approval-host: {}: turns[0].tool_calls[0].call_id: missing\n",
            script.display()
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_runs_the_escalation_scenarios() {
    let env = Env::new();
    let (process, transport) = Subprocess::spawn(
        &env,
        "[sandbox]\nmode = \"read-only\"\n",
        json!([
            escalation_turn()[0],
            {"tool_calls": [{"call_id": "call_02_1", "name": "bash", "arguments": {
                "command": "echo rejected > rejected.txt",
                "sandbox_permissions": "workspace-write",
                "justification": "the user asked to write rejected.txt"}}],
             "message": "the user said no"}
        ]),
    );
    let (seen, (session, stops)) = drive(
        transport,
        &env.ws(),
        vec![Reply::Select("allow-once"), Reply::Select("reject-once")],
        async |conn: Conn| {
            let approved = conn.prompt().await?;
            let rejected = conn.prompt().await?;
            Ok((conn.session, [approved, rejected]))
        },
    )
    .await;
    process.finish().await;
    assert_eq!(stops, [StopReason::EndTurn, StopReason::EndTurn]);
    assert_eq!(
        seen.results(),
        [
            ("completed".to_owned(), "escalated\n".to_owned()),
            (
                "failed".to_owned(),
                format!(
                    "{}{}",
                    texts::ERROR_PREFIX,
                    escalation::rejected("workspace-write")
                )
            )
        ]
    );
    assert!(env.ws.path().join("escalated.txt").exists());
    assert!(!env.ws.path().join("rejected.txt").exists());
    let events = env.events(&session);
    let turn = [
        "turn/start",
        "tool/call",
        "approval/asked",
        "approval/decided",
        "tool/result",
        "turn/end",
    ];
    assert_eq!(types(&events), [turn, turn].concat());
    assert_eq!(events[2].1["reason"], ESCALATION_REASON);
    assert_eq!(events[3].1["outcome"], "allowed-once");
    assert_eq!(
        events[8].1["reason"],
        "escalate sandbox to workspace-write: the user asked to write rejected.txt"
    );
    assert_eq!(events[9].1["outcome"], "rejected");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shipped_example_runs_as_the_readme_says() {
    let env = Env::new();
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/acp");
    let config = std::fs::read_to_string(examples.join("deployment.toml")).unwrap();
    let script: Value =
        serde_json::from_str(&std::fs::read_to_string(examples.join("script.json")).unwrap())
            .unwrap();
    let (process, transport) = Subprocess::spawn(&env, &config, script["turns"].clone());
    let (seen, stops) = drive(
        transport,
        &env.ws(),
        vec![Reply::Select("allow-once"), Reply::Select("reject-once")],
        async |conn: Conn| Ok([conn.prompt().await?, conn.prompt().await?]),
    )
    .await;
    process.finish().await;
    assert_eq!(stops, [StopReason::EndTurn, StopReason::EndTurn]);
    let asked: Vec<&Value> = seen
        .permissions
        .iter()
        .map(|p| &p["toolCall"]["toolCallId"])
        .collect();
    assert_eq!(asked, ["call_00_2", "call_01_1"]);
    let results = seen.results();
    assert_eq!(results[0].0, "completed");
    assert_eq!(
        results[1],
        ("completed".to_owned(), "escalated\n".to_owned())
    );
    assert_eq!(
        results[2],
        (
            "failed".to_owned(),
            format!(
                "{}{}",
                texts::ERROR_PREFIX,
                texts::approval_rejected("bash")
            )
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_cancel_kills_a_running_command() {
    let env = Env::new();
    let turns = json!([
        {"tool_calls": [
            {"call_id": "c1", "name": "bash", "arguments": {"command": "sleep 30"}},
            {"call_id": "c2", "name": "bash", "arguments": {"command": "echo never"}}],
         "message": "never said"}
    ]);
    let agent = agent(&env, Policy::Ask, script(turns), vec![]);
    let (seen, (session, stop)) = in_process(agent, &env.ws(), vec![], async |mut conn: Conn| {
        let pending = conn.cx.send_request(conn.prompt_request("go on"));
        // The `tool_call` announcement comes just before the command starts.
        conn.updated.recv().await.unwrap();
        conn.cx
            .send_notification(CancelNotification::new(conn.session.clone()))?;
        let stop = pending.block_task().await?.stop_reason;
        Ok((conn.session, stop))
    })
    .await;
    assert_eq!(stop, StopReason::Cancelled);
    let results = seen.results();
    assert_eq!(results.len(), 1, "{results:?}");
    assert_eq!(results[0].0, "failed");
    // Cancelled before the body (the announcement raced the cancel) or while the command ran.
    let aborted = format!("{}{}", texts::ERROR_PREFIX, texts::ABORTED_BEFORE_DISPATCH);
    let killed = format!("{}{}", texts::ERROR_PREFIX, texts::COMMAND_CANCELLED);
    assert!(
        results[0].1 == aborted || results[0].1 == killed,
        "{}",
        results[0].1
    );
    assert_eq!(
        types(&env.events(&session)),
        ["turn/start", "tool/call", "tool/result", "turn/end"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn always_allow_from_the_client_adds_a_project_rule_that_answers_the_next_call() {
    use approval_host::rules;
    let env = Env::new();
    let service = ApprovalService::open_dir(env.state.path(), Policy::Ask);
    let book = approval_host::assemble::rule_book(
        service.store(),
        &approval_host::Deployment::embedded(),
        rules::system_clock(),
    )
    .unwrap();
    service.set_rules(Some(book.clone()));
    let turns = json!([
        {"tool_calls": [{"call_id": "call_00_1", "name": "bash",
                         "arguments": {"command": "echo -n one"}}],
         "message": "one"},
        {"tool_calls": [{"call_id": "call_01_1", "name": "bash",
                         "arguments": {"command": "echo two"}}],
         "message": "two"}
    ]);
    let agent = ScriptedAgent::new(
        service,
        script(turns),
        AgentOptions {
            hooks: ask_hook(),
            ..AgentOptions::default()
        },
    );
    // One scripted reply: a second permission request would panic the client.
    let (seen, session) = in_process(
        agent,
        &env.ws(),
        vec![Reply::Select(approval_host::acp::ALLOW_ALWAYS)],
        async |conn: Conn| {
            conn.prompt().await?;
            conn.prompt().await?;
            Ok(conn.session)
        },
    )
    .await;
    assert_eq!(seen.permissions.len(), 1);
    assert_eq!(
        seen.permissions[0]["options"],
        json!([
            {"optionId": "allow-once", "name": "Allow once", "kind": "allow_once"},
            {"optionId": "allow-always", "name": "Always allow bash(echo:*) in this project",
             "kind": "allow_always"},
            {"optionId": "reject-once", "name": "Reject", "kind": "reject_once"},
            {"optionId": "reject-always", "name": "Always reject bash(echo:*) in this project",
             "kind": "reject_always"}
        ])
    );
    let results = seen.results();
    assert_eq!(results[0], ("completed".to_owned(), "one".to_owned()));
    assert_eq!(results[1], ("completed".to_owned(), "two\n".to_owned()));
    let decided: Vec<Value> = env
        .events(&session)
        .into_iter()
        .filter(|(t, _)| t == "approval/decided")
        .map(|(_, d)| d)
        .collect();
    let id = decided[0]["ruleAdded"].as_str().unwrap();
    assert_eq!(decided[0]["answerer"], "acp");
    assert_eq!(decided[1]["answerer"], format!("rule:{id}"));
    let listed = book.list(None);
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].rule, "bash(echo:*)");
    assert_eq!(listed[0].creator, "answerer:acp");
    assert_eq!(listed[0].session, None);
}
