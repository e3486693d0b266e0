//! Durable decisions per second on PostgreSQL against the file store and against the database's
//! own speed in the same run, with one and two hosts on one database, and how long a rule added on
//! one host takes to reach another.
//!
//! Each request appends `approval/asked` and `approval/decided` around one in-process allow
//! listener. The baseline is what the cluster does without the host: per request, one `INSERT` of
//! the same two records' bytes and its `COMMIT`, through tokio-postgres, each client on its own
//! connection committing on its own. Run beside a throwaway cluster:
//! `.ci/with-postgres cargo bench -p approval-host --bench postgres` (it reads
//! `APPROVAL_HOST_TEST_POSTGRES`; `BENCH_SECONDS` sets the time per row, default 2).

use std::sync::Arc;
use std::time::{Duration, Instant};

use approval_host::answer::{Effect, RuleScope};
use approval_host::rules::{self, NewRule, RuleBook};
use approval_host::{
    ApprovalRequest, ApprovalService, Decision, Failure, Outcome, PgOptions, PgStore, Policy,
    Position, Question, Scope, Store,
};

fn sql(url: &str, statements: &str) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        client.batch_execute(statements).await.unwrap();
    });
}

/// A fresh schema and a URL that works in it.
fn fresh_schema(base: &str) -> String {
    let schema = format!("bench_{}", uuid::Uuid::new_v4().simple());
    sql(base, &format!("CREATE SCHEMA {schema}"));
    format!("{base} options=-csearch_path={schema}")
}

fn pg(url: &str, label: &str) -> Arc<dyn Store> {
    let mut options = PgOptions::new(url);
    options.host_label = label.to_owned();
    options.migrate = true;
    Arc::new(PgStore::connect(options).unwrap())
}

/// Requests per second with `askers` concurrent askers spread over `logs` sessions of each of
/// `hosts` services (each on its own sessions).
async fn rate(hosts: &[ApprovalService], askers: usize, logs: usize, seconds: f64) -> f64 {
    let mut agents = Vec::new();
    let mut guards = Vec::new();
    for (h, service) in hosts.iter().enumerate() {
        guards.push(service.register(
            "allow",
            Scope::Global,
            Position::Back,
            |_q: Question| async { Ok::<_, Failure>(Decision::AllowOnce) },
        ));
        for l in 0..logs {
            let session = format!("bench-{h}-{l}");
            agents.push((service.clone(), service.agent(&session, "a").await.unwrap()));
            service.start_turn(&session).await.unwrap();
        }
    }
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..askers {
        let (service, agent) = agents[i % agents.len()].clone();
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

/// The bytes of one request's two records (`approval/asked`, `approval/decided`) as the host
/// writes them.
fn request_lines() -> (String, String) {
    let dir = tempfile::tempdir().unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let service = ApprovalService::open_dir(dir.path(), Policy::Ask);
        let _allow = service.register(
            "allow",
            Scope::Global,
            Position::Back,
            |_q: Question| async { Ok::<_, Failure>(Decision::AllowOnce) },
        );
        let agent = service.agent("bench-0-0", "a").await.unwrap();
        service.start_turn("bench-0-0").await.unwrap();
        service
            .request(ApprovalRequest::new(&agent, "bash"))
            .await
            .unwrap();
    });
    let text =
        std::fs::read_to_string(dir.path().join("sessions").join("bench-0-0.jsonl")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let n = lines.len();
    (lines[n - 2].to_owned(), lines[n - 1].to_owned())
}

/// The database alone: `clients` connections, each inserting a request's two records in one
/// `INSERT` and committing it, over and over; requests per second.
fn baseline(
    runtime: &tokio::runtime::Runtime,
    url: &str,
    clients: usize,
    seconds: f64,
    lines: &(String, String),
) -> f64 {
    let url = fresh_schema(url);
    sql(
        &url,
        "CREATE TABLE baseline_records (session TEXT NOT NULL, seq BIGINT NOT NULL, line TEXT NOT NULL, PRIMARY KEY (session, seq))",
    );
    runtime.block_on(insert_rate(&url, clients, seconds, lines))
}

async fn insert_rate(url: &str, clients: usize, seconds: f64, lines: &(String, String)) -> f64 {
    let mut connections = Vec::new();
    for _ in 0..clients {
        let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        connections.push(client);
    }
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let start = Instant::now();
    let tasks: Vec<_> = connections
        .into_iter()
        .enumerate()
        .map(|(i, client)| {
            let (asked, decided) = lines.clone();
            tokio::spawn(async move {
                let insert = client
                    .prepare(
                        "INSERT INTO baseline_records (session, seq, line) VALUES ($1, $2, $3), ($1, $4, $5)",
                    )
                    .await
                    .unwrap();
                let session = format!("bench-{i}");
                let mut n = 0i64;
                while Instant::now() < deadline {
                    client
                        .execute(&insert, &[&session, &(2 * n), &asked, &(2 * n + 1), &decided])
                        .await
                        .unwrap();
                    n += 1;
                }
                n as u64
            })
        })
        .collect();
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap();
    }
    total as f64 / start.elapsed().as_secs_f64()
}

/// Milliseconds from a rule's `add` returning on host A until host B's book lists it, `n` times.
fn rule_delays(url: &str, n: usize) -> Vec<f64> {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let book = |label: &str| {
        RuleBook::open(
            pg(url, label),
            "bench-project",
            vec![],
            vec![],
            rules::system_clock(),
        )
        .unwrap()
    };
    let (a, b) = (book("host-a"), book("host-b"));
    let mut delays = Vec::new();
    for i in 0..n {
        let added = runtime
            .block_on(a.add_shared(NewRule {
                rule: format!("Bash(make target{i}:*)"),
                effect: Effect::Allow,
                scope: RuleScope::Project,
                session: None,
                lasts: None,
                creator: "bench".into(),
                reason: None,
            }))
            .unwrap();
        let start = Instant::now();
        while !b.list(None).iter().any(|r| r.id == added.id) {
            assert!(start.elapsed() < Duration::from_secs(10));
            std::thread::sleep(Duration::from_millis(1));
        }
        delays.push(start.elapsed().as_secs_f64() * 1000.0);
    }
    delays.sort_by(f64::total_cmp);
    delays
}

fn main() {
    let base = std::env::var("APPROVAL_HOST_TEST_POSTGRES")
        .expect("run through .ci/with-postgres (APPROVAL_HOST_TEST_POSTGRES names the database)");
    let seconds: f64 = std::env::var("BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2.0);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    println!(
        "durable requests (asked + decided), {seconds} s per row; PostgreSQL against the file store, same run"
    );
    let lines = request_lines();
    println!(
        "the records of one request: {} + {} bytes",
        lines.0.len() + 1,
        lines.1.len() + 1
    );
    println!(
        "{:<44} {:>12} {:>10} {:>10}",
        "scenario", "per second", "× file", "× INSERT"
    );
    for (askers, logs) in [(1, 1), (64, 1), (64, 64)] {
        let insert = baseline(&runtime, &base, askers, seconds, &lines);
        let dir = tempfile::tempdir().unwrap();
        let file = runtime.block_on(rate(
            &[ApprovalService::open_dir(dir.path(), Policy::Ask)],
            askers,
            logs,
            seconds,
        ));
        let label = |store: &str| {
            format!(
                "{askers} asker{} on {logs} log{}, {store}",
                if askers == 1 { "" } else { "s" },
                if logs == 1 { "" } else { "s" }
            )
        };
        println!(
            "{:<44} {insert:>12.0} {:>10.2} {:>10.2}",
            format!(
                "{askers} client{} INSERT + COMMIT (baseline)",
                if askers == 1 { "" } else { "s" }
            ),
            insert / file,
            1.0
        );
        println!(
            "{:<44} {file:>12.0} {:>10.2} {:>10.2}",
            label("file store"),
            1.0,
            file / insert
        );
        let url = fresh_schema(&base);
        let one = runtime.block_on(rate(
            &[ApprovalService::with_store(pg(&url, "a"), Policy::Ask)],
            askers,
            logs,
            seconds,
        ));
        println!(
            "{:<44} {one:>12.0} {:>10.2} {:>10.2}",
            label("PostgreSQL"),
            one / file,
            one / insert
        );
        if askers > 1 {
            let url = fresh_schema(&base);
            let hosts = [
                ApprovalService::with_store(pg(&url, "a"), Policy::Ask),
                ApprovalService::with_store(pg(&url, "b"), Policy::Ask),
            ];
            let per_host_logs = logs.div_ceil(2);
            let two = runtime.block_on(rate(&hosts, askers, per_host_logs, seconds));
            println!(
                "{:<44} {two:>12.0} {:>10.2} {:>10.2}",
                format!(
                    "{askers} askers, two hosts, {} logs each, PG",
                    per_host_logs
                ),
                two / file,
                two / insert
            );
        }
    }
    let delays = rule_delays(&fresh_schema(&base), 20);
    println!(
        "a rule added on host A, listed on host B after: median {:.0} ms, max {:.0} ms (refresh interval {} ms)",
        delays[delays.len() / 2],
        delays[delays.len() - 1],
        rules::REFRESH_EVERY.as_millis()
    );
}
