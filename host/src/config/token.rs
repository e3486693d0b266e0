//! `[[token]]`: who may connect to `serve` over a socket or the network, and what they may do.
//!
//! ```toml
//! [[token]]
//! name = "ci-runners"                  # appears in logs and in the audit of what it did
//! sha256 = "9f2c…"                     # SHA-256 of the token (`approval-host token new` prints both)
//! roles = ["agent"]                    # agent, answerer, admin, metrics
//! sessions = ["ci-"]                   # optional: the sessions it may open
//! ```
//!
//! A `sessions` entry ending with `-`, `_` or `.` is a prefix and grants whole segments: `ci-`
//! grants `ci-7` and `ci-build.2`. Any other entry is one whole session id: `ci` grants `ci`,
//! never `cider-prod`.
//!
//! Only the hash is kept: a token is 32 random bytes, so a plain SHA-256 of it cannot be
//! reversed by guessing, and checking it costs one hash.

use std::fmt;

use toml::Value;

use super::ConfigError;
use super::key::{Key, Section};
use super::read::{Ctx, known_key, string, unread};

const KEYS: [Key; 4] = [
    Key {
        name: "name",
        kind: "string",
        default: "none (required)",
        meaning: "Its name, unique in the file; it appears in logs and in the audit of what its holder did.",
    },
    Key {
        name: "sha256",
        kind: "string (64 lowercase hex digits)",
        default: "none (required)",
        meaning: "The SHA-256 of the token, which `approval-host token new` prints with it; only the hash is kept.",
    },
    Key {
        name: "roles",
        kind: r#"list of `"agent"` | `"answerer"` | `"admin"` | `"metrics"`"#,
        default: "none (required, not empty)",
        meaning: "What its holder may do: `agent` open sessions, record calls and ask; `answerer` answer prompts (and log in to the console); `admin` also standing rules, reload and plugins; `metrics` only scrape `/metrics` and `/readyz` off loopback.",
    },
    Key {
        name: "sessions",
        kind: "list of strings",
        default: "`[]` (any session)",
        meaning: "The sessions it may open: an entry ending with `-`, `_` or `.` is a prefix granting whole segments (`ci-` grants `ci-7`, never `cider`), any other one whole session id.",
    },
];

/// `[[token]]` in the reference.
pub(super) const SECTION: Section = Section {
    shown: "[[token]]",
    about: "Who may connect to `serve` and the MCP gateway over a socket or the network, and what they may do. `approval-host token new` makes a token and appends its entry.",
    keys: &KEYS,
};

/// The characters a session-id prefix ends with: where one segment of an id ends.
pub const PREFIX_ENDS: [char; 3] = ['-', '_', '.'];

/// Whether the `sessions` entry `entry` grants `session`: a prefix (ending with one of
/// [`PREFIX_ENDS`]) grants the ids that start with it; any other entry grants exactly that id.
pub fn grants_session(entry: &str, session: &str) -> bool {
    if entry.ends_with(PREFIX_ENDS) {
        session.starts_with(entry)
    } else {
        session == entry
    }
}

/// Whether `entry` is a prefix (it ends where a segment ends) rather than one whole id.
pub fn is_prefix(entry: &str) -> bool {
    entry.ends_with(PREFIX_ENDS)
}

/// How a token's `sessions` read to a person: `sessions starting with "ci-"`, `the session
/// "nightly"`, or both joined by `or`.
pub fn describe_sessions(entries: &[String]) -> String {
    let quoted = |prefix: bool| {
        entries
            .iter()
            .filter(|e| is_prefix(e) == prefix)
            .map(|e| format!("{e:?}"))
            .collect::<Vec<_>>()
    };
    let (prefixes, whole) = (quoted(true), quoted(false));
    let mut parts = Vec::new();
    if !prefixes.is_empty() {
        parts.push(format!("sessions starting with {}", prefixes.join(", ")));
    }
    match whole.len() {
        0 => {}
        1 => parts.push(format!("the session {}", whole[0])),
        _ => parts.push(format!("the sessions {}", whole.join(", "))),
    }
    parts.join(" or ")
}

/// What a token's holder may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TokenRole {
    /// Open sessions, record calls, ask.
    Agent,
    /// Answer prompts (`initialize` with `answerer: true`).
    Answerer,
    /// Standing rules, reload, plugins.
    Admin,
    /// Scrape `/metrics` and `/readyz` on a metrics address off loopback; nothing else.
    Metrics,
}

impl TokenRole {
    /// The name used in the deployment file and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            TokenRole::Agent => "agent",
            TokenRole::Answerer => "answerer",
            TokenRole::Admin => "admin",
            TokenRole::Metrics => "metrics",
        }
    }

    /// Parses `agent`, `answerer`, `admin` or `metrics`.
    pub fn parse(s: &str) -> Option<TokenRole> {
        match s {
            "agent" => Some(TokenRole::Agent),
            "answerer" => Some(TokenRole::Answerer),
            "admin" => Some(TokenRole::Admin),
            "metrics" => Some(TokenRole::Metrics),
            _ => None,
        }
    }
}

impl fmt::Display for TokenRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One `[[token]]` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenSpec {
    /// Its name, unique in the file.
    pub name: String,
    /// The SHA-256 of the token, 64 lowercase hex digits.
    pub sha256: String,
    /// What it may do.
    pub roles: Vec<TokenRole>,
    /// The sessions it may open (prefixes and whole ids, see [`grants_session`]); empty: any
    /// session.
    pub sessions: Vec<String>,
}

pub(super) fn parse(ctx: &Ctx, value: &Value, index: usize) -> Result<TokenSpec, ConfigError> {
    let place = format!("[[token]] #{index}");
    let table = value
        .as_table()
        .ok_or_else(|| ctx.err(&place, "must be a table"))?;
    let mut name = None;
    let mut sha256 = None;
    let mut roles = Vec::new();
    let mut sessions = Vec::new();
    for (k, v) in table {
        match known_key(ctx, &place, k, &KEYS)? {
            "name" => name = Some(string(ctx, &place, "name", v)?.to_owned()),
            "sha256" => {
                let h = string(ctx, &place, "sha256", v)?;
                if h.len() != 64
                    || !h
                        .bytes()
                        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
                {
                    return Err(ctx.err(
                        &place,
                        "sha256 must be 64 lowercase hex digits (the hash `approval-host token new` prints)",
                    ));
                }
                sha256 = Some(h.to_owned());
            }
            "roles" => {
                let list = v
                    .as_array()
                    .ok_or_else(|| ctx.err(&place, "roles must be a list"))?;
                for r in list {
                    let r = string(ctx, &place, "roles", r)?;
                    let role = TokenRole::parse(r).ok_or_else(|| {
                        ctx.err(
                            &place,
                            format!(
                                "roles: {r:?} is not one of \"agent\", \"answerer\", \"admin\" or \"metrics\""
                            ),
                        )
                    })?;
                    if !roles.contains(&role) {
                        roles.push(role);
                    }
                }
            }
            "sessions" => {
                let list = v.as_array().ok_or_else(|| {
                    ctx.err(
                        &place,
                        "sessions must be a list of session-id prefixes or ids",
                    )
                })?;
                for p in list {
                    let p = string(ctx, &place, "sessions", p)?;
                    if crate::audit::store::validate_session_id(p).is_err() {
                        return Err(ctx.err(
                            &place,
                            format!("sessions: {p:?} is not a session-id prefix or id (A-Z a-z 0-9 . _ -, not starting with a dot)"),
                        ));
                    }
                    sessions.push(p.to_owned());
                }
            }
            other => return Err(unread(ctx, &place, other)),
        }
    }
    let name = name.ok_or_else(|| ctx.err(&place, "name is missing"))?;
    let sha256 = sha256.ok_or_else(|| ctx.err(&place, "sha256 is missing"))?;
    if roles.is_empty() {
        return Err(ctx.err(&place, "roles is missing or empty"));
    }
    roles.sort();
    Ok(TokenSpec {
        name,
        sha256,
        roles,
        sessions,
    })
}
