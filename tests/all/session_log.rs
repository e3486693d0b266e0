//! The embedded session log: format, validation before commit, torn-line recovery, locking,
//! replay, and group commit.

use std::io::Write;
use std::sync::atomic::Ordering;

use approval_host::event::{Asked, Decided, Event, ToolCall, types as ev};
use approval_host::fold::Violation;
use approval_host::log::SessionLog;
use approval_host::{
    ApprovalError, ApprovalRequest, DirStore, FailureKind, LogError, Outcome, Policy,
};
use serde_json::json;

use crate::support::{Control, ControlledStore, Host, controlled, events_at, log_path, types};

fn asked(id: &str, tool: &str) -> Event {
    Event::Asked(Asked {
        id: id.into(),
        tool_name: tool.into(),
        call_id: None,
        reason: None,
    })
}

fn decided(id: &str) -> Event {
    Event::Decided(Decided {
        id: id.into(),
        outcome: Outcome::Rejected,
        answerer: None,
        digest: None,
        failure: None,
        reason: None,
        proposal: None,
        rule_added: None,
        rule_declined: None,
        rule: None,
    })
}

fn refused(err: LogError) -> Violation {
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
async fn validation_refuses_bad_events_before_commit() {
    let dir = tempfile::tempdir().unwrap();
    let store = DirStore::new(dir.path());
    let log = SessionLog::open(&store, "s").unwrap();

    assert_eq!(
        refused(log.append(asked("q1", "bash")).await.unwrap_err()),
        Violation::OutsideTurn(ev::APPROVAL_ASKED)
    );
    assert_eq!(
        refused(log.append(decided("q1")).await.unwrap_err()),
        Violation::OutsideTurn(ev::APPROVAL_DECIDED)
    );
    assert_eq!(
        refused(log.append(Event::TurnEnd).await.unwrap_err()),
        Violation::NoTurnToEnd
    );
    log.append(Event::TurnStart).await.unwrap();
    assert_eq!(
        refused(log.append(Event::TurnStart).await.unwrap_err()),
        Violation::TurnAlreadyOpen
    );
    assert_eq!(
        refused(log.append(asked("q1", "")).await.unwrap_err()),
        Violation::EmptyToolName
    );
    assert_eq!(
        refused(log.append(decided("q1")).await.unwrap_err()),
        Violation::DecidedWithoutAsked("q1".into())
    );
    log.append(asked("q1", "bash")).await.unwrap();
    assert_eq!(
        refused(log.append(asked("q1", "bash")).await.unwrap_err()),
        Violation::RepeatedId("q1".into())
    );
    assert_eq!(
        refused(log.append(Event::TurnEnd).await.unwrap_err()),
        Violation::TurnEndWithOpenQuestions(1)
    );
    log.append(decided("q1")).await.unwrap();
    assert_eq!(
        refused(log.append(decided("q1")).await.unwrap_err()),
        Violation::DecidedWithoutAsked("q1".into())
    );
    // A closed question's id stays used.
    assert_eq!(
        refused(log.append(asked("q1", "bash")).await.unwrap_err()),
        Violation::RepeatedId("q1".into())
    );
    assert_eq!(
        refused(
            log.append(Event::ToolCall(ToolCall {
                call_id: String::new(),
                name: "bash".into(),
                arguments: json!({}),
                permission_mode: None,
            }))
            .await
            .unwrap_err()
        ),
        Violation::EmptyToolCallField("callId")
    );
    // Unknown outcomes and policies never become events.
    let err = Event::from_parts(
        ev::APPROVAL_DECIDED,
        json!({"id": "q1", "outcome": "granted"}),
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("unknown variant `granted`"),
        "{err}"
    );
    let err = Event::from_parts(ev::APPROVAL_POLICY, json!({"policy": "always"})).unwrap_err();
    assert!(
        err.to_string().contains("unknown variant `always`"),
        "{err}"
    );

    // Only the accepted events reached the disk.
    drop(log);
    assert_eq!(
        types(&events_at(&log_path(dir.path(), "s"))),
        ["turn/start", "approval/asked", "approval/decided"]
    );
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
async fn one_writer_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let store = DirStore::new(dir.path());
    let first = SessionLog::open(&store, "s").unwrap();
    let err = SessionLog::open(&store, "s").unwrap_err();
    assert!(matches!(err, LogError::Locked { .. }), "{err:?}");
    drop(first);
    SessionLog::open(&store, "s").unwrap();
}

#[tokio::test]
async fn reopening_rebuilds_open_questions() {
    let dir = tempfile::tempdir().unwrap();
    let store = DirStore::new(dir.path());
    {
        let log = SessionLog::open(&store, "s").unwrap();
        log.append(Event::TurnStart).await.unwrap();
        log.append(asked("q1", "bash")).await.unwrap();
        log.append(asked("q2", "bash")).await.unwrap();
        log.append(decided("q2")).await.unwrap();
    }
    let log = SessionLog::open(&store, "s").unwrap();
    let open: Vec<String> =
        log.with_fold(|f| f.open_questions().into_iter().map(|q| q.id).collect());
    assert_eq!(open, ["q1"]);
    assert!(log.with_fold(|f| f.turn_open()));
    assert_eq!(
        refused(log.append(asked("q2", "bash")).await.unwrap_err()),
        Violation::RepeatedId("q2".into())
    );
    assert_eq!(
        refused(log.append(decided("q2")).await.unwrap_err()),
        Violation::DecidedWithoutAsked("q2".into())
    );
    log.append(decided("q1")).await.unwrap();
    log.append(Event::TurnEnd).await.unwrap();
}

#[tokio::test]
async fn the_service_settles_questions_an_interrupted_run_left_open() {
    let dir = tempfile::tempdir().unwrap();
    {
        let log = SessionLog::open(&DirStore::new(dir.path()), "s").unwrap();
        log.append(Event::TurnStart).await.unwrap();
        log.append(asked("q1", "bash")).await.unwrap();
    }
    let service = approval_host::ApprovalService::open_dir(dir.path(), Policy::Ask);
    let _agent = service.agent("s", "a").await.unwrap();
    let events = events_at(&log_path(dir.path(), "s"));
    assert_eq!(
        events.last().unwrap().1,
        json!({"id": "q1", "outcome": "unavailable",
               "failure": {"kind": FailureKind::Interrupted.as_str()}})
    );
    service.end_turn("s").await.unwrap();
    let checked = approval_host::check::check_file(&log_path(dir.path(), "s")).unwrap();
    assert_eq!(checked.problem, None);
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
