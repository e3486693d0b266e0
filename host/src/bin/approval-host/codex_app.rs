//! Asking Codex itself about its hooks, through its app-server (`codex app-server`, JSON-RPC over
//! stdio): `hooks/list` says which hooks Codex loads for a directory and whether each one's exact
//! definition was reviewed (`trustStatus`); `config/batchWrite` records a review the way Codex's
//! own review does (`hooks.state.<key>.trusted_hash`), which `init codex --trust` uses with the
//! person's consent. Codex's files are never written by hand.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{Value, json};

/// How long Codex's app-server may take to answer.
const PATIENCE: Duration = Duration::from_secs(30);

/// A hook as Codex lists it.
#[derive(Debug, Clone)]
pub(crate) struct ListedHook {
    /// Codex's key for it (`<file>:<event>:<group>:<handler>`).
    pub key: String,
    /// Its command.
    pub command: String,
    /// `trusted`, `untrusted`, `modified` or `managed`.
    pub trust_status: String,
    /// The hash a review records.
    pub current_hash: String,
}

/// A running `codex app-server`.
struct AppServer {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    lines: mpsc::Receiver<String>,
    next: u64,
}

impl AppServer {
    fn start(project: &Path) -> Result<AppServer, String> {
        let mut child = Command::new("codex")
            .arg("app-server")
            .current_dir(project)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("codex app-server: {e}"))?;
        let stdin = child.stdin.take().ok_or("codex app-server: no stdin")?;
        let stdout = child.stdout.take().ok_or("codex app-server: no stdout")?;
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut server = AppServer {
            child,
            stdin,
            lines,
            next: 0,
        };
        server.call(
            "initialize",
            json!({"clientInfo": {"name": "approval-host", "version": env!("CARGO_PKG_VERSION")}}),
        )?;
        server.send(&json!({"jsonrpc": "2.0", "method": "initialized"}))?;
        Ok(server)
    }

    fn send(&mut self, message: &Value) -> Result<(), String> {
        writeln!(self.stdin, "{message}")
            .and_then(|()| self.stdin.flush())
            .map_err(|e| format!("codex app-server: {e}"))
    }

    fn call(&mut self, method: &str, params: Value) -> Result<Value, String> {
        self.next += 1;
        let id = self.next;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))?;
        loop {
            let line = self
                .lines
                .recv_timeout(PATIENCE)
                .map_err(|_| format!("codex app-server did not answer {method}"))?;
            let Ok(message) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            if message.get("id") != Some(&json!(id)) {
                continue;
            }
            if let Some(error) = message.get("error") {
                return Err(format!("codex app-server {method}: {error}"));
            }
            return Ok(message.get("result").cloned().unwrap_or(Value::Null));
        }
    }
}

impl Drop for AppServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn listed(result: &Value) -> Vec<ListedHook> {
    let text = |h: &Value, k: &str| h.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
    result
        .get("data")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .flat_map(|entry| {
            entry
                .get("hooks")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
        })
        .map(|h| ListedHook {
            key: text(h, "key"),
            command: text(h, "command"),
            trust_status: text(h, "trustStatus"),
            current_hash: text(h, "currentHash"),
        })
        .collect()
}

/// The hooks Codex loads for `project`, as its app-server lists them.
pub(crate) fn list_hooks(project: &Path) -> Result<Vec<ListedHook>, String> {
    let project = std::path::absolute(project).map_err(|e| e.to_string())?;
    let mut server = AppServer::start(&project)?;
    let result = server.call("hooks/list", json!({"cwds": [project]}))?;
    Ok(listed(&result))
}

/// Records, through Codex's app-server, that the person reviewed the hooks Codex loads in
/// `project` whose command is one of `commands` (and only those): first the project's trust
/// (when `trust_project`: a project's hooks), then each hook's current definition. Returns the
/// keys reviewed.
pub(crate) fn trust_hooks(
    project: &Path,
    commands: &[String],
    trust_project: bool,
) -> Result<Vec<String>, String> {
    let project = std::path::absolute(project).map_err(|e| e.to_string())?;
    let mut server = AppServer::start(&project)?;
    // The project's hooks are listed only once Codex trusts the project.
    if trust_project {
        server.call(
            "config/batchWrite",
            json!({"edits": [{
                "keyPath": "projects",
                "value": {project.display().to_string(): {"trust_level": "trusted"}},
                "mergeStrategy": "upsert",
            }]}),
        )?;
    }
    let hooks = listed(&server.call("hooks/list", json!({"cwds": [&project]}))?);
    let ours: Vec<&ListedHook> = hooks
        .iter()
        .filter(|h| commands.contains(&h.command) && h.trust_status != "managed")
        .collect();
    if ours.is_empty() {
        return Err("Codex lists none of approval-host's hooks for this project".to_owned());
    }
    let state: serde_json::Map<String, Value> = ours
        .iter()
        .map(|h| (h.key.clone(), json!({"trusted_hash": h.current_hash})))
        .collect();
    server.call(
        "config/batchWrite",
        json!({"edits": [{"keyPath": "hooks.state", "value": state, "mergeStrategy": "upsert"}]}),
    )?;
    Ok(ours.iter().map(|h| h.key.clone()).collect())
}
