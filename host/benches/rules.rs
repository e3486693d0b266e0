//! What standing rules cost a decision: a request through the seam with the rule gate first and
//! 0, 100 or 10,000 rules, against the same request with rules off, both when a rule decides the
//! call and when none does (the call then goes on to a native gate that grants).
//!
//! The session log discards its bytes, so the figures are the seam, the rule index and the
//! matching alone. The rules are a mix of command prefixes over many first words, exact
//! commands, path globs and domains, so the index (by tool, then by the command's first word) is
//! what keeps 10,000 rules cheap.
//!
//! A second table is the rule gate alone (the book deciding one `Bash` call, no seam) for a
//! 40-byte and a 2 KB command with 0, 100 and 10,000 rules: the command is read once per
//! decision by the bash parser and the option tables, and every rule is matched against that
//! reading, so the reading's cost must not grow with the rules. Beside it, the hand-written
//! splitter the host used before, on the same commands. Run:
//! `RUST_BACKTRACE=0 RUST_LIB_BACKTRACE=0 cargo bench -p approval-host --bench rules`
//! (`BENCH_SAMPLES`, default 20000).

mod common;
#[path = "common/old_splitter.rs"]
mod old_splitter;

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
    // The rules the benchmark's commands need, in place of the first few.
    for (i, text) in [
        "Bash(cargo test:*)",
        "Bash(git log:*)",
        "Bash(sort:*)",
        "Bash(uniq:*)",
        "Bash(grep:*)",
    ]
    .iter()
    .enumerate()
    .take(n)
    {
        statics[i] =
            RuleBook::deployment_rule(format!("r{i}"), text, Effect::Allow, "bench", None).unwrap();
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
        // Every call's command is new to the rule gate, as in real traffic.
        rules::command::forget();
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

/// Median and p99 of `f`, timed `samples` times after a warm-up.
fn time(samples: usize, mut f: impl FnMut()) -> (f64, f64) {
    for _ in 0..samples / 10 {
        f();
    }
    let mut out = Vec::with_capacity(samples);
    for _ in 0..samples {
        let start = Instant::now();
        f();
        out.push(start.elapsed());
    }
    out.sort();
    (
        micros(out[out.len() / 2]),
        micros(out[out.len() * 99 / 100]),
    )
}

/// A 40-byte command and a 2 KB one allowed by `Bash(cargo test:*)` (a program without an
/// option table), and the same sizes of pipelines whose programs are read by their option
/// tables (`git log`, `sort`, `uniq`, `grep`).
fn commands() -> [(&'static str, String); 4] {
    let short = "cargo test -p host -- --nocapture --quiet".to_owned();
    let mut long = "cargo test --workspace --features 'a b' -- --exact".to_owned();
    let mut i = 0;
    while long.len() < 2048 {
        long.push_str(&format!(" --skip 'module_{i}::a_test_name' 2>/dev/null"));
        i += 1;
    }
    long.truncate(long.rfind(" --skip").unwrap_or(long.len()));
    let tabled = "git log --oneline -5 | sort -k2 | uniq -c".to_owned();
    let mut tabled_long = "git log --oneline -n 50 --stat -- src/".to_owned();
    let mut i = 0;
    while tabled_long.len() < 2000 {
        tabled_long.push_str(&format!(
            " | grep -v -e 'skip_{i}' --color=never | sort -t, -k2 -n -u | uniq -c"
        ));
        i += 1;
    }
    [
        ("40 B", short),
        ("2 KB", long),
        ("40 B opt", tabled),
        ("2 KB opt", tabled_long),
    ]
}

fn gate_table(samples: usize) {
    println!();
    println!(
        "the rule gate alone, one Bash call ({samples} samples): old splitter vs the bash parser and option tables"
    );
    println!(
        "{:<8} {:>7} {:>13} {:>10} {:>15} {:>15} {:>13} {:>15}",
        "command",
        "rules",
        "old split µs",
        "parser µs",
        "new reading µs",
        "new gate p50 µs",
        "new gate p99",
        "read again p50"
    );
    let mut lines = Vec::new();
    for (label, command) in commands() {
        assert!(old_splitter::split(&command).is_ok() || label.ends_with("opt"));
        let (old, _) = time(samples, || {
            std::hint::black_box(old_splitter::split(std::hint::black_box(&command))).ok();
        });
        // The bash parser alone (brush-parser and the quote removal), on the same command.
        let (parser, _) = time(samples, || {
            std::hint::black_box(rules::shell::parse(std::hint::black_box(&command))).ok();
        });
        let (reading, _) = time(samples, || {
            rules::command::forget();
            std::hint::black_box(rules::command::read(std::hint::black_box(&command)));
        });
        for n in [0, 100, 10_000] {
            let service = ApprovalService::new(NullStore, Policy::Ask);
            let book = book(&service, n);
            let args = json!({ "command": command });
            let call = rules::pattern::Call {
                tool: "Bash",
                arguments: Some(&args),
                cwd: Some("/w"),
                undeclared: &[],
            };
            let want = (n > 0).then_some(Effect::Allow);
            assert_eq!(book.peek(&call, "s").map(|m| m.effect), want);
            // Each decision parses its command once...
            let (p50, p99) = time(samples, || {
                rules::command::forget();
                std::hint::black_box(book.peek(&call, "s"));
            });
            // ...and a second look at it (the rule gate after the built-in guard) does not.
            let (again, _) = time(samples, || {
                std::hint::black_box(book.peek(&call, "s"));
            });
            println!(
                "{label:<8} {n:>7} {old:>13.2} {parser:>10.2} {reading:>15.2} {p50:>15.2} {p99:>13.2} {again:>15.2}"
            );
            if n == 10_000 {
                lines.push((label, parser, reading, p50));
            }
        }
        println!(
            "{label:<8} reading / old split: {:.1}x",
            reading / old.max(f64::MIN_POSITIVE)
        );
    }
    println!();
    println!("what the option readers and protections add to the parser (CPU only):");
    println!(
        "{:<8} {:>10} {:>16} {:>22} {:>24}",
        "command",
        "parser µs",
        "reading / parser",
        "gate 10k rules / parser",
        "guard µs (file system)"
    );
    let (_dir, protected, cwd) = protected();
    for (label, parser, reading, gate) in lines {
        let command = commands()
            .into_iter()
            .find(|(l, _)| *l == label)
            .map(|(_, c)| c)
            .unwrap_or_default();
        let args = json!({ "command": command });
        // The built-in guard resolves the paths a command writes through the file system: its
        // figure is reported apart, lookups included.
        let (guard, _) = time(samples / 10, || {
            rules::command::forget();
            std::hint::black_box(protected.check("Bash", Some(&args), Some(&cwd)));
        });
        println!(
            "{label:<8} {parser:>10.2} {:>15.2}x {:>21.2}x {guard:>24.2}",
            reading / parser,
            gate / parser
        );
    }
}

/// A project with a deployment file and a state directory, as a host protects them.
fn protected() -> (tempfile::TempDir, rules::protect::Protected, String) {
    use rules::protect::{Area, Protected};
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().join("proj");
    std::fs::create_dir_all(project.join(".approval-host")).unwrap();
    std::fs::create_dir_all(dir.path().join("state")).unwrap();
    std::fs::write(project.join(".approval-host/claude-code.toml"), "").unwrap();
    let protected = Protected::new([
        Area::tree(
            "state-dir",
            "the state directory",
            &dir.path().join("state"),
        ),
        Area::file(
            "deployment",
            "the deployment file",
            &project.join(".approval-host/claude-code.toml"),
        ),
    ]);
    let cwd = project.display().to_string();
    (dir, protected, cwd)
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
    gate_table(samples);
}
