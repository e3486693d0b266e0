//! Answers that wait (plugin API 0.3's `pending(correlation)`): the question parked without an
//! instance or a thread until the plugin's callback settles it, its `wait` runs out, or its
//! asker cancels it.
//!
//! A parked question is a map entry and a oneshot channel: the asking task awaits the channel,
//! a timer and the question's cancellation, and holds nothing of the plugin. The entry is the
//! only way in: a callback settles a question only while its entry lives, so a callback after
//! the timeout, after a cancellation or for a correlation never answered finds nothing.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::oneshot;

use crate::answer::Answer;

/// The longest correlation a plugin may answer `pending` with, in bytes.
pub const MAX_CORRELATION: usize = 256;

/// The longest "who answered" a callback may give, in bytes (cut at a character boundary).
pub const MAX_BY: usize = 128;

/// The longest callback body the host reads and hands to the plugin, in bytes.
pub const MAX_CALLBACK_BODY: usize = 64 << 10;

/// The longest `wait` an entry may set.
pub const MAX_WAIT: Duration = Duration::from_secs(24 * 3600);

/// The reason of a question `on-timeout = "reject"` settled because its wait ran out.
pub const WAIT_RAN_OUT: &str = "no answer came before the wait ran out";

/// The reason of a question `on-timeout` settled at once because no callback could reach this
/// host (an in-process hook, or a `serve` without `--callbacks`).
pub const NO_CALLBACKS: &str = "the answerer waits for a callback, and none can reach this host";

/// How a question its wait ran out on is settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnTimeout {
    /// `unavailable`, as any answerer that did not answer (the default).
    #[default]
    Unavailable,
    /// `rejected`, with [`WAIT_RAN_OUT`] as the reason.
    Reject,
}

impl OnTimeout {
    /// The deployment's spelling: `unavailable`, `reject`.
    pub const fn as_str(self) -> &'static str {
        match self {
            OnTimeout::Unavailable => "unavailable",
            OnTimeout::Reject => "reject",
        }
    }

    /// Reads the deployment's spelling.
    pub fn parse(word: &str) -> Option<OnTimeout> {
        match word {
            "unavailable" => Some(OnTimeout::Unavailable),
            "reject" => Some(OnTimeout::Reject),
            _ => None,
        }
    }
}

/// A plugin entry's `wait` and `on-timeout`: without a `wait`, the plugin may not answer
/// `pending`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wait {
    /// How long a question may wait for its callback.
    pub wait: Duration,
    /// How it settles when none came.
    pub on_timeout: OnTimeout,
}

/// Why a callback settled nothing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unsettled {
    /// No question of this plugin waits under the correlation: never asked, settled already,
    /// timed out or cancelled.
    #[error("no question of plugin {plugin:?} waits for correlation {correlation:?}")]
    NoneWaits {
        /// The plugin.
        plugin: String,
        /// The correlation the callback named.
        correlation: String,
    },
}

/// What one decision run of a plugin came to: an answer, or a wait under a correlation.
#[derive(Debug)]
pub(crate) enum Ruling {
    /// Decided (or `next`).
    Answer(Answer),
    /// `pending(correlation)`, as the plugin said it (checked by the caller).
    Pending(String),
}

/// What a plugin's callback settles: the question waiting under `correlation`, with `answer`
/// (whose `by` names who answered, as the callback says).
#[derive(Debug)]
pub(crate) struct Settlement {
    pub(crate) correlation: String,
    pub(crate) answer: Answer,
}

/// An HTTP request that arrived at `/plugins/<name>/callback`, as the plugin's `callback`
/// export reads it.
#[derive(Debug, Clone, Default)]
pub struct CallbackRequest {
    /// `POST`, `GET`, ...
    pub method: String,
    /// The query string without its `?`.
    pub query: String,
    /// The headers, names in lowercase.
    pub headers: Vec<(String, Vec<u8>)>,
    /// The body (at most [`MAX_CALLBACK_BODY`] bytes).
    pub body: Vec<u8>,
}

/// Why a callback settled no question.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallbackError {
    /// The plugin refused the request (a bad signature, a body it cannot read), or failed
    /// reading it.
    #[error("plugin {plugin:?} refused the callback: {why}")]
    Refused {
        /// The plugin.
        plugin: String,
        /// Its own words, scrubbed of its secrets, or how it failed.
        why: String,
    },
    /// The plugin read it, but no question waits for it.
    #[error(transparent)]
    Unsettled(#[from] Unsettled),
}

type Key = (String, String);

/// The questions parked now, by plugin and correlation; and whether anything can deliver a
/// callback to this host.
#[derive(Debug, Default)]
pub struct Waits {
    /// Each parked question's generation (so a stale `Parked` never removes a newer question's
    /// entry) and its answer's sender.
    parked: Mutex<HashMap<Key, (u64, oneshot::Sender<Answer>)>>,
    generation: std::sync::atomic::AtomicU64,
    receiving: AtomicBool,
    /// Decisions running now, by plugin: a callback may come back before the decision that
    /// asked for it has parked its question (a service that answers at once).
    running: Mutex<HashMap<String, usize>>,
    /// Told whenever a decision of any plugin ends.
    ended: tokio::sync::Notify,
}

/// A decision of a plugin that may wait, running: while it lives, a callback for a question the
/// plugin has not parked yet waits for it.
pub(crate) struct Running<'a> {
    waits: &'a Waits,
    plugin: String,
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        {
            let mut running = self.waits.running.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(n) = running.get_mut(&self.plugin) {
                *n -= 1;
                if *n == 0 {
                    running.remove(&self.plugin);
                }
            }
        }
        self.waits.ended.notify_waiters();
    }
}

/// A parked question: the answer's receiver. Dropping it (the wait ran out, the asker
/// cancelled) removes its entry, so a later callback finds nothing.
pub(crate) struct Parked<'a> {
    waits: &'a Waits,
    key: Key,
    generation: u64,
    pub(crate) answer: oneshot::Receiver<Answer>,
}

impl Drop for Parked<'_> {
    fn drop(&mut self) {
        let mut parked = self.waits.lock();
        if parked
            .get(&self.key)
            .is_some_and(|(g, _)| *g == self.generation)
        {
            parked.remove(&self.key);
        }
    }
}

impl Waits {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, (u64, oneshot::Sender<Answer>)>> {
        self.parked.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Says that callbacks can reach this host now (`serve --callbacks` listens): from here on
    /// a `pending` answer parks its question instead of settling it at once.
    pub fn accept_callbacks(&self) {
        self.receiving.store(true, Ordering::Release);
    }

    /// Whether a callback can reach this host.
    pub fn receiving(&self) -> bool {
        self.receiving.load(Ordering::Acquire)
    }

    /// How many questions wait now.
    pub fn waiting(&self) -> usize {
        self.lock().len()
    }

    /// How many questions of `plugin` wait now.
    pub fn waiting_for(&self, plugin: &str) -> usize {
        self.lock().keys().filter(|(p, _)| p == plugin).count()
    }

    /// Parks a question of `plugin` under `correlation`; `None` when one waits under it already.
    pub(crate) fn park(&self, plugin: &str, correlation: &str) -> Option<Parked<'_>> {
        let key = (plugin.to_owned(), correlation.to_owned());
        let mut parked = self.lock();
        if parked.get(&key).is_some_and(|(_, tx)| !tx.is_closed()) {
            return None;
        }
        let (tx, rx) = oneshot::channel();
        let generation = self.generation.fetch_add(1, Ordering::Relaxed);
        parked.insert(key.clone(), (generation, tx));
        Some(Parked {
            waits: self,
            key,
            generation,
            answer: rx,
        })
    }

    /// Marks a decision of `plugin` as running until the guard is dropped (after it parked its
    /// question, if it did).
    pub(crate) fn running(&self, plugin: &str) -> Running<'_> {
        *self
            .running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(plugin.to_owned())
            .or_default() += 1;
        Running {
            waits: self,
            plugin: plugin.to_owned(),
        }
    }

    fn runs(&self, plugin: &str) -> bool {
        self.running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains_key(plugin)
    }

    /// [`Waits::settle`], and when no question waits under `correlation` yet while decisions of
    /// `plugin` still run (the callback overtook the decision that asked for it), again each time
    /// one of them ends, until none runs or `patience` (the plugin's timeout, which bounds any
    /// run that began before the callback) is over.
    pub async fn settle_when_parked(
        &self,
        plugin: &str,
        correlation: &str,
        answer: Answer,
        patience: Duration,
    ) -> Result<(), Unsettled> {
        let give_up = tokio::time::Instant::now() + patience;
        loop {
            let ended = self.ended.notified();
            tokio::pin!(ended);
            // Registered before looking, so an end between the look and the wait is not missed.
            ended.as_mut().enable();
            match self.settle(plugin, correlation, answer.clone()) {
                Ok(()) => return Ok(()),
                Err(e) if !self.runs(plugin) => return Err(e),
                Err(e) => {
                    if tokio::time::timeout_at(give_up, ended).await.is_err() {
                        return Err(e);
                    }
                }
            }
        }
    }

    /// Settles the question `plugin` parked under `correlation` with `answer`.
    pub fn settle(&self, plugin: &str, correlation: &str, answer: Answer) -> Result<(), Unsettled> {
        let sender = self
            .lock()
            .remove(&(plugin.to_owned(), correlation.to_owned()));
        let none = || Unsettled::NoneWaits {
            plugin: plugin.to_owned(),
            correlation: correlation.to_owned(),
        };
        sender.ok_or_else(none)?.1.send(answer).map_err(|_| none())
    }
}

/// Whether `correlation` is one a plugin may wait under: 1 to [`MAX_CORRELATION`] bytes, no
/// control characters.
pub fn valid_correlation(correlation: &str) -> bool {
    !correlation.is_empty()
        && correlation.len() <= MAX_CORRELATION
        && !correlation.chars().any(char::is_control)
}

/// Who answered, as a callback says it, made fit for the audit: control characters dropped,
/// trimmed, cut to [`MAX_BY`] bytes; `None` when nothing is left.
pub fn clean_by(by: &str) -> Option<String> {
    let cleaned: String = by.chars().filter(|c| !c.is_control()).collect();
    let mut cleaned = cleaned.trim();
    if cleaned.len() > MAX_BY {
        let mut end = MAX_BY;
        while !cleaned.is_char_boundary(end) {
            end -= 1;
        }
        cleaned = cleaned[..end].trim_end();
    }
    (!cleaned.is_empty()).then(|| cleaned.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::Decision;

    #[test]
    fn a_callback_settles_only_a_question_that_still_waits() {
        let waits = Waits::default();
        let mut parked = waits.park("slack", "q1").unwrap();
        assert!(
            waits.park("slack", "q1").is_none(),
            "one question per correlation"
        );
        assert!(
            waits.park("other", "q1").is_some(),
            "correlations are per plugin"
        );
        waits
            .settle("slack", "q1", Answer::from(Decision::AllowOnce))
            .unwrap();
        assert_eq!(
            parked.answer.try_recv().unwrap().decision,
            Decision::AllowOnce
        );
        let late = waits.settle("slack", "q1", Answer::from(Decision::AllowOnce));
        assert_eq!(
            late.unwrap_err().to_string(),
            "no question of plugin \"slack\" waits for correlation \"q1\""
        );
    }

    #[test]
    fn a_question_given_up_is_no_longer_settled() {
        let waits = Waits::default();
        drop(waits.park("slack", "q1").unwrap());
        assert_eq!(waits.waiting(), 0);
        assert!(
            waits
                .settle("slack", "q1", Answer::from(Decision::AllowOnce))
                .is_err()
        );
    }

    #[tokio::test]
    async fn a_callback_that_overtakes_its_decision_waits_for_the_park() {
        let waits = std::sync::Arc::new(Waits::default());
        let running = waits.running("hook");
        let early = {
            let waits = waits.clone();
            tokio::spawn(async move {
                waits
                    .settle_when_parked(
                        "hook",
                        "q1",
                        Answer::from(Decision::AllowOnce),
                        Duration::from_secs(60),
                    )
                    .await
            })
        };
        // The callback is in and found nothing parked; the decision parks, then ends.
        tokio::task::yield_now().await;
        let mut parked = waits.park("hook", "q1").unwrap();
        drop(running);
        early.await.unwrap().unwrap();
        assert_eq!(
            parked.answer.try_recv().unwrap().decision,
            Decision::AllowOnce
        );
        // With no decision running, a callback for nothing parked is answered at once.
        let late = waits
            .settle_when_parked(
                "hook",
                "q2",
                Answer::from(Decision::AllowOnce),
                Duration::from_secs(60),
            )
            .await;
        assert!(late.is_err());
    }

    #[test]
    fn correlations_and_names_are_bounded_and_printable() {
        assert!(valid_correlation("C0123.1712345678.000100"));
        assert!(!valid_correlation(""));
        assert!(!valid_correlation("a\nb"));
        assert!(!valid_correlation(&"x".repeat(MAX_CORRELATION + 1)));
        assert_eq!(clean_by(" alice\u{1b}[31m ").as_deref(), Some("alice[31m"));
        assert_eq!(clean_by("\n\t"), None);
        assert_eq!(clean_by(&"é".repeat(100)).unwrap().len(), MAX_BY);
    }
}
