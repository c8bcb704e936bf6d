//! The frame the control program puts on the wire (seed 000, Frame Structure, Figure 2).
//!
//! ```text
//!  route bytes (consumed by switches) | type (2) | subtype (1) | chan (1) | payload
//! ```
//!
//! The type is CRL's `0x0370`; the only subtype is `FST_API0_DATA` (1); `chan` is the
//! receiving process's channel. The route is not part of the frame: it is sent ahead of
//! it and eaten by the switches.

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

    /// The payload.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD]
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
}
