//! The waterfall of answerers: listeners asked in order until one decides.
//!
//! Gates go in front ([`Position::Front`]), terminal answerers at the back. Each listener decides
//! or says `next`; the first decision wins and later listeners never run; no listener, or every
//! listener delegating, settles `unavailable`. A listener that fails (returns an error, panics,
//! answers outside the vocabulary) settles the whole request `unavailable` and stops the
//! waterfall, so a broken gate can never let a permissive answerer behind it grant.
//!
//! Registering returns a [`Registration`]; dropping it removes the listener, so the next request
//! fails closed. A request already running keeps the listeners it started with.
//!
//! The files: `listener.rs` (what an answerer implements), `question.rs` (what it is asked),
//! `after.rs` (what sees a question once it is settled), `hops.rs` (each listener's turn, for a
//! traced question); this file keeps the ordered list and walks it.

mod after;
mod hops;
mod listener;
mod question;

pub use after::AfterDecision;
pub use hops::{Hop, HopAnswer, Hops};
pub use listener::{AnswerFuture, Explained, ImmediateAnswer, Listener, ListenerFuture};
pub use question::Question;

use std::fmt;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, RwLock, Weak};

use futures_util::FutureExt;

use crate::agent::{Agent, AgentInner};
use crate::answer::{Answer, Proposal};
use crate::outcome::{Decision, Failure, FailureKind, Outcome, panic_message};

/// Which requests a listener sees.
#[derive(Debug, Clone)]
pub enum Scope {
    /// Every request.
    Global,
    /// Only requests from this exact agent object.
    Agent(Agent),
}

/// Where a listener joins the waterfall.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Position {
    /// Before every listener registered so far: for decide-or-delegate gates.
    Front,
    /// After every listener registered so far with `Front` or `Back`: for terminal answerers.
    Back,
    /// After everything, and kept behind `Back` listeners registered later: for fallback
    /// answerers such as a connected client.
    Last,
    /// Before everything, and kept ahead of `Front` listeners registered later: for the
    /// standing rules, which decide before any plugin.
    First,
    /// Before everything, even `First` listeners registered later: for the built-in
    /// protections, which no rule may get ahead of.
    Guard,
}

struct Entry {
    id: u64,
    last: bool,
    first: bool,
    guard: bool,
    /// Shared, so a traced question's hops name it without copying.
    name: Arc<str>,
    scope: Option<Weak<AgentInner>>,
    listener: Arc<dyn Listener>,
}

impl Entry {
    fn sees(&self, agent: &Agent) -> bool {
        match &self.scope {
            None => true,
            // The Weak keeps the allocation, so the address is never reused while we compare.
            Some(weak) => std::ptr::eq(weak.as_ptr(), Arc::as_ptr(&agent.inner)),
        }
    }
}

#[derive(Default)]
struct Entries {
    next_id: u64,
    list: Vec<Arc<Entry>>,
}

/// The ordered listeners of one service.
#[derive(Clone, Default)]
pub struct Waterfall {
    entries: Arc<RwLock<Entries>>,
}

impl fmt::Debug for Waterfall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.names()).finish()
    }
}

/// A registered listener. Dropping it (or calling [`Registration::unregister`]) removes the
/// listener from the waterfall.
#[must_use = "dropping a Registration removes its listener at once"]
pub struct Registration {
    id: u64,
    name: String,
    entries: Weak<RwLock<Entries>>,
}

impl Registration {
    /// The listener's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Removes the listener now.
    pub fn unregister(self) {}
}

impl fmt::Debug for Registration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registration")
            .field("name", &self.name)
            .finish()
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Some(entries) = self.entries.upgrade() {
            let mut entries = entries.write().unwrap_or_else(|p| p.into_inner());
            entries.list.retain(|e| e.id != self.id);
        }
    }
}

/// How the waterfall settled one question.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settled {
    /// The outcome.
    pub outcome: Outcome,
    /// The listener that decided, if one did.
    pub answerer: Option<String>,
    /// The version (digest) of the listener that decided or failed, when it has one.
    pub version: Option<String>,
    /// The listener that failed and how, if one did.
    pub failure: Option<(String, Failure)>,
    /// Why, as the deciding listener said it ([cleaned](crate::answer::clean_reason)).
    pub reason: Option<String>,
    /// A standing rule the deciding listener proposed.
    pub proposal: Option<Proposal>,
    /// Whether the deciding listener [left the process](Listener::leaves_process): a person (or
    /// a remote service acting for one) answered, not an in-process gate.
    pub answered_outside: bool,
    /// The standing rule that decided, when one did (the answerer is then `rule:<id>`).
    pub rule: Option<crate::answer::RuleRef>,
    /// Who stands behind `proposal`, as the deciding listener said.
    pub authority: Option<crate::answer::Authority>,
}

impl Settled {
    /// Settled without any listener deciding.
    pub fn plain(outcome: Outcome) -> Self {
        Settled {
            outcome,
            answerer: None,
            version: None,
            failure: None,
            reason: None,
            proposal: None,
            answered_outside: false,
            rule: None,
            authority: None,
        }
    }

    /// Settled unavailable because `listener` failed.
    fn failed(listener: &str, version: Option<Arc<str>>, failure: Failure) -> Self {
        Settled {
            version: version.as_deref().map(str::to_owned),
            failure: Some((listener.to_owned(), failure)),
            ..Settled::plain(Outcome::Unavailable)
        }
    }
}

impl Waterfall {
    /// An empty waterfall.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `listener` under `name` at `position`, seeing the requests `scope` allows.
    pub fn register(
        &self,
        name: impl Into<String>,
        scope: Scope,
        position: Position,
        listener: impl Listener,
    ) -> Registration {
        self.register_arc(name, scope, position, Arc::new(listener))
    }

    /// [`Waterfall::register`] for a listener already behind an `Arc`.
    pub fn register_arc(
        &self,
        name: impl Into<String>,
        scope: Scope,
        position: Position,
        listener: Arc<dyn Listener>,
    ) -> Registration {
        let mut entries = self.entries.write().unwrap_or_else(|p| p.into_inner());
        self.insert(&mut entries, name.into(), scope, position, listener)
    }

    fn insert(
        &self,
        entries: &mut Entries,
        name: String,
        scope: Scope,
        position: Position,
        listener: Arc<dyn Listener>,
    ) -> Registration {
        entries.next_id += 1;
        let entry = Arc::new(Entry {
            id: entries.next_id,
            last: position == Position::Last,
            first: position == Position::First,
            guard: position == Position::Guard,
            name: Arc::from(name.as_str()),
            scope: match scope {
                Scope::Global => None,
                Scope::Agent(agent) => Some(Arc::downgrade(&agent.inner)),
            },
            listener,
        });
        let id = entry.id;
        match position {
            Position::Guard => entries.list.insert(0, entry),
            Position::First => {
                let at = entries
                    .list
                    .iter()
                    .position(|e| !e.guard)
                    .unwrap_or(entries.list.len());
                entries.list.insert(at, entry);
            }
            Position::Front => {
                let at = entries
                    .list
                    .iter()
                    .position(|e| !e.first && !e.guard)
                    .unwrap_or(entries.list.len());
                entries.list.insert(at, entry);
            }
            Position::Back => {
                let at = entries
                    .list
                    .iter()
                    .position(|e| e.last)
                    .unwrap_or(entries.list.len());
                entries.list.insert(at, entry);
            }
            Position::Last => entries.list.push(entry),
        }
        Registration {
            id,
            name,
            entries: Arc::downgrade(&self.entries),
        }
    }

    /// Removes `remove` and adds `add` (in order) as one change: no request sees the waterfall
    /// between the two, so swapping a gate never leaves a moment without it.
    pub fn swap(
        &self,
        remove: Vec<Registration>,
        add: Vec<(String, Scope, Position, Arc<dyn Listener>)>,
    ) -> Vec<Registration> {
        let mut entries = self.entries.write().unwrap_or_else(|p| p.into_inner());
        let ids: Vec<u64> = remove.iter().map(|r| r.id).collect();
        entries.list.retain(|e| !ids.contains(&e.id));
        let added = add
            .into_iter()
            .map(|(name, scope, position, listener)| {
                self.insert(&mut entries, name, scope, position, listener)
            })
            .collect();
        drop(entries);
        // Their entries are gone already; dropping them now is a no-op.
        drop(remove);
        added
    }

    /// The registered listeners' names, in the order they are asked.
    pub fn names(&self) -> Vec<String> {
        let entries = self.entries.read().unwrap_or_else(|p| p.into_inner());
        entries.list.iter().map(|e| e.name.to_string()).collect()
    }

    /// Asks the listeners that see `question`'s agent, in order, until one decides.
    pub async fn run(&self, question: &Question) -> Settled {
        let snapshot: Vec<Arc<Entry>> = {
            let entries = self.entries.read().unwrap_or_else(|p| p.into_inner());
            entries
                .list
                .iter()
                .filter(|e| e.sees(question.agent()))
                .cloned()
                .collect()
        };
        // A traced question's hops: each starts where the one before it ended.
        let mut hop_start = question.hops().map(Hops::now);
        for (i, entry) in snapshot.iter().enumerate() {
            if entry.listener.leaves_process() {
                // Every listener before this one said `next` (any other answer returned).
                question.set_passed(snapshot[..i].iter().map(|e| e.name.to_string()).collect());
            }
            if entry.listener.leaves_process()
                && let Err(e) = question.ensure_durable().await
            {
                tracing::error!(listener = %entry.name, question = question.id(), error = %e, "the question could not be made durable; it is not sent");
                return Settled::failed(&entry.name, None, Failure::error(e.to_string()));
            }
            // A panic may come from answering at once, from building the future or from polling
            // it; all are contained.
            let mut version = None;
            let answer = match std::panic::catch_unwind(AssertUnwindSafe(|| {
                entry.listener.decide_now(question)
            })) {
                Ok(Some((v, answer))) => {
                    version = v;
                    Ok(answer)
                }
                Ok(None) => match std::panic::catch_unwind(AssertUnwindSafe(|| {
                    entry.listener.answer(question)
                })) {
                    Ok(Some((v, future))) => {
                        version = v;
                        AssertUnwindSafe(future).catch_unwind().await
                    }
                    Ok(None) => match std::panic::catch_unwind(AssertUnwindSafe(|| {
                        entry.listener.decide_versioned(question.clone())
                    })) {
                        Ok((v, future)) => {
                            version = v;
                            AssertUnwindSafe(future)
                                .catch_unwind()
                                .await
                                .map(|r| r.map(Answer::from))
                        }
                        Err(payload) => Err(payload),
                    },
                    Err(payload) => Err(payload),
                },
                Err(payload) => Err(payload),
            };
            if let (Some(hops), Some(start)) = (question.hops(), hop_start) {
                let end = hops.now();
                hop_start = Some(end);
                hops.push(Hop {
                    listener: entry.name.clone(),
                    version: version.clone(),
                    outside: entry.listener.leaves_process(),
                    start,
                    end,
                    answer: match &answer {
                        Ok(Ok(a)) => a
                            .decision
                            .outcome()
                            .map_or(HopAnswer::Next, HopAnswer::Decided),
                        Ok(Err(f)) => HopAnswer::Failed(f.kind),
                        Err(_) => HopAnswer::Failed(FailureKind::Panic),
                    },
                });
            }
            let failure = match answer {
                Ok(Ok(Answer {
                    decision: Decision::Next,
                    ..
                })) => continue,
                Ok(Ok(answer)) => {
                    let outcome = answer.decision.outcome().unwrap_or(Outcome::Unavailable);
                    let answerer = match (&answer.rule, &answer.by) {
                        (Some(rule), _) => format!("rule:{}", rule.id),
                        (None, Some(by)) => by.clone(),
                        (None, None) => entry.name.to_string(),
                    };
                    return Settled {
                        outcome,
                        answerer: Some(answerer),
                        version: version.as_deref().map(str::to_owned),
                        failure: None,
                        // Native listeners build answers by hand: cleaned here, whoever made it.
                        reason: answer
                            .reason
                            .as_deref()
                            .and_then(crate::answer::clean_reason),
                        proposal: answer.proposal,
                        answered_outside: entry.listener.leaves_process(),
                        rule: answer.rule,
                        authority: answer.authority,
                    };
                }
                Ok(Err(failure)) => failure,
                Err(payload) => Failure::new(FailureKind::Panic, panic_message(&*payload)),
            };
            tracing::warn!(listener = %entry.name, question = question.id(), %failure, "listener failed; the request settles unavailable");
            return Settled::failed(&entry.name, version, failure);
        }
        Settled::plain(Outcome::Unavailable)
    }
}
