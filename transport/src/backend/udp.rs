//! `udp://host:port`: a non-blocking UDP socket (mio), so endpoints in two processes or on
//! two machines talk.
//!
//! # Registered memory
//!
//! Registered memory is a slab of equal slots allocated at open ([`SLAB_SLOTS`] of
//! [`SLOT_LEN`] bytes): `alloc` hands out slots, and datagrams are received straight into
//! free slots and handed to the application as views of them. A send reads the
//! application's buffer where it is (the kernel copies it, as it must); a gathered send
//! (RPP header + the application's payload) goes out with one `sendmsg` of two iovecs,
//! so the payload is never copied in user space either. When the slab is empty, `alloc`
//! falls back to the heap (the send still copies nothing here) and datagrams are received
//! into heap buffers (counted).
//!
//! # Receiving
//!
//! Receiving takes a batch of up to [`RECV_BATCH`] datagrams with one `recvmmsg` call
//! (the `sys` module), into slots the backend keeps ready. A batch that comes back short
//! says the socket is empty, so a progress pass ends without a failing call to find that
//! out: a ping-pong costs the same system calls as over a bare socket. A pass takes at
//! most [`RECV_BUDGET`] datagrams, so the endpoint acknowledges a fast stream often.
//! The batch adapts: it doubles after a full one and shrinks to what the last one got,
//! and a batch of one is a plain `recvfrom`. A waiting endpoint (a ping-pong) then polls
//! with the cheapest call and sets up no message headers it will not use, which matters
//! because every pass's own work adds to the delay before it sees the next datagram.
//! The socket calls go through `syscall(2)`, not the C library's wrappers, which are
//! thread cancellation points and cost atomic operations in a multi-threaded process.
//!
//! The kernel drops a datagram that finds the socket's receive queue full, so a peer's
//! window is capped to the datagrams of its size the queue holds
//! ([`RECV_BUFFER`] asked for, past `net.core.rmem_max` where the process may): a
//! receiver that falls behind then holds its sender back instead of losing packets.
//!
//! # The first peer's own socket
//!
//! An unconnected socket costs the kernel a route lookup for every datagram it sends
//! (the output route) and for every datagram it receives (the input route: only a
//! connected socket is found by the early demultiplexing that skips it), a measurable
//! part of a loopback ping-pong (`benches/RESULTS.md`). So while the endpoint has
//! exactly one peer ([`UdpBackend::peer_added`], when the endpoint's options allow it),
//! that peer gets a socket of its own: bound to the same address and port (both sockets
//! set `SO_REUSEPORT`, the shared one after it was bound, so a plain bind of the port by
//! another socket still fails) and connected to the peer. The kernel hands the peer's
//! datagrams to that socket and everyone else's to the shared one, and sends to the
//! peer leave by it. A progress pass reads the peer's socket, and the shared one every
//! [`SHARED_PERIOD`] passes, before the peer's, so a waiting ping-pong still costs one
//! system call a pass. Registered with a caller's `mio::Poll`, both sockets wake it;
//! since a pass may skip the shared socket, a caller about to sleep on its poll runs
//! passes that read both ([`UdpBackend::read_all_next_pass`], through
//! `Endpoint::progress_all`) until one finds nothing, or an edge-triggered wake-up left
//! unread would be lost. (Once the
//! shared socket has `SO_REUSEPORT`, a process of the same user could bind the port with
//! it too and share the shared socket's datagrams; such a process can read this one's
//! memory anyway.) A second peer
//! retires the socket: what it holds is read, and then it is closed (a datagram the
//! kernel is delivering to it at that instant is lost, as a datagram may be; RPP sends
//! it again). Counted in [`BackendCounters::peer_sockets`].
//!
//! # Segmentation offload
//!
//! The `gso` URL parameter (see [`crate::url`]) turns it on or off. On a link whose
//! MTU is far below a UDP datagram (1500-byte Ethernet), 64 KiB datagrams are fragmented
//! by IP, and datagrams that fit the link cost one system call each way per 1.4 KiB. With
//! segmentation offload on, [`Backend::send_gather`] copies each packet into a staging
//! buffer instead of sending it, and sends the buffer with one `sendmsg` carrying a
//! `UDP_SEGMENT` control message (the kernel, or the NIC, cuts it into datagrams of the
//! first packet's size) when a packet of another size or for another peer comes, when it
//! holds 64 datagrams or a datagram's worth of bytes, at the end of a paced batch
//! (`Gather::batch_end`: so a paced flow's buffers are one burst each), and at the end of
//! the endpoint's transmit pass ([`Socket::flush`]). The socket has `UDP_GRO` on, so the kernel hands
//! over a run of datagrams of one flow in one buffer with their size; the buffer (a slab
//! slot) is split into one view per datagram, shared, back in the slab when the last view
//! drops. A kernel that refuses the offloaded send (`EINVAL`, `EIO`: no checksum offload,
//! a segment larger than the route's MTU) gets the staged datagrams one call each, and
//! the socket sends that way from then on ([`BackendCounters::gso_fallbacks`]). Without
//! `mtu=`, the datagram size for a peer is the path's ([`Socket::peer_mtu`]), offload or
//! not, and the offload is turned on when that is at most half a datagram; on loopback
//! (MTU 64 KiB) nothing changes. Only an `mtu=` above the path's makes IP fragment the
//! datagrams: a datagram is then lost with any of its fragments, and under loss the
//! receiving kernel's reassembly memory fills with incomplete ones it keeps for
//! `ipfrag_time` (30 s by default), dropping every fragment that comes meanwhile.

use super::{Backend, BackendCounters, BackendEvent, Incoming, RemoteAddr, Sent, Socket};
use crate::buffer::{Buf, BufKind, PoolSlot, RecvBuf, RecvKind, SlotPool};
use crate::error::{InsertError, OpenError, SendError, SendErrorKind, io_err};
use crate::sys;
use crate::url::{Address, ResolveError, Scheme};
use mio::net::UdpSocket;
use std::collections::VecDeque;
use std::io::ErrorKind;
use std::net::{SocketAddr, ToSocketAddrs};
use std::ops::Range;
use std::sync::Arc;
use std::time::Instant;

/// Largest UDP payload over IPv4.
pub const MAX_DATAGRAM: usize = 65_507;
/// Bytes of each slab slot: the largest datagram fits.
pub const SLOT_LEN: usize = 65_536;
/// Slots in the slab (4 MiB).
pub const SLAB_SLOTS: usize = 64;
/// Most datagrams taken from the socket in one progress pass: the endpoint then runs its
/// timers and sends its acknowledgements before it reads on, so a sender streaming into
/// a busy receiver hears from it every few datagrams instead of once per socket buffer.
pub const RECV_BUDGET: usize = 16;
/// Bytes of receive buffer a socket asks for: room for bursts (the default drops under a
/// fast stream), and the bound of a peer's window ([`Backend::recv_capacity`]). Past
/// `net.core.rmem_max` only with `CAP_NET_ADMIN` (`SO_RCVBUFFORCE`); a host that caps it
/// lower caps the window with it, as a TCP receive buffer caps TCP's.
const RECV_BUFFER: usize = 4 << 20;

/// Datagrams one `recvmmsg` call takes at most.
pub const RECV_BATCH: usize = 8;
/// With a peer's own socket (see the module documentation), the shared socket is read
/// every this many progress passes: datagrams from anyone else wait at most that long.
pub const SHARED_PERIOD: u64 = 64;
/// Gathered packets up to this many bytes are copied together and sent with `sendto`.
pub const SMALL_SEND: usize = 256;
/// Largest datagram held back for a segmentation-offload send: a longer one could not
/// share a send with another, so it goes out at once, gathered from where it lies.
pub const MAX_STAGED_DATAGRAM: usize = MAX_DATAGRAM / 2;
/// Least path payload taken from the kernel's route (IPv6's minimum MTU less headers):
/// a smaller answer is not believed.
const MIN_PATH_PAYLOAD: usize = 1232;

/// Datagrams held back to go out with one segmentation-offload send: all of `segment`
/// bytes but the last, which may be shorter, one after the other, for one peer.
#[derive(Default)]
struct Staging {
    /// The peer, while any datagram is held.
    to: Option<SocketAddr>,
    bytes: Vec<u8>,
    /// The first datagram's length.
    segment: usize,
    count: usize,
    /// The last datagram was shorter than `segment`: nothing more may follow it.
    closed: bool,
}

impl Staging {
    /// Whether a datagram of `len` bytes for `to` may join what is held.
    fn takes(&self, to: SocketAddr, len: usize) -> bool {
        self.count == 0
            || (self.to == Some(to)
                && !self.closed
                && len <= self.segment
                && self.count < sys::MAX_SEGMENTS
                && self.bytes.len() + len <= MAX_DATAGRAM)
    }

    fn push(&mut self, to: SocketAddr, header: &[u8], payload: &[u8]) {
        let len = header.len() + payload.len();
        if self.count == 0 {
            self.to = Some(to);
            self.segment = len;
        } else if len < self.segment {
            self.closed = true;
        }
        self.bytes.extend_from_slice(header);
        self.bytes.extend_from_slice(payload);
        self.count += 1;
    }

    /// Whether no further datagram could join.
    fn full(&self) -> bool {
        self.closed
            || self.count >= sys::MAX_SEGMENTS
            || self.bytes.len() + self.segment > MAX_DATAGRAM
    }

    /// Forgets the first `n` datagrams (sent).
    fn consume(&mut self, n: usize) {
        let bytes = (n * self.segment).min(self.bytes.len());
        self.bytes.drain(..bytes);
        self.count -= n.min(self.count);
        if self.count == 0 {
            self.clear();
        }
    }

    fn clear(&mut self) {
        self.to = None;
        self.bytes.clear();
        self.count = 0;
        self.closed = false;
    }
}

/// The datagrams of a coalesced buffer of `len` bytes: `segment` bytes each (at least
/// one), the last shorter when `len` is no multiple of it.
fn segment_ranges(len: usize, segment: usize) -> impl Iterator<Item = Range<usize>> {
    let segment = segment.max(1);
    (0..len)
        .step_by(segment)
        .map(move |at| at..(at + segment).min(len))
}

/// Whether a failed offloaded send says the kernel or the route cannot segment (not that
/// the datagrams were bad): then they go out one by one.
fn gso_refused(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EINVAL | libc::EIO | libc::EOPNOTSUPP | libc::ENOPROTOOPT)
    )
}

/// The endpoint's one peer's own socket: bound where the shared one is, connected to the
/// peer (see the module documentation).
struct PeerSocket {
    addr: SocketAddr,
    socket: UdpSocket,
}

/// The socket a datagram to `to` leaves by, and the address that socket is connected to:
/// the peer's own socket for its peer, else the shared one.
#[inline]
fn route<'a>(
    shared: &'a UdpSocket,
    connected: Option<SocketAddr>,
    peer: &'a Option<PeerSocket>,
    to: SocketAddr,
) -> (&'a UdpSocket, Option<SocketAddr>) {
    match peer {
        Some(p) if p.addr == to => (&p.socket, Some(p.addr)),
        _ => (shared, connected),
    }
}

/// What a received datagram of `len` bytes costs its socket's receive buffer: the
/// kernel charges a buffer's true size (`skb->truesize`), not its payload. Measured on
/// loopback (`SO_MEMINFO` after one datagram): up to about 16 KiB the data sits in one
/// allocation rounded up to a power of two (1,472 bytes cost 2,304; 8,192 cost 16,640),
/// above it in page fragments (65,507 cost 66,339). Rounded up here, so the estimate is
/// never below what loopback charges; a network card's driver may charge more per frame.
fn kernel_charge(len: usize) -> usize {
    const OVERHEAD: usize = 832;
    const HEADROOM: usize = 384;
    if len + HEADROOM <= 16 << 10 {
        (len + HEADROOM).next_power_of_two() + OVERHEAD
    } else {
        len + OVERHEAD
    }
}

/// Sends `data` as one datagram to `to` (on the connected socket's own path when `to` is
/// its peer).
fn send_datagram(
    socket: &UdpSocket,
    connected: Option<SocketAddr>,
    to: SocketAddr,
    data: &[u8],
) -> std::io::Result<usize> {
    sys::send_to(socket, data, (connected != Some(to)).then_some(to))
}

/// Sends `header` and `payload` as one datagram to `to`, gathered by the kernel.
fn send_vectored(
    socket: &UdpSocket,
    connected: Option<SocketAddr>,
    to: SocketAddr,
    header: &[u8],
    payload: &[u8],
    counters: &mut BackendCounters,
) -> std::io::Result<usize> {
    let to = (connected != Some(to)).then_some(to);
    send_past_icmp(socket, counters, || {
        sys::send_gather(socket, header, payload, to)
    })
}

/// Makes a send through `socket`. Under `IP_RECVERR` the kernel keeps the error of an
/// ICMP message about an earlier datagram (a peer's closed port, an unreachable host)
/// and fails the socket's next call with it, whatever that call sends and to whom,
/// without sending: such an error is counted, the error queue emptied, and the send
/// made once more.
fn send_past_icmp<T>(
    socket: &UdpSocket,
    counters: &mut BackendCounters,
    mut send: impl FnMut() -> std::io::Result<T>,
) -> std::io::Result<T> {
    match send() {
        Err(e) if reported_by_icmp(&e) => {
            counters.io_errors += 1;
            sys::drain_errors(socket, 64);
            send()
        }
        r => r,
    }
}

/// Whether `e` is what an ICMP error for an earlier datagram turns into (`ip(7)`).
fn reported_by_icmp(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ECONNREFUSED | libc::EHOSTUNREACH | libc::ENETUNREACH | libc::EHOSTDOWN)
    )
}

/// A buffer a batch is received into.
enum RxBuf {
    /// A slab slot (the datagram is handed out as a view of it).
    Slot(PoolSlot),
    /// Heap scratch memory, when the slab had none free: kept from batch to batch, and
    /// a datagram that lands here is handed out as a copy of just its bytes (no buffer
    /// of a slot's size is allocated and zeroed for every acknowledgement).
    Heap(Vec<u8>),
    /// Handed out; refilled before the next batch.
    Taken,
}

impl AsMut<[u8]> for RxBuf {
    fn as_mut(&mut self) -> &mut [u8] {
        match self {
            RxBuf::Slot(s) => s.as_mut_slice(),
            RxBuf::Heap(v) => v,
            RxBuf::Taken => &mut [],
        }
    }
}

/// The socket, its slab and its counters.
pub(crate) struct UdpBackend {
    socket: UdpSocket,
    local: SocketAddr,
    mtu: usize,
    pool: Arc<SlotPool>,
    /// Where the next batch is received: slab slots, heap buffers when the slab is
    /// empty ([`RECV_BATCH`] of them, refilled as datagrams are handed out).
    rx: Vec<RxBuf>,
    /// What the last batch's call reported.
    received: Vec<sys::Received>,
    /// Scratch buffers not in `rx` now, kept for the next time the slab runs out.
    scratch: Vec<Vec<u8>>,
    /// Datagrams of the last batch not yet handed out.
    ready: VecDeque<Incoming>,
    /// The last batch came back short, so the socket was empty then: this progress pass
    /// reads no more (no failing call to find out it is empty).
    drained: bool,
    epoch: Instant,
    counters: BackendCounters,
    /// Datagrams this progress pass may still take ([`RECV_BUDGET`] at its start).
    budget: usize,
    /// Datagrams the next call asks for (1 to [`RECV_BATCH`]).
    batch: usize,
    /// The one peer the socket is connected to ([`Socket::connect`]), if it is.
    connected: Option<SocketAddr>,
    /// The endpoint's one peer's own socket, while it has exactly one.
    peer: Option<PeerSocket>,
    /// With a peer socket: the shared socket is due this pass and not read dry yet. It
    /// is read before the peer's (every [`SHARED_PERIOD`] passes, or when asked), so that
    /// the read never comes between the peer's datagram and the application.
    shared_due: bool,
    /// Progress passes so far (the shared socket is read every [`SHARED_PERIOD`]).
    passes: u64,
    /// The caller's `mio` registry and token ([`Socket::register`]): a peer socket opened
    /// later is registered too.
    registered: Option<(mio::Registry, mio::Token)>,
    /// The next progress pass reads the shared socket too ([`UdpBackend::read_all_next_pass`]).
    read_all: bool,
    /// The URL set `mtu=` (every peer gets it; no path MTU is asked).
    explicit_mtu: bool,
    /// Bytes the kernel lets the shared socket's receive queue hold (`SO_RCVBUF` as it
    /// reports it; a peer's own socket asks for the same).
    recv_buffer: usize,
    /// The kernel takes segmentation-offload sends on this socket (and has not refused
    /// one since).
    gso_ok: bool,
    /// Segmentation offload is in use: `send_gather` stages datagrams.
    gso_on: bool,
    /// `UDP_GRO` is on: receives read the segment size and split coalesced buffers.
    gro_on: bool,
    staging: Staging,
}

impl UdpBackend {
    /// Binds `host:port`. `mtu` and `gso` are the URL's parameters (see [`crate::url`]).
    pub(crate) fn open(
        host: &str,
        port: u16,
        mtu: Option<usize>,
        gso: Option<bool>,
    ) -> Result<UdpBackend, OpenError> {
        let address = Address::Udp {
            host: host.to_owned(),
            port,
        };
        let addr = address.socket_addr().map_err(OpenError::Resolve)?;
        let socket = UdpSocket::bind(addr).map_err(|e| match e.kind() {
            ErrorKind::AddrInUse => OpenError::AddrInUse {
                url: format!("udp://{addr}"),
            },
            ErrorKind::AddrNotAvailable => OpenError::NotLocal {
                url: format!("udp://{addr}"),
            },
            _ => OpenError::Io {
                op: "binding the udp socket",
                source: e,
            },
        })?;
        let local = socket
            .local_addr()
            .map_err(io_err!(OpenError, "reading the bound address"))?;
        let explicit_mtu = mtu.is_some();
        let mtu = mtu.unwrap_or(MAX_DATAGRAM);
        if mtu > MAX_DATAGRAM {
            return Err(OpenError::MtuTooLarge {
                mtu,
                max: MAX_DATAGRAM,
            });
        }
        // Room for bursts: the default socket buffers drop under a fast stream.
        let sock = socket2::SockRef::from(&socket);
        let recv_buffer = sys::grow_recv_buffer(&socket, RECV_BUFFER);
        let _ = sock.set_send_buffer_size(4 << 20);
        let gso_ok = gso != Some(false) && sys::gso_supported(&socket);
        // A datagram the host's own queue drops is then a failed send, counted and
        // passed on to congestion control, rather than a silent loss found a round trip
        // later (see `Backend::local_drops`).
        let _ = sys::set_recv_err(&socket, local.is_ipv6());
        let mut backend = UdpBackend {
            socket,
            local,
            mtu,
            pool: SlotPool::new(SLAB_SLOTS, SLOT_LEN),
            rx: (0..RECV_BATCH).map(|_| RxBuf::Taken).collect(),
            received: Vec::with_capacity(RECV_BATCH),
            scratch: Vec::new(),
            ready: VecDeque::with_capacity(RECV_BATCH),
            drained: false,
            epoch: Instant::now(),
            counters: BackendCounters::default(),
            budget: RECV_BUDGET,
            batch: 1,
            connected: None,
            peer: None,
            shared_due: false,
            passes: 0,
            registered: None,
            read_all: false,
            explicit_mtu,
            recv_buffer,
            gso_ok,
            gso_on: false,
            gro_on: false,
            staging: Staging::default(),
        };
        if gso == Some(true) && !gso_ok {
            // Asked for, and this kernel has none: datagrams go out one by one.
            backend.counters.gso_fallbacks += 1;
        }
        if gso == Some(true) || (explicit_mtu && mtu <= MAX_STAGED_DATAGRAM) {
            backend.start_gso();
        }
        Ok(backend)
    }

    /// Turns segmentation offload on (where the kernel has it) and receive coalescing.
    fn start_gso(&mut self) {
        if !self.gso_ok || self.gso_on {
            return;
        }
        self.gso_on = true;
        self.staging.bytes.reserve(MAX_DATAGRAM);
        // Without it the kernel cuts offloaded datagrams apart for us: slower, not wrong.
        self.gro_on = sys::set_gro(&self.socket, true).is_ok();
        if let Some(p) = &self.peer
            && self.gro_on
            && sys::set_gro(&p.socket, true).is_err()
        {
            // Its datagrams would come cut apart, which the receive path takes too.
            self.counters.io_errors += 1;
        }
    }

    /// The socket address of a remote address of this backend (another kind is none).
    fn addr(to: &RemoteAddr) -> Option<SocketAddr> {
        match to {
            RemoteAddr::Udp(a) => Some(*a),
            _ => None,
        }
    }

    /// Datagrams the host's network stack dropped on their way out so far.
    pub(crate) fn local_drops(&self) -> u64 {
        self.counters.local_drops
    }

    fn sent(&mut self, r: std::io::Result<usize>) -> Result<Sent, SendErrorKind> {
        match r {
            Ok(_) => Ok(Sent { copied: false }),
            Err(e) if e.kind() == ErrorKind::WouldBlock => Err(SendErrorKind::WouldBlock),
            // A full queue on the way out dropped it (the kernel says so under
            // `IP_RECVERR`): lost in the network, as a datagram may be, and counted as
            // congestion, not as an error.
            Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                self.counters.local_drops += 1;
                Ok(Sent { copied: false })
            }
            Err(e) => {
                self.counters.io_errors += 1;
                Err(SendErrorKind::Io {
                    op: "sending a datagram",
                    source: e,
                })
            }
        }
    }
}

impl UdpBackend {
    /// Gives the first `n` receive buffers memory again: slab slots while there are
    /// free ones, heap buffers otherwise.
    fn refill(&mut self, n: usize) {
        for b in &mut self.rx[..n] {
            match b {
                RxBuf::Taken => {
                    *b = match self.pool.take() {
                        Some(s) => RxBuf::Slot(s),
                        None => {
                            RxBuf::Heap(self.scratch.pop().unwrap_or_else(|| vec![0; SLOT_LEN]))
                        }
                    };
                }
                // Scratch memory makes way for a slot as soon as one is free again.
                RxBuf::Heap(_) => {
                    if let Some(s) = self.pool.take()
                        && let RxBuf::Heap(v) = std::mem::replace(b, RxBuf::Slot(s))
                    {
                        self.scratch.push(v);
                    }
                }
                RxBuf::Slot(_) => {}
            }
        }
    }

    /// Receives up to `want` datagrams into `rx[..want]`, reported in `received`: one
    /// `recvfrom`, or one `recvmmsg` for more, from the peer's own socket (`on_peer`, when
    /// there is one) or the shared one. A slot holds any UDP datagram, so nothing
    /// `recvfrom` takes is ever cut short.
    fn receive(&mut self, on_peer: bool, want: usize) -> std::io::Result<usize> {
        // The socket, and the one sender it hears from when it is connected.
        let (socket, sender) = match &self.peer {
            Some(p) if on_peer => (&p.socket, Some(p.addr)),
            _ => (&self.socket, self.connected),
        };
        if self.gro_on {
            return sys::recv_batch::<true, _>(socket, &mut self.rx[..want], &mut self.received);
        }
        if want != 1 {
            return sys::recv_batch::<false, _>(socket, &mut self.rx[..want], &mut self.received);
        }
        // A connected socket's datagrams all come from its peer: no address to ask the
        // kernel for.
        let (len, from) = match sender {
            Some(peer) => (sys::recv(socket, self.rx[0].as_mut())?, peer),
            None => sys::recv_from(socket, self.rx[0].as_mut())?,
        };
        self.received.push(sys::Received {
            index: 0,
            len,
            truncated: false,
            from,
            segment: None,
            bad_control: false,
        });
        Ok(1)
    }

    /// Makes the next progress pass read the shared socket as well as the peer's own (a
    /// caller about to sleep on its poll: see the module documentation).
    pub(crate) fn read_all_next_pass(&mut self) {
        self.read_all = true;
    }

    /// The endpoint has `peers` peers now, the last one `to`; `allowed` says whether its
    /// options let the first have a socket of its own (see the module documentation).
    /// The first gets one (if the kernel lets it: otherwise everything stays on the
    /// shared socket, counted in `io_errors`); a second retires it.
    pub(crate) fn peer_added(&mut self, to: &RemoteAddr, peers: usize, allowed: bool) {
        let Some(a) = Self::addr(to) else {
            return;
        };
        if peers >= 2 {
            self.retire_peer_socket();
            return;
        }
        if peers != 1 || !allowed || self.connected.is_some() || self.peer.is_some() {
            return;
        }
        match self.open_peer_socket(a) {
            Ok(socket) => {
                self.counters.peer_sockets += 1;
                self.peer = Some(PeerSocket { addr: a, socket });
            }
            Err(_) => self.counters.io_errors += 1,
        }
    }

    /// A socket bound where the shared one is and connected to `to`, with the shared
    /// one's options.
    fn open_peer_socket(&mut self, to: SocketAddr) -> std::io::Result<UdpSocket> {
        use socket2::{Domain, Protocol, Socket as Raw, Type};
        // Set after the shared socket's bind, so that a plain bind of the port still
        // fails; only a socket that sets it too (this one) may share the port.
        socket2::SockRef::from(&self.socket).set_reuse_port(true)?;
        let raw = Raw::new(
            Domain::for_address(self.local),
            Type::DGRAM,
            Some(Protocol::UDP),
        )?;
        raw.set_reuse_port(true)?;
        if self.local.is_ipv6() {
            raw.set_only_v6(socket2::SockRef::from(&self.socket).only_v6()?)?;
        }
        raw.set_nonblocking(true)?;
        sys::grow_recv_buffer(&raw, RECV_BUFFER);
        let _ = raw.set_send_buffer_size(4 << 20);
        raw.bind(&self.local.into())?;
        raw.connect(&to.into())?;
        let mut socket = UdpSocket::from_std(raw.into());
        let _ = sys::set_recv_err(&socket, self.local.is_ipv6());
        if self.gro_on {
            sys::set_gro(&socket, true)?;
        }
        if let Some((registry, token)) = &self.registered {
            registry.register(&mut socket, *token, mio::Interest::READABLE)?;
        }
        Ok(socket)
    }

    /// Reads what the peer's own socket holds into `ready` and closes it: the shared
    /// socket takes the peer's datagrams from then on.
    fn retire_peer_socket(&mut self) {
        if self.peer.is_none() {
            return;
        }
        for _ in 0..1024 {
            self.refill(RECV_BATCH);
            self.received.clear();
            self.counters.recv_calls += 1;
            match self.receive(true, RECV_BATCH) {
                Ok(got) => {
                    // Handed out whatever this pass's budget says: these are read already.
                    let budget = self.budget;
                    self.hand_out();
                    self.budget = budget;
                    if got < RECV_BATCH {
                        break;
                    }
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    self.counters.recv_calls_empty += 1;
                    break;
                }
                Err(_) => {
                    self.counters.io_errors += 1;
                    if let Some(p) = &self.peer {
                        sys::drain_errors(&p.socket, 64);
                    }
                }
            }
        }
        if let Some(mut p) = self.peer.take()
            && let Some((registry, _)) = &self.registered
        {
            let _ = registry.deregister(&mut p.socket);
        }
        // The shared socket is the only one again: read it from now on.
        self.drained = false;
        self.shared_due = false;
    }

    /// Moves what the last batch received into `ready`, as views of its buffers: one per
    /// datagram, several of one buffer when the kernel coalesced them.
    fn hand_out(&mut self) {
        for k in 0..self.received.len() {
            let r = self.received[k];
            if r.segment.is_some_and(|s| s < r.len) {
                self.hand_out_coalesced(r);
                continue;
            }
            self.budget = self.budget.saturating_sub(1);
            let Some(b) = self.rx.get_mut(r.index) else {
                continue;
            };
            if r.truncated || r.bad_control {
                // Longer than a slot, which no UDP datagram is, or a coalesced buffer
                // whose segment size the kernel did not say right: never from a peer of
                // ours, and not to be split safely.
                self.counters.malformed += 1;
                continue;
            }
            let storage = match b {
                RxBuf::Slot(_) => match std::mem::replace(b, RxBuf::Taken) {
                    RxBuf::Slot(s) => RecvKind::Pool(s),
                    _ => continue,
                },
                RxBuf::Heap(v) => {
                    self.counters.recv_heap += 1;
                    RecvKind::Heap(v[..r.len.min(v.len())].to_vec())
                }
                RxBuf::Taken => continue,
            };
            self.ready.push_back(Incoming {
                from: RemoteAddr::Udp(r.from),
                data: RecvBuf::new(storage, 0..r.len),
            });
        }
        self.received.clear();
    }

    /// Hands out a buffer of several datagrams of `r.segment` bytes (the last may be
    /// shorter), coalesced by the kernel from one flow, so all from `r.from`: one view per
    /// datagram of the slot, shared by them.
    #[inline(never)]
    fn hand_out_coalesced(&mut self, r: sys::Received) {
        let segment = r.segment.unwrap_or(r.len).max(1);
        let count = r.len.div_ceil(segment);
        self.budget = self.budget.saturating_sub(count);
        let Some(b) = self.rx.get_mut(r.index) else {
            return;
        };
        if r.truncated || r.bad_control {
            self.counters.malformed += 1;
            return;
        }
        self.counters.gro_buffers += 1;
        self.counters.gro_segments += count as u64;
        let from = RemoteAddr::Udp(r.from);
        let ranges = segment_ranges(r.len, segment);
        match b {
            RxBuf::Slot(_) => {
                let RxBuf::Slot(s) = std::mem::replace(b, RxBuf::Taken) else {
                    return;
                };
                let shared = Arc::new(s);
                for range in ranges {
                    let kind = RecvKind::SharedPool(shared.clone());
                    self.ready.push_back(Incoming {
                        from,
                        data: RecvBuf::new(kind, range),
                    });
                }
            }
            RxBuf::Heap(v) => {
                for range in ranges {
                    self.counters.recv_heap += 1;
                    let bytes = v.get(range).unwrap_or_default().to_vec();
                    self.ready.push_back(Incoming {
                        from,
                        data: RecvBuf::from_vec(bytes),
                    });
                }
            }
            RxBuf::Taken => {}
        }
    }

    /// [`Backend::send_gather`] with segmentation offload on: holds the datagram back to go
    /// out with the ones around it (one copy, of the kind the kernel would make anyway),
    /// or sends it at once when it is too long to share a send or the kernel refused the
    /// offload.
    #[inline(never)]
    fn stage(
        &mut self,
        to: SocketAddr,
        header: &[u8],
        payload: &[u8],
    ) -> Result<Sent, SendErrorKind> {
        let len = header.len() + payload.len();
        if !self.staging.takes(to, len) || !self.gso_ok || len > MAX_STAGED_DATAGRAM {
            self.send_staged()?;
        }
        if !self.gso_ok || len > MAX_STAGED_DATAGRAM {
            let (socket, connected) = route(&self.socket, self.connected, &self.peer, to);
            let r = send_vectored(socket, connected, to, header, payload, &mut self.counters);
            return self.sent(r);
        }
        self.staging.push(to, header, payload);
        if self.staging.full() {
            // Would-block keeps them staged ([`Backend::can_send`] says so).
            match self.send_staged() {
                Ok(()) | Err(SendErrorKind::WouldBlock) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(Sent { copied: false })
    }

    /// Whether staged datagrams leave room for another: sends them when they are full.
    #[inline(never)]
    fn can_send_staged(&mut self) -> bool {
        !self.staging.full() || self.send_staged().is_ok()
    }

    /// Sends the staged datagrams: with one offloaded send, or (one datagram, or a kernel
    /// that refuses the offload) one call each. `WouldBlock` keeps what was not sent.
    fn send_staged(&mut self) -> Result<(), SendErrorKind> {
        let Some(to) = self.staging.to else {
            return Ok(());
        };
        if self.staging.count == 1 || !self.gso_ok {
            return self.send_staged_one_by_one(to);
        }
        let (socket, connected) = route(&self.socket, self.connected, &self.peer, to);
        let dest = (connected != Some(to)).then_some(to);
        let segment = u16::try_from(self.staging.segment).unwrap_or(u16::MAX);
        loop {
            let bytes = &self.staging.bytes;
            let r = send_past_icmp(socket, &mut self.counters, || {
                sys::send_segments(socket, dest, bytes, segment)
            });
            match r {
                Ok(_) => {
                    self.counters.gso_sends += 1;
                    self.counters.gso_segments += self.staging.count as u64;
                    self.staging.clear();
                    return Ok(());
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    return Err(SendErrorKind::WouldBlock);
                }
                Err(e) if gso_refused(&e) => {
                    self.gso_ok = false;
                    self.counters.gso_fallbacks += 1;
                    return self.send_staged_one_by_one(to);
                }
                Err(e) => {
                    // Lost to the channel, counted; RPP sends them again.
                    self.staging.clear();
                    return self.sent(Err(e)).map(|_| ());
                }
            }
        }
    }

    /// Sends the staged datagrams one call each.
    fn send_staged_one_by_one(&mut self, to: SocketAddr) -> Result<(), SendErrorKind> {
        let mut first_error = Ok(());
        while self.staging.count > 0 {
            let len = self.staging.segment.min(self.staging.bytes.len());
            let (socket, connected) = route(&self.socket, self.connected, &self.peer, to);
            let bytes = &self.staging.bytes[..len];
            let r = send_past_icmp(socket, &mut self.counters, || {
                send_datagram(socket, connected, to, bytes)
            });
            match r {
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    return Err(SendErrorKind::WouldBlock);
                }
                r => {
                    // An error other than would-block loses this datagram only (counted).
                    if let Err(e) = self.sent(r)
                        && first_error.is_ok()
                    {
                        first_error = Err(e);
                    }
                    self.staging.consume(1);
                }
            }
        }
        first_error
    }
}

impl Backend for UdpBackend {
    fn scheme(&self) -> Scheme {
        Scheme::Udp
    }

    fn local_url(&self) -> String {
        format!("udp://{}", self.local)
    }

    fn mtu(&self) -> usize {
        self.mtu
    }

    fn recv_capacity(&self, datagram: usize) -> Option<u32> {
        // Three quarters of the buffer: Linux hands back the memory of datagrams a reader
        // has taken only once it adds up to a quarter of the buffer (`udp_rmem_release`),
        // so a socket read as fast as it fills still holds up to that much charged. A
        // sender held to the whole buffer overran a receiver that kept up (28 of 1,026
        // datagrams of 64 KiB dropped; `myri-fabric`'s 64 MiB pieces test).
        let usable = self.recv_buffer - self.recv_buffer / 4;
        (usable > 0).then(|| u32::try_from(usable / kernel_charge(datagram)).unwrap_or(u32::MAX))
    }

    fn ordered(&self) -> bool {
        false
    }

    fn lossless(&self) -> bool {
        false
    }

    fn gather_copies(&self) -> bool {
        false
    }

    fn now(&self) -> u64 {
        super::nanos_since(self.epoch)
    }

    fn resolve(&mut self, addr: &Address) -> Result<RemoteAddr, InsertError> {
        let Address::Udp { host, port } = addr else {
            return Err(InsertError::Resolve(ResolveError::NotUdp {
                scheme: addr.scheme(),
            }));
        };
        if *port == 0 {
            return Err(InsertError::PortZero {
                addr: addr.to_string(),
            });
        }
        let mut a = addr.socket_addr().map_err(InsertError::Resolve)?;
        // An IPv4 peer of an IPv6 socket (or the reverse) is unreachable: say so now.
        if a.is_ipv4() != self.local.is_ipv4() {
            let other = (host.as_str(), *port)
                .to_socket_addrs()
                .ok()
                .and_then(|mut it| it.find(|x| x.is_ipv4() == self.local.is_ipv4()));
            a = other.ok_or_else(|| InsertError::OtherFamily {
                addr: addr.to_string(),
                local: self.local,
            })?;
        }
        Ok(RemoteAddr::Udp(a))
    }

    fn addr_url(&self, addr: &RemoteAddr) -> String {
        match addr {
            RemoteAddr::Udp(a) => format!("udp://{a}"),
            other => format!("{other:?}"),
        }
    }

    fn alloc(&mut self, len: usize) -> Option<Buf> {
        if len > SLOT_LEN {
            return None;
        }
        Some(Buf::new(BufKind::Pool(self.pool.take()?), len))
    }

    fn send(&mut self, to: &RemoteAddr, buf: Buf) -> Result<Sent, SendError> {
        let r = Self::addr(to).ok_or(SendErrorKind::NoRoute).and_then(|a| {
            if buf.len() > self.mtu {
                return Err(SendErrorKind::TooLarge {
                    len: buf.len(),
                    max: self.mtu,
                });
            }
            // Datagrams staged before this one leave before it.
            self.send_staged()?;
            let (socket, connected) = route(&self.socket, self.connected, &self.peer, a);
            let r = send_past_icmp(socket, &mut self.counters, || {
                send_datagram(socket, connected, a, &buf)
            });
            self.sent(r)
        });
        match r {
            // The buffer goes back to the slab (or the heap) now: the kernel has its bytes.
            Ok(s) => Ok(s),
            Err(error) => Err(SendError { error, buf }),
        }
    }

    fn send_gather(
        &mut self,
        to: &RemoteAddr,
        header: &[u8],
        payload: &[u8],
    ) -> Result<Sent, SendErrorKind> {
        let a = Self::addr(to).ok_or(SendErrorKind::NoRoute)?;
        let len = header.len() + payload.len();
        if len > self.mtu {
            return Err(SendErrorKind::TooLarge { len, max: self.mtu });
        }
        if self.gso_on {
            return self.stage(a, header, payload);
        }
        // A small packet is put together on the stack and sent with `sendto`: cheaper in
        // the kernel than `sendmsg`'s message header and vector (and the copy is a few
        // dozen bytes); a large one is gathered by the kernel from where it lies. One
        // already whole (RPP copies a short payload behind its header) goes as it is.
        if payload.is_empty() {
            let (socket, connected) = route(&self.socket, self.connected, &self.peer, a);
            let r = send_past_icmp(socket, &mut self.counters, || {
                send_datagram(socket, connected, a, header)
            });
            return self.sent(r);
        }
        if len <= SMALL_SEND {
            let mut packet = [0u8; SMALL_SEND];
            packet[..header.len()].copy_from_slice(header);
            packet[header.len()..len].copy_from_slice(payload);
            let (socket, connected) = route(&self.socket, self.connected, &self.peer, a);
            let r = send_past_icmp(socket, &mut self.counters, || {
                send_datagram(socket, connected, a, &packet[..len])
            });
            return self.sent(r);
        }
        let (socket, connected) = route(&self.socket, self.connected, &self.peer, a);
        let r = send_vectored(socket, connected, a, header, payload, &mut self.counters);
        self.sent(r)
    }

    #[inline]
    fn can_send(&mut self, _to: &RemoteAddr) -> bool {
        // Datagrams still staged after a full buffer or a would-block go first.
        self.staging.count == 0 || self.can_send_staged()
    }

    fn recv(&mut self) -> Option<Incoming> {
        if let Some(i) = self.ready.pop_front() {
            return Some(i);
        }
        // Bounded: a socket that keeps failing is counted, not spun on.
        for _ in 0..64 {
            if self.budget == 0 {
                return None;
            }
            // With a peer socket, the shared socket first when it is due this pass, then
            // the peer's; without, the one socket.
            let on_peer = if self.shared_due {
                false
            } else if !self.drained {
                self.peer.is_some()
            } else {
                return None;
            };
            let shared_aside = self.peer.is_some() && !on_peer;
            let want = if shared_aside {
                self.budget.min(RECV_BATCH)
            } else {
                self.budget.min(self.batch)
            };
            self.refill(want);
            self.received.clear();
            self.counters.recv_calls += 1;
            match self.receive(on_peer, want) {
                Ok(got) => {
                    if shared_aside {
                        self.shared_due = got == want;
                    } else {
                        // A lone datagram after the socket ran dry (a ping-pong's answer)
                        // goes to the application without a second system call to find
                        // the socket empty; the batch grows for the next pass, so a
                        // stream still comes in batches once it flows.
                        self.drained = got < want || want == 1;
                        self.batch = if got == want {
                            (self.batch * 2).min(RECV_BATCH)
                        } else {
                            got.max(1)
                        };
                    }
                    self.hand_out();
                    if let Some(i) = self.ready.pop_front() {
                        return Some(i);
                    }
                    // Every datagram of the batch was dropped: read on.
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    self.counters.recv_calls_empty += 1;
                    if shared_aside {
                        self.shared_due = false;
                    } else {
                        self.drained = true;
                        self.batch = 1;
                    }
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => {
                    // An ICMP error for an earlier send (port unreachable): not fatal.
                    // Its copy on the error queue goes too, or the queue would hold
                    // receive-buffer memory.
                    self.counters.io_errors += 1;
                    let socket = match &self.peer {
                        Some(p) if on_peer => &p.socket,
                        _ => &self.socket,
                    };
                    sys::drain_errors(socket, 64);
                }
            }
        }
        None
    }

    fn progress(&mut self) -> bool {
        if self.staging.count > 0 {
            // Left by a would-block: they go first.
            let _ = self.send_staged();
        }
        self.budget = RECV_BUDGET;
        self.drained = false;
        self.passes = self.passes.wrapping_add(1);
        // The shared socket beside a peer's own: every few passes, or when asked.
        let asked = std::mem::take(&mut self.read_all);
        let due = asked || self.passes.is_multiple_of(SHARED_PERIOD);
        self.shared_due = self.peer.is_some() && due;
        false
    }

    fn poll_event(&mut self) -> Option<BackendEvent> {
        None
    }

    fn coarse_timers(&self) -> bool {
        true
    }

    fn counters(&self) -> BackendCounters {
        self.counters
    }
}

impl Socket for UdpBackend {
    fn flush(&mut self) -> Result<(), SendErrorKind> {
        if self.staging.count == 0 {
            return Ok(());
        }
        self.send_staged()
    }

    fn peer_mtu(&mut self, to: &RemoteAddr) -> usize {
        // The path's size with or without offload: fragments stall under loss (see the
        // module documentation).
        if self.explicit_mtu {
            return self.mtu;
        }
        let Some(a) = Self::addr(to) else {
            return self.mtu;
        };
        match sys::path_payload(self.local, a) {
            Ok(p) if p >= MIN_PATH_PAYLOAD => {
                let p = p.min(self.mtu);
                if p <= MAX_STAGED_DATAGRAM {
                    // Where the kernel has it and `gso=0` did not turn it off.
                    self.start_gso();
                }
                p
            }
            // No route yet, or an answer not to believe: IP fragments what it must.
            _ => self.mtu,
        }
    }

    fn connect(&mut self, to: &RemoteAddr) -> Result<(), InsertError> {
        let Some(a) = Self::addr(to) else {
            return Ok(());
        };
        self.socket.connect(a).map_err(io_err!(
            InsertError,
            "connecting the udp socket to its one peer"
        ))?;
        self.connected = Some(a);
        Ok(())
    }

    fn register(&mut self, registry: &mio::Registry, token: mio::Token) -> std::io::Result<()> {
        let kept = registry.try_clone()?;
        registry.register(&mut self.socket, token, mio::Interest::READABLE)?;
        if let Some(p) = &mut self.peer {
            registry.register(&mut p.socket, token, mio::Interest::READABLE)?;
        }
        self.registered = Some((kept, token));
        Ok(())
    }

    fn deregister(&mut self, registry: &mio::Registry) -> std::io::Result<()> {
        self.registered = None;
        if let Some(p) = &mut self.peer {
            registry.deregister(&mut p.socket)?;
        }
        registry.deregister(&mut self.socket)
    }
}

#[cfg(test)]
mod tests;
