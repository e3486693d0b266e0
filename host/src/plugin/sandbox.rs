//! The locked-down WASI a plugin gets, and the per-store state the host keeps for it.
//!
//! No environment variables, no arguments, no stdin, no sockets, no name lookup, and no
//! directory but the read-only ones the deployment grants; for a plugin of API 0.3, HTTP
//! requests the host sends to the hosts its entry grants ([`super::net`]). Stdout and stderr are written to the
//! host log line by line, tagged with the plugin's name. Clocks and random are left as WASI
//! provides them.

use std::sync::Arc;
use std::time::Instant;

use wasmtime::component::ResourceTable;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::LogLevel;
use super::limits::{Limits, Stop};
use super::net::NetHooks;
use super::shared::{MAX_LOG_LINE, Shared};
use crate::waterfall::Question;

/// The host side of one plugin store.
pub(crate) struct PluginState {
    wasi: Option<WasiCtx>,
    table: ResourceTable,
    pub(crate) shared: Arc<Shared>,
    pub(crate) question: Option<Question>,
    pub(crate) limits: Limits,
    pub(crate) deadline: Instant,
    /// For a run on an async worker: when it must give the worker back.
    pub(crate) budget: Option<Instant>,
    /// The epoch ticks this run has seen (deadline callbacks since it was armed).
    pub(crate) ticks: u32,
    pub(crate) stopped: Option<Stop>,
    /// `verify-signature` checks made in this run ([`super::secret::MAX_CHECKS`]).
    pub(crate) signature_checks: usize,
    /// Whether the question being decided may wait for a callback (API 0.3's `can-wait`).
    pub(crate) can_wait: bool,
    /// `wasi:http`'s state, for a plugin of an API version that may reach out.
    http: Option<(wasmtime_wasi_http::WasiHttpCtx, NetHooks)>,
}

impl wasmtime_wasi_http::WasiHttpView for PluginState {
    fn http(&mut self) -> wasmtime_wasi_http::WasiHttpCtxView<'_> {
        let (shared, deadline) = (&self.shared, self.deadline);
        let question = self.question.as_ref().map(|q| q.id());
        let (ctx, hooks) = self.http.get_or_insert_with(|| {
            let mut hooks = NetHooks::new(shared.clone());
            hooks.begin(deadline, question);
            (wasmtime_wasi_http::WasiHttpCtx::new(), hooks)
        });
        wasmtime_wasi_http::WasiHttpCtxView {
            ctx,
            table: &mut self.table,
            hooks,
        }
    }
}

impl PluginState {
    /// A run for the store's question starts, to end by `deadline`: a new question's requests
    /// are counted afresh.
    pub(crate) fn begin_requests(&mut self, deadline: Instant) {
        let question = self.question.as_ref().map(|q| q.id());
        if let Some((_, hooks)) = &mut self.http {
            hooks.begin(deadline, question);
        }
    }
}

impl WasiView for PluginState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        // A component that imports no WASI never gets here; should one, it sees a sandbox with
        // nothing granted rather than a host panic.
        let shared = &self.shared;
        let wasi = self.wasi.get_or_insert_with(|| locked_down(shared).build());
        WasiCtxView {
            ctx: wasi,
            table: &mut self.table,
        }
    }
}

/// The WASI builder every plugin starts from: log lines for stdout and stderr, no network.
fn locked_down(shared: &Arc<Shared>) -> WasiCtxBuilder {
    let mut wasi = WasiCtxBuilder::new();
    wasi.stdout(LogOutput {
        shared: shared.clone(),
        level: LogLevel::Info,
    })
    .stderr(LogOutput {
        shared: shared.clone(),
        level: LogLevel::Warn,
    })
    .allow_tcp(false)
    .allow_udp(false)
    .allow_ip_name_lookup(false)
    .socket_addr_check(|_, _| Box::pin(async { false }))
    // Decisions run on blocking threads, so file access may block them directly.
    .allow_blocking_current_thread(true);
    wasi
}

/// The plugin's WASI, with the read-only directories its deployment grants; an error names the
/// grant that could not be opened.
pub(crate) fn wasi_ctx(shared: &Arc<Shared>) -> Result<WasiCtx, String> {
    let mut wasi = locked_down(shared);
    for (guest, host) in &shared.spec.files {
        wasi.preopened_dir(host, guest, FsPerms::ReadOnly)
            .map_err(|e| format!("files.{guest:?} = {:?}: {e:#}", host.display().to_string()))?;
    }
    Ok(wasi.build())
}

impl PluginState {
    /// A store's state. The WASI context (seeded randomness, opened directories) is built only
    /// for a component that imports WASI: a pure gate's fresh instance skips it.
    pub(crate) fn new(shared: Arc<Shared>) -> Result<PluginState, String> {
        let wasi = if shared.imports_wasi {
            Some(wasi_ctx(&shared)?)
        } else {
            None
        };
        Ok(PluginState {
            wasi,
            table: ResourceTable::new(),
            limits: Limits {
                memory_cap: usize::try_from(shared.spec.memory_bytes).unwrap_or(usize::MAX),
                memory_hit: false,
            },
            shared,
            question: None,
            deadline: Instant::now(),
            budget: None,
            ticks: 0,
            stopped: None,
            signature_checks: 0,
            can_wait: false,
            http: None,
        })
    }
}

/// A guest's stdout or stderr, as host log lines.
#[derive(Clone)]
struct LogOutput {
    shared: Arc<Shared>,
    level: LogLevel,
}

impl IsTerminal for LogOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for LogOutput {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(LineWriter {
            out: self.clone(),
            buf: Vec::new(),
        })
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        // Only WASI 0.2 guests are served; a 0.3 stream would be discarded.
        Box::new(tokio::io::sink())
    }
}

struct LineWriter {
    out: LogOutput,
    buf: Vec<u8>,
}

impl LineWriter {
    fn emit(&mut self, upto: usize) {
        let line: Vec<u8> = self.buf.drain(..upto).collect();
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end_matches(['\n', '\r']);
        self.out.shared.log(self.out.level, text);
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for LineWriter {
    async fn ready(&mut self) {}
}

impl OutputStream for LineWriter {
    fn write(&mut self, bytes: bytes::Bytes) -> StreamResult<()> {
        self.buf.extend_from_slice(&bytes);
        while let Some(pos) = self.buf.iter().position(|&b| b == b'\n') {
            self.emit(pos + 1);
        }
        if self.buf.len() > MAX_LOG_LINE {
            let all = self.buf.len();
            self.emit(all);
        }
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        if !self.buf.is_empty() {
            let all = self.buf.len();
            self.emit(all);
        }
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(64 << 10)
    }
}
