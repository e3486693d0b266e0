//! The OTLP exporter's HTTP client: hyper, already in the host for the console and metrics, on a
//! small runtime of the exporter's own, so exporting needs no second HTTP stack and works from the
//! SDK's batch thread, which is outside any async runtime.

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

/// Sends the exporter's requests on `runtime`, each bounded by `timeout`.
#[derive(Debug, Clone)]
pub(super) struct Export {
    client: Client<HttpConnector, Full<Bytes>>,
    runtime: tokio::runtime::Handle,
    timeout: Duration,
}

impl Export {
    pub(super) fn new(runtime: tokio::runtime::Handle, timeout: Duration) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(timeout));
        connector.set_nodelay(true);
        Export {
            client: Client::builder(TokioExecutor::new()).build(connector),
            runtime,
            timeout,
        }
    }

    async fn send(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let client = self.client.clone();
        let timeout = self.timeout;
        let sent = self.runtime.spawn(async move {
            tokio::time::timeout(timeout, async move {
                let response = client.request(request.map(Full::new)).await?;
                let (parts, body) = response.into_parts();
                let body = Limited::new(body, MAX_RESPONSE).collect().await?.to_bytes();
                Ok::<_, HttpError>(Response::from_parts(parts, body))
            })
            .await
            .map_err(|_| HttpError::from(format!("no answer within {timeout:?}")))?
        });
        sent.await?
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
