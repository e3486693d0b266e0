//! Request latency through `serve` over its transports: the Unix socket against TCP with TLS
//! (and plain TCP), same server, same run. One client asks `approval/request` in a loop on an
//! open session; the deployment's `allow-tools` gate grants `read`, the session log is on disk.
//! Run: `cargo bench -p approval-host --bench network` (`BENCH_SAMPLES`, default 2000).

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use approval_host::bundled;
use approval_host::plugin::QuarantinePolicy;
use approval_host::serve::{ServeOptions, Server, auth};
use serde_json::json;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::rustls;

#[path = "common/lines.rs"]
mod lines;
use lines::Client;

const TOKEN: &str = "aht_bench_token_000000000000000000000000000000000000000000000000000";

/// Median and p99 of `samples` requests, in µs, after a warm-up.
async fn latency<S: AsyncRead + AsyncWrite + Unpin>(
    stream: S,
    session: &str,
    samples: usize,
) -> (f64, f64) {
    let mut c = Client::new(stream);
    c.call(
        "initialize",
        json!({"protocolVersion": "0.1", "token": TOKEN}),
    )
    .await;
    c.call(
        "session/open",
        json!({"sessionId": session, "agentId": "a"}),
    )
    .await;
    c.call("turn/start", json!({"sessionId": session})).await;
    let ask = json!({"sessionId": session, "agentId": "a", "toolName": "read"});
    for _ in 0..200 {
        c.call("approval/request", ask.clone()).await;
    }
    let mut times = Vec::with_capacity(samples);
    for _ in 0..samples {
        let t = Instant::now();
        let r = c.call("approval/request", ask.clone()).await;
        times.push(t.elapsed().as_secs_f64() * 1e6);
        assert_eq!(r["result"]["outcome"], "allowed-once");
    }
    times.sort_by(f64::total_cmp);
    (times[samples / 2], times[samples * 99 / 100])
}

fn setup(dir: &Path) -> (ServeOptions, rustls::pki_types::CertificateDer<'static>) {
    std::fs::write(dir.join("gate.wasm"), bundled::ALLOW_TOOLS).unwrap();
    std::fs::write(
        dir.join("deploy.toml"),
        format!(
            "[[plugin]]\nname = \"gate\"\npath = \"gate.wasm\"\nrole = \"gate\"\n[plugin.config]\ntools = \"read\"\n\n\
             [[token]]\nname = \"bench\"\nsha256 = \"{}\"\nroles = [\"agent\"]\n",
            auth::token_hash(TOKEN)
        ),
    )
    .unwrap();
    let made = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    std::fs::write(dir.join("cert.pem"), made.cert.pem()).unwrap();
    std::fs::write(dir.join("key.pem"), made.signing_key.serialize_pem()).unwrap();
    (
        ServeOptions {
            config: dir.join("deploy.toml"),
            state_dir: dir.join("state"),
            quarantine: QuarantinePolicy::default(),
            store_url: None,
            migrate: false,
        },
        made.cert.der().clone(),
    )
}

fn main() {
    let samples: usize = std::env::var("BENCH_SAMPLES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2000);
    let dir = tempfile::tempdir().unwrap();
    let (options, cert) = setup(dir.path());
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let server = Server::start(options).await.unwrap();
        let socket = dir.path().join("serve.sock");
        {
            let (s, p) = (server.clone(), socket.clone());
            tokio::spawn(async move { s.serve_unix(&p).await });
        }
        let acceptor = approval_host::serve::tls::acceptor(&approval_host::serve::tls::TlsFiles {
            cert: dir.path().join("cert.pem"),
            key: dir.path().join("key.pem"),
            client_ca: None,
        })
        .unwrap();
        let listen = |tls: Option<tokio_rustls::TlsAcceptor>| {
            let s = server.clone();
            let (tx, rx) = tokio::sync::oneshot::channel();
            tokio::spawn(async move { s.serve_tcp("127.0.0.1:0", tls, Some(tx)).await });
            rx
        };
        let tls_addr = listen(Some(acceptor)).await.unwrap();
        let plain_addr = listen(None).await.unwrap();

        println!("request latency through serve, {samples} sequential requests per row (one client, file store)");
        println!("{:<28} {:>10} {:>10} {:>10}", "transport", "median µs", "p99 µs", "× unix");
        let unix = loop {
            if let Ok(s) = tokio::net::UnixStream::connect(&socket).await {
                break s;
            }
            tokio::task::yield_now().await;
        };
        let (u50, u99) = latency(unix, "bench-unix", samples).await;
        println!("{:<28} {u50:>10.1} {u99:>10.1} {:>10.2}", "Unix socket", 1.0);

        let mut roots = rustls::RootCertStore::empty();
        roots.add(cert).unwrap();
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
        let tcp = tokio::net::TcpStream::connect(tls_addr).await.unwrap();
        tcp.set_nodelay(true).unwrap();
        let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(
                rustls::pki_types::ServerName::try_from("localhost").unwrap(),
                tcp,
            )
            .await
            .unwrap();
        let (t50, t99) = latency(tls, "bench-tls", samples).await;
        println!("{:<28} {t50:>10.1} {t99:>10.1} {:>10.2}", "TCP + TLS 1.3 (loopback)", t50 / u50);

        let tcp = tokio::net::TcpStream::connect(plain_addr).await.unwrap();
        tcp.set_nodelay(true).unwrap();
        let (p50, p99) = latency(tcp, "bench-tcp", samples).await;
        println!("{:<28} {p50:>10.1} {p99:>10.1} {:>10.2}", "TCP plaintext (loopback)", p50 / u50);
    });
}
