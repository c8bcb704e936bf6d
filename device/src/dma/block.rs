//! A DMA control block in SRAM (seed 002, §3.1), as seen by the big-endian LANai.
//!
//! ```text
//!  0  next   pointer to the next block | I (bit 2) | T (bit 1) | D (bit 0)
//!  4  spare  (16 bits, unused)
//!  6  csum   16-bit ones-complement sum of the data moved, written back
//!  8  len    byte count
//! 12  lar    LANai (SRAM) address
//! 16  eah    high 32 bits of the host (PCI) address
//! 20  eal    low 32 bits of the host address
//! ```
//!
//! The flag bits live in the low bits of `next`, so every block is 8-byte aligned.

use thiserror::Error;

mod field {
    pub type Field = core::ops::Range<usize>;
    pub const NEXT: Field = 0..4;
    pub const SPARE: Field = 4..6;
    pub const CSUM: Field = 6..8;
    pub const LEN: Field = 8..12;
    pub const LAR: Field = 12..16;
    pub const EAH: Field = 16..20;
    pub const EAL: Field = 20..24;
}

/// Size of a control block.
pub const BLOCK_LEN: usize = field::EAL.end;
/// Required alignment of a control block.
pub const BLOCK_ALIGN: u32 = 8;

/// Bit 0 of `next`: direction, 1 = host → LANai, 0 = LANai → host.
pub const FLAG_HOST_TO_LANAI: u32 = 0x1;
/// Bit 1 of `next`: terminal; the engine does not execute this block and sleeps on it.
pub const FLAG_TERMINAL: u32 = 0x2;
/// Bit 2 of `next`: set WAKE_INT when this block completes.
pub const FLAG_WAKE: u32 = 0x4;
/// The flag bits of `next`.
pub const FLAGS: u32 = 0x7;

/// Which way a block moves data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Host memory → SRAM (`E2L`).
    HostToLanai,
    /// SRAM → host memory (`L2E`).
    LanaiToHost,
}

/// A buffer shorter than a control block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("{len} bytes cannot hold a {BLOCK_LEN}-byte dma control block")]
pub struct Truncated {
    /// Bytes given.
    pub len: usize,
}

/// A view of a control block over bytes.
#[derive(Debug, Clone, Copy)]
pub struct DmaBlock<T: AsRef<[u8]>> {
    buffer: T,
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

impl<T: AsRef<[u8]>> DmaBlock<T> {
    /// Wraps bytes after checking their length.
    pub fn new_checked(buffer: T) -> Result<DmaBlock<T>, Truncated> {
        let len = buffer.as_ref().len();
        if len < BLOCK_LEN {
            return Err(Truncated { len });
        }
        Ok(DmaBlock { buffer })
    }

    /// The raw `next` word, flags included.
    pub fn next_word(&self) -> u32 {
        be32(&self.buffer.as_ref()[field::NEXT])
    }

    /// The next block's address (flags masked off).
    pub fn next_addr(&self) -> u32 {
        self.next_word() & !FLAGS
    }

    /// Whether the block is terminal: T set, or the whole `next` word zero.
    pub fn is_terminal(&self) -> bool {
        let next = self.next_word();
        next == 0 || next & FLAG_TERMINAL != 0
    }

    /// Whether WAKE_INT is raised on completion.
    pub fn wakes(&self) -> bool {
        self.next_word() & FLAG_WAKE != 0
    }

    /// The direction.
    pub fn direction(&self) -> Direction {
        if self.next_word() & FLAG_HOST_TO_LANAI != 0 {
            Direction::HostToLanai
        } else {
            Direction::LanaiToHost
        }
    }

    /// The written-back checksum.
    pub fn csum(&self) -> u16 {
        let b = &self.buffer.as_ref()[field::CSUM];
        u16::from_be_bytes([b[0], b[1]])
    }

    /// The spare halfword.
    pub fn spare(&self) -> u16 {
        let b = &self.buffer.as_ref()[field::SPARE];
        u16::from_be_bytes([b[0], b[1]])
    }

    /// Byte count.
    pub fn len(&self) -> u32 {
        be32(&self.buffer.as_ref()[field::LEN])
    }

    /// Whether the byte count is zero (the engine skips such blocks).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// SRAM address.
    pub fn lar(&self) -> u32 {
        be32(&self.buffer.as_ref()[field::LAR])
    }

    /// 64-bit host address.
    pub fn host_addr(&self) -> u64 {
        let b = self.buffer.as_ref();
        (u64::from(be32(&b[field::EAH])) << 32) | u64::from(be32(&b[field::EAL]))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> DmaBlock<T> {
    /// Sets the raw `next` word.
    pub fn set_next_word(&mut self, value: u32) {
        self.buffer.as_mut()[field::NEXT].copy_from_slice(&value.to_be_bytes());
    }

    /// Sets the checksum.
    pub fn set_csum(&mut self, value: u16) {
        self.buffer.as_mut()[field::CSUM].copy_from_slice(&value.to_be_bytes());
    }
}

/// The fields of a control block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DmaBlockRepr {
    /// Address of the next block (8-aligned).
    pub next: u32,
    /// Direction of this block.
    pub direction: Direction,
    /// Terminal bit.
    pub terminal: bool,
    /// Wake bit.
    pub wake: bool,
    /// Checksum field.
    pub csum: u16,
    /// Byte count.
    pub len: u32,
    /// SRAM address.
    pub lar: u32,
    /// Host address.
    pub host_addr: u64,
}

impl DmaBlockRepr {
    /// Parses a block.
    pub fn parse<T: AsRef<[u8]>>(block: &DmaBlock<T>) -> DmaBlockRepr {
        let word = block.next_word();
        DmaBlockRepr {
            next: word & !FLAGS,
            direction: block.direction(),
            terminal: word & FLAG_TERMINAL != 0,
            wake: block.wakes(),
            csum: block.csum(),
            len: block.len(),
            lar: block.lar(),
            host_addr: block.host_addr(),
        }
    }

    /// The `next` word this representation encodes.
    pub fn next_word(&self) -> u32 {
        (self.next & !FLAGS)
            | if self.direction == Direction::HostToLanai {
                FLAG_HOST_TO_LANAI
            } else {
                0
            }
            | if self.terminal { FLAG_TERMINAL } else { 0 }
            | if self.wake { FLAG_WAKE } else { 0 }
    }

    /// Writes the block into `out` (at least [`BLOCK_LEN`] bytes; the spare field is zeroed).
    pub fn emit(&self, out: &mut [u8]) -> Result<(), Truncated> {
        if out.len() < BLOCK_LEN {
            return Err(Truncated { len: out.len() });
        }
        out[field::NEXT].copy_from_slice(&self.next_word().to_be_bytes());
        out[field::SPARE].copy_from_slice(&[0, 0]);
        out[field::CSUM].copy_from_slice(&self.csum.to_be_bytes());
        out[field::LEN].copy_from_slice(&self.len.to_be_bytes());
        out[field::LAR].copy_from_slice(&self.lar.to_be_bytes());
        out[field::EAH].copy_from_slice(&((self.host_addr >> 32) as u32).to_be_bytes());
        out[field::EAL].copy_from_slice(&(self.host_addr as u32).to_be_bytes());
        Ok(())
    }

    /// The block as bytes.
    pub fn to_bytes(&self) -> [u8; BLOCK_LEN] {
        let mut out = [0u8; BLOCK_LEN];
        self.emit(&mut out).expect("BLOCK_LEN bytes");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static BYTES: [u8; 24] = [
        0x00, 0x00, 0x10, 0x05, // next 0x1000 | wake | host->lanai
        0x00, 0x00, // spare
        0xab, 0xcd, // csum
        0x00, 0x00, 0x20, 0x00, // len 8192
        0x00, 0x04, 0x00, 0x00, // lar 0x40000
        0x00, 0x00, 0x00, 0x01, // eah
        0x80, 0x00, 0x00, 0x10, // eal
    ];

    fn repr() -> DmaBlockRepr {
        DmaBlockRepr {
            next: 0x1000,
            direction: Direction::HostToLanai,
            terminal: false,
            wake: true,
            csum: 0xabcd,
            len: 8192,
            lar: 0x40000,
            host_addr: 0x1_8000_0010,
        }
    }

    #[test]
    fn deconstruct() {
        let b = DmaBlock::new_checked(&BYTES[..]).unwrap();
        assert_eq!(b.next_addr(), 0x1000);
        assert!(b.wakes() && !b.is_terminal());
        assert_eq!(b.direction(), Direction::HostToLanai);
        assert_eq!(
            (b.csum(), b.spare(), b.len(), b.lar()),
            (0xabcd, 0, 8192, 0x40000)
        );
        assert_eq!(b.host_addr(), 0x1_8000_0010);
    }

    #[test]
    fn parse_emit_round_trip() {
        assert_eq!(
            DmaBlockRepr::parse(&DmaBlock::new_checked(&BYTES[..]).unwrap()),
            repr()
        );
        assert_eq!(repr().to_bytes(), BYTES);
    }

    #[test]
    fn terminal_by_bit_or_by_zero_word() {
        let mut bytes = BYTES;
        let mut b = DmaBlock::new_checked(&mut bytes[..]).unwrap();
        b.set_next_word(0x1000 | FLAG_TERMINAL);
        assert!(b.is_terminal());
        b.set_next_word(0);
        assert!(b.is_terminal(), "an all-zero next word ends the chain");
        b.set_csum(0x1234);
        assert_eq!(b.csum(), 0x1234);
    }

    #[test]
    fn impossible_len() {
        assert_eq!(
            DmaBlock::new_checked(&BYTES[..23]).unwrap_err(),
            Truncated { len: 23 }
        );
        assert_eq!(repr().emit(&mut [0u8; 10]), Err(Truncated { len: 10 }));
    }
}
