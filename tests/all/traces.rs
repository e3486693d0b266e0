//! OpenTelemetry traces (issue 30): with `[telemetry] otlp-endpoint`, every question becomes a
//! span tree exported over OTLP/HTTP to a real receiver (decoding the official protobuf
//! messages): the request span continues the caller's trace from `_meta.traceparent` (JSON-RPC)
//! or `TRACEPARENT` (the hook), with one child per commit and per waterfall hop, in order, with
//! exact names and attributes; a malformed traceparent starts a trace of its own and changes no
//! answer; `/metrics` counts the spans exported; a collector that is down changes no answer and
//! its spans are counted lost.

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use approval_host::telemetry::{attribute, span};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value;
use opentelemetry_proto::tonic::trace::v1::{Span, span::SpanKind};
use prost::Message;
use serde_json::json;
use sha2::Digest;

use crate::serve::Client;

const PARENT_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_SPAN: &str = "00f067aa0ba902b7";

/// One exported span, with its resource's service name.
#[derive(Debug, Clone)]
struct Got {
    service: String,
    span: Span,
}

impl Got {
    fn attr(&self, key: &str) -> Option<String> {
        self.span
            .attributes
            .iter()
            .find(|kv| kv.key == key)
            .and_then(|kv| match kv.value.as_ref()?.value.as_ref()? {
                any_value::Value::StringValue(s) => Some(s.clone()),
                other => Some(format!("{other:?}")),
            })
    }
}

/// An OTLP/HTTP traces receiver on loopback, keeping what it is sent.
struct Receiver {
    addr: std::net::SocketAddr,
    spans: Arc<Mutex<Vec<Got>>>,
    _runtime: tokio::runtime::Runtime,
}

impl Receiver {
    fn start() -> Receiver {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let spans: Arc<Mutex<Vec<Got>>> = Arc::default();
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let kept = spans.clone();
        let app = axum::Router::new().route(
            "/v1/traces",
            axum::routing::post(move |body: axum::body::Bytes| {
                let kept = kept.clone();
                async move {
                    let request = ExportTraceServiceRequest::decode(body).unwrap();
                    let mut kept = kept.lock().unwrap();
                    for resource in request.resource_spans {
                        let service = resource
                            .resource
                            .iter()
                            .flat_map(|r| &r.attributes)
                            .find(|kv| kv.key == "service.name")
                            .and_then(|kv| match kv.value.as_ref()?.value.as_ref()? {
                                any_value::Value::StringValue(s) => Some(s.clone()),
                                _ => None,
                            })
                            .unwrap_or_default();
                        for scope in resource.scope_spans {
                            for span in scope.spans {
                                kept.push(Got {
                                    service: service.clone(),
                                    span,
                                });
                            }
                        }
                    }
                    (
                        [("content-type", "application/x-protobuf")],
                        ExportTraceServiceResponse::default().encode_to_vec(),
                    )
                }
            }),
        );
        runtime.spawn(async move { axum::serve(listener, app).await });
        Receiver {
            addr,
            spans,
            _runtime: runtime,
        }
    }

    fn spans(&self) -> Vec<Got> {
        self.spans.lock().unwrap().clone()
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn deployment(dir: &Path, receiver: &Receiver) -> (std::path::PathBuf, String) {
    std::fs::write(dir.join("deny.wasm"), approval_host::bundled::DENY_COMMANDS).unwrap();
    let digest = hex(&sha2::Sha256::digest(approval_host::bundled::DENY_COMMANDS));
    let path = dir.join("deploy.toml");
    std::fs::write(
        &path,
        format!(
            "[telemetry]\notlp-endpoint = \"http://{}\"\nservice-name = \"approval-test\"\n\n\
             [[rule]]\nrule = \"Bash(ls:*)\"\n\n\
             [[plugin]]\nname = \"no-rm\"\npath = \"deny.wasm\"\nrole = \"gate\"\n\
             [plugin.config]\npatterns = \"rm \"\n",
            receiver.addr
        ),
    )
    .unwrap();
    (path, digest)
}

/// The spans of the question whose request span has `question` as its id, the request span
/// first, then its children in start order.
fn tree(spans: &[Got], question: &str) -> (Got, Vec<Got>) {
    let root = spans
        .iter()
        .find(|g| {
            g.span.name == span::REQUEST && g.attr(attribute::QUESTION).as_deref() == Some(question)
        })
        .unwrap_or_else(|| panic!("no request span for {question}: {spans:#?}"))
        .clone();
    let mut children: Vec<Got> = spans
        .iter()
        .filter(|g| g.span.parent_span_id == root.span.span_id)
        .cloned()
        .collect();
    children.sort_by_key(|g| (g.span.start_time_unix_nano, g.span.end_time_unix_nano));
    for child in &children {
        assert_eq!(child.span.trace_id, root.span.trace_id);
        assert!(
            child.span.start_time_unix_nano >= root.span.start_time_unix_nano
                && child.span.end_time_unix_nano <= root.span.end_time_unix_nano
                && child.span.start_time_unix_nano <= child.span.end_time_unix_nano,
            "{child:#?} outside {root:#?}"
        );
    }
    (root, children)
}

/// Each child as `name listener? decision? record?`.
fn shape(children: &[Got]) -> Vec<String> {
    children
        .iter()
        .map(|c| {
            let mut line = c.span.name.clone();
            for key in [attribute::LISTENER, attribute::DECISION, attribute::RECORD] {
                if let Some(v) = c.attr(key) {
                    line.push(' ');
                    line.push_str(&v);
                }
            }
            line
        })
        .collect()
}

/// The question ids of `session`'s log, in order.
fn questions(state: &Path, session: &str) -> Vec<String> {
    crate::support::events_at(&crate::support::log_path(state, session))
        .into_iter()
        .filter(|(t, _)| t == "approval/asked")
        .map(|(_, v)| v["id"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn a_request_s_span_tree_continues_the_caller_s_trace_from_meta_traceparent() {
    let dir = tempfile::tempdir().unwrap();
    let receiver = Receiver::start();
    let (config, digest) = deployment(dir.path(), &receiver);
    let state = dir.path().join("state");
    let mut client = Client::spawn(&state, &config, &["--no-watch"]);
    client.call(
        "initialize",
        json!({"protocolVersion": "0.1", "answerer": true}),
    );
    client.call("session/open", json!({"sessionId": "s1", "agentId": "a"}));
    client.call("turn/start", json!({"sessionId": "s1"}));
    let traceparent = format!("00-{PARENT_TRACE}-{PARENT_SPAN}-01");
    let mut ask = |call: &str, command: &str, meta: serde_json::Value| {
        client.call(
            "tool/call",
            json!({"sessionId": "s1", "agentId": "a", "callId": call, "name": "Bash",
                   "arguments": {"command": command}}),
        );
        let mut params =
            json!({"sessionId": "s1", "agentId": "a", "toolName": "Bash", "callId": call});
        if !meta.is_null() {
            params["_meta"] = meta;
        }
        client.call("approval/request", params)["outcome"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert_eq!(
        ask("c1", "rm -rf x", json!({ "traceparent": traceparent })),
        "rejected"
    );
    assert_eq!(ask("c2", "ls -la", serde_json::Value::Null), "allowed-once");
    // Hostile or broken values: each question answered as without them, on a trace of its own.
    let bad = [
        json!({"traceparent": format!("00-{}-{PARENT_SPAN}-01", "0".repeat(32))}),
        json!({"traceparent": format!("00-{}-{PARENT_SPAN}-01", PARENT_TRACE.to_uppercase())}),
        json!({"traceparent": 7}),
        json!("not an object"),
        json!({"traceparent": format!("ff-{PARENT_TRACE}-{PARENT_SPAN}-01")}),
    ];
    for (i, meta) in bad.iter().enumerate() {
        assert_eq!(
            ask(&format!("b{i}"), "rm -rf y", meta.clone()),
            "rejected",
            "{meta}"
        );
    }
    // Nothing in process decides `cat`: the client is asked, and its answer is a wait.
    client.call(
        "tool/call",
        json!({"sessionId": "s1", "agentId": "a", "callId": "p1", "name": "Bash",
               "arguments": {"command": "cat notes"}}),
    );
    let id = client.send(
        "approval/request",
        json!({"sessionId": "s1", "agentId": "a", "toolName": "Bash", "callId": "p1",
               "_meta": {"traceparent": traceparent}}),
    );
    let prompt = client.prompt();
    client.reply(&prompt, json!({"decision": "allow-once"}));
    assert_eq!(client.response(id)["result"]["outcome"], "allowed-once");
    client.call("turn/end", json!({"sessionId": "s1"}));
    // Closing stdin ends the server, which exports every trace before it exits.
    client.close_input();
    assert!(client.child.wait().unwrap().success());

    let spans = receiver.spans();
    let ids = questions(&state, "s1");
    assert_eq!(ids.len(), 8);
    assert!(spans.iter().all(|g| g.service == "approval-test"));

    // The rejected call: a child of the caller's span, on the caller's trace.
    let (root, children) = tree(&spans, &ids[0]);
    assert_eq!(hex(&root.span.trace_id), PARENT_TRACE);
    assert_eq!(hex(&root.span.parent_span_id), PARENT_SPAN);
    assert_eq!(root.span.kind, SpanKind::Server as i32);
    let attrs: HashMap<&str, Option<String>> = [
        attribute::SESSION,
        attribute::TOOL,
        attribute::OUTCOME,
        attribute::ANSWERER,
        attribute::DIGEST,
    ]
    .into_iter()
    .map(|k| (k, root.attr(k)))
    .collect();
    assert_eq!(attrs[attribute::SESSION].as_deref(), Some("s1"));
    assert_eq!(attrs[attribute::TOOL].as_deref(), Some("Bash"));
    assert_eq!(attrs[attribute::OUTCOME].as_deref(), Some("rejected"));
    assert_eq!(attrs[attribute::ANSWERER].as_deref(), Some("no-rm"));
    assert_eq!(attrs[attribute::DIGEST].as_deref(), Some(digest.as_str()));
    assert_eq!(
        shape(&children),
        [
            "approval.commit approval/asked",
            "approval.listener protected next",
            "approval.listener rules next",
            "approval.listener no-rm rejected",
            "approval.commit approval/decided",
        ]
    );
    assert_eq!(
        children[3].attr(attribute::DIGEST).as_deref(),
        Some(digest.as_str())
    );

    // Without a traceparent: a trace of its own, with no parent; decided by the rule.
    let (root, children) = tree(&spans, &ids[1]);
    assert_ne!(hex(&root.span.trace_id), PARENT_TRACE);
    assert!(root.span.parent_span_id.is_empty());
    assert!(
        root.attr(attribute::ANSWERER)
            .is_some_and(|a| a.starts_with("rule:")),
        "{root:#?}"
    );
    assert_eq!(
        shape(&children),
        [
            "approval.commit approval/asked",
            "approval.listener protected next",
            "approval.listener rules allowed-once",
            "approval.commit approval/decided",
        ]
    );

    // Every malformed value: no parent, a fresh trace, the same answer.
    for id in &ids[2..7] {
        let (root, children) = tree(&spans, id);
        assert!(root.span.parent_span_id.is_empty(), "{root:#?}");
        assert_ne!(hex(&root.span.trace_id), PARENT_TRACE);
        assert_eq!(root.attr(attribute::OUTCOME).as_deref(), Some("rejected"));
        assert_eq!(children.len(), 5);
    }
    // The client's answer: the wait is a span of its own, after every gate said next.
    let (root, children) = tree(&spans, &ids[7]);
    assert_eq!(hex(&root.span.parent_span_id), PARENT_SPAN);
    let client_answerer = root.attr(attribute::ANSWERER).unwrap();
    assert!(client_answerer.starts_with("client-"), "{client_answerer}");
    assert_eq!(
        shape(&children),
        [
            "approval.commit approval/asked".to_owned(),
            "approval.listener protected next".to_owned(),
            "approval.listener rules next".to_owned(),
            "approval.listener no-rm next".to_owned(),
            format!("approval.wait {client_answerer} allowed-once"),
            "approval.commit approval/decided".to_owned(),
        ]
    );
    // Eight questions, eight trees, nothing else.
    assert_eq!(
        spans
            .iter()
            .filter(|g| g.span.name == span::REQUEST)
            .count(),
        8
    );
}

#[test]
fn the_hook_continues_the_trace_in_traceparent_in_process_and_through_serve() {
    let dir = tempfile::tempdir().unwrap();
    let receiver = Receiver::start();
    let (config, _) = deployment(dir.path(), &receiver);
    let state = dir.path().join("state");
    let input = |session: &str, call: &str, command: &str| {
        json!({"hook_event_name": "PreToolUse", "session_id": session, "tool_name": "Bash",
               "tool_use_id": call, "tool_input": {"command": command}, "cwd": "/tmp"})
        .to_string()
    };
    let hook = |args: &[&str], stdin: String, traceparent: &str| {
        let mut child = Command::new(env!("CARGO_BIN_EXE_approval-host"))
            .arg("--state-dir")
            .arg(&state)
            .args(["hook", "claude-code"])
            .args(args)
            .env("TRACEPARENT", traceparent)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(stdin.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let printed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        printed["hookSpecificOutput"]["permissionDecision"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let traceparent = format!("00-{PARENT_TRACE}-{PARENT_SPAN}-01");
    let config_arg = config.to_str().unwrap();

    // In process: the hook exports before it exits.
    assert_eq!(
        hook(
            &["--config", config_arg],
            input("h1", "c1", "ls"),
            &traceparent
        ),
        "allow"
    );
    // A malformed TRACEPARENT: the same answer, a trace of its own.
    assert_eq!(
        hook(
            &["--config", config_arg],
            input("h1", "c2", "rm -rf x"),
            "00-nonsense"
        ),
        "deny"
    );

    // Through a warm server: the hook passes TRACEPARENT on as `_meta.traceparent`.
    let socket = dir.path().join("serve.sock");
    let server = Client::spawn(&state, &config, &["--socket", socket.to_str().unwrap()]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while std::os::unix::net::UnixStream::connect(&socket).is_err() {
        assert!(std::time::Instant::now() < deadline, "serve never listened");
        std::thread::yield_now();
    }
    assert_eq!(
        hook(
            &["--socket", socket.to_str().unwrap()],
            input("h2", "c1", "rm -rf x"),
            &traceparent
        ),
        "deny"
    );
    // SIGTERM: the server stops as a service manager would stop it, exporting first.
    let mut server = server;
    unsafe { libc::kill(server.child.id() as i32, libc::SIGTERM) };
    assert!(server.child.wait().unwrap().success());

    let spans = receiver.spans();
    let h1 = questions(&state, "h1");
    let h2 = questions(&state, "h2");
    let (root, children) = tree(&spans, &h1[0]);
    assert_eq!(hex(&root.span.trace_id), PARENT_TRACE);
    assert_eq!(hex(&root.span.parent_span_id), PARENT_SPAN);
    assert_eq!(
        root.attr(attribute::OUTCOME).as_deref(),
        Some("allowed-once")
    );
    assert_eq!(
        shape(&children),
        [
            "approval.commit approval/asked",
            "approval.listener protected next",
            "approval.listener rules allowed-once",
            "approval.commit approval/decided",
        ]
    );
    let (root, _) = tree(&spans, &h1[1]);
    assert!(root.span.parent_span_id.is_empty());
    assert_ne!(hex(&root.span.trace_id), PARENT_TRACE);
    let (root, children) = tree(&spans, &h2[0]);
    assert_eq!(hex(&root.span.trace_id), PARENT_TRACE);
    assert_eq!(hex(&root.span.parent_span_id), PARENT_SPAN);
    assert_eq!(
        shape(&children).last().map(String::as_str),
        Some("approval.commit approval/decided")
    );
    assert_eq!(
        children[children.len() - 2]
            .attr(attribute::DECISION)
            .as_deref(),
        Some("rejected")
    );
}

#[test]
fn bad_telemetry_sections_are_refused_with_the_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("deploy.toml");
    for (text, want) in [
        (
            "[telemetry]\notlp-endpoint = \"https://collector:4318\"\n",
            "only http:// is supported",
        ),
        (
            "[telemetry]\notlp-endpoint = \"collector:4318\"\n",
            "only http:// is supported",
        ),
        (
            "[telemetry]\notlp-endpoint = \"http://user:pw@collector:4318\"\n",
            "an endpoint takes no user, password, query or fragment",
        ),
        (
            "[telemetry]\nservice-name = \"x\"\n",
            "otlp-endpoint is missing",
        ),
        (
            "[telemetry]\notlp-endpoint = \"http://127.0.0.1:4318\"\nsampler = \"all\"\n",
            "sampler",
        ),
        (
            "[telemetry]\notlp-endpoint = 4318\n",
            "otlp-endpoint must be a string",
        ),
    ] {
        std::fs::write(&path, text).unwrap();
        let e = approval_host::Deployment::load(&path)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(&format!("{}:", path.display())) && e.contains("[telemetry]"),
            "{e}"
        );
        assert!(e.contains(want), "{text}: {e}");
    }
    // The base URL gets the traces path; a full traces URL is kept.
    for (endpoint, url) in [
        ("http://127.0.0.1:4318", "http://127.0.0.1:4318/v1/traces"),
        ("http://127.0.0.1:4318/", "http://127.0.0.1:4318/v1/traces"),
        ("http://otel:4318/v1/traces", "http://otel:4318/v1/traces"),
        (
            "http://otel:4318/prefix",
            "http://otel:4318/prefix/v1/traces",
        ),
    ] {
        std::fs::write(
            &path,
            format!("[telemetry]\notlp-endpoint = \"{endpoint}\"\n"),
        )
        .unwrap();
        let d = approval_host::Deployment::load(&path).unwrap();
        let t = d.telemetry.unwrap();
        assert_eq!(
            (t.traces_url.as_str(), t.service_name.as_str()),
            (url, "approval-host")
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metrics_count_the_spans_exported() {
    let dir = tempfile::tempdir().unwrap();
    let receiver = tokio::task::spawn_blocking(Receiver::start).await.unwrap();
    let (config, _) = deployment(dir.path(), &receiver);
    let server = approval_host::serve::Server::start(approval_host::serve::ServeOptions {
        config,
        state_dir: dir.path().join("state"),
        quarantine: approval_host::plugin::QuarantinePolicy::default(),
        store_url: None,
        migrate: false,
    })
    .await
    .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let s = server.clone();
    tokio::spawn(async move { s.serve_metrics(listener).await });
    let service = server.service().clone();
    service.start_turn("m1").await.unwrap();
    let agent = service.agent("m1", "main").await.unwrap();
    for (call, command, want) in [
        ("c1", "ls", approval_host::Outcome::AllowedOnce),
        ("c2", "rm -rf x", approval_host::Outcome::Rejected),
    ] {
        service
            .record_tool_call(&agent, call, "Bash", json!({ "command": command }))
            .await
            .unwrap();
        let verdict = service
            .ask(approval_host::ApprovalRequest::new(&agent, "Bash").call_id(call))
            .await
            .unwrap();
        assert_eq!(verdict.outcome, want);
    }
    service.end_turn("m1").await.unwrap();
    server.finish_traces().await;
    // Five spans for the rule's answer (request, two commits, two listeners), six for the
    // plugin's (one more listener).
    assert_eq!(receiver.spans().len(), 11);
    let scraped = crate::console::http(addr, "GET", "/metrics", None, None).await;
    let mut lines: Vec<&str> = scraped
        .body
        .lines()
        .filter(|l| l.starts_with("approval_trace"))
        .collect();
    // A family's samples come in no set order.
    lines.sort_unstable();
    assert_eq!(
        lines,
        [
            "approval_trace_spans{result=\"exported\"} 11",
            "approval_trace_spans{result=\"failed\"} 0",
            "approval_traces_dropped 0",
        ]
    );
    drop(tokio::task::spawn_blocking(move || drop(receiver)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collector_that_is_down_changes_no_answer_and_its_spans_are_counted_lost() {
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config =
        approval_host::telemetry::TelemetryConfig::new(&format!("http://127.0.0.1:{port}"), None)
            .unwrap();
    let host = crate::support::Host::new();
    let telemetry = approval_host::telemetry::Telemetry::start(&config).unwrap();
    host.service.add_observer(telemetry.clone());
    let (_, gate) = crate::support::counting(approval_host::Decision::Reject);
    let _registration = host.service.register(
        "gate",
        approval_host::Scope::Global,
        approval_host::Position::Front,
        gate,
    );
    host.service.start_turn("d1").await.unwrap();
    let agent = host.service.agent("d1", "main").await.unwrap();
    let outcome = host
        .service
        .request(approval_host::ApprovalRequest::new(&agent, "Bash"))
        .await
        .unwrap();
    assert_eq!(outcome, approval_host::Outcome::Rejected);
    host.service.end_turn("d1").await.unwrap();
    let t = telemetry.clone();
    tokio::task::spawn_blocking(move || t.shutdown())
        .await
        .unwrap();
    // The request, its two commits and the gate's turn: four spans, none delivered.
    assert_eq!(telemetry.exported(), (0, 4));
    assert_eq!(telemetry.dropped(), 0);
}
