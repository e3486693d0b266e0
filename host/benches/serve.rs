//! The long-running host: start-up with N plugins on a cold and a warm compiled cache, the time
//! from a plugin file changing to the new version answering, and requests per second through
//! `serve` (a Unix socket, durable session logs) with 1 and 16 clients.
//!
//! Run: `cargo bench -p approval-host --bench serve`.

use std::path::Path;
use std::time::{Duration, Instant};

use approval_host::plugin::QuarantinePolicy;
use approval_host::serve::{ServeOptions, Server};
use approval_host::{ApprovalRequest, Outcome, bundled};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// `bytes` with a custom section appended, so each copy has its own digest (and cache entry).
fn distinct(bytes: &[u8], i: usize) -> Vec<u8> {
    let name = b"bench";
    let payload = i.to_le_bytes();
    let size = 1 + name.len() + payload.len();
    let mut out = bytes.to_vec();
    out.push(0);
    out.push(size as u8);
    out.push(name.len() as u8);
    out.extend_from_slice(name);
    out.extend_from_slice(&payload);
    out
}

fn write_deployment(dir: &Path, n: usize) {
    let mut toml = String::new();
    for i in 0..n {
        std::fs::write(
            dir.join(format!("g{i}.wasm")),
            distinct(bundled::ALLOW_TOOLS, i),
        )
        .unwrap();
        toml.push_str(&format!(
            "[[plugin]]\nname = \"g{i}\"\npath = \"g{i}.wasm\"\nrole = \"gate\"\n[plugin.config]\ntools = \"read\"\n\n"
        ));
    }
    std::fs::write(dir.join("deploy.toml"), toml).unwrap();
}

fn options(dir: &Path) -> ServeOptions {
    ServeOptions {
        config: dir.join("deploy.toml"),
        state_dir: dir.join("state"),
        quarantine: QuarantinePolicy::default(),
        store_url: None,
        migrate: false,
    }
}

async fn startup(n: usize) -> (Duration, Duration) {
    let dir = tempfile::tempdir().unwrap();
    write_deployment(dir.path(), n);
    let t = Instant::now();
    drop(Server::start(options(dir.path())).await.unwrap());
    let cold = t.elapsed();
    let t = Instant::now();
    drop(Server::start(options(dir.path())).await.unwrap());
    (cold, t.elapsed())
}

async fn reload_latency(debounce: Duration, rounds: usize) -> Vec<Duration> {
    let dir = tempfile::tempdir().unwrap();
    write_deployment(dir.path(), 1);
    let server = Server::start(options(dir.path())).await.unwrap();
    let _watch = server.watch(debounce).await.unwrap();
    let service = server.service().clone();
    let agent = service.agent("s", "a").await.unwrap();
    service.start_turn("s").await.unwrap();
    let mut out = Vec::new();
    for round in 0..rounds {
        // Alternate between a gate that grants `read` and one that does not.
        let grants = round % 2 == 1;
        let bytes = if grants {
            distinct(bundled::ALLOW_TOOLS, 1000 + round)
        } else {
            distinct(bundled::REJECT_ALL, 1000 + round)
        };
        let want = if grants {
            Outcome::AllowedOnce
        } else {
            Outcome::Rejected
        };
        let t = Instant::now();
        std::fs::write(dir.path().join("g0.wasm"), bytes).unwrap();
        loop {
            let o = service
                .request(ApprovalRequest::new(&agent, "read"))
                .await
                .unwrap();
            if o == want {
                break;
            }
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "the reload never landed"
            );
        }
        out.push(t.elapsed());
    }
    out.sort();
    out
}

async fn client(socket: &Path, session: String, deadline: Instant) -> u64 {
    let stream = tokio::net::UnixStream::connect(socket).await.unwrap();
    let (read, mut write) = stream.into_split();
    let mut lines = BufReader::new(read).lines();
    let mut id = 0u64;
    let mut call = async |method: &str, params: Value| -> Value {
        id += 1;
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        write
            .write_all(format!("{msg}\n").as_bytes())
            .await
            .unwrap();
        let line = lines.next_line().await.unwrap().unwrap();
        serde_json::from_str(&line).unwrap()
    };
    call(
        "session/open",
        json!({"sessionId": session, "agentId": "a"}),
    )
    .await;
    call("turn/start", json!({"sessionId": session})).await;
    let mut n = 0;
    while Instant::now() < deadline {
        let r = call(
            "approval/request",
            json!({"sessionId": session, "agentId": "a", "toolName": "read"}),
        )
        .await;
        assert_eq!(r["result"]["outcome"], "allowed-once", "{r}");
        n += 1;
    }
    n
}

async fn serve_rate(clients: usize, seconds: f64) -> f64 {
    let dir = tempfile::tempdir().unwrap();
    write_deployment(dir.path(), 1);
    let server = Server::start(options(dir.path())).await.unwrap();
    let socket = dir.path().join("host.sock");
    let s = server.clone();
    let path = socket.clone();
    let listener = tokio::spawn(async move { s.serve_unix(&path).await });
    while !socket.exists() {
        tokio::task::yield_now().await;
    }
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let start = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|i| tokio::spawn(client_owned(socket.clone(), format!("c{i}"), deadline)))
        .collect();
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap();
    }
    listener.abort();
    total as f64 / start.elapsed().as_secs_f64()
}

async fn client_owned(socket: std::path::PathBuf, session: String, deadline: Instant) -> u64 {
    client(&socket, session, deadline).await
}

fn main() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        println!("start-up (Server::start: parse, load, compile or deserialize, pre-link)");
        println!("{:<24} {:>12} {:>12}", "plugins", "cold ms", "warm ms");
        for n in [1, 8, 32] {
            let (cold, warm) = startup(n).await;
            println!(
                "{n:<24} {:>12.1} {:>12.1}",
                cold.as_secs_f64() * 1e3,
                warm.as_secs_f64() * 1e3
            );
        }
        println!();
        let debounce = Duration::from_millis(50);
        let l = reload_latency(debounce, 9).await;
        println!(
            "plugin file changed -> new version answering ({} ms debounce, 9 rounds): median {:.1} ms, max {:.1} ms",
            debounce.as_millis(),
            l[l.len() / 2].as_secs_f64() * 1e3,
            l[l.len() - 1].as_secs_f64() * 1e3
        );
        println!();
        println!("{:<24} {:>12}", "serve (unix socket)", "requests/s");
        for clients in [1, 16] {
            let rate = serve_rate(clients, 2.0).await;
            println!("{:<24} {rate:>12.0}", format!("{clients} client(s)"));
        }
    });
}
