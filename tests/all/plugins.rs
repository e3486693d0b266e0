//! WebAssembly plugins: containment of every kind of failure, load-time refusal, the sandbox,
//! the example plugins, concurrency and unloading.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use approval_host::config::{Isolation, PluginSpec, Role};
use approval_host::plugin::LogLevel;
use approval_host::{
    ApprovalRequest, ApprovalService, Deployment, Mounted, Outcome, Plugin, PluginError,
    PluginHost, Policy, Position, Scope, bundled,
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::fixtures::{self, Captured};
use crate::support::Host;

const S: &str = "s";

struct Rig {
    host: Host,
    plugins: PluginHost,
    log: Captured,
    logged: tokio::sync::mpsc::UnboundedReceiver<String>,
    agent: approval_host::Agent,
}

async fn rig() -> Rig {
    let host = Host::new();
    let (log, logged) = Captured::new();
    let plugins = PluginHost::with_log_sink(Arc::new(log.clone())).unwrap();
    let agent = host.service.agent(S, "a").await.unwrap();
    host.service.start_turn(S).await.unwrap();
    Rig {
        host,
        plugins,
        log,
        logged,
        agent,
    }
}

impl Rig {
    fn load(&self, name: &str, bytes: &[u8], tweak: impl FnOnce(&mut PluginSpec)) -> Arc<Plugin> {
        let path = fixtures::write(self.host.dir.path(), &format!("{name}.wasm"), bytes);
        let mut spec = PluginSpec::new(name, path, Role::Answerer);
        tweak(&mut spec);
        self.plugins.load(&spec).unwrap()
    }

    async fn ask(&self, tool: &str) -> Outcome {
        self.host
            .service
            .request(ApprovalRequest::new(&self.agent, tool))
            .await
            .unwrap()
    }

    fn last_decided(&self) -> Value {
        self.host
            .events(S)
            .into_iter()
            .rev()
            .find(|(t, _)| t == "approval/decided")
            .unwrap()
            .1
    }
}

/// The failure settles `unavailable` with the audit pair naming the plugin and the kind, a
/// permissive answerer behind it never runs, and the same plugin then serves again.
async fn contained(name: &str, bytes: Vec<u8>, kind: &str, tweak: impl FnOnce(&mut PluginSpec)) {
    let rig = rig().await;
    let plugin = rig.load(name, &bytes, |s| {
        s.role = Role::Gate;
        tweak(s);
    });
    let mounted = Mounted::mount(&rig.host.service, vec![plugin.clone()]);
    let (after, allow) = crate::support::counting(approval_host::Decision::AllowOnce);
    let _permissive = rig
        .host
        .service
        .register("permissive", Scope::Global, Position::Back, allow);

    assert_eq!(rig.ask("bash").await, Outcome::Unavailable, "{name}");
    let decided = rig.last_decided();
    assert_eq!(
        decided,
        json!({"id": decided["id"], "outcome": "unavailable", "digest": plugin.digest(),
               "failure": {"plugin": name, "kind": kind}}),
        "{name}"
    );
    assert_eq!(after.load(std::sync::atomic::Ordering::SeqCst), 0);
    assert_eq!(plugin.idle_instances(), 0, "a failed instance is dropped");

    assert_eq!(
        rig.ask("ok").await,
        Outcome::AllowedOnce,
        "{name} serves again"
    );
    assert_eq!(rig.last_decided()["answerer"], name);
    drop(mounted);
}

#[tokio::test]
async fn trap_settles_unavailable() {
    contained("trapper", fixtures::trap(), "trap", |_| {}).await;
}

#[tokio::test]
async fn endless_loop_times_out() {
    contained("spinner", fixtures::endless_loop(), "timeout", |s| {
        s.timeout = Duration::from_millis(50)
    })
    .await;
}

#[tokio::test]
async fn memory_bomb_hits_the_cap() {
    contained("bomb", fixtures::memory_bomb(), "memory", |s| {
        s.memory_bytes = 4 << 20
    })
    .await;
}

#[tokio::test]
async fn stack_overflow_is_caught() {
    contained("deep", fixtures::stack_overflow(), "stack-overflow", |_| {}).await;
}

#[tokio::test]
async fn bad_discriminant_is_an_invalid_result() {
    contained(
        "liar",
        fixtures::bad_discriminant(),
        "invalid-result",
        |_| {},
    )
    .await;
}

#[tokio::test]
async fn out_of_bounds_pointer_is_an_invalid_result() {
    contained("wild", fixtures::out_of_bounds(), "invalid-result", |_| {}).await;
}

#[tokio::test]
async fn invalid_utf8_is_an_invalid_result() {
    contained(
        "garbled",
        fixtures::invalid_utf8(),
        "invalid-result",
        |_| {},
    )
    .await;
}

#[tokio::test]
async fn per_decision_isolation_also_contains_and_recovers() {
    contained("trapper", fixtures::trap(), "trap", |s| {
        s.isolation = Isolation::PerDecision
    })
    .await;
}

fn load_error(bytes: &[u8]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = fixtures::write(dir.path(), "bad.wasm", bytes);
    let host = PluginHost::new().unwrap();
    let err = host
        .load(&PluginSpec::new("bad", &path, Role::Gate))
        .unwrap_err();
    assert!(matches!(err, PluginError::Component { .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.starts_with("plugin \"bad\": path "), "{text}");
    assert!(text.contains("bad.wasm"), "{text}");
    text
}

#[test]
fn wrong_export_signature_is_refused_at_load() {
    let text = load_error(&fixtures::wrong_export_signature());
    assert!(
        text.contains("does not implement approval:plugin/answerer@0.1.x"),
        "{text}"
    );
    assert!(text.contains("decide"), "{text}");
}

#[test]
fn foreign_import_is_refused_at_load() {
    let text = load_error(&fixtures::foreign_import());
    assert!(
        text.contains("imports `test:fixtures/socket`, which the host does not provide"),
        "{text}"
    );
}

#[test]
fn a_core_module_is_refused_at_load() {
    let text = load_error(&wat::parse_str("(module)").unwrap());
    assert!(
        text.contains("core WebAssembly module, not a component"),
        "{text}"
    );
}

#[test]
fn a_digest_mismatch_is_refused_at_load() {
    let host = PluginHost::new().unwrap();
    let mut spec = PluginSpec::new("pinned", bundled::REJECT_ALL_PATH, Role::Answerer);
    spec.sha256 = Some("0".repeat(64));
    let err = host.load(&spec).unwrap_err();
    let actual = approval_host::plugin::digest(bundled::REJECT_ALL);
    assert_eq!(
        err.to_string(),
        format!(
            "plugin \"pinned\": sha256: the file's digest is {actual}, but the deployment pins {}",
            "0".repeat(64)
        )
    );
    spec.sha256 = Some(actual.clone());
    assert_eq!(host.load(&spec).unwrap().digest(), actual);
}

fn probe(rig: &Rig, name: &str, config: &[(&str, &str)], grant: Option<&Path>) -> Arc<Plugin> {
    rig.load(name, bundled::SANDBOX_PROBE, |s| {
        s.config = config
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        if let Some(dir) = grant {
            s.files.push(("/rules".to_owned(), dir.to_owned()));
        }
    })
}

#[tokio::test]
async fn the_sandbox_lends_only_what_the_deployment_grants() {
    let rig = rig().await;
    let rules = tempfile::tempdir().unwrap();
    std::fs::write(rules.path().join("allowed.txt"), "read me").unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "do not read").unwrap();
    // SAFETY: set before any plugin runs; tests in this binary do not read this variable.
    unsafe { std::env::set_var("APPROVAL_HOST_TEST_SECRET", "leaked") };

    // (probe config, grant, expected: allow-once when the attempt worked, rejected when it failed)
    let secret = outside.path().join("secret.txt");
    let secret = secret.to_str().unwrap();
    type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, bool, Outcome);
    let cases: Vec<Case> = vec![
        (
            "granted-read",
            vec![("probe", "read"), ("path", "/rules/allowed.txt")],
            true,
            Outcome::AllowedOnce,
        ),
        (
            "granted-list",
            vec![("probe", "list"), ("path", "/rules")],
            true,
            Outcome::AllowedOnce,
        ),
        (
            "granted-write",
            vec![("probe", "write"), ("path", "/rules/new.txt")],
            true,
            Outcome::Rejected,
        ),
        (
            "outside-read",
            vec![("probe", "read"), ("path", secret)],
            true,
            Outcome::Rejected,
        ),
        (
            "root-list",
            vec![("probe", "list"), ("path", "/")],
            true,
            Outcome::Rejected,
        ),
        (
            "ungranted-read",
            vec![("probe", "read"), ("path", "/rules/allowed.txt")],
            false,
            Outcome::Rejected,
        ),
        (
            "environment",
            vec![("probe", "env")],
            true,
            Outcome::Rejected,
        ),
    ];
    for (name, config, grant, expected) in cases {
        let plugin = probe(&rig, name, &config, grant.then_some(rules.path()));
        let reg = rig
            .host
            .service
            .register(name, Scope::Global, Position::Back, plugin.listener());
        assert_eq!(rig.ask("bash").await, expected, "{name}");
        drop(reg);
    }
    assert!(!rules.path().join("new.txt").exists());
    let lines = rig.log.lines();
    let failures: Vec<_> = lines
        .iter()
        .filter(|(p, _, m)| p == "outside-read" && m.starts_with("probe failed"))
        .collect();
    assert_eq!(failures.len(), 1, "{lines:?}");
}

#[tokio::test]
async fn stdout_and_stderr_go_to_the_host_log_tagged() {
    let rig = rig().await;
    let plugin = probe(&rig, "chatty", &[("probe", "stdio")], None);
    let _reg =
        rig.host
            .service
            .register("chatty", Scope::Global, Position::Back, plugin.listener());
    assert_eq!(rig.ask("bash").await, Outcome::AllowedOnce);
    let lines = rig.log.lines();
    assert!(
        lines.contains(&(
            "chatty".to_owned(),
            LogLevel::Info,
            "probe says hello on stdout".to_owned()
        )),
        "{lines:?}"
    );
    assert!(
        lines.contains(&(
            "chatty".to_owned(),
            LogLevel::Warn,
            "probe says hello on stderr".to_owned()
        )),
        "{lines:?}"
    );
}

fn example(name: &str, path: &str, role: Role, config: &[(&str, &str)]) -> PluginSpec {
    let mut spec = PluginSpec::new(name, path, role);
    spec.config = config
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    spec
}

fn examples() -> Vec<PluginSpec> {
    vec![
        example(
            "allow-tools",
            bundled::ALLOW_TOOLS_PATH,
            Role::Gate,
            &[("tools", "read, grep")],
        ),
        example(
            "deny-commands",
            bundled::DENY_COMMANDS_PATH,
            Role::Gate,
            &[("patterns", "rm -rf,curl ")],
        ),
        example("reject-all", bundled::REJECT_ALL_PATH, Role::Answerer, &[]),
    ]
}

#[tokio::test]
async fn example_plugins_decide_in_deployment_order() {
    let rig = rig().await;
    let deployment = Deployment {
        path: None,
        default_policy: Policy::Ask,
        plugins: examples(),
        ..Deployment::embedded()
    };
    let mut mounted = Mounted::load(&rig.host.service, &rig.plugins, &deployment).unwrap();
    assert_eq!(
        rig.host.service.waterfall().names(),
        ["allow-tools", "deny-commands", "reject-all"]
    );
    let service = &rig.host.service;
    let cases = [
        (
            "c1",
            "grep",
            json!({"pattern": "x"}),
            Outcome::AllowedOnce,
            Some("allow-tools"),
        ),
        (
            "c2",
            "bash",
            json!({"command": "rm -rf /tmp/x"}),
            Outcome::Rejected,
            Some("deny-commands"),
        ),
        (
            "c3",
            "bash",
            json!({"command": "ls"}),
            Outcome::Rejected,
            Some("reject-all"),
        ),
        (
            "c4",
            "bash",
            json!({"cmd": "rm -rf /"}),
            Outcome::Rejected,
            Some("reject-all"),
        ),
    ];
    for (call, tool, args, expected, answerer) in cases {
        service
            .record_tool_call(&rig.agent, call, tool, args)
            .await
            .unwrap();
        let outcome = service
            .request(ApprovalRequest::new(&rig.agent, tool).call_id(call))
            .await
            .unwrap();
        assert_eq!(outcome, expected, "{call}");
        assert_eq!(rig.last_decided()["answerer"], json!(answerer), "{call}");
    }
    // A request without a call id: deny-commands cannot read arguments and delegates.
    assert_eq!(rig.ask("bash").await, Outcome::Rejected);
    assert_eq!(rig.last_decided()["answerer"], "reject-all");
    let log = rig.log.lines();
    assert!(log.contains(&(
        "deny-commands".to_owned(),
        LogLevel::Info,
        "command matches \"rm -rf\": rejected".to_owned()
    )));

    assert!(mounted.unload("reject-all"));
    assert!(!mounted.unload("reject-all"));
    assert_eq!(
        rig.ask("bash").await,
        Outcome::Unavailable,
        "unload fails closed"
    );
    assert_eq!(rig.ask("read").await, Outcome::AllowedOnce);
    drop(mounted);
    assert!(rig.host.service.waterfall().names().is_empty());
    assert_eq!(rig.ask("read").await, Outcome::Unavailable);
}

#[tokio::test]
async fn a_slow_plugin_never_stalls_other_requests_and_cancellation_stops_it() {
    slow_plugin_case().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_plugin_never_stalls_other_requests_on_a_multi_threaded_runtime() {
    slow_plugin_case().await;
}

async fn slow_plugin_case() {
    let mut rig = rig().await;
    let spinner = rig.load("spinner", &fixtures::endless_loop(), |s| {
        s.timeout = Duration::from_secs(30)
    });
    let slow_agent = rig.host.service.agent(S, "slow").await.unwrap();
    let _slow = rig.host.service.register(
        "spinner",
        Scope::Agent(slow_agent.clone()),
        Position::Back,
        spinner.listener(),
    );
    let allow = rig.load("allow", bundled::ALLOW_TOOLS, |s| {
        s.config.insert("tools".into(), "bash".into());
    });
    let _fast = rig.host.service.register(
        "allow",
        Scope::Agent(rig.agent.clone()),
        Position::Back,
        allow.listener(),
    );

    let token = CancellationToken::new();
    let service = rig.host.service.clone();
    let req = ApprovalRequest::new(&slow_agent, "bash").cancel(token.clone());
    let slow = tokio::spawn(async move { service.request(req).await });
    assert_eq!(rig.logged.recv().await.unwrap(), "looping");

    for _ in 0..20 {
        assert_eq!(rig.ask("bash").await, Outcome::AllowedOnce);
    }
    assert!(!slow.is_finished(), "the spinning plugin is still running");
    token.cancel();
    assert_eq!(slow.await.unwrap().unwrap(), Outcome::Cancelled);
    // The guest was stopped, not left spinning until its 30 s deadline: the next request on the
    // same plugin gets a fresh instance and runs (and spins) again.
    let token = CancellationToken::new();
    let service = rig.host.service.clone();
    let req = ApprovalRequest::new(&slow_agent, "bash").cancel(token.clone());
    let again = tokio::spawn(async move { service.request(req).await });
    assert_eq!(rig.logged.recv().await.unwrap(), "looping");
    token.cancel();
    assert_eq!(again.await.unwrap().unwrap(), Outcome::Cancelled);
}

#[tokio::test]
async fn many_concurrent_requests_across_plugins() {
    let rig = rig().await;
    let deployment = Deployment {
        path: None,
        default_policy: Policy::Ask,
        plugins: examples(),
        ..Deployment::embedded()
    };
    let _mounted = Mounted::load(&rig.host.service, &rig.plugins, &deployment).unwrap();
    let mut tasks = Vec::new();
    for i in 0..128 {
        let service = rig.host.service.clone();
        let agent = rig.agent.clone();
        let tool = if i % 2 == 0 { "read" } else { "bash" };
        tasks.push(tokio::spawn(async move {
            let outcome = service
                .request(ApprovalRequest::new(&agent, tool))
                .await
                .unwrap();
            (tool, outcome)
        }));
    }
    for t in tasks {
        let (tool, outcome) = t.await.unwrap();
        let expected = if tool == "read" {
            Outcome::AllowedOnce
        } else {
            Outcome::Rejected
        };
        assert_eq!(outcome, expected);
    }
    rig.host.service.end_turn(S).await.unwrap();
    let checked =
        approval_host::check::check_file(&crate::support::log_path(rig.host.dir.path(), S))
            .unwrap();
    assert_eq!(checked.problem, None);
    assert_eq!(checked.summary.questions, 128);
}

#[tokio::test]
async fn never_policy_runs_no_plugin() {
    let rig = rig().await;
    let spinner = rig.load("spinner", &fixtures::endless_loop(), |_| {});
    let _reg = rig.host.service.register(
        "spinner",
        Scope::Global,
        Position::Front,
        spinner.listener(),
    );
    rig.host
        .service
        .set_policy(&rig.agent, Policy::Never, Some("user"))
        .await
        .unwrap();
    assert_eq!(rig.ask("bash").await, Outcome::Rejected);
    assert!(rig.log.lines().is_empty(), "the plugin never ran");
    let _ = ApprovalService::clone(&rig.host.service);
}

#[tokio::test]
async fn a_later_0_1_patch_loads_and_an_unserved_version_is_refused_by_version() {
    let rig = rig().await;
    let plugin = rig.load("patched", &fixtures::versioned("0.1.3"), |_| {});
    assert_eq!(plugin.api_version(), "0.1.3");
    let _reg =
        rig.host
            .service
            .register("patched", Scope::Global, Position::Back, plugin.listener());
    assert_eq!(rig.ask("bash").await, Outcome::AllowedOnce);

    let text = load_error(&fixtures::versioned("0.4.0"));
    assert!(
        text.ends_with(
            "is built against approval:plugin@0.4.0; this host serves approval:plugin@0.1.x, approval:plugin@0.2.x, approval:plugin@0.3.x"
        ),
        "{text}"
    );
}

#[tokio::test]
async fn a_plugin_over_the_inline_budget_still_decides_and_then_decides_off_the_workers() {
    let rig = rig().await;
    let fast = rig.load("fast", &fixtures::slow_then_allows(), |_| {});
    let slow = rig.load("slow", &fixtures::slow_then_allows(), |s| {
        s.timeout = Duration::from_secs(30);
    });
    // A plugin importing only the host interface starts in place; one importing WASI never does.
    assert!(!fast.is_slow());
    let wasi = rig
        .plugins
        .load(&example(
            "probe-wasi",
            bundled::SANDBOX_PROBE_PATH,
            Role::Answerer,
            &[],
        ))
        .unwrap();
    assert!(wasi.is_slow());

    let _fast = rig
        .host
        .service
        .register("fast", Scope::Global, Position::Back, fast.listener());
    // (Whether it stays in place depends on the wall clock: a loaded machine can stall a fast
    // answer past the budget, which only moves the plugin off the workers.)
    assert_eq!(rig.ask("ok").await, Outcome::AllowedOnce);
    drop(_fast);

    let _slow = rig
        .host
        .service
        .register("slow", Scope::Global, Position::Back, slow.listener());
    // Stopped at the budget, run again from the start off the workers: the same answer, not a
    // failure.
    assert_eq!(rig.ask("count").await, Outcome::AllowedOnce);
    assert!(slow.is_slow());
    assert_eq!(rig.ask("count").await, Outcome::AllowedOnce);
    let decided: Vec<Value> = rig
        .host
        .events(S)
        .into_iter()
        .filter(|(t, _)| t == "approval/decided")
        .map(|(_, d)| d)
        .collect();
    assert_eq!(decided.len(), 3);
    for d in &decided[1..] {
        assert_eq!(d["outcome"], "allowed-once");
        assert_eq!(d["answerer"], "slow");
        assert!(d.get("failure").is_none(), "{d}");
    }
}
