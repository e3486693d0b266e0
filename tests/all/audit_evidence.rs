//! The audit's evidence beyond one log: the checkpoint log is chained (a checkpoint removed,
//! reordered or inserted breaks it), checked with a public key a log with ended turns and no
//! checkpoint is `unsigned`, `verify --all` finds a log that is gone while its checkpoints remain
//! (here or in the copy), the state directory's checkpoints are compared with the copy, and bytes
//! that cannot be read are a finding about their file, never an abort of the run.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use approval_host::audit::checkpoint::{Checkpointer, checkpoints_in, checkpoints_path};
use approval_host::audit::verify::UNSIGNED;
use approval_host::{ApprovalRequest, ApprovalService, Decision, Policy, Position, Scope};
use serde_json::Value;

use crate::support::{counting, log_path};

/// A state directory whose logs are checkpointed with a key, and a copy of the checkpoints.
struct Evidence {
    keys: tempfile::TempDir,
    state: tempfile::TempDir,
    copy: tempfile::TempDir,
}

impl Evidence {
    fn new() -> Evidence {
        let keys = tempfile::tempdir().unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_approval-host"))
            .arg("keygen")
            .arg(keys.path().join("audit.key"))
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        Evidence {
            keys,
            state: tempfile::tempdir().unwrap(),
            copy: tempfile::tempdir().unwrap(),
        }
    }

    /// Two turns of two questions in `session`, checkpointed at each turn's end, here and in
    /// the copy.
    async fn write(&self, session: &str) -> PathBuf {
        let service = ApprovalService::open_dir(self.state.path(), Policy::Ask);
        let key =
            approval_host::audit::checkpoint::load_signing_key(&self.keys.path().join("audit.key"))
                .unwrap();
        service.set_checkpointer(Some(Arc::new(
            Checkpointer::new(key, self.state.path()).with_copy(self.copy.path()),
        )));
        let (_c, allow) = counting(Decision::AllowOnce);
        let _r = service.register("allow", Scope::Global, Position::Back, allow);
        let agent = service.agent(session, "a").await.unwrap();
        for _ in 0..2 {
            service.start_turn(session).await.unwrap();
            for tool in ["read", "bash"] {
                service
                    .request(ApprovalRequest::new(&agent, tool))
                    .await
                    .unwrap();
            }
            service.end_turn(session).await.unwrap();
        }
        log_path(self.state.path(), session)
    }

    fn local(&self, session: &str) -> PathBuf {
        checkpoints_path(self.state.path(), session)
    }

    fn copied(&self, session: &str) -> PathBuf {
        checkpoints_in(self.copy.path(), session)
    }

    /// `verify --public-key … ARGS`: the exit code and what it printed.
    fn verify(&self, args: &[&str]) -> (i32, String) {
        let out = Command::new(env!("CARGO_BIN_EXE_approval-host"))
            .arg("--state-dir")
            .arg(self.state.path())
            .arg("verify")
            .arg("--public-key")
            .arg(self.keys.path().join("audit.key.pub"))
            .args(args)
            .output()
            .unwrap();
        (
            out.status.code().unwrap(),
            String::from_utf8(out.stdout).unwrap(),
        )
    }

    fn verify_with_copy(&self, args: &[&str]) -> (i32, String) {
        let mut all = vec!["--checkpoints", self.copy.path().to_str().unwrap()];
        all.extend_from_slice(args);
        self.verify(&all)
    }
}

fn lines_of(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

fn write_lines(path: &Path, lines: &[String]) {
    let mut text = lines.join("\n");
    text.push('\n');
    std::fs::write(path, text).unwrap();
}

/// The line `verify` printed for `session`.
fn line_for<'a>(out: &'a str, session: &str) -> &'a str {
    out.lines()
        .find(|l| l.starts_with(&format!("{session}: ")))
        .unwrap_or_else(|| panic!("nothing about {session}: {out}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_checkpoint_commits_to_the_one_before_so_one_removed_or_moved_is_found() {
    let evidence = Evidence::new();
    evidence.write("s1").await;
    let checkpoints = lines_of(&evidence.local("s1"));
    assert_eq!(checkpoints.len(), 2);
    let parsed: Vec<Value> = checkpoints
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        (parsed[0]["n"].as_u64(), parsed[1]["n"].as_u64()),
        (Some(1), Some(2))
    );
    assert_eq!(
        parsed[0]["prev"].as_str().unwrap(),
        approval_host::audit::checkpoint::first_link("s1")
    );
    let (code, out) = evidence.verify(&["s1"]);
    assert_eq!(code, 0, "{out}");

    // The first checkpoint removed (the second stays, signed and genuine): the chain breaks.
    write_lines(&evidence.local("s1"), &checkpoints[1..]);
    let (code, out) = evidence.verify(&["s1"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        line_for(&out, "s1").contains(
            "(checkpoint-invalid): checkpoint 1 does not follow the one before it: checkpoints were removed, reordered or inserted"
        ),
        "{out}"
    );
    // Swapped: the same.
    write_lines(
        &evidence.local("s1"),
        &[checkpoints[1].clone(), checkpoints[0].clone()],
    );
    let (code, out) = evidence.verify(&["s1"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        line_for(&out, "s1").contains("(checkpoint-invalid)"),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_state_directory_s_checkpoints_are_compared_with_the_copy() {
    let evidence = Evidence::new();
    evidence.write("s1").await;
    let (code, out) = evidence.verify_with_copy(&["s1"]);
    assert_eq!(code, 0, "{out}");
    let checkpoints = lines_of(&evidence.local("s1"));

    // The last local checkpoint dropped, the log left whole: the copy still holds it.
    write_lines(&evidence.local("s1"), &checkpoints[..1]);
    let (code, out) = evidence.verify_with_copy(&["s1"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        line_for(&out, "s1").starts_with(
            "s1: TAMPERED at line 2 (truncated): the state directory's checkpoint log ends at checkpoint 1 but the copy holds 2: checkpoints were removed"
        ),
        "{out}"
    );
    // A local checkpoint that is not the copy's.
    let mut changed = checkpoints.clone();
    changed[1] = changed[1].replacen("\"time\":\"", "\"time\":\"1", 1);
    write_lines(&evidence.local("s1"), &changed);
    let (code, out) = evidence.verify_with_copy(&["s1"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        line_for(&out, "s1").starts_with("s1: TAMPERED at line 2 (checkpoints-differ)"),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_with_ended_turns_and_no_checkpoint_is_unsigned_unless_allowed() {
    let evidence = Evidence::new();
    let path = evidence.write("s1").await;
    // Checkpoints removed and the log rewritten whole would pass a check of the chain alone.
    std::fs::remove_file(evidence.local("s1")).unwrap();
    let (code, out) = evidence.verify(&["s1"]);
    assert_eq!(code, 1, "{out}");
    assert_eq!(
        line_for(&out, "s1"),
        format!(
            "s1: TAMPERED at line 1 (unsigned): {UNSIGNED} [{}]",
            path.display()
        )
    );
    let (code, out) = evidence.verify(&["--allow-unsigned", "s1"]);
    assert_eq!(code, 0, "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_all_finds_a_log_deleted_while_its_checkpoints_remain_here_or_in_the_copy() {
    let evidence = Evidence::new();
    let gone = evidence.write("s1").await;
    evidence.write("s2").await;
    std::fs::remove_file(&gone).unwrap();
    let (code, out) = evidence.verify(&["--all"]);
    assert_eq!(code, 1, "{out}");
    assert_eq!(
        line_for(&out, "s1"),
        format!(
            "s1: TAMPERED at line 1 (deleted): the log is missing while its checkpoints remain in {}: it was deleted [{}]",
            evidence.local("s1").display(),
            gone.display()
        )
    );
    assert!(line_for(&out, "s2").starts_with("s2: intact"), "{out}");
    // Its local checkpoints removed too: the copy still names it.
    std::fs::remove_file(evidence.local("s1")).unwrap();
    let (code, out) = evidence.verify(&["--all"]);
    assert_eq!(code, 0, "nothing here names s1 any more: {out}");
    let (code, out) = evidence.verify_with_copy(&["--all"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        line_for(&out, "s1").contains(&format!(
            "(deleted): the log is missing while its checkpoints remain in {}",
            evidence.copied("s1").display()
        )),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreadable_bytes_in_a_checkpoint_log_are_a_finding_and_the_run_goes_on() {
    let evidence = Evidence::new();
    evidence.write("s1").await;
    evidence.write("s2").await;
    let mut bytes = std::fs::read(evidence.local("s1")).unwrap();
    bytes.extend_from_slice(b"\xff\xfe not a checkpoint\n");
    std::fs::write(evidence.local("s1"), bytes).unwrap();
    let (code, out) = evidence.verify(&["--all", "--json"]);
    assert_eq!(code, 1, "{out}");
    let reports: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(reports.len(), 2, "{out}");
    assert_eq!(reports[0]["session"], "s1");
    assert_eq!(reports[0]["intact"], false);
    assert_eq!(reports[0]["problem"]["kind"], "checkpoint-invalid");
    assert_eq!(
        reports[0]["problem"]["message"],
        "checkpoint 3 does not parse: line 3 is not UTF-8"
    );
    assert_eq!(reports[1]["session"], "s2");
    assert_eq!(reports[1]["intact"], true);
}
