//! A journal whose sync finishes elsewhere (a database client's runtime: the PostgreSQL store) is
//! committed from the asking task with no commit thread between: the append waits for the
//! journal's report, a failed report stops the log, appends made meanwhile share the next sync,
//! and subscribers have the records before the append returns.

use std::io;
use std::sync::{Arc, Mutex};

use approval_host::event::Event;
use approval_host::log::SessionLog;
use approval_host::store::{NO_DETACHED_SYNC, NO_REPORT};
use approval_host::{
    ApprovalRequest, ApprovalService, CommitMode, Decision, DetachedSync, Journal, LogError,
    OpenedLog, Outcome, Policy, Position, Scope, Store, SyncDone,
};
use tokio::sync::mpsc;

use crate::support::{INJECTED, counting};

/// A sync handed over: the lines it holds, the thread that wrote them, and where to report.
struct Handoff {
    lines: Vec<String>,
    written_on: Option<String>,
    done: SyncDone,
}

/// An in-memory journal that syncs detached: each sync goes to the test as a [`Handoff`].
struct HandingJournal {
    written: Vec<u8>,
    written_on: Option<String>,
    handoffs: mpsc::UnboundedSender<Handoff>,
    /// Says it syncs detached but keeps the trait's default `detach_sync`.
    without_a_way: bool,
}

struct Taken {
    lines: Vec<String>,
    written_on: Option<String>,
    handoffs: mpsc::UnboundedSender<Handoff>,
}

impl DetachedSync for Taken {
    fn start(self: Box<Self>, done: SyncDone) {
        let _ = self.handoffs.send(Handoff {
            lines: self.lines,
            written_on: self.written_on,
            done,
        });
    }
}

impl Journal for HandingJournal {
    fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.write(bytes)
    }

    fn commit_mode(&self) -> CommitMode {
        CommitMode::Split
    }

    fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.written.extend_from_slice(bytes);
        self.written_on = std::thread::current().name().map(str::to_owned);
        Ok(())
    }

    fn syncs_detached(&self) -> bool {
        true
    }

    fn detach_sync(&mut self) -> Box<dyn DetachedSync> {
        if self.without_a_way {
            struct Default;
            impl Journal for Default {
                fn append(&mut self, _: &[u8]) -> io::Result<()> {
                    Ok(())
                }
            }
            return Default.detach_sync();
        }
        let text = String::from_utf8(std::mem::take(&mut self.written)).unwrap();
        Box::new(Taken {
            lines: text.lines().map(str::to_owned).collect(),
            written_on: self.written_on.take(),
            handoffs: self.handoffs.clone(),
        })
    }
}

struct HandingStore {
    handoffs: mpsc::UnboundedSender<Handoff>,
    without_a_way: bool,
}

impl Store for HandingStore {
    fn open(&self, session: &str) -> Result<OpenedLog, LogError> {
        Ok(OpenedLog {
            name: format!("memory:{session}"),
            records: Vec::new(),
            tail: None,
            journal: Box::new(HandingJournal {
                written: Vec::new(),
                written_on: None,
                handoffs: self.handoffs.clone(),
                without_a_way: self.without_a_way,
            }),
            taken_over: None,
        })
    }
}

fn handing(without_a_way: bool) -> (HandingStore, mpsc::UnboundedReceiver<Handoff>) {
    let (handoffs, taken) = mpsc::unbounded_channel();
    (
        HandingStore {
            handoffs,
            without_a_way,
        },
        taken,
    )
}

fn types(lines: &[String]) -> Vec<String> {
    lines
        .iter()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            v["type"].as_str().unwrap().to_owned()
        })
        .collect()
}

#[tokio::test]
async fn a_detached_commit_starts_on_the_asking_task_and_its_report_ends_the_append() {
    let (store, mut taken) = handing(false);
    let log = SessionLog::open(&store, "s").unwrap();
    let mut append = Box::pin(log.append(Event::TurnStart));
    // The first poll writes and hands the sync over, on this thread, and then waits.
    assert!(futures_util::poll!(&mut append).is_pending());
    let handoff = taken.try_recv().expect("the sync was handed over at once");
    assert_eq!(types(&handoff.lines), ["turn/start"]);
    assert_eq!(
        handoff.written_on.as_deref(),
        std::thread::current().name(),
        "written on the asking thread, not a commit thread"
    );
    assert!(futures_util::poll!(&mut append).is_pending());
    (handoff.done)(Ok(()));
    let record = append.await.unwrap();
    assert_eq!(record.seq, 1);
    assert_eq!(log.durable_point().0, 1);
}

#[tokio::test]
async fn a_detached_sync_that_fails_withholds_the_append_and_stops_the_log() {
    let (store, mut taken) = handing(false);
    let log = SessionLog::open(&store, "s").unwrap();
    let mut append = Box::pin(log.append(Event::TurnStart));
    assert!(futures_util::poll!(&mut append).is_pending());
    let handoff = taken.try_recv().unwrap();
    (handoff.done)(Err(io::Error::other(INJECTED)));
    let err = append.await.unwrap_err();
    assert!(matches!(err, LogError::Io { .. }), "{err:?}");
    assert_eq!(err.io_error().unwrap().to_string(), INJECTED);
    let err = log.append(Event::TurnEnd).await.unwrap_err();
    assert!(matches!(err, LogError::Poisoned { .. }), "{err:?}");
    assert!(taken.try_recv().is_err(), "nothing more was handed over");
}

#[tokio::test]
async fn appends_made_while_a_detached_sync_runs_share_the_next_one() {
    let (store, mut taken) = handing(false);
    let log = SessionLog::open(&store, "s").unwrap();
    let mut first = Box::pin(log.append(Event::TurnStart));
    assert!(futures_util::poll!(&mut first).is_pending());
    let handoff = taken.try_recv().unwrap();
    // Turns end and start again, as the session's rules allow.
    let mut rest: Vec<_> = (0..5)
        .map(|i| {
            Box::pin(log.append(if i % 2 == 0 {
                Event::TurnEnd
            } else {
                Event::TurnStart
            }))
        })
        .collect();
    for append in &mut rest {
        assert!(futures_util::poll!(append).is_pending());
    }
    assert!(
        taken.try_recv().is_err(),
        "one sync at a time: the five wait for the running one"
    );
    // The report of the first starts the next round at once, from the reporting thread.
    (handoff.done)(Ok(()));
    assert_eq!(first.await.unwrap().seq, 1);
    let next = taken
        .try_recv()
        .expect("the next round was started by the report");
    assert_eq!(next.lines.len(), 5);
    for append in &mut rest {
        assert!(futures_util::poll!(append).is_pending());
    }
    (next.done)(Ok(()));
    for (i, append) in rest.into_iter().enumerate() {
        assert_eq!(append.await.unwrap().seq, i as u64 + 2);
    }
    assert!(taken.try_recv().is_err(), "two syncs for six appends");
}

#[tokio::test]
async fn a_request_on_a_detached_journal_costs_one_sync_and_subscribers_have_it_first() {
    let (store, mut taken) = handing(false);
    // The database: reports every sync it is handed, from its own thread, having noted it.
    let synced = Arc::new(Mutex::new(Vec::new()));
    std::thread::spawn({
        let synced = synced.clone();
        move || {
            while let Some(handoff) = taken.blocking_recv() {
                synced.lock().unwrap().push(types(&handoff.lines));
                (handoff.done)(Ok(()));
            }
        }
    });
    let service = ApprovalService::new(store, Policy::Ask);
    let (calls, allow) = counting(Decision::AllowOnce);
    let _r = service.register("allow", Scope::Global, Position::Back, allow);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let _s = service.subscribe("s", "watch", {
        let seen = seen.clone();
        move |_: &str, record: &approval_host::event::Record| {
            seen.lock().unwrap().push(record.event.kind());
            Ok(())
        }
    });
    let agent = service.agent("s", "a").await.unwrap();
    service.start_turn("s").await.unwrap();
    for i in 1..=3 {
        let outcome = service
            .request(ApprovalRequest::new(&agent, "bash"))
            .await
            .unwrap();
        assert_eq!(outcome, Outcome::AllowedOnce);
        let seen = seen.lock().unwrap();
        assert_eq!(
            seen[seen.len() - 2..],
            ["approval/asked", "approval/decided"],
            "request {i}: delivered before its outcome came back"
        );
    }
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 3);
    let synced = synced.lock().unwrap();
    let pairs = synced
        .iter()
        .filter(|sync| *sync == &["approval/asked", "approval/decided"])
        .count();
    assert_eq!(
        pairs, 3,
        "each question and its decision in one sync: {synced:?}"
    );
}

#[tokio::test]
async fn a_journal_that_says_it_syncs_detached_without_a_way_to_stops_the_log() {
    let (store, _taken) = handing(true);
    let log = SessionLog::open(&store, "s").unwrap();
    let err = log.append(Event::TurnStart).await.unwrap_err();
    assert_eq!(err.io_error().unwrap().to_string(), NO_DETACHED_SYNC);
    let err = log.append(Event::TurnEnd).await.unwrap_err();
    assert!(matches!(err, LogError::Poisoned { .. }), "{err:?}");
}

#[tokio::test]
async fn a_sync_the_journal_drops_unreported_stops_the_log_instead_of_hanging() {
    let (store, mut taken) = handing(false);
    let log = SessionLog::open(&store, "s").unwrap();
    let mut append = Box::pin(log.append(Event::TurnStart));
    assert!(futures_util::poll!(&mut append).is_pending());
    drop(taken.try_recv().unwrap());
    let err = append.await.unwrap_err();
    assert_eq!(err.io_error().unwrap().to_string(), NO_REPORT);
    let err = log.append(Event::TurnEnd).await.unwrap_err();
    assert!(matches!(err, LogError::Poisoned { .. }), "{err:?}");
}

#[tokio::test]
async fn a_request_dropped_mid_question_still_reaches_the_subscribers_with_its_cancellation() {
    let (store, mut taken) = handing(false);
    std::thread::spawn(move || {
        while let Some(handoff) = taken.blocking_recv() {
            (handoff.done)(Ok(()));
        }
    });
    let service = ApprovalService::new(store, Policy::Ask);
    // A gate that never answers, and says when it was asked.
    let (asked, mut was_asked) = mpsc::unbounded_channel();
    let _r = service.register(
        "never",
        Scope::Global,
        Position::Back,
        move |_q: approval_host::Question| {
            let _ = asked.send(());
            std::future::pending::<Result<Decision, approval_host::Failure>>()
        },
    );
    let (seen, mut delivered) = mpsc::unbounded_channel();
    let _s = service.subscribe(
        "s",
        "watch",
        move |_: &str, record: &approval_host::event::Record| {
            if let Event::Decided(decided) = &record.event {
                let _ = seen.send(decided.outcome);
            }
            Ok(())
        },
    );
    let agent = service.agent("s", "a").await.unwrap();
    service.start_turn("s").await.unwrap();
    let request = tokio::spawn({
        let (service, agent) = (service.clone(), agent.clone());
        async move { service.request(ApprovalRequest::new(&agent, "bash")).await }
    });
    was_asked.recv().await.unwrap();
    request.abort();
    assert!(request.await.unwrap_err().is_cancelled());
    // Nobody waits for the cancellation's commit; its record is delivered all the same.
    let cancelled = tokio::time::timeout(std::time::Duration::from_secs(30), async {
        delivered.recv().await
    })
    .await
    .expect("the cancellation reached the subscriber");
    assert_eq!(cancelled, Some(Outcome::Cancelled));
}
