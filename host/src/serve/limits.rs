//! What one client may hold of a server others share: connections (in all and per address),
//! the time to authenticate, replies waiting for a client that does not read, requests in
//! flight, and sessions per token ([`Limits`], the deployment's `[limits]`). Each refusal has
//! its exact text here and is counted in [`Counters`].

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

pub use crate::config::limits::Limits;

/// The JSON-RPC error code of a request refused by a limit.
pub const LIMITED: i64 = -32005;

/// Invalid messages in a row (not JSON, not JSON-RPC, not UTF-8, too long) after which an
/// authenticated connection is closed.
pub const INVALID_IN_A_ROW: u32 = 32;

/// The error that closes a connection after [`INVALID_IN_A_ROW`] invalid messages.
pub const TOO_MANY_INVALID: &str =
    "32 invalid messages in a row: this is not a JSON-RPC client; closing the connection";

/// Why a connection was refused before it could say anything.
pub fn too_many_connections(limit: usize) -> String {
    format!(
        "too many connections: the server holds {limit} at once ([limits] connections); closing the connection"
    )
}

/// Why a connection from an address that holds its share already was refused.
pub fn too_many_from_address(limit: usize) -> String {
    format!(
        "too many connections from this address: {limit} at once ([limits] connections_per_address); closing the connection"
    )
}

/// Why a connection that did not authenticate in time was closed.
pub fn authenticate_too_late(within: std::time::Duration) -> String {
    format!(
        "not authenticated within {} s ([limits] authenticate_within_s); closing the connection",
        within.as_secs()
    )
}

/// Why a request was refused while the connection had its share running.
pub fn too_many_in_flight(limit: usize) -> String {
    format!(
        "{limit} requests are already in flight on this connection ([limits] requests_in_flight): wait for an answer first"
    )
}

/// Why a session could not be opened under a token that holds its share.
pub fn too_many_sessions(token: &str, limit: usize) -> String {
    format!(
        "token {token:?} has {limit} sessions open ([limits] sessions_per_token): close one first"
    )
}

/// Waits out a failed `accept` (most often the process is out of file descriptors) instead of
/// ending the listener: the server keeps serving once connections close.
pub(super) async fn accept_failed(error: &std::io::Error) {
    tracing::warn!(%error, "accepting a connection failed");
    // A pause, not a synchronisation: retrying at once would spin while descriptors are short.
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
}

/// What the limits refused, since the server started.
#[derive(Debug, Default)]
pub struct Counters {
    /// Connections refused at once for the total or an address's share.
    pub refused_connections: AtomicU64,
    /// Connections closed for not authenticating in time.
    pub late_authentication: AtomicU64,
    /// Connections closed because the client did not read its replies.
    pub not_reading: AtomicU64,
    /// Requests refused for the connection's requests in flight.
    pub refused_requests: AtomicU64,
    /// Sessions refused for the token's open sessions.
    pub refused_sessions: AtomicU64,
}

impl Counters {
    pub(super) fn count(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// Where a connection came in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// The Unix socket (`--socket`).
    Unix,
    /// JSON-RPC over the network (`--listen`).
    Tcp,
    /// The web console (`--http`).
    Console,
    /// The metrics address (`--metrics`).
    Metrics,
    /// The MCP gateway's HTTP endpoint (`mcp --listen`).
    Mcp,
    /// Plugins' callbacks (`--callbacks`).
    Callbacks,
}

impl Transport {
    /// Every transport, in the order [`Admission::open_by_transport`] reports them.
    pub const ALL: [Transport; 6] = [
        Transport::Unix,
        Transport::Tcp,
        Transport::Console,
        Transport::Metrics,
        Transport::Mcp,
        Transport::Callbacks,
    ];

    /// Its name, as a metric's label.
    pub const fn as_str(self) -> &'static str {
        match self {
            Transport::Unix => "unix",
            Transport::Tcp => "tcp",
            Transport::Console => "console",
            Transport::Metrics => "metrics",
            Transport::Mcp => "mcp",
            Transport::Callbacks => "callbacks",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// The connections open now.
#[derive(Debug, Default)]
struct Open {
    total: usize,
    per_address: HashMap<IpAddr, usize>,
    by_transport: [usize; 6],
}

/// Admits connections within the limits, and holds the limits (replaced on reload).
#[derive(Debug, Default)]
pub struct Admission {
    limits: Mutex<Limits>,
    open: Mutex<Open>,
    /// What was refused.
    pub counters: Counters,
}

/// One admitted connection's place; dropping it frees the place.
#[derive(Debug)]
pub struct Slot {
    admission: Arc<Admission>,
    address: Option<IpAddr>,
    transport: Transport,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self.admission.lock_open();
        open.total = open.total.saturating_sub(1);
        let t = self.transport.index();
        open.by_transport[t] = open.by_transport[t].saturating_sub(1);
        if let Some(address) = self.address
            && let Some(n) = open.per_address.get_mut(&address)
        {
            *n -= 1;
            if *n == 0 {
                open.per_address.remove(&address);
            }
        }
    }
}

impl Admission {
    /// Admission under `limits`.
    pub fn new(limits: Limits) -> Arc<Admission> {
        Arc::new(Admission {
            limits: Mutex::new(limits),
            ..Admission::default()
        })
    }

    /// The limits in force.
    pub fn limits(&self) -> Limits {
        *self.limits.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Moves to a reloaded deployment's limits (connections already open stay).
    pub fn set_limits(&self, limits: Limits) {
        *self.limits.lock().unwrap_or_else(|p| p.into_inner()) = limits;
    }

    fn lock_open(&self) -> MutexGuard<'_, Open> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A place for a connection over `transport` from `address` (`None`: the Unix socket, which
    /// has no address share), or the text to close it with.
    pub fn admit(
        self: &Arc<Self>,
        transport: Transport,
        address: Option<IpAddr>,
    ) -> Result<Slot, String> {
        let limits = self.limits();
        let mut open = self.lock_open();
        let refused = if open.total >= limits.connections {
            Some(too_many_connections(limits.connections))
        } else if let Some(a) = address
            && open.per_address.get(&a).copied().unwrap_or(0) >= limits.connections_per_address
        {
            Some(too_many_from_address(limits.connections_per_address))
        } else {
            None
        };
        if let Some(text) = refused {
            Counters::count(&self.counters.refused_connections);
            return Err(text);
        }
        open.total += 1;
        open.by_transport[transport.index()] += 1;
        if let Some(a) = address {
            *open.per_address.entry(a).or_default() += 1;
        }
        Ok(Slot {
            admission: self.clone(),
            address,
            transport,
        })
    }

    /// How many connections are open now.
    pub fn open_connections(&self) -> usize {
        self.lock_open().total
    }

    /// How many connections are open now over each of [`Transport::ALL`].
    pub fn open_by_transport(&self) -> [(Transport, usize); 6] {
        let open = self.lock_open();
        Transport::ALL.map(|t| (t, open.by_transport[t.index()]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_are_counted_in_all_and_per_address_and_freed_on_drop() {
        let admission = Admission::new(Limits {
            connections: 3,
            connections_per_address: 2,
            ..Limits::default()
        });
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let first = admission.admit(Transport::Tcp, Some(a)).unwrap();
        let _second = admission.admit(Transport::Console, Some(a)).unwrap();
        assert_eq!(
            admission.admit(Transport::Tcp, Some(a)).unwrap_err(),
            too_many_from_address(2)
        );
        let _third = admission.admit(Transport::Metrics, Some(b)).unwrap();
        assert_eq!(
            admission.admit(Transport::Unix, None).unwrap_err(),
            too_many_connections(3)
        );
        drop(first);
        assert_eq!(admission.open_connections(), 2);
        assert_eq!(
            admission.open_by_transport().map(|(_, n)| n),
            [0, 0, 1, 1, 0, 0]
        );
        let _again = admission.admit(Transport::Tcp, Some(a)).unwrap();
        assert_eq!(
            admission
                .counters
                .refused_connections
                .load(Ordering::Relaxed),
            2
        );
    }
}
