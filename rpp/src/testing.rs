//! A test harness: two connections joined by two seeded, lossy links, run in virtual
//! time (quinn-proto's `Pair`, with the faults of a real cluster network).
//!
//! Each direction is a [`Link`] that can drop packets (independently, or in bursts by a
//! Gilbert-Elliott model), flip one bit, duplicate, reorder (hold a packet back so later
//! ones overtake it), delay with jitter, serialize at a bandwidth, and refuse packets
//! larger than its MTU. Every decision comes from one seeded generator per link, and every
//! event is folded into a trace hash: the same seed gives the same run, bit for bit.
//!
//! [`Pair::step`] runs everything due at the current instant (deliveries, timers,
//! transmissions, events) and moves time to the next deadline; [`Pair::drive`] steps until
//! both ends are quiet. Tests read like scripts:
//!
//! ```
//! use myri_rpp::testing::{LinkConfig, Pair};
//! use myri_rpp::{Config, Event};
//!
//! let mut pair = Pair::new(Config::default(), LinkConfig { loss: 0.2, ..LinkConfig::default() }, 7);
//! pair.a.send(vec![42; 100_000]).unwrap();
//! pair.drive();
//! assert!(matches!(pair.b_events.pop_front(), Some(Event::Connected { .. })));
//! assert!(matches!(pair.b_events.pop_front(), Some(Event::Message(m)) if m == vec![42; 100_000]));
//! ```
//!
//! A [`Dumbbell`] joins several flows' data through one bottleneck link, whose queue is
//! where their congestion controllers compete (`tests/fairness.rs` uses it).

use crate::{Config, Connection, Event, Instant};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::time::Duration;

/// Bursty loss: a two-state (Gilbert-Elliott) model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BurstLoss {
    /// Probability, per packet, of entering a burst.
    pub enter: f64,
    /// Probability, per packet, of leaving a burst.
    pub exit: f64,
    /// Probability of dropping a packet inside a burst.
    pub loss: f64,
}

/// What one direction of the channel does to packets.
#[derive(Debug, Clone, PartialEq)]
pub struct LinkConfig {
    /// Probability of dropping each packet (independent of the others).
    pub loss: f64,
    /// Bursts of loss on top of `loss`.
    pub burst: Option<BurstLoss>,
    /// Probability of flipping one bit of a packet.
    pub corrupt: f64,
    /// Probability of delivering a packet twice.
    pub duplicate: f64,
    /// Probability of holding a packet back by `reorder_delay`, so later ones overtake it.
    pub reorder: f64,
    /// How long a reordered packet is held back.
    pub reorder_delay: Duration,
    /// One-way propagation delay.
    pub delay: Duration,
    /// Uniform extra delay in `[0, jitter]` per packet.
    pub jitter: Duration,
    /// Bytes per second the link serializes (`None`: unthrottled).
    pub bandwidth: Option<u64>,
    /// The most time of backlog the queue in front of a throttled link holds (a
    /// drop-tail buffer sized in time, as `tc ... tbf latency` sizes it): a packet that
    /// would wait longer is dropped. `None`: unbounded.
    pub queue_limit: Option<Duration>,
    /// Largest packet the link carries; larger ones are dropped and counted.
    pub mtu: usize,
}

impl LinkConfig {
    /// One way of the path `integration/netns/shaped.sh` builds: 20 µs and 1,500-byte
    /// frames, through a drop-tail queue of 10 ms at `rate` bytes per second where one
    /// is given (the bottleneck), at the default's rate with no queue limit where not
    /// (the way back).
    pub fn shaped(rate: Option<u64>) -> LinkConfig {
        let default = LinkConfig::default();
        LinkConfig {
            delay: Duration::from_micros(20),
            bandwidth: rate.or(default.bandwidth),
            queue_limit: rate.map(|_| Duration::from_millis(10)),
            mtu: 1500,
            ..default
        }
    }
}

impl Default for LinkConfig {
    /// A perfect cluster link: 5 µs one way, 1 GB/s, 8 KiB MTU.
    fn default() -> LinkConfig {
        LinkConfig {
            loss: 0.0,
            burst: None,
            corrupt: 0.0,
            duplicate: 0.0,
            reorder: 0.0,
            reorder_delay: Duration::from_micros(20),
            delay: Duration::from_micros(5),
            jitter: Duration::ZERO,
            bandwidth: Some(1_000_000_000),
            queue_limit: None,
            mtu: 8192,
        }
    }
}

/// What a link did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Packets handed to the link.
    pub offered: u64,
    /// Packets that came out (duplicates included).
    pub delivered: u64,
    /// Packets dropped by independent loss.
    pub dropped: u64,
    /// Packets dropped inside a burst.
    pub burst_dropped: u64,
    /// Packets with a bit flipped.
    pub corrupted: u64,
    /// Extra copies made.
    pub duplicated: u64,
    /// Packets held back.
    pub reordered: u64,
    /// Packets larger than the MTU, dropped.
    pub oversize: u64,
    /// Packets dropped because the queue in front of the link was full.
    pub queue_dropped: u64,
}

#[derive(Debug)]
struct Pending {
    at: Instant,
    order: u64,
    /// Whose packet it is, when several flows share the link ([`Dumbbell`]).
    tag: usize,
    bytes: Vec<u8>,
}

impl PartialEq for Pending {
    fn eq(&self, other: &Pending) -> bool {
        (self.at, self.order) == (other.at, other.order)
    }
}
impl Eq for Pending {}
impl PartialOrd for Pending {
    fn partial_cmp(&self, other: &Pending) -> Option<core::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Pending {
    fn cmp(&self, other: &Pending) -> core::cmp::Ordering {
        (self.at, self.order).cmp(&(other.at, other.order))
    }
}

/// One direction of the channel.
#[derive(Debug)]
pub struct Link {
    /// What the link does.
    pub config: LinkConfig,
    /// What it did.
    pub stats: LinkStats,
    rng: ChaCha8Rng,
    queue: BinaryHeap<Reverse<Pending>>,
    order: u64,
    busy_until: Instant,
    in_burst: bool,
    /// Set to false to cut the link: everything offered is dropped (not counted as loss).
    pub up: bool,
    /// Holds everything on the wire until this instant, then lets it out at once (a
    /// receiving host that did not run its driver for a while: the packets wait in its
    /// socket buffer).
    pub hold_until: Option<Instant>,
    trace: u64,
    pool: Vec<Vec<u8>>,
}

fn mix(h: u64, w: u64) -> u64 {
    let h = (h ^ w).wrapping_mul(0x0000_0100_0000_01b3);
    h ^ (h >> 29)
}

impl Link {
    /// A link with its own seed.
    pub fn new(config: LinkConfig, seed: u64) -> Link {
        Link {
            config,
            stats: LinkStats::default(),
            rng: ChaCha8Rng::seed_from_u64(seed),
            queue: BinaryHeap::new(),
            order: 0,
            busy_until: Instant::ZERO,
            in_burst: false,
            up: true,
            hold_until: None,
            trace: 0xcbf2_9ce4_8422_2325,
            pool: Vec::new(),
        }
    }

    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.rng.random::<f64>() < p
    }

    fn push(&mut self, at: Instant, tag: usize, bytes: &[u8]) {
        let mut v = self.pool.pop().unwrap_or_default();
        v.clear();
        v.extend_from_slice(bytes);
        self.order += 1;
        self.trace = mix(mix(self.trace, at.as_nanos()), bytes.len() as u64);
        self.queue.push(Reverse(Pending {
            at,
            order: self.order,
            tag,
            bytes: v,
        }));
    }

    /// Offers a packet at `now`.
    pub fn send(&mut self, now: Instant, packet: &[u8]) {
        self.send_tagged(now, 0, packet);
    }

    /// Offers a packet at `now` on behalf of flow `tag`, which
    /// [`Link::pop_due_tagged`] gives back with it.
    pub fn send_tagged(&mut self, now: Instant, tag: usize, packet: &[u8]) {
        self.stats.offered += 1;
        if !self.up {
            self.trace = mix(self.trace, 1);
            return;
        }
        if packet.len() > self.config.mtu {
            self.stats.oversize += 1;
            self.trace = mix(self.trace, 2);
            return;
        }
        // Serialization: the link sends one packet at a time.
        let start = self.busy_until.max(now);
        let wire = self.config.bandwidth.map_or(Duration::ZERO, |bps| {
            Duration::from_nanos((packet.len() as u64 * 1_000_000_000).div_ceil(bps.max(1)))
        });
        if let Some(limit) = self.config.queue_limit
            && Duration::from_nanos(start.nanos_since(now)) + wire > limit
        {
            self.stats.queue_dropped += 1;
            self.trace = mix(self.trace, 6);
            return;
        }
        self.busy_until = start + wire;
        if let Some(b) = self.config.burst {
            let flip = if self.in_burst { b.exit } else { b.enter };
            if self.chance(flip) {
                self.in_burst = !self.in_burst;
            }
            if self.in_burst && self.chance(b.loss) {
                self.stats.burst_dropped += 1;
                self.trace = mix(self.trace, 3);
                return;
            }
        }
        if self.chance(self.config.loss) {
            self.stats.dropped += 1;
            self.trace = mix(self.trace, 4);
            return;
        }
        let mut at = self.busy_until + self.config.delay;
        if !self.config.jitter.is_zero() {
            at += Duration::from_nanos(
                self.rng
                    .random_range(0..=self.config.jitter.as_nanos() as u64),
            );
        }
        if self.chance(self.config.reorder) {
            self.stats.reordered += 1;
            at += self.config.reorder_delay;
        }
        let copies = if self.chance(self.config.duplicate) {
            self.stats.duplicated += 1;
            2
        } else {
            1
        };
        let flip = if self.chance(self.config.corrupt) {
            self.stats.corrupted += 1;
            Some(self.rng.random_range(0..packet.len().max(1) * 8))
        } else {
            None
        };
        match flip {
            Some(bit) if !packet.is_empty() => {
                let mut bad = packet.to_vec();
                bad[bit / 8] ^= 1 << (bit % 8);
                self.trace = mix(self.trace, 5 + bit as u64);
                for _ in 0..copies {
                    self.push(at, tag, &bad);
                }
            }
            _ => {
                for _ in 0..copies {
                    self.push(at, tag, packet);
                }
            }
        }
    }

    /// When the next packet comes out.
    pub fn next_delivery(&self) -> Option<Instant> {
        let at = self.queue.peek().map(|Reverse(p)| p.at)?;
        Some(self.hold_until.map_or(at, |h| at.max(h)))
    }

    /// The next packet due at `now`, if any.
    pub fn pop_due(&mut self, now: Instant) -> Option<Vec<u8>> {
        self.pop_due_tagged(now).map(|(_, bytes)| bytes)
    }

    /// The next packet due at `now`, if any, with the flow it was sent for.
    pub fn pop_due_tagged(&mut self, now: Instant) -> Option<(usize, Vec<u8>)> {
        if self.next_delivery()? > now {
            return None;
        }
        let Reverse(p) = self.queue.pop()?;
        self.stats.delivered += 1;
        Some((p.tag, p.bytes))
    }

    /// Gives a delivered packet's buffer back.
    pub fn recycle(&mut self, buf: Vec<u8>) {
        if self.pool.len() < 1024 {
            self.pool.push(buf);
        }
    }

    /// Packets on the wire.
    pub fn in_transit(&self) -> usize {
        self.queue.len()
    }

    /// Drops everything on the wire.
    pub fn clear(&mut self) {
        while let Some(Reverse(p)) = self.queue.pop() {
            self.recycle(p.bytes);
        }
    }

    /// A hash of everything the link did.
    pub fn trace_hash(&self) -> u64 {
        self.trace
    }
}

/// Two connections, `a` and `b`, joined by two links, in virtual time.
pub struct Pair {
    /// One end.
    pub a: Connection<Vec<u8>>,
    /// The other end.
    pub b: Connection<Vec<u8>>,
    /// From `a` to `b`.
    pub a_to_b: Link,
    /// From `b` to `a`.
    pub b_to_a: Link,
    /// Events `a` emitted, oldest first.
    pub a_events: VecDeque<Event<Vec<u8>>>,
    /// Events `b` emitted, oldest first.
    pub b_events: VecDeque<Event<Vec<u8>>>,
    /// Whether `a` runs (a dead end neither receives, times out nor sends).
    pub a_alive: bool,
    /// Whether `b` runs.
    pub b_alive: bool,
    /// The virtual clock.
    pub now: Instant,
    /// The connection id both ends use (drawn from the seed).
    pub conn_id: u64,
    ids: ChaCha8Rng,
    buf: Vec<u8>,
}

/// A connection id for scripted tests that build connections by hand.
pub const CONN_ID: u64 = 0x5250_5031_9e37_79b9;

impl Pair {
    /// Two ends with one configuration and the same link both ways; `seed` seeds the
    /// links.
    pub fn new(config: Config, link: LinkConfig, seed: u64) -> Pair {
        Pair::with(config.clone(), config, link.clone(), link, seed)
    }

    /// Two ends and two links, each configured apart. The connection id and both
    /// incarnations are random 64-bit numbers drawn from `seed`, as a real caller draws
    /// them from the operating system.
    pub fn with(a: Config, b: Config, a_to_b: LinkConfig, b_to_a: LinkConfig, seed: u64) -> Pair {
        let mtu = a.mtu.max(b.mtu);
        let mut ids = ChaCha8Rng::seed_from_u64(seed ^ 0x6964_7321);
        let (conn_id, a, b) = two_ends(a, b, &mut ids);
        Pair {
            a,
            b,
            conn_id,
            ids,
            a_to_b: Link::new(a_to_b, seed.wrapping_mul(2).wrapping_add(1)),
            b_to_a: Link::new(b_to_a, seed.wrapping_mul(2).wrapping_add(2)),
            a_events: VecDeque::new(),
            b_events: VecDeque::new(),
            a_alive: true,
            b_alive: true,
            now: Instant::ZERO,
            buf: vec![0; mtu],
        }
    }

    /// Restarts `b` as a new incarnation with `config` (its old state is gone); returns
    /// the new incarnation (random, from the pair's seed).
    pub fn restart_b(&mut self, config: Config) -> u64 {
        let incarnation = random_incarnation(&mut self.ids);
        self.b =
            Connection::new(config, incarnation, self.conn_id, self.now).expect("valid config");
        self.b_events.clear();
        self.b_alive = true;
        incarnation
    }

    fn run_side(
        now: Instant,
        conn: &mut Connection<Vec<u8>>,
        inbound: &mut Link,
        outbound: &mut Link,
        events: &mut VecDeque<Event<Vec<u8>>>,
        buf: &mut [u8],
        alive: bool,
    ) {
        while let Some(p) = inbound.pop_due(now) {
            if alive {
                conn.handle_packet(now, &p);
            }
            inbound.recycle(p);
        }
        if !alive {
            return;
        }
        if conn.poll_timeout().is_some_and(|t| t <= now) {
            conn.handle_timeout(now);
        }
        loop {
            // A driver may stop asking when `may_transmit` says no packet would come.
            let may = conn.may_transmit();
            let Some(n) = conn.poll_transmit(now, buf) else {
                break;
            };
            assert!(may, "a packet came where may_transmit said none would");
            outbound.send(now, &buf[..n]);
        }
        events.extend(std::iter::from_fn(|| conn.poll_event()));
    }

    /// Runs what is due now, then moves the clock to the next deadline. Returns false
    /// when nothing is scheduled at all.
    pub fn step(&mut self) -> bool {
        self.run_now();
        self.advance()
    }

    /// Runs everything due at the current instant: deliveries, timers, transmissions,
    /// events, on both ends.
    pub fn run_now(&mut self) {
        let now = self.now;
        Pair::run_side(
            now,
            &mut self.a,
            &mut self.b_to_a,
            &mut self.a_to_b,
            &mut self.a_events,
            &mut self.buf,
            self.a_alive,
        );
        Pair::run_side(
            now,
            &mut self.b,
            &mut self.a_to_b,
            &mut self.b_to_a,
            &mut self.b_events,
            &mut self.buf,
            self.b_alive,
        );
    }

    /// Moves the clock to the next deadline of either link or either end. Returns false
    /// when nothing is scheduled.
    pub fn advance(&mut self) -> bool {
        let timers = [
            self.a_alive.then(|| self.a.poll_timeout()).flatten(),
            self.b_alive.then(|| self.b.poll_timeout()).flatten(),
        ];
        let next = [self.a_to_b.next_delivery(), self.b_to_a.next_delivery()]
            .into_iter()
            .chain(timers)
            .flatten()
            .min();
        match next {
            Some(t) => {
                self.now = self.now.max(t);
                true
            }
            None => false,
        }
    }

    /// Whether nothing is on the wire and neither end holds a message or has a timer due.
    pub fn is_quiet(&mut self) -> bool {
        let now = self.now;
        let busy = |c: &mut Connection<Vec<u8>>| {
            c.has_pending() || c.poll_timeout().is_some_and(|t| t <= now)
        };
        self.a_to_b.in_transit() == 0
            && self.b_to_a.in_transit() == 0
            && !(self.a_alive && busy(&mut self.a))
            && !(self.b_alive && busy(&mut self.b))
    }

    /// Steps until both ends are quiet (keepalives aside). Panics after ten million
    /// steps: a livelock is a bug.
    #[track_caller]
    pub fn drive(&mut self) {
        self.drive_limit(10_000_000);
    }

    /// [`Pair::drive`] with an explicit step limit.
    #[track_caller]
    pub fn drive_limit(&mut self, limit: u64) {
        for _ in 0..limit {
            self.run_now();
            if self.is_quiet() || !self.advance() {
                return;
            }
        }
        panic!("pair not quiet after {limit} steps at {:?}", self.now);
    }

    /// Steps until virtual time reaches `until` (or nothing is scheduled).
    pub fn run_until(&mut self, until: Instant) {
        step_until(self, until);
    }

    /// A hash of everything both links and both ends did.
    pub fn trace_hash(&self) -> u64 {
        [
            self.a_to_b.trace_hash(),
            self.b_to_a.trace_hash(),
            self.a.trace().hash(),
            self.b.trace().hash(),
        ]
        .into_iter()
        .fold(0xcbf2_9ce4_8422_2325, mix)
    }

    /// `rounds` round trips of a ping-pong, one message in flight at a time: `a` sends
    /// a 4-byte message, `b` answers `pong`, each delivered (and taken) before the next.
    /// Panics if a round does not deliver exactly one message each way.
    #[track_caller]
    pub fn ping_pong(&mut self, rounds: u32) {
        for i in 0..rounds {
            self.a.send(i.to_be_bytes().to_vec()).unwrap();
            self.drive();
            assert_eq!(self.b_messages().len(), 1, "round {i}: the ping");
            self.b.send(b"pong".to_vec()).unwrap();
            self.drive();
            assert_eq!(self.a_messages().len(), 1, "round {i}: the pong");
        }
    }

    /// Messages `b` received so far (taken out of its events; other events stay).
    pub fn b_messages(&mut self) -> Vec<Vec<u8>> {
        take_messages(&mut self.b_events)
    }

    /// Messages `a` received so far.
    pub fn a_messages(&mut self) -> Vec<Vec<u8>> {
        take_messages(&mut self.a_events)
    }
}

/// One flow of a [`Dumbbell`]: `a` sends to `b`.
pub struct Flow {
    /// The sender.
    pub a: Connection<Vec<u8>>,
    /// The receiver.
    pub b: Connection<Vec<u8>>,
    /// The flow's own path back, from `b` to `a` (its data goes through the shared
    /// bottleneck).
    pub back: Link,
    /// Bytes of messages `b` has received.
    pub delivered: u64,
    /// From when `a` always has data to send, in messages of how many bytes (see
    /// [`Dumbbell::bulk`]).
    bulk: Option<(Instant, usize)>,
    /// Buffers `a` handed back, reused for the next bulk message.
    spare: Vec<Vec<u8>>,
}

/// Several flows whose data shares one bottleneck link, in virtual time: the dumbbell
/// on which congestion controllers meet. Flow `i`'s `a` sends to its `b` through
/// [`Dumbbell::bottleneck`], whose queue is where the flows compete; each flow's
/// acknowledgements come back over a link of its own.
///
/// ```
/// use myri_rpp::testing::{Dumbbell, LinkConfig};
/// use myri_rpp::{Config, Instant};
/// use std::time::Duration;
///
/// let mut d = Dumbbell::new(vec![Config::default(); 2], LinkConfig::default(), LinkConfig::default(), 1);
/// d.bulk(0, Instant::ZERO, 65_536);
/// d.bulk(1, Instant::ZERO, 65_536);
/// d.run_until(Instant::ZERO + Duration::from_millis(20));
/// assert!(d.flows.iter().all(|f| f.delivered > 0));
/// ```
pub struct Dumbbell {
    /// The flows.
    pub flows: Vec<Flow>,
    /// The link every flow's data crosses.
    pub bottleneck: Link,
    /// The virtual clock.
    pub now: Instant,
    buf: Vec<u8>,
}

/// How many bytes a bulk sender keeps queued: more than any window it may open.
const BULK_QUEUED: usize = 8 << 20;

impl Dumbbell {
    /// One flow per configuration (the configuration serves both its ends), their data
    /// through one `bottleneck`, each flow's acknowledgements over its own `back` link;
    /// `seed` seeds the links and the flows' connection ids and incarnations.
    pub fn new(
        configs: Vec<Config>,
        bottleneck: LinkConfig,
        back: LinkConfig,
        seed: u64,
    ) -> Dumbbell {
        let mut ids = ChaCha8Rng::seed_from_u64(seed ^ 0x6475_6d62);
        let mtu = configs.iter().map(|c| c.mtu).max().unwrap_or(0);
        let flows = configs
            .into_iter()
            .enumerate()
            .map(|(i, config)| {
                let (_, a, b) = two_ends(config.clone(), config, &mut ids);
                Flow {
                    a,
                    b,
                    back: Link::new(
                        back.clone(),
                        seed.wrapping_mul(31).wrapping_add(i as u64 + 2),
                    ),
                    delivered: 0,
                    bulk: None,
                    spare: Vec::new(),
                }
            })
            .collect();
        Dumbbell {
            flows,
            bottleneck: Link::new(bottleneck, seed.wrapping_mul(31).wrapping_add(1)),
            now: Instant::ZERO,
            buf: vec![0; mtu],
        }
    }

    /// From `start` on, flow `i`'s `a` always has data to send: messages of `len` bytes
    /// are queued as earlier ones are acknowledged, more than any window holds.
    pub fn bulk(&mut self, i: usize, start: Instant, len: usize) {
        self.flows[i].bulk = Some((start, len));
    }

    /// Runs everything due at the current instant on every flow.
    pub fn run_now(&mut self) {
        let now = self.now;
        while let Some((i, p)) = self.bottleneck.pop_due_tagged(now) {
            self.flows[i].b.handle_packet(now, &p);
            self.bottleneck.recycle(p);
        }
        for (i, flow) in self.flows.iter_mut().enumerate() {
            while let Some(p) = flow.back.pop_due(now) {
                flow.a.handle_packet(now, &p);
                flow.back.recycle(p);
            }
            while let Some(e) = flow.a.poll_event() {
                if let Event::Sent { msg, .. } = e {
                    flow.spare.push(msg);
                }
            }
            if let Some((start, len)) = flow.bulk
                && now >= start
            {
                while flow.a.queued_bytes() < BULK_QUEUED {
                    let mut m = flow.spare.pop().unwrap_or_default();
                    m.resize(len, 0x5a);
                    if flow.a.send(m).is_err() {
                        break;
                    }
                }
            }
            // Both ends' packets carry the flow's tag (the return link has no use for it).
            for (conn, out) in [
                (&mut flow.a, &mut self.bottleneck),
                (&mut flow.b, &mut flow.back),
            ] {
                if conn.poll_timeout().is_some_and(|t| t <= now) {
                    conn.handle_timeout(now);
                }
                while let Some(n) = conn.poll_transmit(now, &mut self.buf) {
                    out.send_tagged(now, i, &self.buf[..n]);
                }
            }
            while let Some(e) = flow.b.poll_event() {
                if let Event::Message(m) = e {
                    flow.delivered += m.len() as u64;
                }
            }
        }
    }

    /// Moves the clock to the next deadline of any link, end or bulk start. Returns
    /// false when nothing is scheduled.
    pub fn advance(&mut self) -> bool {
        let now = self.now;
        let next = self
            .flows
            .iter_mut()
            .flat_map(|f| {
                let start = f.bulk.map(|(start, _)| start).filter(|&s| s > now);
                [
                    f.back.next_delivery(),
                    f.a.poll_timeout(),
                    f.b.poll_timeout(),
                    start,
                ]
            })
            .chain([self.bottleneck.next_delivery()])
            .flatten()
            .min();
        match next {
            Some(t) => {
                self.now = self.now.max(t);
                true
            }
            None => false,
        }
    }

    /// Steps until virtual time reaches `until` (or nothing is scheduled).
    pub fn run_until(&mut self, until: Instant) {
        step_until(self, until);
    }
}

/// A simulation in virtual time: [`Pair`] or [`Dumbbell`].
trait Stepped {
    fn clock(&mut self) -> &mut Instant;
    fn run_now(&mut self);
    fn advance(&mut self) -> bool;
}

impl Stepped for Pair {
    fn clock(&mut self) -> &mut Instant {
        &mut self.now
    }
    fn run_now(&mut self) {
        Pair::run_now(self);
    }
    fn advance(&mut self) -> bool {
        Pair::advance(self)
    }
}

impl Stepped for Dumbbell {
    fn clock(&mut self) -> &mut Instant {
        &mut self.now
    }
    fn run_now(&mut self) {
        Dumbbell::run_now(self);
    }
    fn advance(&mut self) -> bool {
        Dumbbell::advance(self)
    }
}

/// Steps `sim` until virtual time reaches `until` (or nothing is scheduled), never past it.
fn step_until(sim: &mut impl Stepped, until: Instant) {
    while *sim.clock() <= until {
        sim.run_now();
        let before = *sim.clock();
        if !sim.advance() || *sim.clock() > until {
            *sim.clock() = until.max(before);
            break;
        }
    }
}

/// The two ends of one connection, `a` and `b`: a random connection id and two random
/// incarnations drawn from `ids`, as a real caller draws them from the operating system.
fn two_ends(
    a: Config,
    b: Config,
    ids: &mut ChaCha8Rng,
) -> (u64, Connection<Vec<u8>>, Connection<Vec<u8>>) {
    let conn_id = ids.random();
    let a_inc = random_incarnation(ids);
    let b_inc = random_incarnation(ids);
    (
        conn_id,
        Connection::new(a, a_inc, conn_id, Instant::ZERO).expect("valid config for a"),
        Connection::new(b, b_inc, conn_id, Instant::ZERO).expect("valid config for b"),
    )
}

/// A random incarnation (never zero).
fn random_incarnation(rng: &mut ChaCha8Rng) -> u64 {
    rng.random::<u64>().max(1)
}

fn take_messages(events: &mut VecDeque<Event<Vec<u8>>>) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    events.retain_mut(|e| match e {
        Event::Message(m) => {
            out.push(core::mem::take(m));
            false
        }
        _ => true,
    });
    out
}
