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
//! starts after [`RuleBook::revoke_shared`] begins can use it; an expired rule never matches.
//! Another process's changes (the CLI's `rules add`, another `serve`) are picked up within
//! [`REFRESH_EVERY`], by a thread of the book's own: a decision never waits on the store to learn
//! of them (on a database that is two round trips).
//!
//! Where things are: `rule.rs` a rule, a rule to add, `RuleError`; `book/` the rule book (`mod.rs`
//! adding and revoking, `decide.rs` which rule decides a call, `refresh.rs` rereading the rules
//! logs, `index.rs` the index); `gate.rs` the gate and proposals; `pattern.rs` the `Tool(pattern)`
//! syntax, `call.rs` what it reads from a call, `glob.rs` a path pattern as a glob; reading
//! commands in `shell.rs` (the parser), `programs.rs` (what they run and write), `wrappers.rs`,
//! `changers.rs` (what changes the program that runs), `grammar.rs` (options as the programs read
//! them) with `option_tables.rs`, `options.rs`, `git.rs` and `awk.rs`, and `command.rs` (one
//! reading per decision); `paths.rs` paths resolved through
//! symlinks; `protect.rs` the built-in rules; `proposals.rs` who may make which rule; `trust.rs`
//! when a rules log may be believed; `suggest.rs` the rule offered to a person; `view.rs` a rule as
//! lists show it.

mod awk;
pub mod book;
mod call;
mod changers;
pub mod command;
pub mod examples;
mod gate;
mod git;
mod glob;
mod grammar;
pub mod option_tables;
mod options;
pub mod paths;
pub mod pattern;
pub mod programs;
pub mod proposals;
pub mod protect;
mod rule;
pub mod shell;
pub mod suggest;
pub mod trust;
mod view;
mod wrappers;
mod writes;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

pub use book::{Matched, RuleBook};
pub use gate::{GATE_NAME, RuleGate, proposal};
pub use proposals::{DECLINED_RULES_OFF, declined_for_plugins, declined_unsaved};
pub use rule::{NewRule, Rule, RuleError};
pub use view::RuleView;

/// The log that holds `user`-scope rules.
pub const USER_LOG: &str = "rules.user";

/// The prefix of every rules log; no session may be named with it.
pub use crate::audit::store::RULES_LOG_PREFIX as LOG_PREFIX;

/// How often the book looks for rules another process wrote.
pub const REFRESH_EVERY: Duration = Duration::from_millis(250);

/// The log that holds a project's rules: `rules.project-<16 hex of the project's SHA-256>`.
pub fn project_log(project: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(project.as_bytes());
    format!(
        "{LOG_PREFIX}project-{}",
        crate::audit::chain::hex_of(&digest[..8])
    )
}

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
