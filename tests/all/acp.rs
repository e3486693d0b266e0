//! The ACP answerer as a library piece, mounted the way a harness author would in their own ACP
//! agent (a few handlers on the crate's agent builder), with the official crate as the client:
//! each outcome mapping, the exact wire shape of the permission request, that foreign and
//! call-less questions never reach the client, and `session/cancel` settling a pending request.

use std::sync::{Arc, Mutex};

use agent_client_protocol::v1::schema::{
    CancelNotification, ContentBlock, InitializeRequest, InitializeResponse, NewSessionRequest,
    NewSessionResponse, PromptRequest, PromptResponse, StopReason,
};
use agent_client_protocol::{Agent as AcpAgent, Client, ConnectTo};
use approval_host::acp::AcpAnswerer;
use approval_host::{ApprovalRequest, Outcome, Position, Scope};
use serde_json::json;

use crate::acp_agent::{Conn, Reply, drive};
use crate::support::Host;

const SESSION: &str = "acp-1";

/// A harness's own ACP agent with the answerer mounted. Its prompt text is the call id to ask
/// about (`foreign:<id>` asks from another agent object of the same session, `no-call` asks
/// without a call id, `described:<id>` records the call's arguments and gives a reason first);
/// the prompt ends `cancelled` when the question did.
fn harness(host: &Host) -> impl ConnectTo<Client> + 'static {
    let answerer = AcpAnswerer::new();
    let registration =
        host.service
            .register("acp", Scope::Global, Position::Last, answerer.clone());
    let owner: Arc<Mutex<Option<approval_host::Agent>>> = Arc::default();
    let (on_new, on_cancel) = (answerer.clone(), answerer);
    let (service_new, service_prompt) = (host.service.clone(), host.service.clone());
    let owner_new = owner.clone();
    AcpAgent
        .v1()
        .on_receive_request(
            async move |init: InitializeRequest, responder, _cx| {
                responder.respond(InitializeResponse::new(init.protocol_version))
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |_req: NewSessionRequest, responder, cx| {
                let agent = service_new.agent(SESSION, "agent").await.unwrap();
                service_new.start_turn(SESSION).await.unwrap();
                // The one line that routes this session's questions to this client.
                on_new.own(&agent, SESSION.into(), cx);
                *owner_new.lock().unwrap() = Some(agent);
                responder.respond(NewSessionResponse::new(SESSION))
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: PromptRequest, responder, _cx| {
                let _keep = &registration;
                let text = match &req.prompt[0] {
                    ContentBlock::Text(t) => t.text.clone(),
                    _ => String::new(),
                };
                let service = service_prompt.clone();
                let owner = owner.lock().unwrap().clone().unwrap();
                // Asking waits on the client: off the dispatch loop, with the responder moved.
                tokio::spawn(async move {
                    let agent = match text.strip_prefix("foreign:") {
                        Some(_) => service.agent(SESSION, "agent").await.unwrap(),
                        None => owner,
                    };
                    let mut request = ApprovalRequest::new(&agent, "bash");
                    if let Some(id) = text.strip_prefix("described:") {
                        // The call recorded and a reason given: the request describes both.
                        service
                            .record_tool_call(
                                &agent,
                                id,
                                "bash",
                                json!({"command": "rm -rf build"}),
                            )
                            .await
                            .unwrap();
                        request = request.call_id(id).reason("clean the build directory");
                    } else if text != "no-call" {
                        let id = text.strip_prefix("foreign:").unwrap_or(&text);
                        request = request.call_id(id);
                    }
                    let outcome = service.request(request).await.unwrap();
                    responder.respond(PromptResponse::new(match outcome {
                        Outcome::Cancelled => StopReason::Cancelled,
                        _ => StopReason::EndTurn,
                    }))
                });
                Ok(())
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_notification(
            async move |note: CancelNotification, _cx| {
                on_cancel.cancel(&note.session_id);
                Ok(())
            },
            agent_client_protocol::on_receive_notification!(),
        )
}

fn outcomes(host: &Host) -> Vec<String> {
    host.events(SESSION)
        .into_iter()
        .filter(|(t, _)| t == "approval/decided")
        .map(|(_, d)| d["outcome"].as_str().unwrap().to_owned())
        .collect()
}

async fn prompts(
    conn: &Conn,
    texts: &[&str],
) -> Result<Vec<StopReason>, agent_client_protocol::Error> {
    let mut stops = Vec::new();
    for text in texts {
        stops.push(conn.prompt_text(text).await?);
    }
    Ok(stops)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acp_outcomes_map_and_the_wire_shape_is_exact() {
    let host = Host::new();
    let (seen, _) = drive(
        harness(&host),
        host.dir.path(),
        vec![
            Reply::Select("allow-once"),
            Reply::Select("reject-once"),
            Reply::Select("allow-always"),
            Reply::Cancelled,
            Reply::Error,
            Reply::Drop,
        ],
        async |conn: Conn| {
            prompts(
                &conn,
                &["call_1", "call_2", "call_3", "call_4", "call_5", "call_6"],
            )
            .await
        },
    )
    .await;
    assert_eq!(
        outcomes(&host),
        [
            "allowed-once",
            "rejected",
            "rejected",
            "cancelled",
            "unavailable",
            "unavailable"
        ]
    );
    assert_eq!(
        seen.permissions[0],
        json!({"sessionId": "acp-1", "toolCall": {"toolCallId": "call_1"},
               "options": [
                   {"optionId": "allow-once", "name": "Allow once", "kind": "allow_once"},
                   {"optionId": "reject-once", "name": "Reject", "kind": "reject_once"}]})
    );
    let decided: Vec<_> = host
        .events(SESSION)
        .into_iter()
        .filter(|(t, _)| t == "approval/decided")
        .collect();
    assert_eq!(decided[0].1["answerer"], "acp");
    assert_eq!(
        decided[4].1["failure"],
        json!({"plugin": "acp", "kind": "error"})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permission_request_describes_the_call_and_carries_the_reason() {
    let host = Host::new();
    let (seen, _) = drive(
        harness(&host),
        host.dir.path(),
        vec![Reply::Select("reject-once")],
        async |conn: Conn| prompts(&conn, &["described:call_9"]).await,
    )
    .await;
    assert_eq!(outcomes(&host), ["rejected"]);
    assert_eq!(
        seen.permissions[0]["toolCall"],
        json!({"toolCallId": "call_9", "title": "bash: rm -rf build", "kind": "execute",
               "rawInput": {"command": "rm -rf build"},
               "content": [{"type": "content",
                            "content": {"type": "text", "text": "clean the build directory"}}]})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_agents_and_call_less_questions_never_reach_the_client() {
    let host = Host::new();
    let (seen, _) = drive(
        harness(&host),
        host.dir.path(),
        vec![],
        async |conn: Conn| prompts(&conn, &["foreign:call_1", "no-call"]).await,
    )
    .await;
    assert!(seen.permissions.is_empty(), "{:?}", seen.permissions);
    assert_eq!(outcomes(&host), ["unavailable", "unavailable"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_cancel_settles_a_pending_permission_request_cancelled() {
    let host = Host::new();
    let (seen, stops) = drive(
        harness(&host),
        host.dir.path(),
        vec![Reply::Hold, Reply::Select("allow-once")],
        async |mut conn: Conn| {
            let pending = conn.cx.send_request(conn.prompt_request("call_1"));
            conn.asked.recv().await.unwrap();
            conn.cx
                .send_notification(CancelNotification::new(conn.session.clone()))?;
            let first = pending.block_task().await?.stop_reason;
            // Only the pending request was cancelled: the next one is asked as usual.
            let second = conn.prompt_text("call_2").await?;
            Ok([first, second])
        },
    )
    .await;
    assert_eq!(stops, [StopReason::Cancelled, StopReason::EndTurn]);
    assert_eq!(seen.permissions.len(), 2);
    assert_eq!(outcomes(&host), ["cancelled", "allowed-once"]);
}
