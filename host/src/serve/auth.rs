//! Who a connection is: bearer tokens presented in `initialize`, their roles, the sessions they
//! may open, and a limit on failed attempts.
//!
//! stdio is the parent process's own pipe and needs no token. A Unix socket (created 0600) needs
//! one when the deployment declares any `[[token]]`; a network listener always does. Until a
//! connection has authenticated, everything but `initialize` is refused and the connection is
//! closed; a wrong or missing token closes it too. Each failure is logged with the peer, and a
//! peer with [`MAX_FAILURES`] failures within [`FAILURE_WINDOW`] is refused without a check until
//! the window has passed.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

use crate::answer::{Authority, RuleScope};
use crate::config::token::{TokenRole, TokenSpec, grants_session};
use crate::rules::RuleView;

/// Failed attempts a peer may make within [`FAILURE_WINDOW`].
pub const MAX_FAILURES: u32 = 5;

/// The window failed attempts are counted in.
pub const FAILURE_WINDOW: Duration = Duration::from_secs(60);

/// The error text for a request before `initialize` on a connection that must authenticate.
pub const NOT_AUTHENTICATED: &str =
    "not authenticated: send initialize with a token first; closing the connection";

/// The error text for a wrong or missing token.
pub const BAD_TOKEN: &str =
    "authentication failed: the token is missing or not valid; closing the connection";

/// The error text for a peer over its failure limit.
pub const TOO_MANY_FAILURES: &str =
    "authentication refused: too many failed attempts from this address; try again later";

/// The error text a connection gets when its token is revoked (removed from the deployment or
/// changed) while it is open.
pub const REVOKED: &str = "the token was revoked; closing the connection";

/// The JSON-RPC error code of an authentication failure.
pub const UNAUTHENTICATED: i64 = -32001;

/// The JSON-RPC error code of a method the token's roles do not allow.
pub const FORBIDDEN: i64 = -32003;

/// What an authenticated connection may do.
#[derive(Debug, Clone)]
pub struct Grant {
    /// The token's name (or `local` for a connection that needs no token).
    pub name: String,
    /// Its roles.
    pub roles: Vec<TokenRole>,
    /// The sessions it may open (prefixes and whole ids); empty: any.
    pub sessions: Vec<String>,
    /// Cancelled when the token is removed from the deployment or its entry changes: whatever
    /// it let in (connections, console logins, event streams) ends then.
    pub revoked: CancellationToken,
}

/// Two grants are equal when they grant the same (whether either has been revoked aside).
impl PartialEq for Grant {
    fn eq(&self, other: &Grant) -> bool {
        (&self.name, &self.roles, &self.sessions) == (&other.name, &other.roles, &other.sessions)
    }
}

impl Eq for Grant {}

impl Grant {
    /// Everything: stdio, and a Unix socket when the deployment declares no token.
    pub fn local() -> Grant {
        Grant {
            name: "local".to_owned(),
            roles: vec![TokenRole::Agent, TokenRole::Answerer, TokenRole::Admin],
            sessions: Vec::new(),
            revoked: CancellationToken::new(),
        }
    }

    /// Whether it has `role` (admin has every role).
    pub fn has(&self, role: TokenRole) -> bool {
        self.roles.contains(&role) || self.roles.contains(&TokenRole::Admin)
    }

    /// Whether it may open `session`.
    pub fn may_open(&self, session: &str) -> bool {
        self.sessions.is_empty() || self.sessions.iter().any(|p| grants_session(p, session))
    }

    /// Whether it is limited to some sessions.
    pub fn is_limited(&self) -> bool {
        !self.sessions.is_empty()
    }

    /// Which standing rules its answers may make: any scope for an admin of every session (a
    /// person at the host is one), session rules for anyone else (an answerer, an admin limited
    /// to some sessions).
    pub fn authority(&self) -> Authority {
        if self.roles.contains(&TokenRole::Admin) && !self.is_limited() {
            Authority::Person
        } else {
            Authority::Answerer
        }
    }

    /// Refuses a standing rule a token limited to some sessions may not add: anything but a
    /// session rule in one of its sessions (a project or user rule decides every session's calls).
    pub fn may_add_rule(&self, scope: RuleScope, session: Option<&str>) -> Result<(), String> {
        if !self.is_limited() {
            return Ok(());
        }
        match (scope, session) {
            (RuleScope::Session, Some(s)) if self.may_open(s) => Ok(()),
            _ => Err(format!(
                "token {:?} is limited to some sessions and so may add only session rules in them, \
                 not a {scope} rule",
                self.name
            )),
        }
    }

    /// Refuses revoking the rule `id` (`rule`, when it is active) for a token limited to some
    /// sessions, unless it is a session rule of one of them.
    pub fn may_revoke_rule(&self, id: &str, rule: Option<&RuleView>) -> Result<(), String> {
        if !self.is_limited() {
            return Ok(());
        }
        match rule.and_then(|r| r.session.as_deref()) {
            Some(s) if self.may_open(s) => Ok(()),
            _ => Err(format!(
                "token {:?} is limited to some sessions and so may revoke only their session \
                 rules; rule {id:?} is not one",
                self.name
            )),
        }
    }
}

/// The role a method needs; `None` for `initialize`, which is how one authenticates.
pub fn role_for(method: &str) -> Option<TokenRole> {
    match method {
        "initialize" => None,
        "rules/add" | "rules/revoke" | "plugins/reload" | "plugins/list" => Some(TokenRole::Admin),
        _ => Some(TokenRole::Agent),
    }
}

/// The hex SHA-256 of a token, as `[[token]] sha256` holds it.
pub fn token_hash(token: &str) -> String {
    crate::audit::chain::hex_of(&Sha256::digest(token.as_bytes()))
}

/// A new token: `aht_` and 32 random bytes in hex (the prefix lets secret scanners find one).
pub fn new_token() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)?;
    Ok(format!("aht_{}", crate::audit::chain::hex_of(&bytes)))
}

/// Checks tokens against a deployment's `[[token]]` entries and counts failures per peer.
#[derive(Debug)]
pub struct Gatekeeper {
    /// Each entry with the token its grants are revoked by.
    tokens: Mutex<Vec<(TokenSpec, CancellationToken)>>,
    failures: Mutex<HashMap<String, (u32, Instant)>>,
    /// How many peers' failures are remembered at once.
    failure_capacity: std::sync::atomic::AtomicUsize,
}

impl Default for Gatekeeper {
    fn default() -> Self {
        Gatekeeper::new(Vec::new())
    }
}

impl Gatekeeper {
    /// A gatekeeper for `tokens`.
    pub fn new(tokens: Vec<TokenSpec>) -> Gatekeeper {
        Gatekeeper {
            tokens: Mutex::new(
                tokens
                    .into_iter()
                    .map(|t| (t, CancellationToken::new()))
                    .collect(),
            ),
            failures: Mutex::default(),
            failure_capacity: crate::config::limits::Limits::default()
                .failed_login_addresses
                .into(),
        }
    }

    /// How many peers' failed attempts are remembered at once: past it the oldest record is
    /// forgotten, so rotating addresses cannot grow the table without bound.
    pub fn set_failure_capacity(&self, capacity: usize) {
        self.failure_capacity
            .store(capacity.max(1), std::sync::atomic::Ordering::Relaxed);
    }

    /// Replaces the tokens (a reloaded deployment). A token that is gone, or whose entry changed
    /// (name, roles, sessions), is revoked: everything it let in ends. Unchanged entries keep
    /// their connections.
    pub fn set_tokens(&self, tokens: Vec<TokenSpec>) {
        let mut held = self.tokens.lock().unwrap_or_else(|p| p.into_inner());
        let mut kept = Vec::with_capacity(tokens.len());
        for spec in tokens {
            let revoked = match held.iter().position(|(old, _)| *old == spec) {
                Some(i) => held.swap_remove(i).1,
                None => CancellationToken::new(),
            };
            kept.push((spec, revoked));
        }
        for (spec, revoked) in held.drain(..) {
            tracing::info!(token = spec.name, "token revoked");
            revoked.cancel();
        }
        *held = kept;
    }

    /// Whether any token is declared.
    pub fn has_tokens(&self) -> bool {
        !self
            .tokens
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_empty()
    }

    /// How long `peer` must wait before its attempts are checked again, when it is over its
    /// failure limit.
    pub fn retry_after(&self, peer: &str) -> Option<Duration> {
        let failures = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        let (n, since) = failures.get(peer)?;
        (*n >= MAX_FAILURES)
            .then(|| FAILURE_WINDOW.saturating_sub(since.elapsed()))
            .filter(|left| !left.is_zero())
    }

    /// Checks `token` from `peer`; the error is the text to send before closing.
    pub fn check(&self, peer: &str, token: Option<&str>) -> Result<Grant, &'static str> {
        let now = Instant::now();
        {
            let mut failures = self.failures.lock().unwrap_or_else(|p| p.into_inner());
            failures.retain(|_, (_, since)| now.duration_since(*since) < FAILURE_WINDOW);
            if failures.get(peer).is_some_and(|(n, _)| *n >= MAX_FAILURES) {
                tracing::warn!(peer, "authentication refused: too many failed attempts");
                return Err(TOO_MANY_FAILURES);
            }
        }
        let found = token.and_then(|token| {
            let hash = token_hash(token);
            self.tokens
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
                .find(|(t, _)| constant_time_eq(t.sha256.as_bytes(), hash.as_bytes()))
                .cloned()
        });
        match found {
            Some((spec, revoked)) => {
                tracing::info!(peer, token = spec.name, "authenticated");
                Ok(Grant {
                    name: spec.name,
                    roles: spec.roles,
                    sessions: spec.sessions,
                    revoked,
                })
            }
            None => {
                let mut failures = self.failures.lock().unwrap_or_else(|p| p.into_inner());
                let capacity = self
                    .failure_capacity
                    .load(std::sync::atomic::Ordering::Relaxed);
                if !failures.contains_key(peer) && failures.len() >= capacity {
                    let oldest = failures
                        .iter()
                        .min_by_key(|(_, (_, since))| *since)
                        .map(|(p, _)| p.clone());
                    if let Some(oldest) = oldest {
                        failures.remove(&oldest);
                    }
                }
                let entry = failures.entry(peer.to_owned()).or_insert((0, now));
                entry.0 += 1;
                tracing::warn!(
                    peer,
                    presented = token.is_some(),
                    failures = entry.0,
                    "authentication failed"
                );
                Err(BAD_TOKEN)
            }
        }
    }
}

/// Compares without stopping at the first difference, so timing tells nothing of a hash.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(token: &str) -> TokenSpec {
        TokenSpec {
            name: "ci".into(),
            sha256: token_hash(token),
            roles: vec![TokenRole::Agent],
            sessions: vec!["ci-".into()],
        }
    }

    #[test]
    fn a_valid_token_gets_its_grant_and_failures_are_limited_per_peer() {
        let token = new_token().unwrap();
        assert!(token.starts_with("aht_") && token.len() == 68);
        let gate = Gatekeeper::new(vec![spec(&token)]);
        let grant = gate.check("tcp 10.0.0.1", Some(&token)).unwrap();
        assert!(grant.has(TokenRole::Agent) && !grant.has(TokenRole::Admin));
        assert!(grant.may_open("ci-7") && !grant.may_open("prod-1"));
        for _ in 0..MAX_FAILURES {
            assert_eq!(
                gate.check("tcp 10.0.0.2", Some("aht_wrong")),
                Err(BAD_TOKEN)
            );
        }
        // Over the limit, even the right token is refused from that peer; others are not.
        assert_eq!(
            gate.check("tcp 10.0.0.2", Some(&token)),
            Err(TOO_MANY_FAILURES)
        );
        assert!(gate.check("tcp 10.0.0.1", Some(&token)).is_ok());
        assert_eq!(gate.check("tcp 10.0.0.3", None), Err(BAD_TOKEN));
    }

    #[test]
    fn a_reload_revokes_removed_and_changed_tokens_and_keeps_the_rest() {
        let (kept, changed, removed) = (
            new_token().unwrap(),
            new_token().unwrap(),
            new_token().unwrap(),
        );
        let gate = Gatekeeper::new(vec![spec(&kept), spec(&changed), spec(&removed)]);
        let grants: Vec<Grant> = [&kept, &changed, &removed]
            .iter()
            .map(|t| gate.check("unix socket", Some(t)).unwrap())
            .collect();
        let mut wider = spec(&changed);
        wider.sessions = Vec::new();
        gate.set_tokens(vec![spec(&kept), wider]);
        let revoked: Vec<bool> = grants.iter().map(|g| g.revoked.is_cancelled()).collect();
        assert_eq!(revoked, [false, true, true]);
        // The changed entry's new grant is live; the removed token no longer checks.
        assert!(
            !gate
                .check("unix socket", Some(&changed))
                .unwrap()
                .revoked
                .is_cancelled()
        );
        assert_eq!(gate.check("unix socket", Some(&removed)), Err(BAD_TOKEN));
    }

    #[test]
    fn the_failure_table_forgets_the_oldest_address_past_its_capacity() {
        let token = new_token().unwrap();
        let gate = Gatekeeper::new(vec![spec(&token)]);
        gate.set_failure_capacity(3);
        for _ in 0..MAX_FAILURES {
            let _ = gate.check("tcp 10.0.0.1", Some("aht_wrong"));
        }
        assert_eq!(
            gate.check("tcp 10.0.0.1", Some(&token)),
            Err(TOO_MANY_FAILURES)
        );
        // Rotating addresses: the table stays at three, and the oldest record goes first.
        for i in 2..10 {
            let _ = gate.check(&format!("tcp 10.0.0.{i}"), Some("aht_wrong"));
        }
        assert_eq!(gate.failures.lock().unwrap().len(), 3);
        assert!(gate.check("tcp 10.0.0.1", Some(&token)).is_ok());
    }
}
