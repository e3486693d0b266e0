//! The MCP gateway end to end with real parts: the official MCP Python SDK as the client
//! (`tests/mcp/client.py`) and a server written with it (`tests/mcp/notes_server.py`), over stdio
//! through the `approval-host mcp` binary and over streamable HTTP (the binary, and the library
//! beside a live web console). Each test checks what the client read, what reached the server
//! (the server writes an event per call) and the session log.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use approval_host::mcp::{
    Gateway, GatewayOptions, INVALID_TOOL_NAME, McpConfig, Upstream, server_gone, too_many_calls,
};
use approval_host::plugin::QuarantinePolicy;
use approval_host::serve::{ServeOptions, Server, auth};
use approval_host::tools::texts;
use serde_json::{Value, json};

use crate::console::{ANSWERER, answer, http, log_in_as, page_until, waiting_question};
use crate::support::{events_at, events_so_far, log_path};

pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_approval-host");
pub(crate) const PATIENCE: Duration = Duration::from_secs(60);

/// The token HTTP clients of the gateway present (`[[token]] name = "agent"`, role agent).
pub(crate) const AGENT_TOKEN: &str =
    "aht_mcp_agent_token_for_tests_00000000000000000000000000000000000000";

pub(crate) fn script(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/mcp")
        .join(name)
        .display()
        .to_string()
}

/// The rules every test starts from: reading allowed, deleting refused with a reason, the slow
/// and crashing tools allowed; writing is left to whoever answers.
const RULES: &str = r#"
[[rule]]
rule = "mcp__notes__read_note"
effect = "allow"

[[rule]]
rule = "mcp__notes__delete_*"
effect = "reject"
reason = "notes are never deleted"

[[rule]]
rule = "mcp__notes__slow"
effect = "allow"

[[rule]]
rule = "mcp__notes__crash"
effect = "allow"

[[rule]]
rule = "mcp__notes__stat_file(./docs/**)"
effect = "allow"

[[rule]]
rule = "mcp__notes__prompts/get(summarise)"
effect = "allow"

[[rule]]
rule = "mcp__notes__resources/read(notes://welcome)"
effect = "allow"

[[rule]]
rule = "mcp__notes__roots"
effect = "allow"
"#;

/// What the gateway answers a `delete_note` call under [`RULES`].
const DELETE_REJECTED: &str = "tool \"mcp__notes__delete_note\" was rejected by policy \"rule:deployment-2\": notes are never deleted";

pub(crate) struct Setup {
    dir: tempfile::TempDir,
}

impl Setup {
    pub(crate) fn new(extra: &str) -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let token = format!(
            "[[token]]\nname = \"agent\"\nsha256 = \"{}\"\nroles = [\"agent\"]\n",
            auth::token_hash(AGENT_TOKEN)
        );
        std::fs::write(
            dir.path().join("deploy.toml"),
            format!("{RULES}\n{token}\n{extra}"),
        )
        .unwrap();
        Setup { dir }
    }

    pub(crate) fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub(crate) fn state(&self) -> PathBuf {
        self.path("state")
    }

    /// What reached the server, one event per call.
    pub(crate) fn server_events(&self) -> Vec<Value> {
        std::fs::read_to_string(self.path("events.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// The gateway command (after the client's own arguments): stdio, session `s1`.
    pub(crate) fn stdio_gateway(&self) -> Vec<String> {
        vec![
            BIN.to_owned(),
            "--state-dir".to_owned(),
            self.state().display().to_string(),
            "mcp".to_owned(),
            "--config".to_owned(),
            self.path("deploy.toml").display().to_string(),
            "--name".to_owned(),
            "notes".to_owned(),
            "--session".to_owned(),
            "s1".to_owned(),
            "--no-watch".to_owned(),
            "--".to_owned(),
            "python3".to_owned(),
            script("notes_server.py"),
        ]
    }

    /// `(outcome, tool)` of every decided question in `session`, in order, checking that each
    /// question was decided exactly once.
    pub(crate) fn decisions(&self, session: &str) -> Vec<(String, String)> {
        let events = events_at(&log_path(&self.state(), session));
        let mut asked = std::collections::HashMap::new();
        let mut decided = Vec::new();
        for (kind, data) in &events {
            match kind.as_str() {
                "approval/asked" => {
                    let id = data["id"].as_str().unwrap().to_owned();
                    let tool = data["toolName"].as_str().unwrap().to_owned();
                    assert!(asked.insert(id, tool).is_none(), "asked twice: {data}");
                }
                "approval/decided" => {
                    let tool = asked
                        .remove(data["id"].as_str().unwrap())
                        .unwrap_or_else(|| panic!("decided, never asked: {data}"));
                    decided.push((data["outcome"].as_str().unwrap().to_owned(), tool));
                }
                _ => {}
            }
        }
        assert!(asked.is_empty(), "questions never decided: {asked:?}");
        decided
    }
}

/// The lines `reader` gives, read on a thread of their own so a wait on them can time out.
pub(crate) fn line_by_line(reader: impl std::io::Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(reader).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    lines
}

/// The Python SDK client, one JSON operation a line.
pub(crate) struct Client {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
    /// The client's stderr (and so its gateway's), when it was asked for.
    errors: Option<mpsc::Receiver<String>>,
    /// What the client answered to `initialize`.
    pub(crate) hello: Value,
}

impl Client {
    pub(crate) fn start(args: &[String], events: &Path) -> Client {
        Client::start_with(args, events, false)
    }

    /// [`Client::start`] with the client (and so the gateway it starts) working in `cwd`, and
    /// with `home` as its `HOME` when given.
    pub(crate) fn start_in(
        args: &[String],
        events: &Path,
        cwd: &Path,
        home: Option<&Path>,
    ) -> Client {
        Client::start_from(args, events, false, (Some(cwd), home), &[])
    }

    /// [`Client::start`] with `env` set for the client (and so the gateway it starts).
    pub(crate) fn start_with_env(args: &[String], events: &Path, env: &[(&str, &str)]) -> Client {
        Client::start_from(args, events, false, (None, None), env)
    }

    pub(crate) fn start_with(args: &[String], events: &Path, read_stderr: bool) -> Client {
        Client::start_from(args, events, read_stderr, (None, None), &[])
    }

    fn start_from(
        args: &[String],
        events: &Path,
        read_stderr: bool,
        (cwd, home): (Option<&Path>, Option<&Path>),
        env: &[(&str, &str)],
    ) -> Client {
        let python_sdk = Command::new("python3")
            .args(["-c", "import mcp"])
            .status()
            .is_ok_and(|s| s.success());
        assert!(
            python_sdk,
            "these tests need python3 with the MCP Python SDK (`python3 -m pip install mcp==2.3.0`, as .ci/run does)"
        );
        let mut command = Command::new("python3");
        if let Some(cwd) = cwd {
            command.current_dir(cwd);
        }
        if let Some(home) = home {
            command.env("HOME", home).env_remove("XDG_STATE_HOME");
        }
        command.envs(env.iter().copied());
        let mut child = command
            .arg(script("client.py"))
            .args(args)
            .env("NOTES_EVENTS", events)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(if read_stderr {
                Stdio::piped()
            } else {
                Stdio::inherit()
            })
            .spawn()
            .unwrap();
        let errors = child.stderr.take().map(line_by_line);
        let stdin = child.stdin.take().unwrap();
        let lines = line_by_line(child.stdout.take().unwrap());
        let mut client = Client {
            child,
            stdin,
            lines,
            errors,
            hello: Value::Null,
        };
        client.hello = client.next();
        client
    }

    pub(crate) fn stdio(setup: &Setup) -> Client {
        let mut args = vec!["stdio".to_owned()];
        args.extend(setup.stdio_gateway());
        Client::start(&args, &setup.path("events.jsonl"))
    }

    pub(crate) fn http(url: &str, events: &Path) -> Client {
        Client::start(
            &["http".to_owned(), url.to_owned(), AGENT_TOKEN.to_owned()],
            events,
        )
    }

    /// The rest of the first stderr line starting with `prefix`.
    pub(crate) fn stderr_line(&mut self, prefix: &str) -> String {
        let errors = self.errors.as_ref().expect("stderr was not read");
        loop {
            let line = errors
                .recv_timeout(PATIENCE)
                .unwrap_or_else(|_| panic!("no stderr line starting {prefix:?}"));
            if let Some(rest) = line.strip_prefix(prefix) {
                return rest.to_owned();
            }
        }
    }

    fn next(&mut self) -> Value {
        let line = self
            .lines
            .recv_timeout(PATIENCE)
            .expect("the MCP client did not answer");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"))
    }

    pub(crate) fn op(&mut self, op: Value) -> Value {
        writeln!(self.stdin, "{op}").unwrap();
        self.stdin.flush().unwrap();
        self.next()
    }

    pub(crate) fn call(&mut self, name: &str, arguments: Value) -> Value {
        self.op(json!({"op": "call", "name": name, "arguments": arguments}))
    }

    /// Ends the client at once, as a crashed agent would (its connection just closes).
    fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    pub(crate) fn quit(mut self) {
        let _ = writeln!(self.stdin, "{}", json!({"op": "quit"}));
        drop(self.stdin);
        let status = self.child.wait().unwrap();
        assert!(status.success(), "the MCP client exited {status}");
    }
}

pub(crate) fn refused(text: &str) -> Value {
    json!({"is_error": true, "text": text})
}

pub(crate) fn ok(text: &str) -> Value {
    json!({"is_error": false, "text": text})
}

#[test]
fn stdio_calls_are_asked_then_forwarded_or_refused_with_the_reason_and_the_rest_passes_through() {
    let setup = Setup::new("");
    let mut client = Client::stdio(&setup);
    // The server's own initialize answer reaches the agent.
    assert_eq!(client.hello["server"], "notes");

    // delete_note can never be allowed: it is left out of the list.
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
        refused(DELETE_REJECTED)
    );
    // Nobody to ask: fail closed.
    assert_eq!(
        client.call("write_note", json!({"name": "a", "text": "b"})),
        refused(&texts::approval_unavailable("mcp__notes__write_note"))
    );
    // Prompts and resources are asked (the rules allow these), ping is relayed untouched.
    assert_eq!(
        client.op(json!({"op": "list_prompts"})),
        json!({"prompts": ["summarise"]})
    );
    assert_eq!(
        client.op(json!({"op": "get_prompt", "name": "summarise", "arguments": {"name": "x"}})),
        json!({"messages": ["Summarise the note x."]})
    );
    assert_eq!(
        client.op(json!({"op": "read_resource", "uri": "notes://welcome"})),
        json!({"contents": ["hello from the notes server"]})
    );
    assert_eq!(client.op(json!({"op": "ping"})), json!({"pong": true}));
    client.quit();

    // Only the allowed call reached the server, with its arguments unchanged.
    assert_eq!(
        setup.server_events(),
        vec![json!({"event": "read_note", "name": "welcome"})]
    );
    assert_eq!(
        setup.decisions("s1"),
        [
            ("allowed-once", "mcp__notes__read_note"),
            ("rejected", "mcp__notes__delete_note"),
            ("unavailable", "mcp__notes__write_note"),
            ("allowed-once", "mcp__notes__prompts/get"),
            ("allowed-once", "mcp__notes__resources/read"),
        ]
        .map(|(o, t)| (o.to_owned(), t.to_owned()))
    );
    let events = events_at(&log_path(&setup.state(), "s1"));
    // The connection was one turn, ended when the agent closed it.
    let kinds = crate::support::types(&events);
    assert_eq!(kinds.iter().filter(|k| **k == "turn/start").count(), 1);
    assert_eq!(kinds.first(), Some(&"turn/start"));
    assert_eq!(kinds.last(), Some(&"turn/end"));
    let call = events
        .iter()
        .find(|(k, d)| k == "tool/call" && d["name"] == "mcp__notes__write_note")
        .unwrap();
    assert_eq!(call.1["arguments"], json!({"name": "a", "text": "b"}));
}

/// The names of `pid`'s threads.
fn thread_names(pid: u32) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .map(|t| {
            let path = t.unwrap().path().join("comm");
            std::fs::read_to_string(path).unwrap().trim().to_owned()
        })
        .collect()
}

/// The processes `pid` started that still run.
fn children(pid: u32) -> Vec<u32> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flat_map(|t| {
            let text = std::fs::read_to_string(t.unwrap().path().join("children")).unwrap();
            text.split_whitespace()
                .map(|c| c.parse().unwrap())
                .collect::<Vec<u32>>()
        })
        .collect()
}

#[test]
fn over_stdio_the_gateway_syncs_each_decision_on_its_own_one_thread() {
    let setup = Setup::new("");
    let mut client = Client::stdio(&setup);
    assert_eq!(
        client.call("read_note", json!({"name": "welcome"})),
        ok("hello from the notes server")
    );
    assert_eq!(
        client.call("delete_note", json!({"name": "welcome"})),
        refused(DELETE_REJECTED)
    );
    let gateway = children(client.child.id())
        .into_iter()
        .find(|c| {
            std::fs::read_to_string(format!("/proc/{c}/comm"))
                .is_ok_and(|n| n.trim() == "approval-host")
        })
        .expect("the client's gateway");
    // One thread answers the agent, and it synced both decisions itself: no commit thread was
    // ever started (they start on the first commit handed to them).
    let threads = thread_names(gateway);
    assert_eq!(
        threads.iter().filter(|t| *t == "mcp-gateway").count(),
        1,
        "{threads:?}"
    );
    assert!(!threads.iter().any(|t| t == "log-commit"), "{threads:?}");
    // Each decision was durable before its answer went back.
    assert_eq!(
        setup.decisions("s1"),
        [
            ("allowed-once", "mcp__notes__read_note"),
            ("rejected", "mcp__notes__delete_note"),
        ]
        .map(|(o, t)| (o.to_owned(), t.to_owned()))
    );
    client.quit();
}

#[test]
fn a_path_rule_for_an_mcp_tool_reads_its_path_argument_against_the_gateway_s_directory() {
    let setup = Setup::new("");
    let mut client = Client::stdio(&setup);
    let missing = ok("missing");
    assert_eq!(
        client.call("stat_file", json!({"path": "docs/none.md"})),
        missing
    );
    assert_eq!(
        client.call("stat_file", json!({"path": "./docs/sub/none.md"})),
        missing
    );
    let unavailable = refused(&texts::approval_unavailable("mcp__notes__stat_file"));
    for path in [
        "docs/../secret.txt",
        "/etc/passwd",
        "../docs/x",
        "docsx/a.md",
        "",
    ] {
        assert_eq!(
            client.call("stat_file", json!({"path": path})),
            unavailable,
            "{path:?}"
        );
    }
    client.quit();
    assert_eq!(
        setup.server_events(),
        vec![
            json!({"event": "stat_file", "path": "docs/none.md"}),
            json!({"event": "stat_file", "path": "./docs/sub/none.md"}),
        ]
    );
}

#[test]
fn calls_over_the_connection_s_limit_are_refused_unasked_and_the_next_goes_through() {
    let setup = Setup::new("[limits]\nrequests_in_flight = 2\n");
    let mut client = Client::stdio(&setup);
    for id in ["a", "b"] {
        client.op(json!({"op": "start", "id": id, "name": "slow", "arguments": {"label": id}}));
        assert_eq!(
            client.op(json!({"op": "progress", "id": id})),
            json!({"progress": ["started"]})
        );
    }
    // Two calls run: a third, of any tool, is refused without a question.
    assert_eq!(
        client.call("read_note", json!({"name": "welcome"})),
        refused(&too_many_calls(2))
    );
    assert_eq!(
        client.call("delete_note", json!({"name": "welcome"})),
        refused(&too_many_calls(2))
    );
    client.op(json!({"op": "cancel", "id": "a"}));
    // The slot frees once the gateway has seen the cancellation (the client does not wait for
    // that); until then a call is still refused unasked, never queued.
    let started = std::time::Instant::now();
    loop {
        let answer = client.call("read_note", json!({"name": "welcome"}));
        if answer == ok("hello from the notes server") {
            break;
        }
        assert_eq!(answer, refused(&too_many_calls(2)));
        assert!(started.elapsed() < PATIENCE, "the slot never freed");
    }
    client.op(json!({"op": "cancel", "id": "b"}));
    client.quit();
    // Every refusal is on record, none as a decision.
    let refusals = crate::mcp_nothing_unasked::mcp_messages(&setup, "s1");
    assert!(refusals.len() >= 2, "{refusals:?}");
    for refusal in refusals {
        assert_eq!(
            refusal,
            json!({"from": "agent", "method": "tools/call", "handled": "refused", "why": too_many_calls(2)})
        );
    }
    assert_eq!(
        setup.decisions("s1"),
        [
            ("allowed-once", "mcp__notes__slow"),
            ("allowed-once", "mcp__notes__slow"),
            ("allowed-once", "mcp__notes__read_note"),
        ]
        .map(|(o, t)| (o.to_owned(), t.to_owned()))
    );
}

#[test]
fn hiding_rejected_tools_can_be_turned_off_and_the_call_is_still_refused() {
    let setup = Setup::new("[mcp]\nhide-rejected-tools = false\n");
    let mut client = Client::stdio(&setup);
    assert_eq!(
        client.op(json!({"op": "list_tools"})),
        json!({"tools": ["read_note", "write_note", "delete_note", "stat_file", "slow", "crash", "roots"]})
    );
    assert_eq!(
        client.call("delete_note", json!({"name": "welcome"}))["is_error"],
        true
    );
    client.quit();
    assert!(setup.server_events().is_empty());
}

#[test]
fn a_cancelled_call_is_cancelled_at_the_server_and_its_progress_came_back_first() {
    let setup = Setup::new("");
    let mut client = Client::stdio(&setup);
    assert_eq!(
        client.op(json!({"op": "start", "id": "s", "name": "slow", "arguments": {"label": "one"}})),
        json!({"started": "s"})
    );
    // The server's progress notification comes back under the client's own token.
    assert_eq!(
        client.op(json!({"op": "progress", "id": "s"})),
        json!({"progress": ["started"]})
    );
    assert_eq!(
        client.op(json!({"op": "cancel", "id": "s"})),
        json!({"cancelled": "s"})
    );
    // The connection is still good after a cancellation.
    assert_eq!(
        client.call("read_note", json!({"name": "welcome"})),
        ok("hello from the notes server")
    );
    client.quit();
    assert_eq!(
        setup.server_events(),
        vec![
            json!({"event": "slow_started", "label": "one"}),
            json!({"event": "slow_cancelled", "label": "one"}),
            json!({"event": "read_note", "name": "welcome"}),
        ]
    );
    assert_eq!(
        setup.decisions("s1"),
        [
            ("allowed-once", "mcp__notes__slow"),
            ("allowed-once", "mcp__notes__read_note")
        ]
        .map(|(o, t)| (o.to_owned(), t.to_owned()))
    );
}

#[test]
fn a_server_that_dies_mid_call_gives_the_client_an_error_and_the_log_pairs_every_question() {
    let setup = Setup::new("");
    let mut client = Client::stdio(&setup);
    let gone = server_gone("notes");
    assert_eq!(
        client.call("crash", json!({"label": "x"})),
        json!({"error": gone})
    );
    // Later calls are still asked (the rules decide), then told the server is gone.
    assert_eq!(
        client.call("read_note", json!({"name": "welcome"})),
        json!({"error": gone})
    );
    assert_eq!(
        client.call("delete_note", json!({"name": "welcome"})),
        refused(DELETE_REJECTED)
    );
    client.quit();
    assert_eq!(
        setup.server_events(),
        vec![json!({"event": "crash", "label": "x"})]
    );
    assert_eq!(
        setup.decisions("s1"),
        [
            ("allowed-once", "mcp__notes__crash"),
            ("allowed-once", "mcp__notes__read_note"),
            ("rejected", "mcp__notes__delete_note"),
        ]
        .map(|(o, t)| (o.to_owned(), t.to_owned()))
    );
    // The log is whole: every question decided once, in a turn, the chain intact.
    let verify = Command::new(BIN)
        .args(["--state-dir"])
        .arg(setup.state())
        .args(["verify", "--all"])
        .output()
        .unwrap();
    assert!(
        verify.status.success(),
        "{}",
        String::from_utf8_lossy(&verify.stdout)
    );
}

/// Tool names an agent could send to step around a rule: none is allowed by the rule for
/// `read_note`, none reaches the server unasked, and the malformed ones are never asked.
#[test]
fn hostile_tool_names_are_refused_or_asked_as_written_never_allowed_by_a_neighbours_rule() {
    // Unpinned, so names the server does not list reach the rules (pinned, they are refused
    // before any question: `mcp_pins`).
    let setup = Setup::new("[mcp]\npin = \"off\"\n");
    let mut client = Client::stdio(&setup);
    let invalid = [
        "",
        "read_note ",
        " read_note",
        "read note",
        "read_note\n",
        "read_note\u{0}",
        "read_note\u{85}",
        "read\u{a0}note",
        "read_note\t",
    ];
    for name in invalid {
        assert_eq!(
            client.call(name, json!({"name": "welcome"})),
            refused(INVALID_TOOL_NAME),
            "{name:?}"
        );
    }
    let too_long = "r".repeat(129);
    assert_eq!(
        client.call(&too_long, json!({})),
        refused(INVALID_TOOL_NAME)
    );
    let invalid_on_record = crate::mcp_nothing_unasked::mcp_messages(&setup, "s1");
    assert_eq!(
        invalid_on_record,
        vec![
            json!({"from": "agent", "method": "tools/call", "handled": "refused", "why": INVALID_TOOL_NAME});
            invalid.len() + 1
        ]
    );
    // Names a loose matcher could confuse with read_note: asked as written, and since no rule
    // allows them and nobody answers, unavailable.
    let lookalike = [
        "READ_NOTE",
        "read_note*",
        "read_*",
        "*",
        "read_note/../delete_note",
        "x__read_note",
        "read_note__",
        "re\u{200b}ad_note",
        "read_nоte",
    ];
    for name in lookalike {
        let tool = format!("mcp__notes__{name}");
        assert_eq!(
            client.call(name, json!({"name": "welcome"})),
            refused(&texts::approval_unavailable(&tool)),
            "{name:?}"
        );
    }
    // A rejected tool stays rejected however its arguments are dressed.
    for arguments in [
        json!({"name": "welcome", "command": "echo read_note"}),
        json!({"name": "welcome", "file_path": "/tmp/x"}),
        json!({}),
    ] {
        assert_eq!(client.call("delete_note", arguments)["is_error"], true);
    }
    // The benign call still works.
    assert_eq!(
        client.call("read_note", json!({"name": "welcome"})),
        ok("hello from the notes server")
    );
    client.quit();
    assert_eq!(
        setup.server_events(),
        vec![json!({"event": "read_note", "name": "welcome"})]
    );
    let decided = setup.decisions("s1");
    assert_eq!(decided.len(), lookalike.len() + 3 + 1);
    assert!(
        decided
            .iter()
            .all(|(o, t)| o != "allowed-once" || t == "mcp__notes__read_note")
    );
}

#[test]
fn the_command_line_refuses_names_listeners_and_servers_it_cannot_use() {
    let setup = Setup::new("");
    let config = setup.path("deploy.toml");
    let cases: [(&[&str], &str); 5] = [
        (
            &["--name", "a__b", "--", "true"],
            "--name \"a__b\": a server name is 1 to 64 ASCII letters",
        ),
        (
            &["--name", "notes*", "--", "true"],
            "--name \"notes*\": a server name",
        ),
        (
            &[
                "--name",
                "notes",
                "--listen",
                "0.0.0.0:8931",
                "--upstream",
                "http://127.0.0.1:1/mcp",
            ],
            "off loopback the MCP endpoint needs --tls-cert and --tls-key",
        ),
        (
            &[
                "--name",
                "notes",
                "--listen",
                "127.0.0.1:0",
                "--upstream",
                "file:///etc/passwd",
            ],
            "the MCP server's URL must be http or https",
        ),
        (&["--name", "notes"], "no MCP server"),
    ];
    for (args, expected) in cases {
        let out = Command::new(BIN)
            .arg("--state-dir")
            .arg(setup.state())
            .args(["mcp", "--config"])
            .arg(&config)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
}

/// The deployment text of a web answerer (the console) and its answerer token.
fn console_answerer(timeout_s: u64) -> String {
    format!(
        "[[answerer]]\nkind = \"web\"\ntimeout_s = {timeout_s}\n\n\
         [[token]]\nname = \"console\"\nsha256 = \"{}\"\nroles = [\"answerer\"]\n",
        auth::token_hash(ANSWERER)
    )
}

/// The URL in the `listening on URL` line a process prints first on its stdout.
pub(crate) fn listening_url(child: &mut Child) -> String {
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    line.trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("not a listening line: {line:?}"))
        .to_owned()
}

/// `approval-host mcp --listen 127.0.0.1:0 --upstream UPSTREAM` with `extra` arguments (its
/// stderr piped when `read_stderr`); returns it and its endpoint's URL.
/// `approval-host mcp` for the notes server at `upstream`, serving agents at `listen` (stdout
/// piped, for its `listening on` line).
pub(crate) fn gateway_command(setup: &Setup, listen: &str, upstream: &str) -> Command {
    let mut command = Command::new(BIN);
    command
        .arg("--state-dir")
        .arg(setup.state())
        .args(["mcp", "--config"])
        .arg(setup.path("deploy.toml"))
        .args([
            "--name",
            "notes",
            "--no-watch",
            "--listen",
            listen,
            "--upstream",
            upstream,
        ])
        .stdout(Stdio::piped());
    command
}

pub(crate) fn http_gateway(
    setup: &Setup,
    upstream: &str,
    extra: &[&str],
    read_stderr: bool,
) -> (Child, String) {
    let mut gateway = gateway_command(setup, "127.0.0.1:0", upstream)
        .args(extra)
        .stderr(if read_stderr {
            Stdio::piped()
        } else {
            Stdio::inherit()
        })
        .spawn()
        .unwrap();
    let url = listening_url(&mut gateway);
    (gateway, url)
}

/// Starts the notes server over streamable HTTP; returns it and its URL.
pub(crate) fn http_server(events: &Path) -> (Child, String) {
    let mut server = Command::new("python3")
        .args([script("notes_server.py"), "--http".to_owned()])
        .env("NOTES_EVENTS", events)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let url = listening_url(&mut server);
    (server, url)
}

#[test]
fn over_streamable_http_the_binary_asks_every_call_cancels_at_the_server_and_reports_a_crash() {
    let setup = Setup::new("");
    let events = setup.path("events.jsonl");
    let (mut server, upstream) = http_server(&events);
    let (mut gateway, url) = http_gateway(&setup, &upstream, &[], false);

    let mut client = Client::http(&url, &events);
    assert_eq!(client.hello["server"], "notes");
    assert_eq!(
        client.call("read_note", json!({"name": "welcome"})),
        ok("hello from the notes server")
    );
    assert_eq!(
        client.call("delete_note", json!({"name": "welcome"}))["text"],
        DELETE_REJECTED
    );
    client.quit();
    // A second client is a second session.
    let mut other = Client::http(&url, &events);
    assert_eq!(
        other.call("write_note", json!({"name": "a", "text": "b"})),
        refused(&texts::approval_unavailable("mcp__notes__write_note"))
    );
    other.quit();
    // A third: a call cancelled at the server after its progress came back, then the server
    // dying mid-call.
    let mut third = Client::http(&url, &events);
    third.op(json!({"op": "start", "id": "s", "name": "slow", "arguments": {"label": "h"}}));
    assert_eq!(
        third.op(json!({"op": "progress", "id": "s"})),
        json!({"progress": ["started"]})
    );
    assert_eq!(
        third.op(json!({"op": "cancel", "id": "s"})),
        json!({"cancelled": "s"})
    );
    assert_eq!(
        third.call("crash", json!({"label": "h"})),
        json!({"error": server_gone("notes")})
    );
    third.quit();

    // SIGTERM ends the gateway cleanly.
    unsafe { libc::kill(gateway.id() as i32, libc::SIGTERM) };
    assert!(gateway.wait().unwrap().success());
    // It exited on the crash; the kill is for a run where it did not.
    let _ = server.kill();
    server.wait().unwrap();

    assert_eq!(
        setup.server_events(),
        vec![
            json!({"event": "read_note", "name": "welcome"}),
            json!({"event": "slow_started", "label": "h"}),
            json!({"event": "slow_cancelled", "label": "h"}),
            json!({"event": "crash", "label": "h"}),
        ]
    );
    let mut sessions: Vec<Vec<(String, String)>> = mcp_sessions(&setup.state())
        .iter()
        .map(|s| setup.decisions(s))
        .collect();
    sessions.sort();
    assert_eq!(
        sessions,
        vec![
            vec![
                (
                    "allowed-once".to_owned(),
                    "mcp__notes__read_note".to_owned()
                ),
                ("rejected".to_owned(), "mcp__notes__delete_note".to_owned()),
            ],
            vec![
                ("allowed-once".to_owned(), "mcp__notes__slow".to_owned()),
                ("allowed-once".to_owned(), "mcp__notes__crash".to_owned()),
            ],
            vec![(
                "unavailable".to_owned(),
                "mcp__notes__write_note".to_owned()
            )],
        ]
    );
}

/// The sessions the gateway opened (`mcp-<uuid>`).
fn mcp_sessions(state: &Path) -> Vec<String> {
    let mut found: Vec<String> = std::fs::read_dir(state.join("sessions"))
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            name.strip_suffix(".jsonl")
                .filter(|s| s.starts_with("mcp-"))
                .map(str::to_owned)
        })
        .collect();
    found.sort();
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_answers_mcp_questions_in_the_console_and_a_call_cancelled_while_waiting_never_runs()
 {
    let setup = Setup::new(&console_answerer(60));
    let events = setup.path("events.jsonl");
    let server = Server::start(ServeOptions {
        config: setup.path("deploy.toml"),
        state_dir: setup.state(),
        quarantine: QuarantinePolicy::default(),
        migrate: false,
        store_url: None,
    })
    .await
    .unwrap();
    let console = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = console.local_addr().unwrap();
    tokio::spawn({
        let server = server.clone();
        async move { server.serve_console(console, None).await }
    });
    let gateway = Gateway::new(
        server.service().clone(),
        GatewayOptions {
            server: "notes".to_owned(),
            config: McpConfig::default(),
            cwd: None,
            session: None,
            calls_in_flight: 64,
            sessions: 1024,
            sessions_per_caller: 256,
        },
        Upstream::command(vec![
            "env".to_owned(),
            format!("NOTES_EVENTS={}", events.display()),
            "python3".to_owned(),
            script("notes_server.py"),
        ])
        .unwrap(),
    )
    .unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let endpoint = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", endpoint.local_addr().unwrap());
    let router = axum::Router::new().nest_service("/mcp", gateway.router(stop.clone()));
    tokio::spawn(async move { axum::serve(endpoint, router).await });

    let (cookie, csrf) = log_in_as(addr, ANSWERER).await;
    let mut client = tokio::task::block_in_place(|| Client::http(&url, &events));
    let op = |client: &mut Client, op: Value| tokio::task::block_in_place(|| client.op(op));

    // Allowed from the console: the call runs.
    op(
        &mut client,
        json!({"op": "start", "id": "w1", "name": "write_note", "arguments": {"name": "a", "text": "b"}}),
    );
    let (page, id) = waiting_question(addr, &cookie).await;
    assert!(page.contains("mcp__notes__write_note"), "{page}");
    answer(
        addr,
        &cookie,
        &[("csrf", &csrf), ("id", &id), ("decision", "allow-once")],
    )
    .await;
    assert_eq!(
        op(&mut client, json!({"op": "await", "id": "w1"})),
        ok("wrote a")
    );

    // Rejected from the console with a reason: the model reads it.
    op(
        &mut client,
        json!({"op": "start", "id": "w2", "name": "write_note", "arguments": {"name": "c", "text": "d"}}),
    );
    let (_, id) = waiting_question(addr, &cookie).await;
    answer(
        addr,
        &cookie,
        &[
            ("csrf", &csrf),
            ("id", &id),
            ("decision", "reject"),
            ("reason", "not that note"),
        ],
    )
    .await;
    assert_eq!(
        op(&mut client, json!({"op": "await", "id": "w2"})),
        refused("the user rejected tool \"mcp__notes__write_note\": not that note")
    );

    // Cancelled by the client while the person has not answered: the question leaves the
    // console and the call never reaches the server.
    op(
        &mut client,
        json!({"op": "start", "id": "w3", "name": "write_note", "arguments": {"name": "e", "text": "f"}}),
    );
    let (_, id) = waiting_question(addr, &cookie).await;
    assert_eq!(
        op(&mut client, json!({"op": "cancel", "id": "w3"})),
        json!({"cancelled": "w3"})
    );
    page_until(addr, &cookie, &format!("value=\"{id}\""), false).await;
    tokio::task::block_in_place(|| client.quit());

    let sessions = mcp_sessions(&setup.state());
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    // The cancelled question settles once the gateway sees the cancellation.
    let started = std::time::Instant::now();
    let decided = loop {
        let decided = events_so_far(&log_path(&setup.state(), &sessions[0]))
            .iter()
            .filter(|(k, _)| k == "approval/decided")
            .count();
        if decided == 3 || started.elapsed() > PATIENCE {
            break setup.decisions(&sessions[0]);
        }
        tokio::task::yield_now().await;
    };
    assert_eq!(
        decided,
        [
            ("allowed-once", "mcp__notes__write_note"),
            ("rejected", "mcp__notes__write_note"),
            ("cancelled", "mcp__notes__write_note"),
        ]
        .map(|(o, t)| (o.to_owned(), t.to_owned()))
    );
    assert_eq!(
        setup.server_events(),
        vec![json!({"event": "write_note", "name": "a", "text": "b"})]
    );
    // The console's own reply for the answers above named the session's questions.
    let sessions_page = http(
        addr,
        "GET",
        &format!("/sessions/{}", sessions[0]),
        Some(&cookie),
        None,
    )
    .await;
    assert!(
        sessions_page.body.contains("mcp__notes__write_note"),
        "{}",
        sessions_page.body
    );
    stop.cancel();
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_dies_while_its_question_waits_in_the_console_leaves_it_cancelled() {
    let setup = Setup::new(&console_answerer(600));
    let mut args = vec!["stdio".to_owned()];
    let mut gateway = setup.stdio_gateway();
    let at = gateway.iter().position(|a| a == "--").unwrap();
    gateway.splice(
        at..at,
        ["--console", "127.0.0.1:0", "--insecure-plaintext"].map(str::to_owned),
    );
    args.extend(gateway);
    let events = setup.path("events.jsonl");
    let mut client = tokio::task::block_in_place(|| Client::start_with(&args, &events, true));
    let addr: std::net::SocketAddr =
        tokio::task::block_in_place(|| client.stderr_line("console listening on http://"))
            .parse()
            .unwrap();
    let (cookie, _) = log_in_as(addr, ANSWERER).await;
    tokio::task::block_in_place(|| {
        client.op(json!({"op": "start", "id": "w", "name": "write_note", "arguments": {"name": "a", "text": "b"}}))
    });
    let (page, _) = waiting_question(addr, &cookie).await;
    assert!(page.contains("mcp__notes__write_note"), "{page}");
    // The agent dies: the gateway's stdin closes, its connection ends, and with it the turn.
    tokio::task::block_in_place(|| client.kill());
    let log = log_path(&setup.state(), "s1");
    let started = std::time::Instant::now();
    while !events_so_far(&log).iter().any(|(k, _)| k == "turn/end") {
        assert!(started.elapsed() < PATIENCE, "the turn never ended");
        tokio::task::yield_now().await;
    }
    assert_eq!(
        setup.decisions("s1"),
        vec![("cancelled".to_owned(), "mcp__notes__write_note".to_owned())]
    );
    let events = events_at(&log);
    let kinds = crate::support::types(&events);
    assert_eq!(kinds.first(), Some(&"turn/start"));
    assert_eq!(kinds.last(), Some(&"turn/end"));
    assert!(setup.server_events().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_stopped_while_a_question_waits_settles_it_cancelled_and_ends_the_turn() {
    let setup = Setup::new(&console_answerer(600));
    let events = setup.path("events.jsonl");
    let (mut server, upstream) = http_server(&events);
    let (mut gateway, url) = http_gateway(
        &setup,
        &upstream,
        &["--console", "127.0.0.1:0", "--insecure-plaintext"],
        true,
    );
    let mut stderr = BufReader::new(gateway.stderr.take().unwrap());
    let console = loop {
        let mut line = String::new();
        assert_ne!(stderr.read_line(&mut line).unwrap(), 0, "no console line");
        if let Some(addr) = line.trim().strip_prefix("console listening on http://") {
            break addr.parse::<std::net::SocketAddr>().unwrap();
        }
    };
    let (cookie, _) = log_in_as(console, ANSWERER).await;
    let mut client = tokio::task::block_in_place(|| Client::http(&url, &events));
    tokio::task::block_in_place(|| {
        client.op(json!({"op": "start", "id": "w", "name": "write_note", "arguments": {"name": "a", "text": "b"}}))
    });
    waiting_question(console, &cookie).await;

    // SIGTERM while the question waits: it settles cancelled, the turn ends, the gateway exits 0.
    unsafe { libc::kill(gateway.id() as i32, libc::SIGTERM) };
    let status = tokio::task::block_in_place(|| gateway.wait().unwrap());
    assert!(status.success(), "{status}");
    tokio::task::block_in_place(|| client.kill());
    server.kill().unwrap();
    server.wait().unwrap();

    let sessions = mcp_sessions(&setup.state());
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    assert_eq!(
        setup.decisions(&sessions[0]),
        vec![("cancelled".to_owned(), "mcp__notes__write_note".to_owned())]
    );
    let events = events_at(&log_path(&setup.state(), &sessions[0]));
    assert_eq!(crate::support::types(&events).last(), Some(&"turn/end"));
    assert!(setup.server_events().is_empty());
}

#[test]
fn an_argument_the_tool_s_schema_does_not_declare_leaves_the_call_to_a_person() {
    let setup = Setup::new("");
    let mut client = Client::stdio(&setup);
    let unavailable = refused(&texts::approval_unavailable("mcp__notes__stat_file"));
    // stat_file declares `path` only: anything else is an argument no rule knows the meaning
    // of, however harmless its value looks, pinned or not.
    for arguments in [
        json!({"path": "./docs/a.md", "follow": "../secret.txt"}),
        json!({"path": "./docs/a.md", "mode": 1}),
        json!({"path": "./docs/a.md", "PATH": "./docs/b.md"}),
    ] {
        assert_eq!(
            client.call("stat_file", arguments.clone()),
            unavailable,
            "{arguments}"
        );
    }
    assert_eq!(
        client.call("stat_file", json!({"path": "./docs/a.md"})),
        ok("missing")
    );
    client.quit();
    let asked: Vec<Value> = events_at(&log_path(&setup.state(), "s1"))
        .into_iter()
        .filter(|(k, _)| k == "approval/asked")
        .map(|(_, d)| d.get("undeclared").cloned().unwrap_or(Value::Null))
        .collect();
    assert_eq!(
        asked,
        [
            json!(["follow"]),
            json!(["mode"]),
            json!(["PATH"]),
            Value::Null
        ]
    );
    assert_eq!(
        setup.server_events(),
        vec![json!({"event": "stat_file", "path": "./docs/a.md"})]
    );
}
