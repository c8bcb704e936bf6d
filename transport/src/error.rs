//! What the transport refuses, and why: one error type per operation.
//!
//! | operation                                   | error                                  |
//! |---------------------------------------------|----------------------------------------|
//! | [`Endpoint::open`](crate::Endpoint::open)   | [`OpenError`]                          |
//! | [`Endpoint::insert_addr`](crate::Endpoint::insert_addr) | [`InsertError`]            |
//! | [`Endpoint::send`](crate::Endpoint::send)   | [`SendError`] (the buffer handed back, and a [`SendErrorKind`]) |
//! | [`Endpoint::inject`](crate::Endpoint::inject) | [`SendErrorKind`]                    |
//! | [`Endpoint::register`](crate::Endpoint::register) | [`RegisterError`]              |
//! | [`BackgroundEndpoint::new`](crate::BackgroundEndpoint::new) | [`SpawnError`]       |
//! | [`SimWorld::create`](crate::sim::SimWorld::create) | [`WorldError`]                |
//!
//! A peer that fails later is reported in a completion, with a [`PeerFailure`]. The errors
//! of the layers below (the simulated board's [`ApiError`], the operating system's
//! [`std::io::Error`], the URL's [`UrlError`]) appear only as the source of a variant.

use crate::Peer;
use crate::buffer::Buf;
use crate::url::{ResolveError, Scheme, UrlError};
use myri_mcp::ApiError;
use thiserror::Error;

/// Why [`Endpoint::open`](crate::Endpoint::open) failed.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum OpenError {
    /// The URL did not parse.
    #[error("bad url: {0}")]
    Url(#[source] UrlError),
    /// [`Options::incarnation`](crate::Options::incarnation) was zero.
    #[error("invalid option: incarnation must not be zero")]
    ZeroIncarnation,
    /// The RPP settings ([`Options::rpp`](crate::Options::rpp), with the URL's `mtu`)
    /// do not make a connection.
    #[error("invalid option: {0}")]
    Rpp(#[source] myri_rpp::ConfigError),
    /// [`Options::integrity`](crate::Options::integrity) asks for a check the backend
    /// cannot make (the board's DMA checksums off `sim://`).
    #[error("invalid option: integrity={integrity} is not available on {scheme}:// (sim:// only)")]
    IntegrityNotAvailable {
        /// What was asked for.
        integrity: crate::url::Integrity,
        /// The endpoint's scheme.
        scheme: crate::url::Scheme,
    },
    /// A MAC key or a connection id (`key=`, `conn=`, or in the options) on an endpoint
    /// that runs no RPP (raw datagrams, or `shm://`'s native reliability): nothing would
    /// use it, and the user would believe the traffic authenticated.
    #[error(
        "invalid option: {what} needs RPP, and this endpoint runs none (raw, or shm:// native reliability)"
    )]
    NeedsRpp {
        /// `"key="` or `"conn="`.
        what: &'static str,
    },
    /// The `mtu` parameter is larger than the backend carries.
    #[error("mtu {mtu} is larger than a udp datagram ({max})")]
    MtuTooLarge {
        /// The mtu asked for.
        mtu: usize,
        /// The largest.
        max: usize,
    },
    /// The local address is taken (a bound port, a sim name, a shm region with two live
    /// users).
    #[error("address in use: {url}")]
    AddrInUse {
        /// The address, as a URL.
        url: String,
    },
    /// A `udp://` address that is not one of this host's.
    #[error("no such address: {url} is not an address of this host")]
    NotLocal {
        /// The address, as a URL.
        url: String,
    },
    /// The `udp://` host did not resolve.
    #[error("no such address: {0}")]
    Resolve(#[source] ResolveError),
    /// The simulated world has an endpoint on every port.
    #[error("sim world `{world}` has no free port ({max} endpoints at most)")]
    WorldFull {
        /// The world.
        world: String,
        /// Endpoints a world holds.
        max: usize,
    },
    /// The simulated world could not be built.
    #[error("{0}")]
    World(#[source] WorldError),
    /// The simulated board refused to open the endpoint's channel.
    #[error("simulated board: {0}")]
    Board(#[source] ApiError),
    /// The shared-memory region is damaged or of another version.
    #[error("shared-memory region `{name}` is unusable: {problem}")]
    BadRegion {
        /// The region.
        name: String,
        /// What is wrong.
        #[source]
        problem: RegionProblem,
    },
    /// The file system of the shared-memory region (`/dev/shm`, a tmpfs) has no room
    /// for it: containers often get a 64 MiB `/dev/shm`. Its pages are reserved when it
    /// is opened, so a region that does not fit is this error, never a `SIGBUS` later;
    /// a region this endpoint was creating is removed again.
    #[error(
        "shared-memory region `{name}` ({}) needs {need} more bytes and its file system has \
         {free} free: give /dev/shm more room (docker run --shm-size=1g, or \
         mount -o remount,size=1g /dev/shm) or remove stale myri-* regions there",
        .path.display()
    )]
    ShmNoSpace {
        /// The region.
        name: String,
        /// Its file.
        path: std::path::PathBuf,
        /// Bytes of the region not backed yet.
        need: u64,
        /// Bytes free on its file system.
        free: u64,
    },
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

/// What is wrong with a shared-memory region ([`OpenError::BadRegion`]).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum RegionProblem {
    /// It does not start with a myri region's magic word.
    #[error("not a myri region (bad magic)")]
    BadMagic,
    /// Its geometry is not this build's (another version of the crate made it).
    #[error("{what} is {found}, this build uses {want}")]
    Geometry {
        /// Which field.
        what: &'static str,
        /// Its value in the region.
        found: u64,
        /// This build's.
        want: u64,
    },
    /// The file is shorter than a region.
    #[error("file of {len} bytes is shorter than a region ({need})")]
    Short {
        /// The file's length.
        len: u64,
        /// A region's.
        need: u64,
    },
    /// The mapping is smaller than the file it maps.
    #[error("mapping is smaller than its file")]
    Mapping,
    /// Its file was removed again and again while being opened.
    #[error("the region keeps disappearing while being opened")]
    Disappearing,
    /// Its rings or slots are out of the region's bounds.
    #[error("{0}")]
    Ring(#[source] myri_ring::raw::RingError),
}

/// Why [`Endpoint::insert_addr`](crate::Endpoint::insert_addr) refused a peer address.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum InsertError {
    /// The URL did not parse.
    #[error("bad url: {0}")]
    Url(#[source] UrlError),
    /// An address of another scheme than the endpoint's.
    #[error("`{addr}` cannot be a peer of a {scheme}:// endpoint (another scheme)")]
    OtherScheme {
        /// The address given.
        addr: String,
        /// The endpoint's scheme.
        scheme: Scheme,
    },
    /// An address with parameters.
    #[error(
        "`{addr}` cannot be a peer of a {scheme}:// endpoint (peer addresses take no parameters)"
    )]
    HasParams {
        /// The address given.
        addr: String,
        /// The endpoint's scheme.
        scheme: Scheme,
    },
    /// A second peer of an endpoint connected to its one peer
    /// ([`Options::connect_one_peer`](crate::Options::connect_one_peer)).
    #[error(
        "`{addr}` cannot be a peer of a {scheme}:// endpoint (the endpoint is connected to its one peer)"
    )]
    Connected {
        /// The address given.
        addr: String,
        /// The endpoint's scheme.
        scheme: Scheme,
    },
    /// A `sim://` peer address without a name.
    #[error("no such address: sim:// needs a peer name")]
    NoName,
    /// No endpoint of that name in the endpoint's simulated world.
    #[error("no such address: sim://{name} (no such endpoint in world `{world}`)")]
    NoSuchEndpoint {
        /// The name.
        name: String,
        /// The world.
        world: String,
    },
    /// A `udp://` peer address with port 0.
    #[error("no such address: {addr} (port 0 is no peer)")]
    PortZero {
        /// The address.
        addr: String,
    },
    /// The `udp://` host did not resolve.
    #[error("no such address: {0}")]
    Resolve(#[source] ResolveError),
    /// The `udp://` host has no address of the local socket's family (IPv4 or IPv6).
    #[error("no such address: {addr} has no address of the local socket's family ({local})")]
    OtherFamily {
        /// The address.
        addr: String,
        /// The local socket's address.
        local: std::net::SocketAddr,
    },
    /// A `shm://` address other than the endpoint's own region.
    #[error(
        "no such address: {addr}: a shm://{region} endpoint talks only to the other side of its region (shm://{region})"
    )]
    OtherRegion {
        /// The address.
        addr: String,
        /// The endpoint's region.
        region: String,
    },
    /// The simulated fabric has no route to the peer.
    #[error("no such address: no route to fabric port {port}")]
    NoRoute {
        /// The peer's fabric port.
        port: u16,
    },
    /// The simulated board refused the route.
    #[error("simulated board: {0}")]
    Board(#[source] ApiError),
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

/// Why a send was refused ([`SendError::error`], [`Endpoint::inject`](crate::Endpoint::inject)).
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum SendErrorKind {
    /// No room now (a full send queue, ring or socket buffer, or no registered buffer to
    /// copy a heap buffer into): try again after
    /// [`Endpoint::progress`](crate::Endpoint::progress).
    #[error("would block: the send queue is full")]
    WouldBlock,
    /// A peer handle this endpoint never gave out.
    #[error("unknown peer {0}")]
    UnknownPeer(Peer),
    /// The peer failed earlier (see its
    /// [`Completion::PeerFailed`](crate::Completion::PeerFailed)).
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
    /// A message longer than the endpoint carries.
    #[error("message of {len} bytes is longer than the {max} this endpoint carries")]
    TooLarge {
        /// Its length.
        len: usize,
        /// The most allowed.
        max: usize,
    },
    /// `shm://` native reliability: the other side runs RPP over the region
    /// ([`Options::rpp_over_shm`](crate::Options::rpp_over_shm)); both sides must agree.
    #[error(
        "the peer runs rpp over the region (Options::rpp_over_shm) and this endpoint the \
         backend's native reliability: both sides must agree"
    )]
    ModeMismatch,
    /// The simulated fabric has no route to the peer.
    #[error("no route to the peer")]
    NoRoute,
    /// The simulated board refused.
    #[error("simulated board: {0}")]
    Board(#[source] ApiError),
    /// The shared-memory region's ring refused (it is damaged).
    #[error("shared-memory ring: {0}")]
    Ring(#[source] myri_ring::raw::RingError),
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

impl SendErrorKind {
    /// Whether this is [`SendErrorKind::WouldBlock`]: retry later.
    pub fn is_would_block(&self) -> bool {
        matches!(self, SendErrorKind::WouldBlock)
    }
}

/// A refused send: the buffer comes back, untouched.
#[derive(Debug, Error)]
#[error("{error}")]
pub struct SendError {
    /// Why.
    pub error: SendErrorKind,
    /// The buffer, still the caller's.
    pub buf: Buf,
}

impl SendError {
    /// The refusal of `buf` for `error`.
    pub fn new(error: SendErrorKind, buf: Buf) -> SendError {
        SendError { error, buf }
    }

    /// The buffer back.
    pub fn into_buf(self) -> Buf {
        self.buf
    }

    /// Whether the send would block: retry later.
    pub fn is_would_block(&self) -> bool {
        self.error.is_would_block()
    }
}

/// Why [`Endpoint::register`](crate::Endpoint::register) or
/// [`Endpoint::deregister`](crate::Endpoint::deregister) failed.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum RegisterError {
    /// Only `udp://` endpoints have a socket to register.
    #[error("not supported by the {0}:// backend")]
    Unsupported(Scheme),
    /// mio refused.
    #[error("{op}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// Why [`BackgroundEndpoint::new`](crate::BackgroundEndpoint::new) failed.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum SpawnError {
    /// The progress thread did not start.
    #[error("spawning the progress thread: {0}")]
    Thread(#[source] std::io::Error),
}

/// Why [`SimWorld::create`](crate::sim::SimWorld::create) (or the implicit world of a
/// `sim://` endpoint) could not be built.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum WorldError {
    /// A world name outside the allowed characters or length (see [`crate::url`]).
    #[error("bad world name `{0}`")]
    BadName(String),
    /// A world of that name is alive.
    #[error("address in use: sim world `{0}` exists")]
    Exists(String),
    /// [`WorldConfig::mcp_threads`](crate::sim::WorldConfig::mcp_threads) without
    /// [`SimClock::Real`](crate::sim::SimClock::Real).
    #[error(
        "invalid option: a sim world whose control programs run on threads needs the real clock"
    )]
    ThreadsNeedRealClock,
    /// The fabric could not be built.
    #[error("building the simulated fabric: {0}")]
    Fabric(#[source] myri_device::fabric::TopologyError),
    /// A fault setting is not a probability.
    #[error("invalid option: {0}")]
    Faults(#[source] myri_device::fabric::fault::BadProbability),
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
            _ => PeerFailure::Aborted {
                why: "a failure this version of the transport does not know",
            },
        }
    }
}

/// `op` failing with an OS error, as a `map_err` argument.
macro_rules! io_err {
    ($ty:ident, $op:expr) => {
        |source: std::io::Error| $crate::error::$ty::Io { op: $op, source }
    };
}
pub(crate) use io_err;
