//! What directed sends put on the wire and in SRAM (seed 001, §4.2.2): the directed header
//! after the frame header, and the window entry the receiving host writes.
//!
//! ```text
//!  frame header (type, subtype 2, window id) | key (4) | offset (4) | bytes
//!  window entry: VALID | KEY | HOST_HI | HOST_LO | PITCH | BYTES_PER_LINE | LINES | pad
//! ```
//!
//! The offset counts bytes of the window's packed image (`bytes_per_line * lines`): byte
//! `o` lands at `base + (o / bytes_per_line) * pitch + o % bytes_per_line`.

use thiserror::Error;

mod field {
    pub type Field = core::ops::Range<usize>;
    pub const KEY: Field = 0..4;
    pub const OFFSET: Field = 4..8;
    pub const DATA: usize = 8;
}

/// Length of the directed header.
pub const DIRECTED_HEADER_LEN: usize = field::DATA;

/// Bytes too short for a directed header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("{0} bytes cannot hold the 8-byte directed header")]
pub struct DirectedTruncated(pub usize);

/// A view of a directed packet's payload (after the frame header).
#[derive(Debug, Clone, Copy)]
pub struct DirectedPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> DirectedPacket<T> {
    /// Wraps bytes after checking there is a whole header.
    pub fn new_checked(buffer: T) -> Result<DirectedPacket<T>, DirectedTruncated> {
        let len = buffer.as_ref().len();
        if len < DIRECTED_HEADER_LEN {
            return Err(DirectedTruncated(len));
        }
        Ok(DirectedPacket { buffer })
    }

    fn word(&self, f: field::Field) -> u32 {
        let b = &self.buffer.as_ref()[f];
        u32::from_be_bytes([b[0], b[1], b[2], b[3]])
    }

    /// The window's key as the sender names it.
    pub fn key(&self) -> u32 {
        self.word(field::KEY)
    }

    /// Byte offset into the window's packed image.
    pub fn offset(&self) -> u32 {
        self.word(field::OFFSET)
    }

    /// The bytes to place.
    pub fn data(&self) -> &[u8] {
        &self.buffer.as_ref()[field::DATA..]
    }
}

/// A parsed directed header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirectedRepr {
    /// The window's key.
    pub key: u32,
    /// Byte offset into the window's packed image.
    pub offset: u32,
}

impl DirectedRepr {
    /// Reads the header.
    pub fn parse<T: AsRef<[u8]>>(p: &DirectedPacket<T>) -> DirectedRepr {
        DirectedRepr {
            key: p.key(),
            offset: p.offset(),
        }
    }

    /// The header as bytes.
    pub fn to_bytes(&self) -> [u8; DIRECTED_HEADER_LEN] {
        let mut b = [0u8; DIRECTED_HEADER_LEN];
        b[field::KEY].copy_from_slice(&self.key.to_be_bytes());
        b[field::OFFSET].copy_from_slice(&self.offset.to_be_bytes());
        b
    }
}

/// A window's geometry: where its lines are in the receiver's host memory (seed 001,
/// §4.2.2: screen and window size and depth, frame-buffer address).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WindowGeometry {
    /// Distance in bytes between the starts of two lines.
    pub pitch: u32,
    /// Bytes written per line (at most the pitch).
    pub bytes_per_line: u32,
    /// Number of lines.
    pub lines: u32,
}

impl WindowGeometry {
    /// Bytes of the packed image (`bytes_per_line * lines`), if it fits in 32 bits.
    pub fn image_len(&self) -> Option<u32> {
        self.bytes_per_line.checked_mul(self.lines)
    }

    /// Bytes of host memory the window spans from its base, if it is well formed: at
    /// least one line of at least one byte, lines no longer than the pitch.
    pub fn span(&self) -> Option<u64> {
        if self.lines == 0 || self.bytes_per_line == 0 || self.bytes_per_line > self.pitch {
            return None;
        }
        self.image_len()?;
        Some(u64::from(self.pitch) * u64::from(self.lines - 1) + u64::from(self.bytes_per_line))
    }

    /// The pieces `[offset, offset + len)` of the packed image fall into, as (byte offset
    /// from the window's base, length), at most `max` of them; `None` if the range leaves
    /// the image or needs more pieces.
    pub fn pieces(
        &self,
        offset: u32,
        len: u32,
        max: usize,
    ) -> Option<smallvec::SmallVec<[(u64, u32); 32]>> {
        self.span()?;
        let end = offset.checked_add(len)?;
        if end > self.image_len()? {
            return None;
        }
        let mut out = smallvec::SmallVec::new();
        let mut at = offset;
        while at < end {
            if out.len() == max {
                return None;
            }
            let (line, col) = (at / self.bytes_per_line, at % self.bytes_per_line);
            let n = (self.bytes_per_line - col).min(end - at);
            out.push((u64::from(line) * u64::from(self.pitch) + u64::from(col), n));
            at += n;
        }
        Some(out)
    }
}

/// Word offsets in a window entry.
pub mod window_entry {
    /// 1 while the window is registered.
    pub const VALID: u32 = 0;
    /// The key a sender must name.
    pub const KEY: u32 = 4;
    /// High 32 bits of the base's bus address.
    pub const HOST_HI: u32 = 8;
    /// Low 32 bits.
    pub const HOST_LO: u32 = 12;
    /// Line pitch.
    pub const PITCH: u32 = 16;
    /// Bytes per line.
    pub const BYTES_PER_LINE: u32 = 20;
    /// Lines.
    pub const LINES: u32 = 24;
}

/// A window entry as the host writes it and the MCP reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WindowRepr {
    /// Whether the entry is in use.
    pub valid: bool,
    /// The key.
    pub key: u32,
    /// Bus address of the first line.
    pub host: u64,
    /// The geometry.
    pub geometry: WindowGeometry,
}

impl WindowRepr {
    /// Bytes of an entry (the pad word included).
    pub const LEN: usize = 32;

    /// Reads an entry; every value taken as it is (the MCP checks the geometry).
    pub fn parse(b: &[u8]) -> Result<WindowRepr, crate::hcb::EntryTruncated> {
        if b.len() < Self::LEN {
            return Err(crate::hcb::EntryTruncated {
                len: b.len(),
                need: Self::LEN,
            });
        }
        let w = |at: u32| {
            let at = at as usize;
            u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
        };
        Ok(WindowRepr {
            valid: w(window_entry::VALID) == 1,
            key: w(window_entry::KEY),
            host: (u64::from(w(window_entry::HOST_HI)) << 32) | u64::from(w(window_entry::HOST_LO)),
            geometry: WindowGeometry {
                pitch: w(window_entry::PITCH),
                bytes_per_line: w(window_entry::BYTES_PER_LINE),
                lines: w(window_entry::LINES),
            },
        })
    }

    /// The entry as bytes.
    pub fn to_bytes(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        let mut put = |at: u32, v: u32| {
            b[at as usize..at as usize + 4].copy_from_slice(&v.to_be_bytes());
        };
        put(window_entry::VALID, u32::from(self.valid));
        put(window_entry::KEY, self.key);
        put(window_entry::HOST_HI, (self.host >> 32) as u32);
        put(window_entry::HOST_LO, self.host as u32);
        put(window_entry::PITCH, self.geometry.pitch);
        put(window_entry::BYTES_PER_LINE, self.geometry.bytes_per_line);
        put(window_entry::LINES, self.geometry.lines);
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static PACKET: [u8; 11] = [0xCA, 0xFE, 0x00, 0x01, 0, 0, 0x10, 0, 1, 2, 3];

    #[test]
    fn directed_header_deconstruct_construct_and_impossible_len() {
        let p = DirectedPacket::new_checked(&PACKET[..]).unwrap();
        let r = DirectedRepr::parse(&p);
        assert_eq!(
            r,
            DirectedRepr {
                key: 0xCAFE_0001,
                offset: 0x1000
            }
        );
        assert_eq!(p.data(), &[1, 2, 3]);
        assert_eq!(r.to_bytes(), PACKET[..8]);
        for n in 0..8 {
            assert_eq!(
                DirectedPacket::new_checked(&PACKET[..n]).unwrap_err(),
                DirectedTruncated(n)
            );
        }
    }

    #[test]
    fn window_entry_round_trips_and_refuses_short_bytes() {
        let w = WindowRepr {
            valid: true,
            key: 7,
            host: 0x2_0000_4000,
            geometry: WindowGeometry {
                pitch: 4096,
                bytes_per_line: 3000,
                lines: 10,
            },
        };
        assert_eq!(WindowRepr::parse(&w.to_bytes()).unwrap(), w);
        assert!(WindowRepr::parse(&w.to_bytes()[..31]).is_err());
    }

    #[test]
    fn pieces_follow_lines_and_refuse_overruns() {
        let g = WindowGeometry {
            pitch: 100,
            bytes_per_line: 40,
            lines: 3,
        };
        assert_eq!(g.span(), Some(240));
        assert_eq!(
            g.pieces(30, 60, 32).unwrap().as_slice(),
            &[(30, 10), (100, 40), (200, 10)]
        );
        assert_eq!(g.pieces(0, 120, 32).unwrap().len(), 3);
        assert!(
            g.pieces(1, 120, 32).is_none(),
            "one byte past the last line"
        );
        assert!(g.pieces(u32::MAX, 2, 32).is_none(), "offset overflow");
        assert!(
            g.pieces(0, 120, 2).is_none(),
            "too many pieces for one chain"
        );
        let bad = WindowGeometry {
            pitch: 10,
            bytes_per_line: 40,
            lines: 3,
        };
        assert_eq!(bad.span(), None, "lines longer than the pitch");
        assert_eq!(WindowGeometry { lines: 0, ..g }.span(), None);
    }
}
