//! MCP 2026-07-28 beside the earlier revisions: an agent that speaks the per-request lifecycle
//! (`server/discover`, then requests that each carry their own version, client and capabilities)
//! through the gateway to a server that speaks only an earlier revision (the Python SDK's, which
//! the gateway initializes as any agent would). Over stdio the connection is linked, and its
//! turn started, at the first request; over HTTP each request stands alone: its own turn, in the
//! session its `Approval-Session` header names (or a fresh one).

use approval_host::mcp::methods;
use approval_host::mcp::{input_required_refused, server_request_inline};
use serde_json::{Value, json};

use crate::mcp_gateway::{
    AGENT_TOKEN, BIN, Client, Setup, http_gateway, http_server, ok, refused, script,
};
use crate::mcp_nothing_unasked::{Raw, mcp_messages, post_with, received_methods};
use crate::support::{events_at, log_path, types};

/// The Python SDK client in its 2026-07-28 lifecycle, with `args` after its own.
fn discovering(args: &[String], setup: &Setup) -> Client {
    Client::start_with_env(
        args,
        &setup.path("events.jsonl"),
        &[("MCP_CLIENT_LIFECYCLE", "discover")],
    )
}

#[test]
fn an_agent_on_2026_07_28_is_asked_as_any_other_and_reaches_an_older_server_over_stdio() {
    let setup = Setup::new("");
    let mut args = vec!["stdio".to_owned()];
    args.extend(setup.stdio_gateway());
    let mut client = discovering(&args, &setup);
    assert_eq!(client.hello["protocol"], "2026-07-28");
    assert_eq!(client.hello["server"], "notes");

    assert_eq!(
        client.op(json!({"op": "list_tools"})),
        json!({"tools": ["read_note", "write_note", "stat_file", "slow", "crash", "roots"]})
    );
    assert_eq!(
        client.call("read_note", json!({"name": "welcome"})),
        ok("hello from the notes server")
    );
    assert_eq!(
        client.call("delete_note", json!({"name": "welcome"})),
        refused(
            "tool \"mcp__notes__delete_note\" was rejected by policy \"rule:deployment-2\": notes are never deleted"
        )
    );
    // The server's request of the agent mid-call has no way to an agent on this revision: it
    // is refused, and the call's own answer says so.
    let roots = client.call("roots", json!({}));
    assert_eq!(roots["is_error"], false, "{roots}");
    assert!(
        roots["text"]
            .as_str()
            .unwrap()
            .contains(&server_request_inline("roots/list")),
        "{roots}"
    );
    assert_eq!(
        client.op(json!({"op": "read_resource", "uri": "notes://welcome"})),
        json!({"contents": ["hello from the notes server"]})
    );
    client.quit();

    assert_eq!(
        setup.server_events(),
        vec![
            json!({"event": "read_note", "name": "welcome"}),
            json!({"event": "roots"}),
        ]
    );
    assert_eq!(
        setup.decisions("s1"),
        [
            ("allowed-once", "mcp__notes__read_note"),
            ("rejected", "mcp__notes__delete_note"),
            ("allowed-once", "mcp__notes__roots"),
            ("allowed-once", "mcp__notes__resources/read"),
        ]
        .map(|(o, t)| (o.to_owned(), t.to_owned()))
    );
    // One connection, one turn, from its first request to its end.
    let events = events_at(&log_path(&setup.state(), "s1"));
    let kinds = types(&events);
    assert_eq!(kinds.iter().filter(|k| **k == "turn/start").count(), 1);
    assert_eq!(kinds.first(), Some(&"turn/start"));
    assert_eq!(kinds.last(), Some(&"turn/end"));
    let refused_roots: Vec<&Value> = events
        .iter()
        .filter(|(k, d)| k == "mcp/message" && d["method"] == "roots/list")
        .map(|(_, d)| d)
        .collect();
    assert_eq!(
        refused_roots,
        [&json!({
            "from": "server",
            "method": "roots/list",
            "handled": "refused",
            "why": server_request_inline("roots/list"),
            "server": "notes",
        })]
    );
}

#[test]
fn over_http_each_2026_07_28_request_is_its_own_turn_in_the_session_it_names() {
    let setup = Setup::new("");
    let events = setup.path("events.jsonl");
    let (mut server, upstream) = http_server(&events);
    let (mut gateway, url) = http_gateway(&setup, &upstream, &[], false);

    let mut client = discovering(
        &[
            "http".to_owned(),
            url.clone(),
            AGENT_TOKEN.to_owned(),
            "team-1".to_owned(),
        ],
        &setup,
    );
    assert_eq!(client.hello["protocol"], "2026-07-28");
    assert_eq!(
        client.call("read_note", json!({"name": "welcome"})),
        ok("hello from the notes server")
    );
    assert_eq!(
        client.call("delete_note", json!({"name": "welcome"})),
        refused(
            "tool \"mcp__notes__delete_note\" was rejected by policy \"rule:deployment-2\": notes are never deleted"
        )
    );
    // A method the gateway does not know, in a request of its own: refused with its reason
    // and recorded in the session it names.
    let unknown = format!(
        r#"{{"jsonrpc":"2.0","id":10,"method":"tools/delete","params":{{"name":"welcome",{META}}}}}"#
    );
    let (_, answers, _) = post_with(
        &url,
        &[
            ("Authorization", &format!("Bearer {AGENT_TOKEN}")),
            ("Mcp-Protocol-Version", "2026-07-28"),
            ("Mcp-Method", "tools/delete"),
            ("Approval-Session", "team-1"),
        ],
        None,
        &unknown,
    );
    assert_eq!(
        answers.last().map(|a| a["error"]["message"].clone()),
        Some(json!(methods::unknown_method("tools/delete"))),
        "{answers:?}"
    );
    // One request after another in one session: each waits for the last to end its turn.
    for _ in 0..6 {
        assert_eq!(
            client.call("stat_file", json!({"path": "./docs/missing"})),
            ok("missing")
        );
    }
    client.quit();

    // `Mcp-Method` must say what the body does: a request whose header says one method and
    // whose body another reaches nothing.
    let body = json!({
        "jsonrpc": "2.0", "id": 9, "method": "tools/call",
        "params": {"name": "read_note", "arguments": {"name": "welcome"}, "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {}
        }}
    })
    .to_string();
    let bearer = format!("Bearer {AGENT_TOKEN}");
    let (status, answers, _) = post_with(
        &url,
        &[
            ("Authorization", &bearer),
            ("Mcp-Protocol-Version", "2026-07-28"),
            ("Mcp-Method", "tools/list"),
        ],
        None,
        &body,
    );
    assert_eq!(status, 400, "{answers:?}");
    gateway.kill().unwrap();
    gateway.wait().unwrap();
    server.kill().unwrap();
    server.wait().unwrap();

    // Only the allowed call reached the server.
    let mut reached = vec![json!({"event": "read_note", "name": "welcome"})];
    reached.extend(vec![
        json!({"event": "stat_file", "path": "./docs/missing"});
        6
    ]);
    assert_eq!(setup.server_events(), reached);
    let mut decided = vec![
        (
            "allowed-once".to_owned(),
            "mcp__notes__read_note".to_owned(),
        ),
        ("rejected".to_owned(), "mcp__notes__delete_note".to_owned()),
    ];
    decided.extend(vec![
        (
            "allowed-once".to_owned(),
            "mcp__notes__stat_file".to_owned()
        );
        6
    ]);
    assert_eq!(setup.decisions("team-1"), decided);
    assert_eq!(
        mcp_messages(&setup, "team-1")
            .iter()
            .filter(|m| m["from"] == "agent")
            .map(|m| m["why"].clone())
            .collect::<Vec<_>>(),
        [json!(methods::unknown_method("tools/delete"))]
    );
    // Each request its own turn, every turn ended.
    let kinds: Vec<String> = events_at(&log_path(&setup.state(), "team-1"))
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    let starts = kinds.iter().filter(|k| *k == "turn/start").count();
    assert!(starts >= 2, "{kinds:?}");
    assert_eq!(
        starts,
        kinds.iter().filter(|k| *k == "turn/end").count(),
        "{kinds:?}"
    );
}

/// The `_meta` every request of an agent on MCP 2026-07-28 carries.
const META: &str = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"raw","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}"#;

#[test]
fn on_a_2026_07_28_connection_what_the_screen_refuses_is_answered_with_its_reason_and_recorded() {
    let setup = Setup::new("");
    let mut raw = Raw::unopened(&setup);
    // The first request links the connection.
    let listed = raw.request(&format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{{{META}}}}}"#
    ));
    assert!(listed["result"]["tools"].is_array(), "{listed}");
    let cases = [
        (
            format!(
                r#"{{"jsonrpc":"2.0","id":2,"method":"tools/delete","params":{{"name":"welcome",{META}}}}}"#
            ),
            -32601,
            methods::unknown_method("tools/delete"),
        ),
        (
            format!(
                r#"{{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{{"name":"read_note","name":"delete_note","arguments":{{"name":"welcome"}},{META}}}}}"#
            ),
            -32600,
            "the key \"name\" is written twice".to_owned(),
        ),
        (
            format!(
                r#"{{"jsonrpc":"2.0","id":4,"method":"subscriptions/listen","params":{{"notifications":{{}},{META}}}}}"#
            ),
            -32601,
            methods::unknown_method("subscriptions/listen"),
        ),
    ];
    for (line, code, why) in &cases {
        let answer = raw.request(line);
        assert_eq!(answer["error"]["code"], *code, "{line} -> {answer}");
        assert_eq!(
            answer["error"]["message"],
            why.as_str(),
            "{line} -> {answer}"
        );
    }
    raw.quit();
    let whys: Vec<String> = mcp_messages(&setup, "s1")
        .iter()
        .filter(|m| m["from"] == "agent")
        .map(|m| m["why"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        whys,
        cases
            .iter()
            .map(|(_, _, why)| why.clone())
            .collect::<Vec<_>>()
    );
    // Nothing refused reached the server.
    let received = received_methods(&setup);
    assert!(
        !received
            .iter()
            .any(|m| m == "tools/delete" || m == "tools/call" || m == "subscriptions/listen"),
        "{received:?}"
    );
}

#[test]
fn a_server_that_asks_for_input_inside_its_answer_is_refused_and_recorded() {
    let setup = Setup::new("[[rule]]\nrule = \"mcp__asking__ask\"\neffect = \"allow\"\n");
    let args: Vec<String> = [
        "stdio",
        BIN,
        "--state-dir",
        &setup.state().display().to_string(),
        "mcp",
        "--config",
        &setup.path("deploy.toml").display().to_string(),
        "--name",
        "asking",
        "--session",
        "s1",
        "--no-watch",
        "--",
        "python3",
        &script("asking_server.py"),
    ]
    .map(str::to_owned)
    .to_vec();
    for lifecycle in ["discover", "initialize"] {
        let mut client = Client::start_with_env(
            &args,
            &setup.path("events.jsonl"),
            &[("MCP_CLIENT_LIFECYCLE", lifecycle)],
        );
        let answer = client.call("ask", json!({}));
        assert_eq!(
            answer,
            json!({"error": input_required_refused("asking")}),
            "{lifecycle}"
        );
        client.quit();
    }
    // Each call was asked and allowed, reached the server, and its answer went no further.
    assert_eq!(setup.server_events(), vec![json!({"event": "ask"}); 2]);
    let refused: Vec<Value> = mcp_messages(&setup, "s1")
        .into_iter()
        .filter(|m| m["method"] == "input_required")
        .collect();
    assert_eq!(
        refused,
        vec![
            json!({
                "from": "server",
                "method": "input_required",
                "handled": "refused",
                "why": input_required_refused("asking"),
                "server": "asking",
            });
            2
        ]
    );
}
