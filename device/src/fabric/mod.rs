//! The network between boards: cables, crossbar switches, source routes, faults, time.
//!
//! A [`Fabric`] is built once with a [`FabricBuilder`] and then shared (`Arc<Fabric>`) by
//! every board and driver. A board's link port calls [`Fabric::transmit`] with a finished
//! packet; the fabric walks it along its source route at once, link by link: each
//! direction of a cable applies its [`LinkModel`] (latency, bandwidth, cut-through timing)
//! and its seeded [`FaultConfig`] middleware; each switch consumes one route byte,
//! recomputes the CRC-8 (in constant time) and forwards the packet out of the port the byte
//! names, or drops and counts it if the byte is bad. The packet lands in the destination
//! port's queue with the times its head and tail arrive; [`Fabric::receive`] hands it to
//! the board once its head has arrived, after checking the CRC-8 (bad packets are dropped
//! and counted there, as by the receiving port).
//!
//! The fabric never blocks a sender and never reads a clock: every call carries `now`.
//! Each link has its own lock, so boards on different threads can share it (the threaded
//! mode). A sender hands a packet to its destination port through a lock-free queue
//! (crossbeam's `ArrayQueue`): sender and receiver on two cores pass a packet with the
//! cache lines of one queue slot and no lock between them. The receiving side moves what
//! arrived into its own heap (ordered by head time, ties in the order packets were handed
//! over) under a lock only it takes in the common case; the port's queue limit, counters
//! and trace events are applied there, in hand-over order. Under the deterministic
//! scheduler the same calls happen in the same order and [`Fabric::trace_hash`] is the
//! same for the same seed.

pub mod fault;
pub mod link;
pub mod topology;
pub mod trace;

use crate::time::Time;
use crate::wire::Packet;
use crate::wire::route::decode_hop;
use crossbeam_queue::ArrayQueue;
pub use fault::{BurstLoss, DropCause, FaultConfig, LinkFlap};
use link::{Carried, InTransit, LinkState};
pub use link::{LinkCounters, LinkModel};
use smallvec::SmallVec;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use thiserror::Error;
use trace::{Event, EventKind, PacketId, Place, TraceHash};

/// A host port: where a board's link connects to the fabric.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PortId(pub u32);

/// A crossbar switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SwitchId(pub u32);

/// A cable. Its two directions are links `2 * id` (a → b) and `2 * id + 1` (b → a).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CableId(pub u32);

/// One direction of a cable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LinkId(pub u32);

/// Either end of a cable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Endpoint {
    /// A host port.
    Host(PortId),
    /// A port of a switch.
    Switch(SwitchId, u8),
}

/// The sizes of crossbar switch this model builds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SwitchSize {
    /// 8 ports.
    Eight = 8,
    /// 16 ports.
    Sixteen = 16,
}

/// How a cable is made: timing and faults for each direction.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct CableConfig {
    /// Timing of both directions.
    pub model: LinkModel,
    /// Faults from the first endpoint to the second.
    pub faults_ab: FaultConfig,
    /// Faults from the second endpoint to the first.
    pub faults_ba: FaultConfig,
}

impl CableConfig {
    /// The same faults in both directions.
    pub fn symmetric(model: LinkModel, faults: FaultConfig) -> CableConfig {
        CableConfig {
            model,
            faults_ab: faults,
            faults_ba: faults,
        }
    }
}

/// A topology the builder refused.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum TopologyError {
    /// An endpoint that does not exist.
    #[error("no such endpoint {0:?}")]
    NoSuchEndpoint(Endpoint),
    /// An endpoint that already has a cable.
    #[error("endpoint {0:?} is already cabled")]
    AlreadyCabled(Endpoint),
    /// A cable from an endpoint to itself.
    #[error("a cable cannot join {0:?} to itself")]
    SelfLoop(Endpoint),
    /// Fault probabilities out of range.
    #[error(transparent)]
    Faults(#[from] fault::BadProbability),
}

/// A refused transmit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum TransmitError {
    /// The port does not exist.
    #[error("no such port {0:?}")]
    NoSuchPort(PortId),
    /// The port has no cable: the packet goes nowhere (counted).
    #[error("port {0:?} has no cable")]
    Unconnected(PortId),
}

/// A packet the fabric hands to a board.
#[derive(Debug)]
pub struct Arrival {
    /// The packet, CRC-8 checked.
    pub packet: Packet,
    /// Its identity.
    pub id: PacketId,
    /// When its first byte arrived.
    pub head: Time,
    /// When its last byte arrives (the receive engine cannot finish before).
    pub tail: Time,
}

/// Counters of a host port.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PortCounters {
    /// Packets this port sent.
    pub sent: u64,
    /// Packets handed to the board.
    pub delivered: u64,
    /// Packets dropped for a bad CRC-8.
    pub crc_errors: u64,
    /// Packets dropped because the port's queue was full.
    pub overflows: u64,
    /// Transmits refused because the port has no cable.
    pub unconnected: u64,
}

/// Totals over the whole fabric.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FabricCounters {
    /// Packets sent by host ports.
    pub sent: u64,
    /// Packets delivered to boards.
    pub delivered: u64,
    /// Packets dropped anywhere (links, switches, ports).
    pub dropped: u64,
    /// Of those, dropped by links (random, burst, link down, first after init).
    pub link_drops: u64,
    /// Of those, dropped by switches for a bad route.
    pub bad_routes: u64,
    /// Of those, dropped by ports for a bad CRC-8.
    pub crc_errors: u64,
    /// Of those, dropped by full port queues.
    pub overflows: u64,
    /// Bits flipped by fault injection.
    pub corrupted: u64,
    /// Copies made by fault injection.
    pub duplicated: u64,
    /// Packets held back by fault injection.
    pub reordered: u64,
}

/// Where a packet goes when it comes out of a link.
enum Hop {
    /// On along this link.
    Link(LinkId),
    /// Into this host port's queue.
    Host(PortId),
    /// Nowhere: a switch dropped it.
    Dropped,
}

struct Queued(InTransit, u64);

impl PartialEq for Queued {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == core::cmp::Ordering::Equal
    }
}
impl Eq for Queued {}
impl PartialOrd for Queued {
    fn partial_cmp(&self, other: &Self) -> Option<core::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Queued {
    /// Reversed: the heap's top is the earliest head arrival, ties in arrival order.
    fn cmp(&self, other: &Self) -> core::cmp::Ordering {
        (other.0.head, other.1).cmp(&(self.0.head, self.1))
    }
}

struct RxQueue {
    heap: BinaryHeap<Queued>,
    /// Packets sorted into the heap (their order number for ties).
    arrivals: u64,
    /// Packets taken from the hand-over queue (some then dropped for a full queue).
    taken: u64,
    counters: PortCounters,
    trace: TraceHash,
}

/// Keeps what it holds on cache lines of its own, so that state one thread writes does
/// not share a line with state another thread polls (two cores would pass the line back
/// and forth on every access).
#[repr(align(128))]
#[derive(Default)]
struct Padded<T>(T);

impl<T> core::ops::Deref for Padded<T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        &self.0
    }
}

/// What only the port's own board touches when it sends.
#[derive(Default)]
struct SendSide {
    /// Packets this port has transmitted (sent or refused as unconnected): the next
    /// packet's sequence number.
    next_seq: AtomicU64,
}

/// What the receiving side keeps and publishes.
struct RecvSide {
    rx: Mutex<RxQueue>,
    /// Packets in `rx`'s heap, and the earliest head time among them (`u64::MAX` when
    /// empty), published after every change under the lock so that a board polling an
    /// empty port takes no lock.
    held: AtomicU64,
    next_head: AtomicU64,
    /// `taken` of the receiving side, published with the rest.
    taken: AtomicU64,
}

/// What senders write when they hand a packet over.
struct Handover {
    /// Packets handed over and not yet moved to the receiving side's heap.
    inbound: ArrayQueue<InTransit>,
    has_waker: AtomicBool,
}

/// Packets a port's hand-over queue holds (at most the port's queue limit). When it is
/// full (the receiving board has not looked for a while), the sender moves what it
/// holds to the receiving side's heap itself, under its lock.
const HANDOVER_SLOTS: usize = 64;

struct HostPort {
    out: Option<LinkId>,
    tx: Padded<SendSide>,
    handover: Handover,
    recv: Padded<RecvSide>,
    /// Emptied packet buffers, reused for the next packet this port's board sends. The
    /// boards that received this port's packets give them back here.
    spare: Padded<Spares>,
    waker: Mutex<Option<std::thread::Thread>>,
}

/// Spare packet buffers a port keeps of the packets it received.
const SPARES: usize = 16;
/// Spare packet buffers a port keeps in all, given back by the ports it sent them to: as
/// many as a sender may have on their way (a window of packets waiting in the receiver's
/// port queue), so that a stream reuses its buffers rather than allocating a new one per
/// packet while the receiver's board catches up, freeing as many after.
const SENDER_SPARES: usize = 64;

/// A port's spare packet buffers, the last given back on top.
#[derive(Default)]
struct Spares {
    bufs: Mutex<Vec<Vec<u8>>>,
    /// How many `bufs` holds, stored under its lock after every change: a full pool
    /// (a receiving port that sends little) or an empty one is passed by with one load
    /// instead of a lock round trip. A stale value only costs a wasted lock or a buffer
    /// not kept.
    len: AtomicUsize,
}

impl RecvSide {
    fn publish(&self, rx: &RxQueue) {
        let head = rx.heap.peek().map_or(u64::MAX, |q| q.0.head.as_nanos());
        self.next_head.store(head, Ordering::Release);
        self.held.store(rx.heap.len() as u64, Ordering::Release);
        self.taken.store(rx.taken, Ordering::Release);
    }
}

impl HostPort {
    /// Whether packets wait at the port, handed over or held (a few loads, no lock).
    #[inline]
    fn has_queued(&self) -> bool {
        !self.handover.inbound.is_empty() || self.recv.held.load(Ordering::Acquire) != 0
    }
}

struct Switch {
    /// Outgoing link of each port.
    out: Vec<Option<LinkId>>,
    state: Mutex<(u64, TraceHash)>,
}

/// The fabric. See the module documentation.
pub struct Fabric {
    seed: u64,
    hosts: Vec<HostPort>,
    switches: Vec<Switch>,
    /// Each on lines of its own: the links of one path are walked by one sender's
    /// thread, the next link's by another's.
    links: Vec<Padded<Mutex<LinkState>>>,
    /// Whether each link is up, readable without its lock.
    up: Vec<AtomicBool>,
    /// Where each link leads.
    far_end: Vec<Endpoint>,
    queue_limit: usize,
    recorder: Option<Mutex<Recorder>>,
}

struct Recorder {
    events: Vec<Event>,
    capacity: usize,
    lost: u64,
}

/// Builds a [`Fabric`].
#[derive(Debug, Clone)]
pub struct FabricBuilder {
    seed: u64,
    hosts: u32,
    switches: Vec<SwitchSize>,
    cables: Vec<(Endpoint, Endpoint, CableConfig)>,
    queue_limit: usize,
    record: usize,
}

impl FabricBuilder {
    /// An empty fabric whose faults are seeded from `seed`.
    pub fn new(seed: u64) -> FabricBuilder {
        FabricBuilder {
            seed,
            hosts: 0,
            switches: Vec::new(),
            cables: Vec::new(),
            queue_limit: 4096,
            record: 0,
        }
    }

    /// Adds a host port.
    pub fn add_host(&mut self) -> PortId {
        self.hosts += 1;
        PortId(self.hosts - 1)
    }

    /// Adds a switch.
    pub fn add_switch(&mut self, size: SwitchSize) -> SwitchId {
        self.switches.push(size);
        SwitchId(self.switches.len() as u32 - 1)
    }

    /// How many packets a host port's queue holds before it drops (default 4096).
    pub fn queue_limit(&mut self, packets: usize) -> &mut FabricBuilder {
        self.queue_limit = packets.max(1);
        self
    }

    /// Keeps up to `events` trace events for [`Fabric::events`] (default 0: hash only).
    pub fn record(&mut self, events: usize) -> &mut FabricBuilder {
        self.record = events;
        self
    }

    fn check(&self, e: Endpoint) -> Result<(), TopologyError> {
        let exists = match e {
            Endpoint::Host(p) => p.0 < self.hosts,
            Endpoint::Switch(s, port) => self
                .switches
                .get(s.0 as usize)
                .is_some_and(|&size| port < size as u8),
        };
        if !exists {
            return Err(TopologyError::NoSuchEndpoint(e));
        }
        if self.cables.iter().any(|&(a, b, _)| a == e || b == e) {
            return Err(TopologyError::AlreadyCabled(e));
        }
        Ok(())
    }

    /// Joins two endpoints with a cable.
    pub fn connect(
        &mut self,
        a: Endpoint,
        b: Endpoint,
        config: CableConfig,
    ) -> Result<CableId, TopologyError> {
        if a == b {
            return Err(TopologyError::SelfLoop(a));
        }
        self.check(a)?;
        self.check(b)?;
        config.faults_ab.validate()?;
        config.faults_ba.validate()?;
        self.cables.push((a, b, config));
        Ok(CableId(self.cables.len() as u32 - 1))
    }

    /// The fabric.
    pub fn build(&self) -> Fabric {
        let mut hosts: Vec<HostPort> = (0..self.hosts)
            .map(|_| HostPort {
                out: None,
                tx: Padded::default(),
                handover: Handover {
                    inbound: ArrayQueue::new(HANDOVER_SLOTS.min(self.queue_limit)),
                    has_waker: AtomicBool::new(false),
                },
                recv: Padded(RecvSide {
                    rx: Mutex::new(RxQueue {
                        heap: BinaryHeap::new(),
                        arrivals: 0,
                        taken: 0,
                        counters: PortCounters::default(),
                        trace: TraceHash::default(),
                    }),
                    held: AtomicU64::new(0),
                    next_head: AtomicU64::new(u64::MAX),
                    taken: AtomicU64::new(0),
                }),
                spare: Padded::default(),
                waker: Mutex::new(None),
            })
            .collect();
        let mut switches: Vec<Switch> = self
            .switches
            .iter()
            .map(|&size| Switch {
                out: vec![None; size as usize],
                state: Mutex::new((0, TraceHash::default())),
            })
            .collect();
        let mut links = Vec::new();
        let mut far_end = Vec::new();
        for (i, &(a, b, config)) in self.cables.iter().enumerate() {
            for (from, to, faults, id) in [
                (a, b, config.faults_ab, 2 * i as u32),
                (b, a, config.faults_ba, 2 * i as u32 + 1),
            ] {
                links.push(Padded(Mutex::new(LinkState::new(
                    id,
                    config.model,
                    faults,
                    self.seed,
                ))));
                far_end.push(to);
                match from {
                    Endpoint::Host(p) => hosts[p.0 as usize].out = Some(LinkId(id)),
                    Endpoint::Switch(s, port) => {
                        switches[s.0 as usize].out[port as usize] = Some(LinkId(id))
                    }
                }
            }
        }
        let recorder = (self.record > 0).then(|| {
            Mutex::new(Recorder {
                events: Vec::new(),
                capacity: self.record,
                lost: 0,
            })
        });
        let up = links.iter().map(|_| AtomicBool::new(true)).collect();
        Fabric {
            seed: self.seed,
            hosts,
            switches,
            links,
            up,
            far_end,
            queue_limit: self.queue_limit,
            recorder,
        }
    }
}

/// Locks a mutex, ignoring poisoning: every critical section here leaves its state
/// consistent before anything that could panic.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(recovered)
}

/// The guard of a poisoned lock. Cold, so that the branch to it is laid out away from
/// the lock calls inlined into hot paths.
#[cold]
fn recovered<G>(poisoned: std::sync::PoisonError<G>) -> G {
    poisoned.into_inner()
}

impl Fabric {
    /// The seed faults were drawn from.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Number of host ports.
    pub fn ports(&self) -> usize {
        self.hosts.len()
    }

    /// Number of cables.
    pub fn cables(&self) -> usize {
        self.links.len() / 2
    }

    fn record(&self, e: Event) {
        if let Some(r) = &self.recorder {
            let mut r = lock(r);
            if r.events.len() < r.capacity {
                r.events.push(e);
            } else {
                r.lost += 1;
            }
        }
    }

    /// Sends a packet out of host port `from` at `now`. The fabric takes it along its
    /// route at once; see the module documentation. Returns the packet's identity.
    pub fn transmit(
        &self,
        now: Time,
        from: PortId,
        packet: Packet,
    ) -> Result<PacketId, TransmitError> {
        let host = self
            .hosts
            .get(from.0 as usize)
            .ok_or(TransmitError::NoSuchPort(from))?;
        let seq = host.tx.next_seq.fetch_add(1, Ordering::Relaxed);
        let id = PacketId {
            source: from.0,
            seq,
        };
        let Some(first) = host.out else {
            // Counted here and subtracted from `next_seq` for the packets sent.
            lock(&host.recv.rx).counters.unconnected += 1;
            return Err(TransmitError::Unconnected(from));
        };
        let record = &mut |e: Event| self.record(e);
        let sent = Event {
            at: now,
            place: Place::Link(first.0),
            kind: EventKind::Sent,
            packet: id,
        };
        // The packet is walked depth first, link by link; copies made by duplication wait
        // on `pending` (the latest first) until the packet ahead of them is delivered or
        // dropped. In the common case there is one packet and it is walked in place.
        let mut pending: SmallVec<[(LinkId, InTransit); 2]> = SmallVec::new();
        let t = InTransit {
            packet,
            id,
            head: now,
            tail: now,
            hold: std::time::Duration::ZERO,
        };
        self.walk(first, t, Some(&sent), &mut pending, record);
        while let Some((link, t)) = pending.pop() {
            self.walk(link, t, None, &mut pending, record);
        }
        Ok(id)
    }

    /// Carries `t` from `link` on until it is delivered or dropped; copies it picks up
    /// on the way go to `pending`. `sent` is traced on the first link.
    fn walk(
        &self,
        mut link: LinkId,
        mut t: InTransit,
        mut sent: Option<&Event>,
        pending: &mut SmallVec<[(LinkId, InTransit); 2]>,
        record: &mut impl FnMut(Event),
    ) {
        loop {
            let carried = {
                let mut l = lock(&self.links[link.0 as usize]);
                if let Some(sent) = sent.take() {
                    l.trace.event(sent);
                    if self.recorder.is_some() {
                        record(*sent);
                    }
                }
                let carried = l.carry(&mut t, record);
                // Written only when it changes: every board reads these flags on every
                // poll, and a store (even of the same value) takes the line from them.
                let up = &self.up[link.0 as usize];
                if up.load(Ordering::Relaxed) != l.faults.is_up() {
                    up.store(l.faults.is_up(), Ordering::Relaxed);
                }
                carried
            };
            let end = self.far_end[link.0 as usize];
            match carried {
                Carried::Dropped => return,
                Carried::Passed => {}
                Carried::Duplicated(mut copy) => match self.forward(end, &mut copy, record) {
                    Hop::Link(next) => pending.push((next, copy)),
                    Hop::Host(port) => self.deliver(port, copy),
                    Hop::Dropped => {}
                },
            }
            match self.forward(end, &mut t, record) {
                Hop::Link(next) => link = next,
                Hop::Host(port) => return self.deliver(port, t),
                Hop::Dropped => return,
            }
        }
    }

    /// A packet comes out of a link at `end`: a host port is where it is delivered; a
    /// switch consumes its first route byte and names the link it leaves by, or drops it
    /// for a bad one.
    #[inline]
    fn forward(&self, end: Endpoint, t: &mut InTransit, record: &mut impl FnMut(Event)) -> Hop {
        match end {
            Endpoint::Host(port) => Hop::Host(port),
            Endpoint::Switch(s, _) => {
                let sw = &self.switches[s.0 as usize];
                let byte = t.packet.first_byte().unwrap_or(0);
                let next = decode_hop(0, byte)
                    .ok()
                    .and_then(|port| sw.out.get(port as usize).copied().flatten())
                    .filter(|_| t.packet.len() >= 2);
                match next {
                    Some(next) => {
                        // Length checked above: there is a route byte to consume.
                        let _ = t.packet.consume_route_byte();
                        Hop::Link(next)
                    }
                    None => {
                        let e = Event {
                            at: t.head,
                            place: Place::Switch(s.0),
                            kind: EventKind::BadRoute { byte },
                            packet: t.id,
                        };
                        let mut st = lock(&sw.state);
                        st.0 += 1;
                        st.1.event(&e);
                        record(e);
                        Hop::Dropped
                    }
                }
            }
        }
    }

    /// An empty buffer for the next packet host port `at` sends: one its board emptied
    /// before if there is one (no allocation on the fast path), else a new one.
    pub fn take_buffer(&self, at: PortId) -> Vec<u8> {
        self.hosts
            .get(at.0 as usize)
            .filter(|h| h.spare.len.load(Ordering::Relaxed) != 0)
            .and_then(|h| {
                let mut bufs = lock(&h.spare.bufs);
                let buf = bufs.pop();
                h.spare.len.store(bufs.len(), Ordering::Relaxed);
                buf
            })
            .unwrap_or_else(|| Vec::with_capacity(256))
    }

    /// Gives an emptied packet buffer, received at host port `at` from host port `from`,
    /// back for reuse: to `at`'s board, which sends the next packet from it (in a
    /// ping-pong the buffer goes straight back, already in that core's cache), or, once
    /// `at` keeps enough, to `from`, whose board needs buffers for what it keeps sending
    /// (a stream: the sender would otherwise allocate a buffer per packet, freed on the
    /// receiver's thread).
    pub fn recycle(&self, at: PortId, from: PortId, mut buf: Vec<u8>) {
        buf.clear();
        for (port, keep) in [(at, SPARES), (from, SENDER_SPARES)] {
            if let Some(h) = self.hosts.get(port.0 as usize) {
                if h.spare.len.load(Ordering::Relaxed) >= keep {
                    continue;
                }
                let mut bufs = lock(&h.spare.bufs);
                if bufs.len() < keep {
                    bufs.push(buf);
                    h.spare.len.store(bufs.len(), Ordering::Relaxed);
                    return;
                }
            }
        }
    }

    /// Hands a packet over to host port `port`: into the lock-free queue, or, if that is
    /// full, under the receiving side's lock after moving what the queue holds.
    fn deliver(&self, port: PortId, mut t: InTransit) {
        t.head += t.hold;
        t.tail += t.hold;
        let host = &self.hosts[port.0 as usize];
        let handover = &host.handover;
        if let Err(t) = handover.inbound.push(t) {
            let mut rx = lock(&host.recv.rx);
            self.take_inbound(port, host, &mut rx);
            self.enqueue(port, &mut rx, t);
            host.recv.publish(&rx);
        }
        if handover.has_waker.load(Ordering::Acquire)
            && let Some(thread) = lock(&host.waker).as_ref()
        {
            thread.unpark();
        }
    }

    /// Moves the packets handed over to `port` into its heap, in hand-over order (the
    /// caller holds the receiving side's lock and publishes afterwards).
    fn take_inbound(&self, port: PortId, host: &HostPort, rx: &mut RxQueue) {
        while let Some(t) = host.handover.inbound.pop() {
            rx.taken += 1;
            self.enqueue(port, rx, t);
        }
    }

    /// Queues a packet at `port`, or drops it if the port's queue is full.
    fn enqueue(&self, port: PortId, rx: &mut RxQueue, t: InTransit) {
        if rx.heap.len() >= self.queue_limit {
            rx.counters.overflows += 1;
            let e = Event {
                at: t.head,
                place: Place::Port(port.0),
                kind: EventKind::Overflow,
                packet: t.id,
            };
            rx.trace.event(&e);
            self.record(e);
            return;
        }
        let n = rx.arrivals;
        rx.arrivals += 1;
        rx.heap.push(Queued(t, n));
    }

    /// The receiving side of `port`, locked, with everything handed over moved in (for
    /// reading its counters and trace, which hand-over completes).
    fn settled_rx(&self, port: usize) -> MutexGuard<'_, RxQueue> {
        let host = &self.hosts[port];
        let mut rx = lock(&host.recv.rx);
        if !host.handover.inbound.is_empty() {
            self.take_inbound(PortId(port as u32), host, &mut rx);
            host.recv.publish(&rx);
        }
        rx
    }

    /// The next packet whose head has reached host port `at` by `now`, after the port's
    /// CRC-8 check (bad ones are dropped and counted here).
    #[inline]
    pub fn receive(&self, now: Time, at: PortId) -> Option<Arrival> {
        // Most polls find nothing: answer those with a few loads, no lock, no call.
        if !self.arrived(now, at) {
            return None;
        }
        self.take_arrived(now, at)
    }

    /// [`Fabric::receive`] once something may have arrived.
    fn take_arrived(&self, now: Time, at: PortId) -> Option<Arrival> {
        let port = self.hosts.get(at.0 as usize)?;
        let host = &port.recv;
        let mut rx = lock(&host.rx);
        // The common case: one packet handed over to an empty port, its head arrived.
        // Sorting it in and taking it out of the heap again would change nothing.
        if rx.heap.is_empty()
            && let Some(t) = port.handover.inbound.pop()
        {
            rx.taken += 1;
            if port.handover.inbound.is_empty() && t.head <= now {
                rx.arrivals += 1;
                if let Some(arrival) = self.hand_out(at, &mut rx, t) {
                    host.publish(&rx);
                    return Some(arrival);
                }
            } else {
                self.enqueue(at, &mut rx, t);
            }
        }
        self.take_inbound(at, port, &mut rx);
        let arrival = loop {
            if rx.heap.peek().is_none_or(|q| q.0.head > now) {
                break None;
            }
            let Some(Queued(t, _)) = rx.heap.pop() else {
                break None;
            };
            if let Some(arrival) = self.hand_out(at, &mut rx, t) {
                break Some(arrival);
            }
        };
        host.publish(&rx);
        arrival
    }

    /// A packet leaves port `at`'s queue: checked for its CRC-8, counted and traced;
    /// returned if good.
    #[inline]
    fn hand_out(&self, at: PortId, rx: &mut RxQueue, t: InTransit) -> Option<Arrival> {
        let ok = t.packet.crc_ok();
        let kind = if ok {
            EventKind::Delivered
        } else {
            EventKind::CrcError
        };
        let e = Event {
            at: t.head,
            place: Place::Port(at.0),
            kind,
            packet: t.id,
        };
        rx.trace.event(&e);
        if ok {
            rx.counters.delivered += 1;
        } else {
            rx.counters.crc_errors += 1;
        }
        if self.recorder.is_some() {
            self.record(e);
        }
        ok.then_some(Arrival {
            packet: t.packet,
            id: t.id,
            head: t.head,
            tail: t.tail,
        })
    }

    /// Whether a packet's head has reached host port `at` by `now` (without taking it: a
    /// couple of loads, no lock).
    #[inline]
    ///
    /// A packet handed over and not yet looked at by the receiving side counts as arrived
    /// whatever its head time: the caller's next [`Fabric::receive`] sorts it in.
    pub fn arrived(&self, now: Time, at: PortId) -> bool {
        self.hosts.get(at.0 as usize).is_some_and(|h| {
            !h.handover.inbound.is_empty()
                || (h.recv.held.load(Ordering::Acquire) != 0
                    && h.recv.next_head.load(Ordering::Acquire) <= now.as_nanos())
        })
    }

    /// When the next packet's head reaches host port `at` (already arrived ones included).
    pub fn next_arrival(&self, at: PortId) -> Option<Time> {
        let port = self.hosts.get(at.0 as usize)?;
        if !port.handover.inbound.is_empty() {
            drop(self.settled_rx(at.0 as usize));
        }
        let head = port.recv.next_head.load(Ordering::Acquire);
        (head != u64::MAX).then_some(Time::from_nanos(head))
    }

    /// How many packets have ever been handed to host port `at` (schedulers use it to
    /// tell new arrivals from ones a node chose to leave waiting). Packets the port then
    /// drops for a full queue are counted too.
    pub fn arrivals(&self, at: PortId) -> u64 {
        self.hosts.get(at.0 as usize).map_or(0, |h| {
            // Taken by the receiving side, then still in the queue: a packet moving from
            // one to the other between the two loads can only make the sum look changed.
            let taken = h.recv.taken.load(Ordering::Acquire);
            taken + h.handover.inbound.len() as u64
        })
    }

    /// Packets waiting at host port `at`.
    pub fn queued(&self, at: PortId) -> usize {
        self.hosts.get(at.0 as usize).map_or(0, |h| {
            h.handover.inbound.len() + h.recv.held.load(Ordering::Acquire) as usize
        })
    }

    /// Whether no packet waits at host port `at` (a few loads, no lock: what a board's
    /// idle poll asks).
    #[inline]
    pub fn is_empty(&self, at: PortId) -> bool {
        self.hosts
            .get(at.0 as usize)
            .is_none_or(|h| !h.has_queued())
    }

    /// Unparks `thread` whenever a packet is queued at `at` (threaded mode).
    pub fn set_waker(&self, at: PortId, thread: Option<std::thread::Thread>) {
        if let Some(host) = self.hosts.get(at.0 as usize) {
            let set = thread.is_some();
            *lock(&host.waker) = thread;
            host.handover.has_waker.store(set, Ordering::Release);
        }
    }

    /// Brings both directions of a cable down or up at `now`.
    pub fn set_cable_up(&self, cable: CableId, up: bool, now: Time) {
        for id in [2 * cable.0, 2 * cable.0 + 1] {
            if let Some(l) = self.links.get(id as usize) {
                lock(l).set_up(up, now, &mut |e| self.record(e));
                self.up[id as usize].store(up, Ordering::Relaxed);
            }
        }
    }

    /// Replaces the faults of one link direction.
    pub fn set_faults(
        &self,
        link: LinkId,
        faults: FaultConfig,
        now: Time,
    ) -> Result<(), fault::BadProbability> {
        faults.validate()?;
        if let Some(l) = self.links.get(link.0 as usize) {
            lock(l).set_faults(faults, now);
        }
        Ok(())
    }

    /// Replaces the faults of every link.
    pub fn set_all_faults(
        &self,
        faults: FaultConfig,
        now: Time,
    ) -> Result<(), fault::BadProbability> {
        faults.validate()?;
        for l in &self.links {
            lock(l).set_faults(faults, now);
        }
        Ok(())
    }

    /// Whether the link leaving host port `at` is up.
    pub fn port_link_up(&self, at: PortId) -> bool {
        let link = self.hosts.get(at.0 as usize).and_then(|h| h.out);
        link.is_some_and(|l| self.up[l.0 as usize].load(Ordering::Relaxed))
    }

    /// The link leaving host port `at`.
    pub fn port_link(&self, at: PortId) -> Option<LinkId> {
        self.hosts.get(at.0 as usize).and_then(|h| h.out)
    }

    /// Counters of one link direction.
    pub fn link_counters(&self, link: LinkId) -> Option<LinkCounters> {
        self.links.get(link.0 as usize).map(|l| lock(l).counters)
    }

    /// Where a link leads.
    pub fn link_end(&self, link: LinkId) -> Option<Endpoint> {
        self.far_end.get(link.0 as usize).copied()
    }

    /// Counters of a host port.
    pub fn port_counters(&self, at: PortId) -> Option<PortCounters> {
        let h = self.hosts.get(at.0 as usize)?;
        let counters = self.settled_rx(at.0 as usize).counters;
        Some(PortCounters {
            sent: h.tx.next_seq.load(Ordering::Relaxed) - counters.unconnected,
            ..counters
        })
    }

    /// Bad routes dropped by a switch.
    pub fn switch_bad_routes(&self, s: SwitchId) -> Option<u64> {
        self.switches.get(s.0 as usize).map(|sw| lock(&sw.state).0)
    }

    /// Totals over the fabric.
    pub fn counters(&self) -> FabricCounters {
        let mut c = FabricCounters::default();
        for l in &self.links {
            let l = lock(l).counters;
            c.link_drops += l.dropped();
            c.corrupted += l.corrupted;
            c.duplicated += l.duplicated;
            c.reordered += l.reordered;
        }
        for s in &self.switches {
            c.bad_routes += lock(&s.state).0;
        }
        for (i, h) in self.hosts.iter().enumerate() {
            let p = self.settled_rx(i).counters;
            c.sent += h.tx.next_seq.load(Ordering::Relaxed) - p.unconnected;
            c.delivered += p.delivered;
            c.crc_errors += p.crc_errors;
            c.overflows += p.overflows;
        }
        c.dropped = c.link_drops + c.bad_routes + c.crc_errors + c.overflows;
        c
    }

    /// One hash of everything that has happened, combined in a fixed order (links, then
    /// switches, then ports).
    pub fn trace_hash(&self) -> u64 {
        let mut h = TraceHash::default();
        for l in &self.links {
            h.write_u64(lock(l).trace.value());
        }
        for s in &self.switches {
            h.write_u64(lock(&s.state).1.value());
        }
        for p in 0..self.hosts.len() {
            h.write_u64(self.settled_rx(p).trace.value());
        }
        h.value()
    }

    /// The recorded events (see [`FabricBuilder::record`]) and how many did not fit.
    pub fn events(&self) -> (Vec<Event>, u64) {
        self.recorder.as_ref().map_or((Vec::new(), 0), |r| {
            let r = lock(r);
            (r.events.clone(), r.lost)
        })
    }
}

impl core::fmt::Debug for Fabric {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Fabric")
            .field("seed", &self.seed)
            .field("ports", &self.hosts.len())
            .field("switches", &self.switches.len())
            .field("cables", &self.cables())
            .finish()
    }
}

#[cfg(test)]
mod tests;
