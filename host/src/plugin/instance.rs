//! A loaded [`Plugin`]: its pre-linked template, its idle instances, and one decision run in
//! one of them (in place under an inline budget, or on a blocking thread under the deadline),
//! armed, classified when it fails, and dropped after any failure.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use wasmtime::component::Component;
use wasmtime::{Store, UpdateDeadline};

use super::limits::Stop;
use super::sandbox::PluginState;
use super::shared::Shared;
use super::{PluginHost, api, limits, v0_2};
use crate::answer::Answer;
use crate::outcome::{Decision, Failure, FailureKind};
use crate::plugin::spec::{Isolation, PluginSpec, Role};
use crate::waterfall::{AnswerFuture, Listener, ListenerFuture, Question};

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
    state.begin_requests(deadline);
    state.signature_checks = 0;
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
    /// A plugin over a pre-linked template; `slow` when it decides off the async workers from
    /// the start (it imports WASI).
    pub(super) fn new(
        host: PluginHost,
        shared: Arc<Shared>,
        digest: Arc<str>,
        api_version: String,
        template: api::Template,
        code: Arc<Component>,
        slow: bool,
    ) -> Self {
        Plugin {
            host,
            shared,
            digest,
            api_version,
            template,
            _code: code,
            idle: Mutex::new(Vec::new()),
            slow: AtomicBool::new(slow),
        }
    }

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
    pub(super) fn validate_config(&self) -> Result<(), String> {
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
                // The plugin's own words: a secret that reached it goes no further.
                Ok(verdict) => verdict.map_err(|m| plugin.shared.scrub(&m).into_owned()),
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
    /// A plugin granted hosts to reach sends the question out: it is durable first.
    fn leaves_process(&self) -> bool {
        !self.0.spec().allow_hosts.is_empty()
    }

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
