//! The seed's benchmarks as host programs: state machines over the channel API that run
//! unchanged inline, threaded and under the deterministic scheduler (seed 000, Performance
//! Results: single packets up to 8K, small packet latencies, multiple 8K packets).

use myri_device::run::Clock;
use myri_device::time::Time;
use myri_mcp::{Api, Channel, RouteId};
use std::time::Duration;

/// Bytes at the start of every benchmark packet: a sequence number.
const SEQ: usize = 8;

/// One side's outcome of a host-program step.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Step {
    /// Something happened.
    pub progressed: bool,
    /// The program has finished.
    pub done: bool,
    /// When it next needs to run by itself (a timeout). Drivers read it only from a step
    /// that did not progress (one that did is stepped again at once), so a program may
    /// leave it out then.
    pub wake: Option<Time>,
}

/// A host program: a state machine over one board's [`Api`].
pub trait Program {
    /// Does what can be done at `now`.
    fn step(&mut self, api: &mut Api, now: Time) -> Step;

    /// Whether the program times what it measures with its own clock reads (or measures
    /// nothing), so that a real-time driver may step it at a reading taken a moment
    /// before (when work appeared) instead of reading the clock first. A program that
    /// takes its figures from `now` keeps the default, `false`: it is always stepped at
    /// a fresh reading.
    fn keeps_own_time(&self) -> bool {
        false
    }
}

macro_rules! program {
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
    };
}

program!(Pinger, |p| p.clock.is_some());
program!(Echo, |_| true);
program!(StreamSender, |s| s.clock.is_some());
program!(StreamSink, |_| true);

fn seq_of(bytes: &[u8]) -> Option<u64> {
    bytes
        .get(..SEQ)
        .map(|b| u64::from_be_bytes(b.try_into().expect("8 bytes")))
}

/// Sends a packet and waits for it to come back, `iters` times. An exchange with no answer
/// within `timeout` is counted and skipped; a late answer is recognised by its sequence
/// number and not mistaken for a later one.
pub struct Pinger {
    /// This side's receive channel.
    pub chan: Channel,
    /// Route to the echo side.
    pub route: RouteId,
    /// The echo side's channel.
    pub peer_chan: u8,
    /// Packet size.
    pub size: usize,
    /// Exchanges to make.
    pub iters: u64,
    /// How long to wait for an answer.
    pub timeout: Duration,
    /// Exchanges made.
    pub done: u64,
    /// Round-trip times of answered exchanges.
    pub rtts: Vec<Duration>,
    /// Exchanges that timed out.
    pub timeouts: u64,
    /// Answers that came after their exchange had timed out.
    pub late: u64,
    /// Packets sent.
    pub sent: u64,
    /// Packets received.
    pub received: u64,
    /// The real clock round trips are timed with (inline and threaded runs): read right
    /// before each send and right after its answer is received, so a round trip is that
    /// and nothing of the driver's loop around it. Without one (virtual time) the step's
    /// `now` is used.
    pub clock: Option<Clock>,
    waiting: Option<(u64, Time)>,
}

impl Pinger {
    /// A pinger that has done nothing yet.
    pub fn new(
        chan: Channel,
        route: RouteId,
        peer_chan: u8,
        size: usize,
        iters: u64,
        timeout: Duration,
    ) -> Pinger {
        Pinger {
            chan,
            route,
            peer_chan,
            size: size.max(SEQ),
            iters,
            timeout,
            done: 0,
            rtts: Vec::with_capacity(iters as usize),
            timeouts: 0,
            late: 0,
            sent: 0,
            received: 0,
            clock: None,
            waiting: None,
        }
    }

    /// Runs at `now`.
    pub fn step(&mut self, api: &mut Api, now: Time) -> Step {
        let mut progressed = false;
        while let Ok(Some(r)) = api.recv(&self.chan) {
            self.received += 1;
            progressed = true;
            match (self.waiting, seq_of(r.as_slice())) {
                (Some((seq, sent_at)), Some(got)) if got == seq => {
                    let at = self.clock.map_or(now, |c| c.now());
                    self.rtts.push(at.saturating_since(sent_at));
                    self.waiting = None;
                    self.done += 1;
                }
                _ => self.late += 1,
            }
        }
        if let Some((_, sent_at)) = self.waiting
            && now.saturating_since(sent_at) >= self.timeout
        {
            self.timeouts += 1;
            self.waiting = None;
            self.done += 1;
            progressed = true;
        }
        if self.waiting.is_none()
            && self.done < self.iters
            && let Ok(mut buf) = api.get_send_buffer()
        {
            buf.as_mut_slice()[..SEQ].copy_from_slice(&self.done.to_be_bytes());
            let at = self.clock.map_or(now, |c| c.now());
            if api
                .send_and_release(self.peer_chan, self.route, buf, self.size)
                .is_ok()
            {
                self.sent += 1;
                self.waiting = Some((self.done, at));
                progressed = true;
            }
        }
        let wake = self.waiting.map(|(_, at)| at + self.timeout);
        Step {
            progressed,
            done: self.done >= self.iters,
            wake,
        }
    }
}

/// Sends every packet it receives straight back, turning the receive buffer around.
pub struct Echo {
    /// This side's receive channel.
    pub chan: Channel,
    /// Route back.
    pub route: RouteId,
    /// The other side's channel.
    pub peer_chan: u8,
    /// Packets received.
    pub received: u64,
    /// Packets sent back.
    pub sent: u64,
    /// Packets that could not be sent back (the send channel was full).
    pub refused: u64,
}

impl Echo {
    /// An echo that has done nothing yet.
    pub fn new(chan: Channel, route: RouteId, peer_chan: u8) -> Echo {
        Echo {
            chan,
            route,
            peer_chan,
            received: 0,
            sent: 0,
            refused: 0,
        }
    }

    /// Runs at `now`.
    pub fn step(&mut self, api: &mut Api, _now: Time) -> Step {
        let mut progressed = false;
        while let Ok(Some(r)) = api.recv(&self.chan) {
            self.received += 1;
            progressed = true;
            let len = r.len();
            match api.send_recv_buffer_and_release(self.peer_chan, self.route, r, len) {
                Ok(()) => self.sent += 1,
                Err(_) => self.refused += 1,
            }
        }
        Step {
            progressed,
            done: false,
            wake: None,
        }
    }
}

/// Bytes of a stream packet's header: sequence number, packets in the stream, round.
const STREAM_HEADER: usize = 24;
/// The sequence number of a stream's acknowledgement.
const ACK: u64 = u64::MAX;
/// Bytes of the end-to-end check a checked stream packet ends with: the CRC-32C of the
/// rest of the packet, as RPP computes it over each of its packets.
const CHECK: usize = 4;

/// Writes the CRC-32C of `packet` less its last [`CHECK`] bytes into those bytes.
fn seal_checked(packet: &mut [u8]) {
    let body = packet.len() - CHECK;
    let crc = myri_rpp::wire::crc32c(&packet[..body]);
    packet[body..].copy_from_slice(&crc.to_be_bytes());
}

/// Whether `packet` ends with the CRC-32C of the rest of it.
fn check_ok(packet: &[u8]) -> bool {
    let Some(body) = packet.len().checked_sub(CHECK) else {
        return false;
    };
    packet[body..] == myri_rpp::wire::crc32c(&packet[..body]).to_be_bytes()
}

fn word(bytes: &[u8], i: usize) -> Option<u64> {
    bytes
        .get(8 * i..8 * i + 8)
        .map(|b| u64::from_be_bytes(b.try_into().expect("8 bytes")))
}

/// Seed 000's pipelining test, sending side: `count` packets with at most `window` in the
/// send channel, then waits for the one acknowledgement.
pub struct StreamSender {
    /// This side's receive channel (for the acknowledgement).
    pub chan: Channel,
    /// Route to the sink.
    pub route: RouteId,
    /// The sink's channel.
    pub peer_chan: u8,
    /// Packet size.
    pub size: usize,
    /// Packets to send.
    pub count: u64,
    /// Most sends in the send channel at once.
    pub window: usize,
    /// How long to wait for the acknowledgement after the last send.
    pub timeout: Duration,
    /// Which stream this is: packets of other streams are told apart by it.
    pub round: u64,
    /// Each packet ends with a CRC-32C of the rest of it, computed here and checked by a
    /// checked [`StreamSink`]: the end-to-end check RPP makes, alone, so that a run can
    /// show what the check costs apart from the protocol (packets are then at least 28
    /// bytes: [`StreamSender::packet_size`]).
    pub checked: bool,
    /// Packets sent.
    pub sent: u64,
    /// When the first packet went.
    pub started: Option<Time>,
    /// When the acknowledgement arrived.
    pub acked: Option<Time>,
    /// What the sink reported it received.
    pub sink_count: u64,
    /// Packets received that were not this stream's acknowledgement.
    pub stale: u64,
    /// The acknowledgement never came.
    pub timed_out: bool,
    /// The real clock the stream is timed with (inline and threaded runs): read right
    /// before the first send and right after the acknowledgement is received. Without one
    /// (virtual time) the step's `now` is used.
    pub clock: Option<Clock>,
    last_sent_at: Option<Time>,
}

impl StreamSender {
    /// A sender that has sent nothing yet.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        chan: Channel,
        route: RouteId,
        peer_chan: u8,
        size: usize,
        count: u64,
        window: usize,
        timeout: Duration,
        round: u64,
    ) -> StreamSender {
        StreamSender {
            chan,
            route,
            peer_chan,
            size: size.max(STREAM_HEADER),
            count,
            window: window.max(1),
            timeout,
            round,
            checked: false,
            sent: 0,
            started: None,
            acked: None,
            sink_count: 0,
            stale: 0,
            timed_out: false,
            clock: None,
            last_sent_at: None,
        }
    }

    /// Runs at `now`.
    pub fn step(&mut self, api: &mut Api, now: Time) -> Step {
        let mut progressed = false;
        while let Ok(Some(r)) = api.recv(&self.chan) {
            progressed = true;
            let b = r.as_slice();
            if word(b, 0) == Some(ACK) && word(b, 2) == Some(self.round) {
                self.acked = Some(self.clock.map_or(now, |c| c.now()));
                self.sink_count = word(b, 1).unwrap_or(0);
                return Step {
                    progressed: true,
                    done: true,
                    wake: None,
                };
            }
            self.stale += 1;
        }
        // Keep at most `window` sends unfinished by the board (seed 000,
        // `myri_api0_num_pending`: it reaps what the board has finished).
        let mut pending = if self.sent < self.count {
            api.num_pending()
        } else {
            0
        };
        while self.sent < self.count && pending < self.window {
            let Ok(mut buf) = api.get_send_buffer() else {
                break;
            };
            let b = buf.as_mut_slice();
            b[..8].copy_from_slice(&self.sent.to_be_bytes());
            b[8..16].copy_from_slice(&self.count.to_be_bytes());
            b[16..24].copy_from_slice(&self.round.to_be_bytes());
            let size = self.packet_size();
            if self.checked {
                seal_checked(&mut b[..size]);
            }
            if self.started.is_none() {
                self.started = Some(self.clock.map_or(now, |c| c.now()));
            }
            match api.send_and_release(self.peer_chan, self.route, buf, size) {
                Ok(()) => {
                    pending += 1;
                    self.sent += 1;
                    self.last_sent_at = Some(now);
                    progressed = true;
                }
                Err(_) => break,
            }
        }
        let wake = self
            .last_sent_at
            .filter(|_| self.sent == self.count)
            .map(|t| t + self.timeout);
        if wake.is_some_and(|w| now >= w) {
            self.timed_out = true;
            return Step {
                progressed: true,
                done: true,
                wake: None,
            };
        }
        Step {
            progressed,
            done: false,
            wake,
        }
    }

    /// The size of each packet: `size`, and room for the check in a checked stream.
    pub fn packet_size(&self) -> usize {
        if self.checked {
            self.size.max(STREAM_HEADER + CHECK)
        } else {
            self.size
        }
    }

    /// Bytes per second from the first send to the acknowledgement (seed 000: total bytes
    /// sent divided by the time until the ack arrives).
    pub fn bytes_per_sec(&self) -> Option<f64> {
        let (start, end) = (self.started?, self.acked?);
        let secs = end.saturating_since(start).as_secs_f64();
        (secs > 0.0).then(|| (self.count * self.packet_size() as u64) as f64 / secs)
    }
}

/// Seed 000's pipelining test, receiving side, for any number of streams in turn: counts
/// each stream's packets (by the round id they carry) and acknowledges it once, when its
/// last packet arrives or, under loss, when nothing has arrived for `idle` (shorter than
/// the sender's timeout). Packets of an earlier stream that arrive late are counted as
/// stale.
pub struct StreamSink {
    /// This side's receive channel.
    pub chan: Channel,
    /// Route back to the sender.
    pub route: RouteId,
    /// The sender's channel.
    pub peer_chan: u8,
    /// How long without packets before acknowledging what arrived.
    pub idle: Duration,
    /// The stream being counted.
    pub round: u64,
    /// Packets of the current stream received.
    pub received: u64,
    /// Packets received over all streams (stale ones included).
    pub total: u64,
    /// Packets of earlier streams.
    pub stale: u64,
    /// Packets too short to be a stream packet, or failing the check of a checked stream.
    pub corrupt: u64,
    /// Every packet is checked end to end: it must end with the CRC-32C of the rest of it
    /// (see [`StreamSender::checked`]).
    pub checked: bool,
    /// Acknowledgements sent.
    pub acks: u64,
    expected: Option<u64>,
    last: Option<Time>,
}

impl StreamSink {
    /// A sink that has received nothing yet, waiting for stream `round` (or later).
    pub fn new(
        chan: Channel,
        route: RouteId,
        peer_chan: u8,
        idle: Duration,
        round: u64,
    ) -> StreamSink {
        StreamSink {
            chan,
            route,
            peer_chan,
            idle,
            round,
            received: 0,
            total: 0,
            stale: 0,
            corrupt: 0,
            checked: false,
            acks: 0,
            expected: None,
            last: None,
        }
    }

    /// Runs at `now`.
    pub fn step(&mut self, api: &mut Api, now: Time) -> Step {
        let mut progressed = false;
        while let Ok(Some(r)) = api.recv(&self.chan) {
            progressed = true;
            self.total += 1;
            let b = r.as_slice();
            if self.checked && !check_ok(b) {
                self.corrupt += 1;
                continue;
            }
            match (word(b, 1), word(b, 2)) {
                (Some(count), Some(round)) if round >= self.round => {
                    if round > self.round {
                        self.round = round;
                        self.received = 0;
                    }
                    self.received += 1;
                    self.last = Some(now);
                    self.expected = Some(count);
                }
                (Some(_), Some(_)) => self.stale += 1,
                _ => self.corrupt += 1,
            }
        }
        let all = self.expected.is_some_and(|n| self.received >= n);
        let quiet = self
            .last
            .is_some_and(|t| now.saturating_since(t) >= self.idle);
        if self.received > 0
            && (all || quiet)
            && let Ok(mut buf) = api.get_send_buffer()
        {
            let b = buf.as_mut_slice();
            b[..8].copy_from_slice(&ACK.to_be_bytes());
            b[8..16].copy_from_slice(&self.received.to_be_bytes());
            b[16..24].copy_from_slice(&self.round.to_be_bytes());
            if api
                .send_and_release(self.peer_chan, self.route, buf, STREAM_HEADER)
                .is_ok()
            {
                self.acks += 1;
                progressed = true;
                // The next packet of this round would be a late one; a new round resets.
                self.round += 1;
                self.received = 0;
                self.expected = None;
                self.last = None;
            }
        }
        let wake = self.last.map(|t| t + self.idle);
        Step {
            progressed,
            done: false,
            wake,
        }
    }
}

/// Receives and counts whatever still arrives, until nothing has for `quiet`.
pub struct Drain {
    /// The channel.
    pub chan: Channel,
    /// How long a silence ends it.
    pub quiet: Duration,
    /// Packets received.
    pub received: u64,
    since: Option<Time>,
}

impl Drain {
    /// A drain that has seen nothing yet.
    pub fn new(chan: Channel, quiet: Duration) -> Drain {
        Drain {
            chan,
            quiet,
            received: 0,
            since: None,
        }
    }

    /// Runs at `now`.
    pub fn step(&mut self, api: &mut Api, now: Time) -> Step {
        let since = *self.since.get_or_insert(now);
        let mut progressed = false;
        while let Ok(Some(_)) = api.recv(&self.chan) {
            self.received += 1;
            self.since = Some(now);
            progressed = true;
        }
        let done = now.saturating_since(self.since.unwrap_or(since)) >= self.quiet;
        Step {
            progressed,
            done,
            wake: Some(self.since.unwrap_or(since) + self.quiet),
        }
    }
}

program!(Drain, |_| true);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checked_packet_passes_and_any_flipped_bit_fails() {
        let mut packet: Vec<u8> = (0..8192u32).map(|i| (i * 31 + 7) as u8).collect();
        seal_checked(&mut packet);
        assert!(check_ok(&packet));
        for bit in [0, 7, 8 * 100 + 3, 8 * 8188 - 1, 8 * 8188, 8 * 8192 - 1] {
            packet[bit / 8] ^= 1 << (bit % 8);
            assert!(!check_ok(&packet), "bit {bit} flipped");
            packet[bit / 8] ^= 1 << (bit % 8);
        }
        assert!(check_ok(&packet));
    }

    #[test]
    fn a_packet_too_short_to_carry_the_check_fails_it() {
        for len in 0..CHECK {
            assert!(!check_ok(&vec![0; len]), "{len} bytes");
        }
        // Exactly the check: the CRC of nothing.
        let mut packet = [0u8; CHECK];
        seal_checked(&mut packet);
        assert!(check_ok(&packet));
    }
}
