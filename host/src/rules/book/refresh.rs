//! Rereading the rules logs other processes write, trusting each read only when it is intact
//! ([`super::super::trust`]): a log that is not marks the book broken (no allow rule applies).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use crate::answer::RuleScope;
use crate::audit::error::LogError;

use super::super::rule::{Rule, RuleError};
use super::super::{USER_LOG, broken_warning, trust};
use super::RuleBook;

/// What this host knows of one rules log.
#[derive(Default)]
pub(super) struct LogState {
    /// Where it stood when last read intact.
    pub(super) seen: Option<trust::Seen>,
    /// The chain value of the last record this host appended to it.
    pub(super) written: Option<crate::audit::chain::Head>,
    /// Since when its last records have waited for their checkpoint.
    pub(super) waiting_since: Option<Instant>,
    /// Why it is not trusted, when it is not.
    pub(super) broken: Option<String>,
}

impl RuleBook {
    pub(super) fn lock_logs(&self) -> std::sync::MutexGuard<'_, HashMap<String, LogState>> {
        self.logs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Rereads the rules log `name` and, when it reads intact ([`trust`]), its project and user
    /// rules replace the ones indexed from it. A log that does not is marked broken: no allow
    /// rule applies until it reads intact again.
    ///
    /// # Errors
    /// The store cannot be read.
    pub(super) fn reload(&self, name: &str) -> Result<(), RuleError> {
        let len = self.store.log_len(name).ok().flatten();
        let bytes = match self.store.read(name) {
            Ok(bytes) => bytes,
            // A store that can only be read by opening a log: its writer's checks are all
            // there is (it validates every record on open; the chain is not rechecked).
            Err(LogError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::Unsupported =>
            {
                return self.reload_opened(name, len);
            }
            Err(e) => return Err(e.into()),
        };
        let checkpointer = self
            .checkpointer
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let checkpoints = checkpointer.as_ref().map(|c| {
            let list = c
                .checkpoints(name)
                .unwrap_or_else(|e| vec![Err(format!("the checkpoint log cannot be read: {e}"))]);
            (c.verifying_key(), list)
        });
        let (seen, written, waiting_since) = {
            let logs = self.lock_logs();
            let state = logs.get(name);
            (
                state.and_then(|s| s.seen),
                state.and_then(|s| s.written),
                state.and_then(|s| s.waiting_since),
            )
        };
        let read = trust::read(
            &bytes,
            &trust::Context {
                name,
                len,
                checkpoints: checkpoints.as_ref().map(|(k, l)| (k, l.as_slice())),
                seen,
                written,
                waiting_since,
            },
        );
        let trusted = match read {
            trust::Read::Trusted(added, seen) => added
                .iter()
                .map(|r| Rule::from_event(r, None))
                .collect::<Result<Vec<Rule>, String>>()
                .map(|rules| (rules, seen)),
            trust::Read::Waiting => {
                self.lock_logs()
                    .entry(name.to_owned())
                    .or_default()
                    .waiting_since
                    .get_or_insert_with(Instant::now);
                self.keep_rejects(name, &bytes);
                return Ok(());
            }
            trust::Read::Broken(why) => Err(why),
        };
        let (rules, seen) = match trusted {
            Ok(read) => read,
            Err(why) => {
                self.mark_broken(name, why);
                self.keep_rejects(name, &bytes);
                return Ok(());
            }
        };
        self.apply(name, rules, seen);
        Ok(())
    }

    /// Drops every project and user rule read from the rules logs, and what was known of the
    /// logs: the next read starts from nothing.
    pub(super) fn forget_logs(&self) {
        let mut index = self.write();
        let read: Vec<String> = index
            .by_id
            .values()
            .filter(|r| {
                matches!(r.scope, RuleScope::Project | RuleScope::User)
                    && !r.from_deployment
                    && r.session.is_none()
            })
            .map(|r| r.id.clone())
            .collect();
        for id in read {
            index.remove(&id);
        }
        drop(index);
        self.lock_logs().clear();
        self.any_broken.store(false, Ordering::Relaxed);
    }

    /// Indexes every reject rule of the rules log `name`, which is not trusted, that is not
    /// indexed yet: a log in doubt loses its allows, never its rejects.
    fn keep_rejects(&self, name: &str, bytes: &[u8]) {
        let rejects = trust::rejects(bytes);
        if rejects.is_empty() {
            return;
        }
        let mut index = self.write();
        for added in &rejects {
            if index.by_id.contains_key(&added.id) {
                continue;
            }
            match Rule::from_event(added, None) {
                Ok(rule) => {
                    index.insert(Arc::new(rule));
                }
                Err(why) => {
                    tracing::warn!(log = name, rule = %added.id, why, "a reject rule of a rules log in doubt cannot be read");
                }
            }
        }
    }

    /// [`RuleBook::reload`] for a store that cannot be read without opening the log.
    fn reload_opened(&self, name: &str, len: Option<u64>) -> Result<(), RuleError> {
        let log = self.open_log(name)?;
        let rules = log
            .with_fold(|f| {
                f.rules()
                    .map(|r| Rule::from_event(r, None))
                    .collect::<Result<Vec<Rule>, String>>()
            })
            .map_err(|reason| RuleError::Corrupt {
                log: name.to_owned(),
                reason,
            })?;
        let (records, head) = log.durable_point();
        drop(log);
        self.apply(name, rules, trust::Seen { len, records, head });
        Ok(())
    }

    /// Replaces the rules indexed from the rules log `name` with `rules`, read intact.
    fn apply(&self, name: &str, rules: Vec<Rule>, seen: trust::Seen) {
        let scope = if name == USER_LOG {
            RuleScope::User
        } else {
            RuleScope::Project
        };
        let mut index = self.write();
        let stale: Vec<String> = index
            .by_id
            .values()
            .filter(|r| r.scope == scope && !r.from_deployment && r.session.is_none())
            .map(|r| r.id.clone())
            .collect();
        for id in stale {
            index.remove(&id);
        }
        let revoked = self.revoked.lock().unwrap_or_else(|p| p.into_inner());
        for rule in rules {
            if !revoked.contains(&rule.id) {
                index.insert(Arc::new(rule));
            }
        }
        drop(revoked);
        drop(index);
        let mut logs = self.lock_logs();
        let state = logs.entry(name.to_owned()).or_default();
        state.seen = Some(seen);
        state.waiting_since = None;
        if state.broken.take().is_some() {
            tracing::warn!(
                log = name,
                "the rules log reads intact again; its allow rules apply again"
            );
        }
        self.any_broken
            .store(logs.values().any(|s| s.broken.is_some()), Ordering::Relaxed);
    }

    fn mark_broken(&self, name: &str, why: String) {
        let mut logs = self.lock_logs();
        let state = logs.entry(name.to_owned()).or_default();
        if state.broken.as_deref() != Some(why.as_str()) {
            tracing::error!(
                log = name,
                problem = %why,
                "{}",
                broken_warning(name, &why)
            );
        }
        state.broken = Some(why);
        state.waiting_since = None;
        self.any_broken.store(true, Ordering::Relaxed);
    }

    /// The rules logs that are not trusted, and why: while any is, no allow rule applies.
    pub fn broken(&self) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = self
            .lock_logs()
            .iter()
            .filter_map(|(name, s)| s.broken.clone().map(|why| (name.clone(), why)))
            .collect();
        out.sort();
        out
    }

    /// Picks up what another process wrote to the rules logs (every [`REFRESH_EVERY`], on the
    /// book's refresh thread). A log that changed, waits for a checkpoint or is broken is read
    /// again.
    pub(super) fn refresh(&self) {
        for name in [USER_LOG, self.project_log.as_str()] {
            let len = self.store.log_len(name).ok().flatten();
            let again = {
                let logs = self.lock_logs();
                len.is_none()
                    || logs.get(name).is_none_or(|s| {
                        s.seen.is_none_or(|seen| seen.len != len)
                            || s.waiting_since.is_some()
                            || s.broken.is_some()
                    })
            };
            if again && let Err(e) = self.reload(name) {
                tracing::warn!(log = name, error = %e, "could not reread a rules log; the rules already loaded stand");
            }
        }
    }
}
