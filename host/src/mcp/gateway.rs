//! The agent-facing side: a [`Gateway`] serves agents over stdio or streamable HTTP, one
//! [`Connection`] per client connection. A connection's `initialize` starts (or reaches) its
//! servers, initializes each with the agent's own parameters and answers with the server's (or,
//! for many, with one answer for all, [`super::many`]); from then on each request goes to the
//! server it names ([`super::route`]), asked first where it can act. What the connection does
//! with each request is `handler.rs`; this file is its state: its session, its servers, and what
//! it learnt of their tools and resources.

use std::sync::Arc;

use rmcp::model::{
    ClientNotification, ClientRequest, InitializeRequestParams, InitializeResult, ListToolsResult,
    ServerPeerInfo, ServerResult,
};
use rmcp::service::{Peer, RequestContext, RunningService};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData as McpError, RoleClient, RoleServer, ServiceExt};
use tokio_util::sync::CancellationToken;

use serde_json::{Map, Value};

use crate::agent::Agent;
use crate::audit::event::{McpFrom, McpHandled, McpMessage};
use crate::service::ApprovalService;

use super::admit::{Caller, LOCAL, NOT_THE_OPENER, REVOKED, SESSION_HEADER, SessionSlot};
use super::ask::{self, INVALID_TOOL_NAME, question_tool, refusal};
use super::methods;
use super::relay::{Progress, Relay, forward};
use super::upstream::Upstream;
use super::{
    AGENT_ID, Backend, GatewayError, GatewayOptions, NOT_INITIALIZED, REFUSED_CODE, ServerEntry,
    Shared, SharedRef, check_server_name, server_gone, too_many_calls,
};

/// The gateway: what its connections share.
#[derive(Clone)]
pub struct Gateway {
    shared: SharedRef,
}

impl Gateway {
    /// A gateway asking `service`, for the one server at `upstream`, named `options.server`: the
    /// agent sees the server's own names.
    ///
    /// # Errors
    /// [`GatewayError::ServerName`] when the server's name cannot stand in a rule.
    pub fn new(
        service: ApprovalService,
        options: GatewayOptions,
        upstream: Upstream,
    ) -> Result<Gateway, GatewayError> {
        let one = ServerEntry {
            name: options.server.clone(),
            upstream,
        };
        Gateway::with(service, options, vec![one], false)
    }

    /// A gateway asking `service`, for every server of `servers` behind one endpoint: the agent
    /// sees each tool and prompt as `<server>__<name>`, and each question is asked as
    /// `mcp__<server>__<name>`, as with one gateway per server.
    ///
    /// # Errors
    /// [`GatewayError::ServerName`] for a name that cannot stand in a rule,
    /// [`GatewayError::Servers`] for no servers or two of one name.
    pub fn many(
        service: ApprovalService,
        options: GatewayOptions,
        servers: Vec<ServerEntry>,
    ) -> Result<Gateway, GatewayError> {
        if servers.is_empty() {
            return Err(GatewayError::Servers(NO_SERVERS.to_owned()));
        }
        Gateway::with(service, options, servers, true)
    }

    fn with(
        service: ApprovalService,
        options: GatewayOptions,
        servers: Vec<ServerEntry>,
        prefixed: bool,
    ) -> Result<Gateway, GatewayError> {
        let mut names = std::collections::HashSet::new();
        for server in &servers {
            check_server_name(&server.name)?;
            if !names.insert(server.name.as_str()) {
                return Err(GatewayError::Servers(format!(
                    "two MCP servers are named \"{}\": each needs a name of its own",
                    server.name
                )));
            }
        }
        let servers = servers
            .into_iter()
            .map(|s| {
                Arc::new(Backend {
                    pins: super::pins::Pins::new(options.config.pin, &s.name),
                    gone: server_gone(&s.name),
                    name: s.name,
                    upstream: s.upstream,
                })
            })
            .collect();
        Ok(Gateway {
            shared: Arc::new(Shared {
                service,
                servers,
                prefixed,
                closing: tokio_util::task::TaskTracker::new(),
                open: std::sync::Mutex::default(),
                ending: std::sync::Mutex::default(),
                released: tokio::sync::Notify::new(),
                http_sessions: Arc::default(),
                owners: std::sync::Mutex::default(),
                options,
            }),
        })
    }

    /// A new connection, in the configured session or a fresh one.
    pub fn connection(&self) -> Connection {
        let session = self
            .shared
            .options
            .session
            .clone()
            .unwrap_or_else(fresh_session);
        Connection::new(self.shared.clone(), Some(session))
    }

    /// Serves one agent on stdin and stdout until it closes them.
    ///
    /// # Errors
    /// [`GatewayError::Transport`] when the agent's side fails before it initialized.
    pub async fn serve_stdio(&self) -> Result<(), GatewayError> {
        let connection = self.connection();
        let session = connection.session().to_owned();
        let (reader, writer) = rmcp::transport::stdio_pipes();
        let running = connection
            .serve(super::stdio::Screened::new(reader, writer))
            .await
            .map_err(|e| GatewayError::Transport(e.to_string()))?;
        let _ = running.waiting().await;
        // The agent has gone. Its questions still waiting settle `cancelled` and the turn ends
        // now, before the process does (a call's task may still hold the connection).
        self.shared.end_turn(&session).await;
        self.closed().await;
        Ok(())
    }

    /// Ends the turn of every connection still open (their waiting questions settle
    /// `cancelled`) and waits for those that closed: what a gateway does before it exits.
    pub async fn shutdown(&self) {
        let open: Vec<String> = self.shared.open_sessions().iter().cloned().collect();
        for session in open {
            self.shared.end_turn(&session).await;
        }
        self.closed().await;
    }

    /// Waits until every closed connection has ended its turn.
    pub async fn closed(&self) {
        self.shared.closing.close();
        self.shared.closing.wait().await;
        self.shared.closing.reopen();
    }

    /// The streamable HTTP endpoint, every body screened first: a router to mount at `/mcp`.
    /// `cancel` ends every session.
    pub fn router(&self, cancel: CancellationToken) -> axum::Router {
        axum::Router::new()
            .fallback_service(self.http(cancel))
            .layer(axum::middleware::from_fn(super::http::screen_posts))
            // Outermost: a request for another caller's session reaches nothing, not even the
            // screen's record in that session's log.
            .layer(axum::middleware::from_fn_with_state(
                self.shared.clone(),
                super::http::bind_sessions,
            ))
    }

    /// The streamable HTTP endpoint (a tower service to mount at `/mcp`) as the SDK serves it,
    /// without the screen: each MCP session a connection of its own, in a session of its own.
    /// `cancel` ends every session.
    fn http(
        &self,
        cancel: CancellationToken,
    ) -> StreamableHttpService<Connection, LocalSessionManager> {
        let shared = self.shared.clone();
        let options = &self.shared.options;
        let mut config = StreamableHttpServerConfig::default()
            .with_cancellation_token(cancel)
            .with_max_request_body_bytes(super::MAX_MESSAGE)
            // A browser page (a DNS-rebound one included) is refused unless its origin is listed.
            .enforce_origin_validation()
            .with_allowed_origins(options.config.allowed_origins.clone());
        if !options.config.allowed_hosts.is_empty() {
            let mut hosts = config.allowed_hosts.clone();
            hosts.extend(options.config.allowed_hosts.iter().cloned());
            config = config.with_allowed_hosts(hosts);
        }
        let mut sessions = LocalSessionManager::default();
        sessions.session_config.keep_alive = Some(options.config.session_idle);
        StreamableHttpService::new(
            // The session is chosen at `initialize`, from who is calling.
            move || Ok(Connection::new(shared.clone(), None)),
            Arc::new(sessions),
            config,
        )
    }
}

fn fresh_session() -> String {
    format!("mcp-{}", uuid::Uuid::new_v4())
}

/// The text of a gateway of many servers given none.
pub const NO_SERVERS: &str =
    "no MCP servers: give one after `--`, or list them as [[mcp.server]] in the deployment";

/// One client connection: its session, and once initialized, its servers and agent.
pub struct Connection {
    pub(super) shared: SharedRef,
    /// Cancelled when the connection is dropped (ends the task watching its token).
    ended: CancellationToken,
    /// The HTTP transport's id of its session, once a request named it.
    transport_id: std::sync::OnceLock<String>,
    /// Set at construction for stdio, at `initialize` over HTTP.
    session: std::sync::OnceLock<String>,
    pub(super) linked: tokio::sync::OnceCell<Linked>,
    /// Its `tools/call`s running now, at most [`GatewayOptions::calls_in_flight`].
    calls: Arc<tokio::sync::Semaphore>,
    /// Held while a `server/discover` probes the servers: one probe at a time per connection.
    probing: tokio::sync::Mutex<()>,
}

/// A connection from its `initialize` on: its agent, who opened it, and its servers.
pub(super) struct Linked {
    pub(super) info: InitializeResult,
    pub(super) agent: Agent,
    /// Who opened it, when it came over HTTP.
    caller: Option<Caller>,
    /// Its place under the gateway's caps on HTTP sessions.
    _slot: Option<SessionSlot>,
    /// The servers that initialized, in the order configured.
    pub(super) servers: Vec<Link>,
    /// The servers that could not be started, each with why.
    pub(super) failed: Vec<(String, String)>,
    /// Which server each resource URI belongs to (a gateway of many).
    pub(super) resources: tokio::sync::Mutex<super::route::Resources>,
    /// Linked by a request of the per-request lifecycle (MCP 2026-07-28), not `initialize`.
    pub(super) inline: bool,
}

/// One server of a connection.
pub(super) struct Link {
    pub(super) backend: Arc<Backend>,
    /// Its place in [`Linked::servers`].
    pub(super) index: usize,
    /// Kept for as long as the connection: dropping it stops the server it started.
    server: RunningService<RoleClient, Relay>,
    pub(super) calls: Progress,
    pub(super) asks: Progress,
    /// The hash of each tool's definition as this server last listed it.
    seen: std::sync::Mutex<std::collections::HashMap<String, String>>,
    /// The argument names each tool's input schema declares, as this server last listed it
    /// (none when its schema has no `properties` object).
    declared: std::sync::Mutex<std::collections::HashMap<String, Vec<String>>>,
}

impl Link {
    pub(super) fn peer(&self) -> &Peer<RoleClient> {
        self.server.peer()
    }

    pub(super) fn name(&self) -> &str {
        &self.backend.name
    }

    /// What the server said it can do at `initialize`.
    pub(super) fn capabilities(&self) -> Option<rmcp::model::ServerCapabilities> {
        self.server.peer_info().map(|i| i.capabilities.clone())
    }

    /// Keeps what `tools` declare as their arguments.
    fn learn_schemas(&self, tools: &[rmcp::model::Tool]) {
        let mut declared = self.declared.lock().unwrap_or_else(|p| p.into_inner());
        for tool in tools {
            // A schema that declares its arguments some other way (`$ref`, `anyOf`) declares
            // none a rule can rely on.
            let names = tool
                .input_schema
                .get("properties")
                .and_then(Value::as_object)
                .map(|p| p.keys().cloned().collect())
                .unwrap_or_default();
            declared.insert(tool.name.to_string(), names);
        }
    }

    /// The arguments of a call of `tool` that its listed schema does not declare: every one
    /// when this connection never saw the tool's schema (fail closed: no path rule covers an
    /// argument whose meaning nothing says).
    pub(super) fn undeclared(
        &self,
        tool: &str,
        arguments: Option<&Map<String, Value>>,
    ) -> Vec<String> {
        let declared = self.declared.lock().unwrap_or_else(|p| p.into_inner());
        let names = declared.get(tool);
        arguments
            .into_iter()
            .flat_map(|a| a.keys())
            .filter(|k| names.is_none_or(|n| !n.contains(k)))
            .cloned()
            .collect()
    }
}

impl Linked {
    /// The server a name the agent used belongs to, and the server's own name in it: with one
    /// server, the name as it is.
    ///
    /// # Errors
    /// The text naming why no server can take it.
    pub(super) fn target<'a>(
        &self,
        prefixed: bool,
        name: &'a str,
    ) -> Result<(&Link, &'a str), String> {
        if !prefixed {
            return self
                .servers
                .first()
                .map(|link| (link, name))
                .ok_or_else(|| NO_SERVERS.to_owned());
        }
        let Some((server, own)) = super::route::split(name) else {
            return Err(super::route::no_such_server(name));
        };
        if let Some(link) = self.servers.iter().find(|l| l.name() == server) {
            return Ok((link, own));
        }
        match self.failed.iter().find(|(n, _)| n == server) {
            Some((n, why)) => Err(super::route::server_failed(n, why)),
            None => Err(super::route::no_such_server(name)),
        }
    }
}

impl Connection {
    fn new(shared: SharedRef, preset: Option<String>) -> Connection {
        let session = std::sync::OnceLock::new();
        if let Some(preset) = preset {
            let _ = session.set(preset);
        }
        let calls = Arc::new(tokio::sync::Semaphore::new(
            shared.options.calls_in_flight.max(1),
        ));
        Connection {
            shared,
            ended: CancellationToken::new(),
            transport_id: std::sync::OnceLock::new(),
            session,
            linked: tokio::sync::OnceCell::new(),
            calls,
            probing: tokio::sync::Mutex::new(()),
        }
    }

    /// The session this connection's questions are asked in (empty before an HTTP
    /// connection's `initialize`).
    pub fn session(&self) -> &str {
        self.session.get().map_or("", String::as_str)
    }

    /// Whether the agent sees names as `<server>__<name>`.
    pub(super) fn prefixed(&self) -> bool {
        self.shared.prefixed
    }

    pub(super) fn link(&self) -> Result<&Linked, McpError> {
        let linked = self
            .linked
            .get()
            .ok_or_else(|| McpError::invalid_request(NOT_INITIALIZED, None))?;
        if linked
            .caller
            .as_ref()
            .is_some_and(|c| c.revoked.is_cancelled())
        {
            return Err(McpError::invalid_request(REVOKED, None));
        }
        Ok(linked)
    }

    /// [`Connection::link`] for a request, which over HTTP must come from the caller that opened
    /// the connection (a session id is a handle, not a credential).
    pub(super) fn link_for(
        &self,
        context: &RequestContext<RoleServer>,
    ) -> Result<&Linked, McpError> {
        let linked = self.link()?;
        let Some(opened_by) = &linked.caller else {
            return Ok(linked);
        };
        // Without a layer in front (an endpoint in process), every caller is the local one,
        // as at `initialize`.
        let caller = context
            .extensions
            .get::<axum::http::request::Parts>()
            .map(|p| {
                p.extensions
                    .get::<Caller>()
                    .map_or(LOCAL, |c| c.name.as_str())
            });
        match caller {
            Some(name) if name == opened_by.name => {
                // A request of the per-request lifecycle stands alone: an `Mcp-Session-Id` it
                // carries names another connection's session, not its own.
                if !linked.inline {
                    self.learn_transport_id(context);
                }
                Ok(linked)
            }
            _ => Err(McpError::invalid_request(NOT_THE_OPENER, None)),
        }
    }

    /// Remembers the transport's id of this connection's HTTP session (known from its second
    /// request on), so that its binding to its caller goes when it does.
    fn learn_transport_id(&self, context: &RequestContext<RoleServer>) {
        if self.transport_id.get().is_some() {
            return;
        }
        let id = http_parts(context)
            .and_then(|p| p.headers.get(super::http::TRANSPORT_SESSION))
            .and_then(|v| v.to_str().ok());
        if let Some(id) = id {
            let _ = self.transport_id.set(id.to_owned());
        }
    }

    /// Over HTTP: who is calling (from the layer in front), the session its connection asks
    /// in, and its place under the caps; over stdio, nothing to decide.
    fn admit(
        &self,
        context: &RequestContext<RoleServer>,
    ) -> Result<(Option<Caller>, Option<SessionSlot>), McpError> {
        let Some(parts) = http_parts(context) else {
            return Ok((None, None));
        };
        let caller = parts
            .extensions
            .get::<Caller>()
            .cloned()
            .unwrap_or_else(Caller::local);
        let refuse = |text: String| McpError::invalid_request(text, None);
        let named = parts
            .headers
            .get(SESSION_HEADER)
            .map(|v| {
                v.to_str()
                    .map_err(|_| refuse(format!("{SESSION_HEADER}: not text")))
            })
            .transpose()?;
        let session = match self.session.get() {
            Some(preset) => preset.clone(),
            None => super::admit::session_for(&caller, named).map_err(refuse)?,
        };
        let options = &self.shared.options;
        let slot = super::admit::admit(
            &self.shared.http_sessions,
            &caller,
            options.sessions,
            options.sessions_per_caller,
        )
        .map_err(refuse)?;
        let _ = self.session.set(session);
        Ok((Some(caller), Some(slot)))
    }

    /// Forwards `request` to `link`'s server with what of the request's `_meta` may go on, and
    /// its cancellation.
    pub(super) async fn pass(
        &self,
        link: &Link,
        request: ClientRequest,
        context: RequestContext<RoleServer>,
    ) -> Result<ServerResult, McpError> {
        // No rule reads `_meta`: only the progress token (replaced by the forward) goes on.
        let mut meta = context.meta;
        meta.0
            .0
            .retain(|key, _| key == super::relay::PROGRESS_TOKEN);
        let result = forward(
            link.peer(),
            request,
            meta,
            context.ct,
            &link.calls,
            &link.backend.gone,
        )
        .await?;
        if let ServerResult::InputRequiredResult(_) = &result {
            // The server asks the agent for input (sampling, elicitation, roots) inside its
            // answer: what the deployment would refuse of a request, and what no question was
            // asked about, goes no further.
            let why = super::relay::input_required_refused(link.name());
            if let Some(linked) = self.linked.get() {
                self.record_in(
                    linked,
                    (McpFrom::Server, Some(link.name().to_owned())),
                    INPUT_REQUIRED.to_owned(),
                    McpHandled::Refused,
                    Some(why.clone()),
                )
                .await;
            }
            return Err(McpError::new(REFUSED_CODE, why, None));
        }
        Ok(complete(result))
    }

    /// Tells every server of the connection.
    pub(super) async fn notify(&self, notification: ClientNotification) {
        let Ok(linked) = self.link() else { return };
        for link in &linked.servers {
            // A server that has gone cannot be told; its next request says so.
            let _ = link.peer().send_notification(notification.clone()).await;
        }
    }

    /// Starts (or reaches) every server and initializes each with the agent's `params`: the
    /// connection's state from then on. With many servers, one that fails is reported and the
    /// others go on; with one, its failure is the connection's.
    pub(super) async fn connect(
        &self,
        params: InitializeRequestParams,
        agent_peer: Peer<RoleServer>,
        context: &RequestContext<RoleServer>,
        inline: bool,
    ) -> Result<Linked, McpError> {
        // Refused before anything is started or written: a flood of `initialize`s leaves no
        // session logs and no servers behind.
        let (caller, slot) = self.admit(context)?;
        let session = self.session().to_owned();
        // One connection per session: two that started together would end each other's turns.
        let claim = self
            .shared
            .claim(&session)
            .await
            .map_err(|text| McpError::invalid_request(text, None))?;
        let recorded_as = Arc::new(super::relay::Recorder::default());
        let (servers, failed) = self.start(&params, &agent_peer, &recorded_as, inline).await;
        let info = self.answer(&servers, &failed)?;
        let service = &self.shared.service;
        let failed_to =
            |e: crate::service::ApprovalError| McpError::internal_error(e.to_string(), None);
        let agent = service.agent(&session, AGENT_ID).await.map_err(failed_to)?;
        // A turn a killed gateway left open in this session settles first.
        service
            .end_turn_if_open(&session)
            .await
            .map_err(failed_to)?;
        service.start_turn(&session).await.map_err(failed_to)?;
        claim.keep();
        recorded_as.start(service, agent.clone()).await;
        if let Some(caller) = &caller {
            let stops = servers
                .iter()
                .map(|l| l.server.cancellation_token())
                .collect();
            self.end_when_revoked(caller, stops, &session);
        }
        let linked = Linked {
            info,
            agent,
            caller,
            _slot: slot,
            servers,
            failed,
            resources: tokio::sync::Mutex::default(),
            inline,
        };
        // Each server that could not be started is in the session's log, as the agent was told.
        for (name, why) in &linked.failed {
            self.record_in(
                &linked,
                (McpFrom::Server, Some(name.clone())),
                methods::INITIALIZE.to_owned(),
                McpHandled::Refused,
                Some(super::route::server_failed(name, why)),
            )
            .await;
        }
        Ok(linked)
    }

    /// Starts (or reaches) every server, initializing each with `params`: those that answered,
    /// and those that did not with why. `inline`: the agent speaks the per-request lifecycle,
    /// where a server cannot ask it anything mid-call.
    async fn start(
        &self,
        params: &InitializeRequestParams,
        agent_peer: &Peer<RoleServer>,
        recorded_as: &Arc<super::relay::Recorder>,
        inline: bool,
    ) -> (Vec<Link>, Vec<(String, String)>) {
        let prefixed = self.prefixed();
        let starting = self.shared.servers.iter().map(|backend| {
            let calls = Progress::default();
            let asks = Progress::default();
            let relay = Relay {
                info: params.clone(),
                agent: agent_peer.clone(),
                calls: calls.clone(),
                asks: asks.clone(),
                gone: "the agent closed the connection".to_owned(),
                server: backend.name.clone(),
                inline,
                shared: self.shared.clone(),
                recorded_as: recorded_as.clone(),
            };
            async move {
                let connecting = backend.upstream.connect(relay);
                let started = if prefixed {
                    tokio::time::timeout(super::many::START_PATIENCE, connecting)
                        .await
                        .unwrap_or_else(|_| Err(super::many::start_timed_out()))
                } else {
                    connecting.await
                };
                (backend.clone(), calls, asks, started)
            }
        });
        let mut servers = Vec::new();
        let mut failed = Vec::new();
        for (backend, calls, asks, started) in futures_util::future::join_all(starting).await {
            match started.and_then(|server| {
                server
                    .peer_info()
                    .is_some()
                    .then_some(server)
                    .ok_or_else(|| backend.gone.clone())
            }) {
                Ok(server) => servers.push(Link {
                    index: servers.len(),
                    backend,
                    server,
                    calls,
                    asks,
                    seen: std::sync::Mutex::default(),
                    declared: std::sync::Mutex::default(),
                }),
                Err(why) => {
                    tracing::warn!(server = backend.name, error = %why, "an MCP server could not be started");
                    // One line: what a server said as it failed cannot pass for the gateway's
                    // own text in the instructions.
                    let why = why.split_whitespace().collect::<Vec<_>>().join(" ");
                    failed.push((backend.name.clone(), why));
                }
            }
        }
        (servers, failed)
    }

    /// What the agent is answered about `servers` (and those that `failed`): the one server's
    /// own answer, or one for many; an error when none started.
    fn answer(
        &self,
        servers: &[Link],
        failed: &[(String, String)],
    ) -> Result<InitializeResult, McpError> {
        let prefixed = self.prefixed();
        match (prefixed, servers.first()) {
            (false, Some(link)) => link
                .server
                .peer_info()
                .map(|i| initialize_result(&i))
                .ok_or_else(|| McpError::internal_error(link.backend.gone.clone(), None)),
            (true, Some(_)) => {
                let answered: Vec<(&str, ServerPeerInfo)> = servers
                    .iter()
                    .filter_map(|l| Some((l.name(), (*l.server.peer_info()?).clone())))
                    .collect();
                Ok(super::many::initialize_result(&answered, failed))
            }
            (_, None) => {
                let why = failed
                    .iter()
                    .map(|(name, why)| {
                        if prefixed {
                            super::route::server_failed(name, why)
                        } else {
                            why.clone()
                        }
                    })
                    .collect::<Vec<_>>()
                    .join("; ");
                Err(McpError::internal_error(why, None))
            }
        }
    }

    /// `server/discover` before the connection is linked: the servers are started, asked what
    /// they are, and stopped again (a probe starts no session and asks nothing).
    pub(super) async fn probe(
        &self,
        params: InitializeRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> Result<InitializeResult, McpError> {
        // A flood of probes is held to the same caps as a flood of connections, and on one
        // connection they run one at a time.
        let _probing = self.probing.lock().await;
        let (_caller, _slot) = self.admit(context)?;
        let recorded_as = Arc::new(super::relay::Recorder::default());
        let (servers, failed) = self.start(&params, &context.peer, &recorded_as, true).await;
        self.answer(&servers, &failed)
    }

    /// [`Connection::link_for`], linking first a connection whose agent speaks the per-request
    /// lifecycle of MCP 2026-07-28: its first request (carrying its protocol version, client
    /// and capabilities in `_meta`) starts the servers and the connection's turn, as
    /// `initialize` would.
    pub(super) async fn linked_for(
        &self,
        context: &RequestContext<RoleServer>,
    ) -> Result<&Linked, McpError> {
        if self.linked.get().is_none()
            && let Some(params) = inline_params(context)
        {
            self.linked
                .get_or_try_init(|| self.connect(params, context.peer.clone(), context, true))
                .await?;
        }
        self.link_for(context)
    }

    /// When the caller's token is revoked (removed or changed at a reload), the connection ends
    /// at once: its turn ends (questions waiting settle `cancelled`) and its servers are
    /// stopped, so an open event stream carries nothing more; every later request is refused.
    fn end_when_revoked(
        &self,
        caller: &Caller,
        stops: Vec<rmcp::service::RunningServiceCancellationToken>,
        session: &str,
    ) {
        let revoked = caller.revoked.clone();
        let shared = self.shared.clone();
        let session = session.to_owned();
        let ended = self.ended.clone();
        // Not tracked in `closing`: it lives as long as the connection, which a shutdown does
        // not wait for.
        drop(tokio::spawn(async move {
            tokio::select! {
                () = revoked.cancelled() => {}
                () = ended.cancelled() => return,
            }
            tracing::info!(session, "an MCP connection's token was revoked: ending it");
            for stop in stops {
                stop.cancel();
            }
            shared.end_turn(&session).await;
        }));
    }

    /// Records what was done with a message no question was asked about. Before `initialize`
    /// there is no session to record it in: it goes to the gateway's own log.
    pub(super) async fn record(
        &self,
        from: McpFrom,
        method: String,
        handled: McpHandled,
        why: Option<String>,
    ) {
        let Some(linked) = self.linked.get() else {
            tracing::warn!(
                method,
                ?why,
                "an MCP message before initialize, not forwarded"
            );
            return;
        };
        self.record_in(linked, (from, None), method, handled, why)
            .await;
    }

    /// Records that the agent's `method` was refused, without a question, for `text`; returns
    /// `text`.
    pub(super) async fn refused_agent(&self, method: &str, text: String) -> String {
        self.record(
            McpFrom::Agent,
            method.to_owned(),
            McpHandled::Refused,
            Some(text.clone()),
        )
        .await;
        text
    }

    async fn record_in(
        &self,
        linked: &Linked,
        (from, server): (McpFrom, Option<String>),
        method: String,
        handled: McpHandled,
        why: Option<String>,
    ) {
        let message = McpMessage {
            from,
            method,
            handled,
            why,
            server,
        };
        if let Err(e) = self
            .shared
            .service
            .record_mcp_message(&linked.agent, message)
            .await
        {
            tracing::warn!(session = self.session(), error = %e, "could not record an MCP message");
        }
    }

    /// Asks whether `tool` (in rule syntax) may go ahead with `arguments` (`undeclared`: those
    /// its schema does not declare): the connection's slot for a call in flight while it runs,
    /// or the text of the refusal.
    pub(super) async fn ask_first(
        &self,
        (method, tool): (&str, &str),
        (arguments, undeclared): (Map<String, Value>, Vec<String>),
        context: &RequestContext<RoleServer>,
    ) -> Result<tokio::sync::OwnedSemaphorePermit, String> {
        let linked = self.link_for(context).map_err(|e| e.message.to_string())?;
        // An agent that floods the gateway gets refusals, not a queue of questions.
        let Ok(running) = self.calls.clone().try_acquire_owned() else {
            let text = too_many_calls(self.shared.options.calls_in_flight.max(1));
            return Err(self.refused_agent(method, text).await);
        };
        let verdict = match ask::ask(
            &self.shared,
            &linked.agent,
            tool,
            (arguments, undeclared),
            context.ct.clone(),
        )
        .await
        {
            Ok(verdict) => verdict,
            Err(e) => {
                // No decision was recorded: the refusal is, as far as the log still takes it.
                let text = crate::tools::texts::approval_failed(tool, &e.to_string());
                return Err(self.refused_agent(method, text).await);
            }
        };
        match refusal(tool, &verdict) {
            Some(text) => Err(text),
            None => Ok(running),
        }
    }

    /// [`Connection::ask_first`] for a method other than `tools/call` of `link`'s server, asked
    /// as `mcp__<server>__<method>`: a refusal is a JSON-RPC error with [`REFUSED_CODE`].
    pub(super) async fn ask_method(
        &self,
        link: &Link,
        method: &str,
        arguments: Map<String, Value>,
        context: &RequestContext<RoleServer>,
    ) -> Result<tokio::sync::OwnedSemaphorePermit, McpError> {
        let tool = question_tool(link.name(), method)
            .ok_or_else(|| McpError::internal_error(INVALID_TOOL_NAME, None))?;
        // Resources, prompts and completion have no schema to hold arguments against.
        self.ask_first((method, &tool), (arguments, Vec::new()), context)
            .await
            .map_err(|text| McpError::new(REFUSED_CODE, text, None))
    }

    /// Whether a call of `name` on `link`'s server may be asked: its definition, as the server
    /// listed it, is pinned ([`super::pins`]). A connection that never listed the server's tools
    /// has them listed now, so a definition is known before anything is asked; a name its
    /// server did not list is refused.
    pub(super) async fn pinned(&self, link: &Link, name: &str) -> Result<(), String> {
        let pins = &link.backend.pins;
        if pins.off() {
            return Ok(());
        }
        let listed_before = !link
            .seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_empty();
        if !listed_before {
            let mut tools = self.whole_list(link).await?;
            self.screen(link, &mut tools, true).await;
        }
        let seen = link
            .seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned();
        pins.admit_call(&self.shared.service, name, seen.as_deref())
            .await
    }

    /// Keeps in `tools` (listed by `link`'s server; `whole`: all of them) those whose
    /// definition is pinned ([`super::pins::Pins::screen`]), and remembers on the link what
    /// each declares and hashes to, for its calls.
    async fn screen(&self, link: &Link, tools: &mut Vec<rmcp::model::Tool>, whole: bool) {
        link.learn_schemas(tools);
        let pins = &link.backend.pins;
        if pins.off() {
            return;
        }
        let hashes = pins.screen(&self.shared.service, tools, whole).await;
        link.seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(hashes);
    }

    /// Every tool `link`'s server lists, page after page ([`super::listing`]), less those that
    /// can never be called.
    async fn whole_list(&self, link: &Link) -> Result<Vec<rmcp::model::Tool>, String> {
        let server = link.name();
        let mut tools = super::listing::whole(server, "tools", &link.backend.gone, |p| {
            link.peer().list_tools(p)
        })
        .await?;
        tools.retain(|tool| callable(server, &tool.name));
        Ok(tools)
    }

    /// The tools `link`'s server listed (one page of them; `first_page`: the request named no
    /// cursor), less those that can never be called, those whose definition is not pinned and
    /// those a reject rule refuses whatever the arguments.
    pub(super) async fn visible(
        &self,
        link: &Link,
        mut listed: ListToolsResult,
        first_page: bool,
    ) -> ListToolsResult {
        let server = link.name();
        listed.tools.retain(|tool| callable(server, &tool.name));
        let whole = first_page && listed.next_cursor.is_none();
        // A server's first use pins its whole list at once: when this is one page of it, the
        // rest is listed first.
        if !whole
            && link
                .backend
                .pins
                .awaits_first_use(&self.shared.service)
                .await
        {
            match self.whole_list(link).await {
                Ok(mut all) => self.screen(link, &mut all, true).await,
                Err(e) => {
                    tracing::warn!(server, error = %e, "an MCP server's first list could not be pinned whole")
                }
            }
        }
        self.screen(link, &mut listed.tools, whole).await;
        self.unrejected(server, &mut listed.tools);
        listed
    }

    /// Leaves out of `tools` (of `server`) those a live reject rule refuses whatever the
    /// arguments, when the deployment says so.
    fn unrejected(&self, server: &str, tools: &mut Vec<rmcp::model::Tool>) {
        if !self.shared.options.config.hide_rejected_tools {
            return;
        }
        let Some(book) = self.shared.service.rules() else {
            return;
        };
        tools.retain(|tool| {
            question_tool(server, &tool.name)
                .is_none_or(|name| book.rejects_every_call(&name, self.session()).is_none())
        });
    }

    /// A gateway of many servers: every server's tools, each pinned, screened as
    /// [`Connection::visible`] screens one page, and named `<server>__<tool>`. A server whose
    /// list fails is left out (and logged); the others are listed.
    pub(super) async fn every_tool(&self, linked: &Linked) -> Vec<rmcp::model::Tool> {
        let lists = linked
            .servers
            .iter()
            .filter(|l| l.capabilities().is_some_and(|c| c.tools.is_some()))
            .map(|link| async move { (link, self.whole_list(link).await) });
        let mut all = Vec::new();
        for (link, listed) in futures_util::future::join_all(lists).await {
            let mut tools = match listed {
                Ok(tools) => tools,
                Err(e) => {
                    tracing::warn!(server = link.name(), error = %e, "an MCP server's tools could not be listed");
                    continue;
                }
            };
            self.screen(link, &mut tools, true).await;
            self.unrejected(link.name(), &mut tools);
            for mut tool in tools {
                tool.name = super::route::outward(link.name(), &tool.name).into();
                all.push(tool);
            }
        }
        all
    }

    /// A gateway of many servers: every server's prompts, named `<server>__<prompt>`.
    pub(super) async fn every_prompt(&self, linked: &Linked) -> Vec<rmcp::model::Prompt> {
        let lists = linked
            .servers
            .iter()
            .filter(|l| l.capabilities().is_some_and(|c| c.prompts.is_some()))
            .map(|link| async move {
                let listed =
                    super::listing::whole(link.name(), "prompts", &link.backend.gone, |p| {
                        link.peer().list_prompts(p)
                    })
                    .await;
                (link, listed)
            });
        let mut all = Vec::new();
        for (link, listed) in futures_util::future::join_all(lists).await {
            match listed {
                Ok(prompts) => all.extend(prompts.into_iter().map(|mut p| {
                    p.name = super::route::outward(link.name(), &p.name);
                    p
                })),
                Err(e) => {
                    tracing::warn!(server = link.name(), error = %e, "an MCP server's prompts could not be listed")
                }
            }
        }
        all
    }

    /// A gateway of many servers: every server's resources and resource templates, each
    /// remembered as its server's ([`super::route::Resources`]).
    pub(super) async fn every_resource(
        &self,
        linked: &Linked,
    ) -> (
        Vec<rmcp::model::Resource>,
        Vec<rmcp::model::ResourceTemplate>,
    ) {
        let lists = linked
            .servers
            .iter()
            .filter(|l| l.capabilities().is_some_and(|c| c.resources.is_some()))
            .map(|link| async move {
                let gone = &link.backend.gone;
                let resources = super::listing::whole(link.name(), "resources", gone, |p| {
                    link.peer().list_resources(p)
                })
                .await;
                // A server with resources need not have templates.
                let templates =
                    super::listing::whole(link.name(), "resource templates", gone, |p| {
                        link.peer().list_resource_templates(p)
                    })
                    .await
                    .unwrap_or_default();
                (link, resources, templates)
            });
        let listed = futures_util::future::join_all(lists).await;
        // Locked only once the lists are in: a slow server holds up no read whose route is known.
        let mut routes = linked.resources.lock().await;
        let mut all = (Vec::new(), Vec::new());
        for (link, resources, templates) in listed {
            routes.forget(link.index);
            let resources = resources.unwrap_or_else(|e| {
                tracing::warn!(server = link.name(), error = %e, "an MCP server's resources could not be listed");
                Vec::new()
            });
            for resource in &resources {
                routes.listed(link.index, &resource.uri);
            }
            for template in &templates {
                routes.template(link.index, &template.uri_template);
            }
            all.0.extend(resources);
            all.1.extend(templates);
        }
        routes.learned = true;
        all
    }

    /// The server the resource at `uri` belongs to: with one server, it; with many, the one
    /// that listed it ([`super::route::Resources::route`]), the servers' resources listed first
    /// when this connection has not, or when none listed it yet.
    pub(super) async fn resource_target<'a>(
        &self,
        linked: &'a Linked,
        uri: &str,
    ) -> Result<&'a Link, String> {
        if !self.prefixed() {
            return linked.servers.first().ok_or_else(|| NO_SERVERS.to_owned());
        }
        let names = |i: usize| {
            linked
                .servers
                .get(i)
                .map_or_else(String::new, |l| l.name().to_owned())
        };
        let learned = linked.resources.lock().await.learned;
        if learned && let Ok(i) = linked.resources.lock().await.route(uri, &names) {
            return Ok(&linked.servers[i]);
        }
        // Never listed, or listed before the server added it.
        self.every_resource(linked).await;
        let i = linked.resources.lock().await.route(uri, &names)?;
        Ok(&linked.servers[i])
    }
}

/// Whether a tool of `server` named `name` could ever be called: a name reserved for resources
/// and prompts, or one no question can carry (a blank or control character), is never listed.
fn callable(server: &str, name: &str) -> bool {
    !methods::reserved_tool(name) && question_tool(server, name).is_some()
}

/// How an `input_required` result of a server is recorded (its `mcp/message` method).
const INPUT_REQUIRED: &str = "input_required";

/// A server's result as a final one: a server that speaks an earlier revision writes no
/// `resultType`, which MCP 2026-07-28 requires (the SDK takes it out again for an agent on an
/// earlier revision).
fn complete(mut result: ServerResult) -> ServerResult {
    let result_type = match &mut result {
        ServerResult::CompleteResult(r) => &mut r.result_type,
        ServerResult::GetPromptResult(r) => &mut r.result_type,
        ServerResult::ListPromptsResult(r) => &mut r.result_type,
        ServerResult::ListResourcesResult(r) => &mut r.result_type,
        ServerResult::ListResourceTemplatesResult(r) => &mut r.result_type,
        ServerResult::ReadResourceResult(r) => &mut r.result_type,
        ServerResult::ListToolsResult(r) => &mut r.result_type,
        ServerResult::CallToolResult(r) => &mut r.result_type,
        _ => return result,
    };
    result_type.get_or_insert(rmcp::model::ResultType::COMPLETE);
    result
}

/// The parameters the servers are initialized with for an agent that speaks the per-request
/// lifecycle (MCP 2026-07-28): its client and capabilities from the request's `_meta`, at the
/// newest revision with a handshake (the servers are reached as one reaches any server that
/// speaks an earlier revision). `None` for a request that does not carry them.
pub(super) fn inline_params(
    context: &RequestContext<RoleServer>,
) -> Option<InitializeRequestParams> {
    let meta = &context.meta;
    if meta.protocol_version()?.has_initialize() {
        return None;
    }
    let client = meta.client_info()?;
    let capabilities = meta.client_capabilities().unwrap_or_default();
    Some(
        InitializeRequestParams::new(capabilities, client)
            .with_protocol_version(rmcp::model::ProtocolVersion::LATEST_WITH_INITIALIZE),
    )
}

/// The HTTP request a message came in (its headers, and what the layers in front added); `None`
/// over stdio.
fn http_parts(context: &RequestContext<RoleServer>) -> Option<&axum::http::request::Parts> {
    context.extensions.get::<axum::http::request::Parts>()
}

/// The server's `initialize` answer, as the agent gets it.
fn initialize_result(peer: &ServerPeerInfo) -> InitializeResult {
    let mut result = InitializeResult::new(peer.capabilities.clone());
    result.protocol_version = peer.protocol_version.clone();
    if let Some(server) = &peer.server_info {
        result.server_info = server.clone();
    }
    result.instructions = peer.instructions.clone();
    result.meta = peer.meta.clone();
    result
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.ended.cancel();
        if let Some(id) = self.transport_id.get() {
            self.shared
                .owners
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(id);
        }
        let Some(linked) = self.linked.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        // The servers go now; the agent (and with it the session) stays until its turn ended.
        let Linked { servers, agent, .. } = linked;
        drop(servers);
        let shared = self.shared.clone();
        let session = self.session().to_owned();
        // Questions still waiting settle `cancelled` inside the turn.
        // Tracked, not awaited: `Gateway::closed` waits for it.
        drop(self.shared.closing.spawn_on(
            async move {
                shared.end_turn(&session).await;
                drop(agent);
            },
            &runtime,
        ));
    }
}
