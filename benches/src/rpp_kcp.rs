//! RPP against the `kcp` crate over the same seeded lossy link, in virtual time.
//!
//! Both protocols run over [`myri_rpp::testing::Link`], one link per direction, built from
//! the same [`LinkConfig`] and the same seeds (`2 * seed + 1` from `a` to `b`, `2 * seed + 2`
//! back, as [`myri_rpp::testing::Pair`] does). The clock is the links' virtual clock, so
//! the figures here (goodput in bytes per virtual second, latency in virtual
//! microseconds) do not depend on the machine; the CPU time a run takes is what criterion
//! measures around it.
//!
//! # Fairness
//!
//! * **Same channel**: loss, delay, bandwidth and MTU are the same for both, and so is each
//!   link's random sequence (the drop pattern differs only as far as the two protocols
//!   offer different packets).
//! * **Same window and MTU**: RPP's `send_window`/`recv_window` and KCP's
//!   `set_wndsize(snd, rcv)` get the same number of packets; both datagrams are at most the
//!   link's MTU (`Config::mtu`, `Kcp::set_mtu`). Both windows count from the oldest
//!   unacknowledged packet.
//! * **KCP in its fast mode**: `set_nodelay(true, 10, 2, true)` — no-delay RTO, the
//!   smallest interval it accepts (10 ticks), fast resend after 2 duplicate acks,
//!   congestion window off (RPP has no congestion control either). This is the "fastest"
//!   configuration of KCP's own documentation.
//! * **KCP's clock at its best tick**: KCP's timers are integers in whatever unit the
//!   caller feeds `update`; its constants (interval at least 10, RTO at least 30, initial
//!   RTO 200) are milliseconds for the Internet. On a cluster link with a 10 µs round trip a
//!   millisecond clock makes every KCP timer a hundred round trips long, and a microsecond
//!   clock makes its initial RTO shorter than the time a full window takes to serialize
//!   (spurious resends with the congestion window off). No single tick is best everywhere,
//!   so every run can use any [`KcpTick`] (1 µs, 10 µs, 100 µs, 1 ms) and the benchmark
//!   compares RPP with the best of them in each cell.
//! * **Driven when it asks, and at once after input**: at every instant either end is
//!   serviced, KCP's `update(now)` runs first (it sets KCP's clock, which it reads for RTT
//!   samples and timestamps, and flushes when its interval is due); after `input` or
//!   `send` KCP is flushed at once (as kcp-go does with no write delay and ack-no-delay),
//!   which is what RPP does by draining `poll_transmit` after `handle_packet` or `send`.
//!   Virtual time then moves to the earliest of the next delivery on either link, RPP's
//!   `poll_timeout()` and KCP's `check()`.
//! * **Each with its own buffer discipline**: RPP keeps the caller's buffer until acked
//!   ([`Chunk`] is a cheap view of one shared source); KCP copies on `send` and on `recv`,
//!   as its API requires.

use kcp::Kcp;
use myri_rpp::testing::{Link, LinkConfig};
use myri_rpp::{Config, Connection, ConnectionError, Event, Instant};
use std::cell::{Cell, RefCell};
use std::io;
use std::rc::Rc;
use std::time::Duration;
use thiserror::Error;

/// The connection id (KCP's `conv`, RPP's connection id) both ends use.
const CONV: u32 = 0x5250_5031;

/// How long one tick of KCP's clock is. KCP's timers are integers in whatever unit the
/// caller feeds `update`; its constants (flush interval at least 10, RTO at least 30,
/// initial RTO 200) were chosen for milliseconds on the Internet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KcpTick {
    /// 1 µs: a 10 µs interval and a 30 µs minimum RTO, the scale of this link.
    Micros1,
    /// 10 µs.
    Micros10,
    /// 100 µs.
    Micros100,
    /// 1 ms: KCP's stock clock.
    Millis1,
}

impl KcpTick {
    /// Every tick, finest first.
    pub const ALL: [KcpTick; 4] = [
        KcpTick::Micros1,
        KcpTick::Micros10,
        KcpTick::Micros100,
        KcpTick::Millis1,
    ];

    /// The tick in nanoseconds.
    pub fn nanos(self) -> u64 {
        match self {
            KcpTick::Micros1 => 1_000,
            KcpTick::Micros10 => 10_000,
            KcpTick::Micros100 => 100_000,
            KcpTick::Millis1 => 1_000_000,
        }
    }
}

/// The protocol a run uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// RPP with [`Config::default`] but the channel's window and MTU.
    Rpp,
    /// KCP in fast mode (`set_nodelay(true, 10, 2, true)`), its clock ticking as given.
    Kcp(KcpTick),
}

impl Protocol {
    /// A short name for tables and benchmark ids.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Rpp => "rpp",
            Protocol::Kcp(KcpTick::Micros1) => "kcp/1us",
            Protocol::Kcp(KcpTick::Micros10) => "kcp/10us",
            Protocol::Kcp(KcpTick::Micros100) => "kcp/100us",
            Protocol::Kcp(KcpTick::Millis1) => "kcp/1ms",
        }
    }
}

/// The channel both protocols run over and the window they get.
#[derive(Debug, Clone)]
pub struct Channel {
    /// What each direction does (both directions alike).
    pub link: LinkConfig,
    /// Packets in flight (RPP's send and receive windows, KCP's `set_wndsize`).
    pub window: u16,
    /// Seeds the two links.
    pub seed: u64,
}

impl Channel {
    /// The default cluster link of the RPP harness (5 µs one way, 1 GB/s, 8 KiB MTU) with
    /// independent loss `loss` each way, and RPP's default window of 256 packets.
    pub fn cluster(loss: f64, seed: u64) -> Channel {
        Channel {
            link: LinkConfig {
                loss,
                ..LinkConfig::default()
            },
            window: 256,
            seed,
        }
    }

    /// The RPP configuration for this channel: the defaults with its window and MTU.
    pub fn rpp_config(&self) -> Config {
        Config::default()
            .with_mtu(self.link.mtu)
            .with_send_window(u32::from(self.window))
            .with_recv_window(u32::from(self.window))
    }
}

/// Why a run did not finish.
#[derive(Debug, Error)]
pub enum SimError {
    /// Nothing left to do, yet the workload is not done.
    #[error("{protocol} stalled at {at:?} with the workload unfinished")]
    Stalled {
        /// The protocol.
        protocol: &'static str,
        /// Virtual time.
        at: Duration,
    },
    /// The virtual time limit passed.
    #[error("{protocol} did not finish within {limit:?} of virtual time")]
    TimedOut {
        /// The protocol.
        protocol: &'static str,
        /// The limit.
        limit: Duration,
    },
    /// The RPP connection failed.
    #[error("rpp connection failed: {0}")]
    Rpp(#[from] ConnectionError),
    /// KCP refused a call.
    #[error("kcp refused a call: {0}")]
    Kcp(#[from] kcp::Error),
    /// A message came out different from what went in.
    #[error("{protocol} delivered message {index} wrong")]
    Corrupted {
        /// The protocol.
        protocol: &'static str,
        /// Which message, counting from zero.
        index: usize,
    },
}

/// A message to send: a range of a shared buffer, so RPP can keep it without a copy.
#[derive(Debug, Clone)]
pub struct Chunk {
    data: Rc<[u8]>,
    start: usize,
    end: usize,
}

impl Chunk {
    /// `data[start..end]`, clamped to `data`.
    pub fn new(data: Rc<[u8]>, start: usize, end: usize) -> Chunk {
        let end = end.min(data.len());
        Chunk {
            start: start.min(end),
            end,
            data,
        }
    }
}

impl AsRef<[u8]> for Chunk {
    fn as_ref(&self) -> &[u8] {
        &self.data[self.start..self.end]
    }
}

/// One end of a connection, as the simulation drives it.
trait Endpoint {
    /// The protocol's name.
    fn name(&self) -> &'static str;
    /// Called first at every instant the end is serviced.
    fn begin(&mut self, now: Instant) -> Result<(), SimError>;
    /// A datagram arrived.
    fn input(&mut self, now: Instant, datagram: &[u8]) -> Result<(), SimError>;
    /// Queues a message; gives it back when the protocol cannot take it now.
    fn send(&mut self, msg: Chunk) -> Result<Result<(), Chunk>, SimError>;
    /// The next delivered message, in order.
    fn recv(&mut self) -> Result<Option<Vec<u8>>, SimError>;
    /// Gives a received message's buffer back.
    fn recycle(&mut self, buf: Vec<u8>);
    /// Runs due timers and puts everything ready on the outbound link.
    fn output(&mut self, now: Instant) -> Result<(), SimError>;
    /// When the end next wants to be serviced without input.
    fn deadline(&mut self) -> Option<Instant>;
}

/// RPP, sending into its outbound link.
struct RppEnd {
    conn: Connection<Chunk>,
    out: Rc<RefCell<Link>>,
    buf: Vec<u8>,
}

impl RppEnd {
    fn new(config: Config, out: Rc<RefCell<Link>>) -> RppEnd {
        let buf = vec![0; config.mtu];
        let conn = Connection::new(config, 1, u64::from(CONV), Instant::ZERO)
            .expect("the channel's rpp config is valid");
        RppEnd { conn, out, buf }
    }
}

impl Endpoint for RppEnd {
    fn name(&self) -> &'static str {
        Protocol::Rpp.name()
    }

    fn begin(&mut self, _now: Instant) -> Result<(), SimError> {
        Ok(())
    }

    fn input(&mut self, now: Instant, datagram: &[u8]) -> Result<(), SimError> {
        self.conn.handle_packet(now, datagram);
        Ok(())
    }

    fn send(&mut self, msg: Chunk) -> Result<Result<(), Chunk>, SimError> {
        Ok(self.conn.send(msg).map(drop).map_err(|e| e.into_inner()))
    }

    fn recv(&mut self) -> Result<Option<Vec<u8>>, SimError> {
        while let Some(event) = self.conn.poll_event() {
            match event {
                Event::Message(m) => return Ok(Some(m)),
                Event::Failed { error, .. } => return Err(error.into()),
                _ => {}
            }
        }
        Ok(None)
    }

    fn recycle(&mut self, buf: Vec<u8>) {
        self.conn.recycle(buf);
    }

    fn output(&mut self, now: Instant) -> Result<(), SimError> {
        if self.conn.poll_timeout().is_some_and(|t| t <= now) {
            self.conn.handle_timeout(now);
        }
        let mut out = self.out.borrow_mut();
        while let Some(n) = self.conn.poll_transmit(now, &mut self.buf) {
            out.send(now, &self.buf[..n]);
        }
        Ok(())
    }

    fn deadline(&mut self) -> Option<Instant> {
        self.conn.poll_timeout()
    }
}

/// KCP's output: every datagram it writes goes on the link at the current instant.
struct LinkWriter {
    link: Rc<RefCell<Link>>,
    now: Rc<Cell<Instant>>,
}

impl io::Write for LinkWriter {
    fn write(&mut self, datagram: &[u8]) -> io::Result<usize> {
        self.link.borrow_mut().send(self.now.get(), datagram);
        Ok(datagram.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// KCP in fast mode, with its clock ticking every `tick_ns`.
struct KcpEnd {
    kcp: Kcp<LinkWriter>,
    now: Rc<Cell<Instant>>,
    tick_ns: u64,
    /// Input or a send since the last flush.
    dirty: bool,
    pool: Vec<Vec<u8>>,
    protocol: Protocol,
}

impl KcpEnd {
    fn new(channel: &Channel, tick: KcpTick, out: Rc<RefCell<Link>>) -> KcpEnd {
        let now = Rc::new(Cell::new(Instant::ZERO));
        let mut kcp = Kcp::new(
            CONV,
            LinkWriter {
                link: out,
                now: now.clone(),
            },
        );
        kcp.set_nodelay(true, 10, 2, true);
        kcp.set_wndsize(channel.window, channel.window);
        kcp.set_mtu(channel.link.mtu)
            .expect("the link's mtu suits kcp");
        KcpEnd {
            kcp,
            now,
            tick_ns: tick.nanos(),
            dirty: false,
            pool: Vec::new(),
            protocol: Protocol::Kcp(tick),
        }
    }

    fn ticks(&self, now: Instant) -> u32 {
        // KCP's clock is a wrapping u32; it compares times by wrapping difference.
        (now.as_nanos() / self.tick_ns) as u32
    }
}

impl Endpoint for KcpEnd {
    fn name(&self) -> &'static str {
        self.protocol.name()
    }

    fn begin(&mut self, now: Instant) -> Result<(), SimError> {
        self.now.set(now);
        self.kcp.update(self.ticks(now))?;
        Ok(())
    }

    fn input(&mut self, _now: Instant, datagram: &[u8]) -> Result<(), SimError> {
        self.kcp.input(datagram)?;
        self.dirty = true;
        Ok(())
    }

    fn send(&mut self, msg: Chunk) -> Result<Result<(), Chunk>, SimError> {
        self.kcp.send(msg.as_ref())?;
        self.dirty = true;
        Ok(Ok(()))
    }

    fn recv(&mut self) -> Result<Option<Vec<u8>>, SimError> {
        let Ok(len) = self.kcp.peeksize() else {
            // Nothing, or a message whose fragments are not all in yet.
            return Ok(None);
        };
        let mut buf = self.pool.pop().unwrap_or_default();
        buf.resize(len, 0);
        let n = self.kcp.recv(&mut buf)?;
        buf.truncate(n);
        Ok(Some(buf))
    }

    fn recycle(&mut self, buf: Vec<u8>) {
        if self.pool.len() < 64 {
            self.pool.push(buf);
        }
    }

    fn output(&mut self, now: Instant) -> Result<(), SimError> {
        // `begin` ran `update`; flush what input and sends produced at once, and any
        // resend that `check` says is due although the flush interval is not.
        if self.dirty || self.kcp.check(self.ticks(now)) == 0 {
            self.kcp.flush()?;
        }
        self.dirty = false;
        Ok(())
    }

    fn deadline(&mut self) -> Option<Instant> {
        let now = self.now.get();
        let t = self.ticks(now);
        // At least one tick ahead: KCP cannot tell time more finely.
        let wait = u64::from(self.kcp.check(t).max(1));
        Some(Instant::from_nanos((u64::from(t) + wait) * self.tick_ns))
    }
}

/// Two ends joined by two links in virtual time.
struct Sim<E> {
    a: E,
    b: E,
    a_to_b: Rc<RefCell<Link>>,
    b_to_a: Rc<RefCell<Link>>,
    now: Instant,
    limit: Instant,
}

/// Virtual time a run may take before it is declared stuck.
const VIRTUAL_LIMIT: Duration = Duration::from_secs(600);

impl<E: Endpoint> Sim<E> {
    fn new(channel: &Channel, make: impl Fn(Rc<RefCell<Link>>) -> E) -> Sim<E> {
        let seed = channel.seed;
        let a_to_b = Rc::new(RefCell::new(Link::new(
            channel.link.clone(),
            seed.wrapping_mul(2).wrapping_add(1),
        )));
        let b_to_a = Rc::new(RefCell::new(Link::new(
            channel.link.clone(),
            seed.wrapping_mul(2).wrapping_add(2),
        )));
        Sim {
            a: make(a_to_b.clone()),
            b: make(b_to_a.clone()),
            a_to_b,
            b_to_a,
            now: Instant::ZERO,
            limit: Instant::ZERO + VIRTUAL_LIMIT,
        }
    }

    /// Services both ends at the current instant: deliveries, then the application,
    /// then timers and transmissions.
    fn run_instant(
        &mut self,
        app_a: &mut impl FnMut(&mut E, Instant) -> Result<(), SimError>,
        app_b: &mut impl FnMut(&mut E, Instant) -> Result<(), SimError>,
    ) -> Result<(), SimError> {
        let now = self.now;
        Sim::service(now, &mut self.a, &self.b_to_a, app_a)?;
        Sim::service(now, &mut self.b, &self.a_to_b, app_b)
    }

    fn service(
        now: Instant,
        end: &mut E,
        inbound: &RefCell<Link>,
        app: &mut impl FnMut(&mut E, Instant) -> Result<(), SimError>,
    ) -> Result<(), SimError> {
        end.begin(now)?;
        loop {
            let Some(datagram) = inbound.borrow_mut().pop_due(now) else {
                break;
            };
            end.input(now, &datagram)?;
            inbound.borrow_mut().recycle(datagram);
        }
        app(end, now)?;
        end.output(now)
    }

    /// Moves the clock to the next delivery or deadline.
    fn advance(&mut self) -> Result<(), SimError> {
        let next = [
            self.a_to_b.borrow().next_delivery(),
            self.b_to_a.borrow().next_delivery(),
            self.a.deadline(),
            self.b.deadline(),
        ]
        .into_iter()
        .flatten()
        .min()
        .ok_or(SimError::Stalled {
            protocol: self.a.name(),
            at: self.now - Instant::ZERO,
        })?;
        // A deadline already passed was just serviced: move on by at least a nanosecond.
        self.now = next.max(self.now + Duration::from_nanos(1));
        if self.now > self.limit {
            return Err(SimError::TimedOut {
                protocol: self.a.name(),
                limit: VIRTUAL_LIMIT,
            });
        }
        Ok(())
    }

    fn packets_offered(&self) -> (u64, u64) {
        (
            self.a_to_b.borrow().stats.offered,
            self.b_to_a.borrow().stats.offered,
        )
    }
}

/// What a bulk transfer measured.
#[derive(Debug, Clone, PartialEq)]
pub struct TransferReport {
    /// The protocol.
    pub protocol: Protocol,
    /// Payload bytes delivered (all of them, checked).
    pub bytes: u64,
    /// Virtual time from the first send to the delivery of the last byte.
    pub virtual_time: Duration,
    /// Datagrams offered to the link from sender to receiver.
    pub packets_forward: u64,
    /// Datagrams offered to the link from receiver to sender (acknowledgements).
    pub packets_back: u64,
}

impl TransferReport {
    /// Goodput: payload bytes per virtual second.
    pub fn goodput(&self) -> f64 {
        self.bytes as f64 / self.virtual_time.as_secs_f64()
    }
}

/// A deterministic byte pattern of `len` bytes to transfer.
pub fn source(len: usize) -> Rc<[u8]> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).rotate_right(13) as u8)
        .collect()
}

/// Sends all of `source` from `a` to `b` as messages of `msg_len` bytes (the last may be
/// shorter), all queued at time zero; checks every message; reports the virtual time
/// until the last byte is delivered.
pub fn transfer(
    protocol: Protocol,
    channel: &Channel,
    source: &Rc<[u8]>,
    msg_len: usize,
) -> Result<TransferReport, SimError> {
    match protocol {
        Protocol::Rpp => {
            let config = channel.rpp_config();
            transfer_with(
                protocol,
                Sim::new(channel, |out| RppEnd::new(config.clone(), out)),
                source,
                msg_len,
            )
        }
        Protocol::Kcp(tick) => transfer_with(
            protocol,
            Sim::new(channel, |out| KcpEnd::new(channel, tick, out)),
            source,
            msg_len,
        ),
    }
}

fn transfer_with<E: Endpoint>(
    protocol: Protocol,
    mut sim: Sim<E>,
    source: &Rc<[u8]>,
    msg_len: usize,
) -> Result<TransferReport, SimError> {
    let msg_len = msg_len.max(1);
    let total = source.len();
    let messages = total.div_ceil(msg_len);
    let chunk = |i: usize| Chunk::new(source.clone(), i * msg_len, (i + 1) * msg_len);
    let mut next_send = 0;
    let mut waiting: Option<Chunk> = None;
    let received = Cell::new(0usize);
    let name = protocol.name();
    let mut sender = |end: &mut E, _now: Instant| -> Result<(), SimError> {
        while let Some(end_msg) = end.recv()? {
            // The receiver sends nothing back but acknowledgements.
            end.recycle(end_msg);
        }
        while next_send < messages {
            let msg = waiting.take().unwrap_or_else(|| chunk(next_send));
            match end.send(msg)? {
                Ok(()) => next_send += 1,
                Err(back) => {
                    waiting = Some(back);
                    break;
                }
            }
        }
        Ok(())
    };
    let mut receiver = |end: &mut E, _now: Instant| -> Result<(), SimError> {
        while let Some(m) = end.recv()? {
            let index = received.get();
            if index >= messages || m.as_slice() != chunk(index).as_ref() {
                return Err(SimError::Corrupted {
                    protocol: name,
                    index,
                });
            }
            received.set(index + 1);
            end.recycle(m);
        }
        Ok(())
    };
    loop {
        sim.run_instant(&mut sender, &mut receiver)?;
        if received.get() == messages {
            break;
        }
        sim.advance()?;
    }
    let (packets_forward, packets_back) = sim.packets_offered();
    Ok(TransferReport {
        protocol,
        bytes: total as u64,
        virtual_time: sim.now - Instant::ZERO,
        packets_forward,
        packets_back,
    })
}

/// What a ping-pong measured.
#[derive(Debug, Clone, PartialEq)]
pub struct PingPongReport {
    /// The protocol.
    pub protocol: Protocol,
    /// Round trips measured (after the warm-up).
    pub exchanges: usize,
    /// Mean virtual round-trip time.
    pub mean: Duration,
    /// Median.
    pub p50: Duration,
    /// 99th percentile.
    pub p99: Duration,
    /// Slowest.
    pub max: Duration,
}

/// `a` sends an 8-byte ping, `b` echoes it, `a` sends the next one when the echo is in;
/// the first `warmup` exchanges (connection set-up, first RTT samples) are not counted,
/// the next `exchanges` are. Latencies are virtual round-trip times.
pub fn pingpong(
    protocol: Protocol,
    channel: &Channel,
    exchanges: usize,
    warmup: usize,
) -> Result<PingPongReport, SimError> {
    match protocol {
        Protocol::Rpp => {
            let config = channel.rpp_config();
            pingpong_with(
                protocol,
                Sim::new(channel, |out| RppEnd::new(config.clone(), out)),
                exchanges,
                warmup,
            )
        }
        Protocol::Kcp(tick) => pingpong_with(
            protocol,
            Sim::new(channel, |out| KcpEnd::new(channel, tick, out)),
            exchanges,
            warmup,
        ),
    }
}

fn ping(i: usize) -> Chunk {
    let bytes: Rc<[u8]> = Rc::from((i as u64).to_le_bytes());
    Chunk::new(bytes, 0, 8)
}

fn pingpong_with<E: Endpoint>(
    protocol: Protocol,
    mut sim: Sim<E>,
    exchanges: usize,
    warmup: usize,
) -> Result<PingPongReport, SimError> {
    let total = exchanges + warmup;
    let name = protocol.name();
    let mut rtts = Vec::with_capacity(exchanges);
    let mut sent = 0usize;
    let mut sent_at = Instant::ZERO;
    let done = Cell::new(0usize);
    let mut pinger = |end: &mut E, now: Instant| -> Result<(), SimError> {
        while let Some(echo) = end.recv()? {
            let index = done.get();
            if echo.as_slice() != ping(index).as_ref() {
                return Err(SimError::Corrupted {
                    protocol: name,
                    index,
                });
            }
            if index >= warmup {
                rtts.push(now - sent_at);
            }
            done.set(index + 1);
            end.recycle(echo);
        }
        if sent == done.get() && sent < total {
            if let Err(_back) = end.send(ping(sent))? {
                return Err(SimError::Stalled {
                    protocol: name,
                    at: now - Instant::ZERO,
                });
            }
            sent += 1;
            sent_at = now;
        }
        Ok(())
    };
    let mut echoer = |end: &mut E, now: Instant| -> Result<(), SimError> {
        while let Some(m) = end.recv()? {
            let len = m.len();
            let back = Chunk::new(Rc::from(m.as_slice()), 0, len);
            end.recycle(m);
            if end.send(back)?.is_err() {
                return Err(SimError::Stalled {
                    protocol: name,
                    at: now - Instant::ZERO,
                });
            }
        }
        Ok(())
    };
    loop {
        sim.run_instant(&mut pinger, &mut echoer)?;
        if done.get() == total {
            break;
        }
        sim.advance()?;
    }
    rtts.sort_unstable();
    let pick = |q: f64| {
        rtts.get(((rtts.len() as f64 * q) as usize).min(rtts.len().saturating_sub(1)))
            .copied()
            .unwrap_or_default()
    };
    let sum: Duration = rtts.iter().sum();
    Ok(PingPongReport {
        protocol,
        exchanges: rtts.len(),
        mean: sum / rtts.len().max(1) as u32,
        p50: pick(0.5),
        p99: pick(0.99),
        max: rtts.last().copied().unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [Protocol; 5] = [
        Protocol::Rpp,
        Protocol::Kcp(KcpTick::Micros1),
        Protocol::Kcp(KcpTick::Micros10),
        Protocol::Kcp(KcpTick::Micros100),
        Protocol::Kcp(KcpTick::Millis1),
    ];

    #[test]
    fn every_protocol_delivers_a_transfer_intact_at_every_loss() {
        let data = source(1 << 20);
        for loss in [0.0, 0.05, 0.2] {
            for protocol in ALL {
                let r = transfer(protocol, &Channel::cluster(loss, 3), &data, 64 << 10)
                    .unwrap_or_else(|e| panic!("{} at {loss}: {e}", protocol.name()));
                assert_eq!(r.bytes, 1 << 20);
                assert!(r.virtual_time > Duration::ZERO);
                // 1 MiB cannot cross a 1 GB/s link faster than the bandwidth allows.
                assert!(r.goodput() < 1.0e9, "{r:?}");
                assert!(r.packets_forward >= (1 << 20) / 8192, "{r:?}");
            }
        }
    }

    #[test]
    fn a_lossless_transfer_runs_near_the_link_rate() {
        let data = source(4 << 20);
        // KCP with a tick coarser than the window's serialization time (2 MiB at 1 GB/s),
        // so its 200-tick initial RTO makes no spurious resends.
        for protocol in [Protocol::Rpp, Protocol::Kcp(KcpTick::Millis1)] {
            let r = transfer(protocol, &Channel::cluster(0.0, 1), &data, 64 << 10).unwrap();
            // Headers take about 1%; the window (2 MiB) covers the bandwidth-delay product.
            assert!(r.goodput() > 0.9e9, "{r:?}");
        }
    }

    #[test]
    fn the_same_seed_gives_the_same_run() {
        let data = source(1 << 20);
        for protocol in ALL {
            let channel = Channel::cluster(0.05, 9);
            let first = transfer(protocol, &channel, &data, 64 << 10).unwrap();
            let second = transfer(protocol, &channel, &data, 64 << 10).unwrap();
            assert_eq!(first, second);
            let p1 = pingpong(protocol, &channel, 200, 5).unwrap();
            let p2 = pingpong(protocol, &channel, 200, 5).unwrap();
            assert_eq!(p1, p2);
        }
    }

    #[test]
    fn a_lossless_pingpong_takes_about_two_link_delays() {
        for protocol in [Protocol::Rpp, Protocol::Kcp(KcpTick::Micros1)] {
            let r = pingpong(protocol, &Channel::cluster(0.0, 1), 500, 10).unwrap();
            assert_eq!(r.exchanges, 500);
            // Two 5 µs hops, plus serialization of ~100-byte packets at 1 GB/s.
            assert!(r.p50 >= Duration::from_micros(10), "{r:?}");
            assert!(r.p50 < Duration::from_micros(12), "{r:?}");
        }
    }

    #[test]
    fn pingpong_survives_heavy_loss() {
        for protocol in ALL {
            let r = pingpong(protocol, &Channel::cluster(0.2, 4), 300, 5)
                .unwrap_or_else(|e| panic!("{}: {e}", protocol.name()));
            assert_eq!(r.exchanges, 300);
            assert!(r.max >= r.p99 && r.p99 >= r.p50, "{r:?}");
        }
    }
}
