//! The approval seam: ordering, delegation, scoping, containment, cancellation and audit.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use approval_host::{
    ApprovalError, ApprovalRequest, Decision, Failure, LogError, Outcome, Policy, Position,
    Question, Scope,
};
use serde_json::json;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::support::{Host, INJECTED, controlled, counting, types};

const S: &str = "s1";

async fn host_in_turn() -> (Host, approval_host::Agent) {
    let host = Host::new();
    let agent = host.service.agent(S, "a1").await.unwrap();
    host.service.start_turn(S).await.unwrap();
    (host, agent)
}

fn decided(host: &Host) -> Vec<serde_json::Value> {
    host.events(S)
        .into_iter()
        .filter(|(t, _)| t == "approval/decided")
        .map(|(_, d)| d)
        .collect()
}

#[tokio::test]
async fn first_decision_wins_and_later_listeners_never_run() {
    let (host, agent) = host_in_turn().await;
    let (first, l1) = counting(Decision::Next);
    let (second, l2) = counting(Decision::AllowOnce);
    let (third, l3) = counting(Decision::Reject);
    let _r1 = host
        .service
        .register("first", Scope::Global, Position::Back, l1);
    let _r2 = host
        .service
        .register("second", Scope::Global, Position::Back, l2);
    let _r3 = host
        .service
        .register("third", Scope::Global, Position::Back, l3);

    let outcome = host
        .service
        .request(ApprovalRequest::new(&agent, "bash").call_id("c1"))
        .await
        .unwrap();

    assert_eq!(outcome, Outcome::AllowedOnce);
    assert_eq!(first.load(Ordering::SeqCst), 1);
    assert_eq!(second.load(Ordering::SeqCst), 1);
    assert_eq!(third.load(Ordering::SeqCst), 0);
    let d = decided(&host);
    assert_eq!(d.len(), 1);
    assert_eq!(d[0]["outcome"], "allowed-once");
    assert_eq!(d[0]["answerer"], "second");
}

#[tokio::test]
async fn everyone_delegating_settles_unavailable() {
    let (host, agent) = host_in_turn().await;
    let (a, la) = counting(Decision::Next);
    let (b, lb) = counting(Decision::Next);
    let _ra = host
        .service
        .register("a", Scope::Global, Position::Back, la);
    let _rb = host
        .service
        .register("b", Scope::Global, Position::Front, lb);
    let outcome = host
        .service
        .request(ApprovalRequest::new(&agent, "bash"))
        .await
        .unwrap();
    assert_eq!(outcome, Outcome::Unavailable);
    assert_eq!((a.load(Ordering::SeqCst), b.load(Ordering::SeqCst)), (1, 1));
    let d = decided(&host);
    assert_eq!(d[0].as_object().unwrap().len(), 2, "{}", d[0]);
    assert_eq!(d[0]["outcome"], "unavailable");
}

#[tokio::test]
async fn no_listener_settles_unavailable_and_is_audited() {
    let (host, agent) = host_in_turn().await;
    let outcome = host
        .service
        .request(
            ApprovalRequest::new(&agent, "bash")
                .call_id("c9")
                .reason("why not"),
        )
        .await
        .unwrap();
    assert_eq!(outcome, Outcome::Unavailable);
    host.service.end_turn(S).await.unwrap();
    let events = host.events(S);
    assert_eq!(
        types(&events),
        [
            "turn/start",
            "approval/asked",
            "approval/decided",
            "turn/end"
        ]
    );
    let id = events[1].1["id"].clone();
    assert_eq!(
        events[1].1,
        json!({"id": id, "toolName": "bash", "callId": "c9", "reason": "why not", "agent": "a1"})
    );
    assert_eq!(events[2].1, json!({"id": id, "outcome": "unavailable"}));
}

#[tokio::test]
async fn asked_omits_absent_call_id_and_reason() {
    let (host, agent) = host_in_turn().await;
    host.service
        .request(ApprovalRequest::new(&agent, "grep"))
        .await
        .unwrap();
    let events = host.events(S);
    let asked = &events[1].1;
    assert_eq!(
        asked,
        &json!({"id": asked["id"], "toolName": "grep", "agent": "a1"})
    );
}

#[tokio::test]
async fn gates_prepended_run_before_earlier_answerers() {
    let (host, agent) = host_in_turn().await;
    let (answerer, la) = counting(Decision::AllowOnce);
    let _ra = host
        .service
        .register("answerer", Scope::Global, Position::Back, la);
    let (_gate, lg) = counting(Decision::Reject);
    let _rg = host
        .service
        .register("gate", Scope::Global, Position::Front, lg);
    assert_eq!(host.service.waterfall().names(), ["gate", "answerer"]);
    let outcome = host
        .service
        .request(ApprovalRequest::new(&agent, "bash"))
        .await
        .unwrap();
    assert_eq!(outcome, Outcome::Rejected);
    assert_eq!(answerer.load(Ordering::SeqCst), 0);
    assert_eq!(decided(&host)[0]["answerer"], "gate");
}

#[tokio::test]
async fn scoped_listener_never_sees_a_foreign_agent_with_the_same_ids() {
    let (host, owner) = host_in_turn().await;
    let foreign = host.service.agent(S, "a1").await.unwrap();
    assert!(!owner.same(&foreign));
    assert!(owner.same(&owner.clone()));
    let (calls, l) = counting(Decision::AllowOnce);
    let _r = host
        .service
        .register("owner-only", Scope::Agent(owner.clone()), Position::Back, l);

    let outcome = host
        .service
        .request(ApprovalRequest::new(&foreign, "bash"))
        .await
        .unwrap();
    assert_eq!(outcome, Outcome::Unavailable);
    assert_eq!(calls.load(Ordering::SeqCst), 0);

    let outcome = host
        .service
        .request(ApprovalRequest::new(&owner.clone(), "bash"))
        .await
        .unwrap();
    assert_eq!(outcome, Outcome::AllowedOnce);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn erroring_listener_settles_unavailable_and_stops_the_waterfall() {
    let (host, agent) = host_in_turn().await;
    let _bad = host.service.register(
        "broken-gate",
        Scope::Global,
        Position::Back,
        |_q: Question| async { Err::<Decision, _>(Failure::error("rules file unreadable")) },
    );
    let (later, l) = counting(Decision::AllowOnce);
    let _ok = host
        .service
        .register("permissive", Scope::Global, Position::Back, l);
    let outcome = host
        .service
        .request(ApprovalRequest::new(&agent, "bash"))
        .await
        .unwrap();
    assert_eq!(outcome, Outcome::Unavailable);
    assert_eq!(later.load(Ordering::SeqCst), 0);
    let d = decided(&host);
    assert_eq!(
        d[0],
        json!({"id": d[0]["id"], "outcome": "unavailable",
               "failure": {"plugin": "broken-gate", "kind": "error"}})
    );
}

#[tokio::test]
async fn panicking_listener_settles_unavailable() {
    let (host, agent) = host_in_turn().await;
    let (later, l) = counting(Decision::AllowOnce);
    {
        let _sync_panic = host.service.register(
            "sync-panic",
            Scope::Global,
            Position::Front,
            |_q: Question| -> std::future::Ready<Result<Decision, Failure>> {
                panic!("listener bug")
            },
        );
        let _l = host
            .service
            .register("permissive", Scope::Global, Position::Back, l);
        let outcome = host
            .service
            .request(ApprovalRequest::new(&agent, "bash"))
            .await
            .unwrap();
        assert_eq!(outcome, Outcome::Unavailable);
    }
    let _async_panic = host.service.register(
        "async-panic",
        Scope::Global,
        Position::Front,
        |_q: Question| async {
            tokio::task::yield_now().await;
            panic!("listener bug after an await")
        },
    );
    let outcome = host
        .service
        .request(ApprovalRequest::new(&agent, "bash"))
        .await
        .unwrap();
    assert_eq!(outcome, Outcome::Unavailable);
    assert_eq!(later.load(Ordering::SeqCst), 0);
    let d = decided(&host);
    assert_eq!(
        d[0]["failure"],
        json!({"plugin": "sync-panic", "kind": "panic"})
    );
    assert_eq!(
        d[1]["failure"],
        json!({"plugin": "async-panic", "kind": "panic"})
    );
    // The service keeps serving.
    drop(_async_panic);
    let (_n, allow) = counting(Decision::AllowOnce);
    let _a = host
        .service
        .register("allow", Scope::Global, Position::Back, allow);
    let outcome = host
        .service
        .request(ApprovalRequest::new(&agent, "bash"))
        .await
        .unwrap();
    assert_eq!(outcome, Outcome::AllowedOnce);
}

#[tokio::test]
async fn answer_outside_the_vocabulary_settles_unavailable() {
    let (host, agent) = host_in_turn().await;
    let _r = host.service.register(
        "stringly",
        Scope::Global,
        Position::Back,
        |_q: Question| async { Decision::from_wire("allow-always") },
    );
    let outcome = host
        .service
        .request(ApprovalRequest::new(&agent, "bash"))
        .await
        .unwrap();
    assert_eq!(outcome, Outcome::Unavailable);
    assert_eq!(
        decided(&host)[0]["failure"],
        json!({"plugin": "stringly", "kind": "invalid-result"})
    );
}

#[tokio::test]
async fn pre_cancelled_request_settles_cancelled_without_asking_even_under_never() {
    let host = Host::with_policy(Policy::Never);
    let agent = host.service.agent(S, "a1").await.unwrap();
    host.service.start_turn(S).await.unwrap();
    let (calls, l) = counting(Decision::AllowOnce);
    let _r = host
        .service
        .register("allow", Scope::Global, Position::Back, l);
    let token = CancellationToken::new();
    token.cancel();
    let outcome = host
        .service
        .request(ApprovalRequest::new(&agent, "bash").cancel(token))
        .await
        .unwrap();
    assert_eq!(outcome, Outcome::Cancelled);
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    assert_eq!(decided(&host)[0]["outcome"], "cancelled");
}

/// A listener that reports when it starts, then answers only after its question is cancelled:
/// the late answer must be discarded.
fn answers_late(
    started: mpsc::UnboundedSender<&'static str>,
    late: Result<Decision, Failure>,
) -> impl approval_host::Listener {
    move |q: Question| {
        let started = started.clone();
        let late = late.clone();
        async move {
            started.send("started").unwrap();
            let _dropped = Notify(started);
            q.cancelled().await;
            // The service has normally dropped this future by now; if not, it must ignore `late`.
            late
        }
    }
}

/// Reports when the listener's future is dropped (its answer discarded).
struct Notify(mpsc::UnboundedSender<&'static str>);

impl Drop for Notify {
    fn drop(&mut self) {
        let _ = self.0.send("dropped");
    }
}

#[tokio::test]
async fn cancellation_during_the_ask_settles_cancelled_and_discards_a_late_answer() {
    for late in [Ok(Decision::AllowOnce), Err(Failure::error("late error"))] {
        let (host, agent) = host_in_turn().await;
        let (started_tx, mut started) = mpsc::unbounded_channel();
        let _r = host.service.register(
            "slow",
            Scope::Global,
            Position::Back,
            answers_late(started_tx, late),
        );
        let token = CancellationToken::new();
        let service = host.service.clone();
        let req = ApprovalRequest::new(&agent, "bash").cancel(token.clone());
        let pending = tokio::spawn(async move { service.request(req).await });
        started.recv().await.unwrap();
        token.cancel();
        assert_eq!(pending.await.unwrap().unwrap(), Outcome::Cancelled);
        host.service.end_turn(S).await.unwrap();
        let d = decided(&host);
        assert_eq!(d.len(), 1, "exactly one decided: {d:?}");
        assert_eq!(d[0], json!({"id": d[0]["id"], "outcome": "cancelled"}));
    }
}

#[tokio::test]
async fn ending_the_turn_cancels_questions_in_flight_inside_the_turn() {
    let (host, agent) = host_in_turn().await;
    let (started_tx, mut started) = mpsc::unbounded_channel();
    let _r = host.service.register(
        "slow",
        Scope::Global,
        Position::Back,
        answers_late(started_tx, Ok(Decision::AllowOnce)),
    );
    let service = host.service.clone();
    let req = ApprovalRequest::new(&agent, "bash");
    let pending = tokio::spawn(async move { service.request(req).await });
    started.recv().await.unwrap();
    host.service.end_turn(S).await.unwrap();
    assert_eq!(pending.await.unwrap().unwrap(), Outcome::Cancelled);
    assert_eq!(
        types(&host.events(S)),
        [
            "turn/start",
            "approval/asked",
            "approval/decided",
            "turn/end"
        ]
    );
}

#[tokio::test]
async fn a_caller_that_stops_waiting_still_leaves_a_paired_audit() {
    let (host, agent) = host_in_turn().await;
    let (started_tx, mut started) = mpsc::unbounded_channel();
    let _r = host.service.register(
        "slow",
        Scope::Global,
        Position::Back,
        answers_late(started_tx, Ok(Decision::AllowOnce)),
    );
    let service = host.service.clone();
    let req = ApprovalRequest::new(&agent, "bash");
    let pending = tokio::spawn(async move { service.request(req).await });
    assert_eq!(started.recv().await, Some("started"));
    pending.abort();
    assert!(pending.await.unwrap_err().is_cancelled());
    // The question is cancelled because its caller left, before anyone ends the turn.
    assert_eq!(started.recv().await, Some("dropped"));
    host.service.end_turn(S).await.unwrap();
    let d = decided(&host);
    assert_eq!(d.len(), 1);
    assert_eq!(d[0]["outcome"], "cancelled");
}

#[tokio::test]
async fn dropping_the_registration_fails_closed() {
    let (host, agent) = host_in_turn().await;
    let (_c, l) = counting(Decision::AllowOnce);
    let reg = host
        .service
        .register("allow", Scope::Global, Position::Back, l);
    let ask = || host.service.request(ApprovalRequest::new(&agent, "bash"));
    assert_eq!(ask().await.unwrap(), Outcome::AllowedOnce);
    drop(reg);
    assert!(host.service.waterfall().names().is_empty());
    assert_eq!(ask().await.unwrap(), Outcome::Unavailable);
}

#[tokio::test]
async fn a_running_decision_finishes_on_the_listener_it_started_with() {
    let (host, agent) = host_in_turn().await;
    let (started_tx, mut started) = mpsc::unbounded_channel();
    let (answer_tx, answer_rx) = oneshot::channel::<Decision>();
    let answer_rx = Arc::new(tokio::sync::Mutex::new(Some(answer_rx)));
    let reg = host.service.register(
        "held",
        Scope::Global,
        Position::Back,
        move |_q: Question| {
            let started = started_tx.clone();
            let rx = answer_rx.clone();
            async move {
                started.send(()).unwrap();
                let rx = rx.lock().await.take().unwrap();
                Ok(rx.await.unwrap())
            }
        },
    );
    let service = host.service.clone();
    let req = ApprovalRequest::new(&agent, "bash");
    let pending = tokio::spawn(async move { service.request(req).await });
    started.recv().await.unwrap();
    drop(reg);
    answer_tx.send(Decision::AllowOnce).unwrap();
    assert_eq!(pending.await.unwrap().unwrap(), Outcome::AllowedOnce);
    assert_eq!(
        host.service
            .request(ApprovalRequest::new(&agent, "bash"))
            .await
            .unwrap(),
        Outcome::Unavailable
    );
}

#[tokio::test]
async fn every_request_gets_a_fresh_uuid() {
    let (host, agent) = host_in_turn().await;
    for _ in 0..3 {
        host.service
            .request(ApprovalRequest::new(&agent, "bash"))
            .await
            .unwrap();
    }
    let ids: Vec<String> = host
        .events(S)
        .into_iter()
        .filter(|(t, _)| t == "approval/asked")
        .map(|(_, d)| d["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids.len(), 3);
    for id in &ids {
        assert_eq!(id.len(), 36, "{id}");
        assert_eq!(id.as_bytes()[14], b'4', "UUID v4: {id}");
    }
    let unique: std::collections::HashSet<_> = ids.iter().collect();
    assert_eq!(unique.len(), 3);
}

#[tokio::test]
async fn idle_request_errors_and_appends_nothing() {
    let host = Host::new();
    let agent = host.service.agent(S, "a1").await.unwrap();
    let (calls, l) = counting(Decision::AllowOnce);
    let _r = host
        .service
        .register("allow", Scope::Global, Position::Back, l);
    let err = host
        .service
        .request(ApprovalRequest::new(&agent, "bash"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, ApprovalError::NoOpenTurn { ref session } if session == S),
        "{err}"
    );
    assert!(host.events(S).is_empty());

    host.service.start_turn(S).await.unwrap();
    host.service.end_turn(S).await.unwrap();
    let err = host
        .service
        .request(ApprovalRequest::new(&agent, "bash"))
        .await
        .unwrap_err();
    assert!(matches!(err, ApprovalError::NoOpenTurn { .. }));
    assert_eq!(types(&host.events(S)), ["turn/start", "turn/end"]);
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn asked_append_failure_propagates_the_same_error_and_decides_nothing() {
    let (dir, service, control) = controlled(Policy::Ask);
    let agent = service.agent(S, "a1").await.unwrap();
    service.start_turn(S).await.unwrap();
    let (calls, l) = counting(Decision::AllowOnce);
    let _r = service.register("allow", Scope::Global, Position::Back, l);
    control.fail_after(0);
    let err = service
        .request(ApprovalRequest::new(&agent, "bash"))
        .await
        .unwrap_err();
    let ApprovalError::Log(log_err @ LogError::Io { .. }) = &err else {
        panic!("expected the journal's I/O error, got {err:?}");
    };
    let io = log_err.io_error().unwrap();
    assert_eq!(io.kind(), std::io::ErrorKind::StorageFull);
    assert_eq!(io.to_string(), INJECTED);
    assert_eq!(calls.load(Ordering::SeqCst), 0, "nothing was decided");
    let events = super::support::events_at(&super::support::log_path(dir.path(), S));
    assert_eq!(types(&events), ["turn/start"]);
}

#[tokio::test]
async fn decided_append_failure_withholds_the_outcome() {
    let (_dir, service, control) = controlled(Policy::Ask);
    let agent = service.agent(S, "a1").await.unwrap();
    service.start_turn(S).await.unwrap();
    let (calls, l) = counting(Decision::AllowOnce);
    let _r = service.register("allow", Scope::Global, Position::Back, l);
    control.fail_after(1);
    let err = service
        .request(ApprovalRequest::new(&agent, "bash"))
        .await
        .unwrap_err();
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert!(err.to_string().contains(INJECTED), "{err}");
    // The log stops accepting events rather than guess what reached the disk.
    let err = service
        .request(ApprovalRequest::new(&agent, "bash"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, ApprovalError::Log(LogError::Poisoned { .. })),
        "{err:?}"
    );
}

#[tokio::test]
async fn many_concurrent_requests_each_leave_one_pair() {
    let host = Host::new();
    let (_c, l) = counting(Decision::AllowOnce);
    let _r = host
        .service
        .register("allow", Scope::Global, Position::Back, l);
    let mut agents = Vec::new();
    for s in 0..4 {
        let session = format!("s{s}");
        agents.push(host.service.agent(&session, "a").await.unwrap());
        host.service.start_turn(&session).await.unwrap();
    }
    let mut tasks = Vec::new();
    for i in 0..200 {
        let service = host.service.clone();
        let agent = agents[i % 4].clone();
        tasks.push(tokio::spawn(async move {
            service
                .request(ApprovalRequest::new(&agent, "bash").call_id(format!("c{i}")))
                .await
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap().unwrap(), Outcome::AllowedOnce);
    }
    let total = AtomicUsize::new(0);
    for s in 0..4 {
        let session = format!("s{s}");
        host.service.end_turn(&session).await.unwrap();
        let bytes = host.store().read(&session).unwrap();
        let checked = approval_host::check::check_bytes(&bytes);
        assert_eq!(checked.problem, None);
        total.fetch_add(checked.summary.questions, Ordering::SeqCst);
    }
    assert_eq!(total.load(Ordering::SeqCst), 200);
}
