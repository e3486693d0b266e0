//! The rule book of one host: the active rules (deployment, project, user, and the session rules
//! of the sessions this host opened), adding and revoking them durably. How a call is decided is
//! in `decide`, how other processes' changes are picked up in `refresh`, the index in `index`.

mod decide;
mod index;
mod refresh;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use crate::answer::{Effect, RuleScope};
use crate::audit::checkpoint::Checkpointer;
use crate::audit::event::{Event, RuleAdded, RuleRevoked};
use crate::audit::log::SessionLog;
use crate::audit::store::Store;

use super::pattern::{self, SpecError};
use super::rule::{NewRule, Rule, RuleError, split_text};
use super::{Clock, REFRESH_EVERY, RuleView, USER_LOG, project_log, protect, trust};
use index::Index;
use refresh::LogState;

/// How long an add or revoke waits for another process holding a rules log.
const LOCK_PATIENCE: Duration = Duration::from_secs(10);

/// The active rules of one host: project, user and deployment rules, and the session rules of the
/// sessions this host opened.
pub struct RuleBook {
    store: Arc<dyn Store>,
    project_log: String,
    index: RwLock<Index>,
    clock: Clock,
    /// Scopes a plugin's proposal may create.
    plugins_may_create: RwLock<Vec<RuleScope>>,
    logs: Mutex<HashMap<String, LogState>>,
    /// Whether any rules log is broken: then no allow rule applies.
    any_broken: AtomicBool,
    /// Rules this host revoked: a reread that began before the revocation was written never
    /// brings one back.
    revoked: Mutex<std::collections::HashSet<String>>,
    /// Signs each rules log's head after every rule added or revoked.
    checkpointer: RwLock<Option<Arc<Checkpointer>>>,
}

impl std::fmt::Debug for RuleBook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuleBook")
            .field("project_log", &self.project_log)
            .field("rules", &self.read().by_id.len())
            .finish_non_exhaustive()
    }
}

/// What matched a call.
#[derive(Debug, Clone)]
pub struct Matched {
    /// The deciding rule.
    pub rule: Arc<Rule>,
    /// What it decided.
    pub effect: Effect,
}

impl RuleBook {
    /// A book over `store` for the project `project` (every session of one deployment shares
    /// it: the deployment file's path, say), loading the project and user rules now. `statics`
    /// are the deployment file's rules.
    pub fn open(
        store: Arc<dyn Store>,
        project: &str,
        statics: Vec<Rule>,
        plugins_may_create: Vec<RuleScope>,
        clock: Clock,
    ) -> Result<Arc<RuleBook>, RuleError> {
        let book = Arc::new(RuleBook {
            store,
            project_log: project_log(project),
            index: RwLock::new(Index::default()),
            clock,
            plugins_may_create: RwLock::new(plugins_may_create),
            logs: Mutex::new(HashMap::new()),
            any_broken: AtomicBool::new(false),
            revoked: Mutex::new(std::collections::HashSet::new()),
            checkpointer: RwLock::new(None),
        });
        {
            let mut index = book.write();
            for rule in statics {
                index.insert(Arc::new(rule));
            }
        }
        for log in [USER_LOG.to_owned(), book.project_log.clone()] {
            book.reload(&log)?;
        }
        let weak = Arc::downgrade(&book);
        std::thread::Builder::new()
            .name("rules-refresh".to_owned())
            .spawn(move || {
                // Ends within one interval of the book going away.
                loop {
                    std::thread::sleep(REFRESH_EVERY);
                    let Some(book) = weak.upgrade() else { break };
                    book.refresh();
                }
            })
            .map_err(|e| RuleError::Refresh(e.to_string()))?;
        Ok(book)
    }

    /// A static rule from the deployment file.
    pub fn deployment_rule(
        id: String,
        rule: &str,
        effect: Effect,
        file: &str,
        reason: Option<String>,
    ) -> Result<Rule, SpecError> {
        Ok(Rule {
            id,
            spec: pattern::parse(rule)?,
            effect,
            scope: RuleScope::Project,
            session: None,
            expires: None,
            creator: format!("deployment:{file}"),
            reason,
            from_deployment: true,
            uses: AtomicU64::new(0),
            last_use: Mutex::new(None),
        })
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Index> {
        self.index.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Index> {
        self.index.write().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether a plugin may create a rule of `scope`.
    pub fn plugin_may_create(&self, scope: RuleScope) -> bool {
        self.plugins_may_create
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&scope)
    }

    /// The scopes plugins may create (`[rules] plugins-may-create`).
    pub fn plugins_may_create_scopes(&self) -> Vec<RuleScope> {
        self.plugins_may_create
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Moves to a reloaded deployment file: its `[[rule]]` entries replace the previous ones
    /// (atomically for decisions) and its `plugins-may-create` applies from now on.
    pub fn set_deployment(&self, statics: Vec<Rule>, plugins_may_create: Vec<RuleScope>) {
        *self
            .plugins_may_create
            .write()
            .unwrap_or_else(|p| p.into_inner()) = plugins_may_create;
        let mut index = self.write();
        let old: Vec<String> = index
            .by_id
            .values()
            .filter(|r| r.from_deployment)
            .map(|r| r.id.clone())
            .collect();
        for id in old {
            index.remove(&id);
        }
        for rule in statics {
            index.insert(Arc::new(rule));
        }
    }

    /// Signs a checkpoint of the rules log after every rule added or revoked from now on (`None`
    /// stops it).
    pub fn set_checkpointer(&self, checkpointer: Option<Arc<Checkpointer>>) {
        let signs_now = checkpointer.is_some();
        let signed_before = std::mem::replace(
            &mut *self.checkpointer.write().unwrap_or_else(|p| p.into_inner()),
            checkpointer,
        )
        .is_some();
        if signs_now && !signed_before {
            // The logs were read before the key was known, so without their checkpoints: what
            // that read trusted is forgotten, and they are read again, from nothing.
            self.forget_logs();
            for log in [USER_LOG.to_owned(), self.project_log.clone()] {
                if let Err(e) = self.reload(&log) {
                    tracing::warn!(log, error = %e, "a rules log could not be read again with the signing key");
                }
            }
        }
    }

    /// The name of this project's rules log.
    pub fn project_log_name(&self) -> &str {
        &self.project_log
    }

    /// Opens a rules log for writing, waiting a while for another process holding it.
    fn open_log(&self, name: &str) -> Result<SessionLog, RuleError> {
        Ok(SessionLog::open_waiting(&*self.store, name, LOCK_PATIENCE)?)
    }

    /// Indexes the session rules a session's log holds (called when the session opens). A rule
    /// this host has revoked stays out: revoking a rule of a closed session opens the session to
    /// write the revocation, and until it is written the log still holds the rule.
    pub fn load_session(&self, session: &str, log: &SessionLog) {
        let rules: Vec<Result<Rule, String>> = log.with_fold(|f| {
            f.rules()
                .map(|r| Rule::from_event(r, Some(session)))
                .collect()
        });
        let mut index = self.write();
        let revoked = self.revoked.lock().unwrap_or_else(|p| p.into_inner());
        for rule in rules {
            match rule {
                Ok(rule) if revoked.contains(&rule.id) => {}
                Ok(rule) if !index.by_id.contains_key(&rule.id) => index.insert(Arc::new(rule)),
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(session, error = %e, "a session rule this host cannot read is ignored")
                }
            }
        }
    }

    /// The live rules, in id order, optionally of one scope.
    pub fn list(&self, scope: Option<RuleScope>) -> Vec<RuleView> {
        let now = (self.clock)();
        let index = self.read();
        let mut rules: Vec<RuleView> = index
            .by_id
            .values()
            .filter(|r| r.expires.is_none_or(|e| now < e))
            .filter(|r| scope.is_none_or(|s| r.scope == s))
            .map(|r| r.view())
            .collect();
        rules.sort_by(|a, b| a.id.cmp(&b.id));
        rules
    }

    /// The record a new rule is written as (validated: the text parses).
    pub fn record(&self, new: &NewRule) -> Result<(RuleAdded, Rule), RuleError> {
        let spec = pattern::parse(&new.rule)?;
        if new.scope == RuleScope::Session && new.session.is_none() {
            return Err(RuleError::NoSession);
        }
        let (tool, pattern) = split_text(&spec.text);
        let expires = new.lasts.map(|d| (self.clock)() + d);
        let added = RuleAdded {
            id: uuid::Uuid::new_v4().simple().to_string()[..12].to_owned(),
            tool,
            pattern,
            effect: new.effect,
            scope: new.scope,
            expires_at: expires.map(|t| humantime::format_rfc3339_seconds(t).to_string()),
            creator: new.creator.clone(),
            reason: new.reason.as_deref().and_then(crate::answer::clean_reason),
        };
        // Only a session rule belongs to a session; a broader one applies to every session.
        let session = new
            .session
            .as_deref()
            .filter(|_| new.scope == RuleScope::Session);
        let rule = Rule::from_event(&added, session).map_err(|reason| RuleError::Corrupt {
            log: "new rule".to_owned(),
            reason,
        })?;
        Ok((added, rule))
    }

    /// Adds a project or user rule: durable in its rules log before this returns, then active.
    /// (Session rules go through [`crate::service::ApprovalService::add_rule`], which writes the
    /// session's log.)
    pub async fn add_shared(self: &Arc<Self>, new: NewRule) -> Result<Arc<Rule>, RuleError> {
        let (added, rule) = self.record(&new)?;
        let log = match new.scope {
            RuleScope::User => USER_LOG.to_owned(),
            RuleScope::Project => self.project_log.clone(),
            RuleScope::Session => return Err(RuleError::NoSession),
        };
        self.append(&log, Event::RuleAdded(added)).await?;
        Ok(self.activate(rule))
    }

    /// Makes a rule whose `rule/added` is durable active.
    pub fn activate(&self, rule: Rule) -> Arc<Rule> {
        let mut index = self.write();
        // A reread may have indexed it already (and counted its first uses).
        if let Some(existing) = index.by_id.get(&rule.id) {
            return existing.clone();
        }
        let rule = Arc::new(rule);
        index.insert(rule.clone());
        rule
    }

    async fn append(self: &Arc<Self>, log: &str, event: Event) -> Result<(), RuleError> {
        let book = self.clone();
        let name = log.to_owned();
        // Opening may wait for another process's lock: off the async workers.
        let opened = tokio::task::spawn_blocking(move || book.open_log(&name))
            .await
            .map_err(|e| RuleError::Internal(e.to_string()))??;
        opened.append(event).await?;
        let checkpointer = self
            .checkpointer
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if let Some(checkpointer) = checkpointer {
            // Every rule change is checkpointed before it is reported done, as a turn's end is:
            // `verify` then reads a rules record past the last checkpoint as added by someone
            // else (or a crash in between).
            let (seq, head) = opened.durable_point();
            let name = log.to_owned();
            let written =
                tokio::task::spawn_blocking(move || checkpointer.write(&name, seq, &head)).await;
            match written {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    tracing::error!(log, seq, error = %e, "could not write a checkpoint");
                }
                Err(e) => tracing::error!(log, seq, error = %e, "checkpoint task failed"),
            }
        }
        let len = self.store.log_len(log).ok().flatten();
        let (records, head) = opened.durable_point();
        drop(opened);
        let mut logs = self.lock_logs();
        let state = logs.entry(log.to_owned()).or_default();
        state.written = Some(head);
        // What this host wrote on top of what it had read intact is intact too.
        if state.broken.is_none() && state.waiting_since.is_none() {
            state.seen = Some(trust::Seen { len, records, head });
        }
        Ok(())
    }

    /// Revokes the rule `id` of a rules log (project or user). The rule stops matching before
    /// its revocation is written; if writing fails, an allow rule stays revoked and a reject rule
    /// comes back (either way the host fails closed), and the error is returned.
    pub async fn revoke_shared(
        self: &Arc<Self>,
        id: &str,
        by: &str,
        reason: Option<String>,
    ) -> Result<(), RuleError> {
        let rule = self.take(id)?;
        let log = match rule.scope {
            RuleScope::User => USER_LOG.to_owned(),
            _ => self.project_log.clone(),
        };
        let event = Event::RuleRevoked(RuleRevoked {
            id: id.to_owned(),
            by: by.to_owned(),
            reason,
        });
        let written = self.append(&log, event).await;
        self.settle_revocation(rule, written)
    }

    /// Takes `id` out of the index (the first step of a revocation).
    pub fn take(&self, id: &str) -> Result<Arc<Rule>, RuleError> {
        if id.starts_with(protect::ID_PREFIX) {
            return Err(RuleError::BuiltIn(id.to_owned()));
        }
        let mut index = self.write();
        match index.by_id.get(id) {
            None => return Err(RuleError::Unknown(id.to_owned())),
            Some(r) if r.from_deployment => return Err(RuleError::Static(id.to_owned())),
            Some(_) => {}
        }
        self.revoked
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.to_owned());
        Ok(index.remove(id).expect("checked above"))
    }

    /// The last step of a revocation: on failure, a reject rule is put back.
    pub fn settle_revocation(
        &self,
        rule: Arc<Rule>,
        written: Result<(), RuleError>,
    ) -> Result<(), RuleError> {
        if let Err(e) = written {
            if rule.effect == Effect::Reject {
                self.revoked
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&rule.id);
                self.write().insert(rule);
            }
            return Err(e);
        }
        Ok(())
    }

    /// The rule `id`, if active.
    pub fn get(&self, id: &str) -> Option<Arc<Rule>> {
        self.read().by_id.get(id).cloned()
    }
}
