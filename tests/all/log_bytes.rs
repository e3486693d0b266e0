//! The bytes a log is written in do not change when the writer does: a log recorded by an earlier
//! host (`tests/logs/recorded.log`, every event type, strings that need escaping) is encoded
//! again, record by record, and must come out byte for byte the same, each line committing to
//! the one before it.
//!
//! To record the log again (only when the format is meant to change, with a new format number):
//! `APPROVAL_HOST_RECORD_LOG=1 cargo test --test all log_bytes::record -- --ignored`.

use std::path::PathBuf;

use approval_host::event::{Event, Record};
use approval_host::log::SessionLog;
use approval_host::store::DirStore;
use serde_json::json;

fn recorded() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/logs/recorded.log")
}

/// Every event type, with values that exercise the encoder: quotes, backslashes, control
/// characters, line and paragraph separators, non-ASCII text, nested arguments, numbers.
fn events() -> Vec<(&'static str, serde_json::Value)> {
    let awkward =
        "a \"quoted\" \\ back\\slash\ttab\nnewline \u{1} \u{7f} \u{2028}\u{2029} é 漢 🦀 </script>";
    vec![
        (
            "approval/policy",
            json!({"policy": "ask", "source": "delegation"}),
        ),
        ("turn/start", json!({})),
        (
            "tool/call",
            json!({"callId": "c1", "name": "Bash", "arguments": {"command": awkward, "n": [1, 2.5, -3e-7, null, true], "nested": {"z": "last", "a": "first"}}, "permissionMode": "default"}),
        ),
        (
            "approval/asked",
            json!({"id": "0b0e9f4c-3f6e-4a47-9a36-5c1c4d2e8f10", "toolName": "Bash", "callId": "c1", "reason": awkward, "agent": "main", "parentAgent": "lead", "cwd": "/work/a b/\"c\"", "sandboxMode": "workspace-write", "undeclared": ["path", "x\"y"]}),
        ),
        (
            "hook/invoked",
            json!({"hook": "pre", "event": "PreToolUse", "toolName": "Bash", "callId": "c1"}),
        ),
        (
            "hook/result",
            json!({"hook": "pre", "callId": "c1", "exitCode": 2, "decision": "deny", "reason": awkward}),
        ),
        (
            "approval/decided",
            json!({"id": "0b0e9f4c-3f6e-4a47-9a36-5c1c4d2e8f10", "outcome": "rejected", "answerer": "gate \"one\"", "digest": "ab".repeat(32), "reason": awkward, "proposal": {"effect": "reject", "tool": "Bash", "pattern": "git push *", "scope": "project"}, "ruleDeclined": "a rule \"why\""}),
        ),
        (
            "approval/shadowed",
            json!({"id": "0b0e9f4c-3f6e-4a47-9a36-5c1c4d2e8f10", "plugin": "shadow", "would": "allowed-once", "reason": awkward, "decided": "rejected", "agrees": false}),
        ),
        (
            "tool/result",
            json!({"callId": "c1", "isError": true, "content": [{"type": "text", "text": awkward}]}),
        ),
        (
            "approval/asked",
            json!({"id": "q2", "toolName": "mcp__notes__read"}),
        ),
        (
            "approval/decided",
            json!({"id": "q2", "outcome": "unavailable", "failure": {"plugin": "p", "kind": "timeout"}}),
        ),
        ("approval/asked", json!({"id": "q3", "toolName": "Read"})),
        (
            "approval/decided",
            json!({"id": "q3", "outcome": "allowed-once", "answerer": "rule:r1", "rule": {"id": "r1", "rule": "Read(./docs/**)", "scope": "project", "creator": "console"}, "ruleAdded": "r9", "outside": true}),
        ),
        (
            "sandbox/mode",
            json!({"mode": "read-only", "source": "console"}),
        ),
        (
            "rule/added",
            json!({"id": "r9", "tool": "Bash", "pattern": awkward, "effect": "allow", "scope": "session", "expiresAt": "2026-12-08T00:00:00Z", "creator": "person", "reason": "because"}),
        ),
        (
            "rule/revoked",
            json!({"id": "r9", "by": "console", "reason": awkward}),
        ),
        (
            "approval/unasked",
            json!({"toolName": "Write", "why": "not-answered", "callId": "c2", "question": "q9", "arguments": {"file_path": awkward}}),
        ),
        (
            "mcp/message",
            json!({"from": "server", "method": "sampling/createMessage", "handled": "refused", "why": awkward, "server": "notes"}),
        ),
        (
            "mcp/pinned",
            json!({"server": "notes", "tool": "read_note", "hash": "cd".repeat(32), "definition": {"name": "read_note", "description": awkward}, "by": "first-use"}),
        ),
        (
            "mcp/pin-wanted",
            json!({"server": "notes", "tool": "read_note", "hash": "ef".repeat(32), "definition": {"name": "read_note"}, "previous": "cd".repeat(32)}),
        ),
        ("turn/end", json!({"source": "takeover"})),
        ("turn/start", json!({})),
        ("turn/end", json!({})),
    ]
}

/// Records `tests/logs/recorded.log` with this host's writer.
#[tokio::test]
#[ignore = "records the fixture; run by hand with APPROVAL_HOST_RECORD_LOG=1"]
async fn record() {
    if std::env::var_os("APPROVAL_HOST_RECORD_LOG").is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let store = DirStore::new(dir.path());
    let log = SessionLog::open(&store, "recorded").unwrap();
    for (kind, data) in events() {
        let event = Event::from_parts(kind, data).unwrap_or_else(|e| panic!("{kind}: {e}"));
        log.append(event)
            .await
            .unwrap_or_else(|e| panic!("{kind}: {e}"));
    }
    let name = log.name().to_owned();
    drop(log);
    std::fs::copy(name, recorded()).unwrap();
}

#[test]
fn a_recorded_log_is_encoded_again_byte_for_byte() {
    let bytes = std::fs::read(recorded()).unwrap();
    let lines: Vec<&[u8]> = bytes.split_inclusive(|b| *b == b'\n').collect();
    assert_eq!(
        lines.len(),
        events().len(),
        "every event type is in the log"
    );
    let mut kinds: Vec<&str> = Vec::new();
    let mut prev = approval_host::audit::chain::genesis("recorded");
    for (i, line) in lines.iter().enumerate() {
        let (record, link) = Record::parse_linked(&line[..line.len() - 1])
            .unwrap_or_else(|e| panic!("line {}: {e}", i + 1));
        assert_eq!(
            link.as_deref(),
            Some(approval_host::audit::chain::hex(&prev).as_str()),
            "line {} commits to the line before it",
            i + 1
        );
        let mut again = Vec::new();
        record.write_chained_line(&prev, &mut again);
        assert_eq!(
            String::from_utf8_lossy(&again),
            String::from_utf8_lossy(line),
            "line {} is written as it was recorded",
            i + 1
        );
        prev = approval_host::audit::chain::line_hash(line);
        kinds.push(record.event.kind());
    }
    kinds.sort_unstable();
    kinds.dedup();
    assert_eq!(
        kinds.len(),
        approval_host::event::types::ALL.len(),
        "each event type is recorded: {kinds:?}"
    );
}
