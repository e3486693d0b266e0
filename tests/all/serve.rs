//! `approval-host serve` driven as a subprocess over stdio (and a Unix socket for several
//! clients): sessions, turns, requests, policy, context, prompts and ownership, cancellation, a
//! client disconnecting mid-prompt, malformed input, and hot reload.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use approval_host::bundled;
use serde_json::{Value, json};

use crate::support::{events_at, log_path};

/// A bound on waiting for one message, so a broken server fails the test instead of hanging it.
const PATIENCE: Duration = Duration::from_secs(30);

pub(crate) struct Client {
    pub(crate) child: Child,
    stdin: Option<ChildStdin>,
    incoming: Receiver<Value>,
    pub(crate) stash: VecDeque<Value>,
    next_id: u64,
}

impl Client {
    pub(crate) fn spawn(state: &Path, config: &Path, extra: &[&str]) -> Client {
        Client::spawn_with(state, config, extra, Stdio::null())
    }

    /// [`Client::spawn`], returning also the rest of the first stderr line that starts with
    /// `prefix` (the server's `callbacks listening on` line, say); the rest of stderr is drained.
    pub(crate) fn spawn_reading(
        state: &Path,
        config: &Path,
        extra: &[&str],
        prefix: &str,
    ) -> (Client, String) {
        let mut client = Client::spawn_with(state, config, extra, Stdio::piped());
        let stderr = client.child.stderr.take().unwrap();
        let (tx, found) = channel();
        let wanted = prefix.to_owned();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Some(rest) = line.strip_prefix(&wanted) {
                    let _ = tx.send(rest.to_owned());
                }
            }
        });
        let rest = found
            .recv_timeout(PATIENCE)
            .unwrap_or_else(|e| panic!("no stderr line starting {prefix:?}: {e}"));
        (client, rest)
    }

    fn spawn_with(state: &Path, config: &Path, extra: &[&str], stderr: Stdio) -> Client {
        let mut child = Command::new(env!("CARGO_BIN_EXE_approval-host"))
            .arg("--state-dir")
            .arg(state)
            .args(["serve", "--config"])
            .arg(config)
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, incoming) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let value: Value = serde_json::from_str(&line).unwrap_or_else(|e| {
                    panic!("the server wrote a line that is not JSON ({e}): {line}")
                });
                if tx.send(value).is_err() {
                    break;
                }
            }
        });
        Client {
            stdin: child.stdin.take(),
            child,
            incoming,
            stash: VecDeque::new(),
            next_id: 1,
        }
    }

    pub(crate) fn send_line(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    pub(crate) fn send(&mut self, method: &str, params: Value) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.send_line(
            &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string(),
        );
        id
    }

    /// The next message matching `want`, keeping the others for later.
    pub(crate) fn wait(&mut self, want: impl Fn(&Value) -> bool) -> Value {
        if let Some(i) = self.stash.iter().position(&want) {
            return self.stash.remove(i).unwrap();
        }
        let deadline = Instant::now() + PATIENCE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.incoming.recv_timeout(left) {
                Ok(v) if want(&v) => return v,
                Ok(v) => self.stash.push_back(v),
                Err(RecvTimeoutError::Timeout) => {
                    panic!("no matching message; stash: {:?}", self.stash)
                }
                Err(RecvTimeoutError::Disconnected) => {
                    panic!("the server closed its output; stash: {:?}", self.stash)
                }
            }
        }
    }

    pub(crate) fn response(&mut self, id: u64) -> Value {
        self.wait(|v| v["id"] == id && v.get("method").is_none())
    }

    pub(crate) fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.send(method, params);
        let r = self.response(id);
        assert!(r.get("error").is_none(), "{method}: {r}");
        r["result"].clone()
    }

    pub(crate) fn error(&mut self, method: &str, params: Value) -> Value {
        let id = self.send(method, params);
        let r = self.response(id);
        r.get("error")
            .cloned()
            .unwrap_or_else(|| panic!("{method} did not fail: {r}"))
    }

    pub(crate) fn prompt(&mut self) -> Value {
        self.wait(|v| v["method"] == "approval/prompt")
    }

    pub(crate) fn reply(&mut self, prompt: &Value, answer: Value) {
        let id = prompt["id"].clone();
        let mut message = json!({"jsonrpc": "2.0", "id": id});
        match answer.get("error") {
            Some(e) => message["error"] = e.clone(),
            None => message["result"] = answer,
        }
        self.send_line(&message.to_string());
    }

    pub(crate) fn close_input(&mut self) {
        self.stdin.take();
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) fn deployment(dir: &Path, gate: &[u8]) -> PathBuf {
    let plugin = dir.join("gate.wasm");
    std::fs::write(&plugin, gate).unwrap();
    let config = dir.join("deploy.toml");
    std::fs::write(
        &config,
        "[[plugin]]\nname = \"gate\"\npath = \"gate.wasm\"\nrole = \"gate\"\n[plugin.config]\ntools = \"read\"\n",
    )
    .unwrap();
    config
}

pub(crate) fn open(client: &mut Client, session: &str) {
    client.call(
        "session/open",
        json!({"sessionId": session, "agentId": "a"}),
    );
    client.call("turn/start", json!({"sessionId": session}));
}

pub(crate) fn ask(client: &mut Client, session: &str, tool: &str) -> u64 {
    client.send(
        "approval/request",
        json!({"sessionId": session, "agentId": "a", "toolName": tool, "callId": "c1", "reason": "why"}),
    )
}

pub(crate) fn outcome(client: &mut Client, id: u64) -> String {
    let r = client.response(id);
    r["result"]["outcome"]
        .as_str()
        .unwrap_or_else(|| panic!("{r}"))
        .to_owned()
}

#[test]
fn sessions_turns_requests_policy_and_context() {
    let dir = tempfile::tempdir().unwrap();
    let config = deployment(dir.path(), bundled::ALLOW_TOOLS);
    let mut c = Client::spawn(dir.path(), &config, &["--no-watch"]);
    let init = c.call("initialize", json!({"protocolVersion": "0.1"}));
    assert_eq!(init["pluginApiVersions"], json!(["0.1", "0.2", "0.3"]));
    open(&mut c, "s1");
    c.call(
        "tool/call",
        json!({"sessionId": "s1", "callId": "c1", "name": "read", "arguments": {"path": "x"}}),
    );
    let id = ask(&mut c, "s1", "read");
    assert_eq!(outcome(&mut c, id), "allowed-once");
    let id = ask(&mut c, "s1", "bash");
    assert_eq!(
        outcome(&mut c, id),
        "unavailable",
        "no answerer: fail closed"
    );

    let err = c.error(
        "policy/set",
        json!({"sessionId": "s1", "policy": "sometimes"}),
    );
    assert_eq!(err["code"], -32602);
    assert_eq!(
        err["message"],
        "approval policy must be one of \"ask\" or \"never\""
    );
    let set = c.call("policy/set", json!({"sessionId": "s1", "policy": "never"}));
    assert_eq!(set, json!({"changed": true, "policy": "never"}));
    let ctx = c.call("context/get", json!({"sessionId": "s1"}));
    assert_eq!(
        ctx["context"],
        json!([approval_host::policy::NEVER_CONTEXT])
    );
    assert_eq!(
        ctx["notices"],
        json!(["The approval policy changed from \"ask\" to \"never\" (changed by the user)."])
    );
    let id = ask(&mut c, "s1", "read");
    assert_eq!(outcome(&mut c, id), "rejected");

    c.call("turn/end", json!({"sessionId": "s1"}));
    let err = c.error(
        "approval/request",
        json!({"sessionId": "s1", "agentId": "a", "toolName": "read"}),
    );
    assert_eq!(err["code"], -32000);
    assert!(
        err["message"]
            .as_str()
            .unwrap()
            .contains("has no open turn"),
        "{err}"
    );

    // A subagent is pinned to never.
    c.call(
        "session/open",
        json!({"sessionId": "child", "agentId": "kid", "parentAgentId": "a"}),
    );
    let ctx = c.call("context/get", json!({"sessionId": "child"}));
    assert_eq!(
        ctx["context"],
        json!([
            approval_host::policy::NEVER_CONTEXT,
            approval_host::policy::SUBAGENT_CONTEXT
        ])
    );

    let events = events_at(&log_path(dir.path(), "s1"));
    let decided: Vec<&Value> = events
        .iter()
        .filter(|(t, _)| t == "approval/decided")
        .map(|(_, d)| d)
        .collect();
    assert_eq!(decided.len(), 3);
    assert_eq!(decided[0]["answerer"], "gate");
    assert_eq!(
        decided[0]["digest"],
        approval_host::plugin::digest(bundled::ALLOW_TOOLS)
    );
}

#[test]
fn reasons_reach_the_prompt_the_request_result_and_the_model_s_text() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("deny.wasm"), bundled::DENY_COMMANDS).unwrap();
    let config = dir.path().join("deploy.toml");
    std::fs::write(
        &config,
        "[[plugin]]\nname = \"deny-commands\"\npath = \"deny.wasm\"\nrole = \"gate\"\n[plugin.config]\npatterns = \"rm -rf\"\n",
    )
    .unwrap();
    let mut c = Client::spawn(dir.path(), &config, &["--no-watch"]);
    c.call(
        "initialize",
        json!({"protocolVersion": "0.1", "answerer": true}),
    );
    open(&mut c, "s1");
    // A 0.2 gate rejects with its reason: the result carries it and the model's exact text.
    c.call(
        "tool/call",
        json!({"sessionId": "s1", "callId": "c1", "name": "Bash", "arguments": {"command": "rm -rf build/"}}),
    );
    let id = ask(&mut c, "s1", "Bash");
    let r = c.response(id);
    // The digest of the version that answered, as on the decided event.
    let digest = r["result"]["digest"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert_eq!(digest.len(), 64, "{r}");
    assert_eq!(
        r["result"],
        json!({
            "outcome": "rejected",
            "answerer": "deny-commands",
            "digest": digest,
            "reason": "the command contains \"rm -rf\", which this deployment does not allow",
            "message": "tool \"Bash\" was rejected by policy \"deny-commands\": the command contains \"rm -rf\", which this deployment does not allow",
        })
    );
    // A question the gate passes on reaches the client with the call's arguments; the person's
    // reason comes back in the result.
    c.call(
        "tool/call",
        json!({"sessionId": "s1", "callId": "c1", "name": "Bash", "arguments": {"command": "ls"}}),
    );
    let id = ask(&mut c, "s1", "Bash");
    let prompt = c.prompt();
    assert_eq!(prompt["params"]["arguments"], json!({"command": "ls"}));
    assert_eq!(prompt["params"]["reason"], "why");
    c.reply(
        &prompt,
        json!({"decision": "reject", "reason": "not\nbefore lunch"}),
    );
    let mut r = c.response(id);
    let answerer = r["result"]["answerer"].take();
    assert!(
        answerer.as_str().unwrap().starts_with("client-"),
        "{answerer}"
    );
    assert_eq!(
        r["result"],
        json!({
            "outcome": "rejected",
            "answerer": null,
            "reason": "not before lunch",
            "message": "the user rejected tool \"Bash\": not before lunch",
        })
    );
    let events = events_at(&log_path(dir.path(), "s1"));
    let reasons: Vec<&Value> = events
        .iter()
        .filter(|(t, _)| t == "approval/decided")
        .map(|(_, d)| &d["reason"])
        .collect();
    assert_eq!(
        reasons,
        [
            "the command contains \"rm -rf\", which this deployment does not allow",
            "not before lunch"
        ]
    );
}

#[test]
fn prompts_go_to_the_owning_answerer_and_replies_map_to_outcomes() {
    let dir = tempfile::tempdir().unwrap();
    let config = deployment(dir.path(), bundled::ALLOW_TOOLS);
    let mut c = Client::spawn(dir.path(), &config, &["--no-watch"]);
    c.call(
        "initialize",
        json!({"protocolVersion": "0.1", "answerer": true}),
    );
    open(&mut c, "s1");
    let cases = [
        (json!({"decision": "allow-once"}), "allowed-once"),
        (json!({"decision": "reject"}), "rejected"),
        (json!({"decision": "cancel"}), "cancelled"),
        (json!({"decision": "allow-always"}), "rejected"),
        (json!({"what": "ever"}), "rejected"),
        (
            json!({"error": {"code": 1, "message": "ui crashed"}}),
            "unavailable",
        ),
    ];
    for (reply, expected) in cases {
        let id = ask(&mut c, "s1", "bash");
        let prompt = c.prompt();
        assert_eq!(prompt["params"]["sessionId"], "s1");
        assert_eq!(prompt["params"]["toolName"], "bash");
        assert_eq!(prompt["params"]["callId"], "c1");
        assert_eq!(prompt["params"]["reason"], "why");
        assert_eq!(prompt["params"]["requestId"].as_str().unwrap().len(), 36);
        c.reply(&prompt, reply.clone());
        assert_eq!(outcome(&mut c, id), expected, "{reply}");
    }
    // The gate decides first: no prompt for a listed tool.
    let id = ask(&mut c, "s1", "read");
    assert_eq!(outcome(&mut c, id), "allowed-once");
    assert!(c.stash.iter().all(|m| m["method"] != "approval/prompt"));
}

#[test]
fn cancelling_a_request_withdraws_its_prompt() {
    let dir = tempfile::tempdir().unwrap();
    let config = deployment(dir.path(), bundled::ALLOW_TOOLS);
    let mut c = Client::spawn(dir.path(), &config, &["--no-watch"]);
    c.call(
        "initialize",
        json!({"protocolVersion": "0.1", "answerer": true}),
    );
    open(&mut c, "s1");
    let id = ask(&mut c, "s1", "bash");
    let prompt = c.prompt();
    c.send_line(
        &json!({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"id": id}}).to_string(),
    );
    assert_eq!(outcome(&mut c, id), "cancelled");
    let withdrawn = c.wait(|v| v["method"] == "$/cancel_request");
    assert_eq!(withdrawn["params"]["id"], prompt["id"]);
    // A late reply to the withdrawn prompt is ignored.
    c.reply(&prompt, json!({"decision": "allow-once"}));
    let id = ask(&mut c, "s1", "bash");
    let prompt = c.prompt();
    c.reply(&prompt, json!({"decision": "reject"}));
    assert_eq!(outcome(&mut c, id), "rejected");
}

#[test]
fn a_client_that_disconnects_mid_prompt_settles_unavailable() {
    let dir = tempfile::tempdir().unwrap();
    let config = deployment(dir.path(), bundled::ALLOW_TOOLS);
    let mut c = Client::spawn(dir.path(), &config, &["--no-watch"]);
    c.call(
        "initialize",
        json!({"protocolVersion": "0.1", "answerer": true}),
    );
    open(&mut c, "s1");
    let id = ask(&mut c, "s1", "bash");
    c.prompt();
    c.close_input();
    assert_eq!(outcome(&mut c, id), "unavailable");
    assert!(c.child.wait().unwrap().success());
    let events = events_at(&log_path(dir.path(), "s1"));
    let kinds: Vec<&str> = events.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "turn/start",
            "approval/asked",
            "approval/decided",
            "turn/end"
        ],
        "the disconnect ended the turn after settling the question"
    );
    assert_eq!(events[2].1["failure"]["kind"], "error");
}

#[test]
fn malformed_input_gets_errors_and_the_server_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let config = deployment(dir.path(), bundled::ALLOW_TOOLS);
    let mut c = Client::spawn(dir.path(), &config, &["--no-watch"]);
    c.send_line("{not json");
    let e = c.wait(|v| v["id"].is_null() && v["error"]["code"] == -32700);
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("parse error")
    );
    c.send_line(&"x".repeat(2 << 20));
    c.wait(|v| v["id"].is_null() && v["error"]["code"] == -32600);
    c.send_line(r#"{"jsonrpc":"2.0","id":99}"#);
    c.wait(|v| v["id"] == 99 && v["error"]["code"] == -32600);
    assert_eq!(c.error("no/such", json!({}))["code"], -32601);
    assert_eq!(
        c.error("session/open", json!({"agentId": "a"}))["message"],
        "missing sessionId"
    );
    assert_eq!(
        c.error("session/open", json!({"sessionId": 7, "agentId": "a"}))["message"],
        "sessionId must be a string, not 7"
    );
    assert_eq!(
        c.error("turn/start", json!({"sessionId": "nobody"}))["code"],
        -32001
    );
    assert!(
        c.error(
            "session/open",
            json!({"sessionId": "../escape", "agentId": "a"})
        )["message"]
            .as_str()
            .unwrap()
            .contains("invalid session id")
    );
    open(&mut c, "fine");
    let id = ask(&mut c, "fine", "read");
    assert_eq!(outcome(&mut c, id), "allowed-once");
}

#[test]
fn sessions_are_owned_by_the_connection_that_opened_them() {
    let dir = tempfile::tempdir().unwrap();
    let config = deployment(dir.path(), bundled::ALLOW_TOOLS);
    let socket = dir.path().join("host.sock");
    let mut server = Command::new(env!("CARGO_BIN_EXE_approval-host"))
        .arg("--state-dir")
        .arg(dir.path())
        .args(["serve", "--no-watch", "--config"])
        .arg(&config)
        .arg("--socket")
        .arg(&socket)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let connect = || {
        let deadline = Instant::now() + PATIENCE;
        loop {
            match std::os::unix::net::UnixStream::connect(&socket) {
                Ok(s) => return s,
                Err(_) if Instant::now() < deadline => std::thread::yield_now(),
                Err(e) => panic!("{e}"),
            }
        }
    };
    let talk = |stream: &std::os::unix::net::UnixStream, line: Value| -> Value {
        let mut w = stream.try_clone().unwrap();
        writeln!(w, "{line}").unwrap();
        let mut r = BufReader::new(stream.try_clone().unwrap());
        let mut buf = String::new();
        r.read_line(&mut buf).unwrap();
        serde_json::from_str(&buf).unwrap()
    };
    let a = connect();
    let b = connect();
    let open = json!({"jsonrpc": "2.0", "id": 1, "method": "session/open", "params": {"sessionId": "s1", "agentId": "a"}});
    assert!(talk(&a, open.clone()).get("result").is_some());
    let r = talk(&b, open);
    assert_eq!(r["error"]["code"], -32001);
    assert_eq!(
        r["error"]["message"],
        "session \"s1\" is owned by another connection"
    );
    let r = talk(
        &b,
        json!({"jsonrpc": "2.0", "id": 2, "method": "turn/start", "params": {"sessionId": "s1"}}),
    );
    assert_eq!(
        r["error"]["message"],
        "session \"s1\" is owned by another connection"
    );
    // Once the owner goes, the session can be opened elsewhere.
    drop(a);
    let deadline = Instant::now() + PATIENCE;
    loop {
        let r = talk(
            &b,
            json!({"jsonrpc": "2.0", "id": 3, "method": "session/open", "params": {"sessionId": "s1", "agentId": "a"}}),
        );
        if r.get("result").is_some() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the session was never released: {r}"
        );
        std::thread::yield_now();
    }
    let _ = server.kill();
    let _ = server.wait();
}

fn plugins(c: &mut Client) -> Value {
    c.call("plugins/list", json!({}))["plugins"][0].clone()
}

#[test]
fn hot_reload_swaps_a_changed_plugin_and_keeps_the_old_one_when_the_new_one_is_broken() {
    let dir = tempfile::tempdir().unwrap();
    let config = deployment(dir.path(), bundled::ALLOW_TOOLS);
    let mut c = Client::spawn(dir.path(), &config, &[]);
    open(&mut c, "s1");
    let old = approval_host::plugin::digest(bundled::ALLOW_TOOLS);
    let new = approval_host::plugin::digest(bundled::REJECT_ALL);
    assert_eq!(plugins(&mut c)["digest"], old.as_str());
    let started = Instant::now();
    std::fs::write(dir.path().join("gate.wasm"), bundled::REJECT_ALL).unwrap();
    // Wait for the watcher to see the change (observed through the protocol, bounded).
    while plugins(&mut c)["digest"] != new.as_str() {
        assert!(started.elapsed() < PATIENCE, "the new version never loaded");
        std::thread::yield_now();
    }
    let id = ask(&mut c, "s1", "read");
    assert_eq!(outcome(&mut c, id), "rejected", "the new version answers");

    std::fs::write(dir.path().join("gate.wasm"), b"broken").unwrap();
    while plugins(&mut c)["state"] != "failed" {
        assert!(
            started.elapsed() < PATIENCE,
            "the failed reload was never reported"
        );
        std::thread::yield_now();
    }
    let status = plugins(&mut c);
    assert_eq!(
        status["digest"],
        new.as_str(),
        "the old version keeps serving"
    );
    assert!(
        status["error"]
            .as_str()
            .unwrap()
            .contains("is not a WebAssembly component"),
        "{status}"
    );
    let id = ask(&mut c, "s1", "read");
    assert_eq!(outcome(&mut c, id), "rejected");

    // Removing the entry unloads the plugin: fail closed.
    std::fs::write(&config, "").unwrap();
    let report = c.call("plugins/reload", json!({}));
    assert_eq!(report["removed"], json!(["gate"]));
    let id = ask(&mut c, "s1", "read");
    assert_eq!(outcome(&mut c, id), "unavailable");
}

#[test]
fn a_subagent_opened_over_serve_inherits_its_parents_sandbox_override() {
    let dir = tempfile::tempdir().unwrap();
    // The parent's session switched itself to read-only in an earlier run.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let service =
            approval_host::ApprovalService::open_dir(dir.path(), approval_host::Policy::Ask);
        let parent = service.agent("parent", "a").await.unwrap();
        approval_host::tools::sandbox::set_session_mode(
            &parent,
            approval_host::tools::sandbox::SandboxMode::ReadOnly,
            Some("user"),
        )
        .await
        .unwrap();
    });
    drop(runtime);
    let config = deployment(dir.path(), bundled::ALLOW_TOOLS);
    let mut c = Client::spawn(dir.path(), &config, &["--no-watch"]);
    c.call("initialize", json!({"protocolVersion": "0.1"}));
    c.call(
        "session/open",
        json!({"sessionId": "parent", "agentId": "a"}),
    );
    let opened = c.call(
        "session/open",
        json!({"sessionId": "child", "agentId": "kid", "parentAgentId": "a"}),
    );
    assert_eq!(opened["policy"], "never");
    let ctx = c.call("context/get", json!({"sessionId": "child"}));
    assert_eq!(
        ctx["context"],
        json!([
            approval_host::policy::NEVER_CONTEXT,
            "Sandbox mode: read-only, inherited from the delegating agent: your commands run no wider than its own.",
            approval_host::policy::SUBAGENT_CONTEXT
        ])
    );
    assert_eq!(
        events_at(&log_path(dir.path(), "child")),
        [
            (
                "sandbox/mode".to_owned(),
                json!({"mode": "read-only", "source": "delegation"})
            ),
            (
                "approval/policy".to_owned(),
                json!({"policy": "never", "source": "delegation"})
            ),
        ]
    );
}

#[test]
fn standing_rules_over_serve_an_allow_always_reply_answers_the_next_identical_call() {
    let dir = tempfile::tempdir().unwrap();
    let config = deployment(dir.path(), bundled::ALLOW_TOOLS);
    let mut c = Client::spawn(dir.path(), &config, &["--no-watch"]);
    c.call(
        "initialize",
        json!({"protocolVersion": "0.1", "answerer": true}),
    );
    open(&mut c, "s1");
    let call = |c: &mut Client, id: &str, command: &str| {
        c.call(
            "tool/call",
            json!({"sessionId": "s1", "callId": id, "name": "bash", "arguments": {"command": command}}),
        );
        c.send(
            "approval/request",
            json!({"sessionId": "s1", "agentId": "a", "toolName": "bash", "callId": id}),
        )
    };
    // The person answers "always" with a rule for the project.
    let id = call(&mut c, "c1", "cargo test -p host");
    let prompt = c.prompt();
    c.reply(
        &prompt,
        json!({"decision": "allow-always", "rule": "bash(cargo test:*)", "scope": "project"}),
    );
    assert_eq!(outcome(&mut c, id), "allowed-once");
    // The next matching call never reaches the person.
    let id = call(&mut c, "c2", "cargo test --release");
    assert_eq!(outcome(&mut c, id), "allowed-once");
    assert!(c.stash.iter().all(|m| m["method"] != "approval/prompt"));
    let listed = c.call("rules/list", json!({}));
    let rules = listed["rules"].as_array().unwrap();
    assert_eq!(rules.len(), 1);
    assert_eq!(rules[0]["rule"], "bash(cargo test:*)");
    assert_eq!(rules[0]["scope"], "project");
    assert_eq!(rules[0]["creator"], "answerer:client-1");
    assert_eq!(rules[0]["uses"], 1);
    let rule_id = rules[0]["id"].as_str().unwrap().to_owned();
    let decided: Vec<Value> = events_at(&log_path(dir.path(), "s1"))
        .into_iter()
        .filter(|(t, _)| t == "approval/decided")
        .map(|(_, d)| d)
        .collect();
    assert_eq!(decided[0]["ruleAdded"], rule_id.as_str());
    assert_eq!(decided[1]["answerer"], format!("rule:{rule_id}"));

    // rules/add and rules/revoke: a session rule for this connection's own session.
    let added = c.call(
        "rules/add",
        json!({"rule": "bash(ls:*)", "scope": "session", "sessionId": "s1", "for": "1h", "reason": "listing is harmless"}),
    );
    assert_eq!(added["rule"]["session"], "s1");
    assert!(added["rule"]["expiresAt"].is_string());
    let id = call(&mut c, "c3", "ls -la");
    assert_eq!(outcome(&mut c, id), "allowed-once");
    c.call("rules/revoke", json!({"id": rule_id}));
    let id = call(&mut c, "c4", "cargo test");
    let prompt = c.prompt();
    c.reply(&prompt, json!({"decision": "reject"}));
    assert_eq!(
        outcome(&mut c, id),
        "rejected",
        "a revoked rule answers nothing"
    );
    // Bad params name what is wrong; nothing is added.
    let e = c.error("rules/add", json!({"rule": "bash(a; b)"}));
    assert_eq!(e["code"], -32602);
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("one simple command"),
        "{e}"
    );
    let e = c.error("rules/add", json!({"rule": "bash", "scope": "session"}));
    assert_eq!(e["code"], -32602);
    let e = c.error("rules/add", json!({"rule": "bash", "scope": "galaxy"}));
    assert!(e["message"].as_str().unwrap().contains("\"galaxy\""), "{e}");
    let e = c.error("rules/revoke", json!({"id": "nope"}));
    assert_eq!(e["message"], "no active rule \"nope\"");
    assert_eq!(
        c.call("rules/list", json!({"sessionId": "s1"}))["rules"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

#[test]
fn a_stop_by_sigterm_cancels_questions_in_flight_and_ends_open_turns() {
    let dir = tempfile::tempdir().unwrap();
    let config = deployment(dir.path(), bundled::ALLOW_TOOLS);
    let mut c = Client::spawn(dir.path(), &config, &["--no-watch"]);
    c.call(
        "initialize",
        json!({"protocolVersion": "0.1", "answerer": true}),
    );
    open(&mut c, "s1");
    open(&mut c, "s2");
    // A question waiting on this client (which never replies) in s1; s2's turn is idle.
    ask(&mut c, "s1", "bash");
    c.prompt();
    let status = Command::new("kill")
        .args(["-TERM", &c.child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    assert!(c.child.wait().unwrap().success());
    let kinds =
        |session: &str| -> Vec<(String, Value)> { events_at(&log_path(dir.path(), session)) };
    let s1 = kinds("s1");
    let names: Vec<&str> = s1.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(
        names,
        [
            "turn/start",
            "approval/asked",
            "approval/decided",
            "turn/end"
        ],
        "a stop reads as a clean end, not a crash: {s1:?}"
    );
    assert_eq!(s1[2].1["outcome"], "cancelled");
    let s2: Vec<String> = kinds("s2").into_iter().map(|(t, _)| t).collect();
    assert_eq!(s2, ["turn/start", "turn/end"]);
}
