//! The host-DMA state machine (seed 000, Data Flow; Appendix B, Host DMA State Machine).
//!
//! One engine moves data both ways, so it is scheduled: a pending receive first (the
//! lowest latency for small packets, as seed 000 settled on), then a pending send if the
//! tx pool has room. Every transfer is a short chain of control blocks in a ring on DMA
//! channel 0: the channel sleeps on a terminal block; to start a transfer the MCP writes
//! its blocks after that one, terminates the chain after them, makes the sleeping block
//! valid last, and pulses the channel. Completion is the last block's T bit.
//!
//! A delivery to the host is one chain of two blocks: the payload into the channel's next
//! posted host buffer, then a completion record (the length and the channel's new
//! completion count) into the poll structure the host watches (seed 000: DMA notification
//! instead of host polling of SRAM).

use super::Mcp;
use super::csum;
use super::pool::{TxEntry, tx_buffer};
use crate::frame::{ApiFrame, FrameError, FrameRepr, HEADER_LEN, SUBTYPE_DATA, TRAILER_LEN};
use crate::hcb::{
    self, DMA_RING, Layout, NUM_CHANNELS, RECV_SLOTS, SEND_SLOTS, counter, recv_chan,
};
use myri_device::board::Lanai;
use myri_device::dma::block::{BLOCK_LEN, FLAG_HOST_TO_LANAI, FLAG_TERMINAL, FLAG_WAKE};
use myri_device::dma::{ChannelState, Direction};
use myri_device::engines::RecvState;
use myri_device::sram::SramError;
use myri_device::time::Time;

/// Spacing of blocks in the ring (a 24-byte block, 8-aligned; the 8 bytes of padding
/// carry the MCP's words of a completion record).
const STRIDE: u32 = 32;
/// Byte offset of the poll structure's length array.
///
/// A channel's poll structure is a ring of [`RECV_SLOTS`] completion records, one per
/// receive descriptor: the payload length, then the channel's completion count after that
/// delivery. One DMA block writes a record, length first, so a host that sees the count
/// (the poll word it watches) also sees the length.
pub const RECORD_LEN: u32 = hcb::CompletionRepr::LEN as u32;

/// What the MCP leaves in a control block for the host, in its spare halfword and the
/// padding after it (see [`crate::hcb::CompletionRepr`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tag {
    spare: u16,
    pad: [u32; 2],
}

/// One transfer of a chain.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Transfer {
    pub(crate) dir: Direction,
    pub(crate) lar: u32,
    pub(crate) len: u32,
    pub(crate) host: u64,
}

/// The ring of control blocks on channel 0.
#[derive(Debug)]
struct DmaRing {
    base: u32,
    /// Free-running index of the block the channel sleeps on.
    cur: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    Pending,
    Done,
    Faulted,
}

impl DmaRing {
    fn addr(&self, i: u32) -> u32 {
        self.base + (i % DMA_RING) * STRIDE
    }

    /// The address the next chain's first block will have.
    fn next_block(&self) -> u32 {
        self.addr(self.cur)
    }

    /// Writes every block terminal, chained in a ring. The host points channel 0 at the
    /// first before it shakes hands.
    fn init(base: u32, l: &mut Lanai<'_>) -> Result<DmaRing, SramError> {
        let ring = DmaRing { base, cur: 0 };
        for i in 0..DMA_RING {
            l.sram().fill(ring.addr(i), STRIDE as usize, 0)?;
            l.sram()
                .write_u32(ring.addr(i), ring.addr(i + 1) | FLAG_TERMINAL)?;
        }
        Ok(ring)
    }

    fn write_block(
        &self,
        l: &mut Lanai<'_>,
        i: u32,
        t: &Transfer,
        next_word: u32,
        tag: Option<&Tag>,
    ) -> Result<(), SramError> {
        let at = self.addr(i);
        let s = l.sram();
        // The spare halfword, and the csum the engine will overwrite.
        s.write_u32(at + 4, tag.map_or(0, |g| u32::from(g.spare) << 16))?;
        if let Some(g) = tag {
            s.write_u32(at + BLOCK_LEN as u32, g.pad[0])?;
            s.write_u32(at + BLOCK_LEN as u32 + 4, g.pad[1])?;
        }
        s.write_u32(at + 8, t.len)?;
        s.write_u32(at + 12, t.lar)?;
        s.write_u32(at + 16, (t.host >> 32) as u32)?;
        s.write_u32(at + 20, t.host as u32)?;
        s.write_u32(at, next_word)
    }

    /// Starts a chain; returns the ring indices of its first and last blocks.
    fn issue(
        &mut self,
        l: &mut Lanai<'_>,
        now: Time,
        chain: &[Transfer],
    ) -> Result<(u32, u32), SramError> {
        self.issue_tagged(l, now, chain, None)
    }

    /// Starts a chain whose first block carries `tag` in its spare halfword and padding.
    fn issue_tagged(
        &mut self,
        l: &mut Lanai<'_>,
        now: Time,
        chain: &[Transfer],
        tag: Option<Tag>,
    ) -> Result<(u32, u32), SramError> {
        let k = chain.len() as u32;
        let (first, end) = (self.cur, self.cur + k);
        l.sram()
            .write_u32(self.addr(end), self.addr(end + 1) | FLAG_TERMINAL)?;
        let word = |i: u32, t: &Transfer| {
            let dir = if t.dir == Direction::HostToLanai {
                FLAG_HOST_TO_LANAI
            } else {
                0
            };
            let wake = if i == k - 1 { FLAG_WAKE } else { 0 };
            self.addr(first + i + 1) | dir | wake
        };
        // Later blocks first; the block the channel sleeps on becomes valid last.
        for (i, t) in chain.iter().enumerate().rev() {
            let tag = tag.as_ref().filter(|_| i == 0);
            self.write_block(l, first + i as u32, t, word(i as u32, t), tag)?;
        }
        l.pulse_dma(now, 0);
        self.cur = end;
        Ok((first, end - 1))
    }

    fn status(&self, l: &mut Lanai<'_>, last: u32) -> Status {
        if let Some(ChannelState::Faulted(_)) = l.board().dma().state(0) {
            return Status::Faulted;
        }
        match l.sram_ref().read_u32(self.addr(last)) {
            Ok(w) if w & FLAG_TERMINAL != 0 => Status::Done,
            Ok(_) => Status::Pending,
            Err(_) => Status::Faulted,
        }
    }

    /// After a fault: empties the chain's blocks so the channel skips them to the
    /// terminal block, and wakes it.
    fn skip(&self, l: &mut Lanai<'_>, now: Time, first: u32, last: u32) {
        for i in first..=last {
            let _ = l.sram().write_u32(self.addr(i) + 8, 0);
        }
        l.pulse_dma(now, 0);
    }
}

#[derive(Debug, Clone, Copy)]
enum Op {
    Idle,
    /// Bringing a send slot's payload into a tx pool buffer.
    FromHost {
        slot: u32,
        entry: TxEntry,
        pushed: bool,
        first: u32,
        last: u32,
    },
    /// Delivering the rx pool's oldest packet (the rest of it, if `overlapped`).
    ToHost {
        chan: u8,
        overlapped: bool,
        first: u32,
        last: u32,
    },
    /// Send from SRAM (seed 001, §3.2.2): the LANai copies a workspace block into a tx
    /// buffer behind the header. The copy is synchronous on a real LANai; here it is an
    /// operation of this machine that ends at `until`, which is the seed's own trick of
    /// making the MCP treat the copy as a host DMA that finishes then.
    Copy {
        entry: TxEntry,
        until: Time,
    },
    /// A directed packet's line pieces going to their window: no completion record and no
    /// receive event (seed 001, directed send).
    Directed {
        first: u32,
        last: u32,
    },
    /// A Trapeze message's payload going to its buffer; the ring entry is published when
    /// it lands (seed 003).
    Trapeze {
        first: u32,
        last: u32,
    },
    /// Overlapped receive: copying a packet to the host while it arrives.
    Follow {
        chan: u8,
        buf: u32,
        host: u64,
        capacity: u32,
        copied: u32,
        epoch: u64,
        inflight: Option<(u32, u32, u32)>,
        /// The DMA engine's sum of the `copied` bytes (see [`crate::hcb::CompletionRepr`]).
        head: u16,
    },
}

/// The host-DMA state machine's state, and the send and receive channel bookkeeping it
/// owns (it is the one that consumes slots and posted buffers).
pub struct HostDma {
    ring: DmaRing,
    op: Op,
    /// Send slots dequeued (free-running; mirrored to the HCB's HEAD).
    head: u32,
    /// Send slots finished with (free-running; mirrored to SENT).
    sent: u32,
    slot_done: [bool; SEND_SLOTS as usize],
    /// Buffers filled per receive channel (mirrored to DONE).
    done: [u32; NUM_CHANNELS],
}

impl HostDma {
    /// Sets up the DMA ring.
    pub fn new(layout: &Layout, l: &mut Lanai<'_>) -> Result<HostDma, SramError> {
        Ok(HostDma {
            ring: DmaRing::init(layout.dma_ring, l)?,
            op: Op::Idle,
            head: 0,
            sent: 0,
            slot_done: [false; SEND_SLOTS as usize],
            done: [0; NUM_CHANNELS],
        })
    }

    /// Whether an overlapped receive is being followed.
    pub fn following(&self) -> bool {
        matches!(self.op, Op::Follow { .. })
    }

    /// Whether no transfer is in progress.
    pub fn idle(&self) -> bool {
        matches!(self.op, Op::Idle)
    }

    /// When a LANai copy from the SRAM workspace in progress ends.
    pub fn copy_until(&self) -> Option<Time> {
        match self.op {
            Op::Copy { until, .. } => Some(until),
            _ => None,
        }
    }

    /// How much of an overlapped entry's payload has arrived in SRAM, and whether all of it
    /// has (the live host-DMA pointer the send DMA follows).
    pub fn fill(&self, entry: &TxEntry, now: Time, l: &Lanai<'_>) -> (u32, bool) {
        match self.op {
            Op::FromHost { entry: e, .. } if e.frame == entry.frame => {
                let done = l
                    .dma_progress(now)
                    .filter(|p| p.channel == 0)
                    .map_or(0, |p| p.done);
                (entry.inline + done, false)
            }
            _ => (entry.len, true),
        }
    }
}

fn hcb_read(l: &Lanai<'_>, at: u32) -> u32 {
    l.sram_ref().read_u32(at).unwrap_or(0)
}

/// Marks send slot `slot` finished and advances SENT over every finished slot in order.
pub fn slot_done(mcp: &mut Mcp, l: &mut Lanai<'_>, slot: u32) {
    let h = &mut mcp.host;
    h.slot_done[(slot % SEND_SLOTS) as usize] = true;
    while h.slot_done[(h.sent % SEND_SLOTS) as usize] && h.sent != h.head {
        h.slot_done[(h.sent % SEND_SLOTS) as usize] = false;
        h.sent = h.sent.wrapping_add(1);
    }
    let _ = l.sram().write_u32(mcp.layout.send + 8, h.sent);
}

/// Whether [`step`] has anything to look at: a transfer in progress, a packet in the rx
/// pool, a packet arriving that polled mode could follow, or a new send slot with room in
/// the tx pool.
#[inline]
pub fn has_work(mcp: &Mcp, l: &Lanai<'_>) -> bool {
    !matches!(mcp.host.op, Op::Idle)
        || !mcp.recv.rx.is_empty()
        || (mcp.config.recv_mode == super::RecvMode::Polled
            && matches!(l.recv_state(), RecvState::Receiving { .. }))
        || (!mcp.tx.is_full()
            && (hcb_read(l, mcp.layout.send) != mcp.host.head || super::trapeze::has_send(mcp, l)))
}

/// Runs the host-DMA state machine one step. Returns whether it made progress.
pub fn step(mcp: &mut Mcp, now: Time, l: &mut Lanai<'_>) -> bool {
    let was_busy = !matches!(mcp.host.op, Op::Idle);
    let progressed = advance_op(mcp, now, l);
    // A transfer that just finished frees the engine: start the next one at once rather
    // than a loop iteration later (the engine is the MCP's bottleneck, seed 000 notes).
    if was_busy && progressed && matches!(mcp.host.op, Op::Idle) {
        start_next(mcp, now, l);
    }
    // A transfer just started may already be done (a short one, or an unthrottled
    // engine): look once, as a control program spinning on the T bit would, instead of
    // a whole loop iteration later.
    if progressed
        && matches!(
            mcp.host.op,
            Op::ToHost { .. } | Op::FromHost { .. } | Op::Directed { .. } | Op::Trapeze { .. }
        )
    {
        l.advance(now);
        if advance_op(mcp, now, l) && matches!(mcp.host.op, Op::Idle) {
            start_next(mcp, now, l);
        }
    }
    progressed
}

mod follow;
use follow::{follow_start, follow_step};

fn start_next(mcp: &mut Mcp, now: Time, l: &mut Lanai<'_>) -> bool {
    to_host(mcp, now, l)
        || follow_start(mcp, now, l)
        || from_host(mcp, now, l)
        || super::trapeze::from_ring(mcp, now, l)
}

/// A filled tx entry is complete: a send-channel slot is finished with (its payload is in
/// SRAM now); a Trapeze entry waits until it is sent.
fn filled(mcp: &mut Mcp, l: &mut Lanai<'_>, entry: &TxEntry) {
    if !entry.tpz {
        slot_done(mcp, l, entry.slot);
    }
}

/// A tx entry whose payload could not be brought in is refused.
fn refused(mcp: &mut Mcp, l: &mut Lanai<'_>, entry: &TxEntry) {
    mcp.count(counter::SEND_ERRORS);
    if entry.tpz {
        super::trapeze::sent(mcp, l, entry.slot, false);
    } else {
        slot_done(mcp, l, entry.slot);
    }
}

/// Where the payload of a tx entry comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    /// Host memory at this bus address: a host DMA.
    Host(u64),
    /// The SRAM workspace at this address: a LANai copy (seed 001, `gm_opiom_send`).
    Sram(u32),
}

/// Brings `len` payload bytes from `src` in behind the inline bytes of `entry` (already
/// in place) and queues the entry once they are in. Returns whether it started anything.
pub(crate) fn start_fill(
    mcp: &mut Mcp,
    now: Time,
    l: &mut Lanai<'_>,
    mut entry: TxEntry,
    src: Source,
    len: u32,
) -> bool {
    let data = entry.frame + HEADER_LEN as u32 + entry.inline;
    if len == 0 {
        csum::seal(l, &entry, 0);
        mcp.tx.push(entry);
        filled(mcp, l, &entry);
        return true;
    }
    match src {
        Source::Sram(from) => {
            let end = from.checked_add(len);
            let inside =
                from >= mcp.layout.workspace && end.is_some_and(|e| e <= mcp.layout.workspace_end);
            if !inside || l.sram().copy_within(from, data, len as usize).is_err() {
                refused(mcp, l, &entry);
                return true;
            }
            // No DMA moved these bytes: the LANai sums what it copied.
            if entry.subtype == SUBTYPE_DATA {
                let rest = csum::sram_sum(l, data, len);
                csum::seal(l, &entry, rest);
            }
            let until = now
                + myri_device::time::transfer_time(
                    len as usize,
                    u64::from(mcp.config.lanai_copy_bytes_per_sec),
                );
            mcp.host.op = Op::Copy { entry, until };
            true
        }
        Source::Host(host) => {
            let overlapped = mcp.tx.is_empty() && len >= mcp.config.overlap_threshold;
            entry.overlapped = overlapped;
            let t = Transfer {
                dir: Direction::HostToLanai,
                lar: data,
                len,
                host,
            };
            let Ok((first, last)) = mcp.host.ring.issue(l, now, &[t]) else {
                refused(mcp, l, &entry);
                return true;
            };
            if overlapped {
                mcp.tx.push(entry);
            }
            mcp.host.op = Op::FromHost {
                slot: entry.slot,
                entry,
                pushed: overlapped,
                first,
                last,
            };
            true
        }
    }
}

/// Issues a chain of transfers to the host for a GM or Trapeze delivery.
pub(crate) fn issue_delivery(
    mcp: &mut Mcp,
    now: Time,
    l: &mut Lanai<'_>,
    chain: &[Transfer],
    trapeze: bool,
) -> bool {
    match mcp.host.ring.issue(l, now, chain) {
        Ok((first, last)) => {
            mcp.host.op = if trapeze {
                Op::Trapeze { first, last }
            } else {
                Op::Directed { first, last }
            };
            true
        }
        Err(_) => false,
    }
}

fn advance_op(mcp: &mut Mcp, now: Time, l: &mut Lanai<'_>) -> bool {
    match mcp.host.op {
        Op::Idle => start_next(mcp, now, l),
        Op::FromHost {
            slot,
            entry,
            pushed,
            first,
            last,
        } => match mcp.host.ring.status(l, last) {
            Status::Pending => false,
            Status::Done => {
                let _ = slot;
                mcp.host.op = Op::Idle;
                // The engine's sum of the bytes it brought in, into the trailer before the
                // send DMA can see the entry complete.
                let rest = csum::written_back(l, mcp.host.ring.addr(last));
                csum::seal(l, &entry, rest);
                if !pushed {
                    mcp.tx.push(entry);
                }
                filled(mcp, l, &entry);
                true
            }
            Status::Faulted => {
                mcp.host.ring.skip(l, now, first, last);
                mcp.host.op = Op::Idle;
                mcp.count(counter::DMA_FAULTS);
                if pushed {
                    // The send DMA sends nothing of an overlapped packet before its data
                    // arrives; mark it so it drops (and counts) it.
                    if let Some(e) = mcp.tx.head_mut().filter(|e| e.frame == entry.frame) {
                        e.aborted = true;
                    }
                    filled(mcp, l, &entry);
                } else {
                    refused(mcp, l, &entry);
                }
                true
            }
        },
        Op::Copy { entry, until } => {
            if now < until {
                return false;
            }
            mcp.host.op = Op::Idle;
            mcp.tx.push(entry);
            mcp.count(counter::SRAM_SENDS);
            filled(mcp, l, &entry);
            true
        }
        Op::Directed { first, last } | Op::Trapeze { first, last } => {
            let trapeze = matches!(mcp.host.op, Op::Trapeze { .. });
            match mcp.host.ring.status(l, last) {
                Status::Pending => false,
                Status::Done => {
                    mcp.host.op = Op::Idle;
                    mcp.recv.rx.pop();
                    if trapeze {
                        super::trapeze::delivered(mcp, l, true);
                    } else {
                        mcp.count(counter::DIRECTED_PLACED);
                    }
                    true
                }
                Status::Faulted => {
                    mcp.host.ring.skip(l, now, first, last);
                    mcp.host.op = Op::Idle;
                    mcp.recv.rx.pop();
                    mcp.count(counter::DMA_FAULTS);
                    if trapeze {
                        super::trapeze::delivered(mcp, l, false);
                    }
                    true
                }
            }
        }
        Op::ToHost {
            chan,
            overlapped,
            first,
            last,
        } => match mcp.host.ring.status(l, last) {
            Status::Pending => false,
            Status::Done => {
                mcp.host.op = Op::Idle;
                mcp.recv.rx.pop();
                let c = usize::from(chan);
                mcp.host.done[c] = mcp.host.done[c].wrapping_add(1);
                let _ = l.sram().write_u32(
                    mcp.layout.recv_chan(u32::from(chan)) + recv_chan::DONE,
                    mcp.host.done[c],
                );
                mcp.count(counter::DELIVERED);
                if overlapped {
                    mcp.count(counter::OVERLAPPED_RECVS);
                }
                true
            }
            Status::Faulted => {
                mcp.host.ring.skip(l, now, first, last);
                mcp.host.op = Op::Idle;
                mcp.recv.rx.pop();
                mcp.count(counter::DMA_FAULTS);
                true
            }
        },
        Op::Follow { .. } => follow_step(mcp, now, l),
    }
}

/// Where a packet for `chan` would go: the next posted descriptor and the poll structure.
struct Target {
    host: u64,
    capacity: u32,
    poll: u64,
    done: u32,
}

/// Checks a frame header and its channel. `Ok(None)`: the channel has no posted buffer
/// yet (wait). `Err(c)`: drop the packet, counting `c`.
fn target(mcp: &Mcp, l: &Lanai<'_>, header: &[u8]) -> Result<Option<(u8, Target)>, u32> {
    let frame = ApiFrame::new_checked(header).map_err(|_| counter::DROP_LENGTH)?;
    let repr = FrameRepr::parse(&frame).map_err(|e| match e {
        FrameError::Truncated(_) => counter::DROP_LENGTH,
        FrameError::WrongType(_) => counter::DROP_TYPE,
        FrameError::UnknownSubtype(_) => counter::DROP_SUBTYPE,
    })?;
    let chan = u32::from(repr.chan);
    if chan >= NUM_CHANNELS as u32 {
        return Err(counter::DROP_CHANNEL);
    }
    let c = mcp.layout.recv_chan(chan);
    if hcb_read(l, c + recv_chan::STATE) != 1 {
        return Err(counter::DROP_CHANNEL);
    }
    let done = mcp.host.done[chan as usize];
    let posted = hcb_read(l, c + recv_chan::POSTED).wrapping_sub(done);
    if posted == 0 {
        return Ok(None);
    }
    if posted > RECV_SLOTS {
        // The host claims more buffers than there are descriptors: its queue is corrupt.
        return Err(counter::DROP_CHANNEL);
    }
    let desc = l
        .sram_ref()
        .slice(mcp.layout.recv_slot(chan, done), hcb::RecvDescRepr::LEN)
        .ok()
        .and_then(|b| hcb::RecvDescRepr::parse(b).ok())
        .unwrap_or_default();
    let (host, capacity) = (desc.host, desc.capacity);
    let poll = (u64::from(hcb_read(l, c + recv_chan::POLL_HI)) << 32)
        | u64::from(hcb_read(l, c + recv_chan::POLL_LO));
    Ok(Some((
        repr.chan,
        Target {
            host,
            capacity,
            poll,
            done,
        },
    )))
}

/// The first bytes of a frame in SRAM (fewer if the frame is shorter than a header).
fn read_header(l: &Lanai<'_>, at: u32, len: u32) -> ([u8; HEADER_LEN], usize) {
    let n = (len as usize).min(HEADER_LEN);
    let mut h = [0u8; HEADER_LEN];
    let _ = l.sram_ref().read(at, &mut h[..n]);
    (h, n)
}

/// The chain that finishes a delivery, and the tag of its first block.
pub(crate) struct Delivery {
    chain: smallvec::SmallVec<[Transfer; 2]>,
    tag: Option<Tag>,
}

/// The chain that finishes a delivery: the payload bytes from `copied` on, then the
/// completion record (see [`crate::hcb::CompletionRepr`]), which is bytes 4..32 of the
/// payload block's control block once the engine has written its checksum back, with the
/// MCP's words in the block's spare halfword and padding. Without a payload block, the
/// same words come from scratch.
#[allow(clippy::too_many_arguments)]
fn deliver_chain(
    mcp: &Mcp,
    l: &mut Lanai<'_>,
    buf: u32,
    payload: u32,
    copied: u32,
    t: &Target,
    sender: u16,
    head: u16,
) -> Option<Delivery> {
    // `copied` is at most a receive buffer (POOL_BUF) and fits the spare halfword.
    let spare = u16::try_from(copied).ok()?;
    let pad = [
        (u32::from(sender) << 16) | u32::from(head),
        t.done.wrapping_add(1),
    ];
    let record = t.poll + u64::from(RECORD_LEN * (t.done % RECV_SLOTS));
    let to_record = |lar: u32| Transfer {
        dir: Direction::LanaiToHost,
        lar,
        len: RECORD_LEN - 4,
        host: record + 4,
    };
    let mut chain = smallvec::SmallVec::new();
    if payload > copied {
        chain.push(Transfer {
            dir: Direction::LanaiToHost,
            lar: buf + HEADER_LEN as u32 + copied,
            len: payload - copied,
            host: t.host + u64::from(copied),
        });
        // The payload block is the chain's first.
        chain.push(to_record(mcp.host.ring.next_block() + 4));
        return Some(Delivery {
            chain,
            tag: Some(Tag { spare, pad }),
        });
    }
    let scratch = mcp.layout.scratch;
    let s = l.sram();
    s.fill(scratch, RECORD_LEN as usize, 0).ok()?;
    s.write_u32(scratch + 4, u32::from(spare) << 16).ok()?;
    s.write_u32(scratch + BLOCK_LEN as u32, pad[0]).ok()?;
    s.write_u32(scratch + BLOCK_LEN as u32 + 4, pad[1]).ok()?;
    chain.push(to_record(scratch + 4));
    Some(Delivery { chain, tag: None })
}

/// Starts delivering the rx pool's oldest packet, or drops it.
fn to_host(mcp: &mut Mcp, now: Time, l: &mut Lanai<'_>) -> bool {
    let Some(e) = mcp.recv.rx.head() else {
        return false;
    };
    let (header, n) = read_header(l, e.buf, e.len);
    if n == HEADER_LEN && u16::from_be_bytes([header[0], header[1]]) == myri_device::wire::TYPE_CRL
    {
        match header[2] {
            crate::frame::SUBTYPE_DIRECTED => return super::directed::to_host(mcp, now, l, &e),
            crate::frame::SUBTYPE_TRAPEZE => return super::trapeze::to_host(mcp, now, l, &e),
            _ => {}
        }
    }
    let (chan, t) = match target(mcp, l, &header[..n]) {
        Ok(Some(x)) => x,
        Ok(None) => return false,
        Err(c) => {
            mcp.recv.rx.pop();
            mcp.count(c);
            return true;
        }
    };
    let payload = e.len.checked_sub((HEADER_LEN + TRAILER_LEN) as u32);
    let Some(payload) = payload.filter(|&p| p <= t.capacity && p as usize <= hcb::MAX_PAYLOAD)
    else {
        mcp.recv.rx.pop();
        mcp.count(counter::DROP_LENGTH);
        return true;
    };
    let sender = csum::read_trailer(l, e.buf, e.len);
    let Some(d) = deliver_chain(mcp, l, e.buf, payload, 0, &t, sender, 0) else {
        return false;
    };
    match mcp.host.ring.issue_tagged(l, now, &d.chain, d.tag) {
        Ok((first, last)) => {
            mcp.host.op = Op::ToHost {
                chan,
                overlapped: false,
                first,
                last,
            }
        }
        Err(_) => return false,
    }
    true
}

/// Takes the next send-channel slot.
fn from_host(mcp: &mut Mcp, now: Time, l: &mut Lanai<'_>) -> bool {
    if mcp.tx.is_full() {
        return false;
    }
    let send = mcp.layout.send;
    let head = mcp.host.head;
    if hcb_read(l, send) == head {
        return false;
    }
    let at = mcp.layout.send_slot(head);
    // The layout keeps every slot inside SRAM; a slot that cannot be read is all zeros
    // (an empty DMA slot of route 0), which the checks below refuse like any bad one.
    let slot = l
        .sram_ref()
        .slice(at, hcb::SendSlotRepr::LEN)
        .ok()
        .and_then(|b| hcb::SendSlotRepr::parse(b).ok())
        .unwrap_or_default();
    let (flags, len, chan, route, inline, host) = (
        slot.flags,
        slot.len,
        slot.chan,
        slot.route,
        slot.inline_len,
        slot.host,
    );
    mcp.host.head = head.wrapping_add(1);
    let _ = l.sram().write_u32(send + 4, mcp.host.head);

    let pio = flags & hcb::slot_flags::PIO != 0;
    let sram = flags & hcb::slot_flags::SRAM != 0;
    let subtype =
        match ((flags & hcb::slot_flags::SUBTYPE_MASK) >> hcb::slot_flags::SUBTYPE_SHIFT) as u8 {
            0 => crate::frame::SUBTYPE_DATA,
            s => s,
        };
    let subtype_ok = matches!(
        subtype,
        crate::frame::SUBTYPE_DATA | crate::frame::SUBTYPE_DIRECTED
    );
    let route_ok = route < hcb::NUM_ROUTES && hcb_read(l, mcp.layout.route(route)) & 1 == 1;
    let sizes_ok = if pio {
        len as usize <= hcb::PIO_MAX && inline == 0 && !sram
    } else {
        len as usize <= hcb::MAX_PAYLOAD && inline as usize <= hcb::PIO_MAX
    };
    if !route_ok || !sizes_ok || chan > 0xFF || !subtype_ok {
        mcp.count(counter::SEND_ERRORS);
        slot_done(mcp, l, head);
        return true;
    }
    let chan = chan as u8;
    if pio {
        let frame = mcp.layout.pio_buf(head) + hcb::ROUTE_AREA;
        // The host wrote these bytes by PIO: the LANai sums them.
        let entry = TxEntry {
            frame,
            len,
            chan,
            route,
            slot: head,
            pio: true,
            overlapped: false,
            inline: 0,
            aborted: false,
            subtype,
            tpz: false,
            csum: if subtype == SUBTYPE_DATA {
                csum::sram_sum(l, frame + HEADER_LEN as u32, len)
            } else {
                0
            },
        };
        csum::seal(l, &entry, 0);
        mcp.tx.push(entry);
        return true;
    }
    let frame = tx_buffer(&mcp.layout, mcp.tx.incoming()) + hcb::ROUTE_AREA;
    let data = frame + HEADER_LEN as u32;
    let mut inline_sum = 0;
    if inline > 0 {
        let from = mcp.layout.pio_buf(head) + hcb::ROUTE_AREA + HEADER_LEN as u32;
        let _ = l.sram().copy_within(from, data, inline as usize);
        if subtype == SUBTYPE_DATA {
            inline_sum = csum::sram_sum(l, data, inline);
        }
    }
    let entry = TxEntry {
        frame,
        len: inline + len,
        chan,
        route,
        slot: head,
        pio: false,
        overlapped: false,
        inline,
        aborted: false,
        subtype,
        tpz: false,
        csum: inline_sum,
    };
    let src = if sram {
        // The workspace address is a 32-bit SRAM address; anything above is refused.
        Source::Sram(u32::try_from(host).unwrap_or(u32::MAX))
    } else {
        Source::Host(host)
    };
    start_fill(mcp, now, l, entry, src, len)
}
