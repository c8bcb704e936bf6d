//! A packet as it travels a link: route bytes still to be consumed, the body, one CRC-8.
//!
//! ```text
//!  +---------+-----+---------+--------------------------+-------+
//!  | route 0 | ... | route n | body (type, payload ...) | CRC-8 |
//!  +---------+-----+---------+--------------------------+-------+
//! ```
//!
//! The CRC-8 covers every byte before it *as the packet is on this link*: when a switch
//! consumes the first route byte it recomputes the CRC ([`Packet::consume_route_byte`]).
//! The receiving port checks it ([`Packet::crc_ok`]).

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
/// Two packets are equal when the same bytes are on the wire.
#[derive(Clone)]
pub struct Packet {
    /// `data[head..]` is on the wire; the last byte is the CRC-8.
    data: Vec<u8>,
    head: usize,
}

impl Packet {
    /// Builds a packet from a checked route and a body, appending the CRC-8.
    pub fn build(route: &Route, body: &[u8]) -> Result<Packet, PacketError> {
        let mut data = Vec::with_capacity(route.len() + body.len() + 1);
        data.extend_from_slice(route.as_bytes());
        data.extend_from_slice(body);
        Packet::seal(data)
    }

    /// Turns `contents` (route bytes and body, as a send engine produced them) into a
    /// packet by appending the CRC-8 over them. The route bytes are not checked: a
    /// control program may send anything, and switches deal with bad route bytes.
    pub fn seal(mut contents: Vec<u8>) -> Result<Packet, PacketError> {
        if contents.len() + 1 > MAX_WIRE_LEN {
            return Err(PacketError::TooLong {
                len: contents.len() + 1,
            });
        }
        let crc = crc8::checksum(&contents);
        contents.push(crc);
        Ok(Packet {
            data: contents,
            head: 0,
        })
    }

    /// Takes bytes exactly as they are on a wire, CRC byte last. The CRC is not checked
    /// here; see [`Packet::crc_ok`].
    pub fn from_wire(bytes: Vec<u8>) -> Result<Packet, PacketError> {
        match bytes.len() {
            0 => Err(PacketError::Empty),
            len if len > MAX_WIRE_LEN => Err(PacketError::TooLong { len }),
            _ => Ok(Packet {
                data: bytes,
                head: 0,
            }),
        }
    }

    /// The bytes on the wire, CRC byte included.
    #[inline]
    pub fn wire(&self) -> &[u8] {
        &self.data[self.head..]
    }

    /// Length on the wire, CRC byte included (always at least 1).
    #[inline]
    pub fn len(&self) -> usize {
        self.data.len() - self.head
    }

    /// Always false: a packet has at least its CRC byte.
    #[inline]
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Everything before the CRC byte: remaining route bytes, then the body.
    #[inline]
    pub fn contents(&self) -> &[u8] {
        &self.data[self.head..self.data.len() - 1]
    }

    /// The CRC-8 byte as carried.
    #[inline]
    pub fn crc(&self) -> u8 {
        self.data[self.data.len() - 1]
    }

    /// Whether the carried CRC-8 matches the contents.
    pub fn crc_ok(&self) -> bool {
        crc8::checksum(self.contents()) == self.crc()
    }

    /// The first byte of the contents: the next route byte, or the first body byte.
    #[inline]
    pub fn first_byte(&self) -> Option<u8> {
        self.contents().first().copied()
    }

    /// Removes the first route byte, as a switch does, and recomputes the CRC-8 (in
    /// constant time). A packet whose CRC was already wrong stays wrong.
    pub fn consume_route_byte(&mut self) -> Result<u8, PacketError> {
        if self.len() < 2 {
            return Err(PacketError::NoRouteByte);
        }
        let first = self.data[self.head];
        let rest_len = self.len() - 2;
        let last = self.data.len() - 1;
        self.data[last] = crc8::strip_leading(self.data[last], first, rest_len);
        self.head += 1;
        Ok(first)
    }

    /// Inverts one bit of the wire bytes (CRC byte included); `bit` is taken modulo the
    /// packet's length in bits. Used by fault injection.
    pub fn flip_bit(&mut self, bit: usize) {
        let bit = bit % (self.len() * 8);
        let index = self.head + bit / 8;
        self.data[index] ^= 1 << (bit % 8);
    }

    /// Gives back the packet's storage (for reuse), emptied.
    pub fn into_storage(mut self) -> Vec<u8> {
        self.data.clear();
        self.data
    }
}

impl PartialEq for Packet {
    fn eq(&self, other: &Packet) -> bool {
        self.wire() == other.wire()
    }
}

impl Eq for Packet {}

impl core::fmt::Debug for Packet {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let shown = &self.wire()[..self.len().min(16)];
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

    #[test]
    fn construct() {
        let route = Route::from_ports(&[2, 5]).unwrap();
        let p = Packet::build(&route, &BODY).unwrap();
        let mut expected = vec![0x82, 0x85];
        expected.extend_from_slice(&BODY);
        let crc = crc8::checksum(&expected);
        expected.push(crc);
        assert_eq!(p.wire(), &expected[..]);
        assert!(p.crc_ok());
        assert_eq!(p.first_byte(), Some(0x82));
    }

    #[test]
    fn deconstruct_hop_by_hop() {
        let route = Route::from_ports(&[2, 5]).unwrap();
        let mut p = Packet::build(&route, &BODY).unwrap();
        assert_eq!(p.consume_route_byte(), Ok(0x82));
        assert!(p.crc_ok());
        assert_eq!(p.consume_route_byte(), Ok(0x85));
        assert!(p.crc_ok());
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
    }

    #[test]
    fn every_single_bit_error_is_detected() {
        let p = Packet::build(&Route::from_ports(&[7]).unwrap(), &BODY).unwrap();
        for bit in 0..p.len() * 8 {
            let mut q = p.clone();
            q.flip_bit(bit);
            assert!(!q.crc_ok(), "bit {bit}");
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
