//! The records of a shm ring: a descriptor naming a slot of the sender's slab, or
//! (native reliability, [`INLINE`]) carrying a short message after it.

use crate::buffer::INLINE_MAX;

/// Bytes of a descriptor: slot and flags (u32), length (u32), the sender's epoch (u32),
/// the epoch of the receiver it is meant for (u32), and (native reliability) how far the
/// sender has taken inline messages off the other ring (u64, a ring position: the value
/// of its taken word, carried along so the other side learns it without reading that
/// word's cache line).
pub(super) const DESCRIPTOR: usize = 24;
/// Descriptor flag (in the slot word): more fragments of this message follow.
pub(super) const MORE: u32 = 1 << 31;
/// Descriptor flag (in the slot word): the message's `len` bytes follow the descriptor in
/// the record (at most [`INLINE_MAX`]); the slot number is meaningless.
pub(super) const INLINE: u32 = 1 << 30;

/// A descriptor read from the ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Descriptor {
    /// The slot (`usize::MAX` for an inline message, so nothing is given back for it).
    pub(super) slot: usize,
    pub(super) len: usize,
    pub(super) more: bool,
    /// The message follows the descriptor.
    pub(super) inline: bool,
    pub(super) from_epoch: u32,
    pub(super) to_epoch: u32,
    /// The sender's taken position on the other ring.
    pub(super) taken: u64,
}

/// Reads a descriptor; `None` if the record is too short, or flags an inline message
/// that is longer than [`INLINE_MAX`], not all there, or fragmented.
#[inline]
pub(super) fn descriptor(rec: &[u8]) -> Option<Descriptor> {
    let word =
        |i: usize| -> Option<u32> { Some(u32::from_le_bytes(rec.get(i..i + 4)?.try_into().ok()?)) };
    let slot = word(0)?;
    let taken = u64::from_le_bytes(rec.get(16..24)?.try_into().ok()?);
    let inline = slot & INLINE != 0;
    let d = Descriptor {
        slot: if inline {
            usize::MAX
        } else {
            (slot & !MORE) as usize
        },
        more: slot & MORE != 0,
        inline,
        len: word(4)? as usize,
        from_epoch: word(8)?,
        to_epoch: word(12)?,
        taken,
    };
    if inline && (d.more || d.len > INLINE_MAX || rec.len() < DESCRIPTOR + d.len) {
        return None;
    }
    Some(d)
}

/// The bytes of an inline message (checked by [`descriptor`]).
pub(super) fn inline_payload<'a>(rec: &'a [u8], d: &Descriptor) -> &'a [u8] {
    rec.get(DESCRIPTOR..DESCRIPTOR + d.len).unwrap_or_default()
}

/// What a descriptor says besides its slot, length and flags.
#[derive(Clone, Copy)]
pub(super) struct Header {
    /// The sender's epoch.
    pub(super) from_epoch: u64,
    /// The epoch of the receiver it is meant for.
    pub(super) to_epoch: u64,
    /// The sender's taken position on the other ring.
    pub(super) taken: u64,
}

/// Writes a descriptor into the first [`DESCRIPTOR`] bytes of `out`.
#[inline]
pub(super) fn encode(out: &mut [u8], word: u32, len: usize, h: Header) {
    out[..4].copy_from_slice(&word.to_le_bytes());
    out[4..8].copy_from_slice(&(len as u32).to_le_bytes());
    out[8..12].copy_from_slice(&(h.from_epoch as u32).to_le_bytes());
    out[12..16].copy_from_slice(&(h.to_epoch as u32).to_le_bytes());
    out[16..24].copy_from_slice(&h.taken.to_le_bytes());
}
