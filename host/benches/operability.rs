//! What `serve --metrics` costs a decision: p50 and p99 of one request through 1 and 4 warm
//! `allow-tools` gates with the metrics observer on and off, alternating blocks in one run so
//! drift falls on both. The log discards its bytes (it is still encoded and chained), so the
//! figures are the seam, the plugins and the metrics alone.
//!
//! Run: `RUST_BACKTRACE=0 RUST_LIB_BACKTRACE=0 cargo bench -p approval-host --bench operability`
//! (`BENCH_SAMPLES`, default 20000 a row).

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use approval_host::config::{PluginSpec, Role};
use approval_host::serve::metrics::Metrics;
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

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize].as_secs_f64() * 1e6
}

fn main() {
    let samples = env("BENCH_SAMPLES", 20_000);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let host = PluginHost::new().unwrap();
    runtime.block_on(async {
        for gates in [1, 4] {
            let (off, _m1) = service(&host, gates);
            let (on, _m2) = service(&host, gates);
            on.set_observer(Some(Arc::new(Metrics::new())));
            // Warm both.
            let (mut a, mut b) = (Vec::new(), Vec::new());
            block(&off, "warm-off", samples / 10, &mut Vec::new()).await;
            block(&on, "warm-on", samples / 10, &mut Vec::new()).await;
            let blocks = 20;
            for i in 0..blocks {
                block(&off, &format!("off-{i}"), samples / blocks, &mut a).await;
                block(&on, &format!("on-{i}"), samples / blocks, &mut b).await;
            }
            a.sort();
            b.sort();
            let (a50, a99, b50, b99) = (
                percentile(&a, 0.5),
                percentile(&a, 0.99),
                percentile(&b, 0.5),
                percentile(&b, 0.99),
            );
            println!("{gates} gate(s), {samples} requests a row");
            println!("  metrics off: p50 {a50:>7.2} µs  p99 {a99:>7.2} µs");
            println!(
                "  metrics on:  p50 {b50:>7.2} µs  p99 {b99:>7.2} µs  ({:.3}x, {:.3}x)",
                b50 / a50,
                b99 / a99
            );
        }
    });
}
