//! Who may touch a session over `serve`: a token's `sessions` grant whole segments (a prefix
//! ends with `-`, `_` or `.`; any other entry is one id), an admin limited to some sessions makes
//! and revokes only their session rules, and a Claude Code session asked about through
//! `hook/claude-code` belongs to one token and never to a connection that did not open it.

use std::path::{Path, PathBuf};

use approval_host::config::token::{describe_sessions, grants_session};
use approval_host::plugin::QuarantinePolicy;
use approval_host::serve::auth::{self, FORBIDDEN, Grant};
use approval_host::serve::{ServeOptions, Server};
use serde_json::{Value, json};

use crate::serve_network::{Client, ok};

const TEAM_ADMIN: &str = "aht_team_admin_token_for_tests_00000000000000000000000000000000000000";
const OPS: &str = "aht_ops_admin_token_for_tests_000000000000000000000000000000000000000";
const AGENT_A: &str = "aht_agent_a_token_for_tests_00000000000000000000000000000000000000000";
const AGENT_B: &str = "aht_agent_b_token_for_tests_00000000000000000000000000000000000000000";
const CI: &str = "aht_ci_token_for_tests_000000000000000000000000000000000000000000000000";

/// The error code of a call on a session another connection or token owns.
const NOT_OWNER: i64 = -32001;

fn deployment(dir: &Path) -> PathBuf {
    let config = dir.join("deploy.toml");
    let token = |name: &str, secret: &str, roles: &str, sessions: &str| {
        format!(
            "[[token]]\nname = \"{name}\"\nsha256 = \"{}\"\nroles = [{roles}]\n{sessions}\n",
            auth::token_hash(secret)
        )
    };
    let text = [
        token("team", TEAM_ADMIN, "\"admin\"", "sessions = [\"team-\"]\n"),
        token("ops", OPS, "\"admin\"", ""),
        token("agent-a", AGENT_A, "\"agent\"", ""),
        token("agent-b", AGENT_B, "\"agent\"", ""),
        token("ci", CI, "\"agent\"", "sessions = [\"ci-\", \"nightly\"]\n"),
    ]
    .concat();
    std::fs::write(&config, text).unwrap();
    config
}

async fn start(
    dir: &Path,
) -> impl Fn(
    &'static str,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = Client<tokio::net::TcpStream>>>> {
    let server = Server::start(ServeOptions {
        config: deployment(dir),
        state_dir: dir.join("state"),
        quarantine: QuarantinePolicy::default(),
        store_url: None,
        migrate: false,
    })
    .await
    .unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move { server.serve_tcp("127.0.0.1:0", None, Some(tx)).await });
    let addr = rx.await.unwrap();
    move |token: &'static str| {
        Box::pin(async move {
            let mut c = Client::new(tokio::net::TcpStream::connect(addr).await.unwrap());
            ok(&c
                .call(
                    "initialize",
                    json!({"protocolVersion": "0.1", "token": token}),
                )
                .await);
            c
        })
    }
}

fn error(reply: &Value) -> (i64, String) {
    let e = reply
        .get("error")
        .unwrap_or_else(|| panic!("not an error: {reply}"));
    (
        e["code"].as_i64().unwrap(),
        e["message"].as_str().unwrap().to_owned(),
    )
}

#[test]
fn a_sessions_entry_grants_whole_segments_or_exactly_one_id() {
    let entries = ["ci-".to_owned(), "build.".to_owned(), "nightly".to_owned()];
    let grant = Grant {
        name: "ci".to_owned(),
        roles: vec![],
        sessions: entries.to_vec(),
        revoked: Default::default(),
    };
    for granted in ["ci-1", "ci-build.2", "ci-", "build.7", "nightly"] {
        assert!(grant.may_open(granted), "{granted} should be granted");
    }
    for refused in [
        "cider-prod",
        "ci",
        "ci_1",
        "cix",
        "nightly-2",
        "nightlyx",
        "nightly.",
        "build",
        "buildx",
        "prod-ci-1",
        "",
    ] {
        assert!(!grant.may_open(refused), "{refused} should be refused");
    }
    assert!(grants_session("a_", "a_b") && grants_session("a.", "a.b"));
    assert!(!grants_session("a", "a-b"));
    assert_eq!(
        describe_sessions(&entries),
        "sessions starting with \"ci-\", \"build.\" or the session \"nightly\""
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_opens_only_the_sessions_its_entries_grant() {
    let dir = tempfile::tempdir().unwrap();
    let connect = start(dir.path()).await;
    let mut ci = connect(CI).await;
    for session in ["ci-1", "nightly"] {
        ok(&ci
            .call(
                "session/open",
                json!({"sessionId": session, "agentId": "a"}),
            )
            .await);
    }
    for session in ["cider-prod", "ci", "nightly-2"] {
        let reply = ci
            .call(
                "session/open",
                json!({"sessionId": session, "agentId": "a"}),
            )
            .await;
        assert_eq!(
            error(&reply),
            (
                FORBIDDEN,
                format!(
                    "token \"ci\" may not open session \"{session}\": it may open sessions starting with \"ci-\" or the session \"nightly\""
                )
            )
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_limited_to_some_sessions_makes_and_revokes_only_their_session_rules() {
    let dir = tempfile::tempdir().unwrap();
    let connect = start(dir.path()).await;
    let mut ops = connect(OPS).await;
    let mut team = connect(TEAM_ADMIN).await;

    // The unlimited admin makes a project rule and a rule in its own session.
    let project = ok(&ops
        .call(
            "rules/add",
            json!({"rule": "Bash(make test)", "scope": "project"}),
        )
        .await)["rule"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    ok(&ops
        .call(
            "session/open",
            json!({"sessionId": "prod-1", "agentId": "a"}),
        )
        .await);
    let other = ok(&ops
        .call(
            "rules/add",
            json!({"rule": "Bash(ls)", "scope": "session", "sessionId": "prod-1"}),
        )
        .await)["rule"]["id"]
        .as_str()
        .unwrap()
        .to_owned();

    // The limited admin: no project or user rule, no revoking what is not its sessions'.
    for scope in ["project", "user"] {
        let reply = team
            .call("rules/add", json!({"rule": "Bash(ls)", "scope": scope}))
            .await;
        assert_eq!(
            error(&reply),
            (
                FORBIDDEN,
                format!(
                    "token \"team\" is limited to some sessions and so may add only session rules in them, not a {scope} rule"
                )
            )
        );
    }
    for id in [project.as_str(), other.as_str(), "no-such-rule"] {
        let reply = team.call("rules/revoke", json!({"id": id})).await;
        assert_eq!(
            error(&reply),
            (
                FORBIDDEN,
                format!(
                    "token \"team\" is limited to some sessions and so may revoke only their session rules; rule \"{id}\" is not one"
                )
            )
        );
    }

    // Its own session's rules: made and revoked.
    ok(&team
        .call(
            "session/open",
            json!({"sessionId": "team-1", "agentId": "a"}),
        )
        .await);
    let own = ok(&team
        .call(
            "rules/add",
            json!({"rule": "Bash(ls)", "scope": "session", "sessionId": "team-1"}),
        )
        .await)["rule"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    ok(&team.call("rules/revoke", json!({"id": own})).await);

    // Nothing of the others' was touched.
    let listed = ok(&ops.call("rules/list", json!({"sessionId": "prod-1"})).await).clone();
    let ids: Vec<&str> = listed["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    assert!(
        ids.contains(&project.as_str()) && ids.contains(&other.as_str()),
        "{listed}"
    );
}

fn hook_input(session: &str) -> Value {
    json!({"input": {
        "hook_event_name": "PreToolUse",
        "session_id": session,
        "tool_name": "Bash",
        "tool_input": {"command": "ls"},
        "tool_use_id": "toolu_1",
    }})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hook_call_cannot_touch_another_client_s_session_or_another_token_s() {
    let dir = tempfile::tempdir().unwrap();
    let connect = start(dir.path()).await;

    // Client A has a session with an open turn.
    let mut a = connect(AGENT_A).await;
    ok(&a
        .call(
            "session/open",
            json!({"sessionId": "work-1", "agentId": "a"}),
        )
        .await);
    ok(&a.call("turn/start", json!({"sessionId": "work-1"})).await);

    // B, with any-session agent rights, asks through the hook about A's session: refused, and
    // A's turn is still A's (ending it works, once).
    let mut b = connect(AGENT_B).await;
    let reply = b.call("hook/claude-code", hook_input("work-1")).await;
    assert_eq!(
        error(&reply),
        (
            NOT_OWNER,
            "session \"work-1\" is owned by another connection".to_owned()
        )
    );
    ok(&a.call("turn/end", json!({"sessionId": "work-1"})).await);

    // A Claude Code session belongs to the first token that asks about it: B asks (answered),
    // A is refused both through the hook and through session/open; B asks again, answered.
    let answered = ok(&b.call("hook/claude-code", hook_input("cc-1")).await).clone();
    assert!(answered.get("outcome").is_some(), "{answered}");
    let refused = "session \"cc-1\" is asked about through hook/claude-code by another token";
    let reply = a.call("hook/claude-code", hook_input("cc-1")).await;
    assert_eq!(error(&reply), (NOT_OWNER, refused.to_owned()));
    let reply = a
        .call("session/open", json!({"sessionId": "cc-1", "agentId": "a"}))
        .await;
    assert_eq!(error(&reply), (NOT_OWNER, refused.to_owned()));
    let mut b2 = connect(AGENT_B).await;
    ok(&b2.call("hook/claude-code", hook_input("cc-1")).await);

    // The log of cc-1 holds only B's calls: two turns, nothing from A.
    let log = std::fs::read_to_string(dir.path().join("state").join("sessions").join("cc-1.jsonl"))
        .unwrap();
    assert_eq!(log.matches("\"type\":\"turn/start\"").count(), 2, "{log}");
    assert_eq!(
        log.matches("\"type\":\"approval/asked\"").count(),
        2,
        "{log}"
    );
}

fn cli(dir: &Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_approval-host"))
        .arg("--state-dir")
        .arg(dir.join("state"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn token_new_takes_prefixes_that_end_a_segment_and_whole_ids_apart() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("deploy.toml");
    std::fs::write(&config, "[approval]\npolicy = \"ask\"\n").unwrap();
    let path = config.display().to_string();
    let new = |extra: &[&str]| {
        let mut args = vec!["token", "new", "--name", "ci", "--role", "agent"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--config", &path]);
        cli(dir.path(), &args)
    };

    let out = new(&["--sessions", "ci"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        "approval-host: --sessions \"ci\": a prefix must end with \"-\", \"_\" or \".\" so that it grants \
         whole segments only (\"ci\" would grant \"cix\" too); write --sessions \"ci-\", or \
         --session \"ci\" for exactly that session"
    );
    let out = new(&["--session", "ci-"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim(),
        "approval-host: --session \"ci-\": a session id does not end with \"-\", \"_\" or \".\" (that is \
         a prefix: --sessions \"ci-\")"
    );
    assert_eq!(
        std::fs::read_to_string(&config).unwrap(),
        "[approval]\npolicy = \"ask\"\n"
    );

    let out = new(&["--sessions", "ci-", "--session", "nightly"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let deployment = approval_host::Deployment::load(&config).unwrap();
    assert_eq!(deployment.tokens[0].sessions, ["ci-", "nightly"]);
}

/// Asks in `session` on `c` (which answers its own prompts) and answers `allow-always` with a
/// project rule; returns the outcome and the `approval/ruleDeclined` reasons.
async fn answer_always_project(
    c: &mut Client<tokio::net::TcpStream>,
    session: &str,
) -> (String, Vec<String>) {
    ok(&c
        .call(
            "session/open",
            json!({"sessionId": session, "agentId": "a"}),
        )
        .await);
    ok(&c.call("turn/start", json!({"sessionId": session})).await);
    ok(&c
        .call(
            "tool/call",
            json!({"sessionId": session, "callId": "c1", "name": "Bash", "arguments": {"command": "make test"}}),
        )
        .await);
    let id = c
        .send(
            "approval/request",
            json!({"sessionId": session, "agentId": "a", "toolName": "Bash", "callId": "c1"}),
        )
        .await;
    let mut declined = Vec::new();
    loop {
        let message = c.line().await.expect("the server closed the connection");
        if message["method"] == "approval/prompt" {
            c.send_value(&json!({"jsonrpc": "2.0", "id": message["id"], "result":
                {"decision": "allow-always", "rule": "Bash(make test)", "scope": "project"}}))
                .await;
        } else if message["method"] == approval_host::serve::RULE_DECLINED {
            declined.push(message["params"]["reason"].as_str().unwrap().to_owned());
        } else if message["id"] == id {
            return (
                message["result"]["outcome"].as_str().unwrap().to_owned(),
                declined,
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_limited_to_some_sessions_answers_with_an_answerer_s_authority() {
    use approval_host::answer::RuleScope;
    use approval_host::rules::proposals;
    let dir = tempfile::tempdir().unwrap();
    let connect = start(dir.path()).await;
    let answerer = |c: Client<tokio::net::TcpStream>| async move {
        let mut c = c;
        ok(&c
            .call(
                "initialize",
                json!({"protocolVersion": "0.1", "answerer": true}),
            )
            .await);
        c
    };

    // Limited to team-: its project rule is declined; the call is allowed once.
    let mut team = answerer(connect(TEAM_ADMIN).await).await;
    let (outcome, declined) = answer_always_project(&mut team, "team-1").await;
    assert_eq!(outcome, "allowed-once");
    assert_eq!(
        declined,
        [proposals::declined_for_answerers(RuleScope::Project)]
    );
    drop(team);

    // An admin of every session makes it.
    let mut ops = answerer(connect(OPS).await).await;
    let (outcome, declined) = answer_always_project(&mut ops, "prod-1").await;
    assert_eq!((outcome.as_str(), declined.len()), ("allowed-once", 0));
    let listed = ok(&ops.call("rules/list", json!({})).await).clone();
    let rules = listed["rules"].as_array().unwrap();
    assert_eq!(rules.len(), 1, "{listed}");
    assert_eq!(rules[0]["scope"], "project");
    assert_eq!(rules[0]["rule"], "Bash(make test)");
}
