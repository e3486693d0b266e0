//! Decision latency through WebAssembly gates against the same logic as native listeners, warm
//! instance reuse against a fresh instance per decision, and decisions per second with 64
//! concurrent askers.
//!
//! The session log here discards its bytes (a journal that does not write), so the figures are
//! the seam and the plugins alone; `durable_requests` measures the disk. Each scenario asks
//! through N gates: N-1 `allow-tools` gates that delegate (`next`) and a last one that grants.
//! Run: `RUST_BACKTRACE=0 cargo bench -p approval-host --bench plugin_decisions` (`BENCH_SAMPLES`,
//! default 2000; `BENCH_ONLY=<text>` runs only the latency rows whose label contains the text, for
//! a profiler).

mod common;
#[path = "common/counting.rs"]
mod counting;
#[path = "common/raw.rs"]
mod raw;
#[path = "common/rego.rs"]
mod rego;

#[global_allocator]
static ALLOCATOR: counting::Counting = counting::Counting;

use std::time::{Duration, Instant};

use approval_host::config::{Isolation, PluginSpec, Role};
use approval_host::event::{Asked, Decided, Event};
use approval_host::log::SessionLog;
use approval_host::{
    Agent, ApprovalRequest, ApprovalService, Decision, Failure, Mounted, Outcome, PluginHost,
    Policy, Position, Question, Registration, Scope, bundled,
};

use common::NullStore;

fn gate_spec(i: usize, grants: bool, isolation: Isolation) -> PluginSpec {
    let mut spec = PluginSpec::new(format!("gate-{i}"), bundled::ALLOW_TOOLS_PATH, Role::Gate);
    spec.isolation = isolation;
    spec.config.insert(
        "tools".into(),
        if grants { "read,bash" } else { "read,grep" }.into(),
    );
    spec
}

enum Kind {
    Wasm(Isolation),
    Native,
}

/// Registers `n` gates of `kind`, the last of which grants `bash`.
fn mount(
    service: &ApprovalService,
    host: &PluginHost,
    n: usize,
    kind: &Kind,
) -> Vec<Box<dyn std::any::Any>> {
    let mut keep: Vec<Box<dyn std::any::Any>> = Vec::new();
    match kind {
        Kind::Wasm(isolation) => {
            let plugins = (0..n)
                .map(|i| host.load(&gate_spec(i, i == n - 1, *isolation)).unwrap())
                .collect();
            keep.push(Box::new(Mounted::mount(service, plugins)));
        }
        Kind::Native => {
            for i in 0..n {
                let tools: Vec<String> = gate_spec(i, i == n - 1, Isolation::Reuse).config["tools"]
                    .split(',')
                    .map(|t| t.trim().to_owned())
                    .collect();
                let reg: Registration = service.register(
                    format!("native-{i}"),
                    Scope::Global,
                    Position::Back,
                    move |q: Question| {
                        let listed = tools.iter().any(|t| t == q.tool_name());
                        async move {
                            Ok::<_, Failure>(if listed {
                                Decision::AllowOnce
                            } else {
                                Decision::Next
                            })
                        }
                    },
                );
                keep.push(Box::new(reg));
            }
        }
    }
    keep
}

/// Each request's latency, sorted, and the allocations one request made (the mean).
async fn latencies(
    service: &ApprovalService,
    agent: &Agent,
    samples: usize,
) -> (Vec<Duration>, f64) {
    for _ in 0..samples / 10 {
        service
            .request(ApprovalRequest::new(agent, "bash"))
            .await
            .unwrap();
    }
    let mut out = Vec::with_capacity(samples);
    let allocated = counting::allocations();
    for _ in 0..samples {
        let start = Instant::now();
        let outcome = service
            .request(ApprovalRequest::new(agent, "bash"))
            .await
            .unwrap();
        out.push(start.elapsed());
        assert_eq!(outcome, Outcome::AllowedOnce);
    }
    let per_request = (counting::allocations() - allocated) as f64 / samples as f64;
    out.sort();
    (out, per_request)
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Nanoseconds per audited question (its `approval/asked` and `approval/decided` appended to a
/// log whose journal discards the bytes: validation, encoding, the chain hash), and the
/// allocations each append made. The events are built before the clock and the count start, as
/// the seam builds them from what the asker sent.
async fn audit_appends(samples: usize) -> (f64, f64) {
    let log = SessionLog::open(&NullStore, "bench-audit").unwrap();
    log.append(Event::TurnStart).await.unwrap();
    let pair = |_| {
        let id = uuid::Uuid::new_v4().to_string();
        let mut asked = Asked::new(id.clone(), "bash");
        asked.agent = Some("a".to_owned());
        (
            Event::Asked(asked),
            Event::Decided(Decided {
                answerer: Some("gate-0".to_owned()),
                ..Decided::bare(id, Outcome::AllowedOnce)
            }),
        )
    };
    // Warm: the fold's tables and the log's buffer reach their working size.
    for (asked, decided) in (0..samples).map(pair) {
        log.append(asked).await.unwrap();
        log.append(decided).await.unwrap();
    }
    let events: Vec<(Event, Event)> = (0..samples).map(pair).collect();
    let mut allocations = 0;
    let start = Instant::now();
    for (asked, decided) in events {
        let before = counting::allocations();
        log.append(asked).await.unwrap();
        log.append(decided).await.unwrap();
        allocations += counting::allocations() - before;
    }
    let ns = start.elapsed().as_secs_f64() * 1e9 / samples as f64;
    (ns, allocations as f64 / (2 * samples) as f64)
}

/// The least-squares slope of `(x, y)` points.
fn slope(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    let (sx, sy) = points
        .iter()
        .fold((0.0, 0.0), |(sx, sy), (x, y)| (sx + x, sy + y));
    let (mx, my) = (sx / n, sy / n);
    let num: f64 = points.iter().map(|(x, y)| (x - mx) * (y - my)).sum();
    let den: f64 = points.iter().map(|(x, _)| (x - mx) * (x - mx)).sum();
    num / den
}

/// Nanoseconds per call of a native gate's logic through a `dyn Fn`, the floor of any gate.
fn native_call_ns() -> f64 {
    let tools: Vec<String> = vec!["read".into(), "bash".into()];
    let gate: Box<dyn Fn(&str) -> bool> = Box::new(move |t| tools.iter().any(|x| x == t));
    let n = 1_000_000;
    let start = Instant::now();
    let mut hits = 0;
    for i in 0..n {
        let tool = if i % 2 == 0 { "bash" } else { "grep" };
        if std::hint::black_box(&gate)(std::hint::black_box(tool)) {
            hits += 1;
        }
    }
    assert_eq!(hits, n / 2);
    start.elapsed().as_secs_f64() * 1e9 / n as f64
}

async fn throughput(service: &ApprovalService, agent: &Agent, askers: usize, seconds: f64) -> f64 {
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let start = Instant::now();
    let tasks: Vec<_> = (0..askers)
        .map(|_| {
            let service = service.clone();
            let agent = agent.clone();
            tokio::spawn(async move {
                let mut n = 0u64;
                while Instant::now() < deadline {
                    service
                        .request(ApprovalRequest::new(&agent, "bash"))
                        .await
                        .unwrap();
                    n += 1;
                }
                n
            })
        })
        .collect();
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap();
    }
    total as f64 / start.elapsed().as_secs_f64()
}

/// A component whose `decide` spins until its deadline.
fn spinner_component() -> Vec<u8> {
    let mut module = wat::parse_str(
        r#"(module
          (memory (export "memory") 1)
          (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32) (i32.const 1024))
          (func (export "decide") (param i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32)
            (result i32)
            (loop $spin (br $spin))
            (i32.const 0)))"#,
    )
    .unwrap();
    let mut resolve = wit_parser::Resolve::default();
    let (pkg, _) = resolve
        .push_path(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../wit/approval-0.1.wit"
        ))
        .unwrap();
    let world = resolve.select_world(&[pkg], Some("answerer")).unwrap();
    wit_component::embed_component_metadata(
        &mut module,
        &resolve,
        world,
        wit_component::StringEncoding::UTF8,
    )
    .unwrap();
    wit_component::ComponentEncoder::default()
        .module(&module)
        .unwrap()
        .validate(true)
        .encode()
        .unwrap()
}

fn main() {
    let samples: usize = std::env::var("BENCH_SAMPLES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2000);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let host = PluginHost::new().unwrap();
    runtime.block_on(async {
        println!("decision latency per request (seam + gates, log discarded), {samples} samples, RUST_BACKTRACE={:?}", std::env::var("RUST_BACKTRACE").unwrap_or_default());
        println!(
            "{:<36} {:>10} {:>10} {:>12}",
            "scenario", "median µs", "p99 µs", "allocations"
        );
        let scenarios: Vec<(String, usize, Kind)> = vec![
            ("1 native gate".into(), 1, Kind::Native),
            ("1 wasm gate, reuse".into(), 1, Kind::Wasm(Isolation::Reuse)),
            (
                "1 wasm gate, per-decision".into(),
                1,
                Kind::Wasm(Isolation::PerDecision),
            ),
            ("4 native gates".into(), 4, Kind::Native),
            (
                "4 wasm gates, reuse".into(),
                4,
                Kind::Wasm(Isolation::Reuse),
            ),
            (
                "4 wasm gates, per-decision".into(),
                4,
                Kind::Wasm(Isolation::PerDecision),
            ),
            ("16 native gates".into(), 16, Kind::Native),
            (
                "16 wasm gates, reuse".into(),
                16,
                Kind::Wasm(Isolation::Reuse),
            ),
            (
                "16 wasm gates, per-decision".into(),
                16,
                Kind::Wasm(Isolation::PerDecision),
            ),
        ];
        // The first row would otherwise also pay for warming the process (allocator arenas, the
        // CPU's caches and clock).
        {
            let service = ApprovalService::new(NullStore, Policy::Ask);
            let _keep = mount(&service, &host, 1, &Kind::Native);
            let agent = service.agent("warm", "a").await.unwrap();
            service.start_turn("warm").await.unwrap();
            latencies(&service, &agent, samples).await;
        }
        let mut medians = std::collections::HashMap::new();
        // `BENCH_ONLY=<text>` runs only the latency rows whose label contains it (for profiling).
        let only = std::env::var("BENCH_ONLY").ok();
        for (label, n, kind) in &scenarios {
            if only.as_ref().is_some_and(|o| !label.contains(o.as_str())) {
                continue;
            }
            let service = ApprovalService::new(NullStore, Policy::Ask);
            let _keep = mount(&service, &host, *n, kind);
            let agent = service.agent("bench", "a").await.unwrap();
            service.start_turn("bench").await.unwrap();
            let (l, allocations) = latencies(&service, &agent, samples).await;
            medians.insert(label.clone(), micros(l[l.len() / 2]));
            println!(
                "{label:<36} {:>10.2} {:>10.2} {allocations:>12.1}",
                micros(l[l.len() / 2]),
                micros(l[l.len() * 99 / 100])
            );
        }
        if only.is_some() {
            return;
        }
        let (pair_ns, per_event) = audit_appends(samples * 5).await;
        println!(
            "{:<36} {:>10.2} {:>10} {per_event:>12.2}  (allocations per event)",
            "audit: asked + decided appended",
            pair_ns / 1000.0,
            "",
        );
        // Depth: latency against the number of gates, and the cost of one more gate (the slope of
        // a least-squares line through the medians).
        println!();
        println!(
            "{:<22} {:>8} {:>8} {:>8} {:>8} {:>12}",
            "depth (median µs)", "1", "4", "16", "64", "µs per gate"
        );
        for (name, kind) in [
            ("native", Kind::Native),
            ("wasm, reuse", Kind::Wasm(Isolation::Reuse)),
            ("wasm, per-decision", Kind::Wasm(Isolation::PerDecision)),
        ] {
            let mut points = Vec::new();
            for n in [1usize, 4, 16, 64] {
                let service = ApprovalService::new(NullStore, Policy::Ask);
                let _keep = mount(&service, &host, n, &kind);
                let agent = service.agent("bench", "a").await.unwrap();
                service.start_turn("bench").await.unwrap();
                let (l, _) = latencies(&service, &agent, samples / 2).await;
                points.push((n as f64, micros(l[l.len() / 2])));
            }
            let slope = slope(&points);
            println!(
                "{name:<22} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>12.3}",
                points[0].1, points[1].1, points[2].1, points[3].1, slope
            );
            medians.insert(format!("slope {name}"), slope);
            // Each stretch's own cost per gate: a line that bends up shows where the caches end.
            let stretch = |a: usize, b: usize| {
                (points[b].1 - points[a].1) / (points[b].0 - points[a].0)
            };
            println!(
                "{:<22} per gate 1-4 {:.3}, 4-16 {:.3}, 16-64 {:.3}",
                "",
                stretch(0, 1),
                stretch(1, 2),
                stretch(2, 3)
            );
        }
        let raw = raw::measure(bundled::ALLOW_TOOLS, samples);
        println!();
        println!("raw baselines, same guest and run (plain wasmtime, no seam, no sandbox set-up):");
        println!("  component call                 {:>8.2} µs", micros(raw.call));
        println!("  component call, host's engine  {:>8.2} µs  (bounds checked in code, epochs on)", micros(raw.call_checked));
        println!("  instantiate + drop (on demand) {:>8.2} µs", micros(raw.instantiate));
        println!("  instantiate + drop (pooling)   {:>8.2} µs", micros(raw.instantiate_pooled));
        let native_call = native_call_ns();
        println!("  native dyn Fn gate call        {:>8.3} µs", native_call / 1000.0);
        // The issue's definition of a hop: what 15 more gates add to a one-gate request.
        let hop = |kind: &str| {
            (medians[&format!("16 {kind}")] - medians[&format!("1 {}", kind.replacen("gates", "gate", 1))])
                / 15.0
        };
        let warm = hop("wasm gates, reuse") - hop("native gates");
        let fresh = hop("wasm gates, per-decision") - hop("native gates");
        println!(
            "  => seam overhead (1 native gate): {:.2} µs; warm wasm hop (16 - 1 gates) / 15: {warm:.2} µs ({:.1}x the raw call on the host's engine), on the 1-64 slope {:.2} µs; fresh instance per gate: {fresh:.2} µs ({:.2}x raw on-demand, {:.2}x raw pooling instantiation), on the slope {:.2} µs",
            medians["1 native gate"],
            warm / micros(raw.call_checked),
            medians["slope wasm, reuse"] - medians["slope native"],
            fresh / micros(raw.instantiate),
            fresh / micros(raw.instantiate_pooled),
            medians["slope wasm, per-decision"] - medians["slope native"],
        );
        let rego = rego::measure(samples * 5);
        let whole = medians["1 wasm gate, reuse"];
        println!();
        println!("the same policy in Rego, regorus VM (RVM) in this process:");
        println!("  input built per question + evaluate {:>8.2} µs", micros(rego.per_question));
        println!("  evaluate alone (input set once)     {:>8.2} µs", micros(rego.evaluate));
        println!(
            "  => the whole path through allow-tools, reused ({whole:.2} µs): {:.2}x the per-question Rego figure, {:.2}x the evaluation alone (goal: at or below 1x)",
            whole / micros(rego.per_question),
            whole / micros(rego.evaluate),
        );
        println!(
            "  => the seam (1 native gate): {:.2} µs (goal: under 1 µs)",
            medians["1 native gate"]
        );
        println!();
        println!("{:<36} {:>10}", "64 concurrent askers", "decisions/s");
        for (label, n, kind) in [
            ("4 native gates", 4, Kind::Native),
            ("4 wasm gates, reuse", 4, Kind::Wasm(Isolation::Reuse)),
            (
                "4 wasm gates, per-decision",
                4,
                Kind::Wasm(Isolation::PerDecision),
            ),
        ] {
            let service = ApprovalService::new(NullStore, Policy::Ask);
            let _keep = mount(&service, &host, n, &kind);
            let agent = service.agent("bench", "a").await.unwrap();
            service.start_turn("bench").await.unwrap();
            let rate = throughput(&service, &agent, 64, 2.0).await;
            println!("{label:<36} {rate:>10.0}");
        }
        // The same 4 reuse gates while 8 decisions spin in a slow plugin (scoped to another
        // agent) for the whole measurement: the fast path must not stall behind them.
        let service = ApprovalService::new(NullStore, Policy::Ask);
        let _keep = mount(&service, &host, 4, &Kind::Wasm(Isolation::Reuse));
        let dir = tempfile::tempdir().unwrap();
        let spinner = dir.path().join("spinner.wasm");
        std::fs::write(&spinner, spinner_component()).unwrap();
        let mut spec = PluginSpec::new("spinner", &spinner, Role::Answerer);
        spec.timeout = Duration::from_secs(5);
        let spinner = host.load(&spec).unwrap();
        let slow_agent = service.agent("slow", "s").await.unwrap();
        service.start_turn("slow").await.unwrap();
        let _slow = service.register(
            "spinner",
            Scope::Agent(slow_agent.clone()),
            Position::Front,
            spinner.listener(),
        );
        let slow: Vec<_> = (0..8)
            .map(|_| {
                let service = service.clone();
                let agent = slow_agent.clone();
                tokio::spawn(async move {
                    service
                        .request(ApprovalRequest::new(&agent, "bash"))
                        .await
                        .unwrap()
                })
            })
            .collect();
        let agent = service.agent("bench", "a").await.unwrap();
        service.start_turn("bench").await.unwrap();
        let rate = throughput(&service, &agent, 64, 2.0).await;
        let still_spinning = slow.iter().filter(|t| !t.is_finished()).count();
        println!("{:<36} {rate:>10.0}", "4 wasm gates, reuse, 8 slow beside");
        println!("  ({still_spinning} of 8 slow decisions were still running when it ended)");
        service.end_turn("slow").await.unwrap();
        for t in slow {
            assert_eq!(t.await.unwrap(), Outcome::Cancelled);
        }
    });
}
