//! The checksums the board already computes, carried from host memory to host memory
//! (issue 17; seed 002, §3.2: the DMA engine writes the 16-bit ones-complement sum of every
//! block it moves into the block's `csum` field).
//!
//! Sending, the MCP builds the *sender checksum* of a data frame's payload as it entered
//! the board, and writes it in the frame's trailer ([`crate::frame::TRAILER_LEN`]):
//!
//! * bytes the host DMA moved from host memory: the engine's written-back sum, read from
//!   the control block once its T bit is set (no work for the LANai beyond one load);
//! * bytes the host wrote by PIO (a PIO send, or the inline header before a DMA'd
//!   payload) and bytes the LANai copied from the SRAM workspace: summed by the LANai in
//!   software, since no DMA moved them (at most [`crate::hcb::PIO_MAX`] bytes for PIO);
//! * pieces are combined with [`combine`], a piece at an odd offset byte-swapped first
//!   (RFC 1071 §2(B)).
//!
//! Receiving, the MCP puts the trailer's checksum in the padding of the payload's DMA
//! control block, and the completion record is that control block, DMA'd to the host by
//! the next block of the chain once the engine has written its checksum of the payload
//! into it (see [`crate::hcb::CompletionRepr`]): the host sees the engine's own sum of
//! the bytes it moved into host memory, at no cost beyond a longer record. The host
//! compares the two sums.
//!
//! What this covers: every byte of the payload from the moment the sender's DMA engine
//! read it out of host memory to the moment the receiver's engine wrote it into host
//! memory: the sending board's SRAM, its send engine, the fabric, the receiving board's
//! SRAM. What it cannot cover: the sender's host memory before its DMA read it, and the
//! receiver's host memory after its DMA wrote it (and, as for any 16-bit ones-complement
//! sum, reordered 16-bit words and errors that cancel out).

use myri_device::board::Lanai;
pub use myri_device::dma::checksum::combine;
use myri_device::dma::checksum::ones_complement_sum;

/// The sum `sum` of a piece that starts at byte `offset` of the whole, ready to
/// [`combine`] with the sum of what precedes it.
#[inline]
pub fn at_offset(sum: u16, offset: u32) -> u16 {
    if offset % 2 == 1 {
        sum.swap_bytes()
    } else {
        sum
    }
}

/// The LANai's software sum of `len` bytes of SRAM at `at` (0 if the range is outside
/// SRAM, which the callers have already checked).
pub fn sram_sum(l: &Lanai<'_>, at: u32, len: u32) -> u16 {
    l.sram_ref()
        .slice(at, len as usize)
        .map_or(0, ones_complement_sum)
}

/// The checksum the DMA engine wrote back into the control block at `block`.
#[inline]
pub fn written_back(l: &Lanai<'_>, block: u32) -> u16 {
    l.sram_ref().read_u16(block + 6).unwrap_or(0)
}

/// Writes a data frame's trailer after its `len` payload bytes.
#[inline]
pub fn write_trailer(l: &mut Lanai<'_>, frame: u32, len: u32, sender: u16) {
    let at = frame + crate::frame::HEADER_LEN as u32 + len;
    let _ = l.sram().write(at, &sender.to_be_bytes());
}

/// Writes the trailer of a data-frame tx entry whose bytes after the inline ones (summed
/// in `e.csum`) sum to `rest`. Frames of other subtypes have no trailer.
#[inline]
pub fn seal(l: &mut Lanai<'_>, e: &super::pool::TxEntry, rest: u16) {
    if e.subtype == crate::frame::SUBTYPE_DATA {
        let sender = combine(e.csum, at_offset(rest, e.inline));
        write_trailer(l, e.frame, e.len, sender);
    }
}

/// Reads the sender checksum from the trailer of a received frame of `len` bytes at `buf`
/// (the caller has checked it is long enough).
#[inline]
pub fn read_trailer(l: &Lanai<'_>, buf: u32, len: u32) -> u16 {
    let mut b = [0u8; 2];
    let at = buf + len - crate::frame::TRAILER_LEN as u32;
    let _ = l.sram_ref().read(at, &mut b);
    u16::from_be_bytes(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn odd_offsets_swap() {
        let data: Vec<u8> = (0..101u8).map(|i| i.wrapping_mul(37)).collect();
        for cut in [0usize, 1, 2, 3, 50, 51, 100, 101] {
            let (a, b) = data.split_at(cut);
            let whole = combine(
                ones_complement_sum(a),
                at_offset(ones_complement_sum(b), cut as u32),
            );
            assert_eq!(whole, ones_complement_sum(&data), "cut {cut}");
        }
    }
}
