//! What a [`Connection`] does with each request from its agent: `tools/call`, `resources/read`,
//! `resources/subscribe`, `prompts/get` and `completion/complete` are asked first and go to the
//! server they name; the lists are screened (pins, tools no call of which can be allowed) and,
//! with many servers, united under `<server>__<name>`; everything else the screen let through
//! goes on, and a method it does not know is refused and recorded.

use std::borrow::Cow;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ClientNotification, ClientRequest,
    CompleteRequestParams, CompleteResult, ContentBlock, CustomNotification, CustomRequest,
    CustomResult, DiscoverResult, GetPromptRequestParams, GetPromptResponse,
    InitializeRequestParams, InitializeResult, ListPromptsResult, ListResourceTemplatesResult,
    ListResourcesResult, ListToolsResult, Notification, NotificationNoParam,
    PaginatedRequestParams, ProgressNotificationParam, ProtocolVersion, ReadResourceRequestParams,
    ReadResourceResponse, Reference, Request, RequestNoParam, RequestOptionalParam, ServerConfig,
    ServerResult, SubscribeRequestParams, UnsubscribeRequestParams,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler};
use serde_json::{Map, Value};

use crate::audit::event::{McpFrom, McpHandled};

use super::admit::ALREADY_INITIALIZED;
use super::ask::{INVALID_TOOL_NAME, RESERVED_TOOL_NAME, question_tool};
use super::gateway::{Connection, Link, Linked, inline_params};
use super::methods;
use super::relay::expect;
use super::screen::{REFUSED, Refusal};

/// The text of a list request of a gateway of many servers that names a cursor: it gives every
/// server's list on one page, so it never handed one out.
pub const NO_PAGES: &str =
    "this MCP gateway lists every server's items on one page: it gave no cursor to continue from";

/// The text of a `server/discover` whose `_meta` does not say which client asks (the gateway
/// initializes its servers with it).
pub const DISCOVER_WITHOUT_CLIENT: &str = "server/discover: the request's _meta must carry the protocol version, client info and capabilities";

/// The text of a `completion/complete` whose reference is neither a prompt nor a resource.
pub const UNKNOWN_REFERENCE: &str =
    "completion/complete: the gateway knows only ref/prompt and ref/resource references";

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

/// Whether a list request named a cursor.
fn continues(params: Option<&PaginatedRequestParams>) -> bool {
    params.is_some_and(|p| p.cursor.is_some())
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

/// The protocol versions the gateway speaks with agents: those with an `initialize` handshake,
/// and 2026-07-28's per-request lifecycle (a connection is linked at its first request).
fn agent_versions() -> &'static [ProtocolVersion] {
    ProtocolVersion::known_up_to(&ProtocolVersion::LATEST)
}

impl Connection {
    /// A request the gateway refuses before any server sees it, recorded; the error carries
    /// `text`.
    async fn unrouted(&self, method: &str, text: String) -> McpError {
        McpError::invalid_params(self.refused_agent(method, text).await, None)
    }

    /// A `tools/call` the gateway refuses without a question, recorded: the tool result
    /// carries `text`.
    async fn refuse_call(&self, text: String) -> CallToolResponse {
        refused(self.refused_agent(methods::CALL_TOOL, text).await)
    }

    /// The server of a resource request, or its recorded refusal.
    async fn resource_link<'a>(
        &self,
        linked: &'a Linked,
        method: &str,
        uri: &str,
    ) -> Result<&'a Link, McpError> {
        match self.resource_target(linked, uri).await {
            Ok(link) => Ok(link),
            Err(text) => Err(self.unrouted(method, text).await),
        }
    }
}

impl ServerHandler for Connection {
    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(agent_versions())
    }

    fn get_info(&self) -> ServerConfig {
        self.linked
            .get()
            .map(|l| l.info.clone())
            .unwrap_or_default()
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, McpError> {
        // A connection is initialized once: a second `initialize` would replace what its agent
        // said it is.
        if self.linked.get().is_some() {
            return Err(McpError::invalid_request(ALREADY_INITIALIZED, None));
        }
        context.peer.set_peer_info(request.clone());
        let linked = self
            .linked
            .get_or_try_init(|| self.connect(request, context.peer.clone(), &context, false))
            .await?;
        Ok(linked.info.clone())
    }

    async fn discover(
        &self,
        context: RequestContext<RoleServer>,
    ) -> Result<DiscoverResult, McpError> {
        let info = match self.linked.get() {
            Some(linked) => linked.info.clone(),
            None => {
                let params = inline_params(&context)
                    .ok_or_else(|| McpError::invalid_params(DISCOVER_WITHOUT_CLIENT, None))?;
                self.probe(params, &context).await?
            }
        };
        Ok(DiscoverResult::from_server_info(
            agent_versions().to_vec(),
            info,
        ))
    }

    async fn ping(&self, context: RequestContext<RoleServer>) -> Result<(), McpError> {
        let linked = self.linked_for(&context).await?;
        // Many servers: the gateway answers for itself (each server's own health shows in
        // what it answers).
        let (false, Some(link)) = (self.prefixed(), linked.servers.first()) else {
            return Ok(());
        };
        let ping = ClientRequest::PingRequest(RequestNoParam {
            method: Default::default(),
            extensions: Default::default(),
        });
        self.pass(link, ping, context).await.map(|_| ())
    }

    async fn call_tool(
        &self,
        mut params: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let linked = self.linked_for(&context).await?;
        let (link, own) = match linked.target(self.prefixed(), &params.name) {
            Ok((link, own)) => (link, own.to_owned()),
            Err(text) => return Ok(self.refuse_call(text).await),
        };
        if methods::reserved_tool(&own) {
            return Ok(self.refuse_call(RESERVED_TOOL_NAME.to_owned()).await);
        }
        let Some(tool) = question_tool(link.name(), &own) else {
            return Ok(self.refuse_call(INVALID_TOOL_NAME.to_owned()).await);
        };
        if let Err(text) = self.pinned(link, &own).await {
            return Ok(self.refuse_call(text).await);
        }
        let undeclared = link.undeclared(&own, params.arguments.as_ref());
        let arguments = params.arguments.clone().unwrap_or_default();
        let _running = match self
            .ask_first(
                (methods::CALL_TOOL, &tool),
                (arguments, undeclared),
                &context,
            )
            .await
        {
            Ok(running) => running,
            Err(text) => return Ok(refused(text)),
        };
        // What goes on is what was asked: the server's own name, the same arguments.
        params.name = own.into();
        let call = ClientRequest::CallToolRequest(request(params));
        match self.pass(link, call, context).await? {
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
        let linked = self.linked_for(&context).await?;
        if self.prefixed() {
            if continues(params.as_ref()) {
                return Err(McpError::invalid_params(NO_PAGES, None));
            }
            return Ok(ListToolsResult::with_all_items(
                self.every_tool(linked).await,
            ));
        }
        let Some(link) = linked.servers.first() else {
            return Ok(ListToolsResult::default());
        };
        let first_page = !continues(params.as_ref());
        let listed = match self
            .pass(
                link,
                ClientRequest::ListToolsRequest(optional(params)),
                context,
            )
            .await?
        {
            ServerResult::ListToolsResult(r) => r,
            other => expect(other)?,
        };
        Ok(self.visible(link, listed, first_page).await)
    }

    async fn complete(
        &self,
        mut params: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, McpError> {
        let linked = self.linked_for(&context).await?;
        let link = match &mut params.r#ref {
            Reference::Prompt(prompt) => match linked.target(self.prefixed(), &prompt.name) {
                Ok((link, own)) => {
                    let own = own.to_owned();
                    prompt.name = own;
                    link
                }
                Err(text) => return Err(self.unrouted(methods::COMPLETE, text).await),
            },
            Reference::Resource(resource) => {
                let uri = resource.uri.clone();
                self.resource_link(linked, methods::COMPLETE, &uri).await?
            }
            // A kind of reference newer than the gateway: which server it belongs to is unknown.
            _ => {
                let text = UNKNOWN_REFERENCE.to_owned();
                return Err(self.unrouted(methods::COMPLETE, text).await);
            }
        };
        let arguments = as_arguments(&params);
        let _running = self
            .ask_method(link, methods::COMPLETE, arguments, &context)
            .await?;
        match self
            .pass(
                link,
                ClientRequest::CompleteRequest(request(params)),
                context,
            )
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
        let linked = self.linked_for(&context).await?;
        if let (false, Some(link)) = (self.prefixed(), linked.servers.first()) {
            return self
                .pass(
                    link,
                    ClientRequest::SetLevelRequest(request(params)),
                    context,
                )
                .await
                .map(|_| ());
        }
        // Many servers: each that logs is told; one that refuses does not stop the others.
        for link in &linked.servers {
            if link.capabilities().is_some_and(|c| c.logging.is_some()) {
                let set = ClientRequest::SetLevelRequest(request(params.clone()));
                if let Err(e) = self.pass(link, set, context.clone()).await {
                    tracing::warn!(server = link.name(), error = %e.message, "an MCP server refused logging/setLevel");
                }
            }
        }
        Ok(())
    }

    async fn get_prompt(
        &self,
        mut params: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        let linked = self.linked_for(&context).await?;
        let link = match linked.target(self.prefixed(), &params.name) {
            Ok((link, own)) => {
                let own = own.to_owned();
                params.name = own;
                link
            }
            Err(text) => return Err(self.unrouted(methods::GET_PROMPT, text).await),
        };
        let arguments = as_arguments(&params);
        let _running = self
            .ask_method(link, methods::GET_PROMPT, arguments, &context)
            .await?;
        match self
            .pass(
                link,
                ClientRequest::GetPromptRequest(request(params)),
                context,
            )
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
        let linked = self.linked_for(&context).await?;
        if self.prefixed() {
            if continues(params.as_ref()) {
                return Err(McpError::invalid_params(NO_PAGES, None));
            }
            return Ok(ListPromptsResult::with_all_items(
                self.every_prompt(linked).await,
            ));
        }
        let Some(link) = linked.servers.first() else {
            return Ok(ListPromptsResult::default());
        };
        match self
            .pass(
                link,
                ClientRequest::ListPromptsRequest(optional(params)),
                context,
            )
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
        let linked = self.linked_for(&context).await?;
        if self.prefixed() {
            if continues(params.as_ref()) {
                return Err(McpError::invalid_params(NO_PAGES, None));
            }
            let (resources, _) = self.every_resource(linked).await;
            return Ok(ListResourcesResult::with_all_items(resources));
        }
        let Some(link) = linked.servers.first() else {
            return Ok(ListResourcesResult::default());
        };
        let listed = ClientRequest::ListResourcesRequest(optional(params));
        match self.pass(link, listed, context).await? {
            ServerResult::ListResourcesResult(r) => Ok(r),
            other => expect(other),
        }
    }

    async fn list_resource_templates(
        &self,
        params: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        let linked = self.linked_for(&context).await?;
        if self.prefixed() {
            if continues(params.as_ref()) {
                return Err(McpError::invalid_params(NO_PAGES, None));
            }
            let (_, templates) = self.every_resource(linked).await;
            return Ok(ListResourceTemplatesResult::with_all_items(templates));
        }
        let Some(link) = linked.servers.first() else {
            return Ok(ListResourceTemplatesResult::default());
        };
        let asked = ClientRequest::ListResourceTemplatesRequest(optional(params));
        match self.pass(link, asked, context).await? {
            ServerResult::ListResourceTemplatesResult(r) => Ok(r),
            other => expect(other),
        }
    }

    async fn read_resource(
        &self,
        params: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        let linked = self.linked_for(&context).await?;
        let link = self
            .resource_link(linked, methods::READ_RESOURCE, &params.uri)
            .await?;
        let arguments = as_arguments(&params);
        let _running = self
            .ask_method(link, methods::READ_RESOURCE, arguments, &context)
            .await?;
        match self
            .pass(
                link,
                ClientRequest::ReadResourceRequest(request(params)),
                context,
            )
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
        let linked = self.linked_for(&context).await?;
        let link = self
            .resource_link(linked, methods::SUBSCRIBE, &params.uri)
            .await?;
        let arguments = as_arguments(&params);
        let _running = self
            .ask_method(link, methods::SUBSCRIBE, arguments, &context)
            .await?;
        self.pass(
            link,
            ClientRequest::SubscribeRequest(request(params)),
            context,
        )
        .await
        .map(|_| ())
    }

    async fn unsubscribe(
        &self,
        params: UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        let linked = self.linked_for(&context).await?;
        let link = self
            .resource_link(linked, methods::UNSUBSCRIBE, &params.uri)
            .await?;
        self.pass(
            link,
            ClientRequest::UnsubscribeRequest(request(params)),
            context,
        )
        .await
        .map(|_| ())
    }

    async fn on_custom_request(
        &self,
        request: CustomRequest,
        context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, McpError> {
        // A refused request of the per-request lifecycle may be its connection's first (over
        // HTTP, every one is): it is linked first, so the refusal is recorded in its session.
        let _ = self.linked_for(&context).await;
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
        // Progress on a request a server made of the agent (sampling, elicitation): it goes to
        // the server that asked.
        let Ok(linked) = self.link() else { return };
        for link in &linked.servers {
            let Some(theirs) = link.asks.caller_token(&params.progress_token) else {
                continue;
            };
            params.progress_token = theirs;
            let progress = ClientNotification::ProgressNotification(Notification::new(params));
            // A server that has gone cannot be told; its next request says so.
            let _ = link.peer().send_notification(progress).await;
            return;
        }
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
