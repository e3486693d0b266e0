//! The network section of the hostile-plugin zoo (issue 40): one guest, `net-adversary`, tries
//! each thing a plugin that may reach out should not get away with, and each is contained and
//! on record. What got through is what the plugin could report; what the server saw is what
//! left the host.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use approval_host::config::{PluginSpec, Role};
use approval_host::plugin::net::{HostGrant, MAX_REQUESTS};
use approval_host::plugin::pending::{CallbackError, CallbackRequest, OnTimeout, Wait};
use approval_host::plugin::secret::{SCRUBBED, Secret};
use approval_host::{ApprovalRequest, Outcome, PluginHost, Position, Scope, bundled};
use axum::body::Body;
use axum::response::IntoResponse;
use serde_json::{Value, json};

use crate::fixtures::{self, Captured};
use crate::support::Host;

const S: &str = "s";
const VALUE: &str = "zoo-secret-value-0123456789";

/// A granted server that records `(path, Host header)` of each request.
async fn server() -> (u16, Arc<Mutex<Vec<(String, String)>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    let record = seen.clone();
    let app = axum::Router::new().fallback(
        move |uri: axum::http::Uri, headers: axum::http::HeaderMap| {
            let record = record.clone();
            async move {
                let header = |name: &str| {
                    headers
                        .get(name)
                        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
                        .unwrap_or_default()
                };
                record
                    .lock()
                    .unwrap()
                    .push((uri.path().to_owned(), header("host")));
                match uri.path() {
                    "/host" => header("host").into_response(),
                    "/echo-auth" => header("authorization").into_response(),
                    "/forever" => Body::from_stream(futures_util::stream::pending::<
                        Result<bytes::Bytes, std::io::Error>,
                    >())
                    .into_response(),
                    _ => "ok".into_response(),
                }
            }
        },
    );
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (port, seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_hostile_network_act_is_contained_and_on_record() {
    let (port, seen) = server().await;
    let host = Host::new();
    let (log, _lines) = Captured::new();
    let plugins = PluginHost::with_log_sink(Arc::new(log.clone())).unwrap();
    let path = fixtures::write(host.dir.path(), "zoo.wasm", bundled::NET_ADVERSARY);
    let mut spec = PluginSpec::new("zoo", path, Role::Answerer);
    spec.timeout = Duration::from_secs(2);
    spec.allow_hosts = vec![HostGrant::parse(&format!("http://127.0.0.1:{port}")).unwrap()];
    spec.config
        .insert("base".into(), format!("http://127.0.0.1:{port}"));
    spec.secrets.insert("key".into(), Secret::from_value(VALUE));
    spec.wait = Some(Wait {
        wait: Duration::from_secs(60),
        on_timeout: OnTimeout::Reject,
    });
    let plugin = plugins.load(&spec).unwrap();
    let _registered =
        host.service
            .register("zoo", Scope::Global, Position::Back, plugin.listener());
    let agent = host.service.agent(S, "a").await.unwrap();
    host.service.start_turn(S).await.unwrap();
    let canonical = format!("127.0.0.1:{port}");
    let denied = "failed: ErrorCode::HttpRequestDenied";
    let flood = format!("got: sent {MAX_REQUESTS}, refused {}", 20 - MAX_REQUESTS);
    let leaked = format!("got: Bearer {SCRUBBED}");
    // (act, outcome, the decided event's reason or failure, what the server saw of it)
    let acts: [(&str, Outcome, Value, Vec<&str>); 7] = [
        ("metadata", Outcome::Rejected, json!(denied), vec![]),
        ("other-port", Outcome::Rejected, json!(denied), vec![]),
        ("secret-elsewhere", Outcome::Rejected, json!(denied), vec![]),
        (
            "flood",
            Outcome::Rejected,
            json!(flood),
            vec!["/count"; MAX_REQUESTS],
        ),
        ("leak", Outcome::Rejected, json!(leaked), vec!["/echo-auth"]),
        (
            "forever",
            Outcome::Unavailable,
            json!({"plugin": "zoo", "kind": "timeout"}),
            vec!["/forever"],
        ),
        (
            "bad-correlation",
            Outcome::Unavailable,
            json!({"plugin": "zoo", "kind": "invalid-result"}),
            vec![],
        ),
    ];
    for (act, outcome, said, reached) in acts {
        seen.lock().unwrap().clear();
        let got = host
            .service
            .request(ApprovalRequest::new(&agent, act))
            .await
            .unwrap();
        assert_eq!(got, outcome, "{act}");
        let decided = host
            .events(S)
            .into_iter()
            .rev()
            .find(|(t, _)| t == "approval/decided")
            .unwrap()
            .1;
        let recorded = match outcome {
            Outcome::Unavailable => decided["failure"].clone(),
            _ => decided["reason"].clone(),
        };
        assert_eq!(recorded, said, "{act}: {decided}");
        let paths: Vec<String> = seen
            .lock()
            .unwrap()
            .iter()
            .map(|(p, _)| p.clone())
            .collect();
        assert_eq!(paths, reached, "{act}: what reached the server");
    }

    // A Host header of its own making is refused or replaced: the server only ever hears the
    // host that was checked.
    seen.lock().unwrap().clear();
    host.service
        .request(ApprovalRequest::new(&agent, "host-header"))
        .await
        .unwrap();
    for (_, host_header) in seen.lock().unwrap().iter() {
        assert_eq!(host_header, &canonical);
    }

    // Each refusal is a log line naming what was refused; the secret's value is in none.
    let lines: Vec<String> = log.lines().into_iter().map(|(_, _, l)| l).collect();
    for refused in [
        "refused a request to http://169.254.169.254:80: not a host the plugin's deployment entry grants (allow-hosts)".to_owned(),
        "refused a request to http://127.0.0.1:9: not a host the plugin's deployment entry grants (allow-hosts)".to_owned(),
        format!("refused a request to http://127.0.0.1:{port}: a decision makes at most {MAX_REQUESTS} requests"),
        format!("the server echoed Bearer {SCRUBBED}"),
    ] {
        assert!(lines.contains(&refused), "no log line {refused:?} in {lines:#?}");
    }
    assert!(lines.iter().all(|l| !l.contains(VALUE)));

    // Its callback may neither run forever nor reach out: there is no question to reach out for.
    let callback = |query: &str| CallbackRequest {
        method: "POST".into(),
        query: query.into(),
        ..CallbackRequest::default()
    };
    seen.lock().unwrap().clear();
    match plugin.take_callback(callback("reach")).await {
        Err(CallbackError::Refused { why, .. }) => {
            assert_eq!(why, "could not reach: ErrorCode::HttpRequestDenied");
        }
        other => panic!("{other:?}"),
    }
    assert!(seen.lock().unwrap().is_empty());
    let lines: Vec<String> = log.lines().into_iter().map(|(_, _, l)| l).collect();
    assert!(lines.contains(&format!(
        "refused a request to http://127.0.0.1:{port}: a plugin sends requests only while it decides"
    )));
    match plugin.take_callback(callback("loop")).await {
        Err(CallbackError::Refused { why, .. }) => {
            assert!(why.starts_with("the callback failed (timeout)"), "{why}");
        }
        other => panic!("{other:?}"),
    }
    // And after all that it still answers.
    match plugin.take_callback(callback("other")).await {
        Err(CallbackError::Refused { why, .. }) => assert_eq!(why, "the zoo refuses callbacks"),
        other => panic!("{other:?}"),
    }
}
