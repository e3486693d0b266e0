//! The ACP answerer against the official `agent-client-protocol` crate as the client, connected
//! in-process: each outcome mapping, the exact wire shape of the permission request, and that
//! foreign and call-less questions never reach the client.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::schema::{
    ContentBlock, InitializeRequest, InitializeResponse, NewSessionRequest, NewSessionResponse,
    PromptRequest, PromptResponse, RequestPermissionOutcome, RequestPermissionRequest,
    RequestPermissionResponse, SelectedPermissionOutcome, StopReason, TextContent,
};
use agent_client_protocol::{Agent as AcpAgent, Client};
use approval_host::acp::AcpAnswerer;
use approval_host::{ApprovalRequest, Position, Scope};
use serde_json::{Value, json};

use crate::support::Host;

/// How the scripted client answers each permission request.
#[derive(Clone, Debug)]
enum Reply {
    Select(&'static str),
    Cancelled,
    Error,
}

/// Runs prompts whose text is a call id (or `foreign:`/`no-call` for the delegation cases)
/// through an ACP agent built on the crate, answered by a client scripted with `replies`.
/// Returns the permission requests the client saw, as JSON.
async fn run(host: &Host, prompts: &[&str], replies: Vec<Reply>) -> Vec<Value> {
    let answerer = AcpAnswerer::new();
    let _reg = host
        .service
        .register("acp", Scope::Global, Position::Back, answerer.clone());
    let seen: Arc<Mutex<Vec<Value>>> = Arc::default();
    let replies = Arc::new(Mutex::new(VecDeque::from(replies)));

    let service = host.service.clone();
    let owned_agent: Arc<Mutex<Option<approval_host::Agent>>> = Arc::default();
    let agent = {
        let answerer = answerer.clone();
        let service_new = service.clone();
        let owned_new = owned_agent.clone();
        let service_prompt = service.clone();
        let owned_prompt = owned_agent.clone();
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
                    let agent = service_new.agent("acp-1", "agent").await.unwrap();
                    service_new.start_turn("acp-1").await.unwrap();
                    answerer.own(&agent, "acp-1".into(), cx.clone());
                    *owned_new.lock().unwrap() = Some(agent);
                    responder.respond(NewSessionResponse::new("acp-1"))
                },
                agent_client_protocol::on_receive_request!(),
            )
            .on_receive_request(
                async move |req: PromptRequest, responder, cx| {
                    let text = match &req.prompt[0] {
                        ContentBlock::Text(t) => t.text.clone(),
                        _ => String::new(),
                    };
                    let service = service_prompt.clone();
                    let owner = owned_prompt.lock().unwrap().clone().unwrap();
                    // Asking awaits the client: off the dispatch loop, with the responder moved.
                    let _ = cx;
                    tokio::spawn(async move {
                        let agent = if text.starts_with("foreign") {
                            service.agent("acp-1", "agent").await.unwrap()
                        } else {
                            owner
                        };
                        let mut request = ApprovalRequest::new(&agent, "bash");
                        if text != "no-call" {
                            request = request.call_id(text.clone());
                        }
                        service.request(request).await.unwrap();
                        responder.respond(PromptResponse::new(StopReason::EndTurn))
                    });
                    Ok(())
                },
                agent_client_protocol::on_receive_request!(),
            )
    };

    let seen_client = seen.clone();
    let prompts: Vec<String> = prompts.iter().map(|p| (*p).to_owned()).collect();
    Client
        .v1()
        .on_receive_request(
            async move |req: RequestPermissionRequest, responder, _cx| {
                seen_client
                    .lock()
                    .unwrap()
                    .push(serde_json::to_value(&req).unwrap());
                match replies
                    .lock()
                    .unwrap()
                    .pop_front()
                    .expect("an unscripted permission request")
                {
                    Reply::Select(id) => responder.respond(RequestPermissionResponse::new(
                        RequestPermissionOutcome::Selected(SelectedPermissionOutcome::new(id)),
                    )),
                    Reply::Cancelled => responder.respond(RequestPermissionResponse::new(
                        RequestPermissionOutcome::Cancelled,
                    )),
                    Reply::Error => {
                        responder.respond_with_error(agent_client_protocol::Error::internal_error())
                    }
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .connect_with(agent, async move |cx| {
            cx.send_request(InitializeRequest::new(ProtocolVersion::V1))
                .block_task()
                .await?;
            let session = cx
                .send_request(NewSessionRequest::new("/tmp"))
                .block_task()
                .await?;
            for p in prompts {
                cx.send_request(PromptRequest::new(
                    session.session_id.clone(),
                    vec![ContentBlock::Text(TextContent::new(p))],
                ))
                .block_task()
                .await?;
            }
            Ok(())
        })
        .await
        .unwrap();
    seen.lock().unwrap().clone()
}

fn outcomes(host: &Host) -> Vec<String> {
    host.events("acp-1")
        .into_iter()
        .filter(|(t, _)| t == "approval/decided")
        .map(|(_, d)| d["outcome"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acp_outcomes_map_and_the_wire_shape_is_exact() {
    let host = Host::new();
    let seen = run(
        &host,
        &["call_1", "call_2", "call_3", "call_4", "call_5"],
        vec![
            Reply::Select("allow-once"),
            Reply::Select("reject-once"),
            Reply::Select("allow-always"),
            Reply::Cancelled,
            Reply::Error,
        ],
    )
    .await;
    assert_eq!(
        outcomes(&host),
        [
            "allowed-once",
            "rejected",
            "rejected",
            "cancelled",
            "unavailable"
        ]
    );
    assert_eq!(
        seen[0],
        json!({"sessionId": "acp-1", "toolCall": {"toolCallId": "call_1"},
               "options": [
                   {"optionId": "allow-once", "name": "Allow once", "kind": "allow_once"},
                   {"optionId": "reject-once", "name": "Reject", "kind": "reject_once"}]})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_agents_and_call_less_questions_never_reach_the_client() {
    let host = Host::new();
    let seen = run(&host, &["foreign-call", "no-call"], vec![]).await;
    assert!(seen.is_empty(), "{seen:?}");
    assert_eq!(outcomes(&host), ["unavailable", "unavailable"]);
}
