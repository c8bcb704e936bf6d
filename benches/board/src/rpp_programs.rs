//! The seed's benchmarks as host programs over RPP ([`BoardConnection`]): the same
//! ping-pong and stream as [`programs`](super::programs), but nothing is lost, so there
//! is no per-exchange timeout; what the channel loses RPP retransmits, and every program
//! checks that messages arrive exactly once and in order.

use super::programs::{Program, Step};
use super::rpp_link::BoardConnection;
use myri_device::run::Clock;
use myri_device::time::Time;
use myri_mcp::Api;
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// A program built on one RPP connection.
pub trait OverRpp: Program {
    /// Its connection.
    fn link(&mut self) -> &mut BoardConnection;
}

fn word(bytes: &[u8], i: usize) -> Option<u64> {
    bytes
        .get(8 * i..8 * i + 8)
        .map(|b| u64::from_be_bytes(b.try_into().expect("8 bytes")))
}

fn wake_at(link: &mut BoardConnection, also: Option<Time>) -> Option<Time> {
    [link.next_wake(), also].into_iter().flatten().min()
}

/// Sends a message and waits for it to come back, `iters` times. The first 8 bytes of
/// each message are its sequence number; an answer that is not the one awaited would be
/// a broken promise of RPP's and is counted.
pub struct RppPinger {
    /// The connection.
    pub link: BoardConnection,
    /// Message size (at least 8).
    pub size: usize,
    /// Exchanges to make.
    pub iters: u64,
    /// Exchanges made.
    pub done: u64,
    /// Round-trip times, send to delivery of the answer.
    pub rtts: Vec<Duration>,
    /// Answers that were not the awaited one (wrong sequence number or length).
    pub mismatched: u64,
    /// The real clock round trips are timed with (inline and threaded runs), as the raw
    /// [`Pinger`](super::programs::Pinger) times them: read right before each send and
    /// right after its answer is delivered. Without one (virtual time) the step's `now`
    /// is used.
    pub clock: Option<Clock>,
    waiting: Option<(u64, Time)>,
}

impl RppPinger {
    /// A pinger that has done nothing yet.
    pub fn new(link: BoardConnection, size: usize, iters: u64) -> RppPinger {
        RppPinger {
            link,
            size: size.max(8),
            iters,
            done: 0,
            rtts: Vec::with_capacity(iters as usize),
            mismatched: 0,
            clock: None,
            waiting: None,
        }
    }

    /// Runs at `now`.
    pub fn step(&mut self, api: &mut Api, now: Time) -> Step {
        let mut progressed = false;
        while let Some(d) = self.link.recv(api, now) {
            progressed = true;
            match (self.waiting, word(d.bytes(), 0)) {
                (Some((seq, sent_at)), Some(got)) if got == seq && d.len() == self.size => {
                    let at = self.clock.map_or(now, |c| c.now());
                    self.rtts.push(at.saturating_since(sent_at));
                    self.waiting = None;
                    self.done += 1;
                }
                _ => self.mismatched += 1,
            }
            self.link.recycle(d);
        }
        if self.waiting.is_none() && self.done < self.iters {
            let seq = self.done;
            let at = self.clock.map_or(now, |c| c.now());
            if self.link.send_with(api, self.size, |b| {
                b[..8].copy_from_slice(&seq.to_be_bytes())
            }) {
                self.waiting = Some((seq, at));
                // The message to the board first; the rest of RPP's work in the next step.
                if self.link.transmit_first(api, now) {
                    return Step {
                        progressed: true,
                        ..Step::default()
                    };
                }
                progressed = true;
            }
        }
        progressed |= self.link.transmit(api, now);
        Step {
            progressed,
            done: self.done >= self.iters || self.link.failure().is_some(),
            wake: self.link.wake_unless(progressed),
        }
    }
}

/// Sends every message it receives straight back.
pub struct RppEcho {
    /// The connection.
    pub link: BoardConnection,
    /// Messages received.
    pub received: u64,
    /// Messages sent back.
    pub sent: u64,
    /// Messages waiting for room in RPP's queue, oldest first.
    backlog: VecDeque<Vec<u8>>,
}

impl RppEcho {
    /// An echo that has done nothing yet.
    pub fn new(link: BoardConnection) -> RppEcho {
        RppEcho {
            link,
            received: 0,
            sent: 0,
            backlog: VecDeque::new(),
        }
    }

    /// Runs at `now`.
    pub fn step(&mut self, api: &mut Api, now: Time) -> Step {
        let mut progressed = false;
        while let Some(m) = self.backlog.pop_front() {
            if let Err(m) = self.link.send(m) {
                self.backlog.push_front(m);
                break;
            }
            self.sent += 1;
        }
        while let Some(d) = self.link.recv(api, now) {
            progressed = true;
            self.received += 1;
            let bytes = d.bytes();
            let queued = self.backlog.is_empty()
                && self
                    .link
                    .send_with(api, bytes.len(), |b| b.copy_from_slice(bytes));
            if !queued {
                self.backlog.push_back(bytes.to_vec());
            }
            // The receive buffer first, so that the answer can be written into it.
            self.link.recycle(d);
            if queued {
                self.sent += 1;
                // To the board at once, as the raw echo turns each packet around; the
                // rest of RPP's work (and the next message) in the next step.
                if self.link.transmit_first(api, now) {
                    return Step {
                        progressed: true,
                        ..Step::default()
                    };
                }
            }
        }
        progressed |= self.link.transmit(api, now);
        Step {
            progressed,
            done: false,
            wake: self.link.wake_unless(progressed),
        }
    }
}

/// Bytes of a stream message's header: sequence number, messages in the stream, round.
pub const STREAM_HEADER: usize = 24;
/// The sequence number of a stream's acknowledgement.
const ACK: u64 = u64::MAX;

/// Seed 000's pipelining test over RPP, sending side: `count` messages as fast as RPP
/// takes them, then waits for the sink's one acknowledgement (an RPP message too).
pub struct RppStreamSender {
    /// The connection.
    pub link: BoardConnection,
    /// Message size (at least [`STREAM_HEADER`]).
    pub size: usize,
    /// Messages to send.
    pub count: u64,
    /// Which stream this is.
    pub round: u64,
    /// Messages RPP has taken.
    pub queued: u64,
    /// When the first message was queued.
    pub started: Option<Time>,
    /// When the acknowledgement arrived.
    pub acked: Option<Time>,
    /// What the sink reported it received.
    pub sink_count: u64,
    /// Messages received that were not this stream's acknowledgement.
    pub stale: u64,
    /// The real clock the stream is timed with (inline and threaded runs), as the raw
    /// [`StreamSender`](super::programs::StreamSender) times it: read right before the
    /// first message is queued and right after the acknowledgement is delivered. Without
    /// one (virtual time) the step's `now` is used.
    pub clock: Option<Clock>,
}

impl RppStreamSender {
    /// A sender that has sent nothing yet.
    pub fn new(link: BoardConnection, size: usize, count: u64, round: u64) -> RppStreamSender {
        RppStreamSender {
            link,
            size: size.max(STREAM_HEADER),
            count,
            round,
            queued: 0,
            started: None,
            acked: None,
            sink_count: 0,
            stale: 0,
            clock: None,
        }
    }

    /// Runs at `now`.
    pub fn step(&mut self, api: &mut Api, now: Time) -> Step {
        let mut progressed = false;
        while let Some(d) = self.link.recv(api, now) {
            progressed = true;
            let b = d.bytes();
            if word(b, 0) == Some(ACK) && word(b, 2) == Some(self.round) && self.acked.is_none() {
                self.acked = Some(self.clock.map_or(now, |c| c.now()));
                self.sink_count = word(b, 1).unwrap_or(0);
            } else {
                self.stale += 1;
            }
            self.link.recycle(d);
        }
        while self.acked.is_none() && self.queued < self.count {
            let (seq, count, round) = (self.queued, self.count, self.round);
            if self.started.is_none() {
                self.started = Some(self.clock.map_or(now, |c| c.now()));
            }
            let queued = self.link.send_with(api, self.size, |b| {
                b[..8].copy_from_slice(&seq.to_be_bytes());
                b[8..16].copy_from_slice(&count.to_be_bytes());
                b[16..24].copy_from_slice(&round.to_be_bytes());
            });
            if !queued {
                break;
            }
            self.queued += 1;
            progressed = true;
        }
        progressed |= self.link.transmit(api, now);
        Step {
            progressed,
            done: self.acked.is_some() || self.link.failure().is_some(),
            wake: self.link.wake_unless(progressed),
        }
    }

    /// Bytes per second from the first message queued to the acknowledgement.
    pub fn bytes_per_sec(&self) -> Option<f64> {
        let (start, end) = (self.started?, self.acked?);
        let secs = end.saturating_since(start).as_secs_f64();
        (secs > 0.0).then(|| (self.count * self.size as u64) as f64 / secs)
    }
}

/// Seed 000's pipelining test over RPP, receiving side, for any number of streams in
/// turn: checks each message is the next of its stream and acknowledges a stream once,
/// when its last message arrives.
pub struct RppStreamSink {
    /// The connection.
    pub link: BoardConnection,
    /// The stream being received.
    pub round: u64,
    /// Messages of the current stream received.
    pub received: u64,
    /// Messages received over all streams, in order.
    pub delivered: u64,
    /// Messages that were not the next one expected (a broken promise of RPP's).
    pub out_of_order: u64,
    /// Acknowledgements sent.
    pub acks: u64,
    pending_ack: Option<(u64, u64)>,
}

impl RppStreamSink {
    /// A sink waiting for the first message of stream 0.
    pub fn new(link: BoardConnection) -> RppStreamSink {
        RppStreamSink {
            link,
            round: 0,
            received: 0,
            delivered: 0,
            out_of_order: 0,
            acks: 0,
            pending_ack: None,
        }
    }

    /// Runs at `now`.
    pub fn step(&mut self, api: &mut Api, now: Time) -> Step {
        let mut progressed = false;
        while let Some(d) = self.link.recv(api, now) {
            progressed = true;
            let b = d.bytes();
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
            self.link.recycle(d);
        }
        if let Some((count, round)) = self.pending_ack {
            let sent = self.link.send_with(api, STREAM_HEADER, |b| {
                b[..8].copy_from_slice(&ACK.to_be_bytes());
                b[8..16].copy_from_slice(&count.to_be_bytes());
                b[16..24].copy_from_slice(&round.to_be_bytes());
            });
            if sent {
                self.acks += 1;
                self.pending_ack = None;
                progressed = true;
            }
        }
        progressed |= self.link.transmit(api, now);
        Step {
            progressed,
            done: false,
            wake: self.link.wake_unless(progressed),
        }
    }
}

/// Runs a finished program's connection until it is quiet: everything it sent is
/// acknowledged, the peer says the same of its own ([`BoardConnection::idle_flag`]), and
/// no packet has gone out or come in for `quiet`, so what the peer still sends (an
/// acknowledgement, a retransmission) lands and is answered before the books close.
/// Gives up after `give_up`. Messages delivered meanwhile are counted.
pub struct Settling<P> {
    /// The program.
    pub inner: P,
    /// How long a silence ends it.
    pub quiet: Duration,
    /// Most time it runs.
    pub give_up: Duration,
    /// Messages delivered while settling (none is expected).
    pub stray: u64,
    /// It ended quiet (not by giving up).
    pub settled: bool,
    started: Option<Time>,
    peer_idle: Arc<AtomicBool>,
}

/// How settling ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settled {
    /// Messages delivered while settling (none is expected).
    pub stray: u64,
    /// It ended quiet (not by giving up or a failure).
    pub quiet: bool,
}

impl<P: OverRpp> Settling<P> {
    /// The program and how settling ended.
    pub fn finish(self) -> (P, Settled) {
        (
            self.inner,
            Settled {
                stray: self.stray,
                quiet: self.settled,
            },
        )
    }

    /// Settles `inner`, whose peer publishes `peer_idle`.
    pub fn new(
        inner: P,
        peer_idle: Arc<AtomicBool>,
        quiet: Duration,
        give_up: Duration,
    ) -> Settling<P> {
        Settling {
            inner,
            quiet,
            give_up,
            stray: 0,
            settled: false,
            started: None,
            peer_idle,
        }
    }
}

impl<P: OverRpp> Program for Settling<P> {
    fn step(&mut self, api: &mut Api, now: Time) -> Step {
        let started = *self.started.get_or_insert(now);
        let link = self.inner.link();
        let mut progressed = false;
        while let Some(d) = link.recv(api, now) {
            self.stray += 1;
            progressed = true;
            link.recycle(d);
        }
        progressed |= link.transmit(api, now);
        let quiet_since = link.last_activity().max(started);
        self.settled = !link.has_pending()
            && self.peer_idle.load(Ordering::Acquire)
            && now.saturating_since(quiet_since) >= self.quiet;
        let done = self.settled
            || now.saturating_since(started) >= self.give_up
            || link.failure().is_some();
        let wake = wake_at(link, Some(quiet_since + self.quiet));
        Step {
            progressed,
            done,
            wake,
        }
    }
}

macro_rules! over_rpp {
    ($t:ty, $own_time:expr) => {
        impl Program for $t {
            fn step(&mut self, api: &mut Api, now: Time) -> Step {
                <$t>::step(self, api, now)
            }

            fn keeps_own_time(&self) -> bool {
                let own_time: fn(&$t) -> bool = $own_time;
                own_time(self)
            }
        }
        impl OverRpp for $t {
            fn link(&mut self) -> &mut BoardConnection {
                &mut self.link
            }
        }
    };
}

// As the raw programs: the timing ones keep their own time when they have a clock, and
// the echo and the sink time nothing.
over_rpp!(RppPinger, |p| p.clock.is_some());
over_rpp!(RppEcho, |_| true);
over_rpp!(RppStreamSender, |s| s.clock.is_some());
over_rpp!(RppStreamSink, |_| true);
