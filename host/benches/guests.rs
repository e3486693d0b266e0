//! The `allow-tools` gate built in each language: component size, compile time, cached load
//! time, instantiation and per-decision latency, one table.
//!
//! - compile: a fresh engine's first load of the component (Cranelift, plus linking);
//! - cached load: a new host loading it again from the compiled-artifact cache;
//! - decision: the median latency of a request answered by the gate on a reused instance
//!   through the seam (log discarded), and the same minus a native listener's median;
//! - instantiate: the per-decision-isolation median minus the reuse median.
//!
//! The Python, JavaScript and C builds come from `plugins/build-guests`.
//! Run: `cargo bench -p approval-host --bench guests` (`BENCH_SAMPLES`, default 2000).

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use approval_host::config::{Isolation, PluginSpec, Role};
use approval_host::plugin::TracingSink;
use approval_host::plugin::cache::CompiledCache;
use approval_host::{
    ApprovalRequest, ApprovalService, Decision, Failure, Outcome, PluginHost, Policy, Position,
    Question, Scope, bundled,
};

use common::NullStore;

fn guests_dir() -> PathBuf {
    std::env::var_os("APPROVAL_HOST_GUESTS_DIR").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/guests"),
        PathBuf::from,
    )
}

fn component(language: &str) -> (PathBuf, Vec<u8>) {
    if language == "rust" {
        return (
            PathBuf::from(bundled::ALLOW_TOOLS_PATH),
            bundled::ALLOW_TOOLS.to_vec(),
        );
    }
    let path = guests_dir().join(language).join("allow-tools.wasm");
    let bytes = std::fs::read(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (run plugins/build-guests)", path.display()));
    (path, bytes)
}

fn spec(path: &Path, isolation: Isolation) -> PluginSpec {
    let mut spec = PluginSpec::new("allow-tools", path, Role::Gate);
    spec.isolation = isolation;
    spec.config.insert("tools".into(), "bash".into());
    spec
}

async fn median_request(service: &ApprovalService, session: &str, samples: usize) -> Duration {
    let agent = service.agent(session, "bench").await.unwrap();
    service.start_turn(session).await.unwrap();
    for _ in 0..samples / 10 {
        service
            .request(ApprovalRequest::new(&agent, "bash"))
            .await
            .unwrap();
    }
    let mut out = Vec::with_capacity(samples);
    for _ in 0..samples {
        let start = Instant::now();
        let outcome = service
            .request(ApprovalRequest::new(&agent, "bash"))
            .await
            .unwrap();
        out.push(start.elapsed());
        assert_eq!(outcome, Outcome::AllowedOnce);
    }
    out.sort();
    out[samples / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn main() {
    let samples: usize = std::env::var("BENCH_SAMPLES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2000);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let service = ApprovalService::new(NullStore, Policy::Ask);
        let native = {
            let _reg = service.register(
                "native",
                Scope::Global,
                Position::Front,
                |q: Question| {
                    let hit = q.tool_name() == "bash";
                    async move {
                        Ok::<_, Failure>(if hit {
                            Decision::AllowOnce
                        } else {
                            Decision::Next
                        })
                    }
                },
            );
            median_request(&service, "native", samples).await
        };
        println!("allow-tools in each language ({samples} decisions per figure; native listener median {:.1} µs)", us(native));
        println!(
            "{:<8} {:>10} {:>12} {:>14} {:>14} {:>14} {:>16}",
            "language", "size", "compile ms", "cached load ms", "instantiate µs", "decision µs", "over native µs"
        );
        for language in ["rust", "c", "python", "js"] {
            let (path, bytes) = component(language);
            let cache_dir = tempfile::tempdir().unwrap();

            let host = PluginHost::with_cache(
                Arc::new(TracingSink),
                CompiledCache::new(cache_dir.path()),
            )
            .unwrap();
            let start = Instant::now();
            host.load_bytes(&spec(&path, Isolation::Reuse), &bytes).unwrap();
            let compile = start.elapsed();

            let mut loads: Vec<Duration> = (0..5)
                .map(|_| {
                    let fresh = PluginHost::with_cache(
                        Arc::new(TracingSink),
                        CompiledCache::new(cache_dir.path()),
                    )
                    .unwrap();
                    let start = Instant::now();
                    fresh.load_bytes(&spec(&path, Isolation::Reuse), &bytes).unwrap();
                    start.elapsed()
                })
                .collect();
            loads.sort();
            let cached = loads[2];

            let mut medians = Vec::new();
            for isolation in [Isolation::Reuse, Isolation::PerDecision] {
                let plugin = host.load_bytes(&spec(&path, isolation), &bytes).unwrap();
                let service = ApprovalService::new(NullStore, Policy::Ask);
                let _reg = service.register(
                    "allow-tools",
                    Scope::Global,
                    Position::Front,
                    plugin.listener(),
                );
                let n = if isolation == Isolation::Reuse { samples } else { samples / 4 };
                medians.push(median_request(&service, language, n).await);
            }
            let (reuse, fresh) = (medians[0], medians[1]);
            println!(
                "{:<8} {:>10} {:>12.1} {:>14.1} {:>14.1} {:>14.1} {:>16.1}",
                language,
                bytes.len(),
                ms(compile),
                ms(cached),
                us(fresh.saturating_sub(reuse)),
                us(reuse),
                us(reuse) - us(native),
            );
        }
    });
}
