//! A session's fold kept beside its log: a long session reopens from it and reads only the
//! records after it, folding to exactly what reading the whole log gives; a kept fold that does
//! not fit its log (changed, forged, foreign, stale, not a file) is never used, and never makes an
//! open fail; what `[audit] redact` keeps out of the log stays out of the kept fold.

use approval_host::audit::kept::{self, FoldKey, KeySource};
use approval_host::audit::redact::Redaction;
use approval_host::event::{Event, PolicySwitch, RuleAdded};
use approval_host::fold::{SessionFold, Violation};
use approval_host::log::SessionLog;
use approval_host::{ApprovalService, DirStore, LogError, Policy, Store};
use serde_json::json;

use crate::session_log::{asked, bash_call as call, decided};

const SESSION: &str = "long-1";

fn key(byte: u8) -> FoldKey {
    FoldKey::from_bytes([byte; 32])
}

/// A store over `dir` keeping folds sealed with `key`.
fn keeping(dir: &std::path::Path, key: FoldKey) -> DirStore {
    DirStore::new(dir).keeping_folds(KeySource::fixed(key))
}

fn rule(id: &str) -> Event {
    Event::RuleAdded(serde_json::from_value::<RuleAdded>(json!({"id": id, "tool": "Read", "effect": "allow", "scope": "session", "creator": "user:cli"})).unwrap())
}

/// Appends `turns` turns of five records each (a call, its question, its decision), after a
/// policy switch and a rule, leaving one question open in a last turn.
async fn grow(log: &SessionLog, from: usize, turns: usize) {
    if from == 0 {
        log.append(Event::Policy(PolicySwitch {
            policy: Policy::Never,
            source: Some("user".to_owned()),
        }))
        .await
        .unwrap();
        log.append(rule("r1")).await.unwrap();
    }
    for t in from..from + turns {
        log.append(Event::TurnStart).await.unwrap();
        log.append(call(
            &format!("c{t}"),
            json!({"command": format!("echo {t}")}),
        ))
        .await
        .unwrap();
        log.append(asked(&format!("q{t}"), "Bash")).await.unwrap();
        log.append(decided(&format!("q{t}"))).await.unwrap();
        log.append(Event::TurnEnd).await.unwrap();
    }
}

/// The fold of `session` read whole: every record of its file, folded from the first.
fn whole(dir: &std::path::Path, session: &str) -> SessionFold {
    let bytes = DirStore::new(dir).read(session).unwrap();
    let mut fold = SessionFold::new();
    for record in approval_host::store::parse_lines(session, &bytes).unwrap() {
        fold.push(record.seq, &record.event).unwrap();
    }
    fold
}

/// Where an open of `session` through `store` starts: the records its kept fold covers, if used.
fn resumes_at(store: &dyn Store, session: &str) -> Option<u64> {
    let (_, resumed) = store.open_resuming(session).unwrap();
    resumed.map(|r| r.records)
}

#[tokio::test]
async fn a_long_session_reopens_from_its_kept_fold_and_folds_as_reading_it_whole_does() {
    let dir = tempfile::tempdir().unwrap();
    let store = keeping(dir.path(), key(1));
    let fold_path = store.kept_fold_path(SESSION);

    // Under the bound nothing is kept: a short session is read whole.
    let log = SessionLog::open(&store, SESSION).unwrap();
    grow(&log, 0, 10).await;
    drop(log);
    assert!(
        !fold_path.exists(),
        "52 records: below {}",
        kept::KEEP_AFTER
    );

    let log = SessionLog::open(&store, SESSION).unwrap();
    grow(&log, 10, 10).await;
    log.append(Event::TurnStart).await.unwrap();
    log.append(asked("open-q", "Write")).await.unwrap();
    drop(log);
    assert!(fold_path.is_file());
    assert_eq!(resumes_at(&store, SESSION), Some(104));
    let (opened, _) = store.open_resuming(SESSION).unwrap();
    assert!(opened.records.is_empty(), "nothing after the kept fold");
    drop(opened);

    let resumed = SessionLog::open(&store, SESSION).unwrap();
    assert_eq!(resumed.len(), 104);
    assert_eq!(
        resumed.with_fold(SessionFold::clone),
        whole(dir.path(), SESSION)
    );
    resumed.with_fold(|f| {
        assert_eq!(f.effective_policy(Policy::Ask), Policy::Never);
        assert_eq!(f.rules().map(|r| r.id.as_str()).collect::<Vec<_>>(), ["r1"]);
        assert_eq!(f.call_arguments("c3"), Some(json!({"command": "echo 3"})));
        assert_eq!(f.open_questions().len(), 1);
        assert!(f.turn_open());
    });
    // The rules still hold on it: the open question is decided once, never asked again.
    assert_eq!(
        crate::session_log::refused(resumed.append(asked("q4", "Bash")).await.unwrap_err()),
        Violation::RepeatedId("q4".to_owned())
    );
    resumed.append(decided("open-q")).await.unwrap();
    resumed.append(Event::TurnEnd).await.unwrap();
    drop(resumed);

    // A few records more do not rewrite the kept fold: the next open reads them after it.
    assert_eq!(resumes_at(&store, SESSION), Some(104));
    let log = SessionLog::open(&store, SESSION).unwrap();
    assert_eq!(log.len(), 106);
    assert_eq!(
        log.with_fold(SessionFold::clone),
        whole(dir.path(), SESSION)
    );
    grow(&log, 20, 13).await;
    drop(log);
    assert_eq!(
        resumes_at(&store, SESSION),
        Some(171),
        "kept again past the bound"
    );
    assert_eq!(
        SessionLog::open(&store, SESSION)
            .unwrap()
            .with_fold(SessionFold::clone),
        whole(dir.path(), SESSION)
    );

    // The log itself is as a store without kept folds writes it: every seq in order, chained.
    let text = std::fs::read_to_string(store.session_path(SESSION)).unwrap();
    let report =
        approval_host::audit::verify::verify_reader_with(text.as_bytes(), SESSION, None).unwrap();
    assert!(report.problem.is_none(), "{:?}", report.problem);
    assert_eq!(text.lines().count(), 171);
}

/// Each way a kept fold can fail to fit: `spoil` changes the state directory after a long
/// session was kept; the next open must read the whole log and fold exactly as that does.
#[tokio::test]
async fn a_kept_fold_that_does_not_fit_its_log_is_never_used() {
    type Spoil = fn(&DirStore, &std::path::Path);
    let cases: &[(&str, Spoil)] = &[
        ("a byte of the fold changed", |s, _| {
            let p = s.kept_fold_path(SESSION);
            let mut b = std::fs::read(&p).unwrap();
            let i = b.len() / 2;
            b[i] ^= 1;
            std::fs::write(&p, b).unwrap();
        }),
        ("the fold cut short", |s, _| {
            let p = s.kept_fold_path(SESSION);
            let b = std::fs::read(&p).unwrap();
            std::fs::write(&p, &b[..b.len() - 1]).unwrap();
        }),
        ("an empty fold", |s, _| {
            std::fs::write(s.kept_fold_path(SESSION), b"").unwrap()
        }),
        (
            "a fold widening the session, sealed with another key",
            |s, _| {
                let mut fold = SessionFold::new();
                fold.push(
                    1,
                    &Event::Policy(PolicySwitch {
                        policy: Policy::Ask,
                        source: None,
                    }),
                )
                .unwrap();
                let log = std::fs::read(s.session_path(SESSION)).unwrap();
                let last = log[..log.len() - 1]
                    .iter()
                    .rposition(|&b| b == b'\n')
                    .unwrap()
                    + 1;
                let mark = kept::Mark {
                    records: log.iter().filter(|&&b| b == b'\n').count() as u64,
                    bytes: log.len() as u64,
                    last_line: (log.len() - last) as u64,
                    head: approval_host::audit::chain::line_hash(&log[last..]),
                };
                std::fs::write(
                    s.kept_fold_path(SESSION),
                    kept::seal(&key(2), SESSION, &mark, &fold),
                )
                .unwrap();
            },
        ),
        (
            "another session's fold under this session's name",
            |s, _| {
                std::fs::copy(s.kept_fold_path("other"), s.kept_fold_path(SESSION)).unwrap();
            },
        ),
        ("the log cut back to fewer records", |s, _| {
            let p = s.session_path(SESSION);
            let log = std::fs::read(&p).unwrap();
            let keep: usize = log
                .split_inclusive(|&b| b == b'\n')
                .take(60)
                .map(<[u8]>::len)
                .sum();
            std::fs::write(&p, &log[..keep]).unwrap();
        }),
        ("the log's last kept line rewritten, same length", |s, _| {
            let p = s.session_path(SESSION);
            let mut log = std::fs::read(&p).unwrap();
            let at = log.len() - 20;
            log[at] = if log[at] == b'0' { b'1' } else { b'0' };
            std::fs::write(&p, log).unwrap();
        }),
        ("the fold grown larger than any fold of its log", |s, _| {
            let log = std::fs::metadata(s.session_path(SESSION)).unwrap().len();
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(s.kept_fold_path(SESSION))
                .unwrap();
            f.set_len(log + kept::MOST_OVER_LOG + 1).unwrap();
        }),
        ("the fold replaced by a pipe", |s, _| {
            let p = s.kept_fold_path(SESSION);
            std::fs::remove_file(&p).unwrap();
            let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
            // SAFETY: mkfifo reads the NUL-terminated path it is given.
            assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        }),
        (
            "the fold replaced by a link to another session's fold",
            |s, _| {
                let p = s.kept_fold_path(SESSION);
                std::fs::remove_file(&p).unwrap();
                std::os::unix::fs::symlink(s.kept_fold_path("other"), &p).unwrap();
            },
        ),
        ("the fold replaced by a directory", |s, _| {
            let p = s.kept_fold_path(SESSION);
            std::fs::remove_file(&p).unwrap();
            std::fs::create_dir(&p).unwrap();
        }),
    ];
    for (what, spoil) in cases {
        let dir = tempfile::tempdir().unwrap();
        let store = keeping(dir.path(), key(1));
        for session in [SESSION, "other"] {
            let log = SessionLog::open(&store, session).unwrap();
            grow(&log, 0, 20).await;
            drop(log);
        }
        assert_eq!(
            resumes_at(&store, SESSION),
            Some(102),
            "{what}: kept before"
        );
        spoil(&store, dir.path());
        assert_eq!(resumes_at(&store, SESSION), None, "{what}");
        let log = SessionLog::open(&store, SESSION).unwrap();
        let fold = log.with_fold(SessionFold::clone);
        drop(log);
        assert_eq!(fold, whole(dir.path(), SESSION), "{what}");
        assert_eq!(fold.effective_policy(Policy::Ask), Policy::Never, "{what}");
    }
}

#[tokio::test]
async fn an_older_kept_fold_still_fits_and_the_records_after_it_are_read() {
    let dir = tempfile::tempdir().unwrap();
    let store = keeping(dir.path(), key(1));
    let log = SessionLog::open(&store, SESSION).unwrap();
    grow(&log, 0, 20).await;
    drop(log);
    let older = std::fs::read(store.kept_fold_path(SESSION)).unwrap();
    let log = SessionLog::open(&store, SESSION).unwrap();
    grow(&log, 20, 20).await;
    drop(log);
    assert_eq!(resumes_at(&store, SESSION), Some(202));
    // Put back: a fold of the log's first records fits it, and stands for no more than them.
    std::fs::write(store.kept_fold_path(SESSION), older).unwrap();
    assert_eq!(resumes_at(&store, SESSION), Some(102));
    let log = SessionLog::open(&store, SESSION).unwrap();
    assert_eq!(log.len(), 202);
    assert_eq!(
        log.with_fold(SessionFold::clone),
        whole(dir.path(), SESSION)
    );
}

/// What a fold holds comes back to the bit: the host's own question ids (kept as numbers), numbers
/// in a call's arguments, arguments nested as deep as a log lets them, across generations of
/// kept folds.
#[tokio::test]
async fn a_kept_fold_holds_question_ids_numbers_and_deep_arguments_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let store = keeping(dir.path(), key(1));
    // As deep as a record may nest: the line, its data, the arguments, then these.
    let deep = crate::support::nested(approval_host::event::MOST_NESTING - 3);
    let numbers = json!([
        0.1,
        1e-300,
        5e-324,
        1.7976931348623157e308,
        123456.789e10,
        -0.0,
        2.5e-8,
        18446744073709551615u64,
        -9223372036854775808i64
    ]);
    for generation in 0..3 {
        let log = SessionLog::open(&store, SESSION).unwrap();
        for t in 0..15 {
            let n = generation * 15 + t;
            // A host id: a canonical UUID, which the fold keeps as its 128 bits.
            let id = format!("0b0e9f4c-3f6e-4a47-9a36-5c1c4d2e{n:04x}");
            log.append(Event::TurnStart).await.unwrap();
            log.append(call(
                &format!("n{n}"),
                json!({"numbers": numbers, "n": n as f64 / 3.0}),
            ))
            .await
            .unwrap();
            log.append(call(&format!("d{n}"), json!({"deep": deep})))
                .await
                .unwrap();
            log.append(asked(&id, "Bash")).await.unwrap();
            log.append(decided(&id)).await.unwrap();
            log.append(Event::TurnEnd).await.unwrap();
        }
        drop(log);
        assert_eq!(
            resumes_at(&store, SESSION),
            Some(90 * (generation as u64 + 1))
        );
    }
    let log = SessionLog::open(&store, SESSION).unwrap();
    let fold = log.with_fold(SessionFold::clone);
    assert_eq!(fold, whole(dir.path(), SESSION));
    // As text, so that key order and the sign of zero count too (values compare without them).
    for call in ["n0", "n44", "d0", "d44"] {
        assert_eq!(
            serde_json::to_string(&fold.call_arguments(call)).unwrap(),
            serde_json::to_string(&whole(dir.path(), SESSION).call_arguments(call)).unwrap(),
            "{call}"
        );
    }
    assert!(
        serde_json::to_string(&fold.call_arguments("n1"))
            .unwrap()
            .contains("-0.0"),
        "the negative zero kept its sign"
    );
    assert_eq!(
        fold.call_arguments("n44"),
        Some(json!({"numbers": numbers, "n": 44.0 / 3.0}))
    );
    assert_eq!(fold.call_arguments("d0"), Some(json!({"deep": deep})));
    // A question id asked in the first generation is still known in the third.
    let again = "0b0e9f4c-3f6e-4a47-9a36-5c1c4d2e0000";
    log.append(Event::TurnStart).await.unwrap();
    assert_eq!(
        crate::session_log::refused(log.append(asked(again, "Bash")).await.unwrap_err()),
        Violation::RepeatedId(again.to_owned())
    );
}

/// Records another writer appended after the kept fold are checked as a whole read checks them,
/// and a bad one is named by its line in the whole log.
#[tokio::test]
async fn records_after_a_kept_fold_are_checked_and_named_by_their_line_in_the_whole_log() {
    for (what, line, expect) in [
        (
            "a decision for no question",
            format!(
                "{{\"v\":2,\"seq\":103,\"ts\":\"2026-12-07T00:00:00Z\",\"type\":\"approval/decided\",\"data\":{{\"id\":\"nope\",\"outcome\":\"rejected\"}},\"prev\":\"{}\"}}\n",
                "0".repeat(64)
            ),
            "Inconsistent",
        ),
        (
            "a line that is not a record",
            "not json\n".to_owned(),
            "Corrupt",
        ),
        (
            "a seq out of order",
            format!(
                "{{\"v\":2,\"seq\":7,\"ts\":\"2026-12-07T00:00:00Z\",\"type\":\"turn/start\",\"data\":{{}},\"prev\":\"{}\"}}\n",
                "0".repeat(64)
            ),
            "Corrupt",
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let store = keeping(dir.path(), key(1));
        let log = SessionLog::open(&store, SESSION).unwrap();
        grow(&log, 0, 20).await;
        drop(log);
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(store.session_path(SESSION))
            .unwrap();
        std::io::Write::write_all(&mut file, line.as_bytes()).unwrap();
        drop(file);
        let kept_err = SessionLog::open(&store, SESSION).unwrap_err();
        let whole_err = SessionLog::open(&DirStore::new(dir.path()), SESSION).unwrap_err();
        assert_eq!(kept_err.to_string(), whole_err.to_string(), "{what}");
        match (expect, &kept_err) {
            ("Inconsistent", LogError::Inconsistent { line, .. })
            | ("Corrupt", LogError::Corrupt { line, .. }) => assert_eq!(*line, 103, "{what}"),
            _ => panic!("{what}: {kept_err:?}"),
        }
    }
}

#[tokio::test]
async fn what_redact_keeps_out_of_the_log_stays_out_of_the_kept_fold() {
    let dir = tempfile::tempdir().unwrap();
    let secret = "s3cr3t-token-value";
    {
        let service = ApprovalService::new(keeping(dir.path(), key(1)), Policy::Ask);
        service.set_redaction(Redaction::parse(&["api_key"]).unwrap());
        let agent = service.agent(SESSION, "a").await.unwrap();
        for t in 0..40 {
            service.start_turn(SESSION).await.unwrap();
            let arguments = json!({"command": "deploy", "apiKey": secret, "n": t});
            service
                .record_tool_call(&agent, &format!("c{t}"), "Bash", arguments.clone())
                .await
                .unwrap();
            // This process's gates still read what the agent sent.
            assert_eq!(
                service.call_arguments(&agent, &format!("c{t}")),
                Some(arguments)
            );
            service.end_turn(SESSION).await.unwrap();
        }
        // One call id recorded again without the secret: the log's latest holds no redaction.
        service.start_turn(SESSION).await.unwrap();
        service
            .record_tool_call(&agent, "c0", "Bash", json!({"command": "ls"}))
            .await
            .unwrap();
        service.end_turn(SESSION).await.unwrap();
    }
    let store = keeping(dir.path(), key(1));
    let fold_bytes = std::fs::read(store.kept_fold_path(SESSION)).unwrap();
    let log_bytes = std::fs::read(store.session_path(SESSION)).unwrap();
    let holds = |bytes: &[u8]| bytes.windows(secret.len()).any(|w| w == secret.as_bytes());
    assert!(!holds(&log_bytes));
    assert!(!holds(&fold_bytes), "the kept fold holds a redacted value");
    assert_eq!(resumes_at(&store, SESSION), Some(123));
    let log = SessionLog::open(&store, SESSION).unwrap();
    let fold = log.with_fold(SessionFold::clone);
    assert_eq!(fold, whole(dir.path(), SESSION));
    assert_eq!(
        fold.call_arguments("c5"),
        Some(
            json!({"command": "deploy", "apiKey": approval_host::audit::redact::REDACTED, "n": 5})
        )
    );
    assert_eq!(fold.call_arguments("c0"), Some(json!({"command": "ls"})));
}

#[tokio::test]
async fn a_store_without_a_key_keeps_no_fold() {
    let dir = tempfile::tempdir().unwrap();
    let store = DirStore::new(dir.path()).keeping_folds(KeySource::new(|| None));
    let log = SessionLog::open(&store, SESSION).unwrap();
    grow(&log, 0, 20).await;
    drop(log);
    assert!(!store.kept_fold_path(SESSION).exists());
    assert_eq!(resumes_at(&store, SESSION), None);
}
