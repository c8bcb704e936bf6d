//! The unreliable datagram channels endpoints run on, one per URL scheme: the provider
//! interface of this crate (as a libfabric provider or an Open MPI BTL is to theirs).
//!
//! A backend moves datagrams of at most [`Backend::mtu`] bytes between this endpoint and
//! addresses it resolves; it may drop, and (sim with faults) reorder, duplicate or corrupt
//! them. It owns the registered memory that [`Buf`]s and [`RecvBuf`]s live in. The
//! [`Endpoint`](crate::Endpoint) adds peers, RPP and completions on top.

pub(crate) mod shm;
pub(crate) mod sim;
pub(crate) mod udp;

use crate::buffer::{Buf, RecvBuf};
use crate::error::{InsertError, PeerFailure, SendError, SendErrorKind};
use crate::url::{Address, Scheme};
use std::net::SocketAddr;

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
}

/// The provider interface. See the module documentation.
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
    /// Whether the backend can send a message's bytes from the buffer the application
    /// wrote them in while the reliable protocol keeps it ([`Backend::send_gather_from`]
    /// with a lent buffer): then `alloc` gives registered memory in reliable mode too.
    fn lends(&self) -> bool {
        false
    }
    /// Like [`Backend::send_gather`], where `payload` starts at `message.1` of the buffer
    /// `message.0`: a backend that can send from that buffer's memory does, with no copy.
    fn send_gather_from(
        &mut self,
        to: &RemoteAddr,
        header: &[u8],
        payload: &[u8],
        message: Option<(&Buf, usize)>,
    ) -> Result<Sent, SendErrorKind> {
        let _ = message;
        self.send_gather(to, header, payload)
    }
    /// Looks at what the channel has finished sending, so lent buffers can be taken back.
    fn reap(&mut self) {}
    /// Sends `header` then `payload` as one datagram (gathered where the backend can).
    fn send_gather(
        &mut self,
        to: &RemoteAddr,
        header: &[u8],
        payload: &[u8],
    ) -> Result<Sent, SendErrorKind>;
    /// Whether a send to `to` would be taken now.
    fn can_send(&mut self, to: &RemoteAddr) -> bool;
    /// Sends what [`Backend::send_gather`] held back to send together (UDP segmentation
    /// offload); the endpoint calls it at the end of each transmit pass. `WouldBlock`
    /// keeps the datagrams for the next call.
    fn flush(&mut self) -> Result<(), SendErrorKind> {
        Ok(())
    }
    /// The largest datagram to send to `to` when the URL set no `mtu` (UDP: the path's, when
    /// segmentation offload makes small datagrams cheap). At most [`Backend::mtu`].
    fn peer_mtu(&mut self, _to: &RemoteAddr) -> usize {
        self.mtu()
    }
    /// The next datagram that arrived, if any.
    fn recv(&mut self) -> Option<Incoming>;
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
    /// Whether the backend gives reliability itself ([`Backend::send_reliable`] and the
    /// calls after it): a channel that is lossless and ordered between live processes and
    /// tells when the remote process dies (shm). Then reliable mode runs no RPP.
    fn native_reliable(&self) -> bool {
        false
    }
    /// Native reliability: sends `buf` as one message of any length up to
    /// [`Backend::native_max_message`] (fragmented across datagrams where needed); `tag`
    /// comes back with the buffer once the remote application has taken the message
    /// ([`Backend::poll_acked`]). Refusals give the buffer back.
    fn send_reliable(&mut self, _to: &RemoteAddr, _buf: Buf, _tag: u64) -> Result<Sent, SendError> {
        unreachable!("the endpoint asks only backends with native reliability")
    }
    /// Native reliability: the largest message.
    fn native_max_message(&self) -> usize {
        0
    }
    /// Native reliability: the longest message carried inside the channel's own record
    /// (acknowledged when taken off the channel).
    fn native_inject_size(&self) -> usize {
        0
    }
    /// Native reliability: a message the remote application has taken, with its tag.
    fn poll_acked(&mut self) -> Option<(u64, Buf)> {
        None
    }
    /// Native reliability: the messages the remote process never took, handed back when it
    /// was found gone (in send order).
    fn take_unacked(&mut self) -> Vec<Buf> {
        Vec::new()
    }
    /// Native reliability: whether messages are sent and not yet taken.
    fn has_unacked(&self) -> bool {
        false
    }
    /// Native reliability: the incarnation of the live remote process, once known.
    fn peer_incarnation(&self) -> Option<u64> {
        None
    }
    /// Native reliability: takes back a reassembled message's memory for the next one.
    fn recycle(&mut self, _buf: Vec<u8>) {}
    /// Sends to `to` only from now on and hears only from it, where the backend can make
    /// that cheaper (UDP: a connected socket). Others ignore it.
    fn connect(&mut self, _to: &RemoteAddr) -> Result<(), InsertError> {
        Ok(())
    }
    /// The UDP socket, to register with a caller's `mio::Poll` (UDP only).
    fn udp_socket(&mut self) -> Option<&mut mio::net::UdpSocket> {
        None
    }
}

/// Nanoseconds since `epoch`.
pub(crate) fn nanos_since(epoch: std::time::Instant) -> u64 {
    u64::try_from(epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
}
