//! The doorbell FIFO (seed 002, §3.3): host writes anywhere in an 8 MB window become
//! `{addr, data}` entries in a queue in SRAM, so the LANai learns of host requests without
//! the host touching SRAM.
//!
//! * Queue size: 512 to 64K entries (4 KB to 512 KB), by control-register bits 2..0.
//! * Multi-queue mode (bit 3): four queues, the window split into four 2 MB quarters.
//! * Limit checking (bit 4): the last 4 KB of SRAM hold 2048 `{limit, count}` byte pairs,
//!   one per 4 KB page of the window. A write to a page whose count equals its limit is
//!   dropped; otherwise it is queued, the count incremented and WAKE_INT raised. The
//!   control program grants more by raising the limit as it consumes entries.
//!
//! A queue entry whose `addr` is [`EMPTY`] is free: a real address has its top 8 and low 2
//! bits zero, so the all-ones word cannot be one. The controller never overwrites an entry
//! the LANai has not consumed; such a write is dropped and counted as an overrun.

use crate::sram::Sram;
use thiserror::Error;

/// PCI offset where the doorbell window's address space starts (the first 32 KB of it
/// are taken by other registers).
pub const SPACE_START: u32 = 0x0080_0000;
/// First PCI offset that is really a doorbell.
pub const WINDOW_START: u32 = 0x0080_8000;
/// End of the doorbell window.
pub const WINDOW_END: u32 = 0x0100_0000;
/// Size of a limit-counter page.
pub const PAGE: u32 = 4096;
/// Number of limit counters.
pub const COUNTERS: u32 = 2048;
/// Size of a queue entry.
pub const ENTRY_LEN: u32 = 8;
/// The `addr` word of a free queue entry.
pub const EMPTY: u32 = 0xFFFF_FFFF;
/// Number of queues in multi-queue mode.
pub const QUEUES: usize = 4;

/// The doorbell configuration bits of the control register (bits 4..0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DoorbellConfig {
    /// Bit 4: limit checking.
    pub limits: bool,
    /// Bit 3: four queues.
    pub multi_queue: bool,
    /// Bits 2..0: queue size select.
    pub size_select: u8,
}

impl DoorbellConfig {
    /// Decodes control-register bits 4..0.
    pub fn from_bits(low: u8) -> DoorbellConfig {
        DoorbellConfig {
            limits: low & 0x10 != 0,
            multi_queue: low & 0x08 != 0,
            size_select: low & 0x7,
        }
    }

    /// Entries per queue.
    pub fn entries(&self) -> u32 {
        512 << self.size_select
    }

    /// Bytes per queue.
    pub fn queue_bytes(&self) -> u32 {
        self.entries() * ENTRY_LEN
    }
}

/// Why a doorbell write was not queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum DoorbellError {
    /// The offset is not in the doorbell window.
    #[error("pci offset {0:#x} is not in the doorbell window")]
    NotDoorbell(u32),
    /// The write was not 4-byte aligned.
    #[error("doorbell write at {0:#x} is not word aligned")]
    Unaligned(u32),
    /// The queue's base pointer is not aligned to its size or runs past SRAM.
    #[error(
        "doorbell queue {queue} base {base:#x} is not aligned to {size:#x} or does not fit in sram"
    )]
    BadBase {
        /// Queue.
        queue: usize,
        /// Base pointer.
        base: u32,
        /// Queue size in bytes.
        size: u32,
    },
    /// The page's count reached its limit.
    #[error("doorbell page {page} is at its limit")]
    Limited {
        /// Page index in the window.
        page: u32,
    },
    /// The next queue entry has not been consumed.
    #[error("doorbell queue {queue} is full")]
    Overrun {
        /// Queue.
        queue: usize,
    },
}

/// Counters of the doorbell controller.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DoorbellCounters {
    /// Entries queued.
    pub queued: u64,
    /// Writes dropped by limit checking.
    pub limited: u64,
    /// Writes dropped because the queue was full.
    pub overruns: u64,
    /// Writes dropped because the queue was misconfigured or the write was bad.
    pub refused: u64,
}

/// One queue entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FifoEntry {
    /// PCI offset the host wrote to.
    pub addr: u32,
    /// Value written.
    pub data: u32,
}

/// The controller side of the doorbell.
#[derive(Debug, Clone, Default)]
pub struct Doorbell {
    base: [u32; QUEUES],
    write_pos: [u32; QUEUES],
    counters: DoorbellCounters,
}

/// Address of page `page`'s `{limit, count}` pair in an SRAM of `sram_len` bytes.
pub fn counter_addr(sram_len: u32, page: u32) -> u32 {
    sram_len - PAGE + 2 * page
}

/// The limit-counter page of a doorbell PCI offset.
pub fn page_of(addr: u32) -> u32 {
    (addr - SPACE_START) / PAGE
}

impl Doorbell {
    /// Writes FIFO base pointer `queue` (a little-endian PCI register).
    pub fn write_base(&mut self, queue: usize, value: u32) {
        if let Some(b) = self.base.get_mut(queue) {
            *b = value;
            self.write_pos[queue] = 0;
        }
    }

    /// Reads FIFO base pointer `queue`.
    pub fn read_base(&self, queue: usize) -> u32 {
        self.base.get(queue).copied().unwrap_or(0)
    }

    /// Counters.
    pub fn counters(&self) -> DoorbellCounters {
        self.counters
    }

    /// A host write of `data` at PCI offset `addr`. When it is queued the board raises
    /// WAKE_INT.
    pub fn write(
        &mut self,
        sram: &mut Sram,
        config: DoorbellConfig,
        addr: u32,
        data: u32,
    ) -> Result<(), DoorbellError> {
        let result = self.try_write(sram, config, addr, data);
        match result {
            Ok(()) => self.counters.queued += 1,
            Err(DoorbellError::Limited { .. }) => self.counters.limited += 1,
            Err(DoorbellError::Overrun { .. }) => self.counters.overruns += 1,
            Err(_) => self.counters.refused += 1,
        }
        result
    }

    fn try_write(
        &mut self,
        sram: &mut Sram,
        config: DoorbellConfig,
        addr: u32,
        data: u32,
    ) -> Result<(), DoorbellError> {
        if !(WINDOW_START..WINDOW_END).contains(&addr) {
            return Err(DoorbellError::NotDoorbell(addr));
        }
        if !addr.is_multiple_of(4) {
            return Err(DoorbellError::Unaligned(addr));
        }
        let queue = if config.multi_queue {
            ((addr - SPACE_START) >> 21) as usize
        } else {
            0
        };
        let size = config.queue_bytes();
        let base = self.base[queue];
        let fits = base
            .checked_add(size)
            .is_some_and(|end| end <= sram.len() - PAGE);
        if !base.is_multiple_of(size) || !fits {
            return Err(DoorbellError::BadBase { queue, base, size });
        }
        let slot = base + self.write_pos[queue] * ENTRY_LEN;
        // In range: `base + size` fits in SRAM (checked above).
        if sram.read_u32(slot).unwrap_or(0) != EMPTY {
            return Err(DoorbellError::Overrun { queue });
        }
        if config.limits {
            let page = page_of(addr);
            let at = counter_addr(sram.len(), page);
            let limit = sram.read_u8(at).unwrap_or(0);
            let count = sram.read_u8(at + 1).unwrap_or(0);
            if limit == count {
                return Err(DoorbellError::Limited { page });
            }
            let _ = sram.write_u8(at + 1, count.wrapping_add(1));
        }
        // Data first, then the address word that marks the entry full, so a LANai
        // polling the address sees a complete entry.
        let _ = sram.write_u32(slot + 4, data);
        let _ = sram.write_u32(slot, addr);
        self.write_pos[queue] = (self.write_pos[queue] + 1) % config.entries();
        Ok(())
    }
}

/// The LANai side of one doorbell queue: a control program's consumer.
#[derive(Debug, Clone)]
pub struct DoorbellQueue {
    base: u32,
    entries: u32,
    read_pos: u32,
}

impl DoorbellQueue {
    /// Prepares a queue at `base` (marks every entry free) and, if limit checking is
    /// used, grants every page `limit` writes.
    pub fn init(
        sram: &mut Sram,
        base: u32,
        config: DoorbellConfig,
        grant: Option<u8>,
    ) -> Result<DoorbellQueue, crate::sram::SramError> {
        let entries = config.entries();
        for i in 0..entries {
            sram.write_u32(base + i * ENTRY_LEN, EMPTY)?;
            sram.write_u32(base + i * ENTRY_LEN + 4, 0)?;
        }
        if let Some(limit) = grant {
            for page in 0..COUNTERS {
                let at = counter_addr(sram.len(), page);
                sram.write_u8(at, limit)?;
                sram.write_u8(at + 1, 0)?;
            }
        }
        Ok(DoorbellQueue {
            base,
            entries,
            read_pos: 0,
        })
    }

    /// Takes the next entry, frees it, and (with limit checking) grants its page one more
    /// write by raising the page's limit with a byte write.
    pub fn pop(&mut self, sram: &mut Sram, limits: bool) -> Option<FifoEntry> {
        let slot = self.base + self.read_pos * ENTRY_LEN;
        let addr = sram.read_u32(slot).ok()?;
        if addr == EMPTY {
            return None;
        }
        let data = sram.read_u32(slot + 4).ok()?;
        sram.write_u32(slot, EMPTY).ok()?;
        self.read_pos = (self.read_pos + 1) % self.entries;
        if limits && (WINDOW_START..WINDOW_END).contains(&addr) {
            let at = counter_addr(sram.len(), page_of(addr));
            let limit = sram.read_u8(at).unwrap_or(0);
            let _ = sram.write_u8(at, limit.wrapping_add(1));
        }
        Some(FifoEntry { addr, data })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sram::SramSize;

    fn setup(config: DoorbellConfig, grant: Option<u8>) -> (Sram, Doorbell, Vec<DoorbellQueue>) {
        let mut sram = Sram::new(SramSize::Mib2);
        let mut db = Doorbell::default();
        let queues = if config.multi_queue { QUEUES } else { 1 };
        let mut readers = Vec::new();
        for q in 0..queues {
            let base = 0x10_0000 + q as u32 * config.queue_bytes().max(0x1000);
            db.write_base(q, base);
            readers.push(DoorbellQueue::init(&mut sram, base, config, grant).unwrap());
        }
        (sram, db, readers)
    }

    #[test]
    fn sizes_follow_the_select_bits() {
        let sizes: Vec<u32> = (0..8)
            .map(|s| DoorbellConfig::from_bits(s).entries())
            .collect();
        assert_eq!(
            sizes,
            vec![512, 1024, 2048, 4096, 8192, 16384, 32768, 65536]
        );
        assert_eq!(DoorbellConfig::from_bits(0b111).queue_bytes(), 512 * 1024);
        let c = DoorbellConfig::from_bits(0b1_1010);
        assert!(c.limits && c.multi_queue && c.size_select == 2);
    }

    #[test]
    fn writes_become_entries_in_order() {
        let config = DoorbellConfig::default();
        let (mut sram, mut db, mut q) = setup(config, None);
        db.write(&mut sram, config, WINDOW_START, 1).unwrap();
        db.write(&mut sram, config, 0x00F0_0004, 2).unwrap();
        assert_eq!(
            q[0].pop(&mut sram, false),
            Some(FifoEntry {
                addr: WINDOW_START,
                data: 1
            })
        );
        assert_eq!(
            q[0].pop(&mut sram, false),
            Some(FifoEntry {
                addr: 0x00F0_0004,
                data: 2
            })
        );
        assert_eq!(q[0].pop(&mut sram, false), None);
        assert_eq!(db.counters().queued, 2);
    }

    #[test]
    fn the_queue_wraps_and_never_overwrites_an_unread_entry() {
        let config = DoorbellConfig::default();
        let (mut sram, mut db, mut q) = setup(config, None);
        for i in 0..512 {
            db.write(&mut sram, config, WINDOW_START + 4 * (i % 8), i)
                .unwrap();
        }
        assert_eq!(
            db.write(&mut sram, config, WINDOW_START, 999),
            Err(DoorbellError::Overrun { queue: 0 })
        );
        assert_eq!(db.counters().overruns, 1);
        assert_eq!(q[0].pop(&mut sram, false).unwrap().data, 0);
        db.write(&mut sram, config, WINDOW_START, 512).unwrap();
        for i in 1..=512 {
            assert_eq!(q[0].pop(&mut sram, false).unwrap().data, i);
        }
    }

    #[test]
    fn multi_queue_splits_the_window_in_quarters() {
        let config = DoorbellConfig {
            multi_queue: true,
            ..Default::default()
        };
        let (mut sram, mut db, mut q) = setup(config, None);
        for (addr, queue) in [
            (WINDOW_START, 0),
            (0x00A0_0000, 1),
            (0x00C0_0010, 2),
            (0x00FF_FFFC, 3),
        ] {
            db.write(&mut sram, config, addr, queue).unwrap();
        }
        for (queue, reader) in q.iter_mut().enumerate() {
            assert_eq!(reader.pop(&mut sram, false).unwrap().data, queue as u32);
            assert_eq!(reader.pop(&mut sram, false), None);
        }
    }

    #[test]
    fn limit_counters_stop_a_page_until_the_lanai_grants_more() {
        let config = DoorbellConfig {
            limits: true,
            ..Default::default()
        };
        let (mut sram, mut db, mut q) = setup(config, Some(2));
        let page_a = 0x00A0_1000;
        let page_b = 0x00A0_2000;
        db.write(&mut sram, config, page_a, 1).unwrap();
        db.write(&mut sram, config, page_a + 8, 2).unwrap();
        assert_eq!(
            db.write(&mut sram, config, page_a + 16, 3),
            Err(DoorbellError::Limited {
                page: page_of(page_a)
            })
        );
        db.write(&mut sram, config, page_b, 4).unwrap();
        assert_eq!(db.counters().limited, 1);
        let at = counter_addr(sram.len(), page_of(page_a));
        assert_eq!(
            (sram.read_u8(at).unwrap(), sram.read_u8(at + 1).unwrap()),
            (2, 2),
            "count written back"
        );
        // Consuming one entry of page A raises its limit: one more write goes through.
        assert_eq!(q[0].pop(&mut sram, true).unwrap().data, 1);
        db.write(&mut sram, config, page_a + 16, 3).unwrap();
        assert_eq!(
            db.write(&mut sram, config, page_a + 24, 5),
            Err(DoorbellError::Limited {
                page: page_of(page_a)
            })
        );
        let rest: Vec<u32> = std::iter::from_fn(|| q[0].pop(&mut sram, true))
            .map(|e| e.data)
            .collect();
        assert_eq!(rest, vec![2, 4, 3]);
    }

    #[test]
    fn bad_writes_and_bad_bases_are_refused() {
        let config = DoorbellConfig::default();
        let (mut sram, mut db, _) = setup(config, None);
        assert_eq!(
            db.write(&mut sram, config, 0x0080_0040, 0),
            Err(DoorbellError::NotDoorbell(0x0080_0040))
        );
        assert_eq!(
            db.write(&mut sram, config, WINDOW_START + 2, 0),
            Err(DoorbellError::Unaligned(WINDOW_START + 2))
        );
        db.write_base(0, 0x10_0100);
        assert!(matches!(
            db.write(&mut sram, config, WINDOW_START, 0),
            Err(DoorbellError::BadBase { .. })
        ));
        db.write_base(0, sram.len() - PAGE);
        assert!(
            matches!(
                db.write(&mut sram, config, WINDOW_START, 0),
                Err(DoorbellError::BadBase { .. })
            ),
            "may not overlap the counters"
        );
        assert_eq!(db.counters().refused, 4);
    }
}
