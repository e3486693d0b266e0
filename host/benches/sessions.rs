//! Open sessions at scale: threads and resident memory with 10,000 sessions open in one process,
//! and decisions per second with 64 askers spread over 64 and over 1,000 sessions, on a log that
//! discards its bytes and on the file store.
//!
//! Run: `RUST_BACKTRACE=0 cargo bench -p approval-host --bench sessions` (`BENCH_SESSIONS`,
//! default 10000; `BENCH_SECONDS` per throughput row, default 2).

mod common;

use std::time::{Duration, Instant};

use approval_host::{
    Agent, ApprovalRequest, ApprovalService, Decision, Failure, Outcome, Policy, Position,
    Question, Scope,
};

use common::NullStore;

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
    let mut agents = Vec::with_capacity(n);
    for i in 0..n {
        let session = format!("{prefix}{i}");
        agents.push(service.agent(&session, "a").await.unwrap());
        service.start_turn(&session).await.unwrap();
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

fn main() {
    let sessions: usize = std::env::var("BENCH_SESSIONS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10_000);
    let seconds: f64 = std::env::var("BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2.0);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let service = ApprovalService::new(NullStore, Policy::Ask);
        let _allow = allow(&service);
        // One session first, so allocator and runtime start-up are not counted per session.
        let _first = open(&service, "warm-", 1).await;
        let (threads_before, rss_before) = (threads(), rss());
        let start = Instant::now();
        let agents = open(&service, "s", sessions).await;
        let took = start.elapsed();
        let (threads_after, rss_after) = (threads(), rss());
        println!("{sessions} open sessions (log discarded), each with an open turn");
        println!(
            "  threads: {threads_before} before, {threads_after} after; opened in {:.0} ms",
            took.as_secs_f64() * 1e3
        );
        println!(
            "  resident memory: {:.1} MiB more, {:.2} KiB per open session (fold, log, session, agent)",
            (rss_after.saturating_sub(rss_before)) as f64 / (1 << 20) as f64,
            (rss_after.saturating_sub(rss_before)) as f64 / 1024.0 / sessions as f64
        );
        println!();
        println!("{:<44} {:>12}", "64 askers", "decisions/s");
        for spread in [64usize, 1000] {
            let rate = throughput(&service, &agents[..spread.min(agents.len())], seconds).await;
            println!("{:<44} {rate:>12.0}", format!("over {spread} sessions, log discarded"));
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
