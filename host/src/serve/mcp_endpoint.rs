//! The MCP gateway's HTTP endpoint behind the doors `serve` keeps for its own listeners: over
//! TCP every request bears a `[[token]]` with the agent role (`Authorization: Bearer …`, checked
//! at each request, so a revoked token ends at once, failures counted against the address as
//! everywhere else), connections admitted under `[limits]`, TLS when given; over a Unix socket
//! (0600) a token is needed when the deployment declares any. The token's name and sessions go
//! on to the gateway as an [`mcp::Caller`](crate::mcp::Caller), which picks the connection's
//! session and holds it to the token's share of sessions.

use std::path::Path;

use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::{ServeError, Server};
use std::sync::Arc;

use crate::config::token::{TokenRole, grants_session, is_prefix};
use crate::mcp::{Caller, SessionGrant};

/// What a request without a good token is told (with the reason the check gave).
pub const NEEDS_TOKEN: &str =
    "this MCP endpoint needs Authorization: Bearer <token> with the agent role";

/// The JSON-RPC error an HTTP refusal carries (`id` null: the body was not read).
fn refusal(status: StatusCode, code: i64, text: &str) -> Response {
    let body = json!({"jsonrpc": "2.0", "id": null, "error": {"code": code, "message": text}});
    let mut reply = (
        status,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body.to_string(),
    )
        .into_response();
    if status == StatusCode::UNAUTHORIZED {
        reply
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    }
    reply
}

/// Whether a request must bear a token, and where it came from.
#[derive(Clone)]
struct Door {
    server: Server,
    always: bool,
}

/// Authenticates every request and hands the caller on.
async fn authenticate(
    State(door): State<Door>,
    peer: Option<axum::Extension<super::http::Peer>>,
    mut request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let gatekeeper = &door.server.inner.gatekeeper;
    let token = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_owned);
    let caller = if !door.always && !gatekeeper.has_tokens() {
        Caller::local()
    } else if token.is_none() {
        // Not counted as a failed attempt: anyone who can reach the port (a web page's
        // request carries no token) could otherwise lock the agent's own address out.
        return refusal(
            StatusCode::UNAUTHORIZED,
            super::auth::UNAUTHENTICATED,
            &format!("{}: {NEEDS_TOKEN}", super::auth::BAD_TOKEN),
        );
    } else {
        let peer = peer.map_or_else(|| "unix".to_owned(), |p| p.0.0.ip().to_string());
        match gatekeeper.check(&peer, token.as_deref()) {
            Ok(grant) if grant.has(TokenRole::Agent) => {
                let fresh_prefix = grant.sessions.iter().find(|s| is_prefix(s)).cloned();
                let entries = grant.sessions;
                let sessions: Option<SessionGrant> = (!entries.is_empty()).then(|| {
                    Arc::new(move |session: &str| {
                        entries.iter().any(|e| grants_session(e, session))
                    }) as SessionGrant
                });
                Caller {
                    name: grant.name,
                    sessions,
                    fresh_prefix,
                    revoked: grant.revoked,
                }
            }
            Ok(grant) => {
                return refusal(
                    StatusCode::FORBIDDEN,
                    super::auth::FORBIDDEN,
                    &format!("token {:?} does not have the agent role", grant.name),
                );
            }
            Err(why) => {
                return refusal(
                    StatusCode::UNAUTHORIZED,
                    super::auth::UNAUTHENTICATED,
                    &format!("{why}: {NEEDS_TOKEN}"),
                );
            }
        }
    };
    request.extensions_mut().insert(caller);
    next.run(request).await
}

/// A Unix socket at `path` only its owner may connect to (as `serve --socket` binds its own),
/// replacing a stale one a stopped process left.
///
/// # Errors
/// A live process listens there, or the socket cannot be bound.
pub async fn bind_private_socket(path: &Path) -> Result<tokio::net::UnixListener, ServeError> {
    super::transport::listen_private(path).await
}

impl Server {
    /// Whether the MCP endpoint may listen on TCP: only when the deployment has tokens to
    /// check, since every request there must authenticate.
    ///
    /// # Errors
    /// [`ServeError::Io`] naming the deployment file and what to add.
    pub fn check_mcp_endpoint(&self) -> Result<(), ServeError> {
        if !self.inner.gatekeeper.has_tokens() {
            return Err(ServeError::Io(format!(
                "{}: the MCP endpoint on TCP needs [[token]] entries with the agent role: every request must authenticate (approval-host token new --role agent --config FILE), or listen on a Unix socket (--listen unix:PATH)",
                self.inner.options.config.display()
            )));
        }
        Ok(())
    }

    /// Serves `endpoint` (the gateway's routes) on a TCP listener, over TLS when `tls` is given,
    /// every request authenticated, until the task is dropped.
    ///
    /// # Errors
    /// As [`Server::check_mcp_endpoint`].
    pub async fn serve_mcp(
        &self,
        listener: tokio::net::TcpListener,
        tls: Option<tokio_rustls::TlsAcceptor>,
        endpoint: axum::Router,
    ) -> Result<(), ServeError> {
        self.check_mcp_endpoint()?;
        let door = Door {
            server: self.clone(),
            always: true,
        };
        let routes = endpoint.layer(axum::middleware::from_fn_with_state(door, authenticate));
        super::http::serve(
            super::limits::Transport::Mcp,
            listener,
            tls,
            routes,
            self.inner.admission.clone(),
        )
        .await;
        Ok(())
    }

    /// Serves `endpoint` on a private Unix socket (bound by [`bind_private_socket`]), a token
    /// needed when the deployment declares any, until `stop` is cancelled.
    ///
    /// # Errors
    /// Serving fails (`path` names the socket in the error).
    pub async fn serve_mcp_unix(
        &self,
        listener: tokio::net::UnixListener,
        path: &Path,
        endpoint: axum::Router,
        stop: tokio_util::sync::CancellationToken,
    ) -> Result<(), ServeError> {
        let door = Door {
            server: self.clone(),
            always: false,
        };
        let routes = endpoint.layer(axum::middleware::from_fn_with_state(door, authenticate));
        axum::serve(listener, routes)
            .with_graceful_shutdown(async move { stop.cancelled().await })
            .await
            .map_err(|e| ServeError::Io(format!("{}: {e}", path.display())))
    }
}
