//! A hook fails closed from its first byte: whatever step of `approval-host hook <cli>` breaks
//! (its command line, resolving `--project-state`, the deployment, the input, the state
//! directory, a panic before, during or after asking), the call is blocked the way that CLI
//! honours a block: exit 2 with the reason on stderr for Claude Code, Codex and Gemini CLI (they
//! let the call through on any other failing status), a printed `deny` for Copilot CLI. The same
//! inputs with nothing broken are answered normally, so each case can fail.

use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};

/// The CLIs and a benign call of each, as the CLI's hook sends it.
fn clis() -> Vec<(&'static str, Value)> {
    vec![
        (
            "claude-code",
            json!({"session_id": "s-claude", "transcript_path": "/tmp/t.jsonl", "cwd": "/w",
                   "permission_mode": "default", "hook_event_name": "PreToolUse",
                   "tool_name": "Bash", "tool_input": {"command": "cargo build"},
                   "tool_use_id": "t1"}),
        ),
        (
            "codex",
            json!({"session_id": "s-codex", "turn_id": "1", "transcript_path": null, "cwd": "/w",
                   "model": "m", "permission_mode": "default", "hook_event_name": "PreToolUse",
                   "tool_name": "Bash", "tool_input": {"command": "cargo build"},
                   "tool_use_id": "c1"}),
        ),
        (
            "gemini",
            json!({"session_id": "s-gemini", "transcript_path": "/tmp/t.json", "cwd": "/w",
                   "hook_event_name": "BeforeTool", "timestamp": "2026-12-06T00:00:00Z",
                   "tool_name": "run_shell_command", "tool_input": {"command": "cargo build"}}),
        ),
        (
            "copilot",
            json!({"sessionId": "s-copilot", "timestamp": 1, "cwd": "/w", "toolName": "bash",
                   "toolArgs": "{\"command\": \"cargo build\"}"}),
        ),
    ]
}

/// Runs `approval-host GLOBAL… hook CLI ARGS…` with `stdin`, and `fault` injected if given.
fn hook(global: &[&str], cli: &str, args: &[&str], stdin: &str, fault: Option<&str>) -> Output {
    hook_in(global, cli, args, stdin, fault, &[])
}

/// `approval-host GLOBAL… hook CLI ARGS…` with piped standard streams and none of the
/// variables that change a hook's run.
fn hook_command(global: &[&str], cli: &str, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_approval-host"));
    command
        .args(global)
        .args(["hook", cli])
        .args(args)
        .env_remove("RUST_LOG")
        .env_remove("TRACEPARENT")
        .env_remove("APPROVAL_HOST_TEST_FAULT")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

/// [`hook`] with `env` added to its environment.
fn hook_in(
    global: &[&str],
    cli: &str,
    args: &[&str],
    stdin: &str,
    fault: Option<&str>,
    env: &[(&str, &str)],
) -> Output {
    use std::io::Write as _;
    let mut command = hook_command(global, cli, args);
    command.envs(env.iter().copied());
    if let Some(step) = fault {
        command.env("APPROVAL_HOST_TEST_FAULT", step);
    }
    let mut child = command.spawn().unwrap();
    // A hook that failed before reading its input may have closed stdin already.
    let _ = child.stdin.take().unwrap().write_all(stdin.as_bytes());
    child.wait_with_output().unwrap()
}

/// Asserts `out` blocks the call as `cli` honours a block, with a reason containing `why`.
fn assert_blocked(cli: &str, out: &Output, why: &str, case: &str) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let what = format!(
        "{cli}, {case}: status {:?}, stdout {stdout:?}, stderr {stderr:?}",
        out.status
    );
    if cli == "copilot" {
        assert_eq!(out.status.code(), Some(0), "{what}");
        let printed: Value =
            serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {what}"));
        assert_eq!(printed["permissionDecision"], "deny", "{what}");
        let reason = printed["permissionDecisionReason"].as_str().unwrap();
        assert!(reason.starts_with("approval-host: "), "{what}");
        assert!(reason.contains(why), "{what}");
    } else {
        assert_eq!(out.status.code(), Some(2), "{what}");
        assert_eq!(stdout, "", "{what}");
        assert!(stderr.starts_with("approval-host: "), "{what}");
        assert!(stderr.contains(why), "{what}");
    }
}

/// Asserts `out` is an ordinary answer: nothing decided this benign call, so no CLI blocks it.
fn assert_answered(cli: &str, out: &Output) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let what = format!(
        "{cli}: status {:?}, stdout {stdout:?}, stderr {:?}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0), "{what}");
    let decision =
        match cli {
            "claude-code" => serde_json::from_str::<Value>(&stdout).unwrap()["hookSpecificOutput"]
                ["permissionDecision"]
                .clone(),
            "codex" => {
                assert_eq!(stdout, "", "{what}");
                return;
            }
            "gemini" => serde_json::from_str::<Value>(&stdout).unwrap()["decision"].clone(),
            _ => serde_json::from_str::<Value>(&stdout).unwrap()["permissionDecision"].clone(),
        };
    assert_eq!(decision, "ask", "{what}");
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

#[test]
fn every_step_that_breaks_blocks_the_call_the_way_each_cli_honours() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let state = state.to_str().unwrap();
    let good = write(dir.path(), "good.toml", "[approval]\npolicy = \"ask\"\n");
    let bad = write(dir.path(), "bad.toml", "[approval\npolicy = ");
    let unknown = write(
        dir.path(),
        "unknown.toml",
        "[approval]\npolicy = \"ask\"\nsurprise = 1\n",
    );
    let missing = dir.path().join("missing.toml").display().to_string();
    let a_file = write(dir.path(), "a-file", "not a directory\n");
    let renamed = dir.path().join("project-renamed").display().to_string();
    for (cli, input) in clis() {
        let input = input.to_string();
        let with_state = ["--state-dir", state];
        // Nothing broken: an ordinary answer.
        assert_answered(
            cli,
            &hook(&with_state, cli, &["--config", &good], &input, None),
        );
        let cases: Vec<(&str, Output, &str)> = vec![
            (
                "an unknown option",
                hook(
                    &with_state,
                    cli,
                    &["--config", &good, "--no-such-option"],
                    &input,
                    None,
                ),
                "--no-such-option",
            ),
            (
                "a project directory that is gone",
                hook(
                    &["--project-state", &renamed],
                    cli,
                    &["--config", &good],
                    &input,
                    None,
                ),
                "--project-state",
            ),
            (
                "a missing deployment",
                hook(&with_state, cli, &["--config", &missing], &input, None),
                "missing.toml",
            ),
            (
                "a deployment that does not parse",
                hook(&with_state, cli, &["--config", &bad], &input, None),
                "bad.toml",
            ),
            (
                "a deployment with an unknown key",
                hook(&with_state, cli, &["--config", &unknown], &input, None),
                "surprise",
            ),
            (
                "input that is not JSON",
                hook(
                    &with_state,
                    cli,
                    &["--config", &good],
                    "{\"tool_name\": ",
                    None,
                ),
                "JSON",
            ),
            (
                "a state directory that is a file",
                hook(
                    &["--state-dir", &a_file],
                    cli,
                    &["--config", &good],
                    &input,
                    None,
                ),
                "a-file",
            ),
            (
                "a panic before anything",
                hook(
                    &with_state,
                    cli,
                    &["--config", &good],
                    &input,
                    Some("start"),
                ),
                "injected fault at start",
            ),
            (
                "a panic while asking",
                hook(&with_state, cli, &["--config", &good], &input, Some("ask")),
                "injected fault at ask",
            ),
            (
                "a panic before printing the answer",
                hook(
                    &with_state,
                    cli,
                    &["--config", &good],
                    &input,
                    Some("print"),
                ),
                "injected fault at print",
            ),
            // What no code inside the process can catch (a stack overflow, an allocation
            // failure): the supervising process answers.
            (
                "an abort while asking",
                hook(
                    &with_state,
                    cli,
                    &["--config", &good],
                    &input,
                    Some("abort-ask"),
                ),
                "the hook stopped abnormally",
            ),
        ];
        for (case, out, why) in &cases {
            assert_blocked(cli, out, why, case);
        }
    }
}

#[test]
fn no_environment_turns_the_supervisor_off() {
    // The marker the supervised child once carried in its environment.
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let good = write(dir.path(), "good.toml", "[approval]\npolicy = \"ask\"\n");
    let env = [("APPROVAL_HOST_HOOK_CHILD", "1")];
    for (cli, input) in clis() {
        let out = hook_in(
            &["--state-dir", state.to_str().unwrap()],
            cli,
            &["--config", &good],
            &input.to_string(),
            Some("abort-ask"),
            &env,
        );
        assert_blocked(
            cli,
            &out,
            "the hook stopped abnormally",
            "an abort, marker set",
        );
    }
}

#[test]
fn a_hook_for_a_cli_this_build_does_not_know_exits_2() {
    let out = hook(&[], "cursor", &[], "{}", None);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "");
    assert!(String::from_utf8_lossy(&out.stderr).contains("cursor"));
}

#[test]
fn help_is_still_an_answer() {
    let out = hook(&[], "codex", &["--help"], "", None);
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("Codex"));
}

/// A deployment whose one rule allows the whole `Bash` tool, and a state directory beside it.
fn bash_allowed(dir: &Path) -> (String, String) {
    let config = write(
        dir,
        "good.toml",
        "[approval]\npolicy = \"ask\"\n\n[[rule]]\nrule = \"Bash\"\n",
    );
    let state = dir.join("state").to_str().unwrap().to_owned();
    (config, state)
}

#[test]
fn a_command_nested_deeper_than_any_reader_follows_is_answered_not_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let (config, state) = bash_allowed(dir.path());
    let state = state.as_str();
    for (open, close) in [("if true; then ", "; fi"), ("$(", ")"), ("{ ", "; }")] {
        let command = format!("{}touch pwned{}", open.repeat(3000), close.repeat(3000));
        for (cli, mut input) in clis() {
            if cli == "copilot" {
                input["toolArgs"] = json!(json!({"command": command}).to_string());
            } else {
                input["tool_input"] = json!({"command": command});
            }
            let out = hook(
                &["--state-dir", state],
                cli,
                &["--config", &config],
                &input.to_string(),
                None,
            );
            // Read as opaque: answered (here by the whole-tool rule), never a crash.
            assert_eq!(
                out.status.code(),
                Some(0),
                "{cli} {open}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

/// Copilot sends a call's arguments as a string of JSON, which may nest as deep as the JSON reader
/// takes: more than a log line may. Such a call is blocked (its record would make the session's
/// log unreadable), and the session goes on answering.
#[test]
fn arguments_nested_deeper_than_a_log_line_may_are_blocked_and_the_session_still_answers() {
    let dir = tempfile::tempdir().unwrap();
    let (config, state) = bash_allowed(dir.path());
    let state = state.as_str();
    let (cli, benign) = clis()
        .into_iter()
        .find(|(cli, _)| *cli == "copilot")
        .unwrap();
    let deep = crate::support::nested(126);
    let mut input = benign.clone();
    input["toolArgs"] = json!(json!({"command": "ls", "x": deep}).to_string());
    let run = |input: &Value| {
        hook(
            &["--state-dir", state],
            cli,
            &["--config", &config],
            &input.to_string(),
            None,
        )
    };
    assert_blocked(
        cli,
        &run(&input),
        "JSON nests more than 120 levels",
        "arguments 127 deep",
    );
    for _ in 0..2 {
        let out = run(&benign);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(printed["permissionDecision"], "allow", "{printed}");
    }
}

#[test]
fn a_plugin_stuck_in_a_read_does_not_hold_the_hook_s_answer() {
    // A file in a directory granted to a plugin (the agent can write there) made a FIFO: the
    // plugin's read never returns. The plugin is given up at its budget and the hook answers;
    // what the plugin left blocked must not keep the process from ending, since a CLI lets the
    // call through when its hook does not end in time.
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules");
    std::fs::create_dir(&rules).unwrap();
    assert!(
        Command::new("mkfifo")
            .arg(rules.join("stuck"))
            .status()
            .unwrap()
            .success()
    );
    let config = write(
        dir.path(),
        "stuck.toml",
        &format!(
            "[approval]\npolicy = \"ask\"\n\n[[plugin]]\nname = \"probe\"\npath = {:?}\n\
             role = \"gate\"\ntimeout_ms = 200\n[plugin.config]\nprobe = \"read\"\n\
             path = \"/rules/stuck\"\n[plugin.files]\n\"/rules\" = \"rules\"\n",
            approval_host::bundled::SANDBOX_PROBE_PATH
        ),
    );
    let state = dir.path().join("state");
    let state = state.to_str().unwrap();
    for (cli, input) in clis() {
        let mut child = hook_command(&["--state-dir", state], cli, &["--config", &config])
            .spawn()
            .unwrap();
        let pid = child.id();
        {
            use std::io::Write as _;
            child
                .stdin
                .take()
                .unwrap()
                .write_all(input.to_string().as_bytes())
                .unwrap();
        }
        let (ended, out) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = ended.send(child.wait_with_output());
        });
        // A bound on a hang, not a measure of speed: the answer comes in well under a second.
        let Ok(out) = out.recv_timeout(std::time::Duration::from_secs(60)) else {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            // A writer that comes and goes ends the read, and with it the hook's child.
            let _ = std::fs::OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(rules.join("stuck"));
            panic!("{cli}: the hook had not ended a minute after the plugin was given up");
        };
        assert_answered(cli, &out.unwrap());
    }
}
