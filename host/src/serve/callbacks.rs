//! `serve --callbacks ADDR`: where answers that waited arrive. `POST /plugins/<name>/callback`
//! hands the request to plugin `<name>`'s `callback` export (in its sandbox, which checks the
//! signature with the host's HMAC), and the question it names is settled
//! ([`crate::plugin::pending`]). Nothing else is served here, so the address can face the
//! network a chat service or webhook calls from without exposing the console.
//!
//! Every callback that settles nothing is answered with why and logged: an unknown plugin or
//! one without `wait_ms` (404), a body over 64 KiB (413) or slower than the console's body
//! timeout (408), a request the plugin refuses, such as a forged signature (403), and one for a
//! question that no longer waits, such as after its timeout (410).

use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::any;

use super::Server;
use crate::plugin::pending::{CallbackError, CallbackRequest, MAX_CALLBACK_BODY};

/// The answer to a callback that settled its question.
pub const SETTLED: &str = "settled";

impl Server {
    /// Says that callbacks reach this server from now on ([`Server::serve_callbacks`] says so
    /// too): a plugin's `pending` answer waits for its callback instead of settling at once.
    pub fn accept_callbacks(&self) {
        self.inner.host.waits().accept_callbacks();
    }

    /// Binds the callbacks' address and accepts callbacks from now on, before any client is
    /// served: a question asked from the first moment may wait.
    pub async fn bind_callbacks(
        &self,
        addr: std::net::SocketAddr,
    ) -> std::io::Result<tokio::net::TcpListener> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        self.accept_callbacks();
        tracing::info!(%addr, "plugins' callbacks listening");
        Ok(listener)
    }

    /// Serves plugins' callbacks on `listener` until the task is dropped, over TLS when `tls`
    /// is given. From the moment it is called, a plugin's `pending` answer waits for its
    /// callback instead of settling at once as `on-timeout` says.
    pub async fn serve_callbacks(
        &self,
        listener: tokio::net::TcpListener,
        tls: Option<tokio_rustls::TlsAcceptor>,
    ) -> Result<(), super::ServeError> {
        self.accept_callbacks();
        let router = axum::Router::new()
            .route("/plugins/{name}/callback", any(callback))
            .with_state(self.clone());
        super::http::serve(
            super::limits::Transport::Callbacks,
            listener,
            tls,
            router,
            self.inner.admission.clone(),
        )
        .await;
        Ok(())
    }
}

async fn callback(
    State(server): State<Server>,
    Path(name): Path<String>,
    request: Request<Body>,
) -> Response {
    let refuse = |status: StatusCode, why: String| {
        tracing::warn!(plugin = %name, status = status.as_u16(), "callback settled nothing: {why}");
        (status, why).into_response()
    };
    let plugin = {
        let mounted = server.inner.mounted.lock().await;
        mounted.slot(&name).map(|slot| slot.plugin())
    };
    let Some(plugin) = plugin.filter(|p| p.spec().wait.is_some()) else {
        return refuse(
            StatusCode::NOT_FOUND,
            format!("no plugin named {name:?} waits for callbacks"),
        );
    };
    let (parts, body) = request.into_parts();
    // A body sent a byte a minute would hold its connection's slot: it has the console's time.
    let within = server.inner.admission.limits().console_body_timeout;
    let body =
        match tokio::time::timeout(within, axum::body::to_bytes(body, MAX_CALLBACK_BODY)).await {
            Ok(Ok(body)) => body,
            Ok(Err(_)) => {
                return refuse(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!("the body is over {MAX_CALLBACK_BODY} bytes, or broke off"),
                );
            }
            Err(_) => {
                return refuse(
                    StatusCode::REQUEST_TIMEOUT,
                    format!("the body did not arrive within {} s", within.as_secs()),
                );
            }
        };
    let asked = CallbackRequest {
        method: parts.method.as_str().to_owned(),
        query: parts.uri.query().unwrap_or_default().to_owned(),
        headers: parts
            .headers
            .iter()
            .map(|(name, value)| (name.as_str().to_owned(), value.as_bytes().to_vec()))
            .collect(),
        body: body.to_vec(),
    };
    match plugin.take_callback(asked).await {
        Ok(correlation) => {
            tracing::info!(plugin = %name, correlation, "callback settled its question");
            (StatusCode::OK, SETTLED).into_response()
        }
        Err(e @ CallbackError::Refused { .. }) => refuse(StatusCode::FORBIDDEN, e.to_string()),
        Err(e @ CallbackError::Unsettled(_)) => refuse(StatusCode::GONE, e.to_string()),
    }
}
