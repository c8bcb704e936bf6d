//! An `FI_EP_RDM` or `FI_EP_DGRAM` endpoint in safe Rust: `myri_transport::Endpoint`s
//! (reliable for RDM, raw for DGRAM), the posted-receive and unexpected-message queues
//! with libfabric's tag matching, and the completions it writes to its queues.
//!
//! # Backends
//!
//! Over `udp://` an endpoint is one transport endpoint, whose peers are the address
//! vector's entries. Over `shm://`, where a transport endpoint has exactly one peer (the
//! other side of its region), an endpoint is named `shm://<token>` and holds one
//! transport endpoint per peer, on the region named after both tokens; it opens one for
//! each address it finds in its address vector (when progressing, so that a peer's
//! messages have somewhere to land before this side sends) or sends to.
//!
//! # Peers on this host (auto-shm)
//!
//! An RDM endpoint over `udp://` with auto-shm on ([`FabricEndpoint::enable_auto_shm`])
//! also opens, for each address-vector entry whose IPv4 address is this host's (a
//! loopback address, or one a socket can bind to here: an address of a local interface
//! in this network namespace), its side of an `shm://` region named after both
//! endpoints' `udp://` addresses (`udp://127.0.0.1:7000` gives the token
//! `u127.0.0.1_7000`; the region is `ma<netns>-<lower token>-<higher token>`, where
//! `<netns>` is the network namespace's number in hex: containers sharing `/dev/shm`
//! each have their own `127.0.0.1`). The peer's provider opens the same region from its
//! own address vector. The region's native reliability announces the other side once
//! it has finished attaching
//! ([`myri_transport::Completion::Connected`]); until then, and for ever with a peer that
//! never attaches (an older build, auto-shm off, a proxy's port, another host), every
//! message goes over `udp://`. Messages that arrive over the region are reported from
//! the peer's address-vector entry, as those over `udp://` are.
//!
//! Each direction switches once, from `udp://` to the region, and goes back only when
//! the peer restarted without attaching to the region (below); RDM keeps each pair's
//! messages in order across the switch:
//!
//! - The sender switches at a send only when the peer has attached and nothing it sent
//!   to the peer over `udp://` is still held by RPP (queued, unsent or unacknowledged:
//!   [`myri_transport::Endpoint::peer_has_pending`]), and from then on sends to that
//!   peer only over the region.
//! - RPP acknowledges a packet once the receiving transport has handled it, and hands a
//!   message whose packets are all in to its delivery queue (in order) before any
//!   acknowledgement of that pass leaves; so when the sender switches, every message it
//!   sent over `udp://` is in the receiver's `udp://` delivery queue or already matched
//!   there, and the region's first message was written after that (the acknowledgement
//!   had to come back first).
//! - The receiver takes every delivery waiting in its `udp://` transport's queue (no
//!   budget: all of them, without a new pass) before it takes each delivery from an
//!   auto-shm region, so a message that came over `udp://` is matched (or queued as
//!   unexpected) before any later one that came over the region from the same peer.
//!
//! # A peer that restarts
//!
//! Over `udp://` a peer's new incarnation shows as a restart, and sends to it whose
//! packets had not all left complete with `FI_EIO`. A region's peer (`shm://`, or a
//! peer switched to an auto-shm region) behaves alike:
//!
//! - Its process gone (closed or dead), sends taken before whose pieces are not all on
//!   the ring, and those queued behind them, complete with `FI_EIO` and are dropped
//!   (the endpoint takes its transport's completions before the pieces of a long
//!   message go out, so they go to the life it knows of). A message it was sending in
//!   pieces is dropped (a receive it had matched is posted again). Sends taken while no
//!   process is on the other side fail (`-FI_EIO`), as sends to a failed `udp://` peer
//!   do. Messages on the ring when the process died, like packets that had left, are
//!   lost with a successful completion.
//! - Once a new process attached to the region, the region carries everything sent
//!   from then on, to it, in order; an auto-shm entry stays on the region (its
//!   direction never went back to `udp://`, so there is nothing to order against). What
//!   was on the ring for the dead process is skipped by the new one (it names the dead
//!   process's epoch).
//! - Auto-shm, a new process that never attaches to the region (auto-shm off there):
//!   once it is heard from over `udp://` in its new incarnation while the region has no
//!   process, its entries go back to `udp://`, and switch to the region again, by the
//!   rule above, if a process attaches to it later. Nothing sent over the region can
//!   reach anyone while it has no process, so no message over `udp://` overtakes one
//!   over the region.
//! - Pieces say whether they continue a message ([`crate::wire`]): a receiver drops a
//!   tail whose start it never had and an open message that a new one interrupts, so no
//!   process ever takes a message built from two lives.
//!
//! Several address-vector entries for one peer share its region and switch together.
//! Once some peer is on a region, a `udp://` link with nothing to do for 64 passes is
//! passed only every 8th pass until it has work again (an idle socket's receive is a
//! system call, dearer than a look at every region).
//!
//! # Sending from registered memory
//!
//! [`FabricEndpoint::send_registered`] sends bytes that lie in memory the application
//! registered (a libfabric memory region, `fi_mr_reg`), as [`ExternalBytes`]. Over RPP
//! (an RDM endpoint's `udp://` link) a message of at least [`COPY_FREE_MIN`] bytes is
//! then not copied: it goes as a split send (below), its payload as
//! [`myri_transport::Buf::external`] views of the region, which RPP keeps until
//! acknowledged and from which the `udp://` backend gathers every packet,
//! retransmissions too. Such a send completes only once RPP has every piece of the
//! payload acknowledged ([`myri_transport::Completion::Sent`]): the application may reuse its
//! buffer after the completion, and RPP may read it until then. A peer that fails,
//! closes or restarts first completes it with `FI_EIO`. It is counted in
//! [`PathCounts::copy_free_sent`].
//!
//! Everything else is copied as [`FabricEndpoint::send`] copies: shorter messages (the
//! second message costs more than the copy), DGRAM endpoints (a raw datagram completes
//! when it leaves, and the kernel has copied it then), and sends to self. Over `shm://`
//! links and auto-shm regions the region's slots are the backend's registered memory,
//! so a registered region changes nothing there: a message is copied into slots and out
//! of them, or, at least [`crate::cma::CMA_MIN`] bytes long and from a buffer held until
//! the send completes (every send but an inject, registered or not:
//! [`FabricEndpoint::send_held`]), read by the receiver straight from the sender's
//! buffer (below).
//!
//! # Large messages over `udp://`
//!
//! RPP reassembles a message of several packets into a vector (a copy from each
//! datagram), which the provider would copy again into the posted buffer. A message
//! longer than one packet to the peer
//! ([`myri_transport::Endpoint::peer_packet_payload`]: the path's datagram less RPP's
//! header and MAC) therefore goes as a *split send*, taken by RPP all together or not
//! at all ([`myri_transport::Endpoint::can_send_messages`]): a split header (the
//! provider header and the payload's length, [`crate::wire::SPLIT_LEN`] bytes) and then
//! the payload, bare, in pieces of equal length of at most one packet each, each a
//! transport message of its own. A copied send copies the payload once into a vector
//! that the pieces are views of; a registered one sends views of the application's
//! region (above). A piece that arrives in order is handed over by RPP as a view of the
//! datagram it came in (in-place delivery), and the receiver copies it straight to its
//! offset in the receive the first piece matched (`take_piece`, the code `shm://` pieces
//! use): one copy in user space at each side, counted in [`PathCounts::udp_placed`]
//! when every piece of a message came so. A piece after a loss comes out of RPP's
//! reordering buffer instead (a second copy, the message intact); a message that matched
//! no receive is gathered into a vector and waits whole in the unexpected queue (two
//! copies, as for any eager message); truncation writes what fits and completes with
//! `FI_ETRUNC`. On a path whose packets carry less than [`UDP_PIECE_MIN`] bytes
//! (Ethernet's 1,500 or jumbo 9,000) a copied message goes whole, with its header in
//! front, and a registered one in one bare piece that RPP cuts into packets: there the
//! pieces' per-message cost exceeds the copy they save (see `RESULTS.md`).
//!
//! The receiver takes the peer's next messages on the link as the payload until it has
//! the announced length. Bare pieces carry no header, so a sender's restart is told by
//! the life of the peer each delivery came from
//! ([`myri_transport::Delivery::life`]): a message of a later life than the split
//! header's drops the partial message (a receive it had matched goes back to the front
//! of the posted queue) and is taken as what it says it is; a peer that failed or
//! restarted with its deliveries all taken drops it too (`drop_dead_splits`). A message
//! longer than what is left of the payload is not part of it either. Both count in
//! [`FabricEndpoint::broken_pieces`]. Over auto-shm the switch rule is unchanged: RPP
//! holds a split send whole until every piece is acknowledged.
//!
//! # Single copy between processes of one host
//!
//! Over `shm://` and auto-shm regions a large RDM send to a peer whose probe succeeded
//! goes as a descriptor on the ring, in order with the pair's copied messages; the
//! receiver matches it as it would the message, reads the bytes from the sender's
//! process into the posted buffers (`process_vm_readv`), and answers with a done
//! control message that completes the send. [`crate::cma`] has the protocol: the
//! probe, unexpected messages (read at once), failures. A peer's life ending completes
//! the sends waiting for their done with `FI_EIO`, as above. Counted in
//! [`PathCounts::cma_sent`] and [`PathCounts::cma_received`].
//!
//! The receiver takes a split header's payload from the next messages of the same peer
//! on the same link (RPP keeps their order): see "Large messages over `udp://`".
//!
//! # Matching
//!
//! A received message is matched against the posted receives of its kind (tagged or
//! not) in posting order; one that matches none waits in the unexpected queue, in
//! arrival order, and a receive posted later takes the first unexpected message it
//! matches (MPI's order). A tagged receive matches a message when
//! `(tag ^ msg_tag) & !ignore == 0` and, with `FI_DIRECTED_RECV`, when its source is the
//! sender or `FI_ADDR_UNSPEC`.

use crate::abi::*;
use crate::cma::{CmaError, CmaTx, NonceWord, RemoteRead, Verified};
use crate::objects::{Av, Cntr, Cq, Entry, ErrorEntry, Progress, lock};
use crate::wire::{CMA_DESC_LEN, CONTROL_LEN, CmaDescriptor, Control, HEADER_LEN, Header, Piece};
pub use myri_transport::ExternalBytes;
use myri_transport::{Completion, Endpoint, MsgId, Peer, RecvBuf, SendErrorKind};
use smallvec::SmallVec;
use std::collections::{HashMap, VecDeque};
use std::ops::Range;
use std::sync::Arc;

mod single_copy;
mod udp_pieces;

/// The maps looked up per message (keys are small integers of our own): foldhash, not
/// SipHash.
type FastMap<K, V> = foldhash::HashMap<K, V>;
use std::net::{Ipv4Addr, SocketAddr};

/// Where a posted receive's bytes go: the application's buffers, written by the C
/// surface (which owns the raw pointers).
pub trait RecvTarget: Send {
    /// Bytes the buffers hold.
    fn capacity(&self) -> usize;
    /// Copies `data` into the buffers from byte `offset` of them on, in order
    /// (`offset + data.len()` is at most [`RecvTarget::capacity`]).
    fn write_at(&mut self, offset: usize, data: &[u8]);
    /// Copies `data` (at most [`RecvTarget::capacity`] bytes) into the buffers, in order.
    fn write(&mut self, data: &[u8]) {
        self.write_at(0, data);
    }
    /// The first buffer's address (for the completion's `buf`).
    fn first(&self) -> usize;
    /// Reads the first `n` bytes (at most [`RecvTarget::capacity`]) of a message
    /// straight from the sender's process into the buffers, from byte 0 on (the
    /// single-copy path, [`crate::cma`]). What the buffers hold after an error is
    /// unspecified. The default reads into a heap buffer and writes that (a target with
    /// no raw buffers of its own); the C surface's reads into the application's.
    fn read_remote(&mut self, from: &RemoteRead, n: usize) -> Result<(), CmaError> {
        let mut v = vec![0u8; n];
        crate::cma::read(from, &mut v)?;
        self.write(&v);
        Ok(())
    }
}

/// Where a posted receive's bytes go: the application's buffers as the C surface posted
/// them, held inline (a receive is posted for every message, and a box for each would
/// be a heap allocation and a free per message), or any other [`RecvTarget`].
pub struct Target(TargetKind);

/// How the C surface reaches the application's buffers: `copy(iov, offset, data)`
/// writes bytes of this process, `read(from, iov, n)` reads `n` bytes of another
/// process's buffer straight in (the single-copy path).
pub(crate) struct AppIo {
    pub(crate) copy: CopyIn,
    pub(crate) read: ReadIn,
}

/// [`AppIo::copy`]'s type.
pub(crate) type CopyIn = fn(&[(usize, usize)], usize, &[u8]);
/// [`AppIo::read`]'s type.
pub(crate) type ReadIn = fn(&RemoteRead, &[(usize, usize)], usize) -> Result<(), CmaError>;

enum TargetKind {
    /// `(address, length)` pairs, written by the C surface's copy routine: the one place
    /// that writes through the application's raw addresses.
    App {
        iov: SmallVec<[(usize, usize); 2]>,
        io: &'static AppIo,
    },
    Other(Box<dyn RecvTarget>),
}

impl Target {
    /// A target of its own kind (boxed).
    pub fn new(target: impl RecvTarget + 'static) -> Target {
        Target(TargetKind::Other(Box::new(target)))
    }

    /// The application's buffers `iov`, written by `copy(iov, offset, data)`.
    pub(crate) fn app(iov: SmallVec<[(usize, usize); 2]>, io: &'static AppIo) -> Target {
        Target(TargetKind::App { iov, io })
    }

    /// Bytes the buffers hold.
    pub fn capacity(&self) -> usize {
        match &self.0 {
            TargetKind::App { iov, .. } => iov.iter().map(|&(_, l)| l).sum(),
            TargetKind::Other(t) => t.capacity(),
        }
    }

    /// Copies `data` into the buffers from byte `offset` of them on (`offset +
    /// data.len()` is at most [`Target::capacity`]).
    pub fn write_at(&mut self, offset: usize, data: &[u8]) {
        match &mut self.0 {
            TargetKind::App { iov, io } => (io.copy)(iov, offset, data),
            TargetKind::Other(t) => t.write_at(offset, data),
        }
    }

    /// Copies `data` (at most [`Target::capacity`] bytes) into the buffers, in order.
    pub fn write(&mut self, data: &[u8]) {
        self.write_at(0, data);
    }

    /// Reads `n` bytes (at most [`Target::capacity`]) of another process's buffer into
    /// the buffers (the single-copy path, [`crate::cma`]); see
    /// [`RecvTarget::read_remote`].
    pub fn read_remote(&mut self, from: &RemoteRead, n: usize) -> Result<(), CmaError> {
        match &mut self.0 {
            TargetKind::App { iov, io } => (io.read)(from, iov, n),
            TargetKind::Other(t) => t.read_remote(from, n),
        }
    }

    /// The first buffer's address (for the completion's `buf`).
    pub fn first(&self) -> usize {
        match &self.0 {
            TargetKind::App { iov, .. } => iov.first().map_or(0, |&(b, _)| b),
            TargetKind::Other(t) => t.first(),
        }
    }
}

/// A posted receive.
pub struct Posted {
    /// The operation's context.
    pub context: usize,
    /// Only from this sender (`FI_ADDR_UNSPEC`: any).
    pub src: FiAddr,
    /// The tag and the bits of it to ignore (tagged receives).
    pub tag: u64,
    /// Bits of the tag not compared.
    pub ignore: u64,
    /// Where the data goes.
    pub target: Target,
    /// Whether a successful completion is written (errors always are).
    pub completion: bool,
}

/// A message's bytes: as the transport delivered it (header in front), the bare payload
/// that followed a split header, or owned.
enum Payload {
    View(RecvBuf),
    Bare(RecvBuf),
    Owned(Vec<u8>),
    /// A single-copy message not read yet: still in the sender's buffer.
    Held(single_copy::Held),
}

struct Unexpected {
    src: FiAddr,
    header: Header,
    data: Payload,
}

impl Unexpected {
    /// The bytes (none for a held single-copy message: see [`Unexpected::len`]).
    fn payload(&self) -> &[u8] {
        match &self.data {
            Payload::View(b) => &b[HEADER_LEN..],
            Payload::Bare(b) => b,
            Payload::Owned(v) => v,
            Payload::Held(_) => &[],
        }
    }

    /// The message's length.
    fn len(&self) -> usize {
        match &self.data {
            Payload::Held(h) => h.len,
            _ => self.payload().len(),
        }
    }

    /// Lets go of registered memory (a message that waits must not hold the backend's
    /// receive slots; a heap view is kept as it is).
    fn detach(self) -> Unexpected {
        match self.data {
            Payload::View(b) if b.is_registered() => Unexpected {
                data: Payload::Owned(b[HEADER_LEN..].to_vec()),
                ..self
            },
            Payload::Bare(b) if b.is_registered() => Unexpected {
                data: Payload::Owned(b.to_vec()),
                ..self
            },
            _ => self,
        }
    }
}

/// What a tagged receive with `FI_PEEK`, `FI_CLAIM` or `FI_DISCARD` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    /// A plain receive.
    None,
    /// `FI_PEEK`: report a matching unexpected message, leave it queued.
    Peek,
    /// `FI_PEEK | FI_CLAIM`: report it and keep it for a later `FI_CLAIM` receive.
    PeekClaim,
    /// `FI_PEEK | FI_DISCARD`: report it and drop it.
    PeekDiscard,
    /// `FI_CLAIM`: receive the message claimed under this context.
    Claim,
    /// `FI_CLAIM | FI_DISCARD`: drop the message claimed under this context.
    ClaimDiscard,
}

/// Which kind of endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EpType {
    /// Reliable datagrams: a reliable transport endpoint.
    Rdm,
    /// Raw datagrams.
    Dgram,
}

/// The queues and counters an endpoint is bound to.
#[derive(Default)]
pub struct Bindings {
    /// Transmit completions, and whether only operations asking for one write one.
    pub tx_cq: Option<(Cq, bool)>,
    /// Receive completions, and whether selective.
    pub rx_cq: Option<(Cq, bool)>,
    /// Counters of sends and receives.
    pub send_cntr: Option<Cntr>,
    /// Counter of receives.
    pub recv_cntr: Option<Cntr>,
    /// The address vector.
    pub av: Option<Av>,
}

/// An endpoint. See the module docs.
pub struct FabricEndpoint {
    /// RDM or DGRAM.
    pub ep_type: EpType,
    links: Vec<Link>,
    shm: Option<ShmNaming>,
    local_url: String,
    /// Queues, counters and address vector.
    pub bind: Bindings,
    /// Whether receives may name their source (`FI_DIRECTED_RECV`).
    pub directed_recv: bool,
    /// Largest message payload.
    pub max_msg: usize,
    peers: FastMap<FiAddr, (usize, Peer)>,
    sources: FastMap<(usize, Peer), FiAddr>,
    posted: [VecDeque<Posted>; 2],
    unexpected: [VecDeque<Unexpected>; 2],
    claimed: FastMap<usize, Unexpected>,
    /// Messages dropped because their header did not parse.
    pub malformed: u64,
    /// Pieces dropped because the start of their message never came (the tail of a
    /// message to an earlier life of this process), and messages dropped part-way
    /// because their sender's life ended (see [`crate::wire`]).
    pub broken_pieces: u64,
    /// `udp://` addresses reached through another (`FI_MYRI_VIA`: a fault-injecting
    /// proxy in front of a peer).
    pub via: HashMap<String, String>,
    /// Progress passes run (completions are drained every few).
    passes: u64,
    /// Sends over `udp://` with packets that have not left yet, by link and peer, in
    /// send order: their transmit completion and counter bump wait (see
    /// [`FabricEndpoint::send`]).
    untransmitted: FastMap<(usize, Peer), VecDeque<PendingTx>>,
    /// Copy-free sends waiting for RPP's acknowledgement of their payload message, by
    /// link and peer (see "Sending from registered memory" in the module docs).
    unacked: FastMap<(usize, Peer), Vec<(udp_pieces::PieceIds, PendingTx)>>,
    /// Split headers received whose bare payload (or the rest of it) is the peer's next
    /// message or messages, by link and peer.
    split: FastMap<(usize, Peer), udp_pieces::SplitIn>,
    /// Messages arriving in pieces (`shm://`, and split payloads over `udp://`), by link
    /// and peer.
    reassembly: FastMap<(usize, Peer), Assembly>,
    /// Auto-shm (`udp://` RDM endpoints only): see the module docs.
    auto: Option<AutoShm>,
    /// Auto-shm: address-vector entries still sent to over `udp://` whose region is
    /// open, with its link and peer (empty once every such peer was switched).
    switch: FastMap<FiAddr, (usize, Peer)>,
    /// Messages sent and received, by path.
    pub counts: PathCounts,
    /// Print [`FabricEndpoint::counts`] to stderr when dropped (`FI_MYRI_STATS=1`).
    pub report: bool,
    /// Auto-shm: some peer is reached over a region.
    shm_active: bool,
    /// The single-copy path ([`crate::cma`]) allowed (`FI_MYRI_CMA`, on unless `0`):
    /// large sends to probed peers, and answering peers' probes.
    pub cma: bool,
    /// The word peers' probes and reads check.
    cma_word: NonceWord,
    /// The next single-copy send's id.
    cma_next: u64,
    /// Single-copy messages waiting unread in the unexpected queues or claimed.
    held: usize,
    /// Progress passes in a row in which the `udp://` link had nothing to do.
    udp_quiet: u32,
    /// Vectors of messages RPP has had acknowledged, for the next messages to be built
    /// in: a send over `udp://` then costs no allocation and no free.
    spare: Vec<Vec<u8>>,
}

/// Vectors [`FabricEndpoint`] keeps for reuse (at most).
const SPARE_VECS: usize = 32;
/// Largest vector it keeps.
const SPARE_MAX: usize = 64 << 10;

/// Messages sent and received over `udp://` and over `shm://` regions (long messages in
/// pieces count once; sends to self not at all).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PathCounts {
    /// Messages sent over `udp://`.
    pub udp_sent: u64,
    /// Messages sent over an `shm://` region.
    pub shm_sent: u64,
    /// Messages received over `udp://`.
    pub udp_received: u64,
    /// Messages received over an `shm://` region.
    pub shm_received: u64,
    /// Of the messages sent over `udp://`, those sent from registered memory without a
    /// copy (see "Sending from registered memory" in the module docs).
    pub copy_free_sent: u64,
    /// Of the messages sent over a region, those sent single-copy ([`crate::cma`]).
    pub cma_sent: u64,
    /// Of the messages received over a region, those read single-copy.
    pub cma_received: u64,
    /// Of those, the ones that matched no receive when they came and waited unread (see
    /// "A send" in [`crate::cma`]).
    pub cma_held: u64,
    /// Single-copy probes and reads that failed, and descriptors refused (see "Reads" in
    /// [`crate::cma`]).
    pub cma_failed: u64,
    /// Of those, probes the kernel refused: `process_vm_readv` not permitted between
    /// these two processes here (seccomp, Yama's `ptrace_scope`); the peer's large
    /// messages are copied.
    pub cma_forbidden: u64,
    /// Of the messages sent over `udp://`, those whose payload went in pieces of one
    /// packet each (see "Large messages over `udp://`" in the module docs).
    pub udp_pieces_sent: u64,
    /// Of the messages received over `udp://`, those in pieces that landed straight in a
    /// posted receive's buffers, every piece copied once, from the datagram it came in.
    pub udp_placed: u64,
    /// The bytes [`PathCounts::udp_placed`] messages wrote into the buffers.
    pub udp_placed_bytes: u64,
}

/// Least payload sent from registered memory without a copy: a shorter one is copied
/// (the split header's extra transport message costs more than the copy).
pub const COPY_FREE_MIN: usize = 16 << 10;

/// Least payload a packet to a peer must carry for a message longer than one packet to
/// go over `udp://` in pieces of one packet each (see "Large messages over `udp://`" in
/// the module docs): on a path of smaller packets the pieces' cost exceeds the copy they
/// save, and RPP cuts the message into packets instead. Measured under MPI
/// (`FI_MYRI_MTU`, `RESULTS.md`): pieces took 1.4-2.8x as long at 1,500-byte packets,
/// 1.1-1.4x at 9,000 and 1.01-1.09x at 16 KiB, and 0.87x at 24 KiB and 0.78-0.80x at 32
/// KiB for messages of 1 MiB and more.
pub const UDP_PIECE_MIN: usize = 20 << 10;

/// Auto-shm's state: this endpoint's region-name token and the regions it opened.
struct AutoShm {
    /// `ma<network namespace>`: hosts' namespaces sharing one `/dev/shm` (containers)
    /// each name their own loopback addresses.
    prefix: String,
    token: String,
    /// Address-vector entries looked at so far.
    scanned: usize,
    /// Whether an IPv4 address is this host's, as found out.
    local: HashMap<Ipv4Addr, bool>,
    /// Link and peer of each region opened, by region URL.
    regions: HashMap<String, (usize, Peer)>,
}

/// Auto-shm's part of a region name for the `udp://` URL `url`: `u<ip>_<port>` (IPv4
/// only), and the IP address.
pub fn auto_token(url: &str) -> Option<(Ipv4Addr, String)> {
    let sa: SocketAddr = url.strip_prefix("udp://")?.parse().ok()?;
    let SocketAddr::V4(v4) = sa else {
        return None;
    };
    Some((*v4.ip(), format!("u{}_{}", v4.ip(), v4.port())))
}

/// This process's network namespace, as the number of `/proc/self/ns/net`
/// (`net:[4026531840]`), or 0 where there is none to read.
fn net_namespace() -> u64 {
    std::fs::read_link("/proc/self/ns/net")
        .ok()
        .and_then(|l| {
            let l = l.to_str()?.to_owned();
            l.strip_prefix("net:[")?.strip_suffix(']')?.parse().ok()
        })
        .unwrap_or(0)
}

/// Whether `ip` is this host's: a loopback address, or one a socket can bind to (an
/// address of a local interface in this network namespace).
fn is_local(ip: Ipv4Addr) -> bool {
    if ip.is_loopback() {
        return true;
    }
    if ip.is_unspecified() || ip.is_multicast() || ip.is_broadcast() {
        return false;
    }
    std::net::UdpSocket::bind((ip, 0)).is_ok()
}

/// A message arriving in pieces.
enum Assembly {
    /// Matched a posted receive when its first piece came: each piece is copied straight
    /// into the receive's buffers (as much as they hold).
    Posted {
        /// The receive, out of the posted queue.
        posted: Posted,
        /// The first piece's header.
        header: Header,
        /// The sender.
        src: FiAddr,
        /// Bytes written into the buffers.
        written: usize,
        /// Bytes of the message so far.
        len: usize,
        /// Every piece so far was a view of the buffer it was received in (delivered in
        /// place), so copied once.
        in_place: bool,
    },
    /// Matched none: the first piece's header and the payload so far, to wait in the
    /// unexpected queue once whole.
    Unexpected(Header, Vec<u8>),
}

/// A send whose completion waits for its packets to leave.
struct PendingTx {
    context: usize,
    flags: u64,
    /// Whether a successful completion is written (errors always are).
    completion: bool,
}

/// Progress passes between two drains of the transport's completions.
const COMPLETION_DRAIN_PERIOD: u64 = 16;

/// One transport endpoint and, on `shm://`, the one address it reaches.
struct Link {
    transport: Endpoint,
    peer_addr: Option<FiAddr>,
    /// `shm://`: messages going out in pieces, in send order (later sends wait behind).
    outq: VecDeque<OutMsg>,
    /// An auto-shm region (next to a `udp://` link).
    auto: bool,
    /// `shm://`: the other side has attached (and not gone since).
    attached: bool,
    /// `shm://`: where this side stands with the peer's single-copy path.
    cma_tx: CmaTx,
    /// `shm://`: single-copy sends waiting for their done, by id.
    cma_pending: Vec<(u64, PendingTx)>,
    /// `shm://`: the peer's probe, when it succeeded (its life).
    cma_peer: Option<Verified>,
    /// `shm://`: control messages the ring had no room for, in order.
    ctrlq: VecDeque<(Peer, [u8; CONTROL_LEN])>,
}

impl Link {
    fn new(transport: Endpoint, peer_addr: Option<FiAddr>) -> Link {
        Link {
            transport,
            peer_addr,
            outq: VecDeque::new(),
            auto: false,
            attached: false,
            cma_tx: CmaTx::Unknown,
            cma_pending: Vec::new(),
            cma_peer: None,
            ctrlq: VecDeque::new(),
        }
    }

    /// Hands the transport what pieces of the queued messages it takes now.
    fn push_pieces(&mut self) -> Result<(), (Peer, SendErrorKind)> {
        while let Some(m) = self.outq.front_mut() {
            let from = (m.at, m.before);
            let sent = push_pieces(&mut self.transport, m.peer, m.header, &[&m.data], from)
                .map_err(|e| (m.peer, e))?;
            m.at = sent;
            if sent < m.data.len() {
                return Ok(());
            }
            self.outq.pop_front();
        }
        Ok(())
    }
}

/// Sends the concatenation of `parts` from byte `at` on to `peer` in pieces of
/// [`SHM_PIECE`](crate::info::SHM_PIECE) bytes, each built in a free slot of the region
/// (the one copy on this side), as long as slots and ring room last; `before` bytes of
/// the message went out before `parts` (its first piece among them when not 0). Returns
/// how far it got: `parts`' whole length once the last piece is out.
fn push_pieces(
    transport: &mut Endpoint,
    peer: Peer,
    header: Header,
    parts: &[&[u8]],
    (mut at, before): (usize, usize),
) -> Result<usize, SendErrorKind> {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    let piece = piece_len(len);
    while at < len {
        let n = (len - at).min(piece);
        let more = at + n < len;
        // A slot or nothing: a heap buffer would be copied into a slot anyway.
        let Some(mut buf) = transport.alloc_registered(HEADER_LEN + n) else {
            return Ok(at);
        };
        let cont = before + at > 0;
        header.emit_piece(&mut buf, Piece::part(more, cont));
        gather(parts, at, &mut buf[HEADER_LEN..]);
        match transport.send(peer, buf) {
            Ok(_) => at += n,
            Err(e) if e.error.is_would_block() => return Ok(at),
            Err(e) => return Err(e.error),
        }
    }
    Ok(at)
}

/// The payload of each piece (the last may be shorter) of a message of `len` bytes: as
/// many pieces as [`SHM_PIECE`](crate::info::SHM_PIECE) makes, of equal length, so that
/// no piece is a short tail.
fn piece_len(len: usize) -> usize {
    len.div_ceil(len.div_ceil(crate::info::SHM_PIECE).max(1))
        .max(1)
}

/// Copies the bytes of the concatenation of `parts` from `at` on into `dst` (as many as
/// `dst` holds).
fn gather(parts: &[&[u8]], mut at: usize, mut dst: &mut [u8]) {
    for p in parts {
        if dst.is_empty() {
            return;
        }
        if at >= p.len() {
            at -= p.len();
            continue;
        }
        let n = (p.len() - at).min(dst.len());
        dst[..n].copy_from_slice(&p[at..at + n]);
        dst = &mut dst[n..];
        at = 0;
    }
}

/// A message longer than the backend carries at once, going out in pieces: the bytes
/// that did not fit the free slots when it was sent.
struct OutMsg {
    peer: Peer,
    header: Header,
    data: Vec<u8>,
    /// Bytes of `data` handed to the transport so far.
    at: usize,
    /// Bytes of the message handed to the transport before it was queued (not in
    /// `data`).
    before: usize,
}

/// How an `shm://` endpoint names itself and its regions.
struct ShmNaming {
    token: String,
    /// Address-vector entries looked at so far.
    scanned: usize,
}

/// The options every transport endpoint of the provider opens with: reliable for RDM,
/// raw for DGRAM; peers learned from their first datagram; messages of 64 MiB plus the
/// header.
pub fn transport_options(ep_type: EpType) -> myri_transport::Options {
    let mut options = myri_transport::Options::default()
        .with_reliable(ep_type == EpType::Rdm)
        .with_accept_unknown_peers(true);
    let max = crate::info::RDM_MAX_MSG + HEADER_LEN;
    options.rpp.max_message_len = max;
    options.rpp.max_queued_bytes = options.rpp.max_queued_bytes.max(2 * max);
    options.rpp.recv_buffer_bytes = options.rpp.recv_buffer_bytes.max(2 * max);
    // A message sent in pieces of a packet each (`UDP_PIECE_MIN` bytes at least) goes
    // to RPP whole or not at all: two of the longest fit its queue.
    let pieces = 2 * (crate::info::RDM_MAX_MSG.div_ceil(UDP_PIECE_MIN) + 2);
    options.rpp.max_queued_messages = options.rpp.max_queued_messages.max(pieces);
    let cc = std::env::var("FI_MYRI_CC").ok();
    options.rpp.congestion = match cc.as_deref() {
        Some("none") => myri_rpp::congestion::CongestionControl::None,
        Some("newreno") => myri_rpp::congestion::CongestionControl::NewReno,
        Some("bbr") => myri_rpp::congestion::CongestionControl::Bbr,
        _ => myri_rpp::congestion::CongestionControl::Cubic,
    };
    options.rpp.pacing = std::env::var("FI_MYRI_PACING").as_deref() != Ok("0");
    options.peer_socket = std::env::var("FI_MYRI_PEER_SOCKET").as_deref() != Ok("0");
    options
}

/// `FI_MYRI_MTU`'s value: `None` when unset, a datagram size, or `-FI_EINVAL` for what
/// is not one (not a number, or zero; a size the transport cannot use fails its open).
pub fn mtu_param(value: Option<&str>) -> Result<Option<usize>, i32> {
    match value.map(str::trim) {
        None => Ok(None),
        Some(v) => match v.parse::<usize>() {
            Ok(m) if m > 0 => Ok(Some(m)),
            _ => Err(-FI_EINVAL),
        },
    }
}

/// The negative `FI_E*` code for a transport endpoint that did not open: `-FI_ENOSPC`
/// when its `shm://` region does not fit the shared-memory file system (a small
/// `/dev/shm`), `-FI_EINVAL` for a datagram size it cannot use (`FI_MYRI_MTU`), else
/// `-FI_EADDRNOTAVAIL`.
pub fn open_errno(e: &myri_transport::OpenError) -> i32 {
    match e {
        myri_transport::OpenError::ShmNoSpace { .. } => -FI_ENOSPC,
        // A datagram size (`FI_MYRI_MTU`) the transport cannot use.
        myri_transport::OpenError::MtuTooLarge { .. } | myri_transport::OpenError::Rpp(_) => {
            -FI_EINVAL
        }
        _ => -FI_EADDRNOTAVAIL,
    }
}

/// The region two `shm://` tokens share.
fn region_of(a: &str, b: &str) -> String {
    region_named("mf", a, b)
}

/// The region named `<prefix>-<lower token>-<higher token>`.
fn region_named(prefix: &str, a: &str, b: &str) -> String {
    let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
    format!("shm://{prefix}-{lo}-{hi}")
}

const MSG: usize = 0;
const TAGGED: usize = 1;

/// The completion entry of a receive (`context`, buffer `buf`) that took `len` bytes of
/// a message with `header` from `src`.
fn entry_for(context: usize, header: Header, src: FiAddr, len: usize, buf: usize) -> Entry {
    let data_flag = if header.data.is_some() {
        FI_REMOTE_CQ_DATA
    } else {
        0
    };
    Entry {
        context,
        flags: FI_RECV | kind_flags(header.tagged) | data_flag,
        len,
        buf,
        data: header.data.unwrap_or(0),
        tag: header.tag,
        src,
    }
}

fn kind_flags(tagged: bool) -> u64 {
    if tagged { FI_TAGGED } else { FI_MSG }
}

impl FabricEndpoint {
    /// An `shm://` endpoint named `shm://<token>` (no region is opened until a peer is
    /// known). `token` must be unique on the host and a valid region-name part.
    pub fn new_shm(ep_type: EpType, token: &str, max_msg: usize) -> FabricEndpoint {
        let mut ep = Self::with_links(ep_type, Vec::new(), format!("shm://{token}"), max_msg);
        ep.shm = Some(ShmNaming {
            token: token.to_owned(),
            scanned: 0,
        });
        ep
    }

    /// Wraps an open transport endpoint (`udp://`).
    pub fn new(ep_type: EpType, transport: Endpoint, max_msg: usize) -> FabricEndpoint {
        let url = transport.local_url();
        let link = Link::new(transport, None);
        Self::with_links(ep_type, vec![link], url, max_msg)
    }

    fn with_links(ep_type: EpType, links: Vec<Link>, local_url: String, max_msg: usize) -> Self {
        FabricEndpoint {
            ep_type,
            local_url,
            links,
            shm: None,
            bind: Bindings::default(),
            directed_recv: false,
            max_msg,
            peers: FastMap::default(),
            sources: FastMap::default(),
            posted: Default::default(),
            unexpected: Default::default(),
            claimed: FastMap::default(),
            malformed: 0,
            broken_pieces: 0,
            passes: 0,
            via: HashMap::new(),
            untransmitted: FastMap::default(),
            unacked: FastMap::default(),
            split: FastMap::default(),
            reassembly: FastMap::default(),
            auto: None,
            switch: FastMap::default(),
            counts: PathCounts::default(),
            report: false,
            shm_active: false,
            spare: Vec::new(),
            udp_quiet: 0,
            cma: true,
            cma_word: NonceWord::new(),
            cma_next: 0,
            held: 0,
        }
    }

    /// Auto-shm on (see the module docs): peers of this host that take part are reached
    /// over `shm://` regions. Only for RDM endpoints over `udp://` with an IPv4 address;
    /// returns whether it is on.
    pub fn enable_auto_shm(&mut self) -> bool {
        let token = auto_token(&self.local_url).map(|(_, t)| t);
        self.auto = match token {
            Some(token) if self.ep_type == EpType::Rdm && self.shm.is_none() => Some(AutoShm {
                prefix: format!("ma{:x}", net_namespace()),
                token,
                scanned: 0,
                local: HashMap::new(),
                regions: HashMap::new(),
            }),
            _ => None,
        };
        self.auto.is_some()
    }

    /// Auto-shm: whether sends to `dest` go over its region.
    pub fn on_shm(&self, dest: FiAddr) -> bool {
        self.peers
            .get(&dest)
            .is_some_and(|&(l, _)| self.links[l].transport.is_native())
    }

    /// Auto-shm: opens the region shared with the `udp://` peer at `url` (`dest` in the
    /// address vector) when it is on this host, and notes `dest` for the switch.
    fn open_auto(&mut self, dest: FiAddr, url: &str) {
        let Some(auto) = self.auto.as_mut() else {
            return;
        };
        let Some((ip, theirs)) = auto_token(url) else {
            return;
        };
        if theirs == auto.token || !*auto.local.entry(ip).or_insert_with(|| is_local(ip)) {
            return;
        }
        let region = region_named(&auto.prefix, &auto.token, &theirs);
        let route = match auto.regions.get(&region) {
            Some(&r) => r,
            None => {
                // A region that cannot be opened (both sides taken by live processes, a
                // foreign file, no room in /dev/shm) leaves the peer on udp://.
                let Ok(mut t) = Endpoint::open_with(&region, transport_options(EpType::Rdm)) else {
                    return;
                };
                let Ok(peer) = t.insert_addr(&region) else {
                    return;
                };
                let mut link = Link::new(t, Some(dest));
                link.auto = true;
                self.links.push(link);
                let r = (self.links.len() - 1, peer);
                auto.regions.insert(region, r);
                r
            }
        };
        if self.peers.get(&dest).is_none_or(|&(l, _)| l != route.0) {
            self.switch.insert(dest, route);
        }
    }

    /// Auto-shm: moves sends to `dest` (and every entry sharing its region) to the
    /// region once the peer has attached and nothing sent to it over `udp://` is held by
    /// RPP any more (see the module docs).
    fn try_switch(&mut self, dest: FiAddr) {
        let Some(&(link, peer)) = self.switch.get(&dest) else {
            return;
        };
        if !self.links[link].attached {
            return;
        }
        let same: Vec<FiAddr> = self
            .switch
            .iter()
            .filter(|(_, r)| r.0 == link)
            .map(|(&a, _)| a)
            .collect();
        for a in &same {
            if let Some(&(0, p)) = self.peers.get(a)
                && (self.links[0].transport.peer_has_pending(p)
                    || self.untransmitted.contains_key(&(0, p)))
            {
                return;
            }
        }
        for a in same {
            self.switch.remove(&a);
            self.peers.insert(a, (link, peer));
        }
        self.shm_active = true;
        self.sources.entry((link, peer)).or_insert(dest);
    }

    /// Takes what the `shm://` region of `link` delivers (shm's native receive looks at
    /// the ring without a whole pass); from an auto-shm region, only after everything
    /// the `udp://` transport holds delivered.
    fn take_native(&mut self, link: usize) {
        let auto = self.links[link].auto;
        while let Some(d) = self.links[link].transport.recv() {
            if auto {
                self.take_udp_deliveries();
            }
            self.take_delivery(link, d);
        }
    }

    /// Auto-shm: takes every message the `udp://` transport holds delivered, before a
    /// message from a region is taken (see the module docs).
    fn take_udp_deliveries(&mut self) {
        while self.links[0].transport.pending_deliveries() > 0 {
            if let Some(d) = self.links[0].transport.recv() {
                self.take_delivery(0, d);
            }
        }
    }

    /// Whether the transmit queue was bound with `FI_SELECTIVE_COMPLETION`.
    pub fn tx_selective(&self) -> bool {
        self.bind.tx_cq.as_ref().is_some_and(|(_, s)| *s)
    }

    /// Whether the receive queue was bound with `FI_SELECTIVE_COMPLETION`.
    pub fn rx_selective(&self) -> bool {
        self.bind.rx_cq.as_ref().is_some_and(|(_, s)| *s)
    }

    /// The transport endpoints underneath (for their counters).
    pub fn transports(&self) -> impl Iterator<Item = &Endpoint> {
        self.links.iter().map(|l| &l.transport)
    }

    /// This endpoint's address, as a transport URL.
    pub fn local_url(&self) -> &str {
        &self.local_url
    }

    /// Names this endpoint `url` rather than the address it is bound to: the address
    /// peers reach it at through a proxy (`FI_MYRI_RANK_PORTS`), which `fi_getname`
    /// gives and a send to which is a send to self.
    pub fn advertise(&mut self, url: String) {
        self.local_url = url;
    }

    fn av_url(&self, addr: FiAddr) -> Option<String> {
        let av = self.bind.av.as_ref()?;
        lock(av).url(addr).map(str::to_owned)
    }

    fn source_of(&mut self, link: usize, peer: Peer) -> FiAddr {
        if let Some(a) = self.links[link].peer_addr {
            return a;
        }
        if let Some(&a) = self.sources.get(&(link, peer)) {
            return a;
        }
        let url = self.links[link].transport.peer_url(peer);
        let (Some(url), Some(av)) = (url, self.bind.av.as_ref()) else {
            return FI_ADDR_NOTAVAIL;
        };
        let a = lock(av).lookup_url(&url);
        if a != FI_ADDR_NOTAVAIL {
            self.sources.insert((link, peer), a);
        }
        a
    }

    /// The transport endpoint and peer that reach `dest` (at `url`), set up on first use.
    fn route(&mut self, dest: FiAddr, url: &str) -> Result<(usize, Peer), i32> {
        if let Some(&r) = self.peers.get(&dest) {
            return Ok(r);
        }
        let r = match &self.shm {
            None => {
                let target = self.via.get(url).map_or(url, String::as_str);
                let link = self.links.first_mut().ok_or(-FI_EINVAL)?;
                (
                    0,
                    link.transport.insert_addr(target).map_err(|_| -FI_EINVAL)?,
                )
            }
            Some(naming) => {
                let theirs = url.strip_prefix("shm://").ok_or(-FI_EINVAL)?;
                let region = region_of(&naming.token, theirs);
                let mut t = Endpoint::open_with(&region, transport_options(self.ep_type))
                    .map_err(|e| open_errno(&e))?;
                let peer = t.insert_addr(&region).map_err(|_| -FI_EINVAL)?;
                self.links.push(Link::new(t, Some(dest)));
                (self.links.len() - 1, peer)
            }
        };
        self.peers.insert(dest, r);
        self.sources.insert(r, dest);
        Ok(r)
    }

    /// `shm://`, and auto-shm: opens the regions of address-vector entries not looked at
    /// yet.
    fn scan_av(&mut self) {
        let scanned = match (&self.shm, &self.auto) {
            (Some(n), _) => n.scanned,
            (None, Some(a)) => a.scanned,
            (None, None) => return,
        };
        let Some(av) = &self.bind.av else {
            return;
        };
        let (new, len): (Vec<(FiAddr, String)>, usize) = {
            let av = lock(av);
            if av.len() <= scanned {
                return;
            }
            let new = (scanned..av.len())
                .filter_map(|i| Some((i as FiAddr, av.url(i as FiAddr)?.to_owned())))
                .collect();
            (new, av.len())
        };
        if let Some(n) = self.shm.as_mut() {
            n.scanned = len;
        } else if let Some(a) = self.auto.as_mut() {
            a.scanned = len;
        }
        for (a, url) in new {
            if url == self.local_url {
                continue;
            }
            if self.shm.is_some() {
                if url.starts_with("shm://") {
                    let _ = self.route(a, &url);
                }
            } else {
                self.open_auto(a, &url);
            }
        }
    }

    /// Sends the concatenation of `parts` to `dest` with `header`. `completion`: write a
    /// transmit completion with `context`. Errors are negative `FI_E*` codes.
    pub fn send(
        &mut self,
        dest: FiAddr,
        header: Header,
        parts: &[&[u8]],
        context: usize,
        completion: bool,
    ) -> Result<(), i32> {
        self.send_inner(dest, header, parts, None, false, context, completion)
    }

    /// [`FabricEndpoint::send`] of bytes the caller keeps, unchanged and mapped, until
    /// the send completes (libfabric's contract for every send but an inject): a large
    /// one from one buffer to a peer of this host may go single-copy ([`crate::cma`]),
    /// the peer reading it from there.
    pub fn send_held(
        &mut self,
        dest: FiAddr,
        header: Header,
        parts: &[&[u8]],
        context: usize,
        completion: bool,
    ) -> Result<(), i32> {
        self.send_inner(dest, header, parts, None, true, context, completion)
    }

    /// Sends the bytes `range` of registered memory `mem` to `dest` with `header`, without
    /// a copy where it can (see "Sending from registered memory" in the module docs),
    /// else as [`FabricEndpoint::send`] does. The memory must hold those bytes unchanged
    /// until the send completes. A range outside `mem` is `-FI_EINVAL`.
    pub fn send_registered(
        &mut self,
        dest: FiAddr,
        header: Header,
        mem: &Arc<dyn ExternalBytes>,
        range: Range<usize>,
        context: usize,
        completion: bool,
    ) -> Result<(), i32> {
        if range.start > range.end || range.end > mem.size() {
            return Err(-FI_EINVAL);
        }
        let bytes = mem.bytes(range.clone());
        let external = (mem, range);
        self.send_inner(
            dest,
            header,
            &[bytes],
            Some(external),
            true,
            context,
            completion,
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn send_inner(
        &mut self,
        dest: FiAddr,
        header: Header,
        parts: &[&[u8]],
        external: Option<(&Arc<dyn ExternalBytes>, Range<usize>)>,
        held: bool,
        context: usize,
        completion: bool,
    ) -> Result<(), i32> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if len > self.max_msg {
            return Err(-FI_EMSGSIZE);
        }
        if !self.switch.is_empty() {
            self.try_switch(dest);
        }
        // A peer sent to before goes by its route: no address-vector lock or URL copy on
        // the per-message path (a route is never made to this endpoint itself).
        let known = self.peers.get(&dest).copied();
        let url = match known {
            Some(_) => None,
            None => Some(self.av_url(dest).ok_or(-FI_EINVAL)?),
        };
        if url.as_deref() == Some(self.local_url.as_str()) {
            // A send to self: straight into matching, as if it had arrived.
            let mut data = Vec::with_capacity(len);
            parts.iter().for_each(|p| data.extend_from_slice(p));
            let _ = self.incoming(dest, header, Payload::Owned(data));
        } else {
            let (link, peer) = match (known, url) {
                (Some(r), _) => r,
                (None, Some(url)) => self.route(dest, &url)?,
                (None, None) => return Err(-FI_EINVAL),
            };
            let (link, peer) =
                if self.links[link].auto && self.links[link].transport.peer_failed(peer) {
                    // Auto-shm, the region's process gone: the peer may have been heard
                    // from over udp:// in a new life since (see `reroute_to_udp`).
                    self.take_completions(0);
                    self.peers.get(&dest).copied().unwrap_or((link, peer))
                } else {
                    (link, peer)
                };
            if self.ep_type == EpType::Dgram
                && self.shm.is_some()
                && !self.links[link].transport.peer_attached()
            {
                // A raw datagram written to a region before a process takes its other
                // side would be skipped by that process: the send waits for it instead
                // (the peer's provider opens the region once its address vector names
                // this endpoint), as a socket's buffer would hold it.
                self.progress();
                return Err(-FI_EAGAIN);
            }
            let long = len > crate::info::SHM_PIECE;
            let single = held
                && self.cma
                && parts.len() == 1
                && len >= crate::cma::CMA_MIN
                && self.ep_type == EpType::Rdm
                && (completion || self.bind.send_cntr.is_some());
            if (long || single)
                && self.links[link].transport.is_native()
                && self.links[link].outq.is_empty()
            {
                // The pieces (or the descriptor) go to the life of the peer this
                // endpoint knows of.
                self.take_completions(link);
                if single {
                    match self.links[link].cma_tx {
                        CmaTx::On => {
                            return self.send_single_copy(
                                link, peer, header, parts[0], context, completion,
                            );
                        }
                        CmaTx::Unknown => self.send_hello(link, peer),
                        CmaTx::Probing | CmaTx::Off => {}
                    }
                }
            }
            let rdm = self.ep_type == EpType::Rdm;
            let l = &mut self.links[link];
            let rpp = rdm && l.transport.is_reliable() && !l.transport.is_native();
            let registered = external.is_some() && len >= COPY_FREE_MIN;
            let split = rpp
                .then(|| udp_pieces::split_piece(&l.transport, peer, len, registered))
                .flatten();
            if l.transport.is_native() && (long || !l.outq.is_empty()) {
                // Longer than a slot holds (or behind such a message): in pieces of a
                // slot each, as many as there are free slots now straight from the
                // application's buffers; the rest is copied to go as slots come back.
                let sent = if l.outq.is_empty() {
                    match push_pieces(&mut l.transport, peer, header, parts, (0, 0)) {
                        Ok(sent) => sent,
                        Err(SendErrorKind::TooLarge { .. }) => return Err(-FI_EMSGSIZE),
                        Err(_) => return Err(-FI_EIO),
                    }
                } else {
                    0
                };
                if sent < len {
                    let mut data = Vec::with_capacity(len - sent);
                    let mut skip = sent;
                    for p in parts {
                        data.extend_from_slice(&p[skip.min(p.len())..]);
                        skip = skip.saturating_sub(p.len());
                    }
                    l.outq.push_back(OutMsg {
                        peer,
                        header,
                        data,
                        at: 0,
                        before: sent,
                    });
                }
            } else if let Some(piece) = split {
                // A split header and the payload bare, in pieces of a packet each
                // (see "Large messages over `udp://`" in the module docs).
                let external = external.filter(|_| registered);
                let copy_free = external.is_some();
                let ids = match udp_pieces::send_split(
                    &mut l.transport,
                    peer,
                    header,
                    parts,
                    external,
                    piece,
                ) {
                    Ok(ids) => ids,
                    Err(udp_pieces::SplitRefused::Failed) => return Err(-FI_EIO),
                    Err(udp_pieces::SplitRefused::Busy) => {
                        self.progress();
                        return Err(-FI_EAGAIN);
                    }
                };
                self.counts.udp_pieces_sent += u64::from(piece < len);
                if copy_free {
                    // Completes once RPP has every piece acknowledged.
                    self.counts.udp_sent += 1;
                    self.counts.copy_free_sent += 1;
                    self.udp_quiet = 0;
                    let tracked = self.bind.send_cntr.is_some() || self.bind.tx_cq.is_some();
                    if tracked {
                        let pending = PendingTx {
                            context,
                            flags: FI_SEND | kind_flags(header.tagged),
                            completion,
                        };
                        self.unacked
                            .entry((link, peer))
                            .or_default()
                            .push((ids, pending));
                    }
                    return Ok(());
                }
            } else {
                let transport = &mut l.transport;
                let total = HEADER_LEN + len;
                // Where `alloc` would hand out heap memory anyway (RPP copies what it
                // sends into its packets; no shm slot is this long), the message is
                // built in a vector of its own: `alloc`'s heap buffer comes zeroed, a
                // memset as long as the message before it is overwritten.
                let heap = (transport.is_reliable() && !transport.is_native())
                    || total > myri_transport::SHM_SLOT_LEN;
                let buf = if heap {
                    let mut v = self.spare.pop().unwrap_or_default();
                    v.clear();
                    v.reserve(total);
                    v.resize(HEADER_LEN, 0);
                    header.emit(&mut v);
                    parts.iter().for_each(|p| v.extend_from_slice(p));
                    myri_transport::Buf::from_vec(v)
                } else {
                    let mut buf = transport.alloc(total);
                    header.emit(&mut buf);
                    let mut at = HEADER_LEN;
                    for p in parts {
                        buf[at..at + p.len()].copy_from_slice(p);
                        at += p.len();
                    }
                    buf
                };
                if let Err(e) = transport.send(peer, buf) {
                    return Err(match e.error {
                        SendErrorKind::WouldBlock => {
                            self.progress();
                            -FI_EAGAIN
                        }
                        SendErrorKind::TooLarge { .. } => -FI_EMSGSIZE,
                        _ => -FI_EIO,
                    });
                }
            }
            // Over RPP a message may wait in the transport (send or congestion window,
            // pacer) for later progress passes: it completes once every packet of it has
            // left. A completion written before would let the application stop
            // progressing with the message still queued, and the peer would never get it
            // (fi_pingpong's server did, after its last send of a size, once congestion
            // control held the end of a large message back). Retransmissions after a
            // loss still need the application to progress, as with any provider of
            // manual progress.
            if self.links[link].transport.is_native() {
                self.counts.shm_sent += 1;
            } else {
                self.counts.udp_sent += 1;
                self.udp_quiet = 0;
            }
            let key = (link, peer);
            let flags = FI_SEND | kind_flags(header.tagged);
            let held = self.links[link].transport.peer_has_unsent(peer)
                || self.links[link].outq.iter().any(|m| m.peer == peer);
            let tracked = self.bind.send_cntr.is_some() || self.bind.tx_cq.is_some();
            if held && tracked {
                let pending = PendingTx {
                    context,
                    flags,
                    completion,
                };
                self.untransmitted
                    .entry(key)
                    .or_default()
                    .push_back(pending);
                return Ok(());
            }
            self.settle_sends(key, None);
        }
        let flags = FI_SEND | kind_flags(header.tagged);
        self.complete_send(context, flags, completion, None);
        Ok(())
    }

    /// Writes a send's completion (or, with `err`, its error entry) and bumps the
    /// counter.
    fn complete_send(&self, context: usize, flags: u64, completion: bool, err: Option<i32>) {
        if let Some(c) = &self.bind.send_cntr {
            match err {
                None => c.bump(),
                Some(_) => c.bump_err(),
            }
        }
        let Some((cq, _)) = &self.bind.tx_cq else {
            return;
        };
        let entry = Entry {
            context,
            flags,
            len: 0,
            buf: 0,
            data: 0,
            tag: 0,
            src: FI_ADDR_NOTAVAIL,
        };
        match err {
            None if completion => lock(&cq.queue).push(entry),
            None => {}
            Some(err) => lock(&cq.queue).push_err(ErrorEntry {
                entry,
                olen: 0,
                err,
            }),
        }
    }

    /// Sends whose packets have not all left yet.
    pub fn untransmitted_sends(&self) -> usize {
        self.untransmitted.values().map(VecDeque::len).sum()
    }

    /// Completes the sends waiting on `key` (with `err`: as failed), in send order.
    fn settle_sends(&mut self, key: (usize, Peer), err: Option<i32>) {
        if self.untransmitted.is_empty() {
            // The common case (shm://, or udp:// sends that left at once): no hashing.
            return;
        }
        if let Some(q) = self.untransmitted.remove(&key) {
            for p in q {
                self.complete_send(p.context, p.flags, p.completion, err);
            }
        }
    }

    /// Pushes out the pieces of `link`'s long messages that the transport takes now; a
    /// refusal other than would-block fails the sends waiting on that peer.
    fn push_pieces(&mut self, link: usize) {
        if let Err((peer, _)) = self.links[link].push_pieces() {
            self.life_ended(link, peer);
        }
    }

    /// Completes the sends of `link` whose packets have all left.
    fn settle_transmitted(&mut self, link: usize) {
        if self.untransmitted.is_empty() {
            return;
        }
        let l = &self.links[link];
        let done: Vec<_> = self
            .untransmitted
            .keys()
            .filter(|(i, p)| {
                *i == link
                    && !l.transport.peer_has_unsent(*p)
                    && !l.outq.iter().any(|m| m.peer == *p)
            })
            .copied()
            .collect();
        for key in done {
            self.settle_sends(key, None);
        }
    }

    /// What the transport of `link` reports back: sends to a peer that failed, closed
    /// or restarted before their packets left complete with `FI_EIO`.
    ///
    /// On `shm://` (an auto-shm region too) a peer's new process shows as
    /// `PeerRestarted` once it has attached: the link is attached again and carries the
    /// messages sent from then on to the new process. Sends taken before, with pieces
    /// not all on the ring or queued behind such, complete with `FI_EIO` and are dropped
    /// (none of their pieces reaches the new process); a message arriving in pieces from
    /// a process that died is dropped. See the module docs (restarts).
    fn take_completion(&mut self, link: usize, c: Completion) {
        match c {
            Completion::PeerFailed { peer, .. } | Completion::PeerClosed { peer, .. } => {
                self.links[link].attached = false;
                self.life_ended(link, peer);
            }
            Completion::PeerRestarted { peer, .. } => {
                // With native reliability the new process is on the other side now.
                self.links[link].attached = self.links[link].transport.is_native();
                self.life_ended(link, peer);
                if link == 0 && self.auto.is_some() {
                    self.reroute_to_udp(peer);
                }
            }
            Completion::Connected { .. } => self.links[link].attached = true,
            Completion::Sent { peer, id, buf } => {
                // A copy-free send's payload acknowledged: the send completes now.
                let key = (link, peer);
                if !self.unacked.is_empty()
                    && let Some(q) = self.unacked.get_mut(&key)
                    && let Some(i) = q.iter_mut().position(|(ids, _)| ids.acked(id))
                    && q[i].0.done()
                {
                    let (_, p) = q.swap_remove(i);
                    if q.is_empty() {
                        self.unacked.remove(&key);
                    }
                    self.complete_send(p.context, p.flags, p.completion, None);
                }
                // A copied message's vector builds a later one.
                if let Ok(v) = buf.into_heap()
                    && self.spare.len() < SPARE_VECS
                    && v.capacity() <= SPARE_MAX
                {
                    self.spare.push(v);
                }
            }
            _ => {}
        }
    }

    /// `peer`'s life on `link` ended (it failed, closed, or a new process or
    /// incarnation replaced it): every send to it not all out completes with `FI_EIO`,
    /// and what is left of it is dropped; a message it was sending in pieces is dropped
    /// when the peer is failed now (else the next whole message or first piece from the
    /// new life drops it, see [`crate::wire`]).
    fn life_ended(&mut self, link: usize, peer: Peer) {
        self.links[link].outq.retain(|m| m.peer != peer);
        if self.links[link].transport.is_native() {
            self.single_copy_life_ended(link);
        }
        self.settle_sends((link, peer), Some(FI_EIO));
        // Copy-free sends not acknowledged: their buffers came back with the event.
        if let Some(q) = self.unacked.remove(&(link, peer)) {
            for (_, p) in q {
                self.complete_send(p.context, p.flags, p.completion, Some(FI_EIO));
            }
        }
        // A split payload still coming: see `drop_dead_splits`.
        if self.links[link].transport.peer_failed(peer) {
            self.abandon_pieces(link, peer);
        }
    }

    /// Takes what the transport of `link` reports back, up to now: before the pieces of
    /// a message go out, so that they go to the life of the peer the endpoint knows of.
    fn take_completions(&mut self, link: usize) {
        while let Some(c) = self.links[link].transport.poll_completion() {
            self.take_completion(link, c);
        }
    }

    /// Auto-shm: the `udp://` peer `udp_peer` is heard from in a new incarnation. Entries
    /// sent to over a region whose process failed (and no new one attached to it: a new
    /// process with auto-shm off, say) go back to `udp://`, and switch to the region
    /// again once a process attaches to it, by the same rule as the first time. Nothing
    /// sent over the region can reach a process while its peer is failed, so no message
    /// over `udp://` overtakes one over the region.
    fn reroute_to_udp(&mut self, udp_peer: Peer) {
        let stranded: Vec<(FiAddr, (usize, Peer))> = self
            .peers
            .iter()
            .filter(|&(_, &(l, p))| {
                l != 0 && self.links[l].auto && self.links[l].transport.peer_failed(p)
            })
            .map(|(&a, &r)| (a, r))
            .collect();
        for (a, region) in stranded {
            let Some(url) = self.av_url(a) else {
                continue;
            };
            if self.links[0].transport.insert_addr(&url).ok() == Some(udp_peer) {
                self.peers.insert(a, (0, udp_peer));
                self.switch.insert(a, region);
            }
        }
        self.shm_active = self.peers.values().any(|&(l, _)| l != 0);
    }

    fn matches(&self, p: &Posted, tagged: bool, src: FiAddr, tag: u64) -> bool {
        let src_ok = !self.directed_recv || p.src == FI_ADDR_UNSPEC || p.src == src;
        src_ok && (!tagged || (p.tag ^ tag) & !p.ignore == 0)
    }

    /// Matches a message against the posted receives, or queues it as unexpected. The
    /// bytes come back when a receive took them (and they may be recycled).
    fn incoming(&mut self, src: FiAddr, header: Header, data: Payload) -> Option<Payload> {
        let k = usize::from(header.tagged);
        let found = (0..self.posted[k].len())
            .find(|&i| self.matches(&self.posted[k][i], header.tagged, src, header.tag));
        let msg = Unexpected { src, header, data };
        match found.and_then(|i| self.posted[k].remove(i)) {
            Some(p) => {
                self.complete_recv(p, &msg);
                Some(msg.data)
            }
            None => {
                self.unexpected[k].push_back(msg.detach());
                None
            }
        }
    }

    fn recv_entry(&self, context: usize, msg: &Unexpected, len: usize, buf: usize) -> Entry {
        entry_for(context, msg.header, msg.src, len, buf)
    }

    /// Copies `msg` into `p`'s buffers and writes the completion (or `FI_ETRUNC`).
    fn complete_recv(&mut self, mut p: Posted, msg: &Unexpected) {
        if let Payload::Held(h) = &msg.data {
            self.complete_held(p, msg.src, msg.header, h);
            return;
        }
        let payload = msg.payload();
        let room = p.target.capacity();
        let n = payload.len().min(room);
        p.target.write(&payload[..n]);
        self.finish_recv(&p, msg.src, msg.header, n, payload.len());
    }

    /// Writes the completion of `p`, which took `n` bytes of a message of `len` (or
    /// `FI_ETRUNC` when they are fewer).
    fn finish_recv(&mut self, p: &Posted, src: FiAddr, header: Header, n: usize, len: usize) {
        let entry = entry_for(p.context, header, src, n, p.target.first());
        if n < len {
            self.recv_error(entry, len - n, FI_ETRUNC);
        } else {
            if let Some(c) = &self.bind.recv_cntr {
                c.bump();
            }
            if let Some((cq, _)) = &self.bind.rx_cq
                && p.completion
            {
                lock(&cq.queue).push(entry);
            }
        }
    }

    fn recv_error(&self, entry: Entry, olen: usize, err: i32) {
        if let Some(c) = &self.bind.recv_cntr {
            c.bump_err();
        }
        if let Some((cq, _)) = &self.bind.rx_cq {
            lock(&cq.queue).push_err(ErrorEntry { entry, olen, err });
        }
    }

    /// Posts a receive (tagged or not), or runs a probe. Errors are negative `FI_E*`.
    pub fn post_recv(&mut self, tagged: bool, p: Posted, probe: Probe) -> Result<(), i32> {
        let k = usize::from(tagged);
        if probe != Probe::None {
            return self.probe(p, probe);
        }
        let found = (0..self.unexpected[k].len()).find(|&i| {
            let m = &self.unexpected[k][i];
            self.matches(&p, tagged, m.src, m.header.tag)
        });
        match found.and_then(|i| self.unexpected[k].remove(i)) {
            Some(msg) => self.complete_recv(p, &msg),
            None => self.posted[k].push_back(p),
        }
        Ok(())
    }

    fn probe(&mut self, p: Posted, probe: Probe) -> Result<(), i32> {
        let cq_push = |ep: &Self, e: Entry| {
            if let Some((cq, _)) = &ep.bind.rx_cq {
                lock(&cq.queue).push(e);
            }
        };
        match probe {
            Probe::Claim | Probe::ClaimDiscard => {
                let msg = self.claimed.remove(&p.context).ok_or(-FI_EINVAL)?;
                if probe == Probe::Claim {
                    self.complete_recv(p, &msg);
                } else {
                    let e = self.recv_entry(p.context, &msg, 0, 0);
                    self.discard_held(&msg);
                    cq_push(self, e);
                }
                Ok(())
            }
            _ => {
                self.progress();
                let found = (0..self.unexpected[TAGGED].len()).find(|&i| {
                    let m = &self.unexpected[TAGGED][i];
                    self.matches(&p, true, m.src, m.header.tag)
                });
                let Some(i) = found else {
                    let entry = Entry {
                        context: p.context,
                        flags: FI_RECV | FI_TAGGED,
                        len: 0,
                        buf: 0,
                        data: 0,
                        tag: 0,
                        src: FI_ADDR_NOTAVAIL,
                    };
                    if let Some((cq, _)) = &self.bind.rx_cq {
                        lock(&cq.queue).push_err(ErrorEntry {
                            entry,
                            olen: 0,
                            err: FI_ENOMSG,
                        });
                    }
                    return Ok(());
                };
                let m = &self.unexpected[TAGGED][i];
                let len = if probe == Probe::PeekDiscard {
                    0
                } else {
                    m.len()
                };
                let e = self.recv_entry(p.context, m, len, 0);
                match probe {
                    Probe::PeekClaim => {
                        let msg = self.unexpected[TAGGED]
                            .remove(i)
                            .expect("index found above");
                        self.claimed.insert(p.context, msg);
                    }
                    Probe::PeekDiscard => {
                        let msg = self.unexpected[TAGGED]
                            .remove(i)
                            .expect("index found above");
                        self.discard_held(&msg);
                    }
                    _ => {}
                }
                cq_push(self, e);
                Ok(())
            }
        }
    }

    /// Cancels the posted receive with `context`: an `FI_ECANCELED` error entry. False
    /// when no receive with it is posted.
    pub fn cancel(&mut self, context: usize) -> bool {
        for k in [MSG, TAGGED] {
            if let Some(i) = self.posted[k].iter().position(|p| p.context == context) {
                let p = self.posted[k].remove(i).expect("index found above");
                let entry = Entry {
                    context,
                    flags: FI_RECV | kind_flags(k == TAGGED),
                    len: 0,
                    buf: p.target.first(),
                    data: 0,
                    tag: p.tag,
                    src: FI_ADDR_NOTAVAIL,
                };
                self.recv_error(entry, 0, FI_ECANCELED);
                return true;
            }
        }
        false
    }

    fn take_delivery(&mut self, link: usize, d: myri_transport::Delivery) {
        let myri_transport::Delivery { peer, data, life } = d;
        let key = (link, peer);
        let data = if !self.split.is_empty() && self.split.contains_key(&key) {
            match self.take_bare(link, peer, data, life) {
                Some(data) => data,
                None => return,
            }
        } else {
            data
        };
        if let Some(len) = Header::split_len(&data) {
            let (header, _) = Header::parse_piece(&data).unwrap_or_default();
            if self.reassembly.contains_key(&key) {
                // A message in pieces left open: its sender's life ended part-way.
                self.broken_pieces += 1;
                self.abandon_pieces(link, peer);
            }
            if len == 0 {
                // A split header with no payload: a sender never makes one.
                self.malformed += 1;
                return;
            }
            self.split
                .insert(key, udp_pieces::SplitIn::new(header, len, life));
            return;
        }
        let (header, piece) = match Header::parse_piece(&data) {
            Ok(h) => h,
            Err(_) => {
                self.malformed += 1;
                return;
            }
        };
        if piece.split {
            // A split header of the wrong length.
            self.malformed += 1;
            return;
        }
        let native = self.links[link].transport.is_native();
        if (piece.control || piece.cma) && !native {
            // The single-copy path runs between processes of one host only.
            self.malformed += 1;
            return;
        }
        if piece.control {
            self.take_control(link, peer, &data);
            return;
        }
        if !self.reassembly.is_empty() || piece.cont {
            let open = self.reassembly.contains_key(&key);
            if piece.cont != open {
                // A tail without its start, or a new message while one is open: a life
                // of the sender (or of this process) ended part-way through a message.
                self.broken_pieces += 1;
                if piece.cont {
                    return;
                }
                self.abandon_pieces(link, peer);
            }
        }
        if !piece.more {
            if self.links[link].transport.is_native() {
                self.counts.shm_received += 1;
            } else {
                self.counts.udp_received += 1;
            }
        }
        if piece.more || piece.cont {
            let in_place = data.is_registered();
            self.take_piece(
                link,
                peer,
                header,
                piece.more,
                &data[HEADER_LEN..],
                in_place,
                0,
            );
            return;
        }
        if piece.cma {
            self.take_single_copy(link, peer, header, &data);
            return;
        }
        let src = self.source_of(link, peer);
        // A message the transport assembled in heap memory goes back to it as the next
        // one's buffer (no allocation and page faults per message). Over shm:// that is
        // one longer than a slot: a short one came inline in the ring record, and making
        // a vector of it to recycle would cost an allocation per message.
        if let Some(Payload::View(data)) = self.incoming(src, header, Payload::View(data))
            && !data.is_registered()
            && (!native || data.len() > myri_transport::SHM_SLOT_LEN)
        {
            let delivery = myri_transport::Delivery { peer, data, life };
            self.links[link].transport.recycle(delivery);
        }
    }

    /// Takes a piece of a message (`more`: not its last) from `link`'s `peer`: the first
    /// is matched against the posted receives (as a whole message would be), and each is
    /// copied straight into the receive it matched, or, matching none, into a buffer
    /// (for `expect` bytes, when known) that waits in the unexpected queue once the
    /// message is whole. `in_place`: the piece is a view of the buffer it was received
    /// in (counted in [`PathCounts::udp_placed`] when every piece of a `udp://` message
    /// was).
    #[allow(clippy::too_many_arguments)]
    fn take_piece(
        &mut self,
        link: usize,
        peer: Peer,
        header: Header,
        more: bool,
        piece: &[u8],
        in_place: bool,
        expect: usize,
    ) {
        let key = (link, peer);
        let mut a = match self.reassembly.remove(&key) {
            Some(a) => a,
            None => {
                let src = self.source_of(link, peer);
                let k = usize::from(header.tagged);
                let found = (0..self.posted[k].len())
                    .find(|&i| self.matches(&self.posted[k][i], header.tagged, src, header.tag));
                match found.and_then(|i| self.posted[k].remove(i)) {
                    Some(posted) => Assembly::Posted {
                        posted,
                        header,
                        src,
                        written: 0,
                        len: 0,
                        in_place: true,
                    },
                    None => Assembly::Unexpected(
                        header,
                        Vec::with_capacity(expect.min(crate::info::RDM_MAX_MSG)),
                    ),
                }
            }
        };
        match &mut a {
            Assembly::Posted {
                posted,
                written,
                len,
                in_place: all_in_place,
                ..
            } => {
                *all_in_place &= in_place;
                let n = piece.len().min(posted.target.capacity() - *written);
                if n > 0 {
                    posted.target.write_at(*written, &piece[..n]);
                    *written += n;
                }
                *len += piece.len();
            }
            Assembly::Unexpected(_, so_far) => so_far.extend_from_slice(piece),
        }
        if more {
            self.reassembly.insert(key, a);
            return;
        }
        match a {
            Assembly::Posted {
                posted,
                header,
                src,
                written,
                len,
                in_place,
            } => {
                if in_place && !self.links[link].transport.is_native() {
                    self.counts.udp_placed += 1;
                    self.counts.udp_placed_bytes += written as u64;
                }
                self.finish_recv(&posted, src, header, written, len)
            }
            Assembly::Unexpected(header, whole) => {
                let src = self.source_of(link, peer);
                let _ = self.incoming(src, header, Payload::Owned(whole));
            }
        }
    }

    /// The life of the peer of `link` that was sending a message in pieces ended: the
    /// message will not be finished. A receive it had matched goes back to the front of
    /// the posted queue (it completed nothing), a partial unexpected one is dropped.
    fn abandon_pieces(&mut self, link: usize, peer: Peer) {
        if let Some(Assembly::Posted { posted, header, .. }) = self.reassembly.remove(&(link, peer))
        {
            self.posted[usize::from(header.tagged)].push_front(posted);
        }
    }
}

impl Progress for FabricEndpoint {
    fn progress(&mut self) -> bool {
        let received = self.counts.udp_received + self.counts.shm_received;
        let mut busy = false;
        self.scan_av();
        self.passes = self.passes.wrapping_add(1);
        let drain = self.passes.is_multiple_of(COMPLETION_DRAIN_PERIOD);
        for i in 0..self.links.len() {
            let t = &mut self.links[i].transport;
            if t.is_native() {
                self.take_native(i);
            } else {
                // Auto-shm, with peers on regions: a `udp://` link that had nothing to do
                // for a while is passed only every few passes (an idle socket costs a
                // system call a pass, more than looking at every region). Anything it
                // does puts it back on every pass.
                if self.shm_active
                    && self.udp_quiet >= UDP_QUIET_PASSES
                    && !self.passes.is_multiple_of(UDP_QUIET_PERIOD)
                {
                    continue;
                }
                // One pass, then what it delivered: `recv` on an empty queue would run
                // another pass.
                let worked = t.progress() || t.pending_deliveries() > 0;
                busy |= worked;
                self.udp_quiet = if worked {
                    0
                } else {
                    self.udp_quiet.saturating_add(1)
                };
                while self.links[i].transport.pending_deliveries() > 0 {
                    if let Some(d) = self.links[i].transport.recv() {
                        self.take_delivery(i, d);
                    }
                }
                if !self.split.is_empty() {
                    self.drop_dead_splits(i);
                }
            }
            // Sends completed when they were taken; what comes back here is the
            // transport's bookkeeping (acknowledged buffers going back to their pool,
            // peers learned). Polling it runs a pass when it is empty, so only every
            // few passes, and always when sends are outstanding on shm (few slots: the
            // acknowledged come back this way) or wait for a single-copy done (a peer
            // that dies shows here).
            let t = &self.links[i].transport;
            // Before pieces go out (see `take_completions`).
            if drain
                || (t.is_native() && t.has_unacked())
                || !self.links[i].cma_pending.is_empty()
                || !self.untransmitted.is_empty()
                || !self.unacked.is_empty()
                || !self.links[i].outq.is_empty()
            {
                self.take_completions(i);
            }
            if !self.links[i].ctrlq.is_empty() {
                self.flush_control(i);
            }
            if self.held > 0 && i == 0 && self.passes.is_multiple_of(16) {
                self.release_held();
            }
            if !self.links[i].outq.is_empty() {
                self.push_pieces(i);
                busy = true;
            }
            self.settle_transmitted(i);
        }
        busy || !self.untransmitted.is_empty()
            || self.counts.udp_received + self.counts.shm_received != received
    }
}

/// Auto-shm: passes without work after which an idle `udp://` link is passed only every
/// [`UDP_QUIET_PERIOD`] passes (once some peer is on a region).
const UDP_QUIET_PASSES: u32 = 64;
/// Auto-shm: how often a quiet `udp://` link is passed (a divisor of
/// [`COMPLETION_DRAIN_PERIOD`]: its completions are still drained on time).
const UDP_QUIET_PERIOD: u64 = 8;

/// How long a closing endpoint keeps progressing for its messages to be acknowledged.
const LINGER: std::time::Duration = std::time::Duration::from_millis(100);
/// A timer due within this long is an acknowledgement held back (RPP's ack delay), which
/// a closing endpoint sends before it goes.
const LINGER_TIMER: std::time::Duration = std::time::Duration::from_millis(1);

impl Drop for FabricEndpoint {
    /// Lingers (at most 100 ms) while pieces of long `shm://` messages wait to go, or,
    /// over `udp://`, messages wait for their acknowledgement or an acknowledgement of
    /// ours (held back by RPP's ack delay) waits to go: a peer's last message is then
    /// acknowledged before this side is gone, and this side's last messages get their
    /// retransmissions, instead of the peer probing a closed port until it declares
    /// this side failed.
    fn drop(&mut self) {
        if self.report {
            let c = self.counts;
            let line = format!(
                "myri-fi {}: sent {} over udp ({} copy-free), {} over shm; \
                 received {} over udp, {} over shm; \
                 udp pieces: sent {}, placed {} ({} bytes); \
                 single-copy: sent {}, received {}, failed {}, held {}, forbidden {}\n",
                self.local_url,
                c.udp_sent,
                c.copy_free_sent,
                c.shm_sent,
                c.udp_received,
                c.shm_received,
                c.udp_pieces_sent,
                c.udp_placed,
                c.udp_placed_bytes,
                c.cma_sent,
                c.cma_received,
                c.cma_failed,
                c.cma_held,
                c.cma_forbidden
            );
            // One write: the lines of several processes sharing a pipe stay whole.
            let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
        }
        let start = std::time::Instant::now();
        loop {
            // Single-copy: dones owed to peers go out, and peers reading this side's
            // sends get the time to (dones taken by whole passes).
            let single = self
                .links
                .iter()
                .any(|l| !l.cma_pending.is_empty() || !l.ctrlq.is_empty());
            if single && start.elapsed() <= LINGER {
                Progress::progress(self);
                continue;
            }
            let busy = self.links.iter_mut().any(|l| {
                let t = &mut l.transport;
                let rpp = t.is_reliable() && !t.is_native();
                !l.outq.is_empty()
                    || (rpp
                        && (t.has_unacked() || t.next_timeout().is_some_and(|d| d < LINGER_TIMER)))
            });
            if !busy || start.elapsed() > LINGER {
                break;
            }
            for i in 0..self.links.len() {
                self.push_pieces(i);
                self.links[i].transport.progress();
            }
        }
        // Reads of this endpoint's buffers fail from here on (see "Reads" in
        // crate::cma): the application may free them once it is closed.
        self.cma_word.clear();
    }
}

impl FabricEndpoint {
    /// Moves the endpoint to another transport endpoint (`fi_setname` before
    /// `fi_enable`): peers learned so far are forgotten.
    pub fn rebind(&mut self, transport: Endpoint) {
        self.local_url = transport.local_url();
        self.links = vec![Link::new(transport, None)];
        self.peers.clear();
        self.sources.clear();
        self.untransmitted.clear();
        self.unacked.clear();
        self.split.clear();
        self.reassembly.clear();
        self.switch.clear();
        self.shm_active = false;
        if self.auto.is_some() {
            self.enable_auto_shm();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objects::{AddressVector, CompletionQueue};
    use std::sync::{Arc, Mutex};

    struct VecTarget(Arc<Mutex<Vec<u8>>>, usize);

    /// `FI_MYRI_MTU`: a size, or `-FI_EINVAL` at the endpoint's open; a size the
    /// transport cannot use fails its open with `-FI_EINVAL` too.
    #[test]
    fn a_datagram_size_that_is_not_one_fails_the_open() {
        assert_eq!(mtu_param(None), Ok(None));
        assert_eq!(mtu_param(Some("1500")), Ok(Some(1500)));
        assert_eq!(mtu_param(Some(" 9000 ")), Ok(Some(9000)));
        for bad in ["", "0", "-1", "1500x", "jumbo", "99999999999999999999999"] {
            assert_eq!(mtu_param(Some(bad)), Err(-FI_EINVAL), "{bad:?}");
        }
        for (mtu, url) in [(10, "udp://127.0.0.1:0"), (1 << 20, "udp://127.0.0.1:0")] {
            let options = transport_options(EpType::Rdm).with_mtu(Some(mtu));
            let e = Endpoint::open_with(url, options).map(|_| ()).unwrap_err();
            assert_eq!(open_errno(&e), -FI_EINVAL, "{mtu}: {e}");
        }
        let options = transport_options(EpType::Rdm).with_mtu(Some(1500));
        assert!(Endpoint::open_with("udp://127.0.0.1:0", options).is_ok());
    }

    impl RecvTarget for VecTarget {
        fn capacity(&self) -> usize {
            self.1
        }
        fn write_at(&mut self, _offset: usize, data: &[u8]) {
            lock(&self.0).extend_from_slice(data);
        }
        fn first(&self) -> usize {
            0
        }
    }

    fn open(av: &Av, cq: &Cq) -> FabricEndpoint {
        let mut options = myri_transport::Options::default().with_accept_unknown_peers(true);
        options.rpp.max_message_len = (64 << 20) + 20;
        options.rpp.max_queued_bytes = 2 * options.rpp.max_message_len;
        options.rpp.recv_buffer_bytes = 2 * options.rpp.max_message_len;
        let t = Endpoint::open_with("udp://127.0.0.1:0", options).unwrap();
        let mut ep = FabricEndpoint::new(EpType::Rdm, t, 1 << 19);
        ep.bind.av = Some(av.clone());
        ep.bind.tx_cq = Some((cq.clone(), false));
        ep.bind.rx_cq = Some((cq.clone(), false));
        ep.directed_recv = true;
        ep
    }

    /// A region that does not fit `/dev/shm` is `FI_ENOSPC` to the application (the
    /// transport's test makes one for real, on a small tmpfs).
    #[test]
    fn a_region_without_room_is_enospc() {
        let e = myri_transport::OpenError::ShmNoSpace {
            name: "x".into(),
            path: "/dev/shm/myri-x".into(),
            need: 8 << 20,
            free: 1 << 20,
        };
        assert_eq!(open_errno(&e), -libc::ENOSPC);
        let e = myri_transport::OpenError::AddrInUse {
            url: "shm://x".into(),
        };
        assert_eq!(open_errno(&e), -FI_EADDRNOTAVAIL);
    }

    #[test]
    fn two_endpoints_tagged_over_udp() {
        let av: Av = Arc::new(Mutex::new(AddressVector::default()));
        let cq: Cq = Arc::new(CompletionQueue::default());
        let mut a = open(&av, &cq);
        let mut b = open(&av, &cq);
        let a_addr = lock(&av).insert(a.local_url().to_owned());
        let b_addr = lock(&av).insert(b.local_url().to_owned());
        let header = Header {
            tagged: true,
            tag: 77,
            data: Some(5),
        };
        b.send(a_addr, header, &[b"hello"], 1, true).unwrap();
        let got = Arc::new(Mutex::new(Vec::new()));
        let posted = Posted {
            context: 2,
            src: b_addr,
            tag: 77,
            ignore: 0,
            target: Target::new(VecTarget(got.clone(), 64)),
            completion: true,
        };
        a.post_recv(true, posted, Probe::None).unwrap();
        for _ in 0..100_000 {
            a.progress();
            b.progress();
            if lock(&cq.queue).len() >= 2 {
                break;
            }
        }
        let mut out = Vec::new();
        lock(&cq.queue).take(8, &mut out).unwrap();
        assert_eq!(out.len(), 2, "{out:?}");
        assert_eq!(out[1].src, b_addr);
        assert_eq!(out[1].data, 5);
        assert_eq!(&lock(&got)[..], b"hello");
    }

    /// Over `udp://` a message is built in the vector of one RPP had acknowledged (no
    /// allocation per send once warm), and what arrives is each message's own bytes,
    /// whatever its length against the vector's earlier one.
    #[test]
    fn sends_reuse_acknowledged_vectors_and_deliver_their_own_bytes() {
        let av: Av = Arc::new(Mutex::new(AddressVector::default()));
        let cq: Cq = Arc::new(CompletionQueue::default());
        let mut a = open(&av, &cq);
        let mut b = open(&av, &cq);
        let a_addr = lock(&av).insert(a.local_url().to_owned());
        lock(&av).insert(b.local_url().to_owned());
        let header = Header {
            tagged: true,
            tag: 1,
            data: None,
        };
        let mut reused = 0;
        for (i, len) in [300usize, 8, 1000, 1, 64, 2000, 5]
            .into_iter()
            .cycle()
            .take(40)
            .enumerate()
        {
            let msg: Vec<u8> = (0..len).map(|j| (i * 7 + j) as u8).collect();
            let spare = b.spare.len();
            b.send(a_addr, header, &[&msg], i, true).unwrap();
            reused += usize::from(b.spare.len() < spare);
            let got = Arc::new(Mutex::new(Vec::new()));
            post_any(&mut a, &got, 4096);
            for _ in 0..100_000 {
                a.progress();
                b.progress();
                if lock(&got).len() == len && b.spare.len() == spare.max(1) {
                    break;
                }
            }
            assert_eq!(lock(&got)[..], msg[..], "message {i}");
        }
        assert!(reused >= 30, "{reused} of 40 sends reused a vector");
        assert!(b.spare.len() <= SPARE_VECS);
    }

    /// Registered memory: bytes 0, 1, ... 250, 0, ... (a pattern a shifted or stale
    /// range would not match).
    fn region(len: usize) -> Arc<dyn ExternalBytes> {
        Arc::new((0..len).map(|i| (i % 251) as u8).collect::<Vec<u8>>())
    }

    /// The pieces a split payload of `len` bytes from `ep` to its first peer goes in.
    fn pieces(ep: &FabricEndpoint, len: usize) -> usize {
        let t = ep.transports().next().unwrap();
        len.div_ceil(t.peer_packet_payload(Peer(0)).unwrap())
    }

    fn tx_count(cq: &Cq) -> usize {
        lock(&cq.queue).len()
    }

    fn post_any(ep: &mut FabricEndpoint, got: &Arc<Mutex<Vec<u8>>>, cap: usize) {
        let posted = Posted {
            context: 2,
            src: FI_ADDR_UNSPEC,
            tag: 0,
            ignore: !0,
            target: Target::new(VecTarget(got.clone(), cap)),
            completion: true,
        };
        ep.post_recv(true, posted, Probe::None).unwrap();
    }

    #[test]
    fn a_send_from_registered_memory_is_not_copied_and_completes_once_acknowledged() {
        let av: Av = Arc::new(Mutex::new(AddressVector::default()));
        let (a_cq, b_cq): (Cq, Cq) = Default::default();
        let mut a = open(&av, &a_cq);
        let mut b = open(&av, &b_cq);
        let b_addr = lock(&av).insert(b.local_url().to_owned());
        let mem = region(300_000);
        let range = 1000..201_000;
        let header = Header {
            tagged: true,
            tag: 5,
            data: None,
        };
        a.send_registered(b_addr, header, &mem, range.clone(), 9, true)
            .unwrap();
        // The sender alone: its packets leave, no acknowledgement comes, no completion.
        for _ in 0..200 {
            a.progress();
        }
        assert_eq!(
            tx_count(&a_cq),
            0,
            "no completion before the acknowledgement"
        );
        let pieces = pieces(&a, range.len());
        assert!(pieces > 1, "in pieces of a packet each");
        assert_eq!(
            Arc::strong_count(&mem),
            1 + pieces,
            "RPP holds the region, a view per piece"
        );
        let got = Arc::new(Mutex::new(Vec::new()));
        post_any(&mut b, &got, 1 << 20);
        // Both, until the receiver has it all: the sender has not run since the last
        // packet arrived, so it cannot have its acknowledgement yet.
        for _ in 0..100_000 {
            a.progress();
            b.progress();
            if tx_count(&b_cq) > 0 {
                break;
            }
        }
        assert_eq!(tx_count(&b_cq), 1, "received");
        assert_eq!(
            tx_count(&a_cq),
            0,
            "the sender has not heard the last acknowledgement"
        );
        assert!(lock(&got)[..] == *mem.bytes(range.clone()), "data intact");
        for _ in 0..100_000 {
            a.progress();
            b.progress();
            if tx_count(&a_cq) > 0 {
                break;
            }
        }
        let mut out = Vec::new();
        lock(&a_cq.queue).take(8, &mut out).unwrap();
        assert_eq!(out.len(), 1);
        assert_eq!((out[0].context, out[0].flags), (9, FI_SEND | FI_TAGGED));
        assert_eq!(Arc::strong_count(&mem), 1, "the region is let go");
        assert_eq!((a.counts.udp_sent, a.counts.copy_free_sent), (1, 1));
        assert_eq!(a.counts.udp_pieces_sent, 1);
        assert_eq!(b.counts.udp_received, 1);
        assert_eq!(
            (b.counts.udp_placed, b.counts.udp_placed_bytes),
            (1, range.len() as u64),
            "every piece copied once, from its datagram"
        );
        let s = a.transports().next().unwrap().stats();
        assert_eq!(
            (s.external_sends, s.copied_sends, s.transmit_copies),
            (pieces as u64, 0, 0)
        );
        // Short ones, and those from a range outside the region, are not sent copy-free.
        a.send_registered(b_addr, header, &mem, 0..100, 10, true)
            .unwrap();
        assert_eq!(
            a.send_registered(b_addr, header, &mem, 0..300_001, 11, true),
            Err(-FI_EINVAL)
        );
        assert_eq!(a.counts.copy_free_sent, 1);
        assert_eq!(tx_count(&a_cq), 1, "a copied send completes when it left");
    }

    /// Forwards datagrams between two endpoints through its own socket, dropping the
    /// first large one from `a` (a packet of a copy-free payload).
    struct LossyRelay {
        sock: std::net::UdpSocket,
        a: std::net::SocketAddr,
        b: std::net::SocketAddr,
        dropped: usize,
    }

    impl LossyRelay {
        fn pump(&mut self) {
            let mut buf = vec![0u8; 65_536];
            while let Ok((n, from)) = self.sock.recv_from(&mut buf) {
                let to = if from == self.a { self.b } else { self.a };
                if from == self.a && n > 30_000 && self.dropped == 0 {
                    self.dropped += 1;
                    continue;
                }
                self.sock.send_to(&buf[..n], to).unwrap();
            }
        }
    }

    #[test]
    fn a_lost_packet_of_a_copy_free_send_is_sent_again_from_the_region() {
        let av: Av = Arc::new(Mutex::new(AddressVector::default()));
        let (a_cq, b_cq): (Cq, Cq) = Default::default();
        let mut a = open(&av, &a_cq);
        let mut b = open(&av, &b_cq);
        let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        sock.set_nonblocking(true).unwrap();
        let addr = |url: &str| url.trim_start_matches("udp://").parse().unwrap();
        let mut relay = LossyRelay {
            a: addr(a.local_url()),
            b: addr(b.local_url()),
            sock,
            dropped: 0,
        };
        let relay_url = format!("udp://{}", relay.sock.local_addr().unwrap());
        a.via.insert(b.local_url().to_owned(), relay_url);
        let b_addr = lock(&av).insert(b.local_url().to_owned());
        let mem = region(400_000);
        let header = Header::default();
        let got = Arc::new(Mutex::new(Vec::new()));
        b.post_recv(
            false,
            Posted {
                context: 3,
                src: FI_ADDR_UNSPEC,
                tag: 0,
                ignore: 0,
                target: Target::new(VecTarget(got.clone(), 1 << 20)),
                completion: true,
            },
            Probe::None,
        )
        .unwrap();
        a.send_registered(b_addr, header, &mem, 7..300_007, 9, true)
            .unwrap();
        for _ in 0..5_000_000 {
            if tx_count(&a_cq) > 0 {
                break;
            }
            relay.pump();
            a.progress();
            relay.pump();
            b.progress();
        }
        assert_eq!(relay.dropped, 1);
        assert_eq!(tx_count(&a_cq), 1, "acknowledged after the retransmission");
        assert!(lock(&got)[..] == *mem.bytes(7..300_007), "data intact");
        let pieces = pieces(&a, 300_000) as u64;
        let t = a.transports().next().unwrap();
        let s = t.stats();
        assert_eq!(
            (s.external_sends, s.copied_sends, s.transmit_copies),
            (pieces, 0, 0)
        );
        let peer = t.peer_stats(Peer(0)).unwrap();
        assert!(peer.retransmitted >= 1, "{peer:?}");
        assert_eq!(a.counts.copy_free_sent, 1);
    }
}

/// What the in-process tests receive into.
#[cfg(test)]
mod test_sink {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// A posted receive that appends what lands in it (up to 4 MiB).
    pub(super) struct Sink(pub(super) Arc<Mutex<Vec<u8>>>);

    impl RecvTarget for Sink {
        fn capacity(&self) -> usize {
            4 << 20
        }
        fn write_at(&mut self, _offset: usize, data: &[u8]) {
            lock(&self.0).extend_from_slice(data);
        }
        fn first(&self) -> usize {
            0
        }
    }
}

#[cfg(test)]
mod cc_tests {
    use super::test_sink::Sink;
    use super::*;
    use crate::objects::AddressVector;
    use std::sync::{Arc, Mutex};

    /// Issue 16's stall: a 2 MiB message is more than RPP's initial
    /// congestion window. Its transmit completion used to be written when `send` took
    /// it; fi_pingpong's server then stopped progressing with the end of the message
    /// still queued, and the client never got it. Now the completion waits until every
    /// packet has left, and from then on the receiver gets the message with the sender
    /// never progressing again.
    #[test]
    fn a_send_held_by_the_congestion_window_completes_once_it_has_left() {
        let options = transport_options(EpType::Rdm);
        assert_eq!(
            options.rpp.congestion,
            myri_rpp::congestion::CongestionControl::Cubic
        );
        assert!(options.rpp.pacing);
        let av: Av = Arc::new(Mutex::new(AddressVector::default()));
        let [tx_cq, rx_cq]: [Cq; 2] = Default::default();
        // Over loopback UDP, where the kernel carries what has left whether or not the
        // sender runs (sim:// boards step only when their own endpoint progresses); the
        // 4 MiB socket buffer holds the whole message, so nothing is dropped.
        let mut eps = ["a", "b"].map(|_| {
            let t = Endpoint::open_with("udp://127.0.0.1:0", options.clone()).unwrap();
            let mut ep = FabricEndpoint::new(EpType::Rdm, t, crate::info::RDM_MAX_MSG);
            ep.bind.av = Some(av.clone());
            ep.bind.tx_cq = Some((tx_cq.clone(), false));
            ep.bind.rx_cq = Some((rx_cq.clone(), false));
            ep
        });
        let addrs = eps
            .each_ref()
            .map(|e| lock(&av).insert(e.local_url().to_owned()));
        let got = Arc::new(Mutex::new(Vec::new()));
        let posted = Posted {
            context: 2,
            src: FI_ADDR_UNSPEC,
            tag: 0,
            ignore: 0,
            target: Target::new(Sink(got.clone())),
            completion: true,
        };
        eps[1].post_recv(false, posted, Probe::None).unwrap();
        let msg: Vec<u8> = (0..2 << 20).map(|i: u32| (i % 251) as u8).collect();
        eps[0]
            .send(addrs[1], Header::default(), &[&msg], 1, true)
            .unwrap();
        assert_eq!(eps[0].untransmitted_sends(), 1, "the window holds it back");
        assert_eq!(lock(&tx_cq.queue).len(), 0, "no completion yet");
        let mut turns = 0;
        while lock(&tx_cq.queue).is_empty() {
            eps[0].progress();
            eps[1].progress();
            turns += 1;
            assert!(turns < 1_000_000, "the send never completed");
        }
        assert_eq!(eps[0].untransmitted_sends(), 0);
        // The sender is done with the message as far as its application knows: only the
        // receiver runs from here.
        let mut turns = 0;
        while lock(&rx_cq.queue).is_empty() {
            eps[1].progress();
            turns += 1;
            assert!(turns < 1_000_000, "the message never arrived");
        }
        assert_eq!(lock(&got).len(), msg.len());
        assert!(*lock(&got) == msg);
    }
}

#[cfg(test)]
mod shm_tests {
    use super::test_sink::Sink;
    use super::*;
    use crate::objects::{AddressVector, CompletionQueue};
    use std::sync::{Arc, Mutex};

    #[test]
    fn shm_pingpong_in_one_process() {
        let av: Av = Arc::new(Mutex::new(AddressVector::default()));
        let cq: Cq = Arc::new(CompletionQueue::default());
        let token = |s: &str| format!("t{}{s}", std::process::id());
        let mut eps = [token("a"), token("b")].map(|t| {
            let mut ep = FabricEndpoint::new_shm(EpType::Rdm, &t, 1 << 20);
            ep.bind.av = Some(av.clone());
            ep.bind.rx_cq = Some((cq.clone(), false));
            ep
        });
        let addrs = eps
            .each_ref()
            .map(|e| lock(&av).insert(e.local_url().to_owned()));
        for i in 0..200 {
            let (s, r) = (i % 2, 1 - i % 2);
            let got = Arc::new(Mutex::new(Vec::new()));
            let posted = Posted {
                context: 1,
                src: FI_ADDR_UNSPEC,
                tag: 0,
                ignore: 0,
                target: Target::new(Sink(got.clone())),
                completion: true,
            };
            eps[r].post_recv(false, posted, Probe::None).unwrap();
            // The first send waits for the peer to open their region (progress does).
            while let Err(e) = eps[s].send(addrs[r], Header::default(), &[b"ping"], 0, false) {
                assert_eq!(e, -FI_EAGAIN);
                eps[r].progress();
            }
            let mut turns = 0;
            while lock(&got).is_empty() {
                eps[r].progress();
                eps[s].progress();
                turns += 1;
                assert!(turns < 1_000_000, "message {i} never arrived");
            }
        }
        assert_eq!(lock(&cq.queue).len(), 200);
    }

    struct Into(Arc<Mutex<Vec<u8>>>, usize);

    impl RecvTarget for Into {
        fn capacity(&self) -> usize {
            self.1
        }
        fn write_at(&mut self, offset: usize, data: &[u8]) {
            let mut v = lock(&self.0);
            let end = offset + data.len();
            assert!(end <= self.1, "written past the posted buffer");
            if v.len() < end {
                v.resize(end, 0);
            }
            v[offset..end].copy_from_slice(data);
        }
        fn first(&self) -> usize {
            0
        }
    }

    /// Messages longer than the region carries at once (2 MiB) go in pieces and arrive
    /// whole, in order with the messages around them; each send completes once its
    /// last piece is on the ring, and a receive too short gets FI_ETRUNC.
    #[test]
    fn shm_messages_beyond_the_ring_go_in_pieces() {
        let av: Av = Arc::new(Mutex::new(AddressVector::default()));
        let [tx_cq, rx_cq]: [Cq; 2] = Default::default();
        let token = |s: &str| format!("p{}{s}", std::process::id());
        let mut eps = [token("a"), token("b")].map(|t| {
            let mut ep = FabricEndpoint::new_shm(EpType::Rdm, &t, crate::info::SHM_RDM_MAX_MSG);
            ep.bind.av = Some(av.clone());
            ep.bind.tx_cq = Some((tx_cq.clone(), false));
            ep.bind.rx_cq = Some((rx_cq.clone(), false));
            ep
        });
        let addrs = eps
            .each_ref()
            .map(|e| lock(&av).insert(e.local_url().to_owned()));
        let sizes = [5 << 20, 3, (2 << 20) + 1, 1 << 20, 9 << 20];
        let msgs: Vec<Vec<u8>> = sizes
            .iter()
            .enumerate()
            .map(|(k, &n)| (0..n).map(|i| ((i * 7 + k) % 253) as u8).collect())
            .collect();
        let mut got = Vec::new();
        for (k, m) in msgs.iter().enumerate() {
            let into = Arc::new(Mutex::new(Vec::new()));
            // The last receive is a byte short.
            let room = if k == msgs.len() - 1 {
                m.len() - 1
            } else {
                m.len()
            };
            let posted = Posted {
                context: 100 + k,
                src: FI_ADDR_UNSPEC,
                tag: 0,
                ignore: 0,
                target: Target::new(Into(into.clone(), room)),
                completion: true,
            };
            eps[1].post_recv(false, posted, Probe::None).unwrap();
            got.push(into);
        }
        for (k, m) in msgs.iter().enumerate() {
            let header = Header {
                tagged: false,
                tag: 0,
                data: Some(k as u64),
            };
            while let Err(e) = eps[0].send(addrs[1], header, &[m], k, true) {
                assert_eq!(e, -FI_EAGAIN);
                eps[1].progress();
            }
        }
        let mut turns = 0;
        while lock(&rx_cq.queue).len() < msgs.len() || lock(&tx_cq.queue).len() < msgs.len() {
            eps[0].progress();
            eps[1].progress();
            turns += 1;
            assert!(turns < 1_000_000, "stuck");
        }
        assert_eq!(eps[0].untransmitted_sends(), 0);
        for (k, m) in msgs.iter().enumerate().take(msgs.len() - 1) {
            assert!(*lock(&got[k]) == *m, "message {k}");
        }
        let last = msgs.len() - 1;
        assert!(lock(&got[last])[..] == msgs[last][..msgs[last].len() - 1]);
        let mut done = Vec::new();
        lock(&rx_cq.queue).take(16, &mut done).unwrap();
        let order: Vec<_> = done.iter().map(|e| (e.context, e.data, e.len)).collect();
        let want: Vec<_> = (0..last).map(|k| (100 + k, k as u64, sizes[k])).collect();
        assert_eq!(order, want);
        let err = lock(&rx_cq.queue).take_err().unwrap();
        assert_eq!(
            (err.err, err.olen, err.entry.context),
            (FI_ETRUNC, 1, 100 + last)
        );
        let mut sent = Vec::new();
        lock(&tx_cq.queue).take(16, &mut sent).unwrap();
        let contexts: Vec<_> = sent.iter().map(|e| e.context).collect();
        assert_eq!(contexts, (0..msgs.len()).collect::<Vec<_>>());
    }

    /// A target that counts its writes and checks each lands inside it.
    struct Counted(Arc<Mutex<(Vec<u8>, usize)>>, usize);

    impl RecvTarget for Counted {
        fn capacity(&self) -> usize {
            self.1
        }
        fn write_at(&mut self, offset: usize, data: &[u8]) {
            let mut g = lock(&self.0);
            let end = offset + data.len();
            assert!(end <= self.1, "written past the posted buffer");
            if g.0.len() < end {
                g.0.resize(end, 0);
            }
            g.0[offset..end].copy_from_slice(data);
            g.1 += 1;
        }
        fn first(&self) -> usize {
            0
        }
    }

    fn pair(name: &str) -> ([FabricEndpoint; 2], [FiAddr; 2], Cq, Cq) {
        let av: Av = Arc::new(Mutex::new(AddressVector::default()));
        let [tx_cq, rx_cq]: [Cq; 2] = Default::default();
        let token = |s: &str| format!("{name}{}{s}", std::process::id());
        let eps = [token("a"), token("b")].map(|t| {
            let mut ep = FabricEndpoint::new_shm(EpType::Rdm, &t, crate::info::SHM_RDM_MAX_MSG);
            ep.bind.av = Some(av.clone());
            ep.bind.tx_cq = Some((tx_cq.clone(), false));
            ep.bind.rx_cq = Some((rx_cq.clone(), false));
            ep
        });
        let addrs = eps
            .each_ref()
            .map(|e| lock(&av).insert(e.local_url().to_owned()));
        (eps, addrs, tx_cq, rx_cq)
    }

    fn posted(context: usize, target: Counted) -> Posted {
        Posted {
            context,
            src: FI_ADDR_UNSPEC,
            tag: 0,
            ignore: 0,
            target: Target::new(target),
            completion: true,
        }
    }

    /// A message of several slots lands in the receive posted for it piece by piece, at
    /// its offsets (one write per piece, no reassembly buffer), intact at sizes around
    /// the slot boundaries, odd ones and one of more slots than the region has; one
    /// that came before its receive was posted waits whole and is written once; a
    /// receive too short takes what fits and gets FI_ETRUNC with the rest's length.
    #[test]
    fn shm_pieces_land_in_the_posted_buffer() {
        let (mut eps, addrs, tx_cq, rx_cq) = pair("q");
        let piece = crate::info::SHM_PIECE;
        let sizes = [
            piece - 1,
            piece,
            piece + 1,
            2 * piece,
            2 * piece + 1,
            3 * piece - 7,
            1_000_003,
            (4 << 20) + 7,
            70 * piece + 13,
        ];
        let pieces = |n: usize| n.div_ceil(piece);
        let mut context = 0;
        for (k, &n) in sizes.iter().enumerate() {
            let msg: Vec<u8> = (0..n).map(|i| ((i * 13 + k) % 251) as u8).collect();
            // Posted first, then posted after the message came, then posted too short.
            for case in 0..3 {
                context += 1;
                let room = if case == 2 { n - n / 3 } else { n };
                let got = Arc::new(Mutex::new((Vec::new(), 0)));
                let target = || Counted(got.clone(), room);
                if case != 1 {
                    eps[1]
                        .post_recv(false, posted(context, target()), Probe::None)
                        .unwrap();
                }
                let before = lock(&tx_cq.queue).len();
                while let Err(e) = eps[0].send(addrs[1], Header::default(), &[&msg], context, true)
                {
                    assert_eq!(e, -FI_EAGAIN);
                    eps[1].progress();
                }
                let mut turns = 0;
                while lock(&tx_cq.queue).len() == before {
                    eps[0].progress();
                    eps[1].progress();
                    turns += 1;
                    assert!(turns < 1_000_000, "size {n}: the send never completed");
                }
                if case == 1 {
                    // Whole, unexpected, before the receive.
                    while eps[1].unexpected[0].is_empty() {
                        eps[1].progress();
                    }
                    eps[1]
                        .post_recv(false, posted(context, target()), Probe::None)
                        .unwrap();
                }
                let mut turns = 0;
                while lock(&rx_cq.queue).is_empty() {
                    eps[1].progress();
                    turns += 1;
                    assert!(turns < 1_000_000, "size {n}: never arrived");
                }
                let (bytes, writes) = lock(&got).clone();
                assert!(
                    bytes[..] == msg[..room],
                    "size {n}, case {case}: bytes differ"
                );
                // Pieces of equal length (no short tail), as many as SHM_PIECE makes.
                let each = n.div_ceil(pieces(n));
                let writes_wanted = match case {
                    1 => 1,
                    _ if n <= piece => 1,
                    2 => room.div_ceil(each),
                    _ => pieces(n),
                };
                assert_eq!(writes, writes_wanted, "size {n}, case {case}");
                if case == 2 {
                    let err = lock(&rx_cq.queue).take_err().unwrap();
                    assert_eq!(
                        (err.err, err.olen, err.entry.len, err.entry.context),
                        (FI_ETRUNC, n - room, room, context)
                    );
                } else {
                    let mut done = Vec::new();
                    lock(&rx_cq.queue).take(4, &mut done).unwrap();
                    let got: Vec<_> = done.iter().map(|e| (e.context, e.len)).collect();
                    assert_eq!(got, [(context, n)], "size {n}, case {case}");
                }
                let mut sent = Vec::new();
                lock(&tx_cq.queue).take(4, &mut sent).unwrap();
                assert_eq!(
                    sent.iter().map(|e| e.context).collect::<Vec<_>>(),
                    [context]
                );
            }
        }
        assert!(eps[1].reassembly.is_empty());
    }

    /// The sender dies part-way through a message of many slots that matched a posted
    /// receive: the receive completes nothing and goes back to the posted queue, where
    /// the next message (from the sender's successor) lands whole.
    #[test]
    fn shm_peer_dying_mid_message_gives_the_receive_back() {
        let (mut eps, addrs, _tx_cq, rx_cq) = pair("d");
        let piece = crate::info::SHM_PIECE;
        let n = 200 * piece + 5;
        let msg: Vec<u8> = (0..n).map(|i| (i % 241) as u8).collect();
        let got = Arc::new(Mutex::new((Vec::new(), 0)));
        eps[1]
            .post_recv(false, posted(7, Counted(got.clone(), n)), Probe::None)
            .unwrap();
        while let Err(e) = eps[0].send(addrs[1], Header::default(), &[&msg], 1, true) {
            assert_eq!(e, -FI_EAGAIN);
            eps[1].progress();
        }
        // Until the receiver took a first batch of pieces (the region has fewer slots
        // than the message).
        let mut turns = 0;
        while lock(&got).1 == 0 {
            eps[0].progress();
            eps[1].progress();
            turns += 1;
            assert!(turns < 1_000_000, "no piece arrived");
        }
        assert!(
            !eps[0].links[0].outq.is_empty(),
            "the message is part-way out"
        );
        let [a, mut b] = eps;
        drop(a);
        // The backend looks at its peer every few milliseconds: a bound in turns (each a
        // progress pass) far beyond that, reached only by a broken build.
        let mut turns = 0;
        while !b.reassembly.is_empty() {
            b.progress();
            turns += 1;
            assert!(turns < 50_000_000, "the death was never noticed");
        }
        let writes = lock(&got).1;
        assert!(writes > 0 && writes < n.div_ceil(piece), "{writes} pieces");
        assert!(lock(&rx_cq.queue).is_empty(), "nothing completed");
        assert_eq!(b.posted[0].len(), 1, "the receive is posted again");
        assert_eq!(b.posted[0][0].context, 7);
    }
}

#[cfg(test)]
mod auto_shm_tests {
    use super::*;
    use crate::objects::AddressVector;
    use std::sync::{Arc, Mutex};

    /// Receives into a vector, replaced by each message.
    struct Keep(Arc<Mutex<Vec<u8>>>);

    impl RecvTarget for Keep {
        fn capacity(&self) -> usize {
            1 << 20
        }
        fn write_at(&mut self, offset: usize, data: &[u8]) {
            let mut v = lock(&self.0);
            v.truncate(offset);
            v.extend_from_slice(data);
        }
        fn first(&self) -> usize {
            0
        }
    }

    /// An RDM endpoint over loopback UDP on address vector `av` and receive queue
    /// `rx_cq` (`auto`: with auto-shm on), and its address in `av`.
    fn endpoint(av: &Av, rx_cq: &Cq, auto: bool) -> (FabricEndpoint, FiAddr) {
        endpoint_at(av, rx_cq, auto, "udp://127.0.0.1:0")
    }

    /// [`endpoint`] bound to `url`.
    fn endpoint_at(av: &Av, rx_cq: &Cq, auto: bool, url: &str) -> (FabricEndpoint, FiAddr) {
        let t = Endpoint::open_with(url, transport_options(EpType::Rdm)).unwrap();
        let mut ep = FabricEndpoint::new(EpType::Rdm, t, crate::info::RDM_MAX_MSG);
        ep.bind.av = Some(av.clone());
        ep.bind.rx_cq = Some((rx_cq.clone(), false));
        ep.directed_recv = true;
        if auto {
            assert!(ep.enable_auto_shm());
        }
        let addr = lock(av).insert(ep.local_url().to_owned());
        (ep, addr)
    }

    /// Two of [`endpoint`]'s on one address vector and one receive queue.
    fn pair(auto: [bool; 2]) -> ([FabricEndpoint; 2], [FiAddr; 2], Cq) {
        let av: Av = Arc::new(Mutex::new(AddressVector::default()));
        let rx_cq: Cq = Default::default();
        let [(a, a_addr), (b, b_addr)] = auto.map(|on| endpoint(&av, &rx_cq, on));
        ([a, b], [a_addr, b_addr], rx_cq)
    }

    fn tagged(seq: u64) -> Header {
        Header {
            tagged: true,
            tag: seq,
            data: Some(seq),
        }
    }

    fn payload(seq: u64) -> Vec<u8> {
        // Some long enough to go in pieces over shm.
        let n = if seq % 17 == 3 {
            200_000
        } else {
            8 + seq as usize % 50
        };
        (0..n).map(|i| (i as u64 * 31 + seq) as u8).collect()
    }

    fn send(ep: &mut FabricEndpoint, dest: FiAddr, seq: u64) {
        let data = payload(seq);
        let mut turns = 0;
        while let Err(e) = ep.send(dest, tagged(seq), &[&data], 0, false) {
            assert_eq!(e, -FI_EAGAIN);
            turns += 1;
            assert!(turns < 1_000_000, "send {seq} never taken");
        }
    }

    /// Sends numbered messages from the first endpoint to the second until the first has
    /// switched that peer to the region; how many it sent.
    fn warm_up_to_shm(eps: &mut [FabricEndpoint; 2], addrs: [FiAddr; 2]) -> u64 {
        let mut warm = 0;
        while !eps[0].on_shm(addrs[1]) {
            send(&mut eps[0], addrs[1], warm);
            warm += 1;
            for _ in 0..50 {
                eps[0].progress();
                eps[1].progress();
            }
            assert!(warm < 100_000, "never switched");
        }
        warm
    }

    /// Takes the `n` messages waiting at `ep`, unexpected, in order: each must be the
    /// next in sequence from `src`, whole.
    fn take_in_order(ep: &mut FabricEndpoint, cq: &Cq, src: FiAddr, n: u64) {
        let mut turns = 0;
        while (ep.unexpected[TAGGED].len() as u64) < n {
            ep.progress();
            turns += 1;
            assert!(
                turns < 5_000_000,
                "{} of {n} arrived",
                ep.unexpected[TAGGED].len()
            );
        }
        for seq in 0..n {
            let got = Arc::new(Mutex::new(Vec::new()));
            let posted = Posted {
                context: seq as usize,
                src,
                tag: 0,
                ignore: u64::MAX,
                target: Target::new(Keep(got.clone())),
                completion: true,
            };
            ep.post_recv(true, posted, Probe::None).unwrap();
            let mut done = Vec::new();
            if lock(&cq.queue).take(1, &mut done).is_err() {
                let e = lock(&cq.queue).take_err();
                panic!("message {seq}: an error completion: {e:?}");
            }
            assert_eq!(done.len(), 1, "message {seq}");
            let e = &done[0];
            assert_eq!((e.tag, e.data, e.src), (seq, seq, src), "message {seq}");
            assert!(*lock(&got) == payload(seq), "message {seq}: bytes differ");
        }
        assert!(ep.unexpected[TAGGED].is_empty(), "more than {n} arrived");
    }

    /// Messages sent before the peer attached go over udp://, the sender switches to
    /// the region once the peer attached and udp:// holds nothing unacknowledged (a
    /// stream of bursts, so that it switches mid-stream), and from then on the udp://
    /// transport sends nothing more; the receiver gets every message once, in order,
    /// from the sender's address-vector entry, some by each path. Then the other
    /// direction, whose first send comes after both attached, goes over shm:// from its
    /// first message.
    #[test]
    fn auto_shm_switches_mid_stream_in_order() {
        let (mut eps, addrs, cq) = pair([true, true]);
        // Before the receiver ever progressed (its side of the region is not open).
        let mut seq = 0;
        while seq < 20 {
            send(&mut eps[0], addrs[1], seq);
            seq += 1;
            eps[0].progress();
        }
        assert!(!eps[0].on_shm(addrs[1]));
        let mut udp_sends_at_switch = None;
        let mut turns = 0;
        while udp_sends_at_switch.is_none() || seq < 400 {
            for _ in 0..3 {
                send(&mut eps[0], addrs[1], seq);
                seq += 1;
            }
            for _ in 0..20 {
                eps[0].progress();
                eps[1].progress();
            }
            if udp_sends_at_switch.is_none() && eps[0].on_shm(addrs[1]) {
                udp_sends_at_switch = Some(eps[0].links[0].transport.stats().sends);
            }
            turns += 1;
            assert!(turns < 200_000, "never switched");
        }
        take_in_order(&mut eps[1], &cq, addrs[0], seq);
        let c = eps[0].counts;
        assert!(c.udp_sent >= 20 && c.shm_sent > 0, "{c:?}");
        assert_eq!(c.udp_sent + c.shm_sent, seq);
        assert_eq!(
            Some(eps[0].links[0].transport.stats().sends),
            udp_sends_at_switch,
            "udp:// sent after the switch"
        );
        let r = eps[1].counts;
        assert_eq!((r.udp_received, r.shm_received), (c.udp_sent, c.shm_sent));
        // The other way: both attached long ago.
        for s in 0..50 {
            send(&mut eps[1], addrs[0], s);
        }
        assert!(eps[1].on_shm(addrs[0]));
        let mut turns = 0;
        while (eps[0].unexpected[TAGGED].len() as u64) < 50 {
            eps[0].progress();
            eps[1].progress();
            turns += 1;
            assert!(turns < 5_000_000, "never arrived");
        }
        take_in_order(&mut eps[0], &cq, addrs[1], 50);
        assert_eq!((eps[1].counts.udp_sent, eps[1].counts.shm_sent), (0, 50));
    }

    /// The receiver's side of the argument, forced: a message acknowledged over udp://
    /// but still in the udp:// transport's delivery queue when the next one, sent over
    /// the region after the acknowledgement, is taken from the region: the udp:// one
    /// is matched first.
    #[test]
    fn auto_shm_udp_delivery_left_queued_is_matched_first() {
        let (mut eps, addrs, cq) = pair([true, true]);
        let mut turns = 0;
        while !(eps[0].links.len() == 2 && eps[0].links[1].attached) {
            eps[0].progress();
            eps[1].progress();
            turns += 1;
            assert!(turns < 5_000_000, "never attached");
        }
        // Never sent to: the first send would switch at once. One over udp:// first.
        let region = eps[0].switch.remove(&addrs[1]).unwrap();
        send(&mut eps[0], addrs[1], 0);
        eps[0].switch.insert(addrs[1], region);
        // The receiver's transport alone runs: the message waits in its delivery queue,
        // acknowledged.
        let mut turns = 0;
        while eps[0].links[0]
            .transport
            .peer_has_pending(eps[0].peers[&addrs[1]].1)
        {
            eps[1].links[0].transport.progress();
            eps[0].progress();
            turns += 1;
            assert!(turns < 5_000_000, "never acknowledged");
        }
        assert_eq!(eps[1].links[0].transport.pending_deliveries(), 1);
        send(&mut eps[0], addrs[1], 1);
        assert!(eps[0].on_shm(addrs[1]));
        let mut turns = 0;
        while eps[1].unexpected[TAGGED].is_empty() {
            // The region only, as a pass that took a completion on the udp:// link
            // (which runs a transport pass) would leave it.
            eps[1].take_native(1);
            turns += 1;
            assert!(turns < 5_000_000, "never arrived");
        }
        assert_eq!(eps[1].unexpected[TAGGED].len(), 2, "both taken");
        take_in_order(&mut eps[1], &cq, addrs[0], 2);
        assert_eq!(eps[1].counts.udp_received, 1);
        assert_eq!(eps[1].counts.shm_received, 1);
    }

    /// One endpoint with a peer on its region and another that stays on udp:// (the
    /// udp:// link then goes quiet between messages, passed every few passes only):
    /// both directions with both peers, interleaved, arrive whole and in order.
    #[test]
    fn auto_shm_with_one_peer_on_shm_and_one_on_udp() {
        let (mut eps, addrs, cq) = pair([true, true]);
        let av = eps[0].bind.av.clone().unwrap();
        let (mut c, c_addr) = endpoint(&av, &cq, false);
        let warm = warm_up_to_shm(&mut eps, addrs);
        let [a, b] = &mut eps;
        let mut turns = 0;
        while (b.unexpected[TAGGED].len() as u64) < warm {
            a.progress();
            b.progress();
            turns += 1;
            assert!(turns < 5_000_000, "warm-up messages lost");
        }
        take_in_order(b, &cq, addrs[0], warm);
        for seq in 0..100 {
            send(a, addrs[1], seq);
            send(a, c_addr, seq);
            send(b, addrs[0], seq);
            send(&mut c, addrs[0], seq);
            for _ in 0..(seq % 7) * 40 {
                a.progress();
                b.progress();
                c.progress();
            }
        }
        take_in_order(b, &cq, addrs[0], 100);
        take_in_order(&mut c, &cq, addrs[0], 100);
        // a's unexpected queue holds both peers' messages: each in order, by source.
        let mut turns = 0;
        while a.unexpected[TAGGED].len() < 200 {
            a.progress();
            b.progress();
            c.progress();
            turns += 1;
            assert!(turns < 5_000_000, "{} of 200", a.unexpected[TAGGED].len());
        }
        for src in [addrs[1], c_addr] {
            let seqs: Vec<u64> = a.unexpected[TAGGED]
                .iter()
                .filter(|m| m.src == src)
                .map(|m| m.header.tag)
                .collect();
            assert_eq!(seqs, (0..100).collect::<Vec<_>>());
        }
        assert_eq!(c.counts.udp_received, 100);
        assert!(a.shm_active && a.counts.shm_sent >= 100);
    }

    /// A peer whose provider never opens its side (auto-shm off there) gets everything
    /// over udp://, in order, though the sender opened its side of the region.
    #[test]
    fn auto_shm_peer_that_never_attaches_gets_everything_over_udp() {
        let (mut eps, addrs, cq) = pair([true, false]);
        for seq in 0..300 {
            send(&mut eps[0], addrs[1], seq);
            for _ in 0..5 {
                eps[0].progress();
                eps[1].progress();
            }
        }
        assert_eq!(eps[0].links.len(), 2, "the sender opened its side");
        assert!(!eps[0].links[1].attached);
        assert!(!eps[0].on_shm(addrs[1]));
        take_in_order(&mut eps[1], &cq, addrs[0], 300);
        assert_eq!(eps[0].counts.shm_sent, 0);
        assert_eq!(eps[1].counts.udp_received, 300);
    }

    /// Only addresses of this host get a region; DGRAM endpoints never do; tokens are
    /// valid region names.
    #[test]
    fn auto_shm_only_for_local_rdm_peers() {
        let (mut eps, _, _) = pair([true, true]);
        let av = eps[0].bind.av.clone().unwrap();
        lock(&av).insert("udp://192.0.2.1:9".to_owned());
        eps[0].progress();
        // The peer's region only (the test-net address is no interface of this host).
        assert_eq!(eps[0].links.len(), 2);
        assert!(is_local(Ipv4Addr::LOCALHOST) && !is_local(Ipv4Addr::new(192, 0, 2, 1)));
        let t = Endpoint::open_with("udp://127.0.0.1:0", transport_options(EpType::Dgram)).unwrap();
        let mut dgram = FabricEndpoint::new(EpType::Dgram, t, 1000);
        assert!(!dgram.enable_auto_shm());
        let (_, tok) = auto_token("udp://255.255.255.255:65535").unwrap();
        let region = region_named(&format!("ma{:x}", u64::MAX), &tok, &tok);
        assert!(myri_transport::url::is_valid_name(
            region.strip_prefix("shm://").unwrap()
        ));
        assert_eq!(
            auto_token("udp://127.0.0.1:7000").unwrap().1,
            "u127.0.0.1_7000"
        );
        assert!(auto_token("udp://[::1]:7000").is_none());
        if cfg!(target_os = "linux") {
            assert_ne!(net_namespace(), 0);
        }
        let ns = format!("ma{:x}", net_namespace());
        assert!(
            eps[0]
                .auto
                .as_ref()
                .unwrap()
                .regions
                .keys()
                .all(|r| r.contains(&ns))
        );
    }

    /// A peer on the region restarts (its endpoint dropped, a new one opened on the
    /// same `udp://` address, so on the same region): the survivor's send whose pieces
    /// were still waiting for slots completes with `FI_EIO`, no piece of it reaches the
    /// new process, and then messages flow both ways again, in order, data checked,
    /// back on the region once the new process attached.
    #[test]
    fn auto_shm_peer_restart_fails_in_flight_sends_then_flows_again() {
        let (mut eps, addrs, cq) = pair([true, true]);
        let tx_cq: Cq = Default::default();
        eps[0].bind.tx_cq = Some((tx_cq.clone(), false));
        let b_url = eps[1].local_url().to_owned();
        let warm = warm_up_to_shm(&mut eps, addrs);
        take_in_order(&mut eps[1], &cq, addrs[0], warm);
        assert!(
            lock(&tx_cq.queue).is_empty(),
            "the warm-up asked for no completion"
        );
        // More than the region's slots hold: the tail waits for slots the peer never
        // gives back.
        let big: Vec<u8> = (0..8 << 20).map(|i: u32| (i % 253) as u8).collect();
        eps[0]
            .send(addrs[1], tagged(1000), &[&big], 77, true)
            .unwrap();
        eps[0].progress();
        assert_eq!(eps[0].untransmitted_sends(), 1, "the tail waits for slots");
        let [a, b] = eps;
        drop(b);
        let mut a = a;
        let mut turns = 0;
        let err = loop {
            a.progress();
            if let Some(e) = lock(&tx_cq.queue).take_err() {
                break e;
            }
            turns += 1;
            assert!(turns < 5_000_000, "the in-flight send never completed");
        };
        assert_eq!((err.err, err.entry.context), (FI_EIO, 77));
        assert!(lock(&tx_cq.queue).is_empty(), "one completion for it");
        assert_eq!(a.untransmitted_sends(), 0);
        // Until a process attaches again, sends to the peer fail, as to a failed
        // udp:// peer.
        assert_eq!(a.send(addrs[1], tagged(0), &[b"x"], 78, true), Err(-FI_EIO));
        // The restarted peer: same address, same region.
        let av = a.bind.av.clone().unwrap();
        let (mut b, b_addr) = endpoint_at(&av, &cq, true, &b_url);
        assert_eq!(b_addr, addrs[1]);
        let region = a.peers[&addrs[1]].0;
        let mut turns = 0;
        while !a.links[region].attached {
            a.progress();
            b.progress();
            turns += 1;
            assert!(turns < 5_000_000, "the new process never attached");
        }
        let mut seq = 0;
        let mut turns = 0;
        while seq < 200 || !a.on_shm(addrs[1]) || !b.on_shm(addrs[0]) {
            send(&mut a, addrs[1], seq);
            send(&mut b, addrs[0], seq);
            seq += 1;
            for _ in 0..20 {
                a.progress();
                b.progress();
            }
            turns += 1;
            assert!(turns < 100_000, "never back on the region");
        }
        take_in_order(&mut b, &cq, addrs[0], seq);
        take_in_order(&mut a, &cq, addrs[1], seq);
        assert!(lock(&tx_cq.queue).is_empty(), "no error after the restart");
        assert!(a.counts.shm_sent > warm && b.counts.shm_sent > 0);
        assert_eq!(b.broken_pieces, 0, "no piece of the failed send reached it");
    }

    /// A peer on the region restarts with auto-shm off: its region stays without a
    /// process, and once it is heard from over udp:// in its new incarnation, sends to it
    /// go over udp:// again, in order.
    #[test]
    fn auto_shm_peer_restarted_without_auto_shm_is_reached_over_udp() {
        let (mut eps, addrs, cq) = pair([true, true]);
        let b_url = eps[1].local_url().to_owned();
        let warm = warm_up_to_shm(&mut eps, addrs);
        take_in_order(&mut eps[1], &cq, addrs[0], warm);
        let [mut a, b] = eps;
        let region = a.peers[&addrs[1]].0;
        drop(b);
        let mut turns = 0;
        while a.links[region].attached {
            a.progress();
            turns += 1;
            assert!(turns < 5_000_000, "the death never seen");
        }
        let av = a.bind.av.clone().unwrap();
        let (mut b, _) = endpoint_at(&av, &cq, false, &b_url);
        for seq in 0..20 {
            send(&mut b, addrs[0], seq);
        }
        let mut turns = 0;
        while a.unexpected[TAGGED].len() < 20 {
            a.progress();
            b.progress();
            turns += 1;
            assert!(turns < 5_000_000, "{} of 20", a.unexpected[TAGGED].len());
        }
        take_in_order(&mut a, &cq, addrs[1], 20);
        for seq in 0..100 {
            send(&mut a, addrs[1], seq);
            assert!(!a.on_shm(addrs[1]), "back on udp://");
            b.progress();
        }
        let mut turns = 0;
        while b.unexpected[TAGGED].len() < 100 {
            a.progress();
            b.progress();
            turns += 1;
            assert!(turns < 5_000_000, "{} of 100", b.unexpected[TAGGED].len());
        }
        take_in_order(&mut b, &cq, addrs[0], 100);
        assert_eq!(b.counts.udp_received, 100);
    }

    /// The receiving side of a broken message: a piece continuing a message whose start
    /// never came is dropped, and a new message while one is open drops the open one (a
    /// receive it had matched is posted again and takes the new message).
    #[test]
    fn broken_pieces_are_dropped() {
        let (mut eps, addrs, cq) = pair([false, false]);
        let b_url = eps[1].local_url().to_owned();
        let to_b = eps[0].links[0].transport.insert_addr(&b_url).unwrap();
        // Sent as they are over a's udp:// transport: each is one transport message.
        let raw = |eps: &mut [FabricEndpoint; 2], seq: u64, more, cont, body: &[u8]| {
            let mut v = vec![0; HEADER_LEN];
            tagged(seq).emit_piece(&mut v, Piece::part(more, cont));
            v.extend_from_slice(body);
            let [a, b] = eps;
            let t = &mut a.links[0].transport;
            t.send(to_b, myri_transport::Buf::from_vec(v)).unwrap();
            let mut turns = 0;
            while t.peer_has_pending(to_b) {
                t.progress();
                b.progress();
                turns += 1;
                assert!(turns < 5_000_000, "never acknowledged");
            }
            eps[1].progress();
        };
        let got = Arc::new(Mutex::new(Vec::new()));
        let posted = Posted {
            context: 9,
            src: FI_ADDR_UNSPEC,
            tag: 0,
            ignore: u64::MAX,
            target: Target::new(Keep(got.clone())),
            completion: true,
        };
        eps[1].post_recv(true, posted, Probe::None).unwrap();
        raw(&mut eps, 5, true, true, b"tail");
        raw(&mut eps, 5, false, true, b"end");
        assert_eq!(eps[1].broken_pieces, 2);
        raw(&mut eps, 6, true, false, b"start");
        assert_eq!(eps[1].posted[TAGGED].len(), 0, "matched by the first piece");
        raw(&mut eps, 7, false, false, &payload(0));
        assert_eq!(eps[1].broken_pieces, 3);
        let mut done = Vec::new();
        lock(&cq.queue).take(8, &mut done).unwrap();
        assert_eq!(done.len(), 1);
        assert_eq!(
            (done[0].context, done[0].tag, done[0].src),
            (9, 7, addrs[0])
        );
        assert!(*lock(&got) == payload(0));
    }
}
