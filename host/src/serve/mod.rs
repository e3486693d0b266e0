//! `approval-host serve`: the host as a long-running JSON-RPC 2.0 service for harnesses in any
//! language, over stdio or a Unix socket, with hot reload of the deployment and its plugins.
//!
//! Each connection may open sessions (the connection that opens a session owns it), run turns,
//! record tool calls, ask, switch policy and read the runtime context. A connection that
//! initialised with `answerer: true` is registered as the last answerer for the sessions it owns:
//! the host sends it `approval/prompt` and maps its reply; any reply but the three decisions
//! never grants, and an error reply or a closed connection settles `unavailable`. Nothing a client
//! sends can crash the server: bad input gets a JSON-RPC error and the server keeps serving.

pub mod auth;
pub mod console;
mod hook;
pub mod rpc;
mod rules;
pub mod tls;
mod watch;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Instant;

use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::agent::Agent;
use crate::answer::{Answer, Authority, Effect, RuleScope, clean_reason};
use crate::assemble::{self, AssembleError};
use crate::config::token::TokenRole;
use crate::config::{ConfigError, Deployment};
use crate::outcome::{Decision, Failure, Outcome};
use crate::plugin::cache::CompiledCache;
use crate::plugin::{LogSink, Mounted, PluginHost, QuarantinePolicy, ReloadReport, TracingSink};
use crate::policy::Policy;
use crate::service::{ApprovalRequest, ApprovalService};
use crate::tools::texts;
use crate::waterfall::{
    AnswerFuture, Listener, ListenerFuture, Position, Question, Registration, Scope,
};
use rpc::{RpcError, opt_str_param, str_param};

pub use watch::Watcher;

/// The protocol version `initialize` reports.
pub const PROTOCOL_VERSION: &str = "0.1";

/// The notification an answering client gets when the rule it proposed with an answer will not
/// be kept (`{requestId, rule, scope, reason}`); its decision stands for that call.
pub const RULE_DECLINED: &str = "approval/ruleDeclined";

/// Plugin API versions this host serves.
pub const PLUGIN_API_VERSIONS: [&str; 2] = crate::plugin::SERVED_API_VERSIONS;

/// What `serve` needs.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// The deployment file.
    pub config: PathBuf,
    /// Session logs and the compiled cache live here.
    pub state_dir: PathBuf,
    /// When plugins are quarantined.
    pub quarantine: QuarantinePolicy,
    /// A database URL for the session logs and rules (over the deployment's `[store] url`).
    pub store_url: Option<String>,
    /// Create or migrate the database schema when it is behind.
    pub migrate: bool,
}

/// A server that could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The deployment file is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A part of the deployment could not be put together (a plugin, the rules, the signing
    /// key, the store), naming the deployment file.
    #[error(transparent)]
    Assemble(#[from] crate::assemble::AssembleError),
    /// Listening or watching failed.
    #[error("{0}")]
    Io(String),
}

struct SessionEntry {
    owner: u64,
    agent: Agent,
}

struct Inner {
    options: ServeOptions,
    service: ApprovalService,
    host: PluginHost,
    mounted: Arc<tokio::sync::Mutex<Mounted>>,
    sessions: Mutex<HashMap<String, SessionEntry>>,
    next_conn: AtomicU64,
    /// The deployment's `[claude-code]` settings (replaced on reload).
    hook_options: Mutex<crate::claude_code::HookOptions>,
    /// The turns of Claude Code sessions asked through `hook/claude-code`.
    hook_turns: crate::claude_code::HookTurns,
    /// The deployment's tokens and the failed attempts per peer.
    gatekeeper: Arc<auth::Gatekeeper>,
    /// The questions waiting on the web console, when the deployment has `[[answerer]] kind =
    /// "web"`; its registration keeps it in the waterfall.
    web: Option<(Arc<console::pending::Pending>, Registration)>,
}

/// A running host.
#[derive(Clone)]
pub struct Server {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("config", &self.inner.options.config)
            .finish_non_exhaustive()
    }
}

impl Server {
    /// Loads the deployment (all plugins, or none: the server does not start without one) with
    /// compiled components cached under `<state-dir>/cache`.
    pub async fn start(options: ServeOptions) -> Result<Server, ServeError> {
        Self::start_with_sink(options, Arc::new(TracingSink)).await
    }

    /// [`Server::start`] with plugin log lines going to `sink`.
    pub async fn start_with_sink(
        options: ServeOptions,
        sink: Arc<dyn LogSink>,
    ) -> Result<Server, ServeError> {
        let deployment = Deployment::load(&options.config)?;
        let file = assemble::file_of(&deployment);
        let store = {
            let (deployment, options, file) = (deployment.clone(), options.clone(), file.clone());
            tokio::task::spawn_blocking(move || {
                assemble::open_store(
                    Some(&deployment),
                    options.store_url.as_deref(),
                    &options.state_dir,
                    options.migrate,
                )
                .map_err(|source| AssembleError::Store { file, source })
            })
            .await
            .expect("opening the store does not panic")?
        };
        let service = ApprovalService::with_store(store, deployment.default_policy);
        // A server always keeps standing rules: its clients may add them at any time.
        assemble::prepare(&service, &deployment, &options.state_dir, true)?;
        let hook_options = assemble::hook_options(&deployment, None);
        let gatekeeper = Arc::new(auth::Gatekeeper::new(deployment.tokens.clone()));
        let web = deployment.web_answerer.clone().map(|spec| {
            let pending = Arc::new(console::pending::Pending::default());
            let registration = service.register(
                "web",
                Scope::Global,
                Position::Last,
                console::pending::WebAnswerer {
                    pending: pending.clone(),
                    spec,
                },
            );
            (pending, registration)
        });
        let cache = CompiledCache::new(options.state_dir.join("cache"));
        let host = PluginHost::with_cache(sink, cache)
            .map_err(|source| AssembleError::Plugin { file, source })?;
        let started = Instant::now();
        let (svc, h, quarantine) = (service.clone(), host.clone(), options.quarantine);
        let mounted =
            tokio::task::spawn_blocking(move || assemble::mount(&svc, &h, &deployment, quarantine))
                .await
                .map_err(|e| ServeError::Io(e.to_string()))??;
        tracing::info!(
            plugins = mounted.plugins().len(),
            ms = started.elapsed().as_secs_f64() * 1e3,
            "deployment loaded"
        );
        Ok(Server {
            inner: Arc::new(Inner {
                options,
                service,
                host,
                mounted: Arc::new(tokio::sync::Mutex::new(mounted)),
                sessions: Mutex::new(HashMap::new()),
                next_conn: AtomicU64::new(1),
                hook_options: Mutex::new(hook_options),
                hook_turns: crate::claude_code::HookTurns::default(),
                gatekeeper,
                web,
            }),
        })
    }

    /// The approval service behind the server.
    pub fn service(&self) -> &ApprovalService {
        &self.inner.service
    }

    /// Every plugin of the deployment, loaded or not, as `plugins/list` shows them.
    pub async fn plugin_status(&self) -> Vec<crate::plugin::mount::PluginStatus> {
        self.inner.mounted.lock().await.status()
    }

    /// Re-reads the deployment file and moves to it (see [`Mounted::apply`]); quarantines end.
    /// An invalid deployment file changes nothing.
    pub async fn reload(&self) -> Result<ReloadReport, ConfigError> {
        let deployment = Deployment::load(&self.inner.options.config)?;
        *self
            .inner
            .hook_options
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = assemble::hook_options(&deployment, None);
        self.inner.gatekeeper.set_tokens(deployment.tokens.clone());
        self.inner
            .service
            .set_protected(Some(deployment.protected(&self.inner.options.state_dir)));
        if let Some(book) = self.inner.service.rules() {
            assemble::reload_rules(&book, &deployment);
        }
        let mounted = self.inner.mounted.clone();
        let host = self.inner.host.clone();
        let service = self.inner.service.clone();
        let report = tokio::task::spawn_blocking(move || {
            let mut mounted = mounted.blocking_lock();
            let report = assemble::reload_plugins(&service, &mut mounted, &host, &deployment);
            mounted.release_all();
            report
        })
        .await
        .unwrap_or_default();
        tracing::info!(?report, "deployment reloaded");
        Ok(report)
    }

    /// The files a reload depends on: the deployment file and every plugin's component.
    pub async fn watched_paths(&self) -> Vec<PathBuf> {
        let mut paths = vec![self.inner.options.config.clone()];
        if let Ok(d) = Deployment::load(&self.inner.options.config) {
            paths.extend(d.plugins.into_iter().map(|p| p.path));
        }
        paths
    }

    /// Serves one client on stdin/stdout until stdin closes.
    pub async fn serve_stdio(&self) {
        self.connection(tokio::io::stdin(), tokio::io::stdout())
            .await;
    }

    /// Serves many clients on a Unix socket at `path` until the task is dropped.
    pub async fn serve_unix(&self, path: &Path) -> Result<(), ServeError> {
        if path.exists() {
            if tokio::net::UnixStream::connect(path).await.is_ok() {
                return Err(ServeError::Io(format!(
                    "{}: another server is listening there",
                    path.display()
                )));
            }
            std::fs::remove_file(path)
                .map_err(|e| ServeError::Io(format!("{}: {e}", path.display())))?;
        }
        let listener = tokio::net::UnixListener::bind(path)
            .map_err(|e| ServeError::Io(format!("{}: {e}", path.display())))?;
        // Only the owner may connect; with tokens declared, each connection also authenticates.
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
                .map_err(|e| ServeError::Io(format!("{}: {e}", path.display())))?;
        }
        loop {
            let (stream, _) = listener
                .accept()
                .await
                .map_err(|e| ServeError::Io(format!("{}: {e}", path.display())))?;
            let server = self.clone();
            tokio::spawn(async move {
                let (read, write) = stream.into_split();
                let authenticate = server.inner.gatekeeper.has_tokens();
                server
                    .connection_as(read, write, "unix socket".to_owned(), authenticate)
                    .await;
            });
        }
    }

    /// Serves the web console on `listener` (over TLS when `tls` is given) until the task is
    /// dropped. The deployment must have `[[answerer]] kind = "web"` (what the console answers)
    /// and tokens (who may log in).
    pub async fn serve_console(
        &self,
        listener: tokio::net::TcpListener,
        tls: Option<tokio_rustls::TlsAcceptor>,
    ) -> Result<(), ServeError> {
        let file = self.inner.options.config.display().to_string();
        let Some((pending, _)) = &self.inner.web else {
            return Err(ServeError::Io(format!(
                "{file}: the web console needs [[answerer]] kind = \"web\" in the deployment"
            )));
        };
        if !self.inner.gatekeeper.has_tokens() {
            return Err(ServeError::Io(format!(
                "{file}: the web console needs [[token]] entries with the answerer role: people log in with them"
            )));
        }
        let console = console::Console::new(self.clone(), pending.clone(), tls.is_some());
        console
            .serve(listener, tls)
            .await
            .map_err(|e| ServeError::Io(format!("web console: {e}")))
    }

    /// Serves many clients over TCP at `addr`, over TLS unless `tls` is `None` (plain TCP, which
    /// the command line allows only with `--insecure-plaintext`). Every connection authenticates
    /// with a token: the deployment must declare some. Returns the bound address through `bound`
    /// (port 0 picks a free one).
    pub async fn serve_tcp(
        &self,
        addr: &str,
        tls: Option<tokio_rustls::TlsAcceptor>,
        bound: Option<oneshot::Sender<std::net::SocketAddr>>,
    ) -> Result<(), ServeError> {
        if !self.inner.gatekeeper.has_tokens() {
            return Err(ServeError::Io(format!(
                "{}: serving over the network needs [[token]] entries: every connection must authenticate (approval-host token new --role agent --config FILE)",
                self.inner.options.config.display()
            )));
        }
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| ServeError::Io(format!("{addr}: {e}")))?;
        let local = listener
            .local_addr()
            .map_err(|e| ServeError::Io(format!("{addr}: {e}")))?;
        tracing::info!(%local, tls = tls.is_some(), "listening");
        if let Some(bound) = bound {
            let _ = bound.send(local);
        }
        loop {
            let (stream, peer) = listener
                .accept()
                .await
                .map_err(|e| ServeError::Io(format!("{addr}: {e}")))?;
            let _ = stream.set_nodelay(true);
            let server = self.clone();
            let tls = tls.clone();
            tokio::spawn(async move {
                // Failures are counted per address, not per port: a client reconnects from a new
                // port each time.
                let peer_name = format!("tcp {}", peer.ip());
                match tls {
                    None => {
                        let (read, write) = stream.into_split();
                        server.connection_as(read, write, peer_name, true).await;
                    }
                    Some(acceptor) => {
                        if let Some(stream) = tls::accept(&acceptor, stream, &peer).await {
                            let (read, write) = tokio::io::split(stream);
                            server.connection_as(read, write, peer_name, true).await;
                        }
                    }
                }
            });
        }
    }

    /// Serves one client on a reader and writer of JSON lines, as a local client (stdio) that
    /// needs no token.
    pub async fn connection<R, W>(&self, reader: R, writer: W)
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        self.connection_as(reader, writer, "stdio".to_owned(), false)
            .await;
    }

    /// Serves one client from `peer`, which must first authenticate when `authenticate`.
    async fn connection_as<R, W>(&self, reader: R, mut writer: W, peer: String, authenticate: bool)
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let (tx, mut rx) = mpsc::unbounded_channel::<String>();
        let conn = Arc::new(Conn {
            id: self.inner.next_conn.fetch_add(1, Ordering::Relaxed),
            peer,
            grant: Mutex::new((!authenticate).then(auth::Grant::local)),
            closing: CancellationToken::new(),
            out: tx,
            next_out: AtomicU64::new(1),
            prompts: Mutex::new(HashMap::new()),
            inflight: Mutex::new(HashMap::new()),
            answerer: Mutex::new(None),
        });
        let writer_task = tokio::spawn(async move {
            while let Some(mut line) = rx.recv().await {
                line.push('\n');
                if writer.write_all(line.as_bytes()).await.is_err() || writer.flush().await.is_err()
                {
                    break;
                }
            }
        });
        // Requests run in the order they arrive, one at a time, except `approval/request`, which
        // may wait on an answerer for long and so runs beside the others once admitted.
        let (calls, mut queue) = mpsc::unbounded_channel::<Call>();
        let dispatcher = {
            let server = self.clone();
            let conn = conn.clone();
            tokio::spawn(async move {
                let mut asks = tokio::task::JoinSet::new();
                while let Some((id, method, params)) = queue.recv().await {
                    // Both may wait on an answerer for long.
                    if method == "approval/request" || method == "hook/claude-code" {
                        let server = server.clone();
                        let conn = conn.clone();
                        asks.spawn(async move {
                            let result = server.call(&conn, &id, &method, params).await;
                            conn.send(rpc::response(&id, result));
                        });
                    } else {
                        let result = server.call(&conn, &id, &method, params).await;
                        conn.send(rpc::response(&id, result));
                    }
                }
                // The client stopped sending: it can no longer answer prompts (they settle
                // `unavailable`), but its questions still finish and are answered and audited.
                conn.lock_answerer().take();
                conn.lock_prompts().clear();
                while asks.join_next().await.is_some() {}
            })
        };
        let mut reader = tokio::io::BufReader::new(reader);
        let mut line = Vec::new();
        loop {
            let read = tokio::select! {
                read = rpc::read_line(&mut reader, &mut line) => read,
                () = conn.closing.cancelled() => break,
            };
            match read {
                Ok(rpc::Line::Text) => match std::str::from_utf8(&line) {
                    Ok(text) => self.handle_line(&conn, &calls, text),
                    Err(_) => conn.send(rpc::response(
                        &Value::Null,
                        Err(RpcError::new(rpc::PARSE_ERROR, "parse error: not UTF-8")),
                    )),
                },
                Ok(rpc::Line::TooLong) => conn.send(rpc::response(
                    &Value::Null,
                    Err(RpcError::new(
                        rpc::INVALID_REQUEST,
                        "message longer than 1 MiB; skipped",
                    )),
                )),
                Ok(rpc::Line::End) | Err(_) => break,
            }
        }
        drop(calls);
        let _ = dispatcher.await;
        self.disconnect(&conn).await;
        drop(conn);
        let _ = writer_task.await;
    }

    /// Releases what a closed connection held: its answerer, its pending prompts (they settle
    /// `unavailable`), its requests (cancelled) and its sessions (open turns are ended).
    async fn disconnect(&self, conn: &Arc<Conn>) {
        conn.lock_answerer().take();
        conn.lock_prompts().clear();
        for (_, token) in conn.lock_inflight().drain() {
            token.cancel();
        }
        let owned: Vec<String> = {
            let mut sessions = self.inner.lock_sessions();
            let ids: Vec<String> = sessions
                .iter()
                .filter(|(_, e)| e.owner == conn.id)
                .map(|(id, _)| id.clone())
                .collect();
            for id in &ids {
                sessions.remove(id);
            }
            ids
        };
        for session in owned {
            if self
                .inner
                .service
                .turn_open(&session)
                .await
                .unwrap_or(false)
            {
                let _ = self.inner.service.end_turn(&session).await;
            }
        }
    }

    fn handle_line(&self, conn: &Arc<Conn>, queue: &mpsc::UnboundedSender<Call>, line: &str) {
        if line.trim().is_empty() {
            return;
        }
        let message: Value = match serde_json::from_str(line) {
            Ok(v) => v,
            Err(e) => {
                conn.send(rpc::response(
                    &Value::Null,
                    Err(RpcError::new(rpc::PARSE_ERROR, format!("parse error: {e}"))),
                ));
                return;
            }
        };
        let id = message.get("id").cloned();
        match (message.get("method").and_then(Value::as_str), id) {
            (Some(method), Some(id)) if !id.is_null() => {
                let params = message.get("params").cloned().unwrap_or(Value::Null);
                let _ = queue.send((id, method.to_owned(), params));
            }
            (Some("$/cancel_request"), _) => {
                if let Some(id) = message.pointer("/params/id")
                    && let Some(token) = conn.lock_inflight().get(&id.to_string())
                {
                    token.cancel();
                }
            }
            (Some(_), _) => {} // Unknown notifications are ignored, as JSON-RPC asks.
            (None, Some(id))
                if message.get("result").is_some() || message.get("error").is_some() =>
            {
                let answer = match message.get("error") {
                    Some(e) => Err(RpcError::new(
                        e.get("code").and_then(Value::as_i64).unwrap_or(0),
                        e.get("message")
                            .and_then(Value::as_str)
                            .unwrap_or("error")
                            .to_owned(),
                    )),
                    None => Ok(message.get("result").cloned().unwrap_or(Value::Null)),
                };
                if let Some(waiter) = id.as_u64().and_then(|id| conn.lock_prompts().remove(&id)) {
                    let _ = waiter.send(answer);
                }
            }
            (None, id) => conn.send(rpc::response(
                &id.unwrap_or(Value::Null),
                Err(RpcError::new(
                    rpc::INVALID_REQUEST,
                    "not a JSON-RPC request, notification or response",
                )),
            )),
        }
    }

    /// Authenticates (`initialize` with a token) or checks that the connection's grant allows
    /// `method`. A connection that fails to authenticate is closed after the error is sent.
    fn admit(&self, conn: &Conn, method: &str, params: &Value) -> Result<auth::Grant, RpcError> {
        let current = conn.grant.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let grant = match current {
            Some(grant) => grant,
            None if method == "initialize" => {
                let token = params.get("token").and_then(Value::as_str);
                match self.inner.gatekeeper.check(&conn.peer, token) {
                    Ok(grant) => {
                        *conn.grant.lock().unwrap_or_else(|p| p.into_inner()) = Some(grant.clone());
                        grant
                    }
                    Err(text) => {
                        conn.closing.cancel();
                        return Err(RpcError::new(auth::UNAUTHENTICATED, text));
                    }
                }
            }
            None => {
                conn.closing.cancel();
                return Err(RpcError::new(
                    auth::UNAUTHENTICATED,
                    auth::NOT_AUTHENTICATED,
                ));
            }
        };
        match auth::role_for(method) {
            Some(role) if !grant.has(role) => Err(forbidden(&grant, method, role)),
            _ => Ok(grant),
        }
    }

    fn owned(&self, conn: &Conn, params: &Value) -> Result<(String, Agent), RpcError> {
        let session = str_param(params, "sessionId")?;
        let sessions = self.inner.lock_sessions();
        match sessions.get(session) {
            Some(e) if e.owner == conn.id => Ok((session.to_owned(), e.agent.clone())),
            Some(_) => Err(RpcError::new(
                rpc::NOT_OWNER,
                format!("session {session:?} is owned by another connection"),
            )),
            None => Err(RpcError::new(
                rpc::NOT_OWNER,
                format!("session {session:?} is not open on this connection (session/open first)"),
            )),
        }
    }

    async fn call(
        &self,
        conn: &Arc<Conn>,
        id: &Value,
        method: &str,
        params: Value,
    ) -> Result<Value, RpcError> {
        let service = &self.inner.service;
        let grant = self.admit(conn, method, &params)?;
        match method {
            "initialize" => {
                if params.get("answerer").and_then(Value::as_bool) == Some(true) {
                    if !grant.has(TokenRole::Answerer) {
                        return Err(forbidden(&grant, "answer prompts", TokenRole::Answerer));
                    }
                    let listener = ClientAnswerer {
                        server: Arc::downgrade(&self.inner),
                        conn: Arc::downgrade(conn),
                    };
                    let reg = service.register(
                        format!("client-{}", conn.id),
                        Scope::Global,
                        Position::Last,
                        listener,
                    );
                    *conn.lock_answerer() = Some(reg);
                }
                Ok(json!({
                    "serverInfo": {"name": "approval-host", "version": env!("CARGO_PKG_VERSION")},
                    "protocolVersion": PROTOCOL_VERSION,
                    "pluginApiVersions": PLUGIN_API_VERSIONS,
                }))
            }
            "session/open" => {
                let session = str_param(&params, "sessionId")?;
                if !grant.may_open(session) {
                    return Err(RpcError::new(
                        auth::FORBIDDEN,
                        format!(
                            "token {:?} may not open session {session:?}: it may open sessions starting with {}",
                            grant.name,
                            grant
                                .sessions
                                .iter()
                                .map(|p| format!("{p:?}"))
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    ));
                }
                let agent_id = str_param(&params, "agentId")?;
                let parent_id = opt_str_param(&params, "parentAgentId")?;
                if let Some(e) = self.inner.lock_sessions().get(session) {
                    return Err(RpcError::new(
                        rpc::NOT_OWNER,
                        if e.owner == conn.id {
                            format!("session {session:?} is already open on this connection")
                        } else {
                            format!("session {session:?} is owned by another connection")
                        },
                    ));
                }
                let parent = match parent_id {
                    None => None,
                    Some(pid) => Some(
                        self.inner
                            .lock_sessions()
                            .values()
                            .find(|e| e.owner == conn.id && e.agent.id() == pid)
                            .map(|e| e.agent.clone())
                            .ok_or_else(|| {
                                RpcError::params(format!(
                                    "parentAgentId {pid:?} is not an agent of a session this connection owns"
                                ))
                            })?,
                    ),
                };
                let agent = match &parent {
                    Some(parent) => service.subagent(parent, session, agent_id).await,
                    None => service.agent(session, agent_id).await,
                }
                .map_err(RpcError::failed)?;
                let mut sessions = self.inner.lock_sessions();
                if sessions.contains_key(session) {
                    return Err(RpcError::new(
                        rpc::NOT_OWNER,
                        format!("session {session:?} was opened by another connection meanwhile"),
                    ));
                }
                let policy = service.effective_policy(&agent);
                sessions.insert(
                    session.to_owned(),
                    SessionEntry {
                        owner: conn.id,
                        agent,
                    },
                );
                Ok(json!({"sessionId": session, "agentId": agent_id, "policy": policy}))
            }
            "turn/start" | "turn/end" => {
                let (session, _) = self.owned(conn, &params)?;
                if method == "turn/start" {
                    service.start_turn(&session).await
                } else {
                    service.end_turn(&session).await
                }
                .map_err(RpcError::failed)?;
                Ok(json!({}))
            }
            "tool/call" => {
                let (_, agent) = self.owned(conn, &params)?;
                let call_id = str_param(&params, "callId")?;
                let name = str_param(&params, "name")?;
                let arguments = params.get("arguments").cloned().unwrap_or(Value::Null);
                service
                    .record_tool_call(&agent, call_id, name, arguments)
                    .await
                    .map_err(RpcError::failed)?;
                Ok(json!({}))
            }
            "approval/request" => {
                let (_, agent) = self.owned(conn, &params)?;
                let agent_id = str_param(&params, "agentId")?;
                if agent_id != agent.id() {
                    return Err(RpcError::params(format!(
                        "agentId {agent_id:?} is not the session's agent {:?}",
                        agent.id()
                    )));
                }
                let tool = str_param(&params, "toolName")?;
                if tool.is_empty() {
                    return Err(RpcError::params("toolName must not be empty"));
                }
                let token = CancellationToken::new();
                let mut request = ApprovalRequest::new(&agent, tool).cancel(token.clone());
                if let Some(c) = opt_str_param(&params, "callId")? {
                    request = request.call_id(c);
                }
                if let Some(r) = opt_str_param(&params, "reason")? {
                    request = request.reason(r);
                }
                let key = id.to_string();
                conn.lock_inflight().insert(key.clone(), token);
                let result = service.ask(request).await;
                conn.lock_inflight().remove(&key);
                let verdict = result.map_err(RpcError::failed)?;
                let mut result = verdict.to_json();
                // The exact text a model should read for a refusal, so a harness need not
                // rebuild it.
                let message = match verdict.outcome {
                    Outcome::AllowedOnce => None,
                    Outcome::Rejected => Some(texts::rejection(tool, &verdict)),
                    Outcome::Cancelled => Some(texts::approval_cancelled(tool)),
                    Outcome::Unavailable => Some(texts::approval_unavailable(tool)),
                };
                if let Some(m) = message {
                    result["message"] = json!(m);
                }
                Ok(result)
            }
            "policy/set" => {
                let (_, agent) = self.owned(conn, &params)?;
                let value = str_param(&params, "policy")?;
                let policy: Policy = value
                    .parse()
                    .map_err(|e: crate::policy::UnknownPolicy| RpcError::params(e.to_string()))?;
                let changed = service
                    .set_policy(&agent, policy, Some(crate::policy::SOURCE_USER))
                    .await
                    .map_err(RpcError::failed)?;
                Ok(json!({"changed": changed, "policy": policy}))
            }
            "context/get" => {
                let (_, agent) = self.owned(conn, &params)?;
                Ok(json!({
                    "policy": service.effective_policy(&agent),
                    "context": service.runtime_context(&agent),
                    "notices": agent.take_notices(),
                }))
            }
            "plugins/list" => {
                let mounted = self.inner.mounted.lock().await;
                Ok(json!({"plugins": mounted.status()}))
            }
            "plugins/reload" => {
                let report = self.reload().await.map_err(RpcError::failed)?;
                let mounted = self.inner.mounted.lock().await;
                Ok(json!({
                    "added": report.added,
                    "swapped": report.swapped,
                    "removed": report.removed,
                    "failed": report.failed.iter().map(|(n, e)| json!({"name": n, "error": e})).collect::<Vec<_>>(),
                    "plugins": mounted.status(),
                }))
            }
            "hook/claude-code" => {
                if !grant.sessions.is_empty() {
                    return Err(RpcError::new(
                        auth::FORBIDDEN,
                        format!(
                            "token {:?} is limited to some sessions and so may not ask for Claude Code's sessions",
                            grant.name
                        ),
                    ));
                }
                let base = self
                    .inner
                    .hook_options
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .clone();
                hook::call(service, &self.inner.hook_turns, base, &params).await
            }
            m if m.starts_with("rules/") => {
                let session = match params.get("sessionId") {
                    None | Some(Value::Null) => None,
                    Some(_) => Some(self.owned(conn, &params)?.0),
                };
                rules::call(
                    service,
                    &format!("client-{}", conn.id),
                    m,
                    &params,
                    session.as_deref(),
                )
                .await
            }
            other => Err(RpcError::new(
                rpc::METHOD_NOT_FOUND,
                format!("unknown method {other:?}"),
            )),
        }
    }
}

impl Inner {
    fn lock_sessions(&self) -> MutexGuard<'_, HashMap<String, SessionEntry>> {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }
}

type PromptWaiter = oneshot::Sender<Result<Value, RpcError>>;

/// A request waiting its turn: id, method, params.
type Call = (Value, String, Value);

/// The error for a call the token's roles do not allow.
fn forbidden(grant: &auth::Grant, what: &str, role: TokenRole) -> RpcError {
    RpcError::new(
        auth::FORBIDDEN,
        format!(
            "token {:?} may not {what}: that needs the {role} role",
            grant.name
        ),
    )
}

/// One client connection.
struct Conn {
    id: u64,
    /// Where it comes from, for logs and the failure count: `stdio`, `unix socket`, `tcp <ip>`.
    peer: String,
    /// What it may do; `None` until it has authenticated.
    grant: Mutex<Option<auth::Grant>>,
    /// Cancelled to close the connection (a failed authentication).
    closing: CancellationToken,
    out: mpsc::UnboundedSender<String>,
    next_out: AtomicU64,
    prompts: Mutex<HashMap<u64, PromptWaiter>>,
    inflight: Mutex<HashMap<String, CancellationToken>>,
    answerer: Mutex<Option<Registration>>,
}

impl Conn {
    fn send(&self, line: String) {
        let _ = self.out.send(line);
    }

    fn lock_grant(&self) -> MutexGuard<'_, Option<auth::Grant>> {
        self.grant.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn lock_prompts(&self) -> MutexGuard<'_, HashMap<u64, PromptWaiter>> {
        self.prompts.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn lock_inflight(&self) -> MutexGuard<'_, HashMap<String, CancellationToken>> {
        self.inflight.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn lock_answerer(&self) -> MutexGuard<'_, Option<Registration>> {
        self.answerer.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A connection that answers for the sessions it owns.
struct ClientAnswerer {
    server: Weak<Inner>,
    conn: Weak<Conn>,
}

/// Withdraws a prompt whose question went away before the client answered.
struct PromptGuard {
    conn: Weak<Conn>,
    id: u64,
    answered: bool,
}

impl Drop for PromptGuard {
    fn drop(&mut self) {
        if !self.answered
            && let Some(conn) = self.conn.upgrade()
            && conn.lock_prompts().remove(&self.id).is_some()
        {
            conn.send(rpc::notification(
                "$/cancel_request",
                json!({"id": self.id}),
            ));
        }
    }
}

impl Listener for ClientAnswerer {
    /// The question goes to a client: it is made durable before it is sent.
    fn leaves_process(&self) -> bool {
        true
    }

    fn decide(&self, question: Question) -> ListenerFuture {
        let (_, future) = self
            .answer(&question)
            .expect("a client answerer always answers with a future");
        Box::pin(async move { future.await.map(|a| a.decision) })
    }

    /// The prompt carries the call's recorded `arguments`; the client's answer may carry a
    /// `reason` (for a rejection: what the model reads after "the user rejected ...").
    fn answer(&self, question: &Question) -> Option<(Option<Arc<str>>, AnswerFuture)> {
        let next = || -> Option<(Option<Arc<str>>, AnswerFuture)> {
            Some((None, Box::pin(async { Ok(Answer::from(Decision::Next)) })))
        };
        let (Some(server), Some(conn)) = (self.server.upgrade(), self.conn.upgrade()) else {
            return next();
        };
        let owned = server
            .lock_sessions()
            .get(question.session_id())
            .is_some_and(|e| e.owner == conn.id && e.agent.same(question.agent()));
        if !owned {
            return next();
        }
        // A person at the host (stdio, a socket without tokens) or an admin may make rules of
        // any scope with an answer; an answerer token, session rules only.
        let authority = if conn
            .lock_grant()
            .as_ref()
            .is_some_and(|g| g.roles.contains(&TokenRole::Admin))
        {
            Authority::Person
        } else {
            Authority::Answerer
        };
        let call_tool = question.tool_name().to_owned();
        let call_arguments = question.arguments();
        let call_cwd = question.cwd().map(str::to_owned);
        let question_id = question.id().to_owned();
        let id = conn.next_out.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        conn.lock_prompts().insert(id, tx);
        let mut params = json!({
            "requestId": question.id(),
            "sessionId": question.session_id(),
            "toolName": question.tool_name(),
        });
        if let Some(c) = question.call_id() {
            params["callId"] = json!(c);
        }
        if let Some(r) = question.reason() {
            params["reason"] = json!(r);
        }
        if let Some(a) = question.arguments() {
            params["arguments"] = a;
        }
        conn.send(rpc::request(id, "approval/prompt", params));
        let guard = PromptGuard {
            conn: Arc::downgrade(&conn),
            id,
            answered: false,
        };
        drop(conn);
        Some((
            None,
            Box::pin(async move {
                // Move the whole guard in (not just a field): dropping this future withdraws the prompt.
                let mut guard = guard;
                let answer = rx.await;
                guard.answered = true;
                match answer {
                    Ok(Ok(result)) => {
                        let reason = result
                            .get("reason")
                            .and_then(Value::as_str)
                            .and_then(clean_reason);
                        // `allow-always` / `reject-always` carry the rule and its scope; without
                        // a rule that parses they are plain rejections, never a grant.
                        let always = |effect| {
                            let rule = result.get("rule").and_then(Value::as_str)?;
                            let scope = result
                                .get("scope")
                                .cloned()
                                .and_then(|s| serde_json::from_value(s).ok())
                                .unwrap_or(RuleScope::Session);
                            crate::rules::proposal(rule, effect, scope).ok()
                        };
                        let (decision, proposal) =
                            match result.get("decision").and_then(Value::as_str) {
                                Some("allow-once") => (Decision::AllowOnce, None),
                                Some("cancel") => (Decision::Cancel, None),
                                Some("allow-always") => match always(Effect::Allow) {
                                    Some(p) => (Decision::AllowOnce, Some(p)),
                                    None => (Decision::Reject, None),
                                },
                                Some("reject-always") => (Decision::Reject, always(Effect::Reject)),
                                // "reject", and any other reply: never a grant.
                                _ => (Decision::Reject, None),
                            };
                        if let Some(p) = &proposal {
                            let call = crate::rules::pattern::Call {
                                tool: &call_tool,
                                arguments: call_arguments.as_ref(),
                                cwd: call_cwd.as_deref(),
                            };
                            // The decision stands; the client is told at once why its rule
                            // will not be kept (the decided event records it too).
                            if let Err(why) = crate::rules::proposals::vet(p, authority, &[], &call)
                                && let Some(conn) = guard.conn.upgrade()
                            {
                                conn.send(rpc::notification(
                                    RULE_DECLINED,
                                    json!({"requestId": question_id, "rule": p.text(), "scope": p.scope.as_str(), "reason": why}),
                                ));
                            }
                        }
                        Ok(Answer {
                            decision,
                            reason,
                            proposal,
                            rule: None,
                            by: None,
                            authority: Some(authority),
                        })
                    }
                    Ok(Err(e)) => Err(Failure::error(format!(
                        "the client answered the prompt with an error: {}",
                        e.message
                    ))),
                    Err(_) => Err(Failure::error(
                        "the client disconnected before answering the prompt",
                    )),
                }
            }),
        ))
    }
}
