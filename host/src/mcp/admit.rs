//! Who may open an MCP session over HTTP, in which session, and how many at once. The caller
//! comes from the layer in front of the endpoint (the binary's authenticates a `[[token]]` and
//! hands its name and sessions on as a [`Caller`]); here its connection is given a session it
//! may open (the one it names in [`SESSION_HEADER`], or a fresh `mcp-<uuid>` inside what its
//! token grants) and a place under the gateway's caps, held until the connection ends.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

/// The request header an HTTP client names the session its questions are asked in with (on
/// `initialize`); without it the connection gets a fresh `mcp-<uuid>`, under the first prefix
/// its token grants when it is limited to some sessions.
pub const SESSION_HEADER: &str = "approval-session";

/// The name of the caller that needs no token.
pub(crate) const LOCAL: &str = "local";

/// Which sessions a caller may open, as its token says (the layer in front knows the syntax of
/// `[[token]] sessions`; the gateway only asks).
pub type SessionGrant = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// Who is calling, as the layer in front of the endpoint established it.
#[derive(Clone)]
pub struct Caller {
    /// The token's name (`local` for a caller that needs none).
    pub name: String,
    /// The sessions it may open; `None`: any.
    pub sessions: Option<SessionGrant>,
    /// Where a fresh session of a caller limited to some sessions is opened (its token's first
    /// prefix), so that it is one the caller may open.
    pub fresh_prefix: Option<String>,
    /// Cancelled when its token is revoked: its connections refuse everything from then on.
    pub revoked: CancellationToken,
}

impl std::fmt::Debug for Caller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Caller")
            .field("name", &self.name)
            .field("limited", &self.sessions.is_some())
            .field("fresh_prefix", &self.fresh_prefix)
            .finish()
    }
}

impl Caller {
    /// A caller with no token and no limit (an endpoint in process, without doors).
    pub fn local() -> Caller {
        Caller {
            name: LOCAL.to_owned(),
            sessions: None,
            fresh_prefix: None,
            revoked: CancellationToken::new(),
        }
    }

    fn may_open(&self, session: &str) -> bool {
        self.sessions.as_ref().is_none_or(|grants| grants(session))
    }
}

/// The text of an `initialize` over the gateway's cap on sessions.
pub fn too_many_sessions(limit: usize) -> String {
    format!(
        "too many MCP sessions open on this gateway (the limit is {limit}, [limits] connections); close one first"
    )
}

/// The text of an `initialize` over the caller's cap on sessions.
pub fn too_many_sessions_for(caller: &str, limit: usize) -> String {
    format!(
        "token {caller:?} has {limit} MCP sessions open, its limit ([limits] sessions_per_token); close one first"
    )
}

/// The text of an `initialize` naming a session the caller's token does not grant.
pub fn session_not_granted(caller: &str, session: &str) -> String {
    format!("token {caller:?} may not open the session {session:?}")
}

/// The text of an `initialize` naming a session another connection holds.
pub fn session_taken(session: &str) -> String {
    format!("the session {session:?} is open on another MCP connection")
}

/// The text a request gets on a connection another caller opened.
pub const NOT_THE_OPENER: &str =
    "this MCP session was opened with another token: only the token that opened it may use it";

/// The text of a second `initialize` on a connection.
pub const ALREADY_INITIALIZED: &str = "this MCP connection is already initialized";

/// The text every request of a connection gets once its token was revoked.
pub const REVOKED: &str = "the token this MCP connection authenticated with was revoked";

/// The sessions open now, in all and by caller.
#[derive(Debug, Default)]
pub(crate) struct OpenSessions {
    total: usize,
    by_caller: HashMap<String, usize>,
}

/// One admitted connection's place; dropping it frees the place.
#[derive(Debug)]
pub(crate) struct SessionSlot {
    open: Arc<Mutex<OpenSessions>>,
    caller: String,
}

impl Drop for SessionSlot {
    fn drop(&mut self) {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        open.total = open.total.saturating_sub(1);
        if let Some(n) = open.by_caller.get_mut(&self.caller) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                open.by_caller.remove(&self.caller);
            }
        }
    }
}

/// A place for one more session of `caller`, or the text to refuse it with.
pub(crate) fn admit(
    open: &Arc<Mutex<OpenSessions>>,
    caller: &Caller,
    total: usize,
    per_caller: usize,
) -> Result<SessionSlot, String> {
    let mut sessions = open.lock().unwrap_or_else(|p| p.into_inner());
    if sessions.total >= total {
        return Err(too_many_sessions(total));
    }
    let mine = sessions.by_caller.get(&caller.name).copied().unwrap_or(0);
    if mine >= per_caller {
        return Err(too_many_sessions_for(&caller.name, per_caller));
    }
    sessions.total += 1;
    *sessions.by_caller.entry(caller.name.clone()).or_default() += 1;
    Ok(SessionSlot {
        open: open.clone(),
        caller: caller.name.clone(),
    })
}

/// The session a connection of `caller` asks in: the one it named, when its token grants it,
/// or a fresh `mcp-<uuid>` (under the token's first prefix when it is limited).
pub(crate) fn session_for(caller: &Caller, named: Option<&str>) -> Result<String, String> {
    let session = match named {
        Some(named) => {
            crate::audit::store::validate_session_id(named).map_err(|e| e.to_string())?;
            named.to_owned()
        }
        None => {
            let fresh = format!("mcp-{}", uuid::Uuid::new_v4());
            let session = if caller.may_open(&fresh) {
                fresh
            } else {
                match &caller.fresh_prefix {
                    Some(prefix) => format!("{prefix}{fresh}"),
                    None => return Err(session_not_granted(&caller.name, &fresh)),
                }
            };
            // A long prefix could make an id no log can have: refused now, before the server
            // is reached.
            crate::audit::store::validate_session_id(&session).map_err(|e| e.to_string())?;
            session
        }
    };
    if !caller.may_open(&session) {
        return Err(session_not_granted(&caller.name, &session));
    }
    Ok(session)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A caller limited to `sessions`: entries ending in `-` are prefixes, others whole ids.
    fn caller(sessions: &[&str]) -> Caller {
        let entries: Vec<String> = sessions.iter().map(|s| (*s).to_owned()).collect();
        let grants: SessionGrant = {
            let entries = entries.clone();
            Arc::new(move |s: &str| {
                entries.iter().any(|e| {
                    if e.ends_with('-') {
                        s.starts_with(e.as_str())
                    } else {
                        s == e
                    }
                })
            })
        };
        Caller {
            name: "t".to_owned(),
            sessions: (!entries.is_empty()).then_some(grants),
            fresh_prefix: entries.iter().find(|e| e.ends_with('-')).cloned(),
            revoked: CancellationToken::new(),
        }
    }

    #[test]
    fn a_limited_token_gets_sessions_inside_its_grant_only() {
        let open = caller(&[]);
        assert!(session_for(&open, None).unwrap().starts_with("mcp-"));
        assert_eq!(session_for(&open, Some("any")).unwrap(), "any");
        let team = caller(&["team-a-", "nightly"]);
        assert!(session_for(&team, None).unwrap().starts_with("team-a-mcp-"));
        assert_eq!(session_for(&team, Some("team-a-7")).unwrap(), "team-a-7");
        assert_eq!(session_for(&team, Some("nightly")).unwrap(), "nightly");
        assert_eq!(
            session_for(&team, Some("team-b-1")).unwrap_err(),
            session_not_granted("t", "team-b-1")
        );
        assert!(session_for(&team, Some("../x")).is_err());
        let whole = caller(&["nightly"]);
        assert!(session_for(&whole, None).is_err());
    }

    #[test]
    fn the_caps_hold_in_all_and_per_caller_and_free_on_drop() {
        let open = Arc::new(Mutex::new(OpenSessions::default()));
        let a = caller(&[]);
        let mut b = caller(&[]);
        b.name = "b".to_owned();
        let first = admit(&open, &a, 3, 2).unwrap();
        let _second = admit(&open, &a, 3, 2).unwrap();
        assert_eq!(
            admit(&open, &a, 3, 2).unwrap_err(),
            too_many_sessions_for("t", 2)
        );
        let _third = admit(&open, &b, 3, 2).unwrap();
        assert_eq!(admit(&open, &b, 3, 2).unwrap_err(), too_many_sessions(3));
        drop(first);
        assert!(admit(&open, &a, 3, 2).is_ok());
    }
}
