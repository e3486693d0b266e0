//! `approval-host init claude-code`: a working hook from one command, merged into real settings
//! files that already hold other hooks, idempotent, with a dry run that writes nothing, and the
//! hook it installs answering as documented.

use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};

fn init(dir: &Path, home: &Path, args: &[&str]) -> Output {
    init_cli("claude-code", dir, home, args)
}

pub(crate) fn ok(o: &Output) -> String {
    assert!(
        o.status.success(),
        "exit {:?}: {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

const EXISTING: &str = r#"{
  "permissions": {"allow": ["Bash(npm test)"]},
  "hooks": {
    "PreToolUse": [
      {"matcher": "Bash", "hooks": [{"type": "command", "command": "echo other"}]}
    ],
    "PostToolUse": [{"matcher": "*", "hooks": [{"type": "command", "command": "log.sh"}]}]
  },
  "model": "opus"
}
"#;

/// Runs the hook command `init` installed, as Claude Code would (`sh -c`, in the project, with
/// `$CLAUDE_PROJECT_DIR`), on one tool call.
fn run_installed(project: &Path, home: &Path, command: &str, tool: &str, args: Value) -> Value {
    let input = json!({"session_id": "cc-init", "transcript_path": "/tmp/t.jsonl",
        "cwd": project, "permission_mode": "default", "hook_event_name": "PreToolUse",
        "tool_name": tool, "tool_input": args, "tool_use_id": format!("t-{tool}-{}", args)});
    let out = run_command(project, home, command, &input);
    serde_json::from_str(&ok(&out)).unwrap()
}

#[test]
fn init_merges_the_hook_into_existing_settings_and_the_hook_works() {
    let project = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let p = project.path();
    let settings = p.join(".claude/settings.json");
    std::fs::create_dir_all(settings.parent().unwrap()).unwrap();
    std::fs::write(&settings, EXISTING).unwrap();

    // A dry run shows the diff and writes nothing.
    let out = ok(&init(p, p, &["--project", ".", "--dry-run"]));
    assert!(
        out.contains("would be updated ./.claude/settings.json"),
        "{out}"
    );
    assert!(out.contains("+        \"matcher\": \"*\","), "{out}");
    assert!(out.ends_with("dry run: nothing was written\n"), "{out}");
    assert_eq!(std::fs::read_to_string(&settings).unwrap(), EXISTING);
    assert!(!p.join(".approval-host").exists());

    let out = ok(&init(p, home.path(), &["--project", "."]));
    assert!(
        out.contains("created    ./.approval-host/claude-code.toml"),
        "{out}"
    );
    assert!(out.contains("updated    ./.claude/settings.json"), "{out}");
    let merged: Value = serde_json::from_str(&std::fs::read_to_string(&settings).unwrap()).unwrap();
    let before: Value = serde_json::from_str(EXISTING).unwrap();
    assert_eq!(merged["permissions"], before["permissions"]);
    assert_eq!(merged["model"], "opus");
    // The other PostToolUse hook stays; the after-tool hook (which only records) joins it.
    let post = merged["hooks"]["PostToolUse"].as_array().unwrap();
    assert_eq!(post.len(), 2);
    assert_eq!(post[0], before["hooks"]["PostToolUse"][0]);
    let after = post[1]["hooks"][0]["command"].as_str().unwrap();
    assert!(after.ends_with(" --after-tool"), "{after}");
    let pre = merged["hooks"]["PreToolUse"].as_array().unwrap();
    assert_eq!(pre.len(), 2);
    assert_eq!(
        pre[0], before["hooks"]["PreToolUse"][0],
        "the other hook is untouched"
    );
    assert_eq!(pre[1]["matcher"], "*");
    let command = pre[1]["hooks"][0]["command"].as_str().unwrap().to_owned();
    assert!(
        command.ends_with(
            "--project-state \"$CLAUDE_PROJECT_DIR\" hook claude-code --config \"$CLAUDE_PROJECT_DIR/.approval-host/claude-code.toml\""
        ),
        "{command}"
    );
    assert!(
        out.contains("check it with: approval-host --project-state . log <session>"),
        "{out}"
    );
    // Every plugin it installs is pinned by its digest.
    let deployment = std::fs::read_to_string(p.join(".approval-host/claude-code.toml")).unwrap();
    assert_eq!(
        deployment.matches("\nsha256 = \"").count(),
        2,
        "{deployment}"
    );

    // Twice changes nothing, byte for byte.
    let merged_bytes = std::fs::read(&settings).unwrap();
    let out = ok(&init(p, home.path(), &["--project", "."]));
    assert!(out.contains("nothing to do: already set up\n"), "{out}");
    assert_eq!(std::fs::read(&settings).unwrap(), merged_bytes);

    // `init` compiled the plugins into the hook's cache, in the user's state directory.
    let projects = home.path().join(".local/state/approval-host/projects");
    let compiled_into = format!(
        "{} {}",
        approval_host::plugin::cache::COMPILED_AHEAD,
        projects.display()
    );
    assert!(out.contains(&compiled_into), "{out}");

    // The installed hook answers: read-only tools proceed, a dangerous command is rejected with
    // its reason, anything else goes to Claude Code's prompt; all on the project's log. The
    // first call after `init` finds its plugins compiled: no cold cache is said.
    let input = json!({"session_id": "cc-first", "transcript_path": "/tmp/t.jsonl",
        "cwd": p, "permission_mode": "default", "hook_event_name": "PreToolUse",
        "tool_name": "Read", "tool_input": {"file_path": "a"}, "tool_use_id": "t-first"});
    let first = run_command(p, home.path(), &command, &input);
    let said = String::from_utf8_lossy(&first.stderr);
    assert!(first.status.success(), "{said}");
    assert!(
        !said.contains(approval_host::plugin::cache::COLD_CACHE),
        "{said}"
    );
    assert!(!said.contains("compiling"), "{said}");
    let decide = |tool: &str, args: Value| {
        run_installed(p, home.path(), &command, tool, args)["hookSpecificOutput"]["permissionDecision"]
            .clone()
    };
    assert_eq!(decide("Read", json!({"file_path": "src/main.rs"})), "allow");
    assert_eq!(
        decide("Bash", json!({"command": "git push --force origin"})),
        "deny"
    );
    assert_eq!(decide("Bash", json!({"command": "cargo build"})), "ask");
    // State lives outside the project, in the user's state directory for it.
    assert!(!p.join(".approval-host/sessions").exists());
    assert!(!p.join(".local").exists());
    let state: Vec<_> = std::fs::read_dir(&projects).unwrap().collect();
    assert_eq!(state.len(), 1, "{projects:?}");
    let state = state[0].as_ref().unwrap().path();
    let name = state.file_name().unwrap().to_str().unwrap();
    let project_name = std::fs::canonicalize(p).unwrap();
    let project_name = project_name.file_name().unwrap().to_str().unwrap();
    assert!(
        name.starts_with(&format!("{}-", project_name.replace('.', "_"))),
        "{name}"
    );
    let log = state.join("sessions/cc-init.jsonl");
    assert_eq!(
        std::fs::read_to_string(log)
            .unwrap()
            .matches("approval/decided")
            .count(),
        3
    );
}

#[test]
fn init_keeps_an_edited_deployment_and_refuses_broken_settings_without_writing() {
    let home = tempfile::tempdir().unwrap();
    let h = home.path();
    // --user writes under $HOME.
    let out = ok(&init(h, h, &["--user"]));
    assert!(
        out.contains(&format!(
            "created    {}",
            h.join(".approval-host/claude-code.toml").display()
        )),
        "{out}"
    );
    let deployment = h.join(".approval-host/claude-code.toml");
    std::fs::write(&deployment, "[approval]\npolicy = \"never\"\n").unwrap();
    let out = ok(&init(h, h, &["--user"]));
    assert!(out.contains("(exists; kept as it is)"), "{out}");
    assert_eq!(
        std::fs::read_to_string(&deployment).unwrap(),
        "[approval]\npolicy = \"never\"\n"
    );
    // A kept deployment whose plugins cannot be compiled here (a secret only the agent CLI's
    // environment has): the hook is set up all the same, and `init` says why it compiled nothing.
    std::fs::write(
        &deployment,
        "[[plugin]]\nname = \"needs-secret\"\npath = \"plugins/allow-tools.wasm\"\nrole = \"gate\"\nsecrets = { token = \"env:APPROVAL_HOST_TEST_UNSET_SECRET\" }\n",
    )
    .unwrap();
    let out = ok(&init(h, h, &["--user"]));
    assert!(
        out.contains(approval_host::plugin::cache::NOT_COMPILED_AHEAD),
        "{out}"
    );
    assert!(
        out.contains("needs-secret") || out.contains("APPROVAL_HOST_TEST_UNSET_SECRET"),
        "{out}"
    );
    assert!(
        !out.contains(approval_host::plugin::cache::COMPILED_AHEAD),
        "{out}"
    );
    std::fs::write(&deployment, "[approval]\npolicy = \"never\"\n").unwrap();

    let project = tempfile::tempdir().unwrap();
    let p = project.path();
    std::fs::create_dir_all(p.join(".claude")).unwrap();
    std::fs::write(p.join(".claude/settings.json"), "{\n  \"hooks\": [1,\n").unwrap();
    let out = init(p, h, &["--project", "."]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("./.claude/settings.json:3:0: not JSON (EOF while parsing"),
        "{err}"
    );
    assert!(err.contains("nothing was changed"), "{err}");
    assert!(!p.join(".approval-host").exists());
    std::fs::write(
        p.join(".claude/settings.json"),
        "{\"hooks\": {\"PreToolUse\": {}}}",
    )
    .unwrap();
    let err = init(p, h, &["--project", "."]);
    assert_eq!(err.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&err.stderr).contains("\"hooks.PreToolUse\" is not an array"));

    let out = init(p, h, &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--project DIR or --user"));
}

/// The PreToolUse command `init claude-code` installed in `project`'s settings.
fn installed_pre_tool_command(project: &Path) -> String {
    let settings: Value = serde_json::from_str(
        &std::fs::read_to_string(project.join(".claude/settings.json")).unwrap(),
    )
    .unwrap();
    settings["hooks"]["PreToolUse"][0]["hooks"][0]["command"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// Runs a hook command as an agent CLI would (`sh -c`, in the project, with Claude Code's
/// `$CLAUDE_PROJECT_DIR`) on `input`.
fn run_command(project: &Path, home: &Path, command: &str, input: &Value) -> Output {
    let mut child = Command::new("sh")
        .args(["-c", command])
        .current_dir(project)
        .env("CLAUDE_PROJECT_DIR", project)
        .env("HOME", home)
        .env_remove("XDG_STATE_HOME")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.to_string().as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

fn init_cli(cli: &str, dir: &Path, home: &Path, args: &[&str]) -> Output {
    let mut all = vec!["init", cli];
    all.extend_from_slice(args);
    in_project(dir, home, &all)
}

#[test]
fn init_for_codex_gemini_and_copilot_merges_the_hook_is_idempotent_and_the_hook_works() {
    // (CLI, its hook file, what is there already, the events its hook goes in, a rejected call)
    let cases = [
        (
            "codex",
            ".codex/hooks.json",
            json!({"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "echo other"}]}]}}),
            vec!["PreToolUse", "PermissionRequest"],
            json!({"session_id": "codex-init", "turn_id": "1", "transcript_path": null, "cwd": "/w",
                   "hook_event_name": "PreToolUse", "model": "gpt-5-codex", "permission_mode": "default",
                   "tool_name": "Bash", "tool_input": {"command": "rm -rf /"}, "tool_use_id": "c1"}),
        ),
        (
            "gemini",
            ".gemini/settings.json",
            json!({"model": {"name": "gemini-2.5-pro"}, "hooks": {"AfterTool": [{"hooks": [{"type": "command", "command": "log.sh"}]}]}}),
            vec!["BeforeTool"],
            json!({"session_id": "gemini-init", "transcript_path": "/t", "cwd": "/w",
                   "hook_event_name": "BeforeTool", "timestamp": "2026-12-05T10:00:00Z",
                   "tool_name": "run_shell_command", "tool_input": {"command": "rm -rf /"}}),
        ),
        (
            "copilot",
            ".github/hooks/approval-host.json",
            json!({"version": 1, "hooks": {"sessionStart": [{"type": "command", "bash": "echo hi"}]}}),
            vec!["preToolUse"],
            json!({"sessionId": "copilot-init", "timestamp": 1, "cwd": "/w",
                   "toolName": "bash", "toolArgs": {"command": "rm -rf /"}}),
        ),
    ];
    for (cli, file, existing, events, call) in cases {
        let project = tempfile::tempdir().unwrap();
        let home = tempfile::tempdir().unwrap();
        let (p, h) = (project.path(), home.path());
        let settings = p.join(file);
        std::fs::create_dir_all(settings.parent().unwrap()).unwrap();
        let before = serde_json::to_string_pretty(&existing).unwrap();
        std::fs::write(&settings, &before).unwrap();

        // A dry run shows the change and writes nothing.
        let out = ok(&init_cli(cli, p, h, &["--project", ".", "--dry-run"]));
        assert!(out.contains("dry run: nothing was written"), "{cli}: {out}");
        assert_eq!(std::fs::read_to_string(&settings).unwrap(), before, "{cli}");
        assert!(!p.join(".approval-host").exists(), "{cli}");

        ok(&init_cli(cli, p, h, &["--project", "."]));
        let merged: Value =
            serde_json::from_str(&std::fs::read_to_string(&settings).unwrap()).unwrap();
        // What was there stays.
        for (key, value) in existing["hooks"].as_object().unwrap() {
            for entry in value.as_array().unwrap() {
                assert!(
                    merged["hooks"][key].as_array().unwrap().contains(entry),
                    "{cli}: {key} kept"
                );
            }
        }
        let text = merged.to_string();
        let mut command = None;
        for event in &events {
            let list = merged["hooks"][event].as_array().unwrap();
            let ours = list.last().unwrap();
            let c = ours["hooks"][0]["command"]
                .as_str()
                .or_else(|| ours["bash"].as_str())
                .unwrap()
                .to_owned();
            assert!(c.contains(&format!(" hook {cli} --config ")), "{cli}: {c}");
            command = Some(c);
        }
        assert!(
            p.join(format!(".approval-host/{cli}.toml")).is_file(),
            "{cli}"
        );

        // Again: nothing changes, byte for byte.
        let out = ok(&init_cli(cli, p, h, &["--project", "."]));
        assert!(
            out.contains("nothing to do: already set up"),
            "{cli}: {out}"
        );
        assert_eq!(std::fs::read_to_string(&settings).unwrap(), {
            let mut t = serde_json::to_string_pretty(&merged).unwrap();
            t.push('\n');
            t
        });
        assert!(text.contains("approval-host"), "{cli}");

        // The installed hook answers: the example gates reject `rm -rf /`, as this CLI says it.
        let out = run_command(p, h, &command.unwrap(), &call);
        assert!(
            out.status.success(),
            "{cli}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
        let denied = match cli {
            "codex" => printed["hookSpecificOutput"]["permissionDecision"] == "deny",
            "gemini" => printed["decision"] == "deny",
            _ => printed["permissionDecision"] == "deny",
        };
        assert!(denied, "{cli}: {printed}");
    }
    // Copilot CLI also runs the user's hook files (in every folder, trusted or not): --user
    // writes one there, and its hook answers.
    let h = tempfile::tempdir().unwrap();
    ok(&init_cli("copilot", h.path(), h.path(), &["--user"]));
    let file = h.path().join(".copilot/hooks/approval-host.json");
    let written: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(written["version"], 1);
    let command = written["hooks"]["preToolUse"][0]["bash"].as_str().unwrap();
    assert!(command.contains(" hook copilot --config "), "{command}");
    let call = json!({"sessionId": "copilot-user", "timestamp": 1, "cwd": "/w",
                      "toolName": "bash", "toolArgs": {"command": "rm -rf /"}});
    let out = run_command(h.path(), h.path(), command, &call);
    let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(printed["permissionDecision"], "deny", "{printed}");
}

/// `approval-host ARGS…` run by a person in `dir` (no state flag).
pub(crate) fn in_project(dir: &Path, home: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_approval-host"))
        .args(args)
        .current_dir(dir)
        .env("HOME", home)
        .env_remove("XDG_STATE_HOME")
        .env_remove("RUST_LOG")
        .output()
        .unwrap()
}

#[test]
fn inside_a_project_rules_log_and_verify_use_the_deployment_and_state_its_hooks_use() {
    let project = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let (p, h) = (project.path(), home.path());
    ok(&init(p, h, &["--project", "."]));
    let sub = p.join("src/deep");
    std::fs::create_dir_all(&sub).unwrap();

    // A reject rule added from anywhere in the project, with no flag: the hook reads it.
    let out = in_project(
        &sub,
        h,
        &[
            "rules",
            "add",
            "Bash(rm:*)",
            "--effect",
            "reject",
            "--reason",
            "no deleting here",
        ],
    );
    ok(&out);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("reading the state of the hooks set up in"),
        "{said}"
    );
    let command = installed_pre_tool_command(p);
    let printed = run_installed(p, h, &command, "Bash", json!({"command": "rm -r build"}));
    assert_eq!(printed["hookSpecificOutput"]["permissionDecision"], "deny");
    assert!(
        printed["hookSpecificOutput"]["permissionDecisionReason"]
            .as_str()
            .unwrap()
            .ends_with("no deleting here"),
        "{printed}"
    );
    // Nothing was written into the project's own .approval-host but the deployment and plugins.
    assert!(!p.join(".approval-host/sessions").exists());
    assert!(!p.join(".approval-host/rules").exists());
    // `explain` reads the same deployment and rules; `log` and `verify` the hook's sessions.
    let out = ok(&in_project(
        &sub,
        h,
        &[
            "rules",
            "explain",
            "--tool",
            "Bash",
            "--arguments",
            "{\"command\": \"rm -r build\"}",
        ],
    ));
    assert!(out.contains("Bash(rm:*)"), "{out}");
    let out = ok(&in_project(p, h, &["log"]));
    assert!(out.contains("cc-init"), "{out}");
    ok(&in_project(p, h, &["verify", "--all"]));

    // A deployment the agent planted below (no protected hook settings run it) is no set-up:
    // the commands still read the project's.
    std::fs::create_dir_all(sub.join(".approval-host")).unwrap();
    std::fs::write(
        sub.join(".approval-host/codex.toml"),
        "[approval]\npolicy = \"ask\"\n",
    )
    .unwrap();
    let out = in_project(&sub, h, &["rules", "list"]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains(&format!(
            "set up in {} (",
            std::fs::canonicalize(p).unwrap().display()
        )),
        "{said}"
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("Bash(rm:*)"));

    // doctor: a hook whose matcher leaves tools out is not gating.
    ok(&in_project(p, h, &["doctor"]));
    let text = std::fs::read_to_string(p.join(".claude/settings.json")).unwrap();
    std::fs::write(
        p.join(".claude/settings.json"),
        text.replacen("\"matcher\": \"*\"", "\"matcher\": \"Read\"", 1),
    )
    .unwrap();
    let out = in_project(p, h, &["doctor"]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains("runs only for tools matching \"Read\""),
        "{said}"
    );
    std::fs::write(p.join(".claude/settings.json"), text).unwrap();

    // Set up for two CLIs: the rules commands ask which deployment, naming both.
    ok(&init_cli("codex", p, h, &["--project", "."]));
    let out = in_project(p, h, &["rules", "list"]);
    assert_eq!(out.status.code(), Some(2));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("say which deployment with --config"),
        "{said}"
    );
    assert!(
        said.contains("claude-code.toml") && said.contains("codex.toml"),
        "{said}"
    );
    let out = ok(&in_project(
        p,
        h,
        &[
            "rules",
            "list",
            "--config",
            ".approval-host/claude-code.toml",
        ],
    ));
    assert!(out.contains("Bash(rm:*)"), "{out}");
}

#[test]
fn a_hook_that_finds_its_compiled_cache_cold_says_so_once_per_state_directory() {
    let project = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let (p, h) = (project.path(), home.path());
    let state = h.join("state");
    let state_flag = state.to_str().unwrap();
    let out = ok(&init(p, h, &["--project", ".", "--state-dir", state_flag]));
    let cache = state.join("cache");
    assert!(
        out.contains(&format!(
            "{} {}",
            approval_host::plugin::cache::COMPILED_AHEAD,
            cache.display()
        )),
        "{out}"
    );
    let entries = |dir: &Path| -> Vec<std::path::PathBuf> {
        std::fs::read_dir(dir)
            .map(|d| {
                d.map(|e| e.unwrap().path())
                    .filter(|p| p.extension().is_some_and(|x| x == "cwasm"))
                    .collect()
            })
            .unwrap_or_default()
    };
    assert_eq!(entries(&cache).len(), 2, "both example plugins compiled");
    let command = installed_pre_tool_command(p);
    let call = |id: &str| {
        let input = json!({"session_id": "cold", "transcript_path": "/tmp/t.jsonl",
            "cwd": p, "permission_mode": "default", "hook_event_name": "PreToolUse",
            "tool_name": "Bash", "tool_input": {"command": "rm -rf /"}, "tool_use_id": id});
        let out = run_command(p, h, &command, &input);
        let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(
            printed["hookSpecificOutput"]["permissionDecision"], "deny",
            "{printed}"
        );
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    // The cache emptied (a deployment changed by hand, a cleaned state directory): the first call
    // compiles on the asking path and says so, once, naming the cache.
    for entry in entries(&cache) {
        std::fs::remove_file(entry).unwrap();
    }
    let said = call("t-1");
    assert_eq!(
        said.matches(approval_host::plugin::cache::COLD_CACHE)
            .count(),
        1,
        "{said}"
    );
    assert!(said.contains(&cache.display().to_string()), "{said}");
    assert!(said.contains("`approval-host init`"), "{said}");
    // It left the cache warm: the next call compiles nothing and says nothing.
    assert_eq!(entries(&cache).len(), 2);
    let said = call("t-2");
    assert!(
        !said.contains(approval_host::plugin::cache::COLD_CACHE),
        "{said}"
    );
    // Cold again, it is not said again for this state directory: one line, not one per call.
    for entry in entries(&cache) {
        std::fs::remove_file(entry).unwrap();
    }
    let said = call("t-3");
    assert!(
        !said.contains(approval_host::plugin::cache::COLD_CACHE),
        "{said}"
    );
    assert_eq!(entries(&cache).len(), 2);
}
