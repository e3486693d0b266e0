//! Standing rules from the command line: `rules add/list/explain/revoke`, the deployment file's
//! `[[rule]]` entries, one-shot commands obeying rules another process wrote, clear refusals,
//! and no printed rule lost to `kill -9` in the middle of creating rules.

use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

use crate::support::{events_at, log_path};

fn run(state_dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_approval-host"))
        .arg("--state-dir")
        .arg(state_dir)
        .args(args)
        .env_remove("RUST_LOG")
        .env("USER", "tester")
        .output()
        .unwrap()
}

fn ok(o: &Output) -> String {
    assert!(
        o.status.success(),
        "exit {:?}: {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn refused(o: &Output) -> String {
    assert_eq!(
        o.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn ask(dir: &Path, call: &str, command: &str, extra: &[&str]) -> String {
    let arguments = serde_json::json!({ "command": command }).to_string();
    let mut args = vec![
        "ask",
        "--session",
        "s1",
        "--agent",
        "a",
        "--tool",
        "Bash",
        "--call-id",
        call,
        "--arguments",
        &arguments,
    ];
    args.extend_from_slice(extra);
    ok(&run(dir, &args)).trim().to_owned()
}

fn last_decided(dir: &Path) -> Value {
    events_at(&log_path(dir, "s1"))
        .into_iter()
        .rev()
        .find(|(t, _)| t == "approval/decided")
        .unwrap()
        .1
}

#[test]
fn rules_added_on_the_command_line_decide_one_shot_asks_until_revoked() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let allow = ok(&run(
        d,
        &[
            "rules",
            "add",
            "Bash(npm run test:*)",
            "--reason",
            "tests are safe",
        ],
    ));
    let allow = allow.trim();
    assert_eq!(allow.len(), 12, "{allow:?}");
    let reject = ok(&run(
        d,
        &[
            "rules",
            "add",
            "Bash(git push:*)",
            "--effect",
            "reject",
            "--scope",
            "user",
            "--for",
            "8h",
        ],
    ));
    let reject = reject.trim();

    let listed = ok(&run(d, &["rules", "list"]));
    // The standing rules, then the built-in ones.
    let lines: Vec<&str> = listed
        .lines()
        .take_while(|l| !l.starts_with("built-in "))
        .collect();
    assert_eq!(lines.len(), 2, "{listed}");
    assert!(
        listed.contains("builtin-state-dir  reject write //"),
        "{listed}"
    );
    let allow_line = lines.iter().find(|l| l.starts_with(allow)).unwrap();
    assert_eq!(
        *allow_line,
        format!(
            "{allow}  allow  Bash(npm run test:*)  [project]  no expiry  by cli:tester  \"tests are safe\""
        )
    );
    let reject_line = lines.iter().find(|l| l.starts_with(reject)).unwrap();
    assert!(
        reject_line.contains("reject Bash(git push:*)  [user]  until 20"),
        "{reject_line}"
    );

    let json: Value = serde_json::from_str(&ok(&run(
        d,
        &["rules", "list", "--json", "--scope", "user"],
    )))
    .unwrap();
    assert_eq!(json.as_array().unwrap().len(), 1);
    assert_eq!(json[0]["id"], reject);
    assert_eq!(json[0]["effect"], "reject");
    assert_eq!(json[0]["creator"], "cli:tester");

    assert_eq!(ask(d, "c1", "npm run test --ci", &[]), "allowed-once");
    assert_eq!(last_decided(d)["answerer"], format!("rule:{allow}"));
    assert_eq!(ask(d, "c2", "git push origin", &[]), "rejected");
    assert_eq!(
        last_decided(d)["reason"],
        "the standing rule Bash(git push:*) rejects this call"
    );
    assert_eq!(ask(d, "c3", "npm run test; git status", &[]), "unavailable");

    let explained = ok(&run(
        d,
        &[
            "rules",
            "explain",
            "--tool",
            "Bash",
            "--arguments",
            r#"{"command":"npm run test && git push"}"#,
        ],
    ));
    assert_eq!(
        explained.lines().next().unwrap(),
        format!("rejected by rule {}", reject_line)
    );
    let explained = ok(&run(
        d,
        &[
            "rules",
            "explain",
            "--tool",
            "Bash",
            "--arguments",
            r#"{"command":"make"}"#,
        ],
    ));
    assert_eq!(
        explained.trim(),
        "no rule decides this call; it goes on to the plugins"
    );

    assert_eq!(
        ok(&run(d, &["rules", "revoke", allow, "--reason", "flaky"])).trim(),
        format!("revoked {allow}")
    );
    assert_eq!(ask(d, "c4", "npm run test", &[]), "unavailable");
    let err = refused(&run(d, &["rules", "revoke", allow]));
    assert!(err.contains(&format!("no active rule {allow:?}")), "{err}");
    // Every rules log is chained and verified with the sessions.
    let verified = ok(&run(d, &["verify", "--all"]));
    assert!(verified.contains("rules.user: intact"), "{verified}");
}

#[test]
fn bad_rules_are_refused_naming_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let err = refused(&run(d, &["rules", "add", "Bash(npm run $(x):*)"]));
    assert!(
        err.contains(
            "rule \"Bash(npm run $(x):*)\": a command pattern cannot hold command substitution"
        ),
        "{err}"
    );
    let err = refused(&run(d, &["rules", "add", "Bash(ls)", "--scope", "session"]));
    assert!(err.contains("--scope session needs --session"), "{err}");
    let err = refused(&run(d, &["rules", "add", "Bash(ls)", "--for", "soon"]));
    assert!(err.contains("--for"), "{err}");

    let config = d.join("deploy.toml");
    std::fs::write(&config, "[[rule]]\nrule = \"Bash(a; b)\"\n").unwrap();
    let err = refused(&run(
        d,
        &[
            "ask",
            "--session",
            "s1",
            "--agent",
            "a",
            "--tool",
            "Bash",
            "--config",
            config.to_str().unwrap(),
        ],
    ));
    assert!(err.contains("deploy.toml"), "{err}");
    assert!(err.contains("[[rule]] #1"), "{err}");
    assert!(err.contains("one simple command"), "{err}");
    std::fs::write(&config, "[[rule]]\nrule = \"Bash\"\neffect = \"maybe\"\n").unwrap();
    let err = refused(&run(
        d,
        &["rules", "list", "--config", config.to_str().unwrap()],
    ));
    assert!(
        err.contains("effect \"maybe\" is not \"allow\" or \"reject\""),
        "{err}"
    );
    // Nothing was written by a refused command.
    assert!(!log_path(d, "rules.user").exists());
}

#[test]
fn deployment_rules_decide_and_are_removed_only_from_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let config = d.join("deploy.toml");
    std::fs::write(
        &config,
        "[rules]\nplugins-may-create = [\"session\"]\n\n[[rule]]\nrule = \"Bash(rm:*)\"\neffect = \"reject\"\nreason = \"deleting goes through review\"\n",
    )
    .unwrap();
    let c = config.to_str().unwrap();
    assert_eq!(ask(d, "c1", "rm -rf build", &["--config", c]), "rejected");
    let decided = last_decided(d);
    assert_eq!(decided["answerer"], "rule:deployment-1");
    assert_eq!(decided["reason"], "deleting goes through review");
    assert!(
        decided["rule"]["creator"]
            .as_str()
            .unwrap()
            .starts_with("deployment:")
    );
    let err = refused(&run(d, &["rules", "revoke", "deployment-1", "--config", c]));
    assert!(
        err.contains("comes from the deployment file; remove it there"),
        "{err}"
    );
}

#[test]
fn kill_9_while_creating_rules_loses_no_rule_whose_id_was_printed() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut printed = Vec::new();
    for wave in 0..6 {
        let children: Vec<_> = (0..5)
            .map(|i| {
                Command::new(env!("CARGO_BIN_EXE_approval-host"))
                    .arg("--state-dir")
                    .arg(d)
                    .args(["rules", "add", &format!("Bash(tool{wave}x{i}:*)")])
                    .stdout(Stdio::piped())
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for (i, mut child) in children.into_iter().enumerate() {
            // Every other process dies at whatever point it has reached.
            if i % 2 == 1 {
                let _ = child.kill();
            }
            let out = child.wait_with_output().unwrap();
            let id = String::from_utf8_lossy(&out.stdout).trim().to_owned();
            if !id.is_empty() {
                printed.push(id);
            }
        }
    }
    assert!(
        printed.len() >= 15,
        "the survivors printed their ids: {printed:?}"
    );
    let listed: Value = serde_json::from_str(&ok(&run(d, &["rules", "list", "--json"]))).unwrap();
    let ids: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap())
        .collect();
    for id in &printed {
        assert!(
            ids.contains(&id.as_str()),
            "printed {id} is lost; listed {ids:?}"
        );
    }
    let verified = run(d, &["verify", "--all"]);
    assert_eq!(
        verified.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&verified.stdout)
    );
}

#[test]
fn the_claude_code_hook_obeys_rules_with_paths_relative_to_the_callers_cwd() {
    use std::io::Write as _;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let config = d.join("deploy.toml");
    std::fs::write(
        &config,
        "[[rule]]\nrule = \"Read(./src/**)\"\n\n[[rule]]\nrule = \"Bash(git push:*)\"\neffect = \"reject\"\n",
    )
    .unwrap();
    let hook = |tool: &str, args: Value, id: &str| -> Value {
        let input = serde_json::json!({"session_id": "cc-1", "transcript_path": "/tmp/t.jsonl",
            "cwd": "/work/repo", "permission_mode": "default", "hook_event_name": "PreToolUse",
            "tool_name": tool, "tool_input": args, "tool_use_id": id})
        .to_string();
        let mut child = Command::new(env!("CARGO_BIN_EXE_approval-host"))
            .arg("--state-dir")
            .arg(d)
            .args(["hook", "claude-code", "--config"])
            .arg(&config)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        serde_json::from_str(&ok(&out)).unwrap()
    };
    let out = hook(
        "Read",
        serde_json::json!({"file_path": "/work/repo/src/main.rs"}),
        "t1",
    );
    assert_eq!(out["hookSpecificOutput"]["permissionDecision"], "allow");
    let out = hook(
        "Read",
        serde_json::json!({"file_path": "/work/repo/.env"}),
        "t2",
    );
    assert_eq!(out["hookSpecificOutput"]["permissionDecision"], "ask");
    let out = hook(
        "Bash",
        serde_json::json!({"command": "git push --force"}),
        "t3",
    );
    assert_eq!(
        out["hookSpecificOutput"],
        serde_json::json!({"hookEventName": "PreToolUse", "permissionDecision": "deny",
            "permissionDecisionReason": "tool \"Bash\" was rejected by policy \"rule:deployment-2\": the standing rule Bash(git push:*) rejects this call"})
    );
}
