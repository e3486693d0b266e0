//! What the MCP gateway adds to a `tools/call`: the same call made by an rmcp client directly to
//! an MCP server over stdio, through a pass-through relay (an rmcp server that forwards each call
//! to the same server with no question, no screen and no log: what any MCP proxy costs), and
//! through `approval-host mcp` (the release build of the binary this bench is built with) to the
//! same server, with rules only (a standing allow rule decides) and with 2 warm wasm gates
//! (`deny-commands` says next, `allow-tools` allows; no rule). Beside them, one `fdatasync` of a
//! 700-byte append to a file in the gateway's state directory, measured in the same run: every
//! decision is durable before the call goes on, so one sync is the floor of what the gateway adds
//! over the relay.
//! The server is this bench itself started again as a minimal rmcp server (`echo`), so the
//! figures are the gateway's, not a slow server's. All three connections are open at once and
//! measured in interleaved blocks, so drift on this shared VM falls on every mode alike. Every
//! decision is durable (the session log's group commit) before the call goes on.
//!
//! Run: `RUST_BACKTRACE=0 RUST_LIB_BACKTRACE=0 cargo bench -p approval-host --bench mcp_gateway`
//! (`BENCH_CALLS`, default 3000 per mode).

use std::path::Path;
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, InitializeResult,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{RequestContext, RunningService};
use rmcp::transport::TokioChildProcess;
use rmcp::{ErrorData, RoleClient, RoleServer, ServerHandler, ServiceExt};

const BIN: &str = env!("CARGO_BIN_EXE_approval-host");
const SERVER_ENV: &str = "APPROVAL_HOST_BENCH_MCP_SERVER";
const RELAY_ENV: &str = "APPROVAL_HOST_BENCH_MCP_RELAY";
const BLOCK: usize = 100;

/// The server: one tool, `echo`, answering `ok`.
struct Echo;

impl ServerHandler for Echo {
    fn get_info(&self) -> ServerConfig {
        InitializeResult::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _params: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let schema =
            serde_json::json!({"type": "object", "properties": {"text": {"type": "string"}}});
        let schema = match schema {
            serde_json::Value::Object(map) => std::sync::Arc::new(map),
            _ => unreachable!(),
        };
        let mut listed = ListToolsResult::default();
        listed.tools.push(Tool::new("echo", "Says ok.", schema));
        Ok(listed)
    }

    async fn call_tool(
        &self,
        _params: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        Ok(CallToolResponse::Complete(CallToolResult::success(vec![
            ContentBlock::text("ok"),
        ])))
    }
}

async fn serve_echo() {
    let running = Echo.serve(rmcp::transport::stdio()).await.unwrap();
    let _ = running.waiting().await;
}

/// The pass-through relay: lists and calls forwarded to the echo server as they come.
struct PassThrough {
    server: RunningService<RoleClient, ()>,
}

impl ServerHandler for PassThrough {
    fn get_info(&self) -> ServerConfig {
        InitializeResult::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        params: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        self.server
            .peer()
            .list_tools(params)
            .await
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))
    }

    async fn call_tool(
        &self,
        params: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.server
            .peer()
            .call_tool(params)
            .await
            .map(CallToolResponse::Complete)
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))
    }
}

async fn serve_relay() {
    let me = std::env::current_exe().unwrap().display().to_string();
    let server = connect(&me, &[]).await;
    let running = PassThrough { server }
        .serve(rmcp::transport::stdio())
        .await
        .unwrap();
    let _ = running.waiting().await;
}

/// `n` appends of a 700-byte line to a file in `dir`, each followed by `fdatasync`.
fn syncs(dir: &Path, n: usize) -> Vec<Duration> {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("sync-probe.jsonl"))
        .unwrap();
    let line = [b'x'; 699];
    (0..n)
        .map(|_| {
            let started = Instant::now();
            file.write_all(&line).unwrap();
            file.write_all(b"\n").unwrap();
            file.sync_data().unwrap();
            started.elapsed()
        })
        .collect()
}

async fn connect(program: &str, args: &[&str]) -> RunningService<RoleClient, ()> {
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args)
        .env(SERVER_ENV, "1")
        .env_remove(RELAY_ENV)
        .env("RUST_LOG", "error");
    ().serve(TokioChildProcess::new(cmd).unwrap())
        .await
        .unwrap()
}

async fn call(client: &RunningService<RoleClient, ()>, n: usize) -> Duration {
    let mut arguments = serde_json::Map::new();
    arguments.insert("text".to_owned(), format!("call {n}").into());
    let started = Instant::now();
    let result = client
        .peer()
        .call_tool(CallToolRequestParams::new("echo").with_arguments(arguments))
        .await
        .unwrap();
    let took = started.elapsed();
    assert_eq!(result.is_error, Some(false), "{result:?}");
    took
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn deployment(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

fn main() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    if std::env::var_os(RELAY_ENV).is_some() {
        runtime.block_on(serve_relay());
        return;
    }
    if std::env::var_os(SERVER_ENV).is_some() {
        runtime.block_on(serve_echo());
        return;
    }
    let calls: usize = std::env::var("BENCH_CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3000);
    let dir = tempfile::tempdir().unwrap();
    let rules = deployment(
        dir.path(),
        "rules.toml",
        "[[rule]]\nrule = \"mcp__bench__echo\"\neffect = \"allow\"\n",
    );
    std::fs::write(
        dir.path().join("allow.wasm"),
        approval_host::bundled::ALLOW_TOOLS,
    )
    .unwrap();
    std::fs::write(
        dir.path().join("deny.wasm"),
        approval_host::bundled::DENY_COMMANDS,
    )
    .unwrap();
    let gates = deployment(
        dir.path(),
        "gates.toml",
        "[[plugin]]\nname = \"deny-commands\"\npath = \"deny.wasm\"\nrole = \"gate\"\n[plugin.config]\npatterns = \"rm -rf\"\n\n\
         [[plugin]]\nname = \"allow-tools\"\npath = \"allow.wasm\"\nrole = \"gate\"\n[plugin.config]\ntools = \"mcp__bench__echo\"\n",
    );
    let me = std::env::current_exe().unwrap().display().to_string();
    let state = dir.path().join("state").display().to_string();
    let through = |config: &str| {
        vec![
            "--state-dir".to_owned(),
            state.clone(),
            "mcp".to_owned(),
            "--no-watch".to_owned(),
            "--config".to_owned(),
            config.to_owned(),
            "--name".to_owned(),
            "bench".to_owned(),
            "--".to_owned(),
            me.clone(),
        ]
    };
    let rules_args = through(&rules);
    let gates_args = through(&gates);
    let modes = [
        "direct",
        "pass-through relay",
        "gateway, rules only",
        "gateway, 2 wasm gates",
    ];
    let samples = runtime.block_on(async {
        let relay = {
            let mut cmd = tokio::process::Command::new(&me);
            cmd.env(RELAY_ENV, "1").env("RUST_LOG", "error");
            ().serve(TokioChildProcess::new(cmd).unwrap())
                .await
                .unwrap()
        };
        let clients = [
            connect(&me, &[]).await,
            relay,
            connect(
                BIN,
                &rules_args.iter().map(String::as_str).collect::<Vec<_>>(),
            )
            .await,
            connect(
                BIN,
                &gates_args.iter().map(String::as_str).collect::<Vec<_>>(),
            )
            .await,
        ];
        // Warm: the gates' first instances, the log files, the server's first answers.
        for client in &clients {
            for n in 0..200 {
                call(client, n).await;
            }
        }
        let mut samples: [Vec<Duration>; 4] = Default::default();
        let mut n = 0;
        while samples[0].len() < calls {
            for (client, taken) in clients.iter().zip(samples.iter_mut()) {
                for _ in 0..BLOCK {
                    n += 1;
                    taken.push(call(client, n).await);
                }
            }
        }
        for client in clients {
            let _ = client.cancel().await;
        }
        samples
    });
    std::fs::create_dir_all(&state).unwrap();
    let mut synced = syncs(Path::new(&state), calls);
    synced.sort();
    println!(
        "MCP gateway, tools/call over stdio: {calls} calls per mode, interleaved in blocks of {BLOCK}"
    );
    println!(
        "{:<24} {:>10} {:>10} {:>16} {:>16} {:>18}",
        "mode", "p50 µs", "p99 µs", "p50 added µs", "p99 added µs", "p50 over relay µs"
    );
    let mut sorted = samples;
    for s in &mut sorted {
        s.sort();
    }
    let (base50, base99) = (percentile(&sorted[0], 0.5), percentile(&sorted[0], 0.99));
    let relay50 = percentile(&sorted[1], 0.5);
    for (mode, s) in modes.iter().zip(&sorted) {
        let (p50, p99) = (percentile(s, 0.5), percentile(s, 0.99));
        println!(
            "{:<24} {:>10.1} {:>10.1} {:>16.1} {:>16.1} {:>18.1}",
            mode,
            us(p50),
            us(p99),
            us(p50) - us(base50),
            us(p99) - us(base99),
            us(p50) - us(relay50)
        );
    }
    let (sync50, sync99) = (percentile(&synced, 0.5), percentile(&synced, 0.99));
    println!(
        "{:<24} {:>10.1} {:>10.1}   (one 700-byte append + fdatasync in the state directory)",
        "fdatasync",
        us(sync50),
        us(sync99)
    );
    for (mode, s) in modes.iter().zip(&sorted).skip(2) {
        let p50 = percentile(s, 0.5);
        println!(
            "{mode}: p50 over the relay minus one sync = {:.1} µs (goal: at most 100)",
            us(p50) - us(relay50) - us(sync50)
        );
    }
}
