//! What standing rules cost a decision: a request through the seam with the rule gate first and
//! 0, 100 or 10,000 rules, against the same request with rules off, both when a rule decides the
//! call and when none does (the call then goes on to a native gate that grants).
//!
//! The session log discards its bytes, so the figures are the seam, the rule index and the
//! matching alone. The rules are a mix of command prefixes over many first words, exact
//! commands, path globs and domains, so the index (by tool, then by the command's first word) is
//! what keeps 10,000 rules cheap. Run:
//! `RUST_BACKTRACE=0 RUST_LIB_BACKTRACE=0 cargo bench -p approval-host --bench rules`
//! (`BENCH_SAMPLES`, default 20000).

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use approval_host::answer::Effect;
use approval_host::rules::{self, RuleBook};
use approval_host::{
    Agent, ApprovalRequest, ApprovalService, Decision, Failure, Outcome, Policy, Position,
    Question, Scope,
};
use serde_json::json;

use common::NullStore;

/// `n` deployment rules (they stay put across the book's refreshes of the discarding store),
/// one of which allows `cargo test:*`.
fn book(service: &ApprovalService, n: usize) -> Arc<RuleBook> {
    let mut statics = Vec::with_capacity(n);
    for i in 0..n {
        let text = match i % 4 {
            0 => format!("Bash(tool{i} run:*)"),
            1 => format!("Bash(cmd{} --flag {i})", i % 97),
            2 => format!("Read(//srv/project{i}/**)"),
            _ => format!("WebFetch(domain:host{i}.example.com)"),
        };
        statics.push(
            RuleBook::deployment_rule(format!("r{i}"), &text, Effect::Allow, "bench", None)
                .unwrap(),
        );
    }
    if n > 0 {
        statics[0] = RuleBook::deployment_rule(
            "r0".to_owned(),
            "Bash(cargo test:*)",
            Effect::Allow,
            "bench",
            None,
        )
        .unwrap();
    }
    RuleBook::open(
        service.store(),
        "bench",
        statics,
        vec![],
        rules::system_clock(),
    )
    .unwrap()
}

async fn latencies(
    service: &ApprovalService,
    agent: &Agent,
    call: &str,
    samples: usize,
) -> Vec<Duration> {
    for _ in 0..samples / 10 {
        service
            .request(ApprovalRequest::new(agent, "Bash").call_id(call))
            .await
            .unwrap();
    }
    let mut out = Vec::with_capacity(samples);
    for _ in 0..samples {
        let start = Instant::now();
        let outcome = service
            .request(ApprovalRequest::new(agent, "Bash").call_id(call))
            .await
            .unwrap();
        out.push(start.elapsed());
        assert_eq!(outcome, Outcome::AllowedOnce);
    }
    out.sort();
    out
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn main() {
    let samples: usize = std::env::var("BENCH_SAMPLES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_000);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        println!(
            "decision latency with standing rules (log discarded), {samples} samples, RUST_BACKTRACE={:?}",
            std::env::var("RUST_BACKTRACE").unwrap_or_default()
        );
        println!(
            "{:<44} {:>10} {:>10} {:>12}",
            "scenario", "median µs", "p99 µs", "vs rules off"
        );
        let mut baseline = None;
        for rules in [None, Some(0), Some(100), Some(10_000)] {
            for (label, call, command) in [
                // With rules, `cargo test:*` decides the first; nothing matches the second, which
                // goes on to the gate.
                ("`cargo test --release`", "hit", "cargo test --release"),
                ("`make all`", "miss", "make all"),
            ] {
                let service = ApprovalService::new(NullStore, Policy::Ask);
                let _book = rules.map(|n| {
                    let b = book(&service, n);
                    service.set_rules(Some(b.clone()));
                    b
                });
                // The gate behind the rules: grants whatever reaches it.
                let _gate = service.register(
                    "grant",
                    Scope::Global,
                    Position::Back,
                    |_q: Question| async { Ok::<_, Failure>(Decision::AllowOnce) },
                );
                let agent = service.agent("s", "a").await.unwrap();
                service.start_turn("s").await.unwrap();
                service
                    .record_tool_call(&agent, call, "Bash", json!({ "command": command }))
                    .await
                    .unwrap();
                let l = latencies(&service, &agent, call, samples).await;
                let median = micros(l[l.len() / 2]);
                let p99 = micros(l[l.len() * 99 / 100]);
                let name = match rules {
                    None => format!("rules off, {label}"),
                    Some(n) => format!("{n} rules, {label}"),
                };
                let base = *baseline.get_or_insert(median);
                println!(
                    "{name:<44} {median:>10.2} {p99:>10.2} {:>+11.2}µs",
                    median - base
                );
            }
        }
    });
}
