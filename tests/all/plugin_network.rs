//! Plugins of API 0.3 that reach out: a request goes only to a host the deployment entry grants
//! (a redirect elsewhere, another port, a name for the same address are each refused, logged and
//! never sent), the question is on record before the request leaves, and a response that never
//! ends or is too big is cut by the host. The plugin is `http-probe`, against local HTTP servers.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use approval_host::config::{PluginSpec, Role};
use approval_host::plugin::LogLevel;
use approval_host::plugin::net::HostGrant;
use approval_host::plugin::secret::{SCRUBBED, Secret};
use approval_host::{ApprovalRequest, Outcome, PluginHost, Position, Scope, bundled};
use axum::body::Body;
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use crate::fixtures::{self, Captured};
use crate::support::{Host, events_so_far, log_path};

const S: &str = "s";

/// A local server: what it was asked (path, and how many questions the session's log held at
/// that moment), and its address.
struct Server {
    port: u16,
    seen: Arc<Mutex<Vec<(String, usize)>>>,
}

impl Server {
    async fn start(log: std::path::PathBuf, other: Option<u16>) -> Server {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen: Arc<Mutex<Vec<(String, usize)>>> = Arc::default();
        let record = seen.clone();
        let app = axum::Router::new().fallback(
            move |uri: axum::http::Uri, headers: axum::http::HeaderMap| {
                let record = record.clone();
                let log = log.clone();
                async move {
                    let asked = events_so_far(&log)
                        .iter()
                        .filter(|(t, _)| t == "approval/asked")
                        .count();
                    record.lock().unwrap().push((uri.path().to_owned(), asked));
                    if uri.path() == "/echo-auth" {
                        let auth = headers
                            .get("authorization")
                            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
                        return auth.unwrap_or_default().into_response();
                    }
                    respond(uri.path(), port, other)
                }
            },
        );
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Server { port, seen }
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    fn paths(&self) -> Vec<String> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .map(|(p, _)| p.clone())
            .collect()
    }
}

fn respond(path: &str, port: u16, other: Option<u16>) -> Response {
    match path {
        "/allow" => "allow".into_response(),
        "/reject" => "reject:the server says no".into_response(),
        "/redirect-in" => redirect(&format!("http://127.0.0.1:{port}/allow")),
        "/redirect-out" => redirect(&format!(
            "http://127.0.0.1:{}/allow",
            other.expect("a second server")
        )),
        "/never" => {
            // The head, then a body that never ends.
            let stream = futures_util::stream::pending::<Result<bytes::Bytes, std::io::Error>>();
            Body::from_stream(stream).into_response()
        }
        "/big" => {
            let chunk = bytes::Bytes::from(vec![b'x'; 1 << 20]);
            let stream = futures_util::stream::iter(
                (0..50).map(move |_| Ok::<_, std::io::Error>(chunk.clone())),
            );
            Body::from_stream(stream).into_response()
        }
        _ => (axum::http::StatusCode::NOT_FOUND, "no").into_response(),
    }
}

fn redirect(to: &str) -> Response {
    (
        axum::http::StatusCode::FOUND,
        [(axum::http::header::LOCATION, to.to_owned())],
    )
        .into_response()
}

struct Rig {
    host: Host,
    plugins: PluginHost,
    log: Captured,
    agent: approval_host::Agent,
}

impl Rig {
    async fn new() -> Rig {
        let host = Host::new();
        let (log, _logged) = Captured::new();
        let plugins = PluginHost::with_log_sink(Arc::new(log.clone())).unwrap();
        let agent = host.service.agent(S, "a").await.unwrap();
        host.service.start_turn(S).await.unwrap();
        Rig {
            host,
            plugins,
            log,
            agent,
        }
    }

    fn log_file(&self) -> std::path::PathBuf {
        log_path(self.host.dir.path(), S)
    }

    /// Asks once with the probe fetching `url`, granted `grants`; the outcome and the decision's
    /// record.
    async fn ask(&self, url: &str, grants: &[&str], follow: bool) -> (Outcome, Value) {
        self.ask_with(url, grants, |spec| {
            if follow {
                spec.config.insert("follow".to_owned(), "yes".to_owned());
            }
        })
        .await
    }

    async fn ask_with(
        &self,
        url: &str,
        grants: &[&str],
        tweak: impl FnOnce(&mut PluginSpec),
    ) -> (Outcome, Value) {
        let path = fixtures::write(self.host.dir.path(), "probe.wasm", bundled::HTTP_PROBE);
        let mut spec = PluginSpec::new("probe", path, Role::Answerer);
        spec.config.insert("url".to_owned(), url.to_owned());
        spec.timeout = Duration::from_secs(5);
        spec.allow_hosts = grants
            .iter()
            .map(|g| HostGrant::parse(g).unwrap())
            .collect();
        tweak(&mut spec);
        let plugin = self.plugins.load(&spec).unwrap();
        let _registered =
            self.host
                .service
                .register("probe", Scope::Global, Position::Back, plugin.listener());
        let outcome = self
            .host
            .service
            .request(ApprovalRequest::new(&self.agent, "deploy"))
            .await
            .unwrap();
        let decided = self
            .host
            .events(S)
            .into_iter()
            .rev()
            .find(|(t, _)| t == "approval/decided")
            .unwrap()
            .1;
        (outcome, decided)
    }
}

fn denied() -> &'static str {
    "request failed: ErrorCode::HttpRequestDenied"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_reaches_only_the_hosts_its_entry_grants() {
    let rig = Rig::new().await;
    let other = Server::start(rig.log_file(), None).await;
    let server = Server::start(rig.log_file(), Some(other.port)).await;
    let granted = format!("http://127.0.0.1:{}", server.port);
    let grants = [granted.as_str()];

    // Granted: the answer is the server's.
    let (outcome, _) = rig.ask(&server.url("/allow"), &grants, false).await;
    assert_eq!(outcome, Outcome::AllowedOnce);
    let (outcome, decided) = rig.ask(&server.url("/reject"), &grants, false).await;
    assert_eq!(outcome, Outcome::Rejected);
    assert_eq!(decided["reason"], "the server says no");
    // A redirect to the same grant is followed (a new request, admitted again).
    let (outcome, _) = rig.ask(&server.url("/redirect-in"), &grants, true).await;
    assert_eq!(outcome, Outcome::AllowedOnce);
    assert_eq!(
        server.paths(),
        ["/allow", "/reject", "/redirect-in", "/allow"]
    );
    // Every request arrived after its question was on record.
    let seen = server.seen.lock().unwrap().clone();
    for (i, (_, asked)) in seen.iter().enumerate() {
        let questions = [1, 2, 3, 3][i];
        assert_eq!(*asked, questions, "request {i} came before its question");
    }

    // Not granted, each a request never sent: another port, another name for the address, the
    // other scheme, a redirect to another host, and a plugin granted nothing.
    let refused: Vec<(String, Vec<String>, bool, String)> = vec![
        (
            other.url("/allow"),
            vec![granted.clone()],
            false,
            format!(
                "refused a request to http://127.0.0.1:{}: not a host the plugin's deployment entry grants (allow-hosts)",
                other.port
            ),
        ),
        (
            format!("http://localhost:{}/allow", server.port),
            vec![granted.clone()],
            false,
            format!(
                "refused a request to http://localhost:{}: not a host the plugin's deployment entry grants (allow-hosts)",
                server.port
            ),
        ),
        (
            format!("https://127.0.0.1:{}/allow", server.port),
            vec![granted.clone()],
            false,
            format!(
                "refused a request to https://127.0.0.1:{}: not a host the plugin's deployment entry grants (allow-hosts)",
                server.port
            ),
        ),
        (
            server.url("/redirect-out"),
            vec![granted.clone()],
            true,
            format!(
                "refused a request to http://127.0.0.1:{}: not a host the plugin's deployment entry grants (allow-hosts)",
                other.port
            ),
        ),
        (
            server.url("/allow"),
            vec![],
            false,
            format!(
                "refused a request to http://127.0.0.1:{}: the plugin's deployment entry grants no host (allow-hosts)",
                server.port
            ),
        ),
    ];
    for (url, grants, follow, logged) in refused {
        let grants: Vec<&str> = grants.iter().map(String::as_str).collect();
        let (outcome, decided) = rig.ask(&url, &grants, follow).await;
        assert_eq!(outcome, Outcome::Rejected, "{url}");
        assert_eq!(decided["reason"], denied(), "{url}");
        assert!(
            rig.log
                .lines()
                .iter()
                .any(|(plugin, level, line)| plugin == "probe"
                    && *level == LogLevel::Warn
                    && *line == logged),
            "{url}: {:?}",
            rig.log.lines()
        );
    }
    // A granted name is never followed to this machine: `localhost` resolves to loopback,
    // which only a grant naming the address literally reaches.
    let by_name = format!("http://localhost:{}", server.port);
    let (outcome, decided) = rig
        .ask(&format!("{by_name}/allow"), &[by_name.as_str()], false)
        .await;
    assert_eq!(outcome, Outcome::Rejected);
    assert_eq!(
        decided["reason"],
        "request failed: ErrorCode::DestinationIpProhibited"
    );
    assert!(other.paths().is_empty(), "{:?}", other.paths());
    assert_eq!(
        server.paths(),
        [
            "/allow",
            "/reject",
            "/redirect-in",
            "/allow",
            "/redirect-out"
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_that_never_ends_or_is_too_big_is_cut_by_the_host() {
    let rig = Rig::new().await;
    let server = Server::start(rig.log_file(), None).await;
    let granted = format!("http://127.0.0.1:{}", server.port);

    // 50 MiB offered: the body ends in an error at 4 MiB, and the plugin says so.
    let (outcome, decided) = rig.ask(&server.url("/big"), &[&granted], false).await;
    assert_eq!(outcome, Outcome::Rejected);
    let reason = decided["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("request failed: reading the body:"),
        "{reason}"
    );

    // A body that never ends is cut at the decision's deadline: the plugin reads an error, or
    // is stopped by the deadline itself; it never allows and never hangs the host.
    let path = fixtures::write(rig.host.dir.path(), "slow.wasm", bundled::HTTP_PROBE);
    let mut spec = PluginSpec::new("slow", path, Role::Answerer);
    spec.config.insert("url".to_owned(), server.url("/never"));
    spec.timeout = Duration::from_millis(300);
    spec.allow_hosts = vec![HostGrant::parse(&granted).unwrap()];
    let plugin = rig.plugins.load(&spec).unwrap();
    let _registered =
        rig.host
            .service
            .register("slow", Scope::Global, Position::Front, plugin.listener());
    let outcome = rig
        .host
        .service
        .request(ApprovalRequest::new(&rig.agent, "deploy"))
        .await
        .unwrap();
    let decided = rig
        .host
        .events(S)
        .into_iter()
        .rev()
        .find(|(t, _)| t == "approval/decided")
        .unwrap()
        .1;
    match outcome {
        Outcome::Unavailable => assert_eq!(decided["failure"]["kind"], "timeout", "{decided}"),
        Outcome::Rejected => assert!(
            decided["reason"]
                .as_str()
                .is_some_and(|r| r.starts_with("request failed: reading the body:")),
            "{decided}"
        ),
        other => panic!("{other:?}: {decided}"),
    }
    assert_eq!(server.paths(), ["/big", "/never"]);
}

#[test]
fn a_grant_names_one_host_and_an_older_plugin_cannot_have_one() {
    let dir = tempfile::tempdir().unwrap();
    let wasm = fixtures::write(dir.path(), "probe.wasm", bundled::HTTP_PROBE);
    for (entry, why) in [
        ("*.slack.com", "wildcards are not taken: list each host"),
        (
            "hooks.slack.com/services",
            "a grant names a host (and port), not a path",
        ),
        (
            "user:pw@hooks.slack.com",
            "credentials are not taken in a grant",
        ),
        (
            "ftp://hooks.slack.com",
            "the scheme \"ftp\" is not http or https",
        ),
    ] {
        let file = dir.path().join("deploy.toml");
        std::fs::write(
            &file,
            format!(
                "[[plugin]]\nname = \"probe\"\npath = {:?}\nrole = \"answerer\"\nallow-hosts = [\"hooks.slack.com\", {entry:?}]\n",
                wasm.display().to_string()
            ),
        )
        .unwrap();
        let err = approval_host::Deployment::load(&file)
            .unwrap_err()
            .to_string();
        assert!(
            err.ends_with(&format!("plugin \"probe\": allow-hosts {entry:?}: {why}")),
            "{err}"
        );
    }

    // A 0.2 plugin cannot send requests: a grant for it is refused at load.
    let host = PluginHost::new().unwrap();
    let path = fixtures::write(dir.path(), "deny.wasm", bundled::DENY_COMMANDS);
    let mut spec = PluginSpec::new("deny", path, Role::Gate);
    spec.allow_hosts = vec![HostGrant::parse("hooks.slack.com").unwrap()];
    let err = host.load(&spec).unwrap_err().to_string();
    assert!(
        err.contains(
            "allow-hosts: the plugin is built against approval:plugin@0.2.0, which cannot send requests (0.3 can)"
        ),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_goes_only_into_a_granted_request_and_never_back_out_of_the_plugin() {
    let rig = Rig::new().await;
    let server = Server::start(rig.log_file(), None).await;
    let granted = format!("http://127.0.0.1:{}", server.port);
    const VALUE: &str = "xoxb-s3cr3t-value";
    let with_secret = |header: &'static str| {
        move |spec: &mut PluginSpec| {
            spec.secrets
                .insert("token".to_owned(), Secret::from_value(VALUE));
            spec.config.insert("header".to_owned(), header.to_owned());
            spec.config.insert("echo".to_owned(), "yes".to_owned());
        }
    };

    // The host fills the header; the server sees the value; it comes back, and the plugin's
    // log line and reason carry `[secret]` instead.
    let (outcome, decided) = rig
        .ask_with(
            &server.url("/echo-auth"),
            &[&granted],
            with_secret("authorization: Bearer {secret:token}"),
        )
        .await;
    assert_eq!(outcome, Outcome::Rejected);
    assert_eq!(
        decided["reason"],
        format!("the server said: Bearer {SCRUBBED}")
    );
    assert!(
        rig.log
            .lines()
            .iter()
            .any(|(p, _, line)| p == "probe"
                && *line == format!("the server said: Bearer {SCRUBBED}"))
    );
    assert!(
        rig.log
            .lines()
            .iter()
            .all(|(_, _, line)| !line.contains(VALUE)),
        "{:?}",
        rig.log.lines()
    );

    // A name the deployment does not give: refused, never sent.
    let (outcome, decided) = rig
        .ask_with(
            &server.url("/echo-auth"),
            &[&granted],
            with_secret("authorization: Bearer {secret:other}"),
        )
        .await;
    assert_eq!(outcome, Outcome::Rejected);
    assert_eq!(decided["reason"], denied());
    assert!(rig.log.lines().iter().any(|(p, _, line)| p == "probe"
        && *line
            == format!(
                "refused a request to http://127.0.0.1:{}: no secret named \"other\"",
                server.port
            )));
    // In clear text to a name (not this machine by address): refused before anything is sent.
    let by_name = format!("http://localhost:{}", server.port);
    let (outcome, _) = rig
        .ask_with(
            &format!("{by_name}/echo-auth"),
            &[by_name.as_str()],
            with_secret("authorization: Bearer {secret:token}"),
        )
        .await;
    assert_eq!(outcome, Outcome::Rejected);
    assert!(rig.log.lines().iter().any(|(p, _, line)| p == "probe"
        && *line
            == format!(
                "refused a request to {by_name}: a secret is sent only over https (or to this machine by address)"
            )));
    assert_eq!(server.paths(), ["/echo-auth"]);
    // The value is nowhere in the session's log.
    let written = std::fs::read_to_string(rig.log_file()).unwrap();
    assert!(!written.contains(VALUE));

    // An HMAC is checked by the secret's name, without the plugin holding the key.
    use hmac::Mac;
    let mut mac = <hmac::Hmac<sha2::Sha256> as Mac>::new_from_slice(VALUE.as_bytes()).unwrap();
    mac.update(b"v0:1700000000:payload");
    let hex: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    for (message, expected) in [
        ("v0:1700000000:payload", Outcome::AllowedOnce),
        ("v0:1700000000:payloae", Outcome::Rejected),
    ] {
        let (outcome, _) = rig
            .ask_with(&server.url("/unused"), &[&granted], |spec| {
                spec.secrets
                    .insert("key".to_owned(), Secret::from_value(VALUE));
                spec.config
                    .insert("verify".to_owned(), format!("{message}|{hex}"));
            })
            .await;
        assert_eq!(outcome, expected, "{message}");
    }
    assert_eq!(server.paths(), ["/echo-auth"], "verify sends nothing");
}

#[test]
fn a_secret_is_named_by_where_its_value_is_never_by_the_value() {
    let dir = tempfile::tempdir().unwrap();
    let wasm = fixtures::write(dir.path(), "probe.wasm", bundled::HTTP_PROBE);
    std::fs::write(dir.path().join("key.txt"), "from-file\n").unwrap();
    let deploy = |secrets: &str| {
        let file = dir.path().join("deploy.toml");
        std::fs::write(
            &file,
            format!(
                "[[plugin]]\nname = \"probe\"\npath = {:?}\nrole = \"answerer\"\nsecrets = {{ {secrets} }}\n",
                wasm.display().to_string()
            ),
        )
        .unwrap();
        approval_host::Deployment::load(&file)
    };
    let loaded = deploy("key = \"file:key.txt\"").unwrap();
    let spec = &loaded.plugins[0];
    assert_eq!(format!("{:?}", spec.secrets["key"]), SCRUBBED);
    assert!(!format!("{spec:?}").contains("from-file"));
    for (secrets, why) in [
        (
            "token = \"xoxb-literal\"",
            "secrets.token: must be \"env:NAME\" or \"file:PATH\" (a value is never written in the deployment)",
        ),
        (
            "token = \"env:APPROVAL_HOST_TEST_NO_SUCH_SECRET\"",
            "secrets.token: the environment has no APPROVAL_HOST_TEST_NO_SUCH_SECRET",
        ),
        (
            "\"a b\" = \"file:key.txt\"",
            "secrets.\"a b\": a name is letters, digits, - and _",
        ),
    ] {
        let err = deploy(secrets).unwrap_err().to_string();
        assert!(err.ends_with(&format!("plugin \"probe\": {why}")), "{err}");
        assert!(!err.contains("from-file") && !err.contains("xoxb"), "{err}");
    }
}
