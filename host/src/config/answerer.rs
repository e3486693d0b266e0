//! `[[answerer]]`: answerers that are not plugins. `kind = "web"` puts the web console in the
//! waterfall: a question that reaches it waits for a person to click, up to `timeout_s`.
//!
//! ```toml
//! [[answerer]]
//! kind = "web"
//! timeout_s = 300          # then the question settles `unavailable` (never a grant)
//! sessions = ["ci-"]       # optional: the sessions it answers for (prefixes end with - _ or .)
//! ```

use std::time::Duration;

use toml::Value;

use super::ConfigError;
use super::key::{Key, Section};
use super::read::{Ctx, known_key, positive, string, unread};

const KEYS: [Key; 3] = [
    Key {
        name: "kind",
        kind: r#"`"web"`"#,
        default: "none (required)",
        meaning: "The answerer: `web`, the console `serve --http` serves, asked after every gate and plugin answerer.",
    },
    Key {
        name: "timeout_s",
        kind: "integer (1–86400)",
        default: "`300`",
        meaning: "How long a question waits for a click before it settles `unavailable` (never a grant).",
    },
    Key {
        name: "sessions",
        kind: "list of strings",
        default: "`[]` (every session)",
        meaning: "The sessions it answers for, as a token's `sessions`: an entry ending with `-`, `_` or `.` is a prefix, any other one whole session id. Other sessions' questions go on to `serve`'s answerer connections.",
    },
];

/// `[[answerer]]` in the reference.
pub(super) const SECTION: Section = Section {
    shown: "[[answerer]]",
    about: "Answerers that are not plugins. The one kind is the web console, the waterfall's last answerer, given at most once.",
    keys: &KEYS,
};

/// How long a question waits on the console unless the file says otherwise.
pub const DEFAULT_WEB_TIMEOUT: Duration = Duration::from_secs(300);

/// One `[[answerer]]` entry of kind `web`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebAnswererSpec {
    /// How long a question waits for a click.
    pub timeout: Duration,
    /// The sessions it answers for, as a token's `sessions` (see
    /// [`super::token::grants_session`]); empty: every session.
    pub sessions: Vec<String>,
}

pub(super) fn parse(
    ctx: &Ctx,
    value: &Value,
    index: usize,
) -> Result<WebAnswererSpec, ConfigError> {
    let place = format!("[[answerer]] #{index}");
    let table = value
        .as_table()
        .ok_or_else(|| ctx.err(&place, "must be a table"))?;
    let mut kind = None;
    let mut timeout = DEFAULT_WEB_TIMEOUT;
    let mut sessions = Vec::new();
    for (k, v) in table {
        match known_key(ctx, &place, k, &KEYS)? {
            "kind" => kind = Some(string(ctx, &place, "kind", v)?.to_owned()),
            "timeout_s" => {
                timeout = Duration::from_secs(positive(ctx, &place, "timeout_s", v, 86_400)?)
            }
            "sessions" => {
                let list = v.as_array().ok_or_else(|| {
                    ctx.err(
                        &place,
                        "sessions must be a list of session-id prefixes or ids",
                    )
                })?;
                for p in list {
                    sessions.push(string(ctx, &place, "sessions", p)?.to_owned());
                }
            }
            other => return Err(unread(ctx, &place, other)),
        }
    }
    match kind.as_deref() {
        Some("web") => Ok(WebAnswererSpec { timeout, sessions }),
        Some(other) => Err(ctx.err(
            &place,
            format!("kind = {other:?}: the only kind is \"web\""),
        )),
        None => Err(ctx.err(&place, "kind is missing (kind = \"web\")")),
    }
}
