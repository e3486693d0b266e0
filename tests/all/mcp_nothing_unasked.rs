//! Nothing reaches an MCP server through the gateway unasked: a corpus of malformed, duplicated-
//! key and custom messages, per method, sent raw over stdio and over streamable HTTP, each refused
//! (a request, with its id), dropped (a notification) or answered with a null id (garbage), and
//! recorded; what the server received is checked byte for byte (the server's stdin goes through
//! `tee`). Resources, prompts and completion are asked under their own names; path rules read
//! every path of an MCP call; the server's own requests of the agent are recorded and pass unless
//! the deployment refuses them.

use std::io::{BufReader, Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;

use approval_host::mcp::methods::{self, SERVER_REQUESTS};
use approval_host::mcp::{REFUSED_CODE, server_request_refused};
use approval_host::tools::texts;
use serde_json::{Value, json};

use crate::mcp_gateway::{
    AGENT_TOKEN, BIN, Client, PATIENCE, Setup, http_gateway, http_server, line_by_line, ok,
    refused, script,
};
use crate::support::{events_at, log_path};

/// What the gateway answers a hostile message with.
#[derive(Debug, Clone, Copy)]
enum Expect {
    /// A JSON-RPC error with the request's id and this code, and an `mcp/message` refused
    /// record whose `why` is the error's message.
    Refused(i32),
    /// No answer, and an `mcp/message` dropped record.
    Dropped,
    /// A JSON-RPC error with a null id, nothing recorded.
    Garbage,
}

const METHOD_NOT_FOUND: i32 = -32601;
const INVALID_REQUEST: i32 = -32600;

/// The corpus: `(message with ID where its id goes, what it gets)`. Every entry would act on the
/// server if it were forwarded as the SDK reads it, or names a method the gateway cannot judge.
fn corpus() -> Vec<(String, Expect)> {
    use Expect::*;
    let mut corpus: Vec<(String, Expect)> = vec![
        // The reported hole: a key written twice fails the SDK's typed read.
        (r#"{"jsonrpc":"2.0","id":ID,"method":"tools/call","params":{"name":"delete_note","name":"read_note","arguments":{"name":"welcome"}}}"#.into(), Refused(INVALID_REQUEST)),
        (r#"{"jsonrpc":"2.0","id":ID,"method":"tools/call","params":{"name":"read_note","name":"delete_note","arguments":{"name":"welcome"}}}"#.into(), Refused(INVALID_REQUEST)),
        (r#"{"jsonrpc":"2.0","id":ID,"method":"tools/call","params":{"name":"delete_note","arguments":{"name":"welcome"},"arguments":{"name":"x"}}}"#.into(), Refused(INVALID_REQUEST)),
        (r#"{"jsonrpc":"2.0","id":ID,"method":"tools/call","params":{"name":"read_note","arguments":{"name":"welcome","name":"other"}}}"#.into(), Refused(INVALID_REQUEST)),
        (r#"{"jsonrpc":"2.0","id":ID,"method":"tools/call","params":{"name":"read_note","arguments":{"deep":[{"a":{"k":1,"k":2}}]}}}"#.into(), Refused(INVALID_REQUEST)),
        (r#"{"jsonrpc":"2.0","id":ID,"method":"tools/call","params":{"name":"read_note","arguments":{"name":"w"}},"params":{"name":"delete_note","arguments":{"name":"welcome"}}}"#.into(), Garbage),
        (r#"{"jsonrpc":"2.0","id":ID,"method":"ping","method":"tools/call","params":{"name":"delete_note","arguments":{"name":"welcome"}}}"#.into(), Garbage),
        // Shapes the typed read would not take.
        (r#"{"jsonrpc":"2.0","id":ID,"method":"tools/call","params":{"name":["delete_note"],"arguments":{"name":"welcome"}}}"#.into(), Refused(INVALID_REQUEST)),
        (r#"{"jsonrpc":"2.0","id":ID,"method":"tools/call","params":{"name":"delete_note","arguments":"name=welcome"}}"#.into(), Refused(INVALID_REQUEST)),
        (r#"{"jsonrpc":"2.0","id":ID,"method":"tools/call","params":["delete_note",{"name":"welcome"}]}"#.into(), Refused(INVALID_REQUEST)),
        (r#"{"jsonrpc":"2.0","id":ID,"method":"tools/call"}"#.into(), Refused(INVALID_REQUEST)),
        // Members the SDK ignores, which a server reading raw JSON might not.
        (r#"{"jsonrpc":"2.0","id":ID,"method":"tools/call","params":{"name":"read_note","arguments":{"name":"welcome"},"tool":"delete_note"}}"#.into(), Refused(INVALID_REQUEST)),
        (r#"{"jsonrpc":"2.0","id":ID,"method":"resources/read","params":{"uri":"notes://welcome","uris":["notes://private"]}}"#.into(), Refused(INVALID_REQUEST)),
        // Resources, prompts, completion: the same forms.
        (r#"{"jsonrpc":"2.0","id":ID,"method":"resources/read","params":{"uri":"notes://welcome","uri":"notes://private"}}"#.into(), Refused(INVALID_REQUEST)),
        (r#"{"jsonrpc":"2.0","id":ID,"method":"resources/read","params":{"uri":7}}"#.into(), Refused(INVALID_REQUEST)),
        (r#"{"jsonrpc":"2.0","id":ID,"method":"prompts/get","params":{"name":"summarise","name":"other"}}"#.into(), Refused(INVALID_REQUEST)),
        (r#"{"jsonrpc":"2.0","id":ID,"method":"completion/complete","params":{"ref":{"type":"ref/prompt","name":"summarise","name":"x"},"argument":{"name":"name","value":"w"}}}"#.into(), Refused(INVALID_REQUEST)),
        (r#"{"jsonrpc":"2.0","id":ID,"method":"resources/subscribe","params":{"uri":"notes://private","uri":"notes://welcome"}}"#.into(), Refused(INVALID_REQUEST)),
        (r#"{"jsonrpc":"2.0","id":ID,"method":"logging/setLevel","params":{"level":"debug","level":"info"}}"#.into(), Refused(INVALID_REQUEST)),
        (r#"{"jsonrpc":"2.0","id":ID,"method":"tools/list","params":{"cursor":"a","cursor":"b"}}"#.into(), Refused(INVALID_REQUEST)),
        // Methods on no list, named like MCP's or not.
        (r#"{"jsonrpc":"2.0","id":ID,"method":"notes/delete","params":{"name":"welcome"}}"#.into(), Refused(METHOD_NOT_FOUND)),
        (r#"{"jsonrpc":"2.0","id":ID,"method":"tools/delete","params":{"name":"welcome"}}"#.into(), Refused(METHOD_NOT_FOUND)),
        (r#"{"jsonrpc":"2.0","id":ID,"method":"Tools/call","params":{"name":"delete_note","arguments":{"name":"welcome"}}}"#.into(), Refused(METHOD_NOT_FOUND)),
        (r#"{"jsonrpc":"2.0","id":ID,"method":"tools/call ","params":{"name":"delete_note","arguments":{"name":"welcome"}}}"#.into(), Refused(METHOD_NOT_FOUND)),
        (r#"{"jsonrpc":"2.0","id":ID,"method":"tools\/call\u0000","params":{"name":"delete_note","arguments":{"name":"welcome"}}}"#.into(), Refused(METHOD_NOT_FOUND)),
        (r#"{"jsonrpc":"2.0","id":ID,"method":"resources/directory/read","params":{"uri":"notes://"}}"#.into(), Refused(METHOD_NOT_FOUND)),
        (r#"{"jsonrpc":"2.0","id":ID,"method":"tasks/get","params":{"taskId":"t"}}"#.into(), Refused(METHOD_NOT_FOUND)),
        // MCP 2026-07-28's probe, without the client it must name.
        (r#"{"jsonrpc":"2.0","id":ID,"method":"server/discover"}"#.into(), Refused(INVALID_REQUEST)),
        (r#"{"jsonrpc":"2.0","id":ID,"method":"subscriptions/listen","params":{"notifications":{}}}"#.into(), Refused(METHOD_NOT_FOUND)),
        (r#"{"jsonrpc":"2.0","id":ID,"method":"sampling/createMessage","params":{"messages":[],"maxTokens":1}}"#.into(), Refused(METHOD_NOT_FOUND)),
        (r#"{"jsonrpc":"2.0","id":ID,"method":"approval-host/refused","params":{"method":"ping","why":"","code":0}}"#.into(), Refused(METHOD_NOT_FOUND)),
        (r#"{"jsonrpc":"2.0","id":ID,"method":"notifications/initialized"}"#.into(), Refused(METHOD_NOT_FOUND)),
        // Not JSON-RPC 2.0, or no trustworthy id.
        (r#"{"jsonrpc":"1.0","id":ID,"method":"tools/call","params":{"name":"delete_note","arguments":{"name":"welcome"}}}"#.into(), Refused(INVALID_REQUEST)),
        (r#"{"id":ID,"method":"tools/call","params":{"name":"delete_note","arguments":{"name":"welcome"}}}"#.into(), Refused(INVALID_REQUEST)),
        (r#"[{"jsonrpc":"2.0","id":ID,"method":"tools/call","params":{"name":"delete_note","arguments":{"name":"welcome"}}}]"#.into(), Garbage),
        (r#"{"jsonrpc":"2.0","id":{"n":ID},"method":"tools/call","params":{"name":"delete_note","arguments":{"name":"welcome"}}}"#.into(), Garbage),
        (r#"{"jsonrpc":"2.0","id":ID,"id":ID,"method":"tools/call","params":{"name":"delete_note","arguments":{"name":"welcome"}}}"#.into(), Garbage),
        (r#"{"jsonrpc":"2.0","id":ID,"method":"tools/call","params":{"name":"delete_note","arguments":{"name":"welcome"}}"#.into(), Garbage),
        (r#"{"jsonrpc":"2.0","id":ID,"method":"tools/call","params":{"name":"delete_note","arguments":{"name":"\ud800"}}}"#.into(), Garbage),
        // Notifications: unknown ones and malformed known ones are dropped.
        (r#"{"jsonrpc":"2.0","method":"notes/delete","params":{"name":"welcome"}}"#.into(), Dropped),
        (r#"{"jsonrpc":"2.0","method":"notifications/tools/call","params":{"name":"delete_note"}}"#.into(), Dropped),
        (r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1,"requestId":2}}"#.into(), Dropped),
        (r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":[1],"progress":"x"}}"#.into(), Dropped),
    ];
    // Every request-shaped entry also as a string id.
    let with_string_ids: Vec<(String, Expect)> = corpus
        .iter()
        .filter(|(m, _)| m.contains("\"id\":ID,") && !m.contains("\"id\":ID,\"id\""))
        .map(|(m, e)| (m.replacen("\"id\":ID,", "\"id\":\"sID\",", 1), *e))
        .collect();
    corpus.extend(with_string_ids);
    corpus
}

/// Corpus entry `n` with its id filled in (a number, or a string where the template says
/// `"sID"`), and the id its answer must carry.
fn instance(n: usize, template: &str) -> (String, Value) {
    let id = 1000 + n as i64;
    let message = template
        .replace("\"sID\"", &format!("\"s{id}\""))
        .replace("ID", &id.to_string());
    let want_id = if template.contains("\"sID\"") {
        json!(format!("s{id}"))
    } else {
        json!(id)
    };
    (message, want_id)
}

/// A raw MCP client over the gateway's stdio, its server's stdin copied to `received.jsonl`.
pub(crate) struct Raw {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
}

impl Raw {
    fn start(setup: &Setup) -> Raw {
        let mut raw = Raw::unopened(setup);
        let hello = raw.request(
            r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#,
        );
        assert_eq!(hello["result"]["serverInfo"]["name"], "notes", "{hello}");
        raw.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
        raw
    }

    /// The gateway started, nothing sent yet.
    pub(crate) fn unopened(setup: &Setup) -> Raw {
        let received = setup.path("received.jsonl");
        let server = format!(
            "tee -a '{}' | exec python3 '{}'",
            received.display(),
            script("notes_server.py")
        );
        let mut child = Command::new(BIN)
            .arg("--state-dir")
            .arg(setup.state())
            .args(["mcp", "--config"])
            .arg(setup.path("deploy.toml"))
            .args(["--name", "notes", "--session", "s1", "--no-watch", "--"])
            .args(["sh", "-c", &server])
            .env("NOTES_EVENTS", setup.path("events.jsonl"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let lines = line_by_line(child.stdout.take().unwrap());
        Raw {
            child,
            stdin,
            lines,
        }
    }

    pub(crate) fn send(&mut self, line: &str) {
        writeln!(self.stdin, "{line}").unwrap();
        self.stdin.flush().unwrap();
    }

    fn next(&mut self) -> Value {
        let line = self
            .lines
            .recv_timeout(PATIENCE)
            .expect("the gateway did not answer");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"))
    }

    pub(crate) fn request(&mut self, line: &str) -> Value {
        self.send(line);
        self.next()
    }

    pub(crate) fn quit(mut self) {
        drop(self.stdin);
        let status = self.child.wait().unwrap();
        assert!(status.success(), "the gateway exited {status}");
    }
}

/// The `initialize` a raw client sends.
pub(crate) const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#;

/// The methods of the messages the server received, in order.
pub(crate) fn received_methods(setup: &Setup) -> Vec<String> {
    std::fs::read_to_string(setup.path("received.jsonl"))
        .unwrap()
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
            match &v["method"] {
                Value::String(m) => m.clone(),
                _ => "(response)".to_owned(),
            }
        })
        .collect()
}

/// The session's `mcp/message` records.
pub(crate) fn mcp_messages(setup: &Setup, session: &str) -> Vec<Value> {
    events_at(&log_path(&setup.state(), session))
        .into_iter()
        .filter(|(k, _)| k == "mcp/message")
        .map(|(_, d)| d)
        .collect()
}

/// Checks one answer against what the corpus entry expects; returns the refusal's text.
fn check_answer(message: &str, id: &Value, answer: &Value, expect: Expect) -> Option<String> {
    match expect {
        Expect::Refused(code) => {
            assert_eq!(&answer["id"], id, "{message} -> {answer}");
            assert_eq!(answer["error"]["code"], code, "{message} -> {answer}");
            assert!(answer.get("result").is_none(), "{message} -> {answer}");
            Some(answer["error"]["message"].as_str().unwrap().to_owned())
        }
        Expect::Garbage => {
            assert!(answer["id"].is_null(), "{message} -> {answer}");
            assert_eq!(
                answer["error"]["code"], INVALID_REQUEST,
                "{message} -> {answer}"
            );
            None
        }
        Expect::Dropped => None,
    }
}

#[test]
fn over_stdio_no_malformed_duplicated_or_custom_message_reaches_the_server_and_each_is_recorded() {
    let setup = Setup::new("");
    let mut raw = Raw::start(&setup);
    let mut refusals = Vec::new();
    let mut dropped = 0;
    for (n, (template, expect)) in corpus().into_iter().enumerate() {
        let (message, want_id) = instance(n, &template);
        raw.send(&message);
        if let Expect::Dropped = expect {
            dropped += 1;
        } else {
            let answer = raw.next();
            refusals.extend(check_answer(&message, &want_id, &answer, expect));
        }
        // A ping after each: its answer, next in order, shows nothing else came back.
        let pong = raw.request(&format!(
            r#"{{"jsonrpc":"2.0","id":"ping{n}","method":"ping"}}"#
        ));
        assert_eq!(
            pong,
            json!({"jsonrpc": "2.0", "id": format!("ping{n}"), "result": {}})
        );
    }
    // The same connection still works for a call the rules allow.
    let read = raw.request(
        r#"{"jsonrpc":"2.0","id":"last","method":"tools/call","params":{"name":"read_note","arguments":{"name":"welcome"}}}"#,
    );
    assert_eq!(
        read["result"]["content"][0]["text"], "hello from the notes server",
        "{read}"
    );
    raw.quit();

    // The server received the handshake, the pings and the one allowed call, nothing else.
    let methods = received_methods(&setup);
    let pings = methods.iter().filter(|m| *m == "ping").count();
    assert_eq!(pings, corpus().len());
    let others: Vec<&String> = methods.iter().filter(|m| *m != "ping").collect();
    // The gateway's own tools/list: the first call of a tool this connection never listed
    // has its definition checked against its pin.
    assert_eq!(
        others,
        [
            "initialize",
            "notifications/initialized",
            "tools/list",
            "tools/call"
        ]
    );
    let received = std::fs::read_to_string(setup.path("received.jsonl")).unwrap();
    assert!(!received.contains("delete_note"), "{received}");
    assert!(!received.contains("notes://private"), "{received}");
    assert_eq!(
        setup.server_events(),
        vec![json!({"event": "read_note", "name": "welcome"})]
    );

    // Each refusal and drop is in the session's log, with the text the client read.
    let recorded = mcp_messages(&setup, "s1");
    let refused_whys: Vec<String> = recorded
        .iter()
        .filter(|m| m["handled"] == "refused")
        .map(|m| {
            assert_eq!(m["from"], "agent");
            m["why"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(refused_whys, refusals);
    assert_eq!(
        recorded
            .iter()
            .filter(|m| m["handled"] == "dropped")
            .count(),
        dropped
    );
    // Two texts exactly, one of each kind.
    assert!(refusals.contains(&"the key \"name\" is written twice".to_owned()));
    assert!(refusals.contains(&methods::unknown_method("notes/delete")));
    let dup = recorded
        .iter()
        .find(|m| m["why"] == "the key \"name\" is written twice")
        .unwrap();
    assert_eq!(dup["method"], "tools/call");
}

/// Writes `request` and reads the whole answer (the request asks to close after it; an event
/// stream for one request ends when its answer is sent).
fn exchange<S: Read + Write>(mut stream: S, request: &str) -> String {
    stream.write_all(request.as_bytes()).unwrap();
    let mut raw = String::new();
    let _ = BufReader::new(stream).read_to_string(&mut raw);
    raw
}

/// One POST to the gateway's endpoint; returns the status and every JSON-RPC message in the
/// answer (a JSON body, or the `data:` lines of an event stream).
pub(crate) fn post(
    url: &str,
    session: Option<&str>,
    body: &str,
) -> (u16, Vec<Value>, Option<String>) {
    post_with(
        url,
        &[("Authorization", &format!("Bearer {AGENT_TOKEN}"))],
        session,
        body,
    )
}

/// [`post`] with these headers (and no others but what every request carries).
pub(crate) fn post_with(
    url: &str,
    headers: &[(&str, &str)],
    session: Option<&str>,
    body: &str,
) -> (u16, Vec<Value>, Option<String>) {
    // `unix:PATH` is the endpoint /mcp on the Unix socket at PATH.
    let (host, path) = match url.strip_prefix("unix:") {
        Some(_) => ("localhost", "mcp"),
        None => url
            .strip_prefix("http://")
            .unwrap()
            .split_once('/')
            .unwrap(),
    };
    let mut head = format!(
        "POST /{path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\
         Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
         Content-Length: {}\r\n",
        body.len()
    );
    if let Some(s) = session {
        head.push_str(&format!(
            "Mcp-Session-Id: {s}\r\nMcp-Protocol-Version: 2025-06-18\r\n"
        ));
    }
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    head.push_str(body);
    let raw = match url.strip_prefix("unix:") {
        Some(socket) => {
            let stream = std::os::unix::net::UnixStream::connect(socket).unwrap();
            stream.set_read_timeout(Some(PATIENCE)).unwrap();
            exchange(stream, &head)
        }
        None => {
            let stream = std::net::TcpStream::connect(host).unwrap();
            stream.set_read_timeout(Some(PATIENCE)).unwrap();
            exchange(stream, &head)
        }
    };
    let (head, rest) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap();
    let session = head
        .lines()
        .find_map(|l| {
            l.split_once(':')
                .filter(|(k, _)| k.eq_ignore_ascii_case("mcp-session-id"))
        })
        .map(|(_, v)| v.trim().to_owned());
    let messages = rest
        .lines()
        .filter_map(|l| l.strip_prefix("data: ").or(Some(l)))
        .filter_map(|l| serde_json::from_str::<Value>(l.trim()).ok())
        .filter(|v| v.get("jsonrpc").is_some())
        .collect();
    (status, messages, session)
}

#[test]
fn over_http_the_same_corpus_is_refused_before_the_sdk_reads_it_and_recorded_in_the_session() {
    let setup = Setup::new("");
    let (mut server, upstream) = http_server(&setup.path("events.jsonl"));
    let (mut gateway, url) = http_gateway(&setup, &upstream, &[], false);
    let (status, hello, session) = post(
        &url,
        None,
        r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}"#,
    );
    assert_eq!(status, 200, "{hello:?}");
    let session = session.expect("no Mcp-Session-Id");
    let (status, _, _) = post(
        &url,
        Some(&session),
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    );
    assert_eq!(status, 202);
    let mut refusals = Vec::new();
    for (n, (template, expect)) in corpus().into_iter().enumerate() {
        let (message, want_id) = instance(n, &template);
        let (status, answers, _) = post(&url, Some(&session), &message);
        match expect {
            Expect::Dropped => {
                assert_eq!(status, 202, "{message}");
                assert!(answers.is_empty(), "{message} -> {answers:?}");
            }
            Expect::Garbage => {
                assert_eq!(status, 400, "{message}");
                check_answer(&message, &want_id, &answers[0], expect);
            }
            Expect::Refused(_) => {
                assert_eq!(status, 200, "{message}");
                assert_eq!(answers.len(), 1, "{message} -> {answers:?}");
                refusals.extend(check_answer(&message, &want_id, &answers[0], expect));
            }
        }
    }
    let (_, read, _) = post(
        &url,
        Some(&session),
        r#"{"jsonrpc":"2.0","id":"last","method":"tools/call","params":{"name":"read_note","arguments":{"name":"welcome"}}}"#,
    );
    assert_eq!(
        read[0]["result"]["content"][0]["text"], "hello from the notes server",
        "{read:?}"
    );
    gateway.kill().unwrap();
    gateway.wait().unwrap();
    server.kill().unwrap();
    server.wait().unwrap();
    assert_eq!(
        setup.server_events(),
        vec![json!({"event": "read_note", "name": "welcome"})]
    );
    // The connection's session is the one `mcp-<uuid>` session in the state directory.
    let sessions: Vec<String> = std::fs::read_dir(setup.state().join("sessions"))
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            name.strip_suffix(".jsonl").map(str::to_owned)
        })
        .filter(|n| n.starts_with("mcp-"))
        .collect();
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    let recorded: Vec<String> = mcp_messages(&setup, &sessions[0])
        .iter()
        .filter(|m| m["handled"] == "refused")
        .map(|m| m["why"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(recorded, refusals);
}

#[test]
fn resources_prompts_and_completion_are_asked_under_names_no_tool_can_take() {
    let setup = Setup::new(
        r#"
[[rule]]
rule = "mcp__notes__resources/read(notes://private*)"
effect = "reject"
reason = "private notes stay private"
"#,
    );
    let mut client = Client::stdio(&setup);
    assert_eq!(
        client.op(json!({"op": "read_resource", "uri": "notes://welcome"})),
        json!({"contents": ["hello from the notes server"]})
    );
    assert_eq!(
        client.op(json!({"op": "read_resource", "uri": "notes://private"})),
        json!({"error": "tool \"mcp__notes__resources/read\" was rejected by policy \"rule:deployment-9\": private notes stay private"})
    );
    // No rule for this prompt, nobody to ask: fail closed.
    assert_eq!(
        client.op(json!({"op": "get_prompt", "name": "other", "arguments": {}})),
        json!({"error": texts::approval_unavailable("mcp__notes__prompts/get")})
    );
    client.quit();

    let mut raw = Raw::start(&setup);
    let complete = raw.request(
        r#"{"jsonrpc":"2.0","id":1,"method":"completion/complete","params":{"ref":{"type":"ref/prompt","name":"summarise"},"argument":{"name":"name","value":"w"}}}"#,
    );
    assert_eq!(
        complete,
        json!({"jsonrpc": "2.0", "id": 1, "error": {
            "code": REFUSED_CODE.0,
            "message": texts::approval_unavailable("mcp__notes__completion/complete"),
        }})
    );
    // A tool named as those questions are is refused without a question.
    let reserved = raw.request(
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"resources/read","arguments":{"uri":"notes://welcome"}}}"#,
    );
    assert_eq!(reserved["result"]["isError"], true, "{reserved}");
    assert_eq!(
        reserved["result"]["content"][0]["text"],
        approval_host::mcp::RESERVED_TOOL_NAME
    );
    raw.quit();
    assert_eq!(setup.server_events(), Vec::<Value>::new());
    // The refusal of the reserved name is on record; the questions are decisions.
    assert_eq!(
        mcp_messages(&setup, "s1"),
        vec![json!({
            "from": "agent",
            "method": "tools/call",
            "handled": "refused",
            "why": approval_host::mcp::RESERVED_TOOL_NAME,
        })]
    );
    // What the rules read: the URI, the prompt's name and arguments, the completion's reference.
    let calls: Vec<(String, Value)> = events_at(&log_path(&setup.state(), "s1"))
        .into_iter()
        .filter(|(k, _)| k == "tool/call")
        .map(|(_, d)| {
            (
                d["name"].as_str().unwrap().to_owned(),
                d["arguments"].clone(),
            )
        })
        .collect();
    assert_eq!(
        calls,
        vec![
            (
                "mcp__notes__resources/read".to_owned(),
                json!({"uri": "notes://welcome"})
            ),
            (
                "mcp__notes__resources/read".to_owned(),
                json!({"uri": "notes://private"})
            ),
            (
                "mcp__notes__prompts/get".to_owned(),
                json!({"name": "other", "arguments": {}})
            ),
            (
                "mcp__notes__completion/complete".to_owned(),
                json!({"ref": {"type": "ref/prompt", "name": "summarise"}, "argument": {"name": "name", "value": "w"}})
            ),
        ]
    );
}

#[test]
fn the_server_s_requests_of_the_agent_are_recorded_and_pass_unless_the_deployment_refuses_them() {
    // Passed by default.
    let setup = Setup::new("");
    let mut client = Client::stdio(&setup);
    assert_eq!(client.call("roots", json!({})), ok("file:///project"));
    client.quit();
    let recorded = mcp_messages(&setup, "s1");
    assert_eq!(
        recorded,
        vec![
            json!({"from": "server", "method": "roots/list", "handled": "passed", "server": "notes"})
        ]
    );

    // Refused when the deployment lists only the others.
    let setup = Setup::new("[mcp]\nserver-requests = [\"sampling/createMessage\"]\n");
    let mut client = Client::stdio(&setup);
    let answer = client.call("roots", json!({}));
    assert_eq!(answer["is_error"], false);
    let text = answer["text"].as_str().unwrap();
    assert!(
        text.starts_with("error: ") && text.contains(&server_request_refused("roots/list")),
        "{text}"
    );
    client.quit();
    assert_eq!(
        mcp_messages(&setup, "s1"),
        vec![json!({
            "from": "server",
            "method": "roots/list",
            "handled": "refused",
            "why": server_request_refused("roots/list"),
            "server": "notes",
        })]
    );
    assert!(SERVER_REQUESTS.contains(&"roots/list"));
}

#[test]
fn a_path_rule_on_an_mcp_tool_covers_a_call_only_when_every_path_in_it_is_inside() {
    let setup = Setup::new("");
    let mut client = Client::stdio(&setup);
    let unavailable = refused(&texts::approval_unavailable("mcp__notes__stat_file"));
    // An added argument the server ignores cannot stand in for the one it reads.
    for arguments in [
        json!({"path": "../secret.txt", "file_path": "./docs/x"}),
        json!({"path": "./docs/x", "source": "secret.txt"}),
        json!({"path": "./docs/x", "extra": {"deep": ["/etc/passwd"]}}),
        json!({"path": "./docs/x", "paths": ["./docs/y", "../z"]}),
        json!({"path": "./docs/x", "destDir": "out"}),
    ] {
        assert_eq!(
            client.call("stat_file", arguments.clone()),
            unavailable,
            "{arguments}"
        );
    }
    // Every path inside, but arguments stat_file's schema does not declare: not covered.
    assert_eq!(
        client.call(
            "stat_file",
            json!({"path": "./docs/x", "note": "plain words", "count": 3})
        ),
        unavailable
    );
    // Every path inside and nothing else: covered.
    assert_eq!(
        client.call("stat_file", json!({"path": "./docs/x"})),
        ok("missing")
    );
    client.quit();
    assert_eq!(
        setup.server_events(),
        vec![json!({"event": "stat_file", "path": "./docs/x"})]
    );
}

#[test]
fn the_method_lists_are_disjoint_and_reserved_tool_names_are_refused_unasked() {
    for m in methods::ASKED {
        assert!(!methods::INERT.contains(&m), "{m}");
    }
    let mut tool_names = vec![];
    for asked in methods::ASKED.iter().filter(|m| **m != methods::CALL_TOOL) {
        assert!(methods::reserved_tool(asked), "{asked}");
        tool_names.push(*asked);
    }
    assert!(!methods::reserved_tool("read_note"));
}
