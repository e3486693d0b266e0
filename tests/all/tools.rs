//! The tool runtime: the ask routing matrix and its exact texts, pre-execute ordering, guards,
//! cancellation, and what lands on the session log.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use approval_host::tools::{PreCall, PreDecision, ToolCall, ToolContext, ToolRuntime, texts};
use approval_host::{ApprovalRequest, Decision, Failure, Position, Question, Scope};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::support::{Host, types};

const S: &str = "s";

/// A runtime with one tool, `write`, that counts its runs.
fn runtime(host: Option<&Host>) -> (ToolRuntime, Arc<AtomicUsize>) {
    let rt = ToolRuntime::new(host.map(|h| h.service.clone()));
    let runs = Arc::new(AtomicUsize::new(0));
    let r = runs.clone();
    rt.register_tool(
        "write",
        &json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
        move |ctx: ToolContext| {
            r.fetch_add(1, Ordering::SeqCst);
            async move { Ok(format!("wrote {}", ctx.arguments["path"].as_str().unwrap())) }
        },
    )
    .unwrap();
    (rt, runs)
}

fn ask_everything(rt: &ToolRuntime, reason: Option<&str>) -> approval_host::tools::PreRegistration {
    let reason = reason.map(str::to_owned);
    rt.pre_execute(
        "asker",
        Scope::Global,
        Position::Back,
        move |_c: PreCall| {
            let reason = reason.clone();
            async move { Ok(PreDecision::Ask { reason }) }
        },
    )
}

fn answer(host: &Host, decision: Decision) -> approval_host::Registration {
    host.service.register(
        "answerer",
        Scope::Global,
        Position::Back,
        move |_q: Question| async move { Ok::<_, Failure>(decision) },
    )
}

async fn in_turn() -> (Host, approval_host::Agent) {
    let host = Host::new();
    let agent = host.service.agent(S, "a").await.unwrap();
    host.service.start_turn(S).await.unwrap();
    (host, agent)
}

fn call(agent: Option<&approval_host::Agent>) -> ToolCall {
    ToolCall::new("c1", "write", json!({"path": "x"}), agent)
}

#[tokio::test]
async fn the_ask_routing_matrix_has_distinct_exact_texts() {
    for (decision, expected) in [
        (Some(Decision::AllowOnce), None),
        (
            Some(Decision::Reject),
            Some("Error: the user rejected tool \"write\""),
        ),
        (
            Some(Decision::Cancel),
            Some("Error: approval for tool \"write\" was cancelled"),
        ),
        (
            None,
            Some("Error: tool \"write\" requires approval, but no approval channel is available"),
        ),
    ] {
        let (host, agent) = in_turn().await;
        let (rt, runs) = runtime(Some(&host));
        let _ask = ask_everything(&rt, Some("writes outside the workspace"));
        let _answer = decision.map(|d| answer(&host, d));
        let result = rt.execute(call(Some(&agent))).await;
        match expected {
            None => {
                assert_eq!(result.content, "wrote x");
                assert!(!result.is_error);
                assert_eq!(runs.load(Ordering::SeqCst), 1);
            }
            Some(text) => {
                assert_eq!(result.content, text, "{decision:?}");
                assert!(result.is_error);
                assert_eq!(result.error.unwrap().message, &text["Error: ".len()..]);
                assert_eq!(runs.load(Ordering::SeqCst), 0, "the body never ran");
            }
        }
        let events = host.events(S);
        assert_eq!(
            types(&events),
            [
                "turn/start",
                "tool/call",
                "approval/asked",
                "approval/decided",
                "tool/result"
            ]
        );
        assert_eq!(events[2].1["reason"], "writes outside the workspace");
        assert_eq!(events[2].1["callId"], "c1");
        assert_eq!(events[4].1["isError"], expected.is_some());
    }
}

#[tokio::test]
async fn without_a_service_or_an_agent_the_ask_denies_without_asking() {
    let (rt, runs) = runtime(None);
    let _ask = ask_everything(&rt, None);
    let r = rt.execute(call(None)).await;
    assert_eq!(
        r.content,
        "Error: tool \"write\" requires approval (not yet supported)"
    );
    let _reasoned = {
        drop(_ask);
        ask_everything(&rt, Some("hook says ask"))
    };
    assert_eq!(rt.execute(call(None)).await.content, "Error: hook says ask");

    let (host, agent) = in_turn().await;
    let (rt, _) = runtime(Some(&host));
    let _ask = ask_everything(&rt, None);
    let (asked, l) = crate::support::counting(Decision::AllowOnce);
    let _a = host
        .service
        .register("allow", Scope::Global, Position::Back, l);
    let r = rt.execute(call(None)).await;
    assert_eq!(
        r.content,
        "Error: tool \"write\" requires approval, but the call has no agent to route it through"
    );
    assert_eq!(asked.load(Ordering::SeqCst), 0, "the service was not asked");
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    drop(agent);
}

#[tokio::test]
async fn a_cancelled_caller_is_aborted_before_dispatch() {
    let (host, agent) = in_turn().await;
    let (rt, runs) = runtime(Some(&host));
    let _ask = ask_everything(&rt, None);
    let token = CancellationToken::new();
    token.cancel();
    let r = rt.execute(call(Some(&agent)).cancel(token)).await;
    assert_eq!(r.content, "Error: tool call aborted before dispatch");
    let info = r.error.unwrap().info.unwrap();
    assert_eq!(info.code, "ABORTED_BEFORE_DISPATCH");
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    assert!(
        !types(&host.events(S)).contains(&"approval/asked"),
        "nothing asked"
    );

    // Cancelled while the approval is pending: aborted too, and the body never runs.
    let (started_tx, mut started) = tokio::sync::mpsc::unbounded_channel();
    let _slow = host
        .service
        .register("slow", Scope::Global, Position::Back, move |q: Question| {
            let started = started_tx.clone();
            async move {
                started.send(()).unwrap();
                q.cancelled().await;
                Ok::<_, Failure>(Decision::AllowOnce)
            }
        });
    let token = CancellationToken::new();
    let rt2 = rt.clone();
    let c = call(Some(&agent)).cancel(token.clone());
    let pending = tokio::spawn(async move { rt2.execute(c).await });
    started.recv().await.unwrap();
    token.cancel();
    let r = pending.await.unwrap();
    assert_eq!(r.content, "Error: tool call aborted before dispatch");
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn pre_execute_gates_deny_and_guards_run_after_an_approved_ask() {
    let (host, agent) = in_turn().await;
    let (rt, runs) = runtime(Some(&host));
    let _answer = answer(&host, Decision::AllowOnce);
    let _ask = ask_everything(&rt, None);
    let deny = rt.pre_execute(
        "deny",
        Scope::Agent(agent.clone()),
        Position::Front,
        |c: PreCall| async move {
            Ok(if c.arguments["path"] == "/etc/passwd" {
                PreDecision::Deny {
                    reason: "not there".into(),
                }
            } else {
                PreDecision::Next
            })
        },
    );
    let r = rt
        .execute(ToolCall::new(
            "c1",
            "write",
            json!({"path": "/etc/passwd"}),
            Some(&agent),
        ))
        .await;
    assert_eq!(r.content, "Error: not there");
    drop(deny);
    let _guard = rt.guard(|c: &PreCall| {
        if c.arguments["path"] == "x" {
            Err("guard says no".to_owned())
        } else {
            Ok(())
        }
    });
    let r = rt.execute(call(Some(&agent))).await;
    assert_eq!(r.content, "Error: guard says no");
    let decided = host
        .events(S)
        .into_iter()
        .filter(|(t, _)| t == "approval/decided")
        .count();
    assert_eq!(decided, 1, "the ask was approved, then the guard denied");
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    let r = rt
        .execute(ToolCall::new(
            "c3",
            "write",
            json!({"path": "y"}),
            Some(&agent),
        ))
        .await;
    assert_eq!(r.content, "wrote y");
}

#[tokio::test]
async fn a_failing_listener_refuses_with_its_own_message_and_never_runs_the_tool() {
    let (host, agent) = in_turn().await;
    let (rt, runs) = runtime(Some(&host));
    let _broken = rt.pre_execute(
        "broken",
        Scope::Global,
        Position::Back,
        |_c: PreCall| async { Err::<PreDecision, _>("rules unreadable".to_owned()) },
    );
    let r = rt.execute(call(Some(&agent))).await;
    // What the model reads is the error alone, as for every request error; the listener's
    // name goes to the audit (and the tracing log).
    assert_eq!(r.content, "Error: rules unreadable");
    assert_eq!(r.failed_listener.as_deref(), Some("broken"));
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    let events = host.events(S);
    let (kind, data) = events.last().unwrap();
    assert_eq!(kind, "tool/result");
    assert_eq!(
        data,
        &json!({"callId": "c1", "isError": true, "content": "Error: rules unreadable", "failedListener": "broken"})
    );
}

#[tokio::test]
async fn a_panicking_listener_refuses_with_its_panic_message_and_never_runs_the_tool() {
    let (host, agent) = in_turn().await;
    let (rt, runs) = runtime(Some(&host));
    let _in_future = rt.pre_execute(
        "panics-polled",
        Scope::Global,
        Position::Back,
        |_c: PreCall| async { panic!("the rule table is corrupt") },
    );
    let r = rt.execute(call(Some(&agent))).await;
    assert_eq!(r.content, "Error: the rule table is corrupt");
    assert_eq!(r.failed_listener.as_deref(), Some("panics-polled"));
    drop(_in_future);

    struct PanicsEarly;
    impl approval_host::tools::PreExecute for PanicsEarly {
        fn decide(&self, _call: PreCall) -> approval_host::tools::PreFuture {
            panic!("no future for you")
        }
    }
    let _early = rt.pre_execute("panics-early", Scope::Global, Position::Back, PanicsEarly);
    let r = rt.execute(call(Some(&agent))).await;
    assert_eq!(r.content, "Error: no future for you");
    assert_eq!(r.failed_listener.as_deref(), Some("panics-early"));
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    let results: Vec<_> = host
        .events(S)
        .into_iter()
        .filter(|(t, _)| t == "tool/result")
        .map(|(_, d)| d["failedListener"].clone())
        .collect();
    assert_eq!(results, [json!("panics-polled"), json!("panics-early")]);
}

#[tokio::test]
async fn unknown_tools_and_bad_arguments_are_refused() {
    let (rt, runs) = runtime(None);
    let r = rt
        .execute(ToolCall::new("c", "nope", json!({}), None))
        .await;
    assert_eq!(r.content, "Error: unknown tool \"nope\"");
    let r = rt
        .execute(ToolCall::new("c", "write", json!({"path": 3}), None))
        .await;
    assert!(
        r.content
            .starts_with("Error: invalid arguments for tool \"write\": "),
        "{}",
        r.content
    );
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    let r = rt.execute(call(None)).await;
    assert_eq!(r.content, "wrote x", "no listener: allow by default");
}

#[tokio::test]
async fn nothing_about_a_grant_persists() {
    let (host, agent) = in_turn().await;
    let (rt, runs) = runtime(Some(&host));
    let _ask = ask_everything(&rt, None);
    let grants = Arc::new(AtomicUsize::new(1));
    let g = grants.clone();
    let _answer = host.service.register(
        "once",
        Scope::Global,
        Position::Back,
        move |_q: Question| {
            let first = g.fetch_sub(1, Ordering::SeqCst) == 1;
            async move {
                Ok::<_, Failure>(if first {
                    Decision::AllowOnce
                } else {
                    Decision::Next
                })
            }
        },
    );
    assert_eq!(rt.execute(call(Some(&agent))).await.content, "wrote x");
    let again = rt
        .execute(ToolCall::new(
            "c2",
            "write",
            json!({"path": "x"}),
            Some(&agent),
        ))
        .await;
    assert_eq!(
        again.content,
        "Error: tool \"write\" requires approval, but no approval channel is available"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let _ = ApprovalRequest::new(&agent, "unused");
    let _: Option<Value> = None;
}

#[test]
fn escalation_and_hook_texts_are_exact() {
    use texts::escalation as e;
    assert_eq!(
        e::NEEDS_JUSTIFICATION,
        "invalid escalation: sandbox_permissions requires a justification"
    );
    assert_eq!(
        e::JUSTIFICATION_ALONE,
        "invalid escalation: justification is only valid together with sandbox_permissions"
    );
    assert_eq!(
        e::EMPTY_JUSTIFICATION,
        "invalid justification: expected a non-empty sentence"
    );
    assert_eq!(
        e::not_wider("read-only", "workspace-write"),
        "sandbox escalation to \"read-only\" is not strictly wider than this call's current \"workspace-write\" mode"
    );
    assert_eq!(
        e::reason("workspace-write", "the user asked"),
        "escalate sandbox to workspace-write: the user asked"
    );
    assert_eq!(
        e::rejected("workspace-write"),
        "the user rejected escalating this command to \"workspace-write\""
    );
    assert_eq!(
        e::cancelled("workspace-write"),
        "approval for escalating to \"workspace-write\" was cancelled"
    );
    assert_eq!(
        e::unavailable("workspace-write"),
        "sandbox escalation to \"workspace-write\" requires approval, but no approval channel is available"
    );
    assert_eq!(
        e::no_service("workspace-write"),
        "sandbox escalation to \"workspace-write\" requires approval, but no approval service is composed"
    );
    assert_eq!(
        e::no_agent("workspace-write"),
        "sandbox escalation to \"workspace-write\" requires approval, but the call has no agent to route it through"
    );
    assert!(
        e::denied_hint("read-only")
            .starts_with("[sandbox: file access denied under read-only mode]")
    );
    assert_eq!(texts::HOOK_BLOCKED, "blocked by PreToolUse hook");
}

/// A person answering from outside the process (an editor, a console): it rejects, saying why.
struct Person(&'static str);

impl approval_host::Listener for Person {
    fn decide(&self, _q: Question) -> approval_host::waterfall::ListenerFuture {
        Box::pin(async { Ok(Decision::Reject) })
    }

    fn answer(
        &self,
        _q: &Question,
    ) -> Option<(Option<Arc<str>>, approval_host::waterfall::AnswerFuture)> {
        let reason = self.0;
        Some((
            None,
            Box::pin(async move { Ok(approval_host::Answer::reject(reason)) }),
        ))
    }

    fn leaves_process(&self) -> bool {
        true
    }
}

#[tokio::test]
async fn a_rejection_with_a_reason_names_the_gate_or_the_person_and_says_why() {
    // An in-process gate: the model reads which policy refused and why.
    let (host, agent) = in_turn().await;
    let (rt, runs) = runtime(Some(&host));
    let _ask = ask_everything(&rt, None);
    let _gate = host.service.register(
        "no-writes",
        Scope::Global,
        Position::Front,
        approval_host::Explained(|_q: Question| async {
            Ok::<_, Failure>(approval_host::Answer::reject(
                "writes are frozen\nuntil the release",
            ))
        }),
    );
    let result = rt.execute(call(Some(&agent))).await;
    assert_eq!(
        result.content,
        "Error: tool \"write\" was rejected by policy \"no-writes\": writes are frozen until the release"
    );
    assert_eq!(
        &result.content["Error: ".len()..],
        texts::approval_rejected_by_policy(
            "write",
            "no-writes",
            "writes are frozen until the release"
        )
    );
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    let events = host.events(S);
    assert_eq!(events[3].1["reason"], "writes are frozen until the release");
    assert_eq!(events[3].1["answerer"], "no-writes");

    // A person: "the user rejected", with the person's words.
    let (host, agent) = in_turn().await;
    let (rt, _) = runtime(Some(&host));
    let _ask = ask_everything(&rt, None);
    let _person = host
        .service
        .register("editor", Scope::Global, Position::Back, Person("not now"));
    let result = rt.execute(call(Some(&agent))).await;
    assert_eq!(
        result.content,
        "Error: the user rejected tool \"write\": not now"
    );
}
