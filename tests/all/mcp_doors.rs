//! The MCP gateway's HTTP endpoint has doors: every request over TCP bears a `[[token]]` with
//! the agent role, a browser origin not listed is refused, a token limited to some sessions opens
//! only those, a session is used only by the token that opened it, sessions are capped per token
//! (a refused `initialize` leaves no session log behind), a Unix socket is private (0600), and
//! questions over HTTP carry the gateway's working directory.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use approval_host::mcp::{
    ALREADY_INITIALIZED, NOT_THE_OPENER, session_not_granted, too_many_sessions_for,
};
use approval_host::serve::auth;
use approval_host::serve::mcp_endpoint::NEEDS_TOKEN;
use serde_json::json;

use crate::mcp_gateway::{
    AGENT_TOKEN, BIN, Client, Setup, gateway_command, http_gateway, http_server, ok,
};
use crate::mcp_nothing_unasked::{INITIALIZE, post, post_with};

const OTHER_TOKEN: &str = "aht_mcp_team_token_for_tests_000000000000000000000000000000000000000";
const METRICS_TOKEN: &str = "aht_mcp_metrics_token_for_tests_000000000000000000000000000000000000";

fn tokens() -> String {
    format!(
        "[[token]]\nname = \"team-a\"\nsha256 = \"{}\"\nroles = [\"agent\"]\nsessions = [\"team-a-\"]\n\n\
         [[token]]\nname = \"scraper\"\nsha256 = \"{}\"\nroles = [\"metrics\"]\n\n\
         [limits]\nsessions_per_token = 2\n",
        auth::token_hash(OTHER_TOKEN),
        auth::token_hash(METRICS_TOKEN),
    )
}

/// A bodiless request (`GET` opens the session's event stream, `DELETE` closes it) with a
/// token and a session id; its status and headers.
fn request(url: &str, method: &str, token: &str, session: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let rest = url.strip_prefix("http://").unwrap();
    let (host, path) = rest.split_once('/').unwrap();
    let mut stream = std::net::TcpStream::connect(host).unwrap();
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    write!(
        stream,
        "{method} /{path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\
         Accept: text/event-stream\r\nAuthorization: Bearer {token}\r\n\
         Mcp-Session-Id: {session}\r\nMcp-Protocol-Version: 2025-06-18\r\n\r\n"
    )
    .unwrap();
    let mut head = [0u8; 512];
    let n = stream.read(&mut head).unwrap();
    let head = String::from_utf8_lossy(&head[..n]).into_owned();
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap();
    (status, head)
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

/// The session log files in the state directory.
fn session_logs(setup: &Setup) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(setup.state().join("sessions"))
        .map(|d| {
            d.filter_map(|e| {
                let name = e.unwrap().file_name().to_string_lossy().into_owned();
                name.strip_suffix(".jsonl").map(str::to_owned)
            })
            .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

#[test]
fn over_tcp_every_request_needs_an_agent_token_and_a_foreign_origin_is_refused() {
    let setup = Setup::new(&tokens());
    let (mut server, upstream) = http_server(&setup.path("events.jsonl"));
    let (mut gateway, url) = http_gateway(&setup, &upstream, &[], false);

    // No token, a wrong one, one without the agent role.
    for (headers, status, text) in [
        (vec![], 401, format!("{}: {NEEDS_TOKEN}", auth::BAD_TOKEN)),
        (
            vec![("Authorization", bearer("aht_wrong"))],
            401,
            format!("{}: {NEEDS_TOKEN}", auth::BAD_TOKEN),
        ),
        (
            vec![("Authorization", bearer(METRICS_TOKEN))],
            403,
            "token \"scraper\" does not have the agent role".to_owned(),
        ),
    ] {
        let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let (got, answers, session) = post_with(&url, &headers, None, INITIALIZE);
        assert_eq!(got, status, "{headers:?}");
        assert_eq!(answers[0]["error"]["message"], json!(text));
        assert!(session.is_none());
    }
    // Requests without a token are not counted against the address: a web page (or any local
    // process) sending them cannot lock the agent out.
    for _ in 0..8 {
        let (got, _, _) = post_with(&url, &[], None, INITIALIZE);
        assert_eq!(got, 401);
    }
    // A web page's request (its Origin) is refused even with a good token.
    let agent = bearer(AGENT_TOKEN);
    let (got, _, session) = post_with(
        &url,
        &[
            ("Authorization", &agent),
            ("Origin", "https://evil.example"),
        ],
        None,
        INITIALIZE,
    );
    assert_eq!(got, 403);
    assert!(session.is_none());
    // No session was opened by any of them.
    assert_eq!(session_logs(&setup), Vec::<String>::new());
    // The agent's own request has no Origin and gets in.
    let (got, hello, session) = post(&url, None, INITIALIZE);
    assert_eq!(got, 200, "{hello:?}");
    assert!(session.is_some());
    gateway.kill().unwrap();
    gateway.wait().unwrap();
    server.kill().unwrap();
    server.wait().unwrap();
}

#[test]
fn a_listed_origin_is_answered() {
    let setup = Setup::new("[mcp]\nallowed-origins = [\"https://tools.example:443\"]\n");
    let (mut server, upstream) = http_server(&setup.path("events.jsonl"));
    let (mut gateway, url) = http_gateway(&setup, &upstream, &[], false);
    let agent = bearer(AGENT_TOKEN);
    let (got, _, _) = post_with(
        &url,
        &[
            ("Authorization", &agent),
            ("Origin", "https://tools.example"),
        ],
        None,
        INITIALIZE,
    );
    assert_eq!(got, 200);
    let (got, _, _) = post_with(
        &url,
        &[
            ("Authorization", &agent),
            ("Origin", "https://tools.example.evil"),
        ],
        None,
        INITIALIZE,
    );
    assert_eq!(got, 403);
    gateway.kill().unwrap();
    gateway.wait().unwrap();
    server.kill().unwrap();
    server.wait().unwrap();
}

#[test]
fn a_token_limited_to_some_sessions_opens_only_those_up_to_its_share_and_no_other_token_uses_them()
{
    let setup = Setup::new(&tokens());
    let (mut server, upstream) = http_server(&setup.path("events.jsonl"));
    let (mut gateway, url) = http_gateway(&setup, &upstream, &[], false);
    let team = bearer(OTHER_TOKEN);

    // A session outside its grant is refused, and leaves no log.
    let (got, answers, _) = post_with(
        &url,
        &[("Authorization", &team), ("Approval-Session", "team-b-1")],
        None,
        INITIALIZE,
    );
    assert_eq!(got, 200);
    assert_eq!(
        answers[0]["error"]["message"],
        json!(session_not_granted("team-a", "team-b-1"))
    );
    assert_eq!(session_logs(&setup), Vec::<String>::new());

    // One it names inside its grant, and one it is given there.
    let (_, answers, named) = post_with(
        &url,
        &[("Authorization", &team), ("Approval-Session", "team-a-7")],
        None,
        INITIALIZE,
    );
    assert!(answers[0].get("result").is_some(), "{answers:?}");
    let named = named.unwrap();
    let (got, _, _) = post_with(
        &url,
        &[("Authorization", &team)],
        Some(&named),
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
    );
    assert_eq!(got, 202);
    let (_, answers, _) = post_with(&url, &[("Authorization", &team)], None, INITIALIZE);
    assert!(answers[0].get("result").is_some(), "{answers:?}");
    let logs = session_logs(&setup);
    assert_eq!(logs.len(), 2, "{logs:?}");
    assert!(logs.contains(&"team-a-7".to_owned()));
    assert!(logs.iter().all(|l| l.starts_with("team-a-")), "{logs:?}");

    // A third is over the token's share ([limits] sessions_per_token = 2): refused, no log.
    let (_, answers, _) = post_with(&url, &[("Authorization", &team)], None, INITIALIZE);
    assert_eq!(
        answers[0]["error"]["message"],
        json!(too_many_sessions_for("team-a", 2))
    );
    assert_eq!(session_logs(&setup).len(), 2);

    // Another token cannot use the session by its id: refused before anything reads it.
    for body in [
        r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"read_note","arguments":{"name":"welcome"}}}"#,
        r#"{"jsonrpc":"2.0","id":7,"method":"prompts/list"}"#,
        r#"{"jsonrpc":"2.0","id":8,"method":"notes/delete"}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":5}}"#,
    ] {
        let (got, answers, _) = post(&url, Some(&named), body);
        assert_eq!(got, 403, "{body}");
        assert_eq!(
            answers[0]["error"]["message"],
            json!(NOT_THE_OPENER),
            "{answers:?}"
        );
    }
    // Nothing of it was recorded in the session's log.
    let events = crate::support::events_at(&crate::support::log_path(&setup.state(), "team-a-7"));
    assert!(
        events.iter().all(|(kind, _)| kind != "mcp/message"),
        "{events:?}"
    );
    // Nor read its event stream, close it, or initialize it again.
    for method in ["GET", "DELETE"] {
        let (got, _) = request(&url, method, AGENT_TOKEN, &named);
        assert_eq!(got, 403, "{method}");
    }
    let (got, answers, _) = post(&url, Some(&named), INITIALIZE);
    assert_eq!(got, 403);
    assert_eq!(answers[0]["error"]["message"], json!(NOT_THE_OPENER));
    let (_, answers, _) = post_with(&url, &[("Authorization", &team)], Some(&named), INITIALIZE);
    assert_eq!(
        answers[0]["error"]["message"],
        json!(ALREADY_INITIALIZED),
        "{answers:?}"
    );
    // A session id never opened here is not found (a client opens a new session).
    let (got, _, _) = post(&url, Some("no-such-session"), INITIALIZE);
    assert_eq!(got, 404);
    // Its own token can.
    let (_, answers, _) = post_with(
        &url,
        &[("Authorization", &team)],
        Some(&named),
        r#"{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"read_note","arguments":{"name":"welcome"}}}"#,
    );
    assert_eq!(
        answers[0]["result"]["content"][0]["text"], "hello from the notes server",
        "{answers:?}"
    );
    gateway.kill().unwrap();
    gateway.wait().unwrap();
    server.kill().unwrap();
    server.wait().unwrap();
    assert_eq!(
        setup.server_events(),
        vec![json!({"event": "read_note", "name": "welcome"})]
    );
}

#[test]
fn over_http_a_relative_path_rule_reads_paths_against_the_gateway_s_directory() {
    let setup = Setup::new("");
    let (mut server, upstream) = http_server(&setup.path("events.jsonl"));
    // The gateway runs in the test's directory: ./docs/** is there.
    let mut gateway = gateway_command(&setup, "127.0.0.1:0", &upstream)
        .current_dir(setup.path(""))
        .spawn()
        .unwrap();
    let url = crate::mcp_gateway::listening_url(&mut gateway);
    let mut client = Client::http(&url, &setup.path("events.jsonl"));
    assert_eq!(
        client.call("stat_file", json!({"path": "docs/none.md"})),
        ok("missing")
    );
    let refused = client.call("stat_file", json!({"path": "../docs/x"}));
    assert_eq!(refused["is_error"], true);
    client.quit();
    gateway.kill().unwrap();
    gateway.wait().unwrap();
    server.kill().unwrap();
    server.wait().unwrap();
    assert_eq!(
        setup.server_events(),
        vec![json!({"event": "stat_file", "path": "docs/none.md"})]
    );
}

#[test]
fn a_unix_socket_endpoint_is_private_and_asks_for_the_deployment_s_token() {
    let setup = Setup::new("");
    let (mut server, upstream) = http_server(&setup.path("events.jsonl"));
    let socket = setup.path("mcp.sock");
    let listen = format!("unix:{}", socket.display());
    let mut gateway = gateway_command(&setup, &listen, &upstream).spawn().unwrap();
    let line = {
        use std::io::BufRead;
        let mut line = String::new();
        std::io::BufReader::new(gateway.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        line
    };
    assert_eq!(line.trim(), format!("listening on {listen}"));
    let mode = std::fs::metadata(&socket).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    // The deployment declares a token: the socket asks for it.
    let (got, _, _) = post_with(&listen, &[], None, INITIALIZE);
    assert_eq!(got, 401);
    let (got, hello, _) = post(&listen, None, INITIALIZE);
    assert_eq!(got, 200, "{hello:?}");
    assert_eq!(hello[0]["result"]["serverInfo"]["name"], "notes");
    gateway.kill().unwrap();
    gateway.wait().unwrap();
    server.kill().unwrap();
    server.wait().unwrap();
}

#[test]
fn the_command_line_refuses_an_endpoint_it_cannot_guard() {
    // TCP without any token in the deployment.
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("deploy.toml");
    std::fs::write(&config, "").unwrap();
    let out = Command::new(BIN)
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .args(["mcp", "--config"])
        .arg(&config)
        .args([
            "--name",
            "notes",
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            "http://127.0.0.1:9/mcp",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("the MCP endpoint on TCP needs [[token]] entries with the agent role"),
        "{stderr}"
    );
    // Off loopback without TLS.
    let out = Command::new(BIN)
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .args(["mcp", "--config"])
        .arg(&config)
        .args([
            "--name",
            "notes",
            "--listen",
            "192.0.2.1:8931",
            "--upstream",
            "http://127.0.0.1:9/mcp",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("off loopback the MCP endpoint needs --tls-cert and --tls-key"),
        "{stderr}"
    );
}
