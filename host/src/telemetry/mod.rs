//! OpenTelemetry traces of the host's decisions, exported over OTLP/HTTP when the deployment says
//! `[telemetry] otlp-endpoint`. Off by default.
//!
//! [`Telemetry`] is a [`DecisionObserver`]: each settled question is copied into a record and
//! pushed on a bounded queue (the deciding path's whole cost); a thread of its own turns records
//! into spans (`spans.rs`) and the SDK's batch processor exports them through hyper (`http.rs`).
//! A full queue drops the trace, never delays a decision. A caller's W3C trace context
//! (`_meta.traceparent`, `TRACEPARENT`) makes the request span its child.

mod http;
mod spans;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;

use crate::service::observe::{DecisionObserver, Settlement};

pub use spans::{attribute, span};

/// The service name spans carry when `[telemetry] service-name` is not set.
pub const DEFAULT_SERVICE_NAME: &str = "approval-host";

/// The environment variable a harness passes its trace in to a hook it runs (W3C
/// `traceparent` form), as the OpenTelemetry conventions for environment carriers name it.
pub const TRACEPARENT_ENV: &str = "TRACEPARENT";

/// The path OTLP/HTTP collectors take traces on, added to an endpoint given without it.
pub const TRACES_PATH: &str = "/v1/traces";

/// Traces waiting for the exporting thread beyond this many are dropped (and counted).
const QUEUE: usize = 8192;

/// How long one export may take before it is abandoned.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// `[telemetry]`: where traces go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TelemetryConfig {
    /// The collector's OTLP/HTTP traces URL (`http://host:4318/v1/traces`).
    pub traces_url: String,
    /// The `service.name` resource attribute.
    pub service_name: String,
}

/// Why an `otlp-endpoint` is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EndpointError {
    /// Not a URL.
    #[error("{0:?} is not a URL ({1})")]
    NotUrl(String, String),
    /// Another scheme than `http`.
    #[error(
        "{0:?}: only http:// is supported (OTLP over HTTP with protobuf); run the collector on this machine or beside it and send to it in the clear, or terminate TLS in front of it"
    )]
    Scheme(String),
    /// Carries a user name, password, query or fragment.
    #[error("{0:?}: an endpoint takes no user, password, query or fragment")]
    Extra(String),
}

impl TelemetryConfig {
    /// The configuration for a collector at `endpoint` (its base URL, as
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` takes it, or its full traces URL).
    ///
    /// # Errors
    /// [`EndpointError`] when `endpoint` is not a plain `http://` URL.
    pub fn new(endpoint: &str, service_name: Option<&str>) -> Result<Self, EndpointError> {
        let url = url::Url::parse(endpoint)
            .map_err(|e| EndpointError::NotUrl(endpoint.to_owned(), e.to_string()))?;
        if url.scheme() != "http" || url.host().is_none() {
            return Err(EndpointError::Scheme(endpoint.to_owned()));
        }
        if !url.username().is_empty()
            || url.password().is_some()
            || url.query().is_some()
            || url.fragment().is_some()
        {
            return Err(EndpointError::Extra(endpoint.to_owned()));
        }
        let mut traces = url.to_string();
        if !url.path().ends_with(TRACES_PATH) {
            traces = format!("{}{TRACES_PATH}", traces.trim_end_matches('/'));
        }
        Ok(TelemetryConfig {
            traces_url: traces,
            service_name: service_name.unwrap_or(DEFAULT_SERVICE_NAME).to_owned(),
        })
    }
}

/// Why tracing could not start.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// The exporter or its runtime could not be built.
    #[error("[telemetry]: could not start the trace exporter: {0}")]
    Start(String),
}

/// What the exporting thread is sent.
enum Message {
    Trace(Box<spans::Record>),
    /// Stop after the traces queued before this.
    Stop,
}

/// The host's tracing: see the module documentation.
pub struct Telemetry {
    queue: SyncSender<Message>,
    dropped: AtomicU64,
    worker: Mutex<Option<std::thread::JoinHandle<()>>>,
    provider: SdkTracerProvider,
    /// The exporter's own runtime; shut down without waiting when the telemetry goes.
    runtime: Mutex<Option<tokio::runtime::Runtime>>,
}

impl std::fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Telemetry")
            .field("dropped", &self.dropped)
            .finish_non_exhaustive()
    }
}

impl Telemetry {
    /// Starts exporting to `config`'s collector. Nothing is sent until a question settles; a
    /// collector that is down costs failed exports on the exporter's thread, never a decision.
    ///
    /// # Errors
    /// [`TelemetryError::Start`] when the exporter, its runtime or its thread cannot be made.
    pub fn start(config: &TelemetryConfig) -> Result<Arc<Telemetry>, TelemetryError> {
        let start = |e: &dyn std::fmt::Display| TelemetryError::Start(e.to_string());
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("approval-otlp")
            .enable_all()
            .build()
            .map_err(|e| start(&e))?;
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(http::Export::new(runtime.handle().clone(), EXPORT_TIMEOUT))
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(config.traces_url.clone())
            .with_timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(|e| start(&e))?;
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(
                Resource::builder()
                    .with_service_name(config.service_name.clone())
                    .build(),
            )
            .build();
        let tracer = provider.tracer("approval-host");
        let (queue, records) = std::sync::mpsc::sync_channel(QUEUE);
        let worker = std::thread::Builder::new()
            .name("approval-traces".to_owned())
            .spawn(move || {
                while let Ok(Message::Trace(record)) = records.recv() {
                    spans::emit(&tracer, &record);
                }
            })
            .map_err(|e| start(&e))?;
        Ok(Arc::new(Telemetry {
            queue,
            dropped: AtomicU64::new(0),
            worker: Mutex::new(Some(worker)),
            provider,
            runtime: Mutex::new(Some(runtime)),
        }))
    }

    /// Traces dropped because the exporting thread fell behind.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Exports every trace of a question settled so far and stops; later questions are not
    /// traced. Blocks (up to the export timeout): call it off the async runtime.
    pub fn shutdown(&self) {
        let worker = self.worker.lock().unwrap_or_else(|p| p.into_inner()).take();
        let Some(worker) = worker else { return };
        let _ = self.queue.send(Message::Stop);
        let _ = worker.join();
        if let Err(e) = self.provider.shutdown() {
            tracing::warn!(error = %e, "exporting the last traces failed");
        }
        if let Some(runtime) = self
            .runtime
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            runtime.shutdown_background();
        }
    }
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Some(runtime) = self
            .runtime
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            runtime.shutdown_background();
        }
    }
}

impl DecisionObserver for Telemetry {
    fn settled(&self, settlement: &Settlement<'_>) {
        let Some(record) = spans::Record::of(settlement) else {
            return;
        };
        match self.queue.try_send(Message::Trace(Box::new(record))) {
            Ok(()) | Err(TrySendError::Disconnected(_)) => {}
            Err(TrySendError::Full(_)) => {
                if self.dropped.fetch_add(1, Ordering::Relaxed) == 0 {
                    tracing::warn!(
                        "the trace exporter fell behind; traces are dropped until it catches up"
                    );
                }
            }
        }
    }

    fn wants_detail(&self) -> bool {
        true
    }
}
