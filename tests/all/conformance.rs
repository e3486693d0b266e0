//! One conformance suite for every language's build of each gate: the data-driven cases in
//! `tests/conformance/cases.json` run against a native reference listener and the Rust, Python,
//! JavaScript and C builds of `allow-tools` and `deny-commands`; every build must give the expected
//! answer, or the suite names the language, the case and both answers. Then each language's
//! adversarial gate panics or throws, loops and allocates without end: each settles
//! `unavailable` with the failure recorded, and the next request succeeds.
//!
//! The Python, JavaScript and C components come from `plugins/build-guests` (`.ci/setup`, the README's set-up
//! and `.ci/run` run it); a missing one fails the suite with that instruction.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use approval_host::conformance::{self, Case, Suite};
use approval_host::plugin::TracingSink;
use approval_host::plugin::cache::CompiledCache;
use approval_host::{Decision, Explained, Failure, PluginHost, Question, bundled};
use serde_json::Value;

use crate::support::Host;

const CASES: &str = include_str!("../conformance/cases.json");

fn suite() -> Suite {
    Suite::parse(Path::new("tests/conformance/cases.json"), CASES).unwrap()
}

/// The languages with a component build of every gate.
const LANGUAGES: [&str; 4] = ["rust", "python", "js", "c"];
const GATES: [&str; 2] = ["allow-tools", "deny-commands"];

/// Where `plugins/build-guests` leaves the Python and JavaScript components.
pub(crate) fn guests_dir() -> PathBuf {
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
            "{}: {e}: build the {language} guests with plugins/build-guests (see .ci/setup)",
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

/// The native reference: the gates' documented behaviour, written independently of any guest:
/// the answer, and its reason (for a refused config, the refusal's message).
fn reference(case: &Case) -> (conformance::Answer, Option<String>) {
    use conformance::Answer;
    let known: &[&str] = match case.gate.as_deref().unwrap_or_default() {
        "allow-tools" => &["tools"],
        "deny-commands" => &["patterns", "reason"],
        other => panic!("no reference for gate {other}"),
    };
    if let Some(key) = case.config.keys().find(|k| !known.contains(&k.as_str())) {
        let reads = known
            .iter()
            .map(|k| format!("\"{k}\""))
            .collect::<Vec<_>>()
            .join(" and ");
        let message = format!(
            "unknown key \"{key}\": {} reads only {reads}",
            case.gate.as_deref().unwrap_or_default()
        );
        return (Answer::Refused(message.clone()), Some(message));
    }
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
    let decided = |d: Decision| (Answer::Decided(d), None);
    match case.gate.as_deref().unwrap_or_default() {
        "allow-tools" if listed("tools").contains(&case.tool) => decided(Decision::AllowOnce),
        "allow-tools" => decided(Decision::Next),
        _ => {
            let command = case
                .call_id
                .as_ref()
                .and(case.arguments.as_ref())
                .and_then(|a| a.get("command"))
                .and_then(Value::as_str);
            let matched = command.and_then(|c| {
                listed("patterns")
                    .into_iter()
                    .find(|p| c.contains(p.as_str()))
            });
            match matched {
                Some(pattern) => {
                    let reason = case.config.get("reason").cloned().unwrap_or_else(|| {
                        format!(
                            "the command contains \"{pattern}\", which this deployment does not allow"
                        )
                    });
                    (Answer::Decided(Decision::Reject), Some(reason))
                }
                None => decided(Decision::Next),
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_language_answers_every_case_like_the_reference() {
    let suite = suite();
    let cases = &suite.cases;
    let mut mismatches = Vec::new();
    let reference_answers: Vec<(conformance::Answer, Option<String>)> =
        cases.iter().map(reference).collect();

    // The reference itself must meet the expectations, through the same service path.
    let host = Host::new();
    for (i, case) in cases.iter().enumerate() {
        let (answer, reason) = reference_answers[i].clone();
        let (got, got_reason) = match answer {
            conformance::Answer::Decided(decision) => {
                let answer = approval_host::Answer {
                    decision,
                    reason: reason.clone(),
                    proposal: None,
                    rule: None,
                    by: None,
                    authority: None,
                };
                let listener = Explained(move |_q: Question| {
                    let answer = answer.clone();
                    async move { Ok::<_, Failure>(answer) }
                });
                conformance::ask_explained(&host.service, &format!("case-{i}"), case, listener)
                    .await
                    .unwrap()
            }
            refused => (refused, reason.clone()),
        };
        let pinned = case
            .reason
            .as_ref()
            .is_none_or(|r| got_reason.as_ref() == Some(r));
        if got.to_string() != case.expect || !pinned {
            mismatches.push(format!(
                "native reference: case {:?}: answered {got} {got_reason:?}, expected {} {:?}",
                case.name, case.expect, case.reason
            ));
        }
    }

    let plugins = plugin_host();
    for language in LANGUAGES {
        for gate in GATES {
            let host = Host::new();
            let (path, bytes) = component(language, gate);
            let gate_cases: Vec<(usize, &Case)> = cases
                .iter()
                .enumerate()
                .filter(|(_, c)| c.gate.as_deref() == Some(gate))
                .collect();
            let results = conformance::run(
                &plugins,
                &conformance::spec(gate, &path),
                &bytes,
                gate_cases.iter().map(|(_, c)| *c),
                &host.service,
            )
            .await
            .unwrap_or_else(|e| panic!("{language} {gate}: {e}"));
            for ((i, case), result) in gate_cases.iter().zip(results) {
                let (reference, reference_reason) = &reference_answers[*i];
                if !result.passed()
                    || result.answer.to_string() != reference.to_string()
                    || result.reason != *reference_reason
                {
                    mismatches.push(format!(
                        "{language}: case {:?} ({gate}): the {language} build answered {} {:?}, the native reference {reference} {reference_reason:?}, expected {} {:?}",
                        case.name, result.answer, result.reason, case.expect, case.reason
                    ));
                }
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
    let cases: Vec<Case> = ADVERSARIAL
        .iter()
        .enumerate()
        .map(|(i, (tool, expect))| Case {
            name: format!("step {i}: {tool}"),
            gate: None,
            config: BTreeMap::new(),
            tool: (*tool).to_owned(),
            call_id: None,
            arguments: None,
            expect: (*expect).to_owned(),
            reason: None,
        })
        .collect();
    let mut mismatches = Vec::new();
    for language in LANGUAGES {
        let host = Host::new();
        let (path, bytes) = component(language, "adversary");
        let mut spec = conformance::spec("adversary", &path);
        // Long enough for an interpreter to reach the memory cap before the deadline.
        spec.timeout = Duration::from_millis(1500);
        spec.memory_bytes = 128 << 20;
        let results = conformance::run(&plugins, &spec, &bytes, &cases, &host.service)
            .await
            .unwrap_or_else(|e| panic!("{language} adversary: {e}"));
        for result in results.iter().filter(|r| !r.passed()) {
            mismatches.push(format!(
                "{language}: adversarial {}: answered {}, expected {}",
                result.name, result.answer, result.expect
            ));
        }
    }
    assert!(mismatches.is_empty(), "\n{}", mismatches.join("\n"));
}
