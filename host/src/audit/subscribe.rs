//! Subscriptions to sessions' appended events: how `serve` notifications and a console follow a
//! session without polling its log.
//!
//! A subscriber sees each record once it is durable, in `seq` order, for the events appended after
//! it subscribed. It runs on the path that completes the commit, so it must be quick (hand the
//! record to a channel). A subscriber can never break what it watches: its error or panic is
//! contained, reported once as a warning naming it, and the subscriber is dropped; the appends,
//! the asked/decided pair and the request's outcome are untouched.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock, Weak};

use crate::audit::event::Record;
use crate::outcome::panic_message;

/// Called with each durable record of the sessions it watches: `(session id, record)`.
/// Implemented for any `Fn(&str, &Record) -> Result<(), String>`.
pub trait Subscriber: Send + Sync + 'static {
    /// Takes one durable record. An error drops the subscription (reported once).
    fn event(&self, session: &str, record: &Record) -> Result<(), String>;
}

impl<F> Subscriber for F
where
    F: Fn(&str, &Record) -> Result<(), String> + Send + Sync + 'static,
{
    fn event(&self, session: &str, record: &Record) -> Result<(), String> {
        self(session, record)
    }
}

struct Entry {
    id: u64,
    name: String,
    /// `None`: every session.
    session: Option<String>,
    subscriber: Arc<dyn Subscriber>,
    failed: AtomicBool,
}

#[derive(Default)]
struct Entries {
    next_id: u64,
    list: Vec<Arc<Entry>>,
}

/// The subscriptions of one service.
#[derive(Default)]
pub(crate) struct Subscribers {
    entries: RwLock<Entries>,
    /// Whether any subscription exists: appends skip copying records for delivery when none does.
    any: AtomicBool,
}

/// A live subscription; dropping it (or [`Subscription::cancel`]) ends it.
#[must_use = "dropping a Subscription ends it at once"]
pub struct Subscription {
    id: u64,
    name: String,
    subscribers: Weak<Subscribers>,
}

impl Subscription {
    /// The subscriber's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Ends the subscription now.
    pub fn cancel(self) {}
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription")
            .field("name", &self.name)
            .finish()
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        if let Some(subscribers) = self.subscribers.upgrade() {
            subscribers.remove(self.id);
        }
    }
}

impl Subscribers {
    pub(crate) fn add(
        self: &Arc<Self>,
        name: String,
        session: Option<String>,
        subscriber: Arc<dyn Subscriber>,
    ) -> Subscription {
        let mut entries = self.entries.write().unwrap_or_else(|p| p.into_inner());
        entries.next_id += 1;
        let id = entries.next_id;
        entries.list.push(Arc::new(Entry {
            id,
            name: name.clone(),
            session,
            subscriber,
            failed: AtomicBool::new(false),
        }));
        self.any.store(true, Ordering::Release);
        Subscription {
            id,
            name,
            subscribers: Arc::downgrade(self),
        }
    }

    fn remove(&self, id: u64) {
        let mut entries = self.entries.write().unwrap_or_else(|p| p.into_inner());
        entries.list.retain(|e| e.id != id);
        self.any.store(!entries.list.is_empty(), Ordering::Release);
    }

    /// Whether a record appended now would be delivered to anyone.
    pub(crate) fn active(&self) -> bool {
        self.any.load(Ordering::Acquire)
    }

    /// Delivers durable records of `session`, in order, to the subscribers watching it.
    pub(crate) fn deliver(&self, session: &str, records: &[Record]) {
        if records.is_empty() || !self.active() {
            return;
        }
        let watching: Vec<Arc<Entry>> = {
            let entries = self.entries.read().unwrap_or_else(|p| p.into_inner());
            entries
                .list
                .iter()
                .filter(|e| e.session.as_deref().is_none_or(|s| s == session))
                .cloned()
                .collect()
        };
        for entry in watching {
            for record in records {
                if entry.failed.load(Ordering::Acquire) {
                    break;
                }
                let result = std::panic::catch_unwind(AssertUnwindSafe(|| {
                    entry.subscriber.event(session, record)
                }));
                let why = match result {
                    Ok(Ok(())) => continue,
                    Ok(Err(why)) => why,
                    Err(payload) => format!("panicked: {}", panic_message(&*payload)),
                };
                if !entry.failed.swap(true, Ordering::AcqRel) {
                    tracing::warn!(subscriber = %entry.name, session, seq = record.seq, error = %why, "event subscriber failed; it is unsubscribed");
                    self.remove(entry.id);
                }
            }
        }
    }
}
