//! `approval-host init <cli> --mcp`: puts the MCP gateway in front of every stdio MCP server an
//! agent CLI's configuration starts, by rewriting each entry's command to
//! `approval-host … mcp --config DEPLOYMENT --name NAME -- <its command and arguments>`; and
//! with `--undo`, takes it out again, leaving the entry as it was. Only the command and its
//! arguments change: the entry's environment, working directory and other keys stay, and every
//! other entry and key of the file too. An entry reached over HTTP, or whose name cannot stand
//! in a rule (`mcp__<name>__<tool>`), is left as it is and said so.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};
use serde_json::{Value, json};

use crate::harness::Harness;
use crate::init::Target;
use approval_host::cli_hooks::Cli;

/// What the wrapped command runs: the program, and the arguments before the server's own.
pub(crate) struct Wrapper {
    /// The gateway's program (`approval-host`, or this binary's path).
    pub(crate) program: String,
    /// Where its state is (`--project-state DIR` or `--state-dir DIR`), as separate words.
    pub(crate) state: Vec<String>,
    /// The deployment file the gateway reads.
    pub(crate) deployment: String,
}

impl Wrapper {
    /// The arguments that run server `name` (`command` and `args`) behind the gateway.
    fn arguments(&self, name: &str, command: &str, args: &[String]) -> Vec<String> {
        let mut out = self.state.clone();
        out.extend(
            [
                "mcp",
                "--config",
                &self.deployment,
                "--name",
                name,
                "--",
                command,
            ]
            .map(str::to_owned),
        );
        out.extend(args.iter().cloned());
        out
    }
}

/// What happened to one server entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Entry {
    /// Put behind the gateway (or, undoing, taken out).
    Changed(String),
    /// Already as asked.
    Unchanged(String),
    /// Left as it is, and why.
    Left(String, &'static str),
}

/// Why an HTTP entry is left.
pub(crate) const HTTP_LEFT: &str = "reached over HTTP: put `approval-host mcp --listen … --upstream URL` in front of it and point the entry at that";

/// Why an entry with a name no rule can carry is left.
pub(crate) const NAME_LEFT: &str = "its name cannot stand in a rule (1 to 64 letters, digits, '-' or '_', without \"__\"): rename it first";

/// What `init --mcp` says when the CLI's hooks are not set up: the gateway guards the MCP
/// servers, but nothing guards the file that puts it in front of them.
pub(crate) fn unprotected(harness: Harness, config: &Path) -> String {
    format!(
        "NOT PROTECTED YET: {title}'s own tools are not gated, so its agent could edit {config} and start these servers without the gateway; set up its hooks too (approval-host init {name} --project DIR, or --user)",
        title = harness.title(),
        config = config.display(),
        name = harness.name()
    )
}

/// Why an entry without a command is left.
pub(crate) const NO_COMMAND_LEFT: &str = "it has no command to start";

/// The words of an entry that runs the gateway: `(name, command, args)` of the server behind it,
/// when `program` is an approval-host and its arguments are ours.
fn unwrapped(program: &str, args: &[String]) -> Option<(String, Vec<String>)> {
    if Path::new(program).file_name() != Some(std::ffi::OsStr::new("approval-host")) {
        return None;
    }
    let mcp = args.iter().position(|a| a == "mcp")?;
    let dash = args[mcp..].iter().position(|a| a == "--")? + mcp;
    let server = args.get(dash + 1)?.clone();
    Some((server, args[dash + 2..].to_vec()))
}

fn strings(value: Option<&Value>) -> Option<Vec<String>> {
    match value {
        None => Some(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|v| v.as_str().map(str::to_owned))
            .collect(),
        Some(_) => None,
    }
}

/// Rewrites the server entries of `servers` (a JSON object of name → entry, as Claude Code,
/// Gemini CLI and Copilot CLI write them) behind the gateway, or (`undo`) back out of it.
pub(crate) fn rewrite_json(
    servers: &mut serde_json::Map<String, Value>,
    wrapper: &Wrapper,
    undo: bool,
) -> Vec<Entry> {
    let mut report = Vec::new();
    for (name, entry) in servers.iter_mut() {
        let Some(object) = entry.as_object_mut() else {
            report.push(Entry::Left(name.clone(), NO_COMMAND_LEFT));
            continue;
        };
        let remote = object.contains_key("url")
            || object.contains_key("httpUrl")
            || object
                .get("type")
                .and_then(Value::as_str)
                .is_some_and(|t| !matches!(t, "stdio" | "local"));
        // Reached over HTTP whatever else it says: its command is not what the CLI runs.
        if remote {
            report.push(Entry::Left(name.clone(), HTTP_LEFT));
            continue;
        }
        let (Some(command), Some(args)) = (
            object
                .get("command")
                .and_then(Value::as_str)
                .map(str::to_owned),
            strings(object.get("args")),
        ) else {
            report.push(Entry::Left(name.clone(), NO_COMMAND_LEFT));
            continue;
        };
        let behind = unwrapped(&command, &args);
        match (undo, behind) {
            (false, Some(_)) | (true, None) => report.push(Entry::Unchanged(name.clone())),
            (true, Some((server, server_args))) => {
                object.insert("command".to_owned(), json!(server));
                object.insert("args".to_owned(), json!(server_args));
                report.push(Entry::Changed(name.clone()));
            }
            (false, None) => {
                if approval_host::mcp::check_server_name(name).is_err() {
                    report.push(Entry::Left(name.clone(), NAME_LEFT));
                    continue;
                }
                object.insert("command".to_owned(), json!(wrapper.program));
                object.insert(
                    "args".to_owned(),
                    json!(wrapper.arguments(name, &command, &args)),
                );
                report.push(Entry::Changed(name.clone()));
            }
        }
    }
    report
}

/// [`rewrite_json`] on a whole JSON file's text, its servers under `key` at the top level.
/// `None` text: no file yet (nothing to rewrite).
pub(crate) fn rewrite_json_file(
    path: &Path,
    before: Option<&[u8]>,
    key: &str,
    wrapper: &Wrapper,
    undo: bool,
) -> Result<(Vec<u8>, Vec<Entry>)> {
    let Some(before) = before else {
        return Ok((Vec::new(), Vec::new()));
    };
    let mut root: Value =
        serde_json::from_slice(before).with_context(|| format!("{}: not JSON", path.display()))?;
    let Some(servers) = root.get_mut(key) else {
        return Ok((before.to_vec(), Vec::new()));
    };
    let servers = servers
        .as_object_mut()
        .with_context(|| format!("{}: {key} is not an object", path.display()))?;
    let report = rewrite_json(servers, wrapper, undo);
    if !report.iter().any(|e| matches!(e, Entry::Changed(_))) {
        return Ok((before.to_vec(), report));
    }
    let mut text = serde_json::to_string_pretty(&root)?;
    text.push('\n');
    Ok((text.into_bytes(), report))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wrapper() -> Wrapper {
        Wrapper {
            program: "approval-host".to_owned(),
            state: vec!["--project-state".to_owned(), "/p".to_owned()],
            deployment: "/p/.approval-host/claude-code.toml".to_owned(),
        }
    }

    #[test]
    fn a_stdio_server_is_wrapped_and_unwrapped_back_to_what_it_was() {
        let original = json!({
            "notes": {"command": "python3", "args": ["notes.py", "--x"], "env": {"K": "v"}},
            "bare": {"command": "srv"},
            "remote": {"type": "http", "url": "https://mcp.example/mcp"},
            "gem": {"httpUrl": "https://mcp.example/mcp"},
            "bad.name": {"command": "srv"},
            "odd": {"command": "srv", "args": "not a list"},
            "both": {"command": "srv", "type": "http", "url": "https://mcp.example/mcp"},
        });
        let mut servers = original.as_object().unwrap().clone();
        let report = rewrite_json(&mut servers, &wrapper(), false);
        assert_eq!(
            servers["notes"],
            json!({"command": "approval-host", "args": [
                "--project-state", "/p", "mcp", "--config", "/p/.approval-host/claude-code.toml",
                "--name", "notes", "--", "python3", "notes.py", "--x"
            ], "env": {"K": "v"}})
        );
        assert_eq!(servers["remote"], original["remote"]);
        assert_eq!(servers["bad.name"], original["bad.name"]);
        let mut sorted = report.clone();
        sorted.sort_by_key(|e| format!("{e:?}"));
        assert_eq!(
            sorted,
            [
                Entry::Changed("bare".to_owned()),
                Entry::Changed("notes".to_owned()),
                Entry::Left("bad.name".to_owned(), NAME_LEFT),
                Entry::Left("both".to_owned(), HTTP_LEFT),
                Entry::Left("gem".to_owned(), HTTP_LEFT),
                Entry::Left("odd".to_owned(), NO_COMMAND_LEFT),
                Entry::Left("remote".to_owned(), HTTP_LEFT),
            ]
        );
        // A second run changes nothing.
        let again = rewrite_json(&mut servers.clone(), &wrapper(), false);
        assert!(again.contains(&Entry::Unchanged("notes".to_owned())));
        // Undone: exactly what was there (the bare entry gains an empty args list).
        rewrite_json(&mut servers, &wrapper(), true);
        assert_eq!(servers["notes"], original["notes"]);
        assert_eq!(servers["bare"], json!({"command": "srv", "args": []}));
    }

    #[test]
    fn only_an_approval_host_running_mcp_is_taken_out() {
        let words = |s: &str| s.split(' ').map(str::to_owned).collect::<Vec<_>>();
        assert_eq!(
            unwrapped(
                "/usr/bin/approval-host",
                &words("mcp --name a -- srv --flag")
            ),
            Some(("srv".to_owned(), words("--flag")))
        );
        assert_eq!(unwrapped("approval-host-evil", &words("mcp -- srv")), None);
        assert_eq!(unwrapped("approval-host", &words("serve -- srv")), None);
        assert_eq!(unwrapped("approval-host", &words("mcp --")), None);
    }
}

/// Where `harness` reads its MCP servers (for a project directory, or the user's home), and
/// the key they are under.
pub(crate) fn config_file(harness: Harness, base: &Path, user: bool) -> (PathBuf, Format) {
    match harness {
        Harness::ClaudeCode if user => (base.join(".claude.json"), Format::Json("mcpServers")),
        Harness::ClaudeCode => (base.join(".mcp.json"), Format::Json("mcpServers")),
        Harness::Other(Cli::Gemini) => (
            base.join(".gemini").join("settings.json"),
            Format::Json("mcpServers"),
        ),
        Harness::Other(Cli::Copilot) if user => (
            base.join(".copilot").join("mcp-config.json"),
            Format::Json("mcpServers"),
        ),
        // A project's own, which Copilot CLI reads beside Claude Code's `.mcp.json`.
        Harness::Other(Cli::Copilot) => (
            base.join(".github").join("mcp.json"),
            Format::Json("mcpServers"),
        ),
        Harness::Other(Cli::Codex) => (base.join(".codex").join("config.toml"), Format::CodexToml),
    }
}

/// How a CLI's MCP configuration is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    /// A JSON object of servers under this top-level key.
    Json(&'static str),
    /// Codex's `config.toml`: a `[mcp_servers.<name>]` table per server.
    CodexToml,
}

/// Runs `init <harness> --mcp [--undo]`: prints each server entry's fate and what changed (or,
/// with `dry_run`, the diff).
pub(crate) fn run(
    harness: Harness,
    target: &Target,
    state_dir: Option<&Path>,
    dry_run: bool,
    undo: bool,
) -> Result<()> {
    // Files are named as the person named the place; what the entry runs, absolutely.
    let (shown, user) = match target {
        Target::Project(dir) => (dir.clone(), false),
        Target::User(home) => (home.clone(), true),
    };
    // As `find_setup` reads a project's place: through its symlinks.
    let base =
        std::fs::canonicalize(&shown).with_context(|| format!("--project {}", shown.display()))?;
    let deployment = shown.join(".approval-host").join(harness.deployment_file());
    let state = match (state_dir, target) {
        (Some(dir), _) => vec![
            "--state-dir".to_owned(),
            std::path::absolute(dir)?.display().to_string(),
        ],
        (None, Target::Project(_)) => {
            vec!["--project-state".to_owned(), base.display().to_string()]
        }
        (None, Target::User(_)) => vec![
            "--state-dir".to_owned(),
            base.join(".approval-host").display().to_string(),
        ],
    };
    let wrapper = Wrapper {
        program: crate::init::program(),
        state,
        deployment: base
            .join(".approval-host")
            .join(harness.deployment_file())
            .display()
            .to_string(),
    };
    let (path, format) = config_file(harness, &shown, user);
    let before = crate::init::read(&path)?;
    let (after, report) = match format {
        Format::Json(key) => rewrite_json_file(&path, before.as_deref(), key, &wrapper, undo)?,
        Format::CodexToml => rewrite_codex_file(&path, before.as_deref(), &wrapper, undo)?,
    };
    if before.is_none() {
        println!(
            "no MCP servers: {} does not exist (add them to {} first, then run this again)",
            path.display(),
            harness.title()
        );
        return Ok(());
    }
    for entry in &report {
        match entry {
            Entry::Changed(name) if undo => println!("taken out  {name}: started as before"),
            Entry::Changed(name) => {
                println!("gateway    {name}: its calls are asked as mcp__{name}__<tool>")
            }
            Entry::Unchanged(name) if undo => println!("unchanged  {name}: not behind the gateway"),
            Entry::Unchanged(name) => println!("unchanged  {name}: already behind the gateway"),
            Entry::Left(name, why) => println!("left       {name}: {why}"),
        }
    }
    let mut changes = Vec::new();
    let changed = before.as_deref() != Some(after.as_slice());
    if changed && !undo {
        // The gateway reads the deployment the hooks read; written now if there is none.
        changes.extend(crate::init::deployment_files(harness, &deployment)?);
    }
    changes.push(crate::init::Change {
        path: path.clone(),
        before,
        after,
        kept: None,
    });
    crate::init::apply(&changes, dry_run)?;
    if dry_run {
        println!("dry run: nothing was written");
    } else if !changed {
        println!("nothing to do");
    } else if !undo {
        let absolute = base.join(".approval-host").join(harness.deployment_file());
        if !crate::project_state::hooks_run(&base, &absolute) {
            println!("{}", unprotected(harness, &path));
        }
        println!(
            "{}'s next start runs these servers behind the gateway; undo with: approval-host init {} {} --mcp --undo",
            harness.title(),
            harness.name(),
            match target {
                Target::Project(dir) => format!(
                    "--project {}",
                    crate::init::shell_quote(&dir.display().to_string())
                ),
                Target::User(_) => "--user".to_owned(),
            }
        );
    }
    Ok(())
}

/// [`rewrite_json_file`] for Codex's `config.toml`: each `[mcp_servers.<name>]` table's
/// `command` and `args`, the rest of the file (comments and layout included) as it was.
pub(crate) fn rewrite_codex_file(
    path: &Path,
    before: Option<&[u8]>,
    wrapper: &Wrapper,
    undo: bool,
) -> Result<(Vec<u8>, Vec<Entry>)> {
    let Some(before) = before else {
        return Ok((Vec::new(), Vec::new()));
    };
    let text =
        std::str::from_utf8(before).with_context(|| format!("{}: not UTF-8", path.display()))?;
    let mut doc: toml_edit::DocumentMut = text
        .parse()
        .with_context(|| format!("{}: not TOML", path.display()))?;
    let Some(servers) = doc
        .get_mut("mcp_servers")
        .and_then(|s| s.as_table_like_mut())
    else {
        return Ok((before.to_vec(), Vec::new()));
    };
    let mut report = Vec::new();
    for (name, entry) in servers.iter_mut() {
        let name = name.get().to_owned();
        let Some(table) = entry.as_table_like_mut() else {
            report.push(Entry::Left(name, NO_COMMAND_LEFT));
            continue;
        };
        if table.contains_key("url") {
            report.push(Entry::Left(name, HTTP_LEFT));
            continue;
        }
        let command = table
            .get("command")
            .and_then(|c| c.as_str())
            .map(str::to_owned);
        let args: Option<Vec<String>> = match table.get("args") {
            None => Some(Vec::new()),
            Some(a) => a
                .as_array()
                .and_then(|a| a.iter().map(|v| v.as_str().map(str::to_owned)).collect()),
        };
        let (Some(command), Some(args)) = (command, args) else {
            report.push(Entry::Left(name, NO_COMMAND_LEFT));
            continue;
        };
        let (new_command, new_args) = match (undo, unwrapped(&command, &args)) {
            (false, Some(_)) | (true, None) => {
                report.push(Entry::Unchanged(name));
                continue;
            }
            (true, Some(server)) => server,
            (false, None) => {
                if approval_host::mcp::check_server_name(&name).is_err() {
                    report.push(Entry::Left(name, NAME_LEFT));
                    continue;
                }
                (
                    wrapper.program.clone(),
                    wrapper.arguments(&name, &command, &args),
                )
            }
        };
        table.insert("command", toml_edit::value(new_command));
        let mut array = toml_edit::Array::new();
        for a in new_args {
            array.push(a);
        }
        table.insert("args", toml_edit::value(array));
        report.push(Entry::Changed(name));
    }
    if !report.iter().any(|e| matches!(e, Entry::Changed(_))) {
        return Ok((before.to_vec(), report));
    }
    Ok((doc.to_string().into_bytes(), report))
}

#[cfg(test)]
mod codex_tests {
    use super::*;

    #[test]
    fn codex_s_tables_are_rewritten_in_place_and_back() {
        let original = "# my servers\nmodel = \"o3\"\n\n[mcp_servers.notes]\ncommand = \"python3\" # the notes\nargs = [\"notes.py\"]\nenv = { K = \"v\" }\n\n[mcp_servers.remote]\nurl = \"https://mcp.example/mcp\"\n";
        let wrapper = Wrapper {
            program: "approval-host".to_owned(),
            state: vec!["--state-dir".to_owned(), "/s".to_owned()],
            deployment: "/d/codex.toml".to_owned(),
        };
        let path = Path::new("config.toml");
        let (after, report) =
            rewrite_codex_file(path, Some(original.as_bytes()), &wrapper, false).unwrap();
        let after = String::from_utf8(after).unwrap();
        assert!(
            after.starts_with("# my servers\nmodel = \"o3\"\n"),
            "{after}"
        );
        assert!(after.contains("env = { K = \"v\" }"), "{after}");
        let parsed: toml::Table = after.parse().unwrap();
        assert_eq!(
            parsed["mcp_servers"]["notes"]["args"],
            toml::Value::Array(
                [
                    "--state-dir",
                    "/s",
                    "mcp",
                    "--config",
                    "/d/codex.toml",
                    "--name",
                    "notes",
                    "--",
                    "python3",
                    "notes.py"
                ]
                .map(|s| toml::Value::String(s.to_owned()))
                .to_vec()
            )
        );
        assert_eq!(
            report,
            [
                Entry::Changed("notes".to_owned()),
                Entry::Left("remote".to_owned(), HTTP_LEFT)
            ]
        );
        let (back, _) = rewrite_codex_file(path, Some(after.as_bytes()), &wrapper, true).unwrap();
        let back: toml::Table = String::from_utf8(back).unwrap().parse().unwrap();
        let original: toml::Table = original.parse().unwrap();
        assert_eq!(back, original);
    }
}
