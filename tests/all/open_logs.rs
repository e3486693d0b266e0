//! The directory store keeps a bounded number of session files open (`[limits] open_logs`):
//! more sessions than the bound all keep working, each log whole after a restart, and a log
//! another process wrote while its file was closed is refused rather than appended to.

use std::path::Path;

use approval_host::audit::descriptors::CHANGED_WHILE_CLOSED;
use approval_host::audit::verify::{TURN_OPEN, verify_reader};
use approval_host::{
    ApprovalRequest, ApprovalService, Decision, DirStore, Outcome, Policy, Position, Scope,
};

use crate::support::{counting, events_at, log_path, types};

/// This process's descriptors open on files under `dir`.
fn descriptors_under(dir: &Path) -> usize {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|target| target.starts_with(dir))
        .count()
}

const BOUND: usize = 8;
const SESSIONS: usize = 40;
const ROUNDS: usize = 3;

#[tokio::test]
async fn more_sessions_than_the_bound_keep_their_descriptors_bounded_and_every_pair_after_a_restart()
 {
    let dir = tempfile::tempdir().unwrap();
    let sessions = std::fs::canonicalize(dir.path()).unwrap().join("sessions");
    {
        let store = DirStore::with_open_logs(dir.path(), BOUND);
        let service = ApprovalService::new(store.clone(), Policy::Ask);
        let (calls, allow) = counting(Decision::AllowOnce);
        let _r = service.register("allow", Scope::Global, Position::Back, allow);
        let mut agents = Vec::new();
        for i in 0..SESSIONS {
            let session = format!("s{i}");
            agents.push(service.agent(&session, "a").await.unwrap());
            service.start_turn(&session).await.unwrap();
            assert!(
                descriptors_under(&sessions) <= BOUND,
                "{} files open after {} sessions",
                descriptors_under(&sessions),
                i + 1
            );
        }
        // Round after round over every session: each file is closed and reopened between its
        // writes, and concurrent askers share the bound.
        for _ in 0..ROUNDS {
            let asks = agents.iter().map(|agent| {
                let service = service.clone();
                let agent = agent.clone();
                async move { service.request(ApprovalRequest::new(&agent, "bash")).await }
            });
            for outcome in futures_util::future::join_all(asks).await {
                assert_eq!(outcome.unwrap(), Outcome::AllowedOnce);
            }
            assert!(descriptors_under(&sessions) <= BOUND);
            assert!(store.descriptors().open_now() <= BOUND);
        }
        assert_eq!(
            calls.load(std::sync::atomic::Ordering::SeqCst),
            SESSIONS * ROUNDS
        );
        drop(agents);
    }
    // Every descriptor is gone with the service.
    assert_eq!(descriptors_under(&sessions), 0);

    // After the restart, every log holds its turn and each question with its decision, its chain
    // whole.
    for i in 0..SESSIONS {
        let path = log_path(dir.path(), &format!("s{i}"));
        let events = events_at(&path);
        let mut want = vec!["turn/start"];
        for _ in 0..ROUNDS {
            want.extend(["approval/asked", "approval/decided"]);
        }
        let got: Vec<&str> = types(&events)
            .into_iter()
            .filter(|t| want.contains(t))
            .collect();
        assert_eq!(got, want, "s{i}");
        let raw = std::fs::read(&path).unwrap();
        let report = verify_reader(&raw[..], &format!("s{i}")).unwrap();
        assert_eq!(report.problem, None, "s{i}: {report:?}");
        assert!(
            report.warnings.iter().all(|w| w == TURN_OPEN),
            "{:?}",
            report.warnings
        );
    }
    // And the sessions open again, on a store with the default bound, where they left off.
    let service = ApprovalService::new(DirStore::new(dir.path()), Policy::Ask);
    let (_, allow) = counting(Decision::AllowOnce);
    let _r = service.register("allow", Scope::Global, Position::Back, allow);
    let agent = service.agent("s0", "a").await.unwrap();
    assert_eq!(
        service
            .request(ApprovalRequest::new(&agent, "bash"))
            .await
            .unwrap(),
        Outcome::AllowedOnce
    );
}

#[tokio::test]
async fn a_log_written_by_another_process_while_its_file_was_closed_is_refused_not_appended_to() {
    let dir = tempfile::tempdir().unwrap();
    let store = DirStore::with_open_logs(dir.path(), 1);
    let service = ApprovalService::new(store, Policy::Ask);
    let (calls, allow) = counting(Decision::AllowOnce);
    let _r = service.register("allow", Scope::Global, Position::Back, allow);
    let a = service.agent("a", "x").await.unwrap();
    service.start_turn("a").await.unwrap();
    // Opening b takes the one descriptor: a's file is closed, its lock released.
    let b = service.agent("b", "x").await.unwrap();
    service.start_turn("b").await.unwrap();
    let path = log_path(dir.path(), "a");
    let before = std::fs::read(&path).unwrap();
    // Meanwhile another process takes a's file and writes a line.
    {
        let file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        file.try_lock()
            .expect("a's lock was released with its file");
        std::io::Write::write_all(&mut &file, b"{\"written\":\"elsewhere\"}\n").unwrap();
    }
    // a's next question is never answered as allowed: its log refuses it, naming why.
    let err = service
        .request(ApprovalRequest::new(&a, "bash"))
        .await
        .unwrap_err();
    assert!(err.to_string().contains(CHANGED_WHILE_CLOSED), "{err}");
    let after = std::fs::read(&path).unwrap();
    assert_eq!(
        &after[..before.len()],
        &before[..],
        "what a held stays as it was"
    );
    assert!(
        after.ends_with(b"{\"written\":\"elsewhere\"}\n"),
        "nothing of ours after the other write"
    );
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 0);
    // b, whose file nobody touched, still works.
    assert_eq!(
        service
            .request(ApprovalRequest::new(&b, "bash"))
            .await
            .unwrap(),
        Outcome::AllowedOnce
    );
}
