//! What trying a policy costs: `replay` throughput over recorded questions against the live
//! decision rate of the same deployment, and one shadow plugin's cost on the live p50 and p99.
//!
//! The deployment is 4 warm `allow-tools` gates (plugin API 0.2): 3 pass `bash` on, the 4th
//! grants it. Live, `BENCH_SESSIONS` (default 50) sessions ask at once, each recording a
//! `tool/call` and asking about it, until `BENCH_QUESTIONS` (default 100,000) questions are in
//! the file store (fdatasync per commit, grouped); the same questions are also asked on a store
//! that discards its bytes (the decisions alone). Then `replay --all` asks them again against the
//! same deployment. The shadow rows ask one question every 1,000 µs and then every 200 µs from one
//! session (far busier than an agent; `BENCH_PERIOD_US` picks one period, 0 asks back to back)
//! with no shadow and with one shadow (a fifth `allow-tools`), `BENCH_SAMPLES` (default 4000) each,
//! in alternating blocks so drift falls on both.
//!
//! Run: `RUST_BACKTRACE=0 RUST_LIB_BACKTRACE=0 cargo bench -p approval-host --bench changing_policy`

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use approval_host::assemble;
use approval_host::plugin::QuarantinePolicy;
use approval_host::replay::{self, ReplayOptions, Sessions};
use approval_host::{
    ApprovalRequest, ApprovalService, Deployment, DirStore, Outcome, PluginHost, Store, bundled,
};
use common::NullStore;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn deployment(dir: &Path, shadow: bool) -> Deployment {
    let mut text = String::new();
    for i in 0..4 {
        let tools = if i == 3 { "read,bash" } else { "read,grep" };
        text.push_str(&format!(
            "[[plugin]]\nname = \"gate-{i}\"\npath = \"{}\"\nrole = \"gate\"\n[plugin.config]\ntools = \"{tools}\"\n\n",
            bundled::ALLOW_TOOLS_PATH
        ));
    }
    if shadow {
        text.push_str(&format!(
            "[[plugin]]\nname = \"gate-3\"\npath = \"{}\"\nrole = \"gate\"\nmode = \"shadow\"\n[plugin.config]\ntools = \"bash\"\n",
            bundled::ALLOW_TOOLS_PATH
        ));
    }
    let path = dir.join(if shadow {
        "shadowed.toml"
    } else {
        "deploy.toml"
    });
    std::fs::write(&path, text).unwrap();
    Deployment::load(&path).unwrap()
}

/// A service over `store` put together from `deployment` as a host would be.
fn service(
    store: Arc<dyn Store>,
    deployment: &Deployment,
    host: &PluginHost,
    state: &Path,
) -> (ApprovalService, Box<dyn std::any::Any>) {
    let service = ApprovalService::with_store(store, deployment.default_policy);
    assemble::prepare(&service, deployment, state, false).unwrap();
    let mounted = assemble::mount(&service, host, deployment, QuarantinePolicy::default()).unwrap();
    let shadows =
        assemble::shadows(&service, host, deployment, QuarantinePolicy::default()).unwrap();
    (service, Box::new((mounted, shadows)))
}

/// Asks `questions` questions over `sessions` sessions at once; questions a second.
async fn live(service: &ApprovalService, sessions: usize, questions: usize) -> f64 {
    let start = Instant::now();
    let tasks: Vec<_> = (0..sessions)
        .map(|s| {
            let service = service.clone();
            let each = questions / sessions + usize::from(s < questions % sessions);
            tokio::spawn(async move {
                let id = format!("bench-{s:03}");
                let agent = service.agent(&id, "main").await.unwrap();
                service.start_turn(&id).await.unwrap();
                for q in 0..each {
                    let call = format!("c{q}");
                    let command = format!("cargo test --package p{} -- --nocapture", q % 97);
                    service
                        .record_tool_call(
                            &agent,
                            &call,
                            "bash",
                            serde_json::json!({ "command": command }),
                        )
                        .await
                        .unwrap();
                    let outcome = service
                        .request(
                            ApprovalRequest::new(&agent, "bash")
                                .call_id(call)
                                .cwd("/work"),
                        )
                        .await
                        .unwrap();
                    assert_eq!(outcome, Outcome::AllowedOnce);
                }
                service.end_turn(&id).await.unwrap();
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    questions as f64 / start.elapsed().as_secs_f64()
}

/// One question every `period` (spinning in between, as a client doing other work would),
/// `samples` of them after a tenth more to warm up; the latency of each.
async fn latencies(
    service: &ApprovalService,
    session: &str,
    samples: usize,
    period: Duration,
) -> Vec<Duration> {
    let agent = service.agent(session, "main").await.unwrap();
    service.start_turn(session).await.unwrap();
    let mut out = Vec::with_capacity(samples);
    let mut next = Instant::now();
    for q in 0..samples + samples / 10 {
        while Instant::now() < next {
            std::hint::spin_loop();
        }
        next += period;
        let call = format!("c{q}");
        service
            .record_tool_call(
                &agent,
                &call,
                "bash",
                serde_json::json!({"command": "cargo build"}),
            )
            .await
            .unwrap();
        let start = Instant::now();
        let outcome = service
            .request(ApprovalRequest::new(&agent, "bash").call_id(call))
            .await
            .unwrap();
        let took = start.elapsed();
        assert_eq!(outcome, Outcome::AllowedOnce);
        // The first tenth warms up.
        if q >= samples / 10 {
            out.push(took);
        }
    }
    service.end_turn(session).await.unwrap();
    out
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1e6
}

fn main() {
    let questions = env("BENCH_QUESTIONS", 100_000);
    let sessions = env("BENCH_SESSIONS", 50);
    let samples = env("BENCH_SAMPLES", 4000);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let plain = deployment(dir.path(), false);
    let host = PluginHost::new().unwrap();

    runtime.block_on(async {
        println!("replay: {questions} questions in {sessions} sessions through 4 warm wasm gates");
        let (null, _keep) = service(Arc::new(NullStore), &plain, &host, &state);
        let in_memory = live(&null, sessions, questions).await;
        let (disk, keep) = service(Arc::new(DirStore::new(&state)), &plain, &host, &state);
        let on_disk = live(&disk, sessions, questions).await;
        drop((disk, keep));
        let started = Instant::now();
        let report = replay::run(
            Arc::new(DirStore::new(&state)),
            &plain,
            &host,
            ReplayOptions {
                sessions: Sessions::All,
                since: None,
                workers: std::thread::available_parallelism().map_or(2, |n| n.get()),
                state_dir: state.clone(),
            },
        )
        .await
        .unwrap();
        let took = started.elapsed().as_secs_f64();
        assert_eq!(report.questions.len(), questions);
        assert_eq!(report.exit_code(), 0);
        let replayed = questions as f64 / took;
        println!("  live, log discarded (decisions alone): {in_memory:>9.0} questions/s");
        println!("  live, file store (fdatasync, grouped): {on_disk:>9.0} questions/s");
        println!(
            "  replay --all (read, feed, ask again):  {replayed:>9.0} questions/s  ({:.2}x the decisions alone, {:.2}x the file store; {took:.1} s)",
            replayed / in_memory,
            replayed / on_disk
        );

        let shadowed = deployment(dir.path(), true);
        let (without, _k1) = service(Arc::new(NullStore), &plain, &host, &state);
        let (with, _k2) = service(Arc::new(NullStore), &shadowed, &host, &state);
        let periods = match std::env::var("BENCH_PERIOD_US") {
            Ok(p) => vec![Duration::from_micros(p.parse().unwrap())],
            Err(_) => vec![Duration::from_micros(1000), Duration::from_micros(200)],
        };
        for (n, period) in periods.into_iter().enumerate() {
            println!(
                "\nshadow: one request every {} µs through the same 4 gates, {samples} samples a row",
                period.as_micros()
            );
            let (mut a, mut b) = (Vec::new(), Vec::new());
            let blocks = 20;
            for i in 0..blocks {
                a.extend(latencies(&without, &format!("none-{n}-{i}"), samples / blocks, period).await);
                b.extend(latencies(&with, &format!("shadow-{n}-{i}"), samples / blocks, period).await);
            }
            a.sort();
            b.sort();
            let (a50, a99, b50, b99) = (
                percentile(&a, 0.5),
                percentile(&a, 0.99),
                percentile(&b, 0.5),
                percentile(&b, 0.99),
            );
            println!("  no shadow:  p50 {a50:>7.2} µs  p99 {a99:>7.2} µs");
            println!(
                "  one shadow: p50 {b50:>7.2} µs  p99 {b99:>7.2} µs  ({:.3}x, {:.3}x)",
                b50 / a50,
                b99 / a99
            );
        }
    });
}
