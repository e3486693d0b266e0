//! Answerers and gates as sandboxed WebAssembly components.
//!
//! A [`PluginHost`] owns one wasmtime engine (component model, Cranelift, epoch interruption with a
//! running ticker) and the linker for each plugin API version it serves. [`PluginHost::load`]
//! reads a component, checks its pinned digest, compiles it and pre-links it against the world it
//! was built for, so a component that does not fit is refused at load, never at decision time.
//! A loaded [`Plugin`] is a waterfall [`Listener`]: each decision runs on a blocking thread under
//! a deadline, a memory cap and a stack limit, in an instance that is dropped after any failure
//! (and, with `isolation = "per-decision"`, after every decision). Any failure settles the request
//! `unavailable` and stops the waterfall.
//!
//! Modules: [`engine`] (engine and ticker), `limits` (caps and failure classes), `sandbox`
//! (the WASI a plugin gets), `v0_1` and `v0_2` (the API bindings, one per served version, behind
//! the `api` dispatch), [`inspect`] (what a component imports
//! and exports, for `approval-host check`).

mod api;
pub mod cache;
pub mod componentize;
pub mod engine;
pub mod inspect;
mod limits;
pub mod mount;
mod sandbox;
pub mod slot;
pub mod spec;
mod v0_1;
mod v0_2;

pub use mount::{Mounted, PluginStatus, ReloadReport};

/// The plugin API versions this host serves (`approval:plugin@0.1.x` and `@0.2.x`).
pub const SERVED_API_VERSIONS: [&str; 2] = api::Api::SERVED;

/// The plugin API version `approval-host new` writes skeletons for.
pub const NEWEST_API_VERSION: &str = api::Api::NEWEST.wit_version();

/// What each served plugin API version adds over the one before, newest last: `(version, [what
/// it adds])`, for `approval-host check`.
pub fn api_changes(version: &str) -> Option<(&'static str, &'static [&'static str])> {
    let api = api::Api::for_version(version)?;
    Some((api.wit_version(), api.adds()))
}
pub use slot::{Counters, QuarantinePolicy, Slot, SlotState};

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;

use sha2::{Digest, Sha256};
use wasmtime::component::Component;
use wasmtime::{Engine, Store, UpdateDeadline};

use crate::answer::Answer;
use crate::outcome::{Decision, Failure, FailureKind};
use crate::plugin::spec::{Isolation, PluginSpec, Role};
use crate::waterfall::{AnswerFuture, Listener, ListenerFuture, Question};
use limits::Stop;
use sandbox::{PluginState, Shared};

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
        Self::build(sink, None)
    }

    /// A host that keeps compiled components in `cache` and logs to `sink`.
    pub fn with_cache(
        sink: Arc<dyn LogSink>,
        cache: cache::CompiledCache,
    ) -> Result<Self, PluginError> {
        Self::build(sink, Some(cache))
    }

    fn build(
        sink: Arc<dyn LogSink>,
        cache: Option<cache::CompiledCache>,
    ) -> Result<Self, PluginError> {
        let engine =
            Engine::new(&engine::config()).map_err(|e| PluginError::Engine(format!("{e:#}")))?;
        let linkers =
            api::Linkers::new(&engine).map_err(|e| PluginError::Engine(format!("{e:#}")))?;
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
                _ticker: ticker,
            }),
        })
    }

    /// Reports every compile this host has to do (a cache miss) to `observer`, e.g. for a progress
    /// line. Set once; later calls are ignored.
    pub fn observe_compiles(&self, observer: CompileObserver) {
        let _ = self.inner.observer.set(observer);
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
        let template = api::Template::new(api, &self.inner.linkers, &inspection.component)
            .map_err(|e| {
                component_error(format!("does not implement {}: {e:#}", inspect::WORLD))
            })?;
        // WASI's blocking calls re-enter the async runtime, which they cannot do from an async
        // worker: only a component that imports nothing but the host interface runs in place.
        let inline = inspection
            .imports
            .iter()
            .all(|i| i.starts_with(api::PACKAGE));
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
        let plugin = Arc::new(Plugin {
            host: self.clone(),
            shared,
            digest: actual.into(),
            api_version: inspection.api_version,
            template,
            _code: code,
            idle: Mutex::new(Vec::new()),
            slow: AtomicBool::new(!inline),
        });
        plugin
            .validate_config()
            .map_err(|message| PluginError::Config {
                name: spec.name.clone(),
                message,
            })?;
        Ok(plugin)
    }
}

/// A store with a live instance in it.
struct Live {
    store: Store<PluginState>,
    instance: api::Instance,
}

/// Idle instances kept per plugin: decisions run in place or on a few threads, so more would
/// only hold pool slots.
const MAX_IDLE: usize = 16;

/// A loaded plugin: a pre-linked template and its idle instances.
pub struct Plugin {
    host: PluginHost,
    shared: Arc<Shared>,
    digest: Arc<str>,
    api_version: String,
    template: api::Template,
    /// Its compiled code, shared with every other plugin loaded from the same bytes.
    _code: Arc<Component>,
    idle: Mutex<Vec<Live>>,
    /// Decides off the async workers: it imports WASI, or was seen to need more than the inline
    /// budget.
    slow: AtomicBool,
}

impl std::fmt::Debug for Plugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plugin")
            .field("name", &self.shared.spec.name)
            .field("role", &self.shared.spec.role)
            .field("digest", &self.digest)
            .finish_non_exhaustive()
    }
}

fn arm(
    store: &mut Store<PluginState>,
    question: Option<&Question>,
    deadline: Instant,
    budget: Option<Instant>,
) {
    let state = store.data_mut();
    state.deadline = deadline;
    state.budget = budget;
    state.stopped = None;
    state.question = question.cloned();
    store.set_epoch_deadline(1);
}

/// Classifies an error from a store, reading why the host stopped it and whether it hit its cap.
fn failure_or_budget(store: &Store<PluginState>, err: &wasmtime::Error) -> Run {
    let state = store.data();
    if state.stopped == Some(Stop::OverBudget) {
        return Run::OverBudget;
    }
    Run::Failed(limits::classify(
        err,
        state.stopped,
        state.limits.memory_hit,
    ))
}

/// How a run that did not decide ended.
enum Run {
    /// Stopped at its inline budget: to be run again off the async workers.
    OverBudget,
    /// A contained failure.
    Failed(Failure),
}

/// How long a decision may run on an async worker before it is moved off it: a few epoch ticks.
pub const INLINE_BUDGET: std::time::Duration = std::time::Duration::from_millis(4);

impl Plugin {
    /// The plugin's name.
    pub fn name(&self) -> &str {
        &self.shared.spec.name
    }

    /// Gate or answerer.
    pub fn role(&self) -> Role {
        self.shared.spec.role
    }

    /// The spec it was loaded from.
    pub fn spec(&self) -> &PluginSpec {
        &self.shared.spec
    }

    /// The SHA-256 of the component: its version digest.
    pub fn digest(&self) -> &str {
        &self.digest
    }

    /// The digest, shared (a waterfall answer names it without copying it).
    pub(crate) fn digest_shared(&self) -> Arc<str> {
        self.digest.clone()
    }

    /// The plugin API version the component was built against, e.g. `0.1.0`.
    pub fn api_version(&self) -> &str {
        &self.api_version
    }

    /// Idle instances kept for reuse.
    pub fn idle_instances(&self) -> usize {
        self.idle.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    fn fresh(
        &self,
        question: Option<&Question>,
        deadline: Instant,
        budget: Option<Instant>,
    ) -> Result<Live, Run> {
        let state = PluginState::new(self.shared.clone()).map_err(|reason| {
            Run::Failed(Failure::error(format!("preparing the sandbox: {reason}")))
        })?;
        let mut store = Store::new(&self.host.inner.engine, state);
        store.limiter(|s| &mut s.limits);
        store.epoch_deadline_callback(|mut ctx| {
            let state = ctx.data_mut();
            let now = Instant::now();
            let stop = if state.question.as_ref().is_some_and(Question::is_cancelled) {
                Some(Stop::Cancelled)
            } else if now >= state.deadline {
                Some(Stop::Deadline)
            } else if state.budget.is_some_and(|b| now >= b) {
                Some(Stop::OverBudget)
            } else {
                None
            };
            match stop {
                Some(stop) => {
                    state.stopped = Some(stop);
                    Ok(UpdateDeadline::Interrupt)
                }
                None => Ok(UpdateDeadline::Continue(1)),
            }
        });
        // Instantiation runs guest code (start functions): armed like a call.
        arm(&mut store, question, deadline, budget);
        match self.template.instantiate(&mut store) {
            Ok(instance) => Ok(Live { store, instance }),
            Err(e) => Err(failure_or_budget(&store, &e)),
        }
    }

    /// Runs one decision on the calling thread, until `deadline`; with a `budget`, it gives up
    /// at that instant instead ([`Run::OverBudget`]), leaving the instance behind.
    fn run(
        &self,
        question: &Question,
        deadline: Instant,
        budget: Option<Instant>,
    ) -> Result<Answer, Run> {
        let reuse = self.shared.spec.isolation == Isolation::Reuse;
        let idle = if reuse {
            self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop()
        } else {
            None
        };
        let mut live = match idle {
            Some(live) => live,
            None => self.fresh(Some(question), deadline, budget)?,
        };
        arm(&mut live.store, Some(question), deadline, budget);
        let result = live.instance.decide(&mut live.store, question);
        live.store.data_mut().question = None;
        match result {
            Ok(answer) => {
                if reuse {
                    let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
                    if idle.len() < MAX_IDLE {
                        idle.push(live);
                    }
                }
                Ok(answer)
            }
            // The instance is dropped here: a stopped or failed instance is never entered again.
            Err(e) => Err(failure_or_budget(&live.store, &e)),
        }
    }

    /// Decides `question` without stalling the async workers.
    ///
    /// A decision of a plugin that imports only the host interface (no WASI: its calls never
    /// block) first runs in place, on the asking task, with an inline budget of
    /// [`INLINE_BUDGET`]: a warm plugin answers in about a microsecond, with no hand-off to another
    /// thread. A run that uses up the budget is stopped (its instance dropped), the plugin is
    /// marked slow, and the decision runs again from the start off the workers, within the same
    /// deadline: in place on a multi-threaded runtime (its other tasks move to another worker),
    /// else on a blocking thread. A slow plugin's later decisions go off the workers directly, so
    /// it stalls a worker at most once, for the budget. Cancellation reaches the guest through
    /// the epoch callback either way. (A guest stopped over budget may have logged lines that it
    /// logs again on the second run.)
    pub async fn decide(self: &Arc<Self>, question: Question) -> Result<Decision, Failure> {
        self.answer(question).await.map(|a| a.decision)
    }

    /// [`Plugin::decide`], with the plugin's reason and proposed rule (API 0.2) alongside.
    pub async fn answer(self: &Arc<Self>, question: Question) -> Result<Answer, Failure> {
        use tokio::runtime::{Handle, RuntimeFlavor};
        let deadline = Instant::now() + self.shared.spec.timeout;
        if let Some(answer) = self.decide_in_place(&question) {
            return answer;
        }
        let off = move |plugin: &Plugin, question: &Question| {
            plugin.run(question, deadline, None).map_err(|r| match r {
                Run::Failed(f) => f,
                Run::OverBudget => Failure::error("stopped over a budget it did not have"),
            })
        };
        let multi_thread =
            Handle::try_current().is_ok_and(|h| h.runtime_flavor() == RuntimeFlavor::MultiThread);
        if multi_thread {
            return tokio::task::block_in_place(|| off(self, &question));
        }
        let plugin = self.clone();
        match tokio::task::spawn_blocking(move || off(&plugin, &question)).await {
            Ok(result) => result,
            Err(e) => Err(Failure::new(FailureKind::Panic, e.to_string())),
        }
    }

    /// Runs a decision in place within the inline budget, when the plugin is not (or not yet)
    /// known to be slow; `None` when it must decide off the async workers (the plugin is then
    /// marked slow, and the decision is to be run again from the start).
    pub(crate) fn decide_in_place(&self, question: &Question) -> Option<Result<Answer, Failure>> {
        if self.slow.load(Ordering::Relaxed) {
            return None;
        }
        let now = Instant::now();
        let deadline = now + self.shared.spec.timeout;
        match self.run(question, deadline, Some(now + INLINE_BUDGET)) {
            Err(Run::OverBudget) => {
                self.slow.store(true, Ordering::Relaxed);
                tracing::debug!(plugin = %self.shared.spec.name, "decision over the inline budget; this plugin now decides off the async workers");
                None
            }
            Err(Run::Failed(failure)) => Some(Err(failure)),
            Ok(answer) => Some(Ok(answer)),
        }
    }

    /// Runs the plugin's `validate-config` (API 0.2) in a fresh instance, under the plugin's
    /// timeout and memory cap, on the calling thread: loads run off the request path. The error is
    /// the plugin's own message, or how the check failed (trap, timeout, memory).
    fn validate_config(&self) -> Result<(), String> {
        if api::Api::for_version(&self.api_version) == Some(api::Api::V0_1) {
            return Ok(());
        }
        let deadline = Instant::now() + self.shared.spec.timeout;
        let run = |plugin: &Plugin| -> Result<(), String> {
            let mut live = plugin.fresh(None, deadline, None).map_err(|r| match r {
                Run::Failed(f) => v0_2::validation_failure(f),
                Run::OverBudget => "stopped over a budget it did not have".to_owned(),
            })?;
            arm(&mut live.store, None, deadline, None);
            match live.instance.validate_config(&mut live.store) {
                Ok(verdict) => verdict,
                Err(e) => Err(v0_2::validation_failure(limits::classify(
                    &e,
                    live.store.data().stopped,
                    live.store.data().limits.memory_hit,
                ))),
            }
        };
        // WASI calls made while checking re-enter the runtime; on an async worker they must not.
        match tokio::runtime::Handle::try_current() {
            Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
                tokio::task::block_in_place(|| run(self))
            }
            Ok(_) => std::thread::scope(|s| {
                s.spawn(|| run(self))
                    .join()
                    .unwrap_or_else(|_| Err("validate-config panicked the host".to_owned()))
            }),
            Err(_) => run(self),
        }
    }

    /// Whether the plugin decides off the async workers: it imports WASI, or was seen to need
    /// more than the inline budget.
    pub fn is_slow(&self) -> bool {
        self.slow.load(Ordering::Relaxed)
    }

    /// This plugin as a waterfall listener.
    pub fn listener(self: &Arc<Self>) -> impl Listener + use<> {
        PluginListener(self.clone())
    }
}

struct PluginListener(Arc<Plugin>);

impl Listener for PluginListener {
    fn decide(&self, question: Question) -> ListenerFuture {
        let plugin = self.0.clone();
        Box::pin(async move { plugin.decide(question).await })
    }

    fn answer(&self, question: &Question) -> Option<(Option<Arc<str>>, AnswerFuture)> {
        let plugin = self.0.clone();
        let question = question.clone();
        // As `decide`: a bare plugin listener names no version (a slot's does).
        Some((None, Box::pin(async move { plugin.answer(question).await })))
    }
}
