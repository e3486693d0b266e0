//! The metrics address's endpoints: `/metrics`, `/healthz` (the process answers), `/readyz`
//! (store, leases, plugins, rules logs), served on their own listener; off loopback, over TLS with
//! a bearer token of the `metrics` role.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use serde_json::json;

use super::{CONTENT_TYPE, Metrics};
use crate::serve::Server;

/// Whether the host can answer: its store reachable, its plugins loaded, its rules logs trusted.
pub async fn readiness(server: &Server) -> (bool, serde_json::Value) {
    let store = server.service().store();
    let reached = tokio::time::timeout(
        std::time::Duration::from_secs(2),
        tokio::task::spawn_blocking(move || store.list().map(drop)),
    )
    .await;
    // Leases that did not renew say more than the listing's error (they fail first).
    let trouble = server.service().store().trouble();
    let store_check = match (trouble, reached) {
        (Some(trouble), _) => Err(trouble),
        (None, Ok(Ok(Ok(())))) => Ok(()),
        (None, Ok(Ok(Err(e)))) => Err(e.to_string()),
        (None, Ok(Err(e))) => Err(e.to_string()),
        (None, Err(_)) => Err("no answer within 2 s".to_owned()),
    };
    let failed: Vec<String> = server
        .plugin_status()
        .await
        .into_iter()
        .filter(|p| p.state == crate::plugin::slot::SlotState::Failed)
        .map(|p| p.name)
        .collect();
    let broken = server
        .service()
        .rules()
        .map(|book| book.broken())
        .unwrap_or_default();
    let ready = store_check.is_ok() && failed.is_empty() && broken.is_empty();
    let mut checks = serde_json::Map::new();
    checks.insert(
        "store".to_owned(),
        match &store_check {
            Ok(()) => json!("ok"),
            Err(e) => json!(e),
        },
    );
    checks.insert(
        "plugins".to_owned(),
        if failed.is_empty() {
            json!("ok")
        } else {
            json!({"failed": failed})
        },
    );
    checks.insert(
        "rules".to_owned(),
        if broken.is_empty() {
            json!("ok")
        } else {
            json!({"untrusted": broken.into_iter().map(|(log, why)| json!({"log": log, "why": why})).collect::<Vec<_>>()})
        },
    );
    (ready, json!({"ready": ready, "checks": checks}))
}

fn json_reply(status: StatusCode, body: &serde_json::Value) -> axum::response::Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

impl Server {
    /// Serves `/metrics`, `/healthz` and `/readyz` on `listener` (plain HTTP, no token: bind it
    /// where only the scraper reaches), counting decisions from now on.
    ///
    /// # Errors
    /// The listener fails.
    pub async fn serve_metrics(
        &self,
        listener: tokio::net::TcpListener,
    ) -> Result<(), crate::serve::ServeError> {
        self.serve_metrics_with(listener, None, false).await
    }

    /// Whether metrics may be served with `authenticate` (off loopback): only when the
    /// deployment has tokens to check. A caller checks before it serves anything else, so the
    /// refusal never races another listener's end.
    ///
    /// # Errors
    /// [`crate::serve::ServeError::Io`] naming the deployment file and what to add.
    pub fn check_metrics(&self, authenticate: bool) -> Result<(), crate::serve::ServeError> {
        if authenticate && !self.inner.gatekeeper.has_tokens() {
            return Err(crate::serve::ServeError::Io(format!(
                "{}: metrics off loopback need [[token]] entries with the metrics role: every scrape must authenticate (approval-host token new --role metrics --config FILE)",
                self.inner.options.config.display()
            )));
        }
        Ok(())
    }

    /// [`Server::serve_metrics`], over TLS when `tls` is given; with `authenticate`, `/metrics`
    /// and `/readyz` answer only a request bearing (`Authorization: Bearer …`) a token with the
    /// `metrics` role (or `admin`), checked at each request, so a revoked token ends at once;
    /// failed attempts count against the address as they do on every other listener.
    /// `/healthz` says only that the process answers, and stays open.
    ///
    /// # Errors
    /// The listener fails.
    pub async fn serve_metrics_with(
        &self,
        listener: tokio::net::TcpListener,
        tls: Option<tokio_rustls::TlsAcceptor>,
        authenticate: bool,
    ) -> Result<(), crate::serve::ServeError> {
        self.check_metrics(authenticate)?;
        let metrics = Arc::new(Metrics::new());
        self.service().add_observer(metrics.clone());
        let mut routes = router(self.clone(), metrics);
        if authenticate {
            routes = routes.layer(axum::middleware::from_fn_with_state(self.clone(), bearer));
        }
        let admission = self.inner.admission.clone();
        crate::serve::http::serve(
            crate::serve::limits::Transport::Metrics,
            listener,
            tls,
            routes,
            admission,
        )
        .await;
        Ok(())
    }
}

/// What a scrape without a token (or with a bad one) is told.
pub const NO_TOKEN: &str = "this address needs Authorization: Bearer <token> with the metrics role";

/// Lets through `/healthz`, and any other request bearing a token with the `metrics` role.
async fn bearer(
    State(server): State<Server>,
    axum::Extension(crate::serve::http::Peer(peer)): axum::Extension<crate::serve::http::Peer>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    if request.uri().path() == "/healthz" {
        return next.run(request).await;
    }
    let token = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    match server.inner.gatekeeper.check(&peer.ip().to_string(), token) {
        Ok(grant) if grant.has(crate::config::token::TokenRole::Metrics) => next.run(request).await,
        Ok(grant) => json_reply(
            StatusCode::FORBIDDEN,
            &json!({"error": format!("token {:?} does not have the metrics role", grant.name)}),
        ),
        Err(why) => {
            let mut reply = json_reply(
                StatusCode::UNAUTHORIZED,
                &json!({"error": format!("{why}: {NO_TOKEN}")}),
            );
            reply.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Bearer"),
            );
            reply
        }
    }
}

/// The metrics address's routes: `/metrics`, `/healthz` (the process answers), `/readyz`.
pub fn router(server: Server, metrics: Arc<Metrics>) -> axum::Router {
    axum::Router::new()
        .route(
            "/metrics",
            axum::routing::get(
                |State((server, metrics)): State<(Server, Arc<Metrics>)>| async move {
                    (
                        [(header::CONTENT_TYPE, CONTENT_TYPE)],
                        metrics.scrape(&server).await,
                    )
                },
            ),
        )
        .route(
            "/healthz",
            axum::routing::get(|| async { json_reply(StatusCode::OK, &json!({"alive": true})) }),
        )
        .route(
            "/readyz",
            axum::routing::get(
                |State((server, _)): State<(Server, Arc<Metrics>)>| async move {
                    let (ready, body) = readiness(&server).await;
                    let status = if ready {
                        StatusCode::OK
                    } else {
                        StatusCode::SERVICE_UNAVAILABLE
                    };
                    json_reply(status, &body)
                },
            ),
        )
        .with_state((server, metrics))
}
