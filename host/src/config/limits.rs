//! `[limits]`: how much one client may hold of a server that others share. Every key is
//! optional; the defaults suit a team's host.
//!
//! ```toml
//! [limits]
//! connections = 1024              # connections open at once (Unix socket and network)
//! connections_per_address = 64    # network connections open at once from one IP address
//! authenticate_within_s = 10      # a connection that has not authenticated by then is closed
//! outbound_bytes = 1048576        # replies waiting for a client that does not read; over it, it is dropped
//! requests_in_flight = 64         # approval/request and hook/* at once on one connection; tools/call on one MCP connection
//! sessions_per_token = 256        # sessions open at once under one token
//! console_header_timeout_s = 10   # the console: a request's head must arrive within
//! console_body_timeout_s = 10     # the console: a request's body must arrive within
//! console_body_bytes = 65536      # the console: the largest request body
//! console_streams_per_login = 8   # the console: live pages (event streams) open at once per login
//! failed_login_addresses = 4096   # addresses whose failed logins are remembered at once
//! open_logs = 1024                # session files the directory store keeps open (default: 1024, or a quarter of the descriptor limit when lower)
//! held_sessions = 16              # hook sessions `serve` keeps open between calls
//! held_session_idle_s = 300       # how long after its last call a hook session is kept open
//! ```

use std::time::Duration;

use toml::Value;

use super::key::{Key, Section};
use super::read::{Ctx, known_key, positive, table, unread};
use super::{ConfigError, Deployment};

const KEYS: [Key; 14] = [
    Key {
        name: "connections",
        kind: "integer (1–1048576)",
        default: "`1024`",
        meaning: "Connections open at once, over the Unix socket and the network together; one more is refused (`-32005`) and closed.",
    },
    Key {
        name: "connections_per_address",
        kind: "integer (1–1048576)",
        default: "`64`",
        meaning: "Network connections open at once from one IP address.",
    },
    Key {
        name: "authenticate_within_s",
        kind: "integer (1–3600)",
        default: "`10`",
        meaning: "Seconds a connection that must authenticate has to do so before it is closed.",
    },
    Key {
        name: "outbound_bytes",
        kind: "integer (1–1073741824)",
        default: "`1048576` (1 MiB)",
        meaning: "Bytes of replies a connection may have waiting to be written; a client over it is not reading, and is disconnected.",
    },
    Key {
        name: "requests_in_flight",
        kind: "integer (1–65536)",
        default: "`64`",
        meaning: "`approval/request` and `hook/*` calls running at once on one connection (`tools/call` on one MCP connection); one more is refused, never asked.",
    },
    Key {
        name: "sessions_per_token",
        kind: "integer (1–1048576)",
        default: "`256`",
        meaning: "Sessions open at once under one token.",
    },
    Key {
        name: "console_header_timeout_s",
        kind: "integer (1–3600)",
        default: "`10`",
        meaning: "The console: seconds the head of a request may take to arrive.",
    },
    Key {
        name: "console_body_timeout_s",
        kind: "integer (1–3600)",
        default: "`10`",
        meaning: "The console: seconds the body of a request may take to arrive (`408` past it).",
    },
    Key {
        name: "console_body_bytes",
        kind: "integer (1–1073741824)",
        default: "`65536` (64 KiB)",
        meaning: "The console: the largest request body (`413` past it).",
    },
    Key {
        name: "console_streams_per_login",
        kind: "integer (1–65536)",
        default: "`8`",
        meaning: "The console: live pages (event streams) open at once per login (`429` past it).",
    },
    Key {
        name: "failed_login_addresses",
        kind: "integer (1–16777216)",
        default: "`4096`",
        meaning: "Addresses whose failed logins are remembered at once; the oldest is forgotten first.",
    },
    Key {
        name: "open_logs",
        kind: "integer (1–16777216)",
        default: "`1024`, or a quarter of the descriptor limit when lower",
        meaning: "Session files the directory store keeps open at once; past it, the one unused longest is closed and reopened when next written.",
    },
    Key {
        name: "held_sessions",
        kind: "integer (1–65536)",
        default: "`16`",
        meaning: "Hook sessions `serve` keeps open between an agent CLI's calls, so the next call finds the session open; past it, the one idle longest is closed. Each holds its session's state, every recorded call's arguments included, and its log's lock.",
    },
    Key {
        name: "held_session_idle_s",
        kind: "integer (1–86400)",
        default: "`300`",
        meaning: "Seconds after its last call a held hook session is closed (checked every 30 s), giving its log's lock back to other processes.",
    },
];

/// `[limits]` in the reference.
pub(super) const SECTION: Section = Section {
    shown: "[limits]",
    about: "How much one client may hold of a server others share (`serve`, the MCP gateway's HTTP endpoint). Every key is optional; a reload applies new values to new connections.",
    keys: &KEYS,
};

/// What one client may hold of a server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections open at once, over the Unix socket and the network together.
    pub connections: usize,
    /// Network connections open at once from one IP address.
    pub connections_per_address: usize,
    /// How long a connection that must authenticate may take to (it is closed then).
    pub authenticate_within: Duration,
    /// Bytes of replies a connection may have waiting to be written; a client over it is not
    /// reading, and is disconnected.
    pub outbound_bytes: usize,
    /// `approval/request` and `hook/claude-code` calls running at once on one connection.
    pub requests_in_flight: usize,
    /// Sessions open at once under one token.
    pub sessions_per_token: usize,
    /// The console: how long the head of a request may take to arrive.
    pub console_header_timeout: Duration,
    /// The console: how long the body of a request may take to arrive.
    pub console_body_timeout: Duration,
    /// The console: the largest request body.
    pub console_body_bytes: usize,
    /// The console: event streams (live pages) open at once per login.
    pub console_streams_per_login: usize,
    /// Addresses whose failed logins are remembered at once (the oldest is forgotten first).
    pub failed_login_addresses: usize,
    /// Session files the directory store keeps open at once; `None`: its default
    /// ([`default_open_logs`](crate::audit::descriptors::default_open_logs)).
    pub open_logs: Option<usize>,
    /// Hook sessions `serve` keeps open between calls.
    pub held_sessions: usize,
    /// How long after its last call a held hook session is kept open.
    pub held_session_idle: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            connections: 1024,
            connections_per_address: 64,
            authenticate_within: Duration::from_secs(10),
            outbound_bytes: 1 << 20,
            requests_in_flight: 64,
            sessions_per_token: 256,
            console_header_timeout: Duration::from_secs(10),
            console_body_timeout: Duration::from_secs(10),
            console_body_bytes: 64 << 10,
            console_streams_per_login: 8,
            failed_login_addresses: 4096,
            open_logs: None,
            held_sessions: 16,
            held_session_idle: Duration::from_secs(300),
        }
    }
}

pub(super) fn parse(ctx: &Ctx, value: &Value, d: &mut Deployment) -> Result<(), ConfigError> {
    const PLACE: &str = "[limits]";
    let l = &mut d.limits;
    for (k, v) in table(ctx, PLACE, value)? {
        let n = |max: i64| positive(ctx, PLACE, k, v, max);
        let count = |max: i64| n(max).map(|n| n as usize);
        let secs = |max: i64| n(max).map(Duration::from_secs);
        match known_key(ctx, PLACE, k, &KEYS)? {
            "connections" => l.connections = count(1 << 20)?,
            "connections_per_address" => l.connections_per_address = count(1 << 20)?,
            "authenticate_within_s" => l.authenticate_within = secs(3600)?,
            "outbound_bytes" => l.outbound_bytes = count(1 << 30)?,
            "requests_in_flight" => l.requests_in_flight = count(1 << 16)?,
            "sessions_per_token" => l.sessions_per_token = count(1 << 20)?,
            "console_header_timeout_s" => l.console_header_timeout = secs(3600)?,
            "console_body_timeout_s" => l.console_body_timeout = secs(3600)?,
            "console_body_bytes" => l.console_body_bytes = count(1 << 30)?,
            "console_streams_per_login" => l.console_streams_per_login = count(1 << 16)?,
            "failed_login_addresses" => l.failed_login_addresses = count(1 << 24)?,
            "open_logs" => l.open_logs = Some(count(1 << 24)?),
            "held_sessions" => l.held_sessions = count(1 << 16)?,
            "held_session_idle_s" => l.held_session_idle = secs(86_400)?,
            other => return Err(unread(ctx, PLACE, other)),
        }
    }
    Ok(())
}
