//! Replaying recorded questions against a deployment (issue 29, parts 1 and 2): what a question
//! records is enough to ask it again (agent, cwd, sandbox mode; arguments on its `tool/call`),
//! `[audit] redact` keeps named values out of the log while the gates decide on the real ones,
//! and `approval-host replay` reports recorded × replayed outcomes, the changed questions, and
//! exits 0 / 1 / 3.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use approval_host::assemble;
use approval_host::plugin::QuarantinePolicy;
use approval_host::{ApprovalRequest, ApprovalService, Deployment, Outcome, PluginHost};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::support::{events_at, log_path};

/// The recorded deployment: `Bash(ls:*)` allowed by a rule, `rm` rejected by the deny-commands
/// gate, `read` allowed by allow-tools; everything else goes on to nobody.
const DEPLOY: &str = "[[rule]]\nrule = \"Bash(ls:*)\"\n\n\
    [[plugin]]\nname = \"no-rm\"\npath = \"deny.wasm\"\nrole = \"gate\"\n\
    [plugin.config]\npatterns = \"rm \"\nreason = \"no deleting\"\n\n\
    [[plugin]]\nname = \"reads\"\npath = \"allow.wasm\"\nrole = \"gate\"\n\
    [plugin.config]\ntools = \"read\"\n";

fn write_deployment(dir: &Path, name: &str, text: &str) -> PathBuf {
    std::fs::write(dir.join("deny.wasm"), approval_host::bundled::DENY_COMMANDS).unwrap();
    std::fs::write(dir.join("allow.wasm"), approval_host::bundled::ALLOW_TOOLS).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// A host over `state` put together from `config` as the binary does.
fn host(state: &Path, config: &Path) -> (ApprovalService, approval_host::Mounted) {
    let deployment = Deployment::load(config).unwrap();
    let service = ApprovalService::open_dir(state, deployment.default_policy);
    assemble::prepare(&service, &deployment, state, true).unwrap();
    let plugins = PluginHost::new().unwrap();
    let mounted =
        assemble::mount(&service, &plugins, &deployment, QuarantinePolicy::default()).unwrap();
    (service, mounted)
}

async fn ask(
    service: &ApprovalService,
    agent: &approval_host::Agent,
    call: &str,
    tool: &str,
    arguments: Option<Value>,
) -> Outcome {
    let mut request = ApprovalRequest::new(agent, tool).cwd("/work/project");
    if let Some(arguments) = arguments {
        service
            .record_tool_call(agent, call, tool, arguments)
            .await
            .unwrap();
        request = request.call_id(call);
    }
    service.ask(request).await.unwrap().outcome
}

/// Records session `s1`: five settled questions and one cancelled.
async fn record(state: &Path, config: &Path) {
    let (service, mounted) = host(state, config);
    let agent = service.agent("s1", "main").await.unwrap();
    service.start_turn("s1").await.unwrap();
    let bash = |c: &str| Some(json!({ "command": c }));
    assert_eq!(
        ask(&service, &agent, "c1", "Bash", bash("ls -la")).await,
        Outcome::AllowedOnce
    );
    assert_eq!(
        ask(&service, &agent, "c2", "Bash", bash("rm -rf build")).await,
        Outcome::Rejected
    );
    assert_eq!(
        ask(&service, &agent, "c3", "read", None).await,
        Outcome::AllowedOnce
    );
    assert_eq!(
        ask(&service, &agent, "c4", "Bash", bash("cargo build")).await,
        Outcome::Unavailable
    );
    assert_eq!(
        ask(&service, &agent, "c5", "Bash", bash("ls src")).await,
        Outcome::AllowedOnce
    );
    let cancelled = CancellationToken::new();
    cancelled.cancel();
    let outcome = service
        .ask(ApprovalRequest::new(&agent, "Bash").cancel(cancelled))
        .await
        .unwrap()
        .outcome;
    assert_eq!(outcome, Outcome::Cancelled);
    service.end_turn("s1").await.unwrap();
    drop((agent, mounted, service));
}

fn replay(state: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_approval-host"))
        .arg("--state-dir")
        .arg(state)
        .arg("replay")
        .args(args)
        .output()
        .unwrap()
}

fn json_of(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_records_who_asked_from_where_in_which_mode() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let service = ApprovalService::open_dir(&state, approval_host::Policy::Ask);
    let parent = service.agent("p", "lead").await.unwrap();
    let child = service.subagent(&parent, "c", "helper").await.unwrap();
    service
        .set_policy(&child, approval_host::Policy::Ask, Some("user"))
        .await
        .unwrap();
    service.start_turn("c").await.unwrap();
    service
        .ask(
            ApprovalRequest::new(&child, "Bash")
                .cwd("/w")
                .reason("build it"),
        )
        .await
        .unwrap();
    service.end_turn("c").await.unwrap();
    let asked: Vec<Value> = events_at(&log_path(&state, "c"))
        .into_iter()
        .filter(|(t, _)| t == "approval/asked")
        .map(|(_, d)| d)
        .collect();
    let id = asked[0]["id"].clone();
    assert_eq!(
        asked,
        [
            json!({"id": id, "toolName": "Bash", "reason": "build it", "agent": "helper",
                "parentAgent": "lead", "cwd": "/w"})
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recorded_session_replayed_against_its_own_deployment_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let config = write_deployment(dir.path(), "deploy.toml", DEPLOY);
    record(&state, &config).await;

    let out = replay(&state, &["--config", config.to_str().unwrap(), "--all"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        text,
        format!(
            "replayed 5 questions from 1 sessions against {}\n\
             skipped 1: cancelled before a decision\n\n\
             recorded \\ replayed   allowed-once       rejected      would ask\n\
             allowed-once                     3              0              0\n\
             nobody answered                  0              0              1\n\
             rejected                         0              1              0\n\n\
             changed: 0 (0 newly allowed)\n",
            config.display()
        )
    );
    // The recorded logs are not written to.
    let before = std::fs::read(log_path(&state, "s1")).unwrap();
    let out = replay(
        &state,
        &[
            "--config",
            config.to_str().unwrap(),
            "--session",
            "s1",
            "--json",
        ],
    );
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(std::fs::read(log_path(&state, "s1")).unwrap(), before);
    let report = json_of(&out);
    assert_eq!(report["questions"], 5);
    assert_eq!(report["changed"], 0);
    assert_eq!(report["skipped"]["cancelled"], 1);
    assert_eq!(report["exit"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_policy_is_reported_with_exact_counts_and_exit_3_when_it_newly_allows() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let config = write_deployment(dir.path(), "deploy.toml", DEPLOY);
    record(&state, &config).await;

    // Narrower: no rule for ls, so both ls calls would now ask; nothing newly allowed.
    let narrower = write_deployment(
        dir.path(),
        "narrower.toml",
        &DEPLOY.replace("[[rule]]\nrule = \"Bash(ls:*)\"\n", ""),
    );
    let out = replay(
        &state,
        &["--config", narrower.to_str().unwrap(), "--all", "--json"],
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report = json_of(&out);
    assert_eq!(report["changed"], 2);
    assert_eq!(report["newlyAllowed"], 0);
    let changes = report["changes"].as_array().unwrap();
    assert_eq!(changes.len(), 1);
    assert_eq!(changes[0]["now"], "nobody");
    assert_eq!(changes[0]["nowOutcome"], "would ask");
    assert_eq!(changes[0]["before"], "rule:deployment-1");
    let lines: Vec<&str> = changes[0]["questions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["arguments"].as_str().unwrap())
        .collect();
    assert_eq!(lines, ["ls -la", "ls src"]);

    // Wider: rm allowed by a rule ahead of the gate. One rejected question is now allowed.
    let wider = write_deployment(
        dir.path(),
        "wider.toml",
        &format!("[[rule]]\nrule = \"Bash(rm:*)\"\n\n{DEPLOY}"),
    );
    let out = replay(&state, &["--config", wider.to_str().unwrap(), "--all"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{text}");
    assert!(text.contains("changed: 1 (1 newly allowed)\n"), "{text}");
    assert!(
        text.contains(
            "\n1 now: rule:deployment-1 allowed-once (before: plugin no-rm rejected)\n  s1  "
        ),
        "{text}"
    );
    assert!(
        text.contains("  Bash  rm -rf build   (approval-host log s1  # seq "),
        "{text}"
    );
    // A gate that traps: every question past the rules fails closed, counted per plugin.
    std::fs::write(dir.path().join("trap.wasm"), crate::fixtures::trap()).unwrap();
    let trapping = write_deployment(
        dir.path(),
        "trapping.toml",
        &format!(
            "[[plugin]]\nname = \"trapper\"\npath = \"trap.wasm\"\nrole = \"gate\"\n\n{DEPLOY}"
        ),
    );
    let out = replay(&state, &["--config", trapping.to_str().unwrap(), "--all"]);
    let trapped = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{trapped}");
    assert!(
        trapped.ends_with("\nplugin failures in the replay:\n  trapper  trap  3\n"),
        "{trapped}"
    );
    let table: Vec<&str> = text.lines().skip(3).take(4).collect();
    assert_eq!(
        table,
        [
            "recorded \\ replayed   allowed-once      would ask",
            "allowed-once                     3              0",
            "nobody answered                  0              1",
            "rejected                         1              0",
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_from_before_the_format_change_says_what_it_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let config = write_deployment(dir.path(), "deploy.toml", DEPLOY);
    record(&state, &config).await;
    // The same session as an older host wrote it: its questions name no agent, cwd or mode.
    let path = log_path(&state, "s1");
    let old = std::fs::read_to_string(&path)
        .unwrap()
        .replace(",\"agent\":\"main\"", "")
        .replace(",\"cwd\":\"/work/project\"", "");
    std::fs::write(&path, old).unwrap();
    let out = replay(&state, &["--config", config.to_str().unwrap(), "--all"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.starts_with(&format!(
            "replayed 0 questions from 1 sessions against {}\n\
             skipped 1: cancelled before a decision\n\
             skipped 5: recorded before format 2 (no agent, cwd or sandbox mode): not replayed\n",
            config.display()
        )),
        "{text}"
    );

    // A session that is not there is bad input.
    let out = replay(
        &state,
        &["--config", config.to_str().unwrap(), "--session", "nope"],
    );
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "approval-host: no session \"nope\" in the store\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redacted_values_never_reach_the_log_and_a_replay_says_which_decisions_read_them() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let config = write_deployment(
        dir.path(),
        "deploy.toml",
        &format!("[audit]\nredact = [\"password\", \"/env/TOKEN\", \"/command\"]\n\n{DEPLOY}"),
    );
    let (service, mounted) = host(&state, &config);
    let agent = service.agent("s1", "main").await.unwrap();
    service.start_turn("s1").await.unwrap();
    let arguments =
        json!({"command": "ls -la", "password": "hunter2", "env": {"TOKEN": "t0k", "HOME": "/h"}});
    // The rule decides on the real command, which the log never holds.
    assert_eq!(
        ask(&service, &agent, "c1", "Bash", Some(arguments)).await,
        Outcome::AllowedOnce
    );
    // A person or client is shown the redacted values; a gate reads the real ones.
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let keep = seen.clone();
    let _last = service.register(
        "person",
        approval_host::Scope::Global,
        approval_host::Position::Last,
        move |q: approval_host::Question| {
            keep.lock()
                .unwrap()
                .push((q.arguments().unwrap(), q.arguments_shown().unwrap()));
            async { Ok::<_, approval_host::Failure>(approval_host::Decision::Reject) }
        },
    );
    let cat = json!({"command": "cat notes", "password": "hunter2"});
    assert_eq!(
        ask(&service, &agent, "c2", "Bash", Some(cat.clone())).await,
        Outcome::Rejected
    );
    assert_eq!(
        *seen.lock().unwrap(),
        [(
            cat,
            json!({"command": "[redacted]", "password": "[redacted]"})
        )]
    );
    service.end_turn("s1").await.unwrap();
    drop((agent, mounted, service, _last));
    let log = std::fs::read_to_string(log_path(&state, "s1")).unwrap();
    for secret in ["hunter2", "t0k", "ls -la", "cat notes"] {
        assert!(!log.contains(secret), "{secret} reached the log: {log}");
    }
    let call = events_at(&log_path(&state, "s1"))
        .into_iter()
        .find(|(t, _)| t == "tool/call")
        .unwrap()
        .1;
    // (the second call's record is checked by the loop above)
    assert_eq!(
        call,
        json!({"callId": "c1", "name": "Bash", "redacted": ["/command", "/env/TOKEN", "/password"],
               "arguments": {"command": "[redacted]", "password": "[redacted]",
                             "env": {"TOKEN": "[redacted]", "HOME": "/h"}}})
    );

    // Replayed, the rule reads "[redacted]": the question changes, and the report says why.
    let out = replay(&state, &["--config", config.to_str().unwrap(), "--all"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.ends_with(
            "\ndecided on redacted arguments (a gate read \"[redacted]\" where the value was): 2\n  \
             s1 seq 3: /command, /env/TOKEN, /password\n  s1 seq 6: /command, /password\n"
        ),
        "{text}"
    );
}

#[test]
fn a_bad_redact_entry_is_refused_naming_the_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("deploy.toml");
    for (text, want) in [
        (
            "[audit]\nredact = [\"ok\", \"\"]\n",
            "2:1: [audit]: redact entry #2 is empty",
        ),
        (
            "[audit]\nredact = [\"/a~x\"]\n",
            "2:1: [audit]: redact entry #1 \"/a~x\": `~` must be followed by 0 or 1 in a JSON pointer",
        ),
        (
            "[audit]\nredact = \"password\"\n",
            "2:1: [audit]: redact must be a list of strings",
        ),
    ] {
        std::fs::write(&path, text).unwrap();
        let err = Deployment::load(&path).unwrap_err().to_string();
        assert_eq!(err, format!("{}:{want}", path.display()), "{text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_rebuilds_session_rules_revocations_and_delegation_as_recorded() {
    use approval_host::answer::{Effect, RuleScope};
    use approval_host::rules::NewRule;
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let config = write_deployment(dir.path(), "deploy.toml", DEPLOY);
    {
        let (service, mounted) = host(&state, &config);
        let agent = service.agent("s2", "main").await.unwrap();
        service.start_turn("s2").await.unwrap();
        let make = || Some(json!({"command": "make all"}));
        assert_eq!(
            ask(&service, &agent, "c1", "Bash", make()).await,
            Outcome::Unavailable
        );
        let rule = service
            .add_rule(NewRule {
                rule: "Bash(make:*)".into(),
                effect: Effect::Allow,
                scope: RuleScope::Session,
                session: Some("s2".into()),
                lasts: Some(std::time::Duration::from_secs(3600)),
                creator: "user:test".into(),
                reason: None,
            })
            .await
            .unwrap();
        assert_eq!(
            ask(&service, &agent, "c2", "Bash", make()).await,
            Outcome::AllowedOnce
        );
        service
            .revoke_rule(&rule.id, "user:test", None)
            .await
            .unwrap();
        assert_eq!(
            ask(&service, &agent, "c3", "Bash", make()).await,
            Outcome::Unavailable
        );
        let child = service
            .subagent(&agent, "s2-child", "helper")
            .await
            .unwrap();
        service.start_turn("s2-child").await.unwrap();
        assert_eq!(
            service
                .ask(ApprovalRequest::new(&child, "read"))
                .await
                .unwrap()
                .outcome,
            Outcome::Rejected
        );
        service.end_turn("s2-child").await.unwrap();
        service.end_turn("s2").await.unwrap();
        drop((agent, child, mounted, service));
    }
    let out = replay(
        &state,
        &["--config", config.to_str().unwrap(), "--all", "--json"],
    );
    let report = json_of(&out);
    assert_eq!(out.status.code(), Some(0), "{report}");
    assert_eq!(report["questions"], 4);
    assert_eq!(report["changed"], 0);
    assert_eq!(
        report["table"],
        json!([
            {"recorded": "allowed-once", "replayed": "allowed-once", "count": 1},
            {"recorded": "nobody answered", "replayed": "would ask", "count": 2},
            {"recorded": "rejected", "replayed": "rejected", "count": 1},
        ])
    );

    // --since keeps the questions of the last stretch; a duration that is not one is bad input.
    let out = replay(
        &state,
        &[
            "--config",
            config.to_str().unwrap(),
            "--all",
            "--since",
            "1h",
            "--json",
        ],
    );
    assert_eq!(json_of(&out)["questions"], 4);
    let out = replay(
        &state,
        &[
            "--config",
            config.to_str().unwrap(),
            "--all",
            "--since",
            "soon",
        ],
    );
    assert_eq!(out.status.code(), Some(2));
}
