//! How requests reach the disk on the fast path: a question decided in process and its decision
//! are made durable by one sync; the outcome still waits for that sync and is withheld when it
//! fails; a question about to leave the process is durable first; sessions own no thread and
//! their appends still group-commit.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use approval_host::waterfall::ListenerFuture;
use approval_host::{
    ApprovalError, ApprovalRequest, Decision, Failure, Listener, LogError, Outcome, Policy,
    Position, Question, Scope,
};

use crate::support::{INJECTED, counting, events_at, log_path, sync_counting, types};

#[tokio::test]
async fn a_question_decided_in_process_and_its_decision_share_one_sync() {
    let (dir, service, control) = sync_counting(Policy::Ask);
    let (calls, allow) = counting(Decision::AllowOnce);
    let _r = service.register("allow", Scope::Global, Position::Back, allow);
    let agent = service.agent("s", "a").await.unwrap();
    service.start_turn("s").await.unwrap();
    for i in 1..=3 {
        let before = control.syncs.load(Ordering::SeqCst);
        let outcome = service
            .request(ApprovalRequest::new(&agent, "bash"))
            .await
            .unwrap();
        assert_eq!(outcome, Outcome::AllowedOnce);
        assert_eq!(
            control.syncs.load(Ordering::SeqCst) - before,
            1,
            "request {i} took more than one sync"
        );
    }
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    service.end_turn("s").await.unwrap();
    let events = events_at(&log_path(dir.path(), "s"));
    assert_eq!(
        types(&events),
        [
            "turn/start",
            "approval/asked",
            "approval/decided",
            "approval/asked",
            "approval/decided",
            "approval/asked",
            "approval/decided",
            "turn/end"
        ]
    );
}

#[tokio::test]
async fn a_failed_sync_withholds_the_outcome_of_a_one_sync_request() {
    let (_dir, service, control) = sync_counting(Policy::Ask);
    let (calls, allow) = counting(Decision::AllowOnce);
    let _r = service.register("allow", Scope::Global, Position::Back, allow);
    let agent = service.agent("s", "a").await.unwrap();
    service.start_turn("s").await.unwrap();
    control.fail_syncs.store(true, Ordering::SeqCst);
    let err = service
        .request(ApprovalRequest::new(&agent, "bash"))
        .await
        .unwrap_err();
    // The gate decided (the question was written before it was asked), but the decision never
    // became durable, so no outcome came back.
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    let ApprovalError::Log(log_err @ LogError::Io { .. }) = &err else {
        panic!("expected the sync's I/O error, got {err:?}");
    };
    assert_eq!(log_err.io_error().unwrap().to_string(), INJECTED);
    control.fail_syncs.store(false, Ordering::SeqCst);
    let err = service
        .request(ApprovalRequest::new(&agent, "bash"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, ApprovalError::Log(LogError::Poisoned { .. })),
        "{err:?}"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

/// An answerer that leaves the process (like a `serve` client or an ACP editor), recording what
/// the disk held when it was asked.
struct Outside {
    syncs_seen: Arc<AtomicUsize>,
    log: std::path::PathBuf,
    asked_on_disk: Arc<AtomicUsize>,
    control: Arc<crate::support::SyncControl>,
}

impl Listener for Outside {
    fn decide(&self, _question: Question) -> ListenerFuture {
        self.syncs_seen
            .store(self.control.syncs.load(Ordering::SeqCst), Ordering::SeqCst);
        let on_disk = types(&events_at(&self.log))
            .iter()
            .filter(|t| **t == "approval/asked")
            .count();
        self.asked_on_disk.store(on_disk, Ordering::SeqCst);
        Box::pin(async { Ok::<_, Failure>(Decision::Reject) })
    }

    fn leaves_process(&self) -> bool {
        true
    }
}

#[tokio::test]
async fn a_question_is_durable_before_it_reaches_an_answerer_outside_the_process() {
    let (dir, service, control) = sync_counting(Policy::Ask);
    let (gate_calls, next) = counting(Decision::Next);
    let _gate = service.register("gate", Scope::Global, Position::Front, next);
    let syncs_seen = Arc::new(AtomicUsize::new(usize::MAX));
    let asked_on_disk = Arc::new(AtomicUsize::new(0));
    let _outside = service.register(
        "editor",
        Scope::Global,
        Position::Back,
        Outside {
            syncs_seen: syncs_seen.clone(),
            log: log_path(dir.path(), "s"),
            asked_on_disk: asked_on_disk.clone(),
            control: control.clone(),
        },
    );
    let agent = service.agent("s", "a").await.unwrap();
    service.start_turn("s").await.unwrap();
    let before = control.syncs.load(Ordering::SeqCst);
    let outcome = service
        .request(ApprovalRequest::new(&agent, "bash"))
        .await
        .unwrap();
    assert_eq!(outcome, Outcome::Rejected);
    assert_eq!(gate_calls.load(Ordering::SeqCst), 1);
    // Synced once before the question left (the in-process gate before it did not need that),
    // once more for the decision.
    assert_eq!(syncs_seen.load(Ordering::SeqCst), before + 1);
    assert_eq!(asked_on_disk.load(Ordering::SeqCst), 1);
    assert_eq!(control.syncs.load(Ordering::SeqCst), before + 2);
}

#[tokio::test]
async fn a_session_without_a_thread_still_group_commits() {
    let (_dir, service, control) = sync_counting(Policy::Ask);
    let (calls, allow) = counting(Decision::AllowOnce);
    let _r = service.register("allow", Scope::Global, Position::Back, allow);
    let agent = service.agent("s", "a").await.unwrap();
    service.start_turn("s").await.unwrap();
    let base = control.syncs.load(Ordering::SeqCst);

    // The first request's sync is held on the disk...
    control.hold();
    let first = tokio::spawn({
        let (service, agent) = (service.clone(), agent.clone());
        async move { service.request(ApprovalRequest::new(&agent, "bash")).await }
    });
    let waiter = control.clone();
    tokio::task::spawn_blocking(move || waiter.wait_entered())
        .await
        .unwrap();
    // ... while 32 more are decided and queue behind it (this test runs on one thread, so a
    // counted call has also queued its decision).
    let mut rest = Vec::new();
    for _ in 0..32 {
        let (service, agent) = (service.clone(), agent.clone());
        rest.push(tokio::spawn(async move {
            service.request(ApprovalRequest::new(&agent, "bash")).await
        }));
    }
    while calls.load(Ordering::SeqCst) < 33 {
        tokio::task::yield_now().await;
    }
    control.release();
    assert_eq!(first.await.unwrap().unwrap(), Outcome::AllowedOnce);
    for t in rest {
        assert_eq!(t.await.unwrap().unwrap(), Outcome::AllowedOnce);
    }
    // One sync for the first request, one for the 32 behind it.
    assert_eq!(control.syncs.load(Ordering::SeqCst) - base, 2);
}

/// Threads of this process that write session logs (named `log-...`).
fn log_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|name| name.starts_with("log-"))
        .count()
}

#[tokio::test]
async fn open_sessions_cost_no_thread() {
    let (_dir, service, _control) = sync_counting(Policy::Ask);
    let (_, allow) = counting(Decision::AllowOnce);
    let _r = service.register("allow", Scope::Global, Position::Back, allow);
    let mut agents = Vec::new();
    for i in 0..300 {
        let session = format!("s{i}");
        let agent = service.agent(&session, "a").await.unwrap();
        service.start_turn(&session).await.unwrap();
        service
            .request(ApprovalRequest::new(&agent, "bash"))
            .await
            .unwrap();
        agents.push(agent);
    }
    // 300 open sessions (and whatever the tests beside this one have open) share the few commit
    // threads; a writer per session would be 300 threads here.
    let writers = log_threads();
    assert!(
        (1..=approval_host::store::MAX_COMMIT_THREADS).contains(&writers),
        "{writers} log threads for 300 open sessions"
    );
}
