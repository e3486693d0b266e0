//! A revocation ends whole: it takes its rule out of the index first and puts a reject rule back
//! only when its write fails, so a caller that stops waiting in between (a console request whose
//! browser went away) must not leave the rule out with no revocation in its log, where the next
//! start would find it again.

use std::time::{Duration, Instant};

use approval_host::Policy;
use approval_host::answer::{Effect, RuleScope};
use approval_host::log::SessionLog;
use approval_host::rules::NewRule;

use super::support::{Host, rules_on};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revocation_whose_caller_stops_waiting_still_ends_whole() {
    let mut host = Host::new();
    rules_on(&host.service, "test-project");
    let reject = host
        .service
        .add_rule(NewRule {
            rule: "Bash(rm:*)".to_owned(),
            effect: Effect::Reject,
            scope: RuleScope::Session,
            session: Some("s1".to_owned()),
            lasts: None,
            creator: "test".to_owned(),
            reason: None,
        })
        .await
        .unwrap();
    // A new host, with the session's rules indexed and the session closed again.
    host.restart(Policy::Ask);
    let book = rules_on(&host.service, "test-project");
    host.service.load_session_rules("s1").await.unwrap();
    assert_eq!(book.list(None).len(), 1);
    // Another writer holds the session's log, so the revocation waits to open it, with its rule
    // already out of the index; its caller gives up there.
    let held = SessionLog::open(&*host.service.store(), "s1").unwrap();
    let gave_up = tokio::time::timeout(
        Duration::from_millis(50),
        host.service.revoke_rule(&reject.id, "test", None),
    )
    .await;
    assert!(gave_up.is_err(), "the revocation had to wait: {gave_up:?}");
    drop(held);
    // It ends whole all the same: the log records the revocation.
    let deadline = Instant::now() + Duration::from_secs(30);
    let revoked = |host: &Host| {
        host.events("s1")
            .iter()
            .any(|(t, d)| t == "rule/revoked" && d["id"] == reject.id.as_str())
    };
    while !revoked(&host) {
        assert!(
            Instant::now() < deadline,
            "the revocation was never written; listed: {:?}",
            book.list(None)
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(book.list(None).is_empty());
    // And the next start agrees.
    host.restart(Policy::Ask);
    let book = rules_on(&host.service, "test-project");
    host.service.load_session_rules("s1").await.unwrap();
    assert!(book.list(None).is_empty(), "{:?}", book.list(None));
}
