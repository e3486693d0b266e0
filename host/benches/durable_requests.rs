//! Durable approval requests per second: 1, 8 and 64 concurrent askers on one session log, and 64
//! askers on 64 logs, beside the raw append + fdatasync rate of the same disk in the same run.
//!
//! Each request appends `approval/asked` and `approval/decided` around one in-process allow
//! listener; the two are made durable by one fdatasync (group-committed with whatever else is
//! pending). The ratio column compares each row with the raw rate measured first. Run: `cargo bench -p approval-host --bench durable_requests` (set `BENCH_DIR` to
//! measure another disk; `BENCH_SECONDS` to change the time per scenario, default 2).

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use approval_host::{
    ApprovalRequest, ApprovalService, Decision, Failure, Outcome, Policy, Position, Question, Scope,
};

fn raw_fdatasync_rate(dir: &Path, seconds: f64) -> f64 {
    let path = dir.join("raw.jsonl");
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .unwrap();
    let line = br#"{"seq":1,"ts":"2026-12-02T10:00:00.000000Z","type":"approval/decided","data":{"id":"5f0c1f8e-9b1e-4c55-8d0f-3c1b1b1b1b1b","outcome":"allowed-once"}}
"#;
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed().as_secs_f64() < seconds {
        file.write_all(line).unwrap();
        file.sync_data().unwrap();
        n += 1;
    }
    n as f64 / start.elapsed().as_secs_f64()
}

async fn requests_rate(dir: &Path, askers: usize, logs: usize, seconds: f64, signed: bool) -> f64 {
    let service = ApprovalService::open_dir(dir, Policy::Ask);
    if signed {
        let key = ed25519_dalek::SigningKey::from_bytes(&[7; 32]);
        service.set_checkpointer(Some(std::sync::Arc::new(
            approval_host::audit::checkpoint::Checkpointer::new(key, dir),
        )));
    }
    let _allow = service.register(
        "allow",
        Scope::Global,
        Position::Back,
        |_q: Question| async { Ok::<_, Failure>(Decision::AllowOnce) },
    );
    let mut agents = Vec::new();
    for l in 0..logs {
        let session = format!("bench-{l}");
        agents.push(service.agent(&session, "a").await.unwrap());
        service.start_turn(&session).await.unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..askers {
        let service = service.clone();
        let agent = agents[i % logs].clone();
        tasks.push(tokio::spawn(async move {
            let mut n = 0u64;
            while Instant::now() < deadline {
                let outcome = service
                    .request(ApprovalRequest::new(&agent, "bash"))
                    .await
                    .unwrap();
                assert_eq!(outcome, Outcome::AllowedOnce);
                n += 1;
            }
            n
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap();
    }
    total as f64 / start.elapsed().as_secs_f64()
}

fn main() {
    // `cargo bench` passes `--bench`; there is nothing to filter.
    let seconds: f64 = std::env::var("BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2.0);
    let base = std::env::var_os("BENCH_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let runtime = tokio::runtime::Runtime::new().unwrap();

    let raw_dir = tempfile::tempdir_in(&base).unwrap();
    let raw = raw_fdatasync_rate(raw_dir.path(), seconds);
    println!(
        "durable requests (asked + decided, one fdatasync), {seconds} s per row, in {}",
        base.display()
    );
    println!("{:<34} {:>12} {:>8}", "scenario", "per second", "× raw");
    println!(
        "{:<34} {:>12.0} {:>8.2}",
        "raw append + fdatasync (1 writer)", raw, 1.0
    );
    let mut rates = std::collections::HashMap::new();
    for (askers, logs, signed) in [
        (1, 1, false),
        (1, 1, true),
        (8, 1, false),
        (64, 1, false),
        (64, 1, true),
        (64, 64, false),
        (64, 1000, false),
    ] {
        let dir = tempfile::tempdir_in(&base).unwrap();
        let rate = runtime.block_on(requests_rate(dir.path(), askers, logs, seconds, signed));
        rates.insert((askers, logs, signed), rate);
        let label = format!(
            "{askers} asker{} on {logs} log{}{}",
            if askers == 1 { "" } else { "s" },
            if logs == 1 { "" } else { "s" },
            if signed { ", signed checkpoints" } else { "" }
        );
        println!("{label:<34} {rate:>12.0} {:>8.2}", rate / raw);
    }
    // Chaining: one SHA-256 over each line the writer encodes, measured on a typical line.
    let line = br#"{"v":2,"seq":42,"ts":"2026-12-03T10:00:00.000000Z","type":"approval/decided","data":{"id":"5f0c1f8e-9b1e-4c55-8d0f-3c1b1b1b1b1b","outcome":"allowed-once","answerer":"allow"},"prev":"5f0c1f8e9b1e4c558d0f3c1b1b1b1b1b5f0c1f8e9b1e4c558d0f3c1b1b1b1b1b"}"#;
    let n = 200_000;
    let start = Instant::now();
    for _ in 0..n {
        std::hint::black_box(approval_host::audit::chain::line_hash(
            std::hint::black_box(line),
        ));
    }
    let per_line = start.elapsed().as_secs_f64() / n as f64;
    let per_request = 1.0 / rates[&(1, 1, false)];
    println!(
        "chaining: {:.2} µs per line, {:.2}% of one asker's request ({:.0} µs); signed checkpoints: {:+.1}% (1 asker), {:+.1}% (64 askers) decisions/s",
        per_line * 1e6,
        2.0 * per_line / per_request * 100.0,
        per_request * 1e6,
        (rates[&(1, 1, true)] / rates[&(1, 1, false)] - 1.0) * 100.0,
        (rates[&(64, 1, true)] / rates[&(64, 1, false)] - 1.0) * 100.0,
    );
}
