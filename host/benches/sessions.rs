//! Open sessions at scale: threads, descriptors and resident memory with 1,000, 10,000 and
//! 100,000 sessions open in one process on the file store (its open files bounded by `[limits]
//! open_logs`), and decisions per second with 64 askers spread over 64 and over 1,000 sessions,
//! on a log that discards its bytes and on the file store.
//!
//! Run: `RUST_BACKTRACE=0 RUST_LIB_BACKTRACE=0 cargo bench -p approval-host --bench sessions`
//! (`BENCH_SESSIONS`, the largest count, default 100000; `BENCH_SECONDS` per throughput row,
//! default 2).

mod common;

use std::time::{Duration, Instant};

use approval_host::{
    Agent, ApprovalRequest, ApprovalService, Decision, Failure, Outcome, Policy, Position,
    Question, Scope,
};

use common::NullStore;

fn descriptors() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

/// Resident set size in bytes (`/proc/self/statm`, second field, in pages).
fn rss() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: usize = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

async fn open(service: &ApprovalService, prefix: &str, n: usize) -> Vec<Agent> {
    // 64 at a time, as many clients would: each open creates a file and syncs it and its turn.
    let mut agents = Vec::with_capacity(n);
    let mut started = 0;
    while started < n {
        let batch: Vec<_> = (started..n.min(started + 64))
            .map(|i| {
                let service = service.clone();
                let session = format!("{prefix}{i}");
                tokio::spawn(async move {
                    let agent = service.agent(&session, "a").await.unwrap();
                    service.start_turn(&session).await.unwrap();
                    agent
                })
            })
            .collect();
        started += batch.len();
        for task in batch {
            agents.push(task.await.unwrap());
        }
    }
    agents
}

async fn throughput(service: &ApprovalService, agents: &[Agent], seconds: f64) -> f64 {
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let start = Instant::now();
    let tasks: Vec<_> = (0..64)
        .map(|i| {
            let service = service.clone();
            // Each asker walks its own stride of the sessions.
            let mine: Vec<Agent> = agents.iter().skip(i).step_by(64).cloned().collect();
            tokio::spawn(async move {
                let mut n = 0u64;
                while Instant::now() < deadline {
                    let agent = &mine[n as usize % mine.len()];
                    let outcome = service
                        .request(ApprovalRequest::new(agent, "bash"))
                        .await
                        .unwrap();
                    assert_eq!(outcome, Outcome::AllowedOnce);
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

fn allow(service: &ApprovalService) -> approval_host::Registration {
    service.register(
        "allow",
        Scope::Global,
        Position::Back,
        |_q: Question| async { Ok::<_, Failure>(Decision::AllowOnce) },
    )
}

/// Set for the child that measures one count of open sessions.
const ONE_COUNT: &str = "BENCH_SESSIONS_ONE_COUNT";

/// Opens `n` sessions on the file store in a fresh process and prints their row.
async fn one_count(n: usize) {
    let dir = tempfile::tempdir().unwrap();
    let service = ApprovalService::open_dir(dir.path(), Policy::Ask);
    // One session first, so allocator and runtime start-up are not counted per session.
    let _first = open(&service, "warm-", 1).await;
    let (rss_before, fds_before) = (rss(), descriptors());
    let start = Instant::now();
    let agents = open(&service, "s", n).await;
    let took = start.elapsed();
    let rss_after = rss();
    println!(
        "{n:>9} {:>9} {:>13} {:>12.2} KiB {:>9.1} s",
        threads(),
        format!("{fds_before} → {}", descriptors()),
        rss_after.saturating_sub(rss_before) as f64 / 1024.0 / n as f64,
        took.as_secs_f64()
    );
    drop(agents);
}

fn main() {
    if let Some(n) = std::env::var(ONE_COUNT).ok().and_then(|n| n.parse().ok()) {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        runtime.block_on(one_count(n));
        return;
    }
    let largest: usize = std::env::var("BENCH_SESSIONS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000);
    let seconds: f64 = std::env::var("BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2.0);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        println!(
            "open sessions on the file store, each with an open turn (open_logs bound {})",
            approval_host::audit::descriptors::default_open_logs()
        );
        println!(
            "{:>9} {:>9} {:>13} {:>16} {:>11}",
            "sessions", "threads", "descriptors", "memory/session", "opened in"
        );
        // Each count in a process of its own, so none reuses memory another freed.
        for n in [1_000usize, 10_000, 100_000] {
            if n > largest {
                break;
            }
            let out = std::process::Command::new(std::env::current_exe().unwrap())
                .env(ONE_COUNT, n.to_string())
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            print!("{}", String::from_utf8_lossy(&out.stdout));
        }
        let service = ApprovalService::new(NullStore, Policy::Ask);
        let _allow = allow(&service);
        let agents = open(&service, "s", 1000).await;
        println!();
        println!("{:<44} {:>12}", "64 askers", "decisions/s");
        for spread in [64usize, 1000] {
            let rate = throughput(&service, &agents[..spread.min(agents.len())], seconds).await;
            println!(
                "{:<44} {rate:>12.0}",
                format!("over {spread} sessions, log discarded")
            );
        }
        drop(agents);

        for spread in [64usize, 1000] {
            let dir = tempfile::tempdir().unwrap();
            let durable = ApprovalService::open_dir(dir.path(), Policy::Ask);
            let _allow = allow(&durable);
            let agents = open(&durable, "s", spread).await;
            let rate = throughput(&durable, &agents, seconds).await;
            println!(
                "{:<44} {rate:>12.0}   ({} threads in the process)",
                format!("over {spread} sessions, file store"),
                threads()
            );
        }
    });
}
