//! A packet as it travels a link: route bytes still to be consumed, the body, one CRC-8.
//!
//! ```text
//!  +---------+-----+---------+--------------------------+-------+
//!  | route 0 | ... | route n | body (type, payload ...) | CRC-8 |
//!  +---------+-----+---------+--------------------------+-------+
//! ```
//!
//! The CRC-8 covers every byte before it *as the packet is on this link*: when a switch
//! consumes the first route byte it recomputes the CRC ([`Packet::consume_route_byte`]),
//! keeping a bad CRC bad. The receiving port checks it ([`Packet::crc_ok`]).
//!
//! A simulator need not compute what hardware computes on the wire for free, as long as
//! every verdict is the same. So a packet keeps its CRC-8 as an *error term*: the CRC byte
//! it carries XOR the CRC-8 of its contents, zero for a good packet. The CRC is linear, so
//! every change this model makes to a packet updates the term in constant time: sealing
//! sets it to zero, a switch hop changes carried and true CRC alike (the term is kept),
//! and a flipped bit changes it by that bit's [`crc8::term`]. Only bytes taken from outside
//! ([`Packet::from_wire`]) cost a full CRC pass, and only [`Packet::to_wire`] and
//! [`Packet::crc`] compute the byte itself.

use super::crc8;
use super::route::{MAX_ROUTE_LEN, Route};
use thiserror::Error;

/// The longest body (everything after the route) a link carries. Myrinet has no length
/// field; in hardware the tail-flit timeout is the limit. This model sets it here.
pub const MAX_BODY_LEN: usize = 64 * 1024;
/// The longest packet on a wire: a full route, the longest body and the CRC byte.
pub const MAX_WIRE_LEN: usize = MAX_ROUTE_LEN + MAX_BODY_LEN + 1;

/// Why bytes could not be taken as a packet, or a packet operation was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum PacketError {
    /// Zero bytes: not even the CRC byte.
    #[error("empty packet: no CRC byte")]
    Empty,
    /// More bytes than [`MAX_WIRE_LEN`].
    #[error("packet of {len} bytes exceeds the {MAX_WIRE_LEN}-byte limit")]
    TooLong {
        /// Length of the refused packet.
        len: usize,
    },
    /// A switch asked for a route byte but only the CRC byte is left.
    #[error("no route byte left to consume")]
    NoRouteByte,
}

/// A packet on a link. See the module documentation for the layout.
///
/// Two packets are equal when the same bytes would be on the wire.
#[derive(Clone)]
pub struct Packet {
    /// `data[head..]` are the contents (route bytes, then body); the CRC byte is implied.
    data: Vec<u8>,
    head: usize,
    /// The carried CRC byte XOR the CRC-8 of the contents.
    crc_error: u8,
}

impl Packet {
    /// Builds a packet from a checked route and a body, with a good CRC-8.
    pub fn build(route: &Route, body: &[u8]) -> Result<Packet, PacketError> {
        let mut data = Vec::with_capacity(route.len() + body.len() + 1);
        data.extend_from_slice(route.as_bytes());
        data.extend_from_slice(body);
        Packet::seal(data)
    }

    /// Turns `contents` (route bytes and body, as a send engine produced them) into a
    /// packet with a good CRC-8 over them. The route bytes are not checked: a control
    /// program may send anything, and switches deal with bad route bytes.
    pub fn seal(contents: Vec<u8>) -> Result<Packet, PacketError> {
        if contents.len() + 1 > MAX_WIRE_LEN {
            return Err(PacketError::TooLong {
                len: contents.len() + 1,
            });
        }
        Ok(Packet {
            data: contents,
            head: 0,
            crc_error: 0,
        })
    }

    /// Takes bytes exactly as they are on a wire, CRC byte last. The CRC is checked here
    /// (one pass); see [`Packet::crc_ok`] for the verdict.
    pub fn from_wire(mut bytes: Vec<u8>) -> Result<Packet, PacketError> {
        match bytes.len() {
            0 => Err(PacketError::Empty),
            len if len > MAX_WIRE_LEN => Err(PacketError::TooLong { len }),
            _ => {
                let carried = bytes.pop().expect("non-empty");
                let crc_error = carried ^ crc8::checksum(&bytes);
                Ok(Packet {
                    data: bytes,
                    head: 0,
                    crc_error,
                })
            }
        }
    }

    /// The bytes on the wire, CRC byte included (computes the CRC byte: one pass).
    pub fn to_wire(&self) -> Vec<u8> {
        let mut v = self.contents().to_vec();
        v.push(self.crc());
        v
    }

    /// Length on the wire, CRC byte included (always at least 1).
    #[inline]
    pub fn len(&self) -> usize {
        self.data.len() - self.head + 1
    }

    /// Always false: a packet has at least its CRC byte.
    #[inline]
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Everything before the CRC byte: remaining route bytes, then the body.
    #[inline]
    pub fn contents(&self) -> &[u8] {
        &self.data[self.head..]
    }

    /// The CRC-8 byte as carried (computes it: one pass).
    pub fn crc(&self) -> u8 {
        crc8::checksum(self.contents()) ^ self.crc_error
    }

    /// Whether the carried CRC-8 matches the contents.
    #[inline]
    pub fn crc_ok(&self) -> bool {
        self.crc_error == 0
    }

    /// The first byte of the contents: the next route byte, or the first body byte.
    #[inline]
    pub fn first_byte(&self) -> Option<u8> {
        self.contents().first().copied()
    }

    /// Removes the first route byte, as a switch does, and recomputes the CRC-8 the way a
    /// switch does, so that a packet whose CRC was already wrong stays wrong. Constant
    /// time: carried and true CRC lose the same byte's term, so the error is unchanged.
    pub fn consume_route_byte(&mut self) -> Result<u8, PacketError> {
        let first = self.first_byte().ok_or(PacketError::NoRouteByte)?;
        self.head += 1;
        Ok(first)
    }

    /// Inverts one bit of the wire bytes (CRC byte included); `bit` is taken modulo the
    /// packet's length in bits. Used by fault injection.
    pub fn flip_bit(&mut self, bit: usize) {
        let bit = bit % (self.len() * 8);
        let (index, mask) = (bit / 8, 1u8 << (bit % 8));
        let n = self.data.len() - self.head;
        if index < n {
            self.data[self.head + index] ^= mask;
            // The contents' CRC moves by this byte's term; the carried one does not.
            self.crc_error ^= crc8::term(mask, n - 1 - index);
        } else {
            // A bit of the CRC byte itself.
            self.crc_error ^= mask;
        }
    }

    /// Inverts one bit of the contents (route bytes and body; `bit` is taken modulo their
    /// length in bits) and recomputes the CRC-8 over the changed contents, as a faulty or
    /// malicious switch would: the receiver's CRC check cannot see the change. A CRC that
    /// was already wrong stays wrong (the error term is kept). A packet with no contents
    /// is left as it is.
    pub fn flip_bit_resealed(&mut self, bit: usize) {
        let n = self.data.len() - self.head;
        if n == 0 {
            return;
        }
        let bit = bit % (n * 8);
        self.data[self.head + bit / 8] ^= 1u8 << (bit % 8);
    }

    /// Gives back the packet's storage (for reuse), emptied.
    pub fn into_storage(mut self) -> Vec<u8> {
        self.data.clear();
        self.data
    }
}

impl PartialEq for Packet {
    fn eq(&self, other: &Packet) -> bool {
        self.contents() == other.contents() && self.crc() == other.crc()
    }
}

impl Eq for Packet {}

impl core::fmt::Debug for Packet {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let shown = &self.contents()[..self.contents().len().min(16)];
        f.debug_struct("Packet")
            .field("len", &self.len())
            .field("head", &format_args!("{shown:02x?}"))
            .field("crc_ok", &self.crc_ok())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static BODY: [u8; 6] = [0x03, 0x70, 0x01, 0x02, 0xAA, 0x55];

    /// The verdict by full recomputation over the materialized wire bytes.
    fn recomputed_ok(p: &Packet) -> bool {
        let w = p.to_wire();
        crc8::checksum(&w[..w.len() - 1]) == w[w.len() - 1]
    }

    #[test]
    fn construct() {
        let route = Route::from_ports(&[2, 5]).unwrap();
        let p = Packet::build(&route, &BODY).unwrap();
        let mut expected = vec![0x82, 0x85];
        expected.extend_from_slice(&BODY);
        let crc = crc8::checksum(&expected);
        expected.push(crc);
        assert_eq!(p.to_wire(), expected);
        assert!(p.crc_ok());
        assert_eq!(p.first_byte(), Some(0x82));
        assert_eq!(Packet::from_wire(expected).unwrap(), p);
    }

    #[test]
    fn deconstruct_hop_by_hop() {
        let route = Route::from_ports(&[2, 5]).unwrap();
        let mut p = Packet::build(&route, &BODY).unwrap();
        assert_eq!(p.consume_route_byte(), Ok(0x82));
        assert!(p.crc_ok() && recomputed_ok(&p));
        assert_eq!(p.consume_route_byte(), Ok(0x85));
        assert!(p.crc_ok() && recomputed_ok(&p));
        assert_eq!(p.contents(), &BODY);
        assert_eq!(p, Packet::build(&Route::direct(), &BODY).unwrap());
    }

    #[test]
    fn corruption_survives_a_switch() {
        let route = Route::from_ports(&[1]).unwrap();
        let mut p = Packet::build(&route, &BODY).unwrap();
        p.flip_bit(20);
        assert!(!p.crc_ok());
        p.consume_route_byte().unwrap();
        assert!(!p.crc_ok(), "a bad CRC must stay bad after the switch");
        // What a switch does to the wire bytes: drop the first byte and update the CRC
        // byte by the linear rule, which keeps the mismatch.
        let mut q = Packet::build(&route, &BODY).unwrap();
        q.flip_bit(20);
        let w = q.to_wire();
        let stripped_crc = crc8::strip_leading(w[w.len() - 1], w[0], w.len() - 2);
        let mut hop = w[1..w.len() - 1].to_vec();
        hop.push(stripped_crc);
        assert!(!Packet::from_wire(hop).unwrap().crc_ok());
    }

    #[test]
    fn a_resealed_flip_passes_the_crc_and_changes_the_contents() {
        let p = Packet::build(&Route::direct(), &BODY).unwrap();
        for bit in [0, 7, 8 * BODY.len() - 1, 8 * BODY.len() + 3] {
            let mut q = p.clone();
            q.flip_bit_resealed(bit);
            assert!(q.crc_ok(), "bit {bit}: the CRC-8 was recomputed");
            assert!(recomputed_ok(&q), "bit {bit}");
            assert_ne!(q.contents(), p.contents(), "bit {bit}");
            assert_eq!(q.len(), p.len());
        }
        let mut bad = p.clone();
        bad.flip_bit(3);
        bad.flip_bit_resealed(40);
        assert!(!bad.crc_ok(), "a bad CRC stays bad");
    }

    #[test]
    fn every_single_bit_error_is_detected_as_a_full_recompute_would() {
        let p = Packet::build(&Route::from_ports(&[7]).unwrap(), &BODY).unwrap();
        for bit in 0..p.len() * 8 {
            let mut q = p.clone();
            q.flip_bit(bit);
            assert!(!q.crc_ok(), "bit {bit}");
            assert_eq!(q.crc_ok(), recomputed_ok(&q), "bit {bit}");
            // Parsing the corrupted wire bytes gives the same verdict.
            assert!(!Packet::from_wire(q.to_wire()).unwrap().crc_ok());
        }
    }

    #[test]
    fn tracked_verdicts_equal_recomputed_ones_under_any_changes() {
        // Pseudo-random packets, flips and hops: the kept error term always agrees with a
        // full recomputation.
        let mut x: u64 = 0x1234_5678;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..2000 {
            let len = (next() % 300) as usize;
            let body: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            let hops = (next() % 4) as usize;
            let route = Route::from_ports(&vec![3; hops]).unwrap();
            let mut p = Packet::build(&route, &body).unwrap();
            for _ in 0..(next() % 4) {
                if next() % 2 == 0 {
                    p.flip_bit(next() as usize);
                } else {
                    let _ = p.consume_route_byte();
                }
                assert_eq!(p.crc_ok(), recomputed_ok(&p));
            }
        }
    }

    #[test]
    fn impossible_lengths() {
        assert_eq!(Packet::from_wire(vec![]), Err(PacketError::Empty));
        assert_eq!(
            Packet::from_wire(vec![0; MAX_WIRE_LEN + 1]),
            Err(PacketError::TooLong {
                len: MAX_WIRE_LEN + 1
            })
        );
        assert!(Packet::from_wire(vec![0; MAX_WIRE_LEN]).is_ok());
        assert_eq!(
            Packet::seal(vec![0; MAX_WIRE_LEN]),
            Err(PacketError::TooLong {
                len: MAX_WIRE_LEN + 1
            })
        );
        let mut crc_only = Packet::from_wire(vec![0]).unwrap();
        assert_eq!(crc_only.contents(), &[] as &[u8]);
        assert_eq!(crc_only.consume_route_byte(), Err(PacketError::NoRouteByte));
        assert!(crc_only.crc_ok(), "the CRC of nothing is zero");
    }
}
