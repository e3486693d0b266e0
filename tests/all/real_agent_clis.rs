//! The real agent CLIs, as a new user sets them up: Claude Code, Codex, Gemini CLI and Copilot
//! CLI from npm (`.ci/agent-clis` installs the pinned versions into `APPROVAL_HOST_AGENT_CLIS`),
//! each in a fresh home and a fresh git project, driven by a scripted model of our own
//! (`tests/agent-cli/model_*.py`). Each CLI runs in a network namespace of its own with only
//! loopback up, with its model server inside it, so nothing it does can leave the machine.
//!
//! For each CLI, after the book's set-up steps exactly (`init`, with its trust step; see
//! docs/claude-code.md and docs/codex-gemini-copilot.md): `doctor` passes; a rejected command never runs and the model reads the reason; an allowed call runs;
//! an undecided call does what the book says; a hook that cannot answer blocks; a call whose
//! before-tool hook was skipped is recorded by the after-tool hook as `approval/unasked`; the
//! session's log and `verify --all` agree with what happened. Without the trust step, `doctor`
//! fails naming it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

/// Where `.ci/agent-clis` installed the CLIs.
const CLIS_ENV: &str = "APPROVAL_HOST_AGENT_CLIS";

/// The model server's port inside each CLI's own network namespace (nothing else listens
/// there).
const PORT: u16 = 18080;

/// The reason the project's reject rule gives, which the model must read.
const REASON: &str = "deleting files is not allowed in this project";

/// How long one CLI run may take before it is killed.
const RUN_LIMIT: Duration = Duration::from_secs(150);

fn clis_dir() -> PathBuf {
    let dir = std::env::var_os(CLIS_ENV)
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/agent-clis"));
    assert!(
        dir.join("claude-code/.installed").is_file(),
        "{CLIS_ENV} ({}) holds no agent CLIs: run .ci/agent-clis first (it installs them from npm)",
        dir.display()
    );
    dir
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cli {
    ClaudeCode,
    Codex,
    Gemini,
    Copilot,
}

impl Cli {
    fn name(self) -> &'static str {
        match self {
            Cli::ClaudeCode => "claude-code",
            Cli::Codex => "codex",
            Cli::Gemini => "gemini",
            Cli::Copilot => "copilot",
        }
    }

    fn program(self) -> &'static str {
        match self {
            Cli::ClaudeCode => "claude",
            other => other.name(),
        }
    }

    fn bin_dir(self) -> PathBuf {
        clis_dir().join(self.name()).join("node_modules/.bin")
    }

    fn model(self) -> &'static str {
        match self {
            Cli::ClaudeCode | Cli::Copilot => "model_anthropic.py",
            Cli::Codex => "model_openai.py",
            Cli::Gemini => "model_gemini.py",
        }
    }

    /// The script turn that runs `command` in this CLI's shell tool.
    fn shell_turn(self, command: &str) -> Value {
        match self {
            Cli::ClaudeCode => {
                json!({"tool": {"name": "Bash", "input": {"command": command, "description": "run it"}}})
            }
            Cli::Copilot => {
                json!({"tool": {"name": "bash", "input": {"command": command, "description": "run it"}}})
            }
            Cli::Codex | Cli::Gemini => {
                json!({"tool": {"name": "shell", "input": {"command": ["bash", "-lc", command]}}})
            }
        }
    }

    /// The agent id its questions are recorded under.
    fn agent(self) -> &'static str {
        match self {
            Cli::ClaudeCode => "claude-code",
            Cli::Codex => "codex",
            Cli::Gemini => "gemini-cli",
            Cli::Copilot => "copilot-cli",
        }
    }
}

/// A fresh home and project for one CLI.
struct Scene {
    cli: Cli,
    _dir: tempfile::TempDir,
    root: PathBuf,
    home: PathBuf,
    project: PathBuf,
    runs: usize,
    /// Tools besides the shell a headless run lets the model call (Claude Code's
    /// `--allowedTools`).
    allowed: Vec<String>,
}

impl Scene {
    fn new(cli: Cli) -> Scene {
        let (dir, home, project) = crate::support::home_and_git_project();
        let root = dir.path().to_path_buf();
        let scene = Scene {
            cli,
            _dir: dir,
            root,
            home,
            project,
            runs: 0,
            allowed: Vec::new(),
        };
        scene.configure();
        scene
    }

    /// The CLI's own settings for running offline against the scripted model: its model
    /// endpoint, and its telemetry and update checks off.
    fn configure(&self) {
        let write = |path: PathBuf, text: String| {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        };
        match self.cli {
            Cli::ClaudeCode | Cli::Copilot => {}
            Cli::Codex => write(
                self.home.join(".codex/config.toml"),
                format!(
                    "model = \"scripted\"\nmodel_provider = \"scripted\"\n\
                     check_for_update_on_startup = false\n\n\
                     [model_providers.scripted]\nname = \"scripted\"\n\
                     base_url = \"http://127.0.0.1:{PORT}/v1\"\nenv_key = \"SCRIPTED_API_KEY\"\n\
                     wire_api = \"responses\"\nrequest_max_retries = 0\nstream_max_retries = 0\n\
                     supports_websockets = false\n\n\
                     [analytics]\nenabled = false\n\n[feedback]\nenabled = false\n\n\
                     [otel]\nexporter = \"none\"\n"
                ),
            ),
            Cli::Gemini => write(
                self.home.join(".gemini/settings.json"),
                json!({
                    "security": {"auth": {"selectedType": "gemini-api-key"}},
                    "general": {"enableAutoUpdate": false, "enableAutoUpdateNotification": false},
                    "privacy": {"usageStatisticsEnabled": false},
                    "telemetry": {"enabled": false}
                })
                .to_string(),
            ),
        }
    }

    /// PATH with the CLI first (init --trust and doctor ask Codex itself).
    fn path(&self) -> std::ffi::OsString {
        let mut dirs = vec![self.cli.bin_dir()];
        dirs.extend(std::env::split_paths(
            &std::env::var_os("PATH").unwrap_or_default(),
        ));
        std::env::join_paths(dirs).unwrap()
    }

    /// The environment every command of this scene runs with.
    fn env(&self, command: &mut Command) {
        command
            .env_clear()
            .env("PATH", self.path())
            .env("HOME", &self.home)
            .env("CODEX_HOME", self.home.join(".codex"))
            .env("LANG", "C.UTF-8")
            .env("TERM", "dumb")
            .current_dir(&self.project);
        // Copilot unpacks its runtime once per cache: one cache for every scene.
        command.env("COPILOT_CACHE_HOME", clis_dir().join("copilot-cache"));
    }

    /// `approval-host ARGS…` in the project, as the person types it.
    fn host(&self, args: &[&str], extra_env: &[(&str, &str)]) -> Output {
        let mut command = Command::new(env!("CARGO_BIN_EXE_approval-host"));
        self.env(&mut command);
        command.args(args);
        for (k, v) in extra_env {
            command.env(k, v);
        }
        command.output().unwrap()
    }

    fn host_ok(&self, args: &[&str], extra_env: &[(&str, &str)]) -> String {
        let out = self.host(args, extra_env);
        assert!(
            out.status.success(),
            "{args:?}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The book's set-up: `init` (with the CLI's trust step where one exists as a command), a
    /// reject rule and an allow rule added in the project.
    fn set_up(&self) {
        match self.cli {
            Cli::Codex => self.host_ok(&["init", "codex", "--project", ".", "--trust"], &[]),
            // Copilot CLI runs the user's hooks in every folder, trusted or not.
            Cli::Copilot => self.host_ok(&["init", "copilot", "--user"], &[]),
            cli => self.host_ok(&["init", cli.name(), "--project", "."], &[]),
        };
        self.host_ok(
            &[
                "rules",
                "add",
                "Bash(rm:*)",
                "--effect",
                "reject",
                "--reason",
                REASON,
            ],
            &[],
        );
        self.host_ok(&["rules", "add", "Bash(touch allowed.txt)"], &[]);
    }

    /// The environment a person running this CLI headless gives it (beyond the model's).
    fn run_env(&self) -> Vec<(&'static str, String)> {
        let url = format!("http://127.0.0.1:{PORT}");
        match self.cli {
            Cli::ClaudeCode => vec![
                ("ANTHROPIC_BASE_URL", url),
                ("ANTHROPIC_API_KEY", "sk-ant-scripted".to_owned()),
                ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".to_owned()),
                ("DISABLE_AUTOUPDATER", "1".to_owned()),
                ("DISABLE_TELEMETRY", "1".to_owned()),
                ("DISABLE_ERROR_REPORTING", "1".to_owned()),
            ],
            Cli::Codex => vec![("SCRIPTED_API_KEY", "scripted".to_owned())],
            Cli::Gemini => vec![
                ("GEMINI_API_KEY", "scripted".to_owned()),
                ("GOOGLE_GEMINI_BASE_URL", url),
                // The README's trust step for headless runs.
                ("GEMINI_CLI_TRUST_WORKSPACE", "true".to_owned()),
            ],
            Cli::Copilot => vec![
                ("COPILOT_PROVIDER_BASE_URL", url),
                ("COPILOT_PROVIDER_TYPE", "anthropic".to_owned()),
                ("COPILOT_PROVIDER_API_KEY", "sk-ant-scripted".to_owned()),
                ("COPILOT_MODEL", "claude-sonnet-4.5".to_owned()),
                ("COPILOT_OFFLINE", "true".to_owned()),
                ("COPILOT_AUTO_UPDATE", "false".to_owned()),
            ],
        }
    }

    /// The CLI's headless command line.
    fn run_args(&self, logs: &Path) -> Vec<String> {
        let prompt = "do the task".to_owned();
        match self.cli {
            Cli::ClaudeCode => vec![
                "-p".into(),
                prompt,
                "--output-format".into(),
                "json".into(),
                "--model".into(),
                "claude-sonnet-4-5".into(),
                "--allowedTools".into(),
                std::iter::once("Bash".to_owned())
                    .chain(self.allowed.iter().cloned())
                    .collect::<Vec<_>>()
                    .join(","),
            ],
            Cli::Codex => vec!["exec".into(), "-s".into(), "workspace-write".into(), prompt],
            Cli::Gemini => vec!["--yolo".into(), "-p".into(), prompt],
            Cli::Copilot => vec![
                "-p".into(),
                prompt,
                "--allow-all-tools".into(),
                "--no-auto-update".into(),
                "--disable-client-telemetry".into(),
                "--output-format".into(),
                "json".into(),
                "--log-dir".into(),
                logs.display().to_string(),
            ],
        }
    }

    /// Runs the CLI once, its model answering with `turns` then "done", in a network namespace
    /// with only loopback; returns the CLI's output and every request the model saw.
    fn run(&mut self, turns: Vec<Value>, limit: Duration) -> Run {
        self.runs += 1;
        let dir = self.root.join(format!("run-{}", self.runs));
        std::fs::create_dir_all(&dir).unwrap();
        let mut turns = turns;
        turns.push(json!({"text": "done"}));
        std::fs::write(dir.join("script.json"), json!({"turns": turns}).to_string()).unwrap();
        let model = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/agent-cli")
            .join(self.cli.model());
        let inner = r#"
set -u
ip link set lo up
python3 "$MODEL_PY" --script "$RUN_DIR/script.json" --log "$RUN_DIR/requests.jsonl" \
  --port-file "$RUN_DIR/port" --port "$MODEL_PORT" 2>"$RUN_DIR/model.err" &
model=$!
i=0
while [ ! -s "$RUN_DIR/port" ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done
timeout -k 5 "$RUN_LIMIT" "$@" </dev/null >"$RUN_DIR/stdout" 2>"$RUN_DIR/stderr"
status=$?
kill $model 2>/dev/null
# The namespace's interfaces: only loopback, so nothing the CLI did could leave the machine.
ip -o link show >"$RUN_DIR/links"
exit $status
"#;
        let mut command = Command::new("unshare");
        self.env(&mut command);
        command
            .args(["-n", "sh", "-c", inner, "sh", self.cli.program()])
            .args(self.run_args(&dir.join("logs")))
            .env("MODEL_PY", model)
            .env("RUN_DIR", &dir)
            .env("MODEL_PORT", PORT.to_string())
            .env("RUN_LIMIT", limit.as_secs().to_string())
            .stdin(Stdio::null());
        for (k, v) in self.run_env() {
            command.env(k, v);
        }
        let status = command.status().unwrap();
        let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap_or_default();
        Run {
            status: status.code(),
            stdout: read("stdout"),
            stderr: read("stderr"),
            requests: read("requests.jsonl"),
            links: read("links"),
        }
    }

    /// Every record of every session of this project, as `export` prints them.
    fn records(&self) -> Vec<(String, String, Value)> {
        // No state flag: in a project `init` set up, the hooks' own state is read.
        self.records_in(&[])
    }

    /// [`Scene::records`] of the state `flags` name.
    fn records_in(&self, flags: &[&str]) -> Vec<(String, String, Value)> {
        let mut words = flags.to_vec();
        words.push("export");
        let out = self.host_ok(&words, &[]);
        out.lines()
            .map(|l| {
                let v: Value = serde_json::from_str(l).unwrap();
                let record = &v["record"];
                (
                    v["session"].as_str().unwrap().to_owned(),
                    record["type"].as_str().unwrap().to_owned(),
                    record["data"].clone(),
                )
            })
            .filter(|(session, _, _)| !session.starts_with("rules-"))
            .collect()
    }

    /// The outcome of the question about a shell `command`, if one was asked.
    fn outcome_of(&self, command: &str) -> Option<String> {
        let records = self.records();
        let call = records.iter().find(|(_, t, d)| {
            t == "tool/call" && d["name"] == "Bash" && d["arguments"]["command"] == command
        })?;
        // Call ids repeat across runs (each run's model numbers its calls from 1): a call is
        // its session's.
        let (session, call_id) = (&call.0, call.2["callId"].clone());
        let asked = records
            .iter()
            .find(|(s, t, d)| s == session && t == "approval/asked" && d["callId"] == call_id)?;
        assert_eq!(asked.2["agent"], self.cli.agent());
        let id = asked.2["id"].clone();
        records
            .iter()
            .find(|(s, t, d)| s == session && t == "approval/decided" && d["id"] == id)
            .map(|(_, _, d)| d["outcome"].as_str().unwrap().to_owned())
    }

    fn verify_all(&self) -> Output {
        self.host(&["verify", "--all"], &[])
    }

    /// The CLI's settings file `init` wrote the hooks into.
    fn hook_file(&self) -> PathBuf {
        match self.cli {
            Cli::ClaudeCode => self.project.join(".claude/settings.json"),
            Cli::Codex => self.project.join(".codex/hooks.json"),
            Cli::Gemini => self.project.join(".gemini/settings.json"),
            Cli::Copilot => self.home.join(".copilot/hooks/approval-host.json"),
        }
    }

    /// The deployment `init` wrote.
    fn deployment(&self) -> PathBuf {
        let base = match self.cli {
            Cli::Copilot => self.home.clone(),
            _ => self.project.clone(),
        };
        base.join(".approval-host")
            .join(format!("{}.toml", self.cli.name()))
    }
}

struct Run {
    status: Option<i32>,
    stdout: String,
    stderr: String,
    requests: String,
    links: String,
}

impl Run {
    fn show(&self) -> String {
        format!(
            "status {:?}\nstdout: {}\nstderr: {}",
            self.status,
            tail(&self.stdout),
            tail(&self.stderr)
        )
    }

    /// The CLI ran where only loopback exists.
    fn assert_stayed_local(&self) {
        let links: Vec<&str> = self.links.lines().collect();
        assert_eq!(links.len(), 1, "{links:?}");
        assert!(links[0].contains(": lo:"), "{links:?}");
    }
}

fn tail(s: &str) -> &str {
    let start = s.len().saturating_sub(3000);
    let mut start = start;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

/// The whole README path for one CLI.
fn guards(cli: Cli) {
    let mut scene = Scene::new(cli);
    scene.set_up();
    let trust: &[(&str, &str)] = if cli == Cli::Gemini {
        &[("GEMINI_CLI_TRUST_WORKSPACE", "true")]
    } else {
        &[]
    };
    let doctor = scene.host(&["doctor", "--cli", cli.name(), "--project", "."], trust);
    assert_eq!(
        doctor.status.code(),
        Some(0),
        "{cli:?} doctor: {}",
        String::from_utf8_lossy(&doctor.stdout)
    );

    // A rejected command never runs, and the model reads the reason; an allowed one runs.
    std::fs::write(scene.project.join("x"), "keep\n").unwrap();
    let run = scene.run(
        vec![
            cli.shell_turn("rm -r x"),
            cli.shell_turn("touch allowed.txt"),
        ],
        RUN_LIMIT,
    );
    run.assert_stayed_local();
    assert!(
        scene.project.join("x").exists(),
        "{cli:?}: x was removed\n{}",
        run.show()
    );
    assert!(
        run.requests.contains(REASON),
        "{cli:?}: the model never read the reason\n{}",
        run.show()
    );
    assert!(
        scene.project.join("allowed.txt").exists(),
        "{cli:?}: the allowed call did not run\n{}",
        run.show()
    );
    assert_eq!(
        scene.outcome_of("rm -r x").as_deref(),
        Some("rejected"),
        "{cli:?}"
    );
    // Codex's PreToolUse cannot grant: the rule's allow leaves the call to Codex's own flow.
    assert_eq!(
        scene.outcome_of("touch allowed.txt").as_deref(),
        Some("allowed-once"),
        "{cli:?}"
    );
    let verify = scene.verify_all();
    assert_eq!(
        verify.status.code(),
        Some(0),
        "{cli:?}: {}",
        String::from_utf8_lossy(&verify.stdout)
    );

    // An undecided call does what the README says.
    let run = scene.run(
        vec![cli.shell_turn("touch undecided.txt")],
        match cli {
            // Gemini CLI asks for a confirmation a headless run cannot give, and waits.
            Cli::Gemini => Duration::from_secs(30),
            _ => RUN_LIMIT,
        },
    );
    let ran = scene.project.join("undecided.txt").exists();
    match cli {
        // `-p`: Claude Code and Copilot CLI cannot ask anyone, so an `ask` refuses the call.
        Cli::ClaudeCode | Cli::Copilot => assert!(!ran, "{cli:?}\n{}", run.show()),
        // `codex exec` runs with approval "never": nobody is asked, the call runs.
        Cli::Codex => assert!(ran, "{cli:?}\n{}", run.show()),
        Cli::Gemini => {
            assert!(!ran, "{cli:?}\n{}", run.show());
            assert_eq!(
                run.status,
                Some(124),
                "{cli:?}: waited until killed\n{}",
                run.show()
            );
        }
    }
    assert_eq!(
        scene.outcome_of("touch undecided.txt").as_deref(),
        Some("unavailable"),
        "{cli:?}"
    );

    // A hook that cannot answer blocks: the deployment no longer parses.
    let deployment = scene.deployment();
    let good = std::fs::read_to_string(&deployment).unwrap();
    std::fs::write(&deployment, format!("{good}\n[broken\n")).unwrap();
    let run = scene.run(vec![cli.shell_turn("touch broken.txt")], RUN_LIMIT);
    assert!(
        !scene.project.join("broken.txt").exists(),
        "{cli:?}: a hook that cannot answer let the call run\n{}",
        run.show()
    );
    std::fs::write(&deployment, good).unwrap();

    // The warm path, as the README gives it (state where --project-state reads it, the socket
    // outside the project): a running serve answers, the in-process fallback when it is gone,
    // saying so in the reason. Codex reviews the exact hook command: after the edit, `init
    // codex --trust` again.
    warm_path(&mut scene);

    // The before-tool hook skipped (taken out of the settings), the after-tool hook still
    // there: the call runs, and the log says it ran unasked; verify reports it (exit 3).
    let file = scene.hook_file();
    let mut settings: Value =
        serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    let before = match cli {
        Cli::ClaudeCode | Cli::Codex => "PreToolUse",
        Cli::Gemini => "BeforeTool",
        Cli::Copilot => "preToolUse",
    };
    settings["hooks"].as_object_mut().unwrap().remove(before);
    std::fs::write(&file, settings.to_string()).unwrap();
    let run = scene.run(vec![cli.shell_turn("touch skipped.txt")], RUN_LIMIT);
    assert!(
        scene.project.join("skipped.txt").exists(),
        "{cli:?}\n{}",
        run.show()
    );
    let unasked: Vec<Value> = scene
        .records()
        .into_iter()
        .filter(|(_, t, _)| t == "approval/unasked")
        .map(|(_, _, d)| d)
        .collect();
    assert_eq!(unasked.len(), 1, "{cli:?}: {unasked:?}\n{}", run.show());
    assert_eq!(unasked[0]["why"], "not-asked");
    assert_eq!(unasked[0]["arguments"]["command"], "touch skipped.txt");
    let verify = scene.verify_all();
    let text = String::from_utf8_lossy(&verify.stdout);
    assert_eq!(verify.status.code(), Some(3), "{cli:?}: {text}");
    assert!(text.contains("UNASKED: "), "{cli:?}: {text}");
}

/// A running `serve` stopped when dropped.
struct Serve(std::process::Child);

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The hook commands rewritten for the warm path (`--socket S --fallback in-process`), a server
/// started, a rejected call answered by it; then the server gone, the same call answered in
/// process, the reason saying why.
fn warm_path(scene: &mut Scene) {
    let cli = scene.cli;
    let socket = scene.root.join("serve.sock");
    let file = scene.hook_file();
    let text = std::fs::read_to_string(&file).unwrap();
    let flag = format!(" hook {} --config ", cli.name());
    let warm = format!(
        " hook {} --socket {} --fallback in-process --config ",
        cli.name(),
        socket.display()
    );
    assert!(text.contains(&flag), "{text}");
    std::fs::write(&file, text.replace(&flag, &warm)).unwrap();
    // Codex runs only the hook commands a person reviewed: the edited ones are reviewed anew.
    fn review(scene: &Scene) {
        if scene.cli == Cli::Codex {
            let out = scene.host_ok(&["init", "codex", "--project", ".", "--trust"], &[]);
            assert!(out.contains("reviewed   3 hooks"), "{out}");
            assert!(out.contains("every hook will run"), "{out}");
        }
    }
    review(scene);
    let state: Vec<String> = match cli {
        Cli::Copilot => vec![
            "--state-dir".into(),
            scene.home.join(".approval-host").display().to_string(),
        ],
        _ => vec!["--project-state".into(), ".".into()],
    };
    let mut command = Command::new(env!("CARGO_BIN_EXE_approval-host"));
    scene.env(&mut command);
    command
        .args(&state)
        .args(["serve", "--config"])
        .arg(scene.deployment())
        .arg("--socket")
        .arg(&socket)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let server = Serve(command.spawn().unwrap());
    let started = std::time::Instant::now();
    while !socket.exists() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "serve did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::fs::write(scene.project.join("warm"), "keep\n").unwrap();
    let run = scene.run(vec![cli.shell_turn("rm -r warm")], RUN_LIMIT);
    assert!(
        scene.project.join("warm").exists(),
        "{cli:?}\n{}",
        run.show()
    );
    assert!(run.requests.contains(REASON), "{cli:?}\n{}", run.show());
    assert!(
        !run.requests.contains("answered in process"),
        "{cli:?}\n{}",
        run.show()
    );
    assert_eq!(scene.outcome_of("rm -r warm").as_deref(), Some("rejected"));
    drop(server);
    let _ = std::fs::remove_file(&socket);
    let run = scene.run(vec![cli.shell_turn("rm -r warm ")], RUN_LIMIT);
    assert!(
        scene.project.join("warm").exists(),
        "{cli:?}\n{}",
        run.show()
    );
    assert!(
        run.requests
            .contains("answered in process: approval-host serve at"),
        "{cli:?}: the fallback is said in the reason\n{}",
        run.show()
    );
    std::fs::write(
        &file,
        std::fs::read_to_string(&file)
            .unwrap()
            .replace(&warm, &flag),
    )
    .unwrap();
    review(scene);
}

#[test]
fn claude_code_is_guarded_after_the_readme_set_up() {
    guards(Cli::ClaudeCode);
}

#[test]
fn codex_is_guarded_after_the_readme_set_up() {
    guards(Cli::Codex);
}

#[test]
fn gemini_cli_is_guarded_after_the_readme_set_up() {
    guards(Cli::Gemini);
}

#[test]
fn copilot_cli_is_guarded_after_the_readme_set_up() {
    guards(Cli::Copilot);
}

/// The README's five-minute tour, as its console block is written: `init claude-code`, Claude
/// Code trying `git push --force origin main` (the scripted model's call), `log` listing the
/// session and `log <session>` showing the question rejected by `deny-commands` with its reason.
/// Each command's output is matched against the README's (stdout; `...` and `[..]` elide).
#[test]
fn claude_code_follows_the_readme_tour() {
    const TOUR: &str = "real_agent_clis::claude_code_follows_the_readme_tour";
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"))
            .unwrap();
    let page = crate::docs_examples::read_page(&readme);
    let block = page
        .blocks
        .iter()
        .find(|b| b.attrs.get("run-by").is_some_and(|t| t == TOUR))
        .expect("the README's tour names this test");
    let mut scene = Scene::new(Cli::ClaudeCode);
    let mut session = None;
    let mut steps = 0;
    for step in crate::docs_examples::console_steps(&block.text) {
        let stdout = if step.command.starts_with("claude -p ") {
            let run = scene.run(
                vec![Cli::ClaudeCode.shell_turn("git push --force origin main")],
                RUN_LIMIT,
            );
            run.assert_stayed_local();
            assert!(
                run.requests
                    .contains("which this deployment does not allow"),
                "the model never read the reason\n{}",
                run.show()
            );
            run.stdout
        } else {
            let command = step
                .command
                .replace("<session>", session.as_deref().unwrap_or("<session>"));
            let words: Vec<&str> = command.split_whitespace().collect();
            assert_eq!(words[0], "approval-host", "a tour step: {command}");
            let out = scene.host(&words[1..], &[]);
            assert!(
                out.status.success(),
                "{command}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
            if words[1..] == ["log"] {
                session = stdout
                    .lines()
                    .nth(1)
                    .and_then(|l| l.split_whitespace().next())
                    .map(str::to_owned);
            }
            stdout
        };
        // Paths are not normalised: that would turn the `\` of a JSON escape into `/`.
        let matched = snapbox::Assert::new().normalize_paths(false).try_eq(
            None,
            snapbox::Data::text(stdout.clone()),
            snapbox::Data::text(step.expected.clone()),
        );
        assert!(
            matched.is_ok(),
            "`{}` printed\n{stdout}\nwhere the README shows\n{}",
            step.command,
            step.expected
        );
        steps += 1;
    }
    assert_eq!(steps, 4, "the tour's four steps ran");
    assert_eq!(
        scene.outcome_of("git push --force origin main").as_deref(),
        Some("rejected")
    );
}

#[test]
fn doctor_fails_on_a_set_up_missing_its_trust_step() {
    // Codex: set up without --trust. Codex itself says the hooks are not loaded or reviewed.
    let scene = Scene::new(Cli::Codex);
    scene.host_ok(&["init", "codex", "--project", "."], &[]);
    let out = scene.host(&["doctor", "--cli", "codex", "--project", "."], &[]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("FAIL  Codex does not load"), "{text}");
    assert!(text.contains("--trust"), "{text}");
    assert!(text.contains("NOT GATING"), "{text}");
    // Then trusted through Codex's own app-server: passes.
    scene.host_ok(&["init", "codex", "--project", ".", "--trust"], &[]);
    scene.host_ok(&["doctor", "--cli", "codex", "--project", "."], &[]);

    // Gemini CLI: a project's hooks in a folder nobody trusted.
    let scene = Scene::new(Cli::Gemini);
    scene.host_ok(&["init", "gemini", "--project", "."], &[]);
    let out = scene.host(&["doctor", "--project", "."], &[]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("is not a trusted folder"), "{text}");
    assert!(text.contains("GEMINI_CLI_TRUST_WORKSPACE=true"), "{text}");

    // Copilot CLI: the repository's hooks in a folder nobody trusted.
    let scene = Scene::new(Cli::Copilot);
    scene.host_ok(&["init", "copilot", "--project", "."], &[]);
    let out = scene.host(&["doctor", "--project", "."], &[]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("does not load .github/hooks/"), "{text}");

    // Claude Code: a project setting that turns every hook off.
    let scene = Scene::new(Cli::ClaudeCode);
    scene.host_ok(&["init", "claude-code", "--project", "."], &[]);
    scene.host_ok(&["doctor", "--project", "."], &[]);
    let settings = scene.project.join(".claude/settings.local.json");
    std::fs::write(&settings, "{\"disableAllHooks\": true}").unwrap();
    let out = scene.host(&["doctor", "--project", "."], &[]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("sets disableAllHooks"), "{text}");
}

/// `init claude-code --mcp` with the real Claude Code: the project's MCP server (the notes server
/// of the gateway's tests) starts behind the gateway, the model's call of an allowed tool reaches
/// it and its answer comes back, a rejected call never reaches it while the model reads the
/// reason, and a tool no call of which could be allowed is not listed at all.
#[test]
fn claude_code_starts_its_mcp_server_behind_the_gateway_after_init_mcp() {
    let mut scene = Scene::new(Cli::ClaudeCode);
    let events = scene.root.join("notes-events.jsonl");
    let server = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/mcp/notes_server.py");
    std::fs::write(
        scene.project.join(".mcp.json"),
        json!({"mcpServers": {"notes": {
            "command": "python3",
            "args": [server.display().to_string()],
            "env": {"NOTES_EVENTS": events.display().to_string()}
        }}})
        .to_string(),
    )
    .unwrap();
    // The person approves the project's servers, as Claude Code asks them to.
    std::fs::create_dir_all(scene.home.join(".claude")).unwrap();
    std::fs::write(
        scene.home.join(".claude/settings.json"),
        json!({"enableAllProjectMcpServers": true}).to_string(),
    )
    .unwrap();
    let out = scene.host_ok(&["init", "claude-code", "--project", ".", "--mcp"], &[]);
    assert!(out.contains("gateway    notes"), "{out}");
    // Without the hooks nothing keeps the agent out of .mcp.json, and init says so.
    assert!(
        out.contains("NOT PROTECTED YET: Claude Code's own tools are not gated"),
        "{out}"
    );
    // The rules go where the gateway reads them: its deployment and state, as .mcp.json names
    // them (a project set up with the gateway alone is not found by itself).
    let written: Value =
        serde_json::from_str(&std::fs::read_to_string(scene.project.join(".mcp.json")).unwrap())
            .unwrap();
    let (state, deployment) = gateway_flags(&written["mcpServers"]["notes"]["args"]);
    let reason = "nothing under /etc is read here";
    let rules = |rule: &[&str]| {
        let mut words = vec![
            "--project-state",
            &state,
            "rules",
            "add",
            "--config",
            &deployment,
        ];
        words.extend_from_slice(rule);
        scene.host_ok(&words, &[]);
    };
    rules(&["mcp__notes__read_note"]);
    rules(&[
        "mcp__notes__stat_file(//etc/**)",
        "--effect",
        "reject",
        "--reason",
        reason,
    ]);
    rules(&["mcp__notes__delete_note", "--effect", "reject"]);
    scene.allowed = ["read_note", "stat_file", "delete_note"]
        .map(|t| format!("mcp__notes__{t}"))
        .to_vec();
    let run = scene.run(
        vec![
            json!({"tool": {"name": "mcp__notes__read_note", "input": {"name": "welcome"}}}),
            json!({"tool": {"name": "mcp__notes__stat_file", "input": {"path": "/etc/passwd"}}}),
            json!({"tool": {"name": "mcp__notes__delete_note", "input": {"name": "welcome"}}}),
        ],
        RUN_LIMIT,
    );
    run.assert_stayed_local();
    assert!(
        run.requests.contains("hello from the notes server"),
        "the allowed call's answer never reached the model\n{}\n{}",
        run.show(),
        results(&run.requests)
    );
    assert!(
        run.requests.contains(reason),
        "the model never read the reason\n{}\n{}",
        run.show(),
        results(&run.requests)
    );
    // A tool every call of which a rule refuses is not even listed to the model.
    assert!(
        run.requests
            .contains("No such tool available: mcp__notes__delete_note"),
        "{}",
        results(&run.requests)
    );
    let reached = reached(&events);
    assert_eq!(reached, ["read_note"], "{}", run.show());
    // The gateway asked both, in its own session of the project's state.
    let decided = gateway_decisions(&scene, &state);
    assert_eq!(
        decided,
        [
            (
                "mcp__notes__read_note".to_owned(),
                "allowed-once".to_owned()
            ),
            ("mcp__notes__stat_file".to_owned(), "rejected".to_owned()),
        ]
    );
}

/// Gemini CLI, after `init gemini --project . --mcp`, starts the project's notes server behind
/// the gateway (it names its tools `mcp_<server>_<tool>`): an allowed call reaches the server
/// and its answer the model, a rejected one never reaches it while the model reads the reason,
/// and a tool no call of which could be allowed is not offered to the model.
#[test]
fn gemini_cli_starts_its_mcp_server_behind_the_gateway_after_init_mcp() {
    let mut scene = Scene::new(Cli::Gemini);
    let events = scene.root.join("notes-events.jsonl");
    let server = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/mcp/notes_server.py");
    std::fs::create_dir_all(scene.project.join(".gemini")).unwrap();
    std::fs::write(
        scene.project.join(".gemini/settings.json"),
        json!({"mcpServers": {"notes": {
            "command": "python3",
            "args": [server.display().to_string()],
            "env": {"NOTES_EVENTS": events.display().to_string()}
        }}})
        .to_string(),
    )
    .unwrap();
    let out = scene.host_ok(&["init", "gemini", "--project", ".", "--mcp"], &[]);
    assert!(out.contains("gateway    notes"), "{out}");
    let written: Value = serde_json::from_str(
        &std::fs::read_to_string(scene.project.join(".gemini/settings.json")).unwrap(),
    )
    .unwrap();
    let (state, deployment) = gateway_flags(&written["mcpServers"]["notes"]["args"]);
    let reason = "nothing under /etc is read here";
    for rule in [
        &["mcp__notes__read_note"][..],
        &[
            "mcp__notes__stat_file(//etc/**)",
            "--effect",
            "reject",
            "--reason",
            reason,
        ],
        &["mcp__notes__delete_note", "--effect", "reject"],
    ] {
        let mut words = vec![
            "--project-state",
            &state,
            "rules",
            "add",
            "--config",
            &deployment,
        ];
        words.extend_from_slice(rule);
        scene.host_ok(&words, &[]);
    }
    let run = scene.run(
        vec![
            json!({"tool": {"name": "mcp_notes_read_note", "input": {"name": "welcome"}}}),
            json!({"tool": {"name": "mcp_notes_stat_file", "input": {"path": "/etc/passwd"}}}),
        ],
        RUN_LIMIT,
    );
    run.assert_stayed_local();
    let offered: Vec<String> = run
        .requests
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .flat_map(|body| {
            body["tools"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|t| {
                    t["functionDeclarations"]
                        .as_array()
                        .cloned()
                        .unwrap_or_default()
                })
                .filter_map(|d| d["name"].as_str().map(str::to_owned))
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(
        offered.iter().any(|n| n == "mcp_notes_read_note"),
        "the gateway's tools were not offered to the model: {offered:?}\n{}",
        run.show()
    );
    // A tool every call of which a rule refuses is not even offered.
    assert!(
        !offered.iter().any(|n| n.contains("delete_note")),
        "{offered:?}"
    );
    assert!(
        run.requests.contains("hello from the notes server"),
        "the allowed call's answer never reached the model\n{}",
        run.show()
    );
    assert!(
        run.requests.contains(reason),
        "the model never read the reason\n{}",
        run.show()
    );
    let reached = reached(&events);
    assert_eq!(reached, ["read_note"], "{}", run.show());
    assert_eq!(
        gateway_decisions(&scene, &state),
        [
            (
                "mcp__notes__read_note".to_owned(),
                "allowed-once".to_owned()
            ),
            ("mcp__notes__stat_file".to_owned(), "rejected".to_owned()),
        ]
    );
}

/// Codex, set up as the README says (`init codex --project . --trust`, then `--mcp`), starts the
/// project's notes server behind the gateway and offers its tools in the namespace
/// `mcp__notes`: an allowed call reaches the server and its answer the model, a rejected one
/// never reaches it while the model reads the reason (here Codex's own hook, set up first as the
/// README says, refuses it before the gateway could). Codex asks its own person before an MCP
/// call unless the server's entry says `default_tools_approval_mode = "approve"`; with the
/// gateway deciding, the person's entry says so.
#[test]
fn codex_starts_its_mcp_server_behind_the_gateway_after_init_mcp() {
    let mut scene = Scene::new(Cli::Codex);
    let events = scene.root.join("notes-events.jsonl");
    let server = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/mcp/notes_server.py");
    std::fs::create_dir_all(scene.project.join(".codex")).unwrap();
    std::fs::write(
        scene.project.join(".codex/config.toml"),
        format!(
            "[mcp_servers.notes]\ncommand = \"python3\"\nargs = [{:?}]\ndefault_tools_approval_mode = \"approve\"\n\n[mcp_servers.notes.env]\nNOTES_EVENTS = {:?}\n",
            server.display().to_string(),
            events.display().to_string()
        ),
    )
    .unwrap();
    scene.host_ok(&["init", "codex", "--project", ".", "--trust"], &[]);
    let out = scene.host_ok(&["init", "codex", "--project", ".", "--mcp"], &[]);
    assert!(out.contains("gateway    notes"), "{out}");
    assert!(!out.contains("NOT PROTECTED YET"), "{out}");
    let written: toml::Table = std::fs::read_to_string(scene.project.join(".codex/config.toml"))
        .unwrap()
        .parse()
        .unwrap();
    let args = serde_json::to_value(&written["mcp_servers"]["notes"]["args"]).unwrap();
    let (state, deployment) = gateway_flags(&args);
    let reason = "nothing under /etc is read here";
    for rule in [
        &["mcp__notes__read_note"][..],
        &[
            "mcp__notes__stat_file(//etc/**)",
            "--effect",
            "reject",
            "--reason",
            reason,
        ],
    ] {
        let mut words = vec![
            "--project-state",
            &state,
            "rules",
            "add",
            "--config",
            &deployment,
        ];
        words.extend_from_slice(rule);
        scene.host_ok(&words, &[]);
    }
    let run = scene.run(
        vec![
            json!({"tool": {"name": "mcp__notes__read_note", "input": {"name": "welcome"}}}),
            json!({"tool": {"name": "mcp__notes__stat_file", "input": {"path": "/etc/passwd"}}}),
        ],
        RUN_LIMIT,
    );
    run.assert_stayed_local();
    assert!(
        run.requests.contains("hello from the notes server"),
        "the allowed call's answer never reached the model\n{}",
        run.show()
    );
    assert!(
        run.requests.contains(reason),
        "the model never read the reason\n{}",
        run.show()
    );
    let reached = reached(&events);
    assert_eq!(reached, ["read_note"], "{}", run.show());
    // Codex's own hook asks first, in the same rules: it refused stat_file, which so never
    // reached the gateway; the call it let through the gateway asked again and allowed.
    let hook_asked: Vec<String> = scene
        .records_in(&["--project-state", &state])
        .into_iter()
        .filter(|(s, t, d)| {
            !s.starts_with("mcp-") && t == "approval/asked" && d["agent"] == Cli::Codex.agent()
        })
        .map(|(_, _, d)| d["toolName"].as_str().unwrap().to_owned())
        .collect();
    assert!(
        hook_asked.iter().any(|t| t == "mcp__notes__stat_file"),
        "{hook_asked:?}"
    );
    assert_eq!(
        gateway_decisions(&scene, &state),
        [(
            "mcp__notes__read_note".to_owned(),
            "allowed-once".to_owned()
        )]
    );
}

/// Copilot CLI, after `init copilot --user --mcp`, starts the user's notes server behind the
/// gateway (it names its tools `<server>-<tool>`): an allowed call reaches the server and its
/// answer the model, a rejected one never reaches it while the model reads the reason.
#[test]
fn copilot_cli_starts_its_mcp_server_behind_the_gateway_after_init_mcp() {
    let mut scene = Scene::new(Cli::Copilot);
    let events = scene.root.join("notes-events.jsonl");
    let server = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/mcp/notes_server.py");
    std::fs::create_dir_all(scene.home.join(".copilot")).unwrap();
    std::fs::write(
        scene.home.join(".copilot/mcp-config.json"),
        json!({"mcpServers": {"notes": {
            "type": "local",
            "command": "python3",
            "args": [server.display().to_string()],
            "env": {"NOTES_EVENTS": events.display().to_string()},
            "tools": ["*"]
        }}})
        .to_string(),
    )
    .unwrap();
    let out = scene.host_ok(&["init", "copilot", "--user", "--mcp"], &[]);
    assert!(out.contains("gateway    notes"), "{out}");
    let written: Value = serde_json::from_str(
        &std::fs::read_to_string(scene.home.join(".copilot/mcp-config.json")).unwrap(),
    )
    .unwrap();
    // A user's set-up keeps its state in a directory of its own.
    let args: Vec<String> =
        serde_json::from_value(written["mcpServers"]["notes"]["args"].clone()).unwrap();
    let after = |flag: &str| {
        args.windows(2)
            .find(|w| w[0] == flag)
            .map(|w| w[1].clone())
            .unwrap_or_else(|| panic!("no {flag} in {args:?}"))
    };
    let (state, deployment) = (after("--state-dir"), after("--config"));
    let reason = "nothing under /etc is read here";
    for rule in [
        &["mcp__notes__read_note"][..],
        &[
            "mcp__notes__stat_file(//etc/**)",
            "--effect",
            "reject",
            "--reason",
            reason,
        ],
    ] {
        let mut words = vec![
            "--state-dir",
            &state,
            "rules",
            "add",
            "--config",
            &deployment,
        ];
        words.extend_from_slice(rule);
        scene.host_ok(&words, &[]);
    }
    let run = scene.run(
        vec![
            json!({"tool": {"name": "notes-read_note", "input": {"name": "welcome"}}}),
            json!({"tool": {"name": "notes-stat_file", "input": {"path": "/etc/passwd"}}}),
        ],
        RUN_LIMIT,
    );
    run.assert_stayed_local();
    assert!(
        run.requests.contains("hello from the notes server"),
        "the allowed call's answer never reached the model\n{}\n{}",
        run.show(),
        results(&run.requests)
    );
    assert!(
        run.requests.contains(reason),
        "the model never read the reason\n{}\n{}",
        run.show(),
        results(&run.requests)
    );
    let reached = reached(&events);
    assert_eq!(reached, ["read_note"], "{}", run.show());
    let records = scene.records_in(&["--state-dir", &state]);
    let asked: Vec<String> = records
        .iter()
        .filter(|(s, t, _)| s.starts_with("mcp-") && t == "approval/asked")
        .map(|(_, _, d)| d["toolName"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        asked,
        ["mcp__notes__read_note", "mcp__notes__stat_file"],
        "{records:?}"
    );
}

/// The events the notes server wrote to `events`, one per request that reached it.
fn reached(events: &Path) -> Vec<String> {
    std::fs::read_to_string(events)
        .unwrap_or_default()
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["event"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect()
}

/// The gateway's `--project-state` and `--config` in the arguments `init --mcp` wrote.
fn gateway_flags(args: &Value) -> (String, String) {
    let args: Vec<String> = serde_json::from_value(args.clone()).unwrap();
    let after = |flag: &str| {
        args.windows(2)
            .find(|w| w[0] == flag)
            .map(|w| w[1].clone())
            .unwrap_or_else(|| panic!("no {flag} in {args:?}"))
    };
    (after("--project-state"), after("--config"))
}

/// `(tool, outcome)` of each question the gateway asked, in its sessions of `state`.
fn gateway_decisions(scene: &Scene, state: &str) -> Vec<(String, String)> {
    let records = scene.records_in(&["--project-state", state]);
    records
        .iter()
        .filter(|(s, t, _)| s.starts_with("mcp-") && t == "approval/asked")
        .map(|(s, _, d)| {
            let id = d["id"].clone();
            let outcome = records
                .iter()
                .find(|(s2, t, d)| s2 == s && t == "approval/decided" && d["id"] == id)
                .map(|(_, _, d)| d["outcome"].as_str().unwrap().to_owned())
                .unwrap_or_default();
            (d["toolName"].as_str().unwrap().to_owned(), outcome)
        })
        .collect()
}

/// The tool results the model was sent, for a failure's message.
fn results(requests: &str) -> String {
    requests
        .match_indices("tool_result")
        .map(|(i, _)| &requests[i..(i + 400).min(requests.len())])
        .collect::<Vec<_>>()
        .join("\n---\n")
}
