//! A plugin's place in the waterfall: the version serving now, swapped atomically on reload, and
//! the quarantine that keeps a crash-looping plugin from burning the host.
//!
//! A decision takes a snapshot of the slot's plugin when it starts, so decisions already running
//! finish on the old version while new ones use the new one. A plugin that fails (trap, timeout,
//! memory...) more than `max_failures` times within `window` is quarantined for `backoff`: the
//! requests that reach it settle `unavailable` without running it, and the decided event says
//! `quarantined`. A reload (or the backoff running out) brings it back.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::Plugin;
use crate::outcome::{Failure, FailureKind};
use crate::waterfall::{AnswerFuture, ImmediateAnswer, Listener, ListenerFuture, Question};

/// When a failing plugin is quarantined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuarantinePolicy {
    /// Failures tolerated within `window`; one more quarantines the plugin.
    pub max_failures: usize,
    /// The window failures are counted in.
    pub window: Duration,
    /// How long a quarantine lasts (a reload ends it sooner).
    pub backoff: Duration,
}

impl Default for QuarantinePolicy {
    fn default() -> Self {
        QuarantinePolicy {
            max_failures: 5,
            window: Duration::from_secs(60),
            backoff: Duration::from_secs(30),
        }
    }
}

/// A plugin's state as `plugins/list` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SlotState {
    /// Serving.
    Loaded,
    /// The last load of a new version failed; the previous version (if any) still serves.
    Failed,
    /// Failing repeatedly: not run until the backoff ends or a reload.
    Quarantined,
}

impl SlotState {
    /// The spelling `plugins/list` uses: `loaded`, `failed`, `quarantined`.
    pub const fn as_str(self) -> &'static str {
        match self {
            SlotState::Loaded => "loaded",
            SlotState::Failed => "failed",
            SlotState::Quarantined => "quarantined",
        }
    }
}

/// A plugin's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counters {
    /// Decisions that ran the plugin.
    pub decisions: u64,
    /// Contained failures (trap, timeout, memory...).
    pub failures: u64,
    /// Requests settled `unavailable` without running it, while quarantined.
    pub quarantined: u64,
    /// Versions swapped in by reloads.
    pub reloads: u64,
}

struct Inner {
    plugin: Arc<Plugin>,
    recent_failures: VecDeque<Instant>,
    quarantined_until: Option<Instant>,
    load_error: Option<String>,
}

/// One plugin's slot.
pub struct Slot {
    name: String,
    policy: QuarantinePolicy,
    inner: Mutex<Inner>,
    decisions: AtomicU64,
    failures: AtomicU64,
    quarantined: AtomicU64,
    reloads: AtomicU64,
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Slot")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl Slot {
    /// A slot serving `plugin`.
    pub fn new(plugin: Arc<Plugin>, policy: QuarantinePolicy) -> Arc<Slot> {
        Arc::new(Slot {
            name: plugin.name().to_owned(),
            policy,
            inner: Mutex::new(Inner {
                plugin,
                recent_failures: VecDeque::new(),
                quarantined_until: None,
                load_error: None,
            }),
            decisions: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            quarantined: AtomicU64::new(0),
            reloads: AtomicU64::new(0),
        })
    }

    fn inner(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The plugin's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The version serving now.
    pub fn plugin(&self) -> Arc<Plugin> {
        self.inner().plugin.clone()
    }

    /// Swaps in a new version: decisions already running finish on the old one. Ends any
    /// quarantine and clears a previous load error.
    pub fn swap(&self, plugin: Arc<Plugin>) {
        let mut inner = self.inner();
        inner.plugin = plugin;
        inner.load_error = None;
        inner.recent_failures.clear();
        inner.quarantined_until = None;
        self.reloads.fetch_add(1, Ordering::Relaxed);
    }

    /// Records that loading a new version failed; the current version keeps serving.
    pub fn load_failed(&self, error: String) {
        self.inner().load_error = Some(error);
    }

    /// Ends a quarantine now (a reload).
    pub fn release(&self) {
        let mut inner = self.inner();
        inner.recent_failures.clear();
        inner.quarantined_until = None;
    }

    /// The slot's state, its last load error, and its counters.
    pub fn status(&self) -> (SlotState, Option<String>, Counters) {
        let inner = self.inner();
        let state = if inner
            .quarantined_until
            .is_some_and(|until| Instant::now() < until)
        {
            SlotState::Quarantined
        } else if inner.load_error.is_some() {
            SlotState::Failed
        } else {
            SlotState::Loaded
        };
        let counters = Counters {
            decisions: self.decisions.load(Ordering::Relaxed),
            failures: self.failures.load(Ordering::Relaxed),
            quarantined: self.quarantined.load(Ordering::Relaxed),
            reloads: self.reloads.load(Ordering::Relaxed),
        };
        (state, inner.load_error.clone(), counters)
    }

    /// How long its quarantine still lasts, while it is quarantined.
    pub fn quarantine_left(&self) -> Option<std::time::Duration> {
        self.inner()
            .quarantined_until
            .and_then(|until| until.checked_duration_since(Instant::now()))
            .filter(|left| !left.is_zero())
    }

    /// Takes the version to run, or `None` while quarantined.
    fn begin(&self) -> (Arc<Plugin>, bool) {
        let mut inner = self.inner();
        let quarantined = match inner.quarantined_until {
            Some(until) if Instant::now() < until => true,
            Some(_) => {
                inner.quarantined_until = None;
                tracing::info!(plugin = %self.name, "quarantine ended; the plugin runs again");
                false
            }
            None => false,
        };
        (inner.plugin.clone(), quarantined)
    }

    fn record_failure(&self) {
        self.failures.fetch_add(1, Ordering::Relaxed);
        let mut inner = self.inner();
        let now = Instant::now();
        let window = self.policy.window;
        while inner
            .recent_failures
            .front()
            .is_some_and(|t| now.duration_since(*t) > window)
        {
            inner.recent_failures.pop_front();
        }
        inner.recent_failures.push_back(now);
        if inner.recent_failures.len() > self.policy.max_failures
            && inner.quarantined_until.is_none()
        {
            inner.quarantined_until = Some(now + self.policy.backoff);
            inner.recent_failures.clear();
            tracing::warn!(
                plugin = %self.name,
                failures = self.policy.max_failures + 1,
                window_s = window.as_secs_f64(),
                backoff_s = self.policy.backoff.as_secs_f64(),
                "plugin quarantined after repeated failures"
            );
        }
    }
}

/// The slot as a waterfall listener.
pub(crate) struct SlotListener(pub(crate) Arc<Slot>);

impl Listener for SlotListener {
    fn decide(&self, question: Question) -> ListenerFuture {
        self.decide_versioned(question).1
    }

    /// A plugin that reaches out or waits sends the question out: it is durable first.
    fn leaves_process(&self) -> bool {
        self.0.plugin().spec().leaves_process()
    }

    fn decide_now(&self, question: &Question) -> Option<ImmediateAnswer> {
        let slot = &self.0;
        let (plugin, quarantined) = slot.begin();
        if quarantined || plugin.is_slow() {
            return None;
        }
        let answer = plugin.decide_in_place(question)?;
        slot.decisions.fetch_add(1, Ordering::Relaxed);
        if answer.is_err() && !question.is_cancelled() {
            slot.record_failure();
        }
        Some((Some(plugin.digest_shared()), answer))
    }

    fn answer(&self, question: &Question) -> Option<(Option<Arc<str>>, AnswerFuture)> {
        let slot = self.0.clone();
        let (plugin, quarantined) = slot.begin();
        let version = Some(plugin.digest_shared());
        if quarantined {
            slot.quarantined.fetch_add(1, Ordering::Relaxed);
            let failure = Failure::new(
                FailureKind::Quarantined,
                format!(
                    "plugin {:?} is quarantined after repeated failures",
                    slot.name
                ),
            );
            return Some((version, Box::pin(async move { Err(failure) })));
        }
        let question = question.clone();
        let future = async move {
            slot.decisions.fetch_add(1, Ordering::Relaxed);
            let result = plugin.answer_blamed(question.clone()).await;
            result.map_err(|(failure, blamed)| {
                if blamed && !question.is_cancelled() {
                    slot.record_failure();
                }
                failure
            })
        };
        Some((version, Box::pin(future)))
    }

    fn decide_versioned(&self, question: Question) -> (Option<Arc<str>>, ListenerFuture) {
        let (version, future) = self
            .answer(&question)
            .expect("a slot always answers with a future");
        (
            version,
            Box::pin(async move { future.await.map(|a| a.decision) }),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::SlotState;

    #[test]
    fn states_are_spelled_as_plugins_list_serializes_them() {
        for state in [SlotState::Loaded, SlotState::Failed, SlotState::Quarantined] {
            assert_eq!(
                serde_json::to_value(state).unwrap(),
                serde_json::Value::from(state.as_str())
            );
        }
    }
}
