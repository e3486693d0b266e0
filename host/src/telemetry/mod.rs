//! OpenTelemetry traces of the host's decisions, exported over OTLP/HTTP when the deployment says
//! `[telemetry] otlp-endpoint`. Off by default.
//!
//! [`Telemetry`] is a [`DecisionObserver`]: each settled question is copied into a shared byte
//! buffer (`record.rs`), the deciding path's whole cost (no allocation, no thread woken). One exporting
//! thread, in the idle scheduling class, collects the queue every few milliseconds, turns records
//! into spans (`spans.rs`) and exports them in batches with the OTLP exporter through hyper
//! (`http.rs`) on a runtime of its own. A full queue drops the trace, never delays a decision. A
//! caller's W3C trace context (`_meta.traceparent`, `TRACEPARENT`) makes the request span its
//! child, and its sampling decision is kept.

mod http;
mod record;
mod spans;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{SpanData, SpanExporter as _};

use crate::service::observe::{DecisionObserver, Settlement};

pub use spans::{FAILED, NEXT, attribute, span};

/// The service name spans carry when `[telemetry] service-name` is not set.
pub const DEFAULT_SERVICE_NAME: &str = "approval-host";

/// The environment variable a harness passes its trace in to a hook it runs (W3C
/// `traceparent` form), as the OpenTelemetry conventions for environment carriers name it.
pub const TRACEPARENT_ENV: &str = "TRACEPARENT";

/// The path OTLP/HTTP collectors take traces on, added to an endpoint given without it.
pub const TRACES_PATH: &str = "/v1/traces";

/// Records waiting for the exporting thread beyond this many bytes are dropped (and counted):
/// some ten thousand questions.
const QUEUE_BYTES: usize = 4 << 20;

/// How often the exporting thread collects the queue.
const POLL: Duration = Duration::from_millis(20);

/// Spans are exported once this many are waiting, or [`LINGER`] after the last export.
const BATCH: usize = 512;
const LINGER: Duration = Duration::from_secs(1);

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

/// What the deciding threads and the exporting thread share.
struct Shared {
    queue: Mutex<Vec<u8>>,
    stopping: AtomicBool,
    dropped: AtomicU64,
    exported: AtomicU64,
    failed: AtomicU64,
}

/// The host's tracing: see the module documentation.
pub struct Telemetry {
    shared: Arc<Shared>,
    worker: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl std::fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Telemetry")
            .field("dropped", &self.dropped())
            .finish_non_exhaustive()
    }
}

impl Telemetry {
    /// Starts exporting to `config`'s collector. Nothing is sent until a question settles; a
    /// collector that is down costs failed exports on the exporting thread, never a decision.
    ///
    /// # Errors
    /// [`TelemetryError::Start`] when the exporter, its runtime or its thread cannot be made.
    pub fn start(config: &TelemetryConfig) -> Result<Arc<Telemetry>, TelemetryError> {
        let start = |e: &dyn std::fmt::Display| TelemetryError::Start(e.to_string());
        let mut exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(http::Export::new(EXPORT_TIMEOUT))
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(config.traces_url.clone())
            .with_timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(|e| start(&e))?;
        exporter.set_resource(
            &Resource::builder()
                .with_service_name(config.service_name.clone())
                .build(),
        );
        // A current-thread runtime: the exporting thread drives its own I/O, so all of tracing's
        // work stays on that one idle-class thread.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| start(&e))?;
        let shared = Arc::new(Shared {
            queue: Mutex::new(Vec::with_capacity(64 << 10)),
            stopping: AtomicBool::new(false),
            dropped: AtomicU64::new(0),
            exported: AtomicU64::new(0),
            failed: AtomicU64::new(0),
        });
        let worker = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("approval-traces".to_owned())
                .spawn(move || export_loop(&shared, &exporter, &runtime))
                .map_err(|e| start(&e))?
        };
        Ok(Arc::new(Telemetry {
            shared,
            worker: Mutex::new(Some(worker)),
        }))
    }

    /// Questions whose trace was dropped because the exporting thread fell behind.
    pub fn dropped(&self) -> u64 {
        self.shared.dropped.load(Ordering::Relaxed)
    }

    /// Spans the collector accepted, and spans lost to failed exports.
    pub fn exported(&self) -> (u64, u64) {
        (
            self.shared.exported.load(Ordering::Relaxed),
            self.shared.failed.load(Ordering::Relaxed),
        )
    }

    /// Exports every trace of a question settled so far and stops; later questions are not
    /// traced. Blocks (up to the export timeout): call it off the async runtime.
    pub fn shutdown(&self) {
        let worker = self.worker.lock().unwrap_or_else(|p| p.into_inner()).take();
        let Some(worker) = worker else { return };
        self.shared.stopping.store(true, Ordering::Release);
        worker.thread().unpark();
        let _ = worker.join();
    }
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        // The thread ends at its next look; what it holds is not waited for.
        self.shared.stopping.store(true, Ordering::Release);
    }
}

/// The exporting thread: collects the queue every [`POLL`], exports in batches, and once
/// stopping, exports what is left and ends.
fn export_loop(
    shared: &Shared,
    exporter: &opentelemetry_otlp::SpanExporter,
    runtime: &tokio::runtime::Runtime,
) {
    crate::idle::lower_priority();
    let spans = spans::Spans::new();
    let mut batch: Vec<SpanData> = Vec::new();
    let mut records = Vec::with_capacity(64 << 10);
    let mut last_export = Instant::now();
    loop {
        std::thread::park_timeout(POLL);
        let stopping = shared.stopping.load(Ordering::Acquire);
        std::mem::swap(
            &mut records,
            &mut *shared.queue.lock().unwrap_or_else(|p| p.into_inner()),
        );
        for record in record::decode(&records) {
            spans.of(&record, &mut batch);
        }
        records.clear();
        let due = batch.len() >= BATCH || last_export.elapsed() >= LINGER;
        if !batch.is_empty() && (stopping || due) {
            let n = batch.len() as u64;
            match runtime.block_on(exporter.export(std::mem::take(&mut batch))) {
                Ok(()) => shared.exported.fetch_add(n, Ordering::Relaxed),
                Err(e) => {
                    tracing::warn!(error = %e, spans = n, "exporting traces failed");
                    shared.failed.fetch_add(n, Ordering::Relaxed)
                }
            };
            last_export = Instant::now();
        }
        if stopping {
            break;
        }
    }
    let _ = exporter.shutdown();
}

impl DecisionObserver for Telemetry {
    fn settled(&self, settlement: &Settlement<'_>) {
        if settlement.detail.is_none() {
            return;
        }
        let mut queue = self.shared.queue.lock().unwrap_or_else(|p| p.into_inner());
        if queue.len() < QUEUE_BYTES {
            record::encode(settlement, &mut queue);
            return;
        }
        drop(queue);
        if self.shared.dropped.fetch_add(1, Ordering::Relaxed) == 0 {
            tracing::warn!(
                "the trace exporter fell behind; traces are dropped until it catches up"
            );
        }
    }

    fn wants_detail(&self) -> bool {
        true
    }
}
