//! Shadow plugins (`[[plugin]] mode = "shadow"`): a version tried on live traffic without a say.
//!
//! A shadow sees every question the waterfall settled (not one cancelled, not one the `never`
//! policy refused before any plugin), after its decision is durable, on a task of its own: it
//! never delays or changes an outcome, and it runs in a slot like any plugin (its limits, its
//! quarantine). What it would have answered is appended to the question's session log as
//! `approval/shadowed`, with whether it agrees with the real decision. At most [`MAX_RUNNING`]
//! shadow runs at once; a question that finds no room is not shadowed and is counted `dropped`.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde::Serialize;
use tokio::sync::Semaphore;
use tokio_util::task::TaskTracker;

use super::slot::{QuarantinePolicy, Slot, SlotListener};
use super::spec::PluginSpec;
use super::{PluginError, PluginHost};
use crate::audit::event::{Event, Shadowed, Would};
use crate::outcome::{Decision, Outcome};
use crate::waterfall::{AfterDecision, Listener, Question};

/// Most shadow runs in flight at once, over every shadow.
pub const MAX_RUNNING: usize = 64;
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
    /// Questions it did not see for want of room.
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
    shadows: Vec<Arc<Shadow>>,
    room: Arc<Semaphore>,
    tasks: TaskTracker,
}

impl std::fmt::Debug for Shadows {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.shadows.iter().map(|s| s.slot.name()))
            .finish()
    }
}

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
    /// Loads the shadows `specs` names on `host`, all or nothing.
    ///
    /// # Errors
    /// A shadow that does not load.
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
        Ok(Arc::new(Shadows {
            shadows,
            room: Arc::new(Semaphore::new(MAX_RUNNING)),
            tasks: TaskTracker::new(),
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

    /// Waits until every shadow run started so far has finished and been recorded (a one-shot
    /// command waits for this before it exits).
    pub async fn idle(&self) {
        self.tasks.close();
        self.tasks.wait().await;
        self.tasks.reopen();
    }
}

impl AfterDecision for Shadows {
    fn decided(&self, question: &Question, outcome: Outcome, answerer: Option<&str>) {
        if self.shadows.is_empty() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            for s in &self.shadows {
                s.stats.dropped.fetch_add(1, Ordering::Relaxed);
            }
            return;
        };
        for shadow in &self.shadows {
            let Ok(permit) = self.room.clone().try_acquire_owned() else {
                shadow.stats.dropped.fetch_add(1, Ordering::Relaxed);
                continue;
            };
            let question = question.detached();
            let listener = SlotListener(shadow.slot.clone());
            let (digest, answer) = listener
                .answer(&question)
                .expect("a slot always answers with a future");
            let shadow = shadow.clone();
            let answerer = answerer.map(str::to_owned);
            self.tasks.spawn_on(
                async move {
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
                            let mut recent =
                                stats.recent.lock().unwrap_or_else(|p| p.into_inner());
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
                    let event = Event::Shadowed(Shadowed {
                        id: question.id().to_owned(),
                        plugin: name,
                        digest: digest.map(|d| d.to_string()),
                        would,
                        failure,
                        reason,
                        decided: outcome,
                        agrees,
                    });
                    if let Err(e) = question.append_note(event).await {
                        tracing::warn!(session = question.session_id(), error = %e, "a shadow's answer could not be recorded");
                    }
                    drop(permit);
                },
                &runtime,
            );
        }
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
