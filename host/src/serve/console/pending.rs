//! The console as an answerer: questions that reach it wait here for a person, up to the
//! deployment's timeout, and leave as soon as they are answered, cancelled or timed out.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{oneshot, watch};

use crate::answer::Answer;
use crate::config::answerer::WebAnswererSpec;
use crate::outcome::{Decision, Failure, FailureKind};
use crate::waterfall::{AnswerFuture, Listener, ListenerFuture, Question};

/// What a person decided on the console.
#[derive(Debug)]
pub struct Click {
    /// Allow once or reject.
    pub decision: Decision,
    /// The reason typed with a rejection.
    pub reason: Option<String>,
    /// Who clicked (the token's name).
    pub user: String,
}

/// A question on the page.
#[derive(Debug, Clone)]
pub struct Shown {
    /// The question id.
    pub id: String,
    /// The session and agent that asked.
    pub session: String,
    /// The asking agent.
    pub agent: String,
    /// The tool.
    pub tool: String,
    /// The call id, when the asker gave one.
    pub call_id: Option<String>,
    /// The call's recorded arguments, pretty-printed.
    pub arguments: Option<String>,
    /// The asker's reason.
    pub reason: Option<String>,
    /// When it reached the console.
    pub since: Instant,
}

struct Waiting {
    shown: Shown,
    answer: oneshot::Sender<Click>,
}

/// The questions waiting for a person, and a signal that changes whenever that set does.
pub struct Pending {
    waiting: Mutex<BTreeMap<u64, Waiting>>,
    next: AtomicU64,
    changed: watch::Sender<u64>,
}

impl Default for Pending {
    fn default() -> Self {
        Pending {
            waiting: Mutex::default(),
            next: AtomicU64::new(1),
            changed: watch::Sender::new(0),
        }
    }
}

impl Pending {
    /// The waiting questions, oldest first.
    pub fn list(&self) -> Vec<Shown> {
        self.lock().values().map(|w| w.shown.clone()).collect()
    }

    /// Answers the question `id`; false when it is no longer waiting.
    pub fn answer(&self, id: &str, click: Click) -> bool {
        let waiting = {
            let mut map = self.lock();
            let key = map.iter().find(|(_, w)| w.shown.id == id).map(|(k, _)| *k);
            key.and_then(|k| map.remove(&k))
        };
        self.bump();
        waiting.is_some_and(|w| w.answer.send(click).is_ok())
    }

    /// A receiver that sees every change of the waiting set.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Waiting>> {
        self.waiting.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn bump(&self) {
        self.changed.send_modify(|n| *n += 1);
    }

    fn add(&self, shown: Shown) -> (u64, oneshot::Receiver<Click>) {
        let (tx, rx) = oneshot::channel();
        let key = self.next.fetch_add(1, Ordering::Relaxed);
        self.lock().insert(key, Waiting { shown, answer: tx });
        self.bump();
        (key, rx)
    }

    fn remove(&self, key: u64) {
        if self.lock().remove(&key).is_some() {
            self.bump();
        }
    }
}

/// Takes a question off the page when its wait ends for any reason (answered elsewhere,
/// cancelled, timed out, or the request dropped).
struct OnPage {
    pending: Arc<Pending>,
    key: u64,
}

impl Drop for OnPage {
    fn drop(&mut self) {
        self.pending.remove(self.key);
    }
}

/// The waterfall listener behind `[[answerer]] kind = "web"`.
pub struct WebAnswerer {
    pub(crate) pending: Arc<Pending>,
    pub(crate) spec: WebAnswererSpec,
}

/// The failure of a question nobody answered on the console in time.
pub fn timed_out(timeout: Duration) -> Failure {
    Failure::new(
        FailureKind::Timeout,
        format!(
            "nobody answered on the web console within {} s",
            timeout.as_secs()
        ),
    )
}

impl Listener for WebAnswerer {
    /// A person sees the question: it is made durable before it shows.
    fn leaves_process(&self) -> bool {
        true
    }

    fn decide(&self, question: Question) -> ListenerFuture {
        let (_, future) = self
            .answer(&question)
            .expect("the web answerer always answers with a future");
        Box::pin(async move { future.await.map(|a| a.decision) })
    }

    fn answer(&self, question: &Question) -> Option<(Option<Arc<str>>, AnswerFuture)> {
        let session = question.session_id();
        if !self.spec.sessions.is_empty()
            && !self.spec.sessions.iter().any(|p| session.starts_with(p))
        {
            return Some((None, Box::pin(async { Ok(Answer::from(Decision::Next)) })));
        }
        let shown = Shown {
            id: question.id().to_owned(),
            session: session.to_owned(),
            agent: question.agent().id().to_owned(),
            tool: question.tool_name().to_owned(),
            call_id: question.call_id().map(str::to_owned),
            arguments: question
                .arguments()
                .map(|a| serde_json::to_string_pretty(&a).unwrap_or_else(|_| a.to_string())),
            reason: question.reason().map(str::to_owned),
            since: Instant::now(),
        };
        let (key, clicked) = self.pending.add(shown);
        let on_page = OnPage {
            pending: self.pending.clone(),
            key,
        };
        let timeout = self.spec.timeout;
        let question = question.clone();
        Some((
            None,
            Box::pin(async move {
                let _on_page = on_page;
                tokio::select! {
                    click = clicked => match click {
                        Ok(click) => Ok(Answer {
                            decision: click.decision,
                            reason: click.reason.as_deref().and_then(crate::answer::clean_reason),
                            proposal: None,
                            rule: None,
                            by: Some(format!("web:{}", click.user)),
                        }),
                        Err(_) => Err(Failure::error("the web console went away")),
                    },
                    () = tokio::time::sleep(timeout) => Err(timed_out(timeout)),
                    () = question.cancelled() => Ok(Answer::from(Decision::Cancel)),
                }
            }),
        ))
    }
}
