//! The unreliable datagram channels endpoints run on, one per URL scheme: the provider
//! interface of this crate (as a libfabric provider or an Open MPI BTL is to theirs).
//!
//! A backend moves datagrams of at most [`Backend::mtu`] bytes between this endpoint and
//! addresses it resolves; it may drop, and (sim with faults) reorder, duplicate or corrupt
//! them. It owns the registered memory that [`Buf`]s and [`RecvBuf`]s live in. The
//! [`Endpoint`](crate::Endpoint) adds peers, RPP and completions on top.
//!
//! # The core and the capabilities
//!
//! [`Backend`] is the datagram core every backend implements: addresses, registered
//! buffers, sends, receives, progress, events, counters. What only some backends can do
//! is a capability trait they opt into:
//!
//! | capability             | who     | what the endpoint gets                                        |
//! |------------------------|---------|---------------------------------------------------------------|
//! | [`Lending`]            | sim     | RPP's packets sent by DMA from the application's lent buffer |
//! | [`NativeReliability`]  | shm     | reliable mode with no RPP: the channel acknowledges itself   |
//! | [`Socket`]             | udp     | segmentation offload, path MTUs, a connected socket, mio     |
//!
//! The endpoint holds an [`AnyBackend`], one variant per scheme: the core is dispatched
//! by a `match` (no virtual call per packet), and a capability is asked for by variant,
//! with what the endpoint does without it written once, there.

pub(crate) mod shm;
pub(crate) mod sim;
pub(crate) mod udp;

use crate::buffer::{Buf, RecvBuf};
use crate::error::{InsertError, PeerFailure, SendError, SendErrorKind};
use crate::url::{Address, Scheme};
use shm::ShmBackend;
use sim::SimBackend;
use std::net::SocketAddr;
use udp::UdpBackend;

/// A backend's address of a remote endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum RemoteAddr {
    /// The fabric port index of a simulated endpoint in the same world.
    Sim(u16),
    /// A UDP socket address.
    Udp(SocketAddr),
    /// The other side of the shared-memory region.
    Shm,
}

/// How a send went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sent {
    /// The bytes were copied into registered memory first (heap fallback, or a buffer
    /// registered elsewhere).
    pub(crate) copied: bool,
}

/// A datagram that arrived.
pub(crate) struct Incoming {
    /// Who sent it.
    pub(crate) from: RemoteAddr,
    /// Its bytes, in registered memory where possible.
    pub(crate) data: RecvBuf,
}

/// Something the backend learned about a remote endpoint on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BackendEvent {
    /// The remote process is gone (shm: its pid is dead).
    PeerGone {
        /// Which.
        addr: RemoteAddr,
        /// Why the backend thinks so.
        why: PeerFailure,
        /// Noticed only as a new process took the remote side ([`BackendEvent::PeerReplaced`]
        /// follows at once): a restart rather than a failure.
        replaced: bool,
    },
    /// A new process took the remote side (shm: a new owner of the peer's side).
    PeerReplaced {
        /// Which.
        addr: RemoteAddr,
    },
}

/// Counters a backend keeps.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct BackendCounters {
    /// Datagrams that could not be parsed or were impossible (dropped).
    pub(crate) malformed: u64,
    /// `sim://` with DMA-checksum integrity: datagrams whose landed checksum differed
    /// from their sender's (dropped).
    pub(crate) bad_dma_checksum: u64,
    /// Datagrams received into the heap because registered memory had run out.
    pub(crate) recv_heap: u64,
    /// Failed operating-system calls that did not fail the endpoint.
    pub(crate) io_errors: u64,
    /// Datagrams of a peer's earlier life, or for an earlier owner of this side (dropped).
    pub(crate) stale: u64,
    /// UDP segmentation offload: system calls that sent several datagrams at once.
    pub(crate) gso_sends: u64,
    /// Datagrams those calls carried.
    pub(crate) gso_segments: u64,
    /// Segmentation-offload sends the kernel refused (segmentation is then off for the
    /// socket and the datagrams went out one by one).
    pub(crate) gso_fallbacks: u64,
    /// UDP receive coalescing: buffers that held more than one datagram.
    pub(crate) gro_buffers: u64,
    /// Datagrams those buffers held.
    pub(crate) gro_segments: u64,
    /// `udp://`: receiving system calls made, and those that found the socket empty.
    pub(crate) recv_calls: u64,
    pub(crate) recv_calls_empty: u64,
    /// `udp://`: datagrams the host's own network stack dropped on their way out (a
    /// full queue to the first hop: the send failed with `ENOBUFS`).
    pub(crate) local_drops: u64,
    /// `udp://`: sockets opened for the endpoint's one peer (see the udp backend's module
    /// documentation).
    pub(crate) peer_sockets: u64,
}

/// The datagram core every backend has: the provider interface (see the module
/// documentation). What only some backends can do are capabilities they opt into:
/// [`Lending`], [`NativeReliability`], [`Socket`].
pub(crate) trait Backend: Send {
    /// The URL scheme.
    fn scheme(&self) -> Scheme;
    /// The endpoint's own address, as a URL peers can insert.
    fn local_url(&self) -> String;
    /// Largest datagram.
    fn mtu(&self) -> usize;
    /// Whether datagrams arrive in the order sent (shm rings do; networks need not).
    fn ordered(&self) -> bool;
    /// Whether datagrams are never lost (shm rings: a full ring pushes back instead).
    fn lossless(&self) -> bool;
    /// Whether [`Backend::send_gather`] copies header and payload into registered memory
    /// (true where the channel can only send from its own memory: the board, the region).
    fn gather_copies(&self) -> bool;
    /// The time, in nanoseconds since an epoch of the backend's choosing (virtual for sim).
    fn now(&self) -> u64;
    /// The time as of the last [`Backend::progress`] call (a backend whose clock reading
    /// costs something keeps it; the rest read the clock).
    fn progressed_at(&self) -> u64 {
        self.now()
    }
    /// When the backend will next do something by itself (a simulated board's timers), in
    /// the time of [`Backend::now`]; `None` for backends that need no call for that.
    fn next_deadline(&self) -> Option<u64> {
        None
    }
    /// The remote address of a peer URL.
    fn resolve(&mut self, addr: &Address) -> Result<RemoteAddr, InsertError>;
    /// A remote address as a URL.
    fn addr_url(&self, addr: &RemoteAddr) -> String;
    /// A buffer of `len` bytes in registered memory, if some is free and `len` fits.
    fn alloc(&mut self, len: usize) -> Option<Buf>;
    /// Sends `buf` as one datagram, from where it is when it is registered here.
    fn send(&mut self, to: &RemoteAddr, buf: Buf) -> Result<Sent, SendError>;
    /// Sends `header` then `payload` as one datagram (gathered where the backend can).
    fn send_gather(
        &mut self,
        to: &RemoteAddr,
        header: &[u8],
        payload: &[u8],
    ) -> Result<Sent, SendErrorKind>;
    /// Whether a send to `to` would be taken now.
    fn can_send(&mut self, to: &RemoteAddr) -> bool;
    /// The next datagram that arrived, if any.
    fn recv(&mut self) -> Option<Incoming>;
    /// Whether nothing can have arrived or become due since the last
    /// [`Backend::progress`] that found nothing to do, short of a new call from the host
    /// (a simulated board stepped inline and quiet: a few loads). Backends that cannot
    /// tell cheaply say `false`.
    fn is_idle(&self) -> bool {
        false
    }
    /// How many datagrams of `datagram` bytes the receiving side can queue before it
    /// drops what comes next (a socket's receive buffer over what the kernel charges for
    /// one); `None` where the channel pushes back instead of dropping (rings, the board).
    fn recv_capacity(&self, _datagram: usize) -> Option<u32> {
        None
    }
    /// Whether reading [`Backend::progressed_at`] costs a clock reading worth saving on a
    /// pass that found nothing: the endpoint then looks at its timers only every few empty
    /// passes (a socket read by a spinning host: a few microseconds late at most). Backends
    /// in virtual time say `false`, so their timers fire on the pass they fall due.
    fn coarse_timers(&self) -> bool {
        false
    }
    /// Whether a datagram sent now can reach a process on the other side: an `shm://`
    /// region's other side taken (after a look at it); elsewhere always (a socket cannot
    /// tell).
    fn peer_attached(&mut self) -> bool {
        true
    }
    /// Lets the device start on what was just posted, where the host must step it (a
    /// simulated board run inline: the doorbell rings and the board takes the packet at
    /// once instead of at the next progress call). Returns whether anything happened.
    fn kick(&mut self) -> bool {
        false
    }
    /// Does the backend's own work (steps a simulated board, checks a shm peer's life).
    /// Returns whether anything happened.
    fn progress(&mut self) -> bool;
    /// The next event, if any.
    fn poll_event(&mut self) -> Option<BackendEvent>;
    /// Whether [`Backend::poll_event`] has something (a cheap look).
    fn has_events(&self) -> bool {
        true
    }
    /// Counters.
    fn counters(&self) -> BackendCounters;
    /// Packets the device below dropped, by cause (a simulated board's control program).
    fn board_drops(&mut self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }
}

/// Capability: sending a reliable message's packets straight from the buffer the
/// application wrote it in, lent to the channel while the protocol keeps it (sim: each
/// transmission is a DMA from the application's buffer). With it, `alloc` gives
/// registered memory in reliable mode too.
pub(crate) trait Lending: Backend {
    /// Like [`Backend::send_gather`], where `payload` starts at `message.1` of the buffer
    /// `message.0`: sent from that buffer's memory when it is lent, with no copy.
    fn send_gather_from(
        &mut self,
        to: &RemoteAddr,
        header: &[u8],
        payload: &[u8],
        message: Option<(&Buf, usize)>,
    ) -> Result<Sent, SendErrorKind>;
    /// Looks at what the channel has finished sending, so lent buffers can be taken back.
    fn reap(&mut self);
}

/// Capability: reliability given by the channel itself (shm): lossless and ordered
/// between live processes, and it tells when the remote process dies. Then reliable mode
/// runs no RPP.
pub(crate) trait NativeReliability: Backend {
    /// Whether this endpoint runs it (the mode it was opened in asked for it).
    fn native_reliable(&self) -> bool;
    /// Sends `buf` as one message of any length up to
    /// [`NativeReliability::native_max_message`] (fragmented across datagrams where
    /// needed); `tag` comes back with the buffer once the remote application has taken
    /// the message ([`NativeReliability::poll_acked`]). Refusals give the buffer back.
    fn send_reliable(&mut self, to: &RemoteAddr, buf: Buf, tag: u64) -> Result<Sent, SendError>;
    /// The largest message.
    fn native_max_message(&self) -> usize;
    /// The longest message carried inside the channel's own record (acknowledged when
    /// taken off the channel).
    fn native_inject_size(&self) -> usize;
    /// A message the remote application has taken, with its tag.
    fn poll_acked(&mut self) -> Option<(u64, Buf)>;
    /// The messages the remote process never took, handed back when it was found gone
    /// (in send order).
    fn take_unacked(&mut self) -> Vec<Buf>;
    /// Whether messages are sent and not yet taken.
    fn has_unacked(&self) -> bool;
    /// Whether a message is part-way out (fragments waiting for slots to come back).
    fn has_partial(&self) -> bool;
    /// The incarnation of the live remote process, once known.
    fn peer_incarnation(&self) -> Option<u64>;
    /// Takes back a reassembled message's memory for the next one.
    fn recycle(&mut self, buf: Vec<u8>);
}

/// Capability: a kernel socket (udp): segmentation offload, path MTUs, a connected
/// socket, registration with a caller's `mio::Poll`.
pub(crate) trait Socket: Backend {
    /// Sends what [`Backend::send_gather`] held back to send together (segmentation
    /// offload); the endpoint calls it at the end of each transmit pass. `WouldBlock`
    /// keeps the datagrams for the next call.
    fn flush(&mut self) -> Result<(), SendErrorKind>;
    /// The largest datagram to send to `to` when the URL set no `mtu` (the path's, when
    /// segmentation offload makes small datagrams cheap). At most [`Backend::mtu`].
    fn peer_mtu(&mut self, to: &RemoteAddr) -> usize;
    /// Sends to `to` only from now on and hears only from it (a connected socket).
    fn connect(&mut self, to: &RemoteAddr) -> Result<(), InsertError>;
    /// Registers the socket with a caller's `mio::Poll` (readable: datagrams arrived).
    fn register(&mut self, registry: &mio::Registry, token: mio::Token) -> std::io::Result<()>;
    /// Undoes [`Socket::register`].
    fn deregister(&mut self, registry: &mio::Registry) -> std::io::Result<()>;
}

/// The backends, one per scheme: the endpoint calls them through this enum, so the
/// datagram core is dispatched by a `match` the compiler can inline, and the
/// capabilities are asked for by variant (no per-packet virtual call).
pub(crate) enum AnyBackend {
    /// `sim://`.
    Sim(SimBackend),
    /// `udp://`.
    Udp(UdpBackend),
    /// `shm://`.
    Shm(ShmBackend),
}

/// `$e` on whichever backend `$self` holds, bound to `$b`.
macro_rules! each {
    ($self:expr, $b:ident => $e:expr) => {
        match $self {
            AnyBackend::Sim($b) => $e,
            AnyBackend::Udp($b) => $e,
            AnyBackend::Shm($b) => $e,
        }
    };
}

impl Backend for AnyBackend {
    #[inline]
    fn scheme(&self) -> Scheme {
        each!(self, b => b.scheme())
    }
    #[inline]
    fn local_url(&self) -> String {
        each!(self, b => b.local_url())
    }
    #[inline]
    fn mtu(&self) -> usize {
        each!(self, b => b.mtu())
    }
    #[inline]
    fn ordered(&self) -> bool {
        each!(self, b => b.ordered())
    }
    #[inline]
    fn lossless(&self) -> bool {
        each!(self, b => b.lossless())
    }
    #[inline]
    fn gather_copies(&self) -> bool {
        each!(self, b => b.gather_copies())
    }
    #[inline]
    fn now(&self) -> u64 {
        each!(self, b => b.now())
    }
    #[inline]
    fn progressed_at(&self) -> u64 {
        each!(self, b => b.progressed_at())
    }
    #[inline]
    fn next_deadline(&self) -> Option<u64> {
        each!(self, b => b.next_deadline())
    }
    #[inline]
    fn resolve(&mut self, addr: &Address) -> Result<RemoteAddr, InsertError> {
        each!(self, b => b.resolve(addr))
    }
    #[inline]
    fn addr_url(&self, addr: &RemoteAddr) -> String {
        each!(self, b => b.addr_url(addr))
    }
    #[inline]
    fn alloc(&mut self, len: usize) -> Option<Buf> {
        each!(self, b => b.alloc(len))
    }
    #[inline]
    fn send(&mut self, to: &RemoteAddr, buf: Buf) -> Result<Sent, SendError> {
        each!(self, b => b.send(to, buf))
    }
    #[inline]
    fn send_gather(
        &mut self,
        to: &RemoteAddr,
        header: &[u8],
        payload: &[u8],
    ) -> Result<Sent, SendErrorKind> {
        each!(self, b => b.send_gather(to, header, payload))
    }
    #[inline]
    fn can_send(&mut self, to: &RemoteAddr) -> bool {
        each!(self, b => b.can_send(to))
    }
    // Always inline: the endpoint's pass receives three times a message on the
    // ping-pong's path, and `sim://`'s receive is a few tests and a load when nothing came.
    #[inline(always)]
    fn recv(&mut self) -> Option<Incoming> {
        each!(self, b => b.recv())
    }
    #[inline]
    fn is_idle(&self) -> bool {
        each!(self, b => b.is_idle())
    }
    #[inline]
    fn recv_capacity(&self, datagram: usize) -> Option<u32> {
        each!(self, b => b.recv_capacity(datagram))
    }
    #[inline]
    fn coarse_timers(&self) -> bool {
        each!(self, b => b.coarse_timers())
    }
    #[inline]
    fn kick(&mut self) -> bool {
        each!(self, b => b.kick())
    }
    #[inline]
    fn peer_attached(&mut self) -> bool {
        each!(self, b => b.peer_attached())
    }
    #[inline]
    fn progress(&mut self) -> bool {
        each!(self, b => b.progress())
    }
    #[inline]
    fn poll_event(&mut self) -> Option<BackendEvent> {
        each!(self, b => b.poll_event())
    }
    #[inline]
    fn has_events(&self) -> bool {
        each!(self, b => b.has_events())
    }
    #[inline]
    fn counters(&self) -> BackendCounters {
        each!(self, b => b.counters())
    }
    fn board_drops(&mut self) -> Vec<(&'static str, u64)> {
        each!(self, b => b.board_drops())
    }
}

/// The capabilities, by backend; where a backend lacks one, what the endpoint does
/// without it.
impl AnyBackend {
    /// Whether a packet the backend refused as would-block may be kept whole by the
    /// endpoint and sent first on its next pass: sim (the board had no free send buffer,
    /// nothing of the packet was taken). A udp refusal may come after part of a batch was
    /// staged, and keeping the packet there stalled RDM ping-pongs of large messages in
    /// the libfabric provider's tests; udp and shm lose the packet to the channel and RPP
    /// sends it again.
    #[inline]
    pub(crate) fn keeps_refused(&self) -> bool {
        matches!(self, AnyBackend::Sim(_))
    }

    /// Datagrams this host's network stack dropped on their way out so far (`udp://`;
    /// none elsewhere): each a congestion signal for the connection that sent it.
    #[inline]
    pub(crate) fn local_drops(&self) -> u64 {
        match self {
            AnyBackend::Udp(b) => b.local_drops(),
            _ => 0,
        }
    }

    /// Whether the backend lends ([`Lending`]).
    #[inline]
    pub(crate) fn lends(&self) -> bool {
        matches!(self, AnyBackend::Sim(_))
    }

    /// Sends a packet of a reliable message: from the lent message buffer where the
    /// backend lends ([`Lending::send_gather_from`]), else gathered.
    #[inline]
    pub(crate) fn send_packet(
        &mut self,
        to: &RemoteAddr,
        header: &[u8],
        payload: &[u8],
        message: Option<(&Buf, usize)>,
    ) -> Result<Sent, SendErrorKind> {
        match self {
            AnyBackend::Sim(b) => b.send_gather_from(to, header, payload, message),
            AnyBackend::Udp(b) => b.send_gather(to, header, payload),
            AnyBackend::Shm(b) => b.send_gather(to, header, payload),
        }
    }

    /// [`Lending::reap`] where the backend lends.
    #[inline]
    pub(crate) fn reap(&mut self) {
        if let AnyBackend::Sim(b) = self {
            b.reap();
        }
    }

    /// The backend's native reliability, when this endpoint runs it.
    #[inline]
    pub(crate) fn native(&mut self) -> Option<&mut impl NativeReliability> {
        match self {
            AnyBackend::Shm(b) if b.native_reliable() => Some(b),
            _ => None,
        }
    }

    /// [`AnyBackend::native`], to look.
    #[inline]
    pub(crate) fn native_ref(&self) -> Option<&impl NativeReliability> {
        match self {
            AnyBackend::Shm(b) if b.native_reliable() => Some(b),
            _ => None,
        }
    }

    /// [`Socket::flush`] where the backend has a socket.
    #[inline]
    pub(crate) fn flush(&mut self) -> Result<(), SendErrorKind> {
        match self {
            AnyBackend::Udp(b) => b.flush(),
            _ => Ok(()),
        }
    }

    /// [`Socket::peer_mtu`] where the backend has a socket, else [`Backend::mtu`].
    pub(crate) fn peer_mtu(&mut self, to: &RemoteAddr) -> usize {
        match self {
            AnyBackend::Udp(b) => b.peer_mtu(to),
            b => b.mtu(),
        }
    }

    /// [`Socket::connect`] where the backend has a socket; others ignore it.
    pub(crate) fn connect(&mut self, to: &RemoteAddr) -> Result<(), InsertError> {
        match self {
            AnyBackend::Udp(b) => b.connect(to),
            _ => Ok(()),
        }
    }

    /// [`Socket::register`] where the backend has a socket (`None` where it has none).
    pub(crate) fn register(
        &mut self,
        registry: &mio::Registry,
        token: mio::Token,
    ) -> Option<std::io::Result<()>> {
        match self {
            AnyBackend::Udp(b) => Some(b.register(registry, token)),
            _ => None,
        }
    }

    /// [`Socket::deregister`] where the backend has a socket (`None` where it has none).
    pub(crate) fn deregister(&mut self, registry: &mio::Registry) -> Option<std::io::Result<()>> {
        match self {
            AnyBackend::Udp(b) => Some(b.deregister(registry)),
            _ => None,
        }
    }

    /// The next progress pass reads every socket (`udp://`: the shared one beside a
    /// peer's own too); other backends read everything every pass.
    pub(crate) fn read_all_next_pass(&mut self) {
        if let AnyBackend::Udp(b) = self {
            b.read_all_next_pass();
        }
    }

    /// The endpoint has `peers` peers now, the last one `to`: a `udp://` backend gives
    /// the first a socket of its own where `allowed` (see the udp backend's module
    /// documentation) and retires it at the second; others ignore it.
    pub(crate) fn peer_added(&mut self, to: &RemoteAddr, peers: usize, allowed: bool) {
        if let AnyBackend::Udp(b) = self {
            b.peer_added(to, peers, allowed);
        }
    }
}

/// Nanoseconds since `epoch`.
pub(crate) fn nanos_since(epoch: std::time::Instant) -> u64 {
    u64::try_from(epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
}
