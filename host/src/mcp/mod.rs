//! The MCP gateway: a proxy between an agent and one MCP server, or many behind one endpoint
//! (`[[mcp.server]]`, each tool as `<server>__<tool>`), built on the official Rust MCP SDK
//! ([`rmcp`]). Every `tools/call` is a question, asked as `mcp__<server>__<tool>` with the
//! call's arguments in the session of the client's connection, through the same rules and
//! waterfall as every other asker; an allowed call is forwarded unchanged, and any other outcome
//! comes back as a tool result with `isError: true` and the text the model should read
//! ([`crate::tools::texts`]). Everything else (initialize, tools/list, resources, prompts,
//! completion, logging, notifications, cancellation and progress, and the server's own requests
//! such as sampling, roots and elicitation) is relayed both ways; `tools/list` leaves out the
//! tools a reject rule refuses every call of (`[mcp] hide-rejected-tools`).
//!
//! A connection is one turn of its session: opened when the client initializes, ended when the
//! connection closes (questions still waiting then settle `cancelled`), so each call costs one
//! sync of the session log (its record, question and decision together).
//!
//! Where things are: `gateway.rs` the agent-facing side (one [`Connection`] per client
//! connection: its session, its servers, what it learnt of them); `handler.rs` what it does with
//! each request; `route.rs` which server a name or URI belongs to; `many.rs` the one
//! `initialize` answer for many servers; `listing.rs` reading a server's whole list;
//! `relay.rs` forwarding a
//! request to a peer with its cancellation and progress, and the server-facing side;
//! `ask.rs` the question a `tools/call` is and the text a refusal reads; `upstream.rs` how the
//! server is reached (a child process over stdio, or streamable HTTP).

mod admit;
mod ask;
mod gateway;
mod handler;
mod http;
mod listing;
mod many;
pub mod methods;
pub mod pins;
mod relay;
pub mod route;
mod screen;
mod stdio;
mod upstream;

use std::sync::Arc;

pub use admit::{
    ALREADY_INITIALIZED, Caller, NOT_THE_OPENER, REVOKED, SESSION_HEADER, SessionGrant,
    session_not_granted, session_taken, too_many_sessions, too_many_sessions_for,
};
pub use ask::{INVALID_TOOL_NAME, RESERVED_TOOL_NAME, question_tool, refusal};
pub use gateway::{Connection, Gateway, NO_SERVERS};
pub use handler::{DISCOVER_WITHOUT_CLIENT, NO_PAGES};
pub use many::{GATEWAY_NAME, start_timed_out};
pub use relay::{
    input_required_refused, server_request_early, server_request_inline, server_request_refused,
};
pub use screen::MAX_MESSAGE;
pub use upstream::Upstream;

/// The agent id MCP questions are asked as.
pub const AGENT_ID: &str = "mcp";

/// The error a request gets when the MCP server has gone (exited, closed its connection).
pub fn server_gone(server: &str) -> String {
    format!("the MCP server \"{server}\" is not connected (it exited or closed the connection)")
}

/// The JSON-RPC error code of a request other than `tools/call` (a resource read, a prompt, a
/// completion) whose question did not allow it; the message is the text a refused tool call
/// reads.
pub const REFUSED_CODE: rmcp::model::ErrorCode = rmcp::model::ErrorCode(-32001);

/// The error a request gets before the client's `initialize` linked the server.
pub const NOT_INITIALIZED: &str = "the MCP gateway has not been initialized: send initialize first";

/// `[mcp]` in the deployment: how the gateway treats the tools it lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpConfig {
    /// Leave out of `tools/list` a tool that a live reject rule refuses whatever its arguments
    /// (`mcp__github__delete_*`); a call of it is still asked and refused.
    pub hide_rejected_tools: bool,
    /// The server's requests of the agent that go on to it (each recorded): by default every
    /// one of [`methods::SERVER_REQUESTS`].
    pub server_requests: Vec<String>,
    /// Browser origins the HTTP endpoint answers (`https://console.example:443`); a request
    /// from any other origin is refused (403). Requests without an `Origin` (agents) pass.
    pub allowed_origins: Vec<String>,
    /// Host names (or `host:port`) the HTTP endpoint answers besides loopback's, for an
    /// endpoint reached by name off loopback.
    pub allowed_hosts: Vec<String>,
    /// How long an HTTP session may stay idle before it is closed (its turn ends).
    pub session_idle: std::time::Duration,
    /// When a tool's definition is pinned ([`pins`]).
    pub pin: pins::PinMode,
    /// `[[mcp.server]]`: the servers one gateway serves behind one endpoint, when it is started
    /// without a server of its own (`approval-host mcp --config FILE`).
    pub servers: Vec<ServerEntry>,
}

/// One `[[mcp.server]]`: a server behind a gateway of many.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerEntry {
    /// Its name in rules (`mcp__<name>__<tool>`) and before its tools' names (`<name>__<tool>`).
    pub name: String,
    /// Where it is.
    pub upstream: Upstream,
}

impl Default for McpConfig {
    fn default() -> Self {
        McpConfig {
            hide_rejected_tools: true,
            server_requests: methods::SERVER_REQUESTS
                .iter()
                .map(|m| (*m).to_owned())
                .collect(),
            allowed_origins: Vec::new(),
            allowed_hosts: Vec::new(),
            session_idle: std::time::Duration::from_secs(300),
            pin: pins::PinMode::default(),
            servers: Vec::new(),
        }
    }
}

/// How one gateway runs: the server's name in rule syntax, and what it was configured with.
#[derive(Debug, Clone)]
pub struct GatewayOptions {
    /// The server's name in `mcp__<server>__<tool>` (a gateway of many servers takes each
    /// one's from its [`ServerEntry`] and leaves this empty).
    pub server: String,
    /// `[mcp]` from the deployment.
    pub config: McpConfig,
    /// The working directory questions carry (relative path rules and the protections read
    /// paths against it): the gateway's own, for a server it starts and one over HTTP alike.
    pub cwd: Option<String>,
    /// The session every question of a stdio connection is asked in; a fresh `mcp-<uuid>` per
    /// connection when `None` (always for HTTP, whose clients each get their own).
    pub session: Option<String>,
    /// `tools/call`s one connection may have running at once (`[limits] requests_in_flight`);
    /// one more is refused unasked ([`too_many_calls`]).
    pub calls_in_flight: usize,
    /// HTTP sessions open at once on the gateway (`[limits] connections`).
    pub sessions: usize,
    /// HTTP sessions open at once under one caller's token (`[limits] sessions_per_token`).
    pub sessions_per_caller: usize,
}

/// The text of a `tools/call` over its connection's limit of calls at once.
pub fn too_many_calls(limit: usize) -> String {
    format!(
        "too many tool calls at once on this MCP connection (the limit is {limit}); wait for one to finish"
    )
}

/// A gateway that cannot start.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// The server name cannot stand in a rule's tool name.
    #[error(
        "--name {0:?}: a server name is 1 to 64 ASCII letters, digits, '-' or '_', without \"__\" (it is the <server> of mcp__<server>__<tool>)"
    )]
    ServerName(String),
    /// The upstream URL is not an http or https URL.
    #[error("--upstream {url:?}: {why}")]
    UpstreamUrl {
        /// The URL as given.
        url: String,
        /// Why it is refused.
        why: String,
    },
    /// The server command is empty.
    #[error("the MCP server command is empty: give it after `--`")]
    NoCommand,
    /// A gateway of many servers was given none, or two of one name.
    #[error("{0}")]
    Servers(String),
    /// The agent-facing transport failed.
    #[error("{0}")]
    Transport(String),
}

/// Checks a server name for `mcp__<server>__<tool>`: a name with `__` or a glob character would
/// let one server's calls match another's rules.
///
/// # Errors
/// [`GatewayError::ServerName`].
pub fn check_server_name(name: &str) -> Result<(), GatewayError> {
    let fits = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        && !name.contains("__")
        && !name.starts_with('_')
        && !name.ends_with('_');
    if fits {
        Ok(())
    } else {
        Err(GatewayError::ServerName(name.to_owned()))
    }
}

/// One server behind the gateway, as every connection shares it.
pub(crate) struct Backend {
    /// Its name in rules.
    pub(crate) name: String,
    pub(crate) upstream: Upstream,
    /// Its pinned tool definitions.
    pub(crate) pins: pins::Pins,
    /// The text of a request to it once it has gone.
    pub(crate) gone: String,
}

/// What every connection of one gateway shares.
pub(crate) struct Shared {
    pub(crate) service: crate::service::ApprovalService,
    pub(crate) options: GatewayOptions,
    /// The servers behind it, in the order configured.
    pub(crate) servers: Vec<Arc<Backend>>,
    /// Whether the agent sees names as `<server>__<name>` (a gateway of many servers).
    pub(crate) prefixed: bool,
    /// Connections ending their turn after they closed.
    pub(crate) closing: tokio_util::task::TaskTracker,
    /// The sessions whose turn a live connection holds open, for [`Gateway::shutdown`].
    pub(crate) open: std::sync::Mutex<std::collections::HashSet<String>>,
    /// The sessions whose turn is being ended now.
    pub(crate) ending: std::sync::Mutex<std::collections::HashSet<String>>,
    /// Told each time a session is given back.
    pub(crate) released: tokio::sync::Notify,
    /// HTTP sessions open now, in all and by caller.
    pub(crate) http_sessions: Arc<std::sync::Mutex<admit::OpenSessions>>,
    /// Which caller opened each HTTP session, by the transport's session id: a request naming
    /// a session is refused unless it comes from its opener.
    pub(crate) owners: std::sync::Mutex<std::collections::HashMap<String, String>>,
}

impl Shared {
    pub(crate) fn open_sessions(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashSet<String>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Ends `session`'s turn (its waiting questions settle `cancelled`) if this gateway holds it.
    /// The session stays claimed until its turn has ended, so a new connection cannot start a
    /// turn this one is still ending.
    pub(crate) async fn end_turn(&self, session: &str) {
        if !self.open_sessions().contains(session) {
            return;
        }
        // One ending at a time: the connection's end and the gateway's own (stdio's close, a
        // shutdown) can come together, and a turn is ended once.
        if !self.ending().insert(session.to_owned()) {
            return;
        }
        if let Err(e) = self.service.end_turn_if_open(session).await {
            tracing::warn!(session, error = %e, "could not end an MCP connection's turn");
        }
        self.open_sessions().remove(session);
        self.ending().remove(session);
        self.released.notify_waiters();
    }

    fn ending(&self) -> std::sync::MutexGuard<'_, std::collections::HashSet<String>> {
        self.ending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Claims `session` for one connection, or the text to refuse the second with. The claim
    /// is given back when dropped unless [`Claim::keep`] was called.
    pub(crate) async fn claim(&self, session: &str) -> Result<Claim<'_>, String> {
        // A connection that has just answered may still be ending its turn in this session (an
        // HTTP request of MCP 2026-07-28 is a connection of its own): the next waits for it, a
        // while, rather than being refused.
        let patience = tokio::time::Instant::now() + CLAIM_PATIENCE;
        loop {
            let released = self.released.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            if self.open_sessions().insert(session.to_owned()) {
                return Ok(Claim {
                    shared: self,
                    session: session.to_owned(),
                    kept: false,
                });
            }
            if tokio::time::timeout_at(patience, released).await.is_err() {
                return Err(admit::session_taken(session));
            }
        }
    }
}

/// A session claimed by a connection that is still starting.
pub(crate) struct Claim<'a> {
    shared: &'a Shared,
    session: String,
    kept: bool,
}

impl Claim<'_> {
    /// The connection started: the session stays claimed until its turn ends.
    pub(crate) fn keep(mut self) {
        self.kept = true;
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        if !self.kept {
            self.shared.open_sessions().remove(&self.session);
            self.shared.released.notify_waiters();
        }
    }
}

/// How long a connection waits for its session while another connection in it ends.
const CLAIM_PATIENCE: std::time::Duration = std::time::Duration::from_secs(5);

pub(crate) type SharedRef = Arc<Shared>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_names_that_could_blur_rules_are_refused() {
        for good in ["github", "fs", "my-server", "notes_2"] {
            assert!(check_server_name(good).is_ok(), "{good}");
        }
        for bad in [
            "", "a__b", "_a", "a_", "git*", "a b", "a/b", "ünï", "a.b", "x(y)",
        ] {
            assert!(check_server_name(bad).is_err(), "{bad:?}");
        }
        assert!(check_server_name(&"a".repeat(65)).is_err());
    }
}
