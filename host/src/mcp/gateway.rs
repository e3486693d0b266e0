//! The agent-facing side: a [`Gateway`] serves agents over stdio or streamable HTTP, one
//! [`Connection`] per client connection. A connection's `initialize` starts (or reaches) the
//! server, initializes it with the agent's own parameters and answers with the server's; from
//! then on every request is forwarded, but `tools/call`, which is asked first, and `tools/list`,
//! whose answer may leave out tools that can never be allowed.

use std::borrow::Cow;
use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientNotification, ClientRequest,
    CompleteRequestParams, CompleteResult, ContentBlock, CustomNotification, CustomRequest,
    CustomResult, GetPromptRequestParams, GetPromptResponse, InitializeRequestParams,
    InitializeResult, ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult,
    ListToolsResult, Notification, NotificationNoParam, PaginatedRequestParams,
    ProgressNotificationParam, ProtocolVersion, ReadResourceRequestParams, ReadResourceResponse,
    Request, RequestNoParam, RequestOptionalParam, ServerConfig, ServerPeerInfo, ServerResult,
    SubscribeRequestParams, UnsubscribeRequestParams,
};
use rmcp::service::{NotificationContext, Peer, RequestContext, RunningService};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData as McpError, RoleClient, RoleServer, ServerHandler, ServiceExt};
use tokio_util::sync::CancellationToken;

use serde_json::{Map, Value};

use crate::agent::Agent;
use crate::audit::event::{McpFrom, McpHandled, McpMessage};
use crate::service::ApprovalService;

use super::admit::{
    ALREADY_INITIALIZED, Caller, LOCAL, NOT_THE_OPENER, REVOKED, SESSION_HEADER, SessionSlot,
};
use super::ask::{self, INVALID_TOOL_NAME, RESERVED_TOOL_NAME, question_tool, refusal};
use super::methods;
use super::relay::{Progress, Relay, expect, forward};
use super::screen::{REFUSED, Refusal};
use super::upstream::Upstream;
use super::{
    AGENT_ID, GatewayError, GatewayOptions, NOT_INITIALIZED, REFUSED_CODE, Shared, SharedRef,
    check_server_name, server_gone, too_many_calls,
};

/// The gateway: what its connections share.
#[derive(Clone)]
pub struct Gateway {
    shared: SharedRef,
}

impl Gateway {
    /// A gateway asking `service`, for the server at `upstream`.
    ///
    /// # Errors
    /// [`GatewayError::ServerName`] when the server's name cannot stand in a rule.
    pub fn new(
        service: ApprovalService,
        options: GatewayOptions,
        upstream: Upstream,
    ) -> Result<Gateway, GatewayError> {
        check_server_name(&options.server)?;
        Ok(Gateway {
            shared: Arc::new(Shared {
                service,
                upstream,
                closing: tokio_util::task::TaskTracker::new(),
                open: std::sync::Mutex::default(),
                http_sessions: Arc::default(),
                owners: std::sync::Mutex::default(),
                pins: super::pins::Pins::new(options.config.pin, &options.server),
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

/// One client connection: its session, and once initialized, its server and agent.
pub struct Connection {
    shared: SharedRef,
    /// Cancelled when the connection is dropped (ends the task watching its token).
    ended: CancellationToken,
    /// The HTTP transport's id of its session, once a request named it.
    transport_id: std::sync::OnceLock<String>,
    /// Set at construction for stdio, at `initialize` over HTTP.
    session: std::sync::OnceLock<String>,
    link: tokio::sync::OnceCell<Link>,
    /// Its `tools/call`s running now, at most [`GatewayOptions::calls_in_flight`].
    calls: Arc<tokio::sync::Semaphore>,
    /// The text of a request to a server that has gone.
    gone: String,
}

struct Link {
    /// Kept for as long as the connection: dropping it stops the server it started.
    server: RunningService<RoleClient, Relay>,
    info: InitializeResult,
    agent: Agent,
    calls: Progress,
    asks: Progress,
    /// Who opened it, when it came over HTTP.
    caller: Option<Caller>,
    /// Its place under the gateway's caps on HTTP sessions.
    _slot: Option<SessionSlot>,
    /// The hash of each tool's definition as this connection's server last listed it.
    seen: std::sync::Mutex<std::collections::HashMap<String, String>>,
    /// The argument names each tool's input schema declares, as this connection's server last
    /// listed it (none when its schema has no `properties` object).
    declared: std::sync::Mutex<std::collections::HashMap<String, Vec<String>>>,
}

impl Link {
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
    fn undeclared(&self, tool: &str, arguments: Option<&Map<String, Value>>) -> Vec<String> {
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

impl Link {
    fn peer(&self) -> &Peer<RoleClient> {
        self.server.peer()
    }
}

impl Connection {
    fn new(shared: SharedRef, preset: Option<String>) -> Connection {
        let session = std::sync::OnceLock::new();
        if let Some(preset) = preset {
            let _ = session.set(preset);
        }
        let gone = server_gone(&shared.options.server);
        let calls = Arc::new(tokio::sync::Semaphore::new(
            shared.options.calls_in_flight.max(1),
        ));
        Connection {
            shared,
            ended: CancellationToken::new(),
            transport_id: std::sync::OnceLock::new(),
            session,
            link: tokio::sync::OnceCell::new(),
            calls,
            gone,
        }
    }

    /// The session this connection's questions are asked in (empty before an HTTP
    /// connection's `initialize`).
    pub fn session(&self) -> &str {
        self.session.get().map_or("", String::as_str)
    }

    fn link(&self) -> Result<&Link, McpError> {
        let link = self
            .link
            .get()
            .ok_or_else(|| McpError::invalid_request(NOT_INITIALIZED, None))?;
        if link
            .caller
            .as_ref()
            .is_some_and(|c| c.revoked.is_cancelled())
        {
            return Err(McpError::invalid_request(REVOKED, None));
        }
        Ok(link)
    }

    /// [`Connection::link`] for a request, which over HTTP must come from the caller that opened
    /// the connection (a session id is a handle, not a credential).
    fn link_for(&self, context: &RequestContext<RoleServer>) -> Result<&Link, McpError> {
        let link = self.link()?;
        let Some(opened_by) = &link.caller else {
            return Ok(link);
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
                self.learn_transport_id(context);
                Ok(link)
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

    async fn pass(
        &self,
        request: ClientRequest,
        context: RequestContext<RoleServer>,
    ) -> Result<ServerResult, McpError> {
        let link = self.link_for(&context)?;
        // No rule reads `_meta`: only the progress token (replaced by the forward) goes on.
        let mut meta = context.meta;
        meta.0
            .0
            .retain(|key, _| key == super::relay::PROGRESS_TOKEN);
        forward(
            link.peer(),
            request,
            meta,
            context.ct,
            &link.calls,
            &self.gone,
        )
        .await
    }

    async fn notify(&self, notification: ClientNotification) {
        if let Ok(link) = self.link() {
            // A server that has gone cannot be told; its next request says so.
            let _ = link.peer().send_notification(notification).await;
        }
    }

    async fn connect(
        &self,
        params: InitializeRequestParams,
        agent_peer: Peer<RoleServer>,
        context: &RequestContext<RoleServer>,
    ) -> Result<Link, McpError> {
        // Refused before anything is started or written: a flood of `initialize`s leaves no
        // session logs and no servers behind.
        let (caller, slot) = self.admit(context)?;
        let session = self.session().to_owned();
        // One connection per session: two that started together would end each other's turns.
        let claim = self
            .shared
            .claim(&session)
            .map_err(|text| McpError::invalid_request(text, None))?;
        let calls = Progress::default();
        let asks = Progress::default();
        let recorded_as = Arc::new(std::sync::OnceLock::new());
        let relay = Relay {
            info: params,
            agent: agent_peer,
            calls: calls.clone(),
            asks: asks.clone(),
            gone: "the agent closed the connection".to_owned(),
            shared: self.shared.clone(),
            recorded_as: recorded_as.clone(),
        };
        let server = self
            .shared
            .upstream
            .connect(relay)
            .await
            .map_err(|e| McpError::internal_error(e, None))?;
        let info = server
            .peer_info()
            .map(|i| initialize_result(&i))
            .ok_or_else(|| McpError::internal_error(self.gone.clone(), None))?;
        let service = &self.shared.service;
        let failed =
            |e: crate::service::ApprovalError| McpError::internal_error(e.to_string(), None);
        let agent = service.agent(&session, AGENT_ID).await.map_err(failed)?;
        // A turn a killed gateway left open in this session settles first.
        service.end_turn_if_open(&session).await.map_err(failed)?;
        service.start_turn(&session).await.map_err(failed)?;
        claim.keep();
        let _ = recorded_as.set(agent.clone());
        if let Some(caller) = &caller {
            self.end_when_revoked(caller, &server, &session);
        }
        Ok(Link {
            server,
            info,
            agent,
            calls,
            asks,
            caller,
            _slot: slot,
            seen: std::sync::Mutex::default(),
            declared: std::sync::Mutex::default(),
        })
    }

    /// When the caller's token is revoked (removed or changed at a reload), the connection ends
    /// at once: its turn ends (questions waiting settle `cancelled`) and its server is stopped,
    /// so an open event stream carries nothing more; every later request is refused.
    fn end_when_revoked(
        &self,
        caller: &Caller,
        server: &RunningService<RoleClient, Relay>,
        session: &str,
    ) {
        let revoked = caller.revoked.clone();
        let stop = server.cancellation_token();
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
            stop.cancel();
            shared.end_turn(&session).await;
        }));
    }

    /// Records what was done with a message no question was asked about. Before `initialize`
    /// there is no session to record it in: it goes to the gateway's own log.
    async fn record(
        &self,
        from: McpFrom,
        method: String,
        handled: McpHandled,
        why: Option<String>,
    ) {
        let Some(link) = self.link.get() else {
            tracing::warn!(
                method,
                ?why,
                "an MCP message before initialize, not forwarded"
            );
            return;
        };
        let message = McpMessage {
            from,
            method,
            handled,
            why,
        };
        if let Err(e) = self
            .shared
            .service
            .record_mcp_message(&link.agent, message)
            .await
        {
            tracing::warn!(session = self.session(), error = %e, "could not record an MCP message");
        }
    }

    /// Asks whether `tool` (in rule syntax) may go ahead with `arguments`: the connection's slot
    /// for a call in flight while it runs, or the text of the refusal.
    async fn ask_first(
        &self,
        tool: &str,
        arguments: Map<String, Value>,
        context: &RequestContext<RoleServer>,
    ) -> Result<tokio::sync::OwnedSemaphorePermit, String> {
        let link = self.link_for(context).map_err(|e| e.message.to_string())?;
        // An agent that floods the gateway gets refusals, not a queue of questions.
        let Ok(running) = self.calls.clone().try_acquire_owned() else {
            return Err(too_many_calls(self.shared.options.calls_in_flight.max(1)));
        };
        // Only a tool's own arguments are held against its schema (resources, prompts and
        // completion have none).
        let undeclared = tool
            .strip_prefix(&format!("mcp__{}__", self.shared.options.server))
            .filter(|name| !methods::reserved_tool(name))
            .map(|name| link.undeclared(name, Some(&arguments)))
            .unwrap_or_default();
        let verdict = ask::ask(
            &self.shared,
            &link.agent,
            tool,
            (arguments, undeclared),
            context.ct.clone(),
        )
        .await
        .map_err(|e| crate::tools::texts::approval_failed(tool, &e.to_string()))?;
        match refusal(tool, &verdict) {
            Some(text) => Err(text),
            None => Ok(running),
        }
    }

    /// [`Connection::ask_first`] for a method other than `tools/call`, asked as
    /// `mcp__<server>__<method>`: a refusal is a JSON-RPC error with [`REFUSED_CODE`].
    async fn ask_method(
        &self,
        method: &str,
        arguments: Map<String, Value>,
        context: &RequestContext<RoleServer>,
    ) -> Result<tokio::sync::OwnedSemaphorePermit, McpError> {
        self.link()?;
        let tool = question_tool(&self.shared.options.server, method)
            .ok_or_else(|| McpError::internal_error(INVALID_TOOL_NAME, None))?;
        self.ask_first(&tool, arguments, context)
            .await
            .map_err(|text| McpError::new(REFUSED_CODE, text, None))
    }

    /// Whether a call of `name` may be asked: its definition, as this connection's server
    /// listed it, is pinned ([`super::pins`]). A connection that never listed its tools has
    /// them listed now, so a definition is known before anything is asked; a name its server
    /// did not list is refused.
    async fn pinned(&self, name: &str) -> Result<(), String> {
        let pins = &self.shared.pins;
        if pins.off() {
            return Ok(());
        }
        let link = self.link().map_err(|e| e.message.to_string())?;
        let listed_before = !link
            .seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_empty();
        if !listed_before {
            let mut tools = self.whole_list(link).await?;
            self.screen(Some(link), &mut tools, true).await;
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
    async fn screen(&self, link: Option<&Link>, tools: &mut Vec<rmcp::model::Tool>, whole: bool) {
        if let Some(link) = link {
            link.learn_schemas(tools);
        }
        let pins = &self.shared.pins;
        if pins.off() {
            return;
        }
        let hashes = pins.screen(&self.shared.service, tools, whole).await;
        if let Some(link) = link {
            link.seen
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .extend(hashes);
        }
    }

    /// Every tool the server lists, page after page (at most [`MAX_PAGES`], within
    /// [`LIST_PATIENCE`]), less those that can never be called.
    async fn whole_list(&self, link: &Link) -> Result<Vec<rmcp::model::Tool>, String> {
        let server = &self.shared.options.server;
        let listing = async {
            let mut tools = Vec::new();
            let mut cursor = None;
            for _ in 0..MAX_PAGES {
                let page = link
                    .peer()
                    .list_tools(Some(
                        PaginatedRequestParams::default().with_cursor(cursor.take()),
                    ))
                    .await
                    .map_err(|e| format!("{}: {e}", self.gone))?;
                tools.extend(page.tools);
                match page.next_cursor {
                    Some(next) => cursor = Some(next),
                    None => return Ok(tools),
                }
            }
            Err(format!(
                "the MCP server \"{server}\" lists its tools in more than {MAX_PAGES} pages: its tools cannot be checked against their pins"
            ))
        };
        let mut tools = tokio::time::timeout(LIST_PATIENCE, listing)
            .await
            .map_err(|_| {
                format!(
                    "the MCP server \"{server}\" did not list its tools within {} s: they cannot be checked against their pins",
                    LIST_PATIENCE.as_secs()
                )
            })??;
        tools.retain(|tool| callable(server, &tool.name));
        Ok(tools)
    }

    /// The tools the server lists, less those that can never be called, those whose definition
    /// is not pinned and those a reject rule refuses whatever the arguments. `first_page`: the
    /// request named no cursor.
    async fn visible(&self, mut listed: ListToolsResult, first_page: bool) -> ListToolsResult {
        let server = &self.shared.options.server;
        listed.tools.retain(|tool| callable(server, &tool.name));
        let link = self.link().ok();
        let whole = first_page && listed.next_cursor.is_none();
        // A server's first use pins its whole list at once: when this is one page of it, the
        // rest is listed first.
        if !whole
            && let Some(link) = link
            && self
                .shared
                .pins
                .awaits_first_use(&self.shared.service)
                .await
        {
            match self.whole_list(link).await {
                Ok(mut all) => self.screen(Some(link), &mut all, true).await,
                Err(e) => {
                    tracing::warn!(server, error = %e, "an MCP server's first list could not be pinned whole")
                }
            }
        }
        self.screen(link, &mut listed.tools, whole).await;
        if !self.shared.options.config.hide_rejected_tools {
            return listed;
        }
        let Some(book) = self.shared.service.rules() else {
            return listed;
        };
        listed.tools.retain(|tool| {
            question_tool(server, &tool.name)
                .is_none_or(|name| book.rejects_every_call(&name, self.session()).is_none())
        });
        listed
    }
}

/// Pages of a server's tool list the gateway reads to know every definition.
const MAX_PAGES: usize = 64;

/// How long the gateway waits for a server's whole tool list.
const LIST_PATIENCE: std::time::Duration = std::time::Duration::from_secs(30);

/// Whether a tool of `server` named `name` could ever be called: a name reserved for resources
/// and prompts, or one no question can carry (a blank or control character), is never listed.
fn callable(server: &str, name: &str) -> bool {
    !methods::reserved_tool(name) && question_tool(server, name).is_some()
}

/// The HTTP request a message came in (its headers, and what the layers in front added); `None`
/// over stdio.
fn http_parts(context: &RequestContext<RoleServer>) -> Option<&axum::http::request::Parts> {
    context.extensions.get::<axum::http::request::Parts>()
}

/// The refusal a custom message carries: the screen's, or (for a message that reached the SDK
/// without passing the screen) its method as unknown.
fn refusal_of(method: &str, params: Option<&Value>) -> Refusal {
    if method == REFUSED
        && let Some(refusal) = params.and_then(|p| serde_json::from_value(p.clone()).ok())
    {
        return refusal;
    }
    Refusal {
        method: method.to_owned(),
        why: methods::unknown_method(method),
        code: rmcp::model::ErrorCode::METHOD_NOT_FOUND.0,
    }
}

/// A request's parameters as a question's arguments (without `_meta`, which is not the
/// request's content).
fn as_arguments(params: &impl serde::Serialize) -> Map<String, Value> {
    match serde_json::to_value(params) {
        Ok(Value::Object(mut map)) => {
            map.remove("_meta");
            map
        }
        _ => Map::new(),
    }
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
        let Some(link) = self.link.take() else { return };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        // The server goes now; the agent (and with it the session) stays until its turn ended.
        let Link { server, agent, .. } = link;
        drop(server);
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

fn refused(text: String) -> CallToolResponse {
    CallToolResponse::Complete(CallToolResult::error(vec![ContentBlock::text(text)]))
}

/// A request of a method that takes parameters.
fn request<M: Default, P>(params: P) -> Request<M, P> {
    Request::new(params)
}

/// A request of a method whose parameters are optional.
fn optional<M: Default, P>(params: Option<P>) -> RequestOptionalParam<M, P> {
    RequestOptionalParam {
        method: M::default(),
        params,
        extensions: Default::default(),
    }
}

/// The protocol versions with an `initialize` handshake: the gateway links a server per
/// connection at `initialize`, so it does not offer the per-request lifecycle.
fn handshake_versions() -> &'static [ProtocolVersion] {
    ProtocolVersion::known_up_to(&ProtocolVersion::LATEST_WITH_INITIALIZE)
}

impl ServerHandler for Connection {
    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(handshake_versions())
    }

    fn get_info(&self) -> ServerConfig {
        self.link.get().map(|l| l.info.clone()).unwrap_or_default()
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, McpError> {
        // A connection is initialized once: a second `initialize` would replace what its agent
        // said it is.
        if self.link.get().is_some() {
            return Err(McpError::invalid_request(ALREADY_INITIALIZED, None));
        }
        context.peer.set_peer_info(request.clone());
        let link = self
            .link
            .get_or_try_init(|| self.connect(request, context.peer.clone(), &context))
            .await?;
        Ok(link.info.clone())
    }

    async fn ping(&self, context: RequestContext<RoleServer>) -> Result<(), McpError> {
        let ping = ClientRequest::PingRequest(RequestNoParam {
            method: Default::default(),
            extensions: Default::default(),
        });
        self.pass(ping, context).await.map(|_| ())
    }

    async fn call_tool(
        &self,
        params: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        self.link()?;
        if methods::reserved_tool(&params.name) {
            return Ok(refused(RESERVED_TOOL_NAME.to_owned()));
        }
        let Some(tool) = question_tool(&self.shared.options.server, &params.name) else {
            return Ok(refused(INVALID_TOOL_NAME.to_owned()));
        };
        if let Err(text) = self.pinned(&params.name).await {
            self.record(
                McpFrom::Agent,
                "tools/call".to_owned(),
                McpHandled::Refused,
                Some(text.clone()),
            )
            .await;
            return Ok(refused(text));
        }
        let _running = match self
            .ask_first(
                &tool,
                params.arguments.clone().unwrap_or_default(),
                &context,
            )
            .await
        {
            Ok(running) => running,
            Err(text) => return Ok(refused(text)),
        };
        let call = ClientRequest::CallToolRequest(request(params));
        match self.pass(call, context).await? {
            ServerResult::CallToolResult(r) => Ok(CallToolResponse::Complete(r)),
            ServerResult::InputRequiredResult(r) => Ok(CallToolResponse::InputRequired(r)),
            ServerResult::CreateTaskResult(r) => Ok(CallToolResponse::Task(r)),
            other => expect::<CallToolResult>(other).map(CallToolResponse::Complete),
        }
    }

    async fn list_tools(
        &self,
        params: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let first_page = params.as_ref().is_none_or(|p| p.cursor.is_none());
        let listed = match self
            .pass(ClientRequest::ListToolsRequest(optional(params)), context)
            .await?
        {
            ServerResult::ListToolsResult(r) => r,
            other => expect(other)?,
        };
        Ok(self.visible(listed, first_page).await)
    }

    async fn complete(
        &self,
        params: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, McpError> {
        let arguments = as_arguments(&params);
        let _running = self
            .ask_method(methods::COMPLETE, arguments, &context)
            .await?;
        match self
            .pass(ClientRequest::CompleteRequest(request(params)), context)
            .await?
        {
            ServerResult::CompleteResult(r) => Ok(r),
            other => expect(other),
        }
    }

    #[allow(deprecated)] // Logging is deprecated (SEP-2577), but servers still take it.
    async fn set_level(
        &self,
        params: rmcp::model::SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.pass(ClientRequest::SetLevelRequest(request(params)), context)
            .await
            .map(|_| ())
    }

    async fn get_prompt(
        &self,
        params: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        let arguments = as_arguments(&params);
        let _running = self
            .ask_method(methods::GET_PROMPT, arguments, &context)
            .await?;
        match self
            .pass(ClientRequest::GetPromptRequest(request(params)), context)
            .await?
        {
            ServerResult::GetPromptResult(r) => Ok(GetPromptResponse::Complete(r)),
            ServerResult::InputRequiredResult(r) => Ok(GetPromptResponse::InputRequired(r)),
            other => expect(other).map(GetPromptResponse::Complete),
        }
    }

    async fn list_prompts(
        &self,
        params: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        match self
            .pass(ClientRequest::ListPromptsRequest(optional(params)), context)
            .await?
        {
            ServerResult::ListPromptsResult(r) => Ok(r),
            other => expect(other),
        }
    }

    async fn list_resources(
        &self,
        params: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        match self
            .pass(
                ClientRequest::ListResourcesRequest(optional(params)),
                context,
            )
            .await?
        {
            ServerResult::ListResourcesResult(r) => Ok(r),
            other => expect(other),
        }
    }

    async fn list_resource_templates(
        &self,
        params: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        let asked = ClientRequest::ListResourceTemplatesRequest(optional(params));
        match self.pass(asked, context).await? {
            ServerResult::ListResourceTemplatesResult(r) => Ok(r),
            other => expect(other),
        }
    }

    async fn read_resource(
        &self,
        params: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        let arguments = as_arguments(&params);
        let _running = self
            .ask_method(methods::READ_RESOURCE, arguments, &context)
            .await?;
        match self
            .pass(ClientRequest::ReadResourceRequest(request(params)), context)
            .await?
        {
            ServerResult::ReadResourceResult(r) => Ok(ReadResourceResponse::Complete(r)),
            ServerResult::InputRequiredResult(r) => Ok(ReadResourceResponse::InputRequired(r)),
            other => expect(other).map(ReadResourceResponse::Complete),
        }
    }

    async fn subscribe(
        &self,
        params: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let arguments = as_arguments(&params);
        let _running = self
            .ask_method(methods::SUBSCRIBE, arguments, &context)
            .await?;
        self.pass(ClientRequest::SubscribeRequest(request(params)), context)
            .await
            .map(|_| ())
    }

    async fn unsubscribe(
        &self,
        params: UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.pass(ClientRequest::UnsubscribeRequest(request(params)), context)
            .await
            .map(|_| ())
    }

    async fn on_custom_request(
        &self,
        request: CustomRequest,
        _context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, McpError> {
        let refusal = refusal_of(&request.method, request.params.as_ref());
        let error = McpError::new(
            rmcp::model::ErrorCode(refusal.code),
            refusal.why.clone(),
            None,
        );
        self.record(
            McpFrom::Agent,
            refusal.method,
            McpHandled::Refused,
            Some(refusal.why),
        )
        .await;
        Err(error)
    }

    async fn on_progress(
        &self,
        mut params: ProgressNotificationParam,
        _context: NotificationContext<RoleServer>,
    ) {
        // Progress on a request the server made of the agent (sampling, elicitation).
        let Ok(link) = self.link() else { return };
        let Some(theirs) = link.asks.caller_token(&params.progress_token) else {
            return;
        };
        params.progress_token = theirs;
        self.notify(ClientNotification::ProgressNotification(Notification::new(
            params,
        )))
        .await;
    }

    async fn on_roots_list_changed(&self, _context: NotificationContext<RoleServer>) {
        self.notify(ClientNotification::RootsListChangedNotification(
            NotificationNoParam {
                method: Default::default(),
                extensions: Default::default(),
            },
        ))
        .await;
    }

    async fn on_custom_notification(
        &self,
        notification: CustomNotification,
        _context: NotificationContext<RoleServer>,
    ) {
        let refusal = refusal_of(&notification.method, notification.params.as_ref());
        self.record(
            McpFrom::Agent,
            refusal.method,
            McpHandled::Dropped,
            Some(refusal.why),
        )
        .await;
    }
}
