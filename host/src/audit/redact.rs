//! `[audit] redact`: argument values that must never reach a log (tokens, passwords), replaced
//! before a `tool/call` record is written or shown to anyone.
//!
//! An entry is a JSON pointer into the call's arguments (`/env/API_KEY`, RFC 6901, matched
//! exactly) or a member name matched at any depth (`password`), compared without regard to case,
//! `-` or `_` (so `api_key` also names `apiKey`, `API-KEY` and `ApiKey`): the agent chooses how
//! a member is spelt, and a secret must not reach the log because it was spelt another way. A matched value becomes [`REDACTED`], and the record
//! lists the pointers it replaced (`redacted`), so a reader (or `replay`) knows those values are
//! not what the gates saw. The host process keeps the real values for the session it is
//! serving: gates decide on what the agent sent, the log holds the redacted copy.

use std::sync::{Arc, RwLock};

use serde_json::Value;

/// The redaction every log of one service applies, changed in place when the deployment is
/// reloaded (a log opened before the reload redacts by the new entries from then on).
pub type RedactionCell = Arc<RwLock<Arc<Redaction>>>;

/// What a redacted value is replaced with.
pub const REDACTED: &str = "[redacted]";

/// One `redact` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Target {
    /// A JSON pointer's reference tokens, unescaped.
    Pointer(Vec<String>),
    /// A member name, wherever it occurs, as [`folded`].
    Name(String),
}

/// A `redact` entry that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RedactError {
    /// The entry is empty.
    #[error("redact entry #{index} is empty")]
    Empty {
        /// 1-based.
        index: usize,
    },
    /// A pointer with `~` not followed by `0` or `1`.
    #[error("redact entry #{index} {entry:?}: `~` must be followed by 0 or 1 in a JSON pointer")]
    BadEscape {
        /// 1-based.
        index: usize,
        /// The entry.
        entry: String,
    },
}

/// The redaction of a deployment: nothing, or the entries of `[audit] redact`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Redaction {
    targets: Vec<Target>,
}

impl Redaction {
    /// Parses `[audit] redact` entries.
    ///
    /// # Errors
    /// An empty entry, or a pointer with a bad `~` escape.
    pub fn parse<S: AsRef<str>>(entries: &[S]) -> Result<Redaction, RedactError> {
        let mut targets = Vec::with_capacity(entries.len());
        for (i, entry) in entries.iter().enumerate() {
            let entry = entry.as_ref();
            let index = i + 1;
            if entry.is_empty() {
                return Err(RedactError::Empty { index });
            }
            let Some(rest) = entry.strip_prefix('/') else {
                targets.push(Target::Name(folded(entry)));
                continue;
            };
            let tokens = rest
                .split('/')
                .map(unescape)
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| RedactError::BadEscape {
                    index,
                    entry: entry.to_owned(),
                })?;
            targets.push(Target::Pointer(tokens));
        }
        Ok(Redaction { targets })
    }

    /// Whether nothing is redacted.
    pub fn is_empty(&self) -> bool {
        self.targets.is_empty()
    }

    /// `arguments` with every value an entry names replaced by [`REDACTED`], and the pointers of
    /// the values replaced (sorted, each once); `None` when no entry matched.
    pub fn apply(&self, arguments: &Value) -> Option<(Value, Vec<String>)> {
        if self.is_empty() {
            return None;
        }
        let mut copy = arguments.clone();
        let mut replaced = Vec::new();
        for target in &self.targets {
            match target {
                Target::Pointer(tokens) => {
                    if let Some(slot) = follow(&mut copy, tokens) {
                        *slot = Value::String(REDACTED.to_owned());
                        replaced.push(pointer(tokens));
                    }
                }
                Target::Name(name) => {
                    replace_named(&mut copy, name, &mut Vec::new(), &mut replaced)
                }
            }
        }
        if replaced.is_empty() {
            return None;
        }
        replaced.sort();
        replaced.dedup();
        Some((copy, replaced))
    }
}

/// A member name as names are compared: lowercase, without `-` or `_`.
fn folded(name: &str) -> String {
    name.chars()
        .filter(|c| !matches!(c, '-' | '_'))
        .flat_map(char::to_lowercase)
        .collect()
}

fn unescape(token: &str) -> Option<String> {
    let mut out = String::with_capacity(token.len());
    let mut chars = token.chars();
    while let Some(c) = chars.next() {
        if c != '~' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('0') => out.push('~'),
            Some('1') => out.push('/'),
            _ => return None,
        }
    }
    Some(out)
}

fn pointer<S: AsRef<str>>(tokens: &[S]) -> String {
    tokens
        .iter()
        .map(|t| format!("/{}", t.as_ref().replace('~', "~0").replace('/', "~1")))
        .collect()
}

fn follow<'v>(value: &'v mut Value, tokens: &[String]) -> Option<&'v mut Value> {
    let mut at = value;
    for token in tokens {
        at = match at {
            Value::Object(map) => map.get_mut(token)?,
            // RFC 6901: an array index is digits without a leading zero.
            Value::Array(items) if token == "0" || !token.starts_with('0') => {
                items.get_mut(token.parse::<usize>().ok()?)?
            }
            _ => return None,
        };
    }
    Some(at)
}

fn replace_named(value: &mut Value, name: &str, path: &mut Vec<String>, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, member) in map.iter_mut() {
                path.push(key.clone());
                if folded(key) == name {
                    *member = Value::String(REDACTED.to_owned());
                    out.push(pointer(path));
                } else {
                    replace_named(member, name, path, out);
                }
                path.pop();
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                path.push(i.to_string());
                replace_named(item, name, path, out);
                path.pop();
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pointers_and_names_replace_values_and_say_where() {
        let r = Redaction::parse(&["/env/API_KEY", "password", "/list/1", "/a~1b"]).unwrap();
        let args = json!({
            "command": "deploy",
            "env": {"API_KEY": "k", "HOME": "/root"},
            "nested": [{"password": "p"}, {"user": "u"}],
            "password": {"deep": 1},
            "list": ["x", "y"],
            "a/b": "slash",
        });
        let (out, replaced) = r.apply(&args).unwrap();
        assert_eq!(
            out,
            json!({
                "command": "deploy",
                "env": {"API_KEY": REDACTED, "HOME": "/root"},
                "nested": [{"password": REDACTED}, {"user": "u"}],
                "password": REDACTED,
                "list": ["x", REDACTED],
                "a/b": REDACTED,
            })
        );
        assert_eq!(
            replaced,
            [
                "/a~1b",
                "/env/API_KEY",
                "/list/1",
                "/nested/0/password",
                "/password"
            ]
        );
    }

    #[test]
    fn names_match_however_the_agent_spells_them_and_pointers_stay_exact() {
        let r = Redaction::parse(&["api_key", "Password", "/env/API_KEY"]).unwrap();
        let args = json!({
            "apiKey": "a",
            "API-KEY": "b",
            "Api_Key": "c",
            "api__key": "d",
            "PASSWORD": "e",
            "pass-word": "f",
            "nested": [{"ApiKey": "g"}],
            "env": {"api_key": "h", "Api_Key": "i"},
            "apikeys": "kept",
            "api key": "kept",
            "api.key": "kept",
        });
        let (out, replaced) = r.apply(&args).unwrap();
        assert_eq!(
            out,
            json!({
                "apiKey": REDACTED,
                "API-KEY": REDACTED,
                "Api_Key": REDACTED,
                "api__key": REDACTED,
                "PASSWORD": REDACTED,
                "pass-word": REDACTED,
                "nested": [{"ApiKey": REDACTED}],
                "env": {"api_key": REDACTED, "Api_Key": REDACTED},
                "apikeys": "kept",
                "api key": "kept",
                "api.key": "kept",
            })
        );
        assert_eq!(
            replaced,
            [
                "/API-KEY",
                "/Api_Key",
                "/PASSWORD",
                "/apiKey",
                "/api__key",
                "/env/Api_Key",
                "/env/api_key",
                "/nested/0/ApiKey",
                "/pass-word",
            ]
        );
        // A pointer names one member exactly: `/env/API_KEY` is not `/env/api_key`.
        let exact = Redaction::parse(&["/env/API_KEY"]).unwrap();
        assert_eq!(exact.apply(&json!({"env": {"api_key": "x"}})), None);
    }

    #[test]
    fn nothing_matched_is_none_and_bad_entries_are_refused() {
        let r = Redaction::parse(&["/missing/path", "secret", "/list/01"]).unwrap();
        assert_eq!(r.apply(&json!({"list": ["a", "b"], "cmd": "ls"})), None);
        assert_eq!(Redaction::default().apply(&json!({"a": 1})), None);
        assert_eq!(
            Redaction::parse(&["ok", ""]).unwrap_err(),
            RedactError::Empty { index: 2 }
        );
        assert_eq!(
            Redaction::parse(&["/a~2"]).unwrap_err().to_string(),
            "redact entry #1 \"/a~2\": `~` must be followed by 0 or 1 in a JSON pointer"
        );
    }
}
