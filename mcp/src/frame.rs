//! The frame the control program puts on the wire (seed 000, Frame Structure, Figure 2).
//!
//! ```text
//!  route bytes (consumed by switches) | type (2) | subtype (1) | chan (1) | payload
//! ```
//!
//! The type is CRL's `0x0370`; the only subtype is `FST_API0_DATA` (1); `chan` is the
//! receiving process's channel. The route is not part of the frame: it is sent ahead of
//! it and eaten by the switches.
//!
//! A data frame ([`SUBTYPE_DATA`]) ends with a [`TRAILER_LEN`]-byte trailer after its
//! payload (a wire change of issue 17):
//!
//! ```text
//!  type (2) | subtype (1) | chan (1) | payload | sender checksum (2, big-endian)
//! ```
//!
//! The sender checksum is the 16-bit ones-complement sum (not complemented, seed 002
//! §3.2) of the payload as it entered the sending board: the DMA engine's written-back
//! sum of the bytes it moved from host memory, combined with the sum the LANai computes
//! in software of any bytes the host wrote by PIO (or the LANai copied from the SRAM
//! workspace). It is a trailer, not a header field, because an overlapped (cut-through)
//! send puts the header on the network before the host DMA that produces the sum has
//! finished. The receiving MCP hands it to the host with the DMA engine's sum of the
//! bytes that landed in host memory ([`crate::hcb::CompletionRepr`]). Directed and
//! Trapeze frames (seeds 001 and 003) carry no trailer.

use myri_device::wire::TYPE_CRL;
use thiserror::Error;

mod field {
    pub type Field = core::ops::Range<usize>;
    pub type Rest = core::ops::RangeFrom<usize>;
    pub const TYPE: Field = 0..2;
    pub const SUBTYPE: usize = 2;
    pub const CHAN: usize = 3;
    pub const PAYLOAD: Rest = 4..;
}

/// Length of the frame header.
pub const HEADER_LEN: usize = field::PAYLOAD.start;
/// `FST_API0_DATA`.
pub const SUBTYPE_DATA: u8 = 1;
/// A directed send into a receiver's window (seed 001): no receive event.
pub const SUBTYPE_DIRECTED: u8 = 2;
/// A Trapeze message (seed 003): into the endpoint's receive ring.
pub const SUBTYPE_TRAPEZE: u8 = 3;

/// Bytes of the trailer a data frame ends with: the sender checksum.
pub const TRAILER_LEN: usize = 2;

/// Bytes of trailer a frame of `subtype` ends with: [`TRAILER_LEN`] for data frames, none
/// for the others.
pub const fn trailer_len(subtype: u8) -> usize {
    if subtype == SUBTYPE_DATA {
        TRAILER_LEN
    } else {
        0
    }
}

/// The frame header of a packet of `subtype` for channel (or window) `chan`.
pub fn header_bytes(subtype: u8, chan: u8) -> [u8; HEADER_LEN] {
    let t = TYPE_CRL.to_be_bytes();
    [t[0], t[1], subtype, chan]
}

/// Why bytes are not a frame for this control program.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum FrameError {
    /// Shorter than the header.
    #[error("frame of {0} bytes is shorter than the {HEADER_LEN}-byte header")]
    Truncated(usize),
    /// Another protocol's packet type.
    #[error("packet type {0:#06x} is not crl's 0x0370")]
    WrongType(u16),
    /// A subtype this control program does not know.
    #[error("unknown subtype {0}")]
    UnknownSubtype(u8),
}

/// A view of a frame over bytes.
#[derive(Debug, Clone, Copy)]
pub struct ApiFrame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> ApiFrame<T> {
    /// Wraps bytes without checking them.
    pub const fn new_unchecked(buffer: T) -> ApiFrame<T> {
        ApiFrame { buffer }
    }

    /// Wraps bytes after checking the length.
    pub fn new_checked(buffer: T) -> Result<ApiFrame<T>, FrameError> {
        let len = buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(FrameError::Truncated(len));
        }
        Ok(ApiFrame { buffer })
    }

    /// Packet type.
    pub fn packet_type(&self) -> u16 {
        let b = &self.buffer.as_ref()[field::TYPE];
        u16::from_be_bytes([b[0], b[1]])
    }

    /// Subtype.
    pub fn subtype(&self) -> u8 {
        self.buffer.as_ref()[field::SUBTYPE]
    }

    /// Destination channel.
    pub fn chan(&self) -> u8 {
        self.buffer.as_ref()[field::CHAN]
    }

    /// Everything after the header (a data frame's payload and trailer).
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD]
    }

    /// A data frame's payload without its trailer; `None` if the frame is too short to
    /// hold a trailer.
    pub fn data_payload(&self) -> Option<&[u8]> {
        let p = self.payload();
        p.get(..p.len().checked_sub(TRAILER_LEN)?)
    }

    /// A data frame's sender checksum (its last two bytes); `None` if the frame is too
    /// short to hold a trailer.
    pub fn sender_csum(&self) -> Option<u16> {
        let p = self.payload();
        let t = p.get(p.len().checked_sub(TRAILER_LEN)?..)?;
        Some(u16::from_be_bytes([t[0], t[1]]))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ApiFrame<T> {
    /// Sets the packet type.
    pub fn set_packet_type(&mut self, v: u16) {
        self.buffer.as_mut()[field::TYPE].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the subtype.
    pub fn set_subtype(&mut self, v: u8) {
        self.buffer.as_mut()[field::SUBTYPE] = v;
    }

    /// Sets the channel.
    pub fn set_chan(&mut self, v: u8) {
        self.buffer.as_mut()[field::CHAN] = v;
    }
}

/// A parsed frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameRepr {
    /// Destination channel.
    pub chan: u8,
}

impl FrameRepr {
    /// Parses and checks a frame header.
    pub fn parse<T: AsRef<[u8]>>(frame: &ApiFrame<T>) -> Result<FrameRepr, FrameError> {
        if frame.packet_type() != TYPE_CRL {
            return Err(FrameError::WrongType(frame.packet_type()));
        }
        if frame.subtype() != SUBTYPE_DATA {
            return Err(FrameError::UnknownSubtype(frame.subtype()));
        }
        Ok(FrameRepr { chan: frame.chan() })
    }

    /// The header as bytes.
    pub fn to_bytes(&self) -> [u8; HEADER_LEN] {
        let t = TYPE_CRL.to_be_bytes();
        [t[0], t[1], SUBTYPE_DATA, self.chan]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static BYTES: [u8; 7] = [0x03, 0x70, 0x01, 0x05, 0xAA, 0xBB, 0xCC];

    #[test]
    fn deconstruct_and_parse() {
        let f = ApiFrame::new_checked(&BYTES[..]).unwrap();
        assert_eq!((f.packet_type(), f.subtype(), f.chan()), (0x0370, 1, 5));
        assert_eq!(f.payload(), &[0xAA, 0xBB, 0xCC]);
        assert_eq!(FrameRepr::parse(&f), Ok(FrameRepr { chan: 5 }));
    }

    #[test]
    fn construct_and_emit() {
        let mut b = [0u8; 7];
        let mut f = ApiFrame::new_unchecked(&mut b[..]);
        f.set_packet_type(0x0370);
        f.set_subtype(1);
        f.set_chan(5);
        b[4..].copy_from_slice(&[0xAA, 0xBB, 0xCC]);
        assert_eq!(b, BYTES);
        assert_eq!(FrameRepr { chan: 5 }.to_bytes(), BYTES[..4]);
    }

    #[test]
    fn refusals() {
        assert_eq!(
            ApiFrame::new_checked(&BYTES[..3]).unwrap_err(),
            FrameError::Truncated(3)
        );
        let mut b = BYTES;
        b[1] = 0x71;
        assert_eq!(
            FrameRepr::parse(&ApiFrame::new_checked(&b[..]).unwrap()),
            Err(FrameError::WrongType(0x0371))
        );
        let mut b = BYTES;
        b[2] = 9;
        assert_eq!(
            FrameRepr::parse(&ApiFrame::new_checked(&b[..]).unwrap()),
            Err(FrameError::UnknownSubtype(9))
        );
        assert!(
            ApiFrame::new_checked(&BYTES[..4])
                .unwrap()
                .payload()
                .is_empty()
        );
    }

    #[test]
    fn data_trailer() {
        let f = ApiFrame::new_checked(&BYTES[..]).unwrap();
        assert_eq!(f.data_payload(), Some(&[0xAA][..]));
        assert_eq!(f.sender_csum(), Some(0xBBCC));
        let short = ApiFrame::new_checked(&BYTES[..5]).unwrap();
        assert_eq!((short.data_payload(), short.sender_csum()), (None, None));
        assert_eq!(trailer_len(SUBTYPE_DATA), TRAILER_LEN);
        assert_eq!(
            trailer_len(SUBTYPE_DIRECTED) + trailer_len(SUBTYPE_TRAPEZE),
            0
        );
    }
}
