//! One board as the host's driver sees it (seed 000, System Overview: "the Driver").
//!
//! A [`Unit`] owns the board with the control program running on it ([`Firmware`]), the
//! DMA memory the driver allocates for it, laid out as seed 000's Figure 3 (poll
//! structures, one array of send buffers, an array of receive buffers per channel), and
//! the state the board's users share but the MCP does not need (seed 000, API Overview:
//! "a shared memory region to hold information needed by multiple clients"). Users attach
//! with [`crate::Api::init`]; the first one loads and starts the MCP.

use crate::firmware::Mcp;
use crate::hcb::{NUM_CHANNELS, NUM_ROUTES, RECV_SLOTS};
use myri_device::board::Board;
use myri_device::fabric::{Fabric, PortId};
use myri_device::hostmem::{DeviceBuf, HostBuf, HostMemory, LentBuf, LentRead, SharedWords};
use myri_device::time::Time;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// Size of every host DMA buffer: the largest payload.
pub const BUF_LEN: usize = crate::hcb::MAX_PAYLOAD;
/// Send buffers in the DMA memory.
pub const SEND_BUFS: usize = 64;
/// Page size of the DMA memory.
pub const PAGE: usize = 4096;
/// Distance between buffers in the DMA memory: whole pages, since pages are what change
/// hands between host and board.
pub const BUF_STRIDE: usize = BUF_LEN.next_multiple_of(PAGE);
/// Spacing of the per-channel poll structures in the poll area: a completion record per
/// receive descriptor.
pub const POLL_STRIDE: usize = RECV_SLOTS as usize * crate::firmware::host_dma::RECORD_LEN as usize;
/// Size of the poll area at the start of the DMA memory: whole pages.
pub const POLL_LEN: usize = (NUM_CHANNELS * POLL_STRIDE).next_multiple_of(PAGE);

/// Where things are in a unit's DMA memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DmaLayout {
    /// Bus address of the region.
    pub base: u64,
}

impl DmaLayout {
    /// Total size of the region.
    pub const LEN: usize =
        POLL_LEN + SEND_BUFS * BUF_STRIDE + NUM_CHANNELS * RECV_SLOTS as usize * BUF_STRIDE;

    /// Offset of channel `c`'s poll structure.
    pub fn poll(c: u8) -> usize {
        usize::from(c) * POLL_STRIDE
    }

    /// Offset of send buffer `i`.
    pub fn send_buf(i: usize) -> usize {
        POLL_LEN + i * BUF_STRIDE
    }

    /// Offset of receive buffer `i` of channel `c`.
    pub fn recv_buf(c: u8, i: usize) -> usize {
        POLL_LEN + SEND_BUFS * BUF_STRIDE + (usize::from(c) * RECV_SLOTS as usize + i) * BUF_STRIDE
    }
}

/// The offset of completion `n`'s record of `chan` in the poll area.
#[inline]
fn record_at(chan: u8, n: u32) -> usize {
    DmaLayout::poll(chan) + (crate::firmware::host_dma::RECORD_LEN * (n % RECV_SLOTS)) as usize
}

/// Whether the board has delivered completion `n` of `chan` (its record's count alone).
#[inline]
pub(crate) fn completed(poll: &myri_device::hostmem::SharedWords, chan: u8, n: u32) -> bool {
    poll.load_be(record_at(chan, n) + 28) == Ok(n.wrapping_add(1))
}

/// Completion `n` of `chan` if the board has delivered it: its record's count (loaded
/// with Acquire, so the payload, length and checksums DMA'd before it are visible) is
/// `n + 1`.
pub(crate) fn completion(
    poll: &myri_device::hostmem::SharedWords,
    chan: u8,
    n: u32,
) -> Option<crate::hcb::CompletionRepr> {
    let at = record_at(chan, n);
    let count = poll.load_be(at + 28).ok()?;
    if count != n.wrapping_add(1) {
        return None;
    }
    let word = |o: usize| poll.load_be(at + o).unwrap_or(0);
    let (block, csums) = (word(4), word(24));
    Some(crate::hcb::CompletionRepr {
        head_len: (block >> 16) as u16,
        landed_tail: block as u16,
        tail_len: word(8),
        sender: (csums >> 16) as u16,
        landed_head: csums as u16,
        count,
    })
}

/// The board and the control program running on it.
pub struct Firmware {
    /// The board.
    pub board: Board,
    mcp: Option<Mcp>,
    booted_at: u64,
    /// Set when a poll found nothing to do, nothing was due, and the board was settled:
    /// the host's PCI generation then. Until the host writes to the board or the board
    /// stops being settled, polling again would do nothing either, so it is skipped.
    quiet_since: Option<u64>,
}

impl Firmware {
    /// A board with nothing running on it yet.
    pub fn new(board: Board) -> Firmware {
        Firmware {
            board,
            mcp: None,
            booted_at: u64::MAX,
            quiet_since: None,
        }
    }

    /// Runs the board's hardware and control program at `now`. Boots the MCP when the
    /// LANai has been (re)started. Returns whether the MCP did anything.
    ///
    /// The control program is a deterministic function of SRAM, the board's registers and
    /// engines, and time. When a poll finds nothing to do and nothing is due, the next
    /// poll is skipped (a few loads) for as long as the host has not written to the board
    /// and the board stays [settled](Board::settled): it would find nothing to do either.
    pub fn poll(&mut self, now: Time) -> bool {
        if self.quiet_since.is_some() {
            if self.still_quiet(now) {
                return false;
            }
            self.quiet_since = None;
        }
        let worked = self.run(now);
        if !worked && self.board.settled(now) && self.next_deadline(now).is_none() {
            self.quiet_since = Some(self.board.pci_generation());
        }
        worked
    }

    /// Forgets that the board was quiet: the next poll runs the control program. Anything
    /// that changes the board other than through the PCI window calls this.
    pub fn wake(&mut self) {
        self.quiet_since = None;
    }

    /// Whether the board is still as quiet as the last poll found it (see
    /// [`Firmware::poll`]): polling at `now` would do nothing.
    #[inline]
    pub fn still_quiet(&self, now: Time) -> bool {
        self.quiet_since == Some(self.board.pci_generation()) && self.board.settled(now)
    }

    fn run(&mut self, now: Time) -> bool {
        self.board.advance(now);
        let starts = self.board.lanai_starts();
        let Ok(mut l) = self.board.lanai() else {
            self.mcp = None;
            return false;
        };
        if self.booted_at != starts {
            self.booted_at = starts;
            self.mcp = Mcp::boot(&mut l);
        }
        match &mut self.mcp {
            Some(mcp) => mcp.poll(now, &mut l),
            None => false,
        }
    }

    /// The running MCP, if any.
    pub fn mcp(&self) -> Option<&Mcp> {
        self.mcp.as_ref()
    }

    /// When the board or its control program will next do something by itself.
    pub fn next_deadline(&mut self, now: Time) -> Option<Time> {
        if self.still_quiet(now) {
            return None;
        }
        let board = self.board.next_deadline(now);
        let mcp = match (&self.mcp, self.board.lanai()) {
            (Some(mcp), Ok(l)) => mcp.next_wake(now, &l),
            _ => None,
        };
        [board, mcp].into_iter().flatten().min()
    }
}

/// Who steps the control program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The host's own progress calls (deterministic; best on few cores). The
    /// deterministic scheduler drives units in this mode with virtual time.
    Inline,
    /// A thread running [`McpRunner`].
    Threaded,
}

/// Host-side state of one receive channel.
#[derive(Debug, Default)]
pub(crate) struct ChanState {
    pub(crate) reserved: bool,
    pub(crate) initialized: bool,
    /// Buffers handed to the MCP, oldest first, with their index.
    pub(crate) posted: VecDeque<(u16, DeviceBuf)>,
    /// Buffers the host holds (not posted).
    pub(crate) idle: Vec<(u16, HostBuf)>,
    /// Buffers ever posted (free-running; mirrors POSTED).
    pub(crate) posted_count: u32,
    /// Completions consumed (free-running).
    pub(crate) consumed: u32,
    /// Buffers created so far.
    pub(crate) created: u16,
}

/// Where a buffer in flight came from.
#[derive(Debug)]
pub(crate) enum Origin {
    /// A send buffer.
    Send(u16),
    /// A receive buffer being turned around, to go back to its channel.
    Recv(u8, u16),
    /// A lent send buffer: its owner keeps it.
    Lent,
}

/// A send handed to the board and not yet finished.
#[derive(Debug)]
pub(crate) struct InFlight {
    pub(crate) seq: u32,
    pub(crate) origin: Origin,
    pub(crate) buf: Option<DeviceBuf>,
    pub(crate) host: Option<HostBuf>,
    /// A lent buffer the board reads the payload from (dropped when the send is done).
    pub(crate) lent: Option<LentRead>,
    /// The user gave up the ticket: free the buffer when done.
    pub(crate) released: bool,
}

/// What a unit's users share.
pub(crate) struct UnitState {
    /// Counted under the lock every call takes anyway.
    pub(crate) counts: HostCounters,
    pub(crate) users: u32,
    pub(crate) mcp_loaded: bool,
    pub(crate) pio_threshold: usize,
    pub(crate) nonce: u32,
    pub(crate) routes: [bool; NUM_ROUTES as usize],
    pub(crate) chans: Vec<ChanState>,
    /// Send slots enqueued (free-running; mirrors TAIL).
    pub(crate) tail: u32,
    /// The last SENT read from the HCB.
    pub(crate) sent: u32,
    pub(crate) in_flight: VecDeque<InFlight>,
    /// Finished sends whose ticket the user still holds, by sequence number.
    pub(crate) finished: Vec<(u32, Option<HostBuf>, Origin)>,
    pub(crate) free_send: Vec<(u16, HostBuf)>,
    /// Lent send buffers dropped while the board still read them: back to `free_send`
    /// when a reap finds the board done.
    pub(crate) returning: Vec<(u16, LentBuf)>,
    pub(crate) send_created: u16,
    pub(crate) poll: Option<SharedWords>,
    /// Users attached so far (each gets its own [`crate::gm::UserId`]).
    pub(crate) users_ever: u32,
    /// The GM and Trapeze books: SRAM allocator, windows, endpoint.
    pub(crate) gm: super::gm::GmState,
}

/// Counters of the host side (a snapshot: [`Unit::counters`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HostCounters {
    /// Sends enqueued.
    pub sends: u64,
    /// Of those, by PIO.
    pub pio_sends: u64,
    /// Packets received.
    pub recvs: u64,
    /// Calls refused for being unable to proceed now (full queues, no buffers).
    pub would_block: u64,
    /// Calls refused as misuse or failure.
    pub errors: u64,
    /// Reads of the HCB across the PCI bus to refresh the send channel's shadow.
    pub shadow_refreshes: u64,
}

/// Refusals, counted where no lock is held.
#[derive(Debug, Default)]
pub(crate) struct Refusals {
    pub(crate) would_block: AtomicU64,
    pub(crate) errors: AtomicU64,
}

/// Everything behind a unit's one lock: the board with its firmware, and the host
/// state its users share. Every API call takes the lock once.
pub(crate) struct Shared {
    pub(crate) fw: Firmware,
    pub(crate) st: UnitState,
}

/// A board as the host's driver sees it. See the module documentation.
pub struct Unit {
    id: u64,
    /// Where the HCB and the MCP's buffers are: fixed by the SRAM size (`None` if the
    /// SRAM is too small to hold them).
    pub(crate) layout: Option<crate::hcb::Layout>,
    pub(crate) node: Mutex<Shared>,
    pub(crate) mem: Arc<HostMemory>,
    pub(crate) mode: Mode,
    pub(crate) now: AtomicU64,
    pub(crate) refusals: Refusals,
    /// The poll page, once the first MCP load has shared it (a view of `state.poll`).
    pub(crate) poll_words: std::sync::OnceLock<SharedWords>,
    /// Per receive channel, what [`crate::Api::recv`] needs to tell an empty channel
    /// without the state lock: [`RECV_READY`] while the channel is initialized, and the
    /// completions consumed in the low 32 bits. Written under the state lock.
    pub(crate) recv_hint: [AtomicU64; NUM_CHANNELS],
    /// The board's link, as it was when the unit was made (for the lock-free idle poll).
    link: Option<(Arc<Fabric>, PortId)>,
    /// Set (under the node lock) when a poll left the firmware quiet, with the link's state
    /// then in `quiet_link_up`; cleared (under the node lock) by every other access to
    /// the board. While it is set and no packet has reached the port, a poll would do
    /// nothing, and [`Unit::poll`] returns without taking the lock.
    pub(crate) quiet: AtomicBool,
    quiet_link_up: AtomicBool,
    waker: Mutex<Option<std::thread::Thread>>,
    has_waker: AtomicBool,
}

static NEXT_UNIT: AtomicU64 = AtomicU64::new(1);

/// The bit of [`Unit::recv_hint`] set while a channel is initialized.
pub(crate) const RECV_READY: u64 = 1 << 32;

/// Locks a mutex, ignoring poisoning: the state is consistent between calls.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(recovered)
}

/// The guard of a poisoned lock. Cold, so that the branch to it is laid out away from
/// the lock calls inlined into hot paths.
#[cold]
fn recovered<G>(poisoned: std::sync::PoisonError<G>) -> G {
    poisoned.into_inner()
}

impl Unit {
    /// A unit for `board` (powered up, link attached) with DMA memory at bus address
    /// `dma_base`, stepped in `mode`.
    pub fn new(board: Board, dma_base: u64, mode: Mode) -> Arc<Unit> {
        Unit::with_extra_memory(board, dma_base, mode, 0)
    }

    /// Like [`Unit::new`], with `extra` more bytes of DMA memory (rounded up to pages)
    /// after the driver's own, for directed-send windows and Trapeze payload buffers:
    /// claim them with [`Unit::claim_extra`].
    pub fn with_extra_memory(
        mut board: Board,
        dma_base: u64,
        mode: Mode,
        extra: usize,
    ) -> Arc<Unit> {
        let mem = HostMemory::new(
            dma_base,
            DmaLayout::LEN + extra.next_multiple_of(PAGE),
            PAGE,
        )
        .expect("the layout is page-aligned and non-empty");
        board.attach_host_memory(mem.clone());
        let layout = crate::hcb::Layout::new(board.sram().len());
        let link = board
            .link_port()
            .zip(board.fabric().cloned())
            .map(|(p, f)| (f, p));
        let state = UnitState {
            counts: HostCounters::default(),
            users: 0,
            mcp_loaded: false,
            pio_threshold: 0,
            nonce: 0x5eed_0001,
            routes: [false; NUM_ROUTES as usize],
            chans: (0..NUM_CHANNELS).map(|_| ChanState::default()).collect(),
            tail: 0,
            sent: 0,
            in_flight: VecDeque::new(),
            finished: Vec::new(),
            free_send: Vec::new(),
            returning: Vec::new(),
            send_created: 0,
            poll: None,
            users_ever: 0,
            gm: super::gm::GmState::new(layout.as_ref()),
        };
        Arc::new(Unit {
            id: NEXT_UNIT.fetch_add(1, Ordering::Relaxed),
            layout,
            node: Mutex::new(Shared {
                fw: Firmware::new(board),
                st: state,
            }),
            mem,
            mode,
            now: AtomicU64::new(0),
            refusals: Refusals::default(),
            poll_words: std::sync::OnceLock::new(),
            recv_hint: Default::default(),
            link,
            quiet: AtomicBool::new(false),
            quiet_link_up: AtomicBool::new(false),
            waker: Mutex::new(None),
            has_waker: AtomicBool::new(false),
        })
    }

    /// A process-unique id.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// How the control program is stepped.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The DMA memory.
    pub fn memory(&self) -> &Arc<HostMemory> {
        &self.mem
    }

    /// Bytes of extra DMA memory (see [`Unit::with_extra_memory`]).
    pub fn extra_len(&self) -> usize {
        self.mem.len() - DmaLayout::LEN
    }

    /// Claims `len` bytes at `offset` of the extra DMA memory (page-aligned), for a window
    /// or payload buffers. Refused outside the extra memory or on pages already claimed.
    pub fn claim_extra(
        &self,
        offset: usize,
        len: usize,
    ) -> Result<HostBuf, myri_device::hostmem::HostMemError> {
        if offset
            .checked_add(len)
            .is_none_or(|end| end > self.extra_len())
        {
            return Err(myri_device::hostmem::HostMemError::Layout(
                "range outside the extra dma memory",
            ));
        }
        self.mem.claim(DmaLayout::LEN + offset, len)
    }

    /// Runs `f` on the board and its firmware (for inspection, fault injection, tests).
    pub fn with_firmware<R>(&self, f: impl FnOnce(&mut Firmware) -> R) -> R {
        let mut node = lock(&self.node);
        // The caller may change the board in any way: the next poll looks again.
        node.fw.wake();
        self.quiet.store(false, Ordering::Relaxed);
        f(&mut node.fw)
    }

    /// Host-side counters, as they are now.
    pub fn counters(&self) -> HostCounters {
        HostCounters {
            would_block: self.refusals.would_block.load(Ordering::Relaxed),
            errors: self.refusals.errors.load(Ordering::Relaxed),
            ..lock(&self.node).st.counts
        }
    }

    /// Packets the board holds: sends the host enqueued that are neither on the network
    /// nor refused yet; packets received off the network and neither delivered to a host
    /// buffer nor dropped yet; and packets delivered but not yet taken by
    /// [`crate::Api::recv`]. Zero when everything is accounted for (drivers wait for it
    /// before closing their books).
    pub fn packets_held(&self) -> u64 {
        use crate::hcb::counter;
        let (mcp, host) = {
            let node = lock(&self.node);
            (node.fw.mcp().map(|m| m.counters()), node.st.counts)
        };
        let Some(c) = mcp else { return 0 };
        let g = |i| u64::from(c.get(i));
        let settled = g(counter::DELIVERED)
            + g(counter::DROP_RX_FULL)
            + g(counter::DROP_TYPE)
            + g(counter::DROP_SUBTYPE)
            + g(counter::DROP_CHANNEL)
            + g(counter::DROP_LENGTH);
        let unread = g(counter::DELIVERED).saturating_sub(host.recvs);
        let unsent = host
            .sends
            .saturating_sub(g(counter::SENT) + g(counter::SEND_ERRORS));
        g(counter::RECEIVED).saturating_sub(settled) + unread + unsent
    }

    /// Takes the unit's lock.
    pub(crate) fn locked(&self) -> MutexGuard<'_, Shared> {
        lock(&self.node)
    }

    /// Publishes channel `chan`'s state for the lock-free look of [`crate::Api::recv`].
    pub(crate) fn publish_chan(&self, st: &UnitState, chan: u8) {
        let c = &st.chans[usize::from(chan)];
        let ready = if c.initialized { RECV_READY } else { 0 };
        self.recv_hint[usize::from(chan)].store(ready | u64::from(c.consumed), Ordering::Release);
    }

    /// The latest time the host told the unit.
    pub(crate) fn now(&self) -> Time {
        Time::from_nanos(self.now.load(Ordering::Relaxed))
    }

    pub(crate) fn set_now(&self, now: Time) {
        // Most calls find the time already there or earlier: a load is cheaper than the
        // read-modify-write, which only a later time needs.
        if now.as_nanos() > self.now.load(Ordering::Relaxed) {
            self.now.fetch_max(now.as_nanos(), Ordering::Relaxed);
        }
    }

    /// Tells a threaded MCP that the host has queued work (the doorbell of this model).
    pub(crate) fn kick(&self) {
        if self.has_waker.load(Ordering::Acquire)
            && let Some(t) = lock(&self.waker).as_ref()
        {
            t.unpark();
        }
    }

    /// Whether the board is quiet whatever the time: the last poll found nothing to do
    /// and nothing due, nothing has been written to the board since, no packet waits at
    /// its port and the link is as it was. Until that changes a poll at any `now` does
    /// nothing, so an inline driver may skip both the poll and its clock read (see
    /// [`crate::Api::is_quiet`]). A few loads, no lock.
    #[inline]
    pub fn is_quiet(&self) -> bool {
        self.quiet.load(Ordering::Acquire)
            && self.link.as_ref().is_some_and(|(fabric, port)| {
                fabric.is_empty(*port)
                    && fabric.port_link_up(*port) == self.quiet_link_up.load(Ordering::Relaxed)
            })
    }

    /// Steps the firmware once at `now` (inline mode).
    pub fn poll(&self, now: Time) -> bool {
        self.set_now(now);
        if self.quiet.load(Ordering::Acquire)
            && let Some((fabric, port)) = &self.link
            && !fabric.arrived(now, *port)
            && fabric.port_link_up(*port) == self.quiet_link_up.load(Ordering::Relaxed)
        {
            // Quiet since the last poll, nothing written to the board since (every access
            // clears the flag), and nothing arrived: the firmware would do nothing.
            return false;
        }
        let mut node = lock(&self.node);
        let worked = node.fw.poll(now);
        if !worked && self.link.is_some() && node.fw.still_quiet(now) {
            if let Some((fabric, port)) = &self.link {
                self.quiet_link_up
                    .store(fabric.port_link_up(*port), Ordering::Relaxed);
            }
            self.quiet.store(true, Ordering::Release);
        } else {
            self.quiet.store(false, Ordering::Relaxed);
        }
        worked
    }
}

/// Runs a unit's control program on a thread the caller provides (threaded mode): spin
/// while there is work, then park until the host or the network wakes it.
pub struct McpRunner {
    unit: Arc<Unit>,
}

impl McpRunner {
    /// A runner for `unit`.
    pub fn new(unit: Arc<Unit>) -> McpRunner {
        McpRunner { unit }
    }

    /// Runs until `stop` is set, reading the time from `clock` (the caller's: this crate
    /// reads no clock). Call it on the thread that should run the MCP.
    pub fn run(&self, clock: impl Fn() -> Time, stop: &AtomicBool) {
        let unit = &self.unit;
        *lock(&unit.waker) = Some(std::thread::current());
        unit.has_waker.store(true, Ordering::Release);
        let port = unit.with_firmware(|f| f.board.link_port().zip(f.board.fabric().cloned()));
        if let Some((port, fabric)) = &port {
            fabric.set_waker(*port, Some(std::thread::current()));
        }
        let mut idle = 0u32;
        while !stop.load(Ordering::Acquire) {
            let now = clock();
            unit.set_now(now);
            let (worked, deadline) = {
                let mut node = lock(&unit.node);
                let fw = &mut node.fw;
                let worked = fw.poll(now);
                (worked, fw.next_deadline(now))
            };
            if worked || deadline.is_some_and(|d| d <= now) {
                idle = 0;
                // Leave the host a moment at the lock before taking it again: a spinning
                // MCP must not starve the host of the buffers it is trying to post.
                for _ in 0..64 {
                    std::hint::spin_loop();
                }
                continue;
            }
            idle += 1;
            if idle < 200 {
                std::hint::spin_loop();
            } else if idle < 400 {
                std::thread::yield_now();
            } else {
                let wait = deadline.map_or(std::time::Duration::from_micros(500), |d| {
                    d.saturating_since(now)
                });
                std::thread::park_timeout(wait.min(std::time::Duration::from_micros(500)));
            }
        }
        unit.has_waker.store(false, Ordering::Release);
        *lock(&unit.waker) = None;
        if let Some((port, fabric)) = port {
            fabric.set_waker(port, None);
        }
    }
}
