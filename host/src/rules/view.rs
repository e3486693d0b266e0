//! A rule as people and tools see it: what `rules list`, `serve`'s `rules/list` and the console
//! show, for standing rules and built-in ones alike.

use serde::Serialize;

use crate::answer::{Effect, RuleScope};

/// A rule as `rules list`, `rules/list` and a console show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RuleView {
    /// Its id.
    pub id: String,
    /// `Tool(pattern)`.
    pub rule: String,
    /// `allow` or `reject`.
    pub effect: Effect,
    /// `session`, `project` or `user`.
    pub scope: RuleScope,
    /// The session, for session scope.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// When it expires (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// Who made it.
    pub creator: String,
    /// Why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Decisions it made in this process.
    pub uses: u64,
    /// The last of them (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_use: Option<String>,
    /// A built-in rule ([`protect`](crate::rules::protect)): it protects the host's own policy and cannot be revoked.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub built_in: bool,
}
