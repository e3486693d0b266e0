//! An operable service (issue 30, in part): `serve --metrics` answers `/metrics` with counts that
//! match scripted traffic exactly, `/healthz`, and `/readyz`, which turns unready when a plugin
//! fails to load or the database stops answering, and ready again when it is back; and
//! `--log-format json` writes one JSON object a log line.

use std::path::Path;

use approval_host::plugin::QuarantinePolicy;
use approval_host::serve::{ServeOptions, Server};
use approval_host::{ApprovalRequest, Outcome};
use serde_json::{Value, json};

use crate::console::http;
use crate::fixtures;

fn deployment(dir: &Path, bad: &str) -> std::path::PathBuf {
    std::fs::write(dir.join("deny.wasm"), approval_host::bundled::DENY_COMMANDS).unwrap();
    std::fs::write(dir.join("trap.wasm"), fixtures::trap()).unwrap();
    std::fs::write(dir.join("hang.wasm"), fixtures::endless_loop()).unwrap();
    let path = dir.join("deploy.toml");
    std::fs::write(
        &path,
        format!(
            "[[rule]]\nrule = \"Bash(ls:*)\"\n\n\
             [[plugin]]\nname = \"no-rm\"\npath = \"deny.wasm\"\nrole = \"gate\"\n\
             [plugin.config]\npatterns = \"rm \"\n\n\
             [[plugin]]\nname = \"bad\"\npath = \"{bad}\"\nrole = \"gate\"\ntimeout_ms = 100\n\n\
             [[plugin]]\nname = \"no-rm\"\npath = \"deny.wasm\"\nrole = \"gate\"\nmode = \"shadow\"\n\
             [plugin.config]\npatterns = \"rm ,cargo \"\n"
        ),
    )
    .unwrap();
    path
}

async fn start(dir: &Path, store_url: Option<String>) -> (Server, std::net::SocketAddr) {
    let server = Server::start(ServeOptions {
        config: dir.join("deploy.toml"),
        state_dir: dir.join("state"),
        quarantine: QuarantinePolicy {
            max_failures: 100,
            ..QuarantinePolicy::default()
        },
        migrate: store_url.is_some(),
        store_url,
    })
    .await
    .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let s = server.clone();
    tokio::spawn(async move { s.serve_metrics(listener).await });
    // Answering at all means the metrics subscription is in place.
    let alive = http(addr, "GET", "/healthz", None, None).await;
    assert_eq!(
        (alive.status, alive.body.as_str()),
        (200, r#"{"alive":true}"#)
    );
    (server, addr)
}

async fn ask(server: &Server, session: &str, call: &str, command: &str) -> Outcome {
    let service = server.service();
    let agent = service.agent(session, "main").await.unwrap();
    service
        .record_tool_call(&agent, call, "Bash", json!({ "command": command }))
        .await
        .unwrap();
    service
        .ask(ApprovalRequest::new(&agent, "Bash").call_id(call))
        .await
        .unwrap()
        .outcome
}

/// The sample lines of `text` whose name starts with `prefix` (`# ` lines left out).
fn samples<'a>(text: &'a str, prefix: &str) -> Vec<&'a str> {
    text.lines()
        .filter(|l| !l.starts_with('#') && l.starts_with(prefix))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_scripted_traffic_exactly() {
    let dir = tempfile::tempdir().unwrap();
    deployment(dir.path(), "trap.wasm");
    let (server, addr) = start(dir.path(), None).await;
    let service = server.service().clone();
    service.start_turn("s1").await.unwrap();
    assert_eq!(
        ask(&server, "s1", "c1", "ls -la").await,
        Outcome::AllowedOnce
    );
    assert_eq!(
        ask(&server, "s1", "c2", "rm -rf x").await,
        Outcome::Rejected
    );
    assert_eq!(
        ask(&server, "s1", "c3", "cargo build").await,
        Outcome::Unavailable
    );
    // The same plugin, now one that never returns: a timeout.
    server.shadows_settled().await;
    deployment(dir.path(), "hang.wasm");
    let report = server.reload().await.unwrap();
    assert_eq!(report.swapped, ["bad"]);
    assert_eq!(
        ask(&server, "s1", "c4", "cargo test").await,
        Outcome::Unavailable
    );
    service.end_turn("s1").await.unwrap();
    server.shadows_settled().await;

    let scraped = http(addr, "GET", "/metrics", None, None).await;
    assert_eq!(scraped.status, 200);
    assert_eq!(
        scraped.header("content-type"),
        Some(approval_host::serve::metrics::CONTENT_TYPE)
    );
    let text = scraped.body;
    // Every (outcome, by) is there from the start; the ones that moved:
    let mut questions: Vec<&str> = samples(&text, "approval_questions_total")
        .into_iter()
        .filter(|l| !l.ends_with(" 0"))
        .collect();
    questions.sort();
    assert_eq!(
        questions,
        [
            "approval_questions_total{outcome=\"allowed-once\",by=\"rule\"} 1",
            "approval_questions_total{outcome=\"rejected\",by=\"plugin\"} 1",
            "approval_questions_total{outcome=\"unavailable\",by=\"failure\"} 2",
        ],
        "{text}"
    );
    let mut failures = samples(&text, "approval_plugin_failures_total");
    failures.sort();
    assert_eq!(
        failures,
        [
            "approval_plugin_failures_total{plugin=\"bad\",kind=\"timeout\"} 1",
            "approval_plugin_failures_total{plugin=\"bad\",kind=\"trap\"} 1",
        ]
    );
    assert_eq!(
        samples(&text, "approval_rule_hits_total"),
        ["approval_rule_hits_total{rule=\"deployment-1\",effect=\"allow\"} 1"]
    );
    assert_eq!(
        samples(&text, "approval_decision_seconds_count"),
        ["approval_decision_seconds_count 4"]
    );
    assert_eq!(
        samples(&text, "approval_plugin_decision_seconds_count"),
        ["approval_plugin_decision_seconds_count{plugin=\"no-rm\"} 1"]
    );
    // The reload made a new shadow version: its figures start again (1 question since).
    let mut shadows = samples(&text, "approval_shadow_answers{");
    shadows.sort();
    assert_eq!(
        shadows,
        [
            "approval_shadow_answers{shadow=\"no-rm\",answer=\"agreed\"} 0",
            "approval_shadow_answers{shadow=\"no-rm\",answer=\"disagreed\"} 1",
            "approval_shadow_answers{shadow=\"no-rm\",answer=\"dropped\"} 0",
            "approval_shadow_answers{shadow=\"no-rm\",answer=\"failed\"} 0",
        ]
    );
    // The commit threads are the process's, shared with the tests running beside this one: the
    // figures can only be bounded here.
    let value = |name: &str| -> f64 {
        samples(&text, name)[0]
            .rsplit(' ')
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    let rounds = value("approval_store_commits_total");
    assert!(rounds >= 1.0, "{text}");
    assert!(value("approval_store_committed_records_total") >= rounds);
    assert!(value("approval_store_commit_seconds_total") > 0.0);
    // The latency histogram: since the process started, its buckets cumulative, 50 µs doubling.
    assert!(
        text.contains("# TYPE approval_store_commit_latency_seconds histogram\n"),
        "{text}"
    );
    let buckets: Vec<(String, f64)> =
        samples(&text, "approval_store_commit_latency_seconds_bucket")
            .iter()
            .map(|l| {
                let le = l.split('"').nth(1).unwrap().to_owned();
                (le, l.rsplit(' ').next().unwrap().parse().unwrap())
            })
            .collect();
    assert_eq!(buckets.len(), 17);
    assert_eq!(buckets[0].0, "0.00005");
    assert_eq!(buckets[16].0, "+Inf");
    assert!(buckets.windows(2).all(|w| w[0].1 <= w[1].1), "{buckets:?}");
    let count = value("approval_store_commit_latency_seconds_count");
    assert_eq!(buckets[16].1, count);
    assert!(count >= 1.0);
    let mut plugins = samples(&text, "approval_plugins{");
    plugins.sort();
    assert_eq!(
        plugins,
        [
            "approval_plugins{state=\"failed\"} 0",
            "approval_plugins{state=\"loaded\"} 2",
            "approval_plugins{state=\"quarantined\"} 0",
        ]
    );
    assert!(
        text.contains("# TYPE approval_questions counter\n"),
        "{text}"
    );
    assert!(
        text.contains("# TYPE approval_decision_seconds histogram\n"),
        "{text}"
    );
    assert!(text.ends_with("# EOF\n"), "{text}");
    // Every metric the dashboard in docs/ queries is one this host exports.
    let dashboard = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/grafana-dashboard.json"
    ))
    .unwrap();
    let mut queried: Vec<&str> = dashboard
        .match_indices("approval_")
        .map(|(at, _)| {
            let rest = &dashboard[at..];
            let end = rest
                .find(|c: char| !(c.is_ascii_lowercase() || c == '_'))
                .unwrap_or(rest.len());
            let name = &rest[..end];
            ["_bucket", "_total", "_count", "_sum"]
                .iter()
                .find_map(|s| name.strip_suffix(s))
                .unwrap_or(name)
        })
        .filter(|name| *name != "approval_host")
        .collect();
    queried.sort();
    queried.dedup();
    assert!(queried.len() >= 10, "{queried:?}");
    for name in queried {
        assert!(
            text.contains(&format!("# TYPE {name} ")),
            "the dashboard queries {name}, which /metrics does not export"
        );
    }

    // Ready; then a plugin whose new version does not load is a failed slot: not ready.
    let ready = http(addr, "GET", "/readyz", None, None).await;
    assert_eq!(ready.status, 200);
    assert_eq!(
        serde_json::from_str::<Value>(&ready.body).unwrap(),
        json!({"ready": true, "checks": {"store": "ok", "plugins": "ok", "rules": "ok"}})
    );
    std::fs::write(dir.path().join("hang.wasm"), b"not a component").unwrap();
    let report = server.reload().await.unwrap();
    assert_eq!(report.failed.len(), 1, "{report:?}");
    let unready = http(addr, "GET", "/readyz", None, None).await;
    assert_eq!(unready.status, 503);
    assert_eq!(
        serde_json::from_str::<Value>(&unready.body).unwrap(),
        json!({"ready": false, "checks": {"store": "ok", "plugins": {"failed": ["bad"]}, "rules": "ok"}})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_is_unready_while_the_database_stops_answering_and_ready_when_it_is_back() {
    use crate::support::pg;
    let dir = tempfile::tempdir().unwrap();
    deployment(dir.path(), "trap.wasm");
    // A role of its own, so the outage is this host's alone.
    let schema = format!("t_{}", uuid::Uuid::new_v4().simple());
    let role = format!("r_{}", uuid::Uuid::new_v4().simple());
    let base = pg::base_url();
    pg::sql(
        &base,
        &format!(
            "CREATE ROLE {role} LOGIN; CREATE SCHEMA {schema} AUTHORIZATION {role}; \
             GRANT CONNECT ON DATABASE approval_test TO {role}"
        ),
    );
    let url = format!(
        "{} options=-csearch_path={schema}",
        base.replace("user=postgres", &format!("user={role}"))
    );
    // Leases of a second, renewed every third of one.
    let config = dir.path().join("deploy.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        format!("[store]\nurl = {url:?}\nlease-seconds = 1\n\n{text}"),
    )
    .unwrap();
    let (server, addr) = start(dir.path(), Some(url)).await;
    let ready = http(addr, "GET", "/readyz", None, None).await;
    assert_eq!(ready.status, 200, "{}", ready.body);
    // A session open through the outage: its lease must be renewed.
    let _held = server.service().agent("held", "main").await.unwrap();

    pg::sql(
        &base,
        &format!(
            "ALTER ROLE {role} NOLOGIN; \
             SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{role}'"
        ),
    );
    let unready = http(addr, "GET", "/readyz", None, None).await;
    assert_eq!(unready.status, 503, "{}", unready.body);
    let body: Value = serde_json::from_str(&unready.body).unwrap();
    assert_eq!(body["ready"], false);
    assert_eq!(body["checks"]["plugins"], "ok");
    assert!(
        body["checks"]["store"].is_string() && body["checks"]["store"] != "ok",
        "{body}"
    );
    // Once a renewal round has failed, that is what it says.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let r = http(addr, "GET", "/readyz", None, None).await;
        assert_eq!(r.status, 503, "{}", r.body);
        let body: Value = serde_json::from_str(&r.body).unwrap();
        if body["checks"]["store"] == "session leases could not be renewed at the last attempt" {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the leases never showed: {body}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }

    pg::sql(&base, &format!("ALTER ROLE {role} LOGIN"));
    // The store connects again on its next use, and the host is ready once a lease renewal
    // round has gone through; until then it names the leases or the store's error.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let again = http(addr, "GET", "/readyz", None, None).await;
        if again.status == 200 {
            break;
        }
        assert_eq!(again.status, 503, "{}", again.body);
        let body: Value = serde_json::from_str(&again.body).unwrap();
        assert!(body["checks"]["store"].is_string(), "{body}");
        assert!(
            std::time::Instant::now() < deadline,
            "never ready again: {body}"
        );
        // Polling the endpoint, as a load balancer does.
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    drop(server);
}

#[test]
fn log_lines_are_json_objects_with_log_format_json() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("empty.toml");
    std::fs::write(&config, "").unwrap();
    // `serve` on stdio, whose input is already closed: it starts, logs, and stops.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_approval-host"))
        .arg("--state-dir")
        .arg(dir.path().join("state"))
        .args([
            "--log-format",
            "json",
            "-v",
            "serve",
            "--no-watch",
            "--config",
        ])
        .arg(&config)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stderr)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let loaded = lines
        .iter()
        .find(|l| l["fields"]["message"] == "deployment loaded")
        .unwrap_or_else(|| panic!("{lines:?}"));
    assert_eq!(loaded["level"], "INFO");
    assert_eq!(loaded["fields"]["plugins"], 0);
    assert!(loaded["timestamp"].is_string(), "{loaded}");
}

#[test]
fn metrics_off_loopback_need_tls_or_an_explicit_plaintext_flag_and_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let config = deployment(dir.path(), "trap.wasm");
    let serve = |extra: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_approval-host"))
            .arg("--state-dir")
            .arg(dir.path().join("state"))
            .args(["serve", "--no-watch", "--config"])
            .arg(&config)
            .args(extra)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
    };
    let out = serve(&["--metrics", "0.0.0.0:0"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "approval-host: --metrics needs --tls-cert and --tls-key (or, on a network you trust, --insecure-plaintext)\n"
    );
    // In the clear on purpose, but the deployment declares no token: refused at start.
    let out = serve(&["--metrics", "0.0.0.0:0", "--insecure-plaintext"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "{}: metrics off loopback need [[token]] entries with the metrics role",
            config.display()
        )),
        "{stderr}"
    );
    let out = serve(&["--metrics", "nonsense"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).starts_with("approval-host: --metrics \"nonsense\": "),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

const METRICS_TOKEN: &str = "aht_metrics_token_for_tests_00000000000000000000000000000000000000000";
const AGENT_TOKEN: &str = "aht_agent_token_for_tests_0000000000000000000000000000000000000000000";

/// One HTTPS request with an optional bearer token: (status, body).
async fn https(
    connector: &tokio_rustls::TlsConnector,
    addr: std::net::SocketAddr,
    path: &str,
    token: Option<&str>,
) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = tokio_rustls::rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let mut stream = connector.connect(name, tcp).await.unwrap();
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n{auth}Connection: close\r\n\r\n")
                .as_bytes(),
        )
        .await
        .unwrap();
    let mut reply = Vec::new();
    let _ = stream.read_to_end(&mut reply).await;
    let reply = String::from_utf8_lossy(&reply).into_owned();
    let (head, body) = reply.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, body.to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_over_tls_answer_only_a_metrics_token_and_a_revoked_one_ends_at_once() {
    use std::sync::Arc;
    use tokio_rustls::rustls;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("deploy.toml");
    let tokens = format!(
        "[[token]]\nname = \"prometheus\"\nsha256 = \"{}\"\nroles = [\"metrics\"]\n\n\
         [[token]]\nname = \"ci\"\nsha256 = \"{}\"\nroles = [\"agent\"]\n",
        approval_host::serve::auth::token_hash(METRICS_TOKEN),
        approval_host::serve::auth::token_hash(AGENT_TOKEN)
    );
    std::fs::write(&config, &tokens).unwrap();
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
    let mut roots = rustls::RootCertStore::empty();
    roots.add(made.cert.der().clone()).unwrap();
    let client = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(client));

    let server = Server::start(ServeOptions {
        config: config.clone(),
        state_dir: dir.path().join("state"),
        quarantine: QuarantinePolicy::default(),
        store_url: None,
        migrate: false,
    })
    .await
    .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let s = server.clone();
    tokio::spawn(async move { s.serve_metrics_with(listener, Some(acceptor), true).await });

    let no_token = format!(
        "{}: {}",
        approval_host::serve::auth::BAD_TOKEN,
        approval_host::serve::metrics::NO_TOKEN
    );
    // /healthz says only that the process answers: open.
    assert_eq!(
        https(&connector, addr, "/healthz", None).await,
        (200, r#"{"alive":true}"#.to_owned())
    );
    for path in ["/metrics", "/readyz"] {
        let (status, body) = https(&connector, addr, path, None).await;
        assert_eq!(status, 401, "{path}");
        assert_eq!(
            serde_json::from_str::<Value>(&body).unwrap(),
            json!({ "error": no_token })
        );
        let (status, body) = https(&connector, addr, path, Some(AGENT_TOKEN)).await;
        assert_eq!(status, 403, "{path}");
        assert_eq!(
            serde_json::from_str::<Value>(&body).unwrap(),
            json!({"error": "token \"ci\" does not have the metrics role"})
        );
    }
    let (status, body) = https(&connector, addr, "/metrics", Some(METRICS_TOKEN)).await;
    assert_eq!(status, 200);
    assert!(body.contains("# TYPE approval_questions counter"), "{body}");
    // The scrape's own connection is the one open, on the metrics address.
    let mut open = samples(&body, "approval_connections_open");
    open.sort_unstable();
    assert_eq!(
        open,
        [
            "approval_connections_open{transport=\"callbacks\"} 0",
            "approval_connections_open{transport=\"console\"} 0",
            "approval_connections_open{transport=\"mcp\"} 0",
            "approval_connections_open{transport=\"metrics\"} 1",
            "approval_connections_open{transport=\"tcp\"} 0",
            "approval_connections_open{transport=\"unix\"} 0",
        ]
    );
    let (status, _) = https(&connector, addr, "/readyz", Some(METRICS_TOKEN)).await;
    assert_eq!(status, 200);
    // The metrics token revoked (gone from the file): its next scrape is refused.
    std::fs::write(&config, tokens.split("\n\n").nth(1).unwrap()).unwrap();
    server.reload().await.unwrap();
    let (status, _) = https(&connector, addr, "/metrics", Some(METRICS_TOKEN)).await;
    assert_eq!(status, 401);
    // The metrics role opens nothing else: the token may not ask over JSON-RPC.
    let grant = approval_host::serve::auth::Gatekeeper::new(
        approval_host::Deployment::load(&{
            std::fs::write(&config, &tokens).unwrap();
            config.clone()
        })
        .unwrap()
        .tokens,
    )
    .check("peer", Some(METRICS_TOKEN))
    .unwrap();
    for method in [
        "session/open",
        "approval/request",
        "initialize",
        "rules/add",
    ] {
        if let Some(role) = approval_host::serve::auth::role_for(method) {
            assert!(!grant.has(role), "{method}");
        }
    }
}

#[test]
fn a_session_log_refused_as_corrupt_is_counted() {
    let dir = tempfile::tempdir().unwrap();
    let config = deployment(dir.path(), "trap.wasm");
    let state = dir.path().join("state");
    // A log whose second line is not a record.
    let good = approval_host::ApprovalService::open_dir(&state, approval_host::Policy::Ask);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        good.start_turn("broken").await.unwrap();
        good.end_turn("broken").await.unwrap();
    });
    drop(good);
    let path = crate::support::log_path(&state, "broken");
    let text = std::fs::read_to_string(&path).unwrap();
    let first = text.lines().next().unwrap();
    std::fs::write(&path, format!("{first}\nnot a record\n")).unwrap();

    let metrics = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let mut client = crate::serve::Client::spawn(
        &state,
        &config,
        &["--no-watch", "--metrics", &metrics.to_string()],
    );
    let refused = client.error(
        "session/open",
        json!({"sessionId": "broken", "agentId": "a"}),
    );
    assert!(
        refused["message"].as_str().unwrap().contains("line 2"),
        "{refused}"
    );
    client.call("session/open", json!({"sessionId": "fine", "agentId": "a"}));
    let scraped = crate::fleet::scrape(metrics);
    assert_eq!(
        samples(&scraped, "approval_logs_refused_total"),
        ["approval_logs_refused_total 1"]
    );
    assert_eq!(
        samples(&scraped, "approval_rules_logs_untrusted"),
        ["approval_rules_logs_untrusted 0"]
    );
    // The stdio client needs no token.
    let mut clients = samples(&scraped, "approval_clients_open");
    clients.sort_unstable();
    assert_eq!(
        clients,
        [
            "approval_clients_open{role=\"admin\"} 0",
            "approval_clients_open{role=\"agent\"} 0",
            "approval_clients_open{role=\"answerer\"} 0",
            "approval_clients_open{role=\"local\"} 1",
            "approval_clients_open{role=\"unauthenticated\"} 0",
        ]
    );
    // The one session the stdio client opened (the refused one never opened).
    let mut sessions = samples(&scraped, "approval_sessions_open");
    sessions.sort_unstable();
    assert_eq!(
        sessions,
        [
            "approval_sessions_open{transport=\"other\"} 0",
            "approval_sessions_open{transport=\"stdio\"} 1",
            "approval_sessions_open{transport=\"tcp\"} 0",
            "approval_sessions_open{transport=\"unix\"} 0",
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_waiting_for_a_person_is_counted_with_its_age() {
    let dir = tempfile::tempdir().unwrap();
    let (server, _console) = crate::console::server(dir.path(), 60).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let s = server.clone();
    tokio::spawn(async move { s.serve_metrics(listener).await });
    let service = server.service().clone();
    service.start_turn("w1").await.unwrap();
    let agent = service.agent("w1", "main").await.unwrap();
    let started = std::time::Instant::now();
    let asking = tokio::spawn({
        let service = service.clone();
        async move {
            service
                .ask(ApprovalRequest::new(&agent, "Bash"))
                .await
                .unwrap()
                .outcome
        }
    });
    let pending = server.web_pending().unwrap().clone();
    while pending.list().is_empty() {
        assert!(started.elapsed() < std::time::Duration::from_secs(20));
        tokio::task::yield_now().await;
    }
    let text = http(addr, "GET", "/metrics", None, None).await.body;
    assert_eq!(
        samples(&text, "approval_questions_waiting "),
        ["approval_questions_waiting 1"]
    );
    let oldest: f64 = samples(&text, "approval_questions_waiting_oldest_seconds")[0]
        .rsplit(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        oldest > 0.0 && oldest <= started.elapsed().as_secs_f64(),
        "{oldest}"
    );
    // The turn ends: the question is withdrawn, and nothing waits.
    service.end_turn("w1").await.unwrap();
    assert_eq!(asking.await.unwrap(), Outcome::Cancelled);
    let text = http(addr, "GET", "/metrics", None, None).await.body;
    assert_eq!(
        samples(&text, "approval_questions_waiting"),
        [
            "approval_questions_waiting 0",
            "approval_questions_waiting_oldest_seconds 0.0"
        ]
    );
}
