//! The OTLP exporter's HTTP client: hyper, already in the host for the console and metrics, so
//! exporting needs no second HTTP stack. It runs inside the exporting thread's own runtime.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use opentelemetry_http::{HttpClient, HttpError, Request, Response};

/// A collector's answer is a small status message; anything larger is refused.
const MAX_RESPONSE: usize = 64 * 1024;

/// Sends the exporter's requests, each bounded by `timeout`.
#[derive(Debug, Clone)]
pub(super) struct Export {
    client: Client<HttpConnector, Full<Bytes>>,
    timeout: Duration,
}

impl Export {
    pub(super) fn new(timeout: Duration) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(timeout));
        connector.set_nodelay(true);
        Export {
            // Exports are a second or more apart and the runtime only runs during one: an idle
            // pooled connection would go unwatched, so each export opens its own.
            client: Client::builder(TokioExecutor::new())
                .pool_max_idle_per_host(0)
                .build(connector),
            timeout,
        }
    }

    async fn send(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let timeout = self.timeout;
        tokio::time::timeout(timeout, async {
            let response = self.client.request(request.map(Full::new)).await?;
            let (parts, body) = response.into_parts();
            let body = Limited::new(body, MAX_RESPONSE).collect().await?.to_bytes();
            Ok::<_, HttpError>(Response::from_parts(parts, body))
        })
        .await
        .map_err(|_| HttpError::from(format!("no answer within {timeout:?}")))?
    }
}

impl HttpClient for Export {
    // `HttpClient` is declared with `async_trait`; this is the signature it expands to.
    fn send_bytes<'life0, 'async_trait>(
        &'life0 self,
        request: Request<Bytes>,
    ) -> Pin<Box<dyn Future<Output = Result<Response<Bytes>, HttpError>> + Send + 'async_trait>>
    where
        'life0: 'async_trait,
        Self: 'async_trait,
    {
        Box::pin(self.send(request))
    }
}
