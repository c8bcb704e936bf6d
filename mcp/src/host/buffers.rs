//! Handles to DMA buffers, sends in flight and channels (seed 000, Buffers, Channels).
//!
//! Buffers live in the unit's DMA memory, so sending and receiving copy nothing: the host
//! writes a send buffer in place and the board DMAs from it; a received packet is a view of
//! the buffer the board DMA'd it into. Every handle gives its resource back when dropped:
//! a [`SendBuf`] to the free list, a [`RecvBuf`] to its channel (posted again), a [`Ticket`]
//! lets its buffer be reused once the board has sent it, a [`Channel`] is released.
//! Because handles are owned and not `Clone`, a buffer cannot be freed twice:
//!
//! ```compile_fail
//! # fn f(api: &mut myri_mcp::Api) {
//! let buf = api.get_send_buffer().unwrap();
//! api.free_send(buf);
//! api.free_send(buf); // error[E0382]: use of moved value
//! # }
//! ```

use super::unit::{BUF_LEN, Unit};
use myri_device::hostmem::{HostBuf, LentBuf};
use std::sync::Arc;

/// A send buffer in DMA memory, writable by the host.
pub struct SendBuf {
    pub(crate) id: u16,
    pub(crate) host: Option<HostBuf>,
    /// Always `Some` while the handle lives: taken only when the handle turns into
    /// another ([`SendBuf::lend`], [`LentSendBuf::try_unlend`]), which so moves the
    /// unit's `Arc` instead of cloning it and dropping the original (two atomic
    /// read-modify-writes a message saved on a lending stream's path).
    pub(crate) unit: Option<Arc<Unit>>,
}

impl SendBuf {
    /// The whole buffer ([`BUF_LEN`] bytes), to fill before sending.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        self.host.as_mut().map_or(&mut [], |h| h.as_mut_slice())
    }

    /// The whole buffer.
    pub fn as_slice(&self) -> &[u8] {
        self.host.as_ref().map_or(&[], |h| h.as_slice())
    }

    /// Capacity in bytes.
    pub fn capacity(&self) -> usize {
        BUF_LEN
    }

    /// Bus address (diagnostics).
    pub fn bus_addr(&self) -> u64 {
        self.host.as_ref().map_or(0, HostBuf::bus_addr)
    }
}

impl SendBuf {
    /// Lends the buffer to the board for reading: the host keeps reading it (a reliable
    /// protocol's checksum, its copy for a resend) while the board DMAs from it, as many
    /// times as it is sent with [`Api::send_lent`](super::Api::send_lent), with no copy.
    /// Nobody writes it until [`LentSendBuf::try_unlend`] gives it back.
    pub fn lend(mut self) -> LentSendBuf {
        let host = self.host.take().expect("a live SendBuf holds its buffer");
        let lent = LentSendBuf {
            id: self.id,
            lent: Some(host.lend()),
            unit: self.unit.take(),
        };
        // Emptied: nothing is left for its drop to give back, so it need not run.
        core::mem::forget(self);
        lent
    }

    /// Whether the buffer is `unit`'s.
    pub(crate) fn is_of(&self, unit: &Arc<Unit>) -> bool {
        self.unit.as_ref().is_some_and(|u| Arc::ptr_eq(u, unit))
    }
}

impl Drop for SendBuf {
    fn drop(&mut self) {
        if let (Some(host), Some(unit)) = (self.host.take(), &self.unit) {
            unit.locked().st.free_send.push((self.id, host));
        }
    }
}

/// A send buffer lent to the board for reading ([`SendBuf::lend`]): readable by the host,
/// and by the board's DMA for every [`Api::send_lent`](super::Api::send_lent) of it.
/// Dropping it gives the buffer back to the free list once the board has finished reading
/// it (at once if it has).
pub struct LentSendBuf {
    pub(crate) id: u16,
    /// `None` only in a handle [`LentSendBuf::try_unlend_in_place`] emptied.
    pub(crate) lent: Option<LentBuf>,
    /// Always `Some` while the handle lives (see [`SendBuf`]'s), but in an emptied one.
    pub(crate) unit: Option<Arc<Unit>>,
}

impl LentSendBuf {
    /// The whole buffer.
    pub fn as_slice(&self) -> &[u8] {
        self.lent.as_ref().map_or(&[], LentBuf::as_slice)
    }

    /// Bytes in the buffer.
    pub fn capacity(&self) -> usize {
        BUF_LEN
    }

    /// Bus address of the first byte.
    pub fn bus_addr(&self) -> u64 {
        self.lent.as_ref().map_or(0, LentBuf::bus_addr)
    }

    /// Whether the buffer is `unit`'s.
    pub(crate) fn is_of(&self, unit: &Arc<Unit>) -> bool {
        self.unit.as_ref().is_some_and(|u| Arc::ptr_eq(u, unit))
    }

    /// Whether a send of the board's still reads it.
    pub fn is_read_by_board(&self) -> bool {
        self.lent.as_ref().is_some_and(|l| l.readers() > 0)
    }

    /// The buffer back for writing once the board reads it no more (look at sends that
    /// finished first: [`Api::reap_sent`](super::Api::reap_sent)); else itself.
    pub fn try_unlend(mut self) -> Result<SendBuf, LentSendBuf> {
        self.try_unlend_in_place().ok_or(self)
    }

    /// [`LentSendBuf::try_unlend`] in place, for a handle kept inside another value: the
    /// buffer back for writing once the board reads it no more, leaving this handle
    /// empty (it holds nothing and is only to be dropped); `None`, and the handle as it
    /// was, while the board still reads it.
    pub fn try_unlend_in_place(&mut self) -> Option<SendBuf> {
        let lent = self.lent.take()?;
        match lent.try_unlend() {
            Ok(host) => Some(SendBuf {
                id: self.id,
                host: Some(host),
                unit: self.unit.take(),
            }),
            Err(lent) => {
                self.lent = Some(lent);
                None
            }
        }
    }
}

impl Drop for LentSendBuf {
    fn drop(&mut self) {
        let (Some(lent), Some(unit)) = (self.lent.take(), &self.unit) else {
            return;
        };
        let mut g = unit.locked();
        match lent.try_unlend() {
            Ok(host) => g.st.free_send.push((self.id, host)),
            // The board still reads it: it goes back when a later reap finds it done.
            Err(lent) => g.st.returning.push((self.id, lent)),
        }
    }
}

impl core::fmt::Debug for LentSendBuf {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "LentSendBuf({})", self.id)
    }
}

impl core::fmt::Debug for SendBuf {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "SendBuf({})", self.id)
    }
}

/// A received packet: a view of the receive buffer the board DMA'd it into.
pub struct RecvBuf {
    pub(crate) chan: u8,
    pub(crate) index: u16,
    pub(crate) len: usize,
    /// (sender, landed): see [`RecvBuf::checksums`].
    pub(crate) csums: (u16, u16),
    pub(crate) host: Option<HostBuf>,
    pub(crate) unit: Arc<Unit>,
}

impl RecvBuf {
    /// The payload.
    pub fn as_slice(&self) -> &[u8] {
        self.host
            .as_ref()
            .map_or(&[], |h| &h.as_slice()[..self.len])
    }

    /// The payload, writable (to turn it around and send it back).
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        let len = self.len;
        self.host
            .as_mut()
            .map_or(&mut [], |h| &mut h.as_mut_slice()[..len])
    }

    /// The whole buffer, writable, for building a reply of another length in place.
    pub fn buffer_mut(&mut self) -> &mut [u8] {
        self.host.as_mut().map_or(&mut [], |h| h.as_mut_slice())
    }

    /// Payload length.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the payload is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The channel it arrived on.
    pub fn channel(&self) -> u8 {
        self.chan
    }

    /// The board's checksums of the payload ([`RecvBuf::as_slice`], exactly its
    /// [`RecvBuf::len`] bytes; nothing of the frame header or trailer): `(sender,
    /// landed)`. Both are 16-bit ones-complement sums of the bytes as big-endian words
    /// (seed 002, §3.2, not complemented; [`myri_device::dma::checksum`]). `sender` is the
    /// sum of the payload as it entered the sending board: the sending DMA engine's sum of
    /// what it read from host memory, with the sending LANai's software sum of any bytes
    /// the host wrote by PIO (see [`crate::firmware::csum`]). `landed` is the receiving DMA
    /// engine's sum of what it wrote into this buffer. Equal sums cover the payload from
    /// host memory to host memory; they say nothing of either host's memory itself before
    /// the sending DMA or after the receiving one.
    pub fn checksums(&self) -> (u16, u16) {
        self.csums
    }

    /// Whether the two checksums of [`RecvBuf::checksums`] agree. (Both ends add with the
    /// end-around carry and never complement, so a sum is 0 only for all-zero data and
    /// the two forms of zero cannot be confused.)
    pub fn dma_checksum_ok(&self) -> bool {
        self.csums.0 == self.csums.1
    }
}

impl Drop for RecvBuf {
    fn drop(&mut self) {
        if let Some(host) = self.host.take() {
            self.unit.repost(self.chan, self.index, host);
        }
    }
}

impl core::fmt::Debug for RecvBuf {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "RecvBuf(chan {}, {} bytes)", self.chan, self.len)
    }
}

/// A send handed to the board. Ask whether it is still busy, take the buffer back once it
/// is not (to reuse or send again), or drop the ticket to let the buffer be reused when
/// the board is done with it.
pub struct Ticket {
    pub(crate) seq: u32,
    pub(crate) unit: Arc<Unit>,
    pub(crate) live: bool,
}

impl Ticket {
    /// The send's sequence number in the send channel.
    pub fn seq(&self) -> u32 {
        self.seq
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if self.live {
            self.unit.release_ticket(self.seq);
        }
    }
}

impl core::fmt::Debug for Ticket {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "Ticket({})", self.seq)
    }
}

/// A reserved receive channel (seed 000, Recv Channel: the board-level "port").
pub struct Channel {
    pub(crate) num: u8,
    pub(crate) unit: Arc<Unit>,
}

impl Channel {
    /// The channel number senders name.
    pub fn number(&self) -> u8 {
        self.num
    }
}

impl Drop for Channel {
    fn drop(&mut self) {
        self.unit.release_channel(self.num);
    }
}

impl core::fmt::Debug for Channel {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "Channel({})", self.num)
    }
}
