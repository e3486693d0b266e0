//! Plugin API 0.2 beside 0.1: both versions load side by side in one deployment and decide; a
//! 0.2 gate's reason reaches the audit log and the model's text (and the reference texts stand
//! where nobody said why, and under policy `never`); a config a 0.2 plugin refuses is refused at
//! load with the plugin's own words; and hostile 0.2 answers (a 100 MB reason, a reason that is
//! not UTF-8, control characters, empty or absurd rule proposals, a `validate-config` that traps
//! or never returns) are contained, granting nothing beyond one call.

use std::sync::Arc;
use std::time::Duration;

use approval_host::answer::{CUT_MARKER, MAX_REASON_BYTES};
use approval_host::config::{PluginSpec, Role};
use approval_host::plugin::TracingSink;
use approval_host::tools::texts;
use approval_host::{
    Agent, ApprovalRequest, Deployment, Mounted, Outcome, PluginError, PluginHost, Policy, bundled,
};
use serde_json::{Value, json};

use crate::fixtures;
use crate::support::Host;

fn spec(name: &str, path: &str, role: Role, config: &[(&str, &str)]) -> PluginSpec {
    let mut spec = PluginSpec::new(name, path, role);
    spec.config = config
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    spec
}

fn deployment(plugins: Vec<PluginSpec>) -> Deployment {
    Deployment {
        path: None,
        default_policy: Policy::Ask,
        plugins,
        ..Deployment::embedded()
    }
}

async fn open(host: &Host, session: &str) -> Agent {
    let agent = host.service.agent(session, "agent").await.unwrap();
    host.service.start_turn(session).await.unwrap();
    agent
}

fn last_decided(host: &Host, session: &str) -> Value {
    host.events(session)
        .into_iter()
        .rev()
        .find(|(t, _)| t == "approval/decided")
        .map(|(_, d)| d)
        .unwrap()
}

/// The exact text the model reads when `deny-commands` (0.2, default reason) rejects `rm -rf`.
const DENY_RM_RF: &str = "tool \"Bash\" was rejected by policy \"deny-commands\": the command contains \"rm -rf\", which this deployment does not allow";

#[tokio::test]
async fn both_api_versions_decide_side_by_side_and_a_gate_s_reason_reaches_the_model() {
    let host = Host::new();
    let plugins = PluginHost::new().unwrap();
    let deployment = deployment(vec![
        spec(
            "allow-tools",
            bundled::ALLOW_TOOLS_PATH,
            Role::Gate,
            &[("tools", "Read")],
        ),
        spec(
            "deny-commands",
            bundled::DENY_COMMANDS_PATH,
            Role::Gate,
            &[("patterns", "rm -rf")],
        ),
        spec("reject-all", bundled::REJECT_ALL_PATH, Role::Answerer, &[]),
    ]);
    let mounted = Mounted::load(&host.service, &plugins, &deployment).unwrap();
    let versions: Vec<(String, Option<String>)> = mounted
        .status()
        .into_iter()
        .map(|p| (p.name, p.api_version))
        .collect();
    assert_eq!(
        versions,
        [
            ("allow-tools".to_owned(), Some("0.2.0".to_owned())),
            ("deny-commands".to_owned(), Some("0.2.0".to_owned())),
            ("reject-all".to_owned(), Some("0.1.0".to_owned())),
        ]
    );

    let agent = open(&host, "s").await;
    let service = &host.service;
    let ask = |call: &'static str, tool: &'static str, args: Value| {
        let agent = agent.clone();
        async move {
            service
                .record_tool_call(&agent, call, tool, args)
                .await
                .unwrap();
            service
                .ask(
                    ApprovalRequest::new(&agent, tool)
                        .call_id(call)
                        .cwd("/work"),
                )
                .await
                .unwrap()
        }
    };

    let read = ask("c1", "Read", json!({"file_path": "a"})).await;
    assert_eq!(read.outcome, Outcome::AllowedOnce);
    assert_eq!(read.answerer.as_deref(), Some("allow-tools"));

    // The 0.2 gate reads the arguments from the request and says why.
    let rm = ask("c2", "Bash", json!({"command": "rm -rf build/"})).await;
    assert_eq!(rm.outcome, Outcome::Rejected);
    assert_eq!(
        rm.reason.as_deref(),
        Some("the command contains \"rm -rf\", which this deployment does not allow")
    );
    assert_eq!(texts::rejection("Bash", &rm), DENY_RM_RF);
    let decided = last_decided(&host, "s");
    assert_eq!(decided["answerer"], "deny-commands");
    assert_eq!(
        decided["reason"],
        "the command contains \"rm -rf\", which this deployment does not allow"
    );

    // The 0.1 answerer behind it decides exactly as before: no reason, the reference text.
    let ls = ask("c3", "Bash", json!({"command": "ls"})).await;
    assert_eq!(ls.outcome, Outcome::Rejected);
    assert_eq!(ls.answerer.as_deref(), Some("reject-all"));
    assert_eq!(ls.reason, None);
    assert_eq!(
        texts::rejection("Bash", &ls),
        "the user rejected tool \"Bash\""
    );
    assert!(last_decided(&host, "s").get("reason").is_none());

    // Under policy `never`, nothing runs and the reference text stands.
    service
        .set_policy(&agent, Policy::Never, Some("user"))
        .await
        .unwrap();
    let never = ask("c4", "Bash", json!({"command": "rm -rf /"})).await;
    assert_eq!(never.outcome, Outcome::Rejected);
    assert_eq!(never.answerer, None);
    assert_eq!(
        texts::rejection("Bash", &never),
        "the user rejected tool \"Bash\""
    );
    service.end_turn("s").await.unwrap();
}

#[tokio::test]
async fn a_config_a_0_2_plugin_refuses_is_refused_at_load_in_its_own_words() {
    let plugins = PluginHost::new().unwrap();
    let typo = spec(
        "deny-commands",
        bundled::DENY_COMMANDS_PATH,
        Role::Gate,
        &[("commands", "rm -rf")],
    );
    let err = plugins.load(&typo).unwrap_err();
    assert_eq!(
        err.to_string(),
        "plugin \"deny-commands\": config: unknown key \"commands\": deny-commands reads only \"patterns\" and \"reason\""
    );
    // A 0.1 plugin has no validate-config: it loads with any keys, as before.
    let old = spec(
        "reject-all",
        bundled::REJECT_ALL_PATH,
        Role::Answerer,
        &[("anything", "x")],
    );
    assert_eq!(plugins.load(&old).unwrap().api_version(), "0.1.0");
}

fn hostile(validate: &str) -> (PluginSpec, Vec<u8>) {
    let mut spec = PluginSpec::new("hostile", "hostile.wasm", Role::Gate);
    spec.memory_bytes = 256 << 20;
    spec.timeout = Duration::from_millis(500);
    (spec, fixtures::v0_2_gate(validate))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_0_2_answers_are_contained_and_grant_nothing_beyond_one_call() {
    let host = Host::new();
    let plugins = PluginHost::with_log_sink(Arc::new(TracingSink)).unwrap();
    let (spec, bytes) = hostile(fixtures::validate::OK);
    let plugin = plugins.load_bytes(&spec, &bytes).unwrap();
    assert_eq!(plugin.api_version(), "0.2.0");
    let _mounted = Mounted::mount(&host.service, vec![plugin]);
    let agent = open(&host, "h").await;
    let ask = |tool: &'static str| {
        let agent = agent.clone();
        let service = host.service.clone();
        async move {
            service
                .ask(ApprovalRequest::new(&agent, tool))
                .await
                .unwrap()
        }
    };

    // A 100 MB reason: cut to 1 KiB with the marker.
    let huge = ask("huge").await;
    assert_eq!(huge.outcome, Outcome::Rejected);
    let reason = huge.reason.clone().unwrap();
    assert!(reason.len() <= MAX_REASON_BYTES, "{}", reason.len());
    assert!(reason.ends_with(CUT_MARKER), "{reason}");
    assert!(reason.starts_with("aaaa"), "{reason}");
    assert_eq!(last_decided(&host, "h")["reason"], reason.as_str());

    // A reason that is not UTF-8 does not fit the contract: contained, unavailable.
    let bad = ask("utf8").await;
    assert_eq!(bad.outcome, Outcome::Unavailable);
    let decided = last_decided(&host, "h");
    assert_eq!(decided["failure"]["plugin"], "hostile");
    assert!(decided.get("reason").is_none());

    // Control characters never reach a log line or the model.
    let control = ask("control").await;
    assert_eq!(control.outcome, Outcome::Rejected);
    assert_eq!(control.reason.as_deref(), Some("no way"));

    // An empty rule is refused; the call gets its one-shot grant and nothing more.
    let empty = ask("empty").await;
    assert_eq!(empty.outcome, Outcome::AllowedOnce);
    assert!(last_decided(&host, "h").get("proposal").is_none());

    // An absurd rule (a 2 MB pattern) is refused; the rejection and its reason stand.
    let absurd = ask("absurd").await;
    assert_eq!(absurd.outcome, Outcome::Rejected);
    assert_eq!(absurd.reason.as_deref(), Some("absurd"));
    assert!(last_decided(&host, "h").get("proposal").is_none());

    // The host is unharmed: the plugin still serves.
    assert_eq!(ask("ok").await.outcome, Outcome::AllowedOnce);
    host.service.end_turn("h").await.unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_approval-host"))
        .arg("--state-dir")
        .arg(host.dir.path())
        .args(["log", "h"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_validate_config_that_traps_or_never_returns_refuses_the_plugin_at_load() {
    let plugins = PluginHost::new().unwrap();
    for (body, want) in [
        (
            fixtures::validate::TRAP,
            "plugin \"hostile\": config: validate-config failed: trap: ",
        ),
        (
            fixtures::validate::LOOP,
            "plugin \"hostile\": config: validate-config ran past the plugin's timeout: timeout: ",
        ),
    ] {
        let (spec, bytes) = hostile(body);
        let err = plugins.load_bytes(&spec, &bytes).unwrap_err();
        assert!(matches!(err, PluginError::Config { .. }), "{err:?}");
        assert!(err.to_string().starts_with(want), "{err}");
    }
}
