//! The console as an answerer: questions that reach it wait here for a person, up to the
//! deployment's timeout, and leave as soon as they are answered, cancelled or timed out. Each
//! change is announced (what the page's live stream follows), and the last few departures are
//! kept with how they ended, so a question never vanishes from a page without its outcome.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{broadcast, oneshot};

use crate::answer::{Answer, Proposal};
use crate::config::answerer::WebAnswererSpec;
use crate::outcome::{Decision, Failure, FailureKind};
use crate::waterfall::{AnswerFuture, Listener, ListenerFuture, Question};

/// How many settled questions the page keeps showing.
pub const RECENT: usize = 20;

/// How a question that timed out on the console ended, as the page says it.
pub const ENDED_TIMED_OUT: &str = "unavailable: nobody answered in time";
/// How a cancelled question ended.
pub const ENDED_CANCELLED: &str = "cancelled";
/// How a question ended whose asker went away or which another answerer settled.
pub const ENDED_WITHDRAWN: &str = "withdrawn";

/// What a person decided on the console.
#[derive(Debug)]
pub struct Click {
    /// Allow once or reject.
    pub decision: Decision,
    /// The reason typed with a rejection.
    pub reason: Option<String>,
    /// The standing rule chosen with "Always allow" / "Always reject".
    pub proposal: Option<Proposal>,
    /// Who clicked (the token's name).
    pub user: String,
    /// Which rules their answer may make.
    pub authority: crate::answer::Authority,
}

/// A question on the page.
#[derive(Debug, Clone)]
pub struct Shown {
    /// The question id.
    pub id: String,
    /// The session that asked.
    pub session: String,
    /// The asking agent.
    pub agent: String,
    /// The tool.
    pub tool: String,
    /// The call id, when the asker gave one.
    pub call_id: Option<String>,
    /// The call's arguments as shown: pretty-printed, `[audit] redact`'s values replaced.
    pub arguments: Option<String>,
    /// The call's recorded arguments, as recorded (a proposed rule is checked against them).
    pub call: Option<serde_json::Value>,
    /// The asker's working directory.
    pub cwd: Option<String>,
    /// The asker's reason.
    pub reason: Option<String>,
    /// The listeners that said `next` before the console got it.
    pub passed: Vec<String>,
    /// The standing rule offered for "Always allow" / "Always reject" (editable on the page).
    pub offer: Option<String>,
    /// When it reached the console.
    pub since: Instant,
}

/// A question that left the page, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Departed {
    /// The question id.
    pub id: String,
    /// The session that asked.
    pub session: String,
    /// The tool.
    pub tool: String,
    /// How it ended, as the page says it: `allowed-once by web:alice`, `cancelled`, ...
    pub ending: String,
}

/// A change of the waiting set, as the live stream announces it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// A question arrived (its session, for filtering by who may see it).
    Arrived {
        /// The question id.
        id: String,
        /// Its session.
        session: String,
    },
    /// A question left.
    Left(Departed),
}

impl Change {
    /// The session the change is about.
    pub fn session(&self) -> &str {
        match self {
            Change::Arrived { session, .. } => session,
            Change::Left(d) => &d.session,
        }
    }
}

struct Waiting {
    shown: Shown,
    answer: oneshot::Sender<Click>,
}

#[derive(Default)]
struct State {
    waiting: BTreeMap<u64, Waiting>,
    recent: VecDeque<Departed>,
    /// Counts the changes: a page rendered at one version and a stream opened at another
    /// missed something in between.
    version: u64,
}

/// The questions waiting for a person, the last ones that left, and the changes of both.
pub struct Pending {
    state: Mutex<State>,
    next: AtomicU64,
    changes: broadcast::Sender<Change>,
}

impl Default for Pending {
    fn default() -> Self {
        Pending {
            state: Mutex::default(),
            next: AtomicU64::new(1),
            changes: broadcast::Sender::new(64),
        }
    }
}

/// How an answer reads on the page.
fn answered(click: &Click) -> String {
    // The console only clicks decisions that settle; `next` would read as passed on.
    let outcome = click
        .decision
        .outcome()
        .map_or("passed on", crate::outcome::Outcome::as_str);
    let rule = match &click.proposal {
        Some(p) => format!(", always: {} {}", p.effect.as_str(), p.text()),
        None => String::new(),
    };
    format!("{outcome} by web:{}{rule}", click.user)
}

impl Pending {
    /// How many changes there have been. Read it before [`Pending::list`]: a page that shows
    /// this version shows at least what had happened by then.
    pub fn version(&self) -> u64 {
        self.lock().version
    }

    /// The waiting questions, oldest first.
    pub fn list(&self) -> Vec<Shown> {
        self.lock()
            .waiting
            .values()
            .map(|w| w.shown.clone())
            .collect()
    }

    /// The questions that left most recently, newest first.
    pub fn recent(&self) -> Vec<Departed> {
        self.lock().recent.iter().rev().cloned().collect()
    }

    /// The waiting question `id`.
    pub fn get(&self, id: &str) -> Option<Shown> {
        self.lock()
            .waiting
            .values()
            .find(|w| w.shown.id == id)
            .map(|w| w.shown.clone())
    }

    /// Answers the question `id`; false when it is no longer waiting.
    pub fn answer(&self, id: &str, click: Click) -> bool {
        let ending = answered(&click);
        let Some(waiting) = self.take(|_, w| w.shown.id == id, ending) else {
            return false;
        };
        waiting.answer.send(click).is_ok()
    }

    /// Every change from now on. A receiver that falls behind gets `Lagged` and should reread.
    pub fn subscribe(&self) -> broadcast::Receiver<Change> {
        self.changes.subscribe()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn add(&self, shown: Shown) -> (u64, oneshot::Receiver<Click>) {
        let (tx, rx) = oneshot::channel();
        let key = self.next.fetch_add(1, Ordering::Relaxed);
        let change = Change::Arrived {
            id: shown.id.clone(),
            session: shown.session.clone(),
        };
        {
            let mut state = self.lock();
            state.waiting.insert(key, Waiting { shown, answer: tx });
            state.version += 1;
        }
        let _ = self.changes.send(change);
        (key, rx)
    }

    /// Takes the first waiting question `which` picks off the page, recording how it ended.
    fn take(&self, which: impl Fn(u64, &Waiting) -> bool, ending: String) -> Option<Waiting> {
        let (waiting, departed) = {
            let mut state = self.lock();
            let key = state
                .waiting
                .iter()
                .find(|(k, w)| which(**k, w))
                .map(|(k, _)| *k)?;
            let waiting = state.waiting.remove(&key)?;
            let departed = Departed {
                id: waiting.shown.id.clone(),
                session: waiting.shown.session.clone(),
                tool: waiting.shown.tool.clone(),
                ending,
            };
            if state.recent.len() == RECENT {
                state.recent.pop_front();
            }
            state.recent.push_back(departed.clone());
            state.version += 1;
            (waiting, departed)
        };
        let _ = self.changes.send(Change::Left(departed));
        Some(waiting)
    }
}

/// Takes a question off the page when its wait ends for any reason other than a click
/// (answered elsewhere, cancelled, timed out, or the request dropped), saying which.
struct OnPage {
    pending: Arc<Pending>,
    key: u64,
    ending: &'static str,
}

impl Drop for OnPage {
    fn drop(&mut self) {
        let key = self.key;
        // Gone already when a click answered it.
        let _ = self.pending.take(|k, _| k == key, self.ending.to_owned());
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
            && !self
                .spec
                .sessions
                .iter()
                .any(|p| crate::config::token::grants_session(p, session))
        {
            return Some((None, Box::pin(async { Ok(Answer::from(Decision::Next)) })));
        }
        let arguments = question.arguments();
        let shown = Shown {
            id: question.id().to_owned(),
            session: session.to_owned(),
            agent: question.agent().id().to_owned(),
            tool: question.tool_name().to_owned(),
            call_id: question.call_id().map(str::to_owned),
            arguments: question
                .arguments_shown()
                .map(|a| serde_json::to_string_pretty(&a).unwrap_or_else(|_| a.to_string())),
            call: arguments.clone(),
            cwd: question.cwd().map(str::to_owned),
            reason: question.reason().map(str::to_owned),
            // The built-in guard passes every question it lets through: not news to a person.
            passed: question
                .passed()
                .into_iter()
                .filter(|p| p != crate::rules::protect::GATE_NAME)
                .collect(),
            offer: crate::rules::suggest::suggest(
                question.tool_name(),
                arguments.as_ref(),
                question.cwd(),
            ),
            since: Instant::now(),
        };
        let (key, clicked) = self.pending.add(shown);
        let on_page = OnPage {
            pending: self.pending.clone(),
            key,
            ending: ENDED_WITHDRAWN,
        };
        let timeout = self.spec.timeout;
        let question = question.clone();
        Some((
            None,
            Box::pin(async move {
                let mut on_page = on_page;
                tokio::select! {
                    click = clicked => match click {
                        Ok(click) => Ok(Answer {
                            decision: click.decision,
                            reason: click.reason.as_deref().and_then(crate::answer::clean_reason),
                            proposal: click.proposal,
                            rule: None,
                            by: Some(format!("web:{}", click.user)),
                            authority: Some(click.authority),
                        }),
                        Err(_) => Err(Failure::error("the web console went away")),
                    },
                    () = tokio::time::sleep(timeout) => {
                        on_page.ending = ENDED_TIMED_OUT;
                        Err(timed_out(timeout))
                    }
                    () = question.cancelled() => {
                        on_page.ending = ENDED_CANCELLED;
                        Ok(Answer::from(Decision::Cancel))
                    }
                }
            }),
        ))
    }
}
