//! The endpoint: what an application or framework holds. See the crate documentation.

mod native;

use crate::backend::shm::{ShmBackend, ShmMode};
use crate::backend::sim::SimBackend;
use crate::backend::udp::UdpBackend;
use crate::backend::{AnyBackend, Backend, BackendEvent, NativeReliability, RemoteAddr};
use crate::buffer::{Buf, RecvBuf, SEND_INLINE_MAX, SendKind};
use crate::error::{
    InsertError, OpenError, PeerFailure, RegisterError, SendError, SendErrorKind, io_err,
};
use crate::url::{Address, Congestion, Integrity, Scheme, Url};
use myri_rpp::{Connection, Event, Received};
use std::collections::{HashMap, VecDeque};
use std::time::Duration;

/// A peer of an endpoint: a small integer handle given by [`Endpoint::insert_addr`] (or
/// by [`Completion::NewPeer`]), valid for the endpoint's life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Peer(pub u32);

impl core::fmt::Display for Peer {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// Identifies a send: in reliable mode the message id for that peer (counting from zero
/// per peer and peer incarnation; RPP's, or the shm backend's own), in raw mode a counter
/// of the endpoint's sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MsgId(pub u64);

/// What an endpoint can do (as a libfabric provider's `fi_info` or an Open MPI BTL's
/// module fields tell).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Capabilities {
    /// The backend's scheme.
    pub scheme: Scheme,
    /// Largest message [`Endpoint::send`] takes.
    pub max_message_size: usize,
    /// Largest datagram the backend carries (a larger reliable message is fragmented).
    pub mtu: usize,
    /// Largest message [`Endpoint::inject`] sends straight from the caller's bytes. With
    /// `shm://` native reliability, the longest message carried inside the ring record
    /// (64 bytes): such a message is acknowledged ([`Completion::Sent`]) once the
    /// receiving endpoint took it off the ring, and `inject` takes longer ones too,
    /// through a slot.
    pub inject_size: usize,
    /// Messages are never lost (reliable mode, or a lossless channel).
    pub reliable: bool,
    /// Messages arrive in the order sent.
    pub ordered: bool,
    /// [`Endpoint::alloc`] gives buffers in the backend's registered memory, sent and
    /// received without a copy.
    pub copy_free: bool,
}

/// How to open an endpoint: [`Options::default`] and the `with_*` methods, as in
/// `Options::default().with_reliable(false)`; the fields are public for reading (and
/// for setting in place, as `options.rpp.max_retries = 3`).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Options {
    /// RPP on top (true) or raw datagrams, when the URL does not say (`reliable=`).
    /// Default: reliable.
    pub reliable: bool,
    /// Take datagrams from addresses never inserted, as new peers
    /// ([`Completion::NewPeer`]); a server does. Default: false (counted in
    /// [`Stats::unknown_source`] and dropped).
    pub accept_unknown_peers: bool,
    /// This life's incarnation for RPP (different in every life: peers tell a restart by
    /// it, and RPP drops packets that name another). Default: 64 random bits from the
    /// kernel at open, so an off-path host cannot guess it.
    pub incarnation: Option<u64>,
    /// RPP settings; `mtu` is set to the backend's, and in-place delivery is turned on.
    pub rpp: myri_rpp::Config,
    /// Most received messages held for [`Endpoint::recv`]; past it the endpoint stops
    /// taking datagrams from the backend (which pushes back or drops, as it does).
    pub max_pending_deliveries: usize,
    /// `shm://` in reliable mode: run RPP over the rings (true) instead of the backend's
    /// native reliability (false, the default). Native reliability sends straight on the
    /// ring, with no protocol header, no checksum and no timer: the rings lose nothing
    /// and keep order, and a dead peer shows in the region's owner words. A message is
    /// acknowledged ([`Completion::Sent`]) when the peer's application has dropped it (a
    /// message of at most [`Capabilities::inject_size`] bytes, carried in the ring record,
    /// when the peer's endpoint took it off the ring); a peer's death hands back every
    /// message not acknowledged, intact, in send order, and what the dead peer had put on
    /// the ring is still delivered; messages longer than a
    /// slot ([`crate::SHM_SLOT_LEN`]) are fragmented and reassembled (one copy), up to
    /// [`myri_rpp::Config::max_message_len`]. Both sides of a region must agree. Other
    /// backends ignore this.
    pub rpp_over_shm: bool,
    /// `udp://` with one peer (a client of one server): connect the socket to the first
    /// peer inserted, as a bare UDP client does. The kernel then sends without a route
    /// lookup per datagram and drops
    /// datagrams from any other address before the endpoint sees them (so they are not
    /// counted in [`Stats::unknown_source`]); inserting a second peer is an error
    /// ([`InsertError::Connected`]). Ignored with [`Options::accept_unknown_peers`] and by
    /// other backends. Default: false.
    pub connect_one_peer: bool,
    /// What checks datagrams end to end, when the URL does not say (`integrity=`, see
    /// [`crate::url`]). Default: `None`: for a reliable endpoint the best the scheme's
    /// path offers ([`Integrity::default_for`]: the board's DMA checksums on `sim://`,
    /// CRC-32C elsewhere), for a raw one [`Integrity::None`] (the channel as it is, checked
    /// by its links). [`Integrity::Dma`] is for `sim://` only: the endpoint drops every
    /// datagram whose board checksums differ ([`Stats::bad_dma_checksum`]).
    pub integrity: Option<Integrity>,
    /// RPP's connection id, when the URL does not say (`conn=`): both ends must use the
    /// same, and packets naming another are dropped and counted. Default: a constant
    /// (the ASCII of "myri"); an id both ends keep secret adds 64 bits an off-path host
    /// must guess to the two random incarnations (see [`crate::url`], "Who may talk to
    /// an endpoint").
    pub connection_id: u64,
    /// `udp://`: while the endpoint has exactly one peer, that peer gets a socket of its
    /// own, connected to it, beside the shared one (the kernel then skips a route lookup
    /// per datagram each way); a second peer retires it. A progress pass reads the
    /// shared socket only now and then, so a caller that sleeps on a poll
    /// ([`Endpoint::register`]) runs [`Endpoint::progress_all`] before it does. Ignored
    /// with [`Options::connect_one_peer`] (the socket is connected itself) and by other
    /// backends. Default: true.
    pub peer_socket: bool,
    /// The largest datagram, header included, when the URL does not say (`mtu=`, with
    /// the same effect: over `udp://` every peer gets it and no path MTU is asked of the
    /// kernel). Default: none (the backend's own; per peer over `udp://`).
    pub mtu: Option<usize>,
}

/// The connection id every reliable endpoint uses unless told another
/// ([`Options::connection_id`], `conn=`).
pub const DEFAULT_CONNECTION_ID: u64 = u32::from_be_bytes(*b"myri") as u64;

impl Default for Options {
    fn default() -> Options {
        Options {
            reliable: true,
            accept_unknown_peers: false,
            incarnation: None,
            rpp: myri_rpp::Config::default(),
            max_pending_deliveries: 4096,
            rpp_over_shm: false,
            connect_one_peer: false,
            integrity: None,
            connection_id: DEFAULT_CONNECTION_ID,
            peer_socket: true,
            mtu: None,
        }
    }
}

impl Options {
    /// Sets [`Options::integrity`].
    pub fn with_integrity(mut self, integrity: Integrity) -> Options {
        self.integrity = Some(integrity);
        self
    }

    /// Sets [`Options::reliable`]: RPP on top (true) or raw datagrams.
    pub fn with_reliable(mut self, reliable: bool) -> Options {
        self.reliable = reliable;
        self
    }

    /// Sets [`Options::accept_unknown_peers`].
    pub fn with_accept_unknown_peers(mut self, accept: bool) -> Options {
        self.accept_unknown_peers = accept;
        self
    }

    /// Sets [`Options::incarnation`] (`None`: 64 random bits at open).
    pub fn with_incarnation(mut self, incarnation: impl Into<Option<u64>>) -> Options {
        self.incarnation = incarnation.into();
        self
    }

    /// Sets the RPP settings ([`Options::rpp`]).
    pub fn with_rpp(mut self, rpp: myri_rpp::Config) -> Options {
        self.rpp = rpp;
        self
    }

    /// Sets [`Options::max_pending_deliveries`].
    pub fn with_max_pending_deliveries(mut self, max: usize) -> Options {
        self.max_pending_deliveries = max;
        self
    }

    /// Sets [`Options::rpp_over_shm`].
    pub fn with_rpp_over_shm(mut self, rpp_over_shm: bool) -> Options {
        self.rpp_over_shm = rpp_over_shm;
        self
    }

    /// Sets [`Options::mtu`].
    pub fn with_mtu(mut self, mtu: Option<usize>) -> Options {
        self.mtu = mtu;
        self
    }

    /// Sets [`Options::peer_socket`].
    pub fn with_peer_socket(mut self, own: bool) -> Options {
        self.peer_socket = own;
        self
    }

    /// Sets [`Options::connect_one_peer`].
    pub fn with_connect_one_peer(mut self, connect: bool) -> Options {
        self.connect_one_peer = connect;
        self
    }

    /// Sets [`Options::connection_id`].
    pub fn with_connection_id(mut self, id: u64) -> Options {
        self.connection_id = id;
        self
    }
}

/// A message received from a peer.
#[derive(Debug)]
pub struct Delivery {
    /// From whom.
    pub peer: Peer,
    /// The bytes, a view of registered memory where possible.
    pub data: RecvBuf,
    /// Over RPP: which life of its peer the message came from, as
    /// [`Endpoint::peer_life`] counted when it arrived. A receiver that takes a peer's
    /// messages as one unit (a header, then bare payload) tells by it whether the peer
    /// restarted in between: a new life's first message may be taken before the
    /// [`Completion::PeerRestarted`] that precedes it. Always 0 elsewhere.
    pub life: u32,
}

/// Something that happened to a send or a peer. See [`Endpoint::poll_completion`].
#[derive(Debug)]
#[non_exhaustive]
pub enum Completion {
    /// Reliable mode: the peer is known (its incarnation learned).
    Connected {
        /// Which.
        peer: Peer,
        /// Its incarnation.
        peer_incarnation: u64,
    },
    /// Reliable mode: the peer acknowledged the whole message; its buffer comes back.
    /// With native reliability (`shm://`) acknowledged means the peer's application has
    /// dropped (or recycled) the message, except for a message of at most
    /// [`Capabilities::inject_size`] bytes, which travels inside the ring record and is
    /// acknowledged once the peer's endpoint took it off the ring; a buffer from [`Endpoint::alloc`] comes back
    /// as the very slot it was sent from, writable again: drop or reuse it soon, as the
    /// slots of the region are few ([`crate::SHM_SLOTS`]).
    Sent {
        /// To whom.
        peer: Peer,
        /// Which send.
        id: MsgId,
        /// The buffer `send` took.
        buf: Buf,
    },
    /// A datagram came from an address never inserted and the endpoint accepts such
    /// peers ([`Options::accept_unknown_peers`]).
    NewPeer {
        /// The handle given to it.
        peer: Peer,
        /// Its address.
        addr: String,
    },
    /// The peer restarted: reliable mode saw another incarnation (messages its earlier
    /// life had not acknowledged come back: they may or may not have been delivered
    /// there; none of that life's messages is delivered any more); or a failed peer came
    /// back (a new process on a shm region's other side, a failed reliable peer heard from
    /// in a later incarnation), and its handle works again.
    PeerRestarted {
        /// Which.
        peer: Peer,
        /// Its new incarnation (0 in raw mode, which has none).
        incarnation: u64,
        /// Messages not acknowledged.
        unacked: Vec<Buf>,
    },
    /// The peer failed: unreachable, crashed, or broke the protocol. Sends to it are
    /// refused from now on; messages not acknowledged come back (reliable mode; with
    /// native reliability on `shm://`, every message the dead process had not dropped,
    /// read or not, in send order). In raw mode what the peer sent before it died is
    /// still delivered.
    PeerFailed {
        /// Which.
        peer: Peer,
        /// Why.
        why: PeerFailure,
        /// Messages not (fully) acknowledged.
        unsent: Vec<Buf>,
    },
    /// Reliable mode: the peer closed its connection; messages it had not acknowledged
    /// come back.
    PeerClosed {
        /// Which.
        peer: Peer,
        /// Messages not (fully) acknowledged.
        unsent: Vec<Buf>,
    },
}

/// What an endpoint has done. Copy-free accounting: every send is from registered
/// memory with no copy (`registered_sends`), a heap buffer (`heap_sends`), a short
/// message held in its buffer (`inline_sends`, copied behind its header), or the
/// application's own memory (`external_sends`, [`Buf::external`]); of heap and external,
/// `copied_sends` had to be copied into registered memory because the backend sends only
/// from its own (CLF's fallback).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Messages taken by `send`.
    pub sends: u64,
    /// Of those, in registered memory (handed to the backend as they are).
    pub registered_sends: u64,
    /// Of those, in heap memory.
    pub heap_sends: u64,
    /// Of those, short messages held in the buffer itself ([`Endpoint::alloc`] in
    /// reliable mode, at most [`SEND_INLINE_MAX`] bytes): copied into the packet behind
    /// its header, as RPP copies every short message.
    pub inline_sends: u64,
    /// Of those, in the application's memory ([`Buf::external`]): sent from where it is
    /// over `udp://` (RPP gathers every packet from it), copied where the backend sends
    /// only from its own memory (then counted in `copied_sends` too).
    pub external_sends: u64,
    /// Sends whose bytes were copied into registered memory (the heap fallback, or a
    /// buffer registered with another endpoint).
    pub copied_sends: u64,
    /// `alloc` calls answered with heap memory (registered memory had run out, or the
    /// length did not fit a registered buffer).
    pub heap_allocs: u64,
    /// Reliable mode: packets whose payload was copied into the channel's memory at
    /// transmit (a message longer than one of the board's DMA buffers, or written in heap
    /// memory; a message in a DMA buffer is lent to the board and sent from where it is).
    pub transmit_copies: u64,
    /// Messages delivered.
    pub recvs: u64,
    /// Of those, delivered as views of registered memory.
    pub registered_recvs: u64,
    /// Datagrams received into heap memory (registered memory had run out) or messages
    /// reassembled by RPP from fragments.
    pub heap_recvs: u64,
    /// Sends refused as would-block.
    pub would_block: u64,
    /// Datagrams from addresses that are not peers, dropped.
    pub unknown_source: u64,
    /// Datagrams the backend found malformed, dropped.
    pub malformed: u64,
    /// `sim://` with [`Integrity::Dma`]: datagrams whose checksum as they landed in host
    /// memory differed from the one their sending board computed, dropped.
    pub bad_dma_checksum: u64,
    /// Datagrams RPP dropped (bad CRC, stale incarnation, duplicates...).
    pub rpp_dropped: u64,
    /// Peers declared failed.
    pub peer_failures: u64,
    /// Datagrams of a peer's earlier life, or meant for an earlier owner of this side,
    /// dropped (`shm://`).
    pub stale: u64,
    /// Operating-system errors that did not fail the endpoint.
    pub io_errors: u64,
    /// `udp://` segmentation offload: system calls that sent several datagrams at once.
    pub gso_sends: u64,
    /// Datagrams those calls carried.
    pub gso_segments: u64,
    /// Offloaded sends the kernel refused (the socket then sends datagrams one by one).
    pub gso_fallbacks: u64,
    /// `udp://` receive coalescing: received buffers that held several datagrams.
    pub gro_buffers: u64,
    /// Datagrams those buffers held.
    pub gro_segments: u64,
    /// `udp://`: receiving system calls made (`recvfrom`, `recvmmsg`).
    pub recv_syscalls: u64,
    /// Those of them that found the socket empty (a caller spinning on `recv` makes
    /// many; one that has just received a datagram should make none).
    pub recv_syscalls_empty: u64,
    /// Datagrams handed to the backend (messages in raw mode; RPP's packets, first
    /// transmissions, retransmissions and acknowledgements, in reliable mode).
    pub datagrams_sent: u64,
    /// Datagrams taken from the backend.
    pub datagrams_received: u64,
    /// Reliable mode: packets the backend refused for want of room (no free send buffer,
    /// a full socket) and that waited whole for the next transmit pass.
    pub transmit_stalls: u64,
    /// `udp://`: datagrams this host's network stack dropped on their way out (a full
    /// queue to the first hop, `ENOBUFS`). In reliable mode each is a congestion signal
    /// to the connection that sent it, and RPP sends the datagram again.
    pub local_drops: u64,
    /// `udp://`: sockets opened for the endpoint's one peer ([`Options::peer_socket`]).
    pub peer_sockets: u64,
}

struct PeerSlot {
    addr: RemoteAddr,
    conn: Option<Connection<Buf>>,
    failed: bool,
    /// Native reliability: the peer incarnation told in a completion, the next message
    /// id, and what a restart handed back before it was announced.
    announced: Option<u64>,
    next_id: u64,
    restart_unacked: Vec<Buf>,
    /// A packet RPP handed out that the backend refused as would-block (no send buffer
    /// free, a full socket): kept whole and sent first on the next pass, rather than lost
    /// to the channel and resent only after a timeout.
    stalled: Option<Vec<u8>>,
    /// Over RPP: restarts of the peer seen so far (see [`Endpoint::peer_life`]).
    life: u32,
}

/// An endpoint: one application's access to a backend. See the crate documentation.
pub struct Endpoint {
    backend: AnyBackend,
    reliable: bool,
    /// Reliable mode given by the backend itself (shm), with no RPP.
    native: bool,
    /// Native reliability: the peer (the backend has one remote address).
    native_peer: Option<Peer>,
    /// Native reliability: `recv` calls answered without a progress pass since the last
    /// pass (a message taken off the ring, or an empty ring).
    fast_recvs: u32,
    options: Options,
    rpp: myri_rpp::Config,
    incarnation: u64,
    /// RPP's connection id ([`Options::connection_id`], `conn=`).
    conn_id: u64,
    peers: Vec<PeerSlot>,
    by_addr: HashMap<RemoteAddr, Peer>,
    /// The peer the last datagram came from, looked at before `by_addr` (a ping-pong or a
    /// stream hears from one peer many times in a row; entries of `by_addr` never change).
    last_sender: Option<(RemoteAddr, Peer)>,
    deliveries: VecDeque<Delivery>,
    completions: VecDeque<Completion>,
    /// Completions holding buffers the board still reads (a lent buffer's last send not
    /// finished yet): they follow, in order, once every buffer is back for writing.
    unsettled: VecDeque<Completion>,
    stats: Stats,
    /// What checks datagrams end to end.
    integrity: Integrity,
    next_raw_id: u64,
    header: Vec<u8>,
    /// Until when (backend time) a progress pass that finds the backend idle has nothing
    /// to do: RPP's earliest timer, when the last pass took every datagram and sent all
    /// it could; 0 when the next pass must run in full.
    idle_until: u64,
    /// Empty passes since the clock was last read (see `IDLE_CLOCK_PERIOD`).
    idle_skips: u32,
    /// The last transmit pass stopped before RPP ran out of packets.
    transmit_blocked: bool,
    /// The backend's count of datagrams the host dropped on their way out, as of the
    /// last transmit pass (`udp://`).
    local_drops: u64,
    /// The last progress pass handed messages to the application and left the rest of
    /// its work (timers, acknowledgements) to this one.
    deferred: bool,
    /// A board step outside a progress pass (a send's kick) may have left datagrams for
    /// the host since the last pass took every one: the next pass receives before it may
    /// end early (see [`Endpoint::send`]).
    recv_owed: bool,
}

/// Messages shorter than this are not lent to a backend that lends (see [`Endpoint::send`]).
const LEND_MIN: usize = 1024;

/// Where the backend's clock costs ([`Backend::coarse_timers`]), empty passes that end
/// without reading it between two that look at the timers. A spinning host's empty pass
/// takes a few hundred nanoseconds, so a timer fires at most a few microseconds late
/// (RPP's shortest, the acknowledgement delay, is tens of microseconds).
const IDLE_CLOCK_PERIOD: u32 = 7;

/// A fresh incarnation: 64 random bits from the kernel, so that an off-path host cannot
/// guess the pair a connection's packets must name (RPP drops, and counts, packets that
/// name another). Falls back to the wall clock mixed with the process id if the kernel's
/// generator cannot be read.
fn random_incarnation() -> u64 {
    use std::io::Read;
    let mut bytes = [0u8; 8];
    let random = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map(|()| u64::from_ne_bytes(bytes));
    random
        .unwrap_or_else(|_| {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
            now ^ u64::from(std::process::id()).rotate_left(40)
        })
        .max(1)
}

impl Endpoint {
    /// Opens an endpoint at `url` with default [`Options`].
    pub fn open(url: &str) -> Result<Endpoint, OpenError> {
        Endpoint::open_with(url, Options::default())
    }

    /// Opens an endpoint at `url` (see [`crate::url`] for the grammar).
    pub fn open_with(url: &str, options: Options) -> Result<Endpoint, OpenError> {
        let url: Url = url.parse().map_err(OpenError::Url)?;
        let reliable = url.params.reliable.unwrap_or(options.reliable);
        let incarnation = options.incarnation.unwrap_or_else(random_incarnation);
        if incarnation == 0 {
            return Err(OpenError::ZeroIncarnation);
        }
        let integrity = url
            .params
            .integrity
            .or(options.integrity)
            .unwrap_or_else(|| {
                if reliable {
                    Integrity::default_for(url.scheme())
                } else {
                    // A raw endpoint is the channel as it is: what it delivers is checked
                    // by the links alone unless the user asks for more.
                    Integrity::None
                }
            });
        let mtu = url.params.mtu.or(options.mtu);
        if !integrity.available_on(url.scheme()) {
            return Err(OpenError::IntegrityNotAvailable {
                integrity,
                scheme: url.scheme(),
            });
        }
        let backend = match &url.address {
            Address::Sim { name } => AnyBackend::Sim(SimBackend::open(
                name.as_deref(),
                url.params.world.as_deref(),
                integrity == Integrity::Dma,
            )?),
            Address::Udp { host, port } => {
                AnyBackend::Udp(UdpBackend::open(host, *port, mtu, url.params.gso)?)
            }
            Address::Shm { name } => {
                let mode = match (reliable, options.rpp_over_shm) {
                    (false, _) => ShmMode::Raw,
                    (true, true) => ShmMode::Rpp,
                    (true, false) => ShmMode::Native {
                        max_message: options.rpp.max_message_len,
                    },
                };
                AnyBackend::Shm(ShmBackend::open(name, incarnation, mode)?)
            }
        };
        let native = reliable && backend.native_ref().is_some();
        let mut rpp = options.rpp.clone();
        rpp.mtu = mtu.unwrap_or(backend.mtu()).min(backend.mtu());
        rpp.in_place_delivery = true;
        if let Some(cc) = url.params.cc {
            rpp.congestion = match cc {
                Congestion::Cubic => myri_rpp::congestion::CongestionControl::Cubic,
                Congestion::NewReno => myri_rpp::congestion::CongestionControl::NewReno,
                Congestion::Bbr => myri_rpp::congestion::CongestionControl::Bbr,
                _ => myri_rpp::congestion::CongestionControl::None,
            };
        }
        if let Some(pacing) = url.params.pacing {
            rpp.pacing = pacing;
        }
        // What the channel checks decides what RPP must: with the board's DMA checksums
        // covering the path (the sim backend drops mismatches, see `SimBackend::recv`),
        // RPP computes no CRC-32C.
        rpp.integrity = match integrity {
            Integrity::Dma => myri_rpp::Integrity::External,
            Integrity::None => myri_rpp::Integrity::None,
            _ => myri_rpp::Integrity::Crc32c,
        };
        if let Some(key) = &url.params.key {
            rpp.mac_key = Some(myri_rpp::wire::MacKey::new(key.0));
        }
        let conn_id = url.params.conn.unwrap_or(options.connection_id);
        let runs_rpp = reliable && !native;
        if !runs_rpp && rpp.mac_key.is_some() {
            return Err(OpenError::NeedsRpp { what: "key=" });
        }
        if !runs_rpp && url.params.conn.is_some() {
            return Err(OpenError::NeedsRpp { what: "conn=" });
        }
        if reliable {
            rpp.validate().map_err(OpenError::Rpp)?;
        }
        Ok(Endpoint {
            backend,
            reliable,
            native,
            native_peer: None,
            fast_recvs: 0,
            rpp,
            incarnation,
            conn_id,
            peers: Vec::new(),
            by_addr: HashMap::new(),
            last_sender: None,
            deliveries: VecDeque::new(),
            completions: VecDeque::new(),
            unsettled: VecDeque::new(),
            stats: Stats::default(),
            integrity,
            next_raw_id: 0,
            idle_until: 0,
            idle_skips: 0,
            transmit_blocked: false,
            local_drops: 0,
            deferred: false,
            recv_owed: false,
            // Room for a short payload behind the header (RPP then hands over one
            // contiguous packet: see `myri_rpp::Gather`).
            header: vec![0; myri_rpp::wire::MAX_HEADER_LEN + myri_rpp::INLINE_PAYLOAD],
            options,
        })
    }

    // ---- Getters ---------------------------------------------------------------------

    /// What this endpoint can do.
    pub fn capabilities(&self) -> Capabilities {
        let mtu = self.backend.mtu();
        let native = self.backend.native_ref();
        let max = if let Some(n) = native {
            n.native_max_message()
        } else if self.reliable {
            self.rpp.max_message_len
        } else {
            mtu
        };
        Capabilities {
            scheme: self.backend.scheme(),
            max_message_size: max,
            mtu,
            inject_size: native.map_or(max, NativeReliability::native_inject_size),
            reliable: self.reliable || self.backend.lossless(),
            ordered: self.reliable || self.backend.ordered(),
            copy_free: true,
        }
    }

    /// Whether the endpoint runs reliable mode (RPP on top, or the backend's native
    /// reliability: see [`Endpoint::is_native`]).
    pub fn is_reliable(&self) -> bool {
        self.reliable
    }

    /// Whether reliable mode is the backend's own (`shm://` unless
    /// [`Options::rpp_over_shm`]), with no RPP.
    pub fn is_native(&self) -> bool {
        self.native
    }

    /// This endpoint's address, as a URL a peer can insert.
    pub fn local_url(&self) -> String {
        self.backend.local_url()
    }

    /// This life's incarnation.
    pub fn incarnation(&self) -> u64 {
        self.incarnation
    }

    /// Counters, with the backend's.
    pub fn stats(&self) -> Stats {
        let b = self.backend.counters();
        Stats {
            malformed: self.stats.malformed + b.malformed,
            heap_recvs: self.stats.heap_recvs + b.recv_heap,
            io_errors: self.stats.io_errors + b.io_errors,
            stale: self.stats.stale + b.stale,
            gso_sends: b.gso_sends,
            gso_segments: b.gso_segments,
            gso_fallbacks: b.gso_fallbacks,
            gro_buffers: b.gro_buffers,
            recv_syscalls: b.recv_calls,
            recv_syscalls_empty: b.recv_calls_empty,
            gro_segments: b.gro_segments,
            bad_dma_checksum: b.bad_dma_checksum,
            local_drops: b.local_drops,
            peer_sockets: b.peer_sockets,
            ..self.stats
        }
    }

    /// What checks this endpoint's datagrams end to end (the URL's `integrity=`, else
    /// [`Options::integrity`], else the scheme's [`Integrity::default_for`] if reliable
    /// and [`Integrity::None`] if raw).
    pub fn integrity(&self) -> Integrity {
        self.integrity
    }

    /// Packets the device under a `sim://` endpoint dropped, by cause (its control
    /// program's counters, read from the board: a receive pool or channel that was full,
    /// bad packets), causes with none left out; empty on other backends.
    pub fn board_drops(&mut self) -> Vec<(&'static str, u64)> {
        self.backend.board_drops()
    }

    /// The hash of RPP's trace of events with a peer (reliable mode): two runs in virtual
    /// time from the same seed give the same hash.
    pub fn peer_trace_hash(&self, peer: Peer) -> Option<u64> {
        let conn = self.peers.get(peer.0 as usize)?.conn.as_ref()?;
        Some(conn.trace().hash())
    }

    /// RPP's counters for a peer (reliable mode).
    pub fn peer_stats(&self, peer: Peer) -> Option<myri_rpp::Stats> {
        self.peers
            .get(peer.0 as usize)?
            .conn
            .as_ref()
            .map(Connection::stats)
    }

    /// Over RPP: the longest message to `peer` that goes as one packet (the path's
    /// datagram size less RPP's largest data header and MAC), which a receiver in order
    /// takes as a view of the datagram, with no copy. `None` elsewhere (raw, native
    /// reliability) and for an unknown peer.
    pub fn peer_packet_payload(&self, peer: Peer) -> Option<usize> {
        let conn = self.peers.get(peer.0 as usize)?.conn.as_ref()?;
        Some(conn.config().max_payload())
    }
    /// A peer's address, as a URL.
    pub fn peer_url(&self, peer: Peer) -> Option<String> {
        let p = self.peers.get(peer.0 as usize)?;
        Some(self.backend.addr_url(&p.addr))
    }

    /// Whether the peer has failed.
    pub fn peer_failed(&self, peer: Peer) -> bool {
        self.peers.get(peer.0 as usize).is_some_and(|p| p.failed)
    }

    /// Messages waiting for [`Endpoint::recv`].
    pub fn pending_deliveries(&self) -> usize {
        self.deliveries.len()
    }

    /// Reliable mode: whether a message to `peer` has packets that have not left even
    /// once (over RPP: held back by its windows or pacer, or refused by a full backend;
    /// with native reliability: fragments waiting for slots): only later progress passes
    /// send them.
    pub fn peer_has_unsent(&self, peer: Peer) -> bool {
        if let Some(n) = self.backend.native_ref() {
            return n.has_partial();
        }
        self.peers.get(peer.0 as usize).is_some_and(|p| {
            p.stalled.is_some() || p.conn.as_ref().is_some_and(Connection::has_unsent)
        })
    }

    /// Reliable mode: whether a message to `peer` is still held (queued, not yet sent
    /// or not yet acknowledged by the peer's transport; with native reliability: not yet
    /// taken off the ring). False once every message sent to `peer` has been
    /// acknowledged: the peer's endpoint has then received all of them (over RPP, each
    /// was in its delivery queue, in order, before the acknowledgement left).
    pub fn peer_has_pending(&self, peer: Peer) -> bool {
        if let Some(n) = self.backend.native_ref() {
            return n.has_unacked() || n.has_partial();
        }
        self.peers.get(peer.0 as usize).is_some_and(|p| {
            p.stalled.is_some() || p.conn.as_ref().is_some_and(Connection::has_pending)
        })
    }

    /// Whether messages are still held by RPP or the backend (queued or not
    /// acknowledged). With native reliability, as of the last progress pass (which
    /// [`Endpoint::poll_completion`] runs when it has nothing to give).
    pub fn has_unacked(&self) -> bool {
        if let Some(n) = self.backend.native_ref() {
            return n.has_unacked();
        }
        self.peers
            .iter()
            .any(|p| p.conn.as_ref().is_some_and(Connection::has_pending))
    }

    /// How long until the endpoint has timer work (RPP's timers in reliable mode, a
    /// simulated board's own), if ever: a driver with nothing else to do may wait that
    /// long before calling [`Endpoint::progress`] again.
    pub fn next_timeout(&mut self) -> Option<Duration> {
        let now = self.backend.now();
        self.peers
            .iter_mut()
            .filter_map(|p| p.conn.as_mut()?.poll_timeout().map(|t| t.as_nanos()))
            .chain(self.backend.next_deadline())
            .min()
            .map(|t| Duration::from_nanos(t.saturating_sub(now)))
    }

    /// The endpoint's time now, in nanoseconds since an epoch of its backend's (virtual on
    /// `sim://`), the time [`Endpoint::next_timeout`] counts from.
    pub fn now_nanos(&self) -> u64 {
        self.backend.now()
    }

    // ---- Peers -----------------------------------------------------------------------

    /// Makes `url` (same scheme as the endpoint, no parameters) a peer; inserting the same
    /// address again gives the same handle.
    pub fn insert_addr(&mut self, url: &str) -> Result<Peer, InsertError> {
        self.idle_until = 0;
        let parsed: Url = url.parse().map_err(InsertError::Url)?;
        let scheme = self.backend.scheme();
        let text = || url.to_owned();
        if parsed.scheme() != scheme {
            return Err(InsertError::OtherScheme {
                addr: text(),
                scheme,
            });
        }
        if parsed.has_params() {
            return Err(InsertError::HasParams {
                addr: text(),
                scheme,
            });
        }
        let addr = self.backend.resolve(&parsed.address)?;
        if self.options.connect_one_peer && !self.options.accept_unknown_peers {
            match self.peers.first() {
                None => self.backend.connect(&addr)?,
                Some(p) if p.addr == addr => {}
                Some(_) => {
                    return Err(InsertError::Connected {
                        addr: text(),
                        scheme,
                    });
                }
            }
        }
        Ok(self.peer_for(addr))
    }

    /// A datagram came from `from`, which is no peer: with
    /// [`Options::accept_unknown_peers`] it becomes one (and the application hears of it);
    /// otherwise it is counted and `None` says to drop the datagram.
    fn unknown_sender(&mut self, from: RemoteAddr) -> Option<Peer> {
        if !self.options.accept_unknown_peers {
            self.stats.unknown_source += 1;
            return None;
        }
        let peer = self.peer_for(from);
        let addr = self.backend.addr_url(&from);
        self.completions
            .push_back(Completion::NewPeer { peer, addr });
        Some(peer)
    }

    fn peer_for(&mut self, addr: RemoteAddr) -> Peer {
        if let Some(&p) = self.by_addr.get(&addr) {
            return p;
        }
        let peer = Peer(self.peers.len() as u32);
        let conn = (self.reliable && !self.native).then(|| {
            let now = myri_rpp::Instant::from_nanos(self.backend.now());
            // The path's datagram size where the backend knows it (udp:// without mtu=).
            let mut config = self.rpp.clone();
            config.mtu = config.mtu.min(self.backend.peer_mtu(&addr));
            if config.validate().is_err() {
                config.mtu = self.rpp.mtu;
            }
            fit_windows_to_path(&mut config, self.rpp.mtu);
            // No more packets outstanding than the socket can queue: a window beyond it
            // lets a sender whose receiver falls behind overrun the kernel's buffer,
            // which drops the rest and makes every one a retransmission.
            if let Some(n) = self.backend.recv_capacity(config.mtu) {
                config.recv_window = config.recv_window.min(n.max(1));
            }
            Connection::new(config, self.incarnation, self.conn_id, now)
                .expect("the config was validated at open and the incarnation is not zero")
        });
        self.peers.push(PeerSlot {
            addr,
            conn,
            failed: false,
            announced: None,
            next_id: 0,
            restart_unacked: Vec::new(),
            stalled: None,
            life: 0,
        });
        self.by_addr.insert(addr, peer);
        let own_socket = self.options.peer_socket && !self.options.connect_one_peer;
        self.backend.peer_added(&addr, self.peers.len(), own_socket);
        if self.native {
            self.native_peer = Some(peer);
        }
        peer
    }

    // ---- Buffers and sends -------------------------------------------------------------

    /// A buffer of `len` bytes to fill and [`send`](Endpoint::send): in registered memory
    /// when some is free and `len` fits a registered buffer, else on the heap (counted in
    /// [`Stats::heap_allocs`]). With RPP over shm ([`Options::rpp_over_shm`]), whose
    /// transmit copies anyway, registered memory is kept for the channel and this is a
    /// heap buffer; on sim it is a DMA buffer that RPP lends to the board (no copy). In
    /// reliable mode over RPP a message of at most [`SEND_INLINE_MAX`] bytes, which RPP
    /// copies behind its header whatever holds it, is held in the `Buf` itself.
    pub fn alloc(&mut self, len: usize) -> Buf {
        if len <= SEND_INLINE_MAX && self.reliable && !self.native {
            // No allocation, no registered buffer, no lock.
            return Buf::inline(len);
        }
        let registered = if self.native {
            self.backend.alloc(len)
        } else if self.reliable && self.backend.gather_copies() && !self.backend.lends() {
            None
        } else {
            self.backend.alloc(len)
        };
        registered.unwrap_or_else(|| {
            self.stats.heap_allocs += 1;
            Buf::heap(len)
        })
    }

    /// A buffer of `len` bytes in registered memory (a free shm slot, ...), as
    /// [`Endpoint::alloc`] would hand out, or `None` where `alloc` would fall back to the
    /// heap: for a sender that would rather wait for a slot than copy twice.
    pub fn alloc_registered(&mut self, len: usize) -> Option<Buf> {
        if !self.native && self.reliable && self.backend.gather_copies() && !self.backend.lends() {
            return None;
        }
        self.backend.alloc(len)
    }

    fn slot(&self, peer: Peer) -> Result<&PeerSlot, SendErrorKind> {
        let p = self
            .peers
            .get(peer.0 as usize)
            .ok_or(SendErrorKind::UnknownPeer(peer))?;
        if p.failed {
            return Err(SendErrorKind::PeerFailed { peer });
        }
        Ok(p)
    }

    /// Sends `buf` to `peer`: the buffer moves in, and is sent from where it is when it
    /// is registered memory of this backend. On refusal the buffer comes back in the
    /// error ([`SendErrorKind::WouldBlock`]: progress, then retry).
    pub fn send(&mut self, peer: Peer, buf: Buf) -> Result<MsgId, SendError> {
        self.idle_until = 0;
        if self.native
            && let Some(p) = self.peers.get(peer.0 as usize)
            && !p.failed
        {
            let addr = p.addr;
            return self.send_native(peer, addr, buf);
        }
        let addr = match self.slot(peer) {
            Ok(p) => p.addr,
            Err(error) => return Err(SendError { error, buf }),
        };
        let kind = buf.kind_for_stats();
        let id = if self.reliable {
            let conn = self.peers[peer.0 as usize]
                .conn
                .as_mut()
                .expect("reliable peers have a connection");
            // Where the backend sends from the application's buffer, RPP keeps it lent:
            // readable by both, written by neither, until it is acknowledged. A short
            // message is copied behind its header instead: cheaper than a second DMA and
            // the lent buffer's return.
            let buf = if self.backend.lends() && buf.len() >= LEND_MIN {
                buf.lend()
            } else {
                buf
            };
            let id = match conn.send(buf) {
                Ok(id) => MsgId(id.0),
                Err(e) => return Err(self.refused(peer, e)),
            };
            // Latency: the first packets go out now, not at the next progress call, and
            // the device starts on them at once.
            let now = myri_rpp::Instant::from_nanos(self.backend.now());
            // Whether this transmit stopped short (a full pass resets the flag before its
            // own).
            self.transmit_blocked = false;
            self.transmit(peer.0 as usize, now, true);
            self.after_send(peer);
            id
        } else {
            self.send_raw(&addr, buf)?
        };
        self.stats.sends += 1;
        *match kind {
            SendKind::Registered => &mut self.stats.registered_sends,
            SendKind::External => &mut self.stats.external_sends,
            SendKind::Inline => &mut self.stats.inline_sends,
            SendKind::Heap => &mut self.stats.heap_sends,
        } += 1;
        Ok(id)
    }

    /// [`Endpoint::send`] of a raw datagram: out of line, as the reliable path is the
    /// other's.
    #[inline(never)]
    fn send_raw(&mut self, addr: &RemoteAddr, buf: Buf) -> Result<MsgId, SendError> {
        match self.backend.send(addr, buf) {
            Ok(sent) => {
                self.stats.datagrams_sent += 1;
                self.stats.copied_sends += u64::from(sent.copied);
            }
            Err(e) => {
                self.stats.would_block += u64::from(e.error.is_would_block());
                return Err(e);
            }
        }
        self.next_raw_id += 1;
        Ok(MsgId(self.next_raw_id - 1))
    }

    /// The error for a message RPP refused, with its buffer (taken back from the board
    /// if it was lent), counted. Out of line: `send`'s path is the message taken.
    #[cold]
    #[inline(never)]
    fn refused(&mut self, peer: Peer, e: myri_rpp::SendError<Buf>) -> SendError {
        let unlend = |mut b: Buf| {
            b.unlend();
            b
        };
        let e = match e {
            myri_rpp::SendError::WouldBlock(buf) => SendError {
                error: SendErrorKind::WouldBlock,
                buf: unlend(buf),
            },
            myri_rpp::SendError::TooLarge(buf) => SendError {
                error: SendErrorKind::TooLarge {
                    len: buf.len(),
                    max: self.rpp.max_message_len,
                },
                buf: unlend(buf),
            },
            myri_rpp::SendError::Closed(buf) => SendError {
                error: SendErrorKind::PeerClosed { peer },
                buf: unlend(buf),
            },
            // A refusal this version of RPP does not name: the peer is not usable.
            other => SendError {
                error: SendErrorKind::PeerFailed { peer },
                buf: unlend(other.into_inner()),
            },
        };
        self.stats.would_block += u64::from(e.error.is_would_block());
        e
    }

    /// Whether a message sent now can reach a process on the other side: over `shm://`,
    /// whether a process has taken the region's other side (a raw datagram sent before
    /// that is skipped by the process that comes); elsewhere always.
    pub fn peer_attached(&mut self) -> bool {
        self.backend.peer_attached()
    }

    /// Whether [`Endpoint::send`] would take `count` messages of `bytes` bytes in all to
    /// `peer` now, all of them, in reliable mode over RPP (for a message that goes as
    /// several the peer must get together). Elsewhere: whether the peer is usable (the
    /// backend decides at each send).
    pub fn can_send_messages(&self, peer: Peer, count: usize, bytes: usize) -> bool {
        let Ok(slot) = self.slot(peer) else {
            return false;
        };
        match &slot.conn {
            Some(conn) if !self.native => conn.can_send_many(count, bytes),
            _ => true,
        }
    }

    /// Sends a copy of `data` (for small messages: the caller's bytes are free again at
    /// once). Would-block and other refusals are as for [`Endpoint::send`].
    pub fn inject(&mut self, peer: Peer, data: &[u8]) -> Result<MsgId, SendErrorKind> {
        let mut buf = self.alloc(data.len());
        buf.copy_from_slice(data);
        self.send(peer, buf).map_err(|e| e.error)
    }

    // ---- Receiving and completions ---------------------------------------------------

    /// The next message received, if any (runs [`Endpoint::progress`] once when none is
    /// waiting; with native reliability, the ring is looked at without a whole progress
    /// pass, which runs every few dozen calls: a caller that waits for its
    /// [`Completion`]s polls [`Endpoint::poll_completion`], which runs one each time).
    pub fn recv(&mut self) -> Option<Delivery> {
        if self.native {
            return self.recv_native();
        }
        if self.deliveries.is_empty() {
            self.progress();
        }
        self.deliveries.pop_front()
    }

    /// Over RPP: how many times `peer` restarted so far (0 in its first life): its
    /// current life, counting from when the endpoint first heard of it (the restart
    /// reported in [`Completion::PeerRestarted`]). No message of an earlier life is
    /// received after the count went up. 0 for an unknown peer and with native
    /// reliability.
    pub fn peer_life(&self, peer: Peer) -> u32 {
        self.peers.get(peer.0 as usize).map_or(0, |p| p.life)
    }

    /// Gives a received message back once the application is done with it. A view of
    /// registered memory just returns to the backend (as dropping it does); a message
    /// RPP reassembled into heap memory becomes the peer's next reassembly buffer, so a
    /// stream of large messages does not allocate (and fault in) a buffer for each.
    pub fn recycle(&mut self, delivery: Delivery) {
        if delivery.data.is_registered() {
            return;
        }
        if let Some(n) = self.backend.native() {
            n.recycle(delivery.data.into_vec());
            return;
        }
        let conn = self
            .peers
            .get_mut(delivery.peer.0 as usize)
            .and_then(|p| p.conn.as_mut());
        if let Some(conn) = conn {
            conn.recycle(delivery.data.into_vec());
        }
    }

    /// Completions waiting for [`Endpoint::poll_completion`] (which takes that many
    /// without running a progress pass).
    pub fn pending_completions(&self) -> usize {
        self.completions.len()
    }

    /// The next completion, if any (runs [`Endpoint::progress`] once when none is
    /// waiting).
    pub fn poll_completion(&mut self) -> Option<Completion> {
        if self.completions.is_empty() {
            self.progress();
        }
        self.completions.pop_front()
    }

    /// [`Endpoint::progress`], reading every socket the endpoint has: what a caller runs
    /// until it returns false before it sleeps on a poll the endpoint is registered with
    /// ([`Endpoint::register`]). A plain pass reads the shared socket beside the one
    /// peer's own only now and then ([`Options::peer_socket`]).
    pub fn progress_all(&mut self) -> bool {
        self.backend.read_all_next_pass();
        self.idle_until = 0;
        self.progress()
    }

    /// Does the endpoint's work: steps the backend, takes arrived datagrams, runs RPP's
    /// timers and sends what it has to. Returns whether anything happened.
    pub fn progress(&mut self) -> bool {
        if self.native {
            return self.progress_native();
        }
        let worked = self.backend.progress();
        // Nothing arrived, nothing is due and nothing waits to be sent: done (a host
        // spinning on `progress` for the next packet costs a few loads a turn).
        if !worked
            && !self.recv_owed
            && self.backend.is_idle()
            && self.unsettled.is_empty()
            && !self.backend.has_events()
            && self.backend.progressed_at() < self.idle_until
        {
            return false;
        }
        self.pass(worked)
    }

    /// The part of [`Endpoint::progress`] past its quick test: takes what arrived, and
    /// runs the timers and sends unless a delivery defers that (see below). Out of line,
    /// as [`Endpoint::run_timers`] is: the spinning host's quick test, the receive and
    /// the rest each lie together in the code.
    #[inline(never)]
    fn pass(&mut self, mut worked: bool) -> bool {
        // From here the pass either takes every datagram waiting or leaves the next one
        // owed in full (`idle_until` 0).
        self.recv_owed = false;
        if self.backend.has_events() {
            worked |= self.backend_events();
        }
        self.settle_waiting();
        let max = self.options.max_pending_deliveries;
        // A pass with nothing to settle and no pass owed in full receives before it reads
        // the clock: a spinning host's empty pass then ends without the reading while no
        // timer is set, or, where the backend's clock costs (`coarse_timers`), on all but
        // every `IDLE_CLOCK_PERIOD`th empty pass.
        let mut first = None;
        let mut drained = false;
        if !worked
            && self.unsettled.is_empty()
            && self.idle_until != 0
            && self.deliveries.len() < max
        {
            first = self.backend.recv();
            if first.is_none() {
                drained = true;
                if self.idle_until == u64::MAX {
                    return false;
                }
                if self.idle_skips < IDLE_CLOCK_PERIOD && self.backend.coarse_timers() {
                    self.idle_skips += 1;
                    return false;
                }
            }
        }
        self.idle_skips = 0;
        let now = myri_rpp::Instant::from_nanos(self.backend.progressed_at());
        let mut delivered = false;
        while !drained && self.deliveries.len() < max {
            let Some(inc) = first.take().or_else(|| self.backend.recv()) else {
                drained = true;
                break;
            };
            worked = true;
            self.stats.datagrams_received += 1;
            let known = match self.last_sender {
                Some((addr, p)) if addr == inc.from => Some(p),
                _ => self.by_addr.get(&inc.from).copied(),
            };
            let peer = match known {
                Some(p) => {
                    self.last_sender = Some((inc.from, p));
                    p
                }
                None => match self.unknown_sender(inc.from) {
                    Some(p) => p,
                    None => continue,
                },
            };
            let slot = &self.peers[peer.0 as usize];
            if slot.conn.is_none() {
                // Raw: a backend hands over only datagrams of the peer's current life (a
                // later one's newcomer makes it skip the earlier's), so one that arrives
                // after the peer was found dead was sent before it died, and is
                // delivered, as a socket would.
                self.deliver(peer, inc.data);
                continue;
            }
            if slot.failed && !self.failed_peer_revived(peer, &inc.data, now) {
                continue;
            }
            let slot = &mut self.peers[peer.0 as usize];
            let Some(conn) = slot.conn.as_mut() else {
                unreachable!("a raw peer's datagram is delivered above");
            };
            match conn.handle_packet(now, &inc.data) {
                Received::InPlace { payload, .. } => {
                    let data = inc.data.narrow(payload);
                    // The acknowledgement the packet carried stays held (RPP applies it
                    // before anything that needs it): the message goes to the
                    // application first, and its answer out, before that bookkeeping.
                    if conn.has_queued_events() {
                        self.drain_events(peer);
                    }
                    self.deliver(peer, data);
                    delivered = true;
                    continue;
                }
                Received::Dropped(_) => self.stats.rpp_dropped += 1,
                Received::Accepted | Received::Duplicate => {}
            }
            self.drain_events(peer);
        }
        if drained && !worked && self.unsettled.is_empty() && now.as_nanos() < self.idle_until {
            // Nothing arrived (a socket has no cheaper test than the receive just made),
            // nothing is due and nothing waits to be sent: the rest of the pass, a visit
            // to every peer's timers, would find nothing either.
            return false;
        }
        if delivered && drained && !self.deferred {
            // Messages for the application, and everything that arrived taken: the rest
            // of the pass (held acknowledgements, timers, what RPP has to send) waits for
            // the next one, which runs in full whatever arrives, so that a reply the
            // application sends at once leads (`send` transmits before it drains the
            // peer's events) and acknowledgements still go when every pass delivers.
            self.deferred = true;
            self.idle_until = 0;
            return true;
        }
        self.run_timers(now, drained, worked)
    }

    /// The end of a full pass: every connection's timers, what it has to send and the
    /// events that raises; then when the next pass may end early (`idle_until`).
    #[inline(never)]
    fn run_timers(&mut self, now: myri_rpp::Instant, drained: bool, mut worked: bool) -> bool {
        self.deferred = false;
        self.transmit_blocked = false;
        let mut next_timer = u64::MAX;
        if self.reliable {
            for i in 0..self.peers.len() {
                let Some(conn) = self.peers[i].conn.as_mut() else {
                    continue;
                };
                if conn.poll_timeout().is_some_and(|t| t <= now) {
                    conn.handle_timeout(now);
                    worked = true;
                }
                worked |= self.transmit(i, now, false);
                self.drain_events(Peer(i as u32));
                if let Some(t) = self.peers[i].conn.as_mut().and_then(|c| c.poll_timeout()) {
                    next_timer = next_timer.min(t.as_nanos());
                }
            }
        }
        self.idle_until = if drained && !self.transmit_blocked {
            next_timer
        } else {
            0
        };
        worked
    }

    /// For a datagram from a peer found failed: whether the peer lives again (the
    /// backend learned it came back, or the datagram revives it), so that RPP takes the
    /// datagram; if not, it is dropped and counted.
    #[cold]
    #[inline(never)]
    fn failed_peer_revived(&mut self, peer: Peer, data: &[u8], now: myri_rpp::Instant) -> bool {
        // The backend may have just learned that the peer came back.
        self.backend_events();
        if self.peers[peer.0 as usize].failed && !self.revive(peer, data, now) {
            self.stats.rpp_dropped += 1;
            return false;
        }
        true
    }

    /// Handles what the backend learned on its own; returns whether there was anything.
    fn backend_events(&mut self) -> bool {
        let mut worked = false;
        while let Some(ev) = self.backend.poll_event() {
            worked = true;
            match ev {
                BackendEvent::PeerGone {
                    addr,
                    why,
                    replaced,
                } => {
                    if let Some(&peer) = self.by_addr.get(&addr) {
                        if self.native {
                            self.native_peer_gone(peer, why, replaced);
                        } else {
                            self.backend_peer_gone(peer, why);
                        }
                    }
                }
                BackendEvent::PeerReplaced { addr } => {
                    if let Some(&peer) = self.by_addr.get(&addr) {
                        if self.native {
                            self.native_peer_replaced(peer);
                        } else {
                            self.backend_peer_replaced(peer);
                        }
                    }
                }
            }
        }
        worked
    }

    fn deliver(&mut self, peer: Peer, data: RecvBuf) {
        self.stats.recvs += 1;
        if data.is_registered() {
            self.stats.registered_recvs += 1;
        } else {
            self.stats.heap_recvs += 1;
        }
        let life = self.peers.get(peer.0 as usize).map_or(0, |p| p.life);
        self.deliveries.push_back(Delivery { peer, data, life });
    }

    /// Sends what peer `i`'s connection has to send; returns whether it sent anything.
    /// With `kick`, the device starts on what was sent (see [`Backend::kick`]): on the
    /// last packet as soon as it is posted, before the bookkeeping that follows it.
    fn transmit(&mut self, i: usize, now: myri_rpp::Instant, kick: bool) -> bool {
        let Endpoint {
            backend,
            peers,
            header,
            stats,
            transmit_blocked: blocked,
            local_drops,
            ..
        } = self;
        let slot = &mut peers[i];
        let Some(conn) = slot.conn.as_mut() else {
            return false;
        };
        let mut sent = false;
        let mut kicked = false;
        if let Some(packet) = slot.stalled.take() {
            if !backend.can_send(&slot.addr) {
                slot.stalled = Some(packet);
                *blocked = true;
                return false;
            }
            match backend.send_gather(&slot.addr, &[], &packet) {
                Ok(s) => {
                    sent = true;
                    stats.datagrams_sent += 1;
                    stats.transmit_copies += u64::from(s.copied);
                }
                Err(SendErrorKind::WouldBlock) => {
                    slot.stalled = Some(packet);
                    *blocked = true;
                    return false;
                }
                // Lost to the channel (counted); RPP sends it again.
                Err(_) => stats.io_errors += 1,
            }
        }
        loop {
            if !backend.can_send(&slot.addr) {
                *blocked = true;
                break;
            }
            let Some(g) = conn.poll_transmit_gather(now, header) else {
                break;
            };
            let (batch_end, last) = (g.batch_end, g.last);
            let result =
                backend.send_packet(&slot.addr, &header[..g.header_len], g.payload, g.message);
            match result {
                Ok(s) => {
                    sent = true;
                    if last && kick {
                        // Nothing more goes now: the packet's wait ends at the device's
                        // step, not behind what follows here.
                        backend.kick();
                        kicked = true;
                    }
                    stats.datagrams_sent += 1;
                    stats.transmit_copies += u64::from(s.copied);
                    if batch_end {
                        // One offloaded send per batch: buffers of one size (see
                        // `Gather::batch_end`). Would-block keeps them for the next pass.
                        let _ = backend.flush();
                    }
                    if last {
                        break;
                    }
                }
                // No room after all: on the board (no free send buffer) the packet waits
                // whole for the next pass; elsewhere it is lost to the channel and RPP
                // sends it again.
                Err(SendErrorKind::WouldBlock) if !backend.keeps_refused() => {
                    *blocked = true;
                    break;
                }
                Err(SendErrorKind::WouldBlock) => {
                    let mut packet = Vec::with_capacity(g.header_len + g.payload.len());
                    packet.extend_from_slice(&header[..g.header_len]);
                    packet.extend_from_slice(g.payload);
                    slot.stalled = Some(packet);
                    stats.transmit_stalls += 1;
                    *blocked = true;
                    break;
                }
                Err(_) => {
                    stats.io_errors += 1;
                    *blocked = true;
                    break;
                }
            }
        }
        // What the backend held back to send together goes now (would-block keeps it for
        // the next pass; other errors the backend counted).
        if sent {
            let _ = backend.flush();
            // Datagrams this host's queue dropped (udp://) were this connection's: it
            // learns of the congestion now rather than from their loss.
            let drops = backend.local_drops();
            if drops != *local_drops {
                *local_drops = drops;
                conn.on_local_congestion(now);
            }
            if kick && !kicked {
                backend.kick();
            }
        }
        sent
    }

    /// What [`Endpoint::send`] does once its packets have gone: takes the events they
    /// raised (the acknowledgement the last packet received carried, the completions it
    /// brings) and settles the pass a delivery deferred. Out of line: the cost harness
    /// (`rpp_board_cost`) counts it apart from the path a packet waits for.
    #[inline(never)]
    fn after_send(&mut self, peer: Peer) {
        self.drain_events(peer);
        self.settle_deferred(peer);
    }

    /// After a send that sent all it could and took the peer's events: when that is the
    /// whole of the work a delivering pass left (one peer, nothing waiting to settle,
    /// nothing new or lost waiting to be sent), the next pass need not run in full. It
    /// sees the connection's next timer as a full pass would have, and receives before it
    /// may end early (the send's kick may have stepped the board). An answer sent at once
    /// thus leaves a quick pass behind, not a visit to the connection's timers, window
    /// and queues.
    fn settle_deferred(&mut self, peer: Peer) {
        if !self.deferred
            || self.transmit_blocked
            || self.peers.len() != 1
            || !self.unsettled.is_empty()
        {
            return;
        }
        let Some(conn) = self.peers[peer.0 as usize].conn.as_mut() else {
            return;
        };
        // The acknowledgement the drain applied may have found a loss, or a new packet may
        // still wait for room: the next pass runs in full and sends what it can.
        if conn.has_unsent() || conn.has_resends() {
            return;
        }
        self.idle_until = conn.poll_timeout().map_or(u64::MAX, |t| t.as_nanos());
        self.deferred = false;
        self.recv_owed = true;
    }

    fn drain_events(&mut self, peer: Peer) {
        let slot = &mut self.peers[peer.0 as usize];
        let Some(conn) = slot.conn.as_mut().filter(|c| c.has_events()) else {
            return;
        };
        while let Some(ev) = conn.poll_event() {
            let c = match ev {
                Event::Connected { peer_incarnation } => Completion::Connected {
                    peer,
                    peer_incarnation,
                },
                Event::Message(m) => {
                    self.stats.recvs += 1;
                    self.stats.heap_recvs += 1;
                    self.deliveries.push_back(Delivery {
                        peer,
                        data: RecvBuf::from_vec(m),
                        life: slot.life,
                    });
                    continue;
                }
                Event::Sent { id, mut msg } => {
                    // `settle_into` for the common completion: its one buffer taken back
                    // before the completion is built, not found again in it.
                    let settled = self.unsettled.is_empty() && msg.unlend();
                    let c = Completion::Sent {
                        peer,
                        id: MsgId(id.0),
                        buf: msg,
                    };
                    queue_settled(&mut self.unsettled, &mut self.completions, c, settled);
                    continue;
                }
                Event::PeerRestarted { new, unacked, .. } => {
                    slot.life = slot.life.wrapping_add(1);
                    Completion::PeerRestarted {
                        peer,
                        incarnation: new,
                        unacked,
                    }
                }
                Event::PeerClosed { unsent } => Completion::PeerClosed { peer, unsent },
                Event::Closed => continue,
                Event::Failed { error, unsent } => {
                    slot.failed = true;
                    self.stats.peer_failures += 1;
                    Completion::PeerFailed {
                        peer,
                        why: error.into(),
                        unsent,
                    }
                }
                // A kind of event this version does not know.
                _ => continue,
            };
            // The queues by field: the connection is borrowed.
            settle_into(&mut self.unsettled, &mut self.completions, c);
        }
    }

    /// Queues a completion for the application, once every buffer it hands back is back
    /// for writing (a lent buffer whose last send the board has not finished waits, and
    /// so does every completion after it, to keep their order).
    fn settle(&mut self, c: Completion) {
        settle_into(&mut self.unsettled, &mut self.completions, c);
    }

    /// Moves the completions whose buffers are all back to the application's queue.
    fn settle_waiting(&mut self) {
        if self.unsettled.is_empty() {
            return;
        }
        self.backend.reap();
        while let Some(mut c) = self.unsettled.pop_front() {
            if !unlend_all(&mut c) {
                self.unsettled.push_front(c);
                return;
            }
            self.completions.push_back(c);
        }
    }

    /// The backend says a peer's process is gone. Raw mode: the peer fails now. Reliable
    /// mode: RPP's own timers decide (a restarted peer is told apart by its incarnation).
    fn backend_peer_gone(&mut self, peer: Peer, why: PeerFailure) {
        let slot = &mut self.peers[peer.0 as usize];
        if slot.conn.is_some() || slot.failed {
            return;
        }
        slot.failed = true;
        self.stats.peer_failures += 1;
        self.completions.push_back(Completion::PeerFailed {
            peer,
            why,
            unsent: Vec::new(),
        });
    }

    /// A process replaced the peer (raw mode): the handle works again.
    fn backend_peer_replaced(&mut self, peer: Peer) {
        let slot = &mut self.peers[peer.0 as usize];
        if slot.conn.is_some() || !slot.failed {
            return;
        }
        slot.failed = false;
        self.completions.push_back(Completion::PeerRestarted {
            peer,
            incarnation: 0,
            unacked: Vec::new(),
        });
    }

    /// A datagram from a failed peer (reliable mode): when it comes from a later
    /// incarnation than the one that failed, the peer restarted, and gets a new
    /// connection. Returns whether the peer is usable again.
    fn revive(&mut self, peer: Peer, datagram: &[u8], now: myri_rpp::Instant) -> bool {
        let slot = &mut self.peers[peer.0 as usize];
        let Some(conn) = slot.conn.as_mut() else {
            return false;
        };
        // The connection's own checks (its integrity mode, its MAC key, its id): a packet
        // that would not pass them may not reset it either.
        if !conn.authenticates(datagram) {
            return false;
        }
        let Ok(h) = myri_rpp::wire::Header::new_checked(datagram) else {
            return false;
        };
        let incarnation = h.src_incarnation();
        // Incarnations are random, not ordered: another one than the failed peer's is a
        // restart.
        if conn.peer_incarnation() == Some(incarnation) {
            return false;
        }
        let config = conn.config().clone();
        let Ok(fresh) = Connection::new(config, self.incarnation, self.conn_id, now) else {
            return false;
        };
        *conn = fresh;
        slot.failed = false;
        slot.life = slot.life.wrapping_add(1);
        self.settle(Completion::PeerRestarted {
            peer,
            incarnation,
            unacked: Vec::new(),
        });
        true
    }

    // ---- Integration -------------------------------------------------------------------

    /// Registers a UDP endpoint's sockets with a caller's `mio::Poll`: the token becomes
    /// readable when datagrams arrive. Before sleeping on the poll, call
    /// [`Endpoint::progress_all`] until it returns false, as mio's edge-triggered events
    /// require (a plain [`Endpoint::progress`] pass may leave a socket unread: see
    /// [`Options::peer_socket`]). Other backends: [`RegisterError::Unsupported`].
    pub fn register(
        &mut self,
        registry: &mio::Registry,
        token: mio::Token,
    ) -> Result<(), RegisterError> {
        let scheme = self.backend.scheme();
        self.backend
            .register(registry, token)
            .ok_or(RegisterError::Unsupported(scheme))?
            .map_err(io_err!(RegisterError, "registering with mio"))
    }

    /// Undoes [`Endpoint::register`].
    pub fn deregister(&mut self, registry: &mio::Registry) -> Result<(), RegisterError> {
        let scheme = self.backend.scheme();
        self.backend
            .deregister(registry)
            .ok_or(RegisterError::Unsupported(scheme))?
            .map_err(io_err!(RegisterError, "deregistering from mio"))
    }
}

impl core::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Endpoint")
            .field("url", &self.local_url())
            .field("reliable", &self.reliable)
            .field("peers", &self.peers.len())
            .finish()
    }
}

/// [`Endpoint::settle`] on the two queues: `c` goes to `completions` when nothing waits
/// before it and all its buffers are back for writing, else behind the others waiting.
/// Inline: every acknowledged message's completion comes this way, most of them settled
/// at once.
#[inline(always)]
fn settle_into(
    unsettled: &mut VecDeque<Completion>,
    completions: &mut VecDeque<Completion>,
    mut c: Completion,
) {
    let settled = unsettled.is_empty() && unlend_all(&mut c);
    queue_settled(unsettled, completions, c, settled);
}

/// Queues `c` for the application when `settled` (nothing waits before it and its
/// buffers are back), else behind the completions waiting.
#[inline(always)]
fn queue_settled(
    unsettled: &mut VecDeque<Completion>,
    completions: &mut VecDeque<Completion>,
    c: Completion,
    settled: bool,
) {
    if settled {
        completions.push_back(c);
    } else {
        unsettled.push_back(c);
    }
}

/// Takes every lent buffer of `c` back for writing that the board reads no more; says
/// whether none is left lent.
#[inline]
fn unlend_all(c: &mut Completion) -> bool {
    match c {
        Completion::Sent { buf, .. } => buf.unlend(),
        Completion::PeerFailed { unsent: bufs, .. }
        | Completion::PeerRestarted { unacked: bufs, .. }
        | Completion::PeerClosed { unsent: bufs, .. } => {
            // Every buffer is tried (no short cut): each one back is one less to wait for.
            let back = bufs.iter_mut().map(Buf::unlend).filter(|&b| b).count();
            back == bufs.len()
        }
        Completion::Connected { .. } | Completion::NewPeer { .. } => true,
    }
}

/// Packet windows for a path whose datagrams (`config.mtu`) are smaller than the ones the
/// windows were set for (`configured_mtu`): as many packets as keep the windows' bytes, up
/// to the sequence numbers one acknowledgement's SACK bitmap maps (1,024), never fewer than
/// set. 256 packets of 1,472 bytes are 376 KB: behind a bottleneck's full 10 ms queue at
/// 1 Gbit/s that holds a flow under a third of the link, whatever its congestion window.
fn fit_windows_to_path(config: &mut myri_rpp::Config, configured_mtu: usize) {
    if config.mtu >= configured_mtu {
        return;
    }
    let span = u64::from(myri_rpp::wire::SACK_SPAN);
    let scale = |w: u32| {
        let bytes = u64::from(w) * configured_mtu as u64;
        let packets = (bytes / config.mtu.max(1) as u64).min(span);
        u32::try_from(packets).unwrap_or(u32::MAX).max(w)
    };
    config.send_window = scale(config.send_window);
    config.recv_window = scale(config.recv_window);
}

#[cfg(test)]
mod tests {
    use super::fit_windows_to_path;

    fn windows(mtu: usize, configured_mtu: usize, send: u32, recv: u32) -> (u32, u32) {
        let mut c = myri_rpp::Config::default()
            .with_mtu(mtu)
            .with_send_window(send)
            .with_recv_window(recv);
        fit_windows_to_path(&mut c, configured_mtu);
        (c.send_window, c.recv_window)
    }

    #[test]
    fn a_path_of_smaller_datagrams_gets_windows_of_the_same_bytes() {
        // 16 packets of 8,192 bytes are 128 KiB: 89 packets of 1,472.
        assert_eq!(windows(1472, 8192, 16, 16), (89, 89));
        // A path of the configured size, or larger, keeps the windows as set.
        assert_eq!(windows(8192, 8192, 256, 256), (256, 256));
        assert_eq!(windows(65_507, 8192, 256, 100), (256, 100));
    }

    #[test]
    fn the_windows_stop_at_what_an_acknowledgement_maps() {
        // 256 packets of 65,507 bytes over a 1,500-byte path: 11,392 packets, of which an
        // acknowledgement's SACK bitmap names 1,024 at most.
        let span = myri_rpp::wire::SACK_SPAN;
        assert_eq!(windows(1472, 65_507, 256, 256), (span, span));
        // Windows set larger than that are not shrunk.
        assert_eq!(windows(1472, 65_507, 2048, 300), (2048, span));
    }
}
