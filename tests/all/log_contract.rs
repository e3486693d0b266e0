//! The session log's contract on every store: validation before commit, one writer at a time,
//! replay on reopen, and open questions settled after an interrupted run. Included twice: on the
//! directory store here, on PostgreSQL from `on_postgres.rs`.

use approval_host::event::{Event, ToolCall, types as ev};
use approval_host::fold::Violation;
use approval_host::log::SessionLog;
use approval_host::{FailureKind, LogError, Policy};
use serde_json::json;

use super::support::{LogFixture, types};
use crate::session_log::{asked, decided, refused};

#[tokio::test]
async fn validation_refuses_bad_events_before_commit() {
    let fixture = LogFixture::new();
    let log = SessionLog::open(fixture.store(), "s").unwrap();

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
                redacted: Vec::new(),
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

    // Only the accepted events were stored.
    drop(log);
    assert_eq!(
        types(&fixture.events("s")),
        ["turn/start", "approval/asked", "approval/decided"]
    );
}

#[tokio::test]
async fn one_writer_at_a_time() {
    let fixture = LogFixture::new();
    let first = SessionLog::open(fixture.store(), "s").unwrap();
    let err = SessionLog::open(fixture.store(), "s").unwrap_err();
    assert!(matches!(err, LogError::Locked { .. }), "{err:?}");
    drop(first);
    SessionLog::open(fixture.store(), "s").unwrap();
}

#[tokio::test]
async fn reopening_rebuilds_open_questions() {
    let fixture = LogFixture::new();
    {
        let log = SessionLog::open(fixture.store(), "s").unwrap();
        log.append(Event::TurnStart).await.unwrap();
        log.append(asked("q1", "bash")).await.unwrap();
        log.append(asked("q2", "bash")).await.unwrap();
        log.append(decided("q2")).await.unwrap();
    }
    let log = SessionLog::open(fixture.store(), "s").unwrap();
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
    let fixture = LogFixture::new();
    {
        let log = SessionLog::open(fixture.store(), "s").unwrap();
        log.append(Event::TurnStart).await.unwrap();
        log.append(asked("q1", "bash")).await.unwrap();
    }
    let service = fixture.service(Policy::Ask);
    let _agent = service.agent("s", "a").await.unwrap();
    let events = fixture.events("s");
    assert_eq!(
        events.last().unwrap().1,
        json!({"id": "q1", "outcome": "unavailable",
               "failure": {"kind": FailureKind::Interrupted.as_str()}})
    );
    service.end_turn("s").await.unwrap();
    let checked = approval_host::check::check_bytes(&fixture.store().read("s").unwrap());
    assert_eq!(checked.problem, None);
}
