//! The web console over HTTP: logins, pending questions answered from the page, CSRF, escaping,
//! security headers, timeouts and cancellations, live updates. (Driving it from a real browser
//! is the next step; these tests speak HTTP/1.1 to the real server.)

use std::path::Path;
use std::time::Duration;

use approval_host::plugin::QuarantinePolicy;
use approval_host::serve::console::{CSP, LOGIN_FAILED};
use approval_host::serve::{ServeOptions, Server, auth};
use approval_host::{ApprovalRequest, Outcome};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio_util::sync::CancellationToken;

pub(crate) const ANSWERER: &str =
    "aht_console_token_for_tests_0000000000000000000000000000000000000000";
const AGENT: &str = "aht_agent_only_token_for_tests_00000000000000000000000000000000000000";

const PATIENCE: Duration = Duration::from_secs(20);

pub(crate) async fn server(dir: &Path, timeout_s: u64) -> (Server, std::net::SocketAddr) {
    let config = dir.join("deploy.toml");
    std::fs::write(
        &config,
        format!(
            "[[answerer]]\nkind = \"web\"\ntimeout_s = {timeout_s}\n\n\
             [[token]]\nname = \"console\"\nsha256 = \"{}\"\nroles = [\"answerer\"]\n\n\
             [[token]]\nname = \"ci\"\nsha256 = \"{}\"\nroles = [\"agent\"]\n",
            auth::token_hash(ANSWERER),
            auth::token_hash(AGENT)
        ),
    )
    .unwrap();
    let server = Server::start(ServeOptions {
        config,
        state_dir: dir.join("state"),
        quarantine: QuarantinePolicy::default(),
        store_url: None,
        migrate: false,
    })
    .await
    .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let s = server.clone();
    tokio::spawn(async move { s.serve_console(listener, None).await });
    (server, addr)
}

struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// One HTTP/1.1 request on its own connection.
async fn http(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    cookie: Option<&str>,
    form: Option<&[(&str, &str)]>,
) -> Reply {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let body = form
        .map(|f| {
            f.iter()
                .map(|(k, v)| format!("{k}={}", encode(v)))
                .collect::<Vec<_>>()
                .join("&")
        })
        .unwrap_or_default();
    let mut request =
        format!("{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n");
    if let Some(c) = cookie {
        request.push_str(&format!("Cookie: {c}\r\n"));
    }
    if form.is_some() {
        request.push_str(&format!(
            "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    request.push_str("\r\n");
    request.push_str(&body);
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut raw = String::new();
    stream.read_to_string(&mut raw).await.unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    let mut lines = head.lines();
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers = lines
        .filter_map(|l| l.split_once(": "))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    Reply {
        status,
        headers,
        body: body.to_owned(),
    }
}

fn encode(v: &str) -> String {
    v.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Session `s1` opens a turn and asks about a `bash` call whose recorded argument is a script,
/// in the background; returns the service, the agent and the pending verdict.
pub(crate) async fn ask_script_call(
    server: &Server,
    reason: Option<&str>,
) -> (
    approval_host::ApprovalService,
    approval_host::Agent,
    tokio::task::JoinHandle<approval_host::Verdict>,
) {
    let service = server.service().clone();
    let agent = service.agent("s1", "a").await.unwrap();
    service.start_turn("s1").await.unwrap();
    service
        .record_tool_call(
            &agent,
            "c1",
            "bash",
            json!({"command": "<script>alert(1)</script>"}),
        )
        .await
        .unwrap();
    let mut request = ApprovalRequest::new(&agent, "bash").call_id("c1");
    if let Some(r) = reason {
        request = request.reason(r);
    }
    let asking = tokio::spawn({
        let service = service.clone();
        async move { service.ask(request).await.unwrap() }
    });
    (service, agent, asking)
}

/// The value of the first form field `name` on a page.
fn field(page: &str, name: &str) -> String {
    page.split(&format!("name=\"{name}\" value=\""))
        .nth(1)
        .unwrap_or_else(|| panic!("no field {name}: {page}"))
        .split('"')
        .next()
        .unwrap()
        .to_owned()
}

/// Logs in and returns the cookie pair and the page's CSRF token.
async fn log_in(addr: std::net::SocketAddr) -> (String, String) {
    let reply = http(addr, "POST", "/login", None, Some(&[("token", ANSWERER)])).await;
    assert_eq!(reply.status, 303, "{}", reply.body);
    let set = reply.header("set-cookie").unwrap().to_owned();
    let cookie = set.split(';').next().unwrap().to_owned();
    let page = http(addr, "GET", "/", Some(&cookie), None).await;
    let csrf = field(&page.body, "csrf");
    (cookie, csrf)
}

/// Waits until the pending page does (or does not) show `needle`.
async fn page_until(addr: std::net::SocketAddr, cookie: &str, needle: &str, shown: bool) -> String {
    let started = std::time::Instant::now();
    loop {
        let page = http(addr, "GET", "/", Some(cookie), None).await.body;
        if page.contains(needle) == shown {
            return page;
        }
        assert!(
            started.elapsed() < PATIENCE,
            "the page never {} {needle}: {page}",
            if shown { "showed" } else { "dropped" }
        );
        tokio::task::yield_now().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_is_served_without_a_login_and_every_response_carries_the_policy() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, addr) = server(dir.path(), 60).await;
    let reply = http(addr, "GET", "/", None, None).await;
    assert_eq!(reply.status, 303);
    assert_eq!(reply.header("location"), Some("/login"));
    assert_eq!(reply.header("content-security-policy"), Some(CSP));
    assert_eq!(reply.header("x-frame-options"), Some("DENY"));
    assert_eq!(http(addr, "GET", "/events", None, None).await.status, 401);
    let reply = http(
        addr,
        "POST",
        "/answer",
        None,
        Some(&[("csrf", "x"), ("id", "x"), ("decision", "allow-once")]),
    )
    .await;
    assert_eq!(reply.status, 401);

    // A wrong token, and a token without the answerer role, do not log in.
    let reply = http(addr, "POST", "/login", None, Some(&[("token", "aht_nope")])).await;
    assert_eq!(reply.status, 401);
    assert!(reply.body.contains(LOGIN_FAILED));
    assert!(reply.header("set-cookie").is_none());
    let reply = http(addr, "POST", "/login", None, Some(&[("token", AGENT)])).await;
    assert_eq!(reply.status, 403);

    let reply = http(addr, "POST", "/login", None, Some(&[("token", ANSWERER)])).await;
    let cookie = reply.header("set-cookie").unwrap();
    assert!(cookie.starts_with("approval_console="), "{cookie}");
    assert!(
        cookie.ends_with("; HttpOnly; SameSite=Strict; Path=/; Max-Age=43200"),
        "{cookie}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_shows_escaped_and_a_click_decides_it_in_the_audit() {
    let dir = tempfile::tempdir().unwrap();
    let (server, addr) = server(dir.path(), 60).await;
    let (cookie, csrf) = log_in(addr).await;
    let (service, agent, asking) = ask_script_call(&server, Some("<b>why</b>")).await;
    let page = page_until(addr, &cookie, "alert(1)", true).await;
    assert!(
        page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "{page}"
    );
    assert!(!page.contains("<script>alert(1)"), "{page}");
    assert!(page.contains("&lt;b&gt;why&lt;/b&gt;"), "{page}");
    let id = field(&page, "id");

    // Without the CSRF token: refused, still waiting.
    let reply = http(
        addr,
        "POST",
        "/answer",
        Some(&cookie),
        Some(&[("csrf", "forged"), ("id", &id), ("decision", "allow-once")]),
    )
    .await;
    assert_eq!(reply.status, 403);
    assert!(!asking.is_finished());

    let reply = http(
        addr,
        "POST",
        "/answer",
        Some(&cookie),
        Some(&[("csrf", &csrf), ("id", &id), ("decision", "allow-once")]),
    )
    .await;
    assert_eq!(reply.status, 303);
    let verdict = asking.await.unwrap();
    assert_eq!(verdict.outcome, Outcome::AllowedOnce);
    assert_eq!(verdict.answerer.as_deref(), Some("web:console"));
    page_until(addr, &cookie, &id, false).await;
    service.end_turn("s1").await.unwrap();
    let log = std::fs::read_to_string(
        approval_host::DirStore::new(dir.path().join("state")).session_path("s1"),
    )
    .unwrap();
    assert!(
        log.contains(&format!(
            "\"data\":{{\"id\":\"{id}\",\"outcome\":\"allowed-once\",\"answerer\":\"web:console\""
        )),
        "{log}"
    );

    // Reject with a reason: the asker gets it.
    let asking = tokio::spawn({
        let (service, agent) = (service.clone(), agent.clone());
        async move {
            service.start_turn("s1").await.unwrap();
            service
                .ask(ApprovalRequest::new(&agent, "bash"))
                .await
                .unwrap()
        }
    });
    let page = page_until(addr, &cookie, "name=\"id\"", true).await;
    let id = field(&page, "id");
    http(
        addr,
        "POST",
        "/answer",
        Some(&cookie),
        Some(&[
            ("csrf", &csrf),
            ("id", &id),
            ("decision", "reject"),
            ("reason", "not on main"),
        ]),
    )
    .await;
    let verdict = asking.await.unwrap();
    assert_eq!(verdict.outcome, Outcome::Rejected);
    assert_eq!(verdict.reason.as_deref(), Some("not on main"));

    // Logging out ends the login on the server: the old cookie no longer works.
    let reply = http(
        addr,
        "POST",
        "/logout",
        Some(&cookie),
        Some(&[("csrf", &csrf)]),
    )
    .await;
    assert_eq!(reply.status, 303);
    let reply = http(addr, "GET", "/", Some(&cookie), None).await;
    assert_eq!(reply.header("location"), Some("/login"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_nobody_answers_times_out_unavailable_and_a_cancelled_one_leaves() {
    let dir = tempfile::tempdir().unwrap();
    let (server, addr) = server(dir.path(), 1).await;
    let (cookie, _csrf) = log_in(addr).await;
    let service = server.service().clone();
    let agent = service.agent("s1", "a").await.unwrap();
    service.start_turn("s1").await.unwrap();
    let verdict = service
        .ask(ApprovalRequest::new(&agent, "bash"))
        .await
        .unwrap();
    assert_eq!(verdict.outcome, Outcome::Unavailable);
    assert_eq!(verdict.to_json()["failure"]["kind"], "timeout");
    page_until(addr, &cookie, "No question is waiting.", true).await;

    // A live stream sees the next question arrive; cancelling it takes it off the page.
    let mut events = tokio::net::TcpStream::connect(addr).await.unwrap();
    events
        .write_all(
            format!("GET /events HTTP/1.1\r\nHost: localhost\r\nCookie: {cookie}\r\n\r\n")
                .as_bytes(),
        )
        .await
        .unwrap();
    let mut events = BufReader::new(events);
    let mut line = String::new();
    events.read_line(&mut line).await.unwrap();
    assert!(line.starts_with("HTTP/1.1 200"), "{line}");
    // The stream is open once its headers are through.
    loop {
        line.clear();
        events.read_line(&mut line).await.unwrap();
        if line == "\r\n" {
            break;
        }
    }
    let cancel = CancellationToken::new();
    let asking = tokio::spawn({
        let (service, agent, cancel) = (service.clone(), agent.clone(), cancel.clone());
        async move {
            service
                .ask(ApprovalRequest::new(&agent, "web_fetch").cancel(cancel))
                .await
                .unwrap()
        }
    });
    let changed = tokio::time::timeout(PATIENCE, async {
        loop {
            line.clear();
            events.read_line(&mut line).await.unwrap();
            if line.contains("event: changed") {
                break;
            }
        }
    })
    .await;
    assert!(changed.is_ok(), "no change event");
    page_until(addr, &cookie, "web_fetch", true).await;
    cancel.cancel();
    assert_eq!(asking.await.unwrap().outcome, Outcome::Cancelled);
    page_until(addr, &cookie, "web_fetch", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tls_the_login_cookie_is_secure() {
    use std::sync::Arc;
    use tokio_rustls::rustls;
    let dir = tempfile::tempdir().unwrap();
    let (server, _) = server(dir.path(), 60).await;
    let made = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert, made.cert.pem()).unwrap();
    std::fs::write(&key, made.signing_key.serialize_pem()).unwrap();
    let acceptor = approval_host::serve::tls::acceptor(&approval_host::serve::tls::TlsFiles {
        cert,
        key,
        client_ca: None,
    })
    .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { server.serve_console(listener, Some(acceptor)).await });

    let mut roots = rustls::RootCertStore::empty();
    roots.add(made.cert.der().clone()).unwrap();
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut stream = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(
            rustls::pki_types::ServerName::try_from("localhost").unwrap(),
            tcp,
        )
        .await
        .unwrap();
    let body = format!("token={ANSWERER}");
    stream
        .write_all(
            format!(
                "POST /login HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    let mut raw = String::new();
    // A TLS peer may close without close_notify after `Connection: close`: keep what was read.
    let _ = stream.read_to_string(&mut raw).await;
    assert!(raw.starts_with("HTTP/1.1 303"), "{raw}");
    let cookie = raw
        .lines()
        .find(|l| l.to_ascii_lowercase().starts_with("set-cookie:"))
        .unwrap();
    assert!(
        cookie.ends_with("; HttpOnly; SameSite=Strict; Path=/; Max-Age=43200; Secure"),
        "{cookie}"
    );
}
