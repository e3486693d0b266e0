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
//! ```

use std::time::Duration;

use toml::Value;

use super::read::{Ctx, positive, table, unknown_key};
use super::{ConfigError, Deployment};

const KEYS: [&str; 12] = [
    "connections",
    "connections_per_address",
    "authenticate_within_s",
    "outbound_bytes",
    "requests_in_flight",
    "sessions_per_token",
    "console_header_timeout_s",
    "console_body_timeout_s",
    "console_body_bytes",
    "console_streams_per_login",
    "failed_login_addresses",
    "open_logs",
];

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
        match k.as_str() {
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
            other => return Err(unknown_key(ctx, PLACE, other, &KEYS)),
        }
    }
    Ok(())
}
