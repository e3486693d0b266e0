//! Reloading a mounted deployment: atomic swaps, failed versions that keep the old one serving,
//! removal, and quarantine.

use std::sync::Arc;
use std::time::Duration;

use approval_host::config::{PluginSpec, Role};
use approval_host::plugin::{QuarantinePolicy, SlotState, digest};
use approval_host::{ApprovalRequest, Deployment, Mounted, Outcome, PluginHost, Policy, bundled};
use serde_json::Value;

use crate::fixtures;
use crate::support::Host;

const S: &str = "s";

fn deployment(specs: Vec<PluginSpec>) -> Deployment {
    Deployment {
        path: None,
        default_policy: Policy::Ask,
        plugins: specs,
        ..Deployment::embedded()
    }
}

fn spec(dir: &std::path::Path, name: &str, bytes: &[u8], role: Role) -> PluginSpec {
    let path = fixtures::write(dir, &format!("{name}.wasm"), bytes);
    let mut spec = PluginSpec::new(name, path, role);
    spec.config.insert("tools".into(), "bash".into());
    spec
}

fn decided(host: &Host) -> Vec<Value> {
    host.events(S)
        .into_iter()
        .filter(|(t, _)| t == "approval/decided")
        .map(|(_, d)| d)
        .collect()
}

async fn setup() -> (Host, approval_host::Agent, PluginHost) {
    let host = Host::new();
    let agent = host.service.agent(S, "a").await.unwrap();
    host.service.start_turn(S).await.unwrap();
    (host, agent, PluginHost::new().unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_under_concurrent_requests_loses_none() {
    let (host, agent, plugins) = setup().await;
    let dir = host.dir.path().to_owned();
    let v1 = spec(&dir, "policy", bundled::ALLOW_TOOLS, Role::Answerer);
    let mut mounted =
        Mounted::load(&host.service, &plugins, &deployment(vec![v1.clone()])).unwrap();

    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut askers = Vec::new();
    for _ in 0..8 {
        let service = host.service.clone();
        let agent = agent.clone();
        let stop = stop.clone();
        askers.push(tokio::spawn(async move {
            let mut n = 0;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) || n < 20 {
                let outcome = service
                    .request(ApprovalRequest::new(&agent, "bash"))
                    .await
                    .unwrap();
                assert_ne!(outcome, Outcome::Unavailable);
                n += 1;
            }
            n
        }));
    }
    // Swap back and forth between two versions while the askers run.
    let mut mounted = tokio::task::spawn_blocking(move || {
        for i in 0..6 {
            let bytes = if i % 2 == 0 {
                bundled::REJECT_ALL
            } else {
                bundled::ALLOW_TOOLS
            };
            std::fs::write(&v1.path, bytes).unwrap();
            let report = mounted.apply(&plugins, &deployment(vec![v1.clone()]));
            assert_eq!(report.swapped, ["policy"], "{report:?}");
        }
        mounted
    })
    .await
    .unwrap();
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let mut total = 0;
    for a in askers {
        total += a.await.unwrap();
    }
    host.service.end_turn(S).await.unwrap();
    let allow = digest(bundled::ALLOW_TOOLS);
    let reject = digest(bundled::REJECT_ALL);
    let all = decided(&host);
    assert_eq!(all.len(), total, "every request was audited");
    for d in &all {
        let expected = match d["outcome"].as_str().unwrap() {
            "allowed-once" => &allow,
            "rejected" => &reject,
            other => panic!("{other}: {d}"),
        };
        assert_eq!(d["digest"], expected.as_str(), "{d}");
        assert_eq!(d["answerer"], "policy");
    }
    assert!(mounted.unload("policy"));
}

#[tokio::test]
async fn a_broken_new_version_keeps_the_old_one_serving() {
    let (host, agent, plugins) = setup().await;
    let dir = host.dir.path().to_owned();
    let gate = spec(&dir, "gate", bundled::ALLOW_TOOLS, Role::Gate);
    let mut mounted =
        Mounted::load(&host.service, &plugins, &deployment(vec![gate.clone()])).unwrap();
    std::fs::write(&gate.path, b"not a component").unwrap();
    let report = mounted.apply(&plugins, &deployment(vec![gate.clone()]));
    assert_eq!(report.failed.len(), 1);
    assert!(
        report.failed[0]
            .1
            .contains("is not a WebAssembly component"),
        "{report:?}"
    );
    let status = &mounted.status()[0];
    assert_eq!(status.state, SlotState::Failed);
    assert_eq!(
        status.digest.as_deref(),
        Some(digest(bundled::ALLOW_TOOLS).as_str())
    );
    let outcome = host
        .service
        .request(ApprovalRequest::new(&agent, "bash"))
        .await
        .unwrap();
    assert_eq!(outcome, Outcome::AllowedOnce, "the old gate still serves");

    // A later good version clears the failure.
    std::fs::write(&gate.path, bundled::REJECT_ALL).unwrap();
    let report = mounted.apply(&plugins, &deployment(vec![gate.clone()]));
    assert_eq!(report.swapped, ["gate"]);
    assert_eq!(mounted.status()[0].state, SlotState::Loaded);
    let outcome = host
        .service
        .request(ApprovalRequest::new(&agent, "bash"))
        .await
        .unwrap();
    assert_eq!(outcome, Outcome::Rejected);
}

#[tokio::test]
async fn a_removed_entry_is_unloaded_and_fails_closed() {
    let (host, agent, plugins) = setup().await;
    let dir = host.dir.path().to_owned();
    let a = spec(&dir, "a", bundled::ALLOW_TOOLS, Role::Answerer);
    let g = spec(&dir, "g", bundled::REJECT_ALL, Role::Gate);
    let mut mounted = Mounted::load(
        &host.service,
        &plugins,
        &deployment(vec![a.clone(), g.clone()]),
    )
    .unwrap();
    assert_eq!(host.service.waterfall().names(), ["g", "a"]);
    let report = mounted.apply(&plugins, &deployment(vec![a.clone()]));
    assert_eq!(report.removed, ["g"]);
    assert_eq!(host.service.waterfall().names(), ["a"]);
    let report = mounted.apply(&plugins, &deployment(vec![]));
    assert_eq!(report.removed, ["a"]);
    let outcome = host
        .service
        .request(ApprovalRequest::new(&agent, "bash"))
        .await
        .unwrap();
    assert_eq!(outcome, Outcome::Unavailable);
    // Re-adding puts gates back in front of answerers.
    let report = mounted.apply(&plugins, &deployment(vec![a, g]));
    assert_eq!(report.added, ["a", "g"]);
    assert_eq!(host.service.waterfall().names(), ["g", "a"]);
}

#[tokio::test]
async fn quarantine_trips_and_recovers_on_reload() {
    let (host, agent, plugins) = setup().await;
    let dir = host.dir.path().to_owned();
    let bad = spec(&dir, "crashy", &fixtures::trap(), Role::Answerer);
    let policy = QuarantinePolicy {
        max_failures: 2,
        window: Duration::from_secs(600),
        backoff: Duration::from_secs(3600),
    };
    let mounted = Mounted::load_with(
        &host.service,
        &plugins,
        &deployment(vec![bad.clone()]),
        policy,
    )
    .unwrap();
    let ask = || host.service.request(ApprovalRequest::new(&agent, "bash"));
    for _ in 0..3 {
        assert_eq!(ask().await.unwrap(), Outcome::Unavailable);
    }
    assert_eq!(mounted.status()[0].state, SlotState::Quarantined);
    assert_eq!(mounted.status()[0].counters.decisions, 3);
    assert_eq!(ask().await.unwrap(), Outcome::Unavailable);
    let last = decided(&host).pop().unwrap();
    assert_eq!(last["failure"]["kind"], "quarantined");
    assert_eq!(last["failure"]["plugin"], "crashy");
    let status = &mounted.status()[0];
    assert_eq!(
        status.counters.decisions, 3,
        "it did not run while quarantined"
    );
    assert_eq!(status.counters.quarantined, 1);
    assert_eq!(status.counters.failures, 3);
    // How long it stays out, as `plugins/list` and the console show it (seconds, rounded up).
    let left = status.quarantined_for_s.expect("seconds left");
    assert!((3590..=3600).contains(&left), "{left}");
    assert_eq!(
        serde_json::to_value(status).unwrap()["quarantinedForS"],
        left
    );

    mounted.release_all();
    assert_eq!(mounted.status()[0].state, SlotState::Loaded);
    assert_eq!(mounted.status()[0].quarantined_for_s, None);
    assert_eq!(ask().await.unwrap(), Outcome::Unavailable);
    assert_eq!(decided(&host).pop().unwrap()["failure"]["kind"], "trap");
    // A good answer still comes through once it serves again: "ok" makes the fixture behave.
    assert_eq!(
        host.service
            .request(ApprovalRequest::new(&agent, "ok"))
            .await
            .unwrap(),
        Outcome::AllowedOnce
    );
}

#[tokio::test]
async fn quarantine_ends_when_the_backoff_runs_out() {
    let (host, agent, plugins) = setup().await;
    let dir = host.dir.path().to_owned();
    let bad = spec(&dir, "crashy", &fixtures::trap(), Role::Answerer);
    let policy = QuarantinePolicy {
        max_failures: 0,
        window: Duration::from_secs(600),
        backoff: Duration::ZERO,
    };
    let mounted =
        Mounted::load_with(&host.service, &plugins, &deployment(vec![bad]), policy).unwrap();
    let ask = |tool| host.service.request(ApprovalRequest::new(&agent, tool));
    assert_eq!(ask("bash").await.unwrap(), Outcome::Unavailable);
    // A zero backoff has already run out: the plugin runs (and answers) again.
    assert_eq!(ask("ok").await.unwrap(), Outcome::AllowedOnce);
    assert_eq!(mounted.status()[0].counters.quarantined, 0);
}

#[tokio::test]
async fn a_changed_default_policy_applies_on_reload_to_sessions_without_a_switch() {
    let (host, agent, plugins) = setup().await;
    let pinned = host.service.agent("pinned", "p").await.unwrap();
    host.service
        .set_policy(&pinned, Policy::Never, Some("user"))
        .await
        .unwrap();
    host.service
        .set_policy(&pinned, Policy::Ask, Some("user"))
        .await
        .unwrap();
    let mut mounted = Mounted::load(&host.service, &plugins, &deployment(vec![])).unwrap();
    let mut never = deployment(vec![]);
    never.default_policy = Policy::Never;
    approval_host::assemble::reload_plugins(&host.service, &mut mounted, &plugins, &never);
    assert_eq!(host.service.effective_policy(&agent), Policy::Never);
    assert_eq!(
        host.service.effective_policy(&pinned),
        Policy::Ask,
        "its own switch stands"
    );
    assert_eq!(
        host.service
            .request(ApprovalRequest::new(&agent, "bash"))
            .await
            .unwrap(),
        Outcome::Rejected
    );
}
