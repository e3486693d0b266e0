//! What the MCP gateway adds to a `tools/call`: the same call made by an rmcp client directly to
//! an MCP server over stdio, through a pass-through relay (an rmcp server that forwards each call
//! to the same server with no question, no screen and no log: what any MCP proxy costs), and
//! through `approval-host mcp` (the release build of the binary this bench is built with) to the
//! same server, with rules only (a standing allow rule decides) and with 2 warm wasm gates
//! (`deny-commands` says next, `allow-tools` allows; no rule). Beside them, one `fdatasync` of an
//! append to a file in the gateway's state directory, as many bytes as a call's records take in
//! the gateways' session logs (the call, the question, the decision; measured after the warm-up):
//! every decision is durable before the call goes on, so one sync is the floor of what the
//! gateway adds over the relay. The syncs are measured in blocks interleaved with the calls,
//! paced as the gateway meets them: on this VM a sync paced by calls costs about twice one of a
//! tight loop (printed too), as the device idles between them.
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
/// Calls made to each mode before measuring.
const WARM: usize = 200;

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

/// Appends of a `len`-byte line to a file in the state directory, each followed by
/// `fdatasync`, as the gateway's commit of one call's records.
struct SyncProbe {
    file: std::fs::File,
    line: Vec<u8>,
}

impl SyncProbe {
    fn new(dir: &Path, len: usize) -> SyncProbe {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("sync-probe.jsonl"))
            .unwrap();
        let mut line = vec![b'x'; len.max(1) - 1];
        line.push(b'\n');
        SyncProbe { file, line }
    }

    fn sync(&mut self) -> Duration {
        use std::io::Write;
        let started = Instant::now();
        self.file.write_all(&self.line).unwrap();
        self.file.sync_data().unwrap();
        started.elapsed()
    }
}

/// The bytes the gateways' session logs hold per call made to them so far.
fn bytes_per_call(state: &Path, calls: usize) -> usize {
    let sessions = std::fs::read_dir(state.join("sessions")).unwrap();
    let total: u64 = sessions
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("mcp-"))
        .map(|e| e.metadata().unwrap().len())
        .sum();
    (total as usize) / calls.max(1)
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
            for n in 0..WARM {
                call(client, n).await;
            }
        }
        // Both gateways' logs, over both gateways' warm-up calls.
        let per_call = bytes_per_call(Path::new(&state), 2 * WARM);
        let mut probe = SyncProbe::new(Path::new(&state), per_call);
        let mut samples: [Vec<Duration>; 4] = Default::default();
        let mut paced = Vec::with_capacity(calls);
        let mut n = 0;
        while samples[0].len() < calls {
            for (client, taken) in clients.iter().zip(samples.iter_mut()) {
                for _ in 0..BLOCK {
                    n += 1;
                    taken.push(call(client, n).await);
                }
            }
            // Paced as a gateway's commits are: one sync after each call, here of the direct mode.
            for _ in 0..BLOCK {
                n += 1;
                call(&clients[0], n).await;
                paced.push(probe.sync());
            }
        }
        for client in clients {
            let _ = client.cancel().await;
        }
        let tight: Vec<Duration> = (0..calls).map(|_| probe.sync()).collect();
        (samples, paced, tight, per_call)
    });
    let (samples, mut synced, mut tight, per_call) = samples;
    synced.sort();
    tight.sort();
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
        "{:<24} {:>10.1} {:>10.1}   (one {per_call}-byte append + fdatasync in the state directory, paced by calls)",
        "fdatasync",
        us(sync50),
        us(sync99)
    );
    println!(
        "{:<24} {:>10.1} {:>10.1}   (the same, back to back)",
        "fdatasync, tight loop",
        us(percentile(&tight, 0.5)),
        us(percentile(&tight, 0.99))
    );
    for (mode, s) in modes.iter().zip(&sorted).skip(2) {
        let p50 = percentile(s, 0.5);
        println!(
            "{mode}: p50 over the relay minus one sync = {:.1} µs (goal: at most 100)",
            us(p50) - us(relay50) - us(sync50)
        );
    }
}
