//! One direction of a cable: timing model, fault middleware, counters and trace.

use super::fault::{DropCause, FaultConfig, FaultInjector, Verdict};
use super::trace::{Event, EventKind, PacketId, Place, TraceHash};
use crate::time::{Time, transfer_time};
use crate::wire::Packet;
use std::time::Duration;

/// Bandwidth and latency of a link. The default is unthrottled: no latency, infinite
/// bandwidth.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LinkModel {
    /// Time for the first byte to cross the cable and the next switch.
    pub latency: Duration,
    /// Bytes per second on the wire; 0 is unthrottled.
    pub bytes_per_sec: u64,
}

impl LinkModel {
    /// A Myrinet SAN-1280 link (seed 002 §4.2, 1.28 Gb/s) with 0.5 µs per hop.
    pub const SAN_1280: LinkModel = LinkModel {
        latency: Duration::from_nanos(500),
        bytes_per_sec: 160_000_000,
    };
    /// A Myrinet-2000 link (2 Gb/s) with 0.3 µs per hop.
    pub const SAN_2000: LinkModel = LinkModel {
        latency: Duration::from_nanos(300),
        bytes_per_sec: 250_000_000,
    };
}

/// Counters of one direction of a cable.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkCounters {
    /// Packets offered to the link.
    pub offered: u64,
    /// Packets (copies included) that came out of the far end.
    pub passed: u64,
    /// Dropped by independent loss.
    pub dropped_random: u64,
    /// Dropped by burst loss.
    pub dropped_burst: u64,
    /// Dropped because the link was down.
    pub dropped_down: u64,
    /// Dropped as the first packet after link init.
    pub dropped_first: u64,
    /// Bits flipped (with the CRC-8 recomputed or not).
    pub corrupted: u64,
    /// Extra copies made.
    pub duplicated: u64,
    /// Packets held back for reordering.
    pub reordered: u64,
    /// Link state changes.
    pub state_changes: u64,
}

impl LinkCounters {
    /// All drops.
    pub fn dropped(&self) -> u64 {
        self.dropped_random + self.dropped_burst + self.dropped_down + self.dropped_first
    }
}

/// A packet in transit with the times its head and tail reach the far end.
#[derive(Debug)]
pub struct InTransit {
    /// The packet.
    pub packet: Packet,
    /// Its identity.
    pub id: PacketId,
    /// When its first byte arrives.
    pub head: Time,
    /// When its last byte arrives.
    pub tail: Time,
    /// Extra delay picked up from fault injection (delay, jitter, reordering). It is
    /// applied when the packet lands at its port rather than on the way, because the
    /// fabric walks packets in the order they are sent, not in time order: a held packet
    /// must not occupy downstream wires ahead of packets that overtake it.
    pub hold: Duration,
}

/// State of one link direction (kept behind the fabric's per-link lock).
#[derive(Debug)]
pub(crate) struct LinkState {
    pub(crate) id: u32,
    pub(crate) model: LinkModel,
    pub(crate) faults: FaultInjector,
    clean: bool,
    busy_until: Time,
    pub(crate) counters: LinkCounters,
    pub(crate) trace: TraceHash,
}

impl LinkState {
    pub(crate) fn new(id: u32, model: LinkModel, faults: FaultConfig, seed: u64) -> LinkState {
        LinkState {
            id,
            model,
            clean: faults.is_clean(),
            faults: FaultInjector::new(faults, seed, u64::from(id)),
            busy_until: Time::ZERO,
            counters: LinkCounters::default(),
            trace: TraceHash::default(),
        }
    }

    pub(crate) fn set_faults(&mut self, faults: FaultConfig, now: Time) {
        self.clean = faults.is_clean() && self.faults.is_up();
        self.faults.set_config(faults, now);
    }

    pub(crate) fn set_up(&mut self, up: bool, now: Time, record: &mut impl FnMut(Event)) {
        if up != self.faults.is_up() {
            self.faults.set_up(up);
            self.note_state(now, up, record);
        }
        self.clean = self.faults.config().is_clean() && self.faults.is_up();
    }

    fn note_state(&mut self, at: Time, up: bool, record: &mut impl FnMut(Event)) {
        self.counters.state_changes += 1;
        self.event(
            at,
            EventKind::LinkState { up },
            PacketId {
                source: u32::MAX,
                seq: 0,
            },
            record,
        );
    }

    fn event(
        &mut self,
        at: Time,
        kind: EventKind,
        packet: PacketId,
        record: &mut impl FnMut(Event),
    ) {
        let e = Event {
            at,
            place: Place::Link(self.id),
            kind,
            packet,
        };
        self.trace.event(&e);
        record(e);
    }

    /// Carries a packet whose head reaches this link at `t.head` and tail at `t.tail`:
    /// on [`Carried::Passed`] `t` is what comes out of the far end (its times updated),
    /// with a second copy on [`Carried::Duplicated`]; on [`Carried::Dropped`] nothing does.
    pub(crate) fn carry(&mut self, t: &mut InTransit, record: &mut impl FnMut(Event)) -> Carried {
        if self.clean {
            return self.carry_clean(t);
        }
        self.counters.offered += 1;
        let verdict = if self.clean {
            Verdict::default()
        } else {
            let mut changes = Vec::new();
            self.faults.flap_to(t.head, |at, up| changes.push((at, up)));
            for (at, up) in changes {
                self.note_state(at, up, record);
            }
            self.faults.judge()
        };
        if let Some(cause) = verdict.drop {
            match cause {
                DropCause::Random => self.counters.dropped_random += 1,
                DropCause::Burst => self.counters.dropped_burst += 1,
                DropCause::LinkDown => self.counters.dropped_down += 1,
                DropCause::FirstAfterInit => self.counters.dropped_first += 1,
            }
            self.event(t.head, EventKind::Dropped(cause), t.id, record);
            return Carried::Dropped;
        }
        // Cut-through timing: the head leaves as soon as the link is free; the tail
        // cannot leave before it has arrived, nor before the wire has carried the bytes.
        let start = t.head.max(self.busy_until);
        let wire = transfer_time(t.packet.len(), self.model.bytes_per_sec);
        self.busy_until = start + wire;
        if !verdict.delay.is_zero() {
            t.hold += verdict.delay;
        }
        if let Some(reorder) = verdict.reorder {
            self.counters.reordered += 1;
            self.event(t.head, EventKind::Reordered, t.id, record);
            t.hold += reorder;
        }
        let head = start + self.model.latency;
        let tail = (start + wire).max(t.tail) + self.model.latency;
        if let Some(r) = verdict.flip {
            let bit = (r % (t.packet.len() as u64 * 8)) as u32;
            t.packet.flip_bit(bit as usize);
            self.counters.corrupted += 1;
            self.event(t.head, EventKind::Corrupted { bit }, t.id, record);
        }
        if let Some(r) = verdict.flip_resealed {
            // Counted and traced like any corruption; the bit is of the contents.
            let bits = (t.packet.len() as u64 - 1) * 8;
            let bit = r.checked_rem(bits).unwrap_or(0) as u32;
            t.packet.flip_bit_resealed(bit as usize);
            self.counters.corrupted += 1;
            self.event(t.head, EventKind::Corrupted { bit }, t.id, record);
        }
        self.counters.passed += 1;
        let copy = verdict.duplicate.then(|| {
            self.counters.duplicated += 1;
            self.counters.passed += 1;
            self.event(t.head, EventKind::Duplicated, t.id, record);
            InTransit {
                packet: t.packet.clone(),
                id: t.id,
                head,
                tail,
                hold: t.hold,
            }
        });
        t.head = head;
        t.tail = tail;
        match copy {
            Some(c) => Carried::Duplicated(c),
            None => Carried::Passed,
        }
    }
}

impl LinkState {
    /// [`LinkState::carry`] on a link with no faults configured and up: the timing
    /// model alone (what the general path computes for an empty verdict).
    #[inline]
    fn carry_clean(&mut self, t: &mut InTransit) -> Carried {
        self.counters.offered += 1;
        self.counters.passed += 1;
        let start = t.head.max(self.busy_until);
        if self.model.bytes_per_sec == 0 && self.model.latency.is_zero() {
            // Unthrottled: the packet comes out as it goes in.
            self.busy_until = start;
            t.head = start;
            t.tail = start.max(t.tail);
            return Carried::Passed;
        }
        let wire = transfer_time(t.packet.len(), self.model.bytes_per_sec);
        self.busy_until = start + wire;
        t.head = start + self.model.latency;
        t.tail = (start + wire).max(t.tail) + self.model.latency;
        Carried::Passed
    }
}

/// What came out of the far end of a link.
#[derive(Debug)]
pub(crate) enum Carried {
    /// Nothing: the link dropped the packet.
    Dropped,
    /// The packet.
    Passed,
    /// The packet and, first, a copy of it.
    Duplicated(InTransit),
}
