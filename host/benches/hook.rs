//! Each agent CLI's hook as the CLI pays for it: one whole process per tool call, from spawn to
//! exit, on the deployment `approval-host init <cli>` writes (its two example gates). For each
//! CLI: the first call after `init` (in a fresh project, several times), a warm call in process
//! (the hook loads the deployment from the compiled cache every call) and a call through a warm
//! `serve --socket`; beside them, in the same run, a bare `true` process and the deployment's
//! own plugin time (in this process: an engine, the two gates loaded from the warm cache, one
//! question answered).
//!
//! Goals (issue 41): the first call after `init` at most 1.5× a warm one; a warm call in process
//! at most 3× `true` plus the plugin time. Last, a warm call in a long session (1,000 and 5,000
//! tool calls already recorded) beside a fresh session's: the kept fold keeps it from growing
//! with the log.
//!
//! Run: `RUST_BACKTRACE=0 RUST_LIB_BACKTRACE=0 cargo bench -p approval-host --bench hook`
//! (`BENCH_SAMPLES`, default 40 warm calls per mode; `BENCH_FIRSTS`, default 5 fresh projects
//! per CLI).

mod common;

use std::io::Write as _;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use approval_host::plugin::cache::{CacheKey, CompiledCache};
use approval_host::{ApprovalRequest, ApprovalService, Deployment, Outcome, PluginHost, Policy};
use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_approval-host");

/// An agent CLI's hook: its name, the tool call it sends (`git push --force`, which the example
/// gates reject), and whether what it printed says so.
struct Cli {
    name: &'static str,
    call: fn(usize) -> Value,
    denied: fn(&Value) -> bool,
}

const CLIS: [Cli; 4] = [
    Cli {
        name: "claude-code",
        call: |n| {
            json!({"session_id": "bench", "transcript_path": "/tmp/t.jsonl", "cwd": "/w",
                "permission_mode": "default", "hook_event_name": "PreToolUse", "tool_name": "Bash",
                "tool_input": {"command": "git push --force origin main"}, "tool_use_id": format!("toolu_{n}")})
        },
        denied: |v| v["hookSpecificOutput"]["permissionDecision"] == "deny",
    },
    Cli {
        name: "codex",
        call: |n| {
            json!({"session_id": "bench", "turn_id": "1", "transcript_path": null, "cwd": "/w",
                "hook_event_name": "PreToolUse", "model": "gpt-5-codex",
                "permission_mode": "default", "tool_name": "Bash",
                "tool_input": {"command": "git push --force origin main"}, "tool_use_id": format!("c{n}")})
        },
        denied: |v| v["hookSpecificOutput"]["permissionDecision"] == "deny",
    },
    Cli {
        name: "gemini",
        call: |_| {
            json!({"session_id": "bench", "transcript_path": "/t", "cwd": "/w",
                "hook_event_name": "BeforeTool", "timestamp": "2026-12-05T10:00:00Z",
                "tool_name": "run_shell_command", "tool_input": {"command": "git push --force origin main"}})
        },
        denied: |v| v["decision"] == "deny",
    },
    Cli {
        name: "copilot",
        call: |n| {
            json!({"sessionId": "bench", "timestamp": n, "cwd": "/w", "toolName": "bash",
                "toolArgs": {"command": "git push --force origin main"}})
        },
        denied: |v| v["permissionDecision"] == "deny",
    },
];

/// A project `init` set up for one CLI, with a home and a state directory of its own.
struct Project {
    _dir: tempfile::TempDir,
    home: PathBuf,
    state: PathBuf,
    deployment: PathBuf,
}

fn command(program: &str, home: &Path) -> Command {
    let mut c = Command::new(program);
    c.env("HOME", home)
        .env("RUST_LOG", "error")
        .env_remove("XDG_STATE_HOME")
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("APPROVAL_HOST_CACHE_KEY")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

fn init(cli: &Cli) -> Project {
    let dir = tempfile::tempdir().unwrap();
    let (project, home, state) = (
        dir.path().join("project"),
        dir.path().join("home"),
        dir.path().join("state"),
    );
    std::fs::create_dir_all(&project).unwrap();
    std::fs::create_dir_all(&home).unwrap();
    let out = command(BIN, &home)
        .args(["init", cli.name, "--project"])
        .arg(&project)
        .arg("--state-dir")
        .arg(&state)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "init {}: {}",
        cli.name,
        String::from_utf8_lossy(&out.stderr)
    );
    Project {
        deployment: project
            .join(".approval-host")
            .join(format!("{}.toml", cli.name)),
        _dir: dir,
        home,
        state,
    }
}

/// One hook call, spawn to exit.
fn hook(cli: &Cli, project: &Project, socket: Option<&Path>, n: usize) -> Duration {
    let input = (cli.call)(n).to_string();
    let mut c = command(BIN, &project.home);
    c.arg("--state-dir")
        .arg(&project.state)
        .args(["hook", cli.name, "--config"])
        .arg(&project.deployment);
    if let Some(socket) = socket {
        c.arg("--socket").arg(socket);
    }
    let (took, out) = timed(&mut c, &input);
    let printed: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
        panic!(
            "{}: {} / {}",
            cli.name,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert!((cli.denied)(&printed), "{}: {printed}", cli.name);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        !said.contains(approval_host::plugin::cache::COLD_CACHE),
        "{}: {said}",
        cli.name
    );
    took
}

/// Runs `command` with `input` on its stdin, spawn to exit.
fn timed(command: &mut Command, input: &str) -> (Duration, std::process::Output) {
    let start = Instant::now();
    let mut child = command.spawn().unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (start.elapsed(), out)
}

/// Claude Code's after-tool hook (`PostToolUse`) for call `n`, spawn to exit: it finds the
/// call's question in the session's log and records that the call ran.
fn after_tool(project: &Project, n: usize) -> Duration {
    let mut input = (CLIS[0].call)(n);
    input["hook_event_name"] = json!("PostToolUse");
    input["tool_response"] = json!({"stdout": "", "stderr": "", "interrupted": false});
    let mut c = command(BIN, &project.home);
    c.arg("--state-dir")
        .arg(&project.state)
        .args(["hook", "claude-code", "--after-tool", "--config"])
        .arg(&project.deployment);
    let (took, out) = timed(&mut c, &input.to_string());
    assert!(
        out.status.success(),
        "after-tool: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    took
}

fn serve(project: &Project) -> (Child, PathBuf) {
    let socket = project.state.join("serve.sock");
    let mut c = command(BIN, &project.home);
    c.arg("--state-dir")
        .arg(&project.state)
        .args(["serve", "--no-watch", "--config"])
        .arg(&project.deployment)
        .arg("--socket")
        .arg(&socket)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let server = c.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(300);
    while UnixStream::connect(&socket).is_err() {
        assert!(Instant::now() < deadline, "serve did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    (server, socket)
}

/// A bare process: `true`, spawn to exit, with the same pipes as a hook.
fn bare(home: &Path) -> Duration {
    let start = Instant::now();
    let out = command("true", home).output().unwrap();
    let took = start.elapsed();
    assert!(out.status.success());
    took
}

/// The deployment's own plugin time, as a hook process pays it: an engine, its gates loaded from
/// the warm compiled cache, one question answered (the log discarded).
fn plugin_time(project: &Project) -> Duration {
    let key =
        CacheKey::load_or_create(&project.home.join(".config/approval-host/cache.key")).unwrap();
    let deployment = Deployment::load(&project.deployment).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let start = Instant::now();
    let host = PluginHost::for_one_question(
        std::sync::Arc::new(approval_host::plugin::TracingSink),
        CompiledCache::with_key(project.state.join("cache"), key),
        deployment.plugins.len(),
    )
    .unwrap();
    let service = ApprovalService::new(common::NullStore, Policy::Ask);
    let _mounted = approval_host::assemble::mount(
        &service,
        &host,
        &deployment,
        approval_host::plugin::QuarantinePolicy::default(),
    )
    .unwrap();
    let outcome = runtime.block_on(async {
        let agent = service.agent("p", "a").await.unwrap();
        service.start_turn("p").await.unwrap();
        service
            .record_tool_call(
                &agent,
                "c1",
                "Bash",
                json!({"command": "git push --force origin main"}),
            )
            .await
            .unwrap();
        service
            .request(ApprovalRequest::new(&agent, "Bash").call_id("c1"))
            .await
            .unwrap()
    });
    let took = start.elapsed();
    assert_eq!(outcome, Outcome::Rejected);
    took
}

/// Fills the `bench` session of `project` with `calls` tool calls as a hook records them (five
/// records each: the turn, the call, its question and decision), straight through the store.
fn long_session(project: &Project, calls: usize) -> u64 {
    use approval_host::event::{Asked, Decided, Event, ToolCall};
    let store = approval_host::DirStore::new(&project.state);
    let log = approval_host::log::SessionLog::open(&store, "bench").unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        for i in 0..calls {
            let call_id = format!("toolu_long_{i}");
            let id = uuid::Uuid::new_v4().to_string();
            let mut asked = Asked::new(&id, "Bash");
            asked.call_id = Some(call_id.clone());
            for event in [
                Event::TurnStart,
                Event::ToolCall(ToolCall {
                    call_id,
                    name: "Bash".to_owned(),
                    arguments: json!({"command": format!("cargo test -p approval-host --test all case_{i} -- --nocapture"), "description": "Run one test"}),
                    permission_mode: Some("default".to_owned()),
                    redacted: Vec::new(),
                }),
                Event::Asked(asked),
                Event::Decided(Decided::bare(&id, Outcome::Rejected)),
                Event::TurnEnd,
            ] {
                log.append(event).await.unwrap();
            }
        }
    });
    log.len()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn p50(mut took: Vec<Duration>) -> Duration {
    took.sort();
    took[took.len() / 2]
}

fn main() {
    let samples: usize = std::env::var("BENCH_SAMPLES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(40);
    let firsts: usize = std::env::var("BENCH_FIRSTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    println!(
        "each agent CLI's hook, a whole process per call, on `init`'s deployment (two Rust gates); {} build, RUST_BACKTRACE={:?}",
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
        std::env::var("RUST_BACKTRACE").unwrap_or_default()
    );
    println!("p50 of {firsts} fresh projects (first call) and {samples} calls (the others)");
    println!(
        "{:<12} {:>16} {:>14} {:>16} {:>12}",
        "hook", "first after init", "warm in process", "through --socket", "first/warm"
    );
    let mut n = 0;
    let mut warm_all = Vec::new();
    let mut plugin_all = Vec::new();
    let mut true_all = Vec::new();
    for cli in &CLIS {
        let mut first = Vec::new();
        let mut project = None;
        for _ in 0..firsts {
            let p = init(cli);
            n += 1;
            first.push(hook(cli, &p, None, n));
            project = Some(p);
        }
        let project = project.expect("at least one fresh project");
        let warm: Vec<Duration> = (0..samples)
            .map(|_| {
                n += 1;
                hook(cli, &project, None, n)
            })
            .collect();
        let (mut server, socket) = serve(&project);
        for _ in 0..3 {
            n += 1;
            hook(cli, &project, Some(&socket), n);
        }
        let through: Vec<Duration> = (0..samples)
            .map(|_| {
                n += 1;
                hook(cli, &project, Some(&socket), n)
            })
            .collect();
        let _ = server.kill();
        let _ = server.wait();
        true_all.extend((0..samples).map(|_| bare(&project.home)));
        plugin_all.extend((0..samples.min(20)).map(|_| plugin_time(&project)));
        let (first, warm_p50) = (p50(first), p50(warm.clone()));
        warm_all.push(warm_p50);
        println!(
            "{:<12} {:>13.1} ms {:>11.1} ms {:>13.1} ms {:>11.2}×",
            cli.name,
            ms(first),
            ms(warm_p50),
            ms(p50(through)),
            first.as_secs_f64() / warm_p50.as_secs_f64()
        );
    }
    let (bare, plugins) = (p50(true_all), p50(plugin_all));
    println!();
    println!("a bare `true` process: {:.2} ms", ms(bare));
    println!(
        "the deployment's plugin time (engine, two gates from the warm cache, one question): {:.2} ms",
        ms(plugins)
    );
    let budget = 3.0 * ms(bare) + ms(plugins);
    println!();
    println!(
        "a long session ({}): its first call reads the whole log and keeps the session's fold; warm calls read only what follows it, beside warm calls in a new session of another project (which keeps a fold of its own once past 64 records), taken in turn",
        CLIS[0].name
    );
    println!(
        "{:>10} {:>8} {:>20} {:>10} {:>10} {:>14} {:>8} {:>12} {:>14}",
        "tool calls",
        "records",
        "first (reads it all)",
        "warm",
        "warm mean",
        "fresh session",
        "ratio",
        "after-tool",
        "fresh session"
    );
    for calls in [1_000, 5_000] {
        let cli = &CLIS[0];
        let (project, fresh) = (init(cli), init(cli));
        let records = long_session(&project, calls);
        n += 1;
        let first = hook(cli, &project, None, n);
        let (mut long, mut short) = (Vec::new(), Vec::new());
        let (mut long_after, mut short_after) = (Vec::new(), Vec::new());
        for _ in 0..samples.min(30) {
            n += 1;
            long.push(hook(cli, &project, None, n));
            short.push(hook(cli, &fresh, None, n));
            long_after.push(after_tool(&project, n));
            short_after.push(after_tool(&fresh, n));
        }
        // The mean counts the calls that write the fold again (one in about thirteen).
        let mean = long.iter().sum::<Duration>() / long.len() as u32;
        let (long, short) = (p50(long), p50(short));
        println!(
            "{calls:>10} {records:>8} {:>17.1} ms {:>7.1} ms {:>7.1} ms {:>11.1} ms {:>7.2}× {:>9.1} ms {:>11.1} ms",
            ms(first),
            ms(long),
            ms(mean),
            ms(short),
            long.as_secs_f64() / short.as_secs_f64(),
            ms(p50(long_after)),
            ms(p50(short_after))
        );
    }
    for (cli, warm) in CLIS.iter().zip(&warm_all) {
        println!(
            "{:<12} warm in process {:.1} ms against 3 × true + plugins = {budget:.1} ms: {:.2}×",
            cli.name,
            ms(*warm),
            ms(*warm) / budget
        );
    }
}
