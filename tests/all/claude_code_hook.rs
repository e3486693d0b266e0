//! The Claude Code hook as Claude Code runs it, a process per tool call: through a real
//! `serve` on a Unix socket (the same log as in process), when that server is gone or silent
//! (never a grant), deferring undecided calls, Claude Code's permission mode, and parallel calls
//! of one session.

use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};

use approval_host::bundled;
use serde_json::{Value, json};

use crate::support::{SocketServer, events_at, log_path};

fn deployment(dir: &Path, extra: &str) -> PathBuf {
    let config = dir.join("deploy.toml");
    std::fs::write(
        &config,
        format!(
            "[[plugin]]\nname = \"allow-tools\"\npath = {:?}\nrole = \"gate\"\n[plugin.config]\ntools = \"Read\"\n\n\
             [[plugin]]\nname = \"deny-commands\"\npath = {:?}\nrole = \"gate\"\n[plugin.config]\npatterns = \"rm -rf\"\n{extra}",
            bundled::ALLOW_TOOLS_PATH,
            bundled::DENY_COMMANDS_PATH
        ),
    )
    .unwrap();
    config
}

fn input(session: &str, tool: &str, args: Value, id: &str, mode: &str) -> String {
    json!({"session_id": session, "transcript_path": "/tmp/t.jsonl", "cwd": "/w",
           "permission_mode": mode, "hook_event_name": "PreToolUse",
           "tool_name": tool, "tool_input": args, "tool_use_id": id})
    .to_string()
}

/// `hook claude-code ARGS…`, running.
fn spawn_hook(state: &Path, args: &[&str], stdin: &str) -> Child {
    crate::support::spawn_hook(state, "claude-code", args, stdin)
}

fn hook(state: &Path, args: &[&str], stdin: &str) -> Output {
    spawn_hook(state, args, stdin).wait_with_output().unwrap()
}

/// What the hook printed: its output object, or `None` for nothing.
fn printed(out: &Output) -> Option<Value> {
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    (!text.trim().is_empty()).then(|| serde_json::from_str(&text).unwrap())
}

fn decision(out: &Output) -> (String, String) {
    let v = printed(out).expect("a decision");
    (
        v["hookSpecificOutput"]["permissionDecision"]
            .as_str()
            .unwrap()
            .to_owned(),
        v["hookSpecificOutput"]["permissionDecisionReason"]
            .as_str()
            .unwrap()
            .to_owned(),
    )
}

/// A session's events with the per-question UUIDs blanked, for comparing two sessions.
fn shape(state: &Path, session: &str) -> Vec<(String, Value)> {
    events_at(&log_path(state, session))
        .into_iter()
        .map(|(t, mut d)| {
            if d.get("id").is_some() {
                d["id"] = json!("-");
            }
            (t, d)
        })
        .collect()
}

#[test]
fn the_hook_through_a_warm_serve_answers_and_writes_the_same_log_as_in_process() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path();
    let config = deployment(state, "");
    let server = SocketServer::start(state, &config);
    let calls = [
        ("Read", json!({"file_path": "/w/a"}), "allow"),
        ("Bash", json!({"command": "rm -rf build"}), "deny"),
        ("Bash", json!({"command": "ls"}), "ask"),
    ];
    let mut answers = Vec::new();
    for (i, (tool, args, want)) in calls.iter().enumerate() {
        let id = format!("toolu_{i}");
        let through = hook(
            state,
            &["--socket", server.socket()],
            &input("cc-socket", tool, args.clone(), &id, "default"),
        );
        let local = hook(
            state,
            &["--config", config.to_str().unwrap()],
            &input("cc-local", tool, args.clone(), &id, "default"),
        );
        let (d, reason) = decision(&through);
        assert_eq!(d, *want, "{tool} {args}");
        assert_eq!(decision(&local), (d, reason.clone()), "the same answer");
        answers.push(reason);
    }
    assert_eq!(answers[0], "allowed once by the approval-host deployment");
    assert_eq!(
        answers[1],
        "tool \"Bash\" was rejected by policy \"deny-commands\": the command contains \"rm -rf\", which this deployment does not allow"
    );
    drop(server);
    let socket_log = shape(state, "cc-socket");
    assert_eq!(socket_log, shape(state, "cc-local"));
    let types: Vec<&str> = socket_log.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(
        types[..5],
        [
            "turn/start",
            "tool/call",
            "approval/asked",
            "approval/decided",
            "turn/end"
        ]
    );
    assert_eq!(socket_log[1].1["permissionMode"], "default");
}

/// A server that answers it could not carry the call out (here: the call nests deeper than a log
/// line may, so it cannot be recorded) blocks the call, as a hook failing in process does; only a
/// server that cannot be reached leaves the call to the fallback. Deep enough that the server
/// could not even read the request, the hook blocks it itself.
#[test]
fn a_call_the_server_cannot_record_is_blocked_not_left_to_the_fallback() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path();
    let config = deployment(state, "");
    let server = SocketServer::start(state, &config);
    let nested = crate::support::nested;
    // Copilot's arguments come as a string: the server reads the request, and refuses the record.
    let copilot = json!({"sessionId": "cp-deep", "timestamp": 1, "cwd": "/w", "toolName": "bash",
        "toolArgs": json!({"command": "ls", "x": nested(118)}).to_string()})
    .to_string();
    let out =
        crate::support::spawn_hook(state, "copilot", &["--socket", server.socket()], &copilot)
            .wait_with_output()
            .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(printed["permissionDecision"], "deny", "{printed}");
    let reason = printed["permissionDecisionReason"].as_str().unwrap();
    assert!(reason.contains("could not answer the call"), "{reason}");
    assert!(
        reason.contains("JSON nests more than 120 levels"),
        "{reason}"
    );
    // Claude Code's arguments are part of its input: the hook finds them too deep itself.
    for depth in [118, 124] {
        let deep = input(
            "cc-deep",
            "Read",
            json!({"file_path": "/w/a", "x": nested(depth)}),
            &format!("toolu_deep_{depth}"),
            "default",
        );
        let out = hook(state, &["--socket", server.socket()], &deep);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{depth}: {stderr}");
        assert_eq!(String::from_utf8_lossy(&out.stdout), "", "{depth}");
        assert!(
            stderr.contains("could not answer the call"),
            "{depth}: {stderr}"
        );
        assert!(
            stderr.contains("JSON nests more than 120 levels"),
            "{depth}: {stderr}"
        );
    }
    // The session goes on: a benign call through the same server is answered.
    let read = input(
        "cc-deep",
        "Read",
        json!({"file_path": "/w/a"}),
        "toolu_1",
        "default",
    );
    let (d, _) = decision(&hook(state, &["--socket", server.socket()], &read));
    assert_eq!(d, "allow");
    drop(server);
    let types: Vec<String> = events_at(&log_path(state, "cc-deep"))
        .into_iter()
        .map(|(t, _)| t)
        .collect();
    assert!(
        types.iter().filter(|t| *t == "tool/call").count() == 1,
        "{types:?}"
    );
}

#[test]
fn a_missing_or_silent_server_never_grants_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path();
    let config = deployment(state, "");
    let gone = state.join("nobody.sock");
    let read = input(
        "cc-1",
        "Read",
        json!({"file_path": "/w/a"}),
        "toolu_1",
        "default",
    );

    // Default fallback: nobody decided, so Claude Code asks; the reason names the socket.
    let (d, reason) = decision(&hook(state, &["--socket", gone.to_str().unwrap()], &read));
    assert_eq!(d, "ask");
    assert!(
        reason.starts_with(&format!(
            "tool \"Read\" requires approval, but no approval channel is available (approval-host serve at {} did not answer: ",
            gone.display()
        )),
        "{reason}"
    );
    // Deferring prints nothing at all.
    let out = hook(
        state,
        &[
            "--socket",
            gone.to_str().unwrap(),
            "--when-undecided",
            "defer",
        ],
        &read,
    );
    assert_eq!(printed(&out), None);

    // In process instead: the deployment decides, and the reason says where.
    let (d, reason) = decision(&hook(
        state,
        &[
            "--socket",
            gone.to_str().unwrap(),
            "--fallback",
            "in-process",
            "--config",
            config.to_str().unwrap(),
        ],
        &read,
    ));
    assert_eq!(d, "allow");
    assert!(
        reason.starts_with(
            "allowed once by the approval-host deployment (answered in process: approval-host serve at "
        ),
        "{reason}"
    );
    let err = hook(
        state,
        &[
            "--socket",
            gone.to_str().unwrap(),
            "--fallback",
            "in-process",
        ],
        &read,
    );
    assert_eq!(err.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&err.stderr).contains("--fallback in-process needs --config"));

    // A server that accepts and never answers: the deadline, then no grant.
    let silent = state.join("silent.sock");
    let listener = UnixListener::bind(&silent).unwrap();
    let child = spawn_hook(
        state,
        &["--socket", silent.to_str().unwrap(), "--timeout", "0.5"],
        &read,
    );
    let (held, _) = listener.accept().unwrap();
    let (d, reason) = decision(&child.wait_with_output().unwrap());
    drop(held);
    assert_eq!(d, "ask");
    assert!(
        reason.ends_with("did not answer: no answer within 0.5 s)"),
        "{reason}"
    );
}

#[test]
fn undecided_calls_defer_to_claude_code_by_flag_or_permission_mode_and_decisions_still_print() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path();
    let config = deployment(
        state,
        "\n[claude-code]\ndefer-in-modes = [\"acceptEdits\", \"plan\"]\n",
    );
    let c = config.to_str().unwrap();
    let ls = |mode: &str, id: &str| input("cc-2", "Bash", json!({"command": "ls"}), id, mode);
    assert_eq!(
        decision(&hook(state, &["--config", c], &ls("default", "t1"))).0,
        "ask"
    );
    assert_eq!(
        printed(&hook(state, &["--config", c], &ls("acceptEdits", "t2"))),
        None
    );
    assert_eq!(
        printed(&hook(state, &["--config", c], &ls("plan", "t3"))),
        None
    );
    assert_eq!(
        printed(&hook(
            state,
            &["--config", c, "--when-undecided", "defer"],
            &ls("default", "t4")
        )),
        None
    );
    // A gate's decision is printed in every mode: deferring is only for what nobody decided.
    let rm = input(
        "cc-2",
        "Bash",
        json!({"command": "rm -rf x"}),
        "t5",
        "acceptEdits",
    );
    assert_eq!(
        decision(&hook(
            state,
            &["--config", c, "--when-undecided", "defer"],
            &rm
        ))
        .0,
        "deny"
    );
    let read = input("cc-2", "Read", json!({"file_path": "/w/a"}), "t6", "plan");
    assert_eq!(decision(&hook(state, &["--config", c], &read)).0, "allow");
    // Through a server, its deployment's modes apply too.
    let server = SocketServer::start(state, &config);
    let out = hook(state, &["--socket", server.socket()], &ls("plan", "t7"));
    assert_eq!(printed(&out), None);
    drop(server);
    let modes: Vec<Value> = events_at(&log_path(state, "cc-2"))
        .into_iter()
        .filter(|(t, _)| t == "tool/call")
        .map(|(_, d)| d["permissionMode"].clone())
        .collect();
    assert_eq!(
        modes,
        [
            "default",
            "acceptEdits",
            "plan",
            "default",
            "acceptEdits",
            "plan",
            "plan"
        ]
    );
    // A bad mode in the deployment names the file and the value.
    std::fs::write(&config, "[claude-code]\ndefer-in-modes = [\"yolo\"]\n").unwrap();
    let out = hook(state, &["--config", c], &ls("default", "t8"));
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("deploy.toml")
            && err.contains("\"yolo\" is not a Claude Code permission mode"),
        "{err}"
    );
}

#[test]
fn parallel_calls_of_one_session_are_all_answered_and_paired_through_the_socket_and_in_process() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path();
    let config = deployment(state, "");
    let server = SocketServer::start(state, &config);
    let through: Vec<Child> = (0..8)
        .map(|i| {
            spawn_hook(
                state,
                &["--socket", server.socket()],
                &input(
                    "cc-par",
                    "Read",
                    json!({"file_path": "/w/a"}),
                    &format!("s{i}"),
                    "default",
                ),
            )
        })
        .collect();
    let local: Vec<Child> = (0..4)
        .map(|i| {
            spawn_hook(
                state,
                &["--config", config.to_str().unwrap()],
                &input(
                    "cc-par-local",
                    "Read",
                    json!({"file_path": "/w/a"}),
                    &format!("l{i}"),
                    "default",
                ),
            )
        })
        .collect();
    for child in through.into_iter().chain(local) {
        assert_eq!(decision(&child.wait_with_output().unwrap()).0, "allow");
    }
    drop(server);
    for (session, n) in [("cc-par", 8), ("cc-par-local", 4)] {
        let events = events_at(&log_path(state, session));
        let count = |t: &str| events.iter().filter(|(e, _)| e == t).count();
        assert_eq!(
            (count("approval/asked"), count("approval/decided")),
            (n, n),
            "{session}"
        );
        let out = Command::new(env!("CARGO_BIN_EXE_approval-host"))
            .arg("--state-dir")
            .arg(state)
            .args(["log", session])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
}

#[test]
fn serve_holds_a_hook_s_session_open_between_calls_so_each_call_does_not_read_its_log_again() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path();
    let config = deployment(state, "");
    let server = SocketServer::start(state, &config);
    let store = approval_host::DirStore::new(state);
    let calls = [
        ("Read", json!({"file_path": "/w/a"}), "allow"),
        ("Bash", json!({"command": "rm -rf build"}), "deny"),
        ("Read", json!({"file_path": "/w/b"}), "allow"),
    ];
    for (i, (tool, args, want)) in calls.iter().enumerate() {
        let out = hook(
            state,
            &["--socket", server.socket()],
            &input(
                "cc-warm",
                tool,
                args.clone(),
                &format!("toolu_{i}"),
                "default",
            ),
        );
        assert_eq!(decision(&out).0, *want, "call {i}");
        // The call is over and the server still holds the session: its log stays open there
        // (and locked against every other writer) for the next call.
        match approval_host::log::SessionLog::open(&store, "cc-warm") {
            Err(approval_host::LogError::Locked { .. }) => {}
            other => panic!("after call {i}: {:?}", other.map(|log| log.len())),
        }
    }
    drop(server);
    // Each call wrote its own turn once, in order, and the log reopens whole.
    let log = approval_host::log::SessionLog::open(&store, "cc-warm").unwrap();
    assert_eq!(log.len(), 15);
    drop(log);
    let types: Vec<String> = events_at(&log_path(state, "cc-warm"))
        .into_iter()
        .map(|(t, _)| t)
        .collect();
    let turn = [
        "turn/start",
        "tool/call",
        "approval/asked",
        "approval/decided",
        "turn/end",
    ];
    assert_eq!(types, turn.repeat(3));
}
