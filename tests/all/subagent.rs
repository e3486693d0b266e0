//! Delegation: a subagent never runs wider than its parent. The child's session is seeded with
//! the parent's own sandbox override (then the `never` pin) before it can act, from the parent's
//! state at the moment `subagent` was called; a later switch inside the child wins; resuming
//! replays the seed and never writes it again; and the child is told all of it.

use approval_host::policy::{NEVER_CONTEXT, SUBAGENT_CONTEXT, sandbox_context};
use approval_host::tools::sandbox::{SandboxMode, session_mode, set_session_mode};
use approval_host::{ApprovalRequest, Decision, Outcome, Policy, Position, Scope};
use serde_json::json;

use crate::support::{Host, counting, types};

fn sandbox_seed(mode: &str) -> (String, serde_json::Value) {
    (
        "sandbox/mode".to_owned(),
        json!({"mode": mode, "source": "delegation"}),
    )
}

fn policy_seed() -> (String, serde_json::Value) {
    (
        "approval/policy".to_owned(),
        json!({"policy": "never", "source": "delegation"}),
    )
}

#[tokio::test]
async fn a_child_inherits_its_parents_sandbox_override_before_the_pin() {
    let host = Host::new();
    let parent = host.service.agent("parent", "p").await.unwrap();
    set_session_mode(&parent, SandboxMode::ReadOnly, Some("user"))
        .await
        .unwrap();
    let child = host.service.subagent(&parent, "child", "c").await.unwrap();
    assert_eq!(
        host.events("child"),
        [sandbox_seed("read-only"), policy_seed()]
    );
    // Wider than read-only is never where the child runs, whatever the deployment default.
    assert_eq!(
        session_mode(&child, SandboxMode::DangerFullAccess),
        SandboxMode::ReadOnly
    );
    use approval_host::event::SandboxModeName as M;
    assert_eq!(
        host.service.runtime_context(&child),
        [
            NEVER_CONTEXT,
            sandbox_context(M::ReadOnly, true),
            SUBAGENT_CONTEXT
        ]
    );
    assert_eq!(
        sandbox_context(M::ReadOnly, true),
        "Sandbox mode: read-only, inherited from the delegating agent: your commands run no wider than its own."
    );
    assert_eq!(
        sandbox_context(M::WorkspaceWrite, false),
        "Sandbox mode: workspace-write, set for this session."
    );
    // The parent's own context names its mode as its own.
    assert_eq!(
        host.service.runtime_context(&parent),
        [
            approval_host::policy::ASK_CONTEXT,
            "Sandbox mode: read-only, set for this session."
        ]
    );
}

#[tokio::test]
async fn a_parent_on_the_deployment_default_seeds_no_sandbox_mode() {
    let host = Host::new();
    let parent = host.service.agent("parent", "p").await.unwrap();
    let child = host.service.subagent(&parent, "child", "c").await.unwrap();
    assert_eq!(host.events("child"), [policy_seed()]);
    assert_eq!(
        session_mode(&child, SandboxMode::WorkspaceWrite),
        SandboxMode::WorkspaceWrite
    );
    assert_eq!(
        host.service.runtime_context(&child),
        [NEVER_CONTEXT, SUBAGENT_CONTEXT]
    );
}

#[tokio::test]
async fn the_parents_state_is_taken_when_subagent_is_called_not_when_awaited() {
    let host = Host::new();
    let parent = host.service.agent("parent", "p").await.unwrap();
    set_session_mode(&parent, SandboxMode::ReadOnly, Some("user"))
        .await
        .unwrap();
    // The call, then the parent widens itself, then the future first runs.
    let starting = host.service.subagent(&parent, "child", "c");
    set_session_mode(&parent, SandboxMode::DangerFullAccess, Some("user"))
        .await
        .unwrap();
    let child = starting.await.unwrap();
    assert_eq!(
        host.events("child"),
        [sandbox_seed("read-only"), policy_seed()]
    );
    assert_eq!(
        session_mode(&child, SandboxMode::WorkspaceWrite),
        SandboxMode::ReadOnly
    );

    // The same for a parent on the default that switches in between: no seed.
    let other = host.service.agent("other", "o").await.unwrap();
    let starting = host.service.subagent(&other, "child2", "c2");
    set_session_mode(&other, SandboxMode::DangerFullAccess, Some("user"))
        .await
        .unwrap();
    starting.await.unwrap();
    assert_eq!(host.events("child2"), [policy_seed()]);
}

#[tokio::test]
async fn the_parents_approval_policy_is_ignored_and_a_later_switch_in_the_child_wins() {
    let host = Host::new();
    let (calls, l) = counting(Decision::AllowOnce);
    let _r = host
        .service
        .register("allow", Scope::Global, Position::Back, l);
    let parent = host.service.agent("parent", "p").await.unwrap();
    host.service
        .set_policy(&parent, Policy::Ask, Some("user"))
        .await
        .unwrap();
    set_session_mode(&parent, SandboxMode::WorkspaceWrite, Some("user"))
        .await
        .unwrap();
    let child = host.service.subagent(&parent, "child", "c").await.unwrap();
    assert_eq!(host.service.effective_policy(&child), Policy::Never);
    host.service.start_turn("child").await.unwrap();
    let outcome = host
        .service
        .request(ApprovalRequest::new(&child, "bash"))
        .await
        .unwrap();
    assert_eq!(outcome, Outcome::Rejected);
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 0);

    set_session_mode(&child, SandboxMode::ReadOnly, Some("user"))
        .await
        .unwrap();
    assert_eq!(
        session_mode(&child, SandboxMode::DangerFullAccess),
        SandboxMode::ReadOnly
    );
    host.service
        .set_policy(&child, Policy::Ask, Some("user"))
        .await
        .unwrap();
    assert_eq!(
        host.service.runtime_context(&child),
        [
            approval_host::policy::ASK_CONTEXT,
            "Sandbox mode: read-only, set for this session."
        ]
    );
    let outcome = host
        .service
        .request(ApprovalRequest::new(&child, "bash"))
        .await
        .unwrap();
    assert_eq!(outcome, Outcome::AllowedOnce);
}

#[tokio::test]
async fn resuming_a_child_replays_its_seed_and_never_reseeds() {
    let mut host = Host::new();
    {
        let parent = host.service.agent("parent", "p").await.unwrap();
        set_session_mode(&parent, SandboxMode::ReadOnly, Some("user"))
            .await
            .unwrap();
        let child = host.service.subagent(&parent, "child", "c").await.unwrap();
        host.service.start_turn("child").await.unwrap();
        host.service.end_turn("child").await.unwrap();
        drop(child);
    }
    host.restart(Policy::Ask);
    let parent = host.service.agent("parent", "p").await.unwrap();
    // The parent is wider now; the resumed child keeps the seed it was started with.
    set_session_mode(&parent, SandboxMode::DangerFullAccess, Some("user"))
        .await
        .unwrap();
    let child = host.service.subagent(&parent, "child", "c").await.unwrap();
    assert!(child.is_subagent());
    assert_eq!(
        types(&host.events("child")),
        ["sandbox/mode", "approval/policy", "turn/start", "turn/end"]
    );
    assert_eq!(
        session_mode(&child, SandboxMode::DangerFullAccess),
        SandboxMode::ReadOnly
    );
    assert_eq!(host.service.effective_policy(&child), Policy::Never);
    use approval_host::event::SandboxModeName as M;
    assert_eq!(
        host.service.runtime_context(&child),
        [
            NEVER_CONTEXT,
            sandbox_context(M::ReadOnly, true),
            SUBAGENT_CONTEXT
        ]
    );
    // A plain agent of the same session replays the same state.
    let plain = host.service.agent("child", "again").await.unwrap();
    assert_eq!(host.service.effective_policy(&plain), Policy::Never);
}
