//! Subscriptions to a session's appended events: each event once it is durable, in order, only
//! for the sessions asked for; a subscriber that errors or panics is reported once, dropped, and
//! never touches the asked/decided pair or the request's outcome.

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};

use approval_host::event::Record;
use approval_host::{ApprovalRequest, Decision, Outcome, Policy, Position, Scope};
use tokio::sync::mpsc;

use crate::support::{Host, controlled, counting, log_path, types};

/// Every warning the library logs, for the tests that check a failure is reported once. Installed
/// once for the whole test binary (delivery runs on whichever thread commits, so a thread-local
/// subscriber would miss it).
fn warnings() -> &'static Mutex<Vec<u8>> {
    static LOG: OnceLock<&'static Mutex<Vec<u8>>> = OnceLock::new();
    LOG.get_or_init(|| {
        let buffer: &'static Mutex<Vec<u8>> = Box::leak(Box::new(Mutex::new(Vec::new())));
        struct Into(&'static Mutex<Vec<u8>>);
        impl Write for Into {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter("approval_host=warn")
            .with_ansi(false)
            .with_writer(move || Into(buffer))
            .finish();
        // Another test module may have installed one first; then nothing is captured and the
        // assertions below say so.
        let _ = tracing::subscriber::set_global_default(subscriber);
        buffer
    })
}

fn warning_lines(containing: &str) -> Vec<String> {
    let text = String::from_utf8_lossy(&warnings().lock().unwrap()).into_owned();
    text.lines()
        .filter(|l| l.contains(containing))
        .map(str::to_owned)
        .collect()
}

/// What a test subscriber passes on: session, seq, event type.
type Seen = (String, u64, String);

fn channel_subscriber() -> (
    impl approval_host::Subscriber,
    mpsc::UnboundedReceiver<Seen>,
) {
    let (tx, rx) = mpsc::unbounded_channel();
    let f = move |session: &str, record: &Record| {
        tx.send((
            session.to_owned(),
            record.seq,
            record.event.kind().to_owned(),
        ))
        .map_err(|_| "receiver gone".to_owned())
    };
    (f, rx)
}

fn drain(rx: &mut mpsc::UnboundedReceiver<Seen>) -> Vec<Seen> {
    let mut out = Vec::new();
    while let Ok(x) = rx.try_recv() {
        out.push(x);
    }
    out
}

/// The next `n` deliveries (delivery may trail the append's return by a moment; a bound keeps a
/// missing one from hanging the test).
async fn next(rx: &mut mpsc::UnboundedReceiver<Seen>, n: usize) -> Vec<Seen> {
    let mut out = Vec::new();
    for _ in 0..n {
        let got = tokio::time::timeout(std::time::Duration::from_secs(10), rx.recv())
            .await
            .expect("a durable event was not delivered")
            .expect("the subscription ended");
        out.push(got);
    }
    out
}

#[tokio::test]
async fn a_subscriber_sees_each_durable_event_of_its_session_in_order() {
    let host = Host::new();
    let path = log_path(host.dir.path(), "s1");
    // Reading the file inside the callback proves each record is on disk before delivery.
    let seen_on_disk = Arc::new(Mutex::new(Vec::new()));
    let on_disk = seen_on_disk.clone();
    let p = path.clone();
    let _durable = host
        .service
        .subscribe("s1", "disk-check", move |_s: &str, r: &Record| {
            let lines = std::fs::read_to_string(&p).unwrap().lines().count() as u64;
            on_disk.lock().unwrap().push(lines >= r.seq);
            Ok(())
        });
    let (f, mut one) = channel_subscriber();
    let _one = host.service.subscribe("s1", "one", f);
    let (f, mut all) = channel_subscriber();
    let _all = host.service.subscribe_all("all", f);

    let (_, allow) = counting(Decision::AllowOnce);
    let _r = host
        .service
        .register("allow", Scope::Global, Position::Back, allow);
    let agent = host.service.agent("s1", "a").await.unwrap();
    let other = host.service.agent("s2", "b").await.unwrap();
    host.service.start_turn("s1").await.unwrap();
    host.service.start_turn("s2").await.unwrap();
    let outcome = host
        .service
        .request(ApprovalRequest::new(&agent, "bash"))
        .await
        .unwrap();
    assert_eq!(outcome, Outcome::AllowedOnce);
    host.service
        .request(ApprovalRequest::new(&other, "read"))
        .await
        .unwrap();
    host.service.end_turn("s1").await.unwrap();

    let s1 = |seq: u64, kind: &str| ("s1".to_owned(), seq, kind.to_owned());
    let expected = vec![
        s1(1, "turn/start"),
        s1(2, "approval/asked"),
        s1(3, "approval/decided"),
        s1(4, "turn/end"),
    ];
    assert_eq!(next(&mut one, 4).await, expected);
    let mut everything = next(&mut all, 7).await;
    let mine: Vec<_> = everything
        .iter()
        .filter(|(s, _, _)| s == "s1")
        .cloned()
        .collect();
    assert_eq!(mine, expected);
    everything.retain(|(s, _, _)| s == "s2");
    assert_eq!(
        everything,
        [
            ("s2".to_owned(), 1, "turn/start".to_owned()),
            ("s2".to_owned(), 2, "approval/asked".to_owned()),
            ("s2".to_owned(), 3, "approval/decided".to_owned()),
        ]
    );
    assert_eq!(*seen_on_disk.lock().unwrap(), [true; 4]);

    // Dropping the subscription ends it.
    drop(_one);
    host.service.start_turn("s1").await.unwrap();
    assert!(drain(&mut one).is_empty());
}

#[tokio::test]
async fn an_event_whose_write_failed_is_never_delivered() {
    let (_dir, service, control) = controlled(Policy::Ask);
    let (f, mut rx) = channel_subscriber();
    let _sub = service.subscribe("s1", "watcher", f);
    let _agent = service.agent("s1", "a").await.unwrap();
    service.start_turn("s1").await.unwrap();
    control.fail_after(0);
    service.end_turn("s1").await.unwrap_err();
    assert_eq!(
        next(&mut rx, 1).await,
        [("s1".to_owned(), 1, "turn/start".to_owned())]
    );
    assert!(drain(&mut rx).is_empty());
}

#[tokio::test]
async fn a_failing_or_panicking_subscriber_is_reported_once_and_never_breaks_a_request() {
    warnings();
    let host = Host::new();
    let _errs = host
        .service
        .subscribe("s1", "sub-that-errors-7f3a", |_s: &str, _r: &Record| {
            Err("the console went away".to_owned())
        });
    let _panics = host.service.subscribe(
        "s1",
        "sub-that-panics-7f3a",
        |_s: &str, r: &Record| -> Result<(), String> {
            if r.seq >= 2 {
                panic!("subscriber bug");
            }
            Ok(())
        },
    );
    let (f, mut healthy) = channel_subscriber();
    let _healthy = host.service.subscribe("s1", "healthy", f);
    let (_, allow) = counting(Decision::AllowOnce);
    let _r = host
        .service
        .register("allow", Scope::Global, Position::Back, allow);
    let agent = host.service.agent("s1", "a").await.unwrap();
    host.service.start_turn("s1").await.unwrap();
    for _ in 0..3 {
        let outcome = host
            .service
            .request(ApprovalRequest::new(&agent, "bash"))
            .await
            .unwrap();
        assert_eq!(outcome, Outcome::AllowedOnce);
    }
    host.service.end_turn("s1").await.unwrap();
    assert_eq!(
        types(&host.events("s1")),
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
    // The healthy subscriber beside them saw everything.
    assert_eq!(next(&mut healthy, 8).await.len(), 8);

    let errs = warning_lines("sub-that-errors-7f3a");
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert!(errs[0].contains("WARN"), "{}", errs[0]);
    assert!(errs[0].contains("the console went away"), "{}", errs[0]);
    assert!(errs[0].contains("seq=1"), "{}", errs[0]);
    let panics = warning_lines("sub-that-panics-7f3a");
    assert_eq!(panics.len(), 1, "{panics:?}");
    assert!(
        panics[0].contains("panicked: subscriber bug"),
        "{}",
        panics[0]
    );
    assert!(panics[0].contains("seq=2"), "{}", panics[0]);
}
