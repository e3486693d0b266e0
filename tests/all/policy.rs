//! The per-session policy: `never` before any listener, overrides over the default, notices,
//! runtime context, and the subagent pin.

use std::sync::atomic::Ordering;

use approval_host::policy::{ASK_CONTEXT, NEVER_CONTEXT, SUBAGENT_CONTEXT};
use approval_host::{ApprovalError, ApprovalRequest, Decision, Outcome, Policy, Position, Scope};
use serde_json::json;

use crate::support::{Host, counting, types};

#[tokio::test]
async fn never_policy_rejects_before_answerers() {
    let host = Host::with_policy(Policy::Never);
    let (before, l1) = counting(Decision::AllowOnce);
    let _r1 = host
        .service
        .register("registered-before", Scope::Global, Position::Back, l1);
    let agent = host.service.agent("s", "a").await.unwrap();
    host.service.start_turn("s").await.unwrap();
    let (after, l2) = counting(Decision::AllowOnce);
    let _r2 = host.service.register(
        "prepended-after",
        Scope::Agent(agent.clone()),
        Position::Front,
        l2,
    );
    let outcome = host
        .service
        .request(ApprovalRequest::new(&agent, "bash").call_id("c1"))
        .await
        .unwrap();
    assert_eq!(outcome, Outcome::Rejected);
    assert_eq!(before.load(Ordering::SeqCst), 0);
    assert_eq!(after.load(Ordering::SeqCst), 0);
    let events = host.events("s");
    assert_eq!(
        types(&events),
        ["turn/start", "approval/asked", "approval/decided"]
    );
    assert_eq!(
        events[2].1,
        json!({"id": events[1].1["id"], "outcome": "rejected"})
    );
}

#[tokio::test]
async fn session_override_outranks_the_default_both_ways() {
    for (default, switched, expected) in [
        (Policy::Never, Policy::Ask, Outcome::AllowedOnce),
        (Policy::Ask, Policy::Never, Outcome::Rejected),
    ] {
        let host = Host::with_policy(default);
        let (_c, l) = counting(Decision::AllowOnce);
        let _r = host
            .service
            .register("allow", Scope::Global, Position::Back, l);
        let agent = host.service.agent("s", "a").await.unwrap();
        assert_eq!(host.service.effective_policy(&agent), default);
        assert!(
            host.service
                .set_policy(&agent, switched, Some("user"))
                .await
                .unwrap()
        );
        assert_eq!(host.service.effective_policy(&agent), switched);
        host.service.start_turn("s").await.unwrap();
        let outcome = host
            .service
            .request(ApprovalRequest::new(&agent, "bash"))
            .await
            .unwrap();
        assert_eq!(
            outcome, expected,
            "default {default}, switched to {switched}"
        );
    }
}

#[tokio::test]
async fn set_policy_appends_only_on_change_and_queues_the_exact_notice() {
    let host = Host::new();
    let agent = host.service.agent("s", "a").await.unwrap();
    assert!(
        !host
            .service
            .set_policy(&agent, Policy::Ask, Some("user"))
            .await
            .unwrap()
    );
    assert!(host.events("s").is_empty());
    assert!(agent.take_notices().is_empty());

    assert!(
        host.service
            .set_policy(&agent, Policy::Never, Some("user"))
            .await
            .unwrap()
    );
    assert!(
        !host
            .service
            .set_policy(&agent, Policy::Never, Some("user"))
            .await
            .unwrap()
    );
    assert_eq!(
        agent.take_notices(),
        ["The approval policy changed from \"ask\" to \"never\" (changed by the user)."]
    );
    assert!(agent.take_notices().is_empty(), "notices are taken once");
    assert!(
        host.service
            .set_policy(&agent, Policy::Ask, Some("user"))
            .await
            .unwrap()
    );
    assert_eq!(
        agent.take_notices(),
        ["The approval policy changed from \"never\" to \"ask\" (changed by the user)."]
    );
    let events = host.events("s");
    assert_eq!(
        events,
        [
            (
                "approval/policy".to_owned(),
                json!({"policy": "never", "source": "user"})
            ),
            (
                "approval/policy".to_owned(),
                json!({"policy": "ask", "source": "user"})
            ),
        ]
    );
}

#[test]
fn a_policy_outside_the_vocabulary_is_refused_with_the_exact_text() {
    let err = "always".parse::<Policy>().unwrap_err();
    assert_eq!(
        err.to_string(),
        "approval policy must be one of \"ask\" or \"never\""
    );
}

#[tokio::test]
async fn runtime_context_is_the_exact_sentence_and_stable() {
    let host = Host::new();
    let agent = host.service.agent("s", "a").await.unwrap();
    let first = host.service.runtime_context(&agent);
    assert_eq!(first, [ASK_CONTEXT]);
    assert_eq!(
        ASK_CONTEXT,
        "Approval policy: ask. Operations that require approval may ask through the configured answerers; without an available answerer, the request fails closed."
    );
    assert_eq!(host.service.runtime_context(&agent), first);
    host.service
        .set_policy(&agent, Policy::Never, Some("user"))
        .await
        .unwrap();
    assert_eq!(host.service.runtime_context(&agent), [NEVER_CONTEXT]);
    assert_eq!(
        NEVER_CONTEXT,
        "Approval prompts are disabled in this session: actions that require approval are rejected automatically — do not request sandbox escalation (do not set `sandbox_permissions`)."
    );
}

#[tokio::test]
async fn replay_rebuilds_the_override_after_a_restart() {
    let mut host = Host::new();
    {
        let agent = host.service.agent("s", "a").await.unwrap();
        host.service
            .set_policy(&agent, Policy::Never, Some("user"))
            .await
            .unwrap();
    }
    host.restart(Policy::Ask);
    let agent = host.service.agent("s", "a").await.unwrap();
    assert_eq!(host.service.effective_policy(&agent), Policy::Never);
    assert_eq!(host.service.runtime_context(&agent), [NEVER_CONTEXT]);
}

#[tokio::test]
async fn a_changed_default_applies_to_sessions_without_an_override() {
    let host = Host::new();
    let plain = host.service.agent("plain", "a").await.unwrap();
    let pinned = host.service.agent("pinned", "a").await.unwrap();
    host.service
        .set_policy(&pinned, Policy::Ask, None)
        .await
        .unwrap();
    host.service.set_default_policy(Policy::Never);
    assert_eq!(host.service.effective_policy(&plain), Policy::Never);
    // `ask` equals the old default, so no switch was logged and the new default applies.
    assert_eq!(host.service.effective_policy(&pinned), Policy::Never);
    host.service
        .set_policy(&pinned, Policy::Ask, Some("user"))
        .await
        .unwrap();
    host.service.set_default_policy(Policy::Never);
    assert_eq!(host.service.effective_policy(&pinned), Policy::Ask);
}

#[tokio::test]
async fn subagent_is_pinned_to_never_and_told_so() {
    let host = Host::new();
    let (calls, l) = counting(Decision::AllowOnce);
    let _r = host
        .service
        .register("allow", Scope::Global, Position::Back, l);
    let parent = host.service.agent("parent", "p").await.unwrap();
    let child = host.service.subagent(&parent, "child", "c").await.unwrap();
    assert!(child.is_subagent());
    assert_eq!(child.parent_id(), Some("p"));
    assert_eq!(
        host.events("child"),
        [(
            "approval/policy".to_owned(),
            json!({"policy": "never", "source": "delegation"})
        )]
    );
    assert_eq!(
        host.service.runtime_context(&child),
        [NEVER_CONTEXT, SUBAGENT_CONTEXT]
    );
    assert_eq!(
        SUBAGENT_CONTEXT,
        "You are a delegated subagent: your permission scope was fixed when you were started and cannot be widened from inside this session — operations that require approval are rejected automatically. When the task needs access beyond that scope, do not retry the denied operation; state the limitation in your reply so the delegating agent can handle it."
    );

    host.service.start_turn("child").await.unwrap();
    let outcome = host
        .service
        .request(ApprovalRequest::new(&child, "bash"))
        .await
        .unwrap();
    assert_eq!(outcome, Outcome::Rejected);
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    assert_eq!(
        types(&host.events("child")),
        [
            "approval/policy",
            "turn/start",
            "approval/asked",
            "approval/decided"
        ]
    );
    assert!(host.events("parent").is_empty());

    // A later switch inside the child wins: last event wins.
    host.service
        .set_policy(&child, Policy::Ask, Some("user"))
        .await
        .unwrap();
    assert_eq!(host.service.runtime_context(&child), [ASK_CONTEXT]);
    let outcome = host
        .service
        .request(ApprovalRequest::new(&child, "bash"))
        .await
        .unwrap();
    assert_eq!(outcome, Outcome::AllowedOnce);
}

#[tokio::test]
async fn a_subagent_needs_a_new_session() {
    let host = Host::new();
    let parent = host.service.agent("parent", "p").await.unwrap();
    host.service.start_turn("used").await.unwrap();
    let err = host
        .service
        .subagent(&parent, "used", "c")
        .await
        .unwrap_err();
    assert!(matches!(err, ApprovalError::SessionExists { .. }), "{err}");
    assert_eq!(types(&host.events("used")), ["turn/start"]);
}
