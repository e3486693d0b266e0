//! A standing rule: its text parsed, effect, scope, expiry, creator and reason, how many decisions
//! it made; a rule to add; and why one could not be added, revoked or read.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use crate::answer::{Effect, RuleScope};
use crate::audit::error::LogError;
use crate::audit::event::RuleAdded;

use super::RuleView;
use super::pattern::{self, Spec, SpecError};

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
    pub(super) uses: AtomicU64,
    pub(super) last_use: Mutex<Option<SystemTime>>,
}

impl Rule {
    pub(super) fn from_event(added: &RuleAdded, session: Option<&str>) -> Result<Rule, String> {
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

    pub(super) fn live(&self, now: SystemTime, session: &str) -> bool {
        self.expires.is_none_or(|e| now < e) && self.session.as_deref().is_none_or(|s| s == session)
    }

    /// The reason a rejection by this rule gives the model.
    pub fn rejection_reason(&self) -> String {
        match &self.reason {
            Some(r) => r.clone(),
            None => format!("the standing rule {} rejects this call", self.spec.text),
        }
    }

    pub(super) fn used(&self, now: SystemTime) {
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

/// `Tool(pattern)` as (`Tool`, `pattern`).
pub(super) fn split_text(text: &str) -> (String, Option<String>) {
    match text.split_once('(') {
        Some((tool, rest)) => (
            tool.to_owned(),
            Some(rest.strip_suffix(')').unwrap_or(rest).to_owned()),
        ),
        None => (text.to_owned(), None),
    }
}
