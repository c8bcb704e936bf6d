//! The tx and rx pools (seed 000, Data Flow): dual-pointer queues of SRAM packet buffers
//! between the DMA engines.
//!
//! The tx pool buffers packets between the host DMA that brings them from the host and the
//! send DMA that puts them on the network. The rx pool buffers packets between the receive
//! DMA and the host DMA that takes them to the host; it is the rx pool that lets the MCP
//! always keep the network draining. As in seed 000, full is `incoming + 1 == outgoing`:
//! the one buffer that seems lost is the one the receive engine is always armed with.

use crate::hcb::Layout;

/// What the tx pool holds for each packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxEntry {
    /// SRAM address of the frame header (route bytes go just before it).
    pub frame: u32,
    /// Bytes after the frame header (inline header plus payload).
    pub len: u32,
    /// Destination channel.
    pub chan: u8,
    /// Route id.
    pub route: u32,
    /// Send slot it came from.
    pub slot: u32,
    /// Sent from the slot's PIO buffer (the slot is done only once the packet is sent).
    pub pio: bool,
    /// Being filled by the host DMA while the send DMA follows it.
    pub overlapped: bool,
    /// Bytes of inline header (copied from the PIO buffer) before the DMA'd payload.
    pub inline: u32,
    /// The host DMA filling this overlapped entry faulted: drop it.
    pub aborted: bool,
    /// The frame subtype ([`crate::frame::SUBTYPE_DATA`] and the GM and Trapeze ones).
    pub subtype: u8,
    /// Taken from the Trapeze send ring (`slot` is then the ring index), not the send
    /// channel.
    pub tpz: bool,
    /// The ones-complement sum of the payload bytes already in the tx buffer before the
    /// DMA'd part (the inline bytes; all of a PIO payload), summed by the LANai.
    pub csum: u16,
}

/// A ring of `N` entries with free-running indices.
#[derive(Debug, Clone)]
pub struct Ring<T: Copy> {
    entries: Vec<Option<T>>,
    /// `len - 1` when the length is a power of two (an index is a mask, not a division).
    mask: Option<u32>,
    incoming: u32,
    outgoing: u32,
}

impl<T: Copy> Ring<T> {
    /// A ring of `n` slots.
    pub fn new(n: u32) -> Ring<T> {
        Ring {
            entries: vec![None; n as usize],
            mask: n.is_power_of_two().then(|| n - 1),
            incoming: 0,
            outgoing: 0,
        }
    }

    fn cap(&self) -> u32 {
        self.entries.len() as u32
    }

    #[inline]
    fn slot(&self, i: u32) -> usize {
        match self.mask {
            Some(m) => (i & m) as usize,
            None => (i % self.cap()) as usize,
        }
    }

    /// Entries queued.
    pub fn len(&self) -> u32 {
        self.incoming.wrapping_sub(self.outgoing)
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.incoming == self.outgoing
    }

    /// Whether one more entry would leave no spare slot (seed 000's full test).
    pub fn is_full(&self) -> bool {
        self.len() + 1 >= self.cap()
    }

    /// The index the next pushed entry will get.
    pub fn incoming(&self) -> u32 {
        self.incoming
    }

    /// The index of the oldest entry.
    pub fn outgoing(&self) -> u32 {
        self.outgoing
    }

    /// Queues an entry; false if full.
    pub fn push(&mut self, e: T) -> bool {
        if self.is_full() {
            return false;
        }
        let i = self.slot(self.incoming);
        self.entries[i] = Some(e);
        self.incoming = self.incoming.wrapping_add(1);
        true
    }

    /// The oldest entry.
    pub fn head(&self) -> Option<T> {
        if self.is_empty() {
            return None;
        }
        self.entries[self.slot(self.outgoing)]
    }

    /// The oldest entry, writable.
    pub fn head_mut(&mut self) -> Option<&mut T> {
        if self.is_empty() {
            return None;
        }
        let i = self.slot(self.outgoing);
        self.entries[i].as_mut()
    }

    /// Removes the oldest entry.
    pub fn pop(&mut self) -> Option<T> {
        let e = self.head()?;
        self.outgoing = self.outgoing.wrapping_add(1);
        Some(e)
    }
}

/// SRAM address of tx pool buffer `i`.
pub fn tx_buffer(l: &Layout, i: u32) -> u32 {
    l.tx_pool + (i % crate::hcb::TX_POOL) * crate::hcb::POOL_BUF
}

/// SRAM address of rx pool buffer `i`.
pub fn rx_buffer(l: &Layout, i: u32) -> u32 {
    l.rx_pool + (i % crate::hcb::RX_POOL) * crate::hcb::POOL_BUF
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_leaves_one_spare_slot_and_indices_wrap() {
        let mut r: Ring<u32> = Ring::new(4);
        let mut odd: Ring<u32> = Ring::new(3);
        for i in 0..10 {
            assert!(odd.push(i) && odd.push(i + 100));
            assert_eq!((odd.pop(), odd.pop()), (Some(i), Some(i + 100)));
        }
        assert!(r.is_empty() && !r.is_full());
        assert!(r.push(1) && r.push(2) && r.push(3));
        assert!(
            r.is_full(),
            "three of four: the fourth is the receive engine's"
        );
        assert!(!r.push(4));
        assert_eq!(r.pop(), Some(1));
        for i in 0..1000 {
            assert!(r.push(i));
            let head = r.head();
            assert_eq!(r.pop(), head);
        }
        assert_eq!(r.len(), 2);
        r.incoming = u32::MAX;
        r.outgoing = u32::MAX - 1;
        assert_eq!(r.len(), 1);
    }
}
