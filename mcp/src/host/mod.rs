//! The host API: the unreliable channel API of seed 000's Appendix A, in Rust.
//!
//! | seed 000                            | here                                        |
//! |-------------------------------------|---------------------------------------------|
//! | `myri_api0_init`                    | [`Api::init`]                               |
//! | `myri_api0_handshake`               | [`Api::handshake`]                          |
//! | `myri_api0_get_chan` / `rele_chan`  | [`Api::get_chan`] / [`Api::rele_chan`]      |
//! | `myri_api0_init_recv_chan`          | [`Api::init_recv_chan`]                     |
//! | `myri_api0_get_send_buffer[_l]`     | [`Api::get_send_buffer`]                    |
//! | `myri_api0_send_route[_l]`          | [`Api::send`], [`Api::send_inline`]         |
//! | `myri_api0_free_send[_l]`           | [`Api::free_send`], dropping a [`Ticket`]   |
//! | `myri_api0_buffer_busy_p`           | [`Api::buffer_busy`]                        |
//! | `myri_api0_reap_sent_l`             | [`Api::reap_sent`]                          |
//! | `myri_api0_num_pending`             | [`Api::num_pending`]                        |
//! | `myri_api0_recv` / `recv_poll`      | [`Api::recv`] / [`Api::recv_poll`]          |
//! | `myri_api0_free_recv`               | [`Api::free_recv`], dropping a [`RecvBuf`]  |
//! | (turning a receive buffer around)   | [`Api::send_recv_buffer`]                   |
//! | `myri_api0_add_route`               | [`Api::add_route`], [`Api::load_routes`]    |
//! | `myri_api0_lock` / `unlock`, `_l`   | [`SharedApi`] (locking) vs `&mut Api`       |
//!
//! Every misuse is an [`ApiError`], counted in [`HostCounters`]; calls that cannot proceed
//! now (a full send channel, no free buffer) say so instead of blocking.

mod buffers;
mod error;
pub mod gm;
mod shared;
pub mod trapeze;
pub mod unit;

pub use buffers::{Channel, LentSendBuf, RecvBuf, SendBuf, Ticket};
pub use error::{ApiError, SendError};
pub use shared::SharedApi;
pub use unit::{DmaLayout, Firmware, HostCounters, McpRunner, Mode, Unit};

use crate::firmware::{McpConfig, McpCounters};
use crate::frame::HEADER_LEN;
use crate::hcb::{
    self, HCB_PTR, Layout, NUM_CHANNELS, NUM_ROUTES, RECV_SLOTS, SEND_SLOTS, off, recv_chan, state,
};
use crate::routes::{RouteFile, RouteId};
use myri_device::board::{Board, bring_up, config};
use myri_device::hostmem::{HostBuf, LentBuf};
use myri_device::time::Time;
use myri_device::wire::Route;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use unit::{BUF_LEN, InFlight, Origin, Shared, UnitState, completed, completion};

/// How to attach to a board (seed 000, `myri_api0_init`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InitOptions {
    /// Reload the MCP even if the board already has users. Use with caution: their
    /// channels, routes and sends in flight are lost.
    pub force_init: bool,
    /// The MCP to load if this is the board's first user.
    pub mcp: McpConfig,
    /// How many times to look for the MCP's answer before giving up.
    pub attempts: u32,
}

impl Default for InitOptions {
    fn default() -> InitOptions {
        InitOptions {
            force_init: false,
            mcp: McpConfig::default(),
            attempts: 200_000,
        }
    }
}

/// Which channel [`Api::get_chan`] should reserve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChanRequest {
    /// Any free channel (`MYRI_API0_ANY_CHAN`).
    Any,
    /// This one.
    Specific(u32),
}

/// Where [`Api::add_route`] should put a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteSlot {
    /// The next free id (`MYRI_API0_NEXT_ROUTE`).
    Next,
    /// This id (overwriting whatever was there).
    Id(u32),
}

/// What [`Api::take_back`] returns: the buffer that was sent.
#[derive(Debug)]
pub enum Reclaimed {
    /// A send buffer.
    Send(SendBuf),
    /// A receive buffer that was turned around.
    Recv(RecvBuf),
    /// Nothing: the send was by PIO from a buffer already given back.
    Nothing,
}

/// Where a send's payload comes from.
enum Payload<'a> {
    /// The buffer itself: handed to the board for a DMA (or copied by PIO) and given back,
    /// or kept for a ticket, when the send is done.
    Owned(HostBuf),
    /// Bytes from this offset of a buffer lent to the board, which keeps it.
    Lent(&'a LentBuf, usize),
    /// Bytes in the SRAM workspace at this address (seed 001, `gm_opiom_send`).
    Sram(u32),
    /// Pieces of the host's own memory, copied by PIO now, one after the other
    /// ([`Api::send_pio`]).
    Pio(&'a [&'a [u8]]),
}

impl Payload<'_> {
    /// Bus address of the payload's first byte.
    fn bus_addr(&self) -> u64 {
        match self {
            Payload::Owned(h) => h.bus_addr(),
            Payload::Lent(l, at) => l.bus_addr() + *at as u64,
            Payload::Sram(at) => u64::from(*at),
            Payload::Pio(_) => 0,
        }
    }
}

/// A user of one board. See the module documentation.
pub struct Api {
    unit: Arc<Unit>,
    layout: Layout,
    attempts: u32,
    /// This user's name in the SRAM allocator (seed 001, §3.1.4: a pid per segment).
    user: crate::gm::UserId,
}

fn before(a: u32, b: u32) -> bool {
    (b.wrapping_sub(a) as i32) > 0
}

impl Unit {
    /// Runs `f` on the board; the caller holds the unit's lock.
    fn board<R>(&self, sh: &mut Shared, f: impl FnOnce(&mut Board) -> R) -> R {
        let r = f(&mut sh.fw.board);
        // Under the lock, after the access: a poll that saw the board quiet before it
        // looks again (see `Unit::poll`).
        self.quiet.store(false, Ordering::Relaxed);
        r
    }

    fn read(&self, sh: &mut Shared, at: u32) -> Result<u32, ApiError> {
        let now = self.now();
        Ok(self.board(sh, |b| b.pci_read_u32(now, at))?)
    }

    fn write(&self, sh: &mut Shared, at: u32, v: u32) -> Result<(), ApiError> {
        let now = self.now();
        Ok(self.board(sh, |b| b.pci_write_u32(now, at, v))?)
    }

    /// Reads a word of the board under the unit's lock.
    fn read_once(&self, at: u32) -> Result<u32, ApiError> {
        self.read(&mut self.locked(), at)
    }

    /// Writes a word of the board under the unit's lock.
    fn write_once(&self, at: u32, v: u32) -> Result<(), ApiError> {
        self.write(&mut self.locked(), at, v)
    }

    fn layout(&self) -> Option<Layout> {
        self.layout
    }

    /// Posts a receive buffer to its channel, or keeps it if the channel is not in use.
    pub(crate) fn repost(&self, chan: u8, index: u16, host: HostBuf) {
        self.repost_locked(&mut self.locked(), chan, index, host);
    }

    fn repost_locked(&self, sh: &mut Shared, chan: u8, index: u16, host: HostBuf) {
        let c = &mut sh.st.chans[usize::from(chan)];
        let Some(layout) = self.layout().filter(|_| c.initialized) else {
            c.idle.push((index, host));
            return;
        };
        let at = layout.recv_slot(u32::from(chan), c.posted_count);
        let desc = hcb::RecvDescRepr {
            host: host.bus_addr(),
            capacity: host.len() as u32,
        }
        .to_bytes();
        c.posted.push_back((index, host.to_device()));
        c.posted_count = c.posted_count.wrapping_add(1);
        let posted = c.posted_count;
        let now = self.now();
        let chan_at = layout.recv_chan(u32::from(chan));
        self.board(sh, |b| {
            let _ = b.pci_write_bytes(at, &desc);
            let _ = b.pci_write_u32(now, chan_at + recv_chan::POSTED, posted);
        });
        self.kick();
    }

    /// Brings finished sends home: reads SENT across the PCI bus and gives back or keeps
    /// (for their tickets) the buffers of every send before it.
    fn reap_locked(&self, sh: &mut Shared) {
        let Some(layout) = self.layout() else { return };
        if let Ok(sent) = self.read(sh, layout.send + 8) {
            sh.st.sent = sent;
            sh.st.counts.shadow_refreshes += 1;
        }
        while let Some(front) = sh.st.in_flight.front() {
            if !before(front.seq, sh.st.sent) {
                break;
            }
            let f = sh.st.in_flight.pop_front().expect("front exists");
            // A lent buffer's reader token ends with the send.
            drop(f.lent);
            let host = f.host.or_else(|| f.buf.map(|d| d.reclaim()));
            if f.released {
                self.give_back(sh, f.origin, host);
            } else {
                sh.st.finished.push((f.seq, host, f.origin));
            }
        }
        // Lent buffers dropped while the board read them: free once it reads them no more.
        for (id, lent) in std::mem::take(&mut sh.st.returning) {
            match lent.try_unlend() {
                Ok(host) => sh.st.free_send.push((id, host)),
                Err(lent) => sh.st.returning.push((id, lent)),
            }
        }
    }

    fn give_back(&self, sh: &mut Shared, origin: Origin, host: Option<HostBuf>) {
        match (origin, host) {
            (Origin::Send(id), Some(h)) => sh.st.free_send.push((id, h)),
            (Origin::Recv(c, i), Some(h)) => self.repost_locked(sh, c, i, h),
            _ => {}
        }
    }

    pub(crate) fn release_ticket(&self, seq: u32) {
        let mut g = self.locked();
        let sh = &mut *g;
        // Most tickets are dropped right after their send: look from the newest.
        if let Some(f) = sh.st.in_flight.iter_mut().rev().find(|f| f.seq == seq) {
            f.released = true;
        } else if let Some(i) = sh.st.finished.iter().position(|f| f.0 == seq) {
            let (_, host, origin) = sh.st.finished.swap_remove(i);
            self.give_back(sh, origin, host);
        }
    }

    pub(crate) fn release_channel(&self, chan: u8) {
        let mut g = self.locked();
        let sh = &mut *g;
        let c = &mut sh.st.chans[usize::from(chan)];
        c.reserved = false;
        if c.initialized {
            c.initialized = false;
            if let Some(layout) = self.layout() {
                let _ = self.write(sh, layout.recv_chan(u32::from(chan)) + recv_chan::STATE, 0);
            }
        }
        self.drain_locked(&mut sh.st, chan);
        self.publish_chan(&sh.st, chan);
    }

    /// Discards completions nobody consumed (a released channel's leftovers), so the next
    /// user of the channel never sees them.
    fn drain_locked(&self, st: &mut UnitState, chan: u8) {
        let Some(poll) = st.poll.as_ref() else { return };
        let c = &mut st.chans[usize::from(chan)];
        while completed(poll, chan, c.consumed) {
            let Some((i, dev)) = c.posted.pop_front() else {
                break;
            };
            c.consumed = c.consumed.wrapping_add(1);
            c.idle.push((i, dev.reclaim()));
        }
    }
}

impl Api {
    /// Attaches to the board of `unit` (seed 000, `myri_api0_init`). The first user (or any
    /// user with `force_init`) brings the board out of reset, loads and starts the MCP, and
    /// sets up the send channel and route table with route 0; every user then shakes hands
    /// with the MCP and checks the HCB's signatures.
    pub fn init(unit: &Arc<Unit>, opts: InitOptions) -> Result<Api, ApiError> {
        let layout = unit
            .layout()
            .ok_or(ApiError::LayoutMismatch("sram too small for the hcb"))?;
        let (first, user) = {
            let mut g = unit.locked();
            g.st.users += 1;
            g.st.users_ever += 1;
            (
                opts.force_init || !g.st.mcp_loaded,
                crate::gm::UserId(g.st.users_ever),
            )
        };
        let api = Api {
            unit: unit.clone(),
            layout,
            attempts: opts.attempts.max(1),
            user,
        };
        if first {
            api.load(&opts.mcp)?;
        }
        let mut api = api;
        api.handshake()?;
        Ok(api)
    }

    /// Steps the MCP inline or lets a threaded one run; used while waiting for it.
    fn nudge(&self) {
        match self.unit.mode {
            Mode::Inline => {
                self.unit.poll(self.unit.now());
            }
            Mode::Threaded => {
                self.unit.kick();
                std::thread::yield_now();
            }
        }
    }

    fn load(&self, mcp: &McpConfig) -> Result<(), ApiError> {
        let unit = &self.unit;
        let now = unit.now();
        let image = mcp.image();
        {
            let mut g = unit.locked();
            unit.board(&mut g, |b| bring_up(b, now, &image))?;
        }
        // The lock is free while the MCP boots: inline, `nudge` steps it under the lock.
        let mut found = false;
        for _ in 0..self.attempts {
            self.nudge();
            if unit.read_once(HCB_PTR)? == self.layout.base {
                found = true;
                break;
            }
        }
        let mut g = unit.locked();
        let sh = &mut *g;
        if !found {
            sh.st.mcp_loaded = false;
            return Err(ApiError::NoMcp {
                attempts: self.attempts,
            });
        }
        // Channel 0 of the DMA controller sleeps on the first block of the MCP's ring; only
        // the host can write the pointer register (seed 002 §3.2).
        unit.write(sh, config::DMA_BASE, self.layout.dma_ring)?;
        // Buffers the previous MCP held come home (the board reset stopped its DMA).
        sh.st.routes = [false; NUM_ROUTES as usize];
        sh.st.routes[0] = true;
        sh.st.tail = 0;
        sh.st.sent = 0;
        for f in core::mem::take(&mut sh.st.in_flight) {
            let host = f.host.or_else(|| f.buf.map(|d| d.reclaim()));
            if f.released {
                unit.give_back(sh, f.origin, host);
            } else {
                sh.st
                    .finished
                    .push((f.seq.wrapping_sub(1 << 31), host, f.origin));
            }
        }
        let st = &mut sh.st;
        for c in 0..NUM_CHANNELS as u8 {
            let ch = &mut st.chans[usize::from(c)];
            ch.initialized = false;
            ch.posted_count = 0;
            ch.consumed = 0;
            let posted: Vec<_> = ch.posted.drain(..).collect();
            for (i, dev) in posted {
                ch.idle.push((i, dev.reclaim()));
            }
            unit.publish_chan(st, c);
        }
        if st.poll.is_none() {
            st.poll = Some(
                unit.mem
                    .share(0, unit::POLL_LEN)
                    .map_err(|_| ApiError::LayoutMismatch("poll page in use"))?,
            );
        }
        if let Some(p) = &st.poll {
            for at in (0..unit::POLL_LEN).step_by(4) {
                let _ = p.store_be(at, 0);
            }
            let _ = unit.poll_words.set(p.clone());
        }
        st.pio_threshold = mcp.pio_threshold.min(hcb::PIO_MAX as u32) as usize;
        st.mcp_loaded = true;
        Ok(())
    }

    /// Shakes hands with the MCP and checks the HCB (seed 000, `myri_api0_handshake`).
    pub fn handshake(&mut self) -> Result<(), ApiError> {
        let unit = &self.unit;
        let base = self.layout.base;
        let nonce = {
            let mut g = unit.locked();
            let st = &mut g.st;
            st.nonce = st.nonce.wrapping_add(0x9E37_79B9);
            st.nonce
        };
        unit.write_once(base + off::HANDSHAKE, nonce)?;
        unit.write_once(base + off::MCP_STATE, state::HELLO)?;
        let mut answered = false;
        for _ in 0..self.attempts {
            self.nudge();
            if unit.read_once(base + off::MCP_STATE)? == state::RUNNING
                && unit.read_once(base + off::HANDSHAKE)? == !nonce
            {
                answered = true;
                break;
            }
        }
        if !answered {
            unit.refusals.errors.fetch_add(1, Ordering::Relaxed);
            return Err(ApiError::HandshakeTimeout {
                attempts: self.attempts,
            });
        }
        for (at, expected) in hcb::signatures(&self.layout) {
            let found = unit.read_once(at)?;
            if found != expected {
                unit.refusals.errors.fetch_add(1, Ordering::Relaxed);
                return Err(ApiError::SignatureMismatch {
                    at,
                    expected,
                    found,
                });
            }
        }
        let geometry = [
            (off::VERSION, hcb::VERSION, "version"),
            (off::NUM_CHANNELS, NUM_CHANNELS as u32, "channel count"),
            (off::SEND_SLOTS, SEND_SLOTS, "send slots"),
            (off::RECV_SLOTS, RECV_SLOTS, "receive slots"),
            (off::NUM_ROUTES, NUM_ROUTES, "route count"),
        ];
        for (o, want, what) in geometry {
            if unit.read_once(base + o)? != want {
                return Err(ApiError::LayoutMismatch(what));
            }
        }
        Ok(())
    }

    /// The unit.
    pub fn unit(&self) -> &Arc<Unit> {
        &self.unit
    }

    fn error<T>(&self, e: ApiError) -> Result<T, ApiError> {
        let c = &self.unit.refusals;
        match e {
            ApiError::NoSendBuffers | ApiError::SendQueueFull | ApiError::Busy => {
                c.would_block.fetch_add(1, Ordering::Relaxed)
            }
            _ => c.errors.fetch_add(1, Ordering::Relaxed),
        };
        Err(e)
    }

    /// Reserves a receive channel (seed 000, `myri_api0_get_chan`).
    pub fn get_chan(&mut self, want: ChanRequest) -> Result<Channel, ApiError> {
        let mut g = self.unit.locked();
        let st = &mut g.st;
        let num = match want {
            ChanRequest::Specific(n) if n as usize >= NUM_CHANNELS => {
                return self.error(ApiError::ChannelOutOfRange(n));
            }
            ChanRequest::Specific(n) if st.chans[n as usize].reserved => {
                return self.error(ApiError::ChannelInUse(n as u8));
            }
            ChanRequest::Specific(n) => n as u8,
            ChanRequest::Any => match st.chans.iter().position(|c| !c.reserved) {
                Some(n) => n as u8,
                None => return self.error(ApiError::NoChannels),
            },
        };
        st.chans[usize::from(num)].reserved = true;
        Ok(Channel {
            num,
            unit: self.unit.clone(),
        })
    }

    /// Releases a channel (seed 000, `myri_api0_rele_chan`); dropping it does the same.
    pub fn rele_chan(&mut self, chan: Channel) {
        drop(chan);
    }

    fn own_channel(&self, chan: &Channel) -> Result<(), ApiError> {
        if !Arc::ptr_eq(&chan.unit, &self.unit) {
            return self.error(ApiError::ForeignChannel(chan.num));
        }
        Ok(())
    }

    /// Makes a reserved channel ready to receive: posts its buffers to the MCP and tells
    /// it where the channel's poll structure is (seed 000, `myri_api0_init_recv_chan`).
    pub fn init_recv_chan(&mut self, chan: &Channel) -> Result<(), ApiError> {
        self.own_channel(chan)?;
        let unit = &self.unit;
        let mut g = unit.locked();
        let sh = &mut *g;
        let c = chan.num;
        unit.drain_locked(&mut sh.st, c);
        let ch = &mut sh.st.chans[usize::from(c)];
        while usize::from(ch.created) < RECV_SLOTS as usize {
            let i = ch.created;
            let host = unit
                .mem
                .claim(DmaLayout::recv_buf(c, usize::from(i)), BUF_LEN)
                .map_err(|_| ApiError::LayoutMismatch("receive buffers in use"))?;
            ch.idle.push((i, host));
            ch.created += 1;
        }
        let at = self.layout.recv_chan(u32::from(c));
        let poll = unit.mem.bus_base() + DmaLayout::poll(c) as u64;
        unit.write(sh, at + recv_chan::POLL_HI, (poll >> 32) as u32)?;
        unit.write(sh, at + recv_chan::POLL_LO, poll as u32)?;
        let done = unit.read(sh, at + recv_chan::DONE)?;
        let ch = &mut sh.st.chans[usize::from(c)];
        if !ch.initialized && ch.posted.is_empty() {
            ch.consumed = done;
            ch.posted_count = done;
        }
        ch.initialized = true;
        let idle = core::mem::take(&mut ch.idle);
        unit.publish_chan(&sh.st, c);
        for (i, host) in idle {
            unit.repost_locked(sh, c, i, host);
        }
        unit.write(sh, at + recv_chan::STATE, 1)?;
        Ok(())
    }

    /// A free send buffer (seed 000, `myri_api0_get_send_buffer`). Reaps finished sends
    /// first if none is free; [`ApiError::NoSendBuffers`] if still none.
    pub fn get_send_buffer(&mut self) -> Result<SendBuf, ApiError> {
        let unit = &self.unit;
        let mut g = unit.locked();
        let sh = &mut *g;
        if sh.st.free_send.is_empty() {
            if usize::from(sh.st.send_created) < unit::SEND_BUFS {
                let id = sh.st.send_created;
                let host = unit
                    .mem
                    .claim(DmaLayout::send_buf(usize::from(id)), BUF_LEN)
                    .map_err(|_| ApiError::LayoutMismatch("send buffers in use"))?;
                sh.st.send_created += 1;
                return Ok(SendBuf {
                    id,
                    host: Some(host),
                    unit: Some(unit.clone()),
                });
            }
            unit.reap_locked(sh);
        }
        match sh.st.free_send.pop() {
            Some((id, host)) => Ok(SendBuf {
                id,
                host: Some(host),
                unit: Some(unit.clone()),
            }),
            None => {
                drop(g);
                self.error(ApiError::NoSendBuffers)
            }
        }
    }

    /// Whether [`Api::get_send_buffer`] could hand out more than `reserve` send buffers
    /// now (finished sends are reaped only when the free ones alone do not say so): a
    /// caller that must keep some for packets of its own (a protocol's acknowledgements)
    /// stops taking buffers for long-lived uses at its reserve.
    pub fn send_buffers_above(&mut self, reserve: usize) -> bool {
        let unit = &self.unit;
        let mut g = unit.locked();
        let sh = &mut *g;
        let free = |sh: &unit::Shared| {
            unit::SEND_BUFS - usize::from(sh.st.send_created) + sh.st.free_send.len()
        };
        if free(sh) > reserve {
            return true;
        }
        unit.reap_locked(sh);
        free(sh) > reserve
    }

    /// Gives back a send buffer that was not sent (seed 000, `myri_api0_free_send`).
    /// Dropping it does the same. A buffer that was sent is freed by dropping its ticket.
    pub fn free_send(&mut self, buf: SendBuf) {
        drop(buf);
    }

    /// Sends `len` bytes of `buf` to channel `chan` of the board at the end of `route`
    /// (seed 000, `myri_api0_send_route`). Small payloads go by PIO into the slot's buffer
    /// in SRAM; larger ones are DMA'd by the board from `buf` itself, with no copy.
    pub fn send(
        &mut self,
        chan: u8,
        route: RouteId,
        buf: SendBuf,
        len: usize,
    ) -> Result<Ticket, SendError<SendBuf>> {
        self.send_inline(chan, route, &[], buf, len)
    }

    /// Like [`Api::send`], with `header` (a reliable protocol's header, say) sent inline
    /// from the slot's PIO buffer ahead of the payload DMA'd from `buf`: the packet is
    /// `header` then `buf[..len]`, gathered by the board with no copy on the host.
    pub fn send_inline(
        &mut self,
        chan: u8,
        route: RouteId,
        header: &[u8],
        buf: SendBuf,
        len: usize,
    ) -> Result<Ticket, SendError<SendBuf>> {
        let seq = self.send_buf(chan, route, header, buf, len, false)?;
        Ok(self.ticket(seq))
    }

    /// Like [`Api::send`], and the buffer goes back to the free list once the board has
    /// sent it, as if the ticket had been dropped at once (seed 000,
    /// `myri_api0_send_route` then `myri_api0_free_send`), without making one.
    pub fn send_and_release(
        &mut self,
        chan: u8,
        route: RouteId,
        buf: SendBuf,
        len: usize,
    ) -> Result<(), SendError<SendBuf>> {
        self.send_buf(chan, route, &[], buf, len, true).map(drop)
    }

    /// Like [`Api::send_inline`], releasing the buffer as [`Api::send_and_release`] does.
    pub fn send_inline_and_release(
        &mut self,
        chan: u8,
        route: RouteId,
        header: &[u8],
        buf: SendBuf,
        len: usize,
    ) -> Result<(), SendError<SendBuf>> {
        self.send_buf(chan, route, header, buf, len, true).map(drop)
    }

    /// Sends `header` (inline, from the slot's PIO buffer) then `range` of a lent buffer,
    /// which the board reads by DMA while the host keeps it ([`SendBuf::lend`]): a
    /// reliable protocol sends and resends a message from where the application wrote it,
    /// with no copy. The buffer stays lent until the host takes it back
    /// ([`LentSendBuf::try_unlend`]), which waits for every send of it to finish. The
    /// ticket tells whether the board still reads the buffer for this send
    /// ([`Api::buffer_busy`]); it holds nothing (dropping it costs nothing, and
    /// [`Api::take_back`] gives [`Reclaimed::Nothing`] once the send is done). A payload
    /// that fits the PIO threshold is copied by PIO, as for any send.
    pub fn send_lent(
        &mut self,
        chan: u8,
        route: RouteId,
        header: &[u8],
        buf: &LentSendBuf,
        range: core::ops::Range<usize>,
    ) -> Result<Ticket, ApiError> {
        let seq = self.enqueue_lent(chan, route, header, buf, range)?;
        Ok(Ticket {
            seq,
            unit: self.unit.clone(),
            live: false,
        })
    }

    /// Like [`Api::send_lent`], with no ticket, for a caller that learns the board is done
    /// with the buffer from [`LentSendBuf::try_unlend`] alone (the ticket of a lent send
    /// holds nothing; making one costs two atomic operations on the unit's count).
    pub fn send_lent_untracked(
        &mut self,
        chan: u8,
        route: RouteId,
        header: &[u8],
        buf: &LentSendBuf,
        range: core::ops::Range<usize>,
    ) -> Result<(), ApiError> {
        self.enqueue_lent(chan, route, header, buf, range).map(drop)
    }

    /// Sends `header` then the pieces of `payload` in turn by PIO, written into the send
    /// slot's SRAM buffer straight from where they are in host memory (a gather: no copy
    /// on the host, no send buffer taken); all are free again when this returns. For
    /// packets no longer than the PIO threshold ([`Api::pio_threshold`]), such as a
    /// reliable protocol's acknowledgements and short messages behind their headers; a
    /// longer one is refused ([`ApiError::TooLong`]) and nothing is sent.
    pub fn send_pio(
        &mut self,
        chan: u8,
        route: RouteId,
        header: &[u8],
        payload: &[&[u8]],
    ) -> Result<(), ApiError> {
        let len = payload.iter().map(|p| p.len()).sum();
        self.enqueue_borrowed(chan, route, header, Payload::Pio(payload), len)
            .map(drop)
    }

    /// The longest packet (inline header and payload together) the board takes by PIO:
    /// what [`Api::send_pio`] can send.
    pub fn pio_threshold(&self) -> usize {
        self.unit.locked().st.pio_threshold
    }

    fn enqueue_lent(
        &mut self,
        chan: u8,
        route: RouteId,
        header: &[u8],
        buf: &LentSendBuf,
        range: core::ops::Range<usize>,
    ) -> Result<u32, ApiError> {
        if !buf.is_of(&self.unit) {
            return self.error(ApiError::ForeignBuffer);
        }
        let Some(lent) = buf.lent.as_ref() else {
            return self.error(ApiError::ForeignBuffer);
        };
        if range.start > range.end || range.end > lent.len() {
            return self.error(ApiError::TooLong {
                len: range.end,
                max: lent.len(),
            });
        }
        let len = range.len();
        self.enqueue_borrowed(chan, route, header, Payload::Lent(lent, range.start), len)
    }

    /// Checks and enqueues a data send whose payload the host keeps (a lent buffer the
    /// board reads by DMA, or pieces PIO copies now): a refusal has nothing to give back,
    /// and the board's finishing it releases nothing. Inlined into both: out of line it
    /// cost each short packet a call with the payload passed by value (callgrind).
    #[inline(always)]
    fn enqueue_borrowed(
        &mut self,
        chan: u8,
        route: RouteId,
        header: &[u8],
        payload: Payload<'_>,
        len: usize,
    ) -> Result<u32, ApiError> {
        self.check_send(chan, route, header.len() + len)?;
        self.enqueue(
            crate::frame::SUBTYPE_DATA,
            chan,
            route,
            header,
            payload,
            len,
            Origin::Lent,
            true,
        )
        .map_err(|(e, _)| e)
    }

    fn ticket(&self, seq: u32) -> Ticket {
        Ticket {
            seq,
            unit: self.unit.clone(),
            live: true,
        }
    }

    fn send_buf(
        &mut self,
        chan: u8,
        route: RouteId,
        header: &[u8],
        mut buf: SendBuf,
        len: usize,
        released: bool,
    ) -> Result<u32, SendError<SendBuf>> {
        if !buf.is_of(&self.unit) {
            return Err(SendError {
                error: self.error::<()>(ApiError::ForeignBuffer).unwrap_err(),
                buf,
            });
        }
        if let Err(error) = self.check_send(chan, route, header.len() + len) {
            return Err(SendError { error, buf });
        }
        let host = buf.host.take().expect("a live SendBuf holds its buffer");
        let origin = Origin::Send(buf.id);
        match self.enqueue(
            crate::frame::SUBTYPE_DATA,
            chan,
            route,
            header,
            Payload::Owned(host),
            len,
            origin,
            released,
        ) {
            Ok(seq) => Ok(seq),
            Err((error, host)) => {
                buf.host = host;
                Err(SendError { error, buf })
            }
        }
    }

    /// Sends a received buffer back out (seed 000, Buffers: "received packets can be turned
    /// around and sent as send packets"). When the board is done with it, it goes back to
    /// its channel.
    pub fn send_recv_buffer(
        &mut self,
        chan: u8,
        route: RouteId,
        buf: RecvBuf,
        len: usize,
    ) -> Result<Ticket, SendError<RecvBuf>> {
        let seq = self.turn_around(chan, route, buf, len, false)?;
        Ok(self.ticket(seq))
    }

    /// Like [`Api::send_recv_buffer`], with no ticket: the buffer goes back to its
    /// channel once the board has sent it.
    pub fn send_recv_buffer_and_release(
        &mut self,
        chan: u8,
        route: RouteId,
        buf: RecvBuf,
        len: usize,
    ) -> Result<(), SendError<RecvBuf>> {
        self.turn_around(chan, route, buf, len, true).map(drop)
    }

    fn turn_around(
        &mut self,
        chan: u8,
        route: RouteId,
        mut buf: RecvBuf,
        len: usize,
        released: bool,
    ) -> Result<u32, SendError<RecvBuf>> {
        if !Arc::ptr_eq(&buf.unit, &self.unit) {
            return Err(SendError {
                error: self.error::<()>(ApiError::ForeignBuffer).unwrap_err(),
                buf,
            });
        }
        if let Err(error) = self.check_send(chan, route, len) {
            return Err(SendError { error, buf });
        }
        let host = buf.host.take().expect("a live RecvBuf holds its buffer");
        let origin = Origin::Recv(buf.chan, buf.index);
        match self.enqueue(
            crate::frame::SUBTYPE_DATA,
            chan,
            route,
            &[],
            Payload::Owned(host),
            len,
            origin,
            released,
        ) {
            Ok(seq) => Ok(seq),
            Err((error, host)) => {
                buf.host = host;
                Err(SendError { error, buf })
            }
        }
    }

    fn check_send(&self, chan: u8, route: RouteId, len: usize) -> Result<(), ApiError> {
        if usize::from(chan) >= NUM_CHANNELS {
            return self.error(ApiError::ChannelOutOfRange(chan.into()));
        }
        if len > BUF_LEN {
            return self.error(ApiError::TooLong { len, max: BUF_LEN });
        }
        if route.0 >= NUM_ROUTES {
            return self.error(ApiError::UnknownRoute(route));
        }
        Ok(())
    }

    /// Puts a send in the send channel under the unit's lock; returns its sequence number.
    /// With `released`, the buffer is given back when the board has sent it. `subtype` is
    /// the frame's ([`crate::frame::SUBTYPE_DATA`], or GM's directed one).
    #[allow(clippy::too_many_arguments)]
    fn enqueue(
        &mut self,
        subtype: u8,
        chan: u8,
        route: RouteId,
        header: &[u8],
        payload: Payload<'_>,
        len: usize,
        origin: Origin,
        released: bool,
    ) -> Result<u32, (ApiError, Option<HostBuf>)> {
        let host_back = |p: Payload<'_>| match p {
            Payload::Owned(h) => Some(h),
            Payload::Lent(..) | Payload::Sram(_) | Payload::Pio(_) => None,
        };
        let unit = &self.unit;
        let l = self.layout;
        let mut g = unit.locked();
        let sh = &mut *g;
        if !sh.st.routes[route.0 as usize] {
            drop(g);
            return Err((
                self.error::<()>(ApiError::UnknownRoute(route)).unwrap_err(),
                host_back(payload),
            ));
        }
        if sh.st.tail.wrapping_sub(sh.st.sent) >= SEND_SLOTS {
            // The shadow says full: look at the real SENT (seed 000, Send Channel).
            unit.reap_locked(sh);
            if sh.st.tail.wrapping_sub(sh.st.sent) >= SEND_SLOTS {
                drop(g);
                unit.refusals.would_block.fetch_add(1, Ordering::Relaxed);
                return Err((ApiError::SendQueueFull, host_back(payload)));
            }
        }
        if header.len() > hcb::PIO_MAX {
            drop(g);
            unit.refusals.errors.fetch_add(1, Ordering::Relaxed);
            return Err((
                ApiError::TooLong {
                    len: header.len(),
                    max: hcb::PIO_MAX,
                },
                host_back(payload),
            ));
        }
        let seq = sh.st.tail;
        let sram = matches!(payload, Payload::Sram(_));
        let pio = !sram && header.len() + len <= sh.st.pio_threshold;
        let payload_at = l.pio_buf(seq) + hcb::ROUTE_AREA + HEADER_LEN as u32;
        let (flags, wire_len, inline) = if pio {
            (hcb::slot_flags::PIO, header.len() + len, 0)
        } else if sram {
            (hcb::slot_flags::SRAM, len, header.len())
        } else if let Payload::Pio(_) = payload {
            // PIO from the host's memory, too long for it: nothing to DMA from.
            let max = sh.st.pio_threshold;
            drop(g);
            unit.refusals.errors.fetch_add(1, Ordering::Relaxed);
            let len = header.len() + len;
            return Err((ApiError::TooLong { len, max }, None));
        } else {
            (0, len, header.len())
        };
        let flags = flags | (u32::from(subtype) << hcb::slot_flags::SUBTYPE_SHIFT);
        let slot = hcb::SendSlotRepr {
            flags,
            len: wire_len as u32,
            chan: u32::from(chan),
            route: route.0,
            host: payload.bus_addr(),
            inline_len: inline as u32,
            seq,
        }
        .to_bytes();
        let now = unit.now();
        // The buffer is the board's before the slot that names it is published: the
        // Release hand-over must come first, or a running MCP could DMA from a page the
        // host still owns (it would fault, not race, but the send would be lost).
        // A lent buffer stays lent: the send holds a reader token until the board is done
        // (a PIO send copies the bytes now and needs none).
        let pio_bytes: Option<&[u8]> = match (&payload, pio) {
            (Payload::Lent(l, at), true) => Some(&l.as_slice()[*at..*at + len]),
            _ => None,
        };
        let pio_parts: &[&[u8]] = match payload {
            Payload::Pio(parts) => parts,
            _ => &[],
        };
        let (buf, host, lent) = match payload {
            Payload::Owned(h) if pio => (None, Some(h), None),
            Payload::Owned(h) => (Some(h.to_device()), None, None),
            Payload::Lent(_, _) if pio => (None, None, None),
            Payload::Lent(l, _) => (None, None, Some(l.reader())),
            Payload::Sram(_) | Payload::Pio(_) => (None, None, None),
        };
        let written = unit.board(sh, |b| {
            if !header.is_empty() {
                b.pci_write_bytes(payload_at, header)?;
            }
            // The payload written now, if any: the host's bytes, a lent range, or PIO's
            // pieces one after the other.
            let one;
            let parts = match host.as_ref().map(|h| &h.as_slice()[..len]).or(pio_bytes) {
                Some(bytes) => {
                    one = [bytes];
                    &one[..]
                }
                None => pio_parts,
            };
            let mut at = payload_at + header.len() as u32;
            for part in parts {
                b.pci_write_bytes(at, part)?;
                at += part.len() as u32;
            }
            b.pci_write_bytes(l.send_slot(seq), &slot)?;
            b.pci_write_u32(now, l.send, seq.wrapping_add(1))
        });
        if let Err(e) = written {
            drop(g);
            unit.refusals.errors.fetch_add(1, Ordering::Relaxed);
            // Nothing was published: the board never saw the buffer.
            let host = host.or_else(|| buf.map(|d| d.reclaim()));
            drop(lent);
            return Err((e.into(), host));
        }
        let st = &mut sh.st;
        st.tail = seq.wrapping_add(1);
        st.in_flight.push_back(InFlight {
            seq,
            origin,
            buf,
            host,
            lent,
            released,
        });
        st.counts.sends += 1;
        st.counts.pio_sends += u64::from(pio);
        drop(g);
        unit.kick();
        Ok(seq)
    }

    /// Whether the board is still sending the ticket's buffer (seed 000,
    /// `myri_api0_buffer_busy_p`).
    pub fn buffer_busy(&mut self, ticket: &Ticket) -> bool {
        let mut g = self.unit.locked();
        let sh = &mut *g;
        if sh.st.in_flight.iter().any(|f| f.seq == ticket.seq) {
            self.unit.reap_locked(sh);
        }
        sh.st.in_flight.iter().any(|f| f.seq == ticket.seq)
    }

    /// The ticket's buffer, once the board is done with it, to reuse or send again.
    pub fn take_back(&mut self, mut ticket: Ticket) -> Result<Reclaimed, (ApiError, Ticket)> {
        let unit = self.unit.clone();
        let mut g = unit.locked();
        let sh = &mut *g;
        if sh.st.in_flight.iter().any(|f| f.seq == ticket.seq) {
            unit.reap_locked(sh);
        }
        let Some(i) = sh.st.finished.iter().position(|f| f.0 == ticket.seq) else {
            if !ticket.live && !sh.st.in_flight.iter().any(|f| f.seq == ticket.seq) {
                // A lent send's ticket: done, and it held nothing.
                return Ok(Reclaimed::Nothing);
            }
            drop(g);
            unit.refusals.would_block.fetch_add(1, Ordering::Relaxed);
            return Err((ApiError::Busy, ticket));
        };
        ticket.live = false;
        let (_, host, origin) = sh.st.finished.swap_remove(i);
        drop(g);
        Ok(match (origin, host) {
            (Origin::Send(id), Some(h)) => Reclaimed::Send(SendBuf {
                id,
                host: Some(h),
                unit: Some(unit.clone()),
            }),
            (Origin::Recv(c, i), Some(h)) => Reclaimed::Recv(RecvBuf {
                chan: c,
                index: i,
                len: 0,
                csums: (0, 0),
                host: Some(h),
                unit: unit.clone(),
            }),
            _ => Reclaimed::Nothing,
        })
    }

    /// Looks at what the board has sent and frees what it can (seed 000,
    /// `myri_api0_reap_sent_l`).
    pub fn reap_sent(&mut self) {
        self.unit.reap_locked(&mut self.unit.locked());
    }

    /// Sends not yet finished by the board, as well as can be told (seed 000,
    /// `myri_api0_num_pending`): it may show too many, never too few.
    pub fn num_pending(&mut self) -> usize {
        let mut g = self.unit.locked();
        self.unit.reap_locked(&mut g);
        g.st.tail.wrapping_sub(g.st.sent) as usize
    }

    fn channel_state(&self, chan: &Channel) -> Result<(), ApiError> {
        self.own_channel(chan)?;
        if !self.unit.locked().st.chans[usize::from(chan.num)].initialized {
            return self.error(ApiError::NotInitialized(chan.num));
        }
        Ok(())
    }

    /// Packets waiting on a channel (seed 000, `myri_api0_recv_poll`).
    pub fn recv_poll(&mut self, chan: &Channel) -> Result<usize, ApiError> {
        self.channel_state(chan)?;
        let g = self.unit.locked();
        let st = &g.st;
        let Some(poll) = st.poll.as_ref() else {
            return Ok(0);
        };
        let consumed = st.chans[usize::from(chan.num)].consumed;
        let ready = (0..RECV_SLOTS)
            .take_while(|&i| completed(poll, chan.num, consumed.wrapping_add(i)))
            .count();
        Ok(ready)
    }

    /// The next packet on a channel, if one has arrived (seed 000, `myri_api0_recv`): a
    /// view of the buffer the board DMA'd it into.
    ///
    /// Most calls find nothing: those are told from the channel's poll word alone, with no
    /// lock and no call (this part is inline). A hint made stale by another user's
    /// receive on the channel only sends the call down the locked path, which looks again.
    #[inline]
    pub fn recv(&mut self, chan: &Channel) -> Result<Option<RecvBuf>, ApiError> {
        if Arc::ptr_eq(&chan.unit, &self.unit) {
            let unit = &self.unit;
            let hint = unit.recv_hint[usize::from(chan.num)].load(Ordering::Acquire);
            if hint & unit::RECV_READY != 0
                && let Some(poll) = unit.poll_words.get()
                && !completed(poll, chan.num, hint as u32)
            {
                return Ok(None);
            }
        }
        self.recv_locked(chan)
    }

    /// [`Api::recv`] past its quick test: under the unit's lock.
    #[inline(never)]
    fn recv_locked(&mut self, chan: &Channel) -> Result<Option<RecvBuf>, ApiError> {
        self.own_channel(chan)?;
        let unit = &self.unit;
        let mut g = unit.locked();
        let sh = &mut *g;
        let st = &mut sh.st;
        if !st.chans[usize::from(chan.num)].initialized {
            drop(g);
            return self.error(ApiError::NotInitialized(chan.num));
        }
        let Some(poll) = st.poll.as_ref() else {
            return Ok(None);
        };
        let c = &st.chans[usize::from(chan.num)];
        let Some(record) = completion(poll, chan.num, c.consumed) else {
            return Ok(None);
        };
        let len = record.len() as usize;
        let c = &mut st.chans[usize::from(chan.num)];
        let Some((index, dev)) = c.posted.pop_front() else {
            return Ok(None);
        };
        c.consumed = c.consumed.wrapping_add(1);
        st.counts.recvs += 1;
        unit.publish_chan(st, chan.num);
        let host = dev.reclaim();
        if len > host.len() {
            let capacity = host.len();
            unit.repost_locked(sh, chan.num, index, host);
            drop(g);
            return self.error(ApiError::CorruptCompletion {
                chan: chan.num,
                len,
                capacity,
            });
        }
        Ok(Some(RecvBuf {
            chan: chan.num,
            index,
            len,
            csums: (record.sender, record.landed()),
            host: Some(host),
            unit: unit.clone(),
        }))
    }

    /// Gives a received buffer back to its channel (seed 000, `myri_api0_free_recv`).
    /// Dropping it does the same.
    pub fn free_recv(&mut self, buf: RecvBuf) {
        drop(buf);
    }

    /// Puts a route in the board's route table (seed 000, `myri_api0_add_route`).
    pub fn add_route(&mut self, slot: RouteSlot, route: &Route) -> Result<RouteId, ApiError> {
        let mut g = self.unit.locked();
        let id = match slot {
            RouteSlot::Id(id) if id == 0 || id >= NUM_ROUTES => {
                drop(g);
                return self.error(ApiError::RouteIdOutOfRange(id));
            }
            RouteSlot::Id(id) => id,
            RouteSlot::Next => match (1..NUM_ROUTES).find(|&i| !g.st.routes[i as usize]) {
                Some(id) => id,
                None => {
                    drop(g);
                    return self.error(ApiError::RouteTableFull);
                }
            },
        };
        let at = self.layout.route(id);
        let mut entry = [0u8; 8 + hcb::MAX_ROUTE];
        entry[4..8].copy_from_slice(&(route.len() as u32).to_be_bytes());
        entry[8..8 + route.len()].copy_from_slice(route.as_bytes());
        let now = self.unit.now();
        // Invalid while rewritten, valid last: the MCP never uses half a route.
        self.unit.board(&mut g, |b| {
            b.pci_write_u32(now, at, 0)?;
            b.pci_write_bytes(at + 4, &entry[4..])?;
            b.pci_write_u32(now, at, 1)
        })?;
        g.st.routes[id as usize] = true;
        Ok(RouteId(id))
    }

    /// Loads every route of a route file, at the ids it names.
    pub fn load_routes(&mut self, file: &RouteFile) -> Result<Vec<RouteId>, ApiError> {
        file.entries
            .iter()
            .map(|(id, route, _)| self.add_route(RouteSlot::Id(id.0), route))
            .collect()
    }

    /// Lets the board work: in inline mode, runs the hardware and the MCP at `now`. Returns
    /// whether the MCP did anything.
    pub fn progress(&mut self, now: Time) -> bool {
        match self.unit.mode {
            // `poll` tells the unit the time.
            Mode::Inline => self.unit.poll(now),
            Mode::Threaded => {
                self.unit.set_now(now);
                false
            }
        }
    }

    /// Whether [`Api::progress`] would do nothing at any time from now until a packet
    /// reaches the board or a user calls the API: the last progress found nothing to do
    /// and nothing due (a few loads, no lock, no clock). An inline driver's idle loop can
    /// test this first and read its clock and call `progress` only when it is false:
    ///
    /// ```
    /// # fn idle_loop(api: &mut myri_mcp::Api, clock: impl Fn() -> myri_device::Time) {
    /// if !api.is_quiet() {
    ///     api.progress(clock());
    /// }
    /// # }
    /// ```
    pub fn is_quiet(&self) -> bool {
        self.unit.mode == Mode::Inline && self.unit.is_quiet()
    }

    /// When the board will next do something by itself (inline mode: when to call
    /// [`Api::progress`] again if nothing else happens).
    pub fn next_deadline(&self) -> Option<Time> {
        let now = self.unit.now();
        self.unit.locked().fw.next_deadline(now)
    }

    /// The MCP's counters, read from the HCB across the PCI bus.
    pub fn mcp_counters(&mut self) -> Result<McpCounters, ApiError> {
        let mut c = McpCounters::default();
        for (i, v) in c.values.iter_mut().enumerate() {
            *v = self.unit.read_once(self.layout.counter(i as u32))?;
        }
        Ok(c)
    }
}

impl Drop for Api {
    fn drop(&mut self) {
        let mut g = self.unit.locked();
        g.st.users = g.st.users.saturating_sub(1);
        // The user goes: its SRAM segments are released (seed 001, §3.1.4).
        if let Some(a) = g.st.gm.sram.as_mut() {
            a.release_user(self.user);
        }
    }
}
