//! Hook sessions kept open between calls. An agent CLI runs its hook once per tool call, so
//! without this each call through `serve` opened the session's log again and read, checked and
//! folded every record in it: a call cost time in proportion to how long the session had run
//! (about 3 µs a line, 14 ms more a call after a thousand tool calls). The server holds a hook's
//! session for a while after its call instead, so the next call finds it open.
//!
//! The hold is bounded both ways (`[limits] held_sessions` and `held_session_idle_s`, changed by a
//! reload): at most so many sessions, the one idle longest let go first, and none much longer than
//! the idle time after its last call ([`SWEEP`] more at most), so the log's lock goes back to other
//! processes once the agent stops. A call that fails lets its session go,
//! so the next one opens the log again. Letting go only drops the server's handle: a session a
//! connection or a question still uses stays open through theirs.

use std::collections::HashMap;
use std::sync::{Mutex, Weak};
use std::time::{Duration, Instant};

use crate::agent::Agent;

/// How often held sessions are checked for their idle time: a session is let go at most this
/// long after its time is up.
pub const SWEEP: Duration = Duration::from_secs(30);

/// The hook sessions held open, each with its agent and when it was last asked about.
#[derive(Default)]
pub(super) struct WarmSessions {
    held: Mutex<Held>,
}

struct Held {
    sessions: HashMap<String, (Agent, Instant)>,
    /// Most sessions held: an open session keeps its fold, which holds the arguments of every
    /// tool call it recorded, in memory.
    most: usize,
    /// How long a session stays held after its last call.
    idle: Duration,
    /// Set when the server stops: nothing is held from then on.
    closed: bool,
}

impl Default for Held {
    fn default() -> Self {
        let limits = crate::config::limits::Limits::default();
        Held {
            sessions: HashMap::new(),
            most: limits.held_sessions,
            idle: limits.held_session_idle,
            closed: false,
        }
    }
}

/// Handles let go of, to be dropped where blocking is allowed: closing a log may sync it, and on
/// PostgreSQL gives its lease back through the database.
type Released = Vec<(Agent, Instant)>;

impl WarmSessions {
    /// Holds at most `most` sessions, each up to `idle` after its last call (`[limits]`; at start
    /// and on a reload). Sessions over the new bounds are let go at the next call or sweep.
    pub(super) fn set_bounds(&self, most: usize, idle: Duration) {
        let mut held = self.lock();
        held.most = most.max(1);
        held.idle = idle;
    }

    /// Holds `agent`'s session open after a call at `now`, letting go of what is over the bounds.
    pub(super) fn keep(&self, session: &str, agent: Agent, now: Instant) {
        let released = {
            let mut held = self.lock();
            if held.closed {
                drop(held);
                close(vec![(agent, now)]);
                return;
            }
            let mut released: Released = held
                .sessions
                .insert(session.to_owned(), (agent, now))
                .into_iter()
                .collect();
            released.extend(take_idle(&mut held, now));
            released.extend(over_bound(&mut held));
            released
        };
        close(released);
    }

    /// Lets go of `session` (a call about it failed: its log may be one that accepts nothing
    /// more, and the next call should open it again).
    pub(super) fn forget(&self, session: &str) {
        let released: Released = self.lock().sessions.remove(session).into_iter().collect();
        close(released);
    }

    /// Lets go of the sessions idle for their idle time or more at `now`, and of the ones idle
    /// longest over the bound.
    pub(super) fn sweep(&self, now: Instant) {
        let released = {
            let mut held = self.lock();
            let mut released = take_idle(&mut held, now);
            released.extend(over_bound(&mut held));
            released
        };
        close(released);
    }

    /// Lets go of every session and holds none from now on (the server stops); returns once
    /// their logs are closed.
    pub(super) async fn clear(&self) {
        let released: Released = {
            let mut held = self.lock();
            held.closed = true;
            held.sessions.drain().map(|(_, entry)| entry).collect()
        };
        if !released.is_empty() {
            let _ = tokio::task::spawn_blocking(move || drop(released)).await;
        }
    }

    /// The sessions held now.
    #[cfg(test)]
    pub(super) fn sessions(&self) -> Vec<String> {
        let mut ids: Vec<String> = self.lock().sessions.keys().cloned().collect();
        ids.sort();
        ids
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Drops `released` off the async workers (never under the lock).
fn close(released: Released) {
    if released.is_empty() {
        return;
    }
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => {
            runtime.spawn_blocking(move || drop(released));
        }
        Err(_) => drop(released),
    }
}

fn take_idle(held: &mut Held, now: Instant) -> Released {
    let most_idle = held.idle;
    let idle: Vec<String> = held
        .sessions
        .iter()
        .filter(|(_, (_, at))| now.saturating_duration_since(*at) >= most_idle)
        .map(|(id, _)| id.clone())
        .collect();
    idle.iter()
        .filter_map(|id| held.sessions.remove(id))
        .collect()
}

/// The sessions idle longest, while more are held than the bound.
fn over_bound(held: &mut Held) -> Released {
    let mut released = Released::new();
    while held.sessions.len() > held.most {
        let Some(oldest) = held
            .sessions
            .iter()
            .min_by_key(|(_, (_, at))| *at)
            .map(|(id, _)| id.clone())
        else {
            break;
        };
        released.extend(held.sessions.remove(&oldest));
    }
    released
}

/// Lets go of idle sessions every [`SWEEP`] while `warm` lives and `stopping` is not cancelled.
pub(super) fn sweep_while(warm: Weak<WarmSessions>, stopping: tokio_util::sync::CancellationToken) {
    tokio::spawn(async move {
        let mut every = tokio::time::interval(SWEEP);
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
            warm.clear().await;
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
        let limits = crate::config::limits::Limits::default();
        let (idle, most) = (limits.held_session_idle, limits.held_sessions);
        let start = Instant::now();
        warm.keep("a", agent(&service, "a").await, start);
        warm.keep("b", agent(&service, "b").await, start + idle / 2);
        assert_eq!(warm.sessions(), ["a", "b"]);
        warm.sweep(start + idle - Duration::from_millis(1));
        assert_eq!(
            warm.sessions(),
            ["a", "b"],
            "neither idle for its idle time yet"
        );
        warm.sweep(start + idle);
        assert_eq!(warm.sessions(), ["b"], "a idle for its idle time");
        // Over the bound, the one asked about longest ago goes.
        let later = start + idle / 2 + Duration::from_secs(1);
        for i in 0..most {
            let id = format!("s{i:03}");
            warm.keep(
                &id,
                agent(&service, &id).await,
                later + Duration::from_millis(i as u64),
            );
        }
        let held = warm.sessions();
        assert_eq!(held.len(), most);
        assert!(!held.contains(&"b".to_owned()), "b was idle longest");
        warm.forget("s000");
        assert_eq!(
            warm.sessions().len(),
            most - 1,
            "a failed call lets its session go"
        );
        warm.clear().await;
        assert!(warm.sessions().is_empty());
        // After the server stops nothing is held, though a late call may still end.
        warm.keep("late", agent(&service, "late").await, later);
        assert!(warm.sessions().is_empty());
    }

    #[tokio::test]
    async fn the_bounds_are_the_deployment_s_and_a_reload_tightens_them() {
        let dir = tempfile::tempdir().unwrap();
        let service = ApprovalService::with_store(
            std::sync::Arc::new(crate::DirStore::new(dir.path())),
            Policy::Ask,
        );
        let warm = WarmSessions::default();
        warm.set_bounds(3, Duration::from_secs(10));
        let start = Instant::now();
        for (i, id) in ["a", "b", "c", "d"].into_iter().enumerate() {
            let at = start + Duration::from_secs(i as u64);
            warm.keep(id, agent(&service, id).await, at);
        }
        assert_eq!(warm.sessions(), ["b", "c", "d"], "three at most: a went");
        warm.sweep(start + Duration::from_secs(11));
        assert_eq!(warm.sessions(), ["c", "d"], "b idle for 10 s");
        // A reload to one session: the one asked about last stays, at the next sweep.
        warm.set_bounds(1, Duration::from_secs(10));
        warm.sweep(start + Duration::from_secs(11));
        assert_eq!(warm.sessions(), ["d"]);
    }
}
