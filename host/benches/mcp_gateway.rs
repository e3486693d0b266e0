//! What the MCP gateway adds to a `tools/call`: the same call made by an rmcp client directly to
//! an MCP server over stdio, and through `approval-host mcp` (the release build of the binary
//! this bench is built with) to the same server, with rules only (a standing allow rule decides)
//! and with 2 warm wasm gates (`deny-commands` says next, `allow-tools` allows; no rule).
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

async fn connect(program: &str, args: &[&str]) -> RunningService<RoleClient, ()> {
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args).env(SERVER_ENV, "1").env("RUST_LOG", "error");
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
    let modes = ["direct", "gateway, rules only", "gateway, 2 wasm gates"];
    let samples = runtime.block_on(async {
        let clients = [
            connect(&me, &[]).await,
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
        let mut samples: [Vec<Duration>; 3] = Default::default();
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
    println!(
        "MCP gateway, tools/call over stdio: {calls} calls per mode, interleaved in blocks of {BLOCK}"
    );
    println!(
        "{:<24} {:>10} {:>10} {:>16} {:>16}",
        "mode", "p50 µs", "p99 µs", "p50 added µs", "p99 added µs"
    );
    let mut sorted = samples;
    for s in &mut sorted {
        s.sort();
    }
    let (base50, base99) = (percentile(&sorted[0], 0.5), percentile(&sorted[0], 0.99));
    for (mode, s) in modes.iter().zip(&sorted) {
        let (p50, p99) = (percentile(s, 0.5), percentile(s, 0.99));
        println!(
            "{:<24} {:>10.1} {:>10.1} {:>16.1} {:>16.1}",
            mode,
            us(p50),
            us(p99),
            us(p50) - us(base50),
            us(p99) - us(base99)
        );
    }
}
