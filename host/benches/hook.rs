//! The Claude Code hook as Claude Code pays for it: one whole process per tool call, from spawn
//! to exit, with two Python gates in the deployment (`allow-tools` and `deny-commands` from
//! `plugins/build-guests`; the Rust builds when the Python ones are missing, said in the output).
//! In process (the hook loads the deployment from the compiled cache every call) against through
//! a warm `serve --socket`, in the same run.
//!
//! Run: `RUST_BACKTRACE=0 RUST_LIB_BACKTRACE=0 cargo bench -p approval-host --bench hook`
//! (`BENCH_SAMPLES`, default 60 per mode).

use std::io::Write as _;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use approval_host::bundled;
use serde_json::json;

fn guests_dir() -> PathBuf {
    std::env::var_os("APPROVAL_HOST_GUESTS_DIR").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/guests"),
        PathBuf::from,
    )
}

const BIN: &str = env!("CARGO_BIN_EXE_approval-host");

fn hook(state: &Path, args: &[&str], call: usize) -> Duration {
    let input = json!({"session_id": "bench-session", "transcript_path": "/tmp/t.jsonl",
        "cwd": "/w", "permission_mode": "default", "hook_event_name": "PreToolUse",
        "tool_name": "Read", "tool_input": {"file_path": "/w/a"},
        "tool_use_id": format!("toolu_{call}")})
    .to_string();
    let start = Instant::now();
    let mut child = Command::new(BIN)
        .arg("--state-dir")
        .arg(state)
        .args(["hook", "claude-code"])
        .args(args)
        .env("RUST_LOG", "error")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let took = start.elapsed();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("\"allow\""), "{text}");
    took
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn main() {
    let samples: usize = std::env::var("BENCH_SAMPLES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path();
    let python = guests_dir().join("python");
    let (allow, deny, language) = if python.join("allow-tools.wasm").exists() {
        (
            python.join("allow-tools.wasm"),
            python.join("deny-commands.wasm"),
            "Python",
        )
    } else {
        (
            PathBuf::from(bundled::ALLOW_TOOLS_PATH),
            PathBuf::from(bundled::DENY_COMMANDS_PATH),
            "Rust (no Python builds found: run plugins/build-guests)",
        )
    };
    let config = state.join("deploy.toml");
    std::fs::write(
        &config,
        format!(
            "[[plugin]]\nname = \"allow-tools\"\npath = {allow:?}\nrole = \"gate\"\n[plugin.config]\ntools = \"Read\"\n\n\
             [[plugin]]\nname = \"deny-commands\"\npath = {deny:?}\nrole = \"gate\"\n[plugin.config]\npatterns = \"rm -rf\"\n"
        ),
    )
    .unwrap();
    let config = config.to_str().unwrap().to_owned();
    let socket = state.join("serve.sock");
    let mut server = Command::new(BIN)
        .arg("--state-dir")
        .arg(state)
        .args(["serve", "--no-watch", "--config", &config, "--socket"])
        .arg(&socket)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(300);
    while UnixStream::connect(&socket).is_err() {
        assert!(Instant::now() < deadline, "serve did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    let socket = socket.to_str().unwrap().to_owned();
    let modes: [(&str, Vec<&str>); 2] = [
        ("in process (--config)", vec!["--config", &config]),
        ("through serve (--socket)", vec!["--socket", &socket]),
    ];
    // Warm both paths (the in-process hook's compiled cache is the server's).
    for (_, args) in &modes {
        for i in 0..3 {
            hook(state, args, 1_000_000 + i);
        }
    }
    println!(
        "Claude Code hook, a whole process per call, two {language} gates, {samples} calls each, RUST_BACKTRACE={:?}",
        std::env::var("RUST_BACKTRACE").unwrap_or_default()
    );
    println!(
        "{:<28} {:>9} {:>9} {:>9}",
        "mode", "p50 ms", "p99 ms", "max ms"
    );
    let mut call = 0;
    for (label, args) in &modes {
        let mut took: Vec<Duration> = (0..samples)
            .map(|_| {
                call += 1;
                hook(state, args, call)
            })
            .collect();
        took.sort();
        let p = |q: f64| ms(took[((took.len() - 1) as f64 * q).round() as usize]);
        println!(
            "{label:<28} {:>9.1} {:>9.1} {:>9.1}",
            p(0.5),
            p(0.99),
            p(1.0)
        );
    }
    let _ = server.kill();
    let _ = server.wait();
}
