//! `approval-host doctor`: will the hooks `init` installed really run? A hook in a settings file
//! protects nothing when the agent CLI does not load it: Codex runs only hooks of a trusted
//! project whose exact definition a person reviewed, Gemini CLI and Copilot CLI load a project's
//! hooks only in a folder a person trusted, and Claude Code skips every hook under
//! `disableAllHooks` (or all but managed ones under `allowManagedHooksOnly`). This asks the CLI
//! itself where it can (Codex's app-server `hooks/list`), reads its trust files otherwise (never
//! writing them), and names the step that is missing.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Result;
use approval_host::cli_hooks::Cli;
use serde_json::Value;

use crate::UsageError;
use crate::harness::Harness;

/// The arguments of `doctor`.
#[derive(clap::Args, Debug)]
pub(crate) struct DoctorArgs {
    /// Check only this CLI [default: every CLI set up in the project].
    #[arg(long, value_name = "claude-code|codex|gemini|copilot", value_parser = parse_cli)]
    cli: Option<Harness>,
    /// The project [default: the working directory].
    // The prose says the default; clap's `[default: .]` would say it again.
    #[arg(
        long,
        value_name = "DIR",
        default_value = ".",
        hide_default_value = true
    )]
    project: PathBuf,
}

fn parse_cli(s: &str) -> Result<Harness, String> {
    Harness::ALL
        .into_iter()
        .find(|h| h.name() == s)
        .ok_or_else(|| format!("{s:?} is not claude-code, codex, gemini or copilot"))
}

/// One thing checked: what holds, or what is wrong and what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Finding {
    /// Whether it holds.
    pub ok: bool,
    /// What was found.
    pub text: String,
    /// The step that fixes it.
    pub fix: Option<String>,
}

fn ok(text: impl Into<String>) -> Finding {
    Finding {
        ok: true,
        text: text.into(),
        fix: None,
    }
}

fn fail(text: impl Into<String>, fix: impl Into<String>) -> Finding {
    Finding {
        ok: false,
        text: text.into(),
        fix: Some(fix.into()),
    }
}

/// A hook command found in one of a CLI's settings files.
#[derive(Debug, Clone)]
struct Found {
    file: PathBuf,
    event: String,
    command: String,
    /// The entry's matcher, when it has one.
    matcher: Option<String>,
    /// Its timeout, in the CLI's unit.
    timeout: Option<f64>,
}

impl Found {
    /// Whether the hook runs for every tool: a matcher that matches everything (or none, which
    /// every CLI here reads as everything).
    fn every_tool(&self) -> bool {
        matches!(self.matcher.as_deref(), None | Some("" | "*" | ".*"))
    }

    /// Whether its timeout leaves the hook time to answer (at least 10 s; Gemini CLI counts in
    /// milliseconds).
    fn time_enough(&self, harness: Harness) -> bool {
        let least = match harness {
            Harness::Other(Cli::Gemini) => 10_000.0,
            _ => 10.0,
        };
        self.timeout.is_none_or(|t| t >= least)
    }
}

/// The before- and after-tool events `init` installs for `harness`.
fn events(harness: Harness) -> (&'static [&'static str], &'static str) {
    match harness {
        Harness::ClaudeCode => (&["PreToolUse"], "PostToolUse"),
        Harness::Other(Cli::Codex) => (&["PreToolUse", "PermissionRequest"], "PostToolUse"),
        Harness::Other(Cli::Gemini) => (&["BeforeTool"], "AfterTool"),
        Harness::Other(Cli::Copilot) => (&["preToolUse"], "postToolUse"),
    }
}

/// The settings files `harness` reads hooks from, in `project` and in `home`.
fn hook_files(harness: Harness, project: &Path, home: &Path) -> Vec<PathBuf> {
    let json_in = |dir: PathBuf| -> Vec<PathBuf> {
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "json"))
            .collect();
        files.sort();
        files
    };
    match harness {
        Harness::ClaudeCode => vec![
            project.join(".claude/settings.json"),
            project.join(".claude/settings.local.json"),
            home.join(".claude/settings.json"),
        ],
        Harness::Other(Cli::Codex) => {
            vec![
                project.join(".codex/hooks.json"),
                codex_home(home).join("hooks.json"),
            ]
        }
        Harness::Other(Cli::Gemini) => vec![
            project.join(".gemini/settings.json"),
            home.join(".gemini/settings.json"),
        ],
        Harness::Other(Cli::Copilot) => {
            let mut files = json_in(project.join(".github/hooks"));
            files.extend(json_in(home.join(".copilot/hooks")));
            files
        }
    }
}

fn codex_home(home: &Path) -> PathBuf {
    std::env::var_os("CODEX_HOME")
        .filter(|v| !v.is_empty())
        .map_or_else(|| home.join(".codex"), PathBuf::from)
}

fn read_json(path: &Path) -> Option<Value> {
    serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()
}

/// Whether `command` is `harness`'s approval-host hook (before or after).
pub(crate) fn ours(harness: Harness, command: &str) -> bool {
    let words = shlex::split(command).unwrap_or_default();
    words
        .windows(2)
        .any(|w| w[0] == "hook" && w[1] == harness.name())
}

fn is_after(command: &str) -> bool {
    shlex::split(command)
        .unwrap_or_default()
        .iter()
        .any(|w| w == crate::hook_guard::AFTER_TOOL_FLAG)
}

/// Every hook command in the settings file `file`, with its event, its entry's matcher and its
/// timeout, as every CLI here spells them (`hooks.<Event>[]`, each a command or a matcher with
/// `hooks[]`).
fn hooks_in(file: &Path) -> Vec<(String, Option<String>, Option<f64>, String)> {
    let mut all = Vec::new();
    let Some(hooks) = read_json(file).and_then(|v| v.get("hooks").cloned()) else {
        return all;
    };
    let Some(events) = hooks.as_object() else {
        return all;
    };
    let timeout = |v: &Value| {
        ["timeout", "timeoutSec"]
            .iter()
            .find_map(|k| v.get(*k).and_then(Value::as_f64))
    };
    for (event, entries) in events {
        for entry in entries.as_array().into_iter().flatten() {
            let matcher = entry
                .get("matcher")
                .and_then(Value::as_str)
                .map(str::to_owned);
            if let Some(c) = entry
                .get("bash")
                .or_else(|| entry.get("command"))
                .and_then(Value::as_str)
            {
                all.push((event.clone(), matcher.clone(), timeout(entry), c.to_owned()));
            }
            for inner in entry
                .get("hooks")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let Some(c) = inner.get("command").and_then(Value::as_str) {
                    all.push((event.clone(), matcher.clone(), timeout(inner), c.to_owned()));
                }
            }
        }
    }
    all
}

/// Every hook command in the settings file `file`.
pub(crate) fn hook_commands(file: &Path) -> Vec<String> {
    hooks_in(file).into_iter().map(|(_, _, _, c)| c).collect()
}

/// Every approval-host hook command in `files`, by event.
fn found_hooks(harness: Harness, files: &[PathBuf]) -> Vec<Found> {
    let mut found = Vec::new();
    for file in files {
        for (event, matcher, timeout, command) in hooks_in(file) {
            if ours(harness, &command) {
                found.push(Found {
                    file: file.clone(),
                    event,
                    command,
                    matcher,
                    timeout,
                });
            }
        }
    }
    found
}

/// The project and home a check runs against.
struct Place<'a> {
    project: &'a Path,
    home: &'a Path,
}

/// Checks `harness` in `project`.
pub(crate) fn check(harness: Harness, project: &Path, home: &Path) -> Vec<Finding> {
    let place = Place { project, home };
    let files = hook_files(harness, project, home);
    let found = found_hooks(harness, &files);
    let init = format!(
        "approval-host init {} --project {}",
        harness.name(),
        project.display()
    );
    let mut findings = Vec::new();
    let (before, after) = events(harness);
    for event in before {
        match found
            .iter()
            .find(|f| f.event == *event && !is_after(&f.command))
        {
            Some(f) => findings.push(ok(format!("{} hook in {}", event, f.file.display()))),
            None => findings.push(fail(
                format!("no approval-host {event} hook in {}", shown(&files)),
                init.clone(),
            )),
        }
    }
    match found.iter().find(|f| f.event == after && is_after(&f.command)) {
        Some(f) => findings.push(ok(format!("{after} hook in {}", f.file.display()))),
        None => findings.push(fail(
            format!(
                "no approval-host {after} hook in {}: a before-tool hook that is skipped would go unnoticed",
                shown(&files)
            ),
            init.clone(),
        )),
    }
    for f in &found {
        if !f.every_tool() {
            findings.push(fail(
                format!(
                    "the {} hook in {} runs only for tools matching {:?}: the others are never asked",
                    f.event,
                    f.file.display(),
                    f.matcher.as_deref().unwrap_or("")
                ),
                format!("set its matcher to match every tool (\"*\" or \".*\"), or {init}"),
            ));
        }
        if !f.time_enough(harness) {
            findings.push(fail(
                format!(
                    "the {} hook in {} has a timeout of {}: the CLI may go on before it answers",
                    f.event,
                    f.file.display(),
                    f.timeout.unwrap_or_default()
                ),
                format!("give it the timeout init writes, or {init}"),
            ));
        }
    }
    let mut commands: Vec<&str> = found.iter().map(|f| f.command.as_str()).collect();
    commands.sort_unstable();
    commands.dedup();
    for command in commands {
        findings.extend(check_command(command, project));
    }
    findings.extend(match harness {
        Harness::ClaudeCode => claude_code(&place),
        Harness::Other(Cli::Codex) => codex(&place, &found),
        Harness::Other(Cli::Gemini) => gemini(&place, &found),
        Harness::Other(Cli::Copilot) => copilot(&place, &found),
    });
    findings
}

fn shown(files: &[PathBuf]) -> String {
    match files {
        [] => "its settings".to_owned(),
        files => files
            .iter()
            .map(|f| f.display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
    }
}

/// The hook's program runs, and its deployment loads.
fn check_command(command: &str, project: &Path) -> Vec<Finding> {
    let project_dir = project.display().to_string();
    let words: Vec<String> = shlex::split(command)
        .unwrap_or_default()
        .into_iter()
        .map(|w| w.replace("$CLAUDE_PROJECT_DIR", &project_dir))
        .collect();
    let mut findings = Vec::new();
    let Some(program) = words.first() else {
        return vec![fail(
            format!("the hook command {command:?} cannot be read"),
            "run init again",
        )];
    };
    let runs = if program.contains('/') {
        Path::new(program).is_file()
    } else {
        std::env::var_os("PATH")
            .is_some_and(|paths| std::env::split_paths(&paths).any(|d| d.join(program).is_file()))
    };
    findings.push(if runs {
        ok(format!("the hook's program {program} is there"))
    } else {
        fail(
            format!("the hook runs {program}, which is not there (or not on PATH)"),
            "cargo install --path host --locked (or run init again with the binary you use)",
        )
    });
    if let Some(config) = words
        .windows(2)
        .find(|w| w[0] == "--config")
        .map(|w| PathBuf::from(&w[1]))
    {
        findings.push(match approval_host::Deployment::load(&config) {
            Ok(_) => ok(format!("its deployment {} loads", config.display())),
            Err(e) => fail(
                format!("its deployment does not load: {e}"),
                format!("fix {}", config.display()),
            ),
        });
    }
    findings
}

/// Claude Code: no settings file turns hooks off.
fn claude_code(place: &Place<'_>) -> Vec<Finding> {
    let managed = managed_settings();
    let mut findings = Vec::new();
    let layers = [
        place.home.join(".claude/settings.json"),
        place.project.join(".claude/settings.json"),
        place.project.join(".claude/settings.local.json"),
        managed.clone(),
    ];
    for layer in &layers {
        if read_json(layer).and_then(|v| v.get("disableAllHooks").cloned())
            == Some(Value::Bool(true))
        {
            findings.push(fail(
                format!(
                    "{} sets disableAllHooks: Claude Code runs no hook",
                    layer.display()
                ),
                format!("remove disableAllHooks from {}", layer.display()),
            ));
        }
    }
    if read_json(&managed).and_then(|v| v.get("allowManagedHooksOnly").cloned())
        == Some(Value::Bool(true))
    {
        findings.push(fail(
            format!(
                "{} sets allowManagedHooksOnly: Claude Code runs only the managed settings' hooks",
                managed.display()
            ),
            format!("put the hook in {} (its administrator)", managed.display()),
        ));
    }
    if findings.is_empty() {
        findings.push(ok("no Claude Code settings turn hooks off"));
    }
    findings
}

/// Where Claude Code's managed settings live on Linux (`APPROVAL_HOST_CLAUDE_MANAGED_SETTINGS`
/// names another file, for tests).
fn managed_settings() -> PathBuf {
    std::env::var_os("APPROVAL_HOST_CLAUDE_MANAGED_SETTINGS").map_or_else(
        || PathBuf::from("/etc/claude-code/managed-settings.json"),
        PathBuf::from,
    )
}

/// Codex: the project is trusted and each hook's exact definition was reviewed, as Codex's own
/// app-server reports (`hooks/list`); without `codex` on PATH, its config is read.
fn codex(place: &Place<'_>, found: &[Found]) -> Vec<Finding> {
    let review = format!(
        "start codex in {} and accept its hooks (\"Trust all and continue\"), or approval-host init codex --project {} --trust",
        place.project.display(),
        place.project.display()
    );
    match crate::codex_app::list_hooks(place.project) {
        Ok(listed) => {
            let mut findings = Vec::new();
            for f in found {
                let mine: Vec<&crate::codex_app::ListedHook> =
                    listed.iter().filter(|h| h.command == f.command).collect();
                if mine.is_empty() {
                    findings.push(fail(
                        format!(
                            "Codex does not load the {} hook of {} (the project is not trusted)",
                            f.event,
                            f.file.display()
                        ),
                        review.clone(),
                    ));
                }
                for h in mine {
                    findings.push(if h.trust_status == "trusted" || h.trust_status == "managed" {
                        ok(format!("Codex runs {} ({})", h.key, h.trust_status))
                    } else {
                        fail(
                            format!(
                                "Codex will not run {}: its review is {} (Codex runs only hooks a person reviewed, and skips the rest without a word)",
                                h.key, h.trust_status
                            ),
                            review.clone(),
                        )
                    });
                }
            }
            findings
        }
        Err(why) => {
            // No app-server to ask: the project's trust, as Codex's config records it.
            let config = codex_home(place.home).join("config.toml");
            let trusted = std::fs::read_to_string(&config)
                .ok()
                .and_then(|t| t.parse::<toml::Table>().ok())
                .and_then(|t| {
                    let projects = t.get("projects")?.as_table()?.clone();
                    let real = std::fs::canonicalize(place.project).ok()?;
                    Some(real.ancestors().any(|dir| {
                        projects
                            .get(&dir.display().to_string())
                            .and_then(|p| p.get("trust_level"))
                            .and_then(toml::Value::as_str)
                            == Some("trusted")
                    }))
                })
                .unwrap_or(false);
            vec![
                if trusted {
                    ok(format!("{} trusts the project", config.display()))
                } else {
                    fail(
                        format!("{} does not trust the project", config.display()),
                        review.clone(),
                    )
                },
                fail(
                    format!("cannot ask Codex whether its hooks were reviewed: {why}"),
                    format!("put codex on PATH and run doctor again; or {review}"),
                ),
            ]
        }
    }
}

/// Whether `project` is inside a folder `trusted` says is trusted.
fn inside_trusted(project: &Path, trusted: impl IntoIterator<Item = PathBuf>) -> bool {
    let Ok(real) = std::fs::canonicalize(project) else {
        return false;
    };
    trusted
        .into_iter()
        .any(|t| real.starts_with(std::fs::canonicalize(&t).unwrap_or(t)))
}

/// Gemini CLI: a project's hooks load only in a trusted folder; the user's always do.
fn gemini(place: &Place<'_>, found: &[Found]) -> Vec<Finding> {
    let mut findings = Vec::new();
    let user = place.home.join(".gemini/settings.json");
    for layer in [place.project.join(".gemini/settings.json"), user.clone()] {
        if read_json(&layer).and_then(|v| v.pointer("/hooksConfig/enabled").cloned())
            == Some(Value::Bool(false))
        {
            findings.push(fail(
                format!(
                    "{} sets hooksConfig.enabled false: Gemini CLI runs no hook",
                    layer.display()
                ),
                format!("remove hooksConfig.enabled from {}", layer.display()),
            ));
        }
    }
    if !found.iter().any(|f| f.file.starts_with(place.project)) {
        return findings;
    }
    let file = std::env::var_os("GEMINI_CLI_TRUSTED_FOLDERS_PATH").map_or_else(
        || place.home.join(".gemini/trustedFolders.json"),
        PathBuf::from,
    );
    let rules: Vec<(PathBuf, String)> = read_json(&file)
        .and_then(|v| v.as_object().cloned())
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((PathBuf::from(k), v.as_str()?.to_owned())))
        .collect();
    let denied = rules
        .iter()
        .filter(|(_, v)| v == "DO_NOT_TRUST")
        .map(|(p, _)| p.clone());
    let trusted = rules.iter().filter_map(|(p, v)| match v.as_str() {
        "TRUST_FOLDER" => Some(p.clone()),
        "TRUST_PARENT" => p.parent().map(Path::to_path_buf),
        _ => None,
    });
    let folder_trust_off = read_json(&user)
        .and_then(|v| v.pointer("/security/folderTrust/enabled").cloned())
        == Some(Value::Bool(false));
    let step = format!(
        "start gemini in {} and trust the folder when it asks; for headless runs set GEMINI_CLI_TRUST_WORKSPACE=true (--skip-trust does not load the project's hooks), or approval-host init gemini --user",
        place.project.display()
    );
    findings.push(if folder_trust_off {
        ok(format!(
            "{} turns folder trust off: every folder is trusted",
            user.display()
        ))
    } else if inside_trusted(place.project, denied) {
        fail(
            format!(
                "{} does not trust the project: its hooks do not load",
                file.display()
            ),
            step,
        )
    } else if inside_trusted(place.project, trusted) {
        ok(format!("{} trusts the project", file.display()))
    } else if std::env::var("GEMINI_CLI_TRUST_WORKSPACE").is_ok_and(|v| v == "true") {
        ok("GEMINI_CLI_TRUST_WORKSPACE=true trusts the folder (where it is set)")
    } else {
        fail(
            format!(
                "the project is not a trusted folder ({}): Gemini CLI does not load its hooks",
                file.display()
            ),
            step,
        )
    });
    findings
}

/// Copilot CLI: a repository's hooks load only in a trusted folder; the user's always do.
fn copilot(place: &Place<'_>, found: &[Found]) -> Vec<Finding> {
    if !found.iter().any(|f| f.file.starts_with(place.project)) {
        return Vec::new();
    }
    let config = copilot_home(place.home).join("config.json");
    let trusted: Vec<PathBuf> = read_json(&config)
        .and_then(|v| v.get("trustedFolders").cloned())
        .and_then(|v| v.as_array().cloned())
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str().map(PathBuf::from))
        .collect();
    vec![if inside_trusted(place.project, trusted) {
        ok(format!("{} trusts the project", config.display()))
    } else {
        fail(
            format!(
                "the project is not a trusted folder ({}): Copilot CLI does not load .github/hooks/",
                config.display()
            ),
            format!(
                "start copilot in {} and trust the folder when it asks, or approval-host init copilot --user (the user's hooks run in every folder)",
                place.project.display()
            ),
        )
    }]
}

fn copilot_home(home: &Path) -> PathBuf {
    std::env::var_os("COPILOT_HOME")
        .filter(|v| !v.is_empty())
        .map_or_else(|| home.join(".copilot"), PathBuf::from)
}

/// Prints `findings` for `harness`; returns whether all hold.
pub(crate) fn print(harness: Harness, findings: &[Finding]) -> bool {
    println!("{}:", harness.title());
    for f in findings {
        if f.ok {
            println!("  ok    {}", f.text);
        } else {
            println!("  FAIL  {}", f.text);
            if let Some(fix) = &f.fix {
                println!("        do: {fix}");
            }
        }
    }
    findings.iter().all(|f| f.ok)
}

/// Runs `doctor`.
pub(crate) fn run(args: DoctorArgs) -> Result<ExitCode> {
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
        .ok_or_else(|| UsageError("doctor needs $HOME".to_owned()))?;
    let project = std::path::absolute(&args.project)?;
    let harnesses: Vec<Harness> = match args.cli {
        Some(h) => vec![h],
        None => Harness::ALL
            .into_iter()
            .filter(|h| {
                project
                    .join(".approval-host")
                    .join(h.deployment_file())
                    .is_file()
                    || !found_hooks(*h, &hook_files(*h, &project, &home)).is_empty()
            })
            .collect(),
    };
    if harnesses.is_empty() {
        return Err(UsageError(format!(
            "no agent CLI is set up in {}: run approval-host init <cli> --project {}",
            project.display(),
            project.display()
        ))
        .into());
    }
    let mut all = true;
    for harness in harnesses {
        all &= print(harness, &check(harness, &project, &home));
    }
    Ok(if all {
        println!("every hook will run");
        ExitCode::SUCCESS
    } else {
        println!("NOT GATING: a hook above will not run; do what it says, then run doctor again");
        ExitCode::from(1)
    })
}
