//! The Codex, Gemini CLI and Copilot CLI hooks as each CLI runs them, a process per tool call:
//! every fixture in `tests/agent-hooks/<cli>/` (an input in the shape the CLI's documentation and
//! source give, and the exact output, exit code, recorded tool and outcome expected) runs in
//! process and through a warm `serve --socket`, with the same answers and the same session logs.
//! One rule set answers all three CLIs (and Claude Code) alike; the CLIs' own settings files are
//! protected; a hook that cannot answer blocks the call in the way its CLI honours.

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::{Value, json};

use crate::support::{SocketServer, events_at, log_path, spawn_hook};

/// The rules every fixture is answered by.
const RULES: &str = "[[rule]]\nrule = \"Bash(git status)\"\n\n\
    [[rule]]\nrule = \"Read(//w/src/**)\"\n\n\
    [[rule]]\nrule = \"WebFetch(domain:example.com)\"\n\n\
    [[rule]]\nrule = \"Bash(rm:*)\"\neffect = \"reject\"\nreason = \"deleting files is not allowed here\"\n\n\
    [[rule]]\nrule = \"mcp__github__delete_*\"\neffect = \"reject\"\nreason = \"deleting repositories is not allowed\"\n\n\
    [[rule]]\nrule = \"PermissionRequest(git fetch:*)\"\n";

/// The text a rejection by the rules gives, for the fixtures' `REJECT:<tool>`.
fn rejection(tool: &str, command_like: bool) -> String {
    if command_like {
        format!(
            "tool \"{tool}\" was rejected by policy \"rule:deployment-4\": deleting files is not allowed here"
        )
    } else {
        format!(
            "tool \"{tool}\" was rejected by policy \"rule:deployment-5\": deleting repositories is not allowed"
        )
    }
}

fn deployment(dir: &Path) -> PathBuf {
    let config = dir.join("deploy.toml");
    std::fs::write(&config, RULES).unwrap();
    config
}

struct Fixture {
    cli: &'static str,
    name: String,
    v: Value,
}

impl Fixture {
    fn all() -> Vec<Fixture> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/agent-hooks");
        let mut all = Vec::new();
        for cli in ["codex", "gemini", "copilot"] {
            let mut files: Vec<PathBuf> = std::fs::read_dir(root.join(cli))
                .unwrap()
                .map(|e| e.unwrap().path())
                .collect();
            files.sort();
            for path in files {
                let v: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap())
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                all.push(Fixture {
                    cli,
                    name: path.file_stem().unwrap().to_string_lossy().into_owned(),
                    v,
                });
            }
        }
        all
    }

    /// The input, with a session of this fixture's own so that one state directory holds all.
    fn input(&self) -> String {
        let mut input = self.v["input"].clone();
        for key in ["session_id", "sessionId"] {
            if input.get(key).is_some() {
                input[key] = json!(self.session());
            }
        }
        input.to_string()
    }

    /// The expected stdout as JSON (`None`: nothing printed), with `REJECT:<tool>` spelled out.
    fn expected_output(&self) -> Option<Value> {
        let mut out = self.v.get("output").cloned().unwrap_or(Value::Null);
        if out.is_null() {
            return None;
        }
        fill(&mut out, &|text: &str| {
            text.strip_prefix("REJECT:").map(|tool| {
                let command = self.v["tool"] == "Bash" || self.v["tool"] == "PermissionRequest";
                rejection(tool, command)
            })
        });
        Some(out)
    }

    fn session(&self) -> String {
        format!("{}-{}", self.cli, self.name)
    }
}

fn fill(v: &mut Value, f: &dyn Fn(&str) -> Option<String>) {
    match v {
        Value::String(s) => {
            if let Some(new) = f(s) {
                *s = new;
            }
        }
        Value::Object(map) => map.values_mut().for_each(|v| fill(v, f)),
        Value::Array(items) => items.iter_mut().for_each(|v| fill(v, f)),
        _ => {}
    }
}

fn hook(state: &Path, cli: &str, args: &[&str], stdin: &str) -> Output {
    spawn_hook(state, cli, args, stdin)
        .wait_with_output()
        .unwrap()
}

/// What a hook printed: `None` for nothing.
fn printed(out: &Output) -> Option<Value> {
    let text = String::from_utf8_lossy(&out.stdout);
    (!text.trim().is_empty())
        .then(|| serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text:?}")))
}

/// A session log's events with the values that differ from run to run (ids, times, digests)
/// masked.
fn shape(state: &Path, session: &str) -> Vec<(String, Value)> {
    events_at(&log_path(state, session))
        .into_iter()
        .map(|(t, mut d)| {
            for key in ["id", "callId"] {
                if d.get(key).is_some() {
                    d[key] = json!("-");
                }
            }
            (t, d)
        })
        .collect()
}

/// Runs every fixture in its own state directory, in process or through `socket`.
fn run_fixture(fixture: &Fixture, state: &Path, args: &[&str]) {
    let what = format!("{}/{} ({args:?})", fixture.cli, fixture.name);
    let out = hook(state, fixture.cli, args, &fixture.input());
    let exit = fixture.v["exit"].as_i64().unwrap();
    assert_eq!(
        i64::from(out.status.code().unwrap()),
        exit,
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    if let Some(stderr) = fixture.v.get("stderr").and_then(Value::as_str) {
        assert_eq!(String::from_utf8_lossy(&out.stderr), stderr, "{what}");
        assert_eq!(printed(&out), None, "{what}");
        return;
    }
    assert_eq!(printed(&out), fixture.expected_output(), "{what}");
    let Some(outcome) = fixture.v.get("outcome").and_then(Value::as_str) else {
        return;
    };
    // The session's log: one turn, the call under the rule syntax's tool name, its question
    // and the decision.
    let events = events_at(&log_path(state, &fixture.session()));
    let types: Vec<&str> = events.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(
        types,
        [
            "turn/start",
            "tool/call",
            "approval/asked",
            "approval/decided",
            "turn/end"
        ],
        "{what}"
    );
    let call = &events[1].1;
    assert_eq!(call["name"], fixture.v["tool"], "{what}");
    assert_eq!(events[2].1["agent"], agent_id(fixture.cli), "{what}");
    assert_eq!(events[3].1["outcome"], outcome, "{what}");
}

fn agent_id(cli: &str) -> &'static str {
    match cli {
        "codex" => "codex",
        "gemini" => "gemini-cli",
        _ => "copilot-cli",
    }
}

#[test]
fn every_fixture_of_every_cli_answers_exactly_in_process_and_through_a_warm_serve() {
    let fixtures = Fixture::all();
    assert!(fixtures.len() >= 20, "{} fixtures", fixtures.len());
    let local = tempfile::tempdir().unwrap();
    let served = tempfile::tempdir().unwrap();
    let config = deployment(local.path());
    let server = SocketServer::start(served.path(), &config);
    for fixture in &fixtures {
        run_fixture(
            fixture,
            local.path(),
            &["--config", config.to_str().unwrap()],
        );
        run_fixture(fixture, served.path(), &["--socket", server.socket()]);
    }
    drop(server);
    for fixture in fixtures.iter().filter(|f| f.v.get("outcome").is_some()) {
        let session = fixture.session();
        assert_eq!(
            shape(local.path(), &session),
            shape(served.path(), &session),
            "{}/{}: the same log either way",
            fixture.cli,
            fixture.name
        );
    }
}

/// A hostile or broken input never comes out as a grant: Codex and Gemini CLI get exit 2 (their
/// block), Copilot CLI a printed `deny` (it skips a failing hook).
#[test]
fn hostile_and_malformed_inputs_are_blocked_the_way_each_cli_honours() {
    let dir = tempfile::tempdir().unwrap();
    let config = deployment(dir.path());
    let config = config.to_str().unwrap();
    let codex = |patch: Value| {
        let mut v = json!({"session_id": "s-1", "turn_id": "1", "cwd": "/w", "model": "m",
            "permission_mode": "default", "hook_event_name": "PreToolUse", "tool_name": "Bash",
            "tool_input": {"command": "git status"}, "tool_use_id": "c"});
        for (k, x) in patch.as_object().unwrap() {
            v[k] = x.clone();
        }
        v.to_string()
    };
    let gemini = |patch: Value| {
        let mut v = json!({"session_id": "s-1", "cwd": "/w", "hook_event_name": "BeforeTool",
            "timestamp": "t", "tool_name": "run_shell_command", "tool_input": {"command": "git status"}});
        for (k, x) in patch.as_object().unwrap() {
            v[k] = x.clone();
        }
        v.to_string()
    };
    let copilot = |patch: Value| {
        let mut v = json!({"sessionId": "s-1", "timestamp": 1, "cwd": "/w", "toolName": "bash",
            "toolArgs": {"command": "git status"}});
        for (k, x) in patch.as_object().unwrap() {
            v[k] = x.clone();
        }
        v.to_string()
    };
    let corpus = [
        ("codex", "not json".to_owned()),
        ("codex", codex(json!({"session_id": "../../etc/passwd"}))),
        ("codex", codex(json!({"session_id": ""}))),
        ("codex", codex(json!({"hook_event_name": "PostToolUse"}))),
        ("codex", codex(json!({"tool_name": 7}))),
        ("codex", "[]".to_owned()),
        ("gemini", "{".to_owned()),
        ("gemini", gemini(json!({"session_id": "a/b"}))),
        ("gemini", gemini(json!({"hook_event_name": "BeforeModel"}))),
        ("gemini", gemini(json!({"tool_name": null}))),
        ("copilot", "\u{0}".to_owned()),
        ("copilot", copilot(json!({"sessionId": "../x"}))),
        ("copilot", copilot(json!({"toolName": ""}))),
        (
            "copilot",
            copilot(json!({"hook_event_name": "PostToolUse"})),
        ),
    ];
    for (cli, input) in corpus {
        let out = hook(dir.path(), cli, &["--config", config], &input);
        let what = format!("{cli} {input:?}");
        if cli == "copilot" {
            assert_eq!(out.status.code(), Some(0), "{what}");
            let printed = printed(&out).unwrap();
            assert_eq!(printed["permissionDecision"], "deny", "{what}");
            assert!(
                printed["permissionDecisionReason"]
                    .as_str()
                    .unwrap()
                    .starts_with("approval-host: "),
                "{what}"
            );
        } else {
            assert_eq!(out.status.code(), Some(2), "{what}");
            assert_eq!(printed(&out), None, "{what}");
            assert!(
                String::from_utf8_lossy(&out.stderr).starts_with("approval-host: "),
                "{what}"
            );
        }
    }
    // The benign call each CLI relies on still answers.
    let out = hook(
        dir.path(),
        "gemini",
        &["--config", config],
        &gemini(json!({})),
    );
    assert_eq!(printed(&out).unwrap()["decision"], "allow");
}
