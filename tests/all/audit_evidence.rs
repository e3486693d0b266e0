//! The audit's evidence beyond one log: the checkpoint log is chained (a checkpoint removed,
//! reordered or inserted breaks it), checked with a public key a log with ended turns and no
//! checkpoint is `unsigned`, `verify --all` finds a log that is gone while its checkpoints remain
//! (here or in the copy), the state directory's checkpoints are compared with the copy, and bytes
//! that cannot be read are a finding about their file, never an abort of the run.

use std::path::{Path, PathBuf};

use approval_host::audit::checkpoint::checkpoints_in;
use approval_host::audit::verify::UNSIGNED;
use serde_json::Value;

use crate::tamper::Signed;

/// `Signed` (a key, a state directory, a service that checkpoints) with a copy of the
/// checkpoints.
type Evidence = Signed;

fn copied(evidence: &Evidence, session: &str) -> PathBuf {
    checkpoints_in(evidence.copy.as_ref().unwrap().path(), session)
}

/// `verify --public-key … --checkpoints COPY ARGS`.
fn verify_with_copy(evidence: &Evidence, args: &[&str]) -> (i32, String) {
    let copy = evidence.copy.as_ref().unwrap().path().display().to_string();
    let mut all = vec!["--checkpoints", copy.as_str()];
    all.extend_from_slice(args);
    evidence.cli(&all)
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
    let evidence = Evidence::with_copy();
    evidence.write("s1").await;
    let checkpoints = lines_of(&evidence.checkpoints("s1"));
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
    let (code, out) = evidence.cli(&["s1"]);
    assert_eq!(code, 0, "{out}");

    // The first checkpoint removed (the second stays, signed and genuine): the chain breaks.
    write_lines(&evidence.checkpoints("s1"), &checkpoints[1..]);
    let (code, out) = evidence.cli(&["s1"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        line_for(&out, "s1").contains(
            "(checkpoint-invalid): checkpoint 1 does not follow the one before it: checkpoints were removed, reordered or inserted"
        ),
        "{out}"
    );
    // Swapped: the same.
    write_lines(
        &evidence.checkpoints("s1"),
        &[checkpoints[1].clone(), checkpoints[0].clone()],
    );
    let (code, out) = evidence.cli(&["s1"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        line_for(&out, "s1").contains("(checkpoint-invalid)"),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_state_directory_s_checkpoints_are_compared_with_the_copy() {
    let evidence = Evidence::with_copy();
    evidence.write("s1").await;
    let (code, out) = verify_with_copy(&evidence, &["s1"]);
    assert_eq!(code, 0, "{out}");
    let checkpoints = lines_of(&evidence.checkpoints("s1"));

    // The last local checkpoint dropped, the log left whole: the copy still holds it.
    write_lines(&evidence.checkpoints("s1"), &checkpoints[..1]);
    let (code, out) = verify_with_copy(&evidence, &["s1"]);
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
    write_lines(&evidence.checkpoints("s1"), &changed);
    let (code, out) = verify_with_copy(&evidence, &["s1"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        line_for(&out, "s1").starts_with("s1: TAMPERED at line 2 (checkpoints-differ)"),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_with_ended_turns_and_no_checkpoint_is_unsigned_unless_allowed() {
    let evidence = Evidence::with_copy();
    let path = evidence.write("s1").await;
    // Checkpoints removed and the log rewritten whole would pass a check of the chain alone.
    std::fs::remove_file(evidence.checkpoints("s1")).unwrap();
    let (code, out) = evidence.cli(&["s1"]);
    assert_eq!(code, 1, "{out}");
    assert_eq!(
        line_for(&out, "s1"),
        format!(
            "s1: TAMPERED at line 1 (unsigned): {UNSIGNED} [{}]",
            path.display()
        )
    );
    let (code, out) = evidence.cli(&["--allow-unsigned", "s1"]);
    assert_eq!(code, 0, "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_all_finds_a_log_deleted_while_its_checkpoints_remain_here_or_in_the_copy() {
    let evidence = Evidence::with_copy();
    let gone = evidence.write("s1").await;
    evidence.write("s2").await;
    std::fs::remove_file(&gone).unwrap();
    let (code, out) = evidence.cli(&["--all"]);
    assert_eq!(code, 1, "{out}");
    assert_eq!(
        line_for(&out, "s1"),
        format!(
            "s1: TAMPERED at line 1 (deleted): the log is missing while its checkpoints remain in {}: it was deleted [{}]",
            evidence.checkpoints("s1").display(),
            gone.display()
        )
    );
    assert!(line_for(&out, "s2").starts_with("s2: intact"), "{out}");
    // Its local checkpoints removed too: the copy still names it.
    std::fs::remove_file(evidence.checkpoints("s1")).unwrap();
    let (code, out) = evidence.cli(&["--all"]);
    assert_eq!(code, 0, "nothing here names s1 any more: {out}");
    let (code, out) = verify_with_copy(&evidence, &["--all"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        line_for(&out, "s1").contains(&format!(
            "(deleted): the log is missing while its checkpoints remain in {}",
            copied(&evidence, "s1").display()
        )),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreadable_bytes_in_a_checkpoint_log_are_a_finding_and_the_run_goes_on() {
    let evidence = Evidence::with_copy();
    evidence.write("s1").await;
    evidence.write("s2").await;
    let mut bytes = std::fs::read(evidence.checkpoints("s1")).unwrap();
    bytes.extend_from_slice(b"\xff\xfe not a checkpoint\n");
    std::fs::write(evidence.checkpoints("s1"), bytes).unwrap();
    let (code, out) = evidence.cli(&["--all", "--json"]);
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
