//! A log nobody can quietly rewrite: every line commits to the one before it, so a changed,
//! removed, reordered, inserted or foreign line is found by `verify`, which names the session,
//! the first bad line and what is wrong; logs written before chaining read as unchained, and a
//! crash is not tampering. Each case here passes `verify` unnoticed on the unchained format.

use std::path::{Path, PathBuf};
use std::process::Command;

use approval_host::audit::verify::{Tamper, verify_file};
use approval_host::event::{Event, Record};
use approval_host::{ApprovalRequest, ApprovalService, Decision, Policy, Position, Scope};
use serde_json::{Value, json};

use crate::support::{counting, log_path};

/// A session with two turns, each with one question granted by `allow` and one rejected by
/// `deny`: lines are turn/start, asked, decided, asked, decided, turn/end, twice.
async fn written(dir: &Path, session: &str) -> PathBuf {
    let service = ApprovalService::open_dir(dir, Policy::Ask);
    let _allow = service.register(
        "allow",
        Scope::Global,
        Position::Back,
        move |q: approval_host::Question| async move {
            Ok::<_, approval_host::Failure>(if q.tool_name() == "read" {
                Decision::AllowOnce
            } else {
                Decision::Reject
            })
        },
    );
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
    log_path(dir, session)
}

fn lines(path: &Path) -> Vec<String> {
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

fn set(line: &str, pointer: &str, value: Value) -> String {
    let mut v: Value = serde_json::from_str(line).unwrap();
    *v.pointer_mut(pointer).unwrap() = value;
    v.to_string()
}

/// A forged turn opening and a call granted in it, as a forger would append them.
fn forged_grant() -> Vec<Event> {
    vec![
        Event::TurnStart,
        Event::Asked(approval_host::event::Asked::new("forged", "bash")),
        Event::Decided(approval_host::event::Decided {
            answerer: Some("allow".into()),
            ..approval_host::event::Decided::bare("forged", approval_host::Outcome::AllowedOnce)
        }),
    ]
}

fn problem(path: &Path, session: &str) -> (u64, Tamper) {
    let report = verify_file(path, session).unwrap();
    let p = report
        .problem
        .unwrap_or_else(|| panic!("tampering went unnoticed: {:?}", report.warnings));
    (p.line, p.kind)
}

fn verify_cli(dir: &Path, args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_approval-host"))
        .arg("--state-dir")
        .arg(dir)
        .arg("verify")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8(out.stdout).unwrap(),
    )
}

#[tokio::test]
async fn an_untouched_log_verifies_intact_and_chained_from_its_genesis() {
    let dir = tempfile::tempdir().unwrap();
    let path = written(dir.path(), "s1").await;
    let report = verify_file(&path, "s1").unwrap();
    assert_eq!(report.problem, None);
    assert_eq!(report.records, 12);
    assert_eq!(report.chained_from, Some(1));
    assert!(report.warnings.is_empty(), "{:?}", report.warnings);
    let first: Value = serde_json::from_str(&lines(&path)[0]).unwrap();
    assert_eq!(first["v"], 2);
    assert_eq!(
        first["prev"],
        approval_host::audit::chain::hex(&approval_host::audit::chain::genesis("s1"))
    );
    let (code, out) = verify_cli(dir.path(), &["--all"]);
    assert_eq!(
        (code, out.as_str()),
        (0, "s1: intact, 12 records, chained\n")
    );
}

#[tokio::test]
async fn a_rewritten_decision_breaks_the_chain_at_the_next_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = written(dir.path(), "s1").await;
    let mut l = lines(&path);
    // Line 5 is the rejected bash question's decision: make it a grant, still a valid record.
    assert!(l[4].contains(r#""outcome":"rejected""#), "{}", l[4]);
    l[4] = l[4].replace(r#""outcome":"rejected""#, r#""outcome":"allowed-once""#);
    write_lines(&path, &l);
    assert_eq!(problem(&path, "s1"), (6, Tamper::ChainBroken));

    // One byte of the answerer's name is enough too.
    let path = written(dir.path(), "s2").await;
    let mut l = lines(&path);
    l[2] = l[2].replacen(r#""answerer":"allow""#, r#""answerer":"allxw""#, 1);
    write_lines(&path, &l);
    assert_eq!(problem(&path, "s2"), (4, Tamper::ChainBroken));

    let (code, out) = verify_cli(dir.path(), &["s1", "s2"]);
    assert_eq!(code, 1);
    let first = out.lines().next().unwrap();
    assert!(
        first.starts_with("s1: TAMPERED at line 6 (chain-broken): prev does not match line 5"),
        "{out}"
    );
}

#[tokio::test]
async fn a_pair_deleted_cleanly_with_seq_renumbered_is_found() {
    let dir = tempfile::tempdir().unwrap();
    let path = written(dir.path(), "s1").await;
    let mut l = lines(&path);
    // Remove the second question (lines 4 and 5) and renumber: pairing and seq alone pass.
    l.drain(3..5);
    for (i, line) in l.iter_mut().enumerate() {
        *line = set(line, "/seq", json!(i + 1));
    }
    write_lines(&path, &l);
    let report = approval_host::check::check_file(&path).unwrap();
    assert_eq!(report.problem, None, "the pairing check alone is fooled");
    // Line 4 (once line 6) commits to the removed line 5.
    assert_eq!(problem(&path, "s1"), (4, Tamper::ChainBroken));
}

#[tokio::test]
async fn two_turns_swapped_are_found() {
    let dir = tempfile::tempdir().unwrap();
    let path = written(dir.path(), "s1").await;
    let mut l = lines(&path);
    let second: Vec<String> = l.drain(6..).collect();
    l.splice(0..0, second);
    for (i, line) in l.iter_mut().enumerate() {
        *line = set(line, "/seq", json!(i + 1));
    }
    write_lines(&path, &l);
    assert_eq!(problem(&path, "s1"), (1, Tamper::WrongGenesis));
}

#[tokio::test]
async fn a_forged_grant_appended_without_the_writer_is_found() {
    let dir = tempfile::tempdir().unwrap();
    let path = written(dir.path(), "s1").await;
    let original = lines(&path);
    // Unchained lines, as a hand edit would add them.
    let forged: Vec<String> = forged_grant()
        .into_iter()
        .enumerate()
        .map(|(i, e)| {
            let mut line = Vec::new();
            Record::now(13 + i as u64, e).write_line(&mut line);
            String::from_utf8(line).unwrap().trim_end().to_owned()
        })
        .collect();
    let mut l = original.clone();
    l.extend(forged.iter().cloned());
    write_lines(&path, &l);
    assert_eq!(problem(&path, "s1"), (13, Tamper::Unchained));

    // Chained, but pointing at a line that is not the one before it.
    let mut l = original.clone();
    let reused_prev: Value = serde_json::from_str(&original[5]).unwrap();
    for f in &forged {
        let mut v: Value = serde_json::from_str(f).unwrap();
        let obj = v.as_object_mut().unwrap();
        obj.insert("v".into(), json!(2));
        obj.insert("prev".into(), reused_prev["prev"].clone());
        l.push(v.to_string());
    }
    write_lines(&path, &l);
    assert_eq!(problem(&path, "s1"), (13, Tamper::ChainBroken));
}

#[tokio::test]
async fn a_log_copied_from_another_session_is_found() {
    let dir = tempfile::tempdir().unwrap();
    let path = written(dir.path(), "s1").await;
    let other = log_path(dir.path(), "s2");
    std::fs::copy(&path, &other).unwrap();
    assert_eq!(problem(&other, "s2"), (1, Tamper::WrongGenesis));
    let (code, out) = verify_cli(dir.path(), &["--all", "--json"]);
    assert_eq!(code, 1);
    let reports: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(reports[0]["session"], "s1");
    assert_eq!(reports[0]["intact"], true);
    assert_eq!(reports[1]["session"], "s2");
    assert_eq!(reports[1]["intact"], false);
    assert_eq!(reports[1]["problem"]["kind"], "wrong-genesis");
    assert_eq!(reports[1]["problem"]["line"], 1);
}

#[tokio::test]
async fn a_log_written_before_chaining_reads_as_unchained_and_chains_from_its_next_append() {
    let dir = tempfile::tempdir().unwrap();
    let path = log_path(dir.path(), "old");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let mut bytes = Vec::new();
    Record::now(1, Event::TurnStart).write_line(&mut bytes);
    Record::now(2, Event::TurnEnd).write_line(&mut bytes);
    std::fs::write(&path, &bytes).unwrap();
    let report = verify_file(&path, "old").unwrap();
    assert_eq!(report.problem, None);
    assert_eq!(report.chained_from, None);
    assert_eq!(
        report.warnings,
        [approval_host::audit::verify::unchained_prefix(2)]
    );

    // The host appends chained lines after it.
    let service = ApprovalService::open_dir(dir.path(), Policy::Ask);
    let (_c, allow) = counting(Decision::AllowOnce);
    let _r = service.register("allow", Scope::Global, Position::Back, allow);
    let agent = service.agent("old", "a").await.unwrap();
    service.start_turn("old").await.unwrap();
    service
        .request(ApprovalRequest::new(&agent, "read"))
        .await
        .unwrap();
    service.end_turn("old").await.unwrap();
    drop(agent);
    let report = verify_file(&path, "old").unwrap();
    assert_eq!(report.problem, None, "{report:?}");
    assert_eq!(report.records, 6);
    assert_eq!(report.chained_from, Some(3));
    let (code, out) = verify_cli(dir.path(), &["old"]);
    assert_eq!(code, 0);
    assert_eq!(
        out,
        format!(
            "old: intact, 6 records, chained from seq 3\nold: warning: {}\n",
            approval_host::audit::verify::unchained_prefix(2)
        )
    );
    // Changing an unchained line is found by the first chained line, which commits to it.
    let mut l = lines(&path);
    l[1] = set(&l[1], "/ts", json!("2020-01-01T00:00:00.000000Z"));
    write_lines(&path, &l);
    assert_eq!(problem(&path, "old"), (3, Tamper::ChainBroken));
}

/// A key made by `approval-host keygen` outside the state directory, and a service signing
/// checkpoints with it (and keeping a copy of them, when made [`Signed::with_copy`]).
pub(crate) struct Signed {
    pub(crate) keys: tempfile::TempDir,
    pub(crate) state: tempfile::TempDir,
    pub(crate) copy: Option<tempfile::TempDir>,
}

impl Signed {
    pub(crate) fn new() -> Self {
        let keys = tempfile::tempdir().unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_approval-host"))
            .arg("keygen")
            .arg(keys.path().join("audit.key"))
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        Signed {
            keys,
            state: tempfile::tempdir().unwrap(),
            copy: None,
        }
    }

    /// [`Signed::new`], every checkpoint also appended to a copy directory.
    pub(crate) fn with_copy() -> Self {
        Signed {
            copy: Some(tempfile::tempdir().unwrap()),
            ..Signed::new()
        }
    }

    pub(crate) fn key(&self) -> PathBuf {
        self.keys.path().join("audit.key")
    }

    pub(crate) fn public(&self) -> ed25519_dalek::VerifyingKey {
        approval_host::audit::checkpoint::load_public_key(&self.keys.path().join("audit.key.pub"))
            .unwrap()
    }

    pub(crate) fn service(&self) -> ApprovalService {
        let service = ApprovalService::open_dir(self.state.path(), Policy::Ask);
        let key = approval_host::audit::checkpoint::load_signing_key(&self.key()).unwrap();
        let mut checkpointer =
            approval_host::audit::checkpoint::Checkpointer::new(key, self.state.path());
        if let Some(copy) = &self.copy {
            checkpointer = checkpointer.with_copy(copy.path());
        }
        service.set_checkpointer(Some(std::sync::Arc::new(checkpointer)));
        service
    }

    /// Two turns of two questions, like [`written`], checkpointed at each turn's end.
    pub(crate) async fn write(&self, session: &str) -> PathBuf {
        let service = self.service();
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

    pub(crate) fn checkpoints(&self, session: &str) -> PathBuf {
        approval_host::audit::checkpoint::checkpoints_path(self.state.path(), session)
    }

    pub(crate) fn verify(&self, session: &str) -> approval_host::audit::verify::Report {
        let list =
            approval_host::audit::checkpoint::read_checkpoints(&self.checkpoints(session)).unwrap();
        let key = self.public();
        approval_host::audit::verify::verify_file_with(
            &log_path(self.state.path(), session),
            session,
            Some((&key, &list)),
        )
        .unwrap()
    }

    pub(crate) fn problem(&self, session: &str) -> (u64, Tamper) {
        let report = self.verify(session);
        let p = report
            .problem
            .unwrap_or_else(|| panic!("tampering went unnoticed: {:?}", report.warnings));
        (p.line, p.kind)
    }

    pub(crate) fn cli(&self, args: &[&str]) -> (i32, String) {
        let public = self.keys.path().join("audit.key.pub");
        let mut all = vec!["--public-key", public.to_str().unwrap()];
        all.extend_from_slice(args);
        verify_cli(self.state.path(), &all)
    }
}

#[tokio::test]
async fn each_turn_end_is_checkpointed_with_a_signature_the_public_key_checks() {
    let signed = Signed::new();
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(signed.key())
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    signed.write("s1").await;
    let checkpoints: Vec<Value> = std::fs::read_to_string(signed.checkpoints("s1"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let seqs: Vec<u64> = checkpoints
        .iter()
        .map(|c| c["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, [6, 12]);
    let report = signed.verify("s1");
    assert_eq!(report.problem, None);
    assert!(report.warnings.is_empty(), "{:?}", report.warnings);
    assert_eq!(
        signed.cli(&["s1"]),
        (0, "s1: intact, 12 records, chained\n".to_owned())
    );
    // Without the public key the checkpoints are not checked, and verify says so.
    let (code, out) = verify_cli(signed.state.path(), &["s1"]);
    assert_eq!(code, 0);
    assert!(
        out.contains(approval_host::audit::verify::CHECKPOINTS_UNCHECKED),
        "{out}"
    );
    // keygen never overwrites a key.
    let again = Command::new(env!("CARGO_BIN_EXE_approval-host"))
        .arg("keygen")
        .arg(signed.key())
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(2));
}

#[tokio::test]
async fn a_log_cut_short_after_a_checkpoint_is_found() {
    let signed = Signed::new();
    let path = signed.write("s1").await;
    let mut l = lines(&path);
    l.truncate(8);
    write_lines(&path, &l);
    // The chain alone cannot tell: what is left is a consistent prefix.
    assert_eq!(verify_file(&path, "s1").unwrap().problem, None);
    assert_eq!(signed.problem("s1"), (9, Tamper::Truncated));
}

#[tokio::test]
async fn a_log_replaced_whole_by_a_consistent_chain_is_found() {
    let signed = Signed::new();
    let path = signed.write("s1").await;
    // The forger writes a clean log of the same session with its own host, and no key.
    let forged = tempfile::tempdir().unwrap();
    let service = ApprovalService::open_dir(forged.path(), Policy::Ask);
    let (_c, allow) = counting(Decision::AllowOnce);
    let _r = service.register("allow", Scope::Global, Position::Back, allow);
    let agent = service.agent("s1", "a").await.unwrap();
    for _ in 0..2 {
        service.start_turn("s1").await.unwrap();
        for tool in ["read", "rm-everything"] {
            service
                .request(ApprovalRequest::new(&agent, tool))
                .await
                .unwrap();
        }
        service.end_turn("s1").await.unwrap();
    }
    drop(agent);
    std::fs::copy(log_path(forged.path(), "s1"), &path).unwrap();
    assert_eq!(verify_file(&path, "s1").unwrap().problem, None);
    assert_eq!(signed.problem("s1"), (6, Tamper::Rewritten));
    let (code, out) = signed.cli(&["s1"]);
    assert_eq!(code, 1);
    assert!(
        out.starts_with(
            "s1: TAMPERED at line 6 (rewritten): this is not the line checkpointed at seq 6"
        ),
        "{out}"
    );
}

#[tokio::test]
async fn a_chained_forgery_appended_after_the_last_checkpoint_is_found() {
    let signed = Signed::new();
    let path = signed.write("s1").await;
    // A forger who knows the chain appends a well-chained turn granting a call.
    let mut l = lines(&path);
    let mut prev = approval_host::audit::chain::line_hash(l.last().unwrap().as_bytes());
    let mut events = forged_grant();
    events.push(Event::TurnEnd);
    for (i, e) in events.into_iter().enumerate() {
        let mut line = Vec::new();
        Record::now(13 + i as u64, e).write_chained_line(&prev, &mut line);
        prev = approval_host::audit::chain::line_hash(&line);
        l.push(String::from_utf8(line).unwrap().trim_end().to_owned());
    }
    write_lines(&path, &l);
    assert_eq!(
        verify_file(&path, "s1").unwrap().problem,
        None,
        "the chain alone is fooled"
    );
    assert_eq!(signed.problem("s1"), (13, Tamper::AddedAfterCheckpoint));
}

#[tokio::test]
async fn a_checkpoint_replayed_from_another_session_or_with_a_bad_signature_is_found() {
    let signed = Signed::new();
    signed.write("s1").await;
    signed.write("s2").await;
    let theirs = std::fs::read_to_string(signed.checkpoints("s2")).unwrap();
    let mut ours = std::fs::read_to_string(signed.checkpoints("s1")).unwrap();
    ours.push_str(theirs.lines().last().unwrap());
    ours.push('\n');
    std::fs::write(signed.checkpoints("s1"), &ours).unwrap();
    let report = signed.verify("s1");
    let p = report.problem.unwrap();
    assert_eq!(p.kind, Tamper::CheckpointInvalid);
    assert!(
        p.message.contains("replayed from another session"),
        "{}",
        p.message
    );

    // One flipped digit of a signature.
    let original = std::fs::read_to_string(signed.checkpoints("s2")).unwrap();
    let mut c: Value = serde_json::from_str(original.lines().next().unwrap()).unwrap();
    let sig = c["sig"].as_str().unwrap().to_owned();
    let flipped = if sig.starts_with('0') { "1" } else { "0" };
    c["sig"] = json!(format!("{flipped}{}", &sig[1..]));
    let rest: Vec<&str> = original.lines().skip(1).collect();
    std::fs::write(
        signed.checkpoints("s2"),
        format!("{c}\n{}\n", rest.join("\n")),
    )
    .unwrap();
    assert_eq!(signed.problem("s2"), (6, Tamper::CheckpointInvalid));
}

#[test]
fn a_deployment_names_its_signing_key_and_a_bad_one_is_refused_by_name() {
    let signed = Signed::new();
    let config = signed.keys.path().join("deploy.toml");
    std::fs::write(&config, "[audit]\nsigning-key = \"audit.key\"\n").unwrap();
    let ask = |config: &Path| {
        Command::new(env!("CARGO_BIN_EXE_approval-host"))
            .arg("--state-dir")
            .arg(signed.state.path())
            .args([
                "ask",
                "--session",
                "s1",
                "--agent",
                "a",
                "--tool",
                "bash",
                "--config",
            ])
            .arg(config)
            .output()
            .unwrap()
    };
    let out = ask(&config);
    assert!(out.status.success(), "{out:?}");
    // ask opens and closes a turn: its end is checkpointed.
    let checkpoints =
        approval_host::audit::checkpoint::read_checkpoints(&signed.checkpoints("s1")).unwrap();
    assert_eq!(checkpoints.len(), 1);
    assert_eq!(signed.verify("s1").problem, None);

    std::fs::write(signed.keys.path().join("bad.key"), "not a key\n").unwrap();
    std::fs::write(&config, "[audit]\nsigning-key = \"bad.key\"\n").unwrap();
    let out = ask(&config);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("deploy.toml: [audit] signing-key:"), "{err}");
    assert!(err.contains("bad.key: not an Ed25519 signing key"), "{err}");
}

#[tokio::test]
async fn rules_logs_are_checkpointed_after_every_change_and_a_forged_rule_is_found() {
    use approval_host::answer::{Effect, RuleScope};
    use approval_host::rules::{self, NewRule, USER_LOG};
    let signed = Signed::new();
    let service = signed.service();
    let deployment = approval_host::config::Deployment::embedded();
    let book =
        approval_host::assemble::rule_book(service.store(), &deployment, rules::system_clock())
            .unwrap();
    service.set_rules(Some(book));
    let new = |rule: &str| NewRule {
        rule: rule.to_owned(),
        effect: Effect::Allow,
        scope: RuleScope::User,
        session: None,
        lasts: None,
        creator: "cli:test".to_owned(),
        reason: None,
    };
    let kept = service.add_rule(new("Bash(npm test)")).await.unwrap();
    let gone = service.add_rule(new("Read")).await.unwrap();
    service
        .revoke_rule(&gone.id, "cli:test", None)
        .await
        .unwrap();
    let seqs: Vec<u64> =
        approval_host::audit::checkpoint::read_checkpoints(&signed.checkpoints(USER_LOG))
            .unwrap()
            .into_iter()
            .map(|c| c.unwrap().seq)
            .collect();
    assert_eq!(seqs, [1, 2, 3], "one checkpoint per rule change");
    let report = signed.verify(USER_LOG);
    assert_eq!(report.problem, None);
    assert!(report.warnings.is_empty(), "{:?}", report.warnings);
    drop(service);

    // A forger with write access appends a well-chained rule allowing every Bash call.
    let path = log_path(signed.state.path(), USER_LOG);
    let original = lines(&path);
    let mut l = original.clone();
    let prev = approval_host::audit::chain::line_hash(l.last().unwrap().as_bytes());
    let forged = Event::RuleAdded(approval_host::event::RuleAdded {
        id: "forged".into(),
        tool: "Bash".into(),
        pattern: None,
        effect: Effect::Allow,
        scope: RuleScope::User,
        expires_at: None,
        creator: kept.creator.clone(),
        reason: None,
    });
    let mut line = Vec::new();
    Record::now(4, forged).write_chained_line(&prev, &mut line);
    l.push(String::from_utf8(line).unwrap().trim_end().to_owned());
    write_lines(&path, &l);
    assert_eq!(
        verify_file(&path, USER_LOG).unwrap().problem,
        None,
        "the chain alone is fooled"
    );
    let report = signed.verify(USER_LOG);
    let p = report.problem.expect("a forged rule went unnoticed");
    assert_eq!((p.line, p.kind), (4, Tamper::AddedAfterCheckpoint));
    assert!(
        p.message
            .starts_with("the rule change at seq 4 has no checkpoint"),
        "{}",
        p.message
    );

    // Removing the revocation brings the revoked rule back: the log is shorter than its
    // checkpoint.
    write_lines(&path, &original[..2]);
    assert_eq!(signed.problem(USER_LOG), (3, Tamper::Truncated));
    let (code, out) = signed.cli(&["--all"]);
    assert_eq!(code, 1);
    assert!(
        out.contains("rules.user: TAMPERED at line 3 (truncated)"),
        "{out}"
    );
}

#[test]
fn a_checkpoint_copy_finds_a_log_cut_short_whose_own_checkpoints_were_removed() {
    let signed = Signed::new();
    let copy = tempfile::tempdir().unwrap();
    let config = signed.keys.path().join("deploy.toml");
    std::fs::write(
        &config,
        format!(
            "[audit]\nsigning-key = \"audit.key\"\ncheckpoint-copy = \"{}\"\n",
            copy.path().display()
        ),
    )
    .unwrap();
    let ask = |session: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_approval-host"))
            .arg("--state-dir")
            .arg(signed.state.path())
            .args([
                "ask",
                "--session",
                session,
                "--agent",
                "a",
                "--tool",
                "bash",
            ])
            .arg("--config")
            .arg(&config)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
    };
    ask("s1");
    ask("s1");
    let in_state = std::fs::read_to_string(signed.checkpoints("s1")).unwrap();
    let copied = std::fs::read_to_string(approval_host::audit::checkpoint::checkpoints_in(
        copy.path(),
        "s1",
    ))
    .unwrap();
    assert_eq!(in_state.lines().count(), 2);
    assert_eq!(
        in_state, copied,
        "the copy holds the same signed checkpoints"
    );

    // Someone who can write the state directory drops the second ask and its checkpoints.
    let path = log_path(signed.state.path(), "s1");
    let l = lines(&path);
    write_lines(&path, &l[..l.len() / 2]);
    std::fs::remove_file(signed.checkpoints("s1")).unwrap();
    // Without the copy: a log whose turns ended has no checkpoint, which the key makes a
    // finding (before, a warning and exit 0), unless the deployment had no key then.
    let (code, out) = signed.cli(&["s1"]);
    assert_eq!(code, 1, "{out}");
    assert_eq!(
        out.lines().next().unwrap(),
        format!(
            "s1: TAMPERED at line 1 (unsigned): {} [{}]",
            approval_host::audit::verify::UNSIGNED,
            path.display()
        )
    );
    let (code, out) = signed.cli(&["--allow-unsigned", "s1"]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains(approval_host::audit::verify::NO_CHECKPOINTS),
        "{out}"
    );
    let (code, out) = signed.cli(&["--checkpoints", copy.path().to_str().unwrap(), "s1"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.starts_with(&format!(
            "s1: TAMPERED at line {} (truncated)",
            l.len() / 2 + 1
        )),
        "{out}"
    );
}

#[test]
fn a_checkpoint_copy_without_a_signing_key_is_refused_at_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("deploy.toml");
    std::fs::write(&config, "[audit]\ncheckpoint-copy = \"copy\"\n").unwrap();
    let err = approval_host::config::Deployment::load(&config).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "{}:2:1: [audit]: checkpoint-copy needs signing-key: only signed checkpoints are copied",
            config.display()
        )
    );
}

#[test]
fn a_rule_added_on_the_command_line_is_checkpointed_and_verifies() {
    let signed = Signed::new();
    let config = signed.keys.path().join("deploy.toml");
    std::fs::write(&config, "[audit]\nsigning-key = \"audit.key\"\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_approval-host"))
        .arg("--state-dir")
        .arg(signed.state.path())
        .args(["rules", "add", "Bash(npm test)", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let log = approval_host::rules::project_log(&approval_host::assemble::project_of(
        &approval_host::config::Deployment::load(&config).unwrap(),
    ));
    let checkpoints =
        approval_host::audit::checkpoint::read_checkpoints(&signed.checkpoints(&log)).unwrap();
    assert_eq!(checkpoints.len(), 1);
    assert_eq!(checkpoints[0].as_ref().unwrap().seq, 1);
    let (code, out) = signed.cli(&["--all"]);
    assert_eq!(code, 0, "{out}");
    // Reading the rules never creates a rules log (the user's has none).
    assert_eq!(out, format!("{log}: intact, 1 records, chained\n"));
}
