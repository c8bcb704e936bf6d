//! The LANai's local memory (seed 002, §2.2): 2, 4 or 8 MiB of big-endian SRAM.
//!
//! Every access is bounds-checked with `checked_add` and word accesses must be aligned, as
//! on the LANai; a bad address is a typed [`SramError`], never a panic. The host reaches
//! SRAM through the PCI window (see [`crate::board`]); the control program reaches it
//! directly.

use thiserror::Error;

/// The sizes a PCI64 board is built with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SramSize {
    /// 2 MiB (the `-2` product codes).
    Mib2,
    /// 4 MiB (the `-4` product codes).
    Mib4,
    /// 8 MiB (the `-8` product codes, and the most the PCI window maps).
    Mib8,
}

impl SramSize {
    /// Size in bytes.
    pub const fn bytes(self) -> u32 {
        match self {
            SramSize::Mib2 => 2 << 20,
            SramSize::Mib4 => 4 << 20,
            SramSize::Mib8 => 8 << 20,
        }
    }

    /// The size with this many bytes, if a board is built with it.
    pub const fn from_bytes(bytes: u32) -> Option<SramSize> {
        match bytes {
            0x20_0000 => Some(SramSize::Mib2),
            0x40_0000 => Some(SramSize::Mib4),
            0x80_0000 => Some(SramSize::Mib8),
            _ => None,
        }
    }
}

/// A refused SRAM access.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum SramError {
    /// The range does not lie inside the SRAM.
    #[error("sram access of {len} bytes at {addr:#x} is outside the {size:#x}-byte sram")]
    OutOfBounds {
        /// First byte asked for.
        addr: u32,
        /// Bytes asked for.
        len: usize,
        /// Size of the SRAM.
        size: u32,
    },
    /// A 16- or 32-bit access not aligned to its size.
    #[error("sram access at {addr:#x} is not aligned to {align} bytes")]
    Misaligned {
        /// Address asked for.
        addr: u32,
        /// Required alignment.
        align: u32,
    },
}

/// The board's SRAM.
pub struct Sram {
    bytes: Box<[u8]>,
}

impl Sram {
    /// Zeroed SRAM of the given size.
    pub fn new(size: SramSize) -> Sram {
        Sram {
            bytes: vec![0; size.bytes() as usize].into_boxed_slice(),
        }
    }

    /// Size in bytes.
    #[inline]
    pub fn len(&self) -> u32 {
        self.bytes.len() as u32
    }

    /// Always false: the smallest SRAM is 2 MiB.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The byte range `[addr, addr + len)`, checked.
    #[inline]
    fn range(&self, addr: u32, len: usize) -> Result<core::ops::Range<usize>, SramError> {
        let start = addr as usize;
        match start.checked_add(len) {
            Some(end) if end <= self.bytes.len() => Ok(start..end),
            _ => Err(self.out_of_bounds(addr, len)),
        }
    }

    /// The error of a range outside the SRAM. Cold, so that the branch to it is laid out
    /// away from the accesses inlined into the board's and the control program's hot
    /// paths.
    #[cold]
    fn out_of_bounds(&self, addr: u32, len: usize) -> SramError {
        SramError::OutOfBounds {
            addr,
            len,
            size: self.len(),
        }
    }

    #[inline]
    fn aligned(addr: u32, align: u32) -> Result<(), SramError> {
        if !addr.is_multiple_of(align) {
            return Err(Self::misaligned(addr, align));
        }
        Ok(())
    }

    /// The error of a misaligned word access; cold, as [`Sram::out_of_bounds`].
    #[cold]
    fn misaligned(addr: u32, align: u32) -> SramError {
        SramError::Misaligned { addr, align }
    }

    /// Whether `[addr, addr + len)` lies inside the SRAM.
    pub fn contains(&self, addr: u32, len: usize) -> bool {
        self.range(addr, len).is_ok()
    }

    /// Reads the big-endian 32-bit word at `addr` (4-byte aligned).
    #[inline]
    pub fn read_u32(&self, addr: u32) -> Result<u32, SramError> {
        Self::aligned(addr, 4)?;
        let r = self.range(addr, 4)?;
        let b = &self.bytes[r];
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// Writes the big-endian 32-bit word at `addr` (4-byte aligned).
    #[inline]
    pub fn write_u32(&mut self, addr: u32, value: u32) -> Result<(), SramError> {
        Self::aligned(addr, 4)?;
        let r = self.range(addr, 4)?;
        self.bytes[r].copy_from_slice(&value.to_be_bytes());
        Ok(())
    }

    /// Reads the big-endian 16-bit halfword at `addr` (2-byte aligned).
    #[inline]
    pub fn read_u16(&self, addr: u32) -> Result<u16, SramError> {
        Self::aligned(addr, 2)?;
        let r = self.range(addr, 2)?;
        let b = &self.bytes[r];
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    /// Writes the big-endian 16-bit halfword at `addr` (2-byte aligned).
    #[inline]
    pub fn write_u16(&mut self, addr: u32, value: u16) -> Result<(), SramError> {
        Self::aligned(addr, 2)?;
        let r = self.range(addr, 2)?;
        self.bytes[r].copy_from_slice(&value.to_be_bytes());
        Ok(())
    }

    /// Reads the byte at `addr`.
    #[inline]
    pub fn read_u8(&self, addr: u32) -> Result<u8, SramError> {
        let r = self.range(addr, 1)?;
        Ok(self.bytes[r.start])
    }

    /// Writes the byte at `addr`.
    #[inline]
    pub fn write_u8(&mut self, addr: u32, value: u8) -> Result<(), SramError> {
        let r = self.range(addr, 1)?;
        self.bytes[r.start] = value;
        Ok(())
    }

    /// The bytes `[addr, addr + len)`.
    #[inline]
    pub fn slice(&self, addr: u32, len: usize) -> Result<&[u8], SramError> {
        let r = self.range(addr, len)?;
        Ok(&self.bytes[r])
    }

    /// The bytes `[addr, addr + len)`, writable.
    #[inline]
    pub fn slice_mut(&mut self, addr: u32, len: usize) -> Result<&mut [u8], SramError> {
        let r = self.range(addr, len)?;
        Ok(&mut self.bytes[r])
    }

    /// Copies `data` into SRAM at `addr`.
    #[inline]
    pub fn write(&mut self, addr: u32, data: &[u8]) -> Result<(), SramError> {
        self.slice_mut(addr, data.len())?.copy_from_slice(data);
        Ok(())
    }

    /// Copies SRAM at `addr` into `out`.
    #[inline]
    pub fn read(&self, addr: u32, out: &mut [u8]) -> Result<(), SramError> {
        out.copy_from_slice(self.slice(addr, out.len())?);
        Ok(())
    }

    /// Copies `len` bytes from `src` to `dst` within SRAM (the ranges may overlap).
    pub fn copy_within(&mut self, src: u32, dst: u32, len: usize) -> Result<(), SramError> {
        let from = self.range(src, len)?;
        let to = self.range(dst, len)?;
        self.bytes.copy_within(from, to.start);
        Ok(())
    }

    /// Sets `[addr, addr + len)` to `value`.
    pub fn fill(&mut self, addr: u32, len: usize, value: u8) -> Result<(), SramError> {
        self.slice_mut(addr, len)?.fill(value);
        Ok(())
    }

    /// The whole SRAM.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Zeroes the whole SRAM (board reset).
    pub fn clear(&mut self) {
        self.bytes.fill(0);
    }
}

impl core::fmt::Debug for Sram {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "Sram({} KiB)", self.bytes.len() / 1024)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        for size in [SramSize::Mib2, SramSize::Mib4, SramSize::Mib8] {
            assert_eq!(Sram::new(size).len(), size.bytes());
            assert_eq!(SramSize::from_bytes(size.bytes()), Some(size));
        }
        assert_eq!(SramSize::from_bytes(3 << 20), None);
    }

    #[test]
    fn words_are_big_endian() {
        let mut s = Sram::new(SramSize::Mib2);
        s.write_u32(8, 0x0102_0304).unwrap();
        assert_eq!(s.slice(8, 4).unwrap(), &[1, 2, 3, 4]);
        assert_eq!(s.read_u16(10).unwrap(), 0x0304);
        assert_eq!(s.read_u8(8).unwrap(), 1);
        s.write_u16(12, 0xA0B0).unwrap();
        assert_eq!(s.read_u32(12).unwrap(), 0xA0B0_0000);
    }

    #[test]
    fn every_access_is_bounds_checked() {
        let mut s = Sram::new(SramSize::Mib2);
        let end = s.len();
        assert!(s.read_u32(end - 4).is_ok());
        assert_eq!(
            s.read_u32(end),
            Err(SramError::OutOfBounds {
                addr: end,
                len: 4,
                size: end
            })
        );
        assert!(s.read_u8(end).is_err());
        assert!(s.write_u16(end, 0).is_err());
        assert!(s.slice(end - 1, 2).is_err());
        assert!(
            s.slice(u32::MAX, usize::MAX).is_err(),
            "no overflow on huge lengths"
        );
        assert!(s.slice(end, 0).is_ok(), "an empty range at the end is fine");
        assert!(s.copy_within(0, end - 2, 4).is_err());
        assert!(s.fill(end - 1, 2, 0).is_err());
        let mut out = [0u8; 8];
        assert!(s.read(end - 4, &mut out).is_err());
    }

    #[test]
    fn misaligned_words_are_refused() {
        let mut s = Sram::new(SramSize::Mib2);
        assert_eq!(
            s.read_u32(2),
            Err(SramError::Misaligned { addr: 2, align: 4 })
        );
        assert_eq!(
            s.write_u16(1, 0),
            Err(SramError::Misaligned { addr: 1, align: 2 })
        );
        assert!(s.read_u8(1).is_ok());
    }

    #[test]
    fn copy_within_handles_overlap() {
        let mut s = Sram::new(SramSize::Mib2);
        s.write(0, &[1, 2, 3, 4, 5]).unwrap();
        s.copy_within(0, 2, 5).unwrap();
        assert_eq!(s.slice(0, 7).unwrap(), &[1, 2, 1, 2, 3, 4, 5]);
    }
}
