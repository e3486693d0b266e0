//! The `approval-host` binary: `ask` and `log`, their output, exit codes and error texts.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::json;

use crate::support::{events_at, log_path, types};

fn run(state_dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_approval-host"))
        .arg("--state-dir")
        .arg(state_dir)
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// What a command printed on stderr, without its progress lines (`compiling …`), which a first
/// load of a plugin prints.
fn stderr(o: &Output) -> String {
    raw_stderr(o)
        .lines()
        .filter(|l| !l.starts_with("compiling "))
        .map(|l| format!("{l}\n"))
        .collect()
}

fn raw_stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn ask_without_config_is_unavailable_audited_and_exits_zero() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(
        dir.path(),
        &[
            "ask",
            "--session",
            "s1",
            "--agent",
            "a1",
            "--tool",
            "bash",
            "--call-id",
            "c1",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "unavailable\n");
    let events = events_at(&log_path(dir.path(), "s1"));
    assert_eq!(
        types(&events),
        [
            "turn/start",
            "approval/asked",
            "approval/decided",
            "turn/end"
        ]
    );
    assert_eq!(
        events[1].1,
        json!({"id": events[1].1["id"], "toolName": "bash", "callId": "c1", "agent": "a1"})
    );
    assert_eq!(
        events[2].1,
        json!({"id": events[1].1["id"], "outcome": "unavailable"})
    );

    let out = run(
        dir.path(),
        &[
            "ask",
            "--session",
            "s1",
            "--agent",
            "a1",
            "--tool",
            "bash",
            "--json",
        ],
    );
    assert!(out.status.success());
    assert_eq!(stdout(&out), "{\"outcome\":\"unavailable\"}\n");
}

#[test]
fn ask_under_a_never_deployment_is_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("deploy.toml");
    std::fs::write(&config, "[approval]\npolicy = \"never\"\n").unwrap();
    let out = run(
        dir.path(),
        &[
            "ask",
            "--session",
            "s",
            "--agent",
            "a",
            "--tool",
            "bash",
            "--config",
            config.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "rejected\n");
}

#[test]
fn a_bad_policy_in_the_config_exits_2_naming_the_value_and_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("deploy.toml");
    std::fs::write(&config, "[approval]\npolicy = \"sometimes\"\n").unwrap();
    let out = run(
        dir.path(),
        &[
            "ask",
            "--session",
            "s",
            "--agent",
            "a",
            "--tool",
            "bash",
            "--config",
            config.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out),
        format!(
            "approval-host: {}:2:1: [approval] policy = \"sometimes\": approval policy must be one of \"ask\" or \"never\"\n",
            config.display()
        )
    );
    assert!(!log_path(dir.path(), "s").exists(), "nothing was asked");
}

#[test]
fn an_unknown_config_key_exits_2_naming_the_key_and_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("deploy.toml");
    std::fs::write(&config, "[approval]\npolcy = \"ask\"\n").unwrap();
    let out = run(
        dir.path(),
        &[
            "ask",
            "--session",
            "s",
            "--agent",
            "a",
            "--tool",
            "bash",
            "--config",
            config.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    // The file, the line and column of the key, the table, and what is wrong.
    assert_eq!(
        stderr(&out),
        format!(
            "approval-host: {}:2:1: [approval]: unknown key \"polcy\" (expected policy)\n",
            config.display()
        )
    );
}

#[test]
fn bad_arguments_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(
        dir.path(),
        &["ask", "--session", "../x", "--agent", "a", "--tool", "bash"],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("invalid session id \"../x\""),
        "{}",
        stderr(&out)
    );
    let out = run(dir.path(), &["ask", "--session", "s", "--agent", "a"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--tool"), "{}", stderr(&out));
    let missing = dir.path().join("missing.toml");
    let out = run(
        dir.path(),
        &[
            "ask",
            "--session",
            "s",
            "--agent",
            "a",
            "--tool",
            "t",
            "--config",
            missing.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("missing.toml"), "{}", stderr(&out));
}

#[test]
fn log_prints_and_checks_a_clean_log() {
    let dir = tempfile::tempdir().unwrap();
    for _ in 0..2 {
        let out = run(
            dir.path(),
            &[
                "ask",
                "--session",
                "s",
                "--agent",
                "a",
                "--tool",
                "bash",
                "--reason",
                "x",
            ],
        );
        assert!(out.status.success());
    }
    let out = run(dir.path(), &["log", "s"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert_eq!(text.lines().count(), 9, "{text}");
    assert!(text.lines().nth(1).unwrap().contains("approval/asked"));
    assert!(text.contains("\"outcome\":\"unavailable\""));
    assert_eq!(
        text.lines().last().unwrap(),
        "ok: 8 records, 2 turns, 2 questions, each decided once inside its turn"
    );
}

#[test]
fn log_exits_1_naming_the_first_problem() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(
        dir.path(),
        &["ask", "--session", "s", "--agent", "a", "--tool", "bash"],
    );
    assert!(out.status.success());
    let path = log_path(dir.path(), "s");
    // Drop the decided line (and renumber), leaving an asked without its decision.
    let text = std::fs::read_to_string(&path).unwrap();
    let mut kept: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|v: &serde_json::Value| v["type"] != "approval/decided" && v["type"] != "turn/end")
        .collect();
    for (i, v) in kept.iter_mut().enumerate() {
        v["seq"] = json!(i + 1);
    }
    let body: String = kept.iter().map(|v| format!("{v}\n")).collect();
    std::fs::write(&path, body).unwrap();
    let out = run(dir.path(), &["log", "s"]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("line 2: approval/asked"), "{err}");
    assert!(err.ends_with("has no approval/decided\n"), "{err}");

    // A session that is not there is the caller's mistake: exit 2, naming the path.
    let out = run(dir.path(), &["log", "nobody"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("no session log at"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn help_lists_the_commands() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(dir.path(), &["--help"]);
    assert!(out.status.success());
    let text = stdout(&out);
    // One short line per command.
    let commands: Vec<&str> = text
        .lines()
        .skip_while(|l| *l != "Commands:")
        .skip(1)
        .take_while(|l| !l.is_empty())
        .collect();
    let names: Vec<&str> = commands
        .iter()
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    for name in [
        "ask", "log", "verify", "rules", "init", "test", "hook", "serve",
    ] {
        assert!(names.contains(&name), "{text}");
    }
    for line in &commands {
        assert!(line.len() <= 100, "a long command summary: {line}");
    }
    // Every command's long help ends with an example; --state-dir shows only where it matters.
    for (command, uses_state) in [
        (&["ask"][..], true),
        (&["log"][..], true),
        (&["rules", "add"][..], true),
        (&["hook", "claude-code"][..], true),
        (&["new"][..], false),
        (&["keygen"][..], false),
        (&["init"][..], false),
        // Where the installed hook keeps its state.
        (&["init", "claude-code"][..], true),
    ] {
        let mut args = command.to_vec();
        args.push("--help");
        let help = stdout(&run(dir.path(), &args));
        let description = help.split("Usage:").next().unwrap();
        let last_paragraph = description.trim_end().rsplit("\n\n").next().unwrap();
        assert!(
            last_paragraph.starts_with("Example") || command == ["init"],
            "{command:?}: {help}"
        );
        assert_eq!(
            help.contains("--state-dir <DIR>"),
            uses_state,
            "{command:?}: {help}"
        );
    }
}

fn deployment(dir: &Path, extra: &str) -> std::path::PathBuf {
    use approval_host::bundled;
    let config = dir.join("deploy.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[[plugin]]
name = "allow-tools"
path = {allow:?}
role = "gate"
[plugin.config]
tools = "read,grep"

[[plugin]]
name = "deny-commands"
path = {deny:?}
role = "gate"
[plugin.config]
patterns = "rm -rf,curl "

[[plugin]]
name = "reject-all"
path = {reject:?}
role = "answerer"
{extra}
"#,
            allow = bundled::ALLOW_TOOLS_PATH,
            deny = bundled::DENY_COMMANDS_PATH,
            reject = bundled::REJECT_ALL_PATH,
        ),
    )
    .unwrap();
    config
}

#[test]
fn ask_runs_the_example_plugins_and_gates_read_the_arguments() {
    let dir = tempfile::tempdir().unwrap();
    let config = deployment(dir.path(), "");
    let config = config.to_str().unwrap();
    let cases = [
        (vec!["--tool", "read"], "allowed-once"),
        (
            vec![
                "--tool",
                "bash",
                "--call-id",
                "c1",
                "--arguments",
                // Not `rm -rf /`: that would also remove the state directory, which a built-in
                // rule protects before any plugin is asked.
                r#"{"command":"rm -rf build"}"#,
            ],
            "rejected",
        ),
        (
            vec![
                "--tool",
                "bash",
                "--call-id",
                "c2",
                "--arguments",
                r#"{"command":"ls"}"#,
            ],
            "rejected",
        ),
    ];
    for (args, expected) in cases {
        let mut all = vec!["ask", "--session", "s", "--agent", "a", "--config", config];
        all.extend(args.iter().copied());
        let out = run(dir.path(), &all);
        assert!(out.status.success(), "{}", stderr(&out));
        assert_eq!(stdout(&out).trim(), expected, "{args:?}");
    }
    let events = events_at(&log_path(dir.path(), "s"));
    let decided: Vec<&serde_json::Value> = events
        .iter()
        .filter(|(t, _)| t == "approval/decided")
        .map(|(_, d)| d)
        .collect();
    let answerers: Vec<&str> = decided
        .iter()
        .map(|d| d["answerer"].as_str().unwrap())
        .collect();
    assert_eq!(answerers, ["allow-tools", "deny-commands", "reject-all"]);
    let call = events.iter().find(|(t, _)| t == "tool/call").unwrap();
    assert_eq!(
        call.1,
        json!({"callId": "c1", "name": "bash", "arguments": {"command": "rm -rf build"}})
    );
    let out = run(dir.path(), &["log", "s"]);
    assert!(out.status.success(), "{}", stderr(&out));

    // --json prints the decision as the log records it.
    let out = run(
        dir.path(),
        &[
            "ask",
            "--session",
            "s",
            "--agent",
            "a",
            "--config",
            config,
            "--tool",
            "bash",
            "--call-id",
            "c3",
            "--arguments",
            r#"{"command":"rm -rf build"}"#,
            "--json",
        ],
    );
    let printed: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let mut logged = events_at(&log_path(dir.path(), "s"))
        .into_iter()
        .rev()
        .find(|(t, _)| t == "approval/decided")
        .unwrap()
        .1;
    logged.as_object_mut().unwrap().remove("id");
    assert_eq!(printed, logged);
    assert_eq!(printed["answerer"], "deny-commands");
    assert_eq!(printed["digest"].as_str().unwrap().len(), 64);
    assert_eq!(
        printed["reason"],
        "the command contains \"rm -rf\", which this deployment does not allow"
    );
}

#[test]
fn log_lists_sessions_and_refuses_a_missing_one_and_empty_ids_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(dir.path(), &["log"]);
    assert!(out.status.success());
    assert!(
        stdout(&out).starts_with("no sessions in "),
        "{}",
        stdout(&out)
    );
    for session in ["alpha", "beta"] {
        let out = run(
            dir.path(),
            &[
                "ask",
                "--session",
                session,
                "--agent",
                "a",
                "--tool",
                "bash",
            ],
        );
        assert!(out.status.success(), "{}", stderr(&out));
    }
    let out = run(dir.path(), &["log"]);
    let listed = stdout(&out);
    let lines: Vec<&str> = listed.lines().collect();
    assert_eq!(lines.len(), 3, "{listed}");
    assert!(lines[0].starts_with("session "), "{listed}");
    let beta: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(beta[0], "beta", "most recent first: {listed}");
    assert_eq!(beta[1], "4");
    assert_eq!(beta[3], "-", "no open turn");

    let out = run(dir.path(), &["log", "gamma"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains(&format!(
            "no session log at {}",
            log_path(dir.path(), "gamma").display()
        )),
        "{}",
        stderr(&out)
    );
    for (flag, args) in [
        (
            "--agent",
            ["--agent", "", "--tool", "bash", "--call-id", "c"],
        ),
        ("--tool", ["--agent", "a", "--tool", " ", "--call-id", "c"]),
        (
            "--call-id",
            ["--agent", "a", "--tool", "bash", "--call-id", ""],
        ),
    ] {
        let mut all = vec!["ask", "--session", "s"];
        all.extend(args);
        let out = run(dir.path(), &all);
        assert_eq!(out.status.code(), Some(2), "{flag}");
        assert!(
            stderr(&out).contains(&format!("{flag} must not be empty")),
            "{}",
            stderr(&out)
        );
    }
}

#[test]
fn arguments_need_a_call_id_and_valid_json() {
    let dir = tempfile::tempdir().unwrap();
    let base = ["ask", "--session", "s", "--agent", "a", "--tool", "bash"];
    let mut args = base.to_vec();
    args.extend(["--arguments", "{}"]);
    let out = run(dir.path(), &args);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--call-id"), "{}", stderr(&out));
    let mut args = base.to_vec();
    args.extend(["--call-id", "c", "--arguments", "{nope"]);
    let out = run(dir.path(), &args);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("--arguments is not JSON"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_plugin_that_does_not_load_exits_2_naming_the_file_and_the_plugin() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.wasm");
    std::fs::write(&bad, wat::parse_str("(module)").unwrap()).unwrap();
    let config = deployment(
        dir.path(),
        &format!(
            "[[plugin]]\nname = \"broken\"\npath = {:?}\nrole = \"gate\"\n",
            bad.display().to_string()
        ),
    );
    let out = run(
        dir.path(),
        &[
            "ask",
            "--session",
            "s",
            "--agent",
            "a",
            "--tool",
            "read",
            "--config",
            config.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.starts_with(&format!(
            "approval-host: {}: plugin \"broken\": path ",
            config.display()
        )),
        "{err}"
    );
    assert!(
        err.contains("core WebAssembly module, not a component"),
        "{err}"
    );
    assert!(
        !log_path(dir.path(), "s").exists(),
        "nothing ran without the gate"
    );
}

#[test]
fn a_config_typo_a_plugin_refuses_exits_2_naming_the_file_the_plugin_and_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let config = deployment(
        dir.path(),
        &format!(
            "[[plugin]]\nname = \"deny-more\"\npath = {:?}\nrole = \"gate\"\n[plugin.config]\ncommands = \"rm -rf\"\n",
            approval_host::bundled::DENY_COMMANDS_PATH
        ),
    );
    let out = run(
        dir.path(),
        &[
            "ask",
            "--session",
            "s",
            "--agent",
            "a",
            "--tool",
            "Bash",
            "--config",
            config.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out),
        format!(
            "approval-host: {}: plugin \"deny-more\": config: unknown key \"commands\": deny-commands reads only \"patterns\" and \"reason\"\n",
            config.display()
        )
    );
    assert!(
        !log_path(dir.path(), "s").exists(),
        "nothing ran without the gate"
    );
}

#[test]
fn check_reports_fit_and_exact_mismatches() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(
        dir.path(),
        &["check", approval_host::bundled::REJECT_ALL_PATH],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains(": fits approval:plugin/answerer@0.1.0\n"),
        "{text}"
    );
    assert!(text.contains("  exports: decide\n"), "{text}");
    assert!(text.contains("approval:plugin/types@0.1.0"), "{text}");
    assert!(
        text.contains("  api:     0.1.0; this host also serves 0.2.0,"),
        "{text}"
    );
    // A 0.2 plugin: its version, and what 0.2 adds over 0.1.
    let out = run(
        dir.path(),
        &["check", approval_host::bundled::DENY_COMMANDS_PATH],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains(": fits approval:plugin/answerer@0.2.0\n"),
        "{text}"
    );
    assert!(
        text.contains("  exports: validate-config, decide\n"),
        "{text}"
    );
    assert!(
        text.contains(
            "  api:     0.2.0, the newest this host serves; over 0.1 it:\n           - reject carries a reason the model and the user see\n"
        ),
        "{text}"
    );

    let foreign = crate::fixtures::write(
        dir.path(),
        "foreign.wasm",
        &crate::fixtures::foreign_import(),
    );
    let out = run(dir.path(), &["check", foreign.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stdout(&out),
        format!(
            "{}: imports `test:fixtures/socket`, which the host does not provide (only approval:plugin/host, approval:plugin/types, and WASI 0.2)\n",
            foreign.display()
        )
    );
    let wrong = crate::fixtures::write(
        dir.path(),
        "wrong.wasm",
        &crate::fixtures::wrong_export_signature(),
    );
    let out = run(dir.path(), &["check", wrong.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stdout(&out).contains("does not implement approval:plugin/answerer@0.1.x"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn demo_shows_every_outcome_with_its_audit_trail() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(dir.path(), &["demo"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let outcomes: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("  => "))
        .collect();
    assert_eq!(
        outcomes,
        [
            "allowed-once",
            "rejected",
            "rejected",
            "cancelled",
            "unavailable",
            "rejected"
        ]
    );
    assert_eq!(text.matches("approval/asked").count(), 6, "{text}");
    assert_eq!(text.matches("approval/decided").count(), 6, "{text}");
    assert!(text.contains("\"answerer\":\"allow-tools\""), "{text}");
    assert!(text.contains("\"answerer\":\"deny-commands\""), "{text}");
    assert!(text.contains("\"answerer\":\"reject-all\""), "{text}");
    // The demo used the state directory it was given, and its log checks clean.
    let out = run(dir.path(), &["log", "demo"]);
    assert!(out.status.success(), "{}", stderr(&out));
}

fn claude_code(dir: &Path, config: &Path, input: &str) -> Output {
    use std::io::Write as _;
    let mut child = Command::new(env!("CARGO_BIN_EXE_approval-host"))
        .arg("--state-dir")
        .arg(dir)
        .args(["hook", "claude-code", "--config"])
        .arg(config)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn claude_code_hook_maps_outcomes_and_never_grants_the_unanswered() {
    use approval_host::bundled;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("deploy.toml");
    std::fs::write(
        &config,
        format!(
            "[[plugin]]\nname = \"allow-tools\"\npath = {:?}\nrole = \"gate\"\n[plugin.config]\ntools = \"Read\"\n\n\
             [[plugin]]\nname = \"deny-commands\"\npath = {:?}\nrole = \"gate\"\n[plugin.config]\npatterns = \"rm -rf\"\n",
            bundled::ALLOW_TOOLS_PATH,
            bundled::DENY_COMMANDS_PATH
        ),
    )
    .unwrap();
    let session = "3f2b7c1e-0000-4000-8000-000000000001";
    let input = |tool: &str, args: serde_json::Value, id: &str| {
        json!({"session_id": session, "transcript_path": "/tmp/t.jsonl", "cwd": "/w",
               "permission_mode": "default", "hook_event_name": "PreToolUse",
               "tool_name": tool, "tool_input": args, "tool_use_id": id})
        .to_string()
    };
    let cases = [
        (
            input("Read", json!({"file_path": "/w/a"}), "toolu_1"),
            "allow",
            "allowed once by the approval-host deployment",
        ),
        (
            input("Bash", json!({"command": "rm -rf build"}), "toolu_2"),
            "deny",
            // deny-commands (plugin API 0.2) says why; the model reads it.
            "tool \"Bash\" was rejected by policy \"deny-commands\": the command contains \"rm -rf\", which this deployment does not allow",
        ),
        (
            input("Bash", json!({"command": "ls"}), "toolu_3"),
            "ask",
            "tool \"Bash\" requires approval, but no approval channel is available",
        ),
    ];
    for (stdin, decision, reason) in cases {
        let out = claude_code(dir.path(), &config, &stdin);
        assert!(out.status.success(), "{}", stderr(&out));
        let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
        assert_eq!(
            v,
            json!({"hookSpecificOutput": {"hookEventName": "PreToolUse",
                   "permissionDecision": decision, "permissionDecisionReason": reason}})
        );
    }
    let events = events_at(&log_path(dir.path(), session));
    assert_eq!(events.iter().filter(|(t, _)| t == "tool/call").count(), 3);
    assert_eq!(
        events
            .iter()
            .filter(|(t, _)| t == "approval/decided")
            .count(),
        3
    );
    let out = run(dir.path(), &["log", session]);
    assert!(out.status.success(), "{}", stderr(&out));

    for (bad, why) in [
        ("not json", "the hook input is not JSON"),
        (
            r#"{"session_id":"s","hook_event_name":"PostToolUse","tool_name":"Bash"}"#,
            "this hook answers only PreToolUse",
        ),
        (
            r#"{"session_id":"s","hook_event_name":"PreToolUse"}"#,
            "the hook input has no tool_name",
        ),
        (
            r#"{"session_id":"../x","hook_event_name":"PreToolUse","tool_name":"Bash"}"#,
            "invalid session id",
        ),
    ] {
        let out = claude_code(dir.path(), &config, bad);
        assert_eq!(out.status.code(), Some(2), "{bad}");
        assert!(stderr(&out).contains(why), "{bad}: {}", stderr(&out));
        assert!(stdout(&out).is_empty());
    }
}

#[test]
fn a_compile_says_what_it_is_doing_and_check_uses_the_cache() {
    use approval_host::bundled;
    let dir = tempfile::tempdir().unwrap();
    let plugin = dir.path().join("gate.wasm");
    std::fs::write(&plugin, bundled::ALLOW_TOOLS).unwrap();
    let plugin = plugin.to_str().unwrap();
    let first = run(dir.path(), &["check", plugin]);
    assert!(first.status.success(), "{}", raw_stderr(&first));
    let err = raw_stderr(&first);
    let line = err
        .lines()
        .find(|l| l.starts_with("compiling "))
        .unwrap_or_else(|| panic!("{err}"));
    let size = format!("{:.1}", bundled::ALLOW_TOOLS.len() as f64 / 1e6);
    assert!(
        line.starts_with(&format!("compiling gate ({size} MB)… done in ")),
        "{line}"
    );
    assert!(line.ends_with(" s"), "{line}");
    // The second check loads the compiled component from the cache: nothing to say.
    let second = run(dir.path(), &["check", plugin]);
    assert!(second.status.success());
    assert!(
        !raw_stderr(&second).contains("compiling"),
        "{}",
        raw_stderr(&second)
    );
    assert_eq!(stdout(&first), stdout(&second));
}

#[test]
fn a_missing_deployment_file_says_so_once_with_its_path() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.toml");
    let out = run(
        dir.path(),
        &[
            "ask",
            "--session",
            "s",
            "--agent",
            "a",
            "--tool",
            "t",
            "--config",
            missing.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out),
        format!(
            "approval-host: {}: cannot read the deployment file: No such file or directory (os error 2)\n",
            missing.display()
        )
    );
}
