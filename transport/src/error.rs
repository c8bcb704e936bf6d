//! What the transport refuses, and why.

use crate::Peer;
use crate::buffer::Buf;
use crate::url::UrlError;
use thiserror::Error;

/// An endpoint operation that could not be done.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum Error {
    /// The URL did not parse.
    #[error("bad url: {0}")]
    Url(#[from] UrlError),
    /// A peer address of another scheme than the endpoint's, or with parameters.
    #[error("`{addr}` cannot be a peer of a {scheme}:// endpoint ({why})")]
    BadPeerAddr {
        /// The address given.
        addr: String,
        /// The endpoint's scheme.
        scheme: crate::Scheme,
        /// What is wrong with it.
        why: &'static str,
    },
    /// The local address is taken (a bound port, a sim name, an shm region with two live
    /// users).
    #[error("address in use: {0}")]
    AddrInUse(String),
    /// A peer address that does not resolve to anything.
    #[error("no such address: {0}")]
    AddrNotFound(String),
    /// A peer handle this endpoint never gave out (or one already removed).
    #[error("unknown peer {0}")]
    UnknownPeer(Peer),
    /// A message longer than the endpoint carries.
    #[error("message of {len} bytes is longer than the {max} this endpoint carries")]
    TooLarge {
        /// Its length.
        len: usize,
        /// The most allowed.
        max: usize,
    },
    /// No room now (a full send queue, ring or socket buffer, or no registered buffer to
    /// copy a heap buffer into): try again after [`Endpoint::progress`](crate::Endpoint::progress).
    #[error("would block: the send queue is full")]
    WouldBlock,
    /// The peer failed earlier (unreachable, crashed, or broke the protocol): see its
    /// [`Completion::PeerFailed`](crate::Completion::PeerFailed).
    #[error("peer {peer} failed earlier")]
    PeerFailed {
        /// Which.
        peer: Peer,
    },
    /// The peer's reliable connection is closing or closed
    /// ([`Completion::PeerClosed`](crate::Completion::PeerClosed)).
    #[error("the connection to peer {peer} is closed")]
    PeerClosed {
        /// Which.
        peer: Peer,
    },
    /// The shared-memory region is damaged or of another version.
    #[error("shared-memory region `{name}` is unusable: {why}")]
    BadRegion {
        /// The region.
        name: String,
        /// What is wrong.
        why: String,
    },
    /// The operation needs another backend (registering a shm endpoint with mio, say).
    #[error("not supported by the {0}:// backend")]
    Unsupported(crate::Scheme),
    /// Invalid options.
    #[error("invalid option: {0}")]
    Config(String),
    /// The simulated board refused.
    #[error("simulated board: {0}")]
    Board(#[from] myri_mcp::ApiError),
    /// An operating-system call failed.
    #[error("{op}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    pub(crate) fn io(op: &'static str) -> impl FnOnce(std::io::Error) -> Error {
        move |source| Error::Io { op, source }
    }

    /// Whether this is [`Error::WouldBlock`]: retry later.
    pub fn is_would_block(&self) -> bool {
        matches!(self, Error::WouldBlock)
    }
}

/// A refused send: the buffer comes back, untouched.
#[derive(Debug, Error)]
#[error("{error}")]
pub struct SendError {
    /// Why.
    pub error: Error,
    /// The buffer, still the caller's.
    pub buf: Buf,
}

impl SendError {
    /// The buffer back.
    pub fn into_buf(self) -> Buf {
        self.buf
    }
}

/// Why a peer failed ([`Completion::PeerFailed`](crate::Completion::PeerFailed)): what
/// RPP's timers or protocol checks found, or what the backend saw of the peer's process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Error)]
#[non_exhaustive]
pub enum PeerFailure {
    /// Reliable mode: the peer answered nothing through `retries` retransmission timeouts
    /// in a row (RPP's `max_retries` and `peer_timeout`).
    #[error("peer unreachable: no answer after {retries} retries")]
    Unreachable {
        /// The retries made.
        retries: u32,
    },
    /// Reliable mode: the peer sent a valid packet that breaks the protocol (message
    /// framing): nothing it sends can be trusted.
    #[error("protocol violation by the peer: {what}")]
    ProtocolViolation {
        /// What it broke.
        what: &'static str,
    },
    /// Reliable mode: the connection was aborted by this side.
    #[error("connection aborted: {why}")]
    Aborted {
        /// Why.
        why: &'static str,
    },
    /// `shm://`: the peer's process died (its pid is gone).
    #[error("the peer process died")]
    ProcessGone,
    /// `shm://`: the peer closed its side of the region.
    #[error("the peer closed its side of the region")]
    Closed,
    /// `shm://` raw mode: a new process took the peer's side before the old one was seen
    /// gone ([`Completion::PeerRestarted`](crate::Completion::PeerRestarted) follows).
    #[error("the peer process was replaced")]
    Replaced,
}

impl From<myri_rpp::ConnectionError> for PeerFailure {
    fn from(e: myri_rpp::ConnectionError) -> PeerFailure {
        use myri_rpp::ConnectionError as C;
        match e {
            C::PeerUnreachable { retries } => PeerFailure::Unreachable { retries },
            C::ProtocolViolation(what) => PeerFailure::ProtocolViolation { what },
            C::Aborted(why) => PeerFailure::Aborted { why },
        }
    }
}
