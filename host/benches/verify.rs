//! `approval-host verify` over a gigabyte of logs: throughput and peak memory.
//!
//! Writes `BENCH_VERIFY_MB` (default 1024) MB of chained logs, split over 64 sessions (turns of
//! a recorded tool call, a question and its decision, and the tool result), then verifies every
//! session as `verify --all` does, streaming each file. Run:
//! `RUST_BACKTRACE=0 cargo bench -p approval-host --bench verify` (`BENCH_DIR` for another disk).

use std::io::{BufWriter, Write};
use std::path::Path;
use std::time::Instant;

use approval_host::audit::chain;
use approval_host::audit::verify::verify_file;
use approval_host::event::{Asked, Decided, Event, Record, ToolCall, ToolResult};
use approval_host::store::DirStore;

fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Writes about `bytes` of chained log for `session`; returns the bytes written.
fn write_session(path: &Path, session: &str, bytes: u64) -> u64 {
    let mut out = BufWriter::with_capacity(1 << 20, std::fs::File::create(path).unwrap());
    let mut head = chain::genesis(session);
    let mut seq = 0;
    let mut written = 0u64;
    let mut line = Vec::with_capacity(512);
    let mut turn = 0u64;
    while written < bytes {
        turn += 1;
        let id = format!("{turn:08x}-9b1e-4c55-8d0f-3c1b1b1b1b1b");
        let call = format!("call-{turn}");
        let events = [
            Event::TurnStart,
            Event::ToolCall(ToolCall {
                call_id: call.clone(),
                name: "bash".into(),
                arguments: serde_json::json!({"command": "cargo test --workspace --locked", "timeout": 600}),
                permission_mode: None,
                redacted: Vec::new(),
            }),
            Event::Asked(Asked {
                call_id: Some(call.clone()),
                reason: Some("run the tests".into()),
                agent: Some("main".into()),
                cwd: Some("/work/project".into()),
                ..Asked::new(id.clone(), "bash")
            }),
            Event::Decided(Decided {
                answerer: Some("allow-tools".into()),
                digest: Some(
                    "28ca0156a12e11c1376171c7b6a2725200016466949458315ff441bda695041d".into(),
                ),
                ..Decided::bare(id, approval_host::Outcome::AllowedOnce)
            }),
            Event::ToolResult(ToolResult {
                call_id: call,
                is_error: false,
                content: serde_json::json!("test result: ok. 160 passed; 0 failed"),
                failed_listener: None,
            }),
            Event::TurnEnd,
        ];
        for event in events {
            seq += 1;
            line.clear();
            Record::now(seq, event).write_chained_line(&head, &mut line);
            head = chain::line_hash(&line);
            out.write_all(&line).unwrap();
            written += line.len() as u64;
        }
    }
    out.flush().unwrap();
    written
}

fn main() {
    let mb: u64 = std::env::var("BENCH_VERIFY_MB")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1024);
    let base = std::env::var_os("BENCH_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let dir = tempfile::tempdir_in(&base).unwrap();
    let store = DirStore::new(dir.path());
    std::fs::create_dir_all(store.sessions_dir()).unwrap();
    let sessions = 64;
    let per_session = mb * (1 << 20) / sessions;
    let mut total = 0;
    for i in 0..sessions {
        let session = format!("s{i}");
        total += write_session(&store.session_path(&session), &session, per_session);
    }
    let rss_before = peak_rss_kib();
    let start = Instant::now();
    let mut records = 0;
    for i in 0..sessions {
        let session = format!("s{i}");
        let report = verify_file(&store.session_path(&session), &session).unwrap();
        assert!(report.intact(), "{report:?}");
        records += report.records;
    }
    let took = start.elapsed().as_secs_f64();
    println!(
        "verify: {:.0} MB in {sessions} sessions ({records} records) in {took:.2} s: {:.0} MB/s; peak resident {:.1} MiB (was {:.1} MiB before verifying)",
        total as f64 / 1e6,
        total as f64 / 1e6 / took,
        peak_rss_kib() as f64 / 1024.0,
        rss_before as f64 / 1024.0
    );
}
