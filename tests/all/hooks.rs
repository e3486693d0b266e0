//! Claude-Code-style PreToolUse hooks: the output codec, the merge, real hook processes failing
//! closed, the audit of each run, and a hook `ask` under policy `never`.

use std::sync::atomic::Ordering;
use std::time::Duration;

use approval_host::tools::hooks::{HookSpec, Hooks, Verdict, merge, parse_output};
use approval_host::tools::{PreDecision, ToolCall, ToolContext, ToolRuntime};
use approval_host::{Decision, Policy, Position, Scope};
use serde_json::json;

use crate::support::{Host, counting, types};

#[test]
fn the_output_codec() {
    let cases = [
        ("", Verdict::Nothing),
        ("not json", Verdict::Nothing),
        ("[1]", Verdict::Nothing),
        (
            r#"{"decision":"approve","reason":"fine"}"#,
            Verdict::Allow(Some("fine".into())),
        ),
        (r#"{"decision":"block"}"#, Verdict::Deny(None)),
        (
            r#"{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"ask","permissionDecisionReason":"check"}}"#,
            Verdict::Ask(Some("check".into())),
        ),
        (
            // The event fields override the top-level decision.
            r#"{"decision":"block","reason":"old","hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"allow"}}"#,
            Verdict::Allow(None),
        ),
        (
            // A different hookEventName voids the event fields.
            r#"{"decision":"block","reason":"kept","hookSpecificOutput":{"hookEventName":"PostToolUse","permissionDecision":"allow"}}"#,
            Verdict::Deny(Some("kept".into())),
        ),
        (
            // Claude Code requires hookEventName: without it the event fields are ignored,
            // exactly as when they name another event.
            r#"{"hookSpecificOutput":{"permissionDecision":"deny","permissionDecisionReason":"no"}}"#,
            Verdict::Nothing,
        ),
        (
            r#"{"hookSpecificOutput":{"permissionDecision":"allow"}}"#,
            Verdict::Nothing,
        ),
        (
            // ... while the top-level decision still counts.
            r#"{"decision":"block","reason":"top","hookSpecificOutput":{"permissionDecision":"allow"}}"#,
            Verdict::Deny(Some("top".into())),
        ),
        (
            r#"{"decision":"approve","hookSpecificOutput":{"hookEventName":null,"permissionDecision":"deny"}}"#,
            Verdict::Allow(None),
        ),
        (
            r#"{"hookSpecificOutput":{"permissionDecision":"maybe"}}"#,
            Verdict::Nothing,
        ),
    ];
    for (stdout, expected) in cases {
        assert_eq!(parse_output(stdout), expected, "{stdout}");
    }
}

#[test]
fn the_merge_ranks_deny_over_ask_over_allow_and_joins_reasons() {
    use Verdict::*;
    assert_eq!(
        merge(&[
            Allow(Some("a".into())),
            Ask(Some("q1".into())),
            Ask(None),
            Ask(Some("q2".into()))
        ]),
        PreDecision::Ask {
            reason: Some("q1\n\nq2".into())
        }
    );
    assert_eq!(
        merge(&[
            Ask(Some("q".into())),
            Deny(Some("d1".into())),
            Deny(Some("d2".into()))
        ]),
        PreDecision::Deny {
            reason: "d1\n\nd2".into()
        }
    );
    assert_eq!(
        merge(&[Deny(None), Ask(Some("q".into()))]),
        PreDecision::Deny {
            reason: "blocked by PreToolUse hook".into()
        }
    );
    assert_eq!(merge(&[Ask(None)]), PreDecision::Ask { reason: None });
    assert_eq!(merge(&[Allow(None), Nothing]), PreDecision::Next);
    assert_eq!(merge(&[]), PreDecision::Next);
}

fn hook(matcher: &str, command: &str) -> HookSpec {
    HookSpec {
        matcher: matcher.into(),
        command: command.into(),
        timeout: Duration::from_secs(20),
    }
}

fn runtime_with(
    host: &Host,
    hooks: Vec<HookSpec>,
) -> (ToolRuntime, approval_host::tools::PreRegistration) {
    let rt = ToolRuntime::new(Some(host.service.clone()));
    rt.register_tool(
        "bash",
        &json!({"type": "object"}),
        |_c: ToolContext| async { Ok("ran".to_owned()) },
    )
    .unwrap();
    let hooks = Hooks::new(hooks, host.dir.path().to_owned()).unwrap();
    let reg = rt.pre_execute("hooks", Scope::Global, Position::Front, hooks);
    (rt, reg)
}

async fn run(host: &Host, hooks: Vec<HookSpec>) -> String {
    let agent = host.service.agent("s", "a").await.unwrap();
    if !host.service.turn_open("s").await.unwrap() {
        host.service.start_turn("s").await.unwrap();
    }
    let (rt, _reg) = runtime_with(host, hooks);
    rt.execute(ToolCall::new(
        "c1",
        "bash",
        json!({"command": "ls"}),
        Some(&agent),
    ))
    .await
    .content
}

#[tokio::test]
async fn hook_processes_block_ask_allow_and_fail_closed() {
    let host = Host::new();
    let (_n, allow) = counting(Decision::AllowOnce);
    let _a = host
        .service
        .register("answerer", Scope::Global, Position::Back, allow);
    let cases: Vec<(HookSpec, String)> = vec![
        (
            hook("bash", "echo 'no rm here' >&2; exit 2"),
            "Error: no rm here".into(),
        ),
        (
            hook("*", "exit 2"),
            "Error: blocked by PreToolUse hook".into(),
        ),
        (
            hook(
                "",
                r#"cat > /dev/null; echo '{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"ask"}}'"#,
            ),
            "ran".into(),
        ),
        (
            hook("bash", "echo '{\"decision\":\"approve\"}'"),
            "ran".into(),
        ),
        (hook("read|grep", "exit 2"), "ran".into()),
        (hook("bash", "echo garbage"), "ran".into()),
        (
            hook("bash", "exit 3"),
            "Error: PreToolUse hook \"exit 3\" exited with code 3".into(),
        ),
        (
            hook("bash", "kill -9 $$"),
            "Error: PreToolUse hook \"kill -9 $$\" crashed (killed by a signal)".into(),
        ),
        (
            HookSpec {
                timeout: Duration::from_millis(100),
                ..hook("bash", "exec sleep 30")
            },
            "Error: PreToolUse hook \"exec sleep 30\" timed out after 100 ms".into(),
        ),
    ];
    for (spec, expected) in cases {
        let command = spec.command.clone();
        assert_eq!(run(&host, vec![spec]).await, expected, "{command}");
    }
    // The hook saw the documented input.
    let out = host.dir.path().join("input.json");
    let spec = hook("bash", &format!("cat > {}", out.display()));
    assert_eq!(run(&host, vec![spec]).await, "ran");
    let input: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(
        input,
        json!({"session_id": "s", "cwd": host.dir.path(), "hook_event_name": "PreToolUse",
               "tool_name": "bash", "tool_input": {"command": "ls"}, "tool_use_id": "c1"})
    );
}

#[tokio::test]
async fn each_run_is_audited_and_several_hooks_merge() {
    let host = Host::new();
    let content = run(
        &host,
        vec![
            hook("bash", r#"echo '{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"ask","permissionDecisionReason":"first"}}'"#),
            hook("bash", "echo 'second' >&2; exit 2"),
        ],
    )
    .await;
    assert_eq!(content, "Error: second");
    let events = host.events("s");
    assert_eq!(
        types(&events),
        [
            "turn/start",
            "tool/call",
            "hook/invoked",
            "hook/invoked",
            "hook/result",
            "hook/result",
            "tool/result"
        ]
    );
    assert_eq!(events[4].1["decision"], "ask");
    assert_eq!(events[4].1["reason"], "first");
    assert_eq!(
        events[5].1,
        json!({"hook": "echo 'second' >&2; exit 2", "callId": "c1", "exitCode": 2, "decision": "deny", "reason": "second"})
    );
}

#[tokio::test]
async fn a_hook_ask_under_policy_never_is_rejected_without_consulting_an_answerer() {
    let host = Host::with_policy(Policy::Never);
    let (asked, allow) = counting(Decision::AllowOnce);
    let _a = host
        .service
        .register("answerer", Scope::Global, Position::Back, allow);
    let content = run(
        &host,
        vec![hook("bash", r#"echo '{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"ask","permissionDecisionReason":"risky"}}'"#)],
    )
    .await;
    assert_eq!(content, "Error: the user rejected tool \"bash\"");
    assert_eq!(asked.load(Ordering::SeqCst), 0);
    let events = host.events("s");
    assert_eq!(
        types(&events),
        [
            "turn/start",
            "tool/call",
            "hook/invoked",
            "hook/result",
            "approval/asked",
            "approval/decided",
            "tool/result"
        ]
    );
    assert_eq!(events[4].1["reason"], "risky");
    assert_eq!(events[5].1["outcome"], "rejected");
}
