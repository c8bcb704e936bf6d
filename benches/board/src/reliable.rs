//! Ping-pong and streaming over reliable `sim://` endpoints: the product path. Two
//! [`Endpoint`]s are opened on a simulated world of their own, each on a board behind the
//! world's switch, and the same programs as [`raw`](super::raw)'s run over them in the
//! same three execution modes and with the same fabric faults:
//!
//! | mode       | world clock         | control programs           | host programs |
//! |------------|---------------------|----------------------------|---------------|
//! | `Inline`   | real                | stepped by `progress`      | A on this thread, B on a worker |
//! | `Threaded` | real                | on threads of their own    | A on this thread, B on a worker |
//! | `Sim`      | driven by the scheduler (virtual, modelled PCI64B and SAN-2000 links) | stepped by `progress` | nodes of the deterministic scheduler |
//!
//! Nothing is lost, so there is no per-exchange timeout (the setup's `timeout` is not
//! used): what the fabric drops RPP retransmits, and the report says how often. A run
//! fails only if a connection fails or a message arrives out of order, twice or changed.
//! At the end both endpoints run until nothing is unacknowledged and nothing has moved for
//! a while, so every packet in flight lands and the accounting balances.

use super::harness::{Accounting, ExecMode, Setup};
use super::report::{PingPongReport, RppReport, StreamReport};
use super::{Reference, median};
use myri_device::fabric::PortId;
use myri_device::run::Clock;
use myri_device::sched::{Node, Outcome, Sim};
use myri_device::time::Time;
use myri_transport::sim::{SimClock, SimWorld, WorldConfig};
use myri_transport::{Buf, Completion, Endpoint, Options, Peer};
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::time::Duration;

/// RPP's settings on the board: a packet is a whole DMA buffer, acknowledgements are
/// coalesced over 16 packets or 100 us, timers start at 100 us (a board's round trip is
/// a few microseconds), and a silent peer fails after 30 retries.
pub fn rpp_config() -> myri_rpp::Config {
    myri_rpp::Config::default()
        .with_ack_every(16)
        .with_ack_delay(Duration::from_micros(100))
        .with_max_queued_messages(56)
        .with_rto_min(Duration::from_micros(100))
        .with_max_retries(30)
}

/// RPP's largest payload in one board packet (a `sim://` datagram): the stream that
/// fills every packet.
pub fn fit_payload() -> usize {
    let mut config = rpp_config();
    config.mtu = myri_mcp::hcb::MAX_PAYLOAD - myri_transport::sim::HEADER_LEN;
    config.max_payload()
}

/// The largest message a reliable board benchmark sends.
pub fn max_message_len() -> usize {
    rpp_config().max_message_len
}

/// How long both ends must be quiet at the end of a run: long enough for any
/// retransmission timer to have fired (virtual time is cheap).
fn final_quiet(mode: ExecMode) -> Duration {
    match mode {
        ExecMode::Sim => Duration::from_millis(20),
        _ => Duration::from_millis(5),
    }
}

/// Quiet between rounds in real time: the delayed acknowledgement of a round's last
/// message goes out before the worker is parked.
const ROUND_QUIET: Duration = Duration::from_micros(300);

/// Most time settling may take.
const GIVE_UP: Duration = Duration::from_secs(5);

static WORLDS: AtomicU64 = AtomicU64::new(0);

/// A world of two endpoints, A (the client) and B (the server), each the other's peer.
struct Two {
    world: Arc<SimWorld>,
    a: Endpoint,
    b: Endpoint,
    to_b: Peer,
    to_a: Peer,
    ports: [PortId; 2],
}

impl Two {
    fn new(setup: &Setup) -> Result<Two, String> {
        let clock = match setup.mode {
            ExecMode::Sim => SimClock::Driven,
            _ => SimClock::Real,
        };
        let config = WorldConfig::default()
            .with_seed(setup.seed)
            .with_faults(setup.faults)
            .with_modelled(setup.mode == ExecMode::Sim)
            .with_clock(clock)
            .with_mcp_threads(setup.mode == ExecMode::Threaded)
            .with_mcp(setup.mcp);
        let name = format!(
            "board-bench-{}-{}",
            std::process::id(),
            WORLDS.fetch_add(1, Ordering::Relaxed)
        );
        let world = Arc::new(SimWorld::create(&name, config).map_err(|e| e.to_string())?);
        // Fixed incarnations: a run in virtual time is a function of its seed alone.
        let open = |end: &str, incarnation| {
            let mut options = Options::default()
                .with_rpp(rpp_config())
                .with_incarnation(incarnation);
            options.integrity = setup.integrity;
            Endpoint::open_with(&format!("sim://{end}?world={name}"), options)
                .map_err(|e| format!("opening sim://{end}: {e}"))
        };
        let (mut a, mut b) = (open("a", 1)?, open("b", 2)?);
        let to_b = a.insert_addr("sim://b").map_err(|e| e.to_string())?;
        let to_a = b.insert_addr("sim://a").map_err(|e| e.to_string())?;
        let port = |n| world.port_of(n).ok_or("a board without a port");
        let ports = [port("a")?, port("b")?];
        Ok(Two {
            world,
            a,
            b,
            to_b,
            to_a,
            ports,
        })
    }

    fn failure(&self) -> Option<String> {
        [(&self.a, self.to_b, "a"), (&self.b, self.to_a, "b")]
            .into_iter()
            .find(|(ep, peer, _)| ep.peer_failed(*peer))
            .map(|(_, _, side)| format!("the connection of endpoint {side} failed"))
    }

    /// Steps both endpoints on this thread until nothing moves and the fabric is empty,
    /// so that the packets still on their way (an acknowledgement sent as a descheduled
    /// peer was last seen idle) land before the books are closed.
    fn drain(&mut self) {
        // In virtual time the scheduler has already run the fabric empty.
        if self.world.config().clock != SimClock::Real {
            return;
        }
        let mut still = 0;
        for _ in 0..1_000_000 {
            let worked = self.a.progress() | self.b.progress();
            still = if worked || self.world.queued() > 0 {
                0
            } else {
                still + 1
            };
            if still >= 1_000 {
                return;
            }
        }
    }

    /// Packet accounting from both endpoints, both boards and the fabric.
    fn accounting(&mut self) -> Accounting {
        self.drain();
        let (sa, sb) = (self.a.stats(), self.b.stats());
        let f = self.world.fabric().counters();
        let mut drops = vec![
            ("link loss", f.link_drops),
            ("crc-8", f.crc_errors),
            ("bad route", f.bad_routes),
            ("port queue full", f.overflows),
            // Corrupted past the link's CRC-8 in the endpoint's own header.
            ("malformed", sa.malformed + sb.malformed),
        ];
        for (name, n) in self.a.board_drops().into_iter().chain(self.b.board_drops()) {
            match drops.iter_mut().find(|(m, _)| *m == name) {
                Some((_, total)) => *total += n,
                None => drops.push((name, n)),
            }
        }
        drops.retain(|&(_, n)| n > 0);
        Accounting {
            sent: sa.datagrams_sent + sb.datagrams_sent,
            received: sa.datagrams_received + sb.datagrams_received,
            dropped: drops.iter().map(|&(_, n)| n).sum(),
            duplicated: f.duplicated,
            drops,
        }
    }

    fn rpp_report(&self) -> Option<RppReport> {
        Some(RppReport {
            client: self.a.peer_stats(self.to_b)?,
            server: self.b.peer_stats(self.to_a)?,
            endpoints: [self.a.stats(), self.b.stats()],
            trace_hashes: [
                self.a.peer_trace_hash(self.to_b)?,
                self.b.peer_trace_hash(self.to_a)?,
            ],
        })
    }
}

/// One side's outcome of a program step.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Step {
    progressed: bool,
    done: bool,
}

/// A host program over one reliable endpoint and its one peer.
trait Program: Send {
    /// Does what can be done; `now` is the endpoint's time.
    fn step(&mut self, ep: &mut Endpoint, peer: Peer, now: Time) -> Step;
}

fn word(bytes: &[u8], i: usize) -> Option<u64> {
    bytes
        .get(8 * i..8 * i + 8)
        .map(|b| u64::from_be_bytes(b.try_into().expect("8 bytes")))
}

/// Takes back every completed send's buffer and notes failures.
fn completions(ep: &mut Endpoint, spare: &mut Vec<Buf>) -> bool {
    let mut any = false;
    while let Some(c) = ep.poll_completion() {
        any = true;
        reclaim(spare, c);
    }
    any
}

/// Keeps a completed send's buffer for the next message when it is registered memory
/// (no allocation on the path, and the board sends from it without a copy). A heap
/// buffer, handed out while every registered one was taken, is let go: kept, it would
/// cost a copy at every send it carried from then on, while the next allocation may get
/// registered memory again.
fn reclaim(spare: &mut Vec<Buf>, c: Completion) {
    if let Completion::Sent { buf, .. } = c
        && buf.is_registered()
    {
        spare.push(buf);
    }
}

/// A buffer of `len` bytes: a spare one of that length, else one that a send completed
/// since the last look gave back (sending runs RPP, which takes acknowledgements as it
/// goes), else a new one.
fn buffer(ep: &mut Endpoint, spare: &mut Vec<Buf>, len: usize) -> Buf {
    let take = |spare: &mut Vec<Buf>| {
        let i = spare.iter().position(|b| b.len() == len)?;
        Some(spare.swap_remove(i))
    };
    if let Some(b) = take(spare) {
        return b;
    }
    // Only what is already waiting: no progress pass.
    while ep.pending_completions() > 0
        && let Some(c) = ep.poll_completion()
    {
        reclaim(spare, c);
    }
    take(spare).unwrap_or_else(|| ep.alloc(len))
}

/// Sends a message and waits for it to come back, `iters` times; the first 8 bytes are
/// its sequence number, and an answer that is not the one awaited is counted.
struct Pinger {
    size: usize,
    iters: u64,
    done: u64,
    rtts: Vec<Duration>,
    mismatched: u64,
    clock: Option<Clock>,
    waiting: Option<(u64, Time)>,
    spare: Vec<Buf>,
}

impl Pinger {
    fn new(size: usize, clock: Option<Clock>) -> Pinger {
        Pinger {
            size: size.max(8),
            iters: 0,
            done: 0,
            rtts: Vec::new(),
            mismatched: 0,
            clock,
            waiting: None,
            spare: Vec::new(),
        }
    }
}

impl Program for Pinger {
    fn step(&mut self, ep: &mut Endpoint, peer: Peer, now: Time) -> Step {
        let mut progressed = completions(ep, &mut self.spare);
        // One message a turn (`recv` progresses the endpoint when none waits), so that
        // the next ping goes as soon as the answer is in; the answer's receive buffer
        // goes back to the board after that.
        let answer = ep.recv();
        if let Some(d) = &answer {
            progressed = true;
            match (self.waiting, word(&d.data, 0)) {
                (Some((seq, sent_at)), Some(got)) if got == seq && d.data.len() == self.size => {
                    let at = self.clock.map_or(now, |c| c.now());
                    self.rtts.push(at.saturating_since(sent_at));
                    self.waiting = None;
                    self.done += 1;
                }
                _ => self.mismatched += 1,
            }
        }
        if self.waiting.is_none() && self.done < self.iters {
            let seq = self.done;
            let mut b = buffer(ep, &mut self.spare, self.size);
            b[..8].copy_from_slice(&seq.to_be_bytes());
            let at = self.clock.map_or(now, |c| c.now());
            match ep.send(peer, b) {
                Ok(_) => {
                    self.waiting = Some((seq, at));
                    progressed = true;
                }
                Err(e) => self.spare.push(e.buf),
            }
        }
        drop(answer);
        Step {
            progressed,
            done: self.done >= self.iters,
        }
    }
}

/// Sends every message it receives straight back, copied into a buffer of the endpoint's
/// (`alloc`: a short message is held in the buffer itself); the receive buffer goes back
/// to the board once the answer is on its way.
#[derive(Default)]
struct Echo {
    received: u64,
    sent: u64,
    backlog: VecDeque<Buf>,
}

impl Program for Echo {
    fn step(&mut self, ep: &mut Endpoint, peer: Peer, _now: Time) -> Step {
        let mut progressed = false;
        while ep.poll_completion().is_some() {
            progressed = true;
        }
        while let Some(b) = self.backlog.pop_front() {
            match ep.send(peer, b) {
                Ok(_) => self.sent += 1,
                Err(e) => {
                    self.backlog.push_front(e.buf);
                    break;
                }
            }
        }
        if let Some(d) = ep.recv() {
            progressed = true;
            self.received += 1;
            let mut b = ep.alloc(d.data.len());
            b.copy_from_slice(&d.data);
            if self.backlog.is_empty() {
                match ep.send(peer, b) {
                    Ok(_) => self.sent += 1,
                    Err(e) => self.backlog.push_back(e.buf),
                }
            } else {
                self.backlog.push_back(b);
            }
            // The receive buffer goes back to the board once the answer is on its way.
            drop(d);
        }
        Step {
            progressed,
            done: false,
        }
    }
}

/// Bytes of a stream message's header: sequence number, messages in the stream, round.
pub const STREAM_HEADER: usize = 24;
/// The sequence number of a stream's acknowledgement.
const ACK: u64 = u64::MAX;

/// Seed 000's pipelining test, sending side: `count` messages as fast as the endpoint
/// takes them, then waits for the sink's one acknowledgement.
struct StreamSender {
    size: usize,
    count: u64,
    round: u64,
    queued: u64,
    started: Option<Time>,
    acked: Option<Time>,
    sink_count: u64,
    clock: Option<Clock>,
    spare: Vec<Buf>,
}

impl StreamSender {
    fn new(size: usize, count: u64, clock: Option<Clock>) -> StreamSender {
        StreamSender {
            size: size.max(STREAM_HEADER),
            count,
            round: 0,
            queued: 0,
            started: None,
            acked: None,
            sink_count: 0,
            clock,
            spare: Vec::new(),
        }
    }

    /// Ready for stream `round`.
    fn restart(&mut self, round: u64) {
        self.round = round;
        self.queued = 0;
        self.started = None;
        self.acked = None;
        self.sink_count = 0;
    }

    fn totals(&self) -> RoundTotals {
        let time = self
            .started
            .zip(self.acked)
            .map_or(Duration::ZERO, |(a, b)| b.saturating_since(a));
        let secs = time.as_secs_f64();
        RoundTotals {
            rate: (secs > 0.0).then(|| (self.count * self.size as u64) as f64 / secs / 1e6),
            time,
            sink_count: self.sink_count,
        }
    }
}

impl Program for StreamSender {
    fn step(&mut self, ep: &mut Endpoint, peer: Peer, now: Time) -> Step {
        let mut progressed = completions(ep, &mut self.spare);
        while let Some(d) = ep.recv() {
            progressed = true;
            let b = &d.data;
            if word(b, 0) == Some(ACK) && word(b, 2) == Some(self.round) && self.acked.is_none() {
                self.acked = Some(self.clock.map_or(now, |c| c.now()));
                self.sink_count = word(b, 1).unwrap_or(0);
            }
        }
        // A message the endpoint would refuse (its queue full) is not written: its buffer
        // would be taken from the few the board keeps for packets RPP copies.
        while self.acked.is_none()
            && self.queued < self.count
            && ep.can_send_messages(peer, 1, self.size)
        {
            if self.started.is_none() {
                self.started = Some(self.clock.map_or(now, |c| c.now()));
            }
            let mut b = buffer(ep, &mut self.spare, self.size);
            b[..8].copy_from_slice(&self.queued.to_be_bytes());
            b[8..16].copy_from_slice(&self.count.to_be_bytes());
            b[16..24].copy_from_slice(&self.round.to_be_bytes());
            if let Err(e) = ep.send(peer, b) {
                self.spare.push(e.buf);
                break;
            }
            self.queued += 1;
            progressed = true;
        }
        Step {
            progressed,
            done: self.acked.is_some(),
        }
    }
}

/// Seed 000's pipelining test, receiving side, for any number of streams in turn: checks
/// each message is the next of its stream and acknowledges a stream when its last
/// message arrives.
#[derive(Default)]
struct StreamSink {
    round: u64,
    received: u64,
    delivered: u64,
    out_of_order: u64,
    pending_ack: Option<(u64, u64)>,
}

impl Program for StreamSink {
    fn step(&mut self, ep: &mut Endpoint, peer: Peer, _now: Time) -> Step {
        let mut progressed = false;
        while ep.poll_completion().is_some() {
            progressed = true;
        }
        while let Some(d) = ep.recv() {
            progressed = true;
            let b = &d.data;
            match (word(b, 0), word(b, 1), word(b, 2)) {
                (Some(seq), Some(count), Some(round))
                    if round == self.round && seq == self.received =>
                {
                    self.received += 1;
                    self.delivered += 1;
                    if self.received >= count {
                        self.pending_ack = Some((count, round));
                        self.round += 1;
                        self.received = 0;
                    }
                }
                _ => self.out_of_order += 1,
            }
        }
        if let Some((count, round)) = self.pending_ack {
            let mut b = ep.alloc(STREAM_HEADER);
            b[..8].copy_from_slice(&ACK.to_be_bytes());
            b[8..16].copy_from_slice(&count.to_be_bytes());
            b[16..24].copy_from_slice(&round.to_be_bytes());
            if ep.send(peer, b).is_ok() {
                self.pending_ack = None;
                progressed = true;
            }
        }
        Step {
            progressed,
            done: false,
        }
    }
}

// ---- Drivers ---------------------------------------------------------------------------

/// One turn of a host thread: the program, whose `recv` calls progress the endpoint when
/// nothing waits. The programs of the real-time modes time themselves with their own
/// clock or not at all, so no time is read for them.
fn turn(ep: &mut Endpoint, peer: Peer, program: &mut impl Program) -> Step {
    program.step(ep, peer, Time::ZERO)
}

/// Steps `program` on this thread until it is done.
fn drive(ep: &mut Endpoint, peer: Peer, program: &mut impl Program, threaded: bool) {
    loop {
        let step = turn(ep, peer, program);
        if step.done {
            return;
        }
        if threaded && !step.progressed {
            // Four busy threads on two cores: let the control programs run.
            std::thread::yield_now();
        }
    }
}

/// Runs `program` on this thread until nothing is unacknowledged at either end
/// (`peer_idle` says so of the other) and nothing has moved for `quiet`. Returns whether
/// it got there before [`GIVE_UP`] and the messages delivered meanwhile.
fn settle(
    ep: &mut Endpoint,
    peer: Peer,
    program: &mut impl Program,
    peer_idle: &AtomicBool,
    quiet: Duration,
) -> bool {
    let start = Time::from_nanos(ep.now_nanos());
    let mut since = start;
    loop {
        let step = turn(ep, peer, program);
        let now = Time::from_nanos(ep.now_nanos());
        if step.progressed || ep.has_unacked() || !peer_idle.load(Ordering::Acquire) {
            since = now;
        }
        if now.saturating_since(since) >= quiet {
            return true;
        }
        if now.saturating_since(start) >= GIVE_UP || ep.peer_failed(peer) {
            return false;
        }
    }
}

const RUN: u8 = 0;
const PAUSE: u8 = 1;
const STOP: u8 = 2;

/// Runs `body` on this thread with endpoint A while a worker thread steps `server` on
/// endpoint B whenever `body` sets it to `RUN`; the worker publishes whether B has
/// anything unacknowledged. Returns `body`'s result and the server.
fn with_server<S: Program, R>(
    two: &mut Two,
    threaded: bool,
    mut server: S,
    body: impl FnOnce(&mut Endpoint, Peer, &AtomicBool, &dyn Fn(u8)) -> R,
) -> (R, S) {
    let control = AtomicU8::new(PAUSE);
    let seen = AtomicU8::new(PAUSE);
    let b_idle = AtomicBool::new(true);
    let (a, b, to_b, to_a) = (&mut two.a, &mut two.b, two.to_b, two.to_a);
    std::thread::scope(|s| {
        let (control_ref, seen_ref, idle_ref) = (&control, &seen, &b_idle);
        let worker = s.spawn(move || {
            loop {
                let state = control_ref.load(Ordering::Acquire);
                seen_ref.store(state, Ordering::Release);
                match state {
                    STOP => break,
                    PAUSE => std::thread::park_timeout(Duration::from_millis(5)),
                    _ => {
                        let step = turn(b, to_a, &mut server);
                        idle_ref.store(!step.progressed && !b.has_unacked(), Ordering::Release);
                        if threaded && !step.progressed {
                            std::thread::yield_now();
                        }
                    }
                }
            }
            server
        });
        let worker_thread = worker.thread().clone();
        let set = |state: u8| {
            control.store(state, Ordering::Release);
            worker_thread.unpark();
            if state == RUN {
                // A round starts only once the worker runs it; a worker that panicked
                // raises its panic when joined below.
                while seen.load(Ordering::Acquire) != RUN && !worker.is_finished() {
                    std::thread::yield_now();
                }
            }
        };
        let r = body(a, to_b, &b_idle, &set);
        set(STOP);
        let server = match worker.join() {
            Ok(s) => s,
            Err(panic) => std::panic::resume_unwind(panic),
        };
        (r, server)
    })
}

/// An endpoint and its program as a node of the deterministic scheduler.
struct SimNode<P> {
    ep: Endpoint,
    peer: Peer,
    program: P,
    world: Arc<SimWorld>,
    port: PortId,
    /// A server runs as long as the client needs it and never holds the run up.
    server: bool,
    done: bool,
}

impl<P: Program> Node for SimNode<P> {
    fn poll(&mut self, now: Time) -> Option<Time> {
        self.world.set_now(now.as_nanos());
        for _ in 0..10_000 {
            let worked = self.ep.progress();
            let step = if self.done && !self.server {
                Step::default()
            } else {
                self.program.step(&mut self.ep, self.peer, now)
            };
            self.done |= step.done;
            if !worked && !step.progressed {
                break;
            }
        }
        let wake = self.ep.next_timeout()?;
        Some(now + wake.max(Duration::from_nanos(1)))
    }

    fn port(&self) -> Option<PortId> {
        Some(self.port)
    }

    fn is_done(&self) -> bool {
        self.done || self.server
    }
}

/// Both endpoints under the scheduler, from the world's virtual time: the client until
/// its program is done (or `limit` passes), then both until nothing is unacknowledged
/// and the fabric is empty, for at most [`GIVE_UP`] more. Returns the pair, both
/// programs, and whether the run settled.
fn run_sim<C: Program + 'static, S: Program + 'static>(
    two: Two,
    client: C,
    server: S,
    limit: Duration,
) -> Result<(Two, C, S, bool), String> {
    let Two {
        world,
        a,
        b,
        to_b,
        to_a,
        ports,
    } = two;
    let start = Time::from_nanos(world.now());
    let mut sim: Sim<Box<dyn SimNodeDyn>> = Sim::starting_at(world.fabric().clone(), start);
    sim.add(Box::new(SimNode {
        ep: a,
        peer: to_b,
        program: client,
        world: world.clone(),
        port: ports[0],
        server: false,
        done: false,
    }));
    sim.add(Box::new(SimNode {
        ep: b,
        peer: to_a,
        program: server,
        world: world.clone(),
        port: ports[1],
        server: true,
        done: false,
    }));
    let outcome = sim.run_until_done(start + limit);
    // Settle in short slices until neither end has anything unacknowledged and the
    // fabric is empty, then stay quiet a while so late retransmissions land.
    let settle_start = sim.now();
    let busy =
        |sim: &Sim<Box<dyn SimNodeDyn>>| sim.nodes().iter().any(|n| n.busy()) || world.queued() > 0;
    let mut settled = false;
    while outcome == Outcome::Done && sim.now().saturating_since(settle_start) < GIVE_UP {
        sim.run_until(sim.now() + Duration::from_millis(1));
        if !busy(&sim) {
            sim.run_until(sim.now() + final_quiet(ExecMode::Sim));
            settled = !busy(&sim);
            break;
        }
    }
    world.set_now(sim.now().as_nanos());
    let mut nodes = sim.into_nodes().into_iter();
    let na = nodes.next().ok_or("node a")?.into_any();
    let nb = nodes.next().ok_or("node b")?.into_any();
    let na = *na.downcast::<SimNode<C>>().map_err(|_| "node a type")?;
    let nb = *nb.downcast::<SimNode<S>>().map_err(|_| "node b type")?;
    if outcome != Outcome::Done {
        return Err(format!(
            "the simulated run ended {outcome:?} before finishing"
        ));
    }
    let two = Two {
        world,
        a: na.ep,
        b: nb.ep,
        to_b,
        to_a,
        ports,
    };
    Ok((two, na.program, nb.program, settled))
}

/// Object-safe face of a [`SimNode`], so two node types share one scheduler.
trait SimNodeDyn: Node {
    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any>;
    fn busy(&self) -> bool;
}

impl<P: Program + 'static> SimNodeDyn for SimNode<P> {
    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any> {
        self
    }
    fn busy(&self) -> bool {
        self.ep.has_unacked()
    }
}

impl Node for Box<dyn SimNodeDyn> {
    fn poll(&mut self, now: Time) -> Option<Time> {
        (**self).poll(now)
    }
    fn port(&self) -> Option<PortId> {
        (**self).port()
    }
    fn is_done(&self) -> bool {
        (**self).is_done()
    }
}

// ---- The benchmarks --------------------------------------------------------------------

fn check_settled(two: &Two, settled: bool) -> Result<(), String> {
    if let Some(f) = two.failure() {
        return Err(f);
    }
    if !settled {
        return Err(format!(
            "the endpoints did not go quiet within {} s after the run",
            GIVE_UP.as_secs()
        ));
    }
    Ok(())
}

/// Ping-pong of `iters` messages of `size` bytes over reliable `sim://` endpoints. With
/// a reference, alternates stack and reference rounds (not in sim mode).
pub fn pingpong(
    setup: &Setup,
    size: usize,
    iters: u64,
    mut reference: Option<&mut dyn Reference>,
) -> Result<PingPongReport, String> {
    let mut two = Two::new(setup)?;
    let mode = setup.mode;
    let quiet = final_quiet(mode);
    let (pinger, echo, settled, base) = if mode == ExecMode::Sim {
        let mut pinger = Pinger::new(size, None);
        pinger.iters = iters;
        let limit = Duration::from_secs(10) + Duration::from_millis(iters);
        let (t, p, e, settled) = run_sim(two, pinger, Echo::default(), limit)?;
        two = t;
        (p, e, settled, None)
    } else {
        let threaded = mode == ExecMode::Threaded;
        let rounds = (iters / 200).clamp(1, 50);
        let mut baseline_rtts = Vec::new();
        let ((pinger, settled), echo) = with_server(
            &mut two,
            threaded,
            Echo::default(),
            |ep, peer, b_idle, set| {
                let mut pinger = Pinger::new(size, Some(Clock::new()));
                for r in 0..rounds {
                    let chunk = iters / rounds + u64::from(r < iters % rounds);
                    set(RUN);
                    pinger.iters += chunk;
                    drive(ep, peer, &mut pinger, threaded);
                    settle(ep, peer, &mut pinger, b_idle, ROUND_QUIET);
                    set(PAUSE);
                    if ep.peer_failed(peer) {
                        break;
                    }
                    if let Some(reference) = reference.as_deref_mut() {
                        baseline_rtts.extend(reference.pingpong_round(size, chunk));
                    }
                }
                set(RUN);
                let settled = settle(ep, peer, &mut pinger, b_idle, quiet);
                set(PAUSE);
                (pinger, settled)
            },
        );
        let base = (!baseline_rtts.is_empty()).then(|| {
            median(
                baseline_rtts
                    .iter()
                    .map(|d| d.as_secs_f64() * 1e6 / 2.0)
                    .collect(),
            )
        });
        (pinger, echo, settled, base)
    };
    check_settled(&two, settled)?;
    let p = &pinger;
    if p.mismatched > 0 || p.done != iters || echo.received != iters || echo.sent != iters {
        return Err(format!(
            "rpp broke its promise: {} exchanges of {iters} done, {} answers not the one awaited, \
             the echo received {} and sent {}",
            p.done, p.mismatched, echo.received, echo.sent
        ));
    }
    let one_way = median(p.rtts.iter().map(|d| d.as_secs_f64() * 1e6 / 2.0).collect());
    Ok(PingPongReport {
        size,
        iters,
        one_way_us: one_way,
        mb_per_s: if one_way > 0.0 {
            size as f64 / (2.0 * one_way)
        } else {
            0.0
        },
        timeouts: 0,
        accounting: two.accounting(),
        baseline_one_way_us: base,
        total_rtt: p.rtts.iter().sum(),
        rpp: two.rpp_report(),
    })
}

/// What the report needs of a finished stream.
struct RoundTotals {
    rate: Option<f64>,
    time: Duration,
    sink_count: u64,
}

/// Seed 000's pipelining test over reliable `sim://` endpoints, `rounds` times: `count`
/// messages of `size` bytes, and one acknowledgement (a message too) at the end. RPP's
/// window and the receiver's credit pace the stream; `window` is reported only. With a
/// reference, alternates stack and reference rounds (not in sim mode).
pub fn stream(
    setup: &Setup,
    size: usize,
    count: u64,
    window: usize,
    rounds: u32,
    mut reference: Option<&mut dyn Reference>,
) -> Result<StreamReport, String> {
    let mut two = Two::new(setup)?;
    let rounds = u64::from(rounds.max(1));
    let mode = setup.mode;
    let quiet = final_quiet(mode);
    let mut totals = Vec::new();
    let mut base_rates = Vec::new();
    let (sink, settled) = if mode == ExecMode::Sim {
        let limit = Duration::from_secs(10) + Duration::from_millis(count);
        let mut sender = StreamSender::new(size, count, None);
        let mut sink = StreamSink::default();
        let mut settled = false;
        for round in 0..rounds {
            sender.restart(round);
            let (t, s, k, ok) = run_sim(two, sender, sink, limit)?;
            totals.push(s.totals());
            (two, sender, sink, settled) = (t, s, k, ok);
            if two.failure().is_some() {
                break;
            }
        }
        (sink, settled)
    } else {
        let threaded = mode == ExecMode::Threaded;
        let (settled, sink) = with_server(
            &mut two,
            threaded,
            StreamSink::default(),
            |ep, peer, b_idle, set| {
                let mut sender = StreamSender::new(size, count, Some(Clock::new()));
                for round in 0..rounds {
                    sender.restart(round);
                    set(RUN);
                    drive(ep, peer, &mut sender, threaded);
                    settle(ep, peer, &mut sender, b_idle, ROUND_QUIET);
                    set(PAUSE);
                    totals.push(sender.totals());
                    if ep.peer_failed(peer) {
                        break;
                    }
                    if let Some(reference) = reference.as_deref_mut() {
                        base_rates.push(reference.stream_round(size, count, window) / 1e6);
                    }
                }
                set(RUN);
                let settled = settle(ep, peer, &mut sender, b_idle, quiet);
                set(PAUSE);
                settled
            },
        );
        (sink, settled)
    };
    check_settled(&two, settled)?;
    let short = totals.iter().filter(|t| t.sink_count != count).count();
    if sink.out_of_order > 0 || short > 0 || sink.delivered != count * rounds {
        return Err(format!(
            "rpp broke its promise: the sink got {} messages of {}, {} out of order; {short} \
             streams acknowledged short",
            sink.delivered,
            count * rounds,
            sink.out_of_order
        ));
    }
    let rates: Vec<f64> = totals.iter().filter_map(|t| t.rate).collect();
    Ok(StreamReport {
        size,
        count,
        window,
        mb_per_s: median(rates),
        timeouts: 0,
        // Every message: the run fails above unless the sink got them all.
        sent: count * rounds,
        delivered: sink.delivered,
        accounting: two.accounting(),
        baseline_mb_per_s: (!base_rates.is_empty()).then(|| median(base_rates)),
        total_time: totals.iter().map(|t| t.time).sum(),
        rpp: two.rpp_report(),
    })
}
