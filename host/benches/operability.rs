//! What `serve --metrics` and `[telemetry]` cost a decision: p50 and p99 of one request through 1
//! and 4 warm `allow-tools` gates with neither, the metrics observer, tracing (exported over
//! OTLP/HTTP to a receiver on loopback that accepts and drops), and both, alternating blocks in
//! one run so drift falls on all four. The log discards its bytes (it is still encoded and
//! chained), so the figures are the seam, the plugins and the observers alone.
//!
//! Each configuration runs twice: back to back (as fast as the seam goes, where the exporting
//! thread's work on the other core is at its heaviest) and at a pace of one request every
//! 200 µs.
//!
//! Run: `RUST_BACKTRACE=0 RUST_LIB_BACKTRACE=0 cargo bench -p approval-host --bench operability`
//! (`BENCH_SAMPLES`, default 20000 a row).

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use approval_host::config::{PluginSpec, Role};
use approval_host::serve::metrics::Metrics;
use approval_host::telemetry::{Telemetry, TelemetryConfig};
use approval_host::{
    ApprovalRequest, ApprovalService, Mounted, Outcome, PluginHost, Policy, bundled,
};
use common::NullStore;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn service(host: &PluginHost, gates: usize) -> (ApprovalService, Mounted) {
    let service = ApprovalService::new(NullStore, Policy::Ask);
    let plugins = (0..gates)
        .map(|i| {
            let mut spec =
                PluginSpec::new(format!("gate-{i}"), bundled::ALLOW_TOOLS_PATH, Role::Gate);
            let tools = if i == gates - 1 {
                "read,bash"
            } else {
                "read,grep"
            };
            spec.config.insert("tools".into(), tools.into());
            host.load(&spec).unwrap()
        })
        .collect();
    let mounted = Mounted::mount(&service, plugins);
    (service, mounted)
}

async fn block(service: &ApprovalService, session: &str, n: usize, out: &mut Vec<Duration>) {
    let agent = service.agent(session, "main").await.unwrap();
    service.start_turn(session).await.unwrap();
    for _ in 0..n {
        let start = Instant::now();
        let outcome = service
            .request(ApprovalRequest::new(&agent, "bash"))
            .await
            .unwrap();
        out.push(start.elapsed());
        assert_eq!(outcome, Outcome::AllowedOnce);
    }
    service.end_turn(session).await.unwrap();
}

/// [`block`] at a fixed pace, one request every `every`, as an agent's calls come: the
/// exporting thread's work falls between decisions instead of beside them.
async fn paced(
    service: &ApprovalService,
    session: &str,
    n: usize,
    every: Duration,
    out: &mut Vec<Duration>,
) {
    let agent = service.agent(session, "main").await.unwrap();
    service.start_turn(session).await.unwrap();
    let mut next = Instant::now();
    for _ in 0..n {
        while Instant::now() < next {
            std::hint::spin_loop();
        }
        next += every;
        let start = Instant::now();
        let outcome = service
            .request(ApprovalRequest::new(&agent, "bash"))
            .await
            .unwrap();
        out.push(start.elapsed());
        assert_eq!(outcome, Outcome::AllowedOnce);
    }
    service.end_turn(session).await.unwrap();
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize].as_secs_f64() * 1e6
}

/// A collector that takes every export and keeps nothing.
async fn sink() -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(|_: axum::body::Bytes| async { "" }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

fn main() {
    let samples = env("BENCH_SAMPLES", 20_000);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let host = PluginHost::new().unwrap();
    runtime.block_on(async {
        let collector = sink().await;
        let config = TelemetryConfig::new(&format!("http://{collector}"), None).unwrap();
        for gates in [1, 4] {
            let mut rows = Vec::new();
            let mut tracers = Vec::new();
            for label in ["off", "metrics", "tracing", "both"] {
                let (service, mounted) = service(&host, gates);
                if label == "metrics" || label == "both" {
                    service.add_observer(Arc::new(Metrics::new()));
                }
                if label == "tracing" || label == "both" {
                    let telemetry = Telemetry::start(&config).unwrap();
                    service.add_observer(telemetry.clone());
                    tracers.push(telemetry);
                }
                block(
                    &service,
                    &format!("warm-{label}"),
                    samples / 10,
                    &mut Vec::new(),
                )
                .await;
                rows.push((label, service, mounted, Vec::new()));
            }
            let blocks = 20;
            for i in 0..blocks {
                for (label, service, _, times) in &mut rows {
                    block(service, &format!("{label}-{i}"), samples / blocks, times).await;
                }
            }
            println!("{gates} gate(s), {samples} requests a row");
            let mut base = (0.0, 0.0);
            for (label, _, _, times) in &mut rows {
                times.sort();
                let (p50, p99) = (percentile(times, 0.5), percentile(times, 0.99));
                if *label == "off" {
                    base = (p50, p99);
                }
                println!(
                    "  {label:<8} p50 {p50:>7.2} µs  p99 {p99:>7.2} µs  ({:.3}x, {:.3}x)",
                    p50 / base.0,
                    p99 / base.1
                );
            }
            // The same at a pace: one request every 200 µs (5,000 a second).
            let every = Duration::from_micros(200);
            let paced_n = samples / 4;
            let mut paced_times: Vec<Vec<Duration>> = vec![Vec::new(); rows.len()];
            for i in 0..10 {
                for ((label, service, _, _), times) in rows.iter().zip(&mut paced_times) {
                    paced(
                        service,
                        &format!("paced-{label}-{i}"),
                        paced_n / 10,
                        every,
                        times,
                    )
                    .await;
                }
            }
            println!("  at one request every {every:?}, {paced_n} requests a row:");
            let mut base = (0.0, 0.0);
            for ((label, ..), times) in rows.iter().zip(&mut paced_times) {
                times.sort();
                let (p50, p99) = (percentile(times, 0.5), percentile(times, 0.99));
                if *label == "off" {
                    base = (p50, p99);
                }
                println!(
                    "  {label:<8} p50 {p50:>7.2} µs  p99 {p99:>7.2} µs  ({:.3}x, {:.3}x)",
                    p50 / base.0,
                    p99 / base.1
                );
            }
            for t in tracers {
                let telemetry = t.clone();
                tokio::task::spawn_blocking(move || telemetry.shutdown())
                    .await
                    .unwrap();
                println!("  traces dropped (exporter behind): {}", t.dropped());
            }
        }
    });
}
