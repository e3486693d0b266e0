//! Hook sessions kept open between calls. An agent CLI runs its hook once per tool call, so
//! without this each call through `serve` opened the session's log again and read, checked and
//! folded every record in it: a call cost time in proportion to how long the session had run
//! (about 3 µs a line, 14 ms more a call after a thousand tool calls). The server holds a hook's
//! session for a while after its call instead, so the next call finds it open.
//!
//! The hold is bounded both ways: at most [`MOST`] sessions, the one idle longest let go first,
//! and none longer than [`IDLE`] after its last call, so the log's lock goes back to other
//! processes once the agent stops. Letting go only drops the server's handle: a session a
//! connection or a question still uses stays open through theirs.

use std::collections::HashMap;
use std::sync::{Mutex, Weak};
use std::time::{Duration, Instant};

use crate::agent::Agent;

/// How long a hook's session stays open after its last call.
pub const IDLE: Duration = Duration::from_secs(300);

/// Most hook sessions held open between calls: an open session keeps its fold, which holds the
/// arguments of every tool call it recorded, in memory.
pub const MOST: usize = 16;

/// The hook sessions held open, each with its agent and when it was last asked about.
#[derive(Default)]
pub(super) struct WarmSessions {
    held: Mutex<HashMap<String, (Agent, Instant)>>,
}

impl WarmSessions {
    /// Holds `agent`'s session open after a call at `now`, letting go of what is over the bounds.
    pub(super) fn keep(&self, session: &str, agent: Agent, now: Instant) {
        let released = {
            let mut held = self.lock();
            held.insert(session.to_owned(), (agent, now));
            let mut released = take_idle(&mut held, now);
            while held.len() > MOST {
                let Some(oldest) = held
                    .iter()
                    .min_by_key(|(_, (_, at))| *at)
                    .map(|(id, _)| id.clone())
                else {
                    break;
                };
                released.extend(held.remove(&oldest));
            }
            released
        };
        // Closing a log may sync it: never under the lock.
        drop(released);
    }

    /// Lets go of the sessions idle for [`IDLE`] or more at `now`.
    pub(super) fn sweep(&self, now: Instant) {
        let released = take_idle(&mut self.lock(), now);
        drop(released);
    }

    /// Lets go of every session (the server stops).
    pub(super) fn clear(&self) {
        let released: Vec<_> = self.lock().drain().collect();
        drop(released);
    }

    /// The sessions held now.
    #[cfg(test)]
    pub(super) fn sessions(&self) -> Vec<String> {
        let mut ids: Vec<String> = self.lock().keys().cloned().collect();
        ids.sort();
        ids
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Agent, Instant)>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn take_idle(held: &mut HashMap<String, (Agent, Instant)>, now: Instant) -> Vec<(Agent, Instant)> {
    let idle: Vec<String> = held
        .iter()
        .filter(|(_, (_, at))| now.saturating_duration_since(*at) >= IDLE)
        .map(|(id, _)| id.clone())
        .collect();
    idle.iter().filter_map(|id| held.remove(id)).collect()
}

/// Lets go of idle sessions every quarter of [`IDLE`] while `warm` lives and `stopping` is not
/// cancelled.
pub(super) fn sweep_while(warm: Weak<WarmSessions>, stopping: tokio_util::sync::CancellationToken) {
    tokio::spawn(async move {
        let mut every = tokio::time::interval(IDLE / 4);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = stopping.cancelled() => break,
                _ = every.tick() => {}
            }
            let Some(warm) = warm.upgrade() else { break };
            warm.sweep(Instant::now());
        }
        if let Some(warm) = warm.upgrade() {
            warm.clear();
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ApprovalService;
    use crate::Policy;

    async fn agent(service: &ApprovalService, session: &str) -> Agent {
        service.agent(session, "hook").await.unwrap()
    }

    #[tokio::test]
    async fn sessions_are_let_go_when_idle_and_the_longest_idle_first_over_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let service = ApprovalService::with_store(
            std::sync::Arc::new(crate::DirStore::new(dir.path())),
            Policy::Ask,
        );
        let warm = WarmSessions::default();
        let start = Instant::now();
        warm.keep("a", agent(&service, "a").await, start);
        warm.keep("b", agent(&service, "b").await, start + IDLE / 2);
        assert_eq!(warm.sessions(), ["a", "b"]);
        warm.sweep(start + IDLE - Duration::from_millis(1));
        assert_eq!(warm.sessions(), ["a", "b"], "neither idle for IDLE yet");
        warm.sweep(start + IDLE);
        assert_eq!(warm.sessions(), ["b"], "a idle for IDLE");
        // Over the bound, the one asked about longest ago goes.
        let later = start + IDLE / 2 + Duration::from_secs(1);
        for i in 0..MOST {
            let id = format!("s{i:03}");
            warm.keep(
                &id,
                agent(&service, &id).await,
                later + Duration::from_millis(i as u64),
            );
        }
        let held = warm.sessions();
        assert_eq!(held.len(), MOST);
        assert!(!held.contains(&"b".to_owned()), "b was idle longest");
        warm.clear();
        assert!(warm.sessions().is_empty());
    }
}
