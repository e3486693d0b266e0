//! The embedded session log: its file format, torn-line recovery, corrupt lines, ids that could
//! escape the directory, and group commit (what every store must do is in `log_contract.rs`).

use std::io::Write;
use std::sync::atomic::Ordering;

use approval_host::event::{Asked, Decided, Event};
use approval_host::fold::Violation;
use approval_host::log::SessionLog;
use approval_host::{ApprovalError, ApprovalRequest, DirStore, LogError, Outcome, Policy};
use serde_json::json;

use crate::support::{Control, ControlledStore, Host, controlled, events_at, log_path};

pub(crate) fn asked(id: &str, tool: &str) -> Event {
    Event::Asked(Asked::new(id, tool))
}

/// A `tool/call` of `Bash` with these arguments.
pub(crate) fn bash_call(id: &str, arguments: serde_json::Value) -> Event {
    Event::ToolCall(approval_host::event::ToolCall {
        call_id: id.to_owned(),
        name: "Bash".to_owned(),
        arguments,
        permission_mode: None,
        redacted: Vec::new(),
    })
}

pub(crate) fn decided(id: &str) -> Event {
    Event::Decided(Decided::bare(id, Outcome::Rejected))
}

pub(crate) fn refused(err: LogError) -> Violation {
    match err {
        LogError::Refused { violation, .. } => violation,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[tokio::test]
async fn each_line_is_seq_ts_type_data_in_a_file_per_session() {
    let host = Host::new();
    let agent = host.service.agent("abc-1", "a").await.unwrap();
    host.service.start_turn("abc-1").await.unwrap();
    host.service
        .record_tool_call(&agent, "c1", "bash", json!({"command": "ls"}))
        .await
        .unwrap();
    let path = host.dir.path().join("sessions").join("abc-1.jsonl");
    assert!(path.is_file());
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.ends_with('\n'));
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        humantime::parse_rfc3339(v["ts"].as_str().unwrap()).unwrap();
    }
    // events_at also asserts the key order and gap-free seq.
    assert_eq!(
        events_at(&path),
        [
            ("turn/start".to_owned(), json!({})),
            (
                "tool/call".to_owned(),
                json!({"callId": "c1", "name": "bash", "arguments": {"command": "ls"}})
            ),
        ]
    );
    assert_eq!(
        host.service.call_arguments(&agent, "c1"),
        Some(json!({"command": "ls"}))
    );
    assert_eq!(host.service.call_arguments(&agent, "c2"), None);
}

#[tokio::test]
async fn a_torn_last_line_is_truncated_and_complete_lines_survive() {
    let mut host = Host::new();
    {
        let agent = host.service.agent("s", "a").await.unwrap();
        host.service.start_turn("s").await.unwrap();
        host.service
            .request(ApprovalRequest::new(&agent, "bash"))
            .await
            .unwrap();
    }
    host.restart(Policy::Ask);
    let path = log_path(host.dir.path(), "s");
    let complete = std::fs::read(&path).unwrap();
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    f.write_all(br#"{"seq":4,"ts":"2026-12-02T10:00:00Z","type":"approval/as"#)
        .unwrap();
    drop(f);

    let agent = host.service.agent("s", "a").await.unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), complete);
    host.service
        .request(ApprovalRequest::new(&agent, "bash"))
        .await
        .unwrap();
    host.service.end_turn("s").await.unwrap();
    let checked = approval_host::check::check_file(&path).unwrap();
    assert_eq!(checked.problem, None);
    assert_eq!(checked.summary.questions, 2);
}

#[tokio::test]
async fn a_corrupt_complete_line_refuses_to_open_naming_the_line() {
    let host = Host::new();
    host.service.start_turn("s").await.unwrap();
    host.service.end_turn("s").await.unwrap();
    let path = log_path(host.dir.path(), "s");
    let text = std::fs::read_to_string(&path).unwrap();
    let bad = text.replacen("turn/end", "turn/ended", 1);
    drop(host.service);
    std::fs::write(&path, bad).unwrap();
    let err = SessionLog::open(&DirStore::new(host.dir.path()), "s").unwrap_err();
    let LogError::Corrupt {
        line, ref reason, ..
    } = err
    else {
        panic!("{err:?}");
    };
    assert_eq!(line, 2);
    assert!(
        reason.contains("unknown event type \"turn/ended\""),
        "{reason}"
    );
}

#[tokio::test]
async fn a_session_id_that_could_escape_the_directory_is_refused() {
    let host = Host::new();
    for bad in ["../escape", "a/b", "..", ".hidden", "", "x\0y"] {
        let err = host.service.agent(bad, "a").await.unwrap_err();
        assert!(
            matches!(err, ApprovalError::Log(LogError::InvalidSessionId { .. })),
            "{bad:?}: {err:?}"
        );
    }
    let parent = host.dir.path().parent().unwrap();
    assert!(!parent.join("escape.jsonl").exists());
    assert!(!host.dir.path().join("sessions").join("a").exists());
}

#[tokio::test]
async fn concurrent_appends_share_one_write_and_sync() {
    let dir = tempfile::tempdir().unwrap();
    let control = Control::new();
    let store = ControlledStore {
        inner: DirStore::new(dir.path()),
        control: control.clone(),
    };
    let log = std::sync::Arc::new(SessionLog::open(&store, "s").unwrap());
    log.append(Event::TurnStart).await.unwrap();
    assert_eq!(control.appends.load(Ordering::SeqCst), 1);

    // Hold the journal so every append below queues behind the first batch.
    control.hold();
    let mut tasks = Vec::new();
    for i in 0..64 {
        let log = log.clone();
        tasks.push(tokio::spawn(async move {
            log.append(asked(&format!("q{i}"), "bash")).await
        }));
    }
    // An append is queued once the log counts it; wait for all 64 without sleeping.
    while log.len() < 65 {
        tokio::task::yield_now().await;
    }
    control.release();
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    let commits = control.appends.load(Ordering::SeqCst) - 1;
    assert!(
        (1..=2).contains(&commits),
        "64 queued appends took {commits} group commits"
    );
    assert_eq!(events_at(&log_path(dir.path(), "s")).len(), 65);
}

/// The last handle to a session can be dropped on another thread (closing its log, releasing
/// its file lock) at the moment the session is asked for again: the reopen waits for the close
/// instead of failing on the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_reopened_while_its_last_handle_closes_elsewhere_opens() {
    let (_dir, service, control) = controlled(Policy::Ask);
    let agent = service.agent("s", "a").await.unwrap();
    control.hold_close();
    let dropper = std::thread::spawn(move || drop(agent));
    let waiter = control.clone();
    tokio::task::spawn_blocking(move || waiter.wait_closing())
        .await
        .unwrap();
    // The session's last handle is gone and its log is closing, its file still locked.
    let mut reopen = tokio::spawn({
        let service = service.clone();
        async move { service.agent("s", "a").await.map(|_| ()) }
    });
    // Without waiting for the close, the reopen would fail on the lock at once; it must still be
    // pending (this bound only gives a wrong answer time to show, it never passes a wrong one).
    let early = tokio::time::timeout(std::time::Duration::from_millis(300), &mut reopen).await;
    assert!(
        early.is_err(),
        "the reopen did not wait for the close: {early:?}"
    );
    control.release_close();
    dropper.join().unwrap();
    reopen.await.unwrap().unwrap();
}

/// A record whose JSON nests deeper than a log line may is refused before anything is written:
/// written, its line could not be read back, and the session's log would not open again.
#[tokio::test]
async fn an_event_nested_deeper_than_a_log_line_may_is_refused_and_the_log_still_opens() {
    use approval_host::event::{MOST_NESTING, ToolResult};
    let dir = tempfile::tempdir().unwrap();
    let store = DirStore::new(dir.path());
    let nested = crate::support::nested;
    let call = bash_call;
    let log = SessionLog::open(&store, "deep").unwrap();
    log.append(Event::TurnStart).await.unwrap();
    // The line, its data and the arguments' object, then the arrays.
    log.append(call("fits", json!({"x": nested(MOST_NESTING - 3)})))
        .await
        .unwrap();
    for depth in [MOST_NESTING - 2, 126, 127, 200] {
        assert_eq!(
            refused(
                log.append(call("deep", json!({"x": nested(depth)})))
                    .await
                    .unwrap_err()
            ),
            Violation::TooDeep("tool/call"),
            "{depth}"
        );
    }
    let result = Event::ToolResult(
        serde_json::from_value::<ToolResult>(
            json!({"callId": "fits", "isError": false, "content": nested(127)}),
        )
        .unwrap(),
    );
    assert_eq!(
        refused(log.append(result).await.unwrap_err()),
        Violation::TooDeep("tool/result")
    );
    // Brackets inside a string are text, not nesting.
    log.append(call("text", json!({"command": "[".repeat(500)})))
        .await
        .unwrap();
    drop(log);
    let log = SessionLog::open(&store, "deep").unwrap();
    assert_eq!(log.len(), 3);
    assert_eq!(
        log.with_fold(|f| f.call_arguments("text")),
        Some(json!({"command": "[".repeat(500)}))
    );
}
