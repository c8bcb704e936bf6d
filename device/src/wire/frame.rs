//! The Myrinet packet body as a host receives it: a 16-bit packet type, then the rest.
//!
//! Seed 000, Frame Structure: once the switches have consumed the route, a packet starts
//! with a two-byte type assigned by Myricom so that several protocols can share one
//! network (CRL's is `0x0370`). Everything after the type belongs to that protocol. The
//! control program's own header (subtype, channel) is parsed in the `mcp` crate.

use thiserror::Error;

mod field {
    pub type Field = core::ops::Range<usize>;
    pub type Rest = core::ops::RangeFrom<usize>;
    pub const TYPE: Field = 0..2;
    pub const PAYLOAD: Rest = 2..;
}

/// Length of the type field that starts every body.
pub const HEADER_LEN: usize = field::PAYLOAD.start;

/// The packet type Myricom assigned to CRL (seed 000, Frame Structure).
pub const TYPE_CRL: u16 = 0x0370;

/// A body too short to hold the type field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("body of {len} bytes is shorter than the {HEADER_LEN}-byte type field")]
pub struct Truncated {
    /// Length of the body.
    pub len: usize,
}

/// A read/write view of a Myrinet body over any buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Frame<T> {
    /// Wraps a buffer without checking it; accessors may panic if it is too short.
    pub const fn new_unchecked(buffer: T) -> Frame<T> {
        Frame { buffer }
    }

    /// Wraps a buffer after checking it is long enough for the type field.
    pub fn new_checked(buffer: T) -> Result<Frame<T>, Truncated> {
        let len = buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(Truncated { len });
        }
        Ok(Frame { buffer })
    }

    /// The packet type.
    pub fn packet_type(&self) -> u16 {
        let b = &self.buffer.as_ref()[field::TYPE];
        u16::from_be_bytes([b[0], b[1]])
    }

    /// Everything after the type.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD]
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Frame<T> {
    /// Sets the packet type.
    pub fn set_packet_type(&mut self, value: u16) {
        self.buffer.as_mut()[field::TYPE].copy_from_slice(&value.to_be_bytes());
    }

    /// Everything after the type, writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::PAYLOAD]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static BYTES: [u8; 5] = [0x03, 0x70, 0x01, 0x04, 0xFF];

    #[test]
    fn deconstruct() {
        let f = Frame::new_checked(&BYTES[..]).unwrap();
        assert_eq!(f.packet_type(), TYPE_CRL);
        assert_eq!(f.payload(), &[0x01, 0x04, 0xFF]);
    }

    #[test]
    fn construct() {
        let mut buf = [0u8; 5];
        let mut f = Frame::new_unchecked(&mut buf[..]);
        f.set_packet_type(TYPE_CRL);
        f.payload_mut().copy_from_slice(&[0x01, 0x04, 0xFF]);
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn impossible_len() {
        assert_eq!(Frame::new_checked(&BYTES[..1]), Err(Truncated { len: 1 }));
        assert!(
            Frame::new_checked(&BYTES[..2])
                .unwrap()
                .payload()
                .is_empty()
        );
    }
}
