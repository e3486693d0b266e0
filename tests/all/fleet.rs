//! Several hosts on one PostgreSQL database, through the command line: `serve` processes sharing
//! sessions by lease, and the commands that read, export, migrate and import a store.

use std::path::Path;
use std::process::{Command, Output};

use approval_host::bundled;
use approval_host::check::check_bytes;
use approval_host::store::Store;
use serde_json::{Value, json};

use crate::serve::{Client, ask, open, outcome};
use crate::support::pg::{fresh_schema, store};
use crate::support::{events_in, log_path};

/// How long a host may take to see what another did (leases of 1 s, rules refreshed every 250 ms).
const PATIENCE: std::time::Duration = std::time::Duration::from_secs(30);

fn cli(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_approval-host"))
        .arg("--state-dir")
        .arg(dir)
        .args(args)
        .output()
        .unwrap()
}

fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8(out.stderr.clone()).unwrap()
}

/// A deployment of the `allow-tools` gate (tools = "read") on the database at `url`, with a
/// one-second lease so a dead host's sessions are free soon.
fn deployment_on(dir: &Path, url: &str) -> std::path::PathBuf {
    std::fs::write(dir.join("gate.wasm"), bundled::ALLOW_TOOLS).unwrap();
    let config = dir.join("deploy.toml");
    std::fs::write(
        &config,
        format!(
            "[store]\nurl = {url:?}\nlease-seconds = 1\n\n[[plugin]]\nname = \"gate\"\npath = \"gate.wasm\"\nrole = \"gate\"\n[plugin.config]\ntools = \"read\"\n"
        ),
    )
    .unwrap();
    config
}

fn answerer(dir: &Path, config: &Path, extra: &[&str]) -> Client {
    let mut args = vec!["--no-watch"];
    args.extend_from_slice(extra);
    let mut c = Client::spawn(dir, config, &args);
    c.call(
        "initialize",
        json!({"protocolVersion": "0.1", "answerer": true}),
    );
    c
}

fn events(url: &str, session: &str) -> Vec<(String, Value)> {
    let reader = store(url, "reader", std::time::Duration::from_secs(15));
    events_in(&String::from_utf8(reader.read(session).unwrap()).unwrap())
}

#[test]
fn a_killed_host_s_session_is_taken_over_after_its_lease_with_its_open_question_settled() {
    let url = fresh_schema();
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let config = deployment_on(dir_a.path(), &url);

    let mut a = answerer(dir_a.path(), &config, &["--migrate"]);
    let a_pid = a.child.id();
    open(&mut a, "s1");
    // One request answered on host A, and one still waiting for a person when A dies.
    let id = ask(&mut a, "s1", "read");
    assert_eq!(outcome(&mut a, id), "allowed-once");
    ask(&mut a, "s1", "bash");
    a.prompt();

    // While A lives, host B is told who holds the session. B's metrics count what it does.
    let metrics = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let mut b = answerer(dir_b.path(), &config, &["--metrics", &metrics.to_string()]);
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let holder = format!(
        "session log postgres:s1 is in use by {} pid {a_pid} #",
        host.trim()
    );
    let open_s1 = |b: &mut Client| {
        let id = b.send("session/open", json!({"sessionId": "s1", "agentId": "a"}));
        b.response(id)
    };
    let refused = open_s1(&mut b);
    let message = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(message.starts_with(&holder), "{refused}");

    a.child.kill().unwrap(); // SIGKILL: no lease released, nothing settled.
    a.child.wait().unwrap();
    // Once A's lease has run out, B gets the session.
    let started = std::time::Instant::now();
    let opened = loop {
        assert!(started.elapsed() < PATIENCE, "host B never got the session");
        let r = open_s1(&mut b);
        match r.get("error") {
            None => break r,
            Some(e) => {
                let message = e["message"].as_str().unwrap();
                assert!(message.starts_with(&holder), "{message}");
            }
        }
    };
    assert!(opened.get("result").is_some(), "{opened}");

    // The question A left open is settled as after a crash, A's turn is ended by the takeover,
    // and the client that reconnects starts a new one (before, turn/start was refused forever).
    b.call("turn/start", json!({"sessionId": "s1"}));
    let id = ask(&mut b, "s1", "bash");
    let prompt = b.prompt();
    b.reply(&prompt, json!({"decision": "allow-once"}));
    assert_eq!(outcome(&mut b, id), "allowed-once");
    b.call("turn/end", json!({"sessionId": "s1"}));

    let log = events(&url, "s1");
    let kinds: Vec<&str> = log.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(kinds.last(), Some(&"turn/end"), "{log:?}");
    let decided: Vec<&Value> = log
        .iter()
        .filter(|(t, _)| t == "approval/decided")
        .map(|(_, d)| d)
        .collect();
    assert_eq!(decided.len(), 3, "{log:?}");
    assert_eq!(decided[0]["outcome"], "allowed-once");
    assert_eq!(decided[1]["outcome"], "unavailable");
    assert_eq!(decided[1]["failure"]["kind"], "interrupted");
    assert_eq!(decided[2]["outcome"], "allowed-once");
    let settled = log
        .iter()
        .position(|(t, d)| t == "approval/decided" && d["outcome"] == "unavailable")
        .unwrap();
    assert_eq!(
        log[settled + 1],
        ("turn/end".to_owned(), json!({"source": "takeover"})),
        "{log:?}"
    );
    assert_eq!(log[settled + 2].0, "turn/start", "{log:?}");
    let reader = store(&url, "reader", std::time::Duration::from_secs(15));
    let checked = check_bytes(&reader.read("s1").unwrap());
    assert_eq!(checked.problem, None);

    // Host B took over one session, and a person (its client) answered one question.
    let scraped = scrape(metrics);
    let lines: Vec<&str> = scraped
        .lines()
        .filter(|l| {
            l.starts_with("approval_takeovers_total")
                || l.starts_with("approval_leases_lost_total")
                || l.starts_with("approval_questions_total{outcome=\"allowed-once\",by=\"person\"}")
        })
        .collect();
    assert_eq!(
        lines,
        [
            "approval_questions_total{outcome=\"allowed-once\",by=\"person\"} 1",
            "approval_leases_lost_total 0",
            "approval_takeovers_total 1",
        ],
        "{scraped}"
    );
}

/// `GET /metrics` at `addr`, once the host listens there.
pub(crate) fn scrape(addr: std::net::SocketAddr) -> String {
    use std::io::{Read, Write};
    let started = std::time::Instant::now();
    let mut stream = loop {
        match std::net::TcpStream::connect(addr) {
            Ok(s) => break s,
            Err(e) => {
                assert!(started.elapsed() < PATIENCE, "metrics never listened: {e}");
                std::thread::yield_now();
            }
        }
    };
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).unwrap();
    let (head, body) = reply.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    body.to_owned()
}

#[test]
fn a_host_stopped_with_sigterm_releases_its_sessions_at_once() {
    let url = fresh_schema();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("gate.wasm"), bundled::ALLOW_TOOLS).unwrap();
    let config = dir.path().join("deploy.toml");
    // A lease far longer than the test: only a release lets the next host in.
    std::fs::write(
        &config,
        format!("[store]\nurl = {url:?}\nlease-seconds = 600\n"),
    )
    .unwrap();
    let mut a = answerer(dir.path(), &config, &["--migrate"]);
    open(&mut a, "s1");
    let pid = a.child.id();
    let status = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    assert!(a.child.wait().unwrap().success());

    let mut b = answerer(dir.path(), &config, &[]);
    let id = b.send("session/open", json!({"sessionId": "s1", "agentId": "a"}));
    let r = b.response(id);
    assert!(r.get("error").is_none(), "{r}");
}

#[test]
fn a_rule_revoked_on_one_host_refuses_the_call_on_another() {
    let url = fresh_schema();
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let config = deployment_on(dir_a.path(), &url);
    let mut a = answerer(dir_a.path(), &config, &["--migrate"]);
    let mut b = answerer(dir_b.path(), &config, &[]);
    open(&mut b, "s-b");

    let added = a.call(
        "rules/add",
        json!({"rule": "Bash(make:*)", "effect": "allow", "scope": "project", "reason": "builds are fine"}),
    );
    let rule_id = added["rule"]["id"].as_str().unwrap().to_owned();
    let make = |c: &mut Client, call: &str| {
        c.call(
            "tool/call",
            json!({"sessionId": "s-b", "agentId": "a", "callId": call, "name": "Bash",
                   "arguments": {"command": "make all"}}),
        );
        c.send(
            "approval/request",
            json!({"sessionId": "s-b", "agentId": "a", "toolName": "Bash", "callId": call}),
        )
    };
    // Host B picks the rule up (within its refresh interval) and answers without a prompt.
    let mut n = 0;
    let started = std::time::Instant::now();
    loop {
        assert!(started.elapsed() < PATIENCE, "host B never saw the rule");
        n += 1;
        let id = make(&mut b, &format!("c{n}"));
        match b.wait(|v| v["id"] == id || v["method"] == "approval/prompt") {
            r if r["id"] == id && r.get("method").is_none() => {
                assert_eq!(r["result"]["outcome"], "allowed-once", "{r}");
                break;
            }
            prompt => b.reply(&prompt, json!({"decision": "reject"})),
        }
        let _ = b.response(id);
    }

    a.call("rules/revoke", json!({"id": rule_id, "reason": "no more"}));
    // From when B has seen the revocation, the call goes to a person again (never the rule).
    let started = std::time::Instant::now();
    loop {
        assert!(
            started.elapsed() < PATIENCE,
            "host B never saw the revocation"
        );
        n += 1;
        let id = make(&mut b, &format!("c{n}"));
        let r = b.wait(|v| v["id"] == id || v["method"] == "approval/prompt");
        if r["method"] == "approval/prompt" {
            b.reply(&r, json!({"decision": "reject"}));
            assert_eq!(outcome(&mut b, id), "rejected");
            break;
        }
        assert_eq!(r["result"]["outcome"], "allowed-once", "{r}");
    }
}

#[test]
fn log_verify_and_export_read_the_database() {
    let url = fresh_schema();
    let dir = tempfile::tempdir().unwrap();
    let out = cli(dir.path(), &["--store", &url, "db", "migrate"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        format!(
            "schema migrated from version 0 to {}\n",
            approval_host::postgres::schema::CURRENT_VERSION
        )
    );
    let out = cli(dir.path(), &["--store", &url, "db", "migrate"]);
    assert_eq!(
        stdout(&out),
        format!(
            "schema at version {}: up to date\n",
            approval_host::postgres::schema::CURRENT_VERSION
        )
    );

    for (session, call) in [("s1", "c1"), ("s2", "c2")] {
        let out = cli(
            dir.path(),
            &[
                "--store",
                &url,
                "ask",
                "--session",
                session,
                "--agent",
                "a",
                "--tool",
                "bash",
                "--call-id",
                call,
            ],
        );
        assert_eq!(stdout(&out), "unavailable\n", "{}", stderr(&out));
    }
    // Nothing went to the state directory.
    assert!(!log_path(dir.path(), "s1").exists());

    let out = cli(dir.path(), &["--store", &url, "log"]);
    let text = stdout(&out);
    assert!(
        text.lines().nth(1).unwrap().starts_with("s1 ") || text.contains("\ns1 "),
        "{text}"
    );
    assert!(text.contains("\ns2 "), "{text}");
    let out = cli(dir.path(), &["--store", &url, "log", "s1"]);
    assert!(out.status.success());
    assert!(
        stdout(&out)
            .ends_with("ok: 4 records, 1 turns, 1 questions, each decided once inside its turn\n"),
        "{}",
        stdout(&out)
    );
    let out = cli(dir.path(), &["--store", &url, "log", "nobody"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out).trim_end(),
        "approval-host: no session log at postgres:nobody"
    );

    let out = cli(dir.path(), &["--store", &url, "verify", "--all"]);
    assert!(out.status.success(), "{}", stdout(&out));
    assert_eq!(
        stdout(&out),
        "s1: intact, 4 records, chained\ns2: intact, 4 records, chained\n"
    );

    let out = cli(dir.path(), &["--store", &url, "export", "--session", "s2"]);
    let lines: Vec<Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 4);
    assert!(lines.iter().all(|l| l["session"] == "s2"));
    assert_eq!(lines[1]["record"]["type"], "approval/asked");
    let out = cli(dir.path(), &["--store", &url, "export"]);
    assert_eq!(stdout(&out).lines().count(), 8);
    let out = cli(
        dir.path(),
        &["--store", &url, "export", "--since", "2999-01-01T00:00:00Z"],
    );
    assert_eq!(stdout(&out), "");

    // A tampered row is found by verify.
    crate::support::pg::sql(
        &url,
        "UPDATE approval_records SET line = replace(line, '\"bash\"', '\"read\"') WHERE session = 's1' AND seq = 2",
    );
    let out = cli(dir.path(), &["--store", &url, "verify", "s1"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stdout(&out).starts_with("s1: TAMPERED at line 3 (chain-broken)"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn import_copies_a_state_directory_once_and_refuses_a_diverged_log() {
    let url = fresh_schema();
    let dir = tempfile::tempdir().unwrap();
    for (session, call) in [("s1", "c1"), ("s2", "c2")] {
        let out = cli(
            dir.path(),
            &[
                "ask",
                "--session",
                session,
                "--agent",
                "a",
                "--tool",
                "bash",
                "--call-id",
                call,
            ],
        );
        assert_eq!(stdout(&out), "unavailable\n", "{}", stderr(&out));
    }
    let state = dir.path().display().to_string();
    let elsewhere = tempfile::tempdir().unwrap();
    assert!(
        cli(elsewhere.path(), &["--store", &url, "db", "migrate"])
            .status
            .success()
    );
    let out = cli(elsewhere.path(), &["--store", &url, "db", "import", &state]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        "s1: 4 records copied\ns2: 4 records copied\n2 logs copied, 0 already complete, 0 refused\n"
    );
    // The copies are the same bytes: the chains verify on the database.
    let out = cli(elsewhere.path(), &["--store", &url, "verify", "--all"]);
    assert!(out.status.success(), "{}", stdout(&out));
    let from_dir = cli(dir.path(), &["export"]);
    let from_db = cli(elsewhere.path(), &["--store", &url, "export"]);
    assert_eq!(stdout(&from_dir), stdout(&from_db));

    // Again: nothing to do. After more records in the directory: only those are copied.
    let out = cli(elsewhere.path(), &["--store", &url, "db", "import", &state]);
    assert_eq!(
        stdout(&out),
        "0 logs copied, 2 already complete, 0 refused\n"
    );
    let out = cli(
        dir.path(),
        &[
            "ask",
            "--session",
            "s1",
            "--agent",
            "a",
            "--tool",
            "bash",
            "--call-id",
            "c9",
        ],
    );
    assert_eq!(stdout(&out), "unavailable\n");
    let out = cli(elsewhere.path(), &["--store", &url, "db", "import", &state]);
    assert_eq!(
        stdout(&out),
        "s1: 4 records copied (after 4 already there)\n1 logs copied, 1 already complete, 0 refused\n"
    );

    // A database log that differs from the directory's is never overwritten or extended.
    crate::support::pg::sql(
        &url,
        "UPDATE approval_records SET line = line || ' ' WHERE session = 's2' AND seq = 1",
    );
    let out = cli(elsewhere.path(), &["--store", &url, "db", "import", &state]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out),
        format!(
            "approval-host: s2: the database's log differs from {}; not copied\n",
            log_path(dir.path(), "s2").display()
        )
    );
}

#[test]
fn a_store_url_with_a_password_or_an_old_schema_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = cli(
        dir.path(),
        &[
            "--store",
            "postgres://agent:hunter2@localhost/approvals",
            "log",
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out).trim_end(),
        "approval-host: store: store URL: a password in the URL is refused (it would show in process listings); set APPROVAL_HOST_DB_PASSWORD or the deployment's [store] password-file instead"
    );
    let url = fresh_schema();
    let out = cli(dir.path(), &["--store", &url, "log"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out).trim_end(),
        format!(
            "approval-host: store: the database schema is at version 0, this host needs version {}: run `approval-host db migrate` (or start with --migrate)",
            approval_host::postgres::schema::CURRENT_VERSION
        )
    );
}
