//! `approval-host demo`: the main job on the embedded default. A bundled deployment of the
//! example plugins (gates `allow-tools` and `deny-commands`, answerer `reject-all`) answers
//! scripted requests that show every outcome, each printed with its audit trail.

use std::path::Path;

use anyhow::Result;
use approval_host::audit::check::check_file;
use approval_host::{
    ApprovalRequest, ApprovalService, DirStore, Mounted, PluginHost, PluginSpec, Policy, Role,
    bundled,
};
use serde_json::json;
use tokio_util::sync::CancellationToken;

const SESSION: &str = "demo";

fn spec(name: &str, path: &str, role: Role, config: &[(&str, &str)]) -> PluginSpec {
    let mut spec = PluginSpec::new(name, path, role);
    spec.config = config
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    spec
}

/// Prints the records appended since `seen`, and returns the new count.
fn print_trail(path: &Path, seen: usize) -> Result<usize> {
    let checked = check_file(path)?;
    for r in &checked.records[seen..] {
        println!("    {:<17} {}", r.event.kind(), r.event.data());
    }
    if let Some(problem) = checked.problem {
        anyhow::bail!("the demo's own log fails its check: {problem}");
    }
    Ok(checked.records.len())
}

/// Runs the demo; `kept` says whether `state_dir` outlives it (given with `--state-dir`).
pub async fn run(state_dir: &Path, kept: bool) -> Result<()> {
    let service = ApprovalService::open_dir(state_dir, Policy::Ask);
    let host = PluginHost::new()?;
    let plugins = vec![
        host.load_bytes(
            &spec(
                "allow-tools",
                bundled::ALLOW_TOOLS_PATH,
                Role::Gate,
                &[("tools", "read,grep")],
            ),
            bundled::ALLOW_TOOLS,
        )?,
        host.load_bytes(
            &spec(
                "deny-commands",
                bundled::DENY_COMMANDS_PATH,
                Role::Gate,
                &[("patterns", "rm -rf,curl ")],
            ),
            bundled::DENY_COMMANDS,
        )?,
        host.load_bytes(
            &spec("reject-all", bundled::REJECT_ALL_PATH, Role::Answerer, &[]),
            bundled::REJECT_ALL,
        )?,
    ];
    let mut mounted = Mounted::mount(&service, plugins);
    println!(
        "deployment: gates allow-tools (tools = \"read,grep\"), deny-commands (patterns = \"rm -rf,curl \"); answerer reject-all"
    );
    println!("state: {}", state_dir.display());

    let agent = service.agent(SESSION, "agent-1").await?;
    let log = DirStore::new(state_dir).session_path(SESSION);
    service.start_turn(SESSION).await?;
    let mut seen = print_trail(&log, 0)?;

    let steps: [(&str, &str, serde_json::Value, &str); 6] = [
        (
            "c1",
            "read",
            json!({"path": "README.md"}),
            "a listed tool: the allow-tools gate grants this one call",
        ),
        (
            "c2",
            "bash",
            json!({"command": "rm -rf /"}),
            "a denied command: the deny-commands gate rejects it",
        ),
        (
            "c3",
            "bash",
            json!({"command": "ls -la"}),
            "no gate decides: the terminal answerer reject-all rejects",
        ),
        (
            "c4",
            "bash",
            json!({"command": "make"}),
            "the asker gives up before asking: cancelled, nobody asked",
        ),
        (
            "c5",
            "bash",
            json!({"command": "ls"}),
            "reject-all unloaded: no answerer left, so it fails closed",
        ),
        (
            "c6",
            "read",
            json!({"path": "README.md"}),
            "session policy switched to never: rejected before any plugin",
        ),
    ];
    for (i, (call_id, tool, arguments, what)) in steps.into_iter().enumerate() {
        match call_id {
            "c5" => {
                mounted.unload("reject-all");
            }
            "c6" => {
                service
                    .set_policy(&agent, Policy::Never, Some("user"))
                    .await?;
                for notice in agent.take_notices() {
                    println!("notice: {notice}");
                }
            }
            _ => {}
        }
        println!("\n{}. {tool} {arguments} — {what}", i + 1);
        service
            .record_tool_call(&agent, call_id, tool, arguments)
            .await?;
        let mut request = ApprovalRequest::new(&agent, tool).call_id(call_id);
        if call_id == "c4" {
            let token = CancellationToken::new();
            token.cancel();
            request = request.cancel(token);
        }
        let outcome = service.request(request).await?;
        println!("  => {outcome}");
        seen = print_trail(&log, seen)?;
    }
    service.end_turn(SESSION).await?;
    print_trail(&log, seen)?;
    if kept {
        println!(
            "\nevery question has exactly one decision on {}",
            log.display()
        );
    } else {
        println!(
            "\nevery question above has exactly one decision (the log was in a temporary directory, now removed; `demo --state-dir DIR` keeps it)"
        );
    }
    Ok(())
}

/// Runs `demo`: in `--state-dir` when given, else in a fresh temporary directory.
pub(crate) fn run_command(ctx: &crate::Context) -> anyhow::Result<std::process::ExitCode> {
    use anyhow::Context as _;
    let temp;
    let dir = match &ctx.named_dir {
        Some(dir) => dir.clone(),
        None => {
            temp = tempfile::tempdir().context("creating a state directory")?;
            temp.path().to_owned()
        }
    };
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    runtime.block_on(run(&dir, ctx.named_dir.is_some()))?;
    Ok(std::process::ExitCode::SUCCESS)
}
