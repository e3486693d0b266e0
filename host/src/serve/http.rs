//! The HTTP listeners' accept loop, shared by the web console and the metrics address: each
//! connection admitted under `[limits]` (connections in all and per address), over TLS when an
//! acceptor is given, its request heads bounded in time (slowloris), and the peer's address
//! handed to the router as an [`Peer`] extension. On loopback the console and the metrics
//! address answer only requests for a loopback host from their own origin
//! ([`super::rebinding`]); the MCP endpoint has rmcp's own `Host`/`Origin` checks.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Extension;

use super::limits::{Admission, Transport};

/// The address a request came from.
#[derive(Debug, Clone, Copy)]
pub struct Peer(pub SocketAddr);

/// Serves `router` on `listener` until the task is dropped; `transport` says which listener it
/// is (in the admission's counts and in logs).
pub(super) async fn serve(
    transport: Transport,
    listener: tokio::net::TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    router: axum::Router,
    admission: Arc<Admission>,
) {
    let guarded = matches!(transport, Transport::Console | Transport::Metrics)
        && listener
            .local_addr()
            .is_ok_and(|addr| addr.ip().is_loopback());
    let router = if guarded {
        router.layer(axum::middleware::from_fn(super::rebinding::loopback_only))
    } else {
        router
    };
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                super::limits::accept_failed(&e).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let what = transport.as_str();
        let Ok(slot) = admission.admit(transport, Some(peer.ip())) else {
            tracing::warn!(%peer, what, "connection refused: too many connections");
            continue;
        };
        let header_timeout = admission.limits().console_header_timeout;
        let service = hyper_util::service::TowerToHyperService::new(
            router.clone().layer(Extension(Peer(peer))),
        );
        let tls = tls.clone();
        tokio::spawn(async move {
            let _slot = slot;
            // A client that sends its request's head slowly (slowloris) is closed.
            let mut http = hyper::server::conn::http1::Builder::new();
            http.timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(header_timeout);
            let served = match tls {
                None => {
                    http.serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await
                }
                Some(acceptor) => {
                    let Some(stream) = super::tls::accept(&acceptor, stream, &peer).await else {
                        return;
                    };
                    http.serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await
                }
            };
            if let Err(e) = served {
                tracing::debug!(%peer, what = transport.as_str(), error = %e, "connection ended");
            }
        });
    }
}
