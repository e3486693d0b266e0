//! Shadow plugins (`[[plugin]] mode = "shadow"`): a version tried on live traffic without a say.
//!
//! A shadow sees every question the waterfall settled (not one cancelled, not one the `never`
//! policy refused before any plugin), after its decision is durable, on a task of its own: it
//! never delays or changes an outcome, and it runs in a slot like any plugin (its limits, its
//! quarantine). What it would have answered is appended to the question's session log as
//! `approval/shadowed`, with whether it agrees with the real decision. The shadows run on threads
//! of their own in the idle scheduling class, fed through a bounded queue ([`MAX_QUEUED`]): the deciding
//! thread only enqueues (a question that finds the queue full is not shadowed and is counted
//! `dropped`). A shadow runs in the host's quiet moments (nothing decided for [`GAP`], or after
//! [`MAX_LAG`]), and its records are appended in the session's ([`QUIET`]).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde::Serialize;

use super::slot::{QuarantinePolicy, Slot, SlotListener};
use super::spec::PluginSpec;
use super::{PluginError, PluginHost};
use crate::audit::event::{Event, Shadowed, Would};
use crate::outcome::{Decision, Outcome};
use crate::waterfall::{AfterDecision, Listener, Question};

/// How many recent disagreements each shadow keeps for `plugins/list` and the console.
pub const RECENT: usize = 20;

/// A question a shadow would have decided otherwise.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Disagreement {
    /// The session.
    pub session: String,
    /// The question id.
    pub question: String,
    /// The tool.
    pub tool: String,
    /// The real outcome.
    pub decided: Outcome,
    /// Who decided it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answerer: Option<String>,
    /// What the shadow would have answered.
    pub would: Would,
    /// The shadow's reason.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// One shadow's figures since it was loaded.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ShadowStatus {
    /// The `[[plugin]]` entry's name.
    pub name: String,
    /// The version's SHA-256.
    pub digest: String,
    /// Questions it answered (or failed on).
    pub seen: u64,
    /// Of those, where it agreed.
    pub agreed: u64,
    /// Where it did not.
    pub disagreed: u64,
    /// Where it failed.
    pub failed: u64,
    /// Questions it did not see because the queue was full.
    pub dropped: u64,
    /// Agreed over agreed and disagreed; `None` before it answered anything.
    pub agreement: Option<f64>,
    /// The latest disagreements, newest last.
    pub recent: Vec<Disagreement>,
}

fn agreement(agreed: u64, disagreed: u64) -> Option<f64> {
    let answered = agreed + disagreed;
    (answered > 0).then(|| agreed as f64 / answered as f64)
}

#[derive(Default)]
struct Stats {
    seen: AtomicU64,
    agreed: AtomicU64,
    disagreed: AtomicU64,
    failed: AtomicU64,
    dropped: AtomicU64,
    recent: Mutex<VecDeque<Disagreement>>,
}

struct Shadow {
    slot: Arc<Slot>,
    stats: Stats,
}

/// The deployment's shadow plugins, seeing questions after their decisions.
pub struct Shadows {
    shadows: Arc<Vec<Arc<Shadow>>>,
    /// Questions waiting for the shadow threads.
    queue: Arc<Queue>,
    /// Questions queued or running, and a wake-up for [`Shadows::idle`].
    pending: Arc<(AtomicU64, tokio::sync::Notify)>,
}

/// A settled question for the shadows.
struct Job {
    question: Question,
    outcome: Outcome,
    answerer: Option<String>,
    queued: std::time::Instant,
}

impl std::fmt::Debug for Shadows {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.shadows.iter().map(|s| s.slot.name()))
            .finish()
    }
}

impl Drop for Shadows {
    fn drop(&mut self) {
        // The threads end once they have run what is queued.
        self.queue.closed.store(true, Ordering::Release);
    }
}

/// The shadow threads' queue. The deciding thread only pushes (no system call, no wake-up): the
/// threads look for work themselves, at once while there is some and then less and less often,
/// down to every [`MAX_NAP`], so shadows cost the decisions nothing but the push.
struct Queue {
    jobs: Mutex<VecDeque<Job>>,
    closed: std::sync::atomic::AtomicBool,
    /// When the host last decided a question, in microseconds since `epoch`.
    last_decision: AtomicU64,
    epoch: std::time::Instant,
}

impl Default for Queue {
    fn default() -> Self {
        Queue {
            jobs: Mutex::default(),
            closed: std::sync::atomic::AtomicBool::new(false),
            last_decision: AtomicU64::new(0),
            epoch: std::time::Instant::now(),
        }
    }
}

impl Queue {
    fn now(&self) -> u64 {
        self.epoch.elapsed().as_micros() as u64
    }

    /// Whether the host decided a question in the last [`GAP`]: a shadow waits, as it would
    /// otherwise share the machine with the next decision.
    fn busy(&self) -> bool {
        self.now()
            .saturating_sub(self.last_decision.load(Ordering::Relaxed))
            < GAP.as_micros() as u64
    }
}

/// How long the host must have decided nothing before a shadow runs.
pub const GAP: std::time::Duration = std::time::Duration::from_micros(100);
/// The longest a question waits for a quiet moment; after that its shadows run regardless.
pub const MAX_LAG: std::time::Duration = std::time::Duration::from_millis(100);

/// The longest a shadow thread naps before it looks for work again.
const MAX_NAP: std::time::Duration = std::time::Duration::from_millis(10);
/// The first nap once the queue is empty: long enough that a busy host's questions reach the
/// shadows in batches rather than one wake-up each.
const MIN_NAP: std::time::Duration = std::time::Duration::from_millis(1);

/// Whether a shadow's answer agrees with the real decision: the same outcome, or a pass on a
/// question its deciding version (the plugin of the same name) did not decide either.
pub fn agrees(would: Would, decided: Outcome, answerer: Option<&str>, name: &str) -> Option<bool> {
    Some(match would {
        Would::Failed => return None,
        Would::Next => answerer != Some(name),
        Would::AllowedOnce => decided == Outcome::AllowedOnce,
        Would::Rejected => decided == Outcome::Rejected,
        Would::Cancelled => decided == Outcome::Cancelled,
        Would::Unavailable => decided == Outcome::Unavailable,
    })
}

impl Shadows {
    /// Loads the shadows `specs` names on `host`, all or nothing, and starts their threads
    /// (none without a shadow).
    ///
    /// # Errors
    /// A shadow that does not load, or its threads could not start.
    pub fn load(
        host: &PluginHost,
        specs: &[PluginSpec],
        policy: QuarantinePolicy,
    ) -> Result<Arc<Shadows>, PluginError> {
        let shadows = specs
            .iter()
            .map(|spec| {
                Ok(Arc::new(Shadow {
                    slot: Slot::new(host.load(spec)?, policy),
                    stats: Stats::default(),
                }))
            })
            .collect::<Result<Vec<_>, PluginError>>()?;
        let shadows = Arc::new(shadows);
        let pending = Arc::new((AtomicU64::new(0), tokio::sync::Notify::new()));
        let queue = Arc::new(Queue::default());
        if !shadows.is_empty() {
            for i in 0..THREADS {
                let (queue, shadows, pending) = (queue.clone(), shadows.clone(), pending.clone());
                std::thread::Builder::new()
                    .name(format!("shadow-{i}"))
                    .spawn(move || work(&queue, &shadows, &pending))
                    .map_err(|e| PluginError::Refused {
                        name: "shadows".to_owned(),
                        why: format!("could not start a shadow thread: {e}"),
                    })?;
            }
        }
        Ok(Arc::new(Shadows {
            shadows,
            queue,
            pending,
        }))
    }

    /// Whether there is no shadow.
    pub fn is_empty(&self) -> bool {
        self.shadows.is_empty()
    }

    /// Each shadow's figures, in deployment order.
    pub fn status(&self) -> Vec<ShadowStatus> {
        self.shadows
            .iter()
            .map(|s| {
                let st = &s.stats;
                let agreed = st.agreed.load(Ordering::Relaxed);
                let disagreed = st.disagreed.load(Ordering::Relaxed);
                ShadowStatus {
                    name: s.slot.name().to_owned(),
                    digest: s.slot.plugin().digest().to_owned(),
                    seen: st.seen.load(Ordering::Relaxed),
                    agreed,
                    disagreed,
                    failed: st.failed.load(Ordering::Relaxed),
                    dropped: st.dropped.load(Ordering::Relaxed),
                    agreement: agreement(agreed, disagreed),
                    recent: st
                        .recent
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .iter()
                        .cloned()
                        .collect(),
                }
            })
            .collect()
    }

    /// Waits until every question handed to the shadows so far has been run and recorded (a
    /// one-shot command waits for this before it exits; tests, before they read the log).
    pub async fn idle(&self) {
        let (count, done) = &*self.pending;
        loop {
            let notified = done.notified();
            if count.load(Ordering::Acquire) == 0 {
                return;
            }
            notified.await;
        }
    }
}

/// Threads running shadows: two, so one shadow that hangs until its deadline does not stop the
/// others.
const THREADS: usize = 2;
/// Questions that may wait for a shadow thread; one more is dropped (and counted).
pub const MAX_QUEUED: usize = 1024;

/// A shadow thread: runs each queued question through every shadow, on a runtime of its own, so
/// no shadow ever runs on a thread that decides. Its answers are held and appended to a session's
/// log once the session has been quiet for [`QUIET`] (or [`FLUSH_AT`] answers are held), so the
/// records never contend for the log with a question being decided.
fn work(queue: &Queue, shadows: &[Arc<Shadow>], pending: &(AtomicU64, tokio::sync::Notify)) {
    crate::idle::lower_priority();
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        tracing::error!("a shadow thread could not start its runtime");
        return;
    };
    let mut held: HashMap<String, Held> = HashMap::new();
    let mut nap = MIN_NAP;
    let mut checked = std::time::Instant::now();
    loop {
        let job = {
            let mut jobs = queue.jobs.lock().unwrap_or_else(|p| p.into_inner());
            let waits = jobs.front().is_some_and(|j| {
                queue.busy() && j.queued.elapsed() < MAX_LAG && jobs.len() < MAX_QUEUED / 2
            });
            if waits { None } else { jobs.pop_front() }
        };
        if job.is_none() && queue.busy() && !queue.closed.load(Ordering::Acquire) {
            std::thread::sleep(GAP);
            continue;
        }
        match job {
            Some(mut job) => {
                nap = MIN_NAP;
                job.question = job.question.detached();
                let mut answers = Vec::with_capacity(shadows.len());
                runtime.block_on(async {
                    for shadow in shadows {
                        answers.push(run_one(shadow, &job).await);
                    }
                });
                let entry = held
                    .entry(job.question.session_id().to_owned())
                    .or_insert_with(|| Held {
                        question: job.question.clone(),
                        events: Vec::new(),
                        jobs: 0,
                    });
                entry.events.extend(answers);
                entry.jobs += 1;
                if checked.elapsed() >= MIN_NAP {
                    flush(&runtime, &mut held, false, pending);
                    checked = std::time::Instant::now();
                }
            }
            None => {
                let closed = queue.closed.load(Ordering::Acquire);
                flush(&runtime, &mut held, closed, pending);
                checked = std::time::Instant::now();
                if closed && held.is_empty() {
                    return;
                }
                std::thread::sleep(nap);
                nap = if held.is_empty() {
                    (nap * 2).min(MAX_NAP)
                } else {
                    MIN_NAP
                };
            }
        }
    }
}

/// A session's shadow answers not yet appended.
struct Held {
    /// A question of the session: the way to its log.
    question: Question,
    events: Vec<Event>,
    /// The queued questions these answer.
    jobs: u64,
}

/// How long a session must have had no new event before shadow answers are appended to it.
pub const QUIET: std::time::Duration = std::time::Duration::from_millis(2);
/// Held answers of one session that are appended even while it is busy.
pub const FLUSH_AT: usize = 4096;

/// Appends the held answers of every session that is quiet (or holds too many, or all with
/// `force`), then says so to [`Shadows::idle`].
fn flush(
    runtime: &tokio::runtime::Runtime,
    held: &mut HashMap<String, Held>,
    force: bool,
    pending: &(AtomicU64, tokio::sync::Notify),
) {
    let ready: Vec<String> = held
        .iter()
        .filter(|(_, h)| {
            force || h.events.len() >= FLUSH_AT || h.question.session_quiet_for() >= QUIET
        })
        .map(|(s, _)| s.clone())
        .collect();
    for session in ready {
        let Some(h) = held.remove(&session) else {
            continue;
        };
        runtime.block_on(async {
            for event in h.events {
                if let Err(e) = h.question.append_note(event).await {
                    tracing::warn!(session, error = %e, "a shadow's answer could not be recorded");
                    break;
                }
            }
        });
        if pending.0.fetch_sub(h.jobs, Ordering::AcqRel) == h.jobs {
            pending.1.notify_waiters();
        }
    }
}

/// Runs `job` through `shadow`; its `approval/shadowed` record.
async fn run_one(shadow: &Shadow, job: &Job) -> Event {
    let Job {
        question,
        outcome,
        answerer,
        ..
    } = job;
    let outcome = *outcome;
    let listener = SlotListener(shadow.slot.clone());
    let (digest, answer) = listener
        .answer(question)
        .expect("a slot always answers with a future");
    let (would, failure, reason) = match answer.await {
        Ok(a) => (
            match a.decision {
                Decision::AllowOnce => Would::AllowedOnce,
                Decision::Reject => Would::Rejected,
                Decision::Cancel => Would::Cancelled,
                Decision::Next => Would::Next,
            },
            None,
            a.reason,
        ),
        Err(f) => (Would::Failed, Some(f.kind), None),
    };
    let name = shadow.slot.name().to_owned();
    let agrees = agrees(would, outcome, answerer.as_deref(), &name);
    let stats = &shadow.stats;
    stats.seen.fetch_add(1, Ordering::Relaxed);
    match agrees {
        None => stats.failed.fetch_add(1, Ordering::Relaxed),
        Some(true) => stats.agreed.fetch_add(1, Ordering::Relaxed),
        Some(false) => {
            let mut recent = stats.recent.lock().unwrap_or_else(|p| p.into_inner());
            if recent.len() == RECENT {
                recent.pop_front();
            }
            recent.push_back(Disagreement {
                session: question.session_id().to_owned(),
                question: question.id().to_owned(),
                tool: question.tool_name().to_owned(),
                decided: outcome,
                answerer: answerer.clone(),
                would,
                reason: reason.clone(),
            });
            stats.disagreed.fetch_add(1, Ordering::Relaxed)
        }
    };
    Event::Shadowed(Shadowed {
        id: question.id().to_owned(),
        plugin: name,
        digest: digest.map(|d| d.to_string()),
        would,
        failure,
        reason,
        decided: outcome,
        agrees,
    })
}

impl AfterDecision for Shadows {
    fn decided(&self, question: &Question, outcome: Outcome, answerer: Option<&str>) {
        if self.shadows.is_empty() {
            return;
        }
        let mut jobs = self.queue.jobs.lock().unwrap_or_else(|p| p.into_inner());
        if jobs.len() >= MAX_QUEUED {
            drop(jobs);
            for s in self.shadows.iter() {
                s.stats.dropped.fetch_add(1, Ordering::Relaxed);
            }
            return;
        }
        self.pending.0.fetch_add(1, Ordering::AcqRel);
        self.queue
            .last_decision
            .store(self.queue.now(), Ordering::Relaxed);
        // A clone is an Arc's count; the detached copy is made on the shadow thread.
        jobs.push_back(Job {
            question: question.clone(),
            outcome,
            answerer: answerer.map(str::to_owned),
            queued: std::time::Instant::now(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pass_agrees_unless_its_deciding_version_decided() {
        let d = Outcome::AllowedOnce;
        assert_eq!(agrees(Would::Next, d, Some("rule:r1"), "gate"), Some(true));
        assert_eq!(agrees(Would::Next, d, None, "gate"), Some(true));
        assert_eq!(agrees(Would::Next, d, Some("gate"), "gate"), Some(false));
        assert_eq!(
            agrees(Would::AllowedOnce, d, Some("gate"), "gate"),
            Some(true)
        );
        assert_eq!(agrees(Would::Rejected, d, Some("x"), "gate"), Some(false));
        assert_eq!(agrees(Would::Failed, d, None, "gate"), None);
    }
}
