//! `serve` under attack, against itself in quiet, same run: a well-behaved client asks
//! `approval/request` in a loop (median and p99) while 2,000 connections that never authenticate
//! (from 40 loopback addresses, 50 each, back a second after the server closes one), 50
//! authenticated clients that send requests for a method that does not exist and never read
//! the errors (back a second after
//! being dropped), and 200 slowloris connections against the console (a header line a second)
//! run beside it, on a runtime and thread of their own. The server
//! is its own process (`approval-host serve --listen … --http …`, plain TCP on loopback, default
//! `[limits]`); its resident memory is read from `/proc` every 100 ms.
//!
//! Run: `RUST_BACKTRACE=0 RUST_LIB_BACKTRACE=0 cargo bench -p approval-host --bench under_attack`
//! (`BENCH_SAMPLES`, default 2000; `BENCH_ATTACK_S`, how long the attack runs before the
//! measurement starts, default 5).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use approval_host::bundled;
use approval_host::serve::auth;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

#[path = "common/lines.rs"]
mod lines;
use lines::Client;

const BIN: &str = env!("CARGO_BIN_EXE_approval-host");
const TOKEN: &str = "aht_bench_token_000000000000000000000000000000000000000000000000000";
const PERSON: &str = "aht_bench_person_00000000000000000000000000000000000000000000000000";

/// A free loopback port (bound and let go: the server takes it a moment later).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The server's resident memory, in MiB.
fn rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// Connects to `addr` from the loopback address `127.0.0.<from>`.
async fn connect_from(from: u8, addr: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(
        IpAddr::V4(Ipv4Addr::new(127, 0, 0, from)),
        0,
    ))?;
    socket.connect(addr).await
}

/// The well-behaved client.
struct Polite(Client<TcpStream>);

impl Polite {
    async fn call(&mut self, method: &str, params: Value) -> Value {
        self.0.call(method, params).await
    }

    /// Median and p99 of `samples` requests, in µs.
    async fn latency(&mut self, samples: usize) -> (f64, f64) {
        let ask = json!({"sessionId": "polite", "agentId": "a", "toolName": "read"});
        let mut times = Vec::with_capacity(samples);
        for _ in 0..samples {
            let t = Instant::now();
            let r = self.call("approval/request", ask.clone()).await;
            times.push(t.elapsed().as_secs_f64() * 1e6);
            assert_eq!(r["result"]["outcome"], "allowed-once");
        }
        times.sort_by(f64::total_cmp);
        (times[samples / 2], times[samples * 99 / 100])
    }
}

/// What the attackers saw.
#[derive(Default)]
struct Seen {
    idle_closed: AtomicU64,
    flooders_dropped: AtomicU64,
    slowloris_closed: AtomicU64,
}

fn spawn_server(dir: &std::path::Path, rpc: u16, http: u16) -> Child {
    std::fs::write(dir.join("gate.wasm"), bundled::ALLOW_TOOLS).unwrap();
    std::fs::write(
        dir.join("deploy.toml"),
        format!(
            "[[plugin]]\nname = \"gate\"\npath = \"gate.wasm\"\nrole = \"gate\"\n[plugin.config]\ntools = \"read\"\n\n\
             [[answerer]]\nkind = \"web\"\ntimeout_s = 60\n\n\
             [[token]]\nname = \"bench\"\nsha256 = \"{}\"\nroles = [\"agent\"]\n\n\
             [[token]]\nname = \"person\"\nsha256 = \"{}\"\nroles = [\"answerer\"]\n",
            auth::token_hash(TOKEN),
            auth::token_hash(PERSON)
        ),
    )
    .unwrap();
    Command::new(BIN)
        .arg("--state-dir")
        .arg(dir.join("state"))
        .args(["serve", "--config"])
        .arg(dir.join("deploy.toml"))
        .args(["--no-watch", "--insecure-plaintext", "--listen"])
        .arg(format!("127.0.0.1:{rpc}"))
        .arg("--http")
        .arg(format!("127.0.0.1:{http}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

fn main() {
    let samples: usize = std::env::var("BENCH_SAMPLES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2000);
    let attack_s: u64 = std::env::var("BENCH_ATTACK_S")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let dir = tempfile::tempdir().unwrap();
    let (rpc_port, http_port) = (free_port(), free_port());
    let mut child = spawn_server(dir.path(), rpc_port, http_port);
    let pid = child.id();
    let rpc = SocketAddr::from(([127, 0, 0, 1], rpc_port));
    let http = SocketAddr::from(([127, 0, 0, 1], http_port));
    // The attackers run on a runtime (and threads) of their own, so the well-behaved client's
    // timings are not its own scheduler's queue behind theirs.
    let attack = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let stream = loop {
            if let Ok(s) = TcpStream::connect(rpc).await {
                break s;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        stream.set_nodelay(true).unwrap();
        let mut polite = Polite(Client::new(stream));
        polite
            .call("initialize", json!({"protocolVersion": "0.1", "token": TOKEN}))
            .await;
        polite
            .call("session/open", json!({"sessionId": "polite", "agentId": "a"}))
            .await;
        polite.call("turn/start", json!({"sessionId": "polite"})).await;
        polite.latency(200).await;

        let quiet_rss = rss_mib(pid);
        let (q50, q99) = polite.latency(samples).await;

        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Seen::default());
        let mut attackers = tokio::task::JoinSet::new();
        let attack = attack.handle();
        // 2,000 connections that never authenticate: 50 from each of 40 addresses.
        for i in 0..2000u32 {
            let (stop, seen) = (stop.clone(), seen.clone());
            let from = 10 + (i / 50) as u8;
            attackers.spawn_on(async move {
                while !stop.load(Ordering::Relaxed) {
                    let Ok(mut s) = connect_from(from, rpc).await else {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    };
                    let mut sink = Vec::new();
                    tokio::select! {
                        _ = s.read_to_end(&mut sink) => {
                            seen.idle_closed.fetch_add(1, Ordering::Relaxed);
                        }
                        () = async { while !stop.load(Ordering::Relaxed) {
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        } } => {}
                    }
                    // Closed (refused at the door, or after the deadline): come back in a second.
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }, attack);
        }
        // 50 authenticated clients that send requests and never read the replies.
        for i in 0..50u32 {
            let (stop, seen) = (stop.clone(), seen.clone());
            let from = 100 + (i / 10) as u8;
            attackers.spawn_on(async move {
                // Requests for a method that does not exist: each earns an error reply.
                let chunk = "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"no/such\"}\n"
                    .repeat(512)
                    .into_bytes();
                while !stop.load(Ordering::Relaxed) {
                    let Ok(mut s) = connect_from(from, rpc).await else {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    };
                    let hello = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"token": TOKEN}});
                    if s.write_all(format!("{hello}\n").as_bytes()).await.is_err() {
                        continue;
                    }
                    while !stop.load(Ordering::Relaxed) {
                        if s.write_all(&chunk).await.is_err() {
                            seen.flooders_dropped.fetch_add(1, Ordering::Relaxed);
                            break;
                        }
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }, attack);
        }
        // 200 slowloris connections against the console: one header line a second, never done.
        for i in 0..200u32 {
            let (stop, seen) = (stop.clone(), seen.clone());
            let from = 150 + (i / 50) as u8;
            attackers.spawn_on(async move {
                while !stop.load(Ordering::Relaxed) {
                    let Ok(mut s) = connect_from(from, http).await else {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    };
                    let _ = s.write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\n").await;
                    while !stop.load(Ordering::Relaxed) {
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        if s.write_all(b"X-Slow: 1\r\n").await.is_err() {
                            seen.slowloris_closed.fetch_add(1, Ordering::Relaxed);
                            break;
                        }
                    }
                }
            }, attack);
        }
        let peak = Arc::new(AtomicU64::new(0));
        let sampler = {
            let (stop, peak) = (stop.clone(), peak.clone());
            attack.spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let kib = (rss_mib(pid) * 1024.0) as u64;
                    peak.fetch_max(kib, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            })
        };
        tokio::time::sleep(Duration::from_secs(attack_s)).await;
        let (a50, a99) = polite.latency(samples).await;
        let attack_rss = rss_mib(pid);
        stop.store(true, Ordering::Relaxed);
        let _ = sampler.await;
        attackers.abort_all();
        while attackers.join_next().await.is_some() {}

        println!("serve under attack: {samples} sequential approval/requests per row, one well-behaved client, server in its own process");
        println!(
            "{:<34} {:>10} {:>10} {:>10} {:>10}",
            "", "median µs", "p99 µs", "× quiet", "RSS MiB"
        );
        println!(
            "{:<34} {q50:>10.1} {q99:>10.1} {:>10.2} {quiet_rss:>10.1}",
            "quiet", 1.0
        );
        println!(
            "{:<34} {a50:>10.1} {a99:>10.1} {:>10.2} {attack_rss:>10.1}",
            "under attack (p99 ratio)",
            a99 / q99
        );
        println!(
            "peak RSS during the attack: {:.1} MiB; idle connections closed by the server: {}; \
             non-reading clients dropped: {}; slowloris connections closed: {}",
            peak.load(Ordering::Relaxed) as f64 / 1024.0,
            seen.idle_closed.load(Ordering::Relaxed),
            seen.flooders_dropped.load(Ordering::Relaxed),
            seen.slowloris_closed.load(Ordering::Relaxed),
        );
    });
    let _ = child.kill();
    let _ = child.wait();
}
