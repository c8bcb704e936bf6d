//! What the proxy counts, as it prints it (`--json` serializes these structs).

use super::pipe::PipeCounters;
use serde::Serialize;

/// Client sessions: one per client address, each with its own upstream socket.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct SessionCounters {
    /// Sessions opened.
    pub opened: u64,
    /// Sessions closed after `idle_timeout` with no datagram either way.
    pub closed_idle: u64,
    /// Sessions open now.
    pub active: u64,
    /// Datagrams from an address other than the pinned `--client`, dropped.
    pub refused_not_client: u64,
    /// Datagrams from a new client when `max_clients` sessions were open, dropped.
    pub refused_full: u64,
    /// Datagrams dropped because their session's upstream socket could not be made.
    pub refused_no_socket: u64,
    /// Datagrams from the server before any client spoke (with `--upstream-bind`), dropped.
    pub refused_no_client: u64,
}

/// One direction: the fault core's counters and what the sockets did with its output.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct DirectionStats {
    /// The fault core's counters.
    #[serde(flatten)]
    pub pipe: PipeCounters,
    /// Forwarded datagrams the socket refused (a full socket buffer, an unreachable server,
    /// or a session closed while they waited); not sent.
    pub send_failed: u64,
    /// Datagrams waiting in the core (delayed or held back).
    pub pending: u64,
    /// Datagrams the kernel dropped at the receiving socket before the proxy read them
    /// (a full receive buffer: the count `SO_RXQ_OVFL` reports): the proxy's own losses,
    /// apart from the injected ones.
    pub kernel_drops: u64,
}

impl DirectionStats {
    /// Datagrams that left the proxy: forwarded and accepted by the socket.
    pub fn sent(&self) -> u64 {
        self.pipe.forwarded - self.send_failed
    }
}

/// Everything the proxy counted since it started.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ProxyStats {
    /// Milliseconds since the proxy started.
    pub elapsed_ms: u64,
    /// The address clients send to, `udp://host:port`.
    pub listen: String,
    /// The server's address.
    pub upstream: String,
    /// The seed of the fault decisions.
    pub seed: u64,
    /// Client sessions.
    pub sessions: SessionCounters,
    /// Times the server's host answered a datagram with "port unreachable" (no server
    /// listening at the upstream address).
    pub upstream_refused: u64,
    /// Datagrams from the clients to the server.
    pub to_server: DirectionStats,
    /// Datagrams from the server to the clients.
    pub to_client: DirectionStats,
}
