//! The bash tool over a real Landlock sandbox, and sandbox escalation through the seam: the
//! reference note's escalation-approved and escalation-rejected scenarios with their event
//! sequences, every escalation text, and confinement restored after a one-shot grant.

use std::path::{Path, PathBuf};
use std::time::Duration;

use approval_host::tools::bash::BashTool;
use approval_host::tools::sandbox::{SandboxMode, Workspace};
use approval_host::tools::{ToolCall, ToolRuntime};
use approval_host::{Decision, Failure, Position, Question, Scope};
use serde_json::{Value, json};

use crate::support::{Host, types};

/// Directories outside /tmp, so "outside the workspace" is not accidentally the temp dir.
fn scratch() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()
}

struct Box_ {
    root: tempfile::TempDir,
    outside: tempfile::TempDir,
}

impl Box_ {
    fn new() -> Self {
        let root = scratch();
        std::fs::create_dir(root.path().join("ws")).unwrap();
        std::fs::create_dir(root.path().join("tmp")).unwrap();
        Box_ {
            root,
            outside: scratch(),
        }
    }
    fn ws(&self) -> PathBuf {
        self.root.path().join("ws")
    }
    fn tool(&self, mode: SandboxMode) -> BashTool {
        BashTool {
            workspace: Workspace {
                root: self.ws(),
                temp: self.root.path().join("tmp"),
            },
            mode,
            timeout: Duration::from_secs(20),
        }
    }
}

fn write_to(path: &Path) -> String {
    format!("echo data > {}", path.display())
}

#[tokio::test]
async fn landlock_really_confines_each_mode() {
    let b = Box_::new();
    let inside = b.ws().join("inside.txt");
    let temp = b.root.path().join("tmp/t.txt");
    let outside = b.outside.path().join("outside.txt");

    let ro = b.tool(SandboxMode::ReadOnly);
    let err = ro
        .run(&write_to(&inside), SandboxMode::ReadOnly)
        .await
        .unwrap_err();
    assert!(err.contains("Permission denied"), "{err}");
    assert!(
        err.contains("[sandbox: file access denied under read-only mode]"),
        "{err}"
    );
    assert!(!inside.exists());
    assert_eq!(
        ro.run(
            "cat /etc/hostname > /dev/null && echo read",
            SandboxMode::ReadOnly
        )
        .await
        .unwrap(),
        "read\n"
    );

    let ww = b.tool(SandboxMode::WorkspaceWrite);
    assert_eq!(
        ww.run(
            &format!("{} && cat {}", write_to(&inside), inside.display()),
            SandboxMode::WorkspaceWrite
        )
        .await
        .unwrap(),
        "data\n"
    );
    ww.run(&write_to(&temp), SandboxMode::WorkspaceWrite)
        .await
        .unwrap();
    let err = ww
        .run(&write_to(&outside), SandboxMode::WorkspaceWrite)
        .await
        .unwrap_err();
    assert!(
        err.contains("[sandbox: file access denied under workspace-write mode]"),
        "{err}"
    );
    assert!(!outside.exists());

    let full = b.tool(SandboxMode::DangerFullAccess);
    full.run(&write_to(&outside), SandboxMode::DangerFullAccess)
        .await
        .unwrap();
    assert!(outside.exists());
}

fn answerer(host: &Host, decision: Decision) -> approval_host::Registration {
    host.service.register(
        "client",
        Scope::Global,
        Position::Back,
        move |_q: Question| async move { Ok::<_, Failure>(decision) },
    )
}

async fn runtime(host: &Host, b: &Box_) -> (ToolRuntime, approval_host::Agent) {
    let rt = ToolRuntime::new(Some(host.service.clone()));
    b.tool(SandboxMode::ReadOnly).register(&rt).unwrap();
    let agent = host.service.agent("s", "a").await.unwrap();
    host.service.start_turn("s").await.unwrap();
    (rt, agent)
}

fn escalated_call(agent: &approval_host::Agent, id: &str) -> ToolCall {
    ToolCall::new(
        id,
        "bash",
        json!({"command": "printf 'escalated\\n' > escalated.txt && cat escalated.txt",
               "sandbox_permissions": "workspace-write",
               "justification": "the user asked to write escalated.txt in the workspace"}),
        Some(agent),
    )
}

#[tokio::test]
async fn escalation_approved_runs_once_wider_then_confines_again() {
    let host = Host::new();
    let b = Box_::new();
    let (rt, agent) = runtime(&host, &b).await;
    let _allow = answerer(&host, Decision::AllowOnce);
    let r = rt.execute(escalated_call(&agent, "call_00_1")).await;
    assert_eq!(r.content, "escalated\n");
    assert!(!r.is_error);
    let events = host.events("s");
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
    assert_eq!(
        events[2].1,
        json!({"id": events[2].1["id"], "toolName": "bash", "callId": "call_00_1",
               "reason": "escalate sandbox to workspace-write: the user asked to write escalated.txt in the workspace",
               "agent": "a"})
    );
    assert_eq!(events[3].1["outcome"], "allowed-once");
    assert_eq!(events[4].1["content"], "escalated\n");

    // The grant died with the call: the next write is confined again.
    let r = rt
        .execute(ToolCall::new(
            "call_00_2",
            "bash",
            json!({"command": "echo again > again.txt"}),
            Some(&agent),
        ))
        .await;
    assert!(r.is_error);
    assert!(
        r.content
            .contains("[sandbox: file access denied under read-only mode]"),
        "{}",
        r.content
    );
    assert!(!b.ws().join("again.txt").exists());
}

#[tokio::test]
async fn escalation_rejected_runs_nothing() {
    let host = Host::new();
    let b = Box_::new();
    let (rt, agent) = runtime(&host, &b).await;
    let _reject = answerer(&host, Decision::Reject);
    let r = rt.execute(escalated_call(&agent, "call_00_1")).await;
    assert_eq!(
        r.content,
        "Error: the user rejected escalating this command to \"workspace-write\""
    );
    assert!(!b.ws().join("escalated.txt").exists());
    let events = host.events("s");
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
    assert_eq!(events[3].1["outcome"], "rejected");
}

#[tokio::test]
async fn a_gate_s_reason_for_rejecting_an_escalation_reaches_the_model() {
    let host = Host::new();
    let b = Box_::new();
    let (rt, agent) = runtime(&host, &b).await;
    let _gate = host.service.register(
        "no-escalation",
        Scope::Global,
        Position::Front,
        approval_host::Explained(|_q: Question| async {
            Ok::<_, Failure>(approval_host::Answer::reject(
                "escalations need a ticket number",
            ))
        }),
    );
    let r = rt.execute(escalated_call(&agent, "call_00_1")).await;
    assert_eq!(
        r.content,
        "Error: escalating this command to \"workspace-write\" was rejected by policy \"no-escalation\": escalations need a ticket number"
    );
    assert!(!b.ws().join("escalated.txt").exists());
    assert_eq!(
        host.events("s")[3].1["reason"],
        "escalations need a ticket number"
    );
}

#[tokio::test]
async fn every_escalation_refusal_has_its_text() {
    let host = Host::new();
    let b = Box_::new();
    let (rt, agent) = runtime(&host, &b).await;
    let call = |args: Value| ToolCall::new("c", "bash", args, Some(&agent));
    let cases = [
        (
            json!({"command": "true", "sandbox_permissions": "workspace-write"}),
            "Error: invalid escalation: sandbox_permissions requires a justification",
        ),
        (
            json!({"command": "true", "justification": "because"}),
            "Error: invalid escalation: justification is only valid together with sandbox_permissions",
        ),
        (
            json!({"command": "true", "sandbox_permissions": "workspace-write", "justification": "  "}),
            "Error: invalid justification: expected a non-empty sentence",
        ),
        (
            // The schema offers only modes that widen: asking for the narrowest is refused
            // before anything else.
            json!({"command": "true", "sandbox_permissions": "read-only", "justification": "x"}),
            "Error: invalid arguments for tool \"bash\": \"read-only\" is not one of \"workspace-write\" or \"danger-full-access\"",
        ),
        (
            json!({"command": "true", "sandbox_permissions": "workspace-write", "justification": "x"}),
            "Error: sandbox escalation to \"workspace-write\" requires approval, but no approval channel is available",
        ),
    ];
    for (args, expected) in cases {
        assert_eq!(
            rt.execute(call(args.clone())).await.content,
            expected,
            "{args}"
        );
    }
    let _cancel = answerer(&host, Decision::Cancel);
    let r = rt.execute(call(json!({"command": "true", "sandbox_permissions": "danger-full-access", "justification": "x"}))).await;
    assert_eq!(
        r.content,
        "Error: approval for escalating to \"danger-full-access\" was cancelled"
    );

    // No service composed, no agent.
    let bare = ToolRuntime::new(None);
    b.tool(SandboxMode::ReadOnly).register(&bare).unwrap();
    let args =
        json!({"command": "true", "sandbox_permissions": "workspace-write", "justification": "x"});
    assert_eq!(
        bare.execute(ToolCall::new("c", "bash", args.clone(), Some(&agent)))
            .await
            .content,
        "Error: sandbox escalation to \"workspace-write\" requires approval, but no approval service is composed"
    );
    assert_eq!(
        rt.execute(ToolCall::new("c", "bash", args, None))
            .await
            .content,
        "Error: sandbox escalation to \"workspace-write\" requires approval, but the call has no agent to route it through"
    );
}

#[tokio::test]
async fn a_logged_mode_switch_overrides_the_default_and_replays() {
    use approval_host::tools::sandbox::{session_mode, set_session_mode};
    let mut host = Host::new();
    let b = Box_::new();
    {
        let (rt, agent) = runtime(&host, &b).await;
        set_session_mode(&agent, SandboxMode::WorkspaceWrite, Some("user"))
            .await
            .unwrap();
        let r = rt
            .execute(ToolCall::new(
                "c1",
                "bash",
                json!({"command": "echo ok > ok.txt && cat ok.txt"}),
                Some(&agent),
            ))
            .await;
        assert_eq!(r.content, "ok\n");
        let r = rt.execute(escalated_call(&agent, "c2")).await;
        assert_eq!(
            r.content,
            "Error: sandbox escalation to \"workspace-write\" is not strictly wider than this call's current \"workspace-write\" mode"
        );
        host.service.end_turn("s").await.unwrap();
    }
    let events = host.events("s");
    assert_eq!(
        events[1],
        (
            "sandbox/mode".to_owned(),
            json!({"mode": "workspace-write", "source": "user"})
        )
    );
    host.restart(approval_host::Policy::Ask);
    let agent = host.service.agent("s", "a").await.unwrap();
    assert_eq!(
        session_mode(&agent, SandboxMode::ReadOnly),
        SandboxMode::WorkspaceWrite
    );
}

#[test]
fn the_deployment_sets_the_default_mode() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d.toml");
    std::fs::write(&path, "[sandbox]\nmode = \"workspace-write\"\n").unwrap();
    let d = approval_host::Deployment::load(&path).unwrap();
    assert_eq!(d.sandbox_mode, SandboxMode::WorkspaceWrite);
    std::fs::write(&path, "[sandbox]\nmode = \"wide-open\"\n").unwrap();
    let err = approval_host::Deployment::load(&path)
        .unwrap_err()
        .to_string();
    assert!(err.ends_with("[sandbox]: sandbox mode must be one of \"read-only\", \"workspace-write\" or \"danger-full-access\", not \"wide-open\""), "{err}");
}

#[tokio::test]
async fn cancelling_a_call_kills_its_running_command() {
    let b = Box_::new();
    let started = b.ws().join("started");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&started)
            .status()
            .unwrap()
            .success()
    );
    let rt = ToolRuntime::new(None);
    b.tool(SandboxMode::WorkspaceWrite).register(&rt).unwrap();
    let token = tokio_util::sync::CancellationToken::new();
    let call = ToolCall::new(
        "c1",
        "bash",
        json!({"command": "echo up > started; sleep 30; echo late"}),
        None,
    )
    .cancel(token.clone());
    let running = tokio::spawn(async move { rt.execute(call).await });
    // Reading the FIFO returns once the command has written to it: it is running.
    let up = tokio::task::spawn_blocking(move || std::fs::read_to_string(started))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(up, "up\n");
    token.cancel();
    let r = running.await.unwrap();
    assert!(r.is_error);
    assert_eq!(r.content, "Error: the command was cancelled and killed");
}

#[test]
fn the_escalation_schema_offers_only_modes_that_widen_and_says_what_they_do() {
    use approval_host::tools::bash;
    let schema = bash::schema();
    let props = &schema["properties"];
    assert_eq!(
        props["sandbox_permissions"]["enum"],
        json!(["workspace-write", "danger-full-access"])
    );
    assert_eq!(
        props["sandbox_permissions"]["description"],
        "Only to retry a command the sandbox refused: run this one call under a wider sandbox mode. The user is asked to approve it first; the wider mode applies to this call only. Requires `justification`."
    );
    assert_eq!(
        props["justification"]["description"],
        "One sentence, shown to the person asked to approve the escalation, saying why this command needs the wider mode. Only with `sandbox_permissions`."
    );
    assert_eq!(
        props["command"]["description"],
        "The shell command to run (sh -c). It runs confined to this session's sandbox mode."
    );
    assert_eq!(
        props["sandbox_permissions"]["description"],
        bash::SANDBOX_PERMISSIONS_DESCRIPTION
    );
    assert_eq!(
        props["justification"]["description"],
        bash::JUSTIFICATION_DESCRIPTION
    );
}
