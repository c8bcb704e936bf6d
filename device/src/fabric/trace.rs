//! What happened on the fabric, as events and as one hash.
//!
//! Every packet sent, every fault injected, every drop and every delivery is an event. The
//! fabric folds each event into the FNV-1a hash of the link or port where it happened, and
//! [`super::Fabric::trace_hash`] combines them in a fixed order, so the same seed gives the
//! same hash on every machine and every run of the deterministic scheduler. When recording
//! is switched on, events are also kept (up to a bound) for inspection.

use super::fault::DropCause;
use crate::time::Time;

/// A packet's identity: the port that sent it and its number there. Duplicates share it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PacketId {
    /// Sending port.
    pub source: u32,
    /// Sequence number at that port.
    pub seq: u64,
}

/// Where an event happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Place {
    /// One direction of a cable (see [`super::LinkId`]).
    Link(u32),
    /// A switch.
    Switch(u32),
    /// A host port.
    Port(u32),
}

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// A host port sent a packet.
    Sent,
    /// A link dropped a packet.
    Dropped(DropCause),
    /// A link flipped a bit.
    Corrupted {
        /// Bit index in the packet.
        bit: u32,
    },
    /// A link made a second copy.
    Duplicated,
    /// A link held a packet back.
    Reordered,
    /// A switch could not route a packet (bad route byte, port out of range or unwired).
    BadRoute {
        /// The route byte.
        byte: u8,
    },
    /// A host port's queue was full.
    Overflow,
    /// A host port found a bad CRC-8 and dropped the packet.
    CrcError,
    /// A host port handed a packet to its board.
    Delivered,
    /// A link went down or came up.
    LinkState {
        /// Up after the change.
        up: bool,
    },
}

/// One event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    /// When.
    pub at: Time,
    /// Where.
    pub place: Place,
    /// What.
    pub kind: EventKind,
    /// Which packet (zero for link-state events).
    pub packet: PacketId,
}

/// FNV-1a, 64 bits: small, fast, and the same everywhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceHash(u64);

impl Default for TraceHash {
    fn default() -> TraceHash {
        TraceHash(0xcbf2_9ce4_8422_2325)
    }
}

impl TraceHash {
    /// Folds bytes in.
    pub fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }

    /// Folds a 64-bit number in.
    pub fn write_u64(&mut self, v: u64) {
        self.write(&v.to_le_bytes());
    }

    /// Folds one 64-bit word in (FNV-1a over words rather than bytes: the same
    /// everywhere, and cheap enough to run on every packet).
    #[inline]
    pub fn fold(&mut self, w: u64) {
        self.0 = (self.0 ^ w).wrapping_mul(0x0000_0100_0000_01b3);
        self.0 ^= self.0 >> 29;
    }

    /// Folds an event in.
    #[inline]
    pub fn event(&mut self, e: &Event) {
        let (kind, arg): (u8, u64) = match e.kind {
            EventKind::Sent => (1, 0),
            EventKind::Dropped(c) => (2, c as u64),
            EventKind::Corrupted { bit } => (3, u64::from(bit)),
            EventKind::Duplicated => (4, 0),
            EventKind::Reordered => (5, 0),
            EventKind::BadRoute { byte } => (6, u64::from(byte)),
            EventKind::Overflow => (7, 0),
            EventKind::CrcError => (8, 0),
            EventKind::Delivered => (9, 0),
            EventKind::LinkState { up } => (10, u64::from(up)),
        };
        self.fold(e.at.as_nanos());
        self.fold(u64::from(kind) << 56 | (arg & 0x00FF_FFFF_FFFF_FFFF));
        self.fold(u64::from(e.packet.source) << 40 ^ e.packet.seq);
    }

    /// The hash value.
    pub fn value(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_known_values() {
        let mut h = TraceHash::default();
        assert_eq!(h.value(), 0xcbf2_9ce4_8422_2325);
        h.write(b"a");
        assert_eq!(h.value(), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn order_matters() {
        let e = |seq| Event {
            at: Time::ZERO,
            place: Place::Port(0),
            kind: EventKind::Sent,
            packet: PacketId { source: 0, seq },
        };
        let (mut a, mut b) = (TraceHash::default(), TraceHash::default());
        a.event(&e(1));
        a.event(&e(2));
        b.event(&e(2));
        b.event(&e(1));
        assert_ne!(a, b);
    }
}
