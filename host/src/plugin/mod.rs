//! Answerers and gates as sandboxed WebAssembly components.
//!
//! A [`PluginHost`] owns one wasmtime engine (component model, Cranelift, epoch interruption with a
//! running ticker) and the linker for each plugin API version it serves. [`PluginHost::load`] reads
//! a component, checks its pinned digest, compiles it and pre-links it against the world it was
//! built for, so a component that does not fit is refused at load, never at decision time. A loaded
//! [`Plugin`] is a waterfall [`Listener`](crate::waterfall::Listener): each decision runs on a
//! blocking thread under a deadline, a memory cap and a stack limit, in an instance that is dropped
//! after any failure (and, with `isolation = "per-decision"`, after every decision). Any failure
//! settles the request `unavailable` and stops the waterfall.
//!
//! Modules: [`engine`] (engine and ticker), `instance` (a loaded plugin and one decision run),
//! [`pending`] (questions parked while a plugin waits for its callback), `runner` (the threads
//! plugins run on off the async workers),
//! `limits` (caps and failure classes), `sandbox` (the WASI a plugin gets), `v0_1` and `v0_2` (the
//! API bindings, one per served version, behind the `api` dispatch), [`inspect`] (what a component
//! imports and exports, for `approval-host check`), [`shadow`] (versions tried on live traffic
//! without a say).

mod api;
pub mod cache;
pub mod componentize;
pub mod engine;
mod grant;
pub mod inspect;
mod instance;
mod limits;
pub mod mount;
pub mod net;
pub mod pending;
mod runner;
mod sandbox;
pub mod secret;
pub mod shadow;
mod shared;
pub mod slot;
pub mod spec;
mod v0_1;
mod v0_2;
mod v0_3;
mod world;

pub use mount::{Mounted, PluginStatus, ReloadReport};

/// The plugin API versions this host serves (`approval:plugin@0.1.x`, `@0.2.x` and `@0.3.x`).
pub const SERVED_API_VERSIONS: [&str; 3] = api::Api::SERVED;

/// The plugin API version `approval-host new` writes skeletons for.
pub const NEWEST_API_VERSION: &str = api::Api::NEWEST.wit_version();

/// What each served plugin API version adds over the one before, newest last: `(version, [what
/// it adds])`, for `approval-host check`.
pub fn api_changes(version: &str) -> Option<(&'static str, &'static [&'static str])> {
    let api = api::Api::for_version(version)?;
    Some((api.wit_version(), api.adds()))
}
pub use instance::{INLINE_BUDGET, Plugin};
pub use slot::{Counters, QuarantinePolicy, Slot, SlotState};

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

use crate::plugin::spec::PluginSpec;
use shared::Shared;

/// Severity of a plugin's log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LogLevel {
    /// Finest detail.
    Trace,
    /// Debugging detail.
    Debug,
    /// Normal operation (and the guest's stdout).
    Info,
    /// Something unexpected (and the guest's stderr).
    Warn,
    /// A failure.
    Error,
}

/// Where plugin log lines (host `log` calls, stdout, stderr) go, tagged with the plugin's name.
pub trait LogSink: Send + Sync + 'static {
    /// Records one line.
    fn log(&self, plugin: &str, level: LogLevel, message: &str);
}

/// The default sink: the host's `tracing` log, with a `plugin` field.
#[derive(Debug, Clone, Copy, Default)]
pub struct TracingSink;

impl LogSink for TracingSink {
    fn log(&self, plugin: &str, level: LogLevel, message: &str) {
        match level {
            LogLevel::Trace => tracing::trace!(plugin, "{message}"),
            LogLevel::Debug => tracing::debug!(plugin, "{message}"),
            LogLevel::Info => tracing::info!(plugin, "{message}"),
            LogLevel::Warn => tracing::warn!(plugin, "{message}"),
            LogLevel::Error => tracing::error!(plugin, "{message}"),
        }
    }
}

/// A plugin that could not be loaded. Each names the plugin and the field at fault.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    /// The engine could not start.
    #[error("starting the WebAssembly engine: {0}")]
    Engine(String),
    /// The component file could not be read.
    #[error("plugin {name:?}: path {path:?}: {source}")]
    Read {
        /// The plugin.
        name: String,
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file's SHA-256 is not the pinned one.
    #[error(
        "plugin {name:?}: sha256: the file's digest is {actual}, but the deployment pins {expected}"
    )]
    Digest {
        /// The plugin.
        name: String,
        /// The pinned digest.
        expected: String,
        /// The file's digest.
        actual: String,
    },
    /// The file is not a component that implements a served world.
    #[error("plugin {name:?}: path {path:?}: {reason}")]
    Component {
        /// The plugin.
        name: String,
        /// The file.
        path: PathBuf,
        /// The exact mismatch.
        reason: String,
    },
    /// A granted directory could not be opened.
    #[error("plugin {name:?}: {reason}")]
    Grant {
        /// The plugin.
        name: String,
        /// Which grant and why.
        reason: String,
    },
    /// The plugin refused its `[plugin.config]` (API 0.2's `validate-config`), or failed while
    /// checking it.
    #[error("plugin {name:?}: config: {message}")]
    Config {
        /// The plugin.
        name: String,
        /// The plugin's own message, or how the check failed.
        message: String,
    },
    /// The version failed a check its deployment asks of it before it may serve (its
    /// conformance cases).
    #[error("plugin {name:?}: {why}")]
    Refused {
        /// The plugin.
        name: String,
        /// Which check and how it failed.
        why: String,
    },
}

/// Told when a plugin has to be compiled (not found in the compiled cache): the plugin's name and
/// component size; it returns what to call when the compile is over (`true` on success).
pub type CompileObserver = Arc<dyn Fn(&str, usize) -> Box<dyn FnOnce(bool)> + Send + Sync>;

struct HostInner {
    engine: Engine,
    cache: Option<cache::CompiledCache>,
    observer: std::sync::OnceLock<CompileObserver>,
    linkers: api::Linkers,
    /// Compiled components by digest, while a plugin uses them: the same bytes loaded as several
    /// plugins (one gate configured twice, a reload that keeps a plugin) are compiled once and
    /// share one copy of machine code, which keeps a deep waterfall's code in the CPU's caches.
    compiled: Mutex<HashMap<String, Weak<Component>>>,
    sink: Arc<dyn LogSink>,
    /// The questions its plugins park while they wait for a callback.
    waits: pending::Waits,
    /// The threads plugins run on off the async workers.
    runner: runner::Runner,
    _ticker: engine::Ticker,
}

/// The WebAssembly plugin host: one engine, shared by every plugin it loads.
#[derive(Clone)]
pub struct PluginHost {
    inner: Arc<HostInner>,
}

impl std::fmt::Debug for PluginHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginHost").finish_non_exhaustive()
    }
}

/// Lowercase hex SHA-256 of `bytes`: a component's version digest.
pub fn digest(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

impl PluginHost {
    /// A host whose plugins log through `tracing`.
    pub fn new() -> Result<Self, PluginError> {
        Self::with_log_sink(Arc::new(TracingSink))
    }

    /// A host whose plugins log to `sink`.
    pub fn with_log_sink(sink: Arc<dyn LogSink>) -> Result<Self, PluginError> {
        Self::build(sink, None, engine::MAX_INSTANCES)
    }

    /// A host that keeps compiled components in `cache` and logs to `sink`.
    pub fn with_cache(
        sink: Arc<dyn LogSink>,
        cache: cache::CompiledCache,
    ) -> Result<Self, PluginError> {
        Self::build(sink, Some(cache), engine::MAX_INSTANCES)
    }

    /// [`PluginHost::with_cache`] for a process that answers one question with `plugins` plugins
    /// and exits (a hook): room for [`engine::one_question_instances`] instances at once rather
    /// than a server's thousand, whose reservation costs such a process more than its plugins
    /// do. It reads the same compiled cache.
    pub fn for_one_question(
        sink: Arc<dyn LogSink>,
        cache: cache::CompiledCache,
        plugins: usize,
    ) -> Result<Self, PluginError> {
        Self::build(sink, Some(cache), engine::one_question_instances(plugins))
    }

    fn build(
        sink: Arc<dyn LogSink>,
        cache: Option<cache::CompiledCache>,
        instances: u32,
    ) -> Result<Self, PluginError> {
        let engine = Engine::new(&engine::config(instances))
            .map_err(|e| PluginError::Engine(format!("{e:#}")))?;
        let linkers = api::Linkers::new(&engine);
        let ticker = engine::Ticker::start(engine.clone())
            .map_err(|e| PluginError::Engine(format!("epoch ticker: {e}")))?;
        Ok(PluginHost {
            inner: Arc::new(HostInner {
                engine,
                cache,
                observer: std::sync::OnceLock::new(),
                linkers,
                compiled: Mutex::default(),
                sink,
                waits: pending::Waits::default(),
                runner: runner::Runner::new(runner::Runner::default_size()),
                _ticker: ticker,
            }),
        })
    }

    /// Reports every compile this host has to do (a cache miss) to `observer`, e.g. for a progress
    /// line. Set once; later calls are ignored.
    pub fn observe_compiles(&self, observer: CompileObserver) {
        let _ = self.inner.observer.set(observer);
    }

    /// The questions this host's plugins park while they wait for a callback, which the
    /// callback endpoint settles.
    pub fn waits(&self) -> &pending::Waits {
        &self.inner.waits
    }

    /// The engine plugins are compiled for.
    pub fn engine(&self) -> &Engine {
        &self.inner.engine
    }

    /// How many compiled components the host's live plugins hold: plugins loaded from the same
    /// bytes share one.
    pub fn compiled_components(&self) -> usize {
        let compiled = self
            .inner
            .compiled
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        compiled
            .values()
            .filter(|code| code.strong_count() > 0)
            .count()
    }

    /// The compiled component of `digest`, if a live plugin was loaded from those bytes.
    fn compiled(&self, digest: &str) -> Option<Arc<Component>> {
        let compiled = self
            .inner
            .compiled
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        compiled.get(digest).and_then(Weak::upgrade)
    }

    /// What the component `bytes` imports and exports, read from the code this host compiled for
    /// them when a plugin of those bytes is loaded now (`check` after `load_bytes`), else compiled
    /// here: a large component (Python's, 18 MB) takes half a minute to compile in a debug build.
    pub fn inspect(&self, bytes: &[u8]) -> Result<inspect::Inspection, String> {
        let known = self.compiled(&digest(bytes));
        inspect::inspect_with(self.engine(), bytes, || match known {
            Some(code) => Ok(Component::clone(&code)),
            None => Component::new(self.engine(), bytes),
        })
    }

    /// Shares `component` under `digest` with later loads (the first one kept wins).
    fn remember(&self, digest: &str, component: &Component) -> Arc<Component> {
        let mut compiled = self
            .inner
            .compiled
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        compiled.retain(|_, code| code.strong_count() > 0);
        if let Some(code) = compiled.get(digest).and_then(Weak::upgrade) {
            return code;
        }
        let code = Arc::new(component.clone());
        compiled.insert(digest.to_owned(), Arc::downgrade(&code));
        code
    }

    /// Reads, verifies, compiles and pre-links the plugin `spec` names.
    pub fn load(&self, spec: &PluginSpec) -> Result<Arc<Plugin>, PluginError> {
        let bytes = std::fs::read(&spec.path).map_err(|source| PluginError::Read {
            name: spec.name.clone(),
            path: spec.path.clone(),
            source,
        })?;
        self.load_bytes(spec, &bytes)
    }

    /// [`PluginHost::load`] for a component already in memory (`spec.path` names it in errors).
    pub fn load_bytes(&self, spec: &PluginSpec, bytes: &[u8]) -> Result<Arc<Plugin>, PluginError> {
        let actual = digest(bytes);
        if let Some(expected) = &spec.sha256
            && *expected != actual
        {
            return Err(PluginError::Digest {
                name: spec.name.clone(),
                expected: expected.clone(),
                actual,
            });
        }
        let component_error = |reason: String| PluginError::Component {
            name: spec.name.clone(),
            path: spec.path.clone(),
            reason,
        };
        let engine = self.engine();
        let known = self.compiled(&actual);
        let inspection = inspect::inspect_with(engine, bytes, || {
            if let Some(code) = &known {
                return Ok(Component::clone(code));
            }
            match &self.inner.cache {
                Some(cache) => {
                    let observer = self.inner.observer.get().cloned();
                    let (component, source) =
                        cache.load_observed(engine, &actual, bytes, || match &observer {
                            Some(o) => o(&spec.name, bytes.len()),
                            None => Box::new(|_| {}),
                        })?;
                    tracing::debug!(plugin = %spec.name, ?source, "component ready");
                    Ok(component)
                }
                None => Component::new(engine, bytes),
            }
        })
        .map_err(component_error)?;
        let code = known.unwrap_or_else(|| self.remember(&actual, &inspection.component));
        let api = api::Api::for_version(&inspection.api_version).ok_or_else(|| {
            component_error(format!(
                "is built against {}@{}; this host serves {}",
                api::PACKAGE,
                inspection.api_version,
                api::Api::SERVED
                    .map(|v| format!("{}@{v}.x", api::PACKAGE))
                    .join(", ")
            ))
        })?;
        if !spec.allow_hosts.is_empty() && !api.reaches_out() {
            return Err(PluginError::Grant {
                name: spec.name.clone(),
                reason: format!(
                    "allow-hosts: the plugin is built against {}@{}, which cannot send requests (0.3 can)",
                    api::PACKAGE,
                    inspection.api_version
                ),
            });
        }
        if spec.wait.is_some() && !api.reaches_out() {
            return Err(PluginError::Grant {
                name: spec.name.clone(),
                reason: format!(
                    "wait: the plugin is built against {}@{}, which cannot answer pending (0.3 can)",
                    api::PACKAGE,
                    inspection.api_version
                ),
            });
        }
        // WASI's blocking calls re-enter the async runtime, which they cannot do from an async
        // worker: only a component that imports nothing but the host interface runs in place.
        let inline = inspection
            .imports
            .iter()
            .all(|i| i.starts_with(api::PACKAGE));
        let linker = self
            .inner
            .linkers
            .get(api, !inline)
            .map_err(|e| PluginError::Engine(format!("linking the plugin API: {e:#}")))?;
        let template = api::Template::new(api, linker, &inspection.component).map_err(|e| {
            component_error(format!("does not implement {}: {e:#}", inspect::WORLD))
        })?;
        let shared = Arc::new(Shared {
            spec: spec.clone(),
            sink: self.inner.sink.clone(),
            imports_wasi: !inline,
        });
        // Open the grants once now, so a bad grant is a load error, not a decision failure.
        sandbox::wasi_ctx(&shared).map_err(|reason| PluginError::Grant {
            name: spec.name.clone(),
            reason,
        })?;
        let plugin = Arc::new(Plugin::new(
            self.clone(),
            shared,
            actual.into(),
            inspection.api_version,
            template,
            code,
            // A plugin that may wait answers off the workers: its answer is not one to give in
            // place.
            !inline || spec.wait.is_some(),
        ));
        plugin
            .validate_config()
            .map_err(|message| PluginError::Config {
                name: spec.name.clone(),
                message,
            })?;
        Ok(plugin)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The served version `bytes` are built against, and whether they import WASI.
    fn kind(host: &PluginHost, bytes: &[u8]) -> (api::Api, bool) {
        let inspection = host.inspect(bytes).unwrap();
        let wasi = inspection.imports.iter().any(|i| i.starts_with("wasi:"));
        (
            api::Api::for_version(&inspection.api_version).unwrap(),
            wasi,
        )
    }

    #[test]
    fn a_linker_is_built_for_what_the_loaded_plugins_import_and_no_more() {
        let host = PluginHost::new().unwrap();
        assert_eq!(
            host.inner.linkers.built(),
            [],
            "nothing built before a load"
        );
        let mut expected = Vec::new();
        for (name, bytes) in [
            ("allow-tools", crate::bundled::ALLOW_TOOLS),
            ("reject-all", crate::bundled::REJECT_ALL),
            ("sandbox-probe", crate::bundled::SANDBOX_PROBE),
            ("http-probe", crate::bundled::HTTP_PROBE),
        ] {
            let spec = PluginSpec::new(name, name, spec::Role::Gate);
            host.load_bytes(&spec, bytes)
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            let kind = kind(&host, bytes);
            if !expected.contains(&kind) {
                expected.push(kind);
            }
            let mut built = host.inner.linkers.built();
            let mut want = expected.clone();
            let order = |(api, wasi): &(api::Api, bool)| (*api as usize, *wasi);
            built.sort_by_key(order);
            want.sort_by_key(order);
            assert_eq!(built, want, "after loading {name}");
        }
        // The pure gates import only the plugin API; the probes import WASI (and `wasi:http`).
        assert!(!kind(&host, crate::bundled::ALLOW_TOOLS).1);
        assert!(kind(&host, crate::bundled::SANDBOX_PROBE).1);
        assert_eq!(
            kind(&host, crate::bundled::HTTP_PROBE),
            (api::Api::V0_3, true)
        );
    }
}
