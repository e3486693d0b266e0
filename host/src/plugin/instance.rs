//! A loaded [`Plugin`]: its pre-linked template, its idle instances, and one decision run in
//! one of them (in place under an inline budget, or on a blocking thread under the deadline),
//! armed, classified when it fails, and dropped after any failure.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use wasmtime::component::Component;
use wasmtime::{Store, UpdateDeadline};

use super::limits::Stop;
use super::pending::{CallbackRequest, OnTimeout, Ruling, Settlement};
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
    /// Its share of the host's plugin threads (`runner`).
    share: Arc<tokio::sync::Semaphore>,
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
    state.ticks = 0;
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

/// The epoch ticks a run must itself have run through before its budget stops it. A guest whose
/// thread was descheduled past the budget (a loaded machine, not a slow plugin) sees one tick when
/// it runs again, however long it was away: it goes on, and a fast guest finishes before the next
/// tick, in place. Without this, preemption marked fast plugins slow for good, and their
/// decisions queued on the plugin threads behind genuinely slow ones.
const BUDGET_TICKS: u32 = 2;

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
            share: host.inner.runner.share(),
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

    /// How many of its questions wait for a callback now.
    pub fn waiting(&self) -> usize {
        self.host.inner.waits.waiting_for(&self.shared.spec.name)
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
            state.ticks = state.ticks.saturating_add(1);
            let now = Instant::now();
            let stop = if state.question.as_ref().is_some_and(Question::is_cancelled) {
                Some(Stop::Cancelled)
            } else if now >= state.deadline {
                Some(Stop::Deadline)
            } else if state.budget.is_some_and(|b| now >= b) && state.ticks >= BUDGET_TICKS {
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
    ) -> Result<Ruling, Run> {
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
        live.store.data_mut().can_wait =
            self.shared.spec.wait.is_some() && self.host.inner.waits.receiving();
        let result = live.instance.decide(&mut live.store, question);
        live.store.data_mut().question = None;
        self.keep_or_drop(live, reuse, result)
    }

    /// Keeps `live` for the next run after a good one (when instances are reused); drops it
    /// after a failure, so a stopped or failed instance is never entered again.
    fn keep_or_drop<T>(
        &self,
        live: Live,
        reuse: bool,
        result: wasmtime::Result<T>,
    ) -> Result<T, Run> {
        match result {
            Ok(value) => {
                if reuse {
                    let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
                    if idle.len() < MAX_IDLE {
                        idle.push(live);
                    }
                }
                Ok(value)
            }
            Err(e) => Err(failure_or_budget(&live.store, &e)),
        }
    }

    /// Runs `f` off the async workers, on the host's plugin threads ([`super::runner`]): a
    /// burst of questions queues there instead of starting a thread each.
    async fn off_workers<T: Send + 'static>(
        self: &Arc<Self>,
        f: impl FnOnce(&Plugin, Instant) -> Result<T, Failure> + Send + 'static,
    ) -> Result<T, Failure> {
        let plugin = self.clone();
        let timeout = self.shared.spec.timeout;
        self.host
            .inner
            .runner
            .run_within(&self.share, timeout, move |deadline| f(&plugin, deadline))
            .await
    }

    /// Decides `question` without stalling the async workers.
    ///
    /// A decision of a plugin that imports only the host interface (no WASI: its calls never
    /// block) first runs in place, on the asking task, with an inline budget of
    /// [`INLINE_BUDGET`]: a warm plugin answers in about a microsecond, with no hand-off to another
    /// thread. A run that uses up the budget is stopped (its instance dropped), the plugin is
    /// marked slow, and the decision runs again from the start off the workers, within the same
    /// deadline, on the host's plugin threads. A slow plugin's later decisions go there directly, so
    /// it stalls a worker at most once, for the budget. Cancellation reaches the guest through
    /// the epoch callback either way. (A guest stopped over budget may have logged lines that it
    /// logs again on the second run.)
    pub async fn decide(self: &Arc<Self>, question: Question) -> Result<Decision, Failure> {
        self.answer(question).await.map(|a| a.decision)
    }

    /// [`Plugin::decide`], with the plugin's reason and proposed rule (API 0.2) alongside.
    pub async fn answer(self: &Arc<Self>, question: Question) -> Result<Answer, Failure> {
        self.answer_blamed(question)
            .await
            .map_err(|(failure, _)| failure)
    }

    /// [`Plugin::answer`]; a failure says whether the plugin is to blame (a trap, a timeout of
    /// its run) or not (its wait ran out with nobody answering), which quarantine counts.
    pub(crate) async fn answer_blamed(
        self: &Arc<Self>,
        question: Question,
    ) -> Result<Answer, (Failure, bool)> {
        if let Some(answer) = self.decide_in_place(&question) {
            return answer.map_err(|f| (f, true));
        }
        let asked = question.clone();
        // Held until the question is parked: a callback that overtakes it waits for the park.
        let running = self
            .shared
            .spec
            .wait
            .map(|_| self.host.inner.waits.running(&self.shared.spec.name));
        let ruling = self
            .off_workers(move |plugin, deadline| {
                plugin.run(&asked, deadline, None).map_err(|r| match r {
                    Run::Failed(f) => f,
                    Run::OverBudget => Failure::error("stopped over a budget it did not have"),
                })
            })
            .await
            .map_err(|f| (f, true))?;
        match ruling {
            Ruling::Answer(answer) => Ok(answer),
            Ruling::Pending(correlation) => self.wait_for(&question, &correlation, running).await,
        }
    }

    /// Parks `question` under `correlation` until the plugin's callback settles it, its wait
    /// runs out (settled as `on-timeout` says), or it is cancelled. Holds no instance and no
    /// thread: the asking task awaits a channel and a timer.
    async fn wait_for(
        &self,
        question: &Question,
        correlation: &str,
        running: Option<super::pending::Running<'_>>,
    ) -> Result<Answer, (Failure, bool)> {
        let name = &self.shared.spec.name;
        let Some(wait) = self.shared.spec.wait else {
            return Err((no_wait(), true));
        };
        if !super::pending::valid_correlation(correlation) {
            return Err((
                Failure::new(
                    FailureKind::InvalidResult,
                    format!(
                        "answered pending with a correlation that is empty, over {} bytes or holds control characters",
                        super::pending::MAX_CORRELATION
                    ),
                ),
                true,
            ));
        }
        let waits = &self.host.inner.waits;
        if !waits.receiving() {
            tracing::warn!(plugin = %name, question = question.id(), "{}", super::pending::NO_CALLBACKS);
            return settle_unanswered(wait.on_timeout, super::pending::NO_CALLBACKS);
        }
        let Some(parked) = waits.park(name, correlation) else {
            return Err((
                Failure::new(
                    FailureKind::InvalidResult,
                    format!(
                        "answered pending with correlation {correlation:?}, under which another of its questions waits"
                    ),
                ),
                true,
            ));
        };
        // Parked: a callback that came early may settle it now.
        drop(running);
        tracing::info!(plugin = %name, question = question.id(), correlation, wait_s = wait.wait.as_secs_f64(), "question waits for the plugin's callback");
        // An answer that came in as the wait ran out wins: its caller was told it settled.
        tokio::select! {
            biased;
            answer = &mut { parked }.answer => answer.map_err(|_| (Failure::error("the wait ended without an answer"), false)),
            () = tokio::time::sleep(wait.wait) => {
                tracing::info!(plugin = %name, question = question.id(), correlation, on_timeout = wait.on_timeout.as_str(), "{}", super::pending::WAIT_RAN_OUT);
                settle_unanswered(wait.on_timeout, super::pending::WAIT_RAN_OUT)
            }
            () = question.cancelled() => Err((Failure::error("the question was cancelled while it waited"), false)),
        }
    }

    /// Hands `request` (it arrived at `/plugins/<name>/callback`) to the plugin's `callback`
    /// export and settles the waiting question it names: the correlation settled.
    pub async fn take_callback(
        self: &Arc<Self>,
        request: CallbackRequest,
    ) -> Result<String, super::pending::CallbackError> {
        let name = self.shared.spec.name.clone();
        let refused = |why: String| super::pending::CallbackError::Refused {
            plugin: name.clone(),
            why: crate::answer::clean_reason(&why).unwrap_or_default(),
        };
        let settlement = self.callback(request).await.map_err(refused)?;
        if !super::pending::valid_correlation(&settlement.correlation) {
            return Err(refused(
                "the plugin named a correlation that is empty, too long or holds control characters"
                    .to_owned(),
            ));
        }
        self.host
            .inner
            .waits
            .settle_when_parked(
                &name,
                &settlement.correlation,
                settlement.answer,
                self.shared.spec.timeout,
            )
            .await?;
        Ok(settlement.correlation)
    }

    /// Runs the plugin's `callback` export over `request` in an instance of its own, under the
    /// plugin's timeout and memory cap, off the async workers: the settlement it reads, or why
    /// not (its refusal, or how it failed).
    async fn callback(self: &Arc<Self>, request: CallbackRequest) -> Result<Settlement, String> {
        let reuse = self.shared.spec.isolation == Isolation::Reuse;
        self.off_workers(move |plugin, deadline| {
            let idle = if reuse {
                plugin.idle.lock().unwrap_or_else(|p| p.into_inner()).pop()
            } else {
                None
            };
            let mut live = match idle {
                Some(live) => live,
                None => plugin.fresh(None, deadline, None).map_err(run_failure)?,
            };
            arm(&mut live.store, None, deadline, None);
            let result = live.instance.callback(&mut live.store, &request);
            plugin
                .keep_or_drop(live, reuse, result)
                .map_err(run_failure)
        })
        .await
        .map_err(|f| format!("the callback failed ({}): {}", f.kind.as_str(), f.message))?
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
            // Only an entry with a `wait` may wait, and such a plugin never decides in place.
            Ok(Ruling::Pending(_)) => Some(Err(no_wait())),
            Err(Run::OverBudget) => {
                self.slow.store(true, Ordering::Relaxed);
                tracing::debug!(plugin = %self.shared.spec.name, "decision over the inline budget; this plugin now decides off the async workers");
                None
            }
            Err(Run::Failed(failure)) => Some(Err(failure)),
            Ok(Ruling::Answer(answer)) => Some(Ok(answer)),
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

/// The failure of a plugin that answered `pending` though its entry sets no `wait`.
fn no_wait() -> Failure {
    Failure::new(
        FailureKind::InvalidResult,
        "answered pending, but its [[plugin]] entry sets no wait",
    )
}

fn run_failure(run: Run) -> Failure {
    match run {
        Run::Failed(f) => f,
        Run::OverBudget => Failure::error("stopped over a budget it did not have"),
    }
}

/// A waiting question nobody answered, settled as `on-timeout` says; never the plugin's fault.
fn settle_unanswered(on_timeout: OnTimeout, why: &str) -> Result<Answer, (Failure, bool)> {
    match on_timeout {
        OnTimeout::Reject => Ok(Answer::reject(why)),
        OnTimeout::Unavailable => Err((Failure::new(FailureKind::Timeout, why), false)),
    }
}

struct PluginListener(Arc<Plugin>);

impl Listener for PluginListener {
    /// A plugin that reaches out or waits sends the question out: it is durable first.
    fn leaves_process(&self) -> bool {
        self.0.spec().leaves_process()
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
