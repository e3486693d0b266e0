//! One conformance suite for every language's build of each gate: the data-driven cases in
//! `tests/conformance/cases.json` run against a native reference listener and the Rust, Python
//! and JavaScript builds of `allow-tools` and `deny-commands`; every build must give the expected
//! answer, or the suite names the language, the case and both answers. Then each language's
//! adversarial gate panics or throws, loops and allocates without end: each settles
//! `unavailable` with the failure recorded, and the next request succeeds.
//!
//! The Python and JavaScript components come from `plugins/build-guests` (the README's set-up
//! and `.ci/run` run it); a missing one fails the suite with that instruction.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use approval_host::config::{PluginSpec, Role};
use approval_host::plugin::TracingSink;
use approval_host::plugin::cache::CompiledCache;
use approval_host::{
    ApprovalRequest, Decision, Failure, Plugin, PluginHost, Position, Question, Scope, bundled,
};
use serde::Deserialize;
use serde_json::Value;

use crate::support::Host;

const CASES: &str = include_str!("../conformance/cases.json");

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Suite {
    #[allow(dead_code)]
    about: String,
    cases: Vec<Case>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    name: String,
    gate: String,
    config: BTreeMap<String, String>,
    tool: String,
    call_id: Option<String>,
    arguments: Option<Value>,
    expect: String,
}

fn cases() -> Vec<Case> {
    serde_json::from_str::<Suite>(CASES)
        .expect("tests/conformance/cases.json")
        .cases
}

/// The languages with a component build of every gate.
const LANGUAGES: [&str; 3] = ["rust", "python", "js"];
const GATES: [&str; 2] = ["allow-tools", "deny-commands"];

/// Where `plugins/build-guests` leaves the Python and JavaScript components.
fn guests_dir() -> PathBuf {
    std::env::var_os("APPROVAL_HOST_GUESTS_DIR").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/guests"),
        PathBuf::from,
    )
}

/// A component's bytes and where they came from.
fn component(language: &str, name: &str) -> (PathBuf, Vec<u8>) {
    if language == "rust" {
        let (path, bytes) = match name {
            "allow-tools" => (bundled::ALLOW_TOOLS_PATH, bundled::ALLOW_TOOLS),
            "deny-commands" => (bundled::DENY_COMMANDS_PATH, bundled::DENY_COMMANDS),
            "adversary" => (bundled::ADVERSARY_PATH, bundled::ADVERSARY),
            other => panic!("no Rust guest {other}"),
        };
        return (PathBuf::from(path), bytes.to_vec());
    }
    let path = guests_dir().join(language).join(format!("{name}.wasm"));
    let bytes = std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}: build the {language} guests with plugins/build-guests (see the README's set-up)",
            path.display()
        )
    });
    (path, bytes)
}

/// A plugin host that keeps compiled components across test runs: the Python and JavaScript
/// components take seconds to compile.
fn plugin_host() -> PluginHost {
    PluginHost::with_cache(
        Arc::new(TracingSink),
        CompiledCache::new(guests_dir().join("compiled")),
    )
    .unwrap()
}

/// The native reference: the gates' documented behaviour, written independently of any guest.
fn reference(case: &Case) -> Decision {
    let listed = |key: &str| -> Vec<String> {
        case.config
            .get(key)
            .map(|v| {
                v.split(',')
                    .map(|s| s.trim().to_owned())
                    .filter(|s| !s.is_empty())
                    .collect()
            })
            .unwrap_or_default()
    };
    match case.gate.as_str() {
        "allow-tools" if listed("tools").contains(&case.tool) => Decision::AllowOnce,
        "allow-tools" => Decision::Next,
        "deny-commands" => {
            let command = case
                .call_id
                .as_ref()
                .and(case.arguments.as_ref())
                .and_then(|a| a.get("command"))
                .and_then(Value::as_str);
            match command {
                Some(c) if listed("patterns").iter().any(|p| c.contains(p.as_str())) => {
                    Decision::Reject
                }
                _ => Decision::Next,
            }
        }
        other => panic!("no reference for gate {other}"),
    }
}

/// What an implementation answered, read back from the session log: the decision, or the
/// failure that settled the request.
fn answer_of(decided: &Value) -> String {
    if let Some(kind) = decided["failure"]["kind"].as_str() {
        return format!("failed ({kind})");
    }
    match decided["outcome"].as_str().unwrap() {
        "allowed-once" => "allow-once",
        "rejected" => "reject",
        "cancelled" => "cancel",
        "unavailable" => "next",
        other => panic!("unknown outcome {other}"),
    }
    .to_owned()
}

fn decision_name(d: Decision) -> &'static str {
    match d {
        Decision::AllowOnce => "allow-once",
        Decision::Reject => "reject",
        Decision::Cancel => "cancel",
        Decision::Next => "next",
    }
}

/// Asks `case` in its own session with `listener` as the only answerer; returns the answer.
async fn ask(
    host: &Host,
    index: usize,
    case: &Case,
    listener: impl approval_host::Listener,
) -> String {
    let session = format!("case-{index}");
    let agent = host.service.agent(&session, "agent").await.unwrap();
    host.service.start_turn(&session).await.unwrap();
    let _registration = host.service.register(
        &case.gate,
        Scope::Agent(agent.clone()),
        Position::Front,
        listener,
    );
    if let (Some(call_id), Some(arguments)) = (&case.call_id, &case.arguments) {
        host.service
            .record_tool_call(&agent, call_id, &case.tool, arguments.clone())
            .await
            .unwrap();
    }
    let mut request = ApprovalRequest::new(&agent, case.tool.clone());
    if let Some(call_id) = &case.call_id {
        request = request.call_id(call_id.clone());
    }
    host.service.request(request).await.unwrap();
    host.service.end_turn(&session).await.unwrap();
    let decided = host
        .events(&session)
        .into_iter()
        .rev()
        .find(|(t, _)| t == "approval/decided")
        .unwrap()
        .1;
    answer_of(&decided)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_language_answers_every_case_like_the_reference() {
    let cases = cases();
    let mut mismatches = Vec::new();
    let reference_answers: Vec<&'static str> =
        cases.iter().map(|c| decision_name(reference(c))).collect();

    // The reference itself must meet the expectations, through the same service path.
    let host = Host::new();
    for (i, case) in cases.iter().enumerate() {
        let decision = reference(case);
        let got = ask(&host, i, case, move |_q: Question| async move {
            Ok::<_, Failure>(decision)
        })
        .await;
        if got != case.expect {
            mismatches.push(format!(
                "native reference: case {:?}: answered {got}, expected {}",
                case.name, case.expect
            ));
        }
    }

    let plugins = plugin_host();
    for language in LANGUAGES {
        let host = Host::new();
        let builds: HashMap<&str, (PathBuf, Vec<u8>)> =
            GATES.iter().map(|g| (*g, component(language, g))).collect();
        let mut loaded: HashMap<(String, BTreeMap<String, String>), Arc<Plugin>> = HashMap::new();
        for (i, case) in cases.iter().enumerate() {
            let plugin = loaded
                .entry((case.gate.clone(), case.config.clone()))
                .or_insert_with(|| {
                    let (path, bytes) = &builds[case.gate.as_str()];
                    let mut spec = PluginSpec::new(&case.gate, path, Role::Gate);
                    spec.config = case.config.clone();
                    plugins
                        .load_bytes(&spec, bytes)
                        .unwrap_or_else(|e| panic!("{language} {}: {e}", case.gate))
                })
                .clone();
            let got = ask(&host, i, case, plugin.listener()).await;
            if got != case.expect || got != reference_answers[i] {
                mismatches.push(format!(
                    "{language}: case {:?} ({}): the {language} build answered {got}, the native reference {}, expected {}",
                    case.name, case.gate, reference_answers[i], case.expect
                ));
            }
        }
    }
    assert!(mismatches.is_empty(), "\n{}", mismatches.join("\n"));
}

/// The adversarial sequence: each misbehaviour settles `unavailable` with its failure kind, and
/// a good request right after it is granted.
const ADVERSARIAL: [(&str, &str); 7] = [
    ("ok", "allow-once"),
    ("throw", "failed (trap)"),
    ("ok", "allow-once"),
    ("loop", "failed (timeout)"),
    ("ok", "allow-once"),
    ("alloc", "failed (memory)"),
    ("ok", "allow-once"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_language_contains_throws_loops_and_runaway_allocation() {
    let plugins = plugin_host();
    let mut mismatches = Vec::new();
    for language in LANGUAGES {
        let host = Host::new();
        let (path, bytes) = component(language, "adversary");
        let mut spec = PluginSpec::new("adversary", &path, Role::Gate);
        // Long enough for an interpreter to reach the memory cap before the deadline.
        spec.timeout = Duration::from_millis(1500);
        spec.memory_bytes = 128 << 20;
        let plugin = plugins
            .load_bytes(&spec, &bytes)
            .unwrap_or_else(|e| panic!("{language} adversary: {e}"));
        for (i, (tool, expect)) in ADVERSARIAL.iter().enumerate() {
            let case = Case {
                name: format!("{tool} #{i}"),
                gate: "adversary".to_owned(),
                config: BTreeMap::new(),
                tool: (*tool).to_owned(),
                call_id: None,
                arguments: None,
                expect: (*expect).to_owned(),
            };
            let got = ask(&host, i, &case, plugin.listener()).await;
            if got != *expect {
                mismatches.push(format!(
                    "{language}: adversarial step {i} ({tool}): answered {got}, expected {expect}"
                ));
            }
        }
    }
    assert!(mismatches.is_empty(), "\n{}", mismatches.join("\n"));
}
