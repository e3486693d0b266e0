//! `approval-host hook claude-code`: the wasm waterfall in front of Claude Code's tools.
//!
//! Claude Code runs this as a PreToolUse command hook. With `--socket` the call goes to a running
//! `serve` (warm plugins: a connection instead of a deployment load per tool call); otherwise,
//! or with `--fallback in-process` when the server cannot answer, the deployment is loaded here.
//! Either way the call is recorded and asked by [`approval_host::claude_code`], so the logs are
//! the same. This adapter never grants what nobody answered. Its server round trip
//! ([`through_server`]) and in-process service ([`with_agent`]) serve the other CLIs' hooks too
//! (`cli_hook.rs`); the command line of them all is `hook_cmd.rs`.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Result;
use approval_host::agent::Agent;
use approval_host::claude_code::{self, HookInput, HookTurns, WhenUndecided, output};
use approval_host::service::ApprovalService;
use approval_host::tools::texts;
use approval_host::{ApprovalError, Deployment, LogError};
use serde_json::{Value, json};

/// How long to wait for a parallel hook holding the same session's log.
const LOCK_PATIENCE: Duration = Duration::from_secs(10);

/// The environment variable holding the token `initialize` presents to a server that wants one.
pub const TOKEN_ENV: &str = "APPROVAL_HOST_TOKEN";

/// What to do when the server at `--socket` cannot answer.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fallback {
    /// Answer as the in-process hook does with no answerer: nobody decided.
    Ask,
    /// Load the deployment (`--config`) here and ask it.
    InProcess,
}

/// Where the hook is answered, from the command line.
pub(crate) struct Options {
    /// The deployment file.
    pub config: Option<PathBuf>,
    /// A running `serve --socket`.
    pub socket: Option<PathBuf>,
    /// When the server cannot answer.
    pub fallback: Fallback,
    /// How long to wait for the server.
    pub timeout: Duration,
    /// `--when-undecided`.
    pub when_undecided: Option<WhenUndecided>,
    /// `--after-tool`: record a call that ran.
    pub after_tool: bool,
}

/// Why the server was not used, as the output's reason says it.
pub fn unreachable_note(socket: &Path, why: &str) -> String {
    format!(
        "approval-host serve at {} did not answer: {why}",
        socket.display()
    )
}

/// Runs the hook on `text` (its stdin); returns what to print (nothing when deferred).
pub fn run(ctx: &crate::Context, options: &Options, text: &str) -> Result<Option<String>> {
    let mut input = HookInput::parse(text).map_err(super::UsageError)?;
    // A malformed value only means the question is traced on a trace of its own.
    input.trace_parent = std::env::var(approval_host::telemetry::TRACEPARENT_ENV)
        .ok()
        .and_then(|v| v.parse().ok());
    let deployment = match &options.config {
        Some(path) => Some(Deployment::load(path)?),
        None => None,
    };
    let Some(socket) = &options.socket else {
        let deployment = deployment.unwrap_or_else(Deployment::embedded);
        return in_process(ctx, &deployment, &input, options.when_undecided, None);
    };
    let raw: Value = serde_json::from_str(text).map_err(|e| super::UsageError(e.to_string()))?;
    let why = match through_server(
        socket,
        "hook/claude-code",
        &raw,
        input.trace_parent,
        options,
    ) {
        Ok(printed) => return Ok(printed),
        Err(Unanswered::Failed(why)) => return Err(server_failed(socket, &why)),
        Err(Unanswered::Unreachable(why)) => why,
    };
    let note = unreachable_note(socket, &why);
    tracing::warn!("{note}");
    match (options.fallback, deployment) {
        (Fallback::InProcess, Some(deployment)) => in_process(
            ctx,
            &deployment,
            &input,
            options.when_undecided,
            Some(&note),
        ),
        (Fallback::InProcess, None) => {
            Err(super::UsageError("--fallback in-process needs --config".to_owned()).into())
        }
        (Fallback::Ask, _) => {
            let decision = match options.when_undecided {
                Some(WhenUndecided::Defer) => return Ok(None),
                Some(WhenUndecided::Deny) => "deny",
                Some(WhenUndecided::Ask) | None => "ask",
            };
            let reason = format!("{} ({note})", texts::approval_unavailable(&input.tool_name));
            Ok(Some(output(decision, &reason).to_string()))
        }
    }
}

/// Why the server's answer is not printed.
pub(crate) enum Unanswered {
    /// It could not be reached, or did not answer in time: the hook falls back (`--fallback`).
    Unreachable(String),
    /// It answered that it could not carry the call out (the call could not be recorded, its
    /// session's log failed): the call is blocked, as when the hook fails in process. Falling
    /// back would let the CLI decide a call the host refused to record.
    Failed(String),
}

/// What a hook says when the server could not carry its call out, before the server's reason.
pub const SERVER_FAILED: &str = "could not answer the call";

/// The error a hook fails with when `socket`'s server could not carry the call out.
pub(crate) fn server_failed(socket: &Path, why: &str) -> anyhow::Error {
    anyhow::anyhow!(
        "approval-host serve at {} {SERVER_FAILED}: {why}",
        socket.display()
    )
}

/// Asks the server.
pub(crate) fn through_server(
    socket: &Path,
    method: &str,
    input: &Value,
    trace_parent: Option<approval_host::service::TraceParent>,
    options: &Options,
) -> Result<Option<String>, Unanswered> {
    // The server's request wraps the input two levels deeper than the hook read it, and its
    // record of the call one level: past the log's bound it could neither read nor record it.
    if approval_host::event::nesting(input.to_string().as_bytes())
        >= approval_host::event::MOST_NESTING
    {
        return Err(Unanswered::Failed(format!(
            "the call's JSON nests more than {} levels deep, deeper than a log line may",
            approval_host::event::MOST_NESTING
        )));
    }
    let reply =
        exchange(socket, method, input, trace_parent, options).map_err(Unanswered::Unreachable)?;
    if let Some(e) = reply.get("error") {
        let message = e.get("message").and_then(Value::as_str).unwrap_or("");
        if e.get("code").and_then(Value::as_i64) == Some(approval_host::serve::rpc::REQUEST_FAILED)
        {
            return Err(Unanswered::Failed(message.to_owned()));
        }
        return Err(Unanswered::Unreachable(format!("error {message}")));
    }
    match reply.pointer("/result/output") {
        Some(Value::Null) => Ok(None),
        Some(o @ Value::Object(_)) => Ok(Some(o.to_string())),
        _ => Err(Unanswered::Unreachable(format!("bad reply: {reply}"))),
    }
}

/// Sends the call and reads the server's reply to it; `Err` says why there was none.
fn exchange(
    socket: &Path,
    method: &str,
    input: &Value,
    trace_parent: Option<approval_host::service::TraceParent>,
    options: &Options,
) -> Result<Value, String> {
    let deadline = Instant::now() + options.timeout;
    let stream = UnixStream::connect(socket).map_err(|e| e.to_string())?;
    let left = || {
        deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1))
    };
    stream
        .set_write_timeout(Some(left()))
        .map_err(|e| e.to_string())?;
    let mut params = json!({ "input": input });
    if options.after_tool {
        params["after"] = json!(true);
    }
    if let Some(w) = options.when_undecided {
        params["whenUndecided"] = json!(w.as_str());
    }
    if let Some(parent) = trace_parent {
        params["_meta"] = json!({"traceparent": parent.to_string()});
    }
    let mut line = String::new();
    // A server whose deployment declares tokens wants one first.
    if let Ok(token) = std::env::var(TOKEN_ENV) {
        line = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                      "params": {"protocolVersion": "0.1", "token": token}})
        .to_string();
        line.push('\n');
    }
    line.push_str(
        &json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).to_string(),
    );
    line.push('\n');
    (&stream)
        .write_all(line.as_bytes())
        .map_err(|e| e.to_string())?;
    let mut reader = BufReader::new(&stream);
    let mut reply = String::new();
    loop {
        stream
            .set_read_timeout(Some(left()))
            .map_err(|e| e.to_string())?;
        reply.clear();
        let n = reader.read_line(&mut reply).map_err(|e| match e.kind() {
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
                format!("no answer within {} s", options.timeout.as_secs_f64())
            }
            _ => e.to_string(),
        })?;
        if n == 0 {
            return Err("the server closed the connection".to_owned());
        }
        let v: Value = serde_json::from_str(&reply).map_err(|e| format!("bad reply: {e}"))?;
        if v.get("id") == Some(&json!(0))
            && let Some(e) = v.get("error")
        {
            return Err(format!(
                "error {}",
                e.get("message").and_then(Value::as_str).unwrap_or("")
            ));
        }
        // Only the reply to our request counts (a server may also send notifications).
        if v.get("id") != Some(&json!(1)) {
            continue;
        }
        return Ok(v);
    }
}

fn in_process(
    ctx: &crate::Context,
    deployment: &Deployment,
    input: &HookInput,
    when_undecided: Option<WhenUndecided>,
    note: Option<&str>,
) -> Result<Option<String>> {
    let options = approval_host::assemble::hook_options(deployment, when_undecided);
    let printed = with_agent(
        ctx,
        deployment,
        &input.session_id,
        claude_code::AGENT_ID,
        input.tool_use_id.as_deref(),
        async |service, agent| {
            let answer =
                claude_code::ask(service, &HookTurns::default(), agent, input, &options).await?;
            Ok(answer.output)
        },
    )?;
    Ok(printed.map(|mut o| {
        if let Some(note) = note
            && let Some(Value::String(reason)) =
                o.pointer_mut("/hookSpecificOutput/permissionDecisionReason")
        {
            reason.push_str(&format!(" (answered in process: {note})"));
        }
        o.to_string()
    }))
}

/// Records an after-tool hook's input (`hook <cli> --after-tool`): through the server at
/// `--socket` when it answers, else here (recording needs no plugin). An unasked call is said on
/// stderr too.
pub(crate) fn record_ran(
    ctx: &crate::Context,
    cli: Option<approval_host::cli_hooks::Cli>,
    options: &Options,
    text: &str,
) -> Result<()> {
    let raw: Value = serde_json::from_str(text)
        .map_err(|e| super::UsageError(format!("the hook input is not JSON: {e}")))?;
    let (session, agent_id, ran) =
        approval_host::cli_hooks::after_input(cli, &raw).map_err(super::UsageError)?;
    if let Some(socket) = &options.socket {
        let method = cli.map_or("hook/claude-code", |c| c.method());
        match through_server(socket, method, &raw, None, options) {
            Ok(_) => return Ok(()),
            Err(Unanswered::Failed(why)) => return Err(server_failed(socket, &why)),
            Err(Unanswered::Unreachable(why)) => {
                tracing::warn!("{}", unreachable_note(socket, &why));
            }
        }
    }
    let deployment = match &options.config {
        Some(path) => Deployment::load(path)?,
        None => Deployment::embedded(),
    };
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        let service = crate::wiring::service(ctx, &deployment)?;
        let agent = open_agent(&service, &session, agent_id).await?;
        let seen = approval_host::after_tool::record(&service, &agent, &ran).await?;
        if let approval_host::after_tool::Seen::Unasked(unasked) = seen {
            eprintln!(
                "approval-host: {} ran although {} (recorded as approval/unasked in session {session})",
                unasked.tool_name,
                match unasked.why {
                    approval_host::event::UnaskedWhy::NotAsked => "it was never asked",
                    approval_host::event::UnaskedWhy::Refused => "it was refused",
                    approval_host::event::UnaskedWhy::NotAnswered => "its question was never answered",
                }
            );
        }
        anyhow::Ok(())
    })
}

/// Opens `session` as `agent_id`, waiting for a parallel hook that holds its log.
async fn open_agent(
    service: &ApprovalService,
    session: &str,
    agent_id: &str,
) -> Result<Agent, ApprovalError> {
    let started = Instant::now();
    // Agent CLIs run the hooks of parallel tool calls at once; one process writes a log at a
    // time.
    loop {
        match service.agent(session, agent_id).await {
            Err(ApprovalError::Log(LogError::Locked { .. }))
                if started.elapsed() < LOCK_PATIENCE =>
            {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            other => return other,
        }
    }
}

/// Loads the deployment here, opens `session` as `agent_id` (waiting for a parallel hook that
/// holds its log) and runs `ask`; the question's trace leaves before the process does.
pub(crate) fn with_agent(
    ctx: &crate::Context,
    deployment: &Deployment,
    session: &str,
    agent_id: &str,
    call_id: Option<&str>,
    ask: impl AsyncFnOnce(&ApprovalService, &Agent) -> Result<Option<Value>, ApprovalError>,
) -> Result<Option<Value>> {
    let state_dir = ctx.dir.as_path();
    let runtime = crate::wiring::one_question_runtime()?;
    let mut telemetry = None;
    let answered = runtime.block_on(async {
        crate::hook_guard::fault_point("ask");
        let service = crate::wiring::service(ctx, deployment)?;
        telemetry = approval_host::assemble::telemetry(&service, deployment)?;
        // The deciding plugins only: the shadows run after the hook has answered and exited.
        let plugins = crate::wiring::mount_deciding(&service, deployment, state_dir, ctx.quiet)?;
        let agent = open_agent(&service, session, agent_id).await?;
        let answer = ask(&service, &agent).await;
        // The process ends once the answer is printed: unloading the plugins (each unregistered,
        // the engine's memory unmapped) would only delay it. They hold nothing to make durable;
        // the session's log, which does, is closed as usual.
        std::mem::forget(plugins);
        anyhow::Ok(answer?)
    });
    if let Some(telemetry) = telemetry {
        telemetry.shutdown();
    }
    if answered.is_ok()
        && !deployment.shadows.is_empty()
        && let (Some(config), Some(call_id)) = (&deployment.path, call_id)
    {
        crate::shadow_cmd::start_settle(ctx, config, session, call_id);
    }
    answered
}
