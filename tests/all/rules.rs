//! Standing rules through the service: the rule gate answers before every plugin and the decision
//! names the rule; compound and tricky commands never ride an allow prefix; rejects outrank
//! allows at every scope; `never` outranks every rule; expiry and revocation (atomic with respect
//! to the decisions around it); durability across restarts; plugin proposals accepted only where
//! the deployment lets plugins create rules.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use approval_host::answer::{Effect, RuleScope};
use approval_host::rules::{self, Clock, NewRule, RuleBook};
use approval_host::{
    Answer, ApprovalRequest, ApprovalService, Decision, Explained, Outcome, Policy, Position,
    Proposal, Scope,
};
use serde_json::{Value, json};

use super::support::{Host, counting};

/// A clock the test moves.
#[derive(Clone)]
struct TestClock(Arc<Mutex<SystemTime>>);

impl TestClock {
    fn new() -> Self {
        TestClock(Arc::new(Mutex::new(SystemTime::now())))
    }

    fn advance(&self, by: Duration) {
        *self.0.lock().unwrap() += by;
    }

    fn clock(&self) -> Clock {
        let now = self.0.clone();
        Arc::new(move || *now.lock().unwrap())
    }
}

/// Rules on for `host`, with `plugins_may_create`, on `clock`.
fn enable(host: &Host, plugins_may_create: Vec<RuleScope>, clock: Clock) -> Arc<RuleBook> {
    let book = RuleBook::open(
        host.service.store(),
        "test-project",
        vec![],
        plugins_may_create,
        clock,
    )
    .unwrap();
    host.service.set_rules(Some(book.clone()));
    book
}

fn rule(text: &str, effect: Effect, scope: RuleScope) -> NewRule {
    NewRule {
        rule: text.to_owned(),
        effect,
        scope,
        session: (scope == RuleScope::Session).then(|| "s1".to_owned()),
        lasts: None,
        creator: "test".to_owned(),
        reason: None,
    }
}

/// Asks about a `Bash` call of `command` in session `s1`, inside a turn.
async fn bash(service: &ApprovalService, call: &str, command: &str) -> approval_host::Verdict {
    ask(service, call, "Bash", json!({ "command": command })).await
}

async fn ask(
    service: &ApprovalService,
    call: &str,
    tool: &str,
    args: Value,
) -> approval_host::Verdict {
    let agent = service.agent("s1", "a").await.unwrap();
    if !service.turn_open("s1").await.unwrap() {
        service.start_turn("s1").await.unwrap();
    }
    service
        .record_tool_call(&agent, call, tool, args)
        .await
        .unwrap();
    service
        .ask(ApprovalRequest::new(&agent, tool).call_id(call).cwd("/w"))
        .await
        .unwrap()
}

fn decided(host: &Host) -> Vec<Value> {
    host.events("s1")
        .into_iter()
        .filter(|(t, _)| t == "approval/decided")
        .map(|(_, d)| d)
        .collect()
}

#[tokio::test]
async fn a_matching_rule_answers_before_every_plugin_and_the_decision_names_it() {
    let host = Host::new();
    enable(&host, vec![], rules::system_clock());
    let (calls, gate) = counting(Decision::Reject);
    let _g = host
        .service
        .register("gate", Scope::Global, Position::Front, gate);
    let added = host
        .service
        .add_rule(rule(
            "Bash(npm run test:*)",
            Effect::Allow,
            RuleScope::Project,
        ))
        .await
        .unwrap();
    let v = bash(&host.service, "c1", "npm run test --watch").await;
    assert_eq!(v.outcome, Outcome::AllowedOnce);
    assert_eq!(
        v.answerer.as_deref(),
        Some(format!("rule:{}", added.id).as_str())
    );
    assert_eq!(
        calls.load(Ordering::SeqCst),
        0,
        "the plugin was never asked"
    );
    let v = bash(&host.service, "c2", "npm run testing").await;
    assert_eq!(v.outcome, Outcome::Rejected, "no rule: the plugin decides");
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    let d = decided(&host);
    assert_eq!(d[0]["answerer"], format!("rule:{}", added.id));
    assert_eq!(
        d[0]["rule"],
        json!({"id": added.id, "rule": "Bash(npm run test:*)", "scope": "project", "creator": "test"})
    );
    assert_eq!(d[1]["answerer"], "gate");
    assert!(d[1].get("rule").is_none());
}

#[tokio::test]
async fn compound_and_tricky_commands_never_ride_an_allow_prefix() {
    let host = Host::new();
    enable(&host, vec![], rules::system_clock());
    let (_, gate) = counting(Decision::Reject);
    let _g = host
        .service
        .register("fallback", Scope::Global, Position::Last, gate);
    host.service
        .add_rule(rule(
            "Bash(npm run test:*)",
            Effect::Allow,
            RuleScope::Project,
        ))
        .await
        .unwrap();
    let cases = [
        ("npm run test", true),
        ("   npm run test   -- --watch", true),
        ("'npm' \"run\" test", true),
        ("npm run test && npm run test --ci", true),
        ("npm run test 2>&1", true),
        ("npm run test > /dev/null", true),
        ("npm run test; rm -rf ~", false),
        ("npm run test && rm -rf ~", false),
        ("npm run test || rm -rf ~", false),
        ("npm run test | sh", false),
        ("npm run test & rm -rf ~", false),
        ("npm run test\nrm -rf ~", false),
        ("npm run test $(rm -rf ~)", false),
        ("npm run test `rm -rf ~`", false),
        ("npm run test > ~/.bashrc", false),
        ("npm run test < /etc/shadow", false),
        ("npm run test\\; rm -rf ~", false),
        ("npm run testing", false),
        ("npm run 'test; rm -rf ~'", false),
        ("FOO=1 npm run test", false),
        ("(npm run test)", false),
        ("{ npm run test; }", false),
        ("npm run test <(curl x)", false),
        ("npm run \\\ntest", true),
        ("npm run test # && rm -rf ~", true),
    ];
    for (i, (command, allowed)) in cases.iter().enumerate() {
        let v = bash(&host.service, &format!("c{i}"), command).await;
        let want = if *allowed {
            Outcome::AllowedOnce
        } else {
            Outcome::Rejected
        };
        assert_eq!(v.outcome, want, "{command:?}");
    }
}

#[tokio::test]
async fn a_reject_rule_outranks_allow_rules_at_every_scope() {
    let host = Host::new();
    enable(&host, vec![], rules::system_clock());
    host.service
        .add_rule(rule("Bash(git:*)", Effect::Allow, RuleScope::Session))
        .await
        .unwrap();
    host.service
        .add_rule(rule("Bash", Effect::Allow, RuleScope::Project))
        .await
        .unwrap();
    let reject = host
        .service
        .add_rule(rule("Bash(git push:*)", Effect::Reject, RuleScope::User))
        .await
        .unwrap();
    let v = bash(&host.service, "c1", "git push origin main").await;
    assert_eq!(v.outcome, Outcome::Rejected);
    assert_eq!(
        v.reason.as_deref(),
        Some("the standing rule Bash(git push:*) rejects this call")
    );
    assert_eq!(v.answerer, Some(format!("rule:{}", reject.id)));
    let v = bash(&host.service, "c2", "git status && git push").await;
    assert_eq!(
        v.outcome,
        Outcome::Rejected,
        "any part matching a reject rule"
    );
    // A command that cannot be split is rejected when the reject rule's words appear in it.
    let v = bash(&host.service, "c3", "echo $(git push --force)").await;
    assert_eq!(v.outcome, Outcome::Rejected);
    let v = bash(&host.service, "c4", "git status").await;
    assert_eq!(v.outcome, Outcome::AllowedOnce);
}

#[tokio::test]
async fn never_rejects_before_any_rule() {
    let host = Host::with_policy(Policy::Never);
    enable(&host, vec![], rules::system_clock());
    host.service
        .add_rule(rule("Bash", Effect::Allow, RuleScope::Project))
        .await
        .unwrap();
    let v = bash(&host.service, "c1", "ls").await;
    assert_eq!(v.outcome, Outcome::Rejected);
    let d = decided(&host);
    assert!(
        !d[0]["answerer"].as_str().unwrap_or("").starts_with("rule:"),
        "{}",
        d[0]
    );
    assert!(d[0].get("rule").is_none());
}

#[tokio::test]
async fn paths_and_domains_match_as_documented() {
    let host = Host::new();
    enable(&host, vec![], rules::system_clock());
    host.service
        .add_rule(rule("Read(./src/**)", Effect::Allow, RuleScope::Project))
        .await
        .unwrap();
    host.service
        .add_rule(rule(
            "WebFetch(domain:docs.rs)",
            Effect::Allow,
            RuleScope::Project,
        ))
        .await
        .unwrap();
    let cases = [
        (
            "Read",
            json!({"file_path": "src/a/b.rs"}),
            Outcome::AllowedOnce,
        ),
        (
            "Read",
            json!({"file_path": "/w/src/lib.rs"}),
            Outcome::AllowedOnce,
        ),
        (
            "Read",
            json!({"file_path": "src/../../etc/passwd"}),
            Outcome::Unavailable,
        ),
        (
            "Read",
            json!({"file_path": "/etc/passwd"}),
            Outcome::Unavailable,
        ),
        (
            "Edit",
            json!({"file_path": "src/a.rs"}),
            Outcome::Unavailable,
        ),
        (
            "WebFetch",
            json!({"url": "https://docs.rs/tokio"}),
            Outcome::AllowedOnce,
        ),
        (
            "WebFetch",
            json!({"url": "https://docs.rs.evil.com/"}),
            Outcome::Unavailable,
        ),
        (
            "WebFetch",
            json!({"url": "https://evil.com/?docs.rs"}),
            Outcome::Unavailable,
        ),
    ];
    for (i, (tool, args, want)) in cases.into_iter().enumerate() {
        let v = ask(&host.service, &format!("c{i}"), tool, args.clone()).await;
        assert_eq!(v.outcome, want, "{tool} {args}");
    }
}

#[tokio::test]
async fn an_expired_rule_never_matches() {
    let host = Host::new();
    let clock = TestClock::new();
    let book = enable(&host, vec![], clock.clock());
    let mut new = rule("Bash(make:*)", Effect::Allow, RuleScope::Project);
    new.lasts = Some(Duration::from_secs(3600));
    let added = host.service.add_rule(new).await.unwrap();
    assert!(added.expires_at.is_some());
    assert_eq!(
        bash(&host.service, "c1", "make").await.outcome,
        Outcome::AllowedOnce
    );
    clock.advance(Duration::from_secs(3599));
    assert_eq!(
        bash(&host.service, "c2", "make").await.outcome,
        Outcome::AllowedOnce
    );
    clock.advance(Duration::from_secs(1));
    assert_eq!(
        bash(&host.service, "c3", "make").await.outcome,
        Outcome::Unavailable
    );
    assert!(book.list(None).is_empty(), "an expired rule is not listed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_decision_that_starts_after_a_revocation_uses_the_rule() {
    let host = Host::new();
    enable(&host, vec![], rules::system_clock());
    let added = host
        .service
        .add_rule(rule(
            "Bash(cargo test:*)",
            Effect::Allow,
            RuleScope::Project,
        ))
        .await
        .unwrap();
    let revoked = Arc::new(AtomicBool::new(false));
    let misuses = Arc::new(AtomicUsize::new(0));
    let asking = {
        let (service, revoked, misuses) = (host.service.clone(), revoked.clone(), misuses.clone());
        tokio::spawn(async move {
            let mut before = 0;
            for i in 0..300 {
                let after_revocation = revoked.load(Ordering::SeqCst);
                let v = bash(&service, &format!("c{i}"), "cargo test").await;
                match (after_revocation, v.outcome) {
                    (true, Outcome::AllowedOnce) => {
                        misuses.fetch_add(1, Ordering::SeqCst);
                    }
                    (false, Outcome::AllowedOnce) => before += 1,
                    _ => {}
                }
            }
            before
        })
    };
    // Revoke while questions are running.
    while host.events_so_far("s1").len() < 20 {
        tokio::task::yield_now().await;
    }
    host.service
        .revoke_rule(&added.id, "test", Some("done".to_owned()))
        .await
        .unwrap();
    revoked.store(true, Ordering::SeqCst);
    let allowed_before = asking.await.unwrap();
    assert!(allowed_before > 0);
    assert_eq!(misuses.load(Ordering::SeqCst), 0);
    // Revoking twice is an error naming the rule.
    let err = host
        .service
        .revoke_rule(&added.id, "test", None)
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), format!("no active rule {:?}", added.id));
}

#[tokio::test]
async fn rules_and_revocations_survive_a_restart() {
    let mut host = Host::new();
    enable(&host, vec![], rules::system_clock());
    let project = host
        .service
        .add_rule(rule("Bash(ls:*)", Effect::Allow, RuleScope::Project))
        .await
        .unwrap();
    let user = host
        .service
        .add_rule(rule("Bash(rm:*)", Effect::Reject, RuleScope::User))
        .await
        .unwrap();
    let session = host
        .service
        .add_rule(rule("Bash(pwd)", Effect::Allow, RuleScope::Session))
        .await
        .unwrap();
    host.service
        .revoke_rule(&project.id, "test", None)
        .await
        .unwrap();
    host.restart(Policy::Ask);
    let book = enable(&host, vec![], rules::system_clock());
    let ids: Vec<String> = book.list(None).into_iter().map(|r| r.id).collect();
    assert_eq!(
        ids,
        std::slice::from_ref(&user.id),
        "the session's rules load with the session"
    );
    assert_eq!(
        bash(&host.service, "c1", "pwd").await.outcome,
        Outcome::AllowedOnce
    );
    let mut ids: Vec<String> = book.list(None).into_iter().map(|r| r.id).collect();
    ids.sort();
    let mut want = vec![user.id.clone(), session.id.clone()];
    want.sort();
    assert_eq!(ids, want);
    assert_eq!(
        bash(&host.service, "c2", "ls").await.outcome,
        Outcome::Unavailable
    );
    assert_eq!(
        bash(&host.service, "c3", "rm x").await.outcome,
        Outcome::Rejected
    );
    // Another project on the same state directory shares user rules only.
    let other = RuleBook::open(
        host.service.store(),
        "another-project",
        vec![],
        vec![],
        rules::system_clock(),
    )
    .unwrap();
    let ids: Vec<String> = other.list(None).into_iter().map(|r| r.id).collect();
    assert_eq!(ids, [user.id]);
}

#[tokio::test]
async fn a_session_rule_revoked_while_its_session_is_closed_stays_revoked() {
    let mut host = Host::new();
    enable(&host, vec![], rules::system_clock());
    let session = host
        .service
        .add_rule(rule("Bash(pwd)", Effect::Allow, RuleScope::Session))
        .await
        .unwrap();
    // A new host: the rule comes back with its session, which then closes (no agent holds it).
    host.restart(Policy::Ask);
    let book = enable(&host, vec![], rules::system_clock());
    assert_eq!(
        bash(&host.service, "c1", "pwd").await.outcome,
        Outcome::AllowedOnce
    );
    assert!(host.service.open_sessions().await.is_empty());
    // Revoking opens the session to write the revocation; the log it opens still holds the rule.
    host.service
        .revoke_rule(&session.id, "test", None)
        .await
        .unwrap();
    assert!(book.list(None).is_empty(), "{:?}", book.list(None));
    assert_eq!(
        bash(&host.service, "c2", "pwd").await.outcome,
        Outcome::Unavailable
    );
    let revoked: Vec<Value> = host
        .events("s1")
        .into_iter()
        .filter(|(t, _)| t == "rule/revoked")
        .map(|(_, d)| d)
        .collect();
    assert_eq!(revoked.len(), 1);
    assert_eq!(revoked[0]["id"], session.id.as_str());
}

fn proposing_gate(calls: Arc<AtomicUsize>, scope: RuleScope) -> impl approval_host::Listener {
    Explained(move |_q| {
        calls.fetch_add(1, Ordering::SeqCst);
        async move {
            Ok(Answer::from(Decision::AllowOnce).proposing(Proposal {
                effect: Effect::Allow,
                tool: "Bash".to_owned(),
                pattern: Some("npm test:*".to_owned()),
                scope,
            }))
        }
    })
}

#[tokio::test]
async fn a_plugin_proposal_is_declined_unless_the_deployment_lets_plugins_create_rules() {
    let host = Host::new();
    enable(&host, vec![], rules::system_clock());
    let calls = Arc::new(AtomicUsize::new(0));
    let _g = host.service.register(
        "proposer",
        Scope::Global,
        Position::Last,
        proposing_gate(calls.clone(), RuleScope::Project),
    );
    assert_eq!(
        bash(&host.service, "c1", "npm test").await.outcome,
        Outcome::AllowedOnce
    );
    assert_eq!(
        bash(&host.service, "c2", "npm test").await.outcome,
        Outcome::AllowedOnce
    );
    assert_eq!(calls.load(Ordering::SeqCst), 2, "no rule was made");
    let d = decided(&host);
    assert_eq!(
        d[0]["proposal"]["scope"], "project",
        "the proposal is audited"
    );
    assert!(d[0].get("ruleAdded").is_none());
    assert_eq!(
        d[0]["ruleDeclined"],
        "plugins may not create project rules in this deployment ([rules] plugins-may-create)"
    );
}

#[tokio::test]
async fn a_proposal_on_a_host_without_rules_is_the_one_shot_decision() {
    let host = Host::new();
    let calls = Arc::new(AtomicUsize::new(0));
    let _g = host.service.register(
        "proposer",
        Scope::Global,
        Position::Last,
        proposing_gate(calls.clone(), RuleScope::Session),
    );
    assert_eq!(
        bash(&host.service, "c1", "npm test").await.outcome,
        Outcome::AllowedOnce
    );
    assert_eq!(
        bash(&host.service, "c2", "npm test").await.outcome,
        Outcome::AllowedOnce
    );
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    assert_eq!(
        decided(&host)[0]["ruleDeclined"],
        "this host keeps no standing rules"
    );
}

#[tokio::test]
async fn a_plugin_proposal_of_an_allowed_scope_answers_the_next_call() {
    let host = Host::new();
    let book = enable(&host, vec![RuleScope::Session], rules::system_clock());
    let calls = Arc::new(AtomicUsize::new(0));
    let _g = host.service.register(
        "proposer",
        Scope::Global,
        Position::Last,
        proposing_gate(calls.clone(), RuleScope::Session),
    );
    assert_eq!(
        bash(&host.service, "c1", "npm test").await.outcome,
        Outcome::AllowedOnce
    );
    let v = bash(&host.service, "c2", "npm test --ci").await;
    assert_eq!(v.outcome, Outcome::AllowedOnce);
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "the rule answered the second call"
    );
    let d = decided(&host);
    let id = d[0]["ruleAdded"].as_str().unwrap();
    assert_eq!(d[1]["answerer"], format!("rule:{id}"));
    let listed = book.list(None);
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].creator, "plugin:proposer");
    assert_eq!(listed[0].rule, "Bash(npm test:*)");
    assert_eq!(listed[0].session.as_deref(), Some("s1"));
    // The rule event sits in the session's own log, before the decision that made it.
    let types: Vec<String> = host.events("s1").into_iter().map(|(t, _)| t).collect();
    let added = types.iter().position(|t| t == "rule/added").unwrap();
    let first_decided = types.iter().position(|t| t == "approval/decided").unwrap();
    assert!(added < first_decided, "{types:?}");
}

#[tokio::test]
async fn a_project_rule_from_a_proposal_applies_to_every_session() {
    let host = Host::new();
    let book = enable(&host, vec![RuleScope::Project], rules::system_clock());
    let calls = Arc::new(AtomicUsize::new(0));
    let _g = host.service.register(
        "proposer",
        Scope::Global,
        Position::Last,
        proposing_gate(calls.clone(), RuleScope::Project),
    );
    assert_eq!(
        bash(&host.service, "c1", "npm test").await.outcome,
        Outcome::AllowedOnce
    );
    let other = host.service.agent("s2", "b").await.unwrap();
    host.service.start_turn("s2").await.unwrap();
    let v = host
        .service
        .ask(ApprovalRequest::new(&other, "Bash").call_id("x1"))
        .await
        .unwrap();
    assert_eq!(v.outcome, Outcome::AllowedOnce);
    // No arguments recorded: only a rule for the whole tool could match, so the plugin answered.
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    host.service
        .record_tool_call(&other, "x2", "Bash", json!({"command": "npm test"}))
        .await
        .unwrap();
    let v = host
        .service
        .ask(ApprovalRequest::new(&other, "Bash").call_id("x2"))
        .await
        .unwrap();
    assert!(v.answerer.unwrap().starts_with("rule:"));
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    assert_eq!(book.list(Some(RuleScope::Project))[0].session, None);
}

/// Polls `check` until it holds, failing after a deadline (the book refreshes on its own clock).
fn eventually(what: &str, check: impl Fn() -> bool) -> Duration {
    let started = std::time::Instant::now();
    while !check() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{what} did not happen within 10 s"
        );
        std::thread::yield_now();
    }
    started.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_process_s_rules_and_revocations_take_effect_within_the_refresh_interval() {
    let host = Host::new();
    enable(&host, vec![], rules::system_clock());
    // A second book over the same store: another `serve` (on PostgreSQL, another host) or a CLI
    // `rules add`.
    let other_service = host.another_service(Policy::Ask);
    let other = RuleBook::open(
        other_service.store(),
        "test-project",
        vec![],
        vec![],
        rules::system_clock(),
    )
    .unwrap();
    other_service.set_rules(Some(other.clone()));
    let added = other_service
        .add_rule(rule("Bash(make:*)", Effect::Allow, RuleScope::Project))
        .await
        .unwrap();
    let book = host.service.rules().unwrap();
    let seen = eventually("the new rule reaching the first book", || {
        book.list(None).iter().any(|r| r.id == added.id)
    });
    assert!(seen < Duration::from_secs(2), "{seen:?}");
    assert_eq!(
        bash(&host.service, "c1", "make all").await.outcome,
        Outcome::AllowedOnce
    );
    other_service
        .revoke_rule(&added.id, "test", None)
        .await
        .unwrap();
    eventually("the revocation reaching the first book", || {
        book.list(None).is_empty()
    });
    assert_eq!(
        bash(&host.service, "c2", "make all").await.outcome,
        Outcome::Unavailable
    );
}

/// A store whose `log_len` waits while held: a store that is slow to answer (a database across a
/// network, say).
struct SlowLens {
    inner: approval_host::DirStore,
    held: Mutex<bool>,
    changed: std::sync::Condvar,
    waiting: AtomicUsize,
}

impl approval_host::Store for SlowLens {
    fn open(&self, session: &str) -> Result<approval_host::OpenedLog, approval_host::LogError> {
        self.inner.open(session)
    }

    fn log_len(&self, session: &str) -> Result<Option<u64>, approval_host::LogError> {
        let mut held = self.held.lock().unwrap();
        self.waiting.fetch_add(1, Ordering::SeqCst);
        self.changed.notify_all();
        while *held {
            held = self.changed.wait(held).unwrap();
        }
        self.waiting.fetch_sub(1, Ordering::SeqCst);
        self.inner.log_len(session)
    }

    fn read(&self, session: &str) -> Result<Vec<u8>, approval_host::LogError> {
        self.inner.read(session)
    }
}

#[test]
fn a_decision_never_waits_for_the_store_to_say_whether_other_processes_changed_the_rules() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SlowLens {
        inner: approval_host::DirStore::new(dir.path()),
        held: Mutex::new(false),
        changed: std::sync::Condvar::new(),
        waiting: AtomicUsize::new(0),
    });
    let book = RuleBook::open(
        store.clone(),
        "test-project",
        vec![],
        vec![],
        rules::system_clock(),
    )
    .unwrap();
    *store.held.lock().unwrap() = true;
    // The book's next refresh gets stuck in the store...
    {
        let held = store.held.lock().unwrap();
        let (held, waited) = store
            .changed
            .wait_timeout_while(held, Duration::from_secs(10), |_| {
                store.waiting.load(Ordering::SeqCst) == 0
            })
            .unwrap();
        assert!(!waited.timed_out(), "the book never refreshed");
        assert!(*held);
    }
    // ...and the book still answers, at once, from what it holds.
    let (tx, rx) = std::sync::mpsc::channel();
    let b = book.clone();
    std::thread::spawn(move || tx.send(b.list(None).len()).unwrap());
    let listed = rx.recv_timeout(Duration::from_secs(10));
    *store.held.lock().unwrap() = false;
    store.changed.notify_all();
    assert_eq!(listed, Ok(0), "listing waited for the store");
}
