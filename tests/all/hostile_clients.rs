//! `serve` against clients that do not play fair: before authentication a connection gets one
//! error and is closed, whatever it sends; it has `[limits] authenticate_within_s` to
//! authenticate; connections are capped in all and per address; a client that does not read
//! its replies is dropped; requests in flight per connection and sessions per token are capped;
//! a token removed from the deployment ends its connections, console logins and event streams;
//! and the console closes a slow request head, refuses a large body and caps a login's streams.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use approval_host::plugin::QuarantinePolicy;
use approval_host::serve::console::limits::{BODY_TOO_LARGE, TOO_MANY_STREAMS};
use approval_host::serve::limits::{self, LIMITED};
use approval_host::serve::{ServeOptions, Server, auth};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

use crate::serve_network::{Client, ok};

const AGENT: &str = "aht_hostile_agent_token_00000000000000000000000000000000000000000000";
const OTHER: &str = "aht_hostile_other_token_00000000000000000000000000000000000000000000";
const PERSON: &str = "aht_hostile_person_token_0000000000000000000000000000000000000000000";

const PATIENCE: Duration = Duration::from_secs(20);

/// A deployment with the web console and three tokens (`ci` and `other`, agents; `person`, an
/// answerer), `[limits]` as given, and, unless `keep_ci`, without the `ci` token.
fn write_deployment(dir: &Path, limits: &str, keep_ci: bool) -> PathBuf {
    let config = dir.join("deploy.toml");
    let ci = if keep_ci {
        format!(
            "[[token]]\nname = \"ci\"\nsha256 = \"{}\"\nroles = [\"agent\"]\n\n",
            auth::token_hash(AGENT)
        )
    } else {
        String::new()
    };
    std::fs::write(
        &config,
        format!(
            "[[answerer]]\nkind = \"web\"\ntimeout_s = 60\n\n{ci}\
             [[token]]\nname = \"other\"\nsha256 = \"{}\"\nroles = [\"agent\"]\n\n\
             [[token]]\nname = \"person\"\nsha256 = \"{}\"\nroles = [\"answerer\"]\n\n\
             [limits]\n{limits}\n",
            auth::token_hash(OTHER),
            auth::token_hash(PERSON),
        ),
    )
    .unwrap();
    config
}

async fn start(dir: &Path, limits: &str) -> Server {
    Server::start(ServeOptions {
        config: write_deployment(dir, limits, true),
        state_dir: dir.join("state"),
        quarantine: QuarantinePolicy::default(),
        store_url: None,
        migrate: false,
    })
    .await
    .unwrap()
}

/// Serves plain TCP on a loopback port.
async fn listen_tcp(server: &Server) -> std::net::SocketAddr {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let s = server.clone();
    tokio::spawn(async move { s.serve_tcp("127.0.0.1:0", None, Some(tx)).await });
    rx.await.unwrap()
}

/// Serves the Unix socket at `dir/serve.sock` and returns its path once it answers.
async fn listen_unix(server: &Server, dir: &Path) -> PathBuf {
    let path = dir.join("serve.sock");
    let (s, p) = (server.clone(), path.clone());
    tokio::spawn(async move { s.serve_unix(&p).await });
    let started = Instant::now();
    while !path.exists() {
        assert!(started.elapsed() < PATIENCE, "the socket never appeared");
        tokio::task::yield_now().await;
    }
    path
}

/// Serves the console on a loopback port.
async fn listen_console(server: &Server) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let s = server.clone();
    tokio::spawn(async move { s.serve_console(listener, None).await });
    addr
}

/// Every line the server sends until it closes the connection (which must happen in time).
async fn lines_until_closed<S: tokio::io::AsyncRead + Unpin>(stream: S) -> Vec<Value> {
    let mut reader = BufReader::new(stream);
    let mut lines = Vec::new();
    let read_all = async {
        loop {
            let mut line = String::new();
            match reader.read_line(&mut line).await {
                Ok(0) | Err(_) => break,
                Ok(_) => lines.push(serde_json::from_str(&line).unwrap()),
            }
        }
    };
    tokio::time::timeout(PATIENCE, read_all)
        .await
        .expect("the server kept the connection open");
    lines
}

fn error_of(reply: &Value) -> (i64, &str) {
    let e = reply
        .get("error")
        .unwrap_or_else(|| panic!("not an error: {reply}"));
    (e["code"].as_i64().unwrap(), e["message"].as_str().unwrap())
}

async fn waits_until(what: &str, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < PATIENCE, "{what} never happened");
        tokio::task::yield_now().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn before_authentication_anything_but_initialize_gets_one_error_and_the_connection_closes() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), "").await;
    let addr = listen_tcp(&server).await;
    let mut long = vec![b'y'; 2 << 20];
    long.push(b'\n');
    let hostile: Vec<(&str, Vec<u8>)> = vec![
        ("not JSON", b"x\n".to_vec()),
        ("broken JSON", b"{not json\n".to_vec()),
        ("not UTF-8", b"\xff\xfe\x00\n".to_vec()),
        ("longer than a message may be", long),
        ("an array", b"[]\n".to_vec()),
        (
            "a notification",
            br#"{"jsonrpc":"2.0","method":"turn/start","params":{"sessionId":"s"}}"#.to_vec(),
        ),
        (
            "a response",
            br#"{"jsonrpc":"2.0","id":1,"result":{"decision":"allow-once"}}"#.to_vec(),
        ),
        (
            "a request other than initialize",
            br#"{"jsonrpc":"2.0","id":1,"method":"session/open","params":{"sessionId":"s","agentId":"a"}}"#.to_vec(),
        ),
        (
            "initialize as a notification",
            br#"{"jsonrpc":"2.0","method":"initialize","params":{}}"#.to_vec(),
        ),
    ];
    for (what, bytes) in hostile {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut bytes = bytes;
        if bytes.last() != Some(&b'\n') {
            bytes.push(b'\n');
        }
        // Then more of the same, which must not be answered.
        bytes.extend_from_slice(b"x\nx\nx\n");
        let _ = stream.write_all(&bytes).await;
        let lines = lines_until_closed(stream).await;
        assert_eq!(lines.len(), 1, "{what}: {lines:?}");
        assert_eq!(
            error_of(&lines[0]),
            (auth::UNAUTHENTICATED, auth::NOT_AUTHENTICATED),
            "{what}"
        );
    }
    // A wrong token is one error too.
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(
            format!(
                "{}\nx\n",
                json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"token": "aht_wrong"}})
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    let lines = lines_until_closed(stream).await;
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(
        error_of(&lines[0]),
        (auth::UNAUTHENTICATED, auth::BAD_TOKEN)
    );

    // Once authenticated, a bad line is an error and the connection goes on.
    let mut c = Client::new(tokio::net::TcpStream::connect(addr).await.unwrap());
    ok(&c
        .call(
            "initialize",
            json!({"protocolVersion": "0.1", "token": AGENT}),
        )
        .await);
    c.send_value(&json!("x")).await;
    let reply = c.line().await.unwrap();
    assert_eq!(reply["error"]["code"], -32600);
    ok(&c
        .call("session/open", json!({"sessionId": "s1", "agentId": "a"}))
        .await);

    // But a client that sends nothing but garbage is closed at the 32nd invalid line in a row.
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let hello =
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"token": AGENT}});
    let mut flood = format!("{hello}\n");
    flood.push_str(&"x\n".repeat(31));
    // A valid message ends the run...
    flood.push_str("{\"jsonrpc\":\"2.0\",\"method\":\"no/such\"}\n");
    flood.push_str(&"x\n".repeat(40));
    stream.write_all(flood.as_bytes()).await.unwrap();
    let lines = lines_until_closed(stream).await;
    // (The initialize reply may come anywhere among them: it is answered in its own task.)
    let errors: Vec<&Value> = lines.iter().filter(|l| l["id"] != 1).collect();
    let codes: Vec<i64> = errors.iter().map(|l| error_of(l).0).collect();
    assert_eq!(codes, vec![-32700; 31 + 32], "{lines:?}");
    assert_eq!(error_of(errors.last().unwrap()).1, limits::TOO_MANY_INVALID);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_does_not_authenticate_in_time_is_closed_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), "authenticate_within_s = 1").await;
    let addr = listen_tcp(&server).await;
    let mut prompt = Client::new(tokio::net::TcpStream::connect(addr).await.unwrap());
    ok(&prompt
        .call(
            "initialize",
            json!({"protocolVersion": "0.1", "token": AGENT}),
        )
        .await);
    // Opened after the prompt one: its deadline passes later.
    let idle = tokio::net::TcpStream::connect(addr).await.unwrap();
    let lines = lines_until_closed(idle).await;
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(
        error_of(&lines[0]),
        (
            auth::UNAUTHENTICATED,
            limits::authenticate_too_late(Duration::from_secs(1)).as_str()
        )
    );
    assert_eq!(
        server
            .admission()
            .counters
            .late_authentication
            .load(Ordering::Relaxed),
        1
    );
    // The connection that authenticated in time is still served.
    ok(&prompt
        .call("session/open", json!({"sessionId": "s1", "agentId": "a"}))
        .await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_the_total_or_an_address_s_share_are_refused_at_the_door() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), "connections = 100\nconnections_per_address = 2").await;
    let addr = listen_tcp(&server).await;
    let first = tokio::net::TcpStream::connect(addr).await.unwrap();
    let _second = tokio::net::TcpStream::connect(addr).await.unwrap();
    waits_until("two connections admitted", || {
        server.admission().open_connections() == 2
    })
    .await;
    let third = tokio::net::TcpStream::connect(addr).await.unwrap();
    let lines = lines_until_closed(third).await;
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(
        error_of(&lines[0]),
        (LIMITED, limits::too_many_from_address(2).as_str())
    );
    drop(first);
    waits_until("the first connection's place freed", || {
        server.admission().open_connections() == 1
    })
    .await;
    let mut again = Client::new(tokio::net::TcpStream::connect(addr).await.unwrap());
    ok(&again
        .call(
            "initialize",
            json!({"protocolVersion": "0.1", "token": AGENT}),
        )
        .await);

    // The total counts the Unix socket too (which has no address share).
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), "connections = 2").await;
    let path = listen_unix(&server, dir.path()).await;
    let _a = tokio::net::UnixStream::connect(&path).await.unwrap();
    let _b = tokio::net::UnixStream::connect(&path).await.unwrap();
    waits_until("two connections admitted", || {
        server.admission().open_connections() == 2
    })
    .await;
    let lines = lines_until_closed(tokio::net::UnixStream::connect(&path).await.unwrap()).await;
    assert_eq!(
        error_of(&lines[0]),
        (LIMITED, limits::too_many_connections(2).as_str())
    );
    assert_eq!(
        server
            .admission()
            .counters
            .refused_connections
            .load(Ordering::Relaxed),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_its_replies_is_dropped_and_others_are_served() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), "outbound_bytes = 65536").await;
    let addr = listen_tcp(&server).await;
    let mut flooder = tokio::net::TcpStream::connect(addr).await.unwrap();
    let initialize =
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"token": AGENT}});
    flooder
        .write_all(format!("{initialize}\n").as_bytes())
        .await
        .unwrap();
    // Each short request earns an error about twice its size; the client reads none.
    let flood = tokio::spawn(async move {
        let chunk = "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"no/such\"}\n"
            .repeat(1024)
            .into_bytes();
        loop {
            if flooder.write_all(&chunk).await.is_err() {
                return flooder;
            }
        }
    });
    waits_until("the client that does not read was dropped", || {
        server
            .admission()
            .counters
            .not_reading
            .load(Ordering::Relaxed)
            == 1
    })
    .await;
    // Its writes fail once the server has closed the connection.
    let _ = tokio::time::timeout(PATIENCE, flood)
        .await
        .expect("the server kept reading from a client that does not read");
    let mut polite = Client::new(tokio::net::TcpStream::connect(addr).await.unwrap());
    ok(&polite
        .call(
            "initialize",
            json!({"protocolVersion": "0.1", "token": OTHER}),
        )
        .await);
    ok(&polite
        .call("session/open", json!({"sessionId": "s1", "agentId": "a"}))
        .await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_in_flight_per_connection_and_sessions_per_token_are_capped() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), "requests_in_flight = 2\nsessions_per_token = 2").await;
    let path = listen_unix(&server, dir.path()).await;
    let connect = || async {
        let mut c = Client::new(tokio::net::UnixStream::connect(&path).await.unwrap());
        ok(&c
            .call(
                "initialize",
                json!({"protocolVersion": "0.1", "token": AGENT}),
            )
            .await);
        c
    };
    let mut c = connect().await;
    for s in ["s1", "s2"] {
        ok(&c
            .call("session/open", json!({"sessionId": s, "agentId": "a"}))
            .await);
    }
    let refused = c
        .call("session/open", json!({"sessionId": "s3", "agentId": "a"}))
        .await;
    assert_eq!(
        error_of(&refused),
        (LIMITED, limits::too_many_sessions("ci", 2).as_str())
    );
    // Another connection with the same token shares the token's count; another token does not.
    let mut c2 = connect().await;
    let refused = c2
        .call("session/open", json!({"sessionId": "s3", "agentId": "a"}))
        .await;
    assert_eq!(
        error_of(&refused),
        (LIMITED, limits::too_many_sessions("ci", 2).as_str())
    );
    let mut other = Client::new(tokio::net::UnixStream::connect(&path).await.unwrap());
    ok(&other
        .call(
            "initialize",
            json!({"protocolVersion": "0.1", "token": OTHER}),
        )
        .await);
    ok(&other
        .call("session/open", json!({"sessionId": "o1", "agentId": "a"}))
        .await);

    // Two questions wait on the console; a third on the same connection is refused at once.
    ok(&other.call("turn/start", json!({"sessionId": "o1"})).await);
    let ask =
        |call: &str| json!({"sessionId": "o1", "agentId": "a", "toolName": "bash", "callId": call});
    other.send("approval/request", ask("c1")).await;
    other.send("approval/request", ask("c2")).await;
    let pending = server.web_pending().unwrap().clone();
    waits_until("two questions waiting", || pending.list().len() == 2).await;
    let third = other.call("approval/request", ask("c3")).await;
    assert_eq!(
        error_of(&third),
        (LIMITED, limits::too_many_in_flight(2).as_str())
    );
    assert_eq!(
        pending.list().len(),
        2,
        "the refused request was never asked"
    );

    // Closing a connection frees its sessions for the token's next one.
    drop(c);
    waits_until("the first connection's sessions released", || {
        server.admission().open_connections() == 2
    })
    .await;
    ok(&c2
        .call("session/open", json!({"sessionId": "s3", "agentId": "a"}))
        .await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_removed_from_the_deployment_ends_its_connections_logins_and_streams() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), "").await;
    let path = listen_unix(&server, dir.path()).await;
    let console = listen_console(&server).await;
    let mut revoked = Client::new(tokio::net::UnixStream::connect(&path).await.unwrap());
    ok(&revoked
        .call(
            "initialize",
            json!({"protocolVersion": "0.1", "token": AGENT}),
        )
        .await);
    ok(&revoked
        .call("session/open", json!({"sessionId": "s1", "agentId": "a"}))
        .await);
    let mut kept = Client::new(tokio::net::UnixStream::connect(&path).await.unwrap());
    ok(&kept
        .call(
            "initialize",
            json!({"protocolVersion": "0.1", "token": OTHER}),
        )
        .await);

    // The person's login and its live stream; then the person's token is dropped too.
    let (cookie, _) = crate::console::log_in_as(console, PERSON).await;
    let mut stream = open_events(console, &cookie).await;

    std::fs::write(
        dir.path().join("deploy.toml"),
        std::fs::read_to_string(write_deployment(dir.path(), "", false))
            .unwrap()
            .replace(&auth::token_hash(PERSON), &auth::token_hash("aht_replaced")),
    )
    .unwrap();
    let reloaded = Instant::now();
    server.reload().await.unwrap();

    let closed = tokio::time::timeout(Duration::from_secs(1), async {
        let mut lines = Vec::new();
        while let Some(line) = revoked.line().await {
            lines.push(line);
        }
        lines
    })
    .await
    .expect("the revoked token's connection was still open a second later");
    assert_eq!(closed.len(), 1, "{closed:?}");
    assert_eq!(error_of(&closed[0]), (auth::UNAUTHENTICATED, auth::REVOKED));
    // The event stream ends (the chunked body's last chunk), within the same second.
    tokio::time::timeout(
        Duration::from_secs(1).saturating_sub(reloaded.elapsed()),
        stream_ends(&mut stream),
    )
    .await
    .expect("the revoked login's event stream was still open a second later");
    // The login is gone: pages send it to the login form.
    let page = crate::console::http(console, "GET", "/", Some(&cookie), None).await;
    assert_eq!(page.status, 303);
    assert_eq!(page.header("location"), Some("/login"));
    // The unchanged token's connection goes on.
    ok(&kept
        .call("session/open", json!({"sessionId": "o1", "agentId": "a"}))
        .await);
}

/// Reads an event stream until its body ends (the last chunk of a chunked body, or the
/// connection closing).
async fn stream_ends(stream: &mut BufReader<tokio::net::TcpStream>) {
    loop {
        let mut line = String::new();
        match stream.read_line(&mut line).await {
            Ok(0) | Err(_) => return,
            Ok(_) if line == "0\r\n" => return,
            Ok(_) => {}
        }
    }
}

/// Opens the console's event stream for `cookie`, returning the connection after its head.
async fn open_events(addr: std::net::SocketAddr, cookie: &str) -> BufReader<tokio::net::TcpStream> {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(
            format!("GET /events HTTP/1.1\r\nHost: localhost\r\nCookie: {cookie}\r\n\r\n")
                .as_bytes(),
        )
        .await
        .unwrap();
    let mut reader = BufReader::new(stream);
    let mut status = String::new();
    reader.read_line(&mut status).await.unwrap();
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    loop {
        let mut header = String::new();
        reader.read_line(&mut header).await.unwrap();
        if header == "\r\n" {
            return reader;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_closes_a_slow_head_refuses_a_large_body_and_caps_a_login_s_streams() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(
        dir.path(),
        "console_header_timeout_s = 1\nconsole_body_bytes = 1024\nconsole_streams_per_login = 2",
    )
    .await;
    let console = listen_console(&server).await;

    // Slowloris: a head that never ends is closed.
    let mut slow = tokio::net::TcpStream::connect(console).await.unwrap();
    slow.write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\nX-Slow: 1\r\n")
        .await
        .unwrap();
    let mut rest = Vec::new();
    tokio::time::timeout(PATIENCE, slow.read_to_end(&mut rest))
        .await
        .expect("a request head that never ended kept its connection")
        .unwrap();

    // A body over the limit is refused with why, before any handler reads it.
    let large = "t".repeat(4096);
    let reply = crate::console::http(
        console,
        "POST",
        "/login",
        None,
        Some(&[("token", large.as_str())]),
    )
    .await;
    assert_eq!(reply.status, 413);
    assert_eq!(reply.body, BODY_TOO_LARGE);

    // Two live pages per login; the third is refused; logging out ends the two.
    let (cookie, csrf) = crate::console::log_in_as(console, PERSON).await;
    let mut one = open_events(console, &cookie).await;
    let mut two = open_events(console, &cookie).await;
    let third = crate::console::http(console, "GET", "/events", Some(&cookie), None).await;
    assert_eq!(third.status, 429);
    assert_eq!(third.body, TOO_MANY_STREAMS);
    let out = crate::console::http(
        console,
        "POST",
        "/logout",
        Some(&cookie),
        Some(&[("csrf", csrf.as_str())]),
    )
    .await;
    assert_eq!(out.status, 303);
    for stream in [&mut one, &mut two] {
        tokio::time::timeout(PATIENCE, stream_ends(stream))
            .await
            .expect("a stream outlived its login's logout");
    }
    // Another login has its own share.
    let (cookie, _) = crate::console::log_in_as(console, PERSON).await;
    let _fresh = open_events(console, &cookie).await;
}
