//! `serve` beyond stdio: TLS over TCP with a certificate made in the test, bearer tokens with
//! roles and session prefixes, failed attempts limited per address, and the Unix socket's mode.

use std::path::Path;
use std::sync::Arc;

use approval_host::plugin::QuarantinePolicy;
use approval_host::serve::auth::{
    self, BAD_TOKEN, FORBIDDEN, MAX_FAILURES, NOT_AUTHENTICATED, TOO_MANY_FAILURES, UNAUTHENTICATED,
};
use approval_host::serve::{ServeOptions, Server};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio_rustls::rustls;

const AGENT: &str = "aht_agent_token_for_tests_000000000000000000000000000000000000000000";
const ANSWERER: &str = "aht_answerer_token_for_tests_0000000000000000000000000000000000000000";
const ADMIN: &str = "aht_admin_token_for_tests_000000000000000000000000000000000000000000";

/// A deployment with three tokens: `ci` (agent, sessions `ci-`), `console` (answerer), `ops`
/// (admin).
fn deployment(dir: &Path) -> std::path::PathBuf {
    let config = dir.join("deploy.toml");
    std::fs::write(
        &config,
        format!(
            "[[token]]\nname = \"ci\"\nsha256 = \"{}\"\nroles = [\"agent\"]\nsessions = [\"ci-\"]\n\n\
             [[token]]\nname = \"console\"\nsha256 = \"{}\"\nroles = [\"answerer\"]\n\n\
             [[token]]\nname = \"ops\"\nsha256 = \"{}\"\nroles = [\"admin\"]\n",
            auth::token_hash(AGENT),
            auth::token_hash(ANSWERER),
            auth::token_hash(ADMIN)
        ),
    )
    .unwrap();
    config
}

async fn server(dir: &Path) -> Server {
    Server::start(ServeOptions {
        config: deployment(dir),
        state_dir: dir.join("state"),
        quarantine: QuarantinePolicy::default(),
        store_url: None,
        migrate: false,
    })
    .await
    .unwrap()
}

struct Tls {
    acceptor: tokio_rustls::TlsAcceptor,
    connector: tokio_rustls::TlsConnector,
}

/// A self-signed certificate for `localhost`, made here, written as PEM files the server loads.
fn tls(dir: &Path) -> Tls {
    let made = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert, made.cert.pem()).unwrap();
    std::fs::write(&key, made.signing_key.serialize_pem()).unwrap();
    let acceptor = approval_host::serve::tls::acceptor(&approval_host::serve::tls::TlsFiles {
        cert,
        key,
        client_ca: None,
    })
    .unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots.add(made.cert.der().clone()).unwrap();
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    Tls {
        acceptor,
        connector: tokio_rustls::TlsConnector::from(Arc::new(config)),
    }
}

/// A JSON-lines client over any stream.
pub(crate) struct Client<S> {
    stream: BufReader<S>,
    next: u64,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Client<S> {
    pub(crate) fn new(stream: S) -> Self {
        Client {
            stream: BufReader::new(stream),
            next: 1,
        }
    }

    /// Sends one message as a line.
    pub(crate) async fn send_value(&mut self, message: &Value) {
        let mut line = message.to_string();
        line.push('\n');
        self.stream
            .get_mut()
            .write_all(line.as_bytes())
            .await
            .unwrap();
        self.stream.get_mut().flush().await.unwrap();
    }

    /// Sends a request without waiting for its response; returns its id.
    pub(crate) async fn send(&mut self, method: &str, params: Value) -> u64 {
        let id = self.next;
        self.next += 1;
        self.send_value(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        id
    }

    /// Sends a request and returns its response (skipping notifications).
    pub(crate) async fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.next;
        self.next += 1;
        let mut line =
            json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string();
        line.push('\n');
        self.stream
            .get_mut()
            .write_all(line.as_bytes())
            .await
            .unwrap();
        self.stream.get_mut().flush().await.unwrap();
        loop {
            let reply = self.line().await.expect("the server closed the connection");
            if reply["id"] == id {
                return reply;
            }
        }
    }

    pub(crate) async fn line(&mut self) -> Option<Value> {
        let mut line = String::new();
        match self.stream.read_line(&mut line).await {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(serde_json::from_str(&line).unwrap()),
        }
    }

    /// Asserts the server has closed the connection.
    async fn closed(&mut self) {
        assert_eq!(self.line().await, None);
    }
}

fn error(reply: &Value) -> (i64, &str) {
    let e = reply
        .get("error")
        .unwrap_or_else(|| panic!("not an error: {reply}"));
    (e["code"].as_i64().unwrap(), e["message"].as_str().unwrap())
}

pub(crate) fn ok(reply: &Value) -> &Value {
    assert!(reply.get("error").is_none(), "{reply}");
    &reply["result"]
}

/// Starts `server` on a loopback port over TLS and returns a function that connects to it.
async fn listen_tls(
    server: &Server,
    tls: &Tls,
) -> impl Fn() -> std::pin::Pin<
    Box<
        dyn std::future::Future<
                Output = Client<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>,
            >,
    >,
> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let (s, acceptor) = (server.clone(), tls.acceptor.clone());
    tokio::spawn(async move { s.serve_tcp("127.0.0.1:0", Some(acceptor), Some(tx)).await });
    let addr = rx.await.unwrap();
    let connector = tls.connector.clone();
    move || {
        let connector = connector.clone();
        Box::pin(async move {
            let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
            let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
            Client::new(connector.connect(name, tcp).await.unwrap())
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tls_a_connection_needs_a_valid_token_and_gets_only_its_roles() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(dir.path()).await;
    let tls = tls(dir.path());
    let connect = listen_tls(&server, &tls).await;

    // Anything before initialize: refused, and the connection closed.
    let mut c = connect().await;
    let reply = c
        .call("session/open", json!({"sessionId": "ci-1", "agentId": "a"}))
        .await;
    assert_eq!(error(&reply), (UNAUTHENTICATED, NOT_AUTHENTICATED));
    c.closed().await;

    // No token, or a wrong one: refused, and closed.
    for params in [
        json!({"protocolVersion": "0.1"}),
        json!({"protocolVersion": "0.1", "token": "aht_guess"}),
    ] {
        let mut c = connect().await;
        let reply = c.call("initialize", params).await;
        assert_eq!(error(&reply), (UNAUTHENTICATED, BAD_TOKEN));
        c.closed().await;
    }

    // The agent token: its sessions, not others, and no admin methods or prompts.
    let mut agent = connect().await;
    ok(&agent
        .call(
            "initialize",
            json!({"protocolVersion": "0.1", "token": AGENT}),
        )
        .await);
    ok(&agent
        .call("session/open", json!({"sessionId": "ci-1", "agentId": "a"}))
        .await);
    let reply = agent
        .call(
            "session/open",
            json!({"sessionId": "prod-1", "agentId": "a"}),
        )
        .await;
    assert_eq!(
        error(&reply),
        (
            FORBIDDEN,
            "token \"ci\" may not open session \"prod-1\": it may open sessions starting with \"ci-\""
        )
    );
    let reply = agent
        .call("rules/add", json!({"rule": "Bash(make:*)"}))
        .await;
    assert_eq!(
        error(&reply),
        (
            FORBIDDEN,
            "token \"ci\" may not rules/add: that needs the admin role"
        )
    );
    let reply = agent
        .call(
            "initialize",
            json!({"protocolVersion": "0.1", "answerer": true}),
        )
        .await;
    assert_eq!(
        error(&reply),
        (
            FORBIDDEN,
            "token \"ci\" may not answer prompts: that needs the answerer role"
        )
    );
    // Still connected: a refused method is not a failed authentication.
    ok(&agent.call("turn/start", json!({"sessionId": "ci-1"})).await);

    // The answerer answers the agent's question; the admin adds a rule.
    let mut console = connect().await;
    ok(&console
        .call(
            "initialize",
            json!({"protocolVersion": "0.1", "token": ANSWERER, "answerer": true}),
        )
        .await);
    let mut ops = connect().await;
    ok(&ops
        .call(
            "initialize",
            json!({"protocolVersion": "0.1", "token": ADMIN}),
        )
        .await);
    let added = ops
        .call("rules/add", json!({"rule": "Read", "scope": "project"}))
        .await;
    assert_eq!(ok(&added)["rule"]["rule"], "Read", "{added}");
    let reply = agent
        .call(
            "approval/request",
            json!({"sessionId": "ci-1", "agentId": "a", "toolName": "Read", "callId": "c1"}),
        )
        .await;
    assert_eq!(ok(&reply)["outcome"], "allowed-once");
    // Three connections open, one per role; the refused ones are gone.
    assert_eq!(
        server.connections_by_role(),
        [
            ("agent", 1),
            ("answerer", 1),
            ("admin", 1),
            ("local", 0),
            ("unauthenticated", 0)
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_address_with_too_many_failures_is_refused_even_with_a_good_token() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(dir.path()).await;
    let tls = tls(dir.path());
    let connect = listen_tls(&server, &tls).await;
    for _ in 0..MAX_FAILURES {
        let mut c = connect().await;
        let reply = c
            .call(
                "initialize",
                json!({"protocolVersion": "0.1", "token": "aht_wrong"}),
            )
            .await;
        assert_eq!(error(&reply), (UNAUTHENTICATED, BAD_TOKEN));
    }
    let mut c = connect().await;
    let reply = c
        .call(
            "initialize",
            json!({"protocolVersion": "0.1", "token": AGENT}),
        )
        .await;
    assert_eq!(error(&reply), (UNAUTHENTICATED, TOO_MANY_FAILURES));
    c.closed().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_unix_socket_is_private_and_asks_for_a_token_when_tokens_are_declared() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let server = server(dir.path()).await;
    let path = dir.path().join("serve.sock");
    let s = server.clone();
    let p = path.clone();
    tokio::spawn(async move { s.serve_unix(&p).await });
    let stream = loop {
        if let Ok(stream) = tokio::net::UnixStream::connect(&path).await {
            break stream;
        }
        tokio::task::yield_now().await;
    };
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let mut c = Client::new(stream);
    let reply = c
        .call("session/open", json!({"sessionId": "ci-1", "agentId": "a"}))
        .await;
    assert_eq!(error(&reply), (UNAUTHENTICATED, NOT_AUTHENTICATED));
    c.closed().await;
    let mut c = Client::new(tokio::net::UnixStream::connect(&path).await.unwrap());
    ok(&c
        .call(
            "initialize",
            json!({"protocolVersion": "0.1", "token": AGENT}),
        )
        .await);
    ok(&c
        .call("session/open", json!({"sessionId": "ci-2", "agentId": "a"}))
        .await);
}

fn cli(dir: &Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_approval-host"))
        .arg("--state-dir")
        .arg(dir)
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn listen_needs_tls_or_an_explicit_plaintext_flag_and_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("deploy.toml");
    std::fs::write(&config, "").unwrap();
    let config = config.display().to_string();
    let out = cli(
        dir.path(),
        &["serve", "--config", &config, "--listen", "127.0.0.1:0"],
    );
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim_end(),
        "approval-host: --listen needs --tls-cert and --tls-key (or, on a network you trust, --insecure-plaintext)"
    );
    // Plain TCP without a single token: refused before listening.
    let out = cli(
        dir.path(),
        &[
            "serve",
            "--config",
            &config,
            "--listen",
            "127.0.0.1:0",
            "--insecure-plaintext",
        ],
    );
    assert_ne!(out.status.code(), Some(0));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(
            "serving over the network needs [[token]] entries: every connection must authenticate"
        ),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn token_new_prints_the_token_once_and_appends_only_its_hash() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("deploy.toml");
    std::fs::write(&config, "[approval]\npolicy = \"ask\"\n").unwrap();
    let path = config.display().to_string();
    let out = cli(
        dir.path(),
        &[
            "token",
            "new",
            "--name",
            "ci",
            "--role",
            "agent",
            "--sessions",
            "ci-",
            "--config",
            &path,
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let token = text.lines().last().unwrap();
    assert!(token.starts_with("aht_") && token.len() == 68, "{text}");
    let file = std::fs::read_to_string(&config).unwrap();
    assert!(!file.contains(token));
    assert!(file.ends_with(&format!(
        "[[token]]\nname = \"ci\"\nsha256 = \"{}\"\nroles = [\"agent\"]\nsessions = [\"ci-\"]\n",
        auth::token_hash(token)
    )));
    let deployment = approval_host::Deployment::load(&config).unwrap();
    assert_eq!(deployment.tokens.len(), 1);
    // A second token of the same name would break the file: refused, the file unchanged.
    let out = cli(
        dir.path(),
        &[
            "token", "new", "--name", "ci", "--role", "admin", "--config", &path,
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("name \"ci\" is used twice"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read_to_string(&config).unwrap(), file);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_client_ca_only_clients_holding_its_certificates_are_served() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(dir.path()).await;
    let made = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let (cert, key, ca_file) = (
        dir.path().join("cert.pem"),
        dir.path().join("key.pem"),
        dir.path().join("clients.pem"),
    );
    std::fs::write(&cert, made.cert.pem()).unwrap();
    std::fs::write(&key, made.signing_key.serialize_pem()).unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, rcgen::KeyPair::generate().unwrap())
        .unwrap();
    std::fs::write(&ca_file, ca.pem()).unwrap();
    let client_key = rcgen::KeyPair::generate().unwrap();
    let client_cert = rcgen::CertificateParams::new(vec!["agent-runner".to_owned()])
        .unwrap()
        .signed_by(&client_key, &ca)
        .unwrap();
    let acceptor = approval_host::serve::tls::acceptor(&approval_host::serve::tls::TlsFiles {
        cert,
        key,
        client_ca: Some(ca_file),
    })
    .unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel();
    let s = server.clone();
    tokio::spawn(async move { s.serve_tcp("127.0.0.1:0", Some(acceptor), Some(tx)).await });
    let addr = rx.await.unwrap();

    let mut roots = rustls::RootCertStore::empty();
    roots.add(made.cert.der().clone()).unwrap();
    let builder = || {
        rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots.clone())
    };
    let connect = |config: rustls::ClientConfig| async move {
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(
                rustls::pki_types::ServerName::try_from("localhost").unwrap(),
                tcp,
            )
            .await
    };

    // With a certificate from the clients' authority (and a token): served.
    let with_cert = builder()
        .with_client_auth_cert(
            vec![client_cert.der().clone()],
            rustls::pki_types::PrivatePkcs8KeyDer::from(client_key.serialize_der()).into(),
        )
        .unwrap();
    let mut c = Client::new(connect(with_cert).await.unwrap());
    ok(&c
        .call(
            "initialize",
            json!({"protocolVersion": "0.1", "token": AGENT}),
        )
        .await);

    // Without one, even a good token is never read: the handshake fails (TLS 1.3 may report it
    // only at the first read).
    match connect(builder().with_no_client_auth()).await {
        Err(_) => {}
        Ok(stream) => {
            let mut c = Client::new(stream);
            let line = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                              "params": {"protocolVersion": "0.1", "token": AGENT}})
            .to_string()
                + "\n";
            let _ = c.stream.get_mut().write_all(line.as_bytes()).await;
            let _ = c.stream.get_mut().flush().await;
            let mut reply = String::new();
            let read = c.stream.read_line(&mut reply).await;
            assert!(
                matches!(read, Ok(0) | Err(_)),
                "served without a certificate: {reply}"
            );
        }
    }
}
