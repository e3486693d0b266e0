//! A web page cannot read or drive `serve`'s loopback listeners (issue 39, point 3): the
//! console and the metrics address answer only a request naming a loopback `Host`, and a
//! browser's `Origin` only when it is their own; a DNS name rebound to 127.0.0.1 or another
//! local page's origin is refused before any route runs, and the ordinary requests still work.

use approval_host::serve::rebinding::{CROSS_ORIGIN, HOST_NOT_LOOPBACK};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One request with exactly these header lines; the status and body.
async fn raw(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    headers: &[String],
) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut request = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    for h in headers {
        request.push_str(h);
        request.push_str("\r\n");
    }
    if method == "POST" {
        request
            .push_str("Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 0\r\n");
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, body.to_owned())
}

/// Hosts a rebound name or a confused client might send, none of them loopback.
const FOREIGN_HOSTS: &[&str] = &[
    "evil.example",
    "evil.example:9090",
    "localhost.evil.example",
    "127.0.0.1.nip.io",
    "0.0.0.0",
    "10.0.0.7:80",
    "[::]",
    "user@127.0.0.1",
];

/// Origins other than the listener's own.
fn foreign_origins(port: u16) -> Vec<String> {
    vec![
        "null".into(),
        "http://evil.example".into(),
        format!("http://evil.example:{port}"),
        "http://localhost:1".into(),
        format!("file://127.0.0.1:{port}"),
        format!("http://127.0.0.1:{port}.evil.example"),
    ]
}

async fn refuses_foreign_requests(addr: std::net::SocketAddr, method: &str, path: &str) {
    for host in FOREIGN_HOSTS {
        let (status, body) = raw(addr, method, path, &[format!("Host: {host}")]).await;
        assert_eq!(
            (status, body.as_str()),
            (403, HOST_NOT_LOOPBACK),
            "Host: {host}"
        );
    }
    let (status, body) = raw(addr, method, path, &[]).await;
    assert_eq!((status, body.as_str()), (403, HOST_NOT_LOOPBACK), "no Host");
    let own = format!("127.0.0.1:{}", addr.port());
    for origin in foreign_origins(addr.port()) {
        let headers = [format!("Host: {own}"), format!("Origin: {origin}")];
        let (status, body) = raw(addr, method, path, &headers).await;
        assert_eq!(
            (status, body.as_str()),
            (403, CROSS_ORIGIN),
            "Origin: {origin}"
        );
    }
}

#[tokio::test]
async fn the_metrics_address_on_loopback_answers_only_loopback_hosts_of_its_own_origin() {
    let dir = tempfile::tempdir().unwrap();
    let (server, _console) = crate::console::server(dir.path(), 30).await;
    let metrics = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr_metrics = metrics.local_addr().unwrap();
    tokio::spawn(async move { server.serve_metrics(metrics).await });
    for path in ["/metrics", "/readyz", "/healthz"] {
        refuses_foreign_requests(addr_metrics, "GET", path).await;
    }
    // What a scraper and a person on this machine send still works, by every loopback name.
    let port = addr_metrics.port();
    for host in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        "localhost".to_owned(),
        format!("[::1]:{port}"),
    ] {
        let (status, body) = raw(addr_metrics, "GET", "/metrics", &[format!("Host: {host}")]).await;
        assert_eq!(status, 200, "Host: {host}: {body}");
        assert!(body.contains("# TYPE"), "{body}");
    }
    let same = [
        format!("Host: 127.0.0.1:{port}"),
        format!("Origin: http://127.0.0.1:{port}"),
    ];
    assert_eq!(raw(addr_metrics, "GET", "/readyz", &same).await.0, 200);
}

#[tokio::test]
async fn the_console_on_loopback_answers_only_loopback_hosts_of_its_own_origin() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, addr) = crate::console::server(dir.path(), 30).await;
    for (method, path) in [
        ("GET", "/"),
        ("GET", "/login"),
        ("POST", "/login"),
        ("POST", "/answer"),
    ] {
        refuses_foreign_requests(addr, method, path).await;
    }
    // The login page a person opens still loads, and a same-origin form post reaches the route
    // (refused there for its empty form, not here).
    let port = addr.port();
    let (status, body) = raw(addr, "GET", "/login", &[format!("Host: localhost:{port}")]).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("<form"), "{body}");
    let headers = [
        format!("Host: 127.0.0.1:{port}"),
        format!("Origin: http://127.0.0.1:{port}"),
    ];
    let (status, body) = raw(addr, "POST", "/login", &headers).await;
    assert_ne!(status, 403, "{body}");
    assert_ne!(body, CROSS_ORIGIN);
}
