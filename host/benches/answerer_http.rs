//! A decision through an answerer that makes one HTTP request (plugin API 0.3, `wasi:http`,
//! checked by the host's send hook) beside a native answerer that makes the same request with
//! hyper, through the same seam, in the same run, interleaved; and the bare request for scale.
//! Both open a new connection per request to a loopback server, as the plugin's host does.
//!
//! The session log discards its bytes (`common::NullStore`): the figures are the seam, the
//! plugin and the request, not the disk.
//! Run: `RUST_BACKTRACE=0 RUST_LIB_BACKTRACE=0 cargo bench -p approval-host --bench answerer_http`
//! (`BENCH_SAMPLES`, default 2000).

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use approval_host::config::{PluginSpec, Role};
use approval_host::plugin::net::HostGrant;
use approval_host::{
    Agent, ApprovalRequest, ApprovalService, Decision, Failure, Mounted, Outcome, PluginHost,
    Policy, Position, Question, Scope, bundled,
};
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;

use common::NullStore;

/// One GET of `/allow` on a new connection: whether the body says `allow`.
async fn get_allow(port: u16) -> bool {
    let stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let _ = stream.set_nodelay(true);
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(connection);
    let request = hyper::Request::get("/allow")
        .header("host", format!("127.0.0.1:{port}"))
        .body(Empty::<Bytes>::new())
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    &body[..] == b"allow"
}

async fn serve_allow() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let app = axum::Router::new().route("/allow", axum::routing::get(|| async { "allow" }));
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    port
}

async fn one(service: &ApprovalService, agent: &Agent) -> Duration {
    let start = Instant::now();
    let outcome = service
        .request(ApprovalRequest::new(agent, "bash"))
        .await
        .unwrap();
    assert_eq!(outcome, Outcome::AllowedOnce);
    start.elapsed()
}

fn percentile(sorted: &[Duration], p: usize) -> f64 {
    sorted[(sorted.len() * p / 100).min(sorted.len() - 1)].as_secs_f64() * 1e6
}

fn main() {
    let samples: usize = std::env::var("BENCH_SAMPLES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2000);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let port = serve_allow().await;

        // The plugin: http-probe GETs its url and allows on `allow`.
        let wasm = ApprovalService::with_store(Arc::new(NullStore), Policy::Ask);
        let host = PluginHost::new().unwrap();
        let mut spec = PluginSpec::new("probe", bundled::HTTP_PROBE_PATH, Role::Answerer);
        spec.allow_hosts = vec![HostGrant::parse(&format!("http://127.0.0.1:{port}")).unwrap()];
        spec.config
            .insert("url".into(), format!("http://127.0.0.1:{port}/allow"));
        let _mounted = Mounted::mount(&wasm, vec![host.load(&spec).unwrap()]);
        let wasm_agent = wasm.agent("w", "a").await.unwrap();
        wasm.start_turn("w").await.unwrap();

        // The native answerer: the same request, made by the host with hyper.
        let native = ApprovalService::with_store(Arc::new(NullStore), Policy::Ask);
        let _registration = native.register(
            "native-http",
            Scope::Global,
            Position::Back,
            move |_q: Question| async move {
                Ok::<_, Failure>(if get_allow(port).await {
                    Decision::AllowOnce
                } else {
                    Decision::Reject
                })
            },
        );
        let native_agent = native.agent("n", "a").await.unwrap();
        native.start_turn("n").await.unwrap();

        for _ in 0..samples / 10 {
            one(&wasm, &wasm_agent).await;
            one(&native, &native_agent).await;
            assert!(get_allow(port).await);
        }
        let (mut w, mut n, mut bare) = (
            Vec::with_capacity(samples),
            Vec::with_capacity(samples),
            Vec::with_capacity(samples),
        );
        for _ in 0..samples {
            w.push(one(&wasm, &wasm_agent).await);
            n.push(one(&native, &native_agent).await);
            let start = Instant::now();
            assert!(get_allow(port).await);
            bare.push(start.elapsed());
        }
        for v in [&mut w, &mut n, &mut bare] {
            v.sort();
        }
        println!("answerer_http: {samples} decisions each, interleaved, same run");
        println!("{:<48} {:>10} {:>10}", "", "p50 µs", "p99 µs");
        for (label, v) in [
            ("the bare request (hyper, new connection)", &bare),
            ("native answerer making the request", &n),
            ("wasm answerer (wasi:http) making the request", &w),
        ] {
            println!(
                "{label:<48} {:>10.1} {:>10.1}",
                percentile(v, 50),
                percentile(v, 99)
            );
        }
        println!(
            "wasm / native decision at p50: {:.2}× (goal: at most 2×)",
            percentile(&w, 50) / percentile(&n, 50)
        );
    });
}
