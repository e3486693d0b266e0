//! Standing rules: "always allow this" (or "always reject this") that persist, with a visible
//! scope, an optional expiry, revocation, and an audit trail.
//!
//! A rule is `Tool(pattern)` ([`pattern`]), an effect, a scope (`session`, `project` = every
//! session of this deployment, `user` = every deployment on this state directory), who made it
//! and why. Rules are durable events (`rule/added`, `rule/revoked`): session rules in the
//! session's own log, project and user rules in logs of their own (`rules.project-<id>`,
//! `rules.user`), written through the same store, so they are group-committed, crash-safe,
//! hash-chained and verified like every session log. The deployment file's `[[rule]]` entries are
//! static project rules.
//!
//! The [`RuleBook`] holds the active rules indexed by tool (and, for command rules, by the
//! command's first word), so 10,000 rules cost a hash lookup, not a scan. [`RuleGate`] asks it
//! first in the waterfall, after the `never` check: a matching reject rule rejects (rejects
//! outrank allows at every scope), a matching allow rule allows this one call, anything else is
//! `next`. A revoked rule leaves the index before its revocation is written, so no decision that
//! starts after [`RuleBook::revoke`] begins can use it; an expired rule never matches. Another
//! process's changes (the CLI's `rules add`, another `serve`) are picked up within
//! [`REFRESH_EVERY`], by a thread of the book's own: a decision never waits on the store to learn
//! of them (on a database that is two round trips).

pub mod command;
pub mod paths;
pub mod pattern;
pub mod programs;
pub mod proposals;
pub mod protect;
pub mod shell;
pub mod suggest;
pub mod trust;
mod view;

pub use view::RuleView;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime};

use crate::answer::{Answer, Effect, RuleScope};
use crate::audit::checkpoint::Checkpointer;
use crate::audit::error::LogError;
use crate::audit::event::{Event, RuleAdded, RuleRevoked};
use crate::audit::log::SessionLog;
use crate::audit::store::Store;
use crate::outcome::Decision;
use crate::waterfall::{ImmediateAnswer, Listener, ListenerFuture, Question};
use command::Command;
use pattern::{ArgumentMatch, Call, Spec, SpecError, ToolMatch};

/// The log that holds `user`-scope rules.
pub const USER_LOG: &str = "rules.user";

/// The prefix of every rules log; no session may be named with it.
pub use crate::audit::store::RULES_LOG_PREFIX as LOG_PREFIX;

/// How often the book looks for rules another process wrote.
pub const REFRESH_EVERY: Duration = Duration::from_millis(250);

/// How long an add or revoke waits for another process holding a rules log.
const LOCK_PATIENCE: Duration = Duration::from_secs(10);

/// The log that holds a project's rules: `rules.project-<16 hex of the project's SHA-256>`.
pub fn project_log(project: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(project.as_bytes());
    format!(
        "{LOG_PREFIX}project-{}",
        crate::audit::chain::hex_of(&digest[..8])
    )
}

pub use proposals::{DECLINED_RULES_OFF, declined_for_plugins, declined_unsaved};

/// What the host says when a rules log cannot be trusted (stderr, `rules list`, the console).
pub fn broken_warning(log: &str, why: &str) -> String {
    format!(
        "rules log {log} cannot be trusted ({why}): no standing rule allows anything until it reads intact; reject rules still apply"
    )
}

/// The clock rules expire by; tests drive their own.
pub type Clock = Arc<dyn Fn() -> SystemTime + Send + Sync>;

/// The system clock.
pub fn system_clock() -> Clock {
    Arc::new(SystemTime::now)
}

/// An active rule.
#[derive(Debug)]
pub struct Rule {
    /// Its id.
    pub id: String,
    /// `Tool(pattern)`, parsed.
    pub spec: Spec,
    /// Allow or reject.
    pub effect: Effect,
    /// Where it applies.
    pub scope: RuleScope,
    /// The session it belongs to, for session scope.
    pub session: Option<String>,
    /// When it stops matching.
    pub expires: Option<SystemTime>,
    /// Who made it.
    pub creator: String,
    /// Why.
    pub reason: Option<String>,
    /// Whether it comes from the deployment file (not revocable at run time).
    pub from_deployment: bool,
    uses: AtomicU64,
    last_use: Mutex<Option<SystemTime>>,
}

impl Rule {
    fn from_event(added: &RuleAdded, session: Option<&str>) -> Result<Rule, String> {
        let text = crate::answer::rule_text(&added.tool, added.pattern.as_deref());
        let spec = pattern::parse(&text).map_err(|e| e.to_string())?;
        let expires = match &added.expires_at {
            Some(t) => {
                Some(humantime::parse_rfc3339(t).map_err(|e| format!("expiresAt {t:?}: {e}"))?)
            }
            None => None,
        };
        Ok(Rule {
            id: added.id.clone(),
            spec,
            effect: added.effect,
            scope: added.scope,
            session: session.map(str::to_owned),
            expires,
            creator: added.creator.clone(),
            reason: added.reason.clone(),
            from_deployment: false,
            uses: AtomicU64::new(0),
            last_use: Mutex::new(None),
        })
    }

    /// How it shows in lists.
    pub fn view(&self) -> RuleView {
        RuleView {
            id: self.id.clone(),
            rule: self.spec.text.clone(),
            effect: self.effect,
            scope: self.scope,
            session: self.session.clone(),
            expires_at: self
                .expires
                .map(|t| humantime::format_rfc3339_seconds(t).to_string()),
            creator: self.creator.clone(),
            reason: self.reason.clone(),
            uses: self.uses.load(Ordering::Relaxed),
            last_use: self
                .last_use
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .map(|t| humantime::format_rfc3339_seconds(t).to_string()),
            built_in: false,
        }
    }

    fn live(&self, now: SystemTime, session: &str) -> bool {
        self.expires.is_none_or(|e| now < e) && self.session.as_deref().is_none_or(|s| s == session)
    }

    /// The reason a rejection by this rule gives the model.
    pub fn rejection_reason(&self) -> String {
        match &self.reason {
            Some(r) => r.clone(),
            None => format!("the standing rule {} rejects this call", self.spec.text),
        }
    }

    fn used(&self, now: SystemTime) {
        self.uses.fetch_add(1, Ordering::Relaxed);
        *self.last_use.lock().unwrap_or_else(|p| p.into_inner()) = Some(now);
    }
}

/// A rule to add.
#[derive(Debug, Clone)]
pub struct NewRule {
    /// `Tool` or `Tool(pattern)`.
    pub rule: String,
    /// Allow or reject.
    pub effect: Effect,
    /// Where it applies.
    pub scope: RuleScope,
    /// For session scope: the session.
    pub session: Option<String>,
    /// How long it lasts, if not forever.
    pub lasts: Option<Duration>,
    /// Who makes it.
    pub creator: String,
    /// Why.
    pub reason: Option<String>,
}

/// Why a rule could not be added, revoked or read.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RuleError {
    /// The rule text does not parse.
    #[error(transparent)]
    Spec(#[from] SpecError),
    /// A session rule without a session.
    #[error("a session rule needs a session")]
    NoSession,
    /// No active rule has that id.
    #[error("no active rule {0:?}")]
    Unknown(String),
    /// The rule comes from the deployment file.
    #[error("rule {0:?} comes from the deployment file; remove it there")]
    Static(String),
    /// The rule is built in.
    #[error("rule {0:?} is built in: it protects this host's own policy and cannot be revoked")]
    BuiltIn(String),
    /// Writing or reading its log failed.
    #[error(transparent)]
    Log(#[from] LogError),
    /// A task failed unexpectedly (a bug); nothing was changed.
    #[error("rules: {0}")]
    Internal(String),
    /// The thread that picks up other processes' changes could not be started.
    #[error("rules: starting the refresh thread: {0}")]
    Refresh(String),
    /// A rules log holds a rule this host cannot read.
    #[error("{log}: {reason}")]
    Corrupt {
        /// The log.
        log: String,
        /// What is wrong.
        reason: String,
    },
}

#[derive(Default)]
struct Bucket {
    /// Command rules by the first word of their command.
    by_first_word: HashMap<String, Vec<Arc<Rule>>>,
    /// Every other rule of the tool (whole tool, path, domain).
    other: Vec<Arc<Rule>>,
}

#[derive(Default)]
struct Index {
    exact: HashMap<String, Bucket>,
    globbed: Vec<Arc<Rule>>,
    by_id: HashMap<String, Arc<Rule>>,
}

impl Index {
    fn insert(&mut self, rule: Arc<Rule>) {
        // One object per id: a reread that raced an add must not leave two in the buckets.
        if self.by_id.contains_key(&rule.id) {
            self.remove(&rule.id);
        }
        self.by_id.insert(rule.id.clone(), rule.clone());
        let bucket = match &rule.spec.tool {
            ToolMatch::Glob(_) => {
                self.globbed.push(rule);
                return;
            }
            ToolMatch::Exact(tool) => self.exact.entry(tool.clone()).or_default(),
        };
        match &rule.spec.arguments {
            ArgumentMatch::Command { words, .. } => bucket
                .by_first_word
                .entry(words.first().cloned().unwrap_or_default())
                .or_default()
                .push(rule),
            _ => bucket.other.push(rule),
        }
    }

    fn remove(&mut self, id: &str) -> Option<Arc<Rule>> {
        let rule = self.by_id.remove(id)?;
        let drop_it = |v: &mut Vec<Arc<Rule>>| v.retain(|r| r.id != id);
        drop_it(&mut self.globbed);
        if let ToolMatch::Exact(tool) = &rule.spec.tool
            && let Some(bucket) = self.exact.get_mut(tool)
        {
            drop_it(&mut bucket.other);
            for v in bucket.by_first_word.values_mut() {
                drop_it(v);
            }
        }
        Some(rule)
    }

    /// The rules that could match a call of `tool` whose command's part starts with `first`
    /// (`None` for calls without a command: only non-command rules).
    fn candidates<'a>(
        &'a self,
        tool: &'a str,
        first: Option<&str>,
    ) -> impl Iterator<Item = &'a Arc<Rule>> + 'a {
        let bucket = self.exact.get(tool);
        let words = first
            .and_then(|w| bucket.and_then(|b| b.by_first_word.get(w)))
            .into_iter()
            .flatten();
        bucket
            .into_iter()
            .flat_map(|b| b.other.iter())
            .chain(words)
            .chain(
                self.globbed
                    .iter()
                    .filter(move |r| r.spec.matches_tool(tool)),
            )
    }

    /// Every command rule of `tool` (for a command that cannot be split).
    fn all_command_rules<'a>(&'a self, tool: &'a str) -> impl Iterator<Item = &'a Arc<Rule>> + 'a {
        self.exact
            .get(tool)
            .into_iter()
            .flat_map(|b| b.by_first_word.values().flatten())
    }
}

/// What this host knows of one rules log.
#[derive(Default)]
struct LogState {
    /// Where it stood when last read intact.
    seen: Option<trust::Seen>,
    /// The chain value of the last record this host appended to it.
    written: Option<crate::audit::chain::Head>,
    /// Since when its last records have waited for their checkpoint.
    waiting_since: Option<Instant>,
    /// Why it is not trusted, when it is not.
    broken: Option<String>,
}

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
        *self.checkpointer.write().unwrap_or_else(|p| p.into_inner()) = checkpointer;
    }

    /// The name of this project's rules log.
    pub fn project_log_name(&self) -> &str {
        &self.project_log
    }

    /// Opens a rules log for writing, waiting a while for another process holding it.
    fn open_log(&self, name: &str) -> Result<SessionLog, RuleError> {
        let started = Instant::now();
        loop {
            match SessionLog::open(&*self.store, name) {
                Err(LogError::Locked { .. }) if started.elapsed() < LOCK_PATIENCE => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                other => return Ok(other?),
            }
        }
    }

    fn lock_logs(&self) -> std::sync::MutexGuard<'_, HashMap<String, LogState>> {
        self.logs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Rereads the rules log `name` and, when it reads intact ([`trust`]), its project and user
    /// rules replace the ones indexed from it. A log that does not is marked broken: no allow
    /// rule applies until it reads intact again.
    ///
    /// # Errors
    /// The store cannot be read.
    fn reload(&self, name: &str) -> Result<(), RuleError> {
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
                return Ok(());
            }
            trust::Read::Broken(why) => Err(why),
        };
        let (rules, seen) = match trusted {
            Ok(read) => read,
            Err(why) => {
                self.mark_broken(name, why);
                return Ok(());
            }
        };
        self.apply(name, rules, seen);
        Ok(())
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
    fn refresh(&self) {
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

    /// Indexes the session rules a session's log holds (called when the session opens).
    pub fn load_session(&self, session: &str, log: &SessionLog) {
        let rules: Vec<Result<Rule, String>> = log.with_fold(|f| {
            f.rules()
                .map(|r| Rule::from_event(r, Some(session)))
                .collect()
        });
        let mut index = self.write();
        for rule in rules {
            match rule {
                Ok(rule) if !index.by_id.contains_key(&rule.id) => index.insert(Arc::new(rule)),
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(session, error = %e, "a session rule this host cannot read is ignored")
                }
            }
        }
    }

    /// The rule that decides a call, if any: a live reject rule matching it (any part of its
    /// command), else live allow rules matching it (every part of its command), else none.
    pub fn decide(&self, call: &Call<'_>, session: &str) -> Option<Matched> {
        let now = (self.clock)();
        self.find(call, session).map(|(rule, effect)| {
            rule.used(now);
            Matched { rule, effect }
        })
    }

    /// [`RuleBook::decide`] without counting a use: what would decide `call` now.
    pub fn peek(&self, call: &Call<'_>, session: &str) -> Option<Matched> {
        self.find(call, session)
            .map(|(rule, effect)| Matched { rule, effect })
    }

    fn find(&self, call: &Call<'_>, session: &str) -> Option<(Arc<Rule>, Effect)> {
        let found = self.find_any(call, session);
        // A broken rules log: its reject rules (and every other) still apply, no allow does.
        if self.any_broken.load(Ordering::Relaxed)
            && found.as_ref().is_some_and(|(_, e)| *e == Effect::Allow)
        {
            return None;
        }
        found
    }

    fn find_any(&self, call: &Call<'_>, session: &str) -> Option<(Arc<Rule>, Effect)> {
        let now = (self.clock)();
        let index = self.read();
        let live = |r: &&Arc<Rule>| r.live(now, session);
        let found = match call.command() {
            None => {
                let mut allow = None;
                let mut reject = None;
                for rule in index.candidates(call.tool, None).filter(live) {
                    match rule.effect {
                        Effect::Reject if rule.spec.matches_other(call, false) => {
                            reject = Some(rule.clone());
                            break;
                        }
                        Effect::Allow if allow.is_none() && rule.spec.matches_other(call, true) => {
                            allow = Some(rule.clone());
                        }
                        _ => {}
                    }
                }
                reject
                    .map(|r| (r, Effect::Reject))
                    .or(allow.map(|r| (r, Effect::Allow)))
            }
            Some(text) => Self::find_for_command(&index, call, text, &live),
        };
        drop(index);
        found
    }

    /// The rule that decides a shell command: a reject rule matching any program it runs (or,
    /// when it hides what it runs, whose words appear in its text), else allow rules covering
    /// every part of it. A command that cannot be read, or hides what it runs, is allowed only
    /// by a rule for the whole tool, and only when no reject rule names words for the tool.
    fn find_for_command(
        index: &Index,
        call: &Call<'_>,
        text: &str,
        live: &dyn Fn(&&Arc<Rule>) -> bool,
    ) -> Option<(Arc<Rule>, Effect)> {
        let command = command::read(text);
        if let Command::Read(parts) = &command {
            for part in parts.iter() {
                let keys = part
                    .reading
                    .runs
                    .iter()
                    .filter_map(|run| run.first())
                    .chain(part.simple.words.first())
                    .chain(part.simple.assignments.first());
                for key in keys {
                    let reject = index
                        .candidates(call.tool, Some(key))
                        .filter(live)
                        .find(|r| r.effect == Effect::Reject && r.spec.rejects_part(part));
                    if let Some(rule) = reject {
                        return Some((rule.clone(), Effect::Reject));
                    }
                }
            }
        }
        let hides = command.hides_programs();
        if hides {
            let reject = index
                .all_command_rules(call.tool)
                .chain(index.candidates(call.tool, None))
                .filter(live)
                .find(|r| r.effect == Effect::Reject && r.spec.appears_in(text));
            if let Some(rule) = reject {
                return Some((rule.clone(), Effect::Reject));
            }
        }
        let whole_tool = || {
            index
                .candidates(call.tool, None)
                .filter(live)
                .find(|r| {
                    r.effect == Effect::Allow && matches!(r.spec.arguments, ArgumentMatch::Any)
                })
                .map(|r| (r.clone(), Effect::Allow))
        };
        match &command {
            Command::Read(parts) if !hides && !parts.is_empty() => {
                let mut first = None;
                for part in parts.iter() {
                    let key = part.simple.all_words().next();
                    let rule = index
                        .candidates(call.tool, key.map(String::as_str))
                        .filter(live)
                        .find(|r| r.effect == Effect::Allow && r.spec.covers_part(part))?;
                    first.get_or_insert_with(|| rule.clone());
                }
                first.map(|r| (r, Effect::Allow))
            }
            Command::Read(parts) if parts.is_empty() => whole_tool(),
            // Opaque, or hiding what it runs: it could hold a rejected program.
            _ => {
                let any_reject = index
                    .all_command_rules(call.tool)
                    .chain(index.candidates(call.tool, None))
                    .filter(live)
                    .any(|r| r.effect == Effect::Reject);
                if any_reject { None } else { whole_tool() }
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

/// A proposal for the rule text `rule` (`Tool` or `Tool(pattern)`), checked.
pub fn proposal(
    rule: &str,
    effect: Effect,
    scope: RuleScope,
) -> Result<crate::answer::Proposal, SpecError> {
    let spec = pattern::parse(rule)?;
    let (tool, pattern) = split_text(&spec.text);
    crate::answer::Proposal::checked(effect, tool, pattern, scope).map_err(|e| SpecError {
        text: rule.to_owned(),
        reason: e.to_string(),
    })
}

/// `Tool(pattern)` as (`Tool`, `pattern`).
fn split_text(text: &str) -> (String, Option<String>) {
    match text.split_once('(') {
        Some((tool, rest)) => (
            tool.to_owned(),
            Some(rest.strip_suffix(')').unwrap_or(rest).to_owned()),
        ),
        None => (text.to_owned(), None),
    }
}

/// The rules as the first gate of the waterfall.
pub struct RuleGate(pub Arc<RuleBook>);

/// The waterfall name of the rule gate; the decided event names the rule itself.
pub const GATE_NAME: &str = "rules";

impl RuleGate {
    fn answer_for(&self, question: &Question) -> Answer {
        let arguments = question.arguments();
        let call = Call {
            tool: question.tool_name(),
            arguments: arguments.as_ref(),
            cwd: question.cwd(),
        };
        match self.0.decide(&call, question.session_id()) {
            None => Answer::from(Decision::Next),
            Some(Matched { rule, effect }) => {
                let (decision, reason) = match effect {
                    Effect::Allow => (Decision::AllowOnce, rule.reason.clone()),
                    Effect::Reject => (Decision::Reject, Some(rule.rejection_reason())),
                };
                Answer {
                    decision,
                    reason: reason.as_deref().and_then(crate::answer::clean_reason),
                    proposal: None,
                    rule: Some(crate::answer::RuleRef {
                        id: rule.id.clone(),
                        rule: rule.spec.text.clone(),
                        scope: rule.scope,
                        creator: rule.creator.clone(),
                    }),
                    by: None,
                    authority: None,
                }
            }
        }
    }
}

impl Listener for RuleGate {
    fn decide(&self, question: Question) -> ListenerFuture {
        let decision = self.answer_for(&question).decision;
        Box::pin(async move { Ok(decision) })
    }

    fn decide_now(&self, question: &Question) -> Option<ImmediateAnswer> {
        Some((None, Ok(self.answer_for(question))))
    }
}
